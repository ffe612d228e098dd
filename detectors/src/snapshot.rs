//! Immutable results of a closed window: what `/metrics`, `/api/v1/status`, the detectors and
//! `replay` read. Produced by [`crate::window::Windows::close`]; never mutated afterwards.

use std::sync::Arc;

use serde::Serialize;

use crate::observation::Outcome;
use crate::stats::SkewStats;
use crate::whatif::{Policy, WhatIfWindow};

/// Percentiles of one latency histogram, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Requests with a latency in the histogram.
    pub count: u64,
    /// Median. HDR error bound: 1% relative at 2 significant figures.
    pub p50_ms: f64,
    /// 99th percentile, same error bound.
    pub p99_ms: f64,
    /// Largest recorded value, same error bound.
    pub max_ms: f64,
}

/// A key's estimated load and its share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyShare {
    /// The key value; `""` is the empty key (rendered `(empty)` in labels).
    pub key: String,
    /// Upper bound of the key's requests in the window.
    pub requests: u64,
    /// Over-count bound: the true count lies in `requests - error ..= requests`.
    pub error: u64,
    /// `requests` over the denominator's load (the group's or the shard's), capped at 1.
    pub share: f64,
}

impl KeyShare {
    /// The guaranteed lower bound of the key's requests, `requests - error`: the figure to
    /// judge a key on, so a key whose count is only possibly high cannot fire.
    pub fn lower_bound(&self) -> u64 {
        self.requests.saturating_sub(self.error)
    }
}

/// What a shard or a group served in one window, besides its request count: rates, outcomes,
/// cache results and latencies.
///
/// Both [`ShardSnapshot`] and [`GroupSnapshot`] hold one, flattened into their serialized
/// form. `requests` stays beside it in each: the shard's `share` follows `requests` in the
/// serialized form (`/api/v1/status`), which must not change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Traffic {
    /// Requests per second over the window.
    pub requests_per_second: f64,
    /// Requests by outcome class, indexed by [`Outcome::index`].
    pub by_outcome: [u64; Outcome::COUNT],
    /// Requests whose outcome was not `ok`.
    pub errors: u64,
    /// `errors / requests`; `None` without requests.
    pub error_ratio: Option<f64>,
    /// Cache hits.
    pub cache_hits: u64,
    /// Cache misses (backend calls).
    pub cache_misses: u64,
    /// `hits / (hits + misses)`; `None` without cache results.
    pub cache_hit_ratio: Option<f64>,
    /// Latency of all responses (merged success and error histograms).
    pub latency: Option<LatencySummary>,
    /// Latency of successful responses.
    pub ok_latency: Option<LatencySummary>,
}

impl Traffic {
    /// The traffic of `requests` requests over `duration` seconds, counted `by_outcome`, with
    /// `cache` (hits, misses) and the `latency` and `ok_latency` summaries; the rate and the
    /// ratios are derived from them.
    pub fn new(
        requests: u64,
        duration: f64,
        by_outcome: [u64; Outcome::COUNT],
        (cache_hits, cache_misses): (u64, u64),
        (latency, ok_latency): (Option<LatencySummary>, Option<LatencySummary>),
    ) -> Self {
        let errors = requests.saturating_sub(by_outcome[Outcome::Ok.index()]);
        Traffic {
            requests_per_second: requests as f64 / duration,
            by_outcome,
            errors,
            error_ratio: ratio(errors, requests),
            cache_hits,
            cache_misses,
            cache_hit_ratio: ratio(cache_hits, cache_hits.saturating_add(cache_misses)),
            latency,
            ok_latency,
        }
    }

    /// Requests with outcome `o`.
    pub fn outcome(&self, o: Outcome) -> u64 {
        self.by_outcome[o.index()]
    }
}

/// `num / den`, or `None` when `den` is 0.
pub(crate) fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// One shard in one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardSnapshot {
    /// Shard id, or `__other__` for shards over the cap.
    pub shard: String,
    /// True for the slot that collects what overflowed the shard cap (`__other__`), as opposed
    /// to a shard that is really named so.
    pub overflow: bool,
    /// Requests in the window.
    pub requests: u64,
    /// Share of the group's requests (0 when the group had none).
    pub share: f64,
    /// Rates, outcomes, cache results and the latency of all and of successful responses.
    #[serde(flatten)]
    pub traffic: Traffic,
    /// Requests per latency bucket of `WindowConfig::latency_buckets_secs` (all responses):
    /// entry `i` counts latencies in `(bound[i-1], bound[i]]`, the last entry those above the
    /// last bound; they add up to `latency_samples`. A request within one HDR resolution step
    /// above a bound (under 0.8% at 2 significant figures) may be counted under it; none at
    /// or below a bound is counted above it. Not in `/api/v1/status`: the agent's cumulative
    /// histogram is its reader.
    #[serde(skip)]
    pub latency_buckets: Vec<u64>,
    /// Sum of all responses' latencies in seconds, as recorded (to the microsecond, clamped
    /// at one hour like the histograms).
    #[serde(skip)]
    pub latency_sum_secs: f64,
    /// Latency of failed responses.
    pub error_latency: Option<LatencySummary>,
    /// Requests that carried a latency.
    pub latency_samples: u64,
    /// The shard's top keys, with shares of the shard's requests.
    pub top_keys: Vec<KeyShare>,
    /// Highest in-flight reading the shard's senders reported in the window, when any did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inflight: Option<f64>,
    /// Highest utilisation reading (0..=1) reported in the window, when any was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilisation: Option<f64>,
}

impl ShardSnapshot {
    /// False for `__other__`, the aggregate of the shards over the cap: it is no shard to
    /// judge, compare or name.
    pub fn is_tracked(&self) -> bool {
        !self.overflow
    }
}

/// One group (sharded system) in one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSnapshot {
    /// Group name, or `__other__` for groups over the cap.
    pub group: String,
    /// True for the group that collects what overflowed the group cap (`__other__`), as
    /// opposed to a group that is really named so.
    pub overflow: bool,
    /// Records folded in this window: for a group, those that overflowed its shard cap (they
    /// went to its `__other__` shard); for the overflow group, the records of every group that
    /// overflowed the group cap.
    pub folded_records: u64,
    /// Requests in the window.
    pub requests: u64,
    /// Rates, outcomes and cache results summed over every shard, and latencies from their
    /// merged histograms.
    #[serde(flatten)]
    pub traffic: Traffic,
    /// Latency of cache misses (backend calls, successful or not): the backend's own latency.
    /// `None` when no miss carried a latency.
    pub miss_latency: Option<LatencySummary>,
    /// Latency of timeouts (outcome `timeout`): where the callers' deadline lies. `None` when
    /// no timeout carried a latency.
    pub timeout_latency: Option<LatencySummary>,
    /// Skew statistics over the tracked shards (not `__other__`); `None` without load.
    pub skew: Option<SkewStats>,
    /// `1 / tracked shards`.
    pub fair_share: f64,
    /// The group's top keys, with shares of the group's requests.
    pub top_keys: Vec<KeyShare>,
    /// True when the reported top keys are certainly the true top keys, in order.
    pub keys_certified: bool,
    /// Requests that carried a key.
    pub keyed_requests: u64,
    /// Largest possible over-count of any reported key count.
    pub key_error_bound: u64,
    /// Every shard, sorted by name.
    pub shards: Vec<ShardSnapshot>,
}

impl GroupSnapshot {
    /// False for `__other__`, the aggregate of the groups over the cap: it mixes unrelated
    /// systems, so its ratios and shares are nobody's.
    pub fn is_tracked(&self) -> bool {
        !self.overflow
    }

    /// The shards that are shards, not the `__other__` aggregate, sorted by name.
    pub fn tracked_shards(&self) -> impl DoubleEndedIterator<Item = &ShardSnapshot> + Clone {
        self.shards.iter().filter(|s| s.is_tracked())
    }

    /// The shard named `name`.
    ///
    /// Only a shard by that name: never the overflow slot (see [`GroupSnapshot::overflow_shard`]).
    pub fn shard(&self, name: &str) -> Option<&ShardSnapshot> {
        // Sorted by name, then the named shard before the overflow slot of the same name.
        let i = self.shards.partition_point(|s| s.shard.as_str() < name);
        self.shards
            .get(i)
            .filter(|s| s.shard == name && !s.overflow)
    }

    /// The slot that collects what overflowed the shard cap, if anything did.
    pub fn overflow_shard(&self) -> Option<&ShardSnapshot> {
        self.shards.iter().find(|s| s.overflow)
    }
}

/// Everything one closed window saw.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowSnapshot {
    /// Window start, unix seconds.
    pub start: f64,
    /// Window end, unix seconds.
    pub end: f64,
    /// Every group, sorted by name.
    pub groups: Vec<GroupSnapshot>,
    /// The what-if simulations' predictions for the window, when any observation named a
    /// cache key since the engine started ([`crate::whatif`]). Not serialised with the
    /// snapshot: `/api/v1/status` writes it in its own shape.
    #[serde(skip)]
    pub whatif: Option<Arc<WhatIfWindow>>,
    /// The policies `whatif`'s figures are for, in their order (the observed one first), with
    /// what each sets: a view that draws hit ratio against TTL reads each policy's TTL here,
    /// since the observed policy's name does not carry it. `Some` exactly when `whatif` is;
    /// one list shared by every window.
    #[serde(skip)]
    pub whatif_policies: Option<Arc<[Policy]>>,
}

impl WindowSnapshot {
    /// A snapshot with no group, for before the first window closes.
    pub fn empty(at: f64) -> Self {
        WindowSnapshot {
            start: at,
            end: at,
            groups: Vec::new(),
            whatif: None,
            whatif_policies: None,
        }
    }

    /// Window length in seconds.
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }

    /// The groups that are groups, not the `__other__` aggregate, sorted by name.
    pub fn tracked_groups(&self) -> impl DoubleEndedIterator<Item = &GroupSnapshot> + Clone {
        self.groups.iter().filter(|g| g.is_tracked())
    }

    /// The group named `name`.
    ///
    /// Only a group by that name: never the overflow group (see
    /// [`WindowSnapshot::overflow_group`]).
    pub fn group(&self, name: &str) -> Option<&GroupSnapshot> {
        // Sorted by name, then the named group before the overflow group of the same name.
        let i = self.groups.partition_point(|g| g.group.as_str() < name);
        self.groups
            .get(i)
            .filter(|g| g.group == name && !g.overflow)
    }

    /// The group that collects what overflowed the group cap, if anything did.
    pub fn overflow_group(&self) -> Option<&GroupSnapshot> {
        self.groups.iter().find(|g| g.overflow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::ObservationRef;
    use crate::window::{WindowConfig, Windows};

    #[test]
    fn a_key_lower_bound_subtracts_the_over_count_and_never_underflows() {
        let mut k = KeyShare {
            key: "k".to_owned(),
            requests: 100,
            error: 30,
            share: 0.5,
        };
        assert_eq!(k.lower_bound(), 70);
        k.error = 130;
        assert_eq!(k.lower_bound(), 0);
    }

    #[test]
    fn tracked_shards_and_groups_leave_out_the_other_aggregate() {
        let cfg = WindowConfig {
            max_shards_per_group: 2,
            max_groups: 1,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for (g, s) in [("db", "a"), ("db", "b"), ("db", "c"), ("cache", "x")] {
            w.record(&ObservationRef::new(g, s));
        }
        let snap = w.close(10.0);
        let groups: Vec<&str> = snap.tracked_groups().map(|g| g.group.as_str()).collect();
        assert_eq!(groups, ["db"]);
        assert!(snap.groups.iter().any(|g| !g.is_tracked()));
        let db = snap.group("db").unwrap();
        let shards: Vec<&str> = db.tracked_shards().map(|s| s.shard.as_str()).collect();
        assert_eq!(shards, ["a", "b"]);
        assert_eq!(db.shards.len(), 3);
    }
}
