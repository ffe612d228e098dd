//! Reloading the configuration while running (SIGHUP, `POST /-/reload`).
//!
//! The file is read and validated as at start-up, secrets included. A configuration with any
//! problem changes nothing: every problem is logged, `skewwatch_config_last_reload_successful`
//! turns 0, and the previous configuration keeps running. A good one is compared with the one
//! in force part by part ([`crate::app::Config`]):
//!
//! - what changed in [`Live`] is applied everywhere it acts: the bearer
//!   token at once; detector thresholds and alert timing in the pipeline, which keeps its open
//!   window, baselines and alert state (see [`crate::pipeline`]); alert delivery, whose
//!   receivers are rebuilt while the old ones finish what they owe;
//! - what changed in [`Startup`](crate::app::Startup) is reported as needing a restart and
//!   not applied at all: the running value is kept, so the next reload reports it again until
//!   the agent restarts.
//!
//! Both lists are computed by comparing the parts field by field
//! ([`crate::config::part::Part`]), never kept by hand; and applying is written against the
//! type as well: `apply_live` destructures [`Live`] without `..`, so a
//! field added to it does not compile until it says where it is put in force (ADR 005).

use prometheus::{IntGauge, Registry};

use super::{ConfigSource, Live, Running};
use crate::app::Config;
use crate::clock::wall_now;
use crate::config::part::{Part, ReloadReport};
use crate::config::validate::exposure_problems;
use crate::config::{ConfigError, Problem};
use crate::http::admin::ReloadOutcome;
use crate::telemetry::Registrar;

/// The reload's metrics: whether the last one succeeded, and when the configuration in force
/// was loaded.
#[derive(Debug, Clone)]
pub struct ReloadMetrics {
    successful: IntGauge,
    success_timestamp: IntGauge,
}

impl ReloadMetrics {
    /// Registers the reload's metrics in `registry`, as of a successful load now (the start).
    pub fn register(registry: &Registry) -> prometheus::Result<ReloadMetrics> {
        let r = Registrar(registry);
        let m = ReloadMetrics {
            successful: r.gauge(
                "skewwatch_config_last_reload_successful",
                "1 when the last configuration reload succeeded (or none was tried), 0 when it failed and the previous configuration still runs.",
            )?,
            success_timestamp: r.gauge(
                "skewwatch_config_last_reload_success_timestamp_seconds",
                "When the configuration in force was loaded (start or last successful reload), unix seconds.",
            )?,
        };
        m.succeeded();
        Ok(m)
    }

    /// 1 when the last reload succeeded (or none was tried), else 0.
    pub fn successful(&self) -> i64 {
        self.successful.get()
    }

    fn succeeded(&self) {
        self.successful.set(1);
        self.success_timestamp.set(wall_now() as i64);
    }

    fn failed(&self) {
        self.successful.set(0);
    }
}

/// The paths that differ between the configuration in force and `new`: applied (live) and
/// restart-only.
pub fn compare(running: &Config, new: &Config) -> ReloadReport {
    ReloadReport {
        applied: running.live.changes(&new.live),
        restart: running.startup.changes(&new.startup),
    }
}

/// Reads `source` and applies it to `running`.
pub(super) async fn apply(running: &mut Running, source: &ConfigSource) -> ReloadOutcome {
    let new = match source.load() {
        Ok(c) => c,
        Err(error) => {
            running.control.metrics.reload.failed();
            tracing::error!(
                error = %error,
                "Reloading the configuration failed; the previous configuration keeps running."
            );
            return Err(error);
        }
    };
    if let Err(error) = exposure_after(running, &new) {
        running.control.metrics.reload.failed();
        tracing::error!(
            error = %error,
            "Reload refused: it would leave a listener open to the network without a token; \
             the previous configuration keeps running."
        );
        return Err(error);
    }
    let report = compare(&running.control.config, &new);
    apply_live(running, new.live).await;
    running.control.metrics.reload.succeeded();
    if report.restart.is_empty() {
        tracing::info!(applied = %report.applied_list(), "Configuration reloaded.");
    } else {
        tracing::warn!(
            applied = %report.applied_list(),
            needs_restart = %report.restart_list(),
            "Configuration reloaded; some settings need a restart to apply."
        );
    }
    Ok(report)
}

/// Puts the live part `new` in force everywhere each of its fields acts, and keeps it as the
/// configuration in force. The pattern names every field of [`Live`] (no `..`): a field added
/// there does not compile until it is applied here, as [`Part::changed`] already names it in
/// the report.
async fn apply_live(running: &mut Running, new: Live) {
    let old = std::mem::replace(&mut running.control.config.live, new.clone());
    let Live {
        token,
        detectors,
        alerting,
    } = new;
    if token != old.token {
        // The HTTP guards read it on every request.
        running.control.token.send_replace(token);
    }
    if detectors != old.detectors {
        // The pipeline keeps its open window, baselines and alert state.
        running.reconfigure_engine(detectors).await;
    }
    if alerting != old.alerting {
        // New receivers from the configuration now in force; the old ones finish what they
        // owe.
        running.replace_delivery().await;
    }
}

/// The exposure check of start-up, judged against the listeners actually bound (a reload
/// never moves them) with the token and `auth.allow_unauthenticated` the agent would run with
/// after the reload: the new token (live), the running `allow_unauthenticated` (start-up
/// only). The new file's own listeners do not count, since they are not applied.
fn exposure_after(running: &Running, new: &Config) -> Result<(), ConfigError> {
    let bound = running.addrs;
    let problems = exposure_problems(
        bound.http,
        bound.statsd,
        new.live.token.is_some(),
        running.control.config.startup.allow_unauthenticated,
    );
    if problems.is_empty() {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        origin: "reload".into(),
        problems: problems
            .into_iter()
            .map(|p| Problem {
                why: format!(
                    "{} (judged against the listener as bound: a reload does not move it, so \
                     it cannot drop the token it needs; restart the agent to change both)",
                    p.why
                ),
                ..p
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_and_scrape_jobs_need_a_restart() {
        let old = Config::embedded();
        let yaml = "statsd:\n  mappings:\n    - match: a.*\n      group: g\n      shard: $1\n\
                    scrape:\n  - name: t\n    url: http://127.0.0.1:9/metrics\n    metrics: [x_total]\n";
        let new = Config::from_yaml(yaml, "t").unwrap();
        let r = compare(&old, &new);
        assert_eq!(r.restart, ["statsd.mappings", "scrape"]);
        assert!(r.applied.is_empty());
    }

    #[test]
    fn recording_threads_and_caps_need_a_restart() {
        let old = Config::embedded();
        let new = Config::from_yaml(
            "window:\n  record_threads: 2\nlimits:\n  max_groups: 7\n  exported_keys_per_group: 3\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            compare(&old, &new).restart,
            [
                "limits.max_groups",
                "limits.exported_keys_per_group",
                "window.record_threads"
            ]
        );
    }

    #[test]
    fn detectors_alerting_and_the_token_are_applied() {
        let old = Config::embedded();
        let env = |n: &str| (n == "T").then(|| "s3cret".to_owned());
        let new = Config::from_yaml_with_env(
            "auth:\n  bearer_token_env: T\ndetectors:\n  error_surge:\n    min_requests: 500\n\
             alerting:\n  resend_interval_secs: 30\n",
            "t",
            &env,
        )
        .unwrap();
        let r = compare(&old, &new);
        assert_eq!(
            r.applied,
            [
                "auth.bearer_token_file",
                "auth.bearer_token_env",
                "detectors",
                "alerting"
            ]
        );
        assert!(r.restart.is_empty(), "{r}");
    }

    #[test]
    fn the_report_reads_as_one_line() {
        let r = ReloadReport {
            applied: vec!["detectors"],
            restart: vec!["limits.http_body_limit_bytes"],
        };
        assert_eq!(
            r.to_string(),
            "configuration reloaded; applied: detectors; needs a restart to apply: \
             limits.http_body_limit_bytes"
        );
        assert_eq!(
            ReloadReport::default().to_string(),
            "configuration reloaded; applied: nothing; needs a restart to apply: nothing"
        );
    }
}
