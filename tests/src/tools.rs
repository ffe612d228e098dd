//! Real external components the tests use (promtool, Alertmanager, Python client libraries):
//! found on PATH, or skipped with a loud message locally and failed in CI, where `.ci/run`
//! installs them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Reads a variable of the test process's environment: the one way the test support reads it.
/// Nothing here writes the environment: the tests share one process, so settings for an agent
/// go to its `Command`.
#[expect(
    clippy::disallowed_methods,
    reason = "the one function through which the end-to-end tests read their environment"
)]
pub fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// Finds `name` on PATH (or one of `alternatives`). Returns `None` when missing outside CI;
/// panics in CI (env `CI` set), where a missing component is a failure.
pub fn require(name: &str, alternatives: &[&str]) -> Option<PathBuf> {
    let path = env("PATH").unwrap_or_default();
    for candidate in std::iter::once(name).chain(alternatives.iter().copied()) {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(candidate);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    missing(&format!("`{name}` is not installed"))
}

/// Runs `promtool ARGS` in the repository's root and fails the test, with promtool's output and
/// `context`, unless it succeeds. Skipped (nothing run) where promtool is missing outside CI.
pub fn promtool(args: &[&str], context: &str) {
    let Some(promtool) = require("promtool", &[]) else {
        return;
    };
    let out = Command::new(promtool)
        .args(args)
        .current_dir(crate::deploy::repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}: {context}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `python3` on PATH that imports every module of `modules` (`.ci/run` installs them into a
/// virtual environment it puts first on PATH). `None` when missing outside CI; panics in CI.
pub fn require_python(modules: &[&str]) -> Option<PathBuf> {
    let python = require("python3", &[])?;
    let imports = format!("import {}", modules.join(", "));
    let ok = std::process::Command::new(&python)
        .args(["-c", &imports])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some(python)
    } else {
        missing(&format!("the Python modules {modules:?} are not installed"))
    }
}

/// A missing component other than a program on PATH (a Python package, an npm package):
/// `None` with a loud message outside CI; a panic in CI, where `.ci/run` installs it.
/// `what` says what is missing, e.g. "`promtool` is not installed".
pub fn missing<T>(what: &str) -> Option<T> {
    let msg = format!(
        "\n\n!!!!! SKIPPING: {what}. `.ci/run` installs it; in CI this is a failure. !!!!!\n"
    );
    if env("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("{msg}");
    None
}

/// Stops a component the test started: `signal` (such as `TERM`, or `INT` for PostgreSQL's fast
/// shutdown) first, giving it 10 s to exit cleanly; then, or at once without a signal, SIGKILL.
/// Always reaps it. For `Drop`, so it runs even when the test fails.
pub fn stop_child(child: &mut Child, signal: Option<&str>) {
    if let Some(sig) = signal {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
