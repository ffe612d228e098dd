"""The fleet's clients, in process: one thread that, once a second, sends every sidecar its
client's slice of the traffic as aggregated NDJSON records (`count`), and the whole traffic to
one more skewwatch (the bound: one agent that sees everything).

Three groups of 32 shards run side by side, each at `rate` requests a second over the whole
fleet:

- `incident`: from the onset shard s07 takes twice its load (share 2/33), and shard s19 fails
              30% of its requests (outcome `error`), in every client alike;
- `benign`:   from the onset each client moves half its traffic to a shard of its own and
              away from the other clients' shards, so that the sum over clients stays uniform;
- `steady`:   nothing changes (the restart and the removal are what happens to it).

Counts are Poisson per client, shard and second from a seeded generator: the truth is what was
generated and accepted (HTTP 200, `accepted` records), kept per second and group.

The sends are aligned to the wall clock (`start_at`, a window boundary, plus `TICK_OFFSET`),
as the agents' windows are: every window of every agent then holds whole seconds of traffic,
the first one included. A first window holding a fraction of a second is what made the fleet
verdict a matter of chance: HotShard learns each shard's dispersion against a baseline of the
windows seen so far, and a baseline taken from a sliver of traffic reads as a very noisy
shard for the rest of a short run (docs/labs.md, "Why the 2x verdict was missed").
"""
import json
import math
import random
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

SHARDS = 32
HOT_SHARD = 7
FAILING_SHARD = 19
FAIL_RATIO = 0.30
GROUPS = ("incident", "benign", "steady")
# Seconds after each whole second that a tick sends: clear of the windows' edges on both sides,
# with room for the posts of a tick (sent by POSTERS at once) to finish within the second.
TICK_OFFSET = 0.25
POSTERS = 8


def shard(i):
    return f"s{i:02d}"


def poisson(rng, lam):
    if lam <= 0:
        return 0
    if lam > 60:
        return max(0, int(round(rng.gauss(lam, math.sqrt(lam)))))
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def benign_weights(n_clients, move=0.5):
    """Per client, its distribution over the shards after the move: a fraction `h` on a shard
    of its own (client i owns shard i mod 32), the rest on a common distribution that takes
    exactly as much away from the owned shards as their owners put there, so that the clients'
    sum stays uniform. `h` is at most `move`, and small enough that the most-owned shard's
    owners do not put more there than its fair part (0.8 of it): with one client there is
    nothing to move."""
    owners = [0] * SHARDS
    for i in range(n_clients):
        owners[i % SHARDS] += 1
    cap = n_clients / SHARDS / max(owners)
    h = min(move, 0.8 * cap) if n_clients > 1 else 0.0
    fair = n_clients / SHARDS
    common = [(fair - h * owners[s]) / (n_clients * (1 - h)) for s in range(SHARDS)]
    out = []
    for i in range(n_clients):
        w = [(1 - h) * c for c in common]
        w[i % SHARDS] += h
        out.append(w)
    return h, out


class Driver(threading.Thread):
    def __init__(self, lab, sidecars, whole_url, rate, start_at, seed=38):
        super().__init__(daemon=True)
        self.lab = lab
        self.urls = list(sidecars)  # per client: its sidecar's base URL
        self.n = len(self.urls)
        self.whole_url = whole_url
        self.rate = rate
        self.start_at = start_at  # unix time of the first tick's second (a window boundary)
        self.rng = random.Random(seed)
        self.onset = False
        self.removed = set()  # clients gone (with their sidecar)
        self.stop = threading.Event()
        self.move, self.benign = benign_weights(self.n)
        self.lock = threading.Lock()
        # Per second sent: (unix time of the send, {group: requests accepted by sidecars},
        # {group: requests refused (sidecar down)}, {group: requests to the whole-traffic agent},
        # {client: {group: requests its sidecar accepted}}, unix time of the whole-traffic send:
        # after the sidecars', and it may fall in the next window of that agent).
        self.ticks = []
        self.late = 0.0  # worst lateness of a tick against its schedule, seconds

    def weights(self, group, client):
        if group == "benign" and self.onset:
            return self.benign[client]
        w = [1.0 / SHARDS] * SHARDS
        if group == "incident" and self.onset:
            w[HOT_SHARD] *= 2  # its load doubles; the others keep theirs
        return w

    def tick(self):
        """One second of every client's traffic: {client: [records]}, whole [records], and per
        client and group the requests."""
        per_client = self.rate / self.n
        recs, counts = {}, {}
        whole = {}
        for c in range(self.n):
            if c in self.removed:
                continue
            rs, cnt = [], {}
            for g in GROUPS:
                total = 0
                for s, w in enumerate(self.weights(g, c)):
                    k = poisson(self.rng, per_client * w)
                    if k == 0:
                        continue
                    errs = 0
                    if g == "incident" and s == FAILING_SHARD and self.onset:
                        errs = sum(1 for _ in range(k) if self.rng.random() < FAIL_RATIO)
                    lat = round(4 + 2 * self.rng.random(), 2)
                    for outcome, n in (("ok", k - errs), ("error", errs)):
                        if n:
                            rs.append({"group": g, "shard": shard(s), "count": n,
                                       "latency_ms": lat, "outcome": outcome})
                            key = (g, shard(s), outcome)
                            whole[key] = whole.get(key, 0) + n
                    total += k
                cnt[g] = total
            recs[c], counts[c] = rs, cnt
        whole_recs = [{"group": g, "shard": s, "count": n, "latency_ms": 5, "outcome": o}
                      for (g, s, o), n in whole.items()]
        return recs, counts, whole_recs

    @staticmethod
    def post(url, records):
        """Records accepted by one skewwatch (0 when it is down)."""
        if not records:
            return 0
        body = "\n".join(json.dumps(r, separators=(",", ":")) for r in records).encode() + b"\n"
        req = urllib.request.Request(url + "/api/v1/observations", data=body, method="POST",
                                     headers={"Content-Type": "application/x-ndjson"})
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return json.loads(r.read()).get("accepted", 0)
        except (urllib.error.URLError, OSError, ValueError):
            return 0

    def run(self):
        # The schedule in monotonic time, anchored once to the wall clock's `start_at`.
        start = time.monotonic() + (self.start_at + TICK_OFFSET - time.time())
        k = 0
        with ThreadPoolExecutor(max_workers=POSTERS) as pool:
            while not self.stop.is_set():
                due = start + k
                now = time.monotonic()
                if due > now:
                    self.stop.wait(due - now)
                    if self.stop.is_set():
                        break
                self.late = max(self.late, time.monotonic() - due)
                with self.lock:
                    recs, counts, whole_recs = self.tick()
                    urls = list(self.urls)
                sent, refused = {g: 0 for g in GROUPS}, {g: 0 for g in GROUPS}
                per_client = {}
                t = time.time()
                clients = list(recs)
                accepted = pool.map(lambda c: self.post(urls[c], recs[c]), clients)
                for c, got in zip(clients, accepted):
                    ok = got == len(recs[c])
                    for g, n in counts[c].items():
                        (sent if ok else refused)[g] += n
                    if ok:
                        per_client[c] = counts[c]
                t_whole = time.time()
                self.post(self.whole_url, whole_recs)
                whole = {g: sum(r["count"] for r in whole_recs if r["group"] == g) for g in GROUPS}
                self.ticks.append((t, sent, refused, whole, per_client, t_whole))
                k += 1

    def set_onset(self):
        with self.lock:
            self.onset = True

    def remove(self, client):
        with self.lock:
            self.removed.add(client)

    def sent_between(self, a, b, group):
        """Requests of `group` accepted by the sidecars in sends with a < t <= b (unix)."""
        return sum(s[group] for t, s, *_ in self.ticks if a < t <= b)

    def whole_between(self, a, b, group):
        """Requests of `group` sent to the whole-traffic agent with a < t <= b (unix)."""
        return sum(w[group] for _, _, _, w, _, t in self.ticks if a < t <= b)

    def accepted_by(self, client, a, b):
        """{group: requests} the sidecar of `client` accepted in sends with a < t <= b."""
        out = {g: 0 for g in GROUPS}
        for t, _, _, _, pc, _ in self.ticks:
            if a < t <= b and client in pc:
                for g, n in pc[client].items():
                    out[g] += n
        return out

    def refused_total(self):
        return {g: sum(r[g] for _, _, r, *_ in self.ticks) for g in GROUPS}
