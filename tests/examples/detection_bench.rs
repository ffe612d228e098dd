//! The detection benchmark: per detector, the probability of detection within 2 and 5 minutes
//! and the median delay over a sweep of rates, shard counts, window lengths and magnitudes,
//! and false alarms per 1,000 shard-hours on benign traffic, as markdown on stdout.
//!
//! `scripts/detection-bench.sh [--quick] [--seed N] [--trials N] [--family NAME]... [--diy]`
//! runs it; `--diy` adds the hand-written PromQL rules evaluated by a real Prometheus beside
//! each detector (it needs `promtool` and `prometheus` on PATH), and `--print-diy-rules` prints
//! their rule file. `docs/detectors.md` publishes the full sweep and explains the columns.

#![expect(
    clippy::disallowed_types,
    reason = "the end-to-end crate drives real processes in real time: there is no paused clock to honour"
)]

use std::process::ExitCode;
use std::time::Instant;

use skewwatch_e2e::bench::{self, Plan, diy, families};

/// The seed the published table uses.
const DEFAULT_SEED: u64 = 20_251_201;

const USAGE: &str = "usage: detection_bench [--quick] [--seed N] [--trials N] [--benign-minutes N] [--threads N] [--family NAME]... [--diy] | --print-diy-rules";

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--print-diy-rules") {
        print!("{}", diy::rules_yaml());
        return ExitCode::SUCCESS;
    }
    match parse(std::env::args().skip(1)) {
        Ok(plan) => {
            let started = Instant::now();
            match bench::run(&plan, |what| {
                eprintln!(
                    "detection_bench: [{:.0} s] {what}",
                    started.elapsed().as_secs_f64()
                )
            }) {
                Ok(figures) => print!("{}", bench::report::render(&figures)),
                Err(e) => {
                    eprintln!("detection_bench: the DIY baseline failed: {e}");
                    return ExitCode::FAILURE;
                }
            }
            eprintln!(
                "detection_bench: done in {:.0} s",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("detection_bench: {why}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// The plan the arguments ask for.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Plan, String> {
    let mut quick = false;
    let mut seed = DEFAULT_SEED;
    let mut trials = None;
    let mut benign_minutes = None;
    let mut names = Vec::new();
    let mut threads = None;
    let mut with_diy = false;
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{a} needs {what}"));
        match a.as_str() {
            "--quick" => quick = true,
            "--seed" => seed = number(&value("a seed")?)?,
            "--trials" => trials = Some(number(&value("a number of trials")?)?),
            "--benign-minutes" => benign_minutes = Some(number(&value("minutes")?)?),
            "--family" => names.push(value("a family name")?),
            "--threads" => threads = Some(number(&value("a number of threads")?)?),
            "--diy" => with_diy = true,
            "-h" | "--help" => return Err("help".to_owned()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let mut plan = if quick {
        Plan::quick(seed)
    } else {
        Plan::full(seed)
    };
    if let Some(t) = trials {
        plan.trials = u32::try_from(t)
            .map_err(|_| "--trials is too large".to_owned())?
            .max(1);
    }
    if let Some(n) = threads {
        plan.threads = usize::try_from(n).unwrap_or(1).max(1);
    }
    if let Some(m) = benign_minutes {
        plan.benign_secs = m.max(1) as f64 * 60.0;
    }
    if !names.is_empty() {
        let all: Vec<&str> = families::FAMILIES.iter().map(|f| f.name).collect();
        plan.families = names
            .iter()
            .map(|n| {
                families::family(n)
                    .ok_or(format!("unknown family {n}: use one of {}", all.join(", ")))
            })
            .collect::<Result<_, _>>()?;
    }
    if with_diy {
        plan.diy = Some(diy::Tools::from_path().map_err(|e| e.to_string())?);
    }
    Ok(plan)
}

fn number(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("{s} is not a whole number"))
}
