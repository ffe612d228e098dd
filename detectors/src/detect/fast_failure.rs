//! `FastFailureSink`: a shard that answers fast with errors and, because it answers fast, draws
//! a growing share of the traffic (labels `group`, `shard`).
//!
//! Least-loaded and latency-aware balancers send work where answers come back soonest, so a
//! backend that fails fast looks like the best one there is. The condition is a shard that
//! gained share, fails more than its peers and answers faster than them, in a group whose
//! routing moves traffic toward errors (the error-attraction ratio). Its firing paths, as the
//! `proven_by` annotation names them: `consecutive_windows` and `hysteresis` (an active alert
//! whose shard still meets the condition).
//!
//! docs/detectors.md ("FastFailureSink") gives the signals, the defaults and why ordinary
//! traffic does not fire it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, Problems, RuleSettings, Visit, ms, num,
    pct,
};
use crate::evidence::baseline::{Ewma, alpha_for, median};
use crate::observation::{Outcome, quote};
use crate::snapshot::{GroupSnapshot, ShardSnapshot};

/// `detectors.fast_failure_sink` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FastFailureSinkConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Fewest requests a shard needs in a window to be judged (or to be a peer).
    pub min_requests: u64,
    /// Fewest judged shards a group needs: one shard alone has no peers and no router choice.
    pub min_shards: usize,
    /// The shard's share reaches this multiple of its baseline share.
    pub share_factor: f64,
    /// The shard's error ratio reaches at least this...
    pub error_ratio_floor: f64,
    /// ...and this multiple of the median error ratio of its peers.
    pub error_ratio_peer_factor: f64,
    /// The shard's p50 latency (all responses) is at most this multiple of its peers' median.
    pub latency_peer_factor: f64,
    /// The fleet's error-attraction ratio reaches at least this.
    pub min_error_attraction: f64,
    /// Windows in a row the condition must hold before the detector reports.
    pub consecutive_windows: u32,
    /// Time constant of the share baselines, in seconds.
    pub baseline_tau_secs: f64,
    /// Windows a shard's baseline needs before the shard is judged.
    pub warmup_windows: u32,
}

impl Default for FastFailureSinkConfig {
    fn default() -> Self {
        FastFailureSinkConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
            min_requests: 50,
            min_shards: 2,
            share_factor: 1.3,
            error_ratio_floor: 0.05,
            error_ratio_peer_factor: 3.0,
            latency_peer_factor: 0.8,
            min_error_attraction: 1.2,
            consecutive_windows: 3,
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
        }
    }
}

impl DetectorSettings for FastFailureSinkConfig {
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
        if !(2..=100_000).contains(&self.min_shards) {
            p.fail(
                "min_shards",
                format!(
                    "{} is out of range: use 2..=100000 (a shard needs peers)",
                    self.min_shards
                ),
            );
        }
        p.range("share_factor", self.share_factor, 1.0, 1000.0);
        p.range("error_ratio_floor", self.error_ratio_floor, 0.0, 1.0);
        p.range(
            "error_ratio_peer_factor",
            self.error_ratio_peer_factor,
            1.0,
            1000.0,
        );
        p.range("latency_peer_factor", self.latency_peer_factor, 0.0, 1.0);
        p.range(
            "min_error_attraction",
            self.min_error_attraction,
            1.0,
            1000.0,
        );
        p.windows("consecutive_windows", self.consecutive_windows);
        p.time_constant("baseline_tau_secs", self.baseline_tau_secs);
        p.windows("warmup_windows", self.warmup_windows);
    }
}

/// Baseline and streaks of one shard.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShardState {
    share: Ewma,
    /// Windows in a row in which the whole condition held.
    streak: u32,
    /// Windows in a row in which the shard failed more than its peers and answered faster
    /// (the failure, whether or not its share has risen yet).
    #[serde(default)]
    failing: u32,
}

/// What the detector measured about one suspect shard.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Verdict {
    share: f64,
    /// The baseline share, rescaled so the judged shards' baselines sum to their shares now.
    base_share: f64,
    error_ratio: f64,
    peer_error_ratio: f64,
    p50: f64,
    peer_p50: f64,
    ear: f64,
}

impl Verdict {
    /// The share over its baseline.
    fn share_multiple(&self) -> f64 {
        self.share / self.base_share.max(1e-12)
    }
}

/// A shard that fails more than its peers and answers faster: its figures and theirs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FailsFast {
    error_ratio: f64,
    peer_error_ratio: f64,
    p50: f64,
    peer_p50: f64,
}

/// Everything a `FastFailureSink` finding reports, as numbers; [`render`] turns it into text.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    verdict: Verdict,
    /// The shard's most frequent error class, and its ratio of the shard's requests.
    class: Outcome,
    class_ratio: f64,
    /// p50 latency of the shard's successful responses, if any.
    ok_p50: Option<f64>,
    /// The group's error ratio.
    group_error_ratio: f64,
    /// Windows in a row the condition has held.
    windows: u32,
}

/// The `FastFailureSink` detector.
#[derive(Debug, Clone)]
pub struct FastFailureSink {
    cfg: FastFailureSinkConfig,
    alpha: f64,
    /// Group -> shard -> state.
    groups: BTreeMap<String, BTreeMap<String, ShardState>>,
}

fn error_ratio(s: &ShardSnapshot) -> f64 {
    s.traffic.error_ratio.unwrap_or(0.0)
}

/// The error-attraction ratio of the `judged` shards with baseline shares `bases`, and the
/// factor that rescales the baselines to today's total share; `None` when either sums to 0.
fn error_attraction(judged: &[&ShardSnapshot], bases: &[f64]) -> Option<(f64, f64)> {
    let share_sum: f64 = judged.iter().map(|s| s.share).sum();
    let base_sum: f64 = bases.iter().sum();
    if share_sum <= 0.0 || base_sum <= 0.0 {
        return None;
    }
    let scale = share_sum / base_sum;
    let actual: f64 = judged.iter().map(|s| s.share * error_ratio(s)).sum();
    let expected: f64 = judged
        .iter()
        .zip(bases)
        .map(|(s, b)| b * scale * error_ratio(s))
        .sum();
    let ear = if expected > 0.0 {
        actual / expected
    } else if actual > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    Some((ear, scale))
}

impl FastFailureSink {
    /// The shards of `g` with `min_requests`.
    fn judged<'a>(&self, g: &'a GroupSnapshot) -> Vec<&'a ShardSnapshot> {
        g.tracked_shards()
            .filter(|s| s.requests >= self.cfg.min_requests)
            .collect()
    }

    /// Judges every eligible shard of `g`: the shards that fail more than their peers and
    /// answer faster ([`FastFailureSink::fails_fast`]), whether or not they drew traffic, and,
    /// per shard name, the verdict when all four conditions hold now.
    fn verdicts(
        &self,
        g: &GroupSnapshot,
        states: &BTreeMap<String, ShardState>,
    ) -> (BTreeSet<String>, BTreeMap<String, Verdict>) {
        let mut out = BTreeMap::new();
        let judged = self.judged(g);
        if judged.len() < self.cfg.min_shards {
            return (BTreeSet::new(), out);
        }
        // Each shard's peer medians once: the streak of the failure needs them for every
        // failing shard, drawing traffic or not.
        let fails: Vec<Option<FailsFast>> = (0..judged.len())
            .map(|j| self.fails_fast(&judged, j))
            .collect();
        let failing = judged
            .iter()
            .zip(&fails)
            .filter(|(_, f)| f.is_some())
            .map(|(s, _)| s.shard.clone())
            .collect();
        let warm = self.cfg.warmup_windows;
        let base_of = |s: &ShardSnapshot| states.get(&s.shard).and_then(|st| st.share.value(warm));
        // A shard without a warm baseline counts as routed as it used to be (neutral in EAR).
        let bases: Vec<f64> = judged
            .iter()
            .map(|s| base_of(s).unwrap_or(s.share))
            .collect();
        let Some((ear, scale)) = error_attraction(&judged, &bases) else {
            return (failing, out);
        };
        if ear < self.cfg.min_error_attraction {
            return (failing, out);
        }
        for (s, f) in judged.iter().zip(&fails) {
            let (Some(f), Some(b)) = (f, base_of(s)) else {
                continue;
            };
            // It draws more traffic than it used to.
            if s.share >= self.cfg.share_factor * b * scale {
                out.insert(
                    s.shard.clone(),
                    Verdict {
                        share: s.share,
                        base_share: b * scale,
                        error_ratio: f.error_ratio,
                        peer_error_ratio: f.peer_error_ratio,
                        p50: f.p50,
                        peer_p50: f.peer_p50,
                        ear,
                    },
                );
            }
        }
        (failing, out)
    }

    /// Shard `j` of `judged` when it fails more than its peers (`error_ratio_floor`,
    /// `error_ratio_peer_factor`) and answers faster than them (`latency_peer_factor`).
    fn fails_fast(&self, judged: &[&ShardSnapshot], j: usize) -> Option<FailsFast> {
        let s = judged[j];
        let lat = s.traffic.latency?;
        let e = error_ratio(s);
        if e < self.cfg.error_ratio_floor {
            return None;
        }
        let peers = judged.iter().enumerate().filter(|(k, _)| *k != j);
        let mut peer_err: Vec<f64> = peers.clone().map(|(_, p)| error_ratio(p)).collect();
        let mut peer_p50: Vec<f64> = peers
            .filter_map(|(_, p)| p.traffic.latency.map(|l| l.p50_ms))
            .collect();
        let (pe, pl) = (median(&mut peer_err)?, median(&mut peer_p50)?);
        let holds = e >= self.cfg.error_ratio_peer_factor * pe
            && lat.p50_ms <= self.cfg.latency_peer_factor * pl;
        holds.then_some(FailsFast {
            error_ratio: e,
            peer_error_ratio: pe,
            p50: lat.p50_ms,
            peer_p50: pl,
        })
    }
}

fn figures(g: &GroupSnapshot, s: &ShardSnapshot, v: &Verdict, windows: u32) -> Figures {
    let class = Outcome::dominant_error(&s.traffic.by_outcome).unwrap_or(Outcome::Error);
    Figures {
        verdict: *v,
        class,
        class_ratio: s.traffic.outcome(class) as f64 / s.requests.max(1) as f64,
        ok_p50: s.traffic.ok_latency.map(|l| l.p50_ms),
        group_error_ratio: g.traffic.error_ratio.unwrap_or(0.0),
        windows,
    }
}

/// The finding for `shard` of `group`: the figures as annotations, then the summary,
/// description and mitigations written from them.
fn render(cfg: &FastFailureSinkConfig, group: &str, shard: &str, fig: &Figures) -> Finding {
    let v = &fig.verdict;
    let labels = [("group", group), ("shard", shard)];
    let (qgroup, qshard) = (quote(group), quote(shard));
    Finding::new(FastFailureSink::ALERTNAME, cfg.rule.severity, &labels)
    .annotate(
        "share",
        format!(
            "{} (baseline {}, {}x)",
            pct(v.share),
            pct(v.base_share),
            num(v.share_multiple())
        ),
    )
    .annotate("error_ratio", pct(v.error_ratio))
    .annotate("dominant_class", fig.class.as_str())
    .annotate("dominant_class_ratio", pct(fig.class_ratio))
    .annotate("peer_error_ratio", pct(v.peer_error_ratio))
    .annotate(
        "p50_latency",
        format!("{} ms (peers' median {} ms)", num(v.p50), num(v.peer_p50)),
    )
    .annotate("ok_p50_latency", ms(fig.ok_p50))
    .annotate("error_attraction_ratio", num(v.ear))
    .annotate("group_error_ratio", pct(fig.group_error_ratio))
    .annotate("windows", fig.windows.to_string())
    .annotate(
        "summary",
        format!(
            "{qgroup}/{qshard} answers fast with errors ({} {}, p50 {} ms vs peers' {} ms) and \
             draws {} of the traffic (baseline {})",
            pct(fig.class_ratio),
            fig.class.as_str(),
            num(v.p50),
            num(v.peer_p50),
            pct(v.share),
            pct(v.base_share)
        ),
    )
    .annotate("description", description(group, shard, fig))
    .annotate(
        "mitigations",
        format!(
            "drain or eject {qshard} now (outlier ejection on error ratio, not only on latency); \
             count recent errors as load in the balancer so a fast error costs as much as a slow \
             success (SRE book ch. 20); make health checks verify answers, not just liveness; \
             find why it answers {}",
            fig.class.as_str()
        ),
    )
}

fn description(group: &str, shard: &str, fig: &Figures) -> String {
    let (group, shard) = (quote(group), quote(shard));
    let v = &fig.verdict;
    format!(
        "Shard {shard} of {group} answers fast with errors, so least-loaded or latency-aware \
         routing sends it more traffic: its share grew from {} to {} while {} of its answers \
         are errors (mostly {}; peers' median {}) and its p50 is {} ms against its peers' {} ms. \
         Traffic now meets {}x the error ratio that baseline routing would give it \
         (error-attraction ratio); {} of the group's requests fail.",
        pct(v.base_share),
        pct(v.share),
        pct(v.error_ratio),
        fig.class.as_str(),
        pct(v.peer_error_ratio),
        num(v.p50),
        num(v.peer_p50),
        num(v.ear),
        pct(fig.group_error_ratio)
    )
}

impl DetectorKind for FastFailureSink {
    const ALERTNAME: &'static str = "FastFailureSink";
    const KEY: &'static str = "fast_failure_sink";
    type Config = FastFailureSinkConfig;

    fn new(cfg: FastFailureSinkConfig, window_secs: f64) -> Self {
        FastFailureSink {
            alpha: alpha_for(window_secs, cfg.baseline_tau_secs),
            cfg,
            groups: BTreeMap::new(),
        }
    }
}

impl GroupDetector for FastFailureSink {
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
        let (failing, verdicts) = self.verdicts(g, states);
        let need = self.cfg.consecutive_windows;
        for s in g.tracked_shards() {
            let st = states.entry(s.shard.clone()).or_default();
            st.failing = if failing.contains(&s.shard) {
                st.failing + 1
            } else {
                0
            };
            let labels = [("group", g.group.as_str()), ("shard", s.shard.as_str())];
            let Some(v) = verdicts.get(&s.shard) else {
                st.streak = 0;
                continue;
            };
            st.streak += 1;
            // The failure must have lasted `consecutive_windows`; the traffic it drew, one
            // window less: a balancer moves traffic after the answers it weighs have come
            // back, so the share lags the failure by about a window.
            let proven_by = if st.failing >= need && st.streak + 1 >= need {
                "consecutive_windows"
            } else if ctx.alerts.is_active(FastFailureSink::ALERTNAME, &labels) {
                "hysteresis"
            } else {
                continue;
            };
            let f = render(&self.cfg, &g.group, &s.shard, &figures(g, s, v, st.streak));
            out.push(f.annotate("proven_by", proven_by));
        }
        // Shares learn only while no shard is suspect (failing fast, drawing traffic or not
        // yet) and no alert is active, so the incident's redistribution does not become the
        // new normal.
        let frozen = !verdicts.is_empty()
            || !failing.is_empty()
            || ctx
                .alerts
                .group_has_active(FastFailureSink::ALERTNAME, &g.group);
        if !frozen && g.requests > 0 {
            for s in g.tracked_shards() {
                if let Some(st) = states.get_mut(&s.shard) {
                    st.share.update(s.share, self.alpha);
                }
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

    /// One cluster in one window: requests, error ratio, error class, p50 of ok and of errors.
    #[derive(Debug, Clone, Copy)]
    struct C {
        requests: u64,
        err: f64,
        class: Outcome,
        ok_ms: f64,
        err_ms: f64,
    }

    const HEALTHY: C = C {
        requests: 200,
        err: 0.005,
        class: Outcome::Error,
        ok_ms: 80.0,
        err_ms: 80.0,
    };

    fn record(w: &mut Windows, clusters: &[C]) {
        for (i, c) in clusters.iter().enumerate() {
            let name = format!("c{i}");
            let errs = (c.requests as f64 * c.err).round() as u64;
            let mut o = ObservationRef::new("ms", &name);
            // Two latency values around the median so p50 is the median.
            for (count, ms, outcome) in [
                ((c.requests - errs) / 2, c.ok_ms * 0.9, Outcome::Ok),
                (
                    c.requests - errs - (c.requests - errs) / 2,
                    c.ok_ms * 1.1,
                    Outcome::Ok,
                ),
                (errs, c.err_ms, c.class),
            ] {
                if count > 0 {
                    o.count = count;
                    o.latency_ms = Some(ms);
                    o.outcome = outcome;
                    w.record(&o);
                }
            }
        }
    }

    /// Runs windows through the detector and an alert book; returns the 1-based windows with a
    /// finding and the last finding.
    fn run(cfg: FastFailureSinkConfig, windows: &[Vec<C>]) -> (Vec<usize>, Option<Finding>) {
        let mut d = FastFailureSink::new(cfg.clone(), 10.0);
        let config = DetectorsConfig {
            fast_failure_sink: cfg,
            ..DetectorsConfig::default()
        };
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let snaps = windows.iter().enumerate().map(|(i, win)| {
            record(&mut w, win);
            w.close((i + 1) as f64 * 10.0)
        });
        crate::detect::testkit::firings(&mut d, &config, snaps)
    }

    fn fleet(n: usize) -> Vec<C> {
        vec![HEALTHY; n]
    }

    /// 40 healthy windows of 6 clusters, then `incident` windows.
    fn scenario(incident: Vec<Vec<C>>) -> Vec<Vec<C>> {
        let mut ws = vec![fleet(6); 40];
        ws.extend(incident);
        ws
    }

    fn sink(requests: u64) -> C {
        C {
            requests,
            err: 0.9,
            class: Outcome::NotFound,
            ok_ms: 80.0,
            err_ms: 5.0,
        }
    }

    #[test]
    fn a_fast_not_found_cluster_that_gains_share_fires_on_the_third_window() {
        let mut bad = fleet(6);
        bad[2] = sink(340);
        let (hits, last) = run(FastFailureSinkConfig::default(), &scenario(vec![bad; 5]));
        assert_eq!(hits, [43, 44, 45]);
        let f = last.unwrap();
        assert_eq!(f.labels["group"], "ms");
        assert_eq!(f.labels["shard"], "c2");
        let a = &f.annotations;
        assert_eq!(a["dominant_class"], "not_found");
        assert_eq!(a["share"], "25.4% (baseline 16.7%, 1.52x)");
        assert_eq!(a["p50_latency"], "5.02 ms (peers' median 80.4 ms)");
        assert!(a["description"].contains("latency-aware routing sends it more traffic"));
        assert!(
            a["mitigations"].contains("count recent errors as load"),
            "{a:?}"
        );
        let ear: f64 = a["error_attraction_ratio"].parse().unwrap();
        assert!(ear > 1.4, "{ear}");
    }

    #[test]
    fn the_traffic_may_follow_the_failure_a_window_later() {
        // The cluster fails fast from window 41; the balancer, weighing answers it has already
        // had, sends it more traffic from window 42. The failure has lasted three windows at
        // the end of window 43: it fires there, not a window later.
        let mut failing = fleet(6);
        failing[2] = sink(200);
        let mut drawing = fleet(6);
        drawing[2] = sink(340);
        let mut ws = vec![failing];
        ws.extend(vec![drawing.clone(); 4]);
        let (hits, _) = run(FastFailureSinkConfig::default(), &scenario(ws));
        assert_eq!(hits, [43, 44, 45]);
        // Drawing traffic for one window only is not enough, however long it has failed.
        let mut ws = vec![fleet(6)];
        ws.extend(vec![sink_among(200); 4]);
        ws.push(drawing);
        ws.push(sink_among(200));
        let (hits, _) = run(FastFailureSinkConfig::default(), &scenario(ws));
        assert!(hits.is_empty(), "{hits:?}");
    }

    /// Six healthy clusters but `c2`, which fails fast with `requests`.
    fn sink_among(requests: u64) -> Vec<C> {
        let mut ws = fleet(6);
        ws[2] = sink(requests);
        ws
    }

    #[test]
    fn figures_give_the_sink_its_share_error_attraction_and_class() {
        let mut d = FastFailureSink::new(FastFailureSinkConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let book = AlertBook::default();
        let mut bad = fleet(6);
        bad[2] = sink(340);
        for (i, win) in scenario(vec![bad]).iter().enumerate() {
            record(&mut w, win);
            let snap = w.close((i + 1) as f64 * 10.0);
            if i < 40 {
                let ctx = Context {
                    snapshot: &snap,
                    alerts: &book,
                    window_secs: 10.0,
                };
                d.evaluate(&ctx, &mut Vec::new());
                continue;
            }
            let g = &snap.groups[0];
            let (failing, verdicts) = d.verdicts(g, &d.groups["ms"]);
            assert_eq!(failing.iter().collect::<Vec<_>>(), ["c2"]);
            assert_eq!(verdicts.keys().collect::<Vec<_>>(), ["c2"]);
            let v = verdicts["c2"];
            // 1340 requests: five clusters of 200 with 1 error each, the sink 340 with 306.
            assert!((v.share - 340.0 / 1340.0).abs() < 1e-12);
            assert!((v.base_share - 1.0 / 6.0).abs() < 1e-9);
            assert!((v.share_multiple() - 6.0 * 340.0 / 1340.0).abs() < 1e-6);
            let ear = (311.0 / 1340.0) / ((5.0 * 0.005 + 0.9) / 6.0);
            assert!((v.ear - ear).abs() < 1e-9, "{} against {ear}", v.ear);
            let fig = figures(g, g.shard("c2").unwrap(), &v, 3);
            assert_eq!(fig.class, Outcome::NotFound);
            assert!((fig.class_ratio - 0.9).abs() < 1e-12);
            assert!((fig.group_error_ratio - 311.0 / 1340.0).abs() < 1e-12);
            assert!(fig.ok_p50.is_some_and(|p| p > 70.0));
        }
    }

    #[test]
    fn a_failing_cluster_that_loses_share_is_healthy_routing() {
        let mut bad = fleet(6);
        bad[2] = sink(60);
        let (hits, _) = run(FastFailureSinkConfig::default(), &scenario(vec![bad; 10]));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_cluster_that_gains_share_because_peers_drained_is_not_a_sink() {
        // Two clusters drained: the rest gain 1.5x share with normal errors and latency.
        let mut drained = fleet(6);
        drained[0].requests = 0;
        drained[1].requests = 0;
        let (hits, _) = run(
            FastFailureSinkConfig::default(),
            &scenario(vec![drained; 10]),
        );
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_slow_failing_cluster_is_not_a_fast_failure() {
        let mut bad = fleet(6);
        bad[2] = C {
            err_ms: 1000.0,
            ..sink(340)
        };
        let (hits, _) = run(FastFailureSinkConfig::default(), &scenario(vec![bad; 10]));
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn two_windows_are_not_enough_and_nothing_is_judged_during_warm_up() {
        let mut bad = fleet(6);
        bad[2] = sink(340);
        let (hits, _) = run(
            FastFailureSinkConfig::default(),
            &scenario(vec![
                bad.clone(),
                bad.clone(),
                fleet(6),
                bad.clone(),
                bad.clone(),
            ]),
        );
        assert!(hits.is_empty(), "{hits:?}");
        let mut ws = vec![fleet(6); 10];
        ws.extend(vec![bad; 10]);
        let (hits, _) = run(FastFailureSinkConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_lone_shard_has_no_peers() {
        let mut ws = vec![fleet(1); 40];
        ws.extend(vec![vec![sink(400)]; 10]);
        let (hits, _) = run(FastFailureSinkConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn the_baseline_is_frozen_while_the_alert_fires() {
        let mut bad = fleet(6);
        bad[2] = sink(340);
        let (hits, last) = run(FastFailureSinkConfig::default(), &scenario(vec![bad; 400]));
        assert_eq!(hits.len(), 398);
        assert!(last.unwrap().annotations["share"].contains("baseline 16.7%"));
    }

    #[test]
    fn state_of_departed_shards_and_groups_is_evicted() {
        fn eval(d: &mut FastFailureSink, snap: &WindowSnapshot) {
            let book = AlertBook::default();
            let ctx = Context {
                snapshot: snap,
                alerts: &book,
                window_secs: 10.0,
            };
            d.evaluate(&ctx, &mut Vec::new());
        }
        let mut d = FastFailureSink::new(FastFailureSinkConfig::default(), 10.0);
        let cfg = WindowConfig {
            shard_idle_windows: 1,
            ..WindowConfig::default()
        };
        let mut w = Windows::new(cfg, 0.0);
        for (end, n) in [(10.0, 3), (20.0, 2), (30.0, 2)] {
            record(&mut w, &fleet(n));
            eval(&mut d, &w.close(end));
        }
        assert_eq!(d.groups["ms"].len(), 2);
        eval(&mut d, &WindowSnapshot::empty(40.0));
        assert!(d.groups.is_empty());
    }

    #[test]
    fn check_reports_every_bad_field() {
        let cfg = FastFailureSinkConfig {
            min_requests: 0,
            min_shards: 1,
            share_factor: 0.9,
            error_ratio_floor: 2.0,
            error_ratio_peer_factor: 0.0,
            latency_peer_factor: 1.5,
            min_error_attraction: 0.5,
            consecutive_windows: 0,
            baseline_tau_secs: -1.0,
            warmup_windows: 0,
            ..FastFailureSinkConfig::default()
        };
        let mut out = Vec::new();
        cfg.check(&mut Problems::new("d", &mut out));
        assert_eq!(out.len(), 10, "{out:?}");
        let mut out = Vec::new();
        FastFailureSinkConfig::default().check(&mut Problems::new("d", &mut out));
        assert!(out.is_empty(), "{out:?}");
    }
}
