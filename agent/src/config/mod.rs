//! Configuration: YAML parsed into [`RawConfig`] ([`raw`]), then validated into [`Config`](crate::app::Config)
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
