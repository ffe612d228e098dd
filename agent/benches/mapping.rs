//! Costs of the inputs that read telemetry a service already emits (docs/ingest.md has the
//! figures):
//!
//! - `statsd_mapped_datagram`: a datagram of 20 DogStatsD lines under a service's own names,
//!   through four mappings (globs and a regex; the line's mapping is the third on average),
//!   as the UDP receiver parses it.
//! - `statsd_native_datagram_with_mappings`: native `skewwatch.request` lines with the same
//!   mappings configured: they never reach the mappings.
//! - `scrape_page_1000_series`: one scrape of a page of 1,000 counter series (250 shards by
//!   four outcomes): parsing the page and turning the growth into observations.
//!
//! `cargo bench -p skewwatch --bench mapping -- --warm-up-time 1 --measurement-time 3`

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skewwatch::app::Config;
use skewwatch::ingest::scrape::{Series, parse_page};
use skewwatch::ingest::statsd;
use skewwatch_detectors::observation::{Batch, Rejections};

fn statsd_benches(c: &mut Criterion) {
    let mut mapper = common::mapper();
    let mut group = c.benchmark_group("mapping");
    for (name, datagram) in [
        ("statsd_mapped_datagram", common::mapped_datagram()),
        (
            "statsd_native_datagram_with_mappings",
            common::native_datagram(),
        ),
    ] {
        let mut batch = Batch::with_capacity(64);
        let mut rejected = Rejections::default();
        let mut skipped = 0;
        let lines = statsd::parse_datagram_mapped(
            &datagram,
            &mut mapper,
            &mut batch,
            &mut rejected,
            &mut skipped,
        );
        assert_eq!((lines, rejected.total(), skipped), (20, 0, 0), "{name}");
        group.throughput(Throughput::Elements(lines as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                batch.clear();
                statsd::parse_datagram_mapped(
                    black_box(&datagram),
                    &mut mapper,
                    &mut batch,
                    &mut rejected,
                    &mut skipped,
                )
            })
        });
    }
    group.finish();
}

/// A page of `series` counter series over 250 shards and four outcomes, each grown by `add`.
fn page(series: usize, add: usize) -> String {
    let outcomes = ["ok", "error", "timeout", "not_found"];
    let mut p = String::from("# HELP db_requests_total Requests.\n# TYPE db_requests counter\n");
    for i in 0..series {
        p.push_str(&format!(
            "db_requests_total{{shard=\"s{}\",outcome=\"{}\"}} {}\n",
            i / 4,
            outcomes[i % 4],
            1000 + i * 7 + add
        ));
    }
    p
}

fn scrape_benches(c: &mut Criterion) {
    let yaml = "scrape:\n  - name: db\n    url: http://127.0.0.1:9/metrics\n    metrics: [db_requests_total]\n    outcome_label: outcome\n";
    let job = Config::from_yaml(yaml, "bench")
        .expect("valid job")
        .startup
        .scrape
        .remove(0);
    let pages = [page(1000, 0), page(1000, 5)];
    let mut series = Series::default();
    let mut batch = Batch::with_capacity(1000);
    let mut rejected = Rejections::default();
    series.observe(&job, &parse_page(&pages[0]), &mut batch, &mut rejected);
    series.observe(&job, &parse_page(&pages[1]), &mut batch, &mut rejected);
    assert_eq!((batch.len(), series.len()), (1000, 1000));
    let mut group = c.benchmark_group("mapping");
    group.throughput(Throughput::Elements(1000));
    let mut turn = 0;
    group.bench_function("scrape_page_1000_series", |b| {
        b.iter(|| {
            // Alternate pages so every scrape sees growth (or a restart) and makes 1,000
            // observations.
            turn ^= 1;
            batch.clear();
            let page = parse_page(black_box(&pages[turn]));
            series.observe(&job, &page, &mut batch, &mut rejected)
        })
    });
    group.finish();
}

criterion_group!(benches, statsd_benches, scrape_benches);
criterion_main!(benches);
