//! End-to-end: ordinary traffic, replayed through the real `skewwatch replay` binary on its
//! embedded default configuration, with every detector enabled, must raise nothing at all:
//! not one transition.

use skewwatch_e2e::replay::{ReplayOutput, replay};
use skewwatch_e2e::scenario::Trace;
use skewwatch_e2e::scenarios::benign::{
    burst_sweep, cold_cache_refill, diurnal, many_small_shards, short_bursts, stable_zipf_skew,
};

const SEED: u64 = 20_251_107;

/// Replays `trace` on the embedded defaults and asserts that nothing fired.
fn assert_silent(name: &str, trace: &Trace) -> ReplayOutput {
    let out = replay(trace, "");
    assert_eq!(out.code, 0, "{name}: {}", out.stderr);
    eprintln!(
        "{name}: {} records, {} requests; {}",
        trace.records.len(),
        trace.requests(),
        out.stderr.trim()
    );
    assert!(
        out.transitions.is_empty(),
        "{name} raised alerts on benign traffic:\n{}",
        out.stdout
    );
    out
}

#[test]
fn many_low_volume_shards_raise_nothing() {
    assert_silent("many_small_shards", &many_small_shards(SEED));
}

#[test]
fn a_diurnal_swing_raises_nothing() {
    assert_silent("diurnal", &diurnal(SEED));
}

#[test]
fn a_stable_zipf_skew_raises_nothing() {
    assert_silent("stable_zipf_skew", &stable_zipf_skew(SEED));
}

#[test]
fn a_cold_cache_refilling_after_a_deploy_raises_nothing() {
    assert_silent("cold_cache_refill", &cold_cache_refill(SEED));
}

#[test]
fn short_bursts_on_one_shard_raise_nothing() {
    assert_silent("short_bursts", &short_bursts(SEED));
}

#[test]
fn bursts_of_up_to_20_s_at_every_alignment_raise_nothing() {
    // The shape-of-evidence rule (docs/adr/003) fires a step at its third full window; a
    // tolerated burst must stay silent wherever it falls against the windows, on every seed.
    for seed in [SEED, 1, 2] {
        assert_silent(&format!("burst_sweep seed {seed}"), &burst_sweep(seed));
    }
}
