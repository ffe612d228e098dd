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
pub struct StreakShape {
    sum: f64,
    peak: f64,
}

impl StreakShape {
    /// Folds in one window: its excess when it is over threshold; a window that is not ends
    /// the streak and forgets it. Negative or non-finite excesses count as none.
    pub fn push(&mut self, over: bool, excess: f64) {
        self.push_bounded(over, excess, excess);
    }

    /// [`StreakShape::push`] for an excess known only within noise bounds: the sum takes the
    /// `low` bound and the peak the `high` one, so noise can make a streak look shorter than
    /// it is, never longer (a burst read high in its partial windows and low in its full one
    /// would look like more windows' worth than it holds).
    pub fn push_bounded(&mut self, over: bool, low: f64, high: f64) {
        if !over {
            *self = StreakShape::default();
            return;
        }
        let clean = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
        self.sum += clean(low);
        self.peak = self.peak.max(clean(high));
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
    /// `window_secs`, by [`STEP_MARGIN_WINDOWS`] over [`burst_covered_windows`].
    pub fn outlasts(&self, tolerated_secs: f64, window_secs: f64) -> bool {
        self.covered_windows()
            >= burst_covered_windows(tolerated_secs, window_secs) + STEP_MARGIN_WINDOWS
    }
}

/// The most windows in a row a burst of `tolerated_secs` can touch at windows of
/// `window_secs`: ⌈d/w⌉ + 1, a partial window at each end (0 for no burst).
pub fn longest_burst_streak(tolerated_secs: f64, window_secs: f64) -> u32 {
    if tolerated_secs.is_nan() || tolerated_secs <= 0.0 {
        return 0;
    }
    let covered = (tolerated_secs / window_secs.max(f64::MIN_POSITIVE)).ceil();
    // Bounded by the configs' ranges; the cast saturates anyway.
    (covered as u32).saturating_add(1)
}

/// The most windows' worth of change a burst of `tolerated_secs` can show at windows of
/// `window_secs`, as [`StreakShape::covered_windows`] estimates it: d/w, but never less than 2
/// for a burst at all.
///
/// The estimate takes the fullest window of a streak as one window fully covered. A burst of
/// at least two windows always covers one fully, and then the estimate is exact. A shorter one
/// may cover none: 20 s straddling two 30 s windows, 10 s in each, reads as two full windows
/// (twice its d/w of ⅔). Two partial windows, and nothing else, read at most 2, so that is the
/// floor: a step then still proves itself on its third window, as the count of windows would.
pub fn burst_covered_windows(tolerated_secs: f64, window_secs: f64) -> f64 {
    if tolerated_secs.is_nan() || tolerated_secs <= 0.0 {
        return 0.0;
    }
    (tolerated_secs / window_secs.max(f64::MIN_POSITIVE)).max(2.0)
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
    /// The persistence of a rule asking for `consecutive_windows` in a row, tolerating bursts of
    /// `tolerated_burst_secs` at windows of `window_secs`: the windows in a row that are always
    /// enough are never fewer than one more than the longest streak such a burst can make, so
    /// that at short windows the count does not undo the tolerance (at 5 s windows a 20 s burst
    /// touches five windows, more than the usual four).
    pub fn new(consecutive_windows: u32, tolerated_burst_secs: f64, window_secs: f64) -> Self {
        let longest = longest_burst_streak(tolerated_burst_secs, window_secs);
        Persistence {
            windows: consecutive_windows.max(longest.saturating_add(1)),
            tolerated_burst_secs,
            window_secs,
        }
    }

    /// Why a streak of `streak` windows with shape `shape` is long enough, if it is: its count
    /// of windows, or else its shape.
    pub fn lasted(&self, streak: u32, shape: &StreakShape) -> Option<Lasted> {
        if streak >= self.windows {
            Some(Lasted::Windows)
        } else if shape.outlasts(self.tolerated_burst_secs, self.window_secs) {
            Some(Lasted::Shape)
        } else {
            None
        }
    }
}

/// What proved a streak long enough ([`Persistence::lasted`]): the firing path an alert names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lasted {
    /// The windows in a row that are always enough.
    Windows,
    /// The shape of the streak, which outlasted a tolerated burst.
    Shape,
}

impl Lasted {
    /// The firing path's name, as the `proven_by` annotation carries it.
    pub fn name(self) -> &'static str {
        match self {
            Lasted::Windows => "consecutive_windows",
            Lasted::Shape => "step_shape",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streak(xs: &[f64]) -> StreakShape {
        let mut e = StreakShape::default();
        for &x in xs {
            e.push(true, x);
        }
        e
    }

    #[test]
    fn the_count_of_windows_never_undoes_the_burst_tolerance() {
        // A 20 s burst touches at most 3 windows of 10 s or 30 s, but 5 of 5 s.
        for (w, needed) in [(5.0, 6), (10.0, 4), (30.0, 4)] {
            assert_eq!(Persistence::new(4, 20.0, w).windows, needed, "{w}");
        }
        assert_eq!(Persistence::new(8, 20.0, 5.0).windows, 8);
    }

    #[test]
    fn a_streak_lasted_by_its_count_before_its_shape() {
        let p = Persistence::new(4, 20.0, 10.0);
        let step = streak(&[400.0, 400.0, 400.0]);
        assert_eq!(p.lasted(2, &step), Some(Lasted::Shape));
        assert_eq!(p.lasted(4, &step), Some(Lasted::Windows));
        let burst = streak(&[200.0, 400.0, 200.0]);
        assert_eq!(p.lasted(3, &burst), None);
        assert_eq!(Lasted::Shape.name(), "step_shape");
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
    fn a_burst_shorter_than_two_windows_never_outlasts_itself() {
        // 20 s at 30 s windows: two partial windows read as two full ones at an even split.
        for tenth in 0..=10 {
            let a = f64::from(tenth) / 10.0 * (20.0 / 30.0);
            let e = streak(&[400.0 * a, 400.0 * (20.0 / 30.0 - a)]);
            assert!(!e.outlasts(20.0, 30.0), "{a}");
        }
        assert!(streak(&[400.0, 400.0]).covered_windows() >= 2.0);
        // A step on a boundary proves itself on its third window.
        assert!(!streak(&[400.0, 400.0]).outlasts(20.0, 30.0));
        assert!(streak(&[400.0, 400.0, 400.0]).outlasts(20.0, 30.0));
        // No tolerance: any evidence outlasts it.
        assert!(streak(&[400.0]).outlasts(0.0, 30.0));
        assert_eq!(burst_covered_windows(20.0, 5.0), 4.0);
        assert_eq!(burst_covered_windows(20.0, 10.0), 2.0);
        assert_eq!(burst_covered_windows(20.0, 30.0), 2.0);
        assert_eq!(longest_burst_streak(20.0, 5.0), 5);
        assert_eq!(longest_burst_streak(20.0, 10.0), 3);
        assert_eq!(longest_burst_streak(20.0, 30.0), 2);
        assert_eq!(longest_burst_streak(0.0, 30.0), 0);
    }

    #[test]
    fn a_window_under_threshold_ends_the_streak() {
        let mut e = streak(&[400.0, 400.0]);
        e.push(false, 400.0);
        assert_eq!(e, StreakShape::default());
        e.push(true, f64::NAN);
        e.push(true, -5.0);
        assert_eq!(e.covered_windows(), 0.0);
        assert!(!e.outlasts(0.0, 10.0));
    }
}
