//! Input benchmarks beyond skewwatch's own formats: OTLP spans, decoded and mapped to
//! observations, per encoding.
//!
//! The request is 1,000 client spans of a database client, as an OpenTelemetry SDK exports
//! them: trace and span ids, a name, times, a status, and nine attributes (system, namespace,
//! operation, query text of ~60 bytes, server address and port, peer address, the key and a
//! row count), across 64 shards.
//!
//! - `otlp_traces_protobuf_walker`: the receiver's path, the zero-copy field walker.
//! - `otlp_traces_protobuf_prost`: prost's full decode of the same body, then the same
//!   mapping: what the walker replaces, kept as the reference figure.
//! - `otlp_traces_json`: OTLP/JSON through `opentelemetry-proto`'s serde types.
//!
//! Throughput is reported in spans (elements). Wall-clock medians on a shared machine count
//! the time other processes held the core, so the bench also prints spans per CPU-second of
//! its own thread (`getrusage(RUSAGE_THREAD)`). docs/ingest.md has the figures.
//!
//! `cargo bench -p skewwatch --bench inputs -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use skewwatch::ingest::otlp::{Mapping, traces};
use skewwatch_detectors::observation::Batch;

const SPANS: usize = 1_000;

fn attr(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

fn text(key: &str, v: &str) -> KeyValue {
    attr(key, any_value::Value::StringValue(v.into()))
}

/// The benchmark request: `SPANS` database client spans.
fn request() -> ExportTraceServiceRequest {
    let t0 = 1_700_000_000_000_000_000u64;
    let spans = (0..SPANS)
        .map(|i| Span {
            trace_id: (0..16).map(|b| (i * 7 + b) as u8).collect(),
            span_id: (0..8).map(|b| (i * 3 + b) as u8).collect(),
            parent_span_id: vec![9; 8],
            name: "SELECT orders".into(),
            kind: traces::SPAN_KIND_CLIENT,
            start_time_unix_nano: t0 + i as u64 * 1_000,
            end_time_unix_nano: t0 + i as u64 * 1_000 + 1_250_000,
            attributes: vec![
                text("db.system.name", "postgresql"),
                text("db.namespace", "orders"),
                text("db.operation.name", "SELECT"),
                text(
                    "db.query.text",
                    "SELECT id, total FROM orders WHERE tenant_id = $1 LIMIT 50",
                ),
                text("server.address", &format!("orders-{}.db.internal", i % 64)),
                attr("server.port", any_value::Value::IntValue(5432)),
                text("network.peer.address", "10.0.3.17"),
                text("skewwatch.key", &format!("tenant-{}", i % 97)),
                attr("db.response.returned_rows", any_value::Value::IntValue(12)),
            ],
            status: Some(Status {
                message: String::new(),
                code: if i % 50 == 0 { 2 } else { 0 },
            }),
            ..Span::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: None,
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            schema_url: String::new(),
        }],
    }
}

fn otlp_benches(c: &mut Criterion) {
    let req = request();
    let proto = req.encode_to_vec();
    let json = serde_json::to_vec(&req).expect("serializes");
    let m = Mapping::default();
    let mut batch = Batch::with_capacity(SPANS);
    let out = traces::decode_protobuf(&proto, &m, &mut batch).expect("decodes");
    assert_eq!(out.accepted, SPANS);
    let mut group = c.benchmark_group("inputs");
    group.throughput(Throughput::Elements(SPANS as u64));
    group.bench_function("otlp_traces_protobuf_walker", |b| {
        b.iter(|| {
            batch.clear();
            traces::decode_protobuf(black_box(&proto), &m, &mut batch)
        })
    });
    group.bench_function("otlp_traces_protobuf_prost", |b| {
        b.iter(|| {
            batch.clear();
            let decoded =
                ExportTraceServiceRequest::decode(black_box(proto.as_slice())).expect("decodes");
            traces::map_request(&decoded, &m, &mut batch)
        })
    });
    group.bench_function("otlp_traces_json", |b| {
        b.iter(|| {
            batch.clear();
            traces::decode_json(black_box(&json), &m, &mut batch)
        })
    });
    group.finish();
    let walker = cpu_rate(|| {
        batch.clear();
        black_box(traces::decode_protobuf(black_box(&proto), &m, &mut batch).is_ok());
    });
    let prost = cpu_rate(|| {
        batch.clear();
        let decoded =
            ExportTraceServiceRequest::decode(black_box(proto.as_slice())).expect("decodes");
        black_box(traces::map_request(&decoded, &m, &mut batch));
    });
    let json_rate = cpu_rate(|| {
        batch.clear();
        black_box(traces::decode_json(black_box(&json), &m, &mut batch).is_ok());
    });
    eprintln!(
        "spans per CPU-second (this thread's user+system time): protobuf walker {walker:.0}, \
         protobuf prost {prost:.0}, json {json_rate:.0}"
    );
    eprintln!(
        "otlp request: {SPANS} spans, {} bytes protobuf ({} per span), {} bytes JSON",
        proto.len(),
        proto.len() / SPANS,
        json.len()
    );
}

/// This thread's CPU time (user + system), seconds.
fn thread_cpu_secs() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(u.user_time()) + secs(u.system_time())
}

/// Spans per second of CPU time of `decode` (one request of `SPANS` spans per call), over at
/// least two CPU-seconds. On a shared machine wall-clock time counts the time other processes
/// held the core; CPU time is what "spans per second on one core" means.
fn cpu_rate(mut decode: impl FnMut()) -> f64 {
    let start = thread_cpu_secs();
    let mut calls = 0u64;
    while thread_cpu_secs() - start < 2.0 {
        for _ in 0..10 {
            decode();
        }
        calls += 10;
    }
    (calls * SPANS as u64) as f64 / (thread_cpu_secs() - start)
}

criterion_group!(benches, otlp_benches);
criterion_main!(benches);
