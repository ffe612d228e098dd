//! The agent's configuration, composed: each stage's validated settings, split into what is
//! fixed at start-up and what a reload applies.
//!
//! [`crate::config`] reads the file into its raw sections and collects problems; the stages
//! validate the sections they own; this module puts the results together into [`Config`],
//! so the configuration layer never reaches up into the rooms it configures.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use skewwatch_detectors::detect::DetectorsConfig;
use skewwatch_detectors::engine::EngineConfig;
use skewwatch_detectors::whatif::WhatIfConfig;
use skewwatch_detectors::window::WindowConfig;

use crate::alerting::AlertingConfig;
use crate::config::part::{self, Part};
use crate::config::raw::RawShutdown;
use crate::config::validate::{Check, exposure_problems};
use crate::config::{
    ConfigError, DEFAULT_CONFIG_YAML, EnvLookup, Problem, RawConfig, Secret, process_env,
};
use crate::http::config::HttpConfig;
use crate::ingest::fleet::{self, FleetConfig};
use crate::ingest::otlp;
use crate::ingest::scrape::{self, ScrapeJob};
use crate::ingest::statsd::{self, StatsdConfig};
use crate::outputs::config::{ExpositionConfig, UiConfig};

/// Where StatsD listens, as `--statsd-listen` says it: an address, or `disabled` (`None`), as
/// `listen.statsd` in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsdListen(pub Option<SocketAddr>);

impl std::str::FromStr for StatsdListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disabled" | "" => Ok(StatsdListen(None)),
            _ => s.parse().map(|a| StatsdListen(Some(a))).map_err(|_| {
                format!("`{s}` is not an IP:port address or `disabled` (write e.g. 127.0.0.1:8125)")
            }),
        }
    }
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
        /// The StatsD input: its socket's buffer and its mappings, the receiver thread is
        /// started with them.
        pub statsd: StatsdConfig => part,
        /// Prometheus targets read as input; one task per job, started with them.
        pub scrape: Vec<ScrapeJob> => "scrape",
        /// The fleet input, on a fleet instance: the task, the backfill and the window gate
        /// are set up at start.
        pub fleet: Option<FleetConfig> => "fleet",
        /// A listener off loopback may run without a token.
        pub allow_unauthenticated: bool => "auth.allow_unauthenticated",
        /// Where alert state and baselines are kept across restarts, if anywhere; the
        /// pipeline reads it once and writes it for the rest of its life.
        pub state: Option<crate::state::StateStore> => "state",
        /// The page's profile and the cumulative series that add up across sidecars.
        pub exposition: ExpositionConfig => part,
        /// How OTLP spans and metric points map to observations; shared by the HTTP handlers.
        pub otlp: otlp::Mapping => "otlp",
        /// The live view at `GET /`; its history ring is sized once.
        pub ui: UiConfig => "ui.history_windows",
        /// How the agent stops: the wait for a last scrape.
        pub shutdown: ShutdownConfig => "shutdown",
        /// The what-if simulations of the look-aside cache: they size their memory once.
        pub whatif: WhatIfConfig => "whatif",
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

/// The `shutdown:` section, the assembly's own: how long a stopping agent that has been
/// scraped keeps `/metrics` up for a scrape of its last counts ([`super::Running::shutdown`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ShutdownConfig {
    /// Longest wait, from the signal, for a scrape that began after the last counts were
    /// published; zero never waits.
    pub final_scrape_grace: Duration,
}

impl ShutdownConfig {
    /// Longest `shutdown.final_scrape_grace_secs`: a scrape interval is seconds to a minute,
    /// and the supervisor's stop timeout has to cover the wait.
    pub const MAX_FINAL_SCRAPE_GRACE_SECS: f64 = 300.0;

    /// The section validated, its problems pushed to `c`.
    fn validate(raw: RawShutdown, c: &mut Check<'_>) -> ShutdownConfig {
        ShutdownConfig {
            final_scrape_grace: c.secs(
                "shutdown.final_scrape_grace_secs",
                raw.final_scrape_grace_secs,
                Duration::from_secs(20),
                0.0,
                Self::MAX_FINAL_SCRAPE_GRACE_SECS,
            ),
        }
    }
}

/// The window settings belong to start-up. Every field of [`WindowConfig`] is named in
/// `window_fields` (its pattern has no `..`) beside the path it is read from and its
/// comparison, so a field added to it does not compile until it has a row there.
impl part::Part for WindowConfig {
    fn paths(out: &mut Vec<&'static str>) {
        let d = WindowConfig::default();
        out.extend(window_fields(&d, &d).into_iter().filter_map(|(p, _)| p));
    }

    fn changed(&self, other: &Self, out: &mut Vec<&'static str>) {
        for (path, differs) in window_fields(self, other) {
            if differs && let Some(path) = path {
                out.push(path);
            }
        }
    }
}

/// Each field of [`WindowConfig`]: the path it is read from (`None` for the fields the file does
/// not set: `shard_top_keys`, `dispersion_alpha` keep their defaults) and whether `a` and `b`
/// differ in it. One row per field, path and comparison together, so neither can drift from the
/// other.
fn window_fields(a: &WindowConfig, b: &WindowConfig) -> [(Option<&'static str>, bool); 14] {
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
    } = a;
    [
        (Some("window.window_secs"), *window_secs != b.window_secs),
        (
            Some("window.shard_idle_windows"),
            *shard_idle_windows != b.shard_idle_windows,
        ),
        (Some("limits.max_groups"), *max_groups != b.max_groups),
        (
            Some("limits.max_shards_per_group"),
            *max_shards_per_group != b.max_shards_per_group,
        ),
        (
            Some("limits.max_shards_total"),
            *max_shards_total != b.max_shards_total,
        ),
        (
            Some("limits.pinned_groups"),
            *pinned_groups != b.pinned_groups,
        ),
        (
            Some("limits.group_key_slots"),
            *group_key_slots != b.group_key_slots,
        ),
        (
            Some("limits.shard_key_slots"),
            *shard_key_slots != b.shard_key_slots,
        ),
        (
            Some("limits.exported_keys_per_group"),
            *top_keys != b.top_keys,
        ),
        (None, *shard_top_keys != b.shard_top_keys),
        (
            Some("limits.latency_sigfig"),
            *latency_sigfig != b.latency_sigfig,
        ),
        (None, *dispersion_alpha != b.dispersion_alpha),
        (
            Some("exposition.latency_buckets_secs"),
            *latency_buckets_secs != b.latency_buckets_secs,
        ),
        (
            Some("window.record_threads"),
            *record_threads != b.record_threads,
        ),
    ]
}

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

impl Config {
    /// The engine's configuration: the windows as started, the detectors as in force.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            window: self.startup.window.clone(),
            detectors: self.live.detectors.clone(),
            whatif: self.startup.whatif.clone(),
        }
    }
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
    /// `--statsd-listen`, which may turn StatsD off), checked again for listeners exposed
    /// without a token.
    pub fn with_listeners(
        mut self,
        http: Option<SocketAddr>,
        statsd: Option<StatsdListen>,
    ) -> Result<Config, ConfigError> {
        if let Some(a) = http {
            self.startup.http_listen = a;
        }
        if let Some(StatsdListen(a)) = statsd {
            self.startup.statsd_listen = a;
        }
        let problems = exposure_problems(
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
        validate(raw, env).map_err(|problems| ConfigError::Invalid {
            origin: origin.to_owned(),
            problems,
        })
    }
}

/// Validates every field of `raw` and reads every secret through `env`, reporting all
/// problems at once: each section is validated by the stage that owns it.
fn validate(raw: RawConfig, env: EnvLookup<'_>) -> Result<Config, Vec<Problem>> {
    let mut c = Check::new(env);
    let (http_listen, statsd_listen) = c.listen(raw.listen.unwrap_or_default());
    let mut window = c.window(
        raw.window.unwrap_or_default(),
        &raw.limits.clone().unwrap_or_default(),
    );
    let (latency_buckets_secs, exposition) = crate::outputs::config::validate_exposition(
        &mut c,
        raw.exposition.unwrap_or_default(),
        window.window_secs,
    );
    window.latency_buckets_secs = latency_buckets_secs;
    let limits = c.limits(raw.limits.unwrap_or_default());
    let statsd = statsd::config::validate(&mut c, raw.statsd.unwrap_or_default());
    let scrape = scrape::config::validate(&mut c, raw.scrape.unwrap_or_default());
    let fleet = fleet::config::validate(&mut c, raw.fleet.unwrap_or_default(), window.window_secs);
    let http = crate::http::config::validate(
        &mut c,
        raw.http.unwrap_or_default(),
        limits.http_body_limit_bytes,
    );
    let auth = raw.auth.unwrap_or_default();
    let allow_unauthenticated = auth.allow_unauthenticated.unwrap_or(false);
    let token = c.auth(auth);
    if let Some(addr) = http_listen {
        for p in exposure_problems(addr, statsd_listen, token.is_some(), allow_unauthenticated) {
            c.push(p);
        }
    }
    let detectors = raw.detectors.unwrap_or_default();
    for p in detectors.problems("detectors") {
        c.fail(&p.field, p.why);
    }
    let alerting = crate::alerting::config::validate(&mut c, raw.alerting.unwrap_or_default());
    let state = crate::state::StateStore::validate(raw.state.unwrap_or_default(), &mut c);
    let ui = crate::outputs::config::validate_ui(&mut c, raw.ui.unwrap_or_default());
    let otlp = otlp::config::validate(&mut c, raw.otlp.unwrap_or_default());
    let shutdown = ShutdownConfig::validate(raw.shutdown.unwrap_or_default(), &mut c);
    let whatif = c.whatif(raw.whatif.unwrap_or_default());

    let problems = c.into_problems();
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Config {
        startup: Startup {
            http_listen: http_listen.expect("checked"),
            statsd_listen,
            window,
            http,
            ingest_queue_batches: limits.ingest_queue_batches,
            ingest_queue_bytes: limits.ingest_queue_bytes,
            statsd,
            scrape,
            fleet,
            allow_unauthenticated,
            state,
            exposition,
            otlp,
            ui,
            shutdown,
            whatif,
        },
        live: Live {
            token,
            detectors,
            alerting,
        },
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::file_field_paths;
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
    fn a_change_to_a_window_field_is_reported_by_its_path() {
        use crate::config::part::Part;
        let a = WindowConfig::default();
        let cases = [
            (
                WindowConfig {
                    window_secs: 30.0,
                    ..a.clone()
                },
                Some("window.window_secs"),
            ),
            (
                WindowConfig {
                    max_groups: 3,
                    ..a.clone()
                },
                Some("limits.max_groups"),
            ),
            (
                WindowConfig {
                    record_threads: 2,
                    ..a.clone()
                },
                Some("window.record_threads"),
            ),
            (
                WindowConfig {
                    dispersion_alpha: 0.5,
                    ..a.clone()
                },
                None,
            ),
        ];
        for (b, want) in cases {
            let mut out = Vec::new();
            a.changed(&b, &mut out);
            assert_eq!(out, want.into_iter().collect::<Vec<_>>());
        }
        let mut all = Vec::new();
        WindowConfig::paths(&mut all);
        assert_eq!(all.len(), 12, "{all:?}");
    }

    #[test]
    fn the_command_line_turns_statsd_off_as_the_file_does() {
        let off: StatsdListen = "disabled".parse().unwrap();
        let c = Config::embedded().with_listeners(None, Some(off)).unwrap();
        assert_eq!(c.startup.statsd_listen, None);
        let at: StatsdListen = "127.0.0.1:9125".parse().unwrap();
        let c = Config::embedded().with_listeners(None, Some(at)).unwrap();
        assert_eq!(
            c.startup.statsd_listen,
            Some("127.0.0.1:9125".parse().unwrap())
        );
        assert!(
            "nowhere"
                .parse::<StatsdListen>()
                .unwrap_err()
                .contains("disabled")
        );
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
    fn the_fleet_profile_brings_its_bounds_unless_they_are_set_and_needs_a_restart() {
        use crate::outputs::config::{FLEET_LATENCY_BUCKETS_SECS, Profile};
        let full = Config::embedded();
        assert_eq!(full.startup.exposition.profile, Profile::Full);
        let fleet = Config::from_yaml("exposition:\n  profile: fleet\n", "t").unwrap();
        assert_eq!(fleet.startup.exposition.profile, Profile::Fleet);
        assert_eq!(
            fleet.engine().window.latency_buckets_secs,
            FLEET_LATENCY_BUCKETS_SECS
        );
        // Every fleet bound is a full bound: mixed fleets still sum the bounds both write.
        for b in FLEET_LATENCY_BUCKETS_SECS {
            assert!(
                full.engine().window.latency_buckets_secs.contains(&b),
                "{b}"
            );
        }
        let set = "exposition:\n  profile: fleet\n  latency_buckets_secs: [0.1]\n";
        let set = Config::from_yaml(set, "t").unwrap();
        assert_eq!(set.engine().window.latency_buckets_secs, [0.1]);
        // A reload names the profile alone, and only as needing a restart.
        assert_eq!(
            full.startup.changes(&set.startup),
            ["exposition.latency_buckets_secs", "exposition.profile"]
        );
        assert_eq!(
            ReloadClass::of("exposition.profile"),
            Some(ReloadClass::Restart)
        );
        // A wrong name is reported with the other problems, by field.
        let bad = "exposition:\n  profile: sparse\n  counter_retention_secs: 1\n";
        let err = Config::from_yaml(bad, "f.yaml").unwrap_err().to_string();
        assert!(
            err.contains("f.yaml: exposition.profile") && err.contains("`full`"),
            "{err}"
        );
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
