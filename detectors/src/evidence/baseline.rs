//! Baselines for detectors: exponentially weighted moving averages with explicit warm-up, a
//! ratio's events among trials and its baseline with the windows it holds back, and small
//! robust helpers (median).
//!
//! A baseline gives no value until it has seen `warmup` windows: detectors make no
//! baseline-relative verdict before a baseline exists. Detectors stop updating a baseline while
//! their alert for it is pending or firing, so an incident does not become the new normal.

use serde::{Deserialize, Serialize};

use crate::evidence::cusum::wilson_upper;

/// The EWMA weight of one window for a time constant `tau_secs`: `1 - exp(-window/tau)`.
pub fn alpha_for(window_secs: f64, tau_secs: f64) -> f64 {
    if tau_secs <= 0.0 {
        return 1.0;
    }
    1.0 - (-window_secs / tau_secs).exp()
}

/// An exponentially weighted moving average that knows whether it is warm.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Ewma {
    value: f64,
    samples: u32,
}

impl Ewma {
    /// The average of `windows` windows that each held zero: what a count of something first
    /// seen now was in the windows before (it was not seen).
    pub fn zeros(windows: u32) -> Ewma {
        Ewma {
            value: 0.0,
            samples: windows,
        }
    }

    /// Folds in `x` with weight `alpha`. The first sample sets the value; until the average has
    /// seen `1/alpha` samples it uses the running mean, so early samples are not over-weighted
    /// toward zero.
    pub fn update(&mut self, x: f64, alpha: f64) {
        if !x.is_finite() {
            return;
        }
        self.samples = self.samples.saturating_add(1);
        let a = alpha.max(1.0 / f64::from(self.samples));
        self.value += a * (x - self.value);
    }

    /// The average once `warmup` samples have been seen; `None` before.
    pub fn value(&self, warmup: u32) -> Option<f64> {
        (self.samples >= warmup.max(1)).then_some(self.value)
    }

    /// The average regardless of warm-up (`None` only before the first sample).
    pub fn raw(&self) -> Option<f64> {
        (self.samples > 0).then_some(self.value)
    }

    /// Samples seen.
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// How many independent samples of equal weight the average's variance equals: the samples
    /// seen while it is their running mean, then (2 − α)/α for the fixed weight `alpha`
    /// (0 before the first).
    pub fn effective_samples(&self, alpha: f64) -> f64 {
        let fixed = if alpha > 0.0 {
            (2.0 - alpha) / alpha
        } else {
            f64::INFINITY
        };
        f64::from(self.samples).min(fixed)
    }
}

/// Events among trials: failures among requests, slow responses among timed ones, a key's
/// requests among its group's. `Ratio<u64>` is a window's counts (or an excursion's),
/// `Ratio<f64>` what a baseline rests on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratio<T = f64> {
    /// The events (failures, timeouts, slow responses, a key's requests).
    pub events: T,
    /// The trials they are among (requests, timed requests, the group's requests).
    pub trials: T,
}

impl Ratio<u64> {
    /// `events` among `trials`, the events clamped to the trials.
    pub fn of(events: u64, trials: u64) -> Ratio<u64> {
        Ratio {
            events: events.min(trials),
            trials,
        }
    }

    /// The share of trials that are events (0 without trials).
    pub fn share(&self) -> f64 {
        self.events as f64 / self.trials.max(1) as f64
    }
}

impl Ratio<f64> {
    /// The share of trials that are events.
    pub fn share(&self) -> f64 {
        self.events / self.trials
    }

    /// The upper bound of the share at [`BOUND_Z`] (`cusum::wilson_upper`): a ratio measured
    /// on few trials taken as high as it plausibly is.
    pub fn upper(&self) -> f64 {
        wilson_upper(self.events, self.trials, BOUND_Z)
    }
}

/// Standard deviations of the upper bounds the sequential tests take for their reference
/// ratios ([`Ratio::upper`]): a baseline or a peers' ratio measured on few requests is
/// taken as high as it plausibly is (about 2.3% of true ratios lie above the bound), so a quiet
/// entity's reference is not taken for lower than it is and a test's false-alarm bound, stated
/// for a true ratio at most the reference, holds.
pub const BOUND_Z: f64 = 2.0;

/// The baseline of a ratio: its trials and its events per window, two averages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RatioBaseline {
    /// Trials per window.
    pub trials: Ewma,
    /// Events per window.
    pub events: Ewma,
}

impl RatioBaseline {
    /// What the baseline rests on, once warm: its events and its trials over the windows its
    /// averages span (each mean per window times those windows, at most `1/alpha`); `None`
    /// before `warmup` windows or without trials.
    pub fn seen(&self, warmup: u32, alpha: f64) -> Option<Ratio<f64>> {
        let n = self.trials.value(warmup)?;
        let x = self.events.value(warmup)?;
        let span = f64::from(self.trials.samples()).min(1.0 / alpha.max(f64::MIN_POSITIVE));
        (n > 0.0).then_some(Ratio {
            events: x * span,
            trials: n * span,
        })
    }
}

/// The windows of an excursion of a sequential test's evidence, held back from a ratio
/// baseline until the excursion ends.
///
/// Teaching the baseline only from windows without evidence would leave out exactly the
/// windows with events and bias it low; teaching it every window would let a slow, quiet
/// change become its own normal before it is proven. So an excursion's windows wait: they are
/// taught once the evidence is back at zero (it was noise) or after `warmup` of them (a change
/// too small to prove is the new normal), and dropped ([`HeldWindows::drop_held`]) when the
/// evidence proves a change or its alert is active.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HeldWindows {
    trials: f64,
    events: f64,
    windows: u32,
}

impl HeldWindows {
    /// Holds `window`; once the evidence is `settled` (back at zero) or `warmup` windows are
    /// held, teaches them to `baseline` at their mean per window. When `frozen` (the evidence
    /// proves a change, or its alert is active) teaches nothing and forgets the held windows
    /// instead ([`HeldWindows::drop_held`]).
    pub fn hold(
        &mut self,
        window: Ratio<u64>,
        (frozen, settled): (bool, bool),
        warmup: u32,
        baseline: &mut RatioBaseline,
        alpha: f64,
    ) {
        if frozen {
            self.drop_held();
            return;
        }
        self.trials += window.trials as f64;
        self.events += window.events.min(window.trials) as f64;
        self.windows += 1;
        if settled || self.windows >= warmup {
            let p = std::mem::take(self);
            let k = f64::from(p.windows);
            for _ in 0..p.windows {
                baseline.trials.update(p.trials / k, alpha);
                baseline.events.update(p.events / k, alpha);
            }
        }
    }

    /// Forgets the held windows: they were part of a change.
    pub fn drop_held(&mut self) {
        *self = HeldWindows::default();
    }
}

/// Median of `xs` (mean of the middle two for even lengths); `None` when empty. Sorts `xs`.
pub fn median(xs: &mut [f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_is_cold_until_warmup_and_starts_at_the_running_mean() {
        let mut e = Ewma::default();
        assert_eq!(e.value(1), None);
        e.update(10.0, 0.01);
        e.update(20.0, 0.01);
        assert_eq!(e.value(3), None);
        assert_eq!(e.value(2), Some(15.0));
        for _ in 0..10_000 {
            e.update(100.0, 0.01);
        }
        assert!((e.value(3).unwrap() - 100.0).abs() < 1e-6);
    }

    #[test]
    fn alpha_matches_the_time_constant() {
        let a = alpha_for(10.0, 3600.0);
        assert!((a - (1.0 - (-1.0f64 / 360.0).exp())).abs() < 1e-15);
        assert_eq!(alpha_for(10.0, 0.0), 1.0);
    }

    /// Holds a window in `p`, teaching `b` (alpha 0.1).
    fn hold(p: &mut HeldWindows, b: &mut RatioBaseline, (n, x): (u64, u64), settled: bool) {
        p.hold(Ratio::of(x, n), (false, settled), 4, b, 0.1);
    }

    #[test]
    fn an_excursion_is_taught_when_it_settles_or_lasts() {
        let (mut b, mut p) = (RatioBaseline::default(), HeldWindows::default());
        for w in 0..3 {
            hold(&mut p, &mut b, (100, 10 + w), false);
        }
        assert_eq!(b.trials.samples(), 0, "held while the evidence is up");
        hold(&mut p, &mut b, (100, 5), true);
        // Four windows taught at their mean: 100 trials and 9.5 events each.
        assert_eq!(b.trials.samples(), 4);
        assert_eq!((b.trials.raw(), b.events.raw()), (Some(100.0), Some(9.5)));
        assert_eq!(p, HeldWindows::default());
        // A change too small to prove becomes the normal after `warmup` (4) windows; events
        // are clamped to trials.
        for _ in 0..4 {
            hold(&mut p, &mut b, (10, 20), false);
        }
        assert_eq!(b.trials.samples(), 8);
        let (n1, x1) = (b.trials.raw().unwrap(), b.events.raw().unwrap());
        // The running mean of the eight windows: (4·100 + 4·10)/8 and (4·9.5 + 4·10)/8.
        assert!(
            (n1 - 55.0).abs() < 1e-9 && (x1 - 9.75).abs() < 1e-9,
            "{n1} {x1}"
        );
        // A proven change is forgotten, and teaches nothing.
        hold(&mut p, &mut b, (10, 1), false);
        p.hold(Ratio::of(1, 10), (true, false), 4, &mut b, 0.1);
        assert_eq!(p, HeldWindows::default());
        assert_eq!(b.trials.samples(), 8);
    }

    #[test]
    fn a_baseline_rests_on_the_windows_it_spans() {
        let mut b = RatioBaseline::default();
        assert_eq!(b.seen(1, 0.1), None);
        for _ in 0..20 {
            b.trials.update(100.0, 0.1);
            b.events.update(3.0, 0.1);
        }
        assert_eq!(b.seen(30, 0.1), None, "cold");
        // Twenty windows seen, but an EWMA of weight 0.1 spans ten.
        let seen = b.seen(20, 0.1).unwrap();
        assert!((seen.trials - 1000.0).abs() < 1e-9 && (seen.events - 30.0).abs() < 1e-9);
        assert!((seen.share() - 0.03).abs() < 1e-12);
        assert!(
            seen.upper() > 0.03 && seen.upper() < 0.06,
            "{}",
            seen.upper()
        );
        assert_eq!(
            Ratio::of(7, 5),
            Ratio {
                events: 5,
                trials: 5
            }
        );
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
