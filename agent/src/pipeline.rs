//! The pipeline task: the single owner of the [`Engine`].
//!
//! Ingest hands it [`Batch`]es over a bounded channel; it records them, closes windows on the
//! wall clock, and publishes each closed window as an immutable `Arc<WindowSnapshot>` on a
//! watch channel that `/metrics` and `/api/v1/status` read, and the active alerts as an
//! `Arc<Vec<Alert>>` on a second one that `/api/v1/alerts` and `skewwatch_alert_firing` read.
//! Alert delivery and the cumulative counters (`outputs::totals`) get each evaluation
//! through [`Pipeline::on_evaluation`]. Nothing else
//! touches the engine, so the hot path takes no lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};
use skewwatch_detectors::alert::Alert;
use skewwatch_detectors::detect::DetectorsConfig;
use skewwatch_detectors::engine::{Engine, Evaluation};
use skewwatch_detectors::observation::Batch;
use skewwatch_detectors::snapshot::WindowSnapshot;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::ingest::fleet::Gate;
use crate::ingest::{IngestQueue, Queued};
use crate::state::StateStore;
use crate::telemetry::{Registrar, saturating_inc};

/// The pipeline's metrics, registered by the pipeline: windows closed and when, records
/// folded into `__other__`, wall-clock steps.
#[derive(Debug, Clone)]
pub struct PipelineMetrics {
    /// Windows closed by the pipeline.
    windows: IntCounter,
    /// End of the last closed window, unix seconds.
    last_window_end: IntGauge,
    /// Records folded into `__other__`, by level (`group`, `shard`).
    folded: IntCounterVec,
    /// Wall-clock steps the pipeline re-aligned its windows to, by direction.
    clock_steps: IntCounterVec,
}

impl PipelineMetrics {
    /// Registers the pipeline's metrics in `registry`, every label value resolved so zeros
    /// show from the first scrape.
    pub fn register(registry: &Registry) -> prometheus::Result<PipelineMetrics> {
        let r = Registrar(registry);
        let m = PipelineMetrics {
            folded: r.counters(
                "skewwatch_ingest_folded_total",
                "Records folded into __other__ because a cap was full, by level: shard (a group's shard cap or the total shard budget) or group (the group cap).",
                &["level"],
            )?,
            clock_steps: r.counters(
                "skewwatch_clock_steps_total",
                "Times the wall clock stepped away from the window schedule and windows were re-aligned, by direction.",
                &["direction"],
            )?,
            windows: r.counter(
                "skewwatch_windows_closed_total",
                "Statistics windows closed by the pipeline.",
            )?,
            last_window_end: r.gauge(
                "skewwatch_last_window_end_timestamp_seconds",
                "End of the last closed statistics window, unix seconds.",
            )?,
        };
        for level in ["group", "shard"] {
            m.folded.with_label_values(&[level]);
        }
        for direction in ["forward", "backward"] {
            m.clock_steps.with_label_values(&[direction]);
        }
        Ok(m)
    }

    /// Windows closed so far.
    pub fn windows_closed(&self) -> u64 {
        self.windows.get()
    }

    /// The clock-step counter of `direction` (`forward` or `backward`).
    fn clock_steps(&self, direction: &str) -> IntCounter {
        self.clock_steps.with_label_values(&[direction])
    }
}

/// When the pipeline last closed a window, shared with `/readyz`: a pipeline that stopped
/// closing windows (stuck, or dead) makes the agent unready.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    inner: Arc<HeartbeatInner>,
}

#[derive(Debug)]
struct HeartbeatInner {
    epoch: tokio::time::Instant,
    /// Milliseconds since `epoch` of the last beat.
    last_ms: AtomicU64,
    /// The window length in milliseconds.
    window_ms: AtomicU64,
}

impl Heartbeat {
    /// Windows without a close after which the pipeline counts as stuck.
    pub const STALE_WINDOWS: u32 = 3;

    /// A heartbeat that beat just now, for windows of `window`.
    pub fn new(window: Duration) -> Heartbeat {
        Heartbeat {
            inner: Arc::new(HeartbeatInner {
                epoch: tokio::time::Instant::now(),
                last_ms: AtomicU64::new(0),
                window_ms: AtomicU64::new(window.as_millis() as u64),
            }),
        }
    }

    /// A window closed now.
    pub fn beat(&self) {
        let ms = self.inner.epoch.elapsed().as_millis() as u64;
        self.inner.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long since the last beat, when that is longer than [`Heartbeat::STALE_WINDOWS`]
    /// windows.
    pub fn stale(&self) -> Option<Duration> {
        let now = self.inner.epoch.elapsed().as_millis() as u64;
        let since = now.saturating_sub(self.inner.last_ms.load(Ordering::Relaxed));
        let limit = self.inner.window_ms.load(Ordering::Relaxed) * u64::from(Self::STALE_WINDOWS);
        (since > limit).then(|| Duration::from_millis(since))
    }
}

/// The ends of the channels around the pipeline.
#[derive(Debug)]
pub struct PipelineChannels {
    /// Where ingest sends batches.
    pub queue: IngestQueue,
    /// The latest closed window.
    pub snapshots: watch::Receiver<Arc<WindowSnapshot>>,
    /// The active (pending and firing) alerts after the latest evaluation.
    pub alerts: watch::Receiver<Arc<Vec<Alert>>>,
    /// When the pipeline last closed a window.
    pub heartbeat: Heartbeat,
    /// Where reloads send their changes.
    pub control: mpsc::Sender<Control>,
}

/// What [`Pipeline::on_evaluation`] registers.
pub type EvaluationHook = Box<dyn FnMut(&Evaluation) + Send>;

/// What [`Pipeline::on_window`] registers.
pub type WindowHook = Box<dyn FnMut(&WindowSnapshot) + Send>;

/// Changes to the pipeline while it runs (a configuration reload).
pub enum Control {
    /// New detector settings; the reply is sent once they are in force.
    Reconfigure(Box<DetectorsConfig>, oneshot::Sender<()>),
    /// A new evaluation hook (alert delivery rebuilt); the old one is dropped.
    Hook(Option<EvaluationHook>),
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Control::Reconfigure(..) => f.write_str("Reconfigure"),
            Control::Hook(h) => write!(f, "Hook({})", h.is_some()),
        }
    }
}

/// The pipeline task's state.
pub struct Pipeline<C: Clock> {
    engine: Engine,
    clock: C,
    batches: mpsc::Receiver<Queued>,
    snapshots: watch::Sender<Arc<WindowSnapshot>>,
    alerts: watch::Sender<Arc<Vec<Alert>>>,
    metrics: PipelineMetrics,
    heartbeat: Heartbeat,
    control: mpsc::Receiver<Control>,
    /// Alert delivery's hook; replaced when a reload rebuilds delivery.
    delivery: Option<EvaluationHook>,
    /// Other hooks (the live view's history), called after delivery's, in the order added.
    observers: Vec<EvaluationHook>,
    /// What every closed window's counts go to (the cumulative counters), the window cut
    /// short at shutdown included.
    counters: Vec<WindowHook>,
    /// Where the engine's state is saved, if anywhere.
    state: Option<StateStore>,
    windows_since_save: u32,
    saving: Option<tokio::task::JoinHandle<bool>>,
    /// On a fleet instance, which windows the fleet input has fed: one it has not is skipped.
    gate: Option<Gate>,
}

impl<C: Clock> Pipeline<C> {
    /// A pipeline around `engine` with a queue of at most `queue_batches` batches holding
    /// `queue_bytes` bytes.
    pub fn new(
        engine: Engine,
        clock: C,
        queue_batches: usize,
        queue_bytes: usize,
        metrics: PipelineMetrics,
        state: Option<StateStore>,
    ) -> (Self, PipelineChannels) {
        let (tx, rx) = IngestQueue::new(queue_batches, queue_bytes);
        let (stx, srx) = watch::channel(Arc::new(WindowSnapshot::empty(engine.window_start())));
        let (atx, arx) = watch::channel(Arc::new(Vec::new()));
        let heartbeat = Heartbeat::new(Duration::from_secs_f64(engine.window_secs()));
        let (ctx, crx) = mpsc::channel(4);
        (
            Pipeline {
                engine,
                clock,
                batches: rx,
                snapshots: stx,
                alerts: atx,
                metrics,
                heartbeat: heartbeat.clone(),
                control: crx,
                delivery: None,
                observers: Vec::new(),
                counters: Vec::new(),
                state,
                windows_since_save: 0,
                saving: None,
                gate: None,
            },
            PipelineChannels {
                queue: tx,
                snapshots: srx,
                alerts: arx,
                heartbeat,
                control: ctx,
            },
        )
    }

    /// Sets alert delivery's hook (none without receivers), called for every closed window
    /// after the snapshot is published.
    pub fn set_delivery(&mut self, f: Option<EvaluationHook>) {
        self.delivery = f;
    }

    /// Judges only the windows `gate` says were fed (a fleet instance): a window the fleet
    /// input has no answer for is skipped, not judged empty.
    pub fn set_gate(&mut self, gate: Gate) {
        self.gate = Some(gate);
    }

    /// Judges windows of the past before the live ones (the fleet input's backfill), oldest
    /// first: each batch is recorded into the window that ends at its time, which is closed,
    /// evaluated and published like a live one, through every hook registered so far. Windows
    /// that end at or before the engine's open window began are left out.
    pub fn prime(&mut self, windows: Vec<(f64, Batch)>) {
        let secs = self.engine.window_secs();
        for (end, batch) in windows {
            if end <= self.engine.window_start() + 1e-6 {
                continue;
            }
            for ev in self.engine.advance(end - secs) {
                self.publish(ev);
            }
            self.engine.record_batch(&batch);
            for ev in self.engine.advance(end) {
                self.publish(ev);
            }
        }
    }

    /// Adds a hook called for every closed window, after delivery's; hooks run in the order
    /// they were added.
    pub fn on_evaluation(&mut self, f: impl FnMut(&Evaluation) + Send + 'static) {
        self.observers.push(Box::new(f));
    }

    /// Adds a hook called with every closed window, judged or not: every window an evaluation
    /// is published for, and the open window that [`Pipeline::run`] cuts short when it stops,
    /// which no detector judges. For the cumulative counters, so that what the agent counted
    /// before it stopped reaches `/metrics` for a last scrape.
    pub fn on_window(&mut self, f: impl FnMut(&WindowSnapshot) + Send + 'static) {
        self.counters.push(Box::new(f));
    }

    /// Runs until `cancel` fires and the queue is drained.
    ///
    /// Windows are closed on a monotonic schedule: the pipeline sleeps until the wall clock
    /// should reach the window's end, but never longer than one window, and at every tick it
    /// closes exactly one window. Wall time only labels windows. So a wall clock that steps
    /// back cannot freeze windows, and one that steps forward cannot close a burst of empty
    /// ones; either step is logged, counted, and the next window is re-aligned to the new
    /// time (see [`Engine::realign`]).
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut next = self.next_tick();
        loop {
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(next) => {
                    self.tick();
                    next = self.next_tick();
                }
                batch = self.batches.recv() => match batch {
                    Some(q) => self.engine.record_batch_at(&q.batch, || self.clock.now()),
                    None => break,
                },
                Some(c) = self.control.recv() => {
                    self.apply(c);
                    next = self.next_tick();
                }
                _ = cancel.cancelled() => break,
            }
        }
        // Take what ingest already queued; the ingest tasks stop first on shutdown.
        self.batches.close();
        while let Ok(q) = self.batches.try_recv() {
            self.engine.record_batch(&q.batch);
        }
        // The open window's counts go to the counters, unjudged; the state saved below is
        // that of the last judged window.
        let cut = self.engine.close_unjudged(self.clock.now());
        for f in &mut self.counters {
            f(&cut);
        }
        self.save_state().await;
        tracing::info!("Pipeline stopped.");
    }

    /// When the current window should close: when the wall clock reaches its end, but at most
    /// one window from now.
    fn next_tick(&self) -> tokio::time::Instant {
        let window = self.engine.window_secs();
        let wait = (self.engine.window_end() - self.clock.now()).clamp(0.0, window);
        tokio::time::Instant::now() + Duration::from_secs_f64(wait)
    }

    /// Closes one window; re-aligns when the wall clock has moved away from the schedule.
    fn tick(&mut self) {
        let now = self.clock.now();
        let end = self.engine.window_end();
        let window = self.engine.window_secs();
        if let Some(gate) = &self.gate {
            // The fleet input queues a window's batch before it opens the gate: take it first.
            while let Ok(q) = self.batches.try_recv() {
                self.engine.record_batch(&q.batch);
            }
            if !gate.is_fed(end) {
                // No answer for this window: it is not judged, and alert times move on with it
                // as if it had not passed, so missing data neither fires nor resolves anything.
                self.heartbeat.beat();
                self.engine.realign(end);
                return;
            }
        }
        let ev = self.engine.close_window();
        self.publish(ev);
        let step = now - end;
        if step.abs() > step_tolerance(window) {
            let direction = if step > 0.0 { "forward" } else { "backward" };
            tracing::warn!(
                step_secs = step,
                direction,
                "The wall clock stepped; windows are re-aligned to it."
            );
            self.metrics.clock_steps(direction).inc();
            self.engine
                .realign(skewwatch_detectors::engine::align(now, window));
        }
    }

    fn apply(&mut self, control: Control) {
        match control {
            Control::Reconfigure(cfg, reply) => {
                for (detector, why) in self.engine.set_detectors(*cfg) {
                    tracing::warn!(
                        detector,
                        why,
                        "A detector could not keep its state across the reload; it starts afresh."
                    );
                }
                let _ = reply.send(());
            }
            Control::Hook(hook) => self.delivery = hook,
        }
    }

    fn publish(&mut self, ev: Evaluation) {
        self.metrics.windows.inc();
        self.heartbeat.beat();
        self.metrics.last_window_end.set(ev.snapshot.end as i64);
        for g in &ev.snapshot.groups {
            let level = if g.overflow { "group" } else { "shard" };
            saturating_inc(
                &self.metrics.folded.with_label_values(&[level]),
                g.folded_records,
            );
        }
        self.snapshots.send_replace(ev.snapshot.clone());
        self.alerts.send_replace(ev.alerts.clone());
        if let Some(f) = &mut self.delivery {
            f(&ev);
        }
        for f in &mut self.counters {
            f(&ev.snapshot);
        }
        for f in &mut self.observers {
            f(&ev);
        }
        self.windows_since_save += 1;
        if self
            .state
            .as_ref()
            .is_some_and(|s| self.windows_since_save >= s.every_windows)
        {
            self.windows_since_save = 0;
            self.spawn_save();
        }
    }

    /// Writes the engine's state in the background (the pipeline does not wait for the
    /// disk); a write still running is not doubled.
    fn spawn_save(&mut self) {
        let Some(store) = &self.state else { return };
        if self.saving.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let bytes = store.encode(&self.engine.save_state());
        let store = store.clone();
        self.saving = Some(tokio::task::spawn_blocking(move || store.write(&bytes)));
    }

    /// Writes the state now and waits (at shutdown).
    async fn save_state(&mut self) {
        let Some(store) = self.state.clone() else {
            return;
        };
        if let Some(h) = self.saving.take() {
            let _ = h.await;
        }
        let bytes = store.encode(&self.engine.save_state());
        let _ = tokio::task::spawn_blocking(move || store.write(&bytes)).await;
    }
}

/// How far the wall clock may drift from the window schedule at a tick before it counts as
/// a step: timer jitter on a loaded machine stays well within it.
fn step_tolerance(window_secs: f64) -> f64 {
    (window_secs / 4.0).max(0.5)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use prometheus::Registry;
    use skewwatch_detectors::engine::EngineConfig;

    use super::*;

    /// A wall clock the test sets.
    #[derive(Clone)]
    struct FakeClock(Arc<Mutex<f64>>);

    impl Clock for FakeClock {
        fn now(&self) -> f64 {
            *self.0.lock().unwrap()
        }
    }

    impl FakeClock {
        fn add(&self, secs: f64) {
            *self.0.lock().unwrap() += secs;
        }
    }

    const T0: f64 = 1_700_000_000.0;

    /// A running pipeline with 10 s windows at `T0`, its clock, its metrics and its ends.
    fn start() -> (
        FakeClock,
        PipelineMetrics,
        PipelineChannels,
        CancellationToken,
    ) {
        let clock = FakeClock(Arc::new(Mutex::new(T0)));
        let metrics = PipelineMetrics::register(&Registry::new()).unwrap();
        let engine = Engine::new(EngineConfig::default(), T0);
        let (p, ch) = Pipeline::new(engine, clock.clone(), 8, 1 << 20, metrics.clone(), None);
        let cancel = CancellationToken::new();
        tokio::spawn(p.run(cancel.clone()));
        (clock, metrics, ch, cancel)
    }

    /// Lets `secs` of monotonic and wall time pass together.
    async fn pass(clock: &FakeClock, secs: f64) {
        for _ in 0..(secs as u32) {
            clock.add(1.0);
            tokio::time::advance(Duration::from_secs(1)).await;
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_stepped_back_freezes_no_window() {
        let (clock, metrics, ch, cancel) = start();
        pass(&clock, 10.0).await;
        assert_eq!(metrics.windows_closed(), 1);
        // The wall clock jumps back 30 s: windows keep closing every 10 s of real time.
        clock.add(-30.0);
        for n in 2..=4 {
            pass(&clock, 10.0).await;
            assert_eq!(metrics.windows_closed(), n);
            assert!(ch.heartbeat.stale().is_none());
        }
        assert_eq!(metrics.clock_steps("backward").get(), 1);
        // Re-aligned: the last window ends on a multiple of 10 s of the new time.
        let end = ch.snapshots.borrow().end;
        assert_eq!(end % 10.0, 0.0);
        assert!(
            (clock.now() - end).abs() <= 10.0,
            "{end} vs {}",
            clock.now()
        );
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_stepped_forward_a_year_closes_one_window_not_a_burst() {
        let (clock, metrics, ch, cancel) = start();
        pass(&clock, 10.0).await;
        assert_eq!(metrics.windows_closed(), 1);
        clock.add(365.0 * 86_400.0);
        pass(&clock, 10.0).await;
        // One window at the step (closed at once) and at most one more since.
        assert!(
            metrics.windows_closed() <= 3,
            "{}",
            metrics.windows_closed()
        );
        assert_eq!(metrics.clock_steps("forward").get(), 1);
        pass(&clock, 10.0).await;
        let end = ch.snapshots.borrow().end;
        assert!(end > T0 + 365.0 * 86_400.0, "not re-aligned: {end}");
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_pipeline_goes_stale() {
        let hb = Heartbeat::new(Duration::from_secs(1));
        assert!(hb.stale().is_none());
        tokio::time::advance(Duration::from_millis(3100)).await;
        assert!(hb.stale().is_some());
        hb.beat();
        assert!(hb.stale().is_none());
    }
}
