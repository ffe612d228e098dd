#!/usr/bin/env bash
# Tests skewwatch's container image as an image (.ci/run calls it; run it as root):
#
#   scripts/test-image.sh
#
# 1. Builds it twice with scripts/build-image.sh: the two digests, and the two archives, must
#    be the same.
# 2. Unpacks it with skopeo and umoci and checks its configuration (user 65532, entrypoint,
#    command, ports, the OCI labels naming this commit) and its root file system (no shell,
#    the SBOM, nothing owned by anyone but root).
# 3. Runs its entrypoint from the unpacked root file system, chrooted (so with the image's own
#    /etc and libraries) as user 65532 without capabilities: /readyz answers, /metrics
#    serves, a StatsD line is counted, an alert reaches a real Alertmanager under a host name
#    that only the image's /etc/hosts knows, and SIGTERM ends it with exit code 0.
# 4. Where `podman run` works, runs the image with podman too (start, /readyz, stop, exit 0);
#    where it does not (some sandboxes refuse the runtime's setrlimit), says so and goes on.
#
# Loopback traffic only; every wait has a deadline. Needs podman, skopeo, umoci, python3,
# curl and, under CI (CI set), Alertmanager (Debian's prometheus-alertmanager); without it
# outside CI the alert check is skipped with a message. Environment: SKEWWATCH_BIN and the
# others of scripts/build-image.sh; KEEP=1 keeps the work directory.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

passed=0
failed=0
ok() { echo "  ok: $*"; passed=$((passed + 1)); }
fail() { echo "  FAILED: $*" >&2; failed=$((failed + 1)); }
check() { # description, command...
  local what=$1; shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
finish() {
  echo "image: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

work=$(mktemp -d /tmp/skewwatch-image-test.XXXXXX)
agent_pid=
am_pid=
sender_pid=
cleanup() {
  for pid in $sender_pid $agent_pid $am_pid; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

wait_until() { # seconds, command...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# The value of a series on a Prometheus text page (first match; 0 when absent).
series() { # url, series with labels, e.g. 'skewwatch_ingest_records_total{source="statsd"}'
  curl -fsS --max-time 5 "$1" | awk -v s="$2" 'index($0, s " ") == 1 { print $2; f = 1; exit }
    END { if (!f) print 0 }'
}
at_least() { # url, series, minimum
  awk -v v="$(series "$1" "$2")" -v m="$3" 'BEGIN { exit !(v >= m) }'
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- 1. reproducible ----------------------------------------------------------------------
echo "== image: two builds"
t0=$SECONDS
digest1=$(scripts/build-image.sh)
sum1=$(sha256sum target/image/skewwatch.oci.tar | cut -d' ' -f1)
t1=$SECONDS
digest2=$(scripts/build-image.sh)
sum2=$(sha256sum target/image/skewwatch.oci.tar | cut -d' ' -f1)
echo "  digests: $digest1 $digest2 (builds took $((t1 - t0)) s and $((SECONDS - t1)) s)"
check "two builds give one digest" [ "$digest1" = "$digest2" ]
check "two builds give one archive (sha256 $sum1)" [ "$sum1" = "$sum2" ]
archive=$root/target/image/skewwatch.oci.tar

# --- 2. configuration and root file system ------------------------------------------------
echo "== image: configuration"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
version=$(python3 -c 'import tomllib
print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')
skopeo inspect --config "oci-archive:$archive" >"$work/config.json"
skopeo inspect --raw "oci-archive:$archive" >"$work/manifest.json"
check "the manifest digest is the one printed" \
  [ "sha256:$(sha256sum <"$work/manifest.json" | cut -d' ' -f1)" = "$digest1" ]
config_is() { # python expression over c (the image configuration's "config")
  python3 -c "import json, sys
c = json.load(open(sys.argv[1]))['config']
sys.exit(0 if ($1) else 1)" "$work/config.json"
}
check "runs as user 65532" config_is 'c["User"] == "65532:65532"'
check "the entrypoint is the binary" config_is 'c["Entrypoint"] == ["/usr/bin/skewwatch"]'
check "the command runs the default configuration" \
  config_is 'c["Cmd"] == ["run", "--config", "/etc/skewwatch/skewwatch.yaml"]'
check "HTTP and StatsD ports are exposed" \
  config_is 'set(c["ExposedPorts"]) == {"9477/tcp", "8125/udp"}'
check "the labels name this commit ($revision) and version $version" config_is "
  c['Labels']['org.opencontainers.image.revision'] == '$revision'
  and c['Labels']['org.opencontainers.image.version'] == '$version'
  and c['Labels']['org.opencontainers.image.licenses'] == 'Apache-2.0'
  and c['Labels']['org.opencontainers.image.source'].startswith('https://')"
check "the image is one layer" python3 -c 'import json, sys
sys.exit(len(json.load(open(sys.argv[1]))["layers"]) != 1)' "$work/manifest.json"

echo "== image: root file system"
skopeo copy --quiet "oci-archive:$archive" "oci:$work/layout:skewwatch"
umoci unpack --image "$work/layout:skewwatch" "$work/bundle" >/dev/null
rootfs=$work/bundle/rootfs
check "umoci's runtime spec runs the entrypoint as 65532" python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))["process"]
sys.exit(not (p["user"]["uid"] == 65532 and p["user"]["gid"] == 65532
              and p["args"][0] == "/usr/bin/skewwatch"))' "$work/bundle/config.json"
check "no shell" [ -z "$(find "$rootfs" \( -name sh -o -name bash -o -name dash -o -name busybox \) -print)" ]
check "no /bin" [ ! -e "$rootfs/bin" ]
check "every file is root's" [ -z "$(find "$rootfs" ! -user 0 -print)" ]
check "the SBOM is in the image and lists crates" python3 -c 'import json, sys
b = json.load(open(sys.argv[1]))
sys.exit(not (b["bomFormat"] == "CycloneDX" and len(b["components"]) > 50))' \
  "$rootfs/usr/share/doc/skewwatch/skewwatch.cdx.json"
# chroot runs the image's own loader, libraries and /etc from here on, as the image's user:
# root's capabilities go with the change of user.
check "--version names the commit" \
  bash -c "chroot --userspec=65532:65532 --groups=65532 '$rootfs' /usr/bin/skewwatch --version \
    | grep -qx 'skewwatch $version (commit $revision, built .*)'"
check "the default configuration is valid" \
  bash -c "chroot --userspec=65532:65532 --groups=65532 '$rootfs' \
    /usr/bin/skewwatch check-config /etc/skewwatch/skewwatch.yaml >/dev/null"

# --- 3. the entrypoint, as the image's user -----------------------------------------------
echo "== image: running the entrypoint"
# A real Alertmanager on loopback, known inside the image under a name the host does not
# resolve: the agent finds it through the image's nsswitch.conf and /etc/hosts, as a pod
# finds a service through the hosts file and resolver its runtime mounts.
am_host=alertmanager.skewwatch.test
am_bin=$(command -v prometheus-alertmanager || command -v alertmanager || true)
alerting="  alertmanagers: []"
if [ -n "$am_bin" ]; then
  am_port=$(free_port)
  printf 'route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n' >"$work/alertmanager.yml"
  "$am_bin" --config.file="$work/alertmanager.yml" --storage.path="$work/am-data" \
    --cluster.listen-address= --web.listen-address="127.0.0.1:$am_port" \
    >"$work/alertmanager.log" 2>&1 &
  am_pid=$!
  wait_until 30 curl -fsS "http://127.0.0.1:$am_port/-/ready" \
    || { cat "$work/alertmanager.log" >&2; fail "Alertmanager did not start"; }
  echo "127.0.0.1 $am_host" >>"$rootfs/etc/hosts"
  alerting="  alertmanagers:
    - url: \"http://$am_host:$am_port\"
      name: image-test
      timeout_secs: 5"
elif [ -n "${CI:-}" ]; then
  fail "Alertmanager not installed (apt-get install prometheus-alertmanager)"
else
  echo "  skipped: the alert check (no Alertmanager; apt-get install prometheus-alertmanager)"
fi
# One-second windows and ErrorSurge alone, tuned to fire one window into a surge of errors
# (as tests/tests/e2e/alertmanager.rs does); every listener on loopback, ports chosen by the
# kernel and written to a file the agent may write.
mkdir -p "$rootfs/run/skewwatch"
chown 65532:65532 "$rootfs/run/skewwatch"
cat >"$rootfs/etc/skewwatch/test.yaml" <<EOF
listen:
  http: "127.0.0.1:0"
  statsd: "127.0.0.1:0"
window:
  window_secs: 1
detectors:
  error_surge:
    min_requests: 20
    min_error_ratio: 0.05
    consecutive_windows: 1
    warmup_windows: 2
    alert: {severity: critical, for_secs: 0, keep_firing_for_secs: 0}
  hot_shard: {alert: {enabled: false}}
  hot_key: {alert: {enabled: false}}
  latency_skew: {alert: {enabled: false}}
  cache_hit_collapse: {alert: {enabled: false}}
  fast_failure_sink: {alert: {enabled: false}}
  shard_failing: {alert: {enabled: false}}
  capacity_headroom: {alert: {enabled: false}}
alerting:
$alerting
EOF
# The image's entrypoint with the arguments a pod would give it.
mapfile -t entrypoint < <(python3 -c 'import json, sys
print("\n".join(json.load(open(sys.argv[1]))["config"]["Entrypoint"]))' "$work/config.json")
chroot --userspec=65532:65532 --groups=65532 "$rootfs" "${entrypoint[@]}" run --config /etc/skewwatch/test.yaml \
  --listen-addresses-file /run/skewwatch/addresses.json >"$work/agent.log" 2>&1 &
agent_pid=$!
addresses=$rootfs/run/skewwatch/addresses.json
if ! wait_until 30 test -s "$addresses"; then
  cat "$work/agent.log" >&2
  fail "the agent did not bind its listeners within 30 s"
  finish
fi
read -r http statsd < <(python3 -c 'import json, sys
a = json.load(open(sys.argv[1])); print(a["http"], a["statsd"])' "$addresses")
# chroot executes the entrypoint in its own process: the image's user, no capabilities.
agent_proc=$agent_pid
check "the agent runs as uid 65532 with no capabilities" bash -c "
  grep -qE '^Uid:\s+65532\s+65532\s+65532\s+65532' /proc/$agent_proc/status &&
  grep -qE '^CapEff:\s+0+$' /proc/$agent_proc/status &&
  grep -qE '^CapPrm:\s+0+$' /proc/$agent_proc/status"
check "/readyz answers 200" wait_until 30 curl -fsS "http://$http/readyz"
check "/metrics serves the agent's series" \
  bash -c "curl -fsS 'http://$http/metrics' | grep -q '^skewwatch_windows_closed_total '"
python3 - "$statsd" <<'EOF'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
    b"skewwatch.request:12|ms|#group:image-test,shard:s1,outcome:ok\n", (host, int(port)))
EOF
check "one StatsD line is counted" wait_until 15 \
  at_least "http://$http/metrics" 'skewwatch_ingest_records_total{source="statsd"}' 1
# Without CAP_NET_ADMIN the 32 MiB the default asks for is capped at net.core.rmem_max.
if [ "$(cat /proc/sys/net/core/rmem_max)" -lt 33554432 ]; then
  check "without CAP_NET_ADMIN the receive buffer is capped at rmem_max, and the agent says so" \
    grep -q "StatsD receive buffer is smaller than configured.*granted_bytes=$(cat /proc/sys/net/core/rmem_max)" \
    "$work/agent.log"
fi

if [ -n "$am_bin" ]; then
  # Four healthy seconds (ErrorSurge's baseline), then a surge of errors until stopped.
  python3 - "$statsd" "$work/surge" <<'EOF' &
import os, socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.monotonic()
while time.monotonic() - start < 60:
    surge = time.monotonic() - start > 4
    lines = []
    for shard in ("s1", "s2", "s3", "s4"):
        lines.append(f"skewwatch.request:20|c|#group:checkout-db,shard:{shard},outcome:ok")
        if surge:
            lines.append(f"skewwatch.request:20|c|#group:checkout-db,shard:{shard},outcome:error")
    sock.sendto(("\n".join(lines) + "\n").encode(), (host, int(port)))
    time.sleep(0.05)
EOF
  sender_pid=$!
  check "an alert reaches Alertmanager at $am_host (resolved inside the image)" wait_until 40 \
    at_least "http://$http/metrics" \
    'skewwatch_alert_deliveries_total{receiver="image-test",result="success"}' 1
  check "Alertmanager holds the ErrorSurge alert" bash -c "
    curl -fsS 'http://127.0.0.1:$am_port/api/v2/alerts' | grep -q '\"alertname\":\"ErrorSurge\"'"
  kill "$sender_pid" 2>/dev/null || true
  wait "$sender_pid" 2>/dev/null || true
  sender_pid=
fi

kill -TERM "$agent_pid"
# It was scraped, so it waits for one more scrape (shutdown.final_scrape_grace_secs): play
# Prometheus until it exits.
for _ in $(seq 300); do
  kill -0 "$agent_pid" 2>/dev/null || break
  curl -fsS -o /dev/null "http://$http/metrics" 2>/dev/null || true
  sleep 0.1
done
code=0
wait "$agent_pid" || code=$?
agent_pid=
check "SIGTERM ends the agent with exit code 0 (got $code)" [ "$code" -eq 0 ]
[ "$code" -eq 0 ] || tail -20 "$work/agent.log" >&2

# --- 4. podman run, where it works --------------------------------------------------------
echo "== image: podman run"
image_ref=$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' \
  "$root/target/image/layout/index.json")
podman load --quiet --input "$archive" >/dev/null
if timeout 60 podman run --rm --network=none "$image_ref" --version >"$work/podman.log" 2>&1; then
  port=$(free_port)
  cid=$(podman run --detach --network=host --read-only --cap-drop=ALL "$image_ref" \
    run --http-listen "127.0.0.1:$port" --statsd-listen 127.0.0.1:0)
  check "podman: /readyz answers 200" wait_until 30 curl -fsS "http://127.0.0.1:$port/readyz"
  podman stop --time 20 "$cid" >/dev/null
  check "podman: stopping exits 0" [ "$(podman inspect --format '{{.State.ExitCode}}' "$cid")" = 0 ]
  podman rm --force "$cid" >/dev/null
else
  echo "  skipped: podman run does not work here: $(tail -1 "$work/podman.log")"
fi
podman rmi --force "$image_ref" >/dev/null 2>&1 || true

finish
