#!/usr/bin/env bash
# The soak of docs/reliability.md: the real agent for SECONDS (default 600) under 200 k
# observations/s (5% hostile), 1,000 reconnecting HTTP clients, an error surge that comes and
# goes, a webhook receiver that flaps every 30 s and a SIGHUP reload every minute.
#
#   scripts/soak.sh [SECONDS] [LINES_PER_SEC] [HTTP_CLIENTS]
#
# Valid and hostile StatsD lines go in separate datagrams, so every line is accounted for:
# a record, a rejection, a queue-full drop, or part of a whole datagram the kernel counted as
# dropped. Prints the report (JSON) and a one-line verdict; exits non-zero on any unaccounted
# line or other failure.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p skewwatch
cargo run -q --release -p skewwatch-e2e --example soak -- "${1:-600}" ${2:+"$2"} ${3:+"$3"}
