//! Alert delivery to a generic webhook: a local receiver that answers 500 for a while, then
//! 200. While it fails, the agent retries with capped backoff, however long the outage lasts;
//! once it is back, every alert group arrives in its current state, in Alertmanager's
//! version-4 webhook format, with an HMAC-SHA256 signature over the timestamp and the body,
//! and the resolves follow. A receiver that redirects is not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use skewwatch_e2e::agent::{Agent, SURGE_DETECTORS};
use skewwatch_e2e::traffic::Traffic;

const SECRET: &str = "e2e-webhook-secret";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// A webhook receiver on loopback: answers 500 while `failing`, else 200, and records every
/// request either way.
struct Receiver {
    addr: SocketAddr,
    failing: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<Received>>>,
    refused: Arc<AtomicUsize>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let failing = Arc::new(AtomicBool::new(true));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(AtomicUsize::new(0));
        let (f, r, n) = (failing.clone(), requests.clone(), refused.clone());
        // Lives until the test process ends; it only ever answers loopback requests.
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let Some(req) = read_request(&mut conn) else {
                    continue;
                };
                let fail = f.load(Ordering::SeqCst);
                if fail {
                    n.fetch_add(1, Ordering::SeqCst);
                }
                r.lock().unwrap().push(req);
                let status = if fail {
                    "500 Internal Server Error"
                } else {
                    "200 OK"
                };
                let _ = conn.write_all(
                    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
            }
        });
        Receiver {
            addr,
            failing,
            requests,
            refused,
        }
    }

    /// Successful deliveries: requests answered 200, parsed.
    fn delivered(&self) -> Vec<(Received, Value)> {
        let all = self.requests.lock().unwrap().clone();
        let refused = self.refused.load(Ordering::SeqCst);
        // Requests are recorded in order and the receiver only ever switches from failing to
        // healthy, so the first `refused` got 500.
        all.into_iter()
            .skip(refused)
            .map(|r| {
                let v = serde_json::from_slice(&r.body).expect("webhook body is JSON");
                (r, v)
            })
            .collect()
    }
}

fn read_request(conn: &mut std::net::TcpStream) -> Option<Received> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
    }
    let len: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        path,
        headers,
        body,
    })
}

const GROUPS: usize = 5;

fn config(receiver: SocketAddr) -> String {
    config_with(receiver, 16, 0.05, 0.2)
}

fn config_with(receiver: SocketAddr, capacity: usize, backoff: f64, backoff_max: f64) -> String {
    format!(
        r#"
window:
  window_secs: 1
{SURGE_DETECTORS}alerting:
  webhooks:
    - name: hook
      url: "http://{receiver}/hooks/skewwatch"
      hmac_secret_env: SKEWWATCH_E2E_HOOK_SECRET
      timeout_secs: 5
  queue_capacity: {capacity}
  max_retries: 1
  backoff_initial_secs: {backoff}
  backoff_max_secs: {backoff_max}
"#
    )
}

/// The verification recipe of docs/alerting.md: HMAC-SHA256 over `<timestamp>.<body>`, and a
/// timestamp within five minutes of now.
fn signature_ok(r: &Received) -> bool {
    let Some(ts) = r.headers.get("x-skewwatch-timestamp") else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    if ts.parse::<f64>().map_or(true, |t| (now - t).abs() > 300.0) {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    r.headers.get("x-skewwatch-signature") == Some(&format!("sha256={want}"))
}

/// Waits (polling) until three windows closed after the first one with every group's traffic,
/// so ErrorSurge's two-window baselines are warm.
fn warm_up(agent: &Agent, groups: &[String]) {
    let first = agent
        .wait_for(Duration::from_secs(30), |a| {
            let s = a.scrape();
            groups
                .iter()
                .all(|g| {
                    s.get("skewwatch_requests_per_second", &[("group", g)])
                        .is_some()
                })
                .then(|| s.value("skewwatch_windows_closed_total", &[]))
        })
        .expect("no window with traffic closed within 30 s");
    let warm = agent.wait_for(Duration::from_secs(30), |a| {
        (a.scrape().value("skewwatch_windows_closed_total", &[]) >= first + 3.0).then_some(())
    });
    assert!(warm.is_some(), "windows stopped closing");
}

/// Reads the delivery self-metrics of receiver `hook`.
fn hook_metric(agent: &Agent, name: &str, extra: &[(&str, &str)]) -> f64 {
    let mut labels = vec![("receiver", "hook")];
    labels.extend_from_slice(extra);
    agent.scrape().value(name, &labels)
}

#[test]
fn a_webhook_down_while_alerts_fire_ends_in_the_right_state_once_it_is_back() {
    let receiver = Receiver::start();
    let agent = Agent::start_with_env(
        &config(receiver.addr),
        &[("SKEWWATCH_E2E_HOOK_SECRET", SECRET)],
    );
    let groups: Vec<String> = (0..GROUPS).map(|i| format!("db-{i}")).collect();
    let traffic = Traffic::start(agent.statsd, &groups, &["s1", "s2"]);

    warm_up(&agent, &groups);

    // Every group surges while the receiver fails. With `max_retries: 1` a notification used
    // to be dropped after its second failure; now the state is owed until it gets through.
    traffic.surge(true);
    let owed = agent.wait_for(Duration::from_secs(30), |a| {
        let queue = hook_metric(a, "skewwatch_alert_delivery_queue_length", &[]);
        let failures = hook_metric(
            a,
            "skewwatch_alert_deliveries_total",
            &[("result", "failure")],
        );
        (queue == GROUPS as f64 && failures >= 4.0 * GROUPS as f64).then_some(())
    });
    assert!(owed.is_some(), "the groups were not owed and retried");
    assert!(receiver.delivered().is_empty());

    // The receiver comes back: every group arrives, firing, signed, in the v4 format.
    receiver.failing.store(false, Ordering::SeqCst);
    let firing = agent
        .wait_for(Duration::from_secs(20), |_| {
            let d = receiver.delivered();
            let groups: BTreeSet<String> = d
                .iter()
                .filter(|(_, m)| m["status"] == "firing")
                .map(|(_, m)| {
                    m["alerts"][0]["labels"]["group"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned()
                })
                .collect();
            (groups.len() == GROUPS).then_some(d)
        })
        .expect("not every group arrived once the receiver was back");
    let mut ids = BTreeSet::new();
    for (req, msg) in &firing {
        assert_eq!(req.path, "/hooks/skewwatch");
        assert_eq!(
            req.headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        assert!(signature_ok(req), "bad signature: {:?}", req.headers);
        ids.insert(
            req.headers
                .get("x-skewwatch-delivery")
                .cloned()
                .unwrap_or_default(),
        );
        assert_eq!(msg["version"], "4", "{msg}");
        assert_eq!(msg["status"], "firing", "{msg}");
        assert_eq!(msg["receiver"], "hook", "{msg}");
        assert_eq!(msg["truncatedAlerts"], 0, "{msg}");
        assert_eq!(
            msg["externalURL"],
            format!("http://{}/api/v1/alerts", agent.http)
        );
        assert_eq!(msg["groupLabels"]["alertname"], "ErrorSurge", "{msg}");
        let alerts = msg["alerts"].as_array().unwrap();
        assert_eq!(alerts.len(), 1, "{msg}");
        let a = &alerts[0];
        assert_eq!(a["status"], "firing");
        assert_eq!(a["labels"]["alertname"], "ErrorSurge");
        assert_eq!(a["labels"]["severity"], "critical");
        assert_eq!(a["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(a["fingerprint"].as_str().map(str::len), Some(16));
        assert!(a["startsAt"].as_str().is_some_and(|s| s.ends_with('Z')));
    }
    assert!(ids.iter().all(|id| !id.is_empty()), "{ids:?}");

    // The incident ends: every group's resolve follows.
    traffic.surge(false);
    let resolved = agent
        .wait_for(Duration::from_secs(20), |_| {
            let r: Vec<(Received, Value)> = receiver
                .delivered()
                .into_iter()
                .filter(|(_, m)| m["status"] == "resolved")
                .collect();
            (r.len() >= GROUPS).then_some(r)
        })
        .expect("not every resolve arrived");
    for (req, msg) in &resolved {
        assert!(signature_ok(req));
        let a = &msg["alerts"][0];
        assert_eq!(a["status"], "resolved");
        assert_ne!(a["endsAt"], "0001-01-01T00:00:00Z");
        assert!(a["endsAt"].as_str() > a["startsAt"].as_str(), "{a}");
    }

    let drained = agent.wait_for(Duration::from_secs(10), |a| {
        (hook_metric(a, "skewwatch_alert_delivery_queue_length", &[]) == 0.0).then_some(())
    });
    assert!(drained.is_some(), "the owed states did not drain");
    for reason in ["queue_full", "retries_exhausted", "expired", "rejected"] {
        assert_eq!(
            hook_metric(
                &agent,
                "skewwatch_alert_deliveries_dropped_total",
                &[("reason", reason)]
            ),
            0.0,
            "{reason}"
        );
    }
    drop(traffic);
}

#[test]
fn a_redirect_is_not_followed() {
    // The "receiver" redirects to a second listener that must never see a request.
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    target.set_nonblocking(true).unwrap();
    let redirector = TcpListener::bind("127.0.0.1:0").unwrap();
    let (r_addr, t_addr) = (
        redirector.local_addr().unwrap(),
        target.local_addr().unwrap(),
    );
    std::thread::spawn(move || {
        for conn in redirector.incoming() {
            let Ok(mut conn) = conn else { continue };
            if read_request(&mut conn).is_some() {
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{t_addr}/x\r\n\
                         Content-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                );
            }
        }
    });
    let agent = Agent::start_with_env(
        &config_with(r_addr, 16, 0.05, 0.2),
        &[("SKEWWATCH_E2E_HOOK_SECRET", SECRET)],
    );
    let groups = vec!["orders-db".to_owned()];
    let traffic = Traffic::start(agent.statsd, &groups, &["s1", "s2"]);
    warm_up(&agent, &groups);
    traffic.surge(true);
    let failed = agent.wait_for(Duration::from_secs(30), |a| {
        (hook_metric(
            a,
            "skewwatch_alert_deliveries_total",
            &[("result", "failure")],
        ) >= 2.0)
            .then_some(())
    });
    assert!(
        failed.is_some(),
        "no failed delivery to the redirecting receiver"
    );
    assert!(target.accept().is_err(), "the redirect was followed");
    drop(traffic);
}

#[test]
fn owed_notifications_are_delivered_on_shutdown() {
    let receiver = Receiver::start();
    // A 60 s backoff: after the first failure no retry comes before the test stops the agent,
    // so only the shutdown flush can deliver.
    let mut agent = Agent::start_with_env(
        &config_with(receiver.addr, 16, 60.0, 60.0),
        &[("SKEWWATCH_E2E_HOOK_SECRET", SECRET)],
    );
    let groups = vec!["orders-db".to_owned()];
    let traffic = Traffic::start(agent.statsd, &groups, &["s1", "s2"]);
    warm_up(&agent, &groups);
    traffic.surge(true);
    let owed = agent.wait_for(Duration::from_secs(30), |a| {
        let failed = hook_metric(
            a,
            "skewwatch_alert_deliveries_total",
            &[("result", "failure")],
        );
        let queued = hook_metric(a, "skewwatch_alert_delivery_queue_length", &[]);
        (failed >= 1.0 && queued >= 1.0).then_some(())
    });
    assert!(
        owed.is_some(),
        "no notification waiting after a failed delivery"
    );
    drop(traffic);

    receiver.failing.store(false, Ordering::SeqCst);
    let status = agent.stop();
    assert!(status.success(), "{status}");
    // The agent has exited: what it delivered, it delivered while shutting down.
    let delivered = receiver.delivered();
    assert!(!delivered.is_empty(), "nothing delivered on shutdown");
    let (req, msg) = &delivered[0];
    assert!(signature_ok(req));
    assert_eq!(msg["status"], "firing", "{msg}");
    assert_eq!(msg["alerts"][0]["labels"]["group"], "orders-db", "{msg}");
}
