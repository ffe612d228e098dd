//! Configuration: YAML parsed into [`RawConfig`] ([`raw`]), then validated into [`Config`]
//! ([`validate`]), with secrets read through [`secret`].
//!
//! Validation reports every problem at once, each with the field and why, and runs before any
//! port is bound. The embedded default is `rules/skewwatch.yaml`, compiled into the binary, so
//! `skewwatch run` with no file runs on exactly what the repository documents.

pub mod mapping;
pub mod part;
pub mod raw;
pub mod secret;
pub mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use skewwatch_detectors::detect::DetectorsConfig;
use skewwatch_detectors::engine::EngineConfig;
use skewwatch_detectors::window::WindowConfig;

use part::Part;

pub use mapping::StatsdMapping;
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

crate::config_part! {
    /// Validated `http:` settings (plus the body limit, from `limits:`).
    #[derive(Debug, Clone, PartialEq)]
    pub struct HttpConfig {
        /// Time to receive a request's headers. The clock starts when the server waits for a
        /// request, so on a keep-alive connection it is also the idle timeout.
        pub header_read_timeout: Duration => "http.header_read_timeout_secs",
        /// Time for a whole request, body included; past it the answer is 408.
        pub request_timeout: Duration => "http.request_timeout_secs",
        /// Connections served at once; a few more are admitted for health checks only.
        pub max_connections: usize => "http.max_connections",
        /// Ingest bodies read and parsed at once: with the body limit, it bounds the memory
        /// ingest can hold in requests.
        pub max_concurrent_ingest: usize => "http.max_concurrent_ingest",
        /// Largest request body.
        pub body_limit_bytes: usize => "limits.http_body_limit_bytes",
    }
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

/// Where a scrape job takes the group of its observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSource {
    /// The group when the label is absent (or not configured).
    pub name: String,
    /// A label whose value, when present, is the group.
    pub label: Option<String>,
}

/// A validated `scrape:` job: a Prometheus `/metrics` page read at an interval, its
/// per-shard counters and classic histograms turned into observations (see
/// [`crate::ingest::scrape`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeJob {
    /// The `job` label of the scrape metrics; unique.
    pub name: String,
    /// The page (plain http).
    pub url: reqwest::Url,
    /// Time between scrapes.
    pub interval: Duration,
    /// Time one scrape may take.
    pub timeout: Duration,
    /// Counter and classic histogram names read (as they appear in samples: `x_total`, and a
    /// histogram by its base name).
    pub metrics: Vec<String>,
    /// The group.
    pub group: GroupSource,
    /// The label naming the shard; a series without it is skipped.
    pub shard_label: String,
    /// The label naming the key.
    pub key_label: Option<String>,
    /// The label naming the outcome.
    pub outcome_label: Option<String>,
    /// The label naming the cache result.
    pub cache_label: Option<String>,
    /// Bearer token sent to the target.
    pub bearer_token: Option<Secret>,
    /// Series whose previous value is kept; new series past it are skipped, counted.
    pub max_series: usize,
}

/// The validated configuration: what is fixed at start-up and what a reload puts in force.
///
/// The split is the reload's contract. Everything in [`Startup`] sizes or binds something when
/// the agent starts (listeners, caps and the memory they bound, queues, the threads and tasks
/// of ingest, the exported series); a reload compares it field by field and reports what
/// differs as needing a restart, without applying any of it. Everything in [`Live`] is applied
/// by a reload everywhere it acts.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Fixed at start-up.
    pub startup: Startup,
    /// Applied by a reload.
    pub live: Live,
}

crate::config_part! {
    /// The settings fixed at start-up: a reload reports a change to any of them as needing a
    /// restart and keeps the running value.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Startup {
        /// HTTP listener.
        pub http_listen: SocketAddr => "listen.http",
        /// StatsD listener, if enabled.
        pub statsd_listen: Option<SocketAddr> => "listen.statsd",
        /// Window length, caps and key slots: they size the windows, the memory budget and the
        /// series `/metrics` and the cumulative counters export.
        pub window: WindowConfig => part,
        /// HTTP server limits.
        pub http: HttpConfig => part,
        /// Ingest queue length in batches.
        pub ingest_queue_batches: usize => "limits.ingest_queue_batches",
        /// Ingest queue size in bytes (what the queued batches hold).
        pub ingest_queue_bytes: usize => "limits.ingest_queue_bytes",
        /// SO_RCVBUF for the StatsD socket.
        pub statsd_receive_buffer_bytes: usize => "statsd.receive_buffer_bytes",
        /// StatsD metrics of other names turned into observations, first match wins; the
        /// receiver thread is started with them.
        pub statsd_mappings: Vec<StatsdMapping> => "statsd.mappings",
        /// Prometheus targets read as input; one task per job, started with them.
        pub scrape: Vec<ScrapeJob> => "scrape",
        /// A listener off loopback may run without a token.
        pub allow_unauthenticated: bool => "auth.allow_unauthenticated",
        /// Where alert state and baselines are kept across restarts, if anywhere; the
        /// pipeline reads it once and writes it for the rest of its life.
        pub state: Option<crate::state::StateStore> => "state",
        /// The cumulative series that add up across sidecars.
        pub exposition: ExpositionConfig => "exposition.counter_retention_secs",
        /// How OTLP spans and metric points map to observations; shared by the HTTP handlers.
        pub otlp: crate::ingest::otlp::Mapping => "otlp",
        /// The live view at `GET /`; its history ring is sized once.
        pub ui: UiConfig => "ui.history_windows",
    }
}

crate::config_part! {
    /// The settings a reload applies, each everywhere it acts.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Live {
        /// Bearer token required by ingest and admin endpoints; `None` leaves them open to
        /// whoever can reach the listener. Checked by the HTTP guards on every request.
        pub token: Option<Secret> => ["auth.bearer_token_file", "auth.bearer_token_env"],
        /// Detector thresholds and alert timing, in force from the next window on; the
        /// pipeline keeps its open window, baselines and alert state.
        pub detectors: DetectorsConfig => "detectors",
        /// Alert delivery: receivers are rebuilt, the old ones finish what they owe.
        pub alerting: AlertingConfig => "alerting",
    }
}

/// The window settings belong to start-up. Every field of [`WindowConfig`] is named here (the
/// pattern has no `..`), so a field added to it does not compile until it has a path.
impl part::Part for WindowConfig {
    fn paths(out: &mut Vec<&'static str>) {
        out.extend(WINDOW_PATHS.iter().filter_map(|p| *p));
    }

    fn changed(&self, other: &Self, out: &mut Vec<&'static str>) {
        let WindowConfig {
            window_secs,
            shard_idle_windows,
            max_groups,
            max_shards_per_group,
            max_shards_total,
            pinned_groups,
            group_key_slots,
            shard_key_slots,
            top_keys,
            shard_top_keys,
            latency_sigfig,
            dispersion_alpha,
            latency_buckets_secs,
            record_threads,
        } = self;
        let differs = [
            *window_secs != other.window_secs,
            *shard_idle_windows != other.shard_idle_windows,
            *max_groups != other.max_groups,
            *max_shards_per_group != other.max_shards_per_group,
            *max_shards_total != other.max_shards_total,
            *pinned_groups != other.pinned_groups,
            *group_key_slots != other.group_key_slots,
            *shard_key_slots != other.shard_key_slots,
            *top_keys != other.top_keys,
            *shard_top_keys != other.shard_top_keys,
            *latency_sigfig != other.latency_sigfig,
            *dispersion_alpha != other.dispersion_alpha,
            *latency_buckets_secs != other.latency_buckets_secs,
            *record_threads != other.record_threads,
        ];
        for (path, differs) in WINDOW_PATHS.iter().zip(differs) {
            if differs && let Some(path) = path {
                out.push(path);
            }
        }
    }
}

/// The path of each [`WindowConfig`] field, in the order of its declaration; `None` for the
/// fields the file does not set (`shard_top_keys`, `dispersion_alpha` keep their defaults).
const WINDOW_PATHS: [Option<&str>; 14] = [
    Some("window.window_secs"),
    Some("window.shard_idle_windows"),
    Some("limits.max_groups"),
    Some("limits.max_shards_per_group"),
    Some("limits.max_shards_total"),
    Some("limits.pinned_groups"),
    Some("limits.group_key_slots"),
    Some("limits.shard_key_slots"),
    Some("limits.exported_keys_per_group"),
    None,
    Some("limits.latency_sigfig"),
    None,
    Some("exposition.latency_buckets_secs"),
    Some("window.record_threads"),
];

/// Whether a reload applies a setting or it waits for a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadClass {
    /// A reload applies it.
    Live,
    /// Read once at start-up; a change is reported and applied at the next restart.
    Restart,
}

impl ReloadClass {
    /// How the configuration reference writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadClass::Live => "live",
            ReloadClass::Restart => "restart",
        }
    }

    /// The class of a documented field path (`limits.max_groups`,
    /// `detectors.hot_shard.min_share`): the class of the declared path it is or lies under.
    /// `None` when no part declares it (a field without a reload class).
    pub fn of(path: &str) -> Option<ReloadClass> {
        let under = |declared: &str| {
            path == declared
                || path
                    .strip_prefix(declared)
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        };
        let live = Live::all_paths().into_iter().any(under);
        let restart = Startup::all_paths().into_iter().any(under);
        match (live, restart) {
            (true, false) => Some(ReloadClass::Live),
            (false, true) => Some(ReloadClass::Restart),
            _ => None,
        }
    }
}

/// The dotted path of every field the commented configuration file `yaml` sets (the shape of
/// `rules/skewwatch.yaml`: one `key: value` a line, nested by indentation, comments ignored),
/// in file order. A field with a value is a leaf: `limits.max_groups`, `scrape`.
pub fn file_field_paths(yaml: &str) -> Vec<String> {
    let mut stack: Vec<(usize, &str)> = Vec::new();
    let mut out = Vec::new();
    for line in yaml.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            continue;
        };
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key));
        if !value.trim().is_empty() {
            out.push(stack.iter().map(|(_, k)| *k).collect::<Vec<_>>().join("."));
        }
    }
    out
}

impl Config {
    /// The engine's configuration: the windows as started, the detectors as in force.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            window: self.startup.window.clone(),
            detectors: self.live.detectors.clone(),
        }
    }
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
            self.startup.http_listen = a;
        }
        if let Some(a) = statsd {
            self.startup.statsd_listen = Some(a);
        }
        let problems = validate::exposure_problems(
            self.startup.http_listen,
            self.startup.statsd_listen,
            self.live.token.is_some(),
            self.startup.allow_unauthenticated,
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
        assert!(c.startup.http_listen.ip().is_loopback());
        assert!(c.startup.statsd_listen.unwrap().ip().is_loopback());
        assert_eq!(c.engine().window.window_secs, 10.0);
        assert_eq!(c.live.token, None);
    }

    #[test]
    fn the_shipped_default_file_matches_the_compiled_defaults() {
        // rules/skewwatch.yaml documents the defaults; the structs carry them. They must agree,
        // or a user who copies the file gets different behaviour than one who runs without it.
        let file = Config::embedded();
        let none = Config::from_yaml("", "t").unwrap();
        assert_eq!(file.engine().detectors, DetectorsConfig::default());
        assert_eq!(file.engine().window, none.engine().window);
        assert_eq!(file.engine().detectors, none.engine().detectors);
    }

    #[test]
    fn every_field_of_the_file_has_exactly_one_reload_class() {
        let paths = file_field_paths(DEFAULT_CONFIG_YAML);
        assert!(paths.len() > 100, "{paths:?}");
        assert!(paths.contains(&"limits.max_groups".to_owned()));
        assert!(paths.contains(&"detectors.hot_shard.alert.for_secs".to_owned()));
        let unclassified: Vec<_> = paths
            .iter()
            .filter(|p| ReloadClass::of(p).is_none())
            .collect();
        assert!(
            unclassified.is_empty(),
            "fields with no reload class (declare them in config::Startup or config::Live), \
             or in both: {unclassified:?}"
        );
    }

    #[test]
    fn every_declared_path_is_a_field_of_the_file() {
        let paths = file_field_paths(DEFAULT_CONFIG_YAML);
        let declared = Startup::all_paths().into_iter().chain(Live::all_paths());
        for d in declared {
            assert!(
                paths
                    .iter()
                    .any(|p| p == d || p.starts_with(&format!("{d}."))),
                "`{d}` is declared in the configuration parts but not a field of the file"
            );
        }
    }

    #[test]
    fn the_classes_are_what_the_reload_documentation_says() {
        use ReloadClass::{Live as L, Restart as R};
        for (path, class) in [
            ("auth.bearer_token_file", L),
            ("detectors.error_surge.min_requests", L),
            ("alerting.webhooks", L),
            ("listen.http", R),
            ("window.window_secs", R),
            ("limits.max_groups", R),
            ("limits.http_body_limit_bytes", R),
            ("http.max_connections", R),
            ("state.path", R),
            ("scrape", R),
            ("otlp.shard_attributes", R),
        ] {
            assert_eq!(ReloadClass::of(path), Some(class), "{path}");
        }
        assert_eq!(ReloadClass::of("nonsense.field"), None);
        assert_eq!(ReloadClass::of("detectorsX"), None);
    }

    #[test]
    fn the_configuration_reference_shows_each_fields_reload_class() {
        // docs/configuration.md's field tables: | field | default | reload | meaning |.
        // `cargo run -p skewwatch-e2e --example generate` writes the reload column.
        let doc = include_str!("../../../docs/configuration.md");
        let mut rows = 0;
        for line in doc.lines() {
            let cells: Vec<_> = line.split(" | ").collect();
            let Some(field) = cells
                .first()
                .and_then(|c| c.strip_prefix("| `"))
                .and_then(|c| c.strip_suffix('`'))
            else {
                continue;
            };
            let Some(expected) = ReloadClass::of(field) else {
                continue;
            };
            rows += 1;
            assert_eq!(
                cells.get(2).copied(),
                Some(expected.as_str()),
                "docs/configuration.md row `{field}`: the reload column must say `{}` \
                 (cargo run -p skewwatch-e2e --example generate)",
                expected.as_str()
            );
        }
        assert_eq!(rows, file_field_paths(DEFAULT_CONFIG_YAML).len());
    }

    #[test]
    fn recording_threads_are_bounded() {
        for bad in [0, 17] {
            let yaml = format!("window:\n  record_threads: {bad}\n");
            let err = Config::from_yaml(&yaml, "f.yaml").unwrap_err().to_string();
            assert!(err.contains("window.record_threads"), "{err}");
        }
        let ok = Config::from_yaml("window:\n  record_threads: 16\n", "t").unwrap();
        assert_eq!(ok.engine().window.record_threads, 16);
    }

    #[test]
    fn empty_file_means_defaults() {
        let c = Config::from_yaml("", "t").unwrap();
        assert_eq!(c.startup.http_listen.port(), 9477);
        assert_eq!(
            c.startup.statsd_listen,
            Some("127.0.0.1:8125".parse().unwrap())
        );
        let off = Config::from_yaml("listen:\n  statsd: disabled\n", "t").unwrap();
        assert_eq!(off.startup.statsd_listen, None);
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
        let a = Config::embedded().live.alerting;
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
            .live
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
            c.engine().window.latency_buckets_secs,
            skewwatch_detectors::window::DEFAULT_LATENCY_BUCKETS_SECS
        );
        assert_eq!(c.startup.exposition, ExpositionConfig::default());
        let yaml = "exposition:\n  latency_buckets_secs: [0.005, 0.05, 0.5]\n  counter_retention_secs: 600\n";
        let c = Config::from_yaml(yaml, "t").unwrap();
        assert_eq!(c.engine().window.latency_buckets_secs, [0.005, 0.05, 0.5]);
        assert_eq!(
            c.startup.exposition.counter_retention,
            Duration::from_secs(600)
        );
        let none = Config::from_yaml("exposition:\n  latency_buckets_secs: []\n", "t").unwrap();
        assert!(none.engine().window.latency_buckets_secs.is_empty());
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
        assert!(c.live.token.unwrap().matches(b"s3cret"));
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
