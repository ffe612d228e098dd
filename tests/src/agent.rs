//! Starting the real `skewwatch` binary on free loopback ports and talking to it.
//!
//! The agent is started with port 0 for both listeners and `--listen-addresses-file`; it
//! writes the ports the OS chose there once every listener is bound, so nothing here reads
//! its log to find them.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use skewwatch::app::BoundAddrs;
use skewwatch::client;
use skewwatch::client::text::Scrape;

/// Detector settings for a quick ErrorSurge on 1 s windows, every other alert off: ErrorSurge
/// learns its baseline in two healthy windows, fires one window into a surge and resolves at
/// the first healthy window, so tests of what becomes of an alert (delivery, state, inputs)
/// have exactly one, on time.
pub const SURGE_DETECTORS: &str = r#"detectors:
  error_surge:
    min_requests: 20
    min_error_ratio: 0.05
    consecutive_windows: 1
    warmup_windows: 2
    alert: {severity: critical, for_secs: 0, keep_firing_for_secs: 0}
  hot_shard: {alert: {enabled: false}}
  hot_key: {alert: {enabled: false}}
  latency_skew: {alert: {enabled: false}}
  cache_hit_collapse: {alert: {enabled: false}}
  fast_failure_sink: {alert: {enabled: false}}
  shard_failing: {alert: {enabled: false}}
  capacity_headroom: {alert: {enabled: false}}
"#;

/// The `skewwatch` binary: `$SKEWWATCH_BIN`, or `target/<profile>/skewwatch` next to the test
/// executable (built by `cargo test --workspace`).
pub fn binary() -> PathBuf {
    if let Some(p) = crate::tools::env("SKEWWATCH_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/skewwatch
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("skewwatch");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds the binary) or set SKEWWATCH_BIN",
        bin.display()
    );
    bin
}

/// How to start an agent beyond its configuration.
#[derive(Debug, Default)]
pub struct Options<'a> {
    /// Extra environment variables for the child.
    pub env: &'a [(&'a str, &'a str)],
    /// An open-file limit (`ulimit -n`) for the agent alone.
    pub open_files: Option<u32>,
    /// `--http-listen` instead of `127.0.0.1:0`.
    pub http_listen: Option<&'a str>,
}

/// A running agent, stopped with SIGTERM when dropped.
pub struct Agent {
    child: Child,
    /// HTTP listener.
    pub http: SocketAddr,
    /// StatsD listener.
    pub statsd: SocketAddr,
    log: mpsc::Receiver<String>,
    _dir: TempDir,
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory under the system temp dir.
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p =
            std::env::temp_dir().join(format!("skewwatch-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Agent {
    /// Starts `skewwatch run` with `config_yaml` on ports chosen by the OS and waits until it
    /// has written where it listens.
    pub fn start(config_yaml: &str) -> Agent {
        Agent::start_with_env(config_yaml, &[])
    }

    /// Like [`Agent::start`], with extra environment variables for the child only.
    pub fn start_with_env(config_yaml: &str, env: &[(&str, &str)]) -> Agent {
        Agent::start_with(
            config_yaml,
            &Options {
                env,
                ..Options::default()
            },
        )
    }

    /// Starts `skewwatch run` with `config_yaml` and `options`.
    pub fn start_with(config_yaml: &str, options: &Options<'_>) -> Agent {
        let dir = TempDir::new("agent");
        let cfg = dir.0.join("config.yaml");
        let addrs_file = dir.0.join("addrs.json");
        std::fs::write(&cfg, config_yaml).unwrap();
        // Through a shell when the open-file limit is to be lowered for the agent alone.
        let mut cmd = match options.open_files {
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")])
                    .arg(binary());
                c
            }
            None => Command::new(binary()),
        };
        let http = options.http_listen.unwrap_or("127.0.0.1:0");
        let mut child = cmd
            .args(["run", "--config"])
            .arg(&cfg)
            .args([
                "--http-listen",
                http,
                "--statsd-listen",
                "127.0.0.1:0",
                "--listen-addresses-file",
            ])
            .arg(&addrs_file)
            .envs(options.env.iter().copied())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start skewwatch");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[agent] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let addrs: BoundAddrs = loop {
            if let Ok(bytes) = std::fs::read(&addrs_file) {
                break serde_json::from_slice(&bytes).expect("the addresses file is JSON");
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("skewwatch exited with {status} before it was listening");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("skewwatch did not write its addresses within 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Agent {
            child,
            http: addrs.http,
            statsd: addrs.statsd.expect("the StatsD listener is enabled"),
            log: rx,
            _dir: dir,
        }
    }

    /// Log lines printed since the last call.
    pub fn drain_log(&self) -> Vec<String> {
        self.log.try_iter().collect()
    }

    /// Sends one UDP datagram to the StatsD listener.
    pub fn send_statsd(&self, datagram: &[u8]) {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.send_to(datagram, self.statsd).unwrap();
    }

    /// A plain HTTP/1.1 request; returns status and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        http_request(self.http, method, path, headers, body)
    }

    /// POSTs an NDJSON body to `/api/v1/observations` with its content type and `headers`.
    pub fn post_ndjson(&self, body: &[u8], headers: &[(&str, &str)]) -> (u16, String) {
        let mut all = vec![("Content-Type", "application/x-ndjson")];
        all.extend_from_slice(headers);
        self.request("POST", "/api/v1/observations", &all, body)
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The configuration file the agent reads (rewrite it, then send SIGHUP, to reload).
    pub fn config_path(&self) -> PathBuf {
        self._dir.0.join("config.yaml")
    }

    /// Sends `signal` (`HUP`, `TERM`, ...) to the agent.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} failed");
    }

    /// True while the agent process runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// A line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`) in bytes.
    pub fn memory(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// Scrapes `/metrics`.
    pub fn scrape(&self) -> Scrape {
        let (code, body) = self.request("GET", "/metrics", &[], b"");
        assert_eq!(code, 200, "{body}");
        Scrape::parse(&body).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Polls `f` until it returns `Some` or `timeout` passes.
    pub fn wait_for<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&Agent) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f(self) {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Sends SIGTERM and waits for the exit status, scraping `/metrics` meanwhile as
    /// Prometheus would (see [`Agent::stop_timed`]).
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.stop_timed().0
    }

    /// Sends SIGTERM and waits for the exit status (killing the agent after 15 s); also
    /// returns how long the agent took to exit. Meanwhile it plays the scraper: an agent that
    /// was scraped waits for one more scrape after SIGTERM (`shutdown.final_scrape_grace_secs`),
    /// and here that scrape comes at once, so a test that read `/metrics` stops as quickly as
    /// one that did not.
    pub fn stop_timed(&mut self) -> (std::process::ExitStatus, Duration) {
        // Not `signal`: this runs from `Drop`, where a failed assertion would abort.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let sent = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return (s, sent.elapsed());
            }
            if sent.elapsed() > Duration::from_secs(15) {
                let _ = self.child.kill();
                return (self.child.wait().unwrap(), sent.elapsed());
            }
            // Refused or cut off once the server stops; only the exit counts.
            let _ = client::get(self.http, "/metrics", Duration::from_secs(1));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for the agent to exit by itself (after a signal the test sent):
    /// its exit status, or `None` while it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

/// One request on a fresh connection (the agent's own test client); returns status and body.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let resp = client::request(addr, method, path, headers, body, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"));
    (resp.status, resp.text())
}
