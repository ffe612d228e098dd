#!/usr/bin/env bash
# Side-by-side: skewwatch, Etsy's StatsD daemon (npm package `statsd`) and collectd's statsd
# plugin on the same StatsD load, on loopback only, one daemon at a time, with `skewwatch bench`
# as the load generator.
#
#   scripts/compare-statsd.sh                                      # defaults below
#   DAEMONS=skewwatch,collectd RATES=250k,1M ROUNDS=1 scripts/compare-statsd.sh
#
# For each daemon and target rate it reports lines/s sent, lines/s the daemon says it received,
# the loss, the kernel's drops on the daemon's socket (/proc/net/udp, or skewwatch's own
# SO_RXQ_OVFL count), the daemon's CPU use while sending (cores) and its resident memory.
# Each daemon runs the whole rate sweep ROUNDS times, the daemons taking turns (skewwatch,
# Etsy, collectd, skewwatch, ...), each round in a fresh process; the table gives, for each
# daemon and rate, the median round by lines received (all its columns) and the range of
# lines received over the rounds. "Host busy" is the whole machine's CPU while sending. "Before loss" is the highest rate with no lost line in any
# round.
#
# What "received" is:
# - skewwatch: skewwatch_ingest_records_total from /metrics (read by `skewwatch bench`).
# - Etsy statsd: its own statsd.metrics_received, added up over flushes by
#   scripts/etsy/count-backend.js and read from the management port.
# - collectd: the statsd plugin's per-interval timer counts (TimerCount), written by the csv
#   plugin as gauge-<timer>-count files and added up here (scripts/collectd/collectd.conf.in).
#
# The lines are not the same for all three. skewwatch and Etsy get DogStatsD lines with group
# and shard tags (what skewwatch needs; Etsy folds the tags into metric names). collectd's
# statsd plugin rejects any line with tags, so it gets `skewwatch bench --plain`: the same
# requests with group, shard and outcome folded into the metric name (shorter lines, so more
# per datagram). This compares raw line handling, not equal semantics.
#
# Environment: DAEMONS (comma list of skewwatch, etsy, collectd), RATES (comma list, k/M
# suffixes), ROUNDS, DURATION (seconds per step), SHARDS, KEYS, SENDERS, ETSY_DIR (where statsd
# is installed; installed with npm when missing), COLLECTD_BIN, COLLECTD_INTERVAL (seconds),
# SKEWWATCH_BIN (default: build the release binary), CARGO_TARGET_DIR, RAW_OUT (a file to
# keep every step's row in).
# Bounded: every step, start-up and wait has a timeout. Loopback addresses only.
set -euo pipefail
cd "$(dirname "$0")/.."

DAEMONS=${DAEMONS:-skewwatch,etsy,collectd}
RATES=${RATES:-250k,500k,1M,2M,3M,4M}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
SHARDS=${SHARDS:-64}
KEYS=${KEYS:-0}
SENDERS=${SENDERS:-1}
ETSY_DIR=${ETSY_DIR:-/tmp/skewwatch-etsy-statsd}
ETSY_VERSION=${ETSY_VERSION:-0.9.0}
COLLECTD_BIN=${COLLECTD_BIN:-collectd}
COLLECTD_INTERVAL=${COLLECTD_INTERVAL:-1}
SW_STATSD=127.0.0.1:28125
SW_HTTP=127.0.0.1:29477
ETSY_PORT=38125
ETSY_MGMT=38126
COLLECTD_PORT=48125

for d in ${DAEMONS//,/ }; do
  case $d in
    skewwatch | etsy) ;;
    collectd)
      command -v "$COLLECTD_BIN" >/dev/null \
        || { echo "collectd not found: apt-get install collectd-core, or set COLLECTD_BIN" >&2; exit 1; } ;;
    *) echo "Unknown daemon '$d' in DAEMONS (skewwatch, etsy, collectd)" >&2; exit 1 ;;
  esac
done
if [ -z "${SKEWWATCH_BIN:-}" ]; then
  timeout 1800 cargo build --release -p skewwatch >&2
  SKEWWATCH_BIN=${CARGO_TARGET_DIR:-target}/release/skewwatch
fi
if [[ ",$DAEMONS," == *,etsy,* && ! -f "$ETSY_DIR/node_modules/statsd/stats.js" ]]; then
  echo "Installing Etsy statsd $ETSY_VERSION into $ETSY_DIR ..." >&2
  timeout 600 npm install --silent --no-audit --no-fund --prefix "$ETSY_DIR" "statsd@$ETSY_VERSION" >&2
fi

work=$(mktemp -d)
daemon_pid=
cleanup() {
  [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Kernel drops on the UDP socket bound to 127.0.0.1:PORT (last column of /proc/net/udp).
udp_drops() {
  local port_hex
  port_hex=$(printf '%04X' "$1")
  awk -v p="0100007F:$port_hex" '$2 == p { print $NF; found = 1 } END { if (!found) print 0 }' /proc/net/udp
}

udp_bound() {
  grep -q "0100007F:$(printf '%04X' "$1") " /proc/net/udp
}

wait_until() { # seconds, command...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# One load step: `bench RATE PORT [extra bench args]` prints the bench's JSON line.
bench() {
  local rate=$1 port=$2; shift 2
  timeout $((60 + DURATION)) "$SKEWWATCH_BIN" bench --mode statsd --statsd "127.0.0.1:$port" \
    --rate "$rate" --duration-secs "$DURATION" --shards "$SHARDS" --keys "$KEYS" \
    --senders "$SENDERS" --pid "$daemon_pid" --json "$@"
}

# Appends one result row: daemon round received kernel-drops bench-json.
row() { echo "$1 $2 $3 $4 $5" >>"$work/rows"; }

stop_daemon() {
  echo "$1 $(awk '/VmHWM/ { print $2 * 1024 }' "/proc/$daemon_pid/status")" >>"$work/peaks"
  kill "$daemon_pid"
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=
}

# --- skewwatch ---------------------------------------------------------------------------
run_skewwatch() { # round
  "$SKEWWATCH_BIN" run --http-listen "$SW_HTTP" --statsd-listen "$SW_STATSD" \
    >"$work/skewwatch.log" 2>&1 &
  daemon_pid=$!
  wait_until 30 bash -c "exec 3<>/dev/tcp/${SW_HTTP%:*}/${SW_HTTP#*:}" \
    || { echo "skewwatch did not start" >&2; cat "$work/skewwatch.log" >&2; exit 1; }
  local rate json
  for rate in ${RATES//,/ }; do
    json=$(bench "$rate" "${SW_STATSD#*:}" --http "$SW_HTTP")
    row skewwatch "$1" "$(jf accepted_records <<<"$json")" "$(jf kernel_drop_datagrams <<<"$json")" "$json"
  done
  stop_daemon skewwatch
}

# --- Etsy statsd -------------------------------------------------------------------------
# A line of Etsy's management `stats` output, e.g. `etsy_stat metrics_received`.
etsy_stat() {
  timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETSY_MGMT; printf 'stats\n' >&3;
    while IFS= read -r l <&3; do echo \"\$l\"; [ \"\$l\" = END ] && break; done" \
    | sed -n "s/^skewwatch\.$1: //p" | tr -d '\r'
}

run_etsy() { # round
  cat >"$work/etsy-config.js" <<EOF
{
  address: "127.0.0.1",
  port: $ETSY_PORT,
  mgmt_address: "127.0.0.1",
  mgmt_port: $ETSY_MGMT,
  flushInterval: 10000,
  backends: ["$PWD/scripts/etsy/count-backend.js"]
}
EOF
  node "$ETSY_DIR/node_modules/statsd/stats.js" "$work/etsy-config.js" >"$work/etsy.log" 2>&1 &
  daemon_pid=$!
  wait_until 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETSY_MGMT" \
    || { echo "Etsy statsd did not start" >&2; cat "$work/etsy.log" >&2; exit 1; }
  # The counting backend sees statsd's counters from the first flush on.
  local flushes=0 rate before drops_before json last now
  for _ in $(seq 75); do
    flushes=$(etsy_stat flushes || true)
    [ "${flushes:-0}" -ge 1 ] && break
    sleep 0.2
  done
  [ "${flushes:-0}" -ge 1 ] || { echo "Etsy statsd did not flush" >&2; exit 1; }
  for rate in ${RATES//,/ }; do
    before=$(etsy_stat metrics_received)
    drops_before=$(udp_drops $ETSY_PORT)
    json=$(bench "$rate" $ETSY_PORT --readback false)
    # Wait until Etsy has read what is queued: its count stops moving (at most 20 s).
    last=-1
    for _ in $(seq 100); do
      now=$(etsy_stat metrics_received)
      [ "$now" = "$last" ] && break
      last=$now
      sleep 0.2
    done
    row etsy "$1" $((now - before)) $(($(udp_drops $ETSY_PORT) - drops_before)) "$json"
  done
  stop_daemon etsy
}

# --- collectd ----------------------------------------------------------------------------
# Lines collectd's statsd plugin has accounted so far: every interval's count of every timer.
collectd_count() {
  find "$work/collectd-csv" -name 'gauge-*-count-*' -exec cat {} + 2>/dev/null \
    | awk -F, '$1 != "epoch" { s += $2 } END { printf "%d\n", s }'
}

# Waits until the count has not moved for three intervals (the plugin reports once per
# interval, so a shorter quiet spell proves nothing), at most 30 s; prints the count.
collectd_settle() {
  local quiet_for=$((3 * COLLECTD_INTERVAL)) deadline=$((SECONDS + 30)) last now changed=$SECONDS
  last=$(collectd_count)
  while [ $((SECONDS - changed)) -lt "$quiet_for" ] && [ $SECONDS -lt $deadline ]; do
    sleep 0.5
    now=$(collectd_count)
    [ "$now" = "$last" ] || { last=$now; changed=$SECONDS; }
  done
  echo "$last"
}

run_collectd() { # round
  rm -rf "$work/collectd-csv"
  mkdir -p "$work/collectd-csv"
  sed -e "s|@PORT@|$COLLECTD_PORT|; s|@WORK@|$work|g; s|@DATADIR@|$work/collectd-csv|" \
    -e "s|@INTERVAL@|$COLLECTD_INTERVAL|" scripts/collectd/collectd.conf.in >"$work/collectd.conf"
  "$COLLECTD_BIN" -f -C "$work/collectd.conf" >"$work/collectd.log" 2>&1 &
  daemon_pid=$!
  wait_until 30 udp_bound $COLLECTD_PORT \
    || { echo "collectd did not start" >&2; cat "$work/collectd.log" >&2; exit 1; }
  local rate before drops_before json
  for rate in ${RATES//,/ }; do
    before=$(collectd_settle)
    drops_before=$(udp_drops $COLLECTD_PORT)
    json=$(bench "$rate" $COLLECTD_PORT --readback false --plain)
    row collectd "$1" $(($(collectd_settle) - before)) $(($(udp_drops $COLLECTD_PORT) - drops_before)) "$json"
  done
  if grep -q "Unable to parse" "$work/collectd.log"; then
    echo "collectd rejected lines:" >&2
    grep -m 3 "Unable to parse" "$work/collectd.log" >&2
    exit 1
  fi
  stop_daemon collectd
}

# A JSON field of one `skewwatch bench --json` line.
jf() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" | tr -d '"'; }

echo "# Machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r)"
echo "# Load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# Load: $SHARDS shards, $KEYS keys, $SENDERS sender(s), ${DURATION} s per step, 1,400-byte datagrams, $ROUNDS round(s)"
: >"$work/rows"
: >"$work/peaks"
for round in $(seq "$ROUNDS"); do
  for d in ${DAEMONS//,/ }; do
    echo "# round $round: $d ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
    "run_$d" "$round"
  done
done
[ -z "${RAW_OUT:-}" ] || cp "$work/rows" "$RAW_OUT"

# --- table -------------------------------------------------------------------------------
python3 - "$work/rows" "$work/peaks" <<'EOF'
import json, statistics, sys
from collections import defaultdict

names = {"skewwatch": "skewwatch", "etsy": "Etsy statsd", "collectd": "collectd"}
steps = defaultdict(list)
for line in open(sys.argv[1]):
    daemon, rnd, received, drops, js = line.split(" ", 4)
    b = json.loads(js)
    sent, secs = b["sent_records"], b["send_secs"]
    steps[(b["target_rate"], daemon)].append({
        "sent/s": sent / secs, "received/s": int(received) / secs,
        "lost": sent - int(received), "lost %": 100 * (sent - int(received)) / sent,
        "drops": int(drops), "cores": b["agent_cpu_cores"], "rss": b["agent_rss_bytes"] / 2**20,
        "lines/datagram": sent / max(b["sent_units"], 1), "host busy": b["host_busy_cores"],
    })
    r = steps[(b["target_rate"], daemon)][-1]
    # Lost lines the kernel's drops do not explain (at the mean lines per datagram).
    r["unexplained"] = b["unaccounted_records"] if daemon == "skewwatch" else r["lost"] - r["drops"] * r["lines/datagram"]
print("| target lines/s | daemon | sent lines/s | received lines/s | received, range over rounds | lost % | kernel drops (datagrams) | lost, not kernel drops (lines) | CPU (cores) | RSS MiB | lines/datagram | host busy (cores) |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (rate, daemon), rows in sorted(steps.items(), key=lambda kv: (kv[0][0], list(names).index(kv[0][1]))):
    # The median round by lines received, whole, so that a row's figures belong together.
    rows.sort(key=lambda r: r["received/s"])
    m = rows[(len(rows) - 1) // 2]
    spread = f"{rows[0]['received/s']:,.0f}–{rows[-1]['received/s']:,.0f}" if len(rows) > 1 else "-"
    print(f"| {rate:,} | {names[daemon]} | {m['sent/s']:,.0f} | {m['received/s']:,.0f} | {spread} "
          f"| {m['lost %']:.2f} | {m['drops']:,} | {m['unexplained']:,.0f} | {m['cores']:.2f} | {m['rss']:.1f} "
          f"| {m['lines/datagram']:.1f} | {m['host busy']:.2f} |")
print()
for daemon in names:
    clean = [rate for (rate, d), rows in steps.items() if d == daemon and all(r["lost"] <= 0 for r in rows)]
    lossy = [rate for (rate, d), rows in steps.items() if d == daemon and any(r["lost"] > 0 for r in rows)]
    if clean or lossy:
        below = [r for r in clean if not lossy or r < min(lossy)]
        print(f"{names[daemon]}: before loss {max(below):,} lines/s" if below else f"{names[daemon]}: lost lines at every rate")
peaks = defaultdict(list)
for line in open(sys.argv[2]):
    daemon, peak = line.split()
    peaks[daemon].append(float(peak) / 2**20)
print("Peak RSS over a round (median): " + ", ".join(f"{names[d]} {statistics.median(p):.1f} MiB" for d, p in peaks.items()))
EOF
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
