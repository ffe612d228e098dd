//! Ingest: the first stage of the live flow. Each input parses its wire format into
//! [`skewwatch_detectors::observation::Batch`]es and hands them to the pipeline over a bounded
//! channel without ever blocking: a full queue drops the batch and counts it in
//! `skewwatch_ingest_dropped_total{reason="queue_full"}`.
//!
//! - [`statsd`]: StatsD / DogStatsD line parser.
//! - [`udp`]: the UDP receiver thread that feeds it.
//! - [`ndjson`]: NDJSON body parser for `POST /api/v1/observations` and `replay`.

pub mod ndjson;
pub mod statsd;
pub mod udp;

use skewwatch_detectors::observation::Batch;
use tokio::sync::mpsc;

use crate::telemetry::{DropReason, SourceMetrics};

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

/// Hands a batch to the pipeline, counting it as accepted or dropped in `metrics` (the
/// counters of the batch's source).
pub fn submit(
    tx: &mpsc::Sender<Batch>,
    metrics: &SourceMetrics,
    batch: Batch,
) -> Result<(), QueueError> {
    let records = batch.len() as u64;
    let requests = batch.requests();
    match tx.try_send(batch) {
        Ok(()) => {
            metrics.records.inc_by(records);
            metrics.requests.inc_by(requests);
            Ok(())
        }
        Err(e) => {
            let (reason, err) = match e {
                mpsc::error::TrySendError::Full(_) => (DropReason::QueueFull, QueueError::Full),
                mpsc::error::TrySendError::Closed(_) => (DropReason::Shutdown, QueueError::Closed),
            };
            metrics.dropped(reason, records);
            Err(err)
        }
    }
}
