//! End-to-end: failing shards, replayed through the real `skewwatch replay` binary on its
//! embedded default configuration, over several seeds. A dead shard among 128 at 1,000 req/s
//! must fire `ShardFailing` (and nothing else) within two minutes and resolve after it
//! recovers; a shard at 2 req/s is judged later, not never: its two-minute spell of 50% errors
//! fires, its ordinary 5% never does.

use skewwatch_e2e::replay::{ReplayOutput, replay};
use skewwatch_e2e::scenarios::benign::START;
use skewwatch_e2e::scenarios::failing::{
    DEAD_END, DEAD_GROUP, DEAD_ONSET, DEAD_RECOVERY, DEAD_SHARD, DEAD_SHARDS, QUIET_SHARD,
    QUIET_SPELLS, dead_shard, quiet_shard_errors,
};

const SEEDS: [u64; 3] = [20_251_201, 7, 1_234_567];

/// Onset -> firing, at most: the bound.
const MAX_DETECTION_DELAY_SECS: f64 = 120.0;

/// Recovery -> resolved, at most: the condition stops in the first healthy window, then
/// `keep_firing_for_secs` (60 s); one spare window.
const MAX_RESOLVE_DELAY_SECS: f64 = 80.0;

const _: () = assert!(DEAD_END - DEAD_RECOVERY > MAX_RESOLVE_DELAY_SECS);

fn states(out: &ReplayOutput) -> Vec<(&str, &str, &str)> {
    out.transitions
        .iter()
        .map(|t| (t.alertname.as_str(), t.label("shard"), t.state.as_str()))
        .collect()
}

#[test]
fn a_dead_shard_among_128_fires_shard_failing_within_two_minutes_and_resolves() {
    for seed in SEEDS {
        let out = replay(&dead_shard(seed), "");
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(
            states(&out),
            [
                ("ShardFailing", DEAD_SHARD, "firing"),
                ("ShardFailing", DEAD_SHARD, "resolved")
            ],
            "seed {seed}:\n{}",
            out.stdout
        );
        let (f, r) = (&out.transitions[0], &out.transitions[1]);
        let delay = f.ts - DEAD_ONSET;
        let resolve = r.ts - DEAD_RECOVERY;
        eprintln!("seed {seed}: fired {delay} s after onset, resolved {resolve} s after recovery");
        assert!(delay > 0.0 && delay <= MAX_DETECTION_DELAY_SECS, "{f:?}");
        assert!(resolve > 0.0 && resolve <= MAX_RESOLVE_DELAY_SECS, "{r:?}");
        assert_eq!(f.label("group"), DEAD_GROUP);
        assert_eq!(f.label("severity"), "critical");
        assert_eq!(f.annotation("dominant_class"), "unavailable", "{f:?}");
        assert_eq!(f.annotation("error_ratio_unavailable"), "100.0%", "{f:?}");
        // Its share of the load is about the fair share: it is not hot, it is dead.
        let share: f64 = f.annotation("share").parse().unwrap();
        let fair = 1.0 / DEAD_SHARDS as f64;
        assert!(share > 0.5 * fair && share < 2.0 * fair, "{f:?}");
        let group: f64 = f
            .annotation("group_error_ratio")
            .trim_end_matches('%')
            .parse()
            .unwrap();
        assert!(group < 5.0, "{f:?}");
    }
}

#[test]
fn a_quiet_shard_fires_in_its_long_spell_of_errors_and_never_in_its_ordinary_errors() {
    // Before the evidence accumulated, 20 requests a window could never reach the count floor
    // and this trace raised nothing; a 45-point rise for two minutes is what issue 26 asks to
    // see at any rate.
    for seed in SEEDS {
        let out = replay(&quiet_shard_errors(seed), "");
        assert_eq!(out.code, 0, "{}", out.stderr);
        let firings: Vec<f64> = out
            .transitions
            .iter()
            .filter(|t| t.state == "firing")
            .map(|t| {
                assert_eq!(
                    (t.alertname.as_str(), t.label("shard")),
                    ("ShardFailing", QUIET_SHARD),
                    "seed {seed}:\n{}",
                    out.stdout
                );
                t.ts - START
            })
            .collect();
        // Every firing falls within a spell (or the window that closes it).
        for ts in &firings {
            let in_spell = QUIET_SPELLS
                .iter()
                .any(|&(from, len)| *ts > from && *ts <= from + len + 10.0);
            assert!(in_spell, "seed {seed}: fired at +{ts} s:\n{}", out.stdout);
        }
        let (from, len) = QUIET_SPELLS[2];
        assert!(
            firings.iter().any(|ts| *ts > from && *ts <= from + len),
            "seed {seed}: the {len} s spell at +{from} s did not fire:\n{}",
            out.stdout
        );
    }
}
