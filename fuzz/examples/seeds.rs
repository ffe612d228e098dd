//! Writes the OTLP seeds of `fuzz/corpus/` (protobuf and JSON bodies of the shapes the
//! agent's tests send: client spans of a sharded database, a histogram and a monotonic sum):
//! `cargo run -p skewwatch-fuzz --example seeds`. The text seeds are written by hand.

use std::path::Path;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

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

fn attrs(shard: &str) -> Vec<KeyValue> {
    vec![
        s("db.system.name", "postgresql"),
        s("db.namespace", "users"),
        s("server.address", shard),
        s("skewwatch.key", "tenant-1"),
        kv("skewwatch.cache", any_value::Value::BoolValue(false)),
        kv("http.response.status_code", any_value::Value::IntValue(503)),
    ]
}

fn traces() -> ExportTraceServiceRequest {
    let span = |kind: i32, shard: &str, dur_ns: u64, code: i32| Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        name: "SELECT users".into(),
        kind,
        start_time_unix_nano: 1_700_000_000_000_000_000,
        end_time_unix_nano: 1_700_000_000_000_000_000 + dur_ns,
        attributes: attrs(shard),
        status: Some(Status {
            message: String::new(),
            code,
        }),
        ..Span::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![
                    span(3, "pg-1", 2_500_000, 0),
                    span(3, "pg-2", 1_000_000, 2),
                    span(2, "pg-1", 1_000_000, 0),
                ],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

fn metrics(temporality: i32) -> ExportMetricsServiceRequest {
    let start = 1_700_000_000_000_000_000;
    let histogram = Metric {
        name: "db.client.operation.duration".into(),
        unit: "s".into(),
        data: Some(metric::Data::Histogram(Histogram {
            aggregation_temporality: temporality,
            data_points: vec![HistogramDataPoint {
                attributes: attrs("pg-1"),
                start_time_unix_nano: start,
                time_unix_nano: start + 10_000_000_000,
                count: 7,
                explicit_bounds: vec![0.005, 0.01, 0.1],
                bucket_counts: vec![1, 2, 3, 1],
                ..HistogramDataPoint::default()
            }],
        })),
        ..Metric::default()
    };
    let sum = Metric {
        name: "rpc.client.duration".into(),
        data: Some(metric::Data::Sum(Sum {
            aggregation_temporality: temporality,
            is_monotonic: true,
            data_points: vec![NumberDataPoint {
                attributes: attrs("pg-2"),
                start_time_unix_nano: start,
                time_unix_nano: start + 10_000_000_000,
                value: Some(number_data_point::Value::AsInt(42)),
                ..NumberDataPoint::default()
            }],
        })),
        ..Metric::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![histogram, sum],
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("a writable corpus folder");
    std::fs::write(path, bytes).expect("a writable seed");
}

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    write(
        &corpus.join("otlp_traces/spans.pb"),
        &traces().encode_to_vec(),
    );
    for (temporality, name) in [(1, "delta"), (2, "cumulative")] {
        write(
            &corpus.join(format!("otlp_metrics/{name}.pb")),
            &metrics(temporality).encode_to_vec(),
        );
        write(
            &corpus.join(format!("otlp_json/metrics_{name}.json")),
            &serde_json::to_vec(&metrics(temporality)).expect("serializable"),
        );
    }
    write(
        &corpus.join("otlp_json/spans.json"),
        &serde_json::to_vec(&traces()).expect("serializable"),
    );
}
