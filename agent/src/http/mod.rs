//! The HTTP listener: `/metrics`, `/healthz`, `/readyz`, `/api/v1/status`,
//! `/api/v1/alerts`, `/api/v1/history`, the live view at `/`, `POST /api/v1/observations`,
//! `POST /v1/traces`, `POST /v1/metrics` and `POST /-/reload`.
//!
//! - [`server`]: the accept loop, its connection limit and timeouts, and the bounded shutdown
//!   of connections.
//! - [`guard`]: what every request passes first: the whole-request timeout, the bearer token
//!   (checked before any body is read) and the content type of POST bodies.
//! - [`ingest`]: `POST /api/v1/observations`.
//! - [`otlp`]: the OTLP/HTTP receiver, `POST /v1/traces` and `POST /v1/metrics`.
//! - [`status`]: the bounded `GET /api/v1/status`.
//! - [`history`]: the bounded `GET /api/v1/history`, from the history ring.
//! - [`ui`]: the live view, `GET /` and its script and style sheet, embedded in the binary.
//! - [`admin`]: `POST /-/reload`.
//! - [`client`]: a minimal blocking HTTP/1.1 client, for `skewwatch bench`, the demo and the
//!   end-to-end tests.
//!
//! Read endpoints render the latest immutable snapshot (and `/api/v1/alerts` the latest active
//! alerts) in the HTTP task that asks, never on the pipeline task.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus::Registry;
use serde::Serialize;
use skewwatch_detectors::alert::{Alert, AlertState, Labels};
use skewwatch_detectors::snapshot::WindowSnapshot;
use tokio::sync::{Semaphore, watch};

use crate::clock::rfc3339;
use crate::config::Secret;
use crate::exposition;
use crate::exposition::totals::Totals;
use crate::history::History;
use crate::ingest::IngestQueue;
use crate::pipeline::Heartbeat;
use crate::telemetry::SourceMetrics;

pub mod admin;
pub mod client;
pub mod guard;
pub mod history;
pub mod ingest;
pub mod otlp;
pub mod server;
pub mod status;
pub mod ui;

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
    /// The live view's history ring after the latest window.
    pub history: watch::Receiver<Arc<History>>,
    /// Where ingested batches go.
    pub queue: IngestQueue,
    /// Bearer token required for ingest and admin endpoints, if any; replaced on reload.
    pub token: watch::Receiver<Option<Secret>>,
    /// True once every listener is bound, false again once shutdown starts.
    pub ready: Arc<AtomicBool>,
    /// When the pipeline last closed a window.
    pub heartbeat: Heartbeat,
    /// Ingest bodies read and parsed at once.
    pub ingest_permits: Arc<Semaphore>,
    /// Largest request body.
    pub body_limit: usize,
    /// Where `POST /-/reload` sends its request.
    pub reload: admin::ReloadRequests,
    /// Top keys exported per group.
    pub exported_keys: usize,
    /// Window length, reported by the status endpoint.
    pub window_secs: f64,
    /// The OTLP receiver's mapping, counters and cumulative-series map.
    pub otlp: otlp::OtlpState,
}

/// The routes of a connection within the limit: everything, behind the guards.
pub fn router(state: AppState, request_timeout: std::time::Duration) -> Router {
    let guarded = Router::new()
        .route("/api/v1/observations", post(ingest::observations))
        .route("/v1/traces", post(otlp::traces))
        .route("/v1/metrics", post(otlp::metrics))
        .route("/-/reload", post(admin::reload))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_token,
        ))
        .route_layer(middleware::from_fn(guard::require_json_body));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/status", get(status::status))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/history", get(history::history))
        .merge(ui::routes())
        .merge(guarded)
        .merge(health_routes())
        .layer(middleware::from_fn_with_state(
            request_timeout,
            guard::request_timeout,
        ))
        .with_state(state)
}

/// The routes of a connection past the limit: the health endpoints, and 503 for the rest.
pub fn health_router(state: AppState) -> Router {
    health_routes()
        .fallback(|| async {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONNECTION, "close")],
                "too many connections; only health checks are answered\n",
            )
        })
        .with_state(state)
}

fn health_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/-/healthy", get(healthz))
        .route("/readyz", get(readyz))
        .route("/-/ready", get(readyz))
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

/// Ready while the listeners are up and the pipeline keeps closing windows: one that has not
/// closed a window for [`Heartbeat::STALE_WINDOWS`] windows is stuck, and a stuck agent should
/// be taken out of service.
async fn readyz(State(s): State<AppState>) -> Response {
    if !s.ready.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response();
    }
    match s.heartbeat.stale() {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(since) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the pipeline has not closed a window for {:.1} s\n",
                since.as_secs_f64()
            ),
        )
            .into_response(),
    }
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
}
