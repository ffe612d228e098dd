//! Real OpenTelemetry instrumentation read on skewwatch's defaults: the Python contrib
//! instrumentations of psycopg (PostgreSQL), pymemcache (memcached) and requests (HTTP), as
//! they ship, export spans with the SDK's OTLP/HTTP (protobuf) exporter to an agent whose
//! configuration names no attribute at all. The servers are real: PostgreSQL clusters made
//! with `initdb` and run as an unprivileged user, `memcached` processes and Python
//! `http.server`s, each on its own loopback port, one of each taking most of the calls.
//!
//! Each test checks, from `/metrics`, the exact calls per shard and outcome, shards named as
//! the library names the server (`127.0.0.1:PORT`), the failures of a known class (a
//! statement_timeout is `timeout`, a refused connection `unavailable`, HTTP 404/503/504
//! `not_found`/`unavailable`/`timeout`), and that nothing was skipped or rejected. The
//! client's own count of what failed is checked against the plan too, so a plan that did
//! not fail as meant fails the test rather than passing it on a coincidence.
//!
//! The instrumentations pin an older SDK than the one `otlp_python` uses, so `.ci/run`
//! installs them in a virtual environment of their own and names its interpreter in
//! `SKEWWATCH_OTEL_PYTHON`; without it, `python3` on PATH must import them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skewwatch_e2e::agent::{Agent, TempDir};
use skewwatch_e2e::alertmanager::free_port;
use skewwatch_e2e::tools;

/// The agent's configuration: a short window so the counters publish soon, and no `otlp:`.
const CONFIG: &str = "window:\n  window_secs: 1\n";

/// How long the counters may take to show a whole plan (generous: not a timing assertion).
const SETTLE: Duration = Duration::from_secs(30);

/// One step of a plan: `n` calls of `op` to the server on `port`, and the outcome each must
/// have in skewwatch.
struct Step {
    port: u16,
    n: u64,
    op: &'static str,
    outcome: &'static str,
}

/// A child process killed and reaped when dropped, even when the test fails.
struct Proc {
    child: Child,
    /// The signal asking it to stop cleanly first (`INT` for PostgreSQL's fast shutdown).
    stop_signal: Option<&'static str>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        tools::stop_child(&mut self.child, self.stop_signal);
    }
}

/// A Python interpreter that imports `modules`: `$SKEWWATCH_OTEL_PYTHON`, else `python3` on
/// PATH. `None` (loudly) when missing outside CI; a panic in CI.
fn python(modules: &[&str]) -> Option<PathBuf> {
    let Some(p) = tools::env("SKEWWATCH_OTEL_PYTHON") else {
        return tools::require_python(modules);
    };
    let ok = Command::new(&p)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some(p.into())
    } else {
        tools::missing(&format!(
            "SKEWWATCH_OTEL_PYTHON={} does not import {modules:?}",
            p.to_string_lossy()
        ))
    }
}

/// Whether this process runs as root (PostgreSQL then runs as `nobody`, memcached with `-u`).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program args` as `nobody` when we are root (PostgreSQL refuses to run as root).
fn unprivileged(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]);
        c.arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Makes `dir` belong to `nobody` when we are root, so an unprivileged server can write it.
fn hand_over(dir: &Path) {
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "nobody:nogroup"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "chown {}", dir.display());
    }
}

/// Waits until something accepts TCP connections on `port`.
fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} never listened on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the instrumented client of `library` on `plan` against the agent; returns what the
/// client saw: `{"calls", "failures", "statuses"}`.
fn drive(python: &Path, agent: &Agent, library: &str, plan: &[Step]) -> serde_json::Value {
    let plan_json: Vec<_> = plan
        .iter()
        .map(|s| serde_json::json!({"port": s.port, "n": s.n, "op": s.op}))
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/otel_instrumented.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(library)
        .arg(format!("http://{}", agent.http))
        .arg(serde_json::Value::from(plan_json).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the instrumented client");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    writeln!(child.stdin.take().unwrap(), "go").unwrap();
    let result = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        child.wait().unwrap().success(),
        "the {library} client failed"
    );
    serde_json::from_str(&result).unwrap_or_else(|e| panic!("{e}: {result:?}"))
}

/// Waits for the agent to count the whole plan, then checks every counter of `group`: the
/// calls per shard and outcome, and that nothing was skipped or rejected.
fn check(agent: &Agent, group: &str, plan: &[Step]) {
    let total: u64 = plan.iter().map(|s| s.n).sum();
    let mut want: BTreeMap<(String, String), f64> = BTreeMap::new();
    for s in plan {
        *want
            .entry((format!("127.0.0.1:{}", s.port), s.outcome.to_owned()))
            .or_default() += s.n as f64;
    }
    let name = "skewwatch_shard_requests_total";
    let scrape = agent
        .wait_for(SETTLE, |a| {
            let s = a.scrape();
            (s.sum(name, &[("group", group)]) >= total as f64).then_some(s)
        })
        .unwrap_or_else(|| {
            let s = agent.scrape();
            panic!(
                "the agent counted {} of {total} calls in group {group}:\n{}",
                s.sum(name, &[]),
                s.text
            )
        });
    let got: BTreeMap<(String, String), f64> = scrape
        .all(name, &[("group", group)])
        .into_iter()
        .filter(|s| s.value > 0.0)
        .map(|s| {
            (
                (s.labels["shard"].clone(), s.labels["outcome"].clone()),
                s.value,
            )
        })
        .collect();
    assert_eq!(got, want, "calls per (shard, outcome) in group {group}");
    for reason in ["no_shard", "no_group", "not_client"] {
        assert_eq!(
            scrape.value(
                "skewwatch_ingest_skipped_total",
                &[("source", "otlp"), ("reason", reason)]
            ),
            0.0,
            "spans skipped for {reason}"
        );
    }
    assert_eq!(
        scrape.sum("skewwatch_ingest_rejected_total", &[("source", "otlp")]),
        0.0
    );
}

/// The client saw exactly `failures` (exception type → count) and `statuses`.
fn client_saw(
    seen: &serde_json::Value,
    calls: u64,
    failures: &[(&str, u64)],
    statuses: &[(&str, u64)],
) {
    assert_eq!(seen["calls"], calls, "{seen}");
    for (field, expected) in [("failures", failures), ("statuses", statuses)] {
        let want: serde_json::Map<String, serde_json::Value> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).into()))
            .collect();
        assert_eq!(seen[field], serde_json::Value::Object(want), "{seen}");
    }
}

/// A PostgreSQL 15 cluster made with `initdb` in a temporary directory, on its own port.
struct Postgres {
    port: u16,
    _proc: Proc,
}

/// The directory of PostgreSQL's server programs, if installed.
fn postgres_bin() -> Option<PathBuf> {
    let dir = [
        "/usr/lib/postgresql/15/bin",
        "/usr/lib/postgresql/16/bin",
        "/usr/lib/postgresql/17/bin",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|d| d.join("initdb").is_file());
    match dir {
        Some(d) => Some(d),
        None => tools::missing("PostgreSQL (`initdb`, `postgres`) is not installed"),
    }
}

impl Postgres {
    /// Initialises one cluster as a template; [`Postgres::start`] copies it for each server.
    fn init_template(bin: &Path, dir: &Path) -> PathBuf {
        let data = dir.join("template");
        hand_over(dir);
        let out = unprivileged(&bin.join("initdb"))
            .args(["-D"])
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        data
    }

    fn start(bin: &Path, template: &Path, dir: &Path, name: &str) -> Postgres {
        let data = dir.join(name);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(template)
            .arg(&data)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "copy the cluster");
        let port = free_port();
        let child = unprivileged(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "fsync=off", "-c", "max_connections=20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        let proc = Proc {
            child,
            stop_signal: Some("INT"),
        };
        wait_listening(port, "postgres");
        Postgres { port, _proc: proc }
    }
}

#[test]
fn psycopg_spans_name_postgresql_shards_by_port_and_a_statement_timeout_is_a_timeout() {
    let Some(python) = python(&["opentelemetry.instrumentation.psycopg", "psycopg"]) else {
        return;
    };
    let Some(bin) = postgres_bin() else {
        return;
    };
    let dir = TempDir::new("otel-pg");
    let template = Postgres::init_template(&bin, &dir.0);
    let servers: Vec<Postgres> = ["a", "b", "c"]
        .iter()
        .map(|n| Postgres::start(&bin, &template, &dir.0, n))
        .collect();
    let (a, b, c) = (servers[0].port, servers[1].port, servers[2].port);
    let plan = [
        Step {
            port: a,
            n: 240,
            op: "select",
            outcome: "ok",
        },
        Step {
            port: b,
            n: 50,
            op: "select",
            outcome: "ok",
        },
        Step {
            port: c,
            n: 40,
            op: "select",
            outcome: "ok",
        },
        Step {
            port: c,
            n: 12,
            op: "slow",
            outcome: "timeout",
        },
        Step {
            port: a,
            n: 60,
            op: "select",
            outcome: "ok",
        },
    ];
    let agent = Agent::start(CONFIG);
    let seen = drive(&python, &agent, "psycopg", &plan);
    client_saw(&seen, 402, &[("QueryCanceled", 12)], &[]);
    // psycopg's instrumentation names the database (`db.name`) and the server
    // (`net.peer.name`, `net.peer.port`): the group is the database, the shard host:port.
    check(&agent, "postgres", &plan);
}

/// A memcached process on its own port.
fn memcached(bin: &Path) -> (u16, Proc) {
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-m",
        "16",
    ]);
    if is_root() {
        cmd.args(["-u", "nobody"]);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start memcached");
    let proc = Proc {
        child,
        stop_signal: None,
    };
    wait_listening(port, "memcached");
    (port, proc)
}

#[test]
fn pymemcache_spans_name_memcached_shards_by_port_and_a_refused_connection_is_unavailable() {
    let Some(python) = python(&["opentelemetry.instrumentation.pymemcache", "pymemcache"]) else {
        return;
    };
    let Some(bin) = tools::require("memcached", &[]) else {
        return;
    };
    let servers: Vec<(u16, Proc)> = (0..3).map(|_| memcached(&bin)).collect();
    let (a, b, c) = (servers[0].0, servers[1].0, servers[2].0);
    // A port where nothing listens: a cache node that is down.
    let down = free_port();
    let plan = [
        Step {
            port: a,
            n: 20,
            op: "set",
            outcome: "ok",
        },
        Step {
            port: a,
            n: 200,
            op: "get",
            outcome: "ok",
        },
        Step {
            port: b,
            n: 40,
            op: "get",
            outcome: "ok",
        },
        Step {
            port: c,
            n: 40,
            op: "get",
            outcome: "ok",
        },
        Step {
            port: down,
            n: 15,
            op: "get",
            outcome: "unavailable",
        },
    ];
    let agent = Agent::start(CONFIG);
    let seen = drive(&python, &agent, "pymemcache", &plan);
    client_saw(&seen, 315, &[("ConnectionRefusedError", 15)], &[]);
    // pymemcache's instrumentation names no database: the system (`db.system`) is the group.
    check(&agent, "memcached", &plan);
}

/// A real HTTP server (tests/clients/otel_http_server.py) on a port the OS chose.
fn http_server(python: &Path) -> (u16, Proc) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/otel_http_server.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the HTTP server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let proc = Proc {
        child,
        stop_signal: None,
    };
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("port: {line:?}"));
    (port, proc)
}

#[test]
fn requests_spans_name_http_servers_by_port_and_status_codes_give_the_outcome() {
    let Some(python) = python(&["opentelemetry.instrumentation.requests", "requests"]) else {
        return;
    };
    let servers: Vec<(u16, Proc)> = (0..3).map(|_| http_server(&python)).collect();
    let (a, b, c) = (servers[0].0, servers[1].0, servers[2].0);
    let plan = [
        Step {
            port: a,
            n: 150,
            op: "/item/1",
            outcome: "ok",
        },
        Step {
            port: b,
            n: 40,
            op: "/item/2",
            outcome: "ok",
        },
        Step {
            port: b,
            n: 10,
            op: "/status/404",
            outcome: "not_found",
        },
        Step {
            port: c,
            n: 10,
            op: "/item/3",
            outcome: "ok",
        },
        Step {
            port: c,
            n: 20,
            op: "/status/503",
            outcome: "unavailable",
        },
        Step {
            port: c,
            n: 5,
            op: "/status/504",
            outcome: "timeout",
        },
        Step {
            port: c,
            n: 5,
            op: "/status/500",
            outcome: "error",
        },
    ];
    let agent = Agent::start(CONFIG);
    let seen = drive(&python, &agent, "requests", &plan);
    client_saw(
        &seen,
        240,
        &[],
        &[
            ("200", 200),
            ("404", 10),
            ("503", 20),
            ("504", 5),
            ("500", 5),
        ],
    );
    // requests' instrumentation on its defaults names the server only in `http.url`: the
    // group is the URL's host, the shard its host and port.
    check(&agent, "127.0.0.1", &plan);
}
