//! Scenario traces: ordinary traffic that must raise **nothing** from any detector, and the
//! ordinary-traffic model ([`Workload`]) that the hot scenarios ([`super::hot`]) perturb.
//!
//! Every benign trace has realistic texture: lognormal latencies (cache hits ~0.8 ms, backend
//! calls ~8 ms), a 93% look-aside cache hit ratio, a 0.3% baseline error ratio and keys. Each
//! is a single group, 20–30 minutes of trace time at hundreds to thousands of requests per
//! second, compacted with `count`:
//!
//! - [`many_small_shards`]: 256 shards at ~2 req/s each (20 requests per shard-window: right at
//!   the edge of what skew statistics can say anything about).
//! - [`diurnal`]: 64 shards whose total load swings ±50% over the trace (a day compressed into
//!   30 minutes), with a mild, stable spread between shards.
//! - [`stable_zipf_skew`]: Zipf-1.0 keys over 100,000 keys hashed to 64 shards, stable for the
//!   whole trace: the busiest shard carries ~10% of the load and its top key ~85% of that shard,
//!   from the first second.
//! - [`cold_cache_refill`]: a deploy empties the cache; the hit ratio refills 0 → 93% over
//!   about two minutes while the backend stays healthy (same latency, same error ratio).
//! - [`short_bursts`]: one shard at a time takes 5× its load for 10, 15 and 20 s.
//! - [`burst_sweep`]: 40 bursts of 10–20 s at 5× and 10×, starting at every whole second of a
//!   window, so every alignment of a tolerated burst is tried.
//!
//! The traces start at [`START`], a multiple of the default 10 s window, and the first ten
//! minutes are plain traffic, so every baseline is warm before anything unusual happens.

use skewwatch_detectors::prng::{GOLDEN_GAMMA, mix};

use crate::scenario::{Record, Rng, Trace, Zipf};

/// Trace start (unix seconds), a multiple of 10 so windows align with the phases.
pub const START: f64 = 1_760_100_000.0;

/// Latency of one outcome class: lognormal median (ms) and shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyModel {
    /// Median, milliseconds.
    pub median_ms: f64,
    /// Shape σ of the lognormal.
    pub sigma: f64,
}

/// The keys of one shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardKeys {
    /// Explicit keys with their share of the shard's traffic; drawn exactly (Poisson each).
    pub heavy: Vec<(String, f64)>,
    /// The rest of the shard's traffic goes to tail keys, named `<tail_prefix><n>`.
    pub tail_prefix: String,
    /// Tail key numbers and their cumulative weights (empty: numbers uniform in
    /// `0..tail_keys`).
    pub tail_cdf: Vec<(u64, f64)>,
    /// Number of distinct tail keys when `tail_cdf` is empty.
    pub tail_keys: u64,
}

impl ShardKeys {
    /// Only tail keys, `prefix0 .. prefix{n-1}`, uniformly.
    pub fn uniform(prefix: &str, n: u64) -> ShardKeys {
        ShardKeys {
            heavy: Vec::new(),
            tail_prefix: prefix.to_owned(),
            tail_cdf: Vec::new(),
            tail_keys: n.max(1),
        }
    }

    fn heavy_share(&self) -> f64 {
        self.heavy.iter().map(|(_, p)| p).sum()
    }

    fn tail_key(&self, rng: &mut Rng) -> String {
        let n = if self.tail_cdf.is_empty() {
            rng.next_u64() % self.tail_keys
        } else {
            let total = self.tail_cdf.last().map_or(1.0, |c| c.1);
            let u = rng.uniform() * total;
            let i = self
                .tail_cdf
                .partition_point(|c| c.1 < u)
                .min(self.tail_cdf.len() - 1);
            self.tail_cdf[i].0
        };
        format!("{}{n}", self.tail_prefix)
    }
}

/// How one shard behaves during one tick, relative to the [`Workload`]'s normal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Multiplier of the shard's normal traffic (every key alike).
    pub load: f64,
    /// Extra traffic on one key, requests per second.
    pub extra: Option<(&'static str, f64)>,
    /// Cache hit ratio.
    pub hit_ratio: f64,
    /// Multiplier of every latency of the shard.
    pub latency_factor: f64,
    /// Share of requests that fail.
    pub error_ratio: f64,
    /// The outcome class of the failures.
    pub error_class: &'static str,
}

/// Ordinary traffic of one group: shards with stable relative weights, keys, a look-aside
/// cache, latencies and a small error ratio.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Group name.
    pub group: String,
    /// Shard names.
    pub shards: Vec<String>,
    /// Relative weights of the shards (normalised when drawn).
    pub weights: Vec<f64>,
    /// Keys of each shard.
    pub keys: Vec<ShardKeys>,
    /// Normal requests per second of the whole group.
    pub rps: f64,
    /// Share of requests that fail (`outcome: error`, a failed backend call).
    pub error_ratio: f64,
    /// Normal cache hit ratio.
    pub hit_ratio: f64,
    /// Latency of cache hits.
    pub hit_latency: LatencyModel,
    /// Latency of backend calls (misses).
    pub miss_latency: LatencyModel,
    /// Latency of failures.
    pub error_latency: LatencyModel,
    /// Seconds per emission tick: each shard emits its records once per tick.
    pub tick_secs: u64,
    /// Records the tail traffic of one shard-tick is split into.
    pub tail_parts: u64,
}

impl Workload {
    /// `shards` shards named `<prefix>NN`, equal weights, uniform tail keys, ordinary defaults
    /// (93% hits, 0.3% errors, hits ~0.8 ms, misses ~8 ms, errors ~20 ms).
    pub fn new(group: &str, shard_prefix: &str, shards: usize, rps: f64) -> Workload {
        let width = if shards > 100 { 3 } else { 2 };
        let names: Vec<String> = (0..shards)
            .map(|i| format!("{shard_prefix}{i:0width$}"))
            .collect();
        let keys = (0..shards)
            .map(|i| ShardKeys::uniform(&format!("k{i}-"), 2000))
            .collect();
        Workload {
            group: group.to_owned(),
            shards: names,
            weights: vec![1.0; shards],
            keys,
            rps,
            error_ratio: 0.003,
            hit_ratio: 0.93,
            hit_latency: LatencyModel {
                median_ms: 0.8,
                sigma: 0.4,
            },
            miss_latency: LatencyModel {
                median_ms: 8.0,
                sigma: 0.4,
            },
            error_latency: LatencyModel {
                median_ms: 20.0,
                sigma: 0.5,
            },
            tick_secs: 2,
            tail_parts: 1,
        }
    }

    /// The normal shape of every shard: load 1, the normal hit ratio, normal latency, the
    /// normal error ratio (class `error`).
    pub fn normal(&self) -> Shape {
        Shape {
            load: 1.0,
            extra: None,
            hit_ratio: self.hit_ratio,
            latency_factor: 1.0,
            error_ratio: self.error_ratio,
            error_class: "error",
        }
    }

    /// Emits `secs` seconds from `start` into `trace`; `shape(t, shard)` gives each shard's
    /// shape for the tick starting `t` seconds after `start`. The trace is not sorted.
    pub fn emit(
        &self,
        trace: &mut Trace,
        rng: &mut Rng,
        start: f64,
        secs: u64,
        mut shape: impl FnMut(f64, usize) -> Shape,
    ) {
        let total: f64 = self.weights.iter().sum();
        let tick = self.tick_secs.max(1);
        for t in (0..secs).step_by(tick as usize) {
            let rel = t as f64;
            let span = tick.min(secs - t) as f64;
            for i in 0..self.shards.len() {
                let sh = shape(rel, i);
                let mean = self.rps * self.weights[i] / total * sh.load * span;
                let base = Record::new(start + rel, &self.group, &self.shards[i], 0);
                let keys = &self.keys[i];
                for (k, p) in &keys.heavy {
                    let n = rng.poisson(mean * p);
                    self.emit_classes(trace, rng, &base, Some(k.clone()), n, &sh, span);
                }
                if let Some((k, rps)) = sh.extra {
                    let n = rng.poisson(rps * span);
                    self.emit_classes(trace, rng, &base, Some(k.to_owned()), n, &sh, span);
                }
                let tail = rng.poisson(mean * (1.0 - keys.heavy_share()).max(0.0));
                let parts = self.tail_parts.clamp(1, tail.max(1));
                for j in 0..parts {
                    let n = tail / parts + u64::from(j < tail % parts);
                    let key = keys.tail_key(rng);
                    self.emit_classes(trace, rng, &base, Some(key), n, &sh, span);
                }
            }
        }
    }

    /// One record per outcome class (hit, miss, error) for `n` requests of one key, each with
    /// its own latency draw and a time spread over the tick.
    #[allow(clippy::too_many_arguments)]
    fn emit_classes(
        &self,
        trace: &mut Trace,
        rng: &mut Rng,
        base: &Record,
        key: Option<String>,
        n: u64,
        sh: &Shape,
        span: f64,
    ) {
        if n == 0 {
            return;
        }
        let errors = rng.binomial(n, sh.error_ratio);
        let hits = rng.binomial(n - errors, sh.hit_ratio.clamp(0.0, 1.0));
        let misses = n - errors - hits;
        let classes = [
            ("ok", "hit", hits, self.hit_latency),
            ("ok", "miss", misses, self.miss_latency),
            (sh.error_class, "miss", errors, self.error_latency),
        ];
        for (outcome, cache, count, lat) in classes {
            if count == 0 {
                continue;
            }
            let mut r = base.clone();
            r.ts = base.ts + rng.uniform() * span * 0.999;
            r.key = key.clone();
            r.count = count;
            r.outcome = outcome;
            r.cache = Some(cache);
            let ms = rng.lognormal(lat.median_ms, lat.sigma) * sh.latency_factor;
            r.latency_ms = Some(ms.max(0.001));
            trace.push(r);
        }
    }
}

/// Minutes of plain traffic before anything happens in a scenario: baselines (30 windows of
/// 10 s) are warm by then, with room to spare.
pub const WARM_SECS: f64 = 600.0;

/// 256 shards at about 2 requests per second each, for 15 minutes (90 windows: 60 judged
/// after the 30-window warm-up, 15,360 shard-windows).
pub fn many_small_shards(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let mut w = Workload::new("kv-small", "vnode-", 256, 512.0);
    w.tick_secs = 10;
    for k in &mut w.keys {
        k.tail_keys = 500;
    }
    let normal = w.normal();
    let mut trace = Trace::default();
    w.emit(&mut trace, &mut rng, START, 900, |_, _| normal);
    trace.sort();
    trace
}

/// Total load 1 + 0.5·sin(2πt/T) over a 30-minute trace (a day compressed), 64 shards whose
/// weights differ by up to ±15% (stable), 1,200 req/s on average.
pub fn diurnal(seed: u64) -> Trace {
    const SECS: u64 = 1800;
    let mut rng = Rng::new(seed);
    let mut w = Workload::new("orders-db", "shard-", 64, 1200.0);
    w.weights = (0..64).map(|_| 0.85 + 0.3 * rng.uniform()).collect();
    let normal = w.normal();
    let mut trace = Trace::default();
    w.emit(&mut trace, &mut rng, START, SECS, |t, _| Shape {
        load: 1.0 + 0.5 * (std::f64::consts::TAU * t / SECS as f64).sin(),
        ..normal
    });
    trace.sort();
    trace
}

/// Zipf-1.0 over 100,000 keys hashed onto 64 shards, 1,500 req/s, stable for 25 minutes. The
/// 64 most popular keys are drawn exactly; the rest by their Zipf weight within their shard.
pub fn stable_zipf_skew(seed: u64) -> Trace {
    const KEYS: usize = 100_000;
    const SHARDS: usize = 64;
    const HEAVY: usize = 64;
    let mut rng = Rng::new(seed);
    let zipf = Zipf::new(KEYS, 1.0);
    let mut w = Workload::new("profiles-db", "shard-", SHARDS, 1500.0);
    let mut weight = vec![0.0; SHARDS];
    let mut heavy: Vec<Vec<(usize, f64)>> = vec![Vec::new(); SHARDS];
    let mut tail: Vec<Vec<(u64, f64)>> = vec![Vec::new(); SHARDS];
    for rank in 0..KEYS {
        let s = hash_shard(rank as u64, SHARDS);
        let p = zipf.p(rank);
        weight[s] += p;
        if rank < HEAVY {
            heavy[s].push((rank, p));
        } else {
            let acc = tail[s].last().map_or(0.0, |c| c.1) + p;
            tail[s].push((rank as u64, acc));
        }
    }
    for s in 0..SHARDS {
        w.keys[s] = ShardKeys {
            heavy: heavy[s]
                .iter()
                .map(|(rank, p)| (format!("user-{rank}"), p / weight[s]))
                .collect(),
            tail_prefix: "user-".to_owned(),
            tail_cdf: std::mem::take(&mut tail[s]),
            tail_keys: 1,
        };
    }
    w.weights = weight;
    w.tick_secs = 3;
    let normal = w.normal();
    let mut trace = Trace::default();
    w.emit(&mut trace, &mut rng, START, 1500, |_, _| normal);
    trace.sort();
    trace
}

/// When the deploy empties the cache in [`cold_cache_refill`] (trace time).
pub const COLD_CACHE_AT: f64 = START + WARM_SECS;

/// 32 shards, 800 req/s, 20 minutes. At [`COLD_CACHE_AT`] a deploy empties the look-aside
/// cache: the hit ratio falls to 0 and refills as 0.93·(1 − e^(−t/25 s)), back above 90% after
/// about 90 s. The backend stays healthy: the same latency and error ratio throughout.
pub fn cold_cache_refill(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let w = Workload::new("catalog-db", "shard-", 32, 800.0);
    let normal = w.normal();
    let cold = COLD_CACHE_AT - START;
    let mut trace = Trace::default();
    w.emit(&mut trace, &mut rng, START, 1200, |t, _| {
        if t < cold {
            normal
        } else {
            Shape {
                hit_ratio: normal.hit_ratio * (1.0 - (-(t - cold) / 25.0).exp()),
                ..normal
            }
        }
    });
    trace.sort();
    trace
}

/// The bursts of [`short_bursts`]: (shard index, start offset from [`START`] in seconds,
/// duration in seconds). Offsets are chosen to straddle window boundaries: the 15 s and 20 s
/// bursts each touch three 10 s windows.
pub const BURSTS: [(usize, f64, f64); 3] =
    [(5, 603.0, 10.0), (11, 845.0, 20.0), (20, 1087.0, 15.0)];

/// 32 shards, 800 req/s, 22 minutes; one shard at a time takes 5× its load for 10, 20 and 15 s
/// ([`BURSTS`]). Bursts are drawn per second, so they start and end mid-window.
pub fn short_bursts(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let mut w = Workload::new("sessions-db", "shard-", 32, 800.0);
    w.tick_secs = 1;
    let normal = w.normal();
    let mut trace = Trace::default();
    w.emit(&mut trace, &mut rng, START, 1320, |t, i| {
        let burst = BURSTS
            .iter()
            .any(|&(s, from, len)| s == i && t >= from && t < from + len);
        Shape {
            load: if burst { 5.0 } else { 1.0 },
            ..normal
        }
    });
    trace.sort();
    trace
}

/// One burst of [`burst_sweep`]: its start offset from [`START`], length in seconds and
/// load multiple.
pub type SweepBurst = (f64, f64, f64);

/// The bursts of [`burst_sweep`]: 10, 15 and 20 s bursts at 5x and 20 s bursts at 10x, each
/// starting at every whole second of a 10 s window (0 to 9 s after a boundary), one a minute.
pub fn sweep_bursts() -> Vec<SweepBurst> {
    let mut out = Vec::new();
    for (len, factor) in [(10.0, 5.0), (15.0, 5.0), (20.0, 5.0), (20.0, 10.0)] {
        for offset in 0..10 {
            let at = WARM_SECS + 60.0 * out.len() as f64 + f64::from(offset);
            out.push((at, len, factor));
        }
    }
    out
}

/// 32 shards, 800 req/s; after [`WARM_SECS`], the 40 bursts of [`sweep_bursts`], one a minute,
/// each on the next shard: every alignment of a tolerated burst against the windows.
pub fn burst_sweep(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let mut w = Workload::new("sweep-db", "shard-", 32, 800.0);
    w.tick_secs = 1;
    let bursts = sweep_bursts();
    let secs = (WARM_SECS + 60.0 * bursts.len() as f64 + 120.0) as u64;
    let normal = w.normal();
    let mut trace = Trace::default();
    w.emit(&mut trace, &mut rng, START, secs, |t, i| {
        let load = bursts
            .iter()
            .enumerate()
            .find(|(n, (from, len, _))| n % 32 == i && t >= *from && t < from + len)
            .map_or(1.0, |(_, b)| b.2);
        Shape { load, ..normal }
    });
    trace.sort();
    trace
}

/// The shard of key number `k` among `shards`: a fixed 64-bit mix, so keys scatter.
pub fn hash_shard(k: u64, shards: usize) -> usize {
    (mix(k.wrapping_add(GOLDEN_GAMMA)) % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests per 10 s window of `shard` (or of the group when `None`).
    fn per_window(trace: &Trace, shard: Option<&str>) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        for r in &trace.records {
            if shard.is_some_and(|s| s != r.shard) {
                continue;
            }
            let w = ((r.ts - START) / 10.0).floor() as usize;
            if out.len() <= w {
                out.resize(w + 1, 0);
            }
            out[w] += r.count;
        }
        out
    }

    #[test]
    fn traces_are_deterministic_and_time_ordered() {
        let a = short_bursts(3);
        assert_eq!(a.to_ndjson(), short_bursts(3).to_ndjson());
        assert!(a.records.windows(2).all(|p| p[0].ts <= p[1].ts));
        assert_ne!(a.to_ndjson(), short_bursts(4).to_ndjson());
    }

    #[test]
    fn small_shards_get_about_twenty_requests_per_window() {
        let t = many_small_shards(1);
        let w = per_window(&t, Some("vnode-007"));
        let mean = w.iter().sum::<u64>() as f64 / w.len() as f64;
        assert!((17.0..23.0).contains(&mean), "{mean}");
    }

    #[test]
    fn diurnal_load_swings_by_half() {
        let w = per_window(&diurnal(1), None);
        let max = *w.iter().max().unwrap() as f64;
        let min = *w.iter().min().unwrap() as f64;
        assert!(max > 12_000.0 * 1.4 && min < 12_000.0 * 0.6, "{min}..{max}");
    }

    #[test]
    fn zipf_skew_has_a_busy_shard_dominated_by_one_key() {
        let t = stable_zipf_skew(1);
        let total = t.requests() as f64;
        let mut by_shard = std::collections::BTreeMap::<&str, u64>::new();
        let mut by_key = std::collections::BTreeMap::<&str, u64>::new();
        for r in &t.records {
            *by_shard.entry(&r.shard).or_default() += r.count;
            *by_key.entry(r.key.as_deref().unwrap_or("")).or_default() += r.count;
        }
        let top_shard = *by_shard.values().max().unwrap() as f64 / total;
        let top_key = *by_key.values().max().unwrap() as f64 / total;
        assert!((0.07..0.15).contains(&top_shard), "{top_shard}");
        assert!((0.06..0.10).contains(&top_key), "{top_key}");
    }

    #[test]
    fn the_cold_cache_refills_with_a_healthy_backend() {
        let t = cold_cache_refill(1);
        let ratio = |from: f64, to: f64| {
            let (mut hit, mut all, mut err) = (0, 0, 0);
            for r in t.records.iter().filter(|r| r.ts >= from && r.ts < to) {
                all += r.count;
                if r.cache == Some("hit") {
                    hit += r.count;
                }
                if r.outcome != "ok" {
                    err += r.count;
                }
            }
            (hit as f64 / all as f64, err as f64 / all as f64)
        };
        let (h0, e0) = ratio(START, COLD_CACHE_AT);
        let (h1, e1) = ratio(COLD_CACHE_AT, COLD_CACHE_AT + 10.0);
        let (h2, _) = ratio(COLD_CACHE_AT + 110.0, COLD_CACHE_AT + 120.0);
        assert!((h0 - 0.93).abs() < 0.01, "{h0}");
        assert!(h1 < 0.2, "{h1}");
        assert!(h2 > 0.9, "{h2}");
        assert!(e0 < 0.005 && e1 < 0.006, "{e0} {e1}");
    }

    #[test]
    fn bursts_are_five_fold() {
        let t = short_bursts(1);
        let (s, from, len) = BURSTS[1];
        let name = format!("shard-{s:02}");
        let (mut during, mut before) = (0, 0);
        for r in t.records.iter().filter(|r| r.shard == name) {
            let rel = r.ts - START;
            if rel >= from && rel < from + len {
                during += r.count;
            } else if rel >= from - 100.0 && rel < from {
                before += r.count;
            }
        }
        let ratio = (during as f64 / len) / (before as f64 / 100.0);
        assert!((4.0..6.0).contains(&ratio), "{ratio}");
    }
}
