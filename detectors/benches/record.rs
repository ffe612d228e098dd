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
//! - `record/with_key_1000_shards_two_threads`: the same stream with the shards split in two
//!   by name, each half recorded on its own thread into windows of its own. What a pipeline
//!   partitioned by shard would reach on two cores, measured before it is built
//!   (docs/performance.md, Bottlenecks).
//! - `close/1000_shards`: turning a window of 1,000 shards into a snapshot (percentiles,
//!   merged histograms, skew statistics, top keys).
//!
//! `cargo bench -p skewwatch-detectors --bench record`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use skewwatch_detectors::observation::{Batch, ObservationRef, Outcome};
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

/// `batch`'s records dealt into `parts` batches by their shard name, so that every shard
/// lands in exactly one part.
fn split_by_shard(batch: &Batch, parts: usize) -> Vec<Batch> {
    let mut out: Vec<Batch> = (0..parts)
        .map(|_| Batch::with_capacity(batch.len() / parts + 1))
        .collect();
    for o in batch.iter() {
        let h = o.shard.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        out[(h % parts as u64) as usize].push(&o);
    }
    out
}

fn bench_record_in_parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("record");
    let n = 100_000;
    g.throughput(Throughput::Elements(n as u64));
    let whole = batch(1_000, Some(1_000_000), Placement::Independent, n);
    let parts = split_by_shard(&whole, 2);
    let mut windows: Vec<Windows> = parts
        .iter()
        .map(|_| Windows::new(WindowConfig::default(), 0.0))
        .collect();
    g.bench_function("with_key_1000_shards_two_threads", |bench| {
        bench.iter(|| {
            std::thread::scope(|s| {
                for (w, b) in windows.iter_mut().zip(&parts) {
                    s.spawn(move || w.record_batch(black_box(b)));
                }
            });
        })
    });
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
