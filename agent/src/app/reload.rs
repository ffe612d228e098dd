//! Reloading the configuration while running (SIGHUP, `POST /-/reload`).
//!
//! The file is read and validated as at start-up, secrets included. A configuration with any
//! problem changes nothing: every problem is logged, `skewwatch_config_last_reload_successful`
//! turns 0, and the previous configuration keeps running. A good one is applied part by part:
//!
//! - the bearer token, at once;
//! - detector thresholds, alert timing and window settings, in the pipeline, which keeps its
//!   open window, baselines and alert state (see [`crate::pipeline`]);
//! - alert delivery: receivers whose settings changed are restarted, the others keep their
//!   state;
//! - listener addresses, HTTP limits, the StatsD buffer and mappings, the `scrape:` jobs, the
//!   OTLP mapping, the `ui` history ring, the ingest queue, the recording threads and the
//!   cumulative counters' buckets and retention are fixed at start-up: a change is reported as
//!   needing a restart and not applied.

use super::{ConfigSource, Running};
use crate::clock::wall_now;
use crate::config::Config;
use crate::http::admin::ReloadOutcome;

/// Settings read once at start-up, by name, that differ between `old` and `new`.
fn restart_only(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut out = Vec::new();
    if old.http_listen != new.http_listen {
        out.push("listen.http");
    }
    if old.statsd_listen != new.statsd_listen {
        out.push("listen.statsd");
    }
    if old.http != new.http {
        out.push("http / limits.http_body_limit_bytes");
    }
    if old.statsd_receive_buffer_bytes != new.statsd_receive_buffer_bytes {
        out.push("statsd.receive_buffer_bytes");
    }
    // The receiver thread and the scrape tasks own what they were started with.
    if old.statsd_mappings != new.statsd_mappings {
        out.push("statsd.mappings");
    }
    if old.scrape != new.scrape {
        out.push("scrape");
    }
    if old.ingest_queue_batches != new.ingest_queue_batches
        || old.ingest_queue_bytes != new.ingest_queue_bytes
    {
        out.push("limits.ingest_queue_batches / limits.ingest_queue_bytes");
    }
    if old.allow_unauthenticated != new.allow_unauthenticated {
        out.push("auth.allow_unauthenticated");
    }
    // The cumulative counters' buckets and retention are fixed when the accumulator is built.
    if old.exposition != new.exposition
        || old.engine.window.latency_buckets_secs != new.engine.window.latency_buckets_secs
    {
        out.push("exposition");
    }
    // The history ring is sized when it is built.
    if old.ui != new.ui {
        out.push("ui.history_windows");
    }
    // The OTLP mapping is shared by the HTTP handlers, built once with them.
    if old.otlp != new.otlp {
        out.push("otlp");
    }
    // The recording threads are started with the windows.
    if old.engine.window.record_threads != new.engine.window.record_threads {
        out.push("window.record_threads");
    }
    out
}

/// Reads `source` and applies it to `running`.
pub(super) async fn apply(running: &mut Running, source: &ConfigSource) -> ReloadOutcome {
    let new = match source.load() {
        Ok(c) => c,
        Err(error) => {
            running.metrics.config_last_reload_successful.set(0);
            tracing::error!(
                error = %error,
                "Reloading the configuration failed; the previous configuration keeps running."
            );
            return Err(error.to_string());
        }
    };
    let mut applied = Vec::new();
    if new.token != running.config.token {
        running.token.send_replace(new.token.clone());
        applied.push("auth token");
    }
    let restart = restart_only(&running.config, &new);
    let mut new = new;
    // Kept as running, so the windows go on counting the buckets the counters expect.
    new.engine.window.latency_buckets_secs =
        running.config.engine.window.latency_buckets_secs.clone();
    if new.engine != running.config.engine {
        running.reconfigure_engine(new.engine.clone()).await;
        applied.push("window and detectors");
    }
    if new.alerting != running.config.alerting {
        running.replace_delivery(&new).await;
        applied.push("alerting");
    }
    running.config = keep_restart_only(new, &running.config);
    running.metrics.config_last_reload_successful.set(1);
    running
        .metrics
        .config_last_reload_success_timestamp
        .set(wall_now() as i64);
    let summary = format!(
        "configuration reloaded; applied: {}; needs a restart to apply: {}",
        list(&applied),
        list(&restart)
    );
    if restart.is_empty() {
        tracing::info!(applied = %list(&applied), "Configuration reloaded.");
    } else {
        tracing::warn!(
            applied = %list(&applied),
            needs_restart = %list(&restart),
            "Configuration reloaded; some settings need a restart to apply."
        );
    }
    Ok(summary)
}

/// `new`, with what needs a restart kept at its running value, so the next reload reports it
/// again until the agent restarts.
fn keep_restart_only(mut new: Config, running: &Config) -> Config {
    new.http_listen = running.http_listen;
    new.statsd_listen = running.statsd_listen;
    new.http = running.http.clone();
    new.statsd_receive_buffer_bytes = running.statsd_receive_buffer_bytes;
    new.statsd_mappings = running.statsd_mappings.clone();
    new.scrape = running.scrape.clone();
    new.ingest_queue_batches = running.ingest_queue_batches;
    new.ingest_queue_bytes = running.ingest_queue_bytes;
    new.allow_unauthenticated = running.allow_unauthenticated;
    new.exposition = running.exposition.clone();
    new.ui = running.ui.clone();
    new.otlp = running.otlp.clone();
    new.engine.window.record_threads = running.engine.window.record_threads;
    new
}

fn list(items: &[&str]) -> String {
    if items.is_empty() {
        "nothing".to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_and_scrape_jobs_need_a_restart_and_keep_running_as_started() {
        let old = Config::embedded();
        let yaml = "statsd:\n  mappings:\n    - match: a.*\n      group: g\n      shard: $1\n\
                    scrape:\n  - name: t\n    url: http://127.0.0.1:9/metrics\n    metrics: [x_total]\n";
        let new = Config::from_yaml(yaml, "t").unwrap();
        assert_eq!(restart_only(&old, &new), ["statsd.mappings", "scrape"]);
        let kept = keep_restart_only(new, &old);
        assert!(kept.statsd_mappings.is_empty() && kept.scrape.is_empty());
        assert!(restart_only(&old, &kept).is_empty());
    }

    #[test]
    fn recording_threads_need_a_restart() {
        let old = Config::embedded();
        let new = Config::from_yaml("window:\n  record_threads: 2\n", "t").unwrap();
        assert_eq!(new.engine.window.record_threads, 2);
        assert_eq!(restart_only(&old, &new), ["window.record_threads"]);
        let kept = keep_restart_only(new, &old);
        assert_eq!(kept.engine.window.record_threads, 1);
    }
}
