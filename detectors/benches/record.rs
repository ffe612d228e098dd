//! The in-process recording path: one observation into its window, and closing a window.
//!
//! - `record/no_key`, `record/with_key`: 100,000 observations with a latency over 64 shards of
//!   one group, without a key and with keys drawn skewed from 100,000 (the Space-Saving
//!   summaries of the group and the shard both see each key). The targets are 20 M/s and
//!   8 M/s on one core (docs/performance.md).
//! - `record/with_key_on_its_shard`: the same keys, each always on one shard (a key's shard
//!   is its id modulo 64), as in a sharded store where a key lives on one shard; each shard's
//!   summary then sees about 1/64 of the keys instead of all of them.
//! - `record/no_key_1000_shards`: the same over 1,000 shards, where the per-shard histograms
//!   no longer fit the first-level caches.
//! - `record/with_key_1000_shards`: 1,000 shards and keys drawn from 10⁶, what the live
//!   pipeline meets under the StatsD bench with a million keys.
//! - `record/with_key_1000_shards_record_threads_2` (and `_3`): the same stream through
//!   [`Recording`] with `window.record_threads` at 2 (and 3): the calling thread deals records
//!   by shard, records its own part and waits until the other threads have recorded theirs.
//! - `close/1000_shards`: turning a window of 1,000 shards into a snapshot (percentiles,
//!   merged histograms, skew statistics, top keys).
//!
//! `cargo bench -p skewwatch-detectors --bench record`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use skewwatch_detectors::observation::{Batch, ObservationRef, Outcome};
use skewwatch_detectors::parts::Recording;
use skewwatch_detectors::prng::SplitMix64;
use skewwatch_detectors::window::{WindowConfig, Windows};

/// How a keyed observation's shard is chosen.
#[derive(Clone, Copy)]
enum Placement {
    /// Independently of its key: every shard sees every key.
    Independent,
    /// By its key: a key always lands on the same shard.
    ByKey,
}

fn batch(shards: usize, keys: Option<usize>, placement: Placement, n: usize) -> Batch {
    let names: Vec<String> = (0..shards).map(|i| format!("shard-{i}")).collect();
    let key_names: Vec<String> = (0..keys.unwrap_or(1))
        .map(|i| format!("user:{i}"))
        .collect();
    let mut b = Batch::with_capacity(n);
    // Seeded, so the shard and key mix is the same on every run.
    let mut rng = SplitMix64::new(0x5EED);
    for _ in 0..n {
        let r = rng.next_u64();
        // Skewed key choice: squaring a uniform draw favours low key ids.
        let u = (r >> 11) as f64 / (1u64 << 53) as f64;
        let key = ((u * u) * key_names.len() as f64) as usize;
        let shard = match placement {
            Placement::Independent => (r % shards as u64) as usize,
            Placement::ByKey => key % shards,
        };
        let mut o = ObservationRef::new("metadata-db", &names[shard]);
        o.latency_ms = Some((r >> 20) as f64 % 50.0 + 0.5);
        if r.is_multiple_of(50) {
            o.outcome = Outcome::Timeout;
        }
        if keys.is_some() {
            o.key = Some(&key_names[key]);
        }
        b.push(&o);
    }
    b
}

fn bench_record(c: &mut Criterion) {
    let mut g = c.benchmark_group("record");
    let n = 100_000;
    g.throughput(Throughput::Elements(n as u64));
    for (name, shards, keys, placement) in [
        ("no_key", 64, None, Placement::Independent),
        ("with_key", 64, Some(100_000), Placement::Independent),
        ("with_key_on_its_shard", 64, Some(100_000), Placement::ByKey),
        ("no_key_1000_shards", 1_000, None, Placement::Independent),
        // The shards' histograms and key summaries far outgrow the second-level cache.
        (
            "with_key_1000_shards",
            1_000,
            Some(1_000_000),
            Placement::Independent,
        ),
    ] {
        let b = batch(shards, keys, placement, n);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        g.bench_function(name, |bench| bench.iter(|| w.record_batch(black_box(&b))));
    }
    g.finish();
}

fn bench_record_in_parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("record");
    let n = 100_000;
    g.throughput(Throughput::Elements(n as u64));
    let b = batch(1_000, Some(1_000_000), Placement::Independent, n);
    for threads in [2, 3] {
        let cfg = WindowConfig {
            record_threads: threads,
            ..WindowConfig::default()
        };
        let mut r = Recording::new(cfg, 0.0);
        let name = format!("with_key_1000_shards_record_threads_{threads}");
        g.bench_function(name, |bench| {
            bench.iter(|| {
                r.record_batch(black_box(&b));
                r.flush();
            })
        });
    }
    g.finish();
}

fn bench_close(c: &mut Criterion) {
    let mut g = c.benchmark_group("close");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1_000));
    let b = batch(1_000, Some(100_000), Placement::Independent, 200_000);
    let mut filled = Windows::new(WindowConfig::default(), 0.0);
    filled.record_batch(&b);
    g.bench_function("1000_shards", |bench| {
        bench.iter_batched_ref(
            || filled.clone(),
            |w| w.close(10.0).groups.len(),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench_record, bench_record_in_parts, bench_close);
criterion_main!(benches);
