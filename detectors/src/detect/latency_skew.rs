//! `LatencySkew` detector. (Skeleton: being written.)

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{Context, Detector, Problems, RuleSettings};

/// `detectors.latency_skew` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LatencySkewConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
}

impl Default for LatencySkewConfig {
    fn default() -> Self {
        LatencySkewConfig {
            rule: RuleSettings::new(Severity::Warning, 0.0, 60.0),
        }
    }
}

impl LatencySkewConfig {
    /// Checks every field.
    pub fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
    }
}

/// The `LatencySkew` detector.
#[derive(Debug, Clone)]
pub struct LatencySkew {
    cfg: LatencySkewConfig,
}

impl LatencySkew {
    /// A detector for windows of `window_secs`.
    pub fn new(cfg: LatencySkewConfig, _window_secs: f64) -> Self {
        LatencySkew { cfg }
    }
}

impl Detector for LatencySkew {
    fn alertname(&self) -> &'static str {
        "LatencySkew"
    }

    fn evaluate(&mut self, _ctx: &Context<'_>, _out: &mut Vec<Finding>) {
        let _ = &self.cfg;
    }
}
