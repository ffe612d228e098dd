//! Configuration: YAML parsed into [`RawConfig`] ([`raw`]), then validated into [`Config`]
//! ([`validate`]), with secrets read through [`secret`].
//!
//! Validation reports every problem at once, each with the field and why, and runs before any
//! port is bound. The embedded default is `rules/skewwatch.yaml`, compiled into the binary, so
//! `skewwatch run` with no file runs on exactly what the repository documents.

pub mod part;
pub mod raw;
pub mod secret;
pub mod validate;

use std::path::PathBuf;
use std::time::Duration;

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

/// Most windows `ui.history_windows` may keep: four hours of 10-second windows.
pub const MAX_HISTORY_WINDOWS: usize = 1440;

/// `ui:`, the live view and its history ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiConfig {
    /// Windows the history ring keeps for `GET /api/v1/history` and the page.
    pub history_windows: usize,
}
