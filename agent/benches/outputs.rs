//! Output benchmarks: what a `/metrics` scrape costs at 1,000 shards.
//!
//! - `render_snapshot_1000_shards`: the derived skew series of one group of 1,000 shards
//!   (shares, rates, p99s, error and cache ratios, key shares).
//! - `render_page_1000_shards`: the whole page, including the self-metrics registry, with no
//!   counters yet (the next figure is what they add).
//! - `render_counters_1000_shards`: the cumulative families of the same shards (requests by
//!   outcome, cache results, the latency histogram, key counters), what a scrape adds to the
//!   page.
//! - `add_window_1000_shards`: adding one closed window to the counters and publishing them,
//!   what the pipeline pays once per window.
//! - `history_answer_60x50`: the live view's `/api/v1/history` answer for 60 windows of a group
//!   of 50 shards, serialized (its size is printed once); `history_record_50_shards`: adding a
//!   window to a full 60-window ring and publishing it, what the pipeline pays once per window.
//!
//! The HTTP round trip adds little on loopback; docs/performance.md has the end-to-end figure
//! (`curl` against a loaded agent) beside these.
//!
//! `cargo bench -p skewwatch --bench outputs`

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prometheus::Registry;
use skewwatch::app::Metrics;
use skewwatch::http::history::{self, HistoryQuery};
use skewwatch::outputs::config::Profile;
use skewwatch::outputs::history::Recorder;
use skewwatch::outputs::metrics;
use skewwatch::outputs::totals::{self, Accumulator, Totals, TotalsConfig};

fn render_benches(c: &mut Criterion) {
    let snap = common::snapshot(1_000);
    assert_eq!(snap.groups[0].shards.len(), 1_000);
    let registry = Registry::new();
    let _metrics = Metrics::register(registry.clone()).expect("fresh registry");
    let mut group = c.benchmark_group("outputs");
    group.throughput(Throughput::Elements(1_000));
    let mut out = String::new();
    group.bench_function("render_snapshot_1000_shards", |b| {
        b.iter(|| {
            out.clear();
            metrics::render_snapshot(&mut out, black_box(&snap), 10, Profile::Full);
            out.len()
        })
    });
    let cfg = TotalsConfig {
        retention_secs: 3600.0,
        max_groups: 64,
        max_shards_per_group: 1024,
        max_shards_total: 1024,
        keys_per_group: 10,
        latency_buckets_secs: snap_buckets(),
        profile: Profile::Full,
    };
    let no_counters = Totals::new(cfg.clone());
    group.bench_function("render_page_1000_shards", |b| {
        b.iter(|| metrics::render(&registry, black_box(&snap), &[], &no_counters, 10).len())
    });
    let mut totals = Totals::new(cfg.clone());
    totals.add(&snap);
    group.bench_function("render_counters_1000_shards", |b| {
        b.iter(|| {
            out.clear();
            totals::render(&mut out, black_box(&totals));
            out.len()
        })
    });
    let (mut acc, _rx) = Accumulator::new(cfg);
    group.bench_function("add_window_1000_shards", |b| {
        b.iter(|| acc.add(black_box(&snap)))
    });
    group.finish();
}

/// The bucket bounds the benchmark snapshot was counted with.
fn snap_buckets() -> Vec<f64> {
    skewwatch_detectors::window::WindowConfig::default().latency_buckets_secs
}

fn history_benches(c: &mut Criterion) {
    let snap = common::snapshot(50);
    let (mut recorder, rx) = Recorder::new(60, 1e-3);
    for _ in 0..60 {
        recorder.push(&snap);
    }
    let current = rx.borrow().clone();
    let query = HistoryQuery::default();
    let size = serde_json::to_vec(&history::reply(&current, &snap, &query, 10.0))
        .expect("serializable")
        .len();
    eprintln!("history answer, 60 windows x 50 shards: {size} bytes");
    let mut group = c.benchmark_group("outputs");
    group.bench_function("history_answer_60x50", |b| {
        b.iter(|| {
            let reply = history::reply(black_box(&current), &snap, &query, 10.0);
            serde_json::to_vec(&reply).expect("serializable").len()
        })
    });
    group.bench_function("history_record_50_shards", |b| {
        b.iter(|| recorder.push(black_box(&snap)))
    });
    group.finish();
}

criterion_group!(benches, render_benches, history_benches);
criterion_main!(benches);
