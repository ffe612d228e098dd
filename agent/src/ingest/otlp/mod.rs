//! OTLP/HTTP ingest: OpenTelemetry spans and metrics in, observations out.
//!
//! A client span of a database, cache or RPC call is one request to one shard: its attributes
//! name the group, the shard, the key and the cache result ([`Mapping`]), its duration is the
//! latency and its status and status codes give the outcome ([`outcome`]). Metric data points
//! (histograms and monotonic sums) become counts and latencies per shard ([`metrics`]).
//!
//! - [`wire`]: a zero-copy protobuf field walker for `ExportTraceServiceRequest`, which reads
//!   only the fields the mapping needs. Decoding whole messages with prost allocates every
//!   attribute and string and ran at about a quarter of the walker's speed (docs/ingest.md).
//! - [`traces`]: spans (protobuf through [`wire`], JSON through `opentelemetry-proto`'s serde
//!   types) into a [`Batch`].
//! - [`metrics`]: `ExportMetricsServiceRequest` (prost or JSON) into a [`Batch`], turning
//!   cumulative series into deltas in a bounded, reset-aware [`metrics::Cumulative`] map.
//!
//! Spans that are not shard calls (not client spans, or without a shard or group attribute)
//! are skipped and counted in `skewwatch_ingest_skipped_total{source="otlp",reason}`; spans
//! that are shard calls but break the data-model rules are rejected like any other record.

pub mod config;
pub mod metrics;
pub mod traces;
pub mod wire;

use skewwatch_detectors::observation::{Batch, CacheResult, ObservationRef, Outcome, Rejections};

// The skip reasons are the `reason` label of a self-metric, so their vocabulary lives with the
// self-metrics; the decoders here count them.
pub use crate::telemetry::{SkipReason, Skips};

/// What one OTLP body gave: records into the batch, rejected and skipped items.
#[derive(Debug, Clone, Default)]
pub struct OtlpOutcome {
    /// Records appended to the batch.
    pub accepted: usize,
    /// Items that were shard calls but broke a data-model rule.
    pub rejected: Rejections,
    /// Items that were not shard calls.
    pub skipped: Skips,
    /// The first rejection, for the partial-success message.
    pub first_error: Option<String>,
}

impl OtlpOutcome {
    fn reject(&mut self, reason: skewwatch_detectors::observation::RejectReason, what: &str) {
        self.rejected.add(reason);
        if self.first_error.is_none() {
            self.first_error = Some(format!("{what}: {reason}"));
        }
    }
}

/// Which attributes name the fields of an observation. Each list is tried in order; the first
/// attribute present wins. Validated from the `otlp:` section of the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// Attributes naming the group (the sharded system).
    pub group: Vec<String>,
    /// Attributes naming the shard; a span without any of them is not a shard call.
    pub shard: Vec<String>,
    /// Attributes naming the key.
    pub key: Vec<String>,
    /// Attributes giving the cache result (`hit`/`miss`, or a boolean: true is a hit).
    pub cache: Vec<String>,
    /// Take only spans of kind CLIENT.
    pub client_spans_only: bool,
    /// Metrics taken from `/v1/metrics`; empty takes every histogram and monotonic sum.
    pub metric_names: Vec<String>,
    /// Cumulative metric series whose last value is kept to compute deltas.
    pub max_cumulative_series: usize,
}

impl Default for Mapping {
    fn default() -> Self {
        let v = |names: &[&str]| names.iter().map(|s| (*s).to_owned()).collect();
        Mapping {
            group: v(&[
                "skewwatch.group",
                "db.namespace",
                "db.system.name",
                "db.system",
                "rpc.service",
            ]),
            shard: v(&["skewwatch.shard", "server.address"]),
            key: v(&["skewwatch.key"]),
            cache: v(&["skewwatch.cache"]),
            client_spans_only: true,
            metric_names: v(&[
                "db.client.operation.duration",
                "rpc.client.call.duration",
                "rpc.client.duration",
                "http.client.request.duration",
            ]),
            max_cumulative_series: 10_000,
        }
    }
}

/// An attribute value as the mapping sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttrValue<'a> {
    /// A string.
    Str(&'a str),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// Anything else (double, bytes, array, map): never a name.
    Other,
}

/// The attributes of one span or data point that the mapping reads, each with the position of
/// the attribute name that gave it (lower wins).
#[derive(Debug, Clone, Copy, Default)]
pub struct Picked<'a> {
    group: Option<(usize, AttrValue<'a>)>,
    shard: Option<(usize, AttrValue<'a>)>,
    key: Option<(usize, AttrValue<'a>)>,
    cache: Option<(usize, AttrValue<'a>)>,
    error_type: Option<&'a str>,
    grpc_status: Option<i64>,
    http_status: Option<i64>,
}

/// Semantic-convention attributes that refine the outcome.
const ERROR_TYPE: &str = "error.type";
const GRPC_STATUS: &str = "rpc.grpc.status_code";
const HTTP_STATUS: &str = "http.response.status_code";

/// The position of `key` in `names` when it would beat what `slot` holds.
fn better(slot: &Option<(usize, AttrValue<'_>)>, names: &[String], key: &[u8]) -> Option<usize> {
    // A slot filled by the first name of its list cannot be beaten: no comparison at all.
    if matches!(slot, Some((0, _))) {
        return None;
    }
    names
        .iter()
        .position(|n| n.as_bytes() == key)
        .filter(|&rank| slot.is_none_or(|(r, _)| rank < r))
}

impl Mapping {
    /// Offers one attribute of the span or data point being mapped.
    pub fn offer<'a>(&self, p: &mut Picked<'a>, key: &[u8], value: AttrValue<'a>) {
        let _ = self.offer_with(p, key, || Ok::<_, std::convert::Infallible>(value));
    }

    /// Like [`Mapping::offer`], reading the value only when the attribute is wanted, so the
    /// protobuf walker neither decodes nor checks the UTF-8 of attributes nobody maps.
    pub fn offer_with<'a, E>(
        &self,
        p: &mut Picked<'a>,
        key: &[u8],
        value: impl FnOnce() -> Result<AttrValue<'a>, E>,
    ) -> Result<(), E> {
        let group = better(&p.group, &self.group, key);
        let shard = better(&p.shard, &self.shard, key);
        let k = better(&p.key, &self.key, key);
        let cache = better(&p.cache, &self.cache, key);
        let code = key == ERROR_TYPE.as_bytes()
            || key == GRPC_STATUS.as_bytes()
            || key == HTTP_STATUS.as_bytes();
        if group.is_none() && shard.is_none() && k.is_none() && cache.is_none() && !code {
            return Ok(());
        }
        let v = value()?;
        for (slot, rank) in [
            (&mut p.group, group),
            (&mut p.shard, shard),
            (&mut p.key, k),
            (&mut p.cache, cache),
        ] {
            if let Some(r) = rank {
                *slot = Some((r, v));
            }
        }
        if code {
            codes(p, key, v);
        }
        Ok(())
    }

    /// Whether `name` is a metric this mapping takes.
    pub fn takes_metric(&self, name: &str) -> bool {
        self.metric_names.is_empty() || self.metric_names.iter().any(|n| n == name)
    }
}

/// Keeps the outcome attributes: `error.type` and the gRPC and HTTP status codes.
fn codes<'a>(p: &mut Picked<'a>, key: &[u8], value: AttrValue<'a>) {
    match (key, value) {
        (k, AttrValue::Str(s)) if k == ERROR_TYPE.as_bytes() => p.error_type = Some(s),
        (k, AttrValue::Int(i)) if k == GRPC_STATUS.as_bytes() => p.grpc_status = Some(i),
        (k, AttrValue::Int(i)) if k == HTTP_STATUS.as_bytes() => p.http_status = Some(i),
        // Some instrumentations write the codes as strings.
        (k, AttrValue::Str(s)) if k == GRPC_STATUS.as_bytes() => p.grpc_status = s.parse().ok(),
        (k, AttrValue::Str(s)) if k == HTTP_STATUS.as_bytes() => p.http_status = s.parse().ok(),
        _ => {}
    }
}

/// Span status codes (`Status.code`).
pub const STATUS_ERROR: i32 = 2;

/// The outcome of a call from its span status code (0 unset, 1 ok, 2 error) and the status
/// codes among its attributes. The most specific signal wins: a gRPC code, then an HTTP code,
/// then `error.type`, then the span status.
///
/// | signal | outcome |
/// |---|---|
/// | gRPC 4 DEADLINE_EXCEEDED, HTTP 408 or 504, `error.type` naming a timeout | `timeout` |
/// | gRPC 5 NOT_FOUND, HTTP 404 | `not_found` |
/// | gRPC 8 RESOURCE_EXHAUSTED, HTTP 429 | `throttled` |
/// | gRPC 14 UNAVAILABLE, HTTP 503 | `unavailable` |
/// | any other gRPC code but 0, HTTP 4xx/5xx, any `error.type`, status ERROR | `error` |
/// | none of these | `ok` |
pub fn outcome(status: i32, p: &Picked<'_>) -> Outcome {
    if let Some(code) = p.grpc_status.filter(|&c| c != 0) {
        return match code {
            4 => Outcome::Timeout,
            5 => Outcome::NotFound,
            8 => Outcome::Throttled,
            14 => Outcome::Unavailable,
            _ => Outcome::Error,
        };
    }
    if let Some(code) = p.http_status.filter(|c| (400..600).contains(c)) {
        return match code {
            404 => Outcome::NotFound,
            408 | 504 => Outcome::Timeout,
            429 => Outcome::Throttled,
            503 => Outcome::Unavailable,
            _ => Outcome::Error,
        };
    }
    if let Some(t) = p.error_type {
        let t = t.to_ascii_lowercase();
        return if t.contains("timeout") || t.contains("timed out") || t.contains("deadline") {
            Outcome::Timeout
        } else {
            Outcome::Error
        };
    }
    if status == STATUS_ERROR {
        Outcome::Error
    } else {
        Outcome::Ok
    }
}

/// Renders a picked name (a string or an integer) into `scratch`, or borrows the string.
fn name_of<'s>(v: AttrValue<'s>, scratch: &'s mut String) -> Option<&'s str> {
    match v {
        AttrValue::Str(s) => Some(s),
        AttrValue::Int(i) => {
            use std::fmt::Write;
            scratch.clear();
            let _ = write!(scratch, "{i}");
            Some(scratch.as_str())
        }
        AttrValue::Bool(_) | AttrValue::Other => None,
    }
}

/// The cache result of a picked value: `hit`/`miss`, or a boolean (true is a hit).
fn cache_of(
    v: AttrValue<'_>,
) -> Result<CacheResult, skewwatch_detectors::observation::RejectReason> {
    match v {
        AttrValue::Str(s) => {
            CacheResult::parse(s).ok_or(skewwatch_detectors::observation::RejectReason::BadCache)
        }
        AttrValue::Bool(true) => Ok(CacheResult::Hit),
        AttrValue::Bool(false) => Ok(CacheResult::Miss),
        _ => Err(skewwatch_detectors::observation::RejectReason::BadCache),
    }
}

/// One call (a span) or one bucket of calls (a data point), ready to become a record.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Requests it stands for.
    pub count: u64,
    /// Latency of each, when known.
    pub latency_ms: Option<f64>,
    /// The outcome.
    pub outcome: Outcome,
}

/// Reusable buffers for integer names, so mapping allocates nothing per span.
#[derive(Debug, Default)]
pub struct Scratch {
    group: String,
    shard: String,
    key: String,
}

/// Turns the picked attributes of one item into a record in `batch`, or counts why not.
/// `what` names the item in the first error message ("span 3", "data point 2 of x").
pub fn emit(
    p: &Picked<'_>,
    call: Call,
    scratch: &mut Scratch,
    batch: &mut Batch,
    out: &mut OtlpOutcome,
    what: &dyn Fn() -> String,
) {
    let Some((_, shard)) = p.shard else {
        return out.skipped.add(SkipReason::NoShard);
    };
    let Some((_, group)) = p.group else {
        return out.skipped.add(SkipReason::NoGroup);
    };
    use skewwatch_detectors::observation::RejectReason;
    let (Some(group), Some(shard)) = (
        name_of(group, &mut scratch.group),
        name_of(shard, &mut scratch.shard),
    ) else {
        return out.reject(RejectReason::WrongType, &what());
    };
    let key = match p.key {
        None => None,
        Some((_, v)) => match name_of(v, &mut scratch.key) {
            Some(k) => Some(k),
            None => return out.reject(RejectReason::WrongType, &what()),
        },
    };
    let cache = match p.cache.map(|(_, v)| cache_of(v)).transpose() {
        Ok(c) => c,
        Err(r) => return out.reject(r, &what()),
    };
    let obs = ObservationRef {
        ts: None,
        group,
        shard,
        key,
        count: call.count,
        latency_ms: call.latency_ms,
        outcome: call.outcome,
        cache,
    };
    match obs.validate() {
        Ok(()) => {
            batch.push(&obs);
            out.accepted += 1;
        }
        Err(r) => out.reject(r, &what()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picked(attrs: &[(&str, AttrValue<'static>)]) -> Picked<'static> {
        let m = Mapping::default();
        let mut p = Picked::default();
        for (k, v) in attrs {
            m.offer(&mut p, k.as_bytes(), *v);
        }
        p
    }

    #[test]
    fn the_outcome_table_of_the_docs_holds() {
        use AttrValue::{Int, Str};
        type Attrs = &'static [(&'static str, AttrValue<'static>)];
        let cases: &[(i32, Attrs, Outcome)] = &[
            (0, &[], Outcome::Ok),
            (1, &[], Outcome::Ok),
            (2, &[], Outcome::Error),
            (2, &[(GRPC_STATUS, Int(4))], Outcome::Timeout),
            (2, &[(GRPC_STATUS, Int(5))], Outcome::NotFound),
            (2, &[(GRPC_STATUS, Int(8))], Outcome::Throttled),
            (2, &[(GRPC_STATUS, Int(14))], Outcome::Unavailable),
            (2, &[(GRPC_STATUS, Int(13))], Outcome::Error),
            (0, &[(GRPC_STATUS, Int(0))], Outcome::Ok),
            (2, &[(GRPC_STATUS, Str("14"))], Outcome::Unavailable),
            (2, &[(HTTP_STATUS, Int(404))], Outcome::NotFound),
            (2, &[(HTTP_STATUS, Int(504))], Outcome::Timeout),
            (2, &[(HTTP_STATUS, Int(408))], Outcome::Timeout),
            (2, &[(HTTP_STATUS, Int(429))], Outcome::Throttled),
            (2, &[(HTTP_STATUS, Int(503))], Outcome::Unavailable),
            (2, &[(HTTP_STATUS, Int(500))], Outcome::Error),
            (0, &[(HTTP_STATUS, Int(200))], Outcome::Ok),
            (2, &[(ERROR_TYPE, Str("TimeoutError"))], Outcome::Timeout),
            (
                2,
                &[(ERROR_TYPE, Str("DEADLINE_EXCEEDED"))],
                Outcome::Timeout,
            ),
            (
                0,
                &[(ERROR_TYPE, Str("java.io.IOException"))],
                Outcome::Error,
            ),
            // The gRPC code is more specific than error.type and the HTTP code.
            (
                2,
                &[(ERROR_TYPE, Str("timeout")), (GRPC_STATUS, Int(5))],
                Outcome::NotFound,
            ),
            (
                2,
                &[(HTTP_STATUS, Int(429)), (GRPC_STATUS, Int(14))],
                Outcome::Unavailable,
            ),
        ];
        for (status, attrs, want) in cases {
            assert_eq!(
                outcome(*status, &picked(attrs)),
                *want,
                "{status} {attrs:?}"
            );
        }
    }

    #[test]
    fn the_first_listed_attribute_wins_whatever_the_order_of_attributes() {
        let p = picked(&[
            ("db.system", AttrValue::Str("postgresql")),
            ("db.namespace", AttrValue::Str("users")),
        ]);
        assert_eq!(p.group.map(|(_, v)| v), Some(AttrValue::Str("users")));
        let p = picked(&[
            ("db.namespace", AttrValue::Str("users")),
            ("db.system", AttrValue::Str("postgresql")),
        ]);
        assert_eq!(p.group.map(|(_, v)| v), Some(AttrValue::Str("users")));
    }

    fn emit_one(attrs: &[(&str, AttrValue<'static>)]) -> (Batch, OtlpOutcome) {
        let mut batch = Batch::default();
        let mut out = OtlpOutcome::default();
        let call = Call {
            count: 1,
            latency_ms: Some(2.0),
            outcome: Outcome::Ok,
        };
        emit(
            &picked(attrs),
            call,
            &mut Scratch::default(),
            &mut batch,
            &mut out,
            &|| "span".into(),
        );
        (batch, out)
    }

    #[test]
    fn a_span_without_shard_or_group_is_skipped_not_rejected() {
        let (b, out) = emit_one(&[("db.namespace", AttrValue::Str("users"))]);
        assert!(b.is_empty());
        assert_eq!(out.skipped.get(SkipReason::NoShard), 1);
        assert_eq!(out.rejected.total(), 0);
        let (b, out) = emit_one(&[("server.address", AttrValue::Str("db-1"))]);
        assert!(b.is_empty());
        assert_eq!(out.skipped.get(SkipReason::NoGroup), 1);
        assert_eq!(out.rejected.total(), 0);
    }

    #[test]
    fn integer_names_are_rendered_and_bad_values_rejected() {
        let (b, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Int(7)),
            ("skewwatch.key", AttrValue::Int(-3)),
            ("skewwatch.cache", AttrValue::Bool(false)),
        ]);
        assert_eq!(out.accepted, 1);
        let o = b.iter().next().unwrap();
        assert_eq!((o.group, o.shard, o.key), ("kv", "7", Some("-3")));
        assert_eq!(o.cache, Some(CacheResult::Miss));
        let (b, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Str("s1")),
            ("skewwatch.cache", AttrValue::Str("maybe")),
        ]);
        assert!(b.is_empty());
        assert_eq!(
            out.rejected
                .get(skewwatch_detectors::observation::RejectReason::BadCache),
            1
        );
        let (_, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Other),
        ]);
        assert_eq!(
            out.rejected
                .get(skewwatch_detectors::observation::RejectReason::WrongType),
            1
        );
        let long = Box::leak("x".repeat(200).into_boxed_str());
        let (_, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Str(long)),
        ]);
        assert_eq!(
            out.rejected
                .get(skewwatch_detectors::observation::RejectReason::FieldLength),
            1
        );
    }
}
