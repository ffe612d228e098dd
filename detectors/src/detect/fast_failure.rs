//! `FastFailureSink` detector. (Skeleton: being written.)

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{Context, Detector, Problems, RuleSettings};

/// `detectors.fast_failure_sink` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FastFailureSinkConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
}

impl Default for FastFailureSinkConfig {
    fn default() -> Self {
        FastFailureSinkConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
        }
    }
}

impl FastFailureSinkConfig {
    /// Checks every field.
    pub fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
    }
}

/// The `FastFailureSink` detector.
#[derive(Debug, Clone)]
pub struct FastFailureSink {
    cfg: FastFailureSinkConfig,
}

impl FastFailureSink {
    /// A detector for windows of `window_secs`.
    pub fn new(cfg: FastFailureSinkConfig, _window_secs: f64) -> Self {
        FastFailureSink { cfg }
    }
}

impl Detector for FastFailureSink {
    fn alertname(&self) -> &'static str {
        "FastFailureSink"
    }

    fn evaluate(&mut self, _ctx: &Context<'_>, _out: &mut Vec<Finding>) {
        let _ = &self.cfg;
    }
}
