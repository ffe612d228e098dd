//! One group's miniature simulation: the sampled keys, each policy's entry for each of them,
//! and the window's tallies.
//!
//! Per sampled key the state is small and fixed: its hash, its shard, when it was last seen,
//! and per policy one [`Cell`] (when its entry was stored, whether the entry is a `not_found`,
//! the key's backend calls this window) and, when the cache has a capacity, the links of the
//! policy's LRU list. Time is kept in ticks of [`TICK_SECS`] since the group's first request,
//! so a cell is 8 bytes.

use std::collections::HashMap;

use foldhash::fast::FixedState;
use hashbrown::HashTable;

use super::WhatIfConfig;
use super::capacity::{self, Learned};
use super::figures::{GroupWhatIf, PolicyFigures, ShardWhatIf};
use super::policy::Policy;
use crate::observation::{CacheKeyHash, CacheResult, OTHER_LABEL, ObservationRef, Outcome};

/// The simulation's clock resolution, seconds: a tenth of the shortest TTL worth simulating.
pub(super) const TICK_SECS: f64 = 0.1;
/// The bit of [`Cell::stored`] that marks a `not_found` entry.
const NEGATIVE: u32 = 1 << 31;
/// No link in an LRU list.
const NIL: u32 = u32::MAX;
/// Of the keys a full sample holds, the share kept when the rate is lowered: lowering it
/// takes a pass over the sample, so each pass makes room for a tenth of the bound.
const KEEP_ON_LOWER: f64 = 0.9;

/// The bytes a key index with room for `capacity` entries holds: a power-of-two number of
/// buckets, each a `u32` slot and a control byte.
fn index_bytes(capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = (capacity * 8 / 7 + 1).next_power_of_two();
    buckets * (std::mem::size_of::<u32>() + 1) + 16
}

/// One policy's entry for one key. Packed: 6 bytes rather than 8, so the bound holds a
/// quarter more keys (fields are only ever read and written by value).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, packed)]
struct Cell {
    /// Tick of the entry's last store plus one, with [`NEGATIVE`] set for a `not_found`
    /// entry; 0 when the policy holds no entry for the key.
    stored: u32,
    /// Backend calls the key made under this policy in the open window (saturating).
    calls: u16,
}

/// A sampled key. Packed, as [`Cell`]: 12 bytes rather than 16.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed)]
struct Key {
    hash: u64,
    /// Tick the key was last requested.
    seen: u32,
}

/// One policy's tallies in the open window, and its LRU list.
#[derive(Debug, Clone, Default)]
struct Tally {
    /// Backend calls of the sampled keys, each weighted by the inverse of the sampling rate
    /// when it was made: the Horvitz–Thompson estimate of the group's backend calls.
    calls: f64,
    /// Sum over sampled keys of (the key's calls)², weighted by `(1 - rate) / rate²`: the
    /// estimate's variance.
    variance: f64,
    head: u32,
    tail: u32,
    len: u64,
}

/// A shard's exact requests and its policies' estimated calls in the open window, and what
/// it has shown of its capacity.
#[derive(Debug, Clone)]
struct ShardTally {
    name: String,
    requests: u64,
    real_misses: u64,
    /// Of the misses, those whose backend call failed.
    real_failures: u64,
    /// Per policy: backend calls, weighted as [`Tally::calls`].
    calls: Vec<f64>,
    /// Per policy: the calls' variance, as [`Tally::variance`].
    variance: Vec<f64>,
    /// Per policy: requests answered with the backend's observed error, weighted as `calls`.
    errors: Vec<f64>,
    /// Per policy: calls made while a serve-stale copy was held (a failure of theirs is
    /// answered with the copy), weighted as `calls`.
    covered: Vec<f64>,
    learned: Learned,
}

/// What one request (or `count` identical ones) cost under a policy: backend calls, how many
/// of those requests were answered with an error, and how many of the calls a stale copy
/// would answer were they to fail.
#[derive(Debug, Clone, Copy, Default)]
struct Miss {
    calls: u64,
    errors: u64,
    covered: u64,
}

/// One group's simulation.
#[derive(Debug)]
pub(super) struct GroupSim {
    /// Keys whose hash is below this are sampled: the rate is `threshold / 2^64` (all keys
    /// while it is `None`).
    threshold: Option<u64>,
    max_keys: usize,
    max_shards: usize,
    /// Unix seconds of tick 0.
    epoch: f64,
    keys: Vec<Key>,
    /// Free slots of `keys` (and of the cells and links that go with them).
    free: Vec<u32>,
    index: HashTable<u32>,
    /// `policies` cells per slot.
    cells: Vec<Cell>,
    /// `policies` (prev, next) pairs per slot, when any policy has a capacity.
    links: Vec<[u32; 2]>,
    tallies: Vec<Tally>,
    /// Whether any policy has a capacity, so the keys carry LRU links.
    lru: bool,
    shards: Vec<ShardTally>,
    /// Each shard's index in `shards`, by name.
    shard_index: HashMap<Box<str>, usize, FixedState>,
    /// Requests with a cache key in the open window, every one counted.
    requests: u64,
    /// Of those, the cache's own hits and misses, where the input said.
    real_hits: u64,
    real_misses: u64,
    /// Requests of the sampled keys in the open window.
    sampled_requests: u64,
}

impl Miss {
    /// `calls` backend calls whose requests got an answer (the backend's or a stale copy).
    fn answered(calls: u64) -> Miss {
        Miss {
            calls,
            ..Miss::default()
        }
    }

    /// `calls` backend calls that failed, each request answered with the error.
    fn failed(calls: u64) -> Miss {
        Miss {
            calls,
            errors: calls,
            covered: 0,
        }
    }
}

impl GroupSim {
    /// A group simulating `policies`, keeping at most `max_keys` keys (lowering the rate to
    /// stay there) and tallying at most `max_shards` shards by name.
    pub(super) fn new(policies: &[Policy], max_keys: usize, max_shards: usize, epoch: f64) -> Self {
        let lru = policies.iter().any(|p| p.capacity_entries.is_some());
        let policies = policies.len();
        GroupSim {
            lru,
            shard_index: HashMap::default(),
            threshold: None,
            max_keys: max_keys.max(1),
            max_shards: max_shards.max(1),
            epoch,
            keys: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            cells: Vec::new(),
            links: Vec::new(),
            tallies: vec![
                Tally {
                    head: NIL,
                    tail: NIL,
                    ..Tally::default()
                };
                policies
            ],
            shards: Vec::new(),
            requests: 0,
            real_hits: 0,
            real_misses: 0,
            sampled_requests: 0,
        }
    }

    /// The sampling rate now, in (0, 1].
    pub(super) fn rate(&self) -> f64 {
        match self.threshold {
            None => 1.0,
            Some(t) => t as f64 / 2f64.powi(64),
        }
    }

    /// Keys in the sample.
    pub(super) fn sampled_keys(&self) -> usize {
        self.keys.len() - self.free.len()
    }

    /// Bytes the group's state holds on the heap.
    pub(super) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.keys.capacity() * size_of::<Key>()
            + self.free.capacity() * 4
            + index_bytes(self.index.capacity())
            + self.cells.capacity() * size_of::<Cell>()
            + self.links.capacity() * size_of::<[u32; 2]>()
            + self.tallies.capacity() * size_of::<Tally>()
            + self
                .shards
                .iter()
                .map(|s| {
                    size_of::<ShardTally>() + 2 * s.name.capacity() + s.calls.capacity() * 32 + 24
                })
                .sum::<usize>()
    }

    /// The bytes one sampled key costs with `policies` policies, with and without LRU links:
    /// what the memory bound is divided by.
    pub(super) fn bytes_per_key(policies: usize, lru: bool) -> usize {
        use std::mem::size_of;
        // The index is a table of u32 slots and a control byte each, at most 7/8 full, with a
        // power-of-two number of buckets: up to twice that when it has just grown. The
        // vectors grow only as far as the bound leaves room (`reserve`).
        let index = 2 * (size_of::<u32>() + 1) * 8 / 7 + 1;
        size_of::<Key>()
            + 4
            + index
            + policies * size_of::<Cell>()
            + if lru {
                policies * size_of::<[u32; 2]>()
            } else {
                0
            }
    }

    fn tick(&self, t: f64) -> u32 {
        (((t - self.epoch) / TICK_SECS).max(0.0) as u64).min(u64::from(NEGATIVE - 2)) as u32 + 1
    }

    /// Records one observation with its cache key at time `t` under every policy.
    pub(super) fn record(
        &mut self,
        obs: &ObservationRef<'_>,
        key: CacheKeyHash,
        t: f64,
        policies: &[Policy],
    ) {
        let shard = self.shard_index(obs.shard);
        self.requests = self.requests.saturating_add(obs.count);
        let st = &mut self.shards[shard];
        st.requests = st.requests.saturating_add(obs.count);
        match obs.cache {
            Some(CacheResult::Hit) => self.real_hits = self.real_hits.saturating_add(obs.count),
            Some(CacheResult::Miss) => {
                self.real_misses = self.real_misses.saturating_add(obs.count);
                st.real_misses = st.real_misses.saturating_add(obs.count);
                if !matches!(obs.outcome, Outcome::Ok | Outcome::NotFound) {
                    st.real_failures = st.real_failures.saturating_add(obs.count);
                }
            }
            None => {}
        }
        if self.threshold.is_some_and(|th| key.get() >= th) {
            return;
        }
        let now = self.tick(t);
        let (slot, new) = self.slot(key.get(), now);
        self.sampled_requests = self.sampled_requests.saturating_add(obs.count);
        let rate = self.rate();
        for (p, policy) in policies.iter().enumerate() {
            let miss = self.simulate(slot, p, policy, now, obs, new, rate);
            if miss.calls > 0 {
                self.charge(slot, p, shard, miss, rate);
            }
        }
        if self.sampled_keys() > self.max_keys {
            self.lower_rate(policies.len());
        }
    }

    /// The slot of key `hash`, added to the sample if new (then `true`).
    fn slot(&mut self, hash: u64, now: u32) -> (usize, bool) {
        let keys = &self.keys;
        if let Some(&slot) = self.index.find(hash, |&s| keys[s as usize].hash == hash) {
            self.keys[slot as usize].seen = now;
            return (slot as usize, false);
        }
        let key = Key { hash, seen: now };
        let n = self.tallies.len();
        let slot = match self.free.pop() {
            Some(s) => {
                self.keys[s as usize] = key;
                s
            }
            None => {
                let s = self.keys.len() as u32;
                self.reserve();
                self.keys.push(key);
                self.cells.extend(std::iter::repeat_n(Cell::default(), n));
                if self.lru {
                    self.links.extend(std::iter::repeat_n([NIL, NIL], n));
                }
                s
            }
        };
        let keys = &self.keys;
        self.index
            .insert_unique(hash, slot, |&s| keys[s as usize].hash);
        (slot as usize, true)
    }

    /// Grows the vectors by at most the room the bound leaves, so a full sample's capacity
    /// stays within the bound instead of doubling past it.
    fn reserve(&mut self) {
        let len = self.keys.len();
        if len < self.keys.capacity() {
            return;
        }
        let limit = self.max_keys + 1;
        let more = len.max(16).min(limit.saturating_sub(len)).max(1);
        let n = self.tallies.len();
        self.keys.reserve_exact(more);
        self.cells.reserve_exact(more * n);
        if self.lru {
            self.links.reserve_exact(more * n);
        }
    }

    /// One request (or `obs.count` identical ones) of the key in `slot` under policy `p`:
    /// the backend calls it makes and the errors its requests are answered with.
    #[allow(clippy::too_many_arguments)]
    fn simulate(
        &mut self,
        slot: usize,
        p: usize,
        policy: &Policy,
        now: u32,
        obs: &ObservationRef<'_>,
        new: bool,
        rate: f64,
    ) -> Miss {
        let n = self.tallies.len();
        let cell = self.cells[slot * n + p];
        let ticks = |secs: f64| (secs / TICK_SECS).round().max(1.0) as u32;
        let held = cell.stored != 0;
        let negative = cell.stored & NEGATIVE != 0;
        let at = cell.stored & !NEGATIVE;
        let fresh = held
            && match (negative, policy.negative_ttl_secs) {
                (false, _) => now.saturating_sub(at) < ticks(policy.ttl_secs),
                (true, Some(neg)) => now.saturating_sub(at) < ticks(neg),
                (true, None) => false,
            };
        // A key the simulation meets for the first time that the cache itself served was in
        // the cache already: a hit under every policy, as if just stored. Any other first
        // request is a miss under every policy, as a new key is under any TTL.
        if fresh || (new && obs.cache == Some(CacheResult::Hit)) {
            if !fresh {
                self.store(slot, p, now, false, policy, rate);
            } else {
                self.touch(slot, p);
            }
            return Miss::default();
        }
        // A call made while a serve-stale policy holds a copy is answered with the copy if it
        // fails, however it fails (the capacity model's failures too).
        let stale = policy.stale_on_error && held && !negative;
        let miss = match obs.outcome {
            Outcome::Ok => {
                self.store(slot, p, now, false, policy, rate);
                Miss::answered(1)
            }
            Outcome::NotFound if policy.negative_ttl_secs.is_some() => {
                self.store(slot, p, now, true, policy, rate);
                Miss::answered(1)
            }
            Outcome::NotFound => Miss::answered(obs.count),
            // Serve-stale answers a failed call with the copy it still holds, however old, and
            // leaves the copy as it was: the next request calls the backend again (RFC 5861's
            // stale-if-error, and the last-known-good fallback of an application cache). So
            // it changes no backend call, only the errors the requests see.
            _ if stale => Miss::answered(obs.count),
            _ => Miss::failed(obs.count),
        };
        Miss {
            covered: if stale { miss.calls } else { 0 },
            ..miss
        }
    }

    /// Stores an entry for the key in `slot` under policy `p` at `now`, evicting the least
    /// recently used entry when a capacity is full.
    fn store(
        &mut self,
        slot: usize,
        p: usize,
        now: u32,
        negative: bool,
        policy: &Policy,
        rate: f64,
    ) {
        let n = self.tallies.len();
        let was_held = self.cells[slot * n + p].stored != 0;
        self.cells[slot * n + p].stored = now | if negative { NEGATIVE } else { 0 };
        let Some(capacity) = policy.capacity_entries else {
            return;
        };
        if was_held {
            self.touch(slot, p);
            return;
        }
        self.link_front(slot, p);
        // The sample holds `rate` of the keys, so it gets `rate` of the room (SHARDS).
        let room = ((capacity as f64 * rate).round() as u64).max(1);
        while self.tallies[p].len > room {
            let tail = self.tallies[p].tail;
            if tail == NIL {
                break;
            }
            self.unlink(tail as usize, p);
            self.cells[tail as usize * n + p].stored = 0;
        }
    }

    /// Moves the key's entry under policy `p` to the front of the LRU list, if it has one.
    fn touch(&mut self, slot: usize, p: usize) {
        if self.links.is_empty() {
            return;
        }
        self.unlink(slot, p);
        self.link_front(slot, p);
    }

    fn link_front(&mut self, slot: usize, p: usize) {
        let n = self.tallies.len();
        if self.links.is_empty() {
            return;
        }
        let t = &mut self.tallies[p];
        let old = t.head;
        self.links[slot * n + p] = [NIL, old];
        if old != NIL {
            self.links[old as usize * n + p][0] = slot as u32;
        } else {
            t.tail = slot as u32;
        }
        t.head = slot as u32;
        t.len += 1;
    }

    /// Takes the key's entry under policy `p` out of the LRU list, if it is in it.
    fn unlink(&mut self, slot: usize, p: usize) {
        let n = self.tallies.len();
        if self.links.is_empty() {
            return;
        }
        let [prev, next] = self.links[slot * n + p];
        let t = &mut self.tallies[p];
        let linked = prev != NIL || next != NIL || t.head == slot as u32;
        if !linked {
            return;
        }
        if prev != NIL {
            self.links[prev as usize * n + p][1] = next;
        } else {
            t.head = next;
        }
        if next != NIL {
            self.links[next as usize * n + p][0] = prev;
        } else {
            t.tail = prev;
        }
        t.len -= 1;
        self.links[slot * n + p] = [NIL, NIL];
    }

    /// Counts the backend calls and errors of `miss`, of the key in `slot` under policy `p`.
    fn charge(&mut self, slot: usize, p: usize, shard: usize, miss: Miss, rate: f64) {
        let calls = miss.calls;
        let n = self.tallies.len();
        let cell = &mut self.cells[slot * n + p];
        let before = f64::from(cell.calls);
        cell.calls = cell
            .calls
            .saturating_add(calls.min(u64::from(u16::MAX)) as u16);
        let after = f64::from(cell.calls);
        let weight = 1.0 / rate;
        let var = (1.0 - rate) / (rate * rate) * (after * after - before * before);
        let t = &mut self.tallies[p];
        t.calls += calls as f64 * weight;
        t.variance += var;
        let s = &mut self.shards[shard];
        s.calls[p] += calls as f64 * weight;
        s.variance[p] += var;
        s.errors[p] += miss.errors as f64 * weight;
        s.covered[p] += miss.covered as f64 * weight;
    }

    /// The tally slot of `shard`: its own while there is room, else the overflow's.
    fn shard_index(&mut self, shard: &str) -> usize {
        if let Some(&i) = self.shard_index.get(shard) {
            return i;
        }
        let n = self.tallies.len();
        let name = if self.shards.len() + 1 < self.max_shards {
            shard
        } else {
            if let Some(&i) = self.shard_index.get(OTHER_LABEL) {
                return i;
            }
            OTHER_LABEL
        };
        self.shard_index.insert(name.into(), self.shards.len());
        self.shards.push(ShardTally {
            name: name.to_owned(),
            requests: 0,
            real_misses: 0,
            real_failures: 0,
            calls: vec![0.0; n],
            variance: vec![0.0; n],
            errors: vec![0.0; n],
            covered: vec![0.0; n],
            learned: Learned::default(),
        });
        self.shards.len() - 1
    }

    /// Lowers the sampling rate until the sample holds [`KEEP_ON_LOWER`] of its bound: the
    /// keys with the highest hashes leave it (SHARDS with a fixed size).
    fn lower_rate(&mut self, policies: usize) {
        let target = ((self.max_keys as f64 * KEEP_ON_LOWER) as usize).max(1);
        let mut hashes: Vec<u64> = self
            .index
            .iter()
            .map(|&s| self.keys[s as usize].hash)
            .collect();
        if hashes.len() <= target {
            return;
        }
        let (_, &mut cut, _) = hashes.select_nth_unstable(target);
        self.threshold = Some(cut);
        self.evict_where(policies, |k| k.hash >= cut);
    }

    /// Takes every key for which `leave` holds out of the sample.
    fn evict_where(&mut self, policies: usize, leave: impl Fn(&Key) -> bool) {
        let gone: Vec<u32> = self
            .index
            .iter()
            .copied()
            .filter(|&s| leave(&self.keys[s as usize]))
            .collect();
        for slot in gone {
            let hash = self.keys[slot as usize].hash;
            for p in 0..policies {
                self.unlink(slot as usize, p);
                self.cells[slot as usize * policies + p] = Cell::default();
            }
            let keys = &self.keys;
            if let Ok(e) = self
                .index
                .find_entry(hash, |&s| keys[s as usize].hash == hash)
            {
                e.remove();
            }
            self.free.push(slot);
        }
    }

    /// Closes the window of `secs` seconds that ends at `end`: the figures of each policy,
    /// then the tallies start again and keys idle for longer than any policy's entry can
    /// matter leave the sample.
    ///
    /// A shard's error ratio comes from the capacity model where its capacity is known
    /// (configured, or learned here from its reported misses against their failures), else
    /// from the backend's observed failures replayed; the group's is the sum of its shards'.
    pub(super) fn close(
        &mut self,
        name: &str,
        end: f64,
        secs: f64,
        cfg: &WhatIfConfig,
    ) -> GroupWhatIf {
        let policies = &cfg.policies;
        let n = policies.len();
        let figures = |calls: f64, errors: f64, variance: f64, requests: f64| {
            if requests <= 0.0 {
                return PolicyFigures::default();
            }
            let per_request = (calls / requests).clamp(0.0, 1.0);
            PolicyFigures {
                hit_ratio: 1.0 - per_request,
                backend_calls_per_request: per_request,
                error_ratio: Some((errors / requests).clamp(0.0, 1.0)),
                error_bound: (2.0 * variance.sqrt() / requests).min(1.0),
            }
        };
        let mut group_errors = vec![0.0; n];
        let mut shards = Vec::with_capacity(self.shards.len());
        for s in &mut self.shards {
            if s.requests == 0 {
                continue;
            }
            s.learned.learn(s.real_misses, s.real_failures, secs);
            // `__other__` pools many shards: no one capacity describes it.
            let capacity = (s.name != OTHER_LABEL)
                .then(|| {
                    capacity::configured(&cfg.backend_capacities, name, &s.name)
                        .or_else(|| s.learned.capacity())
                })
                .flatten();
            let errors: Vec<f64> = (0..n)
                .map(|p| match capacity {
                    Some(c) => capacity::overload_errors(
                        c.calls_per_second,
                        secs,
                        s.calls[p],
                        s.calls[p] - s.covered[p],
                    ),
                    None => s.errors[p],
                })
                .collect();
            for (sum, e) in group_errors.iter_mut().zip(&errors) {
                *sum += e;
            }
            shards.push(ShardWhatIf {
                shard: s.name.clone(),
                requests: s.requests,
                real_misses: s.real_misses,
                real_failures: s.real_failures,
                capacity,
                policies: (0..n)
                    .map(|p| figures(s.calls[p], errors[p], s.variance[p], s.requests as f64))
                    .collect(),
                exact: None,
            });
        }
        shards.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.shard.cmp(&b.shard)));
        let requests = self.requests as f64;
        let by_policy = self
            .tallies
            .iter()
            .zip(&group_errors)
            .map(|(t, &e)| figures(t.calls, e, t.variance, requests))
            .collect();
        let out = GroupWhatIf {
            group: name.to_owned(),
            requests: self.requests,
            real_hits: self.real_hits,
            real_misses: self.real_misses,
            sample_rate: self.rate(),
            sampled_keys: self.sampled_keys() as u64,
            sampled_requests: self.sampled_requests,
            policies: by_policy,
            exact: None,
            shards,
        };
        self.reset(end, policies);
        out
    }

    fn reset(&mut self, end: f64, policies: &[Policy]) {
        for t in &mut self.tallies {
            t.calls = 0.0;
            t.variance = 0.0;
        }
        for c in &mut self.cells {
            c.calls = 0;
        }
        // A shard without requests in the window gives its tally up; the others keep theirs,
        // at new indices.
        self.shards.retain(|s| s.requests > 0);
        self.shard_index.clear();
        for (i, s) in self.shards.iter_mut().enumerate() {
            self.shard_index.insert(s.name.as_str().into(), i);
            s.requests = 0;
            s.real_misses = 0;
            s.real_failures = 0;
            for v in [&mut s.calls, &mut s.variance, &mut s.errors, &mut s.covered] {
                v.iter_mut().for_each(|c| *c = 0.0);
            }
        }
        self.requests = 0;
        self.real_hits = 0;
        self.real_misses = 0;
        self.sampled_requests = 0;
        let horizon = policies
            .iter()
            .map(Policy::horizon_secs)
            .fold(0.0, f64::max);
        let idle_since = self.tick(end - horizon);
        if end - horizon > self.epoch {
            self.evict_where(policies.len(), |k| k.seen < idle_since);
        }
    }
}
