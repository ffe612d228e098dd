//! What-if: miniature simulations of a group's look-aside cache under other policies.
//!
//! It sits beside the window stage (`Observation -> Window -> SkewStats -> Detectors`): the
//! engine hands it the observations that name a cache key (`cache_key`), and at each window's
//! close it yields a [`WhatIfWindow`] that rides in the snapshot. Without cache keys it is
//! never called and holds nothing.
//!
//! Per group it simulates, on a spatially hashed sample of the cache keys, the cache as it
//! runs (the `observed` policy, checked against the cache's own hit ratio every window) and
//! each candidate policy ([`Policy`]: a TTL, serving stale on error, negative caching, a
//! capacity with LRU eviction), and predicts per policy the hit ratio and the backend calls
//! per request of the group and of each shard.
//!
//! **Sampling** (SHARDS: Waldspurger et al., FAST 2015; miniature simulations, ATC 2017): a
//! key is simulated when its hash is below a threshold, so a key is either always in or
//! always out and its whole history is simulated. The rate starts at 1 (every key) and only
//! falls: when the sample outgrows the memory bound ([`WhatIfConfig::memory_bytes_per_group`]
//! over the bytes one key costs), the keys with the highest hashes leave it, as in SHARDS
//! with a fixed size. A capacity is scaled by the rate, as SHARDS scales LRU. A TTL cache
//! needs no scaling: each key's entries depend on that key's requests alone, so the sample
//! only adds sampling noise, which [`PolicyFigures::error_bound`] states.
//!
//! **Cost**: one group lookup, one shard lookup and one compare for a key outside the sample;
//! a hash-table probe and a few arithmetic operations per policy for a key in it; a pass over
//! the sample at each close (the idle keys leave) and whenever the rate is lowered.

mod capacity;
mod figures;
mod group;
mod policy;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use foldhash::fast::FixedState;

pub use capacity::{
    BackendCapacity, CapacitySource, MIN_LEARNING_CALLS, SATURATED_FAILURE_SHARE, ShardCapacity,
};
pub use figures::{GroupWhatIf, PolicyFigures, ShardWhatIf, WhatIfWindow};
pub use policy::{
    DEFAULT_CANDIDATES, MAX_TTL_SECS, OBSERVED, Policy, PolicyError, format_duration,
    parse_duration,
};

use crate::observation::{Batch, CacheKeyHash, MAX_NAME_BYTES, ObservationRef};
use group::GroupSim;

/// The default memory bound of one group's sample, bytes.
pub const DEFAULT_MEMORY_BYTES_PER_GROUP: usize = 4 << 20;
/// The default number of groups simulated; the requests of the others are counted, not
/// simulated.
pub const DEFAULT_MAX_GROUPS: usize = 8;
/// The default number of shards tallied per group; the rest share `__other__`.
pub const DEFAULT_MAX_SHARDS_PER_GROUP: usize = 64;

/// What to simulate and within what memory.
#[derive(Debug, Clone, PartialEq)]
pub struct WhatIfConfig {
    /// The cache as it runs (named [`OBSERVED`]) first, then the candidates.
    pub policies: Vec<Policy>,
    /// The memory one group's simulation may hold, bytes; the sampling rate falls to stay
    /// within it.
    pub memory_bytes_per_group: usize,
    /// Groups simulated at once.
    pub max_groups: usize,
    /// Shards tallied per group.
    pub max_shards_per_group: usize,
    /// The cache's clock tick, seconds: 0 for a cache that keeps exact time. A cache that
    /// keeps time in whole ticks (memcached: 1 s) holds an entry between TTL − tick and TTL,
    /// so every policy is simulated with each TTL half a tick shorter ([`Policy::on_clock`]).
    pub clock_tick_secs: f64,
    /// Shards' backend capacities, calls a second: the calls a policy would send a shard
    /// beyond its capacity fail (docs/whatif.md, "Errors"). A shard without an entry has its
    /// capacity learned once a window shows it saturated.
    pub backend_capacities: Vec<BackendCapacity>,
    /// The window's length, seconds: what a window's calls are divided by for their rate
    /// (the engine sets it from the window settings).
    pub window_secs: f64,
    /// Simulate every key, without a memory bound: the exact answer the sampled one is held
    /// to (tests compare them).
    pub exact: bool,
    /// Run the exact simulation beside the sampled one, so each figure carries both
    /// (`replay --what-if`).
    pub exact_beside: bool,
}

impl Default for WhatIfConfig {
    fn default() -> Self {
        let observed = Policy::observed(60.0, None, false, None);
        WhatIfConfig {
            policies: Policy::parse_list(DEFAULT_CANDIDATES, &observed)
                .expect("the default candidates parse (tested)"),
            memory_bytes_per_group: DEFAULT_MEMORY_BYTES_PER_GROUP,
            max_groups: DEFAULT_MAX_GROUPS,
            max_shards_per_group: DEFAULT_MAX_SHARDS_PER_GROUP,
            clock_tick_secs: 0.0,
            backend_capacities: Vec::new(),
            window_secs: 10.0,
            exact: false,
            exact_beside: false,
        }
    }
}

impl WhatIfConfig {
    /// The keys one group's sample holds within the memory bound (after the shard tallies'
    /// share).
    pub fn max_keys(&self) -> usize {
        if self.exact {
            return usize::MAX / 2;
        }
        let n = self.policies.len();
        let lru = self.policies.iter().any(|p| p.capacity_entries.is_some());
        let shards = self.max_shards_per_group * (128 + n * 32 + 2 * MAX_NAME_BYTES);
        self.memory_bytes_per_group.saturating_sub(shards) / GroupSim::bytes_per_key(n, lru)
    }
}

/// Every group's simulation.
#[derive(Debug)]
pub struct WhatIf {
    cfg: WhatIfConfig,
    sampled: Sims,
    /// The same simulation of every key, without a bound, when asked for
    /// ([`WhatIfConfig::exact_beside`]): `replay --what-if` prints both.
    exact: Option<Sims>,
    /// The latest time an observation carried or the caller passed: records without a `ts`
    /// (live input) are simulated at the time their batch was taken.
    clock: f64,
    /// The end of the window closed last: the next one's length is measured from it.
    last_end: Option<f64>,
}

/// The groups of one simulation, sampled or exact.
#[derive(Debug)]
struct Sims {
    max_keys: usize,
    groups: HashMap<Box<str>, GroupSim, FixedState>,
    unsimulated: u64,
}

impl WhatIf {
    /// A simulation of `cfg.policies` on the cache's clock (`cfg.clock_tick_secs`), with the
    /// exact one beside it when `cfg.exact_beside` asks for it.
    pub fn new(mut cfg: WhatIfConfig) -> Self {
        let tick = cfg.clock_tick_secs;
        cfg.policies = cfg.policies.into_iter().map(|p| p.on_clock(tick)).collect();
        let exact = cfg.exact_beside.then(|| {
            Sims::new(
                WhatIfConfig {
                    exact: true,
                    ..cfg.clone()
                }
                .max_keys(),
            )
        });
        WhatIf {
            sampled: Sims::new(cfg.max_keys()),
            cfg,
            exact,
            clock: f64::NEG_INFINITY,
            last_end: None,
        }
    }

    /// The configuration, its TTLs as simulated (on the cache's clock).
    pub fn config(&self) -> &WhatIfConfig {
        &self.cfg
    }

    /// Simulates one observation with a cache key (others are ignored) at its `ts`, or at
    /// `now` when it has none.
    pub fn record(&mut self, obs: &ObservationRef<'_>, now: f64) {
        let Some(key) = obs.cache_key else {
            return;
        };
        // Out-of-order records are simulated at the latest time seen: entries never age
        // backwards.
        self.clock = self.clock.max(obs.ts.unwrap_or(now));
        self.sampled.record(obs, key, self.clock, &self.cfg);
        if let Some(exact) = &mut self.exact {
            exact.record(obs, key, self.clock, &self.cfg);
        }
    }

    /// Simulates the observations of `batch` that carry a cache key, at `now` where they have
    /// no `ts`.
    pub fn record_batch(&mut self, batch: &Batch, now: f64) {
        for obs in batch.cache_keyed() {
            self.record(&obs, now);
        }
    }

    /// Closes the window that ends at `end`: every group's predictions, then the tallies
    /// start again. A group with no request in the window and no key left is forgotten.
    pub fn close(&mut self, end: f64) -> WhatIfWindow {
        // The window's length: from the last close (a long gap is closed as one window), or
        // the configured length for the first.
        let secs = match self.last_end {
            Some(last) if end > last => end - last,
            _ => self.cfg.window_secs,
        };
        self.last_end = Some(end);
        let cfg = &self.cfg;
        let policies = &cfg.policies;
        let mut groups = self.sampled.close(end, secs, cfg);
        if let Some(exact) = &mut self.exact {
            let exact = exact.close(end, secs, cfg);
            for g in &mut groups {
                let Some(e) = exact.iter().find(|e| e.group == g.group) else {
                    continue;
                };
                g.exact = Some(e.policies.clone());
                for s in &mut g.shards {
                    s.exact = e
                        .shards
                        .iter()
                        .find(|x| x.shard == s.shard)
                        .map(|x| x.policies.clone());
                }
            }
        }
        let out = WhatIfWindow {
            policies: policies.iter().map(|p| p.name.clone()).collect(),
            groups,
            unsimulated_requests: self.sampled.unsimulated,
            heap_bytes: self.sampled.heap_bytes() as u64,
        };
        self.sampled.unsimulated = 0;
        out
    }

    /// Bytes the (sampled) simulation holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.sampled.heap_bytes()
    }
}

impl Sims {
    fn new(max_keys: usize) -> Self {
        Sims {
            max_keys: max_keys.max(1),
            groups: HashMap::default(),
            unsimulated: 0,
        }
    }

    fn record(&mut self, obs: &ObservationRef<'_>, key: CacheKeyHash, t: f64, cfg: &WhatIfConfig) {
        if !self.groups.contains_key(obs.group) {
            if self.groups.len() >= cfg.max_groups {
                self.unsimulated = self.unsimulated.saturating_add(obs.count);
                return;
            }
            let sim = GroupSim::new(&cfg.policies, self.max_keys, cfg.max_shards_per_group, t);
            self.groups.insert(obs.group.into(), sim);
        }
        if let Some(group) = self.groups.get_mut(obs.group) {
            group.record(obs, key, t, &cfg.policies);
        }
    }

    /// Every group's figures, sorted by group; groups left without keys are forgotten.
    fn close(&mut self, end: f64, secs: f64, cfg: &WhatIfConfig) -> Vec<GroupWhatIf> {
        let mut groups = Vec::new();
        for (name, g) in &mut self.groups {
            let figures = g.close(name, end, secs, cfg);
            if figures.requests > 0 {
                groups.push(figures);
            }
        }
        self.groups.retain(|_, g| g.sampled_keys() > 0);
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        groups
    }

    fn heap_bytes(&self) -> usize {
        self.groups
            .iter()
            .map(|(k, g)| k.len() + 64 + g.heap_bytes())
            .sum()
    }
}
