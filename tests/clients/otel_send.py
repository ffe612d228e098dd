"""Sends a known load to skewwatch's OTLP/HTTP receiver with the OpenTelemetry Python SDK and
its OTLP/HTTP (protobuf) exporters, as an instrumented service would.

Usage: otel_send.py BASE_URL LOAD_JSON. LOAD_JSON is {"spans": [...], "histogram": [...]}:
each span entry is {"n", "group", "shard"?, "key"?, "cache"?, "grpc_status"?, "kind"?} and
each histogram entry {"n", "group", "shard", "seconds"}. The script prints "ready" once the
SDK is set up, waits for a line on stdin, then creates and exports everything, and prints
"done" after both exporters have flushed. The end-to-end test (tests/tests/e2e/otlp_python.rs)
owns the load and the expected figures.
"""
import json
import sys

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

base, load = sys.argv[1], json.loads(sys.argv[2])
resource = Resource.create({"service.name": "otel-send"})

tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(
    BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10))
)
tracer = tracer_provider.get_tracer("skewwatch-e2e")

reader = PeriodicExportingMetricReader(
    OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=10),
    export_interval_millis=3_600_000,
)
meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
duration = meter_provider.get_meter("skewwatch-e2e").create_histogram(
    "db.client.operation.duration",
    unit="s",
    explicit_bucket_boundaries_advisory=[0.005, 0.01, 0.025, 0.05, 0.1],
)

print("ready", flush=True)
sys.stdin.readline()

for entry in load["spans"]:
    attributes = {"db.system.name": "postgresql", "db.namespace": entry["group"]}
    for field, attribute in [("shard", "server.address"), ("key", "skewwatch.key"),
                             ("cache", "skewwatch.cache"), ("grpc_status", "rpc.grpc.status_code")]:
        if field in entry:
            attributes[attribute] = entry[field]
    kind = SpanKind.SERVER if entry.get("kind") == "server" else SpanKind.CLIENT
    for _ in range(entry["n"]):
        span = tracer.start_span("SELECT", kind=kind, attributes=attributes)
        if entry.get("grpc_status", 0) != 0:
            span.set_status(Status(StatusCode.ERROR))
        span.end()

for entry in load["histogram"]:
    attributes = {"db.namespace": entry["group"], "server.address": entry["shard"]}
    for _ in range(entry["n"]):
        duration.record(entry["seconds"], attributes)

ok = tracer_provider.force_flush(10_000) and meter_provider.force_flush(10_000)
tracer_provider.shutdown()
meter_provider.shutdown()
print("done" if ok else "flush failed", flush=True)
