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

/// How long a streak of windows over threshold must be, and how many windows' worth of
/// excess it must hold, before no burst of `tolerated_secs` can explain it at windows of
/// `window_secs`, whatever the burst's alignment and whatever the window length.
///
/// [`StepEvidence::outlasts`] takes the largest excess of a streak for one window fully
/// covered. That holds for a burst that can fill a window; a burst shorter than a window never
/// does, and one that straddles a boundary leaves two partial windows whose covered-window
/// estimate reaches 2 (two halves of one burst look like two full windows). So a burst of at
/// most `tolerated_secs` holds at most max(d/w, 2) windows' worth by the estimate, and touches
/// at most ⌈d/w⌉ + 1 windows. A streak outlasts every such burst once its estimate exceeds
/// max(d/w, 2) by [`STEP_MARGIN_WINDOWS`] or its length exceeds ⌈d/w⌉ + 1 windows. At 10 s
/// windows and 20 s this is the rule of [`StepEvidence::outlasts`] (2.5 windows' worth) with
/// four windows as the count; at 5 s windows 4.5 windows' worth or six windows; at 30 s
/// windows three windows, where the estimate alone could not tell a straddling 15 s burst from
/// a step in two.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstTolerance {
    /// The longest burst to tolerate, seconds.
    pub tolerated_secs: f64,
    /// The window length, seconds.
    pub window_secs: f64,
}

impl BurstTolerance {
    /// Windows in a row that no tolerated burst can fill: ⌈d/w⌉ + 2 (2 when nothing is
    /// tolerated: a single window is never a verdict).
    pub fn windows(&self) -> u32 {
        let w = self.window_secs.max(f64::MIN_POSITIVE);
        let d = self.tolerated_secs.max(0.0);
        if d == 0.0 {
            return 2;
        }
        // Bounded by the config's range of d; the cast saturates anyway.
        ((d / w).ceil() as u32).saturating_add(2)
    }

    /// Covered windows (Σ excess / max excess) no tolerated burst reaches: max(d/w, 2) plus
    /// [`STEP_MARGIN_WINDOWS`]; 0 when nothing is tolerated.
    pub fn covered_windows(&self) -> f64 {
        let w = self.window_secs.max(f64::MIN_POSITIVE);
        if self.tolerated_secs <= 0.0 {
            return 0.0;
        }
        (self.tolerated_secs / w).max(2.0) + STEP_MARGIN_WINDOWS
    }

    /// True when a streak of `streak` windows with evidence `ev` cannot be a tolerated burst.
    pub fn outlasted_by(&self, streak: u32, ev: &StepEvidence) -> bool {
        streak >= self.windows() || (streak >= 2 && ev.covered_windows() >= self.covered_windows())
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
    fn burst_tolerance_in_seconds_holds_at_every_window_length() {
        let at = |w: f64| BurstTolerance {
            tolerated_secs: 20.0,
            window_secs: w,
        };
        assert_eq!(
            (at(5.0).windows(), at(10.0).windows(), at(30.0).windows()),
            (6, 4, 3)
        );
        assert_eq!(at(10.0).covered_windows(), 2.5);
        assert_eq!(at(5.0).covered_windows(), 4.5);
        assert_eq!(at(30.0).covered_windows(), 2.5);
        // Every burst of 1 to 20 s at every alignment, at 5, 10 and 30 s windows: the
        // excess of each window it touches is the part of the window it covers.
        for w in [5.0, 10.0, 30.0] {
            let tol = at(w);
            for d in 1..=20 {
                for start in 0..(w as u32) {
                    let (s, e) = (f64::from(start), f64::from(start) + f64::from(d));
                    let mut ev = StepEvidence::default();
                    let mut n = 0;
                    let mut k = 0.0;
                    while k * w < e {
                        let cover = ((k + 1.0) * w).min(e) - (k * w).max(s);
                        if cover > 0.0 {
                            ev.push(true, cover);
                            n += 1;
                            assert!(!tol.outlasted_by(n, &ev), "w {w} d {d} start {start}");
                        }
                        k += 1.0;
                    }
                }
            }
            // A step on a window boundary is caught by the count at the latest.
            let mut ev = StepEvidence::default();
            for n in 1..=tol.windows() {
                ev.push(true, 1.0);
                // 4.5 windows' worth at 5 s windows; the third window at 10 and 30 s.
                let first = if w == 5.0 { 5 } else { 3 };
                assert_eq!(tol.outlasted_by(n, &ev), n >= first, "{w} {n}");
            }
        }
        let none = BurstTolerance {
            tolerated_secs: 0.0,
            window_secs: 10.0,
        };
        assert!(!none.outlasted_by(1, &streak(&[5.0])));
        assert!(none.outlasted_by(2, &streak(&[5.0, 5.0])));
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
