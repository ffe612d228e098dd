//! Baselines for detectors: exponentially weighted moving averages with explicit warm-up, and
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

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
