//! The words and glyphs of `skewwatch top`, and the plain `--once` output built from them: the
//! screen and the text say the same sentences, and every name passes through [`inert`] on its
//! way to a terminal.

use std::fmt::Write as _;

use super::figures::{Figures, Headline, Heat, KeyRow, ShardRow, inert};
use skewwatch_detectors::whatif::format_duration;

/// Windows of heat strip in the `--once` text, so a pasted report stays under 100 columns.
pub const ONCE_COLUMNS: usize = 30;
/// Width of the shard-name column in the `--once` text; longer names are cut with `…`.
const NAME_WIDTH: usize = 24;

/// A ratio as a percentage: two decimals under 10%, one above; `–` when unknown.
pub fn pct(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() => {
            if x < 0.1 {
                format!("{:.2}%", 100.0 * x)
            } else {
                format!("{:.1}%", 100.0 * x)
            }
        }
        _ => "–".to_owned(),
    }
}

/// A number with `d` decimals; `–` when unknown.
pub fn num(x: Option<f64>, d: usize) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.d$}"),
        _ => "–".to_owned(),
    }
}

/// A heat cell as a glyph, readable without colour: `·` and `░` within noise, `▒ ▓ █` beyond
/// it, brighter the further; a blank for no data.
pub fn glyph(h: Option<Heat>) -> char {
    match h {
        None => ' ',
        Some(h) if !h.hot => {
            if h.level < 0.15 {
                '·'
            } else {
                '░'
            }
        }
        Some(h) if h.level < 0.65 => '▒',
        Some(h) if h.level < 0.85 => '▓',
        Some(_) => '█',
    }
}

/// The sparkline of `values` (the last `n`), each against the largest of them.
pub fn sparkline(values: &[Option<f64>], n: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail = &values[values.len().saturating_sub(n)..];
    let max = tail.iter().flatten().fold(0.0_f64, |a, &b| a.max(b));
    tail.iter()
        .map(|v| match v {
            Some(v) if max > 0.0 => BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize],
            Some(_) => BARS[0],
            None => ' ',
        })
        .collect()
}

/// The heat strip of a row: its last `n` cells as glyphs.
pub fn strip(row: &ShardRow, n: usize) -> String {
    row.heat[row.heat.len().saturating_sub(n)..]
        .iter()
        .map(|&h| glyph(h))
        .collect()
}

/// "Busiest shard X: 29.3% of requests, fair share 5.88% — beyond what noise explains (≤ 7.96%)."
pub fn headline_sentence(h: &Headline) -> String {
    format!(
        "Busiest shard {}: {} of requests, fair share {} — {} (≤ {}).",
        inert(&h.shard),
        pct(h.share),
        pct(Some(h.fair_share)),
        if h.beyond_noise {
            "beyond what noise explains"
        } else {
            "within noise"
        },
        pct(h.top1_noise_floor),
    )
}

/// Gini and top-1 share against their noise floors, rate, errors and p99.
pub fn figures_sentence(h: &Headline, shards_total: usize) -> String {
    format!(
        "Gini {} (noise {}) · top-1 {} (noise {}) · {} req/s over {} shards · errors {} · p99 {} ms",
        num(h.gini, 3),
        num(h.gini_noise_floor, 3),
        pct(h.share),
        pct(h.top1_noise_floor),
        num(Some(h.requests_per_second), 0),
        shards_total,
        pct(h.error_ratio),
        num(h.p99_ms, 1),
    )
}

/// A key's certified range: one number when exact.
pub fn range(k: &KeyRow) -> String {
    if k.lower_bound == k.requests {
        k.requests.to_string()
    } else {
        format!("{} – {}", k.lower_bound, k.requests)
    }
}

/// The cache loop in one line.
pub fn cache_sentence(c: &super::source::Cache) -> String {
    format!(
        "hit ratio {} · backend calls per request {} (calmest window {}) · amplification {}",
        pct(c.hit_ratio),
        num(Some(c.backend_calls_per_request), 3),
        num(Some(c.calmest_backend_calls_per_request), 3),
        c.amplification
            .map_or_else(|| "–".to_owned(), |a| format!("{a:.1}×")),
    )
}

/// The simulated cache's hit ratio against TTL as lines of a sideways bar chart, `bar`
/// characters wide: the heading, one line per TTL (the cache as configured marked `▶`), then
/// the other candidates at their TTL, each with the sample's bound and backend calls per
/// request; `wide` spells the units out (`--once`), narrow fits the screen's side panel.
pub fn whatif_lines(w: &super::source::WhatIf, bar: usize, wide: bool) -> Vec<String> {
    let sampled = if w.sample_rate < 1.0 {
        format!("{} of keys sampled", pct(Some(w.sample_rate)))
    } else {
        "every key simulated".to_owned()
    };
    let mut out = vec![if wide {
        format!("{} requests with a cache key, {sampled}", w.requests)
    } else {
        format!("{} requests, {sampled}", w.requests)
    }];
    let labelled: Vec<(String, &super::source::PolicyPoint)> = w
        .ttl_curve
        .iter()
        .map(|p| (format_duration(p.ttl_secs), p))
        .chain(w.others.iter().map(|p| (inert(&p.policy), p)))
        .collect();
    // Labels share one column: the TTLs' width, or the longest candidate's name.
    let lw = labelled
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    for (label, p) in labelled {
        let filled = ((p.hit_ratio.clamp(0.0, 1.0) * bar as f64).round() as usize).min(bar);
        out.push(format!(
            "{}{label:<lw$} {}{} {:>6} ±{} {}{}",
            if p.observed { "▶" } else { " " },
            "█".repeat(filled),
            "░".repeat(bar - filled),
            pct(Some(p.hit_ratio)),
            num(Some(p.error_bound * 100.0), 1),
            num(Some(p.backend_calls_per_request), 3),
            match (wide, p.observed) {
                (true, true) => " calls/req as configured",
                (true, false) => " calls/req",
                (false, _) => "",
            }
        ));
    }
    if let Some(real) = w.cache_hit_ratio {
        let check = w.check_error.map_or_else(String::new, |e| {
            if wide {
                format!(
                    " ({:+.1} points from the simulation as configured)",
                    e * 100.0
                )
            } else {
                format!(" ({:+.1} pts)", e * 100.0)
            }
        });
        out.push(format!("the cache reports {}{check}", pct(Some(real))));
    }
    out
}

/// `name` inert, cut to `width` characters with `…`.
pub fn fit(name: &str, width: usize) -> String {
    let safe = inert(name);
    if safe.chars().count() <= width {
        return safe;
    }
    let mut cut: String = safe.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The whole view as plain text, for `--once`: `url` titles it.
pub fn render(f: &Figures, url: &str) -> String {
    let mut out = String::new();
    let group = f
        .group
        .as_deref()
        .map_or_else(|| "(none)".to_owned(), inert);
    let _ = writeln!(
        out,
        "skewwatch top · {} · group {group} ({} groups) · {} s windows · {} of {} kept · window ending {}",
        inert(url),
        f.groups.len(),
        num(Some(f.window_secs), 0),
        f.windows,
        f.capacity,
        f.window_end.as_deref().unwrap_or("–"),
    );
    match &f.headline {
        Some(h) => {
            let _ = writeln!(out, "{}", headline_sentence(h));
            let _ = writeln!(out, "{}", figures_sentence(h, f.shards_total));
        }
        None => out.push_str("No traffic for this group in the windows kept.\n"),
    }
    let _ = writeln!(
        out,
        "\nShards ({} of {}, busiest first; heat: last {ONCE_COLUMNS} windows, oldest left; · ░ within noise, ▒ ▓ █ beyond)",
        f.shards.len(),
        f.shards_total,
    );
    for r in &f.shards {
        let _ = writeln!(
            out,
            "  {:<NAME_WIDTH$} {:>6}  {:>8} req/s  |{}|  {}",
            fit(&r.name, NAME_WIDTH),
            pct(r.share),
            num(r.requests_per_second, 1),
            strip(r, ONCE_COLUMNS),
            sparkline(&r.rate, ONCE_COLUMNS / 2),
        );
    }
    let _ = writeln!(
        out,
        "\nTop keys of the group ({}):",
        if f.keys_certified {
            "certified ranges"
        } else {
            "ranges not certified"
        }
    );
    keys(&mut out, &f.top_keys);
    if let Some(s) = &f.selected {
        let _ = writeln!(out, "Top keys of {}:", inert(&s.name));
        keys(&mut out, &s.keys);
    }
    let (firing, pending) = f.alert_counts();
    let _ = writeln!(out, "\nAlerts ({firing} firing, {pending} pending):");
    if f.alerts.is_empty() {
        out.push_str("  none\n");
    }
    for a in &f.alerts {
        let labels: String = a
            .labels
            .iter()
            .map(|(k, v)| format!(" {k}={}", inert(v)))
            .collect();
        let _ = writeln!(
            out,
            "  {} {}{labels} ({}, active since {})",
            a.state.to_uppercase(),
            inert(&a.alertname),
            inert(&a.severity),
            inert(&a.active_at),
        );
        for line in [&a.summary, &a.description] {
            if !line.is_empty() {
                let _ = writeln!(out, "    {}", inert(line));
            }
        }
        for m in &a.mitigations {
            let _ = writeln!(out, "    - {}", inert(m));
        }
        if !a.figures.is_empty() {
            let figs: Vec<String> = a
                .figures
                .iter()
                .map(|(k, v)| format!("{}={}", inert(k), inert(v)))
                .collect();
            let _ = writeln!(out, "    {}", figs.join(" "));
        }
    }
    if let Some(c) = &f.cache {
        let _ = writeln!(out, "\nCache loop: {}", cache_sentence(c));
    }
    if let Some(w) = &f.whatif {
        let _ = writeln!(out, "\nWhat-if, hit ratio against TTL (latest window):");
        for line in whatif_lines(w, 20, true) {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

fn keys(out: &mut String, keys: &[KeyRow]) {
    if keys.is_empty() {
        out.push_str("  no keyed requests\n");
    }
    for k in keys {
        let _ = writeln!(
            out,
            "  {:<32} {:>6}  {}",
            fit(&k.label, 32),
            pct(Some(k.share)),
            range(k)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::figures::tests::reading;
    use super::super::figures::{Figures, Selection};
    use super::*;

    #[test]
    fn once_text_carries_headline_rows_keys_and_alerts() {
        let mut r = reading();
        r.history.shards[1] = "evil\x1b[2J".into();
        let text = render(&Figures::new(&r, &Selection::default()), "http://x:1");
        assert!(
            text.contains("Busiest shard hot: 55.0% of requests, fair share 25.0% — beyond what noise explains (≤ 30.0%)."),
            "{text}"
        );
        assert!(text.contains("Gini 0.400 (noise 0.050)"), "{text}");
        assert!(text.contains("evil\\u{1b}[2J"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        assert!(text.contains("(empty)"), "{text}");
        assert!(text.contains("295 – 300"), "{text}");
        assert!(text.contains("FIRING HotKey shard=hot"), "{text}");
        assert!(text.contains("    - two"), "{text}");
        let hot_line = text
            .lines()
            .find(|l| l.trim_start().starts_with("hot "))
            .unwrap();
        // Within noise, then beyond it; the rate's sparkline against its own peak.
        assert!(hot_line.ends_with("| ░ ▒|   ▄ █"), "{hot_line}");
    }

    #[test]
    fn glyphs_and_sparklines() {
        assert_eq!(glyph(None), ' ');
        assert_eq!(
            glyph(Some(Heat {
                level: 0.3,
                hot: false
            })),
            '░'
        );
        assert_eq!(
            glyph(Some(Heat {
                level: 1.0,
                hot: true
            })),
            '█'
        );
        assert_eq!(
            sparkline(&[Some(0.0), None, Some(5.0), Some(10.0)], 4),
            "▁ ▅█"
        );
        assert_eq!(sparkline(&[Some(1.0), Some(2.0)], 1), "█");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(pct(Some(0.0588)), "5.88%");
        assert_eq!(pct(None), "–");
    }

    #[test]
    fn the_whatif_curve_marks_the_observed_ttl_and_shows_the_bound() {
        use crate::top::source::{PolicyPoint, WhatIf};
        let point = |policy: &str, ttl: f64, observed: bool, hit: f64| PolicyPoint {
            policy: policy.to_owned(),
            ttl_secs: ttl,
            observed,
            hit_ratio: hit,
            backend_calls_per_request: 1.0 - hit,
            error_bound: 0.012,
        };
        let w = WhatIf {
            requests: 5000,
            cache_hit_ratio: Some(0.5),
            check_error: Some(0.004),
            sample_rate: 0.25,
            ttl_curve: vec![
                point("ttl=10s", 10.0, false, 0.2),
                point("observed", 60.0, true, 0.5),
                point("ttl=1h", 3600.0, false, 0.9),
            ],
            others: vec![point("serve-stale", 60.0, false, 0.7)],
        };
        let lines = whatif_lines(&w, 10, true);
        assert_eq!(
            lines[0],
            "5000 requests with a cache key, 25.0% of keys sampled"
        );
        assert_eq!(
            lines[1],
            " 10s         ██░░░░░░░░  20.0% ±1.2 0.800 calls/req"
        );
        assert_eq!(
            lines[2],
            "▶1m          █████░░░░░  50.0% ±1.2 0.500 calls/req as configured"
        );
        assert!(lines[3].starts_with(" 1h          █████████░"), "{lines:?}");
        assert!(lines[4].starts_with(" serve-stale ███████░░░"), "{lines:?}");
        assert_eq!(
            lines[5],
            "the cache reports 50.0% (+0.4 points from the simulation as configured)"
        );
        let narrow = whatif_lines(&w, 4, false);
        assert_eq!(narrow[2], "▶1m          ██░░  50.0% ±1.2 0.500");
        assert_eq!(narrow[5], "the cache reports 50.0% (+0.4 pts)");
    }
}
