//! `skewwatch top` as a person uses it: in a real terminal (Debian's `tmux`, 120×40, read with
//! `capture-pane`), against a real agent playing the demo's metadata-database incident, plus a
//! shard whose name carries an escape sequence (`ESC [2J`, clear screen) and a small group
//! whose three shards tie, to show natural order. `--once` is checked in both formats, and
//! against an agent that is not there.
//!
//! The screen once the incident is detected is saved under the target directory
//! (`top-artifacts/top-screen.txt`, path printed); docs/top.md shows one such capture.
//!
//! Without tmux the terminal part is skipped with a loud message, except under CI (`CI` set),
//! where that fails it.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use skewwatch::demo;
use skewwatch_e2e::agent::{Agent, binary};
use skewwatch_e2e::alertmanager::poll_every;
use skewwatch_e2e::demo_feed;
use skewwatch_e2e::tools;

/// A shard name that would clear the screen if printed raw.
const HOSTILE_SHARD: &str = "evil\x1b[2Jshard";
/// How `top` shows it.
const HOSTILE_SHOWN: &str = "evil\\u{1b}[2Jshard";
/// A group of three shards with equal traffic, listed in natural order.
const TIE_GROUP: &str = "tie";

/// Sends the demo's incident, one window a second, until `stop` is set, with 20 requests a
/// window of the hostile shard, so it is among the rows, and the tie group in a datagram of
/// its own, so its shards land in the same window.
fn feed(statsd: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let hostile = format!(
        "skewwatch.request:3|ms|@0.05|#group:{},shard:{HOSTILE_SHARD},key:k",
        demo::GROUP
    );
    let tie = ["shard-10", "shard-2", "shard-1"]
        .iter()
        .map(|s| format!("skewwatch.request:40|c|#group:{TIE_GROUP},shard:{s}"))
        .collect();
    let mut lines = vec![hostile];
    lines.extend(demo_feed::cache_keyed_lines(HOSTILE_SHARD, 20));
    demo_feed::feed(statsd, 11, stop, lines, tie)
}

/// `skewwatch top --once` with `args`.
fn once(args: &[&str]) -> Output {
    Command::new(binary())
        .args(["top", "--once"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run skewwatch top --once")
}

/// Polls `f` every half second (each try may start a process) until it returns `Some` or
/// `timeout` passes.
fn poll<T>(timeout: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    poll_every(Duration::from_millis(500), timeout, f)
}

/// The `--once --format json` figures of the demo's group once HotShard on the hot shard and
/// CacheHitCollapse fire.
fn wait_for_incident(url: &str) -> Value {
    let found = poll(Duration::from_secs(90), || {
        let out = once(&["--url", url, "--group", demo::GROUP, "--format", "json"]);
        assert!(
            out.status.success(),
            "top --once failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("--format json prints JSON");
        let firing = |name: &str, shard: Option<&str>| {
            v["alerts"].as_array().unwrap().iter().any(|a| {
                a["state"] == "firing"
                    && a["alertname"] == name
                    && shard.is_none_or(|s| {
                        a["labels"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|l| l[0] == "shard" && l[1] == s)
                    })
            })
        };
        (firing("HotShard", Some(demo::HOT_SHARD)) && firing("CacheHitCollapse", None)).then_some(v)
    });
    found.expect("HotShard on the hot shard and CacheHitCollapse did not fire within 90 s")
}

/// A tmux server of its own (its own socket), killed when dropped.
struct Tmux {
    tmux: PathBuf,
    socket: String,
}

impl Tmux {
    fn new(tmux: PathBuf) -> Tmux {
        let socket = format!("skewwatch-top-{}", std::process::id());
        Tmux { tmux, socket }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.tmux)
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    /// Starts `command` in a detached 120×40 session `name`, with `env` set for it.
    fn start(&self, name: &str, env: &[&str], command: &[&str]) {
        let mut args = vec!["new-session", "-d", "-s", name, "-x", "120", "-y", "40"];
        for e in env {
            args.extend(["-e", e]);
        }
        args.extend(command);
        let out = self.run(&args);
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The screen of session `name` as text (`escapes`: with colour and style sequences).
    fn screen(&self, name: &str, escapes: bool) -> String {
        let target = pane(name);
        let mut args = vec!["capture-pane", "-p", "-t", &target];
        if escapes {
            args.push("-e");
        }
        String::from_utf8_lossy(&self.run(&args).stdout).into_owned()
    }

    fn keys(&self, name: &str, keys: &[&str]) {
        let target = pane(name);
        let mut args = vec!["send-keys", "-t", &target];
        args.extend(keys);
        assert!(self.run(&args).status.success(), "send-keys {keys:?}");
    }

    fn alive(&self, name: &str) -> bool {
        self.run(&["has-session", "-t", &format!("={name}")])
            .status
            .success()
    }

    /// The screen once `f` holds on it, or a panic naming `what` with the last screen.
    fn wait(&self, name: &str, what: &str, f: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        poll(Duration::from_secs(30), || {
            last = self.screen(name, false);
            f(&last).then(|| last.clone())
        })
        .unwrap_or_else(|| panic!("{what}: not on screen within 30 s; the screen:\n{last}"))
    }
}

/// The pane of session `name`, matched exactly: a bare `-t top` is resolved against the
/// current session's windows first, and so can hit another session's pane.
fn pane(name: &str) -> String {
    format!("={name}:")
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The selected row's shard name (`▶ name`).
fn selected(screen: &str) -> Option<String> {
    let line = screen.lines().find(|l| l.contains('▶'))?;
    let after = line.split('▶').nth(1)?;
    after.split_whitespace().next().map(str::to_owned)
}

/// The shard rows' names in screen order: lines of the shards panel that start with a marker.
fn rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .filter_map(|l| l.strip_prefix("│"))
        .filter_map(|l| l.strip_prefix("▶ ").or_else(|| l.strip_prefix("  ")))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("shard-") || n.starts_with("evil"))
        .map(str::to_owned)
        .collect()
}

/// Whether a `capture-pane -e` screen sets a foreground or background colour: an SGR sequence
/// (`ESC [ … m`) with a parameter of 30–38, 40–48, 90–97 or 100–107.
fn has_colour(screen: &str) -> bool {
    screen.split("\x1b[").skip(1).any(|seq| {
        let params = seq.split('m').next().unwrap_or_default();
        params
            .split(';')
            .filter_map(|p| p.parse::<u16>().ok())
            .any(|p| matches!(p, 30..=38 | 40..=48 | 90..=97 | 100..=107))
    })
}

fn save(screen: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .ancestors()
        .nth(3)
        .expect("target dir")
        .join("top-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("top-screen.txt");
    std::fs::write(&path, screen).unwrap();
    path
}

#[test]
fn top_shows_the_incident_in_a_real_terminal() {
    let mut agent = Agent::start(demo_feed::CONFIG);
    let url = format!("http://{}", agent.http);
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = feed(agent.statsd, stop.clone());
    let v = wait_for_incident(&url);

    // --once, JSON: the hot shard heads the rows, the empty key is among the group's keys.
    assert_eq!(v["group"], demo::GROUP, "{v}");
    assert_eq!(v["shards"][0]["name"], demo::HOT_SHARD, "{v}");
    assert_eq!(v["headline"]["shard"], demo::HOT_SHARD, "{v}");
    assert_eq!(v["headline"]["beyond_noise"], true, "{v}");
    let labels: Vec<&str> = v["top_keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["label"].as_str())
        .collect();
    assert!(labels.contains(&"(empty)"), "{labels:?}");
    let mut firing: Vec<String> = v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["state"] == "firing")
        .map(|a| a["alertname"].as_str().unwrap().to_owned())
        .collect();
    firing.sort();
    firing.dedup();

    // --once, text: the same content, the hostile name inert.
    let out = once(&["--url", &url, "--group", demo::GROUP]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Busiest shard shard-7:") && text.contains("beyond what noise explains"),
        "{text}"
    );
    assert!(text.contains("(empty)"), "{text}");
    for name in &firing {
        assert!(text.contains(&format!("FIRING {name}")), "{name}: {text}");
    }
    assert!(text.contains(HOSTILE_SHOWN), "{text}");
    assert!(
        !text.contains('\x1b'),
        "a raw escape reached the output: {text:?}"
    );
    assert!(text.contains("Cache loop: hit ratio"), "{text}");
    // The what-if curve: the cache as configured (the default 60 s) marked among the TTLs.
    assert!(
        text.contains("What-if, hit ratio against TTL") && text.contains("▶1m "),
        "{text}"
    );
    assert!(text.contains(" as configured"), "{text}");

    // Natural order where shares tie.
    let tie = once(&["--url", &url, "--group", TIE_GROUP, "--format", "json"]);
    let tie: Value = serde_json::from_slice(&tie.stdout).unwrap();
    let names: Vec<&str> = tie["shards"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["shard-1", "shard-2", "shard-10"], "{tie}");

    let Some(tmux) = tools::require("tmux", &[]) else {
        stop.store(true, Ordering::Relaxed);
        feeder.join().unwrap();
        return;
    };
    let tmux = Tmux::new(tmux);
    let bin = binary();
    let bin = bin.to_str().unwrap();
    tmux.start("top", &[], &[bin, "top", "--url", &url]);
    let screen = tmux.wait("top", "the incident", |s| {
        s.contains("Busiest shard shard-7:")
            && firing.iter().all(|n| s.contains(&format!("FIRING {n}")))
    });
    let path = save(&screen);
    eprintln!("the screen ({}):\n{screen}", path.display());
    assert_eq!(
        rows(&screen).first().map(String::as_str),
        Some(demo::HOT_SHARD),
        "{screen}"
    );
    assert_eq!(
        selected(&screen).as_deref(),
        Some(demo::HOT_SHARD),
        "{screen}"
    );
    assert!(screen.contains("(empty)"), "{screen}");
    assert!(
        screen.contains(HOSTILE_SHOWN),
        "the hostile name is not shown inert:\n{screen}"
    );
    assert!(
        screen.contains("skewwatch top"),
        "the title is gone:\n{screen}"
    );
    assert!(screen.contains("Cache loop"), "{screen}");
    assert!(
        screen.contains("What-if: hit ratio against TTL"),
        "{screen}"
    );
    // Colour: heat cells in colour.
    let coloured = tmux.screen("top", true);
    assert!(has_colour(&coloured), "no colour on screen:\n{coloured:?}");

    // A key press selects the next shard; its keys follow.
    tmux.keys("top", &["j"]);
    let screen = tmux.wait("top", "another shard selected", |s| {
        selected(s).is_some_and(|n| n != demo::HOT_SHARD)
    });
    let other = selected(&screen).unwrap();
    assert!(screen.contains(&format!("Keys of {other}")), "{screen}");

    // `g` switches group: the tie group's rows in natural order.
    tmux.keys("top", &["g"]);
    let screen = tmux.wait("top", "the tie group", |s| {
        s.contains(&format!("group {TIE_GROUP}")) && rows(s).len() == 3
    });
    assert_eq!(
        rows(&screen),
        ["shard-1", "shard-2", "shard-10"],
        "{screen}"
    );

    // NO_COLOR: the same screen without colour.
    tmux.start("plain", &["NO_COLOR=1"], &[bin, "top", "--url", &url]);
    tmux.wait("plain", "the plain screen", |s| {
        s.contains("Busiest shard shard-7:")
    });
    let plain = tmux.screen("plain", true);
    assert!(!has_colour(&plain), "colour under NO_COLOR:\n{plain:?}");

    // The agent stops: a banner, the last data still shown.
    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
    assert!(agent.stop().success(), "the agent did not stop cleanly");
    let screen = tmux.wait("top", "the banner", |s| {
        s.contains("The agent stopped answering")
    });
    assert!(screen.contains("group tie"), "{screen}");
    tmux.keys("top", &["q"]);
    assert!(
        poll(Duration::from_secs(10), || (!tmux.alive("top"))
            .then_some(()))
        .is_some(),
        "top did not quit on q"
    );

    // --once against no agent: a non-zero exit and a clear error.
    let out = once(&["--url", &url]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is the agent running"), "{err}");
}

/// Bad arguments are refused before anything is read.
#[test]
fn top_refuses_a_bad_url_and_a_missing_token_file() {
    let out = once(&["--url", "https://127.0.0.1:9477"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("https is not supported"));
    let out = once(&["--token-file", "/nonexistent/skewwatch-token"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token-file"));
    let out = Command::new(binary())
        .args(["top", "--format", "json"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "--format without --once is refused");
    // Not a terminal and not --once: told what to do instead.
    let out = Command::new(binary())
        .args(["top", "--url", "127.0.0.1:9"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--once"));
}
