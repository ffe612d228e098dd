//! Renders benchmark [`Figures`] as markdown: the parameters, a detection table (one row per
//! incident family and condition) and a false-alarm table (per benign family, firings per
//! 1,000 shard-hours for every detector), then where the false alarms fired. When the DIY
//! baseline ran, both tables gain its columns beside skewwatch's.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use skewwatch_detectors::detect::DetectorsConfig;

use crate::bench::diy::{self, RULES};
use crate::bench::traffic::PARTS;
use crate::bench::{
    CAPACITY_FACTOR, Condition, DetectionRow, FalseAlarmRow, Figures, HORIZONS_SECS,
    ONSET_SPREAD_SECS, WARM_WINDOWS, median_delay, p_within,
};

/// Header of the detection table.
pub const DETECTION_HEADER: &str = "| detector | family | magnitude | rate (req/s) | shards | window (s) | trials | P(≤ 1 min) | P(≤ 2 min) | P(≤ 5 min) | median delay (s) |";
/// Columns the detection table gains when the DIY baseline ran.
pub const DIY_DETECTION_COLUMNS: &str =
    " DIY rule | DIY P(≤ 1 min) | DIY P(≤ 2 min) | DIY P(≤ 5 min) | DIY median (s) |";
/// First cells of the false-alarm table's header; one column per detector follows.
pub const FALSE_ALARM_HEADER: &str = "| benign family | runs | shard-hours |";

/// The whole report.
pub fn render(f: &Figures) -> String {
    let mut out = String::new();
    parameters(&mut out, f);
    detection(&mut out, &f.detection, f.plan.diy.is_some());
    false_alarms(&mut out, &f.false_alarms, f.plan.diy.is_some());
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
        "Shipped configuration (rules/skewwatch.yaml) but the window length; capacity {CAPACITY_FACTOR}× the busiest shard's normal rate, and at least its highest sustained normal rate over the warning line. Warm-up {WARM_WINDOWS} windows; onset at a random second within {ONSET_SPREAD_SECS} s after it (at the agent's start for the families `_from_start`, whose delays run from it); benign firings counted from the start; at most {PARTS} records per shard, class and window stretch.",
    );
    if p.diy.is_some() {
        let _ = writeln!(
            out,
            "DIY baseline: the rules of {} evaluated by Prometheus every {} s (for: {} s) over each trial's counters, sampled at every window end.",
            diy::RULES_PATH,
            diy::EVAL_SECS,
            diy::FOR_SECS,
        );
    }
    out.push('\n');
}

/// The P(≤ horizon) and median cells of one set of delays.
fn delay_cells(delays: &[Option<f64>]) -> String {
    let last = HORIZONS_SECS[HORIZONS_SECS.len() - 1];
    let median = median_delay(delays).map_or_else(|| format!("> {last:.0}"), |m| format!("{m:.0}"));
    let p: Vec<String> = HORIZONS_SECS
        .iter()
        .map(|&h| format!("{:.2}", p_within(delays, h)))
        .collect();
    format!("{} | {median}", p.join(" | "))
}

fn detection(out: &mut String, rows: &[DetectionRow], with_diy: bool) {
    let cols = 7 + HORIZONS_SECS.len() + 1;
    if with_diy {
        let _ = writeln!(out, "{DETECTION_HEADER}{DIY_DETECTION_COLUMNS}");
        let _ = writeln!(
            out,
            "|---|---|---|{}---|{}",
            "---:|".repeat(cols - 3),
            "---:|".repeat(HORIZONS_SECS.len() + 1)
        );
    } else {
        let _ = writeln!(out, "{DETECTION_HEADER}");
        let _ = writeln!(out, "|---|---|---|{}", "---:|".repeat(cols - 3));
    }
    for r in rows {
        let Some(inc) = r.family.incident else {
            continue;
        };
        let c = &r.condition;
        let _ = write!(
            out,
            "| {} | {} | {} {} | {} | {} | {} | {} | {} |",
            inc.detector,
            r.family.name,
            inc.unit,
            c.magnitude,
            c.rate,
            c.shards,
            c.window_secs,
            r.delays.len(),
            delay_cells(&r.delays),
        );
        if with_diy {
            match (&r.diy, diy::rule_beside(inc.detector)) {
                (Some(d), Some(rule)) => {
                    let _ = write!(out, " {} | {} |", rule.alert, delay_cells(d));
                }
                _ => {
                    let _ = write!(out, " –{}", " | –".repeat(HORIZONS_SECS.len() + 1) + " |");
                }
            }
        }
        out.push('\n');
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

fn false_alarms(out: &mut String, rows: &[FalseAlarmRow], with_diy: bool) {
    if rows.is_empty() {
        let _ = writeln!(out, "No benign family was run: no false-alarm figures.");
        return;
    }
    let mut detectors: Vec<&str> = DetectorsConfig::KINDS.iter().map(|k| k.1).collect();
    if with_diy {
        detectors.extend(RULES.iter().map(|r| r.alert));
    }
    let mut by_family: Vec<(&str, Totals)> = Vec::new();
    for r in rows {
        if by_family.last().is_none_or(|(n, _)| *n != r.family.name) {
            by_family.push((r.family.name, Totals::default()));
        }
        let t = &mut by_family.last_mut().expect("pushed above").1;
        t.runs += 1;
        t.shard_hours += r.shard_hours;
        for (a, n) in r.firings.iter().chain(r.diy_firings.iter().flatten()) {
            *t.firings.entry(a.clone()).or_default() += n;
        }
    }
    let _ = writeln!(
        out,
        "False alarms: firings per 1,000 shard-hours of benign traffic (every condition of the family together){}.\n",
        if with_diy {
            "; the Diy columns are the hand-written PromQL rules"
        } else {
            ""
        }
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
    let fired: Vec<&FalseAlarmRow> = rows
        .iter()
        .filter(|r| !r.firings.is_empty() || r.diy_firings.as_ref().is_some_and(|d| !d.is_empty()))
        .collect();
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
        let list: Vec<String> = r
            .firings
            .iter()
            .chain(r.diy_firings.iter().flatten())
            .map(|(a, n)| format!("{a} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {rate} | {shards} | {window_secs} | {:.1} | {} |",
            r.family.name,
            r.shard_hours,
            list.join(", ")
        );
    }
}
