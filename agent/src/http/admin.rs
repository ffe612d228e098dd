//! `POST /-/reload`: re-read the configuration, as Prometheus' endpoint of that name does.
//! Token-protected like ingest. The reload itself happens in the agent's reload task; this
//! endpoint asks it and waits for the outcome: 200 with what changed, or 500 with every
//! problem (the previous configuration keeps running).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::sync::{mpsc, oneshot};

use super::ControlState;
use crate::config::ConfigError;
use crate::config::part::ReloadReport;

/// What a reload did (the paths applied and those that need a restart) or why it changed
/// nothing.
pub type ReloadOutcome = Result<ReloadReport, ConfigError>;

/// Where reload requests go: each carries the channel its outcome is sent back on.
pub type ReloadRequests = mpsc::Sender<oneshot::Sender<ReloadOutcome>>;

/// The handler.
pub async fn reload(State(s): State<ControlState>) -> Response {
    let (tx, rx) = oneshot::channel();
    if s.reload.send(tx).await.is_err() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the agent is shutting down\n",
        )
            .into_response();
    }
    match rx.await {
        Ok(Ok(report)) => (StatusCode::OK, format!("{report}\n")).into_response(),
        Ok(Err(problems)) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{problems}\n")).into_response()
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the agent is shutting down\n",
        )
            .into_response(),
    }
}
