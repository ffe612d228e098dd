//! End-to-end: the two public incidents, replayed through the real `skewwatch replay` binary on
//! its embedded default configuration. Each must be detected within a minute of onset, with the
//! right group, shard and key named and the mechanism explained; every alert must resolve after
//! recovery; and nothing may fire on another group or shard, or before the onset.

use skewwatch_e2e::replay::{ReplayOutput, TransitionLine, replay};
use skewwatch_e2e::scenarios::incidents::{
    FAST_END, FAST_FAULTY, FAST_FIX, FAST_GROUP, FAST_ONSET, GEMINI_END, GEMINI_GROUP,
    GEMINI_HOT_SHARD, GEMINI_MITIGATION, GEMINI_ONSET, fast_failure_sink, gemini_cache_collapse,
};

/// Onset -> firing transition, at most. The goal is "within a minute or two"; the detectors
/// need 2 (ErrorSurge) or 3 (CacheHitCollapse, FastFailureSink, ShardFailing) consecutive 10 s
/// windows of a developing incident, so 60 s leaves one window for the incident to build up.
const MAX_DETECTION_DELAY_SECS: f64 = 60.0;

/// Recovery -> resolved transition, at most: the condition clears within a few windows of the
/// recovery, then `keep_firing_for_secs` (60 s) of hysteresis.
const MAX_RESOLVE_DELAY_SECS: f64 = 150.0;

// The traces run long enough after recovery for every alert to resolve.
const _: () = assert!(GEMINI_END - GEMINI_MITIGATION > MAX_RESOLVE_DELAY_SECS);
const _: () = assert!(FAST_END - FAST_FIX > MAX_RESOLVE_DELAY_SECS);

const SEED: u64 = 20_250_612;

fn first<'a>(out: &'a ReplayOutput, alertname: &str, state: &str) -> &'a TransitionLine {
    out.find(alertname, state)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no {alertname} {state}:\n{}", out.stdout))
}

/// The factor in an annotation such as `11.5x` or `0.57 (baseline 0.05, 11.4x)`.
fn factor(text: &str) -> f64 {
    let end = text
        .rfind('x')
        .unwrap_or_else(|| panic!("no factor in {text:?}"));
    let start = text[..end]
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    text[start..end]
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

/// Every alert fires only after `onset`, on `group`, and on `shard` when it names a shard; and
/// every firing alert resolves before the trace ends.
fn assert_confined(out: &ReplayOutput, onset: f64, group: &str, shard: &str) {
    for t in &out.transitions {
        assert_eq!(t.label("group"), group, "alert on another group: {t:?}");
        let s = t.label("shard");
        assert!(s.is_empty() || s == shard, "alert on another shard: {t:?}");
        if t.state == "firing" {
            assert!(t.ts > onset, "fired before the onset: {t:?}");
        }
    }
    let firing = out
        .transitions
        .iter()
        .filter(|t| t.state == "firing")
        .count();
    let resolved = out
        .transitions
        .iter()
        .filter(|t| t.state == "resolved")
        .count();
    assert_eq!(firing, resolved, "an alert never resolved:\n{}", out.stdout);
}

fn delay(t: &TransitionLine, from: f64) -> f64 {
    t.ts - from
}

#[test]
fn gemini_cache_collapse_is_detected_with_the_hot_shard_the_empty_key_and_the_loop() {
    let out = replay(&gemini_cache_collapse(SEED), "");
    assert_eq!(out.code, 0, "{}", out.stderr);
    eprintln!("{}{}", out.stdout, out.stderr);

    let fired = first(&out, "CacheHitCollapse", "firing");
    let d = delay(fired, GEMINI_ONSET);
    eprintln!("CacheHitCollapse fired {d} s after onset");
    assert!(
        d <= MAX_DETECTION_DELAY_SECS,
        "CacheHitCollapse after {d} s"
    );
    assert_eq!(fired.label("group"), GEMINI_GROUP);
    assert_eq!(fired.label("severity"), "critical");
    assert_eq!(fired.annotation("hot_shard"), GEMINI_HOT_SHARD);
    assert_eq!(fired.annotation("hot_key"), "(empty)");
    assert!(
        factor(fired.annotation("amplification")) >= 2.0,
        "{fired:?}"
    );
    assert!(
        fired
            .annotation("summary")
            .contains("the cache is feeding the fire"),
        "{fired:?}"
    );
    assert!(
        fired.annotation("mitigations").contains("singleflight"),
        "{fired:?}"
    );

    // The last evaluation that held, as the loop ends: the peak amplification and the phase.
    let resolved = first(&out, "CacheHitCollapse", "resolved");
    let peak = factor(resolved.annotation("peak_amplification"));
    eprintln!(
        "CacheHitCollapse resolved {} s after mitigation; peak amplification {peak}x, phase {}",
        delay(resolved, GEMINI_MITIGATION),
        resolved.annotation("phase"),
    );
    assert!(peak >= 10.0, "{resolved:?}");
    // Front-end load never rose: the loop sustained itself after the trigger was fixed.
    assert_eq!(resolved.annotation("phase"), "metastable");
    assert!(resolved.ts > GEMINI_MITIGATION);
    assert!(delay(resolved, GEMINI_MITIGATION) <= MAX_RESOLVE_DELAY_SECS);

    let surge = first(&out, "ErrorSurge", "firing");
    let d = delay(surge, GEMINI_ONSET);
    eprintln!("ErrorSurge fired {d} s after onset");
    assert!(d <= MAX_DETECTION_DELAY_SECS, "ErrorSurge after {d} s");
    assert_eq!(surge.annotation("top_error_shard"), GEMINI_HOT_SHARD);
    let surge_end = first(&out, "ErrorSurge", "resolved");
    eprintln!(
        "ErrorSurge resolved {} s after mitigation",
        delay(surge_end, GEMINI_MITIGATION)
    );
    assert!(surge_end.ts > GEMINI_MITIGATION);
    assert!(delay(surge_end, GEMINI_MITIGATION) <= MAX_RESOLVE_DELAY_SECS);

    assert!(
        out.find("FastFailureSink", "firing").is_empty(),
        "{}",
        out.stdout
    );
    assert_confined(&out, GEMINI_ONSET, GEMINI_GROUP, GEMINI_HOT_SHARD);
}

#[test]
fn fast_failure_sink_names_the_cluster_that_answers_not_found() {
    let out = replay(&fast_failure_sink(SEED), "");
    assert_eq!(out.code, 0, "{}", out.stderr);
    eprintln!("{}{}", out.stdout, out.stderr);

    let fired = first(&out, "FastFailureSink", "firing");
    let d = delay(fired, FAST_ONSET);
    eprintln!("FastFailureSink fired {d} s after onset");
    assert!(d <= MAX_DETECTION_DELAY_SECS, "FastFailureSink after {d} s");
    assert_eq!(fired.label("group"), FAST_GROUP);
    assert_eq!(fired.label("shard"), FAST_FAULTY);
    assert_eq!(fired.annotation("dominant_class"), "not_found");
    assert!(
        fired
            .annotation("description")
            .contains("answers fast with errors, so least-loaded or latency-aware routing"),
        "{fired:?}"
    );
    assert!(
        fired
            .annotation("error_attraction_ratio")
            .parse::<f64>()
            .unwrap()
            >= 1.2
    );
    assert!(factor(fired.annotation("share")) >= 1.3, "{fired:?}");
    assert!(
        fired
            .annotation("mitigations")
            .contains("count recent errors as load"),
        "{fired:?}"
    );
    let resolved = first(&out, "FastFailureSink", "resolved");
    eprintln!(
        "FastFailureSink resolved {} s after the fix",
        delay(resolved, FAST_FIX)
    );
    assert!(resolved.ts > FAST_FIX);
    assert!(delay(resolved, FAST_FIX) <= MAX_RESOLVE_DELAY_SECS);

    let surge = first(&out, "ErrorSurge", "firing");
    let d = delay(surge, FAST_ONSET);
    eprintln!("ErrorSurge fired {d} s after onset");
    assert!(d <= MAX_DETECTION_DELAY_SECS, "ErrorSurge after {d} s");
    assert_eq!(surge.annotation("dominant_class"), "not_found");
    assert_eq!(surge.annotation("top_error_shard"), FAST_FAULTY);
    let surge_end = first(&out, "ErrorSurge", "resolved");
    eprintln!(
        "ErrorSurge resolved {} s after the fix",
        delay(surge_end, FAST_FIX)
    );
    assert!(surge_end.ts > FAST_FIX);
    assert!(delay(surge_end, FAST_FIX) <= MAX_RESOLVE_DELAY_SECS);

    // The faulty cluster fails most of its requests: ShardFailing names it too.
    let failing = first(&out, "ShardFailing", "firing");
    let d = delay(failing, FAST_ONSET);
    eprintln!("ShardFailing fired {d} s after onset");
    assert!(d <= MAX_DETECTION_DELAY_SECS, "ShardFailing after {d} s");
    assert_eq!(failing.label("shard"), FAST_FAULTY);
    assert_eq!(failing.annotation("dominant_class"), "not_found");
    assert!(first(&out, "ShardFailing", "resolved").ts > FAST_FIX);

    assert!(
        out.find("CacheHitCollapse", "firing").is_empty(),
        "{}",
        out.stdout
    );
    assert_confined(&out, FAST_ONSET, FAST_GROUP, FAST_FAULTY);
}
