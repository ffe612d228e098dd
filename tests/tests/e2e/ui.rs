//! The live view in a real headless browser (Debian's `chromium` and `chromium-driver`, driven
//! by Python `selenium` from PyPI; `.ci/run` installs all three).
//!
//! The agent gets the demo's metadata-database incident over UDP, window by window, plus a
//! shard named `<img src=x onerror=alert(1)>`. Once HotShard and CacheHitCollapse
//! fire, `tests/ui/check_page.py` opens `GET /` and checks what the page shows (the hot shard
//! named and drawn as the brightest heatmap row, `(empty)` among the keys, the firing alerts,
//! the XSS name as text), that it loaded nothing from elsewhere and logged no error; it saves a
//! 1280×800 screenshot under the target directory (path printed). The agent is then stopped
//! and the page must say so.
//!
//! Without chromium, chromedriver or a Python with selenium the test is skipped with a loud
//! message, except under CI (`CI` set), where that fails it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use skewwatch::client;
use skewwatch::demo;
use skewwatch_e2e::agent::Agent;
use skewwatch_e2e::demo_feed;
use skewwatch_e2e::tools;

const XSS_SHARD: &str = "<img src=x onerror=alert(1)>";

/// A Python that can import selenium: `$SKEWWATCH_PYTHON`, `python3` on PATH (the CI venv is
/// first on PATH) or the venv `.ci/run` builds under the target directory.
fn python_with_selenium() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = tools::env("SKEWWATCH_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.push("python3".into());
    candidates.push(target_dir().join("ci-venv/bin/python3"));
    let found = candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import selenium"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    found.or_else(|| tools::missing("no Python with `selenium` is installed"))
}

/// `target/`: two levels above this test's executable (`target/<profile>/deps/ui-…`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors().nth(3).expect("target dir").to_path_buf()
}

/// Sends the demo's incident, one window a second, until `stop` is set, with 20 requests a
/// window of the XSS shard, so it is among the rows the page draws, and 20 more on it that
/// name a cache key, so the page draws the what-if curve.
fn feed(agent: &Agent, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let xss = format!(
        "skewwatch.request:3|ms|@0.05|#group:{},shard:{XSS_SHARD},key:k",
        demo::GROUP
    );
    let mut lines = vec![xss];
    lines.extend(demo_feed::cache_keyed_lines(XSS_SHARD, 20));
    demo_feed::feed(agent.statsd, 7, stop, lines, Vec::new())
}

/// The firing alerts' names, once HotShard on the hot shard and CacheHitCollapse fire.
fn wait_for_alerts(agent: &Agent) -> Vec<String> {
    let firing = agent.wait_for(Duration::from_secs(90), |a| {
        let (_, body) = a.request("GET", "/api/v1/alerts", &[], b"");
        let v: Value = serde_json::from_str(&body).ok()?;
        let firing: Vec<&Value> = v["data"]["alerts"]
            .as_array()?
            .iter()
            .filter(|a| a["state"] == "firing")
            .collect();
        let has = |name: &str| firing.iter().any(|a| a["labels"]["alertname"] == name);
        let hot = firing.iter().any(|a| {
            a["labels"]["alertname"] == "HotShard" && a["labels"]["shard"] == demo::HOT_SHARD
        });
        (hot && has("CacheHitCollapse")).then(|| {
            let mut names: Vec<String> = firing
                .iter()
                .filter(|a| a["labels"]["group"] == demo::GROUP)
                .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_owned))
                .collect();
            names.sort();
            names.dedup();
            names
        })
    });
    firing.expect("HotShard on the hot shard and CacheHitCollapse did not fire within 90 s")
}

#[test]
fn the_live_view_shows_the_incident_in_a_real_browser() {
    let (Some(_), Some(_)) = (
        tools::require("chromium", &["chromium-browser"]),
        tools::require("chromedriver", &[]),
    ) else {
        return;
    };
    let Some(python) = python_with_selenium() else {
        return;
    };
    let mut agent = Agent::start(demo_feed::CONFIG);
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = feed(&agent, stop.clone());
    let alerts = wait_for_alerts(&agent);
    let shot = target_dir().join("ui-artifacts/live-view.png");
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    run_browser(&python, &mut agent, &shot, &alerts, &stop);
    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
    eprintln!("firing alerts checked on the page: {alerts:?}");
}

/// Without a browser: the page and its assets carry the security headers, the history answer
/// has the group's windows and honours its bounds, and a bad query is refused.
#[test]
fn the_page_and_its_history_are_served_locked_down_and_bounded() {
    let agent = Agent::start("window:\n  window_secs: 1\n");
    for path in ["/", "/ui/app.js", "/ui/app.css"] {
        let r = client::get(agent.http, path, Duration::from_secs(10)).unwrap();
        assert_eq!(r.status, 200, "{path}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{path}: {csp}"
        );
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
    let datagram = (0..6)
        .map(|i| format!("skewwatch.request:5|ms|@0.1|#group:db,shard:s{i},key:k{i}"))
        .collect::<Vec<_>>()
        .join("\n");
    // Traffic in at least two windows, so the ring holds two windows of the group.
    let two = agent.wait_for(Duration::from_secs(20), |a| {
        a.send_statsd(datagram.as_bytes());
        let (_, body) = a.request("GET", "/api/v1/history?group=db", &[], b"");
        let v: Value = serde_json::from_str(&body).ok()?;
        (v["windows"].as_array()?.len() >= 2).then_some(v)
    });
    let v = two.expect("two windows of the group within 20 s");
    assert_eq!(v["group"], "db");
    assert_eq!(v["shards"].as_array().unwrap().len(), 6, "{v}");
    let (code, body) = agent.request(
        "GET",
        "/api/v1/history?group=db&windows=1&shards=2",
        &[],
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["windows"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["shards"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["shard_keys"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["shards_total"], 6, "{v}");
    let (code, _) = agent.request("GET", "/api/v1/history?shards=many", &[], b"");
    assert_eq!(code, 400);
}

/// Runs the page check; stops the agent when the script asks, then waits for its verdict.
fn run_browser(
    python: &Path,
    agent: &mut Agent,
    shot: &Path,
    alerts: &[String],
    stop: &AtomicBool,
) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/check_page.py");
    let mut child = Command::new(python)
        .arg(&script)
        .arg(format!("http://{}/", agent.http))
        .args([demo::HOT_SHARD, XSS_SHARD])
        .arg(shot)
        .args(alerts)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start check_page.py");
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut transcript = Vec::new();
    for line in out.lines().map_while(Result::ok) {
        eprintln!("[browser] {line}");
        if line == "READY-TO-STOP" {
            stop.store(true, Ordering::Relaxed);
            assert!(agent.stop().success(), "the agent did not stop cleanly");
            writeln!(child.stdin.as_mut().unwrap(), "stopped").unwrap();
        }
        transcript.push(line);
    }
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the page check failed:\n{}",
        transcript.join("\n")
    );
    eprintln!("screenshot of the live view: {}", shot.display());
}
