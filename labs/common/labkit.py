"""What both labs share: real components started on free loopback ports in a temporary
directory and killed at exit (even on failure or Ctrl-C), the timeline, the alert watcher, the
Alertmanager read-back, the agreement judge and the live-page screenshot.

Every process is started in its own session (process group) and killed by its group id, so a
component's children (PostgreSQL's backends) go with it. Nothing here reads a wall clock for a
verdict: times are monotonic seconds since the lab started, printed relative to the onset.
"""
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def in_ci():
    return os.environ.get("CI", "") not in ("", "false", "0")


def need(binary, *alternatives):
    """The path of a required binary; a clear error (exit 2) when it is missing."""
    for name in (binary, *alternatives):
        found = shutil.which(name) or (name if os.path.isabs(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    print(f"labs: `{binary}` is not installed (.ci/run installs it)", file=sys.stderr)
    sys.exit(2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Processes


class Procs:
    """Every process the lab started, killed by process group at exit."""

    def __init__(self):
        self.procs = []
        self.lock = threading.Lock()
        atexit.register(self.kill_all)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame):
        print(f"labs: signal {signum}: stopping every component", file=sys.stderr, flush=True)
        self.kill_all()
        os._exit(128 + signum)

    def start(self, name, argv, log_dir, env=None, user=None, cwd=None, stdin=None):
        log = open(os.path.join(log_dir, f"{name}.log"), "ab")
        if user is not None:
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                             start_new_session=True, stdin=stdin or subprocess.DEVNULL)
        with self.lock:
            self.procs.append((name, p))
        return p

    def kill_all(self):
        with self.lock:
            procs, self.procs = self.procs, []
        for _, p in reversed(procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for _, p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def check_alive(self):
        """Names of components that died."""
        with self.lock:
            return [n for n, p in self.procs if p.poll() is not None]

    def stop(self, proc, sig=signal.SIGTERM, timeout=5):
        """Stops one process (its group: `sig`, then SIGKILL after `timeout` s) and forgets it,
        so that check_alive does not report it (a lab that restarts or removes a component)."""
        with self.lock:
            self.procs = [(n, p) for n, p in self.procs if p is not proc]
        if proc.poll() is not None:
            return  # exited and reaped: its group id may belong to another process by now
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=timeout)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def http(url, method="GET", body=None, headers=None, timeout=5):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url, timeout=5):
    code, body = http(url, timeout=timeout)
    if code != 200:
        raise RuntimeError(f"GET {url}: {code} {body[:200]!r}")
    return json.loads(body)


def wait_until(what, fn, timeout=60, every=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # not up yet
            last = e
        time.sleep(every)
    raise RuntimeError(f"{what} not ready within {timeout} s (last: {last!r})")


def wait_http(url, timeout=60):
    def up():
        code, body = http(url, timeout=5)
        if code != 200:
            raise RuntimeError(f"HTTP {code}: {body[:300]!r}")
        return True
    return wait_until(url, up, timeout)


# ---------------------------------------------------------------------------------------------
# The lab: a temp dir, the processes, the timeline


class Lab:
    def __init__(self, name, short):
        self.name = name
        self.short = short
        self.procs = Procs()
        self.tmp = tempfile.mkdtemp(prefix=f"skewwatch-lab-{name}-")
        os.chmod(self.tmp, 0o755)
        self.out = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")),
                                "labs", name)
        shutil.rmtree(self.out, ignore_errors=True)
        os.makedirs(self.out)
        self.t0 = time.monotonic()
        self.onset = None
        self.events = []
        self.lock = threading.Lock()
        atexit.register(self._cleanup)

    def _cleanup(self):
        self.procs.kill_all()
        if os.environ.get("LABS_KEEP_TMP"):
            print(f"labs: temp dir kept: {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def now(self):
        return time.monotonic() - self.t0

    def rel(self, t):
        """Seconds relative to the onset (negative before it)."""
        return t - self.onset if self.onset is not None else t

    def event(self, source, what, **fields):
        t = self.now()
        with self.lock:
            self.events.append({"t": round(t, 2), "source": source, "what": what, **fields})
        mark = f"T{self.rel(t):+7.1f}s" if self.onset is not None else f"  {t:6.1f}s"
        print(f"{mark}  {source:<12} {what}", flush=True)
        return t

    def mark_onset(self, what):
        self.onset = self.now()
        self.event("fault", f"ONSET: {what}")

    def start(self, name, argv, **kw):
        return self.procs.start(name, argv, self.tmp, **kw)

    def dump_logs(self, tail=30):
        for f in sorted(os.listdir(self.tmp)):
            if f.endswith(".log"):
                with open(os.path.join(self.tmp, f), "rb") as fh:
                    lines = fh.read().decode(errors="replace").splitlines()[-tail:]
                print(f"---- {f} (last {len(lines)} lines)")
                for line in lines:
                    print(f"  {line}")

    def write_json(self, name, obj):
        with open(os.path.join(self.out, name), "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False)
            f.write("\n")


# ---------------------------------------------------------------------------------------------
# Real components


def start_alertmanager(lab):
    binary = need("prometheus-alertmanager", "alertmanager")
    port = free_port()
    cfg = os.path.join(lab.tmp, "alertmanager.yml")
    with open(cfg, "w") as f:
        f.write('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    lab.start("alertmanager", [binary, f"--config.file={cfg}",
                               f"--storage.path={lab.tmp}/am-data", "--cluster.listen-address=",
                               f"--web.listen-address=127.0.0.1:{port}"])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/-/ready")
    return url


def start_prometheus(lab, jobs, rules, scrape_secs, eval_secs):
    """A real Prometheus scraping `jobs` ({job: url}) and evaluating `rules` (YAML text)."""
    binary = need("prometheus")
    port = free_port()
    rules_file = os.path.join(lab.tmp, "diy.rules.yml")
    with open(rules_file, "w") as f:
        f.write(rules)
    promtool = need("promtool")
    check = subprocess.run([promtool, "check", "rules", rules_file], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"promtool check rules: {check.stdout}{check.stderr}")
    scrape = []
    for job, url in jobs.items():
        u = urllib.parse.urlsplit(url)
        scrape.append(f"  - job_name: {job}\n    metrics_path: {u.path}\n"
                      f"    static_configs: [{{targets: ['{u.netloc}']}}]\n")
    cfg = os.path.join(lab.tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"global:\n  scrape_interval: {scrape_secs}s\n  evaluation_interval: {eval_secs}s\n"
                f"rule_files: ['{rules_file}']\nscrape_configs:\n" + "".join(scrape))
    lab.start("prometheus", [binary, f"--config.file={cfg}", f"--storage.tsdb.path={lab.tmp}/prom-data",
                             f"--web.listen-address=127.0.0.1:{port}"])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/-/ready")
    return url


def skewwatch_bin():
    b = os.environ.get("SKEWWATCH_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "skewwatch")
    if not os.access(b, os.X_OK):
        print(f"labs: no skewwatch binary at {b} (cargo build --release -p skewwatch, or set "
              "SKEWWATCH_BIN)", file=sys.stderr)
        sys.exit(2)
    return b


def start_skewwatch(lab, config_text, port=None, name="skewwatch"):
    """Starts skewwatch on `config_text` (its `@HTTP@` replaced by 127.0.0.1:`port`, a free port
    unless given: a client can be pointed at the agent before it starts) and waits until ready.
    `name` names its configuration file and log (a lab with two agents names them apart)."""
    binary = skewwatch_bin()
    port = port or free_port()
    cfg = os.path.join(lab.tmp, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(config_text.replace("@HTTP@", f"127.0.0.1:{port}"))
    shutil.copy(cfg, os.path.join(lab.out, f"{name}.yaml"))
    check = subprocess.run([binary, "check-config", cfg], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"skewwatch check-config refused the lab's configuration:\n"
                           f"{check.stdout}{check.stderr}")
    lab.start(name, [binary, "run", "--config", cfg])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/readyz")
    return url


def otlp_shard_name(attributes):
    """The shard name this skewwatch gives, on its default configuration, to one OTLP client
    span with `attributes` (a functional probe on a throwaway agent; None when it skips the
    span). Used to learn whether the binary reads an instrumentation's attributes on defaults."""
    binary = skewwatch_bin()
    d = tempfile.mkdtemp(prefix="skewwatch-probe-")
    port = free_port()
    cfg = os.path.join(d, "probe.yaml")
    with open(cfg, "w") as f:
        f.write(f"listen:\n  http: \"127.0.0.1:{port}\"\n  statsd: disabled\nwindow:\n  window_secs: 0.5\n")
    p = subprocess.Popen([binary, "run", "--config", cfg], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/readyz", timeout=20)
        now = time.time_ns()
        attrs = [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
                 for k, v in attributes.items()]
        span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "probe", "kind": 3,
                "startTimeUnixNano": str(now - 1_000_000), "endTimeUnixNano": str(now),
                "attributes": attrs}
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
        code, _ = http(url + "/v1/traces", "POST", body, {"Content-Type": "application/json"})
        if code != 200:
            return None
        def shard():
            for g in get_json(url + "/api/v1/status")["window"]["groups"]:
                for s in g["shards"]:
                    return s["shard"]
            return None
        try:
            return wait_until("probe window", shard, timeout=5)
        except RuntimeError:
            return None
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


def supports(config_text):
    """Whether this skewwatch accepts a configuration (a feature probe, used only to say what
    is missing)."""
    d = tempfile.mkdtemp(prefix="skewwatch-probe-")
    try:
        p = os.path.join(d, "probe.yaml")
        with open(p, "w") as f:
            f.write(config_text)
        r = subprocess.run([skewwatch_bin(), "check-config", p], capture_output=True, text=True)
        return r.returncode == 0, (r.stdout + r.stderr).strip()
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Prometheus text


def parse_prom(text):
    """[(name, {label: value}, value)] of a Prometheus text page (enough for exporters' pages)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            labels_s, value_s = rest.rsplit("}", 1)
            labels = {}
            i = 0
            while i < len(labels_s):
                eq = labels_s.index("=", i)
                k = labels_s[i:eq].strip().lstrip(",").strip()
                j = eq + 2
                v = []
                while labels_s[j] != '"':
                    if labels_s[j] == "\\":
                        j += 1
                    v.append(labels_s[j])
                    j += 1
                labels[k] = "".join(v)
                i = j + 1
                while i < len(labels_s) and labels_s[i] in ", ":
                    i += 1
        else:
            name, value_s = line.split(None, 1)
            labels = {}
        try:
            value = float(value_s.split()[0])
        except ValueError:
            continue
        out.append((name.strip(), labels, value))
    return out


# ---------------------------------------------------------------------------------------------
# Alerts


class AlertWatcher(threading.Thread):
    """Polls skewwatch's and Prometheus' alert APIs; records when each alert first fired (and
    any component that died)."""

    def __init__(self, lab, sources, every=0.5):
        super().__init__(daemon=True)
        self.lab = lab
        self.sources = sources  # {source name: alerts API url}
        self.every = every
        self.first = {}  # (source, alertname, labels json) -> first firing time
        self.stop = threading.Event()

    @staticmethod
    def ident(labels):
        skip = {"alertname", "severity", "alertstate"}
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in skip)

    def run(self):
        while not self.stop.is_set():
            for src, url in self.sources.items():
                try:
                    alerts = get_json(url, timeout=2)["data"]["alerts"]
                except Exception:
                    continue
                for a in alerts:
                    if a.get("state") != "firing":
                        continue
                    name = a["labels"].get("alertname", "?")
                    key = (src, name, self.ident(a["labels"]))
                    if key not in self.first:
                        ann = a.get("annotations", {})
                        extra = "".join(f" {k}={ann[k]}" for k in ("share",) if k in ann)
                        t = self.lab.event(src, f"FIRING {name} {{{key[2]}}}{extra}", alertname=name,
                                           labels=a["labels"], annotations=a.get("annotations", {}))
                        self.first[key] = t
            self.stop.wait(self.every)

    def fired(self, src, name, **labels):
        """First firing time of `name` from `src` whose labels include `labels`, or None."""
        best = None
        for (s, n, ident), t in self.first.items():
            if s != src or n != name:
                continue
            have = dict(kv.split("=", 1) for kv in ident.split(",") if kv)
            if all(have.get(k) == v for k, v in labels.items()):
                best = t if best is None else min(best, t)
        return best


def interpolate(samples, t):
    """Counters sampled as `[(unix time, value)]`, interpolated linearly at unix time `t`;
    a value is a number or a list or dict of values. None outside the samples."""
    def lerp(a, b, f):
        if isinstance(a, dict):
            return {k: lerp(a[k], b[k], f) for k in a}
        if isinstance(a, (list, tuple)):
            return [lerp(x, y, f) for x, y in zip(a, b)]
        return a + f * (b - a)
    for (ta, a), (tb, b) in zip(samples, samples[1:]):
        if ta <= t <= tb:
            return lerp(a, b, 0 if tb == ta else (t - ta) / (tb - ta))
    return None


def parse_ts(v):
    """A time from skewwatch's API: unix seconds, or an RFC 3339 string."""
    if isinstance(v, (int, float)):
        return float(v)
    from datetime import datetime
    return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()


def history_windows(sw, group, sampler):
    """skewwatch's closed windows of `group` (`GET /api/v1/history`), each with the real
    component's counters that `sampler` interpolates at its start and end: yields (window,
    start, end, counters at start, counters at end, cells by shard name). Windows outside the
    samples, or without cells, are left out."""
    hist = get_json(f"{sw}/api/v1/history?group={group}&windows=1000&shards=64")
    for w in hist.get("windows", []):
        start, end = parse_ts(w["start"]), parse_ts(w["end"])
        a, b = sampler.at(start), sampler.at(end)
        if a is None or b is None or not w.get("cells"):
            continue
        yield w, start, end, a, b, dict(zip(hist["shards"], w["cells"]))


# The detectors with a burst tolerance (`tolerated_burst_secs`).
BURST_TOLERANT = ("hot_shard", "hot_key", "error_surge", "shard_failing", "latency_skew",
                  "deadline_pile_up")


def warmup_detectors(windows, burst_secs=None):
    """The `detectors:` section of the short runs: every detector's warm-up shortened to
    `windows`, and the burst tolerance of those that have one to `burst_secs`. The short runs
    compress time for both sides alike: the DIY rules' `for: 1m` becomes 20 s, so skewwatch's
    20 s of tolerated burst becomes 7 s. Empty for None (the defaults)."""
    if windows is None:
        return ""
    out = "detectors:\n"
    for d in ("hot_shard", "hot_key", "error_surge", "fast_failure_sink", "shard_failing",
              "latency_skew", "cache_hit_collapse", "deadline_pile_up"):
        out += f"  {d}:\n    warmup_windows: {windows}\n"
        if burst_secs is not None and d in BURST_TOLERANT:
            out += f"    tolerated_burst_secs: {burst_secs}\n"
    return out


def alertmanager_alerts(am_url):
    return get_json(am_url + "/api/v2/alerts")


# ---------------------------------------------------------------------------------------------
# Screenshot


def screenshot(url, path, group=None, wait_text=None):
    """A 1280x900 screenshot of skewwatch's live page in headless Chromium (Selenium), with
    `group` picked in the page's selector, once the page shows `wait_text`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import Select

    opts = webdriver.ChromeOptions()
    opts.binary_location = need("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--hide-scrollbars", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=need("chromedriver")), options=opts)
    try:
        driver.get(url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if group is not None:
                    sel = Select(driver.find_element("id", "group"))
                    if sel.first_selected_option.get_attribute("value") != group:
                        sel.select_by_value(group)
                        time.sleep(1)
                body = driver.find_element("tag name", "body").text
                if wait_text is None or wait_text in body:
                    break
            except Exception:  # the page may be mid-render
                pass
            time.sleep(0.5)
        time.sleep(1.5)  # one more poll so the heatmap has drawn
        driver.save_screenshot(path)
    finally:
        driver.quit()


# ---------------------------------------------------------------------------------------------
# Verdict


def false_alarms(watcher, lab, source="skewwatch"):
    """Alerts of `source` that fired before the onset."""
    return sorted(f"{n} {{{i}}}" for (s, n, i), t in watcher.first.items()
                  if s == source and lab.onset is not None and t < lab.onset)


def report_false_alarms(watcher, lab):
    """skewwatch's alerts that fired before the onset, printed when there are any."""
    early = false_alarms(watcher, lab)
    if early:
        print(f"\nFALSE ALARMS before the onset: {early}")
    return early


def check_delivered(am_url, expected, lab):
    """Reads back what Alertmanager holds, writes it to `alerts.alertmanager.json`, logs the
    alert names, and tells whether every `expected` alert (name and labels) is among them."""
    delivered = alertmanager_alerts(am_url)
    lab.write_json("alerts.alertmanager.json", delivered)
    names = sorted({a["labels"]["alertname"] for a in delivered})
    lab.event("alertmanager", f"holds {len(delivered)} alerts: {', '.join(names)}")
    return all(any(a["labels"].get("alertname") == n and
                   all(a["labels"].get(k) == v for k, v in l.items()) for a in delivered)
               for _, _, n, l in expected)


def versus_diy(watcher, lab, pairs, title):
    """Every expected alert beside its do-it-yourself counterpart. `pairs`: [(label, skewwatch
    alertname, {labels}, DIY alertname or None, {DIY labels})]. Prints the table and returns
    (ok, rows): ok when, in every row, skewwatch fired and no later than its counterpart (a
    counterpart that never fired, or that does not exist because the DIY rules cannot see what
    the alert sees, counts as later)."""
    rows, ok = [], True
    for label, name, labels, diy_name, diy_labels in pairs:
        t = watcher.fired("skewwatch", name, **labels)
        d = watcher.fired("prometheus", diy_name, **diy_labels) if diy_name else None
        first = ("neither" if t is None and d is None else "DIY" if t is None
                 else "skewwatch" if d is None or t <= d else "DIY")
        ok &= first == "skewwatch"
        rows.append({"alert": label, "skewwatch": None if t is None else round(lab.rel(t), 1),
                     "diy_alert": diy_name or "(none: the DIY rules cannot see it)",
                     "diy": None if d is None else round(lab.rel(d), 1), "first": first})
    print_table(title, ["alert", "skewwatch", "DIY counterpart", "DIY", "first"],
                [(r["alert"], r["skewwatch"] if r["skewwatch"] is not None else "never",
                  r["diy_alert"], r["diy"] if r["diy"] is not None else "never", r["first"])
                 for r in rows])
    return ok, rows


def judge_order(watcher, expected, lab):
    """`expected`: [(label, source, alertname, {labels})] in the order they must first fire
    (ties within one poll allowed). Returns (ok, rows)."""
    rows = []
    ok = True
    prev = None
    for label, src, name, labels in expected:
        t = watcher.fired(src, name, **labels)
        row = {"alert": label, "source": src, "fired_at": None if t is None else round(lab.rel(t), 1)}
        if t is None:
            row["verdict"] = "MISSING"
            ok = False
        elif lab.onset is not None and t < lab.onset:
            row["verdict"] = "BEFORE ONSET"
            ok = False
        elif prev is not None and t + 2 * watcher.every < prev:
            row["verdict"] = "OUT OF ORDER"
            ok = False
        else:
            row["verdict"] = "ok"
        if t is not None:
            prev = t if prev is None else max(prev, t)
        rows.append(row)
    return ok, rows


def print_table(title, header, rows):
    print(f"\n{title}")
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(header)]
    print("  " + "  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


import urllib.parse  # noqa: E402  (used by start_prometheus)
