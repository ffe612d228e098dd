//! `skewwatch run`, assembled as values.
//!
//! [`start`] binds every listener and spawns every task, in the order the data flows: alert
//! delivery, the pipeline, the StatsD receiver, the HTTP server. It returns a [`Running`] agent
//! that owns the bound addresses and the task handles, so callers (the CLI, `demo`, tests) ask
//! it where it listens instead of reading logs. [`Running::shutdown`] stops the agent in the
//! reverse order, every step bounded by one grace time:
//!
//! 1. readiness turns false;
//! 2. ingest stops: the StatsD thread hands over its last batch, the HTTP server stops
//!    accepting and lets in-flight requests finish for at most [`INGEST_DRAIN`];
//! 3. the pipeline takes what ingest queued and stops, which ends the dispatcher;
//! 4. alert delivery sends what it owes (each receiver for at most [`DELIVERY_FLUSH`]);
//! 5. whatever is still running when the grace time ends is aborted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use prometheus::Registry;
use serde::{Deserialize, Serialize};
use skewwatch_detectors::alert::Alert;
use skewwatch_detectors::engine::Engine;
use skewwatch_detectors::snapshot::WindowSnapshot;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::alerting::AlertingConfig;
use crate::alerting::{ReceiverTask, Receivers, StartContext};
use crate::clock::{Clock, SystemClock};
use crate::config::{ConfigError, Secret};
use crate::http::admin::ReloadOutcome;
use crate::http::config::HttpConfig;
use crate::http::server::{self, Server, Stopped};
use crate::http::{self, AppState};
use crate::ingest::statsd::receiver;
use crate::ingest::{IngestQueue, fleet, scrape};
use crate::outputs::history::{History, Recorder};
use crate::outputs::totals::{Accumulator, Totals, TotalsConfig};
use crate::pipeline::{Control, EvaluationHook, Pipeline, PipelineChannels};
use crate::state::{LoadError, StateStore};
use crate::telemetry::{SelfMetrics, Source};

pub mod config;
pub mod reload;
pub mod stage;

pub use config::{Config, Live, ReloadClass, Startup};

use stage::Stage;

/// How long shutdown may take in all, from the signal to the last task.
pub const GRACE: Duration = Duration::from_secs(10);

/// How long in-flight HTTP requests may take to finish once ingest stops; within [`GRACE`],
/// leaving the rest to the pipeline and alert delivery.
pub const INGEST_DRAIN: Duration = Duration::from_secs(2);

/// How long alert delivery keeps delivering what it owes after the pipeline stopped; within
/// [`GRACE`] after [`INGEST_DRAIN`].
pub const DELIVERY_FLUSH: Duration = Duration::from_secs(7);

/// Where the listeners ended up (ports chosen by the OS when 0 was asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundAddrs {
    /// HTTP listener.
    pub http: SocketAddr,
    /// StatsD listener, if enabled.
    pub statsd: Option<SocketAddr>,
}

impl BoundAddrs {
    /// Writes the addresses as JSON to `path` (through a temporary file and a rename, so a
    /// reader never sees half a file): how a process that started the agent with port 0
    /// learns the ports.
    pub fn write_to(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(self)?)?;
        std::fs::rename(&tmp, path)
    }
}

/// Every socket of a validated configuration, bound, and everything start-up prepares before
/// it spawns a task: what [`bind`] returns and [`Bound::spawn`] starts.
#[derive(Debug)]
pub struct Bound {
    config: Config,
    addrs: BoundAddrs,
    http: tokio::net::TcpListener,
    statsd: Option<std::net::UdpSocket>,
    registry: Registry,
    metrics: SelfMetrics,
    receivers: Receivers,
    /// The fleet input, prepared (its history read) on a fleet instance.
    fleet: Option<FleetPrepared>,
}

/// The fleet input as [`bind`] prepares it: its counters registered, its history read.
#[derive(Debug)]
struct FleetPrepared {
    config: fleet::FleetConfig,
    counters: fleet::Counters,
    status: fleet::Status,
    backfill: fleet::Backfill,
}

/// The outputs stage: the HTTP server (which serves the views, the ingest endpoints and the
/// admin endpoint) and the views the pipeline publishes.
#[derive(Debug)]
struct Outputs {
    server: Server,
    snapshots: watch::Receiver<Arc<WindowSnapshot>>,
    alerts: watch::Receiver<Arc<Vec<Alert>>>,
}

/// What the control loop of [`run`] changes while the agent runs: the configuration in force
/// and the handles a reload acts through.
#[derive(Debug)]
struct Controls {
    /// The configuration in force.
    config: Config,
    /// The token the HTTP guards check; replaced on reload.
    token: watch::Sender<Option<Secret>>,
    /// Reload requests from `POST /-/reload`.
    reload_requests: mpsc::Receiver<oneshot::Sender<ReloadOutcome>>,
    /// Changes to the running pipeline.
    pipeline: mpsc::Sender<Control>,
    /// Readiness, as `/readyz` reports it.
    ready: Arc<AtomicBool>,
    /// Self-metrics.
    metrics: SelfMetrics,
}

/// A running agent: its bound addresses and its stages, stopped in the order the data flows.
#[derive(Debug)]
pub struct Running {
    addrs: BoundAddrs,
    /// The StatsD receiver thread and the `scrape:` jobs.
    ingest: Stage,
    /// The HTTP server and the views.
    outputs: Outputs,
    /// The task that owns the engine.
    pipeline: Stage,
    /// One task per alert receiver (those a reload replaced included, until they finish).
    delivery: Stage,
    /// What a reload changes.
    control: Controls,
}

/// How each stage ended in [`Running::shutdown`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The HTTP server: drained, or aborted at its deadline.
    pub http: Stopped,
    /// The pipeline drained its queue and stopped before the deadline.
    pub pipeline_drained: bool,
    /// Alert delivery tasks still running at the deadline, aborted.
    pub delivery_aborted: usize,
}

/// Binds every listener of a validated configuration and prepares what the tasks need
/// (self-metrics, alert delivery's HTTP client); spawns nothing, so a port in use or a bad
/// receiver fails before anything runs.
pub async fn bind(config: Config) -> anyhow::Result<Bound> {
    let receivers =
        Receivers::prepare(&config.live.alerting).context("preparing alert delivery")?;
    let registry = Registry::new();
    let metrics = SelfMetrics::register(&registry).context("registering self-metrics")?;
    let http = tokio::net::TcpListener::bind(config.startup.http_listen)
        .await
        .with_context(|| {
            format!(
                "binding the HTTP listener on {}",
                config.startup.http_listen
            )
        })?;
    let statsd = match config.startup.statsd_listen {
        Some(addr) => Some(
            receiver::bind(addr, config.startup.statsd_receive_buffer_bytes)
                .with_context(|| format!("binding the StatsD listener on {addr}"))?,
        ),
        None => None,
    };
    let addrs = BoundAddrs {
        http: http.local_addr()?,
        statsd: statsd.as_ref().map(|s| s.local_addr()).transpose()?,
    };
    let fleet = match &config.startup.fleet {
        Some(fleet) => Some(prepare_fleet(fleet, &config, &registry, &metrics).await?),
        None => None,
    };
    Ok(Bound {
        config,
        addrs,
        http,
        statsd,
        registry,
        metrics,
        receivers,
        fleet,
    })
}

/// Registers the fleet input's metrics and reads its history (bounded by its timeout per
/// query); a TSDB that does not answer costs the backfill, never the start.
async fn prepare_fleet(
    fleet: &fleet::FleetConfig,
    config: &Config,
    registry: &Registry,
    metrics: &SelfMetrics,
) -> anyhow::Result<FleetPrepared> {
    let counters = fleet::Counters::register(registry, metrics)
        .context("registering the fleet input's metrics")?;
    let status = fleet::Status::default();
    let backfill = fleet::backfill(
        fleet,
        config.startup.window.window_secs,
        SystemClock.now(),
        &status,
        &counters,
    )
    .await;
    Ok(FleetPrepared {
        config: fleet.clone(),
        counters,
        status,
        backfill,
    })
}

/// Binds and spawns: [`bind`] then [`Bound::spawn`].
pub async fn start(config: Config) -> anyhow::Result<Running> {
    bind(config).await?.spawn()
}

impl Bound {
    /// Where the listeners are bound.
    pub fn addrs(&self) -> BoundAddrs {
        self.addrs
    }

    /// Spawns every stage, in the order the data flows: alert delivery, the pipeline, ingest
    /// (the StatsD thread, the `scrape:` jobs), then the HTTP server.
    pub fn spawn(self) -> anyhow::Result<Running> {
        let Bound {
            config,
            addrs,
            http,
            statsd,
            registry,
            metrics,
            receivers,
            fleet,
        } = self;
        let mut fleet = fleet;
        let backfill = fleet
            .as_mut()
            .map(|f| std::mem::take(&mut f.backfill.windows))
            .unwrap_or_default();
        let gate = fleet.as_ref().map(|_| fleet::Gate::default());
        let Built {
            mut pipeline,
            channels,
            totals,
            history,
        } = build_pipeline(&config, &metrics, backfill, gate.clone());

        let mut delivery = Stage::new("delivery");
        start_delivery(
            &config.live.alerting,
            config.startup.window.window_secs,
            receivers,
            &addrs,
            &metrics,
            &mut delivery,
            |h| pipeline.set_delivery(h),
        );
        let mut pipeline_stage = Stage::new("pipeline");
        let stop = pipeline_stage.stop_token();
        pipeline_stage.spawn("pipeline", pipeline.run(stop));
        let mut ingest = spawn_ingest(&config.startup, statsd, &channels.queue, &metrics)?;
        let fleet_status = match (fleet, gate) {
            (Some(f), Some(gate)) => {
                let status = f.status.clone();
                let cx = fleet::Context {
                    queue: channels.queue.clone(),
                    gate,
                    status: f.status,
                    counters: f.counters,
                    clock: SystemClock,
                    window_secs: config.startup.window.window_secs,
                    last_eval: f.backfill.last_eval,
                };
                ingest.watch(
                    "fleet input",
                    fleet::spawn(f.config, cx, ingest.stop_token()),
                );
                Some(status)
            }
            _ => None,
        };

        let ready = Arc::new(AtomicBool::new(false));
        let (token_tx, token) = watch::channel(config.live.token.clone());
        let (reload_tx, reload_rx) = mpsc::channel(4);
        let state = AppState {
            ingest: ingest_state(&config.startup, channels.queue, &metrics),
            views: http::ViewState {
                registry,
                snapshots: channels.snapshots.clone(),
                alerts: channels.alerts.clone(),
                totals,
                history,
                exported_keys: config.startup.window.top_keys,
                window_secs: config.startup.window.window_secs,
            },
            control: http::ControlState {
                token,
                ready: ready.clone(),
                heartbeat: channels.heartbeat,
                reload: reload_tx,
                fleet: fleet_status,
            },
        };
        let server = spawn_http(&config.startup.http, http, state, &metrics)?;
        ready.store(true, Ordering::Release);
        Ok(Running {
            addrs,
            ingest,
            outputs: Outputs {
                server,
                snapshots: channels.snapshots,
                alerts: channels.alerts,
            },
            pipeline: pipeline_stage,
            delivery,
            control: Controls {
                config,
                token: token_tx,
                reload_requests: reload_rx,
                pipeline: channels.control,
                ready,
                metrics,
            },
        })
    }
}

/// What the HTTP ingest handlers share: the queue, their limits and counters, the OTLP mapping.
fn ingest_state(startup: &Startup, queue: IngestQueue, metrics: &SelfMetrics) -> http::IngestState {
    http::IngestState {
        queue,
        permits: Arc::new(Semaphore::new(startup.http.max_concurrent_ingest)),
        body_limit: startup.http.body_limit_bytes,
        metrics: metrics.source(Source::Http).clone(),
        otlp: http::otlp::OtlpState::new(&startup.otlp, metrics.source(Source::Otlp)),
    }
}

/// The ingest stage: the StatsD receiver thread on the bound socket (when StatsD is on) and
/// one supervised task per `scrape:` job.
fn spawn_ingest(
    startup: &Startup,
    statsd: Option<std::net::UdpSocket>,
    queue: &IngestQueue,
    metrics: &SelfMetrics,
) -> anyhow::Result<Stage> {
    let mut ingest = Stage::new("ingest");
    if let Some(socket) = statsd {
        let thread = receiver::spawn(
            socket,
            queue.clone(),
            metrics.clone(),
            Arc::from(startup.statsd_mappings.clone()),
            ingest.stop_token(),
        )
        .context("starting the StatsD receiver thread")?;
        ingest.watch_thread("statsd receiver", thread);
    }
    for job in &startup.scrape {
        let task = format!("scrape:{}", job.name);
        let restarts = metrics.task_restarts.with_label_values(&[&task]);
        let (job, queue, metrics, stop) = (
            job.clone(),
            queue.clone(),
            metrics.clone(),
            ingest.stop_token(),
        );
        let attempt_stop = stop.clone();
        ingest.spawn(
            task.clone(),
            stage::supervise(task, stop, restarts, move || {
                scrape::spawn(job.clone(), queue.clone(), &metrics, attempt_stop.clone())
            }),
        );
    }
    Ok(ingest)
}

/// What [`build_pipeline`] makes.
struct Built {
    pipeline: Pipeline<SystemClock>,
    channels: PipelineChannels,
    /// Where the cumulative counters are published.
    totals: watch::Receiver<Arc<Totals>>,
    /// Where the live view's history ring is published.
    history: watch::Receiver<Arc<History>>,
}

/// The pipeline around an engine that carries on from the state file (when one is set), with
/// the cumulative counters and the live view's history hooked in.
fn build_pipeline(
    config: &Config,
    metrics: &SelfMetrics,
    backfill: Vec<(f64, skewwatch_detectors::observation::Batch)>,
    gate: Option<fleet::Gate>,
) -> Built {
    let clock = SystemClock;
    // A backfill starts the engine at its first window, in the past.
    let window_secs = config.startup.window.window_secs;
    let start = backfill
        .first()
        .map_or(clock.now(), |(end, _)| end - window_secs);
    let mut engine = Engine::new(config.engine(), start);
    if let Some(store) = &config.startup.state {
        restore_state(&mut engine, store, clock.now());
    }
    if gate.is_some() {
        engine.set_scope(Some("fleet".to_owned()));
    }
    let (mut pipeline, channels) = Pipeline::new(
        engine,
        clock,
        config.startup.ingest_queue_batches,
        config.startup.ingest_queue_bytes,
        metrics.clone(),
        config.startup.state.clone(),
    );
    let (mut totals, totals_rx) = Accumulator::new(TotalsConfig::from_parts(
        &config.startup.window,
        &config.startup.exposition,
    ));
    pipeline.on_evaluation(move |ev| totals.add(&ev.snapshot));
    let (mut recorder, history) = Recorder::new(
        config.startup.ui.history_windows,
        config.startup.window.dispersion_alpha,
    );
    pipeline.on_evaluation(move |ev| recorder.record(ev));
    if let Some(gate) = gate {
        pipeline.set_gate(gate);
    }
    // Before alert delivery is installed: what the history shows is judged, not sent again.
    pipeline.prime(backfill);
    Built {
        pipeline,
        channels,
        totals: totals_rx,
        history,
    }
}

/// Serves the routes on the bound HTTP listener, with the connection limit the open-file limit
/// allows.
fn spawn_http(
    config: &HttpConfig,
    listener: tokio::net::TcpListener,
    state: AppState,
    metrics: &SelfMetrics,
) -> std::io::Result<Server> {
    let limits = server::Limits {
        max_connections: server::connection_budget(config.max_connections),
        header_read_timeout: config.header_read_timeout,
    };
    let metrics = server::ServerMetrics {
        open: metrics.http_connections_open.clone(),
        refused: metrics.http_connections_refused.clone(),
    };
    Server::spawn(
        listener,
        http::router(state.clone(), config.request_timeout),
        http::health_router(state),
        limits,
        metrics,
    )
}

/// Takes back the state a previous run saved, when there is a usable one; anything wrong with
/// the file means a fresh start, with a warning.
fn restore_state(engine: &mut Engine, store: &StateStore, now: f64) {
    match store.load(now) {
        Ok(state) => {
            let r = engine.restore_state(state);
            tracing::info!(
                path = %store.path.display(),
                alerts = r.alerts,
                detectors = r.detectors.len(),
                "Restored alerts and baselines from the state file."
            );
            for (detector, why) in r.failed {
                tracing::warn!(
                    detector,
                    why,
                    "A detector's saved state did not read back; it starts afresh."
                );
            }
        }
        Err(LoadError::Missing(path)) => {
            tracing::info!(path = %path.display(), "No state file yet; starting fresh.");
        }
        Err(error) => tracing::warn!(%error, "Not restoring the state file."),
    }
}

/// Spawns one delivery task per receiver into `stage` and hands `install` the dispatcher's
/// evaluation hook. The tasks end after the pipeline: they stop once it drops the dispatcher
/// and they have flushed.
fn start_delivery(
    config: &AlertingConfig,
    window_secs: f64,
    receivers: Receivers,
    addrs: &BoundAddrs,
    metrics: &SelfMetrics,
    stage: &mut Stage,
    install: impl FnOnce(EvaluationHook),
) {
    if receivers.is_empty() {
        return;
    }
    let external_url = config
        .external_url
        .clone()
        .unwrap_or_else(|| format!("http://{}/api/v1/alerts", addrs.http));
    let (mut dispatcher, tasks) = receivers.start(StartContext {
        external_url,
        window_secs,
        metrics,
        flush_timeout: DELIVERY_FLUSH,
    });
    install(Box::new(move |ev| dispatcher.offer(ev)));
    for ReceiverTask { name, handle } in tasks {
        stage.watch(format!("alert delivery {name}"), handle);
    }
    tracing::info!(
        alertmanagers = config.alertmanagers.len(),
        webhooks = config.webhooks.len(),
        "Alert delivery started."
    );
}

impl Running {
    /// Where the listeners are bound.
    pub fn addrs(&self) -> BoundAddrs {
        self.addrs
    }

    /// The latest closed window, updated as windows close.
    pub fn snapshots(&self) -> watch::Receiver<Arc<WindowSnapshot>> {
        self.outputs.snapshots.clone()
    }

    /// The active alerts after the latest evaluation.
    pub fn alerts(&self) -> watch::Receiver<Arc<Vec<Alert>>> {
        self.outputs.alerts.clone()
    }

    /// A long-lived task that has ended although shutdown has not begun (a panic, or a loop
    /// that returned): its name and stage. Supervised tasks (the `scrape:` jobs) restart by
    /// themselves and show up here only if their supervisor ends.
    pub fn failed_task(&self) -> Option<String> {
        if self.outputs.server.is_finished() {
            return Some("HTTP server (outputs)".to_owned());
        }
        [&self.ingest, &self.pipeline, &self.delivery]
            .into_iter()
            .find_map(Stage::failed)
    }

    /// Puts new detector settings in force in the pipeline, which keeps its open window,
    /// baselines and alert state.
    async fn reconfigure_engine(&mut self, cfg: skewwatch_detectors::detect::DetectorsConfig) {
        let (tx, rx) = oneshot::channel();
        if self
            .control
            .pipeline
            .send(Control::Reconfigure(Box::new(cfg), tx))
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
    }

    /// Rebuilds alert delivery for `config`: new receiver tasks take the pipeline's
    /// evaluations; the old ones finish what they owe and stop.
    async fn replace_delivery(&mut self, config: &AlertingConfig) {
        let receivers = match Receivers::prepare(config) {
            Ok(r) => r,
            Err(error) => {
                tracing::error!(%error, "Alert delivery could not be rebuilt; keeping the old one.");
                return;
            }
        };
        let mut hook = None;
        let mut fresh = Stage::new("delivery");
        start_delivery(
            config,
            self.control.config.startup.window.window_secs,
            receivers,
            &self.addrs,
            &self.control.metrics,
            &mut fresh,
            |h| hook = Some(h),
        );
        if self
            .control
            .pipeline
            .send(Control::Hook(hook))
            .await
            .is_ok()
        {
            // The replaced tasks end once the pipeline dropped their dispatcher and they
            // flushed; shutdown still waits for them.
            let retired = std::mem::replace(&mut self.delivery, fresh);
            self.delivery.adopt_retired(retired);
        }
    }

    /// Re-reads the configuration and applies what can change while running (see
    /// [`reload`]); a bad configuration keeps the current one.
    pub async fn reload(&mut self, source: &ConfigSource) -> ReloadOutcome {
        reload::apply(self, source).await
    }

    /// Stops the agent in order (see the module documentation), within `grace` in all.
    pub async fn shutdown(self, grace: Duration) -> ShutdownReport {
        let deadline = Instant::now() + grace;
        self.control.ready.store(false, Ordering::Release);

        // Ingest first, so the pipeline drains everything it will ever get. A scrape in flight
        // is abandoned: its data stays in the target for the next run to read.
        let ingest = self.ingest.stop(deadline);
        let http = self
            .outputs
            .server
            .shutdown(deadline.min(Instant::now() + INGEST_DRAIN));
        let (ingest, http) = tokio::join!(ingest, http);
        if ingest.aborted > 0 {
            tracing::warn!(tasks = ingest.aborted, "Ingest did not stop in time.");
        }

        let pipeline = self.pipeline.stop(deadline).await;
        let delivery = self.delivery.stop(deadline).await;
        let report = ShutdownReport {
            http,
            pipeline_drained: pipeline.aborted == 0,
            delivery_aborted: delivery.aborted,
        };
        tracing::info!(?report, "Stopped.");
        report
    }
}

/// Where the configuration comes from, so that a reload reads it the way start-up did: the
/// file (or the embedded default) with the command line's listener overrides.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// The YAML file; `None` means the embedded default.
    pub path: Option<PathBuf>,
    /// `--http-listen`.
    pub http_listen: Option<SocketAddr>,
    /// `--statsd-listen` (an address or `disabled`).
    pub statsd_listen: Option<config::StatsdListen>,
}

impl ConfigSource {
    /// Reads and validates the configuration, secrets included.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let config = match &self.path {
            Some(p) => Config::load(p)?,
            None => Config::embedded(),
        };
        config.with_listeners(self.http_listen, self.statsd_listen)
    }
}

/// Options of `skewwatch run` that are not configuration.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where the configuration comes from.
    pub source: ConfigSource,
    /// Where to write the bound addresses as JSON once every listener is bound.
    pub addresses_file: Option<PathBuf>,
}

/// How often `run` checks that its long-lived tasks are still running.
const TASK_CHECK: Duration = Duration::from_secs(1);

/// Runs the agent on `config` until SIGTERM or SIGINT, or until `cancel` fires, then shuts it
/// down within [`GRACE`]. SIGHUP and `POST /-/reload` re-read the configuration from
/// `options.source`. A long-lived task that ends on its own (a panic) shuts the agent down and
/// makes this an error, so the process exits non-zero and its supervisor restarts it.
pub async fn run(
    config: Config,
    options: RunOptions,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let window_secs = config.startup.window.window_secs;
    let mut running = start(config).await?;
    let addrs = running.addrs();
    if let Some(path) = &options.addresses_file {
        addrs
            .write_to(path)
            .with_context(|| format!("writing the bound addresses to {}", path.display()))?;
    }
    tracing::info!(
        http = %addrs.http,
        statsd = %addrs.statsd.map_or("disabled".to_string(), |a| a.to_string()),
        window_secs,
        "Listening."
    );
    let mut signals = Signals::new()?;
    let mut check = tokio::time::interval(TASK_CHECK);
    let failure = loop {
        let event = tokio::select! {
            _ = signals.term.recv() => Event::Stop("Shutting down on SIGTERM."),
            _ = signals.int.recv() => Event::Stop("Shutting down on SIGINT."),
            _ = cancel.cancelled() => Event::Stop("Shutting down."),
            _ = signals.hup.recv() => Event::Reload(None),
            Some(reply) = running.control.reload_requests.recv() => Event::Reload(Some(reply)),
            _ = check.tick() => Event::Check,
        };
        match event {
            Event::Stop(why) => {
                tracing::info!("{why}");
                break None;
            }
            Event::Reload(reply) => {
                let outcome = running.reload(&options.source).await;
                if let Some(reply) = reply {
                    let _ = reply.send(outcome);
                }
            }
            Event::Check => {
                if let Some(failed) = running.failed_task() {
                    tracing::error!(task = %failed, "A task ended unexpectedly; shutting down.");
                    break Some(failed);
                }
            }
        }
    };
    running.shutdown(GRACE).await;
    match failure {
        None => Ok(()),
        Some(task) => anyhow::bail!("the {task} task ended unexpectedly (see the log)"),
    }
}

/// What woke `run` up.
enum Event {
    Stop(&'static str),
    Reload(Option<oneshot::Sender<ReloadOutcome>>),
    Check,
}

/// The signals `run` reacts to.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
            hup: signal(SignalKind::hangup()).context("listening for SIGHUP")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback_config() -> Config {
        let mut c = Config::embedded();
        c.startup.http_listen = "127.0.0.1:0".parse().unwrap();
        c.startup.statsd_listen = Some("127.0.0.1:0".parse().unwrap());
        c
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn start_reports_the_ports_the_os_chose_and_shutdown_drains() {
        let running = start(loopback_config()).await.unwrap();
        let addrs = running.addrs();
        assert_ne!(addrs.http.port(), 0);
        assert_ne!(addrs.statsd.unwrap().port(), 0);
        let healthz = tokio::task::spawn_blocking(move || {
            crate::client::get(addrs.http, "/healthz", Duration::from_secs(5))
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(healthz.status, 200);
        let report = running.shutdown(GRACE).await;
        assert_eq!(
            report,
            ShutdownReport {
                http: Stopped::Drained,
                pipeline_drained: true,
                delivery_aborted: 0
            }
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_open_connection_is_aborted_at_the_ingest_deadline() {
        use tokio::io::AsyncWriteExt;
        let running = start(loopback_config()).await.unwrap();
        let mut half = tokio::net::TcpStream::connect(running.addrs().http)
            .await
            .unwrap();
        half.write_all(b"GET /metr").await.unwrap();
        // Let the server pick the connection up before shutdown starts.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let report = running.shutdown(GRACE).await;
        assert_eq!(report.http, Stopped::Aborted);
        assert!(report.pipeline_drained);
        assert!(started.elapsed() < GRACE, "{:?}", started.elapsed());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_cannot_remove_the_token_of_a_listener_open_to_the_network() {
        // Started on every interface with a token; the new file binds loopback and has no
        // token. The listener does not move on reload, so dropping the token would open it.
        let env = |n: &str| (n == "T").then(|| "t0ken".to_owned());
        let config = Config::from_yaml_with_env(
            "listen:\n  http: 0.0.0.0:0\n  statsd: 127.0.0.1:0\nauth:\n  bearer_token_env: T\n",
            "t",
            &env,
        )
        .unwrap();
        let mut running = start(config).await.unwrap();
        let dir = std::env::temp_dir().join(format!("skewwatch-exposure-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("open.yaml");
        std::fs::write(&file, "listen:\n  http: 127.0.0.1:9477\n").unwrap();
        let source = ConfigSource {
            path: Some(file),
            ..ConfigSource::default()
        };
        let Err(ConfigError::Invalid { problems, .. }) = running.reload(&source).await else {
            panic!("a reload that drops the token of an open listener was applied")
        };
        assert_eq!(problems[0].field, "listen.http", "{problems:?}");
        assert!(problems[0].why.contains("as bound"), "{problems:?}");
        assert!(
            running.control.token.borrow().is_some(),
            "the token was dropped"
        );
        assert_eq!(
            running.control.metrics.config_last_reload_successful.get(),
            0
        );
        // Unauthenticated ingest is still refused.
        let port = running.addrs().http.port();
        let code = tokio::task::spawn_blocking(move || {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            crate::client::request(
                addr,
                "POST",
                "/api/v1/observations",
                &[("Content-Type", "application/x-ndjson")],
                b"{\"group\":\"g\",\"shard\":\"s\"}\n",
                Duration::from_secs(5),
            )
            .map(|r| r.status)
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(code, 401);
        std::fs::remove_dir_all(&dir).unwrap();
        running.shutdown(GRACE).await;
    }

    #[test]
    fn addresses_are_written_as_json() {
        let dir = std::env::temp_dir().join(format!("skewwatch-addrs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("addrs.json");
        let a = BoundAddrs {
            http: "127.0.0.1:9477".parse().unwrap(),
            statsd: None,
        };
        a.write_to(&path).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"http": "127.0.0.1:9477", "statsd": null})
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
