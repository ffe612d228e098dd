//! Baselines for detectors: exponentially weighted moving averages with explicit warm-up, a
//! ratio's baseline and the windows it holds back, and
//! small robust helpers (median).
//!
//! A baseline gives no value until it has seen `warmup` windows: detectors make no
//! baseline-relative verdict before a baseline exists. Detectors stop updating a baseline while
//! their alert for it is pending or firing, so an incident does not become the new normal.

use serde::{Deserialize, Serialize};

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
}

/// The windows of an excursion of a sequential test's evidence, held back from a ratio
/// baseline (events among trials: failures among requests, slow responses among samples) until
/// the excursion ends.
///
/// Teaching the baseline only from windows without evidence would leave out exactly the
/// windows with events and bias it low; teaching it every window would let a slow, quiet
/// change become its own normal before it is proven. So an excursion's windows wait: they are
/// taught once the evidence is back at zero (it was noise) or after `warmup` of them (a change
/// too small to prove is the new normal), and dropped ([`HeldWindows::drop_held`]) when the
/// evidence proves a change or its alert is active.
///
/// Saved state written before the type was shared names its fields after what each detector
/// counted; the aliases read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HeldWindows {
    #[serde(alias = "requests", alias = "samples")]
    trials: f64,
    #[serde(alias = "errors", alias = "timeouts", alias = "slow")]
    events: f64,
    windows: u32,
}

/// Standard deviations of the upper bounds the sequential tests take for their reference
/// ratios (`cusum::wilson_upper`): a baseline or a peers' ratio measured on few requests is
/// taken as high as it plausibly is (about 2.3% of true ratios lie above the bound), so a quiet
/// entity's reference is not taken for lower than it is and a test's false-alarm bound, stated
/// for a true ratio at most the reference, holds.
pub const BOUND_Z: f64 = 2.0;

/// What a ratio baseline rests on, once warm: its events and its trials over the windows its
/// averages span (each mean per window times those windows, at most `1/alpha`), in the order
/// `cusum::wilson_upper` takes them; `None` before `warmup` windows or without trials.
pub fn ratio_seen(trials: &Ewma, events: &Ewma, warmup: u32, alpha: f64) -> Option<(f64, f64)> {
    let n = trials.value(warmup)?;
    let x = events.value(warmup)?;
    let span = f64::from(trials.samples()).min(1.0 / alpha.max(f64::MIN_POSITIVE));
    (n > 0.0).then_some((x * span, n * span))
}

/// The two averages of a ratio baseline: trials and events per window.
pub struct RatioBaseline<'a> {
    /// Trials per window (requests, samples).
    pub trials: &'a mut Ewma,
    /// Events per window (failures, timeouts, slow responses).
    pub events: &'a mut Ewma,
}

impl HeldWindows {
    /// Holds a window of `trials` with `events`; once the evidence is `settled` (back at zero)
    /// or `warmup` windows are held, teaches them to `baseline` at their mean per window. When
    /// `frozen` (the evidence proves a change, or its alert is active) teaches nothing and
    /// forgets the held windows instead ([`HeldWindows::drop_held`]).
    pub fn hold(
        &mut self,
        (trials, events): (u64, u64),
        (frozen, settled): (bool, bool),
        warmup: u32,
        baseline: RatioBaseline<'_>,
        alpha: f64,
    ) {
        if frozen {
            self.drop_held();
            return;
        }
        self.trials += trials as f64;
        self.events += events.min(trials) as f64;
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

    /// Holds a window in `p`, teaching `n` and `x` (alpha 0.1).
    fn hold(p: &mut HeldWindows, n: &mut Ewma, x: &mut Ewma, window: (u64, u64), settled: bool) {
        let baseline = RatioBaseline {
            trials: n,
            events: x,
        };
        p.hold(window, (false, settled), 4, baseline, 0.1);
    }

    #[test]
    fn an_excursion_is_taught_when_it_settles_or_lasts() {
        let (mut n, mut x, mut p) = (Ewma::default(), Ewma::default(), HeldWindows::default());
        for w in 0..3 {
            hold(&mut p, &mut n, &mut x, (100, 10 + w), false);
        }
        assert_eq!(n.samples(), 0, "held while the evidence is up");
        hold(&mut p, &mut n, &mut x, (100, 5), true);
        // Four windows taught at their mean: 100 trials and 9.5 events each.
        assert_eq!(n.samples(), 4);
        assert_eq!((n.raw(), x.raw()), (Some(100.0), Some(9.5)));
        assert_eq!(p, HeldWindows::default());
        // A change too small to prove becomes the normal after `warmup` (4) windows; events
        // are clamped to trials.
        for _ in 0..4 {
            hold(&mut p, &mut n, &mut x, (10, 20), false);
        }
        assert_eq!(n.samples(), 8);
        let (n1, x1) = (n.raw().unwrap(), x.raw().unwrap());
        // The running mean of the eight windows: (4·100 + 4·10)/8 and (4·9.5 + 4·10)/8.
        assert!(
            (n1 - 55.0).abs() < 1e-9 && (x1 - 9.75).abs() < 1e-9,
            "{n1} {x1}"
        );
        // A proven change is forgotten, and teaches nothing.
        hold(&mut p, &mut n, &mut x, (10, 1), false);
        let baseline = RatioBaseline {
            trials: &mut n,
            events: &mut x,
        };
        p.hold((10, 1), (true, false), 4, baseline, 0.1);
        assert_eq!(p, HeldWindows::default());
        assert_eq!(n.samples(), 8);
    }

    #[test]
    fn saved_excursions_of_every_detector_load() {
        for (json, trials, events) in [
            (
                r#"{"requests": 10.0, "errors": 2.0, "windows": 1}"#,
                10.0,
                2.0,
            ),
            (
                r#"{"requests": 10.0, "timeouts": 3.0, "windows": 1}"#,
                10.0,
                3.0,
            ),
            (r#"{"samples": 10.0, "slow": 4.0, "windows": 1}"#, 10.0, 4.0),
            (
                r#"{"trials": 10.0, "events": 5.0, "windows": 1}"#,
                10.0,
                5.0,
            ),
        ] {
            let p: HeldWindows = serde_json::from_str(json).unwrap();
            assert_eq!(
                (p.trials, p.events, p.windows),
                (trials, events, 1),
                "{json}"
            );
        }
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
