//! Immutable results of a closed window: what `/metrics`, `/api/v1/status`, the detectors and
//! `replay` read. Produced by [`crate::window::Windows::close`]; never mutated afterwards.

use serde::Serialize;

use crate::observation::Outcome;
use crate::stats::SkewStats;

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

/// One shard in one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardSnapshot {
    /// Shard id, or `__other__` for shards over the cap.
    pub shard: String,
    /// Requests in the window.
    pub requests: u64,
    /// Share of the group's requests (0 when the group had none).
    pub share: f64,
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
    /// Latency of failed responses.
    pub error_latency: Option<LatencySummary>,
    /// Requests that carried a latency.
    pub latency_samples: u64,
    /// The shard's top keys, with shares of the shard's requests.
    pub top_keys: Vec<KeyShare>,
}

impl ShardSnapshot {
    /// Requests with outcome `o`.
    pub fn outcome(&self, o: Outcome) -> u64 {
        self.by_outcome[o.index()]
    }
}

/// One group (sharded system) in one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSnapshot {
    /// Group name, or `__other__` for groups over the cap.
    pub group: String,
    /// Requests in the window.
    pub requests: u64,
    /// Requests per second over the window.
    pub requests_per_second: f64,
    /// Requests by outcome class.
    pub by_outcome: [u64; Outcome::COUNT],
    /// Requests whose outcome was not `ok`.
    pub errors: u64,
    /// `errors / requests`.
    pub error_ratio: Option<f64>,
    /// Cache hits.
    pub cache_hits: u64,
    /// Cache misses.
    pub cache_misses: u64,
    /// `hits / (hits + misses)`.
    pub cache_hit_ratio: Option<f64>,
    /// Latency of all responses, from the merged histograms of every shard.
    pub latency: Option<LatencySummary>,
    /// Latency of successful responses, merged.
    pub ok_latency: Option<LatencySummary>,
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
    /// Requests with outcome `o`.
    pub fn outcome(&self, o: Outcome) -> u64 {
        self.by_outcome[o.index()]
    }

    /// The shard named `name`.
    pub fn shard(&self, name: &str) -> Option<&ShardSnapshot> {
        self.shards
            .binary_search_by(|s| s.shard.as_str().cmp(name))
            .ok()
            .map(|i| &self.shards[i])
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
}

impl WindowSnapshot {
    /// A snapshot with no group, for before the first window closes.
    pub fn empty(at: f64) -> Self {
        WindowSnapshot {
            start: at,
            end: at,
            groups: Vec::new(),
        }
    }

    /// Window length in seconds.
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&GroupSnapshot> {
        self.groups
            .binary_search_by(|g| g.group.as_str().cmp(name))
            .ok()
            .map(|i| &self.groups[i])
    }
}
