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
//! benign run lasts [`Plan::benign_secs`] after the same warm-up; firings in it, the warm-up's
//! included, are false alarms. A family that starts mid-incident ([`families::Incident`]'s
//! `from_start`) has its onset at the run's start instead. Every trial has its own seed derived from the plan's, so a seed gives the same
//! figures on every machine; [`report`] renders them.
//!
//! With [`Plan::diy`] set, the trials of every family that has a hand-written PromQL rule
//! ([`diy::RULES`]) are also sampled as a Prometheus would scrape them, and the rules are
//! evaluated by a real Prometheus over those samples ([`diy`]): the do-it-yourself baseline.

pub mod diy;
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

use diy::{Firing, Rule, Sampler, Store};

/// Start of every run (unix seconds): a multiple of every window length swept.
pub const START: f64 = crate::scenarios::benign::START;
/// Windows before an onset, and before false alarms count: every detector's warm-up
/// (`warmup_windows`, 30 in the shipped configuration) plus two.
pub const WARM_WINDOWS: u32 = 32;
/// The onset falls on a uniformly random whole second within this many seconds after the
/// warm-up, so it lands anywhere within a window.
pub const ONSET_SPREAD_SECS: u64 = 120;
/// Detection horizons, seconds after the onset: P(detect within each) is reported; a trial
/// ends at the last.
pub const HORIZONS_SECS: [f64; 3] = [60.0, 120.0, 300.0];
/// The last horizon: how long after its onset a trial runs.
const LAST_HORIZON_SECS: f64 = HORIZONS_SECS[HORIZONS_SECS.len() - 1];
/// Each shard's configured capacity is this multiple of the busiest shard's normal rate (at
/// least; see `engine_config`).
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
    /// `Some`: also measure the do-it-yourself PromQL baseline with these programs.
    pub diy: Option<diy::Tools>,
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
            diy: None,
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
    /// The same for the family's DIY rule, when the baseline ran and the family has one.
    pub diy: Option<Vec<Option<f64>>>,
}

impl DetectionRow {
    /// Share of trials detected within `secs` of the onset.
    pub fn p_within(&self, secs: f64) -> f64 {
        p_within(&self.delays, secs)
    }

    /// Median delay over every trial (see [`median_delay`]).
    pub fn median_delay(&self) -> Option<f64> {
        median_delay(&self.delays)
    }
}

/// Share of `delays` (one per trial, `None`: undetected) within `secs` of the onset.
pub fn p_within(delays: &[Option<f64>], secs: f64) -> f64 {
    let hits = delays.iter().flatten().filter(|&&d| d <= secs).count();
    hits as f64 / delays.len().max(1) as f64
}

/// Median delay over every trial, an undetected trial counting as later than any; `None` when
/// at least half the trials went undetected.
pub fn median_delay(delays: &[Option<f64>]) -> Option<f64> {
    let mut d: Vec<f64> = delays.iter().map(|d| d.unwrap_or(f64::INFINITY)).collect();
    d.sort_by(f64::total_cmp);
    let n = d.len();
    let m = match n {
        0 => return None,
        _ if n % 2 == 1 => d[n / 2],
        _ => (d[n / 2 - 1] + d[n / 2]) / 2.0,
    };
    m.is_finite().then_some(m)
}

/// The firings of one benign condition.
#[derive(Debug, Clone)]
pub struct FalseAlarmRow {
    /// The family.
    pub family: &'static Family,
    /// The condition.
    pub condition: Condition,
    /// Shard-hours judged (shards × judged hours, the warm-up included).
    pub shard_hours: f64,
    /// Firing transitions from the run's start, the warm-up included, by alert name.
    pub firings: BTreeMap<String, u64>,
    /// The DIY rules' firing transitions after the warm-up, by alert name, when the baseline
    /// ran.
    pub diy_firings: Option<BTreeMap<String, u64>>,
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
    /// The row (family and condition) it belongs to.
    row: usize,
}

/// The DIY rules a family's trials are judged by: the one beside an incident family's
/// detector, every rule on a benign family.
fn diy_rules(f: &Family) -> Vec<&'static Rule> {
    match f.incident {
        Some(inc) => diy::rule_beside(inc.detector).into_iter().collect(),
        None => diy::RULES.iter().collect(),
    }
}

/// When a trial of family `f` at `c` starts being judged: after the warm-up, or at the start
/// for a family that starts mid-incident.
fn judged_from(f: &Family, c: &Condition) -> f64 {
    if f.incident.is_some_and(|i| i.from_start) {
        return START;
    }
    START + f64::from(WARM_WINDOWS) * f64::from(c.window_secs)
}

/// Where a DIY run keeps its samples and how far apart its conditions lie in TSDB time.
struct DiyRun<'a> {
    tools: &'a diy::Tools,
    store: Store,
    stride: f64,
}

/// Runs the plan on [`Plan::threads`] threads; the figures do not depend on their number,
/// because every trial has its own seed. `progress` is told what is about to run. Fails only
/// when the DIY baseline was asked for and could not be measured.
pub fn run(plan: &Plan, mut progress: impl FnMut(&str)) -> Result<Figures, diy::Error> {
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
            let row = rows.len();
            rows.push((family, condition, trials as usize));
            jobs.extend((0..trials).map(|t| Job {
                family,
                condition,
                seed: mix(plan.seed ^ mix(name ^ mix(((ci as u64) << 32) | t))),
                benign_secs,
                row,
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
    let diy = plan.diy.as_ref().map(|tools| {
        let w = f64::from(
            plan.windows
                .iter()
                .copied()
                .chain([plan.reference.2])
                .max()
                .unwrap_or(10),
        );
        let after = (ONSET_SPREAD_SECS as f64 + LAST_HORIZON_SECS).max(plan.benign_secs);
        DiyRun {
            tools,
            store: Store::new(),
            stride: diy::stride_secs(f64::from(WARM_WINDOWS) * w + after + 2.0 * w),
        }
    });
    let trials = run_jobs(&jobs, plan.threads.max(1), diy.as_ref())?;
    let mut figures = Figures {
        plan: plan.clone(),
        detection: Vec::new(),
        false_alarms: Vec::new(),
    };
    let mut next = 0;
    for &(family, condition, n) in &rows {
        let done = &trials[next..next + n];
        next += n;
        if family.incident.is_some() {
            figures.detection.push(DetectionRow {
                family,
                condition,
                delays: done.iter().map(|t| t.delay).collect(),
                diy: None,
            });
        } else {
            figures.false_alarms.push(FalseAlarmRow {
                family,
                condition,
                shard_hours: condition.shards as f64
                    * (judged_from(family, &condition) - START + plan.benign_secs)
                    / 3600.0,
                firings: done.first().map(|t| t.firings.clone()).unwrap_or_default(),
                diy_firings: None,
            });
        }
    }
    if let Some(d) = diy {
        judge_diy(plan, &d, &rows, &trials, &mut figures, &mut progress)?;
    }
    Ok(figures)
}

/// Evaluates the DIY rules over the samples of every row that has one and writes their delays
/// and firings into `figures`.
fn judge_diy(
    plan: &Plan,
    d: &DiyRun<'_>,
    rows: &[(&'static Family, Condition, usize)],
    trials: &[Trial],
    figures: &mut Figures,
    progress: &mut dyn FnMut(&str),
) -> Result<(), diy::Error> {
    // Per row: its first job, its query (rows without a rule have none).
    let mut queries = Vec::new();
    let mut first = 0;
    let mut spans = Vec::new();
    for (r, &(family, c, n)) in rows.iter().enumerate() {
        spans.push(first);
        first += n;
        let rules = diy_rules(family);
        if rules.is_empty() {
            continue;
        }
        let from = judged_from(family, &c);
        let to = match family.incident {
            Some(_) => from + ONSET_SPREAD_SECS as f64 + LAST_HORIZON_SECS,
            None => from + plan.benign_secs,
        };
        queries.push((
            r,
            diy::Query {
                rules,
                offset: r as f64 * d.stride,
                // On the evaluation grid, counted from the run's start.
                from: START + ((from - START) / diy::EVAL_SECS).ceil() * diy::EVAL_SECS,
                to,
            },
        ));
    }
    let sampled: Vec<usize> = (0..trials.len()).collect();
    let qs: Vec<diy::Query> = queries.iter().map(|(_, q)| q.clone()).collect();
    let (firings, cost) = diy::evaluate(d.tools, &d.store, &sampled, &qs, progress)?;
    progress(&format!(
        "DIY: {:.0} MB of samples, backfill {:.1} s, Prometheus start and queries {:.1} s",
        cost.bytes as f64 / 1e6,
        cost.backfill_secs,
        cost.query_secs
    ));
    let (mut det, mut fa) = (0, 0);
    for (r, &(family, c, n)) in rows.iter().enumerate() {
        let fired = queries
            .iter()
            .position(|(qr, _)| *qr == r)
            .map(|i| &firings[i]);
        let jobs = spans[r]..spans[r] + n;
        match family.incident {
            Some(inc) => {
                if let (Some(fired), Some(rule)) = (fired, diy::rule_beside(inc.detector)) {
                    figures.detection[det].diy = Some(
                        jobs.map(|j| diy_delay(fired, rule, j, trials[j].onset))
                            .collect(),
                    );
                }
                det += 1;
            }
            None => {
                let mut counts = BTreeMap::new();
                for f in fired.into_iter().flatten() {
                    if jobs.contains(&f.trial) && f.ts > judged_from(family, &c) {
                        *counts.entry(f.alert.to_owned()).or_default() += 1;
                    }
                }
                figures.false_alarms[fa].diy_firings = Some(counts);
                fa += 1;
            }
        }
    }
    Ok(())
}

/// Onset to the first firing of `rule` in trial `job` that names the family's target, within
/// the last horizon.
fn diy_delay(fired: &[Firing], rule: &Rule, job: usize, onset: Option<f64>) -> Option<f64> {
    let onset = onset?;
    fired
        .iter()
        .filter(|f| f.alert == rule.alert && f.trial == job)
        .filter(|f| match rule.target {
            Target::Shard => f.shard.as_deref() == Some(traffic::shard_name(0).as_str()),
            Target::Key | Target::Group => true,
        })
        .map(|f| f.ts - onset)
        .filter(|&d| (0.0..=LAST_HORIZON_SECS).contains(&d))
        .min_by(f64::total_cmp)
}

/// Runs every job, thread k taking jobs k, k + threads, ... (neighbouring jobs are trials of
/// one condition and cost alike, so the threads stay about even); results in job order. With
/// `diy`, a job whose family has a DIY rule also writes its samples.
fn run_jobs(
    jobs: &[Job],
    threads: usize,
    diy: Option<&DiyRun<'_>>,
) -> Result<Vec<Trial>, diy::Error> {
    let mut out: Vec<Option<Trial>> = vec![None; jobs.len()];
    let one = |i: usize, j: &Job| -> Result<Trial, diy::Error> {
        let rules = diy_rules(j.family);
        let mut tap = match diy {
            Some(d) if !rules.is_empty() => {
                let shards: Vec<String> =
                    (0..j.condition.shards).map(traffic::shard_name).collect();
                let offset = j.row as f64 * d.stride;
                Some(Sampler::new(d.store.part(i), i, offset, &shards, &rules)?)
            }
            _ => None,
        };
        let t = run_trial(j.family, &j.condition, j.seed, j.benign_secs, tap.as_mut());
        if let Some(tap) = tap {
            tap.finish()?;
        }
        Ok(t)
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                scope.spawn(move || {
                    jobs.iter()
                        .enumerate()
                        .skip(k)
                        .step_by(threads)
                        .map(|(i, j)| one(i, j).map(|t| (i, t)))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        for h in handles {
            for (i, t) in h.join().expect("a benchmark thread panicked")? {
                out[i] = Some(t);
            }
        }
        Ok::<(), diy::Error>(())
    })?;
    Ok(out.into_iter().map(|t| t.expect("every job ran")).collect())
}

/// What one trial saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trial {
    /// Onset to the first firing of the family's detector naming its target (incident
    /// families), within the last horizon.
    pub delay: Option<f64>,
    /// Firing transitions from the run's start, by alert name.
    pub firings: BTreeMap<String, u64>,
    /// The onset (incident families), run time.
    pub onset: Option<f64>,
}

/// Runs one trial of `family` at `c`: an incident trial stops at its first detection or its
/// last horizon; a benign one runs `benign_secs` after the warm-up. With `tap`, the trial also
/// feeds its records to the DIY sampler, samples at every window end from a minute and a
/// window before the warm-up ends, and runs to its last horizon whatever the detectors do.
pub fn run_trial(
    family: &Family,
    c: &Condition,
    seed: u64,
    benign_secs: f64,
    mut tap: Option<&mut Sampler>,
) -> Trial {
    let mut rng = Rng::new(seed);
    let traffic = Traffic::new(c.rate, &(family.weights)(c.shards, &mut rng));
    let w = f64::from(c.window_secs);
    let judged_from = judged_from(family, c);
    let (onset, end) = match family.incident {
        Some(inc) if inc.from_start => (START, START + LAST_HORIZON_SECS + w),
        Some(_) => {
            let onset = judged_from + (rng.next_u64() % ONSET_SPREAD_SECS) as f64;
            (onset, onset + LAST_HORIZON_SECS + w)
        }
        None => (f64::INFINITY, judged_from + benign_secs),
    };
    let slice = |t: f64, i: usize| -> Slice {
        match family.incident {
            Some(inc) if t >= onset => (inc.after)(c.magnitude, i, traffic.shard_rate(i)),
            _ => (family.before)(t - START, i, seed, &traffic),
        }
    };
    let normal = |t: f64, i: usize| (family.before)(t, i, seed, &traffic);
    let config = engine_config(c, &traffic, normal, onset.min(end) - START);
    let mut engine = Engine::new(config, START);
    let mut out = Trial {
        onset: onset.is_finite().then_some(onset),
        ..Trial::default()
    };
    // A DIY Prometheus started with the agent has no samples from before it.
    let sample_from = (judged_from - diy::RANGE_SECS - w).max(START);
    let mut t = START;
    while t < end && (out.delay.is_none() || tap.is_some()) {
        let secs = u64::from(c.window_secs);
        match tap.as_deref_mut() {
            Some(s) => traffic.emit(&mut (&mut engine, s), &mut rng, t, secs, &slice),
            None => traffic.emit(&mut engine, &mut rng, t, secs, &slice),
        }
        t += w;
        if let Some(s) = tap.as_deref_mut()
            && t >= sample_from
        {
            s.sample(t);
        }
        for ev in engine.advance(t) {
            for tr in ev.transitions {
                // Every firing counts, from the agent's first window: detectors with a reference
                // without history speak during their warm-up too.
                if tr.state != TransitionState::Firing {
                    continue;
                }
                *out.firings.entry(tr.alertname.clone()).or_default() += 1;
                let detected = family.incident.is_some_and(|inc| {
                    tr.alertname == inc.detector
                        && tr.ts >= onset
                        && tr.ts - onset <= LAST_HORIZON_SECS
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
/// traffic included) at the start of the run, and never less than the highest normal rate any
/// shard sustains for as long as the detector needs to fire (`consecutive_windows` windows,
/// and longer than `tolerated_burst_secs`) before `normal_until` (run time from the start),
/// over `warn_utilisation`. `normal(t, i)` is shard `i`'s normal traffic at `t`.
///
/// The floor keeps benign traffic benign for `CapacityHeadroom`: a shard whose ordinary peaks
/// hold over 80% of its capacity for three windows is under-provisioned, and an alert on it is
/// right, not false. It binds only where ordinary traffic swings far (`noisy_shards`, whose
/// 10 s levels vary by e^(0.5 Z)); elsewhere twice the starting rate is above it.
fn engine_config(
    c: &Condition,
    traffic: &Traffic,
    normal: impl Fn(f64, usize) -> Slice,
    normal_until: f64,
) -> EngineConfig {
    static SHIPPED: OnceLock<EngineConfig> = OnceLock::new();
    let mut cfg = SHIPPED
        .get_or_init(|| skewwatch::app::Config::embedded().engine())
        .clone();
    cfg.window.window_secs = f64::from(c.window_secs);
    let rate = |t: f64, i: usize| {
        let s = normal(t, i);
        traffic.shard_rate(i) * s.load + s.key_rps
    };
    let shards = 0..traffic.shards.len();
    let busiest = shards.clone().map(|i| rate(0.0, i)).fold(0.0, f64::max);
    let headroom = &cfg.detectors.capacity_headroom;
    // What the detector must see to fire: its windows in a row, longer than a tolerated burst.
    let hold = f64::from(headroom.consecutive_windows * c.window_secs)
        .max(headroom.tolerated_burst_secs + SUSTAIN_STEP_SECS);
    let sustained = shards
        .map(|i| {
            sustained_peak(
                |t| rate(t, i),
                (hold, f64::from(c.window_secs)),
                normal_until,
            )
        })
        .fold(0.0, f64::max);
    let capacity = (CAPACITY_FACTOR * busiest).max(sustained / headroom.warn_utilisation);
    cfg.detectors.capacity_headroom.capacities = vec![Capacity {
        group: GROUP.to_owned(),
        shard: "*".to_owned(),
        max_requests_per_second: Some(capacity),
        max_inflight: None,
    }];
    cfg
}

/// The highest level `rate` holds throughout `hold` seconds as the detector sees it, in windows
/// of `window` seconds: the maximum over starts t (before `until`) of the lowest window mean
/// among the windows from t that cover `hold`, each mean sampled every [`SUSTAIN_STEP_SECS`]
/// (the families change their load at most every second, most in steps of 10 s or more). A
/// window mean, not the lowest instant: at 30 s windows a window averages three of
/// `noisy_shards`' 10 s levels, and is above the lowest of them.
fn sustained_peak(rate: impl Fn(f64) -> f64, (hold, window): (f64, f64), until: f64) -> f64 {
    let windows = (hold / window).ceil().max(1.0) as u32;
    let per_window = (window / SUSTAIN_STEP_SECS).ceil().max(1.0) as u32;
    let mean = |from: f64| {
        (0..per_window)
            .map(|k| rate(from + f64::from(k) * SUSTAIN_STEP_SECS))
            .sum::<f64>()
            / f64::from(per_window)
    };
    let starts = (until / SUSTAIN_STEP_SECS).floor().max(0.0) as u32;
    (0..=starts)
        .map(|s| {
            let t = f64::from(s) * SUSTAIN_STEP_SECS;
            (0..windows)
                .map(|k| mean(t + f64::from(k) * window))
                .fold(f64::INFINITY, f64::min)
        })
        .fold(0.0, f64::max)
}

/// Sampling step of [`sustained_peak`], seconds.
const SUSTAIN_STEP_SECS: f64 = 5.0;
