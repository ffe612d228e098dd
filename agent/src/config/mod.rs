//! Configuration: YAML parsed into [`RawConfig`] ([`raw`]), then validated into [`Config`]
//! ([`validate`]), with secrets read through [`secret`].
//!
//! Validation reports every problem at once, each with the field and why, and runs before any
//! port is bound. The embedded default is `rules/skewwatch.yaml`, compiled into the binary, so
//! `skewwatch run` with no file runs on exactly what the repository documents.

pub mod raw;
pub mod secret;
pub mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use skewwatch_detectors::engine::EngineConfig;

pub use raw::RawConfig;
pub use secret::{EnvLookup, Secret, SecretSource, process_env};

/// The embedded default configuration.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../../../rules/skewwatch.yaml");

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
    /// Signing secret, if the payload is signed.
    pub hmac_secret: Option<Secret>,
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
    /// How long a webhook retries the notification of a resolved alert before forgetting it.
    pub max_notification_age: Duration,
    /// A webhook is notified again of a group that still fires after this long
    /// (Alertmanager's `repeat_interval`).
    pub repeat_interval: Duration,
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
            repeat_interval: Duration::from_secs(4 * 3600),
            external_url: None,
        }
    }
}

/// Validated `http:` settings (plus the body limit, from `limits:`).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// Time to receive a request's headers. The clock starts when the server waits for a
    /// request, so on a keep-alive connection it is also the idle timeout.
    pub header_read_timeout: Duration,
    /// Time for a whole request, body included; past it the answer is 408.
    pub request_timeout: Duration,
    /// Connections served at once; a few more are admitted for health checks only.
    pub max_connections: usize,
    /// Ingest bodies read and parsed at once: with the body limit, it bounds the memory
    /// ingest can hold in requests.
    pub max_concurrent_ingest: usize,
    /// Largest request body.
    pub body_limit_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 256,
            max_concurrent_ingest: 4,
            body_limit_bytes: 1 << 20,
        }
    }
}

/// Validated `exposition:` settings. The latency bucket bounds live in the window
/// configuration (`WindowConfig::latency_buckets_secs`), where each closed window counts them.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpositionConfig {
    /// How long the cumulative counters of a shard, group or key that stopped appearing are
    /// still exported (flat), so one that returns continues where it left off.
    pub counter_retention: Duration,
}

impl Default for ExpositionConfig {
    fn default() -> Self {
        ExpositionConfig {
            counter_retention: Duration::from_secs(3600),
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
    /// HTTP server limits.
    pub http: HttpConfig,
    /// Ingest queue length in batches.
    pub ingest_queue_batches: usize,
    /// Ingest queue size in bytes (what the queued batches hold).
    pub ingest_queue_bytes: usize,
    /// SO_RCVBUF for the StatsD socket.
    pub statsd_receive_buffer_bytes: usize,
    /// StatsD metrics of other names turned into observations, first match wins.
    pub statsd_mappings: Vec<crate::ingest::statsd::StatsdMapping>,
    /// Prometheus targets read as input.
    pub scrape: Vec<crate::ingest::scrape::ScrapeJob>,
    /// Bearer token required by ingest and admin endpoints; `None` leaves them open to
    /// whoever can reach the listener.
    pub token: Option<Secret>,
    /// A listener off loopback may run without a token.
    pub allow_unauthenticated: bool,
    /// Where alert state and baselines are kept across restarts, if anywhere.
    pub state: Option<crate::state::StateStore>,
    /// Alert delivery.
    pub alerting: AlertingConfig,
    /// The cumulative series that add up across sidecars.
    pub exposition: ExpositionConfig,
    /// How OTLP spans and metric points map to observations.
    pub otlp: crate::ingest::otlp::Mapping,
    /// The live view at `GET /`.
    pub ui: UiConfig,
}

/// Most windows `ui.history_windows` may keep: four hours of 10-second windows.
pub const MAX_HISTORY_WINDOWS: usize = 1440;

/// `ui:`, the live view and its history ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiConfig {
    /// Windows the history ring keeps for `GET /api/v1/history` and the page.
    pub history_windows: usize,
}

impl Config {
    /// The embedded default configuration.
    pub fn embedded() -> Config {
        Config::from_yaml(DEFAULT_CONFIG_YAML, "(embedded default)")
            .expect("the embedded default configuration is valid (tested)")
    }

    /// Reads and validates a file, reading secrets from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with_env(path, &process_env)
    }

    /// Reads and validates a file, reading secrets through `env`.
    pub fn load_with_env(path: &Path, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_yaml_with_env(&text, &path.display().to_string(), env)
    }

    /// The configuration with the listeners moved (the command line's `--http-listen` and
    /// `--statsd-listen`), checked again for listeners exposed without a token.
    pub fn with_listeners(
        mut self,
        http: Option<SocketAddr>,
        statsd: Option<SocketAddr>,
    ) -> Result<Config, ConfigError> {
        if let Some(a) = http {
            self.http_listen = a;
        }
        if let Some(a) = statsd {
            self.statsd_listen = Some(a);
        }
        let problems = validate::exposure_problems(
            self.http_listen,
            self.statsd_listen,
            self.token.is_some(),
            self.allow_unauthenticated,
        );
        if problems.is_empty() {
            Ok(self)
        } else {
            Err(ConfigError::Invalid {
                origin: "command line".into(),
                problems,
            })
        }
    }

    /// Parses and validates YAML text, reading secrets from the process environment;
    /// `origin` names the text in messages.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Config::from_yaml_with_env(text, origin, &process_env)
    }

    /// Parses and validates YAML text, reading secrets through `env`.
    pub fn from_yaml_with_env(
        text: &str,
        origin: &str,
        env: EnvLookup<'_>,
    ) -> Result<Config, ConfigError> {
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
        raw.validate(env).map_err(|problems| ConfigError::Invalid {
            origin: origin.to_owned(),
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewwatch_detectors::detect::DetectorsConfig;

    #[test]
    fn embedded_default_is_valid_and_binds_loopback() {
        let c = Config::embedded();
        assert!(c.http_listen.ip().is_loopback());
        assert!(c.statsd_listen.unwrap().ip().is_loopback());
        assert_eq!(c.engine.window.window_secs, 10.0);
        assert_eq!(c.token, None);
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
    fn recording_threads_are_bounded() {
        for bad in [0, 17] {
            let yaml = format!("window:\n  record_threads: {bad}\n");
            let err = Config::from_yaml(&yaml, "f.yaml").unwrap_err().to_string();
            assert!(err.contains("window.record_threads"), "{err}");
        }
        let ok = Config::from_yaml("window:\n  record_threads: 16\n", "t").unwrap();
        assert_eq!(ok.engine.window.record_threads, 16);
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
    fn the_stages_problems_come_in_the_order_of_their_sections() {
        // Each input validates its own section (`statsd:`, `scrape:`, `otlp:`); composed, their
        // problems still come in one order.
        let yaml = "statsd:\n  mappings:\n    - match: a\n      shard: s\n\
                    scrape:\n  - url: http://t/m\n    metrics: [a]\n\
                    otlp:\n  shard_attributes: []\n";
        let err = Config::from_yaml(yaml, "f.yaml").unwrap_err();
        let ConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        let fields: Vec<_> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "statsd.mappings[0].group",
                "scrape[0].name",
                "otlp.shard_attributes"
            ]
        );
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
        let dir = std::env::temp_dir().join(format!("skewwatch-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret_file = dir.join("secret");
        std::fs::write(&secret_file, "from-file\n").unwrap();
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
      hmac_secret_file: SECRET_FILE
  resend_interval_secs: 30
  queue_capacity: 8
  max_retries: 3
  backoff_initial_secs: 0.1
  backoff_max_secs: 2
  external_url: "https://skewwatch.example/api/v1/alerts"
"#
        .replace("SECRET_FILE", secret_file.to_str().unwrap());
        let env = |n: &str| (n == "HOOK_KEY").then(|| "from-env".to_string());
        let a = Config::from_yaml_with_env(&yaml, "t", &env)
            .unwrap()
            .alerting;
        std::fs::remove_dir_all(&dir).unwrap();
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
        assert_eq!(a.webhooks[0].hmac_secret, Some(Secret::new(b"from-env")));
        assert_eq!(a.webhooks[1].hmac_secret, Some(Secret::new(b"from-file")));
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

    #[test]
    fn exposition_buckets_and_retention_are_read_and_checked() {
        let c = Config::embedded();
        assert_eq!(
            c.engine.window.latency_buckets_secs,
            skewwatch_detectors::window::DEFAULT_LATENCY_BUCKETS_SECS
        );
        assert_eq!(c.exposition, ExpositionConfig::default());
        let yaml = "exposition:\n  latency_buckets_secs: [0.005, 0.05, 0.5]\n  counter_retention_secs: 600\n";
        let c = Config::from_yaml(yaml, "t").unwrap();
        assert_eq!(c.engine.window.latency_buckets_secs, [0.005, 0.05, 0.5]);
        assert_eq!(c.exposition.counter_retention, Duration::from_secs(600));
        let none = Config::from_yaml("exposition:\n  latency_buckets_secs: []\n", "t").unwrap();
        assert!(none.engine.window.latency_buckets_secs.is_empty());
        for (bad, why) in [
            ("[0.1, 0.05]", "ascending"),
            ("[0.1, 0.1]", "ascending"),
            ("[0, 1]", "out of range"),
            ("[-1]", "out of range"),
            ("[.inf]", "out of range"),
        ] {
            let yaml = format!("exposition:\n  latency_buckets_secs: {bad}\n");
            let err = Config::from_yaml(&yaml, "f.yaml").unwrap_err().to_string();
            assert!(
                err.contains("f.yaml: exposition.latency_buckets_secs") && err.contains(why),
                "{bad}: {err}"
            );
        }
        let many: Vec<String> = (1..=31).map(|i| format!("{i}")).collect();
        let yaml = format!(
            "exposition:\n  latency_buckets_secs: [{}]\n",
            many.join(", ")
        );
        let err = Config::from_yaml(&yaml, "f.yaml").unwrap_err().to_string();
        assert!(err.contains("at most 30"), "{err}");
        let yaml = "window:\n  window_secs: 60\nexposition:\n  counter_retention_secs: 100\n";
        let err = Config::from_yaml(yaml, "f.yaml").unwrap_err().to_string();
        assert!(err.contains("exposition.counter_retention_secs"), "{err}");
    }

    #[test]
    fn secrets_are_read_during_validation_so_check_config_and_run_agree() {
        let yaml = "auth:\n  bearer_token_env: SW_TOKEN\n";
        let unset = |_: &str| None;
        let err = Config::from_yaml_with_env(yaml, "f.yaml", &unset)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("f.yaml: auth.bearer_token_env") && err.contains("SW_TOKEN"),
            "{err}"
        );
        let set = |n: &str| (n == "SW_TOKEN").then(|| "s3cret\n".to_string());
        let c = Config::from_yaml_with_env(yaml, "f.yaml", &set).unwrap();
        assert!(c.token.unwrap().matches(b"s3cret"));
        let missing = "auth:\n  bearer_token_file: /nonexistent/skewwatch-token\n";
        let err = Config::from_yaml(missing, "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("auth.bearer_token_file"), "{err}");
        let both = "auth:\n  bearer_token_file: /t\n  bearer_token_env: T\n";
        let err = Config::from_yaml(both, "f.yaml").unwrap_err().to_string();
        assert!(
            err.contains("f.yaml: auth: set bearer_token_file or bearer_token_env"),
            "{err}"
        );
    }
}
