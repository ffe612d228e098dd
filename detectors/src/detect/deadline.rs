//! `DeadlinePileUp`: timeouts rise while successful latency crowds against the callers'
//! deadline (labels `group`, and `shard` when one shard returns most of the timeouts).
//!
//! The deadline is the configured one or the median latency of the window's timeouts. A busy
//! window piles up when its timeouts rise over their baseline and its successes crowd against
//! the deadline; a quiet group's timeouts among its requests are weighed across windows
//! ([`RatioEvidence`]) and judged with the same crowding. Its firing paths, as the `proven_by`
//! annotation names them: `consecutive_windows` and `step_shape` (the busy windows' streak, by
//! count or by the shape of its excess timeouts, allowing a pile-up [`DRAIN_WINDOWS`] to drain)
//! and `cusum` (the evidence across windows).
//!
//! docs/detectors.md ("DeadlinePileUp") gives the method, the defaults and the annotations.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, GroupMemory, Problems, RuleSettings,
    Visit, factor, ms, num, pct, times,
};
use crate::evidence::baseline::{Ewma, Ratio, alpha_for};
use crate::evidence::cusum::Binomial;
use crate::evidence::ratio::{Hypotheses, RatioEvidence, RatioSettings, RatioTests};
use crate::evidence::shape::{DRAIN_WINDOWS, Persistence, StreakShape};
use crate::observation::{Outcome, label_value, quote};
use crate::snapshot::GroupSnapshot;

/// Longest deadline accepted in `deadlines_ms`: one hour, the latency histograms' ceiling.
const MAX_DEADLINE_MS: f64 = 3_600_000.0;

/// Fewest successes a shard needs in a window for its own p99 to stand for its crowding: with
/// 100 a p99 is at most the second-slowest success, not one stray request.
const MIN_SHARD_OK_SAMPLES: u64 = 100;

/// Fewest successes a window needs to teach the baseline of the successful p99: below 10 a
/// p99 is the maximum, not a percentile.
const MIN_OK_SAMPLES: u64 = 10;

/// `detectors.deadline_pile_up` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadlinePileUpConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Callers' deadline per group, milliseconds. Groups not listed have theirs inferred.
    pub deadlines_ms: BTreeMap<String, f64>,
    /// Fewest requests a group needs in a window to be judged (and to teach its baselines).
    pub min_requests: u64,
    /// Fewest timeouts in a window: the count floor.
    pub min_timeouts: u64,
    /// The timeout ratio must reach at least this...
    pub min_timeout_ratio: f64,
    /// ...and this multiple of its baseline.
    pub ratio_over_baseline: f64,
    /// Fewest timeouts with a latency to infer a deadline from.
    pub min_timeout_samples: u64,
    /// Successful p99 must reach this fraction of the deadline...
    pub crowd_fraction: f64,
    /// ...and this multiple of its own baseline.
    pub latency_over_baseline: f64,
    /// Windows in a row that are always enough.
    pub consecutive_windows: u32,
    /// Longest pile-up that clears by itself to tolerate, seconds (the shape rule).
    pub tolerated_burst_secs: f64,
    /// Share of the group's timeouts one shard must return to be named in a `shard` label.
    pub shard_timeout_share: f64,
    /// Time constant of the baseline EWMAs, in seconds.
    pub baseline_tau_secs: f64,
    /// Windows with volume a baseline needs before the detector judges the group.
    pub warmup_windows: u32,
    /// False alarms per group-hour the evidence test of timeouts among requests allows while
    /// the timeout ratio stays at its baseline: sets the CUSUM threshold of the path that
    /// judges groups under the count floors (`consecutive_windows` is its fewest windows).
    pub false_alarms_per_group_hour: f64,
}

impl Default for DeadlinePileUpConfig {
    fn default() -> Self {
        DeadlinePileUpConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
            deadlines_ms: BTreeMap::new(),
            min_requests: 200,
            min_timeouts: 20,
            min_timeout_ratio: 0.01,
            ratio_over_baseline: 3.0,
            min_timeout_samples: 20,
            crowd_fraction: 0.8,
            latency_over_baseline: 1.5,
            consecutive_windows: 4,
            tolerated_burst_secs: 20.0,
            shard_timeout_share: 0.6,
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
            false_alarms_per_group_hour: 1e-4,
        }
    }
}

impl DetectorSettings for DeadlinePileUpConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    /// Checks every field.
    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        for (group, d) in &self.deadlines_ms {
            if group.is_empty() {
                p.fail("deadlines_ms", "a group name is empty: name the group");
            }
            if !(d.is_finite() && *d > 0.0 && *d <= MAX_DEADLINE_MS) {
                p.fail(
                    &format!("deadlines_ms.{group}"),
                    format!(
                        "{d} is out of range: use the callers' deadline in milliseconds, over 0 \
                         and at most {MAX_DEADLINE_MS}"
                    ),
                );
            }
        }
        if self.min_requests == 0 {
            p.fail(
                "min_requests",
                "must be at least 1: a ratio of no requests means nothing",
            );
        }
        if self.min_timeouts == 0 {
            p.fail(
                "min_timeouts",
                "must be at least 1: without a count floor one timeout in a quiet window reads \
                 as a surge",
            );
        }
        p.range("min_timeout_ratio", self.min_timeout_ratio, 0.0, 1.0);
        p.range("ratio_over_baseline", self.ratio_over_baseline, 1.0, 1000.0);
        if self.min_timeout_samples == 0 {
            p.fail(
                "min_timeout_samples",
                "must be at least 1: a deadline cannot be inferred from no timeout",
            );
        }
        p.range("crowd_fraction", self.crowd_fraction, 0.0, 1.0);
        p.range(
            "latency_over_baseline",
            self.latency_over_baseline,
            1.0,
            1000.0,
        );
        p.windows("consecutive_windows", self.consecutive_windows);
        p.range(
            "tolerated_burst_secs",
            self.tolerated_burst_secs,
            0.0,
            3600.0,
        );
        p.range("shard_timeout_share", self.shard_timeout_share, 0.0, 1.0);
        p.time_constant("baseline_tau_secs", self.baseline_tau_secs);
        p.windows("warmup_windows", self.warmup_windows);
        p.false_alarm_rate(
            "false_alarms_per_group_hour",
            self.false_alarms_per_group_hour,
        );
    }
}

/// Baselines, streak and evidence of one group.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupState {
    /// Timeout ratio.
    ratio: Ewma,
    /// p99 of successful responses, ms.
    ok_p99: Ewma,
    streak: u32,
    /// Excess timeouts (over the baseline ratio's share) of the streak's windows.
    shape: StreakShape,
    /// The shard named in the active alert's labels, if one was.
    shard: Option<String>,
    /// Requests in flight summed over the shards that report them, in windows with readings.
    #[serde(default)]
    inflight: Ewma,
    /// Timeouts among requests as evidence across windows (the path without floors), on a
    /// baseline learned from every window with requests.
    #[serde(default)]
    timeouts: RatioEvidence,
    /// The last inferred deadline, ms, and the timeouts pooled across quiet windows until
    /// they are enough to infer one.
    #[serde(default)]
    deadline: DeadlineMemory,
}

/// A deadline inferred from timeouts, remembered for the windows with too few of their own:
/// a quiet group's callers have the same deadline as a busy one's.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct DeadlineMemory {
    /// The latest inference, ms.
    ms: Option<f64>,
    /// Timeouts with a latency pooled over windows with fewer than `min_timeout_samples`,
    /// and the sum of their windows' medians weighted by count.
    pooled: u64,
    weighted_ms: f64,
}

impl DeadlineMemory {
    /// Folds in a window's timeouts (`count` of median `p50_ms`), inferring a deadline once
    /// `min` have been seen in one window or pooled over several.
    fn learn(&mut self, count: u64, p50_ms: f64, min: u64) {
        if count >= min {
            *self = DeadlineMemory {
                ms: Some(p50_ms),
                ..DeadlineMemory::default()
            };
        } else if count > 0 {
            self.pooled += count;
            self.weighted_ms += count as f64 * p50_ms;
            if self.pooled >= min {
                *self = DeadlineMemory {
                    ms: Some(self.weighted_ms / self.pooled as f64),
                    ..DeadlineMemory::default()
                };
            }
        }
    }
}

impl GroupMemory for GroupState {}

/// Where a deadline came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeadlineSource {
    /// `deadlines_ms` in the configuration.
    Configured,
    /// The median latency of the window's timeouts.
    Inferred,
}

impl DeadlineSource {
    fn as_str(self) -> &'static str {
        match self {
            DeadlineSource::Configured => "configured",
            DeadlineSource::Inferred => "inferred",
        }
    }
}

/// The shard that returned the most timeouts.
#[derive(Debug, Clone, PartialEq)]
struct TimeoutShard {
    shard: String,
    /// Its share of the group's timeouts.
    timeout_share: f64,
    /// Its own timeout ratio.
    timeout_ratio: f64,
    /// The p99 of its successes, ms, when it had at least [`MIN_SHARD_OK_SAMPLES`].
    ok_p99_ms: Option<f64>,
    /// Its in-flight reading, when it reported one.
    inflight: Option<f64>,
}

/// Requests in flight, where shards report them: the evidence that work piles up.
#[derive(Debug, Clone, Copy, PartialEq)]
struct InFlight {
    /// Summed over the shards with a reading in this window.
    now: f64,
    /// Its baseline, once warm.
    baseline: Option<f64>,
}

/// Everything a `DeadlinePileUp` finding reports, as numbers; [`render`] turns it into text.
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    requests: u64,
    timeouts: u64,
    timeout_ratio: f64,
    baseline_ratio: f64,
    deadline_ms: f64,
    source: DeadlineSource,
    /// The group's successful p50 and p99, and the p99's baseline.
    ok_p50_ms: f64,
    ok_p99_ms: f64,
    baseline_ok_p99_ms: f64,
    /// The p99 judged against the deadline: the group's, or the top shard's when it carries
    /// the timeouts and crowds more.
    crowd_p99_ms: f64,
    top_shard: Option<TimeoutShard>,
    /// `None` when no shard of the group reports in-flight requests.
    inflight: Option<InFlight>,
    /// Windows in a row the condition has held (or the evidence has been building).
    windows: u32,
    /// The evidence of timeouts among requests, as a fraction of its threshold.
    evidence: f64,
    /// The firing path that proved the pile-up.
    proven_by: &'static str,
}

/// One window's measurements of a group, before any verdict.
#[derive(Debug, Clone)]
struct Reading {
    timeouts: u64,
    ratio: f64,
    ok_p50: f64,
    ok_p99: f64,
    /// See [`Figures::crowd_p99_ms`].
    crowd_p99: f64,
    top: Option<TimeoutShard>,
    deadline: Option<(f64, DeadlineSource)>,
    /// In-flight requests summed over the shards that report them.
    inflight: Option<f64>,
}

/// The `DeadlinePileUp` detector.
#[derive(Debug, Clone)]
pub struct DeadlinePileUp {
    cfg: DeadlinePileUpConfig,
    alpha: f64,
    persistence: Persistence,
    /// The evidence test of the path without floors.
    tests: RatioTests,
    groups: BTreeMap<String, GroupState>,
}

impl DeadlinePileUp {
    /// What the window shows of `g`: its timeouts, successful latency and deadline (inferred
    /// from this window's timeouts, or else `remembered` from earlier ones).
    fn read(&self, g: &GroupSnapshot, remembered: Option<f64>) -> Option<Reading> {
        let ok = g.traffic.ok_latency?;
        let timeouts = g.traffic.outcome(Outcome::Timeout);
        let deadline = match self.cfg.deadlines_ms.get(&g.group) {
            Some(&d) => Some((d, DeadlineSource::Configured)),
            None => g
                .timeout_latency
                .filter(|t| t.count >= self.cfg.min_timeout_samples)
                .map(|t| t.p50_ms)
                .or(remembered)
                .map(|d| (d, DeadlineSource::Inferred)),
        };
        let top = top_timeout_shard(g, timeouts);
        // A shard that returns the timeouts is where the successes crowd: in a large group its
        // slow successes are too few to move the group's p99.
        let crowd_p99 = top
            .as_ref()
            .filter(|s| s.timeout_share >= self.cfg.shard_timeout_share)
            .and_then(|s| s.ok_p99_ms)
            .map_or(ok.p99_ms, |p| p.max(ok.p99_ms));
        Some(Reading {
            timeouts,
            ratio: timeouts as f64 / g.requests.max(1) as f64,
            ok_p50: ok.p50_ms,
            ok_p99: ok.p99_ms,
            crowd_p99,
            top,
            deadline,
            inflight: g
                .tracked_shards()
                .filter_map(|s| s.inflight)
                .fold(None, |sum, n| Some(sum.unwrap_or(0.0) + n)),
        })
    }

    /// True when reading `r` piles up against baselines `(ratio, ok p99)`.
    fn piles_up(&self, r: &Reading, (ratio, p99): (f64, f64)) -> bool {
        let c = &self.cfg;
        r.timeouts >= c.min_timeouts
            && r.ratio >= c.min_timeout_ratio
            && r.ratio >= c.ratio_over_baseline * ratio
            && self.crowds(r, p99)
    }

    /// True when the successes of reading `r` crowd against its deadline and rose over their
    /// baseline p99.
    fn crowds(&self, r: &Reading, p99: f64) -> bool {
        let c = &self.cfg;
        r.deadline.is_some_and(|(deadline, _)| {
            r.crowd_p99 >= c.crowd_fraction * deadline
                && r.crowd_p99 >= c.latency_over_baseline * p99
        })
    }

    /// What a finding of group `g` reports: reading `r` against the baselines of `st`, the
    /// deadline and its source, the successful p99's baseline and the firing path.
    fn figures(
        &self,
        g: &GroupSnapshot,
        st: &GroupState,
        r: Reading,
        (deadline_ms, source): (f64, DeadlineSource),
        (baseline_ok, proven_by): (f64, &'static str),
    ) -> Figures {
        let warm = self.cfg.warmup_windows;
        // Before the window rule's baseline is warm, the count baseline's ratio.
        let baseline_ratio = st.ratio.value(warm).unwrap_or_else(|| {
            let b = st.timeouts.baseline();
            let n = b.trials.raw().unwrap_or(0.0);
            b.events.raw().unwrap_or(0.0) / n.max(f64::MIN_POSITIVE)
        });
        Figures {
            requests: g.requests,
            timeouts: r.timeouts,
            timeout_ratio: r.ratio,
            baseline_ratio,
            deadline_ms,
            source,
            ok_p50_ms: r.ok_p50,
            ok_p99_ms: r.ok_p99,
            baseline_ok_p99_ms: baseline_ok,
            crowd_p99_ms: r.crowd_p99,
            top_shard: r.top,
            inflight: r.inflight.map(|now| InFlight {
                now,
                baseline: st.inflight.value(warm),
            }),
            windows: st.streak.max(st.timeouts.excursion().windows),
            evidence: st.timeouts.fraction(&self.tests),
            proven_by,
        }
    }

    /// Adds the window's timeouts among its requests to the evidence, once the count
    /// baselines are warm: the binomial LLR of the ratio the fast path asks for,
    /// `q1 = max(min_timeout_ratio, ratio_over_baseline × baseline)` (the baseline at its
    /// upper bound), against half of it. A ratio at the baseline drains the evidence; one at
    /// `q1` builds it up at any volume.
    fn weigh(&self, st: &mut GroupState, window: Ratio<u64>) {
        st.timeouts.weigh(&self.tests, window, |seen| {
            let base = seen.upper();
            let q1 = (self.cfg.ratio_over_baseline * base).max(self.cfg.min_timeout_ratio);
            Some(Hypotheses {
                reference: base,
                rise: Binomial::new(q1 / 2.0, q1),
                severe: None,
            })
        });
    }
}

/// The shard that returned the most timeouts of `g` (`timeouts` in all); ties go to the
/// first name.
fn top_timeout_shard(g: &GroupSnapshot, timeouts: u64) -> Option<TimeoutShard> {
    g.tracked_shards()
        .filter(|s| s.traffic.outcome(Outcome::Timeout) > 0)
        .rev()
        .max_by_key(|s| s.traffic.outcome(Outcome::Timeout))
        .map(|s| {
            let t = s.traffic.outcome(Outcome::Timeout) as f64;
            TimeoutShard {
                shard: s.shard.clone(),
                timeout_share: t / timeouts.max(1) as f64,
                timeout_ratio: t / s.requests.max(1) as f64,
                ok_p99_ms: s
                    .traffic
                    .ok_latency
                    .filter(|l| l.count >= MIN_SHARD_OK_SAMPLES)
                    .map(|l| l.p99_ms),
                inflight: s.inflight,
            }
        })
}

/// The mitigations, most direct first.
const MITIGATIONS: &str = "shorten deadlines (and retry budgets) so callers stop waiting on \
    work that will time out; propagate cancellation so the backend drops requests whose caller \
    has given up; shed load (admission control, concurrency limits) until latency is back \
    under the deadline";

/// The finding for `group` (and `shard`, when one carries the timeouts).
fn render(cfg: &DeadlinePileUpConfig, group: &str, shard: Option<&str>, fig: &Figures) -> Finding {
    let mut labels = vec![("group", group)];
    if let Some(s) = shard {
        labels.push(("shard", s));
    }
    let mut f = Finding::new(DeadlinePileUp::ALERTNAME, cfg.rule.severity, &labels)
        .annotate("timeout_ratio", pct(fig.timeout_ratio))
        .annotate("baseline_timeout_ratio", pct(fig.baseline_ratio))
        .annotate("timeouts", fig.timeouts.to_string())
        .annotate("requests", fig.requests.to_string())
        .annotate("deadline_ms", num(fig.deadline_ms))
        .annotate("deadline_source", fig.source.as_str())
        .annotate("ok_p50_ms", num(fig.ok_p50_ms))
        .annotate("ok_p99_ms", num(fig.ok_p99_ms))
        .annotate("baseline_ok_p99_ms", num(fig.baseline_ok_p99_ms))
        .annotate("crowd_p99_ms", num(fig.crowd_p99_ms))
        .annotate(
            "ok_p99_of_deadline",
            pct(fig.crowd_p99_ms / fig.deadline_ms),
        )
        .annotate("windows", fig.windows.to_string())
        .annotate("evidence", format!("{:.2}", fig.evidence))
        .annotate("proven_by", fig.proven_by)
        .annotate("mitigations", MITIGATIONS);
    if let Some(s) = &fig.top_shard {
        f = f
            .annotate("top_timeout_shard", label_value(&s.shard))
            .annotate("top_timeout_shard_timeout_share", pct(s.timeout_share))
            .annotate("top_timeout_shard_timeout_ratio", pct(s.timeout_ratio));
        if let Some(p) = s.ok_p99_ms {
            f = f.annotate("top_timeout_shard_ok_p99_ms", num(p));
        }
        if let Some(n) = s.inflight {
            f = f.annotate("top_timeout_shard_inflight", num(n));
        }
    }
    if let Some(i) = &fig.inflight {
        f = f.annotate("inflight", num(i.now));
        if let Some(b) = i.baseline {
            f = f
                .annotate("baseline_inflight", num(b))
                .annotate("inflight_growth", times(factor(i.now, b)));
        }
    }
    // Measured growth of the work in flight is the pile-up seen directly; say so first.
    let grown = fig
        .inflight
        .and_then(|i| factor(i.now, i.baseline?))
        .map_or(String::new(), |x| {
            format!(", {} the usual requests in flight", times(Some(x)))
        });
    let summary = format!(
        "{}: timeouts at {} ({} baseline) while successful p99 is {} of the {} deadline{grown}: \
         work is piling up",
        quote(group),
        pct(fig.timeout_ratio),
        times(factor(fig.timeout_ratio, fig.baseline_ratio)),
        pct(fig.crowd_p99_ms / fig.deadline_ms),
        fig.source.as_str(),
    );
    f.annotate("summary", summary)
        .annotate("description", description(group, fig))
}

fn description(group: &str, fig: &Figures) -> String {
    let deadline = match fig.source {
        DeadlineSource::Configured => format!("{} (configured)", ms(Some(fig.deadline_ms))),
        DeadlineSource::Inferred => format!(
            "{} (inferred: the median latency of this window's timeouts)",
            ms(Some(fig.deadline_ms))
        ),
    };
    let where_ = fig.top_shard.as_ref().map_or(String::new(), |s| {
        let p99 = s.ok_p99_ms.map_or(String::new(), |p| {
            format!("; its successes' p99 is {}", ms(Some(p)))
        });
        format!(
            " Shard {} returned {} of the timeouts ({} of its requests timed out{p99}).",
            quote(&s.shard),
            pct(s.timeout_share),
            pct(s.timeout_ratio)
        )
    });
    let work = match &fig.inflight {
        None => " No shard reports its requests in flight, so the pile-up is inferred from \
                  timeouts and latency."
            .to_owned(),
        Some(InFlight {
            now,
            baseline: Some(b),
        }) => format!(
            " Requests in flight: {} against a baseline of {} ({}).",
            num(*now),
            num(*b),
            times(factor(*now, *b))
        ),
        Some(InFlight {
            now,
            baseline: None,
        }) => format!(" Requests in flight: {} (no baseline yet).", num(*now)),
    };
    format!(
        "{} of {} requests to {} timed out ({}, baseline {}), {} windows in a row. The deadline \
         is {deadline}; successful requests answer at p50 {} and p99 {} (baseline p99 {}), and \
         the slowest successes reach {} of the deadline: the requests that succeed crowd against \
         it, and those that do not keep the backend busy after their callers gave up.{where_}\
         {work} Mitigations: {MITIGATIONS}.",
        fig.timeouts,
        fig.requests,
        quote(group),
        pct(fig.timeout_ratio),
        pct(fig.baseline_ratio),
        fig.windows,
        ms(Some(fig.ok_p50_ms)),
        ms(Some(fig.ok_p99_ms)),
        ms(Some(fig.baseline_ok_p99_ms)),
        pct(fig.crowd_p99_ms / fig.deadline_ms),
    )
}

impl DetectorKind for DeadlinePileUp {
    const ALERTNAME: &'static str = "DeadlinePileUp";
    const KEY: &'static str = "deadline_pile_up";
    type Config = DeadlinePileUpConfig;

    fn new(cfg: DeadlinePileUpConfig, window_secs: f64) -> Self {
        DeadlinePileUp {
            alpha: alpha_for(window_secs, cfg.baseline_tau_secs),
            // The count of windows tolerates the burst itself (six at 5 s windows); the shape,
            // which weighs the streak's timeouts, allows them half a window to drain.
            persistence: Persistence {
                tolerated_burst_secs: cfg.tolerated_burst_secs + DRAIN_WINDOWS * window_secs,
                ..Persistence::new(
                    cfg.consecutive_windows,
                    cfg.tolerated_burst_secs,
                    window_secs,
                )
            },
            tests: RatioTests::new(RatioSettings {
                false_alarms_per_hour: cfg.false_alarms_per_group_hour,
                tests: 1,
                window_secs,
                consecutive_windows: cfg.consecutive_windows,
                tolerated_burst_secs: cfg.tolerated_burst_secs,
                margin_windows: 0,
                warmup_windows: cfg.warmup_windows,
                baseline_tau_secs: cfg.baseline_tau_secs,
            }),
            cfg,
            groups: BTreeMap::new(),
        }
    }
}

impl GroupDetector for DeadlinePileUp {
    type State = GroupState;

    fn states(&self) -> &BTreeMap<String, Self::State> {
        &self.groups
    }

    fn states_mut(&mut self) -> &mut BTreeMap<String, Self::State> {
        &mut self.groups
    }

    fn visit(&self, g: &GroupSnapshot) -> Visit {
        Visit::when(g.is_tracked())
    }

    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        st: &mut Self::State,
        out: &mut Vec<Finding>,
    ) {
        let active = ctx.alerts.group_has_active(Self::ALERTNAME, &g.group);
        if !active {
            st.shard = None;
        }
        if let Some(t) = g.timeout_latency {
            st.deadline
                .learn(t.count, t.p50_ms, self.cfg.min_timeout_samples);
        }
        let reading = (g.requests > 0)
            .then(|| self.read(g, st.deadline.ms))
            .flatten();
        let Some(r) = reading else {
            // Nothing to judge: the streak ends, nothing is learned.
            st.streak = 0;
            st.shape = StreakShape::default();
            return;
        };
        let warm = self.cfg.warmup_windows;
        // The fast path: a busy window over the count floors, judged as one.
        let busy = g.requests >= self.cfg.min_requests;
        let base = st.ratio.value(warm).zip(st.ok_p99.value(warm));
        let over = busy && base.is_some_and(|b| self.piles_up(&r, b));
        if busy {
            st.streak = if over { st.streak + 1 } else { 0 };
            let expected = base.map_or(0.0, |b| b.0) * g.requests as f64;
            st.shape.push(over, r.timeouts as f64 - expected);
        } else {
            st.streak = 0;
            st.shape = StreakShape::default();
        }
        // The path without floors: timeouts among requests accumulate across windows, and
        // the condition holds while the evidence is at its threshold and the successes crowd.
        let window = Ratio::of(r.timeouts, g.requests);
        self.weigh(st, window);
        let ok_base = st.ok_p99.value(warm);
        let proof = st.timeouts.proven(&self.tests, false);
        let proven = proof.is_some();
        let slow = proven && ok_base.is_some_and(|p| self.crowds(&r, p));
        if !(over || active) {
            let ok_samples = g.traffic.ok_latency.map_or(0, |l| l.count);
            if busy || (ok_samples >= MIN_OK_SAMPLES && !proven) {
                st.ok_p99.update(r.ok_p99, self.alpha);
            }
            if busy {
                st.ratio.update(r.ratio, self.alpha);
                if let Some(n) = r.inflight {
                    st.inflight.update(n, self.alpha);
                }
            }
        }
        // A pile-up, holding or proven, and an active alert teach the count baselines nothing.
        st.timeouts
            .learn(&self.tests, window, over || active || proven);
        let Some((deadline_ms, source)) = r.deadline else {
            return;
        };
        let fast = over
            .then(|| self.persistence.lasted(st.streak, &st.shape))
            .flatten()
            .map(|l| l.name());
        let path = fast.or(proof.filter(|_| slow).map(|p| p.name()));
        let (Some(baseline_ok), Some(proven_by)) = (ok_base, path) else {
            return;
        };
        let fig = self.figures(g, st, r, (deadline_ms, source), (baseline_ok, proven_by));
        if !active {
            st.shard = fig
                .top_shard
                .as_ref()
                .filter(|s| s.timeout_share >= self.cfg.shard_timeout_share)
                .map(|s| s.shard.clone());
        }
        out.push(render(&self.cfg, &g.group, st.shard.as_deref(), &fig));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertBook;
    use crate::detect::Detector;
    use crate::detect::DetectorsConfig;
    use crate::observation::{ObservationRef, ReadingKind, ReadingRef};
    use crate::snapshot::WindowSnapshot;
    use crate::window::{WindowConfig, Windows};

    /// One shard in one window: `ok` successes spread evenly over `0..=ok_max_ms`, and
    /// `timeouts` timeouts at `timeout_ms`.
    #[derive(Debug, Clone, Copy)]
    struct S {
        ok: u64,
        ok_max_ms: f64,
        timeouts: u64,
        timeout_ms: f64,
        /// The shard's in-flight reading, reported on its own (`count` 0).
        inflight: Option<f64>,
    }

    /// A healthy shard: 200 successes up to 100 ms, one timeout at the 250 ms deadline.
    fn healthy() -> S {
        S {
            ok: 200,
            ok_max_ms: 100.0,
            timeouts: 1,
            timeout_ms: 250.0,
            inflight: None,
        }
    }

    /// A shard piling up: successes up to 245 ms, `timeouts` at 250 ms.
    fn piling(timeouts: u64) -> S {
        S {
            ok: 200,
            ok_max_ms: 245.0,
            timeouts,
            timeout_ms: 250.0,
            inflight: None,
        }
    }

    fn window(w: &mut Windows, end: f64, shards: &[S]) -> WindowSnapshot {
        for (i, s) in shards.iter().enumerate() {
            let name = format!("s{i}");
            // Ten latency steps, so the p50 and p99 of the successes are meaningful.
            for step in 1..=10u64 {
                let mut o = ObservationRef::new("g", &name);
                o.count = s.ok / 10;
                o.latency_ms = Some(s.ok_max_ms * step as f64 / 10.0);
                if o.count > 0 {
                    w.record(&o);
                }
            }
            if s.timeouts > 0 {
                let mut o = ObservationRef::new("g", &name);
                o.count = s.timeouts;
                o.outcome = Outcome::Timeout;
                o.latency_ms = Some(s.timeout_ms);
                w.record(&o);
            }
            if let Some(n) = s.inflight {
                w.read(&ReadingRef {
                    ts: None,
                    group: "g",
                    shard: &name,
                    kind: ReadingKind::Inflight,
                    value: n,
                });
            }
        }
        w.close(end)
    }

    /// Runs the detector and an alert book; returns the (1-based) windows with a finding and
    /// the last finding.
    fn run(cfg: DeadlinePileUpConfig, windows: &[Vec<S>]) -> (Vec<usize>, Option<Finding>) {
        let mut d = DeadlinePileUp::new(cfg.clone(), 10.0);
        let config = DetectorsConfig {
            deadline_pile_up: cfg,
            ..DetectorsConfig::default()
        };
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let snaps = windows
            .iter()
            .enumerate()
            .map(|(i, shards)| window(&mut w, (i + 1) as f64 * 10.0, shards));
        crate::detect::testkit::firings(&mut d, &config, snaps)
    }

    /// Four healthy shards for 40 windows, then `during(window)` for windows 41..=`to`, then
    /// healthy again until window 60.
    fn incident(to: usize, during: impl Fn(usize) -> Vec<S>) -> Vec<Vec<S>> {
        (1..=60)
            .map(|i| {
                if (41..=to).contains(&i) {
                    during(i)
                } else {
                    vec![healthy(); 4]
                }
            })
            .collect()
    }

    fn everywhere(i: usize) -> Vec<S> {
        let _ = i;
        vec![piling(30); 4]
    }

    #[test]
    fn a_group_wide_pile_up_fires_on_its_third_window_with_an_inferred_deadline() {
        let (hits, last) = run(DeadlinePileUpConfig::default(), &incident(50, everywhere));
        // The shape rule: a step on a window boundary has outlasted a 20 s burst at its third.
        assert_eq!(hits, (43..=50).collect::<Vec<_>>());
        let f = last.unwrap();
        assert_eq!(f.labels["group"], "g");
        assert!(!f.labels.contains_key("shard"), "{f:?}");
        let a = &f.annotations;
        // The timeouts' median, 250 ms, read back as the top of its HDR bucket (1% error at
        // 2 significant figures).
        assert_eq!(a["deadline_ms"], "251");
        assert_eq!(a["deadline_source"], "inferred");
        // 120 timeouts of 920 requests, against 4 of 804.
        assert_eq!(a["timeout_ratio"], "13.0%");
        assert_eq!(a["baseline_timeout_ratio"], "0.5%");
        assert_eq!(a["timeouts"], "120");
        assert_eq!(a["windows"], "10");
        assert!(a["mitigations"].contains("shorten deadlines"), "{a:?}");
        assert!(a["mitigations"].contains("propagate cancellation"), "{a:?}");
        assert!(a["mitigations"].contains("shed load"), "{a:?}");
        assert!(a["summary"].contains("inferred deadline"), "{a:?}");
        let crowd: f64 = a["ok_p99_of_deadline"]
            .trim_end_matches('%')
            .parse()
            .unwrap();
        assert!((96.0..100.0).contains(&crowd), "{a:?}");
    }

    #[test]
    fn reported_in_flight_growth_is_in_the_verdict() {
        let with = |s: S, n: f64| S {
            inflight: Some(n),
            ..s
        };
        let ws: Vec<Vec<S>> = (1..=45)
            .map(|i| {
                if i > 40 {
                    vec![with(piling(30), 10.0); 4]
                } else {
                    vec![with(healthy(), 2.0); 4]
                }
            })
            .collect();
        let (hits, last) = run(DeadlinePileUpConfig::default(), &ws);
        assert_eq!(hits.first(), Some(&43), "{hits:?}");
        let a = last.unwrap().annotations;
        assert_eq!(a["inflight"], "40.0");
        assert_eq!(a["baseline_inflight"], "8.00");
        assert_eq!(a["inflight_growth"], "5.00x");
        assert!(
            a["summary"].contains("5.00x the usual requests in flight"),
            "{a:?}"
        );
        assert!(
            a["description"].contains("Requests in flight: 40.0"),
            "{a:?}"
        );
        // Without readings the description says the pile-up is inferred.
        let (_, last) = run(DeadlinePileUpConfig::default(), &incident(45, everywhere));
        let a = last.unwrap().annotations;
        assert!(!a.contains_key("inflight"), "{a:?}");
        assert!(
            a["description"].contains("inferred from timeouts and latency"),
            "{a:?}"
        );
    }

    #[test]
    fn one_shard_carrying_the_timeouts_is_named_and_a_configured_deadline_wins() {
        let mut cfg = DeadlinePileUpConfig::default();
        cfg.deadlines_ms.insert("g".to_owned(), 300.0);
        let one = |_| vec![healthy(), healthy(), piling(90), healthy()];
        let (hits, last) = run(cfg, &incident(50, one));
        assert_eq!(hits.first(), Some(&43), "{hits:?}");
        let f = last.unwrap();
        assert_eq!(f.labels["shard"], "s2");
        assert_eq!(f.annotations["deadline_ms"], "300");
        assert_eq!(f.annotations["deadline_source"], "configured");
        assert_eq!(f.annotations["top_timeout_shard"], "s2");
        assert!(f.annotations["description"].contains("(configured)"));
    }

    #[test]
    fn one_slow_shard_among_many_crowds_its_own_p99_where_the_group_p99_cannot_see_it() {
        // 41 shards: s7's slow successes are 2.4% of the group's, under its p99's reach.
        let ws: Vec<Vec<S>> = (1..=50)
            .map(|i| {
                let mut v = vec![healthy(); 41];
                if i > 40 {
                    v[7] = piling(150);
                }
                v
            })
            .collect();
        let (hits, last) = run(DeadlinePileUpConfig::default(), &ws);
        assert_eq!(hits.first(), Some(&43), "{hits:?}");
        let a = last.unwrap().annotations;
        let group_p99: f64 = a["ok_p99_ms"].parse().unwrap();
        assert!(group_p99 < 0.8 * 250.0, "{a:?}");
        assert_eq!(a["top_timeout_shard"], "s7");
        let shard_p99: f64 = a["top_timeout_shard_ok_p99_ms"].parse().unwrap();
        assert_eq!(a["crowd_p99_ms"], a["top_timeout_shard_ok_p99_ms"]);
        assert!(shard_p99 >= 0.8 * 250.0, "{a:?}");
    }

    #[test]
    fn the_shard_label_stays_while_the_alert_is_active() {
        // The incident starts on s2 and spreads to every shard: still the one alert.
        let spreads = |i| {
            if i < 45 {
                vec![healthy(), healthy(), piling(90), healthy()]
            } else {
                vec![piling(90); 4]
            }
        };
        let (hits, last) = run(DeadlinePileUpConfig::default(), &incident(50, spreads));
        assert_eq!(hits, (43..=50).collect::<Vec<_>>());
        assert_eq!(last.unwrap().labels["shard"], "s2");
    }

    #[test]
    fn timeouts_while_successes_stay_fast_are_not_a_pile_up() {
        // Dropped connections: many timeouts at the deadline, successes still under 100 ms.
        let hangs = |_| {
            vec![
                S {
                    timeouts: 60,
                    ..healthy()
                };
                4
            ]
        };
        let (hits, _) = run(DeadlinePileUpConfig::default(), &incident(50, hangs));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn latency_near_a_deadline_without_more_timeouts_is_not_a_pile_up() {
        let slow = |_| vec![piling(1); 4];
        let (hits, _) = run(DeadlinePileUpConfig::default(), &incident(50, slow));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_two_window_pile_up_that_clears_is_absorbed() {
        let (hits, _) = run(DeadlinePileUpConfig::default(), &incident(42, everywhere));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_steady_timeout_ratio_near_the_deadline_is_the_baseline() {
        // Born piling up: the baselines learn it, nothing fires.
        let ws: Vec<Vec<S>> = (1..=60).map(|_| vec![piling(30); 4]).collect();
        let (hits, _) = run(DeadlinePileUpConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_quiet_group_under_the_count_floors_is_judged_later_not_never() {
        // 44 requests per shard and window, 176 for the group (under `min_requests`), 16
        // timeouts (under `min_timeouts` and `min_timeout_samples`): the fast path cannot
        // judge it, the evidence of timeouts among requests can. The deadline is pooled from
        // two windows' timeouts; the evidence takes at least five windows (`burst_proof_windows`).
        let quiet = |s: S| S { ok: 40, ..s };
        let ws = |timeouts| -> Vec<Vec<S>> {
            (1..=60)
                .map(|i| {
                    if i > 40 {
                        vec![quiet(piling(timeouts)); 4]
                    } else {
                        vec![quiet(healthy()); 4]
                    }
                })
                .collect()
        };
        let (hits, last) = run(DeadlinePileUpConfig::default(), &ws(4));
        assert_eq!(hits.first(), Some(&45), "{hits:?}");
        let a = last.unwrap().annotations;
        assert_eq!(a["deadline_source"], "inferred");
        assert_eq!(a["evidence"], "1.00");
        assert_eq!(a["timeouts"], "16");
        // Timeouts at their usual ratio while the successes crowd: the evidence drains.
        let (hits, _) = run(DeadlinePileUpConfig::default(), &ws(1));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_steady_quiet_group_stays_silent_for_hours() {
        // Four simulated hours of 10 requests per second with 1% of them timing out at random
        // (binomial draws), successes crowding as in a pile-up: no evidence, no alert.
        let mut rng = crate::prng::SplitMix64::new(5);
        let ws: Vec<Vec<S>> = (1..=1440)
            .map(|_| {
                let t = (0..100).filter(|_| rng.next_f64() < 0.01).count() as u64;
                vec![S {
                    ok: 100 - t,
                    timeouts: t,
                    ..piling(0)
                }]
            })
            .collect();
        let (hits, _) = run(DeadlinePileUpConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn nothing_is_judged_during_warm_up() {
        let (hits, _) = run(
            DeadlinePileUpConfig::default(),
            &(1..=29).map(|_| vec![piling(90); 4]).collect::<Vec<_>>(),
        );
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn baselines_freeze_while_the_alert_is_active() {
        let long: Vec<Vec<S>> = (1..=400)
            .map(|i| {
                if i > 40 {
                    vec![piling(30); 4]
                } else {
                    vec![healthy(); 4]
                }
            })
            .collect();
        let (hits, last) = run(DeadlinePileUpConfig::default(), &long);
        assert_eq!(hits.len(), 358);
        assert_eq!(last.unwrap().annotations["baseline_timeout_ratio"], "0.5%");
    }

    #[test]
    fn state_survives_a_restart() {
        let mut d = DeadlinePileUp::new(DeadlinePileUpConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let book = AlertBook::default();
        for i in 1..=31 {
            let snap = window(&mut w, f64::from(i) * 10.0, &[healthy(); 4]);
            let ctx = Context {
                snapshot: &snap,
                alerts: &book,
                window_secs: 10.0,
            };
            d.evaluate(&ctx, &mut Vec::new());
        }
        let mut e = DeadlinePileUp::new(DeadlinePileUpConfig::default(), 10.0);
        e.restore_state(d.save_state()).unwrap();
        assert_eq!(e.groups["g"].ratio.samples(), 31);
        assert_eq!(e.groups["g"].ok_p99, d.groups["g"].ok_p99);
        assert!(e.restore_state(serde_json::json!([1])).is_err());
    }

    #[test]
    fn state_of_departed_groups_is_evicted() {
        let mut d = DeadlinePileUp::new(DeadlinePileUpConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let book = AlertBook::default();
        let snap = window(&mut w, 10.0, &[healthy(); 4]);
        let ctx = Context {
            snapshot: &snap,
            alerts: &book,
            window_secs: 10.0,
        };
        d.evaluate(&ctx, &mut Vec::new());
        assert_eq!(d.groups.len(), 1);
        let empty = WindowSnapshot::empty(20.0);
        let ctx = Context {
            snapshot: &empty,
            alerts: &book,
            window_secs: 10.0,
        };
        d.evaluate(&ctx, &mut Vec::new());
        assert!(d.groups.is_empty());
    }

    #[test]
    fn check_reports_every_bad_field() {
        let cfg = DeadlinePileUpConfig {
            deadlines_ms: [("".to_owned(), 100.0), ("db".to_owned(), -1.0)].into(),
            min_requests: 0,
            min_timeouts: 0,
            min_timeout_ratio: 1.5,
            ratio_over_baseline: 0.5,
            min_timeout_samples: 0,
            crowd_fraction: 2.0,
            latency_over_baseline: f64::NAN,
            consecutive_windows: 0,
            tolerated_burst_secs: -1.0,
            shard_timeout_share: 1.1,
            baseline_tau_secs: 0.0,
            warmup_windows: 0,
            false_alarms_per_group_hour: 0.0,
            ..DeadlinePileUpConfig::default()
        };
        let mut out = Vec::new();
        cfg.check(&mut Problems::new("d", &mut out));
        let fields: Vec<&str> = out.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "d.deadlines_ms",
                "d.deadlines_ms.db",
                "d.min_requests",
                "d.min_timeouts",
                "d.min_timeout_ratio",
                "d.ratio_over_baseline",
                "d.min_timeout_samples",
                "d.crowd_fraction",
                "d.latency_over_baseline",
                "d.consecutive_windows",
                "d.tolerated_burst_secs",
                "d.shard_timeout_share",
                "d.baseline_tau_secs",
                "d.warmup_windows",
                "d.false_alarms_per_group_hour",
            ]
        );
        let mut out = Vec::new();
        DeadlinePileUpConfig::default().check(&mut Problems::new("x", &mut out));
        assert!(out.is_empty(), "{out:?}");
    }
}
