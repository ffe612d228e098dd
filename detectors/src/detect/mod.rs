//! Detectors: the fourth stage (`... -> SkewStats -> Detectors -> Alerts`).
//!
//! Each detector reads one closed window ([`WindowSnapshot`]) plus its own state (baselines,
//! streaks, CUSUM sums) and reports a [`Finding`] for every entity whose condition holds now.
//! The [`crate::alert::AlertBook`] turns findings into pending, firing and resolved alerts.
//! Time is the window's end, passed in; nothing here reads a clock.
//!
//! Every detector's module says what it detects and names its firing paths, the rules an
//! alert's `proven_by` annotation names; `docs/detectors.md` is the one home of their methods,
//! defaults and figures, why they do not false-alarm on ordinary traffic, and the machinery
//! they share ([`crate::evidence`]). The defaults are in `rules/skewwatch.yaml`.
//!
//! A detector is a [`DetectorKind`]: it names itself and its YAML section and builds itself
//! from its [`DetectorSettings`]. The `detectors!` list below names every kind once and
//! derives [`DetectorsConfig`] from it; adding a detector is a new module and one line in that
//! list.
//!
//! Most detectors judge each group on its own: they are [`GroupDetector`]s, and the one
//! [`Detector`] implementation they share visits the groups, forgets the groups and shards
//! that left the snapshot, and saves and restores what they learned. A detector's file then
//! holds only its judgement of one group.

// One module per detector; each is also listed in `detectors!` below. The module lines stay
// outside the macro because rustfmt only formats modules it sees declared outside macros.
pub mod cache_collapse;
pub mod capacity;
pub mod cardinality;
pub mod deadline;
pub mod error_surge;
pub mod fast_failure;
pub mod hot_key;
pub mod hot_shard;
pub mod latency_skew;
pub mod shard_failing;

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::alert::{AlertBook, AlertRule, Finding, Severity};
use crate::snapshot::{GroupSnapshot, WindowSnapshot};

/// What a detector sees at one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The window that just closed; `snapshot.end` is "now".
    pub snapshot: &'a WindowSnapshot,
    /// Active alerts before this evaluation (to freeze baselines while an alert is active).
    pub alerts: &'a AlertBook,
    /// Configured window length in seconds.
    pub window_secs: f64,
}

impl Context<'_> {
    /// Evaluation time: the end of the window.
    pub fn now(&self) -> f64 {
        self.snapshot.end
    }
}

/// One running detector, as the engine drives it.
pub trait Detector: Send + fmt::Debug {
    /// The alert name it reports.
    fn alertname(&self) -> &'static str;
    /// Examines one closed window and pushes a finding for every entity whose condition holds.
    fn evaluate(&mut self, ctx: &Context<'_>, out: &mut Vec<Finding>);
    /// What it has learned (baselines, streaks, sums), as plain data, so it survives a restart
    /// (the state file) or a reload (a detector rebuilt with new settings). Implemented with
    /// [`save_state_of`].
    fn save_state(&self) -> serde_json::Value;
    /// Takes back what [`Detector::save_state`] of the same kind returned. An error leaves the
    /// detector as it was.
    fn restore_state(&mut self, state: serde_json::Value) -> Result<(), String>;
    /// The wall clock stepped between two windows: forget what depends on the spacing of
    /// windows in time (a trend fitted over window ends, say). Baselines and streaks, which
    /// count windows, stay.
    fn clock_stepped(&mut self) {}
}

/// What a detector has learned, kept in `state` (plain data that derives `Serialize`), as
/// [`Detector::save_state`] returns it.
pub fn save_state_of<S: Serialize>(state: &S) -> serde_json::Value {
    // Plain maps of numbers and strings always serialize; a non-finite number becomes null and
    // fails the restore, which then starts that detector afresh.
    serde_json::to_value(state).unwrap_or(serde_json::Value::Null)
}

/// Takes back into `state` what [`save_state_of`] returned, as [`Detector::restore_state`]
/// does: an error leaves `state` as it was.
pub fn restore_state_into<S: DeserializeOwned>(
    state: &mut S,
    saved: serde_json::Value,
) -> Result<(), String> {
    *state = serde_json::from_value(saved).map_err(|e| e.to_string())?;
    Ok(())
}

/// A detector that judges each group of a window on its own and remembers a
/// [`GroupDetector::State`] per group.
///
/// Its [`Detector`] implementation is the one below, shared by every such detector: it forgets
/// the groups that left the snapshot (and, through [`GroupMemory::forget_departed`], the
/// shards that left a group), so memory stays bounded by what the windows track; it visits the
/// groups in snapshot order, which is the order of the findings; and it saves and restores
/// the states. The detector itself says which groups it judges ([`GroupDetector::visit`]) and
/// judges one group ([`GroupDetector::judge`]).
pub trait GroupDetector: DetectorKind {
    /// What it remembers about one group.
    type State: GroupMemory;

    /// What it remembers, by group name.
    fn states(&self) -> &BTreeMap<String, Self::State>;

    /// What it remembers, by group name, to write.
    fn states_mut(&mut self) -> &mut BTreeMap<String, Self::State>;

    /// What it does with `g` in this window; by default it judges every group, the
    /// `__other__` aggregate included.
    fn visit(&self, _g: &GroupSnapshot) -> Visit {
        Visit::Judge
    }

    /// Judges `g` with what it remembers of it, `st` (made afresh for a new group; the shards
    /// that left `g` already forgotten), and pushes a finding for every entity whose condition
    /// holds.
    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        st: &mut Self::State,
        out: &mut Vec<Finding>,
    );

    /// The wall clock stepped between two windows (see [`Detector::clock_stepped`]): forget,
    /// in one group's `st`, what depends on the spacing of windows in time. By default nothing
    /// does.
    fn after_clock_step(_st: &mut Self::State) {}
}

/// What a [`GroupDetector`] remembers about one group: plain data, so it can be saved.
pub trait GroupMemory: Default + Serialize + DeserializeOwned + fmt::Debug + Send {
    /// Forgets what it holds about shards that left `g` (the window stage expired them), so
    /// memory stays bounded by the shards the windows track. Called before each judgement of
    /// the group; by default there is nothing per shard to forget.
    fn forget_departed(&mut self, _g: &GroupSnapshot) {}
}

/// State per shard, by shard name: a shard that left the group takes its state with it.
impl<S> GroupMemory for BTreeMap<String, S>
where
    S: Serialize + DeserializeOwned + fmt::Debug + Send,
{
    fn forget_departed(&mut self, g: &GroupSnapshot) {
        self.retain(|name, _| g.shard(name).is_some());
    }
}

/// What a [`GroupDetector`] does with one group in one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Judges it; a group seen for the first time gets a fresh state.
    Judge,
    /// Passes it by: its state, if it has one, stays as it was, and none is made.
    Pass,
    /// Passes it by and forgets its state.
    Forget,
}

impl Visit {
    /// [`Visit::Judge`] when `judged`, else [`Visit::Pass`].
    pub fn when(judged: bool) -> Visit {
        if judged { Visit::Judge } else { Visit::Pass }
    }
}

impl<T: GroupDetector> Detector for T {
    fn alertname(&self) -> &'static str {
        T::ALERTNAME
    }

    fn evaluate(&mut self, ctx: &Context<'_>, out: &mut Vec<Finding>) {
        let snap = ctx.snapshot;
        // Taken out for the loop, so `judge` reads the detector while it writes a group's state.
        let mut states = std::mem::take(self.states_mut());
        // Groups that left the snapshot take their state with them. The `__other__` aggregate
        // is no group by name, so what a detector that judges it learns lasts one window.
        states.retain(|name, _| snap.group(name).is_some());
        for g in &snap.groups {
            match self.visit(g) {
                Visit::Judge => {
                    let st = states.entry(g.group.clone()).or_default();
                    st.forget_departed(g);
                    self.judge(ctx, g, st, out);
                }
                Visit::Pass => {}
                Visit::Forget => {
                    states.remove(&g.group);
                }
            }
        }
        *self.states_mut() = states;
    }

    fn save_state(&self) -> serde_json::Value {
        save_state_of(self.states())
    }

    fn restore_state(&mut self, state: serde_json::Value) -> Result<(), String> {
        restore_state_into(self.states_mut(), state)
    }

    fn clock_stepped(&mut self) {
        self.states_mut().values_mut().for_each(T::after_clock_step);
    }
}

/// A kind of detector: it names itself and its YAML section, owns a settings type, and builds
/// the running [`Detector`] from those settings.
///
/// Each kind is listed once, in the `detectors!` list of this module, which derives
/// [`DetectorsConfig`] and its `problems`, `rules` and `build` from the list. A detector keeps
/// its state (baselines, streaks, sums) in plain data types, so that state can later be saved
/// and restored without the detector knowing how.
pub trait DetectorKind: Detector + Sized + 'static {
    /// The `alertname` label of its alerts.
    const ALERTNAME: &'static str;
    /// Its key under `detectors:` in the YAML, and the name of its [`DetectorsConfig`] field.
    const KEY: &'static str;
    /// Its settings.
    type Config: DetectorSettings;

    /// A detector for windows of `window_secs`.
    fn new(cfg: Self::Config, window_secs: f64) -> Self;

    /// Whether `cfg` asks for the detector to run; by default, its `alert.enabled`.
    fn runs(cfg: &Self::Config) -> bool {
        cfg.alert().enabled
    }

    /// The running detector, or `None` when `cfg` turns it off.
    fn build(cfg: &Self::Config, window_secs: f64) -> Option<Box<dyn Detector>> {
        Self::runs(cfg).then(|| Box::new(Self::new(cfg.clone(), window_secs)) as Box<dyn Detector>)
    }
}

/// The settings of one kind of detector (its section under `detectors:` in the YAML).
pub trait DetectorSettings:
    fmt::Debug + Clone + Default + PartialEq + Serialize + DeserializeOwned
{
    /// The `alert:` section: whether the detector runs, its severity and its timing.
    fn alert(&self) -> &RuleSettings;

    /// Records every problem with these settings in `p`, each with why.
    fn check(&self, p: &mut Problems<'_>);
}

/// A configuration problem: the field's dotted path and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// Dotted path, e.g. `detectors.hot_shard.min_requests`.
    pub field: String,
    /// What is wrong and what to do.
    pub why: String,
}

/// Collects problems under a path prefix.
#[derive(Debug)]
pub struct Problems<'a> {
    prefix: String,
    out: &'a mut Vec<FieldProblem>,
}

impl<'a> Problems<'a> {
    /// Problems under `prefix` go into `out`.
    pub fn new(prefix: &str, out: &'a mut Vec<FieldProblem>) -> Self {
        Problems {
            prefix: prefix.to_owned(),
            out,
        }
    }

    /// Records a problem with `field` under the prefix.
    pub fn fail(&mut self, field: &str, why: impl fmt::Display) {
        self.out.push(FieldProblem {
            field: format!("{}.{field}", self.prefix),
            why: why.to_string(),
        });
    }

    /// Checks `lo <= v <= hi` (and finiteness).
    pub fn range(&mut self, field: &str, v: f64, lo: f64, hi: f64) {
        if !(v.is_finite() && v >= lo && v <= hi) {
            self.fail(field, format!("{v} is out of range: use {lo}..={hi}"));
        }
    }

    /// Checks a baseline's time constant, seconds: a second to 30 days.
    pub fn time_constant(&mut self, field: &str, v: f64) {
        self.range(field, v, 1.0, 30.0 * 86_400.0);
    }

    /// Checks a burst to tolerate, seconds: none to a day.
    pub fn burst(&mut self, field: &str, v: f64) {
        self.range(field, v, 0.0, 86_400.0);
    }

    /// Checks a stated false-alarm rate per entity-hour: above 0 (10⁻¹²) and at most one.
    pub fn false_alarm_rate(&mut self, field: &str, v: f64) {
        self.range(field, v, 1e-12, 1.0);
    }

    /// Checks a count of windows: `1..=`[`MAX_WINDOWS`].
    pub fn windows(&mut self, field: &str, v: u32) {
        self.windows_from(field, v as usize, 1);
    }

    /// Checks a count of windows whose smallest sensible value is `lo` (0 where none means
    /// "never", 3 for a fitted trend): `lo..=`[`MAX_WINDOWS`].
    pub fn windows_from(&mut self, field: &str, v: usize, lo: usize) {
        if !(lo..=MAX_WINDOWS as usize).contains(&v) {
            self.fail(
                field,
                format!("{v} is out of range: use {lo}..={MAX_WINDOWS}"),
            );
        }
    }
}

/// Largest count of windows any detector setting accepts: warm-ups, streaks, freeze limits
/// and fit lengths alike.
///
/// At the default 10 s windows this is a little over a day. No detector should wait longer
/// than that to learn a baseline or to call a condition persistent, so a larger value is
/// almost surely a unit mistake (seconds typed where windows are meant). The bound also caps
/// memory: `capacity_headroom.projection_windows` keeps one sample per window for every shard
/// with a capacity, 16 bytes each. The shipped `rules/skewwatch.yaml` stays far below it.
pub const MAX_WINDOWS: u32 = 10_000;

/// Settings every detector has: whether it runs and how its alert is timed.
///
/// In YAML this is each detector's `alert:` section. Fields left out take the generic defaults
/// (enabled, `warning`, `for_secs: 0`, `keep_firing_for_secs: 60`), not the detector's own: the
/// shipped `rules/skewwatch.yaml` spells every field out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuleSettings {
    /// Run the detector.
    pub enabled: bool,
    /// The `severity` label.
    pub severity: Severity,
    /// Prometheus-style `for`: the condition must hold this long before the alert fires.
    pub for_secs: f64,
    /// Prometheus-style `keep_firing_for`: hysteresis after the condition stops holding.
    pub keep_firing_for_secs: f64,
}

impl Default for RuleSettings {
    fn default() -> Self {
        RuleSettings::new(Severity::Warning, 0.0, 60.0)
    }
}

impl RuleSettings {
    /// Settings with the given severity and timing.
    pub const fn new(severity: Severity, for_secs: f64, keep_firing_for_secs: f64) -> Self {
        RuleSettings {
            enabled: true,
            severity,
            for_secs,
            keep_firing_for_secs,
        }
    }

    /// The alert timing.
    pub fn rule(&self) -> AlertRule {
        AlertRule {
            for_secs: self.for_secs,
            keep_firing_for_secs: self.keep_firing_for_secs,
        }
    }

    /// Checks the timing fields.
    pub fn check(&self, p: &mut Problems<'_>) {
        p.range("for_secs", self.for_secs, 0.0, 86_400.0);
        p.range(
            "keep_firing_for_secs",
            self.keep_firing_for_secs,
            0.0,
            86_400.0,
        );
    }
}

/// Declares every detector kind from one list of `field: module::Kind` lines.
///
/// Each line adds the detector's settings to [`DetectorsConfig`] as a field named after its
/// YAML key and gives it its place in the evaluation order, which is also the order of
/// findings and so of output. `DetectorsConfig::problems`, `rules` and `build` are generated
/// from the same list, so they cannot disagree with it.
macro_rules! detectors {
    ($($(#[$doc:meta])* $field:ident: $module:ident::$kind:ident,)+) => {
        // A field is named after its detector's YAML key; a mismatch does not compile.
        $(const _: () = assert!(
            same_str(<$module::$kind as DetectorKind>::KEY, stringify!($field)),
            concat!(stringify!($module::$kind), "::KEY must equal the field name ", stringify!($field)),
        );)+

        /// The configuration of every detector (`detectors:` in the YAML).
        #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct DetectorsConfig {
            $($(#[$doc])* pub $field: <$module::$kind as DetectorKind>::Config,)+
        }

        impl DetectorsConfig {
            /// `(YAML key, alert name)` of every detector kind, in evaluation order.
            pub const KINDS: &'static [(&'static str, &'static str)] = &[
                $((
                    <$module::$kind as DetectorKind>::KEY,
                    <$module::$kind as DetectorKind>::ALERTNAME,
                ),)+
            ];

            /// Every problem in the detector settings, with paths under `prefix` (e.g.
            /// `detectors`).
            pub fn problems(&self, prefix: &str) -> Vec<FieldProblem> {
                let mut out = Vec::new();
                $({
                    let at = format!("{prefix}.{}", <$module::$kind as DetectorKind>::KEY);
                    self.$field.check(&mut Problems::new(&at, &mut out));
                })+
                out
            }

            /// The alert timing rules, by alert name.
            pub fn rules(&self) -> BTreeMap<String, AlertRule> {
                let mut rules = BTreeMap::new();
                $(rules.insert(
                    <$module::$kind as DetectorKind>::ALERTNAME.to_owned(),
                    self.$field.alert().rule(),
                );)+
                rules
            }

            /// The detectors the settings ask for, in the fixed evaluation order.
            pub fn build(&self, window_secs: f64) -> Vec<Box<dyn Detector>> {
                [$(<$module::$kind as DetectorKind>::build(&self.$field, window_secs),)+]
                    .into_iter()
                    .flatten()
                    .collect()
            }
        }
    };
}

// The detectors, in evaluation order. Adding one: a new module (file and `pub mod` line above)
// and one line here.
detectors! {
    /// `HotShard`.
    hot_shard: hot_shard::HotShard,
    /// `HotKey`.
    hot_key: hot_key::HotKey,
    /// `LatencySkew`.
    latency_skew: latency_skew::LatencySkew,
    /// `ErrorSurge`.
    error_surge: error_surge::ErrorSurge,
    /// `CacheHitCollapse`.
    cache_hit_collapse: cache_collapse::CacheHitCollapse,
    /// `FastFailureSink`.
    fast_failure_sink: fast_failure::FastFailureSink,
    /// `ShardFailing`.
    shard_failing: shard_failing::ShardFailing,
    /// `DeadlinePileUp`.
    deadline_pile_up: deadline::DeadlinePileUp,
    /// `CapacityHeadroom`.
    capacity_headroom: capacity::CapacityHeadroom,
    /// `CardinalityOverflow`.
    cardinality_overflow: cardinality::CardinalityOverflow,
}

/// Byte equality of two strings, usable in constants.
const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Formats a ratio as a percentage with one decimal, for annotations.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// `now / base`, or `None` when the baseline is not positive (nothing to compare with).
pub fn factor(now: f64, base: f64) -> Option<f64> {
    (base > 0.0).then(|| now / base)
}

/// Formats a [`factor`] as `10.0x`, or `from zero` when the baseline was zero.
pub fn times(factor: Option<f64>) -> String {
    factor.map_or("from zero".to_owned(), |x| format!("{}x", num(x)))
}

/// Formats a latency in milliseconds as `12.5 ms`, or `n/a` without one.
pub fn ms(latency: Option<f64>) -> String {
    latency.map_or("n/a".to_owned(), |p| format!("{} ms", num(p)))
}

/// Formats a ratio with two decimals, or `+Inf` when it is not finite (nothing was expected).
pub fn ratio_2dp(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "+Inf".to_owned()
    }
}

/// Formats a number with up to three significant decimals, for annotations.
pub fn num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Test support shared by the detectors' unit tests.
#[cfg(test)]
pub(crate) mod testkit {
    use std::collections::BTreeMap;

    use super::{Context, Detector, DetectorKind, DetectorSettings, DetectorsConfig};
    use crate::alert::{AlertBook, Finding};
    use crate::observation::ObservationRef;
    use crate::prng::SplitMix64;
    use crate::snapshot::WindowSnapshot;
    use crate::window::{WindowConfig, Windows};

    /// Window length the rigs close windows at, seconds.
    pub(crate) const WINDOW_SECS: f64 = 10.0;

    /// Drives one detector and an alert book of its rule with windows the test records: record
    /// into `windows` (or with [`Rig::record`]), then [`Rig::close`] ends the window and
    /// evaluates it. A detector's tests add their own ways of filling a window in an `impl`
    /// block on `Rig<TheirDetector>`.
    pub(crate) struct Rig<D> {
        pub(crate) det: D,
        pub(crate) book: AlertBook,
        pub(crate) windows: Windows,
        /// End of the last window closed, unix seconds.
        pub(crate) t: f64,
        /// Noise for tests that want it, seeded so every run sees the same windows.
        pub(crate) rng: SplitMix64,
    }

    impl<D: DetectorKind> Rig<D> {
        /// A detector with `cfg`, its first window starting at 0.
        pub(crate) fn new(cfg: D::Config) -> Self {
            Self::starting_at(cfg, 0.0)
        }

        /// A detector with `cfg`, its first window starting at `t`.
        pub(crate) fn starting_at(cfg: D::Config, t: f64) -> Self {
            let mut rules = BTreeMap::new();
            rules.insert(D::ALERTNAME.to_owned(), cfg.alert().rule());
            Rig {
                det: D::new(cfg, WINDOW_SECS),
                book: AlertBook::new(rules),
                windows: Windows::new(WindowConfig::default(), t),
                t,
                rng: SplitMix64::new(12345),
            }
        }

        /// Records `o` in the open window.
        pub(crate) fn record(&mut self, o: &ObservationRef<'_>) {
            self.windows.record(o);
        }

        /// Closes the open window, [`WINDOW_SECS`] after the last, and evaluates it; returns
        /// the findings.
        pub(crate) fn close(&mut self) -> Vec<Finding> {
            self.t += WINDOW_SECS;
            let snap = self.windows.close(self.t);
            self.eval(&snap)
        }

        /// Evaluates `snap` as the engine does and applies the findings to the book.
        pub(crate) fn eval(&mut self, snap: &WindowSnapshot) -> Vec<Finding> {
            evaluate(&mut self.det, &mut self.book, snap, WINDOW_SECS)
        }

        /// Roughly Poisson noise around `mean` (normal approximation: a sum of 12 uniforms has
        /// mean 6 and variance 1).
        pub(crate) fn noisy(&mut self, mean: f64) -> u64 {
            let u: f64 = (0..12).map(|_| self.rng.next_f64()).sum();
            (mean + (u - 6.0) * mean.sqrt()).round().max(0.0) as u64
        }
    }

    /// Runs `det` over `snap` as the engine does, then applies its findings to `book`.
    pub(crate) fn evaluate(
        det: &mut dyn Detector,
        book: &mut AlertBook,
        snap: &WindowSnapshot,
        window_secs: f64,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        let ctx = Context {
            snapshot: snap,
            alerts: book,
            window_secs,
        };
        det.evaluate(&ctx, &mut out);
        book.update(snap.end, out.clone());
        out
    }

    /// A Poisson draw of `mean` by Knuth's method: as many uniforms as the draw, so for the
    /// tests' means (up to a few hundred; e^-mean must stay a normal f64, mean under 700).
    pub(crate) fn poisson(rng: &mut SplitMix64, mean: f64) -> u64 {
        let limit = (-mean).exp();
        let (mut k, mut p) = (0, 1.0);
        loop {
            p *= rng.next_f64();
            if p <= limit {
                return k;
            }
            k += 1;
        }
    }

    /// Runs `det` over 10 s windows with an alert book of `config`'s rules; returns the
    /// 1-based windows with a finding, and the last finding.
    pub(crate) fn firings(
        det: &mut dyn Detector,
        config: &DetectorsConfig,
        snaps: impl IntoIterator<Item = WindowSnapshot>,
    ) -> (Vec<usize>, Option<Finding>) {
        let mut book = AlertBook::new(config.rules());
        let (mut hits, mut last) = (Vec::new(), None);
        for (i, snap) in snaps.into_iter().enumerate() {
            if let Some(f) = evaluate(det, &mut book, &snap, 10.0).pop() {
                hits.push(i + 1);
                last = Some(f);
            }
        }
        (hits, last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_key_and_alert_name() {
        let keys: std::collections::BTreeSet<_> =
            DetectorsConfig::KINDS.iter().map(|(k, _)| k).collect();
        let names: std::collections::BTreeSet<_> =
            DetectorsConfig::KINDS.iter().map(|(_, n)| n).collect();
        assert_eq!(keys.len(), DetectorsConfig::KINDS.len());
        assert_eq!(names.len(), DetectorsConfig::KINDS.len());
        let rules = DetectorsConfig::default().rules();
        assert!(names.iter().all(|n| rules.contains_key(**n)), "{rules:?}");
    }

    #[test]
    fn build_keeps_the_list_order_and_skips_what_the_settings_turn_off() {
        let mut cfg = DetectorsConfig::default();
        let built: Vec<&str> = cfg.build(10.0).iter().map(|d| d.alertname()).collect();
        assert_eq!(
            built,
            [
                "HotShard",
                "HotKey",
                "LatencySkew",
                "ErrorSurge",
                "CacheHitCollapse",
                "FastFailureSink",
                "ShardFailing",
                "DeadlinePileUp",
                "CapacityHeadroom",
                "CardinalityOverflow"
            ]
        );
        cfg.capacity_headroom.rule.enabled = false;
        cfg.hot_key.rule.enabled = false;
        let built: Vec<&str> = cfg.build(10.0).iter().map(|d| d.alertname()).collect();
        assert_eq!(built.first(), Some(&"HotShard"));
        assert_eq!(built.last(), Some(&"CardinalityOverflow"));
        assert!(!built.contains(&"HotKey"));
        assert!(!built.contains(&"CapacityHeadroom"));
    }

    #[test]
    fn annotation_formats() {
        assert_eq!(times(factor(0.5, 0.05)), "10.0x");
        assert_eq!(times(factor(0.5, 0.0)), "from zero");
        assert_eq!(ms(Some(12.345)), "12.3 ms");
        assert_eq!(ms(None), "n/a");
        assert_eq!(ratio_2dp(2.854), "2.85");
        assert_eq!(ratio_2dp(f64::INFINITY), "+Inf");
        assert_eq!(
            (pct(0.0725), num(123.4), num(0.1234)),
            ("7.2%".into(), "123".into(), "0.12".into())
        );
    }

    #[test]
    fn problems_carry_the_detector_key_in_their_path() {
        let mut cfg = DetectorsConfig::default();
        cfg.fast_failure_sink.consecutive_windows = 0;
        cfg.hot_shard.warmup_windows = MAX_WINDOWS + 1;
        let fields: Vec<String> = cfg
            .problems("detectors")
            .into_iter()
            .map(|p| p.field)
            .collect();
        assert_eq!(
            fields,
            [
                "detectors.hot_shard.warmup_windows",
                "detectors.fast_failure_sink.consecutive_windows"
            ]
        );
        assert!(DetectorsConfig::default().problems("d").is_empty());
    }
}
