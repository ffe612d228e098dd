//! Scenario traces: hot shards, hot keys and a slow shard, on top of the ordinary-traffic model
//! of [`super::benign`] (same cache, latency, error and key texture).
//!
//! - [`slow_burn`]: one shard's load ramps up over six minutes to 6× (a hot *range*: every key
//!   of the shard grows alike), holds, then is re-spread at once.
//! - [`hot_key_in_normal_shard`]: one tenant's traffic collapses onto a single key inside an
//!   otherwise normal shard: the key goes from 3% to 70% of the shard while the shard's total
//!   load grows only 15% (so only `HotKey` may fire, not `HotShard`).
//! - [`sudden_hot_shard`]: a trending key lands on one shard at once: the shard jumps to 11×
//!   its load and the key to a quarter of the whole group (`HotShard` and `HotKey` both fire,
//!   the story "shard 9 is hot because key query:trending is 91% of it").
//! - [`slow_shard`]: one shard's latency goes 15× (a sick disk) while its load stays the same
//!   (`LatencySkew`).
//!
//! Each starts at [`START`] with [`WARM_SECS`] of plain traffic; onsets and recoveries fall on
//! 10 s window boundaries so detection delays read as whole windows.

use crate::scenario::{Rng, Trace};
use crate::scenarios::benign::{Shape, ShardKeys, WARM_SECS, Workload};

pub use crate::scenarios::benign::START;

/// Group of [`slow_burn`].
pub const SLOW_BURN_GROUP: &str = "ledger-db";
/// The shard that heats up in [`slow_burn`].
pub const SLOW_BURN_SHARD: &str = "shard-17";
/// The ramp starts (trace time).
pub const SLOW_BURN_ONSET: f64 = START + WARM_SECS;
/// Length of the ramp from 1× to [`SLOW_BURN_PEAK`]×, seconds.
pub const SLOW_BURN_RAMP_SECS: f64 = 360.0;
/// Load multiplier at the end of the ramp.
pub const SLOW_BURN_PEAK: f64 = 6.0;
/// The shard's keys are re-spread: its load is back to normal (trace time).
pub const SLOW_BURN_RECOVERY: f64 = SLOW_BURN_ONSET + 600.0;
/// End of the trace.
pub const SLOW_BURN_END: f64 = SLOW_BURN_RECOVERY + 360.0;
/// Requests per second of the whole group, before the burn.
pub const SLOW_BURN_RPS: f64 = 1600.0;

/// The hot shard's load multiplier `rel` seconds after the trace start.
pub fn slow_burn_load(rel: f64) -> f64 {
    let t = rel - (SLOW_BURN_ONSET - START);
    if t < 0.0 || rel >= SLOW_BURN_RECOVERY - START {
        1.0
    } else {
        1.0 + (SLOW_BURN_PEAK - 1.0) * (t / SLOW_BURN_RAMP_SECS).min(1.0)
    }
}

/// 64 shards at 25 req/s each; from [`SLOW_BURN_ONSET`], `shard-17`'s load ramps linearly to
/// 6× over six minutes (every key of the shard alike: a hot range, no dominant key), holds for
/// four minutes, and is back to normal at [`SLOW_BURN_RECOVERY`]. The shard gets slower as it
/// heats (latency × 1 + 0.1·(load − 1), 1.5× at the peak), as a loaded queue does.
pub fn slow_burn(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let w = Workload::new(SLOW_BURN_GROUP, "shard-", 64, SLOW_BURN_RPS);
    let hot = shard_index(&w, SLOW_BURN_SHARD);
    let normal = w.normal();
    let mut trace = Trace::default();
    let secs = (SLOW_BURN_END - START) as u64;
    w.emit(&mut trace, &mut rng, START, secs, |t, i| {
        if i != hot {
            return normal;
        }
        let load = slow_burn_load(t);
        Shape {
            load,
            latency_factor: 1.0 + 0.1 * (load - 1.0),
            ..normal
        }
    });
    trace.sort();
    trace
}

/// Group of [`hot_key_in_normal_shard`].
pub const HOT_KEY_GROUP: &str = "tenants-db";
/// The shard holding the hot key.
pub const HOT_KEY_SHARD: &str = "shard-07";
/// The key that turns hot.
pub const HOT_KEY: &str = "tenant-42";
/// The tenant's traffic collapses onto one key (trace time).
pub const HOT_KEY_ONSET: f64 = START + WARM_SECS;
/// Fixed (trace time).
pub const HOT_KEY_RECOVERY: f64 = HOT_KEY_ONSET + 480.0;
/// End of the trace.
pub const HOT_KEY_END: f64 = HOT_KEY_RECOVERY + 360.0;

/// 16 shards at 100 req/s each. `tenant-42` normally carries 3% of `shard-07`. From
/// [`HOT_KEY_ONSET`] to [`HOT_KEY_RECOVERY`] a client bug writes most of the shard's traffic
/// under that one key: the shard's other keys fall to 35% of their load and `tenant-42` takes
/// 80 req/s, so the key is ~70% of the shard and ~5% of the group, and the shard's total is
/// only 1.15× normal.
pub fn hot_key_in_normal_shard(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let mut w = Workload::new(HOT_KEY_GROUP, "shard-", 16, 1600.0);
    let hot = shard_index(&w, HOT_KEY_SHARD);
    w.keys[hot] = ShardKeys {
        heavy: vec![(HOT_KEY.to_owned(), 0.03)],
        ..ShardKeys::uniform("k7-", 2000)
    };
    let normal = w.normal();
    let (from, to) = (HOT_KEY_ONSET - START, HOT_KEY_RECOVERY - START);
    let mut trace = Trace::default();
    let secs = (HOT_KEY_END - START) as u64;
    w.emit(&mut trace, &mut rng, START, secs, |t, i| {
        if i == hot && t >= from && t < to {
            Shape {
                load: 0.35,
                extra: Some((HOT_KEY, 80.0)),
                ..normal
            }
        } else {
            normal
        }
    });
    trace.sort();
    trace
}

/// Group of [`sudden_hot_shard`].
pub const SUDDEN_GROUP: &str = "search-index";
/// The shard that turns hot.
pub const SUDDEN_SHARD: &str = "shard-09";
/// The key that makes it hot.
pub const SUDDEN_KEY: &str = "query:trending";
/// The key starts trending (trace time).
pub const SUDDEN_ONSET: f64 = START + WARM_SECS;
/// The key is cached at the edge; the shard is back to normal (trace time).
pub const SUDDEN_RECOVERY: f64 = SUDDEN_ONSET + 300.0;
/// End of the trace.
pub const SUDDEN_END: f64 = SUDDEN_RECOVERY + 300.0;

/// 32 shards at 40 req/s each. From [`SUDDEN_ONSET`] to [`SUDDEN_RECOVERY`] the key
/// `query:trending`, which lives on `shard-09`, takes 400 req/s: the shard carries 11× its
/// load (26% of the group) and the key 91% of the shard, 24% of the group.
pub fn sudden_hot_shard(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let w = Workload::new(SUDDEN_GROUP, "shard-", 32, 1280.0);
    let hot = shard_index(&w, SUDDEN_SHARD);
    let normal = w.normal();
    let (from, to) = (SUDDEN_ONSET - START, SUDDEN_RECOVERY - START);
    let mut trace = Trace::default();
    let secs = (SUDDEN_END - START) as u64;
    w.emit(&mut trace, &mut rng, START, secs, |t, i| {
        if i == hot && t >= from && t < to {
            Shape {
                extra: Some((SUDDEN_KEY, 400.0)),
                ..normal
            }
        } else {
            normal
        }
    });
    trace.sort();
    trace
}

/// Group of [`slow_shard`].
pub const SLOW_GROUP: &str = "blob-store";
/// The shard whose disk turns sick.
pub const SLOW_SHARD: &str = "shard-04";
/// Latency goes up (trace time).
pub const SLOW_ONSET: f64 = START + WARM_SECS;
/// The disk is replaced (trace time).
pub const SLOW_RECOVERY: f64 = SLOW_ONSET + 300.0;
/// End of the trace.
pub const SLOW_END: f64 = SLOW_RECOVERY + 300.0;

/// 12 shards at 50 req/s each. From [`SLOW_ONSET`] to [`SLOW_RECOVERY`] every latency of
/// `shard-04` is 15× (backend calls ~120 ms, its p99 ~150–200 ms against ~15 ms for its
/// peers); its load, errors and cache are unchanged.
pub fn slow_shard(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let w = Workload::new(SLOW_GROUP, "shard-", 12, 600.0);
    let hot = shard_index(&w, SLOW_SHARD);
    let normal = w.normal();
    let (from, to) = (SLOW_ONSET - START, SLOW_RECOVERY - START);
    let mut trace = Trace::default();
    let secs = (SLOW_END - START) as u64;
    w.emit(&mut trace, &mut rng, START, secs, |t, i| {
        if i == hot && t >= from && t < to {
            Shape {
                latency_factor: 15.0,
                ..normal
            }
        } else {
            normal
        }
    });
    trace.sort();
    trace
}

fn shard_index(w: &Workload, name: &str) -> usize {
    w.shards
        .iter()
        .position(|s| s == name)
        .unwrap_or_else(|| panic!("{name} is not a shard of {}", w.group))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (requests of `shard`, requests of `key` on it, requests of the group) in [from, to).
    fn counts(t: &Trace, shard: &str, key: &str, from: f64, to: f64) -> (f64, f64, f64) {
        let (mut s, mut k, mut g) = (0.0, 0.0, 0.0);
        for r in t.records.iter().filter(|r| r.ts >= from && r.ts < to) {
            g += r.count as f64;
            if r.shard == shard {
                s += r.count as f64;
                if r.key.as_deref() == Some(key) {
                    k += r.count as f64;
                }
            }
        }
        (s, k, g)
    }

    #[test]
    fn the_slow_burn_reaches_six_fold_and_recovers() {
        let t = slow_burn(1);
        let (before, _, g) = counts(&t, SLOW_BURN_SHARD, "", START, SLOW_BURN_ONSET);
        let fair = g / 64.0;
        assert!((before / fair - 1.0).abs() < 0.05, "{}", before / fair);
        let peak_from = SLOW_BURN_ONSET + SLOW_BURN_RAMP_SECS;
        let (peak, _, _) = counts(&t, SLOW_BURN_SHARD, "", peak_from, peak_from + 60.0);
        let rate = peak / 60.0 / (SLOW_BURN_RPS / 64.0);
        assert!((5.5..6.5).contains(&rate), "{rate}");
        assert_eq!(slow_burn_load(SLOW_BURN_RECOVERY - START), 1.0);
    }

    #[test]
    fn the_hot_key_dominates_a_barely_busier_shard() {
        let t = hot_key_in_normal_shard(1);
        let (s0, k0, _) = counts(&t, HOT_KEY_SHARD, HOT_KEY, START, HOT_KEY_ONSET);
        let (s1, k1, g1) = counts(&t, HOT_KEY_SHARD, HOT_KEY, HOT_KEY_ONSET, HOT_KEY_RECOVERY);
        let (d0, d1) = (WARM_SECS, HOT_KEY_RECOVERY - HOT_KEY_ONSET);
        assert!((0.02..0.04).contains(&(k0 / s0)), "{}", k0 / s0);
        assert!((0.65..0.75).contains(&(k1 / s1)), "{}", k1 / s1);
        assert!((0.04..0.06).contains(&(k1 / g1)), "{}", k1 / g1);
        let growth = (s1 / d1) / (s0 / d0);
        assert!((1.1..1.2).contains(&growth), "{growth}");
    }

    #[test]
    fn the_sudden_hot_shard_is_a_quarter_of_the_group() {
        let t = sudden_hot_shard(1);
        let (s, k, g) = counts(&t, SUDDEN_SHARD, SUDDEN_KEY, SUDDEN_ONSET, SUDDEN_RECOVERY);
        assert!((0.24..0.28).contains(&(s / g)), "{}", s / g);
        assert!((0.22..0.26).contains(&(k / g)), "{}", k / g);
    }

    #[test]
    fn the_slow_shard_keeps_its_load() {
        let t = slow_shard(1);
        let (s, _, g) = counts(&t, SLOW_SHARD, "", SLOW_ONSET, SLOW_RECOVERY);
        assert!((s / g * 12.0 - 1.0).abs() < 0.1, "{}", s / g * 12.0);
        let slow = t
            .records
            .iter()
            .filter(|r| r.shard == SLOW_SHARD && r.cache == Some("miss") && r.ts >= SLOW_ONSET)
            .find(|r| r.ts < SLOW_RECOVERY)
            .unwrap();
        assert!(slow.latency_ms.unwrap() > 40.0, "{slow:?}");
    }
}
