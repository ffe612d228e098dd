//! `GET /api/v1/status?group=&limit=`: the last closed window as JSON, bounded.
//!
//! Per group: every statistic, the top keys, and the `limit` busiest shards (default
//! [`DEFAULT_SHARDS`], at most [`MAX_SHARDS`]) with how many were left out, so the answer's
//! size does not grow with the number of shards. `group` selects one group. A group whose
//! records named a cache key also carries `whatif`: each policy's predicted hit ratio and
//! backend calls per request, for the group and its busiest shard.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use skewwatch_detectors::snapshot::{GroupSnapshot, KeyShare, LatencySummary, ShardSnapshot};
use skewwatch_detectors::stats::SkewStats;
use skewwatch_detectors::whatif::{GroupWhatIf, PolicyFigures, ShardCapacity, WhatIfWindow};

use super::ViewState;

/// Shards listed per group when the request does not say.
pub const DEFAULT_SHARDS: usize = 20;
/// Most shards listed per group.
pub const MAX_SHARDS: usize = 1000;

/// The query string.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    /// Only this group.
    pub group: Option<String>,
    /// Shards per group, busiest first.
    pub limit: Option<usize>,
}

#[derive(Serialize)]
struct StatusReply<'a> {
    version: &'static str,
    window_secs: f64,
    window: WindowView<'a>,
}

#[derive(Serialize)]
struct WindowView<'a> {
    start: f64,
    end: f64,
    groups: Vec<GroupView<'a>>,
}

/// A group with its busiest shards only; every other field as in the snapshot.
#[derive(Serialize)]
struct GroupView<'a> {
    group: &'a str,
    requests: u64,
    requests_per_second: f64,
    by_outcome: &'a [u64],
    errors: u64,
    error_ratio: Option<f64>,
    cache_hits: u64,
    cache_misses: u64,
    cache_hit_ratio: Option<f64>,
    latency: Option<LatencySummary>,
    ok_latency: Option<LatencySummary>,
    skew: Option<&'a SkewStats>,
    fair_share: f64,
    top_keys: &'a [KeyShare],
    keys_certified: bool,
    keyed_requests: u64,
    key_error_bound: u64,
    shards_total: usize,
    shards_omitted: usize,
    shards: Vec<&'a ShardSnapshot>,
    /// The what-if simulation's predictions, when the group's records named a cache key.
    #[serde(skip_serializing_if = "Option::is_none")]
    whatif: Option<WhatIfView<'a>>,
}

/// A group's what-if figures: per policy, and for the busiest shard.
#[derive(Serialize)]
struct WhatIfView<'a> {
    requests: u64,
    cache_hit_ratio: Option<f64>,
    check_error: Option<f64>,
    sample_rate: f64,
    sampled_keys: u64,
    policies: Vec<PolicyView<'a>>,
    hot_shard: Option<HotShardView<'a>>,
}

#[derive(Serialize)]
struct PolicyView<'a> {
    policy: &'a str,
    #[serde(flatten)]
    figures: &'a PolicyFigures,
}

#[derive(Serialize)]
struct HotShardView<'a> {
    shard: &'a str,
    requests: u64,
    /// The backend calls that failed, of the cache's reported misses.
    real_failures: u64,
    /// The shard's backend capacity, when configured or learned: its error ratios then come
    /// from the capacity model.
    capacity: Option<ShardCapacity>,
    policies: Vec<PolicyView<'a>>,
}

impl<'a> WhatIfView<'a> {
    fn new(names: &'a [String], g: &'a GroupWhatIf) -> Self {
        let policies = |figures: &'a [PolicyFigures]| {
            names
                .iter()
                .zip(figures)
                .map(|(policy, figures)| PolicyView { policy, figures })
                .collect()
        };
        WhatIfView {
            requests: g.requests,
            cache_hit_ratio: g.real_hit_ratio(),
            check_error: g.check_error(),
            sample_rate: g.sample_rate,
            sampled_keys: g.sampled_keys,
            policies: policies(&g.policies),
            hot_shard: g.hot_shard().map(|s| HotShardView {
                shard: &s.shard,
                requests: s.requests,
                real_failures: s.real_failures,
                capacity: s.capacity,
                policies: policies(&s.policies),
            }),
        }
    }
}

impl<'a> GroupView<'a> {
    fn new(g: &'a GroupSnapshot, limit: usize, whatif: Option<&'a WhatIfWindow>) -> Self {
        let mut shards: Vec<&ShardSnapshot> = g.shards.iter().collect();
        // Busiest first; names break ties so the answer is stable.
        shards.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.shard.cmp(&b.shard)));
        shards.truncate(limit);
        GroupView {
            group: &g.group,
            requests: g.requests,
            requests_per_second: g.traffic.requests_per_second,
            by_outcome: &g.traffic.by_outcome,
            errors: g.traffic.errors,
            error_ratio: g.traffic.error_ratio,
            cache_hits: g.traffic.cache_hits,
            cache_misses: g.traffic.cache_misses,
            cache_hit_ratio: g.traffic.cache_hit_ratio,
            latency: g.traffic.latency,
            ok_latency: g.traffic.ok_latency,
            skew: g.skew.as_ref(),
            fair_share: g.fair_share,
            top_keys: &g.top_keys,
            keys_certified: g.keys_certified,
            keyed_requests: g.keyed_requests,
            key_error_bound: g.key_error_bound,
            shards_total: g.shards.len(),
            shards_omitted: g.shards.len() - shards.len(),
            shards,
            whatif: whatif.and_then(|w| Some(WhatIfView::new(&w.policies, w.group(&g.group)?))),
        }
    }
}

/// The handler.
pub async fn status(
    State(s): State<ViewState>,
    query: Result<Query<StatusQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return (
            StatusCode::BAD_REQUEST,
            "query parameters: group=<name>, limit=<1..=1000>\n",
        )
            .into_response();
    };
    let limit = q.limit.unwrap_or(DEFAULT_SHARDS).clamp(1, MAX_SHARDS);
    let snap = s.snapshots.borrow().clone();
    let groups = snap
        .groups
        .iter()
        .filter(|g| q.group.as_deref().is_none_or(|want| g.group == want))
        .map(|g| GroupView::new(g, limit, snap.whatif.as_deref()))
        .collect();
    axum::Json(StatusReply {
        version: env!("CARGO_PKG_VERSION"),
        window_secs: s.window_secs,
        window: WindowView {
            start: snap.start,
            end: snap.end,
            groups,
        },
    })
    .into_response()
}
