//! Alert delivery to a real Alertmanager (Debian `prometheus-alertmanager`, 0.25): the live
//! agent detects an error surge fed over UDP, the alert shows up in Alertmanager's
//! `GET /api/v2/alerts` with the right labels, and once the incident stops it resolves there
//! (gone from the active list) well before the `endsAt` a firing alert carries.
//!
//! Without the Alertmanager binary the test is skipped with a loud message, except under CI
//! (`CI` set), where a missing binary fails it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use skewwatch_e2e::agent::{Agent, SURGE_DETECTORS};
use skewwatch_e2e::alertmanager::{Alertmanager, poll};
use skewwatch_e2e::traffic::Traffic;

/// One-second windows, ErrorSurge tuned to fire one window into a surge once two healthy
/// windows taught it the baseline and to resolve at the first healthy window; the other
/// detectors off so nothing else fires.
fn agent_config(alerting: &str) -> String {
    format!(
        r#"
window:
  window_secs: 1
{SURGE_DETECTORS}alerting:
{alerting}
"#
    )
}

/// Waits (polling) until three windows closed after the first one with `group`'s traffic, so
/// ErrorSurge's two-window baseline is warm.
fn warm_up(agent: &Agent, group: &str) {
    let windows = |a: &Agent| a.scrape().value("skewwatch_windows_closed_total", &[]);
    let first = agent.wait_for(Duration::from_secs(30), |a| {
        let s = a.scrape();
        s.get("skewwatch_requests_per_second", &[("group", group)])
            .is_some_and(|r| r > 0.0)
            .then(|| s.value("skewwatch_windows_closed_total", &[]))
    });
    let first = first.expect("no window with the group's traffic closed within 30 s");
    let warm = agent.wait_for(Duration::from_secs(30), |a| {
        (windows(a) >= first + 3.0).then_some(())
    });
    assert!(warm.is_some(), "windows stopped closing");
}

fn label<'a>(alert: &'a Value, name: &str) -> Option<&'a str> {
    alert["labels"][name].as_str()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn error_surge_fires_and_resolves_in_a_real_alertmanager() {
    let Some(am) = Alertmanager::start() else {
        return;
    };
    let agent = Agent::start(&agent_config(&format!(
        "  alertmanagers:\n    - url: \"http://{}\"\n      timeout_secs: 5\n",
        am.addr
    )));
    let group = "checkout-db";
    let traffic = Traffic::start(
        agent.statsd,
        &[group.to_string()],
        &["s1", "s2", "s3", "s4"],
    );
    warm_up(&agent, group);
    traffic.surge(true);
    let fired = poll(Duration::from_secs(30), || {
        am.alerts()
            .into_iter()
            .find(|a| label(a, "alertname") == Some("ErrorSurge"))
    })
    .expect("ErrorSurge did not reach Alertmanager within 30 s");
    assert_eq!(label(&fired, "group"), Some(group), "{fired}");
    assert_eq!(label(&fired, "severity"), Some("critical"), "{fired}");
    assert_eq!(fired["status"]["state"], "active", "{fired}");
    assert_eq!(
        fired["generatorURL"],
        format!("http://{}/api/v1/alerts", agent.http),
        "{fired}"
    );
    assert!(
        fired["annotations"]
            .as_object()
            .is_some_and(|a| !a.is_empty()),
        "annotations carry the figures: {fired}"
    );
    // A firing alert is valid for 4 x max(window, resend) = 240 s from when it was sent.
    let ends_at = fired["endsAt"].as_str().expect("endsAt").to_owned();
    let starts_at = fired["startsAt"].as_str().expect("startsAt").to_owned();
    assert!(ends_at > starts_at, "{fired}");

    // The agent shows the same alert on its own endpoints.
    let (code, body) = agent.request("GET", "/api/v1/alerts", &[], b"");
    assert_eq!(code, 200, "{body}");
    let own: Value = serde_json::from_str(&body).unwrap();
    assert!(
        own["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| label(a, "alertname") == Some("ErrorSurge") && a["state"] == "firing"),
        "{own}"
    );
    let firing = [
        ("alertname", "ErrorSurge"),
        ("group", group),
        ("severity", "critical"),
    ];
    assert_eq!(
        agent.scrape().get("skewwatch_alert_firing", &firing),
        Some(1.0)
    );

    // The incident ends: the resolve must reach Alertmanager long before endsAt would have
    // expired the alert by itself (240 s).
    traffic.surge(false);
    let stopped_at = unix_now();
    let resolved = poll(Duration::from_secs(30), || {
        (!am.alerts()
            .iter()
            .any(|a| label(a, "alertname") == Some("ErrorSurge")))
        .then_some(())
    });
    assert!(
        resolved.is_some(),
        "ErrorSurge still active in Alertmanager 30 s after the incident stopped: {:?}",
        am.alerts()
    );
    assert!(unix_now() - stopped_at < 60.0);
    let gone = agent.wait_for(Duration::from_secs(10), |a| {
        a.scrape()
            .get("skewwatch_alert_firing", &firing)
            .is_none()
            .then_some(())
    });
    assert!(
        gone.is_some(),
        "skewwatch_alert_firing still set after resolve"
    );

    let s = agent.scrape();
    let receiver = [("receiver", "alertmanager-0")];
    let ok = s.value(
        "skewwatch_alert_deliveries_total",
        &[receiver[0], ("result", "success")],
    );
    assert!(ok >= 2.0, "firing and resolved sends: {ok}");
    for reason in ["queue_full", "retries_exhausted", "expired", "rejected"] {
        assert_eq!(
            s.value(
                "skewwatch_alert_deliveries_dropped_total",
                &[receiver[0], ("reason", reason)]
            ),
            0.0,
            "{reason}"
        );
    }
    drop(traffic);
}

/// The names of the alerts `am` holds as active for `group`.
fn active_in(am: &Alertmanager, group: &str) -> Vec<String> {
    am.alerts()
        .iter()
        .filter(|a| label(a, "group") == Some(group))
        .filter_map(|a| label(a, "alertname").map(str::to_owned))
        .collect()
}

#[test]
fn with_one_of_two_alertmanagers_stopped_mid_incident_every_alert_and_resolve_reaches_the_other() {
    // An HA pair as Alertmanager documents it: the client sends every alert to every
    // instance (the instances gossip silences and notifications, not alerts).
    let (Some(survivor), Some(mut lost)) = (Alertmanager::start(), Alertmanager::start()) else {
        return;
    };
    let agent = Agent::start(&agent_config(&format!(
        "  resend_interval_secs: 2\n  backoff_initial_secs: 0.1\n  backoff_max_secs: 1\n  alertmanagers:\n    - url: \"http://{}\"\n      timeout_secs: 2\n    - url: \"http://{}\"\n      timeout_secs: 2\n",
        survivor.addr, lost.addr
    )));
    let (first, second) = ("orders-db", "ledger-db");
    let shards = ["s1", "s2", "s3", "s4"];
    let first_traffic = Traffic::start(agent.statsd, &[first.to_owned()], &shards);
    let second_traffic = Traffic::start(agent.statsd, &[second.to_owned()], &shards);
    warm_up(&agent, first);
    warm_up(&agent, second);

    // The incident starts while both listen: both hold the alert.
    first_traffic.surge(true);
    for am in [&survivor, &lost] {
        let held = poll(Duration::from_secs(30), || {
            active_in(am, first)
                .contains(&"ErrorSurge".to_owned())
                .then_some(())
        });
        assert!(
            held.is_some(),
            "ErrorSurge of {first} never reached {}",
            am.addr
        );
    }

    // One instance dies mid-incident; a second alert fires after it is gone.
    lost.stop();
    second_traffic.surge(true);
    let second_fired = poll(Duration::from_secs(30), || {
        active_in(&survivor, second)
            .contains(&"ErrorSurge".to_owned())
            .then_some(())
    });
    assert!(
        second_fired.is_some(),
        "the alert that fired after one instance died never reached the other: {:?}",
        survivor.alerts()
    );
    assert!(
        active_in(&survivor, first).contains(&"ErrorSurge".to_owned()),
        "the first alert left the surviving instance: {:?}",
        survivor.alerts()
    );

    // Both incidents end: the resolved notices reach the survivor, though its partner is
    // still down and its deliveries fail.
    first_traffic.surge(false);
    second_traffic.surge(false);
    let resolved = poll(Duration::from_secs(30), || {
        (active_in(&survivor, first).is_empty() && active_in(&survivor, second).is_empty())
            .then_some(())
    });
    assert!(
        resolved.is_some(),
        "the resolved notices never reached the surviving instance: {:?}",
        survivor.alerts()
    );
    let s = agent.scrape();
    let sent = |receiver: &str, result: &str| {
        s.value(
            "skewwatch_alert_deliveries_total",
            &[("receiver", receiver), ("result", result)],
        )
    };
    assert!(
        sent("alertmanager-0", "success") >= 3.0,
        "two firing alerts and their resolves went to the survivor"
    );
    assert!(
        sent("alertmanager-1", "success") >= 1.0,
        "the lost instance had the first alert before it died"
    );
    drop((first_traffic, second_traffic));
}
