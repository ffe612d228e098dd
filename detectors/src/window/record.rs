//! Recording: admitting groups and shards under the caps and charging observations and
//! readings to the open window.

use super::{GroupWindow, WindowConfig, Windows};
use crate::keys::{KeyHash, KeySummary, same_key};
use crate::observation::{
    Batch, CacheResult, KeyCountRef, OTHER_LABEL, ObservationRef, Outcome, ReadingRef,
};

impl Windows {
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

    /// Adds one observation to the current window. The caller has validated it.
    ///
    /// The shard is looked up through `NameMap::get_hot`, inlined here. A shard its group
    /// does not hold yet is admitted out of line (`record_new_shard`), so the path of a known
    /// shard charges the slot it found with the group it already holds: no second bounds
    /// check of the group, and no value kept across the probe for after a join with the
    /// admitting path (docs/performance.md).
    pub fn record(&mut self, obs: &ObservationRef<'_>) {
        let gi = self.group_index(obs.group);
        let g = &mut self.groups[gi];
        match g.index.get_hot(obs.shard) {
            Some(si) => charge(
                g,
                si as usize,
                obs,
                &self.cfg,
                self.seq,
                &mut self.folded_groups,
            ),
            None => self.record_new_shard(gi, obs),
        }
    }

    /// [`Self::record`] for a shard its group does not hold yet: admits it, then records.
    #[inline(never)]
    fn record_new_shard(&mut self, gi: usize, obs: &ObservationRef<'_>) {
        let si = self.admit_shard(gi, obs.shard);
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
        charge(
            &mut self.groups[gi],
            si,
            obs,
            &self.cfg,
            self.seq,
            &mut self.folded_groups,
        );
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

    /// Adds every observation, reading and key count of `batch`.
    pub fn record_batch(&mut self, batch: &Batch) {
        for obs in batch.iter() {
            self.record(&obs);
        }
        for reading in batch.readings() {
            self.read(&reading);
        }
        for kc in batch.key_counts() {
            self.count_key(&kc);
        }
    }

    /// Adds requests counted by key alone to the group's key summary and keyed requests
    /// (none to any shard). The group is admitted as a request would admit it; in the overflow
    /// group, which mixes unrelated systems, they are left out.
    pub fn count_key(&mut self, kc: &KeyCountRef<'_>) {
        let gi = self.group_index(kc.group);
        let seq = self.seq;
        let g = &mut self.groups[gi];
        if g.overflow {
            return;
        }
        g.last_active = seq;
        if let Some(k) = kc.key {
            g.keys.record_hashed(k, KeyHash::of(k), kc.count);
        }
        g.keyed_requests = g.keyed_requests.saturating_add(kc.count);
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
}

/// Adds one observation to shard slot `si` of group `g`: [`Windows::record`]'s work once
/// the slots are known. It takes the fields it needs rather than `&mut Windows`, so the
/// per-observation path charges the group it found the shard in (one index, one bounds
/// check) and reads the configuration only where it uses it, keeping nothing of it on the
/// stack across the charge.
#[inline(always)]
fn charge(
    g: &mut GroupWindow,
    si: usize,
    obs: &ObservationRef<'_>,
    cfg: &WindowConfig,
    seq: u64,
    folded_groups: &mut u64,
) {
    if g.overflow {
        *folded_groups = folded_groups.saturating_add(obs.count);
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
        let sigfig = cfg.latency_sigfig;
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
                .get_or_insert_with(|| KeySummary::new(cfg.shard_key_slots))
                .record_hashed(k, hash, obs.count);
        }
        g.keys.record_hashed(k, hash, obs.count);
        g.keyed_requests = g.keyed_requests.saturating_add(obs.count);
    }
}
