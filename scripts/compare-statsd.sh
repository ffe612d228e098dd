#!/usr/bin/env bash
# Side-by-side: skewwatch and Etsy's StatsD daemon (npm package `statsd`) on the same StatsD
# load, on loopback only, one daemon at a time, with `skewwatch bench` as the load generator.
#
#   scripts/compare-statsd.sh                         # defaults below
#   RATES=100k,500k,1M DURATION=5 scripts/compare-statsd.sh
#
# For each target rate it reports, for each daemon: lines/s sent, lines/s the daemon says it
# received (skewwatch: skewwatch_ingest_records_total from /metrics; Etsy: its own
# statsd.metrics_received, added up over flushes by scripts/etsy/count-backend.js and read from
# the management port), the loss, the kernel's drops on the daemon's socket (/proc/net/udp),
# the daemon's CPU use while sending (cores) and its resident memory. "Before loss" is the
# highest rate with no lost line.
#
# Etsy statsd does not understand skewwatch's tags: it folds DogStatsD tags into the metric
# name and keeps a timer per name. The comparison is raw line handling on identical datagrams.
#
# Environment: RATES (comma list, k/M suffixes), DURATION (seconds per step), SHARDS, KEYS,
# SENDERS, ETSY_DIR (where statsd is installed; installed with npm when missing),
# SKEWWATCH_BIN (default: build the release binary), CARGO_TARGET_DIR.
# Bounded: every step, start-up and wait has a timeout. Loopback addresses only.
set -euo pipefail
cd "$(dirname "$0")/.."

RATES=${RATES:-50k,250k,500k,1M,2M,3M}
DURATION=${DURATION:-5}
SHARDS=${SHARDS:-64}
KEYS=${KEYS:-0}
SENDERS=${SENDERS:-1}
ETSY_DIR=${ETSY_DIR:-/tmp/skewwatch-etsy-statsd}
ETSY_VERSION=${ETSY_VERSION:-0.9.0}
SW_STATSD=127.0.0.1:28125
SW_HTTP=127.0.0.1:29477
ETSY_PORT=38125
ETSY_MGMT=38126

if [ -z "${SKEWWATCH_BIN:-}" ]; then
  timeout 1800 cargo build --release -p skewwatch >&2
  SKEWWATCH_BIN=${CARGO_TARGET_DIR:-target}/release/skewwatch
fi
if [ ! -f "$ETSY_DIR/node_modules/statsd/stats.js" ]; then
  echo "Installing Etsy statsd $ETSY_VERSION into $ETSY_DIR ..." >&2
  timeout 600 npm install --silent --no-audit --no-fund --prefix "$ETSY_DIR" "statsd@$ETSY_VERSION" >&2
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# A JSON field of one `skewwatch bench --json` line.
jf() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" | tr -d '"'; }

# Kernel drops on the UDP socket bound to 127.0.0.1:PORT (last column of /proc/net/udp).
udp_drops() {
  local port_hex
  port_hex=$(printf '%04X' "$1")
  awk -v p="0100007F:$port_hex" '$2 == p { print $NF; found = 1 } END { if (!found) print 0 }' /proc/net/udp
}

# A line of Etsy's management `stats` output, e.g. `etsy_stat metrics_received`.
etsy_stat() {
  timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETSY_MGMT; printf 'stats\n' >&3;
    while IFS= read -r l <&3; do echo \"\$l\"; [ \"\$l\" = END ] && break; done" \
    | sed -n "s/^skewwatch\.$1: //p" | tr -d '\r'
}

wait_until() { # seconds, command...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

echo "# Machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r)"
echo "# Load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# Load: $SHARDS shards, $KEYS keys, $SENDERS sender(s), ${DURATION} s per step, 1,400-byte datagrams"

# --- skewwatch ---------------------------------------------------------------------------
"$SKEWWATCH_BIN" run --http-listen "$SW_HTTP" --statsd-listen "$SW_STATSD" \
  >"$work/skewwatch.log" 2>&1 &
sw_pid=$!
pids+=("$sw_pid")
wait_until 30 bash -c "exec 3<>/dev/tcp/${SW_HTTP%:*}/${SW_HTTP#*:}" \
  || { echo "skewwatch did not start" >&2; cat "$work/skewwatch.log" >&2; exit 1; }

timeout $((60 + 30 * $(tr ',' '\n' <<<"$RATES" | wc -l) * (DURATION + 15))) \
  "$SKEWWATCH_BIN" bench --mode statsd --statsd "$SW_STATSD" --http "$SW_HTTP" \
  --rate "$RATES" --duration-secs "$DURATION" --shards "$SHARDS" --keys "$KEYS" \
  --senders "$SENDERS" --pid "$sw_pid" --json >"$work/skewwatch.jsonl"
sw_rss_peak=$(awk '/VmHWM/ { print $2 / 1024 }' "/proc/$sw_pid/status")
kill "$sw_pid"

# --- Etsy statsd -------------------------------------------------------------------------
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
etsy_pid=$!
pids+=("$etsy_pid")
wait_until 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETSY_MGMT" \
  || { echo "Etsy statsd did not start" >&2; cat "$work/etsy.log" >&2; exit 1; }
# The counting backend sees statsd's counters from the first flush on.
flushes=0
for _ in $(seq 75); do
  flushes=$(etsy_stat flushes || true)
  [ "${flushes:-0}" -ge 1 ] && break
  sleep 0.2
done
[ "${flushes:-0}" -ge 1 ] || { echo "Etsy statsd did not flush" >&2; exit 1; }

: >"$work/etsy.jsonl"
for rate in ${RATES//,/ }; do
  before=$(etsy_stat metrics_received)
  drops_before=$(udp_drops $ETSY_PORT)
  timeout $((60 + DURATION)) "$SKEWWATCH_BIN" bench --mode statsd --statsd "127.0.0.1:$ETSY_PORT" \
    --readback false --rate "$rate" --duration-secs "$DURATION" --shards "$SHARDS" \
    --keys "$KEYS" --senders "$SENDERS" --pid "$etsy_pid" --json >"$work/step.json"
  # Wait until Etsy has read what is queued: its count stops moving (at most 20 s).
  last=-1
  for _ in $(seq 100); do
    now=$(etsy_stat metrics_received)
    [ "$now" = "$last" ] && break
    last=$now
    sleep 0.2
  done
  drops=$(( $(udp_drops $ETSY_PORT) - drops_before ))
  echo "$(cat "$work/step.json") $((now - before)) $drops" >>"$work/etsy.jsonl"
done
etsy_rss_peak=$(awk '/VmHWM/ { print $2 / 1024 }' "/proc/$etsy_pid/status")

# --- table -------------------------------------------------------------------------------
echo
echo "| target lines/s | daemon | sent lines/s | received lines/s | lost lines | lost % | kernel drops (datagrams) | CPU (cores) | RSS MiB |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
paste -d '\n' "$work/skewwatch.jsonl" "$work/etsy.jsonl" | while IFS= read -r sw && IFS= read -r etsy; do
  rate=$(jf target_rate <<<"$sw")
  secs=$(jf send_secs <<<"$sw")
  sent=$(jf sent_records <<<"$sw")
  acc=$(jf accepted_records <<<"$sw")
  lost=$(jf lost_records <<<"$sw")
  kd=$(jf kernel_drop_datagrams <<<"$sw")
  awk -v r="$rate" -v s="$secs" -v n="$sent" -v a="$acc" -v l="$lost" -v k="$kd" \
    -v c="$(jf agent_cpu_cores <<<"$sw")" -v m="$(jf agent_rss_bytes <<<"$sw")" \
    'BEGIN { printf "| %d | skewwatch | %.0f | %.0f | %d | %.3f | %d | %.2f | %.1f |\n", r, n/s, a/s, l, 100*l/n, k, c, m/1048576 }'
  ejson=${etsy% * *}
  erecv=$(awk '{ print $(NF-1) }' <<<"$etsy")
  edrops=$(awk '{ print $NF }' <<<"$etsy")
  esecs=$(jf send_secs <<<"$ejson")
  esent=$(jf sent_records <<<"$ejson")
  awk -v r="$rate" -v s="$esecs" -v n="$esent" -v a="$erecv" -v k="$edrops" \
    -v c="$(jf agent_cpu_cores <<<"$ejson")" -v m="$(jf agent_rss_bytes <<<"$ejson")" \
    'BEGIN { printf "| %d | Etsy statsd | %.0f | %.0f | %d | %.3f | %d | %.2f | %.1f |\n", r, n/s, a/s, n-a, 100*(n-a)/n, k, c, m/1048576 }'
done
echo
echo "Peak RSS over the run: skewwatch ${sw_rss_peak} MiB, Etsy statsd ${etsy_rss_peak} MiB."
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
