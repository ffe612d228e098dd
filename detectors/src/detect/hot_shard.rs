//! `HotShard`: one shard takes far more than its fair share *and* its usual share of a group's
//! load (labels `group`, `shard`).
//!
//! Each shard's count is scored against its baseline load ratio on a negative-binomial
//! variance-stabilised scale (`nb_transform`), with a threshold corrected for the group's
//! shards ([`hot_shard_z_threshold`]). Its firing paths, as the `proven_by` annotation names
//! them: `consecutive_windows` and `step_shape` (the streak of windows over threshold, by count
//! or by shape), `long_streak` (longer than any tolerated burst), `z_cusum` (the CUSUM of capped
//! scores), `rate_cusum` (the request count's evidence across windows, for shards too quiet for
//! one window) and `hysteresis` (an active alert still clearly elevated).
//!
//! docs/detectors.md ("HotShard") gives the method, the defaults and why ordinary traffic does
//! not fire it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, Problems, RuleSettings, num, pct,
    ratio_2dp,
};
use crate::evidence::baseline::{Ewma, alpha_for};
use crate::evidence::cusum::{Cusum, CusumSettings, Poisson, burst_proof_windows};
use crate::evidence::shape::{Lasted, Persistence, StreakShape, longest_burst_streak};
use crate::observation::{key_label, quote, quote_key};
use crate::snapshot::{GroupSnapshot, ShardSnapshot};
use crate::stats::hot_shard_z_threshold;

/// `detectors.hot_shard` settings. Defaults are those of `rules/skewwatch.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotShardConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Time constant of the per-shard baselines (load ratio and dispersion), seconds.
    pub baseline_tau_secs: f64,
    /// Windows with enough volume a shard's baseline needs before any verdict.
    pub warmup_windows: u32,
    /// Family-wise false-positive rate per window over a group's shards: z* = Φ⁻¹(1 − α/N).
    pub family_alpha: f64,
    /// Smallest count over expected count (practical significance).
    pub min_ratio: f64,
    /// Smallest share, in multiples of the fair share 1/N.
    pub fair_share_multiple: f64,
    /// Smallest mean count per shard per window for the window rules' verdict. Below it the
    /// window rules do not judge (streaks restart) and only the evidence across windows and an
    /// active alert's hysteresis can hold; baselines keep learning (the dispersion the window
    /// rules use only from windows expecting at least this many requests).
    pub min_mean_requests: f64,
    /// Consecutive windows over threshold before the condition holds.
    pub consecutive_windows: u32,
    /// The longest burst to tolerate, seconds: the condition also holds as soon as the shape of
    /// the streak proves the change has lasted longer (docs/adr/003).
    pub tolerated_burst_secs: f64,
    /// CUSUM reference value κ, in z units.
    pub cusum_slack: f64,
    /// CUSUM decision threshold h, in z units.
    pub cusum_threshold: f64,
    /// While active, the condition keeps holding as long as the ratio is at least this...
    pub clear_ratio: f64,
    /// ...and z is at least this fraction of z*.
    pub clear_z_fraction: f64,
    /// Windows a suspect shard may keep its baseline frozen without firing.
    pub max_suspect_windows: u32,
    /// Lower-bound share of the shard its top key needs for the `hot_key` attribution.
    pub hot_key_share: f64,
    /// False alarms per shard-hour the sequential test of the shard's request count allows
    /// (evidence accumulated across windows, for shards too quiet for one window to tell).
    pub false_alarms_per_shard_hour: f64,
}

impl Default for HotShardConfig {
    fn default() -> Self {
        HotShardConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
            family_alpha: 1e-3,
            min_ratio: 1.25,
            fair_share_multiple: 2.0,
            min_mean_requests: 10.0,
            consecutive_windows: 4,
            tolerated_burst_secs: 20.0,
            cusum_slack: 1.0,
            cusum_threshold: 10.0,
            clear_ratio: 1.1,
            clear_z_fraction: 0.5,
            max_suspect_windows: 90,
            hot_key_share: 0.5,
            false_alarms_per_shard_hour: 1e-4,
        }
    }
}

impl DetectorSettings for HotShardConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    /// Checks every field, reporting every problem with why.
    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        p.time_constant("baseline_tau_secs", self.baseline_tau_secs);
        p.windows("warmup_windows", self.warmup_windows);
        if !(self.family_alpha > 0.0 && self.family_alpha < 1.0) {
            p.fail(
                "family_alpha",
                format!(
                    "{} is not a probability in (0, 1): use a small false-positive rate such as 0.001",
                    self.family_alpha
                ),
            );
        }
        p.range("min_ratio", self.min_ratio, 1.0, 1000.0);
        p.range("fair_share_multiple", self.fair_share_multiple, 0.0, 1000.0);
        p.range("min_mean_requests", self.min_mean_requests, 0.0, 1e9);
        p.windows("consecutive_windows", self.consecutive_windows);
        p.burst("tolerated_burst_secs", self.tolerated_burst_secs);
        p.range("cusum_slack", self.cusum_slack, 0.0, 100.0);
        p.range("cusum_threshold", self.cusum_threshold, 0.1, 10_000.0);
        p.range("clear_ratio", self.clear_ratio, 1.0, 1000.0);
        if self.clear_ratio > self.min_ratio {
            p.fail(
                "clear_ratio",
                format!(
                    "{} exceeds min_ratio ({}): an alert would clear while its condition holds",
                    self.clear_ratio, self.min_ratio
                ),
            );
        }
        p.range("clear_z_fraction", self.clear_z_fraction, 0.0, 1.0);
        // 0 is valid: a suspect shard then keeps learning at once.
        p.windows_from("max_suspect_windows", self.max_suspect_windows as usize, 0);
        p.range("hot_key_share", self.hot_key_share, 0.0, 1.0);
        p.false_alarm_rate(
            "false_alarms_per_shard_hour",
            self.false_alarms_per_shard_hour,
        );
    }
}

/// What the detector remembers about one shard.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShardState {
    /// Baseline of the load ratio r = share·N.
    load: Ewma,
    /// NB2 dispersion g.
    dispersion: Ewma,
    /// CUSUM of capped z-scores.
    z_cusum: Cusum,
    /// Consecutive windows over threshold.
    streak: u32,
    /// The excesses over the expected count of those windows.
    #[serde(default)]
    shape: StreakShape,
    /// Consecutive suspect windows without an active alert.
    suspect: u32,
    /// The request count's evidence across windows ([`crate::evidence::cusum`]).
    #[serde(default)]
    rate_cusum: Cusum,
    /// NB2 dispersion from every window expecting a request, for that evidence.
    #[serde(default)]
    quiet_dispersion: Ewma,
    /// The group's requests in the window that gave the load baseline its first sample, until
    /// the next window has judged it ([`learn`]).
    #[serde(default)]
    first_total: Option<f64>,
}

/// One shard's figures in one window, against its baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score {
    share: f64,
    fair: f64,
    expected: f64,
    baseline_share: f64,
    ratio: f64,
    z: f64,
    z_star: f64,
    cusum: f64,
    /// The request count's evidence across windows, as a fraction of its threshold.
    evidence: f64,
}

/// The `HotShard` detector. See the module docs.
#[derive(Debug, Clone)]
pub struct HotShard {
    cfg: HotShardConfig,
    time: Timing,
    /// Per group, per shard state; sorted maps for deterministic iteration.
    state: BTreeMap<String, BTreeMap<String, ShardState>>,
}

impl HotShard {
    /// Shards with state, for tests of eviction.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.state.values().map(BTreeMap::len).sum()
    }
}

impl GroupDetector for HotShard {
    type State = BTreeMap<String, ShardState>;

    fn states(&self) -> &BTreeMap<String, Self::State> {
        &self.state
    }

    fn states_mut(&mut self) -> &mut BTreeMap<String, Self::State> {
        &mut self.state
    }

    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        states: &mut Self::State,
        out: &mut Vec<Finding>,
    ) {
        let cfg = &self.cfg;
        // Shards with load in this window, not `__other__` (an aggregate of many shards). A
        // shard with no request at all is left out of N and of the totals: shards being drained
        // or removed show as zero-load shards for a few windows, and counting them would raise
        // every other shard's load ratio (a scale-in is not a hot shard).
        let loaded: Vec<&ShardSnapshot> = g.tracked_shards().filter(|s| s.requests > 0).collect();
        if loaded.len() < 2 {
            return;
        }
        let gw = GroupWindow {
            n: loaded.len() as f64,
            total: loaded.iter().map(|s| s.requests as f64).sum(),
            z_star: hot_shard_z_threshold(loaded.len(), cfg.family_alpha),
            dispersion: group_dispersion(loaded.iter().filter_map(|s| states.get(&s.shard))),
            quiet_dispersion: pooled(
                loaded
                    .iter()
                    .filter_map(|s| states.get(&s.shard))
                    .map(|st| &st.quiet_dispersion),
            ),
        };
        // Too few requests for one window's verdict: streaks restart, and only the evidence
        // across windows speaks.
        let quiet = gw.total / gw.n < cfg.min_mean_requests;
        if quiet {
            for st in states.values_mut() {
                st.streak = 0;
                st.shape = StreakShape::default();
            }
        }
        for s in loaded {
            let st = states.entry(s.shard.clone()).or_default();
            let labels = [("group", g.group.as_str()), ("shard", s.shard.as_str())];
            let alerting = ctx.alerts.is_active(HotShard::ALERTNAME, &labels);
            if let Some((score, path)) = self.assess(st, &gw, s.requests, (quiet, alerting)) {
                let fig = figures(cfg, s, &score, path);
                out.push(render(cfg, &g.group, &s.shard, &fig));
            }
        }
    }
}

/// The shards with load of one group in one window.
#[derive(Debug, Clone, Copy)]
struct GroupWindow {
    /// Number of shards N.
    n: f64,
    /// Their total count C.
    total: f64,
    /// z* = Φ⁻¹(1 − α/N).
    z_star: f64,
    /// The group's dispersion: its shards' estimates of g, averaged ([`group_dispersion`]).
    dispersion: f64,
    /// The same from every window expecting a request, for the evidence across windows.
    quiet_dispersion: f64,
}

/// The shards' dispersion estimates averaged, each weighted by the windows it has learned
/// from; 0 when none has any. One shard's g is an average of a few hundred very noisy
/// squares, and at a thousand shards the lowest of them are far below the truth: judged on
/// its own low g, a shard's ordinary bursts look significant. The group's average is steady,
/// and a shard is judged on the larger of its own g and the group's, so a shard burstier than
/// its peers still widens its own variance.
fn group_dispersion<'a>(states: impl Iterator<Item = &'a ShardState>) -> f64 {
    pooled(states.map(|st| &st.dispersion))
}

/// Estimates averaged, each weighted by the windows it has learned from; 0 without any.
fn pooled<'a>(estimates: impl Iterator<Item = &'a Ewma>) -> f64 {
    let (sum, weight) = estimates.fold((0.0, 0.0), |(sum, weight), e| match e.raw() {
        Some(g) => {
            let w = f64::from(e.samples());
            (sum + w * g, weight + w)
        }
        None => (sum, weight),
    });
    if weight > 0.0 { sum / weight } else { 0.0 }
}

/// What follows from the settings and the window length: the baselines' EWMA weight, the
/// windows in a row that are always enough, the z-CUSUM's settings, and the threshold of the
/// evidence across windows with the fewest windows that reach it (those the count rule needs,
/// and never fewer than a tolerated burst cannot fill, [`burst_proof_windows`]: five at 10 s
/// windows).
#[derive(Debug, Clone, Copy)]
struct Timing {
    alpha: f64,
    /// Windows over threshold in a row that are always enough: `consecutive_windows`, but never
    /// fewer than one more than the longest streak a tolerated burst can make (⌈d/w⌉ + 1
    /// windows), so that at short windows the count of windows does not undo the burst
    /// tolerance (at 5 s windows a 20 s burst can touch five); or sooner by the streak's shape.
    persistence: Persistence,
    /// The z-CUSUM: threshold `cusum_threshold`, each step capped by [`cusum_step`].
    z: CusumSettings,
    /// The request count's evidence across windows.
    rate: CusumSettings,
}

impl Timing {
    fn new(cfg: &HotShardConfig, window_secs: f64) -> Timing {
        let persistence = Persistence::new(
            cfg.consecutive_windows,
            cfg.tolerated_burst_secs,
            window_secs,
        );
        let k = persistence
            .windows
            .max(burst_proof_windows(cfg.tolerated_burst_secs, window_secs));
        Timing {
            alpha: alpha_for(window_secs, cfg.baseline_tau_secs),
            persistence,
            z: CusumSettings {
                threshold: cfg.cusum_threshold,
                min_windows: 1,
            },
            rate: CusumSettings::new(cfg.false_alarms_per_shard_hour, window_secs, k),
        }
    }
}

/// A firing path of `HotShard`: what proved a shard hot, as its `proven_by` annotation names
/// it (docs/detectors.md, HotShard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Windows over threshold in a row, by their count or their shape.
    Lasted(Lasted),
    /// A streak of at least [`MIN_STREAK`] windows, longer than any tolerated burst can make.
    LongStreak,
    /// The CUSUM of capped z-scores.
    ZCusum,
    /// The request count's evidence across windows.
    RateCusum,
    /// An active alert whose shard is still clearly above its baseline.
    Hysteresis,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Lasted(l) => l.name(),
            Path::LongStreak => "long_streak",
            Path::ZCusum => "z_cusum",
            Path::RateCusum => "rate_cusum",
            Path::Hysteresis => "hysteresis",
        }
    }
}

impl HotShard {
    /// Judges a shard with `count` requests against its baseline, updates its state (streak,
    /// CUSUMs, baselines unless frozen) and returns its figures and the firing path when the
    /// alert condition holds. In a `quiet` window (too few requests per shard for one window's
    /// verdict) only the evidence across windows and an active alert's hysteresis can hold.
    fn assess(
        &self,
        st: &mut ShardState,
        gw: &GroupWindow,
        count: u64,
        flags: (bool, bool),
    ) -> Option<(Score, Path)> {
        let c = count as f64;
        let share = c / gw.total;
        // Warm-up gives no verdict and learns, as a window that is not frozen does.
        let (verdict, frozen) = match st.load.value(self.cfg.warmup_windows) {
            Some(b) => self.judge(st, gw, (count, b), flags),
            None => (None, false),
        };
        if !frozen {
            learn(
                st,
                (share * gw.n, c),
                (gw.total, gw.n),
                &self.cfg,
                self.time.alpha,
            );
        }
        verdict
    }

    /// [`HotShard::assess`] past warm-up, against the baseline `b`: the verdict, and whether
    /// the baselines stay frozen this window (an alert, a verdict, a window over the
    /// threshold, or a suspect shard within `max_suspect_windows`).
    fn judge(
        &self,
        st: &mut ShardState,
        gw: &GroupWindow,
        (count, b): (u64, f64),
        (quiet, alerting): (bool, bool),
    ) -> (Option<(Score, Path)>, bool) {
        let cfg = &self.cfg;
        let c = count as f64;
        let share = c / gw.total;
        let mut sc = score(st, b, gw, c);
        let share_ok = share >= cfg.fair_share_multiple / gw.n;
        let practical = sc.ratio >= cfg.min_ratio && share_ok;
        let over = !quiet && practical && sc.z >= gw.z_star;
        let accumulated = self.weigh_count(st, gw, (count, b), &mut sc);
        // Hysteresis: an active alert holds while the shard is still clearly above its baseline.
        let elevated = sc.z >= cfg.clear_z_fraction * gw.z_star;
        let holds_on = alerting && share_ok && sc.ratio >= cfg.clear_ratio && elevated;
        let ruled = if quiet {
            sc.cusum = st.z_cusum.value();
            None
        } else {
            self.window_rules(st, &mut sc, (over, practical), c)
        };
        let path = ruled
            .or(accumulated.then_some(Path::RateCusum))
            .or(holds_on.then_some(Path::Hysteresis));
        let suspicious = sc.ratio >= cfg.min_ratio && elevated;
        st.suspect = if suspicious && !alerting {
            st.suspect + 1
        } else {
            0
        };
        let frozen = alerting
            || path.is_some()
            || over
            || (suspicious && st.suspect <= cfg.max_suspect_windows);
        (path.map(|p| (sc, p)), frozen)
    }

    /// The request count's evidence across windows, in every window the shard has requests:
    /// its count against the expected one, for a rate at the practical gates (`min_ratio`
    /// times the baseline `b` and `fair_share_multiple` times the fair share), on the shard's
    /// dispersion. A shard too quiet for one window to tell proves itself in several. Its own
    /// dispersion estimate counts only where its windows are busy enough to make one
    /// (`min_mean_requests`): at a few requests a window one shard's estimate is mostly noise
    /// (about √(e + 2e²)/e² a window) and, read high, would hide a quiet hot shard; below it
    /// the group's, pooled over its shards from every window expecting a request, is steady.
    /// True when the evidence holds.
    fn weigh_count(
        &self,
        st: &mut ShardState,
        gw: &GroupWindow,
        (count, b): (u64, f64),
        sc: &mut Score,
    ) -> bool {
        let cfg = &self.cfg;
        let g = if sc.expected >= cfg.min_mean_requests {
            dispersion(st, gw)
        } else {
            gw.dispersion.max(gw.quiet_dispersion)
        };
        let gate = cfg.min_ratio.max(cfg.fair_share_multiple / b);
        let Some(test) = Poisson::with_crossover(gate) else {
            return false;
        };
        let llr = test.llr_overdispersed(count, sc.expected, g);
        st.rate_cusum.push(llr, &self.time.rate);
        sc.evidence = st.rate_cusum.value() / self.time.rate.threshold;
        st.rate_cusum.holds(&self.time.rate)
    }

    /// The window rules, in a window busy enough to be judged alone: extends or ends the
    /// streak of windows over threshold and its shape, and folds the window into the z-CUSUM.
    /// The rule that holds, if one does: the streak's count or shape, a streak longer than
    /// any tolerated burst can make, or the z-CUSUM (on a practically significant window).
    fn window_rules(
        &self,
        st: &mut ShardState,
        sc: &mut Score,
        (over, practical): (bool, bool),
        c: f64,
    ) -> Option<Path> {
        let p = &self.time.persistence;
        st.streak = if over { st.streak + 1 } else { 0 };
        st.shape.push(over, c - sc.expected);
        st.z_cusum
            .push(cusum_step(&self.cfg, p.windows, sc), &self.time.z);
        sc.cusum = st.z_cusum.value();
        if let Some(lasted) = p.lasted(st.streak, &st.shape) {
            return Some(Path::Lasted(lasted));
        }
        // A streak longer than any tolerated burst can make is not one, whatever its shape:
        // at windows longer than half the burst that comes before k (three windows at 30 s
        // windows).
        let longest_burst = longest_burst_streak(p.tolerated_burst_secs, p.window_secs);
        if st.streak >= MIN_STREAK && st.streak > longest_burst {
            return Some(Path::LongStreak);
        }
        // The threshold is reached exactly, as this rule always has (not within the rounding
        // `Cusum::holds` allows): a step capped at h/k can sum to an ulp under h.
        (practical && st.z_cusum.value() >= self.time.z.threshold).then_some(Path::ZCusum)
    }
}

/// The fewest windows over threshold in a row that hold by count alone, however long the
/// windows: one or two windows significant by chance are likelier than three.
const MIN_STREAK: u32 = 3;

/// The negative-binomial variance-stabilising transform: for counts of mean μ and variance
/// μ + gμ², T(x) = 2·asinh(√(g·x))/√g has a variance of about 1 whatever μ; for g → 0 it is
/// Poisson's 2√x. Differences of T are a z-score that stays honest in the tail: for bursty
/// traffic (large gμ) T is about ln(x)/√g, so a shard whose load is multiplied by random
/// factors is judged on the log of its ratio, where the plain (c − μ)/√var would read a
/// lognormal tail as a many-sigma event. A negative g (an under-dispersed spell) counts as 0.
fn nb_transform(x: f64, g: f64) -> f64 {
    let x = x.max(0.0);
    if g > 1e-12 {
        2.0 * (g * x).sqrt().asinh() / g.sqrt()
    } else {
        2.0 * x.sqrt()
    }
}

/// A shard's figures for count `c` against baseline load ratio `b`: expected count, ratio and
/// z = T(c) − T(e) on the shard's learned dispersion ([`nb_transform`]). The CUSUM and the
/// evidence are left at 0 for the caller to fill in.
fn score(st: &ShardState, b: f64, gw: &GroupWindow, c: f64) -> Score {
    let (n, total) = (gw.n, gw.total);
    let expected = b / n * total;
    let g_hat = dispersion(st, gw);
    Score {
        share: c / total,
        fair: 1.0 / n,
        expected,
        baseline_share: b / n,
        ratio: if expected > 0.0 {
            c / expected
        } else {
            f64::INFINITY
        },
        z: nb_transform(c, g_hat) - nb_transform(expected, g_hat),
        z_star: gw.z_star,
        cusum: 0.0,
        evidence: 0.0,
    }
}

/// The dispersion a shard is judged on: the larger of its own estimate and its group's.
fn dispersion(st: &ShardState, gw: &GroupWindow) -> f64 {
    st.dispersion.raw().unwrap_or(0.0).max(gw.dispersion)
}

/// This window's CUSUM increment. Only practically significant windows build the sum: a drift
/// of a few percent at high volume (z > κ, ratio under `min_ratio`) must not charge it for a
/// later burst. Each step is capped at h/k for the `k` windows in a row that are always
/// enough ([`Timing::persistence`]), so the CUSUM
/// never fires sooner than the threshold rule.
fn cusum_step(cfg: &HotShardConfig, k: u32, sc: &Score) -> f64 {
    if sc.ratio >= cfg.min_ratio {
        (sc.z.min(sc.z_star) - cfg.cusum_slack).min(cfg.cusum_threshold / f64::from(k))
    } else {
        sc.z.min(0.0) - cfg.cusum_slack
    }
}

/// Folds one window into a shard's baselines: the load ratio, and the dispersion against the
/// baseline as it stood before this window. The window rules' estimate learns from windows
/// expecting at least `min_mean_requests` (below it the estimator's own noise, about
/// √(e + 2e²)/e² a window, swamps it); the evidence across windows' from every window expecting
/// at least one request (noisy for one shard, but averaged over the group's shards it is
/// steady, and quiet shards need one).
///
/// The expected count e rests on a baseline of k windows, so c − e varies by the window's
/// variance and 1/k of it again: the squared deviation is divided by 1 + 1/k, or the dispersion
/// learned in the first windows would be the baseline's own noise (twice the truth against a
/// baseline of one window, and a running mean keeps that for an hour). A first window that
/// was a sliver of one is dropped: the agent (or a fleet instance) starts inside a window, a
/// shard appears inside one, and the ratio of the sliver it saw, far noisier than a whole
/// window's, would be the whole baseline for the next window and a large part of it for many
/// more. The second window tells: when its group saw more than twice the requests of the first,
/// it replaces the first as the baseline's first sample.
fn learn(
    st: &mut ShardState,
    (r, c): (f64, f64),
    (total, n): (f64, f64),
    cfg: &HotShardConfig,
    alpha: f64,
) {
    match (st.load.samples(), st.first_total.take()) {
        (0, _) => {
            st.first_total = Some(total);
            st.load.update(r, alpha);
            return;
        }
        (1, Some(first)) if first < 0.5 * total => {
            st.load = Ewma::default();
            st.load.update(r, alpha);
            return;
        }
        _ => {}
    }
    if let Some(b) = st.load.raw() {
        let e = b / n * total;
        let k = st.load.effective_samples(alpha);
        let g = ((c - e).powi(2) / (1.0 + 1.0 / k) - e) / (e * e);
        if e >= cfg.min_mean_requests.max(1.0) {
            st.dispersion.update(g, alpha);
        }
        if e >= 1.0 {
            st.quiet_dispersion.update(g, alpha);
        }
    }
    st.load.update(r, alpha);
}

/// What a hot shard calls for: a hot key (cache, replicate, split or rate-limit the key), or a
/// hot range (reshard or re-spread the index values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attribution {
    HotKey,
    HotRange,
}

impl Attribution {
    fn as_str(self) -> &'static str {
        match self {
            Attribution::HotKey => "hot_key",
            Attribution::HotRange => "hot_range",
        }
    }
}

/// Everything a `HotShard` finding reports; [`render`] turns it into text.
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    score: Score,
    /// The shard's top key and its (upper-bound) share of the shard.
    top_key: Option<(String, f64)>,
    attribution: Attribution,
    requests_per_second: f64,
    /// The firing path that proved the shard hot.
    proven_by: &'static str,
}

/// The figures of hot shard `s`: its score, the firing path, and its top key and attribution.
fn figures(cfg: &HotShardConfig, s: &ShardSnapshot, sc: &Score, path: Path) -> Figures {
    let top = s.top_keys.first();
    // The summary over-counts by at most `error`: attribute on the lower bound.
    let top_lower_share = top.map_or(0.0, |k| {
        if s.requests == 0 {
            0.0
        } else {
            k.lower_bound() as f64 / s.requests as f64
        }
    });
    Figures {
        score: *sc,
        top_key: top.map(|k| (k.key.clone(), k.share)),
        attribution: if top.is_some() && top_lower_share >= cfg.hot_key_share {
            Attribution::HotKey
        } else {
            Attribution::HotRange
        },
        requests_per_second: s.traffic.requests_per_second,
        proven_by: path.name(),
    }
}

/// The finding for `shard` of `group`: summary, description and the figures as annotations.
fn render(cfg: &HotShardConfig, group: &str, shard: &str, fig: &Figures) -> Finding {
    let sc = &fig.score;
    let mut f = Finding::new(
        HotShard::ALERTNAME,
        cfg.rule.severity,
        &[("group", group), ("shard", shard)],
    )
    .annotate(
        "summary",
        format!(
            "Shard {} of {} is hot: {} of the load",
            quote(shard),
            quote(group),
            pct(sc.share)
        ),
    )
    .annotate("description", description(group, shard, fig))
    .annotate("share", format!("{:.4}", sc.share))
    .annotate("baseline_share", format!("{:.4}", sc.baseline_share))
    .annotate("fair_share", format!("{:.4}", sc.fair))
    .annotate("expected_requests", format!("{:.0}", sc.expected))
    .annotate("ratio", ratio_2dp(sc.ratio))
    .annotate("z", format!("{:.2}", sc.z))
    .annotate("z_threshold", format!("{:.2}", sc.z_star))
    .annotate("cusum", format!("{:.2}", sc.cusum))
    .annotate("evidence", format!("{:.2}", sc.evidence.min(1.0)))
    .annotate(
        "requests_per_second",
        format!("{:.1}", fig.requests_per_second),
    )
    .annotate("attribution", fig.attribution.as_str())
    .annotate("proven_by", fig.proven_by);
    if let Some((key, share)) = &fig.top_key {
        f = f
            .annotate("top_key", key_label(key))
            .annotate("top_key_share", format!("{share:.4}"));
    }
    f
}

fn description(group: &str, shard: &str, fig: &Figures) -> String {
    let (group, shard) = (quote(group), quote(shard));
    let sc = &fig.score;
    let ratio_text = if sc.ratio.is_finite() {
        format!(
            "{}x its usual share ({})",
            num(sc.ratio),
            pct(sc.baseline_share)
        )
    } else {
        "a shard that usually takes no load".to_owned()
    };
    let key_text = match &fig.top_key {
        Some((key, share)) => format!("; key {} is {} of its traffic", quote_key(key), pct(*share)),
        None => "; no keys reported".to_owned(),
    };
    format!(
        "shard {shard} takes {} of {group}'s load, {ratio_text} and {}x its fair share ({}){key_text}",
        pct(sc.share),
        num(sc.share / sc.fair),
        pct(sc.fair)
    )
}

impl DetectorKind for HotShard {
    const ALERTNAME: &'static str = "HotShard";
    const KEY: &'static str = "hot_shard";
    type Config = HotShardConfig;

    fn new(cfg: HotShardConfig, window_secs: f64) -> Self {
        HotShard {
            time: Timing::new(&cfg, window_secs),
            cfg,
            state: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::ObservationRef;
    use crate::snapshot::WindowSnapshot;
    use crate::window::{WindowConfig, Windows};

    type Rig = crate::detect::testkit::Rig<HotShard>;

    /// Windows built from per-shard counts.
    impl Rig {
        /// One window with `counts[i]` requests on shard `s{i}` (with noise when `noise`);
        /// `key` puts a key on shard 0's requests. Returns the findings.
        fn window(&mut self, counts: &[f64], noise: bool, key: Option<&str>) -> Vec<Finding> {
            for (i, &m) in counts.iter().enumerate() {
                let n = if noise {
                    self.noisy(m)
                } else {
                    m.round() as u64
                };
                if n == 0 {
                    continue;
                }
                let name = format!("s{i:02}");
                let mut o = ObservationRef::new("db", &name);
                o.count = n;
                if i == 0 {
                    o.key = key;
                }
                self.record(&o);
            }
            self.close()
        }
    }

    fn uniform(n: usize, per_shard: f64) -> Vec<f64> {
        vec![per_shard; n]
    }

    #[test]
    fn a_three_fold_step_fires_on_the_third_window_with_figures() {
        let mut rig = Rig::new(HotShardConfig::default());
        for _ in 0..40 {
            assert!(rig.window(&uniform(16, 200.0), true, Some("")).is_empty());
        }
        let mut hot = uniform(16, 200.0);
        hot[0] = 600.0;
        // Three full windows outlast a 20 s burst (docs/adr/003); two do not.
        for _ in 0..2 {
            assert!(rig.window(&hot, true, Some("")).is_empty());
        }
        let f = rig.window(&hot, true, Some(""));
        assert_eq!(f.len(), 1, "{f:?}");
        let f = &f[0];
        assert_eq!(f.labels["group"], "db");
        assert_eq!(f.labels["shard"], "s00");
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.annotations["top_key"], "(empty)");
        assert_eq!(f.annotations["attribution"], "hot_key");
        let ratio: f64 = f.annotations["ratio"].parse().unwrap();
        assert!((2.4..3.4).contains(&ratio), "{ratio}");
        assert!(f.annotations["description"].contains("key (empty) is 100.0% of its traffic"));
        let z: f64 = f.annotations["z"].parse().unwrap();
        let zt: f64 = f.annotations["z_threshold"].parse().unwrap();
        assert!(z > zt);
    }

    #[test]
    fn score_and_cusum_step_follow_the_formulas() {
        let cfg = HotShardConfig::default();
        let gw = GroupWindow {
            n: 16.0,
            total: 3400.0,
            z_star: hot_shard_z_threshold(16, cfg.family_alpha),
            dispersion: 0.0,
            quiet_dispersion: 0.0,
        };
        // Baseline load ratio 1 (a fair shard), no over-dispersion learned: Poisson variance.
        let sc = score(&ShardState::default(), 1.0, &gw, 400.0);
        assert_eq!(sc.expected, 212.5);
        assert_eq!(
            (sc.share, sc.fair, sc.baseline_share),
            (400.0 / 3400.0, 1.0 / 16.0, 1.0 / 16.0)
        );
        assert!((sc.ratio - 400.0 / 212.5).abs() < 1e-12);
        // No over-dispersion learned: Poisson's transform, 2(√c − √e).
        assert!((sc.z - 2.0 * (400f64.sqrt() - 212.5f64.sqrt())).abs() < 1e-12);
        // Far over z*: the step is capped at h/k.
        let needed = |w: f64| Timing::new(&cfg, w).persistence.windows;
        let k = needed(10.0);
        assert_eq!(k, 4);
        assert_eq!(needed(5.0), 6);
        assert_eq!(needed(30.0), 4);
        assert_eq!(cusum_step(&cfg, k, &sc), cfg.cusum_threshold / 4.0);
        // Under min_ratio the sum only drains.
        let calm = Score {
            ratio: 1.1,
            z: 3.0,
            ..sc
        };
        assert_eq!(cusum_step(&cfg, k, &calm), -cfg.cusum_slack);
        // A shard that usually takes nothing has an infinite ratio.
        assert_eq!(
            score(&ShardState::default(), 0.0, &gw, 5.0).ratio,
            f64::INFINITY
        );
    }

    #[test]
    fn figures_attribute_to_the_top_key_only_when_it_dominates_the_shard() {
        let cfg = HotShardConfig::default();
        let sc = Score {
            share: 0.5,
            fair: 0.25,
            expected: 100.0,
            baseline_share: 0.25,
            ratio: 2.0,
            z: 10.0,
            z_star: 4.0,
            cusum: 0.0,
            evidence: 0.0,
        };
        for (hot, attribution) in [(60, Attribution::HotKey), (40, Attribution::HotRange)] {
            let mut w = Windows::new(WindowConfig::default(), 0.0);
            let mut o = ObservationRef::new("db", "s0");
            o.key = Some("k");
            o.count = hot;
            w.record(&o);
            o.key = None;
            o.count = 100 - hot;
            w.record(&o);
            let snap = w.close(10.0);
            let fig = figures(&cfg, &snap.groups[0].shards[0], &sc, Path::ZCusum);
            assert_eq!(fig.attribution, attribution);
            let (key, share) = fig.top_key.unwrap();
            assert_eq!((key.as_str(), share), ("k", hot as f64 / 100.0));
            assert_eq!(fig.requests_per_second, 10.0);
            assert_eq!(fig.score, sc);
        }
    }

    #[test]
    fn no_verdict_during_warm_up_however_skewed() {
        let mut rig = Rig::new(HotShardConfig::default());
        let mut hot = uniform(8, 100.0);
        hot[0] = 5000.0;
        for _ in 0..29 {
            assert!(rig.window(&uniform(8, 100.0), false, None).is_empty());
        }
        // The 30th window completes the warm-up; it is learned, not judged.
        assert!(rig.window(&hot, false, None).is_empty());
    }

    #[test]
    fn a_stable_skewed_shard_never_fires() {
        let mut rig = Rig::new(HotShardConfig::default());
        let mut skewed = uniform(64, 100.0);
        skewed[0] = 800.0;
        skewed[1] = 400.0;
        for _ in 0..500 {
            assert!(rig.window(&skewed, true, None).is_empty());
        }
    }

    #[test]
    fn a_20_s_burst_touching_three_windows_does_not_fire_at_any_alignment() {
        // A 5x burst of 20 s starting a tenth, half or nine tenths into a window: for half,
        // 3x, 5x, 3x. Even the alignment that leaves the third window nearly full (1.4x,
        // 5x, 4.6x) holds two windows' worth of excess, not three.
        for part in [0.1, 0.5, 0.9] {
            let mut rig = Rig::new(HotShardConfig::default());
            for _ in 0..40 {
                rig.window(&uniform(16, 300.0), true, None);
            }
            for cover in [part, 1.0, 1.0 - part] {
                let mut burst = uniform(16, 300.0);
                burst[3] = 300.0 * (1.0 + 4.0 * cover);
                assert!(rig.window(&burst, true, None).is_empty(), "{part}");
            }
            for _ in 0..20 {
                assert!(rig.window(&uniform(16, 300.0), true, None).is_empty());
            }
        }
    }

    /// The window at which a shard of 16 with `counts` (its share of each window, 1.0 its fair
    /// share of 300) first holds, at windows of `window_secs`, after a warm-up at its fair share.
    fn first_hold(window_secs: f64, counts: &[f64]) -> Option<usize> {
        let cfg = HotShardConfig::default();
        let d = HotShard::new(cfg.clone(), window_secs);
        let mut st = ShardState::default();
        let gw = |c: f64| GroupWindow {
            n: 16.0,
            total: 15.0 * 300.0 + c,
            z_star: hot_shard_z_threshold(16, cfg.family_alpha),
            dispersion: 0.0,
            quiet_dispersion: 0.0,
        };
        for _ in 0..40 {
            d.assess(&mut st, &gw(300.0), 300, (false, false));
        }
        counts.iter().position(|&m| {
            let c = 300.0 * m;
            d.assess(&mut st, &gw(c), c as u64, (false, false))
                .is_some()
        })
    }

    #[test]
    fn bursts_are_tolerated_in_seconds_at_any_window_length() {
        // 5 s windows: a 5x burst of 20 s touches five windows, at any alignment.
        for part in [0.1, 0.5, 0.9] {
            let burst = [1.0 + 4.0 * part, 5.0, 5.0, 5.0, 5.0 - 4.0 * part, 1.0, 1.0];
            assert_eq!(first_hold(5.0, &burst), None, "{part}");
        }
        // ...and a step proves itself once it holds 4.5 windows' worth: its fifth window.
        assert_eq!(first_hold(5.0, &[5.0; 8]), Some(4));
        // 30 s windows: a 20 s burst touches two windows, two thirds of one at most.
        for part in [0.0, 0.33, 0.67] {
            let burst = [1.0 + 4.0 * part, 1.0 + 4.0 * (2.0 / 3.0 - part), 1.0, 1.0];
            assert_eq!(first_hold(30.0, &burst), None, "{part}");
        }
        // ...and a step holds on its third window, by count: no burst makes three.
        assert_eq!(first_hold(30.0, &[5.0; 5]), Some(2));
        // A step that starts half way into a window (3x, then 5x).
        assert_eq!(first_hold(30.0, &[3.0, 5.0, 5.0, 5.0]), Some(2));
        // 10 s windows as before: the third window of a step on a boundary.
        assert_eq!(first_hold(10.0, &[5.0; 5]), Some(2));
    }

    #[test]
    fn a_shard_is_judged_on_its_groups_dispersion_when_its_own_is_lower() {
        let cfg = HotShardConfig::default();
        let d = HotShard::new(cfg.clone(), 10.0);
        let mut st = ShardState::default();
        let gw = |c: f64, dispersion: f64| GroupWindow {
            n: 16.0,
            total: 15.0 * 300.0 + c,
            z_star: hot_shard_z_threshold(16, cfg.family_alpha),
            dispersion,
            quiet_dispersion: 0.0,
        };
        for _ in 0..40 {
            d.assess(&mut st, &gw(300.0, 0.0), 300, (false, false));
        }
        // Its own counts were exact (g < 0): Poisson, a doubling is 10 sigma.
        let calm = score(&st, 1.0, &gw(600.0, 0.0), 600.0);
        assert!(calm.z > 9.0, "{calm:?}");
        // In a group whose shards vary by e^(0.5 Z) (g about 0.28) it is about ln(c/e)/√g:
        // ln 1.88 / 0.53.
        let bursty = score(&st, 1.0, &gw(600.0, 0.28), 600.0);
        assert!((1.0..1.4).contains(&bursty.z), "{bursty:?}");
        let mut states = BTreeMap::new();
        for (name, g, n) in [("a", 0.1, 100), ("b", 0.4, 300)] {
            let mut st = ShardState::default();
            for _ in 0..n {
                st.dispersion.update(g, 1.0 / 360.0);
            }
            states.insert(name, st);
        }
        let pooled = group_dispersion(states.values());
        assert!(
            (pooled - (0.1 * 100.0 + 0.4 * 300.0) / 400.0).abs() < 1e-9,
            "{pooled}"
        );
        assert_eq!(group_dispersion(std::iter::empty()), 0.0);
    }

    #[test]
    fn the_dispersion_is_learned_unbiased_from_a_start_inside_a_window() {
        // 16 Poisson shards (no over-dispersion) at about 300 requests a window, seen first
        // by an agent that started with 5% of a window left. What the group's dispersion should
        // learn is a shard's variance given the group's total, multinomial: e(1 − 1/n), so
        // g = −1/(n·e) (−2.1e-4). The first window teaches nothing, and the baseline's own
        // noise is taken out of the deviations.
        let cfg = HotShardConfig::default();
        let d = HotShard::new(cfg.clone(), 10.0);
        let mut rng = crate::prng::SplitMix64::new(7);
        let mut learned = Vec::new();
        for _ in 0..20 {
            let mut states: BTreeMap<usize, ShardState> = BTreeMap::new();
            for w in 0..32 {
                let m = if w == 0 { 15.0 } else { 300.0 };
                let counts: Vec<f64> = (0..16)
                    .map(|_| crate::detect::testkit::poisson(&mut rng, m) as f64)
                    .collect();
                let total: f64 = counts.iter().sum();
                let gw = GroupWindow {
                    n: 16.0,
                    total,
                    z_star: hot_shard_z_threshold(16, cfg.family_alpha),
                    dispersion: group_dispersion(states.values()),
                    quiet_dispersion: 0.0,
                };
                for (i, c) in counts.iter().enumerate() {
                    let st = states.entry(i).or_default();
                    d.assess(st, &gw, *c as u64, (false, false));
                }
            }
            learned.push(group_dispersion(states.values()));
        }
        let mean = learned.iter().sum::<f64>() / learned.len() as f64;
        // One group's estimate over 31 windows of 16 shards spreads by about
        // sqrt(2/496)/300 = 2e-4, 5e-5 over 20 trials. Without the correction for the baseline's
        // noise the mean is 4e-4 higher; learned from the first window, 3e-3.
        let truth = -1.0 / (16.0 * 300.0);
        assert!((mean - truth).abs() < 1e-4, "{mean} {learned:?}");
    }

    #[test]
    fn diurnal_swings_of_the_whole_group_do_not_fire() {
        let mut rig = Rig::new(HotShardConfig::default());
        for w in 0..400 {
            let scale = 1.0 + 0.5 * (w as f64 / 40.0).sin();
            let mut counts = uniform(32, 150.0 * scale);
            counts[5] *= 3.0;
            assert!(rig.window(&counts, true, None).is_empty(), "window {w}");
        }
    }

    #[test]
    fn a_quiet_shard_is_judged_across_windows_not_in_one() {
        let mut rig = Rig::new(HotShardConfig::default());
        for _ in 0..40 {
            rig.window(&uniform(16, 200.0), true, None);
        }
        // The group drops to 5 requests per shard, too few for one window's verdict, and shard
        // 0 takes 4x: no window proves it alone (the evidence needs five), five do.
        let mut low = uniform(16, 5.0);
        low[0] = 20.0;
        for w in 0..4 {
            assert!(rig.window(&low, false, None).is_empty(), "window {w}");
        }
        let f = rig.window(&low, false, None);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].labels["shard"], "s00");
        assert_eq!(f[0].annotations["evidence"], "1.00");
    }

    #[test]
    fn quiet_shards_at_their_usual_load_are_never_reported() {
        // 64 shards at 1.5 requests a window on average, Poisson, one of them usually 3x the
        // others: nothing in 2,000 windows (5.6 hours), though every window is judged by the
        // evidence across windows alone.
        let mut rig = Rig::new(HotShardConfig::default());
        let mut counts = uniform(64, 1.5);
        counts[3] = 4.5;
        for w in 0..2000 {
            assert!(rig.window(&counts, true, None).is_empty(), "window {w}");
        }
        // ...and a shard that goes to 5x its usual share is found within a minute or so.
        counts[7] = 7.5;
        let found = (0..12).find(|_| !rig.window(&counts, true, None).is_empty());
        assert!(found.is_some_and(|w| w >= 4), "{found:?}");
    }

    #[test]
    fn a_scale_in_does_not_make_the_remaining_shards_hot() {
        let mut rig = Rig::new(HotShardConfig::default());
        let mut before = uniform(64, 100.0);
        before[0] = 400.0;
        for _ in 0..40 {
            rig.window(&before, true, None);
        }
        // A quarter of the shards go away; their load spreads evenly over the rest. Shard 0
        // keeps its load ratio (4x the mean), so it is not hot.
        let mut after = uniform(48, 100.0 * 64.0 / 48.0);
        after[0] = 400.0 * 64.0 / 48.0;
        for _ in 0..30 {
            assert!(rig.window(&after, true, None).is_empty());
        }
    }

    #[test]
    fn the_baseline_is_frozen_while_firing_and_the_alert_clears_after_recovery() {
        let cfg = HotShardConfig::default();
        let mut rig = Rig::new(cfg.clone());
        for _ in 0..40 {
            rig.window(&uniform(16, 200.0), true, None);
        }
        let mut hot = uniform(16, 200.0);
        hot[2] = 1000.0;
        // An hour-long incident: it keeps holding because the baseline does not learn it.
        for w in 0..360 {
            let f = rig.window(&hot, true, None);
            if w >= 3 {
                assert_eq!(f.len(), 1, "window {w}");
            }
        }
        let b = rig.det.state["db"]["s02"].load.raw().unwrap();
        assert!((b - 1.0).abs() < 0.1, "baseline load ratio moved to {b}");
        // Recovery: the condition stops at once.
        assert!(rig.window(&uniform(16, 200.0), true, None).is_empty());
    }

    #[test]
    fn a_slow_ramp_fires_before_the_shard_triples() {
        let mut rig = Rig::new(HotShardConfig::default());
        for _ in 0..40 {
            rig.window(&uniform(64, 100.0), true, None);
        }
        let mut fired_at = None;
        for w in 0..60 {
            let mut c = uniform(64, 100.0);
            c[9] = 100.0 * (1.0 + w as f64 * 0.05);
            if !rig.window(&c, true, None).is_empty() {
                fired_at = Some(w);
                break;
            }
        }
        let w = fired_at.expect("the ramp fires");
        assert!(
            w <= 40,
            "fired at ramp window {w} (ratio {})",
            1.0 + w as f64 * 0.05
        );
    }

    #[test]
    fn the_cusum_catches_a_shift_too_small_for_the_threshold_rule() {
        let mut rig = Rig::new(HotShardConfig::default());
        let mut base = uniform(16, 30.0);
        base[0] = 45.0;
        for _ in 0..40 {
            rig.window(&base, true, None);
        }
        // 1.6x its usual load: z about 3.5 against z* = 3.84, so the threshold rule alone
        // rarely sees four windows in a row; the CUSUM accumulates about 2.5 per window.
        let mut shifted = base.clone();
        shifted[0] = 72.0;
        let mut fired = None;
        for w in 0..30 {
            let f = rig.window(&shifted, true, None);
            if let Some(f) = f.first() {
                fired = Some((w, f.annotations["cusum"].clone()));
                break;
            }
        }
        let (w, cusum) = fired.expect("the CUSUM fires");
        assert!(w <= 12, "fired at shift window {w}");
        assert_eq!(cusum, "10.00");
    }

    #[test]
    fn departed_shards_and_groups_are_forgotten() {
        let mut rig = Rig::new(HotShardConfig::default());
        rig.window(&uniform(8, 100.0), false, None);
        assert_eq!(rig.det.tracked(), 8);
        // Shards idle for more than shard_idle_windows (6) leave the snapshot.
        for _ in 0..8 {
            rig.window(&uniform(4, 100.0), false, None);
        }
        assert_eq!(rig.det.tracked(), 4);
        let empty = WindowSnapshot::empty(1e9);
        rig.eval(&empty);
        assert!(rig.det.state.is_empty());
    }

    #[test]
    fn check_names_every_bad_field() {
        let cfg = HotShardConfig {
            family_alpha: 0.0,
            min_ratio: 0.5,
            warmup_windows: 0,
            consecutive_windows: 0,
            clear_ratio: 2.0,
            hot_key_share: 1.5,
            ..HotShardConfig::default()
        };
        let mut v = Vec::new();
        cfg.check(&mut Problems::new("detectors.hot_shard", &mut v));
        let fields: Vec<&str> = v.iter().map(|p| p.field.as_str()).collect();
        for f in [
            "detectors.hot_shard.family_alpha",
            "detectors.hot_shard.min_ratio",
            "detectors.hot_shard.warmup_windows",
            "detectors.hot_shard.consecutive_windows",
            "detectors.hot_shard.clear_ratio",
            "detectors.hot_shard.hot_key_share",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
        let mut v = Vec::new();
        HotShardConfig::default().check(&mut Problems::new("d", &mut v));
        assert!(v.is_empty(), "{v:?}");
    }
}
