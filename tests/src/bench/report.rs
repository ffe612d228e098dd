//! Renders benchmark [`Figures`] as markdown: the parameters, a detection table (one row per
//! incident family and condition) and a false-alarm table (per benign family, firings per
//! 1,000 shard-hours for every detector), then where the false alarms fired.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use skewwatch_detectors::detect::DetectorsConfig;

use crate::bench::traffic::PARTS;
use crate::bench::{
    CAPACITY_FACTOR, Condition, DetectionRow, FalseAlarmRow, Figures, HORIZONS_SECS,
    ONSET_SPREAD_SECS, WARM_WINDOWS,
};

/// Header of the detection table.
pub const DETECTION_HEADER: &str = "| detector | family | magnitude | rate (req/s) | shards | window (s) | trials | P(≤ 2 min) | P(≤ 5 min) | median delay (s) |";
/// First cells of the false-alarm table's header; one column per detector follows.
pub const FALSE_ALARM_HEADER: &str = "| benign family | runs | shard-hours |";

/// The whole report.
pub fn render(f: &Figures) -> String {
    let mut out = String::new();
    parameters(&mut out, f);
    detection(&mut out, &f.detection);
    false_alarms(&mut out, &f.false_alarms);
    out
}

fn parameters(out: &mut String, f: &Figures) {
    let p = &f.plan;
    let (rate, shards, window) = p.reference;
    let list = |v: Vec<String>| v.join(", ");
    let _ = writeln!(
        out,
        "Seed {}; {} trials per incident condition; benign runs of {:.0} judged minutes.",
        p.seed,
        p.trials,
        p.benign_secs / 60.0
    );
    let _ = writeln!(
        out,
        "Reference condition: {rate} req/s per group, {shards} shards, {window} s windows; one factor varied at a time: rates {} req/s; shards {}; windows {} s; each family's three magnitudes.",
        list(p.rates.iter().map(|r| format!("{r}")).collect()),
        list(p.shards.iter().map(|s| s.to_string()).collect()),
        list(p.windows.iter().map(|w| w.to_string()).collect()),
    );
    let _ = writeln!(
        out,
        "Shipped configuration (rules/skewwatch.yaml) but the window length; capacity {CAPACITY_FACTOR}× the busiest shard's normal rate. Warm-up {WARM_WINDOWS} windows; onset at a random second within {ONSET_SPREAD_SECS} s after it; at most {PARTS} records per shard, class and window stretch.",
    );
    out.push('\n');
}

fn detection(out: &mut String, rows: &[DetectionRow]) {
    let _ = writeln!(out, "{DETECTION_HEADER}");
    let _ = writeln!(out, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let Some(inc) = r.family.incident else {
            continue;
        };
        let c = &r.condition;
        let median = r.median_delay().map_or_else(
            || format!("> {:.0}", HORIZONS_SECS[1]),
            |m| format!("{m:.0}"),
        );
        let _ = writeln!(
            out,
            "| {} | {} | {} {} | {} | {} | {} | {} | {:.2} | {:.2} | {median} |",
            inc.detector,
            r.family.name,
            inc.unit,
            c.magnitude,
            c.rate,
            c.shards,
            c.window_secs,
            r.delays.len(),
            r.p_within(HORIZONS_SECS[0]),
            r.p_within(HORIZONS_SECS[1]),
        );
    }
    out.push('\n');
}

/// Firings and shard-hours of one benign family, summed over its conditions.
#[derive(Debug, Default)]
struct Totals {
    runs: usize,
    shard_hours: f64,
    firings: BTreeMap<String, u64>,
}

fn false_alarms(out: &mut String, rows: &[FalseAlarmRow]) {
    if rows.is_empty() {
        let _ = writeln!(out, "No benign family was run: no false-alarm figures.");
        return;
    }
    let detectors: Vec<&str> = DetectorsConfig::KINDS.iter().map(|k| k.1).collect();
    let mut by_family: Vec<(&str, Totals)> = Vec::new();
    for r in rows {
        if by_family.last().is_none_or(|(n, _)| *n != r.family.name) {
            by_family.push((r.family.name, Totals::default()));
        }
        let t = &mut by_family.last_mut().expect("pushed above").1;
        t.runs += 1;
        t.shard_hours += r.shard_hours;
        for (a, n) in &r.firings {
            *t.firings.entry(a.clone()).or_default() += n;
        }
    }
    let _ = writeln!(
        out,
        "False alarms: firings per 1,000 shard-hours of benign traffic (every condition of the family together).\n"
    );
    let _ = writeln!(out, "{FALSE_ALARM_HEADER} {} |", detectors.join(" | "));
    let _ = writeln!(out, "|---|---:|---:|{}", "---:|".repeat(detectors.len()));
    for (name, t) in &by_family {
        let cells: Vec<String> = detectors
            .iter()
            .map(|d| {
                let n = t.firings.get(*d).copied().unwrap_or(0);
                format!(
                    "{:.1}",
                    n as f64 * 1000.0 / t.shard_hours.max(f64::MIN_POSITIVE)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "| {name} | {} | {:.0} | {} |",
            t.runs,
            t.shard_hours,
            cells.join(" | ")
        );
    }
    out.push('\n');
    where_they_fired(out, rows);
}

fn where_they_fired(out: &mut String, rows: &[FalseAlarmRow]) {
    let fired: Vec<&FalseAlarmRow> = rows.iter().filter(|r| !r.firings.is_empty()).collect();
    if fired.is_empty() {
        let _ = writeln!(out, "No benign condition raised an alert.");
        return;
    }
    let _ = writeln!(out, "Benign conditions that raised alerts:\n");
    let _ = writeln!(
        out,
        "| benign family | rate (req/s) | shards | window (s) | shard-hours | firings |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
    for r in fired {
        let Condition {
            rate,
            shards,
            window_secs,
            ..
        } = r.condition;
        let list: Vec<String> = r.firings.iter().map(|(a, n)| format!("{a} {n}")).collect();
        let _ = writeln!(
            out,
            "| {} | {rate} | {shards} | {window_secs} | {:.1} | {} |",
            r.family.name,
            r.shard_hours,
            list.join(", ")
        );
    }
}
