#!/usr/bin/env python3
"""ml-routing: HAProxy `balance leastconn` in front of four model-serving backends; one starts
answering 404 fast and, because it is the fastest server, draws the traffic.

    labs/run ml-routing [--short] [--cold] [--protect] [--fault-status CODE]

Real parts: Debian's haproxy (its built-in Prometheus exporter), four Python HTTP backends,
a load generator instrumented by OpenTelemetry's requests instrumentation, skewwatch reading
HAProxy's exporter (`scrape:`) and the client spans (OTLP), a real Alertmanager that receives
skewwatch's alerts, and a real Prometheus with the rules an SRE would write over HAProxy's
exporter (the do-it-yourself peer). `--protect` turns on HAProxy's own protection
(`check observe layer7 error-limit 10 on-error mark-down`) and reports what it caught.
Exit 0 only when FastFailureSink and ShardFailing fired (from onset, in order within each input),
each before its DIY counterpart, and skewwatch's per-window shares and error ratios agree with
HAProxy's own counters.

`--cold` starts skewwatch and Prometheus (with its DIY rules) together while `s3` already fails
(as a new pod, a rollout, or an engineer who deploys the agent to look at a live incident
would): times run from their start, and ShardFailing must fire on both inputs within 60 s and
before the DIY 4xx rule. FastFailureSink is not expected then: what it sees is a shard whose
share *rose*, and an agent started after the rise has no share to compare with.
"""
import argparse
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "common"))
import labkit  # noqa: E402
from labkit import Lab, free_port, get_json, http, wait_http  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = ["s1", "s2", "s3", "s4"]
BAD = "s3"
PROXY = "be_models"
OTLP_GROUP = "ml-routing-clients"
SCRAPE_GROUP = "ml-routing-haproxy"


def params(short):
    if short:
        # 5 s windows; baselines warm in 8 windows (40 s). The DIY rules are scaled alike.
        # Time runs three times faster for both sides: the DIY rules' `for: 1m` becomes 20 s
        # and skewwatch's 20 s of tolerated burst 7 s.
        return dict(window=5, warmup=8, burst=7, pre_onset=55, max_after=100, rate_range="20s",
                    diy_for="20s", scrape=1, prom_scrape=1, prom_eval=1, clients=16, think_ms=60,
                    cold_lead=20)
    # Defaults of skewwatch (10 s windows, 30 warm-up windows) and the rules as written.
    return dict(window=10, warmup=None, burst=None, pre_onset=330, max_after=240, rate_range="1m",
                diy_for="1m", scrape=2, prom_scrape=5, prom_eval=5, clients=16, think_ms=60,
                cold_lead=60)


def haproxy_cfg(tmp, front, stats, ports, protect):
    check = " check inter 1s observe layer7 error-limit 10 on-error mark-down" if protect else ""
    servers = "".join(f"  server {n} 127.0.0.1:{p}{check}\n" for n, p in zip(SERVERS, ports))
    return f"""global
  maxconn 1024
  stats socket {tmp}/haproxy.sock mode 600 level admin
defaults
  mode http
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend fe_models
  bind 127.0.0.1:{front}
  default_backend {PROXY}
frontend fe_stats
  bind 127.0.0.1:{stats}
  http-request use-service prometheus-exporter if {{ path /metrics }}
backend {PROXY}
  balance leastconn
  option httpchk GET /health
  http-response set-header X-Served-By %s
{servers}"""


DIY_RULES = """groups:
  - name: diy-haproxy
    rules:
      - alert: BackendServer4xxRatioHigh
        expr: |
          sum by (proxy, server) (rate(haproxy_server_http_responses_total{{code="4xx"}}[{r}]))
            / sum by (proxy, server) (rate(haproxy_server_http_responses_total[{r}])) > 0.2
        for: {f}
        labels: {{severity: warning}}
      - alert: BackendServerTrafficShareHigh
        expr: |
          sum by (proxy, server) (rate(haproxy_server_http_responses_total[{r}]))
            / on (proxy) group_left
          sum by (proxy) (rate(haproxy_server_http_responses_total[{r}])) > 0.4
        for: {f}
        labels: {{severity: warning}}
      - alert: BackendServerDown
        expr: haproxy_server_status{{state="DOWN"}} == 1
        for: 0s
        labels: {{severity: critical}}
"""


def scrape_job(stats_port, p, translate):
    base = (f"  - name: haproxy\n    url: \"http://127.0.0.1:{stats_port}/metrics\"\n"
            f"    interval_secs: {p['scrape']}\n    timeout_secs: 1\n"
            f"    metrics: [haproxy_server_http_responses_total]\n")
    if translate:
        return base + (f"    group: {SCRAPE_GROUP}\n    shard: \"{{proxy}}/{{server}}\"\n"
                       "    outcome_label: code\n    outcomes:\n"
                       "      - match: \"4xx\"\n        outcome: not_found\n")
    return base + f"    group: {SCRAPE_GROUP}\n    shard_label: server\n"


def skewwatch_cfg(am, stats_port, p, translate):
    return (f"listen:\n  http: \"@HTTP@\"\n  statsd: disabled\n"
            f"window:\n  window_secs: {p['window']}\n"
            f"ui:\n  history_windows: 200\n"
            f"alerting:\n  resend_interval_secs: 5\n  alertmanagers:\n    - url: \"{am}\"\n"
            f"scrape:\n{scrape_job(stats_port, p, translate)}"
            + labkit.warmup_detectors(p["warmup"], p["burst"]))


class CounterSampler(threading.Thread):
    """Samples HAProxy's own per-server counters (its exporter page) with wall-clock times, for
    the agreement check, and notes when HAProxy marks a server down."""

    def __init__(self, lab, url, every=0.25):
        super().__init__(daemon=True)
        self.lab, self.url, self.every = lab, url, every
        self.samples = []  # (unix time, {server: (responses, errors)})
        self.down = {}  # server -> first time marked down
        self.downs = {}  # server -> times marked down
        self.state = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                _, body = http(self.url, timeout=2)
                t = time.time()
                per = {s: [0.0, 0.0] for s in SERVERS}
                for name, labels, v in labkit.parse_prom(body.decode()):
                    if labels.get("proxy") != PROXY or labels.get("server") not in per:
                        continue
                    if name == "haproxy_server_http_responses_total":
                        per[labels["server"]][0] += v
                        if labels.get("code") in ("4xx", "5xx", "other"):
                            per[labels["server"]][1] += v
                    elif name == "haproxy_server_status" and v == 1:
                        s, state = labels["server"], labels.get("state")
                        if self.state.get(s, "UP") != state:
                            self.state[s] = state
                            if state in ("DOWN", "MAINT"):
                                self.downs[s] = self.downs.get(s, 0) + 1
                                t = self.lab.event("haproxy", f"HAProxy marked {s} {state} "
                                                   f"(time {self.downs[s]})")
                                self.down.setdefault(s, t)
                            elif state == "UP" and s in self.down:
                                self.lab.event("haproxy", f"HAProxy marked {s} UP again")
                self.samples.append((t, per))
            except Exception:
                pass
            self.stop.wait(self.every)

    def at(self, t):
        """Counters interpolated linearly at unix time t (None outside the samples)."""
        return labkit.interpolate(self.samples, t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--protect", action="store_true",
                    help="HAProxy's own protection: observe layer7, on-error mark-down")
    ap.add_argument("--fault-status", type=int, default=404)
    ap.add_argument("--cold", action="store_true",
                    help="start skewwatch and Prometheus while the backend already fails")
    args = ap.parse_args()
    p = params(args.short)
    lab = Lab("ml-routing" + ("-protect" if args.protect else "") + ("-cold" if args.cold else ""),
              args.short)
    wall0 = time.time() - lab.now()
    ok = False
    try:
        haproxy = labkit.need("haproxy")
        am = labkit.start_alertmanager(lab)
        lab.event("setup", f"Alertmanager {am}")
        ports = [free_port() for _ in SERVERS]
        backends = {}
        py = sys.executable
        for name, port in zip(SERVERS, ports):
            backends[name] = lab.start(f"backend-{name}", [py, f"{HERE}/backend.py", str(port), name,
                                                           "50", str(args.fault_status)])
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/health")
        front, stats = free_port(), free_port()
        cfg = os.path.join(lab.tmp, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(haproxy_cfg(lab.tmp, front, stats, ports, args.protect))
        lab.start("haproxy", [haproxy, "-db", "-f", cfg])
        stats_url = f"http://127.0.0.1:{stats}/metrics"
        wait_http(stats_url)
        lab.event("setup", f"HAProxy leastconn :{front}, exporter :{stats}, servers {SERVERS}"
                  + (" with observe layer7 + on-error mark-down" if args.protect else ""))

        translate, why = labkit.supports(skewwatch_cfg("http://127.0.0.1:9", stats, p, True)
                                         .replace("@HTTP@", "127.0.0.1:0"))
        if not translate:
            lab.event("setup", "this skewwatch has no scrape templates/outcome tables (branch "
                      "`translate`): the scrape group counts HAProxy's responses without outcomes")
        sw_port = free_port()
        sw = f"http://127.0.0.1:{sw_port}"

        def start_observers():
            """skewwatch and Prometheus with its DIY rules, started together, and the watcher."""
            labkit.start_skewwatch(lab, skewwatch_cfg(am, stats, p, translate), port=sw_port)
            lab.event("setup", f"skewwatch {sw} (window {p['window']} s)")
            prom = labkit.start_prometheus(lab, {"haproxy": stats_url},
                                           DIY_RULES.format(r=p["rate_range"], f=p["diy_for"]),
                                           p["prom_scrape"], p["prom_eval"])
            lab.event("setup", f"Prometheus {prom} (DIY rules: 4xx ratio > 20% for {p['diy_for']}, "
                      f"share > 40% for {p['diy_for']})")
            watcher = labkit.AlertWatcher(lab, {"skewwatch": f"{sw}/api/v1/alerts",
                                                "prometheus": f"{prom}/api/v1/alerts"})
            watcher.start()
            return watcher

        def wait(secs):
            end = time.monotonic() + secs
            while time.monotonic() < end:
                dead = lab.procs.check_alive()
                if dead:
                    raise RuntimeError(f"component died: {dead}")
                time.sleep(1)

        watcher = None if args.cold else start_observers()
        sampler = CounterSampler(lab, stats_url)
        sampler.start()
        def start_clients(otlp, name="loadgen"):
            return lab.start(name, [py, f"{HERE}/loadgen.py", f"http://127.0.0.1:{front}/predict",
                                    str(p["clients"]), str(p["think_ms"]), otlp, OTLP_GROUP])

        # Cold, the clients that load HAProxy while the fault begins are replaced, when the
        # agent starts, by clients that export to it: a new pod and its sidecar starting
        # together. (Clients pointed at an agent that is not there yet would show the
        # exporter's retry back-off, not the agent.)
        gen = before_gen = start_clients("http://127.0.0.1:9/v1/traces", "loadgen-before") \
            if args.cold else start_clients(f"{sw}/v1/traces")
        lab.event("load", f"{p['clients']} clients, think {p['think_ms']} ms, backends 50 ms")

        if args.cold:
            wait(5)
            os.kill(backends[BAD].pid, signal.SIGUSR1)
            lab.event("fault", f"{BAD} answers {args.fault_status} at once; skewwatch and "
                      f"Prometheus start in {p['cold_lead']} s")
            wait(p["cold_lead"])
            before = sampler.samples[-1][1]
            watcher = start_observers()
            gen = start_clients(f"{sw}/v1/traces")
            lab.procs.stop(before_gen)
            lab.mark_onset(f"skewwatch, Prometheus and clients exporting to skewwatch started; "
                           f"{BAD} has answered {args.fault_status} for {p['cold_lead']} s")
        else:
            wait(p["pre_onset"])
            before = sampler.samples[-1][1]
            os.kill(backends[BAD].pid, signal.SIGUSR1)
            lab.mark_onset(f"{BAD} answers {args.fault_status} at once")
        onset_wall = time.time()

        fq = f"{PROXY}/{BAD}" if translate else BAD
        # FastFailureSink first: it needs the sink's share to have risen, but ShardFailing now
        # waits out a 20 s failure (four and a half 5 s windows of the short run) before it
        # reports, and the share rises within two or three windows.
        expected = [
            ("FastFailureSink (clients)", "skewwatch", "FastFailureSink", {"group": OTLP_GROUP, "shard": BAD}),
            ("ShardFailing (clients)", "skewwatch", "ShardFailing", {"group": OTLP_GROUP, "shard": BAD}),
        ]
        if translate:
            expected.append(("ShardFailing (HAProxy exporter)", "skewwatch", "ShardFailing",
                             {"group": SCRAPE_GROUP, "shard": fq}))
        # HAProxy's layer-7 observation counts 5xx answers (but 501 and 505) as errors and every
        # 1xx-4xx answer as valid: with --protect and such a status HAProxy ejects the server
        # itself, no traffic is attracted, and the lab checks exactly that instead.
        ejected = args.protect and 500 <= args.fault_status <= 599 and args.fault_status not in (501, 505)
        if ejected:
            expected = []
        if args.cold:
            expected = expected[1:]
        deadline = time.monotonic() + p["max_after"]
        while time.monotonic() < deadline:
            if ejected:
                if BAD in sampler.down:
                    time.sleep(6 * p["window"])  # long enough for FastFailureSink to show, if it would
                    break
            elif all(watcher.fired(s, n, **l) is not None for _, s, n, l in expected) and \
                    watcher.fired("prometheus", "BackendServer4xxRatioHigh") is not None:
                break
            if lab.procs.check_alive():
                raise RuntimeError(f"component died: {lab.procs.check_alive()}")
            time.sleep(0.5)
        time.sleep(2 * p["window"])  # two more windows for the agreement and the page
        shot = os.path.join(lab.out, "live-page.png")
        shot_ok = True
        try:
            labkit.screenshot(sw + "/", shot, group=OTLP_GROUP,
                              wait_text=None if ejected else expected[0][2])
            lab.event("setup", f"screenshot {shot}")
        except Exception as e:
            lab.event("setup", f"screenshot failed: {e}")
            shot_ok = False
        after = sampler.samples[-1][1]
        watcher.stop.set()
        sampler.stop.set()
        gen.send_signal(signal.SIGTERM)

        # What HAProxy counted itself: the faulty server's share before and after the onset.
        def shares(a, b):
            d = {s: b[s][0] - a[s][0] for s in SERVERS}
            tot = sum(d.values()) or 1
            return {s: d[s] / tot for s in SERVERS}
        first = sampler.samples[0][1]
        share_before = shares(first, before)[BAD]
        share_after = shares(before, after)[BAD]
        lab.event("haproxy", f"HAProxy's counters: {BAD} took {share_before:.1%} of requests before the "
                  f"onset, {share_after:.1%} after (fair share 25%)")

        # Order is judged within each input: the client spans' ShardFailing, then their
        # FastFailureSink; the HAProxy exporter's ShardFailing is another input, scraped on its
        # own clock, so it has no order against the client spans' alerts.
        clients = 1 if args.cold else 2
        ok_clients, verdict = labkit.judge_order(watcher, expected[:clients], lab)
        ok_scrape, verdict_scrape = labkit.judge_order(watcher, expected[clients:], lab)
        ok_order = ok_clients and ok_scrape
        verdict += verdict_scrape
        diy = []
        for name in ("BackendServer4xxRatioHigh", "BackendServerTrafficShareHigh", "BackendServerDown"):
            t = watcher.fired("prometheus", name, server=BAD)
            diy.append({"alert": name, "source": "prometheus (DIY)",
                        "fired_at": None if t is None else round(lab.rel(t), 1)})
        labkit.print_table("Expected alerts (seconds after onset)", ["alert", "fired", "verdict"],
                           [(r["alert"], r["fired_at"], r["verdict"]) for r in verdict])
        labkit.print_table("Do-it-yourself Prometheus rules over HAProxy's exporter", ["alert", "fired"],
                           [(r["alert"], r["fired_at"] if r["fired_at"] is not None else "never") for r in diy])
        counterpart = {"FastFailureSink": "BackendServerTrafficShareHigh",
                       "ShardFailing": "BackendServer4xxRatioHigh"}
        ok_diy, versus = labkit.versus_diy(
            watcher, lab, [(label, n, l, counterpart[n], {"server": BAD}) for label, _, n, l in expected],
            "Every expected alert beside its DIY counterpart (seconds after "
            + ("the start of both" if args.cold else "onset") + ")")
        ok_cold = True
        if args.cold:
            late = [r["alert"] for r in verdict if r["fired_at"] is None or r["fired_at"] > 60]
            ok_cold = not late
            print(f"\nCold start: {'every expected alert within 60 s' if ok_cold else f'LATE (over 60 s): {late}'}")
        if args.protect:
            t = sampler.down.get(BAD)
            print(f"\nHAProxy's own protection (observe layer7, on-error mark-down): "
                  + (f"marked {BAD} down at T{lab.rel(t):+.1f}s" if t else f"never marked {BAD} down"))

        # Agreement, per window, for both inputs.
        skip = [onset_wall]
        agree = {}
        ok_agree = True
        for group, shard_of in ((OTLP_GROUP, lambda s: s),
                                (SCRAPE_GROUP, (lambda s: f"{PROXY}/{s}") if translate else (lambda s: s))):
            outcomes = group == OTLP_GROUP or translate
            rows = agreement_rows(lab, sw, sampler, group, shard_of, p["window"], skip, wall0, outcomes)
            judged = [r for r in rows if r["judged"]]
            worst_s = max((r["max_share_diff"] for r in judged), default=None)
            worst_e = max((r["max_error_ratio_diff"] for r in judged if r["max_error_ratio_diff"] is not None),
                          default=None)
            good = bool(judged) and worst_s <= 0.05 and (worst_e is None or worst_e <= 0.05)
            ok_agree &= good
            agree[group] = {"windows": rows, "judged": len(judged), "max_share_diff": worst_s,
                            "max_error_ratio_diff": worst_e, "holds": good}
            print(f"\nAgreement {group}: {len(judged)} windows judged, max |share diff| "
                  f"{worst_s}, max |error ratio diff| {worst_e} -> {'holds' if good else 'FAILS'}")

        ok_am = labkit.check_delivered(am, expected, lab)
        early = labkit.report_false_alarms(watcher, lab)
        ok = ok_order and ok_diy and ok_cold and ok_agree and ok_am and shot_ok and not early
        if ejected:
            sink = watcher.fired("skewwatch", "FastFailureSink", shard=BAD)
            down = sampler.down.get(BAD)
            print(f"\nVariant: HAProxy ejects {BAD} itself: marked down "
                  f"{'never' if down is None else f'at T{lab.rel(down):+.1f}s'}; FastFailureSink "
                  f"{'did not fire (expected)' if sink is None else 'FIRED (unexpected)'}")
            ok = ok and down is not None and down >= lab.onset and sink is None
        lab.write_json("timeline.json", {
            "lab": lab.name, "short": args.short, "onset_t": round(lab.onset, 2), "params": p,
            "cold": args.cold, "translate_features": translate, "events": lab.events,
            "expected": verdict, "diy": diy, "versus_diy": versus,
            "haproxy_share_of_faulty": {"before": share_before, "after": share_after},
            "haproxy_marked_down": {s: round(lab.rel(t), 1) for s, t in sampler.down.items()},
            "haproxy_times_marked_down": sampler.downs,
            "agreement": agree, "alertmanager_ok": ok_am, "false_alarms": early, "passed": ok})
    except Exception as e:
        lab.event("error", f"{type(e).__name__}: {e}")
        lab.dump_logs()
        ok = False
    print(f"\nml-routing: {'PASSED' if ok else 'FAILED'} (artifacts in {lab.out})")
    return 0 if ok else 1


def agreement_rows(lab, sw, sampler, group, shard_of, window, skip, wall0, outcomes):
    """Per closed window of `group` in skewwatch's history: each server's share of requests and
    (when the input carries outcomes) error ratio, skewwatch's against HAProxy's own counters
    interpolated at the window's edges. A window within one window of the onset is listed, not
    judged: both inputs reach skewwatch up to a second late (span batches, scrape interval), so
    a window in which the error ratio steps is counted partly in the next."""
    rows = []
    for w, start, end, a, b, cells in labkit.history_windows(sw, group, sampler):
        real = {s: (b[s][0] - a[s][0], b[s][1] - a[s][1]) for s in SERVERS}
        total = sum(r for r, _ in real.values())
        if total < 50:
            continue
        judged = not any(start - window <= t <= end for t in skip)
        worst_share = worst_err = 0.0
        for s in SERVERS:
            c = cells.get(shard_of(s))
            sw_share = (c[0] or 0.0) if c else 0.0
            sw_err = (c[2] or 0.0) if c else 0.0
            r, e = real[s]
            worst_share = max(worst_share, abs(sw_share - r / total))
            if outcomes and r >= 20:
                worst_err = max(worst_err, abs(sw_err - e / r))
        rows.append({"t": round(lab.rel(start - wall0), 1), "requests_skewwatch": w["requests"],
                     "requests_haproxy": round(total), "max_share_diff": round(worst_share, 4),
                     "max_error_ratio_diff": round(worst_err, 4) if outcomes else None,
                     "judged": judged})
    return rows


if __name__ == "__main__":
    sys.exit(main())
