//! Writes every seeded scenario trace as NDJSON into a directory, for replaying outside the
//! tests: `cargo run --release -p skewwatch-e2e --example scenario_traces -- DIR`.
//!
//! `scripts/replay-golden.sh` uses it to check that a change leaves every alert transition of
//! every scenario byte-identical.

use std::path::PathBuf;

use skewwatch_e2e::scenario::Trace;
use skewwatch_e2e::scenarios::{benign, deadline, failing, hot, incidents};

/// The seeds the scenario tests use: the fixed test seed and three more.
const SEEDS: [u64; 4] = [20_251_107, 1, 2, 3];

/// A scenario family: its file-name stem and its trace for a seed.
type Family = (&'static str, fn(u64) -> Trace);

fn main() -> std::io::Result<()> {
    let dir: PathBuf = std::env::args_os()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(|| "scenario-traces".into());
    std::fs::create_dir_all(&dir)?;
    let families: [Family; 19] = [
        ("many_small_shards", benign::many_small_shards),
        ("diurnal", benign::diurnal),
        ("stable_zipf_skew", benign::stable_zipf_skew),
        ("cold_cache_refill", benign::cold_cache_refill),
        ("short_bursts", benign::short_bursts),
        ("burst_sweep", benign::burst_sweep),
        ("slow_burn", hot::slow_burn),
        ("hot_key_in_normal_shard", hot::hot_key_in_normal_shard),
        ("sudden_hot_shard", hot::sudden_hot_shard),
        ("slow_shard", hot::slow_shard),
        ("gemini_cache_collapse", incidents::gemini_cache_collapse),
        ("fast_failure_sink", incidents::fast_failure_sink),
        ("dead_shard", failing::dead_shard),
        ("quiet_shard_errors", failing::quiet_shard_errors),
        ("deadline_pile_up", deadline::deadline_pile_up),
        ("replica_pile_up", deadline::replica_pile_up),
        ("steady_timeouts", deadline::steady_timeouts),
        ("slow_far_from_deadline", deadline::slow_far_from_deadline),
        ("short_pile_ups", deadline::short_pile_ups),
    ];
    for (name, make) in families {
        for seed in SEEDS {
            let path = dir.join(format!("{name}-{seed}.ndjson"));
            make(seed).write(&path)?;
            println!("{}", path.display());
        }
    }
    Ok(())
}
