//! `POST /api/v1/observations`: NDJSON (or a JSON array) in, one batch to the pipeline, counts
//! out.
//!
//! At most `http.max_concurrent_ingest` bodies are read and parsed at once; a request waits for
//! its turn (within the request timeout) before its body is read, so concurrent uploads cannot
//! hold more than that many bodies in memory. Bodies over the limit get 413; a full ingest
//! queue gets 503 with `Retry-After`, and nothing of that body is taken, so the client may
//! retry it whole.

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
    s.metrics.add_rejections(&outcome.rejected);
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
        && let Err(e) = s.queue.submit(&s.metrics, batch)
    {
        // Nothing of this body was taken: the client may retry it whole.
        reply.accepted = 0;
        reply.error = Some(e.to_string());
        let mut resp = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(reply)).into_response();
        if e == QueueError::Full {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        return resp;
    }
    (code, axum::Json(reply)).into_response()
}
