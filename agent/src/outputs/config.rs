//! The `exposition:` and `ui:` sections, owned by the outputs: the cumulative counters'
//! retention and latency buckets, and the live view's history ring, validated from the raw
//! file.

use std::time::Duration;

use skewwatch_detectors::window::WindowConfig;

use crate::config::raw::{RawExposition, RawUi};
use crate::config::validate::Check;

/// Validated `exposition:` settings. The latency bucket bounds live in the window
/// configuration (`WindowConfig::latency_buckets_secs`), where each closed window counts them.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpositionConfig {
    /// How long the cumulative counters of a shard, group or key that stopped appearing are
    /// still exported (flat), so one that returns continues where it left off.
    pub counter_retention: Duration,
}

impl Default for ExpositionConfig {
    fn default() -> Self {
        ExpositionConfig {
            counter_retention: Duration::from_secs(3600),
        }
    }
}

/// Most windows `ui.history_windows` may keep: four hours of 10-second windows.
pub const MAX_HISTORY_WINDOWS: usize = 1440;

/// `ui:`, the live view and its history ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiConfig {
    /// Windows the history ring keeps for `GET /api/v1/history` and the page.
    pub history_windows: usize,
}

/// Most latency buckets accepted: each bound is one more series per shard and sidecar.
const MAX_LATENCY_BUCKETS: usize = 30;

/// Validates `exposition:`: the latency bucket bounds (which the windows count) and the
/// counters' retention.
pub fn validate_exposition(
    c: &mut Check<'_>,
    raw: RawExposition,
    window_secs: f64,
) -> (Vec<f64>, ExpositionConfig) {
    let d = ExpositionConfig::default();
    let buckets = raw
        .latency_buckets_secs
        .unwrap_or_else(|| WindowConfig::default().latency_buckets_secs);
    let field = "exposition.latency_buckets_secs";
    if buckets.len() > MAX_LATENCY_BUCKETS {
        c.fail(
            field,
            format!(
                "{} bounds: use at most {MAX_LATENCY_BUCKETS}; every bound is one more series \
                 per shard on every sidecar",
                buckets.len()
            ),
        );
    }
    if let Some(b) = buckets
        .iter()
        .find(|b| !(b.is_finite() && (1e-6..=3600.0).contains(*b)))
    {
        c.fail(
            field,
            format!("{b} is out of range: every bound must be in 0.000001..=3600 seconds"),
        );
    } else if let Some(w) = buckets.windows(2).find(|w| w[0] >= w[1]) {
        c.fail(
            field,
            format!(
                "{} is not above {}: list the bounds in ascending order without repeats",
                w[1], w[0]
            ),
        );
    }
    let retention = c.secs(
        "exposition.counter_retention_secs",
        raw.counter_retention_secs,
        d.counter_retention,
        60.0,
        30.0 * 86_400.0,
    );
    if retention.as_secs_f64() < 2.0 * window_secs {
        c.fail(
            "exposition.counter_retention_secs",
            format!(
                "{} is shorter than two windows ({} s): a shard would lose its counters \
                 between two windows of traffic",
                retention.as_secs_f64(),
                2.0 * window_secs
            ),
        );
    }
    (
        buckets,
        ExpositionConfig {
            counter_retention: retention,
        },
    )
}

/// Validates `ui:`.
pub fn validate_ui(c: &mut Check<'_>, raw: RawUi) -> UiConfig {
    UiConfig {
        history_windows: c.range(
            "ui.history_windows",
            raw.history_windows,
            60,
            1,
            MAX_HISTORY_WINDOWS,
        ),
    }
}
