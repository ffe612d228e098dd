//! The do-it-yourself baseline: the PromQL alerting rules an SRE would write by hand
//! ([`RULES`], shipped as `tests/src/bench/diy.rules.yml`), evaluated by a real Prometheus over
//! the traffic of the benchmark's own trials, so the tables can set skewwatch's detectors beside
//! them.
//!
//! The flow, per run: every trial that needs it feeds its drawn records to a [`Sampler`] as well
//! as to the engine; the sampler keeps per-shard cumulative counters (requests by outcome class,
//! a classic latency histogram) and writes them at every window end (the scrape interval is the
//! window length) as OpenMetrics text, one file per trial. [`evaluate`] joins the files, backfills
//! them with `promtool tsdb create-blocks-from openmetrics`, starts `prometheus` on a free
//! loopback port over those blocks, asks it for each rule's expression with
//! `/api/v1/query_range` at the rule evaluation interval ([`EVAL_SECS`]), and applies the
//! rule's `for:` to the answer exactly as Prometheus' rule manager does ([`firing_times`]).
//! Prometheus' engine computes every value; only the pending-to-firing bookkeeping, which the
//! rule manager does outside the engine, is done here.
//!
//! Trials of one condition share the TSDB's time range and are told apart by a `trial` label;
//! each condition gets its own stretch of time ([`stride_secs`]), so one query reads one
//! condition's blocks.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use skewwatch::client;
use skewwatch_detectors::observation::{ObservationRef, Outcome};

use crate::agent::TempDir;
use crate::bench::families::Target;
use crate::bench::traffic::{GROUP, Recorder};
use crate::prometheus::form_encode;
use crate::tools;

/// The rule file, as committed (a test holds it equal to [`rules_yaml`]).
pub const RULES_FILE: &str = include_str!("diy.rules.yml");
/// Where [`RULES_FILE`] lives in the repository.
pub const RULES_PATH: &str = "tests/src/bench/diy.rules.yml";
/// The rule group's evaluation interval, seconds: Prometheus' usual 15 s
/// (`evaluation_interval` of the example configuration), whatever the window length.
pub const EVAL_SECS: f64 = 15.0;
/// The `for:` of every rule, seconds.
pub const FOR_SECS: f64 = 120.0;
/// The range of every `rate()`, seconds (`[1m]`).
pub const RANGE_SECS: f64 = 60.0;
/// Upper bounds of the latency histogram's buckets, seconds (`+Inf` follows): a client
/// library's layout for a store answering in about a millisecond, 11 buckets from 1 ms to 2.5 s.
pub const BUCKETS_SECS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// The TSDB's block length (promtool's and Prometheus' default): conditions are laid out on
/// multiples of it.
const BLOCK_SECS: f64 = 7200.0;
/// Requests counter (OpenMetrics family `app_requests`, label `outcome` = `ok` | `error`).
const REQUESTS: &str = "app_requests";
/// Latency histogram (OpenMetrics family; only its `_bucket` series are written).
const LATENCY: &str = "app_request_duration_seconds";

/// Which series a rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// `app_requests_total{outcome}`.
    Requests,
    /// `app_request_duration_seconds_bucket{le}`.
    Latency,
}

/// One hand-written alerting rule.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Alert name.
    pub alert: &'static str,
    /// The skewwatch alert it stands beside in the tables.
    pub beside: &'static str,
    /// What it names: a shard (`shard` label) or the group.
    pub target: Target,
    /// The series it reads, so a trial samples only what is needed.
    pub reads: Reads,
    /// The PromQL expression, as in the rule file.
    pub expr: &'static str,
    /// One line for the rule file's `summary`.
    pub summary: &'static str,
}

/// The rules, in table order. `trial` separates the benchmark's trials; in production the same
/// place is taken by the label that separates deployments (cluster, namespace).
pub const RULES: &[Rule] = &[
    Rule {
        alert: "DiyShardErrorRatio",
        beside: "ShardFailing",
        target: Target::Shard,
        reads: Reads::Requests,
        expr: "sum by (trial, group, shard) (rate(app_requests_total{outcome=\"error\"}[1m]))
  / sum by (trial, group, shard) (rate(app_requests_total[1m]))
> 0.2",
        summary: "Shard {{ $labels.shard }} of {{ $labels.group }} fails more than 20% of its requests.",
    },
    Rule {
        alert: "DiyHotShard",
        beside: "HotShard",
        target: Target::Shard,
        reads: Reads::Requests,
        expr: "(
    sum by (trial, group, shard) (rate(app_requests_total[1m]))
  / on (trial, group) group_left
    sum by (trial, group) (rate(app_requests_total[1m]))
)
> on (trial, group) group_left
  2 / count by (trial, group) (sum by (trial, group, shard) (rate(app_requests_total[1m])))",
        summary: "Shard {{ $labels.shard }} of {{ $labels.group }} takes more than twice its fair share of requests.",
    },
    Rule {
        alert: "DiyLatencySkew",
        beside: "LatencySkew",
        target: Target::Shard,
        reads: Reads::Latency,
        expr: "histogram_quantile(0.99, sum by (trial, group, shard, le) (rate(app_request_duration_seconds_bucket[1m])))
> on (trial, group) group_left
3 * histogram_quantile(0.99, sum by (trial, group, le) (rate(app_request_duration_seconds_bucket[1m])))",
        summary: "Shard {{ $labels.shard }} of {{ $labels.group }} has a p99 latency over 3 times the p99 of its group.",
    },
    Rule {
        alert: "DiyErrorSurge",
        beside: "ErrorSurge",
        target: Target::Group,
        reads: Reads::Requests,
        expr: "sum by (trial, group) (rate(app_requests_total{outcome=\"error\"}[1m]))
  / sum by (trial, group) (rate(app_requests_total[1m]))
> 0.05",
        summary: "{{ $labels.group }} fails more than 5% of its requests.",
    },
];

/// The rule beside skewwatch's `detector`, if there is one.
pub fn rule_beside(detector: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.beside == detector)
}

/// The rule file for [`RULES`]: what `tests/src/bench/diy.rules.yml` holds.
pub fn rules_yaml() -> String {
    let mut out = String::from(
        "# The alerting rules an SRE would write by hand for a sharded store, without skewwatch:\n\
         # the do-it-yourself baseline of the detection benchmark (docs/detectors.md, \"Detection\n\
         # benchmark\"). They read a client library's metrics: app_requests_total{group, shard,\n\
         # outcome=\"ok\"|\"error\"} and the histogram app_request_duration_seconds{group, shard}.\n\
         # `trial` separates the benchmark's trials; in production the label that separates\n\
         # deployments (cluster, namespace) takes its place.\n\
         # Generated by tests/src/bench/diy.rs (`scripts/detection-bench.sh --print-diy-rules`).\n\
         groups:\n  - name: diy-sharded-store\n",
    );
    let _ = writeln!(out, "    interval: {EVAL_SECS}s\n    rules:");
    for r in RULES {
        let _ = writeln!(out, "      - alert: {}\n        expr: |", r.alert);
        for line in r.expr.lines() {
            let _ = writeln!(out, "          {line}");
        }
        let _ = writeln!(
            out,
            "        for: {}m\n        labels:\n          severity: page\n        annotations:\n          summary: '{}'",
            FOR_SECS / 60.0,
            r.summary
        );
    }
    out
}

/// `promtool` and `prometheus`, as found on PATH.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `promtool`, for the backfill.
    pub promtool: PathBuf,
    /// `prometheus`, to evaluate the expressions.
    pub prometheus: PathBuf,
}

impl Tools {
    /// Both programs from PATH, or which is missing.
    pub fn from_path() -> Result<Tools, Error> {
        let find = |name: &str| {
            let path = tools::env("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .ok_or_else(|| Error::Missing(name.to_owned()))
        };
        Ok(Tools {
            promtool: find("promtool")?,
            prometheus: find("prometheus")?,
        })
    }
}

/// Why the baseline could not be measured.
#[derive(Debug)]
pub enum Error {
    /// A program is not on PATH: install Prometheus (Debian: `apt-get install prometheus`).
    Missing(String),
    /// A file of the run could not be written or read.
    Io(String, std::io::Error),
    /// `promtool` refused the samples; its output follows.
    Backfill(String),
    /// Prometheus did not start over the blocks; its log follows.
    Start(String),
    /// A query failed; Prometheus' answer follows.
    Query(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Missing(p) => write!(
                f,
                "`{p}` is not on PATH: the DIY baseline needs promtool and prometheus (Debian: apt-get install prometheus)"
            ),
            Error::Io(what, e) => write!(f, "{what}: {e}"),
            Error::Backfill(out) => write!(f, "promtool refused the samples:\n{out}"),
            Error::Start(log) => write!(f, "prometheus did not start:\n{log}"),
            Error::Query(why) => write!(f, "a query failed: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// The files of one run: a trial's samples each, until [`evaluate`] joins them.
pub struct Store {
    dir: TempDir,
}

impl Store {
    /// A fresh temporary directory, removed when the store is dropped.
    pub fn new() -> Store {
        Store {
            dir: TempDir::new("diy"),
        }
    }

    /// The file of trial `trial`.
    pub fn part(&self, trial: usize) -> PathBuf {
        self.dir.0.join(format!("trial-{trial}.om"))
    }
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

/// The seconds between the starts of two conditions' stretches of TSDB time: whole blocks, at
/// least the longest stretch a condition samples (`longest_secs`).
pub fn stride_secs(longest_secs: f64) -> f64 {
    (longest_secs / BLOCK_SECS).ceil().max(1.0) * BLOCK_SECS
}

/// One shard's cumulative counts.
#[derive(Debug, Clone, Default)]
struct Counts {
    ok: u64,
    error: u64,
    /// Per bucket (not cumulative), the last one `+Inf`.
    buckets: [u64; BUCKETS_SECS.len() + 1],
}

/// Counts one trial's records per shard and writes them, as a scraper would read them, at
/// every window end.
#[derive(Debug)]
pub struct Sampler {
    offset: f64,
    requests: bool,
    latency: bool,
    index: HashMap<String, usize>,
    labels: Vec<String>,
    counts: Vec<Counts>,
    out: BufWriter<File>,
    path: PathBuf,
    failed: Option<std::io::Error>,
    samples: u64,
}

impl Sampler {
    /// A sampler of trial `trial` over `shards`, writing to `path` at trial time plus
    /// `offset`, the series `rules` read.
    pub fn new(
        path: PathBuf,
        trial: usize,
        offset: f64,
        shards: &[String],
        rules: &[&Rule],
    ) -> Result<Sampler, Error> {
        let file = File::create(&path).map_err(|e| Error::Io(path.display().to_string(), e))?;
        Ok(Sampler {
            offset,
            requests: rules.iter().any(|r| r.reads == Reads::Requests),
            latency: rules.iter().any(|r| r.reads == Reads::Latency),
            index: shards
                .iter()
                .enumerate()
                .map(|(i, s)| (s.clone(), i))
                .collect(),
            labels: shards
                .iter()
                .map(|s| format!("trial=\"{trial}\",group=\"{GROUP}\",shard=\"{s}\""))
                .collect(),
            counts: vec![Counts::default(); shards.len()],
            out: BufWriter::with_capacity(1 << 16, file),
            path,
            failed: None,
            samples: 0,
        })
    }

    /// Writes every series' value at trial time `t` (a window end).
    pub fn sample(&mut self, t: f64) {
        if self.failed.is_some() {
            return;
        }
        let ts = t + self.offset;
        let mut write = || -> std::io::Result<u64> {
            let mut n = 0;
            for (labels, c) in self.labels.iter().zip(&self.counts) {
                if self.requests {
                    writeln!(
                        self.out,
                        "{REQUESTS}_total{{{labels},outcome=\"ok\"}} {} {ts}",
                        c.ok
                    )?;
                    writeln!(
                        self.out,
                        "{REQUESTS}_total{{{labels},outcome=\"error\"}} {} {ts}",
                        c.error
                    )?;
                    n += 2;
                }
                if self.latency {
                    let mut cumulative = 0;
                    for (i, b) in c.buckets.iter().enumerate() {
                        cumulative += b;
                        match BUCKETS_SECS.get(i) {
                            Some(le) => writeln!(
                                self.out,
                                "{LATENCY}_bucket{{{labels},le=\"{le}\"}} {cumulative} {ts}"
                            )?,
                            None => writeln!(
                                self.out,
                                "{LATENCY}_bucket{{{labels},le=\"+Inf\"}} {cumulative} {ts}"
                            )?,
                        }
                    }
                    n += c.buckets.len() as u64;
                }
            }
            Ok(n)
        };
        match write() {
            Ok(n) => self.samples += n,
            Err(e) => self.failed = Some(e),
        }
    }

    /// Flushes the file; the number of samples written.
    pub fn finish(mut self) -> Result<u64, Error> {
        let what = || self.path.display().to_string();
        if let Some(e) = self.failed.take() {
            return Err(Error::Io(what(), e));
        }
        self.out.flush().map_err(|e| Error::Io(what(), e))?;
        Ok(self.samples)
    }
}

impl Recorder for Sampler {
    fn record(&mut self, obs: &ObservationRef<'_>) {
        let Some(&i) = self.index.get(obs.shard) else {
            return;
        };
        let c = &mut self.counts[i];
        match obs.outcome {
            Outcome::Ok => c.ok += obs.count,
            _ => c.error += obs.count,
        }
        if let Some(ms) = obs.latency_ms {
            let secs = ms / 1000.0;
            let b = BUCKETS_SECS
                .iter()
                .position(|&le| secs <= le)
                .unwrap_or(BUCKETS_SECS.len());
            c.buckets[b] += obs.count;
        }
    }
}

/// What to evaluate for one condition.
#[derive(Debug, Clone)]
pub struct Query {
    /// The rules to evaluate.
    pub rules: Vec<&'static Rule>,
    /// The condition's TSDB offset (added to trial time).
    pub offset: f64,
    /// First and last evaluation, trial time.
    pub from: f64,
    /// Last evaluation, trial time.
    pub to: f64,
}

/// An alert's pending-to-firing transition, in trial time.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    /// The rule's alert name.
    pub alert: &'static str,
    /// The `trial` label.
    pub trial: usize,
    /// The `shard` label, for shard rules.
    pub shard: Option<String>,
    /// Evaluation time of the transition, trial time.
    pub ts: f64,
}

/// What the backfill and the queries cost, for the progress line.
#[derive(Debug, Clone, Default)]
pub struct Cost {
    /// Seconds promtool took.
    pub backfill_secs: f64,
    /// Seconds the queries took, Prometheus' start included.
    pub query_secs: f64,
    /// Bytes of OpenMetrics text.
    pub bytes: u64,
}

/// Joins the trials' files (`trials`), backfills them, starts Prometheus over the blocks and
/// evaluates every query; per query, the firing transitions. Prometheus is stopped on return,
/// error or not.
pub fn evaluate(
    tools: &Tools,
    store: &Store,
    trials: &[usize],
    queries: &[Query],
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Vec<Firing>>, Cost), Error> {
    let mut cost = Cost::default();
    let input = store.dir.0.join("samples.om");
    cost.bytes = join(store, trials, &input)?;
    let blocks = store.dir.0.join("tsdb");
    progress(&format!(
        "DIY: backfilling {:.0} MB of OpenMetrics with promtool",
        cost.bytes as f64 / 1e6
    ));
    let started = Instant::now();
    let out = Command::new(&tools.promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics", "--quiet"])
        .arg(&input)
        .arg(&blocks)
        .output()
        .map_err(|e| Error::Io(tools.promtool.display().to_string(), e))?;
    if !out.status.success() {
        return Err(Error::Backfill(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    cost.backfill_secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&input);
    let started = Instant::now();
    let server = Server::start(&tools.prometheus, &store.dir.0, &blocks)?;
    progress(&format!(
        "DIY: backfill took {:.1} s; evaluating {} queries on Prometheus at {}",
        cost.backfill_secs,
        queries.iter().map(|q| q.rules.len()).sum::<usize>(),
        server.addr
    ));
    let mut out = Vec::with_capacity(queries.len());
    for q in queries {
        let mut firings = Vec::new();
        for rule in &q.rules {
            for (labels, ts) in server.query_range(rule.expr, q)? {
                let trial = labels
                    .get("trial")
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| Error::Query(format!("{}: no trial label", rule.alert)))?;
                let shard = labels.get("shard").cloned();
                firings.extend(firing_times(&ts, EVAL_SECS, FOR_SECS).into_iter().map(|t| {
                    Firing {
                        alert: rule.alert,
                        trial,
                        shard: shard.clone(),
                        ts: t - q.offset,
                    }
                }));
            }
        }
        out.push(firings);
    }
    cost.query_secs = started.elapsed().as_secs_f64();
    drop(server);
    Ok((out, cost))
}

/// Writes the OpenMetrics header, every trial's samples and `# EOF` into `to`, removing the
/// parts; the bytes written.
fn join(store: &Store, trials: &[usize], to: &Path) -> Result<u64, Error> {
    let io = |e| Error::Io(to.display().to_string(), e);
    let mut out = BufWriter::new(File::create(to).map_err(io)?);
    let header = format!(
        "# TYPE {REQUESTS} counter\n# HELP {REQUESTS} Requests by outcome class (ok, error).\n\
         # TYPE {LATENCY} histogram\n# HELP {LATENCY} Request latency.\n"
    );
    out.write_all(header.as_bytes()).map_err(io)?;
    let mut bytes = header.len() as u64;
    for &t in trials {
        let part = store.part(t);
        let Ok(mut f) = File::open(&part) else {
            continue;
        };
        bytes += std::io::copy(&mut f, &mut out).map_err(io)?;
        let _ = std::fs::remove_file(&part);
    }
    out.write_all(b"# EOF\n").map_err(io)?;
    out.flush().map_err(io)?;
    Ok(bytes + 6)
}

/// The evaluation times at which an alert goes from pending to firing, given the evaluation
/// times at which its expression returned the series (`present`, ascending, on a grid of
/// `step`), as Prometheus' rule manager decides: the alert becomes pending (active since that
/// evaluation) at the first evaluation that returns it, fires at the first evaluation at least
/// `hold` later if every evaluation between returned it, and is forgotten at an evaluation
/// that does not (a later return starts a new pending alert).
pub fn firing_times(present: &[f64], step: f64, hold: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut active_since: Option<f64> = None;
    let mut firing = false;
    let mut last = f64::NEG_INFINITY;
    for &t in present {
        // A missing evaluation between `last` and `t` resolved the alert.
        if t - last > step * 1.5 {
            active_since = None;
            firing = false;
        }
        let since = *active_since.get_or_insert(t);
        if !firing && t - since >= hold {
            firing = true;
            out.push(t);
        }
        last = t;
    }
    out
}

/// One series a range query returned: its labels and the evaluation times it had a value at.
type Returned = (BTreeMap<String, String>, Vec<f64>);

/// A Prometheus over the backfilled blocks, stopped when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

/// A query may read a thousand shards' histograms over minutes of evaluations.
const QUERY_TIMEOUT: Duration = Duration::from_secs(600);

impl Server {
    /// Starts `binary` on a free loopback port over the TSDB at `tsdb`, its configuration in
    /// `dir`; waits until it is ready. Retention is far longer than the blocks' span, which is
    /// measured from the newest block, so no block is deleted.
    fn start(binary: &Path, dir: &Path, tsdb: &Path) -> Result<Server, Error> {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!("global:\n  evaluation_interval: {EVAL_SECS}s\n"),
        )
        .map_err(|e| Error::Io(config.display().to_string(), e))?;
        let mut last_log = String::new();
        // Another process may take the probed port before Prometheus binds it: retry.
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| Error::Io("a free loopback port".to_owned(), e))?
                .port();
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let mut child = Command::new(binary)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", tsdb.display()))
                .arg("--storage.tsdb.retention.time=10y")
                .arg(format!("--web.listen-address={addr}"))
                .arg(format!("--query.timeout={}s", QUERY_TIMEOUT.as_secs()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| Error::Io(binary.display().to_string(), e))?;
            let log = Arc::new(Mutex::new(Vec::new()));
            if let Some(stderr) = child.stderr.take() {
                let sink = log.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                        sink.lock().expect("log lock").push(line);
                    }
                });
            }
            let mut server = Server { child, addr, log };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                // Dropping `server` reaps the process; try another port.
                Err((true, log)) => last_log = log,
                Err((false, log)) => return Err(Error::Start(log)),
            }
        }
        Err(Error::Start(last_log))
    }

    /// Polls `/-/ready` for up to two minutes (opening many blocks takes a while); on failure,
    /// whether the process exited and its log.
    fn wait_ready(&mut self) -> Result<(), (bool, String)> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = client::get(self.addr, "/-/ready", Duration::from_secs(2))
                && r.status == 200
            {
                return Ok(());
            }
            let exited = self.child.try_wait().ok().flatten().is_some();
            if exited || Instant::now() > deadline {
                return Err((exited, self.log.lock().expect("log lock").join("\n")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Evaluates `expr` at every evaluation time of `q`; per result series, its labels and the
    /// evaluation times (TSDB time) at which it had a value.
    fn query_range(&self, expr: &str, q: &Query) -> Result<Vec<Returned>, Error> {
        let body = format!(
            "query={}&start={}&end={}&step={EVAL_SECS}",
            form_encode(expr),
            q.from + q.offset,
            q.to + q.offset
        );
        let r = client::request(
            self.addr,
            "POST",
            "/api/v1/query_range",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            body.as_bytes(),
            QUERY_TIMEOUT,
        )
        .map_err(|e| Error::Query(format!("{expr}: {e}")))?;
        let v: Value = serde_json::from_slice(&r.body)
            .map_err(|e| Error::Query(format!("{expr}: {e}: {}", r.text())))?;
        if v["status"] != "success" {
            return Err(Error::Query(format!("{expr}: {v}")));
        }
        let series = v["data"]["result"].as_array().cloned().unwrap_or_default();
        Ok(series
            .into_iter()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect();
                let ts = s["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p[0].as_f64())
                    .collect();
                (labels, ts)
            })
            .collect())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        tools::stop_child(&mut self.child, Some("TERM"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluation times every 15 s from `a` to `b` inclusive.
    fn grid(a: f64, b: f64) -> Vec<f64> {
        (0..)
            .map(|k| a + f64::from(k) * EVAL_SECS)
            .take_while(|&t| t <= b)
            .collect()
    }

    #[test]
    fn an_alert_fires_at_the_evaluation_two_minutes_after_it_became_pending() {
        assert_eq!(firing_times(&grid(0.0, 300.0), 15.0, 120.0), vec![120.0]);
        // Eight evaluations in a row (105 s) are not enough.
        assert!(firing_times(&grid(0.0, 105.0), 15.0, 120.0).is_empty());
        // A missing evaluation restarts the pending period.
        let mut gap = grid(0.0, 90.0);
        gap.extend(grid(120.0, 240.0));
        assert_eq!(firing_times(&gap, 15.0, 120.0), vec![240.0]);
        // Firing, resolved, firing again: two transitions.
        let mut twice = grid(0.0, 150.0);
        twice.extend(grid(300.0, 420.0));
        assert_eq!(firing_times(&twice, 15.0, 120.0), vec![120.0, 420.0]);
        assert_eq!(firing_times(&[30.0], 15.0, 0.0), vec![30.0]);
    }

    #[test]
    fn the_rule_file_is_the_rules_the_benchmark_evaluates() {
        assert_eq!(
            RULES_FILE,
            rules_yaml(),
            "{RULES_PATH} is stale: write `scripts/detection-bench.sh --print-diy-rules` into it"
        );
    }

    #[test]
    fn a_sampler_writes_cumulative_counters_and_buckets() {
        let store = Store::new();
        let shards = vec!["shard-0000".to_owned(), "shard-0001".to_owned()];
        let rules: Vec<&Rule> = RULES.iter().collect();
        let mut s = Sampler::new(store.part(3), 3, 7200.0, &shards, &rules).unwrap();
        let mut obs = ObservationRef::new(GROUP, "shard-0001");
        obs.count = 5;
        obs.latency_ms = Some(3.0);
        s.record(&obs);
        obs.outcome = Outcome::Unavailable;
        obs.latency_ms = Some(5000.0);
        s.record(&obs);
        s.sample(10.0);
        s.record(&obs);
        s.sample(20.0);
        assert_eq!(s.finish().unwrap(), 2 * 2 * 14);
        let text = std::fs::read_to_string(store.part(3)).unwrap();
        let line = |series: &str, ts: &str| {
            text.lines()
                .find(|l| l.starts_with(series) && l.ends_with(ts))
                .unwrap_or_else(|| panic!("{series} at {ts}:\n{text}"))
                .split(' ')
                .nth(1)
                .unwrap()
                .to_owned()
        };
        let l = r#"trial="3",group="bench-db",shard="shard-0001""#;
        assert_eq!(
            line(
                &format!("app_requests_total{{{l},outcome=\"ok\"}}"),
                " 7210"
            ),
            "5"
        );
        assert_eq!(
            line(
                &format!("app_requests_total{{{l},outcome=\"error\"}}"),
                " 7220"
            ),
            "10"
        );
        let b = |le: &str| format!("app_request_duration_seconds_bucket{{{l},le=\"{le}\"}}");
        assert_eq!(line(&b("0.0025"), " 7210"), "0");
        assert_eq!(line(&b("0.005"), " 7210"), "5");
        assert_eq!(line(&b("2.5"), " 7220"), "5");
        assert_eq!(line(&b("+Inf"), " 7220"), "15");
    }
}
