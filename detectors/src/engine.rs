//! The engine: windows plus detectors plus alert state, driven by time passed in.
//!
//! `Observation -> Window -> SkewStats -> Detectors -> Alerts/Snapshot`. The live agent's
//! pipeline task and `skewwatch replay` both own one [`Engine`] and feed it the same way:
//! [`Engine::record`] for observations and [`Engine::advance`] with the current time (wall clock
//! live, trace time in replay). Windows are aligned to multiples of the window length since the
//! unix epoch, so two agents with the same window length cut time the same way.

use std::sync::Arc;

use crate::alert::{Alert, AlertBook, Transition};
use crate::detect::{Context, Detector, DetectorsConfig};
use crate::observation::{Batch, ObservationRef};
use crate::snapshot::WindowSnapshot;
use crate::window::{WindowConfig, Windows};

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

/// Windows and detectors, with time passed in.
#[derive(Debug)]
pub struct Engine {
    windows: Windows,
    window_secs: f64,
    detectors: Vec<Box<dyn Detector>>,
    alerts: AlertBook,
}

impl Engine {
    /// An engine whose first window is the aligned window containing `now`.
    pub fn new(cfg: EngineConfig, now: f64) -> Self {
        let window_secs = cfg.window.window_secs;
        let start = align(now, window_secs);
        Engine {
            detectors: cfg.detectors.build(window_secs),
            alerts: AlertBook::new(cfg.detectors.rules()),
            windows: Windows::new(cfg.window, start),
            window_secs,
        }
    }

    /// Window length in seconds.
    pub fn window_secs(&self) -> f64 {
        self.window_secs
    }

    /// Start of the current window.
    pub fn window_start(&self) -> f64 {
        self.windows.start()
    }

    /// End of the current window: when [`Engine::advance`] should next be called.
    pub fn window_end(&self) -> f64 {
        self.windows.start() + self.window_secs
    }

    /// Adds one validated observation to the current window.
    pub fn record(&mut self, obs: &ObservationRef<'_>) {
        self.windows.record(obs);
    }

    /// Adds every observation of a batch to the current window.
    pub fn record_batch(&mut self, batch: &Batch) {
        self.windows.record_batch(batch);
    }

    /// Closes every window that ended at or before `now`, oldest first, and evaluates each.
    pub fn advance(&mut self, now: f64) -> Vec<Evaluation> {
        let mut out = Vec::new();
        let mut empty_run = 0;
        while self.window_end() <= now {
            if empty_run >= MAX_EMPTY_WINDOWS {
                // A long gap: one window covers the rest of it, unevaluated, so a trace with a
                // day-long gap does not stall on thousands of empty windows.
                let _ = self.windows.close(align(now, self.window_secs));
                break;
            }
            let end = self.window_end();
            let snap = Arc::new(self.windows.close(end));
            if snap.groups.iter().all(|g| g.requests == 0) {
                empty_run += 1;
            } else {
                empty_run = 0;
            }
            out.push(self.evaluate(snap));
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
}
