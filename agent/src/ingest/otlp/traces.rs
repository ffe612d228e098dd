//! `ExportTraceServiceRequest` bodies into observations: protobuf through the [`wire`](super::wire) walker,
//! JSON through `opentelemetry-proto`'s serde types. Both feed the same [`emit`], so a span
//! maps the same whichever encoding carried it (the tests check it).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use skewwatch_detectors::observation::{Batch, RejectReason};

use super::attrs::Found;
use super::wire::{Fields, Value, WireError};
use super::{
    AttrValue, Call, EXCEPTION_EVENT, EXCEPTION_MESSAGE, EXCEPTION_TYPE, Exception, Mapping,
    OtlpOutcome, Scratch, SkipReason, emit, outcome,
};

/// `Span.kind` of a client call.
pub const SPAN_KIND_CLIENT: i32 = 3;

/// A body that cannot be read at all: the whole request is refused with 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not valid protobuf.
    #[error("{0}")]
    Wire(#[from] WireError),
    /// A string field that is not UTF-8.
    #[error("malformed protobuf: a string field is not valid UTF-8")]
    Utf8,
    /// Not valid OTLP JSON.
    #[error("malformed OTLP JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Not a valid protobuf message of the expected type (prost's verdict).
    #[error("malformed protobuf: {0}")]
    Prost(#[from] prost::DecodeError),
}

/// The fields of one span besides its attributes.
#[derive(Debug, Default, Clone, Copy)]
struct SpanHead {
    kind: i32,
    start_ns: u64,
    end_ns: u64,
    status: i32,
}

/// Maps every span of a protobuf `ExportTraceServiceRequest` into `batch`.
pub fn decode_protobuf(
    body: &[u8],
    m: &Mapping,
    batch: &mut Batch,
) -> Result<OtlpOutcome, DecodeError> {
    let mut out = OtlpOutcome::default();
    let mut scratch = Scratch::default();
    let mut index = 0usize;
    let mut resource = Found::default();
    let mut found = Found::default();
    let mut request = Fields::new(body);
    while let Some((field, value)) = request.next()? {
        let (1, Value::Bytes(resource_spans)) = (field, value) else {
            continue;
        };
        // The resource first, wherever the encoder put it, so every span can start from it.
        resource.clear();
        let mut rs = Fields::new(resource_spans);
        while let Some((field, value)) = rs.next()? {
            if let (1, Value::Bytes(r)) = (field, value) {
                read_attributes(r, 1, m, &mut resource)?;
            }
        }
        let mut rs = Fields::new(resource_spans);
        while let Some((field, value)) = rs.next()? {
            let (2, Value::Bytes(scope_spans)) = (field, value) else {
                continue;
            };
            let mut ss = Fields::new(scope_spans);
            while let Some((field, value)) = ss.next()? {
                let (2, Value::Bytes(span)) = (field, value) else {
                    continue;
                };
                found.start_from(&resource);
                let head = read_span(span, m, &mut found)?;
                let exception = || exception_of(span);
                map_span(
                    head,
                    &found,
                    exception,
                    m,
                    &mut scratch,
                    batch,
                    &mut out,
                    index,
                );
                index += 1;
            }
        }
    }
    Ok(out)
}

/// Reads the kind, times, status and wanted attributes of one span.
fn read_span<'a>(span: &'a [u8], m: &Mapping, p: &mut Found<'a>) -> Result<SpanHead, DecodeError> {
    let mut head = SpanHead::default();
    let mut f = Fields::new(span);
    while let Some((field, value)) = f.next()? {
        match (field, value) {
            (6, Value::Varint(k)) => head.kind = k as i32,
            (7, Value::Fixed64(t)) => head.start_ns = t,
            (8, Value::Fixed64(t)) => head.end_ns = t,
            (9, Value::Bytes(kv)) => read_attribute(kv, m, p)?,
            (15, Value::Bytes(status)) => {
                let mut s = Fields::new(status);
                while let Some((field, value)) = s.next()? {
                    if let (3, Value::Varint(c)) = (field, value) {
                        head.status = c as i32;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(head)
}

/// Offers every attribute (`KeyValue` field `field`) of a message to the mapping.
fn read_attributes<'a>(
    msg: &'a [u8],
    field: u32,
    m: &Mapping,
    p: &mut Found<'a>,
) -> Result<(), DecodeError> {
    let mut f = Fields::new(msg);
    while let Some((n, value)) = f.next()? {
        if let (true, Value::Bytes(kv)) = (n == field, value) {
            read_attribute(kv, m, p)?;
        }
    }
    Ok(())
}

/// Reads one `KeyValue` and offers it to the mapping, which reads the value only if it wants
/// the key.
fn read_attribute<'a>(kv: &'a [u8], m: &Mapping, p: &mut Found<'a>) -> Result<(), DecodeError> {
    let (key, any) = key_value(kv)?;
    m.offer_with(p, key, || any.map_or(Ok(AttrValue::Other), read_any_value))
}

/// The key and the encoded value of a `KeyValue`.
fn key_value(kv: &[u8]) -> Result<(&[u8], Option<&[u8]>), DecodeError> {
    let mut key: &[u8] = b"";
    let mut any = None;
    let mut f = Fields::new(kv);
    while let Some((field, v)) = f.next()? {
        match (field, v) {
            (1, Value::Bytes(k)) => key = k,
            (2, Value::Bytes(a)) => any = Some(a),
            _ => {}
        }
    }
    Ok((key, any))
}

/// The last `exception` event of a span (`Span.events`, field 11), read only for a failed
/// span whose attributes give no status code. The span was walked once already, so a
/// malformed event here only means no exception.
fn exception_of(span: &[u8]) -> Option<Exception<'_>> {
    let mut last = None;
    let mut f = Fields::new(span);
    while let Ok(Some((field, value))) = f.next() {
        let (11, Value::Bytes(event)) = (field, value) else {
            continue;
        };
        let mut name: &[u8] = b"";
        let mut e = Exception::default();
        let mut ev = Fields::new(event);
        while let Ok(Some((field, value))) = ev.next() {
            match (field, value) {
                (2, Value::Bytes(n)) => name = n,
                (3, Value::Bytes(kv)) => {
                    let Ok((key, Some(any))) = key_value(kv) else {
                        continue;
                    };
                    let Ok(AttrValue::Str(s)) = read_any_value(any) else {
                        continue;
                    };
                    match key {
                        k if k == EXCEPTION_TYPE.as_bytes() => e.ty = s,
                        k if k == EXCEPTION_MESSAGE.as_bytes() => e.message = s,
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if name == EXCEPTION_EVENT.as_bytes() {
            last = Some(e);
        }
    }
    last
}

/// Reads an `AnyValue`: the string, bool and int cases; anything else is [`AttrValue::Other`].
fn read_any_value(any: &[u8]) -> Result<AttrValue<'_>, DecodeError> {
    let mut value = AttrValue::Other;
    let mut f = Fields::new(any);
    while let Some((field, v)) = f.next()? {
        value = match (field, v) {
            (1, Value::Bytes(s)) => {
                AttrValue::Str(std::str::from_utf8(s).map_err(|_| DecodeError::Utf8)?)
            }
            (2, Value::Varint(b)) => AttrValue::Bool(b != 0),
            (3, Value::Varint(i)) => AttrValue::Int(i as i64),
            // The other members of the `value` oneof (double, array, kvlist, bytes).
            (4..=7, _) => AttrValue::Other,
            // A field the message does not define is skipped, as prost skips it: it must not
            // erase the value before it (found by fuzzing, `fuzz/regressions/otlp_traces/`).
            _ => value,
        };
    }
    Ok(value)
}

/// Maps every span of an OTLP/JSON `ExportTraceServiceRequest` into `batch`.
pub fn decode_json(
    body: &[u8],
    m: &Mapping,
    batch: &mut Batch,
) -> Result<OtlpOutcome, DecodeError> {
    let request: ExportTraceServiceRequest = serde_json::from_slice(body)?;
    Ok(map_request(&request, m, batch))
}

/// Offers every attribute of a decoded message to the mapping.
pub fn offer_all<'a>(m: &Mapping, found: &mut Found<'a>, attributes: &'a [KeyValue]) {
    for kv in attributes {
        m.offer(found, kv.key.as_bytes(), attr_value(kv.value.as_ref()));
    }
}

/// Maps every span of a decoded request (the JSON path, and the reference the protobuf walker
/// is tested against).
pub fn map_request(
    request: &ExportTraceServiceRequest,
    m: &Mapping,
    batch: &mut Batch,
) -> OtlpOutcome {
    let mut out = OtlpOutcome::default();
    let mut scratch = Scratch::default();
    let mut index = 0usize;
    let mut resource = Found::default();
    let mut found = Found::default();
    for rs in &request.resource_spans {
        resource.clear();
        if let Some(r) = &rs.resource {
            offer_all(m, &mut resource, &r.attributes);
        }
        for span in rs.scope_spans.iter().flat_map(|ss| &ss.spans) {
            found.start_from(&resource);
            offer_all(m, &mut found, &span.attributes);
            let head = SpanHead {
                kind: span.kind,
                start_ns: span.start_time_unix_nano,
                end_ns: span.end_time_unix_nano,
                status: span.status.as_ref().map_or(0, |s| s.code),
            };
            let exception = || json_exception(span);
            map_span(
                head,
                &found,
                exception,
                m,
                &mut scratch,
                batch,
                &mut out,
                index,
            );
            index += 1;
        }
    }
    out
}

/// The last `exception` event of a decoded span.
fn json_exception(span: &Span) -> Option<Exception<'_>> {
    let event = span
        .events
        .iter()
        .rev()
        .find(|e| e.name == EXCEPTION_EVENT)?;
    let mut e = Exception::default();
    for kv in &event.attributes {
        if let AttrValue::Str(s) = attr_value(kv.value.as_ref()) {
            match kv.key.as_str() {
                EXCEPTION_TYPE => e.ty = s,
                EXCEPTION_MESSAGE => e.message = s,
                _ => {}
            }
        }
    }
    Some(e)
}

/// An attribute value of a decoded message as the mapping sees it.
pub fn attr_value(v: Option<&AnyValue>) -> AttrValue<'_> {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => AttrValue::Str(s),
        Some(any_value::Value::BoolValue(b)) => AttrValue::Bool(*b),
        Some(any_value::Value::IntValue(i)) => AttrValue::Int(*i),
        _ => AttrValue::Other,
    }
}

/// One span into a record, or a skip or a rejection.
#[allow(clippy::too_many_arguments)] // the decoders' shared state, passed apart to borrow apart
fn map_span<'a>(
    head: SpanHead,
    found: &Found<'a>,
    exception: impl FnOnce() -> Option<Exception<'a>>,
    m: &Mapping,
    scratch: &mut Scratch,
    batch: &mut Batch,
    out: &mut OtlpOutcome,
    index: usize,
) {
    if m.client_spans_only && head.kind != SPAN_KIND_CLIENT {
        return out.skipped.add(SkipReason::NotClient);
    }
    // A bad duration is rejected only on a shard call: on a span skipped anyway it is not
    // worth a rejection (emit checks the shard and the group first).
    let call = if head.end_ns >= head.start_ns {
        Ok(Call {
            count: 1,
            latency_ms: Some((head.end_ns - head.start_ns) as f64 / 1e6),
            outcome: outcome(head.status, found, exception),
        })
    } else {
        Err(RejectReason::BadLatency)
    };
    emit(m, found, call, scratch, batch, out, &|| {
        format!("span {index}")
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
    use prost::Message;
    use skewwatch_detectors::observation::{ObservationRef, Outcome};

    fn kv(key: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..KeyValue::default()
        }
    }

    fn s(key: &str, v: &str) -> KeyValue {
        kv(key, any_value::Value::StringValue(v.into()))
    }

    fn span(kind: i32, attrs: Vec<KeyValue>, dur_ns: u64, status: i32) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            name: "SELECT users".into(),
            kind,
            start_time_unix_nano: 1_700_000_000_000_000_000,
            end_time_unix_nano: 1_700_000_000_000_000_000 + dur_ns,
            attributes: attrs,
            status: Some(Status {
                message: String::new(),
                code: status,
            }),
            ..Span::default()
        }
    }

    fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    /// Spans of every kind the mapping distinguishes.
    fn sample() -> ExportTraceServiceRequest {
        let db = |shard: &str, extra: Vec<KeyValue>| {
            let mut a = vec![
                s("db.system.name", "postgresql"),
                s("db.namespace", "users"),
                s("server.address", shard),
                s("skewwatch.key", "tenant-1"),
            ];
            a.extend(extra);
            a
        };
        request(vec![
            span(3, db("pg-1", vec![]), 2_500_000, 0),
            span(
                3,
                db(
                    "pg-2",
                    vec![kv("rpc.grpc.status_code", any_value::Value::IntValue(5))],
                ),
                1_000_000,
                2,
            ),
            span(
                3,
                db(
                    "pg-2",
                    vec![
                        kv("skewwatch.cache", any_value::Value::BoolValue(true)),
                        kv("http.response.status_code", any_value::Value::IntValue(503)),
                    ],
                ),
                0,
                2,
            ),
            span(2, db("pg-1", vec![]), 1_000_000, 0),
            span(3, vec![s("db.namespace", "users")], 1_000_000, 0),
            span(
                3,
                db("pg-3", vec![kv("x", any_value::Value::DoubleValue(1.5))]),
                86_400_000_000_001,
                0,
            ),
        ])
    }

    fn records(b: &Batch) -> Vec<ObservationRef<'_>> {
        b.iter().collect()
    }

    #[test]
    fn spans_map_to_observations_skips_and_rejections() {
        let mut b = Batch::default();
        let out = decode_protobuf(&sample().encode_to_vec(), &Mapping::default(), &mut b).unwrap();
        assert_eq!(out.accepted, 3);
        assert_eq!(out.skipped.get(SkipReason::NotClient), 1);
        assert_eq!(out.skipped.get(SkipReason::NoShard), 1);
        assert_eq!(out.rejected.get(RejectReason::BadLatency), 1);
        assert_eq!(
            out.first_error.as_deref(),
            Some("span 5: latency_ms must be a finite number in 0..=86400000")
        );
        let r = records(&b);
        assert_eq!(
            (r[0].group, r[0].shard, r[0].key),
            ("users", "pg-1", Some("tenant-1"))
        );
        assert_eq!(r[0].latency_ms, Some(2.5));
        assert_eq!(r[0].outcome, Outcome::Ok);
        assert_eq!(r[1].outcome, Outcome::NotFound);
        assert_eq!(r[2].outcome, Outcome::Unavailable);
        assert_eq!(
            r[2].cache,
            Some(skewwatch_detectors::observation::CacheResult::Hit)
        );
    }

    #[test]
    fn an_unknown_field_in_an_any_value_does_not_erase_the_value_before_it() {
        // string_value "pg-1", then field 15, which AnyValue does not define, as a varint.
        let any = [0x0a, 4, b'p', b'g', b'-', b'1', 0x78, 1];
        let decoded = <AnyValue as prost::Message>::decode(&any[..]).unwrap();
        assert_eq!(attr_value(Some(&decoded)), AttrValue::Str("pg-1"));
        assert_eq!(read_any_value(&any).unwrap(), AttrValue::Str("pg-1"));
    }

    #[test]
    fn the_walker_agrees_with_prost_and_json_on_the_same_spans() {
        let req = sample();
        let m = Mapping::default();
        let (mut a, mut b, mut c) = (Batch::default(), Batch::default(), Batch::default());
        let wa = decode_protobuf(&req.encode_to_vec(), &m, &mut a).unwrap();
        let decoded = ExportTraceServiceRequest::decode(req.encode_to_vec().as_slice()).unwrap();
        let wb = map_request(&decoded, &m, &mut b);
        let json = serde_json::to_vec(&req).unwrap();
        let wc = decode_json(&json, &m, &mut c).unwrap();
        assert_eq!(records(&a), records(&b));
        assert_eq!(records(&a), records(&c));
        for w in [&wb, &wc] {
            assert_eq!(
                (wa.accepted, wa.rejected, wa.skipped),
                (w.accepted, w.rejected, w.skipped)
            );
        }
    }

    #[test]
    fn json_ints_may_be_strings_as_the_otlp_json_encoding_writes_them() {
        let body = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":3,
            "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000004000000",
            "status":{"code":2},
            "attributes":[{"key":"db.namespace","value":{"stringValue":"kv"}},
                          {"key":"server.address","value":{"stringValue":"kv-9"}},
                          {"key":"rpc.grpc.status_code","value":{"intValue":"8"}}]}]}]}]}"#;
        let mut b = Batch::default();
        let out = decode_json(body, &Mapping::default(), &mut b).unwrap();
        assert_eq!(out.accepted, 1);
        let r = records(&b);
        assert_eq!(
            (r[0].shard, r[0].latency_ms, r[0].outcome),
            ("kv-9", Some(4.0), Outcome::Throttled)
        );
    }

    #[test]
    fn resource_attributes_and_exception_events_map_alike_in_every_encoding() {
        use opentelemetry_proto::tonic::resource::v1::Resource;
        use opentelemetry_proto::tonic::trace::v1::span::Event;
        let m = Mapping::new(super::super::Lists {
            group: vec!["k8s.namespace.name".into(), "db.system".into()],
            shard: vec!["{service.instance.id}/{net.peer.name}:{net.peer.port}".into()],
            ..super::super::Lists::default()
        })
        .unwrap();
        let failed = |message: &str| {
            let mut sp = span(
                3,
                vec![
                    s("db.system", "postgresql"),
                    s("net.peer.name", "127.0.0.1"),
                    kv("net.peer.port", any_value::Value::IntValue(5433)),
                ],
                1_000_000,
                2,
            );
            sp.events = vec![
                Event {
                    name: "log".into(),
                    ..Event::default()
                },
                Event {
                    name: "exception".into(),
                    attributes: vec![
                        s("exception.type", "psycopg.errors.QueryCanceled"),
                        s("exception.message", message),
                    ],
                    ..Event::default()
                },
            ];
            sp
        };
        let mut req = request(vec![
            failed("canceling statement due to statement timeout"),
            failed("canceling statement due to user request"),
        ]);
        // The span's own `k8s.namespace.name` would win; this one has none, so the resource's
        // names the group.
        req.resource_spans[0].resource = Some(Resource {
            attributes: vec![
                s("service.instance.id", "pod-7"),
                s("k8s.namespace.name", "prod"),
            ],
            ..Resource::default()
        });
        let mut overridden = failed("x");
        overridden
            .attributes
            .push(s("k8s.namespace.name", "staging"));
        req.resource_spans[0].scope_spans[0].spans.push(overridden);
        let (mut a, mut b) = (Batch::default(), Batch::default());
        decode_protobuf(&req.encode_to_vec(), &m, &mut a).unwrap();
        decode_json(&serde_json::to_vec(&req).unwrap(), &m, &mut b).unwrap();
        assert_eq!(records(&a), records(&b));
        let r = records(&a);
        assert_eq!(
            r.iter()
                .map(|o| (o.group, o.shard, o.outcome))
                .collect::<Vec<_>>(),
            vec![
                ("prod", "pod-7/127.0.0.1:5433", Outcome::Timeout),
                ("prod", "pod-7/127.0.0.1:5433", Outcome::Error),
                ("staging", "pod-7/127.0.0.1:5433", Outcome::Error),
            ]
        );
    }

    #[test]
    fn every_truncation_of_a_body_is_refused_or_read_safely() {
        let body = sample().encode_to_vec();
        for cut in 0..body.len() {
            let mut b = Batch::default();
            // Must not panic; a cut at a field boundary may still decode.
            let _ = decode_protobuf(&body[..cut], &Mapping::default(), &mut b);
        }
        let mut b = Batch::default();
        assert!(decode_protobuf(b"\x0a\x05abc", &Mapping::default(), &mut b).is_err());
        assert!(decode_json(b"{\"resourceSpans\": 3}", &Mapping::default(), &mut b).is_err());
    }
}
