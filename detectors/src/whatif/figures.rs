//! What a closed window's simulation predicts: per group and per shard, each policy's hit
//! ratio and backend calls per request with the sample's error bound, beside what the cache
//! itself reported.

use serde::Serialize;

use super::capacity::ShardCapacity;

/// One policy's prediction for a group or a shard over one window.
///
/// `backend_calls_per_request` is the Horvitz–Thompson estimate: the sampled keys' backend
/// calls, each weighted by the inverse of the sampling rate when it was made, over every
/// request that named a cache key (counted exactly, not sampled). A hot key that falls in or
/// out of the sample moves the estimate little, as a key's weight is its backend calls, and
/// a hot key makes few. `hit_ratio` is its complement: in this model every miss is one
/// backend call. Both are clamped to 0..=1; with no request both are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PolicyFigures {
    /// Predicted share of requests served by the cache, 0..=1.
    pub hit_ratio: f64,
    /// Predicted backend calls per request, 0..=1.
    pub backend_calls_per_request: f64,
    /// Predicted share of requests answered with an error, 0..=1, less those a serve-stale
    /// policy answers with the copy it holds. Where the shard's capacity is known
    /// ([`ShardWhatIf::capacity`]), the calls the policy would send it beyond that capacity
    /// fail (the capacity model); elsewhere the misses whose observed answer was an error
    /// fail, the backend's errors replayed (docs/whatif.md, "Errors"). A group's is the sum
    /// of its shards'. Estimated from the backend calls, without an error bound of its own.
    pub error_ratio: Option<f64>,
    /// About two standard errors of the estimate due to sampling (a 95% bound), from the
    /// sampled keys' spread: `2·sqrt((1-r)/r² · Σ calls_k²) / requests`; 0 when every key is
    /// simulated. It covers the sampling, not how well the policy model fits the cache (the
    /// observed policy's [`GroupWhatIf::check_error`] shows that).
    pub error_bound: f64,
}

/// One shard's requests and predictions over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardWhatIf {
    /// The shard (`__other__` for the shards beyond the group's tally cap).
    pub shard: String,
    /// Requests with a cache key, every one counted.
    pub requests: u64,
    /// Of those, the misses the cache itself reported.
    pub real_misses: u64,
    /// Of the misses, those whose backend call failed (`error`, `timeout`, `throttled`,
    /// `unavailable`).
    pub real_failures: u64,
    /// The shard's backend capacity, configured or learned, when known: its error ratios
    /// then come from the capacity model.
    pub capacity: Option<ShardCapacity>,
    /// Per policy, in [`super::WhatIfConfig::policies`] order.
    pub policies: Vec<PolicyFigures>,
    /// The same from the exact simulation of every key, when it runs beside the sampled one.
    pub exact: Option<Vec<PolicyFigures>>,
}

/// One group's simulation over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupWhatIf {
    /// The group.
    pub group: String,
    /// Requests with a cache key, every one counted.
    pub requests: u64,
    /// Of those, the hits the cache itself reported.
    pub real_hits: u64,
    /// Of those, the misses the cache itself reported.
    pub real_misses: u64,
    /// The share of keys simulated at the window's end, in (0, 1]: 1 until the memory
    /// bound lowers it.
    pub sample_rate: f64,
    /// Keys in the sample at the window's end.
    pub sampled_keys: u64,
    /// Requests of the sampled keys in the window.
    pub sampled_requests: u64,
    /// Per policy, in [`super::WhatIfConfig::policies`] order (the observed one first).
    pub policies: Vec<PolicyFigures>,
    /// The same from the exact simulation of every key, when it runs beside the sampled one.
    pub exact: Option<Vec<PolicyFigures>>,
    /// Per shard, busiest first.
    pub shards: Vec<ShardWhatIf>,
}

impl GroupWhatIf {
    /// The cache's own hit ratio over the requests that reported a result; `None` when none
    /// did.
    pub fn real_hit_ratio(&self) -> Option<f64> {
        let n = self.real_hits + self.real_misses;
        (n > 0).then(|| self.real_hits as f64 / n as f64)
    }

    /// The observed policy's predicted hit ratio minus the cache's own: how well the
    /// simulation of the cache as configured fits it this window (near 0 when the TTL and
    /// the rules are right; negative after a start, while keys the cache already held are
    /// still new to the simulation). `None` without a reported result.
    pub fn check_error(&self) -> Option<f64> {
        Some(self.policies.first()?.hit_ratio - self.real_hit_ratio()?)
    }

    /// The busiest shard: the one whose predictions matter most in a hot-shard incident.
    pub fn hot_shard(&self) -> Option<&ShardWhatIf> {
        self.shards.first()
    }

    /// The busiest shard whose capacity is known: the one the capacity model's errors come
    /// from most.
    pub fn capacity_shard(&self) -> Option<&ShardWhatIf> {
        self.shards.iter().find(|s| s.capacity.is_some())
    }
}

/// Every simulated group's predictions over one window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WhatIfWindow {
    /// The policies' names, the observed one first: the order of every `policies` list.
    pub policies: Vec<String>,
    /// The groups that had requests with a cache key, sorted by name.
    pub groups: Vec<GroupWhatIf>,
    /// Requests with a cache key whose group found no room under `max_groups`, not
    /// simulated.
    pub unsimulated_requests: u64,
    /// Bytes the simulation holds on the heap at the window's end.
    pub heap_bytes: u64,
}

impl WhatIfWindow {
    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&GroupWhatIf> {
        self.groups
            .binary_search_by(|g| g.group.as_str().cmp(name))
            .ok()
            .map(|i| &self.groups[i])
    }
}
