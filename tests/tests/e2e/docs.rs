//! Documentation that must stay true to the code: every field of the shipped configuration is
//! in the configuration reference, and the README keeps its two set-up commands.
//!
//! docs/ARCHITECTURE.md is held to the tree: every path it names exists, every module of both
//! library crates is named in it, and every room imports only the rooms its layer table allows.

use std::collections::{BTreeMap, BTreeSet};

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

/// The layer table of docs/ARCHITECTURE.md whose header row starts with `| {header} |`: each
/// room (a top-level module: a file or folder under `src/`) with the rooms it may import;
/// `None` when it may import anything.
fn layer_table(doc: &str, header: &str) -> BTreeMap<String, Option<BTreeSet<String>>> {
    let rows = doc
        .lines()
        .skip_while(|l| !l.starts_with(&format!("| {header} |")))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    let mut table = BTreeMap::new();
    for row in rows {
        let cells: Vec<&str> = row.split('|').collect();
        // The rooms of a row are the names in backticks outside its parentheses.
        let mut depth = 0;
        let names: String = cells[1]
            .chars()
            .filter(|&c| {
                depth += i32::from(c == '(') - i32::from(c == ')');
                depth == 0 && c != ')'
            })
            .collect();
        let (rooms, may) = (ticked(&names), cells[2].trim());
        let allowed = (may != "anything").then(|| ticked(may).into_iter().collect());
        for room in rooms {
            table.insert(room, allowed.clone());
        }
    }
    table
}

/// The names in backticks in `text`.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// `src` with comments, string and character literals blanked (newlines kept, so offsets and
/// line numbers still hold), then every item under `#[cfg(test)]` blanked as well. Also returns
/// the names of the file modules declared under `#[cfg(test)]` (`mod tests;`).
fn code_only(src: &str) -> (Vec<char>, Vec<String>) {
    let s: Vec<char> = src.chars().collect();
    let mut out = s.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    // The end of the string literal whose opening quote is at `i`.
    let string_end = |mut i: usize| {
        i += 1;
        while i < s.len() && s[i] != '"' {
            i += if s[i] == '\\' { 2 } else { 1 };
        }
        i + 1
    };
    let mut i = 0;
    while i < s.len() {
        let (c, next) = (s[i], s.get(i + 1).copied());
        if c == '/' && next == Some('/') {
            let end = s[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(s.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (0, i);
            while j < s.len() {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == '"' {
            let end = string_end(i);
            blank(&mut out, i, end);
            i = end;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a), which stays.
            if next == Some('\\') {
                let end = s[i + 3..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map_or(s.len(), |p| i + 4 + p);
                blank(&mut out, i, end);
                i = end;
            } else if s.get(i + 2) == Some(&'\'') {
                blank(&mut out, i, i + 3);
                i += 3;
            } else {
                i += 1;
            }
        } else if ident(c) {
            let start = i;
            while i < s.len() && ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let hashes = s[i..].iter().take_while(|&&c| c == '#').count();
            if matches!(word.as_str(), "r" | "br" | "cr") && s.get(i + hashes) == Some(&'"') {
                // A raw string: ends at a quote followed by as many hashes.
                let mut j = i + hashes + 1;
                while j < s.len()
                    && !(s[j] == '"'
                        && s[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&c| c == '#')
                            .count()
                            == hashes)
                {
                    j += 1;
                }
                blank(&mut out, start, j + 1 + hashes);
                i = j + 1 + hashes;
            } else if matches!(word.as_str(), "b" | "c") && s.get(i) == Some(&'"') {
                let end = string_end(i);
                blank(&mut out, start, end);
                i = end;
            }
        } else {
            i += 1;
        }
    }
    let test_modules = blank_test_items(&mut out);
    (out, test_modules)
}

/// Blanks every item under `#[cfg(test)]` in `code` (comments and literals already blanked);
/// returns the names of the file modules among them.
fn blank_test_items(code: &mut [char]) -> Vec<String> {
    const ATTR: &str = "#[cfg(test)]";
    let attr: Vec<char> = ATTR.chars().collect();
    let mut modules = Vec::new();
    let mut i = 0;
    while i + attr.len() <= code.len() {
        if code[i..i + attr.len()] != attr[..] {
            i += 1;
            continue;
        }
        // The item runs to its first `;` or to the `}` that closes its first `{`, outside
        // parentheses and brackets (and past any further attributes).
        let (mut j, mut depth, mut end) = (i + attr.len(), 0i32, None);
        while j < code.len() && end.is_none() {
            match code[j] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => end = Some(j + 1),
                '{' if depth == 0 => {
                    let mut braces = 0;
                    for (k, &c) in code.iter().enumerate().skip(j) {
                        braces += i32::from(c == '{') - i32::from(c == '}');
                        if braces == 0 {
                            end = Some(k + 1);
                            break;
                        }
                    }
                    end = end.or(Some(code.len()));
                }
                _ => {}
            }
            j += 1;
        }
        let end = end.unwrap_or(code.len());
        let item: String = code[i + attr.len()..end].iter().collect();
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        if item.trim_end().ends_with(';')
            && let Some(at) = words.iter().position(|&w| w == "mod")
        {
            modules.push(words[at + 1].to_owned());
        }
        for c in &mut code[i..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end;
    }
    modules
}

/// A reference from one room to another: the file, its line, and the path as written.
#[derive(Debug)]
struct Import {
    line: usize,
    room: String,
    path: String,
}

/// The rooms `code` names through `crate::…` (and `super::…` that climbs to the crate root),
/// for a file at module path `module` (`["ingest", "otlp", "traces"]`).
fn imports(code: &[char], module: &[String]) -> Vec<Import> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let skip_ws = |mut i: usize| {
        while i < code.len() && code[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let word_at = |i: usize| -> String { code[i..].iter().take_while(|&&c| ident(c)).collect() };
    // After `::` at `i`: the next segment's index, if `::` is there.
    let after_colons = |i: usize| {
        let i = skip_ws(i);
        (code.get(i) == Some(&':') && code.get(i + 1) == Some(&':')).then(|| skip_ws(i + 2))
    };
    let line_of = |i: usize| 1 + code[..i].iter().filter(|&&c| c == '\n').count();
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if !ident(code[i]) || (i > 0 && (ident(code[i - 1]) || code[i - 1] == '$')) {
            i += 1;
            continue;
        }
        let word = word_at(i);
        let start = i;
        i += word.len();
        // How many levels the path climbs; the crate root is level `module.len()`.
        let mut at = i;
        let root = match word.as_str() {
            "crate" => after_colons(at),
            "super" => {
                let mut levels = 1;
                let mut next = after_colons(at);
                while let Some(n) = next.filter(|&n| word_at(n) == "super") {
                    levels += 1;
                    at = n + "super".len();
                    next = after_colons(at);
                }
                next.filter(|_| levels >= module.len())
            }
            _ => None,
        };
        let Some(seg) = root else { continue };
        let rooms = if code[seg] == '{' {
            // `crate::{a::x, b}`: the first segment of each path in the group.
            let (mut depth, mut expect_name, mut rooms) = (0, true, Vec::new());
            for (k, &c) in code.iter().enumerate().skip(seg) {
                match c {
                    '{' => {
                        depth += 1;
                        expect_name = depth == 1;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => expect_name = true,
                    c if expect_name && ident(c) => {
                        rooms.push(word_at(k));
                        expect_name = false;
                    }
                    _ => {}
                }
            }
            rooms
        } else {
            vec![word_at(seg)]
        };
        // The path as written: segments, `::` and a group in braces.
        let mut braces = 0;
        let path: String = code[start..]
            .iter()
            .take_while(|&&c| {
                braces += i32::from(c == '{') - i32::from(c == '}');
                braces > 0 || c == '}' || ident(c) || c == ':'
            })
            .collect();
        let path = path.split_whitespace().collect::<Vec<_>>().join(" ");
        for room in rooms.into_iter().filter(|r| !r.is_empty() && r != "self") {
            out.push(Import {
                line: line_of(start),
                room,
                path: path.to_owned(),
            });
        }
    }
    out
}

/// Every breach of the layer rules in the crate under `src` (a repository path): a file whose
/// room imports a room its row does not allow, or a room the table does not name.
fn layer_breaches(src: &str, rules: &BTreeMap<String, Option<BTreeSet<String>>>) -> Vec<String> {
    let mut code = BTreeMap::new();
    // Files and folders of modules declared under `#[cfg(test)]` (`mod tests;`).
    let mut test_paths = Vec::new();
    for f in rust_files(src) {
        let (text, test_modules) = code_only(&read(&f));
        // `mod tests;` in `a/mod.rs` is `a/tests.rs`; in `a/b.rs`, `a/b/tests.rs`.
        let dir = match f.strip_suffix(".rs") {
            Some(d) if !["/mod", "/lib", "/main"].iter().any(|m| d.ends_with(m)) => d.to_owned(),
            _ => f
                .rsplit_once('/')
                .map_or(String::new(), |(d, _)| d.to_owned()),
        };
        for m in test_modules {
            test_paths.push(format!("{dir}/{m}.rs"));
            test_paths.push(format!("{dir}/{m}/"));
        }
        code.insert(f, text);
    }
    // The rooms themselves: the first segment of every file's path. A `crate::name` that is
    // none of them (a `#[macro_export]` macro such as `crate::config_part!`) is no room.
    let rooms: BTreeSet<&str> = code
        .keys()
        .filter_map(|f| f[src.len() + 1..].split('/').next())
        .map(|r| r.trim_end_matches(".rs"))
        .collect();
    let mut breaches = Vec::new();
    // What each room imports of the other rooms, to find allowances no import uses.
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (f, text) in &code {
        let rel = &f[src.len() + 1..];
        if rel == "lib.rs" || test_paths.iter().any(|t| f.starts_with(t.as_str())) {
            continue;
        }
        let mut module: Vec<String> = rel
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_owned)
            .collect();
        if module.len() > 1 && module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        let room = &module[0];
        let Some(allowed) = rules.get(room) else {
            breaches.push(format!(
                "{f}: the room `{room}` has no row in the layer table"
            ));
            continue;
        };
        let Some(allowed) = allowed else { continue };
        for import in imports(text, &module) {
            if &import.room != room && rooms.contains(import.room.as_str()) {
                used.entry(room.clone())
                    .or_default()
                    .insert(import.room.clone());
            }
            if &import.room != room
                && rooms.contains(import.room.as_str())
                && !allowed.contains(&import.room)
            {
                let may: Vec<&str> = allowed.iter().map(String::as_str).collect();
                breaches.push(format!(
                    "{f}:{}: `{room}` imports `{}` ({}), but may import only [{}]",
                    import.line,
                    import.room,
                    import.path,
                    may.join(", ")
                ));
            }
        }
    }
    // An allowance is used when a room of its row (rooms with the same allowances share a
    // row's promise) imports it; one no import uses is a promise the code no longer keeps.
    let mut by_allowance: BTreeMap<&BTreeSet<String>, BTreeSet<&str>> = BTreeMap::new();
    for (room, allowed) in rules {
        if let Some(allowed) = allowed
            && rooms.contains(room.as_str())
        {
            by_allowance
                .entry(allowed)
                .or_default()
                .insert(room.as_str());
        }
    }
    for (allowed, holders) in by_allowance {
        for a in allowed {
            let imported = holders
                .iter()
                .any(|r| used.get(*r).is_some_and(|u| u.contains(a)));
            if !imported && rooms.contains(a.as_str()) {
                let holders: Vec<&str> = holders.iter().copied().collect();
                breaches.push(format!(
                    "{src}: [{}] may import `{a}`, but no import of theirs uses it: drop the \
                     allowance from the layer table",
                    holders.join(", ")
                ));
            }
        }
    }
    breaches
}

#[test]
fn every_room_imports_only_what_the_layer_rules_allow() {
    let doc = read("docs/ARCHITECTURE.md");
    let mut breaches = Vec::new();
    for (src, header) in [
        ("agent/src", "agent room"),
        ("detectors/src", "detectors room"),
    ] {
        let rules = layer_table(&doc, header);
        assert!(
            rules.len() > 5,
            "no layer table `| {header} | may import |`: {rules:?}"
        );
        breaches.extend(layer_breaches(src, &rules));
    }
    assert!(
        breaches.is_empty(),
        "{} imports break the layer rules of docs/ARCHITECTURE.md:\n{}",
        breaches.len(),
        breaches.join("\n")
    );
}
