//! `skewwatch run`: the agent, assembled. Reads as a story: config (already validated), secrets,
//! metrics, bind every listener, start alert delivery, the pipeline, the StatsD thread and the
//! HTTP server, become ready, wait for SIGTERM or SIGINT, then drain in order (ingest, pipeline,
//! alert delivery) with a grace timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use prometheus::Registry;
use skewwatch_detectors::engine::Engine;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alerting::{self, Receivers, StartContext};
use crate::config::{Config, TokenSource};
use crate::http::{self, AppState};
use crate::ingest::udp;
use crate::pipeline::{Clock, Pipeline, SystemClock};
use crate::telemetry::SelfMetrics;

/// How long shutdown waits for the tasks to finish before giving up.
const GRACE: Duration = Duration::from_secs(10);

/// How long alert delivery keeps delivering what it owes after the pipeline stopped; within
/// [`GRACE`], leaving room for the stages before it.
const DELIVERY_FLUSH: Duration = Duration::from_secs(7);

/// Reads an environment variable. The one place the agent reads the environment, so tests
/// pass their own lookup instead of mutating the process environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Resolves the bearer token; an empty token is an error rather than "no auth".
pub fn read_token(source: &TokenSource, env: EnvLookup<'_>) -> anyhow::Result<Option<Arc<str>>> {
    let token = match source {
        TokenSource::None => return Ok(None),
        TokenSource::File(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading auth.bearer_token_file {}", path.display()))?,
        TokenSource::Env(name) => env(name)
            .with_context(|| format!("auth.bearer_token_env: variable {name} is not set"))?,
    };
    let token = token.trim();
    if token.is_empty() {
        bail!("the configured bearer token is empty");
    }
    Ok(Some(token.into()))
}

/// Where the listeners ended up (ports chosen by the OS when 0 was asked).
#[derive(Debug, Clone, Copy)]
pub struct BoundAddrs {
    /// HTTP listener.
    pub http: SocketAddr,
    /// StatsD listener.
    pub statsd: Option<SocketAddr>,
}

/// Runs the agent until SIGTERM or SIGINT, or until `cancel` fires.
pub async fn run(config: Config, cancel: CancellationToken) -> anyhow::Result<()> {
    let token = read_token(&config.token, &process_env)?;
    let receivers =
        Receivers::prepare(&config.alerting, &process_env).context("preparing alert delivery")?;
    let registry = Registry::new();
    let metrics = SelfMetrics::register(&registry).context("registering self-metrics")?;

    let http_listener = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("binding the HTTP listener on {}", config.http_listen))?;
    let statsd_socket = match config.statsd_listen {
        Some(addr) => Some(
            udp::bind(addr, config.statsd_receive_buffer_bytes)
                .with_context(|| format!("binding the StatsD listener on {addr}"))?,
        ),
        None => None,
    };
    let bound = BoundAddrs {
        http: http_listener.local_addr()?,
        statsd: statsd_socket.as_ref().map(|s| s.local_addr()).transpose()?,
    };

    let clock = SystemClock;
    let engine = Engine::new(config.engine.clone(), clock.now());
    let (mut pipeline, channels) =
        Pipeline::new(engine, clock, config.ingest_queue_batches, metrics.clone());
    let ready = Arc::new(AtomicBool::new(false));
    let state = AppState {
        registry,
        metrics: metrics.clone(),
        snapshots: channels.snapshots.clone(),
        alerts: channels.alerts.clone(),
        batches: channels.batches.clone(),
        token,
        ready: ready.clone(),
        exported_keys: config.exported_keys_per_group,
        window_secs: config.engine.window.window_secs,
    };

    let tracker = TaskTracker::new();
    // Delivery tasks end after the pipeline: they stop once it drops the dispatcher.
    let delivery_tasks = if receivers.is_empty() {
        Vec::new()
    } else {
        let external_url = config
            .alerting
            .external_url
            .clone()
            .unwrap_or_else(|| format!("http://{}/api/v1/alerts", bound.http));
        let (mut dispatcher, tasks) = receivers.start(StartContext {
            external_url,
            window_secs: config.engine.window.window_secs,
            metrics: &metrics,
            tracker: &tracker,
            flush_timeout: DELIVERY_FLUSH,
        });
        pipeline.on_evaluation(move |ev| dispatcher.offer(ev));
        tracing::info!(
            alertmanagers = config.alerting.alertmanagers.len(),
            webhooks = config.alerting.webhooks.len(),
            "Alert delivery started."
        );
        tasks
    };
    // Ingest stops first; the pipeline stops after, so it drains what ingest queued.
    let ingest_cancel = CancellationToken::new();
    let pipeline_cancel = CancellationToken::new();
    let pipeline_task = tracker.spawn(pipeline.run(pipeline_cancel.clone()));

    let udp_thread = match statsd_socket {
        Some(sock) => Some(udp::spawn(
            sock,
            channels.batches.clone(),
            metrics.clone(),
            ingest_cancel.clone(),
        )?),
        None => None,
    };
    let app = http::router(state, config.http_body_limit_bytes);
    let http_cancel = ingest_cancel.clone();
    let http_task = tracker.spawn(async move {
        axum::serve(http_listener, app)
            .with_graceful_shutdown(async move { http_cancel.cancelled().await })
            .await
    });
    drop(channels);
    tracker.close();

    ready.store(true, Ordering::Release);
    tracing::info!(
        http = %bound.http,
        statsd = %bound.statsd.map_or("disabled".to_string(), |a| a.to_string()),
        window_secs = config.engine.window.window_secs,
        "Listening."
    );

    tokio::select! {
        _ = shutdown_signal() => tracing::info!("Shutting down on signal."),
        _ = cancel.cancelled() => tracing::info!("Shutting down."),
    }
    ready.store(false, Ordering::Release);
    ingest_cancel.cancel();
    if let Some(t) = udp_thread {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    pipeline_cancel.cancel();
    if tokio::time::timeout(GRACE, tracker.wait()).await.is_err() {
        tracing::warn!(grace_secs = GRACE.as_secs(), "Tasks did not stop in time.");
    }
    match http_task.await {
        Ok(Err(error)) => tracing::error!(%error, "The HTTP server failed."),
        Err(error) => tracing::error!(%error, "The HTTP server task panicked."),
        Ok(Ok(())) => {}
    }
    if let Err(error) = pipeline_task.await {
        tracing::error!(%error, "The pipeline task panicked.");
    }
    for alerting::ReceiverTask { name, handle } in delivery_tasks {
        // Past the grace timeout a task still delivering is stopped, not awaited.
        handle.abort();
        match handle.await {
            Err(error) if error.is_panic() => {
                tracing::error!(receiver = %name, %error, "An alert delivery task panicked.");
            }
            Err(_) => {
                tracing::warn!(receiver = %name, "Alert delivery stopped at the grace timeout.")
            }
            Ok(()) => {}
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(error) => {
            tracing::error!(%error, "Cannot listen for SIGTERM.");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_from_env_is_trimmed_and_empty_is_refused() {
        let env = |n: &str| (n == "TOK").then(|| " abc \n".to_string());
        let t = read_token(&TokenSource::Env("TOK".into()), &env).unwrap();
        assert_eq!(t.as_deref(), Some("abc"));
        assert!(read_token(&TokenSource::Env("NOPE".into()), &env).is_err());
        let empty = |_: &str| Some("  ".to_string());
        assert!(read_token(&TokenSource::Env("X".into()), &empty).is_err());
    }
}
