//! `ErrorSurge` detector. (Skeleton: being written.)

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{Context, Detector, Problems, RuleSettings};

/// `detectors.error_surge` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ErrorSurgeConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
}

impl Default for ErrorSurgeConfig {
    fn default() -> Self {
        ErrorSurgeConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
        }
    }
}

impl ErrorSurgeConfig {
    /// Checks every field.
    pub fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
    }
}

/// The `ErrorSurge` detector.
#[derive(Debug, Clone)]
pub struct ErrorSurge {
    cfg: ErrorSurgeConfig,
}

impl ErrorSurge {
    /// A detector for windows of `window_secs`.
    pub fn new(cfg: ErrorSurgeConfig, _window_secs: f64) -> Self {
        ErrorSurge { cfg }
    }
}

impl Detector for ErrorSurge {
    fn alertname(&self) -> &'static str {
        "ErrorSurge"
    }

    fn evaluate(&mut self, _ctx: &Context<'_>, _out: &mut Vec<Finding>) {
        let _ = &self.cfg;
    }
}
