//! `ShardFailing`: one shard fails most of its requests, whatever its share of the group's load
//! (see docs/detectors.md, ShardFailing).
//!
//! One dead shard among 128 barely moves its group's error ratio (1/128 of the requests fail),
//! so `ErrorSurge`, which judges the group, stays quiet, and `FastFailureSink` needs the shard to
//! attract traffic. This detector judges each shard against the distribution of errors across
//! its peers and against its own history.
//!
//! **Condition**, per shard and window, with at least `min_requests` requests **and** at least
//! `min_errors` failures (the count floor: a shard at 2 req/s sees 20 requests per 10 s window
//! and cannot reach it with occasional errors):
//!
//! - its error ratio `e >= min_error_ratio` (it fails most of its requests);
//! - `e >= peers' median + points_over_peers` (it fails where its peers do not; a failure of the
//!   whole group is `ErrorSurge`'s);
//! - `e >= its own baseline + points_over_baseline` (a shard that always fails half its requests,
//!   say a shard that answers `not_found` for a sparse key range, has that as its normal). No
//!   verdict before the baseline has `warmup_windows` windows with volume: a shard born failing
//!   learns that as its normal, as `ErrorSurge`'s groups do.
//!
//! It must hold `consecutive_windows` windows in a row; an active alert keeps being reported
//! while the condition holds. Baselines learn only from windows where the condition does not
//! hold and no alert is active.
//!
//! **Annotations**: the error ratio with its baseline and the peers' median, the error classes,
//! the shard's share of the group's load and its fair share, and the group's error ratio (to show
//! how little the shard moves it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::baseline::{Ewma, alpha_for, median};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, Problems, RuleSettings, Visit, num, pct,
};
use crate::observation::{Outcome, quote};
use crate::snapshot::{GroupSnapshot, ShardSnapshot};

/// `detectors.shard_failing` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShardFailingConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Fewest requests a shard needs in a window to be judged (and to teach its baseline).
    pub min_requests: u64,
    /// Fewest failed requests a shard needs in a window to be judged failing.
    pub min_errors: u64,
    /// The shard's error ratio must reach at least this.
    pub min_error_ratio: f64,
    /// ...and exceed the median error ratio of its peers by this many points (0.25 = 25).
    pub points_over_peers: f64,
    /// ...and exceed its own baseline by this many points.
    pub points_over_baseline: f64,
    /// Windows in a row the condition must hold before the detector reports it.
    pub consecutive_windows: u32,
    /// Time constant of the baseline EWMAs, in seconds.
    pub baseline_tau_secs: f64,
    /// Windows with volume a baseline needs before it is used.
    pub warmup_windows: u32,
}

impl Default for ShardFailingConfig {
    fn default() -> Self {
        ShardFailingConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
            min_requests: 40,
            min_errors: 25,
            min_error_ratio: 0.5,
            points_over_peers: 0.25,
            points_over_baseline: 0.25,
            consecutive_windows: 3,
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
        }
    }
}

impl DetectorSettings for ShardFailingConfig {
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
        if self.min_errors == 0 {
            p.fail(
                "min_errors",
                "must be at least 1: without a count floor one failed request on a quiet shard \
                 reads as 100% failing",
            );
        }
        p.range("min_error_ratio", self.min_error_ratio, 0.0, 1.0);
        p.range("points_over_peers", self.points_over_peers, 0.0, 1.0);
        p.range("points_over_baseline", self.points_over_baseline, 0.0, 1.0);
        p.windows("consecutive_windows", self.consecutive_windows);
        p.range(
            "baseline_tau_secs",
            self.baseline_tau_secs,
            1.0,
            30.0 * 86_400.0,
        );
        p.windows("warmup_windows", self.warmup_windows);
    }
}

/// Baseline and streak of one shard.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShardState {
    ratio: Ewma,
    streak: u32,
}

/// What the detector measured about a failing shard.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Verdict {
    error_ratio: f64,
    /// Median error ratio of the other shards with requests.
    peer_error_ratio: f64,
    /// The shard's own baseline.
    baseline: f64,
}

/// Everything a `ShardFailing` finding reports, as numbers; [`render`] turns it into text.
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    verdict: Verdict,
    requests: u64,
    errors: u64,
    requests_per_second: f64,
    /// The shard's share of the group's requests, and the fair share `1/N`.
    share: f64,
    fair_share: f64,
    /// The group's error ratio.
    group_error_ratio: f64,
    /// Failing classes, most frequent first, with their ratio of the shard's requests.
    classes: Vec<(Outcome, f64)>,
    /// Windows in a row the condition has held.
    windows: u32,
}

/// The `ShardFailing` detector.
#[derive(Debug, Clone)]
pub struct ShardFailing {
    cfg: ShardFailingConfig,
    alpha: f64,
    /// Group -> shard -> state.
    groups: BTreeMap<String, BTreeMap<String, ShardState>>,
}

impl ShardFailing {
    /// The verdict on shard `s` (index `j` among the tracked shards of `g`) when it fails.
    fn verdict(
        &self,
        g: &GroupSnapshot,
        j: usize,
        s: &ShardSnapshot,
        st: &ShardState,
    ) -> Option<Verdict> {
        let e = s.traffic.errors as f64 / s.requests as f64;
        // The cheap tests first: the peers' median costs O(N) and failing shards are rare.
        if s.traffic.errors < self.cfg.min_errors || e < self.cfg.min_error_ratio {
            return None;
        }
        let baseline = st.ratio.value(self.cfg.warmup_windows)?;
        if e < baseline + self.cfg.points_over_baseline {
            return None;
        }
        let mut peers: Vec<f64> = g
            .tracked_shards()
            .enumerate()
            .filter(|(k, p)| *k != j && p.requests > 0)
            .map(|(_, p)| p.traffic.errors as f64 / p.requests as f64)
            .collect();
        let pe = median(&mut peers)?;
        (e >= pe + self.cfg.points_over_peers).then_some(Verdict {
            error_ratio: e,
            peer_error_ratio: pe,
            baseline,
        })
    }
}

fn figures(g: &GroupSnapshot, s: &ShardSnapshot, v: Verdict, windows: u32) -> Figures {
    let requests = s.requests as f64;
    let mut classes: Vec<(Outcome, f64)> = Outcome::ERRORS
        .iter()
        .filter(|c| s.traffic.outcome(**c) > 0)
        .map(|&c| (c, s.traffic.outcome(c) as f64 / requests))
        .collect();
    // Most frequent first; the sort is stable, so ties keep the order of `Outcome::ERRORS`.
    classes.sort_by(|a, b| b.1.total_cmp(&a.1));
    Figures {
        verdict: v,
        requests: s.requests,
        errors: s.traffic.errors,
        requests_per_second: s.traffic.requests_per_second,
        share: s.share,
        fair_share: g.fair_share,
        group_error_ratio: g.traffic.error_ratio.unwrap_or(0.0),
        classes,
        windows,
    }
}

/// The finding for `shard` of `group`: the figures as annotations, summary and description.
fn render(cfg: &ShardFailingConfig, group: &str, shard: &str, fig: &Figures) -> Finding {
    let v = &fig.verdict;
    let dominant = fig.classes.first().map_or(Outcome::Error, |c| c.0);
    let mut f = Finding::new(
        ShardFailing::ALERTNAME,
        cfg.rule.severity,
        &[("group", group), ("shard", shard)],
    )
    .annotate("error_ratio", pct(v.error_ratio))
    .annotate("baseline_error_ratio", pct(v.baseline))
    .annotate("peer_error_ratio", pct(v.peer_error_ratio))
    .annotate("requests", fig.requests.to_string())
    .annotate("errors", fig.errors.to_string())
    .annotate("requests_per_second", num(fig.requests_per_second))
    .annotate("share", format!("{:.4}", fig.share))
    .annotate("fair_share", format!("{:.4}", fig.fair_share))
    .annotate("group_error_ratio", pct(fig.group_error_ratio))
    .annotate("dominant_class", dominant.as_str())
    .annotate("windows", fig.windows.to_string());
    for (c, r) in &fig.classes {
        f = f.annotate(&format!("error_ratio_{}", c.as_str()), pct(*r));
    }
    let summary = format!(
        "shard {} of {} fails {} of its requests, mostly {}",
        quote(shard),
        quote(group),
        pct(v.error_ratio),
        dominant.as_str()
    );
    f.annotate("summary", summary)
        .annotate("description", description(group, shard, fig))
}

fn description(group: &str, shard: &str, fig: &Figures) -> String {
    let v = &fig.verdict;
    let classes: Vec<String> = fig
        .classes
        .iter()
        .map(|(c, r)| format!("{} {}", c.as_str(), pct(*r)))
        .collect();
    format!(
        "Shard {} of {} failed {} of {} requests ({}) in the last window, {} windows in a row; \
         its peers' median error ratio is {} and its baseline {}. By class: {}. It carries {} of the \
         group's load (fair share {}), so the group's error ratio is only {}: a group-wide \
         alert would not see it. Find why this shard fails: a dead or misconfigured replica, a \
         full disk, a failed deploy; drain it or fail it over if it does not recover.",
        quote(shard),
        quote(group),
        fig.errors,
        fig.requests,
        pct(v.error_ratio),
        fig.windows,
        pct(v.peer_error_ratio),
        pct(v.baseline),
        classes.join(", "),
        pct(fig.share),
        pct(fig.fair_share),
        pct(fig.group_error_ratio),
    )
}

impl DetectorKind for ShardFailing {
    const ALERTNAME: &'static str = "ShardFailing";
    const KEY: &'static str = "shard_failing";
    type Config = ShardFailingConfig;

    fn new(cfg: ShardFailingConfig, window_secs: f64) -> Self {
        ShardFailing {
            alpha: alpha_for(window_secs, cfg.baseline_tau_secs),
            cfg,
            groups: BTreeMap::new(),
        }
    }
}

impl GroupDetector for ShardFailing {
    type State = BTreeMap<String, ShardState>;

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
        states: &mut Self::State,
        out: &mut Vec<Finding>,
    ) {
        for (j, s) in g.tracked_shards().enumerate() {
            let st = states.entry(s.shard.clone()).or_default();
            if s.requests < self.cfg.min_requests {
                // Too few requests to say anything: the streak ends, nothing is learned.
                st.streak = 0;
                continue;
            }
            let verdict = self.verdict(g, j, s, st);
            st.streak = if verdict.is_some() { st.streak + 1 } else { 0 };
            let active = ctx.alerts.is_active(
                ShardFailing::ALERTNAME,
                &[("group", &g.group), ("shard", &s.shard)],
            );
            match verdict {
                Some(v) if st.streak >= self.cfg.consecutive_windows || active => {
                    let fig = figures(g, s, v, st.streak);
                    out.push(render(&self.cfg, &g.group, &s.shard, &fig));
                }
                Some(_) => {}
                None if !active => st
                    .ratio
                    .update(s.traffic.errors as f64 / s.requests as f64, self.alpha),
                None => {}
            }
        }
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

    /// One shard in one window: requests, of which `errs` fail with `class`.
    #[derive(Debug, Clone, Copy)]
    struct S {
        requests: u64,
        errs: u64,
        class: Outcome,
    }

    fn ok(requests: u64) -> S {
        S {
            requests,
            errs: requests / 50,
            class: Outcome::Error,
        }
    }

    fn failing(requests: u64, errs: u64) -> S {
        S {
            requests,
            errs,
            class: Outcome::Unavailable,
        }
    }

    fn window(w: &mut Windows, end: f64, shards: &[S]) -> WindowSnapshot {
        for (i, s) in shards.iter().enumerate() {
            let name = format!("s{i:03}");
            let mut o = ObservationRef::new("g", &name);
            o.count = s.requests - s.errs;
            if o.count > 0 {
                w.record(&o);
            }
            if s.errs > 0 {
                o.count = s.errs;
                o.outcome = s.class;
                w.record(&o);
            }
        }
        w.close(end)
    }

    /// Runs the detector and an alert book; returns the (1-based) windows with a finding and
    /// the last finding.
    fn run(cfg: ShardFailingConfig, windows: &[Vec<S>]) -> (Vec<usize>, Option<Finding>) {
        let mut d = ShardFailing::new(cfg.clone(), 10.0);
        let config = DetectorsConfig {
            shard_failing: cfg,
            ..DetectorsConfig::default()
        };
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let snaps = windows
            .iter()
            .enumerate()
            .map(|(i, shards)| window(&mut w, (i + 1) as f64 * 10.0, shards));
        crate::detect::testkit::firings(&mut d, &config, snaps)
    }

    /// 128 shards at 80 requests per window each (1,024 req/s for the group), shard 5 failing
    /// `errs` of its requests from window 41 to 50.
    fn dead_shard(errs: u64) -> Vec<Vec<S>> {
        (1..=60)
            .map(|i| {
                let mut v = vec![ok(80); 128];
                if (41..=50).contains(&i) {
                    v[5] = failing(80, errs);
                }
                v
            })
            .collect()
    }

    #[test]
    fn a_dead_shard_among_128_fires_on_the_third_window_and_names_itself() {
        let (hits, last) = run(ShardFailingConfig::default(), &dead_shard(80));
        assert_eq!(hits, (43..=50).collect::<Vec<_>>());
        let f = last.unwrap();
        assert_eq!(f.labels["group"], "g");
        assert_eq!(f.labels["shard"], "s005");
        assert_eq!(f.annotations["error_ratio"], "100.0%");
        assert_eq!(f.annotations["error_ratio_unavailable"], "100.0%");
        assert_eq!(f.annotations["dominant_class"], "unavailable");
        assert_eq!(f.annotations["share"], "0.0078");
        assert_eq!(f.annotations["fair_share"], "0.0078");
        // One shard in 128 moves the group's ratio by under a point.
        assert_eq!(f.annotations["group_error_ratio"], "2.0%");
        assert_eq!(f.annotations["windows"], "10");
        assert!(f.annotations["summary"].contains("fails 100.0%"), "{f:?}");
    }

    #[test]
    fn a_shard_failing_a_third_of_its_requests_is_not_failing_most() {
        let (hits, _) = run(ShardFailingConfig::default(), &dead_shard(27));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_quiet_shard_never_reaches_the_count_floor() {
        // 20 requests per window (2 req/s), every one of them failing.
        let ws: Vec<Vec<S>> = (1..=60)
            .map(|i| {
                let mut v = vec![ok(80); 8];
                v[3] = if i > 40 { failing(20, 20) } else { ok(20) };
                v
            })
            .collect();
        let (hits, _) = run(ShardFailingConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_group_that_fails_everywhere_is_not_one_failing_shard() {
        let ws: Vec<Vec<S>> = (1..=60)
            .map(|i| {
                if i > 40 {
                    vec![failing(100, 60); 16]
                } else {
                    vec![ok(100); 16]
                }
            })
            .collect();
        let (hits, _) = run(ShardFailingConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_shard_that_always_fails_half_has_that_as_its_baseline() {
        // Warm (30 windows) at 55%, then 70%: under baseline + 25 points. At 85% it fires.
        let at = |later: u64| -> Vec<Vec<S>> {
            (1..=60)
                .map(|i| {
                    let mut v = vec![ok(100); 8];
                    v[2] = failing(100, if i > 40 { later } else { 55 });
                    v
                })
                .collect()
        };
        let (hits, _) = run(ShardFailingConfig::default(), &at(70));
        assert!(hits.is_empty(), "{hits:?}");
        let (hits, last) = run(ShardFailingConfig::default(), &at(85));
        assert_eq!(hits.first(), Some(&43), "{hits:?}");
        assert_eq!(last.unwrap().annotations["baseline_error_ratio"], "55.0%");
    }

    #[test]
    fn nothing_is_judged_during_warm_up() {
        // A shard born failing learns that as its normal, as ErrorSurge's groups do; from
        // then on only a further 25 points would fire.
        let ws: Vec<Vec<S>> = (1..=60)
            .map(|_| {
                let mut v = vec![ok(100); 8];
                v[1] = failing(100, 100);
                v
            })
            .collect();
        let (hits, _) = run(ShardFailingConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn two_bad_windows_are_absorbed_and_a_lone_shard_has_no_peers() {
        let ws: Vec<Vec<S>> = (1..=50)
            .map(|i| {
                let mut v = vec![ok(100); 8];
                if i == 41 || i == 42 {
                    v[1] = failing(100, 100);
                }
                v
            })
            .collect();
        let (hits, _) = run(ShardFailingConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
        let lone: Vec<Vec<S>> = (1..=10).map(|_| vec![failing(100, 100)]).collect();
        let (hits, _) = run(ShardFailingConfig::default(), &lone);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn the_baseline_is_frozen_while_the_alert_is_active() {
        // An hour of a dead shard keeps firing and never teaches the baseline.
        let ws: Vec<Vec<S>> = (1..=400)
            .map(|i| {
                let mut v = vec![ok(100); 8];
                if i > 40 {
                    v[1] = failing(100, 100);
                }
                v
            })
            .collect();
        let (hits, last) = run(ShardFailingConfig::default(), &ws);
        assert_eq!(hits.len(), 358);
        assert_eq!(last.unwrap().annotations["baseline_error_ratio"], "2.0%");
    }

    #[test]
    fn state_of_departed_shards_and_groups_is_evicted() {
        let mut d = ShardFailing::new(ShardFailingConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let book = AlertBook::default();
        let mut eval = |snap: &WindowSnapshot| {
            let ctx = Context {
                snapshot: snap,
                alerts: &book,
                window_secs: 10.0,
            };
            d.evaluate(&ctx, &mut Vec::new());
            d.groups.values().map(BTreeMap::len).sum::<usize>()
        };
        assert_eq!(eval(&window(&mut w, 10.0, &[ok(100); 4])), 4);
        assert_eq!(eval(&WindowSnapshot::empty(20.0)), 0);
    }

    #[test]
    fn check_reports_every_bad_field() {
        let cfg = ShardFailingConfig {
            min_requests: 0,
            min_errors: 0,
            min_error_ratio: 1.5,
            points_over_peers: -0.1,
            points_over_baseline: 2.0,
            consecutive_windows: 0,
            baseline_tau_secs: 0.0,
            warmup_windows: 0,
            ..ShardFailingConfig::default()
        };
        let mut out = Vec::new();
        cfg.check(&mut Problems::new("d", &mut out));
        let fields: Vec<&str> = out.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "d.min_requests",
                "d.min_errors",
                "d.min_error_ratio",
                "d.points_over_peers",
                "d.points_over_baseline",
                "d.consecutive_windows",
                "d.baseline_tau_secs",
                "d.warmup_windows",
            ]
        );
        let mut out = Vec::new();
        ShardFailingConfig::default().check(&mut Problems::new("x", &mut out));
        assert!(out.is_empty(), "{out:?}");
    }
}
