//! Ingest benchmarks: the first stage of the flow, where the UDP and HTTP budgets are spent,
//! and `replay`, which is ingest plus the engine in trace time.
//!
//! - `statsd_parse_line`: one feature-rich line (88 bytes, four tags, a sample rate).
//! - `statsd_parse_datagram_1400B`: a datagram of the feature-rich mix.
//! - `statsd_parse_bench_datagrams`: the datagrams `skewwatch bench` sends (1,400 bytes,
//!   about 20 lines of ~65 bytes with a key), the figure behind the UDP target.
//! - `ndjson_parse_body_1000`: an HTTP body of 1,000 records with every field.
//! - `replay_records`: what `skewwatch replay` does per trace record, its reader thread's code
//!   (blocks of lines parsed where they lie into batches) and the engine's work in trace time
//!   on one thread, over 100,000 records of 10 s windows at 64 shards.
//!
//! Throughput is reported in records (elements). docs/performance.md has the medians.
//!
//! `cargo bench -p skewwatch --bench ingest`

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skewwatch::app::Config;
use skewwatch::ingest::{ndjson, statsd};
use skewwatch_detectors::observation::{Batch, Rejections};

fn statsd_benches(c: &mut Criterion) {
    assert!(statsd::parse_line(common::LINE).is_ok());
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(1));
    group.bench_function("statsd_parse_line", |b| {
        b.iter(|| statsd::parse_line(black_box(common::LINE)))
    });

    let (datagram, lines) = common::mixed_datagram();
    let mut batch = Batch::with_capacity(lines);
    let mut rejected = Rejections::default();
    assert_eq!(
        statsd::parse_datagram(&datagram, &mut batch, &mut rejected),
        lines
    );
    group.throughput(Throughput::Elements(lines as u64));
    group.bench_function("statsd_parse_datagram_1400B", |b| {
        b.iter(|| {
            batch.clear();
            statsd::parse_datagram(black_box(&datagram), &mut batch, &mut rejected)
        })
    });

    let (datagrams, lines) = common::bench_datagrams(64, 64, 10_000);
    let mut batch = Batch::with_capacity(lines);
    group.throughput(Throughput::Elements(lines as u64));
    group.bench_function("statsd_parse_bench_datagrams", |b| {
        b.iter(|| {
            batch.clear();
            for d in &datagrams {
                statsd::parse_datagram(black_box(d), &mut batch, &mut rejected);
            }
        })
    });
    assert_eq!(rejected.total(), 0);
    group.finish();
}

fn ndjson_benches(c: &mut Criterion) {
    const RECORDS: usize = 1_000;
    let body = common::ndjson_body(RECORDS);
    let mut batch = Batch::with_capacity(RECORDS);
    assert_eq!(ndjson::parse_body(&body, &mut batch).accepted, RECORDS);
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.bench_function("ndjson_parse_body_1000", |b| {
        b.iter(|| {
            batch.clear();
            ndjson::parse_body(black_box(&body), &mut batch).accepted
        })
    });
    group.finish();
}

fn replay_benches(c: &mut Criterion) {
    const RECORDS: usize = 100_000;
    let trace = common::trace(RECORDS, 10_000, 64, 10_000);
    let config = Config::embedded();
    let mut group = c.benchmark_group("replay");
    group.sample_size(20);
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.bench_function("replay_records", |b| {
        b.iter(|| common::replay(black_box(&trace), &config))
    });
    group.finish();
}

criterion_group!(benches, statsd_benches, ndjson_benches, replay_benches);
criterion_main!(benches);
