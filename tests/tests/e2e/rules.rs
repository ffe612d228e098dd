//! `rules/prometheus/`: promtool accepts the rules and passes their unit tests, and every alert
//! is one a team can act on: a severity, a summary, a description, and a runbook in
//! docs/fleet.md that exists.

use serde_json::Value;
use skewwatch_e2e::deploy::{RULES_FILE, repo_root};
use skewwatch_e2e::tools;

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every alerting rule of the rules file.
fn alerts() -> Vec<Value> {
    let rules: Value = serde_saphyr::from_str(&read(RULES_FILE)).unwrap();
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter(|r| r["alert"].is_string())
        .collect()
}

/// The promtool unit-test files, as repository paths.
fn test_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(repo_root().join("rules/prometheus/tests"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".test.yml"))
        .map(|n| format!("rules/prometheus/tests/{n}"))
        .collect();
    files.sort();
    files
}

#[test]
fn promtool_accepts_the_rules() {
    tools::promtool(&["check", "rules", RULES_FILE], "");
}

#[test]
fn promtool_unit_tests_pass() {
    let files = test_files();
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    tools::promtool(&args, "");
}

#[test]
fn every_alert_is_unit_tested_firing() {
    let tests: Vec<Value> = test_files()
        .iter()
        .map(|f| serde_saphyr::from_str(&read(f)).unwrap())
        .collect();
    let cases: Vec<&Value> = tests
        .iter()
        .flat_map(|t| t["tests"].as_array().unwrap())
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .collect();
    for a in alerts() {
        let name = a["alert"].as_str().unwrap();
        let fires = cases.iter().any(|c| {
            c["alertname"] == name && c["exp_alerts"].as_array().is_some_and(|e| !e.is_empty())
        });
        assert!(fires, "{name} has no unit test in which it fires");
    }
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to dashes, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_has_a_severity_texts_and_a_runbook_that_exists() {
    let cargo = read("Cargo.toml");
    let repo = cargo
        .lines()
        .find_map(|l| l.strip_prefix("repository = "))
        .expect("the workspace names its repository")
        .trim_matches('"');
    let anchors: Vec<String> = read("docs/fleet.md")
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect();
    let alerts = alerts();
    assert!(alerts.len() >= 8, "{alerts:?}");
    for a in alerts {
        let name = a["alert"].as_str().unwrap();
        assert!(
            name.starts_with("Skewwatch"),
            "{name}: dashboards select Skewwatch.*"
        );
        let severity = a["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("warning" | "critical")),
            "{name}: severity {severity:?}"
        );
        for text in ["summary", "description"] {
            assert!(a["annotations"][text].is_string(), "{name}: no {text}");
        }
        let expected = format!("{repo}/blob/main/docs/fleet.md#{}", name.to_lowercase());
        assert_eq!(a["annotations"]["runbook_url"], expected.as_str(), "{name}");
        assert!(
            anchors.contains(&name.to_lowercase()),
            "{name}: docs/fleet.md has no heading `{name}` for its runbook"
        );
    }
}
