#!/usr/bin/env python3
"""The gemini service: entity lookups through a look-aside cache (cachetools.TTLCache, 60 s)
in front of PostgreSQL split into shards, instrumented by OpenTelemetry's psycopg
instrumentation and exporting OTLP/HTTP to skewwatch. It drives its own load (an open-loop
dispatcher at a fixed rate into a bounded pool of workers) and is steered by the lab over a
small HTTP control port.

    service.py CONFIG_JSON

Sharding: the cache key is the entity id; the shard key is the entity's index value
(crc32(index value) mod N). Entities created without an index value have the EMPTY index
value, so every one of them lives on the one shard that "" hashes to; each is a distinct cache
key, so a growing share of such lookups are distinct misses that converge on one shard.

Per shard: a psycopg_pool.ConnectionPool of POOL connections (the shard's real capacity) with
statement_timeout as the deadline. A lookup runs one statement that records the lookup on the
index value's statistics row (a row lock held for the statement: one row for all of "") and
reads the entity.

How the service reports to skewwatch (docs/labs.md): every backend call is psycopg's own
CLIENT span (db.system, db.name, net.peer.name, net.peer.port, error status on a statement
timeout), to which a small span processor adds `skewwatch.cache=miss`, `skewwatch.key=<index
value>` and `skewwatch.cache_key=<entity id>` while a lookup is in progress; a cache hit, which
makes no backend call, is reported as a CLIENT span with the same database attributes for the
shard the entity lives on, `skewwatch.cache=hit` and the cache key. With the cache key the agent
simulates the cache under other TTLs and serve-stale (docs/whatif.md); a throttled lookup
carries none, as it reached neither the cache's decision nor the backend.
"""
import bisect
import contextvars
import json
import random
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cachetools
import psycopg
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from psycopg_pool import ConnectionPool

CFG = json.loads(sys.argv[1])
PORTS = CFG["ports"]
N_ENTITIES = CFG["entities"]
FAULT_BASE = 1_000_000  # entities created without an index value: ids from here on
FAULT_RANGE = CFG["fault_entities"]

# The lookup in progress on this thread: (index value, "miss", cache key) while the backend is
# called.
current = contextvars.ContextVar("lookup", default=None)


class LookupAttributes(SpanProcessor):
    """Adds the lookup's cache result and index value to the spans started during a backend
    call (psycopg's own span)."""

    def on_start(self, span, parent_context=None):
        cur = current.get()
        if cur is not None:
            span.set_attribute("skewwatch.key", cur[0])
            span.set_attribute("skewwatch.cache", cur[1])
            span.set_attribute("skewwatch.cache_key", cur[2])


provider = TracerProvider(resource=Resource.create({"service.name": "gemini"}))
provider.add_span_processor(LookupAttributes())
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=CFG["otlp"]), max_queue_size=65536,
                                               schedule_delay_millis=200, max_export_batch_size=2048))
trace.set_tracer_provider(provider)
PsycopgInstrumentor().instrument()
tracer = trace.get_tracer("gemini")


def index_value(entity):
    return "" if entity >= FAULT_BASE else f"u{entity % CFG['index_values']}"


def shard_of(idx):
    return zlib.crc32(idx.encode()) % len(PORTS)


pools = [ConnectionPool(f"host=127.0.0.1 port={p} dbname=gemini user=postgres "
                        f"options='-c statement_timeout={CFG['statement_timeout_ms']}'",
                        min_size=CFG["pool"], max_size=CFG["pool"], timeout=CFG["pool_timeout_s"],
                        kwargs={"autocommit": True}, open=True) for p in PORTS]
for pool in pools:
    pool.wait(timeout=30)

QUERY = ("UPDATE index_stats SET lookups = lookups + 1 WHERE idx = %s "
         "RETURNING (SELECT payload FROM items WHERE id = %s), pg_sleep(%s)")

lock = threading.Lock()
stats = {"lookups": 0, "ok": 0, "errors": 0, "stale_served": 0, "throttled": 0, "backend_calls": 0,
         "backend_errors": 0, "shed": 0, "hits_before": 0, "misses_before": 0,
         "per_shard_calls": [0] * len(PORTS), "per_shard_errors": [0] * len(PORTS)}
control = {"empty_share": 0.0, "target": 0.0, "ramp_from": 0.0, "ramp_t0": 0.0, "ramp_secs": 1.0,
           "ttl_secs": CFG["ttl_secs"], "serve_stale": False, "rate_limit_qps": None}
stale = cachetools.LRUCache(maxsize=200_000)


# Whether this thread's lookup called the backend (the cached function calls backend_fetch only
# on a miss).
was_miss = contextvars.ContextVar("was_miss", default=False)


def backend_fetch(entity, idx):
    was_miss.set(True)
    s = shard_of(idx)
    token = current.set((idx, "miss", str(entity)))
    with lock:
        stats["backend_calls"] += 1
        stats["per_shard_calls"][s] += 1
    try:
        with pools[s].connection() as conn:
            row = conn.execute(QUERY, (idx, entity, CFG["work_secs"])).fetchone()
        return row[0] if row else None
    except Exception:
        with lock:
            stats["backend_errors"] += 1
            stats["per_shard_errors"][s] += 1
        raise
    finally:
        current.reset(token)


def new_cache(ttl):
    cache = cachetools.TTLCache(maxsize=200_000, ttl=ttl)
    return cachetools.cached(cache, key=lambda entity, idx: entity, info=True,
                             lock=threading.Lock())(backend_fetch)


fetch = new_cache(CFG["ttl_secs"])


class Bucket:
    """A token bucket for the hot shard's rate limit (a mitigation)."""

    def __init__(self, qps):
        self.qps, self.tokens, self.t = qps, qps, time.monotonic()
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.qps, self.tokens + (now - self.t) * self.qps)
            self.t = now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            return False


bucket = None
hot_shard = shard_of("")


def lookup(entity):
    idx = index_value(entity)
    s = shard_of(idx)
    peer = {"db.system": "postgresql", "db.name": "gemini", "net.peer.name": "127.0.0.1",
            "net.peer.port": PORTS[s], "skewwatch.key": idx}
    f = fetch
    b = bucket
    was_miss.set(False)
    try:
        if b is not None and s == hot_shard:
            # The rate limit applies to backend calls: a cached entity is still served.
            with f.cache_lock:
                cached = entity in f.cache
            if not cached and not b.take():
                with tracer.start_as_current_span("lookup throttled", kind=SpanKind.CLIENT,
                                                  attributes={**peer, "error.type": "RateLimited"}) as sp:
                    sp.set_status(trace.Status(trace.StatusCode.ERROR))
                with lock:
                    stats["lookups"] += 1
                    stats["throttled"] += 1
                    stats["errors"] += 1
                return
        t0 = time.time_ns()
        value = f(entity, idx)
        if not was_miss.get():
            # Served from the cache: no backend call, one span saying so.
            tracer.start_span("cache hit", kind=SpanKind.CLIENT, start_time=t0,
                              attributes={**peer, "skewwatch.cache": "hit",
                                          "skewwatch.cache_key": str(entity)}).end()
        stale[entity] = value
        with lock:
            stats["lookups"] += 1
            stats["ok"] += 1
    except Exception:
        with lock:
            stats["lookups"] += 1
            if control["serve_stale"] and entity in stale:
                stats["ok"] += 1
                stats["stale_served"] += 1
            else:
                stats["errors"] += 1


fetch_totals = {"hits": 0, "misses": 0}

# Zipf over entity ids 1..N_ENTITIES.
weights = [1.0 / (k ** CFG["zipf_s"]) for k in range(1, N_ENTITIES + 1)]
cum = []
acc = 0.0
for w in weights:
    acc += w
    cum.append(acc)
ids = list(range(1, N_ENTITIES + 1))
random.Random(7).shuffle(ids)


def empty_share_now():
    c = control
    f = min(1.0, (time.monotonic() - c["ramp_t0"]) / c["ramp_secs"])
    return c["ramp_from"] + f * (c["target"] - c["ramp_from"])


def pick(rng):
    if rng.random() < empty_share_now():
        return FAULT_BASE + rng.randrange(FAULT_RANGE)
    return ids[bisect.bisect_left(cum, rng.random() * acc)]


def dispatcher():
    rng = random.Random(11)
    pool = ThreadPoolExecutor(max_workers=CFG["workers"])
    inflight = threading.Semaphore(CFG["workers"])
    period = 1.0 / CFG["rate"]
    nxt = time.monotonic()

    def run(e):
        try:
            lookup(e)
        finally:
            inflight.release()

    while True:
        nxt += period
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        e = pick(rng)
        if inflight.acquire(blocking=False):
            pool.submit(run, e)
        else:
            with lock:
                stats["shed"] += 1


def snapshot():
    info = fetch.cache_info()
    with lock:
        out = json.loads(json.dumps(stats))
    out["cache_hits"] = fetch_totals["hits"] + info.hits
    out["cache_misses"] = fetch_totals["misses"] + info.misses
    out["cache_size"] = info.currsize
    out["empty_share"] = empty_share_now()
    out["ttl_secs"] = control["ttl_secs"]
    out["serve_stale"] = control["serve_stale"]
    out["rate_limit_qps"] = control["rate_limit_qps"]
    out["time"] = time.time()
    return out


class Ctl(BaseHTTPRequestHandler):
    def do_GET(self):
        self.reply(snapshot())

    def do_POST(self):
        global fetch, bucket
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if "empty_share" in body:
            control["ramp_from"] = empty_share_now()
            control["target"] = float(body["empty_share"])
            control["ramp_secs"] = max(0.001, float(body.get("ramp_secs", 0.001)))
            control["ramp_t0"] = time.monotonic()
        if "ttl_secs" in body:
            # A TTLCache's TTL is fixed when it is made: a new cache, warmed with the old one's
            # entries (as a rolling restart with a warm-up would), carries the new TTL.
            old = fetch
            info = old.cache_info()
            nf = new_cache(float(body["ttl_secs"]))
            for k, v in list(old.cache.items()):
                nf.cache[k] = v
            fetch_totals["hits"] += info.hits
            fetch_totals["misses"] += info.misses
            fetch = nf
            control["ttl_secs"] = float(body["ttl_secs"])
        if "serve_stale" in body:
            control["serve_stale"] = bool(body["serve_stale"])
        if "rate_limit_qps" in body:
            q = body["rate_limit_qps"]
            bucket = Bucket(float(q)) if q else None
            control["rate_limit_qps"] = q
        self.reply(snapshot())

    def reply(self, obj):
        b = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def log_message(self, *_):
        pass


threading.Thread(target=dispatcher, daemon=True).start()
print(f"gemini: {len(PORTS)} shards, hot shard for the empty index value: {hot_shard} "
      f"(port {PORTS[hot_shard]})", flush=True)
ThreadingHTTPServer(("127.0.0.1", CFG["control_port"]), Ctl).serve_forever()
