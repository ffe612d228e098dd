//! HAProxy proven live: Debian's real `haproxy` (2.6) with `balance leastconn` in front of four
//! real HTTP backends on loopback (Python's `http.server`), one of which answers 404 to
//! everything. A small concurrent load goes through HAProxy; skewwatch reads HAProxy's built-in
//! Prometheus exporter (`http-request use-service prometheus-exporter`) with the recipe of
//! docs/ingest.md (`shard: "{proxy}/{server}"`, `outcome_label: code`, `4xx` as `not_found`).
//! The per-server request and failure counts in skewwatch must equal HAProxy's own counters,
//! read from its stats socket (`show stat`, a CSV independent of the exporter).
//!
//! A missing `haproxy` is a loud skip locally and a failure in CI (`.ci/run` installs it).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use skewwatch_e2e::agent::{Agent, TempDir, http_request};
use skewwatch_e2e::alertmanager::{free_port, poll};
use skewwatch_e2e::tools;

/// Requests sent through HAProxy, from [`CLIENTS`] threads at once.
const REQUESTS: usize = 400;
const CLIENTS: usize = 8;
/// The backends, `(name, HTTP status it answers)`.
const BACKENDS: [(&str, u16); 4] = [("s1", 200), ("s2", 200), ("s3", 200), ("s4", 404)];

/// A backend: Python's `http.server` answering every GET with one status, after a short
/// think time so that connections overlap and `leastconn` has something to balance. It binds
/// port 0 and prints the port.
const BACKEND_PY: &str = r#"
import http.server, sys, time
status = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        time.sleep(0.002 if status == 200 else 0.0)
        body = b"ok\n" if status == 200 else b"no such item\n"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// A child process killed when the test ends, however it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts one backend answering `status`; returns it and its port.
fn backend(python: &Path, status: u16) -> (Guard, u16) {
    let mut child = Command::new(python)
        .args(["-c", BACKEND_PY, &status.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting a Python backend");
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the backend printed {line:?}, not its port"));
    (guard, port)
}

/// HAProxy's configuration: the load-balanced frontend, the exporter's frontend and the stats
/// socket.
fn haproxy_config(front: u16, exporter: u16, socket: &Path, servers: &[(&str, u16)]) -> String {
    let servers: String = servers
        .iter()
        .map(|(name, port)| format!("  server {name} 127.0.0.1:{port}\n"))
        .collect();
    format!(
        "global\n  stats socket {socket} mode 600 level admin\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend fe\n  bind 127.0.0.1:{front}\n  default_backend be\n\
         frontend prom\n  bind 127.0.0.1:{exporter}\n  \
         http-request use-service prometheus-exporter if {{ path /metrics }}\n\
         backend be\n  balance leastconn\n{servers}",
        socket = socket.display()
    )
}

/// One `show stat` on HAProxy's stats socket: per server of backend `be`, the responses by
/// status class (`hrsp_1xx` .. `hrsp_5xx`, `hrsp_other`).
fn show_stat(socket: &Path) -> HashMap<String, HashMap<String, u64>> {
    let mut conn = UnixStream::connect(socket).expect("HAProxy's stats socket");
    conn.write_all(b"show stat\n").unwrap();
    let mut csv = String::new();
    conn.read_to_string(&mut csv).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .and_then(|h| h.strip_prefix("# "))
        .expect("a CSV header")
        .split(',')
        .collect();
    let mut servers = HashMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let row: HashMap<&str, &str> = header.iter().copied().zip(line.split(',')).collect();
        if row.get("pxname") != Some(&"be") || matches!(row.get("svname"), Some(&"BACKEND")) {
            continue;
        }
        let counts = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"]
            .iter()
            .map(|c| {
                let v = row
                    .get(format!("hrsp_{c}").as_str())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no hrsp_{c} in {line}"));
                (c.to_string(), v)
            })
            .collect();
        servers.insert(row["svname"].to_owned(), counts);
    }
    servers
}

/// Sends [`REQUESTS`] GETs through HAProxy from [`CLIENTS`] threads; returns the statuses seen.
fn load(front: SocketAddr) -> HashMap<u16, usize> {
    let threads: Vec<_> = (0..CLIENTS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut seen = HashMap::new();
                for i in (t..REQUESTS).step_by(CLIENTS) {
                    let (status, _) = http_request(front, "GET", &format!("/item/{i}"), &[], b"");
                    *seen.entry(status).or_insert(0) += 1;
                }
                seen
            })
        })
        .collect();
    let mut seen = HashMap::new();
    for t in threads {
        for (status, n) in t.join().unwrap() {
            *seen.entry(status).or_insert(0) += n;
        }
    }
    seen
}

fn haproxy_binary() -> Option<PathBuf> {
    tools::require("haproxy", &[]).or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/haproxy");
        sbin.is_file().then_some(sbin)
    })
}

#[test]
fn haproxy_exporter_counts_per_server_equal_haproxys_own() {
    let Some(haproxy) = haproxy_binary() else {
        return;
    };
    let Some(python) = tools::require("python3", &[]) else {
        return;
    };
    let dir = TempDir::new("haproxy");
    let mut guards = Vec::new();
    let mut servers = Vec::new();
    for (name, status) in BACKENDS {
        let (guard, port) = backend(&python, status);
        guards.push(guard);
        servers.push((name, port));
    }
    let (front, exporter) = (free_port(), free_port());
    let socket = dir.0.join("stats.sock");
    let cfg = dir.0.join("haproxy.cfg");
    std::fs::write(&cfg, haproxy_config(front, exporter, &socket, &servers)).unwrap();
    let check = Command::new(&haproxy)
        .args(["-c", "-q", "-f"])
        .arg(&cfg)
        .status()
        .unwrap();
    assert!(check.success(), "haproxy -c refused the configuration");
    // `-db`: in the foreground, so the guard's kill stops it.
    guards.push(Guard(
        Command::new(&haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(Stdio::null())
            .spawn()
            .expect("starting haproxy"),
    ));
    let exporter_addr: SocketAddr = format!("127.0.0.1:{exporter}").parse().unwrap();
    poll(Duration::from_secs(20), || {
        TcpStream::connect(exporter_addr).ok()?;
        let (status, body) = http_request(exporter_addr, "GET", "/metrics", &[], b"");
        (status == 200 && body.contains("haproxy_server_http_responses_total")).then_some(())
    })
    .expect("HAProxy's exporter answers");

    // The recipe of docs/ingest.md, with a short interval for the test.
    let agent = Agent::start(&format!(
        r#"window:
  window_secs: 1
scrape:
  - name: haproxy
    url: "http://127.0.0.1:{exporter}/metrics"
    interval_secs: 0.5
    timeout_secs: 0.5
    metrics: [haproxy_server_http_responses_total]
    group: "{{proxy}}"
    shard: "{{proxy}}/{{server}}"
    outcome_label: code
    outcomes:
      - match: "4xx"
        outcome: not_found
"#
    ));
    // The first scrape is the baseline; the load must come after it.
    agent
        .wait_for(Duration::from_secs(20), |a| {
            let s = a.scrape();
            (s.get("skewwatch_scrapes_total", &[("job", "haproxy")])? >= 1.0).then_some(())
        })
        .expect("skewwatch scraped HAProxy");

    let seen = load(format!("127.0.0.1:{front}").parse().unwrap());
    assert_eq!(seen.values().sum::<usize>(), REQUESTS);
    assert!(seen.get(&404).is_some_and(|&n| n > 0), "{seen:?}");

    let stat = show_stat(&socket);
    assert_eq!(stat.len(), BACKENDS.len(), "{stat:?}");
    let haproxy_total: u64 = stat.values().flat_map(|c| c.values()).sum();
    assert_eq!(
        haproxy_total, REQUESTS as u64,
        "HAProxy's own count: {stat:?}"
    );
    let g = ("group", "be");
    let s = agent
        .wait_for(Duration::from_secs(30), |a| {
            let s = a.scrape();
            (s.sum("skewwatch_shard_requests_total", &[g]) >= REQUESTS as f64).then_some(s)
        })
        .unwrap_or_else(|| panic!("the load never reached skewwatch's counters"));
    for (server, counts) in &stat {
        let shard = format!("be/{server}");
        let skew = |outcome: &str| {
            s.sum(
                "skewwatch_shard_requests_total",
                &[g, ("shard", &shard), ("outcome", outcome)],
            )
        };
        let all = s.sum("skewwatch_shard_requests_total", &[g, ("shard", &shard)]);
        let ok = counts["1xx"] + counts["2xx"] + counts["3xx"];
        let errors = counts["5xx"] + counts["other"];
        assert_eq!(
            all,
            (ok + counts["4xx"] + errors) as f64,
            "{shard} requests"
        );
        assert_eq!(skew("ok"), ok as f64, "{shard} ok");
        assert_eq!(skew("not_found"), counts["4xx"] as f64, "{shard} not_found");
        assert_eq!(skew("error"), errors as f64, "{shard} error");
    }
    // The 404 backend's answers are its not_found, and every 404 the clients saw is there.
    let not_found = s.sum(
        "skewwatch_shard_requests_total",
        &[g, ("shard", "be/s4"), ("outcome", "not_found")],
    );
    assert_eq!(not_found, seen[&404] as f64);
    assert!(not_found > 0.0);
    assert_eq!(
        s.sum("skewwatch_ingest_rejected_total", &[("source", "scrape")]),
        0.0
    );
    drop(guards);
}
