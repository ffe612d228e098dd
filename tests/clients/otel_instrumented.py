"""Drives real client libraries instrumented by OpenTelemetry's Python contrib instrumentations,
on their defaults, against real servers, exporting spans with the SDK's OTLP/HTTP (protobuf)
exporter, as an instrumented service would.

Usage: otel_instrumented.py LIBRARY BASE_URL PLAN_JSON, LIBRARY one of psycopg, pymemcache,
requests. PLAN_JSON is a list of steps, each {"port", "n", "op"}:
- psycopg: op "select" runs `SELECT 1`; "slow" runs `SELECT pg_sleep(1)` on a connection whose
  statement_timeout is 50 ms (PostgreSQL cancels it: psycopg raises QueryCanceled).
- pymemcache: op "get" or "set" on the memcached at 127.0.0.1:port (a port where nothing listens
  gives ConnectionRefusedError).
- requests: op is the path to GET from http://127.0.0.1:port (the server answers
  /status/NNN with NNN; anything else with 200).
No skewwatch attribute and no mapping is set: the instrumentation names everything itself.

The script prints "ready" once the SDK is set up, waits for a line on stdin, runs the plan, and
prints one JSON line: {"calls": N, "failures": {exception type: count}, "statuses": {HTTP
status: count}} as the client saw them,
after the exporter has flushed. The end-to-end test (tests/tests/e2e/otel_instrumentation.rs)
owns the plan and the expected figures.
"""
import collections
import json
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

library, base, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
provider = TracerProvider(resource=Resource.create({"service.name": f"e2e-{library}"}))
provider.add_span_processor(
    BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=10))
)

calls = 0
failures = collections.Counter()
statuses = collections.Counter()


def run(step_calls):
    """Runs one step's calls, counting what the client saw fail."""
    global calls
    for call in step_calls:
        calls += 1
        try:
            result = call()
            if hasattr(result, "status_code"):
                statuses[str(result.status_code)] += 1
        except Exception as e:  # noqa: BLE001 - the failure is what is counted
            failures[type(e).__qualname__] += 1


if library == "psycopg":
    import psycopg
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    PsycopgInstrumentor().instrument(tracer_provider=provider)
    connections = {}

    def connection(port, slow):
        if (port, slow) not in connections:
            options = "-c statement_timeout=50" if slow else ""
            connections[(port, slow)] = psycopg.connect(
                host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                options=options, autocommit=True, connect_timeout=10,
            )
        return connections[(port, slow)]

    def steps():
        for step in plan:
            slow = step["op"] == "slow"
            conn = connection(step["port"], slow)
            query = "SELECT pg_sleep(1)" if slow else "SELECT 1"
            yield [lambda c=conn, q=query: c.execute(q).fetchall()] * step["n"]

elif library == "pymemcache":
    from opentelemetry.instrumentation.pymemcache import PymemcacheInstrumentor

    PymemcacheInstrumentor().instrument(tracer_provider=provider)
    from pymemcache.client.base import Client

    def steps():
        for step in plan:
            client = Client(("127.0.0.1", step["port"]), connect_timeout=5, timeout=5)
            if step["op"] == "set":
                call = lambda c=client: c.set("item", b"v")  # noqa: E731
            else:
                call = lambda c=client: c.get("item")  # noqa: E731
            yield [call] * step["n"]

elif library == "requests":
    import requests
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    RequestsInstrumentor().instrument(tracer_provider=provider)
    session = requests.Session()

    def steps():
        for step in plan:
            url = f"http://127.0.0.1:{step['port']}{step['op']}"
            yield [lambda u=url: session.get(u, timeout=10)] * step["n"]

else:
    sys.exit(f"unknown library {library}")

print("ready", flush=True)
sys.stdin.readline()
for step_calls in steps():
    run(step_calls)
ok = provider.force_flush(30_000)
provider.shutdown()
if not ok:
    sys.exit("the span exporter did not flush")
print(json.dumps({"calls": calls, "failures": failures, "statuses": statuses}), flush=True)
