//! The shape of the evidence: how long a change over threshold has provably lasted, from the
//! windows of its current streak (docs/adr/003-the-shape-of-the-evidence.md).
//!
//! A count of windows over a line cannot tell a 5× step from a 5× burst until the streak is
//! longer than any tolerated burst can make it (four windows for bursts of 20 s at 10 s
//! windows). Their *shape* can, sooner: a step fills its latest windows fully, a burst leaves
//! a partial window at each end. With the excess of each window of the streak (its count over
//! the expected count, say) and the largest of them standing for one window fully covered,
//!
//! ```text
//! covered windows = Σ excess / max excess
//! ```
//!
//! estimates how many windows' worth of the change the streak holds. A burst of d seconds at
//! windows of w seconds covers d/w windows, whatever its alignment (a partial window at each
//! end adds up to the missing part of one), so a streak whose estimate exceeds the tolerated
//! burst's d/w by [`STEP_MARGIN_WINDOWS`] has outlasted it. A step on a window boundary shows 3
//! covered windows after 30 s at 10 s windows, where a 20 s burst never shows more than 2 but
//! for noise.

use serde::{Deserialize, Serialize};

/// What the estimate of covered windows must exceed the tolerated burst by. Half a window
/// absorbs the noise of the excesses: a burst whose partial windows both pass the detector's
/// threshold has a full-window excess of at least twice that threshold, so half a window of
/// extra excess is over a threshold's worth of noise.
pub const STEP_MARGIN_WINDOWS: f64 = 0.5;

/// Windows more that a streak of evidence which *drains* (timeouts, slow requests) must cover
/// to have outlasted a tolerated burst. Such evidence is not flat over the spell that causes
/// it: it grows as the queue builds and the last of it lands after the backend is fast again,
/// so the window holding the spell's end reads fuller than the part of the spell it covers.
/// Without it a 20 s pile-up read as 2.6 windows and fired on its third window
/// (`short_pile_ups`, seed 2, in the scenario traces).
pub const DRAIN_WINDOWS: f64 = 0.5;

/// The excesses of a streak of windows over threshold, summed, and their maximum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepEvidence {
    sum: f64,
    peak: f64,
}

impl StepEvidence {
    /// Folds in one window: its excess when it is over threshold; a window that is not ends
    /// the streak and forgets it. Negative or non-finite excesses count as none.
    pub fn push(&mut self, over: bool, excess: f64) {
        if !over {
            *self = StepEvidence::default();
            return;
        }
        let x = if excess.is_finite() {
            excess.max(0.0)
        } else {
            0.0
        };
        self.sum += x;
        self.peak = self.peak.max(x);
    }

    /// Windows' worth of the change the streak holds: Σ excess / max excess (0 without any).
    pub fn covered_windows(&self) -> f64 {
        if self.peak > 0.0 {
            self.sum / self.peak
        } else {
            0.0
        }
    }

    /// True when the streak has outlasted a burst of `tolerated_secs` at windows of
    /// `window_secs`, by [`STEP_MARGIN_WINDOWS`].
    pub fn outlasts(&self, tolerated_secs: f64, window_secs: f64) -> bool {
        let tolerated = tolerated_secs / window_secs.max(f64::MIN_POSITIVE);
        self.covered_windows() >= tolerated + STEP_MARGIN_WINDOWS
    }
}

/// When a streak of windows over threshold is long enough to report: `windows` in a row, or
/// sooner when its shape shows it has outlasted a burst of `tolerated_burst_secs`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Persistence {
    /// Windows in a row that are always enough (`consecutive_windows`).
    pub windows: u32,
    /// The longest burst to tolerate, seconds.
    pub tolerated_burst_secs: f64,
    /// The window length, seconds.
    pub window_secs: f64,
}

impl Persistence {
    /// True when a streak of `streak` windows with evidence `ev` is long enough.
    pub fn holds(&self, streak: u32, ev: &StepEvidence) -> bool {
        streak >= self.windows || ev.outlasts(self.tolerated_burst_secs, self.window_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streak(xs: &[f64]) -> StepEvidence {
        let mut e = StepEvidence::default();
        for &x in xs {
            e.push(true, x);
        }
        e
    }

    #[test]
    fn a_step_on_a_boundary_outlasts_a_20_s_burst_at_its_third_window() {
        assert!(!streak(&[400.0, 410.0]).outlasts(20.0, 10.0));
        assert!(streak(&[400.0, 410.0, 395.0]).outlasts(20.0, 10.0));
        // A step that starts mid-window: half, full, full.
        assert!(streak(&[200.0, 400.0, 400.0]).outlasts(20.0, 10.0));
    }

    #[test]
    fn a_20_s_burst_never_outlasts_itself_whatever_its_alignment() {
        for tenth in 0..=10 {
            let a = f64::from(tenth) / 10.0;
            let e = streak(&[400.0 * a, 400.0, 400.0 * (1.0 - a)]);
            assert!((e.covered_windows() - 2.0).abs() < 1e-9, "{a}");
            assert!(!e.outlasts(20.0, 10.0), "{a}");
        }
        // A 25 s burst has outlasted it.
        assert!(streak(&[200.0, 400.0, 400.0, 100.0]).outlasts(20.0, 10.0));
    }

    #[test]
    fn a_window_under_threshold_ends_the_streak() {
        let mut e = streak(&[400.0, 400.0]);
        e.push(false, 400.0);
        assert_eq!(e, StepEvidence::default());
        e.push(true, f64::NAN);
        e.push(true, -5.0);
        assert_eq!(e.covered_windows(), 0.0);
        assert!(!e.outlasts(0.0, 10.0));
    }
}
