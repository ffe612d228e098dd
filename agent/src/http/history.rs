//! `GET /api/v1/history?group=&windows=&shards=`: what the live view draws, from the history
//! ring, bounded.
//!
//! One group per answer (the busiest of the latest window when `group` is not given): per
//! window its skew statistics with their noise floors and the cache loop figures, and one cell
//! per shard row. Rows are the group's shards, busiest in the latest window first, at most
//! `shards` of them (default [`DEFAULT_SHARDS`], at most [`crate::outputs::history::MAX_SHARDS`]); at most
//! `windows` windows, the newest (default and most: the ring's size). The current top keys of
//! the group and of each row's shard come from the latest snapshot, with their certified lower
//! bounds. The answer's size is therefore bounded by windows × shards, whatever the agent holds.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use skewwatch_detectors::observation::key_label;
use skewwatch_detectors::snapshot::{KeyShare, WindowSnapshot};
use skewwatch_detectors::whatif::{GroupWhatIf, Policy, PolicyFigures};

use super::ViewState;
use crate::outputs::history::{GroupPoint, History, MAX_SHARDS, ShardPoint, WindowPoint};

/// Shard rows when the request does not say.
pub const DEFAULT_SHARDS: usize = 50;
/// Keys listed per shard row.
pub const KEYS_PER_SHARD: usize = 5;

/// The query string.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// The group; the busiest of the latest window when absent.
    pub group: Option<String>,
    /// The newest windows to answer with.
    pub windows: Option<usize>,
    /// Shard rows.
    pub shards: Option<usize>,
}

/// The answer.
#[derive(Debug, Serialize)]
pub struct HistoryReply<'a> {
    version: &'static str,
    window_secs: f64,
    /// The ring's size (`ui.history_windows`).
    capacity: usize,
    /// Every group of the latest window, busiest first: the page's selector.
    groups: Vec<&'a str>,
    /// The group answered; `None` when the agent has seen no group.
    group: Option<&'a str>,
    /// Row names, busiest in the latest window first.
    shards: Vec<&'a str>,
    /// Shards of the group in the latest window, rows or not.
    shards_total: usize,
    windows: Vec<WindowView>,
    /// The cache loop now, when the group has a cache.
    cache: Option<CacheView>,
    /// The group's current top keys.
    top_keys: Vec<KeyView<'a>>,
    /// The top keys are exact within their bounds (no key could be missing).
    keys_certified: bool,
    /// Each row's current top keys, in row order.
    shard_keys: Vec<Vec<KeyView<'a>>>,
    /// The what-if simulation of the group's cache in the latest window, when its records
    /// name a cache key: hit ratio against TTL.
    whatif: Option<WhatIfView<'a>>,
}

/// One window of the group; figures rounded to five decimals.
#[derive(Debug, Serialize)]
struct WindowView {
    start: f64,
    end: f64,
    requests: u64,
    requests_per_second: f64,
    fair_share: f64,
    gini: Option<f64>,
    gini_noise_floor: Option<f64>,
    top1_share: Option<f64>,
    top1_noise_floor: Option<f64>,
    error_ratio: Option<f64>,
    cache_hit_ratio: Option<f64>,
    backend_calls_per_request: Option<f64>,
    p99_ms: Option<f64>,
    /// Per row: `[share, requests/s, error ratio, cache hit ratio, p99 ms]`, or null when the
    /// shard was not among the window's busiest (or absent).
    cells: Vec<Option<Cell>>,
}

type Cell = (f64, f64, Option<f64>, Option<f64>, Option<f64>);

/// The cache loop: the figures of the newest window with traffic and how far backend calls per request have risen over
/// the calmest window answered.
#[derive(Debug, Serialize)]
struct CacheView {
    hit_ratio: Option<f64>,
    backend_calls_per_request: f64,
    calmest_backend_calls_per_request: f64,
    /// `backend_calls_per_request / calmest_backend_calls_per_request`; `None` when the
    /// calmest is zero.
    amplification: Option<f64>,
}

/// The latest window's what-if predictions for the group, as a curve of hit ratio against
/// TTL. The latest window, not a pool of the ring's: the page and `top` show the cache now,
/// and every point carries the sample's bound for that window. Figures rounded to five
/// decimals.
#[derive(Debug, Serialize)]
struct WhatIfView<'a> {
    /// Requests with a cache key in the window.
    requests: u64,
    /// The cache's own hit ratio over the requests that reported a result.
    cache_hit_ratio: Option<f64>,
    /// The observed policy's simulated hit ratio minus the cache's own.
    check_error: Option<f64>,
    /// The share of keys simulated.
    sample_rate: f64,
    /// The cache as configured and every candidate that changes only its TTL, shortest TTL
    /// first (the observed point before a candidate of the same TTL).
    ttl_curve: Vec<PolicyPoint<'a>>,
    /// The other candidates (serve-stale, negative caching, a capacity, combinations), in
    /// the configured order: points beside the curve, at their own TTL.
    others: Vec<PolicyPoint<'a>>,
}

/// One policy's prediction, placed at its TTL.
#[derive(Debug, Serialize, PartialEq)]
struct PolicyPoint<'a> {
    /// Its written form (`observed`, `ttl=20m`, `serve-stale`).
    policy: &'a str,
    /// The TTL of an `ok` answer, seconds.
    ttl_secs: f64,
    /// The cache as configured.
    observed: bool,
    hit_ratio: f64,
    backend_calls_per_request: f64,
    /// The sample's error bound of both (about 95%).
    error_bound: f64,
}

#[derive(Debug, Serialize)]
struct KeyView<'a> {
    /// The key as sent; `""` is the empty key.
    key: &'a str,
    /// How to show it: `(empty)` for the empty key.
    label: String,
    /// Upper bound of its requests.
    requests: u64,
    /// Certified lower bound.
    lower_bound: u64,
    /// Upper-bound share.
    share: f64,
}

/// The handler.
pub async fn history(
    State(s): State<ViewState>,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return (
            StatusCode::BAD_REQUEST,
            format!("query parameters: group=<name>, windows=<1..>, shards=<1..={MAX_SHARDS}>\n"),
        )
            .into_response();
    };
    let history = s.history.borrow().clone();
    let snap = s.snapshots.borrow().clone();
    let reply = reply(&history, &snap, &q, s.window_secs);
    axum::Json(reply).into_response()
}

/// The answer for `q` from a published ring and the latest snapshot.
pub fn reply<'a>(
    history: &'a History,
    snap: &'a WindowSnapshot,
    q: &'a HistoryQuery,
    window_secs: f64,
) -> HistoryReply<'a> {
    let windows = q
        .windows
        .unwrap_or(history.capacity)
        .clamp(1, history.windows.len().max(1));
    let points = &history.windows[history.windows.len().saturating_sub(windows)..];
    let latest = points.last().map(|w| &**w);
    let groups = group_names(latest);
    let group = q.group.as_deref().or(groups.first().copied());
    let rows_wanted = q.shards.unwrap_or(DEFAULT_SHARDS).clamp(1, MAX_SHARDS);
    let found: Vec<Option<&GroupPoint>> = points
        .iter()
        .map(|w| group.and_then(|g| w.groups.iter().find(|p| &*p.group == g)))
        .collect();
    let shards = rows(&found, rows_wanted);
    let current = group.and_then(|g| snap.group(g));
    HistoryReply {
        version: env!("CARGO_PKG_VERSION"),
        window_secs,
        capacity: history.capacity,
        groups,
        group: group.map(|g| {
            // Borrow the name from the ring when it is there, else from the query.
            found.iter().flatten().next().map_or(g, |p| &*p.group)
        }),
        shards_total: found
            .last()
            .copied()
            .flatten()
            .map_or(0, |g| g.shards_total),
        windows: points
            .iter()
            .zip(&found)
            .filter_map(|(w, g)| g.map(|g| window_view(w, g, &shards)))
            .collect(),
        cache: cache_view(&found),
        top_keys: current.map_or_else(Vec::new, |g| keys(&g.top_keys, usize::MAX)),
        keys_certified: current.is_some_and(|g| g.keys_certified),
        shard_keys: shards
            .iter()
            .map(|name| {
                current
                    .and_then(|g| g.shard(name))
                    .map_or_else(Vec::new, |s| keys(&s.top_keys, KEYS_PER_SHARD))
            })
            .collect(),
        shards,
        whatif: group.and_then(|g| whatif_view(snap, g)),
    }
}

/// The what-if curve of `group` in the latest snapshot; `None` when it simulated none.
fn whatif_view<'a>(snap: &'a WindowSnapshot, group: &str) -> Option<WhatIfView<'a>> {
    let g = snap.whatif.as_deref()?.group(group)?;
    let policies = snap.whatif_policies.as_deref()?;
    Some(curve(policies, g))
}

/// Splits the predictions of `g` (in `policies`' order, the observed policy first) into the
/// TTL curve and the other candidates.
fn curve<'a>(policies: &'a [Policy], g: &'a GroupWhatIf) -> WhatIfView<'a> {
    let observed = policies.first();
    let ttl_only = |p: &Policy| {
        observed.is_some_and(|o| {
            p.negative_ttl_secs == o.negative_ttl_secs
                && p.stale_on_error == o.stale_on_error
                && p.capacity_entries == o.capacity_entries
        })
    };
    let point = |(i, (p, f)): (usize, (&'a Policy, &PolicyFigures))| PolicyPoint {
        policy: &p.name,
        ttl_secs: p.ttl_secs,
        observed: i == 0,
        hit_ratio: round(f.hit_ratio),
        backend_calls_per_request: round(f.backend_calls_per_request),
        error_bound: round(f.error_bound),
    };
    let (on_curve, others): (Vec<_>, Vec<_>) = policies
        .iter()
        .zip(&g.policies)
        .enumerate()
        .map(|(i, pf)| (ttl_only(pf.0), point((i, pf))))
        .partition(|(on_curve, _)| *on_curve);
    let mut ttl_curve: Vec<PolicyPoint> = on_curve.into_iter().map(|(_, p)| p).collect();
    // A stable sort: the observed point stays before a candidate of the same TTL.
    ttl_curve.sort_by(|a, b| a.ttl_secs.total_cmp(&b.ttl_secs));
    WhatIfView {
        requests: g.requests,
        cache_hit_ratio: g.real_hit_ratio().map(round),
        check_error: g.check_error().map(round),
        sample_rate: round(g.sample_rate),
        ttl_curve,
        others: others.into_iter().map(|(_, p)| p).collect(),
    }
}

/// The latest window's groups, busiest first, names breaking ties.
fn group_names(latest: Option<&WindowPoint>) -> Vec<&str> {
    let mut groups: Vec<&GroupPoint> = latest.map_or_else(Vec::new, |w| w.groups.iter().collect());
    groups.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.group.cmp(&b.group)));
    groups.iter().map(|g| &*g.group).collect()
}

/// Row names: the shards of the newest window busiest first, then shards seen only earlier,
/// most recent first; at most `cap`.
fn rows<'a>(found: &[Option<&'a GroupPoint>], cap: usize) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = Vec::new();
    for g in found.iter().rev().flatten() {
        for s in &g.shards {
            if out.len() == cap {
                return out;
            }
            if !out.contains(&&*s.shard) {
                out.push(&s.shard);
            }
        }
    }
    out
}

fn window_view(w: &WindowPoint, g: &GroupPoint, rows: &[&str]) -> WindowView {
    let by_name: HashMap<&str, &ShardPoint> = g.shards.iter().map(|s| (&*s.shard, s)).collect();
    WindowView {
        start: w.start,
        end: w.end,
        requests: g.requests,
        requests_per_second: round(g.requests_per_second),
        fair_share: round(g.fair_share),
        gini: g.gini.map(round),
        gini_noise_floor: g.gini_noise_floor.map(round),
        top1_share: g.top1_share.map(round),
        top1_noise_floor: g.top1_noise_floor.map(round),
        error_ratio: g.error_ratio.map(round),
        cache_hit_ratio: g.cache_hit_ratio.map(round),
        backend_calls_per_request: g.backend_calls_per_request.map(round),
        p99_ms: g.p99_ms.map(round),
        cells: rows
            .iter()
            .map(|name| by_name.get(name).map(|s| cell(s)))
            .collect(),
    }
}

fn cell(s: &ShardPoint) -> Cell {
    let opt = |x: f32| (!x.is_nan()).then(|| round(f64::from(x)));
    (
        round(f64::from(s.share)),
        round(f64::from(s.requests_per_second)),
        opt(s.error_ratio),
        opt(s.cache_hit_ratio),
        opt(s.p99_ms),
    )
}

fn cache_view(found: &[Option<&GroupPoint>]) -> Option<CacheView> {
    let calls = || {
        found
            .iter()
            .flatten()
            .filter_map(|g| g.backend_calls_per_request)
    };
    // The newest window with traffic: an idle last window says nothing about the cache.
    let latest = found.iter().rev().flatten().find(|g| g.requests > 0)?;
    let now = latest.backend_calls_per_request?;
    let calmest = calls().fold(f64::INFINITY, f64::min);
    Some(CacheView {
        hit_ratio: latest.cache_hit_ratio.map(round),
        backend_calls_per_request: round(now),
        calmest_backend_calls_per_request: round(calmest),
        amplification: (calmest > 0.0).then(|| round(now / calmest)),
    })
}

fn keys(top: &[KeyShare], cap: usize) -> Vec<KeyView<'_>> {
    top.iter()
        .take(cap)
        .map(|k| KeyView {
            key: &k.key,
            label: key_label(&k.key).into_owned(),
            requests: k.requests,
            lower_bound: k.lower_bound(),
            share: round(k.share),
        })
        .collect()
}

/// Five decimals: enough for a share of one shard in 1,024 and for any rate or latency the
/// page prints, at half the bytes of a full `f64`.
fn round(x: f64) -> f64 {
    (x * 1e5).round() / 1e5
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::history::Recorder;
    use std::sync::Arc;

    fn point(shards: &[(&str, f32)]) -> GroupPoint {
        GroupPoint {
            group: Arc::from("db"),
            requests: 1000,
            requests_per_second: 100.0,
            fair_share: 1.0 / shards.len() as f64,
            shards_total: shards.len(),
            gini: Some(0.1),
            gini_noise_floor: Some(0.05),
            top1_share: Some(0.5),
            top1_noise_floor: Some(0.3),
            error_ratio: Some(0.0),
            cache_hit_ratio: Some(0.9),
            backend_calls_per_request: Some(0.1),
            p99_ms: Some(12.0),
            shards: shards
                .iter()
                .map(|&(n, share)| ShardPoint {
                    shard: Arc::from(n),
                    share,
                    requests_per_second: 10.0,
                    error_ratio: f32::NAN,
                    cache_hit_ratio: 0.5,
                    p99_ms: 3.0,
                })
                .collect(),
        }
    }

    fn ring(windows: Vec<Vec<(&str, f32)>>) -> History {
        History {
            capacity: windows.len(),
            windows: windows
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    Arc::new(WindowPoint {
                        start: i as f64,
                        end: i as f64 + 1.0,
                        groups: vec![point(&s)],
                    })
                })
                .collect(),
        }
    }

    #[test]
    fn rows_follow_the_latest_window_then_earlier_shards() {
        let h = ring(vec![
            vec![("old", 0.6), ("a", 0.4)],
            vec![("b", 0.7), ("a", 0.3)],
        ]);
        let snap = WindowSnapshot::empty(0.0);
        let q = HistoryQuery::default();
        let r = reply(&h, &snap, &q, 1.0);
        assert_eq!(r.group, Some("db"));
        assert_eq!(r.shards, ["b", "a", "old"]);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["windows"][0]["cells"][0], serde_json::Value::Null);
        assert_eq!(
            v["windows"][0]["cells"][2],
            serde_json::json!([0.6, 10.0, null, 0.5, 3.0])
        );
        assert_eq!(v["windows"][1]["cells"][0][0], 0.7);
    }

    #[test]
    fn windows_and_shards_are_capped() {
        let names: Vec<String> = (0..MAX_SHARDS + 5).map(|i| format!("s{i}")).collect();
        let shards: Vec<(&str, f32)> = names.iter().map(|n| (n.as_str(), 0.01)).collect();
        let h = ring(vec![shards.clone(), shards.clone(), shards]);
        let snap = WindowSnapshot::empty(0.0);
        let q = HistoryQuery {
            windows: Some(2),
            shards: Some(10_000),
            group: None,
        };
        let r = reply(&h, &snap, &q, 1.0);
        assert_eq!(r.windows.len(), 2);
        assert_eq!(r.windows[0].start, 1.0);
        assert_eq!(r.shards.len(), MAX_SHARDS);
        let q = HistoryQuery::default();
        assert_eq!(reply(&h, &snap, &q, 1.0).shards.len(), DEFAULT_SHARDS);
    }

    #[test]
    fn an_unknown_group_answers_empty() {
        let (_rec, rx) = Recorder::new(4, 1e-3);
        let h = rx.borrow().clone();
        let snap = WindowSnapshot::empty(0.0);
        let q = HistoryQuery {
            group: Some("nope".into()),
            ..HistoryQuery::default()
        };
        let r = reply(&h, &snap, &q, 1.0);
        assert_eq!(r.group, Some("nope"));
        assert!(r.windows.is_empty() && r.shards.is_empty() && r.cache.is_none());
    }

    #[test]
    fn amplification_is_against_the_calmest_window() {
        let mut h = ring(vec![vec![("a", 1.0)], vec![("a", 1.0)]]);
        let mut last = (*h.windows[1]).clone();
        last.groups[0].backend_calls_per_request = Some(0.5);
        last.groups[0].cache_hit_ratio = Some(0.5);
        h.windows[1] = Arc::new(last);
        let snap = WindowSnapshot::empty(0.0);
        let q = HistoryQuery::default();
        let r = reply(&h, &snap, &q, 1.0);
        let c = r.cache.unwrap();
        assert_eq!(c.amplification, Some(5.0));
        assert_eq!(c.calmest_backend_calls_per_request, 0.1);
    }

    #[test]
    fn the_whatif_curve_holds_the_ttl_only_policies_by_ttl_and_the_rest_beside_it() {
        let observed = Policy::observed(60.0, None, false, None);
        let mut policies = vec![observed.clone()];
        for spec in [
            "ttl=20m",
            "serve-stale",
            "ttl=10s",
            "ttl=1m",
            "ttl=1h+serve-stale",
        ] {
            policies.push(Policy::parse(spec, &observed).unwrap());
        }
        let figures = |hit: f64| PolicyFigures {
            hit_ratio: hit,
            backend_calls_per_request: 1.0 - hit,
            error_ratio: None,
            error_bound: 0.01,
        };
        let g = GroupWhatIf {
            group: "db".to_owned(),
            requests: 1000,
            real_hits: 500,
            real_misses: 500,
            sample_rate: 1.0,
            sampled_keys: 10,
            sampled_requests: 1000,
            policies: [0.5, 0.8, 0.6, 0.2, 0.5, 0.9].map(figures).to_vec(),
            exact: None,
            shards: Vec::new(),
        };
        let v = curve(&policies, &g);
        let names: Vec<(&str, f64, bool)> = v
            .ttl_curve
            .iter()
            .map(|p| (p.policy, p.ttl_secs, p.observed))
            .collect();
        assert_eq!(
            names,
            [
                ("ttl=10s", 10.0, false),
                ("observed", 60.0, true),
                ("ttl=1m", 60.0, false),
                ("ttl=20m", 1200.0, false),
            ]
        );
        assert_eq!(v.ttl_curve[0].hit_ratio, 0.2);
        let others: Vec<&str> = v.others.iter().map(|p| p.policy).collect();
        assert_eq!(others, ["serve-stale", "ttl=1h+serve-stale"]);
        assert_eq!(v.others[0].ttl_secs, 60.0);
        assert_eq!(v.check_error, Some(0.0));
    }

    #[test]
    fn the_answer_carries_the_whatif_curve_only_when_the_group_was_simulated() {
        let h = ring(vec![vec![("a", 1.0)]]);
        let q = HistoryQuery::default();
        let snap = WindowSnapshot::empty(0.0);
        assert!(reply(&h, &snap, &q, 1.0).whatif.is_none());
        let cfg = skewwatch_detectors::whatif::WhatIfConfig {
            exact: true,
            ..Default::default()
        };
        let mut sim = skewwatch_detectors::whatif::WhatIf::new(cfg.clone());
        let mut o = skewwatch_detectors::observation::ObservationRef::new("db", "a");
        o.cache_key = Some(skewwatch_detectors::observation::CacheKeyHash::new(
            0x9e37_79b9_7f4a_7c15,
        ));
        o.count = 4;
        sim.record(&o, 1.0);
        let mut snap = WindowSnapshot::empty(10.0);
        snap.whatif = Some(Arc::new(sim.close(10.0)));
        snap.whatif_policies = Some(cfg.policies.clone().into());
        let v = serde_json::to_value(reply(&h, &snap, &q, 1.0)).unwrap();
        let curve = v["whatif"]["ttl_curve"].as_array().unwrap();
        // The default ladder (10 s to an hour) and the observed 60 s.
        assert_eq!(curve.len(), 6, "{v}");
        assert!(curve.iter().any(|p| p["observed"] == true));
        assert_eq!(v["whatif"]["requests"], 4);
    }
}
