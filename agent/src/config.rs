//! Configuration: YAML parsed into [`RawConfig`], then validated into [`Config`].
//!
//! Validation reports every problem at once, each with the field and why, and runs before any
//! port is bound. The embedded default is `rules/skewwatch.yaml`, compiled into the binary, so
//! `skewwatch run` with no file runs on exactly what the repository documents.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use skewwatch_detectors::detect::DetectorsConfig;
use skewwatch_detectors::engine::EngineConfig;
use skewwatch_detectors::window::WindowConfig;

/// The embedded default configuration.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../../rules/skewwatch.yaml");

/// One problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path of the field (`window.window_secs`), or `(file)` for the whole file.
    pub field: String,
    /// What is wrong and what to do.
    pub why: String,
}

/// Errors loading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the configuration file: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid YAML or has unknown or mistyped fields, or values are invalid.
    #[error("{}", render_problems(.origin, .problems))]
    Invalid {
        /// Where the configuration came from.
        origin: String,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

fn render_problems(origin: &str, problems: &[Problem]) -> String {
    let mut s = format!(
        "{origin}: {} problem{} in the configuration",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in problems {
        s.push_str(&format!("\n  {origin}: {}: {}", p.field, p.why));
    }
    s
}

/// `listen:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawListen {
    /// HTTP listener address.
    pub http: Option<String>,
    /// StatsD UDP listener address; `"disabled"` turns it off.
    pub statsd: Option<String>,
}

/// `window:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawWindow {
    /// Window length in seconds.
    pub window_secs: Option<f64>,
    /// Windows an idle shard stays known.
    pub shard_idle_windows: Option<u32>,
}

/// `limits:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawLimits {
    /// Groups tracked.
    pub max_groups: Option<usize>,
    /// Shards tracked per group.
    pub max_shards_per_group: Option<usize>,
    /// Key summary slots per group.
    pub group_key_slots: Option<usize>,
    /// Key summary slots per shard.
    pub shard_key_slots: Option<usize>,
    /// Top keys exported per group.
    pub exported_keys_per_group: Option<usize>,
    /// HDR significant figures.
    pub latency_sigfig: Option<u8>,
    /// Largest HTTP body.
    pub http_body_limit_bytes: Option<usize>,
    /// Ingest queue length in batches.
    pub ingest_queue_batches: Option<usize>,
}

/// `statsd:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawStatsd {
    /// SO_RCVBUF size.
    pub receive_buffer_bytes: Option<usize>,
}

/// `auth:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawAuth {
    /// File holding the bearer token.
    pub bearer_token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token.
    pub bearer_token_env: Option<String>,
}

/// One Alertmanager in `alerting.alertmanagers`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawAlertmanager {
    /// The `receiver` label value in the delivery metrics; default `alertmanager-<index>`.
    pub name: Option<String>,
    /// Base URL (`http://alertmanager:9093`, optionally with a path prefix); alerts go to
    /// `<url>/api/v2/alerts`.
    pub url: Option<String>,
    /// Timeout of one POST.
    pub timeout_secs: Option<f64>,
}

/// One generic webhook in `alerting.webhooks`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawWebhook {
    /// The `receiver` field of the payload and label of the delivery metrics.
    pub name: Option<String>,
    /// Where the Alertmanager v4 webhook payload is POSTed.
    pub url: Option<String>,
    /// File holding the HMAC-SHA256 signing secret.
    pub hmac_secret_file: Option<PathBuf>,
    /// Environment variable holding the HMAC-SHA256 signing secret.
    pub hmac_secret_env: Option<String>,
    /// Timeout of one POST.
    pub timeout_secs: Option<f64>,
}

/// `alerting:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawAlerting {
    /// Alertmanagers (API v2); every alert goes to each of them.
    pub alertmanagers: Option<Vec<RawAlertmanager>>,
    /// Generic webhooks (Alertmanager's v4 webhook payload).
    pub webhooks: Option<Vec<RawWebhook>>,
    /// How often firing (and recently resolved) alerts are re-sent to Alertmanagers.
    pub resend_interval_secs: Option<f64>,
    /// How long resolved alerts keep being re-sent to Alertmanagers.
    pub resolved_retention_secs: Option<f64>,
    /// Updates queued per receiver, and webhook notifications waiting per webhook.
    pub queue_capacity: Option<usize>,
    /// Retries of one notification after its first failed attempt.
    pub max_retries: Option<u32>,
    /// Delay before the first retry.
    pub backoff_initial_secs: Option<f64>,
    /// Longest delay between retries.
    pub backoff_max_secs: Option<f64>,
    /// A webhook notification older than this is dropped rather than retried.
    pub max_notification_age_secs: Option<f64>,
    /// `generatorURL` of every alert and `externalURL` of webhook payloads.
    pub external_url: Option<String>,
}

/// The configuration as written, before validation.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    /// Listeners.
    pub listen: Option<RawListen>,
    /// Windowing.
    pub window: Option<RawWindow>,
    /// Caps and sizes.
    pub limits: Option<RawLimits>,
    /// StatsD socket options.
    pub statsd: Option<RawStatsd>,
    /// Ingest authentication.
    pub auth: Option<RawAuth>,
    /// Detector thresholds and alert timing.
    pub detectors: Option<DetectorsConfig>,
    /// Alert delivery.
    pub alerting: Option<RawAlerting>,
}

/// Where the bearer token comes from; the token itself is read at start-up, never logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// No token: ingest is open (to whoever can reach the listener).
    None,
    /// Read from this file, trimmed.
    File(PathBuf),
    /// Read from this environment variable.
    Env(String),
}

/// Where a secret comes from; the secret itself is read at start-up and never logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// Read from this file, trimmed.
    File(PathBuf),
    /// Read from this environment variable, trimmed.
    Env(String),
}

/// A validated Alertmanager target.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertmanagerTarget {
    /// The `receiver` label value.
    pub name: String,
    /// The full `.../api/v2/alerts` URL.
    pub url: reqwest::Url,
    /// Timeout of one POST.
    pub timeout: Duration,
}

/// A validated webhook target.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookTarget {
    /// The `receiver` field and label value.
    pub name: String,
    /// Where the payload is POSTed.
    pub url: reqwest::Url,
    /// Signing secret source, if the payload is signed.
    pub hmac_secret: Option<SecretSource>,
    /// Timeout of one POST.
    pub timeout: Duration,
}

/// Validated `alerting:` settings. The bounds they imply are described in
/// [`crate::alerting`].
#[derive(Debug, Clone, PartialEq)]
pub struct AlertingConfig {
    /// Alertmanagers, each sent every alert.
    pub alertmanagers: Vec<AlertmanagerTarget>,
    /// Generic webhooks.
    pub webhooks: Vec<WebhookTarget>,
    /// Re-send period of firing and recently resolved alerts (Prometheus `resend-delay`).
    pub resend_interval: Duration,
    /// How long resolved alerts are re-sent (Prometheus `resolvedRetention`).
    pub resolved_retention: Duration,
    /// Capacity of each receiver's update queue and of each webhook's notification backlog.
    pub queue_capacity: usize,
    /// Retries after the first failed attempt of a notification.
    pub max_retries: u32,
    /// First retry delay.
    pub backoff_initial: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
    /// Age after which an undelivered webhook notification is dropped.
    pub max_notification_age: Duration,
    /// `generatorURL` / `externalURL`; `None` means `http://<HTTP listener>/api/v1/alerts`,
    /// resolved once the listener is bound.
    pub external_url: Option<String>,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        AlertingConfig {
            alertmanagers: Vec::new(),
            webhooks: Vec::new(),
            resend_interval: Duration::from_secs(60),
            resolved_retention: Duration::from_secs(15 * 60),
            queue_capacity: 1024,
            max_retries: 10,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            max_notification_age: Duration::from_secs(15 * 60),
            external_url: None,
        }
    }
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// HTTP listener.
    pub http_listen: SocketAddr,
    /// StatsD listener, if enabled.
    pub statsd_listen: Option<SocketAddr>,
    /// Engine (windows and detectors) configuration.
    pub engine: EngineConfig,
    /// Top keys exported per group.
    pub exported_keys_per_group: usize,
    /// Largest HTTP body.
    pub http_body_limit_bytes: usize,
    /// Ingest queue length in batches.
    pub ingest_queue_batches: usize,
    /// SO_RCVBUF for the StatsD socket.
    pub statsd_receive_buffer_bytes: usize,
    /// Bearer token source.
    pub token: TokenSource,
    /// Alert delivery.
    pub alerting: AlertingConfig,
}

impl Config {
    /// The embedded default configuration.
    pub fn embedded() -> Config {
        Config::from_yaml(DEFAULT_CONFIG_YAML, "(embedded default)")
            .expect("the embedded default configuration is valid (tested)")
    }

    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_yaml(&text, &path.display().to_string())
    }

    /// Parses and validates YAML text; `origin` names it in messages.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Invalid {
                origin: origin.to_owned(),
                problems: vec![Problem {
                    field: "(file)".into(),
                    why: e.to_string(),
                }],
            })?
        };
        raw.validate().map_err(|problems| ConfigError::Invalid {
            origin: origin.to_owned(),
            problems,
        })
    }
}

/// Collects problems while validating.
struct Check {
    problems: Vec<Problem>,
}

impl Check {
    fn fail(&mut self, field: &str, why: impl fmt::Display) {
        self.problems.push(Problem {
            field: field.to_owned(),
            why: why.to_string(),
        });
    }

    fn addr(&mut self, field: &str, v: Option<&str>, default: &str) -> Option<SocketAddr> {
        let s = v.unwrap_or(default);
        match s.parse() {
            Ok(a) => Some(a),
            Err(_) => {
                self.fail(
                    field,
                    format!("`{s}` is not an IP:port address (write e.g. 127.0.0.1:9477)"),
                );
                None
            }
        }
    }

    fn range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        field: &str,
        v: Option<T>,
        default: T,
        lo: T,
        hi: T,
    ) -> T {
        let x = v.unwrap_or(default);
        if !(lo..=hi).contains(&x) {
            self.fail(field, format!("{x} is out of range: use {lo}..={hi}"));
        }
        x
    }
}

/// Largest timeout of one delivery POST, and largest retry delay.
const MAX_DELIVERY_SECS: f64 = 300.0;

impl Check {
    fn secs(
        &mut self,
        field: &str,
        v: Option<f64>,
        default: Duration,
        lo: f64,
        hi: f64,
    ) -> Duration {
        let x = v.unwrap_or(default.as_secs_f64());
        if !(x.is_finite() && (lo..=hi).contains(&x)) {
            self.fail(
                field,
                format!("{x} is out of range: use {lo}..={hi} seconds"),
            );
            return default;
        }
        Duration::from_secs_f64(x)
    }

    /// A plain-HTTP receiver URL. TLS is not built in (reqwest without a TLS backend).
    fn receiver_url(&mut self, field: &str, v: Option<&str>) -> Option<reqwest::Url> {
        let Some(s) = v else {
            self.fail(field, "required: the receiver's http:// URL");
            return None;
        };
        match reqwest::Url::parse(s) {
            Ok(u) if u.scheme() == "http" && u.host().is_some() => Some(u),
            Ok(u) if u.scheme() == "https" => {
                self.fail(
                    field,
                    format!(
                        "`{}`: https is not supported, this build has no TLS; reach the receiver \
                         over plain http on a trusted network or through a TLS-terminating proxy",
                        redact(&u)
                    ),
                );
                None
            }
            Ok(u) => {
                self.fail(field, format!("`{}` is not an http://host URL", redact(&u)));
                None
            }
            Err(e) => {
                self.fail(
                    field,
                    format!("not a URL ({e}); write e.g. http://127.0.0.1:9093"),
                );
                None
            }
        }
    }

    fn receiver_name(&mut self, field: &str, name: &str, seen: &mut Vec<String>) {
        let ok = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !ok {
            self.fail(
                field,
                format!("`{name}`: use 1 to 64 characters from A-Z a-z 0-9 _ . -"),
            );
        } else if seen.iter().any(|n| n == name) {
            self.fail(
                field,
                format!("`{name}` is used by another receiver; names must be unique"),
            );
        }
        seen.push(name.to_owned());
    }

    fn alerting(&mut self, raw: RawAlerting) -> AlertingConfig {
        let d = AlertingConfig::default();
        let mut names = Vec::new();
        let mut alertmanagers = Vec::new();
        for (i, am) in raw
            .alertmanagers
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let f = format!("alerting.alertmanagers[{i}]");
            let name = am.name.unwrap_or_else(|| format!("alertmanager-{i}"));
            self.receiver_name(&format!("{f}.name"), &name, &mut names);
            let url = self.receiver_url(&format!("{f}.url"), am.url.as_deref());
            let timeout = self.secs(
                &format!("{f}.timeout_secs"),
                am.timeout_secs,
                Duration::from_secs(10),
                0.1,
                MAX_DELIVERY_SECS,
            );
            if let Some(url) = url {
                alertmanagers.push(AlertmanagerTarget {
                    name,
                    url: alertmanager_api_url(url),
                    timeout,
                });
            }
        }
        let mut webhooks = Vec::new();
        for (i, w) in raw.webhooks.unwrap_or_default().into_iter().enumerate() {
            let f = format!("alerting.webhooks[{i}]");
            match w.name.as_deref() {
                Some(n) => self.receiver_name(&format!("{f}.name"), n, &mut names),
                None => self.fail(&format!("{f}.name"), "required: names the receiver"),
            }
            let url = self.receiver_url(&format!("{f}.url"), w.url.as_deref());
            let timeout = self.secs(
                &format!("{f}.timeout_secs"),
                w.timeout_secs,
                Duration::from_secs(10),
                0.1,
                MAX_DELIVERY_SECS,
            );
            let hmac_secret = match (w.hmac_secret_file, w.hmac_secret_env) {
                (Some(_), Some(_)) => {
                    self.fail(&f, "set hmac_secret_file or hmac_secret_env, not both");
                    None
                }
                (Some(p), None) => Some(SecretSource::File(p)),
                (None, Some(e)) if e.is_empty() => {
                    self.fail(
                        &format!("{f}.hmac_secret_env"),
                        "the variable name is empty",
                    );
                    None
                }
                (None, Some(e)) => Some(SecretSource::Env(e)),
                (None, None) => None,
            };
            if let (Some(name), Some(url)) = (w.name, url) {
                webhooks.push(WebhookTarget {
                    name,
                    url,
                    hmac_secret,
                    timeout,
                });
            }
        }
        let resend_interval = self.secs(
            "alerting.resend_interval_secs",
            raw.resend_interval_secs,
            d.resend_interval,
            0.1,
            86_400.0,
        );
        let resolved_retention = self.secs(
            "alerting.resolved_retention_secs",
            raw.resolved_retention_secs,
            d.resolved_retention,
            0.0,
            86_400.0,
        );
        let queue_capacity = self.range(
            "alerting.queue_capacity",
            raw.queue_capacity,
            d.queue_capacity,
            1,
            1 << 20,
        );
        let max_retries = self.range(
            "alerting.max_retries",
            raw.max_retries,
            d.max_retries,
            0,
            1000,
        );
        let backoff_initial = self.secs(
            "alerting.backoff_initial_secs",
            raw.backoff_initial_secs,
            d.backoff_initial,
            0.01,
            MAX_DELIVERY_SECS,
        );
        let backoff_max = self.secs(
            "alerting.backoff_max_secs",
            raw.backoff_max_secs,
            d.backoff_max,
            0.01,
            MAX_DELIVERY_SECS,
        );
        if backoff_initial > backoff_max {
            self.fail(
                "alerting.backoff_initial_secs",
                format!(
                    "{} exceeds alerting.backoff_max_secs ({})",
                    backoff_initial.as_secs_f64(),
                    backoff_max.as_secs_f64()
                ),
            );
        }
        let max_notification_age = self.secs(
            "alerting.max_notification_age_secs",
            raw.max_notification_age_secs,
            d.max_notification_age,
            1.0,
            7.0 * 86_400.0,
        );
        let external_url = match raw.external_url {
            None => None,
            Some(s) => match reqwest::Url::parse(&s) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Some(s),
                _ => {
                    self.fail(
                        "alerting.external_url",
                        format!("`{s}` is not an http(s) URL; write e.g. http://skewwatch:9477/api/v1/alerts"),
                    );
                    None
                }
            },
        };
        AlertingConfig {
            alertmanagers,
            webhooks,
            resend_interval,
            resolved_retention,
            queue_capacity,
            max_retries,
            backoff_initial,
            backoff_max,
            max_notification_age,
            external_url,
        }
    }
}

/// `url` with any password replaced, for messages.
fn redact(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    if u.password().is_some() {
        let _ = u.set_password(Some("xxxxx"));
    }
    u.to_string()
}

/// The API v2 endpoint under an Alertmanager base URL (which may carry a path prefix); a URL
/// that already names the endpoint is kept.
fn alertmanager_api_url(mut url: reqwest::Url) -> reqwest::Url {
    const ENDPOINT: &str = "/api/v2/alerts";
    let path = url.path().trim_end_matches('/').to_owned();
    if !path.ends_with(ENDPOINT) {
        url.set_path(&format!("{path}{ENDPOINT}"));
    }
    url
}

impl RawConfig {
    /// Validates every field, reporting all problems at once.
    pub fn validate(self) -> Result<Config, Vec<Problem>> {
        let mut c = Check {
            problems: Vec::new(),
        };
        let listen = self.listen.unwrap_or_default();
        let window = self.window.unwrap_or_default();
        let limits = self.limits.unwrap_or_default();
        let statsd = self.statsd.unwrap_or_default();
        let auth = self.auth.unwrap_or_default();
        let d = WindowConfig::default();

        let http_listen = c.addr("listen.http", listen.http.as_deref(), "127.0.0.1:9477");
        // Absent means the default address; "disabled" (or "") turns the listener off.
        let statsd_listen = match listen.statsd.as_deref() {
            Some("disabled" | "") => None,
            other => c.addr("listen.statsd", other, "127.0.0.1:8125"),
        };
        let window_secs = window.window_secs.unwrap_or(d.window_secs);
        if !(window_secs.is_finite() && (0.1..=3600.0).contains(&window_secs)) {
            c.fail(
                "window.window_secs",
                format!("{window_secs} is out of range: use 0.1..=3600 seconds"),
            );
        }
        let shard_idle_windows = c.range(
            "window.shard_idle_windows",
            window.shard_idle_windows,
            d.shard_idle_windows,
            0,
            10_000,
        );
        let max_groups = c.range(
            "limits.max_groups",
            limits.max_groups,
            d.max_groups,
            1,
            10_000,
        );
        let max_shards_per_group = c.range(
            "limits.max_shards_per_group",
            limits.max_shards_per_group,
            d.max_shards_per_group,
            1,
            100_000,
        );
        let group_key_slots = c.range(
            "limits.group_key_slots",
            limits.group_key_slots,
            d.group_key_slots,
            1,
            1 << 20,
        );
        let shard_key_slots = c.range(
            "limits.shard_key_slots",
            limits.shard_key_slots,
            d.shard_key_slots,
            1,
            1 << 16,
        );
        let exported_keys_per_group = c.range(
            "limits.exported_keys_per_group",
            limits.exported_keys_per_group,
            d.top_keys,
            0,
            1000,
        );
        if exported_keys_per_group > group_key_slots {
            c.fail(
                "limits.exported_keys_per_group",
                format!(
                    "{exported_keys_per_group} exceeds limits.group_key_slots ({group_key_slots}): \
                     a summary cannot report more keys than it tracks"
                ),
            );
        }
        let latency_sigfig = c.range(
            "limits.latency_sigfig",
            limits.latency_sigfig,
            d.latency_sigfig,
            1,
            3,
        );
        let http_body_limit_bytes = c.range(
            "limits.http_body_limit_bytes",
            limits.http_body_limit_bytes,
            1 << 20,
            1024,
            1 << 30,
        );
        let ingest_queue_batches = c.range(
            "limits.ingest_queue_batches",
            limits.ingest_queue_batches,
            64,
            1,
            1 << 20,
        );
        let statsd_receive_buffer_bytes = c.range(
            "statsd.receive_buffer_bytes",
            statsd.receive_buffer_bytes,
            32 << 20,
            4096,
            1 << 30,
        );
        let token = match (auth.bearer_token_file, auth.bearer_token_env) {
            (Some(_), Some(_)) => {
                c.fail(
                    "auth",
                    "set bearer_token_file or bearer_token_env, not both",
                );
                TokenSource::None
            }
            (Some(f), None) => TokenSource::File(f),
            (None, Some(e)) if e.is_empty() => {
                c.fail("auth.bearer_token_env", "the variable name is empty");
                TokenSource::None
            }
            (None, Some(e)) => TokenSource::Env(e),
            (None, None) => TokenSource::None,
        };

        let detectors = self.detectors.unwrap_or_default();
        for p in detectors.problems("detectors") {
            c.fail(&p.field, p.why);
        }

        let alerting = c.alerting(self.alerting.unwrap_or_default());

        if !c.problems.is_empty() {
            return Err(c.problems);
        }
        Ok(Config {
            http_listen: http_listen.expect("checked"),
            statsd_listen,
            engine: EngineConfig {
                window: WindowConfig {
                    window_secs,
                    shard_idle_windows,
                    max_groups,
                    max_shards_per_group,
                    group_key_slots,
                    shard_key_slots,
                    top_keys: exported_keys_per_group,
                    latency_sigfig,
                    ..d
                },
                detectors,
            },
            exported_keys_per_group,
            http_body_limit_bytes,
            ingest_queue_batches,
            statsd_receive_buffer_bytes,
            token,
            alerting,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid_and_binds_loopback() {
        let c = Config::embedded();
        assert!(c.http_listen.ip().is_loopback());
        assert!(c.statsd_listen.unwrap().ip().is_loopback());
        assert_eq!(c.engine.window.window_secs, 10.0);
        assert_eq!(c.token, TokenSource::None);
    }

    #[test]
    fn the_shipped_default_file_matches_the_compiled_defaults() {
        // rules/skewwatch.yaml documents the defaults; the structs carry them. They must agree,
        // or a user who copies the file gets different behaviour than one who runs without it.
        let file = Config::embedded();
        let none = Config::from_yaml("", "t").unwrap();
        assert_eq!(file.engine.detectors, DetectorsConfig::default());
        assert_eq!(file.engine.window, none.engine.window);
        assert_eq!(file.engine.detectors, none.engine.detectors);
    }

    #[test]
    fn empty_file_means_defaults() {
        let c = Config::from_yaml("", "t").unwrap();
        assert_eq!(c.http_listen.port(), 9477);
        assert_eq!(c.statsd_listen, Some("127.0.0.1:8125".parse().unwrap()));
        let off = Config::from_yaml("listen:\n  statsd: disabled\n", "t").unwrap();
        assert_eq!(off.statsd_listen, None);
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_field() {
        let yaml =
            "listen:\n  http: nowhere\nwindow:\n  window_secs: 0\nlimits:\n  max_groups: 0\n";
        let err = Config::from_yaml(yaml, "f.yaml").unwrap_err();
        let ConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        let fields: Vec<_> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["listen.http", "window.window_secs", "limits.max_groups"]
        );
        assert!(err.to_string().contains("f.yaml: listen.http"));
    }

    #[test]
    fn embedded_default_has_no_receivers_and_prometheus_timing() {
        let a = Config::embedded().alerting;
        assert_eq!(a, AlertingConfig::default());
        assert!(a.alertmanagers.is_empty() && a.webhooks.is_empty());
        assert_eq!(a.resend_interval, Duration::from_secs(60));
        assert_eq!(a.resolved_retention, Duration::from_secs(900));
    }

    #[test]
    fn alerting_section_is_read() {
        let yaml = r#"
alerting:
  alertmanagers:
    - url: "http://am-0:9093"
    - url: "http://am-1:9093/prefix/"
      name: am-b
      timeout_secs: 2.5
    - url: "http://am-2:9093/api/v2/alerts"
  webhooks:
    - name: chat
      url: "http://bridge:8080/hook"
      hmac_secret_env: HOOK_KEY
    - name: pager
      url: "http://pager/x"
      hmac_secret_file: /run/secret
  resend_interval_secs: 30
  queue_capacity: 8
  max_retries: 3
  backoff_initial_secs: 0.1
  backoff_max_secs: 2
  external_url: "https://skewwatch.example/api/v1/alerts"
"#;
        let a = Config::from_yaml(yaml, "t").unwrap().alerting;
        let urls: Vec<_> = a.alertmanagers.iter().map(|t| t.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://am-0:9093/api/v2/alerts",
                "http://am-1:9093/prefix/api/v2/alerts",
                "http://am-2:9093/api/v2/alerts"
            ]
        );
        let names: Vec<_> = a.alertmanagers.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["alertmanager-0", "am-b", "alertmanager-2"]);
        assert_eq!(a.alertmanagers[1].timeout, Duration::from_millis(2500));
        assert_eq!(a.alertmanagers[0].timeout, Duration::from_secs(10));
        assert_eq!(
            a.webhooks[0].hmac_secret,
            Some(SecretSource::Env("HOOK_KEY".into()))
        );
        assert_eq!(
            a.webhooks[1].hmac_secret,
            Some(SecretSource::File("/run/secret".into()))
        );
        assert_eq!(a.resend_interval, Duration::from_secs(30));
        assert_eq!(a.queue_capacity, 8);
        assert_eq!(a.max_retries, 3);
        assert_eq!(a.backoff_max, Duration::from_secs(2));
        assert_eq!(
            a.external_url.as_deref(),
            Some("https://skewwatch.example/api/v1/alerts")
        );
    }

    #[test]
    fn every_alerting_problem_is_named_with_its_field() {
        let yaml = r#"
alerting:
  alertmanagers:
    - url: "https://am:9093"
      timeout_secs: 0
    - name: dup
      url: "not a url"
  webhooks:
    - url: "http://hook"
    - name: dup
      url: "http://hook"
      hmac_secret_env: ""
    - name: "bad name!"
      hmac_secret_env: K
      hmac_secret_file: /k
  resend_interval_secs: 0
  queue_capacity: 0
  backoff_initial_secs: 10
  backoff_max_secs: 1
  external_url: "ftp://x"
"#;
        let err = Config::from_yaml(yaml, "f.yaml").unwrap_err();
        let ConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        let fields: Vec<_> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "alerting.alertmanagers[0].url",
                "alerting.alertmanagers[0].timeout_secs",
                "alerting.alertmanagers[1].url",
                "alerting.webhooks[0].name",
                "alerting.webhooks[1].name",
                "alerting.webhooks[1].hmac_secret_env",
                "alerting.webhooks[2].name",
                "alerting.webhooks[2].url",
                "alerting.webhooks[2]",
                "alerting.resend_interval_secs",
                "alerting.queue_capacity",
                "alerting.backoff_initial_secs",
                "alerting.external_url",
            ],
            "{err}"
        );
        assert!(err.to_string().contains("no TLS"), "{err}");
        assert!(err.to_string().contains("unique"), "{err}");
    }

    #[test]
    fn receiver_url_passwords_stay_out_of_messages() {
        let yaml = "alerting:\n  alertmanagers:\n    - url: \"https://u:hunter2@am:9093\"\n";
        let err = Config::from_yaml(yaml, "f.yaml").unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = Config::from_yaml("window:\n  window_sec: 5\n", "f.yaml").unwrap_err();
        assert!(err.to_string().contains("window_sec"), "{err}");
    }
}
