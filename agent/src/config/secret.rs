//! Secrets in the configuration: the ingest bearer token and webhook HMAC keys.
//!
//! A configuration names where a secret lives ([`SecretSource`]: a file or an environment
//! variable); validation reads it into a [`Secret`], so `check-config` and `run` read the same
//! secrets the same way and refuse the same configurations. A [`Secret`] never shows its value
//! in `Debug` output or logs.
//!
//! The environment is read only through an [`EnvLookup`], so tests pass their own lookup
//! instead of mutating the process environment.

use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Reads an environment variable. The one way the agent reads the environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
#[expect(
    clippy::disallowed_methods,
    reason = "the one function through which the agent reads its environment"
)]
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Where a secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// Read from this file, trimmed.
    File(PathBuf),
    /// Read from this environment variable, trimmed.
    Env(String),
}

/// Why a secret could not be read. Messages name the source, never the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The variable is not set (or not valid UTF-8).
    #[error("environment variable {0} is not set")]
    EnvUnset(String),
    /// The secret is empty after trimming: an empty token or key would mean no protection.
    #[error("the secret is empty; put a non-empty value there")]
    Empty,
}

impl SecretSource {
    /// Reads the secret through `env`. The value is trimmed, so a file with a trailing
    /// newline works, and an empty one is refused.
    pub fn read(&self, env: EnvLookup<'_>) -> Result<Secret, SecretError> {
        let text = match self {
            SecretSource::File(path) => {
                std::fs::read_to_string(path).map_err(|source| SecretError::File {
                    path: path.clone(),
                    source,
                })?
            }
            SecretSource::Env(name) => {
                env(name).ok_or_else(|| SecretError::EnvUnset(name.clone()))?
            }
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Secret::new(text.as_bytes()))
    }
}

/// A secret value. `Debug` never shows it, and equality takes the same time whatever the
/// values are.
#[derive(Clone)]
pub struct Secret(Arc<[u8]>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.matches(&other.0)
    }
}

impl Secret {
    /// A secret from raw bytes.
    pub fn new(bytes: &[u8]) -> Secret {
        Secret(bytes.into())
    }

    /// The secret's bytes, for signing. Never log them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// True when `given` equals the secret. Both sides are hashed first and the digests
    /// compared in constant time, so neither the position of the first difference nor the
    /// secret's length shows in the time taken.
    pub fn matches(&self, given: &[u8]) -> bool {
        Sha256::digest(given).ct_eq(&Sha256::digest(&self.0)).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_read_through_the_lookup_trimmed_and_never_empty() {
        let env = |n: &str| (n == "TOK").then(|| " abc \n".to_string());
        let s = SecretSource::Env("TOK".into()).read(&env).unwrap();
        assert!(s.matches(b"abc"));
        assert!(!s.matches(b"abc "));
        assert!(!s.matches(b"ab"));
        let err = SecretSource::Env("NOPE".into()).read(&env).unwrap_err();
        assert!(err.to_string().contains("NOPE"), "{err}");
        let blank = |_: &str| Some(" \n".to_string());
        assert!(matches!(
            SecretSource::Env("X".into()).read(&blank),
            Err(SecretError::Empty)
        ));
        let err = SecretSource::File("/nonexistent/skewwatch-secret".into())
            .read(&env)
            .unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/skewwatch-secret"),
            "{err}"
        );
    }

    #[test]
    fn a_secret_never_shows_in_debug_output() {
        let s = Secret::new(b"hunter2");
        assert_eq!(format!("{s:?}"), "Secret(redacted)");
        assert_eq!(s, Secret::new(b"hunter2"));
        assert_ne!(s, Secret::new(b"hunter3"));
    }
}
