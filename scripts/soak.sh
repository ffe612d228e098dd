#!/usr/bin/env bash
# The soak of docs/reliability.md: the real agent for SECONDS (default 600) under 200 k
# observations/s (5% hostile), 1,000 reconnecting HTTP clients, an error surge that comes and
# goes, a webhook receiver that flaps every 30 s and a SIGHUP reload every minute.
#
#   scripts/soak.sh [SECONDS]
#
# Prints the report (JSON) and a one-line verdict; exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p skewwatch
cargo run -q --release -p skewwatch-e2e --example soak -- "${1:-600}"
