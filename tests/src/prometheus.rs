//! A real Prometheus (Debian's `prometheus`, 2.42) on a free loopback port, with its own
//! configuration, rule files and a temporary TSDB, and the few API calls the tests make:
//! instant queries, label values, active alerts and rule health.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use skewwatch::client;

use crate::agent::TempDir;
use crate::tools;

/// A running Prometheus, stopped when dropped.
pub struct Prometheus {
    child: Child,
    /// Its HTTP API.
    pub addr: SocketAddr,
    log: Log,
    _dir: TempDir,
}

/// `s` percent-encoded for a URL query or a form body.
pub fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A free loopback port (taken by the OS, then released for Prometheus to bind).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl Prometheus {
    /// Starts Prometheus with `config` (prometheus.yml) and `files` (name, text) beside it, and
    /// waits until it is ready. `None` when Prometheus is not installed outside CI (see
    /// [`tools::require`]).
    pub fn start(config: &str, files: &[(&str, String)]) -> Option<Prometheus> {
        let binary = tools::require("prometheus", &[])?;
        let dir = TempDir::new("prometheus");
        std::fs::write(dir.0.join("prometheus.yml"), config).unwrap();
        for (name, text) in files {
            std::fs::write(dir.0.join(name), text).unwrap();
        }
        // Another process may take the port between our probe and Prometheus' bind: retry.
        for _ in 0..3 {
            if let Some((child, addr, log)) = spawn(&binary, &dir.0) {
                return Some(Prometheus {
                    child,
                    addr,
                    log,
                    _dir: dir,
                });
            }
        }
        panic!("Prometheus did not start on three ports");
    }
}

/// The log lines a Prometheus printed.
type Log = Arc<Mutex<Vec<String>>>;

/// One start attempt: the process, where it listens and its log; `None` when it exited
/// before it was ready.
fn spawn(binary: &Path, dir: &Path) -> Option<(Child, SocketAddr, Log)> {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut child = Command::new(binary)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--storage.tsdb.retention.time=1h")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start prometheus");
    let log = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().unwrap();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client::get(addr, "/-/ready", Duration::from_secs(2))
            && r.status == 200
        {
            return Some((child, addr, log));
        }
        if let Some(status) = child.try_wait().unwrap() {
            eprintln!(
                "prometheus exited with {status}:\n{}",
                log.lock().unwrap().join("\n")
            );
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus was not ready within 30 s:\n{}",
            log.lock().unwrap().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Prometheus {
    /// The configuration of a fleet instance that reads the series of scrape job `job` from
    /// this Prometheus on `window_secs` windows, with a query lead of 1 s and two minutes of
    /// backfill: one place for the `fleet:` section the fleet tests share. Append other
    /// sections (`detectors:`) to it.
    pub fn fleet_instance_config(&self, job: &str, window_secs: f64) -> String {
        format!(
            "window:\n  window_secs: {window_secs}\n\
             fleet:\n  url: http://{}\n  selector: 'job=\"{job}\"'\n  query_lead_secs: 1\n  \
             backfill_secs: 120\n",
            self.addr
        )
    }

    /// Prometheus' log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// `GET path` (or `POST path` with a form body); the `data` of a successful API answer.
    fn api(&self, path: &str, form: Option<&str>) -> Result<Value, String> {
        let r = match form {
            Some(body) => client::request(
                self.addr,
                "POST",
                path,
                &[("Content-Type", "application/x-www-form-urlencoded")],
                body.as_bytes(),
                Duration::from_secs(30),
            ),
            None => client::get(self.addr, path, Duration::from_secs(30)),
        }
        .map_err(|e| format!("{path}: {e}"))?;
        let v: Value =
            serde_json::from_slice(&r.body).map_err(|e| format!("{path}: {e}: {}", r.text()))?;
        if v["status"] != "success" {
            return Err(format!("{path}: {v}"));
        }
        Ok(v["data"].clone())
    }

    /// The instant vector (or scalar, as one sample) `expr` evaluates to now. An error is
    /// Prometheus' message, e.g. for a query it cannot parse.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api(
            "/api/v1/query",
            Some(&format!("query={}", form_encode(expr))),
        )?;
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"].as_array().cloned().unwrap_or_default()),
            Some("scalar") => Ok(vec![data["result"].clone()]),
            other => Err(format!("{expr}: result type {other:?}")),
        }
    }

    /// The values of `label` on the series `selector` matches, sorted.
    pub fn label_values(&self, label: &str, selector: &str) -> Result<Vec<String>, String> {
        let data = self.api(
            &format!(
                "/api/v1/label/{label}/values?match[]={}",
                form_encode(selector)
            ),
            None,
        )?;
        let mut values: Vec<String> = data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        values.sort();
        Ok(values)
    }

    /// Active (pending and firing) alerts of the rules.
    pub fn alerts(&self) -> Result<Vec<Value>, String> {
        Ok(self.api("/api/v1/alerts", None)?["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Every rule of every group, with its `health` and `lastError`.
    pub fn rules(&self) -> Result<Vec<Value>, String> {
        Ok(self.api("/api/v1/rules", None)?["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect())
    }

    /// Polls `f` until it returns `Some` or `timeout` passes.
    pub fn wait_for<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&Prometheus) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f(self) {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        tools::stop_child(&mut self.child, Some("TERM"));
    }
}
