//! End-to-end: the agent survives hostile clients and faults beside production. One test per
//! way it used to fail (the wall-clock steps are tested in process, in `pipeline.rs` and
//! `engine.rs`, where the clock can be stepped; the webhook outage in `webhook.rs`).

use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use serde_json::Value;
use skewwatch::client;
use skewwatch_e2e::agent::{Agent, Options, SURGE_DETECTORS, TempDir};
use skewwatch_e2e::alertmanager::{Alertmanager, poll};
use skewwatch_e2e::traffic::Traffic;

/// Bytes of one NDJSON body, under the default 1 MiB body limit.
const BODY_BYTES: usize = 1000 * 1000;

/// Posts `records` as NDJSON bodies on one keep-alive connection, retrying a body the agent
/// refused with 503 (its queue was full) as a client should; panics on any other answer but
/// 200.
fn post_all(agent: &Agent, records: impl Iterator<Item = String>) -> usize {
    let mut conn = client::Connection::connect(agent.http, Duration::from_secs(30)).unwrap();
    let mut body = String::with_capacity(1 << 20);
    let mut n = 0;
    let flush = |body: &mut String, conn: &mut client::Connection| {
        loop {
            let resp = conn
                .request(
                    "POST",
                    "/api/v1/observations",
                    &["Content-Type: application/x-ndjson"],
                    body.as_bytes(),
                )
                .unwrap();
            if resp.status == 503 {
                // Back-pressure: the pipeline is behind; the whole body may be sent again.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            assert_eq!(resp.status, 200, "{}", resp.text());
            break;
        }
        body.clear();
    };
    for r in records {
        if body.len() + r.len() + 1 > BODY_BYTES {
            flush(&mut body, &mut conn);
        }
        body.push_str(&r);
        body.push('\n');
        n += 1;
    }
    if !body.is_empty() {
        flush(&mut body, &mut conn);
    }
    n
}

/// The worst-case RSS at the default limits that docs/reliability.md promises.
const DOCUMENTED_WORST_RSS: u64 = 170 << 20;

/// What each recording thread past the first may add to it (docs/reliability.md).
const DOCUMENTED_RSS_PER_RECORD_THREAD: u64 = 40 << 20;

#[test]
fn a_flood_of_groups_shards_and_keys_stays_within_the_memory_budget() {
    flood_within_the_memory_budget("window:\n  window_secs: 2\n", DOCUMENTED_WORST_RSS);
}

#[test]
fn the_flood_stays_within_the_budget_when_recording_on_three_threads() {
    // The shard caps are shared between the threads; each keeps its own group key summaries,
    // which the budget allows for per thread.
    flood_within_the_memory_budget(
        "window:\n  window_secs: 2\n  record_threads: 3\n",
        DOCUMENTED_WORST_RSS + 2 * DOCUMENTED_RSS_PER_RECORD_THREAD,
    );
}

fn flood_within_the_memory_budget(config: &str, budget: u64) {
    let mut agent = Agent::start(config);
    let before = agent.memory("VmRSS");
    // 65 groups x 1,025 shards, 32 keyed records each with two latencies and the longest keys
    // allowed (256 bytes): over every cap, at the largest cost per shard.
    let records =
        (0..65).flat_map(|g| {
            (0..1025).flat_map(move |s| {
                (0..32).map(move |k| {
                let (latency, outcome) = if k % 2 == 0 { (4, "ok") } else { (900, "error") };
                format!(
                    "{{\"group\":\"group-{g:02}\",\"shard\":\"shard-{s:04}\",\"key\":\"{:0>256}\",\
                     \"latency_ms\":{latency},\"outcome\":\"{outcome}\"}}",
                    format!("{g}-{s}-{k}")
                )
            })
            })
        });
    let sent = post_all(&agent, records);
    assert_eq!(sent, 65 * 1025 * 32);
    // Every record is accounted for: taken (possibly folded), never lost.
    let taken = agent.wait_for(Duration::from_secs(30), |a| {
        let s = a.scrape();
        (s.value("skewwatch_ingest_records_total", &[("source", "http")]) == sent as f64)
            .then_some(s)
    });
    let s = taken.expect("not every record was taken");
    // Wait for the windows that held the flood to close.
    let closed = s.value("skewwatch_windows_closed_total", &[]);
    agent
        .wait_for(Duration::from_secs(20), |a| {
            (a.scrape().value("skewwatch_windows_closed_total", &[]) >= closed + 2.0).then_some(())
        })
        .expect("windows stopped closing");
    let s = agent.scrape();
    let shard_series = s.all("skewwatch_shard_requests_per_second", &[]).len();
    assert!(shard_series <= 1024 + 65, "{shard_series} shard series");
    assert!(
        s.value("skewwatch_ingest_folded_total", &[("level", "shard")])
            + s.value("skewwatch_ingest_folded_total", &[("level", "group")])
            > 0.0
    );
    let (code, status) = agent.request("GET", "/api/v1/status", &[], b"");
    assert_eq!(code, 200);
    let (_, metrics) = agent.request("GET", "/metrics", &[], b"");
    let (rss, peak) = (agent.memory("VmRSS"), agent.memory("VmHWM"));
    eprintln!(
        "memory: RSS {} MiB before, {} MiB after, peak {} MiB; /api/v1/status {} KiB, /metrics {} KiB",
        before >> 20,
        rss >> 20,
        peak >> 20,
        status.len() >> 10,
        metrics.len() >> 10
    );
    assert!(peak <= budget, "peak RSS {} MiB", peak >> 20);
    assert!(
        status.len() < 1 << 20,
        "/api/v1/status is {} bytes",
        status.len()
    );
    assert!(
        metrics.len() < 8 << 20,
        "/metrics is {} bytes",
        metrics.len()
    );
    assert!(agent.stop().success());
}

#[test]
fn fresh_shard_names_across_many_windows_keep_the_counters_within_the_shard_budget() {
    // The cumulative counters outlive the windows (an hour), so the flood above, which fits
    // in about one window, does not reach them: here every phase brings 1,024 fresh shard
    // names (the windows' whole budget) in a window of its own, eight times over.
    const PHASES: usize = 8;
    const GROUPS: usize = 16;
    let mut agent = Agent::start("window:\n  window_secs: 1\n");
    for phase in 0..PHASES {
        let records = (0..1024).flat_map(|i| {
            (0..4).map(move |k| {
                let cache = if k % 2 == 0 { "hit" } else { "miss" };
                format!(
                    "{{\"group\":\"group-{:02}\",\"shard\":\"phase-{phase}-shard-{i:04}\",\
                     \"latency_ms\":{},\"cache\":\"{cache}\"}}",
                    i % GROUPS,
                    1 + k * 300
                )
            })
        });
        let sent = post_all(&agent, records);
        let closed = agent.scrape().value("skewwatch_windows_closed_total", &[]);
        // The phase's window closes, and the next phase starts in a window of its own.
        agent
            .wait_for(Duration::from_secs(20), |a| {
                (a.scrape().value("skewwatch_windows_closed_total", &[]) >= closed + 2.0)
                    .then_some(())
            })
            .unwrap_or_else(|| panic!("windows stopped closing after phase {phase} ({sent} sent)"));
    }
    let (_, metrics) = agent.request("GET", "/metrics", &[], b"");
    let peak = agent.memory("VmHWM");
    let s = skewwatch::client::text::Scrape::parse(&metrics).unwrap();
    let series = s.all("skewwatch_shard_requests_total", &[("outcome", "ok")]);
    let groups: std::collections::BTreeSet<&str> =
        series.iter().map(|x| x.labels["group"].as_str()).collect();
    eprintln!(
        "memory: peak {} MiB; /metrics {} KiB; {} shard label sets in {} groups",
        peak >> 20,
        metrics.len() >> 10,
        series.len(),
        groups.len()
    );
    // At most `limits.max_shards_total` named shards over all groups, plus `__other__` each.
    assert!(
        series.len() <= 1024 + groups.len(),
        "{} shard label sets in {} groups",
        series.len(),
        groups.len()
    );
    assert!(peak <= DOCUMENTED_WORST_RSS, "peak RSS {} MiB", peak >> 20);
    assert!(
        metrics.len() < 8 << 20,
        "/metrics is {} bytes",
        metrics.len()
    );
    assert!(agent.stop().success());
}

#[test]
fn half_open_connections_under_a_low_open_file_limit_leave_health_and_delivery_working() {
    // A webhook receiver that accepts everything.
    let hook = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_addr = hook.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in hook.incoming() {
            let Ok(mut c) = conn else { continue };
            c.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let mut buf = vec![0; 1 << 16];
            let n = std::io::Read::read(&mut c, &mut buf).unwrap_or(0);
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    });
    let config = format!(
        "window:\n  window_secs: 1\n{}alerting:\n  webhooks:\n    - {{name: hook, url: \"http://{hook_addr}/\"}}\n",
        SURGE_DETECTORS
    );
    let agent = Agent::start_with(
        &config,
        &Options {
            open_files: Some(128),
            ..Options::default()
        },
    );
    // 200 connections that send half a request line and stop.
    let mut held = Vec::new();
    for _ in 0..200 {
        if let Ok(mut c) = TcpStream::connect(agent.http) {
            let _ = c.write_all(b"GET /metr");
            held.push(c);
        }
    }
    let health = agent.wait_for(Duration::from_secs(10), |a| {
        client::get(a.http, "/healthz", Duration::from_secs(2))
            .ok()
            .filter(|r| r.status == 200)
    });
    assert!(
        health.is_some(),
        "/healthz was not answered with 200 half-open connections held"
    );
    // Alert delivery still has sockets: a surge reaches the webhook.
    let group = "orders-db".to_owned();
    let traffic = Traffic::start(agent.statsd, std::slice::from_ref(&group), &["s1", "s2"]);
    std::thread::sleep(Duration::from_secs(4));
    traffic.surge(true);
    let delivered = rx.recv_timeout(Duration::from_secs(30));
    assert!(
        delivered.is_ok_and(|body| body.contains("ErrorSurge")),
        "no alert reached the webhook while the listener was full"
    );
    drop(held);
}

/// Sends one StatsD line for each of `groups` (one datagram each).
fn statsd_groups(agent: &Agent, groups: impl Iterator<Item = String>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for g in groups {
        let line = format!("skewwatch.request:5|c|#group:{g},shard:s1");
        sock.send_to(line.as_bytes(), agent.statsd).unwrap();
    }
}

/// The active alerts of `/api/v1/alerts` named `alertname`.
fn alerts_named(agent: &Agent, alertname: &str) -> Vec<Value> {
    let (code, body) = agent.request("GET", "/api/v1/alerts", &[], b"");
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["alertname"] == alertname)
        .cloned()
        .collect()
}

#[test]
fn junk_groups_cannot_capture_the_group_cap_and_folding_is_counted_and_alerted() {
    let agent = Agent::start(
        "window:\n  window_secs: 1\nlimits:\n  max_groups: 64\n  pinned_groups: [checkout-db]\n",
    );
    // 64 junk groups fill the cap and keep sending; then the real group arrives.
    let junk = || (0..64).map(|i| format!("junk-{i}"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s, addr) = (stop.clone(), agent.statsd);
    let sender = std::thread::spawn(move || {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            for g in (0..70).map(|i| format!("junk-{i}")) {
                let line = format!("skewwatch.request:5|c|#group:{g},shard:s1");
                let _ = sock.send_to(line.as_bytes(), addr);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    statsd_groups(&agent, junk());
    std::thread::sleep(Duration::from_millis(300));
    let real = agent.wait_for(Duration::from_secs(15), |a| {
        statsd_groups(a, std::iter::once("checkout-db".to_owned()));
        a.scrape()
            .get("skewwatch_requests_per_second", &[("group", "checkout-db")])
            .filter(|r| *r > 0.0)
    });
    assert!(
        real.is_some(),
        "the pinned group was folded behind the junk"
    );
    // The six junk groups over the cap fold, and that is counted and alerted.
    let alerted = agent.wait_for(Duration::from_secs(15), |a| {
        let folded = a
            .scrape()
            .value("skewwatch_ingest_folded_total", &[("level", "group")]);
        let alert = alerts_named(a, "CardinalityOverflow");
        (folded > 0.0 && alert.iter().any(|x| x["labels"]["group"] == "__other__")).then_some(())
    });
    assert!(
        alerted.is_some(),
        "group folding was not counted and alerted"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
}

#[test]
fn when_junk_groups_go_quiet_a_new_group_takes_their_place() {
    let agent = Agent::start("window:\n  window_secs: 1\nlimits:\n  max_groups: 4\n");
    statsd_groups(&agent, (0..4).map(|i| format!("junk-{i}")));
    // Two windows later the junk is idle; the real group (not pinned) gets a slot.
    let real = agent.wait_for(Duration::from_secs(15), |a| {
        statsd_groups(a, std::iter::once("checkout-db".to_owned()));
        a.scrape()
            .get("skewwatch_requests_per_second", &[("group", "checkout-db")])
            .filter(|r| *r > 0.0)
    });
    assert!(real.is_some(), "an idle group did not give up its slot");
}

#[test]
fn a_window_of_two_to_the_sixty_four_requests_saturates_instead_of_wrapping() {
    // 2^24 StatsD counter lines of 2^40 requests each: 2^64 in one window. The window is long
    // and starts just before the flood, so the whole flood lands in it.
    let agent = Agent::start("window:\n  window_secs: 20\n");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    std::thread::sleep(Duration::from_secs_f64(20.0 - now % 20.0 + 0.2));
    let line = "skewwatch.request:1099511627776|c|#group:flood,shard:s1\n";
    let per_datagram = 1000;
    let datagram = line.repeat(per_datagram);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let lines: usize = 1 << 24;
    let started = Instant::now();
    for i in 0..lines.div_ceil(per_datagram) {
        sock.send_to(datagram.as_bytes(), agent.statsd).unwrap();
        // Paced at 2 M lines/s, within what one core parses, so the kernel drops nothing.
        let due = Duration::from_secs_f64((i * per_datagram) as f64 / 2e6);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    let group = agent
        .wait_for(Duration::from_secs(40), |a| {
            let (_, body) = a.request("GET", "/api/v1/status?group=flood", &[], b"");
            let v: Value = serde_json::from_str(&body).ok()?;
            v["window"]["groups"][0]["requests"]
                .as_u64()
                .filter(|r| *r > 1 << 40)
                .map(|_| v["window"]["groups"][0].clone())
        })
        .expect("the flood's window did not close");
    let s = agent.scrape();
    let kernel_drops = s.value("skewwatch_statsd_kernel_drops_total", &[]);
    assert_eq!(
        kernel_drops, 0.0,
        "the kernel dropped datagrams; the test sent too fast"
    );
    assert_eq!(group["requests"].as_u64(), Some(u64::MAX), "{group}");
    assert_eq!(
        s.value("skewwatch_ingest_requests_total", &[("source", "statsd")]),
        u64::MAX as f64
    );
}

#[test]
fn sighup_and_post_reload_apply_a_good_config_and_keep_the_last_good_one_on_a_bad() {
    let base = "window:\n  window_secs: 1\nauth:\n  bearer_token_env: SKEWWATCH_TEST_TOKEN\n";
    let mut agent = Agent::start_with(
        base,
        &Options {
            env: &[("SKEWWATCH_TEST_TOKEN", "t0ken")],
            ..Options::default()
        },
    );
    let windows = |a: &Agent| a.scrape().value("skewwatch_windows_closed_total", &[]);
    let reloaded = |a: &Agent| {
        a.scrape()
            .value("skewwatch_config_last_reload_successful", &[])
    };
    agent.wait_for(Duration::from_secs(10), |a| {
        (windows(a) >= 2.0).then_some(())
    });

    // A good change by SIGHUP: applied, the process lives on, windows keep closing.
    let tuned = format!("{base}detectors:\n  error_surge:\n    min_requests: 500\n");
    std::fs::write(agent.config_path(), &tuned).unwrap();
    let before = windows(&agent);
    agent.signal("HUP");
    let applied = agent.wait_for(Duration::from_secs(10), |a| {
        a.drain_log()
            .iter()
            .any(|l| l.contains("Configuration reloaded"))
            .then_some(())
    });
    assert!(applied.is_some(), "no reload logged");
    assert!(agent.is_running(), "SIGHUP killed the agent");
    assert_eq!(reloaded(&agent), 1.0);
    agent.wait_for(Duration::from_secs(10), |a| {
        (windows(a) >= before + 2.0).then_some(())
    });

    // A bad config: refused with every problem, the last good one keeps running.
    std::fs::write(
        agent.config_path(),
        "window:\n  window_secs: 0\nlimits:\n  max_groups: 0\n",
    )
    .unwrap();
    agent.signal("HUP");
    let refused = agent.wait_for(Duration::from_secs(10), |a| {
        (reloaded(a) == 0.0).then_some(())
    });
    assert!(refused.is_some(), "a bad config did not set the gauge to 0");
    assert!(agent.is_running());
    let mut log = String::new();
    let named = agent.wait_for(Duration::from_secs(10), |a| {
        log.push_str(&a.drain_log().join("\n"));
        (log.contains("window.window_secs") && log.contains("limits.max_groups")).then_some(())
    });
    assert!(named.is_some(), "the problems were not all logged: {log}");

    // POST /-/reload is token-protected, reports the problems, then succeeds once fixed.
    let json = [("Content-Type", "application/json")];
    assert_eq!(agent.request("POST", "/-/reload", &json, b"").0, 401);
    let auth = [
        ("Content-Type", "application/json"),
        ("Authorization", "bearer t0ken"),
    ];
    let (code, body) = agent.request("POST", "/-/reload", &auth, b"");
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("window.window_secs"), "{body}");
    std::fs::write(
        agent.config_path(),
        format!("{tuned}limits:\n  http_body_limit_bytes: 2048\n"),
    )
    .unwrap();
    let (code, body) = agent.request("POST", "/-/reload", &auth, b"");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("needs a restart to apply: limits.http_body_limit_bytes"),
        "{body}"
    );
    assert_eq!(reloaded(&agent), 1.0);
    // No content type, as `curl -X POST` sends it: accepted (the endpoint reads no body); a
    // form post, which a web page can send across sites: refused.
    let bearer = [("Authorization", "bearer t0ken")];
    let (code, body) = agent.request("POST", "/-/reload", &bearer, b"");
    assert_eq!(code, 200, "{body}");
    let form = [
        ("Authorization", "bearer t0ken"),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    assert_eq!(agent.request("POST", "/-/reload", &form, b"").0, 415);
    assert!(agent.stop().success());
}

#[test]
fn a_restart_mid_incident_neither_resolves_nor_repages_nor_relearns() {
    let Some(am) = Alertmanager::start() else {
        return;
    };
    let state = TempDir::new("state");
    // 1 s windows, a 2 s resend and ten warm-up windows: before, Alertmanager dropped the
    // alert 8 s after a restart and it never came back while the surge went on.
    let config = format!(
        r#"window:
  window_secs: 1
state:
  path: {}
  save_every_windows: 1
detectors:
  error_surge:
    min_requests: 20
    min_error_ratio: 0.05
    consecutive_windows: 1
    warmup_windows: 10
    alert: {{severity: critical, for_secs: 0, keep_firing_for_secs: 0}}
  hot_shard: {{alert: {{enabled: false}}}}
  hot_key: {{alert: {{enabled: false}}}}
  latency_skew: {{alert: {{enabled: false}}}}
  cache_hit_collapse: {{alert: {{enabled: false}}}}
  fast_failure_sink: {{alert: {{enabled: false}}}}
  shard_failing: {{alert: {{enabled: false}}}}
alerting:
  resend_interval_secs: 2
  alertmanagers:
    - url: "http://{}"
"#,
        state.0.join("state.json").display(),
        am.addr
    );
    let group = "checkout-db".to_owned();
    let mut agent = Agent::start(&config);
    let mut traffic = Traffic::start(agent.statsd, std::slice::from_ref(&group), &["s1", "s2"]);
    std::thread::sleep(Duration::from_secs(13));
    traffic.surge(true);
    let find = |am: &Alertmanager| {
        am.alerts()
            .into_iter()
            .find(|a| a["labels"]["alertname"] == "ErrorSurge")
    };
    let fired =
        poll(Duration::from_secs(20), || find(&am)).expect("ErrorSurge never reached Alertmanager");
    let starts_at = fired["startsAt"].clone();

    // Restart: the surge goes on throughout.
    assert!(agent.stop().success());
    drop(traffic);
    agent = Agent::start(&config);
    traffic = Traffic::start(agent.statsd, std::slice::from_ref(&group), &["s1", "s2"]);
    traffic.surge(true);
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(40) {
        let a = find(&am).unwrap_or_else(|| {
            panic!(
                "ErrorSurge left Alertmanager {:?} after the restart",
                watched.elapsed()
            )
        });
        assert_eq!(a["startsAt"], starts_at, "a second page: {a}");
        std::thread::sleep(Duration::from_millis(500));
    }
    // The agent itself kept the alert firing, on restored baselines.
    let own = alerts_named(&agent, "ErrorSurge");
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(own[0]["state"], "firing");
    drop(traffic);
}

#[test]
fn reserved_renderings_never_collide_with_literal_names() {
    let agent = Agent::start("window:\n  window_secs: 1\nlimits:\n  max_shards_per_group: 2\n");
    let body = [
        r#"{"group":"g","shard":"a","key":""}"#,
        r#"{"group":"g","shard":"a","key":"(empty)"}"#,
        r#"{"group":"g","shard":"a","key":"__other__"}"#,
        r#"{"group":"g","shard":"__other__"}"#,
        r#"{"group":"g","shard":"c"}"#,
        r#"{"group":"g","shard":"d"}"#,
    ]
    .join("\n");
    let scrape = agent
        .wait_for(Duration::from_secs(10), |a| {
            let (code, _) = a.post_ndjson(body.as_bytes(), &[]);
            assert_eq!(code, 200);
            let s = a.scrape();
            (s.all("skewwatch_key_share_ratio", &[("group", "g")]).len() >= 3).then_some(s)
        })
        .expect("no window with the keys");
    let mut seen = std::collections::BTreeSet::new();
    for sample in &scrape.samples {
        assert!(
            seen.insert((sample.name.clone(), sample.labels.clone())),
            "duplicate series {} {:?}",
            sample.name,
            sample.labels
        );
    }
    let keys: Vec<&str> = scrape
        .all("skewwatch_key_share_ratio", &[("group", "g")])
        .iter()
        .map(|s| s.labels["key"].as_str())
        .collect();
    assert!(
        keys.contains(&"(empty)") && keys.contains(&"\\(empty)"),
        "{keys:?}"
    );
    assert!(keys.contains(&"\\__other__"), "{keys:?}");
    let shards: Vec<&str> = scrape
        .all("skewwatch_shard_share_ratio", &[("group", "g")])
        .iter()
        .map(|s| s.labels["shard"].as_str())
        .collect();
    assert!(
        shards.contains(&"\\__other__") && shards.contains(&"__other__"),
        "{shards:?}"
    );
}

#[test]
fn the_http_guards_hold() {
    let agent = Agent::start_with(
        "auth:\n  bearer_token_env: SKEWWATCH_TEST_TOKEN\n",
        &Options {
            env: &[("SKEWWATCH_TEST_TOKEN", "t0ken")],
            ..Options::default()
        },
    );
    let record = br#"{"group":"g","shard":"s"}"#;
    // No token: 401 before the body is read, whatever its size.
    let big = vec![b'x'; 8 << 20];
    assert_eq!(agent.post_ndjson(&big, &[]).0, 401);
    // The scheme is case-insensitive; the token is not.
    assert_eq!(
        agent
            .post_ndjson(record, &[("Authorization", "bearer t0ken")])
            .0,
        200
    );
    assert_eq!(
        agent
            .post_ndjson(record, &[("Authorization", "Bearer T0KEN")])
            .0,
        401
    );
    // A form or text post (what a web page can send across sites) is refused.
    let auth = ("Authorization", "Bearer t0ken");
    for ct in [
        "application/x-www-form-urlencoded",
        "text/plain",
        "multipart/form-data",
    ] {
        let (code, _) = agent.request(
            "POST",
            "/api/v1/observations",
            &[("Content-Type", ct), auth],
            record,
        );
        assert_eq!(code, 415, "{ct}");
    }
}

#[test]
fn a_listener_off_loopback_without_a_token_refuses_to_start() {
    let out = std::process::Command::new(skewwatch_e2e::agent::binary())
        .args([
            "run",
            "--http-listen",
            "0.0.0.0:0",
            "--statsd-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("listen.http") && err.contains("allow_unauthenticated"),
        "{err}"
    );
    // With the explicit opt-out it starts.
    let agent = Agent::start_with(
        "auth:\n  allow_unauthenticated: true\n",
        &Options {
            http_listen: Some("0.0.0.0:0"),
            ..Options::default()
        },
    );
    assert_eq!(
        client::get(
            ([127, 0, 0, 1], agent.http.port()).into(),
            "/healthz",
            Duration::from_secs(5)
        )
        .unwrap()
        .status,
        200
    );
}
