//! Three sidecars and a real Prometheus: the counters add up to the fleet's truth where the
//! sidecars' own gauges cannot.
//!
//! Three agents (1 s windows) each see a different slice of the traffic to one group of ten
//! shards: A 1,000 requests/s with 45% on `s3`, B 600/s with 20%, C 400/s with 7.5%, the rest
//! spread evenly. The fleet's share of `s3` is 600/2,000 = 30%; the mean of the three share
//! gauges is 24%. Prometheus 2.42 scrapes all three every second and evaluates the rules of
//! `rules/prometheus/` every second. The test checks the fleet-share recording rule, that the
//! fleet hot-shard alert fires for `s3` and no other shard, that every rule evaluates without
//! error, and that every query of every committed dashboard returns data.
//!
//! The alerts' `for:` durations are set to 0 in the copy Prometheus loads, so the test takes
//! seconds; the promtool unit tests (`rules.rs`) cover the durations.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use skewwatch_e2e::agent::Agent;
use skewwatch_e2e::dashboards;
use skewwatch_e2e::deploy::{RULES_FILE, repo_root};
use skewwatch_e2e::prometheus::Prometheus;
use skewwatch_e2e::traffic::{Steady, Stream};

/// Per sidecar: requests per second to group `g`, and the share of them on `s3`.
const SIDECARS: [(f64, f64); 3] = [(1000.0, 0.45), (600.0, 0.20), (400.0, 0.075)];
const SHARDS: usize = 10;
const HOT: usize = 3;

/// One-second windows; ten shards per group, so group `h`'s twelve shards fold two into
/// `__other__` (the folding panels and alert need some).
const AGENT_CONFIG: &str = "window:\n  window_secs: 1\nlimits:\n  max_shards_per_group: 10\n";

/// What `$__rate_interval` becomes: Grafana's value for a 1 s scrape interval at this zoom
/// would be a few seconds; ten samples per range keeps the rates smooth.
const RATE_INTERVAL: &str = "10s";

/// The streams of one shard with `per_second` requests: two timing lines a second (slower on
/// the hot shard, naming a cache key so the what-if series and their dashboard panels exist),
/// the rest as counters: 75% cache hits, 20% misses, 5% timeouts.
fn shard_streams(group: &str, shard: usize, per_second: f64, hot: bool) -> Vec<Stream> {
    let tags = |extra: &str| format!("group:{group},shard:s{shard}{extra}");
    let timed = 2.0;
    let rest = per_second - timed;
    vec![
        Stream {
            tags: tags(",cache:hit,key:user:7,cache_key:user:7"),
            per_second: timed,
            latency_ms: Some(if hot { 40.0 } else { 8.0 }),
        },
        Stream {
            tags: tags(&format!(",cache:hit,key:user:{}", shard % 4)),
            per_second: rest * 0.75,
            latency_ms: None,
        },
        Stream {
            tags: tags(",cache:miss,key:"),
            per_second: rest * 0.20,
            latency_ms: None,
        },
        Stream {
            tags: tags(",cache:miss,outcome:timeout"),
            per_second: rest * 0.05,
            latency_ms: None,
        },
    ]
}

/// A sidecar's traffic to group `g`, plus (for the first) an even spread over group `h`'s
/// twelve shards.
fn sidecar_streams(index: usize) -> Vec<Stream> {
    let (total, hot_share) = SIDECARS[index];
    let mut streams: Vec<Stream> = (0..SHARDS)
        .flat_map(|s| {
            let rate = if s == HOT {
                total * hot_share
            } else {
                total * (1.0 - hot_share) / (SHARDS - 1) as f64
            };
            shard_streams("g", s, rate, s == HOT)
        })
        .collect();
    if index == 0 {
        streams.extend((0..12).flat_map(|s| shard_streams("h", s, 20.0, false)));
    }
    streams
}

/// The rules file with every `for:` set to 0 s.
fn rules_without_for() -> String {
    let text = std::fs::read_to_string(repo_root().join(RULES_FILE)).unwrap();
    let mut replaced = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            let indent = l.len() - l.trim_start().len();
            if l.trim_start().starts_with("for: ") {
                replaced += 1;
                format!("{}for: 0s", &l[..indent])
            } else {
                l.to_owned()
            }
        })
        .collect();
    assert!(replaced >= 8, "{replaced} `for:` lines");
    out.join("\n") + "\n"
}

fn prometheus_config(agents: &[Agent]) -> String {
    let targets: Vec<String> = agents.iter().map(|a| format!("'{}'", a.http)).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - skewwatch.rules.yml\n\
         scrape_configs:\n  - job_name: skewwatch\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    )
}

/// The value of the single sample `expr` returns, if exactly one.
fn value(p: &Prometheus, expr: &str) -> Option<f64> {
    let r = p.query(expr).ok()?;
    let [s] = r.as_slice() else { return None };
    s["value"][1].as_str()?.parse().ok()
}

/// Every `SkewwatchFleetHotShard` alert as (group, shard, state).
fn hot_shard_alerts(p: &Prometheus) -> Vec<(String, String, String)> {
    let label = |a: &Value, k: &str| a["labels"][k].as_str().unwrap_or("").to_owned();
    p.alerts()
        .unwrap_or_default()
        .iter()
        .filter(|a| a["labels"]["alertname"] == "SkewwatchFleetHotShard")
        .map(|a| {
            (
                label(a, "group"),
                label(a, "shard"),
                a["state"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn three_sidecars_add_up_in_a_real_prometheus() {
    let started = Instant::now();
    let agents: Vec<Agent> = (0..SIDECARS.len())
        .map(|_| Agent::start(AGENT_CONFIG))
        .collect();
    let _traffic = Steady::start(
        agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.statsd, sidecar_streams(i)))
            .collect(),
    );
    let files = [("skewwatch.rules.yml", rules_without_for())];
    let Some(prom) = Prometheus::start(&prometheus_config(&agents), &files) else {
        return;
    };

    // The fleet's share of s3, from the summed counters, is 30%.
    let share_rule = r#"group_shard:skewwatch_shard_share:ratio5m{group="g", shard="s3"}"#;
    let share = prom
        .wait_for(Duration::from_secs(90), |p| {
            value(p, share_rule).filter(|v| (v - 0.30).abs() <= 0.01)
        })
        .unwrap_or_else(|| {
            panic!(
                "the fleet share of s3 is {:?}, not 0.30 ± 0.01\n{}",
                value(&prom, share_rule),
                prom.log()
            )
        });
    // The sidecars' own gauges average to the wrong answer.
    let gauges = r#"avg(skewwatch_shard_share_ratio{group="g", shard="s3"})"#;
    let mean = value(&prom, gauges).expect("three share gauges");
    assert!((mean - 0.2417).abs() < 0.02, "mean of the gauges {mean}");
    eprintln!("fleet share of s3 {share:.4} (mean of the sidecars' gauges {mean:.4})");

    check_hot_shard_alert(&prom);
    check_rules_evaluate(&prom);
    check_dashboard_queries(&prom);
    // Seconds later, with more samples in every rate, the share still holds.
    let later = value(&prom, share_rule).expect("the share rule");
    assert!(
        (later - 0.30).abs() <= 0.01,
        "the fleet share drifted to {later}"
    );
    eprintln!(
        "fleet share of s3 {later:.4} at the end; the test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The fleet hot-shard alert fires for s3, and for no other shard.
fn check_hot_shard_alert(prom: &Prometheus) {
    prom.wait_for(Duration::from_secs(60), |p| {
        hot_shard_alerts(p)
            .iter()
            .any(|(g, s, state)| g == "g" && s == "s3" && state == "firing")
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "no firing SkewwatchFleetHotShard for s3: {:?}",
            hot_shard_alerts(prom)
        )
    });
    let named: BTreeSet<(String, String)> = hot_shard_alerts(prom)
        .into_iter()
        .map(|(g, s, _)| (g, s))
        .collect();
    assert_eq!(named, BTreeSet::from([("g".to_owned(), "s3".to_owned())]));
}

/// Every recording and alerting rule has been evaluated without an error.
fn check_rules_evaluate(prom: &Prometheus) {
    let unhealthy = prom.wait_for(Duration::from_secs(30), |p| {
        let rules = p.rules().ok()?;
        (rules.len() >= 24 && rules.iter().all(|r| r["health"] == "ok")).then_some(())
    });
    if unhealthy.is_none() {
        let rules = prom.rules().unwrap_or_default();
        let bad: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{} {}: {}", r["name"], r["health"], r["lastError"]))
            .collect();
        panic!("rules not evaluated cleanly:\n{}", bad.join("\n"));
    }
}

/// A dashboard's variables filled as Grafana would by default: "All" (its `allValue`) where
/// allowed, else the first value its query returns.
fn variables(prom: &Prometheus, d: &Value) -> Vec<(String, String)> {
    let mut vars = vec![("__rate_interval".to_owned(), RATE_INTERVAL.to_owned())];
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().unwrap().to_owned();
        let definition = substitute(v["definition"].as_str().unwrap(), &vars);
        let inner = definition
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {name}: {definition}"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        let values = prom.label_values(label.trim(), selector.trim()).unwrap();
        assert!(
            !values.is_empty(),
            "variable {name}: {definition} has no values"
        );
        let value = match v["allValue"].as_str() {
            Some(all) if v["includeAll"] == true => all.to_owned(),
            _ => values[0].clone(),
        };
        vars.push((name, value));
    }
    vars
}

/// `expr` with `$name` and `${name}` replaced, longest names first.
fn substitute(expr: &str, vars: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = vars.iter().collect();
    sorted.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    let mut out = expr.to_owned();
    for (name, value) in sorted {
        out = out.replace(&format!("${{{name}}}"), value);
        out = out.replace(&format!("${name}"), value);
    }
    out
}

/// Every query of every committed dashboard (panels and annotations) returns at least one
/// series, with the variables filled in.
fn check_dashboard_queries(prom: &Prometheus) {
    let mut pending: Vec<(String, String)> = Vec::new();
    for (name, _) in dashboards::all() {
        let text = std::fs::read_to_string(repo_root().join("dashboards").join(name)).unwrap();
        let d: Value = serde_json::from_str(&text).unwrap();
        let vars = variables(prom, &d);
        let annotations = d["annotations"]["list"].as_array().unwrap();
        for a in annotations.iter().filter(|a| a["expr"].is_string()) {
            let what = format!("{name}: annotation {}", a["name"]);
            pending.push((what, substitute(a["expr"].as_str().unwrap(), &vars)));
        }
        for p in d["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().into_iter().flatten() {
                let what = format!("{name}: {} ({})", p["title"], t["refId"]);
                pending.push((what, substitute(t["expr"].as_str().unwrap(), &vars)));
            }
        }
    }
    let total = pending.len();
    assert!(total > 40, "{total} queries");
    // Rates need a few scrapes of every series; poll until every query has data.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    while !pending.is_empty() && Instant::now() < deadline {
        last.clear();
        pending.retain(|(what, q)| match prom.query(q) {
            Ok(r) if !r.is_empty() => false,
            Ok(_) => {
                last.push(format!("{what}: no series\n    {q}"));
                true
            }
            Err(e) => {
                last.push(format!("{what}: {e}"));
                true
            }
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    assert!(
        pending.is_empty(),
        "{} of {total} dashboard queries return nothing:\n{}",
        pending.len(),
        last.join("\n")
    );
    eprintln!("all {total} dashboard queries return data");
}
