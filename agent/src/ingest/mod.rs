//! Ingest: the first stage of the live flow. Each input parses its wire format into
//! [`skewwatch_detectors::observation::Batch`]es and hands them to the pipeline over the
//! [`IngestQueue`], bounded in batches and in bytes, without ever blocking: a full queue drops
//! a StatsD or scrape batch and counts it in `skewwatch_ingest_dropped_total{reason="queue_full"}`;
//! an HTTP body it cannot take is answered 503 and counts nothing, so the client's retry of the
//! same body counts its records (and its rejected lines) once.
//!
//! - [`statsd`]: StatsD / DogStatsD over UDP: the receiver thread, the line parser and
//!   `statsd.mappings` (other StatsD metric names turned into observations).
//! - [`ndjson`]: NDJSON body parser for `POST /api/v1/observations` and `replay`.
//! - [`otlp`]: OpenTelemetry spans and metrics (`POST /v1/traces`, `POST /v1/metrics`).
//! - [`scrape`]: `scrape:` jobs, Prometheus targets read as input.
//! - [`outcome`]: another system's names for a request's result (`4xx`, `404`, `NOT_FOUND`)
//!   translated into outcome classes, for the scrape jobs and the StatsD mappings.
//!
//! Each input owns its validated configuration and the validator that builds it from its raw
//! section (`statsd::config`, `scrape::config`, `otlp::config`); the configuration layer
//! reads the file and collects the problems, the stages say what is valid.

pub mod fleet;
pub mod ndjson;
pub mod otlp;
pub mod outcome;
pub mod scrape;
pub mod statsd;

use std::sync::Arc;

use skewwatch_detectors::observation::Batch;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::telemetry::{DropReason, SourceMetrics, saturating_inc};

/// Why a batch could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The pipeline is behind; the batch was dropped and counted.
    #[error("the ingest queue is full; retry later")]
    Full,
    /// The pipeline has stopped (shutdown).
    #[error("the agent is shutting down")]
    Closed,
}

/// A batch in the queue, holding its share of the queue's byte budget until the pipeline has
/// recorded it.
#[derive(Debug)]
pub struct Queued {
    /// The batch.
    pub batch: Batch,
    _bytes: Option<OwnedSemaphorePermit>,
}

impl Queued {
    /// A batch outside any budget (tests, and callers that own the pipeline).
    pub fn unbudgeted(batch: Batch) -> Queued {
        Queued {
            batch,
            _bytes: None,
        }
    }
}

/// The sending end of the ingest queue, bounded twice: by batches (the channel) and by the
/// bytes the queued batches hold, so a flood of large batches cannot queue more memory than
/// `limits.ingest_queue_bytes`.
#[derive(Debug, Clone)]
pub struct IngestQueue {
    tx: mpsc::Sender<Queued>,
    bytes: Arc<Semaphore>,
    budget: usize,
}

impl IngestQueue {
    /// A queue of at most `batches` batches and `bytes` bytes; the receiving end goes to the
    /// pipeline.
    pub fn new(batches: usize, bytes: usize) -> (IngestQueue, mpsc::Receiver<Queued>) {
        let (tx, rx) = mpsc::channel(batches);
        let q = IngestQueue {
            tx,
            bytes: Arc::new(Semaphore::new(bytes)),
            budget: bytes,
        };
        (q, rx)
    }

    /// Hands a batch to the pipeline, counting it as accepted or dropped in `metrics` (the
    /// counters of the batch's source). Never waits. For inputs that cannot ask their sender
    /// to retry (StatsD, scrape jobs): what is refused is lost, so it is counted as dropped.
    pub fn submit(&self, metrics: &SourceMetrics, batch: Batch) -> Result<(), QueueError> {
        let records = batch.len() as u64;
        let result = self.submit_whole(metrics, batch);
        match result {
            Ok(()) => {}
            Err(QueueError::Full) => metrics.dropped(DropReason::QueueFull, records),
            Err(QueueError::Closed) => metrics.dropped(DropReason::Shutdown, records),
        }
        result
    }

    /// Hands a batch to the pipeline, counting it as accepted in `metrics` only when it is
    /// taken. Never waits. For HTTP bodies: a refused body is answered 503 and is not lost,
    /// the client retries it whole, so counting it here (as dropped, or its rejected lines)
    /// would count the same records again on every retry.
    pub fn submit_whole(&self, metrics: &SourceMetrics, batch: Batch) -> Result<(), QueueError> {
        let records = batch.len() as u64;
        let requests = batch.requests();
        // A batch larger than the whole budget takes the whole budget, so it can still pass.
        let cost = batch.heap_bytes().clamp(1, self.budget) as u32;
        let result = match self.bytes.clone().try_acquire_many_owned(cost) {
            Ok(permit) => self
                .tx
                .try_send(Queued {
                    batch,
                    _bytes: Some(permit),
                })
                .map_err(|e| match e {
                    mpsc::error::TrySendError::Full(_) => QueueError::Full,
                    mpsc::error::TrySendError::Closed(_) => QueueError::Closed,
                }),
            Err(tokio::sync::TryAcquireError::NoPermits) => Err(QueueError::Full),
            Err(tokio::sync::TryAcquireError::Closed) => Err(QueueError::Closed),
        };
        if result.is_ok() {
            saturating_inc(&metrics.records, records);
            saturating_inc(&metrics.requests, requests);
        }
        result
    }
}
