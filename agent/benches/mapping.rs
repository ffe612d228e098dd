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

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skewwatch::config::Config;
use skewwatch::ingest::mapping::Mapper;
use skewwatch::ingest::scrape::{Series, parse_page};
use skewwatch::ingest::statsd;
use skewwatch_detectors::observation::{Batch, Rejections};

/// The mappings of docs/ingest.md's examples.
const MAPPINGS: &str = r#"
statsd:
  mappings:
    - match: "http.*.requests"
      types: [c]
      group: "http-$1"
      shard: "${tag:backend}"
    - match: 'rpc\.(\w+)\.(\w+)\.latency'
      match_type: regex
      group: "rpc-$1"
      shard: "$2"
    - match: "db.*.query_time"
      types: [ms, h, d]
      group: orders-db
      shard: "$1"
      key: "${tag:table}"
      outcome: "${tag:outcome}"
    - match: "cache.get"
      types: [c]
      group: "${tag:service}-cache"
      shard: "${tag:shard}"
      cache: "${tag:result}"
"#;

fn mapper() -> Mapper {
    let c = Config::from_yaml(MAPPINGS, "bench").expect("valid mappings");
    Mapper::new(Arc::from(c.statsd_mappings))
}

/// 20 lines, half `db.*.query_time` timers, half `cache.get` counters, 32 shards.
fn mapped_datagram() -> Vec<u8> {
    let mut d = String::new();
    for i in 0..20 {
        if i % 2 == 0 {
            d.push_str(&format!(
                "db.s{}.query_time:{}.5|ms|#table:t{},outcome:ok,env:prod\n",
                i % 32,
                i + 3,
                i % 7
            ));
        } else {
            d.push_str(&format!(
                "cache.get:1|c|#service:meta,shard:s{},result:{},env:prod\n",
                i % 32,
                if i % 3 == 0 { "miss" } else { "hit" }
            ));
        }
    }
    d.into_bytes()
}

fn native_datagram() -> Vec<u8> {
    let mut d = String::new();
    for i in 0..20 {
        d.push_str(&format!(
            "skewwatch.request:{}.5|ms|#group:orders-db,shard:s{},key:t{}\n",
            i + 3,
            i % 32,
            i % 7
        ));
    }
    d.into_bytes()
}

fn statsd_benches(c: &mut Criterion) {
    let mut mapper = mapper();
    let mut group = c.benchmark_group("mapping");
    for (name, datagram) in [
        ("statsd_mapped_datagram", mapped_datagram()),
        ("statsd_native_datagram_with_mappings", native_datagram()),
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
