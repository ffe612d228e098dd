//! The simulation held to known answers, and the sample held to the exact simulation on
//! synthetic traces: Zipf popularity, a scan, bursts of new keys, TTL-synchronised expiry.

use super::*;
use crate::observation::{CacheKeyHash, CacheResult, Outcome};
use crate::prng::{SplitMix64, mix};

fn policies(specs: &[&str], observed: Policy) -> Vec<Policy> {
    Policy::parse_list(specs.iter().copied(), &observed).unwrap()
}

fn config(policies: Vec<Policy>) -> WhatIfConfig {
    WhatIfConfig {
        policies,
        ..WhatIfConfig::default()
    }
}

/// One request of key `id` at `t` with `outcome`.
fn request(w: &mut WhatIf, group: &str, shard: &str, id: u64, t: f64, outcome: Outcome) {
    let mut o = ObservationRef::new(group, shard);
    o.cache_key = Some(CacheKeyHash::new(mix(id)));
    o.ts = Some(t);
    o.outcome = outcome;
    w.record(&o, t);
}

fn names(w: &WhatIfWindow) -> Vec<&str> {
    w.policies.iter().map(String::as_str).collect()
}

#[test]
fn a_key_asked_every_second_misses_once_a_ttl() {
    let observed = Policy::observed(60.0, None, false, None);
    let mut w = WhatIf::new(config(policies(&["ttl=10s", "ttl=20m"], observed)));
    for s in 0..600u32 {
        request(&mut w, "g", "s", 1, f64::from(s), Outcome::Ok);
    }
    let out = w.close(600.0);
    assert_eq!(names(&out), ["observed", "ttl=10s", "ttl=20m"]);
    let g = &out.groups[0];
    let calls: Vec<f64> = g
        .policies
        .iter()
        .map(|p| p.backend_calls_per_request)
        .collect();
    assert_eq!(calls, [10.0 / 600.0, 60.0 / 600.0, 1.0 / 600.0]);
    assert_eq!(g.policies[0].error_bound, 0.0, "every key is in the sample");
    let hot = g.hot_shard().unwrap().policies[2];
    assert_eq!(
        (
            hot.hit_ratio,
            hot.backend_calls_per_request,
            hot.error_bound
        ),
        (g.policies[2].hit_ratio, calls[2], 0.0)
    );
    // A group's errors are its shards'.
    assert_eq!(
        (g.policies[2].error_ratio, hot.error_ratio),
        (Some(0.0), Some(0.0))
    );
}

#[test]
fn errors_are_not_cached_unless_stale_is_served() {
    let observed = Policy::observed(10.0, None, false, None);
    let mut w = WhatIf::new(config(policies(&["serve-stale"], observed)));
    // A copy is stored, then the backend fails for 100 s: every request goes to it under
    // both policies (serve-stale keeps the copy as it was, so each request retries), but
    // under serve-stale each failure is answered with the copy instead of an error.
    request(&mut w, "g", "s", 7, 0.0, Outcome::Ok);
    for s in 20..120u32 {
        request(&mut w, "g", "s", 7, f64::from(s), Outcome::Timeout);
    }
    // A key without a copy gets the error under serve-stale too.
    request(&mut w, "g", "s", 8, 120.0, Outcome::Timeout);
    let g = &w.close(121.0).groups[0];
    assert_eq!(g.requests, 102);
    let calls = |p: usize| (g.policies[p].backend_calls_per_request * 102.0).round();
    let errors = |p: usize| (g.policies[p].error_ratio.unwrap() * 102.0).round();
    assert_eq!((calls(0), calls(1)), (102.0, 102.0));
    assert_eq!((errors(0), errors(1)), (101.0, 1.0));
}

/// Six 10-second windows of a shard that can answer 100 backend calls a second and is sent
/// 150: 1,500 keys, each asked once a window (every request a miss at the cache's 5 s TTL),
/// every third call timing out, a different third each window; beside it a quiet shard whose calls all succeed. Returns the
/// last window.
fn overloaded(capacities: Vec<BackendCapacity>) -> WhatIfWindow {
    let observed = Policy::observed(5.0, None, false, None);
    let mut w = WhatIf::new(WhatIfConfig {
        backend_capacities: capacities,
        ..config(policies(&["ttl=1m", "serve-stale"], observed))
    });
    let mut last = None;
    let mut n = 0u64;
    for window in 0..6u32 {
        let start = f64::from(window) * 10.0;
        for i in 0..1500u64 {
            let t = start + i as f64 / 150.0;
            let mut o = ObservationRef::new("g", "hot");
            o.cache_key = Some(CacheKeyHash::new(mix(i)));
            o.ts = Some(t);
            o.cache = Some(CacheResult::Miss);
            o.outcome = if n.is_multiple_of(3) {
                Outcome::Timeout
            } else {
                Outcome::Ok
            };
            n += 1;
            w.record(&o, t);
            if i % 15 == 0 {
                let mut o = ObservationRef::new("g", "cold");
                o.cache_key = Some(CacheKeyHash::new(mix(1_000_000 + i)));
                o.ts = Some(t);
                o.cache = Some(CacheResult::Miss);
                w.record(&o, t);
            }
        }
        last = Some(w.close(start + 10.0));
        // Other keys fail in the next window.
        n += 1;
    }
    last.unwrap()
}

#[test]
fn calls_beyond_a_learned_capacity_fail_and_a_policy_under_it_fails_none() {
    let out = overloaded(Vec::new());
    let g = &out.groups[0];
    let hot = g.hot_shard().unwrap();
    assert_eq!(hot.shard, "hot");
    assert_eq!(
        (hot.requests, hot.real_misses, hot.real_failures),
        (1500, 1500, 500)
    );
    // Saturated: it answered 1,000 calls in 10 s, so 100 a second, every window alike.
    let c = hot.capacity.unwrap();
    assert_eq!(
        (c.source, c.saturated_windows),
        (CapacitySource::Learned, 6)
    );
    assert!((c.calls_per_second - 100.0).abs() < 1e-9, "{c:?}");
    let errors = |p: usize| hot.policies[p].error_ratio.unwrap();
    // As configured: 150 calls a second offered to 100, a third fail, as they did.
    assert!((errors(0) - 1.0 / 3.0).abs() < 1e-9, "{}", errors(0));
    // A one-minute TTL sends a few calls a second (a key's call again only after its entry
    // expires, or after a failed fill): far under the capacity, so none fails. Replaying the
    // observed timeouts would have failed a third of those calls.
    assert!(hot.policies[1].backend_calls_per_request < 0.5);
    assert_eq!(errors(1), 0.0);
    // Serve-stale makes the same calls and fails as many, but each key holds a copy from its
    // earlier windows, which answers them.
    assert_eq!(
        hot.policies[2].backend_calls_per_request,
        hot.policies[0].backend_calls_per_request
    );
    assert_eq!(errors(2), 0.0);
    // The quiet shard never failed: no capacity known, its (no) errors replayed.
    let cold = &g.shards[1];
    assert_eq!(
        (cold.capacity, cold.policies[0].error_ratio),
        (None, Some(0.0))
    );
    // The group's errors are its shards'.
    let group = g.policies[0].error_ratio.unwrap();
    assert!((group * g.requests as f64 - 500.0).abs() < 1e-6, "{group}");
}

#[test]
fn a_configured_capacity_comes_before_the_learned_one() {
    let out = overloaded(vec![BackendCapacity {
        group: "g".into(),
        shard: "*".into(),
        calls_per_second: 50.0,
    }]);
    let g = &out.groups[0];
    let hot = g.hot_shard().unwrap();
    let c = hot.capacity.unwrap();
    assert_eq!(
        (c.source, c.calls_per_second),
        (CapacitySource::Configured, 50.0)
    );
    // 150 offered to 50: two thirds would fail.
    assert!((hot.policies[0].error_ratio.unwrap() - 2.0 / 3.0).abs() < 1e-9);
    // The quiet shard's 10 calls a second are under its 50.
    let cold = &g.shards[1];
    assert_eq!(
        cold.capacity.map(|c| c.source),
        Some(CapacitySource::Configured)
    );
    assert_eq!(cold.policies[0].error_ratio, Some(0.0));
}

#[test]
fn not_found_is_cached_only_under_negative_caching() {
    let observed = Policy::observed(60.0, None, false, None);
    let mut w = WhatIf::new(config(policies(&["negative=30s"], observed)));
    for s in 0..60u32 {
        request(&mut w, "g", "s", 3, f64::from(s), Outcome::NotFound);
    }
    let g = &w.close(60.0).groups[0];
    assert_eq!(g.policies[0].backend_calls_per_request, 1.0);
    assert_eq!(g.policies[1].backend_calls_per_request, 2.0 / 60.0);
}

#[test]
fn a_capacity_evicts_the_least_recently_used_entry() {
    let observed = Policy::observed(3600.0, None, false, None);
    let mut w = WhatIf::new(config(policies(&["capacity=1", "capacity=2"], observed)));
    for s in 0..100u32 {
        request(
            &mut w,
            "g",
            "s",
            u64::from(s % 2),
            f64::from(s),
            Outcome::Ok,
        );
    }
    let g = &w.close(100.0).groups[0];
    let calls: Vec<f64> = g
        .policies
        .iter()
        .map(|p| p.backend_calls_per_request)
        .collect();
    assert_eq!(calls, [0.02, 1.0, 0.02]);
}

#[test]
fn the_observed_policy_is_checked_against_the_caches_own_answers() {
    let observed = Policy::observed(30.0, None, false, None);
    let mut w = WhatIf::new(config(vec![observed]));
    for s in 0..300u32 {
        let mut o = ObservationRef::new("g", "s");
        o.cache_key = Some(CacheKeyHash::new(mix(9)));
        o.cache = Some(if s % 30 == 0 {
            CacheResult::Miss
        } else {
            CacheResult::Hit
        });
        w.record(&o, f64::from(s));
    }
    let g = &w.close(300.0).groups[0];
    assert_eq!(g.real_hit_ratio(), Some(29.0 / 30.0));
    assert!(g.check_error().unwrap().abs() < 1e-9, "{g:?}");
}

#[test]
fn a_group_without_requests_is_left_out_and_forgotten_once_its_keys_are_idle() {
    let observed = Policy::observed(10.0, None, false, None);
    let mut w = WhatIf::new(config(vec![observed]));
    request(&mut w, "g", "s", 1, 0.0, Outcome::Ok);
    assert_eq!(w.close(10.0).groups.len(), 1);
    assert!(w.close(20.0).groups.is_empty());
    assert_eq!(w.heap_bytes(), 0);
}

/// A synthetic trace: `(seconds, key id, shard)` per request, in time order.
struct Trace {
    requests: Vec<(f64, u64, u32)>,
}

impl Trace {
    /// Zipf(`s`) popularity over `keys` keys, `qps` requests a second for `secs` seconds;
    /// key `k` lives on shard `mix(k) % 8`.
    fn zipf(seed: u64, keys: u64, s: f64, qps: u32, secs: u32) -> Trace {
        let mut cdf = Vec::with_capacity(keys as usize);
        let mut sum = 0.0;
        for k in 1..=keys {
            sum += (k as f64).powf(-s);
            cdf.push(sum);
        }
        let mut rng = SplitMix64::new(seed);
        let n = u64::from(qps) * u64::from(secs);
        let requests = (0..n)
            .map(|i| {
                let u = rng.next_f64() * sum;
                let k = cdf.partition_point(|&c| c < u) as u64;
                (i as f64 / f64::from(qps), k, (mix(k) % 8) as u32)
            })
            .collect();
        Trace { requests }
    }

    /// Replaces a share `share` of the requests between `from` and `to` seconds by a scan:
    /// keys never asked before, each once, in order.
    fn with_scan(mut self, from: f64, to: f64, share: f64) -> Trace {
        let mut rng = SplitMix64::new(11);
        let mut next = 1u64 << 40;
        for r in &mut self.requests {
            if (from..to).contains(&r.0) && rng.next_f64() < share {
                r.1 = next;
                r.2 = (mix(next) % 8) as u32;
                next += 1;
            }
        }
        self
    }

    /// Every `period` seconds, for `len` seconds, replaces a share `share` of the requests by
    /// new keys, each asked a few times within the burst.
    fn with_bursts(mut self, period: f64, len: f64, share: f64) -> Trace {
        let mut rng = SplitMix64::new(12);
        let base = 1u64 << 41;
        for r in &mut self.requests {
            if r.0 % period < len && rng.next_f64() < share {
                let burst = (r.0 / period) as u64;
                let k = base + burst * 1_000_000 + rng.below(20_000) as u64;
                r.1 = k;
                r.2 = (mix(k) % 8) as u32;
            }
        }
        self
    }

    /// `keys` keys all asked in the first second, then uniformly until `secs`: under a TTL
    /// their entries expire together, and the misses come in waves a TTL apart.
    fn synchronised(keys: u64, qps: u32, secs: u32) -> Trace {
        let mut rng = SplitMix64::new(13);
        let n = u64::from(qps) * u64::from(secs - 1);
        let warm = (0..keys).map(|k| (k as f64 / keys as f64, k, (mix(k) % 8) as u32));
        let rest = (0..n).map(|i| {
            let k = rng.below(keys as usize) as u64;
            (1.0 + i as f64 / f64::from(qps), k, (mix(k) % 8) as u32)
        });
        Trace {
            requests: warm.chain(rest).collect(),
        }
    }

    /// Runs the trace through a simulation and returns its windows.
    fn run(&self, cfg: WhatIfConfig, window: f64) -> Vec<WhatIfWindow> {
        let mut w = WhatIf::new(cfg);
        let mut out = Vec::new();
        let mut end = window;
        let shards: Vec<String> = (0..8).map(|s| format!("s{s}")).collect();
        for &(t, k, shard) in &self.requests {
            while t >= end {
                out.push(w.close(end));
                end += window;
            }
            request(&mut w, "g", &shards[shard as usize], k, t, Outcome::Ok);
        }
        out.push(w.close(end));
        out
    }
}

/// Runs `trace` sampled at the default bound and exactly; asserts that every window's
/// predicted hit ratio of every policy is within `tolerance` of the exact one, and returns
/// the largest difference, the lowest sampling rate and the share of differences within the
/// stated error bound (counted where the sample is below every key).
fn sampled_against_exact(trace: &Trace, tolerance: f64) -> (f64, f64, f64) {
    let sampled = trace.run(WhatIfConfig::default(), 10.0);
    let exact = trace.run(
        WhatIfConfig {
            exact: true,
            ..WhatIfConfig::default()
        },
        10.0,
    );
    let mut worst: f64 = 0.0;
    let mut rate: f64 = 1.0;
    let (mut within, mut sampled_windows) = (0u32, 0u32);
    for (i, (s, e)) in sampled.iter().zip(&exact).enumerate() {
        let (Some(s), Some(e)) = (s.groups.first(), e.groups.first()) else {
            continue;
        };
        assert_eq!(s.requests, e.requests);
        rate = rate.min(s.sample_rate);
        for (p, (sp, ep)) in s.policies.iter().zip(&e.policies).enumerate() {
            let d = (sp.hit_ratio - ep.hit_ratio).abs();
            worst = worst.max(d);
            if s.sample_rate < 1.0 {
                sampled_windows += 1;
                within += u32::from(d <= sp.error_bound);
            }
            assert!(
                d <= tolerance,
                "window {i}, policy {}: sampled {} exact {} (rate {})",
                sampled[0].policies[p],
                sp.hit_ratio,
                ep.hit_ratio,
                s.sample_rate
            );
        }
    }
    let covered = if sampled_windows == 0 {
        1.0
    } else {
        f64::from(within) / f64::from(sampled_windows)
    };
    (worst, rate, covered)
}

#[test]
fn a_flood_of_unique_keys_stays_within_the_memory_bound() {
    let cfg = WhatIfConfig::default();
    let bound = cfg.memory_bytes_per_group;
    let mut w = WhatIf::new(cfg);
    for i in 0..400_000u64 {
        request(&mut w, "g", "s", i, i as f64 / 1000.0, Outcome::Ok);
        if i % 50_000 == 0 {
            assert!(w.heap_bytes() <= bound, "{} > {bound}", w.heap_bytes());
        }
    }
    assert!(w.heap_bytes() <= bound, "{} > {bound}", w.heap_bytes());
    let out = w.close(400.0);
    let g = &out.groups[0];
    assert!(g.sample_rate < 0.2, "{}", g.sample_rate);
    // Every key is new: every policy misses every request, sampled or not.
    assert!(g.policies.iter().all(|p| p.hit_ratio < 0.02), "{g:?}");
    assert!(out.heap_bytes <= bound as u64);
}

/// The traces the sample is held to the exact simulation on: per trace, the largest
/// difference of any window's and any policy's hit ratio must stay within 0.02 at the default
/// memory bound, with 10-second windows (the agent's default), at 8,000 requests a second
/// (80,000 a window: the difference shrinks as one over the square root of the sampled
/// requests, and docs/whatif.md gives the figures at 4,000).
#[test]
fn sampled_matches_exact_within_two_hundredths_on_every_shape() {
    let zipf = || Trace::zipf(1, 1_000_000, 1.0, 8_000, 300);
    for (name, trace) in [
        ("zipf 1.0, 1M keys", zipf()),
        (
            "zipf 0.8, 200k keys",
            Trace::zipf(2, 200_000, 0.8, 8_000, 300),
        ),
        ("zipf with a scan", zipf().with_scan(120.0, 240.0, 0.3)),
        (
            "zipf with bursts of new keys",
            zipf().with_bursts(60.0, 5.0, 0.5),
        ),
        (
            "ttl-synchronised expiry",
            Trace::synchronised(200_000, 8_000, 300),
        ),
    ] {
        let (worst, rate, covered) = sampled_against_exact(&trace, 0.02);
        eprintln!(
            "{name}: worst difference {worst:.4} at sampling rate {rate:.4}, \
             {:.1}% within the stated bound",
            covered * 100.0
        );
        assert!(covered >= 0.85, "{name}: the bound covers {covered}");
    }
}

#[test]
fn on_a_ticking_clock_an_entry_lives_half_a_tick_less() {
    // A key asked every 19.7 s under a 20 s TTL: a cache that keeps exact time serves every
    // second request from the entry the one before stored; one whose clock ticks each second
    // (memcached) keeps the entry 19.5 s on average, so every request misses.
    let calls = |tick: f64| {
        let observed = Policy::observed(20.0, None, false, None);
        let mut w = WhatIf::new(WhatIfConfig {
            clock_tick_secs: tick,
            ..config(policies(&[], observed))
        });
        for i in 0..10u32 {
            request(&mut w, "g", "s", 5, f64::from(i) * 19.7, Outcome::Ok);
        }
        let out = w.close(200.0);
        assert_eq!(names(&out), ["observed"], "the name stays");
        (out.groups[0].policies[0].backend_calls_per_request * 10.0).round()
    };
    assert_eq!(calls(0.0), 5.0);
    assert_eq!(calls(1.0), 10.0);
}
