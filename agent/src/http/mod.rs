//! The HTTP listener: `/metrics`, `/healthz`, `/readyz`, `/api/v1/status`,
//! `/api/v1/alerts`, `/api/v1/history`, the live view at `/`, `POST /api/v1/observations`,
//! `POST /v1/traces`, `POST /v1/metrics` and `POST /-/reload`.
//!
//! - [`server`]: the accept loop, its connection limit and timeouts, and the bounded shutdown
//!   of connections.
//! - [`guard`]: what every request passes first: the whole-request timeout, the bearer token
//!   (checked before any body is read) and the content type of POST bodies.
//! - [`ingest`]: `POST /api/v1/observations`.
//! - [`otlp`]: the OTLP/HTTP receiver, `POST /v1/traces` and `POST /v1/metrics`.
//! - [`status`]: the bounded `GET /api/v1/status`.
//! - [`alerts`]: `GET /api/v1/alerts`.
//! - [`history`]: the bounded `GET /api/v1/history`, from the history ring.
//! - [`ui`]: the live view, `GET /` and its script and style sheet, embedded in the binary.
//! - [`admin`]: `POST /-/reload`.
//!
//! The stage builds itself as the inputs do: [`HttpConfig::bind`] binds the listener before
//! any task runs, and [`BoundHttp::spawn`] builds what the handlers share from the other
//! stages' ends ([`Wiring`]) and starts the server, handing back the outputs [`Stage`] and the
//! handles the agent keeps on it ([`Outputs`]).
//!
//! What the handlers share is split by concern ([`AppState`]): ingest ([`IngestState`]), the
//! published views ([`ViewState`]) and control ([`ControlState`]). A handler extracts only the
//! part it uses (`State<ViewState>`), which axum derives from the whole through `FromRef`.
//!
//! Read endpoints render the latest immutable snapshot (and `/api/v1/alerts` the latest active
//! alerts) in the HTTP task that asks, never on the pipeline task.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus::Registry;
use skewwatch_detectors::alert::Alert;
use skewwatch_detectors::snapshot::WindowSnapshot;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::config::Secret;
use crate::ingest::IngestQueue;
use crate::ingest::otlp::Mapping;
use crate::outputs::history::History;
use crate::outputs::metrics;
use crate::outputs::totals::Totals;
use crate::pipeline::Heartbeat;
use crate::stage::Stage;
use crate::telemetry::{IngestMetrics, Source, SourceMetrics};

pub use config::HttpConfig;

pub mod admin;
pub mod alerts;
pub mod config;
pub mod guard;
pub mod history;
pub mod ingest;
pub mod otlp;
pub mod server;
pub mod status;
pub mod ui;

/// What the handlers share, by concern. Handlers take one part each (see [`FromRef`]).
#[derive(Clone)]
pub struct AppState {
    /// What the ingest endpoints need.
    pub ingest: IngestState,
    /// The published views the read endpoints render.
    pub views: ViewState,
    /// The token, readiness and reload.
    pub control: ControlState,
}

/// What `POST /api/v1/observations`, `POST /v1/traces` and `POST /v1/metrics` share.
#[derive(Clone)]
pub struct IngestState {
    /// Where ingested batches go.
    pub queue: IngestQueue,
    /// Ingest bodies read and parsed at once; closed when the agent stops taking bodies.
    pub permits: Arc<Semaphore>,
    /// How many permits there are: all of them back means no body is being read.
    pub max_bodies: usize,
    /// Largest request body.
    pub body_limit: usize,
    /// The `source="http"` ingest counters (NDJSON bodies); OTLP counts in [`otlp::OtlpState`].
    pub metrics: SourceMetrics,
    /// The OTLP receiver's mapping, counters and cumulative-series map.
    pub otlp: otlp::OtlpState,
}

/// The views the pipeline publishes, as the read endpoints (`/metrics`, `/api/v1/*`) render
/// them.
#[derive(Clone)]
pub struct ViewState {
    /// Self-metrics registry.
    pub registry: Registry,
    /// Latest closed window.
    pub snapshots: watch::Receiver<Arc<WindowSnapshot>>,
    /// Active alerts after the latest evaluation.
    pub alerts: watch::Receiver<Arc<Vec<Alert>>>,
    /// The cumulative counters after the latest window.
    pub totals: watch::Receiver<Arc<Totals>>,
    /// The live view's history ring after the latest window.
    pub history: watch::Receiver<Arc<History>>,
    /// Top keys exported per group.
    pub exported_keys: usize,
    /// Window length, reported by the status and history endpoints.
    pub window_secs: f64,
    /// The reads of `/metrics`, which a stopping agent waits on.
    pub scrapes: metrics::Scrapes,
}

/// What the guards, the health endpoints and `POST /-/reload` share.
#[derive(Clone)]
pub struct ControlState {
    /// Bearer token required for ingest and admin endpoints, if any; replaced on reload.
    pub token: watch::Receiver<Option<Secret>>,
    /// True once every listener is bound, false again once shutdown starts.
    pub ready: Arc<AtomicBool>,
    /// When the pipeline last closed a window.
    pub heartbeat: Heartbeat,
    /// Where `POST /-/reload` sends its request.
    pub reload: admin::ReloadRequests,
    /// The fleet input's state, on a fleet instance: `/readyz` reports it.
    pub fleet: Option<crate::ingest::fleet::Status>,
}

impl IngestState {
    /// What the ingest endpoints share, within the limits of `config`: the queue, their
    /// counters (resolved from `ingest`) and the OTLP `mapping`.
    pub fn new(
        config: &HttpConfig,
        mapping: &Mapping,
        queue: IngestQueue,
        ingest: &IngestMetrics,
    ) -> IngestState {
        IngestState {
            queue,
            permits: Arc::new(Semaphore::new(config.max_concurrent_ingest)),
            max_bodies: config.max_concurrent_ingest,
            body_limit: config.body_limit_bytes,
            metrics: ingest.source(Source::Http).clone(),
            otlp: otlp::OtlpState::new(mapping, crate::ingest::otlp::OtlpMetrics::new(ingest)),
        }
    }
}

/// The HTTP listener, bound, with what the stage needs of the configuration and the
/// registry: what [`HttpConfig::bind`] gives and [`BoundHttp::spawn`] starts.
#[derive(Debug)]
pub struct BoundHttp {
    listener: TcpListener,
    addr: SocketAddr,
    config: HttpConfig,
    /// The `otlp:` section: how the OTLP endpoints map spans and points to observations.
    otlp: Mapping,
    ingest: IngestMetrics,
    server: server::ServerMetrics,
}

/// What the HTTP stage serves that other stages make: the pipeline's ends and the fleet
/// input's state.
pub struct Wiring {
    /// Where the ingest endpoints hand their batches.
    pub queue: IngestQueue,
    /// What the pipeline publishes, for the read endpoints.
    pub views: ViewState,
    /// When the pipeline last closed a window, for `/readyz`.
    pub heartbeat: Heartbeat,
    /// The fleet input's state, on a fleet instance, for `/readyz`.
    pub fleet: Option<crate::ingest::fleet::Status>,
    /// The bearer token in force at start-up.
    pub token: Option<Secret>,
}

/// The running outputs stage and the handles the agent keeps on it.
#[derive(Debug)]
pub struct Outputs {
    /// The accept loop, a watched task.
    pub stage: Stage,
    /// Closes the ingest endpoints at shutdown while the server goes on.
    pub ingest: IngestCloser,
    /// What `/readyz` reports: false until the agent sets it, and again once shutdown starts.
    pub ready: Arc<AtomicBool>,
    /// Replaces the token the guards check (a reload).
    pub token: watch::Sender<Option<Secret>>,
    /// The requests of `POST /-/reload`.
    pub reload_requests: mpsc::Receiver<tokio::sync::oneshot::Sender<admin::ReloadOutcome>>,
}

impl HttpConfig {
    /// Binds the HTTP listener at `addr`, the first half of the stage's start: a port in use
    /// fails here, before any task runs. `otlp` is the OTLP endpoints' mapping; the stage
    /// counts in `ingest` and `server`.
    pub async fn bind(
        &self,
        addr: SocketAddr,
        otlp: &Mapping,
        ingest: &IngestMetrics,
        server: &server::ServerMetrics,
    ) -> std::io::Result<BoundHttp> {
        let listener = TcpListener::bind(addr).await?;
        Ok(BoundHttp {
            addr: listener.local_addr()?,
            listener,
            config: self.clone(),
            otlp: otlp.clone(),
            ingest: ingest.clone(),
            server: server.clone(),
        })
    }
}

impl BoundHttp {
    /// Where the listener is bound (the port the OS chose when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The outputs stage: builds what the handlers share from `wiring` and serves it on the
    /// bound listener within the `http:` limits (the connection limit the open-file limit
    /// allows), the accept loop a watched task of the stage. Not ready until the agent sets
    /// [`Outputs::ready`].
    pub fn spawn(self, wiring: Wiring) -> std::io::Result<Outputs> {
        let (token_tx, token) = watch::channel(wiring.token);
        let (reload, reload_requests) = mpsc::channel(4);
        let ready = Arc::new(AtomicBool::new(false));
        let state = AppState {
            ingest: IngestState::new(&self.config, &self.otlp, wiring.queue, &self.ingest),
            views: wiring.views,
            control: ControlState {
                token,
                ready: ready.clone(),
                heartbeat: wiring.heartbeat,
                reload,
                fleet: wiring.fleet,
            },
        };
        let closer = state.ingest.closer();
        let limits = server::Limits {
            max_connections: server::connection_budget(self.config.max_connections),
            header_read_timeout: self.config.header_read_timeout,
        };
        let mut stage = Stage::new("outputs");
        server::serve(
            self.listener,
            router(state.clone(), self.config.request_timeout),
            health_router(state),
            limits,
            self.server,
            &mut stage,
        )?;
        Ok(Outputs {
            stage,
            ingest: closer,
            ready,
            token: token_tx,
            reload_requests,
        })
    }
}

impl IngestState {
    /// What stops the ingest endpoints at shutdown while the server goes on.
    pub fn closer(&self) -> IngestCloser {
        IngestCloser {
            permits: self.permits.clone(),
            max_bodies: self.max_bodies,
        }
    }
}

/// Closes the HTTP ingest endpoints while the server goes on serving the read endpoints (a
/// stopping agent that waits for its last scrape).
#[derive(Debug, Clone)]
pub struct IngestCloser {
    permits: Arc<Semaphore>,
    max_bodies: usize,
}

impl IngestCloser {
    /// Waits until the bodies being read have been handed to the queue, until `deadline` at
    /// most, then answers every later one 503, so that nothing is taken after the pipeline
    /// has drained the queue. A body still being read at the deadline is handed over or
    /// refused whole (a closed queue refuses it), never counted without being taken.
    pub async fn close(&self, deadline: tokio::time::Instant) {
        let all = u32::try_from(self.max_bodies).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout_at(deadline, self.permits.acquire_many(all)).await;
        self.permits.close();
    }
}

impl FromRef<AppState> for IngestState {
    fn from_ref(s: &AppState) -> Self {
        s.ingest.clone()
    }
}

impl FromRef<AppState> for ViewState {
    fn from_ref(s: &AppState) -> Self {
        s.views.clone()
    }
}

impl FromRef<AppState> for ControlState {
    fn from_ref(s: &AppState) -> Self {
        s.control.clone()
    }
}

/// The routes of a connection within the limit: everything, behind the guards.
pub fn router(state: AppState, request_timeout: std::time::Duration) -> Router {
    let guarded = Router::new()
        .route("/api/v1/observations", post(ingest::observations))
        .route("/v1/traces", post(otlp::traces))
        .route("/v1/metrics", post(otlp::metrics))
        .route_layer(middleware::from_fn_with_state(
            state.control.clone(),
            guard::require_token,
        ))
        .route_layer(middleware::from_fn(guard::require_json_body));
    // `POST /-/reload` reads no body: like Prometheus' and Alertmanager's, it needs no content
    // type (`curl -X POST` sends none), but a form post, which a browser sends across sites
    // without asking, is still refused.
    let admin = Router::new()
        .route("/-/reload", post(admin::reload))
        .route_layer(middleware::from_fn_with_state(
            state.control.clone(),
            guard::require_token,
        ))
        .route_layer(middleware::from_fn(guard::refuse_form_body));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/status", get(status::status))
        .route("/api/v1/alerts", get(alerts::alerts))
        .route("/api/v1/history", get(history::history))
        .merge(ui::routes())
        .merge(guarded)
        .merge(admin)
        .merge(health_routes())
        .layer(middleware::from_fn_with_state(
            request_timeout,
            guard::request_timeout,
        ))
        .with_state(state)
}

/// The routes of a connection past the limit: the health endpoints, and 503 for the rest.
pub fn health_router(state: AppState) -> Router {
    health_routes()
        .fallback(|| async {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONNECTION, "close")],
                "too many connections; only health checks are answered\n",
            )
        })
        .with_state(state)
}

fn health_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/-/healthy", get(healthz))
        .route("/readyz", get(readyz))
        .route("/-/ready", get(readyz))
}

/// `GET /metrics`: the page [`metrics::render`] writes from the latest views.
async fn metrics(State(v): State<ViewState>) -> Response {
    // Numbered before any view is read: see `Scrapes`.
    let read = v.scrapes.begin();
    let snap = v.snapshots.borrow().clone();
    let alerts = v.alerts.borrow().clone();
    let totals = v.totals.borrow().clone();
    let body = metrics::render(&v.registry, &snap, &alerts, &totals, v.exported_keys);
    v.scrapes.served(read);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(metrics::CONTENT_TYPE),
        )],
        body,
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready while the listeners are up and the pipeline keeps closing windows: one that has not
/// closed a window for [`Heartbeat::STALE_WINDOWS`] windows is stuck, and a stuck agent should
/// be taken out of service.
async fn readyz(State(c): State<ControlState>) -> Response {
    if !c.ready.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response();
    }
    let fleet = c.fleet.as_ref().map(|f| f.readiness());
    if let Some(Err(why)) = fleet {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response();
    }
    match c.heartbeat.stale() {
        None => match fleet {
            Some(Ok(line)) => (StatusCode::OK, format!("ready\n{line}\n")).into_response(),
            _ => (StatusCode::OK, "ready\n").into_response(),
        },
        Some(since) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the pipeline has not closed a window for {:.1} s\n",
                since.as_secs_f64()
            ),
        )
            .into_response(),
    }
}
