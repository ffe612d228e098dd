//! Per-shard windows: the second stage of the flow (`Observation -> Window -> SkewStats`).
//!
//! [`Windows`] accumulates observations for the current window of every group and shard:
//! request counts by outcome class, cache hits and misses, HDR-style latency histograms (the
//! project's own [`LogHistogram`]; success and error latency kept apart, because fast errors
//! pull latency down), and heavy-hitter key summaries for the group and for each shard.
//! [`Windows::close`] turns the window into an immutable [`WindowSnapshot`] and starts the next
//! one, keeping allocations.
//!
//! Bounds: at most `max_groups` groups and `max_shards_per_group` shards per group; what is over
//! the cap folds into the group or shard named `__other__`, so totals stay correct. A shard that
//! gets no traffic stays known (as a zero-load shard, which is what skew statistics must see)
//! for `shard_idle_windows` windows, then is forgotten.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use serde::Serialize;

use crate::histogram::LogHistogram;
use crate::keys::{KeyHash, KeySummary, same_key};
use crate::observation::{
    Batch, CacheResult, OTHER_LABEL, ObservationRef, Outcome, ReadingKind, ReadingRef,
};
use crate::snapshot::{
    GroupSnapshot, KeyShare, LatencySummary, ShardSnapshot, Traffic, WindowSnapshot, ratio,
};
use crate::stats::SkewStats;

/// Highest latency the histograms track: one hour. Larger values are clamped into the top bucket.
/// Values are whole microseconds: the histograms tell apart latencies 1 µs apart at the bottom.
const LATENCY_HIGH_US: u64 = 3_600_000_000;

/// Default of [`WindowConfig::max_shards_total`]: what fits the default memory budget (a 256 MiB
/// container, with room for everything else; `docs/configuration.md` has the arithmetic and
/// the measurement).
pub const DEFAULT_MAX_SHARDS_TOTAL: usize = 1024;

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
    /// Shards tracked over every group: the memory budget. Past it, a new shard takes the slot
    /// of the least recently active idle shard, or folds into its group's `__other__`.
    pub max_shards_total: usize,
    /// Groups always tracked, whatever the group cap: the systems an operator cares about
    /// cannot be crowded out by junk group names.
    pub pinned_groups: Vec<String>,
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
    /// Threads that record observations, each owning the windows of its part of the shards
    /// ([`crate::parts`]); 1 records on the caller's thread alone. Read when the windows are
    /// made: a change applies to new windows only.
    pub record_threads: usize,
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
            max_shards_total: DEFAULT_MAX_SHARDS_TOTAL,
            pinned_groups: Vec::new(),
            group_key_slots: 1024,
            shard_key_slots: 32,
            top_keys: 10,
            shard_top_keys: 3,
            latency_sigfig: 2,
            dispersion_alpha: 1e-3,
            latency_buckets_secs: DEFAULT_LATENCY_BUCKETS_SECS.to_vec(),
            record_threads: 1,
        }
    }
}

/// Fixed-seed hasher: replay must give the same output on every run, and nothing here iterates a
/// map in hash order anyway, but a fixed seed keeps timing behaviour reproducible too.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FixedState;

impl BuildHasher for FixedState {
    type Hasher = foldhash::fast::FoldHasher<'static>;
    fn build_hasher(&self) -> Self::Hasher {
        foldhash::fast::FixedState::with_seed(0x5eed_5eed).build_hasher()
    }
}

/// Name to slot number, for the groups and for each group's shards: looked up once per
/// observation. A `HashTable` with the names inside rather than a `HashMap<Box<str>, u32>`, so
/// that a lookup compares names with the inline word compare instead of a `memcmp` call, which
/// cost more than the rest of the lookup (`scripts/instructions.sh`, docs/performance.md).
#[derive(Debug, Clone, Default)]
pub(crate) struct NameMap {
    table: HashTable<(Box<str>, u32)>,
}

impl NameMap {
    fn hash(name: &str) -> u64 {
        FixedState.hash_one(name)
    }

    /// The slot of `name`, if it has one.
    #[inline(always)]
    pub(crate) fn get(&self, name: &str) -> Option<&u32> {
        self.table
            .find(Self::hash(name), |(n, _)| {
                same_key(n.as_bytes(), name.as_bytes())
            })
            .map(|(_, slot)| slot)
    }

    /// Gives `name` the slot `slot`, replacing any slot it had.
    pub(crate) fn insert(&mut self, name: Box<str>, slot: u32) {
        let hash = Self::hash(&name);
        match self.table.find_mut(hash, |(n, _)| *n == name) {
            Some((_, old)) => *old = slot,
            None => {
                self.table
                    .insert_unique(hash, (name, slot), |(n, _)| Self::hash(n));
            }
        }
    }

    /// Forgets `name`, if it had a slot.
    pub(crate) fn remove(&mut self, name: &str) {
        if let Ok(entry) = self
            .table
            .find_entry(Self::hash(name), |(n, _)| **n == *name)
        {
            entry.remove();
        }
    }

    pub(crate) fn clear(&mut self) {
        self.table.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len()
    }
}

/// Single-request latencies a [`Latency`] holds before adding them to its histogram at once.
const PENDING_LATENCIES: usize = 64;

/// One latency histogram, allocated on first use, and the exact sum of what it recorded.
///
/// Latencies of single requests wait in `pending` and go into the histogram
/// [`PENDING_LATENCIES`] at a time. Next to a thousand shards the histograms (13 KiB each at
/// 2 significant figures) outgrow the caches, and a slot's count, read and written in the
/// middle of an observation's few hundred instructions, was a cache miss the processor could
/// not overlap with the next one's: a quarter of the recording time with keys over 1,000
/// shards (`perf record` on `record/with_key_1000_shards`). Added 64 at a time in a loop of a
/// dozen instructions, many of those misses are in flight at once. Counts add in any order
/// (each saturates at its maximum), so the histogram is the same; every reader first calls
/// [`Self::settle`].
#[derive(Debug, Clone, Default)]
struct Latency {
    hist: Option<LogHistogram>,
    /// Sum of the recorded latencies in microseconds, as recorded (rounded and clamped like
    /// the histogram's values), so a Prometheus `_sum` agrees with its buckets.
    sum_us: u64,
    /// Latencies in microseconds (at most the top of the range, one hour, which fits 32 bits)
    /// of single requests recorded but not yet in `hist`; allocated with `hist`, never grown
    /// past [`PENDING_LATENCIES`].
    pending: Vec<u32>,
}

impl Latency {
    /// Always inlined: four call sites in [`Windows::record`], the per-observation hot path,
    /// where a call costs about a tenth of an unkeyed observation. A single request with room
    /// left in `pending` (the common case) costs a store; the rest is out of line.
    #[inline(always)]
    fn record(&mut self, sigfig: u8, latency_ms: f64, count: u64) {
        let us = latency_us(latency_ms);
        // No room (capacity 0) until the histogram exists; the last place stays free, so a
        // push never grows the buffer.
        if count == 1 && self.pending.len() + 1 < self.pending.capacity() {
            // `latency_us` clamps to one hour, under 2^32 microseconds.
            self.pending.push(us as u32);
            self.sum_us = self.sum_us.saturating_add(us);
        } else {
            self.record_now(sigfig, us, count);
        }
    }

    /// Records `count` requests of `us` microseconds straight into the histogram, allocating
    /// it (and `pending`) on first use, and settles `pending` when a single request found it
    /// full.
    #[inline(never)]
    fn record_now(&mut self, sigfig: u8, us: u64, count: u64) {
        let n = u32::try_from(count).unwrap_or(u32::MAX);
        match &mut self.hist {
            Some(hist) => hist.saturating_record_n(us, n),
            None => {
                let mut hist = new_histogram(sigfig);
                hist.saturating_record_n(us, n);
                self.hist = Some(hist);
            }
        }
        // A clone's buffer has only the room its contents needed: give it the full room back.
        if self.pending.capacity() < PENDING_LATENCIES {
            self.pending
                .reserve_exact(PENDING_LATENCIES - self.pending.len());
        }
        if n == 1 {
            self.settle();
        }
        // At most 3.6e9 us times 2^32 - 1 fits a u64; only the window's sum can overflow.
        self.sum_us = self.sum_us.saturating_add(us * u64::from(n));
    }

    /// Adds the pending latencies to the histogram.
    #[inline(never)]
    fn settle(&mut self) {
        if let Some(hist) = &mut self.hist {
            hist.saturating_record_each(&self.pending);
        }
        self.pending.clear();
    }

    /// The histogram, with everything recorded in it (after [`Self::settle`]).
    fn histogram(&self) -> Option<&LogHistogram> {
        debug_assert!(
            self.pending.is_empty(),
            "a latency read before it was settled"
        );
        self.hist.as_ref()
    }

    fn count(&self) -> u64 {
        self.histogram().map_or(0, |h| h.len())
    }

    fn reset(&mut self) {
        if let Some(h) = &mut self.hist {
            h.reset();
        }
        self.pending.clear();
        self.sum_us = 0;
    }

    /// Adds what `other` recorded (both settled), for the merge of parts at close.
    fn absorb(&mut self, other: &Latency, sigfig: u8) {
        if let Some(h) = other.histogram() {
            // Same bounds and precision: add cannot fail.
            let _ = self
                .hist
                .get_or_insert_with(|| new_histogram(sigfig))
                .add(h);
        }
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
    }
}

/// A latency in milliseconds as whole microseconds, clamped to the histograms' range.
#[inline]
fn latency_us(latency_ms: f64) -> u64 {
    // Latencies are validated finite and >= 0, where `x + 0.5` truncated rounds to the nearest
    // microsecond like `round()` (up to one ulp at exact halves) without a libm call on
    // baseline x86-64. Converted through i64: one conversion instruction where `as u64` needs
    // two and a fix-up. Both casts saturate, so after the clamp they agree on every input (a
    // negative or NaN one gives 0, anything past 2^63 the top of the range).
    let us = ((latency_ms * 1000.0 + 0.5) as i64).max(0) as u64;
    // Values above the range clamp into the top bucket.
    us.min(LATENCY_HIGH_US)
}

fn new_histogram(sigfig: u8) -> LogHistogram {
    // The config admits 1..=3 significant figures and the range is a constant.
    LogHistogram::new(LATENCY_HIGH_US, sigfig).expect("latency histogram bounds are valid")
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
    /// Highest saturation readings of the window.
    readings: Readings,
    /// Closed windows in a row without a request or a reading.
    idle_windows: u32,
    /// The last window (by sequence number) with a request: least recently active goes first
    /// when a cap is reached.
    last_active: u64,
    /// What the slot holds.
    role: Role,
}

/// What a shard slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A shard, by name.
    Named,
    /// What overflowed the group's shard cap (`__other__`).
    Overflow,
    /// Nothing: given up this window for another group's shard; removed at close.
    Vacant,
}

impl ShardWindow {
    fn new(now: u64) -> Self {
        ShardWindow {
            by_outcome: [0; Outcome::COUNT],
            cache_hits: 0,
            cache_misses: 0,
            ok_latency: Latency::default(),
            err_latency: Latency::default(),
            keys: None,
            readings: Readings::default(),
            idle_windows: 0,
            last_active: now,
            role: Role::Named,
        }
    }

    fn requests(&self) -> u64 {
        self.by_outcome
            .iter()
            .fold(0u64, |sum, &n| sum.saturating_add(n))
    }

    /// Adds what `other` saw in the window (both settled): the merge of one group's overflow
    /// slots from several parts at close.
    fn absorb(&mut self, other: &ShardWindow, sigfig: u8) {
        for (a, b) in self.by_outcome.iter_mut().zip(other.by_outcome) {
            *a = a.saturating_add(b);
        }
        self.cache_hits = self.cache_hits.saturating_add(other.cache_hits);
        self.cache_misses = self.cache_misses.saturating_add(other.cache_misses);
        self.ok_latency.absorb(&other.ok_latency, sigfig);
        self.err_latency.absorb(&other.err_latency, sigfig);
        match (&mut self.keys, &other.keys) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, Some(theirs)) => self.keys = Some(theirs.clone()),
            _ => {}
        }
        if let Some(v) = other.readings.inflight {
            self.readings.raise(ReadingKind::Inflight, v);
        }
        if let Some(v) = other.readings.utilisation {
            self.readings.raise(ReadingKind::Utilisation, v);
        }
        self.idle_windows = self.idle_windows.min(other.idle_windows);
        self.last_active = self.last_active.max(other.last_active);
    }

    fn reset(&mut self) {
        self.by_outcome = [0; Outcome::COUNT];
        self.cache_hits = 0;
        self.cache_misses = 0;
        self.ok_latency.reset();
        self.err_latency.reset();
        self.readings = Readings::default();
        if let Some(k) = &mut self.keys {
            k.clear();
        }
    }
}

/// What one group saw in the current window.
///
/// Shards live in slots (`names[i]`, `shards[i]`); `index` maps a real shard's name to its slot.
/// The overflow slot (`other`) is not in `index`, so a shard that is really named
/// `__other__` has a slot of its own and is never merged with the overflow.
#[derive(Debug, Clone)]
struct GroupWindow {
    name: Box<str>,
    /// The overflow group (`__other__`), which takes the records of groups over the cap.
    overflow: bool,
    /// Listed in the configuration's pinned groups: always tracked.
    pinned: bool,
    names: Vec<Box<str>>,
    shards: Vec<ShardWindow>,
    index: NameMap,
    other: Option<u32>,
    /// Slots given up this window for another group's shard.
    vacant: usize,
    /// Slots idle in the last closed window, least recently active last: eviction candidates.
    idle: Vec<u32>,
    keys: KeySummary,
    keyed_requests: u64,
    /// Latency of the group's cache misses (backend calls), so `CacheHitCollapse` reads the
    /// backend's own p99. Per group, not per shard: one histogram (13 KiB at 2 significant
    /// figures) for each tracked group, allocated on the group's first miss with a latency.
    miss_latency: Latency,
    /// Latency of the group's timeouts, so `DeadlinePileUp` can infer the deadline where the
    /// timeouts cluster. Per group, like `miss_latency` and at the same cost, allocated on the
    /// group's first timeout with a latency.
    timeout_latency: Latency,
    /// Records folded into the overflow shard this window.
    folded: u64,
    /// The last window (by sequence number) with a request.
    last_active: u64,
}

impl GroupWindow {
    fn new(name: &str, cfg: &WindowConfig, now: u64) -> Self {
        GroupWindow {
            name: name.into(),
            overflow: false,
            pinned: cfg.pinned_groups.iter().any(|p| p == name),
            names: Vec::new(),
            shards: Vec::new(),
            index: NameMap::default(),
            other: None,
            vacant: 0,
            idle: Vec::new(),
            keys: KeySummary::new(cfg.group_key_slots),
            keyed_requests: 0,
            miss_latency: Latency::default(),
            timeout_latency: Latency::default(),
            folded: 0,
            last_active: now,
        }
    }

    /// Puts every pending latency into its histogram, before the window is read.
    fn settle_latencies(&mut self) {
        for s in &mut self.shards {
            s.ok_latency.settle();
            s.err_latency.settle();
        }
        self.miss_latency.settle();
        self.timeout_latency.settle();
    }

    /// Shards tracked by name (every slot but the overflow and the given-up ones).
    fn live(&self) -> usize {
        self.shards.len() - usize::from(self.other.is_some()) - self.vacant
    }

    /// The overflow slot, made on first use.
    fn overflow_slot(&mut self, now: u64) -> usize {
        if let Some(i) = self.other {
            return i as usize;
        }
        let i = self.shards.len();
        let mut s = ShardWindow::new(now);
        s.role = Role::Overflow;
        self.names.push(OTHER_LABEL.into());
        self.shards.push(s);
        self.other = Some(i as u32);
        i
    }

    /// A slot idle in the last window and still idle in this one, least recently active first.
    fn take_idle(&mut self) -> Option<usize> {
        while let Some(i) = self.idle.pop() {
            let s = &self.shards[i as usize];
            if s.role == Role::Named && s.requests() == 0 {
                return Some(i as usize);
            }
        }
        None
    }

    /// Gives slot `i` to `name`, forgetting what it held.
    fn reuse(&mut self, i: usize, name: &str, now: u64) {
        let old = std::mem::replace(&mut self.names[i], name.into());
        self.index.remove(&old);
        self.index.insert(name.into(), i as u32);
        self.shards[i] = ShardWindow::new(now);
    }

    /// A new slot for `name`.
    fn push(&mut self, name: &str, now: u64) -> usize {
        let i = self.shards.len();
        self.names.push(name.into());
        self.shards.push(ShardWindow::new(now));
        self.index.insert(name.into(), i as u32);
        i
    }

    /// Gives up slot `i` for a shard of another group (the budget is shared).
    fn give_up(&mut self, i: usize) {
        let name = std::mem::take(&mut self.names[i]);
        self.index.remove(&name);
        self.shards[i].role = Role::Vacant;
        self.vacant += 1;
    }

    /// At close: forgets shards idle for longer than `max_idle` windows and the slots given up,
    /// and lists the idle ones as eviction candidates, least recently active last.
    fn compact(&mut self, max_idle: u32) {
        let keep = |s: &ShardWindow| s.role != Role::Vacant && s.idle_windows <= max_idle;
        if !self.shards.iter().all(keep) {
            let mut names = Vec::with_capacity(self.names.len());
            let mut shards = Vec::with_capacity(self.shards.len());
            for (n, s) in self.names.drain(..).zip(self.shards.drain(..)) {
                if keep(&s) {
                    names.push(n);
                    shards.push(s);
                }
            }
            self.names = names;
            self.shards = shards;
            self.index.clear();
            self.other = None;
            self.vacant = 0;
            for (i, (n, s)) in self.names.iter().zip(&self.shards).enumerate() {
                match s.role {
                    Role::Overflow => self.other = Some(i as u32),
                    _ => {
                        self.index.insert(n.clone(), i as u32);
                    }
                }
            }
        }
        self.list_idle();
    }

    fn list_idle(&mut self) {
        let mut idle: Vec<u32> = (0..self.shards.len() as u32)
            .filter(|&i| {
                let s = &self.shards[i as usize];
                s.role == Role::Named && s.idle_windows > 0
            })
            .collect();
        // Least recently active last, so `pop` takes it first.
        idle.sort_by_key(|&i| std::cmp::Reverse(self.shards[i as usize].last_active));
        self.idle = idle;
    }
}

/// The current window of every group: the only mutable state of the windowing stage.
///
/// Groups live in slots like shards do: `index` maps a real group's name to its slot and the
/// overflow group is kept apart (`other`).
#[derive(Debug, Clone)]
pub struct Windows {
    cfg: WindowConfig,
    groups: Vec<GroupWindow>,
    index: NameMap,
    other: Option<usize>,
    /// Shards tracked by name in every group: what [`WindowConfig::max_shards_total`] bounds.
    live_shards: usize,
    /// Records folded into the overflow group this window.
    folded_groups: u64,
    /// Sequence number of the current window.
    seq: u64,
    start: f64,
    /// Cache of the last group looked up: most batches carry one group.
    last_group: Option<(usize, Box<str>)>,
    scratch: Option<LogHistogram>,
}

/// Where a record goes.
enum Slot {
    /// A group's slot and a shard's slot in it.
    Shard(usize, usize),
}

impl Windows {
    /// Empty windows whose first window starts at `start` (unix seconds).
    pub fn new(cfg: WindowConfig, start: f64) -> Self {
        Windows {
            cfg,
            groups: Vec::new(),
            index: NameMap::default(),
            other: None,
            live_shards: 0,
            folded_groups: 0,
            seq: 0,
            start,
            last_group: None,
            scratch: None,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &WindowConfig {
        &self.cfg
    }

    /// Puts new sizes and caps in force. Caps apply to the next group or shard that arrives;
    /// what is tracked stays. A new window length applies from the next window.
    pub fn set_config(&mut self, cfg: WindowConfig) {
        for g in &mut self.groups {
            g.pinned = !g.overflow && cfg.pinned_groups.iter().any(|p| **p == *g.name);
        }
        self.cfg = cfg;
    }

    /// Start of the current window, unix seconds.
    pub fn start(&self) -> f64 {
        self.start
    }

    /// Starts the current window at `start` instead (after the wall clock stepped); what it
    /// holds stays.
    pub fn set_start(&mut self, start: f64) {
        self.start = start;
    }

    /// Groups currently tracked (including `__other__`).
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Shards currently tracked by name, over every group.
    pub fn shard_count(&self) -> usize {
        self.live_shards
    }

    /// The slot of `group`, admitting it if it is new. Always inlined: [`Windows::record`] and
    /// [`Windows::read`] both call it, and a second caller made the compiler keep it out of
    /// line, which cost every observation about 20 instructions (`scripts/instructions.sh`).
    #[inline(always)]
    fn group_index(&mut self, group: &str) -> usize {
        // Most batches carry one group: this compare runs for every observation, so it is
        // kept inline rather than a `memcmp` call.
        if let Some((i, name)) = &self.last_group
            && same_key(name.as_bytes(), group.as_bytes())
        {
            return *i;
        }
        let i = match self.index.get(group) {
            Some(&i) => i as usize,
            None => self.admit_group(group),
        };
        self.last_group = Some((i, group.into()));
        i
    }

    /// A slot for a group seen for the first time: a new one while under the cap (pinned
    /// groups always), else the least recently active group that is idle this window, else the
    /// overflow group.
    fn admit_group(&mut self, group: &str) -> usize {
        let pinned = self.cfg.pinned_groups.iter().any(|p| p == group);
        let unpinned = self
            .groups
            .iter()
            .filter(|g| !g.pinned && !g.overflow)
            .count();
        if pinned || unpinned < self.cfg.max_groups {
            return self.push_group(group);
        }
        let evict = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.pinned && !g.overflow && g.last_active < self.seq)
            .filter(|(_, g)| g.shards.iter().all(|s| s.requests() == 0))
            .min_by_key(|(_, g)| g.last_active)
            .map(|(i, _)| i);
        match evict {
            Some(i) => {
                let old = std::mem::replace(
                    &mut self.groups[i],
                    GroupWindow::new(group, &self.cfg, self.seq),
                );
                self.live_shards -= old.live();
                self.index.remove(&old.name);
                self.index.insert(group.into(), i as u32);
                i
            }
            None => self.overflow_group(),
        }
    }

    fn push_group(&mut self, group: &str) -> usize {
        let i = self.groups.len();
        self.groups
            .push(GroupWindow::new(group, &self.cfg, self.seq));
        self.index.insert(group.into(), i as u32);
        i
    }

    fn overflow_group(&mut self) -> usize {
        if let Some(i) = self.other {
            return i;
        }
        let i = self.groups.len();
        let mut g = GroupWindow::new(OTHER_LABEL, &self.cfg, self.seq);
        g.overflow = true;
        self.groups.push(g);
        self.other = Some(i);
        i
    }

    /// The slot of `shard` in group slot `gi`, admitting it if it is new; always inlined, as
    /// [`Windows::group_index`] is.
    #[inline(always)]
    fn shard_index(&mut self, gi: usize, shard: &str) -> usize {
        let g = &mut self.groups[gi];
        if let Some(&i) = g.index.get(shard) {
            return i as usize;
        }
        self.admit_shard(gi, shard)
    }

    /// A slot for a shard seen for the first time in group `gi`: a new one while the group and
    /// the total are under their caps; else the group's least recently active idle shard; else,
    /// when only the total is full, the least recently active idle shard of another group;
    /// else the group's overflow slot. The overflow group keeps everything in its overflow slot.
    fn admit_shard(&mut self, gi: usize, shard: &str) -> usize {
        let seq = self.seq;
        if self.groups[gi].overflow {
            return self.groups[gi].overflow_slot(seq);
        }
        let group_full = self.groups[gi].live() >= self.cfg.max_shards_per_group;
        let total_full = self.live_shards >= self.cfg.max_shards_total;
        if !group_full && !total_full {
            self.live_shards += 1;
            return self.groups[gi].push(shard, seq);
        }
        if let Some(i) = self.groups[gi].take_idle() {
            self.groups[gi].reuse(i, shard, seq);
            return i;
        }
        if !group_full && let Some((gj, j)) = self.idle_elsewhere(gi) {
            self.groups[gj].give_up(j);
            return self.groups[gi].push(shard, seq);
        }
        self.groups[gi].overflow_slot(seq)
    }

    /// The least recently active shard, idle in this window, of a group other than `gi`.
    fn idle_elsewhere(&mut self, gi: usize) -> Option<(usize, usize)> {
        let (gj, _) = self
            .groups
            .iter()
            .enumerate()
            .filter(|(j, g)| *j != gi && !g.overflow && !g.idle.is_empty())
            .filter_map(|(j, g)| {
                g.idle
                    .last()
                    .map(|&i| (j, g.shards[i as usize].last_active))
            })
            .min_by_key(|&(_, at)| at)?;
        self.groups[gj].take_idle().map(|i| (gj, i))
    }

    fn slot(&mut self, obs: &ObservationRef<'_>) -> Slot {
        let gi = self.group_index(obs.group);
        let si = self.shard_index(gi, obs.shard);
        Slot::Shard(gi, si)
    }

    /// Adds one observation to the current window. The caller has validated it.
    pub fn record(&mut self, obs: &ObservationRef<'_>) {
        let Slot::Shard(gi, si) = self.slot(obs);
        self.record_at(gi, si, obs);
    }

    /// Adds one observation to the overflow group: the group cap was decided by whoever
    /// dealt it to this part ([`crate::parts`]).
    pub(crate) fn record_folded(&mut self, obs: &ObservationRef<'_>) {
        let gi = self.overflow_group();
        let si = self.shard_index(gi, obs.shard);
        self.record_at(gi, si, obs);
    }

    /// Adds one observation to group slot `gi`, shard slot `si`.
    #[inline(always)]
    fn record_at(&mut self, gi: usize, si: usize, obs: &ObservationRef<'_>) {
        let sigfig = self.cfg.latency_sigfig;
        let shard_slots = self.cfg.shard_key_slots;
        let seq = self.seq;
        let g = &mut self.groups[gi];
        if g.overflow {
            self.folded_groups = self.folded_groups.saturating_add(obs.count);
        } else if Some(si as u32) == g.other {
            g.folded = g.folded.saturating_add(obs.count);
        }
        g.last_active = seq;
        let s = &mut g.shards[si];
        s.last_active = seq;
        let n = &mut s.by_outcome[obs.outcome.index()];
        *n = n.saturating_add(obs.count);
        match obs.cache {
            Some(CacheResult::Hit) => s.cache_hits = s.cache_hits.saturating_add(obs.count),
            Some(CacheResult::Miss) => s.cache_misses = s.cache_misses.saturating_add(obs.count),
            None => {}
        }
        if let Some(l) = obs.latency_ms {
            if obs.outcome.is_error() {
                s.err_latency.record(sigfig, l, obs.count);
            } else {
                s.ok_latency.record(sigfig, l, obs.count);
            }
            if obs.cache == Some(CacheResult::Miss) {
                g.miss_latency.record(sigfig, l, obs.count);
            }
            if obs.outcome == Outcome::Timeout {
                g.timeout_latency.record(sigfig, l, obs.count);
            }
        }
        if let Some(k) = obs.key {
            // One hash for both summaries.
            let hash = KeyHash::of(k);
            // The overflow group mixes unrelated systems: no per-shard keys there.
            if !g.overflow {
                s.keys
                    .get_or_insert_with(|| KeySummary::new(shard_slots))
                    .record_hashed(k, hash, obs.count);
            }
            g.keys.record_hashed(k, hash, obs.count);
            g.keyed_requests = g.keyed_requests.saturating_add(obs.count);
        }
    }

    /// Adds one saturation reading to the current window: the shard keeps the highest of each
    /// kind. The shard is admitted as a request would admit it, and a shard that reports
    /// counts as active, so a shard that reports readings and serves no request stays known.
    /// The caller has validated it.
    pub fn read(&mut self, reading: &ReadingRef<'_>) {
        let gi = self.group_index(reading.group);
        self.read_at(gi, reading);
    }

    /// Adds one saturation reading to the overflow group, as [`Self::record_folded`] does.
    pub(crate) fn read_folded(&mut self, reading: &ReadingRef<'_>) {
        let gi = self.overflow_group();
        self.read_at(gi, reading);
    }

    fn read_at(&mut self, gi: usize, reading: &ReadingRef<'_>) {
        let seq = self.seq;
        let si = self.shard_index(gi, reading.shard);
        let g = &mut self.groups[gi];
        g.last_active = seq;
        let s = &mut g.shards[si];
        s.last_active = seq;
        s.readings.raise(reading.kind, reading.value);
    }

    /// Adds every observation and every reading of `batch`.
    pub fn record_batch(&mut self, batch: &Batch) {
        for obs in batch.iter() {
            self.record(&obs);
        }
        for reading in batch.readings() {
            self.read(&reading);
        }
    }

    /// Adds the observations and readings of `batch` to the overflow group, as
    /// [`Self::record_folded`] does.
    pub(crate) fn record_batch_folded(&mut self, batch: &Batch) {
        for obs in batch.iter() {
            self.record_folded(&obs);
        }
        for reading in batch.readings() {
            self.read_folded(&reading);
        }
    }

    /// Whether `group` is tracked by name.
    pub(crate) fn has_group(&self, group: &str) -> bool {
        self.index.get(group).is_some()
    }

    /// Forgets `group` and its shards, as the group cap's eviction does (decided, for a part,
    /// by whoever deals records to it).
    pub(crate) fn forget_group(&mut self, group: &str) {
        if let Some(&i) = self.index.get(group) {
            self.groups[i as usize].shards.clear();
            self.forget_empty_groups();
        }
    }

    /// Ends the current window at `end` (unix seconds), returns what it saw, and starts the next
    /// window at `end`.
    pub fn close(&mut self, end: f64) -> WindowSnapshot {
        close_parts(&mut [self], end)
    }

    /// First step of a close: counts idle windows, forgets expired shards and settles every
    /// latency. Expiry first: an expired shard had no request in this window, so it loses
    /// nothing, and it is shown as a zero-load shard for exactly `shard_idle_windows` windows.
    fn expire(&mut self) {
        for g in &mut self.groups {
            for s in &mut g.shards {
                s.idle_windows = if s.requests() == 0 && s.readings.is_empty() {
                    s.idle_windows.saturating_add(1)
                } else {
                    0
                };
            }
            g.compact(self.cfg.shard_idle_windows);
            g.settle_latencies();
        }
    }

    /// Last step of a close: empties the window, keeping allocations, and starts the next one
    /// at `end`.
    fn start_next(&mut self, end: f64) {
        for g in &mut self.groups {
            for s in &mut g.shards {
                s.reset();
            }
            g.keys.clear();
            g.keyed_requests = 0;
            g.miss_latency.reset();
            g.timeout_latency.reset();
            g.folded = 0;
        }
        self.folded_groups = 0;
        self.forget_empty_groups();
        self.start = end;
        self.seq += 1;
    }

    /// Forgets groups whose shards all expired, and recounts what the caps bound.
    fn forget_empty_groups(&mut self) {
        if self.groups.iter().any(|g| g.shards.is_empty()) {
            self.groups.retain(|g| !g.shards.is_empty());
            self.index.clear();
            self.other = None;
            for (i, g) in self.groups.iter().enumerate() {
                if g.overflow {
                    self.other = Some(i);
                } else {
                    self.index.insert(g.name.clone(), i as u32);
                }
            }
            self.last_group = None;
        }
        self.live_shards = self.groups.iter().map(GroupWindow::live).sum();
    }
}

/// Closes the current window of every part at `end` and returns one snapshot of them all.
///
/// The parts hold disjoint shards of the same groups ([`crate::parts`]); one part is the plain
/// [`Windows::close`]. A group found in one part is read as it is. A group found in several
/// has its shards gathered, its overflow slots added into one, its key summaries merged (the
/// bounds of [`KeySummary::merge`] hold for the whole stream) and its latency histograms added,
/// so its percentiles are exact to the histograms' precision, never averaged.
pub(crate) fn close_parts(parts: &mut [&mut Windows], end: f64) -> WindowSnapshot {
    let start = parts[0].start;
    let duration = (end - start).max(f64::MIN_POSITIVE);
    let sigfig = parts[0].cfg.latency_sigfig;
    let mut scratch = parts[0]
        .scratch
        .take()
        .unwrap_or_else(|| new_histogram(sigfig));
    let folded_groups = parts
        .iter()
        .fold(0u64, |sum, p| sum.saturating_add(p.folded_groups));
    for p in parts.iter_mut() {
        p.expire();
    }
    let mut groups = Vec::new();
    {
        let cfg = &parts[0].cfg;
        // By name, the overflow group last among equals: the snapshot's order.
        let mut by_name: std::collections::BTreeMap<(&str, bool), Vec<&GroupWindow>> =
            std::collections::BTreeMap::new();
        for p in parts.iter() {
            for g in &p.groups {
                by_name.entry((&g.name, g.overflow)).or_default().push(g);
            }
        }
        for ((_, overflow), gs) in by_name {
            let mut snap = match gs.as_slice() {
                [g] => snapshot_group(&GroupView::of(g), cfg, duration, &mut scratch),
                _ => snapshot_merged(&gs, cfg, duration, &mut scratch),
            };
            if overflow {
                snap.folded_records = folded_groups;
            }
            if !snap.shards.is_empty() {
                groups.push(snap);
            }
        }
    }
    for p in parts.iter_mut() {
        p.start_next(end);
    }
    parts[0].scratch = Some(scratch);
    WindowSnapshot { start, end, groups }
}

/// What a group snapshot is read from: one group window, or the windows of one group in
/// several parts.
struct GroupView<'a> {
    name: &'a str,
    overflow: bool,
    folded: u64,
    shards: Vec<(&'a str, &'a ShardWindow)>,
    keys: &'a KeySummary,
    keyed_requests: u64,
    miss_latency: Vec<&'a Latency>,
    timeout_latency: Vec<&'a Latency>,
}

impl<'a> GroupView<'a> {
    fn of(g: &'a GroupWindow) -> Self {
        GroupView {
            name: &g.name,
            overflow: g.overflow,
            folded: g.folded,
            shards: g.names.iter().map(|n| &**n).zip(&g.shards).collect(),
            keys: &g.keys,
            keyed_requests: g.keyed_requests,
            miss_latency: vec![&g.miss_latency],
            timeout_latency: vec![&g.timeout_latency],
        }
    }
}

/// The snapshot of one group whose shards are spread over several parts.
fn snapshot_merged(
    gs: &[&GroupWindow],
    cfg: &WindowConfig,
    duration: f64,
    scratch: &mut LogHistogram,
) -> GroupSnapshot {
    let mut other: Option<ShardWindow> = None;
    for s in gs.iter().flat_map(|g| &g.shards) {
        if s.role == Role::Overflow {
            match &mut other {
                Some(o) => o.absorb(s, cfg.latency_sigfig),
                None => other = Some(s.clone()),
            }
        }
    }
    let mut keys = KeySummary::new(cfg.group_key_slots);
    for g in gs {
        keys.merge(&g.keys);
    }
    let mut shards: Vec<(&str, &ShardWindow)> = gs
        .iter()
        .flat_map(|g| g.names.iter().map(|n| &**n).zip(&g.shards))
        .filter(|(_, s)| s.role != Role::Overflow)
        .collect();
    if let Some(o) = &other {
        shards.push((OTHER_LABEL, o));
    }
    let view = GroupView {
        name: &gs[0].name,
        overflow: gs[0].overflow,
        folded: gs.iter().fold(0u64, |sum, g| sum.saturating_add(g.folded)),
        shards,
        keys: &keys,
        keyed_requests: gs
            .iter()
            .fold(0u64, |sum, g| sum.saturating_add(g.keyed_requests)),
        miss_latency: gs.iter().map(|g| &g.miss_latency).collect(),
        timeout_latency: gs.iter().map(|g| &g.timeout_latency).collect(),
    };
    snapshot_group(&view, cfg, duration, scratch)
}

/// A shard's highest readings of the window, by kind.
///
/// The highest rather than the last: a window holds several readings, queueing responds to the
/// peak, and the maximum does not depend on the order in which UDP delivered them, so replay
/// and the live agent agree.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Readings {
    inflight: Option<f64>,
    utilisation: Option<f64>,
}

impl Readings {
    fn raise(&mut self, kind: ReadingKind, value: f64) {
        let slot = match kind {
            ReadingKind::Inflight => &mut self.inflight,
            ReadingKind::Utilisation => &mut self.utilisation,
        };
        *slot = Some(slot.map_or(value, |v| v.max(value)));
    }

    fn is_empty(&self) -> bool {
        self.inflight.is_none() && self.utilisation.is_none()
    }
}

fn latency_summary(h: &LogHistogram) -> Option<LatencySummary> {
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

fn merged_summary(scratch: &mut LogHistogram, parts: &[&Latency]) -> Option<LatencySummary> {
    scratch.reset();
    for p in parts {
        if let Some(h) = p.histogram() {
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
/// Exact to the histogram's precision: a histogram slot is counted under the first bound at or
/// above its *lowest* equivalent value, so every request at or below a bound is counted under
/// it (none is ever pushed up), and a request above a bound is counted under it only when the
/// bound falls inside its slot, i.e. within one resolution step (under 0.8% at 2 significant
/// figures). Latencies reported in whole milliseconds land exactly on bounds such as 10 ms or
/// 1 s, which is why the lowest value decides rather than the midpoint.
fn bucket_counts(merged: &LogHistogram, bounds_secs: &[f64]) -> Vec<u64> {
    if merged.is_empty() {
        return vec![0u64; bounds_secs.len() + 1];
    }
    let bounds_us: Vec<u64> = bounds_secs
        .iter()
        .map(|b| (b * 1e6).round() as u64)
        .collect();
    merged.counts_by_bound(&bounds_us)
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
    scratch: &mut LogHistogram,
) -> ShardSnapshot {
    let requests = s.requests();
    // The merged histogram stays in `scratch` for the bucket counts.
    let latency = merged_summary(scratch, &[&s.ok_latency, &s.err_latency]);
    let ok_latency = s.ok_latency.histogram().and_then(latency_summary);
    ShardSnapshot {
        shard: name.to_string(),
        overflow: s.role == Role::Overflow,
        requests,
        share: ratio(requests, total).unwrap_or(0.0),
        traffic: Traffic::new(
            requests,
            duration,
            s.by_outcome,
            (s.cache_hits, s.cache_misses),
            (latency, ok_latency),
        ),
        latency_buckets: bucket_counts(scratch, &cfg.latency_buckets_secs),
        latency_sum_secs: (s.ok_latency.sum_us.saturating_add(s.err_latency.sum_us)) as f64 / 1e6,
        error_latency: s.err_latency.histogram().and_then(latency_summary),
        latency_samples: s.ok_latency.count() + s.err_latency.count(),
        top_keys: s
            .keys
            .as_ref()
            .map(|k| key_shares(k, cfg.shard_top_keys, requests))
            .unwrap_or_default(),
        inflight: s.readings.inflight,
        utilisation: s.readings.utilisation,
    }
}

impl GroupView<'_> {
    /// Requests by outcome, cache hits and cache misses, summed over the shards.
    fn counts(&self) -> ([u64; Outcome::COUNT], u64, u64) {
        let mut by_outcome = [0u64; Outcome::COUNT];
        let (mut hits, mut misses) = (0, 0);
        for (_, s) in &self.shards {
            for (a, b) in by_outcome.iter_mut().zip(s.by_outcome) {
                *a = a.saturating_add(b);
            }
            hits = s.cache_hits.saturating_add(hits);
            misses = s.cache_misses.saturating_add(misses);
        }
        (by_outcome, hits, misses)
    }
}

/// A group's snapshot from its window: the shards, the skew statistics over the tracked ones,
/// the group's totals and merged latencies, and its keys. One struct literal of every field is
/// most of its length.
fn snapshot_group(
    g: &GroupView<'_>,
    cfg: &WindowConfig,
    duration: f64,
    scratch: &mut LogHistogram,
) -> GroupSnapshot {
    let total = g
        .shards
        .iter()
        .fold(0u64, |sum, (_, s)| sum.saturating_add(s.requests()));
    let mut shards: Vec<ShardSnapshot> = g
        .shards
        .iter()
        .map(|(name, s)| snapshot_shard(name, s, total, cfg, duration, scratch))
        .collect();
    shards.sort_by(|a, b| a.shard.cmp(&b.shard).then(a.overflow.cmp(&b.overflow)));

    // Skew statistics cover the tracked shards; `__other__` is an aggregate of many shards and
    // would read as one giant shard.
    let counts: Vec<f64> = shards
        .iter()
        .filter(|s| s.is_tracked())
        .map(|s| s.requests as f64)
        .collect();
    let skew = SkewStats::from_counts(&counts, cfg.dispersion_alpha);

    let (by_outcome, hits, misses) = g.counts();
    let all: Vec<&Latency> = g
        .shards
        .iter()
        .flat_map(|(_, s)| [&s.ok_latency, &s.err_latency])
        .collect();
    let oks: Vec<&Latency> = g.shards.iter().map(|(_, s)| &s.ok_latency).collect();
    GroupSnapshot {
        group: g.name.to_string(),
        overflow: g.overflow,
        folded_records: g.folded,
        requests: total,
        traffic: Traffic::new(
            total,
            duration,
            by_outcome,
            (hits, misses),
            (merged_summary(scratch, &all), merged_summary(scratch, &oks)),
        ),
        miss_latency: merged_summary(scratch, &g.miss_latency),
        timeout_latency: merged_summary(scratch, &g.timeout_latency),
        skew,
        fair_share: if counts.is_empty() {
            0.0
        } else {
            1.0 / counts.len() as f64
        },
        top_keys: key_shares(g.keys, cfg.top_keys, total),
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

    fn reading<'a>(g: &'a str, s: &'a str, kind: ReadingKind, value: f64) -> ReadingRef<'a> {
        ReadingRef {
            ts: None,
            group: g,
            shard: s,
            kind,
            value,
        }
    }

    #[test]
    fn readings_keep_the_highest_of_the_window_whatever_their_order_and_stand_for_no_request() {
        use ReadingKind::{Inflight, Utilisation};
        let values = [
            (Utilisation, 0.4),
            (Inflight, 12.0),
            (Utilisation, 0.9),
            (Inflight, 3.0),
        ];
        let mut snaps = Vec::new();
        for order in [values, [values[3], values[2], values[1], values[0]]] {
            let mut w = Windows::new(WindowConfig::default(), 0.0);
            for _ in 0..3 {
                w.record(&obs("db", "s1"));
                w.record(&obs("db", "s2"));
            }
            for (kind, v) in order {
                w.read(&reading("db", "s1", kind, v));
            }
            snaps.push(w.close(10.0));
        }
        assert_eq!(snaps[0], snaps[1], "the order of readings must not matter");
        let db = snaps[0].group("db").unwrap();
        let (s1, s2) = (db.shard("s1").unwrap(), db.shard("s2").unwrap());
        assert_eq!((s1.utilisation, s1.inflight), (Some(0.9), Some(12.0)));
        assert_eq!((s2.utilisation, s2.inflight), (None, None));
        // Readings are not requests: both shards carry the same load.
        assert_eq!((s1.requests, s2.requests), (3, 3));
        assert_eq!(s1.share, s2.share);
    }

    #[test]
    fn readings_reset_with_the_window_and_a_batch_applies_them() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut b = Batch::with_capacity(2);
        b.push(&obs("db", "s1"));
        b.push_reading(&reading("db", "s1", ReadingKind::Utilisation, 0.7));
        w.record_batch(&b);
        let first = w.close(10.0);
        let s1 = first.group("db").unwrap().shard("s1").unwrap();
        assert_eq!((s1.requests, s1.utilisation), (1, Some(0.7)));
        w.record(&obs("db", "s1"));
        let second = w.close(20.0);
        assert_eq!(
            second.group("db").unwrap().shard("s1").unwrap().utilisation,
            None
        );
    }

    #[test]
    fn a_shard_that_only_reports_readings_stays_known_and_expires_when_it_stops() {
        let cfg = WindowConfig {
            shard_idle_windows: 2,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        let mut t = 0.0;
        for _ in 0..5 {
            w.record(&obs("db", "busy"));
            w.read(&reading("db", "quiet", ReadingKind::Inflight, 4.0));
            t += 10.0;
            let snap = w.close(t);
            let quiet = snap.group("db").unwrap().shard("quiet");
            assert_eq!(
                quiet.map(|s| (s.requests, s.inflight)),
                Some((0, Some(4.0)))
            );
        }
        let mut seen = Vec::new();
        for _ in 0..4 {
            w.record(&obs("db", "busy"));
            t += 10.0;
            seen.push(w.close(t).group("db").unwrap().shard("quiet").is_some());
        }
        assert_eq!(seen, [true, true, false, false]);
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
        assert_eq!(g.traffic.errors, 1);
        assert_eq!(g.shards[0].shard, "a");
        assert!((g.shards[0].share - 0.75).abs() < 1e-12);
        assert!((g.traffic.requests_per_second - 0.4).abs() < 1e-12);
        assert_eq!(g.shards[1].traffic.cache_hit_ratio, Some(0.0));
        let p99 = g.shards[1].traffic.latency.as_ref().unwrap().p99_ms;
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
        assert!(g.shards[0].overflow);
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
    fn folded_records_are_counted_by_level() {
        let cfg = WindowConfig {
            max_groups: 1,
            max_shards_per_group: 2,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for s in ["a", "b", "c", "d", "c"] {
            w.record(&obs("g", s));
        }
        let mut y = obs("y", "s");
        y.count = 7;
        w.record(&y);
        let snap = w.close(10.0);
        assert_eq!(snap.group("g").unwrap().folded_records, 3);
        let other = snap.overflow_group().unwrap();
        assert_eq!((other.requests, other.folded_records), (7, 7));
        // The overflow group keeps everything in one slot, whatever the shard names.
        assert_eq!(other.shards.len(), 1);
        assert!(other.shards[0].overflow);
        assert_eq!(
            snap.group("g").unwrap().overflow_shard().unwrap().requests,
            3
        );
    }

    #[test]
    fn a_shard_really_named_other_is_not_the_overflow() {
        let cfg = WindowConfig {
            max_shards_per_group: 1,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for s in [OTHER_LABEL, "b", "c"] {
            w.record(&obs("g", s));
        }
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        let named = g.shard(OTHER_LABEL).unwrap();
        assert!(!named.overflow && named.requests == 1);
        assert_eq!(g.overflow_shard().unwrap().requests, 2);
        assert_eq!(g.skew.as_ref().unwrap().shards, 1);
    }

    #[test]
    fn junk_groups_cannot_crowd_out_a_pinned_group() {
        let cfg = WindowConfig {
            max_groups: 4,
            pinned_groups: vec!["real".into()],
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for i in 0..64 {
            w.record(&obs(&format!("junk-{i}"), "s"));
        }
        w.record(&obs("real", "s"));
        let snap = w.close(10.0);
        assert_eq!(snap.group("real").unwrap().requests, 1);
        assert_eq!(snap.overflow_group().unwrap().folded_records, 60);
    }

    #[test]
    fn an_idle_group_gives_its_slot_to_a_new_one_least_recently_active_first() {
        let cfg = WindowConfig {
            max_groups: 2,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        w.record(&obs("old", "s"));
        w.record(&obs("older", "s"));
        w.close(10.0);
        w.record(&obs("old", "s"));
        w.close(20.0);
        // Both are idle now; "older" was active less recently and goes first.
        w.record(&obs("new", "s"));
        let snap = w.close(30.0);
        assert!(snap.group("older").is_none(), "{snap:?}");
        assert!(snap.group("old").is_some());
        assert_eq!(snap.group("new").unwrap().requests, 1);
        assert!(snap.overflow_group().is_none());
    }

    #[test]
    fn the_total_shard_budget_holds_and_idle_shards_of_other_groups_make_room() {
        let cfg = WindowConfig {
            max_shards_total: 4,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for s in ["a", "b", "c"] {
            w.record(&obs("junk", s));
        }
        w.record(&obs("real", "x"));
        w.close(10.0);
        assert_eq!(w.shard_count(), 4);
        // The junk stops. While it was active in the last window its slots are not taken:
        // a shard that merely has not spoken yet in this window is not idle.
        w.record(&obs("real", "x"));
        w.record(&obs("real", "early"));
        let snap = w.close(20.0);
        assert_eq!(snap.group("real").unwrap().folded_records, 1);
        // A whole window later the junk is idle: the real group grows into its slots.
        for s in ["y", "z", "v"] {
            w.record(&obs("real", s));
            w.record(&obs("real", "x"));
        }
        // Budget full, nothing idle left: the next new shard folds.
        w.record(&obs("real", "u"));
        let snap = w.close(30.0);
        let real = snap.group("real").unwrap();
        let names: Vec<_> = real.tracked_shards().map(|s| s.shard.as_str()).collect();
        assert_eq!(names, ["v", "x", "y", "z"]);
        assert_eq!(real.folded_records, 1);
        assert!(w.shard_count() <= 4);
        assert!(
            snap.group("junk")
                .is_none_or(|g| g.tracked_shards().count() == 0)
        );
    }

    #[test]
    fn counts_saturate_instead_of_wrapping() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut o = obs("g", "s");
        o.count = crate::observation::MAX_COUNT;
        o.cache = Some(CacheResult::Hit);
        for _ in 0..(1u64 << 25) / 1024 {
            for _ in 0..1024 {
                w.record(&o);
            }
        }
        let snap = w.close(10.0);
        assert_eq!(snap.groups[0].requests, u64::MAX);
        assert_eq!(snap.groups[0].traffic.cache_hits, u64::MAX);
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
        let p99 = g.traffic.latency.as_ref().unwrap().p99_ms;
        // 1% of requests are slow: the merged p99 sits at the boundary, far below the mean of
        // per-shard p99s (about 21 ms) and far below the slow shard's 2 s.
        assert!(p99 <= 2000.0 * 1.01);
        let slow = g.shards.iter().find(|s| s.shard == "s0").unwrap();
        assert!((slow.traffic.latency.as_ref().unwrap().p99_ms - 2000.0).abs() < 20.0);
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

    /// Single-request latencies wait in a buffer and reach the histogram 64 at a time, or at
    /// close: what a window reports must be exactly what recording each one straight into a
    /// histogram gives, over several windows and with multi-request records in between.
    #[test]
    fn pending_latencies_report_exactly_what_direct_recording_does() {
        let cfg = WindowConfig::default();
        let mut w = Windows::new(cfg.clone(), 0.0);
        let mut rng = crate::prng::SplitMix64::new(17);
        let new = || new_histogram(cfg.latency_sigfig);
        for window in 1..=3 {
            let (mut ok, mut err, mut miss, mut timeout) = (new(), new(), new(), new());
            let mut sum_us = 0u64;
            // Not a multiple of 64, so some latencies are still pending at close.
            for i in 0..(1_000 + window * 37) {
                let r = rng.next_u64();
                let mut o = obs("g", "s");
                // Microseconds to an hour and past it (clamped), most near a few ms.
                let ms = match r % 7 {
                    0 => (r >> 8) as f64 % 4_000_000.0,
                    _ => (r >> 8) as f64 % 50.0 + 0.001,
                };
                o.latency_ms = Some(ms);
                o.count = if r.is_multiple_of(11) {
                    1 + (r >> 40) % 5
                } else {
                    1
                };
                o.outcome = match r % 13 {
                    0 => Outcome::Timeout,
                    1 => Outcome::Error,
                    _ => Outcome::Ok,
                };
                o.cache = (i % 3 == 0).then_some(CacheResult::Miss);
                w.record(&o);
                let us = latency_us(ms);
                let n = o.count as u32;
                if o.outcome.is_error() {
                    err.saturating_record_n(us, n);
                } else {
                    ok.saturating_record_n(us, n);
                }
                if o.cache.is_some() {
                    miss.saturating_record_n(us, n);
                }
                if o.outcome == Outcome::Timeout {
                    timeout.saturating_record_n(us, n);
                }
                sum_us += us * o.count;
            }
            let snap = w.close(10.0 * window as f64);
            let g = &snap.groups[0];
            let s = &g.shards[0];
            assert_eq!(
                s.traffic.ok_latency,
                latency_summary(&ok),
                "window {window}"
            );
            assert_eq!(s.error_latency, latency_summary(&err), "window {window}");
            assert_eq!(g.miss_latency, latency_summary(&miss), "window {window}");
            assert_eq!(
                g.timeout_latency,
                latency_summary(&timeout),
                "window {window}"
            );
            assert_eq!(s.latency_samples, ok.len() + err.len());
            assert!((s.latency_sum_secs - sum_us as f64 / 1e6).abs() < 1e-6);
            let mut all = new();
            all.add(&ok).unwrap();
            all.add(&err).unwrap();
            assert_eq!(
                s.latency_buckets,
                bucket_counts(&all, &cfg.latency_buckets_secs)
            );
        }
    }

    /// A clone carries its pending latencies, and both windows go on recording on their own.
    #[test]
    fn a_cloned_window_keeps_its_pending_latencies_apart() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let record = |w: &mut Windows, n: usize| {
            for i in 0..n {
                let mut o = obs("g", "s");
                o.latency_ms = Some(1.0 + i as f64);
                w.record(&o);
            }
        };
        record(&mut w, 10);
        let mut copy = w.clone();
        record(&mut copy, 100);
        let (a, b) = (w.close(10.0), copy.close(10.0));
        assert_eq!(a.groups[0].shards[0].latency_samples, 10);
        assert_eq!(b.groups[0].shards[0].latency_samples, 110);
        let max = |s: &WindowSnapshot| {
            s.groups[0].shards[0]
                .traffic
                .ok_latency
                .as_ref()
                .unwrap()
                .max_ms
        };
        assert!((max(&a) - 10.0).abs() < 0.1 && (max(&b) - 100.0).abs() < 1.0);
    }

    proptest::proptest! {
        /// The name map answers as a `HashMap` does through any run of inserts (new names and
        /// new slots for known ones), removals and clears, names of every length the inline
        /// compare treats differently included.
        #[test]
        fn name_map_agrees_with_a_hash_map(
            ops in proptest::collection::vec((0u8..4, 0usize..40, 0u32..1000), 0..400),
        ) {
            let names: Vec<String> = (0..40)
                .map(|i| "shard-".chars().cycle().take(i % 20).collect::<String>() + &i.to_string())
                .collect();
            let mut map = NameMap::default();
            let mut model: std::collections::HashMap<&str, u32> = Default::default();
            for (op, n, slot) in ops {
                let name = names[n].as_str();
                match op {
                    0 | 1 => {
                        map.insert(name.into(), slot);
                        model.insert(name, slot);
                    }
                    2 => {
                        map.remove(name);
                        model.remove(name);
                    }
                    _ if slot % 50 == 0 => {
                        map.clear();
                        model.clear();
                    }
                    _ => {}
                }
                proptest::prop_assert_eq!(map.len(), model.len());
                for other in &names {
                    proptest::prop_assert_eq!(map.get(other), model.get(other.as_str()));
                }
            }
        }

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

        /// The conversion through i64 agrees with the unsigned cast it replaced on any input,
        /// valid or not.
        #[test]
        fn latency_us_agrees_with_the_unsigned_cast(
            any in proptest::num::f64::ANY,
            valid in 0.0f64..=crate::observation::MAX_LATENCY_MS,
            whole_us in 0u64..=4_000_000_000,
        ) {
            for ms in [any, valid, whole_us as f64 / 1000.0] {
                let unsigned = ((ms * 1000.0 + 0.5) as u64).min(LATENCY_HIGH_US);
                proptest::prop_assert_eq!(latency_us(ms), unsigned, "{} ms", ms);
            }
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
