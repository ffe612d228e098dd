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
//! - [`skip`]: why an item is skipped ([`SkipReason`]) and the input's counters
//!   ([`OtlpMetrics`]).
//!
//! Spans that are not shard calls (not client spans, or without a shard or group attribute)
//! are skipped and counted in `skewwatch_ingest_skipped_total{source="otlp",reason}`; spans
//! that are shard calls but break the data-model rules are rejected like any other record.

pub mod attrs;
pub mod config;
pub mod metrics;
pub mod skip;
pub mod traces;
pub mod wire;

use skewwatch_detectors::observation::{
    Batch, CacheResult, ObservationRef, Outcome, RejectReason, Rejections, hash_cache_key,
};

use attrs::{Field, Found, Hit, NameError, Names};

pub use skip::{OtlpMetrics, SkipReason, Skips};

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
    fn reject(&mut self, reason: RejectReason, what: &str) {
        self.rejected.add(reason);
        if self.first_error.is_none() {
            self.first_error = Some(format!("{what}: {reason}"));
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

/// The attribute lists of the mapping as written (`otlp.group_attributes` and its siblings):
/// each entry is an attribute name or a template over several (`{server.address}:{server.port}`).
#[derive(Debug, Clone, PartialEq)]
pub struct Lists {
    /// Entries naming the group (the sharded system).
    pub group: Vec<String>,
    /// Entries naming the shard; a span matching none of them is not a shard call.
    pub shard: Vec<String>,
    /// Entries naming the key.
    pub key: Vec<String>,
    /// Entries giving the cache result (`hit`/`miss`, or a boolean: true is a hit).
    pub cache: Vec<String>,
    /// Entries naming the look-aside cache's key (kept only as its hash).
    pub cache_key: Vec<String>,
}

impl Default for Lists {
    /// Both the stable semantic conventions and the older ones that most instrumentations
    /// still emit by default, after skewwatch's own names; docs/ingest.md gives the reasons
    /// for each list and its order.
    fn default() -> Self {
        let v = |names: &[&str]| names.iter().map(|s| (*s).to_owned()).collect();
        Lists {
            group: v(&[
                "skewwatch.group",
                "peer.service",
                "db.namespace",
                "db.name",
                "db.system.name",
                "db.system",
                "rpc.service",
                "{url.full|host}",
                "{http.url|host}",
                "server.address",
                "net.peer.name",
            ]),
            shard: v(&[
                "skewwatch.shard",
                "{server.address}:{server.port}",
                "{net.peer.name}:{net.peer.port}",
                "{url.full|host_port}",
                "{http.url|host_port}",
                "{network.peer.address}:{network.peer.port}",
                "{net.sock.peer.addr}:{net.sock.peer.port}",
                "server.address",
                "net.peer.name",
                "network.peer.address",
            ]),
            key: v(&["skewwatch.key"]),
            cache: v(&["skewwatch.cache"]),
            cache_key: v(&["skewwatch.cache_key"]),
        }
    }
}

/// Which attributes name the fields of an observation. Each field's entries are tried in
/// order; the first that matches wins. Built from [`Lists`] by [`Mapping::new`]; validated
/// from the `otlp:` section of the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// The lists as written.
    pub lists: Lists,
    /// Every attribute name the fields and the outcome rules read.
    names: Names,
    group: Field,
    shard: Field,
    key: Field,
    cache: Field,
    cache_key: Field,
    /// Take only spans of kind CLIENT.
    pub client_spans_only: bool,
    /// Metrics taken from `/v1/metrics`; empty takes every histogram and monotonic sum.
    pub metric_names: Vec<String>,
    /// Cumulative metric series whose last value is kept to compute deltas.
    pub max_cumulative_series: usize,
}

/// Semantic-convention attributes that refine the outcome, in the slots they are interned at
/// (first, so their slots are fixed).
const OUTCOME_ATTRIBUTES: [&str; 4] = [
    "error.type",
    "rpc.grpc.status_code",
    "http.response.status_code",
    "http.status_code",
];
const ERROR_TYPE: u8 = 0;
const GRPC_STATUS: u8 = 1;
const HTTP_STATUS: u8 = 2;
const HTTP_STATUS_OLD: u8 = 3;

impl Default for Mapping {
    fn default() -> Self {
        Mapping::new(Lists::default()).expect("the default lists are valid")
    }
}

impl Mapping {
    /// Builds the mapping of `lists` with the other settings at their defaults, or says which
    /// list is wrong (`"shard"`) and why.
    pub fn new(lists: Lists) -> Result<Mapping, (&'static str, NameError)> {
        let mut names = Names::default();
        for (i, n) in OUTCOME_ATTRIBUTES.iter().enumerate() {
            let slot = names.intern(n).map_err(|e| ("outcome", e))?;
            debug_assert_eq!(usize::from(slot), i);
        }
        let mut field = |which: &'static str, written: &[String]| {
            Field::parse(&mut names, written).map_err(|e| (which, e))
        };
        let group = field("group", &lists.group)?;
        let shard = field("shard", &lists.shard)?;
        let key = field("key", &lists.key)?;
        let cache = field("cache", &lists.cache)?;
        let cache_key = field("cache_key", &lists.cache_key)?;
        Ok(Mapping {
            lists,
            names,
            group,
            shard,
            key,
            cache,
            cache_key,
            client_spans_only: true,
            metric_names: [
                "db.client.operation.duration",
                "rpc.client.call.duration",
                "rpc.client.duration",
                "http.client.request.duration",
                "http.client.duration",
            ]
            .map(str::to_owned)
            .to_vec(),
            max_cumulative_series: 10_000,
        })
    }

    /// Offers one attribute of the span, data point or resource being mapped.
    #[inline]
    pub fn offer<'a>(&self, found: &mut Found<'a>, key: &[u8], value: AttrValue<'a>) {
        if let Some(slot) = self.names.slot(key) {
            found.set(slot, value);
        }
    }

    /// Like [`Mapping::offer`], reading the value only when the attribute is wanted, so the
    /// protobuf walker neither decodes nor checks the UTF-8 of attributes nobody maps.
    #[inline]
    pub fn offer_with<'a, E>(
        &self,
        found: &mut Found<'a>,
        key: &[u8],
        value: impl FnOnce() -> Result<AttrValue<'a>, E>,
    ) -> Result<(), E> {
        if let Some(slot) = self.names.slot(key) {
            found.set(slot, value()?);
        }
        Ok(())
    }

    /// Whether `name` is a metric this mapping takes.
    pub fn takes_metric(&self, name: &str) -> bool {
        self.metric_names.is_empty() || self.metric_names.iter().any(|n| n == name)
    }

    /// Why the span or point is not a shard call (no shard, or no group), or `None` when it is.
    pub fn skip_reason(&self, found: &Found<'_>, scratch: &mut Scratch) -> Option<SkipReason> {
        if matches!(self.shard.resolve(found, &mut scratch.shard), Hit::Miss) {
            Some(SkipReason::NoShard)
        } else if matches!(self.group.resolve(found, &mut scratch.group), Hit::Miss) {
            Some(SkipReason::NoGroup)
        } else {
            None
        }
    }
}

/// Span status codes (`Status.code`).
pub const STATUS_ERROR: i32 = 2;

/// The exception a span recorded (its `exception` event): type and message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exception<'a> {
    /// `exception.type`, e.g. `psycopg.errors.QueryCanceled`.
    pub ty: &'a str,
    /// `exception.message`, e.g. `canceling statement due to statement timeout`.
    pub message: &'a str,
}

/// The name of an exception event and its attributes.
pub const EXCEPTION_EVENT: &str = "exception";
/// See [`EXCEPTION_EVENT`].
pub const EXCEPTION_TYPE: &str = "exception.type";
/// See [`EXCEPTION_EVENT`].
pub const EXCEPTION_MESSAGE: &str = "exception.message";

/// A gRPC status code from its number or its name (`NOT_FOUND`), as instrumentations write it.
fn grpc_code(v: AttrValue<'_>) -> Option<i64> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    match v {
        AttrValue::Int(i) => Some(i),
        AttrValue::Str(s) => s.parse().ok().or_else(|| {
            NAMES
                .iter()
                .position(|n| n.eq_ignore_ascii_case(s))
                .map(|i| i as i64)
        }),
        _ => None,
    }
}

/// An HTTP status code, written as an integer or a string.
fn http_code(v: Option<AttrValue<'_>>) -> Option<i64> {
    match v? {
        AttrValue::Int(i) => Some(i),
        AttrValue::Str(s) => s.parse().ok(),
        _ => None,
    }
}

/// Whether `haystack` contains `needle` (lower-case ASCII), ignoring ASCII case.
fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The failure class an error name or message tells, if any: `timeout` for timeouts and
/// deadlines (`TimeoutError`, `ReadTimeout`, PostgreSQL's `canceling statement due to
/// statement timeout`), `unavailable` for refused connections (`ConnectionRefusedError`,
/// `connection refused`, `ECONNREFUSED`) and `unavailable` itself.
pub fn failure_class(text: &str) -> Option<Outcome> {
    const TIMEOUT: [&str; 4] = ["timeout", "timed out", "timedout", "deadline"];
    const UNAVAILABLE: [&str; 4] = [
        "connectionrefused",
        "connection refused",
        "econnrefused",
        "unavailable",
    ];
    if TIMEOUT.iter().any(|n| contains_ci(text, n)) {
        Some(Outcome::Timeout)
    } else if UNAVAILABLE.iter().any(|n| contains_ci(text, n)) {
        Some(Outcome::Unavailable)
    } else {
        None
    }
}

/// The outcome of a call from its span status code (0 unset, 1 ok, 2 error), the status codes
/// among its attributes and, for a span whose status is ERROR and that has none of them, the
/// exception it recorded (`exception`, read only then). The most specific signal wins:
///
/// | signal | outcome |
/// |---|---|
/// | gRPC 4 DEADLINE_EXCEEDED, HTTP 408 or 504, `error.type` or exception naming a timeout | `timeout` |
/// | gRPC 5 NOT_FOUND, HTTP 404 | `not_found` |
/// | gRPC 8 RESOURCE_EXHAUSTED, HTTP 429 | `throttled` |
/// | gRPC 14 UNAVAILABLE, HTTP 503, `error.type` or exception naming a refused connection | `unavailable` |
/// | any other gRPC code but 0, HTTP 4xx/5xx, any `error.type`, status ERROR | `error` |
/// | none of these | `ok` |
///
/// A gRPC code (`rpc.grpc.status_code`, a number or a name) comes first, then the HTTP code
/// (`http.response.status_code`, else the older `http.status_code`), then `error.type`, then
/// the exception's type and message ([`failure_class`]), then the span status.
pub fn outcome<'a>(
    status: i32,
    found: &Found<'a>,
    exception: impl FnOnce() -> Option<Exception<'a>>,
) -> Outcome {
    if let Some(code) = found
        .get(GRPC_STATUS)
        .and_then(grpc_code)
        .filter(|&c| c != 0)
    {
        return match code {
            4 => Outcome::Timeout,
            5 => Outcome::NotFound,
            8 => Outcome::Throttled,
            14 => Outcome::Unavailable,
            _ => Outcome::Error,
        };
    }
    let http = http_code(found.get(HTTP_STATUS)).or_else(|| http_code(found.get(HTTP_STATUS_OLD)));
    if let Some(code) = http.filter(|c| (400..600).contains(c)) {
        return match code {
            404 => Outcome::NotFound,
            408 | 504 => Outcome::Timeout,
            429 => Outcome::Throttled,
            503 => Outcome::Unavailable,
            _ => Outcome::Error,
        };
    }
    if let Some(AttrValue::Str(t)) = found.get(ERROR_TYPE) {
        return failure_class(t).unwrap_or(Outcome::Error);
    }
    if status != STATUS_ERROR {
        return Outcome::Ok;
    }
    exception()
        .and_then(|e| failure_class(e.ty).or_else(|| failure_class(e.message)))
        .unwrap_or(Outcome::Error)
}

/// Renders a name (a string or an integer) into `scratch`, or borrows the string.
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

/// The name a field resolved to: `Ok(None)` when nothing matched, `Err` for a value that is
/// not a name.
fn resolve_name<'s>(
    field: &Field,
    found: &Found<'s>,
    buf: &'s mut String,
) -> Result<Option<&'s str>, RejectReason> {
    match field.resolve(found, buf) {
        Hit::Miss => Ok(None),
        Hit::Plain(v) => name_of(v, buf).map(Some).ok_or(RejectReason::WrongType),
        Hit::Rendered => Ok(Some(buf.as_str())),
        Hit::WrongType => Err(RejectReason::WrongType),
    }
}

/// The cache result a field resolved to: `hit`/`miss`, or a boolean (true is a hit).
fn resolve_cache(
    field: &Field,
    found: &Found<'_>,
    buf: &mut String,
) -> Result<Option<CacheResult>, RejectReason> {
    let text = match field.resolve(found, buf) {
        Hit::Miss => return Ok(None),
        Hit::Plain(AttrValue::Bool(b)) => {
            return Ok(Some(if b {
                CacheResult::Hit
            } else {
                CacheResult::Miss
            }));
        }
        Hit::Plain(AttrValue::Str(s)) => s,
        Hit::Rendered => buf.as_str(),
        Hit::Plain(_) | Hit::WrongType => return Err(RejectReason::BadCache),
    };
    CacheResult::parse(text)
        .map(Some)
        .ok_or(RejectReason::BadCache)
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

/// Reusable buffers for rendered names, so mapping allocates nothing per span.
#[derive(Debug, Default)]
pub struct Scratch {
    group: String,
    shard: String,
    key: String,
    cache: String,
    cache_key: String,
}

/// Turns the found attributes of one item into a record in `batch`, or counts why not. `call`
/// is the call, or why it breaks a data-model rule (checked only for a shard call). `what`
/// names the item in the first error message ("span 3", "data point 2 of x").
pub fn emit(
    m: &Mapping,
    found: &Found<'_>,
    call: Result<Call, RejectReason>,
    scratch: &mut Scratch,
    batch: &mut Batch,
    out: &mut OtlpOutcome,
    what: &dyn Fn() -> String,
) {
    let shard = resolve_name(&m.shard, found, &mut scratch.shard);
    if matches!(shard, Ok(None)) {
        return out.skipped.add(SkipReason::NoShard);
    }
    let group = resolve_name(&m.group, found, &mut scratch.group);
    if matches!(group, Ok(None)) {
        return out.skipped.add(SkipReason::NoGroup);
    }
    let (Ok(Some(group)), Ok(Some(shard))) = (group, shard) else {
        return out.reject(RejectReason::WrongType, &what());
    };
    let call = match call {
        Ok(c) => c,
        Err(r) => return out.reject(r, &what()),
    };
    let key = match resolve_name(&m.key, found, &mut scratch.key) {
        Ok(k) => k,
        Err(r) => return out.reject(r, &what()),
    };
    let cache = match resolve_cache(&m.cache, found, &mut scratch.cache) {
        Ok(c) => c,
        Err(r) => return out.reject(r, &what()),
    };
    let cache_key = match resolve_name(&m.cache_key, found, &mut scratch.cache_key) {
        Ok(None) => None,
        Ok(Some(k)) => match hash_cache_key(k.as_bytes()) {
            Ok(h) => Some(h),
            Err(r) => return out.reject(r, &what()),
        },
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
        cache_key,
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

    const ERROR_TYPE: &str = "error.type";
    const GRPC: &str = "rpc.grpc.status_code";
    const HTTP: &str = "http.response.status_code";
    const HTTP_OLD: &str = "http.status_code";

    fn found<'a>(m: &Mapping, attrs: &[(&str, AttrValue<'a>)]) -> Found<'a> {
        let mut f = Found::default();
        for (k, v) in attrs {
            m.offer(&mut f, k.as_bytes(), *v);
        }
        f
    }

    #[test]
    fn the_outcome_table_of_the_docs_holds() {
        use AttrValue::{Int, Str};
        type Attrs = &'static [(&'static str, AttrValue<'static>)];
        let cases: &[(i32, Attrs, Outcome)] = &[
            (0, &[], Outcome::Ok),
            (1, &[], Outcome::Ok),
            (2, &[], Outcome::Error),
            (2, &[(GRPC, Int(4))], Outcome::Timeout),
            (2, &[(GRPC, Int(5))], Outcome::NotFound),
            (2, &[(GRPC, Int(8))], Outcome::Throttled),
            (2, &[(GRPC, Int(14))], Outcome::Unavailable),
            (2, &[(GRPC, Int(13))], Outcome::Error),
            (0, &[(GRPC, Int(0))], Outcome::Ok),
            (2, &[(GRPC, Str("14"))], Outcome::Unavailable),
            (2, &[(GRPC, Str("DEADLINE_EXCEEDED"))], Outcome::Timeout),
            (0, &[(GRPC, Str("OK"))], Outcome::Ok),
            (2, &[(HTTP, Int(404))], Outcome::NotFound),
            (2, &[(HTTP, Int(504))], Outcome::Timeout),
            (2, &[(HTTP, Int(408))], Outcome::Timeout),
            (2, &[(HTTP, Int(429))], Outcome::Throttled),
            (2, &[(HTTP, Int(503))], Outcome::Unavailable),
            (2, &[(HTTP, Int(500))], Outcome::Error),
            (2, &[(HTTP, Int(401))], Outcome::Error),
            (0, &[(HTTP, Int(200))], Outcome::Ok),
            // The older name of the HTTP code reads alike; the stable one wins when both are.
            (2, &[(HTTP_OLD, Int(404))], Outcome::NotFound),
            (2, &[(HTTP_OLD, Int(503))], Outcome::Unavailable),
            (2, &[(HTTP_OLD, Str("429"))], Outcome::Throttled),
            (0, &[(HTTP_OLD, Int(302))], Outcome::Ok),
            (
                2,
                &[(HTTP_OLD, Int(500)), (HTTP, Int(404))],
                Outcome::NotFound,
            ),
            (2, &[(ERROR_TYPE, Str("TimeoutError"))], Outcome::Timeout),
            (
                2,
                &[(ERROR_TYPE, Str("DEADLINE_EXCEEDED"))],
                Outcome::Timeout,
            ),
            (2, &[(ERROR_TYPE, Str("ReadTimeout"))], Outcome::Timeout),
            (
                2,
                &[(ERROR_TYPE, Str("ConnectionRefusedError"))],
                Outcome::Unavailable,
            ),
            (
                0,
                &[(ERROR_TYPE, Str("java.io.IOException"))],
                Outcome::Error,
            ),
            // The gRPC code is more specific than error.type and the HTTP code.
            (
                2,
                &[(ERROR_TYPE, Str("timeout")), (GRPC, Int(5))],
                Outcome::NotFound,
            ),
            (
                2,
                &[(HTTP, Int(429)), (GRPC, Int(14))],
                Outcome::Unavailable,
            ),
            // The HTTP code is more specific than error.type (which HTTP clients set to it).
            (
                2,
                &[(ERROR_TYPE, Str("503")), (HTTP, Int(503))],
                Outcome::Unavailable,
            ),
        ];
        let m = Mapping::default();
        for (status, attrs, want) in cases {
            let got = outcome(*status, &found(&m, attrs), || None);
            assert_eq!(got, *want, "{status} {attrs:?}");
        }
    }

    #[test]
    fn a_failed_span_without_codes_is_classed_by_its_exception() {
        let m = Mapping::default();
        let none = Found::default();
        let ex = |ty: &'static str, message: &'static str| move || Some(Exception { ty, message });
        let cases = [
            // psycopg with a statement_timeout: the type says nothing, the message does.
            (
                ex(
                    "psycopg.errors.QueryCanceled",
                    "canceling statement due to statement timeout",
                ),
                Outcome::Timeout,
            ),
            (
                ex(
                    "psycopg.errors.QueryCanceled",
                    "canceling statement due to user request",
                ),
                Outcome::Error,
            ),
            (
                ex("ConnectionRefusedError", "[Errno 111] Connection refused"),
                Outcome::Unavailable,
            ),
            (
                ex(
                    "requests.exceptions.ConnectionError",
                    "Max retries exceeded (Caused by NewConnectionError: [Errno 111] Connection refused)",
                ),
                Outcome::Unavailable,
            ),
            (
                ex("requests.exceptions.ReadTimeout", "read timed out"),
                Outcome::Timeout,
            ),
            (
                ex("psycopg.errors.UniqueViolation", "duplicate key"),
                Outcome::Error,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(outcome(STATUS_ERROR, &none, e), want);
        }
        // Read only for a failed span: an exception handled inside an ok span is not a failure.
        let read = std::cell::Cell::new(false);
        let spy = || {
            read.set(true);
            None
        };
        assert_eq!(outcome(0, &none, spy), Outcome::Ok);
        assert!(!read.get());
        let f = found(&m, &[(HTTP_OLD, AttrValue::Int(404))]);
        assert_eq!(
            outcome(STATUS_ERROR, &f, ex("x", "timeout")),
            Outcome::NotFound
        );
    }

    #[test]
    fn the_first_listed_entry_wins_whatever_the_order_of_attributes() {
        let m = Mapping::default();
        let mut buf = String::new();
        for attrs in [
            [
                ("db.system", AttrValue::Str("postgresql")),
                ("db.namespace", AttrValue::Str("users")),
            ],
            [
                ("db.namespace", AttrValue::Str("users")),
                ("db.system", AttrValue::Str("postgresql")),
            ],
        ] {
            let f = found(&m, &attrs);
            assert_eq!(
                m.group.resolve(&f, &mut buf),
                Hit::Plain(AttrValue::Str("users"))
            );
        }
    }

    fn emit_with(m: &Mapping, attrs: &[(&str, AttrValue<'static>)]) -> (Batch, OtlpOutcome) {
        let mut batch = Batch::default();
        let mut out = OtlpOutcome::default();
        let call = Call {
            count: 1,
            latency_ms: Some(2.0),
            outcome: Outcome::Ok,
        };
        emit(
            m,
            &found(m, attrs),
            Ok(call),
            &mut Scratch::default(),
            &mut batch,
            &mut out,
            &|| "span".into(),
        );
        (batch, out)
    }

    fn emit_one(attrs: &[(&str, AttrValue<'static>)]) -> (Batch, OtlpOutcome) {
        emit_with(&Mapping::default(), attrs)
    }

    /// (group, shard) of the one record `attrs` give on the default mapping.
    fn named(attrs: &[(&str, AttrValue<'static>)]) -> (String, String) {
        let (b, out) = emit_one(attrs);
        assert_eq!(out.accepted, 1, "{attrs:?}: {out:?}");
        let o = b.iter().next().unwrap();
        (o.group.to_owned(), o.shard.to_owned())
    }

    #[test]
    fn the_defaults_read_the_older_and_the_stable_conventions_with_the_port() {
        use AttrValue::{Int, Str};
        let pair = |g: &str, s: &str| (g.to_owned(), s.to_owned());
        // opentelemetry-instrumentation-psycopg and -redis on their defaults (older names).
        assert_eq!(
            named(&[
                ("db.system", Str("postgresql")),
                ("db.name", Str("app")),
                ("net.peer.name", Str("127.0.0.1")),
                ("net.peer.port", Int(5433)),
            ]),
            pair("app", "127.0.0.1:5433")
        );
        // The same call on the stable conventions.
        assert_eq!(
            named(&[
                ("db.system.name", Str("postgresql")),
                ("db.namespace", Str("app")),
                ("server.address", Str("127.0.0.1")),
                ("server.port", Int(5433)),
            ]),
            pair("app", "127.0.0.1:5433")
        );
        // pymemcache: no database name, the system is the group.
        assert_eq!(
            named(&[
                ("db.system", Str("memcached")),
                ("net.peer.name", Str("cache-1")),
                ("net.peer.port", Int(11211)),
            ]),
            pair("memcached", "cache-1:11211")
        );
        // requests on its defaults names the server only in the URL.
        assert_eq!(
            named(&[
                ("http.method", Str("GET")),
                ("http.url", Str("http://127.0.0.1:8001/item/7")),
                ("http.status_code", Int(200)),
            ]),
            pair("127.0.0.1", "127.0.0.1:8001")
        );
        // On the stable HTTP conventions.
        assert_eq!(
            named(&[
                ("url.full", Str("http://api.internal:8001/item/7")),
                ("server.address", Str("api.internal")),
                ("server.port", Int(8001)),
            ]),
            pair("api.internal", "api.internal:8001")
        );
        // peer.service names the group; a socket peer without a name is still a shard.
        assert_eq!(
            named(&[
                ("peer.service", Str("users")),
                ("network.peer.address", Str("10.0.0.7")),
                ("network.peer.port", Int(8080)),
            ]),
            pair("users", "10.0.0.7:8080")
        );
        // Without a port, the address alone.
        assert_eq!(
            named(&[("db.system", Str("redis")), ("server.address", Str("r-1"))]),
            pair("redis", "r-1")
        );
    }

    #[test]
    fn templates_and_resource_attributes_can_be_configured() {
        use AttrValue::Str;
        let lists = Lists {
            group: vec!["{k8s.namespace.name}/{db.system}".into()],
            shard: vec!["{service.instance.id}@{server.address}".into()],
            key: vec!["db.collection.name".into()],
            cache: vec![],
            cache_key: vec![],
        };
        let m = Mapping::new(lists).unwrap();
        let mut resource = Found::default();
        m.offer(&mut resource, b"k8s.namespace.name", Str("prod"));
        m.offer(&mut resource, b"service.instance.id", Str("pod-1"));
        let mut f = Found::default();
        f.start_from(&resource);
        m.offer(&mut f, b"db.system", Str("mongodb"));
        m.offer(&mut f, b"server.address", Str("m-3"));
        m.offer(&mut f, b"db.collection.name", Str("users"));
        let (mut batch, mut out) = (Batch::default(), OtlpOutcome::default());
        let call = Call {
            count: 1,
            latency_ms: None,
            outcome: Outcome::Ok,
        };
        let mut scratch = Scratch::default();
        emit(
            &m,
            &f,
            Ok(call),
            &mut scratch,
            &mut batch,
            &mut out,
            &String::new,
        );
        let o = batch.iter().next().unwrap();
        assert_eq!(
            (o.group, o.shard, o.key),
            ("prod/mongodb", "pod-1@m-3", Some("users"))
        );
        let bad = Lists {
            shard: vec!["{server.address".into()],
            ..Lists::default()
        };
        assert!(matches!(Mapping::new(bad), Err(("shard", _))));
    }

    #[test]
    fn a_span_without_shard_or_group_is_skipped_not_rejected() {
        let (b, out) = emit_one(&[("db.namespace", AttrValue::Str("users"))]);
        assert!(b.is_empty());
        assert_eq!(out.skipped.get(SkipReason::NoShard), 1);
        assert_eq!(out.rejected.total(), 0);
        let m = Mapping::new(Lists {
            group: vec!["skewwatch.group".into()],
            ..Lists::default()
        })
        .unwrap();
        let (b, out) = emit_with(&m, &[("server.address", AttrValue::Str("db-1"))]);
        assert!(b.is_empty());
        assert_eq!(out.skipped.get(SkipReason::NoGroup), 1);
        assert_eq!(out.rejected.total(), 0);
    }

    #[test]
    fn a_cache_key_attribute_is_kept_as_its_hash_and_an_empty_one_rejected() {
        let (b, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Str("s1")),
            ("skewwatch.cache_key", AttrValue::Str("user:42")),
        ]);
        assert_eq!(out.accepted, 1);
        let o = b.cache_keyed().next().unwrap();
        assert_eq!(o.cache_key, Some(hash_cache_key(b"user:42").unwrap()));
        let (b, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Str("s1")),
            ("skewwatch.cache_key", AttrValue::Str("")),
        ]);
        assert!(b.is_empty());
        assert_eq!(out.rejected.get(RejectReason::FieldLength), 1);
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
        assert_eq!(out.rejected.get(RejectReason::BadCache), 1);
        let (_, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Other),
        ]);
        assert_eq!(out.rejected.get(RejectReason::WrongType), 1);
        let (_, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("server.address", AttrValue::Str("db")),
            ("server.port", AttrValue::Other),
        ]);
        assert_eq!(
            out.rejected.get(RejectReason::WrongType),
            1,
            "a template's value"
        );
        let long = Box::leak("x".repeat(200).into_boxed_str());
        let (_, out) = emit_one(&[
            ("skewwatch.group", AttrValue::Str("kv")),
            ("skewwatch.shard", AttrValue::Str(long)),
        ]);
        assert_eq!(out.rejected.get(RejectReason::FieldLength), 1);
    }
}
