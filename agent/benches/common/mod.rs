//! Inputs shared by the agent's benchmarks (`ingest`, `outputs` and the instruction-count
//! harness `instructions`), so every figure in docs/performance.md is measured on the same
//! data. All of it is deterministic.

// Each benchmark binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::fmt::Write as _;

use skewwatch::loadgen::Workload;
use skewwatch_detectors::observation::{Batch, ObservationRef, Outcome};
use skewwatch_detectors::prng::SplitMix64;
use skewwatch_detectors::snapshot::WindowSnapshot;
use skewwatch_detectors::window::{WindowConfig, Windows};

/// A typical line: four tags and a sample rate, 88 bytes.
pub const LINE: &[u8] =
    b"skewwatch.request:12.75|ms|@0.5|#group:metadata-db,shard:shard-17,key:user:48213,cache:hit";

/// Lines of the kinds a busy client sends, cycled to fill one datagram.
pub const LINES: [&str; 6] = [
    "skewwatch.request:12.75|ms|@0.5|#group:metadata-db,shard:shard-17,key:user:48213,cache:hit",
    "skewwatch.request:3.2|ms|#group:metadata-db,shard:shard-03,key:user:77,cache:miss",
    "skewwatch.request:250|ms|#group:metadata-db,shard:shard-17,outcome:timeout,key:user:48213",
    "skewwatch.request:1|c|@0.1|#group:model-serving,shard:gpu-4,outcome:throttled",
    "skewwatch.request:0.842|d|#group:model-serving,shard:gpu-1,key:resnet50",
    "skewwatch.request:41|h|#group:metadata-db,shard:shard-08,key:,outcome:not_found",
];

/// Largest datagram that fits a 1,500-byte Ethernet MTU with room for headers, as StatsD
/// clients send.
pub const DATAGRAM_BYTES: usize = 1_400;

/// One datagram of [`LINES`] (the feature-rich mix) and its line count.
pub fn mixed_datagram() -> (Vec<u8>, usize) {
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

/// The workload `skewwatch bench` sends by default: one group, 64 shards, optional keys.
pub fn workload(shards: usize, keys: usize) -> Workload {
    Workload {
        groups: 1,
        shards,
        keys,
        uniform_keys: false,
        seed: 1,
        plain: false,
    }
}

/// `count` datagrams of `skewwatch bench` lines (1,400 bytes each) and their total lines.
pub fn bench_datagrams(count: usize, shards: usize, keys: usize) -> (Vec<Vec<u8>>, usize) {
    let pool = workload(shards, keys).datagrams(count * 30, DATAGRAM_BYTES);
    let datagrams: Vec<Vec<u8>> = pool.datagrams.into_iter().take(count).collect();
    let lines = pool.lines.iter().take(count).map(|&n| n as usize).sum();
    (datagrams, lines)
}

/// An NDJSON body of `records` records with every field set, about 160 bytes each.
pub fn ndjson_body(records: usize) -> Vec<u8> {
    let outcomes = ["ok", "ok", "ok", "error", "timeout", "not_found"];
    let mut body = String::with_capacity(records * 160);
    for i in 0..records {
        let _ = writeln!(
            body,
            "{{\"ts\":{}.{:03},\"group\":\"metadata-db\",\"shard\":\"shard-{:02}\",\"key\":\"user:{}\",\"count\":{},\"latency_ms\":{}.{},\"outcome\":\"{}\",\"cache\":\"{}\"}}",
            1_700_000_000 + i / 100,
            i % 1000,
            i % 32,
            (i * 7919) % 10_000,
            1 + i % 3,
            i % 200,
            i % 10,
            outcomes[i % outcomes.len()],
            if i.is_multiple_of(4) { "miss" } else { "hit" },
        );
    }
    body.into_bytes()
}

/// An NDJSON replay trace: `records` records at `rate` records per second of trace time,
/// over `shards` shards of one group, with keys when `keys > 0`.
pub fn trace(records: usize, rate: usize, shards: usize, keys: usize) -> Vec<u8> {
    let mut out = String::with_capacity(records * 110);
    let mut rng = SplitMix64::new(1);
    for i in 0..records {
        let r = rng.next_u64();
        let ts = 1_700_000_000.0 + i as f64 / rate as f64;
        let _ = write!(
            out,
            "{{\"ts\":{ts:.4},\"group\":\"metadata-db\",\"shard\":\"shard-{}\",\"latency_ms\":{}.{}",
            r % shards as u64,
            (r >> 20) % 50,
            (r >> 30) % 10
        );
        if keys > 0 {
            let _ = write!(out, ",\"key\":\"user:{}\"", (r >> 36) % keys as u64);
        }
        out.push_str("}\n");
    }
    out.into_bytes()
}

/// A batch of `n` observations over `shards` shards, with a latency each and keys drawn
/// skewed from `keys` distinct ones when given.
pub fn batch(shards: usize, keys: Option<usize>, n: usize) -> Batch {
    let names: Vec<String> = (0..shards).map(|i| format!("shard-{i}")).collect();
    let key_names: Vec<String> = (0..keys.unwrap_or(1))
        .map(|i| format!("user:{i}"))
        .collect();
    let mut b = Batch::with_capacity(n);
    let mut rng = SplitMix64::new(1);
    for _ in 0..n {
        let r = rng.next_u64();
        let mut o = ObservationRef::new("metadata-db", &names[(r % shards as u64) as usize]);
        o.latency_ms = Some((r >> 20) as f64 % 50.0 + 0.5);
        if r.is_multiple_of(50) {
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

/// A closed window of one group with `shards` shards, each with latencies, errors, cache
/// results and keys: what `/metrics` renders at that size.
pub fn snapshot(shards: usize) -> WindowSnapshot {
    let cfg = WindowConfig {
        max_shards_per_group: shards.max(1024),
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    let mut rng = SplitMix64::new(1);
    for i in 0..shards * 20 {
        let r = rng.next_u64();
        let shard = format!("shard-{}", i % shards);
        let key = format!("user:{}", r % 5000);
        let mut o = ObservationRef::new("metadata-db", &shard);
        o.latency_ms = Some((r >> 20) as f64 % 80.0 + 0.1);
        o.key = Some(&key);
        o.cache = Some(if r.is_multiple_of(3) {
            skewwatch_detectors::observation::CacheResult::Miss
        } else {
            skewwatch_detectors::observation::CacheResult::Hit
        });
        if r.is_multiple_of(40) {
            o.outcome = Outcome::Error;
        }
        w.record(&o);
    }
    w.close(10.0)
}

/// The mappings of docs/ingest.md's examples.
pub const MAPPINGS: &str = r#"
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

pub fn mapper() -> skewwatch::ingest::statsd::mapping::Mapper {
    let c = skewwatch::app::Config::from_yaml(MAPPINGS, "bench").expect("valid mappings");
    skewwatch::ingest::statsd::mapping::Mapper::new(std::sync::Arc::from(c.startup.statsd.mappings))
}

/// 20 lines, half `db.*.query_time` timers, half `cache.get` counters, 32 shards.
pub fn mapped_datagram() -> Vec<u8> {
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

pub fn native_datagram() -> Vec<u8> {
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

/// What `skewwatch replay` does with `trace`, on one thread: its reader thread's code (blocks,
/// `ndjson::for_each_line`, batches) handing each batch straight to its engine thread's code
/// (`replay::replay_on_this_thread`), output thrown away. Returns the windows closed.
pub fn replay(trace: &[u8], config: &skewwatch::app::Config) -> usize {
    let mut summary = skewwatch::replay::Summary::default();
    skewwatch::replay::replay_on_this_thread(
        trace,
        config,
        86_400.0,
        &mut std::io::sink(),
        &mut summary,
    )
    .expect("a valid trace");
    summary.windows() as usize
}
