//! The command line as users meet it: `check-config` names every problem with file, field and
//! why; `run` refuses a bad configuration before binding any port; `demo` tells the incident;
//! the hidden `fleet-query` prints the fleet input's own growth expression.

use std::net::TcpListener;
use std::process::Command;

use skewwatch_e2e::agent::{TempDir, binary};

fn write(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.0.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_config_accepts_the_shipped_default_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../rules/skewwatch.yaml");
    let out = Command::new(binary())
        .args(["check-config", path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_config_names_every_problem_with_file_field_and_why() {
    let dir = TempDir::new("cli");
    let bad = write(
        &dir,
        "bad.yaml",
        "listen:\n  http: \"not-an-address\"\nwindow:\n  window_secs: 0\ndetectors:\n  hot_shard:\n    min_ratio: -1\n  error_surge:\n    min_error_ratio: 7\n",
    );
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let file = bad.display().to_string();
    for field in [
        "listen.http",
        "window.window_secs",
        "detectors.hot_shard.min_ratio",
        "detectors.error_surge.min_error_ratio",
    ] {
        assert!(
            err.lines().any(|l| l.contains(&file) && l.contains(field)),
            "{field} not named with the file in:\n{err}"
        );
    }
}

#[test]
fn check_config_reports_unknown_fields_and_bad_yaml() {
    let dir = TempDir::new("cli");
    let typo = write(&dir, "typo.yaml", "window:\n  window_sec: 5\n");
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&typo)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("window_sec"));
    let garbage = write(&dir, "garbage.yaml", "listen: [unclosed\n");
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&garbage)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn run_refuses_a_bad_config_before_binding_any_port() {
    let dir = TempDir::new("cli");
    // A free port the agent would bind if it got that far.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bad = write(
        &dir,
        "bad.yaml",
        &format!("listen:\n  http: \"127.0.0.1:{port}\"\nwindow:\n  window_secs: -5\n"),
    );
    let out = Command::new(binary())
        .args(["run", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("window.window_secs"), "{err}");
    assert!(!err.contains("Listening."), "{err}");
}

#[test]
fn demo_detects_the_incident_it_simulates() {
    // Short windows keep the story under a minute; the detectors run on their defaults.
    let out = Command::new(binary())
        .args(["demo", "--window-secs", "0.25"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "FIRING   HotShard {group=metadata-db, shard=shard-7}",
        "FIRING   CacheHitCollapse {group=metadata-db}",
        "FIRING   ErrorSurge {group=metadata-db}",
        "key (empty)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn replay_stops_at_a_record_far_in_the_future_with_its_line_number() {
    let dir = TempDir::new("cli");
    let trace = write(
        &dir,
        "trace.ndjson",
        "{\"ts\":1700000000,\"group\":\"g\",\"shard\":\"s\"}\n\
         {\"ts\":32503680000,\"group\":\"g\",\"shard\":\"s\"}\n\
         {\"ts\":1700000001,\"group\":\"g\",\"shard\":\"s\"}\n",
    );
    let out = Command::new(binary())
        .arg("replay")
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("trace.ndjson:2:") && err.contains("max-future-secs"),
        "{err}"
    );
}

#[test]
fn check_config_reads_secrets_as_run_does() {
    let dir = TempDir::new("cli");
    let cfg = write(
        &dir,
        "token.yaml",
        "auth:\n  bearer_token_file: /nonexistent/skewwatch-token\n",
    );
    let out = Command::new(binary())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auth.bearer_token_file"), "{err}");
}

#[test]
fn fleet_query_prints_the_growth_expression_the_fleet_input_asks() {
    // The measuring tools (scripts/fleet-counts.py, labs/fleet) ask what the product asks.
    use skewwatch::ingest::fleet::query::{Family, growth_expr};
    use std::time::Duration;
    for family in Family::ALL {
        let out = Command::new(binary())
            .args(["fleet-query", "--family", family.as_str()])
            .args(["--selector", "job=\"sidecars\"", "--lookback-secs", "300"])
            .args(["--since-secs", "7.5"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap().trim_end(),
            growth_expr(
                family,
                "job=\"sidecars\"",
                Duration::from_secs(300),
                Duration::from_millis(7500)
            )
        );
    }
    let bad = Command::new(binary())
        .args(["fleet-query", "--selector", "job", "--since-secs", "10"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}
