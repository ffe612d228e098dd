//! Running `skewwatch replay` on a trace and reading its transitions.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::agent::{TempDir, binary};
use crate::scenario::Trace;

/// One transition line of `skewwatch replay`.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionLine {
    /// Trace time of the evaluation.
    pub ts: f64,
    /// Alert name.
    pub alertname: String,
    /// `firing` or `resolved`.
    pub state: String,
    /// Labels.
    pub labels: serde_json::Map<String, Value>,
    /// Annotations.
    pub annotations: serde_json::Map<String, Value>,
}

impl TransitionLine {
    /// A label value, or "".
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).and_then(Value::as_str).unwrap_or("")
    }

    /// An annotation value, or "".
    pub fn annotation(&self, name: &str) -> &str {
        self.annotations
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// What a replay printed.
#[derive(Debug, Clone)]
pub struct ReplayOutput {
    /// Exit status code.
    pub code: i32,
    /// Transition lines, in order.
    pub transitions: Vec<TransitionLine>,
    /// Raw stdout.
    pub stdout: String,
    /// Raw stderr.
    pub stderr: String,
}

impl ReplayOutput {
    /// Transitions of `alertname` to `state`.
    pub fn find(&self, alertname: &str, state: &str) -> Vec<&TransitionLine> {
        self.transitions
            .iter()
            .filter(|t| t.alertname == alertname && t.state == state)
            .collect()
    }
}

/// Replays `trace` with `config_yaml` (empty = embedded defaults) through the real binary.
pub fn replay(trace: &Trace, config_yaml: &str) -> ReplayOutput {
    let dir = TempDir::new("replay");
    let path = dir.0.join("trace.ndjson");
    trace.write(&path).unwrap();
    replay_file(&path, config_yaml)
}

/// Replays an NDJSON file with `config_yaml` (empty = embedded defaults).
pub fn replay_file(path: &std::path::Path, config_yaml: &str) -> ReplayOutput {
    let dir = TempDir::new("replay-cfg");
    let mut cmd = Command::new(binary());
    cmd.arg("replay");
    if !config_yaml.is_empty() {
        let cfg = dir.0.join("config.yaml");
        std::fs::write(&cfg, config_yaml).unwrap();
        cmd.arg("--config").arg(cfg);
    }
    let out = cmd
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("run skewwatch replay");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let transitions = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            TransitionLine {
                ts: v["ts"].as_f64().unwrap(),
                alertname: v["alertname"].as_str().unwrap().to_owned(),
                state: v["state"].as_str().unwrap().to_owned(),
                labels: v["labels"].as_object().cloned().unwrap_or_default(),
                annotations: v["annotations"].as_object().cloned().unwrap_or_default(),
            }
        })
        .collect();
    ReplayOutput {
        code: out.status.code().unwrap_or(-1),
        transitions,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
