"""A Prometheus target served by the Python `prometheus_client`: per-shard request histogram and
per-shard, per-key request counter. Prints its port, then on each `go` line adds the known load
(every request at 12 ms) and prints `done`. Usage: prom_target.py."""
import sys

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from load import LOAD

registry = CollectorRegistry()
duration = Histogram(
    "db_request_duration_seconds",
    "Database request latency.",
    ["shard"],
    buckets=[0.005, 0.01, 0.05, 0.1],
    registry=registry,
)
requests = Counter("db_requests", "Database requests.", ["shard", "key"], registry=registry)
# Traffic before the agent watched: the first scrape is only a baseline.
for shard, key, n in LOAD:
    requests.labels(shard, key).inc(1000)
    for _ in range(7):
        duration.labels(shard).observe(0.003)
server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
print(server.server_port, flush=True)
for line in sys.stdin:
    if line.strip() != "go":
        continue
    for shard, key, n in LOAD:
        requests.labels(shard, key).inc(n)
        for _ in range(n):
            duration.labels(shard).observe(0.012)
    print("done", flush=True)
