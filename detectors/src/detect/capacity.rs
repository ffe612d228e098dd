//! `CapacityHeadroom` detector. (Skeleton: being written.)

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{Context, Detector, Problems, RuleSettings};

/// `detectors.capacity_headroom` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapacityHeadroomConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Configured shard capacities; the detector runs only when this is non-empty.
    pub capacities: Vec<Capacity>,
}

/// A shard's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Group name.
    pub group: String,
    /// Shard name, or `*` for every shard of the group.
    pub shard: String,
    /// Requests per second the shard can serve.
    pub max_requests_per_second: f64,
}

impl Default for CapacityHeadroomConfig {
    fn default() -> Self {
        CapacityHeadroomConfig {
            rule: RuleSettings::new(Severity::Warning, 0.0, 60.0),
            capacities: Vec::new(),
        }
    }
}

impl CapacityHeadroomConfig {
    /// Checks every field.
    pub fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
    }
}

/// The `CapacityHeadroom` detector.
#[derive(Debug, Clone)]
pub struct CapacityHeadroom {
    cfg: CapacityHeadroomConfig,
}

impl CapacityHeadroom {
    /// A detector for windows of `window_secs`.
    pub fn new(cfg: CapacityHeadroomConfig, _window_secs: f64) -> Self {
        CapacityHeadroom { cfg }
    }
}

impl Detector for CapacityHeadroom {
    fn alertname(&self) -> &'static str {
        "CapacityHeadroom"
    }

    fn evaluate(&mut self, _ctx: &Context<'_>, _out: &mut Vec<Finding>) {
        let _ = &self.cfg;
    }
}
