//! Ingest parser benchmarks: the first stage of the flow, where the UDP budget is spent.
//!
//! `statsd_parse_line` and `statsd_parse_datagram_1400B` measure the StatsD path (the target
//! is about 30 ns a line, so that one core takes well over 3 million lines a second);
//! `ndjson_parse_body_1000` measures an HTTP body of 1,000 records. Throughput is reported in
//! records (elements).
//!
//! Run with `cargo bench -p skewwatch --bench ingest`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skewwatch::ingest::{ndjson, statsd};
use skewwatch_detectors::observation::{Batch, Rejections};

/// A typical line: four tags and a sample rate, 88 bytes.
const LINE: &[u8] =
    b"skewwatch.request:12.75|ms|@0.5|#group:metadata-db,shard:shard-17,key:user:48213,cache:hit";

/// Lines of the kinds a busy client sends, cycled to fill one datagram.
const LINES: [&str; 6] = [
    "skewwatch.request:12.75|ms|@0.5|#group:metadata-db,shard:shard-17,key:user:48213,cache:hit",
    "skewwatch.request:3.2|ms|#group:metadata-db,shard:shard-03,key:user:77,cache:miss",
    "skewwatch.request:250|ms|#group:metadata-db,shard:shard-17,outcome:timeout,key:user:48213",
    "skewwatch.request:1|c|@0.1|#group:model-serving,shard:gpu-4,outcome:throttled",
    "skewwatch.request:0.842|d|#group:model-serving,shard:gpu-1,key:resnet50",
    "skewwatch.request:41|h|#group:metadata-db,shard:shard-08,key:,outcome:not_found",
];

/// Largest datagram that fits a 1,500-byte Ethernet MTU with room for headers, as StatsD
/// clients send.
const DATAGRAM_BYTES: usize = 1_400;

fn datagram() -> (Vec<u8>, usize) {
    let mut datagram = Vec::with_capacity(DATAGRAM_BYTES);
    let mut lines = 0;
    for line in LINES.iter().cycle() {
        if datagram.len() + line.len() + 1 > DATAGRAM_BYTES {
            break;
        }
        datagram.extend_from_slice(line.as_bytes());
        datagram.push(b'\n');
        lines += 1;
    }
    (datagram, lines)
}

fn ndjson_body(records: usize) -> Vec<u8> {
    let outcomes = ["ok", "ok", "ok", "error", "timeout", "not_found"];
    let mut body = String::with_capacity(records * 160);
    for i in 0..records {
        body.push_str(&format!(
            "{{\"ts\":{}.{:03},\"group\":\"metadata-db\",\"shard\":\"shard-{:02}\",\"key\":\"user:{}\",\"count\":{},\"latency_ms\":{}.{},\"outcome\":\"{}\",\"cache\":\"{}\"}}\n",
            1_700_000_000 + i / 100,
            i % 1000,
            i % 32,
            (i * 7919) % 10_000,
            1 + i % 3,
            i % 200,
            i % 10,
            outcomes[i % outcomes.len()],
            if i % 4 == 0 { "miss" } else { "hit" },
        ));
    }
    body.into_bytes()
}

fn statsd_benches(c: &mut Criterion) {
    assert!(statsd::parse_line(LINE).is_ok());
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(1));
    group.bench_function("statsd_parse_line", |b| {
        b.iter(|| statsd::parse_line(black_box(LINE)))
    });

    let (datagram, lines) = datagram();
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
    group.finish();
}

fn ndjson_benches(c: &mut Criterion) {
    const RECORDS: usize = 1_000;
    let body = ndjson_body(RECORDS);
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

criterion_group!(benches, statsd_benches, ndjson_benches);
criterion_main!(benches);
