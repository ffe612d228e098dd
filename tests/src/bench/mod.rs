//! The detection benchmark: how often and how fast each detector fires on seeded incidents,
//! and how often any detector fires on benign traffic, over a sweep of rates, shard counts,
//! window lengths and magnitudes.
//!
//! Everything runs in-process on the detectors crate's [`Engine`], configured as the shipped
//! `rules/skewwatch.yaml` (the embedded configuration) with only the window length changed and
//! one shard capacity added (so `CapacityHeadroom` runs). Traffic is drawn per window as
//! aggregated records ([`traffic`]); the families are one table ([`families::FAMILIES`]).
//!
//! The sweep varies one factor at a time around a reference condition ([`Plan::conditions`]):
//! every rate, every shard count, every window length and every magnitude with the other
//! factors at the reference. A trial warms the detectors up for [`WARM_WINDOWS`] windows,
//! starts the incident at a random whole second in the next [`ONSET_SPREAD_SECS`] seconds and
//! runs until the last horizon of [`HORIZONS_SECS`] has passed (or the detector fired). A
//! benign run lasts [`Plan::benign_secs`] after the same warm-up; firings in it are false
//! alarms. Every trial has its own seed derived from the plan's, so a seed gives the same
//! figures on every machine; [`report`] renders them.

pub mod families;
pub mod report;
pub mod traffic;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use skewwatch_detectors::alert::TransitionState;
use skewwatch_detectors::detect::capacity::Capacity;
use skewwatch_detectors::engine::{Engine, EngineConfig};
use skewwatch_detectors::prng::{fnv1a64, mix};

use crate::scenario::Rng;
use families::{FAMILIES, Family, Target};
use traffic::{GROUP, HOT_KEY, Slice, Traffic};

/// Start of every run (unix seconds): a multiple of every window length swept.
pub const START: f64 = crate::scenarios::benign::START;
/// Windows before an onset, and before false alarms count: every detector's warm-up
/// (`warmup_windows`, 30 in the shipped configuration) plus two.
pub const WARM_WINDOWS: u32 = 32;
/// The onset falls on a uniformly random whole second within this many seconds after the
/// warm-up, so it lands anywhere within a window.
pub const ONSET_SPREAD_SECS: u64 = 120;
/// Detection horizons, seconds after the onset: P(detect within each) is reported.
pub const HORIZONS_SECS: [f64; 2] = [120.0, 300.0];
/// Each shard's configured capacity is this multiple of the busiest shard's normal rate.
pub const CAPACITY_FACTOR: f64 = 2.0;

/// One point of the sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Condition {
    /// Requests per second of the whole group.
    pub rate: f64,
    /// Shards in the group.
    pub shards: usize,
    /// Window length, whole seconds.
    pub window_secs: u32,
    /// The incident's magnitude (see the family's unit); unused by benign families.
    pub magnitude: f64,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Seed of every trial.
    pub seed: u64,
    /// Trials per incident condition.
    pub trials: u32,
    /// Judged seconds of each benign run (after the warm-up).
    pub benign_secs: f64,
    /// Rates swept (req/s per group).
    pub rates: Vec<f64>,
    /// Shard counts swept.
    pub shards: Vec<usize>,
    /// Window lengths swept, seconds.
    pub windows: Vec<u32>,
    /// The reference rate, shard count and window length the other factors are held at.
    pub reference: (f64, usize, u32),
    /// Families to run.
    pub families: Vec<&'static Family>,
    /// Threads the trials are spread over.
    pub threads: usize,
}

impl Plan {
    /// The published sweep: rates 1 to 10,000 req/s, 4 to 1,024 shards, 5, 10 and 30 s
    /// windows, three magnitudes, 20 trials per condition, an hour per benign run.
    pub fn full(seed: u64) -> Plan {
        Plan {
            seed,
            trials: 20,
            benign_secs: 3600.0,
            rates: vec![1.0, 10.0, 100.0, 1000.0, 10_000.0],
            shards: vec![4, 16, 64, 256, 1024],
            windows: vec![5, 10, 30],
            reference: (1000.0, 64, 10),
            families: FAMILIES.iter().collect(),
            threads: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }

    /// A smaller sweep for a quick look: fewer values per axis, 5 trials, 20 benign minutes.
    pub fn quick(seed: u64) -> Plan {
        Plan {
            trials: 5,
            benign_secs: 1200.0,
            rates: vec![10.0, 1000.0, 10_000.0],
            shards: vec![4, 64, 1024],
            windows: vec![10, 30],
            ..Plan::full(seed)
        }
    }

    /// The conditions of family `f`: the reference, then each factor varied alone (benign
    /// families have no magnitude to vary).
    pub fn conditions(&self, f: &Family) -> Vec<Condition> {
        let (rate, shards, window_secs) = self.reference;
        let mags = f.incident.map_or(vec![0.0], |i| i.magnitudes.to_vec());
        let magnitude = mags[mags.len() / 2];
        let base = Condition {
            rate,
            shards,
            window_secs,
            magnitude,
        };
        let mut out = vec![base];
        let mut add = |c: Condition| {
            if !out.contains(&c) {
                out.push(c);
            }
        };
        self.rates
            .iter()
            .for_each(|&rate| add(Condition { rate, ..base }));
        self.shards
            .iter()
            .for_each(|&shards| add(Condition { shards, ..base }));
        self.windows.iter().for_each(|&window_secs| {
            add(Condition {
                window_secs,
                ..base
            })
        });
        mags.iter()
            .for_each(|&magnitude| add(Condition { magnitude, ..base }));
        out
    }
}

/// The outcome of one incident condition.
#[derive(Debug, Clone)]
pub struct DetectionRow {
    /// The family.
    pub family: &'static Family,
    /// The condition.
    pub condition: Condition,
    /// Per trial, the onset-to-firing delay in seconds, or `None` when the detector had not
    /// fired by the last horizon.
    pub delays: Vec<Option<f64>>,
}

impl DetectionRow {
    /// Share of trials detected within `secs` of the onset.
    pub fn p_within(&self, secs: f64) -> f64 {
        let hits = self.delays.iter().flatten().filter(|&&d| d <= secs).count();
        hits as f64 / self.delays.len().max(1) as f64
    }

    /// Median delay over every trial, an undetected trial counting as later than any; `None`
    /// when at least half the trials went undetected.
    pub fn median_delay(&self) -> Option<f64> {
        let mut d: Vec<f64> = self
            .delays
            .iter()
            .map(|d| d.unwrap_or(f64::INFINITY))
            .collect();
        d.sort_by(f64::total_cmp);
        let n = d.len();
        let m = match n {
            0 => return None,
            _ if n % 2 == 1 => d[n / 2],
            _ => (d[n / 2 - 1] + d[n / 2]) / 2.0,
        };
        m.is_finite().then_some(m)
    }
}

/// The firings of one benign condition.
#[derive(Debug, Clone)]
pub struct FalseAlarmRow {
    /// The family.
    pub family: &'static Family,
    /// The condition.
    pub condition: Condition,
    /// Shard-hours judged (shards × judged hours).
    pub shard_hours: f64,
    /// Firing transitions after the warm-up, by alert name.
    pub firings: BTreeMap<String, u64>,
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct Figures {
    /// What was run.
    pub plan: Plan,
    /// One row per incident family and condition.
    pub detection: Vec<DetectionRow>,
    /// One row per benign family and condition.
    pub false_alarms: Vec<FalseAlarmRow>,
}

/// One trial to run: which row it belongs to and everything it needs.
struct Job {
    family: &'static Family,
    condition: Condition,
    seed: u64,
    benign_secs: f64,
}

/// Runs the plan on [`Plan::threads`] threads; the figures do not depend on their number,
/// because every trial has its own seed. `progress` is told what is about to run.
pub fn run(plan: &Plan, mut progress: impl FnMut(&str)) -> Figures {
    // One row per family and condition, in plan order; its trials are consecutive jobs.
    let mut rows: Vec<(&'static Family, Condition, usize)> = Vec::new();
    let mut jobs = Vec::new();
    for &family in &plan.families {
        for (ci, condition) in plan.conditions(family).into_iter().enumerate() {
            let name = fnv1a64(family.name.as_bytes());
            let (trials, benign_secs) = match family.incident {
                Some(_) => (u64::from(plan.trials), 0.0),
                None => (1, plan.benign_secs),
            };
            rows.push((family, condition, trials as usize));
            jobs.extend((0..trials).map(|t| Job {
                family,
                condition,
                seed: mix(plan.seed ^ mix(name ^ mix(((ci as u64) << 32) | t))),
                benign_secs,
            }));
        }
    }
    progress(&format!(
        "{} trials in {} conditions of {} families on {} threads",
        jobs.len(),
        rows.len(),
        plan.families.len(),
        plan.threads
    ));
    let mut trials = run_jobs(&jobs, plan.threads.max(1)).into_iter();
    let mut figures = Figures {
        plan: plan.clone(),
        detection: Vec::new(),
        false_alarms: Vec::new(),
    };
    for (family, condition, n) in rows {
        let done: Vec<Trial> = trials.by_ref().take(n).collect();
        if family.incident.is_some() {
            let delays = done.iter().map(|t| t.delay).collect();
            figures.detection.push(DetectionRow {
                family,
                condition,
                delays,
            });
        } else {
            let firings = done
                .into_iter()
                .next()
                .map(|t| t.firings)
                .unwrap_or_default();
            figures.false_alarms.push(FalseAlarmRow {
                family,
                condition,
                shard_hours: condition.shards as f64 * plan.benign_secs / 3600.0,
                firings,
            });
        }
    }
    figures
}

/// Runs every job, thread k taking jobs k, k + threads, ... (neighbouring jobs are trials of
/// one condition and cost alike, so the threads stay about even); results in job order.
fn run_jobs(jobs: &[Job], threads: usize) -> Vec<Trial> {
    let mut out: Vec<Option<Trial>> = vec![None; jobs.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                scope.spawn(move || {
                    jobs.iter()
                        .enumerate()
                        .skip(k)
                        .step_by(threads)
                        .map(|(i, j)| (i, run_trial(j.family, &j.condition, j.seed, j.benign_secs)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (i, t) in h.join().expect("a benchmark thread panicked") {
                out[i] = Some(t);
            }
        }
    });
    out.into_iter().map(|t| t.expect("every job ran")).collect()
}

/// What one trial saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trial {
    /// Onset to the first firing of the family's detector naming its target (incident
    /// families), within the last horizon.
    pub delay: Option<f64>,
    /// Firing transitions after the warm-up, by alert name.
    pub firings: BTreeMap<String, u64>,
}

/// Runs one trial of `family` at `c`: an incident trial stops at its first detection or its
/// last horizon; a benign one runs `benign_secs` after the warm-up.
pub fn run_trial(family: &Family, c: &Condition, seed: u64, benign_secs: f64) -> Trial {
    let mut rng = Rng::new(seed);
    let traffic = Traffic::new(c.rate, &(family.weights)(c.shards, &mut rng));
    let w = f64::from(c.window_secs);
    let judged_from = START + f64::from(WARM_WINDOWS) * w;
    let (onset, end) = match family.incident {
        Some(_) => {
            let onset = judged_from + (rng.next_u64() % ONSET_SPREAD_SECS) as f64;
            (onset, onset + HORIZONS_SECS[HORIZONS_SECS.len() - 1] + w)
        }
        None => (f64::INFINITY, judged_from + benign_secs),
    };
    let slice = |t: f64, i: usize| -> Slice {
        match family.incident {
            Some(inc) if t >= onset => (inc.after)(c.magnitude, i, traffic.shard_rate(i)),
            _ => (family.before)(t - START, i, seed, &traffic),
        }
    };
    let normal = |i| (family.before)(0.0, i, seed, &traffic);
    let mut engine = Engine::new(engine_config(c, &traffic, normal), START);
    let mut out = Trial::default();
    let mut t = START;
    while t < end && out.delay.is_none() {
        traffic.emit(&mut engine, &mut rng, t, u64::from(c.window_secs), &slice);
        t += w;
        for ev in engine.advance(t) {
            for tr in ev.transitions {
                if tr.state != TransitionState::Firing || tr.ts <= judged_from {
                    continue;
                }
                *out.firings.entry(tr.alertname.clone()).or_default() += 1;
                let detected = family.incident.is_some_and(|inc| {
                    tr.alertname == inc.detector
                        && tr.ts >= onset
                        && tr.ts - onset <= HORIZONS_SECS[HORIZONS_SECS.len() - 1]
                        && match inc.target {
                            Target::Shard => tr.labels.get("shard") == Some(&traffic.shards[0]),
                            Target::Key => {
                                tr.labels.get("key").map(String::as_str) == Some(HOT_KEY)
                            }
                            Target::Group => true,
                        }
                });
                if detected && out.delay.is_none() {
                    out.delay = Some(tr.ts - onset);
                }
            }
        }
    }
    out
}

/// The shipped configuration with the condition's window length, and every shard of the
/// group given a capacity of [`CAPACITY_FACTOR`] times the busiest shard's normal rate (keyed
/// traffic included) at the start of the run.
fn engine_config(
    c: &Condition,
    traffic: &Traffic,
    normal: impl Fn(usize) -> Slice,
) -> EngineConfig {
    static SHIPPED: OnceLock<EngineConfig> = OnceLock::new();
    let mut cfg = SHIPPED
        .get_or_init(|| skewwatch::app::Config::embedded().engine())
        .clone();
    cfg.window.window_secs = f64::from(c.window_secs);
    let busiest = (0..traffic.shards.len())
        .map(|i| {
            let s = normal(i);
            traffic.shard_rate(i) * s.load + s.key_rps
        })
        .fold(0.0, f64::max);
    cfg.detectors.capacity_headroom.capacities = vec![Capacity {
        group: GROUP.to_owned(),
        shard: "*".to_owned(),
        max_requests_per_second: Some(CAPACITY_FACTOR * busiest),
        max_inflight: None,
    }];
    cfg
}
