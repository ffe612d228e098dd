//! End-to-end: the what-if simulation's live series. A real agent (1 s windows, the default
//! `whatif:` section: the cache as configured keeps answers 60 s, candidates from 10 s to an
//! hour, serve-stale and negative caching) gets NDJSON records that name cache keys in a
//! pattern whose answer under every policy is worked out by hand below; `/metrics` must carry
//! `skewwatch_whatif_*` with exactly those values, and `/api/v1/status` the same.
//!
//! Each round is one body, so it lands in one window, with `ts` values of its own: the
//! simulation ages entries by the records' `ts`, and each round starts 10,000 s after the one
//! before, longer than any TTL simulated, so every round starts from an expired cache and every
//! window, whatever rounds it holds, predicts the same ratios. (The keys even leave the sample
//! at each window's close: their `ts` lie years before the agent's clock, so they are idle past
//! every TTL by then.)

use std::time::Duration;

use serde_json::Value;
use skewwatch::client::text::Scrape;
use skewwatch_e2e::agent::Agent;

/// Requests in one round.
const REQUESTS: f64 = 11.0;

/// The round that starts at `base`, in time order (the simulation takes an earlier `ts` after
/// a later one as the later time). `cache` is what a cache with a 60 s TTL and no negative
/// caching reports:
///
/// - key `a` on s1, answered ok at +0, +30, +120, +400 and +1500 s: backend calls 5 (TTL 10 s),
///   4 (60 s: +30 is a hit), 3 (5 min: +30 and +120 hit; entries are not refreshed by hits),
///   2 (20 min: +1500 misses), 1 (1 h);
/// - key `b` on s1, `not_found` at +0, +10 and +20: 3 calls, unless `not_found` answers are
///   cached (negative=1m: 1);
/// - key `c` on s2, ok at +0, then `error` at +100 and +101: 3 calls where the entry has
///   expired by +100 (10 s, 60 s), both failures answered with the error; 1 where it has not
///   (5 min and longer), no error; serve-stale calls the backend at +100 and +101 as the
///   cache as configured does (3 calls) but answers both failures with the expired copy (RFC
///   5861's stale-if-error: the copy stays stale), so no request sees an error.
fn round(base: u64) -> String {
    let events: [(u64, &str, &str, &str, &str); 11] = [
        (0, "s1", "a", "ok", "miss"),
        (0, "s1", "b", "not_found", "miss"),
        (0, "s2", "c", "ok", "miss"),
        (10, "s1", "b", "not_found", "miss"),
        (20, "s1", "b", "not_found", "miss"),
        (30, "s1", "a", "ok", "hit"),
        (100, "s2", "c", "error", "miss"),
        (101, "s2", "c", "error", "miss"),
        (120, "s1", "a", "ok", "miss"),
        (400, "s1", "a", "ok", "miss"),
        (1500, "s1", "a", "ok", "miss"),
    ];
    events
        .iter()
        .map(|(t, shard, key, outcome, cache)| {
            format!(
                r#"{{"ts":{},"group":"db","shard":"{shard}","cache_key":"{key}","outcome":"{outcome}","cache":"{cache}","latency_ms":1}}"#,
                base + t
            ) + "\n"
        })
        .collect()
}

/// Per policy (the `policy` label), the backend calls of one round, the group's and the busiest
/// shard's (s1: keys `a` and `b`, 8 requests), and the requests of the round answered with an
/// error (`c`'s failures; `not_found` is an answer, not an error).
const EXPECTED: [(&str, f64, f64, f64); 8] = [
    // a + b + c
    ("observed", 4.0 + 3.0 + 3.0, 4.0 + 3.0, 2.0),
    ("ttl=10s", 5.0 + 3.0 + 3.0, 5.0 + 3.0, 2.0),
    ("ttl=1m", 4.0 + 3.0 + 3.0, 4.0 + 3.0, 2.0),
    ("ttl=5m", 3.0 + 3.0 + 1.0, 3.0 + 3.0, 0.0),
    ("ttl=20m", 2.0 + 3.0 + 1.0, 2.0 + 3.0, 0.0),
    ("ttl=1h", 1.0 + 3.0 + 1.0, 1.0 + 3.0, 0.0),
    ("serve-stale", 4.0 + 3.0 + 3.0, 4.0 + 3.0, 0.0),
    ("negative=1m", 4.0 + 1.0 + 3.0, 4.0 + 1.0, 2.0),
];

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Posts a round a poll (each `base` 10,000 s after the last) until `read` finds what it
/// waits for in the agent's answers, for at most 30 s; a window may hold one round or more,
/// with the same ratios.
fn poll_rounds<T>(
    agent: &Agent,
    base: &mut u64,
    mut read: impl FnMut(&Agent) -> Option<T>,
) -> Option<T> {
    agent.wait_for(Duration::from_secs(30), |a| {
        let (code, body) = a.post_ndjson(round(*base).as_bytes(), &[]);
        assert_eq!(code, 200, "{body}");
        *base += 10_000;
        std::thread::sleep(Duration::from_millis(300));
        read(a)
    })
}

/// The first scrape that carries the group's what-if series.
fn scrape_with_predictions(agent: &Agent, base: &mut u64) -> Scrape {
    poll_rounds(agent, base, |a| {
        let s = a.scrape();
        s.get("skewwatch_whatif_sampled_keys", &[("group", "db")])
            .map(|_| s)
    })
    .expect("what-if series within 30 s")
}

#[test]
fn the_whatif_series_and_status_carry_the_predictions_worked_out_by_hand() {
    let agent = Agent::start("window:\n  window_secs: 1\n");
    let mut base = 1_700_000_000;
    let s = scrape_with_predictions(&agent, &mut base);
    for (policy, calls, hot_calls, errors) in EXPECTED {
        let labels = [("group", "db"), ("policy", policy)];
        let got = s.value("skewwatch_whatif_backend_call_ratio", &labels);
        assert!(
            close(got, calls / REQUESTS),
            "{policy}: {got} calls per request, expected {calls}/11"
        );
        let err = s.value("skewwatch_whatif_error_ratio", &labels);
        assert!(
            close(err, errors / REQUESTS),
            "{policy}: error ratio {err}, expected {errors}/11"
        );
        let hit = s.value("skewwatch_whatif_cache_hit_ratio", &labels);
        assert!(
            close(hit, 1.0 - calls / REQUESTS),
            "{policy}: hit ratio {hit}"
        );
        // Every key simulated: no sampling error.
        assert_eq!(s.value("skewwatch_whatif_error_bound_ratio", &labels), 0.0);
        let hot = s.value(
            "skewwatch_whatif_hot_shard_backend_call_ratio",
            &[("group", "db"), ("shard", "s1"), ("policy", policy)],
        );
        assert!(
            close(hot, hot_calls / 8.0),
            "{policy}: s1 {hot}, expected {hot_calls}/8"
        ); // s1 never failed, and no capacity is known: its replayed errors are none.
        let hot_errors = s.value(
            "skewwatch_whatif_hot_shard_error_ratio",
            &[("group", "db"), ("shard", "s1"), ("policy", policy)],
        );
        assert_eq!(hot_errors, 0.0, "{policy}");
    }
    assert!(
        s.all("skewwatch_whatif_backend_capacity_calls_per_second", &[])
            .is_empty(),
        "no capacity configured or learned"
    );
    // The simulation of the cache as configured matches what the cache reported: one hit.
    let check = s.value("skewwatch_whatif_check_error_ratio", &[("group", "db")]);
    assert!(check.abs() < 1e-9, "check error {check}");
    assert_eq!(
        s.value("skewwatch_whatif_sample_rate_ratio", &[("group", "db")]),
        1.0
    );
    assert_eq!(
        s.value("skewwatch_whatif_sampled_keys", &[("group", "db")]),
        3.0
    );
    // Present, whatever it holds: the rounds' `ts` lie in 2023, so by the window's end (the
    // agent's clock) every key has been idle longer than any TTL and has left the sample.
    assert!(s.get("skewwatch_whatif_memory_bytes", &[]).is_some());

    // The status answer: the same figures, per policy and for the busiest shard, in the
    // configured order with the observed policy first.
    let status = poll_rounds(&agent, &mut base, |a| {
        let (_, body) = a.request("GET", "/api/v1/status?group=db", &[], b"");
        let v: Value = serde_json::from_str(&body).ok()?;
        let w = v["window"]["groups"][0]["whatif"].clone();
        w.is_object().then_some(w)
    });
    let w = status.expect("a status with what-if figures within 30 s");
    assert!(
        close(w["cache_hit_ratio"].as_f64().unwrap(), 1.0 / REQUESTS),
        "{w}"
    );
    assert!(w["check_error"].as_f64().unwrap().abs() < 1e-9, "{w}");
    assert_eq!(w["hot_shard"]["shard"], "s1", "{w}");
    let policies = w["policies"].as_array().unwrap();
    let names: Vec<&str> = policies
        .iter()
        .filter_map(|p| p["policy"].as_str())
        .collect();
    assert_eq!(names, EXPECTED.map(|(p, _, _, _)| p), "{w}");
    for ((policy, calls, hot_calls, errors), (p, hot)) in EXPECTED.iter().zip(
        policies
            .iter()
            .zip(w["hot_shard"]["policies"].as_array().unwrap()),
    ) {
        let got = p["backend_calls_per_request"].as_f64().unwrap();
        assert!(close(got, calls / REQUESTS), "{policy}: {got}");
        let got = hot["backend_calls_per_request"].as_f64().unwrap();
        assert!(close(got, hot_calls / 8.0), "{policy}: s1 {got}");
        let got = p["error_ratio"].as_f64().unwrap();
        assert!(close(got, errors / REQUESTS), "{policy}: error ratio {got}");
        assert_eq!(p["error_bound"], 0.0, "{policy}");
    }
    // The live view's history answer draws the curve: the TTL ladder with the cache as
    // configured (60 s) marked, serve-stale and negative caching beside it.
    let v = poll_rounds(&agent, &mut base, |a| {
        let (_, body) = a.request("GET", "/api/v1/history?group=db", &[], b"");
        let v: Value = serde_json::from_str(&body).ok()?;
        v["whatif"].is_object().then_some(v)
    })
    .expect("a history answer with the what-if curve within 30 s");
    let curve = v["whatif"]["ttl_curve"].as_array().unwrap();
    let ttls: Vec<f64> = curve
        .iter()
        .filter_map(|p| p["ttl_secs"].as_f64())
        .collect();
    assert_eq!(ttls, [10.0, 60.0, 60.0, 300.0, 1200.0, 3600.0], "{v}");
    assert_eq!(curve[1]["observed"], true, "{v}");
    // The history answer rounds to five decimals.
    assert!(
        (curve[1]["hit_ratio"].as_f64().unwrap() - 1.0 / REQUESTS).abs() < 1e-5,
        "{v}"
    );
    let others: Vec<&str> = v["whatif"]["others"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["policy"].as_str())
        .collect();
    assert_eq!(others, ["serve-stale", "negative=1m"], "{v}");
}

/// With s1's backend capacity configured far below what any policy sends it (0.001 calls a
/// second), nearly every call a policy makes to s1 fails, except where serve-stale holds a copy
/// to answer it with: the predicted error ratios are each policy's exposed calls, and the
/// capacity is exported.
#[test]
fn a_configured_capacity_turns_the_calls_beyond_it_into_predicted_errors() {
    let agent = Agent::start(
        "window:\n  window_secs: 1\nwhatif:\n  backend_capacities:\n    \
         - {group: db, shard: s1, calls_per_second: 0.001}\n",
    );
    let mut base = 1_700_000_000;
    let s = scrape_with_predictions(&agent, &mut base);
    let capacity = s.value(
        "skewwatch_whatif_backend_capacity_calls_per_second",
        &[("group", "db"), ("shard", "s1"), ("source", "configured")],
    );
    assert_eq!(capacity, 0.001);
    for (policy, _, hot_calls, replayed) in EXPECTED {
        let got = s.value(
            "skewwatch_whatif_hot_shard_error_ratio",
            &[("group", "db"), ("shard", "s1"), ("policy", policy)],
        );
        let group = s.value(
            "skewwatch_whatif_error_ratio",
            &[("group", "db"), ("policy", policy)],
        );
        if policy == "serve-stale" {
            // Of `a`'s four calls only the first has no copy to fall back on (three while
            // the rounds of a window go by: the copy of the round before answers it); `b`'s
            // not_found is never a copy: 4 (or 3) of 8 requests.
            assert!((0.375 - 1e-3..=0.5).contains(&got), "serve-stale: s1 {got}");
            continue;
        }
        // Each call fails but for 0.001 a second of them: within a thousandth.
        assert!(
            (got - hot_calls / 8.0).abs() < 1e-3,
            "{policy}: s1 error ratio {got}, expected about {hot_calls}/8"
        );
        // The group's: s1's errors and s2's replayed (c's failures, no capacity known).
        let s2 = if replayed > 0.0 { 2.0 } else { 0.0 };
        assert!(
            (group - (hot_calls + s2) / REQUESTS).abs() < 1e-3,
            "{policy}: group error ratio {group}, expected about ({hot_calls} + {s2})/11"
        );
    }
}
