//! The fleet input (`fleet:`) on a real Prometheus: three sidecars, their counters summed by
//! Prometheus, and a fleet instance that reads the sums and judges the whole fleet.
//!
//! - `a_fleet_instance_counts_what_the_sidecars_counted_and_names_the_hot_shard`: the sidecars
//!   get one post a second, in the middle of each of their 1 s windows, so every sidecar window
//!   holds a known count and every 4 s fleet window four of them. The fleet instance starts
//!   after 40 s of traffic and learns its baselines from Prometheus' history (its `/readyz`
//!   says so); then one sidecar restarts (a counter reset) and another is removed, and neither
//!   makes a window count more than the fleet sent; then one shard takes 3x on every sidecar
//!   and the fleet's `HotShard` fires with `scope="fleet"`.
//! - `a_class_that_first_appears_on_fleet_profile_sidecars_is_counted_whole`: sidecars on
//!   `exposition.profile: fleet` write no outcome series before its first increment; timeouts
//!   that begin mid-run reach the fleet instance whole, the increment each series is born
//!   with included.
//! - `a_tsdb_that_fails_is_counted_never_judged`: a fake API that answers errors, partial
//!   answers, oversized answers and nothing at all; every failure is counted by reason, the
//!   windows are skipped, `/readyz` turns 503, and the credentials reach the API but never the
//!   log.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use skewwatch::client;
use skewwatch_e2e::agent::{Agent, Options, TempDir};
use skewwatch_e2e::alertmanager::Alertmanager;
use skewwatch_e2e::prometheus::Prometheus;

const SHARDS: usize = 16;
const HOT: usize = 5;
/// Requests per shard per sidecar per post (one post a second).
const PER_SHARD: u64 = 10;
const FLEET_WINDOW: f64 = 4.0;

const SIDECAR_CONFIG: &str = "window:\n  window_secs: 1\n";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The load: one NDJSON post a second to every active sidecar, at the middle of the second.
struct Driver {
    /// Sidecar addresses; `None` while a sidecar is down or removed.
    targets: Mutex<Vec<Option<SocketAddr>>>,
    /// The hot shard's multiplier (1 = even).
    hot: AtomicU64,
    /// Timeouts of shard `s0` per post, beside the rest (0 = none).
    timeouts: AtomicU64,
    /// Timeouts accepted by the sidecars.
    timeouts_sent: AtomicU64,
    /// Requests accepted by the sidecars.
    sent: AtomicU64,
    stop: AtomicBool,
}

impl Driver {
    fn body(hot: u64, timeouts: u64) -> String {
        let mut lines = Vec::new();
        if timeouts > 0 {
            lines.push(format!(
                r#"{{"group":"db","shard":"s0","count":{timeouts},"latency_ms":900,"cache":"miss","outcome":"timeout"}}"#
            ));
        }
        for s in 0..SHARDS {
            let n = PER_SHARD * if s == HOT { hot } else { 1 };
            // Four keys over the shards; a hot shard's traffic all carries the empty key.
            let key = if s == HOT && hot > 1 {
                String::new()
            } else {
                format!("user:{}", s % 4)
            };
            // 80% cache hits at 2 ms, 20% misses at 30 ms, one in ten of those an error.
            let hits = n * 8 / 10;
            lines.push(format!(
                r#"{{"group":"db","shard":"s{s}","key":"{key}","count":{hits},"latency_ms":2,"cache":"hit"}}"#
            ));
            lines.push(format!(
                r#"{{"group":"db","shard":"s{s}","key":"{key}","count":{},"latency_ms":30,"cache":"miss"}}"#,
                n - hits - 1
            ));
            lines.push(format!(
                r#"{{"group":"db","shard":"s{s}","key":"{key}","count":1,"latency_ms":30,"cache":"miss","outcome":"error"}}"#
            ));
        }
        lines.join("\n")
    }

    fn run(self: Arc<Self>) {
        while !self.stop.load(Ordering::Relaxed) {
            // Sleep to the middle of the next second: each 1 s sidecar window gets one post.
            let now = unix_now();
            let next = now.floor() + 1.5;
            std::thread::sleep(Duration::from_secs_f64(next - now));
            let timeouts = self.timeouts.load(Ordering::Relaxed);
            let body = Driver::body(self.hot.load(Ordering::Relaxed), timeouts);
            let per_post = (SHARDS as u64 - 1) * PER_SHARD
                + PER_SHARD * self.hot.load(Ordering::Relaxed)
                + timeouts;
            let targets = self.targets.lock().unwrap().clone();
            for addr in targets.into_iter().flatten() {
                if post(addr, &body) {
                    self.sent.fetch_add(per_post, Ordering::Relaxed);
                    self.timeouts_sent.fetch_add(timeouts, Ordering::Relaxed);
                }
            }
        }
    }
}

fn post(addr: SocketAddr, body: &str) -> bool {
    client::request(
        addr,
        "POST",
        "/api/v1/observations",
        &[("Content-Type", "application/x-ndjson")],
        body.as_bytes(),
        Duration::from_secs(2),
    )
    .is_ok_and(|r| r.status == 200)
}

fn sidecar(port: u16) -> Agent {
    sidecar_with(port, SIDECAR_CONFIG)
}

fn sidecar_with(port: u16, config: &str) -> Agent {
    let listen = format!("127.0.0.1:{port}");
    Agent::start_with(
        config,
        &Options {
            http_listen: Some(&listen),
            ..Options::default()
        },
    )
}

/// A real Prometheus scraping the sidecars every second, and the driver feeding them from a
/// thread of its own.
struct Fed {
    prom: Prometheus,
    driver: Arc<Driver>,
    feeding: std::thread::JoinHandle<()>,
}

impl Fed {
    /// Starts both for the sidecars on `ports`; `None` when Prometheus is not installed.
    fn start(ports: &[u16]) -> Option<Fed> {
        let targets: Vec<String> = ports.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: sidecars\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        let prom = Prometheus::start(&config, &[])?;
        let driver = Arc::new(Driver {
            targets: Mutex::new(
                ports
                    .iter()
                    .map(|p| Some(format!("127.0.0.1:{p}").parse().unwrap()))
                    .collect(),
            ),
            hot: AtomicU64::new(1),
            timeouts: AtomicU64::new(0),
            timeouts_sent: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let feeding = std::thread::spawn({
            let d = driver.clone();
            move || d.run()
        });
        Some(Fed {
            prom,
            driver,
            feeding,
        })
    }
}

/// The fleet instance's windows of group `db`: (end, requests).
fn fleet_windows(fleet: &Agent) -> Vec<(f64, u64)> {
    let (status, body) = fleet.request("GET", "/api/v1/history?group=db", &[], b"");
    if status != 200 {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["windows"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter_map(|w| Some((w["end"].as_f64()?, w["requests"].as_u64()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn alerts(agent: &Agent) -> Vec<Value> {
    let (_, body) = agent.request("GET", "/api/v1/alerts", &[], b"");
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["data"]["alerts"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_fleet_instance_counts_what_the_sidecars_counted_and_names_the_hot_shard() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut sidecars: Vec<Option<Agent>> = ports.iter().map(|&p| Some(sidecar(p))).collect();
    let Some(Fed {
        prom,
        driver,
        feeding,
    }) = Fed::start(&ports)
    else {
        return;
    };
    // History for the backfill: 40 s, ten fleet windows.
    std::thread::sleep(Duration::from_secs(40));
    let fleet_config = format!(
        "{}detectors:\n  hot_shard:\n    warmup_windows: 8\n",
        prom.fleet_instance_config("sidecars", FLEET_WINDOW)
    );
    let fleet = Agent::start(&fleet_config);
    let (status, ready) = fleet.request("GET", "/readyz", &[], b"");
    assert_eq!(status, 200, "{ready}");
    let backfilled: usize = ready
        .split("baselines from ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("/readyz says nothing of the backfill: {ready}"));
    assert!(backfilled >= 8, "{backfilled} windows backfilled: {ready}");
    eprintln!("fleet /readyz: {}", ready.trim().replace('\n', " | "));
    let live_from = unix_now();

    // Steady: 24 s, six windows, every one exact.
    std::thread::sleep(Duration::from_secs(24));
    let full = 3 * SHARDS as u64 * PER_SHARD * FLEET_WINDOW as u64;
    let steady: Vec<(f64, u64)> = fleet_windows(&fleet)
        .into_iter()
        .filter(|(end, _)| *end > live_from + FLEET_WINDOW)
        .collect();
    assert!(steady.len() >= 4, "{steady:?}");
    for (end, n) in &steady {
        let off = (*n as f64 - full as f64).abs() / full as f64;
        assert!(
            off <= 0.02,
            "window ending {end}: {n} requests, {full} sent ({:.1}% off)",
            off * 100.0
        );
    }
    eprintln!("steady fleet windows (sent {full} each): {steady:?}");

    // A sidecar restarts on the same port (its counters start again from zero), then another
    // is removed for good.
    let events_at = unix_now();
    driver.targets.lock().unwrap()[0] = None;
    drop(sidecars[0].take());
    sidecars[0] = Some(sidecar(ports[0]));
    driver.targets.lock().unwrap()[0] = Some(format!("127.0.0.1:{}", ports[0]).parse().unwrap());
    std::thread::sleep(Duration::from_secs(10));
    driver.targets.lock().unwrap()[1] = None;
    drop(sidecars[1].take());
    std::thread::sleep(Duration::from_secs(16));
    let after: Vec<(f64, u64)> = fleet_windows(&fleet)
        .into_iter()
        .filter(|(end, _)| *end > events_at)
        .collect();
    let two = full * 2 / 3;
    // A window over what was sent passes only when the next one is under by as much: a scrape
    // written late moves a sidecar's counts to the next window (seen under load in CI: 2,080
    // then 1,760 against 1,920 each), while a count taken twice raises the pair's sum.
    for (i, (end, n)) in after.iter().enumerate() {
        let next = after.get(i + 1).map_or(0, |(_, m)| *m);
        assert!(
            *n as f64 <= full as f64 * 1.02 || (*n + next) as f64 <= 2.0 * full as f64 * 1.02,
            "window ending {end} counted {n}, more than the {full} the fleet sent, and the next \
             window does not make up for it: a reset or a departed sidecar was counted twice \
             ({after:?})"
        );
    }
    let settled: Vec<_> = after.iter().rev().take(2).collect();
    for (end, n) in &settled {
        let off = (*n as f64 - two as f64).abs() / two as f64;
        assert!(
            off <= 0.02,
            "window ending {end}: {n} requests from two sidecars that sent {two} ({after:?})"
        );
    }
    eprintln!("fleet windows through the restart and the removal: {after:?}");
    assert!(
        alerts(&fleet).is_empty(),
        "the fleet alerted on a restart or a removal: {:?}",
        alerts(&fleet)
    );

    // One shard takes 3x on every remaining sidecar: the fleet names it, scope="fleet".
    let hot_from = Instant::now();
    driver.hot.store(3, Ordering::Relaxed);
    let hot = fleet.wait_for(Duration::from_secs(90), |a| {
        alerts(a)
            .into_iter()
            .find(|x| x["labels"]["alertname"] == "HotShard" && x["labels"]["shard"] == "s5")
    });
    let hot =
        hot.unwrap_or_else(|| panic!("no fleet HotShard for s5 in 90 s: {:?}", alerts(&fleet)));
    assert_eq!(hot["labels"]["scope"], "fleet", "{hot}");
    eprintln!(
        "fleet HotShard for s5 after {:.1} s: {}",
        hot_from.elapsed().as_secs_f64(),
        hot["annotations"]["summary"]
    );
    // The fleet's key counts, summed over the sidecars' lists: the empty key at its share (30
    // of 180 requests a post), user:0 at 40, each certain to the request.
    let (_, body) = fleet.request("GET", "/api/v1/history?group=db", &[], b"");
    let history: Value = serde_json::from_str(&body).unwrap();
    let keys = history["top_keys"].as_array().cloned().unwrap_or_default();
    let share = |key: &str| {
        let k = keys
            .iter()
            .find(|k| k["key"] == key)
            .unwrap_or_else(|| panic!("{keys:?}"));
        assert_eq!(k["requests"], k["lower_bound"], "{k}");
        k["share"].as_f64().unwrap()
    };
    assert!((share("") - 30.0 / 180.0).abs() < 0.01, "{keys:?}");
    assert!((share("user:0") - 40.0 / 180.0).abs() < 0.01, "{keys:?}");
    eprintln!("fleet top keys: {keys:?}");
    let others: Vec<_> = alerts(&fleet)
        .into_iter()
        .filter(|x| x["labels"]["shard"] != "s5")
        .collect();
    assert!(others.is_empty(), "{others:?}");
    let m = fleet.scrape();
    assert_eq!(
        m.value("skewwatch_fleet_windows_total", &[("result", "skipped")]),
        0.0
    );
    driver.stop.store(true, Ordering::Relaxed);
    feeding.join().unwrap();
}

/// The fleet instance's windows of group `db`: (end, requests, errors).
fn fleet_errors(fleet: &Agent) -> Vec<(f64, u64, u64)> {
    let (status, body) = fleet.request("GET", "/api/v1/history?group=db", &[], b"");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let mut out = Vec::new();
    for w in v["windows"].as_array().into_iter().flatten() {
        let (Some(end), Some(n)) = (w["end"].as_f64(), w["requests"].as_u64()) else {
            continue;
        };
        let ratio = w["error_ratio"].as_f64().unwrap_or(0.0);
        out.push((end, n, (ratio * n as f64).round() as u64));
    }
    out
}

#[test]
fn a_class_that_first_appears_on_fleet_profile_sidecars_is_counted_whole() {
    const FLEET_PROFILE: &str = "window:\n  window_secs: 1\nexposition:\n  profile: fleet\n";
    const TIMEOUTS: u64 = 200;
    let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let sidecars: Vec<Agent> = ports
        .iter()
        .map(|&p| sidecar_with(p, FLEET_PROFILE))
        .collect();
    let Some(Fed {
        prom,
        driver,
        feeding,
    }) = Fed::start(&ports)
    else {
        return;
    };
    std::thread::sleep(Duration::from_secs(6));
    let fleet = Agent::start(&prom.fleet_instance_config("sidecars", FLEET_WINDOW));
    std::thread::sleep(Duration::from_secs(12));
    // The fleet profile: no timeout series yet, no _sum or _count, no per-shard gauge.
    let page = sidecars[0].scrape().text;
    for absent in [
        "outcome=\"timeout\"",
        "skewwatch_shard_request_duration_seconds_count",
        "skewwatch_shard_share_ratio",
    ] {
        assert!(
            !page.contains(absent),
            "{absent} on a fleet-profile page:\n{page}"
        );
    }
    assert!(page.contains("outcome=\"error\""), "{page}");

    // Timeouts begin on both sidecars for about ten posts, then stop.
    let from = unix_now();
    driver.timeouts.store(TIMEOUTS, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(10));
    driver.timeouts.store(0, Ordering::Relaxed);
    let to = unix_now();
    std::thread::sleep(Duration::from_secs(12));
    assert!(sidecars[0].scrape().text.contains("outcome=\"timeout\""));
    driver.stop.store(true, Ordering::Relaxed);
    feeding.join().unwrap();

    // Every fleet window's errors beyond the steady one per shard and post are the timeouts.
    // The series is born with its first post's TIMEOUTS on each sidecar: lost, the count would
    // be 2 * TIMEOUTS short, a tenth of what was sent.
    let sent = driver.timeouts_sent.load(Ordering::Relaxed);
    let steady = 2 * SHARDS as u64 * FLEET_WINDOW as u64;
    let around: Vec<_> = fleet_errors(&fleet)
        .into_iter()
        .filter(|(end, _, _)| *end > from - FLEET_WINDOW && *end < to + 3.0 * FLEET_WINDOW)
        .collect();
    let counted: u64 = around.iter().map(|w| w.2.saturating_sub(steady)).sum();
    eprintln!("{counted} of {sent} timeouts counted by the fleet: {around:?}");
    assert!(sent >= 16 * TIMEOUTS, "{sent} timeouts sent");
    assert!(
        counted.abs_diff(sent) < TIMEOUTS / 2,
        "{counted} timeouts counted by the fleet, {sent} sent (a series born with its first \
         increment lost it?): {around:?}"
    );
    assert_eq!(
        fleet
            .scrape()
            .value("skewwatch_fleet_windows_total", &[("result", "skipped")]),
        0.0
    );
}

/// How the fake API answers, in turn.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Error,
    Partial,
    Huge,
    Silent,
    Status,
}

/// A fake PromQL API on loopback: answers every request as `mode` says and keeps the
/// `Authorization` headers it saw.
fn fake_api(
    mode: Arc<Mutex<Mode>>,
    auth: Arc<Mutex<Vec<String>>>,
    served: Arc<AtomicUsize>,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mode = *mode.lock().unwrap();
            let auth = auth.clone();
            let served = served.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("authorization:") {
                        auth.lock().unwrap().push(line.trim().to_owned());
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                served.fetch_add(1, Ordering::Relaxed);
                let (status, answer) = match mode {
                    Mode::Error => (
                        "422 Unprocessable Entity",
                        r#"{"status":"error","errorType":"execution","error":"query timed out"}"#.to_owned(),
                    ),
                    Mode::Partial => (
                        "200 OK",
                        r#"{"status":"success","warnings":["store 3 unavailable"],"data":{"resultType":"vector","result":[]}}"#.to_owned(),
                    ),
                    Mode::Huge => (
                        "200 OK",
                        format!(
                            r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{"pad":"{}"}},"value":[1,"1"]}}]}}}}"#,
                            "x".repeat(200_000)
                        ),
                    ),
                    Mode::Status => ("503 Service Unavailable", "overloaded".to_owned()),
                    Mode::Silent => {
                        std::thread::sleep(Duration::from_secs(3));
                        return;
                    }
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    addr
}

#[test]
fn a_tsdb_that_fails_is_counted_never_judged() {
    let mode = Arc::new(Mutex::new(Mode::Error));
    let auth = Arc::new(Mutex::new(Vec::new()));
    let served = Arc::new(AtomicUsize::new(0));
    let api = fake_api(mode.clone(), auth.clone(), served.clone());
    let dir = TempDir::new("fleet-faults");
    let token = "s3cr3t-fleet-token";
    std::fs::write(dir.0.join("token"), token).unwrap();
    let config = format!(
        "window:\n  window_secs: 2\n\
         fleet:\n  url: http://{api}\n  query_lead_secs: 0.5\n  timeout_secs: 0.4\n  backfill_secs: 60\n  \
         max_response_bytes: 65536\n  bearer_token_file: {}\n",
        dir.0.join("token").display()
    );
    let fleet = Agent::start(&config);
    let failures = |a: &Agent, reason: &str| {
        a.scrape()
            .get(
                "skewwatch_fleet_query_failures_total",
                &[("reason", reason)],
            )
            .unwrap_or(0.0)
    };
    for (m, reason) in [
        (Mode::Error, "refused"),
        (Mode::Partial, "partial"),
        (Mode::Huge, "too_large"),
        (Mode::Status, "status"),
        (Mode::Silent, "timeout"),
    ] {
        *mode.lock().unwrap() = m;
        let seen = fleet.wait_for(Duration::from_secs(10), |a| {
            (failures(a, reason) > 0.0).then_some(())
        });
        assert!(
            seen.is_some(),
            "{m:?}: no failure counted as {reason}:\n{}",
            fleet
                .scrape()
                .all("skewwatch_fleet_query_failures_total", &[])
                .len()
        );
    }
    // Every window so far was skipped, and after three of them /readyz says why.
    let m = fleet.scrape();
    assert_eq!(
        m.value("skewwatch_fleet_windows_total", &[("result", "fed")]),
        0.0
    );
    assert!(m.value("skewwatch_fleet_windows_total", &[("result", "skipped")]) >= 3.0);
    assert_eq!(
        m.value("skewwatch_windows_closed_total", &[]),
        0.0,
        "an empty window was judged"
    );
    let (status, body) = fleet.request("GET", "/readyz", &[], b"");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("fleet input: no answer for"), "{body}");
    assert!(body.contains("backfill failed"), "{body}");
    assert!(alerts(&fleet).is_empty());
    // The token reached the API and never the log.
    assert!(served.load(Ordering::Relaxed) > 0);
    assert!(
        auth.lock()
            .unwrap()
            .iter()
            .all(|h| h.eq_ignore_ascii_case(&format!("Authorization: Bearer {token}"))),
        "{:?}",
        auth.lock().unwrap()
    );
    let log = fleet.drain_log().join("\n");
    assert!(!log.contains(token), "the token is in the log:\n{log}");
    assert!(log.contains("windows without one are not judged"), "{log}");
}

/// The shipped Alertmanager configuration, in a real Alertmanager: a fleet alert mutes the
/// sidecars' alert of the same name on the same shard and the PromQL rule that says the same,
/// and nothing else.
#[test]
fn the_shipped_alertmanager_configuration_mutes_what_the_fleet_verdict_explains() {
    let config = std::fs::read_to_string(
        skewwatch_e2e::deploy::repo_root().join("deploy/alertmanager/alertmanager.yml"),
    )
    .unwrap();
    let Some(am) = Alertmanager::start_with_config(&config) else {
        return;
    };
    let alert = |labels: &[(&str, &str)]| {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
            .collect();
        serde_json::json!({"labels": labels, "annotations": {}})
    };
    let sent = Value::Array(vec![
        alert(&[
            ("alertname", "HotShard"),
            ("group", "db"),
            ("shard", "s5"),
            ("severity", "critical"),
            ("scope", "fleet"),
        ]),
        alert(&[
            ("alertname", "HotShard"),
            ("group", "db"),
            ("shard", "s5"),
            ("severity", "critical"),
        ]),
        alert(&[
            ("alertname", "HotShard"),
            ("group", "db"),
            ("shard", "s6"),
            ("severity", "critical"),
        ]),
        alert(&[
            ("alertname", "LatencySkew"),
            ("group", "db"),
            ("shard", "s5"),
            ("severity", "warning"),
        ]),
        alert(&[
            ("alertname", "SkewwatchFleetHotShard"),
            ("group", "db"),
            ("shard", "s5"),
            ("severity", "warning"),
        ]),
    ]);
    let (code, body) = skewwatch_e2e::agent::http_request(
        am.addr,
        "POST",
        "/api/v2/alerts",
        &[("Content-Type", "application/json")],
        sent.to_string().as_bytes(),
    );
    assert_eq!(code, 200, "{body}");
    let muted = |a: &Value| {
        a["status"]["inhibitedBy"]
            .as_array()
            .is_some_and(|i| !i.is_empty())
    };
    let got = skewwatch_e2e::alertmanager::poll(Duration::from_secs(10), || {
        let alerts = am.alerts();
        (alerts.len() == 5 && alerts.iter().any(muted)).then_some(alerts)
    })
    .expect("Alertmanager holds the five alerts, some muted");
    let mut states: Vec<(String, String, bool)> = got
        .iter()
        .map(|a| {
            let l = &a["labels"];
            let who = format!(
                "{}{}",
                l["alertname"].as_str().unwrap(),
                if l["scope"] == "fleet" {
                    " (fleet)"
                } else {
                    ""
                }
            );
            (who, l["shard"].as_str().unwrap().to_owned(), muted(a))
        })
        .collect();
    states.sort();
    assert_eq!(
        states,
        [
            ("HotShard".to_owned(), "s5".to_owned(), true),
            ("HotShard".to_owned(), "s6".to_owned(), false),
            ("HotShard (fleet)".to_owned(), "s5".to_owned(), false),
            ("LatencySkew".to_owned(), "s5".to_owned(), false),
            ("SkewwatchFleetHotShard".to_owned(), "s5".to_owned(), true),
        ]
    );
}

/// The growth expression on Prometheus' own evaluator (promtool's unit tests), on series with a
/// known history: one sidecar counts on, one restarts after a scrape that saw growth since the
/// previous query, one joins. Each part of the answer is what the module docs say, and
/// `cur - prev + lost` is every count the TSDB saw grow.
#[test]
fn the_growth_expression_counts_a_restart_and_a_join_exactly_in_prometheus() {
    use skewwatch::ingest::fleet::query::{Family, growth_expr};
    // Scrapes every 5 s; the query at 30 s, the previous one at 15 s (offset 15 s).
    //   a: counts on, 30 -> 60: grew 30.
    //   b: restarts after its 20 s scrape (40): 10 before the restart, 8 after: grew 18.
    //   c: joins at 25 s: grew 4.
    let expr = growth_expr(
        Family::Requests,
        r#"job="sw""#,
        Duration::from_secs(600),
        Duration::from_secs(15),
    );
    let series = |instance: &str, values: &str| {
        format!(
            "      - series: 'skewwatch_shard_requests_total{{job=\"sw\",instance=\"{instance}\",group=\"g\",shard=\"s1\",outcome=\"ok\"}}'\n        values: '{values}'\n"
        )
    };
    let sample = |part: &str, value: u32| {
        format!(
            "          - labels: '{{group=\"g\",shard=\"s1\",outcome=\"ok\",part=\"{part}\"}}'\n            value: {value}\n"
        )
    };
    let test = format!(
        // Without an evaluation_interval of the series' own step, promtool reads every series
        // as its first value.
        "rule_files: []\nevaluation_interval: 5s\ntests:\n  - interval: 5s\n    input_series:\n{}{}{}    promql_expr_test:\n      - expr: '{}'\n        eval_time: 30s\n        exp_samples:\n{}{}{}",
        series("a", "0 10 20 30 40 50 60"),
        series("b", "0 10 20 30 40 5 8"),
        series("c", "_ _ _ _ _ 1 4"),
        expr.replace('\'', "''"),
        // cur: 60 + 8 + 4; prev, of what counted on: a's 30; lost: b's 40 less its 30.
        sample("cur", 72),
        sample("prev", 30),
        sample("lost", 10),
    );
    let dir = TempDir::new("fleet-growth-promtool");
    let file = dir.0.join("growth.test.yml");
    std::fs::write(&file, &test).unwrap();
    skewwatch_e2e::tools::promtool(
        &["test", "rules", file.to_str().unwrap()],
        &format!("the growth expression is not evaluated as documented:\n{test}"),
    );
}
