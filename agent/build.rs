//! Build provenance for `skewwatch --version`: the commit the binary was built from and its
//! build date, as the compile-time variables `SKEWWATCH_COMMIT` and `SKEWWATCH_BUILD_DATE`.
//!
//! The build date is `SOURCE_DATE_EPOCH` when it is set (the reproducible-builds convention),
//! else the commit's own date, never the wall clock: two builds of one commit embed the same
//! text, so the binary, and the image built from it, come out byte for byte the same.
//!
//! The commit is `SKEWWATCH_COMMIT` when set (a packager building from a source tarball that
//! knows which commit it holds), else `git rev-parse HEAD` of this repository, else `unknown`
//! (a tarball without `.git`, or no git installed). A repository that merely encloses the
//! source tree (a tarball unpacked inside another checkout) is not asked.

#![expect(
    clippy::disallowed_methods,
    reason = "a build script's input is the environment cargo and the packager set"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Printed for a commit or a date that cannot be known.
const UNKNOWN: &str = "unknown";

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-env-changed=SKEWWATCH_COMMIT");
    // Without a rerun-if-changed line cargo would rerun the script on any change in the
    // package; with one, only on what is named. The script itself always is.
    println!("cargo:rerun-if-changed=build.rs");

    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let workspace = manifest_dir.parent().unwrap_or(&manifest_dir).to_owned();
    let repo = Repo::open(&workspace);
    if let Some(repo) = &repo {
        repo.watch();
    }

    let commit = std::env::var("SKEWWATCH_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .or_else(|| repo.as_ref().and_then(|r| r.git(&["rev-parse", "HEAD"])))
        .unwrap_or_else(|| UNKNOWN.to_owned());
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .or_else(|| {
            repo.as_ref()
                .and_then(|r| r.git(&["log", "-1", "--format=%ct", "HEAD"]))
                .and_then(|s| s.parse::<i64>().ok())
        });
    let date = epoch.map_or_else(|| UNKNOWN.to_owned(), iso8601_utc);

    println!("cargo:rustc-env=SKEWWATCH_COMMIT={commit}");
    println!("cargo:rustc-env=SKEWWATCH_BUILD_DATE={date}");
}

/// The git repository whose top level is the workspace.
struct Repo {
    /// The workspace root, where git runs.
    root: PathBuf,
}

impl Repo {
    /// The repository at `workspace`, if git is installed and `workspace` is its top level.
    fn open(workspace: &Path) -> Option<Repo> {
        let repo = Repo {
            root: workspace.to_owned(),
        };
        let top = repo.git(&["rev-parse", "--show-toplevel"])?;
        let same = std::fs::canonicalize(top).ok()? == std::fs::canonicalize(workspace).ok()?;
        same.then_some(repo)
    }

    /// Reruns the script when HEAD moves: HEAD itself (a checkout), the branch it names (a
    /// commit) and packed-refs (a branch packed by `git gc`). Worktrees keep HEAD in their own
    /// directory and refs in the common one; `--git-path` resolves both. Only paths that exist
    /// are named: cargo reruns the script on every build for a path that is missing.
    fn watch(&self) {
        let mut paths = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
        if let Some(branch) = self.git(&["symbolic-ref", "-q", "HEAD"]) {
            paths.push(branch);
        }
        for p in paths {
            if let Some(path) = self.git(&["rev-parse", "--path-format=absolute", "--git-path", &p])
                && Path::new(&path).exists()
            {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }

    /// Runs git in the workspace; its trimmed standard output when it succeeds.
    fn git(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&self.root)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        (out.status.success() && !text.is_empty()).then_some(text)
    }
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
fn iso8601_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days to civil date (Howard Hinnant's algorithm): eras of 400 years from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}
