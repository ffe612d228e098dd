#!/usr/bin/env bash
# Replays every seeded scenario trace through a skewwatch binary and writes one output file per
# trace and configuration, so two builds can be compared byte for byte:
#
#   scripts/replay-golden.sh OUT_DIR [BINARY]      # BINARY defaults to target/release/skewwatch
#   diff -r before/ after/                          # no output: identical transitions
#
# Traces come from `cargo run -p skewwatch-e2e --example scenario_traces` (every scenario family
# at four seeds). Each trace is replayed on the embedded defaults; the slow burn is also replayed
# with capacities configured, so CapacityHeadroom is covered. With RECORD_THREADS=N in the
# environment every replay records on N threads (`window.record_threads`).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/replay-golden.sh OUT_DIR [BINARY]}
bin=${2:-target/release/skewwatch}
traces=${TRACES_DIR:-target/scenario-traces}
if [ ! -d "$traces" ] || [ -z "$(ls -A "$traces" 2>/dev/null)" ]; then
  cargo run -q --release -p skewwatch-e2e --example scenario_traces -- "$traces" >/dev/null
fi
mkdir -p "$out"
capacity=$(mktemp)
base=$(mktemp)
trap 'rm -f "$capacity" "$base"' EXIT
printf 'window:\n  record_threads: %s\n' "${RECORD_THREADS:-1}" >"$base"
cp "$base" "$capacity"
cat >>"$capacity" <<'YAML'
detectors:
  capacity_headroom:
    capacities:
      - {group: ledger-db, shard: "*", max_requests_per_second: 100}
YAML
for t in "$traces"/*.ndjson; do
  name=$(basename "$t" .ndjson)
  "$bin" replay --config "$base" "$t" >"$out/$name.out" 2>/dev/null
  case $name in
    slow_burn-*) "$bin" replay --config "$capacity" "$t" >"$out/$name.capacity.out" 2>/dev/null ;;
  esac
done
echo "$(ls "$out" | wc -l) outputs in $out"
