//! A real Alertmanager (Debian `prometheus-alertmanager`, 0.25) on a loopback port, for the
//! delivery tests.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::agent::{TempDir, http_request};
use crate::tools;

/// A port free right now (the small race until Alertmanager binds it is accepted).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` every 50 ms until it returns `Some` or `timeout` passes.
pub fn poll<T>(timeout: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    poll_every(Duration::from_millis(50), timeout, f)
}

/// Polls `f` every `every` until it returns `Some` or `timeout` passes: for checks that are
/// themselves costly (a process started per try).
pub fn poll_every<T>(
    every: Duration,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// A running Alertmanager, killed on drop.
pub struct Alertmanager {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    _dir: TempDir,
}

impl Alertmanager {
    /// Starts Alertmanager on a free loopback port and waits until it is ready; `None` (after
    /// a loud message) when the binary is missing outside CI.
    pub fn start() -> Option<Alertmanager> {
        Alertmanager::start_with_config(
            "route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n",
        )
    }

    /// Like [`Alertmanager::start`], with `config` as its alertmanager.yml.
    pub fn start_with_config(config: &str) -> Option<Alertmanager> {
        let bin = tools::require("prometheus-alertmanager", &["alertmanager"])?;
        let dir = TempDir::new("alertmanager");
        let cfg = dir.0.join("alertmanager.yml");
        std::fs::write(&cfg, config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut child = Command::new(&bin)
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
        Some(am)
    }

    /// `GET /api/v2/alerts`: the alerts Alertmanager holds as active (unresolved).
    pub fn alerts(&self) -> Vec<Value> {
        let (code, body) = http_request(self.addr, "GET", "/api/v2/alerts", &[], b"");
        assert_eq!(code, 200, "{body}");
        match serde_json::from_str(&body).expect("alerts JSON") {
            Value::Array(a) => a,
            v => panic!("not an array: {v}"),
        }
    }
}

impl Alertmanager {
    /// Kills it now (an instance of a pair lost mid-incident); dropping it afterwards is a
    /// no-op.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
