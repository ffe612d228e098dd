//! `GET /api/v1/alerts`: the active alerts after the latest evaluation, shaped like
//! Prometheus' alerts API so tools that read one read both.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use skewwatch_detectors::alert::{Alert, AlertState, Labels};

use super::ViewState;
use crate::clock::rfc3339;

/// The answer.
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

/// The handler.
pub async fn alerts(State(v): State<ViewState>) -> Response {
    let alerts = v.alerts.borrow().clone();
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
