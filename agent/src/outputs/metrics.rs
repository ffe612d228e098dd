//! The `/metrics` page: the skew series rendered from the latest [`WindowSnapshot`] at scrape
//! time, the firing alerts, the self-metrics registry and the cumulative counters, written by
//! one function, [`render`].
//!
//! The derived series (Gini, shares, p99, key shares) are written straight from the snapshot in
//! text format 0.0.4, so a shard or key that left the snapshot leaves no stale series and a
//! scrape costs one pass over the snapshot. `skewwatch_alert_firing` is written the same way
//! from the latest active alerts. Label values are escaped; the empty key is rendered
//! `(empty)` because Prometheus drops empty label values.
//!
//! The cumulative counters and the latency histogram that add up across sidecars come from the
//! totals the pipeline publishes after each window ([`super::totals`]).
//!
//! [`Scrapes`] numbers the page's reads, so a stopping agent can wait for one that read its
//! last counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::{Encoder, Registry, TextEncoder};
use skewwatch_detectors::alert::{Alert, AlertState};
use std::borrow::Cow;

use skewwatch_detectors::observation::{OTHER_LABEL, key_label, label_value};
use skewwatch_detectors::snapshot::{GroupSnapshot, ShardSnapshot, WindowSnapshot};
use skewwatch_detectors::whatif::{CapacitySource, GroupWhatIf, PolicyFigures, WhatIfWindow};
use tokio::sync::watch;

use super::config::Profile;
use super::text_format::{escape_into, group_label, header, shard_label, write_value};
use super::totals::{self, Totals};

/// The content type of text format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The reads of the page, numbered in the order they began: what a stopping agent asks to
/// know that a scraper has read the counters it published last ([`Scrapes::served_since`]).
///
/// A read takes its number ([`Scrapes::begin`]) before it reads the views, and reports it once
/// the page is written ([`Scrapes::served`]). So a read whose number is at least what
/// [`Scrapes::begun`] said after a view was published read that view, whatever the order in
/// which reads finish.
#[derive(Debug, Clone)]
pub struct Scrapes {
    /// Reads begun so far; the next read's number.
    begun: Arc<AtomicU64>,
    /// One more than the highest number of a read that has been written.
    served: Arc<watch::Sender<u64>>,
}

impl Default for Scrapes {
    fn default() -> Self {
        Scrapes {
            begun: Arc::new(AtomicU64::new(0)),
            served: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Scrapes {
    /// A read begins, before it reads any view: its number.
    pub fn begin(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::AcqRel)
    }

    /// The read numbered `n` has written its page.
    pub fn served(&self, n: u64) {
        self.served.send_if_modified(|highest| {
            let modified = n + 1 > *highest;
            if modified {
                *highest = n + 1;
            }
            modified
        });
    }

    /// Reads begun so far: nonzero once anyone has read the page.
    pub fn begun(&self) -> u64 {
        self.begun.load(Ordering::Acquire)
    }

    /// Waits until a read numbered `first` or later has written its page.
    pub async fn served_since(&self, first: u64) {
        let mut rx = self.served.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = rx.wait_for(|highest| *highest > first).await;
    }
}

/// Renders the whole `/metrics` page: the skew series of `snapshot` (with at most
/// `exported_keys` keys per group), `skewwatch_alert_firing`, the self-metrics of `registry`,
/// then the cumulative counters of `totals`.
pub fn render(
    registry: &Registry,
    snapshot: &WindowSnapshot,
    alerts: &[Alert],
    totals: &Totals,
    exported_keys: usize,
) -> String {
    let mut out = String::with_capacity(4096 + snapshot.groups.len() * 256 + alerts.len() * 128);
    render_snapshot(&mut out, snapshot, exported_keys, totals.profile());
    render_alerts(&mut out, alerts);
    let mut buf = Vec::new();
    // Encoding into a Vec cannot fail for well-formed families.
    if TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .is_ok()
    {
        out.push_str(&String::from_utf8_lossy(&buf));
    }
    totals::render(&mut out, totals);
    out
}

/// One gauge family being written.
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &'static str, help: &str) -> Self {
        header(out, name, help, "gauge");
        Family { out, name }
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(self.name);
        if labels.is_empty() {
            self.out.push(' ');
            write_value(self.out, value);
            self.out.push('\n');
            return;
        }
        self.out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push_str(k);
            self.out.push_str("=\"");
            escape_into(self.out, v);
            self.out.push('"');
        }
        self.out.push_str("} ");
        write_value(self.out, value);
        self.out.push('\n');
    }
}

type GroupValue = fn(&GroupSnapshot) -> Option<f64>;

const GROUP_GAUGES: &[(&str, &str, GroupValue)] = &[
    (
        "skewwatch_gini_ratio",
        "Bias-corrected Gini coefficient of per-shard request load in the last window (0 even, 1 all on one shard).",
        |g| g.skew.as_ref().map(|s| s.gini),
    ),
    (
        "skewwatch_gini_noise_floor_ratio",
        "Expected corrected Gini of the last window under pure Poisson noise at its volume, 1/sqrt(pi*mean).",
        |g| g.skew.as_ref().map(|s| s.gini_noise_floor),
    ),
    (
        "skewwatch_peak_to_mean_ratio",
        "Busiest shard's load over the mean shard load in the last window.",
        |g| g.skew.as_ref().map(|s| s.peak_to_mean),
    ),
    (
        "skewwatch_load_cv_ratio",
        "Coefficient of variation of per-shard load in the last window.",
        |g| g.skew.as_ref().map(|s| s.cv),
    ),
    (
        "skewwatch_load_cv_excess_ratio",
        "Coefficient of variation of per-shard load beyond Poisson sampling noise, sqrt(max(0, cv^2 - 1/mean)).",
        |g| g.skew.as_ref().map(|s| s.cv_excess),
    ),
    (
        "skewwatch_hoover_ratio",
        "Hoover index: the fraction of load that would have to move to even out the shards.",
        |g| g.skew.as_ref().map(|s| s.hoover),
    ),
    (
        "skewwatch_skew_beyond_noise",
        "1 when the dispersion test finds per-shard load more uneven than Poisson noise (alpha 0.001), else 0.",
        |g| {
            g.skew
                .as_ref()
                .and_then(|s| s.dispersion)
                .map(|d| f64::from(u8::from(d.beyond_noise)))
        },
    ),
    (
        "skewwatch_group_shards",
        "Shards tracked in the last window, including idle ones, excluding __other__.",
        |g| Some(g.tracked_shards().count() as f64),
    ),
    (
        "skewwatch_requests_per_second",
        "Requests per second over the last window, whole group.",
        |g| Some(g.traffic.requests_per_second),
    ),
    (
        "skewwatch_error_ratio",
        "Share of the group's requests in the last window whose outcome was not ok.",
        |g| g.traffic.error_ratio,
    ),
    (
        "skewwatch_cache_hit_ratio",
        "Look-aside cache hits over hits plus misses in the last window, whole group.",
        |g| g.traffic.cache_hit_ratio,
    ),
    (
        "skewwatch_latency_p99_seconds",
        "99th percentile latency of the group's requests in the last window, from merged histograms.",
        |g| g.traffic.latency.map(|l| l.p99_ms / 1000.0),
    ),
];

type ShardValue = fn(&ShardSnapshot) -> Option<f64>;

const SHARD_GAUGES: &[(&str, &str, ShardValue)] = &[
    (
        "skewwatch_shard_share_ratio",
        "Each shard's share of the group's requests in the last window.",
        |s| Some(s.share),
    ),
    (
        "skewwatch_shard_requests_per_second",
        "Requests per second to each shard over the last window.",
        |s| Some(s.traffic.requests_per_second),
    ),
    (
        "skewwatch_shard_latency_p99_seconds",
        "99th percentile latency of each shard's requests in the last window.",
        |s| s.traffic.latency.map(|l| l.p99_ms / 1000.0),
    ),
    (
        "skewwatch_shard_error_ratio",
        "Share of each shard's requests in the last window whose outcome was not ok.",
        |s| s.traffic.error_ratio,
    ),
    (
        "skewwatch_shard_cache_hit_ratio",
        "Look-aside cache hits over hits plus misses for each shard in the last window.",
        |s| s.traffic.cache_hit_ratio,
    ),
    (
        "skewwatch_shard_inflight",
        "Highest in-flight requests each shard reported in the last window (skewwatch.inflight gauge or NDJSON inflight); absent for shards that report none.",
        |s| s.inflight,
    ),
    (
        "skewwatch_shard_headroom_ratio",
        "1 minus the highest utilisation each shard reported in the last window (skewwatch.utilisation gauge or NDJSON utilisation); absent for shards that report none.",
        |s| s.utilisation.map(|u| (1.0 - u).max(0.0)),
    ),
];

/// Writes the derived skew series of `snap`: the group gauges, the top-k shares, the shard
/// gauges (not in the fleet profile) and the key shares, in that order.
pub fn render_snapshot(
    out: &mut String,
    snap: &WindowSnapshot,
    exported_keys: usize,
    profile: Profile,
) {
    for &(name, help, value) in GROUP_GAUGES {
        let mut f = Family::new(out, name, help);
        for g in &snap.groups {
            if let Some(v) = value(g) {
                f.sample(&[("group", &group_label(g))], v);
            }
        }
    }
    render_topk_shares(out, snap);
    // A fleet instance recomputes every per-shard figure from the summed counters; the group
    // gauges and key shares stay, a few series per group, for the sidecar's own view.
    let shard_gauges = if profile == Profile::Full {
        SHARD_GAUGES
    } else {
        &[]
    };
    for &(name, help, value) in shard_gauges {
        let mut f = Family::new(out, name, help);
        for g in &snap.groups {
            let group = group_label(g);
            for s in &g.shards {
                if let Some(v) = value(s) {
                    f.sample(&[("group", &group), ("shard", &shard_label(s))], v);
                }
            }
        }
    }
    render_key_shares(out, snap, exported_keys);
    if let Some(w) = &snap.whatif {
        render_whatif(out, w);
    }
}

type PolicyValue = fn(&PolicyFigures) -> Option<f64>;

/// The what-if families per group and policy.
const WHATIF_POLICY_GAUGES: &[(&str, &str, PolicyValue)] = &[
    (
        "skewwatch_whatif_cache_hit_ratio",
        "Predicted cache hit ratio of the group's requests with a cache key in the last window, had the cache run the policy.",
        |f| Some(f.hit_ratio),
    ),
    (
        "skewwatch_whatif_backend_call_ratio",
        "Predicted backend calls per request of the group's requests with a cache key in the last window, had the cache run the policy.",
        |f| Some(f.backend_calls_per_request),
    ),
    (
        "skewwatch_whatif_error_ratio",
        "Predicted share of the group's requests with a cache key answered with an error in the last window, had the cache run the policy: the calls beyond a shard's known or learned capacity fail, elsewhere the backend's observed failures are replayed.",
        |f| f.error_ratio,
    ),
    (
        "skewwatch_whatif_error_bound_ratio",
        "About two standard errors (a 95% bound) of the predicted ratios due to sampling the cache keys; 0 when every key is simulated.",
        |f| Some(f.error_bound),
    ),
];

/// The what-if families of each group's busiest shard, per policy.
const WHATIF_HOT_SHARD_GAUGES: &[(&str, &str, PolicyValue)] = &[
    (
        "skewwatch_whatif_hot_shard_backend_call_ratio",
        "Predicted backend calls per request of the group's busiest shard in the last window, had the cache run the policy.",
        |f| Some(f.backend_calls_per_request),
    ),
    (
        "skewwatch_whatif_hot_shard_error_ratio",
        "Predicted share of the busiest shard's requests answered with an error in the last window, had the cache run the policy (from the shard's capacity where it is known).",
        |f| f.error_ratio,
    ),
];

/// A what-if shard's label: the overflow's own name, or the shard's name escaped.
fn whatif_shard_label(shard: &str) -> Cow<'_, str> {
    if shard == OTHER_LABEL {
        Cow::Borrowed(OTHER_LABEL)
    } else {
        label_value(shard)
    }
}

/// Writes the what-if series: per group and policy the predictions, the hot shard's
/// predicted backend calls, and how the simulation of the cache as configured fits it.
fn render_whatif(out: &mut String, w: &WhatIfWindow) {
    for &(name, help, value) in WHATIF_POLICY_GAUGES {
        let mut f = Family::new(out, name, help);
        for g in &w.groups {
            let group = label_value(&g.group);
            for (policy, figures) in w.policies.iter().zip(&g.policies) {
                if let Some(v) = value(figures) {
                    f.sample(&[("group", &group), ("policy", policy)], v);
                }
            }
        }
    }
    for &(name, help, value) in WHATIF_HOT_SHARD_GAUGES {
        let mut f = Family::new(out, name, help);
        for g in &w.groups {
            let Some(hot) = g.hot_shard() else { continue };
            let (group, shard) = (label_value(&g.group), whatif_shard_label(&hot.shard));
            for (policy, figures) in w.policies.iter().zip(&hot.policies) {
                if let Some(v) = value(figures) {
                    f.sample(
                        &[("group", &group), ("shard", &shard), ("policy", policy)],
                        v,
                    );
                }
            }
        }
    }
    let mut f = Family::new(
        out,
        "skewwatch_whatif_backend_capacity_calls_per_second",
        "Backend calls a second the group's busiest shard with a known capacity answers before it fails: configured (whatif.backend_capacities) or learned from a window where it failed.",
    );
    for g in &w.groups {
        let Some(s) = g.capacity_shard() else {
            continue;
        };
        let Some(c) = s.capacity else { continue };
        let source = match c.source {
            CapacitySource::Configured => "configured",
            CapacitySource::Learned => "learned",
        };
        let (group, shard) = (label_value(&g.group), whatif_shard_label(&s.shard));
        f.sample(
            &[("group", &group), ("shard", &shard), ("source", source)],
            c.calls_per_second,
        );
    }
    type GroupValue = fn(&GroupWhatIf) -> Option<f64>;
    const GROUP: &[(&str, &str, GroupValue)] = &[
        (
            "skewwatch_whatif_check_error_ratio",
            "The simulated hit ratio of the cache as configured minus the hit ratio the cache reported, last window: near 0 when the whatif settings describe the cache.",
            |g| g.check_error(),
        ),
        (
            "skewwatch_whatif_sample_rate_ratio",
            "Share of the group's cache keys the what-if simulation holds (1 until the memory bound lowers it).",
            |g| Some(g.sample_rate),
        ),
        (
            "skewwatch_whatif_sampled_keys",
            "Cache keys the group's what-if simulation holds.",
            |g| Some(g.sampled_keys as f64),
        ),
    ];
    for &(name, help, value) in GROUP {
        let mut f = Family::new(out, name, help);
        for g in &w.groups {
            if let Some(v) = value(g) {
                f.sample(&[("group", &label_value(&g.group))], v);
            }
        }
    }
    Family::new(
        out,
        "skewwatch_whatif_memory_bytes",
        "Bytes the what-if simulations hold, at the last window's close.",
    )
    .sample(&[], w.heap_bytes as f64);
}

/// Writes `skewwatch_topk_share_ratio`: k=1, and k=ceil(10% of shards) when that is not 1.
fn render_topk_shares(out: &mut String, snap: &WindowSnapshot) {
    let mut f = Family::new(
        out,
        "skewwatch_topk_share_ratio",
        "Share of the group's requests on its k busiest shards in the last window (k=1 and k=ceil(10% of shards)).",
    );
    for g in &snap.groups {
        if let Some(s) = &g.skew {
            let group = group_label(g);
            f.sample(&[("group", &group), ("k", "1")], s.top1_share);
            if s.topk != 1 {
                f.sample(
                    &[("group", &group), ("k", &s.topk.to_string())],
                    s.topk_share,
                );
            }
        }
    }
}

/// Writes `skewwatch_key_share_ratio`: the first `exported_keys` top keys of each group with
/// traffic, and `__other__` for the rest of its keyed requests.
fn render_key_shares(out: &mut String, snap: &WindowSnapshot, exported_keys: usize) {
    let mut f = Family::new(
        out,
        "skewwatch_key_share_ratio",
        "Top keys' share of the group's requests in the last window (upper-bound estimate); key=\"(empty)\" is the empty key, key=\"__other__\" every other keyed request.",
    );
    for g in &snap.groups {
        if g.requests == 0 {
            continue;
        }
        let group = group_label(g);
        let mut shown = 0.0;
        for k in g.top_keys.iter().take(exported_keys) {
            f.sample(&[("group", &group), ("key", &key_label(&k.key))], k.share);
            shown += k.requests as f64;
        }
        let rest = (g.keyed_requests as f64 - shown).max(0.0) / g.requests as f64;
        if rest > 0.0 {
            f.sample(&[("group", &group), ("key", OTHER_LABEL)], rest);
        }
    }
}

/// The alert labels `skewwatch_alert_firing` carries, in this order. Other labels stay out so
/// the series set is bounded by the detectors' caps, whatever labels a detector adds.
pub const ALERT_FIRING_LABELS: [&str; 5] = ["alertname", "group", "shard", "key", "severity"];

/// Writes `skewwatch_alert_firing` = 1 for every firing alert.
pub fn render_alerts(out: &mut String, alerts: &[Alert]) {
    let mut f = Family::new(
        out,
        "skewwatch_alert_firing",
        "1 for each firing skewwatch alert, by alertname, group, shard, key and severity (the labels an alert has).",
    );
    for a in alerts.iter().filter(|a| a.state == AlertState::Firing) {
        let labels: Vec<(&str, &str)> = ALERT_FIRING_LABELS
            .iter()
            .filter_map(|&name| a.labels.get(name).map(|v| (name, v.as_str())))
            .collect();
        f.sample(&labels, 1.0);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use skewwatch_detectors::observation::{ObservationRef, ReadingKind, ReadingRef};
    use skewwatch_detectors::window::{WindowConfig, Windows};

    #[tokio::test(start_paused = true)]
    async fn a_read_that_began_before_the_last_counts_does_not_end_the_wait() {
        let scrapes = Scrapes::default();
        assert_eq!(scrapes.begun(), 0);
        let early = scrapes.begin();
        // The last counts are published here; reads numbered from `first` on see them.
        let first = scrapes.begun();
        let waiting = tokio::spawn({
            let s = scrapes.clone();
            async move { s.served_since(first).await }
        });
        let late = scrapes.begin();
        scrapes.served(early);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(
            !waiting.is_finished(),
            "a read of the earlier counts ended the wait"
        );
        scrapes.served(late);
        tokio::time::timeout(std::time::Duration::from_secs(1), waiting)
            .await
            .expect("the read of the last counts did not end the wait")
            .unwrap();
    }

    #[test]
    fn label_values_are_escaped_and_the_empty_key_is_rendered() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut o = ObservationRef::new("db", "a\"b\\c\nd");
        o.key = Some("");
        w.record(&o);
        let snap = w.close(10.0);
        let mut out = String::new();
        render_snapshot(&mut out, &snap, 10, Profile::Full);
        assert!(out.contains(r#"shard="a\"b\\c\nd""#), "{out}");
        assert!(out.contains(r#"skewwatch_key_share_ratio{group="db",key="(empty)"} 1"#));
    }

    #[test]
    fn reported_saturation_is_exported_per_shard_and_only_where_reported() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        for (kind, value) in [
            (ReadingKind::Utilisation, 0.85),
            (ReadingKind::Inflight, 12.0),
        ] {
            w.read(&ReadingRef {
                ts: None,
                group: "db",
                shard: "s1",
                kind,
                value,
            });
        }
        w.record(&ObservationRef::new("db", "s2"));
        let snap = w.close(10.0);
        let mut out = String::new();
        render_snapshot(&mut out, &snap, 10, Profile::Full);
        let scrape = crate::client::text::Scrape::parse(&out).unwrap();
        let s1 = [("group", "db"), ("shard", "s1")];
        let s2 = [("group", "db"), ("shard", "s2")];
        let headroom = scrape.get("skewwatch_shard_headroom_ratio", &s1).unwrap();
        assert!((headroom - 0.15).abs() < 1e-9, "{headroom}");
        assert_eq!(scrape.get("skewwatch_shard_inflight", &s1), Some(12.0));
        assert_eq!(scrape.get("skewwatch_shard_headroom_ratio", &s2), None);
        assert_eq!(scrape.get("skewwatch_shard_inflight", &s2), None);
    }

    /// The page of one group whose shard `s0` has successes and errors, cache hits and misses
    /// and latencies, and whose shard `s1` has one success, on the default configuration of
    /// `profile`, as (samples per shard, every sample line, the page).
    fn page(profile: Profile) -> (BTreeMap<String, usize>, Vec<String>, String) {
        use crate::outputs::config::ExpositionConfig;
        use crate::outputs::totals::TotalsConfig;
        use skewwatch_detectors::observation::{CacheResult, Outcome};
        let window = WindowConfig {
            latency_buckets_secs: profile.default_latency_buckets_secs(),
            ..WindowConfig::default()
        };
        let exposition = ExpositionConfig {
            profile,
            ..ExpositionConfig::default()
        };
        let mut w = Windows::new(window.clone(), 0.0);
        for (i, (outcome, cache)) in [
            (Outcome::Ok, CacheResult::Hit),
            (Outcome::Ok, CacheResult::Miss),
            (Outcome::Error, CacheResult::Miss),
        ]
        .into_iter()
        .enumerate()
        {
            let mut o = ObservationRef::new("db", "s0");
            o.outcome = outcome;
            o.cache = Some(cache);
            o.latency_ms = Some(3.0 * 10f64.powi(i as i32));
            o.key = Some("k");
            w.record(&o);
        }
        w.record(&ObservationRef::new("db", "s1"));
        let snap = w.close(10.0);
        let mut totals = Totals::new(TotalsConfig::from_parts(&window, &exposition));
        totals.add(&snap);
        let out = render(&Registry::new(), &snap, &[], &totals, 10);
        let samples: Vec<String> = out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        let mut per_shard = BTreeMap::new();
        for l in &samples {
            for shard in ["s0", "s1"] {
                if l.contains(&format!("shard=\"{shard}\"")) {
                    *per_shard.entry(shard.to_owned()).or_default() += 1;
                }
            }
        }
        (per_shard, samples, out)
    }

    #[test]
    fn the_full_page_has_every_shard_gauge_every_outcome_and_the_histograms_sum_and_count() {
        let (per_shard, samples, out) = page(Profile::Full);
        for name in [
            "skewwatch_shard_share_ratio",
            "skewwatch_shard_error_ratio",
            "skewwatch_shard_latency_p99_seconds",
            "skewwatch_shard_request_duration_seconds_sum",
            "skewwatch_shard_request_duration_seconds_count",
            "skewwatch_gini_ratio",
        ] {
            assert!(samples.iter().any(|l| l.starts_with(name)), "{name}\n{out}");
        }
        assert!(out.contains(r#"requests_total{group="db",shard="s1",outcome="timeout"} 0"#));
        // 6 outcomes, 2 cache results, 13 bounds, +Inf, _sum, _count; 5 gauges.
        assert_eq!(per_shard["s0"], 6 + 2 + 16 + 5, "{out}");
    }

    #[test]
    fn the_fleet_page_keeps_what_sums_within_twelve_series_per_shard() {
        let (per_shard, samples, out) = page(Profile::Fleet);
        // What a fleet instance reads, and what is per group rather than per shard, stays.
        for line in [
            r#"skewwatch_shard_requests_total{group="db",shard="s0",outcome="ok"} 2"#,
            r#"skewwatch_shard_requests_total{group="db",shard="s0",outcome="error"} 1"#,
            r#"skewwatch_shard_requests_total{group="db",shard="s1",outcome="ok"} 1"#,
            r#"skewwatch_shard_cache_requests_total{group="db",shard="s0",result="miss"} 2"#,
            r#"skewwatch_shard_request_duration_seconds_bucket{group="db",shard="s0",le="0.0025"} 0"#,
            r#"skewwatch_shard_request_duration_seconds_bucket{group="db",shard="s0",le="0.01"} 1"#,
            r#"skewwatch_shard_request_duration_seconds_bucket{group="db",shard="s0",le="+Inf"} 3"#,
            r#"skewwatch_key_requests_total{group="db",key="k"} 3"#,
            r#"skewwatch_key_unlisted_bound_total{group="db"} 0"#,
            r#"skewwatch_requests_per_second{group="db"} 0.4"#,
            r#"skewwatch_key_share_ratio{group="db",key="k"} 0.75"#,
        ] {
            assert!(samples.iter().any(|l| l == line), "{line}\n{out}");
        }
        // Nothing the fleet recomputes per shard, no class a shard never had, no _sum or
        // _count (the +Inf bucket is the count).
        for gone in [
            "skewwatch_shard_share_ratio",
            "skewwatch_shard_requests_per_second",
            "skewwatch_shard_error_ratio",
            "skewwatch_shard_latency_p99_seconds",
            "skewwatch_shard_cache_hit_ratio",
            "skewwatch_shard_request_duration_seconds_sum",
            "skewwatch_shard_request_duration_seconds_count",
        ] {
            assert!(
                !samples.iter().any(|l| l.starts_with(gone)),
                "{gone}\n{out}"
            );
        }
        assert!(!out.contains("outcome=\"timeout\""), "{out}");
        // The budget: successes and errors, hits and misses, 7 bounds and +Inf.
        assert_eq!(per_shard["s0"], 2 + 2 + 8, "{out}");
        assert!(per_shard["s0"] <= 12);
        assert_eq!(per_shard["s1"], 1, "{out}");
    }

    #[test]
    fn alert_firing_has_one_series_per_firing_alert_with_bounded_labels() {
        use skewwatch_detectors::alert::Labels;
        let alert = |state, pairs: &[(&str, &str)]| Alert {
            labels: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Labels>(),
            annotations: Labels::new(),
            state,
            active_at: 0.0,
            fired_at: None,
            last_true_at: 0.0,
        };
        let alerts = [
            alert(
                AlertState::Firing,
                &[
                    ("alertname", "HotShard"),
                    ("group", "db"),
                    ("shard", "s1"),
                    ("severity", "critical"),
                    ("dimension", "requests"),
                ],
            ),
            alert(
                AlertState::Pending,
                &[("alertname", "HotShard"), ("group", "db"), ("shard", "s2")],
            ),
            alert(
                AlertState::Firing,
                &[
                    ("alertname", "ErrorSurge"),
                    ("group", "db"),
                    ("severity", "warning"),
                ],
            ),
        ];
        let mut out = String::new();
        render_alerts(&mut out, &alerts);
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                r#"skewwatch_alert_firing{alertname="HotShard",group="db",shard="s1",severity="critical"} 1"#,
                r#"skewwatch_alert_firing{alertname="ErrorSurge",group="db",severity="warning"} 1"#,
            ]
        );
    }
}
