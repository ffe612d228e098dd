//! Cumulative counters that add up across sidecars: `skewwatch_shard_requests_total`,
//! `skewwatch_shard_cache_requests_total`, the histogram `skewwatch_shard_request_duration_seconds`
//! and `skewwatch_key_requests_total`.
//!
//! Every other skew series is a gauge of the last window (a share, a ratio, a rate): right for
//! one sidecar, wrong to average across many, because each sidecar sees its own slice of the
//! traffic. Counters can be summed by Prometheus (and Thanos or Mimir above it), which gives
//! the fleet's shares, ratios and percentiles. The pure engine stays window-based: an
//! [`Accumulator`], owned by the pipeline task through its evaluation hook, adds each closed
//! window's counts to a [`Totals`] and publishes an immutable copy on a watch channel; the
//! `/metrics` page ([`super::metrics::render`]) renders that copy at scrape time with [`render`].
//!
//! Bounds (docs/fleet.md explains them to users):
//!
//! - a shard, group or key keeps its counters, flat, for `exposition.counter_retention_secs`
//!   after the last window it had traffic in, so one that returns continues where it left off;
//!   then its series end;
//! - at most `limits.max_groups` groups, `limits.max_shards_per_group` shards per group,
//!   `limits.max_shards_total` shards over all groups and `limits.exported_keys_per_group` keys
//!   per group (each group plus its `__other__`). The total is the windows' own memory budget:
//!   the counters outlive the windows by the retention, so without it a client sending fresh
//!   shard names window after window would grow them to `max_groups` × `max_shards_per_group`
//!   entries. A new name that finds a table full (its group's, or the total) takes the place of
//!   the entry absent longest (in its group, or over all groups); only when every entry had
//!   traffic in this very window does it fold into its group's `__other__`, which keeps every
//!   total right. A name that lost its place and returns starts again from zero, which
//!   Prometheus reads as a counter reset. Keys need no total: 10 per group by default, at most
//!   `max_groups` × `exported_keys_per_group` (+ `__other__`) entries.
//! - each shard entry costs about 0.35–0.45 KiB (map slot, name, six outcome and two cache
//!   counters, 14 bucket counts at the default bounds), held twice (the pipeline's copy and the
//!   published one): under 1 MiB at 1,024 shards. A scrape renders about 2 KiB of text per
//!   shard with a histogram.
//!
//! A shard's outcome counters are written for all six outcome classes from its first window,
//! so an error ratio never misses the first errors of a shard; its cache pair appears with its
//! first cache result and its histogram with its first latency. The fleet profile
//! (`exposition.profile: fleet`, [`Profile::Fleet`]) writes an outcome counter only once the
//! shard has had that outcome, and the histogram's buckets without `_sum` and `_count`: a fleet
//! instance counts a series that appears from zero and reads only the buckets, and the
//! budget of series per shard is what a fleet of sidecars can afford (docs/fleet.md).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use skewwatch_detectors::observation::{OTHER_LABEL, Outcome, key_label};
use skewwatch_detectors::snapshot::{GroupSnapshot, ShardSnapshot, WindowSnapshot};
use tokio::sync::watch;

use super::config::{ExpositionConfig, Profile};
use super::text_format::{self, escape_into, header, write_value};
use skewwatch_detectors::window::WindowConfig;

/// Sizes of the counters' tables.
#[derive(Debug, Clone, PartialEq)]
pub struct TotalsConfig {
    /// Seconds a name keeps its counters after its last window with traffic.
    pub retention_secs: f64,
    /// Groups with counters (plus `__other__`).
    pub max_groups: usize,
    /// Shards with counters per group (plus `__other__`).
    pub max_shards_per_group: usize,
    /// Shards with counters over every group (each group's `__other__` aside): the window
    /// stage's memory budget, which the counters share.
    pub max_shards_total: usize,
    /// Keys with counters per group (plus `__other__`): the keys each window exports.
    pub keys_per_group: usize,
    /// Upper bounds of the latency buckets, seconds, ascending (the snapshot's buckets).
    pub latency_buckets_secs: Vec<f64>,
    /// Which series [`render`] writes.
    pub profile: Profile,
}

impl TotalsConfig {
    /// The tables' sizes for a validated configuration: the window stage's caps, so a name the
    /// window stage tracks always finds a place.
    pub fn from_parts(w: &WindowConfig, exposition: &ExpositionConfig) -> Self {
        TotalsConfig {
            retention_secs: exposition.counter_retention.as_secs_f64(),
            max_groups: w.max_groups,
            max_shards_per_group: w.max_shards_per_group,
            max_shards_total: w.max_shards_total,
            keys_per_group: w.top_keys,
            latency_buckets_secs: w.latency_buckets_secs.clone(),
            profile: exposition.profile,
        }
    }
}

/// A shard's latency histogram since the agent started.
#[derive(Debug, Clone, PartialEq)]
struct LatencyTotals {
    /// Per bucket (not cumulative), the last one above every bound.
    buckets: Vec<u64>,
    sum_secs: f64,
}

/// One shard's counters.
#[derive(Debug, Clone, PartialEq)]
struct ShardTotals {
    by_outcome: [u64; Outcome::COUNT],
    cache_hits: u64,
    cache_misses: u64,
    latency: Option<LatencyTotals>,
    last_seen: f64,
}

impl ShardTotals {
    fn new(now: f64) -> Self {
        ShardTotals {
            by_outcome: [0; Outcome::COUNT],
            cache_hits: 0,
            cache_misses: 0,
            latency: None,
            last_seen: now,
        }
    }

    fn add(&mut self, s: &ShardSnapshot, buckets: usize) {
        for (a, b) in self.by_outcome.iter_mut().zip(s.traffic.by_outcome) {
            *a = a.saturating_add(b);
        }
        self.cache_hits = self.cache_hits.saturating_add(s.traffic.cache_hits);
        self.cache_misses = self.cache_misses.saturating_add(s.traffic.cache_misses);
        // A snapshot counted with other bounds (a configuration change) cannot be added to
        // these buckets; it is left out rather than misfiled.
        if s.latency_samples > 0 && s.latency_buckets.len() == buckets + 1 {
            let l = self.latency.get_or_insert_with(|| LatencyTotals {
                buckets: vec![0; buckets + 1],
                sum_secs: 0.0,
            });
            for (a, b) in l.buckets.iter_mut().zip(&s.latency_buckets) {
                *a = a.saturating_add(*b);
            }
            l.sum_secs += s.latency_sum_secs;
        }
    }
}

/// One key's counter.
#[derive(Debug, Clone, PartialEq)]
struct KeyTotals {
    requests: u64,
    last_seen: f64,
}

/// One group's counters.
#[derive(Debug, Clone, PartialEq)]
struct GroupTotals {
    shards: BTreeMap<String, ShardTotals>,
    keys: BTreeMap<String, KeyTotals>,
    /// Per window, the most requests a key left out of the exported list could have had,
    /// added up.
    key_unlisted_bound: u64,
    /// Per window, the most any exported key count over-counts, added up.
    key_overcount_bound: u64,
    last_seen: f64,
}

impl GroupTotals {
    /// Shard entries besides `__other__`: what the shard caps count.
    fn tracked_shards(&self) -> usize {
        self.shards.len() - usize::from(self.shards.contains_key(OTHER_LABEL))
    }
}

/// The eviction candidates of one window: per group, the shard entries (`__other__` aside)
/// that had no traffic before the window's end, oldest first. Built once, at the window's
/// first eviction, and consumed from the front, so a window that brings n new shards into
/// full tables costs O(n log n) plus O(groups) per eviction, not a scan of every table per
/// new shard.
#[derive(Debug, Default)]
struct Absent {
    built: bool,
    by_group: BTreeMap<String, VecDeque<(f64, String)>>,
}

impl Absent {
    fn build(&mut self, groups: &BTreeMap<String, GroupTotals>, now: f64) {
        if self.built {
            return;
        }
        self.built = true;
        for (g, gt) in groups {
            let mut v: Vec<(f64, String)> = gt
                .shards
                .iter()
                .filter(|(n, s)| n.as_str() != OTHER_LABEL && s.last_seen < now)
                .map(|(n, s)| (s.last_seen, n.clone()))
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !v.is_empty() {
                self.by_group.insert(g.clone(), v.into());
            }
        }
    }

    /// When the shard absent longest in `group` was last seen, after dropping the queue's
    /// stale fronts: entries removed since the queue was built, or that had traffic since
    /// (their `last_seen` moved to the window's end).
    fn front(q: &mut VecDeque<(f64, String)>, gt: Option<&GroupTotals>) -> Option<f64> {
        while let Some((seen, name)) = q.front() {
            let current = gt.and_then(|g| g.shards.get(name));
            if current.is_some_and(|s| s.last_seen == *seen) {
                return Some(*seen);
            }
            q.pop_front();
        }
        None
    }

    /// Takes the shard absent longest in `group`, as (group, shard).
    fn oldest_in(
        &mut self,
        groups: &BTreeMap<String, GroupTotals>,
        group: &str,
    ) -> Option<(String, String)> {
        let q = self.by_group.get_mut(group)?;
        Self::front(q, groups.get(group))?;
        let (_, name) = q.pop_front()?;
        Some((group.to_owned(), name))
    }

    /// Takes the shard absent longest over every group, as (group, shard).
    fn oldest(&mut self, groups: &BTreeMap<String, GroupTotals>) -> Option<(String, String)> {
        let mut best: Option<(f64, &String)> = None;
        for (g, q) in self.by_group.iter_mut() {
            if let Some(seen) = Self::front(q, groups.get(g))
                && best.is_none_or(|(b, _)| seen < b)
            {
                best = Some((seen, g));
            }
        }
        let group = best?.1.clone();
        self.oldest_in(groups, &group)
    }
}

/// Every counter: what `/metrics` renders. Immutable once published.
#[derive(Debug, Clone, PartialEq)]
pub struct Totals {
    cfg: Arc<TotalsConfig>,
    groups: BTreeMap<String, GroupTotals>,
}

/// The entry for `name` in `map`, made if needed. A full map (`cap` names besides
/// `__other__`) first drops the entry absent longest, if one was absent at `now`; otherwise
/// the name folds into `__other__`.
fn entry<'m, T>(
    map: &'m mut BTreeMap<String, T>,
    name: &str,
    cap: usize,
    now: f64,
    last_seen: impl Fn(&T) -> f64,
    make: impl FnOnce() -> T,
) -> &'m mut T {
    let mut key = name;
    if !map.contains_key(name) && name != OTHER_LABEL {
        let tracked = map.len() - usize::from(map.contains_key(OTHER_LABEL));
        if tracked >= cap {
            let oldest = map
                .iter()
                .filter(|(n, v)| n.as_str() != OTHER_LABEL && last_seen(v) < now)
                .min_by(|a, b| last_seen(a.1).total_cmp(&last_seen(b.1)))
                .map(|(n, _)| n.clone());
            match oldest {
                Some(n) => {
                    map.remove(&n);
                }
                None => key = OTHER_LABEL,
            }
        }
    }
    map.entry(key.to_owned()).or_insert_with(make)
}

impl Totals {
    /// No counters yet.
    pub fn new(cfg: TotalsConfig) -> Self {
        Totals {
            cfg: Arc::new(cfg),
            groups: BTreeMap::new(),
        }
    }

    /// Adds one closed window, then drops what has been absent longer than the retention.
    /// Time is the window's end, so replaying windows gives the same counters.
    pub fn add(&mut self, snap: &WindowSnapshot) {
        let now = snap.end;
        let cfg = self.cfg.clone();
        self.touch(snap);
        let mut absent = Absent::default();
        for g in snap.groups.iter().filter(|g| g.requests > 0) {
            // Maps are keyed by label value: `__other__` is only ever the overflow, and a name
            // that reads like it is written escaped (see `label_value`).
            let group = text_format::group_label(g);
            let gt = entry(
                &mut self.groups,
                &group,
                cfg.max_groups,
                now,
                |g| g.last_seen,
                || GroupTotals {
                    shards: BTreeMap::new(),
                    keys: BTreeMap::new(),
                    key_unlisted_bound: 0,
                    key_overcount_bound: 0,
                    last_seen: now,
                },
            );
            gt.last_seen = now;
            // The group may have landed in `__other__`, or taken an absent group's place (and
            // its shards with it): count the shard entries again, a sum over at most
            // `max_groups` + 1 groups.
            let group: &str = if self.groups.contains_key(group.as_ref()) {
                &group
            } else {
                OTHER_LABEL
            };
            let mut tracked = self.groups.values().map(GroupTotals::tracked_shards).sum();
            for s in g.shards.iter().filter(|s| s.requests > 0) {
                let st = self.shard_entry(
                    group,
                    &text_format::shard_label(s),
                    now,
                    &mut absent,
                    &mut tracked,
                );
                st.last_seen = now;
                st.add(s, cfg.latency_buckets_secs.len());
            }
            let gt = self
                .groups
                .get_mut(group)
                .expect("the group was just added");
            add_keys(gt, g, cfg.keys_per_group, now);
        }
        self.expire(now - cfg.retention_secs);
    }

    /// Marks every existing group, shard and key with traffic in `snap` as seen at its end,
    /// before any new name looks for a place: an entry the window will add to must never be
    /// the one to give way, wherever it comes in the snapshot's order.
    fn touch(&mut self, snap: &WindowSnapshot) {
        let cap = self.cfg.keys_per_group;
        for g in snap.groups.iter().filter(|g| g.requests > 0) {
            let Some(gt) = self.groups.get_mut(text_format::group_label(g).as_ref()) else {
                continue;
            };
            gt.last_seen = snap.end;
            for s in g.shards.iter().filter(|s| s.requests > 0) {
                if let Some(st) = gt.shards.get_mut(text_format::shard_label(s).as_ref()) {
                    st.last_seen = snap.end;
                }
            }
            for k in g.top_keys.iter().take(cap) {
                if let Some(kt) = gt.keys.get_mut(key_label(&k.key).as_ref()) {
                    kt.last_seen = snap.end;
                }
            }
        }
    }

    /// The counters of shard `name` in `group` (which exists), made if needed. A new name
    /// that finds its group at `max_shards_per_group`, or every group together at
    /// `max_shards_total`, takes the place of the entry absent longest (in its group, or over
    /// all groups); when every candidate had traffic at `now` it folds into the group's
    /// `__other__`, so the totals stay right. `tracked` is the number of shard entries over
    /// all groups, `__other__` aside, kept current here.
    fn shard_entry(
        &mut self,
        group: &str,
        name: &str,
        now: f64,
        absent: &mut Absent,
        tracked: &mut usize,
    ) -> &mut ShardTotals {
        let gt = &self.groups[group];
        let mut key = name;
        if name != OTHER_LABEL && !gt.shards.contains_key(name) {
            let group_full = gt.tracked_shards() >= self.cfg.max_shards_per_group;
            let total_full = *tracked >= self.cfg.max_shards_total;
            if group_full || total_full {
                absent.build(&self.groups, now);
                let victim = if group_full {
                    absent.oldest_in(&self.groups, group)
                } else {
                    absent.oldest(&self.groups)
                };
                match victim {
                    Some((g, n)) => {
                        if let Some(gt) = self.groups.get_mut(&g) {
                            gt.shards.remove(&n);
                            *tracked -= 1;
                        }
                    }
                    None => key = OTHER_LABEL,
                }
            }
        }
        let shards = &mut self
            .groups
            .get_mut(group)
            .expect("caller made the group")
            .shards;
        if key != OTHER_LABEL && !shards.contains_key(key) {
            *tracked += 1;
        }
        shards
            .entry(key.to_owned())
            .or_insert_with(|| ShardTotals::new(now))
    }

    /// Drops every shard, key and group whose last traffic was before `cutoff`.
    fn expire(&mut self, cutoff: f64) {
        self.groups.retain(|_, g| {
            g.shards.retain(|_, s| s.last_seen >= cutoff);
            g.keys.retain(|_, k| k.last_seen >= cutoff);
            g.last_seen >= cutoff
        });
    }

    /// The profile the page is rendered in.
    pub fn profile(&self) -> Profile {
        self.cfg.profile
    }

    /// Groups with counters.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Shards with counters in `group`.
    pub fn shard_count(&self, group: &str) -> usize {
        self.groups.get(group).map_or(0, |g| g.shards.len())
    }
}

/// Adds the window's exported top keys to their counters and every other keyed request to
/// `__other__`, so the key counters of a group add up to its keyed requests. A key counts the
/// upper bound of its window count, as `skewwatch_key_share_ratio` does.
fn add_keys(gt: &mut GroupTotals, g: &GroupSnapshot, cap: usize, now: f64) {
    if g.keyed_requests == 0 {
        return;
    }
    let mut shown = 0u64;
    for k in g.top_keys.iter().take(cap) {
        let kt = entry(
            &mut gt.keys,
            &key_label(&k.key),
            cap,
            now,
            |k| k.last_seen,
            || KeyTotals {
                requests: 0,
                last_seen: now,
            },
        );
        kt.requests = kt.requests.saturating_add(k.requests);
        kt.last_seen = now;
        shown = shown.saturating_add(k.requests);
    }
    // What a summed key counter can certify across sidecars: no key left out of this list
    // had more than the last listed key's count (when the list is full) nor more than the
    // summary's error bound (an unmonitored key); a listed key over-counts by at most the bound.
    let full = g.top_keys.len() >= cap;
    let unlisted = match g.top_keys.get(cap.saturating_sub(1)) {
        Some(last) if full => last.requests.max(g.key_error_bound),
        _ => g.key_error_bound,
    };
    gt.key_unlisted_bound = gt.key_unlisted_bound.saturating_add(unlisted);
    gt.key_overcount_bound = gt.key_overcount_bound.saturating_add(g.key_error_bound);
    let rest = g.keyed_requests.saturating_sub(shown);
    if rest > 0 {
        let other = gt.keys.entry(OTHER_LABEL.to_owned()).or_insert(KeyTotals {
            requests: 0,
            last_seen: now,
        });
        other.requests = other.requests.saturating_add(rest);
        other.last_seen = now;
    }
}

/// The pipeline's side: adds each closed window and publishes the result for scrapes.
#[derive(Debug)]
pub struct Accumulator {
    totals: Totals,
    published: watch::Sender<Arc<Totals>>,
}

impl Accumulator {
    /// An empty accumulator and the receiver `/metrics` reads.
    pub fn new(cfg: TotalsConfig) -> (Accumulator, watch::Receiver<Arc<Totals>>) {
        let totals = Totals::new(cfg);
        let (published, rx) = watch::channel(Arc::new(totals.clone()));
        (Accumulator { totals, published }, rx)
    }

    /// Adds one closed window and publishes a copy. The copy costs about as much as the adds
    /// (a few hundred bytes per shard), once per window, and keeps scrapes lock-free.
    pub fn add(&mut self, snap: &WindowSnapshot) {
        self.totals.add(snap);
        self.published.send_replace(Arc::new(self.totals.clone()));
    }
}

/// `k="v",...` with the values escaped. Written once per shard or key and reused on each of
/// its lines: escaping is most of the cost of a line.
fn label_text(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        escape_into(&mut out, v);
        out.push('"');
    }
    out
}

/// Starts one sample line, `<name><suffix>{<labels>[,<k>="<v>"]} `; `extra` is one of our own
/// label values (an outcome, a cache result, a bucket bound), which needs no escaping.
fn start_line(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &str,
    extra: Option<(&str, &str)>,
) {
    out.push_str(name);
    out.push_str(suffix);
    out.push('{');
    out.push_str(labels);
    if let Some((k, v)) = extra {
        out.push(',');
        out.push_str(k);
        out.push_str("=\"");
        out.push_str(v);
        out.push('"');
    }
    out.push_str("} ");
}

/// One sample line with an integer value.
fn count_line(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &str,
    extra: Option<(&str, &str)>,
    n: u64,
) {
    start_line(out, name, suffix, labels, extra);
    let _ = writeln!(out, "{n}");
}

const SHARD_REQUESTS: &str = "skewwatch_shard_requests_total";
const SHARD_CACHE: &str = "skewwatch_shard_cache_requests_total";
const SHARD_DURATION: &str = "skewwatch_shard_request_duration_seconds";
const KEY_REQUESTS: &str = "skewwatch_key_requests_total";
const KEY_UNLISTED: &str = "skewwatch_key_unlisted_bound_total";
const KEY_OVERCOUNT: &str = "skewwatch_key_overcount_bound_total";

/// Writes the cumulative families, as the profile says.
pub fn render(out: &mut String, t: &Totals) {
    let full = t.cfg.profile == Profile::Full;
    // Every shard's escaped labels, once.
    let shards: Vec<(String, &ShardTotals)> = t
        .groups
        .iter()
        .flat_map(|(g, gt)| {
            gt.shards
                .iter()
                .map(move |(s, st)| (label_text(&[("group", g), ("shard", s)]), st))
        })
        .collect();
    header(
        out,
        SHARD_REQUESTS,
        "Requests to each shard since the agent started, by outcome class. Counters: sum them across sidecars for the fleet's shares and error ratios.",
        "counter",
    );
    for (labels, st) in &shards {
        for o in Outcome::ALL {
            let n = st.by_outcome[o.index()];
            // The fleet profile leaves out the classes a shard never had: a fleet instance
            // counts a series that appears from zero, and most shards never see most classes.
            if n == 0 && !full {
                continue;
            }
            count_line(
                out,
                SHARD_REQUESTS,
                "",
                labels,
                Some(("outcome", o.as_str())),
                n,
            );
        }
    }
    header(
        out,
        SHARD_CACHE,
        "Look-aside cache results of each shard's requests since the agent started (result=\"miss\" is a backend call).",
        "counter",
    );
    for (labels, st) in shards
        .iter()
        .filter(|(_, s)| s.cache_hits + s.cache_misses > 0)
    {
        for (result, n) in [("hit", st.cache_hits), ("miss", st.cache_misses)] {
            count_line(out, SHARD_CACHE, "", labels, Some(("result", result)), n);
        }
    }
    render_histograms(out, &t.cfg.latency_buckets_secs, &shards, full);
    header(
        out,
        KEY_REQUESTS,
        "Requests carrying each of the group's top keys (upper-bound estimates) in the windows it was a top key; key=\"__other__\" every other keyed request, key=\"(empty)\" the empty key.",
        "counter",
    );
    for (g, gt) in &t.groups {
        for (k, kt) in &gt.keys {
            let labels = label_text(&[("group", g), ("key", k)]);
            count_line(out, KEY_REQUESTS, "", &labels, None, kt.requests);
        }
    }
    let keyed = || t.groups.iter().filter(|(_, gt)| !gt.keys.is_empty());
    header(
        out,
        KEY_UNLISTED,
        "Per window, the most requests any key left out of the group's exported top keys could have had, added up: summed across sidecars, no key missing from every sidecar's list had more requests in the fleet.",
        "counter",
    );
    for (g, gt) in keyed() {
        let labels = label_text(&[("group", g)]);
        count_line(out, KEY_UNLISTED, "", &labels, None, gt.key_unlisted_bound);
    }
    header(
        out,
        KEY_OVERCOUNT,
        "Per window, the most any exported key count of the group over-counts (the key summary's error bound), added up: a key's summed counter less the summed bound is a certain lower bound of its requests.",
        "counter",
    );
    for (g, gt) in keyed() {
        let labels = label_text(&[("group", g)]);
        count_line(
            out,
            KEY_OVERCOUNT,
            "",
            &labels,
            None,
            gt.key_overcount_bound,
        );
    }
}

/// Writes `skewwatch_shard_request_duration_seconds`: cumulative `_bucket`s ending with
/// `le="+Inf"`, then, with `sum_and_count`, `_sum` and `_count`.
fn render_histograms(
    out: &mut String,
    bounds: &[f64],
    shards: &[(String, &ShardTotals)],
    sum_and_count: bool,
) {
    header(
        out,
        SHARD_DURATION,
        "Latency of each shard's requests (successes and errors) since the agent started; buckets are counted from HDR histograms, a request at most one resolution step above a bound may count under it.",
        "histogram",
    );
    let les: Vec<String> = bounds
        .iter()
        .map(|b| format!("{b}"))
        .chain(std::iter::once("+Inf".to_owned()))
        .collect();
    for (labels, st) in shards {
        let Some(l) = &st.latency else { continue };
        let mut cumulative = 0u64;
        for (le, n) in les.iter().zip(&l.buckets) {
            cumulative = cumulative.saturating_add(*n);
            count_line(
                out,
                SHARD_DURATION,
                "_bucket",
                labels,
                Some(("le", le)),
                cumulative,
            );
        }
        if sum_and_count {
            start_line(out, SHARD_DURATION, "_sum", labels, None);
            write_value(out, l.sum_secs);
            out.push('\n');
            count_line(out, SHARD_DURATION, "_count", labels, None, cumulative);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewwatch_detectors::observation::{CacheResult, ObservationRef};
    use skewwatch_detectors::window::{WindowConfig, Windows};

    fn cfg() -> TotalsConfig {
        TotalsConfig {
            retention_secs: 100.0,
            max_groups: 64,
            max_shards_per_group: 1024,
            max_shards_total: 1024,
            keys_per_group: 2,
            latency_buckets_secs: vec![0.01, 0.1],
            profile: Profile::Full,
        }
    }

    fn windows() -> Windows {
        Windows::new(
            WindowConfig {
                shard_idle_windows: 1,
                latency_buckets_secs: vec![0.01, 0.1],
                top_keys: 2,
                ..WindowConfig::default()
            },
            0.0,
        )
    }

    fn send(w: &mut Windows, group: &str, shard: &str, count: u64) {
        let mut o = ObservationRef::new(group, shard);
        o.count = count;
        w.record(&o);
    }

    fn requests(t: &Totals, group: &str, shard: &str) -> Option<u64> {
        let s = t.groups.get(group)?.shards.get(shard)?;
        Some(s.by_outcome.iter().sum())
    }

    #[test]
    fn a_shard_keeps_its_counters_while_absent_and_continues_when_it_returns() {
        let mut w = windows();
        let mut t = Totals::new(cfg());
        send(&mut w, "db", "a", 5);
        send(&mut w, "db", "b", 1);
        t.add(&w.close(10.0));
        // `a` goes quiet long enough for the window stage to forget it (one idle window).
        for end in [20.0, 30.0, 40.0] {
            send(&mut w, "db", "b", 1);
            let snap = w.close(end);
            t.add(&snap);
            assert_eq!(requests(&t, "db", "a"), Some(5));
        }
        assert!(w.close(45.0).group("db").unwrap().shard("a").is_none());
        send(&mut w, "db", "a", 2);
        t.add(&w.close(50.0));
        assert_eq!(requests(&t, "db", "a"), Some(7));
        assert_eq!(requests(&t, "db", "b"), Some(4));
    }

    #[test]
    fn counters_end_after_the_retention_and_groups_with_them() {
        let mut w = windows();
        let mut t = Totals::new(cfg());
        send(&mut w, "db", "a", 1);
        send(&mut w, "cache", "x", 1);
        t.add(&w.close(10.0));
        send(&mut w, "db", "b", 1);
        t.add(&w.close(100.0));
        assert_eq!(t.shard_count("db"), 2);
        // 111 s after `a` and `x` were last seen, 11 s after `b`.
        t.add(&w.close(111.0));
        assert_eq!(requests(&t, "db", "a"), None);
        assert_eq!(requests(&t, "db", "b"), Some(1));
        assert_eq!(t.group_count(), 1);
    }

    #[test]
    fn a_full_table_gives_the_place_of_the_shard_absent_longest_then_folds() {
        let mut w = windows();
        let mut t = Totals::new(TotalsConfig {
            max_shards_per_group: 2,
            ..cfg()
        });
        send(&mut w, "db", "a", 1);
        t.add(&w.close(10.0));
        send(&mut w, "db", "b", 1);
        t.add(&w.close(20.0));
        // `c` is new and the table is full: `a`, absent longest, makes room.
        send(&mut w, "db", "c", 1);
        t.add(&w.close(30.0));
        assert_eq!(requests(&t, "db", "a"), None);
        assert_eq!(requests(&t, "db", "b"), Some(1));
        assert_eq!(requests(&t, "db", "c"), Some(1));
        // Three shards with traffic in one window: nobody is absent, so `d` folds.
        for s in ["b", "c", "d"] {
            send(&mut w, "db", s, 10);
        }
        t.add(&w.close(40.0));
        assert_eq!(requests(&t, "db", "d"), None);
        assert_eq!(requests(&t, "db", OTHER_LABEL), Some(10));
        let total: u64 = ["b", "c", OTHER_LABEL]
            .iter()
            .map(|s| requests(&t, "db", s).unwrap())
            .sum();
        assert_eq!(total, 1 + 1 + 30);
    }

    #[test]
    fn the_total_cap_takes_the_place_of_the_shard_absent_longest_in_any_group_then_folds() {
        let mut w = windows();
        let mut t = Totals::new(TotalsConfig {
            max_shards_total: 2,
            ..cfg()
        });
        send(&mut w, "db", "a", 1);
        t.add(&w.close(10.0));
        send(&mut w, "cache", "x", 1);
        t.add(&w.close(20.0));
        // `n` is new and two entries exist over all groups: `db/a`, absent longest, gives way
        // although it is in another group.
        send(&mut w, "web", "n", 1);
        t.add(&w.close(30.0));
        assert_eq!(requests(&t, "db", "a"), None);
        assert_eq!(requests(&t, "cache", "x"), Some(1));
        assert_eq!(requests(&t, "web", "n"), Some(1));
        // Both entries had traffic in this window: the new `db/m` folds into db's `__other__`.
        send(&mut w, "cache", "x", 2);
        send(&mut w, "web", "n", 3);
        send(&mut w, "db", "m", 4);
        t.add(&w.close(40.0));
        assert_eq!(requests(&t, "db", "m"), None);
        assert_eq!(requests(&t, "db", OTHER_LABEL), Some(4));
        assert_eq!(requests(&t, "cache", "x"), Some(3));
        assert_eq!(requests(&t, "web", "n"), Some(4));
    }

    #[test]
    fn fresh_shard_names_in_every_window_never_pass_the_total_cap_and_keep_every_request() {
        let mut w = Windows::new(
            WindowConfig {
                shard_idle_windows: 1,
                max_shards_total: 100,
                ..WindowConfig::default()
            },
            0.0,
        );
        let mut t = Totals::new(TotalsConfig {
            max_shards_total: 100,
            ..cfg()
        });
        let mut sent = 0;
        for phase in 0..5u64 {
            for i in 0..150u64 {
                let (g, s) = (format!("g{}", i % 4), format!("p{phase}-s{i}"));
                send(&mut w, &g, &s, 1 + i % 3);
                sent += 1 + i % 3;
            }
            t.add(&w.close(10.0 * (phase + 1) as f64));
            let named: usize = t.groups.values().map(GroupTotals::tracked_shards).sum();
            assert!(named <= 100, "{named} shard entries after phase {phase}");
        }
        let counted: u64 = t
            .groups
            .values()
            .flat_map(|g| g.shards.values())
            .map(|s| s.by_outcome.iter().sum::<u64>())
            .sum();
        // Evicted entries took their counts with them; what is left is at most what was sent,
        // and the last window's shards (all named or folded) are all there.
        assert!(counted <= sent);
        let last: u64 = (0..150u64).map(|i| 1 + i % 3).sum();
        assert!(counted >= last, "{counted} < {last}");
    }

    #[test]
    fn key_counters_add_up_to_the_keyed_requests_and_a_key_leaving_the_top_list_stays_flat() {
        let mut w = windows();
        let mut t = Totals::new(cfg());
        let keyed = |w: &mut Windows, key: &'static str, count: u64| {
            let mut o = ObservationRef::new("db", "a");
            o.key = Some(key);
            o.count = count;
            w.record(&o);
        };
        keyed(&mut w, "k1", 50);
        keyed(&mut w, "", 30);
        keyed(&mut w, "k3", 5);
        t.add(&w.close(10.0));
        // Keys are held by label value: the empty key as `(empty)`.
        let keys = |t: &Totals| -> Vec<(String, u64)> {
            t.groups["db"]
                .keys
                .iter()
                .map(|(k, v)| (k.clone(), v.requests))
                .collect()
        };
        assert_eq!(
            keys(&t),
            [
                ("(empty)".into(), 30),
                ("__other__".into(), 5),
                ("k1".into(), 50)
            ]
        );
        // k1 leaves the top list: its counter stays, flat.
        keyed(&mut w, "", 40);
        t.add(&w.close(20.0));
        assert_eq!(
            keys(&t),
            [
                ("(empty)".into(), 70),
                ("__other__".into(), 5),
                ("k1".into(), 50)
            ]
        );
        // A new top key needs a place: k1, absent longest, gives way; its few requests in
        // this window count under `__other__`.
        keyed(&mut w, "", 10);
        keyed(&mut w, "k4", 20);
        keyed(&mut w, "k1", 1);
        t.add(&w.close(30.0));
        assert_eq!(
            keys(&t),
            [
                ("(empty)".into(), 80),
                ("__other__".into(), 6),
                ("k4".into(), 20)
            ]
        );
        // The bounds a fleet certifies with: a full list (windows 1 and 3) bounds every other
        // key by its last entry (30, then 10; k3 had 5 and k1 1); a short one (window 2) by the
        // summary's error bound, 0 for an exact summary; no count over-counts.
        let g = &t.groups["db"];
        assert_eq!((g.key_unlisted_bound, g.key_overcount_bound), (40, 0));
        let mut out = String::new();
        render(&mut out, &t);
        assert!(
            out.contains("skewwatch_key_unlisted_bound_total{group=\"db\"} 40\n"),
            "{out}"
        );
        assert!(
            out.contains("skewwatch_key_overcount_bound_total{group=\"db\"} 0\n"),
            "{out}"
        );
    }

    #[test]
    fn render_writes_every_outcome_and_a_cumulative_histogram_ending_in_inf() {
        let mut w = windows();
        let mut t = Totals::new(cfg());
        for (ms, outcome, cache) in [
            (5.0, Outcome::Ok, Some(CacheResult::Hit)),
            (10.0, Outcome::Ok, Some(CacheResult::Miss)),
            (50.0, Outcome::Timeout, None),
            (500.0, Outcome::Error, Some(CacheResult::Miss)),
        ] {
            let mut o = ObservationRef::new("db", "s\"1");
            o.latency_ms = Some(ms);
            o.outcome = outcome;
            o.cache = cache;
            o.key = Some("");
            w.record(&o);
        }
        send(&mut w, "db", "quiet", 1);
        t.add(&w.close(10.0));
        let mut out = String::new();
        render(&mut out, &t);
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        let s = r#"group="db",shard="s\"1""#;
        let expected = [
            r#"skewwatch_shard_requests_total{group="db",shard="quiet",outcome="ok"} 1"#.to_owned(),
            format!(r#"skewwatch_shard_requests_total{{{s},outcome="ok"}} 2"#),
            format!(r#"skewwatch_shard_requests_total{{{s},outcome="error"}} 1"#),
            format!(r#"skewwatch_shard_requests_total{{{s},outcome="timeout"}} 1"#),
            format!(r#"skewwatch_shard_cache_requests_total{{{s},result="hit"}} 1"#),
            format!(r#"skewwatch_shard_cache_requests_total{{{s},result="miss"}} 2"#),
            format!(r#"skewwatch_shard_request_duration_seconds_bucket{{{s},le="0.01"}} 2"#),
            format!(r#"skewwatch_shard_request_duration_seconds_bucket{{{s},le="0.1"}} 3"#),
            format!(r#"skewwatch_shard_request_duration_seconds_bucket{{{s},le="+Inf"}} 4"#),
            format!(r#"skewwatch_shard_request_duration_seconds_sum{{{s}}} 0.565"#),
            format!(r#"skewwatch_shard_request_duration_seconds_count{{{s}}} 4"#),
            r#"skewwatch_key_requests_total{group="db",key="(empty)"} 4"#.to_owned(),
        ];
        for e in &expected {
            assert!(samples.contains(&e.as_str()), "{e} missing from\n{out}");
        }
        // Every outcome class of every shard, from the first window.
        assert_eq!(
            samples
                .iter()
                .filter(|l| l.starts_with("skewwatch_shard_requests_total"))
                .count(),
            2 * Outcome::COUNT
        );
        // Every keyed request went to a top key: no `__other__` key. The quiet shard had no
        // cache result and no latency: no cache or histogram series.
        assert!(!samples.iter().any(|l| l.contains(r#"key="__other__""#)));
        assert!(!out.contains(r#"skewwatch_shard_cache_requests_total{group="db",shard="quiet""#));
        assert!(!out.contains(r#"_bucket{group="db",shard="quiet""#));
        for family in [SHARD_REQUESTS, SHARD_CACHE, KEY_REQUESTS] {
            assert!(out.contains(&format!("# TYPE {family} counter\n")));
        }
        assert!(out.contains(&format!("# TYPE {SHARD_DURATION} histogram\n")));
    }

    #[test]
    fn the_accumulator_publishes_every_window() {
        let (mut acc, rx) = Accumulator::new(cfg());
        let mut w = windows();
        send(&mut w, "db", "a", 3);
        acc.add(&w.close(10.0));
        assert_eq!(requests(&rx.borrow(), "db", "a"), Some(3));
    }
}
