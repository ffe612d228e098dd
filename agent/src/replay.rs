//! `skewwatch replay`: the same windows, detectors and alert state machine as the live agent,
//! driven by a recorded NDJSON trace in *trace time*, as fast as the machine allows.
//!
//! Output is one JSON line per alert transition on stdout, and a one-line summary on stderr.
//! Deterministic: the same trace and configuration give byte-identical output.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use skewwatch_detectors::engine::{Engine, Evaluation};

use crate::config::Config;
use crate::ingest::ndjson;

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
}

/// Exit code for a bad trace line.
const BAD_LINE: u8 = 2;

/// Counts for the summary line.
#[derive(Debug, Default)]
struct Summary {
    records: u64,
    requests: u64,
    late: u64,
    windows: u64,
    transitions: u64,
}

/// Runs the replay; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::embedded(),
    };
    let name = args.trace.display().to_string();
    let input: Box<dyn BufRead> = if name == "-" {
        Box::new(BufReader::with_capacity(1 << 20, io::stdin().lock()))
    } else {
        let f = File::open(&args.trace).with_context(|| format!("opening trace {name}"))?;
        Box::new(BufReader::with_capacity(1 << 20, f))
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

/// Replays every line of `input`, writing transitions to `out`.
fn replay(
    mut input: impl BufRead,
    config: &Config,
    max_future_secs: f64,
    out: &mut impl Write,
    summary: &mut Summary,
) -> Result<(), ReplayError> {
    let mut engine: Option<Engine> = None;
    // The latest time the trace has reached.
    let mut latest = f64::NEG_INFINITY;
    let mut buf = Vec::with_capacity(512);
    let mut line_no = 0u64;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_no += 1;
        let line = trim(&buf);
        if line.is_empty() {
            continue;
        }
        let record = ndjson::parse_record(line).map_err(|r| ReplayError::BadLine {
            line: line_no,
            why: r.to_string(),
        })?;
        let obs = record.observation();
        let ts = trace_time(obs.ts, engine.is_some().then_some(latest), max_future_secs)
            .map_err(|why| ReplayError::BadLine { line: line_no, why })?;
        latest = latest.max(ts);
        let engine = engine.get_or_insert_with(|| Engine::new(config.engine.clone(), ts));
        if ts >= engine.window_end() {
            for ev in engine.advance(ts) {
                emit(out, &ev, summary)?;
            }
        } else if ts < engine.window_start() {
            // Out of order beyond the current window: counted in the current one.
            summary.late += 1;
        }
        if record.has_readings() {
            record.readings().for_each(|r| engine.read(&r));
        }
        if record.stands_for_requests() {
            engine.record(&obs);
        }
        summary.records += 1;
        summary.requests = summary.requests.saturating_add(obs.count);
    }
    if let Some(engine) = &mut engine {
        let end = engine.window_end();
        for ev in engine.advance(end) {
            emit(out, &ev, summary)?;
        }
    }
    Ok(())
}

/// A record's trace time: required, and not more than `max_future_secs` after the latest time
/// the trace has reached (`None` before the first record).
fn trace_time(ts: Option<f64>, latest: Option<f64>, max_future_secs: f64) -> Result<f64, String> {
    let ts = ts.ok_or_else(|| "ts is required in a replay trace".to_owned())?;
    match latest {
        Some(latest) if ts > latest + max_future_secs => Err(format!(
            "ts {ts} is {:.0} s after the trace's latest time {latest} (more than \
             --max-future-secs {max_future_secs}); fix the record or raise the bound",
            ts - latest
        )),
        _ => Ok(ts),
    }
}

fn emit(out: &mut impl Write, ev: &Evaluation, summary: &mut Summary) -> io::Result<()> {
    summary.windows += 1;
    for t in &ev.transitions {
        serde_json::to_writer(&mut *out, t)?;
        out.write_all(b"\n")?;
        summary.transitions += 1;
    }
    Ok(())
}

fn trim(line: &[u8]) -> &[u8] {
    let mut l = line;
    while let [rest @ .., b'\n' | b'\r' | b' ' | b'\t'] = l {
        l = rest;
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_str(trace: &str) -> Result<(String, Summary), ReplayError> {
        let mut out = Vec::new();
        let mut s = Summary::default();
        replay(
            trace.as_bytes(),
            &Config::embedded(),
            86_400.0,
            &mut out,
            &mut s,
        )?;
        Ok((String::from_utf8(out).unwrap(), s))
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
    fn windows_follow_trace_time() {
        let t = "{\"ts\":100,\"group\":\"g\",\"shard\":\"s\"}\n{\"ts\":135,\"group\":\"g\",\"shard\":\"s\"}\n";
        let (_, s) = run_str(t).unwrap();
        assert_eq!(s.records, 2);
        // [100,110) [110,120) [120,130) closed on reaching 135, then [130,140) at the end.
        assert_eq!(s.windows, 4);
    }
}
