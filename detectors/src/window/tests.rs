use super::close::{bucket_counts, latency_summary};
use super::*;
use crate::observation::{Batch, CacheResult, ObservationRef, ReadingRef};
use crate::snapshot::WindowSnapshot;

fn obs<'a>(g: &'a str, s: &'a str) -> ObservationRef<'a> {
    ObservationRef::new(g, s)
}

fn reading<'a>(g: &'a str, s: &'a str, kind: ReadingKind, value: f64) -> ReadingRef<'a> {
    ReadingRef {
        ts: None,
        group: g,
        shard: s,
        kind,
        value,
    }
}

#[test]
fn readings_keep_the_highest_of_the_window_whatever_their_order_and_stand_for_no_request() {
    use ReadingKind::{Inflight, Utilisation};
    let values = [
        (Utilisation, 0.4),
        (Inflight, 12.0),
        (Utilisation, 0.9),
        (Inflight, 3.0),
    ];
    let mut snaps = Vec::new();
    for order in [values, [values[3], values[2], values[1], values[0]]] {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        for _ in 0..3 {
            w.record(&obs("db", "s1"));
            w.record(&obs("db", "s2"));
        }
        for (kind, v) in order {
            w.read(&reading("db", "s1", kind, v));
        }
        snaps.push(w.close(10.0));
    }
    assert_eq!(snaps[0], snaps[1], "the order of readings must not matter");
    let db = snaps[0].group("db").unwrap();
    let (s1, s2) = (db.shard("s1").unwrap(), db.shard("s2").unwrap());
    assert_eq!((s1.utilisation, s1.inflight), (Some(0.9), Some(12.0)));
    assert_eq!((s2.utilisation, s2.inflight), (None, None));
    // Readings are not requests: both shards carry the same load.
    assert_eq!((s1.requests, s2.requests), (3, 3));
    assert_eq!(s1.share, s2.share);
}

#[test]
fn readings_reset_with_the_window_and_a_batch_applies_them() {
    let mut w = Windows::new(WindowConfig::default(), 0.0);
    let mut b = Batch::with_capacity(2);
    b.push(&obs("db", "s1"));
    b.push_reading(&reading("db", "s1", ReadingKind::Utilisation, 0.7));
    w.record_batch(&b);
    let first = w.close(10.0);
    let s1 = first.group("db").unwrap().shard("s1").unwrap();
    assert_eq!((s1.requests, s1.utilisation), (1, Some(0.7)));
    w.record(&obs("db", "s1"));
    let second = w.close(20.0);
    assert_eq!(
        second.group("db").unwrap().shard("s1").unwrap().utilisation,
        None
    );
}

#[test]
fn a_shard_that_only_reports_readings_stays_known_and_expires_when_it_stops() {
    let cfg = WindowConfig {
        shard_idle_windows: 2,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    let mut t = 0.0;
    for _ in 0..5 {
        w.record(&obs("db", "busy"));
        w.read(&reading("db", "quiet", ReadingKind::Inflight, 4.0));
        t += 10.0;
        let snap = w.close(t);
        let quiet = snap.group("db").unwrap().shard("quiet");
        assert_eq!(
            quiet.map(|s| (s.requests, s.inflight)),
            Some((0, Some(4.0)))
        );
    }
    let mut seen = Vec::new();
    for _ in 0..4 {
        w.record(&obs("db", "busy"));
        t += 10.0;
        seen.push(w.close(t).group("db").unwrap().shard("quiet").is_some());
    }
    assert_eq!(seen, [true, true, false, false]);
}

#[test]
fn close_reports_counts_shares_and_resets() {
    let mut w = Windows::new(WindowConfig::default(), 100.0);
    let mut a = obs("db", "a");
    a.count = 3;
    a.latency_ms = Some(10.0);
    w.record(&a);
    let mut b = obs("db", "b");
    b.outcome = Outcome::Timeout;
    b.latency_ms = Some(1000.0);
    b.cache = Some(CacheResult::Miss);
    w.record(&b);
    let snap = w.close(110.0);
    assert_eq!(snap.groups.len(), 1);
    let g = &snap.groups[0];
    assert_eq!(g.requests, 4);
    assert_eq!(g.traffic.errors, 1);
    assert_eq!(g.shards[0].shard, "a");
    assert!((g.shards[0].share - 0.75).abs() < 1e-12);
    assert!((g.traffic.requests_per_second - 0.4).abs() < 1e-12);
    assert_eq!(g.shards[1].traffic.cache_hit_ratio, Some(0.0));
    let p99 = g.shards[1].traffic.latency.as_ref().unwrap().p99_ms;
    assert!((p99 - 1000.0).abs() / 1000.0 < 0.01, "{p99}");
    // The next window starts empty but keeps the shards as zero-load shards.
    let next = w.close(120.0);
    assert_eq!(next.groups[0].requests, 0);
    assert_eq!(next.groups[0].shards.len(), 2);
    assert_eq!(next.start, 110.0);
}

#[test]
fn shards_over_the_cap_fold_into_other_and_totals_stay_correct() {
    let cfg = WindowConfig {
        max_shards_per_group: 2,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    for s in ["a", "b", "c", "d", "a"] {
        w.record(&obs("g", s));
    }
    let snap = w.close(10.0);
    let g = &snap.groups[0];
    let names: Vec<_> = g.shards.iter().map(|s| s.shard.as_str()).collect();
    assert_eq!(names, ["__other__", "a", "b"]);
    assert!(g.shards[0].overflow);
    assert_eq!(g.requests, 5);
    assert_eq!(g.shards[0].requests, 2);
    assert_eq!(g.skew.as_ref().unwrap().shards, 2);
}

#[test]
fn groups_over_the_cap_fold_into_other() {
    let cfg = WindowConfig {
        max_groups: 1,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    for g in ["x", "y", "z"] {
        w.record(&obs(g, "s"));
    }
    let snap = w.close(10.0);
    let names: Vec<_> = snap.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(names, ["__other__", "x"]);
    assert_eq!(snap.groups[0].requests, 2);
}

#[test]
fn folded_records_are_counted_by_level() {
    let cfg = WindowConfig {
        max_groups: 1,
        max_shards_per_group: 2,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    for s in ["a", "b", "c", "d", "c"] {
        w.record(&obs("g", s));
    }
    let mut y = obs("y", "s");
    y.count = 7;
    w.record(&y);
    let snap = w.close(10.0);
    assert_eq!(snap.group("g").unwrap().folded_records, 3);
    let other = snap.overflow_group().unwrap();
    assert_eq!((other.requests, other.folded_records), (7, 7));
    // The overflow group keeps everything in one slot, whatever the shard names.
    assert_eq!(other.shards.len(), 1);
    assert!(other.shards[0].overflow);
    assert_eq!(
        snap.group("g").unwrap().overflow_shard().unwrap().requests,
        3
    );
}

#[test]
fn a_shard_really_named_other_is_not_the_overflow() {
    let cfg = WindowConfig {
        max_shards_per_group: 1,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    for s in [OTHER_LABEL, "b", "c"] {
        w.record(&obs("g", s));
    }
    let snap = w.close(10.0);
    let g = &snap.groups[0];
    let named = g.shard(OTHER_LABEL).unwrap();
    assert!(!named.overflow && named.requests == 1);
    assert_eq!(g.overflow_shard().unwrap().requests, 2);
    assert_eq!(g.skew.as_ref().unwrap().shards, 1);
}

#[test]
fn junk_groups_cannot_crowd_out_a_pinned_group() {
    let cfg = WindowConfig {
        max_groups: 4,
        pinned_groups: vec!["real".into()],
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    for i in 0..64 {
        w.record(&obs(&format!("junk-{i}"), "s"));
    }
    w.record(&obs("real", "s"));
    let snap = w.close(10.0);
    assert_eq!(snap.group("real").unwrap().requests, 1);
    assert_eq!(snap.overflow_group().unwrap().folded_records, 60);
}

#[test]
fn an_idle_group_gives_its_slot_to_a_new_one_least_recently_active_first() {
    let cfg = WindowConfig {
        max_groups: 2,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    w.record(&obs("old", "s"));
    w.record(&obs("older", "s"));
    w.close(10.0);
    w.record(&obs("old", "s"));
    w.close(20.0);
    // Both are idle now; "older" was active less recently and goes first.
    w.record(&obs("new", "s"));
    let snap = w.close(30.0);
    assert!(snap.group("older").is_none(), "{snap:?}");
    assert!(snap.group("old").is_some());
    assert_eq!(snap.group("new").unwrap().requests, 1);
    assert!(snap.overflow_group().is_none());
}

#[test]
fn the_total_shard_budget_holds_and_idle_shards_of_other_groups_make_room() {
    let cfg = WindowConfig {
        max_shards_total: 4,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    for s in ["a", "b", "c"] {
        w.record(&obs("junk", s));
    }
    w.record(&obs("real", "x"));
    w.close(10.0);
    assert_eq!(w.shard_count(), 4);
    // The junk stops. While it was active in the last window its slots are not taken:
    // a shard that merely has not spoken yet in this window is not idle.
    w.record(&obs("real", "x"));
    w.record(&obs("real", "early"));
    let snap = w.close(20.0);
    assert_eq!(snap.group("real").unwrap().folded_records, 1);
    // A whole window later the junk is idle: the real group grows into its slots.
    for s in ["y", "z", "v"] {
        w.record(&obs("real", s));
        w.record(&obs("real", "x"));
    }
    // Budget full, nothing idle left: the next new shard folds.
    w.record(&obs("real", "u"));
    let snap = w.close(30.0);
    let real = snap.group("real").unwrap();
    let names: Vec<_> = real.tracked_shards().map(|s| s.shard.as_str()).collect();
    assert_eq!(names, ["v", "x", "y", "z"]);
    assert_eq!(real.folded_records, 1);
    assert!(w.shard_count() <= 4);
    assert!(
        snap.group("junk")
            .is_none_or(|g| g.tracked_shards().count() == 0)
    );
}

#[test]
fn counts_saturate_instead_of_wrapping() {
    let mut w = Windows::new(WindowConfig::default(), 0.0);
    let mut o = obs("g", "s");
    o.count = crate::observation::MAX_COUNT;
    o.cache = Some(CacheResult::Hit);
    for _ in 0..(1u64 << 25) / 1024 {
        for _ in 0..1024 {
            w.record(&o);
        }
    }
    let snap = w.close(10.0);
    assert_eq!(snap.groups[0].requests, u64::MAX);
    assert_eq!(snap.groups[0].traffic.cache_hits, u64::MAX);
}

#[test]
fn idle_shards_expire_after_the_configured_windows() {
    let cfg = WindowConfig {
        shard_idle_windows: 2,
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    w.record(&obs("g", "a"));
    w.record(&obs("g", "b"));
    w.close(10.0);
    for t in [20.0, 30.0] {
        w.record(&obs("g", "a"));
        assert_eq!(w.close(t).groups[0].shards.len(), 2);
    }
    w.record(&obs("g", "a"));
    assert_eq!(w.close(40.0).groups[0].shards.len(), 1);
    // A group with no traffic at all disappears once its shards expire.
    for t in [50.0, 60.0, 70.0] {
        w.close(t);
    }
    assert!(w.close(80.0).groups.is_empty());
}

#[test]
fn group_p99_comes_from_merged_histograms_not_averaged_percentiles() {
    let mut w = Windows::new(WindowConfig::default(), 0.0);
    // 99 fast shards with 100 requests at 1 ms, one shard with 100 requests at 2 s.
    for i in 0..100 {
        let name = format!("s{i}");
        let mut o = obs("g", &name);
        o.count = 100;
        o.latency_ms = Some(if i == 0 { 2000.0 } else { 1.0 });
        w.record(&o);
    }
    let snap = w.close(10.0);
    let g = &snap.groups[0];
    let p99 = g.traffic.latency.as_ref().unwrap().p99_ms;
    // 1% of requests are slow: the merged p99 sits at the boundary, far below the mean of
    // per-shard p99s (about 21 ms) and far below the slow shard's 2 s.
    assert!(p99 <= 2000.0 * 1.01);
    let slow = g.shards.iter().find(|s| s.shard == "s0").unwrap();
    assert!((slow.traffic.latency.as_ref().unwrap().p99_ms - 2000.0).abs() < 20.0);
}

#[test]
fn latency_buckets_count_values_on_a_bound_under_it_and_sum_exactly() {
    let cfg = WindowConfig {
        latency_buckets_secs: vec![0.01, 0.1, 1.0],
        ..WindowConfig::default()
    };
    let mut w = Windows::new(cfg, 0.0);
    // Whole milliseconds on the bounds, just above them, and beyond the last one; errors
    // and successes land in the same (merged) buckets.
    for (ms, count, outcome) in [
        (10.0, 3, Outcome::Ok),
        (10.2, 1, Outcome::Ok),
        (100.0, 2, Outcome::Timeout),
        (1000.0, 1, Outcome::Ok),
        (1500.0, 4, Outcome::Error),
    ] {
        let mut o = obs("g", "s");
        o.latency_ms = Some(ms);
        o.count = count;
        o.outcome = outcome;
        w.record(&o);
    }
    w.record(&obs("g", "s")); // no latency: not in the histogram
    let snap = w.close(10.0);
    let s = &snap.groups[0].shards[0];
    assert_eq!(s.latency_buckets, [3, 3, 1, 4]);
    assert_eq!(s.latency_buckets.iter().sum::<u64>(), s.latency_samples);
    let sum = 0.030 + 0.0102 + 0.2 + 1.0 + 6.0;
    assert!(
        (s.latency_sum_secs - sum).abs() < 1e-9,
        "{}",
        s.latency_sum_secs
    );
    // The next window starts from zero.
    let next = w.close(20.0);
    assert_eq!(next.groups[0].shards[0].latency_buckets, [0, 0, 0, 0]);
    assert_eq!(next.groups[0].shards[0].latency_sum_secs, 0.0);
}

/// Single-request latencies wait in a buffer and reach the histogram 64 at a time, or at
/// close: what a window reports must be exactly what recording each one straight into a
/// histogram gives, over several windows and with multi-request records in between.
#[test]
fn pending_latencies_report_exactly_what_direct_recording_does() {
    let cfg = WindowConfig::default();
    let mut w = Windows::new(cfg.clone(), 0.0);
    let mut rng = crate::prng::SplitMix64::new(17);
    let new = || new_histogram(cfg.latency_sigfig);
    for window in 1..=3 {
        let (mut ok, mut err, mut miss, mut timeout) = (new(), new(), new(), new());
        let mut sum_us = 0u64;
        // Not a multiple of 64, so some latencies are still pending at close.
        for i in 0..(1_000 + window * 37) {
            let r = rng.next_u64();
            let mut o = obs("g", "s");
            // Microseconds to an hour and past it (clamped), most near a few ms.
            let ms = match r % 7 {
                0 => (r >> 8) as f64 % 4_000_000.0,
                _ => (r >> 8) as f64 % 50.0 + 0.001,
            };
            o.latency_ms = Some(ms);
            o.count = if r.is_multiple_of(11) {
                1 + (r >> 40) % 5
            } else {
                1
            };
            o.outcome = match r % 13 {
                0 => Outcome::Timeout,
                1 => Outcome::Error,
                _ => Outcome::Ok,
            };
            o.cache = (i % 3 == 0).then_some(CacheResult::Miss);
            w.record(&o);
            let us = latency_us(ms);
            let n = o.count as u32;
            if o.outcome.is_error() {
                err.saturating_record_n(us, n);
            } else {
                ok.saturating_record_n(us, n);
            }
            if o.cache.is_some() {
                miss.saturating_record_n(us, n);
            }
            if o.outcome == Outcome::Timeout {
                timeout.saturating_record_n(us, n);
            }
            sum_us += us * o.count;
        }
        let snap = w.close(10.0 * window as f64);
        let g = &snap.groups[0];
        let s = &g.shards[0];
        assert_eq!(
            s.traffic.ok_latency,
            latency_summary(&ok),
            "window {window}"
        );
        assert_eq!(s.error_latency, latency_summary(&err), "window {window}");
        assert_eq!(g.miss_latency, latency_summary(&miss), "window {window}");
        assert_eq!(
            g.timeout_latency,
            latency_summary(&timeout),
            "window {window}"
        );
        assert_eq!(s.latency_samples, ok.len() + err.len());
        assert!((s.latency_sum_secs - sum_us as f64 / 1e6).abs() < 1e-6);
        let mut all = new();
        all.add(&ok).unwrap();
        all.add(&err).unwrap();
        assert_eq!(
            s.latency_buckets,
            bucket_counts(&all, &cfg.latency_buckets_secs)
        );
    }
}

/// A clone carries its pending latencies, and both windows go on recording on their own.
#[test]
fn a_cloned_window_keeps_its_pending_latencies_apart() {
    let mut w = Windows::new(WindowConfig::default(), 0.0);
    let record = |w: &mut Windows, n: usize| {
        for i in 0..n {
            let mut o = obs("g", "s");
            o.latency_ms = Some(1.0 + i as f64);
            w.record(&o);
        }
    };
    record(&mut w, 10);
    let mut copy = w.clone();
    record(&mut copy, 100);
    let (a, b) = (w.close(10.0), copy.close(10.0));
    assert_eq!(a.groups[0].shards[0].latency_samples, 10);
    assert_eq!(b.groups[0].shards[0].latency_samples, 110);
    let max = |s: &WindowSnapshot| {
        s.groups[0].shards[0]
            .traffic
            .ok_latency
            .as_ref()
            .unwrap()
            .max_ms
    };
    assert!((max(&a) - 10.0).abs() < 0.1 && (max(&b) - 100.0).abs() < 1.0);
}

proptest::proptest! {
    /// The name map answers as a `HashMap` does through any run of inserts (new names and
    /// new slots for known ones), removals and clears, names of every length the inline
    /// compare treats differently included.
    #[test]
    fn name_map_agrees_with_a_hash_map(
        ops in proptest::collection::vec((0u8..4, 0usize..40, 0u32..1000), 0..400),
    ) {
        let names: Vec<String> = (0..40)
            .map(|i| "shard-".chars().cycle().take(i % 20).collect::<String>() + &i.to_string())
            .collect();
        let mut map = NameMap::default();
        let mut model: std::collections::HashMap<&str, u32> = Default::default();
        for (op, n, slot) in ops {
            let name = names[n].as_str();
            match op {
                0 | 1 => {
                    map.insert(name.into(), slot);
                    model.insert(name, slot);
                }
                2 => {
                    map.remove(name);
                    model.remove(name);
                }
                _ if slot % 50 == 0 => {
                    map.clear();
                    model.clear();
                }
                _ => {}
            }
            proptest::prop_assert_eq!(map.len(), model.len());
            for other in &names {
                proptest::prop_assert_eq!(map.get(other), model.get(other.as_str()));
            }
        }
    }

    /// The cumulative count under each bound never misses a request at or below it and
    /// takes in only requests within one HDR resolution step above it.
    #[test]
    fn latency_buckets_are_exact_to_the_histogram_precision(
        latencies_us in proptest::collection::vec(0u64..20_000_000, 1..300),
        sigfig in 1u8..=3,
    ) {
        let cfg = WindowConfig {
            latency_sigfig: sigfig,
            ..WindowConfig::default()
        };
        let bounds = cfg.latency_buckets_secs.clone();
        let mut w = Windows::new(cfg, 0.0);
        for &us in &latencies_us {
            let mut o = obs("g", "s");
            o.latency_ms = Some(us as f64 / 1000.0);
            w.record(&o);
        }
        let snap = w.close(10.0);
        let buckets = &snap.groups[0].shards[0].latency_buckets;
        // One resolution step of an HDR histogram is at most 1/2^(bits below the top)
        // of the value: 1/16, 1/128 and 1/1024 at 1, 2 and 3 significant figures.
        let step = [1.0 / 16.0, 1.0 / 128.0, 1.0 / 1024.0][usize::from(sigfig) - 1];
        let mut cumulative = 0;
        for (i, b) in bounds.iter().enumerate() {
            cumulative += buckets[i];
            let b_us = (b * 1e6).round() as u64;
            let at_or_below = latencies_us.iter().filter(|&&v| v <= b_us).count() as u64;
            let near = latencies_us
                .iter()
                .filter(|&&v| v as f64 <= b_us as f64 * (1.0 + step) + 1.0)
                .count() as u64;
            proptest::prop_assert!(cumulative >= at_or_below, "bound {b}: {cumulative} < {at_or_below}");
            proptest::prop_assert!(cumulative <= near, "bound {b}: {cumulative} > {near}");
        }
        proptest::prop_assert_eq!(buckets.iter().sum::<u64>(), latencies_us.len() as u64);
    }

    /// The conversion through i64 agrees with the unsigned cast it replaced on any input,
    /// valid or not.
    #[test]
    fn latency_us_agrees_with_the_unsigned_cast(
        any in proptest::num::f64::ANY,
        valid in 0.0f64..=crate::observation::MAX_LATENCY_MS,
        whole_us in 0u64..=4_000_000_000,
    ) {
        for ms in [any, valid, whole_us as f64 / 1000.0] {
            let unsigned = ((ms * 1000.0 + 0.5) as u64).min(LATENCY_HIGH_US);
            proptest::prop_assert_eq!(latency_us(ms), unsigned, "{} ms", ms);
        }
    }
}

#[test]
fn key_shares_use_group_load_and_keep_the_empty_key() {
    let mut w = Windows::new(WindowConfig::default(), 0.0);
    let mut e = obs("g", "s1");
    e.key = Some("");
    e.count = 8;
    w.record(&e);
    let mut k = obs("g", "s2");
    k.key = Some("user:1");
    w.record(&k);
    w.record(&obs("g", "s2"));
    let snap = w.close(10.0);
    let g = &snap.groups[0];
    assert_eq!(g.top_keys[0].key, "");
    assert!((g.top_keys[0].share - 0.8).abs() < 1e-12);
    assert_eq!(g.keyed_requests, 9);
    assert_eq!(g.shards[0].top_keys[0].share, 1.0);
}

#[test]
fn key_counts_teach_the_group_summary_and_count_no_shard_request() {
    use crate::observation::KeyCountRef;
    for threads in [1, 3] {
        let cfg = WindowConfig {
            record_threads: threads,
            ..WindowConfig::default()
        };
        let mut w = crate::parts::Recording::new(cfg, 0.0);
        let mut b = Batch::default();
        let mut o = obs("db", "s1");
        o.count = 100;
        b.push(&o);
        for (key, count) in [(Some(""), 60), (Some("k"), 25), (None, 15)] {
            b.push_key_count(&KeyCountRef {
                group: "db",
                key,
                count,
            });
        }
        w.record_batch(&b);
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        assert_eq!(
            (g.requests, g.keyed_requests),
            (100, 100),
            "{threads} threads"
        );
        assert_eq!(
            g.shards[0].top_keys.len(),
            0,
            "a shard learns no key from them"
        );
        let keys: Vec<_> = g
            .top_keys
            .iter()
            .map(|k| (k.key.as_str(), k.requests))
            .collect();
        assert_eq!(keys, [("", 60), ("k", 25)]);
        assert!((g.top_keys[0].share - 0.6).abs() < 1e-12);
    }
}
