//! The Grafana dashboards of `dashboards/`, generated: `cargo run -p skewwatch-e2e --example
//! generate` writes them, and `tests/tests/e2e/dashboards.rs` checks that the committed files are
//! exactly what this module builds, that they follow the conventions below, and (in
//! `tests/tests/e2e/fleet.rs`) that every panel query returns data from a real Prometheus.
//!
//! Conventions, so a dashboard imports cleanly by upload, API or file provisioning:
//!
//! - classic dashboard JSON (`schemaVersion` 39), `id: null`, a stable `uid`;
//! - one `datasource` template variable of type `datasource`, no `__inputs` (which only the
//!   import dialog resolves), every panel and target on `${datasource}`;
//! - current panel types only (`timeseries`, `heatmap`, `stat`, `table`, `row`);
//! - every rate-like range is `$__rate_interval`, so a panel follows the scrape interval and the
//!   zoom; the only fixed range is a subquery's baseline window;
//! - every panel has a description and a unit;
//! - fleet views add up the counters of every sidecar (`sum by`); a panel that shows a
//!   sidecar's own last-window gauges says so.
//!
//! The dashboards need no recording rule; the alert panels read Prometheus' `ALERTS` for the
//! rules in `rules/prometheus/` and `skewwatch_alert_firing` for the agents' own detectors.

use serde_json::{Value, json};

/// The requests counter every fleet view sums.
const REQ: &str = "skewwatch_shard_requests_total";

/// Every dashboard, with the file name it is committed under in `dashboards/`.
pub fn all() -> Vec<(&'static str, Value)> {
    vec![
        ("skewwatch-fleet-overview.json", fleet_overview()),
        ("skewwatch-group-drilldown.json", group_drilldown()),
        ("skewwatch-cache-loop.json", cache_loop()),
    ]
}

/// A dashboard as committed: pretty JSON (keys sorted, two-space indent) and a final newline.
pub fn to_text(dashboard: &Value) -> String {
    let mut s = serde_json::to_string_pretty(dashboard).expect("a JSON value serializes");
    s.push('\n');
    s
}

/// `${datasource}`, the data source of every panel and target.
fn ds() -> Value {
    json!({"type": "prometheus", "uid": "${datasource}"})
}

/// `rate(<selector>[$__rate_interval])`.
fn rate(selector: &str) -> String {
    format!("rate({selector}[$__rate_interval])")
}

/// One query of a panel.
#[derive(Debug, Clone)]
struct Target {
    expr: String,
    legend: String,
    instant: bool,
}

fn target(expr: impl Into<String>, legend: &str) -> Target {
    Target {
        expr: expr.into(),
        legend: legend.to_owned(),
        instant: false,
    }
}

fn instant(expr: impl Into<String>, legend: &str) -> Target {
    Target {
        instant: true,
        ..target(expr, legend)
    }
}

/// One panel before layout.
#[derive(Debug, Clone)]
struct Panel {
    kind: &'static str,
    title: &'static str,
    description: &'static str,
    unit: &'static str,
    width: u32,
    height: u32,
    targets: Vec<Target>,
    /// Panel-type options and extra field settings, merged into the defaults.
    options: Value,
    defaults: Value,
    overrides: Vec<Value>,
    transformations: Vec<Value>,
}

fn panel(
    kind: &'static str,
    title: &'static str,
    description: &'static str,
    unit: &'static str,
    targets: Vec<Target>,
) -> Panel {
    let (width, height) = match kind {
        "stat" => (6, 4),
        "row" => (24, 1),
        _ => (12, 8),
    };
    Panel {
        kind,
        title,
        description,
        unit,
        width,
        height,
        targets,
        options: json!({}),
        defaults: json!({}),
        overrides: Vec::new(),
        transformations: Vec::new(),
    }
}

fn timeseries(t: &'static str, d: &'static str, unit: &'static str, q: Vec<Target>) -> Panel {
    Panel {
        options: json!({
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": true,
                       "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"}
        }),
        defaults: json!({"custom": {"lineWidth": 1, "fillOpacity": 0, "showPoints": "never",
                                    "spanNulls": false}}),
        ..panel("timeseries", t, d, unit, q)
    }
}

fn stat(t: &'static str, d: &'static str, unit: &'static str, q: Vec<Target>) -> Panel {
    Panel {
        options: json!({
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": false},
            "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
            "orientation": "auto", "textMode": "auto"
        }),
        ..panel("stat", t, d, unit, q)
    }
}

fn row(title: &'static str) -> Panel {
    panel("row", title, "", "", Vec::new())
}

impl Panel {
    fn size(mut self, width: u32, height: u32) -> Self {
        self.width = width;
        self.height = height;
        self
    }

    /// Draws the series whose display name matches `regex` dashed: reference lines (fair
    /// shares, noise floors) beside the figure they frame.
    fn dashed(mut self, regex: &str) -> Self {
        self.overrides.push(json!({
            "matcher": {"id": "byRegexp", "options": regex},
            "properties": [{"id": "custom.lineStyle",
                            "value": {"fill": "dash", "dash": [10, 10]}}]
        }));
        self
    }

    fn thresholds(mut self, red_from: f64) -> Self {
        self.defaults["thresholds"] = json!({
            "mode": "absolute",
            "steps": [{"color": "green", "value": null}, {"color": "red", "value": red_from}]
        });
        self
    }

    /// The panel's JSON at grid position (`x`, `y`) with id `id`.
    fn to_json(&self, id: u32, x: u32, y: u32) -> Value {
        let grid = json!({"h": self.height, "w": self.width, "x": x, "y": y});
        if self.kind == "row" {
            return json!({"type": "row", "title": self.title, "id": id, "gridPos": grid,
                          "collapsed": false, "panels": []});
        }
        let mut defaults = json!({"unit": self.unit});
        merge(&mut defaults, &self.defaults);
        let targets: Vec<Value> = self
            .targets
            .iter()
            .zip(b'A'..)
            .map(|(t, letter)| {
                json!({
                    "datasource": ds(),
                    "editorMode": "code",
                    "expr": t.expr,
                    "format": if self.kind == "table" { "table" } else { "time_series" },
                    "instant": t.instant,
                    "legendFormat": t.legend,
                    "range": !t.instant,
                    "refId": char::from(letter).to_string(),
                })
            })
            .collect();
        let mut p = json!({
            "datasource": ds(),
            "description": self.description,
            "fieldConfig": {"defaults": defaults, "overrides": self.overrides},
            "gridPos": grid,
            "id": id,
            "options": self.options,
            "targets": targets,
            "title": self.title,
            "type": self.kind,
        });
        if !self.transformations.is_empty() {
            p["transformations"] = Value::Array(self.transformations.clone());
        }
        p
    }
}

/// Adds every field of `extra` to `base`, recursively.
fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e.clone(),
    }
}

/// Places panels left to right in a 24-column grid, a row panel starting a new line.
fn layout(panels: &[Panel]) -> Vec<Value> {
    let (mut x, mut y, mut line_height) = (0, 0, 0);
    let mut out = Vec::new();
    for (i, p) in panels.iter().enumerate() {
        if x + p.width > 24 || (p.kind == "row" && x > 0) {
            x = 0;
            y += line_height;
            line_height = 0;
        }
        out.push(p.to_json(i as u32 + 1, x, y));
        x += p.width;
        line_height = line_height.max(p.height);
    }
    out
}

/// The `datasource` variable: which Prometheus (or Thanos, Mimir) to query.
fn datasource_variable() -> Value {
    json!({
        "current": {}, "hide": 0, "includeAll": false, "label": "Data source", "multi": false,
        "name": "datasource", "options": [], "query": "prometheus", "refresh": 1, "regex": "",
        "skipUrlSync": false, "type": "datasource"
    })
}

/// A variable filled from `label_values(...)`, refreshed when the time range changes. With
/// `all`, "All" matches every value (`.+`), so selectors use `=~`.
fn query_variable(name: &str, label: &str, query: &str, all: bool) -> Value {
    let mut v = json!({
        "current": {}, "datasource": ds(), "definition": query, "hide": 0,
        "includeAll": all, "label": label, "multi": all, "name": name, "options": [],
        "query": {"qryType": 1, "query": query,
                  "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2, "regex": "", "skipUrlSync": false, "sort": 1, "type": "query"
    });
    if all {
        v["allValue"] = json!(".+");
    }
    v
}

/// The dashboard around `panels`.
fn dashboard(
    uid: &str,
    title: &str,
    description: &str,
    variables: Vec<Value>,
    panels: &[Panel],
) -> Value {
    json!({
        "annotations": {"list": [
            {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
             "enable": true, "hide": true, "iconColor": "rgba(0, 211, 255, 1)",
             "name": "Annotations & Alerts", "type": "dashboard"},
            {"datasource": ds(), "enable": true, "hide": false, "iconColor": "red",
             "name": "Firing skewwatch rule alerts",
             "expr": "ALERTS{alertstate=\"firing\", alertname=~\"Skewwatch.*\"}",
             "step": "60s", "titleFormat": "{{alertname}}",
             "textFormat": "{{group}} {{shard}}", "useValueForTime": false}
        ]},
        "description": description,
        "editable": true,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": null,
        "links": [{"asDropdown": false, "icon": "external link", "includeVars": false,
                   "keepTime": true, "tags": ["skewwatch"], "targetBlank": false,
                   "title": "skewwatch dashboards", "type": "dashboards"}],
        "panels": layout(panels),
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["skewwatch"],
        "templating": {"list": variables},
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": ""
    })
}

/// Fleet overview: skew of every group from the summed counters, the sidecars' own Gini
/// against its floor, firing alerts, and whether ingest is healthy.
fn fleet_overview() -> Value {
    let variables = vec![
        datasource_variable(),
        query_variable(
            "group",
            "Group",
            "label_values(skewwatch_shard_requests_total, group)",
            true,
        ),
    ];
    let mut panels = skew_panels();
    panels.extend(alert_panels());
    panels.extend(ingest_panels());
    dashboard(
        "skewwatch-fleet-overview",
        "skewwatch / Fleet overview",
        "Every group's skew from the counters of every sidecar added up, the alerts firing, and \
         the health of the sidecars' ingest. docs/fleet.md explains each panel.",
        variables,
        &panels,
    )
}

/// Per shard of the selected groups, fleet-wide: `sum by (group, shard)` of `fn_name(...)`.
fn per_shard(fn_name: &str, extra: &str) -> String {
    format!(
        "sum by (group, shard) ({fn_name}({REQ}{{group=~\"$group\", shard!=\"__other__\"{extra}}}[$__rate_interval]))"
    )
}

/// Long because it is a table: one entry per panel, its query beside its description, which
/// read best together.
fn skew_panels() -> Vec<Panel> {
    let shard_rate = per_shard("rate", "");
    let shard_count = per_shard("increase", "");
    let group_rate = format!(
        "sum by (group) ({})",
        rate(&format!("{REQ}{{group=~\"$group\"}}"))
    );
    vec![
        row("Skew, fleet-wide (every sidecar's counters added up)"),
        timeseries(
            "Top-1 shard share, fleet-wide",
            "The busiest shard's share of each group's requests, from the counters of every \
             sidecar added up, against the fair share 1/N and the top-1 share Poisson noise alone \
             reaches with N equal shards, (1 + sqrt(2 ln N / λ)) / N with λ requests per shard in \
             the interval. Above both lines is skew, not noise.",
            "percentunit",
            vec![
                target(
                    format!("max by (group) (\n  {shard_rate}\n    / on (group) group_left\n  {group_rate}\n)"),
                    "{{group}} top-1 share",
                ),
                target(format!("1 / count by (group) ({shard_rate})"), "{{group}} fair share"),
                target(
                    format!(
                        "(1 + sqrt(2 * ln(count by (group) ({shard_count}))\n  / (sum by (group) ({shard_count}) / count by (group) ({shard_count}))))\n/ count by (group) ({shard_count})"
                    ),
                    "{{group}} noise floor",
                ),
            ],
        )
        .dashed(".* (fair share|noise floor)$"),
        timeseries(
            "Peak-to-mean, fleet-wide",
            "The busiest shard's request rate over the mean shard's, from the counters of every \
             sidecar added up. 1 is perfectly even; a single hot shard shows here even when the \
             Gini of a broad skew does not.",
            "suffix:×",
            vec![target(
                format!("max by (group) ({shard_rate})\n  /\navg by (group) ({shard_rate})"),
                "{{group}}",
            )],
        ),
        timeseries(
            "Gini of each sidecar's view, against its noise floor",
            "Each sidecar's own bias-corrected Gini of the last window (skewwatch_gini_ratio) and \
             what Poisson noise alone gives at its volume (skewwatch_gini_noise_floor_ratio, \
             dashed). A sidecar sees only its slice of the traffic: a Gini near its floor is \
             noise, and sidecars can disagree. The fleet panels beside it add the slices up.",
            "none",
            vec![
                target("skewwatch_gini_ratio{group=~\"$group\"}", "{{group}} {{instance}}"),
                target(
                    "skewwatch_gini_noise_floor_ratio{group=~\"$group\"}",
                    "{{group}} {{instance}} noise floor",
                ),
            ],
        )
        .dashed(".* noise floor$"),
        timeseries(
            "Requests per second by group, fleet-wide",
            "Requests per second to each group, every sidecar's counters added up.",
            "reqps",
            vec![target(group_rate.clone(), "{{group}}")],
        ),
        timeseries(
            "Error ratio by group, fleet-wide",
            "Share of each group's requests whose outcome was not ok, from the summed counters \
             (never an average of the sidecars' ratios).",
            "percentunit",
            vec![target(
                format!(
                    "sum by (group) ({})\n  /\n{group_rate}",
                    rate(&format!("{REQ}{{group=~\"$group\", outcome!=\"ok\"}}"))
                ),
                "{{group}}",
            )],
        ),
    ]
}

/// Firing alerts from both sources: the agents' own detectors and the Prometheus rules.
const FIRING_AGENT: &str =
    "sum by (alertname, group, shard, key, severity) (skewwatch_alert_firing)";
const FIRING_RULES: &str = "count by (alertname, group, shard, severity) (ALERTS{alertstate=\"firing\", alertname=~\"Skewwatch.*\"})";

fn alert_panels() -> Vec<Panel> {
    let mut table = panel(
        "table",
        "Firing alerts",
        "Alerts firing now: from the sidecars' own detectors (skewwatch_alert_firing, one row \
         per alert however many sidecars fire it) and from the Prometheus rules of \
         rules/prometheus/ (ALERTS). Each alert's runbook is in docs/fleet.md and \
         docs/detectors.md.",
        "none",
        vec![instant(
            format!(
                "label_replace({FIRING_AGENT}, \"source\", \"skewwatch detectors\", \"\", \"\")\nor\nlabel_replace({FIRING_RULES}, \"source\", \"prometheus rules\", \"\", \"\")"
            ),
            "",
        )],
    )
    .size(18, 8);
    table.options = json!({"showHeader": true, "cellHeight": "sm",
                           "footer": {"show": false, "reducer": ["sum"], "fields": ""}});
    table.transformations = vec![json!({"id": "organize", "options": {
        "excludeByName": {"Time": true, "Value": true},
        "indexByName": {"source": 0, "alertname": 1, "severity": 2, "group": 3, "shard": 4, "key": 5}
    }})];
    vec![
        row("Alerts"),
        stat(
            "Firing alerts",
            "How many skewwatch alerts fire now, from the sidecars' detectors and the Prometheus \
             rules together.",
            "none",
            vec![target(
                format!(
                    "(sum({FIRING_AGENT}) or vector(0))\n+\n(sum({FIRING_RULES}) or vector(0))"
                ),
                "firing",
            )],
        )
        .size(6, 8)
        .thresholds(1.0),
        table,
    ]
}

/// Long because it is a table: one entry per panel, its query beside its description, which
/// read best together.
fn ingest_panels() -> Vec<Panel> {
    vec![
        row("Sidecars and ingest"),
        timeseries(
            "Records accepted per second, by sidecar",
            "Observation records each sidecar accepted, by input (statsd, http). A sidecar that \
             drops to zero while its application serves traffic has lost its input.",
            "cps",
            vec![target(
                format!(
                    "sum by (instance, source) ({})",
                    rate("skewwatch_ingest_records_total")
                ),
                "{{instance}} {{source}}",
            )],
        ),
        timeseries(
            "Records rejected and dropped per second",
            "Invalid records rejected (by reason), valid records dropped before the pipeline (a \
             full queue), and StatsD datagrams the kernel dropped (a full socket buffer). \
             Anything above zero means the counts undercount the traffic or the input is \
             malformed; the runbooks are in docs/fleet.md.",
            "cps",
            vec![
                target(
                    format!(
                        "sum by (instance, source, reason) ({})",
                        rate("skewwatch_ingest_rejected_total")
                    ),
                    "rejected {{reason}} {{source}} {{instance}}",
                ),
                target(
                    format!(
                        "sum by (instance, source, reason) ({})",
                        rate("skewwatch_ingest_dropped_total")
                    ),
                    "dropped {{reason}} {{source}} {{instance}}",
                ),
                target(
                    format!(
                        "sum by (instance) ({})",
                        rate("skewwatch_statsd_kernel_drops_total")
                    ),
                    "kernel drops {{instance}}",
                ),
            ],
        ),
        timeseries(
            "Share of requests folded into __other__",
            "Requests counted under shard=\"__other__\" (more shards than \
             limits.max_shards_per_group) or group=\"__other__\" (more groups than \
             limits.max_groups), as a share of each group's requests. Folded traffic keeps \
             totals right but no shard in it can be named hot.",
            "percentunit",
            vec![target(
                format!(
                    "sum by (group) (\n  {}\n  or\n  {}\n)\n  /\nsum by (group) ({})",
                    rate(&format!("{REQ}{{group=~\"$group\", shard=\"__other__\"}}")),
                    rate(&format!("{REQ}{{group=\"__other__\"}}")),
                    rate(&format!("{REQ}{{group=~\"$group|__other__\"}}"))
                ),
                "{{group}}",
            )],
        ),
        timeseries(
            "Age of each sidecar's last closed window",
            "Seconds since each sidecar's pipeline last closed a statistics window. It saws \
             between zero and one window length; a steady climb means the pipeline stalls.",
            "s",
            vec![target(
                "time() - skewwatch_last_window_end_timestamp_seconds",
                "{{instance}}",
            )],
        ),
        stat(
            "Sidecars reporting",
            "Sidecars whose /metrics Prometheus scraped last, by version.",
            "none",
            vec![target(
                "count by (version) (skewwatch_build_info)",
                "{{version}}",
            )],
        ),
    ]
}

/// Group drill-down: one group's shards, fleet-wide: load share over time, p99, errors, cache,
/// the sidecars' disagreeing views, and the top keys.
fn group_drilldown() -> Value {
    let variables = vec![
        datasource_variable(),
        query_variable(
            "group",
            "Group",
            "label_values(skewwatch_shard_requests_total, group)",
            false,
        ),
        query_variable(
            "shard",
            "Shard",
            "label_values(skewwatch_shard_requests_total{group=\"$group\"}, shard)",
            true,
        ),
    ];
    let mut panels = load_panels();
    panels.extend(shard_health_panels());
    panels.extend(key_panels());
    dashboard(
        "skewwatch-group-drilldown",
        "skewwatch / Group drill-down",
        "One group's shards from the counters of every sidecar added up: how load moves between \
         shards over time, each shard's p99, errors and cache hits, and the hottest keys.",
        variables,
        &panels,
    )
}

/// `sum by (shard) (rate(<metric>{group="$group", shard=~"$shard"<extra>}[$__rate_interval]))`.
fn by_shard(metric: &str, extra: &str) -> String {
    format!(
        "sum by (shard) ({})",
        rate(&format!(
            "{metric}{{group=\"$group\", shard=~\"$shard\"{extra}}}"
        ))
    )
}

/// Long because it is a table: one entry per panel, its query beside its description, which
/// read best together.
fn load_panels() -> Vec<Panel> {
    let group_total = format!("sum({})", rate(&format!("{REQ}{{group=\"$group\"}}")));
    let tracked = format!(
        "sum by (shard) ({})",
        rate(&format!("{REQ}{{group=\"$group\", shard!=\"__other__\"}}"))
    );
    let mut heatmap = panel(
        "heatmap",
        "Load share by shard over time",
        "Each shard's share of the group's requests, every sidecar added up, one row per shard \
         and one column per interval (the Key Visualizer view): a hot shard is a bright \
         stripe, a moving hot spot a diagonal, a rebalance a change of texture.",
        "percentunit",
        vec![target(
            format!("{}\n  /\nscalar({group_total})", by_shard(REQ, "")),
            "{{shard}}",
        )],
    )
    .size(24, 10);
    heatmap.options = json!({
        "calculate": false,
        "cellGap": 0,
        "cellValues": {"unit": "percentunit"},
        "color": {"mode": "scheme", "scheme": "Inferno", "fill": "dark", "scale": "exponential",
                  "exponent": 0.5, "steps": 64, "reverse": false},
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": {"le": 1e-9},
        "legend": {"show": true},
        "rowsFrame": {"layout": "auto"},
        "showValue": "never",
        "tooltip": {"mode": "single", "yHistogram": false, "showColorScale": true},
        "yAxis": {"axisPlacement": "left", "reverse": false}
    });
    vec![
        row("Load"),
        heatmap,
        stat(
            "Top-1 shard share",
            "The busiest shard's share of the group's requests, every sidecar added up.",
            "percentunit",
            vec![target(
                format!("max({tracked})\n  /\n{group_total}"),
                "top-1 share",
            )],
        ),
        stat(
            "Fair share",
            "1/N for the N shards with counters: what each shard would take if load were even.",
            "percentunit",
            vec![target(format!("1 / count({tracked})"), "fair share")],
        ),
        stat(
            "Peak-to-mean",
            "The busiest shard's request rate over the mean shard's.",
            "suffix:×",
            vec![target(
                format!("max({tracked})\n  /\navg({tracked})"),
                "peak-to-mean",
            )],
        ),
        stat(
            "Requests per second",
            "The group's requests per second, every sidecar added up.",
            "reqps",
            vec![target(group_total.clone(), "requests")],
        ),
        timeseries(
            "Requests per second by shard",
            "Requests per second to each selected shard, every sidecar added up.",
            "reqps",
            vec![target(by_shard(REQ, ""), "{{shard}}")],
        ),
        timeseries(
            "Each sidecar's own view of the shares",
            "skewwatch_shard_share_ratio: each sidecar's share of the selected shards in its \
             last window. Sidecars see different slices of the traffic, so they disagree, and \
             their average is not the fleet's share; the panels built on counters are.",
            "percentunit",
            vec![target(
                "skewwatch_shard_share_ratio{group=\"$group\", shard=~\"$shard\"}",
                "{{shard}} seen by {{instance}}",
            )],
        ),
    ]
}

fn shard_health_panels() -> Vec<Panel> {
    let panels = vec![
        timeseries(
            "p99 latency by shard",
            "99th percentile latency of each shard's requests (successes and errors), from the \
             histogram buckets of every sidecar added up, never from averaged percentiles.",
            "s",
            vec![target(
                format!(
                    "histogram_quantile(0.99, sum by (shard, le) ({}))",
                    rate(
                        "skewwatch_shard_request_duration_seconds_bucket{group=\"$group\", shard=~\"$shard\"}"
                    )
                ),
                "{{shard}}",
            )],
        ),
        timeseries(
            "Error ratio by shard",
            "Share of each shard's requests whose outcome was not ok, from the summed counters.",
            "percentunit",
            vec![target(
                format!(
                    "{}\n  /\n{}",
                    by_shard(REQ, ", outcome!=\"ok\""),
                    by_shard(REQ, "")
                ),
                "{{shard}}",
            )],
        ),
        timeseries(
            "Cache hit ratio by shard",
            "Look-aside cache hits over hits plus misses for each shard, from the summed \
             counters. Shards without cache results have no line.",
            "percentunit",
            vec![target(
                format!(
                    "{}\n  /\n{}",
                    by_shard("skewwatch_shard_cache_requests_total", ", result=\"hit\""),
                    by_shard("skewwatch_shard_cache_requests_total", "")
                ),
                "{{shard}}",
            )],
        ),
    ];
    std::iter::once(row("Health by shard"))
        .chain(panels.into_iter().map(|p| p.size(8, 8)))
        .collect()
}

fn key_panels() -> Vec<Panel> {
    let keys = format!(
        "sum by (key) ({})",
        rate("skewwatch_key_requests_total{group=\"$group\", key!=\"__other__\"}")
    );
    let group_total = format!("sum({})", rate(&format!("{REQ}{{group=\"$group\"}}")));
    let mut table = panel(
        "table",
        "Top keys, fleet-wide",
        "The ten keys with the most requests, every sidecar's key counters added up, and their \
         share of the group's requests. A sidecar counts a key while it is among its top keys \
         (limits.exported_keys_per_group); requests to other keys count under __other__ \
         (docs/fleet.md). key=\"(empty)\" is the empty key.",
        "reqps",
        vec![
            instant(format!("topk(10, {keys})"), "{{key}}"),
            instant(
                format!("topk(10, {keys})\n  /\nscalar({group_total})"),
                "{{key}}",
            ),
        ],
    );
    table.options = json!({"showHeader": true, "cellHeight": "sm",
                           "sortBy": [{"displayName": "requests per second", "desc": true}],
                           "footer": {"show": false, "reducer": ["sum"], "fields": ""}});
    table.transformations = vec![
        json!({"id": "merge", "options": {}}),
        json!({"id": "organize", "options": {
            "excludeByName": {"Time": true},
            "renameByName": {"Value #A": "requests per second", "Value #B": "share of group"}
        }}),
    ];
    table.overrides = vec![json!({
        "matcher": {"id": "byName", "options": "share of group"},
        "properties": [{"id": "unit", "value": "percentunit"}]
    })];
    vec![
        row("Keys"),
        table,
        timeseries(
            "Top keys over time",
            "Requests per second of the ten busiest keys at each point in time, every sidecar \
             added up.",
            "reqps",
            vec![target(format!("topk(10, {keys})"), "{{key}}")],
        ),
    ]
}

/// Cache loop: what the metadata-database incident looks like as it unfolds: hits fall,
/// backend calls per request rise, the backend fails and slows, the amplification climbs.
fn cache_loop() -> Value {
    let variables = vec![
        datasource_variable(),
        query_variable(
            "group",
            "Group",
            "label_values(skewwatch_shard_cache_requests_total, group)",
            false,
        ),
    ];
    dashboard(
        "skewwatch-cache-loop",
        "skewwatch / Cache loop",
        "A look-aside cache in front of a sharded backend, fleet-wide: when misses add backend \
         load, backend errors turn into more misses and the loop feeds itself. Hit ratio, \
         backend calls per request, backend errors and latency, and the amplification against \
         the last hour.",
        variables,
        &cache_panels(),
    )
}

/// The sidecars' what-if gauge `metric` of `$group` by policy, each sidecar weighted by its
/// requests to the group, over the sidecars that simulate it: the sidecars' gauges are ratios,
/// never averaged unweighted.
fn whatif_weighted(metric: &str) -> String {
    let weights = format!(
        "(sum by (job, instance) ({})\n  and on (job, instance)\nskewwatch_whatif_sample_rate_ratio{{group=\"$group\"}})",
        rate(&format!("{REQ}{{group=\"$group\"}}"))
    );
    format!(
        "sum by (policy) (\n  {metric}{{group=\"$group\"}}\n  * on (job, instance) group_left ()\n  {weights}\n)\n  /\nscalar(sum({weights}))"
    )
}

/// Long because it is a table: one entry per panel, its query beside its description, which
/// read best together.
fn cache_panels() -> Vec<Panel> {
    let cache = |result: &str| {
        format!(
            "sum({})",
            rate(&format!(
                "skewwatch_shard_cache_requests_total{{group=\"$group\"{result}}}"
            ))
        )
    };
    let requests = |extra: &str| {
        format!(
            "sum({})",
            rate(&format!("{REQ}{{group=\"$group\"{extra}}}"))
        )
    };
    let calls_per_request = format!("{}\n  /\n{}", cache(", result=\"miss\""), requests(""));
    let buckets = |q: &str| {
        format!(
            "histogram_quantile({q}, sum by (le) ({}))",
            rate("skewwatch_shard_request_duration_seconds_bucket{group=\"$group\"}")
        )
    };
    vec![
        timeseries(
            "Cache hit ratio",
            "Cache hits over hits plus misses, every sidecar added up. In the metadata-database \
             incident it fell from the nineties to 50%.",
            "percentunit",
            vec![target(
                format!("{}\n  /\n{}", cache(", result=\"hit\""), cache("")),
                "hit ratio",
            )],
        ),
        timeseries(
            "Front-end requests and backend calls per second",
            "Requests the clients made, and the cache misses among them that went to the \
             backend (retries included). A loop shows as backend calls climbing while the \
             front end stays flat.",
            "reqps",
            vec![
                target(requests(""), "front-end requests"),
                target(cache(", result=\"miss\""), "backend calls"),
            ],
        ),
        timeseries(
            "Backend calls per request",
            "Cache misses per front-end request: the backend load each request causes. Above 1, \
             retries multiply it.",
            "none",
            vec![target(calls_per_request.clone(), "backend calls per request")],
        ),
        timeseries(
            "Amplification against the last hour",
            "Backend calls per request over their median of the last hour: how many times the \
             cache multiplies the backend's load compared with normal. skewwatch's \
             CacheHitCollapse detector and the SkewwatchFleetCacheHitCollapse rule wait for at \
             least 2×.",
            "suffix:×",
            vec![target(
                format!(
                    "(\n{calls_per_request}\n)\n  /\nquantile_over_time(0.5, (\n{calls_per_request}\n)[1h:])"
                ),
                "amplification",
            )],
        )
        .thresholds(2.0),
        timeseries(
            "Backend error ratio",
            "Errors over the requests that reached the backend (every request but the cache \
             hits). In the incident it reached 60%.",
            "percentunit",
            vec![target(
                format!(
                    "{}\n  /\n({} - {})",
                    requests(", outcome!=\"ok\""),
                    requests(""),
                    cache(", result=\"hit\"")
                ),
                "backend error ratio",
            )],
        ),
        timeseries(
            "Errors per second by outcome class",
            "Failed requests by class: timeouts and unavailability point at an overloaded \
             backend, throttling at a protecting one, not_found at data or routing.",
            "reqps",
            vec![target(
                format!(
                    "sum by (outcome) ({})",
                    rate(&format!("{REQ}{{group=\"$group\", outcome!=\"ok\"}}"))
                ),
                "{{outcome}}",
            )],
        ),
        timeseries(
            "Latency p50 and p99",
            "Median and 99th percentile latency of the group's requests from the summed \
             histogram buckets of every sidecar. Misses climb the backend's distribution, so \
             the p99 rises as the hit ratio falls.",
            "s",
            vec![target(buckets("0.99"), "p99"), target(buckets("0.5"), "p50")],
        ),
        timeseries(
            "Hottest shards' share of the group",
            "The five shards with the largest share of the group's requests: a loop often \
             starts on one overloaded shard.",
            "percentunit",
            vec![target(
                format!(
                    "topk(5, sum by (shard) ({})\n  /\nscalar({}))",
                    rate(&format!("{REQ}{{group=\"$group\", shard!=\"__other__\"}}")),
                    requests("")
                ),
                "{{shard}}",
            )],
        ),
        timeseries(
            "What-if: predicted backend calls per request by policy",
            "skewwatch simulates the group's cache on the requests that name a cache key, as \
             configured (observed, dashed) and under each candidate policy (TTLs, serve-stale, \
             negative caching): the backend calls per request each would have made, last \
             window. Each sidecar simulates its own requests; they are weighted here by the \
             sidecar's requests to the group. A candidate well below observed would relieve \
             the backend; the error-bound panel says how far to trust the gap.",
            "none",
            vec![target(whatif_weighted("skewwatch_whatif_backend_call_ratio"), "{{policy}}")],
        )
        .dashed("^observed$"),
        timeseries(
            "What-if: predicted error ratio by policy",
            "The share of the group's requests each policy would have answered with an error, \
             last window: the calls it would send a shard beyond that shard's capacity \
             (configured in whatif.backend_capacities, or learned from the windows in which its \
             calls failed) fail, and serve-stale answers a failure with the copy it holds; \
             where no capacity is known the backend's observed failures are replayed. Weighted \
             by each sidecar's requests to the group.",
            "percentunit",
            vec![target(whatif_weighted("skewwatch_whatif_error_ratio"), "{{policy}}")],
        )
        .dashed("^observed$"),
        timeseries(
            "What-if: the simulation against the cache, and its error bound",
            "The simulated hit ratio of the cache as configured minus the hit ratio the cache \
             reported, per sidecar: near 0 when the whatif settings describe the cache (it \
             reads low for about one TTL after a start). Beyond ±5 points the predictions are \
             not to be trusted (SkewwatchWhatIfMiscalibrated). Dashed: the largest error bound \
             of the sampled simulation, a 95% bound on each prediction.",
            "percentunit",
            vec![
                target(
                    "skewwatch_whatif_check_error_ratio{group=\"$group\"}",
                    "check error {{instance}}",
                ),
                target(
                    "max by (instance) (skewwatch_whatif_error_bound_ratio{group=\"$group\"})",
                    "error bound {{instance}}",
                ),
            ],
        )
        .dashed("^error bound"),
        stat(
            "Cache-loop alerts firing",
            "CacheHitCollapse alerts of the sidecars' detectors plus the \
             SkewwatchFleetCacheHitCollapse rule, firing now for this group.",
            "none",
            vec![target(
                "(sum(skewwatch_alert_firing{alertname=\"CacheHitCollapse\", group=\"$group\"}) or vector(0))\n+\n(count(ALERTS{alertstate=\"firing\", alertname=\"SkewwatchFleetCacheHitCollapse\", group=\"$group\"}) or vector(0))",
                "firing",
            )],
        )
        .thresholds(1.0),
    ]
}
