//! The benchmark's traffic: a group's requests for one window, drawn as a few aggregated records
//! per shard and fed straight into an [`Engine`] (no HTTP, no files).
//!
//! Per shard and stretch of constant behaviour (a [`Slice`]) the generator draws the request
//! count as a Poisson variable, splits it into hits, misses and failures with binomial draws, and
//! records each class as at most [`PARTS`] records whose latencies are stratified quantiles of
//! the class's lognormal. Counts, ratios and shares are therefore distributed exactly as with one
//! record per request (sums of independent Bernoulli draws are binomial), up to the normal
//! approximations [`Rng::poisson`] and [`Rng::binomial`] use for large means. Latency is the one
//! approximation: a class of n requests carries min(n, [`PARTS`]) distinct values, one per
//! 1/[`PARTS`] of its distribution, so a percentile is read to within one stratum of the class.

use std::sync::OnceLock;

use skewwatch_detectors::engine::Engine;
use skewwatch_detectors::observation::{CacheResult, ObservationRef, Outcome};
use skewwatch_detectors::stats::normal_quantile;

use crate::scenario::Rng;
use crate::scenarios::benign::{LatencyModel, Workload};

/// Group name of every benchmark run.
pub const GROUP: &str = "bench-db";
/// Most records one class (hits, misses, failures) of one shard and slice is split into: the
/// number of distinct latency values it carries.
pub const PARTS: u64 = 8;
/// Name of the key a [`Slice`] can carry extra traffic on.
pub const HOT_KEY: &str = "hot-key";

/// How one shard behaves during one stretch of time, relative to its normal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slice {
    /// Multiplier of the shard's normal (keyless) traffic.
    pub load: f64,
    /// Extra requests per second on [`HOT_KEY`], on top of `load`.
    pub key_rps: f64,
    /// Cache hit ratio.
    pub hit_ratio: f64,
    /// Share of requests that fail.
    pub error_ratio: f64,
    /// The outcome class of the failures.
    pub error: Outcome,
    /// Multiplier of every latency of the shard.
    pub latency_factor: f64,
    /// Multiplier of the latency of backend calls only (misses and failures).
    pub backend_factor: f64,
    /// The clients' deadline, ms (infinite: none). With one, `timeout` failures take exactly
    /// the deadline and no successful response is slower than it: what a deadline does.
    pub deadline_ms: f64,
}

impl Slice {
    /// Ordinary behaviour: the defaults of the scenario workload (93% hits, 0.3% errors).
    pub fn normal() -> Slice {
        // Built once: slice functions call this for every shard and second.
        static NORMAL: OnceLock<Slice> = OnceLock::new();
        *NORMAL.get_or_init(|| {
            let w = model();
            Slice {
                load: 1.0,
                key_rps: 0.0,
                hit_ratio: w.hit_ratio,
                error_ratio: w.error_ratio,
                error: Outcome::Error,
                latency_factor: 1.0,
                backend_factor: 1.0,
                deadline_ms: f64::INFINITY,
            }
        })
    }
}

/// The scenario workload whose defaults (hit ratio, error ratio, latency models) the benchmark
/// shares, so a benchmark shard behaves like a scenario trace's shard.
fn model() -> Workload {
    Workload::new(GROUP, "shard-", 1, 1.0)
}

/// Where drawn records go: the detectors' [`Engine`], and with `--diy` also the sampler that
/// turns them into the counters a Prometheus would scrape ([`crate::bench::diy::Sampler`]).
pub trait Recorder {
    /// Takes one aggregated record.
    fn record(&mut self, obs: &ObservationRef<'_>);
}

impl Recorder for Engine {
    fn record(&mut self, obs: &ObservationRef<'_>) {
        Engine::record(self, obs);
    }
}

impl<R: Recorder + ?Sized> Recorder for &mut R {
    fn record(&mut self, obs: &ObservationRef<'_>) {
        (**self).record(obs);
    }
}

/// Both take every record: the engine and the DIY sampler.
impl<A: Recorder, B: Recorder> Recorder for (A, B) {
    fn record(&mut self, obs: &ObservationRef<'_>) {
        self.0.record(obs);
        self.1.record(obs);
    }
}

/// The name of shard `i`: `shard-0000`, `shard-0001`, ...
pub fn shard_name(i: usize) -> String {
    format!("shard-{i:04}")
}

/// One group's traffic: its rate, shards and their relative weights.
#[derive(Debug, Clone)]
pub struct Traffic {
    /// Requests per second of the whole group at load 1.
    pub rate: f64,
    /// Shard names.
    pub shards: Vec<String>,
    /// Each shard's share of the group's normal traffic (sums to 1).
    pub weights: Vec<f64>,
    hit: LatencyModel,
    miss: LatencyModel,
    error: LatencyModel,
}

impl Traffic {
    /// `weights.len()` shards named `shard-NNNN`, sharing `rate` by `weights` (normalised here).
    pub fn new(rate: f64, weights: &[f64]) -> Traffic {
        let total: f64 = weights.iter().sum();
        let w = model();
        Traffic {
            rate,
            shards: (0..weights.len()).map(shard_name).collect(),
            weights: weights.iter().map(|x| x / total).collect(),
            hit: w.hit_latency,
            miss: w.miss_latency,
            error: w.error_latency,
        }
    }

    /// Normal requests per second of shard `i`.
    pub fn shard_rate(&self, i: usize) -> f64 {
        self.rate * self.weights[i]
    }

    /// Records `secs` seconds from `start` (the current window of `engine`) for every shard.
    /// `slice(t, i)` gives shard `i`'s behaviour in the second starting at `t`; consecutive
    /// seconds with equal slices are drawn together, so a steady shard costs a few records per
    /// window whatever its rate.
    pub fn emit(
        &self,
        engine: &mut impl Recorder,
        rng: &mut Rng,
        start: f64,
        secs: u64,
        slice: &impl Fn(f64, usize) -> Slice,
    ) {
        for i in 0..self.shards.len() {
            let mut from = 0;
            let mut current = slice(start, i);
            for s in 1..=secs {
                let next = (s < secs).then(|| slice(start + s as f64, i));
                if next != Some(current) {
                    self.emit_slice(engine, rng, i, &current, (s - from) as f64);
                    from = s;
                    if let Some(n) = next {
                        current = n;
                    }
                }
            }
        }
    }

    /// Draws `secs` seconds of shard `i` behaving as `sl`.
    fn emit_slice(
        &self,
        engine: &mut impl Recorder,
        rng: &mut Rng,
        i: usize,
        sl: &Slice,
        secs: f64,
    ) {
        let n = rng.poisson(self.shard_rate(i) * sl.load * secs);
        self.emit_classes(engine, rng, i, None, n, sl);
        if sl.key_rps > 0.0 {
            let k = rng.poisson(sl.key_rps * secs);
            self.emit_classes(engine, rng, i, Some(HOT_KEY), k, sl);
        }
    }

    /// Splits `n` requests into hits, misses and failures and records each class.
    fn emit_classes(
        &self,
        engine: &mut impl Recorder,
        rng: &mut Rng,
        i: usize,
        key: Option<&str>,
        n: u64,
        sl: &Slice,
    ) {
        let errors = rng.binomial(n, sl.error_ratio);
        let hits = rng.binomial(n - errors, sl.hit_ratio.clamp(0.0, 1.0));
        let backend = sl.latency_factor * sl.backend_factor;
        let classes = [
            (
                Outcome::Ok,
                CacheResult::Hit,
                hits,
                self.hit,
                sl.latency_factor,
            ),
            (
                Outcome::Ok,
                CacheResult::Miss,
                n - errors - hits,
                self.miss,
                backend,
            ),
            (sl.error, CacheResult::Miss, errors, self.error, backend),
        ];
        let mut obs = ObservationRef::new(GROUP, &self.shards[i]);
        obs.key = key;
        for (outcome, cache, count, lat, factor) in classes {
            obs.outcome = outcome;
            obs.cache = Some(cache);
            let (lat, factor) = match outcome {
                Outcome::Timeout if sl.deadline_ms.is_finite() => (
                    LatencyModel {
                        median_ms: sl.deadline_ms,
                        sigma: 0.0,
                    },
                    1.0,
                ),
                _ => (lat, factor),
            };
            // A success slower than the deadline would have been a timeout.
            let cap = sl.deadline_ms * 0.99;
            record_stratified(engine, rng, &mut obs, count, lat, factor, cap);
        }
    }
}

/// Records `count` requests as at most [`PARTS`] records, part j carrying the latency at a
/// random quantile within the j-th of [`PARTS`] equal strata of the lognormal `lat` (times
/// `factor`): the class's latency distribution in a few values, not one lump.
fn record_stratified(
    engine: &mut impl Recorder,
    rng: &mut Rng,
    obs: &mut ObservationRef<'_>,
    count: u64,
    lat: LatencyModel,
    factor: f64,
    cap_ms: f64,
) {
    let parts = count.min(PARTS);
    for j in 0..parts {
        obs.count = count / parts + u64::from(j < count % parts);
        let q = ((j as f64 + rng.uniform()) / parts as f64).clamp(1e-9, 1.0 - 1e-9);
        let ms = lat.median_ms * (lat.sigma * normal_quantile(q)).exp() * factor;
        obs.latency_ms = Some(ms.min(cap_ms).clamp(0.001, 3_600_000.0));
        engine.record(obs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewwatch_detectors::engine::EngineConfig;

    #[test]
    fn a_window_carries_the_rate_and_the_ratios_of_its_slices() {
        let mut e = Engine::new(EngineConfig::default(), 0.0);
        let mut rng = Rng::new(1);
        let t = Traffic::new(1000.0, &[1.0; 4]);
        let hot = |_: f64, i: usize| Slice {
            load: if i == 0 { 5.0 } else { 1.0 },
            ..Slice::normal()
        };
        t.emit(&mut e, &mut rng, 0.0, 10, &hot);
        let ev = e.advance(10.0);
        let g = &ev[0].snapshot.groups[0];
        let hot_share = g.shards[0].requests as f64 / g.requests as f64;
        assert!((hot_share - 5.0 / 8.0).abs() < 0.03, "{hot_share}");
        assert!(
            (g.requests as f64 - 20_000.0).abs() < 600.0,
            "{}",
            g.requests
        );
    }
}
