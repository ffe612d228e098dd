"""Plain StatsD (no tags) through the Python `statsd` package: shard and key are in the
metric name. Usage: plain_statsd.py HOST PORT."""
import sys

import statsd

from load import LOAD, wait_for_go

host, port = sys.argv[1], int(sys.argv[2])
client = statsd.StatsClient(host, port, prefix="shop")
wait_for_go()
for shard, key, n in LOAD:
    for _ in range(n):
        client.timing(f"orders.{shard}.{key}.get", 12)
print("done", flush=True)
