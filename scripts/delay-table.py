#!/usr/bin/env python3
"""Prints the onset-to-firing delay of every alert a seeded scenario raises, per seed, as a
markdown table: the before/after record for changes to detection timing (docs/adr/003). A
second table gives, per scenario and seed, the delay of its first alert (when someone is first
told), with the alert that raised it.

    cargo run -q --release -p skewwatch-e2e --example scenario_traces -- target/scenario-traces
    python3 scripts/delay-table.py [BINARY] [TRACES_DIR]

Onsets are the scenario generators' constants (every onset lies on a 10 s window boundary).
"""
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

INCIDENT_ONSET = 1_760_000_000 + 720  # tests/src/scenarios/incidents.rs
STEP_ONSET = 1_760_100_000 + 600  # tests/src/scenarios/{hot,failing,deadline}.rs: START + WARM_SECS
ONSETS = {
    "gemini_cache_collapse": INCIDENT_ONSET,
    "fast_failure_sink": INCIDENT_ONSET,
    "sudden_hot_shard": STEP_ONSET,
    "hot_key_in_normal_shard": STEP_ONSET,
    "slow_shard": STEP_ONSET,
    "slow_burn": STEP_ONSET,
    "dead_shard": STEP_ONSET,
    "deadline_pile_up": STEP_ONSET,
    "replica_pile_up": STEP_ONSET,
}

binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/skewwatch"
traces = Path(sys.argv[2] if len(sys.argv) > 2 else "target/scenario-traces")
rows = defaultdict(dict)  # (family, alert, shard) -> seed -> delay
seeds = set()
for path in sorted(traces.glob("*.ndjson")):
    family, seed = path.stem.rsplit("-", 1)
    if family not in ONSETS:
        continue
    seeds.add(int(seed))
    out = subprocess.run([binary, "replay", str(path)], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        t = json.loads(line)
        if t["state"] != "firing":
            continue
        key = (family, t["alertname"], t["labels"].get("shard", ""))
        rows[key].setdefault(int(seed), t["ts"] - ONSETS[family])

seeds = sorted(seeds)
print("| scenario | alert | shard | " + " | ".join(f"seed {s}" for s in seeds) + " | median |")
print("|---|---|---|" + "---|" * (len(seeds) + 1))
for (family, alert, shard), by_seed in sorted(rows.items()):
    cells = [f"{by_seed[s]:.0f}" if s in by_seed else "—" for s in seeds]
    med = statistics.median(by_seed.values())
    print(f"| {family} | {alert} | {shard} | " + " | ".join(cells) + f" | {med:.0f} |")
print()
every = [d for by_seed in rows.values() for d in by_seed.values()]
print(f"median over every row and seed: {statistics.median(every):.0f} s ({len(every)} firings)")
print()
first = {}  # (family, seed) -> (delay, alert)
for (family, alert, _), by_seed in rows.items():
    for seed, delay in by_seed.items():
        if (family, seed) not in first or (delay, alert) < first[(family, seed)]:
            first[(family, seed)] = (delay, alert)
families = sorted({family for family, _ in first})
print("| scenario | " + " | ".join(f"seed {s}" for s in seeds) + " | median |")
print("|---|" + "---|" * (len(seeds) + 1))
for family in families:
    got = [first[(family, s)] for s in seeds if (family, s) in first]
    cells = [f"{first[(family, s)][0]:.0f} ({first[(family, s)][1]})" if (family, s) in first else "—" for s in seeds]
    med = statistics.median(d for d, _ in got)
    print(f"| {family} | " + " | ".join(cells) + f" | {med:.0f} |")
print()
firsts = [d for d, _ in first.values()]
print(f"median time to the first alert over every scenario and seed: {statistics.median(firsts):.0f} s ({len(firsts)} runs)")
