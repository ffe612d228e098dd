//! A shard's backend capacity, and what a policy's backend calls would make it fail.
//!
//! **The model** (docs/whatif.md, "Errors"): a shard's backend serves at most `C` calls a
//! second; of the calls a policy would send it in a window, the share beyond `C` fails,
//! `1 − C / offered`, and below `C` none does. A failed call is an error for its request
//! unless a serve-stale policy holds a copy of the key, which answers it instead. This is the
//! fluid model of a saturated server: past its capacity its goodput stays at `C` and the rest
//! times out or is refused.
//!
//! `C` is configured (`whatif.backend_capacities`) or learned from the shard's own calls
//! against its errors: a window whose reported misses failed at [`SATURATED_FAILURE_SHARE`]
//! or more shows the shard saturated, and the calls it still answered per second are its
//! goodput there, `C`; a window that answered more calls a second without failing shows `C`
//! is at least that.

use serde::{Deserialize, Serialize};

/// The share of a window's backend calls that must fail for the window to show the shard
/// saturated (and teach its capacity).
pub const SATURATED_FAILURE_SHARE: f64 = 0.05;
/// The fewest backend calls a window must carry to teach a shard's capacity.
pub const MIN_LEARNING_CALLS: u64 = 20;
/// Weight of a saturated window's goodput in the learned capacity (an exponentially weighted
/// mean over saturated windows).
const LEARNING_ALPHA: f64 = 0.3;

/// A shard's backend capacity as configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendCapacity {
    /// The group.
    pub group: String,
    /// The shard, or `*` for every shard of the group.
    pub shard: String,
    /// Backend calls a second the shard answers before it fails.
    pub calls_per_second: f64,
}

/// Where a shard's capacity comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacitySource {
    /// `whatif.backend_capacities`.
    Configured,
    /// Learned from the shard's calls against its errors.
    Learned,
}

/// A shard's capacity as the model uses it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ShardCapacity {
    /// Backend calls a second the shard answers before it fails.
    pub calls_per_second: f64,
    /// Configured or learned.
    pub source: CapacitySource,
    /// Saturated windows the learned capacity rests on (0 when configured).
    pub saturated_windows: u32,
}

/// What a shard has shown of its capacity so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Learned {
    calls_per_second: Option<f64>,
    saturated_windows: u32,
}

impl Learned {
    /// Learns from one window of `secs` seconds in which the shard got `calls` backend calls,
    /// `failed` of which failed.
    pub(super) fn learn(&mut self, calls: u64, failed: u64, secs: f64) {
        if secs.is_nan() || secs <= 0.0 || calls < MIN_LEARNING_CALLS {
            return;
        }
        let failed = failed.min(calls);
        let goodput = (calls - failed) as f64 / secs;
        if failed as f64 >= SATURATED_FAILURE_SHARE * calls as f64 {
            self.saturated_windows = self.saturated_windows.saturating_add(1);
            self.calls_per_second = Some(match self.calls_per_second {
                None => goodput,
                Some(c) => c + LEARNING_ALPHA * (goodput - c),
            });
        } else if let Some(c) = &mut self.calls_per_second {
            // It answered this many without failing: its capacity is at least that.
            *c = c.max(goodput);
        }
    }

    /// The capacity learned, once a saturated window has shown it.
    pub(super) fn capacity(&self) -> Option<ShardCapacity> {
        Some(ShardCapacity {
            calls_per_second: self.calls_per_second?,
            source: CapacitySource::Learned,
            saturated_windows: self.saturated_windows,
        })
    }
}

/// The configured capacity of `shard` of `group`: its own entry, else the group's `*` one.
pub(super) fn configured(
    capacities: &[BackendCapacity],
    group: &str,
    shard: &str,
) -> Option<ShardCapacity> {
    let exact = capacities
        .iter()
        .find(|c| c.group == group && c.shard == shard);
    let entry = exact.or_else(|| {
        capacities
            .iter()
            .find(|c| c.group == group && c.shard == "*")
    })?;
    Some(ShardCapacity {
        calls_per_second: entry.calls_per_second,
        source: CapacitySource::Configured,
        saturated_windows: 0,
    })
}

/// The requests answered with an error when a shard of capacity `capacity` is offered `calls`
/// backend calls over `secs` seconds, of which `exposed` have no stale copy to fall back on:
/// the share of calls beyond the capacity fails, and each failed exposed call is an error.
pub(super) fn overload_errors(capacity: f64, secs: f64, calls: f64, exposed: f64) -> f64 {
    if secs.is_nan() || secs <= 0.0 || calls <= 0.0 {
        return 0.0;
    }
    let offered = calls / secs;
    if offered <= capacity {
        return 0.0;
    }
    (1.0 - capacity / offered) * exposed.clamp(0.0, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_beyond_the_capacity_fail_and_a_stale_copy_answers_its_share() {
        // 150 calls/s offered to 100: a third fails.
        assert!((overload_errors(100.0, 10.0, 1500.0, 1500.0) - 500.0).abs() < 1e-9);
        // Half the calls had a copy to serve instead: half the failures reach a request.
        assert!((overload_errors(100.0, 10.0, 1500.0, 750.0) - 250.0).abs() < 1e-9);
        // Under the capacity nothing fails.
        assert_eq!(overload_errors(100.0, 10.0, 990.0, 990.0), 0.0);
        assert_eq!(overload_errors(100.0, 0.0, 990.0, 990.0), 0.0);
    }

    #[test]
    fn a_saturated_window_teaches_its_goodput_and_a_busier_healthy_one_raises_it() {
        let mut l = Learned::default();
        // Healthy windows alone say nothing of where the shard saturates.
        l.learn(500, 0, 10.0);
        assert_eq!(l.capacity(), None);
        // Too few calls to teach.
        l.learn(10, 9, 10.0);
        assert_eq!(l.capacity(), None);
        // 1,500 calls, 500 failed: 100 answered a second.
        l.learn(1500, 500, 10.0);
        let c = l.capacity().unwrap();
        assert_eq!(
            (c.calls_per_second, c.source, c.saturated_windows),
            (100.0, CapacitySource::Learned, 1)
        );
        // The next saturated window moves it by a weight of 0.3.
        l.learn(1400, 200, 10.0);
        assert!((l.capacity().unwrap().calls_per_second - 106.0).abs() < 1e-9);
        // A window that answered 130 a second without failing: at least 130.
        l.learn(1300, 0, 10.0);
        assert_eq!(l.capacity().unwrap().calls_per_second, 130.0);
        // A quieter healthy one lowers nothing.
        l.learn(300, 0, 10.0);
        assert_eq!(l.capacity().unwrap().calls_per_second, 130.0);
    }

    #[test]
    fn a_shards_own_entry_comes_before_its_groups_star() {
        let caps = vec![
            BackendCapacity {
                group: "g".into(),
                shard: "*".into(),
                calls_per_second: 50.0,
            },
            BackendCapacity {
                group: "g".into(),
                shard: "s1".into(),
                calls_per_second: 80.0,
            },
        ];
        assert_eq!(configured(&caps, "g", "s1").unwrap().calls_per_second, 80.0);
        assert_eq!(configured(&caps, "g", "s2").unwrap().calls_per_second, 50.0);
        assert_eq!(configured(&caps, "h", "s1"), None);
    }
}
