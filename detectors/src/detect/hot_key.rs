//! `HotKey` detector. (Skeleton: being written.)

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{Context, Detector, Problems, RuleSettings};

/// `detectors.hot_key` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotKeyConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
}

impl Default for HotKeyConfig {
    fn default() -> Self {
        HotKeyConfig {
            rule: RuleSettings::new(Severity::Warning, 0.0, 60.0),
        }
    }
}

impl HotKeyConfig {
    /// Checks every field.
    pub fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
    }
}

/// The `HotKey` detector.
#[derive(Debug, Clone)]
pub struct HotKey {
    cfg: HotKeyConfig,
}

impl HotKey {
    /// A detector for windows of `window_secs`.
    pub fn new(cfg: HotKeyConfig, _window_secs: f64) -> Self {
        HotKey { cfg }
    }
}

impl Detector for HotKey {
    fn alertname(&self) -> &'static str {
        "HotKey"
    }

    fn evaluate(&mut self, _ctx: &Context<'_>, _out: &mut Vec<Finding>) {
        let _ = &self.cfg;
    }
}
