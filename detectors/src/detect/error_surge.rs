//! `ErrorSurge`: a group's error ratio far above its own baseline (label `group`).
//!
//! A busy window (`min_requests`) is judged on its own against the floor and the relative and
//! additive tests over the baseline; a quiet group's errors among its requests are weighed
//! across windows ([`RatioEvidence`]), with the window rule's gate as the test's crossover. Its
//! firing paths, as the `proven_by` annotation names them: `consecutive_windows` (the window
//! rule), `hysteresis` (an active alert whose window is still over the gate) and `cusum` (the
//! evidence across windows).
//!
//! docs/detectors.md ("ErrorSurge") gives the method, the defaults and why ordinary traffic does
//! not fire it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, GroupMemory, Problems, RuleSettings,
    Visit, factor, pct, times,
};
use crate::evidence::baseline::{Ewma, Ratio};
use crate::evidence::cusum::Binomial;
use crate::evidence::ratio::{Hypotheses, RatioEvidence, RatioSettings, RatioTests};
use crate::observation::{Outcome, label_value, quote};
use crate::snapshot::GroupSnapshot;

/// `detectors.error_surge` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ErrorSurgeConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Fewest requests a group needs in a window to be judged by the window rule (and to teach
    /// its ratio baseline); quieter windows are weighed together as evidence.
    pub min_requests: u64,
    /// Absolute floor: the error ratio must reach at least this.
    pub min_error_ratio: f64,
    /// Relative test: the error ratio reaches this multiple of its baseline...
    pub ratio_over_baseline: f64,
    /// ...or exceeds the baseline by this many points (as a ratio: 0.10 = 10 points).
    pub points_over_baseline: f64,
    /// Windows in a row the condition must hold before the detector reports it.
    pub consecutive_windows: u32,
    /// Time constant of the baseline EWMAs, in seconds.
    pub baseline_tau_secs: f64,
    /// Windows with volume a baseline needs before the detector judges the group.
    pub warmup_windows: u32,
    /// False alarms per group-hour the evidence test allows while the error ratio stays at
    /// its baseline: sets the CUSUM threshold of the path that judges groups under
    /// `min_requests`.
    pub false_alarms_per_group_hour: f64,
    /// The longest error burst to tolerate, seconds: the evidence takes at least
    /// ⌈this/window⌉ + 3 windows, so a burst this short never fires it on its own.
    pub tolerated_burst_secs: f64,
}

impl Default for ErrorSurgeConfig {
    fn default() -> Self {
        ErrorSurgeConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
            min_requests: 200,
            min_error_ratio: 0.05,
            ratio_over_baseline: 5.0,
            points_over_baseline: 0.10,
            consecutive_windows: 2,
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
            false_alarms_per_group_hour: 1e-4,
            tolerated_burst_secs: 20.0,
        }
    }
}

impl DetectorSettings for ErrorSurgeConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    /// Checks every field.
    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        if self.min_requests == 0 {
            p.fail(
                "min_requests",
                "must be at least 1: a ratio of no requests means nothing",
            );
        }
        p.range("min_error_ratio", self.min_error_ratio, 0.0, 1.0);
        p.range("ratio_over_baseline", self.ratio_over_baseline, 1.0, 1000.0);
        p.range("points_over_baseline", self.points_over_baseline, 0.0, 1.0);
        p.windows("consecutive_windows", self.consecutive_windows);
        p.time_constant("baseline_tau_secs", self.baseline_tau_secs);
        p.windows("warmup_windows", self.warmup_windows);
        p.false_alarm_rate(
            "false_alarms_per_group_hour",
            self.false_alarms_per_group_hour,
        );
        p.burst("tolerated_burst_secs", self.tolerated_burst_secs);
    }
}

impl ErrorSurgeConfig {
    /// The lowest ratio that is a surge over baseline `b`: the floor, and the lower of the
    /// relative and the additive test.
    fn gate(&self, b: f64) -> f64 {
        self.min_error_ratio
            .max((self.ratio_over_baseline * b).min(b + self.points_over_baseline))
    }

    /// True when ratio `e` is a surge over baseline `b`.
    fn surges(&self, e: f64, b: f64) -> bool {
        e >= self.gate(b)
    }
}

/// Baselines, streak and evidence of one group.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupState {
    ratio: Ewma,
    by_class: [Ewma; Outcome::COUNT],
    streak: u32,
    /// Errors among requests as evidence across windows above the gate (the path under
    /// `min_requests`), on a baseline learned from every window with requests.
    #[serde(default)]
    errors: RatioEvidence,
}

impl GroupMemory for GroupState {}

/// The `ErrorSurge` detector.
#[derive(Debug, Clone)]
pub struct ErrorSurge {
    cfg: ErrorSurgeConfig,
    /// The evidence test of the path without floors.
    tests: RatioTests,
    groups: BTreeMap<String, GroupState>,
}

/// The firing path of the window rule: `consecutive_windows` busy windows over the gate.
const CONSECUTIVE_WINDOWS: &str = "consecutive_windows";

/// The firing path of an active alert whose window is still over the gate.
const HYSTERESIS: &str = "hysteresis";

/// Baseline ratio from which a class is listed even when it has no error now, so the
/// breakdown shows a usual failure that vanished as well as a new one.
const LISTED_CLASS_BASELINE: f64 = 0.0005;

/// Everything an `ErrorSurge` finding reports, as numbers; [`render`] turns it into text.
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    /// The group's error ratio: in this window, or over the windows of the evidence when
    /// the window is under `min_requests`.
    ratio: f64,
    /// Its baseline.
    baseline: f64,
    /// The requests the ratio is of.
    requests: u64,
    /// The evidence gathered, as a fraction of its threshold.
    evidence: f64,
    /// The firing path that proved the surge.
    proven_by: &'static str,
    /// The class whose ratio grew most, in points.
    grown: Outcome,
    /// The classes worth listing: failing now, or usually failing.
    classes: Vec<ClassRatio>,
    /// The shard that returned the most errors.
    top_shard: Option<ErrorShard>,
}

/// One error class's ratio now and at baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ClassRatio {
    class: Outcome,
    now: f64,
    baseline: f64,
}

/// The shard that returned the most errors.
#[derive(Debug, Clone, PartialEq)]
struct ErrorShard {
    shard: String,
    /// Its share of the group's errors.
    error_share: f64,
    /// Its own error ratio.
    error_ratio: f64,
}

impl ErrorSurge {
    /// Adds the window's errors among its requests to the evidence, once the count baseline
    /// is warm: the test of its ratio at its upper bound whose crossover is the gate over it.
    fn weigh(&self, st: &mut GroupState, window: Ratio<u64>) {
        st.errors.weigh(&self.tests, window, |seen| {
            let reference = seen.upper();
            Some(Hypotheses {
                reference,
                rise: Binomial::with_crossover(reference, self.cfg.gate(seen.share())),
                severe: None,
            })
        });
    }

    fn figures(
        &self,
        g: &GroupSnapshot,
        st: &GroupState,
        (e, b, n): (f64, f64, u64),
        proven_by: &'static str,
    ) -> Figures {
        let requests = g.requests as f64;
        let warm = self.cfg.warmup_windows;
        let all: Vec<ClassRatio> = Outcome::ERRORS
            .iter()
            .map(|&class| ClassRatio {
                class,
                now: g.traffic.outcome(class) as f64 / requests,
                baseline: st.by_class[class.index()].value(warm).unwrap_or(0.0),
            })
            .collect();
        // Ties go to the earlier class.
        let grown = all
            .iter()
            .map(|c| (c.class, c.now - c.baseline))
            .fold(None, |best: Option<(Outcome, f64)>, (c, d)| match best {
                Some((_, bd)) if bd >= d => best,
                _ => Some((c, d)),
            })
            .map_or(Outcome::Error, |(c, _)| c);
        // The shard with the most errors; `rev` makes ties go to the first name.
        let top_shard = g
            .tracked_shards()
            .filter(|s| s.traffic.errors > 0)
            .rev()
            .max_by_key(|s| s.traffic.errors)
            .map(|s| ErrorShard {
                shard: s.shard.clone(),
                error_share: s.traffic.errors as f64 / g.traffic.errors.max(1) as f64,
                error_ratio: s.traffic.error_ratio.unwrap_or(0.0),
            });
        Figures {
            ratio: e,
            baseline: b,
            requests: n,
            evidence: st.errors.fraction(&self.tests),
            proven_by,
            grown,
            classes: all
                .into_iter()
                .filter(|c| c.now > 0.0 || c.baseline >= LISTED_CLASS_BASELINE)
                .collect(),
            top_shard,
        }
    }
}

/// The finding for `group`: the figures as annotations, and the summary and description.
fn render(cfg: &ErrorSurgeConfig, group: &str, fig: &Figures) -> Finding {
    let mut f = Finding::new(
        ErrorSurge::ALERTNAME,
        cfg.rule.severity,
        &[("group", group)],
    )
    .annotate("error_ratio", pct(fig.ratio))
    .annotate("baseline_error_ratio", pct(fig.baseline))
    .annotate("requests", fig.requests.to_string())
    .annotate("evidence", format!("{:.2}", fig.evidence))
    .annotate("proven_by", fig.proven_by)
    .annotate("dominant_class", fig.grown.as_str());
    for c in &fig.classes {
        f = f.annotate(
            &format!("error_ratio_{}", c.class.as_str()),
            format!("{} (baseline {})", pct(c.now), pct(c.baseline)),
        );
    }
    if let Some(s) = &fig.top_shard {
        f = f
            .annotate("top_error_shard", label_value(&s.shard))
            .annotate("top_error_shard_error_share", pct(s.error_share))
            .annotate("top_error_shard_error_ratio", pct(s.error_ratio));
    }
    let summary = format!(
        "{}: error ratio {} (baseline {}), mostly {}",
        quote(group),
        pct(fig.ratio),
        pct(fig.baseline),
        fig.grown.as_str()
    );
    f.annotate("summary", summary)
        .annotate("description", description(group, fig))
}

fn description(group: &str, fig: &Figures) -> String {
    let group = quote(group);
    let factor = times(factor(fig.ratio, fig.baseline));
    let classes: Vec<String> = fig
        .classes
        .iter()
        .map(|c| format!("{} {}", c.class.as_str(), pct(c.now)))
        .collect();
    let where_ = fig.top_shard.as_ref().map_or(String::new(), |s| {
        format!(
            " Shard {} returned {} of the errors ({} of its requests failed).",
            quote(&s.shard),
            pct(s.error_share),
            pct(s.error_ratio)
        )
    });
    format!(
        "The error ratio of {group} is {} over {} requests, {factor} its baseline of {}. By \
         class: {}. The class that grew most is {}.{where_}",
        pct(fig.ratio),
        fig.requests,
        pct(fig.baseline),
        classes.join(", "),
        fig.grown.as_str()
    )
}

impl DetectorKind for ErrorSurge {
    const ALERTNAME: &'static str = "ErrorSurge";
    const KEY: &'static str = "error_surge";
    type Config = ErrorSurgeConfig;

    fn new(cfg: ErrorSurgeConfig, window_secs: f64) -> Self {
        ErrorSurge {
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

impl GroupDetector for ErrorSurge {
    type State = GroupState;

    fn states(&self) -> &BTreeMap<String, Self::State> {
        &self.groups
    }

    fn states_mut(&mut self) -> &mut BTreeMap<String, Self::State> {
        &mut self.groups
    }

    fn visit(&self, g: &GroupSnapshot) -> Visit {
        // `__other__` mixes unrelated systems; its ratio is nobody's.
        Visit::when(g.is_tracked() && g.requests > 0)
    }

    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        st: &mut Self::State,
        out: &mut Vec<Finding>,
    ) {
        let window = Ratio::of(g.traffic.errors, g.requests);
        let (n, e) = (window.trials, window.share());
        // The window rule, in a window with the volume to judge it alone.
        let busy = n >= self.cfg.min_requests;
        let verdict = st
            .ratio
            .value(self.cfg.warmup_windows)
            .filter(|_| busy)
            .map(|b| (b, self.cfg.surges(e, b)));
        let holds = verdict.is_some_and(|(_, h)| h);
        if busy {
            st.streak = if holds { st.streak + 1 } else { 0 };
        }
        self.weigh(st, window);
        let proof = st.errors.proven(&self.tests, false);
        let active = ctx
            .alerts
            .is_active(ErrorSurge::ALERTNAME, &[("group", &g.group)]);
        let ruled = holds && (st.streak >= self.cfg.consecutive_windows || active);
        if let Some((b, _)) = verdict.filter(|_| ruled) {
            let path = if st.streak >= self.cfg.consecutive_windows {
                CONSECUTIVE_WINDOWS
            } else {
                HYSTERESIS
            };
            let fig = self.figures(g, st, (e, b, n), path);
            out.push(render(&self.cfg, &g.group, &fig));
        } else if let Some(proof) = proof
            && let Some(seen) = st.errors.seen(&self.tests)
        {
            let counts = st.errors.excursion().counts;
            let over = (counts.share(), seen.share(), counts.trials);
            let fig = self.figures(g, st, over, proof.name());
            out.push(render(&self.cfg, &g.group, &fig));
        }
        // Learn only from windows that are neither suspect nor part of an incident.
        let frozen = holds || active || proof.is_some();
        if busy && !frozen {
            let alpha = self.tests.alpha();
            st.ratio.update(e, alpha);
            for c in Outcome::ERRORS {
                let r = g.traffic.outcome(c) as f64 / n as f64;
                st.by_class[c.index()].update(r, alpha);
            }
        }
        st.errors.learn(&self.tests, window, frozen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertBook;
    use crate::detect::Detector;
    use crate::detect::DetectorsConfig;
    use crate::observation::ObservationRef;
    use crate::snapshot::WindowSnapshot;
    use crate::window::{WindowConfig, Windows};

    /// One window of `n` requests of group `g`, `errs` of them with outcome `class` on shard b.
    fn window(w: &mut Windows, end: f64, n: u64, errs: u64, class: Outcome) -> WindowSnapshot {
        let mut ok = ObservationRef::new("g", "a");
        ok.count = n - errs;
        w.record(&ok);
        if errs > 0 {
            let mut bad = ObservationRef::new("g", "b");
            bad.count = errs;
            bad.outcome = class;
            w.record(&bad);
        }
        w.close(end)
    }

    /// Runs the detector and an alert book over windows; returns the windows (1-based) in which
    /// the detector reported a finding, and the last finding.
    fn run(
        cfg: ErrorSurgeConfig,
        windows: &[(u64, u64, Outcome)],
    ) -> (Vec<usize>, Option<Finding>) {
        let mut d = ErrorSurge::new(cfg.clone(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let rules = DetectorsConfig {
            error_surge: cfg,
            ..DetectorsConfig::default()
        }
        .rules();
        let mut book = AlertBook::new(rules);
        let mut hits = Vec::new();
        let mut last = None;
        for (i, &(n, e, c)) in windows.iter().enumerate() {
            let end = (i + 1) as f64 * 10.0;
            let snap = window(&mut w, end, n, e, c);
            let out = crate::detect::testkit::evaluate(&mut d, &mut book, &snap, 10.0);
            if let Some(f) = out.last() {
                hits.push(i + 1);
                last = Some(f.clone());
            }
        }
        (hits, last)
    }

    fn steady(n: usize, reqs: u64, errs: u64) -> Vec<(u64, u64, Outcome)> {
        vec![(reqs, errs, Outcome::Error); n]
    }

    #[test]
    fn a_not_found_surge_fires_after_two_windows_with_the_class_and_shard_named() {
        let mut ws = steady(40, 1000, 3);
        ws.extend(vec![(1000, 210, Outcome::NotFound); 5]);
        let (hits, last) = run(ErrorSurgeConfig::default(), &ws);
        assert_eq!(hits, [42, 43, 44, 45]);
        let f = last.unwrap();
        assert_eq!(f.labels["group"], "g");
        assert_eq!(f.annotations["dominant_class"], "not_found");
        assert_eq!(f.annotations["error_ratio"], "21.0%");
        assert_eq!(f.annotations["baseline_error_ratio"], "0.3%");
        assert_eq!(
            f.annotations["error_ratio_not_found"],
            "21.0% (baseline 0.0%)"
        );
        assert_eq!(f.annotations["top_error_shard"], "b");
        assert!(
            f.annotations["summary"].contains("mostly not_found"),
            "{f:?}"
        );
    }

    #[test]
    fn figures_break_the_surge_down_by_class_and_shard() {
        let mut d = ErrorSurge::new(ErrorSurgeConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let book = AlertBook::default();
        for i in 1..=40 {
            let snap = window(&mut w, f64::from(i) * 10.0, 1000, 3, Outcome::Error);
            let ctx = Context {
                snapshot: &snap,
                alerts: &book,
                window_secs: 10.0,
            };
            d.evaluate(&ctx, &mut Vec::new());
        }
        let snap = window(&mut w, 410.0, 1000, 210, Outcome::NotFound);
        let fig = d.figures(
            &snap.groups[0],
            &d.groups["g"],
            (0.21, 0.003, 1000),
            CONSECUTIVE_WINDOWS,
        );
        assert_eq!(fig.grown, Outcome::NotFound);
        // `error` is gone now but listed for its baseline; `not_found` is new.
        let listed: Vec<Outcome> = fig.classes.iter().map(|c| c.class).collect();
        assert_eq!(listed, [Outcome::Error, Outcome::NotFound]);
        assert_eq!(fig.classes[0].now, 0.0);
        assert!((fig.classes[0].baseline - 0.003).abs() < 1e-12);
        assert!((fig.classes[1].now - 0.21).abs() < 1e-12);
        assert_eq!(fig.classes[1].baseline, 0.0);
        let top = fig.top_shard.unwrap();
        assert_eq!(top.shard, "b");
        assert_eq!((top.error_share, top.error_ratio), (1.0, 1.0));
        assert_eq!(fig.requests, 1000);
    }

    #[test]
    fn nothing_is_judged_during_warm_up() {
        // A group born failing at 30% learns that as its normal.
        let (hits, _) = run(ErrorSurgeConfig::default(), &steady(100, 1000, 300));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_single_bad_window_is_absorbed() {
        let mut ws = steady(40, 1000, 3);
        ws.push((1000, 200, Outcome::Timeout));
        ws.extend(steady(10, 1000, 3));
        let (hits, _) = run(ErrorSurgeConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn the_floor_and_the_additive_test_bound_the_relative_one() {
        let c = ErrorSurgeConfig::default();
        // 0.01% -> 1%: 100x but under the 5% floor.
        assert!(!c.surges(0.01, 0.0001));
        // 10% -> 19%: neither 5x nor +10 points.
        assert!(!c.surges(0.19, 0.10));
        // 10% -> 21%: +11 points.
        assert!(c.surges(0.21, 0.10));
        // 1% -> 6%: floor and 5x hold.
        assert!(c.surges(0.06, 0.01));
    }

    #[test]
    fn low_volume_windows_are_not_judged_alone() {
        // Four windows under `min_requests` at 50%: the window rule does not judge them, and
        // the evidence takes at least five windows (a tolerated 20 s burst and three more).
        let mut ws = steady(40, 1000, 3);
        ws.extend(vec![(100, 50, Outcome::Error); 4]);
        ws.extend(steady(10, 1000, 3));
        let (hits, _) = run(ErrorSurgeConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_quiet_group_is_judged_across_windows() {
        // Ten requests a window (1 req/s), none failing, then 30% timing out: no window has
        // the volume of the window rule, and the evidence proves the surge in the fewest
        // windows it may take.
        let mut ws = steady(40, 10, 0);
        ws.extend(vec![(10, 3, Outcome::Timeout); 10]);
        let (hits, last) = run(ErrorSurgeConfig::default(), &ws);
        assert_eq!(hits.first(), Some(&45), "{hits:?}");
        assert_eq!(hits.len(), 6);
        let f = last.unwrap();
        // The ratio over the windows the evidence rests on, not over the last one alone.
        assert_eq!(f.annotations["error_ratio"], "30.0%");
        assert_eq!(f.annotations["requests"], "100");
        assert_eq!(f.annotations["evidence"], "1.00");
        assert_eq!(f.annotations["dominant_class"], "timeout");
        // A group of two requests a window failing 10% is proven too, later: once its
        // baseline rests on enough requests (an hour's) to tell 10% from its 5% gate.
        let mut ws = steady(400, 2, 0);
        ws.extend((0..100).map(|i| (2, u64::from(i % 5 == 0), Outcome::Error)));
        let (hits, _) = run(ErrorSurgeConfig::default(), &ws);
        assert!(hits.first().is_some_and(|&w| w > 420), "{hits:?}");
    }

    #[test]
    fn quiet_groups_at_their_usual_errors_are_never_reported() {
        // Errors drawn at random at a steady ratio, 2 to 100 requests a window, for 20,000
        // windows each (about 56 group-hours at 10 s windows, where the stated rate allows
        // 0.0056 false alarms): the evidence stays under its threshold.
        let mut rng = crate::prng::SplitMix64::new(20251201);
        for (n, p) in [(2, 0.003), (10, 0.003), (10, 0.02), (100, 0.03), (10, 0.15)] {
            let ws: Vec<(u64, u64, Outcome)> = (0..20_000)
                .map(|_| {
                    let x = (0..n).filter(|_| rng.next_f64() < p).count() as u64;
                    (n, x, Outcome::Error)
                })
                .collect();
            let (hits, _) = run(ErrorSurgeConfig::default(), &ws);
            assert!(hits.is_empty(), "{n} requests at {p}: {hits:?}");
        }
    }

    #[test]
    fn the_baseline_is_frozen_while_the_alert_is_active() {
        // An hour-long incident at 30% keeps firing: the baseline does not learn it.
        let mut ws = steady(40, 1000, 3);
        ws.extend(vec![(1000, 300, Outcome::Unavailable); 360]);
        let (hits, last) = run(ErrorSurgeConfig::default(), &ws);
        assert_eq!(hits.len(), 359);
        assert_eq!(last.unwrap().annotations["baseline_error_ratio"], "0.3%");
    }

    #[test]
    fn state_of_departed_groups_is_evicted() {
        let mut d = ErrorSurge::new(ErrorSurgeConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let book = AlertBook::default();
        let snap = window(&mut w, 10.0, 1000, 0, Outcome::Error);
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
        let cfg = ErrorSurgeConfig {
            min_requests: 0,
            min_error_ratio: 1.5,
            ratio_over_baseline: 0.5,
            points_over_baseline: -0.1,
            consecutive_windows: 0,
            baseline_tau_secs: 0.0,
            warmup_windows: 0,
            false_alarms_per_group_hour: 0.0,
            tolerated_burst_secs: -1.0,
            ..ErrorSurgeConfig::default()
        };
        let mut out = Vec::new();
        cfg.check(&mut Problems::new("detectors.error_surge", &mut out));
        let fields: Vec<&str> = out.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "detectors.error_surge.min_requests",
                "detectors.error_surge.min_error_ratio",
                "detectors.error_surge.ratio_over_baseline",
                "detectors.error_surge.points_over_baseline",
                "detectors.error_surge.consecutive_windows",
                "detectors.error_surge.baseline_tau_secs",
                "detectors.error_surge.warmup_windows",
                "detectors.error_surge.false_alarms_per_group_hour",
                "detectors.error_surge.tolerated_burst_secs",
            ]
        );
        let mut out = Vec::new();
        ErrorSurgeConfig::default().check(&mut Problems::new("x", &mut out));
        assert!(out.is_empty(), "{out:?}");
    }
}
