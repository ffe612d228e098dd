//! Documentation that must stay true to the code: every field of the shipped configuration is
//! in the configuration reference, and the README keeps its two set-up commands.

fn read(rel: &str) -> String {
    std::fs::read_to_string(format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Dotted paths of the keys that carry a value in an indented YAML file.
fn leaf_paths(yaml: &str) -> Vec<String> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    for line in yaml.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        let Some((key, value)) = trimmed.split_once(':') else {
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        if !value.trim().is_empty() {
            out.push(
                stack
                    .iter()
                    .map(|(_, k)| k.as_str())
                    .collect::<Vec<_>>()
                    .join("."),
            );
        }
    }
    out
}

#[test]
fn every_shipped_config_field_is_in_the_reference() {
    let fields = leaf_paths(&read("rules/skewwatch.yaml"));
    assert!(fields.len() > 50, "{fields:?}");
    let doc = read("docs/configuration.md");
    let missing: Vec<_> = fields
        .iter()
        .filter(|f| !doc.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks {missing:?}: run scripts/config-reference.py"
    );
}

#[test]
fn the_readme_carries_the_two_set_up_commands_ci_runs() {
    let readme = read("README.md");
    assert!(readme.contains("cargo run --release -p skewwatch -- run"));
    assert!(readme.contains("cargo test --workspace --release"));
    assert!(read(".ci/run").contains("cargo test --workspace --release"));
}
