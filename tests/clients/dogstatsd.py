"""DogStatsD with tags through the Python `datadog` package: usage: dogstatsd.py HOST PORT."""
import sys

from datadog.dogstatsd import DogStatsd

from load import LOAD, wait_for_go

host, port = sys.argv[1], int(sys.argv[2])
client = DogStatsd(host=host, port=port, disable_telemetry=True, disable_buffering=True)
wait_for_go()
for shard, key, n in LOAD:
    for _ in range(n):
        client.timing("db.query_time", 12, tags=[f"shard:{shard}", f"table:{key}", "env:test"])
# Cache lookups: 15 misses and 5 hits on s0, 20 hits on s1.
for shard, result, n in [("s0", "miss", 15), ("s0", "hit", 5), ("s1", "hit", 20)]:
    for _ in range(n):
        client.increment("cache.get", tags=[f"shard:{shard}", f"result:{result}"])
# Metrics no mapping takes: skipped, not rejected.
client.gauge("process.memory_bytes", 1024)
client.timing("unrelated.timer", 3)
client.flush()
client.close_socket()
print("done", flush=True)
