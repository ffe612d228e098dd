//! Alert delivery to a real Alertmanager (Debian `prometheus-alertmanager`, 0.25): the live
//! agent detects an error surge fed over UDP, the alert shows up in Alertmanager's
//! `GET /api/v2/alerts` with the right labels, and once the incident stops it resolves there
//! (gone from the active list) well before the `endsAt` a firing alert carries.
//!
//! Without the Alertmanager binary the test is skipped with a loud message, except under CI
//! (`CI` set), where a missing binary fails it.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use skewwatch_e2e::agent::{Agent, TempDir, http_request};
use skewwatch_e2e::traffic::Traffic;

/// Where Debian and upstream install Alertmanager.
const BINARIES: [&str; 2] = ["prometheus-alertmanager", "alertmanager"];

fn find_alertmanager() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| BINARIES.iter().map(move |b| dir.join(b)))
        .find(|p| p.is_file())
}

/// A port free right now (the small race until Alertmanager binds it is accepted).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` every 50 ms until it returns `Some` or `timeout` passes.
fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running Alertmanager, killed on drop.
struct Alertmanager {
    child: Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Alertmanager {
    fn start(bin: &PathBuf) -> Alertmanager {
        let dir = TempDir::new("alertmanager");
        let cfg = dir.0.join("alertmanager.yml");
        std::fs::write(
            &cfg,
            "route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n",
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut child = Command::new(bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.path={}", dir.0.join("data").display()))
            .arg("--cluster.listen-address=")
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start alertmanager");
        let stderr = child.stderr.take().unwrap();
        // Through eprintln!, so the test harness shows it only when the test fails.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[alertmanager] {line}");
            }
        });
        let am = Alertmanager {
            child,
            addr,
            _dir: dir,
        };
        let ready = poll(Duration::from_secs(30), || {
            TcpStream::connect(addr).ok()?;
            (http_request(addr, "GET", "/-/ready", &[], b"").0 == 200).then_some(())
        });
        assert!(
            ready.is_some(),
            "Alertmanager did not become ready on {addr}"
        );
        am
    }

    /// `GET /api/v2/alerts`: the alerts Alertmanager holds as active (unresolved).
    fn alerts(&self) -> Vec<Value> {
        let (code, body) = http_request(self.addr, "GET", "/api/v2/alerts", &[], b"");
        assert_eq!(code, 200, "{body}");
        match serde_json::from_str(&body).expect("alerts JSON") {
            Value::Array(a) => a,
            v => panic!("not an array: {v}"),
        }
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One-second windows, ErrorSurge tuned to fire one window into a surge once two healthy
/// windows taught it the baseline and to resolve at the first healthy window; the other
/// detectors off so nothing else fires.
fn agent_config(alerting: &str) -> String {
    format!(
        r#"
window:
  window_secs: 1
detectors:
  error_surge:
    min_requests: 20
    min_error_ratio: 0.05
    consecutive_windows: 1
    warmup_windows: 2
    alert: {{severity: critical, for_secs: 0, keep_firing_for_secs: 0}}
  hot_shard: {{alert: {{enabled: false}}}}
  hot_key: {{alert: {{enabled: false}}}}
  latency_skew: {{alert: {{enabled: false}}}}
  cache_hit_collapse: {{alert: {{enabled: false}}}}
  fast_failure_sink: {{alert: {{enabled: false}}}}
  capacity_headroom: {{alert: {{enabled: false}}}}
alerting:
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
    let Some(bin) = find_alertmanager() else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "the Alertmanager binary (prometheus-alertmanager) is missing; .ci/run installs it"
            );
        }
        // Straight to stderr, past the harness' capture, so a skip is seen without --nocapture.
        let _ = writeln!(
            std::io::stderr(),
            "\n\n!!! SKIPPED error_surge_fires_and_resolves_in_a_real_alertmanager: no \
             prometheus-alertmanager or alertmanager on PATH (apt-get install \
             prometheus-alertmanager) !!!\n"
        );
        return;
    };
    let am = Alertmanager::start(&bin);
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
