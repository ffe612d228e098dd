//! End-to-end: deadline pile-ups, replayed through the real `skewwatch replay` binary, over
//! several seeds. A backend whose latency creeps against its callers' deadline while a quarter
//! of the requests time out must fire `DeadlinePileUp` within two minutes and resolve after it
//! recovers, naming the replica when one carries the timeouts and reporting the growth of the
//! requests in flight that the replicas report; steady timeouts, a slowdown far from the
//! deadline and short pile-ups that clear by themselves must raise nothing.

use skewwatch_e2e::replay::{ReplayOutput, TransitionLine, replay};
use skewwatch_e2e::scenario::Trace;
use skewwatch_e2e::scenarios::deadline::{
    PILE_UP_END, PILE_UP_ONSET, PILE_UP_RECOVERY, PILE_UP_REPLICA, RPC_DEADLINE_MS, RPC_GROUP,
    deadline_pile_up, replica_pile_up, short_pile_ups, slow_far_from_deadline, steady_timeouts,
};

const SEEDS: [u64; 3] = [20_251_201, 7, 1_234_567];

/// Onset -> firing, at most: the bound.
const MAX_DETECTION_DELAY_SECS: f64 = 120.0;

/// Recovery -> resolved, at most: the condition stops in the first fast window, then
/// `keep_firing_for_secs` (60 s); one spare window.
const MAX_RESOLVE_DELAY_SECS: f64 = 80.0;

const _: () = assert!(PILE_UP_END - PILE_UP_RECOVERY > MAX_RESOLVE_DELAY_SECS);

/// The one `DeadlinePileUp` firing and its resolution; every other alert must also resolve and
/// stay on the group.
fn fired_and_resolved(out: &ReplayOutput, seed: u64) -> (&TransitionLine, &TransitionLine) {
    assert_eq!(out.code, 0, "{}", out.stderr);
    let fired = out.find("DeadlinePileUp", "firing");
    let resolved = out.find("DeadlinePileUp", "resolved");
    assert_eq!(
        (fired.len(), resolved.len()),
        (1, 1),
        "seed {seed}:\n{}",
        out.stdout
    );
    for t in &out.transitions {
        assert_eq!(t.label("group"), RPC_GROUP, "{t:?}");
        if t.state == "firing" {
            assert!(t.ts > PILE_UP_ONSET, "fired before the onset: {t:?}");
        }
    }
    let (f, r) = (fired[0], resolved[0]);
    let delay = f.ts - PILE_UP_ONSET;
    let resolve = r.ts - PILE_UP_RECOVERY;
    eprintln!("seed {seed}: fired {delay} s after onset, resolved {resolve} s after recovery");
    assert!(delay > 0.0 && delay <= MAX_DETECTION_DELAY_SECS, "{f:?}");
    assert!(resolve > 0.0 && resolve <= MAX_RESOLVE_DELAY_SECS, "{r:?}");
    (f, r)
}

/// An annotation such as `12.5%` or `250`, as a number.
fn number(t: &TransitionLine, name: &str) -> f64 {
    let text = t.annotation(name);
    text.trim_end_matches('%')
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}: {t:?}"))
}

#[test]
fn a_group_wide_pile_up_fires_within_two_minutes_with_the_inferred_deadline_and_resolves() {
    for seed in SEEDS {
        let out = replay(&deadline_pile_up(seed), "");
        let (f, _) = fired_and_resolved(&out, seed);
        assert_eq!(f.label("shard"), "", "{f:?}");
        assert_eq!(f.label("severity"), "critical");
        assert_eq!(f.annotation("deadline_source"), "inferred", "{f:?}");
        // The median timeout sits on the deadline, within the histogram's 1% and the timers'
        // jitter.
        let deadline = number(f, "deadline_ms");
        assert!(
            (RPC_DEADLINE_MS * 0.98..RPC_DEADLINE_MS * 1.03).contains(&deadline),
            "{f:?}"
        );
        assert!(number(f, "ok_p99_of_deadline") >= 80.0, "{f:?}");
        assert!(number(f, "timeout_ratio") >= 1.0, "{f:?}");
        assert!(number(f, "baseline_timeout_ratio") < 0.5, "{f:?}");
        let m = f.annotation("mitigations");
        for what in ["shorten deadlines", "propagate cancellation", "shed load"] {
            assert!(m.contains(what), "{what}: {f:?}");
        }
        // Every replica reports its requests in flight: the work piling up is measured.
        let growth = f.annotation("inflight_growth");
        let growth: f64 = growth.trim_end_matches('x').parse().expect(growth);
        assert!(growth >= 2.0, "{f:?}");
    }
}

#[test]
fn one_replica_piling_up_is_named_and_a_configured_deadline_is_used() {
    let config = format!(
        "detectors:\n  deadline_pile_up:\n    deadlines_ms:\n      {RPC_GROUP}: {RPC_DEADLINE_MS}\n"
    );
    for seed in SEEDS {
        let trace = replica_pile_up(seed);
        for (cfg, source) in [("", "inferred"), (config.as_str(), "configured")] {
            let out = replay(&trace, cfg);
            let (f, r) = fired_and_resolved(&out, seed);
            assert_eq!(f.label("shard"), PILE_UP_REPLICA, "{f:?}");
            assert_eq!(r.label("shard"), PILE_UP_REPLICA, "{r:?}");
            assert_eq!(f.annotation("deadline_source"), source, "{f:?}");
            assert_eq!(f.annotation("top_timeout_shard"), PILE_UP_REPLICA);
            assert!(
                number(f, "top_timeout_shard_timeout_share") >= 60.0,
                "{f:?}"
            );
            // Its own in-flight reading, several times a healthy replica's ~2.
            assert!(number(f, "top_timeout_shard_inflight") >= 5.0, "{f:?}");
        }
    }
}

/// Replays `trace` on the embedded defaults and asserts that nothing fired.
fn assert_silent(name: &str, trace: &Trace) {
    let out = replay(trace, "");
    assert_eq!(out.code, 0, "{name}: {}", out.stderr);
    assert!(
        out.transitions.is_empty(),
        "{name} raised alerts:\n{}",
        out.stdout
    );
}

#[test]
fn steady_timeouts_raise_nothing() {
    for seed in SEEDS {
        assert_silent(&format!("steady_timeouts {seed}"), &steady_timeouts(seed));
    }
}

#[test]
fn a_slowdown_far_from_the_deadline_raises_nothing() {
    for seed in SEEDS {
        let name = format!("slow_far_from_deadline {seed}");
        assert_silent(&name, &slow_far_from_deadline(seed));
    }
}

#[test]
fn pile_ups_of_10_to_20_s_raise_nothing() {
    for seed in SEEDS {
        assert_silent(&format!("short_pile_ups {seed}"), &short_pile_ups(seed));
    }
}
