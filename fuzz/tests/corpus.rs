//! Every file of `corpus/<target>/` (the seeds) and `regressions/<target>/` (what the fuzzer
//! found, each fixed) runs through its target: `cargo test` keeps every finding fixed without
//! AFL installed.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_seeds_and_every_seed_and_finding_runs_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, target) in skewwatch_fuzz::TARGETS {
        let seeds = inputs(&root.join("corpus").join(name));
        assert!(!seeds.is_empty(), "fuzz/corpus/{name} has no seed");
        for file in seeds
            .iter()
            .chain(&inputs(&root.join("regressions").join(name)))
        {
            let data = std::fs::read(file).expect("a readable input");
            if let Err(panic) = std::panic::catch_unwind(|| target(&data)) {
                panic!("{}: target {name} panicked: {panic:?}", file.display());
            }
        }
    }
}

#[test]
fn every_target_has_a_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, _) in skewwatch_fuzz::TARGETS {
        let bin = root.join("src/bin").join(format!("{name}.rs"));
        assert!(bin.is_file(), "{} is missing", bin.display());
    }
}
