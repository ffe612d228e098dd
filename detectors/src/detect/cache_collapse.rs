//! `CacheHitCollapse` detector. (Skeleton: being written.)

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{Context, Detector, Problems, RuleSettings};

/// `detectors.cache_hit_collapse` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheHitCollapseConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
}

impl Default for CacheHitCollapseConfig {
    fn default() -> Self {
        CacheHitCollapseConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
        }
    }
}

impl CacheHitCollapseConfig {
    /// Checks every field.
    pub fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
    }
}

/// The `CacheHitCollapse` detector.
#[derive(Debug, Clone)]
pub struct CacheHitCollapse {
    cfg: CacheHitCollapseConfig,
}

impl CacheHitCollapse {
    /// A detector for windows of `window_secs`.
    pub fn new(cfg: CacheHitCollapseConfig, _window_secs: f64) -> Self {
        CacheHitCollapse { cfg }
    }
}

impl Detector for CacheHitCollapse {
    fn alertname(&self) -> &'static str {
        "CacheHitCollapse"
    }

    fn evaluate(&mut self, _ctx: &Context<'_>, _out: &mut Vec<Finding>) {
        let _ = &self.cfg;
    }
}
