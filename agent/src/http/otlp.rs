//! `POST /v1/traces` and `POST /v1/metrics`: the OTLP/HTTP receiver.
//!
//! Bodies are protobuf (`application/x-protobuf`) or OTLP/JSON (`application/json`),
//! optionally `Content-Encoding: gzip`, and pass the same guards as
//! `POST /api/v1/observations`: the bearer token, the ingest permits, the body limit (which
//! also bounds the body once decompressed, so a small gzip bomb gets 413 like a large body)
//! and the same queue hand-over (503 with `Retry-After` when the queue is full).
//!
//! Answers follow OTLP/HTTP: 200 with an empty `Export*ServiceResponse` in the request's
//! encoding, or with `partial_success` naming how many spans or points were rejected and the
//! first reason; 400 with a `google.rpc.Status` when the body cannot be read or nothing in it
//! was valid. Skipped spans (not shard calls) are not errors and are not reported to the client.

use std::io::Read;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message;
use skewwatch_detectors::observation::{Batch, RejectReason, Rejections};

use super::IngestState;
use super::guard::media_type;
use super::ingest::read_body;
use crate::ingest::QueueError;
use crate::ingest::otlp::metrics::Cumulative;
use crate::ingest::otlp::{Mapping, OtlpMetrics, OtlpOutcome, metrics, traces};

/// What the OTLP handlers share.
#[derive(Clone)]
pub struct OtlpState {
    /// The `source="otlp"` ingest counters and the skip counters.
    pub metrics: OtlpMetrics,
    /// Which attributes name group, shard, key and cache.
    pub mapping: Arc<Mapping>,
    /// The last point of each cumulative metric series. Behind a lock: metric exports come
    /// every few seconds per client, not per request, and must see each other's points.
    pub cumulative: Arc<Mutex<Cumulative>>,
}

impl OtlpState {
    /// The state for `mapping`, counting in `metrics`. Cumulative series that started before
    /// now only set baselines.
    pub fn new(mapping: &Mapping, metrics: OtlpMetrics) -> OtlpState {
        let started_ns = (crate::clock::wall_now() * 1e9) as u64;
        OtlpState {
            metrics,
            mapping: Arc::new(mapping.clone()),
            cumulative: Arc::new(Mutex::new(Cumulative::new(
                mapping.max_cumulative_series,
                started_ns,
            ))),
        }
    }
}

/// The two OTLP signals taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Traces,
    Metrics,
}

/// The body encodings of OTLP/HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// A plain-text refusal before the body is decoded: status and message.
type Refusal = (StatusCode, String);

/// `google.rpc.Status` codes used in answers.
const INVALID_ARGUMENT: i32 = 3;
const UNAVAILABLE: i32 = 14;

/// `POST /v1/traces`.
pub async fn traces(State(s): State<IngestState>, headers: HeaderMap, body: Body) -> Response {
    export(s, headers, body, Signal::Traces).await
}

/// `POST /v1/metrics`.
pub async fn metrics(State(s): State<IngestState>, headers: HeaderMap, body: Body) -> Response {
    export(s, headers, body, Signal::Metrics).await
}

async fn export(s: IngestState, headers: HeaderMap, body: Body, signal: Signal) -> Response {
    let encoding = match encoding_of(&headers) {
        Ok(e) => e,
        Err(refusal) => return refusal.into_response(),
    };
    let gzip = match gzipped(&headers) {
        Ok(g) => g,
        Err(refusal) => return refusal.into_response(),
    };
    let Ok(_permit) = s.permits.clone().acquire_owned().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let body = match read_decompressed(body, gzip, s.body_limit).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let otlp = &s.otlp;
    let mut batch = Batch::with_capacity(body.len() / 160 + 1);
    let decoded = decode(otlp, signal, encoding, &body, &mut batch);
    let outcome = match decoded {
        Ok(o) => o,
        Err(e) => {
            let mut r = Rejections::default();
            r.add(RejectReason::Malformed);
            otlp.metrics.source.add_rejections(&r);
            return status(
                StatusCode::BAD_REQUEST,
                encoding,
                INVALID_ARGUMENT,
                &e.to_string(),
            );
        }
    };
    if outcome.accepted == 0 && outcome.rejected.total() > 0 {
        otlp.metrics.source.add_rejections(&outcome.rejected);
        otlp.metrics.add_skips(&outcome.skipped);
        let msg = outcome
            .first_error
            .as_deref()
            .unwrap_or("every item was rejected");
        return status(StatusCode::BAD_REQUEST, encoding, INVALID_ARGUMENT, msg);
    }
    if !batch.is_empty()
        && let Err(e) = s.queue.submit_whole(&otlp.metrics.source, batch)
    {
        // Nothing of this body was taken or counted: the exporter retries it whole on 503,
        // and its rejected and skipped items are counted when a retry is taken.
        let mut resp = status(
            StatusCode::SERVICE_UNAVAILABLE,
            encoding,
            UNAVAILABLE,
            &e.to_string(),
        );
        if e == QueueError::Full {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        return resp;
    }
    otlp.metrics.source.add_rejections(&outcome.rejected);
    otlp.metrics.add_skips(&outcome.skipped);
    success(signal, encoding, &outcome)
}

/// Reads the body and decompresses it when it is gzip; `Err` is the 413 or 400 answer.
async fn read_decompressed(body: Body, gzip: bool, limit: usize) -> Result<Bytes, Response> {
    let raw = read_body(body, limit).await?;
    if gzip {
        gunzip(&raw, limit)
            .map(Bytes::from)
            .map_err(IntoResponse::into_response)
    } else {
        Ok(raw)
    }
}

/// Decodes and maps one body into `batch`.
fn decode(
    otlp: &OtlpState,
    signal: Signal,
    encoding: Encoding,
    body: &[u8],
    batch: &mut Batch,
) -> Result<OtlpOutcome, traces::DecodeError> {
    let m = &otlp.mapping;
    match (signal, encoding) {
        (Signal::Traces, Encoding::Protobuf) => traces::decode_protobuf(body, m, batch),
        (Signal::Traces, Encoding::Json) => traces::decode_json(body, m, batch),
        (Signal::Metrics, _) => {
            let mut c = otlp.cumulative.lock().unwrap_or_else(|p| p.into_inner());
            match encoding {
                Encoding::Protobuf => metrics::decode_protobuf(body, m, &mut c, batch),
                Encoding::Json => metrics::decode_json(body, m, &mut c, batch),
            }
        }
    }
}

/// The encoding the `Content-Type` names; 415 for the NDJSON types the guard also lets pass.
fn encoding_of(headers: &HeaderMap) -> Result<Encoding, Refusal> {
    match media_type(headers).as_deref() {
        Some("application/x-protobuf" | "application/protobuf") => Ok(Encoding::Protobuf),
        Some("application/json") => Ok(Encoding::Json),
        _ => Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "OTLP/HTTP takes Content-Type: application/x-protobuf or application/json\n".into(),
        )),
    }
}

/// Whether the body is gzip-compressed; 415 for any other content coding.
fn gzipped(headers: &HeaderMap) -> Result<bool, Refusal> {
    match headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("identity" | "") => Ok(false),
        Some("gzip") => Ok(true),
        Some(other) => Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Encoding {other} is not supported; send gzip or no encoding\n"),
        )),
    }
}

/// Decompresses a gzip body, at most `limit` bytes of output: more is 413, as a body over the
/// limit would be, and a broken stream is 400.
fn gunzip(body: &[u8], limit: usize) -> Result<Vec<u8>, Refusal> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let mut reader = flate2::read::MultiGzDecoder::new(body).take(limit as u64 + 1);
    if let Err(e) = reader.read_to_end(&mut out) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("the gzip body cannot be decompressed: {e}\n"),
        ));
    }
    if out.len() > limit {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the decompressed body is larger than limits.http_body_limit_bytes ({limit} bytes)\n"
            ),
        ));
    }
    Ok(out)
}

/// An error answer as a `google.rpc.Status` (code 1, message 2) in the request's encoding.
fn status(code: StatusCode, encoding: Encoding, rpc_code: i32, message: &str) -> Response {
    let body = match encoding {
        Encoding::Protobuf => {
            let mut buf = Vec::with_capacity(message.len() + 8);
            prost::encoding::int32::encode(1, &rpc_code, &mut buf);
            prost::encoding::string::encode(2, &message.to_owned(), &mut buf);
            buf
        }
        Encoding::Json => {
            serde_json::to_vec(&serde_json::json!({"code": rpc_code, "message": message}))
                .expect("a JSON object serializes")
        }
    };
    (
        code,
        [(header::CONTENT_TYPE, encoding.content_type())],
        body,
    )
        .into_response()
}

/// The 200 answer: an empty `Export*ServiceResponse`, or one with `partial_success`.
fn success(signal: Signal, encoding: Encoding, outcome: &OtlpOutcome) -> Response {
    let rejected = i64::try_from(outcome.rejected.total()).unwrap_or(i64::MAX);
    let message = outcome.first_error.clone().unwrap_or_default();
    let body = match signal {
        // serde would write `{"partialSuccess":null}`; OTLP/JSON leaves unset fields out.
        _ if rejected == 0 && encoding == Encoding::Json => b"{}".to_vec(),
        Signal::Traces => encode(
            encoding,
            &ExportTraceServiceResponse {
                partial_success: (rejected > 0).then_some(ExportTracePartialSuccess {
                    rejected_spans: rejected,
                    error_message: message,
                }),
            },
        ),
        Signal::Metrics => encode(
            encoding,
            &ExportMetricsServiceResponse {
                partial_success: (rejected > 0).then_some(ExportMetricsPartialSuccess {
                    rejected_data_points: rejected,
                    error_message: message,
                }),
            },
        ),
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, encoding.content_type())],
        body,
    )
        .into_response()
}

fn encode<M: Message + serde::Serialize>(encoding: Encoding, m: &M) -> Vec<u8> {
    match encoding {
        Encoding::Protobuf => m.encode_to_vec(),
        Encoding::Json => serde_json::to_vec(m).expect("a response serializes"),
    }
}
