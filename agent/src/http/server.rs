//! Serving the HTTP listener: an accept loop that gives each connection its own task, bounds
//! how many are open and how long a client may take, and a shutdown that is bounded in time.
//!
//! The agent runs its own loop over hyper's HTTP/1 connections, rather than `axum::serve`, so
//! that no client can hold it hostage:
//!
//! - A client has [`Limits::header_read_timeout`] to send a request's headers. hyper starts
//!   that clock whenever it waits for a request, so it is also how long an idle keep-alive
//!   connection stays open. (The whole-request timeout is a layer of the router.)
//! - At most [`Limits::max_connections`] connections are served. Past that, a few more
//!   ([`HEALTH_RESERVE`]) are admitted with a short header timeout and answered only on the
//!   health endpoints, everything else getting 503, so a liveness probe still gets through
//!   while the listener is full; connections past those are closed at once, so they cost no
//!   file descriptor for long.
//! - When its stage stops ([`serve`]) the loop stops accepting, every connection is asked to finish its
//!   in-flight request and close, and whatever is still open at the deadline (a client that
//!   never finished its headers, say) is aborted with the task that serves it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus::{IntCounter, IntGauge, Registry};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::stage::{Stage, StageStopped};
use crate::telemetry::Registrar;

/// Pause after a failed `accept` (for example when the process is out of file descriptors),
/// so the loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Connections admitted past [`Limits::max_connections`] for health checks only.
pub const HEALTH_RESERVE: usize = 8;

/// Header timeout of a health-only connection: a probe sends its request at once.
const HEALTH_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// How many connections, and how much time, a client may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to receive a request's headers (and the keep-alive idle time).
    pub header_read_timeout: Duration,
}

/// What the server counts.
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Connections closed at once because even the health reserve was full.
    pub refused: IntCounter,
}

/// How a server's shutdown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every connection finished before the deadline.
    Drained,
    /// The deadline passed; the connections still open were aborted.
    Aborted,
    /// The accept loop had already ended abnormally (it panicked).
    Failed,
}

/// What the server is built from besides its listener.
#[derive(Clone)]
struct Service {
    /// Every route.
    full: Router,
    /// The health endpoints only, for connections past the limit.
    health: Router,
    limits: Limits,
    metrics: ServerMetrics,
    open: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Stopped {
    /// How the server's stage ended, from its one task's report.
    pub fn of(report: StageStopped) -> Stopped {
        if report.failed > 0 {
            Stopped::Failed
        } else if report.aborted > 0 {
            Stopped::Aborted
        } else {
            Stopped::Drained
        }
    }
}

impl ServerMetrics {
    /// Registers the server's metrics in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<ServerMetrics> {
        let r = Registrar(registry);
        Ok(ServerMetrics {
            open: r.gauge(
                "skewwatch_http_connections_open",
                "HTTP connections open now, including health-check-only ones past http.max_connections.",
            )?,
            refused: r.counter(
                "skewwatch_http_connections_refused_total",
                "HTTP connections closed at once because the listener and its health-check reserve were full.",
            )?,
        })
    }
}

/// Serves `full` on `listener` as the task `HTTP server` of `stage`, until the stage stops;
/// connections past the limit get `health`. Stopping the stage stops accepting and asks every
/// connection to finish; at the stage's deadline the loop is aborted, and with it every
/// connection still open. Returns the bound address.
pub fn serve(
    listener: TcpListener,
    full: Router,
    health: Router,
    limits: Limits,
    metrics: ServerMetrics,
    stage: &mut Stage,
) -> std::io::Result<SocketAddr> {
    let addr = listener.local_addr()?;
    let service = Service {
        full,
        health,
        limits,
        metrics,
        open: Arc::new(AtomicUsize::new(0)),
        stop: stage.stop_token(),
    };
    stage.spawn(
        "HTTP server",
        accept_loop(listener, service).instrument(tracing::info_span!("http", %addr)),
    );
    Ok(addr)
}

async fn accept_loop(listener: TcpListener, service: Service) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = service.stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(conn) = service.admit(stream) else { continue };
                    conns.spawn(conn.instrument(tracing::debug_span!("connection", %peer)));
                }
                Err(error) => {
                    tracing::warn!(%error, "Accepting an HTTP connection failed.");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
            // Reap finished connections so the set holds only open ones.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Counts one open connection while it lives.
struct OpenGuard {
    open: Arc<AtomicUsize>,
    gauge: IntGauge,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.gauge.dec();
    }
}

impl Service {
    /// The task serving `stream`, or `None` when the connection is refused (closed now).
    fn admit(&self, stream: TcpStream) -> Option<impl Future<Output = ()> + Send + 'static> {
        let n = self.open.fetch_add(1, Ordering::Relaxed);
        self.metrics.open.inc();
        let guard = OpenGuard {
            open: self.open.clone(),
            gauge: self.metrics.open.clone(),
        };
        let (router, header_timeout) = if n < self.limits.max_connections {
            (self.full.clone(), self.limits.header_read_timeout)
        } else if n < self.limits.max_connections + HEALTH_RESERVE {
            (self.health.clone(), HEALTH_HEADER_TIMEOUT)
        } else {
            self.metrics.refused.inc();
            return None;
        };
        let stop = self.stop.clone();
        Some(async move {
            serve_connection(stream, router, header_timeout, stop).await;
            drop(guard);
        })
    }
}

/// Serves one connection until the client closes it, a timeout ends it, or shutdown asks it
/// to finish.
async fn serve_connection(
    stream: TcpStream,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let service = TowerToHyperService::new(router);
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.cancelled() => {
            // Finish the request in flight, if any, then close.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "HTTP connection ended with an error.");
    }
}

/// Raises this process's open-file limit to its hard limit, and returns the most connections
/// the listener can serve while leaving [`FD_RESERVE`] descriptors for everything else (alert
/// delivery, the StatsD socket, the state file): a flood of connections must not starve alert
/// delivery of sockets.
pub fn connection_budget(wanted: usize) -> usize {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return wanted;
    };
    let soft = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    let available = usize::try_from(soft)
        .unwrap_or(usize::MAX)
        .saturating_sub(FD_RESERVE + HEALTH_RESERVE);
    if available < wanted {
        tracing::warn!(
            max_connections = wanted,
            open_file_limit = soft,
            serving = available.max(1),
            "The open-file limit is too low for http.max_connections; serving fewer connections."
        );
    }
    wanted.min(available).max(1)
}

/// File descriptors kept free of HTTP connections.
pub const FD_RESERVE: usize = 48;

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::task::JoinHandle;
    use tokio::time::Instant;

    /// A server in a stage of its own.
    struct Server {
        addr: SocketAddr,
        stage: Stage,
    }

    impl Server {
        fn addr(&self) -> SocketAddr {
            self.addr
        }

        async fn shutdown(self, deadline: Instant) -> Stopped {
            Stopped::of(self.stage.stop(deadline).await)
        }
    }

    fn metrics() -> ServerMetrics {
        ServerMetrics {
            open: IntGauge::new("open", "open").unwrap(),
            refused: IntCounter::new("refused", "refused").unwrap(),
        }
    }

    async fn server_with(router: Router, limits: Limits) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let health = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .fallback(|| async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "busy") });
        let mut stage = Stage::new("outputs");
        let addr = serve(listener, router, health, limits, metrics(), &mut stage).unwrap();
        Server { addr, stage }
    }

    async fn server(router: Router) -> Server {
        let limits = Limits {
            max_connections: 64,
            header_read_timeout: Duration::from_secs(10),
        };
        server_with(router, limits).await
    }

    fn get_blocking(addr: SocketAddr, path: &'static str) -> JoinHandle<u16> {
        tokio::task::spawn_blocking(move || {
            crate::client::get(addr, path, Duration::from_secs(10)).map_or(0, |r| r.status)
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_in_flight_request_finishes_during_a_drain() {
        let router = Router::new().route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "done"
            }),
        );
        let s = server(router).await;
        let req = get_blocking(s.addr(), "/slow");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stopped = s.shutdown(Instant::now() + Duration::from_secs(5)).await;
        assert_eq!(stopped, Stopped::Drained);
        assert_eq!(req.await.unwrap(), 200);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_that_never_ends_is_aborted_at_the_deadline() {
        let router = Router::new().route("/stuck", get(std::future::pending::<&'static str>));
        let s = server(router).await;
        let req = get_blocking(s.addr(), "/stuck");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let stopped = s
            .shutdown(Instant::now() + Duration::from_millis(300))
            .await;
        assert_eq!(stopped, Stopped::Aborted);
        assert!(started.elapsed() < Duration::from_secs(5));
        // The client sees the connection close without an answer.
        assert_eq!(req.await.unwrap(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_limit_only_health_checks_are_answered_and_then_nothing() {
        use tokio::io::AsyncWriteExt;
        let router = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/metrics", get(|| async { "m" }));
        let limits = Limits {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(30),
        };
        let s = server_with(router, limits).await;
        let addr = s.addr();
        // Two half-open connections fill the listener.
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /metr").await.unwrap();
            held.push(c);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(get_blocking(addr, "/healthz").await.unwrap(), 200);
        assert_eq!(get_blocking(addr, "/metrics").await.unwrap(), 503);
        // Fill the health reserve too: the next connection is closed unanswered.
        for _ in 0..HEALTH_RESERVE {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /heal").await.unwrap();
            held.push(c);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(get_blocking(addr, "/healthz").await.unwrap(), 0);
        drop(held);
        s.shutdown(Instant::now() + Duration::from_secs(1)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_never_finishes_its_headers_is_cut_off() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = Limits {
            max_connections: 4,
            header_read_timeout: Duration::from_millis(300),
        };
        let s = server_with(Router::new(), limits).await;
        let mut c = TcpStream::connect(s.addr()).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the connection was not closed");
        s.shutdown(Instant::now() + Duration::from_secs(1)).await;
    }
}
