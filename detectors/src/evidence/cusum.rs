//! Evidence that accumulates across windows: a CUSUM of log-likelihood ratios for count-based
//! judgements, so a quiet entity is judged later instead of never
//! (docs/adr/006-evidence-that-accumulates.md).
//!
//! A per-window floor ("at least 40 requests and 25 failures in the window") makes a detector
//! blind below a rate however long the change lasts. Here each window adds the log-likelihood
//! ratio (LLR) of its counts, a change of the stated size against no change, and Page's CUSUM
//!
//! ```text
//! S ← min(h, max(0, S + min(LLR, h/k)))
//! ```
//!
//! reports once S reaches h. A busy shard gathers h in its first windows, a quiet one over
//! many; the evidence needed is the same.
//!
//! **False alarms.** Under the null hypothesis (the entity is at or below its reference), the
//! likelihood ratio started at any window is a non-negative supermartingale of mean at most 1,
//! so by Ville's inequality it ever reaches e^h with probability at most e^−h. Every excursion
//! of the CUSUM that reaches h started at some window, so the expected number of crossings is
//! at most e^−h per window. [`threshold_for`] turns a stated rate per entity-hour into h for a
//! window length: `h = ln(windows per hour / rate)`. Capping a step at h/k and S at h only
//! lowers S, so the bound still holds. It holds whatever the number of requests in a window,
//! which is why the same h serves 1 and 10,000 requests per second.
//!
//! **Delay.** After a change of the stated size or more, S grows by the expected LLR per
//! window, the Kullback–Leibler divergence of the counts ([`Binomial::drift_per_trial`] times
//! the requests), so S reaches h after about `h / (rate · drift)` seconds, and never before
//! k windows because a step adds at most h/k ([`expected_delay_secs`]). The cap is the burst
//! tolerance the window rules had: k − 1 windows of anything add less than h.
//!
//! **Recovery.** S is capped at h, so once the counts are back to normal it drains below h at
//! the first window whose LLR is negative enough, typically the next one.

use serde::{Deserialize, Serialize};

use crate::evidence::shape::{DRAIN_WINDOWS, StreakShape, longest_burst_streak};

/// Smallest threshold [`threshold_for`] returns: below it a single window could hold as much
/// evidence as the bound allows noise to give.
pub const MIN_THRESHOLD: f64 = 1.0;

/// The CUSUM threshold h for at most `false_alarms_per_hour` crossings per entity-hour under
/// the null hypothesis, at windows of `window_secs`: `ln(windows per hour / rate)`, at least
/// [`MIN_THRESHOLD`]. A rate of 10⁻⁴ per hour (0.1 per 1,000 entity-hours) gives h = 15.1 at
/// 10 s windows, 15.8 at 5 s and 14.0 at 30 s.
pub fn threshold_for(false_alarms_per_hour: f64, window_secs: f64) -> f64 {
    let windows_per_hour = 3600.0 / window_secs.max(f64::MIN_POSITIVE);
    let rate = false_alarms_per_hour.max(f64::MIN_POSITIVE);
    (windows_per_hour / rate).ln().max(MIN_THRESHOLD)
}

/// The bound [`threshold_for`] inverts: the expected crossings per entity-hour under the null
/// hypothesis are at most this for threshold `h` at windows of `window_secs`.
pub fn false_alarms_per_hour(h: f64, window_secs: f64) -> f64 {
    3600.0 / window_secs.max(f64::MIN_POSITIVE) * (-h).exp()
}

/// A test of a ratio of trials (failures among requests, slow among requests): the reference
/// ratio `p0` against the raised ratio `p1 > p0`.
///
/// The LLR of x successes among n trials is `x·ln(p1/p0) + (n − x)·ln((1 − p1)/(1 − p0))`.
/// Its expectation is negative for a true ratio below [`Binomial::crossover`], which lies
/// between `p0` and `p1` (near `p0 + 0.35·(p1 − p0)` for small `p0`), and positive above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Binomial {
    /// ln(p1/p0): what one success adds.
    up: f64,
    /// ln((1 − p1)/(1 − p0)), negative: what one failure adds.
    down: f64,
}

impl Binomial {
    /// The test of `p0` against `p1`; `None` unless `0 < p0 < p1 < 1` (a reference of 0 would
    /// make one success infinite evidence; a raised ratio of 1 or more cannot be told apart).
    pub fn new(p0: f64, p1: f64) -> Option<Binomial> {
        (p0 > 0.0 && p0 < p1 && p1 < 1.0).then(|| Binomial {
            up: (p1 / p0).ln(),
            down: ((1.0 - p1) / (1.0 - p0)).ln(),
        })
    }

    /// The LLR of `x` successes among `n` trials (`x` is clamped to `n`).
    pub fn llr(&self, n: u64, x: u64) -> f64 {
        let x = x.min(n);
        x as f64 * self.up + (n - x) as f64 * self.down
    }

    /// The expected LLR of one trial when the true ratio is `p`.
    pub fn drift_per_trial(&self, p: f64) -> f64 {
        p * self.up + (1.0 - p) * self.down
    }

    /// The true ratio at which the expected LLR is zero: below it evidence drains, above it
    /// it accumulates.
    pub fn crossover(&self) -> f64 {
        -self.down / (self.up - self.down)
    }

    /// The test of `p0` whose crossover is `c`: evidence accumulates only for a true ratio
    /// above `c` and drains below it, so a practical gate ("at least 5% failing") is the
    /// test's own boundary. `None` unless `0 < p0 < c < 1` and the raised ratio is below 1 in
    /// floating point (it is unless `c` is near 1 and far above `p0`: 0.99 over 0.5 is out of
    /// reach, 0.97 is not).
    pub fn with_crossover(p0: f64, c: f64) -> Option<Binomial> {
        if !(p0 > 0.0 && p0 < c && c < 1.0) {
            return None;
        }
        // The crossover rises with p1, from below c (at p1 → c) to 1 (at p1 → 1).
        let crossover = |p1: f64| Binomial::new(p0, p1).map_or(0.0, |b| b.crossover());
        let (lo, _) = bisect((c, 1.0), |p1| crossover(p1) < c);
        // `lo` and `hi` are adjacent; the midpoint rounds to `hi`, which may be 1. A crossover
        // near 1 over a high p0 needs a p1 closer to 1 than a float holds: none.
        Binomial::new(p0, lo).filter(|b| (b.crossover() - c).abs() < 1e-9)
    }
}

/// A test of a Poisson rate: `expected` counts in a window against `ratio` times as many.
///
/// The LLR of a count c is `c·ln(ratio) − (ratio − 1)·expected`; its expectation is negative
/// for a true rate below `expected·(ratio − 1)/ln(ratio)` (the crossover, between the two).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Poisson {
    ln_ratio: f64,
    ratio: f64,
}

impl Poisson {
    /// The test of a rate against `ratio` times it; `None` unless `ratio > 1` and finite.
    pub fn new(ratio: f64) -> Option<Poisson> {
        (ratio > 1.0 && ratio.is_finite()).then(|| Poisson {
            ln_ratio: ratio.ln(),
            ratio,
        })
    }

    /// The LLR of `count` when `expected` was expected (0 for a non-positive expectation:
    /// nothing was expected, so nothing can be told).
    pub fn llr(&self, count: u64, expected: f64) -> f64 {
        if !(expected > 0.0 && expected.is_finite()) {
            return 0.0;
        }
        count as f64 * self.ln_ratio - (self.ratio - 1.0) * expected
    }

    /// The LLR of `count` when `expected` was expected and counts are over-dispersed: negative
    /// binomial with variance μ + g·μ² at either mean (the test of μ = `expected` against
    /// `ratio` times it). Per count it adds ln(ratio·(1 + g·e)/(1 + g·ratio·e)) and it subtracts
    /// ln((1 + g·ratio·e)/(1 + g·e))/g, so at large g·e, where a window's count says little
    /// about its rate, a window adds little whatever its count. It is a likelihood ratio like
    /// [`Poisson::llr`], whose value it takes for g ≤ 0, so the false-alarm bound of the module
    /// holds when the counts are that over-dispersed or less.
    pub fn llr_overdispersed(&self, count: u64, expected: f64, g: f64) -> f64 {
        if !(g > 1e-12 && g.is_finite()) {
            return self.llr(count, expected);
        }
        if !(expected > 0.0 && expected.is_finite()) {
            return 0.0;
        }
        let (null, alt) = (1.0 + g * expected, 1.0 + g * self.ratio * expected);
        count as f64 * (self.ln_ratio + null.ln() - alt.ln()) - (alt.ln() - null.ln()) / g
    }

    /// The test whose crossover ([`Poisson::crossover`]) is `multiple`: evidence accumulates
    /// only for a rate above `multiple` times the expectation and drains below it. `None`
    /// unless `multiple > 1` and finite.
    pub fn with_crossover(multiple: f64) -> Option<Poisson> {
        if !(multiple > 1.0 && multiple.is_finite()) {
            return None;
        }
        // (ρ − 1)/ln ρ rises from 1 (at ρ → 1) without bound; it is below ρ, so the root
        // lies in (1, 2·multiple·(1 + ln multiple)].
        let crossover = |r: f64| (r - 1.0) / r.ln();
        let (lo, hi) = bisect((1.0, 2.0 * multiple * (1.0 + multiple.ln())), |r| {
            crossover(r) < multiple
        });
        Poisson::new(0.5 * (lo + hi))
    }

    /// The expected LLR of a window expecting `expected` when the true rate is `actual`
    /// times the expectation.
    pub fn drift(&self, expected: f64, actual: f64) -> f64 {
        expected * (actual * self.ln_ratio - (self.ratio - 1.0))
    }

    /// The multiple of the expectation at which the expected LLR is zero.
    pub fn crossover(&self) -> f64 {
        (self.ratio - 1.0) / self.ln_ratio
    }
}

/// Where `below` turns from true to false in `(lo, hi)` (true at `lo`, false at `hi`, one
/// change between), narrowed by bisection to two adjacent floats (200 halvings are plenty).
fn bisect((mut lo, mut hi): (f64, f64), below: impl Fn(f64) -> bool) -> (f64, f64) {
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if below(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo, hi)
}

/// Page's CUSUM of per-window LLRs with the two caps of the module's formula. Plain data: it is
/// part of a detector's saved state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Cusum {
    sum: f64,
}

/// The settings of a [`Cusum`]: its threshold and the fewest windows that can reach it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CusumSettings {
    /// The threshold h.
    pub threshold: f64,
    /// The fewest windows that reach it (k): a window adds at most h/k.
    pub min_windows: u32,
}

impl CusumSettings {
    /// The settings for a stated rate of false alarms per entity-hour at windows of
    /// `window_secs`, reaching the threshold in no fewer than `min_windows` windows.
    pub fn new(false_alarms_per_hour: f64, window_secs: f64, min_windows: u32) -> CusumSettings {
        CusumSettings {
            threshold: threshold_for(false_alarms_per_hour, window_secs),
            min_windows: min_windows.max(1),
        }
    }

    /// The most one window adds: h/k.
    pub fn max_step(&self) -> f64 {
        self.threshold / f64::from(self.min_windows)
    }
}

impl Cusum {
    /// Folds in one window's LLR (a non-finite one counts as none) and returns the sum.
    pub fn push(&mut self, llr: f64, s: &CusumSettings) -> f64 {
        let step = if llr.is_finite() {
            llr.min(s.max_step())
        } else {
            0.0
        };
        self.sum = (self.sum + step).clamp(0.0, s.threshold);
        self.sum
    }

    /// The evidence gathered, in `0..=h`.
    pub fn value(&self) -> f64 {
        self.sum
    }

    /// True once the evidence has reached the threshold.
    pub fn holds(&self, s: &CusumSettings) -> bool {
        // k steps of h/k sum to h only up to rounding: 5 × (h/5) can fall an ulp short, which
        // would make a k-window test take k + 1.
        self.sum >= s.threshold * (1.0 - 1e-9)
    }

    /// Forgets the evidence (the entity left, or its reference changed for good).
    pub fn reset(&mut self) {
        self.sum = 0.0;
    }
}

/// Windows a sequential test must take at the fewest so that no burst of up to
/// `tolerated_secs` fires it: ⌈d/w⌉ + 3, or 0 when nothing is tolerated.
///
/// A burst of d seconds touches at most ⌈d/w⌉ + 1 windows, each adding at most h/k, so with
/// k = ⌈d/w⌉ + 3 it adds at most (k − 2)·h/k: it can reach h only on top of 2h/k of evidence
/// that was already there, which the null hypothesis gathers with probability at most
/// e^(−2h/k) (Ville's inequality; about 0.2% at 10 s windows for 10⁻⁴ false alarms per hour).
/// With k = ⌈d/w⌉ + 2 the margin was one window, e^(−h/k), and a 20 s pile-up on top of a
/// little noise fired (`short_pile_ups` in the scenario traces).
pub fn burst_proof_windows(tolerated_secs: f64, window_secs: f64) -> u32 {
    match longest_burst_streak(tolerated_secs, window_secs) {
        0 => 0,
        touched => touched.saturating_add(2),
    }
}

/// The quick way to a verdict, beside a burst-proof [`Cusum`]: the same LLRs in a CUSUM that
/// may reach its threshold in fewer windows (`consecutive_windows`), which counts only once
/// the *shape* of the streak of windows with positive LLR shows the change has outlasted a
/// tolerated burst ([`StreakShape`]: the excess counts hold more than d/w + ½ windows at
/// full strength, plus [`DRAIN_WINDOWS`] for evidence that drains).
///
/// A strong step is then proven in ⌈d/w⌉ + 1 windows when it starts on a window boundary
/// (30 s at 10 s windows), where the burst-proof CUSUM alone takes ⌈d/w⌉ + 3; a burst of up to
/// d seconds, whatever evidence came before it, never covers enough windows. Plain data: part
/// of a detector's saved state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QuickCusum {
    cusum: Cusum,
    shape: StreakShape,
}

impl QuickCusum {
    /// Folds in one window: its LLR under test `s` (the quick test) and its excess count over
    /// the reference. A window with an LLR of zero or less ends the streak.
    pub fn push(&mut self, llr: f64, excess: f64, s: &CusumSettings) {
        self.cusum.push(llr, s);
        self.shape.push(llr > 0.0, excess);
    }

    /// True when the quick CUSUM is at its threshold and the streak has outlasted a burst of
    /// `tolerated_secs` at windows of `window_secs`, allowing the burst
    /// [`DRAIN_WINDOWS`] more when `drains` (timeouts and slow requests, which lag the
    /// spell that causes them; fast failures do not).
    pub fn holds(
        &self,
        s: &CusumSettings,
        tolerated_secs: f64,
        window_secs: f64,
        drains: bool,
    ) -> bool {
        let drain = if drains { DRAIN_WINDOWS } else { 0.0 };
        self.cusum.holds(s)
            && self
                .shape
                .outlasts(tolerated_secs + drain * window_secs, window_secs)
    }

    /// The quick CUSUM, in `0..=h`.
    pub fn value(&self) -> f64 {
        self.cusum.value()
    }

    /// Forgets the evidence.
    pub fn reset(&mut self) {
        *self = QuickCusum::default();
    }
}

/// The expected time to reach the threshold after a change, seconds, for a test whose
/// expected LLR per second after the change is `drift_per_sec`: `h / drift`, but no sooner
/// than `k` windows, and infinite when the drift is not positive. The alignment of the onset
/// within a window adds up to one window more.
pub fn expected_delay_secs(s: &CusumSettings, window_secs: f64, drift_per_sec: f64) -> f64 {
    if drift_per_sec.is_nan() || drift_per_sec <= 0.0 {
        return f64::INFINITY;
    }
    // Each window adds min(drift·w, h/k): the cap binds when one window holds more than h/k.
    let per_window = (drift_per_sec * window_secs).min(s.max_step());
    (s.threshold / per_window).ceil() * window_secs
}

/// The upper end of the Wilson score interval of `x` successes among `n` trials at `z`
/// standard deviations: a ratio the true one exceeds with probability about Φ(−z). 1 when
/// `n` is 0 (nothing is known), and above 0 for any `n` (so a ratio never seen is not taken
/// for impossible).
pub fn wilson_upper(x: f64, n: f64, z: f64) -> f64 {
    if n.is_nan() || n <= 0.0 {
        return 1.0;
    }
    let p = (x / n).clamp(0.0, 1.0);
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre + spread) / (1.0 + z2 / n)).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prng::SplitMix64;

    #[test]
    fn the_threshold_inverts_the_false_alarm_bound() {
        let h = threshold_for(1e-4, 10.0);
        assert!((h - 3.6e6f64.ln()).abs() < 1e-12, "{h}");
        assert!((false_alarms_per_hour(h, 10.0) - 1e-4).abs() < 1e-15);
        assert!(threshold_for(1e-4, 5.0) > h && threshold_for(1e-4, 30.0) < h);
        // A rate above one per window would ask for a threshold below zero.
        assert_eq!(threshold_for(1e6, 10.0), MIN_THRESHOLD);
    }

    #[test]
    fn binomial_llr_and_its_drift() {
        let b = Binomial::new(0.01, 0.21).unwrap();
        assert!((b.llr(1, 1) - 21f64.ln()).abs() < 1e-12);
        assert!((b.llr(1, 0) - (0.79f64 / 0.99).ln()).abs() < 1e-12);
        assert_eq!(b.llr(3, 7), 3.0 * b.llr(1, 1));
        // The drift is zero at the crossover, negative at p0, positive at p1.
        let c = b.crossover();
        assert!(b.drift_per_trial(c).abs() < 1e-12);
        assert!(b.drift_per_trial(0.01) < 0.0 && b.drift_per_trial(0.21) > 0.0);
        assert!((0.05..0.09).contains(&c), "{c}");
        assert_eq!(Binomial::new(0.0, 0.2), None);
        assert_eq!(Binomial::new(0.9, 1.0), None);
        assert_eq!(Binomial::new(0.3, 0.3), None);
    }

    #[test]
    fn poisson_llr_and_its_drift() {
        let p = Poisson::new(2.0).unwrap();
        assert!((p.llr(20, 10.0) - (20.0 * 2f64.ln() - 10.0)).abs() < 1e-12);
        assert_eq!(p.llr(5, 0.0), 0.0);
        assert!(p.drift(10.0, p.crossover()).abs() < 1e-12);
        assert!(p.drift(10.0, 1.0) < 0.0 && p.drift(10.0, 2.0) > 0.0);
        assert_eq!(Poisson::new(1.0), None);
    }

    /// Natural logarithms of the negative binomial probabilities of 0, 1, 2, … for mean `mu`
    /// and dispersion `g` (logarithms: far tail terms times large ratios must not be 0 × ∞).
    fn nb_ln_pmf(mu: f64, g: f64, upto: u64) -> Vec<f64> {
        let r = 1.0 / g;
        let mut ln_p = r * (r / (r + mu)).ln();
        let mut out = Vec::new();
        for c in 0..=upto {
            out.push(ln_p);
            ln_p += ((c as f64 + r) / (c as f64 + 1.0) * mu / (r + mu)).ln();
        }
        out
    }

    #[test]
    fn the_overdispersed_llr_is_a_likelihood_ratio() {
        let p = Poisson::new(3.0).unwrap();
        for (e, g) in [
            (0.5, 0.3),
            (2.0, 0.3),
            (10.0, 0.3),
            (40.0, 1.0),
            (5.0, 0.01),
        ] {
            // Under the null its exponential has mean exactly 1 (the module's bound), and under
            // the alternative its mean is the Kullback–Leibler divergence, positive.
            let upto = 20_000;
            let null = nb_ln_pmf(e, g, upto);
            let mean_ratio: f64 = (0..=upto)
                .map(|c| (null[c as usize] + p.llr_overdispersed(c, e, g)).exp())
                .sum();
            assert!((mean_ratio - 1.0).abs() < 1e-9, "e {e} g {g}: {mean_ratio}");
            let alt = nb_ln_pmf(3.0 * e, g, upto);
            let kl: f64 = (0..=upto)
                .map(|c| alt[c as usize].exp() * p.llr_overdispersed(c, e, g))
                .sum();
            assert!(kl > 0.0, "e {e} g {g}: {kl}");
        }
        // No dispersion is Poisson's; much dispersion makes a window worth little.
        assert_eq!(p.llr_overdispersed(7, 2.0, 0.0), p.llr(7, 2.0));
        assert!((p.llr_overdispersed(7, 2.0, 1e-9) - p.llr(7, 2.0)).abs() < 1e-6);
        assert!(p.llr_overdispersed(300, 100.0, 0.3) < 0.1 * p.llr(300, 100.0));
        assert_eq!(p.llr_overdispersed(3, 0.0, 0.3), 0.0);
    }

    #[test]
    fn a_test_can_be_built_for_its_crossover() {
        for m in [1.01, 1.25, 2.0, 3.7, 50.0] {
            let p = Poisson::with_crossover(m).unwrap();
            assert!(
                (p.crossover() - m).abs() < 1e-9 * m,
                "{m}: {}",
                p.crossover()
            );
        }
        // A crossover of 2 is a test against about 3.5 times the expectation.
        let p = Poisson::with_crossover(2.0).unwrap();
        assert!(p.drift(1.0, 1.99) < 0.0 && p.drift(1.0, 2.01) > 0.0);
        assert_eq!(Poisson::with_crossover(1.0), None);
        assert_eq!(Poisson::with_crossover(f64::INFINITY), None);
    }

    #[test]
    fn a_ratio_test_can_be_built_for_its_crossover() {
        for (p0, c) in [
            (0.001, 0.05),
            (0.018, 0.05),
            (0.1, 0.2),
            (0.3, 0.31),
            (0.5, 0.9),
        ] {
            let b = Binomial::with_crossover(p0, c).unwrap();
            assert!(
                (b.crossover() - c).abs() < 1e-9,
                "{p0} {c}: {}",
                b.crossover()
            );
            assert!(b.drift_per_trial(c - 1e-3) < 0.0 && b.drift_per_trial(c + 1e-3) > 0.0);
            // Below the reference the evidence drains: the false-alarm bound's hypothesis.
            assert!(b.drift_per_trial(p0) < 0.0);
        }
        // A 0.3% reference gated at 5% is a test against about 20%.
        let b = Binomial::with_crossover(0.003, 0.05).unwrap();
        assert!((b.up - (0.2f64 / 0.003).ln()).abs() < 0.1, "{b:?}");
        assert_eq!(Binomial::with_crossover(0.05, 0.05), None);
        assert_eq!(Binomial::with_crossover(0.0, 0.05), None);
        assert_eq!(Binomial::with_crossover(0.01, 1.0), None);
        assert_eq!(Binomial::with_crossover(0.5, 0.99), None);
    }

    #[test]
    fn no_tolerated_burst_fills_a_burst_proof_test_by_itself() {
        assert_eq!(burst_proof_windows(20.0, 10.0), 5);
        assert_eq!(burst_proof_windows(20.0, 5.0), 7);
        assert_eq!(burst_proof_windows(20.0, 30.0), 4);
        assert_eq!(burst_proof_windows(0.0, 10.0), 0);
        // A 20 s burst at any alignment, every window it touches at the cap, on top of less
        // than 2h/k of earlier evidence, stays under h.
        for w in [1.0, 5.0, 10.0, 30.0] {
            let k = burst_proof_windows(20.0, w);
            let s = CusumSettings::new(1e-4, w, k);
            let touched = (20.0_f64 / w).ceil() as u32 + 1;
            let mut c = Cusum::default();
            c.push(s.max_step() * 0.99, &s);
            c.push(s.max_step() * 0.99, &s);
            for _ in 0..touched {
                c.push(1e9, &s);
            }
            assert!(!c.holds(&s), "w {w} k {k}");
            // One window more, and it is a change that lasted: it holds.
            c.push(1e9, &s);
            assert!(c.holds(&s), "w {w} k {k}");
        }
    }

    #[test]
    fn the_quick_path_proves_a_step_in_three_windows_and_never_a_20_s_burst() {
        let quick = CusumSettings::new(1e-4, 10.0, 3);
        // A step on a window boundary: the third window.
        let mut q = QuickCusum::default();
        for (i, holds) in [(1, false), (2, false), (3, true)] {
            q.push(1e9, 80.0, &quick);
            assert_eq!(q.holds(&quick, 20.0, 10.0, true), holds, "window {i}");
        }
        // A 20 s burst at every alignment, even on top of a full quick CUSUM: never.
        for tenth in 0..=10 {
            let a = f64::from(tenth) / 10.0;
            let mut q = QuickCusum::default();
            for _ in 0..3 {
                q.push(1e9, 0.0, &quick);
            }
            q.push(-1.0, 0.0, &quick);
            for excess in [80.0 * a, 80.0, 80.0 * (1.0 - a)] {
                q.push(1e9, excess, &quick);
                assert!(!q.holds(&quick, 20.0, 10.0, true), "{a}");
            }
        }
        // A window without evidence ends the streak.
        let mut q = QuickCusum::default();
        q.push(1e9, 80.0, &quick);
        q.push(1e9, 80.0, &quick);
        q.push(-0.1, 80.0, &quick);
        q.push(1e9, 80.0, &quick);
        assert!(!q.holds(&quick, 20.0, 10.0, true));
    }

    #[test]
    fn a_step_adds_at_most_h_over_k_and_the_sum_is_capped_at_h() {
        let s = CusumSettings::new(1e-4, 10.0, 3);
        let mut c = Cusum::default();
        c.push(1e9, &s);
        assert!(!c.holds(&s));
        c.push(1e9, &s);
        assert!(!c.holds(&s));
        c.push(1e9, &s);
        assert!(c.holds(&s));
        assert_eq!(c.value(), s.threshold);
        c.push(-1.0, &s);
        assert!(!c.holds(&s));
        c.push(f64::NAN, &s);
        c.push(-1e9, &s);
        assert_eq!(c.value(), 0.0);
    }

    /// Counts threshold crossings of a CUSUM over `windows` windows of `n` Bernoulli(`p`)
    /// trials, testing `p0` against `p1`.
    fn crossings(p: f64, p0: f64, p1: f64, n: u64, windows: u32, seed: u64) -> u32 {
        let s = CusumSettings::new(1.0, 10.0, 1); // h = ln 360 = 5.9: crossings to count
        let b = Binomial::new(p0, p1).unwrap();
        let mut rng = SplitMix64::new(seed);
        let mut c = Cusum::default();
        let mut n_cross = 0;
        let mut was = false;
        for _ in 0..windows {
            let x = (0..n).filter(|_| rng.next_f64() < p).count() as u64;
            c.push(b.llr(n, x), &s);
            let now = c.holds(&s);
            if now && !was {
                n_cross += 1;
                c.reset();
            }
            was = now && c.holds(&s);
        }
        n_cross
    }

    #[test]
    fn under_the_null_crossings_stay_under_the_bound_at_any_volume() {
        // h = ln 360: at most one crossing per 360 windows expected, whatever n.
        for (n, seed) in [(1u64, 1u64), (10, 2), (100, 3)] {
            let windows = 36_000;
            let got = crossings(0.02, 0.02, 0.22, n, windows, seed);
            // The bound allows 100; Wald's approximation is well under it.
            assert!(got <= 100, "n = {n}: {got} crossings in {windows} windows");
        }
    }

    #[test]
    fn the_expected_delay_matches_a_simulation() {
        // 30% failing at 5 req/s against 1% -> 21%, 10 s windows, h for 1e-4 per hour.
        let s = CusumSettings::new(1e-4, 10.0, 3);
        let b = Binomial::new(0.01, 0.21).unwrap();
        let d = expected_delay_secs(&s, 10.0, 5.0 * b.drift_per_trial(0.3));
        assert_eq!(d, 30.0, "the cap binds: three windows");
        // 30% at 0.5 req/s: about 5 requests a window.
        let slow = expected_delay_secs(&s, 10.0, 0.5 * b.drift_per_trial(0.3));
        assert!((40.0..=80.0).contains(&slow), "{slow}");
        let mut rng = SplitMix64::new(9);
        let mut total = 0.0;
        let trials = 200;
        for _ in 0..trials {
            let mut c = Cusum::default();
            let mut w = 0;
            while !c.holds(&s) {
                let x = (0..5).filter(|_| rng.next_f64() < 0.3).count() as u64;
                c.push(b.llr(5, x), &s);
                w += 1;
            }
            total += f64::from(w) * 10.0;
        }
        let mean = total / f64::from(trials);
        assert!(
            (slow * 0.7..=slow * 1.5).contains(&mean),
            "{mean} vs {slow}"
        );
        assert_eq!(expected_delay_secs(&s, 10.0, -1.0), f64::INFINITY);
    }

    #[test]
    fn wilson_upper_bounds() {
        assert_eq!(wilson_upper(0.0, 0.0, 2.0), 1.0);
        let u = wilson_upper(0.0, 5.0, 2.0);
        assert!((u - 0.8 / 1.8).abs() < 1e-12, "{u}");
        let big = wilson_upper(30.0, 10_000.0, 2.0);
        assert!(big > 0.003 && big < 0.0045, "{big}");
        assert!(wilson_upper(10.0, 10.0, 2.0) <= 1.0);
    }
}
