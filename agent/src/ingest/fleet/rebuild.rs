//! One fleet window of a shard, rebuilt from its sums into observations.
//!
//! The API gives, per shard, three sums that are each exact: requests by outcome, cache
//! results, and latency buckets. The window stage takes observations, each a count of requests
//! with one outcome, one cache result and one latency. [`Growth::records`] writes the fewest
//! such records whose outcome, cache and latency totals are exactly the three sums: each
//! outcome takes its share of every latency bucket, and each (outcome, bucket) cell its share
//! of the cache results, in proportion to what is left, so the last cell takes the rest and
//! every sum comes out whole. How the three go together within a shard (are misses slower, are
//! errors faster?) is not in the sums: the rebuilt window has them independent, which the
//! docs say where a detector compares them (docs/fleet.md).

use std::collections::{BTreeMap, HashMap};

use skewwatch_detectors::observation::{
    Batch, CacheResult, EMPTY_KEY_LABEL, KeyCountRef, LITERAL_ESCAPE, MAX_COUNT, MAX_KEY_BYTES,
    MAX_NAME_BYTES, OTHER_LABEL, ObservationRef, Outcome,
};

use super::query::{Family, Series};
use crate::ingest::scrape::representative_ms;

/// Why a series of an answer was not used: the `reason` label of
/// `skewwatch_ingest_skipped_total{source="fleet"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A sum without a `group` or `shard` label, or with an empty one.
    NoShard,
    /// The sidecars' overflow (`__other__`): no shard of its own to judge.
    Overflow,
    /// An `outcome`, `result` or `le` value the sidecars do not write.
    UnknownLabel,
    /// A group another fleet instance judges (`fleet.instances`).
    OtherInstance,
    /// A name longer than an observation's may be (128 bytes, a key 256).
    TooLong,
}

impl Skip {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::NoShard => "no_shard",
            Skip::Overflow => "overflow",
            Skip::UnknownLabel => "unknown_label",
            Skip::OtherInstance => "other_instance",
            Skip::TooLong => "too_long",
        }
    }
}

/// What one shard grew by in one window, from the three sums.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardGrowth {
    /// Requests by outcome class, in [`Outcome::index`] order.
    pub outcomes: [u64; Outcome::COUNT],
    /// Cache hits.
    pub hits: u64,
    /// Cache misses.
    pub misses: u64,
    /// Cumulative bucket growth: (upper bound in seconds, requests at or below it).
    pub buckets: Vec<(f64, f64)>,
}

/// What one group's key counters grew by in one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupKeys {
    /// Each key's summed counter (upper bounds of its requests where it was listed).
    pub keys: BTreeMap<String, u64>,
    /// Keyed requests under `__other__`.
    pub other: u64,
    /// The most any key missing from every sidecar's list could have had.
    pub unlisted: u64,
    /// The most any summed key counter over-counts.
    pub overcount: u64,
}

/// One window's growth of every shard, by (group, shard) as the sidecars name them, and of
/// every group's key counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Growth {
    /// Per shard.
    pub shards: BTreeMap<(String, String), ShardGrowth>,
    /// Per group.
    pub keys: BTreeMap<String, GroupKeys>,
}

impl Growth {
    /// Adds one family's sums; each skipped series is passed to `skip`. `owns` says whether
    /// this instance judges a group. Only `point` of each series is read (an instant answer
    /// has one; a range answer is read one point index at a time).
    pub fn add(
        &mut self,
        family: Family,
        series: &[Series],
        point: usize,
        owns: &dyn Fn(&str) -> bool,
        skip: &mut dyn FnMut(Skip),
    ) {
        for s in series {
            if let Some(&(_, value)) = s.points.get(point) {
                self.add_one(family, &s.labels, value, owns, skip);
            }
        }
    }

    /// Adds one summed value of `family` with its `labels`.
    pub fn add_one(
        &mut self,
        family: Family,
        labels: &HashMap<String, String>,
        value: f64,
        owns: &dyn Fn(&str) -> bool,
        skip: &mut dyn FnMut(Skip),
    ) {
        if !family.per_shard() {
            self.add_key(family, labels, value, owns, skip);
            return;
        }
        let (Some(group), Some(shard)) = (name(labels, "group"), name(labels, "shard")) else {
            skip(Skip::NoShard);
            return;
        };
        let (group, shard) = match (group, shard) {
            (Name::Other, _) | (_, Name::Other) => {
                skip(Skip::Overflow);
                return;
            }
            (Name::Is(g), Name::Is(s)) => (g, s),
        };
        if group.len() > MAX_NAME_BYTES || shard.len() > MAX_NAME_BYTES {
            skip(Skip::TooLong);
            return;
        }
        if !owns(&group) {
            skip(Skip::OtherInstance);
            return;
        }
        let label = family
            .label()
            .and_then(|l| labels.get(l))
            .map(String::as_str);
        let counted = match (family, label) {
            (Family::Requests, Some(o)) => Outcome::parse(o).map(Target::Outcome),
            (Family::Cache, Some(r)) => CacheResult::parse(r).map(Target::Cache),
            (Family::Buckets, Some(le)) => parse_le(le).map(Target::Bucket),
            _ => None,
        };
        let Some(target) = counted else {
            skip(Skip::UnknownLabel);
            return;
        };
        let g = self.shards.entry((group, shard)).or_default();
        let n = whole(value);
        match target {
            Target::Outcome(o) => {
                let c = &mut g.outcomes[o.index()];
                *c = c.saturating_add(n);
            }
            Target::Cache(CacheResult::Hit) => g.hits = g.hits.saturating_add(n),
            Target::Cache(CacheResult::Miss) => g.misses = g.misses.saturating_add(n),
            Target::Bucket(le) => g.buckets.push((le, value.max(0.0))),
        }
    }

    /// Adds one summed value of a key family.
    fn add_key(
        &mut self,
        family: Family,
        labels: &HashMap<String, String>,
        value: f64,
        owns: &dyn Fn(&str) -> bool,
        skip: &mut dyn FnMut(Skip),
    ) {
        let group = match name(labels, "group") {
            None => {
                skip(Skip::NoShard);
                return;
            }
            Some(Name::Other) => {
                skip(Skip::Overflow);
                return;
            }
            Some(Name::Is(g)) => g,
        };
        if group.len() > MAX_NAME_BYTES {
            skip(Skip::TooLong);
            return;
        }
        if !owns(&group) {
            skip(Skip::OtherInstance);
            return;
        }
        let n = whole(value);
        let keys = self.keys.entry(group).or_default();
        match family {
            Family::KeysUnlisted => keys.unlisted = keys.unlisted.saturating_add(n),
            Family::KeysOvercount => keys.overcount = keys.overcount.saturating_add(n),
            _ => match labels.get("key").map(|k| key_name(k)) {
                Some(Name::Other) => keys.other = keys.other.saturating_add(n),
                Some(Name::Is(k)) if k.len() > MAX_KEY_BYTES => skip(Skip::TooLong),
                Some(Name::Is(k)) => {
                    let c = keys.keys.entry(k).or_default();
                    *c = c.saturating_add(n);
                }
                None => skip(Skip::UnknownLabel),
            },
        }
    }

    /// Requests in all.
    pub fn requests(&self) -> u64 {
        self.shards
            .values()
            .flat_map(|g| g.outcomes.iter())
            .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Appends the records of every shard and the key counts of every group to `out`.
    pub fn records(&self, out: &mut Batch) {
        for ((group, shard), g) in &self.shards {
            g.records(group, shard, out);
        }
        for (group, keys) in &self.keys {
            keys.records(group, out);
        }
    }
}

enum Target {
    Outcome(Outcome),
    Cache(CacheResult),
    Bucket(f64),
}

/// A group or shard label value as the sidecars write it ([`label_value`]): the overflow, or
/// the name with its escape taken off.
///
/// [`label_value`]: skewwatch_detectors::observation::label_value
enum Name {
    Other,
    Is(String),
}

fn name(labels: &HashMap<String, String>, label: &str) -> Option<Name> {
    let v = labels.get(label)?;
    if v.is_empty() {
        return None;
    }
    if v == OTHER_LABEL {
        return Some(Name::Other);
    }
    let unescaped = match v.strip_prefix(LITERAL_ESCAPE) {
        Some(rest)
            if rest == OTHER_LABEL
                || rest == EMPTY_KEY_LABEL
                || rest.starts_with(LITERAL_ESCAPE) =>
        {
            rest
        }
        _ => v.as_str(),
    };
    Some(Name::Is(unescaped.to_owned()))
}

/// A key label value as the sidecars write it ([`key_label`]): `(empty)` is the empty key.
///
/// [`key_label`]: skewwatch_detectors::observation::key_label
fn key_name(v: &str) -> Name {
    if v == EMPTY_KEY_LABEL {
        return Name::Is(String::new());
    }
    let mut labels = HashMap::with_capacity(1);
    labels.insert("key".to_owned(), v.to_owned());
    name(&labels, "key").unwrap_or(Name::Is(String::new()))
}

impl GroupKeys {
    /// Appends the group's key counts: each key at the certain lower bound of its requests
    /// (its summed counter less the summed over-count bound), the rest of the keyed requests
    /// unnamed, so a key is judged on what it surely had and the group's keyed requests stay
    /// whole.
    pub fn records(&self, group: &str, out: &mut Batch) {
        let mut unnamed = self.other;
        for (key, &n) in &self.keys {
            let certain = n.saturating_sub(self.overcount);
            unnamed = unnamed.saturating_add(n - certain);
            if certain > 0 {
                out.push_key_count(&KeyCountRef {
                    group,
                    key: Some(key),
                    count: certain,
                });
            }
        }
        if unnamed > 0 {
            out.push_key_count(&KeyCountRef {
                group,
                key: None,
                count: unnamed,
            });
        }
    }
}

fn parse_le(le: &str) -> Option<f64> {
    match le {
        "+Inf" | "Inf" | "inf" => Some(f64::INFINITY),
        _ => le
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0),
    }
}

/// Whole requests from a summed growth (sums of whole counts; rounded for float noise).
fn whole(v: f64) -> u64 {
    if v.is_finite() && v >= 0.5 {
        (v.round() as u64).min(MAX_COUNT)
    } else {
        0
    }
}

impl ShardGrowth {
    /// Requests in all.
    pub fn requests(&self) -> u64 {
        self.outcomes.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Latency cells: (requests, latency in ms) per bucket, then the requests without one.
    fn latency_cells(&self, total: u64) -> Vec<(u64, Option<f64>)> {
        let mut b = self.buckets.clone();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b.dedup_by(|x, y| x.0 == y.0);
        let mut cells = Vec::with_capacity(b.len() + 1);
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, cum) in &b {
            // A sum of cumulative buckets can dip where one sidecar restarted mid-window.
            let n = whole((cum - below).max(0.0));
            below = cum.max(below);
            cells.push((n, representative_ms(lower, le)));
            lower = le;
        }
        let with_latency = cells.iter().fold(0u64, |a, c| a.saturating_add(c.0));
        if with_latency > total {
            // More latencies than requests (a histogram and an outcome sum read a scrape
            // apart): the latencies keep their shape, scaled to the requests.
            let weights: Vec<u64> = cells.iter().map(|c| c.0).collect();
            for (c, n) in cells.iter_mut().zip(split(total, &weights)) {
                c.0 = n;
            }
        } else {
            cells.push((total - with_latency, None));
        }
        cells
    }

    /// Cache cells: hits, misses, then requests without a cache result.
    fn cache_cells(&self, total: u64) -> [(u64, Option<CacheResult>); 3] {
        let (mut h, mut m) = (self.hits, self.misses);
        if h.saturating_add(m) > total {
            let s = split(total, &[h, m]);
            (h, m) = (s[0], s[1]);
        }
        [
            (h, Some(CacheResult::Hit)),
            (m, Some(CacheResult::Miss)),
            (total - h - m, None),
        ]
    }

    /// Appends this shard's records: outcome, latency and cache totals exact (module docs).
    pub fn records(&self, group: &str, shard: &str, out: &mut Batch) {
        let total = self.requests();
        if total == 0 {
            return;
        }
        let mut latency = self.latency_cells(total);
        let mut cache = self.cache_cells(total);
        let mut obs = ObservationRef::new(group, shard);
        // Timeouts first, from the slowest bucket down: a request that timed out lasted until
        // its deadline, so it is among the slowest; the other outcomes share what is left in
        // proportion.
        let order = std::iter::once(Outcome::Timeout)
            .chain(Outcome::ALL.into_iter().filter(|o| *o != Outcome::Timeout));
        for outcome in order {
            let n = self.outcomes[outcome.index()];
            if n == 0 {
                continue;
            }
            obs.outcome = outcome;
            let left: Vec<u64> = latency.iter().map(|c| c.0).collect();
            let takes = if outcome == Outcome::Timeout {
                slowest_first(n, &latency)
            } else {
                split(n, &left)
            };
            for (j, take) in takes.into_iter().enumerate() {
                if take == 0 {
                    continue;
                }
                latency[j].0 -= take;
                obs.latency_ms = latency[j].1;
                let left: Vec<u64> = cache.iter().map(|c| c.0).collect();
                for (k, part) in split(take, &left).into_iter().enumerate() {
                    if part == 0 {
                        continue;
                    }
                    cache[k].0 -= part;
                    obs.cache = cache[k].1;
                    obs.count = part;
                    out.push(&obs);
                }
            }
        }
    }
}

/// `n` requests taken from the latency cells slowest first (cells with a latency, highest
/// first, then the cell without one); `n` is at most what the cells hold.
fn slowest_first(mut n: u64, cells: &[(u64, Option<f64>)]) -> Vec<u64> {
    let mut out = vec![0u64; cells.len()];
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by(|&a, &b| match (cells[a].1, cells[b].1) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    for j in order {
        let take = n.min(cells[j].0);
        out[j] = take;
        n -= take;
    }
    out
}

/// `total` split in proportion to `weights` (largest remainder), never more than a weight
/// when `total` is at most their sum; all of it to the last non-zero weight's neighbours when
/// the weights are all zero is not needed: then everything goes to the last cell.
pub fn split(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let mut out = vec![0u64; weights.len()];
    if weights.is_empty() {
        return out;
    }
    if sum == 0 {
        *out.last_mut().expect("not empty") = total;
        return out;
    }
    let mut given = 0u64;
    let mut remainders: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let exact = u128::from(total) * u128::from(w);
        out[i] = (exact / sum) as u64;
        given += out[i];
        remainders.push((exact % sum, i));
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((total - given) as usize) {
        out[i] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], v: f64) -> Series {
        Series {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>(),
            points: vec![(0.0, v)],
        }
    }

    #[test]
    fn split_is_exact_and_proportional() {
        assert_eq!(split(10, &[1, 1, 2]), vec![3, 2, 5]);
        assert_eq!(split(7, &[0, 0]), vec![0, 7]);
        assert_eq!(split(0, &[3, 4]), vec![0, 0]);
        assert_eq!(split(5, &[5, 0, 3]).iter().sum::<u64>(), 5);
        // Never more than a weight when the total fits.
        let w = [3, 1, 4, 1, 5, 9, 2, 6];
        for total in 0..=31u64 {
            let s = split(total, &w);
            assert_eq!(s.iter().sum::<u64>(), total);
            assert!(s.iter().zip(&w).all(|(a, b)| a <= b), "{total}: {s:?}");
        }
    }

    #[test]
    fn the_records_add_up_to_every_sum_exactly() {
        let g = ShardGrowth {
            outcomes: [70, 20, 7, 3, 0, 0],
            hits: 55,
            misses: 40,
            buckets: vec![
                (0.005, 30.0),
                (0.01, 61.0),
                (0.1, 90.0),
                (f64::INFINITY, 97.0),
            ],
        };
        let mut b = Batch::default();
        g.records("db", "s1", &mut b);
        let mut outcomes = [0u64; Outcome::COUNT];
        let (mut hits, mut misses, mut timed) = (0, 0, 0);
        let mut by_latency: BTreeMap<u64, u64> = BTreeMap::new();
        for o in b.iter() {
            outcomes[o.outcome.index()] += o.count;
            match o.cache {
                Some(CacheResult::Hit) => hits += o.count,
                Some(CacheResult::Miss) => misses += o.count,
                None => {}
            }
            if let Some(l) = o.latency_ms {
                timed += o.count;
                *by_latency.entry((l * 1000.0) as u64).or_default() += o.count;
            }
        }
        assert_eq!(outcomes, g.outcomes);
        assert_eq!((hits, misses, timed), (55, 40, 97));
        // Bucket middles: 2.5 ms, 7.5 ms, 55 ms, and the +Inf bucket at its lower bound.
        assert_eq!(
            by_latency.into_iter().collect::<Vec<_>>(),
            vec![(2500, 30), (7500, 31), (55000, 29), (100_000, 7)]
        );
        assert!(b.len() <= 4 * 5 * 3, "{}", b.len());
    }

    #[test]
    fn timeouts_take_the_slowest_latencies() {
        let g = ShardGrowth {
            outcomes: [90, 0, 10, 0, 0, 0],
            buckets: vec![(0.01, 90.0), (1.0, 95.0), (f64::INFINITY, 100.0)],
            ..ShardGrowth::default()
        };
        let mut b = Batch::default();
        g.records("db", "s1", &mut b);
        let mut timeouts: Vec<(u64, u64)> = b
            .iter()
            .filter(|o| o.outcome == Outcome::Timeout)
            .map(|o| (o.latency_ms.unwrap() as u64, o.count))
            .collect();
        timeouts.sort();
        // The five above 1 s, the five between 10 ms and 1 s; no success among them.
        assert_eq!(timeouts, [(505, 5), (1000, 5)]);
        assert_eq!(b.requests(), 100);
    }

    #[test]
    fn more_latencies_or_cache_results_than_requests_are_scaled_to_them() {
        let g = ShardGrowth {
            outcomes: [10, 0, 0, 0, 0, 0],
            hits: 8,
            misses: 8,
            buckets: vec![(0.01, 20.0), (f64::INFINITY, 20.0)],
        };
        let mut b = Batch::default();
        g.records("db", "s1", &mut b);
        assert_eq!(b.requests(), 10);
        assert!(
            b.iter()
                .all(|o| o.latency_ms.is_some() && o.cache.is_some())
        );
    }

    #[test]
    fn names_unescape_and_the_overflow_is_skipped() {
        let mut g = Growth::default();
        let mut skips = Vec::new();
        let all = |_: &str| true;
        g.add(
            Family::Requests,
            &[
                series(&[("group", "db"), ("shard", "s1"), ("outcome", "ok")], 5.0),
                series(
                    &[("group", "db"), ("shard", "s1"), ("outcome", "error")],
                    2.0,
                ),
                series(
                    &[("group", "db"), ("shard", "\\__other__"), ("outcome", "ok")],
                    1.0,
                ),
                series(
                    &[("group", "db"), ("shard", "__other__"), ("outcome", "ok")],
                    9.0,
                ),
                series(&[("group", "db"), ("outcome", "ok")], 9.0),
                series(
                    &[("group", "db"), ("shard", "s2"), ("outcome", "weird")],
                    9.0,
                ),
            ],
            0,
            &all,
            &mut |s| skips.push(s),
        );
        assert_eq!(
            skips,
            vec![Skip::Overflow, Skip::NoShard, Skip::UnknownLabel]
        );
        let s1 = &g.shards[&("db".to_owned(), "s1".to_owned())];
        assert_eq!(s1.outcomes[0], 5);
        assert_eq!(s1.outcomes[Outcome::Error.index()], 2);
        assert!(
            g.shards
                .contains_key(&("db".to_owned(), "__other__".to_owned()))
        );
        assert_eq!(g.requests(), 8);
    }

    #[test]
    fn keys_are_judged_on_their_certain_counts_and_the_keyed_requests_stay_whole() {
        let mut g = Growth::default();
        let all = |_: &str| true;
        let mut skips = Vec::new();
        for (family, labels, v) in [
            (
                Family::Keys,
                vec![("group", "db"), ("key", "(empty)")],
                830.0,
            ),
            (
                Family::Keys,
                vec![("group", "db"), ("key", "\\(empty)")],
                40.0,
            ),
            (
                Family::Keys,
                vec![("group", "db"), ("key", "__other__")],
                100.0,
            ),
            (Family::Keys, vec![("group", "db"), ("key", "tiny")], 3.0),
            (Family::KeysOvercount, vec![("group", "db")], 5.0),
            (Family::KeysUnlisted, vec![("group", "db")], 12.0),
        ] {
            g.add(family, &[series(&labels, v)], 0, &all, &mut |s| {
                skips.push(s)
            });
        }
        assert!(skips.is_empty(), "{skips:?}");
        let k = &g.keys["db"];
        assert_eq!((k.other, k.overcount, k.unlisted), (100, 5, 12));
        let mut b = Batch::default();
        g.records(&mut b);
        let counts: Vec<_> = b.key_counts().map(|c| (c.key, c.count)).collect();
        // The empty key and the literal "(empty)" stay apart; "tiny" is certain of nothing.
        assert_eq!(
            counts,
            [
                (Some(""), 825),
                (Some("(empty)"), 35),
                (None, 100 + 5 + 5 + 3)
            ]
        );
        assert_eq!(counts.iter().map(|c| c.1).sum::<u64>(), 830 + 40 + 100 + 3);
        assert_eq!(b.requests(), 0, "key counts are no shard's requests");
    }

    #[test]
    fn groups_of_other_instances_are_skipped() {
        let mut g = Growth::default();
        let mut skips = Vec::new();
        let only_db = |group: &str| group == "db";
        g.add(
            Family::Cache,
            &[
                series(&[("group", "db"), ("shard", "s1"), ("result", "hit")], 5.0),
                series(
                    &[("group", "ledger"), ("shard", "s1"), ("result", "hit")],
                    5.0,
                ),
            ],
            0,
            &only_db,
            &mut |s| skips.push(s),
        );
        assert_eq!(skips, vec![Skip::OtherInstance]);
        assert_eq!(g.shards.len(), 1);
    }
}
