//! Real client: the OpenTelemetry Python SDK with its OTLP/HTTP exporters (from PyPI, installed
//! by `.ci/run`) sends client spans with a hot shard and a hot key, and a duration histogram,
//! to the real binary. `/metrics` must show the exact counts, shares and key shares, and the
//! status API must name the hot shard first.
//!
//! The load is sent at the start of a window, so the whole of it lands in one window and the
//! window's ratios can be checked exactly as well as the cumulative counters.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use skewwatch_e2e::agent::Agent;
use skewwatch_e2e::tools;

const WINDOW_SECS: f64 = 4.0;
const GROUP: &str = "catalog";

/// The load, as the Python script reads it. On `catalog`: shard s0 takes 400 of 700 client
/// spans, 300 of them with the key `hot-key`; s1 has 60 cache hits and 40 misses; s2 has 10
/// gRPC UNAVAILABLE. 20 server spans and 10 client spans without `server.address` are no shard
/// calls. The histogram puts 30 calls of 2 ms on i0 and 10 of 20 ms on i1 (group `inventory`).
fn load() -> serde_json::Value {
    serde_json::json!({
        "spans": [
            {"n": 300, "group": GROUP, "shard": "s0", "key": "hot-key"},
            {"n": 100, "group": GROUP, "shard": "s0", "key": "k0"},
            {"n": 60, "group": GROUP, "shard": "s1", "key": "k1", "cache": true},
            {"n": 40, "group": GROUP, "shard": "s1", "key": "k1", "cache": "miss"},
            {"n": 90, "group": GROUP, "shard": "s2", "key": "k2"},
            {"n": 10, "group": GROUP, "shard": "s2", "key": "k2", "grpc_status": 14},
            {"n": 100, "group": GROUP, "shard": "s3", "key": "k3"},
            {"n": 20, "group": GROUP, "shard": "s0", "key": "k0", "kind": "server"},
            {"n": 10, "group": GROUP, "key": "k0"}
        ],
        "histogram": [
            {"n": 30, "group": "inventory", "shard": "i0", "seconds": 0.002},
            {"n": 10, "group": "inventory", "shard": "i1", "seconds": 0.02}
        ]
    })
}

fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn status(agent: &Agent) -> serde_json::Value {
    let (code, body) = agent.request("GET", "/api/v1/status", &[], b"");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Sleeps until just after the next window boundary, learned from the status API.
fn wait_for_window_start(agent: &Agent) -> f64 {
    let end = agent
        .wait_for(Duration::from_secs_f64(WINDOW_SECS * 3.0), |a| {
            status(a)["window"]["end"].as_f64().filter(|&e| e > 0.0)
        })
        .expect("a first window closes");
    let mut next = end;
    while next < wall_now() + 0.05 {
        next += WINDOW_SECS;
    }
    std::thread::sleep(Duration::from_secs_f64(next - wall_now() + 0.1));
    next
}

#[test]
fn the_python_sdk_exporters_feed_exact_counts_and_name_the_hot_shard() {
    let Some(python) = tools::require_python(&[
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.http",
    ]) else {
        return;
    };
    let agent = Agent::start(&format!("window:\n  window_secs: {WINDOW_SECS}\n"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/otel_send.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(format!("http://{}", agent.http))
        .arg(load().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the Python client");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // Python start-up is done; the export itself takes well under a window.
    let start = wait_for_window_start(&agent);
    writeln!(child.stdin.take().unwrap(), "go").unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "done");
    assert!(child.wait().unwrap().success());

    // The window that began at `start` holds the whole load.
    let st = agent
        .wait_for(Duration::from_secs_f64(WINDOW_SECS * 3.0), |a| {
            let st = status(a);
            (st["window"]["start"].as_f64()? >= start - 1e-6).then_some(st)
        })
        .expect("the load's window closes");
    assert_eq!(
        st["window"]["start"].as_f64(),
        Some(start),
        "the load straddled two windows"
    );
    check_window(&agent.scrape());
    check_status(&st);
    // The counters are published just after the window's snapshot.
    let s = agent
        .wait_for(Duration::from_secs(5), |a| {
            let s = a.scrape();
            (s.sum("skewwatch_shard_requests_total", &[]) >= 740.0).then_some(s)
        })
        .expect("the load in the counters");
    check_counters(&s);
}

/// The status API names the hot shard first, with its count.
fn check_status(st: &serde_json::Value) {
    let groups = st["window"]["groups"].as_array().unwrap();
    let g = groups
        .iter()
        .find(|g| g["group"] == GROUP)
        .expect("the catalog group");
    assert_eq!(g["requests"], 700);
    assert_eq!(g["shards"][0]["shard"], "s0", "{g}");
    assert_eq!(g["shards"][0]["requests"], 400);
}

/// The window's ratios: shard shares and key shares of the load, exactly.
fn check_window(s: &skewwatch_e2e::prom::Scrape) {
    let g = [("group", GROUP)];
    let rps = s.value("skewwatch_requests_per_second", &g);
    assert!(
        (rps * WINDOW_SECS - 700.0).abs() < 1e-9,
        "{rps} req/s is not the whole load"
    );
    let share = |shard: &str| {
        s.value(
            "skewwatch_shard_share_ratio",
            &[("group", GROUP), ("shard", shard)],
        )
    };
    for (shard, n) in [("s0", 400.0), ("s1", 100.0), ("s2", 100.0), ("s3", 100.0)] {
        assert!(
            (share(shard) - n / 700.0).abs() < 1e-9,
            "{shard}: {}",
            share(shard)
        );
    }
    let key = |k: &str| s.value("skewwatch_key_share_ratio", &[("group", GROUP), ("key", k)]);
    assert!(
        (key("hot-key") - 300.0 / 700.0).abs() < 1e-9,
        "{}",
        key("hot-key")
    );
    assert!((key("k0") - 100.0 / 700.0).abs() < 1e-9, "{}", key("k0"));
}

/// The cumulative counters: every request by outcome and cache result, and what was skipped.
fn check_counters(s: &skewwatch_e2e::prom::Scrape) {
    let req = |group: &str, shard: &str, outcome: &str| {
        s.value(
            "skewwatch_shard_requests_total",
            &[("group", group), ("shard", shard), ("outcome", outcome)],
        )
    };
    assert_eq!(req(GROUP, "s0", "ok"), 400.0);
    assert_eq!(req(GROUP, "s1", "ok"), 100.0);
    assert_eq!(
        (req(GROUP, "s2", "ok"), req(GROUP, "s2", "unavailable")),
        (90.0, 10.0)
    );
    assert_eq!(req(GROUP, "s3", "ok"), 100.0);
    let cache = |result: &str| {
        s.value(
            "skewwatch_shard_cache_requests_total",
            &[("group", GROUP), ("shard", "s1"), ("result", result)],
        )
    };
    assert_eq!((cache("hit"), cache("miss")), (60.0, 40.0));
    // The histogram: counts per shard, latencies at bucket midpoints (2.5 ms and 17.5 ms).
    assert_eq!(
        (req("inventory", "i0", "ok"), req("inventory", "i1", "ok")),
        (30.0, 10.0)
    );
    let le = |shard: &str, le: &str| {
        s.value(
            "skewwatch_shard_request_duration_seconds_bucket",
            &[("group", "inventory"), ("shard", shard), ("le", le)],
        )
    };
    assert_eq!(
        (le("i0", "0.0025"), le("i1", "0.01"), le("i1", "0.025")),
        (30.0, 0.0, 10.0)
    );
    let otlp = |name: &str, reason: &str| s.value(name, &[("source", "otlp"), ("reason", reason)]);
    assert_eq!(otlp("skewwatch_ingest_skipped_total", "not_client"), 20.0);
    assert_eq!(otlp("skewwatch_ingest_skipped_total", "no_shard"), 10.0);
    // 700 spans, and one record per non-empty histogram bucket per shard; the exporter's
    // second, unchanged cumulative export at shutdown adds nothing.
    assert_eq!(
        s.value("skewwatch_ingest_records_total", &[("source", "otlp")]),
        702.0
    );
    assert_eq!(
        s.sum("skewwatch_ingest_rejected_total", &[("source", "otlp")]),
        0.0
    );
}
