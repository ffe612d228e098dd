//! Real external components the tests use (promtool, Alertmanager): found on PATH, or skipped
//! with a loud message locally and failed in CI, where `.ci/run` installs them.

use std::path::PathBuf;

/// Finds `name` on PATH (or one of `alternatives`). Returns `None` when missing outside CI;
/// panics in CI (env `CI` set), where a missing component is a failure.
pub fn require(name: &str, alternatives: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for candidate in std::iter::once(name).chain(alternatives.iter().copied()) {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(candidate);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let msg = format!(
        "\n\n!!!!! SKIPPING: `{name}` is not installed. `.ci/run` installs it; in CI this is a failure. !!!!!\n"
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("{msg}");
    None
}

/// A missing component other than a program on PATH (a Python package, an npm package):
/// `None` with a loud message outside CI; a panic in CI, where `.ci/run` installs it.
pub fn missing<T>(what: &str) -> Option<T> {
    let msg = format!(
        "\n\n!!!!! SKIPPING: {what} is not installed. `.ci/run` installs it; in CI this is a failure. !!!!!\n"
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("{msg}");
    None
}
