//! End-to-end: OTLP/HTTP into the real binary. Protobuf, JSON and gzip bodies of client spans
//! and metric points go to `/v1/traces` and `/v1/metrics`; `/metrics` shows exactly the
//! requests they stand for, skipped spans are counted apart, and bad bodies get 400 (or 413,
//! 415) with the reason, counted as rejections.

use std::io::Write;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Histogram, HistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics, metric,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use skewwatch::client;
use skewwatch_e2e::agent::Agent;
use skewwatch_e2e::prom::Scrape;

const CONFIG: &str = "window:\n  window_secs: 1\nlimits:\n  http_body_limit_bytes: 65536\n";
const PROTOBUF: (&str, &str) = ("Content-Type", "application/x-protobuf");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const GZIP: (&str, &str) = ("Content-Encoding", "gzip");

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

/// A client span of `group` on `shard`, `ms` long, with extra attributes and a status code.
fn span(group: &str, shard: &str, ms: u64, extra: Vec<KeyValue>, status: i32) -> Span {
    let start = 1_700_000_000_000_000_000u64;
    let mut attributes = vec![text("db.namespace", group), text("server.address", shard)];
    attributes.extend(extra);
    Span {
        trace_id: vec![7; 16],
        span_id: vec![8; 8],
        name: "GET".into(),
        kind: 3,
        start_time_unix_nano: start,
        end_time_unix_nano: start + ms * 1_000_000,
        attributes,
        status: Some(Status {
            message: String::new(),
            code: status,
        }),
        ..Span::default()
    }
}

fn traces(spans: Vec<Span>) -> ExportTraceServiceRequest {
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

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(body).unwrap();
    e.finish().unwrap()
}

fn post(agent: &Agent, path: &str, headers: &[(&str, &str)], body: &[u8]) -> client::Response {
    client::request(
        agent.http,
        "POST",
        path,
        headers,
        body,
        Duration::from_secs(10),
    )
    .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// Waits until the cumulative counters show `total` requests of `group`; returns that scrape.
fn counters(agent: &Agent, group: &str, total: f64) -> Scrape {
    agent
        .wait_for(Duration::from_secs(10), |a| {
            let s = a.scrape();
            (s.sum("skewwatch_shard_requests_total", &[("group", group)]) >= total).then_some(s)
        })
        .unwrap_or_else(|| panic!("{total} requests of {group} never showed"))
}

#[test]
fn protobuf_json_and_gzip_spans_count_exactly() {
    let agent = Agent::start(CONFIG);
    let g = "orders";
    // Protobuf: 3 ok on s1 (one a cache hit), 1 gRPC NOT_FOUND on s2, and two spans that are
    // no shard calls: a server span and a client span without server.address.
    let mut server_span = span(g, "s1", 1, vec![], 0);
    server_span.kind = 2;
    let mut no_shard = span(g, "s1", 1, vec![], 0);
    no_shard.attributes.retain(|kv| kv.key != "server.address");
    let hit = text("skewwatch.cache", "hit");
    let not_found = attr("rpc.grpc.status_code", any_value::Value::IntValue(5));
    let body = traces(vec![
        span(g, "s1", 4, vec![text("skewwatch.key", "k1")], 0),
        span(g, "s1", 4, vec![text("skewwatch.key", "k1"), hit], 0),
        span(g, "s1", 4, vec![text("skewwatch.key", "k2")], 0),
        span(g, "s2", 1, vec![not_found], 2),
        server_span,
        no_shard,
    ])
    .encode_to_vec();
    let r = post(&agent, "/v1/traces", &[PROTOBUF], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    let reply = ExportTraceServiceResponse::decode(r.body.as_slice()).unwrap();
    assert_eq!(reply.partial_success, None, "nothing was rejected");

    // The same shape as OTLP/JSON (HTTP 503 on s2 is `unavailable`), and gzip-compressed.
    let unavailable = attr("http.response.status_code", any_value::Value::IntValue(503));
    let json = serde_json::to_vec(&traces(vec![span(g, "s2", 50, vec![unavailable], 2)])).unwrap();
    let r = post(&agent, "/v1/traces", &[JSON], &json);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.text(), "{}");
    let zipped = gzip(&traces(vec![span(g, "s1", 4, vec![], 0); 5]).encode_to_vec());
    let r = post(&agent, "/v1/traces", &[PROTOBUF, GZIP], &zipped);
    assert_eq!(r.status, 200, "{}", r.text());

    let s = counters(&agent, g, 10.0);
    let req = |shard: &str, outcome: &str| {
        s.value(
            "skewwatch_shard_requests_total",
            &[("group", g), ("shard", shard), ("outcome", outcome)],
        )
    };
    assert_eq!(req("s1", "ok"), 8.0);
    assert_eq!(req("s2", "not_found"), 1.0);
    assert_eq!(req("s2", "unavailable"), 1.0);
    assert_eq!(
        s.sum("skewwatch_shard_requests_total", &[("group", g)]),
        10.0
    );
    let cache = s.value(
        "skewwatch_shard_cache_requests_total",
        &[("group", g), ("shard", "s1"), ("result", "hit")],
    );
    assert_eq!(cache, 1.0);
    // Latency is the span's duration: the 50 ms span is the only one above 25 ms.
    let le = |shard: &str, le: &str| {
        s.value(
            "skewwatch_shard_request_duration_seconds_bucket",
            &[("group", g), ("shard", shard), ("le", le)],
        )
    };
    assert_eq!(
        (le("s2", "0.025"), le("s2", "0.05"), le("s1", "0.005")),
        (1.0, 2.0, 8.0)
    );
    let otlp = [("source", "otlp")];
    assert_eq!(s.value("skewwatch_ingest_records_total", &otlp), 10.0);
    let skipped = |reason: &str| {
        s.value(
            "skewwatch_ingest_skipped_total",
            &[("source", "otlp"), ("reason", reason)],
        )
    };
    assert_eq!((skipped("not_client"), skipped("no_shard")), (1.0, 1.0));
    assert_eq!(s.sum("skewwatch_ingest_rejected_total", &otlp), 0.0);
}

#[test]
fn bad_bodies_get_the_reason_and_are_counted() {
    let agent = Agent::start(CONFIG);
    let rpc_status = |r: &client::Response| -> (i32, String) {
        // google.rpc.Status: code (1), message (2); decoded with prost's primitives.
        let mut buf = r.body.as_slice();
        let (mut code, mut message) = (0i32, String::new());
        while !buf.is_empty() {
            let (tag, wire) = prost::encoding::decode_key(&mut buf).unwrap();
            let ctx = prost::encoding::DecodeContext::default();
            match tag {
                1 => prost::encoding::int32::merge(wire, &mut code, &mut buf, ctx).unwrap(),
                2 => prost::encoding::string::merge(wire, &mut message, &mut buf, ctx).unwrap(),
                _ => prost::encoding::skip_field(wire, tag, &mut buf, ctx).unwrap(),
            }
        }
        (code, message)
    };
    let r = post(&agent, "/v1/traces", &[PROTOBUF], b"\x0a\x05abc");
    assert_eq!(r.status, 400);
    let (code, message) = rpc_status(&r);
    assert_eq!(code, 3);
    assert!(message.contains("truncated protobuf"), "{message}");
    let r = post(&agent, "/v1/metrics", &[JSON], b"{\"resourceMetrics\": 7}");
    assert_eq!(r.status, 400);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("malformed OTLP JSON"),
        "{v}"
    );
    let r = post(&agent, "/v1/traces", &[PROTOBUF, GZIP], b"not gzip at all");
    assert_eq!(r.status, 400, "{}", r.text());
    // 1 MiB of zeros compresses to about 1 KiB: within the body limit sent, over it unpacked.
    let bomb = gzip(&vec![0u8; 1 << 20]);
    assert!(bomb.len() < 65536);
    assert_eq!(
        post(&agent, "/v1/traces", &[PROTOBUF, GZIP], &bomb).status,
        413
    );
    assert_eq!(
        post(
            &agent,
            "/v1/traces",
            &[("Content-Type", "text/plain")],
            b"x"
        )
        .status,
        415
    );
    let ndjson = [("Content-Type", "application/x-ndjson")];
    assert_eq!(post(&agent, "/v1/traces", &ndjson, b"{}").status, 415);
    assert_eq!(
        post(
            &agent,
            "/v1/traces",
            &[PROTOBUF, ("Content-Encoding", "br")],
            b""
        )
        .status,
        415
    );

    // A body whose only shard call is invalid (a shard name over 128 bytes): 400 with why.
    let long = "x".repeat(200);
    let r = post(
        &agent,
        "/v1/traces",
        &[PROTOBUF],
        &traces(vec![span("g", &long, 1, vec![], 0)]).encode_to_vec(),
    );
    assert_eq!(r.status, 400);
    assert!(
        rpc_status(&r).1.contains("span 0: field too long"),
        "{:?}",
        rpc_status(&r)
    );
    // One good, one bad: 200 with partial success naming the bad one.
    let body = traces(vec![
        span("g", "s", 1, vec![], 0),
        span("g", &long, 1, vec![], 0),
    ]);
    let r = post(&agent, "/v1/traces", &[PROTOBUF], &body.encode_to_vec());
    assert_eq!(r.status, 200);
    let partial = ExportTraceServiceResponse::decode(r.body.as_slice())
        .unwrap()
        .partial_success
        .unwrap();
    assert_eq!(partial.rejected_spans, 1);
    assert!(
        partial.error_message.starts_with("span 1: field too long"),
        "{partial:?}"
    );

    let s = counters(&agent, "g", 1.0);
    let rejected = |reason: &str| {
        s.value(
            "skewwatch_ingest_rejected_total",
            &[("source", "otlp"), ("reason", reason)],
        )
    };
    // The truncated protobuf, the bad JSON and the bad gzip stream (413 and 415 are refused
    // before the body is read, as for NDJSON).
    assert_eq!(rejected("malformed"), 2.0);
    assert_eq!(rejected("field_length"), 2.0);
}

#[test]
fn a_token_guards_otlp_like_every_ingest_endpoint() {
    let cfg = format!("{CONFIG}auth:\n  bearer_token_env: OTLP_TEST_TOKEN\n");
    let agent = Agent::start_with_env(&cfg, &[("OTLP_TEST_TOKEN", "t0k")]);
    let body = traces(vec![span("g", "s", 1, vec![], 0)]).encode_to_vec();
    assert_eq!(post(&agent, "/v1/traces", &[PROTOBUF], &body).status, 401);
    assert_eq!(post(&agent, "/v1/metrics", &[PROTOBUF], &body).status, 401);
    let auth = ("Authorization", "Bearer t0k");
    assert_eq!(
        post(&agent, "/v1/traces", &[PROTOBUF, auth], &body).status,
        200
    );
}

fn histogram(
    shard: &str,
    temporality: i32,
    start_ns: u64,
    buckets: Vec<u64>,
) -> ExportMetricsServiceRequest {
    let point = HistogramDataPoint {
        attributes: vec![text("db.namespace", "kv"), text("server.address", shard)],
        start_time_unix_nano: start_ns,
        time_unix_nano: start_ns + 1,
        count: buckets.iter().sum(),
        explicit_bounds: vec![0.005, 0.01, 0.1],
        bucket_counts: buckets,
        ..HistogramDataPoint::default()
    };
    let metric = Metric {
        name: "db.client.operation.duration".into(),
        unit: "s".into(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points: vec![point],
            aggregation_temporality: temporality,
        })),
        ..Metric::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![metric],
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

#[test]
fn metric_histograms_count_per_shard_delta_and_cumulative() {
    let agent = Agent::start(CONFIG);
    let now_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    // Delta: 3 fast and 1 slow call on m1.
    let r = post(
        &agent,
        "/v1/metrics",
        &[PROTOBUF],
        &histogram("m1", 1, now_ns(), vec![3, 0, 0, 1]).encode_to_vec(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        ExportMetricsServiceResponse::decode(r.body.as_slice())
            .unwrap()
            .partial_success,
        None
    );
    // Cumulative, started after the agent: 2 then 5 in total on m2, as JSON; then 6 after a
    // restart of the exporter (new start time): 2 + 3 + 6 = 11.
    let start = now_ns();
    for (start, buckets) in [
        (start, vec![0, 2, 0, 0]),
        (start, vec![0, 5, 0, 0]),
        (start + 9, vec![0, 6, 0, 0]),
    ] {
        let body = serde_json::to_vec(&histogram("m2", 2, start, buckets)).unwrap();
        assert_eq!(post(&agent, "/v1/metrics", &[JSON], &body).status, 200);
    }
    // A cumulative series that started before the agent only sets a baseline.
    let body = histogram("m3", 2, 1_000, vec![50, 0, 0, 0]).encode_to_vec();
    assert_eq!(post(&agent, "/v1/metrics", &[PROTOBUF], &body).status, 200);

    let s = counters(&agent, "kv", 15.0);
    let ok = |shard: &str| {
        s.get(
            "skewwatch_shard_requests_total",
            &[("group", "kv"), ("shard", shard), ("outcome", "ok")],
        )
    };
    assert_eq!(
        (ok("m1"), ok("m2"), ok("m3")),
        (Some(4.0), Some(11.0), None)
    );
    // Bucket midpoints: 2.5 ms, 7.5 ms; the overflow bucket at its lower bound, 100 ms.
    let le = |shard: &str, le: &str| {
        s.value(
            "skewwatch_shard_request_duration_seconds_bucket",
            &[("group", "kv"), ("shard", shard), ("le", le)],
        )
    };
    assert_eq!(
        (le("m1", "0.0025"), le("m1", "0.05"), le("m1", "0.1")),
        (3.0, 3.0, 4.0)
    );
    assert_eq!((le("m2", "0.005"), le("m2", "0.01")), (0.0, 11.0));
    assert_eq!(
        s.value(
            "skewwatch_ingest_skipped_total",
            &[("source", "otlp"), ("reason", "baseline")]
        ),
        1.0
    );
}
