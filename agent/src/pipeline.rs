//! The pipeline task: the single owner of the [`Engine`].
//!
//! Ingest hands it [`Batch`]es over a bounded channel; it records them, closes windows on the
//! wall clock, and publishes each closed window as an immutable `Arc<WindowSnapshot>` on a
//! watch channel that `/metrics` and `/api/v1/status` read, and the active alerts as an
//! `Arc<Vec<Alert>>` on a second one that `/api/v1/alerts` and `skewwatch_alert_firing` read.
//! Alert delivery and the cumulative counters (`exposition::totals`) get each evaluation
//! through [`Pipeline::on_evaluation`]. Nothing else
//! touches the engine, so the hot path takes no lock.

use std::sync::Arc;
use std::time::Duration;

use skewwatch_detectors::alert::Alert;
use skewwatch_detectors::engine::{Engine, Evaluation};
use skewwatch_detectors::observation::Batch;
use skewwatch_detectors::snapshot::WindowSnapshot;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::telemetry::SelfMetrics;

/// The ends of the channels around the pipeline.
#[derive(Debug)]
pub struct PipelineChannels {
    /// Where ingest sends batches.
    pub batches: mpsc::Sender<Batch>,
    /// The latest closed window.
    pub snapshots: watch::Receiver<Arc<WindowSnapshot>>,
    /// The active (pending and firing) alerts after the latest evaluation.
    pub alerts: watch::Receiver<Arc<Vec<Alert>>>,
}

/// What [`Pipeline::on_evaluation`] registers.
type EvaluationHook = Box<dyn FnMut(&Evaluation) + Send>;

/// The pipeline task's state.
pub struct Pipeline<C: Clock> {
    engine: Engine,
    clock: C,
    batches: mpsc::Receiver<Batch>,
    snapshots: watch::Sender<Arc<WindowSnapshot>>,
    alerts: watch::Sender<Arc<Vec<Alert>>>,
    metrics: SelfMetrics,
    on_evaluation: Vec<EvaluationHook>,
}

impl<C: Clock> Pipeline<C> {
    /// A pipeline around `engine` with a queue of `queue_batches` batches.
    pub fn new(
        engine: Engine,
        clock: C,
        queue_batches: usize,
        metrics: SelfMetrics,
    ) -> (Self, PipelineChannels) {
        let (tx, rx) = mpsc::channel(queue_batches);
        let (stx, srx) = watch::channel(Arc::new(WindowSnapshot::empty(engine.window_start())));
        let (atx, arx) = watch::channel(Arc::new(Vec::new()));
        (
            Pipeline {
                engine,
                clock,
                batches: rx,
                snapshots: stx,
                alerts: atx,
                metrics,
                on_evaluation: Vec::new(),
            },
            PipelineChannels {
                batches: tx,
                snapshots: srx,
                alerts: arx,
            },
        )
    }

    /// Calls `f` for every closed window, after the snapshot is published; hooks run in the
    /// order they were added (alert delivery, the cumulative counters).
    pub fn on_evaluation(&mut self, f: impl FnMut(&Evaluation) + Send + 'static) {
        self.on_evaluation.push(Box::new(f));
    }

    /// Runs until `cancel` fires and the queue is drained.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let wait = (self.engine.window_end() - self.clock.now()).max(0.0);
            tokio::select! {
                biased;
                _ = tokio::time::sleep(Duration::from_secs_f64(wait)) => {
                    self.evaluate(self.clock.now());
                }
                batch = self.batches.recv() => match batch {
                    Some(b) => self.engine.record_batch(&b),
                    None => break,
                },
                _ = cancel.cancelled() => break,
            }
        }
        // Take what ingest already queued; the ingest tasks stop first on shutdown.
        self.batches.close();
        while let Ok(b) = self.batches.try_recv() {
            self.engine.record_batch(&b);
        }
        tracing::info!("Pipeline stopped.");
    }

    fn evaluate(&mut self, now: f64) {
        for ev in self.engine.advance(now) {
            self.metrics.windows.inc();
            self.metrics.last_window_end.set(ev.snapshot.end as i64);
            self.snapshots.send_replace(ev.snapshot.clone());
            self.alerts.send_replace(ev.alerts.clone());
            for f in &mut self.on_evaluation {
                f(&ev);
            }
        }
    }
}
