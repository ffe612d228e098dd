//! `CapacityHeadroom`: a shard runs near its capacity (labels `group`, `shard`). It judges the
//! shards that have a configured capacity or report their own saturation; without either
//! skewwatch knows shares but not limits.
//!
//! Utilisation is the highest of the request rate over the configured rate (judged at its
//! lower noise bound), in-flight requests over the configured limit and the shard's own
//! reading; a line through the latest windows projects it forward. Its firing paths, as the
//! `proven_by` annotation names them, each after `consecutive_windows` over windows:
//! `step_shape` (the streak's utilisation outlasted a tolerated burst) and `long_streak`
//! (longer than a burst can stretch it); and `rate_cusum` (the request rate's evidence across
//! windows, [`crate::evidence::cusum`]).
//!
//! docs/detectors.md ("CapacityHeadroom") gives the thresholds and why 0.8 and 0.9, the
//! defaults and why ordinary traffic does not fire it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, Problems, RuleSettings, Visit, num, pct,
};
use crate::evidence::cusum::{Cusum, CusumSettings, Poisson, burst_proof_windows};
use crate::evidence::shape::{StreakShape, longest_burst_streak};
use crate::observation::quote;
use crate::snapshot::{GroupSnapshot, ShardSnapshot};

/// `detectors.capacity_headroom` settings. Defaults are those of `rules/skewwatch.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapacityHeadroomConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Configured shard capacities; shards without one are judged on their reported
    /// utilisation alone.
    pub capacities: Vec<Capacity>,
    /// Utilisation at which a window is over.
    pub warn_utilisation: f64,
    /// Utilisation at which the finding is `critical`.
    pub critical_utilisation: f64,
    /// Consecutive over windows before the condition holds.
    pub consecutive_windows: u32,
    /// Standard deviations of Poisson noise taken off a window's request count before its
    /// rate is judged against `max_requests_per_second` (0 judges the raw rate).
    pub noise_sigmas: f64,
    /// Longest burst over the line that must not fire: the streak must also hold more than
    /// this much of over-line utilisation (docs/adr/003), or outlast any such burst by count.
    pub tolerated_burst_secs: f64,
    /// Windows in the linear fit of the projection.
    pub projection_windows: usize,
    /// A projected saturation within this many seconds makes a window over; 0 disables.
    pub projection_horizon_secs: f64,
    /// Utilisation below which a projection is not acted on.
    pub projection_min_utilisation: f64,
    /// The projection uses the fitted slope less this many of its standard errors: a trend
    /// must be clear, not read into steps or noise (0 projects the fitted slope itself).
    pub projection_sigmas: f64,
    /// False alarms per shard-hour the sequential test of the request rate allows (the rate
    /// at `warn_utilisation` against `critical_utilisation`, accumulated across windows).
    pub false_alarms_per_shard_hour: f64,
}

/// A shard's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Group name.
    pub group: String,
    /// Shard name, or `*` for every shard of the group.
    pub shard: String,
    /// Requests per second the shard can serve.
    #[serde(default)]
    pub max_requests_per_second: Option<f64>,
    /// Requests the shard can have in flight at once (its worker or connection pool).
    #[serde(default)]
    pub max_inflight: Option<f64>,
}

impl Default for CapacityHeadroomConfig {
    fn default() -> Self {
        CapacityHeadroomConfig {
            rule: RuleSettings::new(Severity::Warning, 0.0, 60.0),
            capacities: Vec::new(),
            warn_utilisation: 0.8,
            critical_utilisation: 0.9,
            consecutive_windows: 3,
            noise_sigmas: 2.0,
            tolerated_burst_secs: 20.0,
            projection_windows: 10,
            projection_horizon_secs: 600.0,
            projection_min_utilisation: 0.5,
            projection_sigmas: 4.0,
            false_alarms_per_shard_hour: 1e-4,
        }
    }
}

impl DetectorSettings for CapacityHeadroomConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    /// Checks every field, reporting every problem with why.
    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        check_capacities(&self.capacities, p);
        p.range("warn_utilisation", self.warn_utilisation, 0.01, 10.0);
        p.range(
            "critical_utilisation",
            self.critical_utilisation,
            0.01,
            10.0,
        );
        if self.critical_utilisation < self.warn_utilisation {
            p.fail(
                "critical_utilisation",
                format!(
                    "{} is below warn_utilisation ({}): critical must not come before warning",
                    self.critical_utilisation, self.warn_utilisation
                ),
            );
        }
        p.windows("consecutive_windows", self.consecutive_windows);
        p.range("noise_sigmas", self.noise_sigmas, 0.0, 10.0);
        p.burst("tolerated_burst_secs", self.tolerated_burst_secs);
        // A line through two points has no residual to speak of: a trend needs three.
        p.windows_from("projection_windows", self.projection_windows, 3);
        p.range(
            "projection_horizon_secs",
            self.projection_horizon_secs,
            0.0,
            7.0 * 86_400.0,
        );
        p.range(
            "projection_min_utilisation",
            self.projection_min_utilisation,
            0.0,
            10.0,
        );
        p.range("projection_sigmas", self.projection_sigmas, 0.0, 100.0);
        p.false_alarm_rate(
            "false_alarms_per_shard_hour",
            self.false_alarms_per_shard_hour,
        );
    }
}

/// Checks each capacity entry, and that no group and shard is listed twice.
fn check_capacities(capacities: &[Capacity], p: &mut Problems<'_>) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, c) in capacities.iter().enumerate() {
        if c.group.is_empty() {
            p.fail(
                &format!("capacities[{i}].group"),
                "is empty: name the group",
            );
        }
        if c.shard.is_empty() {
            p.fail(
                &format!("capacities[{i}].shard"),
                "is empty: name the shard, or `*` for every shard of the group",
            );
        }
        for (field, limit) in [
            ("max_requests_per_second", c.max_requests_per_second),
            ("max_inflight", c.max_inflight),
        ] {
            if let Some(limit) = limit
                && !(limit.is_finite() && limit > 0.0)
            {
                p.fail(
                    &format!("capacities[{i}].{field}"),
                    format!("{limit} is not a positive number"),
                );
            }
        }
        if c.max_requests_per_second.is_none() && c.max_inflight.is_none() {
            p.fail(
                &format!("capacities[{i}]"),
                "has no limit: give max_requests_per_second, max_inflight or both",
            );
        }
        if !seen.insert((c.group.as_str(), c.shard.as_str())) {
            p.fail(
                &format!("capacities[{i}]"),
                format!(
                    "group `{}` shard `{}` is listed twice: keep one entry",
                    c.group, c.shard
                ),
            );
        }
    }
}

impl CapacityHeadroomConfig {
    /// The capacity of `shard` of `group`: its own entry, else the group's `*` entry.
    fn capacity_of(&self, group: &str, shard: &str) -> Option<&Capacity> {
        let exact = self
            .capacities
            .iter()
            .find(|c| c.group == group && c.shard == shard);
        exact.or_else(|| {
            self.capacities
                .iter()
                .find(|c| c.group == group && c.shard == "*")
        })
    }

    /// The shard's utilisation and what it was read from, or `None` when nothing is known.
    fn utilisation_of(&self, group: &str, s: &ShardSnapshot) -> Option<Reading> {
        let cap = self.capacity_of(group, &s.shard);
        let by_rate = cap
            .and_then(|c| c.max_requests_per_second)
            .map(|m| (s.traffic.requests_per_second / m, Source::RequestRate));
        // Judged on the rate's lower noise bound; the other signals are readings, not counts.
        let bound = |sigmas: f64| {
            move |(u, source): (f64, Source)| match source {
                Source::RequestRate => u * poisson_bound_fraction(s.requests, sigmas),
                Source::Inflight | Source::Reported => u,
            }
        };
        let by_inflight = cap
            .and_then(|c| c.max_inflight)
            .zip(s.inflight)
            .map(|(m, n)| (n / m, Source::Inflight));
        let reported = s.utilisation.map(|u| (u, Source::Reported));
        let readings = [by_rate, by_inflight, reported];
        let (u, source) = readings
            .into_iter()
            .flatten()
            .max_by(|a, b| a.0.total_cmp(&b.0))?;
        let highest = |sigmas: f64| {
            readings
                .into_iter()
                .flatten()
                .map(bound(sigmas))
                .fold(0.0, f64::max)
        };
        Some(Reading {
            u,
            u_judged: highest(-self.noise_sigmas),
            u_high: highest(self.noise_sigmas),
            source,
            capacity: cap.and_then(|c| c.max_requests_per_second),
        })
    }
}

/// Which signal gave a shard's utilisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    RequestRate,
    Inflight,
    Reported,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::RequestRate => "requests_per_second",
            Source::Inflight => "inflight",
            Source::Reported => "reported",
        }
    }
}

/// A shard's utilisation in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    /// The highest utilisation, as measured.
    u: f64,
    /// The highest utilisation the window proves: the request rate's share taken at its lower
    /// noise bound ([`poisson_bound_fraction`]).
    u_judged: f64,
    /// The same at the upper noise bound.
    u_high: f64,
    source: Source,
    /// The configured request rate capacity, when there is one.
    capacity: Option<f64>,
}

/// What the detector remembers about one shard with a capacity.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShardState {
    streak: u32,
    /// Utilisation over the streak's windows: how much of it a burst could explain.
    #[serde(default)]
    shape: StreakShape,
    /// (window end, utilisation), oldest first, at most `projection_windows`.
    history: VecDeque<(f64, f64)>,
    /// Evidence that the request rate is over the line, accumulated across windows.
    #[serde(default)]
    rate_cusum: Cusum,
}

/// The `CapacityHeadroom` detector. See the module docs.
#[derive(Debug, Clone)]
pub struct CapacityHeadroom {
    cfg: CapacityHeadroomConfig,
    window_secs: f64,
    /// The sequential test of the request rate: `None` when `critical_utilisation` is not
    /// above `warn_utilisation` (no alternative to test against).
    rate_test: Option<(Poisson, CusumSettings)>,
    state: BTreeMap<String, BTreeMap<String, ShardState>>,
}

impl GroupDetector for CapacityHeadroom {
    type State = BTreeMap<String, ShardState>;

    fn states(&self) -> &BTreeMap<String, Self::State> {
        &self.state
    }

    fn states_mut(&mut self) -> &mut BTreeMap<String, Self::State> {
        &mut self.state
    }

    /// A group with neither a configured capacity nor a shard reporting its utilisation has
    /// nothing to judge, and nothing to remember.
    fn visit(&self, g: &GroupSnapshot) -> Visit {
        let configured = self.cfg.capacities.iter().any(|c| c.group == g.group);
        if configured || g.shards.iter().any(|s| s.utilisation.is_some()) {
            Visit::Judge
        } else {
            Visit::Forget
        }
    }

    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        states: &mut Self::State,
        out: &mut Vec<Finding>,
    ) {
        let (cfg, window_secs, now) = (&self.cfg, self.window_secs, ctx.now());
        for s in g.tracked_shards() {
            let Some(reading) = cfg.utilisation_of(&g.group, s) else {
                states.remove(&s.shard);
                continue;
            };
            let st = states.entry(s.shard.clone()).or_default();
            let u = reading.u;
            st.history.push_back((now, u));
            while st.history.len() > cfg.projection_windows {
                st.history.pop_front();
            }
            let eta = (st.history.len() >= cfg.projection_windows)
                .then(|| saturation_in(&st.history, now, cfg.projection_sigmas))
                .flatten();
            let judged = reading.u_judged;
            let projected = cfg.projection_horizon_secs > 0.0
                && judged >= cfg.projection_min_utilisation
                && eta.is_some_and(|t| t <= cfg.projection_horizon_secs);
            let over = judged >= cfg.warn_utilisation || projected;
            st.streak = if over { st.streak + 1 } else { 0 };
            st.shape.push_bounded(over, judged, reading.u_high);
            // Beside the windows' own verdicts, the request rate's evidence across windows: a
            // shard whose windows are each too small to prove it over the line proves it in
            // a few more.
            let accumulated = match (self.rate_test, reading.capacity) {
                (Some((test, seq)), Some(rps)) => {
                    let expected = cfg.warn_utilisation * rps * window_secs;
                    st.rate_cusum.push(test.llr(s.requests, expected), &seq);
                    st.rate_cusum.holds(&seq)
                }
                _ => {
                    st.rate_cusum.reset();
                    false
                }
            };
            let ruled = (st.streak >= cfg.consecutive_windows)
                .then(|| outlasted_a_burst(st, cfg.tolerated_burst_secs, window_secs))
                .flatten();
            if let Some(path) = ruled.or(accumulated.then_some("rate_cusum")) {
                let f = render(&g.group, &s.shard, &Figures::of(cfg, s, reading, eta));
                out.push(f.annotate("proven_by", path));
            }
        }
    }

    /// The projection fits utilisation against window ends; after a clock step those ends are
    /// no longer evenly spaced, so the history starts over.
    fn after_clock_step(shards: &mut Self::State) {
        for s in shards.values_mut() {
            s.history.clear();
        }
    }
}

/// Why the streak cannot be a tolerated burst of `tolerated` seconds at windows of `w`, if it
/// cannot: its utilisation fills more windows than the burst could (`step_shape`, the shape of
/// the evidence), or it is longer than any such burst can stretch a streak (`long_streak`: its
/// length in windows, plus a partial window at each end).
fn outlasted_a_burst(st: &ShardState, tolerated: f64, w: f64) -> Option<&'static str> {
    if st.shape.outlasts(tolerated, w) {
        Some("step_shape")
    } else if st.streak > longest_burst_streak(tolerated, w) {
        Some("long_streak")
    } else {
        None
    }
}

/// The fraction of a window's `requests` its rate is judged at: (n + z sqrt n) / n, floored at
/// 0; z = −`noise_sigmas` for the lower bound. With z = −2, at 10 requests a window it is 0.37
/// (a handful of requests proves little), at 100 0.8, at 10,000 0.98: a well-measured rate is
/// judged at nearly its value. Ordinary Poisson noise crosses a 2-sigma bound in about 2% of
/// windows, so three such windows in a row about once in 10^5. The upper bound (z = +2) is the
/// peak the shape of a streak is measured against.
fn poisson_bound_fraction(requests: u64, z: f64) -> f64 {
    if requests == 0 {
        return 0.0;
    }
    let n = requests as f64;
    ((n + z * n.sqrt()) / n).max(0.0)
}

/// Seconds from `now` until the least-squares line through `history` reaches utilisation 1,
/// its slope taken `sigmas` standard errors low; 0 when the line is already there; `None` when
/// that slope is not positive.
///
/// The standard error is the residuals' (n − 2 degrees of freedom) over √Σ(t − t̄)². A steady
/// ramp fits its line closely and keeps nearly all its slope; load that moves in steps or noise
/// fits it badly, and a slope read into a few steps (the benchmark's one-hour "day" rises in
/// one-minute steps) is not a trend to page on.
fn saturation_in(history: &VecDeque<(f64, f64)>, now: f64, sigmas: f64) -> Option<f64> {
    let n = history.len() as f64;
    if n < 2.0 {
        return None;
    }
    // Times relative to `now` keep the sums well conditioned at unix-epoch magnitudes.
    let (st, su) = history
        .iter()
        .fold((0.0, 0.0), |(a, b), (t, u)| (a + (t - now), b + u));
    let (mt, mu) = (st / n, su / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (t, u) in history {
        let dt = t - now - mt;
        sxy += dt * (u - mu);
        sxx += dt * dt;
    }
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let at_now = mu - slope * mt;
    // The residuals' standard deviation, and with it the standard errors of the slope and of
    // the line's value now (s·√(1/n + t̄²/Σ(t − t̄)²), t̄ the mean time before now).
    let s = if n > 2.0 && sigmas > 0.0 {
        let rss: f64 = history
            .iter()
            .map(|(t, u)| (u - (mu + slope * (t - now - mt))).powi(2))
            .sum();
        (rss / (n - 2.0)).sqrt()
    } else {
        0.0
    };
    // A burst at the end of the history lifts the line's end over 1 but fits it badly.
    if at_now - sigmas * s * (1.0 / n + mt * mt / sxx).sqrt() >= 1.0 {
        return Some(0.0);
    }
    let low = slope - sigmas * s / sxx.sqrt();
    (low > 0.0).then(|| (1.0 - at_now) / low)
}

/// Everything a `CapacityHeadroom` finding reports; [`render`] turns it into text.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    /// `critical` at or over `critical_utilisation`, else the configured severity.
    severity: Severity,
    /// The highest of the shard's utilisations.
    utilisation: f64,
    /// The signal that gave it.
    source: Source,
    /// The configured capacity, requests per second, when there is one.
    capacity: Option<f64>,
    requests_per_second: f64,
    /// The highest in-flight reading, when the shard reported one.
    inflight: Option<f64>,
    /// Seconds until the fitted trend reaches the capacity, when it rises.
    saturation_in: Option<f64>,
}

impl Figures {
    fn of(cfg: &CapacityHeadroomConfig, s: &ShardSnapshot, r: Reading, eta: Option<f64>) -> Self {
        Figures {
            severity: if r.u >= cfg.critical_utilisation {
                Severity::Critical
            } else {
                cfg.rule.severity
            },
            utilisation: r.u,
            source: r.source,
            capacity: r.capacity,
            requests_per_second: s.traffic.requests_per_second,
            inflight: s.inflight,
            saturation_in: eta,
        }
    }

    /// Requests per second the shard can still take at its configured rate capacity.
    fn headroom(&self) -> Option<f64> {
        self.capacity
            .map(|c| (c - self.requests_per_second).max(0.0))
    }
}

/// The finding for `shard` of `group`: summary, description and the figures as annotations.
fn render(group: &str, shard: &str, fig: &Figures) -> Finding {
    let projection = match fig.saturation_in {
        Some(t) => format!(
            "; at the current trend it saturates in about {}",
            duration(t)
        ),
        None => String::new(),
    };
    let rate = match (fig.capacity, fig.headroom()) {
        (Some(c), Some(h)) => format!(
            "serves {} req/s of its {} req/s capacity ({} req/s headroom)",
            num(fig.requests_per_second),
            num(c),
            num(h)
        ),
        _ => format!("serves {} req/s", num(fig.requests_per_second)),
    };
    let inflight = fig
        .inflight
        .map(|n| format!(" with up to {} requests in flight", num(n)))
        .unwrap_or_default();
    let labels = [("group", group), ("shard", shard)];
    let (group, shard) = (quote(group), quote(shard));
    let mut f = Finding::new(CapacityHeadroom::ALERTNAME, fig.severity, &labels)
        .annotate(
            "summary",
            format!(
                "Shard {shard} of {group} runs at {} of its capacity",
                pct(fig.utilisation)
            ),
        )
        .annotate(
            "description",
            format!(
                "shard {shard} of {group} {rate}{inflight}: {} utilisation, read from {}{projection}",
                pct(fig.utilisation),
                fig.source.as_str().replace('_', " ")
            ),
        )
        .annotate("utilisation", format!("{:.3}", fig.utilisation))
        .annotate("utilisation_source", fig.source.as_str())
        .annotate(
            "requests_per_second",
            format!("{:.1}", fig.requests_per_second),
        );
    if let (Some(c), Some(h)) = (fig.capacity, fig.headroom()) {
        f = f
            .annotate("capacity_requests_per_second", format!("{c}"))
            .annotate("headroom_requests_per_second", format!("{h:.1}"));
    }
    if let Some(n) = fig.inflight {
        f = f.annotate("inflight", format!("{n}"));
    }
    if let Some(t) = fig.saturation_in {
        f = f.annotate("projected_saturation_secs", format!("{t:.0}"));
    }
    f
}

/// "4 min 10 s", "35 s".
fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

impl DetectorKind for CapacityHeadroom {
    const ALERTNAME: &'static str = "CapacityHeadroom";
    const KEY: &'static str = "capacity_headroom";
    type Config = CapacityHeadroomConfig;

    /// Runs even without capacities: a shard may report its own utilisation.
    fn runs(cfg: &CapacityHeadroomConfig) -> bool {
        cfg.rule.enabled
    }

    fn new(cfg: CapacityHeadroomConfig, window_secs: f64) -> Self {
        let rate_test = Poisson::new(cfg.critical_utilisation / cfg.warn_utilisation).map(|t| {
            let k = cfg
                .consecutive_windows
                .max(burst_proof_windows(cfg.tolerated_burst_secs, window_secs));
            (
                t,
                CusumSettings::new(cfg.false_alarms_per_shard_hour, window_secs, k),
            )
        });
        CapacityHeadroom {
            cfg,
            window_secs,
            rate_test,
            state: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::{ObservationRef, ReadingKind, ReadingRef};
    use crate::window::{WindowConfig, Windows};

    /// The readings a shard reports in a window.
    #[derive(Clone, Copy)]
    struct Saturation {
        inflight: Option<f64>,
        utilisation: Option<f64>,
    }

    type Rig = crate::detect::testkit::Rig<CapacityHeadroom>;

    fn cap(group: &str, shard: &str, rps: f64) -> Capacity {
        Capacity {
            group: group.into(),
            shard: shard.into(),
            max_requests_per_second: Some(rps),
            max_inflight: None,
        }
    }

    /// Windows built from request rates and readings, at unix-epoch times.
    impl Rig {
        fn with(capacities: Vec<Capacity>) -> Rig {
            let cfg = CapacityHeadroomConfig {
                capacities,
                ..CapacityHeadroomConfig::default()
            };
            Rig::starting_at(cfg, 1.7e9)
        }

        /// One 10 s window with `rps[i]` requests per second on shard `s{i}` of `db`.
        fn window(&mut self, rps: &[f64]) -> Vec<Finding> {
            for (i, r) in rps.iter().enumerate() {
                let name = format!("s{i}");
                let mut o = ObservationRef::new("db", &name);
                o.count = (r * 10.0).round() as u64;
                if o.count > 0 {
                    self.record(&o);
                }
            }
            self.close()
        }

        /// One window with 20 req/s on `s0`, and the readings `sat` reported for it (twice,
        /// the lower reading last, so the window's highest is what counts).
        fn window_reporting(&mut self, sat: Saturation) -> Vec<Finding> {
            let mut o = ObservationRef::new("db", "s0");
            o.count = 200;
            self.record(&o);
            for scale in [1.0, 0.5] {
                let readings = [
                    (ReadingKind::Inflight, sat.inflight),
                    (ReadingKind::Utilisation, sat.utilisation),
                ];
                for (kind, value) in readings {
                    let Some(value) = value else { continue };
                    self.windows.read(&ReadingRef {
                        ts: None,
                        group: "db",
                        shard: "s0",
                        kind,
                        value: value * scale,
                    });
                }
            }
            self.close()
        }
    }

    #[test]
    fn eighty_five_percent_for_three_windows_warns_and_ninety_five_is_critical() {
        // 8,500 requests a window: judged at 85% less 2 sigma of Poisson noise, 83%.
        let mut rig = Rig::with(vec![cap("db", "*", 1000.0)]);
        assert!(rig.window(&[850.0, 400.0]).is_empty());
        assert!(rig.window(&[850.0, 400.0]).is_empty());
        let f = rig.window(&[850.0, 400.0]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].labels["shard"], "s0");
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].annotations["utilisation"], "0.850");
        let f = rig.window(&[950.0, 400.0]);
        assert_eq!(f[0].severity, Severity::Critical);
        assert!(rig.window(&[500.0, 400.0]).is_empty());
    }

    /// A shard at 60% of a small capacity (20 requests a window at capacity), its counts
    /// Poisson: judged raw, noise takes it over 80% three windows running now and then;
    /// judged at its 2-sigma lower bound, never in 20,000 windows.
    #[test]
    fn poisson_noise_at_a_small_capacity_does_not_fire() {
        let firings = |noise_sigmas: f64| {
            let mut rig = Rig::with(vec![cap("db", "*", 2.0)]);
            rig.det.cfg.noise_sigmas = noise_sigmas;
            rig.det.cfg.projection_horizon_secs = 0.0;
            let mut rng = crate::prng::SplitMix64::new(17);
            let mut n = 0;
            for _ in 0..20_000 {
                let count = crate::detect::testkit::poisson(&mut rng, 12.0);
                n += rig.window(&[count as f64 / 10.0]).len();
            }
            n
        };
        assert_eq!(firings(2.0), 0);
        assert!(firings(0.0) > 0, "the raw rate should cross by noise");
    }

    /// A 20 s burst to 150% spread over three windows (a partial window at each end) fills
    /// three windows over the line when it is centred, yet holds two windows' worth of
    /// utilisation: it does not fire, where a step to 150% fires at its third window.
    #[test]
    fn a_20_s_burst_at_any_alignment_does_not_fire_and_a_step_fires_at_its_third_window() {
        let run = |tolerated: f64, windows: &[f64]| {
            let mut rig = Rig::with(vec![cap("db", "*", 1000.0)]);
            rig.det.cfg.tolerated_burst_secs = tolerated;
            for _ in 0..20 {
                assert!(rig.window(&[300.0]).is_empty());
            }
            let mut fired = None;
            for (i, rps) in windows.iter().chain(&[300.0; 3]).enumerate() {
                if fired.is_none() && !rig.window(&[*rps]).is_empty() {
                    fired = Some(i);
                }
            }
            fired
        };
        for tenth in 1..10 {
            let a = f64::from(tenth) / 10.0;
            let burst = [300.0 + 1200.0 * a, 1500.0, 300.0 + 1200.0 * (1.0 - a)];
            assert_eq!(run(20.0, &burst), None, "alignment {a}");
        }
        // At 200 requests a window the rate is known to ±14% (2 sigma): the shape is judged on
        // the partial windows' lower bounds against the full window's upper bound, so no
        // noise makes a burst read as more windows than it holds; the step waits for the count.
        let small = |tolerated: f64, windows: &[f64]| {
            let mut rig = Rig::with(vec![cap("db", "*", 20.0)]);
            rig.det.cfg.tolerated_burst_secs = tolerated;
            for _ in 0..20 {
                assert!(rig.window(&[6.0]).is_empty());
            }
            windows
                .iter()
                .position(|rps| !rig.window(&[*rps]).is_empty())
        };
        // Read high at its edges and low at its peak, a 20 s burst would show 2.6 windows.
        assert_eq!(small(20.0, &[25.0, 24.0, 25.0, 6.0, 6.0]), None);
        assert_eq!(small(20.0, &[20.0; 6]), Some(3));
        // Centred, all three windows are over the line: the count alone fires.
        assert_eq!(run(0.0, &[900.0, 1500.0, 900.0]), Some(2));
        assert_eq!(run(20.0, &[1500.0; 6]), Some(2));
    }

    #[test]
    fn a_quiet_shard_near_capacity_is_proven_across_windows_not_by_one() {
        // 252 requests a window at 0.9 of capacity: one window proves only 0.79 at 2 sigma,
        // under the line, but the rate's evidence accumulates.
        let first = |u: f64| {
            let mut rig = Rig::with(vec![cap("db", "*", 28.0)]);
            rig.det.cfg.projection_horizon_secs = 0.0;
            (0..60).position(|_| !rig.window(&[28.0 * u]).is_empty())
        };
        assert!(poisson_bound_fraction(252, -2.0) * 0.9 < 0.8);
        // h = 15.1 at 10 s windows; a window at 0.9 adds 252 ln(9/8) - 224/8 = 1.68: the ninth.
        assert_eq!(first(0.9), Some(8));
        // Under the crossover (0.85 of capacity) the evidence drains.
        assert_eq!(first(0.83), None);
        // A 20 s burst to any height adds at most two fifths of h.
        let mut rig = Rig::with(vec![cap("db", "*", 28.0)]);
        rig.det.cfg.projection_horizon_secs = 0.0;
        rig.det.cfg.noise_sigmas = 10.0;
        for rps in [14.0, 280.0, 280.0, 14.0, 14.0, 14.0] {
            assert!(rig.window(&[rps]).is_empty(), "{rps}");
        }
    }

    #[test]
    fn figures_carry_headroom_and_turn_critical_at_the_critical_utilisation() {
        let cfg = CapacityHeadroomConfig::default();
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut o = ObservationRef::new("db", "s0");
        o.count = 850;
        w.record(&o);
        let snap = w.close(10.0);
        let s = &snap.groups[0].shards[0];
        let reading = |u, capacity| Reading {
            u,
            u_judged: u,
            u_high: u,
            source: Source::RequestRate,
            capacity: Some(capacity),
        };
        let fig = Figures::of(&cfg, s, reading(0.85, 100.0), Some(120.0));
        assert_eq!(fig.severity, cfg.rule.severity);
        assert_eq!(
            (fig.requests_per_second, fig.headroom()),
            (85.0, Some(15.0))
        );
        assert_eq!(fig.saturation_in, Some(120.0));
        let over = Figures::of(&cfg, s, reading(cfg.critical_utilisation, 80.0), None);
        assert_eq!(over.severity, Severity::Critical);
        // Past capacity there is no headroom left, not a negative one.
        assert_eq!(over.headroom(), Some(0.0));
    }

    #[test]
    fn reported_utilisation_fires_without_any_capacity_and_wins_over_the_request_rate() {
        let mut rig = Rig::with(Vec::new());
        let busy = Saturation {
            inflight: None,
            utilisation: Some(0.92),
        };
        assert!(rig.window_reporting(busy).is_empty());
        assert!(rig.window_reporting(busy).is_empty());
        let f = rig.window_reporting(busy);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].labels["shard"], "s0");
        assert_eq!(f[0].annotations["utilisation_source"], "reported");
        assert_eq!(f[0].severity, Severity::Critical);
        assert!(
            !f[0]
                .annotations
                .contains_key("capacity_requests_per_second")
        );
        // 20 req/s of a 100 req/s capacity is 20%, but the shard says it is 92% busy.
        let mut rig = Rig::with(vec![cap("db", "*", 100.0)]);
        let f: Vec<_> = (0..3).flat_map(|_| rig.window_reporting(busy)).collect();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].annotations["utilisation"], "0.920");
        assert_eq!(f[0].annotations["headroom_requests_per_second"], "80.0");
        let calm = Saturation {
            inflight: None,
            utilisation: Some(0.6),
        };
        for _ in 0..20 {
            assert!(rig.window_reporting(calm).is_empty());
        }
    }

    #[test]
    fn inflight_over_max_inflight_is_a_utilisation() {
        let only_inflight = Capacity {
            max_requests_per_second: None,
            max_inflight: Some(50.0),
            ..cap("db", "*", 1.0)
        };
        let mut rig = Rig::with(vec![only_inflight]);
        let queued = Saturation {
            inflight: Some(45.0),
            utilisation: None,
        };
        let f: Vec<_> = (0..3).flat_map(|_| rig.window_reporting(queued)).collect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].annotations["utilisation"], "0.900");
        assert_eq!(f[0].annotations["utilisation_source"], "inflight");
        assert_eq!(f[0].annotations["inflight"], "45");
        // Without readings an in-flight limit says nothing: no finding, no state.
        for _ in 0..5 {
            assert!(rig.window(&[500.0]).is_empty());
        }
        assert!(rig.det.state.values().all(|shards| shards.is_empty()));
    }

    #[test]
    fn steady_load_under_the_threshold_never_fires() {
        let mut rig = Rig::with(vec![cap("db", "*", 100.0)]);
        for _ in 0..500 {
            assert!(rig.window(&[75.0, 79.0, 10.0]).is_empty());
        }
    }

    #[test]
    fn a_steep_ramp_is_projected_before_it_reaches_the_threshold() {
        let mut rig = Rig::with(vec![cap("db", "*", 100.0)]);
        let mut fired = None;
        for w in 0..40 {
            // +2 points of utilisation per 10 s window from 40%.
            let u = 40.0 + 2.0 * w as f64;
            let f = rig.window(&[u, 20.0]);
            if !f.is_empty() {
                fired = Some((u, f[0].annotations["projected_saturation_secs"].clone()));
                break;
            }
        }
        let (u, eta) = fired.expect("the ramp is projected");
        assert!(u < 80.0, "fired only at {u}%");
        let eta: f64 = eta.parse().unwrap();
        assert!(eta <= 600.0, "{eta}");
    }

    #[test]
    fn an_exact_entry_overrides_the_wildcard_and_other_groups_are_ignored() {
        let mut rig = Rig::with(vec![cap("db", "*", 100.0), cap("db", "s1", 1000.0)]);
        for _ in 0..5 {
            // s1 at 90 req/s is 9% of its own capacity.
            assert!(rig.window(&[10.0, 90.0]).is_empty());
        }
        let mut other = Rig::with(vec![cap("elsewhere", "*", 1.0)]);
        for _ in 0..5 {
            assert!(other.window(&[500.0]).is_empty());
        }
        assert!(other.det.state.is_empty());
    }

    #[test]
    fn a_short_burst_does_not_fire() {
        let mut rig = Rig::with(vec![cap("db", "*", 100.0)]);
        for _ in 0..20 {
            rig.window(&[30.0]);
        }
        for _ in 0..2 {
            assert!(rig.window(&[150.0]).is_empty());
        }
        assert!(rig.window(&[30.0]).is_empty());
    }

    #[test]
    fn saturation_of_a_line() {
        let h: VecDeque<(f64, f64)> = (0..10)
            .map(|i| (i as f64 * 10.0, 0.5 + 0.01 * i as f64))
            .collect();
        // At t = 90 the line is at 0.59, rising 0.001/s: 410 s to go.
        assert!((saturation_in(&h, 90.0, 0.0).unwrap() - 410.0).abs() < 1e-6);
        // A perfect line has no standard error: the bound changes nothing.
        assert!((saturation_in(&h, 90.0, 4.0).unwrap() - 410.0).abs() < 1e-6);
        let flat: VecDeque<(f64, f64)> = (0..10).map(|i| (i as f64, 0.5)).collect();
        assert_eq!(saturation_in(&flat, 9.0, 4.0), None);
    }

    #[test]
    fn a_step_in_the_load_is_not_a_trend_to_project() {
        // Utilisation 0.7 that steps to 0.75 (a diurnal day compressed into one-minute steps):
        // the fitted slope would reach saturation within the 600 s horizon, but the line fits
        // the step badly and its 4-sigma lower bound puts saturation beyond twice the horizon.
        let h: VecDeque<(f64, f64)> = (0..10)
            .map(|i| (i as f64 * 10.0, if i < 5 { 0.7 } else { 0.75 }))
            .collect();
        let fitted = saturation_in(&h, 90.0, 0.0).unwrap();
        assert!(fitted < 600.0, "{fitted}");
        let low = saturation_in(&h, 90.0, 4.0).map_or(f64::INFINITY, |t| t);
        assert!(low > 2.0 * 600.0, "{low}");
        // A noisy but steady ramp keeps its projection.
        let ramp: VecDeque<(f64, f64)> = (0..10)
            .map(|i| {
                let wobble = if i % 2 == 0 { 0.005 } else { -0.005 };
                (i as f64 * 10.0, 0.6 + 0.02 * i as f64 + wobble)
            })
            .collect();
        // At 0.78 and rising 0.002/s it is 110 s from saturation; the bound adds under 20%.
        let eta = saturation_in(&ramp, 90.0, 4.0).expect("a clear trend");
        assert!((110.0..132.0).contains(&eta), "{eta}");
        // A burst in the last windows lifts the line's end over saturation, not its bound.
        let burst: VecDeque<(f64, f64)> = (0..10)
            .map(|i| {
                (
                    i as f64 * 10.0,
                    [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 2.75, 5.0, 2.75, 0.5][i],
                )
            })
            .collect();
        assert_eq!(saturation_in(&burst, 90.0, 0.0), Some(0.0));
        assert_eq!(saturation_in(&burst, 90.0, 4.0), None);
    }

    #[test]
    fn check_names_every_bad_field() {
        let cfg = CapacityHeadroomConfig {
            capacities: vec![
                cap("", "a", 0.0),
                cap("db", "", 1.0),
                cap("db", "", 2.0),
                Capacity {
                    max_requests_per_second: None,
                    ..cap("db", "x", 1.0)
                },
            ],
            warn_utilisation: 0.9,
            critical_utilisation: 0.8,
            projection_windows: 1,
            ..CapacityHeadroomConfig::default()
        };
        let mut v = Vec::new();
        cfg.check(&mut Problems::new("detectors.capacity_headroom", &mut v));
        let fields: Vec<&str> = v.iter().map(|p| p.field.as_str()).collect();
        for f in [
            "capacities[0].group",
            "capacities[0].max_requests_per_second",
            "capacities[1].shard",
            "capacities[2]",
            "capacities[3]",
            "critical_utilisation",
            "projection_windows",
        ] {
            let full = format!("detectors.capacity_headroom.{f}");
            assert!(
                fields.contains(&full.as_str()),
                "{f} missing from {fields:?}"
            );
        }
        let mut v = Vec::new();
        CapacityHeadroomConfig::default().check(&mut Problems::new("d", &mut v));
        assert!(v.is_empty(), "{v:?}");
    }
}
