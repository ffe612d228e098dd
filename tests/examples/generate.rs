//! Writes the generated files of the repository: the Grafana dashboards in `dashboards/` and
//! the PrometheusRule in `deploy/kubernetes/`, from `tests/src/dashboards.rs` and
//! `rules/prometheus/skewwatch.rules.yml`:
//!
//! `cargo run -p skewwatch-e2e --example generate`
//!
//! Commit what it writes; `tests/tests/e2e/dashboards.rs` and `tests/tests/e2e/deploy.rs` fail while
//! the committed files differ from what it would write.

use skewwatch_e2e::dashboards;
use skewwatch_e2e::deploy::{PROMETHEUS_RULE_FILE, RULES_FILE, prometheus_rule, repo_root};

fn main() -> std::io::Result<()> {
    let root = repo_root();
    for (name, dashboard) in dashboards::all() {
        let path = root.join("dashboards").join(name);
        std::fs::write(&path, dashboards::to_text(&dashboard))?;
        println!("wrote {}", path.display());
    }
    let rules = std::fs::read_to_string(root.join(RULES_FILE))?;
    let path = root.join(PROMETHEUS_RULE_FILE);
    std::fs::write(&path, prometheus_rule(&rules))?;
    println!("wrote {}", path.display());
    Ok(())
}
