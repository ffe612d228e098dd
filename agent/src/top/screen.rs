//! The full-screen view: the terminal set up and restored, the keys, the poller thread that
//! reads the agent once a window, and the drawing of [`Figures`] with ratatui.
//!
//! The poller runs on its own thread so a slow or absent agent never freezes the keys; it
//! tags each reading with the group it asked for, and a reading for a group no longer shown is
//! dropped. Drawing degrades with the terminal: below [`WIDE`] columns the keys and cache panel
//! goes, below [`TALL`] rows the alerts panel, and a narrow strip drops its sparklines, then
//! its heat, before any text would be cut into another panel.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::{DefaultTerminal, Frame};

use super::figures::{Figures, Heat, Selection, inert};
use super::source::{Reading, Source, SourceError};
use super::text::{self, fit, glyph, pct, sparkline};
use crate::clock::{rfc3339, wall_now};

/// Columns from which the keys and cache panel stands beside the shards.
pub const WIDE: u16 = 100;
/// Rows from which the alerts panel is drawn.
pub const TALL: u16 = 24;
/// The smallest terminal drawn at all.
const MIN: (u16, u16) = (40, 8);
/// Seconds between polls while the agent does not answer.
const RETRY_SECS: f64 = 2.0;
/// How long the key loop waits for a key before it looks for a new reading.
const TICK: Duration = Duration::from_millis(100);

/// What the user asks the poller for.
enum Ask {
    /// Read this group from now on (`None`: the agent's busiest).
    Group(Option<String>),
}

/// One poll's outcome, with the group it asked for.
type Polled = (Option<String>, Result<Reading, SourceError>);

/// The agent stopped answering.
#[derive(Debug, Clone)]
struct Offline {
    since: f64,
    failures: u32,
    error: String,
}

/// The view's state: what was read, and what the user picked.
#[derive(Debug, Default)]
struct App {
    url: String,
    colour: bool,
    reading: Option<Reading>,
    group: Option<String>,
    shard: Option<String>,
    filter: String,
    editing: bool,
    offline: Option<Offline>,
    quit: bool,
}

/// Runs the view until `q`; `group` is the group to start on, `colour` whether to use colour.
pub fn run(source: Source, group: Option<String>, colour: bool) -> std::io::Result<()> {
    let (asks, asked) = mpsc::channel();
    let (polled_tx, polled) = mpsc::channel();
    let poller = source.clone();
    let first = group.clone();
    std::thread::Builder::new()
        .name("top-poller".into())
        .spawn(move || poll(&poller, first, &asked, &polled_tx))?;
    let mut app = App {
        url: source.url,
        colour,
        group,
        ..App::default()
    };
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, &mut app, &asks, &polled);
    ratatui::restore();
    result
}

/// The poller: reads, hands the reading over, waits a window (or for a new group), again.
fn poll(source: &Source, mut group: Option<String>, asked: &Receiver<Ask>, out: &Sender<Polled>) {
    loop {
        let result = source.read(group.as_deref());
        let wait = match &result {
            Ok(r) if r.history.window_secs.is_finite() => r.history.window_secs.clamp(1.0, 30.0),
            _ => RETRY_SECS,
        };
        if out.send((group.clone(), result)).is_err() {
            return;
        }
        match asked.recv_timeout(Duration::from_secs_f64(wait)) {
            Ok(Ask::Group(g)) => group = g,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn event_loop(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    asks: &Sender<Ask>,
    polled: &Receiver<Polled>,
) -> std::io::Result<()> {
    let mut dirty = true;
    while !app.quit {
        for (group, result) in polled.try_iter() {
            dirty |= app.take(group, result);
        }
        if dirty {
            terminal.draw(|frame| draw(frame, app))?;
            dirty = false;
        }
        if event::poll(TICK)? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    if let Some(ask) = app.key(k) {
                        // The poller ends only with this loop, so a send cannot fail before.
                        let _ = asks.send(ask);
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    Ok(())
}

impl App {
    /// Takes one poll's outcome; true when the screen changes.
    fn take(&mut self, group: Option<String>, result: Result<Reading, SourceError>) -> bool {
        if group != self.group {
            // Asked for before the user switched groups.
            return false;
        }
        match result {
            Ok(r) => {
                self.offline = None;
                self.reading = Some(r);
            }
            Err(e) => {
                let o = self.offline.get_or_insert(Offline {
                    since: wall_now(),
                    failures: 0,
                    error: String::new(),
                });
                o.failures += 1;
                o.error = e.to_string();
            }
        }
        true
    }

    fn figures(&self) -> Option<Figures> {
        self.reading.as_ref().map(|r| {
            Figures::new(
                r,
                &Selection {
                    shard: self.shard.as_deref(),
                    filter: &self.filter,
                },
            )
        })
    }

    /// Handles a key; returns what to ask the poller for, if anything.
    fn key(&mut self, k: KeyEvent) -> Option<Ask> {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            self.quit = true;
            return None;
        }
        if self.editing {
            match k.code {
                KeyCode::Enter => self.editing = false,
                KeyCode::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if !c.is_control() && self.filter.len() < 64 => {
                    self.filter.push(c);
                }
                _ => {}
            }
            return None;
        }
        match k.code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Up | KeyCode::Char('k') => self.step(-1),
            KeyCode::Down | KeyCode::Char('j') => self.step(1),
            KeyCode::Char('/') => self.editing = true,
            KeyCode::Esc => self.filter.clear(),
            KeyCode::Char('g') => return self.next_group(),
            _ => {}
        }
        None
    }

    /// Moves the selection `by` rows, within the rows shown.
    fn step(&mut self, by: isize) {
        let Some(f) = self.figures() else { return };
        let names: Vec<&str> = f.shards.iter().map(|r| r.name.as_str()).collect();
        let Some(now) = f
            .selected
            .as_ref()
            .and_then(|s| names.iter().position(|n| *n == s.name))
        else {
            return;
        };
        let next = now.saturating_add_signed(by).min(names.len() - 1);
        self.shard = Some(names[next].to_owned());
    }

    /// Switches to the next group of the agent's list and asks for it at once.
    fn next_group(&mut self) -> Option<Ask> {
        let r = self.reading.as_ref()?;
        let groups = &r.history.groups;
        if groups.is_empty() {
            return None;
        }
        let now = r
            .history
            .group
            .as_ref()
            .and_then(|g| groups.iter().position(|x| x == g));
        let next = groups[now.map_or(0, |i| (i + 1) % groups.len())].clone();
        self.group = Some(next.clone());
        self.shard = None;
        self.reading = None;
        Some(Ask::Group(Some(next)))
    }
}

/// Styles, or none at all without colour (`NO_COLOR`, or a terminal without it).
struct Paint {
    colour: bool,
}

impl Paint {
    fn fg(&self, c: Color) -> Style {
        if self.colour {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }

    fn heading(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    fn banner(&self) -> Style {
        if self.colour {
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        }
    }

    /// A heat cell's colour, as on the live page: blue shades within noise; orange, yellow,
    /// then white beyond it.
    fn heat(&self, h: Option<Heat>) -> Style {
        let Some(h) = h.filter(|_| self.colour) else {
            return Style::new();
        };
        let (hue, sat, light) = if h.hot {
            (
                28.0 + 32.0 * h.level,
                1.0,
                0.40 + 0.55 * (h.level - 0.45) / 0.55,
            )
        } else {
            (210.0, 0.35, 0.20 + 0.40 * h.level / 0.35)
        };
        let (r, g, b) = hsl(hue, sat, light);
        Style::new().fg(Color::Rgb(r, g, b))
    }
}

/// HSL (hue in degrees, saturation and lightness in 0..=1) to 8-bit RGB.
fn hsl(h: f64, s: f64, l: f64) -> (u8, u8, u8) {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = (h / 60.0).rem_euclid(6.0);
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u8 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let byte = |v: f64| ((v + m).clamp(0.0, 1.0) * 255.0).round() as u8;
    (byte(r), byte(g), byte(b))
}

/// Draws the whole screen.
fn draw(frame: &mut Frame<'_>, app: &App) {
    let area = frame.area();
    let paint = Paint { colour: app.colour };
    if area.width < MIN.0 || area.height < MIN.1 {
        let msg = format!(
            "skewwatch top: the terminal is {}×{}; make it at least {}×{} (q quits).",
            area.width, area.height, MIN.0, MIN.1
        );
        frame.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let figures = app.figures();
    let banner = u16::from(app.offline.is_some());
    let [title, headline, banner_area, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(2),
        Constraint::Length(banner),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(
        Paragraph::new(title_line(app, figures.as_ref(), &paint)),
        title,
    );
    frame.render_widget(
        Paragraph::new(headline_lines(figures.as_ref(), &paint)),
        headline,
    );
    if let Some(o) = &app.offline {
        let at = rfc3339(o.since);
        let msg = format!(
            " The agent stopped answering at {} UTC ({} failed polls: {}). Showing the last data it sent; retrying.",
            at.get(11..19).unwrap_or(&at),
            o.failures,
            inert(&o.error),
        );
        frame.render_widget(Paragraph::new(msg).style(paint.banner()), banner_area);
    }
    frame.render_widget(Paragraph::new(footer_line(app, &paint)), footer);
    let Some(f) = figures else {
        let msg = if app.offline.is_some() {
            "Waiting for the agent…"
        } else {
            "Reading the agent…"
        };
        frame.render_widget(Paragraph::new(msg), body);
        return;
    };
    let (main, side) = if body.width >= WIDE {
        let side_w = (body.width / 3).min(48);
        let [m, s] =
            Layout::horizontal([Constraint::Min(40), Constraint::Length(side_w)]).areas(body);
        (m, Some(s))
    } else {
        (body, None)
    };
    let (shards, alerts) = if area.height >= TALL {
        // The shards take what their rows need, and the alerts at least a third of the rest.
        let rows_h = u16::try_from(f.shards.len() + 2).unwrap_or(u16::MAX);
        let alerts_h = main
            .height
            .saturating_sub(rows_h)
            .max(main.height / 3)
            .min(main.height - 4);
        let [s, a] =
            Layout::vertical([Constraint::Min(4), Constraint::Length(alerts_h)]).areas(main);
        (s, Some(a))
    } else {
        (main, None)
    };
    draw_shards(frame, &f, shards, &paint);
    if let Some(a) = alerts {
        draw_alerts(frame, &f, a, &paint);
    }
    if let Some(s) = side {
        draw_side(frame, &f, s, &paint);
    }
}

fn title_line(app: &App, f: Option<&Figures>, paint: &Paint) -> Line<'static> {
    let mut spans = vec![
        Span::styled("skewwatch top", paint.heading()),
        Span::raw(" · "),
    ];
    spans.push(Span::raw(inert(&app.url)));
    if let Some(f) = f {
        let group = f
            .group
            .as_deref()
            .map_or_else(|| "(none)".to_owned(), inert);
        let at = f
            .group
            .as_ref()
            .and_then(|g| f.groups.iter().position(|x| x == g))
            .map_or_else(String::new, |i| format!(" {}/{}", i + 1, f.groups.len()));
        spans.push(Span::raw(" · group "));
        spans.push(Span::styled(
            group,
            paint.fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
        spans.push(Span::raw(format!(
            "{at} · {} s windows · {} of {} kept · window ending {}",
            text::num(Some(f.window_secs), 0),
            f.windows,
            f.capacity,
            f.window_end
                .as_deref()
                .and_then(|t| t.get(11..19))
                .unwrap_or("–"),
        )));
    }
    Line::from(spans)
}

fn headline_lines(f: Option<&Figures>, paint: &Paint) -> Vec<Line<'static>> {
    match f.and_then(|f| f.headline.as_ref().map(|h| (f, h))) {
        Some((f, h)) => {
            let style = if h.beyond_noise {
                paint.fg(Color::LightRed).add_modifier(Modifier::BOLD)
            } else {
                paint.fg(Color::Green)
            };
            vec![
                Line::styled(text::headline_sentence(h), style),
                Line::raw(text::figures_sentence(h, f.shards_total)),
            ]
        }
        None if f.is_some() => vec![Line::raw("No traffic for this group in the windows kept.")],
        None => vec![],
    }
}

fn footer_line(app: &App, paint: &Paint) -> Line<'static> {
    let key = |k: &'static str| Span::styled(k, paint.heading());
    let mut spans = vec![
        key("↑↓ j k"),
        Span::raw(" shard  "),
        key("g"),
        Span::raw(" group  "),
        key("/"),
        Span::raw(" filter  "),
        key("q"),
        Span::raw(" quit"),
    ];
    if app.editing {
        spans.push(Span::raw(format!(
            "   filter: {}▏ (Enter keeps, Esc clears)",
            inert(&app.filter)
        )));
    } else if !app.filter.is_empty() {
        spans.push(Span::raw(format!(
            "   filter: {} (Esc clears)",
            inert(&app.filter)
        )));
    }
    Line::from(spans)
}

/// The shard rows: marker, name, share now, heat strip and sparkline, as many as fit.
fn draw_shards(frame: &mut Frame<'_>, f: &Figures, area: Rect, paint: &Paint) {
    let inner_w = usize::from(area.width.saturating_sub(2));
    let name_w = f
        .shards
        .iter()
        .map(|r| inert(&r.name).chars().count())
        .max()
        .unwrap_or(5)
        .clamp(5, 24);
    // Marker, name, share (7), then the strip and sparkline in what is left.
    let fixed = 2 + name_w + 1 + 7 + 1;
    let room = inner_w.saturating_sub(fixed);
    let spark_w = if room >= 40 { 12 } else { 0 };
    let heat_w = room
        .saturating_sub(spark_w + usize::from(spark_w > 0))
        .min(f.capacity.max(1));
    let heat_w = if heat_w >= 5 { heat_w } else { 0 };
    let title = format!(
        " Shards {} of {}{} · heat: last {heat_w} windows vs fair share and noise{} ",
        f.shards.len(),
        f.shards_total,
        if f.filter.is_empty() {
            String::new()
        } else {
            format!(" matching \"{}\"", inert(&f.filter))
        },
        if spark_w > 0 { " · req/s " } else { "" },
    );
    let block = Block::bordered().title(Span::styled(title, paint.heading()));
    let visible = usize::from(area.height.saturating_sub(2));
    let selected = f
        .selected
        .as_ref()
        .and_then(|s| f.shards.iter().position(|r| r.name == s.name))
        .unwrap_or(0);
    // Keep the selected row on screen.
    let first = selected.saturating_sub(visible.saturating_sub(1));
    let mut lines: Vec<Line<'_>> = Vec::new();
    for (i, r) in f.shards.iter().enumerate().skip(first).take(visible) {
        let chosen = i == selected;
        let name_style = if chosen {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            Style::new()
        };
        let mut spans = vec![
            Span::raw(if chosen { "▶ " } else { "  " }),
            Span::styled(format!("{:<name_w$}", fit(&r.name, name_w)), name_style),
            Span::raw(format!(" {:>7}", pct(r.share))),
            Span::raw(" "),
        ];
        for &h in &r.heat[r.heat.len().saturating_sub(heat_w)..] {
            spans.push(Span::styled(glyph(h).to_string(), paint.heat(h)));
        }
        if spark_w > 0 {
            spans.push(Span::raw(" "));
            spans.push(Span::styled(
                sparkline(&r.rate, spark_w),
                paint.fg(Color::Gray),
            ));
        }
        lines.push(Line::from(spans));
    }
    if lines.is_empty() {
        lines.push(Line::raw(if f.filter.is_empty() {
            "No shard with traffic in the windows kept."
        } else {
            "No shard matches the filter (Esc clears it)."
        }));
    }
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_alerts(frame: &mut Frame<'_>, f: &Figures, area: Rect, paint: &Paint) {
    let (firing, pending) = f.alert_counts();
    let title = format!(" Alerts: {firing} firing, {pending} pending ");
    let block = Block::bordered().title(Span::styled(title, paint.heading()));
    let mut lines: Vec<Line<'_>> = Vec::new();
    if f.alerts.is_empty() {
        lines.push(Line::raw("No active alert for this group."));
    }
    // One short line per alert first, so every alert is listed however little room there is;
    // then each one's summary, description and mitigations, as far as they fit.
    for a in &f.alerts {
        let state = if a.state == "firing" {
            paint.fg(Color::LightRed).add_modifier(Modifier::BOLD)
        } else {
            paint.fg(Color::Yellow).add_modifier(Modifier::BOLD)
        };
        let labels: String = a
            .labels
            .iter()
            .map(|(k, v)| format!(" {k}={}", inert(v)))
            .collect();
        lines.push(Line::from(vec![
            Span::styled(a.state.to_uppercase(), state),
            Span::styled(
                format!(" {}", inert(&a.alertname)),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!("{labels} ({})", inert(&a.severity))),
        ]));
    }
    for a in &f.alerts {
        if a.summary.is_empty() && a.description.is_empty() && a.mitigations.is_empty() {
            continue;
        }
        lines.push(Line::styled(
            format!("{}:", inert(&a.alertname)),
            paint.heading(),
        ));
        for text in [&a.summary, &a.description] {
            if !text.is_empty() {
                lines.push(Line::raw(format!("  {}", inert(text))));
            }
        }
        for m in &a.mitigations {
            lines.push(Line::styled(
                format!("  • {}", inert(m)),
                paint.fg(Color::Gray),
            ));
        }
    }
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// Keys of the group and of the selected shard, then the cache loop.
fn draw_side(frame: &mut Frame<'_>, f: &Figures, area: Rect, paint: &Paint) {
    let w = usize::from(area.width.saturating_sub(2));
    let label_w = w.saturating_sub(8 + 1 + 15).max(6);
    let key_lines = |keys: &[super::figures::KeyRow]| -> Vec<Line<'static>> {
        if keys.is_empty() {
            return vec![Line::raw("no keyed requests")];
        }
        keys.iter()
            .map(|k| {
                Line::raw(format!(
                    "{:<label_w$} {:>7} {}",
                    fit(&k.label, label_w),
                    pct(Some(k.share)),
                    text::range(k)
                ))
            })
            .collect()
    };
    let group = f
        .group
        .as_deref()
        .map_or_else(|| "(none)".to_owned(), inert);
    let mut lines = vec![Line::styled(
        format!(
            "Keys of {group}{}",
            if f.keys_certified { " (certified)" } else { "" }
        ),
        paint.heading(),
    )];
    lines.extend(key_lines(&f.top_keys));
    if let Some(s) = &f.selected {
        lines.push(Line::raw(""));
        lines.push(Line::styled(
            format!("Keys of {}", fit(&s.name, w.saturating_sub(8))),
            paint.heading(),
        ));
        lines.extend(key_lines(&s.keys));
    }
    if let Some(c) = &f.cache {
        lines.push(Line::raw(""));
        lines.push(Line::styled("Cache loop", paint.heading()));
        lines.push(Line::raw(format!(
            "hit ratio now       {}",
            pct(c.hit_ratio)
        )));
        lines.push(Line::raw(format!(
            "backend calls/req   {}",
            text::num(Some(c.backend_calls_per_request), 3)
        )));
        lines.push(Line::raw(format!(
            "calmest window      {}",
            text::num(Some(c.calmest_backend_calls_per_request), 3)
        )));
        lines.push(Line::styled(
            format!(
                "amplification       {}",
                c.amplification
                    .map_or_else(|| "–".to_owned(), |a| format!("{a:.1}×"))
            ),
            if c.amplification.is_some_and(|a| a >= 2.0) {
                paint.fg(Color::LightRed).add_modifier(Modifier::BOLD)
            } else {
                Style::new()
            },
        ));
    }
    if let Some(wi) = &f.whatif {
        lines.push(Line::raw(""));
        lines.push(Line::styled(
            "What-if: hit ratio against TTL",
            paint.heading(),
        ));
        // Marker, label (up to a candidate's name), percentage, bound and calls take about 32
        // columns; the bar gets the rest.
        let bar = w.saturating_sub(32).clamp(4, 20);
        for (i, l) in text::whatif_lines(wi, bar, false).into_iter().enumerate() {
            let observed = l.starts_with('▶');
            lines.push(if i > 0 && observed {
                Line::styled(l, paint.fg(Color::LightYellow).add_modifier(Modifier::BOLD))
            } else {
                Line::raw(l)
            });
        }
    }
    let block = Block::bordered().title(Span::styled(" Keys and cache ", paint.heading()));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::super::figures::tests::reading;
    use super::*;

    fn screen(app: &App, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, app)).unwrap();
        let buf = t.backend().buffer();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn app() -> App {
        App {
            url: "http://127.0.0.1:9477".into(),
            reading: Some(reading()),
            group: None,
            ..App::default()
        }
    }

    #[test]
    fn a_wide_tall_screen_has_every_panel() {
        let s = screen(&app(), 120, 40);
        assert!(s.contains("Busiest shard hot: 55.0%"), "{s}");
        assert!(s.contains("Keys of db"), "{s}");
        assert!(s.contains("(empty)"), "{s}");
        assert!(s.contains("Alerts: 1 firing, 1 pending"), "{s}");
        assert!(s.contains("• two"), "{s}");
        assert!(s.contains("▶ hot"), "{s}");
    }

    #[test]
    fn a_narrow_or_short_screen_drops_panels_not_text() {
        let s = screen(&app(), 80, 20);
        assert!(s.contains("▶ hot"), "{s}");
        assert!(!s.contains("Keys of db") && !s.contains("Alerts:"), "{s}");
        let s = screen(&app(), 30, 6);
        assert!(s.contains("40×8"), "{s}");
    }

    #[test]
    fn keys_select_filter_and_quit() {
        let mut a = app();
        let press = |a: &mut App, c: KeyCode| a.key(KeyEvent::new(c, KeyModifiers::NONE));
        press(&mut a, KeyCode::Char('j'));
        assert_eq!(a.shard.as_deref(), Some("s-2"));
        press(&mut a, KeyCode::Down);
        press(&mut a, KeyCode::Down);
        press(&mut a, KeyCode::Down);
        assert_eq!(a.shard.as_deref(), Some("gone"));
        press(&mut a, KeyCode::Char('k'));
        assert_eq!(a.shard.as_deref(), Some("s-10"));
        press(&mut a, KeyCode::Char('/'));
        for c in "s-2".chars() {
            press(&mut a, KeyCode::Char(c));
        }
        press(&mut a, KeyCode::Enter);
        assert_eq!(a.filter, "s-2");
        assert!(screen(&a, 120, 40).contains("Shards 1 of 3 matching \"s-2\""));
        press(&mut a, KeyCode::Esc);
        assert!(a.filter.is_empty());
        assert!(
            matches!(press(&mut a, KeyCode::Char('g')), Some(Ask::Group(Some(g))) if g == "other")
        );
        assert!(a.reading.is_none());
        press(&mut a, KeyCode::Char('q'));
        assert!(a.quit);
    }

    #[test]
    fn a_failed_poll_shows_the_banner_and_keeps_the_data() {
        let mut a = app();
        let err = SourceError::Status {
            addr: "127.0.0.1:1".parse().unwrap(),
            path: "/x".into(),
            status: 503,
            hint: "",
        };
        assert!(a.take(None, Err(err)));
        let s = screen(&a, 120, 40);
        assert!(s.contains("The agent stopped answering"), "{s}");
        assert!(s.contains("Busiest shard hot"), "{s}");
        // A reading for a group no longer shown is dropped.
        assert!(!a.take(Some("other".into()), Ok(reading())));
        assert!(a.take(None, Ok(reading())));
        assert!(!screen(&a, 120, 40).contains("stopped answering"));
    }

    #[test]
    fn hsl_corners() {
        assert_eq!(hsl(0.0, 1.0, 0.5), (255, 0, 0));
        assert_eq!(hsl(210.0, 0.0, 1.0), (255, 255, 255));
    }
}
