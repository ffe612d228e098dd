//! One entity's evidence that a ratio rose (events among trials: failures among requests,
//! slow responses among timed ones, a key's requests among its group's), in one piece: the
//! ratio's baseline with the windows it holds back, the burst-proof CUSUM, and the optional
//! quick and severe CUSUMs beside it. ErrorSurge, ShardFailing, LatencySkew (twice),
//! DeadlinePileUp and HotKey each keep one per entity and differ only in the hypotheses they
//! test, which they build from what the baseline rests on.
//!
//! A window goes through it in three steps: [`RatioEvidence::weigh`] adds its log-likelihood
//! ratios, [`RatioEvidence::proven`] names the CUSUM that proves a rise (if one does), and
//! [`RatioEvidence::learn`] teaches the baseline, holding back the windows of an excursion of
//! the evidence ([`HeldWindows`]). Settings that follow from a detector's configuration live
//! in [`RatioTests`], built once by [`RatioTests::new`], which splits the detector's
//! false-alarm rate over its tests.

use serde::{Deserialize, Serialize};

use crate::evidence::baseline::{HeldWindows, Ratio, RatioBaseline, alpha_for};
use crate::evidence::cusum::{Binomial, Cusum, CusumSettings, QuickCusum, burst_proof_windows};

/// What a detector's configuration says about its ratio tests: the stated false-alarm rate and
/// how many tests share it, the timing, and the baseline's warm-up and time constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioSettings {
    /// False alarms per entity-hour the detector allows while the ratio stays at its
    /// reference.
    pub false_alarms_per_hour: f64,
    /// The tests that share that rate; each gets an equal part (a union bound).
    pub tests: u32,
    /// The window length, seconds.
    pub window_secs: f64,
    /// The fewest windows any test takes (`consecutive_windows`).
    pub consecutive_windows: u32,
    /// The longest burst to tolerate, seconds.
    pub tolerated_burst_secs: f64,
    /// Windows the burst-proof tests take beyond [`burst_proof_windows`].
    pub margin_windows: u32,
    /// Windows the baseline needs before a test is built on it.
    pub warmup_windows: u32,
    /// Time constant of the baseline, seconds.
    pub baseline_tau_secs: f64,
}

impl RatioSettings {
    /// Each test's part of the false-alarm rate.
    fn per_test(&self) -> f64 {
        self.false_alarms_per_hour / f64::from(self.tests.max(1))
    }
}

/// The quick path: the burst-proof test's LLRs in a CUSUM that may reach its threshold in
/// `consecutive_windows`, counting once the streak's shape has outlasted a tolerated burst.
#[derive(Debug, Clone, Copy, PartialEq)]
struct QuickPath {
    cusum: CusumSettings,
    /// True when the quick CUSUM above zero holds windows back from the baseline too.
    holds_back: bool,
}

/// The tests a detector runs on every entity's [`RatioEvidence`], built once from its
/// [`RatioSettings`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioTests {
    settings: RatioSettings,
    /// The burst-proof CUSUM's settings, which the severe test shares.
    proof: CusumSettings,
    quick: Option<QuickPath>,
    severe: bool,
    alpha: f64,
}

/// The CUSUM of a [`RatioEvidence`] that proved a rise: the firing path an alert names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// The burst-proof CUSUM: at least ⌈d/w⌉ + 3 windows.
    Cusum,
    /// The severe test's burst-proof CUSUM.
    Severe,
    /// The quick CUSUM, once the streak's shape has outlasted a tolerated burst.
    Quick,
}

impl Proof {
    /// The firing path's name, as the `proven_by` annotation carries it.
    pub fn name(self) -> &'static str {
        match self {
            Proof::Cusum => "cusum",
            Proof::Severe => "severe_cusum",
            Proof::Quick => "quick_cusum",
        }
    }
}

impl RatioTests {
    /// The burst-proof test of `s`: its part of the false-alarm rate, reached in no fewer than
    /// the larger of `consecutive_windows` and [`burst_proof_windows`] (plus the margin).
    pub fn new(s: RatioSettings) -> RatioTests {
        let burst_proof = burst_proof_windows(s.tolerated_burst_secs, s.window_secs);
        RatioTests {
            settings: s,
            proof: CusumSettings::new(
                s.per_test(),
                s.window_secs,
                s.consecutive_windows.max(burst_proof + s.margin_windows),
            ),
            quick: None,
            severe: false,
            alpha: alpha_for(s.window_secs, s.baseline_tau_secs),
        }
    }

    /// With the quick path beside the burst-proof test, at the same part of the rate (the same
    /// evidence, capped less), reaching its threshold in `consecutive_windows`. When
    /// `holds_back`, the baseline also holds back the windows while the quick CUSUM is above
    /// zero.
    pub fn with_quick(mut self, holds_back: bool) -> RatioTests {
        let s = self.settings;
        self.quick = Some(QuickPath {
            cusum: CusumSettings::new(s.per_test(), s.window_secs, s.consecutive_windows),
            holds_back,
        });
        self
    }

    /// With a severe test beside the burst-proof one, on its settings.
    pub fn with_severe(mut self) -> RatioTests {
        self.severe = true;
        self
    }

    /// The burst-proof test's settings.
    pub fn proof(&self) -> &CusumSettings {
        &self.proof
    }

    /// The baselines' EWMA weight of one window.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Windows the baseline needs before a test is built on it.
    fn warmup(&self) -> u32 {
        self.settings.warmup_windows
    }
}

/// The hypotheses one window is tested on, built from what the baseline rests on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hypotheses {
    /// The reference ratio: a window's excess events are those over it.
    pub reference: f64,
    /// The test of the rise (`None`: the window adds nothing).
    pub rise: Option<Binomial>,
    /// The severe test, for tests that have one.
    pub severe: Option<Binomial>,
}

/// The counts an excursion of the evidence rests on: the windows since the burst-proof CUSUM
/// (and the quick one, when it holds windows back) was last at zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Excursion {
    /// Events among trials over those windows.
    pub counts: Ratio<u64>,
    /// The windows.
    pub windows: u32,
}

/// One entity's evidence of a rise in a ratio, and the baseline it is measured against.
/// Plain data: it is part of a detector's saved state, where what is at rest is left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RatioEvidence {
    baseline: RatioBaseline,
    #[serde(skip_serializing_if = "is_default")]
    held: HeldWindows,
    #[serde(skip_serializing_if = "is_default")]
    cusum: Cusum,
    #[serde(skip_serializing_if = "is_default")]
    quick: QuickCusum,
    #[serde(skip_serializing_if = "is_default")]
    severe: Cusum,
    #[serde(skip_serializing_if = "is_default")]
    excursion: Excursion,
}

/// True for a value that is its type's default: what the saved state leaves out.
fn is_default<T: Default + PartialEq>(x: &T) -> bool {
    *x == T::default()
}

impl RatioEvidence {
    /// Evidence resting on a baseline that already holds `baseline`.
    pub fn on(baseline: RatioBaseline) -> RatioEvidence {
        RatioEvidence {
            baseline,
            ..RatioEvidence::default()
        }
    }

    /// The baseline's events and trials over the windows it spans, once warm.
    pub fn seen(&self, tests: &RatioTests) -> Option<Ratio<f64>> {
        self.baseline.seen(tests.warmup(), tests.alpha)
    }

    /// The baseline.
    pub fn baseline(&self) -> &RatioBaseline {
        &self.baseline
    }

    /// Adds `window` to the evidence: once the baseline is warm, `hypotheses` builds the tests
    /// from what it rests on, and their LLRs go into the CUSUMs (`None`: nothing is added).
    /// Then extends or ends the excursion. Returns the hypotheses tested.
    pub fn weigh(
        &mut self,
        tests: &RatioTests,
        window: Ratio<u64>,
        hypotheses: impl FnOnce(Ratio<f64>) -> Option<Hypotheses>,
    ) -> Option<Hypotheses> {
        self.weigh_from_start(tests, window, |seen| seen.and_then(hypotheses))
    }

    /// As [`RatioEvidence::weigh`], for a detector that has a reference without history (a
    /// shard's peers in the window): `hypotheses` is asked from the first window, with `None`
    /// while the baseline is cold. The CUSUMs and their thresholds are the same, so the stated
    /// false-alarm bound holds against whatever reference the hypotheses rest on.
    pub fn weigh_from_start(
        &mut self,
        tests: &RatioTests,
        window: Ratio<u64>,
        hypotheses: impl FnOnce(Option<Ratio<f64>>) -> Option<Hypotheses>,
    ) -> Option<Hypotheses> {
        let h = hypotheses(self.seen(tests));
        if let Some(h) = h {
            let llr = |t: Option<Binomial>| t.map_or(0.0, |t| t.llr(window.trials, window.events));
            let rise = llr(h.rise);
            self.cusum.push(rise, &tests.proof);
            if tests.severe {
                self.severe.push(llr(h.severe), &tests.proof);
            }
            if let Some(q) = &tests.quick {
                let excess = window.events as f64 - window.trials as f64 * h.reference;
                self.quick.push(rise, excess, &q.cusum);
            }
        }
        let e = self.excursion;
        self.excursion = if self.at_rest(tests) {
            Excursion::default()
        } else {
            Excursion {
                counts: Ratio {
                    events: e.counts.events + window.events,
                    trials: e.counts.trials + window.trials,
                },
                windows: e.windows + 1,
            }
        };
        h
    }

    /// The CUSUM that proves a rise, the first of the burst-proof, the severe and the quick
    /// one; `drains` allows the quick path's burst [`crate::evidence::shape::DRAIN_WINDOWS`] more (timeouts and slow
    /// requests lag the spell that causes them).
    pub fn proven(&self, tests: &RatioTests, drains: bool) -> Option<Proof> {
        if self.cusum.holds(&tests.proof) {
            return Some(Proof::Cusum);
        }
        if tests.severe && self.severe.holds(&tests.proof) {
            return Some(Proof::Severe);
        }
        let q = tests.quick.as_ref()?;
        let s = &tests.settings;
        self.quick
            .holds(&q.cusum, s.tolerated_burst_secs, s.window_secs, drains)
            .then_some(Proof::Quick)
    }

    /// Teaches the baseline `window`, holding back the windows of an excursion until every
    /// burst-proof CUSUM is back at zero (it was noise) or a warm-up's worth are held (a change
    /// too small to prove is the new normal); when `frozen` (a rise is proven, or its alert is
    /// active) teaches nothing and forgets the held windows.
    pub fn learn(&mut self, tests: &RatioTests, window: Ratio<u64>, frozen: bool) {
        let settled = self.at_rest(tests) && self.severe.value() == 0.0;
        self.held.hold(
            window,
            (frozen, settled),
            tests.warmup(),
            &mut self.baseline,
            tests.alpha,
        );
    }

    /// True when no evidence is building: the burst-proof CUSUM at zero, and the quick one too
    /// when it holds windows back.
    pub fn at_rest(&self, tests: &RatioTests) -> bool {
        let quick = tests.quick.is_some_and(|q| q.holds_back) && self.quick.value() > 0.0;
        self.cusum.value() == 0.0 && !quick
    }

    /// The evidence as a fraction of its threshold: the highest of the CUSUMs.
    pub fn fraction(&self, tests: &RatioTests) -> f64 {
        let proof = self.cusum.value().max(self.severe.value()) / tests.proof.threshold;
        match &tests.quick {
            Some(q) => proof.max(self.quick.value() / q.cusum.threshold),
            None => proof,
        }
    }

    /// The counts of the current excursion.
    pub fn excursion(&self) -> Excursion {
        self.excursion
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::cusum::threshold_for;

    fn settings(tests: u32) -> RatioSettings {
        RatioSettings {
            false_alarms_per_hour: 1e-4,
            tests,
            window_secs: 10.0,
            consecutive_windows: 3,
            tolerated_burst_secs: 20.0,
            margin_windows: 0,
            warmup_windows: 5,
            baseline_tau_secs: 3600.0,
        }
    }

    /// The test of `p0` against `p1`, with the reference `p0`.
    fn rise(p0: f64, p1: f64) -> impl FnOnce(Ratio<f64>) -> Option<Hypotheses> {
        move |_| {
            Some(Hypotheses {
                reference: p0,
                rise: Binomial::new(p0, p1),
                severe: Binomial::new(p0, 0.9),
            })
        }
    }

    /// Evidence whose baseline has learned `windows` windows of 100 requests with one event.
    fn warm(tests: &RatioTests, windows: u32) -> RatioEvidence {
        let mut e = RatioEvidence::default();
        for _ in 0..windows {
            e.learn(tests, Ratio::of(1, 100), false);
        }
        e
    }

    #[test]
    fn the_rate_is_split_over_the_tests_and_the_burst_proof_test_takes_its_windows() {
        let one = RatioTests::new(settings(1));
        let two = RatioTests::new(settings(2)).with_quick(false);
        assert_eq!(one.proof().threshold, threshold_for(1e-4, 10.0));
        assert_eq!(two.proof().threshold, threshold_for(0.5e-4, 10.0));
        // ⌈20/10⌉ + 3 windows at the fewest, beyond `consecutive_windows` (3); the quick path
        // takes those 3 at the same part of the rate.
        assert_eq!(one.proof().min_windows, 5);
        let quick = two.quick.unwrap();
        assert_eq!(quick.cusum.min_windows, 3);
        assert_eq!(quick.cusum.threshold, two.proof().threshold);
        let margin = RatioTests::new(RatioSettings {
            margin_windows: 1,
            ..settings(1)
        });
        assert_eq!(margin.proof().min_windows, 6);
    }

    #[test]
    fn nothing_is_weighed_on_a_cold_baseline() {
        let tests = RatioTests::new(settings(1)).with_severe();
        let mut e = warm(&tests, 4);
        assert_eq!(e.weigh(&tests, Ratio::of(100, 100), rise(0.01, 0.2)), None);
        assert_eq!(e.fraction(&tests), 0.0);
        e.learn(&tests, Ratio::of(1, 100), false);
        let seen = e.seen(&tests).unwrap();
        assert!((seen.share() - 0.01).abs() < 1e-12, "{seen:?}");
        assert!(
            e.weigh(&tests, Ratio::of(100, 100), rise(0.01, 0.2))
                .is_some()
        );
        assert!(e.fraction(&tests) > 0.0);
    }

    #[test]
    fn a_reference_without_history_is_weighed_from_the_first_window() {
        // The hypotheses are asked while the baseline is cold (with `None`); what they build
        // goes into the same CUSUMs, so a strong rise is proven in as many windows as on a warm
        // baseline, and its windows are not taught.
        let tests = RatioTests::new(settings(1));
        let mut e = RatioEvidence::default();
        let mut asked = Vec::new();
        for _ in 0..5 {
            e.weigh_from_start(&tests, Ratio::of(100, 100), |seen| {
                asked.push(seen.is_some());
                rise(0.01, 0.2)(Ratio {
                    events: 0.0,
                    trials: 0.0,
                })
            });
            e.learn(
                &tests,
                Ratio::of(100, 100),
                e.proven(&tests, false).is_some(),
            );
        }
        assert_eq!(asked, [false; 5]);
        assert_eq!(e.proven(&tests, false), Some(Proof::Cusum));
        assert_eq!(e.baseline().trials.samples(), 0);
        // `weigh` asks nothing of a cold baseline.
        let mut cold = RatioEvidence::default();
        assert_eq!(
            cold.weigh(&tests, Ratio::of(100, 100), |_| panic!("asked")),
            None
        );
    }

    #[test]
    fn a_rise_is_proven_by_the_first_cusum_that_holds() {
        // Every request failing: the severe test (a failure adds ln 90) reaches its threshold
        // in the fewest windows, as the burst-proof one does; the burst-proof one is named.
        let tests = RatioTests::new(settings(2)).with_severe();
        let mut e = warm(&tests, 5);
        let mut proofs = Vec::new();
        for _ in 0..5 {
            e.weigh(&tests, Ratio::of(100, 100), rise(0.01, 0.2));
            proofs.push(e.proven(&tests, false));
        }
        assert_eq!(proofs, [None, None, None, None, Some(Proof::Cusum)]);
        // With a quick path the same step is proven on its third window, by the quick CUSUM.
        let tests = RatioTests::new(settings(2)).with_quick(false);
        let mut e = warm(&tests, 5);
        let mut proofs = Vec::new();
        for _ in 0..3 {
            e.weigh(&tests, Ratio::of(100, 100), rise(0.01, 0.2));
            proofs.push(e.proven(&tests, false));
        }
        assert_eq!(proofs, [None, None, Some(Proof::Quick)]);
        assert_eq!(Proof::Quick.name(), "quick_cusum");
        assert_eq!(e.excursion().windows, 3);
        assert_eq!(e.excursion().counts, Ratio::of(300, 300));
    }

    #[test]
    fn the_baseline_holds_an_excursion_back_and_forgets_a_proven_one() {
        let tests = RatioTests::new(settings(1));
        let mut e = warm(&tests, 5);
        let learned = e.baseline().trials.samples();
        // Evidence up: the window waits.
        e.weigh(&tests, Ratio::of(30, 100), rise(0.01, 0.2));
        e.learn(&tests, Ratio::of(30, 100), false);
        assert_eq!(e.baseline().trials.samples(), learned);
        // Back at zero: the held window and this one are taught.
        e.weigh(&tests, Ratio::of(0, 100), rise(0.01, 0.2));
        assert!(e.at_rest(&tests));
        e.learn(&tests, Ratio::of(0, 100), false);
        assert_eq!(e.baseline().trials.samples(), learned + 2);
        // A frozen window (a proven rise, an active alert) is forgotten with what was held.
        e.weigh(&tests, Ratio::of(30, 100), rise(0.01, 0.2));
        e.learn(&tests, Ratio::of(30, 100), false);
        e.learn(&tests, Ratio::of(30, 100), true);
        assert_eq!(e.baseline().trials.samples(), learned + 2);
        assert_eq!(e.held, HeldWindows::default());
    }

    #[test]
    fn a_quick_path_that_holds_back_keeps_the_entity_from_rest() {
        let holds = RatioTests::new(settings(2)).with_quick(true);
        let lets_go = RatioTests::new(settings(2)).with_quick(false);
        for (tests, at_rest) in [(holds, false), (lets_go, true)] {
            let mut e = warm(&tests, 5);
            // A strong window, then one that drains the burst-proof CUSUM (capped at h/5 a
            // window) back to zero but not the quick one (capped at h/3).
            e.weigh(&tests, Ratio::of(100, 100), rise(0.01, 0.2));
            e.weigh(&tests, Ratio::of(0, 100), |_| {
                Some(Hypotheses {
                    reference: 0.01,
                    rise: None,
                    severe: None,
                })
            });
            let drain = -tests.proof().max_step();
            e.cusum.push(drain, &tests.proof);
            assert_eq!(e.cusum.value(), 0.0);
            assert!(e.quick.value() > 0.0);
            assert_eq!(e.at_rest(&tests), at_rest);
        }
    }

    #[test]
    fn saved_state_leaves_out_what_is_at_rest() {
        let tests = RatioTests::new(settings(1));
        let e = warm(&tests, 5);
        let saved = serde_json::to_value(&e).unwrap();
        let keys: Vec<&String> = saved.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["baseline"]);
        let back: RatioEvidence = serde_json::from_value(saved).unwrap();
        assert_eq!(back, e);
    }
}
