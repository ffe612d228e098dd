//! Scenario traces: the two public incidents skewwatch exists for, as seeded fluid models.
//!
//! - [`gemini_cache_collapse`]: a metadata database near capacity; an index column full of
//!   identical *empty* values concentrates traffic on one shard; a one-minute in-memory cache
//!   turns the shard's rising errors into misses, the misses overload the whole database, and
//!   the loop holds (metastable) after the empty-key traffic is fixed, until a mitigation
//!   (stale-if-error with a longer TTL) breaks it. Hit ratio 95% -> ~50%, backend calls per
//!   request > 10x, database error ratio ~60%.
//! - [`fast_failure_sink`]: one model-serving cluster answers `NOT_FOUND` fast after a
//!   control-plane bug; the latency-aware router sends it more traffic until ~21% of all
//!   requests fail; then the fix rolls out.
//!
//! Both are deterministic for a seed, start with 12 minutes of normal traffic (baselines need it)
//! and end with several minutes of recovery. Times are trace seconds; [`START`] is aligned to
//! the default 10 s windows, and so are the onsets.

use skewwatch_detectors::prng::{GOLDEN_GAMMA, mix};

use crate::scenario::{Record, Rng, Trace, Zipf};

/// Trace start (unix seconds), a multiple of 10 so windows align with the phases.
pub const START: f64 = 1_760_000_000.0;

/// Group of the cache-collapse incident.
pub const GEMINI_GROUP: &str = "metadata-db";
/// The shard the empty key maps to.
pub const GEMINI_HOT_SHARD: &str = "shard-17";
/// Shards of the metadata database.
pub const GEMINI_SHARDS: usize = 64;
/// The empty-key share steps up (trace time).
pub const GEMINI_ONSET: f64 = START + 720.0;
/// The empty-key traffic is fixed; the loop goes on without its trigger.
pub const GEMINI_TRIGGER_END: f64 = GEMINI_ONSET + 240.0;
/// Mitigation: stale-if-error and a 20-minute TTL, so failed fills no longer become misses.
pub const GEMINI_MITIGATION: f64 = GEMINI_ONSET + 480.0;
/// End of the trace.
pub const GEMINI_END: f64 = GEMINI_ONSET + 780.0;

/// Group of the fast-failure incident.
pub const FAST_GROUP: &str = "model-serving";
/// The clusters behind the router.
pub const FAST_CLUSTERS: [&str; 6] = [
    "cluster-a",
    "cluster-b",
    "cluster-c",
    "cluster-d",
    "cluster-e",
    "cluster-f",
];
/// The cluster that starts answering `NOT_FOUND`.
pub const FAST_FAULTY: &str = "cluster-c";
/// The control-plane bug takes effect (trace time).
pub const FAST_ONSET: f64 = START + 720.0;
/// The fix is rolled out.
pub const FAST_FIX: f64 = FAST_ONSET + 360.0;
/// End of the trace.
pub const FAST_END: f64 = FAST_ONSET + 660.0;

/// Knobs of the cache-collapse fluid model.
mod gemini {
    /// Front-end requests per second.
    pub const RPS: f64 = 2000.0;
    /// Distinct non-empty index keys (Zipf).
    pub const KEYS: usize = 20_000;
    /// Zipf exponent of the non-empty keys: mild, so no shard is hot at baseline.
    pub const ZIPF_S: f64 = 0.6;
    /// Keys (by Zipf rank) that get records of their own; the rest are drawn per record.
    pub const HEAVY_KEYS: usize = 16;
    /// Index of the shard the empty key maps to (`shard-17`).
    pub const HOT: usize = 17;
    /// Share of requests with an empty index key, before and during the trigger.
    pub const EMPTY_SHARE_NORMAL: f64 = 0.01;
    /// During the trigger: the empty key's traffic makes shard-17 ~5x its fair share, ~80% of
    /// it empty-key traffic.
    pub const EMPTY_SHARE_TRIGGER: f64 = 0.06;
    /// Steady-state hit ratio of the one-minute cache.
    pub const HIT0: f64 = 0.95;
    /// Capacity over baseline load, per shard and for the whole database: 80% busy.
    pub const HEADROOM: f64 = 1.25;
    /// How overload turns into failures: `p = 1 - (capacity / load)^BETA`. Part of the excess
    /// queues (latency) rather than fails, so `BETA < 1`.
    pub const BETA: f64 = 0.43;
    /// How failures empty the cache: failed fills are not cached and slow fills leave entries
    /// empty, so the hit ratio relaxes toward `HIT0 (1 - p)^GAMMA`. The loop settles near a 45%
    /// hit ratio, 11x backend calls and 60% database errors, the incident's figures.
    pub const GAMMA: f64 = 0.77;
    /// Time constants of the hit ratio, seconds: entries expire over the one-minute TTL (down);
    /// successful fills restore hot entries faster (up).
    pub const TAU_DOWN: f64 = 20.0;
    /// See [`TAU_DOWN`].
    pub const TAU_UP: f64 = 15.0;
    /// Most failures a shard shows.
    pub const P_MAX: f64 = 0.95;
    /// Share of failures that are timeouts (the rest are `error`: resource exhausted).
    pub const TIMEOUT_SHARE: f64 = 0.65;
    /// Failure ratio of a healthy backend.
    pub const P_BASE: f64 = 0.001;
    /// Records are drawn per shard every this many seconds (the model steps every second), to
    /// keep the trace compact: ~150k records for 25 minutes of 2000 req/s on 64 shards.
    pub const TICK_SECS: usize = 2;
}

/// The metadata-database incident: empty-key hot shard, cache-hit collapse, metastable loop.
///
/// Fluid model, per second and shard i (expected values; the trace draws counts around them):
/// demand `d_i` from Zipf keys hashed to shards plus the empty key on `shard-17`; backend calls
/// `m_i = d_i (1 - h_i)`; failures `p_i = 1 - (c / load)^BETA` from the shard's own capacity
/// and the database's shared capacity, both 1.25x their baseline load; the hit ratio relaxes
/// toward `HIT0 (1 - p_i)^GAMMA`. The healthy state is stable; the trigger (empty-key share
/// 1% -> 6%) overloads shard-17, its failures empty its cache entries, the extra misses
/// overload the shared database, and every shard's cache follows. After the trigger ends the
/// loop holds; the mitigation (serve stale on error, longer TTL) pins the hit ratio at 95% and
/// the database recovers.
///
/// Records: per shard and 2 s tick, one record each of hits, successful misses, timeouts and
/// errors, for the empty key, for each of the 16 heaviest keys, and for the rest of the shard's
/// keys (one key drawn per record); each has its own latency draw. Hits take ~0.6 ms; backend
/// calls take 12 ms, growing with overload; timeouts take the 1 s deadline; errors ~40 ms.
pub fn gemini_cache_collapse(seed: u64) -> Trace {
    use gemini::*;
    let mut rng = Rng::new(seed);
    let zipf = Zipf::new(KEYS, ZIPF_S);
    // Key rank -> shard, by a fixed mix of the rank; the empty key lives on shard-17.
    let mut shard_keys: Vec<Vec<usize>> = vec![Vec::new(); GEMINI_SHARDS];
    for rank in 0..KEYS {
        shard_keys[key_shard(rank)].push(rank);
    }
    // The heaviest keys get exact per-tick counts of their own; the tail of each shard is drawn
    // one key per record (a tail key is a small part of its shard, so the lumps stay small).
    let heavy: Vec<Vec<(String, f64)>> = shard_keys
        .iter()
        .map(|ranks| {
            ranks
                .iter()
                .filter(|&&r| r < HEAVY_KEYS)
                .map(|&r| (key_name(r), zipf.p(r)))
                .collect()
        })
        .collect();
    let samplers: Vec<KeySampler> = shard_keys
        .iter()
        .map(|ranks| {
            let tail: Vec<usize> = ranks.iter().copied().filter(|&r| r >= HEAVY_KEYS).collect();
            KeySampler::new(&tail, &zipf)
        })
        .collect();
    let weights: Vec<f64> = (0..GEMINI_SHARDS)
        .map(|i| samplers[i].weight + heavy[i].iter().map(|(_, p)| p).sum::<f64>())
        .collect();
    let names: Vec<String> = (0..GEMINI_SHARDS).map(|i| format!("shard-{i}")).collect();

    let demand = |i: usize, empty_share: f64| -> (f64, f64) {
        let other = RPS * (1.0 - empty_share) * weights[i];
        let empty = if i == HOT { RPS * empty_share } else { 0.0 };
        (other, empty)
    };
    let base_calls: Vec<f64> = (0..GEMINI_SHARDS)
        .map(|i| {
            let (o, e) = demand(i, EMPTY_SHARE_NORMAL);
            (o + e) * (1.0 - HIT0)
        })
        .collect();
    let db_capacity = HEADROOM * base_calls.iter().sum::<f64>();

    let mut hit = vec![HIT0; GEMINI_SHARDS];
    let mut fail = vec![0.0; GEMINI_SHARDS];
    // Hit and failure ratios summed over the current emission tick.
    let mut tick_hit = vec![0.0; GEMINI_SHARDS];
    let mut tick_fail = vec![0.0; GEMINI_SHARDS];
    let mut trace = Trace::default();
    let seconds = (GEMINI_END - START) as usize;
    for sec in 0..seconds {
        let t = START + sec as f64;
        let triggered = (GEMINI_ONSET..GEMINI_TRIGGER_END).contains(&t);
        let mitigated = t >= GEMINI_MITIGATION;
        let empty_share = if triggered {
            EMPTY_SHARE_TRIGGER
        } else {
            EMPTY_SHARE_NORMAL
        };
        // The fluid step: load from the current state, then failures, then the cache.
        let calls: Vec<f64> = (0..GEMINI_SHARDS)
            .map(|i| {
                let (o, e) = demand(i, empty_share);
                (o + e) * (1.0 - hit[i])
            })
            .collect();
        let db_load: f64 = calls.iter().sum();
        let overload = |cap: f64, load: f64| {
            if load > cap {
                1.0 - (cap / load).powf(BETA)
            } else {
                0.0
            }
        };
        let db_fail = overload(db_capacity, db_load);
        for i in 0..GEMINI_SHARDS {
            let shard_fail = overload(HEADROOM * base_calls[i], calls[i]);
            fail[i] = db_fail.max(shard_fail).min(P_MAX);
            let target = if mitigated {
                HIT0
            } else {
                HIT0 * (1.0 - fail[i]).powf(GAMMA)
            };
            let tau = if target < hit[i] { TAU_DOWN } else { TAU_UP };
            hit[i] += (target - hit[i]) / tau;
            tick_hit[i] += hit[i];
            tick_fail[i] += fail[i];
        }
        if (sec + 1) % TICK_SECS != 0 {
            continue;
        }
        // Draw this tick's records, from its mean hit and failure ratios. The empty-key share
        // only changes on tick boundaries.
        let tick_start = t + 1.0 - TICK_SECS as f64;
        let ticks = TICK_SECS as f64;
        for i in 0..GEMINI_SHARDS {
            let (other, empty) = demand(i, empty_share);
            let h = std::mem::take(&mut tick_hit[i]) / ticks;
            let f = std::mem::take(&mut tick_fail[i]) / ticks;
            let p = f.max(P_BASE);
            let backend_ms = 12.0 + 400.0 * f;
            // Requests per key choice: the shard's tail, its heavy keys, and the empty key.
            let per_key = other * ticks / weights[i];
            let mut chunks = vec![(rng.poisson(per_key * samplers[i].weight), None)];
            for (key, p) in &heavy[i] {
                chunks.push((rng.poisson(per_key * p), Some(key.as_str())));
            }
            chunks.push((rng.poisson(empty * ticks), Some("")));
            for (n, fixed_key) in chunks {
                if n == 0 {
                    continue;
                }
                let hits = rng.binomial(n, h);
                let misses = n - hits;
                let failed = rng.binomial(misses, p);
                let timeouts = rng.binomial(failed, TIMEOUT_SHARE);
                let classes = [
                    (Some("hit"), "ok", hits, 0.6, 0.3, 1),
                    (Some("miss"), "ok", misses - failed, backend_ms, 0.5, 1),
                    (Some("miss"), "timeout", timeouts, 1000.0, 0.03, 1),
                    (Some("miss"), "error", failed - timeouts, 40.0, 0.5, 1),
                ];
                for (cache, outcome, count, median_ms, sigma, parts) in classes {
                    let mut base = Record::new(tick_start, GEMINI_GROUP, &names[i], 0);
                    base.cache = cache;
                    base.outcome = outcome;
                    emit_keyed(
                        &mut trace,
                        &mut rng,
                        &base,
                        count,
                        (parts, ticks),
                        (median_ms, sigma),
                        |rng| match fixed_key {
                            Some(k) => Some(k.to_owned()),
                            None => Some(key_name(samplers[i].sample(rng))),
                        },
                    );
                }
            }
        }
    }
    trace.sort();
    trace
}

/// Knobs of the fast-failure model.
mod fast {
    /// Requests per second through the router.
    pub const RPS: f64 = 600.0;
    /// Baseline routing weights of the six clusters (capacity-proportional).
    pub const WEIGHTS: [f64; 6] = [0.20, 0.18, 0.14, 0.16, 0.17, 0.15];
    /// Index of `cluster-c`.
    pub const FAULTY: usize = 2;
    /// Latency-aware routing: weight x (reference latency / cluster's mean latency)^GAMMA.
    pub const GAMMA: f64 = 0.3;
    /// Time constant of the router's latency EWMA, seconds.
    pub const TAU: f64 = 5.0;
    /// Median latency of a served inference, ms.
    pub const OK_MS: f64 = 80.0;
    /// Median latency of the faulty cluster's `NOT_FOUND`, ms.
    pub const NOT_FOUND_MS: f64 = 5.0;
    /// Share of the faulty cluster's answers that are `NOT_FOUND`.
    pub const NOT_FOUND_RATIO: f64 = 0.92;
    /// Normal error ratio of every cluster (generic errors and unavailable).
    pub const BASE_ERRORS: f64 = 0.003;
}

/// The model-serving incident: a cluster that answers `NOT_FOUND` fast draws traffic.
///
/// The router weighs each cluster by its capacity weight times (reference latency / the
/// cluster's mean latency)^0.3, with the mean latency an EWMA (5 s), the way latency-aware and
/// least-loaded balancers do. At [`FAST_ONSET`] `cluster-c` answers 92% of requests with
/// `NOT_FOUND` at ~5 ms; its mean latency falls ~7x, its share rises from 14% to ~23%, and
/// ~21% of all requests fail. At [`FAST_FIX`] it answers normally again and routing follows.
pub fn fast_failure_sink(seed: u64) -> Trace {
    use fast::*;
    let mut rng = Rng::new(seed);
    let mut mean_ms = [OK_MS; 6];
    let mut trace = Trace::default();
    let seconds = (FAST_END - START) as usize;
    for sec in 0..seconds {
        let t = START + sec as f64;
        let faulty = (FAST_ONSET..FAST_FIX).contains(&t);
        let raw: Vec<f64> = (0..6)
            .map(|j| WEIGHTS[j] * (OK_MS / mean_ms[j]).powf(GAMMA))
            .collect();
        let total: f64 = raw.iter().sum();
        for j in 0..6 {
            let n = rng.poisson(RPS * raw[j] / total);
            let nf_ratio = if faulty && j == FAULTY {
                NOT_FOUND_RATIO
            } else {
                0.0
            };
            let not_found = rng.binomial(n, nf_ratio);
            let errors = rng.binomial(n - not_found, BASE_ERRORS);
            let unavailable = rng.binomial(errors, 0.3);
            let ok = n - not_found - errors;
            let classes = [
                ("ok", ok, OK_MS, 0.35, 3),
                ("not_found", not_found, NOT_FOUND_MS, 0.3, 2),
                ("error", errors - unavailable, OK_MS, 0.5, 1),
                ("unavailable", unavailable, 2.0, 0.5, 1),
            ];
            let mut sum_ms = 0.0;
            for (outcome, count, median_ms, sigma, parts) in classes {
                let mut base = Record::new(t, FAST_GROUP, FAST_CLUSTERS[j], 0);
                base.outcome = outcome;
                let before = trace.records.len();
                emit_keyed(
                    &mut trace,
                    &mut rng,
                    &base,
                    count,
                    (parts, 1.0),
                    (median_ms, sigma),
                    |_| None,
                );
                for r in &trace.records[before..] {
                    sum_ms += r.latency_ms.unwrap_or(0.0) * r.count as f64;
                }
            }
            if n > 0 {
                let a = 1.0 - (-1.0 / TAU).exp();
                mean_ms[j] += a * (sum_ms / n as f64 - mean_ms[j]);
            }
        }
    }
    trace.sort();
    trace
}

/// Spreads `n` requests over up to `parts` records within `span` seconds from `base.ts`, each
/// with its own key draw (from `key`; `None` is no key) and latency draw (lognormal with the
/// given median and sigma).
fn emit_keyed(
    trace: &mut Trace,
    rng: &mut Rng,
    base: &Record,
    n: u64,
    (parts, span): (u64, f64),
    (median_ms, sigma): (f64, f64),
    mut key: impl FnMut(&mut Rng) -> Option<String>,
) {
    if n == 0 {
        return;
    }
    let parts = parts.clamp(1, n);
    for i in 0..parts {
        let count = n / parts + u64::from(i < n % parts);
        let mut r = base.clone();
        r.ts = base.ts + (i as f64 + rng.uniform()) / parts as f64 * span * 0.999;
        r.count = count;
        r.latency_ms = Some(rng.lognormal(median_ms, sigma).max(0.001));
        r.key = key(rng);
        trace.push(r);
    }
}

/// The shard of a non-empty key rank: a fixed 64-bit mix, so keys scatter over shards.
fn key_shard(rank: usize) -> usize {
    (mix((rank as u64).wrapping_add(GOLDEN_GAMMA)) % GEMINI_SHARDS as u64) as usize
}

/// The name of a non-empty key.
fn key_name(rank: usize) -> String {
    format!("tenant-{rank:05}")
}

/// Samples one shard's keys in proportion to their Zipf probabilities.
#[derive(Debug, Clone)]
struct KeySampler {
    ranks: Vec<usize>,
    cdf: Vec<f64>,
    /// The shard's share of the non-empty-key traffic.
    weight: f64,
}

impl KeySampler {
    fn new(ranks: &[usize], zipf: &Zipf) -> KeySampler {
        let mut acc = 0.0;
        let cdf = ranks
            .iter()
            .map(|&r| {
                acc += zipf.p(r);
                acc
            })
            .collect();
        KeySampler {
            ranks: ranks.to_vec(),
            cdf,
            weight: acc,
        }
    }

    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.uniform() * self.weight;
        let i = self
            .cdf
            .partition_point(|&c| c < u)
            .min(self.ranks.len() - 1);
        self.ranks[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-window sums of one group: (requests, hits, misses, errors).
    fn windows(trace: &Trace, group: &str) -> Vec<(f64, [u64; 4])> {
        let mut out: Vec<(f64, [u64; 4])> = Vec::new();
        for r in trace.records.iter().filter(|r| r.group == group) {
            let w = (r.ts / 10.0).floor() * 10.0;
            if out.last().is_none_or(|(s, _)| *s != w) {
                out.push((w, [0; 4]));
            }
            let c = &mut out.last_mut().unwrap().1;
            c[0] += r.count;
            match r.cache {
                Some("hit") => c[1] += r.count,
                Some("miss") => c[2] += r.count,
                _ => {}
            }
            if r.outcome != "ok" {
                c[3] += r.count;
            }
        }
        out
    }

    #[test]
    fn gemini_reaches_the_reported_figures_and_recovers() {
        let trace = gemini_cache_collapse(1);
        assert_eq!(trace.to_ndjson(), gemini_cache_collapse(1).to_ndjson());
        let ws = windows(&trace, GEMINI_GROUP);
        let at = |t: f64| ws.iter().find(|(s, _)| *s == t).unwrap().1;
        let before = at(GEMINI_ONSET - 10.0);
        let hit0 = before[1] as f64 / (before[1] + before[2]) as f64;
        assert!((hit0 - 0.95).abs() < 0.01, "{hit0}");
        // Deep in the loop, after the trigger ended (metastable).
        let deep = at(GEMINI_MITIGATION - 10.0);
        let hit = deep[1] as f64 / (deep[1] + deep[2]) as f64;
        let amp = (deep[2] as f64 / deep[0] as f64) / (before[2] as f64 / before[0] as f64);
        let db_err = deep[3] as f64 / deep[2] as f64;
        eprintln!("hit {hit} amplification {amp} db errors {db_err}");
        assert!((0.40..0.60).contains(&hit), "hit ratio {hit}");
        assert!(amp > 10.0, "amplification {amp}");
        assert!((0.5..0.7).contains(&db_err), "db error ratio {db_err}");
        let after = at(GEMINI_END - 10.0);
        let hit_after = after[1] as f64 / (after[1] + after[2]) as f64;
        assert!(hit_after > 0.94, "{hit_after}");
    }

    #[test]
    fn the_empty_key_dominates_the_hot_shard() {
        let trace = gemini_cache_collapse(2);
        let (mut all, mut empty) = (0, 0);
        for r in &trace.records {
            if r.shard == GEMINI_HOT_SHARD && (GEMINI_ONSET..GEMINI_TRIGGER_END).contains(&r.ts) {
                all += r.count;
                if r.key.as_deref() == Some("") {
                    empty += r.count;
                }
            }
        }
        let share = empty as f64 / all as f64;
        assert!((0.7..0.9).contains(&share), "{share}");
    }

    #[test]
    fn fast_failure_fails_about_a_fifth_of_requests() {
        let trace = fast_failure_sink(1);
        let ws = windows(&trace, FAST_GROUP);
        let deep = ws.iter().find(|(s, _)| *s == FAST_ONSET + 120.0).unwrap().1;
        let failed = deep[3] as f64 / deep[0] as f64;
        assert!((0.18..0.24).contains(&failed), "{failed}");
        let share: u64 = trace
            .records
            .iter()
            .filter(|r| {
                r.shard == FAST_FAULTY && (FAST_ONSET + 120.0..FAST_ONSET + 130.0).contains(&r.ts)
            })
            .map(|r| r.count)
            .sum();
        let share = share as f64 / deep[0] as f64;
        assert!((0.2..0.26).contains(&share), "{share}");
    }
}
