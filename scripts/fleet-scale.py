#!/usr/bin/env python3
"""The engine at fleet scale (docs/fleet.md): a real Prometheus scraping the pages of many
sidecars, with the shipped rules loaded and a fleet instance reading it, in each exposition
profile.

    scripts/fleet-scale.py [--targets 1000] [--interval 15] [--shards 64]
                           [--profiles full,fleet] [--warmup-secs 360] [--phase-secs 150]
                           [--lookback-secs S] [--out DIR]

For each profile:

1. Capture. A fresh release agent on that profile is fed one 10-second window of one group of
   `--shards` shards over StatsD (the traffic of `scripts/series-budget.py`, seeded) and its
   `/metrics` page is saved: real skewwatch exposition.
2. Serve. One asyncio process serves `--targets` copies of the page at `/t/<i>`, each its own
   sidecar: every counter and bucket grows by its captured value times the target's own
   traffic factor (0.5 to 1.5) once per 10-second sidecar window (each target at its own
   phase), gauges vary per window, timestamps are the window's end. Prometheus tells the
   targets apart by their `instance` label (`sidecar-0007`), set in its file of targets.
3. Ingest. A real Prometheus (`prometheus` on PATH) scrapes every target at `--interval`, job
   `skewwatch`, and evaluates `rules/prometheus/skewwatch.rules.yml` at the same interval. After
   `--warmup-secs` (the rules' five-minute rates full, the head's series stable), phase A
   (`--phase-secs`) reads Prometheus' own figures: head series, resident memory, Go heap in
   use, samples appended per second, CPU, every target's scrape durations, the rule groups'
   last evaluation times, missed iterations.
4. Fleet. A fleet instance (`skewwatch run` with `fleet:`, 30 s windows, the default
   backfill of an hour, `fleet.query_lead_secs` and `fleet.timeout_secs` raised to 10 s so a
   slow answer is timed rather than cut at 5 s; `--lookback-secs` sets `fleet.lookback_secs`)
   starts against it; once ready, phase B (`--phase-secs`) reads its
   query durations, windows fed or skipped and answers, and Prometheus' CPU again: the
   difference from phase A, times the window, is what the fleet's six queries cost
   Prometheus per window. Last, with the fleet instance stopped, every rule expression and the
   fleet's last six queries (from Prometheus' query log) are evaluated once more with
   `stats=all`: the samples each reads, a count that does not depend on the machine, so it
   scales to other fleets where seconds on a busy machine do not.

Prints one JSON object of figures per profile as it goes and writes them all to
`DIR/figures.json` and the table to `DIR/table.md` (`--render DIR/figures.json` renders a
saved run again; several files give one table). The page server's and Prometheus' CPU compete with each other and with
whatever else runs: the load average is recorded beside every phase. A quick check:
`scripts/fleet-scale.py --targets 20 --warmup-secs 60 --phase-secs 70`.
Needs a release build (SKEWWATCH_BIN, default target/release/skewwatch); uses free loopback
ports and a temporary directory it removes.
"""
import argparse
import asyncio
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "rules", "prometheus", "skewwatch.rules.yml")
SIDECAR_WINDOW_SECS = 10
FLEET_WINDOW_SECS = 30
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def load_budget():
    """scripts/series-budget.py, whose traffic and capture this reuses."""
    spec = importlib.util.spec_from_file_location(
        "series_budget", os.path.join(ROOT, "scripts", "series-budget.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what, secs=60):
    deadline = time.time() + secs
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{what} did not listen on {port} within {secs} s")


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def get(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def samples(text):
    """A Prometheus text page as [(name, labels text, value)]; comments skipped."""
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out.append((m.group(1), m.group(2) or "", float(m.group(3))))
    return out


def value(page, name, labels=""):
    """The sum of `name`'s samples on a page whose labels contain every `k="v"` of `labels`."""
    want = [p for p in labels.split(",") if p]
    return sum(v for n, l, v in page if n == name and all(w in l for w in want))


def cpu_seconds():
    t = os.times()
    return t.user + t.system


def load_average():
    return " ".join(open("/proc/loadavg").read().split()[:3])


# --- 1. Capture -----------------------------------------------------------------------------

def capture(binary, profile, shards, work):
    """The /metrics page of a real agent on `profile` after one window of `shards` shards."""
    budget = load_budget()
    config = os.path.join(work, f"capture-{profile}.yaml")
    with open(config, "w") as f:
        f.write(f"exposition:\n  profile: {profile}\n")
    http, statsd = free_port(), free_port()
    log = open(os.path.join(work, f"capture-{profile}.log"), "w")
    agent = subprocess.Popen(
        [binary, "run", "--config", config, "--http-listen", f"127.0.0.1:{http}",
         "--statsd-listen", f"127.0.0.1:{statsd}"], stdout=log, stderr=log)
    try:
        wait_listening(http, agent, "the capture agent")
        page = os.path.join(work, f"page-{profile}.txt")
        budget.measure(f"127.0.0.1:{statsd}", f"127.0.0.1:{http}", shards, page)
        return open(page).read()
    finally:
        stop(agent)


# --- 2. Serve -------------------------------------------------------------------------------

class Template:
    """A captured page, ready to be rendered as any target at any time.

    Counters (and buckets, `_sum`, `_count`) grow by their captured value once per sidecar
    window, scaled by the target's traffic factor: a bucket series stays at or above the
    buckets below it, since every bucket of a target is scaled alike and rounded down.
    """

    def __init__(self, text):
        self.counters, self.gauges, self.stamps, self.fixed = [], [], [], []
        for name, labels, v in samples(text):
            prefix = f"{name}{labels} "
            if name.endswith(COUNTER_SUFFIXES):
                self.counters.append((prefix, v, name.endswith("_sum")))
            elif name.endswith("_timestamp_seconds") and "start" not in name:
                self.stamps.append(prefix)
            elif name.endswith("_info") or v == 0:
                self.fixed.append(f"{prefix}{v:g}")
            else:
                self.gauges.append((prefix, v))
        self.series = len(self.counters) + len(self.gauges) + len(self.stamps) + len(self.fixed)
        self.fixed_text = "\n".join(self.fixed)

    def render(self, target, now, t0):
        factor = 0.5 + (target * 0.6180339887) % 1.0
        phase = (target * 7.31) % SIDECAR_WINDOW_SECS
        windows = int((now - t0 + phase) // SIDECAR_WINDOW_SECS) + 1
        window_end = t0 - phase + windows * SIDECAR_WINDOW_SECS - SIDECAR_WINDOW_SECS
        grow = factor * windows
        lines = [
            f"{p}{v * grow:.6f}" if is_sum else f"{p}{int(v * grow)}"
            for p, v, is_sum in self.counters
        ]
        wobble = 0.9 + 0.2 * (((target + windows) * 0.7548776662) % 1.0)
        lines.extend(f"{p}{v * wobble:.6g}" for p, v in self.gauges)
        lines.extend(f"{p}{window_end:.3f}" for p in self.stamps)
        lines.append(self.fixed_text)
        lines.append("")
        return "\n".join(lines).encode()


def serve(template, port, stats):
    """Serves `template` as every target at /t/<i> on `port`, HTTP/1.1 keep-alive, until
    the process ends; counts the pages served in `stats`."""
    t0 = time.time()

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                try:
                    body = template.render(int(path.rsplit("/", 1)[1]), time.time(), t0)
                    status = b"200 OK"
                except (ValueError, IndexError):
                    body, status = b"no such target\n", b"404 Not Found"
                stats["pages"] += 1
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; version=0.0.4"
                             b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True, name="pages").start()


# --- 3. Ingest ------------------------------------------------------------------------------

def start_prometheus(work, targets, interval, pages_port):
    port = free_port()
    sd = [{"targets": [f"127.0.0.1:{pages_port}"],
           "labels": {"__metrics_path__": f"/t/{i}", "instance": f"sidecar-{i:04d}"}}
          for i in range(targets)]
    with open(os.path.join(work, "targets.json"), "w") as f:
        json.dump(sd, f)
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write(f"""global:
  scrape_interval: {interval}s
  scrape_timeout: {min(interval, 10)}s
  evaluation_interval: {interval}s
  query_log_file: {json.dumps(os.path.join(work, "queries.log"))}
rule_files: [{json.dumps(RULES)}]
scrape_configs:
  - job_name: skewwatch
    file_sd_configs: [{{files: [{json.dumps(os.path.join(work, "targets.json"))}]}}]
""")
    data = os.path.join(work, "tsdb")
    shutil.rmtree(data, ignore_errors=True)
    log = open(os.path.join(work, "prometheus.log"), "w")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", "--query.timeout=10m"],
        stdout=log, stderr=log)
    wait_listening(port, proc, "prometheus")
    return proc, port


def query(port, expr, at=None, stats=False):
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    if stats:
        params["stats"] = "all"
    body = urllib.parse.urlencode(params).encode()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query", data=body,
                                timeout=900) as r:
        data = json.load(r)["data"]
    return data if stats else data["result"]


def work_of(port, exprs, at=None):
    """What evaluating `exprs` one after the other costs, by the engine's own count: samples
    read (`totalQueryableSamples`, which does not depend on the machine) and seconds."""
    read, secs = 0, 0.0
    for expr in exprs:
        stats = query(port, expr, at, stats=True)["stats"]
        read += stats["samples"]["totalQueryableSamples"]
        secs += stats["timings"]["evalTotalTime"]
    return {"samples": read, "seconds": secs}


def rule_exprs():
    """The shipped rules' expressions by group, read without a YAML library: every `expr:`
    is a one-line string or a `|` block."""
    groups, group, lines = {}, None, open(RULES).read().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*- name: (\S+)", line)
        if m:
            group = m.group(1)
        m = re.match(r"(\s*)expr: (.*)", line)
        if m:
            indent, text = len(m.group(1)), m.group(2)
            if text.strip() == "|":
                block = []
                while i + 1 < len(lines) and (not lines[i + 1].strip()
                                              or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                    i += 1
                    block.append(lines[i].strip())
                text = "\n".join(block)
            groups.setdefault(group, []).append(text.strip())
        i += 1
    return groups


def fleet_exprs(work):
    """The last window's expressions the fleet instance sent, from Prometheus' query log."""
    seen = {}
    for line in open(os.path.join(work, "queries.log")):
        entry = json.loads(line)
        params = entry.get("params", {})
        if params.get("step") == 0 and "part" in params.get("query", ""):
            seen[params["query"].split("{", 1)[0] + params["query"][-80:]] = params
    return list(seen.values())[-6:]


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def prometheus_phase(port, secs):
    """Prometheus' own figures over `secs`: rates between two reads of its /metrics."""
    url = f"http://127.0.0.1:{port}/metrics"
    before, t_before, load_before = samples(get(url)), time.time(), load_average()
    time.sleep(secs)
    after, t_after = samples(get(url)), time.time()
    elapsed = t_after - t_before

    def rate(name, labels=""):
        return (value(after, name, labels) - value(before, name, labels)) / elapsed

    durations = [float(v) for s in query(port, f'scrape_duration_seconds{{job="skewwatch"}}[{int(secs)}s]')
                 for _, v in s["values"]]
    groups = {}
    for n, labels, v in after:
        if n == "prometheus_rule_group_last_duration_seconds":
            groups[re.search(r'rule_group="[^"]*;([^"]*)"', labels).group(1)] = v
    evals = {q: value(after, "prometheus_rule_evaluation_duration_seconds", f'quantile="{q}"')
             for q in ("0.5", "0.9", "0.99")}
    return {
        "load_average": f"{load_before} -> {load_average()}",
        "head_series": value(after, "prometheus_tsdb_head_series"),
        "targets_up": sum(float(s["value"][1]) for s in query(port, 'up{job="skewwatch"}')),
        "samples_per_second": rate("prometheus_tsdb_head_samples_appended_total"),
        "resident_bytes": value(after, "process_resident_memory_bytes"),
        "heap_inuse_bytes": value(after, "go_memstats_heap_inuse_bytes"),
        "cpu_cores": rate("process_cpu_seconds_total"),
        "scrape_seconds_p50": quantile(durations, 0.5),
        "scrape_seconds_p99": quantile(durations, 0.99),
        "scrape_interval_p99": value(after, "prometheus_target_interval_length_seconds",
                                     'quantile="0.99"'),
        "rule_groups_seconds": groups,
        "rule_eval_seconds_quantiles": evals,
        "rule_iterations_missed": value(after, "prometheus_rule_group_iterations_missed_total"),
    }


# --- 4. Fleet -------------------------------------------------------------------------------

def start_fleet(binary, work, prom_port, lookback_secs):
    http, statsd = free_port(), free_port()
    config = os.path.join(work, "fleet.yaml")
    with open(config, "w") as f:
        f.write(f"""window:
  window_secs: {FLEET_WINDOW_SECS}
fleet:
  url: http://127.0.0.1:{prom_port}
  selector: 'job="skewwatch"'
  query_lead_secs: 10
  timeout_secs: 10
""")
        if lookback_secs:
            f.write(f"  lookback_secs: {lookback_secs}\n")
    log = open(os.path.join(work, "fleet.log"), "w")
    started = time.time()
    proc = subprocess.Popen(
        [binary, "run", "--config", config, "--http-listen", f"127.0.0.1:{http}",
         "--statsd-listen", f"127.0.0.1:{statsd}"], stdout=log, stderr=log)
    wait_listening(http, proc, "the fleet instance", secs=180)
    ready = ""
    while time.time() - started < 300:
        try:
            ready = get(f"http://127.0.0.1:{http}/readyz")
            if "baselines" in ready or "warm" in ready:
                break
        except OSError as e:
            ready = str(e)
        time.sleep(1)
    return proc, http, time.time() - started, ready.strip()


def proc_cpu_seconds(pid):
    """User and system CPU of a process so far, from /proc (skewwatch exports no process
    metrics)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fleet_phase(prom_port, fleet_port, fleet_pid, secs):
    url = f"http://127.0.0.1:{fleet_port}/metrics"
    fleet_before, cpu_before = samples(get(url)), proc_cpu_seconds(fleet_pid)
    prom = prometheus_phase(prom_port, secs)
    fleet_after, cpu_after = samples(get(url)), proc_cpu_seconds(fleet_pid)

    def grew(name, labels=""):
        return value(fleet_after, name, labels) - value(fleet_before, name, labels)

    queries = grew("skewwatch_fleet_query_duration_seconds_count")
    buckets = {}
    for n, labels, v in fleet_after:
        if n == "skewwatch_fleet_query_duration_seconds_bucket":
            le = re.search(r'le="([^"]*)"', labels).group(1)
            buckets[le] = v - value(fleet_before, n, f'le="{le}"')
    failures = {re.search(r'reason="([^"]*)"', l).group(1): v - value(fleet_before, n, l[1:-1])
                for n, l, v in fleet_after if n == "skewwatch_fleet_query_failures_total"}
    return {
        "prometheus": prom,
        "queries": queries,
        "query_seconds_mean": grew("skewwatch_fleet_query_duration_seconds_sum") / queries
        if queries else float("nan"),
        "query_seconds_buckets": buckets,
        "windows_fed": grew("skewwatch_fleet_windows_total", 'result="fed"'),
        "windows_skipped": grew("skewwatch_fleet_windows_total", 'result="skipped"'),
        "failures": {k: v for k, v in failures.items() if v},
        "answer_series": value(fleet_after, "skewwatch_fleet_answer_series"),
        "answer_bytes": value(fleet_after, "skewwatch_fleet_answer_bytes"),
        "fleet_instance_cpu_seconds_per_window": (cpu_after - cpu_before) / secs * FLEET_WINDOW_SECS,
    }


# --- The run, and its table -----------------------------------------------------------------

def run_profile(args, binary, profile, work):
    print(f"# {profile}: capturing a {args.shards}-shard page", file=sys.stderr, flush=True)
    template = Template(capture(binary, profile, args.shards, work))
    stats = {"pages": 0}
    pages_port = free_port()
    serve(template, pages_port, stats)
    prom, prom_port = start_prometheus(work, args.targets, args.interval, pages_port)
    fleet = None
    try:
        print(f"# {profile}: {args.targets} targets of {template.series} series; warming up "
              f"{args.warmup_secs} s", file=sys.stderr, flush=True)
        time.sleep(args.warmup_secs)
        pages_before, cpu_before, t = stats["pages"], cpu_seconds(), time.time()
        ingest = prometheus_phase(prom_port, args.phase_secs)
        # The page server is a thread of this process, which otherwise sleeps.
        ingest["page_server_cores"] = (cpu_seconds() - cpu_before) / (time.time() - t)
        ingest["pages_per_second"] = (stats["pages"] - pages_before) / (time.time() - t)
        print(f"# {profile}: ingest {json.dumps(ingest)}", file=sys.stderr, flush=True)
        fleet, fleet_port, ready_secs, ready = start_fleet(binary, work, prom_port, args.lookback_secs)
        print(f"# {profile}: fleet instance ready in {ready_secs:.0f} s: {ready}",
              file=sys.stderr, flush=True)
        with_fleet = fleet_phase(prom_port, fleet_port, fleet.pid, args.phase_secs)
        stop(fleet)
        print(f"# {profile}: counting the samples the rules and the fleet's queries read",
              file=sys.stderr, flush=True)
        rules = {g: work_of(prom_port, exprs) for g, exprs in rule_exprs().items()}
        asked = fleet_exprs(work)
        fleet_work = work_of(prom_port, [p["query"] for p in asked])
        return {
            "profile": profile,
            "targets": args.targets,
            "shards": args.shards,
            "interval_secs": args.interval,
            "series_per_page": template.series,
            "page_bytes": len(template.render(0, time.time(), time.time())),
            "ingest": ingest,
            "fleet_lookback_secs": args.lookback_secs or "default",
            "fleet_ready_secs": ready_secs,
            "fleet_readyz": ready,
            "fleet": with_fleet,
            "rules_work": rules,
            "fleet_queries_work": dict(fleet_work, queries=len(asked)),
            "fleet_prometheus_cpu_seconds_per_window": (
                with_fleet["prometheus"]["cpu_cores"] - ingest["cpu_cores"]) * FLEET_WINDOW_SECS,
        }
    finally:
        stop(fleet)
        stop(prom)
        shutil.rmtree(os.path.join(work, "tsdb"), ignore_errors=True)


def render(figures):
    """The table of docs/fleet.md, one column per run; * marks what this machine bounds."""
    def gb(b):
        return f"{b / 1e9:.2f} GB"

    def per_series(f, key):
        return f"{gb(f['ingest'][key])} / {f['ingest'][key] / f['ingest']['head_series'] / 1e3:.1f} kB"

    def counted(f, key, total):
        return f"{total(f[key]) / 1e6:.1f} M" if key in f else "not counted"

    def loads(f):
        a, b = f["ingest"]["load_average"].split(), f["fleet"]["prometheus"]["load_average"].split()
        return f"{a[0]}–{a[4]}, {b[0]}–{b[4]}"

    def groups(f):
        return f["ingest"]["rule_groups_seconds"]

    rows = [
        ("series per page / page bytes", lambda f: f"{f['series_per_page']:,} / {f['page_bytes'] / 1e3:,.0f} kB"),
        ("head series", lambda f: f"{f['ingest']['head_series'] / 1e6:.3f} M"),
        ("samples appended per second", lambda f: f"{f['ingest']['samples_per_second']:,.0f}"),
        ("resident memory / per head series", lambda f: per_series(f, "resident_bytes")),
        ("Go heap in use / per head series", lambda f: per_series(f, "heap_inuse_bytes")),
        ("scrape duration p50 / p99", lambda f: f"{f['ingest']['scrape_seconds_p50'] * 1e3:,.0f} ms / {f['ingest']['scrape_seconds_p99']:.2f} s"),
        ("targets up", lambda f: f"{f['ingest']['targets_up']:,.0f}"),
        ("rules: samples read per evaluation (recording + alerts + health)",
         lambda f: counted(f, "rules_work", lambda w: sum(g["samples"] for g in w.values()))),
        ("recording group's last evaluation (15 s interval) *", lambda f: f"{groups(f)['skewwatch-fleet-recording']:.1f} s"),
        ("alert groups' last evaluation (fleet, health) *",
         lambda f: f"{groups(f)['skewwatch-fleet-alerts']:.1f} s, {groups(f)['skewwatch-health']:.2f} s"),
        ("rule iterations missed since start *", lambda f: f"{f['ingest']['rule_iterations_missed']:.0f}"),
        ("fleet queries: samples read per window", lambda f: counted(f, "fleet_queries_work", lambda w: w["samples"])),
        ("fleet queries: mean duration, share within 10 s *",
         lambda f: f"{f['fleet']['query_seconds_mean']:.1f} s, {f['fleet']['query_seconds_buckets'].get('10', 0):.0f} of {f['fleet']['queries']:.0f}"),
        ("fleet windows fed / skipped (queries timed out) *", lambda f: f"{f['fleet']['windows_fed']:.0f} / {f['fleet']['windows_skipped']:.0f}"),
        ("hour's backfill at start-up *",
         lambda f: "failed (60 s limit)" if "failed" in f["fleet_readyz"] else f"{f['fleet_ready_secs']:.0f} s"),
        ("fleet instance's CPU per window", lambda f: f"{f['fleet']['fleet_instance_cpu_seconds_per_window']:.2f} s"),
        ("Prometheus CPU (cores it got) *", lambda f: f"{f['ingest']['cpu_cores']:.2f}"),
        ("page server: pages/s, cores", lambda f: f"{f['ingest']['pages_per_second']:.0f}, {f['ingest']['page_server_cores']:.2f}"),
        ("load average (1 min) in the two phases", loads),
    ]
    out = ["| | " + " | ".join(f"{f['profile']}, {f['targets']:,}" for f in figures) + " |",
           "|---" * (len(figures) + 1) + "|"]
    for label, cell in rows:
        out.append(f"| {label} | " + " | ".join(cell(f) for f in figures) + " |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", type=int, default=1000)
    p.add_argument("--interval", type=int, default=15)
    p.add_argument("--shards", type=int, default=64)
    p.add_argument("--profiles", default="full,fleet")
    p.add_argument("--warmup-secs", type=int, default=360)
    p.add_argument("--phase-secs", type=int, default=150)
    p.add_argument("--lookback-secs", type=int, default=0,
                   help="the fleet instance's fleet.lookback_secs (0: its default)")
    p.add_argument("--out", default=None)
    p.add_argument("--render", nargs="+", default=None,
                   help="render saved figures.json files as one table and exit")
    args = p.parse_args()
    if args.render:
        print(render([f for path in args.render for f in json.load(open(path))]))
        return
    binary = os.path.abspath(os.environ.get("SKEWWATCH_BIN", os.path.join(ROOT, "target/release/skewwatch")))
    if not os.path.exists(binary):
        sys.exit(f"no release build at {binary}: cargo build --release -p skewwatch")
    work = tempfile.mkdtemp(prefix="fleet-scale-")
    out = args.out or work
    os.makedirs(out, exist_ok=True)
    print(f"# fleet-scale: {os.cpu_count()} CPUs, load average {load_average()}, work in {work}",
          file=sys.stderr, flush=True)
    figures = []
    try:
        for profile in args.profiles.split(","):
            figures.append(run_profile(args, binary, profile, work))
            print(json.dumps(figures[-1]), flush=True)
            with open(os.path.join(out, "figures.json"), "w") as f:
                json.dump(figures, f, indent=1)
    finally:
        if out != work:
            shutil.rmtree(work, ignore_errors=True)
    table = render(figures)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
