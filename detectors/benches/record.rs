//! The in-process recording path: one observation into its window.
//!
//! `cargo bench -p skewwatch-detectors --bench record`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skewwatch_detectors::observation::{Batch, ObservationRef, Outcome};
use skewwatch_detectors::window::{WindowConfig, Windows};

/// Deterministic xorshift so the shard and key mix is the same on every run.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn batch(shards: usize, keys: Option<usize>, n: usize) -> Batch {
    let names: Vec<String> = (0..shards).map(|i| format!("shard-{i}")).collect();
    let key_names: Vec<String> = (0..keys.unwrap_or(1)).map(|i| format!("user:{i}")).collect();
    let mut b = Batch::with_capacity(n);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..n {
        let r = next(&mut s);
        let mut o = ObservationRef::new("metadata-db", &names[(r % shards as u64) as usize]);
        o.latency_ms = Some((r >> 20) as f64 % 50.0 + 0.5);
        if r % 50 == 0 {
            o.outcome = Outcome::Timeout;
        }
        if keys.is_some() {
            // Skewed key choice: squaring a uniform draw favours low key ids.
            let u = (r >> 11) as f64 / (1u64 << 53) as f64;
            o.key = Some(&key_names[((u * u) * key_names.len() as f64) as usize]);
        }
        b.push(&o);
    }
    b
}

fn bench_record(c: &mut Criterion) {
    let mut g = c.benchmark_group("record");
    let n = 100_000;
    g.throughput(Throughput::Elements(n as u64));
    for (name, keys) in [("no_key", None), ("with_key", Some(100_000))] {
        let b = batch(64, keys, n);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        g.bench_function(name, |bench| {
            bench.iter(|| {
                for o in b.iter() {
                    w.record(black_box(&o));
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_record);
criterion_main!(benches);
