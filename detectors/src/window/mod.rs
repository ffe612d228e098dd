//! Per-shard windows: the second stage of the flow (`Observation -> Window -> SkewStats`).
//!
//! [`Windows`] accumulates observations for the current window of every group and shard:
//! request counts by outcome class, cache hits and misses, HDR-style latency histograms (the
//! project's own [`LogHistogram`]; success and error latency kept apart, because fast errors
//! pull latency down), and heavy-hitter key summaries for the group and for each shard.
//! [`Windows::close`] turns the window into an immutable
//! [`WindowSnapshot`](crate::snapshot::WindowSnapshot) and starts the next one, keeping
//! allocations.
//!
//! Recording (admitting groups and shards under the caps, charging observations and readings)
//! is in `record.rs`; the close (expiry, the snapshot of one or several parts, the next
//! window) in `close.rs`. This file holds the state both work on.
//!
//! Bounds: at most `max_groups` groups and `max_shards_per_group` shards per group; what is over
//! the cap folds into the group or shard named `__other__`, so totals stay correct. A shard that
//! gets no traffic stays known (as a zero-load shard, which is what skew statistics must see)
//! for `shard_idle_windows` windows, then is forgotten.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use serde::Serialize;

use crate::histogram::LogHistogram;
use crate::keys::{KeySummary, same_key};
use crate::observation::{OTHER_LABEL, Outcome, ReadingKind};

mod close;
mod record;
#[cfg(test)]
mod tests;

pub(crate) use close::close_parts;

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

    /// The slot of `name`, as [`Self::get`], for the one lookup made per observation (the
    /// shard's, in [`Windows::record`]) and for no other caller. The probe's closure is this
    /// method's own, so hashbrown's `find` is instantiated for this call site alone and the
    /// compiler inlines it there whatever else the crate calls `get` from: shared with
    /// `get`'s callers, it was left out of line once the crate grew (+17 instructions an
    /// observation, `scripts/instructions.sh record_no_key`; docs/performance.md).
    #[inline(always)]
    pub(crate) fn get_hot(&self, name: &str) -> Option<u32> {
        self.table
            .find(Self::hash(name), |entry| {
                same_key(entry.0.as_bytes(), name.as_bytes())
            })
            .map(|entry| entry.1)
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
}
