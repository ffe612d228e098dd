//! The fleet input: the sidecars' cumulative series, summed by a PromQL-compatible API
//! (Prometheus, VictoriaMetrics; Thanos and Mimir by the same API), read once a window and
//! fed to the same engine and detectors as any other input (docs/fleet.md, ADR 007).
//!
//! - **Each window**, [`query::growth_expr`] per family of series asks what the sidecars'
//!   counters grew by since the previous query, [`fleet::query::query_lead_secs`] before the
//!   window closes; [`rebuild`] turns each shard's sums into observations, handed to the
//!   pipeline like any batch, and the [`Gate`] tells the pipeline the window is complete.
//! - **A window without its answer is not judged.** A failed, partial, late or oversized
//!   answer feeds nothing and leaves the gate shut: the pipeline then skips the window
//!   instead of judging an empty one ([`crate::pipeline`]), so missing data never reads as a
//!   silent fleet. The growth of a skipped window is lost, never doubled into the next.
//! - **No warm-up wait.** Before the pipeline starts, [`backfill`] reads the same sums for the
//!   last `fleet.backfill_secs` (one `query_range` per family), so the detectors' baselines
//!   come from the TSDB's history rather than from the first minutes after a start.
//!
//! Failures are counted in `skewwatch_fleet_query_failures_total{reason}` and logged once per
//! run of failures; `/readyz` answers 503 after [`FAILING_WINDOWS`] windows in a row without
//! an answer, and says what the backfill learned.
//!
//! [`fleet::query::query_lead_secs`]: config::FleetConfig::lead

pub mod config;
pub mod query;
pub mod rebuild;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use skewwatch_detectors::engine::align;
use skewwatch_detectors::observation::Batch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use config::FleetConfig;
use query::{Api, Family, QueryError, growth_expr};
use rebuild::{Growth, Skip};

use crate::clock::Clock;
use crate::ingest::IngestQueue;
use crate::stage::Stage;
use crate::telemetry::{IngestMetrics, Source, SourceMetrics};

/// Windows in a row without an answer after which `/readyz` answers 503.
pub const FAILING_WINDOWS: u32 = 3;

/// Most points one backfill answer may hold per series: Prometheus refuses more than 11,000.
const MAX_BACKFILL_WINDOWS: f64 = 10_000.0;

/// Time one backfill query may take (the six run at once): an hour of history is a heavier
/// query than one window's, and the start waits for it at most this long.
const BACKFILL_TIMEOUT: Duration = Duration::from_secs(60);

/// Which windows the fleet input has fed completely: shared with the pipeline, which judges a
/// window only when its end is here.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// End of the last window fed, in milliseconds since the epoch (0: none yet).
    fed_ms: Arc<AtomicU64>,
}

impl Gate {
    /// The window ending at `end` (unix seconds) is fed: its batch is already queued.
    pub fn fed(&self, end: f64) {
        self.fed_ms.fetch_max(ms(end), Ordering::Release);
    }

    /// Whether the window ending at `end` was fed.
    pub fn is_fed(&self, end: f64) -> bool {
        self.fed_ms.load(Ordering::Acquire) >= ms(end)
    }
}

fn ms(t: f64) -> u64 {
    (t * 1000.0).round().max(0.0) as u64
}

/// What `/readyz` says of the fleet input.
#[derive(Debug, Clone, Default)]
pub struct Status {
    inner: Arc<Mutex<StatusInner>>,
}

#[derive(Debug, Default)]
struct StatusInner {
    backfill: String,
    failing_windows: u32,
    last_error: Option<String>,
}

impl Status {
    fn set_backfill(&self, summary: String) {
        self.lock().backfill = summary;
    }

    fn answered(&self) {
        let mut s = self.lock();
        s.failing_windows = 0;
        s.last_error = None;
    }

    fn failed(&self, why: String) {
        let mut s = self.lock();
        s.failing_windows = s.failing_windows.saturating_add(1);
        s.last_error = Some(why);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StatusInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Ok` with a line for a ready body, or `Err` with why the fleet input is not ready.
    pub fn readiness(&self) -> Result<String, String> {
        let s = self.lock();
        let last = match &s.last_error {
            Some(e) => format!("last query failed: {e}"),
            None => "last query answered".to_owned(),
        };
        if s.failing_windows >= FAILING_WINDOWS {
            Err(format!(
                "fleet input: no answer for {} windows in a row; {last}; {}",
                s.failing_windows, s.backfill
            ))
        } else {
            Ok(format!("fleet input: {}; {last}", s.backfill))
        }
    }
}

/// The self-metrics the fleet input adds to, resolved once.
#[derive(Debug, Clone)]
pub struct Counters {
    source: SourceMetrics,
    queries: IntCounterVec,
    failures: IntCounterVec,
    windows: IntCounterVec,
    query_seconds: Histogram,
    answer_bytes: IntGauge,
    answer_series: IntGauge,
    skipped: IntCounterVec,
}

impl Counters {
    /// Registers the fleet input's own metrics in `registry` (the stage owns them) beside its
    /// series of the shared ingest counters.
    pub fn register(registry: &Registry, ingest: &IngestMetrics) -> prometheus::Result<Counters> {
        let add = |c: Box<dyn prometheus::core::Collector>| registry.register(c);
        let queries = IntCounterVec::new(
            Opts::new(
                "skewwatch_fleet_queries_total",
                "Queries the fleet input sent to the PromQL API, by family of series (requests, \
                 cache, buckets) and result (ok, failed).",
            ),
            &["family", "result"],
        )?;
        let failures = IntCounterVec::new(
            Opts::new(
                "skewwatch_fleet_query_failures_total",
                "Failed fleet queries, by reason (connect, timeout, late, status, refused, too_large, \
                 too_many_series, malformed, partial); a window without every answer is not \
                 judged.",
            ),
            &["reason"],
        )?;
        let windows = IntCounterVec::new(
            Opts::new(
                "skewwatch_fleet_windows_total",
                "Fleet windows by result: fed (every answer in time) or skipped (not judged).",
            ),
            &["result"],
        )?;
        let query_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "skewwatch_fleet_query_duration_seconds",
                "Time one fleet query took, answer read and parsed.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )?;
        let answer_bytes = IntGauge::new(
            "skewwatch_fleet_answer_bytes",
            "Bytes of the last window's answers, every family together.",
        )?;
        let answer_series = IntGauge::new(
            "skewwatch_fleet_answer_series",
            "Series in the last window's answers, every family together.",
        )?;
        add(Box::new(queries.clone()))?;
        add(Box::new(failures.clone()))?;
        add(Box::new(windows.clone()))?;
        add(Box::new(query_seconds.clone()))?;
        add(Box::new(answer_bytes.clone()))?;
        add(Box::new(answer_series.clone()))?;
        for result in ["fed", "skipped"] {
            windows.with_label_values(&[result]);
        }
        Ok(Counters {
            source: ingest.source(Source::Fleet).clone(),
            queries,
            failures,
            windows,
            query_seconds,
            answer_bytes,
            answer_series,
            skipped: ingest.skipped.clone(),
        })
    }

    fn window(&self, result: &str) -> IntCounter {
        self.windows.with_label_values(&[result])
    }

    fn skip(&self, why: Skip) {
        self.skipped
            .with_label_values(&[Source::Fleet.as_str(), why.as_str()])
            .inc();
    }
}

/// What the backfill read: the windows to judge before the first live one, oldest first.
#[derive(Debug, Default)]
pub struct Backfill {
    /// (window end, its observations).
    pub windows: Vec<(f64, Batch)>,
    /// Evaluation time of the last window read: where the live queries carry on from.
    pub last_eval: Option<f64>,
}

/// Reads the last `config.backfill` of history, as the live queries would have read it window
/// by window, up to the window that ends at or before `now`. A failure is logged and leaves
/// the detectors to warm up on live windows; it never stops the start.
pub async fn backfill(
    config: &FleetConfig,
    window_secs: f64,
    now: f64,
    status: &Status,
    counters: &Counters,
) -> Backfill {
    let windows = (config.backfill.as_secs_f64() / window_secs)
        .floor()
        .min(MAX_BACKFILL_WINDOWS);
    if windows < 1.0 {
        status.set_backfill("no backfill (fleet.backfill_secs: 0); baselines warm up live".into());
        return Backfill::default();
    }
    // Evaluated where the live queries are: `lead` before each window's end, less the delay.
    let lead = (config.lead + config.delay).as_secs_f64();
    let last_end = align(now, window_secs);
    let first_end = last_end - (windows - 1.0) * window_secs;
    let started = tokio::time::Instant::now();
    let read = async {
        let timeout = BACKFILL_TIMEOUT.max(config.timeout);
        let api = Api::with_timeout(config, timeout).map_err(QueryError::Connect)?;
        let window = Duration::from_secs_f64(window_secs);
        let ask = |family| {
            let expr = growth_expr(family, &config.selector, config.lookback, window);
            let api = &api;
            async move {
                let range = api.range(&expr, first_end - lead, last_end - lead, window_secs);
                let (series, _) = timed(counters, family, range).await?;
                Ok(query::net(series))
            }
        };
        let mut by_time: BTreeMap<u64, Growth> = BTreeMap::new();
        for (family, series) in ask_every_family(ask).await? {
            for s in &series {
                for &(t, v) in &s.points {
                    by_time.entry(ms(t)).or_default().add_one(
                        family,
                        &s.labels,
                        v,
                        &|g| config.split.owns(g),
                        &mut |why| counters.skip(why),
                    );
                }
            }
        }
        Ok::<_, QueryError>(by_time)
    };
    match read.await {
        Ok(by_time) => {
            let mut out = Backfill::default();
            for (t_ms, growth) in by_time {
                let t = t_ms as f64 / 1000.0;
                let mut batch = Batch::default();
                growth.records(&mut batch);
                // The window that was open at the evaluation time (an API that aligns range
                // queries to the step moves a point to the start of its window).
                out.windows
                    .push((align(t, window_secs) + window_secs, batch));
                out.last_eval = Some(t);
            }
            let summary = format!(
                "baselines from {} windows of history ({} s) read at start-up in {:.1} s",
                out.windows.len(),
                (out.windows.len() as f64 * window_secs).round(),
                started.elapsed().as_secs_f64()
            );
            tracing::info!(
                windows = out.windows.len(),
                seconds = started.elapsed().as_secs_f64(),
                "Backfilled the detectors' baselines from the TSDB's history."
            );
            status.set_backfill(summary);
            out
        }
        Err(error) => {
            counters.failures.with_label_values(&[error.reason()]).inc();
            tracing::warn!(
                url = %config.url,
                %error,
                "The backfill failed; the detectors warm up on live windows."
            );
            status.set_backfill(format!("backfill failed ({error}); baselines warm up live"));
            Backfill::default()
        }
    }
}

/// The fleet input as [`FleetConfig::prepare`] leaves it: its metrics registered, its history
/// read, nothing started. The pipeline takes the backfill and the gate before it starts;
/// [`PreparedFleet::spawn`] then starts the input.
#[derive(Debug)]
pub struct PreparedFleet {
    config: FleetConfig,
    counters: Counters,
    status: Status,
    gate: Gate,
    backfill: Backfill,
    window_secs: f64,
}

impl FleetConfig {
    /// Registers the input's metrics in `registry` and reads its history (each query bounded
    /// by its timeout): a TSDB that does not answer costs the backfill, never the start.
    pub async fn prepare(
        &self,
        window_secs: f64,
        now: f64,
        registry: &Registry,
        ingest: &IngestMetrics,
    ) -> prometheus::Result<PreparedFleet> {
        let counters = Counters::register(registry, ingest)?;
        let status = Status::default();
        let backfill = backfill(self, window_secs, now, &status, &counters).await;
        Ok(PreparedFleet {
            config: self.clone(),
            counters,
            status,
            gate: Gate::default(),
            backfill,
            window_secs,
        })
    }
}

impl PreparedFleet {
    /// The backfilled windows, oldest first, for the pipeline to judge before the live ones
    /// (taken once; later calls get none).
    pub fn take_backfill(&mut self) -> Vec<(f64, Batch)> {
        std::mem::take(&mut self.backfill.windows)
    }

    /// The gate the pipeline checks before it judges a window.
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    /// What `/readyz` says of the input.
    pub fn status(&self) -> Status {
        self.status.clone()
    }

    /// Starts the fleet task into `stage`, feeding `queue`; it stops with the stage.
    pub fn spawn<C: Clock + Clone + Send + Sync + 'static>(
        self,
        queue: IngestQueue,
        clock: C,
        stage: &mut Stage,
    ) {
        let cx = Context {
            queue,
            gate: self.gate,
            status: self.status,
            counters: self.counters,
            clock,
            window_secs: self.window_secs,
            last_eval: self.backfill.last_eval,
        };
        stage.watch("fleet input", spawn(self.config, cx, stage.stop_token()));
    }
}

/// Everything the fleet task needs besides its configuration.
#[derive(Debug, Clone)]
pub struct Context<C> {
    /// Where its batches go.
    pub queue: IngestQueue,
    /// Shared with the pipeline.
    pub gate: Gate,
    /// Shared with `/readyz`.
    pub status: Status,
    /// Its self-metrics.
    pub counters: Counters,
    /// The wall clock windows are aligned to.
    pub clock: C,
    /// The fleet window, seconds.
    pub window_secs: f64,
    /// Evaluation time of the last backfilled window, if any.
    pub last_eval: Option<f64>,
}

/// Starts the fleet task; it stops when `cancel` fires.
pub fn spawn<C: Clock + Clone + Send + Sync + 'static>(
    config: FleetConfig,
    cx: Context<C>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let span = tracing::info_span!("fleet", url = %config.url);
    tokio::spawn(run(config, cx, cancel).instrument(span))
}

async fn run<C: Clock>(config: FleetConfig, cx: Context<C>, cancel: CancellationToken) {
    let api = match Api::new(&config) {
        Ok(a) => a,
        Err(error) => {
            tracing::error!(%error, "The fleet input's HTTP client could not be built.");
            return;
        }
    };
    let w = cx.window_secs;
    let lead = config.lead.as_secs_f64();
    let delay = config.delay.as_secs_f64();
    let mut prev = cx.last_eval;
    let mut failing = false;
    loop {
        let now = cx.clock.now();
        let mut end = align(now, w) + w;
        if end - lead <= now {
            end += w;
        }
        let at = end - lead;
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs_f64((at - now).max(0.0))) => {}
        }
        // Evaluated at a time of our choosing, one window after the previous evaluation, so
        // consecutive windows meet: never at "now", which a TSDB may move (see `delay`).
        let eval = at - delay;
        // Growth since the previous query. A first query, or one after a gap (a backfill that
        // ended early, a clock step), reads one window: a gap's growth crammed into one window
        // would read as a burst.
        let since = prev
            .map(|p| eval - p)
            .filter(|d| *d > 0.0 && *d <= 1.5 * w)
            .unwrap_or(w);
        prev = Some(eval);
        let answer = tokio::select! {
            _ = cancel.cancelled() => return,
            a = read_window(&api, &config, &cx.counters, eval, Duration::from_secs_f64(since)) => a,
        };
        let result = answer.and_then(|growth| {
            if cx.clock.now() >= end {
                Err(QueryError::Late)
            } else {
                Ok(growth)
            }
        });
        match result {
            Ok(growth) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("The fleet input has answers again.");
                }
                let mut batch = Batch::default();
                growth.records(&mut batch);
                if !batch.is_empty() {
                    // A full queue is counted inside `submit`; the gate opens all the same,
                    // as for a window whose batch was dropped the pipeline knows no better.
                    let _ = cx.queue.submit(&cx.counters.source, batch);
                }
                cx.gate.fed(end);
                cx.status.answered();
                cx.counters.window("fed").inc();
            }
            Err(error) => {
                cx.counters
                    .failures
                    .with_label_values(&[error.reason()])
                    .inc();
                cx.counters.window("skipped").inc();
                cx.status.failed(error.to_string());
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(
                        %error,
                        "The fleet input got no usable answer; windows without one are not judged."
                    );
                }
            }
        }
    }
}

/// One window's growth of every family, all or nothing.
async fn read_window(
    api: &Api,
    config: &FleetConfig,
    counters: &Counters,
    at: f64,
    since: Duration,
) -> Result<Growth, QueryError> {
    let ask = |family| {
        let expr = growth_expr(family, &config.selector, config.lookback, since);
        async move {
            let (series, weight) = timed(counters, family, api.instant(&expr, at)).await?;
            Ok((query::net(series), weight))
        }
    };
    let mut growth = Growth::default();
    let owns = |g: &str| config.split.owns(g);
    let mut bytes = 0;
    let mut series = 0;
    for (family, (answer, weight)) in ask_every_family(ask).await? {
        growth.add(family, &answer, 0, &owns, &mut |why| counters.skip(why));
        bytes += weight.bytes;
        series += weight.series;
    }
    counters.answer_bytes.set(bytes as i64);
    counters.answer_series.set(series as i64);
    Ok(growth)
}

/// Asks `ask` for every family at once, all or nothing: the first failure ends the read (a
/// window, or a backfill, is fed whole or not at all). The answers come in [`Family::ALL`]
/// order, each beside its family.
async fn ask_every_family<T, F>(
    ask: impl Fn(Family) -> F,
) -> Result<[(Family, T); Family::ALL.len()], QueryError>
where
    F: std::future::Future<Output = Result<T, QueryError>>,
{
    // Destructured, so a seventh family does not compile until it is asked for here.
    let [a, b, c, d, e, f] = Family::ALL;
    let (ta, tb, tc, td, te, tf) =
        tokio::try_join!(ask(a), ask(b), ask(c), ask(d), ask(e), ask(f))?;
    Ok([(a, ta), (b, tb), (c, tc), (d, td), (e, te), (f, tf)])
}

/// Runs one query, counting it by family and result and timing it.
async fn timed<T>(
    counters: &Counters,
    family: Family,
    query: impl std::future::Future<Output = Result<T, QueryError>>,
) -> Result<T, QueryError> {
    let timer = counters.query_seconds.start_timer();
    let result = query.await;
    timer.observe_duration();
    let label = if result.is_ok() { "ok" } else { "failed" };
    counters
        .queries
        .with_label_values(&[family.as_str(), label])
        .inc();
    result
}
