//! `skewwatch bench`: a load generator for the agent's two live inputs, StatsD over UDP and
//! NDJSON over HTTP, that checks the agent's own account of what it received.
//!
//! For each target rate it sends for a fixed time (paced, from pre-generated datagrams or
//! bodies), waits until the agent's counters stop moving, and reports what was sent beside what
//! the agent says it accepted, rejected and dropped (`skewwatch_ingest_records_total`,
//! `..._rejected_total`, `..._dropped_total`, `skewwatch_statsd_kernel_drops_total`, read back
//! from `/metrics` before and after). With `--pid` it also reports the agent's CPU use and
//! memory. Several rates (`--rate 1M,2M,3M`) make a sweep that shows where loss begins.
//!
//! It is plain threads and blocking sockets: StatsD senders use `sendmmsg` on a connected
//! socket, HTTP senders one keep-alive connection each ([`crate::client`]).
//!
//! Loss accounting: `lost = sent - accepted - rejected - dropped`. Datagrams the kernel
//! dropped are reported by the agent through `SO_RXQ_OVFL`, which the kernel attaches to the
//! *next* datagram it delivers; so after the agent settles, the generator sends one empty
//! datagram, which carries the final drop count and holds no line.

#![expect(
    clippy::disallowed_types,
    reason = "`bench` paces and times its senders in real time, on blocking threads"
)]

mod workload;

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::socket::{ControlMessage, MsgFlags, MultiHeaders, sendmmsg};
use serde::Serialize;

use crate::client;
use crate::client::probe::{self, AgentCounters, ProcessSample};
pub use workload::{BodyPool, DatagramPool, Workload};

/// Datagrams handed to one `sendmmsg` call at most.
const SEND_BATCH: usize = 64;
/// Longest a paced sender sleeps between bursts.
const PACE_SLEEP: Duration = Duration::from_micros(500);
/// Consecutive send failures after which a sender gives up (nothing is listening).
const MAX_CONSECUTIVE_ERRORS: u64 = 10_000;
/// How often the counters are polled while the agent settles.
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// Which input to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// StatsD lines in UDP datagrams.
    Statsd,
    /// NDJSON batches on `POST /api/v1/observations`.
    Http,
}

impl Mode {
    fn source(self) -> &'static str {
        match self {
            Mode::Statsd => "statsd",
            Mode::Http => "http",
        }
    }
}

/// `skewwatch bench` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Input to load: `statsd` (UDP datagrams) or `http` (NDJSON batches).
    #[arg(long, value_enum, default_value_t = Mode::Statsd)]
    pub mode: Mode,
    /// The agent's StatsD address.
    #[arg(long, default_value = "127.0.0.1:8125")]
    pub statsd: SocketAddr,
    /// The agent's HTTP address (NDJSON ingest and the /metrics read-back).
    #[arg(long, default_value = "127.0.0.1:9477")]
    pub http: SocketAddr,
    /// Target rates in records (lines) per second over all senders, comma-separated; `k` and
    /// `M` suffixes are allowed; 0 sends as fast as possible. One step per rate.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate, default_value = "100k")]
    pub rate: Vec<u64>,
    /// How long each step sends, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration_secs: f64,
    /// Groups (sharded systems).
    #[arg(long, default_value_t = 1)]
    pub groups: usize,
    /// Shards per group.
    #[arg(long, default_value_t = 64)]
    pub shards: usize,
    /// Distinct keys; 0 sends records without a key.
    #[arg(long, default_value_t = 0)]
    pub keys: usize,
    /// Draw keys uniformly (default: skewed towards a few hot keys).
    #[arg(long)]
    pub uniform_keys: bool,
    /// Send plain StatsD lines, group, shard, key and outcome folded into the metric name
    /// instead of DogStatsD tags, latencies under 1 ms sent as 1 ms: for a peer daemon that
    /// rejects tags or sub-millisecond timers (skewwatch needs the tags; combine with
    /// `--readback false`).
    #[arg(long)]
    pub plain: bool,
    /// Largest StatsD datagram, bytes; lines are packed up to it.
    #[arg(long, default_value_t = 1400)]
    pub datagram_bytes: usize,
    /// Records per HTTP batch.
    #[arg(long, default_value_t = 1000)]
    pub batch_records: usize,
    /// Sender threads, each with its own socket or connection; the rate is split evenly.
    #[arg(long, default_value_t = 1)]
    pub senders: usize,
    /// Read the agent's counters from /metrics before and after each step (turn off for a
    /// peer without them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub readback: bool,
    /// Longest wait for the agent's counters to settle after a step, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub settle_secs: f64,
    /// Process id of the agent (or peer): report its CPU use while sending and its memory.
    #[arg(long)]
    pub pid: Option<u32>,
    /// File holding the bearer token for HTTP ingest.
    #[arg(long)]
    pub bearer_token_file: Option<std::path::PathBuf>,
    /// Print one JSON line per step instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seed of the generated workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One step of a run: what was sent and what the agent made of it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepReport {
    /// `statsd` or `http`.
    pub mode: &'static str,
    /// Target records per second (0: as fast as possible).
    pub target_rate: u64,
    /// Seconds spent sending.
    pub send_secs: f64,
    /// Sender threads.
    pub senders: usize,
    /// Records (lines) sent.
    pub sent_records: u64,
    /// Datagrams (StatsD) or batches (HTTP) sent.
    pub sent_units: u64,
    /// Payload bytes sent.
    pub sent_bytes: u64,
    /// Records sent per second.
    pub send_rate: f64,
    /// Sends that failed (counted as not sent).
    pub send_errors: u64,
    /// HTTP batches answered 503 (queue full or shutting down).
    pub http_503: u64,
    /// Records the agent accepted (`skewwatch_ingest_records_total`).
    pub accepted_records: Option<u64>,
    /// Records the agent rejected as invalid.
    pub rejected_records: Option<u64>,
    /// Valid records the agent dropped on a full queue.
    pub dropped_records: Option<u64>,
    /// Datagrams the kernel dropped on the agent's socket (`SO_RXQ_OVFL`).
    pub kernel_drop_datagrams: Option<u64>,
    /// `sent - accepted - rejected - dropped`: records that did not make it.
    pub lost_records: Option<i64>,
    /// Lost records not explained by kernel drops (estimated at the mean lines per datagram).
    pub unaccounted_records: Option<i64>,
    /// Records accepted per second of sending.
    pub accepted_rate: Option<f64>,
    /// Host-wide `Udp: RcvbufErrors` during the step (all sockets).
    pub host_udp_rcvbuf_errors: u64,
    /// The agent's CPU use while sending, in cores (1.0 = one core busy).
    pub agent_cpu_cores: Option<f64>,
    /// The same by thread name (`statsd-udp` receives and parses, the `tokio-rt-worker`
    /// threads run the pipeline and HTTP), in cores.
    pub agent_thread_cores: BTreeMap<String, f64>,
    /// This load generator's own CPU use while sending, in cores: on a small machine the
    /// sender competes with the agent (the kernel charges loopback delivery to the sender).
    pub sender_cpu_cores: f64,
    /// The whole machine's busy CPU while sending, in cores (all processes and the kernel).
    pub host_busy_cores: f64,
    /// The part of it spent in softirq (network delivery), in cores.
    pub host_softirq_cores: f64,
    /// CPU the hypervisor gave to other machines while this one wanted it, in cores.
    pub host_steal_cores: f64,
    /// The agent's resident memory after the step, bytes.
    pub agent_rss_bytes: Option<u64>,
    /// The agent's peak resident memory so far, bytes.
    pub agent_peak_rss_bytes: Option<u64>,
}

/// What one sender did.
#[derive(Debug, Clone, Copy, Default)]
struct SendStats {
    records: u64,
    units: u64,
    bytes: u64,
    errors: u64,
    http_503: u64,
}

impl SendStats {
    fn add(&mut self, o: &SendStats) {
        self.records += o.records;
        self.units += o.units;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.http_503 += o.http_503;
    }
}

/// Runs the load generator.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    check_args(&args)?;
    let token = match &args.bearer_token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("reading {}", p.display()))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    let payload = Payload::generate(&args);
    if !args.json {
        print_header(&args, &payload);
    }
    for &rate in &args.rate {
        let report = step(&args, rate, &payload, token.as_deref())?;
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_row(&report);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses arguments no step could run with.
fn check_args(args: &Args) -> anyhow::Result<()> {
    if args.senders == 0 || args.rate.is_empty() {
        bail!("--senders and --rate need at least one");
    }
    if !(args.duration_secs > 0.0 && args.duration_secs <= 3600.0) {
        bail!("--duration-secs must be in (0, 3600]");
    }
    if args.datagram_bytes < 128 || args.datagram_bytes > 65_507 {
        bail!("--datagram-bytes must be in 128..=65507");
    }
    Ok(())
}

enum Payload {
    Datagrams(Arc<DatagramPool>),
    Bodies(Arc<BodyPool>),
}

impl Payload {
    /// The pre-generated datagrams or bodies every step sends from.
    fn generate(args: &Args) -> Payload {
        let workload = Workload {
            groups: args.groups.max(1),
            shards: args.shards.max(1),
            keys: args.keys,
            uniform_keys: args.uniform_keys,
            seed: args.seed,
            plain: args.plain,
        };
        // Enough distinct lines that the stream does not repeat quickly, and carries every key.
        let pool_records = (args.keys.max(args.groups * args.shards * 8)).clamp(65_536, 1 << 20);
        match args.mode {
            Mode::Statsd => Payload::Datagrams(Arc::new(
                workload.datagrams(pool_records, args.datagram_bytes),
            )),
            Mode::Http => {
                let bodies = pool_records
                    .div_ceil(args.batch_records.max(1))
                    .clamp(4, 256);
                Payload::Bodies(Arc::new(workload.bodies(bodies, args.batch_records.max(1))))
            }
        }
    }
}

/// Parses a rate such as `50000`, `500k` or `3M`.
fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, scale) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let v: f64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a rate (e.g. 50000, 500k, 3M)"))?;
    if !(v >= 0.0 && v * scale <= 1e9) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok((v * scale).round() as u64)
}

/// What the machine and the agent process looked like at one moment of a step.
struct Probes {
    agent: Option<ProcessSample>,
    agent_threads: BTreeMap<String, f64>,
    me: ProcessSample,
    host: probe::HostCpu,
}

impl Probes {
    fn take(pid: Option<u32>) -> anyhow::Result<Probes> {
        Ok(Probes {
            agent: pid.map(ProcessSample::read).transpose()?,
            agent_threads: pid.map(probe::thread_cpu).unwrap_or_default(),
            me: ProcessSample::read(std::process::id())?,
            host: probe::HostCpu::read(),
        })
    }
}

/// Sends one step at `rate` and reads back what the agent made of it.
fn step(
    args: &Args,
    rate: u64,
    payload: &Payload,
    token: Option<&str>,
) -> anyhow::Result<StepReport> {
    let source = args.mode.source();
    let before = if args.readback {
        Some(
            AgentCounters::scrape(args.http, source)
                .with_context(|| format!("reading the agent's /metrics on {}", args.http))?,
        )
    } else {
        None
    };
    let host_before = probe::udp_rcvbuf_errors();
    let probes_before = Probes::take(args.pid)?;
    let started = Instant::now();
    let sent = send_all(args, rate, payload, token)?;
    let send_secs = started.elapsed().as_secs_f64();
    let probes_after = Probes::take(args.pid)?;

    let mut report = StepReport {
        mode: source,
        target_rate: rate,
        send_secs,
        senders: args.senders,
        sent_records: sent.records,
        sent_units: sent.units,
        sent_bytes: sent.bytes,
        send_rate: sent.records as f64 / send_secs,
        send_errors: sent.errors,
        http_503: sent.http_503,
        ..StepReport::default()
    };
    report.add_cpu(&probes_before, &probes_after, send_secs);
    if let Some(before) = before {
        let after = settle(args, source, &before, sent.records)?;
        report.add_readback(args.mode, &after.since(&before), &sent, send_secs);
    }
    report.host_udp_rcvbuf_errors = probe::udp_rcvbuf_errors().saturating_sub(host_before);
    if let Some(pid) = args.pid {
        let p = ProcessSample::read(pid)?;
        report.agent_rss_bytes = Some(p.rss_bytes);
        report.agent_peak_rss_bytes = Some(p.hwm_bytes);
    }
    Ok(report)
}

/// Runs `--senders` threads at `rate` in all until the step's duration is over.
fn send_all(
    args: &Args,
    rate: u64,
    payload: &Payload,
    token: Option<&str>,
) -> anyhow::Result<SendStats> {
    let per_sender = rate as f64 / args.senders as f64;
    let deadline = Instant::now() + Duration::from_secs_f64(args.duration_secs);
    let results: Vec<io::Result<SendStats>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.senders)
            .map(|i| {
                scope.spawn(move || match payload {
                    Payload::Datagrams(pool) => {
                        let offset = i * pool.datagrams.len() / args.senders;
                        send_statsd(args.statsd, pool, offset, per_sender, deadline)
                    }
                    Payload::Bodies(pool) => {
                        let offset = i * pool.bodies.len() / args.senders;
                        send_http(args.http, pool, offset, per_sender, deadline, token)
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("sender panicked")))
            })
            .collect()
    });
    let mut sent = SendStats::default();
    for r in results {
        sent.add(&r.context("sending")?);
    }
    Ok(sent)
}

impl StepReport {
    /// CPU use of this process, the host and (with `--pid`) the agent and its threads.
    fn add_cpu(&mut self, before: &Probes, after: &Probes, secs: f64) {
        self.sender_cpu_cores = (after.me.cpu_secs - before.me.cpu_secs) / secs;
        self.host_busy_cores = (after.host.busy - before.host.busy) / secs;
        self.host_softirq_cores = (after.host.softirq - before.host.softirq) / secs;
        self.host_steal_cores = (after.host.steal - before.host.steal) / secs;
        if let (Some(b), Some(a)) = (before.agent, after.agent) {
            self.agent_cpu_cores = Some((a.cpu_secs - b.cpu_secs) / secs);
            for (name, cpu) in &after.agent_threads {
                let earlier = before.agent_threads.get(name).copied().unwrap_or(0.0);
                self.agent_thread_cores.insert(
                    name.clone(),
                    ((cpu - earlier) / secs * 1000.0).round() / 1000.0,
                );
            }
        }
    }

    /// What the agent accounted for of what was sent (`d`: its counters' growth), and what
    /// is left unexplained once kernel drops are counted.
    fn add_readback(&mut self, mode: Mode, d: &AgentCounters, sent: &SendStats, secs: f64) {
        let lost = sent.records as i64 - d.accounted().round() as i64;
        let per_datagram = sent.records as f64 / sent.units.max(1) as f64;
        let explained = match mode {
            Mode::Statsd => (d.kernel_drops * per_datagram).round() as i64,
            Mode::Http => 0,
        };
        self.accepted_records = Some(d.records.round() as u64);
        self.rejected_records = Some(d.rejected.round() as u64);
        self.dropped_records = Some(d.dropped.round() as u64);
        self.kernel_drop_datagrams = Some(d.kernel_drops.round() as u64);
        self.lost_records = Some(lost);
        self.unaccounted_records = Some(lost - explained.min(lost.max(0)));
        self.accepted_rate = Some(d.records / secs);
    }
}

/// Polls the agent's counters until every sent record is accounted for or they stop moving,
/// within `--settle-secs`; for StatsD, then sends the empty datagram that carries the kernel's
/// final drop count and waits for it to be counted.
fn settle(
    args: &Args,
    source: &str,
    before: &AgentCounters,
    sent: u64,
) -> anyhow::Result<AgentCounters> {
    let deadline = Instant::now() + Duration::from_secs_f64(args.settle_secs);
    let mut last = AgentCounters::scrape(args.http, source)?;
    while Instant::now() < deadline && last.since(before).accounted() < sent as f64 {
        std::thread::sleep(SETTLE_POLL);
        let now = AgentCounters::scrape(args.http, source)?;
        let moved = now != last;
        last = now;
        if !moved {
            break;
        }
    }
    if args.mode == Mode::Statsd {
        let socket = UdpSocket::bind(unspecified(args.statsd))?;
        socket.send_to(b"", args.statsd)?;
        while Instant::now() < deadline {
            std::thread::sleep(SETTLE_POLL);
            let now = AgentCounters::scrape(args.http, source)?;
            let arrived = now.datagrams > last.datagrams;
            last = now;
            if arrived {
                break;
            }
        }
    }
    Ok(last)
}

fn unspecified(target: SocketAddr) -> SocketAddr {
    match target {
        SocketAddr::V4(_) => SocketAddr::from(([127, 0, 0, 1], 0)),
        SocketAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0)),
    }
}

/// How many records are due by `elapsed` at `rate` (records/s; 0 = no limit).
fn due(rate: f64, elapsed: Duration) -> u64 {
    if rate <= 0.0 {
        u64::MAX
    } else {
        (elapsed.as_secs_f64() * rate) as u64
    }
}

/// Sends datagrams from `pool`, starting at `offset`, at `rate` lines a second until
/// `deadline`.
fn send_statsd(
    target: SocketAddr,
    pool: &DatagramPool,
    offset: usize,
    rate: f64,
    deadline: Instant,
) -> io::Result<SendStats> {
    let socket = UdpSocket::bind(unspecified(target))?;
    socket.connect(target)?;
    let fd = socket.as_raw_fd();
    let mut headers = MultiHeaders::<()>::preallocate(SEND_BATCH, None);
    let n = pool.datagrams.len();
    let mut next = offset % n;
    let mut stats = SendStats::default();
    let mut consecutive_errors = 0;
    let start = Instant::now();
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let owed = due(rate, now - start).saturating_sub(stats.records);
        if owed == 0 {
            std::thread::sleep(PACE_SLEEP.min(deadline - now));
            continue;
        }
        match send_batch(fd, &mut headers, pool, next, owed) {
            Ok(done) => {
                for i in 0..done {
                    let d = (next + i) % n;
                    stats.records += u64::from(pool.lines[d]);
                    stats.bytes += pool.datagrams[d].len() as u64;
                }
                stats.units += done as u64;
                next = (next + done) % n;
                consecutive_errors = 0;
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => {
                // A refused or full send: count it, skip the datagram, go on.
                stats.errors += 1;
                next = (next + 1) % n;
                consecutive_errors += 1;
                if consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                    return Err(io::Error::other(format!(
                        "every send to {target} fails: is the agent listening?"
                    )));
                }
            }
        }
    }
    Ok(stats)
}

/// Sends whole datagrams from `pool` starting at `next`, while lines are owed (at least one),
/// up to [`SEND_BATCH`] in one `sendmmsg`; returns how many the kernel took.
fn send_batch(
    fd: std::os::fd::RawFd,
    headers: &mut MultiHeaders<()>,
    pool: &DatagramPool,
    next: usize,
    owed: u64,
) -> nix::Result<usize> {
    let n = pool.datagrams.len();
    let mut count = 0;
    let mut lines = 0u64;
    while count < SEND_BATCH && (count == 0 || lines < owed) {
        lines += u64::from(pool.lines[(next + count) % n]);
        count += 1;
    }
    let iovs: Vec<[io::IoSlice<'_>; 1]> = (0..count)
        .map(|i| [io::IoSlice::new(&pool.datagrams[(next + i) % n])])
        .collect();
    let addrs = [None; SEND_BATCH];
    let no_cmsgs: [ControlMessage<'_>; 0] = [];
    let results = sendmmsg(
        fd,
        headers,
        &iovs,
        &addrs[..count],
        no_cmsgs,
        MsgFlags::empty(),
    )?;
    Ok(results.count())
}

/// The sender's pacing loop: posts bodies from `pool`, starting at `offset`, at `rate` records a
/// second until `deadline`, on one keep-alive connection (reopened when the server closes it),
/// counting each answer.
fn send_http(
    target: SocketAddr,
    pool: &BodyPool,
    offset: usize,
    rate: f64,
    deadline: Instant,
    token: Option<&str>,
) -> io::Result<SendStats> {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let mut headers = vec!["Content-Type: application/x-ndjson"];
    if let Some(a) = &auth {
        headers.push(a);
    }
    let timeout = Duration::from_secs(10);
    let mut conn: Option<client::Connection> = None;
    let n = pool.bodies.len();
    let mut next = offset % n;
    let mut stats = SendStats::default();
    let mut consecutive_errors = 0;
    let start = Instant::now();
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if due(rate, now - start) < stats.records + pool.records as u64 {
            std::thread::sleep(PACE_SLEEP.min(deadline - now));
            continue;
        }
        let c = match &mut conn {
            Some(c) => c,
            None => conn.insert(client::Connection::connect(target, timeout)?),
        };
        let body = &pool.bodies[next];
        next = (next + 1) % n;
        match c.request("POST", "/api/v1/observations", &headers, body) {
            Ok(resp) => {
                consecutive_errors = 0;
                stats.units += 1;
                stats.records += pool.records as u64;
                stats.bytes += body.len() as u64;
                stats.http_503 += u64::from(check_ingest_answer(&resp)?);
                if resp.close {
                    conn = None;
                }
            }
            Err(_) => {
                // The batch may or may not have arrived; it is not counted as sent.
                stats.errors += 1;
                conn = None;
                consecutive_errors += 1;
                if consecutive_errors >= 100 {
                    return Err(io::Error::other(format!(
                        "every request to {target} fails: is the agent listening?"
                    )));
                }
            }
        }
    }
    Ok(stats)
}

/// True for a 503 (the agent's queue was full: counted, not fatal); an error for any answer
/// but 200 and 503, since the load itself is then wrong.
fn check_ingest_answer(resp: &client::Response) -> io::Result<bool> {
    match resp.status {
        200 => Ok(false),
        503 => Ok(true),
        status => Err(io::Error::other(format!(
            "POST /api/v1/observations answered {status}: {}",
            resp.text()
        ))),
    }
}

fn print_header(args: &Args, payload: &Payload) {
    let what = match payload {
        Payload::Datagrams(p) => {
            let lines: u64 = p.lines.iter().map(|&n| u64::from(n)).sum();
            format!(
                "statsd -> {}: {} datagrams of <= {} B in the pool, {:.1} lines each",
                args.statsd,
                p.datagrams.len(),
                args.datagram_bytes,
                lines as f64 / p.datagrams.len() as f64
            )
        }
        Payload::Bodies(p) => format!(
            "http -> {}: {} bodies of {} records in the pool",
            args.http,
            p.bodies.len(),
            p.records
        ),
    };
    println!(
        "skewwatch bench: {what}; {} group(s) x {} shards, {} keys, {} sender(s), {} s per step",
        args.groups, args.shards, args.keys, args.senders, args.duration_secs
    );
    println!(
        "{:>10} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>11}",
        "target/s",
        "sent",
        "sent/s",
        "accepted",
        "accepted/s",
        "rejected",
        "q_drop",
        "k_drop_dg",
        "lost",
        "unacct",
        "cpu",
        "rss/peak_MiB"
    );
}

fn print_row(r: &StepReport) {
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let opti = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    println!(
        "{:>10} {:>11} {:>11.0} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>11}",
        if r.target_rate == 0 {
            "max".to_string()
        } else {
            r.target_rate.to_string()
        },
        r.sent_records,
        r.send_rate,
        opt(r.accepted_records),
        r.accepted_rate
            .map_or("-".to_string(), |v| format!("{v:.0}")),
        opt(r.rejected_records),
        opt(r.dropped_records),
        opt(r.kernel_drop_datagrams),
        opti(r.lost_records),
        opti(r.unaccounted_records),
        r.agent_cpu_cores
            .map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0)),
        match (r.agent_rss_bytes, r.agent_peak_rss_bytes) {
            (Some(rss), Some(peak)) => format!(
                "{:.1}/{:.1}",
                rss as f64 / 1048576.0,
                peak as f64 / 1048576.0
            ),
            _ => "-".to_string(),
        },
    );
    if !r.agent_thread_cores.is_empty() {
        let threads: Vec<String> = r
            .agent_thread_cores
            .iter()
            .filter(|(_, c)| **c >= 0.005)
            .map(|(n, c)| format!("{n} {:.1}%", c * 100.0))
            .collect();
        println!(
            "{:>10} agent CPU by thread: {}; sender {:.1}%; host busy {:.2} cores (softirq {:.2}, steal {:.2})",
            "",
            threads.join(", "),
            r.sender_cpu_cores * 100.0,
            r.host_busy_cores,
            r.host_softirq_cores,
            r.host_steal_cores
        );
    }
    if r.send_errors > 0 || r.http_503 > 0 || r.host_udp_rcvbuf_errors > 0 {
        println!(
            "{:>10} send errors {}, HTTP 503 {}, host UDP RcvbufErrors {}",
            "", r.send_errors, r.http_503, r.host_udp_rcvbuf_errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_take_suffixes() {
        assert_eq!(parse_rate("50000"), Ok(50_000));
        assert_eq!(parse_rate("500k"), Ok(500_000));
        assert_eq!(parse_rate("2.5M"), Ok(2_500_000));
        assert_eq!(parse_rate("0"), Ok(0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-1").is_err());
    }

    #[test]
    fn statsd_sender_paces_and_counts_whole_datagrams() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let pool = Workload {
            groups: 1,
            shards: 4,
            keys: 0,
            uniform_keys: false,
            seed: 1,
            plain: false,
        }
        .datagrams(1_000, 1_400);
        let deadline = Instant::now() + Duration::from_millis(200);
        let stats =
            send_statsd(receiver.local_addr().unwrap(), &pool, 0, 10_000.0, deadline).unwrap();
        // 10k lines/s for 0.2 s, within a datagram or two of pacing slack.
        assert!((1_500..=2_200).contains(&stats.records), "{stats:?}");
        let mut buf = [0u8; 2048];
        let mut lines = 0;
        for _ in 0..stats.units {
            let n = receiver.recv(&mut buf).unwrap();
            lines += buf[..n].split(|&b| b == b'\n').count() as u64;
        }
        assert_eq!(lines, stats.records);
    }
}
