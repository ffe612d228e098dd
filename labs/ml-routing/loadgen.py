#!/usr/bin/env python3
"""The load generator: CLIENTS closed-loop clients calling HAProxy with `requests`,
instrumented by OpenTelemetry's `opentelemetry-instrumentation-requests` and exported over
OTLP/HTTP (protobuf) to skewwatch.

    loadgen.py URL CLIENTS THINK_MS OTLP_ENDPOINT GROUP

HAProxy names the server that answered in the `X-Served-By` response header; the
instrumentation's response hook puts it on the client span as `skewwatch.shard` (and the
group as `skewwatch.group`), which is how a user tells skewwatch which backend a call reached
when a load balancer sits in between. The status code is the instrumentation's own
(`http.status_code` and `http.response.status_code`: OTEL_SEMCONV_STABILITY_OPT_IN=http/dup).
Runs until killed; prints its own request count every 5 s.
"""
import os
import random
import sys
import threading
import time

os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http/dup")

import requests  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.instrumentation.requests import RequestsInstrumentor  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

URL, CLIENTS, THINK_MS, OTLP, GROUP = (sys.argv[1], int(sys.argv[2]), float(sys.argv[3]),
                                       sys.argv[4], sys.argv[5])

provider = TracerProvider(resource=Resource.create({"service.name": "ml-routing-loadgen"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=OTLP), max_queue_size=65536,
                                               schedule_delay_millis=200, max_export_batch_size=2048))
trace.set_tracer_provider(provider)


def response_hook(span, _request, response):
    if span and span.is_recording():
        served_by = response.headers.get("X-Served-By")
        if served_by:
            span.set_attribute("skewwatch.shard", served_by)
        span.set_attribute("skewwatch.group", GROUP)


RequestsInstrumentor().instrument(response_hook=response_hook)

count = 0
lock = threading.Lock()


def client():
    global count
    s = requests.Session()
    while True:
        try:
            s.get(URL, timeout=5)
        except requests.RequestException:
            time.sleep(0.05)
        with lock:
            count += 1
        time.sleep(random.expovariate(1000.0 / THINK_MS))


for _ in range(CLIENTS):
    threading.Thread(target=client, daemon=True).start()
while True:
    time.sleep(5)
    print(f"loadgen: {count} requests", flush=True)
