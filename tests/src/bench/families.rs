//! The benchmark's scenario families, in one table ([`FAMILIES`]): one incident family per
//! detector it can measure, and the benign families false alarms are counted on.
//!
//! An incident family changes shard 0 (or the whole group) at the onset and keeps the change
//! until the run ends; its magnitude is one number whose meaning the family states. A benign
//! family is ordinary traffic with one kind of texture (a stable Zipf skew, a daily ramp, short
//! bursts, noisy low-rate shards). Adding a detector's family is one entry in [`FAMILIES`].

use skewwatch_detectors::observation::Outcome;
use skewwatch_detectors::prng::mix;

use crate::bench::traffic::{Slice, Traffic};
use crate::scenario::{Rng, Zipf};
use crate::scenarios::benign::hash_shard;

/// Which alert counts as a detection of an incident family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The alert names shard 0 (`shard` label).
    Shard,
    /// The alert names [`crate::bench::traffic::HOT_KEY`] (`key` label).
    Key,
    /// Any alert of the detector (a group-level alert).
    Group,
}

/// An incident family: which detector it is for and what it does at the onset.
#[derive(Debug, Clone, Copy)]
pub struct Incident {
    /// The alert name that must fire.
    pub detector: &'static str,
    /// Which of its alerts counts.
    pub target: Target,
    /// What the magnitude means, for the table (`load ×`, `error ratio`, ...).
    pub unit: &'static str,
    /// Magnitudes swept: weak, reference, strong.
    pub magnitudes: [f64; 3],
    /// Shard `i`'s behaviour after the onset at magnitude `m`, given its normal rate.
    pub after: fn(m: f64, i: usize, shard_rate: f64) -> Slice,
    /// True when the agent starts mid-incident: the onset is the run's start, so the agent's
    /// first window is inside the fault and no detector has a baseline from before it.
    pub from_start: bool,
}

/// A scenario family of the benchmark.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// Name, as printed.
    pub name: &'static str,
    /// What it models, one line.
    pub about: &'static str,
    /// `Some` for an incident family, `None` for a benign one.
    pub incident: Option<Incident>,
    /// Relative shard weights for `n` shards (drawn with the trial's generator).
    pub weights: fn(n: usize, rng: &mut Rng) -> Vec<f64>,
    /// Behaviour of shard `i` at `t` seconds after the run's start, before any onset; benign
    /// families put their texture here. `seed` is the trial's, for hash-drawn noise.
    pub before: fn(t: f64, i: usize, seed: u64, traffic: &Traffic) -> Slice,
}

/// Every family, incident families first. The order is the order of the tables.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "hot_shard",
        about: "shard 0 takes m times its load (every key alike)",
        incident: Some(Incident {
            detector: "HotShard",
            target: Target::Shard,
            from_start: false,
            unit: "load ×",
            magnitudes: HOT_MAGNITUDES,
            after: shard0_load,
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "hot_key",
        about: "a key of shard 0 (3% of it before) takes m times the shard's rate",
        incident: Some(Incident {
            detector: "HotKey",
            target: Target::Key,
            from_start: false,
            unit: "key rate ÷ shard rate",
            magnitudes: [1.0, 3.0, 10.0],
            after: |m, i, rate| {
                shard0(
                    i,
                    Slice {
                        key_rps: m * rate,
                        ..Slice::normal()
                    },
                )
            },
        }),
        weights: equal,
        before: |_, i, _, tr| {
            shard0(
                i,
                Slice {
                    key_rps: 0.03 * tr.shard_rate(0),
                    ..Slice::normal()
                },
            )
        },
    },
    Family {
        name: "slow_shard",
        about: "shard 0 answers m times slower (every response)",
        incident: Some(Incident {
            detector: "LatencySkew",
            target: Target::Shard,
            from_start: false,
            unit: "latency ×",
            magnitudes: SLOW_MAGNITUDES,
            after: shard0_slow,
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "error_surge",
        about: "every shard fails a share m of its requests (0.3% before)",
        incident: Some(Incident {
            detector: "ErrorSurge",
            target: Target::Group,
            from_start: false,
            unit: "error ratio",
            magnitudes: [0.03, 0.1, 0.3],
            after: |m, _, _| Slice {
                error_ratio: m,
                error: Outcome::Timeout,
                ..Slice::normal()
            },
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "cache_collapse",
        about: "the hit ratio falls from 93% to m and backend calls get 3× slower",
        incident: Some(Incident {
            detector: "CacheHitCollapse",
            target: Target::Group,
            from_start: false,
            unit: "hit ratio",
            magnitudes: [0.8, 0.5, 0.2],
            after: |m, _, _| Slice {
                hit_ratio: m,
                backend_factor: 3.0,
                ..Slice::normal()
            },
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "fast_failure",
        about: "shard 0 fails 90% (not_found) 100× faster, under a cache hit, and draws m times its load",
        incident: Some(Incident {
            detector: "FastFailureSink",
            target: Target::Shard,
            from_start: false,
            unit: "load ×",
            magnitudes: [1.5, 2.0, 4.0],
            after: |m, i, _| {
                shard0(
                    i,
                    Slice {
                        load: m,
                        error_ratio: 0.9,
                        error: Outcome::NotFound,
                        latency_factor: 0.01,
                        ..Slice::normal()
                    },
                )
            },
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "failing_shard",
        about: "shard 0 fails a share m of its requests (unavailable), load unchanged",
        incident: Some(Incident {
            detector: "ShardFailing",
            target: Target::Shard,
            from_start: false,
            unit: "error ratio",
            magnitudes: FAILING_MAGNITUDES,
            after: shard0_failing,
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "deadline_pile_up",
        about: "backend calls get 8× slower against a 100 ms deadline: successes crowd under it and a share m of requests time out at it, every shard",
        incident: Some(Incident {
            detector: "DeadlinePileUp",
            target: Target::Group,
            from_start: false,
            unit: "timeout ratio",
            magnitudes: [0.02, 0.05, 0.2],
            after: |m, _, _| Slice {
                error_ratio: m,
                error: Outcome::Timeout,
                backend_factor: 8.0,
                deadline_ms: 100.0,
                ..Slice::normal()
            },
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "near_capacity",
        about: "shard 0 takes m times its load; capacity is 2× the busiest shard's normal rate",
        incident: Some(Incident {
            detector: "CapacityHeadroom",
            target: Target::Shard,
            from_start: false,
            unit: "load ×",
            magnitudes: [1.5, 1.8, 2.5],
            after: shard0_load,
        }),
        weights: equal,
        before: steady,
    },
    // Mid-incident: the agent starts while the fault is already on (a new pod, a rollout, an
    // engineer who deploys it to look at a live incident).
    Family {
        name: "failing_shard_from_start",
        about: "failing_shard, the agent started while shard 0 already fails",
        incident: Some(Incident {
            detector: "ShardFailing",
            target: Target::Shard,
            from_start: true,
            unit: "error ratio",
            magnitudes: FAILING_MAGNITUDES,
            after: shard0_failing,
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "slow_shard_from_start",
        about: "slow_shard, the agent started while shard 0 is already slow",
        incident: Some(Incident {
            detector: "LatencySkew",
            target: Target::Shard,
            from_start: true,
            unit: "latency ×",
            magnitudes: SLOW_MAGNITUDES,
            after: shard0_slow,
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "hot_shard_from_start",
        about: "hot_shard, the agent started while shard 0 is already hot",
        incident: Some(Incident {
            detector: "HotShard",
            target: Target::Shard,
            from_start: true,
            unit: "load ×",
            magnitudes: HOT_MAGNITUDES,
            after: shard0_load,
        }),
        weights: equal,
        before: steady,
    },
    Family {
        name: "steady_zipf",
        about: "Zipf-1.0 keys hashed onto the shards; the top key (8% of the group) is keyed",
        incident: None,
        weights: zipf_weights,
        before: |_, i, _, tr| {
            if i == top_key_shard(tr.shards.len()) {
                Slice {
                    key_rps: top_key_share() * tr.rate,
                    ..Slice::normal()
                }
            } else {
                Slice::normal()
            }
        },
    },
    Family {
        name: "diurnal",
        about: "load 1 ± 0.5 over an hour (a day compressed), per-minute steps, shards ±15%",
        incident: None,
        weights: |n, rng| (0..n).map(|_| 0.85 + 0.3 * rng.uniform()).collect(),
        before: |t, _, _, _| {
            let minute = (t / 60.0).floor() * 60.0;
            Slice {
                load: 1.0 + 0.5 * (std::f64::consts::TAU * minute / 3600.0).sin(),
                ..Slice::normal()
            }
        },
    },
    Family {
        name: "short_bursts",
        about: "every 2 min a random shard takes 5× or 10× for 10–20 s",
        incident: None,
        weights: equal,
        before: |t, i, seed, tr| {
            let slot = (t / BURST_EVERY_SECS).floor();
            let h = mix(seed ^ mix(slot as u64));
            let shard = (h % tr.shards.len() as u64) as usize;
            let at = ((h >> 16) % 60) as f64;
            let len = 10.0 + ((h >> 32) % 11) as f64;
            let factor = if (h >> 48) & 1 == 0 { 5.0 } else { 10.0 };
            let rel = t - slot * BURST_EVERY_SECS;
            let burst = i == shard && rel >= at && rel < at + len;
            Slice {
                load: if burst { factor } else { 1.0 },
                ..Slice::normal()
            }
        },
    },
    Family {
        name: "noisy_shards",
        about: "each shard's load varies ×e^(0.5·N(0,1)) every 10 s (overdispersed)",
        incident: None,
        weights: equal,
        before: |t, i, seed, _| Slice {
            load: noise(t, i, seed),
            ..Slice::normal()
        },
    },
    Family {
        name: "noisy_key",
        about: "`noisy_shards`, and a key that is 3/4 of shard 0 varies with it",
        incident: None,
        weights: equal,
        before: |t, i, seed, tr| {
            let load = noise(t, i, seed);
            Slice {
                load,
                key_rps: if i == 0 {
                    3.0 * tr.shard_rate(0) * load
                } else {
                    0.0
                },
                ..Slice::normal()
            }
        },
    },
];

/// The load factor of shard `i` at `t` in `noisy_shards`: e^(0.5·Z − 0.125) for a fresh normal
/// Z every 10 s (mean 1).
fn noise(t: f64, i: usize, seed: u64) -> f64 {
    let step = (t / 10.0).floor() as u64;
    let h = mix(seed ^ mix(step ^ ((i as u64) << 32)));
    let u = ((h >> 11) as f64 / (1u64 << 53) as f64).clamp(1e-9, 1.0 - 1e-9);
    let z = skewwatch_detectors::stats::normal_quantile(u);
    (0.5 * z - 0.125).exp()
}

/// Magnitudes of the hot shard families: its load times m.
const HOT_MAGNITUDES: [f64; 3] = [2.0, 5.0, 10.0];
/// Magnitudes of the slow shard families: its latency times m.
const SLOW_MAGNITUDES: [f64; 3] = [3.0, 10.0, 30.0];
/// Magnitudes of the failing shard families: the share of its requests that fail.
const FAILING_MAGNITUDES: [f64; 3] = [0.3, 0.8, 1.0];

/// Seconds between two bursts of `short_bursts`.
const BURST_EVERY_SECS: f64 = 120.0;
/// Keys of the `steady_zipf` family.
const ZIPF_KEYS: usize = 100_000;

/// The family named `name`.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// `s` for shard 0, normal for the others.
fn shard0(i: usize, s: Slice) -> Slice {
    if i == 0 { s } else { Slice::normal() }
}

/// Shard 0 takes `m` times its load, every other shard as before.
fn shard0_load(m: f64, i: usize, _: f64) -> Slice {
    shard0(
        i,
        Slice {
            load: m,
            ..Slice::normal()
        },
    )
}

/// Shard 0 answers `m` times slower, every response.
fn shard0_slow(m: f64, i: usize, _: f64) -> Slice {
    shard0(
        i,
        Slice {
            latency_factor: m,
            ..Slice::normal()
        },
    )
}

/// Shard 0 fails a share `m` of its requests (`unavailable`), at its usual load.
fn shard0_failing(m: f64, i: usize, _: f64) -> Slice {
    shard0(
        i,
        Slice {
            error_ratio: m,
            error: Outcome::Unavailable,
            ..Slice::normal()
        },
    )
}

fn steady(_: f64, _: usize, _: u64, _: &Traffic) -> Slice {
    Slice::normal()
}

fn equal(n: usize, _: &mut Rng) -> Vec<f64> {
    vec![1.0; n]
}

fn zipf() -> Zipf {
    Zipf::new(ZIPF_KEYS, 1.0)
}

/// The most popular Zipf key's share of the group, computed once: the slice function runs
/// for every shard and second.
fn top_key_share() -> f64 {
    static SHARE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *SHARE.get_or_init(|| zipf().p(0))
}

/// The shard the most popular Zipf key hashes to.
fn top_key_shard(n: usize) -> usize {
    hash_shard(0, n)
}

/// Each shard's share of Zipf-1.0 traffic over [`ZIPF_KEYS`] keys hashed onto `n` shards,
/// without the top key, which `steady_zipf` draws as a keyed stream of its own.
fn zipf_weights(n: usize, _: &mut Rng) -> Vec<f64> {
    let z = zipf();
    let mut w = vec![0.0; n];
    for rank in 1..ZIPF_KEYS {
        w[hash_shard(rank as u64, n)] += z.p(rank);
    }
    // A shard no key hashes to would be a shard that never exists; give it a trickle.
    w.iter().map(|x: &f64| x.max(1e-6)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_incident_has_increasing_or_decreasing_magnitudes() {
        let mut names: Vec<_> = FAMILIES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FAMILIES.len());
        for f in FAMILIES.iter().filter_map(|f| f.incident) {
            let [a, b, c] = f.magnitudes;
            assert!((a < b && b < c) || (a > b && b > c), "{}", f.detector);
        }
    }

    #[test]
    fn bursts_hit_one_shard_for_ten_to_twenty_seconds() {
        let tr = Traffic::new(100.0, &[1.0; 8]);
        let f = family("short_bursts").unwrap();
        let hot: usize = (0..120)
            .flat_map(|t| (0..8).map(move |i| (t, i)))
            .filter(|&(t, i)| (f.before)(f64::from(t), i, 7, &tr).load > 1.0)
            .count();
        assert!((10..=20).contains(&hot), "{hot}");
    }
}
