//! The engine's recording path with and without cache keys: what the what-if simulations
//! cost an observation, and that a batch without cache keys pays nothing for them.
//!
//! - `whatif/no_cache_key`: 100,000 observations over 64 shards through `Engine::record_batch`,
//!   no cache key: the windows alone (the simulations are never built).
//! - `whatif/cache_key_zipf_1m`: the same observations, each with a cache key drawn Zipf(1.0)
//!   from 10⁶ keys, at the default memory bound (the sample is full and its rate below 1, as
//!   after a few minutes of such traffic): the windows plus the simulations of the default
//!   eight policies.
//! - `whatif/cache_key_exact_10k`: cache keys from 10,000 keys, every one simulated (rate 1).
//!
//! Each prints the simulations' heap bytes once, after warming up.
//!
//! `cargo bench -p skewwatch-detectors --bench whatif`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skewwatch_detectors::engine::{Engine, EngineConfig};
use skewwatch_detectors::observation::{Batch, CacheKeyHash, CacheResult, ObservationRef};
use skewwatch_detectors::prng::{SplitMix64, mix};

const N: usize = 100_000;

/// `N` observations over 64 shards; with `keys`, each names a cache key drawn Zipf(1.0) from
/// that many, advancing `ts` by 1/4,000 s a record.
fn batch(keys: Option<u64>, start: f64, rng: &mut SplitMix64, cdf: &[f64]) -> Batch {
    let names: Vec<String> = (0..64).map(|i| format!("shard-{i}")).collect();
    let mut b = Batch::with_capacity(N);
    for i in 0..N {
        let r = rng.next_u64();
        let mut o = ObservationRef::new("metadata-db", &names[(r % 64) as usize]);
        o.latency_ms = Some((r >> 20) as f64 % 50.0 + 0.5);
        o.ts = Some(start + i as f64 / 4_000.0);
        if keys.is_some() {
            let u = rng.next_f64() * cdf.last().copied().unwrap_or(1.0);
            let k = cdf.partition_point(|&c| c < u) as u64;
            o.cache_key = Some(CacheKeyHash::new(mix(k)));
            o.cache = Some(if r.is_multiple_of(10) {
                CacheResult::Miss
            } else {
                CacheResult::Hit
            });
        }
        b.push(&o);
    }
    b
}

fn zipf_cdf(keys: u64) -> Vec<f64> {
    let mut sum = 0.0;
    (1..=keys)
        .map(|k| {
            sum += 1.0 / k as f64;
            sum
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("whatif");
    group.throughput(Throughput::Elements(N as u64));
    for (name, keys) in [
        ("no_cache_key", None),
        ("cache_key_zipf_1m", Some(1_000_000)),
        ("cache_key_exact_10k", Some(10_000)),
    ] {
        let cdf = zipf_cdf(keys.unwrap_or(1));
        let mut rng = SplitMix64::new(7);
        let mut engine = Engine::new(EngineConfig::default(), 0.0);
        // Warm: enough batches that the 1M-key sample is full and its rate has fallen.
        let mut t = 0.0;
        let batches: Vec<Batch> = (0..8)
            .map(|_| {
                let b = batch(keys, t, &mut rng, &cdf);
                t += N as f64 / 4_000.0;
                b
            })
            .collect();
        for b in &batches {
            engine.record_batch(b);
        }
        let snap = engine.close_window();
        if let Some(w) = &snap.snapshot.whatif {
            eprintln!(
                "{name}: whatif heap {} bytes, sample rate {:.3}",
                w.heap_bytes,
                w.groups.first().map_or(1.0, |g| g.sample_rate)
            );
        }
        let mut i = 0;
        group.bench_function(name, |bench| {
            bench.iter(|| {
                engine.record_batch(black_box(&batches[i % batches.len()]));
                i += 1;
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
