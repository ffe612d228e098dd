//! Starting the real `skewwatch` binary on free loopback ports and talking to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::prom::Scrape;

/// The `skewwatch` binary: `$SKEWWATCH_BIN`, or `target/<profile>/skewwatch` next to the test
/// executable (built by `cargo test --workspace`).
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SKEWWATCH_BIN") {
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

/// Takes `field=value` out of a log line.
fn log_field<'a>(line: &'a str, field: &str) -> Option<&'a str> {
    let start = line.find(&format!("{field}="))? + field.len() + 1;
    let rest = &line[start..];
    Some(rest.split([' ', '"']).next().unwrap_or(rest))
}

impl Agent {
    /// Starts `skewwatch run` with `config_yaml` on ports chosen by the OS and waits until it
    /// logs where it listens.
    pub fn start(config_yaml: &str) -> Agent {
        Agent::start_with_env(config_yaml, &[])
    }

    /// Like [`Agent::start`], with extra environment variables for the child only.
    pub fn start_with_env(config_yaml: &str, env: &[(&str, &str)]) -> Agent {
        let dir = TempDir::new("agent");
        let cfg = dir.0.join("config.yaml");
        std::fs::write(&cfg, config_yaml).unwrap();
        let mut child = Command::new(binary())
            .args(["run", "--config"])
            .arg(&cfg)
            .args([
                "--http-listen",
                "127.0.0.1:0",
                "--statsd-listen",
                "127.0.0.1:0",
            ])
            .envs(env.iter().copied())
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
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("skewwatch did not log `Listening.` within 30 s");
            };
            if line.contains("Listening.") {
                let http = log_field(&line, "http").unwrap().parse().unwrap();
                let statsd = log_field(&line, "statsd").unwrap().parse().unwrap();
                return Agent {
                    child,
                    http,
                    statsd,
                    log: rx,
                    _dir: dir,
                };
            }
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

    /// Scrapes `/metrics`.
    pub fn scrape(&self) -> Scrape {
        let (code, body) = self.request("GET", "/metrics", &[], b"");
        assert_eq!(code, 200, "{body}");
        Scrape::parse(&body)
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

    /// Sends SIGTERM and waits for the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
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

/// A minimal HTTP/1.1 client (Connection: close), enough for tests and free of extra runtimes.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // The server may answer (413) and close before reading a large body.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (code, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
