//! `skewwatch demo`: the real agent on its default configuration, fed a built-in simulated
//! incident over real UDP, with a live account of what it detects and why.
//!
//! The incident is the metadata-database one: an index column full of empty values sends a
//! growing share of traffic to one shard; the shard's backend saturates; failed cache fills are
//! not cached, so the hit ratio falls and every miss is another database call; the database's
//! errors rise everywhere. The demo prints the group's distribution statistics every few windows
//! and each alert as it fires and resolves, with the agent's own summary and description.
//!
//! The demo runs on a compressed clock: its windows are 1 s instead of the default 10 s
//! (`--window-secs`), so the whole story (warm-up, incident, recovery) takes about two and a
//! half minutes. The detectors' burst tolerances, which are in seconds, are compressed with it
//! (`compress_time`); every other setting is the default.

#![expect(
    clippy::disallowed_types,
    reason = "the demo plays its incident to a live agent in real time, on the calling thread"
)]

use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use skewwatch_detectors::alert::{Alert, AlertState};
use skewwatch_detectors::prng::SplitMix64;
use skewwatch_detectors::snapshot::WindowSnapshot;

use crate::app;
use crate::app::Config;

/// `skewwatch demo` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Window length in seconds; every other setting is the embedded default.
    #[arg(long, default_value_t = 1.0)]
    pub window_secs: f64,
    /// Windows of normal traffic before the incident (detectors warm up for 30 windows).
    #[arg(long, default_value_t = 40)]
    pub warmup_windows: u32,
}

/// The demo's group.
pub const GROUP: &str = "metadata-db";
const SHARDS: usize = 16;
const HOT: usize = 7;
/// The shard the incident makes hot.
pub const HOT_SHARD: &str = "shard-7";
const RPS: f64 = 2000.0;
/// Incident windows after warm-up, then recovery windows: alerts keep firing for 60 s after
/// their condition clears (`keep_firing_for_secs`), so recovery outlasts that.
pub const INCIDENT_WINDOWS: u32 = 60;
const RECOVERY_WINDOWS: u32 = 75;

/// The simulated system in one window.
#[derive(Debug, Clone, Copy)]
struct State {
    /// Share of all requests whose index key is empty (they all land on the hot shard).
    empty_share: f64,
    /// Cache hit ratio.
    hit: f64,
    /// Share of backend calls that fail, on the hot shard and elsewhere.
    fail_hot: f64,
    fail_other: f64,
}

/// The incident's course at window `w` of `warmup` normal windows.
fn state_at(w: u32, warmup: u32) -> State {
    let normal = State {
        empty_share: 0.01,
        hit: 0.95,
        fail_hot: 0.001,
        fail_other: 0.001,
    };
    if w < warmup || w >= warmup + INCIDENT_WINDOWS {
        return normal;
    }
    // Ramp the loop in over 15 windows: the hot shard first, then the cache, then everyone.
    let x = f64::from(w - warmup);
    let ramp = (x / 15.0).min(1.0);
    State {
        empty_share: 0.01 + 0.24 * (x / 5.0).min(1.0),
        hit: 0.95 - 0.45 * ramp,
        fail_hot: 0.001 + 0.75 * (x / 8.0).min(1.0),
        fail_other: 0.001 + 0.5 * ramp,
    }
}

/// A latency around `median` ms with a long right tail, from a deterministic generator so
/// every run tells the same story.
fn latency(rng: &mut SplitMix64, median: f64) -> f64 {
    median * (0.5 + 2.0 * rng.next_f64() * rng.next_f64())
}

/// Appends StatsD lines for `n` requests; a sample rate of 1/n makes one line stand for n.
fn push_lines(
    lines: &mut Vec<String>,
    rng: &mut SplitMix64,
    shard: usize,
    key: &str,
    (outcome, cache, median_ms): (&str, &str, f64),
    n: u64,
) {
    // Two lines per class, so histograms see a spread of latencies.
    for part in [n / 2, n - n / 2] {
        if part == 0 {
            continue;
        }
        let mut l = format!("skewwatch.request:{:.3}|ms", latency(rng, median_ms));
        if part > 1 {
            let _ = write!(l, "|@{:.12}", 1.0 / part as f64);
        }
        let _ = write!(
            l,
            "|#group:{GROUP},shard:shard-{shard},key:{key},outcome:{outcome},cache:{cache}"
        );
        lines.push(l);
    }
}

/// Every StatsD line of one window.
fn window_lines(s: State, window_secs: f64, rng: &mut SplitMix64) -> Vec<String> {
    // At least RPS requests per window, so short demo windows keep the volume the detectors'
    // minimum-volume gates expect of a 1 s window.
    let total = RPS * window_secs.max(1.0);
    let mut lines = Vec::new();
    for shard in 0..SHARDS {
        let mut demand = vec![
            (format!("user:{}", shard * 3), 0.5),
            (format!("user:{}", shard * 3 + 1), 0.3),
        ];
        demand.push((format!("user:{}", shard * 3 + 2), 0.2));
        let other = total * (1.0 - s.empty_share) / SHARDS as f64;
        let mut chunks: Vec<(String, f64)> =
            demand.into_iter().map(|(k, w)| (k, other * w)).collect();
        if shard == HOT {
            chunks.push((String::new(), total * s.empty_share));
        }
        let fail = if shard == HOT {
            s.fail_hot
        } else {
            s.fail_other
        };
        let backend_ms = 12.0 + 900.0 * fail;
        for (key, expected) in chunks {
            let n = expected.round() as u64;
            let hits = (n as f64 * s.hit).round() as u64;
            let misses = n - hits;
            let failed = (misses as f64 * fail).round() as u64;
            let timeouts = failed * 2 / 3;
            push_lines(&mut lines, rng, shard, &key, ("ok", "hit", 0.6), hits);
            push_lines(
                &mut lines,
                rng,
                shard,
                &key,
                ("ok", "miss", backend_ms),
                misses - failed,
            );
            push_lines(
                &mut lines,
                rng,
                shard,
                &key,
                ("timeout", "miss", 1000.0),
                timeouts,
            );
            push_lines(
                &mut lines,
                rng,
                shard,
                &key,
                ("error", "miss", 40.0),
                failed - timeouts,
            );
        }
    }
    lines
}

/// The StatsD lines of window `w` of the demo's incident after `warmup` normal windows: the
/// traffic `skewwatch demo` sends, for tests and tools that want the same incident (the lines
/// draw latencies from `rng`).
pub fn incident_lines(w: u32, warmup: u32, window_secs: f64, rng: &mut SplitMix64) -> Vec<String> {
    window_lines(state_at(w, warmup), window_secs, rng)
}

/// Sends lines in datagrams of at most ~1,400 bytes.
pub fn send(sock: &UdpSocket, to: SocketAddr, lines: &[String]) -> std::io::Result<()> {
    let mut datagram = String::with_capacity(1500);
    for l in lines {
        if !datagram.is_empty() && datagram.len() + l.len() + 1 > 1400 {
            sock.send_to(datagram.as_bytes(), to)?;
            datagram.clear();
        }
        if !datagram.is_empty() {
            datagram.push('\n');
        }
        datagram.push_str(l);
    }
    if !datagram.is_empty() {
        sock.send_to(datagram.as_bytes(), to)?;
    }
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:5.1}%", x * 100.0))
}

/// One status line for the group.
fn status_line(snapshot: &WindowSnapshot) -> Option<String> {
    let g = snapshot.group(GROUP)?;
    let top = g.shards.iter().max_by(|a, b| a.share.total_cmp(&b.share))?;
    Some(format!(
        "{:>6.0} req/s  gini {:.2}  busiest {} {}  cache hit {}  errors {}  p99 {:.0} ms",
        g.traffic.requests_per_second,
        g.skew.as_ref().map_or(0.0, |s| s.gini),
        top.shard,
        pct(Some(top.share)),
        pct(g.traffic.cache_hit_ratio),
        pct(g.traffic.error_ratio),
        g.traffic.latency.map_or(0.0, |l| l.p99_ms),
    ))
}

/// `HotShard {group=metadata-db, shard=shard-7} [warning]`.
fn describe(a: &Alert) -> String {
    let ident: Vec<String> = a
        .labels
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "alertname" | "severity"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!(
        "{} {{{}}} [{}]",
        a.alertname(),
        ident.join(", "),
        a.labels.get("severity").map_or("?", String::as_str),
    )
}

/// Prints each alert as it starts firing and as it stops, and remembers what fired.
#[derive(Default)]
struct Narrator {
    /// Firing alerts already announced.
    known: Vec<Alert>,
    /// What fired and how long after the incident began.
    fired: Vec<(String, f64)>,
}

impl Narrator {
    /// Announces changes in the set of firing alerts at time `t` (onset at `onset`).
    fn update(&mut self, alerts: &[Alert], t: f64, onset: f64) {
        let firing: Vec<&Alert> = alerts
            .iter()
            .filter(|a| a.state == AlertState::Firing)
            .collect();
        for a in &firing {
            if !self.known.iter().any(|k| k.labels == a.labels) {
                let since = t - onset;
                println!(
                    "\nt={t:>4.0}s  FIRING   {}  ({since:.0} s after onset)",
                    describe(a)
                );
                for field in ["summary", "description"] {
                    if let Some(text) = a.annotations.get(field) {
                        println!("            {text}");
                    }
                }
                if let Some(m) = a.annotations.get("mitigations") {
                    println!("            mitigations: {m}");
                }
                println!();
                self.fired.push((describe(a), since));
                self.known.push((*a).clone());
            }
        }
        self.known.retain(|k| {
            let still = firing.iter().any(|f| f.labels == k.labels);
            if !still {
                println!("t={t:>4.0}s  RESOLVED {}", describe(k));
            }
            still
        });
    }

    /// The closing summary.
    fn summary(&self) {
        println!("\nWhat fired, and how long after the incident began:");
        for (what, since) in &self.fired {
            println!("  {since:>4.0} s  {what}");
        }
        if self.fired.is_empty() {
            println!("  nothing: this is a bug, please report it.");
        }
    }
}

/// Runs the demo.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = Config::embedded();
    compress_time(&mut config, args.window_secs);
    config.startup.http_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.startup.statsd_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    // No TSDB keeps a demo's counters: a `curl` of its page must not hold its exit.
    config.startup.shutdown.final_scrape_grace = std::time::Duration::ZERO;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let running = rt.block_on(app::start(config))?;
    let addrs = running.addrs();
    let statsd = addrs.statsd.context("the demo needs the StatsD listener")?;
    introduce(addrs.http, &args);
    let fired = play(&running, statsd, &args)?;
    rt.block_on(running.shutdown(app::GRACE));
    Ok(if fired {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs `config` on windows of `window_secs` standing for its own window length: the bursts
/// the detectors tolerate (`tolerated_burst_secs`, 20 s at 10 s windows) shrink in proportion,
/// so a 1 s-window demo judges bursts in windows as the defaults do. Without it a 15 s
/// incident played at 0.25 s windows would be a tolerated burst.
fn compress_time(config: &mut Config, window_secs: f64) {
    let factor = window_secs / config.startup.window.window_secs;
    config.startup.window.window_secs = window_secs;
    let d = &mut config.live.detectors;
    for secs in [
        &mut d.hot_shard.tolerated_burst_secs,
        &mut d.hot_key.tolerated_burst_secs,
        &mut d.latency_skew.tolerated_burst_secs,
        &mut d.shard_failing.tolerated_burst_secs,
        &mut d.deadline_pile_up.tolerated_burst_secs,
        &mut d.capacity_headroom.tolerated_burst_secs,
    ] {
        *secs *= factor;
    }
}

fn introduce(http: SocketAddr, args: &Args) {
    let w = args.window_secs;
    println!(
        "skewwatch demo: the real agent on its defaults, with {w} s windows standing for 10 s (burst tolerances scaled to match)."
    );
    println!("  metrics: curl http://{http}/metrics    alerts: curl http://{http}/api/v1/alerts");
    println!("  live view: open http://{http}/ in a browser");
    println!(
        "  {GROUP}: {SHARDS} shards, {:.0} req/s behind a look-aside cache (95% hits); normal traffic for {} windows while baselines warm up.",
        RPS * w.max(1.0) / w,
        args.warmup_windows
    );
    println!();
}

/// Sends the incident window by window and narrates what the agent sees; true when anything
/// fired.
fn play(running: &app::Running, statsd: SocketAddr, args: &Args) -> anyhow::Result<bool> {
    let (w, warmup) = (args.window_secs, args.warmup_windows);
    let snapshots = running.snapshots();
    let alerts = running.alerts();
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let mut rng = SplitMix64::new(7);
    let mut narrator = Narrator::default();
    let start = Instant::now();
    for win in 0..warmup + INCIDENT_WINDOWS + RECOVERY_WINDOWS {
        if win == warmup {
            println!(
                "\n>>> t={:.0}s  incident: empty index values send a growing share of traffic to shard-{HOT}; its backend saturates and failed cache fills are not cached.\n",
                f64::from(win) * w
            );
        }
        if win == warmup + INCIDENT_WINDOWS {
            println!(
                "\n>>> t={:.0}s  mitigation: the empty-key queries are fixed and the cache serves stale on error.\n",
                f64::from(win) * w
            );
        }
        send(&sock, statsd, &incident_lines(win, warmup, w, &mut rng))?;
        // Wait for this window to close, then read what the agent saw.
        let next = Duration::from_secs_f64(f64::from(win + 1) * w + 0.25 * w);
        if let Some(left) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(left);
        }
        let t = f64::from(win + 1) * w;
        if win % 5 == 4
            && let Some(line) = status_line(&snapshots.borrow())
        {
            println!("t={t:>4.0}s  {line}");
        }
        let active = alerts.borrow().clone();
        narrator.update(&active, t, f64::from(warmup) * w);
    }
    narrator.summary();
    Ok(!narrator.fired.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_lines_stand_for_their_counts() {
        let mut rng = SplitMix64::new(1);
        let lines = window_lines(state_at(0, 10), 1.0, &mut rng);
        let mut batch = skewwatch_detectors::observation::Batch::default();
        let mut rejected = skewwatch_detectors::observation::Rejections::default();
        for l in &lines {
            crate::ingest::statsd::parse_datagram(l.as_bytes(), &mut batch, &mut rejected);
        }
        assert_eq!(rejected.total(), 0);
        let n = batch.requests() as f64;
        assert!((n - RPS).abs() < RPS * 0.01, "{n}");
    }

    #[test]
    fn the_incident_moves_load_to_the_hot_shard_and_empties_the_cache() {
        let s = state_at(40 + 20, 40);
        assert!(s.empty_share > 0.2 && s.hit < 0.55 && s.fail_hot > 0.7);
        let after = state_at(40 + INCIDENT_WINDOWS, 40);
        assert_eq!(after.hit, 0.95);
        assert_eq!(HOT_SHARD, format!("shard-{HOT}"));
    }
}
