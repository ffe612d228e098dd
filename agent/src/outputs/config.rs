//! The `exposition:` and `ui:` sections, owned by the outputs: the page's profile, the
//! cumulative counters' retention and latency buckets, and the live view's history ring,
//! validated from the raw file.

use std::time::Duration;

use skewwatch_detectors::window::WindowConfig;

use crate::config::raw::{RawExposition, RawUi};
use crate::config::validate::Check;

/// What `/metrics` writes: `exposition.profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// The whole page: the last window's gauges for every shard, every outcome class of a
    /// shard from its first window (at zero if need be), and the histogram's `_sum` and
    /// `_count`.
    #[default]
    Full,
    /// Only what a fleet instance sums, and what is per sidecar rather than per shard: no
    /// per-shard gauges (the fleet recomputes them from the counters), an outcome counter
    /// only once the shard has had that outcome, and the histogram's buckets without `_sum`
    /// and `_count` (the `+Inf` bucket is the count); fewer default bounds
    /// ([`FLEET_LATENCY_BUCKETS_SECS`]). docs/fleet.md measures both.
    Fleet,
}

impl Profile {
    /// Every profile, as the file writes them.
    pub const ALL: [Profile; 2] = [Profile::Full, Profile::Fleet];

    /// How the file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Full => "full",
            Profile::Fleet => "fleet",
        }
    }

    /// The latency bucket bounds used when `exposition.latency_buckets_secs` is not set.
    pub fn default_latency_buckets_secs(self) -> Vec<f64> {
        match self {
            Profile::Full => WindowConfig::default().latency_buckets_secs,
            Profile::Fleet => FLEET_LATENCY_BUCKETS_SECS.to_vec(),
        }
    }
}

/// The fleet profile's default bounds: seven of the full profile's, 2.5 ms to 2.5 s in steps
/// of 4 and 2.5, so that with `+Inf` a shard with successes and errors, cache hits and misses
/// exports 12 series. A latency that triples (`detectors.latency_skew.peer_ratio`) crosses a
/// bound from anywhere in a 2.5 step and from the upper four fifths (log scale) of a 4 step;
/// requests above 2.5 s count under `+Inf` only. They are a subset of the full profile's
/// bounds, so while a fleet moves from one profile to the other the bounds both write still
/// sum across sidecars. What they leave the fleet's `LatencySkew` and `DeadlinePileUp` is in
/// docs/fleet.md.
pub const FLEET_LATENCY_BUCKETS_SECS: [f64; 7] = [0.0025, 0.01, 0.025, 0.1, 0.25, 1.0, 2.5];

crate::config_part! {
    /// Validated `exposition:` settings. The latency bucket bounds live in the window
    /// configuration (`WindowConfig::latency_buckets_secs`), where each closed window counts
    /// them; the profile chooses their default.
    #[derive(Debug, Clone, PartialEq)]
    pub struct ExpositionConfig {
        /// What `/metrics` writes.
        pub profile: Profile => "exposition.profile",
        /// How long the cumulative counters of a shard, group or key that stopped appearing
        /// are still exported (flat), so one that returns continues where it left off.
        pub counter_retention: Duration => "exposition.counter_retention_secs",
    }
}

impl Default for ExpositionConfig {
    fn default() -> Self {
        ExpositionConfig {
            profile: Profile::Full,
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

/// Validates `exposition:`: the profile, the latency bucket bounds (which the windows count;
/// by default the profile's) and the counters' retention.
pub fn validate_exposition(
    c: &mut Check<'_>,
    raw: RawExposition,
    window_secs: f64,
) -> (Vec<f64>, ExpositionConfig) {
    let d = ExpositionConfig::default();
    let profile = match raw.profile.as_deref() {
        None => d.profile,
        Some(name) => Profile::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
            .unwrap_or_else(|| {
                c.fail(
                    "exposition.profile",
                    format!(
                        "`{name}` is not a profile: use `full` (the whole page) or `fleet` \
                         (only what a fleet instance sums)"
                    ),
                );
                d.profile
            }),
    };
    let buckets = raw
        .latency_buckets_secs
        .unwrap_or_else(|| profile.default_latency_buckets_secs());
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
            profile,
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
