//! Generated deployment files: the Prometheus Operator `PrometheusRule` in
//! `deploy/kubernetes/prometheusrule.yaml` carries exactly the rule groups of
//! `rules/prometheus/skewwatch.rules.yml`, comments included, so there is one source to edit.
//! `cargo run -p skewwatch-e2e --example generate` writes it; `tests/tests/e2e/deploy.rs` checks
//! that the committed file is what this builds.

/// The rules file, relative to the repository.
pub const RULES_FILE: &str = "rules/prometheus/skewwatch.rules.yml";

/// The PrometheusRule, relative to the repository.
pub const PROMETHEUS_RULE_FILE: &str = "deploy/kubernetes/prometheusrule.yaml";

/// The PrometheusRule for the rules file's text: the file's leading comment block is replaced
/// by a header, and everything from `groups:` on is indented under `spec:`.
pub fn prometheus_rule(rules: &str) -> String {
    let mut out = String::from(
        "# Generated from rules/prometheus/skewwatch.rules.yml by\n\
         # `cargo run -p skewwatch-e2e --example generate`: edit the rules file, not this one.\n\
         # Add the labels your Prometheus' ruleSelector expects (kube-prometheus-stack: the\n\
         # Helm release name as `release`). docs/fleet.md explains every rule.\n\
         apiVersion: monitoring.coreos.com/v1\n\
         kind: PrometheusRule\n\
         metadata:\n  \
           name: skewwatch\n  \
           labels:\n    \
             app.kubernetes.io/name: skewwatch\n\
         spec:\n",
    );
    let body = rules
        .lines()
        .skip_while(|l| l.is_empty() || l.starts_with('#'));
    for line in body {
        if !line.is_empty() {
            out.push_str("  ");
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The repository's root directory.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_owned()
}
