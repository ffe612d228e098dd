//! The committed dashboards are exactly what `tests/src/dashboards.rs` generates, and they
//! follow the conventions that make them import cleanly and work on any Prometheus data
//! source. Whether every panel query returns data is checked against a real Prometheus in
//! `fleet.rs`.

use std::collections::BTreeSet;

use serde_json::Value;
use skewwatch_e2e::dashboards;
use skewwatch_e2e::deploy::repo_root;

/// The stable uid of each dashboard: links and bookmarks use it, so it never changes.
const UIDS: [(&str, &str); 3] = [
    ("skewwatch-fleet-overview.json", "skewwatch-fleet-overview"),
    (
        "skewwatch-group-drilldown.json",
        "skewwatch-group-drilldown",
    ),
    ("skewwatch-cache-loop.json", "skewwatch-cache-loop"),
];

const PANEL_TYPES: [&str; 5] = ["timeseries", "heatmap", "stat", "table", "row"];

fn committed(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("dashboards").join(name))
        .unwrap_or_else(|e| panic!("dashboards/{name}: {e}"))
}

#[test]
fn the_committed_dashboards_are_what_the_generator_writes() {
    let generated = dashboards::all();
    let names: Vec<&str> = generated.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, UIDS.map(|(n, _)| n));
    let on_disk: BTreeSet<String> = std::fs::read_dir(repo_root().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(
        on_disk,
        names.iter().map(|n| n.to_string()).collect(),
        "dashboards/ holds JSON the generator does not write"
    );
    for (name, dashboard) in &generated {
        assert!(
            committed(name) == dashboards::to_text(dashboard),
            "dashboards/{name} differs from the generator's output: run \
             `cargo run -p skewwatch-e2e --example generate` and commit the result"
        );
    }
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// The range selectors of a query (the text between `[` and `]` outside string literals).
fn ranges(expr: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut in_string, mut start) = (false, None);
    for (i, c) in expr.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '[' if !in_string => start = Some(i + 1),
            ']' if !in_string => {
                if let Some(s) = start.take() {
                    out.push(&expr[s..i]);
                }
            }
            _ => {}
        }
    }
    out
}

/// `$name` and `${name}` references in a query.
fn variables(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let name: String = rest
            .trim_start_matches('{')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.push(name);
    }
    out
}

fn overlap(a: &Value, b: &Value) -> bool {
    let r = |v: &Value| {
        let g = &v["gridPos"];
        let n = |k: &str| g[k].as_u64().unwrap();
        (n("x"), n("y"), n("x") + n("w"), n("y") + n("h"))
    };
    let (ax0, ay0, ax1, ay1) = r(a);
    let (bx0, by0, bx1, by1) = r(b);
    ax0 < bx1 && bx0 < ax1 && ay0 < by1 && by0 < ay1
}

/// The data source every panel and target must use.
fn ds() -> Value {
    serde_json::json!({"type": "prometheus", "uid": "${datasource}"})
}

/// Checks one dashboard; returns every problem found.
fn lint(name: &str, d: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let names = lint_dashboard(name, d, &mut problems);
    let all = panels(d);
    let mut ids = BTreeSet::new();
    for (i, p) in all.iter().enumerate() {
        if !ids.insert(p["id"].as_u64().unwrap()) {
            problems.push(format!("panel id {} is used twice", p["id"]));
        }
        if all[..i].iter().any(|q| overlap(p, q)) {
            problems.push(format!("{}: overlaps another panel", p["title"]));
        }
        lint_panel(p, &names, &mut problems);
    }
    problems.iter().map(|p| format!("{name}: {p}")).collect()
}

/// The dashboard-level conventions and its variables; returns the variable names a query may
/// use.
fn lint_dashboard(name: &str, d: &Value, problems: &mut Vec<String>) -> BTreeSet<String> {
    let mut fail = |what: String| problems.push(what);
    for key in ["__inputs", "__requires"] {
        if d.get(key).is_some() {
            fail(format!(
                "has `{key}`, which only the import dialog resolves"
            ));
        }
    }
    let uid = UIDS.iter().find(|(n, _)| *n == name).map(|(_, u)| *u);
    if d["uid"].as_str() != uid {
        fail(format!("uid {} is not the stable {uid:?}", d["uid"]));
    }
    if d["schemaVersion"] != 39 || !d["id"].is_null() {
        fail("needs schemaVersion 39 and id null".into());
    }
    let vars = d["templating"]["list"].as_array().unwrap();
    let sources: Vec<&Value> = vars.iter().filter(|v| v["type"] == "datasource").collect();
    if sources.len() != 1
        || sources[0]["name"] != "datasource"
        || sources[0]["query"] != "prometheus"
    {
        fail("needs exactly one variable `datasource` of type datasource (prometheus)".into());
    }
    let mut names: BTreeSet<String> = vars
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    if !names.contains("group") {
        fail("has no `group` variable".into());
    }
    for v in vars.iter().filter(|v| v["type"] == "query") {
        if v["datasource"] != ds() || v["refresh"] != 2 || v["definition"].as_str().is_none() {
            fail(format!(
                "variable {} must query ${{datasource}} and refresh on time-range change",
                v["name"]
            ));
        }
    }
    names.extend(["__rate_interval".to_owned(), "datasource".to_owned()]);
    names
}

/// One panel's conventions: a current type, inside the grid, and (rows aside) a description,
/// a unit, `${datasource}`, and queries whose ranges follow `$__rate_interval` and whose
/// variables exist.
fn lint_panel(p: &Value, names: &BTreeSet<String>, problems: &mut Vec<String>) {
    let title = p["title"].as_str().unwrap_or("?");
    let mut fail = |what: String| problems.push(format!("{title}: {what}"));
    let kind = p["type"].as_str().unwrap_or("?");
    if !PANEL_TYPES.contains(&kind) {
        fail(format!("panel type {kind} is not current (no `graph`)"));
    }
    let g = &p["gridPos"];
    if g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() > 24 {
        fail("wider than the grid".into());
    }
    if kind == "row" {
        return;
    }
    if p["description"].as_str().is_none_or(str::is_empty) {
        fail("no description".into());
    }
    if p["fieldConfig"]["defaults"]["unit"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        fail("no unit".into());
    }
    if p["datasource"] != ds() {
        fail("not on ${datasource}".into());
    }
    let targets = p["targets"].as_array().unwrap();
    if targets.is_empty() {
        fail("no query".into());
    }
    for t in targets {
        let expr = t["expr"].as_str().unwrap_or("");
        if t["datasource"] != ds() || expr.is_empty() {
            fail("a target without a query on ${datasource}".into());
        }
        for r in ranges(expr) {
            // Rates follow the scrape interval and the zoom; only a subquery's baseline
            // window (`[1h:]`) is fixed.
            if r != "$__rate_interval" && !r.contains(':') {
                fail(format!("fixed range [{r}] in {expr}"));
            }
        }
        for v in variables(expr) {
            if !names.contains(&v) {
                fail(format!("unknown variable ${v}"));
            }
        }
    }
}

#[test]
fn every_dashboard_follows_the_conventions() {
    let mut problems = Vec::new();
    for (name, _) in UIDS {
        let d: Value = serde_json::from_str(&committed(name)).unwrap();
        problems.extend(lint(name, &d));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_lint_catches_what_it_is_for() {
    let (name, mut d) = dashboards::all().remove(0);
    assert!(lint(name, &d).is_empty());
    d["__inputs"] = serde_json::json!([]);
    let p = &mut d["panels"][1];
    p["type"] = "graph".into();
    p["fieldConfig"]["defaults"]["unit"] = "".into();
    p["targets"][0]["expr"] = "rate(skewwatch_shard_requests_total[5m])".into();
    let problems = lint(name, &d).join("\n");
    for expected in ["__inputs", "graph", "no unit", "fixed range [5m]"] {
        assert!(problems.contains(expected), "{expected}: {problems}");
    }
}
