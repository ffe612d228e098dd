//! End-to-end: hot shards, hot keys and a slow shard, replayed through the real
//! `skewwatch replay` binary on its embedded default configuration. Each scenario must raise
//! exactly the expected alerts, with the right labels, within a stated delay of the onset, and
//! each must resolve within a stated delay of the recovery; nothing else may fire. Plus the
//! empty-key incident (`HotShard` and `HotKey` naming shard-17 and the empty key), capacity
//! headroom with configured capacities, determinism, and the same transitions when recording
//! is spread over threads.

use skewwatch_e2e::replay::{ReplayOutput, TransitionLine, replay};
use skewwatch_e2e::scenarios::hot::{
    HOT_KEY, HOT_KEY_GROUP, HOT_KEY_ONSET, HOT_KEY_RECOVERY, HOT_KEY_SHARD, SLOW_BURN_GROUP,
    SLOW_BURN_ONSET, SLOW_BURN_RECOVERY, SLOW_BURN_SHARD, SLOW_GROUP, SLOW_ONSET, SLOW_RECOVERY,
    SLOW_SHARD, SUDDEN_GROUP, SUDDEN_KEY, SUDDEN_ONSET, SUDDEN_RECOVERY, SUDDEN_SHARD,
    hot_key_in_normal_shard, slow_burn, slow_shard, sudden_hot_shard,
};
use skewwatch_e2e::scenarios::incidents::{
    GEMINI_GROUP, GEMINI_HOT_SHARD, GEMINI_ONSET, GEMINI_TRIGGER_END, gemini_cache_collapse,
};

const SEED: u64 = 20_251_107;

/// Onset of a step (sudden hot shard, hot key, slow shard) -> firing, at most. A step on a
/// window boundary fires once its windows hold more than a tolerated 20 s burst's worth of
/// excess (docs/adr/003): at its third full window, onset + 30 s. One spare window covers a
/// noisy window (the count rule, 4 windows in a row, fires at onset + 40 s regardless).
const MAX_STEP_DELAY_SECS: f64 = 40.0;

/// Start of the slow-burn ramp -> firing, at most. The shard passes 1.25× its usual load about
/// 20 s into the ramp (6× over 360 s), and from then on every window charges the CUSUM, which
/// is full 40 s later; the alert fires in the first window in which the share also passes
/// twice the fair share (load 2.03×, 74 s into the ramp): at 80 s, measured. Two spare windows.
const MAX_SLOW_BURN_DELAY_SECS: f64 = 100.0;

/// Recovery -> resolved, at most: the condition stops in the first normal window, then
/// `keep_firing_for_secs` (60 s) of hysteresis; one spare window.
const MAX_RESOLVE_DELAY_SECS: f64 = 70.0;

/// An alert a scenario must raise: its name and identifying labels.
struct Expected<'a> {
    alertname: &'a str,
    labels: &'a [(&'a str, &'a str)],
}

impl Expected<'_> {
    fn matches(&self, t: &TransitionLine) -> bool {
        t.alertname == self.alertname
            && self.labels.iter().all(|(k, v)| t.label(k) == *v)
            && t.labels.keys().all(|k| {
                matches!(k.as_str(), "alertname" | "severity")
                    || self.labels.iter().any(|(l, _)| l == k)
            })
    }
}

/// Asserts that exactly the `expected` alerts fire, once each, within `max_delay` of `onset`,
/// and resolve within [`MAX_RESOLVE_DELAY_SECS`] of `recovery`; returns the firing transitions
/// in the order of `expected`.
fn assert_exactly<'a>(
    out: &'a ReplayOutput,
    expected: &[Expected<'_>],
    onset: f64,
    max_delay: f64,
    recovery: f64,
) -> Vec<&'a TransitionLine> {
    assert_eq!(out.code, 0, "{}", out.stderr);
    for t in &out.transitions {
        assert!(
            expected.iter().any(|e| e.matches(t)),
            "unexpected transition {t:?}\nall:\n{}",
            out.stdout
        );
    }
    let mut fired = Vec::new();
    for e in expected {
        let mine: Vec<&TransitionLine> = out.transitions.iter().filter(|t| e.matches(t)).collect();
        let states: Vec<&str> = mine.iter().map(|t| t.state.as_str()).collect();
        assert_eq!(
            states,
            ["firing", "resolved"],
            "{} {:?}: expected one firing and one resolved\n{}",
            e.alertname,
            e.labels,
            out.stdout
        );
        let (f, r) = (mine[0], mine[1]);
        let delay = f.ts - onset;
        let resolve = r.ts - recovery;
        eprintln!(
            "{} {:?}: fired {delay} s ({} windows) after onset, resolved {resolve} s after recovery",
            e.alertname,
            e.labels,
            delay / 10.0
        );
        assert!(
            delay > 0.0 && delay <= max_delay,
            "{} fired {delay} s after onset",
            e.alertname
        );
        assert!(
            resolve > 0.0 && resolve <= MAX_RESOLVE_DELAY_SECS,
            "{} resolved {resolve} s after recovery",
            e.alertname
        );
        fired.push(f);
    }
    fired
}

fn figure(t: &TransitionLine, name: &str) -> f64 {
    t.annotation(name)
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}: {t:?}"))
}

#[test]
fn a_slow_burn_fires_hot_shard_with_a_hot_range_and_resolves() {
    let out = replay(&slow_burn(SEED), "");
    let fired = assert_exactly(
        &out,
        &[Expected {
            alertname: "HotShard",
            labels: &[("group", SLOW_BURN_GROUP), ("shard", SLOW_BURN_SHARD)],
        }],
        SLOW_BURN_ONSET,
        MAX_SLOW_BURN_DELAY_SECS,
        SLOW_BURN_RECOVERY,
    );
    let f = fired[0];
    assert_eq!(f.label("severity"), "critical");
    assert_eq!(f.annotation("attribution"), "hot_range", "{f:?}");
    assert!(figure(f, "ratio") >= 1.25, "{f:?}");
    assert!(figure(f, "share") >= 2.0 * figure(f, "fair_share"), "{f:?}");
    assert!(figure(f, "z") >= figure(f, "z_threshold"), "{f:?}");
    assert!(
        f.annotation("description")
            .contains(&format!("shard \"{SLOW_BURN_SHARD}\" takes")),
        "{f:?}"
    );
}

#[test]
fn a_hot_key_inside_a_normal_shard_fires_hot_key_only() {
    let out = replay(&hot_key_in_normal_shard(SEED), "");
    let fired = assert_exactly(
        &out,
        &[Expected {
            alertname: "HotKey",
            labels: &[
                ("group", HOT_KEY_GROUP),
                ("key", HOT_KEY),
                ("shard", HOT_KEY_SHARD),
            ],
        }],
        HOT_KEY_ONSET,
        MAX_STEP_DELAY_SECS,
        HOT_KEY_RECOVERY,
    );
    let f = fired[0];
    assert_eq!(f.annotation("scope"), "shard", "{f:?}");
    assert!(figure(f, "share") >= 0.5, "{f:?}");
    assert!(figure(f, "ratio") >= 2.0, "{f:?}");
}

#[test]
fn a_sudden_hot_shard_fires_hot_shard_and_hot_key_naming_the_key() {
    let out = replay(&sudden_hot_shard(SEED), "");
    let fired = assert_exactly(
        &out,
        &[
            Expected {
                alertname: "HotShard",
                labels: &[("group", SUDDEN_GROUP), ("shard", SUDDEN_SHARD)],
            },
            Expected {
                alertname: "HotKey",
                labels: &[
                    ("group", SUDDEN_GROUP),
                    ("key", SUDDEN_KEY),
                    ("shard", SUDDEN_SHARD),
                ],
            },
        ],
        SUDDEN_ONSET,
        MAX_STEP_DELAY_SECS,
        SUDDEN_RECOVERY,
    );
    let (shard, key) = (fired[0], fired[1]);
    assert_eq!(shard.annotation("top_key"), SUDDEN_KEY, "{shard:?}");
    assert_eq!(shard.annotation("attribution"), "hot_key", "{shard:?}");
    assert!(figure(shard, "ratio") >= 5.0, "{shard:?}");
    // A quarter of the group: the group rule, with the key's one shard as a label.
    assert_eq!(key.annotation("scope"), "group", "{key:?}");
    assert!(figure(key, "share") >= 0.2, "{key:?}");
}

#[test]
fn a_slow_shard_fires_latency_skew_only() {
    let out = replay(&slow_shard(SEED), "");
    let fired = assert_exactly(
        &out,
        &[Expected {
            alertname: "LatencySkew",
            labels: &[("group", SLOW_GROUP), ("shard", SLOW_SHARD)],
        }],
        SLOW_ONSET,
        MAX_STEP_DELAY_SECS,
        SLOW_RECOVERY,
    );
    let f = fired[0];
    assert!(figure(f, "ratio") >= 3.0, "{f:?}");
    assert!(
        figure(f, "p99_ms") - figure(f, "peer_median_p99_ms") >= 50.0,
        "{f:?}"
    );
}

#[test]
fn capacity_headroom_warns_on_the_slow_burn_with_configured_capacities() {
    // 100 req/s per shard: normal shards run at 25%, shard-17 ramps to 150%.
    let config = "detectors:\n  capacity_headroom:\n    capacities:\n      - {group: ledger-db, shard: \"*\", max_requests_per_second: 100}\n";
    let out = replay(&slow_burn(SEED), config);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let cap: Vec<&TransitionLine> = out
        .transitions
        .iter()
        .filter(|t| t.alertname == "CapacityHeadroom")
        .collect();
    let states: Vec<&str> = cap.iter().map(|t| t.state.as_str()).collect();
    assert_eq!(states, ["firing", "resolved"], "{}", out.stdout);
    let f = cap[0];
    assert_eq!(f.label("shard"), SLOW_BURN_SHARD);
    // The projection warns before utilisation reaches 0.8 (load 3.2x, 158 s into the ramp).
    let delay = f.ts - SLOW_BURN_ONSET;
    eprintln!(
        "CapacityHeadroom fired {delay} s after onset at utilisation {}, projected saturation in {} s",
        f.annotation("utilisation"),
        f.annotation("projected_saturation_secs")
    );
    assert!(delay <= 160.0, "fired {delay} s after onset");
    assert!(cap[1].ts > SLOW_BURN_RECOVERY);
    assert!(cap[1].ts - SLOW_BURN_RECOVERY <= MAX_RESOLVE_DELAY_SECS);
    // The capacity list changes nothing else.
    assert_eq!(out.find("HotShard", "firing").len(), 1, "{}", out.stdout);
}

#[test]
fn the_empty_key_incident_names_shard_17_and_the_empty_key() {
    let out = replay(&gemini_cache_collapse(SEED), "");
    assert_eq!(out.code, 0, "{}", out.stderr);
    let shard = out
        .find("HotShard", "firing")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no HotShard:\n{}", out.stdout));
    assert_eq!(shard.label("group"), GEMINI_GROUP);
    assert_eq!(shard.label("shard"), GEMINI_HOT_SHARD);
    assert_eq!(shard.annotation("top_key"), "(empty)", "{shard:?}");
    assert_eq!(shard.annotation("attribution"), "hot_key", "{shard:?}");
    let key = out
        .find("HotKey", "firing")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no HotKey:\n{}", out.stdout));
    assert_eq!(key.label("group"), GEMINI_GROUP);
    assert_eq!(key.label("key"), "(empty)");
    assert_eq!(key.label("shard"), GEMINI_HOT_SHARD);
    for t in [shard, key] {
        let d = t.ts - GEMINI_ONSET;
        eprintln!("{} fired {d} s after the onset", t.alertname);
        assert!(d > 0.0 && d <= MAX_STEP_DELAY_SECS, "{t:?}");
    }
    // Both follow the trigger: resolved once the empty-key traffic is fixed.
    for name in ["HotShard", "HotKey"] {
        let r = out.find(name, "resolved");
        assert_eq!(r.len(), 1, "{name}:\n{}", out.stdout);
        let d = r[0].ts - GEMINI_TRIGGER_END;
        eprintln!("{name} resolved {d} s after the trigger ended");
        assert!(d > 0.0 && d <= MAX_RESOLVE_DELAY_SECS, "{:?}", r[0]);
    }
    // No other shard is called hot, and no key other than the empty key.
    assert!(
        out.transitions
            .iter()
            .filter(|t| t.alertname == "HotShard" || t.alertname == "HotKey")
            .all(|t| t.label("shard") == GEMINI_HOT_SHARD),
        "{}",
        out.stdout
    );
}

#[test]
fn replay_is_deterministic() {
    let trace = sudden_hot_shard(SEED + 1);
    let a = replay(&trace, "");
    let b = replay(&trace, "");
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert!(!a.transitions.is_empty());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn recording_threads_give_the_same_transitions_as_one() {
    // `window.record_threads` splits the shards between threads and merges the parts at close;
    // while no cap binds and the keys fit the summaries, every figure is the one thread's.
    for trace in [
        gemini_cache_collapse(SEED),
        sudden_hot_shard(SEED),
        hot_key_in_normal_shard(SEED),
    ] {
        let one = replay(&trace, "");
        assert_eq!(one.code, 0, "{}", one.stderr);
        assert!(!one.transitions.is_empty());
        for threads in [2, 3] {
            let parted = replay(&trace, &format!("window:\n  record_threads: {threads}\n"));
            assert_eq!(parted.code, 0, "{}", parted.stderr);
            assert_eq!(one.stdout, parted.stdout, "{threads} recording threads");
        }
    }
}
