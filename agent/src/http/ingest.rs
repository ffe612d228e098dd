//! `POST /api/v1/observations`: NDJSON (or a JSON array) in, one batch to the pipeline, counts
//! out.
//!
//! At most `http.max_concurrent_ingest` bodies are read and parsed at once; a request waits for
//! its turn (within the request timeout) before its body is read, so concurrent uploads cannot
//! hold more than that many bodies in memory. Bodies over the limit get 413; a full ingest
//! queue gets 503 with `Retry-After`, and nothing of that body is taken or counted (neither its
//! records nor its rejected lines), so the client may retry it whole and it counts once.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use skewwatch_detectors::observation::Batch;

use super::IngestState;
use crate::ingest::{QueueError, ndjson};

#[derive(Serialize)]
struct LineErrorBody {
    line: usize,
    reason: &'static str,
    message: String,
}

#[derive(Serialize)]
struct IngestReply {
    accepted: usize,
    rejected: u64,
    errors: Vec<LineErrorBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Reads the whole body, at most `limit` bytes; `Err` is the 413 answer.
pub async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than limits.http_body_limit_bytes ({limit} bytes)\n"),
        )
            .into_response()
    })
}

/// The handler.
pub async fn observations(State(s): State<IngestState>, body: Body) -> Response {
    let Ok(_permit) = s.permits.clone().acquire_owned().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let body = match read_body(body, s.body_limit).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let mut batch = Batch::with_capacity(body.len() / 64 + 1);
    let outcome = ndjson::parse_body(&body, &mut batch);
    let errors = outcome
        .errors
        .iter()
        .map(|e| LineErrorBody {
            line: e.line,
            reason: e.reason.as_str(),
            message: e.reason.to_string(),
        })
        .collect();
    let mut reply = IngestReply {
        accepted: outcome.accepted,
        rejected: outcome.rejected.total(),
        errors,
        error: None,
    };
    let code = if outcome.accepted == 0 && reply.rejected > 0 {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    if !batch.is_empty()
        && let Err(e) = s.queue.submit_whole(&s.metrics, batch)
    {
        // Nothing of this body was taken or counted: the client may retry it whole, and its
        // rejected lines are counted when a retry is taken.
        reply.accepted = 0;
        reply.error = Some(e.to_string());
        let mut resp = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(reply)).into_response();
        if e == QueueError::Full {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        return resp;
    }
    s.metrics.add_rejections(&outcome.rejected);
    (code, axum::Json(reply)).into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::extract::State;
    use axum::http::StatusCode;
    use prometheus::Registry;
    use skewwatch_detectors::observation::Batch;
    use tokio::sync::Semaphore;

    use super::observations;
    use crate::http::IngestState;
    use crate::http::otlp::OtlpState;
    use crate::ingest::IngestQueue;
    use crate::ingest::otlp::{Mapping, OtlpMetrics};
    use crate::telemetry::{IngestMetrics, Source};

    const BODY: &str = "{\"group\":\"g\",\"shard\":\"s\",\"latency_ms\":1}\n{\"group\":\"g\"}\n";

    #[tokio::test]
    async fn a_body_refused_with_503_counts_nothing_so_its_retry_counts_once() {
        let m = IngestMetrics::register(&Registry::new()).unwrap();
        let source = m.source(Source::Http).clone();
        let (queue, mut rx) = IngestQueue::new(1, 1 << 20);
        let mut filler = Batch::default();
        filler.push(&skewwatch_detectors::observation::ObservationRef::new(
            "g", "s",
        ));
        queue.submit(&source, filler).unwrap();
        let filled = source.records.get();
        let state = IngestState {
            queue,
            permits: Arc::new(Semaphore::new(4)),
            max_bodies: 4,
            body_limit: 1 << 20,
            metrics: source.clone(),
            otlp: OtlpState::new(&Mapping::default(), OtlpMetrics::new(&m)),
        };
        let post = || observations(State(state.clone()), Body::from(BODY));
        let rejected = || {
            m.rejected
                .with_label_values(&["http", "missing_shard"])
                .get()
        };
        let dropped = || m.dropped.with_label_values(&["http", "queue_full"]).get();

        for _ in 0..3 {
            assert_eq!(post().await.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
        assert_eq!(
            (source.records.get() - filled, rejected(), dropped()),
            (0, 0, 0),
            "a refused body counted something"
        );

        rx.recv().await.unwrap();
        assert_eq!(post().await.status(), StatusCode::OK);
        assert_eq!(
            (source.records.get() - filled, rejected(), dropped()),
            (1, 1, 0),
            "the retry that was taken counts its records and its rejected line once"
        );
    }
}
