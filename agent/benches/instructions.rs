//! Instruction counts of the hot paths, for callgrind: stable on a shared, noisy machine where
//! wall-clock medians are not, so before/after comparisons of an optimization use these.
//!
//! Each path runs inside [`measured`], and `scripts/instructions.sh` runs this binary under
//! `valgrind --tool=callgrind --toggle-collect=*measured*`, so set-up is not counted, then
//! divides the instructions by the items this binary prints (`items <n>`).
//!
//! ```text
//! scripts/instructions.sh                 # every path
//! target/release/deps/instructions-* statsd_datagram 2000   # one path, no valgrind
//! ```
//!
//! Run without a path (as `cargo bench` does), it runs every path once with small sizes and
//! prints nanoseconds per item, as a smoke test.

#![expect(clippy::disallowed_types, reason = "a benchmark measures real time")]

mod common;

use std::hint::black_box;
use std::time::Instant;

use skewwatch::app::Config;
use skewwatch::ingest::{ndjson, statsd};
use skewwatch_detectors::observation::{Batch, Rejections};
use skewwatch_detectors::window::{WindowConfig, Windows};

/// The paths, each with its default repetitions.
const PATHS: &[(&str, usize)] = &[
    ("statsd_datagram", 2_000),
    ("statsd_mixed_datagram", 2_000),
    ("statsd_datagram_mapped", 2_000),
    ("statsd_mixed_datagram_mapped", 2_000),
    ("statsd_mapped_lines", 2_000),
    ("ndjson_body", 20),
    ("record_no_key", 200_000),
    ("record_with_key", 200_000),
    ("record_with_hot_keys", 200_000),
    ("record_no_key_1000_shards", 200_000),
    ("replay", 100_000),
    ("render_1000_shards", 5),
];

/// Runs `f` where callgrind collects; never inlined, so its name is there to toggle on.
#[inline(never)]
fn measured<F: FnMut()>(mut f: F) {
    f();
}

/// Runs one path `reps` times (its unit: datagrams, bodies, observations, renders) and
/// returns the items processed (lines, records, observations, shards rendered).
fn run(path: &str, reps: usize) -> Option<usize> {
    Some(match path {
        "statsd_datagram" | "statsd_mixed_datagram" => {
            let (datagrams, lines) = if path == "statsd_datagram" {
                common::bench_datagrams(64, 64, 10_000)
            } else {
                let (d, n) = common::mixed_datagram();
                (vec![d], n)
            };
            let mut batch = Batch::with_capacity(8192);
            let mut rejected = Rejections::default();
            measured(|| {
                for i in 0..reps {
                    if batch.len() > 4096 {
                        batch.clear();
                    }
                    let d = &datagrams[i % datagrams.len()];
                    black_box(statsd::parse_datagram(d, &mut batch, &mut rejected));
                }
            });
            assert_eq!(rejected.total(), 0);
            reps * lines / datagrams.len()
        }
        "statsd_datagram_mapped" | "statsd_mixed_datagram_mapped" | "statsd_mapped_lines" => {
            // The receiver's path with statsd.mappings configured: native lines (which never
            // reach the mappings), or lines under a service's own names (which all do).
            let (datagrams, lines) = match path {
                "statsd_datagram_mapped" => common::bench_datagrams(64, 64, 10_000),
                "statsd_mixed_datagram_mapped" => {
                    let (d, n) = common::mixed_datagram();
                    (vec![d], n)
                }
                _ => (vec![common::mapped_datagram()], 20),
            };
            let mut mapper = common::mapper();
            let mut batch = Batch::with_capacity(8192);
            let mut rejected = Rejections::default();
            let mut skipped = 0;
            measured(|| {
                for i in 0..reps {
                    if batch.len() > 4096 {
                        batch.clear();
                    }
                    let d = &datagrams[i % datagrams.len()];
                    black_box(statsd::parse_datagram_mapped(
                        d,
                        &mut mapper,
                        &mut batch,
                        &mut rejected,
                        &mut skipped,
                    ));
                }
            });
            assert_eq!((rejected.total(), skipped), (0, 0));
            reps * lines / datagrams.len()
        }
        "ndjson_body" => {
            let body = common::ndjson_body(1_000);
            let mut batch = Batch::with_capacity(1_000);
            measured(|| {
                for _ in 0..reps {
                    batch.clear();
                    black_box(ndjson::parse_body(&body, &mut batch).accepted);
                }
            });
            reps * 1_000
        }
        "record_no_key"
        | "record_with_key"
        | "record_with_hot_keys"
        | "record_no_key_1000_shards" => {
            let (shards, keys) = match path {
                "record_no_key" => (64, None),
                "record_with_key" => (64, Some(100_000)),
                // Few keys, all monitored by both summaries: the increment path, where the
                // with-key stream above is almost all filtering and eviction.
                "record_with_hot_keys" => (64, Some(20)),
                _ => (1_000, None),
            };
            let b = common::batch(shards, keys, reps);
            let mut w = Windows::new(WindowConfig::default(), 0.0);
            // Warm: histograms allocated and key summaries full, as in a running agent.
            w.record_batch(&b);
            measured(|| w.record_batch(black_box(&b)));
            reps
        }
        "replay" => {
            // What `skewwatch replay` does per record, its two threads' work on one: the
            // reader's blocks, lines and batches, then the engine in trace time.
            let trace = common::trace(reps, 100_000, 64, 10_000);
            let config = Config::embedded();
            let mut windows = 0;
            measured(|| windows = common::replay(&trace, &config));
            black_box(windows);
            reps
        }
        "render_1000_shards" => {
            let snap = common::snapshot(1_000);
            let mut out = String::new();
            measured(|| {
                for _ in 0..reps {
                    out.clear();
                    skewwatch::outputs::metrics::render_snapshot(
                        &mut out,
                        &snap,
                        10,
                        skewwatch::outputs::config::Profile::Full,
                    );
                    black_box(out.len());
                }
            });
            reps * 1_000
        }
        _ => return None,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some(path) if PATHS.iter().any(|(p, _)| *p == path) => {
            let default = PATHS.iter().find(|(p, _)| *p == path).map_or(1, |p| p.1);
            let reps = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(default);
            let items = run(path, reps).expect("known path");
            println!("items {items}");
        }
        _ => {
            // `cargo bench` passes `--bench`: a quick smoke run of every path.
            for &(path, reps) in PATHS {
                let reps = (reps / 10).max(1);
                let t = Instant::now();
                let items = run(path, reps).expect("known path");
                let ns = t.elapsed().as_nanos() as f64 / items as f64;
                println!(
                    "{path:<28} {ns:>9.1} ns/item (wall clock incl. set-up; use scripts/instructions.sh)"
                );
            }
        }
    }
}
