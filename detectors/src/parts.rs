//! Recording spread over threads: the windows partitioned by shard.
//!
//! One thread records between 1.5 and 1.8 million keyed observations a second over a thousand
//! shards (`docs/performance.md`): the windows of that many shards, with their histograms and
//! key summaries, outgrow the caches, and most of the time goes to waiting on memory. With
//! [`WindowConfig::record_threads`] above 1, [`Recording`] splits the shards into that many
//! parts by a fixed hash of group and shard name. Each part is a [`Windows`] of its own; the
//! calling thread records part 0 and deals the records of the others, in batches, to one
//! thread each. At close the parts are merged into one snapshot (`window::close_parts`).
//!
//! What stays true:
//! - **One owner of the state.** Detectors and alerts stay with the caller; the recording
//!   threads only ever see their part's windows, and the caller reads them only after every
//!   thread has recorded all it was dealt.
//! - **Determinism.** Each part receives its records in the caller's order, whatever the
//!   scheduling, and the merge is a pure function of the parts: `replay` gives the same output
//!   on every run for a given number of threads.
//! - **One thread is today's path.** With `record_threads = 1` nothing is dealt and no thread
//!   is started.
//! - **The caps.** The group cap is decided by the caller, which sees every record, by the same
//!   rule as [`Windows`]: a group is admitted, takes the slot of the least recently active
//!   idle group, or is folded into `__other__` in every part alike. The shard caps are divided
//!   between the parts, adding up to the cap, so no more shards are tracked than with one
//!   thread; as the hash spreads shards evenly, a part reaches its share of a cap about when
//!   one set of windows would reach the whole cap.
//! - **Merged figures.** A group's shards are disjoint between parts; its counts and latency
//!   histograms add exactly; its key summary is the merge of its parts' summaries, whose
//!   error bounds hold for the whole stream (exact while the group has fewer distinct keys than
//!   `limits.group_key_slots`).

use std::hash::BuildHasher;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::keys::same_key;
use crate::observation::{Batch, KeyCountRef, ObservationRef, ReadingRef};
use crate::snapshot::WindowSnapshot;
use crate::window::{self, FixedState, NameMap, WindowConfig, Windows};

/// Most recording threads: past the cores a sidecar is given, more parts only add merging.
pub const MAX_RECORD_THREADS: usize = 16;

/// Records dealt to a part before they are handed to its thread.
const DEAL_BATCH: usize = 1024;

/// Dealt batches waiting for each recording thread. With [`DEAL_BATCH`] records each, this
/// bounds the memory in flight; when it is full the caller waits.
const QUEUE_BATCHES: usize = 4;

/// The current window of every group, recorded by one thread or spread over several.
// The one-thread variant is the common case and on the per-record path: kept inline, not
// behind a pointer; there is one `Recording` per engine.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Recording {
    /// Everything on the caller's thread.
    One(Windows),
    /// Partitioned by shard over several threads.
    Parts(Box<PartedWindows>),
}

impl Recording {
    /// Empty windows starting at `start`, on `cfg.record_threads` threads.
    pub fn new(cfg: WindowConfig, start: f64) -> Self {
        match cfg.record_threads {
            0 | 1 => Recording::One(Windows::new(cfg, start)),
            _ => Recording::Parts(Box::new(PartedWindows::new(cfg, start))),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &WindowConfig {
        match self {
            Recording::One(w) => w.config(),
            Recording::Parts(p) => &p.cfg,
        }
    }

    /// Start of the current window, unix seconds.
    pub fn start(&self) -> f64 {
        match self {
            Recording::One(w) => w.start(),
            Recording::Parts(p) => p.local.start(),
        }
    }

    /// Starts the current window at `start` instead, as [`Windows::set_start`] does.
    pub fn set_start(&mut self, start: f64) {
        match self {
            Recording::One(w) => w.set_start(start),
            Recording::Parts(p) => p.set_start(start),
        }
    }

    /// Adds one validated observation to the current window.
    #[inline]
    pub fn record(&mut self, obs: &ObservationRef<'_>) {
        match self {
            Recording::One(w) => w.record(obs),
            Recording::Parts(p) => p.record(obs),
        }
    }

    /// Adds one validated saturation reading to the current window.
    pub fn read(&mut self, reading: &ReadingRef<'_>) {
        match self {
            Recording::One(w) => w.read(reading),
            Recording::Parts(p) => p.read(reading),
        }
    }

    /// Adds every observation and reading of `batch`.
    pub fn record_batch(&mut self, batch: &Batch) {
        match self {
            Recording::One(w) => w.record_batch(batch),
            Recording::Parts(p) => {
                for obs in batch.iter() {
                    p.record(&obs);
                }
                for reading in batch.readings() {
                    p.read(&reading);
                }
                for kc in batch.key_counts() {
                    p.count_key(&kc);
                }
            }
        }
    }

    /// Waits until every record dealt so far is recorded by its thread. [`Self::close`] does
    /// this itself; a benchmark calls it to time recording alone.
    pub fn flush(&mut self) {
        if let Recording::Parts(p) = self {
            p.with_parts(|_| ());
        }
    }

    /// Ends the current window at `end`, returns what it saw, and starts the next one.
    pub fn close(&mut self, end: f64) -> WindowSnapshot {
        match self {
            Recording::One(w) => w.close(end),
            Recording::Parts(p) => p.close(end),
        }
    }
}

/// A group as the dealer knows it: for the group cap, decided in one place.
#[derive(Debug)]
struct DealtGroup {
    name: Box<str>,
    pinned: bool,
    /// The last window (by sequence number) with a record.
    last_active: u64,
}

/// Where a group's records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Tracked by name, in slot `.0` of the dealer's table.
    Tracked(usize),
    /// Folded into `__other__`.
    Folded,
}

/// The records dealt to one part and not yet handed to its thread.
#[derive(Debug, Default)]
struct Dealt {
    /// Records of tracked groups.
    tracked: Batch,
    /// Records of groups folded into `__other__`.
    folded: Batch,
}

impl Dealt {
    fn len(&self) -> usize {
        self.tracked.len() + self.folded.len()
    }

    /// The batch for records of a group admitted as `a`.
    fn batch(&mut self, a: Admission) -> &mut Batch {
        match a {
            Admission::Tracked(_) => &mut self.tracked,
            Admission::Folded => &mut self.folded,
        }
    }
}

/// What the caller sends a recording thread.
enum Message {
    /// Record these. Boxed: two batches are much larger than the other messages, and the box
    /// travels back with them ([`Reply::Spare`]), so dealing allocates nothing.
    Record(Box<Dealt>),
    /// Forget a group evicted under the group cap.
    Forget(Box<str>),
    /// Say so once everything sent before is recorded.
    Sync,
}

/// What a recording thread sends back.
enum Reply {
    /// A recorded batch, emptied, to deal into again.
    Spare(Box<Dealt>),
    /// Everything sent before the `Sync` is recorded.
    Synced,
}

/// One recording thread and its part.
#[derive(Debug)]
struct Worker {
    windows: Arc<Mutex<Windows>>,
    to: SyncSender<Message>,
    from: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
    /// Records dealt and not yet sent.
    dealt: Box<Dealt>,
    /// Emptied batches returned by the thread.
    #[expect(
        clippy::vec_box,
        reason = "the boxes travel to the thread and back, so dealing allocates nothing"
    )]
    spare: Vec<Box<Dealt>>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Record(_) => "Record",
            Message::Forget(_) => "Forget",
            Message::Sync => "Sync",
        })
    }
}

impl Worker {
    fn start(cfg: WindowConfig, start: f64, part: usize) -> Self {
        let windows = Arc::new(Mutex::new(Windows::new(cfg, start)));
        let (to, inbox) = mpsc::sync_channel::<Message>(QUEUE_BATCHES);
        let (reply, from) = mpsc::channel::<Reply>();
        let mine = Arc::clone(&windows);
        let thread = std::thread::Builder::new()
            .name(format!("skewwatch-record-{part}"))
            .spawn(move || record_loop(&mine, &inbox, &reply))
            .expect("the system refused a recording thread");
        Worker {
            windows,
            to,
            from,
            thread: Some(thread),
            dealt: Box::default(),
            spare: Vec::new(),
        }
    }

    fn send(&self, message: Message) {
        self.to
            .send(message)
            .expect("a recording thread stopped: it panicked, see the log above");
    }

    /// Hands the dealt records to the thread, keeping an emptied batch to deal into.
    fn flush(&mut self) {
        if self.dealt.len() == 0 {
            return;
        }
        while let Ok(reply) = self.from.try_recv() {
            if let Reply::Spare(d) = reply {
                self.spare.push(d);
            }
        }
        let next = self.spare.pop().unwrap_or_default();
        let full = std::mem::replace(&mut self.dealt, next);
        self.send(Message::Record(full));
    }

    /// Waits until the thread has recorded everything sent to it.
    fn sync(&mut self) {
        self.send(Message::Sync);
        loop {
            match self.from.recv() {
                Ok(Reply::Synced) => return,
                Ok(Reply::Spare(d)) => self.spare.push(d),
                Err(_) => panic!("a recording thread stopped: it panicked, see the log above"),
            }
        }
    }

    /// Hands the dealt records to the thread once there are [`DEAL_BATCH`] of them.
    fn flush_if_full(&mut self) {
        if self.dealt.len() >= DEAL_BATCH {
            self.flush();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Windows> {
        lock(&self.windows)
    }
}

/// A part's windows, locked. A thread that panicked while recording is reported by
/// [`Worker::send`]; its windows are still whole between records.
fn lock(windows: &Mutex<Windows>) -> MutexGuard<'_, Windows> {
    windows.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the channel ends the loop.
        let (to, _) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.to, to));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A recording thread: records what it is dealt into its part, until the channel closes.
fn record_loop(windows: &Mutex<Windows>, inbox: &Receiver<Message>, reply: &mpsc::Sender<Reply>) {
    while let Ok(message) = inbox.recv() {
        match message {
            Message::Record(mut dealt) => {
                {
                    let mut w = lock(windows);
                    w.record_batch(&dealt.tracked);
                    w.record_batch_folded(&dealt.folded);
                }
                dealt.tracked.clear();
                dealt.folded.clear();
                let _ = reply.send(Reply::Spare(dealt));
            }
            Message::Forget(group) => lock(windows).forget_group(&group),
            Message::Sync => {
                let _ = reply.send(Reply::Synced);
            }
        }
    }
}

/// The windows partitioned by shard: part 0 on the caller's thread, the others on threads of
/// their own.
#[derive(Debug)]
pub struct PartedWindows {
    /// The whole configuration; each part has its share of the shard caps.
    cfg: WindowConfig,
    local: Windows,
    workers: Vec<Worker>,
    /// Groups tracked by name, in admission order; `index` maps names to slots.
    groups: Vec<DealtGroup>,
    index: NameMap,
    /// The last group dealt and where it went: most batches carry one group.
    last_group: Option<(Box<str>, Admission)>,
    /// Sequence number of the current window.
    seq: u64,
}

/// Part `i`'s configuration: the shard caps divided between `parts` (the first parts take
/// one more where a cap does not divide evenly, so the parts' caps add up to the cap); no
/// group cap, as the dealer keeps it.
fn part_config(cfg: &WindowConfig, parts: usize, i: usize) -> WindowConfig {
    let share = |cap: usize| cap / parts + usize::from(i < cap % parts);
    WindowConfig {
        max_groups: usize::MAX,
        max_shards_per_group: share(cfg.max_shards_per_group),
        max_shards_total: share(cfg.max_shards_total),
        ..cfg.clone()
    }
}

impl PartedWindows {
    /// Empty windows over `cfg.record_threads` parts (at least 2, at most
    /// [`MAX_RECORD_THREADS`]).
    pub fn new(cfg: WindowConfig, start: f64) -> Self {
        let parts = cfg.record_threads.clamp(2, MAX_RECORD_THREADS);
        PartedWindows {
            local: Windows::new(part_config(&cfg, parts, 0), start),
            workers: (1..parts)
                .map(|i| Worker::start(part_config(&cfg, parts, i), start, i))
                .collect(),
            cfg,
            groups: Vec::new(),
            index: NameMap::default(),
            last_group: None,
            seq: 0,
        }
    }

    fn parts(&self) -> usize {
        self.workers.len() + 1
    }

    /// The part that owns `shard` of `group`: a fixed hash, so a shard always goes to the same
    /// part, in the live agent and in replay alike.
    #[inline]
    fn part_of(&self, group: &str, shard: &str) -> usize {
        let h = FixedState.hash_one((group, shard));
        // The high half, scaled to the number of parts (no division).
        (((h >> 32) * self.parts() as u64) >> 32) as usize
    }

    /// Where `group`'s records go, admitting it if it is new.
    #[inline]
    fn admission(&mut self, group: &str) -> Admission {
        // An inline word compare, not a `memcmp` call, as in [`Windows`].
        if let Some((name, a)) = &self.last_group
            && same_key(name.as_bytes(), group.as_bytes())
        {
            return *a;
        }
        let a = match self.index.get(group) {
            Some(&i) => Admission::Tracked(i as usize),
            None => self.admit(group),
        };
        self.last_group = Some((group.into(), a));
        a
    }

    /// A group seen for the first time: [`Windows`]' rule. Tracked while under the cap
    /// (pinned groups always); else it takes the slot of the least recently active group idle
    /// in this window, which every part forgets; else folded.
    fn admit(&mut self, group: &str) -> Admission {
        let pinned = self.cfg.pinned_groups.iter().any(|p| p == group);
        let unpinned = self.groups.iter().filter(|g| !g.pinned).count();
        let fresh = DealtGroup {
            name: group.into(),
            pinned,
            last_active: self.seq,
        };
        if pinned || unpinned < self.cfg.max_groups {
            self.groups.push(fresh);
            let i = self.groups.len() - 1;
            self.index.insert(group.into(), i as u32);
            return Admission::Tracked(i);
        }
        let evict = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.pinned && g.last_active < self.seq)
            .min_by_key(|(_, g)| g.last_active)
            .map(|(i, _)| i);
        let Some(i) = evict else {
            return Admission::Folded;
        };
        let old = std::mem::replace(&mut self.groups[i], fresh);
        self.index.remove(&old.name);
        self.index.insert(group.into(), i as u32);
        // Every part forgets the old group before it records anything dealt after this.
        self.local.forget_group(&old.name);
        for w in &mut self.workers {
            w.flush();
            w.send(Message::Forget(old.name.clone()));
        }
        Admission::Tracked(i)
    }

    /// Where a record of `shard` in `group` goes: its part, and how its group is admitted.
    /// A tracked group is marked active in this window.
    #[inline]
    fn route(&mut self, group: &str, shard: &str) -> (usize, Admission) {
        let a = self.admission(group);
        if let Admission::Tracked(i) = a {
            self.groups[i].last_active = self.seq;
        }
        (self.part_of(group, shard), a)
    }

    /// Deals one validated observation to its part.
    #[inline]
    pub fn record(&mut self, obs: &ObservationRef<'_>) {
        match self.route(obs.group, obs.shard) {
            (0, Admission::Tracked(_)) => self.local.record(obs),
            (0, Admission::Folded) => self.local.record_folded(obs),
            (part, a) => {
                let w = &mut self.workers[part - 1];
                w.dealt.batch(a).push(obs);
                w.flush_if_full();
            }
        }
    }

    /// Records key counts in part 0: a group's key summaries merge at close, so where they
    /// are learned does not matter; a group over the cap keeps no keys.
    pub fn count_key(&mut self, kc: &KeyCountRef<'_>) {
        if let (_, Admission::Tracked(_)) = self.route(kc.group, kc.group) {
            self.local.count_key(kc);
        }
    }

    /// Deals one validated saturation reading to its part.
    pub fn read(&mut self, reading: &ReadingRef<'_>) {
        match self.route(reading.group, reading.shard) {
            (0, Admission::Tracked(_)) => self.local.read(reading),
            (0, Admission::Folded) => self.local.read_folded(reading),
            (part, a) => {
                let w = &mut self.workers[part - 1];
                w.dealt.batch(a).push_reading(reading);
                w.flush_if_full();
            }
        }
    }

    /// Hands every dealt record to its thread and waits until all are recorded, then runs `f`
    /// over every part, part 0 first.
    fn with_parts<T>(&mut self, f: impl FnOnce(&mut [&mut Windows]) -> T) -> T {
        for w in &mut self.workers {
            w.flush();
        }
        for w in &mut self.workers {
            w.sync();
        }
        let mut guards: Vec<MutexGuard<'_, Windows>> =
            self.workers.iter().map(Worker::lock).collect();
        let mut parts: Vec<&mut Windows> = std::iter::once(&mut self.local)
            .chain(guards.iter_mut().map(|g| &mut **g))
            .collect();
        f(&mut parts)
    }

    /// Ends the current window at `end` and returns one snapshot of every part.
    pub fn close(&mut self, end: f64) -> WindowSnapshot {
        let snap = self.with_parts(|parts| window::close_parts(parts, end));
        // Groups whose shards all expired in every part are forgotten, as by [`Windows`].
        let local = &self.local;
        let workers = &self.workers;
        let tracked =
            |name: &str| local.has_group(name) || workers.iter().any(|w| w.lock().has_group(name));
        let before = self.groups.len();
        self.groups.retain(|g| tracked(&g.name));
        if self.groups.len() != before {
            self.index.clear();
            for (i, g) in self.groups.iter().enumerate() {
                self.index.insert(g.name.clone(), i as u32);
            }
        }
        self.last_group = None;
        self.seq += 1;
        snap
    }

    fn set_start(&mut self, start: f64) {
        self.with_parts(|parts| {
            for p in parts {
                p.set_start(start);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::{CacheResult, Outcome, ReadingKind};
    use crate::prng::SplitMix64;
    use crate::snapshot::GroupSnapshot;

    /// A mixed stream: `groups` groups of `shards` shards, a hot shard and a hot key, every
    /// outcome, cache results, latencies, weighted records and readings; `keys` distinct keys.
    fn stream(rng: &mut SplitMix64, n: usize, groups: usize, shards: usize, keys: usize) -> Batch {
        let mut b = Batch::with_capacity(n);
        let names: Vec<String> = (0..shards.max(groups)).map(|i| format!("n{i}")).collect();
        let key_names: Vec<String> = (0..keys).map(|i| format!("key-{i}")).collect();
        for i in 0..n {
            let g = &names[rng.below(groups)];
            let s = if rng.below(4) == 0 {
                &names[0]
            } else {
                &names[rng.below(shards)]
            };
            let mut o = ObservationRef::new(g, s);
            o.key = match rng.below(5) {
                0 => None,
                1 => Some(""),
                _ => Some(&key_names[rng.below(keys)]),
            };
            o.outcome = [Outcome::Ok, Outcome::Ok, Outcome::Error, Outcome::Timeout][rng.below(4)];
            o.cache = [None, Some(CacheResult::Hit), Some(CacheResult::Miss)][rng.below(3)];
            o.latency_ms = (rng.below(8) != 0).then(|| rng.next_f64() * 200.0);
            o.count = if rng.below(50) == 0 { 7 } else { 1 };
            b.push(&o);
            if i % 97 == 0 {
                b.push_reading(&ReadingRef {
                    ts: None,
                    group: g,
                    shard: s,
                    kind: ReadingKind::Inflight,
                    value: rng.next_f64() * 100.0,
                });
            }
        }
        b
    }

    /// Feeds the same windows of records to one recorder per thread count and returns the
    /// snapshots of each, window by window. Each window feeds one batch, then each record of
    /// a second batch on its own, as replay does. Some windows are empty, so shards expire.
    fn run(
        cfg: &WindowConfig,
        threads: &[usize],
        windows: &[Option<(Batch, Batch)>],
    ) -> Vec<Vec<WindowSnapshot>> {
        threads
            .iter()
            .map(|&t| {
                let mut r = Recording::new(
                    WindowConfig {
                        record_threads: t,
                        ..cfg.clone()
                    },
                    0.0,
                );
                windows
                    .iter()
                    .enumerate()
                    .map(|(i, w)| {
                        if let Some((batch, single)) = w {
                            r.record_batch(batch);
                            for o in single.iter() {
                                r.record(&o);
                            }
                            for rd in single.readings() {
                                r.read(&rd);
                            }
                        }
                        r.close((i + 1) as f64 * 10.0)
                    })
                    .collect()
            })
            .collect()
    }

    /// Every recorder's snapshots after the first equal the first's (one thread), window by
    /// window.
    fn assert_like_one_thread(out: &[Vec<WindowSnapshot>]) {
        for (t, snaps) in out.iter().enumerate().skip(1) {
            for (i, (one, parted)) in out[0].iter().zip(snaps).enumerate() {
                assert_eq!(one, parted, "{} threads, window {i}", t + 1);
            }
        }
    }

    fn windows(
        seed: u64,
        groups: usize,
        shards: usize,
        keys: usize,
    ) -> Vec<Option<(Batch, Batch)>> {
        let mut rng = SplitMix64::new(seed);
        (0..12)
            .map(|i| {
                (i % 5 != 3).then(|| {
                    (
                        stream(&mut rng, 6_000, groups, shards, keys),
                        stream(&mut rng, 500, groups, shards / 2 + 1, keys),
                    )
                })
            })
            .collect()
    }

    #[test]
    fn parts_give_the_snapshot_of_one_thread_while_no_cap_binds() {
        // Fewer distinct keys than a group summary's slots: the merged keys are exact too.
        let cfg = WindowConfig::default();
        let w = windows(7, 5, 40, 300);
        let out = run(&cfg, &[1, 2, 3, 4], &w);
        assert!(
            out[0]
                .iter()
                .any(|s| s.groups.len() == 5 && s.groups[0].shards.len() > 30)
        );
        assert_like_one_thread(&out);
    }

    #[test]
    fn parts_hold_the_group_cap_as_one_thread_does() {
        // Nine groups for a cap of four, one pinned: admission, eviction of idle groups and
        // folding are decided in one place, so the snapshots agree.
        let cfg = WindowConfig {
            max_groups: 4,
            pinned_groups: vec!["n8".into()],
            ..WindowConfig::default()
        };
        let mut w = windows(11, 9, 20, 100);
        // A window with only the last groups, so earlier ones go idle and are evicted.
        let mut rng = SplitMix64::new(3);
        let mut late = Batch::with_capacity(100);
        for o in stream(&mut rng, 3_000, 9, 20, 100).iter() {
            if o.group >= "n5" {
                late.push(&o);
            }
        }
        w.insert(4, Some((late, Batch::default())));
        let out = run(&cfg, &[1, 2, 3], &w);
        let folded = |s: &WindowSnapshot| s.groups.iter().any(|g| g.overflow);
        assert!(out[0].iter().any(folded), "the cap never bound");
        assert_like_one_thread(&out);
    }

    #[test]
    fn the_parts_shares_of_a_cap_add_up_to_it() {
        for cap in [1, 2, 5, 1023, 1024, 1025] {
            for parts in 2..=MAX_RECORD_THREADS {
                let cfg = WindowConfig {
                    max_shards_per_group: cap,
                    max_shards_total: cap + 1,
                    ..WindowConfig::default()
                };
                let shares: Vec<WindowConfig> =
                    (0..parts).map(|i| part_config(&cfg, parts, i)).collect();
                let sum = |f: fn(&WindowConfig) -> usize| shares.iter().map(f).sum::<usize>();
                assert_eq!(sum(|c| c.max_shards_per_group), cap);
                assert_eq!(sum(|c| c.max_shards_total), cap + 1);
            }
        }
    }

    fn totals(s: &WindowSnapshot) -> (u64, u64, u64) {
        s.groups
            .iter()
            .fold((0, 0, 0), |(r, e, h), g: &GroupSnapshot| {
                (
                    r + g.requests,
                    e + g.traffic.errors,
                    h + g.traffic.cache_hits,
                )
            })
    }

    #[test]
    fn parts_keep_totals_and_the_shard_budget_when_caps_bind() {
        // 600 shards for a budget of 256 and 200 per group; 5,000 keys for 64 group slots.
        let cfg = WindowConfig {
            max_shards_total: 256,
            max_shards_per_group: 200,
            group_key_slots: 64,
            ..WindowConfig::default()
        };
        let w = windows(5, 3, 600, 5_000);
        let out = run(&cfg, &[1, 3], &w);
        for (one, parted) in out[0].iter().zip(&out[1]) {
            assert_eq!(totals(one), totals(parted));
            let tracked = |s: &WindowSnapshot| {
                s.groups
                    .iter()
                    .flat_map(|g| &g.shards)
                    .filter(|s| !s.overflow)
                    .count()
            };
            // The parts' shares of the budget add up to it.
            assert!(tracked(parted) <= 256, "{}", tracked(parted));
            for (a, b) in one.groups.iter().zip(&parted.groups) {
                assert_eq!((&a.group, a.requests), (&b.group, b.requests));
                // The merged key summary's bounds still hold: the true count of each
                // reported key lies within [count - error, count].
                assert_eq!(a.keyed_requests, b.keyed_requests);
                for k in &b.top_keys {
                    let exact: u64 = one
                        .groups
                        .iter()
                        .filter(|g| g.group == b.group)
                        .flat_map(|g| &g.top_keys)
                        .filter(|x| x.key == k.key && x.error == 0)
                        .map(|x| x.requests)
                        .sum();
                    if exact > 0 {
                        assert!(k.requests >= exact && k.requests - k.error <= exact);
                    }
                }
            }
        }
        assert!(
            out[1]
                .iter()
                .any(|s| s.groups.iter().any(|g| g.folded_records > 0))
        );
    }
}
