//! The live view's memory: a bounded ring of per-window group summaries.
//!
//! The pipeline's evaluation hook ([`Recorder::record`]) reduces each closed window to what the
//! page at `GET /` draws — per group the skew statistics with their noise floors, the cache
//! loop figures, and per shard its share, rate, error ratio, cache hit ratio and p99 — pushes it
//! into a ring of `ui.history_windows` windows, and publishes the ring as an immutable
//! `Arc<History>` on a watch channel. `GET /api/v1/history` reads that `Arc`; it never touches
//! the pipeline, and the pipeline never waits for a reader.
//!
//! Bounds (docs/live-view.md states them in bytes):
//!
//! - at most `ui.history_windows` windows ([`MAX_WINDOWS`] at most);
//! - per window, the groups of the snapshot (at most `limits.max_groups`, the pinned groups and
//!   `__other__`), and per group its [`MAX_SHARDS`] busiest shards;
//! - shard names are shared between windows (`Arc<str>`), so a shard that stays costs its name
//!   once, not once per window.
//!
//! Keys are not kept per window: the page shows the current top keys, which the latest
//! snapshot already holds.

use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use skewwatch_detectors::engine::Evaluation;
use skewwatch_detectors::snapshot::{GroupSnapshot, ShardSnapshot, WindowSnapshot};
use skewwatch_detectors::stats::top1_noise_floor;
use tokio::sync::watch;

/// Most windows `ui.history_windows` may keep.
pub const MAX_WINDOWS: usize = super::config::MAX_HISTORY_WINDOWS;
/// Busiest shards kept per group and window; the rest are counted in
/// [`GroupPoint::shards_total`] only.
pub const MAX_SHARDS: usize = 64;

/// One shard in one window: the figures a heatmap cell and its tooltip need.
///
/// `f32` keeps a cell at 20 bytes of figures; the page shows three significant digits.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPoint {
    /// The shard's name, shared with the same shard's point in the window before.
    pub shard: Arc<str>,
    /// Share of the group's requests, in [0, 1].
    pub share: f32,
    /// Requests per second.
    pub requests_per_second: f32,
    /// Errors over requests; NaN when the shard had no requests.
    pub error_ratio: f32,
    /// Cache hits over cache lookups; NaN when the shard saw no cache result.
    pub cache_hit_ratio: f32,
    /// p99 latency of all responses, ms; NaN without latencies.
    pub p99_ms: f32,
}

/// One group in one window.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPoint {
    /// The group's name.
    pub group: Arc<str>,
    /// Requests in the window.
    pub requests: u64,
    /// Requests per second.
    pub requests_per_second: f64,
    /// 1/N over the tracked shards.
    pub fair_share: f64,
    /// Shards in the window, including those not kept in [`Self::shards`].
    pub shards_total: usize,
    /// Bias-corrected Gini; `None` without traffic.
    pub gini: Option<f64>,
    /// The Gini that Poisson noise alone gives at this window's volume.
    pub gini_noise_floor: Option<f64>,
    /// Share of the busiest shard.
    pub top1_share: Option<f64>,
    /// The largest top-1 share Poisson noise explains: the fair share times `1 + z/√λ`, with
    /// `z` the hot-shard threshold over N shards at the window's dispersion level and λ the
    /// mean count per shard; capped at 1.
    pub top1_noise_floor: Option<f64>,
    /// Errors over requests.
    pub error_ratio: Option<f64>,
    /// Cache hits over cache lookups; `None` when the group saw no cache result.
    pub cache_hit_ratio: Option<f64>,
    /// Cache misses over requests: backend calls per front-end request; `None` without a
    /// cache result.
    pub backend_calls_per_request: Option<f64>,
    /// p99 latency of the group, ms.
    pub p99_ms: Option<f64>,
    /// The busiest shards, at most [`MAX_SHARDS`], busiest first.
    pub shards: Vec<ShardPoint>,
}

/// One closed window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowPoint {
    /// Window start, Unix seconds.
    pub start: f64,
    /// Window end, Unix seconds.
    pub end: f64,
    /// Every group of the snapshot.
    pub groups: Vec<GroupPoint>,
}

/// The ring as published: oldest window first.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The windows kept, oldest first; each shared with the ring's next version.
    pub windows: Vec<Arc<WindowPoint>>,
    /// The ring's capacity, `ui.history_windows`.
    pub capacity: usize,
}

/// Owned by the pipeline task through its evaluation hook: builds each window's point and
/// publishes the ring.
#[derive(Debug)]
pub struct Recorder {
    ring: VecDeque<Arc<WindowPoint>>,
    capacity: usize,
    /// The dispersion level of the skew statistics, for the top-1 noise floor.
    alpha: f64,
    tx: watch::Sender<Arc<History>>,
}

impl Recorder {
    /// A recorder keeping `capacity` windows (clamped to 1..=[`MAX_WINDOWS`]), and the channel
    /// it publishes on.
    pub fn new(capacity: usize, alpha: f64) -> (Recorder, watch::Receiver<Arc<History>>) {
        let capacity = capacity.clamp(1, MAX_WINDOWS);
        let (tx, rx) = watch::channel(Arc::new(History {
            windows: Vec::new(),
            capacity,
        }));
        let recorder = Recorder {
            ring: VecDeque::with_capacity(capacity),
            capacity,
            alpha,
            tx,
        };
        (recorder, rx)
    }

    /// Adds an evaluation's window and publishes the ring.
    pub fn record(&mut self, ev: &Evaluation) {
        self.push(&ev.snapshot);
    }

    /// Adds a closed window and publishes the ring.
    pub fn push(&mut self, snap: &WindowSnapshot) {
        let point = window_point(snap, self.ring.back().map(|w| &**w), self.alpha);
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        self.ring.push_back(Arc::new(point));
        // Copying `capacity` pointers per window is cheaper than any lock a reader would take.
        self.tx.send_replace(Arc::new(History {
            windows: self.ring.iter().cloned().collect(),
            capacity: self.capacity,
        }));
    }
}

/// A window's point; names are taken from `previous` where they repeat.
fn window_point(snap: &WindowSnapshot, previous: Option<&WindowPoint>, alpha: f64) -> WindowPoint {
    let names = Names::from(previous);
    WindowPoint {
        start: snap.start,
        end: snap.end,
        groups: snap
            .groups
            .iter()
            .map(|g| group_point(g, &names, alpha))
            .collect(),
    }
}

/// The previous window's names, so a repeating name shares one allocation.
struct Names<'a> {
    groups: HashMap<&'a str, GroupNames<'a>>,
}

/// A group's name and its shards' names, by name.
type GroupNames<'a> = (&'a Arc<str>, HashMap<&'a str, &'a Arc<str>>);

impl<'a> Names<'a> {
    fn from(previous: Option<&'a WindowPoint>) -> Self {
        let groups = previous
            .into_iter()
            .flat_map(|w| &w.groups)
            .map(|g| {
                let shards = g.shards.iter().map(|s| (&*s.shard, &s.shard)).collect();
                (&*g.group, (&g.group, shards))
            })
            .collect();
        Names { groups }
    }

    fn group(&self, name: &str) -> Arc<str> {
        self.groups
            .get(name)
            .map_or_else(|| Arc::from(name), |(g, _)| Arc::clone(g))
    }

    fn shard(&self, group: &str, name: &str) -> Arc<str> {
        self.groups
            .get(group)
            .and_then(|(_, shards)| shards.get(name))
            .map_or_else(|| Arc::from(name), |s| Arc::clone(s))
    }
}

fn group_point(g: &GroupSnapshot, names: &Names<'_>, alpha: f64) -> GroupPoint {
    let mut busiest: Vec<&ShardSnapshot> = g.shards.iter().collect();
    // Busiest first; names break ties, in natural order (`shard-2` before `shard-10`, as people
    // count), so the order is stable from window to window. The live page and `skewwatch top`
    // show the rows in this order.
    busiest.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then_with(|| natural_cmp(&a.shard, &b.shard))
    });
    busiest.truncate(MAX_SHARDS);
    let lookups = g.traffic.cache_hits.saturating_add(g.traffic.cache_misses);
    let skew = g.skew.as_ref();
    GroupPoint {
        group: names.group(&g.group),
        requests: g.requests,
        requests_per_second: g.traffic.requests_per_second,
        fair_share: g.fair_share,
        shards_total: g.shards.len(),
        gini: skew.map(|s| s.gini),
        gini_noise_floor: skew.map(|s| s.gini_noise_floor),
        top1_share: skew.map(|s| s.top1_share),
        top1_noise_floor: skew.and_then(|s| top1_noise_floor(s.shards, s.mean, alpha)),
        error_ratio: g.traffic.error_ratio,
        cache_hit_ratio: g.traffic.cache_hit_ratio,
        backend_calls_per_request: (lookups > 0 && g.requests > 0)
            .then(|| g.traffic.cache_misses as f64 / g.requests as f64),
        p99_ms: g.traffic.latency.map(|l| l.p99_ms),
        shards: busiest
            .into_iter()
            .map(|s| shard_point(s, names.shard(&g.group, &s.shard)))
            .collect(),
    }
}

fn shard_point(s: &ShardSnapshot, name: Arc<str>) -> ShardPoint {
    ShardPoint {
        shard: name,
        share: s.share as f32,
        requests_per_second: s.traffic.requests_per_second as f32,
        error_ratio: s.traffic.error_ratio.map_or(f32::NAN, |x| x as f32),
        cache_hit_ratio: s.traffic.cache_hit_ratio.map_or(f32::NAN, |x| x as f32),
        p99_ms: s.traffic.latency.map_or(f32::NAN, |l| l.p99_ms as f32),
    }
}

/// Natural order of names: runs of ASCII digits compare as numbers (`shard-2` < `shard-10`),
/// everything else byte by byte. Names that differ only in leading zeros (`s02`, `s2`) fall
/// back to byte order, so the order is total and consistent, as `sort_by` requires.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if p.is_ascii_digit() && q.is_ascii_digit() => {
                let (dx, rx) = x.split_at(x.iter().take_while(|c| c.is_ascii_digit()).count());
                let (dy, ry) = y.split_at(y.iter().take_while(|c| c.is_ascii_digit()).count());
                let strip = |d: &'_ [u8]| -> usize { d.iter().take_while(|&&c| c == b'0').count() };
                let (nx, ny) = (&dx[strip(dx)..], &dy[strip(dy)..]);
                // Without leading zeros, a longer run is a larger number.
                match nx.len().cmp(&ny.len()).then_with(|| nx.cmp(ny)) {
                    Ordering::Equal => (x, y) = (rx, ry),
                    o => return o,
                }
            }
            (Some(p), Some(q)) if p != q => return p.cmp(q),
            _ => (x, y) = (&x[1..], &y[1..]),
        }
    }
}

/// The worst-case bytes one window can hold: every group and shard slot filled with names of
/// the longest length, none shared with the window before. `groups` and `shards` are the
/// caps (groups with `__other__` and pinned ones; shards over all groups with each group's
/// `__other__`).
pub fn worst_case_window_bytes(groups: usize, shards: usize) -> usize {
    const NAME: usize = 128 + 16; // longest name and the Arc's counts
    let group = std::mem::size_of::<GroupPoint>() + NAME;
    let shard = std::mem::size_of::<ShardPoint>() + NAME;
    std::mem::size_of::<WindowPoint>()
        + groups * group
        + shards.min(groups * MAX_SHARDS) * shard
        // The published copy's pointer per window.
        + std::mem::size_of::<Arc<WindowPoint>>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewwatch_detectors::observation::Outcome;
    use skewwatch_detectors::snapshot::Traffic;
    use skewwatch_detectors::stats::SkewStats;

    fn shard(name: &str, requests: u64, total: u64) -> ShardSnapshot {
        ShardSnapshot {
            shard: name.to_owned(),
            overflow: false,
            requests,
            share: requests as f64 / total as f64,
            traffic: Traffic {
                requests_per_second: requests as f64 / 10.0,
                by_outcome: [0; Outcome::COUNT],
                errors: 0,
                error_ratio: Some(0.0),
                cache_hits: 0,
                cache_misses: 0,
                cache_hit_ratio: None,
                latency: None,
                ok_latency: None,
            },
            latency_buckets: Vec::new(),
            latency_sum_secs: 0.0,
            error_latency: None,
            latency_samples: 0,
            top_keys: Vec::new(),
            inflight: None,
            utilisation: None,
        }
    }

    fn snapshot(start: f64, counts: &[u64]) -> WindowSnapshot {
        let total: u64 = counts.iter().sum();
        let shards: Vec<ShardSnapshot> = counts
            .iter()
            .enumerate()
            .map(|(i, &c)| shard(&format!("s{i}"), c, total))
            .collect();
        let loads: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
        let mut g = GroupSnapshot {
            group: "db".to_owned(),
            overflow: false,
            folded_records: 0,
            requests: total,
            traffic: Traffic {
                requests_per_second: total as f64 / 10.0,
                by_outcome: [0; Outcome::COUNT],
                errors: 0,
                error_ratio: Some(0.0),
                cache_hits: 90,
                cache_misses: 10,
                cache_hit_ratio: Some(0.9),
                latency: None,
                ok_latency: None,
            },
            miss_latency: None,
            timeout_latency: None,
            skew: SkewStats::from_counts(&loads, 1e-3),
            fair_share: 1.0 / counts.len() as f64,
            top_keys: Vec::new(),
            keys_certified: true,
            keyed_requests: 0,
            key_error_bound: 0,
            shards,
        };
        g.shards.reverse();
        WindowSnapshot {
            start,
            end: start + 10.0,
            groups: vec![g],
            whatif: None,
            whatif_policies: None,
        }
    }

    #[test]
    fn the_ring_keeps_the_last_windows_and_publishes_each() {
        let (mut rec, rx) = Recorder::new(3, 1e-3);
        for w in 0..5 {
            rec.push(&snapshot(f64::from(w) * 10.0, &[100, 100, 100, 100]));
        }
        let h = rx.borrow().clone();
        let starts: Vec<f64> = h.windows.iter().map(|w| w.start).collect();
        assert_eq!(starts, [20.0, 30.0, 40.0]);
        assert_eq!(h.capacity, 3);
    }

    #[test]
    fn shards_are_kept_busiest_first_and_capped() {
        let counts: Vec<u64> = (1..=(MAX_SHARDS as u64 + 10)).collect();
        let (mut rec, rx) = Recorder::new(2, 1e-3);
        rec.push(&snapshot(0.0, &counts));
        let h = rx.borrow().clone();
        let g = &h.windows[0].groups[0];
        assert_eq!(g.shards.len(), MAX_SHARDS);
        assert_eq!(g.shards_total, MAX_SHARDS + 10);
        assert_eq!(&*g.shards[0].shard, format!("s{}", MAX_SHARDS + 9));
        assert!(g.shards.windows(2).all(|p| p[0].share >= p[1].share));
        assert_eq!(g.backend_calls_per_request, Some(10.0 / g.requests as f64));
    }

    #[test]
    fn a_repeating_name_is_stored_once() {
        let (mut rec, rx) = Recorder::new(4, 1e-3);
        rec.push(&snapshot(0.0, &[5, 6]));
        rec.push(&snapshot(10.0, &[7, 8]));
        let h = rx.borrow().clone();
        let a = &h.windows[0].groups[0];
        let b = &h.windows[1].groups[0];
        assert!(Arc::ptr_eq(&a.group, &b.group));
        let s0 = |g: &GroupPoint| g.shards.iter().find(|s| &*s.shard == "s0").unwrap().clone();
        assert!(Arc::ptr_eq(&s0(a).shard, &s0(b).shard));
    }

    #[test]
    fn shards_that_tie_sort_the_way_people_count() {
        let mut snap = snapshot(0.0, &[50, 50, 50, 50, 80]);
        for s in &mut snap.groups[0].shards {
            s.shard = match s.shard.as_str() {
                "s0" => "shard-10",
                "s1" => "shard-2",
                "s2" => "shard-1",
                "s3" => "shard-02",
                _ => "hot",
            }
            .to_owned();
        }
        let (mut rec, rx) = Recorder::new(2, 1e-3);
        rec.push(&snap);
        let h = rx.borrow().clone();
        let names: Vec<&str> = h.windows[0].groups[0]
            .shards
            .iter()
            .map(|s| &*s.shard)
            .collect();
        assert_eq!(names, ["hot", "shard-1", "shard-02", "shard-2", "shard-10"]);
    }

    #[test]
    fn natural_order_is_a_total_order() {
        let names = [
            "",
            "a",
            "a0",
            "a00",
            "a1",
            "a01",
            "a2",
            "a10",
            "a10b",
            "a9z",
            "b",
            "s-2",
            "s-10",
            "s/1",
            "s:1",
            "10",
            "9",
            "x99999999999999999999999",
            "x100000000000000000000000",
        ];
        for a in names {
            assert_eq!(natural_cmp(a, a), Ordering::Equal);
            for b in names {
                assert_eq!(natural_cmp(a, b), natural_cmp(b, a).reverse(), "{a} {b}");
                if a != b {
                    assert_ne!(natural_cmp(a, b), Ordering::Equal, "{a} {b}");
                }
                for c in names {
                    if natural_cmp(a, b).is_le() && natural_cmp(b, c).is_le() {
                        assert!(natural_cmp(a, c).is_le(), "{a} {b} {c}");
                    }
                }
            }
        }
        assert!(natural_cmp("shard-2", "shard-10").is_lt());
        assert!(natural_cmp("x99999999999999999999999", "x100000000000000000000000").is_lt());
        assert!(natural_cmp("9", "10").is_lt());
    }

    /// docs/live-view.md and rules/skewwatch.yaml state this figure: the default caps (64
    /// groups and `__other__`, 1,024 shards and each group's `__other__`).
    #[test]
    fn the_worst_case_window_fits_the_documented_bytes() {
        let bytes = worst_case_window_bytes(65, 1024 + 65);
        eprintln!("worst-case window: {bytes} bytes");
        assert!(bytes <= 218 * 1024, "{bytes}");
        assert!(
            bytes >= 200 * 1024,
            "{bytes}: the documented figure is too high"
        );
    }
}
