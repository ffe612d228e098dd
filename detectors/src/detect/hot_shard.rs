//! `HotShard` detector. (Skeleton: being written.)

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{Context, Detector, Problems, RuleSettings};

/// `detectors.hot_shard` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotShardConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
}

impl Default for HotShardConfig {
    fn default() -> Self {
        HotShardConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
        }
    }
}

impl HotShardConfig {
    /// Checks every field.
    pub fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
    }
}

/// The `HotShard` detector.
#[derive(Debug, Clone)]
pub struct HotShard {
    cfg: HotShardConfig,
}

impl HotShard {
    /// A detector for windows of `window_secs`.
    pub fn new(cfg: HotShardConfig, _window_secs: f64) -> Self {
        HotShard { cfg }
    }
}

impl Detector for HotShard {
    fn alertname(&self) -> &'static str {
        "HotShard"
    }

    fn evaluate(&mut self, _ctx: &Context<'_>, _out: &mut Vec<Finding>) {
        let _ = &self.cfg;
    }
}
