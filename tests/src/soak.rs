//! The soak: the real agent under sustained mixed load and faults, measured.
//!
//! For the whole run:
//! - StatsD over UDP at a fixed rate, a share of it hostile (garbage, bad values, names over
//!   the length limit, non-UTF-8 bytes), valid and hostile lines in separate datagrams of
//!   different sizes ([`VALID_PER_DATAGRAM`], `HOSTILE.len()`), so every datagram's valid
//!   lines are known exactly, and so is what a datagram the kernel dropped held;
//! - many HTTP clients that connect, post a small NDJSON body (with a hostile record in it)
//!   and disconnect, each on its own schedule;
//! - an error surge that starts and stops, so alerts fire and resolve;
//! - a webhook receiver that fails (500) and recovers on a fixed period;
//! - a configuration rewritten and reloaded with SIGHUP on a fixed period.
//!
//! At the end it reports what was sent and what the agent accounted for, line by line: every
//! valid StatsD line is a record, a queue-full drop or in a datagram the kernel dropped, every
//! hostile one is rejected or in a dropped datagram, and the dropped datagrams add up to the
//! kernel's count; every valid HTTP record acknowledged is a record and every hostile one is
//! rejected exactly once, retries included. Any line outside that is listed in
//! [`SoakReport::unaccounted`]. It also reports the agent's RSS near the start and at the end,
//! and, for every period the webhook was up, whether the receiver ended it in the state the
//! agent holds.
//! `scripts/soak.sh` runs it for ten minutes; `tests/tests/e2e/soak.rs` for one.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use skewwatch::client;

use crate::agent::Agent;

/// What a soak run does.
#[derive(Debug, Clone)]
pub struct SoakPlan {
    /// How long the load runs.
    pub duration: Duration,
    /// StatsD lines per second, hostile ones included.
    pub udp_lines_per_sec: u64,
    /// Share of StatsD lines that are hostile.
    pub hostile_share: f64,
    /// HTTP clients, each reconnecting for every post.
    pub http_clients: usize,
    /// How often each HTTP client posts.
    pub http_period: Duration,
    /// The webhook receiver fails, then recovers, every this long.
    pub flap_period: Duration,
    /// A SIGHUP with a rewritten configuration every this long.
    pub reload_period: Duration,
}

impl SoakPlan {
    /// The plan the issue asks for, over `duration`.
    pub fn standard(duration: Duration) -> SoakPlan {
        SoakPlan {
            duration,
            udp_lines_per_sec: 190_000,
            hostile_share: 0.05,
            http_clients: 1000,
            http_period: Duration::from_secs(1),
            flap_period: Duration::from_secs(30),
            reload_period: Duration::from_secs(60),
        }
    }
}

/// What a soak run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakReport {
    /// Seconds the load ran.
    pub secs: f64,
    /// Valid StatsD lines sent.
    pub udp_valid_sent: u64,
    /// Hostile StatsD lines sent.
    pub udp_hostile_sent: u64,
    /// Datagrams of valid lines sent, each [`VALID_PER_DATAGRAM`] lines.
    pub udp_valid_datagrams: u64,
    /// Datagrams of hostile lines sent, each holding every hostile line once.
    pub udp_hostile_datagrams: u64,
    /// Valid records the HTTP clients had acknowledged (200, `accepted`).
    pub http_valid_acked: u64,
    /// Hostile records the HTTP clients sent and saw rejected.
    pub http_hostile_rejected_by_reply: u64,
    /// HTTP posts refused with 503 (queue full) and retried.
    pub http_retries: u64,
    /// HTTP posts that failed at the transport (connection refused or reset) and were retried.
    pub http_transport_errors: u64,
    /// Valid records the agent counted, by source.
    pub agent_records_statsd: u64,
    /// As above.
    pub agent_records_http: u64,
    /// Records the agent rejected, by source.
    pub agent_rejected_statsd: u64,
    /// As above.
    pub agent_rejected_http: u64,
    /// Records the agent dropped (queue full), StatsD.
    pub agent_dropped_statsd: u64,
    /// Datagrams the kernel dropped.
    pub kernel_drop_datagrams: u64,
    /// Valid StatsD lines neither counted nor in a queue-full drop: whole datagrams the kernel
    /// dropped, or a loss.
    pub udp_valid_missing: i64,
    /// Hostile StatsD lines not counted as rejected.
    pub udp_hostile_missing: i64,
    /// Valid HTTP records acknowledged but not counted.
    pub http_valid_lost: i64,
    /// Hostile HTTP records rejected by reply but not counted once (a retried body counted
    /// twice shows as negative).
    pub http_hostile_unaccounted: i64,
    /// Every line the accounting cannot explain, described; empty on a clean run.
    pub unaccounted: Vec<String>,
    /// RSS once the load has run a tenth of the time (at least 15 s), bytes: the agent's
    /// steady state, after its buffers and tables first filled.
    pub rss_start: u64,
    /// RSS every 30 s: (seconds into the run, bytes).
    pub rss_samples: Vec<(u64, u64)>,
    /// RSS at the end, bytes.
    pub rss_end: u64,
    /// Reloads sent and the gauge after each (1 = applied).
    pub reloads: u32,
    /// Reloads after which `skewwatch_config_last_reload_successful` was not 1.
    pub reloads_failed: u32,
    /// Periods the webhook was up.
    pub flaps: u32,
    /// Up periods that ended with the receiver in the agent's state.
    pub flaps_converged: u32,
    /// The states compared at each up period's end: (receiver's firing alerts, agent's).
    pub flap_states: Vec<(Vec<String>, Vec<String>)>,
}

/// The agent's configuration for the soak; `variant` changes a threshold, so every reload
/// applies something.
pub fn config(hook: SocketAddr, variant: u32) -> String {
    format!(
        r#"window:
  window_secs: 1
detectors:
  error_surge:
    min_requests: {}
    min_error_ratio: 0.05
    consecutive_windows: 1
    warmup_windows: 5
    alert: {{severity: critical, for_secs: 0, keep_firing_for_secs: 2}}
alerting:
  resend_interval_secs: 5
  backoff_initial_secs: 0.1
  backoff_max_secs: 1
  webhooks:
    - name: flappy
      url: "http://{hook}/hook"
"#,
        100 + variant % 2
    )
}

/// A webhook receiver that fails while `down`, and keeps the latest status it accepted per
/// group.
struct FlappingReceiver {
    addr: SocketAddr,
    down: Arc<AtomicBool>,
    /// groupKey -> the alerts the latest accepted notification lists as firing
    state: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
}

impl FlappingReceiver {
    fn start() -> FlappingReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(BTreeMap::new()));
        let (d, st) = (down.clone(), state.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (d, st) = (d.clone(), st.clone());
                std::thread::spawn(move || {
                    let Some(body) = read_body(&mut conn) else {
                        return;
                    };
                    let fail = d.load(Ordering::SeqCst);
                    if !fail && let Ok(msg) = serde_json::from_slice::<Value>(&body) {
                        let firing: Vec<String> = msg["alerts"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|a| a["status"] == "firing")
                            .map(alert_id)
                            .collect();
                        let key = msg["groupKey"].as_str().unwrap_or("").to_owned();
                        st.lock().unwrap().insert(key, firing);
                    }
                    let status = if fail {
                        "500 Internal Server Error"
                    } else {
                        "200 OK"
                    };
                    let _ = conn.write_all(
                        format!(
                            "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        )
                        .as_bytes(),
                    );
                });
            }
        });
        FlappingReceiver { addr, down, state }
    }

    /// The alerts the receiver believes are firing.
    fn firing(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .state
            .lock()
            .unwrap()
            .values()
            .flatten()
            .cloned()
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

fn read_body(conn: &mut std::net::TcpStream) -> Option<Vec<u8>> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut len = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// Hostile StatsD lines, cycled through.
const HOSTILE: [&[u8]; 6] = [
    b"garbage without a colon",
    b"skewwatch.request:NaN|ms|#group:soak,shard:s1",
    b"skewwatch.request:5|ms|#shard:s1",
    b"skewwatch.request:5|ms|#group:soak,shard:s1,outcome:exploded",
    b"skewwatch.request:5|c|@7|#group:soak,shard:s1",
    b"\xff\xfe skewwatch.request:5|ms",
];

/// Valid lines in each datagram of valid lines. A hostile datagram holds every hostile line
/// once: the two sizes differ, so the lines missing from each kind say how many datagrams of
/// each kind the kernel dropped.
pub const VALID_PER_DATAGRAM: u64 = 20;

/// What the StatsD sender sent.
#[derive(Debug, Clone, Copy, Default)]
struct UdpSent {
    valid_lines: u64,
    hostile_lines: u64,
    valid_datagrams: u64,
    hostile_datagrams: u64,
}

/// Sends StatsD at the plan's rate until `stop`: datagrams of valid lines and, so that about
/// `hostile_share` of the lines are hostile, datagrams of hostile lines only.
fn udp_load(statsd: SocketAddr, plan: &SoakPlan, surge: &AtomicBool, stop: &AtomicBool) -> UdpSent {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let hostile_per_datagram = HOSTILE.len() as u64;
    let hostile_datagram = HOSTILE.join(&b'\n');
    let mut sent = UdpSent::default();
    let started = Instant::now();
    let mut datagram = Vec::with_capacity(2048);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let lines = sent.valid_lines + sent.hostile_lines;
        let hostile_due =
            (lines as f64 * plan.hostile_share) as u64 >= sent.hostile_lines + hostile_per_datagram;
        if hostile_due {
            let _ = sock.send_to(&hostile_datagram, statsd);
            sent.hostile_lines += hostile_per_datagram;
            sent.hostile_datagrams += 1;
        } else {
            datagram.clear();
            for _ in 0..VALID_PER_DATAGRAM {
                n += 1;
                let shard = n % 16;
                let outcome = if surge.load(Ordering::Relaxed) && n.is_multiple_of(3) {
                    "error"
                } else {
                    "ok"
                };
                let _ = writeln!(
                    datagram,
                    "skewwatch.request:{}|ms|#group:soak,shard:s{shard},key:k{},outcome:{outcome}",
                    n % 50,
                    n % 997
                );
            }
            datagram.pop();
            let _ = sock.send_to(&datagram, statsd);
            sent.valid_lines += VALID_PER_DATAGRAM;
            sent.valid_datagrams += 1;
        }
        let lines = sent.valid_lines + sent.hostile_lines;
        let due = Duration::from_secs_f64(lines as f64 / plan.udp_lines_per_sec as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    sent
}

/// Counters the HTTP clients keep.
#[derive(Default)]
struct HttpCounts {
    acked: AtomicU64,
    rejected: AtomicU64,
    retries: AtomicU64,
    transport: AtomicU64,
}

/// One HTTP client: connect, post, disconnect, on its own period, until `stop`.
fn http_client(
    http: SocketAddr,
    id: usize,
    period: Duration,
    counts: &HttpCounts,
    stop: &AtomicBool,
) {
    let body = format!(
        "{{\"group\":\"soak-http\",\"shard\":\"c{}\",\"latency_ms\":3}}\n\
         {{\"group\":\"soak-http\",\"shard\":\"c{}\",\"count\":2}}\n\
         {{\"group\":\"soak-http\",\"latency_ms\":-1}}\n",
        id % 32,
        (id + 1) % 32
    );
    // Spread the clients over the period.
    std::thread::sleep(period.mul_f64((id % 100) as f64 / 100.0));
    while !stop.load(Ordering::Relaxed) {
        let next = Instant::now() + period;
        loop {
            match client::request(
                http,
                "POST",
                "/api/v1/observations",
                &[("Content-Type", "application/x-ndjson")],
                body.as_bytes(),
                Duration::from_secs(10),
            ) {
                Ok(r) if r.status == 200 || r.status == 400 => {
                    let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
                    counts
                        .acked
                        .fetch_add(v["accepted"].as_u64().unwrap_or(0), Ordering::Relaxed);
                    counts
                        .rejected
                        .fetch_add(v["rejected"].as_u64().unwrap_or(0), Ordering::Relaxed);
                    break;
                }
                Ok(_) => counts.retries.fetch_add(1, Ordering::Relaxed),
                Err(_) => counts.transport.fetch_add(1, Ordering::Relaxed),
            };
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

/// An alert's identity for comparing states: its labels as JSON (sorted by name).
fn alert_id(a: &Value) -> String {
    a["labels"].to_string()
}

/// The alerts the agent's `/api/v1/alerts` lists as firing.
fn agent_firing(agent: &Agent) -> Vec<String> {
    let (_, body) = agent.request("GET", "/api/v1/alerts", &[], b"");
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let mut out: Vec<String> = v["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["state"] == "firing")
        .map(alert_id)
        .collect();
    out.sort();
    out
}

/// Runs the soak against a fresh agent and reports.
pub fn run(plan: &SoakPlan) -> SoakReport {
    let hook = FlappingReceiver::start();
    let mut agent = Agent::start(&config(hook.addr, 0));
    let stop = Arc::new(AtomicBool::new(false));
    let surge = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(HttpCounts::default());
    let mut report = SoakReport::default();

    let udp = {
        let (plan, surge, stop, statsd) = (plan.clone(), surge.clone(), stop.clone(), agent.statsd);
        std::thread::spawn(move || udp_load(statsd, &plan, &surge, &stop))
    };
    let clients: Vec<_> = (0..plan.http_clients)
        .map(|id| {
            let (counts, stop, http, period) =
                (counts.clone(), stop.clone(), agent.http, plan.http_period);
            std::thread::Builder::new()
                .stack_size(128 << 10)
                .spawn(move || http_client(http, id, period, &counts, &stop))
                .unwrap()
        })
        .collect();

    let started = Instant::now();
    let mut next_flap = plan.flap_period;
    let mut next_reload = plan.reload_period;
    let mut rss_taken = false;
    // The memory baseline is taken once the first reload has settled: a reload round-trips
    // every detector's state through JSON on the pipeline thread, and glibc keeps that peak
    // (about 1 MiB here; heaptrack shows the heap itself at under 3 MiB and nothing leaked).
    // Before this the one-minute soak measured that one-off step, not growth.
    let rss_at = (plan.duration / 10)
        .max(Duration::from_secs(15))
        .max(plan.reload_period + Duration::from_secs(5));
    let mut next_sample = Duration::ZERO;
    while started.elapsed() < plan.duration {
        std::thread::sleep(Duration::from_millis(250));
        let t = started.elapsed();
        // The surge: on for 10 s of every 20 s, after 10 s of warm-up.
        surge.store(
            t.as_secs() >= 10 && (t.as_secs() / 10) % 2 == 1,
            Ordering::Relaxed,
        );
        if !rss_taken && t >= rss_at {
            report.rss_start = agent.memory("VmRSS");
            rss_taken = true;
        }
        if t >= next_sample {
            next_sample += Duration::from_secs(30);
            report
                .rss_samples
                .push((t.as_secs(), agent.memory("VmRSS")));
        }
        if t >= next_flap {
            next_flap += plan.flap_period;
            let going_down = !hook.down.load(Ordering::SeqCst);
            if going_down {
                // An up period ends: give delivery a few seconds, then compare states.
                let converged = agent.wait_for(Duration::from_secs(8), |a| {
                    let (r, s) = (hook.firing(), agent_firing(a));
                    (r == s).then_some(())
                });
                report.flaps += 1;
                report.flaps_converged += u32::from(converged.is_some());
                report
                    .flap_states
                    .push((hook.firing(), agent_firing(&agent)));
            }
            hook.down.store(going_down, Ordering::SeqCst);
        }
        if t >= next_reload {
            next_reload += plan.reload_period;
            report.reloads += 1;
            std::fs::write(agent.config_path(), config(hook.addr, report.reloads)).unwrap();
            agent.signal("HUP");
            std::thread::sleep(Duration::from_millis(500));
            let ok = agent
                .scrape()
                .value("skewwatch_config_last_reload_successful", &[]);
            report.reloads_failed += u32::from(ok != 1.0);
        }
    }
    report.secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let udp = udp.join().unwrap();
    for c in clients {
        let _ = c.join();
    }
    report.udp_valid_sent = udp.valid_lines;
    report.udp_hostile_sent = udp.hostile_lines;
    report.udp_valid_datagrams = udp.valid_datagrams;
    report.udp_hostile_datagrams = udp.hostile_datagrams;
    report.http_valid_acked = counts.acked.load(Ordering::Relaxed);
    report.http_hostile_rejected_by_reply = counts.rejected.load(Ordering::Relaxed);
    report.http_retries = counts.retries.load(Ordering::Relaxed);
    report.http_transport_errors = counts.transport.load(Ordering::Relaxed);
    settle_and_count(&mut agent, &mut report);
    report.rss_end = agent.memory("VmRSS");
    assert!(agent.stop().success());
    report
}

/// Waits until the agent's counters stop moving, then fills in what it accounted for.
fn settle_and_count(agent: &mut Agent, r: &mut SoakReport) {
    // One empty datagram carries the kernel's final drop count (SO_RXQ_OVFL).
    let _ = UdpSocket::bind("127.0.0.1:0").and_then(|s| s.send_to(b"", agent.statsd));
    let mut last = -1.0;
    let _ = agent.wait_for(Duration::from_secs(20), |a| {
        let s = a.scrape();
        let now = s.value("skewwatch_ingest_records_total", &[("source", "statsd")]);
        let still = now == last;
        last = now;
        std::thread::sleep(Duration::from_millis(300));
        still.then_some(())
    });
    let s = agent.scrape();
    let v = |name: &str, labels: &[(&str, &str)]| s.sum(name, labels) as u64;
    r.agent_records_statsd = v("skewwatch_ingest_records_total", &[("source", "statsd")]);
    r.agent_records_http = v("skewwatch_ingest_records_total", &[("source", "http")]);
    r.agent_rejected_statsd = v("skewwatch_ingest_rejected_total", &[("source", "statsd")]);
    r.agent_rejected_http = v("skewwatch_ingest_rejected_total", &[("source", "http")]);
    r.agent_dropped_statsd = v("skewwatch_ingest_dropped_total", &[("source", "statsd")]);
    r.kernel_drop_datagrams = v("skewwatch_statsd_kernel_drops_total", &[]);
    r.udp_valid_missing =
        r.udp_valid_sent as i64 - r.agent_records_statsd as i64 - r.agent_dropped_statsd as i64;
    r.udp_hostile_missing = r.udp_hostile_sent as i64 - r.agent_rejected_statsd as i64;
    r.http_valid_lost = r.http_valid_acked as i64 - r.agent_records_http as i64;
    r.http_hostile_unaccounted =
        r.http_hostile_rejected_by_reply as i64 - r.agent_rejected_http as i64;
    r.unaccounted = unaccounted(r);
}

/// Every line the report's counts do not explain. A datagram the kernel dropped is whole:
/// [`VALID_PER_DATAGRAM`] valid lines or every hostile line once, and the two kinds must add
/// up to the kernel's count of dropped datagrams.
pub fn unaccounted(r: &SoakReport) -> Vec<String> {
    let mut out = Vec::new();
    let mut whole = |missing: i64, per: u64, what: &str| {
        if missing < 0 || missing % per as i64 != 0 {
            out.push(format!(
                "{missing} {what} StatsD lines missing: not whole datagrams of {per}"
            ));
            None
        } else {
            Some(missing as u64 / per)
        }
    };
    let valid = whole(r.udp_valid_missing, VALID_PER_DATAGRAM, "valid");
    let hostile = whole(r.udp_hostile_missing, HOSTILE.len() as u64, "hostile");
    if let (Some(v), Some(h)) = (valid, hostile)
        && v + h != r.kernel_drop_datagrams
    {
        out.push(format!(
            "{v} valid and {h} hostile datagrams missing, but the kernel dropped {}",
            r.kernel_drop_datagrams
        ));
    }
    if r.http_valid_lost != 0 {
        out.push(format!(
            "{} valid HTTP records acknowledged but not counted",
            r.http_valid_lost
        ));
    }
    if r.http_hostile_unaccounted != 0 {
        out.push(format!(
            "{} hostile HTTP records rejected by reply but not counted once",
            r.http_hostile_unaccounted
        ));
    }
    out
}
