//! Scenario traces: shards that fail, loudly or quietly, among healthy peers.
//!
//! - [`dead_shard`]: one shard of 128 fails every request (`unavailable`, fast) for five
//!   minutes, at 1,000 req/s for the group: ~8 req/s on the dead shard, so the group's error
//!   ratio moves from 0.3% to about 1.1%, far under any group-level alert.
//! - [`quiet_shard_errors`]: a shard at 2 req/s whose errors come and go (5% normally, spells of
//!   half its requests failing), beside 16 busy healthy shards. Its 5% is its normal; a spell of
//!   50% is 45 points over it, which the accumulated evidence of 20 requests a window proves in
//!   about five windows: the two-minute spell fires, the ordinary stretches never do.
//!
//! Both build on the ordinary-traffic [`Workload`] and start with [`WARM_SECS`] of plain traffic.

use crate::scenario::{Rng, Trace};
use crate::scenarios::benign::{START, Shape, WARM_SECS, Workload};

/// Group of [`dead_shard`].
pub const DEAD_GROUP: &str = "kv-store";
/// Shards of [`dead_shard`].
pub const DEAD_SHARDS: usize = 128;
/// The shard that dies.
pub const DEAD_SHARD: &str = "shard-077";
/// Requests per second of the whole group.
pub const DEAD_RPS: f64 = 1000.0;
/// The shard dies (trace time, on a window boundary).
pub const DEAD_ONSET: f64 = START + WARM_SECS;
/// The shard is back.
pub const DEAD_RECOVERY: f64 = DEAD_ONSET + 300.0;
/// End of the trace.
pub const DEAD_END: f64 = DEAD_RECOVERY + 300.0;

/// One shard of 128 answers every request with a fast `unavailable` from [`DEAD_ONSET`] to
/// [`DEAD_RECOVERY`]; the balancer does not move its traffic (hash routing).
pub fn dead_shard(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let w = Workload::new(DEAD_GROUP, "shard-", DEAD_SHARDS, DEAD_RPS);
    let dead = w
        .shards
        .iter()
        .position(|s| s == DEAD_SHARD)
        .expect("the dead shard is one of the shards");
    let normal = w.normal();
    let (from, to) = (DEAD_ONSET - START, DEAD_RECOVERY - START);
    let mut trace = Trace::default();
    w.emit(
        &mut trace,
        &mut rng,
        START,
        (DEAD_END - START) as u64,
        |t, i| {
            if i == dead && t >= from && t < to {
                // Connection refused: fast, and never a cache hit.
                Shape {
                    error_ratio: 1.0,
                    error_class: "unavailable",
                    latency_factor: 0.1,
                    ..normal
                }
            } else {
                normal
            }
        },
    );
    trace.sort();
    trace
}

/// Group of [`quiet_shard_errors`].
pub const QUIET_GROUP: &str = "kv-mixed";
/// The quiet shard of [`quiet_shard_errors`].
pub const QUIET_SHARD: &str = "shard-16";
/// Its requests per second.
pub const QUIET_RPS: f64 = 2.0;
/// Spells (start offset from [`START`], length, seconds) in which half its requests fail.
pub const QUIET_SPELLS: [(f64, f64); 3] = [(700.0, 60.0), (900.0, 30.0), (1100.0, 120.0)];

/// 16 shards at 50 req/s each and [`QUIET_SHARD`] at 2 req/s, 25 minutes. The quiet shard
/// fails 5% of its requests, and half of them during [`QUIET_SPELLS`].
pub fn quiet_shard_errors(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let mut w = Workload::new(QUIET_GROUP, "shard-", 17, 800.0 + QUIET_RPS);
    // 16 shards of weight 1 at 50 req/s: the 17th weighs QUIET_RPS / 50.
    w.weights[16] = QUIET_RPS / 50.0;
    w.tick_secs = 1;
    let normal = w.normal();
    let mut trace = Trace::default();
    w.emit(&mut trace, &mut rng, START, 1500, |t, i| {
        if i != 16 {
            return normal;
        }
        let spell = QUIET_SPELLS
            .iter()
            .any(|&(from, len)| t >= from && t < from + len);
        Shape {
            error_ratio: if spell { 0.5 } else { 0.05 },
            error_class: "timeout",
            ..normal
        }
    });
    trace.sort();
    trace
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dead_shard_fails_everything_and_barely_moves_the_group() {
        let t = dead_shard(1);
        let (mut all, mut err, mut dead, mut dead_err) = (0, 0, 0, 0);
        for r in t
            .records
            .iter()
            .filter(|r| r.ts >= DEAD_ONSET && r.ts < DEAD_RECOVERY)
        {
            all += r.count;
            if r.outcome != "ok" {
                err += r.count;
            }
            if r.shard == DEAD_SHARD {
                dead += r.count;
                if r.outcome == "unavailable" {
                    dead_err += r.count;
                }
            }
        }
        assert_eq!(dead, dead_err);
        let rps = dead as f64 / (DEAD_RECOVERY - DEAD_ONSET);
        assert!((6.5..9.0).contains(&rps), "{rps}");
        let group = err as f64 / all as f64;
        assert!((0.008..0.015).contains(&group), "{group}");
    }

    #[test]
    fn the_quiet_shard_takes_two_requests_per_second() {
        let t = quiet_shard_errors(1);
        let n: u64 = t
            .records
            .iter()
            .filter(|r| r.shard == QUIET_SHARD)
            .map(|r| r.count)
            .sum();
        let rps = n as f64 / 1500.0;
        assert!((1.8..2.2).contains(&rps), "{rps}");
    }
}
