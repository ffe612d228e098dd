//! `skewwatch replay`: the same windows, detectors and alert state machine as the live agent,
//! driven by a recorded NDJSON trace in *trace time*, as fast as the machine allows.
//!
//! Output is one JSON line per alert transition on stdout, and a one-line summary on stderr.
//! With `--what-if POLICY[,POLICY…]`, each window also writes one JSON line per group whose
//! records named a cache key (`{"ts": …, "whatif": {…}}`): per policy the predicted backend
//! calls per request of the group and of each shard, exact (every key simulated) and sampled
//! (as the agent samples), beside what the cache reported ([`WhatIfLine`]).
//! Deterministic: the same trace and configuration give byte-identical output.
//!
//! Two threads: a reader thread reads the trace in blocks of `READ_BYTES`, parses each
//! block's whole lines where they lie ([`ndjson::for_each_line`]) into [`Batch`]es of
//! `BATCH_RECORDS` records and hands them over a channel of `QUEUE_BATCHES`; the calling
//! thread owns the engine and takes the records in trace order, one by one, exactly as if it
//! had parsed them itself. Parsing was most of replay's work, so this uses the second core
//! without touching the engine's order of events. Memory is bounded by the queue (about
//! 3 MiB), the read buffer, and the longest line, which the buffer grows to hold.

#![expect(
    clippy::disallowed_types,
    reason = "`replay` reports how long it took in real time; trace time drives the engine"
)]

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Context as _;
use serde::Serialize;
use skewwatch_detectors::engine::{Engine, Evaluation};
use skewwatch_detectors::observation::{Batch, ObservationRef};
use skewwatch_detectors::whatif::{
    GroupWhatIf, Policy, PolicyFigures, ShardCapacity, WhatIfConfig, WhatIfWindow,
};

use crate::app::Config;
use crate::ingest::ndjson::{self, Record};

/// `skewwatch replay` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// YAML configuration file (default: the embedded default configuration).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// NDJSON observation trace in time order; `-` reads standard input.
    pub trace: PathBuf,
    /// A record more than this many seconds after the latest time the trace has reached is a
    /// bad line: one stray timestamp (a year 3000) would otherwise make every later record
    /// late and the replay silently empty.
    #[arg(long, default_value_t = 86_400.0)]
    pub max_future_secs: f64,
    /// Cache policies to simulate beside the cache as configured (`whatif:`), comma-separated:
    /// `ttl=20m`, `serve-stale`, `negative=1m`, `capacity=N`, joined by `+` to combine
    /// (`ttl=20m+serve-stale`). Each window then writes each group's predicted backend calls
    /// per request under each policy, exact and sampled, beside what happened.
    #[arg(long = "what-if", value_name = "POLICY[,POLICY…]")]
    pub what_if: Option<String>,
}

/// Exit code for a bad trace line.
const BAD_LINE: u8 = 2;

/// Records per batch from the reader thread: large enough that a hand-over costs nothing per
/// record, small enough to stay in the caches.
const BATCH_RECORDS: usize = 4096;

/// Bytes the reader thread asks of the trace at a time: a few thousand lines, so a read's
/// cost is spread thin, in a buffer that stays in the caches while its lines are parsed.
const READ_BYTES: usize = 256 * 1024;

/// Batches that may wait between the reader thread and the engine: bounds replay's memory
/// (about 0.4 MiB a batch) whatever the trace's length.
const QUEUE_BATCHES: usize = 8;

/// Counts for the summary line.
#[derive(Debug, Default)]
pub struct Summary {
    records: u64,
    requests: u64,
    late: u64,
    windows: u64,
    transitions: u64,
}

impl Summary {
    /// Windows closed so far.
    pub fn windows(&self) -> u64 {
        self.windows
    }
}

/// Runs the replay; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::embedded(),
    };
    if let Some(specs) = &args.what_if {
        config.startup.whatif = what_if_config(config.startup.whatif, specs)?;
    }
    let name = args.trace.display().to_string();
    let input: Box<dyn Read + Send> = if name == "-" {
        Box::new(io::stdin())
    } else {
        let f = File::open(&args.trace).with_context(|| format!("opening trace {name}"))?;
        Box::new(f)
    };
    let stdout = io::stdout().lock();
    let mut out = BufWriter::new(stdout);
    let started = Instant::now();
    let mut summary = Summary::default();
    anyhow::ensure!(
        args.max_future_secs.is_finite() && args.max_future_secs > 0.0,
        "--max-future-secs must be a positive number of seconds"
    );
    match replay(input, &config, args.max_future_secs, &mut out, &mut summary) {
        Ok(()) => {}
        Err(ReplayError::BadLine { line, why }) => {
            out.flush()?;
            eprintln!("skewwatch replay: {name}:{line}: {why}");
            return Ok(ExitCode::from(BAD_LINE));
        }
        Err(ReplayError::Io(e)) => return Err(e).context(format!("reading {name}")),
    }
    out.flush()?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "skewwatch replay: {} records ({} requests, {} late) in {} windows, {} transitions, {:.2} s, {:.0} records/s",
        summary.records,
        summary.requests,
        summary.late,
        summary.windows,
        summary.transitions,
        secs,
        summary.records as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

/// The `whatif:` settings with the candidates `specs` names in place of the configured ones,
/// and the exact simulation beside the sampled one.
pub fn what_if_config(whatif: WhatIfConfig, specs: &str) -> anyhow::Result<WhatIfConfig> {
    let observed = whatif.policies[0].clone();
    let policies = Policy::parse_list(specs.split(','), &observed)
        .with_context(|| format!("--what-if {specs}"))?;
    Ok(WhatIfConfig {
        policies,
        exact_beside: true,
        ..whatif
    })
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A line is not a valid observation; replay stops there.
    #[error("line {line}: {why}")]
    BadLine {
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        why: String,
    },
    /// Reading the trace or writing output failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Replays every line of `input`, writing transitions to `out`: parsing on a reader thread,
/// the engine on this one.
fn replay(
    input: impl Read + Send,
    config: &Config,
    max_future_secs: f64,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<(), ReplayError> {
    let (tx, rx) = mpsc::sync_channel(QUEUE_BATCHES);
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("replay-reader".into())
            .spawn_scoped(scope, move || {
                read_batches(input, max_future_secs, |batch| tx.send(batch).is_ok())
            })?;
        let result = run_engine(&rx, config, out, summary);
        // Unblocks the reader if the engine stopped early (an output error).
        drop(rx);
        let read = reader
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        let engine = result?;
        // A bad line stops the replay where it is: the open window is not closed.
        read?;
        finish(engine, out, summary)
    })
}

/// `replay` on the calling thread alone: the reader thread's code hands each batch straight
/// to the engine's. Same output; what the benchmarks (`agent/benches`) measure, so that they
/// run the code `skewwatch replay` runs.
pub fn replay_on_this_thread(
    input: impl Read,
    config: &Config,
    max_future_secs: f64,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<(), ReplayError> {
    let mut engine = None;
    let mut result = Ok(());
    read_batches(input, max_future_secs, |batch| {
        result = take_batch(&mut engine, &batch, config, out, summary);
        result.is_ok()
    })?;
    result?;
    finish(engine, out, summary)
}

/// Closes the last window at the trace's end (`engine` is `None` for a trace without
/// records).
fn finish(
    engine: Option<Engine>,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<(), ReplayError> {
    if let Some(mut engine) = engine {
        let end = engine.window_end();
        for ev in engine.advance(end) {
            emit(out, &ev, summary)?;
        }
    }
    Ok(())
}

/// The reader thread's work: parses `input` into batches in trace order and hands each to
/// `send`, which returns false when the engine has stopped; a bad line or a read error ends
/// the trace, after the batch of the records before it.
///
/// The trace is read in blocks of [`READ_BYTES`] and parsed where it lies: each block's whole
/// lines go to [`ndjson::for_each_line`] and the part line at its end is moved to the front,
/// to be completed by the next read. A line longer than a block grows the buffer to hold it.
fn read_batches(
    mut input: impl Read,
    max_future_secs: f64,
    send: impl FnMut(Batch) -> bool,
) -> Result<(), ReplayError> {
    let mut reader = Reader {
        latest: None,
        lines: 0,
        batch: Batch::with_capacity(BATCH_RECORDS),
        max_future_secs,
        send,
    };
    let mut buf = vec![0u8; READ_BYTES];
    // Bytes of `buf` read and not yet parsed: a part line, then what the last read added.
    let mut filled = 0;
    let result = loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = match input.read(buf.get_mut(filled..).unwrap_or_default()) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(ReplayError::Io(e)),
        };
        filled += n;
        let data = buf.get(..filled).unwrap_or_default();
        // At the end of the trace its last line needs no newline; before it, only whole
        // lines are parsed. The bytes before this read hold no newline (they are a part line).
        let added = data.get(filled - n..).unwrap_or_default();
        let whole = match (n, added.iter().rposition(|&b| b == b'\n')) {
            (0, _) => filled,
            (_, Some(newline)) => filled - n + newline + 1,
            (_, None) => continue,
        };
        match reader.parse(data.get(..whole).unwrap_or_default()) {
            Ok(true) => {}
            // The engine stopped; its error is the one to report.
            Ok(false) => return Ok(()),
            Err(e) => break Err(e),
        }
        if n == 0 {
            break Ok(());
        }
        buf.copy_within(whole..filled, 0);
        filled -= whole;
    };
    if !reader.batch.is_empty() {
        (reader.send)(reader.batch);
    }
    result
}

/// The reader thread's state between blocks of the trace.
struct Reader<S> {
    /// The latest time the trace has reached (`None` before the first record).
    latest: Option<f64>,
    /// Lines read before the current block.
    lines: u64,
    /// The batch being filled.
    batch: Batch,
    max_future_secs: f64,
    /// Hands a full batch to the engine; false when the engine has stopped.
    send: S,
}

impl<S: FnMut(Batch) -> bool> Reader<S> {
    /// Parses a block of whole lines into batches, sending each one that fills; `Ok(false)`
    /// when the engine has stopped.
    fn parse(&mut self, block: &[u8]) -> Result<bool, ReplayError> {
        let lines = self.lines;
        let flow = ndjson::for_each_line(block, |number, record| {
            let line = lines + number as u64 + 1;
            let record = record.map_err(|r| ReplayError::BadLine {
                line,
                why: r.to_string(),
            });
            match record.and_then(|record| self.take(line, &record)) {
                Ok(true) => ControlFlow::Continue(()),
                Ok(false) => ControlFlow::Break(Ok(false)),
                Err(e) => ControlFlow::Break(Err(e)),
            }
        });
        match flow {
            ControlFlow::Continue(n) => {
                self.lines += n as u64;
                Ok(true)
            }
            ControlFlow::Break(stop) => stop,
        }
    }

    /// Puts one record on line `line` into the batch; `Ok(false)` when the engine has
    /// stopped.
    ///
    /// A batch keeps its readings apart from its requests, so a record with saturation
    /// readings travels in a batch of its own: the engine then applies its readings at its
    /// place in the trace, not at the place of whatever batch it would have shared.
    fn take(&mut self, line: u64, record: &Record<'_>) -> Result<bool, ReplayError> {
        let mut obs = record.observation();
        let ts = trace_time(obs.ts, self.latest, self.max_future_secs)
            .map_err(|why| ReplayError::BadLine { line, why })?;
        self.latest = Some(self.latest.map_or(ts, |l| l.max(ts)));
        obs.ts = Some(ts);
        if record.has_readings() {
            if !self.batch.is_empty() && !self.send() {
                return Ok(false);
            }
            for mut r in record.readings() {
                r.ts = Some(ts);
                self.batch.push_reading(&r);
            }
            if record.stands_for_requests() {
                self.batch.push(&obs);
            }
            return Ok(self.send());
        }
        self.batch.push(&obs);
        Ok(self.batch.len() < BATCH_RECORDS || self.send())
    }

    /// Sends the batch and starts a new one; false when the engine has stopped.
    fn send(&mut self) -> bool {
        let full = std::mem::replace(&mut self.batch, Batch::with_capacity(BATCH_RECORDS));
        (self.send)(full)
    }
}

/// The engine's side: every record in trace order, windows closed on trace time as it
/// reaches them. Returns the engine (`None` for a trace without records) with its last
/// window open.
fn run_engine(
    rx: &mpsc::Receiver<Batch>,
    config: &Config,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<Option<Engine>, ReplayError> {
    let mut engine: Option<Engine> = None;
    for batch in rx.iter() {
        take_batch(&mut engine, &batch, config, out, summary)?;
    }
    Ok(engine)
}

/// The engine's side of one batch, in trace order: a record's readings (a batch of its own),
/// or observations.
fn take_batch(
    engine: &mut Option<Engine>,
    batch: &Batch,
    config: &Config,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<(), ReplayError> {
    if let Some(first) = batch.readings().next() {
        // One record's readings, and its request if it stands for one.
        let ts = first.ts.expect("the reader sets every reading's ts");
        let e = reach(engine, config, ts, out, summary)?;
        batch.readings().for_each(|r| e.read(&r));
        for obs in batch.iter_with_cache_keys() {
            e.record(&obs);
        }
        summary.records += 1;
    } else {
        record_batch(engine, batch, config, out, summary)?;
        summary.records += batch.len() as u64;
    }
    summary.requests = summary.requests.saturating_add(batch.requests());
    Ok(())
}

/// The observations of a batch in order, each after the windows before its time have
/// closed: [`reach`] for each record, with the open window's bounds kept between records
/// (they change only when a window closes).
fn record_batch(
    engine: &mut Option<Engine>,
    batch: &Batch,
    config: &Config,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<(), ReplayError> {
    // A batch without cache keys takes the plain iterator, so a trace without them pays
    // nothing for the cursor that finds them.
    if batch.cache_keyed_len() == 0 {
        record_each(engine, batch.iter(), config, out, summary)
    } else {
        record_each(engine, batch.iter_with_cache_keys(), config, out, summary)
    }
}

/// [`record_batch`] over the batch's records as `records` yields them.
fn record_each<'b>(
    engine: &mut Option<Engine>,
    mut records: impl Iterator<Item = ObservationRef<'b>>,
    config: &Config,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<(), ReplayError> {
    let Some(first) = records.next() else {
        return Ok(());
    };
    let ts = |obs: &ObservationRef<'_>| obs.ts.expect("the reader sets every record's ts");
    let e = reach(engine, config, ts(&first), out, summary)?;
    e.record(&first);
    let (mut start, mut end) = (e.window_start(), e.window_end());
    for obs in records {
        let ts = ts(&obs);
        if ts >= end {
            for ev in e.advance(ts) {
                emit(out, &ev, summary)?;
            }
            (start, end) = (e.window_start(), e.window_end());
        } else if ts < start {
            summary.late += 1;
        }
        e.record(&obs);
    }
    Ok(())
}

/// The engine at trace time `ts`: created at the first record, its windows closed (and their
/// transitions written) up to `ts`; a record older than the open window is counted late and
/// goes into the open window.
fn reach<'e>(
    engine: &'e mut Option<Engine>,
    config: &Config,
    ts: f64,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<&'e mut Engine, ReplayError> {
    let engine = engine.get_or_insert_with(|| Engine::new(config.engine(), ts));
    if ts >= engine.window_end() {
        for ev in engine.advance(ts) {
            emit(out, &ev, summary)?;
        }
    } else if ts < engine.window_start() {
        summary.late += 1;
    }
    Ok(engine)
}

/// A record's trace time: required, and not more than `max_future_secs` after the latest time
/// the trace has reached (`None` before the first record).
///
/// Inlined into the reader's loop, with the messages built out of line: the test is a few
/// instructions, and every record pays it.
#[inline(always)]
fn trace_time(ts: Option<f64>, latest: Option<f64>, max_future_secs: f64) -> Result<f64, String> {
    match (ts, latest) {
        (None, _) => Err(no_trace_time()),
        (Some(ts), Some(latest)) if ts > latest + max_future_secs => {
            Err(too_far_ahead(ts, latest, max_future_secs))
        }
        (Some(ts), _) => Ok(ts),
    }
}

#[cold]
#[inline(never)]
fn no_trace_time() -> String {
    "ts is required in a replay trace".to_owned()
}

#[cold]
#[inline(never)]
fn too_far_ahead(ts: f64, latest: f64, max_future_secs: f64) -> String {
    format!(
        "ts {ts} is {:.0} s after the trace's latest time {latest} (more than \
         --max-future-secs {max_future_secs}); fix the record or raise the bound",
        ts - latest
    )
}

fn emit(out: &mut impl Write, ev: &Evaluation, summary: &mut Summary) -> io::Result<()> {
    summary.windows += 1;
    for t in &ev.transitions {
        serde_json::to_writer(&mut *out, t)?;
        out.write_all(b"\n")?;
        summary.transitions += 1;
    }
    if let Some(w) = &ev.snapshot.whatif {
        write_what_if(out, ev.snapshot.end, w)?;
    }
    Ok(())
}

/// One group's what-if line of one window.
#[derive(Debug, Serialize)]
pub struct WhatIfLine<'a> {
    /// The window's end, unix seconds of trace time.
    pub ts: f64,
    /// The figures.
    pub whatif: WhatIfGroupLine<'a>,
}

/// A group's what-if figures as replay writes them.
#[derive(Debug, Serialize)]
pub struct WhatIfGroupLine<'a> {
    /// The group.
    pub group: &'a str,
    /// Requests with a cache key in the window.
    pub requests: u64,
    /// What happened: the cache's reported misses per request that reported a result
    /// (`null` when none did).
    pub actual: Option<f64>,
    /// The share of keys the sampled simulation held at the window's end.
    pub sample_rate: f64,
    /// Per policy, the observed cache first.
    pub policies: Vec<WhatIfPolicyLine<'a>>,
    /// The busiest shards, busiest first (the first is the hot shard).
    pub shards: Vec<WhatIfShardLine<'a>>,
}

/// One shard's what-if figures as replay writes them.
#[derive(Debug, Serialize)]
pub struct WhatIfShardLine<'a> {
    /// The shard.
    pub shard: &'a str,
    /// Requests with a cache key in the window.
    pub requests: u64,
    /// What happened: the cache's reported misses per request.
    pub actual: f64,
    /// What happened: the share of requests whose backend call failed.
    pub actual_error_ratio: f64,
    /// The shard's backend capacity, configured or learned, when known: its predicted
    /// error ratios come from it.
    pub capacity: Option<ShardCapacity>,
    /// Per policy.
    pub policies: Vec<WhatIfPolicyLine<'a>>,
}

/// One policy's predicted backend calls per request, and its predicted error ratio.
#[derive(Debug, Serialize)]
pub struct WhatIfPolicyLine<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// Simulating every key.
    pub exact: Option<f64>,
    /// Simulating the sample, as the agent does.
    pub sampled: f64,
    /// The sample's stated error bound (about 95%).
    pub error_bound: f64,
    /// The predicted share of requests answered with an error (sampled): from the shard's
    /// capacity where it is known, else the observed failures replayed.
    pub error_ratio: Option<f64>,
}

/// Shards written per group and window.
const WHAT_IF_SHARDS: usize = 8;

/// Writes one line per group of a window's what-if figures.
fn write_what_if(out: &mut impl Write, end: f64, w: &WhatIfWindow) -> io::Result<()> {
    // Only `--what-if` runs the exact simulation beside the sampled one: without it, a trace
    // with cache keys writes what it always wrote.
    for g in w.groups.iter().filter(|g| g.exact.is_some()) {
        serde_json::to_writer(&mut *out, &what_if_line(end, &w.policies, g))?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// A group's line: its figures, paired with the policies' names.
pub fn what_if_line<'a>(end: f64, names: &'a [String], g: &'a GroupWhatIf) -> WhatIfLine<'a> {
    let policies = |sampled: &[PolicyFigures], exact: Option<&Vec<PolicyFigures>>| {
        names
            .iter()
            .zip(sampled)
            .enumerate()
            .map(|(i, (name, f))| WhatIfPolicyLine {
                policy: name,
                exact: exact
                    .and_then(|e| e.get(i))
                    .map(|e| e.backend_calls_per_request),
                sampled: f.backend_calls_per_request,
                error_bound: f.error_bound,
                error_ratio: f.error_ratio,
            })
            .collect()
    };
    let reported = g.real_hits + g.real_misses;
    WhatIfLine {
        ts: end,
        whatif: WhatIfGroupLine {
            group: &g.group,
            requests: g.requests,
            actual: (reported > 0).then(|| g.real_misses as f64 / reported as f64),
            sample_rate: g.sample_rate,
            policies: policies(&g.policies, g.exact.as_ref()),
            shards: g
                .shards
                .iter()
                .take(WHAT_IF_SHARDS)
                .map(|s| WhatIfShardLine {
                    shard: &s.shard,
                    requests: s.requests,
                    actual: s.real_misses as f64 / s.requests.max(1) as f64,
                    actual_error_ratio: s.real_failures as f64 / s.requests.max(1) as f64,
                    capacity: s.capacity,
                    policies: policies(&s.policies, s.exact.as_ref()),
                })
                .collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `run` (a replay entry point) writes and counts for `trace`, on the embedded
    /// configuration.
    fn run_with(
        trace: &str,
        run: impl FnOnce(&[u8], &mut Vec<u8>, &mut Summary) -> Result<(), ReplayError>,
    ) -> Result<(String, Summary), ReplayError> {
        let mut out = Vec::new();
        let mut s = Summary::default();
        run(trace.as_bytes(), &mut out, &mut s)?;
        Ok((String::from_utf8(out).unwrap(), s))
    }

    fn run_str(trace: &str) -> Result<(String, Summary), ReplayError> {
        run_with(trace, |t, out, s| {
            replay(t, &Config::embedded(), 86_400.0, out, s)
        })
    }

    /// A trace of one key asked every second for two minutes, the cache storing it for 30 s.
    fn cached_trace() -> String {
        (0..120)
            .map(|i| {
                let cache = if i % 30 == 0 { "miss" } else { "hit" };
                format!(
                    "{{\"ts\":{},\"group\":\"db\",\"shard\":\"s1\",\"cache_key\":\"user:1\",\"cache\":\"{cache}\"}}\n",
                    1_700_000_000 + i
                )
            })
            .collect()
    }

    #[test]
    fn what_if_writes_each_windows_predictions_exact_and_sampled_beside_what_happened() {
        let mut config = Config::embedded();
        config.startup.whatif.policies[0].ttl_secs = 30.0;
        config.startup.whatif =
            what_if_config(config.startup.whatif, "ttl=1h,serve-stale").unwrap();
        let trace = cached_trace();
        let (out, _) = run_with(&trace, |t, out, s| replay(t, &config, 86_400.0, out, s)).unwrap();
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &serde_json::Value| v.get("whatif").is_some())
            .collect();
        assert_eq!(lines.len(), 12, "{out}");
        // The window holding the second store of the key: the cache missed once in 10
        // requests, as the simulation of it did; an hour's TTL would not have.
        let w = &lines[3]["whatif"];
        assert_eq!(w["actual"], 0.1);
        let policies: Vec<(&str, f64, f64)> = w["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["policy"].as_str().unwrap(),
                    p["exact"].as_f64().unwrap(),
                    p["sampled"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            policies,
            [
                ("observed", 0.1, 0.1),
                ("ttl=1h", 0.0, 0.0),
                ("serve-stale", 0.1, 0.1)
            ]
        );
        assert_eq!(w["shards"][0]["shard"], "s1");
        // Without --what-if, the same trace writes no what-if line.
        let (plain, _) = run_str(&trace).unwrap();
        assert!(!plain.contains("whatif"), "{plain}");
        assert!(what_if_config(Config::embedded().startup.whatif, "ttl=forever").is_err());
    }

    #[test]
    fn a_bad_line_stops_with_its_line_number() {
        let t = "{\"ts\":1,\"group\":\"g\",\"shard\":\"s\"}\n\n{\"ts\":2,\"group\":\"g\"}\n";
        match run_str(t) {
            Err(ReplayError::BadLine { line, .. }) => assert_eq!(line, 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_record_without_ts_is_a_bad_line() {
        let err = run_str("{\"group\":\"g\",\"shard\":\"s\"}\n").unwrap_err();
        assert!(err.to_string().contains("ts is required"), "{err}");
    }

    #[test]
    fn a_record_far_in_the_future_is_a_bad_line() {
        let t = "{\"ts\":100,\"group\":\"g\",\"shard\":\"s\"}\n\
                 {\"ts\":32503680000,\"group\":\"g\",\"shard\":\"s\"}\n\
                 {\"ts\":101,\"group\":\"g\",\"shard\":\"s\"}\n";
        match run_str(t) {
            Err(ReplayError::BadLine { line, why }) => {
                assert_eq!(line, 2);
                assert!(why.contains("max-future-secs"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_line_after_many_batches_leaves_the_open_window_unclosed() {
        // More records than fit a batch, over four windows, then a bad line: the windows the
        // good records passed are closed, the one they were in is not.
        let mut t = String::new();
        for i in 0..(3 * BATCH_RECORDS) {
            let ts = 100.0 + i as f64 * 35.0 / (3 * BATCH_RECORDS) as f64;
            t.push_str(&format!(
                "{{\"ts\":{ts},\"group\":\"g\",\"shard\":\"s\"}}\n"
            ));
        }
        t.push_str("{\"ts\":140,\"group\":\"g\"}\n");
        let mut out = Vec::new();
        let mut s = Summary::default();
        let err = replay(
            t.as_bytes(),
            &Config::embedded(),
            86_400.0,
            &mut out,
            &mut s,
        );
        match err {
            Err(ReplayError::BadLine { line, .. }) => {
                assert_eq!(line, 3 * BATCH_RECORDS as u64 + 1)
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.records, 3 * BATCH_RECORDS as u64);
        // [100,110) [110,120) [120,130) closed; [130,140) was open at the bad line.
        assert_eq!(s.windows, 3);
    }

    /// A trace in which one shard of 16 takes half the traffic after 32 windows of even
    /// load (the detectors' warm-up is 30): enough for an alert, and longer than one read of
    /// the reader thread.
    fn hot_trace() -> String {
        let mut t = String::new();
        for i in 0..8_000u32 {
            let ts = 1_700_000_000.0 + f64::from(i) * 0.05;
            let shard = if i >= 6_400 && i % 2 == 0 { 0 } else { i % 16 };
            t.push_str(&format!(
                "{{\"ts\":{ts:.2},\"group\":\"g\",\"shard\":\"s{shard}\",\"key\":\"k{}\",\"latency_ms\":{}.5}}\n",
                i % 97,
                i % 40
            ));
        }
        assert!(t.len() > READ_BYTES);
        t
    }

    /// Hands out its bytes 1 to 7 at a time, so lines arrive cut at every place.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.step = self.step % 7 + 1;
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_trace_read_in_small_pieces_replays_the_same() {
        let trace = hot_trace();
        let (whole, s) = run_str(&trace).unwrap();
        assert!(s.transitions > 0, "the trace should raise an alert");
        let mut out = Vec::new();
        let mut t = Summary::default();
        let input = Trickle {
            data: trace.as_bytes(),
            step: 0,
        };
        replay(input, &Config::embedded(), 86_400.0, &mut out, &mut t).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), whole);
        assert_eq!(
            (t.records, t.windows, t.transitions),
            (s.records, s.windows, s.transitions)
        );
    }

    #[test]
    fn replay_on_one_thread_gives_the_same_output_as_on_two() {
        // A trace with an alert and a readings record, whose batch goes its own way.
        let mut trace = hot_trace();
        trace.push_str("{\"ts\":1700000400.1,\"group\":\"g\",\"shard\":\"s3\",\"inflight\":7}\n");
        let (two, s) = run_str(&trace).unwrap();
        assert!(s.transitions > 0, "the trace should raise an alert");
        let (one, s1) = run_with(&trace, |t, out, s| {
            replay_on_this_thread(t, &Config::embedded(), 86_400.0, out, s)
        })
        .unwrap();
        assert_eq!(one, two);
        assert_eq!(format!("{s1:?}"), format!("{s:?}"));
    }

    #[test]
    fn a_line_longer_than_a_read_is_read_whole() {
        let padding = "x".repeat(3 * READ_BYTES);
        let t = format!(
            "{{\"ts\":1,\"group\":\"g\",\"shard\":\"s\"}}\n\
             {{\"ts\":2,\"group\":\"g\",\"shard\":\"s\",\"note\":\"{padding}\"}}\r\n\
             {{\"ts\":3,\"group\":\"g\",\"shard\":\"s\"}}"
        );
        let (_, s) = run_str(&t).unwrap();
        assert_eq!(s.records, 3);
        let t = format!("{t}\n\n{{\"ts\":4,\"group\":\"g\",\"shard\":\"s\",\"note\":\"{padding}\"");
        match run_str(&t) {
            Err(ReplayError::BadLine { line, why }) => {
                assert_eq!(line, 5);
                assert!(why.contains("malformed"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_line_with_bytes_that_are_not_utf8_is_a_bad_line() {
        let t = b"{\"ts\":1,\"group\":\"g\",\"shard\":\"s\"}\n{\"ts\":2,\"group\":\"g\xff\",\"shard\":\"s\"}\n";
        let mut s = Summary::default();
        match replay(
            &t[..],
            &Config::embedded(),
            86_400.0,
            &mut Vec::new(),
            &mut s,
        ) {
            Err(ReplayError::BadLine { line, .. }) => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.records, 1);
    }

    #[test]
    fn windows_follow_trace_time() {
        let t = "{\"ts\":100,\"group\":\"g\",\"shard\":\"s\"}\n{\"ts\":135,\"group\":\"g\",\"shard\":\"s\"}\n";
        let (_, s) = run_str(t).unwrap();
        assert_eq!(s.records, 2);
        // [100,110) [110,120) [120,130) closed on reaching 135, then [130,140) at the end.
        assert_eq!(s.windows, 4);
    }
}
