//! The detection benchmark on a tiny sweep, so it cannot silently rot: its output keeps its
//! structure, a strong hot shard is always caught within two minutes, and a steady Zipf skew
//! raises nothing. The DIY baseline runs with the real promtool and Prometheus: its rule file
//! passes `promtool check rules`, its error-ratio rule catches a failing shard no sooner than
//! its `for:` and within five minutes, and its error and latency rules stay silent on steady
//! traffic.

use std::process::Command;

use skewwatch_detectors::detect::DetectorsConfig;
use skewwatch_e2e::bench::report::{
    DETECTION_HEADER, DIY_DETECTION_COLUMNS, FALSE_ALARM_HEADER, render,
};
use skewwatch_e2e::bench::{Plan, diy, families, run};
use skewwatch_e2e::tools;

/// One condition per axis: 1,000 req/s, 64 shards, 10 s windows.
fn tiny(names: &[&str], trials: u32, benign_minutes: f64) -> Plan {
    Plan {
        trials,
        benign_secs: benign_minutes * 60.0,
        rates: vec![1000.0],
        shards: vec![64],
        windows: vec![10],
        reference: (1000.0, 64, 10),
        families: names.iter().map(|n| families::family(n).unwrap()).collect(),
        ..Plan::quick(11)
    }
}

#[test]
fn a_ten_fold_hot_shard_at_1000_rps_is_always_caught_within_two_minutes() {
    let plan = tiny(&["hot_shard"], 6, 1.0);
    let figures = run(
        &Plan {
            threads: 2,
            ..plan.clone()
        },
        |_| {},
    )
    .unwrap();
    let row = figures
        .detection
        .iter()
        .find(|r| r.condition.magnitude == 10.0)
        .expect("the 10x condition ran");
    assert_eq!(row.delays.len(), 6);
    assert_eq!(row.p_within(120.0), 1.0, "{:?}", row.delays);
    // A real onset-to-firing delay: after the onset and no sooner than a few windows.
    let median = row.median_delay().unwrap();
    assert!((20.0..=120.0).contains(&median), "{median}");
    // Every trial has its own seed: one thread gives the same delays as two.
    let single = run(&Plan { threads: 1, ..plan }, |_| {}).unwrap();
    let delays = |f: &skewwatch_e2e::bench::Figures| -> Vec<Vec<Option<f64>>> {
        f.detection.iter().map(|r| r.delays.clone()).collect()
    };
    assert_eq!(delays(&single), delays(&figures));
}

#[test]
fn a_shard_failing_when_the_agent_starts_is_caught_within_a_minute() {
    // The agent's first window is inside the fault: the failing shard's peers are its
    // reference, so no warm-up stands between the start and the verdict.
    let figures = run(&tiny(&["failing_shard_from_start"], 4, 1.0), |_| {}).unwrap();
    for row in &figures.detection {
        assert_eq!(row.p_within(60.0), 1.0, "{:?}", row.delays);
    }
}

#[test]
fn steady_zipf_traffic_raises_no_alert_and_the_report_has_its_tables() {
    let figures = run(&tiny(&["hot_shard", "steady_zipf"], 1, 20.0), |_| {}).unwrap();
    assert_eq!(figures.false_alarms.len(), 1);
    for r in &figures.false_alarms {
        assert!(r.firings.is_empty(), "{}: {:?}", r.family.name, r.firings);
        // Judged from the start: the 32 warm-up windows of 10 s count too.
        assert_eq!(r.shard_hours, 64.0 * (20.0 * 60.0 + 320.0) / 3600.0);
    }
    let md = render(&figures);
    let lines: Vec<&str> = md.lines().collect();
    assert!(md.contains("Seed 11;"), "{md}");
    let d = lines
        .iter()
        .position(|l| *l == DETECTION_HEADER)
        .expect(&md);
    // hot_shard has three magnitudes at the single reference condition.
    let rows: Vec<&&str> = lines[d + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(rows.len(), 3, "{md}");
    assert!(
        rows.iter()
            .all(|r| r.starts_with("| HotShard | hot_shard | load × ")),
        "{md}"
    );
    let fa = lines
        .iter()
        .position(|l| l.starts_with(FALSE_ALARM_HEADER))
        .expect(&md);
    for (_, alertname) in DetectorsConfig::KINDS {
        assert!(lines[fa].contains(alertname), "{}", lines[fa]);
    }
    let zipf = lines[fa + 2];
    assert!(zipf.starts_with("| steady_zipf | 1 | 27 |"), "{zipf}");
    assert_eq!(
        zipf.matches("| 0.0").count(),
        DetectorsConfig::KINDS.len(),
        "{zipf}"
    );
    assert!(md.contains("No benign condition raised an alert."), "{md}");
}

/// `promtool` and `prometheus`, or `None` (skipped loudly) outside CI when missing.
fn diy_tools() -> Option<diy::Tools> {
    Some(diy::Tools {
        promtool: tools::require("promtool", &[])?,
        prometheus: tools::require("prometheus", &[])?,
    })
}

#[test]
fn the_diy_rule_file_passes_promtool_check_rules() {
    let Some(t) = diy_tools() else { return };
    let path = format!("{}/../{}", env!("CARGO_MANIFEST_DIR"), diy::RULES_PATH);
    let out = Command::new(&t.promtool)
        .args(["check", "rules", &path])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", diy::RULES.len())),
        "{text}"
    );
}

#[test]
fn the_diy_error_ratio_rule_catches_a_failing_shard_after_its_for_and_steady_traffic_raises_no_error_or_latency_alert()
 {
    let Some(t) = diy_tools() else { return };
    let plan = Plan {
        diy: Some(t),
        threads: 2,
        ..tiny(&["failing_shard", "steady_zipf"], 4, 20.0)
    };
    let figures = run(&plan, |_| {}).unwrap();
    // failing_shard at its three magnitudes (30%, 80%, 100% failing) at 1,000 req/s on 64 shards.
    assert_eq!(figures.detection.len(), 3);
    for row in &figures.detection {
        let d = row.diy.as_ref().expect("failing_shard has a DIY rule");
        assert_eq!(d.len(), 4);
        for delay in d {
            // The ratio crosses 20% within the first evaluations after the onset; `for: 2m`
            // then holds it for 120 s more: never sooner, and well within five minutes.
            let delay = delay.unwrap_or_else(|| panic!("undetected: {:?}", row));
            assert!((120.0..=180.0).contains(&delay), "{delay}: {row:?}");
        }
    }
    let zipf = &figures.false_alarms[0];
    let diy_firings = zipf.diy_firings.as_ref().expect("the DIY rules ran");
    for quiet in ["DiyShardErrorRatio", "DiyErrorSurge", "DiyLatencySkew"] {
        assert_eq!(diy_firings.get(quiet), None, "{diy_firings:?}");
    }
    let md = render(&figures);
    assert!(
        md.contains(&format!("{DETECTION_HEADER}{DIY_DETECTION_COLUMNS}")),
        "{md}"
    );
    assert!(md.contains("| DiyShardErrorRatio | "), "{md}");
}
