#!/usr/bin/env bash
# The end-to-end figures of docs/performance.md: StatsD over UDP, HTTP NDJSON, replay, CPU at
# sidecar load, memory at 1,000 shards and 1M keys, /metrics at 1,000 shards, the series
# one sidecar exports at the default caps, and the series budget of the two exposition profiles.
# Each runs a fresh release agent on loopback ports and `skewwatch bench` (or a fixed StatsD
# fixture) against it, bounded in time.
#
#   scripts/perf-figures.sh [udp|http|replay|sidecar|memory|metrics|series|budget]...   # default: all
#
# Environment: DURATION (seconds per step, default 10), AGENT_CONFIG (a configuration file for
# the agent, e.g. a larger statsd.receive_buffer_bytes), SKEWWATCH_BIN (default: build the
# release binary), CARGO_TARGET_DIR. The in-process figures come from criterion:
#   cargo bench -p skewwatch-detectors --bench record
#   cargo bench -p skewwatch --bench ingest
#   cargo bench -p skewwatch --bench outputs
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
STATSD=127.0.0.1:48125
HTTP=127.0.0.1:49477
if [ -z "${SKEWWATCH_BIN:-}" ]; then
  timeout 1800 cargo build --release -p skewwatch >&2
  SKEWWATCH_BIN=${CARGO_TARGET_DIR:-target}/release/skewwatch
fi

work=$(mktemp -d)
agent_pid=
stop_agent() {
  if [ -n "$agent_pid" ]; then
    kill "$agent_pid" 2>/dev/null || true
    # A scraped agent waits for one more scrape before it exits: this is it.
    sleep 0.2
    curl -s -o /dev/null "http://$HTTP/metrics" || true
    wait "$agent_pid" 2>/dev/null || true
    agent_pid=
  fi
}
trap 'stop_agent; rm -rf "$work"' EXIT

# Starts an agent (on AGENT_CONFIG, else the embedded default configuration) and waits until
# it listens.
start_agent() {
  stop_agent
  "$SKEWWATCH_BIN" run ${AGENT_CONFIG:+--config "$AGENT_CONFIG"} --http-listen "$HTTP" \
    --statsd-listen "$STATSD" >"$work/agent.log" 2>&1 &
  agent_pid=$!
  for _ in $(seq 150); do
    if (exec 3<>"/dev/tcp/${HTTP%:*}/${HTTP#*:}") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "the agent did not start:" >&2
  cat "$work/agent.log" >&2
  exit 1
}

# `bench SECONDS ARGS...`: one `skewwatch bench` run against the agent.
bench() {
  local secs=$1
  shift
  timeout 900 "$SKEWWATCH_BIN" bench --statsd "$STATSD" --http "$HTTP" --pid "$agent_pid" \
    --duration-secs "$secs" "$@"
}

header() {
  echo
  echo "## $1 ($(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg))"
}

udp() {
  header "StatsD over UDP: 64 shards, 1,400-byte datagrams; where loss begins"
  start_agent
  bench "$DURATION" --mode statsd --rate 1M,2M,2500k,3M,3500k,4M
}

http() {
  header "HTTP NDJSON: 1,000-record batches on keep-alive connections"
  start_agent
  bench "$DURATION" --mode http --senders 2 --rate 500k,1M,2M,3M
}

sidecar() {
  header "CPU at sidecar load: 50k observations/s over StatsD"
  start_agent
  bench 30 --mode statsd --rate 50k
}

memory() {
  header "Memory: 1,000 shards, 1M distinct keys, 200k observations/s, three windows"
  start_agent
  bench 35 --mode statsd --rate 200k --shards 1000 --keys 1000000 --uniform-keys
  metrics_timing
}

# /metrics at the shard count of the last load: size, series, and median and max of 20 scrapes.
metrics_timing() {
  curl -s "http://$HTTP/metrics" >"$work/page.txt"
  echo "GET /metrics: $(wc -c <"$work/page.txt") bytes, $(grep -vc '^#' "$work/page.txt") series,"\
    "$(grep -c '^skewwatch_shard_share_ratio' "$work/page.txt") shards"
  for _ in $(seq 20); do
    curl -s -o /dev/null -w '%{time_total}\n' "http://$HTTP/metrics"
  done | sort -n | awk '{ t[NR] = $1 } END { printf "  median %.1f ms, max %.1f ms over %d scrapes\n", 1000 * t[int((NR + 1) / 2)], 1000 * t[NR], NR }'
}

metrics() {
  header "/metrics at 1,000 shards"
  start_agent
  # Two windows of traffic over 1,000 shards, so the snapshot holds them all.
  bench 22 --mode statsd --rate 100k --shards 1000 --keys 10000 >/dev/null
  metrics_timing
}

# Every series family, counted from a real scrape of an agent on the default configuration
# fed one group with more shards than limits.max_shards_per_group (1,024), each with every
# outcome class, cache hits and misses, latencies and more keys than are exported.
series() {
  header "Series of one sidecar at the default caps: one group, 1,100 shards, every family"
  start_agent
  python3 - "${STATSD%:*}" "${STATSD#*:}" 1100 <<'PY'
import socket, sys
host, port, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
outcomes = ["ok", "error", "timeout", "not_found", "throttled", "unavailable"]
datagram = []
def flush():
    if datagram:
        sock.sendto("\n".join(datagram).encode(), (host, port))
        datagram.clear()
for i in range(shards):
    tags = f"group:metadata-db,shard:shard-{i:04d},key:user:{i % 50}"
    lines = [f"skewwatch.request:5|ms|#{tags},cache:hit"]
    lines += [f"skewwatch.request:{10 * (j + 1)}|ms|#{tags},cache:miss,outcome:{o}"
              for j, o in enumerate(outcomes)]
    for line in lines:
        if sum(len(x) + 1 for x in datagram) + len(line) > 1400:
            flush()
        datagram.append(line)
flush()
PY
  # Wait for the window that holds the fixture (10 s windows).
  for _ in $(seq 100); do
    if [ "$(curl -s "http://$HTTP/metrics" | grep -c '^skewwatch_shard_requests_total')" -ge 6150 ]; then break; fi
    sleep 0.25
  done
  curl -s "http://$HTTP/metrics" | grep -v '^#' | sed -E 's/[{ ].*//; s/_(bucket|sum|count)$//' |
    sort | uniq -c | sort -rn | awk '{ printf "  %6d %s\n", $1, $2 }'
  metrics_timing
}

# Series per sidecar at 16, 64, 256 and 1,024 shards of one group, on the default
# configuration and on the fleet profile (exposition.profile: fleet and nothing else): a fresh
# agent per run, fed one window of realistic traffic (scripts/series-budget.py says what), the
# page tallied by family; then what one native histogram per shard would be (computed).
budget() {
  header "Series budget: one group at 16, 64, 256 and 1,024 shards, profiles full and fleet"
  printf 'exposition:\n  profile: fleet\n' >"$work/fleet.yaml"
  mkdir -p "$work/budget"
  for profile in full fleet; do
    for shards in 16 64 256 1024; do
      if [ "$profile" = fleet ]; then
        AGENT_CONFIG="$work/fleet.yaml" start_agent
      else
        AGENT_CONFIG='' start_agent
      fi
      timeout 120 python3 scripts/series-budget.py measure "$STATSD" "$HTTP" "$shards" \
        "$work/budget/page-$profile-$shards.txt"
    done
  done
  stop_agent
  python3 scripts/series-budget.py table "$work/budget"
}

replay() {
  header "replay: 5M records, 64 shards, 10k keys, 100k records/s of trace time"
  awk 'BEGIN { srand(1); for (i = 0; i < 5000000; i++) {
      printf "{\"ts\":%.5f,\"group\":\"metadata-db\",\"shard\":\"shard-%d\",\"key\":\"user:%d\",\"latency_ms\":%.2f}\n",
        1700000000 + i / 100000, int(rand() * 64), int(rand() * rand() * 10000), rand() * 50 } }' \
    >"$work/trace.ndjson"
  for _ in 1 2 3; do
    timeout 300 "$SKEWWATCH_BIN" replay "$work/trace.ndjson" 2>&1 >/dev/null | grep records/s
  done
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(udp http replay sidecar memory metrics series budget)
echo "# skewwatch performance figures: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r)"
for s in "${steps[@]}"; do
  case "$s" in
    udp | http | replay | sidecar | memory | metrics | series | budget) "$s" ;;
    *) echo "unknown figure $s" >&2; exit 2 ;;
  esac
done
