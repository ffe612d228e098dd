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

/// Repository paths named in backticks in `text`: tokens under a top-level directory of the
/// repository, or ending in a file extension the repository uses.
fn named_paths(text: &str) -> Vec<String> {
    const TOPS: [&str; 9] = [
        "agent/",
        "detectors/",
        "tests/",
        "rules/",
        "dashboards/",
        "deploy/",
        "docs/",
        "scripts/",
        ".ci/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|t| t.trim_end_matches([',', '.', ')']))
        .filter(|t| !t.contains(' ') && TOPS.iter().any(|top| t.starts_with(top)))
        .map(str::to_owned)
        .collect()
}

/// Every `.rs` file under `dir` (relative to the repository), as repository paths.
fn rust_files(dir: &str) -> Vec<String> {
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(format!("{root}/{d}")).unwrap() {
            let e = e.unwrap();
            let rel = format!("{d}/{}", e.file_name().to_string_lossy());
            if e.file_type().unwrap().is_dir() {
                stack.push(rel);
            } else if rel.ends_with(".rs") {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_path_the_architecture_names_exists() {
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    let paths = named_paths(&read("docs/ARCHITECTURE.md"));
    assert!(paths.len() > 20, "{paths:?}");
    let missing: Vec<_> = paths
        .iter()
        .filter(|p| !std::path::Path::new(&format!("{root}/{p}")).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names missing paths: {missing:?}"
    );
}

#[test]
fn every_module_is_named_in_the_architecture() {
    let named = named_paths(&read("docs/ARCHITECTURE.md"));
    let unnamed: Vec<_> = rust_files("agent/src")
        .into_iter()
        .chain(rust_files("detectors/src"))
        .filter(|f| !named.contains(f))
        .collect();
    assert!(
        unnamed.is_empty(),
        "docs/ARCHITECTURE.md does not name these modules: {unnamed:?}"
    );
}
