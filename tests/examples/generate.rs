//! Writes the generated files of the repository: the Grafana dashboards in `dashboards/` and
//! the PrometheusRule in `deploy/kubernetes/`, from `tests/src/dashboards.rs` and
//! `rules/prometheus/skewwatch.rules.yml`, and the reload column of the field tables of
//! `docs/configuration.md`, from the configuration's parts (`skewwatch::config::ReloadClass`):
//!
//! `cargo run -p skewwatch-e2e --example generate`
//!
//! Commit what it writes; the dashboards, deploy and configuration tests
//! (`tests/tests/e2e/dashboards.rs`, `tests/tests/e2e/deploy.rs`, `agent/src/app/config.rs`) fail
//! while the committed files differ from what it would write.

use skewwatch::app::ReloadClass;
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
    let path = root.join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path)?;
    std::fs::write(&path, reload_column(&doc))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// `doc` with every field table as `| field | default | reload | meaning |`, the reload cell
/// of each row computed from the field's path.
fn reload_column(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len() + 4096);
    for line in doc.lines() {
        let line = match line {
            "| field | default | meaning |" => "| field | default | reload | meaning |".to_owned(),
            "|---|---|---|" => "|---|---|---|---|".to_owned(),
            _ => with_reload_cell(line).unwrap_or_else(|| line.to_owned()),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A field row with its reload cell set (inserted in a three-column row); `None` for any
/// other line.
fn with_reload_cell(line: &str) -> Option<String> {
    let mut cells: Vec<&str> = line.split(" | ").collect();
    let field = cells.first()?.strip_prefix("| `")?.strip_suffix('`')?;
    let class = ReloadClass::of(field)?.as_str();
    match cells.len() {
        3 => cells.insert(2, class),
        4 => cells[2] = class,
        _ => return None,
    }
    Some(cells.join(" | "))
}
