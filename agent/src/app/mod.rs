//! `skewwatch run`, assembled as values.
//!
//! The assembly composes; each stage builds itself from its own validated section, registers
//! its own metrics in the registry it is passed ([`Metrics`]) and spawns its tasks into its
//! [`Stage`]. [`start`] binds every listener, then spawns the stages in the order the data
//! flows: alert delivery, the pipeline, ingest (the StatsD receiver, the `scrape:` jobs, the
//! fleet input), the outputs (the HTTP server). It returns a [`Running`] agent that owns the
//! bound addresses and the four stages, so callers (the CLI, `demo`, tests) ask it where it
//! listens instead of reading logs. [`Running::shutdown`] stops the agent in the
//! order the data flows, every step bounded:
//!
//! 1. readiness turns false;
//! 2. ingest stops: the StatsD thread hands over its last batch, the scrape jobs and the fleet
//!    input are cancelled, and the HTTP ingest endpoints let the bodies being read finish for
//!    at most [`INGEST_DRAIN`], then answer 503;
//! 3. the pipeline takes what ingest queued, adds its open window to the cumulative counters
//!    (unjudged), writes the state file and stops, which ends the dispatcher;
//! 4. alert delivery sends what it owes (each receiver for at most [`DELIVERY_FLUSH`]) while,
//!    if the agent was scraped before the signal, `/metrics` waits for a scrape that began
//!    after step 3, for at most `shutdown.final_scrape_grace_secs` from the signal (the
//!    [`FinalScrape`] of the report);
//! 5. the HTTP server stops accepting and lets in-flight requests finish for at most
//!    [`INGEST_DRAIN`]; whatever is still running is aborted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus::Registry;
use serde::{Deserialize, Serialize};
use skewwatch_detectors::alert::Alert;
use skewwatch_detectors::engine::Engine;
use skewwatch_detectors::snapshot::WindowSnapshot;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::alerting::{AlertingError, DeliveryMetrics, Receivers, StartContext};
use crate::clock::{Clock, SystemClock};
use crate::config::{ConfigError, Secret};
use crate::http::admin::ReloadOutcome;
use crate::http::server::{ServerMetrics, Stopped};
use crate::http::{self, BoundHttp};
use crate::ingest::IngestQueue;
use crate::ingest::fleet::{self, PreparedFleet};
use crate::ingest::scrape::{self, ScrapeMetrics};
use crate::ingest::statsd::receiver::{BoundStatsd, StatsdError, StatsdMetrics};
use crate::outputs::history::Recorder;
use crate::outputs::metrics::Scrapes;
use crate::outputs::totals::{Accumulator, TotalsConfig};
use crate::pipeline::{Control, EvaluationHook, Pipeline, PipelineChannels, PipelineMetrics};
use crate::stage::Stage;
use crate::state::{LoadError, StateStore};
use crate::telemetry::{IngestMetrics, Registrar};

pub mod config;
pub mod reload;

pub use config::{Config, Live, ReloadClass, ShutdownConfig, Startup};

use reload::ReloadMetrics;

/// How long ingest, the pipeline and alert delivery may take to stop, from the signal; the
/// wait for a final scrape (`shutdown.final_scrape_grace_secs`) runs beside delivery, and the
/// HTTP server's [`INGEST_DRAIN`] comes after both.
pub const GRACE: Duration = Duration::from_secs(10);

/// How long the HTTP ingest bodies being read may take to be handed over once ingest stops
/// (within [`GRACE`], leaving the rest to the pipeline and alert delivery), and how long
/// in-flight requests may take to finish once the HTTP server stops, at the end.
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

/// Why the agent could not start. Each is reported before any task runs (or, for the ones
/// that start a thread or a server, with nothing else left running).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A stage's metric could not be registered: two stages claimed one name (a bug).
    #[error("registering the self-metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Alert delivery's HTTP client could not be built.
    #[error("preparing alert delivery: {0}")]
    Delivery(#[from] AlertingError),
    /// The HTTP listener could not be bound.
    #[error("binding the HTTP listener on {addr}: {source}; free the port or change listen.http")]
    HttpBind {
        /// The address asked for.
        addr: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// The HTTP server could not start on its bound listener.
    #[error("starting the HTTP server: {0}")]
    Http(std::io::Error),
    /// The StatsD input could not bind or start.
    #[error(transparent)]
    Statsd(#[from] StatsdError),
}

/// Why `run` ended with an error; the process exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The agent did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The bound addresses could not be written where `--listen-addresses-file` says.
    #[error("writing the bound addresses to {path}: {source}")]
    AddressesFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A signal handler could not be installed.
    #[error("listening for {signal}: {source}")]
    Signal {
        /// The signal.
        signal: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// A watched task ended although the agent was not stopping; the supervisor should
    /// restart the process.
    #[error("the {0} task ended unexpectedly (see the log)")]
    TaskFailed(String),
}

/// Every stage's metrics, each registered by its stage in the one registry `/metrics`
/// renders: the assembly passes the registry and keeps what it hands to the stages.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    ingest: IngestMetrics,
    statsd: StatsdMetrics,
    scrape: ScrapeMetrics,
    pipeline: PipelineMetrics,
    delivery: DeliveryMetrics,
    server: ServerMetrics,
    reload: ReloadMetrics,
}

impl Metrics {
    /// Lets every stage register its metrics in `registry`, and the agent its build
    /// information.
    pub fn register(registry: Registry) -> prometheus::Result<Metrics> {
        Registrar(&registry)
            .gauges(
                "skewwatch_build_info",
                "Build information; always 1.",
                &["version"],
            )?
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let ingest = IngestMetrics::register(&registry)?;
        Ok(Metrics {
            statsd: StatsdMetrics::register(&registry, &ingest)?,
            scrape: ScrapeMetrics::register(&registry, &ingest)?,
            pipeline: PipelineMetrics::register(&registry)?,
            delivery: DeliveryMetrics::register(&registry)?,
            server: ServerMetrics::register(&registry)?,
            reload: ReloadMetrics::register(&registry)?,
            ingest,
            registry,
        })
    }
}

/// Every socket of a validated configuration, bound, and everything start-up prepares before
/// it spawns a task: what [`bind`] returns and [`Bound::spawn`] starts.
#[derive(Debug)]
pub struct Bound {
    config: Config,
    addrs: BoundAddrs,
    http: BoundHttp,
    statsd: Option<BoundStatsd>,
    metrics: Metrics,
    receivers: Receivers,
    /// The fleet input, prepared (its history read) on a fleet instance.
    fleet: Option<PreparedFleet>,
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
    /// The metrics a rebuilt delivery counts in, and the reload's own.
    metrics: Metrics,
}

/// The views the pipeline publishes, as `demo` and the tests read them.
#[derive(Debug)]
struct Views {
    snapshots: watch::Receiver<Arc<WindowSnapshot>>,
    alerts: watch::Receiver<Arc<Vec<Alert>>>,
}

/// A running agent: its bound addresses and its stages, stopped in the order the data flows.
#[derive(Debug)]
pub struct Running {
    addrs: BoundAddrs,
    /// The StatsD receiver thread, the `scrape:` jobs and the fleet input.
    ingest: Stage,
    /// The HTTP server, which serves the views, the ingest endpoints and the admin endpoint.
    outputs: Stage,
    /// The task that owns the engine.
    pipeline: Stage,
    /// One task per alert receiver (those a reload replaced included, until they finish).
    delivery: Stage,
    /// The latest snapshot and alerts.
    views: Views,
    /// What a reload changes.
    control: Controls,
    /// Closes the HTTP ingest endpoints when ingest stops.
    http_ingest: http::IngestCloser,
    /// The reads of `/metrics`, which shutdown waits on for a last scrape.
    scrapes: Scrapes,
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
    /// Whether `/metrics` was read after the last counts were published.
    pub final_scrape: FinalScrape,
}

/// How the wait for a scrape of the last counts ended (step 4 of [`Running::shutdown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalScrape {
    /// `shutdown.final_scrape_grace_secs` is 0: no wait.
    Disabled,
    /// Nobody had read `/metrics` before the signal: nobody is expected to, no wait.
    NeverScraped,
    /// A scrape that began after the last counts were published was served.
    Scraped,
    /// No such scrape came within the grace; what was counted since the last scrape is lost
    /// to the TSDB.
    GraceExpired,
}

impl FinalScrape {
    /// How the log says it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinalScrape::Disabled => "disabled",
            FinalScrape::NeverScraped => "never scraped",
            FinalScrape::Scraped => "scraped",
            FinalScrape::GraceExpired => "grace expired",
        }
    }
}

/// Binds every listener of a validated configuration and prepares what the tasks need
/// (every stage's metrics, alert delivery's HTTP client, the fleet input's history); spawns
/// nothing, so a port in use or a bad receiver fails before anything runs.
pub async fn bind(config: Config) -> Result<Bound, StartError> {
    let receivers = Receivers::prepare(&config.live.alerting)?;
    let metrics = Metrics::register(Registry::new())?;
    let listen = config.startup.http_listen;
    let http = config
        .startup
        .http
        .bind(
            listen,
            &config.startup.otlp,
            &metrics.ingest,
            &metrics.server,
        )
        .await
        .map_err(|source| StartError::HttpBind {
            addr: listen,
            source,
        })?;
    let statsd = match config.startup.statsd_listen {
        Some(addr) => Some(config.startup.statsd.bind(addr, metrics.statsd.clone())?),
        None => None,
    };
    let addrs = BoundAddrs {
        http: http.addr(),
        statsd: statsd.as_ref().map(BoundStatsd::addr),
    };
    let fleet = match &config.startup.fleet {
        Some(fleet) => Some(
            fleet
                .prepare(
                    config.startup.window.window_secs,
                    SystemClock.now(),
                    &metrics.registry,
                    &metrics.ingest,
                )
                .await?,
        ),
        None => None,
    };
    Ok(Bound {
        config,
        addrs,
        http,
        statsd,
        metrics,
        receivers,
        fleet,
    })
}

/// Binds and spawns: [`bind`] then [`Bound::spawn`].
pub async fn start(config: Config) -> Result<Running, StartError> {
    bind(config).await?.spawn()
}

impl Bound {
    /// Where the listeners are bound.
    pub fn addrs(&self) -> BoundAddrs {
        self.addrs
    }

    /// Spawns every stage, in the order the data flows: alert delivery, the pipeline, ingest
    /// (the StatsD thread, the `scrape:` jobs, the fleet input), then the outputs (the HTTP
    /// server). Each stage builds itself from its part of the configuration; this only
    /// connects them.
    pub fn spawn(self) -> Result<Running, StartError> {
        let Bound {
            config,
            addrs,
            http,
            statsd,
            metrics,
            receivers,
            mut fleet,
        } = self;
        let backfill = fleet
            .as_mut()
            .map(PreparedFleet::take_backfill)
            .unwrap_or_default();
        let gate = fleet.as_ref().map(PreparedFleet::gate);
        let Built {
            mut pipeline,
            channels,
            views,
        } = build_pipeline(&config, &metrics, backfill, gate);

        let (hook, delivery) = spawn_delivery(receivers, &config, addrs, &metrics.delivery);
        pipeline.set_delivery(hook);
        let mut pipeline_stage = Stage::new("pipeline");
        let stop = pipeline_stage.stop_token();
        pipeline_stage.spawn("pipeline", pipeline.run(stop));

        let (ingest, fleet_status) =
            spawn_ingest(&config.startup, statsd, fleet, &channels.queue, &metrics)?;

        let scrapes = views.scrapes.clone();
        let outputs = http
            .spawn(http::Wiring {
                queue: channels.queue,
                views,
                heartbeat: channels.heartbeat,
                fleet: fleet_status,
                token: config.live.token.clone(),
            })
            .map_err(StartError::Http)?;
        outputs.ready.store(true, Ordering::Release);
        Ok(Running {
            addrs,
            ingest,
            outputs: outputs.stage,
            pipeline: pipeline_stage,
            delivery,
            views: Views {
                snapshots: channels.snapshots,
                alerts: channels.alerts,
            },
            control: Controls {
                config,
                token: outputs.token,
                reload_requests: outputs.reload_requests,
                pipeline: channels.control,
                ready: outputs.ready,
                metrics,
            },
            http_ingest: outputs.ingest,
            scrapes,
        })
    }
}

/// The ingest stage: the StatsD receiver (when it listens), the `scrape:` jobs and the fleet
/// input (on a fleet instance), each started by itself into one stage that feeds `queue`;
/// with what `/readyz` reads of the fleet input.
fn spawn_ingest(
    startup: &Startup,
    statsd: Option<BoundStatsd>,
    fleet: Option<PreparedFleet>,
    queue: &IngestQueue,
    metrics: &Metrics,
) -> Result<(Stage, Option<fleet::Status>), StartError> {
    let mut ingest = Stage::new("ingest");
    if let Some(statsd) = statsd {
        statsd.spawn(queue.clone(), &mut ingest)?;
    }
    scrape::spawn_jobs(&startup.scrape, queue, &metrics.scrape, &mut ingest);
    let fleet_status = fleet.map(|f| {
        let status = f.status();
        f.spawn(queue.clone(), SystemClock, &mut ingest);
        status
    });
    Ok((ingest, fleet_status))
}

/// Alert delivery for `config`'s receivers, in a stage of its own, and the dispatcher's
/// evaluation hook for the pipeline (`None` without receivers). The tasks end after the
/// pipeline: they stop once it drops the dispatcher and they have flushed.
fn spawn_delivery(
    receivers: Receivers,
    config: &Config,
    addrs: BoundAddrs,
    metrics: &DeliveryMetrics,
) -> (Option<EvaluationHook>, Stage) {
    let external_url = config
        .live
        .alerting
        .external_url
        .clone()
        .unwrap_or_else(|| format!("http://{}/api/v1/alerts", addrs.http));
    let (mut dispatcher, stage) = receivers.spawn(StartContext {
        external_url,
        window_secs: config.startup.window.window_secs,
        metrics,
        flush_timeout: DELIVERY_FLUSH,
    });
    if dispatcher.is_empty() {
        return (None, stage);
    }
    let hook: EvaluationHook = Box::new(move |ev| dispatcher.offer(ev));
    (Some(hook), stage)
}

/// What [`build_pipeline`] makes.
struct Built {
    pipeline: Pipeline<SystemClock>,
    channels: PipelineChannels,
    /// What the pipeline publishes, as the read endpoints render it.
    views: http::ViewState,
}

/// The pipeline around an engine that carries on from the state file (when one is set), with
/// the cumulative counters and the live view's history hooked in, and the views it publishes.
fn build_pipeline(
    config: &Config,
    metrics: &Metrics,
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
        metrics.pipeline.clone(),
        config.startup.state.clone(),
    );
    let (mut totals, totals_rx) = Accumulator::new(TotalsConfig::from_parts(
        &config.startup.window,
        &config.startup.exposition,
    ));
    pipeline.on_window(move |snap| totals.add(snap));
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
    let views = http::ViewState {
        registry: metrics.registry.clone(),
        snapshots: channels.snapshots.clone(),
        alerts: channels.alerts.clone(),
        totals: totals_rx,
        history,
        exported_keys: config.startup.window.top_keys,
        window_secs,
        scrapes: Scrapes::default(),
    };
    Built {
        pipeline,
        channels,
        views,
    }
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

impl Running {
    /// Where the listeners are bound.
    pub fn addrs(&self) -> BoundAddrs {
        self.addrs
    }

    /// The latest closed window, updated as windows close.
    pub fn snapshots(&self) -> watch::Receiver<Arc<WindowSnapshot>> {
        self.views.snapshots.clone()
    }

    /// The active alerts after the latest evaluation.
    pub fn alerts(&self) -> watch::Receiver<Arc<Vec<Alert>>> {
        self.views.alerts.clone()
    }

    /// A long-lived task that has ended although shutdown has not begun (a panic, or a loop
    /// that returned): its name and stage. Supervised tasks (the `scrape:` jobs) restart by
    /// themselves and show up here only if their supervisor ends.
    pub fn failed_task(&self) -> Option<String> {
        [&self.ingest, &self.outputs, &self.pipeline, &self.delivery]
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

    /// Rebuilds alert delivery for the configuration in force: new receiver tasks take the
    /// pipeline's evaluations; the old ones finish what they owe and stop.
    async fn replace_delivery(&mut self) {
        let receivers = match Receivers::prepare(&self.control.config.live.alerting) {
            Ok(r) => r,
            Err(error) => {
                tracing::error!(%error, "Alert delivery could not be rebuilt; keeping the old one.");
                return;
            }
        };
        let (hook, fresh) = spawn_delivery(
            receivers,
            &self.control.config,
            self.addrs,
            &self.control.metrics.delivery,
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

    /// Stops the agent in order (see the module documentation): ingest, the pipeline and
    /// delivery within `grace`, `/metrics` kept up for a last scrape within
    /// `shutdown.final_scrape_grace_secs` (both from now), then the HTTP server within
    /// [`INGEST_DRAIN`].
    pub async fn shutdown(self, grace: Duration) -> ShutdownReport {
        let signalled = Instant::now();
        let deadline = signalled + grace;
        let final_grace = self.control.config.startup.shutdown.final_scrape_grace;
        // A scrape during the shutdown itself does not count: only a scraper that was there
        // before is expected to come back.
        let scraped_before = self.scrapes.begun() > 0;
        self.control.ready.store(false, Ordering::Release);

        // Ingest first, so the pipeline drains everything it will ever get. A scrape in flight
        // is abandoned: its data stays in the target for the next run to read. The HTTP server
        // keeps serving the read endpoints; only its ingest endpoints close.
        let ingest = self.ingest.stop(deadline);
        let bodies = self
            .http_ingest
            .close(deadline.min(Instant::now() + INGEST_DRAIN));
        let (ingest, ()) = tokio::join!(ingest, bodies);
        if ingest.aborted > 0 {
            tracing::warn!(tasks = ingest.aborted, "Ingest did not stop in time.");
        }

        let pipeline = self.pipeline.stop(deadline).await;
        // The pipeline has published its last counts: a read numbered from here on has them.
        let first = self.scrapes.begun();
        let wait = wait_for_final_scrape(
            &self.scrapes,
            first,
            final_grace,
            scraped_before,
            signalled + final_grace,
        );
        let (delivery, final_scrape) = tokio::join!(self.delivery.stop(deadline), wait);
        let http = Stopped::of(self.outputs.stop(Instant::now() + INGEST_DRAIN).await);
        let report = ShutdownReport {
            http,
            pipeline_drained: pipeline.aborted == 0,
            delivery_aborted: delivery.aborted,
            final_scrape,
        };
        tracing::info!(?report, "Stopped.");
        report
    }
}

/// Step 4 of [`Running::shutdown`]: waits, until `until`, for a read of `/metrics` numbered
/// `first` or later, when one is owed: the agent was scraped before the signal and the
/// grace is not zero. Logs the wait's start and end.
async fn wait_for_final_scrape(
    scrapes: &Scrapes,
    first: u64,
    grace: Duration,
    scraped_before: bool,
    until: Instant,
) -> FinalScrape {
    if grace.is_zero() {
        return FinalScrape::Disabled;
    }
    if !scraped_before {
        tracing::info!("Not waiting for a final scrape: /metrics was never read.");
        return FinalScrape::NeverScraped;
    }
    let started = Instant::now();
    tracing::info!(
        grace_secs = grace.as_secs_f64(),
        "Waiting for a final scrape of the last counts; /readyz answers 503, /metrics answers."
    );
    let ended = match tokio::time::timeout_at(until, scrapes.served_since(first)).await {
        Ok(()) => FinalScrape::Scraped,
        Err(_) => FinalScrape::GraceExpired,
    };
    tracing::info!(
        ended = ended.as_str(),
        waited_secs = started.elapsed().as_secs_f64(),
        "Final scrape wait over."
    );
    ended
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
) -> Result<(), RunError> {
    let window_secs = config.startup.window.window_secs;
    let mut running = start(config).await?;
    let addrs = running.addrs();
    if let Some(path) = &options.addresses_file {
        addrs
            .write_to(path)
            .map_err(|source| RunError::AddressesFile {
                path: path.clone(),
                source,
            })?;
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
        Some(task) => Err(RunError::TaskFailed(task)),
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
    fn new() -> Result<Signals, RunError> {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |signal_name: &'static str, kind| {
            signal(kind).map_err(|source| RunError::Signal {
                signal: signal_name,
                source,
            })
        };
        Ok(Signals {
            term: listen("SIGTERM", SignalKind::terminate())?,
            int: listen("SIGINT", SignalKind::interrupt())?,
            hup: listen("SIGHUP", SignalKind::hangup())?,
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
                delivery_aborted: 0,
                final_scrape: FinalScrape::NeverScraped,
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
        assert_eq!(running.control.metrics.reload.successful(), 0);
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
