#!/bin/sh
# The detection benchmark (docs/detectors.md, "Detection benchmark"): sweeps seeded scenario
# families over rates, shard counts, window lengths and magnitudes in-process and prints, per
# detector, P(detect within 1, 2 and 5 min), the median delay, and false alarms per 1,000
# shard-hours on benign families, as markdown.
#
#   scripts/detection-bench.sh                  # the published sweep (minutes on 2 cores)
#   scripts/detection-bench.sh --quick          # a smaller sweep
#   scripts/detection-bench.sh --seed 7 --trials 40 --family hot_shard --family diurnal
#   scripts/detection-bench.sh --diy --family failing_shard   # beside hand-written PromQL rules
#   scripts/detection-bench.sh --print-diy-rules               # their rule file
#
# --diy evaluates the rules of tests/src/bench/diy.rules.yml with a real Prometheus over each
# trial's backfilled counters (needs promtool and prometheus on PATH; see docs/detectors.md).
#
# Deterministic for a given seed and set of options.
set -eu
cd "$(dirname "$0")/.."
exec cargo run -q --release -p skewwatch-e2e --example detection_bench -- "$@"
