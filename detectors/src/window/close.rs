//! Closing: expiring idle shards, turning the open window of one or several parts into a
//! [`WindowSnapshot`], and starting the next window.

use super::{GroupWindow, Latency, Role, ShardWindow, WindowConfig, Windows, new_histogram};
use crate::histogram::LogHistogram;
use crate::keys::KeySummary;
use crate::observation::{OTHER_LABEL, Outcome};
use crate::snapshot::{
    GroupSnapshot, KeyShare, LatencySummary, ShardSnapshot, Traffic, WindowSnapshot, ratio,
};
use crate::stats::SkewStats;

impl Windows {
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
    pub(super) fn forget_empty_groups(&mut self) {
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
    WindowSnapshot {
        start,
        end,
        groups,
        whatif: None,
        whatif_policies: None,
    }
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

pub(super) fn latency_summary(h: &LogHistogram) -> Option<LatencySummary> {
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
pub(super) fn bucket_counts(merged: &LogHistogram, bounds_secs: &[f64]) -> Vec<u64> {
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
