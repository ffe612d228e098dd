#!/usr/bin/env bash
# StatsD throughput and loss of the container image's agent with and without the forced
# receive buffer (docs/performance.md, "The container image"). Run as root:
#
#   scripts/image-statsd-buffer.sh                       # defaults below
#   RATES=250k,1M ROUNDS=1 scripts/image-statsd-buffer.sh
#
# Unpacks target/image/skewwatch.oci.tar (scripts/build-image.sh) and runs its entrypoint
# chrooted in three ways, the cases taking turns in each round, `skewwatch bench` (the image's
# binary, from outside) sending the same StatsD load to each on loopback:
#   forced   as root: SO_RCVBUFFORCE grants the configured 32 MiB (a container with
#            CAP_NET_ADMIN);
#   rmem_max as user 65532 without capabilities (the Kubernetes example): SO_RCVBUF, capped
#            at this machine's net.core.rmem_max;
#   default  the same user, with the buffer a node gets at the kernel's default rmem_max
#            (212992 bytes), set through statsd.receive_buffer_bytes, since changing the
#            host's sysctl would change it for every other socket too.
# Prints one line per case and rate: the median round by lines accepted, with the range of
# the loss over the rounds and the UDP thread's CPU (cores).
#
# Environment: RATES (comma list, k/M suffixes), ROUNDS, DURATION (seconds per step), SHARDS,
# DEFAULT_RMEM (bytes). Bounded: every start-up and step has a timeout. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

RATES=${RATES:-250k,500k,1M,2M}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
SHARDS=${SHARDS:-64}
DEFAULT_RMEM=${DEFAULT_RMEM:-212992}
archive=target/image/skewwatch.oci.tar
[ -f "$archive" ] || { echo "$archive missing: run scripts/build-image.sh" >&2; exit 1; }

work=$(mktemp -d /tmp/skewwatch-image-bench.XXXXXX)
agent_pid=
cleanup() {
  [ -z "$agent_pid" ] || kill "$agent_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

skopeo copy --quiet "oci-archive:$archive" "oci:$work/layout:skewwatch"
umoci unpack --image "$work/layout:skewwatch" "$work/bundle" >/dev/null
rootfs=$work/bundle/rootfs
bin=$rootfs/usr/bin/skewwatch
mkdir -p "$rootfs/run/skewwatch"
chown 65532:65532 "$rootfs/run/skewwatch"
printf 'listen: {http: "127.0.0.1:0", statsd: "127.0.0.1:0"}\n' >"$rootfs/etc/skewwatch/forced.yaml"
cp "$rootfs/etc/skewwatch/forced.yaml" "$rootfs/etc/skewwatch/rmem_max.yaml"
printf 'listen: {http: "127.0.0.1:0", statsd: "127.0.0.1:0"}\nstatsd: {receive_buffer_bytes: %s}\n' \
  "$DEFAULT_RMEM" >"$rootfs/etc/skewwatch/default.yaml"

run_case() { # case, round
  local user=65532:65532 buffer=33554432
  [ "$1" = forced ] && user=0:0
  [ "$1" = default ] && buffer=$DEFAULT_RMEM
  rm -f "$rootfs/run/skewwatch/addresses.json"
  chroot --userspec="$user" --groups="${user%:*}" "$rootfs" /usr/bin/skewwatch run \
    --config "/etc/skewwatch/$1.yaml" --listen-addresses-file /run/skewwatch/addresses.json \
    >"$work/agent.log" 2>&1 &
  agent_pid=$!
  local deadline=$((SECONDS + 30))
  until [ -s "$rootfs/run/skewwatch/addresses.json" ]; do
    [ $SECONDS -lt $deadline ] || { cat "$work/agent.log" >&2; exit 1; }
    sleep 0.2
  done
  local http statsd granted
  read -r http statsd < <(python3 -c 'import json, sys
a = json.load(open(sys.argv[1])); print(a["http"], a["statsd"])' "$rootfs/run/skewwatch/addresses.json")
  # What the kernel granted: the configured size, or less, which the agent logs.
  granted=$(awk '/granted_bytes=/ { sub(/.*granted_bytes=/, ""); print $1 }' "$work/agent.log")
  timeout $((120 + 4 * DURATION)) "$bin" bench --mode statsd --statsd "$statsd" --http "$http" \
    --rate "$RATES" --duration-secs "$DURATION" --shards "$SHARDS" --pid "$agent_pid" --json \
    | sed "s/^/$1 $2 ${granted:-$buffer} /" >>"$work/rows"
  kill "$agent_pid"
  wait "$agent_pid" || true
  agent_pid=
}

for round in $(seq "$ROUNDS"); do
  for c in forced rmem_max default; do run_case "$c" "$round"; done
done

echo "rmem_max here: $(cat /proc/sys/net/core/rmem_max) bytes; $(nproc) cores; ${DURATION} s steps, $ROUNDS rounds"
python3 - "$work/rows" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    case, rnd, buf, js = line.split(" ", 3)
    r = json.loads(js)
    rows.setdefault((case, r["target_rate"]), []).append((int(buf), r))
print(f"{'case':<9} {'buffer':>10} {'target/s':>9} {'accepted/s':>11} {'lost %':>7} "
      f"{'kernel drops':>12} {'lost % range':>14} {'UDP thread':>10}")
order = ["forced", "rmem_max", "default"]
def lost(r):
    return 100.0 * max(r["lost_records"] or 0, 0) / max(r["sent_records"], 1)
for (case, rate), rs in sorted(rows.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
    rs.sort(key=lambda br: br[1]["accepted_records"] or 0)
    buf, m = rs[len(rs) // 2]
    losses = [lost(r) for _, r in rs]
    udp = m["agent_thread_cores"].get("statsd-udp", 0.0)
    print(f"{case:<9} {buf:>10} {rate:>9} {m['accepted_rate']:>11.0f} {lost(m):>7.2f} "
          f"{m['kernel_drop_datagrams'] or 0:>12} {min(losses):>6.2f}-{max(losses):<7.2f} "
          f"{udp:>10.2f}")
EOF
