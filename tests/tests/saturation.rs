//! End-to-end: saturation readings on loopback. The StatsD gauges `skewwatch.inflight` and
//! `skewwatch.utilisation` and the NDJSON `utilisation` field reach `/metrics` as per-shard
//! headroom and in-flight series, and a shard that reports 95% utilisation raises
//! `CapacityHeadroom` with no capacity configured; a delta gauge is rejected as `bad_gauge`.

use std::time::{Duration, Instant};

use serde_json::Value;
use skewwatch_e2e::agent::Agent;

/// One second of traffic: requests to both shards, s1 reporting 95% busy with 30 in flight
/// over StatsD, s2 reporting 30% over HTTP, and one delta gauge that must be rejected.
fn send_second(agent: &Agent) {
    for _ in 0..5 {
        agent.send_statsd(
            b"skewwatch.request:5|ms|#group:sat,shard:s1\n\
              skewwatch.request:5|ms|#group:sat,shard:s2\n\
              skewwatch.utilisation:0.95|g|#group:sat,shard:s1\n\
              skewwatch.inflight:30|g|#group:sat,shard:s1\n\
              skewwatch.inflight:+1|g|#group:sat,shard:s1\n",
        );
        let (code, body) = agent.post_ndjson(
            br#"{"group":"sat","shard":"s2","count":0,"utilisation":0.3}"#,
            &[],
        );
        assert_eq!(code, 200, "{body}");
        std::thread::sleep(Duration::from_millis(200));
    }
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

#[test]
fn reported_saturation_is_exported_and_raises_capacity_headroom() {
    let agent = Agent::start("window:\n  window_secs: 1\n");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut fired = Vec::new();
    while Instant::now() < deadline && fired.is_empty() {
        send_second(&agent);
        fired = capacity_alerts(&agent);
    }
    assert_eq!(fired.len(), 1, "{fired:?}");
    let a = &fired[0];
    assert_eq!(a["labels"]["shard"], "s1", "{a}");
    assert_eq!(a["annotations"]["utilisation_source"], "reported", "{a}");
    assert_eq!(a["annotations"]["utilisation"], "0.950", "{a}");
    assert_eq!(a["annotations"]["inflight"], "30", "{a}");
    assert_eq!(a["labels"]["severity"], "critical", "{a}");

    let s = agent.scrape();
    let s1 = [("group", "sat"), ("shard", "s1")];
    let s2 = [("group", "sat"), ("shard", "s2")];
    let headroom = |labels: &[(&str, &str)]| s.value("skewwatch_shard_headroom_ratio", labels);
    assert!((headroom(&s1) - 0.05).abs() < 1e-9, "{}", s.text);
    assert!((headroom(&s2) - 0.7).abs() < 1e-9, "{}", s.text);
    assert_eq!(s.value("skewwatch_shard_inflight", &s1), 30.0);
    assert_eq!(s.get("skewwatch_shard_inflight", &s2), None);
    // Readings are not requests: each shard's load is its request lines alone.
    assert_eq!(
        s.value("skewwatch_shard_share_ratio", &s1),
        s.value("skewwatch_shard_share_ratio", &s2)
    );
    assert!(
        s.value(
            "skewwatch_ingest_rejected_total",
            &[("source", "statsd"), ("reason", "bad_gauge")]
        ) >= 15.0,
        "{}",
        s.text
    );
}
