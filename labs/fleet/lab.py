#!/usr/bin/env python3
"""fleet: many real skewwatch sidecars, each fed its client's slice of the traffic, a real
Prometheus and a real VictoriaMetrics scraping them, and a skewwatch *fleet instance* reading
each TSDB's sums (issue 38, item 3).

    labs/run fleet [--short] [--tsdb prometheus|victoriametrics|both] [--sidecars N]
    labs/run fleet --sweep    # the closing figures: the short run at 1, 5, 20 and 50 sidecars

Real parts: N skewwatch sidecars (`skewwatch run`, StatsD off, fed NDJSON over HTTP by one
in-process load driver, labs/fleet/driver.py); one more skewwatch fed the whole traffic (the
bound); Prometheus 2.42 scraping every sidecar with the shipped rules
(rules/prometheus/skewwatch.rules.yml) loaded; VictoriaMetrics single-node scraping the same
sidecars with its own scraper; one fleet instance (`skewwatch run` with a `fleet:` section) per
TSDB. Both TSDBs scrape the same sidecars at once (`--tsdb both`, the default), so the two rows
of each scenario see the same traffic and the short run fits CI's 5 minutes.

Four scenarios run side by side in three groups of 32 shards, each at `--rate` requests a
second in all (driver.py): in `incident` (a) a shard at 2x and (b) another failing 30%; in
`benign` (c) clients moving their traffic so that the skews cancel in the sum; `steady` (d)
only lives through a sidecar's restart (counter reset) and another's removal, which every group
lives through. `--late S` starts one more fleet instance S seconds before the onset, to learn
from the TSDB's history (the full run's default). Exit 0 only when every expectation holds
(see `judge`).
"""
import argparse
import bisect
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import types
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, HERE)
import labkit  # noqa: E402
from labkit import Lab, free_port, get_json, http, wait_http  # noqa: E402
import driver as drv  # noqa: E402

JOB = "skewwatch-sidecars"  # contains "skewwatch": the shipped SkewwatchTargetDown applies
RULES = os.path.join(labkit.REPO, "rules", "prometheus", "skewwatch.rules.yml")
HOT, FAIL = drv.shard(drv.HOT_SHARD), drv.shard(drv.FAILING_SHARD)
TSDBS = ("prometheus", "victoriametrics")
VM_LATENCY_OFFSET = 3.0  # seconds: VictoriaMetrics' -search.latencyOffset (start_victoria_metrics)
SCRAPE_TIMEOUT = 2  # seconds: both TSDBs' scrape_timeout (scrape_cfg)
# Requests per second per shard per sidecar at or under which a slice is thin (issue 38: "no
# single sidecar does"). Replayed through `skewwatch replay` (5 s windows, 8 warm-up windows, 80 s
# before the step), a sidecar at 0.39 (32 sidecars at 400/s) named it within 100 s in 5 of 1,500
# draws of its traffic, while at 0.62 (20 sidecars) 22% of them did within 130 s, so that one of
# 20 nearly always does: a slice that thick is not thin. Since HotShard learns its dispersion
# without the baseline's own noise (issue 40), a thin sidecar proves a 2x step more often, late:
# in this lab's draw sidecar-11 of 32 at +96 s, the fleet verdict at +41/+51 s. So at thin slices
# the lab checks that the fleet verdict comes first and that at most THIN_SLICE_SIDECARS of the
# sidecars name the shard at all; at thicker slices, that the fleet verdict comes first.
THIN_SLICE = 0.4
THIN_SLICE_SIDECARS = 0.1  # of the sidecars, at most
# (label, group, the fleet alerts expected (any of), their shard, the shipped PromQL rules that
# stand for them); no alert expected where the tuple is empty.
SCENARIOS = [
    ("(a) hot shard at 2x", "incident", ("HotShard",), HOT, ("SkewwatchFleetHotShard",)),
    ("(b) shard failing 30%", "incident", ("ShardFailing", "ErrorSurge"), FAIL,
     ("SkewwatchFleetShardFailing", "SkewwatchFleetErrorRatio")),
    ("(c) benign: skews cancel", "benign", (), None, ()),
    ("(d) restart + removal", "steady", (), None, ()),
]


def params(short):
    # query_lead 4 s: a window's answers must arrive before the window closes. At 2 s, with
    # both TSDBs and 20 sidecars on 2 shared cores, VictoriaMetrics answered too late for 15 of
    # 18 windows with the fleet input's first growth expression (three matches and two set
    # operations over 15,000 series: 1.4-2.2 s idle, Prometheus 0.6-0.9 s); the expression now
    # matches once (0.08 s and 0.12 s a query on average), and 4 s (under half the 10 s window)
    # leaves room on a loaded machine.
    common = dict(rate=400, fleet_window=10, query_lead=4, lookback=600,
                  fair_share_multiple=1.5, restart_down=3)
    if short:
        # 5 s sidecar windows (warm in 8, 40 s), 10 s fleet windows (warm in 5, 50 s), 5 s
        # scrapes (the fleet window is two): both TSDBs, four scenarios, in about 3.5 minutes.
        # Seven whole fleet windows before the onset: replayed 1,000 times at this rate
        # (`skewwatch replay`), a 2x step was named every time, at most 70 s after it and 40 s
        # in the median (a fleet window's lag aside); 100 s watched. No late fleet instance
        # (CI's budget of CPU); the full run has one.
        return dict(common, sidecar_window=5, scrape=5, evaluation=15, warmup_sidecar=8,
                    warmup_fleet=5, pre_onset=80, observe=100, restart_at=20, remove_at=50, late=0)
    # skewwatch's defaults (10 s windows, 30 warm-up windows) and a 5 s scrape.
    return dict(common, sidecar_window=10, scrape=5, evaluation=15, warmup_sidecar=None,
                warmup_fleet=None, pre_onset=360, observe=180, restart_at=40, remove_at=100, late=60)


# ---------------------------------------------------------------------------------------------
# Configurations


def detectors(warmup, fair_share_multiple):
    """Shorter warm-ups (short runs) and HotShard's fair-share gate at 1.5x: a shard at twice
    its load among 32 has a share of 2/33, under the default gate of 2/32, which no 2x step
    can ever pass (the same arithmetic that keeps the shipped SkewwatchFleetHotShard silent).
    Sidecars, the fleet instances and the whole-traffic agent all get the same."""
    names = ("hot_shard", "hot_key", "error_surge", "fast_failure_sink", "shard_failing",
             "latency_skew", "cache_hit_collapse", "deadline_pile_up")
    out = "detectors:\n"
    for d in names:
        fields = []
        if warmup is not None:
            fields.append(f"    warmup_windows: {warmup}\n")
        if d == "hot_shard":
            fields.append(f"    fair_share_multiple: {fair_share_multiple}\n")
        if fields:
            out += f"  {d}:\n" + "".join(fields)
    return out


def agent_cfg(port, window, warmup, p, extra=""):
    return (f"listen:\n  http: \"127.0.0.1:{port}\"\n  statsd: disabled\n"
            f"window:\n  window_secs: {window}\n"
            f"ui:\n  history_windows: 400\n"
            # The fleet profile (docs/fleet.md): what a fleet instance sums, an outcome counter
            # only once a shard had that outcome. With every outcome class from a shard's first
            # window the TSDBs held five times the request series, and on a machine at load
            # average 15 their fleet queries outlasted the 4 s lead for a few windows a run. No
            # bounds (only +Inf): the lab's latencies are all 4-6 ms and no scenario is about
            # latency, and every bound is one more series per shard for two TSDBs.
            f"exposition:\n  profile: fleet\n  latency_buckets_secs: []\n"
            + extra + detectors(warmup, p["fair_share_multiple"]))


def eval_delay(tsdb):
    """fleet.evaluation_delay_secs for a TSDB. Prometheus stamps a scrape's samples with the
    time the scrape began and makes them visible once it has appended them, up to the scrape
    timeout later: a query of a time inside a scrape in flight misses that scrape's samples,
    and the next window's `prev` then holds them, so their growth is lost (at 20 sidecars,
    four windows a run lost a sidecar window each). VictoriaMetrics moves a query of a time
    within its -search.latencyOffset of now to now less the offset, which wanders with the
    query's own delay (windows would overlap or leave gaps), and makes a written sample
    searchable a second or two later. Evaluated that far back, both keep the time asked and
    see every sample up to it."""
    return VM_LATENCY_OFFSET if tsdb.startswith("victoriametrics") else SCRAPE_TIMEOUT


def fleet_cfg(port, tsdb_url, p, backfill, delay=0.0):
    return agent_cfg(port, p["fleet_window"], p["warmup_fleet"], p,
                     f"fleet:\n  url: \"{tsdb_url}\"\n  selector: 'job=\"{JOB}\"'\n"
                     f"  lookback_secs: {p['lookback']}\n  query_lead_secs: {p['query_lead']}\n"
                     f"  evaluation_delay_secs: {delay:g}\n"
                     f"  timeout_secs: 5\n  backfill_secs: {backfill}\n")


KEEP = ("skewwatch_(shard_requests_total|shard_cache_requests_total|shard_request_duration_seconds_.*"
        "|key_requests_total|ingest_.*|statsd_kernel_drops_total|alert_deliver.*)")


def scrape_cfg(targets, p, rules=None):
    t = ", ".join(f"'{a}'" for a in targets)
    out = f"global:\n  scrape_interval: {p['scrape']}s\n  scrape_timeout: {SCRAPE_TIMEOUT}s\n"
    if rules:
        out += f"  evaluation_interval: {p['evaluation']}s\nrule_files: ['{rules}']\n"
    # Keep what the fleet input and the shipped rules read (the cumulative series, the ingest
    # and delivery self-metrics): the per-shard gauges are the sidecar's own view, which no sum
    # uses, and would double what the TSDBs ingest (docs/fleet.md suggests the same).
    return out + (f"scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{t}]\n"
                  f"    metric_relabel_configs:\n      - source_labels: [__name__]\n"
                  f"        regex: '{KEEP}'\n        action: keep\n")


# ---------------------------------------------------------------------------------------------
# Components


def free_ports(k):
    """k distinct free loopback ports (held together while taken, so none repeats)."""
    socks = []
    try:
        for _ in range(k):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Skewwatch:
    """One skewwatch process on a fixed port (so that a restart comes back on the same one).
    `cfg` makes its configuration for a port; the first start moves to another port if its
    port was taken meanwhile."""

    def __init__(self, lab, binary, name, cfg, port):
        self.lab, self.binary, self.name, self.cfg_for = lab, binary, name, cfg
        self.cfg = os.path.join(lab.tmp, f"{name}.yaml")
        self.proc = None
        self.started = False
        self.set_port(port)

    def set_port(self, port):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        with open(self.cfg, "w") as f:
            f.write(self.cfg_for(port))

    def check(self):
        r = subprocess.run([self.binary, "check-config", self.cfg], capture_output=True, text=True)
        return r.returncode == 0, (r.stdout + r.stderr).strip()

    def start(self, wait=True):
        self.proc = self.lab.start(self.name, [self.binary, "run", "--config", self.cfg])
        if wait:
            self.wait()
        return self

    def wait(self):
        for attempt in range(3):
            deadline = time.monotonic() + 60
            while self.proc.poll() is None:
                try:
                    if http(self.url + "/readyz", timeout=5)[0] == 200:
                        self.started = True
                        return
                except OSError:  # not listening yet
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} not ready within 60 s")
                time.sleep(0.2)
            if self.started or attempt == 2:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} ({self.name}.log)")
            # Its port was taken between our probe and its bind: another port.
            self.lab.procs.stop(self.proc)
            self.set_port(free_port())
            self.proc = self.lab.start(self.name, [self.binary, "run", "--config", self.cfg])

    def stop(self):
        """SIGTERM, and the time it takes: a scraped skewwatch waits for one more scrape
        before it exits (shutdown.final_scrape_grace_secs, 20 s at most, plus 2 s)."""
        if self.proc is not None:
            self.lab.procs.stop(self.proc, timeout=30)
            self.proc = None


def start_prometheus(lab, targets, p):
    binary = labkit.need("prometheus")
    promtool = labkit.need("promtool")
    rules = os.path.join(lab.tmp, "skewwatch.rules.yml")
    shutil.copy(RULES, rules)
    check = subprocess.run([promtool, "check", "rules", rules], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"promtool check rules: {check.stdout}{check.stderr}")
    cfg = os.path.join(lab.tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(scrape_cfg(targets, p, rules))
    port = free_port()
    lab.start("prometheus", [binary, f"--config.file={cfg}", f"--storage.tsdb.path={lab.tmp}/prom-data",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d"])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/-/ready")
    return url


def victoria_metrics_binary():
    found = shutil.which("victoria-metrics") or shutil.which("victoria-metrics-prod")
    if not found:
        print("labs: `victoria-metrics` is not installed (Debian's package victoria-metrics; "
              ".ci/run must install it). `--tsdb prometheus` runs the lab without it.", file=sys.stderr)
        sys.exit(2)
    return found


def start_victoria_metrics(lab, targets, p):
    binary = victoria_metrics_binary()
    cfg = os.path.join(lab.tmp, "vm-scrape.yml")
    with open(cfg, "w") as f:
        f.write(scrape_cfg(targets, p))
    port = free_port()
    # -search.latencyOffset: VM hides the newest 30 s of samples from queries by default (to
    # let late writes land). Its own scraper writes at once, but a written sample becomes
    # searchable only when its buffer is flushed, every second or two: at 1 s a few of each
    # window's samples were not yet searchable when queried, and moved to the next window
    # (0.2-0.65% of a window, both ways). The fleet instance evaluates its queries that far
    # back (fleet.evaluation_delay_secs, `eval_delay`), a time VM keeps. No
    # -dedup.minScrapeInterval: every sample counts.
    lab.start("victoriametrics", [binary, f"-storageDataPath={lab.tmp}/vm-data",
                                  f"-httpListenAddr=127.0.0.1:{port}", f"-promscrape.config={cfg}",
                                  f"-search.latencyOffset={VM_LATENCY_OFFSET:g}s", "-retentionPeriod=1d",
                                  "-loggerLevel=WARN"])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health")
    return url


def prom_query(url, expr):
    q = urllib.parse.urlencode({"query": expr})
    r = get_json(f"{url}/api/v1/query?{q}", timeout=10)
    return [(s["metric"], float(s["value"][1])) for s in r["data"]["result"]]


def growth_expr(binary, lookback, offset):
    """What the fleet input asks for the requests family, as the binary prints it
    (`skewwatch fleet-query`), for timing."""
    return subprocess.run([binary, "fleet-query", "--family", "requests", "--selector", f'job="{JOB}"',
                           "--lookback-secs", str(lookback), "--since-secs", str(offset)],
                          capture_output=True, text=True, check=True).stdout.strip()


def query_seconds(url, expr, repeat=3):
    """Best of `repeat` wall times of one instant query (the machine is shared: the best is
    the query's own cost, the others add the neighbours')."""
    best = None
    for _ in range(repeat):
        q = urllib.parse.urlencode({"query": expr, "time": f"{time.time() - 2:.3f}"})
        t = time.monotonic()
        try:
            code, _ = http(f"{url}/api/v1/query?{q}", timeout=10)
        except OSError:
            code = None
        dt = time.monotonic() - t
        if code == 200:
            best = dt if best is None else min(best, dt)
    return None if best is None else round(best, 3)


def cpu_seconds(pid):
    """User + system CPU seconds of a process and its reaped children so far (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Judging


def alerts_of(watcher, lab, prefix, group=None):
    """[(source, alertname, labels, seconds after onset)] first firings of sources starting
    with `prefix`, optionally of one group."""
    out = []
    for (src, name, ident), t in watcher.first.items():
        if not src.startswith(prefix):
            continue
        labels = dict(kv.split("=", 1) for kv in ident.split(",") if kv)
        if group is not None and labels.get("group") != group:
            continue
        out.append((src, name, labels, round(lab.rel(t), 1)))
    return sorted(out, key=lambda a: a[3])


def first_of(alerts, names, shard=None):
    hits = [a for a in alerts if a[1] in names and (shard is None or a[2].get("shard") == shard)]
    return hits[0] if hits else None


def count_agreement(fleet_url, between, group, lag, t_from, t_to, exact=None):
    """The fleet instance's per-window request counts of `group` (GET /api/v1/history) against
    what the sidecars accepted over the same windows shifted by `lag` seconds (the sidecar
    window, the scrape interval and the query lead: a request reaches the TSDB that late), and,
    with `exact` (a window's end and the group -> what the sidecars counted in the sidecar
    windows that fleet window read, [`exact_truth`]), per window against that."""
    hist = get_json(f"{fleet_url}/api/v1/history?group={group}&windows=1440&shards=1")
    wins = [(labkit.parse_ts(w["start"]), labkit.parse_ts(w["end"]), w["requests"])
            for w in hist.get("windows", [])]
    wins = [w for w in wins if w[0] - lag >= t_from and w[1] - lag <= t_to]

    def rows_at(l):
        return [(a, b, n, between(a - l, b - l, group)) for a, b, n in wins]

    # The lag that fits the windows best, beside the nominal one: a sanity check of both.
    best = min((sum((n - s) ** 2 for _, _, n, s in rows_at(x / 2)), x / 2) for x in range(0, 81))[1]
    rows = rows_at(lag)
    fleet, truth = sum(r[2] for r in rows), sum(r[3] for r in rows)
    # Windows a fleet instance had no complete answer for are not judged and not in its
    # history: how many of the span's windows it judged.
    w = hist.get("window_secs") or 1
    first_start = -((t_from + lag) // -w) * w  # ceil
    expected = max(0, round((t_to // w * w - first_start) / w))
    errs = sorted(abs(n - s) / s for _, _, n, s in rows if s)
    out_exact = {}
    if exact is not None:
        pairs = [(b, n, exact(b, group)) for _, b, n in wins]
        off = sorted(((abs(n - x) / x, b) for b, n, x in pairs if x), reverse=True)
        out_exact = {
            "exact_window_error_median": round(sorted(e for e, _ in off)[len(off) // 2], 4) if off else None,
            "exact_window_error_max": round(off[0][0], 4) if off else None,
            "exact_windows_over_2pct": [round(b) for e, b in off if e > 0.02],
            "exact_windows_unpaired_over_2pct": unpaired_over(pairs, 0.02),
            "exact_per_window": [{"end": b, "fleet": n, "counted": x} for b, n, x in pairs],
        }
    return {
        "group": group, "windows": len(rows), "windows_in_span": expected, "lag_nominal_s": lag, "lag_fitted_s": best,
        "fleet_requests": fleet, "sent_requests": truth,
        "span_error": None if not truth else round((fleet - truth) / truth, 5),
        "window_error_median": round(errs[len(errs) // 2], 4) if errs else None,
        "window_error_max": round(errs[-1], 4) if errs else None,
        "per_window": [{"start": a, "end": b, "fleet": n, "sent": s} for a, b, n, s in rows],
        **out_exact,
    }


# A sidecar's window closes at its end and its counters reach /metrics a moment later: a scrape
# this soon after a window's end is not taken to hold that window.
PUBLISH_SECS = 0.05


def unpaired_over(pairs, tolerance):
    """Ends of the windows of `pairs` ([(end, fleet, counted)]) off by more than `tolerance`
    alone and with either neighbour. A scrape written after the query that should have read it
    hands one sidecar window to the next fleet window: the pair still adds up; a lost window
    does not."""
    def off(*w):
        counted = sum(x for _, _, x in w)
        return counted == 0 or abs(sum(n for _, n, _ in w) - counted) / counted > tolerance
    return [round(pairs[i][0]) for i in range(len(pairs))
            if pairs[i][2] and off(pairs[i])
            and all(off(pairs[i], pairs[j]) for j in (i - 1, i + 1)
                    if 0 <= j < len(pairs) and pairs[j][2])]


def scrape_times(tsdb_url, since, until):
    """{instance: sorted times of its successful scrapes} over [since, until]: `up` is 1 for a
    scrape that read the page (a failed one has `up` 0 and no counter samples)."""
    expr = f'up{{job="{JOB}"}}[{int(until - since) + 1}s]'
    q = urllib.parse.urlencode({"query": expr, "time": f"{until:.3f}"})
    got = get_json(f"{tsdb_url}/api/v1/query?{q}", timeout=30)["data"]["result"]
    return {x["metric"]["instance"]: sorted(float(t) for t, v in x["values"] if float(v) == 1)
            for x in got}


def exact_truth(d, scrapes, ports, kills, p, offset):
    """(end, group) -> what the sidecars counted in the sidecar windows that the fleet window
    ending at `end` read: per sidecar, what its counters held at its last scrape before the
    previous query and do not at its last scrape before this one (the query's evaluation time
    is the window's end less the lead, and less fleet.evaluation_delay_secs, `offset`: on
    VictoriaMetrics its -search.latencyOffset). A scrape holds the sidecar windows closed by then; a stopping sidecar's
    final scrape (one between the signal and the exit: it waits for one, `shutdown:` in
    docs/configuration.md) holds everything it accepted, its open window included. A stopped
    sidecar that was not scraped again before it exited took what it accepted after its last
    scrape with it. The driver sends 0.25 s into each second, so every request's sidecar
    window is plain."""
    sw, w = p["sidecar_window"], p["fleet_window"]
    lost = {}  # client -> [(from, to)]: accepted, never scraped

    def held_by(ts, finals):
        """[(scrape time, the send time before which its counters hold every request)], the
        latter never moving back (a restarted sidecar's first scrapes hold less than the
        final scrape of the one before it, which counted on to its exit)."""
        out, top = [], -math.inf
        for x in ts:
            cut = next((exited for signalled, exited in finals if signalled <= x <= exited),
                       math.floor((x - PUBLISH_SECS) / sw) * sw)
            top = max(top, cut)
            out.append((x, top))
        return out

    held = {}
    for client, port in enumerate(ports):
        ts = scrapes.get(f"127.0.0.1:{port}", [])
        finals = [(sig, ex) for c, _, sig, ex in kills if c == client]
        held[client] = held_by(ts, finals)
        for sig, ex in finals:
            if not any(sig <= x <= ex for x in ts):
                before = [cut for x, cut in held[client] if x < sig]
                lost.setdefault(client, []).append((before[-1] if before else -math.inf, ex))

    def cut_at(hs, at):  # what the last scrape at or before `at` held
        i = bisect.bisect_right([x for x, _ in hs], at)
        return None if i == 0 else hs[i - 1][1]

    def truth(end, group):
        a = end - p["query_lead"] - offset
        total = 0
        for client in range(len(ports)):
            hi = cut_at(held[client], a)
            if hi is None:
                continue
            lo = cut_at(held[client], a - w)
            lo = -math.inf if lo is None else lo
            for t, _, _, _, pc, _ in d.ticks:
                if lo <= t < hi and client in pc and not any(f <= t < k for f, k in lost.get(client, [])):
                    total += pc[client][group]
        return total
    return truth


# ---------------------------------------------------------------------------------------------
# The run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--tsdb", choices=("prometheus", "victoriametrics", "both"), default="both")
    ap.add_argument("--sidecars", type=int, default=32)
    ap.add_argument("--rate", type=float, default=None, help="requests/s per group, whole fleet")
    ap.add_argument("--lookback", type=int, default=None, help="fleet.lookback_secs")
    ap.add_argument("--lead", type=float, default=None, help="fleet.query_lead_secs")
    ap.add_argument("--late", type=float, default=None,
                    help="start one more fleet instance this many seconds before the onset (0: none)")
    ap.add_argument("--pre-onset", type=float, default=None, help="seconds of load before the onset")
    ap.add_argument("--observe", type=float, default=None, help="seconds watched after the onset")
    ap.add_argument("--sweep", action="store_true",
                    help="the closing figures: the short run on Prometheus at 1, 5, 20 and 50 sidecars")
    ap.add_argument("--name", default="fleet", help=argparse.SUPPRESS)  # artifacts' folder (--sweep)
    args = ap.parse_args()
    if args.sweep:
        return sweep(args)
    p = params(args.short)
    for k, v in (("rate", args.rate), ("lookback", args.lookback), ("query_lead", args.lead),
                 ("late", args.late), ("pre_onset", args.pre_onset), ("observe", args.observe)):
        if v is not None:
            p[k] = v
    n = args.sidecars
    tsdbs = TSDBS if args.tsdb == "both" else (args.tsdb,)
    if "victoriametrics" in tsdbs:
        victoria_metrics_binary()
    lab = Lab(args.name, args.short)
    ok = False
    try:
        ok = run(lab, p, n, tsdbs, args)
    except Exception as e:
        lab.event("error", f"{type(e).__name__}: {e}")
        lab.dump_logs()
    print(f"\nfleet: {'PASSED' if ok else 'FAILED'} (artifacts in {lab.out})")
    return 0 if ok else 1


def run(lab, p, n, tsdbs, args):
    # One copy of the binary for the whole run, so a rebuild under the lab cannot mix versions
    # (a restarted sidecar runs the same binary as the others).
    binary = os.path.join(lab.tmp, "skewwatch")
    shutil.copy(labkit.skewwatch_bin(), binary)
    sw_version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    lab.event("setup", f"{sw_version}; {n} sidecars; TSDBs: {', '.join(tsdbs)}; "
              f"{p['rate']:.0f} requests/s per group over {drv.SHARDS} shards, {len(drv.GROUPS)} groups")

    # The fleet instances first as a probe: does this binary take a `fleet:` section?
    fleets = {t: Skewwatch(lab, binary, f"fleet-{t}", lambda x: fleet_cfg(x, "http://127.0.0.1:9", p, 0),
                           free_port()) for t in tsdbs}
    fleet_ok, why = next(iter(fleets.values())).check()
    if not fleet_ok:
        reason = next((x.strip() for x in why.splitlines() if "error" in x), why[:200])
        lab.event("setup", "FLEET INSTANCE MISSING: this skewwatch refuses the `fleet:` section "
                  f"(check-config: {reason}); everything else runs, the fleet verdicts are "
                  "reported as missing and the lab fails")

    sidecars = []
    for i, port in enumerate(free_ports(n)):
        sidecars.append(Skewwatch(lab, binary, f"sidecar-{i:02d}",
                                  lambda x: agent_cfg(x, p["sidecar_window"], p["warmup_sidecar"], p), port)
                        .start(wait=False))
    for s in sidecars:
        s.wait()
    whole = Skewwatch(lab, binary, "whole", lambda x: agent_cfg(x, p["fleet_window"], p["warmup_fleet"], p),
                      free_port()).start()
    lab.event("setup", f"{n} sidecars on ports {sidecars[0].port}..{sidecars[-1].port} (window "
              f"{p['sidecar_window']} s); whole-traffic skewwatch {whole.url} (window {p['fleet_window']} s)")

    targets = [f"127.0.0.1:{s.port}" for s in sidecars]
    tsdb_url = {}
    if "prometheus" in tsdbs:
        tsdb_url["prometheus"] = start_prometheus(lab, targets, p)
        lab.event("setup", f"Prometheus {tsdb_url['prometheus']} (scrape {p['scrape']} s, shipped rules "
                  f"every {p['evaluation']} s)")
    if "victoriametrics" in tsdbs:
        tsdb_url["victoriametrics"] = start_victoria_metrics(lab, targets, p)
        lab.event("setup", f"VictoriaMetrics {tsdb_url['victoriametrics']} (own scraper, "
                  f"{p['scrape']} s, -search.latencyOffset={VM_LATENCY_OFFSET:g}s)")

    def sleep_checking(secs):
        end = time.monotonic() + secs
        while time.monotonic() < end:
            dead = [x for x in lab.procs.check_alive()]
            if dead:
                raise RuntimeError(f"component died: {dead}")
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def sleep_until(unix):
        sleep_checking(max(0.0, unix - time.time()))

    # The load starts on a fleet window's boundary (also a sidecar window's), so that every
    # window of every agent holds whole seconds of it, the first one included (driver.py).
    w = p["fleet_window"]
    start_at = math.ceil((time.time() + 2) / w) * w
    d = drv.Driver(lab, [s.url for s in sidecars], whole.url, p["rate"], start_at)
    cpu0 = cpu_seconds(os.getpid())
    d.start()
    driver_start = start_at + drv.TICK_OFFSET
    lab.event("load", f"driver: every second from {drv.TICK_OFFSET} s past the window boundary "
              f"{start_at:.0f}, each of {n} clients' slice to its sidecar ({p['rate'] / n / drv.SHARDS:.2f} "
              f"requests/s per shard per sidecar); benign move {d.move:.0%} of each client's traffic")

    # The fleet instances start after the first fleet query that could see part of the load's
    # first sidecar window (start_at + w - lead): the sidecars' counters reach the TSDBs at
    # each target's own scrape phase, so that query would find a few sidecars' first window
    # and not the others', a sliver of a window that HotShard would learn its shards'
    # dispersion from (docs/labs.md, "Why the 2x verdict was missed"). From the next query on,
    # every fleet window holds two sidecar windows of every sidecar. The TSDBs hold nothing
    # older, so no backfill (fleet.backfill_secs: 0): the baselines warm up live.
    fleet_url = {}
    if fleet_ok:
        sleep_until(start_at + w - p["query_lead"] + 1)
        for t in tsdbs:
            fleets[t] = Skewwatch(lab, binary, f"fleet-{t}",
                                  lambda x, u=tsdb_url[t], t=t: fleet_cfg(x, u, p, 0, eval_delay(t)),
                                  free_port()).start()
            fleet_url[t] = fleets[t].url
            lab.event("setup", f"fleet instance on {t}: {fleet_url[t]} (window {w} s, "
                      f"lead {p['query_lead']} s, no backfill: the TSDB holds nothing before the load)")

    # One more fleet instance, on the first TSDB, started shortly before the onset with fewer
    # live windows than its warm-up needs: it must learn its baselines from the TSDB's history
    # (fleet.backfill_secs) and judge the scenarios like the others. Its backfill reaches back
    # to the first clean fleet window, the one ending start_at + 2w, and no further.
    late = None
    late_backfill = [0]
    instances = list(tsdbs)
    if fleet_ok and p["late"]:
        key = f"{tsdbs[0]}-late"
        late = Skewwatch(lab, binary, f"fleet-{key}",
                         lambda x, u=tsdb_url[tsdbs[0]]: fleet_cfg(x, u, p, late_backfill[0],
                                                                   eval_delay(tsdbs[0])), free_port())
        fleet_url[key] = late.url
        instances.append(key)
    sources = {f"fleet@{t}": u + "/api/v1/alerts" for t, u in fleet_url.items()}
    sources["whole"] = whole.url + "/api/v1/alerts"
    if "prometheus" in tsdb_url:
        sources["promql"] = tsdb_url["prometheus"] + "/api/v1/alerts"
    sources.update({s.name: s.url + "/api/v1/alerts" for s in sidecars})
    watcher = labkit.AlertWatcher(lab, sources, every=1.0)
    watcher.start()

    restart_i = n // 3 if n >= 2 else None
    remove_i = (2 * n) // 3 if n >= 3 else None
    kills = []  # (client, port, unix time of SIGTERM, unix time it exited)

    late_start = None
    if late is not None:
        sleep_until(start_at + p["pre_onset"] - p["late"])
        late_backfill[0] = int(((time.time() // w) * w - (start_at + 2 * w)) // w + 1) * w
        late.set_port(late.port)  # its configuration again, with that backfill
        late.start()
        late_start = time.time()
        _, body = http(late.url + "/readyz")
        lab.event("setup", f"fleet instance {late.name} started {p['late']:.0f} s before the onset "
                  f"(backfill {late_backfill[0]} s): " + body.decode(errors="replace").strip().replace("\n", " | "))
    sleep_until(start_at + p["pre_onset"])
    d.set_onset()
    lab.mark_onset(f"hot: {HOT} at 2x; failing: {FAIL} fails {drv.FAIL_RATIO:.0%}; benign: clients move "
                   f"{d.move:.0%} to shards of their own")
    onset_unix = time.time()

    plan = []
    if restart_i is not None:
        plan.append((p["restart_at"], "restart", restart_i))
    if remove_i is not None:
        plan.append((p["remove_at"], "remove", remove_i))
    for at, what, i in sorted(plan):
        sleep_checking(max(0.0, lab.onset + at - lab.now()))
        s = sidecars[i]
        if what == "restart":
            signalled = time.time()
            s.stop()
            kills.append((i, s.port, signalled, time.time()))
            lab.event("fault", f"{s.name} stopped (SIGTERM; exited {time.time() - signalled:.1f} s later, "
                      "after its final scrape); its client keeps sending (refused)")
            time.sleep(p["restart_down"])
            s.start()
            lab.event("fault", f"{s.name} started again on port {s.port}: its counters start from 0")
        else:
            d.remove(i)
            signalled = time.time()
            s.stop()
            kills.append((i, s.port, signalled, time.time()))
            lab.event("fault", f"{s.name} and its client removed (the TSDBs keep the target: up=0)")
    sleep_checking(max(0.0, lab.onset + p["observe"] - lab.now()))
    end_unix = time.time()
    watcher.stop.set()
    d.stop.set()
    d.join(timeout=5)

    r = types.SimpleNamespace(
        args=args, n=n, binary=binary, tsdbs=tsdbs, instances=instances, sidecars=sidecars, whole=whole,
        tsdb_url=tsdb_url, fleet_url=fleet_url, fleet_ok=fleet_ok, fleet_check=why, late=late,
        late_start=late_start, d=d, kills=kills, driver_start=driver_start, end_unix=end_unix,
        onset_unix=onset_unix, watcher=watcher, sw_version=sw_version, cpu0=cpu0,
        restarted=sidecars[restart_i].name if restart_i is not None else None,
        removed=sidecars[remove_i].name if remove_i is not None else None)
    counts = measure_counts(r, p)
    costs = measure_costs(lab, r, p)
    rows, checks = judge(lab, watcher, instances, fleet_url, counts["fleet"], n, p)
    failed = report(lab, r, p, rows, checks, counts, costs)
    write_timeline(lab, r, p, rows, checks, counts, costs, passed=not failed)
    return not failed


def measure_counts(r, p):
    """Count agreement of every fleet instance (and, as the reference, of the whole-traffic
    agent) over the span from 2 fleet windows after the load started to the end."""
    d = r.d
    lag = p["query_lead"] + (p["sidecar_window"] + p["scrape"]) / 2
    t_from = r.driver_start + 2 * p["fleet_window"]
    agreement = {}
    ports = [s.port for s in r.sidecars]
    exact = {}
    for t in r.tsdbs:
        try:
            scrapes = scrape_times(r.tsdb_url[t], r.driver_start - 10, r.end_unix + 5)
            # The fleet instance on VictoriaMetrics evaluates its queries that far back.
            offset = eval_delay(t)
            exact[t] = exact_truth(d, scrapes, ports, r.kills, p, offset)
        except Exception as e:  # the figure is missing, not the run
            print(f"labs: no scrape times from {t} ({e}); per-window agreement by lag only")
    for t, u in r.fleet_url.items():
        start = t_from if t in r.tsdbs else max(t_from, r.late_start + p["fleet_window"])
        tsdb = next(x for x in r.tsdbs if t == x or t.startswith(x + "-"))
        agreement[t] = {g: count_agreement(u, d.sent_between, g, lag, start, r.end_unix, exact.get(tsdb))
                        for g in drv.GROUPS}
    # What no one could count: a stopped sidecar's requests after the TSDB's last scrape of it
    # (nothing, when a final scrape came before it exited). Per TSDB (they scrape at their own
    # phases): what its sidecar accepted before it exited, less its counters' last value.
    for t in r.tsdbs:
        lost = {g: 0 for g in drv.GROUPS}
        for client, port, _, stopped in r.kills:
            got = d.accepted_by(client, 0, stopped)
            expr = (f'sum by (group) (last_over_time(skewwatch_shard_requests_total{{job="{JOB}",'
                    f'instance="127.0.0.1:{port}"}}[{p["lookback"]}s]))')
            q = urllib.parse.urlencode({"query": expr, "time": f"{stopped + 1:.3f}"})
            try:
                last = {x["metric"]["group"]: float(x["value"][1]) for x in
                        get_json(f"{r.tsdb_url[t]}/api/v1/query?{q}", timeout=30)["data"]["result"]}
            except Exception:
                last = None
            for g in drv.GROUPS:
                lost[g] += got[g] - last.get(g, 0) if last is not None else 0
        for key in [k for k in agreement if k == t or k.startswith(t + "-")]:
            for g, a in agreement[key].items():
                reached = a["sent_requests"] - lost[g]
                a["lost_on_stop"] = round(lost[g])
                a["reached_tsdb_error"] = (round((a["fleet_requests"] - reached) / reached, 5)
                                           if a["windows"] == a["windows_in_span"] and reached else None)
    # The same bookkeeping on the whole-traffic agent (fed directly: no lag, nothing lost): a
    # check of the lab's own truth and of skewwatch's window counts.
    reference = {g: count_agreement(r.whole.url, d.whole_between, g, 0.0, t_from, r.end_unix)
                 for g in drv.GROUPS}
    return {"lag": lag, "fleet": agreement, "whole": reference, "refused": d.refused_total()}


def measure_costs(lab, r, p):
    """What the run cost and what the fleet instances and the shipped rules say at its end."""
    out = {"cpu": {"driver (lab)": round(cpu_seconds(os.getpid()) - r.cpu0, 1)}}
    for name, proc in list(lab.procs.procs):
        c = cpu_seconds(proc.pid)
        if c is not None:
            key = "sidecars" if name.startswith("sidecar-") else name
            out["cpu"][key] = round(out["cpu"].get(key, 0) + c, 1)
    out["load"] = os.getloadavg()
    try:
        out["series_per_sidecar"] = len(labkit.parse_prom(http(r.sidecars[0].url + "/metrics")[1].decode()))
    except Exception:
        out["series_per_sidecar"] = None
    out["fleet_self"], out["readyz"], out["first_windows"] = {}, {}, {}
    for t, u in r.fleet_url.items():
        m = {}
        try:
            for name, labels, v in labkit.parse_prom(http(u + "/metrics")[1].decode()):
                if name.startswith("skewwatch_fleet_") and not name.endswith("_bucket"):
                    m[name[len("skewwatch_fleet_"):] + "".join(f"{{{k}={labels[k]}}}" for k in sorted(labels))] = v
            c = m.get("query_duration_seconds_count") or 0
            m["query_seconds_mean"] = round(m.get("query_duration_seconds_sum", 0) / c, 3) if c else None
        except Exception as e:
            m["error"] = str(e)
        out["fleet_self"][t] = m
        # Its first windows of the incident group: whole ones, or the baselines start from a
        # sliver (driver.py).
        try:
            hist = get_json(f"{u}/api/v1/history?group=incident&windows=1440&shards=1")
            out["first_windows"][t] = [w["requests"] for w in hist.get("windows", [])[:4]]
        except Exception as e:
            out["first_windows"][t] = f"error: {e}"
        code, body = http(u + "/readyz")
        out["readyz"][t] = f"{code} " + body.decode(errors="replace").strip().replace("\n", " | ")
    # What one fleet query costs each TSDB at the end of the run (last_over_time reads every
    # sample of the lookback of every series; the one `<=` matches every series).
    out["query_seconds"] = {}
    for t, u in r.tsdb_url.items():
        for lb in sorted({p["lookback"]} if r.args.short else {p["lookback"], 60}):
            out["query_seconds"][f"{t} lookback {lb}s"] = query_seconds(
                u, growth_expr(r.binary, lb, p["fleet_window"]),
                repeat=1 if r.args.short else 3)
    out["tsdb_series"] = {}
    for t, u in r.tsdb_url.items():
        try:
            x = prom_query(u, f'count({{job="{JOB}"}})')
            out["tsdb_series"][t] = int(x[0][1]) if x else None
        except Exception as e:
            out["tsdb_series"][t] = f"error: {e}"
    out["promql_values"] = {}
    if "prometheus" in r.tsdb_url:
        for label, expr in (
                ("hot share (SkewwatchFleetHotShard needs >= 2/shards)",
                 f'group_shard:skewwatch_shard_share:ratio5m{{group="incident",shard="{HOT}"}}'),
                ("2 / shards of the group", '2 / group:skewwatch_shards:count5m{group="incident"}'),
                ("failing shard's error ratio (SkewwatchFleetShardFailing needs >= 0.5)",
                 f'group_shard:skewwatch_shard_errors:ratio5m{{group="incident",shard="{FAIL}"}}'),
                ("the group's error ratio (SkewwatchFleetErrorRatio needs >= 0.05)",
                 'group:skewwatch_errors:ratio5m{group="incident"}')):
            try:
                x = prom_query(r.tsdb_url["prometheus"], expr)
                out["promql_values"][label] = round(x[0][1], 4) if x else None
            except Exception as e:
                out["promql_values"][label] = f"error: {e}"
    return out


def report(lab, r, p, rows, checks, counts, costs):
    """Prints the table and the figures; returns the checks that failed."""
    header = ["scenario", "TSDB", "expected (fleet)", "fleet", "whole traffic", "first sidecar",
              "sidecars fired", "PromQL rule", "count agreement", "verdict"]
    labkit.print_table("Scenarios (seconds after the onset; the run watched "
                       f"{p['observe']} s after it)", header, [[x[h] for h in header] for x in rows])
    print("\nShipped PromQL rules' expressions at the end (Prometheus):")
    for k, v in costs["promql_values"].items():
        print(f"  {k}: {v}")
    for t, per in counts["fleet"].items():
        print(f"\nCount agreement, fleet instance on {t} (nominal lag {counts['lag']:.1f} s):")
        for g, a in per.items():
            print(f"  {g:<8} {a['windows']}/{a['windows_in_span']} windows judged: fleet {a['fleet_requests']} "
                  f"vs sent {a['sent_requests']} -> {fmt_pct(a['span_error'])} over the span; per window "
                  f"median {fmt_pct(a['window_error_median'])}, max {fmt_pct(a['window_error_max'])}; "
                  f"best-fitting lag {a['lag_fitted_s']} s; lost when sidecars stopped (never in the "
                  f"TSDB) {a.get('lost_on_stop')}, against what reached the TSDB "
                  f"{fmt_pct(a.get('reached_tsdb_error'))}")
            if a.get("exact_window_error_max") is not None:
                print(f"           per window against the sidecar windows each one read (exact): median "
                      f"{a['exact_window_error_median']:.2%}, max {a['exact_window_error_max']:.2%}; "
                      f"windows over 2% ending at {[round(b - r.onset_unix) for b in a['exact_windows_over_2pct']]} "
                      f"s after the onset")
    print("\nCount agreement, whole-traffic agent (the reference, no lag):")
    for g, a in counts["whole"].items():
        print(f"  {g:<8} {a['windows']} windows: {a['fleet_requests']} vs sent {a['sent_requests']} -> "
              f"{fmt_pct(a['span_error'])}; per window max {fmt_pct(a['window_error_max'])}")
    load = costs["load"]
    print(f"\nRequests refused while a sidecar was down (no one can count them): {counts['refused']}")
    print(f"Series per sidecar (one scrape of sidecar-00): {costs['series_per_sidecar']}; kept by each "
          f"TSDB (the cumulative series and self-metrics, every sidecar): {costs['tsdb_series']}")
    print(f"CPU seconds over the run: {costs['cpu']}; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} on {os.cpu_count()} cores; driver's worst tick lateness {r.d.late:.2f} s")
    print("One fleet query (requests family) at the end, wall seconds: "
          + "; ".join(f"{k} {v}" for k, v in costs["query_seconds"].items()))
    for t, ready in costs["readyz"].items():
        m = costs["fleet_self"].get(t, {})
        fails = {k: v for k, v in m.items() if k.startswith("query_failures_total") and v}
        print(f"fleet instance on {t}: windows fed {m.get('windows_total{result=fed}')}, skipped "
              f"{m.get('windows_total{result=skipped}')}; query failures {fails or 'none'}; mean query "
              f"{m.get('query_seconds_mean')} s; first windows of incident {costs['first_windows'].get(t)} "
              f"requests (a whole one: {p['rate'] * p['fleet_window']:.0f}); /readyz {ready}")
    failed = [c for c, good in checks if not good]
    if not r.fleet_ok:
        failed.insert(0, "the fleet instance could not run (this skewwatch has no `fleet:` input)")
    for c in failed:
        print(f"  FAILED: {c}")
    return failed


def write_timeline(lab, r, p, rows, checks, counts, costs, passed):
    sidecar_alerts = {}
    for g in drv.GROUPS:
        per = {}
        for src, name, labels, t in alerts_of(r.watcher, lab, "sidecar-", g):
            per.setdefault(src, []).append({"alert": name, "labels": labels, "at": t})
        sidecar_alerts[g] = per
    lab.write_json("timeline.json", {
        "lab": "fleet", "short": r.args.short, "sidecars": r.n, "tsdbs": list(r.tsdbs), "params": p,
        "skewwatch": r.sw_version, "fleet_instance": r.fleet_ok, "fleet_check_config": r.fleet_check,
        "onset_t": round(lab.onset, 2), "onset_unix": r.onset_unix, "driver_start_unix": r.driver_start,
        "benign_move": r.d.move, "restarted": r.restarted, "removed": r.removed,
        "scenarios": rows, "checks": [{"check": c, "holds": g} for c, g in checks],
        "sidecar_alerts": sidecar_alerts,
        "fleet_alerts": {t: alerts_of(r.watcher, lab, f"fleet@{t}") for t in r.instances},
        "late_fleet_instance": None if r.late is None else {"name": r.late.name,
                                                            "started_before_onset_s": p["late"]},
        "whole_alerts": alerts_of(r.watcher, lab, "whole"),
        "promql_alerts": alerts_of(r.watcher, lab, "promql"), "promql_values": costs["promql_values"],
        "count_agreement": counts["fleet"], "count_agreement_whole": counts["whole"],
        "refused_while_down": counts["refused"], "readyz": costs["readyz"],
        "query_seconds": costs["query_seconds"], "fleet_self_metrics": costs["fleet_self"],
        "series_per_sidecar": costs["series_per_sidecar"], "tsdb_series": costs["tsdb_series"],
        "cpu_seconds": costs["cpu"], "loadavg": costs["load"], "first_windows": costs["first_windows"],
        "driver_worst_lateness_s": round(r.d.late, 2), "events": lab.events, "passed": passed})


def fmt_pct(v):
    return "n/a" if v is None else f"{v:+.2%}"


def judge(lab, watcher, tsdbs, fleet_url, agreement, n, p):
    """The table's rows and the checks: [(what, holds)]."""
    horizon = min(180, p["observe"])

    def matches(a, names, shard):  # ErrorSurge is the group's: no shard label
        return a[1] in names and a[2].get("shard", shard) == shard

    def first(alerts, names, shard):
        return next((a for a in alerts if matches(a, names, shard)), None)

    def at(a, who=False):
        return (f"{a[0]} " if who else "") + f"{a[1]} {a[3]:+.0f}s"

    checks, rows = [], []
    for label, group, names, shard, rules in SCENARIOS:
        if group == "steady" and n < 3:  # nothing to remove (and at 1, nothing to restart)
            label = "(d) restart" if n == 2 else "(d) steady (1 sidecar)"
        side = alerts_of(watcher, lab, "sidecar-", group)
        whole = alerts_of(watcher, lab, "whole", group)
        promql = [a for a in alerts_of(watcher, lab, "promql", group) if not rules or a[1] in rules]
        if names:
            s_first, w_first = first(side, names, shard), first(whole, names, shard)
            fired = {a[0] for a in side if matches(a, names, shard)}
        else:
            s_first, w_first = (side or [None])[0], (whole or [None])[0]
            fired = {a[0] for a in side}
        for t in tsdbs:
            fa = alerts_of(watcher, lab, f"fleet@{t}", group)
            have = t in fleet_url
            mine = []  # this row's checks

            def check(what, good):
                mine.append(good)
                checks.append((f"{label} on {t}: {what}", good))

            if names:
                hit = first([a for a in fa if a[2].get("scope") == "fleet"], names, shard)
                fleet_cell = at(hit) if hit else "never"
                check(f"fleet {' or '.join(names)} (scope=fleet) within {horizon} s of the onset",
                      hit is not None and 0 <= hit[3] <= horizon)
                wrong = [a for a in fa if a[2].get("shard") not in (None, HOT, FAIL)]
                check(f"no fleet alert names another shard {wrong[:3]}", have and not wrong)
                if names == ("HotShard",) and p["rate"] / n / drv.SHARDS <= THIN_SLICE:
                    check(f"the fleet verdict before any sidecar's, and at most "
                          f"{THIN_SLICE_SIDECARS:.0%} of the sidecars name {shard} "
                          f"({len(fired)}/{n}; first {at(s_first, True) if s_first else 'none'})",
                          hit is not None and (s_first is None or hit[3] <= s_first[3])
                          and len(fired) <= THIN_SLICE_SIDECARS * n)
                elif names == ("HotShard",) and n >= 20:
                    # Thicker slices: a few sidecars prove the step by evidence across windows,
                    # after the whole traffic's agent. What must hold: the fleet verdict first.
                    check(f"the fleet verdict before the first sidecar's "
                          f"({at(s_first, True) if s_first else 'none'})",
                          hit is not None and (s_first is None or hit[3] <= s_first[3]))
            else:
                fleet_cell = "silent" if not fa else ", ".join(at(a) for a in fa[:3])
                check(f"no fleet alert in group {group} {fa[:3]}", have and not fa)
            early = [a for a in fa if a[3] < 0]
            check(f"no fleet alert before the onset {early[:3]}", not early)
            a = agreement.get(t, {}).get(group)
            check(f"fleet counts of {group} within 2% of what was sent",
                  bool(a) and a["span_error"] is not None and abs(a["span_error"]) <= 0.02)
            # Each window against the sidecar windows it read (`exact_truth`): exact but for
            # what the TSDB never had (a stopped sidecar's counts when no final scrape came).
            if a and a.get("exact_window_error_max") is not None:
                check(f"every fleet window of {group} within 2% of the sidecar windows it read, "
                      f"alone or with a neighbour it handed a late scrape to "
                      f"(max {a['exact_window_error_max']:.2%}; "
                      f"{len(a['exact_windows_over_2pct'])} over 2%, "
                      f"{len(a['exact_windows_unpaired_over_2pct'])} even with a neighbour)",
                      not a["exact_windows_unpaired_over_2pct"])
            check(f"the fleet instance judged at least 90% of the windows "
                  f"({a['windows'] if a else 0}/{a['windows_in_span'] if a else '?'})",
                  bool(a) and a["windows"] >= 0.9 * a["windows_in_span"])
            rows.append({
                "scenario": label, "TSDB": t,
                "expected (fleet)": (" or ".join(names) + f" {shard}") if names else "none",
                "fleet": fleet_cell if have else "missing",
                "whole traffic": at(w_first) if w_first else ("never" if names else "silent"),
                "first sidecar": at(s_first, True) if s_first else ("never" if names else "silent"),
                "sidecars fired": f"{len(fired)}/{n}",
                "PromQL rule": (("as above" if t.startswith("prometheus") else "n/a (no rule engine)")
                                if t != "prometheus" else
                                at(promql[0]) if promql else "never" if rules else "silent"),
                "count agreement": "n/a" if not a else
                f"{fmt_pct(a['span_error'])} (window max {fmt_pct(a['window_error_max'])}; "
                f"{a['windows']}/{a['windows_in_span']} judged)",
                "verdict": "ok" if all(mine) else "FAILED"})
    return rows, checks


# ---------------------------------------------------------------------------------------------
# The sweep: the closing figures


SWEEP_SIDECARS = (1, 5, 20, 50)
# The horizon for the fleet verdict: the sweep watches all of it, so that the thicker
# slices' sidecars have the time to name the shard (the short run watches less).
SWEEP_OBSERVE = 180


def sweep(args):
    """The short run on Prometheus (it alone runs the shipped rules) at each of SWEEP_SIDECARS
    sidecars, one after the other at the same total rate, then one table: the delay of the fleet
    verdict beside the whole traffic's agent, the first sidecar and SkewwatchFleetHotShard; the
    false alarms of the benign and steady groups; the count agreement per window."""
    out = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(labkit.REPO, "target")),
                       "labs", "fleet-sweep")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    rows = []
    for n in SWEEP_SIDECARS:
        name = f"fleet-sweep-{n}"
        cmd = [sys.executable, "-u", os.path.abspath(__file__), "--short", "--tsdb", "prometheus",
               "--sidecars", str(n), "--name", name,
               "--observe", str(args.observe or SWEEP_OBSERVE)]
        if args.rate:
            cmd += ["--rate", str(args.rate)]
        started = time.monotonic()
        with open(os.path.join(out, f"{n}.log"), "w") as log:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        path = os.path.join(os.path.dirname(out), name, "timeline.json")
        try:
            with open(path) as f:
                row = sweep_row(json.load(f))
        except (OSError, ValueError, KeyError) as e:
            row = {"sidecars": n, "error": f"{type(e).__name__}: {e}"}
        row["lab exit"] = code
        row["minutes"] = round((time.monotonic() - started) / 60, 1)
        rows.append(row)
        print(f"fleet sweep: {n} sidecars done in {row['minutes']} min (exit {code}; {out}/{n}.log)",
              flush=True)
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    header = ["sidecars", "per shard per sidecar", "fleet HotShard", "whole traffic", "first sidecar",
              "sidecars fired", "SkewwatchFleetHotShard", "fleet ShardFailing", "benign: fleet",
              "benign: sidecars fired", "steady: fleet", "count agreement"]
    labkit.print_table(f"Fleet sweep (seconds after the onset, {args.observe or SWEEP_OBSERVE} s watched; "
                       "a 2x step at 400 requests/s per group over 32 shards)", header,
                       [[r.get(h, r.get("error", "")) for h in header] for r in rows])
    print(f"\nfleet sweep: artifacts in {out} and {os.path.dirname(out)}/fleet-sweep-N")
    return 0 if all("error" not in r for r in rows) else 1


def sweep_row(t):
    """One row of the sweep's table from a run's timeline.json."""
    n = t["sidecars"]

    def first(alerts, name, group, shard=None):
        hits = [a[3] for a in alerts if a[1] == name and a[2].get("group") == group
                and (shard is None or a[2].get("shard") == shard)]
        return min(hits) if hits else None

    def cell(v):
        return "never" if v is None else f"{v:+.0f} s"

    fleet = t["fleet_alerts"].get("prometheus", [])
    side = t["sidecar_alerts"]
    side_hot = [min(a["at"] for a in al if a["alert"] == "HotShard" and a["labels"].get("shard") == HOT)
                for al in side.get("incident", {}).values()
                if any(a["alert"] == "HotShard" and a["labels"].get("shard") == HOT for a in al)]
    rule = first(t["promql_alerts"], "SkewwatchFleetHotShard", "incident")
    hot_share = next((v for k, v in t["promql_values"].items() if k.startswith("hot share")), None)
    agree = t["count_agreement"].get("prometheus", {})
    spans = [a["span_error"] for a in agree.values() if a.get("span_error") is not None]
    medians = [a.get("exact_window_error_median", a["window_error_median"]) for a in agree.values()
               if a.get("exact_window_error_median", a["window_error_median"]) is not None]
    maxes = [a.get("exact_window_error_max", a["window_error_max"]) for a in agree.values()
             if a.get("exact_window_error_max", a["window_error_max"]) is not None]
    false_benign = [a for a in fleet if a[2].get("group") == "benign"]
    false_steady = [a for a in fleet if a[2].get("group") == "steady"]
    return {
        "sidecars": n,
        "per shard per sidecar": f"{t['params']['rate'] / n / drv.SHARDS:.2f}/s",
        "fleet HotShard": cell(first(fleet, "HotShard", "incident", HOT)),
        "whole traffic": cell(first(t["whole_alerts"], "HotShard", "incident", HOT)),
        "first sidecar": cell(min(side_hot) if side_hot else None),
        "sidecars fired": f"{len(side_hot)}/{n}",
        "SkewwatchFleetHotShard": cell(rule) if rule is not None else
        f"never (share {hot_share} < 2/32)" if hot_share is not None else "never",
        "fleet ShardFailing": cell(first(fleet, "ShardFailing", "incident", FAIL)),
        "benign: fleet": "silent" if not false_benign else f"{len(false_benign)} alerts",
        "benign: sidecars fired": f"{len(side.get('benign', {}))}/{n}",
        "steady: fleet": "silent" if not false_steady else f"{len(false_steady)} alerts",
        "count agreement": (f"span {min(spans):+.2%}..{max(spans):+.2%}; per window median "
                            f"{max(medians):.1%}, max {max(maxes):.1%}") if spans and medians else "n/a",
    }


if __name__ == "__main__":
    sys.exit(main())
