//! The HTTP listener: `/metrics`, `/healthz`, `/readyz`, `/api/v1/status`,
//! `/api/v1/alerts` and `POST /api/v1/observations`.
//!
//! - [`server`]: the accept loop and the bounded shutdown of connections.
//! - [`client`]: a minimal blocking HTTP/1.1 client, for `skewwatch bench`, the demo and the
//!   end-to-end tests.
//!
//! Read endpoints render the latest immutable snapshot (and `/api/v1/alerts` the latest active
//! alerts); the ingest endpoint parses the body,
//! hands one batch to the pipeline and answers with accepted and rejected counts. Bodies over
//! the configured limit get 413; a full ingest queue gets 503 with `Retry-After`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus::Registry;
use serde::Serialize;
use skewwatch_detectors::alert::{Alert, AlertState, Labels};
use skewwatch_detectors::observation::Batch;
use skewwatch_detectors::snapshot::WindowSnapshot;
use tokio::sync::{mpsc, watch};

use crate::clock::rfc3339;
use crate::config::Secret;
use crate::exposition;
use crate::exposition::totals::Totals;
use crate::ingest::{self, QueueError, ndjson};
use crate::telemetry::SourceMetrics;

pub mod client;
pub mod server;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Self-metrics registry.
    pub registry: Registry,
    /// The HTTP source's ingest counters.
    pub ingest_metrics: SourceMetrics,
    /// Latest closed window.
    pub snapshots: watch::Receiver<Arc<WindowSnapshot>>,
    /// Active alerts after the latest evaluation.
    pub alerts: watch::Receiver<Arc<Vec<Alert>>>,
    /// The cumulative counters after the latest window.
    pub totals: watch::Receiver<Arc<Totals>>,
    /// Where ingested batches go.
    pub batches: mpsc::Sender<Batch>,
    /// Bearer token required for ingest, if any.
    pub token: Option<Secret>,
    /// True once every listener is bound.
    pub ready: Arc<AtomicBool>,
    /// Top keys exported per group.
    pub exported_keys: usize,
    /// Window length, reported by the status endpoint.
    pub window_secs: f64,
}

/// Builds the router with the body limit applied.
pub fn router(state: AppState, body_limit: usize) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/status", get(status))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/observations", post(observations))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

async fn metrics(State(s): State<AppState>) -> Response {
    let snap = s.snapshots.borrow().clone();
    let alerts = s.alerts.borrow().clone();
    let totals = s.totals.borrow().clone();
    let mut body = exposition::render(&s.registry, &snap, &alerts, s.exported_keys);
    exposition::totals::render(&mut body, &totals);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(exposition::CONTENT_TYPE),
        )],
        body,
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<AppState>) -> Response {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

#[derive(Serialize)]
struct Status<'a> {
    version: &'static str,
    window_secs: f64,
    window: &'a WindowSnapshot,
}

async fn status(State(s): State<AppState>) -> Response {
    let snap = s.snapshots.borrow().clone();
    axum::Json(Status {
        version: env!("CARGO_PKG_VERSION"),
        window_secs: s.window_secs,
        window: &snap,
    })
    .into_response()
}

/// `GET /api/v1/alerts`, shaped like Prometheus' alerts API so tools that read one read both.
#[derive(Serialize)]
struct AlertsReply<'a> {
    status: &'static str,
    data: AlertsData<'a>,
}

#[derive(Serialize)]
struct AlertsData<'a> {
    alerts: Vec<ActiveAlert<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ActiveAlert<'a> {
    labels: &'a Labels,
    annotations: &'a Labels,
    state: AlertState,
    active_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fired_at: Option<String>,
}

fn alerts_reply(alerts: &[Alert]) -> AlertsReply<'_> {
    AlertsReply {
        status: "success",
        data: AlertsData {
            alerts: alerts
                .iter()
                .map(|a| ActiveAlert {
                    labels: &a.labels,
                    annotations: &a.annotations,
                    state: a.state,
                    active_at: rfc3339(a.active_at),
                    fired_at: a.fired_at.map(rfc3339),
                })
                .collect(),
        },
    }
}

async fn alerts(State(s): State<AppState>) -> Response {
    let alerts = s.alerts.borrow().clone();
    axum::Json(alerts_reply(&alerts)).into_response()
}

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

fn authorized(token: Option<&Secret>, headers: &HeaderMap) -> bool {
    let Some(token) = token else { return true };
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    token.matches(given.trim().as_bytes())
}

async fn observations(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(s.token.as_ref(), &headers) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid bearer token is required\n",
        )
            .into_response();
    }
    let mut batch = Batch::with_capacity(body.len() / 64 + 1);
    let outcome = ndjson::parse_body(&body, &mut batch);
    s.ingest_metrics.add_rejections(&outcome.rejected);
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
    let mut code = if outcome.accepted == 0 && reply.rejected > 0 {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    if !batch.is_empty()
        && let Err(e) = ingest::submit(&s.batches, &s.ingest_metrics, batch)
    {
        // Nothing of this body was taken: the client may retry it whole.
        reply.accepted = 0;
        reply.error = Some(e.to_string());
        code = StatusCode::SERVICE_UNAVAILABLE;
        let mut resp = (code, axum::Json(reply)).into_response();
        if e == QueueError::Full {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        return resp;
    }
    (code, axum::Json(reply)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_reply_lists_state_and_times() {
        let labels: Labels = [("alertname".to_owned(), "HotShard".to_owned())].into();
        let alerts = [
            Alert {
                labels: labels.clone(),
                annotations: Labels::new(),
                state: AlertState::Firing,
                active_at: 1_714_564_790.0,
                fired_at: Some(1_714_564_800.0),
                last_true_at: 1_714_564_800.0,
            },
            Alert {
                labels,
                annotations: Labels::new(),
                state: AlertState::Pending,
                active_at: 1_714_564_800.0,
                fired_at: None,
                last_true_at: 1_714_564_800.0,
            },
        ];
        let v = serde_json::to_value(alerts_reply(&alerts)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"status": "success", "data": {"alerts": [
                {"labels": {"alertname": "HotShard"}, "annotations": {}, "state": "firing",
                 "activeAt": "2024-05-01T11:59:50Z", "firedAt": "2024-05-01T12:00:00Z"},
                {"labels": {"alertname": "HotShard"}, "annotations": {}, "state": "pending",
                 "activeAt": "2024-05-01T12:00:00Z"}
            ]}})
        );
    }

    #[test]
    fn bearer_token_must_match_exactly() {
        let mut h = HeaderMap::new();
        let token = Secret::new(b"s3cret");
        let token = Some(&token);
        assert!(authorized(None, &h));
        assert!(!authorized(token, &h));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cre"),
        );
        assert!(!authorized(token, &h));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert!(authorized(token, &h));
    }
}
