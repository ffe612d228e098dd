//! `HotKey`: one key value takes a large share of a group's load, or of one shard's load, far
//! above what that key usually takes (labels `group`, `key`, and `shard` when the key lives on
//! one shard).
//!
//! Two rules, the group's and the shard's, judge the key summaries' lower bounds against each
//! key's baseline share of the group's load; they are one loop over a view of the scope
//! (`HotKey::judge_scope`). Beside each rule's window verdict, every key with state in a
//! scope gathers evidence across windows ([`RatioEvidence`]). Its firing paths, as the
//! `proven_by` annotation names them: `consecutive_windows` and `step_shape` (the window rule's
//! streak, by count or by shape), `cusum` and `quick_cusum` (the evidence across windows).
//!
//! docs/detectors.md ("HotKey") gives the method, the defaults and why ordinary traffic does
//! not fire it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, GroupMemory, Problems, RuleSettings,
    num, pct, ratio_2dp,
};
use crate::evidence::baseline::{Ewma, Ratio, RatioBaseline};
use crate::evidence::cusum::Binomial;
use crate::evidence::ratio::{Hypotheses, Proof, RatioEvidence, RatioSettings, RatioTests};
use crate::evidence::shape::{Lasted, Persistence, StreakShape};
use crate::observation::{quote, quote_key};
use crate::snapshot::{GroupSnapshot, KeyShare, ShardSnapshot};

/// `detectors.hot_key` settings. Defaults are those of `rules/skewwatch.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotKeyConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Time constant of the per-key share baselines, seconds.
    pub baseline_tau_secs: f64,
    /// Windows with keyed traffic a group (or shard) needs before any verdict.
    pub warmup_windows: u32,
    /// Group rule: smallest lower-bound share of the group's requests.
    pub min_group_share: f64,
    /// Group rule: smallest share in multiples of one shard's fair share 1/N.
    pub fair_share_multiple: f64,
    /// Group rule: smallest lower-bound requests of the key in a window.
    pub min_requests: u64,
    /// Both rules: smallest share over the key's baseline share.
    pub min_ratio: f64,
    /// Shard rule: smallest lower-bound share of the shard's requests.
    pub min_shard_share: f64,
    /// Shard rule: smallest lower-bound requests of the key on the shard in a window.
    pub min_shard_requests: u64,
    /// Consecutive windows the condition must hold.
    pub consecutive_windows: u32,
    /// The longest burst to tolerate, seconds: the condition also holds as soon as the shape of
    /// the streak proves the change has lasted longer (docs/adr/003).
    pub tolerated_burst_secs: f64,
    /// Fraction of a key's group-wide load one shard must hold for the `shard` label.
    pub single_shard_share: f64,
    /// Baseline share under which an unreported, quiet key's state is dropped.
    pub forget_share: f64,
    /// False alarms per key and scope-hour the evidence across windows allows while a key
    /// stays at its baseline share (the rules' path without volume floors).
    pub false_alarms_per_key_hour: f64,
}

impl Default for HotKeyConfig {
    fn default() -> Self {
        HotKeyConfig {
            rule: RuleSettings::new(Severity::Warning, 0.0, 60.0),
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
            min_group_share: 0.2,
            fair_share_multiple: 1.0,
            min_requests: 100,
            min_ratio: 2.0,
            min_shard_share: 0.5,
            min_shard_requests: 200,
            consecutive_windows: 4,
            tolerated_burst_secs: 20.0,
            single_shard_share: 0.9,
            forget_share: 0.01,
            false_alarms_per_key_hour: 1e-4,
        }
    }
}

impl DetectorSettings for HotKeyConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    /// Checks every field, reporting every problem with why.
    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        p.time_constant("baseline_tau_secs", self.baseline_tau_secs);
        p.windows("warmup_windows", self.warmup_windows);
        for (field, v) in [
            ("min_group_share", self.min_group_share),
            ("min_shard_share", self.min_shard_share),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                p.fail(
                    field,
                    format!("{v} is out of range: use a share in (0, 1], e.g. 0.2 for 20%"),
                );
            }
        }
        p.range("fair_share_multiple", self.fair_share_multiple, 0.0, 1000.0);
        p.range("min_ratio", self.min_ratio, 1.0, 1000.0);
        for (field, v) in [
            ("min_requests", self.min_requests),
            ("min_shard_requests", self.min_shard_requests),
        ] {
            if v == 0 {
                p.fail(
                    field,
                    "0 lets a key with no certain request fire: use at least 1 (100 or more is sound)",
                );
            }
        }
        p.windows("consecutive_windows", self.consecutive_windows);
        p.burst("tolerated_burst_secs", self.tolerated_burst_secs);
        if !(self.single_shard_share > 0.5 && self.single_shard_share <= 1.0) {
            p.fail(
                "single_shard_share",
                format!(
                    "{} is out of range: use (0.5, 1] so at most one shard can hold the key",
                    self.single_shard_share
                ),
            );
        }
        if !(self.forget_share > 0.0 && self.forget_share < 1.0) {
            p.fail(
                "forget_share",
                format!(
                    "{} is out of range: use (0, 1); it bounds memory to about 1/forget_share keys",
                    self.forget_share
                ),
            );
        }
        p.false_alarm_rate("false_alarms_per_key_hour", self.false_alarms_per_key_hour);
    }
}

/// What the detector remembers about one key in one scope (group or shard).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct KeyState {
    /// The key's share of the group's requests; windows before the key first appeared count
    /// as zeros ([`Scope::key`]).
    base: Ewma,
    streak: u32,
    /// The excess requests over the baseline of the streak's windows.
    #[serde(default)]
    shape: StreakShape,
    /// The `shard` label of the group rule's alert, once chosen.
    shard: Option<String>,
    /// The key's requests as evidence across windows.
    #[serde(default)]
    counted: Counted,
}

/// A key's certain requests among the group's, as evidence across windows: the rules' path
/// without volume floors.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct Counted {
    /// The key's certain requests in its scope among the group's requests, tested burst-proof
    /// and quickly on the key's count baseline.
    requests: RatioEvidence,
    /// Its scope's requests (the group's or the shard's) since the evidence was last at rest.
    #[serde(skip_serializing_if = "is_zero")]
    scope: u64,
    /// The test last built, for the reference it was built for: the reference stays put while
    /// the evidence is up (its windows are held back), so most windows reuse it.
    #[serde(skip)]
    built: Option<BuiltTest>,
}

/// A key's test, and the reference it was built for.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BuiltTest {
    reference: f64,
    test: Option<Binomial>,
}

/// True for nothing counted: what the saved state leaves out.
fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The keys of one scope and how many windows with keyed traffic it has seen.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Scope {
    windows: u32,
    keys: BTreeMap<String, KeyState>,
    /// The group's requests per window, from every window with requests since the scope (the
    /// group, or the shard) appeared: where the count baseline of a key first seen now starts.
    #[serde(default)]
    requests: Ewma,
}

/// The group scope and each shard's scope.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupState {
    group: Scope,
    shards: BTreeMap<String, Scope>,
}

impl GroupMemory for GroupState {
    fn forget_departed(&mut self, g: &GroupSnapshot) {
        self.shards.retain(|name, _| g.shard(name).is_some());
    }
}

/// One key's figures in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct KeyFigures {
    /// Lower bound of the key's requests in the scope.
    lower: u64,
    /// Lower-bound share of the scope's requests (the group's or the shard's).
    share: f64,
    /// Lower-bound share of the group's requests: what the baseline tracks.
    load: f64,
    /// The key's baseline share of the group's requests.
    baseline: f64,
    /// The windows the figures span: 1 for a window's verdict, more for the evidence's.
    windows: u32,
    /// The key's evidence across windows, as a fraction of its threshold.
    evidence: f64,
}

impl KeyFigures {
    /// The key's load over its baseline; infinite for a key new to the top.
    fn ratio(&self) -> f64 {
        if self.baseline > 0.0 {
            self.load / self.baseline
        } else {
            f64::INFINITY
        }
    }
}

/// The `HotKey` detector. See the module docs.
#[derive(Debug, Clone)]
pub struct HotKey {
    cfg: HotKeyConfig,
    persistence: Persistence,
    /// The evidence test, burst-proof and quick.
    tests: RatioTests,
    state: BTreeMap<String, GroupState>,
}

impl HotKey {
    /// Keys with state in every scope, for tests of eviction.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.state
            .values()
            .map(|g| g.group.keys.len() + g.shards.values().map(|s| s.keys.len()).sum::<usize>())
            .sum()
    }
}

/// The identifying labels of a `HotKey` alert.
fn key_labels<'a>(
    group: &'a str,
    key: &'a str,
    shard: Option<&'a str>,
) -> Vec<(&'static str, &'a str)> {
    let mut l = vec![("group", group), ("key", key)];
    if let Some(s) = shard {
        l.push(("shard", s));
    }
    l
}

/// The shard a key lives on: the shard whose summary holds at least `frac` of the key's
/// group-wide lower bound `lb`.
fn home_shard<'a>(g: &'a GroupSnapshot, key: &str, lb: u64, frac: f64) -> Option<&'a str> {
    g.tracked_shards()
        .filter_map(|s| {
            s.top_keys
                .iter()
                .find(|k| k.key == key)
                .map(|k| (s.shard.as_str(), k.requests))
        })
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .filter(|(_, ub)| *ub as f64 >= frac * lb as f64)
        .map(|(s, _)| s)
}

impl Scope {
    /// The state of `key`; a key seen for the first time had a share of zero in every earlier
    /// window of the scope: it had none of the group's requests since the scope appeared (a
    /// shard that expired and came back knows only its windows since).
    fn key(&mut self, key: &str) -> &mut KeyState {
        let prior = self.windows;
        let requests = self.requests;
        self.keys.entry(key.to_owned()).or_insert_with(|| KeyState {
            base: Ewma::zeros(prior),
            counted: Counted {
                requests: RatioEvidence::on(RatioBaseline {
                    trials: requests,
                    events: Ewma::zeros(requests.samples()),
                }),
                ..Counted::default()
            },
            ..KeyState::default()
        })
    }
}

impl KeyState {
    /// Extends or ends the key's run of over windows (with `excess` requests over its
    /// baseline) and teaches its baseline `load` unless `frozen` (the key's alert is active or
    /// its evidence proves a change) or its condition is building up. Says why once the run is
    /// long enough for `needed`.
    fn step(
        &mut self,
        over: bool,
        frozen: bool,
        (load, excess): (f64, f64),
        alpha: f64,
        needed: &Persistence,
    ) -> Option<Lasted> {
        self.streak = if over { self.streak + 1 } else { 0 };
        self.shape.push(over, excess);
        if !(frozen || self.streak > 0) {
            self.base.update(load, alpha);
        }
        needed.lasted(self.streak, &self.shape)
    }

    /// The key's baseline share of the group's requests (0 before any window).
    fn baseline(&self) -> f64 {
        self.base.raw().unwrap_or(0.0)
    }
}

impl HotKey {
    /// Adds one window to a key's evidence across windows: its `key` certain requests among
    /// the group's `group`, with `scope` requests in its scope. The test's reference is the
    /// key's count baseline at its upper bound, and it is built for the crossover `min_ratio`
    /// times that, so evidence grows only while the key's load is over the rules' own ratio.
    /// Then teaches the window to the count baseline, holding an excursion of the evidence
    /// back, or forgets the held windows when `active` or proven. The CUSUM that proves a
    /// rise, when over the windows it rests on the key holds at least `floor` of its scope's
    /// requests.
    fn weigh(
        &self,
        c: &mut Counted,
        (key, scope, group): (u64, u64, u64),
        floor: f64,
        active: bool,
    ) -> Option<Proof> {
        let window = Ratio::of(key, group);
        let at_rest = c.requests.at_rest(&self.tests);
        let min_ratio = self.cfg.min_ratio;
        let built = &mut c.built;
        c.requests.weigh(&self.tests, window, |seen| {
            let p0 = seen.upper();
            let crossover = min_ratio * p0;
            // A window at or under the crossover adds no evidence, and without evidence to
            // drain it changes nothing: most windows of most keys, which skip the test's
            // construction (a bisection).
            if at_rest && key as f64 <= crossover * group as f64 {
                return None;
            }
            let test = match *built {
                Some(b) if b.reference == p0 => b.test,
                _ => Binomial::with_crossover(p0, crossover),
            };
            *built = Some(BuiltTest {
                reference: p0,
                test,
            });
            Some(Hypotheses {
                reference: p0,
                rise: test,
                severe: None,
            })
        });
        c.scope = if c.requests.at_rest(&self.tests) {
            0
        } else {
            c.scope + scope
        };
        let key_requests = c.requests.excursion().counts.events;
        let holds = c
            .requests
            .proven(&self.tests, false)
            .filter(|_| c.scope > 0 && key_requests as f64 >= floor * c.scope as f64);
        c.requests
            .learn(&self.tests, window, active || holds.is_some());
        holds
    }

    /// The figures of the windows a key's evidence rests on.
    fn accumulated(&self, c: &Counted) -> KeyFigures {
        let e = c.requests.excursion();
        let baseline = c
            .requests
            .seen(&self.tests)
            .map_or(0.0, |seen| seen.share());
        KeyFigures {
            lower: e.counts.events,
            share: e.counts.events as f64 / c.scope.max(1) as f64,
            load: e.counts.share(),
            baseline,
            windows: e.windows,
            evidence: c.requests.fraction(&self.tests),
        }
    }

    /// Judges the keys of one scope (`view`: the group, or one of its shards) in one window:
    /// the window rule and the evidence across windows for each key reported, then the keys
    /// not reported. Keys the group rule found go into `hot_keys`; the shard rule does not
    /// report them again.
    fn judge_scope(
        &self,
        ctx: &Context<'_>,
        (g, view): (&GroupSnapshot, View<'_>),
        scope: &mut Scope,
        hot_keys: &mut BTreeSet<String>,
        out: &mut Vec<Finding>,
    ) {
        let cfg = &self.cfg;
        let floor = view.floor(cfg, g);
        let counts = (view.requests(g), g.requests);
        let is_active = |key: &str, st: &KeyState| {
            let labels = key_labels(&g.group, key, view.shard_label(st));
            ctx.alerts.is_active(HotKey::ALERTNAME, &labels)
        };
        if view.keyless(g) {
            // No key in the scope this window: the evidence of each hears that it had no
            // request.
            self.weigh_absent(scope, counts, floor, is_active);
            return;
        }
        let warm = scope.windows >= cfg.warmup_windows;
        let mut reported = BTreeSet::new();
        for k in view.keys(g) {
            reported.insert(k.key.as_str());
            let st = scope.key(&k.key);
            let active = is_active(&k.key, st);
            let Some((shares, proven_by)) = self.judge_key((g, view), k, st, (warm, active)) else {
                continue;
            };
            let found = Found {
                key: k,
                shares,
                proven_by,
            };
            match view {
                View::Group => {
                    hot_keys.insert(k.key.clone());
                    let home = st.shard.as_deref().and_then(|s| g.shard(s));
                    out.push(render(cfg, &g.group, &group_figures(ctx, found, home)));
                }
                // The group rule already alerts on this key (with this shard, or spread over
                // several): one alert per key is enough.
                View::Shard(s) if !hot_keys.contains(&k.key) => {
                    out.push(render(cfg, &g.group, &shard_figures(ctx, s, found)));
                }
                View::Shard(_) => {}
            }
        }
        let forget = (floor, view.forget_below(cfg, g));
        self.forget_unreported(scope, &reported, counts, forget, is_active);
        scope.windows = scope.windows.saturating_add(1);
    }

    /// Judges reported key `k` of the scope `view` in one window: its evidence across windows,
    /// then the window rule, whose streak freezes the key's baseline. The figures to report
    /// and the firing path when either holds: the window's, or those of the windows the
    /// evidence rests on. `warm` when the scope is past its warm-up; `active` when the key's
    /// alert is.
    fn judge_key(
        &self,
        (g, view): (&GroupSnapshot, View<'_>),
        k: &KeyShare,
        st: &mut KeyState,
        (warm, active): (bool, bool),
    ) -> Option<(KeyFigures, &'static str)> {
        let cfg = &self.cfg;
        let floor = view.floor(cfg, g);
        let lb = k.lower_bound();
        let scope = view.requests(g);
        let accumulated = self.weigh(&mut st.counted, (lb, scope, g.requests), floor, active);
        let group_total = g.requests.max(1) as f64;
        let fig = KeyFigures {
            lower: lb,
            share: lb as f64 / scope as f64,
            load: lb as f64 / group_total,
            baseline: st.baseline(),
            windows: 1,
            evidence: st.counted.requests.fraction(&self.tests),
        };
        let over = warm
            && lb >= view.min_requests(cfg)
            && fig.share >= floor
            && fig.ratio() >= cfg.min_ratio;
        if matches!(view, View::Group) && (over || accumulated.is_some()) && !active {
            // The `shard` label is chosen when the condition builds up and kept while the
            // alert is active, so the alert's identity does not flap.
            st.shard = home_shard(g, &k.key, lb, cfg.single_shard_share).map(str::to_owned);
        }
        let excess = (fig.load - fig.baseline) * group_total;
        let frozen = active || accumulated.is_some();
        let alpha = self.tests.alpha();
        match st.step(over, frozen, (fig.load, excess), alpha, &self.persistence) {
            Some(lasted) => Some((fig, lasted.name())),
            None => accumulated.map(|proof| (self.accumulated(&st.counted), proof.name())),
        }
    }

    /// Keys of `scope` not reported this window had a share of (about) zero: their evidence
    /// hears no request among the group's (a key under the summary's top is counted as
    /// absent, which only drains evidence), their baselines learn zero unless frozen, their
    /// streaks end, and those whose baseline falls under `forget_below` are dropped unless
    /// alerting.
    fn forget_unreported(
        &self,
        scope: &mut Scope,
        reported: &BTreeSet<&str>,
        (scope_requests, group): (u64, u64),
        (floor, forget_below): (f64, f64),
        is_active: impl Fn(&str, &KeyState) -> bool,
    ) {
        let alpha = self.tests.alpha();
        scope.keys.retain(|key, st| {
            if reported.contains(key.as_str()) {
                return true;
            }
            st.streak = 0;
            st.shape = StreakShape::default();
            let active = is_active(key, st);
            let accumulated =
                self.weigh(&mut st.counted, (0, scope_requests, group), floor, active);
            if !(active || accumulated.is_some()) {
                st.base.update(0.0, alpha);
            }
            active || st.baseline() >= forget_below
        });
    }

    /// A window in which `scope` had no keyed request: every key's evidence hears that it had
    /// none among the group's `group` requests. The window rules' baselines and the scope's
    /// count of windows with keyed traffic do not move.
    fn weigh_absent(
        &self,
        scope: &mut Scope,
        (scope_requests, group): (u64, u64),
        floor: f64,
        is_active: impl Fn(&str, &KeyState) -> bool,
    ) {
        for (key, st) in &mut scope.keys {
            let active = is_active(key, st);
            self.weigh(&mut st.counted, (0, scope_requests, group), floor, active);
        }
    }
}

/// The scope a rule judges in one window: the group (the group rule), or one of its shards
/// (the shard rule). The two rules are one loop (`HotKey::judge_scope`) over it.
#[derive(Debug, Clone, Copy)]
enum View<'a> {
    Group,
    Shard(&'a ShardSnapshot),
}

impl<'a> View<'a> {
    /// The scope's requests in the window.
    fn requests(self, g: &GroupSnapshot) -> u64 {
        match self {
            View::Group => g.requests,
            View::Shard(s) => s.requests,
        }
    }

    /// The scope's top keys.
    fn keys(self, g: &'a GroupSnapshot) -> &'a [KeyShare] {
        match self {
            View::Group => &g.top_keys,
            View::Shard(s) => &s.top_keys,
        }
    }

    /// True when the scope had no keyed request in the window.
    fn keyless(self, g: &GroupSnapshot) -> bool {
        match self {
            View::Group => g.keyed_requests == 0,
            View::Shard(s) => s.requests == 0 || s.top_keys.is_empty(),
        }
    }

    /// The least share of the scope's requests a hot key holds: `min_group_share` and the
    /// fair-share multiple for the group, `min_shard_share` for a shard.
    fn floor(self, cfg: &HotKeyConfig, g: &GroupSnapshot) -> f64 {
        match self {
            View::Group => cfg
                .min_group_share
                .max(cfg.fair_share_multiple * g.fair_share),
            View::Shard(_) => cfg.min_shard_share,
        }
    }

    /// The least certain requests of a key in a window for the window rule.
    fn min_requests(self, cfg: &HotKeyConfig) -> u64 {
        match self {
            View::Group => cfg.min_requests,
            View::Shard(_) => cfg.min_shard_requests,
        }
    }

    /// The baseline share of the group's requests under which a key is forgotten: shard
    /// scopes forget relative to the shard's load, so a shard keeps about 1/forget_share keys
    /// too.
    fn forget_below(self, cfg: &HotKeyConfig, g: &GroupSnapshot) -> f64 {
        match self {
            View::Group => cfg.forget_share,
            View::Shard(s) => cfg.forget_share * s.requests as f64 / g.requests.max(1) as f64,
        }
    }

    /// The `shard` label of a key's alert in this scope.
    fn shard_label(self, st: &'a KeyState) -> Option<&'a str> {
        match self {
            View::Group => st.shard.as_deref(),
            View::Shard(s) => Some(&s.shard),
        }
    }
}

/// A hot key one rule found: its summary entry, its figures, and the firing path.
#[derive(Debug, Clone, Copy)]
struct Found<'a> {
    key: &'a KeyShare,
    shares: KeyFigures,
    proven_by: &'static str,
}

/// Which rule found a hot key, and where the key sits.
#[derive(Debug, Clone, PartialEq)]
enum Place {
    /// The group rule. `home` is the shard the key lives on, with the key's lower-bound share
    /// of that shard; `None` when the key is spread over several shards.
    Group { home: Option<(String, f64)> },
    /// The shard rule: the shard the key took over, and that shard's share of the group.
    Shard { shard: String, shard_share: f64 },
}

/// Everything a `HotKey` finding reports; [`render`] turns it into text.
#[derive(Debug, Clone, PartialEq)]
struct Figures {
    key: String,
    shares: KeyFigures,
    /// Largest possible over-count of the key's requests.
    error_bound: u64,
    /// The key's lower-bound requests per second.
    requests_per_second: f64,
    place: Place,
    /// The firing path that proved the key hot.
    proven_by: &'static str,
}

/// The lower-bound requests per second of the key over the windows its figures span (windows
/// as long as that of `ctx`).
fn rate(ctx: &Context<'_>, fig: KeyFigures) -> f64 {
    let secs = ctx.snapshot.duration() * f64::from(fig.windows.max(1));
    fig.lower as f64 / secs.max(f64::MIN_POSITIVE)
}

/// Figures of a key the group rule found, living on `home` when it lives on one shard.
fn group_figures(ctx: &Context<'_>, found: Found<'_>, home: Option<&ShardSnapshot>) -> Figures {
    let k = found.key;
    let home = home.map(|s| {
        let of_shard = s
            .top_keys
            .iter()
            .find(|x| x.key == k.key)
            .map_or(0.0, |x| x.lower_bound() as f64 / s.requests.max(1) as f64);
        (s.shard.clone(), of_shard)
    });
    figures(ctx, found, Place::Group { home })
}

/// Figures of a key the shard rule found on shard `s`.
fn shard_figures(ctx: &Context<'_>, s: &ShardSnapshot, found: Found<'_>) -> Figures {
    let place = Place::Shard {
        shard: s.shard.clone(),
        shard_share: s.share,
    };
    figures(ctx, found, place)
}

fn figures(ctx: &Context<'_>, found: Found<'_>, place: Place) -> Figures {
    Figures {
        key: found.key.key.clone(),
        shares: found.shares,
        error_bound: found.key.error,
        requests_per_second: rate(ctx, found.shares),
        place,
        proven_by: found.proven_by,
    }
}

/// The finding for a hot key of `group`: labels and scope by rule, summary and description,
/// then the figures as annotations.
fn render(cfg: &HotKeyConfig, group: &str, fig: &Figures) -> Finding {
    let (shard, scope) = match &fig.place {
        Place::Group { home } => (home.as_ref().map(|(s, _)| s.as_str()), "group"),
        Place::Shard { shard, .. } => (Some(shard.as_str()), "shard"),
    };
    let labels = key_labels(group, &fig.key, shard);
    let f = Finding::new(HotKey::ALERTNAME, cfg.rule.severity, &labels)
        .annotate("summary", summary(group, fig))
        .annotate("description", description(group, fig))
        .annotate("scope", scope);
    annotate_figures(f, fig)
}

fn summary(group: &str, fig: &Figures) -> String {
    let (key, share) = (quote_key(&fig.key), pct(fig.shares.share));
    let group = quote(group);
    match &fig.place {
        Place::Group { .. } => format!("Key {key} takes {share} of {group}'s load"),
        Place::Shard { shard, .. } => {
            format!(
                "Key {key} takes {share} of shard {} of {group}",
                quote(shard)
            )
        }
    }
}

fn description(group: &str, fig: &Figures) -> String {
    let (key, share) = (quote_key(&fig.key), pct(fig.shares.share));
    let group = quote(group);
    let ratio = ratio_text(&fig.shares);
    match &fig.place {
        Place::Group {
            home: Some((shard, of_shard)),
        } => format!(
            "key {key} takes at least {share} of {group}'s load, {ratio}; it lives on shard \
             {}, where it is {} of the traffic",
            quote(shard),
            pct(*of_shard)
        ),
        Place::Group { home: None } => format!(
            "key {key} takes at least {share} of {group}'s load, {ratio}; it is spread over \
             several shards"
        ),
        Place::Shard { shard, shard_share } => format!(
            "key {key} takes at least {share} of shard {}'s traffic in {group}, {ratio}; the \
             shard carries {} of the group's load",
            quote(shard),
            pct(*shard_share)
        ),
    }
}

fn ratio_text(fig: &KeyFigures) -> String {
    if fig.baseline > 0.0 {
        format!(
            "{}x its usual share of the group's load ({})",
            num(fig.ratio()),
            pct(fig.baseline)
        )
    } else {
        "a key that was not among the top keys before".to_owned()
    }
}

/// The annotations both rules carry.
fn annotate_figures(f: Finding, fig: &Figures) -> Finding {
    let shares = &fig.shares;
    f.annotate("share", format!("{:.4}", shares.share))
        .annotate("group_share", format!("{:.4}", shares.load))
        .annotate("baseline_share", format!("{:.4}", shares.baseline))
        .annotate("ratio", ratio_2dp(shares.ratio()))
        .annotate("requests", shares.lower.to_string())
        .annotate("windows", shares.windows.to_string())
        .annotate("evidence", format!("{:.2}", shares.evidence.min(1.0)))
        .annotate("error_bound", fig.error_bound.to_string())
        .annotate("proven_by", fig.proven_by)
        .annotate(
            "requests_per_second",
            format!("{:.1}", fig.requests_per_second),
        )
}

impl DetectorKind for HotKey {
    const ALERTNAME: &'static str = "HotKey";
    const KEY: &'static str = "hot_key";
    type Config = HotKeyConfig;

    fn new(cfg: HotKeyConfig, window_secs: f64) -> Self {
        // Two tests share the stated false-alarm rate: the burst-proof one and the quick one.
        let settings = RatioSettings {
            false_alarms_per_hour: cfg.false_alarms_per_key_hour,
            tests: 2,
            window_secs,
            consecutive_windows: cfg.consecutive_windows,
            tolerated_burst_secs: cfg.tolerated_burst_secs,
            margin_windows: 0,
            warmup_windows: cfg.warmup_windows,
            baseline_tau_secs: cfg.baseline_tau_secs,
        };
        HotKey {
            persistence: Persistence::new(
                cfg.consecutive_windows,
                cfg.tolerated_burst_secs,
                window_secs,
            ),
            tests: RatioTests::new(settings).with_quick(true),
            cfg,
            state: BTreeMap::new(),
        }
    }
}

impl GroupDetector for HotKey {
    type State = GroupState;

    fn states(&self) -> &BTreeMap<String, GroupState> {
        &self.state
    }

    fn states_mut(&mut self) -> &mut BTreeMap<String, GroupState> {
        &mut self.state
    }

    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        st: &mut GroupState,
        out: &mut Vec<Finding>,
    ) {
        if g.requests == 0 {
            return;
        }
        let mut hot = BTreeSet::new();
        self.judge_scope(ctx, (g, View::Group), &mut st.group, &mut hot, out);
        for s in g.tracked_shards() {
            // Every shard has a scope, keyed traffic or not, so that a key first seen on it
            // knows how long the shard has been there without it.
            let scope = st.shards.entry(s.shard.clone()).or_default();
            self.judge_scope(ctx, (g, View::Shard(s)), scope, &mut hot, out);
        }
        // Every scope was judged this window (a shard's on every tracked shard, and only
        // those are kept): each learns the group's requests once its keys have been weighed.
        let requests = g.requests as f64;
        for scope in std::iter::once(&mut st.group).chain(st.shards.values_mut()) {
            scope.requests.update(requests, self.tests.alpha());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertBook;
    use crate::observation::ObservationRef;
    use crate::snapshot::WindowSnapshot;
    use crate::window::{WindowConfig, Windows};

    /// One record: (shard, key, count).
    type Rec<'a> = (&'a str, &'a str, u64);

    type Rig = crate::detect::testkit::Rig<HotKey>;

    /// Windows built from records.
    impl Rig {
        fn window(&mut self, recs: &[Rec<'_>]) -> Vec<Finding> {
            for (shard, key, n) in recs {
                let mut o = ObservationRef::new("db", shard);
                o.key = Some(key);
                o.count = *n;
                self.record(&o);
            }
            self.close()
        }
    }

    impl Rig {
        /// A window of `keyless` requests (about, Poisson) on each of `shards` shards, plus
        /// `keyed`: (shard, key, mean requests), each about Poisson too.
        fn quiet_window(&mut self, shards: usize, keyless: f64, keyed: &[Rec<'_>]) -> Vec<Finding> {
            let names: Vec<String> = (0..shards).map(|i| format!("s{i}")).collect();
            for s in &names {
                let mut o = ObservationRef::new("db", s);
                o.count = self.noisy(keyless);
                if o.count > 0 {
                    self.record(&o);
                }
            }
            for (shard, key, mean) in keyed {
                let mut o = ObservationRef::new("db", shard);
                o.key = Some(key);
                o.count = self.noisy(*mean as f64);
                if o.count > 0 {
                    self.record(&o);
                }
            }
            self.close()
        }

        /// The first of up to 10 quiet windows with `keyed` that has a finding, and which
        /// window it is (1-based).
        fn first_finding(
            &mut self,
            shards: usize,
            keyless: f64,
            keyed: &[Rec<'_>],
        ) -> (u32, Finding) {
            (1..=10)
                .find_map(|w| {
                    self.quiet_window(shards, keyless, keyed)
                        .pop()
                        .map(|f| (w, f))
                })
                .expect("proven within 10 windows")
        }
    }

    /// 8 shards, 40 keys each of 25 requests (1000 per shard), plus `extra`.
    fn traffic<'a>(names: &'a [String], extra: &[Rec<'a>]) -> Vec<Rec<'a>> {
        let shards = ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"];
        let mut v = Vec::new();
        for (i, s) in shards.iter().enumerate() {
            for k in 0..40 {
                v.push((*s, names[i * 40 + k].as_str(), 25));
            }
        }
        v.extend_from_slice(extra);
        v
    }

    fn names() -> Vec<String> {
        (0..320).map(|i| format!("user:{i}")).collect()
    }

    #[test]
    fn a_new_key_taking_a_quarter_of_the_group_fires_with_its_shard() {
        let n = names();
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..40 {
            assert!(rig.window(&traffic(&n, &[])).is_empty());
        }
        let hot = traffic(&n, &[("s3", "", 3000)]);
        // Three full windows outlast a 20 s burst (docs/adr/003); two do not.
        for _ in 0..2 {
            assert!(rig.window(&hot).is_empty());
        }
        let f = rig.window(&hot);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].labels["key"], "(empty)");
        assert_eq!(f[0].labels["shard"], "s3");
        assert_eq!(f[0].annotations["scope"], "group");
        assert_eq!(f[0].annotations["ratio"], "+Inf");
        assert!(f[0].annotations["description"].contains("where it is 75.0% of the traffic"));
        // It keeps firing for as long as it lasts: the baseline is frozen.
        for _ in 0..100 {
            assert_eq!(rig.window(&hot).len(), 1);
        }
        assert!(rig.window(&traffic(&n, &[])).is_empty());
    }

    #[test]
    fn figures_place_the_key_and_measure_its_shares() {
        let n = names();
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        for (shard, key, count) in traffic(&n, &[("s3", "", 3000)]) {
            let mut o = ObservationRef::new("db", shard);
            o.key = Some(key);
            o.count = count;
            w.record(&o);
        }
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        let book = AlertBook::default();
        let ctx = Context {
            snapshot: &snap,
            alerts: &book,
            window_secs: 10.0,
        };
        let k = &g.top_keys[0];
        assert_eq!(k.key, "");
        let shares = KeyFigures {
            lower: k.lower_bound(),
            share: k.lower_bound() as f64 / g.requests as f64,
            load: k.lower_bound() as f64 / g.requests as f64,
            baseline: 0.1,
            windows: 1,
            evidence: 0.0,
        };
        // 3000 of 11000 requests, against a usual 10%.
        assert_eq!(shares.lower, 3000);
        assert!((shares.ratio() - 30.0 / 11.0).abs() < 1e-12);
        let home = home_shard(g, "", 3000, 0.9).and_then(|s| g.shard(s));
        let found = Found {
            key: k,
            shares,
            proven_by: "consecutive_windows",
        };
        let fig = group_figures(&ctx, found, home);
        assert_eq!(fig.proven_by, "consecutive_windows");
        assert_eq!(
            fig.place,
            Place::Group {
                home: Some(("s3".to_owned(), 0.75))
            }
        );
        assert_eq!((fig.error_bound, fig.requests_per_second), (0, 300.0));
        let s3 = g.shard("s3").unwrap();
        let found = Found {
            key: &s3.top_keys[0],
            ..found
        };
        let fig = shard_figures(&ctx, s3, found);
        assert_eq!(
            fig.place,
            Place::Shard {
                shard: "s3".to_owned(),
                shard_share: 4000.0 / 11000.0
            }
        );
        let new_key = KeyFigures {
            baseline: 0.0,
            ..shares
        };
        assert_eq!(new_key.ratio(), f64::INFINITY);
    }

    #[test]
    fn a_new_key_counts_earlier_windows_as_zero_and_its_streak_freezes_the_baseline() {
        let mut scope = Scope {
            windows: 9,
            ..Scope::default()
        };
        let requests = Ewma::zeros(12);
        scope.requests = requests;
        let st = scope.key("k");
        assert_eq!(st.base.samples(), 9);
        // Its count baseline: the group's requests over the windows the group has seen, and no
        // request of the key in any of them.
        let counted = st.counted.requests.baseline();
        assert_eq!(counted.trials, requests);
        assert_eq!(counted.events, Ewma::zeros(12));
        // The running mean over ten windows: nine zeros and 0.5.
        // Two windows in a row; the shape rule tolerates no less than a day here.
        let two = Persistence {
            windows: 2,
            tolerated_burst_secs: 86_400.0,
            window_secs: 10.0,
        };
        assert_eq!(st.step(false, false, (0.5, 0.0), 0.001, &two), None);
        assert!((st.baseline() - 0.05).abs() < 1e-12);
        assert_eq!(st.step(true, false, (0.9, 850.0), 0.001, &two), None);
        assert_eq!(
            st.step(true, false, (0.9, 850.0), 0.001, &two),
            Some(Lasted::Windows)
        );
        assert!((st.baseline() - 0.05).abs() < 1e-12, "learned while over");
    }

    #[test]
    fn a_key_heavy_since_the_start_is_its_own_baseline() {
        let n = names();
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..300 {
            assert!(
                rig.window(&traffic(&n, &[("s1", "celebrity", 4000)]))
                    .is_empty()
            );
        }
    }

    #[test]
    fn a_key_that_takes_over_its_shard_fires_the_shard_rule() {
        let n = names();
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..40 {
            rig.window(&traffic(&n, &[("s5", "tenant:42", 30)]));
        }
        // tenant:42 goes from 3% to about 62% of shard s5: 5% of the group, under the group
        // rule's 20%, so only the shard rule can see it.
        let hot = traffic(&n, &[("s5", "tenant:42", 1600)]);
        for _ in 0..2 {
            assert!(rig.window(&hot).is_empty());
        }
        let fired = rig.window(&hot);
        assert_eq!(fired.len(), 1, "{fired:?}");
        let f = &fired[0];
        assert_eq!(f.labels["key"], "tenant:42");
        assert_eq!(f.labels["shard"], "s5");
        assert_eq!(f.annotations["scope"], "shard");
        let ratio: f64 = f.annotations["ratio"].parse().unwrap();
        assert!(ratio > 10.0, "{ratio}");
    }

    #[test]
    fn a_quiet_key_taking_over_its_shard_is_proven_across_windows() {
        // 8 shards of 20 requests a window; tenant:42 goes from about one request in 20
        // windows to 30 a window on s5, 60% of the shard: far under the window rule's 200.
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..60 {
            let f = rig.quiet_window(8, 20.0, &[("s5", "tenant:42", 0)]);
            assert!(f.is_empty(), "{f:?}");
        }
        let hot = [("s5", "tenant:42", 30)];
        let (w, f) = rig.first_finding(8, 20.0, &hot);
        // At least the quick path's four windows.
        assert!(w >= 4, "{w}");
        assert_eq!(f.labels["key"], "tenant:42");
        assert_eq!(f.labels["shard"], "s5");
        assert_eq!(f.annotations["scope"], "shard");
        assert_eq!(f.annotations["evidence"], "1.00");
        // The figures are those of the windows the evidence rests on.
        let windows: u32 = f.annotations["windows"].parse().unwrap();
        assert!(windows >= 4, "{windows}");
        let share: f64 = f.annotations["share"].parse().unwrap();
        assert!((0.5..0.7).contains(&share), "{share}");
        // It holds while the key stays, and lets go once it is back to normal.
        for _ in 0..30 {
            assert_eq!(rig.quiet_window(8, 20.0, &hot).len(), 1);
        }
        let mut quiet = 0;
        for _ in 0..20 {
            if rig.quiet_window(8, 20.0, &[]).is_empty() {
                quiet += 1;
            }
        }
        assert!(quiet >= 18, "{quiet}");
    }

    #[test]
    fn a_quiet_key_taking_a_group_is_proven_across_windows() {
        // 4 shards of 5 requests a window; the empty key takes 10 a window on s1: a third of
        // the group, far under the window rule's 100 requests.
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..60 {
            assert!(rig.quiet_window(4, 5.0, &[]).is_empty());
        }
        let (w, f) = rig.first_finding(4, 5.0, &[("s1", "", 10)]);
        assert!(w >= 4, "{w}");
        assert_eq!(f.labels["key"], "(empty)");
        assert_eq!(f.labels["shard"], "s1");
        assert_eq!(f.annotations["scope"], "group");
        assert_eq!(f.annotations["ratio"], "+Inf");
    }

    #[test]
    fn a_steady_key_holding_most_of_a_quiet_shard_is_not_hot() {
        // 55% of s3 and 6 requests a window, for ten hours: its own baseline, whatever the
        // Poisson noise of so few requests does.
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..3600 {
            let f = rig.quiet_window(8, 5.0, &[("s3", "steady", 6)]);
            assert!(f.is_empty(), "{f:?}");
        }
    }

    #[test]
    fn an_uncertain_key_cannot_fire() {
        // A summary with one slot over-counts every key by everything evicted before it.
        let cfg = WindowConfig {
            group_key_slots: 1,
            shard_key_slots: 1,
            ..WindowConfig::default()
        };
        let mut rig = Rig::new(HotKeyConfig::default());
        rig.windows = Windows::new(cfg, 0.0);
        let n = names();
        for _ in 0..60 {
            assert!(rig.window(&traffic(&n, &[])).is_empty());
        }
    }

    #[test]
    fn a_20_s_burst_of_one_key_does_not_fire_at_any_alignment() {
        let n = names();
        // The burst covers a part of the first window, all of the second and the rest of
        // the third: three windows over the line, two windows' worth of excess.
        for part in [0.2, 0.5, 0.8] {
            let mut rig = Rig::new(HotKeyConfig::default());
            for _ in 0..40 {
                rig.window(&traffic(&n, &[]));
            }
            for cover in [part, 1.0, 1.0 - part] {
                let burst = (5000.0 * cover) as u64;
                assert!(
                    rig.window(&traffic(&n, &[("s2", "flash", burst)]))
                        .is_empty(),
                    "{part}"
                );
            }
            for _ in 0..10 {
                assert!(rig.window(&traffic(&n, &[])).is_empty());
            }
        }
    }

    #[test]
    fn a_burst_of_one_key_for_three_full_windows_has_outlasted_20_s() {
        let n = names();
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..40 {
            rig.window(&traffic(&n, &[]));
        }
        let burst = traffic(&n, &[("s2", "flash", 5000)]);
        assert!(rig.window(&burst).is_empty());
        assert!(rig.window(&burst).is_empty());
        assert_eq!(rig.window(&burst).len(), 1);
        for _ in 0..10 {
            rig.window(&traffic(&n, &[]));
        }
    }

    #[test]
    fn no_verdict_during_warm_up() {
        let n = names();
        let mut rig = Rig::new(HotKeyConfig::default());
        for _ in 0..5 {
            rig.window(&traffic(&n, &[]));
        }
        for _ in 0..20 {
            assert!(rig.window(&traffic(&n, &[("s0", "", 9000)])).is_empty());
        }
    }

    #[test]
    fn state_stays_bounded_with_churning_keys() {
        let mut rig = Rig::new(HotKeyConfig::default());
        for w in 0..400u64 {
            let name: Vec<String> = (0..20).map(|i| format!("k{}", w * 20 + i)).collect();
            let recs: Vec<Rec<'_>> = name
                .iter()
                .enumerate()
                .map(|(i, k)| (if i % 2 == 0 { "a" } else { "b" }, k.as_str(), 50))
                .collect();
            rig.window(&recs);
        }
        assert!(rig.det.tracked() < 300, "{}", rig.det.tracked());
        rig.eval(&WindowSnapshot::empty(1e9));
        assert_eq!(rig.det.tracked(), 0);
    }

    #[test]
    fn check_names_every_bad_field() {
        let cfg = HotKeyConfig {
            min_group_share: 0.0,
            min_shard_share: 1.5,
            min_ratio: 0.5,
            min_requests: 0,
            min_shard_requests: 0,
            single_shard_share: 0.3,
            forget_share: 0.0,
            consecutive_windows: 0,
            ..HotKeyConfig::default()
        };
        let mut v = Vec::new();
        cfg.check(&mut Problems::new("detectors.hot_key", &mut v));
        let fields: Vec<&str> = v.iter().map(|p| p.field.as_str()).collect();
        for f in [
            "min_group_share",
            "min_shard_share",
            "min_ratio",
            "min_requests",
            "min_shard_requests",
            "single_shard_share",
            "forget_share",
            "consecutive_windows",
        ] {
            let full = format!("detectors.hot_key.{f}");
            assert!(
                fields.contains(&full.as_str()),
                "{f} missing from {fields:?}"
            );
        }
        let mut v = Vec::new();
        HotKeyConfig::default().check(&mut Problems::new("d", &mut v));
        assert!(v.is_empty(), "{v:?}");
    }
}
