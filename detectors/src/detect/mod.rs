//! Detectors: the fourth stage (`... -> SkewStats -> Detectors -> Alerts`).
//!
//! Each detector reads one closed window ([`WindowSnapshot`]) plus its own state (baselines,
//! streaks, CUSUM sums) and reports a [`Finding`] for every entity whose condition holds now.
//! The [`crate::alert::AlertBook`] turns findings into pending, firing and resolved alerts.
//! Time is the window's end, passed in; nothing here reads a clock.
//!
//! Every detector documents its signals, its defaults and why it does not false-alarm on
//! ordinary traffic. The defaults are in `rules/skewwatch.yaml`.

pub mod baseline;
pub mod cache_collapse;
pub mod capacity;
pub mod error_surge;
pub mod fast_failure;
pub mod hot_key;
pub mod hot_shard;
pub mod latency_skew;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::alert::{AlertBook, AlertRule, Finding, Severity};
use crate::snapshot::WindowSnapshot;

/// What a detector sees at one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The window that just closed; `snapshot.end` is "now".
    pub snapshot: &'a WindowSnapshot,
    /// Active alerts before this evaluation (to freeze baselines while an alert is active).
    pub alerts: &'a AlertBook,
    /// Configured window length in seconds.
    pub window_secs: f64,
}

impl Context<'_> {
    /// Evaluation time: the end of the window.
    pub fn now(&self) -> f64 {
        self.snapshot.end
    }
}

/// One detector.
pub trait Detector: Send + fmt::Debug {
    /// The alert name it reports.
    fn alertname(&self) -> &'static str;
    /// Examines one closed window and pushes a finding for every entity whose condition holds.
    fn evaluate(&mut self, ctx: &Context<'_>, out: &mut Vec<Finding>);
}

/// A configuration problem: the field's dotted path and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// Dotted path, e.g. `detectors.hot_shard.min_requests`.
    pub field: String,
    /// What is wrong and what to do.
    pub why: String,
}

/// Collects problems under a path prefix.
#[derive(Debug)]
pub struct Problems<'a> {
    prefix: String,
    out: &'a mut Vec<FieldProblem>,
}

impl<'a> Problems<'a> {
    /// Problems under `prefix` go into `out`.
    pub fn new(prefix: &str, out: &'a mut Vec<FieldProblem>) -> Self {
        Problems {
            prefix: prefix.to_owned(),
            out,
        }
    }

    /// Records a problem with `field` under the prefix.
    pub fn fail(&mut self, field: &str, why: impl fmt::Display) {
        self.out.push(FieldProblem {
            field: format!("{}.{field}", self.prefix),
            why: why.to_string(),
        });
    }

    /// Checks `lo <= v <= hi` (and finiteness).
    pub fn range(&mut self, field: &str, v: f64, lo: f64, hi: f64) {
        if !(v.is_finite() && v >= lo && v <= hi) {
            self.fail(field, format!("{v} is out of range: use {lo}..={hi}"));
        }
    }

    /// Checks a count of windows: `1..=`[`MAX_WINDOWS`].
    pub fn windows(&mut self, field: &str, v: u32) {
        self.windows_from(field, v as usize, 1);
    }

    /// Checks a count of windows whose smallest sensible value is `lo` (0 where none means
    /// "never", 3 for a fitted trend): `lo..=`[`MAX_WINDOWS`].
    pub fn windows_from(&mut self, field: &str, v: usize, lo: usize) {
        if !(lo..=MAX_WINDOWS as usize).contains(&v) {
            self.fail(
                field,
                format!("{v} is out of range: use {lo}..={MAX_WINDOWS}"),
            );
        }
    }
}

/// Largest count of windows any detector setting accepts: warm-ups, streaks, freeze limits
/// and fit lengths alike.
///
/// At the default 10 s windows this is a little over a day. No detector should wait longer
/// than that to learn a baseline or to call a condition persistent, so a larger value is
/// almost surely a unit mistake (seconds typed where windows are meant). The bound also caps
/// memory: `capacity_headroom.projection_windows` keeps one sample per window for every shard
/// with a capacity, 16 bytes each. The shipped `rules/skewwatch.yaml` stays far below it.
pub const MAX_WINDOWS: u32 = 10_000;

/// Settings every detector has: whether it runs and how its alert is timed.
///
/// In YAML this is each detector's `alert:` section. Fields left out take the generic defaults
/// (enabled, `warning`, `for_secs: 0`, `keep_firing_for_secs: 60`), not the detector's own: the
/// shipped `rules/skewwatch.yaml` spells every field out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuleSettings {
    /// Run the detector.
    pub enabled: bool,
    /// The `severity` label.
    pub severity: Severity,
    /// Prometheus-style `for`: the condition must hold this long before the alert fires.
    pub for_secs: f64,
    /// Prometheus-style `keep_firing_for`: hysteresis after the condition stops holding.
    pub keep_firing_for_secs: f64,
}

impl Default for RuleSettings {
    fn default() -> Self {
        RuleSettings::new(Severity::Warning, 0.0, 60.0)
    }
}

impl RuleSettings {
    /// Settings with the given severity and timing.
    pub const fn new(severity: Severity, for_secs: f64, keep_firing_for_secs: f64) -> Self {
        RuleSettings {
            enabled: true,
            severity,
            for_secs,
            keep_firing_for_secs,
        }
    }

    /// The alert timing.
    pub fn rule(&self) -> AlertRule {
        AlertRule {
            for_secs: self.for_secs,
            keep_firing_for_secs: self.keep_firing_for_secs,
        }
    }

    /// Checks the timing fields.
    pub fn check(&self, p: &mut Problems<'_>) {
        p.range("for_secs", self.for_secs, 0.0, 86_400.0);
        p.range(
            "keep_firing_for_secs",
            self.keep_firing_for_secs,
            0.0,
            86_400.0,
        );
    }
}

/// The configuration of every detector (`detectors:` in the YAML).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectorsConfig {
    /// `HotShard`.
    pub hot_shard: hot_shard::HotShardConfig,
    /// `HotKey`.
    pub hot_key: hot_key::HotKeyConfig,
    /// `LatencySkew`.
    pub latency_skew: latency_skew::LatencySkewConfig,
    /// `ErrorSurge`.
    pub error_surge: error_surge::ErrorSurgeConfig,
    /// `CacheHitCollapse`.
    pub cache_hit_collapse: cache_collapse::CacheHitCollapseConfig,
    /// `FastFailureSink`.
    pub fast_failure_sink: fast_failure::FastFailureSinkConfig,
    /// `CapacityHeadroom`.
    pub capacity_headroom: capacity::CapacityHeadroomConfig,
}

impl DetectorsConfig {
    /// Every problem in the detector settings, with paths under `prefix` (e.g. `detectors`).
    pub fn problems(&self, prefix: &str) -> Vec<FieldProblem> {
        let mut out = Vec::new();
        self.hot_shard
            .check(&mut Problems::new(&format!("{prefix}.hot_shard"), &mut out));
        self.hot_key
            .check(&mut Problems::new(&format!("{prefix}.hot_key"), &mut out));
        self.latency_skew.check(&mut Problems::new(
            &format!("{prefix}.latency_skew"),
            &mut out,
        ));
        self.error_surge.check(&mut Problems::new(
            &format!("{prefix}.error_surge"),
            &mut out,
        ));
        self.cache_hit_collapse.check(&mut Problems::new(
            &format!("{prefix}.cache_hit_collapse"),
            &mut out,
        ));
        self.fast_failure_sink.check(&mut Problems::new(
            &format!("{prefix}.fast_failure_sink"),
            &mut out,
        ));
        self.capacity_headroom.check(&mut Problems::new(
            &format!("{prefix}.capacity_headroom"),
            &mut out,
        ));
        out
    }

    /// The alert timing rules, by alert name.
    pub fn rules(&self) -> BTreeMap<String, AlertRule> {
        [
            ("HotShard", self.hot_shard.rule.rule()),
            ("HotKey", self.hot_key.rule.rule()),
            ("LatencySkew", self.latency_skew.rule.rule()),
            ("ErrorSurge", self.error_surge.rule.rule()),
            ("CacheHitCollapse", self.cache_hit_collapse.rule.rule()),
            ("FastFailureSink", self.fast_failure_sink.rule.rule()),
            ("CapacityHeadroom", self.capacity_headroom.rule.rule()),
        ]
        .into_iter()
        .map(|(n, r)| (n.to_owned(), r))
        .collect()
    }

    /// The enabled detectors, in a fixed order.
    pub fn build(&self, window_secs: f64) -> Vec<Box<dyn Detector>> {
        let mut v: Vec<Box<dyn Detector>> = Vec::new();
        if self.hot_shard.rule.enabled {
            v.push(Box::new(hot_shard::HotShard::new(
                self.hot_shard.clone(),
                window_secs,
            )));
        }
        if self.hot_key.rule.enabled {
            v.push(Box::new(hot_key::HotKey::new(
                self.hot_key.clone(),
                window_secs,
            )));
        }
        if self.latency_skew.rule.enabled {
            v.push(Box::new(latency_skew::LatencySkew::new(
                self.latency_skew.clone(),
                window_secs,
            )));
        }
        if self.error_surge.rule.enabled {
            v.push(Box::new(error_surge::ErrorSurge::new(
                self.error_surge.clone(),
                window_secs,
            )));
        }
        if self.cache_hit_collapse.rule.enabled {
            v.push(Box::new(cache_collapse::CacheHitCollapse::new(
                self.cache_hit_collapse.clone(),
                window_secs,
            )));
        }
        if self.fast_failure_sink.rule.enabled {
            v.push(Box::new(fast_failure::FastFailureSink::new(
                self.fast_failure_sink.clone(),
                window_secs,
            )));
        }
        if self.capacity_headroom.rule.enabled && !self.capacity_headroom.capacities.is_empty() {
            v.push(Box::new(capacity::CapacityHeadroom::new(
                self.capacity_headroom.clone(),
                window_secs,
            )));
        }
        v
    }
}

/// Formats a ratio as a percentage with one decimal, for annotations.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Formats a number with up to three significant decimals, for annotations.
pub fn num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Test support shared by the detectors' unit tests.
#[cfg(test)]
pub(crate) mod testkit {
    use super::{Context, Detector};
    use crate::alert::{AlertBook, Finding};
    use crate::snapshot::WindowSnapshot;

    /// Runs `det` over `snap` as the engine does, then applies its findings to `book`.
    pub(crate) fn evaluate(
        det: &mut dyn Detector,
        book: &mut AlertBook,
        snap: &WindowSnapshot,
        window_secs: f64,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        let ctx = Context {
            snapshot: snap,
            alerts: book,
            window_secs,
        };
        det.evaluate(&ctx, &mut out);
        book.update(snap.end, out.clone());
        out
    }
}
