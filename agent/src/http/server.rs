//! Serving the HTTP listener: an accept loop that gives each connection its own task, and a
//! shutdown that is bounded in time.
//!
//! The agent runs its own loop over hyper's HTTP/1 connections, rather than `axum::serve`,
//! because shutdown must end on time whatever the clients do. On [`Server::shutdown`] the loop
//! stops accepting, every connection is asked to finish its in-flight request and close, and
//! whatever is still open at the deadline (a client that never finished its headers, say) is
//! aborted with the tasks that serve it.

use std::net::SocketAddr;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Pause after a failed `accept` (for example when the process is out of file descriptors),
/// so the loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

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

/// A running HTTP server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Server {
    /// Serves `router` on `listener` until [`Server::shutdown`].
    pub fn spawn(listener: TcpListener, router: Router) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            accept_loop(listener, router, stop.clone())
                .instrument(tracing::info_span!("http", %addr)),
        );
        Ok(Server { addr, stop, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets in-flight requests finish until `deadline`, then aborts what is
    /// left.
    pub async fn shutdown(mut self, deadline: Instant) -> Stopped {
        self.stop.cancel();
        match tokio::time::timeout_at(deadline, &mut self.task).await {
            Ok(Ok(())) => Stopped::Drained,
            Ok(Err(_)) => Stopped::Failed,
            Err(_) => {
                // Dropping the loop's JoinSet aborts every connection task.
                self.task.abort();
                let _ = self.task.await;
                Stopped::Aborted
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, router: Router, stop: CancellationToken) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let span = tracing::debug_span!("connection", %peer);
                    conns.spawn(serve(stream, router.clone(), stop.clone()).instrument(span));
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

/// Serves one connection until the client closes it or shutdown asks it to finish.
async fn serve(stream: TcpStream, router: Router, stop: CancellationToken) {
    let service = TowerToHyperService::new(router);
    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    async fn server(router: Router) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Server::spawn(listener, router).unwrap()
    }

    fn get_blocking(addr: SocketAddr, path: &'static str) -> JoinHandle<u16> {
        tokio::task::spawn_blocking(move || {
            crate::http::client::get(addr, path, Duration::from_secs(10)).map_or(0, |r| r.status)
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
}
