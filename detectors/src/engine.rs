//! The engine: windows plus detectors plus alert state, driven by time passed in.
//!
//! `Observation -> Window -> SkewStats -> Detectors -> Alerts/Snapshot`. The live agent's
//! pipeline task and `skewwatch replay` both own one [`Engine`] and feed it the same way:
//! [`Engine::record`] for observations and [`Engine::advance`] with the current time (wall clock
//! live, trace time in replay). Windows are aligned to multiples of the window length since the
//! unix epoch, so two agents with the same window length cut time the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alert::{Alert, AlertBook, Transition};
use crate::detect::{Context, Detector, DetectorsConfig};
use crate::observation::{Batch, ObservationRef, ReadingRef};
use crate::parts::Recording;
use crate::snapshot::WindowSnapshot;
use crate::whatif::{Policy, WhatIf, WhatIfConfig};
use crate::window::WindowConfig;

/// Longest run of empty windows [`Engine::advance`] closes one by one after a gap in time; after
/// that it jumps, so a trace with a day-long gap does not stall replay.
const MAX_EMPTY_WINDOWS: u32 = 360;

/// Everything the engine needs to know.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineConfig {
    /// Windowing sizes and caps.
    pub window: WindowConfig,
    /// Detector thresholds and alert timing.
    pub detectors: DetectorsConfig,
    /// The cache policies simulated for groups whose observations name a cache key.
    pub whatif: WhatIfConfig,
}

/// One closed window and what it caused.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// The closed window.
    pub snapshot: Arc<WindowSnapshot>,
    /// Alerts that started firing or resolved at the end of this window.
    pub transitions: Vec<Transition>,
    /// Every active (pending or firing) alert after this evaluation.
    pub alerts: Arc<Vec<Alert>>,
}

/// The version of [`EngineState`]; a state of another version is not restored.
///
/// 2: ErrorSurge, ShardFailing, LatencySkew, DeadlinePileUp and HotKey keep each entity's
/// ratio evidence in one [`crate::evidence::ratio::RatioEvidence`] (its baseline, held windows
/// and CUSUMs under one key), and HotShard's z-CUSUM is a [`crate::evidence::cusum::Cusum`].
pub const STATE_VERSION: u32 = 2;

/// What the engine has learned, to carry over a restart: the active alerts and every
/// detector's state (baselines, streaks), by alert name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineState {
    /// [`STATE_VERSION`] when saved.
    pub version: u32,
    /// End of the last evaluated window when saved, unix seconds.
    pub saved_at: f64,
    /// The window length in force when saved.
    pub window_secs: f64,
    /// Active (pending and firing) alerts.
    pub alerts: Vec<Alert>,
    /// Each detector's state, by alert name.
    pub detectors: BTreeMap<String, serde_json::Value>,
}

/// What [`Engine::restore_state`] took back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Restored {
    /// Alerts taken back.
    pub alerts: usize,
    /// Detectors whose state was taken back.
    pub detectors: Vec<&'static str>,
    /// Detectors whose saved state could not be read, and why; they start afresh.
    pub failed: Vec<(&'static str, String)>,
}

/// Windows and detectors, with time passed in.
#[derive(Debug)]
pub struct Engine {
    windows: Recording,
    window_secs: f64,
    detectors: Vec<Box<dyn Detector>>,
    alerts: AlertBook,
    /// End of the last evaluated window.
    last_end: Option<f64>,
    /// The what-if simulations' settings, and the simulations once an observation named a
    /// cache key: without cache keys nothing is built and nothing runs.
    whatif_config: WhatIfConfig,
    whatif: Option<WhatIf>,
    /// `whatif_config`'s policies, shared by every snapshot that carries predictions.
    whatif_policies: Arc<[Policy]>,
}

impl Engine {
    /// An engine whose first window is the aligned window containing `now`.
    pub fn new(cfg: EngineConfig, now: f64) -> Self {
        let window_secs = cfg.window.window_secs;
        let start = align(now, window_secs);
        Engine {
            detectors: cfg.detectors.build(window_secs),
            alerts: AlertBook::new(cfg.detectors.rules()),
            windows: Recording::new(cfg.window, start),
            window_secs,
            last_end: None,
            whatif_policies: cfg.whatif.policies.clone().into(),
            whatif_config: WhatIfConfig {
                window_secs,
                ..cfg.whatif
            },
            whatif: None,
        }
    }

    /// Every alert from now on carries `scope="<scope>"` ([`AlertBook::set_scope`]).
    pub fn set_scope(&mut self, scope: Option<String>) {
        self.alerts.set_scope(scope);
    }

    /// Window length in seconds.
    pub fn window_secs(&self) -> f64 {
        self.window_secs
    }

    /// Start of the current window.
    pub fn window_start(&self) -> f64 {
        self.windows.start()
    }

    /// End of the current window: when [`Engine::advance`] should next be called. Windows end
    /// on multiples of the window length; the first window after a change of length (or a
    /// clock step) may be shorter.
    pub fn window_end(&self) -> f64 {
        align(self.windows.start(), self.window_secs) + self.window_secs
    }

    /// Adds one validated observation to the current window. One with a cache key and no
    /// `ts` is simulated at the window's start; the live pipeline passes its time with
    /// [`Engine::record_batch_at`].
    pub fn record(&mut self, obs: &ObservationRef<'_>) {
        self.windows.record(obs);
        if obs.cache_key.is_some() {
            self.simulate(obs);
        }
    }

    /// [`Engine::record`]'s what-if half, out of line: a record without a cache key carries
    /// only the test of the field.
    #[inline(never)]
    fn simulate(&mut self, obs: &ObservationRef<'_>) {
        let now = self.windows.start();
        self.whatif_mut().record(obs, now);
    }

    /// Adds one validated saturation reading to the current window.
    pub fn read(&mut self, reading: &ReadingRef<'_>) {
        self.windows.read(reading);
    }

    /// Adds every observation and reading of a batch to the current window; the cache keys
    /// of records without a `ts` are simulated at the window's start.
    pub fn record_batch(&mut self, batch: &Batch) {
        let start = self.windows.start();
        self.record_batch_at(batch, || start);
    }

    /// [`Engine::record_batch`], with the time the batch was taken (`now`, asked only when
    /// the batch carries a cache key) for the cache keys of records without a `ts`.
    pub fn record_batch_at(&mut self, batch: &Batch, now: impl FnOnce() -> f64) {
        self.windows.record_batch(batch);
        if batch.cache_keyed_len() > 0 {
            let now = now();
            self.whatif_mut().record_batch(batch, now);
        }
    }

    /// The what-if simulations, built on first use.
    fn whatif_mut(&mut self) -> &mut WhatIf {
        self.whatif
            .get_or_insert_with(|| WhatIf::new(self.whatif_config.clone()))
    }

    /// Closes every window that ended at or before `now`, oldest first, and evaluates each.
    /// This is how replay moves through trace time.
    pub fn advance(&mut self, now: f64) -> Vec<Evaluation> {
        let mut out = Vec::new();
        let mut empty_run = 0;
        while self.window_end() <= now {
            if empty_run >= MAX_EMPTY_WINDOWS {
                // A long gap: one window covers the rest of it, unevaluated, so a trace with a
                // day-long gap does not stall on thousands of empty windows.
                let end = align(now, self.window_secs);
                let _ = self.windows.close(end);
                if let Some(w) = &mut self.whatif {
                    let _ = w.close(end);
                }
                break;
            }
            let ev = self.close_window();
            if ev.snapshot.groups.iter().all(|g| g.requests == 0) {
                empty_run += 1;
            } else {
                empty_run = 0;
            }
            out.push(ev);
        }
        out
    }

    /// Closes the current window at its end and evaluates it, whatever the time: the live
    /// agent calls this once per window, scheduled on a monotonic clock.
    pub fn close_window(&mut self) -> Evaluation {
        let end = self.window_end();
        let mut snap = self.windows.close(end);
        snap.whatif = self.whatif.as_mut().map(|w| Arc::new(w.close(end)));
        snap.whatif_policies = snap.whatif.is_some().then(|| self.whatif_policies.clone());
        self.evaluate(Arc::new(snap))
    }

    /// Closes the open window early, at `now` (kept within the window), without judging it:
    /// no detector sees it and no alert moves. For an agent that stops: what the window
    /// counted so far still reaches the cumulative counters, while a window cut short, which
    /// holds less traffic than its length promises, neither fires nor resolves anything and
    /// teaches no baseline. The next window starts at the cut.
    pub fn close_unjudged(&mut self, now: f64) -> Arc<WindowSnapshot> {
        let start = self.windows.start();
        // A window of no length would divide its counts by zero in its rates.
        let end = now.clamp(start + 1e-3, self.window_end().max(start + 1e-3));
        Arc::new(self.windows.close(end))
    }

    /// The wall clock stepped: the current window now starts at `start` (aligned by the
    /// caller to the new time). Alert times move by the same step, so `for` and
    /// `keep_firing_for` keep measuring the time that really passed; detectors forget what
    /// depends on the spacing of windows in time. No window is closed, so a step forward
    /// closes no burst of empty windows and a step back freezes nothing.
    pub fn realign(&mut self, start: f64) {
        let delta = start - self.windows.start();
        self.windows.set_start(start);
        self.alerts.shift_time(delta);
        if let Some(e) = &mut self.last_end {
            *e += delta;
        }
        for d in &mut self.detectors {
            d.clock_stepped();
        }
    }

    /// Puts new detector settings in force (a reload) without losing the open window, what
    /// the detectors learned or the alerts: detectors are rebuilt from the new settings and
    /// given back their state; alerts keep their state under the new timing rules. The window
    /// settings are not a reload's to change (they size the windows). Returns the detectors
    /// whose state could not be carried over (they start afresh), and why.
    pub fn set_detectors(&mut self, cfg: DetectorsConfig) -> Vec<(&'static str, String)> {
        let secs = self.window_secs;
        let mut old: BTreeMap<&'static str, Box<dyn Detector>> =
            std::mem::take(&mut self.detectors)
                .into_iter()
                .map(|d| (d.alertname(), d))
                .collect();
        self.detectors = cfg.build(secs);
        let mut failed = Vec::new();
        // One detector at a time, the old one dropped as soon as its state is taken: the
        // state's JSON is the largest thing a reload makes, and the allocator keeps the peak.
        for d in &mut self.detectors {
            let Some(prev) = old.remove(d.alertname()) else {
                continue;
            };
            let state = prev.save_state();
            drop(prev);
            if let Err(why) = d.restore_state(state) {
                failed.push((d.alertname(), why));
            }
        }
        self.alerts.set_rules(cfg.rules());
        failed
    }

    /// What the engine has learned, to save.
    pub fn save_state(&self) -> EngineState {
        EngineState {
            version: STATE_VERSION,
            saved_at: self.last_end.unwrap_or(self.windows.start()),
            window_secs: self.window_secs,
            alerts: self.alerts.save(),
            detectors: self
                .detectors
                .iter()
                .map(|d| (d.alertname().to_owned(), d.save_state()))
                .collect(),
        }
    }

    /// Takes back a saved state (checked by the caller for version and age): the alerts, and
    /// each running detector's state where it reads back.
    pub fn restore_state(&mut self, state: EngineState) -> Restored {
        let mut out = Restored {
            alerts: state.alerts.len(),
            ..Restored::default()
        };
        self.alerts.restore(state.alerts);
        let mut saved = state.detectors;
        for d in &mut self.detectors {
            let name = d.alertname();
            let Some(s) = saved.remove(name) else {
                continue;
            };
            match d.restore_state(s) {
                Ok(()) => out.detectors.push(name),
                Err(why) => out.failed.push((name, why)),
            }
        }
        out
    }

    /// Runs every detector over `snap` and updates the alerts.
    fn evaluate(&mut self, snap: Arc<WindowSnapshot>) -> Evaluation {
        let mut findings = Vec::new();
        let ctx = Context {
            snapshot: &snap,
            alerts: &self.alerts,
            window_secs: self.window_secs,
        };
        for d in &mut self.detectors {
            d.evaluate(&ctx, &mut findings);
        }
        let transitions = self.alerts.update(snap.end, findings);
        self.last_end = Some(snap.end);
        Evaluation {
            alerts: Arc::new(self.alerts.active().cloned().collect()),
            snapshot: snap,
            transitions,
        }
    }

    /// Active alerts now.
    pub fn alerts(&self) -> &AlertBook {
        &self.alerts
    }
}

/// The start of the aligned window of length `secs` that contains `t`.
pub fn align(t: f64, secs: f64) -> f64 {
    (t / secs).floor() * secs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_closes_aligned_windows_in_order() {
        let mut e = Engine::new(EngineConfig::default(), 1_000_003.5);
        assert_eq!(e.window_start(), 1_000_000.0);
        e.record(&ObservationRef::new("g", "s"));
        assert!(e.advance(1_000_009.9).is_empty());
        let ev = e.advance(1_000_030.0);
        let ends: Vec<f64> = ev.iter().map(|e| e.snapshot.end).collect();
        assert_eq!(ends, [1_000_010.0, 1_000_020.0, 1_000_030.0]);
        assert_eq!(ev[0].snapshot.groups[0].requests, 1);
        assert_eq!(e.window_start(), 1_000_030.0);
    }

    #[test]
    fn a_long_gap_does_not_close_every_empty_window() {
        let mut e = Engine::new(EngineConfig::default(), 0.0);
        e.record(&ObservationRef::new("g", "s"));
        let ev = e.advance(86_400.0 * 30.0);
        assert!(ev.len() <= MAX_EMPTY_WINDOWS as usize + 1);
        assert_eq!(e.window_start(), 86_400.0 * 30.0);
    }

    /// An engine with only ErrorSurge, quick to warm and to fire.
    fn surge_engine(now: f64) -> Engine {
        let mut cfg = EngineConfig::default();
        let d = &mut cfg.detectors;
        for rule in [
            &mut d.hot_shard.rule,
            &mut d.hot_key.rule,
            &mut d.latency_skew.rule,
            &mut d.cache_hit_collapse.rule,
            &mut d.fast_failure_sink.rule,
            &mut d.shard_failing.rule,
        ] {
            rule.enabled = false;
        }
        d.error_surge.warmup_windows = 2;
        d.error_surge.consecutive_windows = 1;
        d.error_surge.min_requests = 10;
        Engine::new(cfg, now)
    }

    fn window(e: &mut Engine, errors: u64) -> Evaluation {
        let mut o = ObservationRef::new("db", "s");
        o.count = 100 - errors;
        e.record(&o);
        if errors > 0 {
            o.count = errors;
            o.outcome = crate::observation::Outcome::Timeout;
            e.record(&o);
        }
        e.close_window()
    }

    #[test]
    fn a_window_cut_short_at_shutdown_is_counted_but_not_judged() {
        let mut e = surge_engine(0.0);
        for _ in 0..3 {
            window(&mut e, 0);
        }
        let saved = e.save_state();
        // A surge in the open window: judged, it would fire at once.
        let mut o = ObservationRef::new("db", "s");
        o.count = 50;
        o.outcome = crate::observation::Outcome::Timeout;
        e.record(&o);
        let cut = e.close_unjudged(34.0);
        assert_eq!((cut.start, cut.end), (30.0, 34.0));
        assert_eq!(cut.groups[0].requests, 50);
        assert_eq!(e.alerts().active().count(), 0, "the cut window was judged");
        // Nothing learned from it: the state is that of the last judged window.
        assert_eq!(e.save_state(), saved);
        assert_eq!(e.window_start(), 34.0);
    }

    #[test]
    fn a_forward_clock_step_closes_no_empty_windows_and_keeps_alerts_firing() {
        let mut e = surge_engine(0.0);
        for _ in 0..3 {
            window(&mut e, 0);
        }
        let fired = window(&mut e, 50);
        assert_eq!(fired.transitions.len(), 1, "{:?}", fired.transitions);
        let baseline = e.save_state().detectors["ErrorSurge"]["db"]["ratio"].clone();
        // A year forward: one realignment, no window closed for the gap.
        let year = 365.0 * 86_400.0;
        e.realign(align(40.0 + year, 10.0));
        assert_eq!(e.window_start(), 40.0 + year);
        let next = window(&mut e, 50);
        assert!(next.transitions.is_empty(), "{:?}", next.transitions);
        assert_eq!(e.alerts().firing().count(), 1);
        // The frozen baseline learned nothing from a gap of empty windows.
        assert_eq!(
            e.save_state().detectors["ErrorSurge"]["db"]["ratio"],
            baseline
        );
        // Time in the alert book moved with the clock: it resolves after keep_firing_for of
        // real windows, not at once and not never.
        let resolved: usize = (0..10).map(|_| window(&mut e, 0).transitions.len()).sum();
        assert_eq!(resolved, 1);
    }

    #[test]
    fn a_restored_state_keeps_alerts_and_baselines() {
        let mut e = surge_engine(0.0);
        for _ in 0..3 {
            window(&mut e, 0);
        }
        window(&mut e, 50);
        let saved = e.save_state();
        let json = serde_json::to_string(&saved).unwrap();
        let mut fresh = surge_engine(40.0);
        let r = fresh.restore_state(serde_json::from_str(&json).unwrap());
        assert_eq!(r.alerts, 1);
        assert!(r.detectors.contains(&"ErrorSurge"), "{r:?}");
        assert!(r.failed.is_empty());
        // Still firing, no second firing transition, and judged at once (no warm-up).
        let next = window(&mut fresh, 50);
        assert!(next.transitions.is_empty(), "{:?}", next.transitions);
        assert_eq!(fresh.alerts().firing().count(), 1);
    }

    #[test]
    fn reconfigure_keeps_the_open_window_the_baselines_and_the_alerts() {
        let mut e = surge_engine(0.0);
        for _ in 0..3 {
            window(&mut e, 0);
        }
        window(&mut e, 50);
        e.record(&ObservationRef::new("db", "s"));
        let mut cfg = DetectorsConfig::default();
        cfg.error_surge.warmup_windows = 2;
        cfg.error_surge.consecutive_windows = 1;
        cfg.error_surge.min_requests = 10;
        assert!(e.set_detectors(cfg).is_empty());
        assert_eq!(e.alerts().firing().count(), 1);
        let ev = window(&mut e, 50);
        assert_eq!(
            ev.snapshot.groups[0].requests, 101,
            "the open window was kept"
        );
        assert!(ev.transitions.is_empty());
    }
}
