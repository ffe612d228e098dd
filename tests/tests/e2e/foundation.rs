//! End-to-end: the real binary on loopback. StatsD datagrams (sample rates, the empty key,
//! malformed lines between good ones) and an NDJSON batch (with one invalid record) go in;
//! `/metrics` shows exactly the expected statistics; bad input is counted, nothing valid lost.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use skewwatch_e2e::agent::Agent;
use skewwatch_e2e::prom::Scrape;
use skewwatch_e2e::tools;

const WINDOW_SECS: f64 = 2.0;

fn config() -> String {
    format!("window:\n  window_secs: {WINDOW_SECS}\nlimits:\n  http_body_limit_bytes: 4096\n")
}

fn close(actual: f64, expected: f64, rel: f64, what: &str) {
    let err = (actual - expected).abs();
    assert!(
        err <= rel * expected.abs() + 1e-12,
        "{what}: got {actual}, expected {expected} (±{}%)",
        rel * 100.0
    );
}

/// Sends the fixture for `group`; returns nothing, the expectations are in `check`.
fn send_fixture(agent: &Agent, group: &str) {
    // Shard a: 2 (sampled 0.5) + 1 timeout, both with the empty key; 3 counted cache hits with
    // key k1. Between them: garbage, a NaN latency and a line without a shard.
    let d1 = format!(
        "skewwatch.request:10|ms|@0.5|#group:{group},shard:a,key:\n\
         this is not statsd\n\
         skewwatch.request:20|ms|#group:{group},shard:a,key:,outcome:timeout\n\
         skewwatch.request:nan|ms|#group:{group},shard:a\n\
         skewwatch.request:3|c|#group:{group},shard:a,key:k1,cache:hit\n\
         skewwatch.request:5|ms|#group:{group}\n"
    );
    agent.send_statsd(d1.as_bytes());
    // Shard b: 4 requests (sampled 0.25) at 100 ms, cache misses, key k2.
    let d2 = format!("skewwatch.request:100|ms|@0.25|#group:{group},shard:b,key:k2,cache:miss");
    agent.send_statsd(d2.as_bytes());
    // Garbage bytes, not UTF-8.
    agent.send_statsd(&[0xff, 0xfe, 0x00, 0x80, b'\n', 0xc3]);
    // Shard c over HTTP: 2 failed requests at 1 s with key k1, and one invalid record.
    let body = format!(
        "{{\"group\":\"{group}\",\"shard\":\"c\",\"count\":2,\"latency_ms\":1000,\"outcome\":\"error\",\"key\":\"k1\"}}\n\
         {{\"group\":\"{group}\",\"shard\":\"c\",\"latency_ms\":-1}}\n"
    );
    let (code, reply) = agent.post_ndjson(body.as_bytes(), &[]);
    assert_eq!(code, 200, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["accepted"], 1);
    assert_eq!(reply["rejected"], 1);
    assert_eq!(reply["errors"][0]["line"], 2);
    assert_eq!(reply["errors"][0]["reason"], "bad_latency");
}

/// Waits for the window holding the fixture. `Err` when the fixture straddled two windows.
fn scrape_window(agent: &Agent, group: &str) -> Result<Scrape, String> {
    agent
        .wait_for(Duration::from_secs_f64(WINDOW_SECS * 4.0), |a| {
            let s = a.scrape();
            let rps = s.get("skewwatch_requests_per_second", &[("group", group)])?;
            (rps > 0.0).then_some(s)
        })
        .ok_or_else(|| "no window with the fixture".to_string())
        .and_then(|s| {
            let rps = s.value("skewwatch_requests_per_second", &[("group", group)]);
            if (rps * WINDOW_SECS - 12.0).abs() < 1e-9 {
                Ok(s)
            } else {
                Err(format!("fixture straddled a window boundary ({rps} req/s)"))
            }
        })
}

#[test]
fn statsd_and_ndjson_in_exact_statistics_out() {
    let agent = Agent::start(&config());
    // The fixture takes milliseconds; if it straddles a window boundary, try again under a new
    // group name (a window boundary every 2 s makes that rare, never systematic).
    let mut found = None;
    for attempt in 0..3 {
        let group = format!("e2e-{attempt}");
        send_fixture(&agent, &group);
        match scrape_window(&agent, &group) {
            Ok(s) => {
                found = Some((group, s, attempt + 1));
                break;
            }
            Err(e) => eprintln!("attempt {attempt}: {e}"),
        }
    }
    let (group, s, attempts) = found.expect("three attempts straddled window boundaries");
    let g = group.as_str();

    // Loads: a = 6, b = 4, c = 2 requests.
    close(
        s.value(
            "skewwatch_shard_share_ratio",
            &[("group", g), ("shard", "a")],
        ),
        0.5,
        1e-12,
        "share a",
    );
    close(
        s.value(
            "skewwatch_shard_share_ratio",
            &[("group", g), ("shard", "b")],
        ),
        4.0 / 12.0,
        1e-12,
        "share b",
    );
    close(
        s.value(
            "skewwatch_shard_share_ratio",
            &[("group", g), ("shard", "c")],
        ),
        2.0 / 12.0,
        1e-12,
        "share c",
    );
    close(
        s.value(
            "skewwatch_shard_requests_per_second",
            &[("group", g), ("shard", "a")],
        ),
        6.0 / WINDOW_SECS,
        1e-12,
        "rps a",
    );
    // Sorted [2,4,6]: G = (−2·2 + 0·4 + 2·6)/(3·12) = 2/9; corrected ·3/2 = 1/3.
    close(
        s.value("skewwatch_gini_ratio", &[("group", g)]),
        1.0 / 3.0,
        1e-9,
        "gini",
    );
    close(
        s.value("skewwatch_topk_share_ratio", &[("group", g), ("k", "1")]),
        0.5,
        1e-12,
        "top1",
    );
    // 10% of 3 shards rounds up to k = 1: no second top-k series.
    assert_eq!(
        s.all("skewwatch_topk_share_ratio", &[("group", g)]).len(),
        1
    );
    close(
        s.value("skewwatch_peak_to_mean_ratio", &[("group", g)]),
        1.5,
        1e-12,
        "PAR",
    );
    // Keys: (empty) 3, k1 3 + 2, k2 4 of 12.
    close(
        s.value(
            "skewwatch_key_share_ratio",
            &[("group", g), ("key", "(empty)")],
        ),
        0.25,
        1e-12,
        "key (empty)",
    );
    close(
        s.value("skewwatch_key_share_ratio", &[("group", g), ("key", "k1")]),
        5.0 / 12.0,
        1e-12,
        "key k1",
    );
    close(
        s.value("skewwatch_key_share_ratio", &[("group", g), ("key", "k2")]),
        4.0 / 12.0,
        1e-12,
        "key k2",
    );
    // p99 from HDR histograms at 2 significant figures: within 1%.
    close(
        s.value(
            "skewwatch_shard_latency_p99_seconds",
            &[("group", g), ("shard", "a")],
        ),
        0.020,
        0.01,
        "p99 a",
    );
    close(
        s.value(
            "skewwatch_shard_latency_p99_seconds",
            &[("group", g), ("shard", "b")],
        ),
        0.100,
        0.01,
        "p99 b",
    );
    close(
        s.value(
            "skewwatch_shard_latency_p99_seconds",
            &[("group", g), ("shard", "c")],
        ),
        1.0,
        0.01,
        "p99 c",
    );
    close(
        s.value("skewwatch_latency_p99_seconds", &[("group", g)]),
        1.0,
        0.01,
        "group p99",
    );
    // Errors: a 1/6, b 0, c 2/2; group 3/12.
    close(
        s.value(
            "skewwatch_shard_error_ratio",
            &[("group", g), ("shard", "a")],
        ),
        1.0 / 6.0,
        1e-12,
        "err a",
    );
    close(
        s.value(
            "skewwatch_shard_error_ratio",
            &[("group", g), ("shard", "b")],
        ),
        0.0,
        1e-12,
        "err b",
    );
    close(
        s.value(
            "skewwatch_shard_error_ratio",
            &[("group", g), ("shard", "c")],
        ),
        1.0,
        1e-12,
        "err c",
    );
    close(
        s.value("skewwatch_error_ratio", &[("group", g)]),
        0.25,
        1e-12,
        "group err",
    );
    // Cache: a 3 hits, b 4 misses, c none.
    close(
        s.value(
            "skewwatch_shard_cache_hit_ratio",
            &[("group", g), ("shard", "a")],
        ),
        1.0,
        1e-12,
        "hit a",
    );
    close(
        s.value(
            "skewwatch_shard_cache_hit_ratio",
            &[("group", g), ("shard", "b")],
        ),
        0.0,
        1e-12,
        "hit b",
    );
    assert_eq!(
        s.get(
            "skewwatch_shard_cache_hit_ratio",
            &[("group", g), ("shard", "c")]
        ),
        None
    );
    close(
        s.value("skewwatch_cache_hit_ratio", &[("group", g)]),
        3.0 / 7.0,
        1e-12,
        "group hit",
    );

    // Every good record counted, every bad one rejected with its reason, per attempt.
    let n = attempts as f64;
    assert_eq!(
        s.value("skewwatch_ingest_records_total", &[("source", "statsd")]),
        4.0 * n
    );
    assert_eq!(
        s.value("skewwatch_ingest_requests_total", &[("source", "statsd")]),
        10.0 * n
    );
    assert_eq!(
        s.value("skewwatch_ingest_records_total", &[("source", "http")]),
        n
    );
    let rejected = |src: &str, reason: &str| {
        s.value(
            "skewwatch_ingest_rejected_total",
            &[("source", src), ("reason", reason)],
        )
    };
    // The garbage datagram holds two lines: invalid UTF-8 both.
    assert_eq!(rejected("statsd", "malformed"), 3.0 * n);
    assert_eq!(rejected("statsd", "bad_latency"), n);
    assert_eq!(rejected("statsd", "missing_shard"), n);
    assert_eq!(rejected("http", "bad_latency"), n);
    assert_eq!(
        s.value(
            "skewwatch_ingest_dropped_total",
            &[("source", "statsd"), ("reason", "queue_full")]
        ),
        0.0
    );

    // The cumulative counters of the same window, and the live scrape with them (counters
    // and histogram included) passes promtool's lint.
    let s = check_counters(&agent, g);
    if let Some(promtool) = tools::require("promtool", &[]) {
        let mut child = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(s.text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && report.trim().is_empty(),
            "promtool: {report}"
        );
    }
}

/// Waits for the counters of the fixture's window (published just after its snapshot) and
/// checks them exactly; returns the scrape that holds them. Long because every expected count
/// sits beside the arithmetic of the fixture that gives it.
fn check_counters(agent: &Agent, g: &str) -> Scrape {
    let s = agent
        .wait_for(Duration::from_secs(5), |a| {
            let s = a.scrape();
            (s.sum("skewwatch_shard_requests_total", &[("group", g)]) > 0.0).then_some(s)
        })
        .expect("the fixture's window in the counters");
    let requests = |shard: &str, outcome: &str| {
        s.value(
            "skewwatch_shard_requests_total",
            &[("group", g), ("shard", shard), ("outcome", outcome)],
        )
    };
    // a: 2 sampled + 3 cache hits ok, 1 timeout; b: 4 ok; c: 2 errors. Every outcome class of
    // every shard is there from the first window.
    assert_eq!(requests("a", "ok"), 5.0);
    assert_eq!(requests("a", "timeout"), 1.0);
    assert_eq!(requests("b", "ok"), 4.0);
    assert_eq!(requests("c", "error"), 2.0);
    assert_eq!(requests("c", "throttled"), 0.0);
    assert_eq!(
        s.sum("skewwatch_shard_requests_total", &[("group", g)]),
        12.0
    );
    let cache = |shard: &str, result: &str| {
        s.get(
            "skewwatch_shard_cache_requests_total",
            &[("group", g), ("shard", shard), ("result", result)],
        )
    };
    assert_eq!(cache("a", "hit"), Some(3.0));
    assert_eq!(cache("a", "miss"), Some(0.0));
    assert_eq!(cache("b", "miss"), Some(4.0));
    assert_eq!(cache("c", "hit"), None, "c had no cache result");
    // Latencies on bucket bounds count under them: a 2 x 10 ms + 20 ms, b 4 x 100 ms,
    // c 2 x 1 s.
    let bucket = |shard: &str, le: &str| {
        s.value(
            "skewwatch_shard_request_duration_seconds_bucket",
            &[("group", g), ("shard", shard), ("le", le)],
        )
    };
    for (shard, le, n) in [
        ("a", "0.005", 0.0),
        ("a", "0.01", 2.0),
        ("a", "0.025", 3.0),
        ("a", "+Inf", 3.0),
        ("b", "0.05", 0.0),
        ("b", "0.1", 4.0),
        ("c", "0.5", 0.0),
        ("c", "1", 2.0),
        ("c", "+Inf", 2.0),
    ] {
        assert_eq!(bucket(shard, le), n, "{shard} le={le}");
    }
    for (shard, sum, count) in [("a", 0.04, 3.0), ("b", 0.4, 4.0), ("c", 2.0, 2.0)] {
        let labels = [("group", g), ("shard", shard)];
        close(
            s.value("skewwatch_shard_request_duration_seconds_sum", &labels),
            sum,
            1e-9,
            "sum",
        );
        assert_eq!(
            s.value("skewwatch_shard_request_duration_seconds_count", &labels),
            count
        );
    }
    // Keys: (empty) 3, k1 3 + 2, k2 4, all in the top list, so no `__other__`.
    let key = |k: &str| s.get("skewwatch_key_requests_total", &[("group", g), ("key", k)]);
    assert_eq!(key("(empty)"), Some(3.0));
    assert_eq!(key("k1"), Some(5.0));
    assert_eq!(key("k2"), Some(4.0));
    assert_eq!(key("__other__"), None);
    s
}

#[test]
fn health_readiness_status_and_body_limit() {
    let mut agent = Agent::start(&config());
    assert_eq!(agent.request("GET", "/healthz", &[], b"").0, 200);
    assert_eq!(agent.request("GET", "/readyz", &[], b"").0, 200);
    let (code, body) = agent.request("GET", "/api/v1/status", &[], b"");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["window_secs"], WINDOW_SECS);
    // Over the configured 4096-byte limit: 413, and nothing of it is taken.
    let big = "{\"group\":\"g\",\"shard\":\"s\"}\n".repeat(200);
    let (code, _) = agent.post_ndjson(big.as_bytes(), &[]);
    assert_eq!(code, 413);
    let s = agent.scrape();
    assert_eq!(
        s.value("skewwatch_ingest_records_total", &[("source", "http")]),
        0.0
    );
    // Every record invalid: 400 with the reasons.
    let (code, body) = agent.post_ndjson(b"{\"shard\":\"s\"}\n[1,2\n", &[]);
    assert_eq!(code, 400, "{body}");
    assert!(agent.stop().success());
}

#[test]
fn bearer_token_guards_ingest_when_configured() {
    let cfg = format!(
        "{}auth:\n  bearer_token_env: SKEWWATCH_TEST_TOKEN\n",
        config()
    );
    let agent = Agent::start_with_env(&cfg, &[("SKEWWATCH_TEST_TOKEN", "t0ken")]);
    let body = b"{\"group\":\"g\",\"shard\":\"s\"}\n";
    assert_eq!(agent.post_ndjson(body, &[]).0, 401);
    let bad = [("Authorization", "Bearer nope")];
    assert_eq!(agent.post_ndjson(body, &bad).0, 401);
    let good = [("Authorization", "Bearer t0ken")];
    assert_eq!(agent.post_ndjson(body, &good).0, 200);
    // Scrapes stay open, and the token never reaches the log.
    assert_eq!(agent.request("GET", "/metrics", &[], b"").0, 200);
    assert!(agent.drain_log().iter().all(|l| !l.contains("t0ken")));
}
