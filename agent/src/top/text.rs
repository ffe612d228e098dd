//! The words and glyphs of `skewwatch top`, and the plain `--once` output built from them: the
//! screen and the text say the same sentences, and every name passes through [`inert`] on its
//! way to a terminal.

use std::fmt::Write as _;

use super::figures::{Figures, Headline, Heat, KeyRow, ShardRow, inert};

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
}
