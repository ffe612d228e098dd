//! What `skewwatch top` shows, computed from one [`Reading`] before anything is drawn: the
//! headline, the shard rows with their heat and sparkline series, the keys, the alerts and the
//! cache loop. The screen and the `--once` output both render these figures, so they show the
//! same thing and the numbers are tested without reading a screen.

use serde::Serialize;

use super::source::{ActiveAlert, Cache, History, Key, Reading, WhatIf, Window};
use crate::clock::rfc3339;

/// Cells at this many times the noise floor's ratio, or more, get full brightness (as on the
/// live page).
pub const HOT_SPAN: f64 = 8.0;

/// Everything one screen shows.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Every group of the latest window, busiest first.
    pub groups: Vec<String>,
    /// The group shown.
    pub group: Option<String>,
    /// Window length, seconds.
    pub window_secs: f64,
    /// Windows the agent keeps; the heat strips' full width.
    pub capacity: usize,
    /// Windows of this group the agent holds.
    pub windows: usize,
    /// End of the newest window with traffic, RFC 3339.
    pub window_end: Option<String>,
    /// The busiest shard against fair share and the noise floors; `None` without traffic.
    pub headline: Option<Headline>,
    /// Shards of the group in the latest window, rows or not.
    pub shards_total: usize,
    /// The filter applied to the rows (empty: none).
    pub filter: String,
    /// Shard rows, busiest first (names in natural order on a tie), filtered.
    pub shards: Vec<ShardRow>,
    /// The group's top keys.
    pub top_keys: Vec<KeyRow>,
    /// The group's keys are exact within their bounds.
    pub keys_certified: bool,
    /// The selected shard and its keys.
    pub selected: Option<Selected>,
    /// The group's active alerts (and those of no group), firing first.
    pub alerts: Vec<AlertRow>,
    /// The cache loop, when the group reports cache results.
    pub cache: Option<Cache>,
    /// The simulated cache's hit ratio against TTL, when the group's records name a cache key.
    pub whatif: Option<WhatIf>,
}

/// The headline of the newest window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Headline {
    /// The busiest shard.
    pub shard: String,
    /// Its share of the group's requests.
    pub share: Option<f64>,
    /// 1 / number of shards.
    pub fair_share: f64,
    /// The largest top-1 share Poisson noise explains at this volume.
    pub top1_noise_floor: Option<f64>,
    /// The busiest shard's share is above that floor.
    pub beyond_noise: bool,
    /// Bias-corrected Gini.
    pub gini: Option<f64>,
    /// The Gini noise explains.
    pub gini_noise_floor: Option<f64>,
    /// Requests per second of the group.
    pub requests_per_second: f64,
    /// Errors over requests.
    pub error_ratio: Option<f64>,
    /// p99 latency, milliseconds.
    pub p99_ms: Option<f64>,
}

/// One shard row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ShardRow {
    /// The shard's name, as sent.
    pub name: String,
    /// Its share in the newest window (`None`: not among that window's busiest).
    pub share: Option<f64>,
    /// Its request rate in the newest window.
    pub requests_per_second: Option<f64>,
    /// One cell per column (`capacity` of them, newest last, placed by window end time): the
    /// heat of its share, `None` for no data.
    pub heat: Vec<Option<Heat>>,
    /// Requests per second per column, for the sparkline.
    pub rate: Vec<Option<f64>>,
}

/// A cell's brightness: share over fair share, against the ratio noise explains.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Heat {
    /// 0 to 1: up to 0.35 within noise, 0.45 to 1 beyond it (1 at [`HOT_SPAN`] times the
    /// noise ratio).
    pub level: f64,
    /// Beyond what noise explains.
    pub hot: bool,
}

/// A key with its certified range.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KeyRow {
    /// `(empty)` for the empty key.
    pub label: String,
    /// Upper-bound share of the group's requests.
    pub share: f64,
    /// Certified lower bound of its requests.
    pub lower_bound: u64,
    /// Upper bound of its requests.
    pub requests: u64,
}

/// The selected shard.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Selected {
    /// Its name.
    pub name: String,
    /// Its top keys.
    pub keys: Vec<KeyRow>,
}

/// One active alert.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AlertRow {
    /// `firing` or `pending`.
    pub state: String,
    /// The alert's name.
    pub alertname: String,
    /// `warning` or `critical`.
    pub severity: String,
    /// Identifying labels other than the name, group and severity (`shard`, `key`).
    pub labels: Vec<(String, String)>,
    /// The `summary` annotation.
    pub summary: String,
    /// The `description` annotation.
    pub description: String,
    /// The `mitigations` annotation, one entry per mitigation.
    pub mitigations: Vec<String>,
    /// Every other annotation: the figures behind the decision.
    pub figures: Vec<(String, String)>,
    /// Active since, RFC 3339.
    pub active_at: String,
}

/// What the user picked on the screen.
#[derive(Debug, Clone, Default)]
pub struct Selection<'a> {
    /// The selected shard (the first row when absent or filtered out).
    pub shard: Option<&'a str>,
    /// Only rows whose name contains this, ignoring case.
    pub filter: &'a str,
}

impl Figures {
    /// The figures of `reading`, as `selection` narrows them.
    pub fn new(reading: &Reading, selection: &Selection<'_>) -> Figures {
        let h = &reading.history;
        let last = h.windows.last();
        let columns = h.capacity.max(1);
        let needle = selection.filter.to_lowercase();
        let shards: Vec<ShardRow> = h
            .shards
            .iter()
            .enumerate()
            .filter(|(_, name)| needle.is_empty() || name.to_lowercase().contains(&needle))
            .map(|(row, name)| shard_row(h, row, name, columns))
            .collect();
        let selected = selection
            .shard
            .and_then(|s| shards.iter().find(|r| r.name == s))
            .or(shards.first())
            .map(|r| Selected {
                name: r.name.clone(),
                keys: h
                    .shards
                    .iter()
                    .position(|s| *s == r.name)
                    .and_then(|i| h.shard_keys.get(i))
                    .map_or_else(Vec::new, |k| keys(k)),
            });
        Figures {
            groups: h.groups.clone(),
            group: h.group.clone(),
            window_secs: h.window_secs,
            capacity: h.capacity,
            windows: h.windows.len(),
            window_end: last.map(|w| rfc3339(w.end)),
            headline: last.and_then(|w| headline(h, w)),
            shards_total: h.shards_total,
            filter: selection.filter.to_owned(),
            shards,
            top_keys: keys(&h.top_keys),
            keys_certified: h.keys_certified,
            selected,
            alerts: alerts(&reading.alerts, h.group.as_deref()),
            cache: h.cache.clone(),
            whatif: h.whatif.clone(),
        }
    }

    /// Alerts firing, and pending.
    pub fn alert_counts(&self) -> (usize, usize) {
        let firing = self.alerts.iter().filter(|a| a.state == "firing").count();
        (firing, self.alerts.len() - firing)
    }
}

fn headline(h: &History, w: &Window) -> Option<Headline> {
    let shard = h.shards.first()?;
    let share = w.cells.first().copied().flatten().map(|c| c.0);
    Some(Headline {
        shard: shard.clone(),
        share,
        fair_share: w.fair_share,
        top1_noise_floor: w.top1_noise_floor,
        beyond_noise: matches!((share, w.top1_noise_floor), (Some(s), Some(n)) if s > n),
        gini: w.gini,
        gini_noise_floor: w.gini_noise_floor,
        requests_per_second: w.requests_per_second,
        error_ratio: w.error_ratio,
        p99_ms: w.p99_ms,
    })
}

fn shard_row(h: &History, row: usize, name: &str, columns: usize) -> ShardRow {
    let mut heat_cells = vec![None; columns];
    let mut rate = vec![None; columns];
    let newest = h.windows.last().map_or(0.0, |w| w.end);
    for w in &h.windows {
        let Some(col) = column(newest, w.end, h.window_secs, columns) else {
            continue;
        };
        if let Some(Some(cell)) = w.cells.get(row) {
            heat_cells[col] = Some(heat(cell.0, w));
            rate[col] = Some(cell.1);
        }
    }
    let now = h
        .windows
        .last()
        .and_then(|w| w.cells.get(row).copied().flatten());
    ShardRow {
        name: name.to_owned(),
        share: now.map(|c| c.0),
        requests_per_second: now.map(|c| c.1),
        heat: heat_cells,
        rate,
    }
}

/// A window's column: the newest at the right edge, each placed by its end time, so windows
/// without traffic for the group leave a gap instead of squeezing time together.
fn column(newest_end: f64, end: f64, window_secs: f64, columns: usize) -> Option<usize> {
    let back = ((newest_end - end) / window_secs.max(f64::MIN_POSITIVE)).round();
    (back >= 0.0 && back < columns as f64).then(|| columns - 1 - back as usize)
}

/// The heat of `share` in window `w`: its ratio to fair share against the ratio the top-1
/// noise floor allows (1 when the window has no floor).
pub fn heat(share: f64, w: &Window) -> Heat {
    if w.fair_share.is_nan() || w.fair_share <= 0.0 {
        return Heat {
            level: 0.0,
            hot: false,
        };
    }
    let ratio = share / w.fair_share;
    let noise = w.top1_noise_floor.map_or(1.0, |n| n / w.fair_share);
    if ratio <= noise {
        return Heat {
            level: 0.35 * (ratio / noise).min(1.0),
            hot: false,
        };
    }
    let over = ((ratio / noise).ln() / HOT_SPAN.ln()).min(1.0);
    Heat {
        level: 0.45 + 0.55 * over,
        hot: true,
    }
}

fn keys(keys: &[Key]) -> Vec<KeyRow> {
    keys.iter()
        .map(|k| KeyRow {
            label: k.label.clone(),
            share: k.share,
            lower_bound: k.lower_bound,
            requests: k.requests,
        })
        .collect()
}

/// The alerts of `group` and those of no group, firing first, then by name and labels.
fn alerts(all: &[ActiveAlert], group: Option<&str>) -> Vec<AlertRow> {
    let mut mine: Vec<AlertRow> = all
        .iter()
        .filter(|a| {
            a.labels
                .get("group")
                .is_none_or(|g| Some(g.as_str()) == group)
        })
        .map(|a| {
            let ann = |k: &str| a.annotations.get(k).cloned().unwrap_or_default();
            AlertRow {
                state: a.state.clone(),
                alertname: a.labels.get("alertname").cloned().unwrap_or_default(),
                severity: a.labels.get("severity").cloned().unwrap_or_default(),
                labels: a
                    .labels
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "alertname" | "group" | "severity"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                summary: ann("summary"),
                description: ann("description"),
                mitigations: a
                    .annotations
                    .get("mitigations")
                    .map_or_else(Vec::new, |m| m.split("; ").map(str::to_owned).collect()),
                figures: a
                    .annotations
                    .iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "summary" | "description" | "mitigations")
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                active_at: a.active_at.clone(),
            }
        })
        .collect();
    mine.sort_by(|a, b| {
        (a.state != "firing")
            .cmp(&(b.state != "firing"))
            .then_with(|| a.alertname.cmp(&b.alertname))
            .then_with(|| a.labels.cmp(&b.labels))
    });
    mine
}

/// `name` made safe to print on a terminal: control characters (an escape sequence such as
/// `ESC [2J` would clear the screen) and the invisible characters that reorder or hide text
/// are written as `\u{..}`, so a hostile name shows as its characters and does nothing.
pub fn inert(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let invisible = matches!(
            c,
            '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        );
        if c.is_control() || invisible {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Two windows of a four-shard group where `hot` takes 55% in the newest.
    pub(crate) fn reading() -> Reading {
        let window = |end: f64, cells: Vec<Option<(f64, f64)>>| Window {
            end,
            requests: 1000,
            requests_per_second: 1000.0,
            fair_share: 0.25,
            gini: Some(0.4),
            gini_noise_floor: Some(0.05),
            top1_share: cells[0].map(|c| c.0),
            top1_noise_floor: Some(0.3),
            error_ratio: Some(0.01),
            p99_ms: Some(12.5),
            cells: cells
                .into_iter()
                .map(|c| c.map(|(s, r)| (s, r, None, None, None)))
                .collect(),
        };
        let key = |label: &str, share: f64| Key {
            label: label.into(),
            requests: (share * 1000.0) as u64,
            lower_bound: (share * 1000.0) as u64 - 5,
            share,
        };
        let alert = |name: &str, state: &str, group: &str| ActiveAlert {
            labels: BTreeMap::from([
                ("alertname".into(), name.into()),
                ("group".into(), group.into()),
                ("severity".into(), "warning".into()),
                ("shard".into(), "hot".into()),
            ]),
            annotations: BTreeMap::from([
                ("summary".into(), format!("{name} summary")),
                ("mitigations".into(), "one; two".into()),
                ("share".into(), "0.55".into()),
            ]),
            state: state.into(),
            active_at: "2024-05-01T12:00:00Z".into(),
        };
        Reading {
            history: History {
                window_secs: 10.0,
                capacity: 4,
                groups: vec!["db".into(), "other".into()],
                group: Some("db".into()),
                shards: vec!["hot".into(), "s-2".into(), "s-10".into(), "gone".into()],
                shards_total: 3,
                windows: vec![
                    window(
                        100.0,
                        vec![
                            Some((0.25, 250.0)),
                            Some((0.25, 250.0)),
                            None,
                            Some((0.5, 500.0)),
                        ],
                    ),
                    window(
                        120.0,
                        vec![
                            Some((0.55, 550.0)),
                            Some((0.225, 225.0)),
                            Some((0.225, 225.0)),
                            None,
                        ],
                    ),
                ],
                cache: None,
                whatif: None,
                top_keys: vec![key("(empty)", 0.3), key("user:1", 0.1)],
                keys_certified: true,
                shard_keys: vec![
                    vec![key("(empty)", 0.3)],
                    vec![key("user:2", 0.2)],
                    vec![],
                    vec![],
                ],
            },
            alerts: vec![
                alert("HotShard", "pending", "db"),
                alert("HotKey", "firing", "db"),
                alert("HotShard", "firing", "other"),
            ],
        }
    }

    #[test]
    fn the_headline_names_the_busiest_shard_against_fair_share_and_noise() {
        let f = Figures::new(&reading(), &Selection::default());
        let h = f.headline.unwrap();
        assert_eq!(h.shard, "hot");
        assert_eq!(h.share, Some(0.55));
        assert!(h.beyond_noise);
        assert_eq!((h.gini, h.gini_noise_floor), (Some(0.4), Some(0.05)));
        assert_eq!(f.window_end.as_deref(), Some("1970-01-01T00:02:00Z"));
    }

    #[test]
    fn rows_keep_the_agents_order_and_place_windows_by_time() {
        let f = Figures::new(&reading(), &Selection::default());
        let names: Vec<&str> = f.shards.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["hot", "s-2", "s-10", "gone"]);
        // Windows ending at 100 and 120 with 10 s windows: columns 1 and 3 of 4, a gap between.
        let hot = &f.shards[0];
        assert_eq!(hot.heat.len(), 4);
        assert!(hot.heat[0].is_none() && hot.heat[2].is_none());
        assert!(!hot.heat[1].unwrap().hot && hot.heat[3].unwrap().hot);
        assert_eq!(hot.rate[3], Some(550.0));
        assert_eq!(f.shards[3].share, None);
    }

    #[test]
    fn heat_is_against_the_noise_floor() {
        let w = Window {
            fair_share: 0.25,
            top1_noise_floor: Some(0.3),
            ..Window::default()
        };
        let within = heat(0.25, &w);
        assert!(!within.hot && (within.level - 0.35 * 0.25 / 0.3).abs() < 1e-12);
        assert!(heat(0.31, &w).hot);
        // HOT_SPAN times the noise ratio and more: full brightness.
        assert_eq!(heat(0.3 * HOT_SPAN, &w).level, 1.0);
        assert_eq!(heat(1.0, &Window::default()).level, 0.0);
    }

    #[test]
    fn filter_and_selection_narrow_the_rows_and_keys() {
        let r = reading();
        let f = Figures::new(
            &r,
            &Selection {
                shard: Some("s-10"),
                filter: "S-",
            },
        );
        let names: Vec<&str> = f.shards.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["s-2", "s-10"]);
        assert_eq!(f.selected.as_ref().unwrap().name, "s-10");
        // A selection the filter hides falls back to the first row shown.
        let f = Figures::new(
            &r,
            &Selection {
                shard: Some("hot"),
                filter: "s-2",
            },
        );
        let s = f.selected.unwrap();
        assert_eq!(
            (s.name.as_str(), s.keys[0].label.as_str()),
            ("s-2", "user:2")
        );
    }

    #[test]
    fn alerts_of_the_group_firing_first_with_mitigations_split() {
        let f = Figures::new(&reading(), &Selection::default());
        let names: Vec<(&str, &str)> = f
            .alerts
            .iter()
            .map(|a| (a.alertname.as_str(), a.state.as_str()))
            .collect();
        assert_eq!(names, [("HotKey", "firing"), ("HotShard", "pending")]);
        assert_eq!(f.alerts[0].mitigations, ["one", "two"]);
        assert_eq!(f.alerts[0].labels, [("shard".to_owned(), "hot".to_owned())]);
        assert_eq!(
            f.alerts[0].figures,
            [("share".to_owned(), "0.55".to_owned())]
        );
        assert_eq!(f.alert_counts(), (1, 1));
    }

    #[test]
    fn an_empty_agent_has_no_headline_and_no_rows() {
        let f = Figures::new(
            &Reading {
                history: History::default(),
                alerts: vec![],
            },
            &Selection::default(),
        );
        assert!(f.headline.is_none() && f.shards.is_empty() && f.selected.is_none());
    }

    #[test]
    fn hostile_names_are_made_inert() {
        assert_eq!(inert("shard-1"), "shard-1");
        assert_eq!(inert("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(inert("x\u{202e}y\u{9b}"), "x\\u{202e}y\\u{9b}");
        assert_eq!(inert("日本"), "日本");
    }
}
