//! Smoke tests of the built binary. Their presence also makes `cargo test --workspace` build the
//! `skewwatch` binary itself, which the end-to-end tests in `tests/` run.

use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_skewwatch");

#[test]
fn version_names_the_package_version() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
}

#[test]
fn replay_reads_standard_input_and_reports_a_bad_line_with_exit_2() {
    let mut child = Command::new(BIN)
        .args(["replay", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"ts\":1,\"group\":\"g\",\"shard\":\"s\"}\n{\"ts\":2,\"group\":\"g\",\"shard\":\"s\",\"outcome\":\"boom\"}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-:2:"), "{err}");
}
