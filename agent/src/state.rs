//! The state file: what the detectors learned and the active alerts, kept across restarts.
//!
//! With `state.path` set, the pipeline writes the engine's [`EngineState`] every
//! `state.save_every_windows` windows and once more at shutdown, and the agent reads it back at
//! start-up. So a restart during an incident neither resolves the firing alerts (Alertmanager
//! sees them continue, with their original `startsAt`, and pages no one twice) nor teaches the
//! baselines that the incident is normal (they were frozen while the alerts fired, and are
//! restored as they were).
//!
//! Writes are atomic: a temporary file next to the target, written and `fsync`ed, then renamed
//! over it, and the directory `fsync`ed. A missing, unreadable, corrupt, foreign-version,
//! stale (older than `state.max_age_secs`) or future-dated (beyond
//! [`CLOCK_SKEW_ALLOWANCE_SECS`]) file is reported with a warning and ignored: the agent starts
//! fresh, never crashes on it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use skewwatch_detectors::engine::{EngineState, STATE_VERSION};

use crate::config::raw::RawState;
use crate::config::validate::Check;

/// Where the state lives and how often it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct StateStore {
    /// The file.
    pub path: PathBuf,
    /// Windows between writes.
    pub every_windows: u32,
    /// A state older than this (by the end of its last window) is not restored.
    pub max_age: Duration,
}

impl StateStore {
    /// Validates `state:`; `None` when no path is set (or it is invalid, with the problem in
    /// `c`).
    pub fn validate(raw: RawState, c: &mut Check<'_>) -> Option<StateStore> {
        let every_windows = c.range(
            "state.save_every_windows",
            raw.save_every_windows,
            6,
            1,
            10_000,
        );
        let max_age = c.secs(
            "state.max_age_secs",
            raw.max_age_secs,
            Duration::from_secs(3600),
            1.0,
            7.0 * 86_400.0,
        );
        let path = raw.path?;
        if path.as_os_str().is_empty() || path.file_name().is_none() {
            c.fail(
                "state.path",
                "name a file, e.g. /var/lib/skewwatch/state.json",
            );
            return None;
        }
        Some(StateStore {
            path,
            every_windows,
            max_age,
        })
    }
}

/// How far in the future a state file may be dated and still be read: clocks of a restarted
/// pod and of the node that wrote the file may disagree by a little.
pub const CLOCK_SKEW_ALLOWANCE_SECS: f64 = 60.0;

/// Why a state file was not restored.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// There is no file yet: the first start.
    #[error("no state file at {0}")]
    Missing(PathBuf),
    /// The file could not be read.
    #[error("cannot read the state file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a state this agent wrote.
    #[error("the state file {path} is not readable state ({why}); starting fresh")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What did not parse.
        why: String,
    },
    /// Another version of the agent wrote it.
    #[error(
        "the state file {path} has version {found}, this agent reads {STATE_VERSION}; starting fresh"
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
    /// It says it was saved in the future, past [`CLOCK_SKEW_ALLOWANCE_SECS`]: the clock moved
    /// back, or the file came from another machine; its age cannot be judged, so it is not
    /// trusted as fresh.
    #[error(
        "the state file {path} is dated {ahead_secs:.0} s in the future (more than the \
         {CLOCK_SKEW_ALLOWANCE_SECS} s clock-skew allowance); starting fresh"
    )]
    Future {
        /// The file.
        path: PathBuf,
        /// How far ahead of now it is dated.
        ahead_secs: f64,
    },
    /// It is older than `state.max_age_secs`: what it knows no longer describes the system.
    #[error(
        "the state file {path} is {age_secs:.0} s old (over state.max_age_secs); starting fresh"
    )]
    Stale {
        /// The file.
        path: PathBuf,
        /// Its age.
        age_secs: f64,
    },
}

impl StateStore {
    /// The bytes of `state`.
    pub fn encode(&self, state: &EngineState) -> Vec<u8> {
        // Plain data of numbers, strings and maps: serialization cannot fail.
        serde_json::to_vec(state).unwrap_or_default()
    }

    /// Writes `bytes` atomically; a failure is logged (the agent runs on without it).
    pub fn write(&self, bytes: &[u8]) -> bool {
        match write_atomically(&self.path, bytes) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "Cannot write the state file.");
                false
            }
        }
    }

    /// Reads the state, if there is a usable one, at wall-clock time `now`.
    pub fn load(&self, now: f64) -> Result<EngineState, LoadError> {
        let path = self.path.clone();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LoadError::Missing(path));
            }
            Err(source) => return Err(LoadError::Read { path, source }),
        };
        // The version first, so a future format is reported as such, not as corrupt.
        #[derive(serde::Deserialize)]
        struct Version {
            version: u32,
        }
        let v: Version = serde_json::from_slice(&bytes).map_err(|e| LoadError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        if v.version != STATE_VERSION {
            return Err(LoadError::Version {
                path,
                found: v.version,
            });
        }
        let state: EngineState =
            serde_json::from_slice(&bytes).map_err(|e| LoadError::Corrupt {
                path: path.clone(),
                why: e.to_string(),
            })?;
        let age_secs = now - state.saved_at;
        if -age_secs > CLOCK_SKEW_ALLOWANCE_SECS {
            return Err(LoadError::Future {
                path,
                ahead_secs: -age_secs,
            });
        }
        // A NaN age (a corrupt timestamp) is stale too.
        if age_secs.is_nan() || age_secs > self.max_age.as_secs_f64() {
            return Err(LoadError::Stale { path, age_secs });
        }
        Ok(state)
    }
}

/// Temporary file, write, fsync, rename over `path`, fsync the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    // The rename is durable once the directory is.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn store(dir: &Path) -> StateStore {
        StateStore {
            path: dir.join("state.json"),
            every_windows: 6,
            max_age: Duration::from_secs(600),
        }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("skewwatch-state-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn state(saved_at: f64) -> EngineState {
        EngineState {
            version: STATE_VERSION,
            saved_at,
            window_secs: 10.0,
            alerts: Vec::new(),
            detectors: BTreeMap::from([("HotShard".to_owned(), serde_json::json!({"db": {}}))]),
        }
    }

    #[test]
    fn a_written_state_reads_back() {
        let d = tmpdir("roundtrip");
        let s = store(&d);
        assert!(s.write(&s.encode(&state(1000.0))));
        assert_eq!(s.load(1010.0).unwrap(), state(1000.0));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_corrupt_foreign_and_stale_files_are_refused_with_a_reason() {
        let d = tmpdir("bad");
        let s = store(&d);
        assert!(matches!(s.load(0.0), Err(LoadError::Missing(_))));
        std::fs::write(&s.path, b"{not json").unwrap();
        assert!(matches!(s.load(0.0), Err(LoadError::Corrupt { .. })));
        std::fs::write(&s.path, br#"{"version": 99, "anything": true}"#).unwrap();
        assert!(matches!(
            s.load(0.0),
            Err(LoadError::Version { found: 99, .. })
        ));
        // The version this build writes, with a field it cannot read.
        let wrong = format!(
            r#"{{"version": {}, "saved_at": "yesterday"}}"#,
            skewwatch_detectors::engine::STATE_VERSION
        );
        std::fs::write(&s.path, wrong).unwrap();
        assert!(matches!(s.load(0.0), Err(LoadError::Corrupt { .. })));
        s.write(&s.encode(&state(1000.0)));
        let err = s.load(1000.0 + 601.0).unwrap_err();
        assert!(matches!(err, LoadError::Stale { .. }), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_state_file_dated_in_the_future_is_refused_beyond_the_skew_allowance() {
        let d = tmpdir("future");
        let s = store(&d);
        s.write(&s.encode(&state(10_000.0)));
        // Within the allowance (a clock a little behind the writer's): read.
        assert!(s.load(10_000.0 - CLOCK_SKEW_ALLOWANCE_SECS).is_ok());
        // An hour ahead: not fresh, whatever max_age says.
        let err = s.load(10_000.0 - 3600.0).unwrap_err();
        assert!(
            matches!(err, LoadError::Future { ahead_secs, .. } if ahead_secs == 3600.0),
            "{err}"
        );
        assert!(err.to_string().contains("in the future"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
