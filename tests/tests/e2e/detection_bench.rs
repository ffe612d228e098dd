//! The detection benchmark on a tiny sweep, so it cannot silently rot: its output keeps its
//! structure, a strong hot shard is always caught within two minutes, and a steady Zipf skew
//! raises nothing.

use skewwatch_detectors::detect::DetectorsConfig;
use skewwatch_e2e::bench::report::{DETECTION_HEADER, FALSE_ALARM_HEADER, render};
use skewwatch_e2e::bench::{Plan, families, run};

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
    );
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
    let single = run(&Plan { threads: 1, ..plan }, |_| {});
    let delays = |f: &skewwatch_e2e::bench::Figures| -> Vec<Vec<Option<f64>>> {
        f.detection.iter().map(|r| r.delays.clone()).collect()
    };
    assert_eq!(delays(&single), delays(&figures));
}

#[test]
fn steady_zipf_traffic_raises_no_alert_and_the_report_has_its_tables() {
    let figures = run(&tiny(&["hot_shard", "steady_zipf"], 1, 20.0), |_| {});
    assert_eq!(figures.false_alarms.len(), 1);
    for r in &figures.false_alarms {
        assert!(r.firings.is_empty(), "{}: {:?}", r.family.name, r.firings);
        assert_eq!(r.shard_hours, 64.0 * 20.0 / 60.0);
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
    assert!(zipf.starts_with("| steady_zipf | 1 | 21 |"), "{zipf}");
    assert_eq!(
        zipf.matches("| 0.0").count(),
        DetectorsConfig::KINDS.len(),
        "{zipf}"
    );
    assert!(md.contains("No benign condition raised an alert."), "{md}");
}
