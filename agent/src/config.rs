//! Configuration: YAML parsed into [`RawConfig`], then validated into [`Config`].
//!
//! Validation reports every problem at once, each with the field and why, and runs before any
//! port is bound. The embedded default is `rules/skewwatch.yaml`, compiled into the binary, so
//! `skewwatch run` with no file runs on exactly what the repository documents.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
    /// StatsD UDP listener address; `null` disables it.
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
        let statsd_listen = match listen.statsd.as_deref() {
            Some(s) => c.addr("listen.statsd", Some(s), ""),
            None => None,
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
        let max_groups = c.range("limits.max_groups", limits.max_groups, d.max_groups, 1, 10_000);
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
            8 << 20,
            1024,
            1 << 30,
        );
        let ingest_queue_batches = c.range(
            "limits.ingest_queue_batches",
            limits.ingest_queue_batches,
            1024,
            1,
            1 << 20,
        );
        let statsd_receive_buffer_bytes = c.range(
            "statsd.receive_buffer_bytes",
            statsd.receive_buffer_bytes,
            8 << 20,
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
    fn empty_file_means_defaults() {
        let c = Config::from_yaml("", "t").unwrap();
        assert_eq!(c.http_listen.port(), 9477);
        assert_eq!(c.statsd_listen, None);
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_field() {
        let yaml = "listen:\n  http: nowhere\nwindow:\n  window_secs: 0\nlimits:\n  max_groups: 0\n";
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
    fn unknown_fields_are_rejected() {
        let err = Config::from_yaml("window:\n  window_sec: 5\n", "f.yaml").unwrap_err();
        assert!(err.to_string().contains("window_sec"), "{err}");
    }
}
