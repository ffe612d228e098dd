//! End-to-end: saturation readings on loopback. The StatsD gauges `skewwatch.inflight` and
//! `skewwatch.utilisation` and the NDJSON `utilisation` field reach the status snapshot and
//! `/metrics` as per-shard headroom and in-flight series; a shard that reports 95% utilisation
//! while its traffic share stays even raises `CapacityHeadroom` with no capacity configured,
//! and shards without readings raise nothing; a delta gauge is rejected as `bad_gauge` and the
//! good lines of its datagram are kept.

use std::time::{Duration, Instant};

use serde_json::Value;
use skewwatch_e2e::agent::Agent;

/// Lines of each round's datagram that must be taken: four requests and two gauges.
const TAKEN_LINES: u64 = 6;

/// One round of traffic: a request to each shard of both groups, s1 of `sat` reporting 95% busy
/// with 30 in flight over StatsD beside one delta gauge that must be rejected, s2 reporting 30%
/// over HTTP, and `plain` reporting nothing.
fn send_round(agent: &Agent) {
    agent.send_statsd(
        b"skewwatch.request:5|ms|#group:sat,shard:s1\n\
          skewwatch.utilisation:0.95|g|#group:sat,shard:s1\n\
          skewwatch.inflight:+1|g|#group:sat,shard:s1\n\
          skewwatch.inflight:30|g|#group:sat,shard:s1\n\
          skewwatch.request:5|ms|#group:sat,shard:s2\n\
          skewwatch.request:5|ms|#group:plain,shard:p1\n\
          skewwatch.request:5|ms|#group:plain,shard:p2\n",
    );
    let (code, body) = agent.post_ndjson(
        br#"{"group":"sat","shard":"s2","count":0,"utilisation":0.3}"#,
        &[],
    );
    assert_eq!(code, 200, "{body}");
}

/// The active `CapacityHeadroom` alerts.
fn capacity_alerts(agent: &Agent) -> Vec<Value> {
    let (code, body) = agent.request("GET", "/api/v1/alerts", &[], b"");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["alertname"] == "CapacityHeadroom")
        .cloned()
        .collect()
}

/// Shard `shard` of group `group` in the last window of `/api/v1/status`.
fn status_shard(agent: &Agent, group: &str, shard: &str) -> Value {
    let (code, body) = agent.request("GET", "/api/v1/status", &[], b"");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let groups = v["window"]["groups"].as_array().unwrap();
    let g = groups.iter().find(|g| g["group"] == group);
    let shards = g.and_then(|g| g["shards"].as_array()).cloned();
    shards
        .unwrap_or_default()
        .into_iter()
        .find(|s| s["shard"] == shard)
        .unwrap_or_else(|| panic!("no shard {shard} of {group} in {body}"))
}

#[test]
fn reported_saturation_is_exported_and_raises_capacity_headroom() {
    // At 1 s windows, the default 20 s of tolerated burst would hold the verdict for 20 windows;
    // 2 s keeps the test short and still asks for a streak that outlasts a burst.
    let agent = Agent::start(
        "window:\n  window_secs: 1\ndetectors:\n  capacity_headroom:\n    tolerated_burst_secs: 2\n",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut fired = Vec::new();
    let mut rounds = 0u64;
    // Traffic until the alert fires (three windows over the threshold by default), paced so
    // every one-second window holds some of it.
    while Instant::now() < deadline && fired.is_empty() {
        send_round(&agent);
        rounds += 1;
        std::thread::sleep(Duration::from_millis(100));
        fired = capacity_alerts(&agent);
    }
    assert_eq!(
        fired.len(),
        1,
        "only s1 of sat reports high utilisation: {fired:?}"
    );
    let a = &fired[0];
    assert_eq!(a["labels"]["group"], "sat", "{a}");
    assert_eq!(a["labels"]["shard"], "s1", "{a}");
    assert_eq!(a["annotations"]["utilisation_source"], "reported", "{a}");
    assert_eq!(a["annotations"]["utilisation"], "0.950", "{a}");
    assert_eq!(a["annotations"]["inflight"], "30", "{a}");
    assert_eq!(a["labels"]["severity"], "critical", "{a}");

    // The readings reach the snapshot, and stand for no request.
    let s1 = status_shard(&agent, "sat", "s1");
    assert_eq!(
        (s1["utilisation"].as_f64(), s1["inflight"].as_f64()),
        (Some(0.95), Some(30.0)),
        "{s1}"
    );
    let s2 = status_shard(&agent, "sat", "s2");
    assert_eq!(
        (s2["utilisation"].as_f64(), s2["inflight"].as_f64()),
        (Some(0.3), None),
        "{s2}"
    );
    let p1 = status_shard(&agent, "plain", "p1");
    assert!(
        p1.get("utilisation").is_none() && p1.get("inflight").is_none(),
        "{p1}"
    );

    let s = agent.scrape();
    let s1 = [("group", "sat"), ("shard", "s1")];
    let s2 = [("group", "sat"), ("shard", "s2")];
    let p1 = [("group", "plain"), ("shard", "p1")];
    let headroom = |labels: &[(&str, &str)]| s.value("skewwatch_shard_headroom_ratio", labels);
    assert!((headroom(&s1) - 0.05).abs() < 1e-9, "{}", s.text);
    assert!((headroom(&s2) - 0.7).abs() < 1e-9, "{}", s.text);
    assert_eq!(s.value("skewwatch_shard_inflight", &s1), 30.0);
    assert_eq!(s.get("skewwatch_shard_inflight", &s2), None);
    assert_eq!(s.get("skewwatch_shard_headroom_ratio", &p1), None);
    // Readings are not requests: each shard's load is its request lines alone, so s1's
    // share never moved.
    assert_eq!(
        s.value("skewwatch_shard_share_ratio", &s1),
        s.value("skewwatch_shard_share_ratio", &s2)
    );
    // Every round's delta gauge was rejected, and the lines around it were kept: each shard's
    // request counter holds every round's request.
    let bad = [("source", "statsd"), ("reason", "bad_gauge")];
    assert_eq!(
        s.value("skewwatch_ingest_rejected_total", &bad),
        rounds as f64,
        "{}",
        s.text
    );
    let statsd = [("source", "statsd")];
    let rejected = s.sum("skewwatch_ingest_rejected_total", &statsd);
    assert_eq!(rejected, rounds as f64, "only the delta gauges: {}", s.text);
    assert_eq!(
        s.value("skewwatch_ingest_records_total", &statsd),
        (rounds * TAKEN_LINES) as f64,
        "{}",
        s.text
    );
}
