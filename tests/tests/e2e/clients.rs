//! End-to-end with the client libraries services already use, run for real on loopback: the
//! Python `datadog` DogStatsD client and the `statsd` client through `statsd.mappings`, the npm
//! `hot-shots` client, and a `/metrics` page served by the Python `prometheus_client` read by a
//! `scrape:` job. Each sends the known load of `tests/clients/load.py` (one hot shard, one hot
//! key); the test asserts exact counts, shares and key shares on `/metrics`, and that the hot
//! shard is the busiest one named there.
//!
//! A missing client is a loud skip locally and a failure in CI (`.ci/run` installs them).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use skewwatch_e2e::agent::Agent;
use skewwatch_e2e::prom::Scrape;
use skewwatch_e2e::tools;

const WINDOW_SECS: f64 = 2.0;
/// Requests per shard and per key in `tests/clients/load.py`.
const SHARDS: [(&str, f64); 4] = [("s0", 50.0), ("s1", 10.0), ("s2", 10.0), ("s3", 10.0)];
const KEYS: [(&str, f64); 3] = [("k-hot", 40.0), ("k-a", 10.0), ("k-b", 30.0)];
const TOTAL: f64 = 80.0;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// `node` when `tests/clients/node_modules` holds hot-shots.
fn node_with_hot_shots() -> Option<PathBuf> {
    let node = tools::require("node", &["nodejs"])?;
    if clients_dir()
        .join("node_modules/hot-shots/package.json")
        .is_file()
    {
        Some(node)
    } else {
        tools::missing("the npm package `hot-shots` (`npm ci` in tests/clients) is not installed")
    }
}

/// A client script that prints `ready`, sends its load on `go`, and prints `done`.
struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn start(program: &Path, args: &[&str]) -> Client {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(clients_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Client {
            child,
            stdin,
            stdout,
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the client exited early");
        line.trim().to_owned()
    }

    /// Sends `go` just after a window boundary, so the whole load lands in one window, and
    /// waits until the client says it has sent it.
    fn send_load(&mut self) {
        align_to_window_start();
        self.stdin.write_all(b"go\n").unwrap();
        self.stdin.flush().unwrap();
        assert_eq!(self.line(), "done");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sleeps until 0.1 s into the next window (windows are aligned to multiples of their length
/// since the epoch), unless that is where we are.
fn align_to_window_start() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let phase = now % WINDOW_SECS;
    if !(0.1..0.3).contains(&phase) {
        let wait = (WINDOW_SECS - phase + 0.1) % WINDOW_SECS;
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
}

fn config(extra: &str) -> String {
    format!("window:\n  window_secs: {WINDOW_SECS}\n{extra}")
}

/// The exact counts in the cumulative counters, then the shares of the window that held the
/// whole load, and the hot shard named as the busiest.
fn check_load(agent: &Agent, group: &str) -> Scrape {
    let g = ("group", group);
    let s = check_load_counts_only(agent, group);
    for (key, n) in KEYS {
        let got = s.value("skewwatch_key_requests_total", &[g, ("key", key)]);
        assert_eq!(got, n, "{group} key {key}");
    }
    let w = agent
        .wait_for(Duration::from_secs_f64(WINDOW_SECS * 3.0), |a| {
            let s = a.scrape();
            let rps = s.get("skewwatch_requests_per_second", &[g])?;
            ((rps * WINDOW_SECS - TOTAL).abs() < 1e-6).then_some(s)
        })
        .unwrap_or_else(|| panic!("{group}: no window held the whole load"));
    for (shard, n) in SHARDS {
        let share = w.value("skewwatch_shard_share_ratio", &[g, ("shard", shard)]);
        assert!(
            (share - n / TOTAL).abs() < 1e-9,
            "{group} {shard} share {share}"
        );
    }
    for (key, n) in KEYS {
        let share = w.value("skewwatch_key_share_ratio", &[g, ("key", key)]);
        assert!(
            (share - n / TOTAL).abs() < 1e-9,
            "{group} {key} share {share}"
        );
    }
    let busiest = w
        .all("skewwatch_shard_share_ratio", &[g])
        .into_iter()
        .max_by(|a, b| a.value.total_cmp(&b.value))
        .and_then(|s| s.labels.get("shard").cloned());
    assert_eq!(busiest.as_deref(), Some("s0"), "{group}: the hot shard");
    s
}

fn counter(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.get(name, labels).unwrap_or(0.0)
}

#[test]
fn datadog_dogstatsd_tags_through_mappings() {
    let Some(python) = tools::require_python(&["datadog"]) else {
        return;
    };
    let agent = Agent::start(&config(
        r#"statsd:
  mappings:
    - match: "db.query_time"
      types: [ms]
      group: dd-db
      shard: "${tag:shard}"
      key: "${tag:table}"
    - match: "cache.get"
      types: [c]
      group: dd-cache
      shard: "${tag:shard}"
      cache: "${tag:result}"
"#,
    ));
    let port = agent.statsd.port().to_string();
    let mut client = Client::start(&python, &["dogstatsd.py", "127.0.0.1", &port]);
    assert_eq!(client.line(), "ready");
    client.send_load();
    let s = check_load(&agent, "dd-db");
    let cache = |shard: &str, result: &str| {
        counter(
            &s,
            "skewwatch_shard_cache_requests_total",
            &[("group", "dd-cache"), ("shard", shard), ("result", result)],
        )
    };
    assert_eq!(
        [cache("s0", "miss"), cache("s0", "hit"), cache("s1", "hit")],
        [15.0, 5.0, 20.0]
    );
    let statsd = [("source", "statsd")];
    let skipped = [("source", "statsd"), ("reason", "unmapped")];
    assert_eq!(counter(&s, "skewwatch_ingest_skipped_total", &skipped), 2.0);
    assert_eq!(s.sum("skewwatch_ingest_rejected_total", &statsd), 0.0);
}

#[test]
fn plain_statsd_names_through_a_glob_mapping() {
    let Some(python) = tools::require_python(&["statsd"]) else {
        return;
    };
    let agent = Agent::start(&config(
        r#"statsd:
  mappings:
    - match: "shop.orders.*.*.get"
      types: [ms]
      group: statsd-orders
      shard: "$1"
      key: "$2"
"#,
    ));
    let port = agent.statsd.port().to_string();
    let mut client = Client::start(&python, &["plain_statsd.py", "127.0.0.1", &port]);
    assert_eq!(client.line(), "ready");
    client.send_load();
    let s = check_load(&agent, "statsd-orders");
    // Every request was a 12 ms timer.
    let bucket = |le: &str| {
        counter(
            &s,
            "skewwatch_shard_request_duration_seconds_bucket",
            &[("group", "statsd-orders"), ("shard", "s0"), ("le", le)],
        )
    };
    assert_eq!([bucket("0.01"), bucket("0.025")], [0.0, 50.0]);
}

#[test]
fn hot_shots_tags_through_a_regex_mapping() {
    let Some(node) = node_with_hot_shots() else {
        return;
    };
    let agent = Agent::start(&config(
        r#"statsd:
  mappings:
    - match: 'rpc\.(\w+)\.latency'
      match_type: regex
      group: "rpc-$1"
      shard: "${tag:shard}"
      key: "${tag:key}"
"#,
    ));
    let port = agent.statsd.port().to_string();
    let mut client = Client::start(&node, &["hot_shots.js", "127.0.0.1", &port]);
    assert_eq!(client.line(), "ready");
    client.send_load();
    check_load(&agent, "rpc-users");
}

#[test]
fn prometheus_client_target_through_scrape_jobs() {
    let Some(python) = tools::require_python(&["prometheus_client"]) else {
        return;
    };
    let mut target = Client::start(&python, &["prom_target.py"]);
    let port = target.line();
    // One job reads the histogram, one the keyed counter (two groups, so nothing is counted
    // twice), and one points at a closed port.
    let agent = Agent::start(&config(&format!(
        r#"scrape:
  - name: latency
    url: "http://127.0.0.1:{port}/metrics"
    interval_secs: 0.5
    timeout_secs: 0.5
    group: prom-latency
    metrics: [db_request_duration_seconds]
  - name: keys
    url: "http://127.0.0.1:{port}/metrics"
    interval_secs: 0.5
    timeout_secs: 0.5
    group: prom-keys
    metrics: [db_requests_total]
    key_label: key
  - name: down
    url: "http://127.0.0.1:1/metrics"
    interval_secs: 0.5
    timeout_secs: 0.5
    metrics: [db_requests_total]
"#
    )));
    // The first scrape of each job is its baseline: the 1,000 requests per series from before
    // must not count.
    agent
        .wait_for(Duration::from_secs(10), |a| {
            let s = a.scrape();
            let done = |job: &str| counter(&s, "skewwatch_scrapes_total", &[("job", job)]) >= 1.0;
            (done("latency") && done("keys")).then_some(())
        })
        .expect("both jobs scraped");
    target.send_load();
    let s = check_load(&agent, "prom-keys");
    let latency = check_load_counts_only(&agent, "prom-latency");
    // 12 ms requests sit in the (0.01, 0.05] bucket and stand for its middle, 30 ms.
    let bucket = |le: &str| {
        counter(
            &latency,
            "skewwatch_shard_request_duration_seconds_bucket",
            &[("group", "prom-latency"), ("shard", "s0"), ("le", le)],
        )
    };
    assert_eq!([bucket("0.025"), bucket("0.05")], [0.0, 50.0]);
    let failed = counter(
        &s,
        "skewwatch_scrape_failures_total",
        &[("job", "down"), ("reason", "connect")],
    );
    assert!(failed >= 1.0, "the closed port is counted as a failure");
    assert_eq!(
        s.sum("skewwatch_ingest_rejected_total", &[("source", "scrape")]),
        0.0
    );
}

/// The exact per-shard counts of a group without keys, and the hot shard's share.
fn check_load_counts_only(agent: &Agent, group: &str) -> Scrape {
    let g = ("group", group);
    let s = agent
        .wait_for(Duration::from_secs_f64(WINDOW_SECS * 4.0), |a| {
            let s = a.scrape();
            (s.sum("skewwatch_shard_requests_total", &[g]) >= TOTAL).then_some(s)
        })
        .unwrap_or_else(|| panic!("{group}: the load never reached the counters"));
    for (shard, n) in SHARDS {
        let got = s.sum("skewwatch_shard_requests_total", &[g, ("shard", shard)]);
        assert_eq!(got, n, "{group} shard {shard}");
    }
    s
}
