//! Per-shard windows: the second stage of the flow (`Observation -> Window -> SkewStats`).
//!
//! [`Windows`] accumulates observations for the current window of every group and shard:
//! request counts by outcome class, cache hits and misses, HDR latency histograms (success and
//! error latency kept apart, because fast errors pull latency down), and heavy-hitter key
//! summaries for the group and for each shard. [`Windows::close`] turns the window into an
//! immutable [`WindowSnapshot`] and starts the next one, keeping allocations.
//!
//! Bounds: at most `max_groups` groups and `max_shards_per_group` shards per group; what is over
//! the cap folds into the group or shard named `__other__`, so totals stay correct. A shard that
//! gets no traffic stays known (as a zero-load shard, which is what skew statistics must see)
//! for `shard_idle_windows` windows, then is forgotten.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::keys::KeySummary;
use crate::observation::{Batch, CacheResult, OTHER_LABEL, ObservationRef, Outcome};
use crate::snapshot::{GroupSnapshot, KeyShare, LatencySummary, ShardSnapshot, WindowSnapshot};
use crate::stats::SkewStats;

/// Lowest latency the histograms tell apart: 1 microsecond.
const LATENCY_LOW_US: u64 = 1;
/// Highest latency the histograms track: one hour. Larger values are clamped into the top bucket.
const LATENCY_HIGH_US: u64 = 3_600_000_000;

/// Sizes and caps of the windowing stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowConfig {
    /// Window length in seconds.
    pub window_secs: f64,
    /// Windows a shard with no traffic stays known (as a zero-load shard).
    pub shard_idle_windows: u32,
    /// Groups tracked; later groups fold into `__other__`.
    pub max_groups: usize,
    /// Shards tracked per group; later shards fold into `__other__`.
    pub max_shards_per_group: usize,
    /// Space-Saving slots of each group's key summary.
    pub group_key_slots: usize,
    /// Space-Saving slots of each shard's key summary.
    pub shard_key_slots: usize,
    /// Top keys each group snapshot reports (and exports as series).
    pub top_keys: usize,
    /// Top keys each shard snapshot reports.
    pub shard_top_keys: usize,
    /// HDR significant figures of the latency histograms (1..=3).
    pub latency_sigfig: u8,
    /// Significance level of the "skew beyond noise" dispersion test.
    pub dispersion_alpha: f64,
    /// Upper bounds (seconds, ascending) of the latency buckets each shard snapshot counts
    /// (`ShardSnapshot::latency_buckets`), for the agent's cumulative histogram.
    pub latency_buckets_secs: Vec<f64>,
}

/// The default latency bucket bounds: 1 ms to 10 s in 1-2.5-5 steps, the span of a database
/// or cache call from a hit to a timeout.
pub const DEFAULT_LATENCY_BUCKETS_SECS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            window_secs: 10.0,
            shard_idle_windows: 6,
            max_groups: 64,
            max_shards_per_group: 1024,
            group_key_slots: 1024,
            shard_key_slots: 32,
            top_keys: 10,
            shard_top_keys: 3,
            latency_sigfig: 2,
            dispersion_alpha: 1e-3,
            latency_buckets_secs: DEFAULT_LATENCY_BUCKETS_SECS.to_vec(),
        }
    }
}

/// Fixed-seed hasher: replay must give the same output on every run, and nothing here iterates a
/// map in hash order anyway, but a fixed seed keeps timing behaviour reproducible too.
#[derive(Debug, Clone, Copy, Default)]
struct FixedState;

impl BuildHasher for FixedState {
    type Hasher = foldhash::fast::FoldHasher<'static>;
    fn build_hasher(&self) -> Self::Hasher {
        foldhash::fast::FixedState::with_seed(0x5eed_5eed).build_hasher()
    }
}

type NameMap = HashMap<Box<str>, u32, FixedState>;

/// One latency histogram, allocated on first use, and the exact sum of what it recorded.
#[derive(Debug, Clone, Default)]
struct Latency {
    hist: Option<Histogram<u32>>,
    /// Sum of the recorded latencies in microseconds, as recorded (rounded and clamped like
    /// the histogram's values), so a Prometheus `_sum` agrees with its buckets.
    sum_us: u64,
}

impl Latency {
    fn record(&mut self, sigfig: u8, latency_ms: f64, count: u64) {
        let hist = self.hist.get_or_insert_with(|| new_histogram(sigfig));
        // Latencies are validated finite and >= 0, where `x + 0.5` truncated rounds to the
        // nearest microsecond like `round()` (up to one ulp at exact halves) without a libm
        // call on baseline x86-64.
        let us = (latency_ms * 1000.0 + 0.5) as u64;
        let n = u32::try_from(count).unwrap_or(u32::MAX);
        // Values above the range clamp into the top bucket; counts saturate per bucket.
        hist.saturating_record_n(us.min(LATENCY_HIGH_US), n);
        // At most 3.6e9 us times 2^32 - 1 fits a u64; only the window's sum can overflow.
        self.sum_us = self
            .sum_us
            .saturating_add(us.min(LATENCY_HIGH_US) * u64::from(n));
    }

    fn count(&self) -> u64 {
        self.hist.as_ref().map_or(0, |h| h.len())
    }

    fn reset(&mut self) {
        if let Some(h) = &mut self.hist {
            h.reset();
        }
        self.sum_us = 0;
    }
}

fn new_histogram(sigfig: u8) -> Histogram<u32> {
    Histogram::new_with_bounds(LATENCY_LOW_US, LATENCY_HIGH_US, sigfig)
        .expect("latency histogram bounds are valid constants")
}

/// What one shard saw in the current window.
#[derive(Debug, Clone)]
struct ShardWindow {
    by_outcome: [u64; Outcome::COUNT],
    cache_hits: u64,
    cache_misses: u64,
    ok_latency: Latency,
    err_latency: Latency,
    keys: Option<KeySummary>,
    idle_windows: u32,
}

impl ShardWindow {
    fn new() -> Self {
        ShardWindow {
            by_outcome: [0; Outcome::COUNT],
            cache_hits: 0,
            cache_misses: 0,
            ok_latency: Latency::default(),
            err_latency: Latency::default(),
            keys: None,
            idle_windows: 0,
        }
    }

    fn requests(&self) -> u64 {
        self.by_outcome.iter().sum()
    }

    fn reset(&mut self) {
        self.by_outcome = [0; Outcome::COUNT];
        self.cache_hits = 0;
        self.cache_misses = 0;
        self.ok_latency.reset();
        self.err_latency.reset();
        if let Some(k) = &mut self.keys {
            k.clear();
        }
    }
}

/// What one group saw in the current window.
#[derive(Debug, Clone)]
struct GroupWindow {
    name: Box<str>,
    names: Vec<Box<str>>,
    shards: Vec<ShardWindow>,
    index: NameMap,
    other: Option<u32>,
    keys: KeySummary,
    keyed_requests: u64,
}

impl GroupWindow {
    fn new(name: &str, cfg: &WindowConfig) -> Self {
        GroupWindow {
            name: name.into(),
            names: Vec::new(),
            shards: Vec::new(),
            index: NameMap::default(),
            other: None,
            keys: KeySummary::new(cfg.group_key_slots),
            keyed_requests: 0,
        }
    }

    fn shard_index(&mut self, shard: &str, cap: usize) -> usize {
        if let Some(&i) = self.index.get(shard) {
            return i as usize;
        }
        let tracked = self.shards.len() - usize::from(self.other.is_some());
        let name = if tracked >= cap { OTHER_LABEL } else { shard };
        if let Some(&i) = self.index.get(name) {
            return i as usize;
        }
        let i = self.shards.len() as u32;
        self.names.push(name.into());
        self.shards.push(ShardWindow::new());
        self.index.insert(name.into(), i);
        if name == OTHER_LABEL {
            self.other = Some(i);
        }
        i as usize
    }

    /// Forgets shards idle for longer than `max_idle` windows; rebuilds the index when needed.
    fn expire_idle(&mut self, max_idle: u32) {
        if !self.shards.iter().any(|s| s.idle_windows > max_idle) {
            return;
        }
        let mut names = Vec::with_capacity(self.names.len());
        let mut shards = Vec::with_capacity(self.shards.len());
        for (n, s) in self.names.drain(..).zip(self.shards.drain(..)) {
            if s.idle_windows <= max_idle {
                names.push(n);
                shards.push(s);
            }
        }
        self.names = names;
        self.shards = shards;
        self.index.clear();
        self.other = None;
        for (i, n) in self.names.iter().enumerate() {
            self.index.insert(n.clone(), i as u32);
            if &**n == OTHER_LABEL {
                self.other = Some(i as u32);
            }
        }
    }
}

/// The current window of every group: the only mutable state of the windowing stage.
#[derive(Debug, Clone)]
pub struct Windows {
    cfg: WindowConfig,
    groups: Vec<GroupWindow>,
    index: NameMap,
    start: f64,
    /// Cache of the last group looked up: most batches carry one group.
    last_group: Option<(usize, Box<str>)>,
    scratch: Option<Histogram<u32>>,
}

impl Windows {
    /// Empty windows whose first window starts at `start` (unix seconds).
    pub fn new(cfg: WindowConfig, start: f64) -> Self {
        Windows {
            cfg,
            groups: Vec::new(),
            index: NameMap::default(),
            start,
            last_group: None,
            scratch: None,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &WindowConfig {
        &self.cfg
    }

    /// Start of the current window, unix seconds.
    pub fn start(&self) -> f64 {
        self.start
    }

    /// Groups currently tracked (including `__other__`).
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    fn group_index(&mut self, group: &str) -> usize {
        if let Some((i, name)) = &self.last_group
            && &**name == group
        {
            return *i;
        }
        let i = match self.index.get(group) {
            Some(&i) => i as usize,
            None => {
                let tracked = self.groups.len() - usize::from(self.index.contains_key(OTHER_LABEL));
                let name = if tracked >= self.cfg.max_groups {
                    OTHER_LABEL
                } else {
                    group
                };
                match self.index.get(name) {
                    Some(&i) => i as usize,
                    None => {
                        let i = self.groups.len();
                        self.groups.push(GroupWindow::new(name, &self.cfg));
                        self.index.insert(name.into(), i as u32);
                        i
                    }
                }
            }
        };
        self.last_group = Some((i, group.into()));
        i
    }

    /// Adds one observation to the current window. The caller has validated it.
    pub fn record(&mut self, obs: &ObservationRef<'_>) {
        let sigfig = self.cfg.latency_sigfig;
        let shard_cap = self.cfg.max_shards_per_group;
        let shard_slots = self.cfg.shard_key_slots;
        let gi = self.group_index(obs.group);
        let g = &mut self.groups[gi];
        let si = g.shard_index(obs.shard, shard_cap);
        let s = &mut g.shards[si];
        s.by_outcome[obs.outcome.index()] += obs.count;
        match obs.cache {
            Some(CacheResult::Hit) => s.cache_hits += obs.count,
            Some(CacheResult::Miss) => s.cache_misses += obs.count,
            None => {}
        }
        if let Some(l) = obs.latency_ms {
            if obs.outcome.is_error() {
                s.err_latency.record(sigfig, l, obs.count);
            } else {
                s.ok_latency.record(sigfig, l, obs.count);
            }
        }
        if let Some(k) = obs.key {
            s.keys
                .get_or_insert_with(|| KeySummary::new(shard_slots))
                .record(k, obs.count);
            g.keys.record(k, obs.count);
            g.keyed_requests += obs.count;
        }
    }

    /// Adds every observation of `batch`.
    pub fn record_batch(&mut self, batch: &Batch) {
        for obs in batch.iter() {
            self.record(&obs);
        }
    }

    /// Ends the current window at `end` (unix seconds), returns what it saw, and starts the next
    /// window at `end`.
    pub fn close(&mut self, end: f64) -> WindowSnapshot {
        let duration = (end - self.start).max(f64::MIN_POSITIVE);
        let mut groups = Vec::with_capacity(self.groups.len());
        let sigfig = self.cfg.latency_sigfig;
        let scratch = self.scratch.get_or_insert_with(|| new_histogram(sigfig));
        for g in &mut self.groups {
            // Expiry first: an expired shard had no request in this window, so it loses nothing,
            // and it is shown as a zero-load shard for exactly `shard_idle_windows` windows.
            for s in &mut g.shards {
                s.idle_windows = if s.requests() == 0 {
                    s.idle_windows + 1
                } else {
                    0
                };
            }
            g.expire_idle(self.cfg.shard_idle_windows);
            groups.push(snapshot_group(g, &self.cfg, duration, scratch));
            for s in &mut g.shards {
                s.reset();
            }
            g.keys.clear();
            g.keyed_requests = 0;
        }
        // Groups whose shards all expired are forgotten too.
        if self.groups.iter().any(|g| g.shards.is_empty()) {
            self.groups.retain(|g| !g.shards.is_empty());
            self.index.clear();
            for (i, g) in self.groups.iter().enumerate() {
                self.index.insert(g.name.clone(), i as u32);
            }
            self.last_group = None;
        }
        groups.retain(|g: &GroupSnapshot| !g.shards.is_empty());
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        let snap = WindowSnapshot {
            start: self.start,
            end,
            groups,
        };
        self.start = end;
        snap
    }
}

fn latency_summary(h: &Histogram<u32>) -> Option<LatencySummary> {
    if h.is_empty() {
        return None;
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    Some(LatencySummary {
        count: h.len(),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        max_ms: h.max() as f64 / 1000.0,
    })
}

fn merged_summary(scratch: &mut Histogram<u32>, parts: &[&Latency]) -> Option<LatencySummary> {
    scratch.reset();
    for p in parts {
        if let Some(h) = &p.hist {
            // Same bounds and precision: add cannot fail.
            let _ = scratch.add(h);
        }
    }
    latency_summary(scratch)
}

/// Requests per latency bucket: entry `i` counts the values in `(bounds[i-1], bounds[i]]`, the
/// last entry those above every bound. Bounds are taken to the microsecond, the histogram's
/// unit.
///
/// Exact to the histogram's precision: an HDR bucket is counted under the first bound at or
/// above its *lowest* equivalent value, so every request at or below a bound is counted under
/// it (none is ever pushed up), and a request above a bound is counted under it only when the
/// bound falls inside its HDR bucket, i.e. within one resolution step (under 0.8% at 2
/// significant figures). Latencies reported in whole milliseconds land exactly on bounds
/// such as 10 ms or 1 s, which is why the lowest value decides rather than the midpoint.
fn bucket_counts(merged: &Histogram<u32>, bounds_secs: &[f64]) -> Vec<u64> {
    let mut counts = vec![0u64; bounds_secs.len() + 1];
    if merged.is_empty() {
        return counts;
    }
    let bounds_us: Vec<u64> = bounds_secs
        .iter()
        .map(|b| (b * 1e6).round() as u64)
        .collect();
    // Recorded values come in ascending order, so the bucket index only moves up.
    let mut i = 0;
    for v in merged.iter_recorded() {
        let low = merged.lowest_equivalent(v.value_iterated_to());
        while i < bounds_us.len() && low > bounds_us[i] {
            i += 1;
        }
        counts[i] += u64::from(v.count_at_value());
    }
    counts
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

fn key_shares(keys: &KeySummary, k: usize, denominator: u64) -> Vec<KeyShare> {
    keys.top(k)
        .into_iter()
        .map(|e| KeyShare {
            share: ratio(e.count, denominator).unwrap_or(0.0).min(1.0),
            key: e.key,
            requests: e.count,
            error: e.error,
        })
        .collect()
}

/// One shard's snapshot; `total` is its group's requests, the denominator of its share.
fn snapshot_shard(
    name: &str,
    s: &ShardWindow,
    total: u64,
    cfg: &WindowConfig,
    duration: f64,
    scratch: &mut Histogram<u32>,
) -> ShardSnapshot {
    let requests = s.requests();
    let errors = requests - s.by_outcome[Outcome::Ok.index()];
    // The merged histogram stays in `scratch` for the bucket counts.
    let latency = merged_summary(scratch, &[&s.ok_latency, &s.err_latency]);
    ShardSnapshot {
        shard: name.to_string(),
        requests,
        share: ratio(requests, total).unwrap_or(0.0),
        requests_per_second: requests as f64 / duration,
        by_outcome: s.by_outcome,
        errors,
        error_ratio: ratio(errors, requests),
        cache_hits: s.cache_hits,
        cache_misses: s.cache_misses,
        cache_hit_ratio: ratio(s.cache_hits, s.cache_hits + s.cache_misses),
        latency,
        latency_buckets: bucket_counts(scratch, &cfg.latency_buckets_secs),
        latency_sum_secs: (s.ok_latency.sum_us.saturating_add(s.err_latency.sum_us)) as f64 / 1e6,
        ok_latency: s.ok_latency.hist.as_ref().and_then(latency_summary),
        error_latency: s.err_latency.hist.as_ref().and_then(latency_summary),
        latency_samples: s.ok_latency.count() + s.err_latency.count(),
        top_keys: s
            .keys
            .as_ref()
            .map(|k| key_shares(k, cfg.shard_top_keys, requests))
            .unwrap_or_default(),
    }
}

impl GroupWindow {
    /// Requests by outcome, cache hits and cache misses, summed over the shards.
    fn counts(&self) -> ([u64; Outcome::COUNT], u64, u64) {
        let mut by_outcome = [0u64; Outcome::COUNT];
        let (mut hits, mut misses) = (0, 0);
        for s in &self.shards {
            for (a, b) in by_outcome.iter_mut().zip(s.by_outcome) {
                *a += b;
            }
            hits += s.cache_hits;
            misses += s.cache_misses;
        }
        (by_outcome, hits, misses)
    }
}

fn snapshot_group(
    g: &GroupWindow,
    cfg: &WindowConfig,
    duration: f64,
    scratch: &mut Histogram<u32>,
) -> GroupSnapshot {
    let total: u64 = g.shards.iter().map(ShardWindow::requests).sum();
    let mut shards: Vec<ShardSnapshot> = g
        .names
        .iter()
        .zip(&g.shards)
        .map(|(name, s)| snapshot_shard(name, s, total, cfg, duration, scratch))
        .collect();
    shards.sort_by(|a, b| a.shard.cmp(&b.shard));

    // Skew statistics cover the tracked shards; `__other__` is an aggregate of many shards and
    // would read as one giant shard.
    let counts: Vec<f64> = shards
        .iter()
        .filter(|s| s.is_tracked())
        .map(|s| s.requests as f64)
        .collect();
    let skew = SkewStats::from_counts(&counts, cfg.dispersion_alpha);

    let (by_outcome, hits, misses) = g.counts();
    let errors = total - by_outcome[Outcome::Ok.index()];
    let all: Vec<&Latency> = g
        .shards
        .iter()
        .flat_map(|s| [&s.ok_latency, &s.err_latency])
        .collect();
    let oks: Vec<&Latency> = g.shards.iter().map(|s| &s.ok_latency).collect();
    GroupSnapshot {
        group: g.name.to_string(),
        requests: total,
        requests_per_second: total as f64 / duration,
        by_outcome,
        errors,
        error_ratio: ratio(errors, total),
        cache_hits: hits,
        cache_misses: misses,
        cache_hit_ratio: ratio(hits, hits + misses),
        latency: merged_summary(scratch, &all),
        ok_latency: merged_summary(scratch, &oks),
        skew,
        fair_share: if counts.is_empty() {
            0.0
        } else {
            1.0 / counts.len() as f64
        },
        top_keys: key_shares(&g.keys, cfg.top_keys, total),
        keys_certified: g.keys.certified_top(cfg.top_keys.min(g.keys.len())),
        keyed_requests: g.keyed_requests,
        key_error_bound: g.keys.max_error(),
        shards,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs<'a>(g: &'a str, s: &'a str) -> ObservationRef<'a> {
        ObservationRef::new(g, s)
    }

    #[test]
    fn close_reports_counts_shares_and_resets() {
        let mut w = Windows::new(WindowConfig::default(), 100.0);
        let mut a = obs("db", "a");
        a.count = 3;
        a.latency_ms = Some(10.0);
        w.record(&a);
        let mut b = obs("db", "b");
        b.outcome = Outcome::Timeout;
        b.latency_ms = Some(1000.0);
        b.cache = Some(CacheResult::Miss);
        w.record(&b);
        let snap = w.close(110.0);
        assert_eq!(snap.groups.len(), 1);
        let g = &snap.groups[0];
        assert_eq!(g.requests, 4);
        assert_eq!(g.errors, 1);
        assert_eq!(g.shards[0].shard, "a");
        assert!((g.shards[0].share - 0.75).abs() < 1e-12);
        assert!((g.requests_per_second - 0.4).abs() < 1e-12);
        assert_eq!(g.shards[1].cache_hit_ratio, Some(0.0));
        let p99 = g.shards[1].latency.as_ref().unwrap().p99_ms;
        assert!((p99 - 1000.0).abs() / 1000.0 < 0.01, "{p99}");
        // The next window starts empty but keeps the shards as zero-load shards.
        let next = w.close(120.0);
        assert_eq!(next.groups[0].requests, 0);
        assert_eq!(next.groups[0].shards.len(), 2);
        assert_eq!(next.start, 110.0);
    }

    #[test]
    fn shards_over_the_cap_fold_into_other_and_totals_stay_correct() {
        let cfg = WindowConfig {
            max_shards_per_group: 2,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for s in ["a", "b", "c", "d", "a"] {
            w.record(&obs("g", s));
        }
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        let names: Vec<_> = g.shards.iter().map(|s| s.shard.as_str()).collect();
        assert_eq!(names, ["__other__", "a", "b"]);
        assert_eq!(g.requests, 5);
        assert_eq!(g.shards[0].requests, 2);
        assert_eq!(g.skew.as_ref().unwrap().shards, 2);
    }

    #[test]
    fn groups_over_the_cap_fold_into_other() {
        let cfg = WindowConfig {
            max_groups: 1,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for g in ["x", "y", "z"] {
            w.record(&obs(g, "s"));
        }
        let snap = w.close(10.0);
        let names: Vec<_> = snap.groups.iter().map(|g| g.group.as_str()).collect();
        assert_eq!(names, ["__other__", "x"]);
        assert_eq!(snap.groups[0].requests, 2);
    }

    #[test]
    fn idle_shards_expire_after_the_configured_windows() {
        let cfg = WindowConfig {
            shard_idle_windows: 2,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        w.record(&obs("g", "a"));
        w.record(&obs("g", "b"));
        w.close(10.0);
        for t in [20.0, 30.0] {
            w.record(&obs("g", "a"));
            assert_eq!(w.close(t).groups[0].shards.len(), 2);
        }
        w.record(&obs("g", "a"));
        assert_eq!(w.close(40.0).groups[0].shards.len(), 1);
        // A group with no traffic at all disappears once its shards expire.
        for t in [50.0, 60.0, 70.0] {
            w.close(t);
        }
        assert!(w.close(80.0).groups.is_empty());
    }

    #[test]
    fn group_p99_comes_from_merged_histograms_not_averaged_percentiles() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        // 99 fast shards with 100 requests at 1 ms, one shard with 100 requests at 2 s.
        for i in 0..100 {
            let name = format!("s{i}");
            let mut o = obs("g", &name);
            o.count = 100;
            o.latency_ms = Some(if i == 0 { 2000.0 } else { 1.0 });
            w.record(&o);
        }
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        let p99 = g.latency.as_ref().unwrap().p99_ms;
        // 1% of requests are slow: the merged p99 sits at the boundary, far below the mean of
        // per-shard p99s (about 21 ms) and far below the slow shard's 2 s.
        assert!(p99 <= 2000.0 * 1.01);
        let slow = g.shards.iter().find(|s| s.shard == "s0").unwrap();
        assert!((slow.latency.as_ref().unwrap().p99_ms - 2000.0).abs() < 20.0);
    }

    #[test]
    fn latency_buckets_count_values_on_a_bound_under_it_and_sum_exactly() {
        let cfg = WindowConfig {
            latency_buckets_secs: vec![0.01, 0.1, 1.0],
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        // Whole milliseconds on the bounds, just above them, and beyond the last one; errors
        // and successes land in the same (merged) buckets.
        for (ms, count, outcome) in [
            (10.0, 3, Outcome::Ok),
            (10.2, 1, Outcome::Ok),
            (100.0, 2, Outcome::Timeout),
            (1000.0, 1, Outcome::Ok),
            (1500.0, 4, Outcome::Error),
        ] {
            let mut o = obs("g", "s");
            o.latency_ms = Some(ms);
            o.count = count;
            o.outcome = outcome;
            w.record(&o);
        }
        w.record(&obs("g", "s")); // no latency: not in the histogram
        let snap = w.close(10.0);
        let s = &snap.groups[0].shards[0];
        assert_eq!(s.latency_buckets, [3, 3, 1, 4]);
        assert_eq!(s.latency_buckets.iter().sum::<u64>(), s.latency_samples);
        let sum = 0.030 + 0.0102 + 0.2 + 1.0 + 6.0;
        assert!(
            (s.latency_sum_secs - sum).abs() < 1e-9,
            "{}",
            s.latency_sum_secs
        );
        // The next window starts from zero.
        let next = w.close(20.0);
        assert_eq!(next.groups[0].shards[0].latency_buckets, [0, 0, 0, 0]);
        assert_eq!(next.groups[0].shards[0].latency_sum_secs, 0.0);
    }

    proptest::proptest! {
        /// The cumulative count under each bound never misses a request at or below it and
        /// takes in only requests within one HDR resolution step above it.
        #[test]
        fn latency_buckets_are_exact_to_the_histogram_precision(
            latencies_us in proptest::collection::vec(0u64..20_000_000, 1..300),
            sigfig in 1u8..=3,
        ) {
            let cfg = WindowConfig {
                latency_sigfig: sigfig,
                ..WindowConfig::default()
            };
            let bounds = cfg.latency_buckets_secs.clone();
            let mut w = Windows::new(cfg, 0.0);
            for &us in &latencies_us {
                let mut o = obs("g", "s");
                o.latency_ms = Some(us as f64 / 1000.0);
                w.record(&o);
            }
            let snap = w.close(10.0);
            let buckets = &snap.groups[0].shards[0].latency_buckets;
            // One resolution step of an HDR histogram is at most 1/2^(bits below the top)
            // of the value: 1/16, 1/128 and 1/1024 at 1, 2 and 3 significant figures.
            let step = [1.0 / 16.0, 1.0 / 128.0, 1.0 / 1024.0][usize::from(sigfig) - 1];
            let mut cumulative = 0;
            for (i, b) in bounds.iter().enumerate() {
                cumulative += buckets[i];
                let b_us = (b * 1e6).round() as u64;
                let at_or_below = latencies_us.iter().filter(|&&v| v <= b_us).count() as u64;
                let near = latencies_us
                    .iter()
                    .filter(|&&v| v as f64 <= b_us as f64 * (1.0 + step) + 1.0)
                    .count() as u64;
                proptest::prop_assert!(cumulative >= at_or_below, "bound {b}: {cumulative} < {at_or_below}");
                proptest::prop_assert!(cumulative <= near, "bound {b}: {cumulative} > {near}");
            }
            proptest::prop_assert_eq!(buckets.iter().sum::<u64>(), latencies_us.len() as u64);
        }
    }

    #[test]
    fn key_shares_use_group_load_and_keep_the_empty_key() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut e = obs("g", "s1");
        e.key = Some("");
        e.count = 8;
        w.record(&e);
        let mut k = obs("g", "s2");
        k.key = Some("user:1");
        w.record(&k);
        w.record(&obs("g", "s2"));
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        assert_eq!(g.top_keys[0].key, "");
        assert!((g.top_keys[0].share - 0.8).abs() < 1e-12);
        assert_eq!(g.keyed_requests, 9);
        assert_eq!(g.shards[0].top_keys[0].share, 1.0);
    }
}
