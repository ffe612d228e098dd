#!/usr/bin/env bash
# Instructions per item of each hot path, counted by callgrind: the before/after measure for
# optimizations on a shared or noisy machine, where wall-clock medians are not stable.
#
#   scripts/instructions.sh [PATH...]      # default: every path of agent/benches/instructions.rs
#
# Needs valgrind (apt-get install -y valgrind). Builds the release benchmark binary in
# ${CARGO_TARGET_DIR:-target}. Prints one line per path: instructions per item and the item.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install -y valgrind" >&2; exit 1; }
target=${CARGO_TARGET_DIR:-target}
# The path of the benchmark binary is the last "executable" cargo reports.
bin=$(cargo bench -p skewwatch --bench instructions --no-run --message-format=json 2>/dev/null \
  | grep '"name":"instructions"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "could not build the instructions benchmark (target: $target)" >&2; exit 1; }

paths=("$@")
if [ ${#paths[@]} -eq 0 ]; then
  paths=(statsd_datagram statsd_mixed_datagram statsd_datagram_mapped statsd_mixed_datagram_mapped
         statsd_mapped_lines ndjson_body record_no_key record_with_key record_with_hot_keys
         record_no_key_1000_shards replay render_1000_shards)
fi
declare -A unit=([statsd_datagram]=line [statsd_mixed_datagram]=line [statsd_datagram_mapped]=line
  [statsd_mixed_datagram_mapped]=line [statsd_mapped_lines]=line [ndjson_body]=record
  [record_no_key]=observation [record_with_key]=observation [record_with_hot_keys]=observation [record_no_key_1000_shards]=observation
  [replay]=record [render_1000_shards]=shard)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-28s %12s  %s\n' path instructions per
for p in "${paths[@]}"; do
  items=$(timeout 600 valgrind --tool=callgrind --callgrind-out-file="$out/$p.cg" \
    --toggle-collect='*measured*' "$bin" "$p" 2>"$out/$p.log" | sed -n 's/^items //p')
  ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/$p.cg")
  if [ -z "$items" ] || [ -z "$ir" ]; then echo "$p: no result (see valgrind log below)" >&2; cat "$out/$p.log" >&2; exit 1; fi
  awk -v p="$p" -v ir="$ir" -v n="$items" -v u="${unit[$p]:-item}" \
    'BEGIN { printf "%-28s %12.1f  %s\n", p, ir / n, u }'
done
