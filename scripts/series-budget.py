#!/usr/bin/env python3
"""The series budget of docs/fleet.md: what one sidecar exports per shard, in each profile.

`scripts/perf-figures.sh budget` runs it against fresh agents; it is not meant to be run alone.

  series-budget.py measure STATSD_HOST:PORT HTTP_HOST:PORT SHARDS PAGE_FILE
      Waits for a window to close, feeds one window of traffic for one group of SHARDS shards
      over StatsD, waits for the next window to close and saves the /metrics page.
  series-budget.py table DIR
      Tallies every DIR/page-<profile>-<shards>.txt by family and prints the table, then what
      one native histogram per shard would be (computed, not scraped: skewwatch does not write
      protobuf).

The traffic, per shard of group `metadata-db`, in one 10-second window: 8 successes answered
by the cache (about 1.5 ms), 4 successes from the backend (about 12 ms) and 1 error (about
20 ms); beside them on some shards the rarer classes, each on its own share of the shards:
a timeout at the 1 s deadline on 1 in 4, not_found on 1 in 8, throttled on 1 in 16,
unavailable on 1 in 32. Keys from 200 users, skewed. Latencies are log-normal, seeded.
"""
import math
import os
import random
import re
import socket
import struct
import sys
import time
import urllib.request
from collections import Counter, defaultdict

GROUP = "metadata-db"
# (outcome, cache result, median latency ms, sigma of its log, shards it is on: 1 in n)
CLASSES = [
    ("ok", "hit", 1.5, 0.6, 1, 8),
    ("ok", "miss", 12.0, 0.7, 1, 4),
    ("error", "miss", 20.0, 0.8, 1, 1),
    ("timeout", "miss", 1000.0, 0.02, 4, 1),
    ("not_found", "miss", 8.0, 0.5, 8, 1),
    ("throttled", "miss", 0.5, 0.3, 16, 1),
    ("unavailable", "miss", 2.0, 0.5, 32, 1),
]
SHARD_LABELLED = re.compile(r'[{,]shard="')


def get(http, path):
    with urllib.request.urlopen(f"http://{http}{path}", timeout=10) as r:
        return r.read().decode()


def last_window_end(http):
    m = re.search(r"^skewwatch_last_window_end_timestamp_seconds (\S+)$", get(http, "/metrics"), re.M)
    return float(m.group(1)) if m else 0.0


def wait_for_close(http, after, deadline):
    while time.time() < deadline:
        end = last_window_end(http)
        if end > after:
            return end
        time.sleep(0.1)
    sys.exit(f"no window closed after {after} within the deadline")


def lines_for(shard, rng):
    """One window of one shard's StatsD lines, and the latencies (ms) they carry."""
    out, latencies = [], []
    for outcome, cache, median, sigma, one_in, count in CLASSES:
        if shard % one_in != 0:
            continue
        for _ in range(count):
            ms = round(median * math.exp(rng.gauss(0.0, sigma)), 3)
            key = f"user:{int(200 * rng.random() ** 3)}"
            tags = f"group:{GROUP},shard:shard-{shard:04d},key:{key},cache:{cache}"
            if outcome != "ok":
                tags += f",outcome:{outcome}"
            out.append(f"skewwatch.request:{ms}|ms|#{tags}")
            latencies.append(ms)
    return out, latencies


def feed(statsd, shards):
    host, port = statsd.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rng = random.Random(shards)
    datagram, size = [], 0
    for i in range(shards):
        lines, _ = lines_for(i, rng)
        for line in lines:
            if size + len(line) + 1 > 1400:
                sock.sendto("\n".join(datagram).encode(), (host, int(port)))
                datagram, size = [], 0
            datagram.append(line)
            size += len(line) + 1
    if datagram:
        sock.sendto("\n".join(datagram).encode(), (host, int(port)))


def measure(statsd, http, shards, page_file):
    deadline = time.time() + 60
    # Feed right after a window closed, so the whole feed lands in the next one.
    closed = wait_for_close(http, last_window_end(http), deadline)
    feed(statsd, shards)
    sent_at = time.time()
    while True:
        end = wait_for_close(http, max(closed, sent_at), deadline)
        page = get(http, "/metrics")
        ok = len(re.findall(r'^skewwatch_shard_requests_total\{[^}]*outcome="ok"\}', page, re.M))
        if ok >= shards:
            break
        closed = end
    with open(page_file, "w", encoding="utf-8") as f:
        f.write(page)


def family(line):
    name = re.split(r"[{ ]", line, maxsplit=1)[0]
    return re.sub(r"_(bucket|sum|count)$", "", name) if "duration_seconds" in name else name


def tally(path):
    text = open(path, encoding="utf-8").read()
    samples = [l for l in text.splitlines() if l and not l.startswith("#")]
    by_family = Counter(family(l) for l in samples)
    per_shard = sum(1 for l in samples if SHARD_LABELLED.search(l))
    return {
        "series": len(samples),
        "bytes": len(text.encode()),
        "shard_series": per_shard,
        "families": by_family,
        "histogram": sum(1 for l in samples if "request_duration_seconds" in l),
        "outcomes": by_family.get("skewwatch_shard_requests_total", 0),
        "cache": by_family.get("skewwatch_shard_cache_requests_total", 0),
        "gauges": sum(
            n for f, n in by_family.items()
            if f.startswith("skewwatch_shard_") and not f.endswith("_total")
            and "duration_seconds" not in f
        ),
    }


# Protocol buffers, by hand: the few wire types the exposition format's MetricFamily uses.
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zigzag(n):
    return (n << 1) ^ (n >> 63)


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def uint(num, n):
    return field(num, 0, varint(n))


def sint(num, n):
    return field(num, 0, varint(zigzag(n)))


def double(num, x):
    return field(num, 1, struct.pack("<d", x))


def string(num, s):
    return field(num, 2, s.encode())


def labels(shard):
    return [
        field(1, 2, string(1, "group") + string(2, GROUP)),
        field(1, 2, string(1, "shard") + string(2, f"shard-{shard:04d}")),
    ]


def native_buckets(latencies_s, schema):
    """Sparse bucket index -> count at `schema` (bucket i holds (2^((i-1)/2^s), 2^(i/2^s)])."""
    counts = Counter()
    for v in latencies_s:
        counts[math.ceil(math.log2(v) * 2**schema - 1e-9)] += 1
    return counts


def native_histogram(shard, counts, total, sum_s):
    """One Metric with a native histogram (schema 3): spans and deltas, positive side only."""
    idx = sorted(counts)
    spans, deltas, prev_count, prev_idx = [], [], 0, None
    for i in idx:
        if prev_idx is None or i - prev_idx > 3:
            spans.append([i - (prev_idx + 1 if prev_idx is not None else 0), 1])
        else:
            # Gaps of up to 2 empty buckets are cheaper written as zero counts.
            for _ in range(i - prev_idx - 1):
                deltas.append(-prev_count)
                prev_count = 0
            spans[-1][1] += i - prev_idx
        deltas.append(counts[i] - prev_count)
        prev_count, prev_idx = counts[i], i
    h = uint(1, total) + double(2, sum_s) + sint(5, 3) + double(6, 2.0**-128) + uint(7, 0)
    for off, length in spans:
        h += field(12, 2, sint(1, off) + uint(2, length))
    for d in deltas:
        h += sint(13, d)
    return b"".join(labels(shard)) + field(7, 2, h)


def classic_histogram(shard, bounds, latencies_s, sum_s):
    h = uint(1, len(latencies_s)) + double(2, sum_s)
    for b in bounds:
        h += field(3, 2, uint(1, sum(1 for v in latencies_s if v <= b)) + double(2, b))
    return b"".join(labels(shard)) + field(7, 2, h)


def family_bytes(name, metrics):
    body = string(1, name) + uint(3, 4) + b"".join(field(4, 2, m) for m in metrics)
    return len(varint(len(body))) + len(body)


FULL_BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
FLEET_BOUNDS = [0.0025, 0.01, 0.025, 0.1, 0.25, 1, 2.5]


def native(shard_counts):
    """What the histogram family of one sidecar costs, in series and protobuf bytes, at each
    shard count: classic (full and fleet bounds) against native at schema 3, every shard with
    an hour of shard 0's traffic (every class: the widest span), since a native histogram's
    buckets fill as its distribution's span is sampled."""
    rng = random.Random(7)
    hour = []
    for _ in range(360):
        _, lat = lines_for(0, rng)
        hour += lat
    hour_s = [ms / 1000 for ms in hour]
    counts = native_buckets(hour_s, 3)
    print()
    print("Native histograms (computed): an hour of a shard with every class "
          f"({len(hour_s)} requests) fills {len(counts)} buckets at schema 3 (factor 1.09).")
    print()
    print("| shards | classic, full (series / protobuf bytes) | classic, fleet | native, schema 3 |")
    print("|---|---|---|---|")
    for n in shard_counts:
        name = "skewwatch_shard_request_duration_seconds"
        full = family_bytes(name, [classic_histogram(i, FULL_BOUNDS, hour_s, sum(hour_s)) for i in range(n)])
        fleet = family_bytes(name, [classic_histogram(i, FLEET_BOUNDS, hour_s, sum(hour_s)) for i in range(n)])
        nat = family_bytes(name, [native_histogram(i, counts, len(hour_s), sum(hour_s)) for i in range(n)])
        print(f"| {n:,} | {16 * n:,} / {full:,} | {8 * n:,} / {fleet:,} | {n:,} / {nat:,} |")


def table(directory):
    runs = defaultdict(dict)
    for name in os.listdir(directory):
        m = re.match(r"page-(full|fleet)-(\d+)\.txt$", name)
        if m:
            runs[int(m.group(2))][m.group(1)] = tally(os.path.join(directory, name))
    shard_counts = sorted(runs)
    print("| shards | profile | series | per shard (shard-labelled / shards) | outcome | cache "
          "| histogram | shard gauges | other | bytes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in shard_counts:
        for profile in ("full", "fleet"):
            t = runs[n].get(profile)
            if not t:
                continue
            other = t["series"] - t["shard_series"]
            print(f"| {n:,} | {profile} | {t['series']:,} | {t['shard_series'] / n:.1f} "
                  f"| {t['outcomes']:,} | {t['cache']:,} | {t['histogram']:,} | {t['gauges']:,} "
                  f"| {other:,} | {t['bytes']:,} |")
    for n in shard_counts[-1:]:
        for profile in ("full", "fleet"):
            t = runs[n].get(profile)
            if t:
                print(f"\nEvery family at {n:,} shards, {profile}:")
                for f, c in t["families"].most_common():
                    print(f"  {c:6d} {f}")
    native(shard_counts)


if __name__ == "__main__":
    if sys.argv[1] == "measure":
        measure(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)
