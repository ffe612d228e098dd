//! Alert delivery: the last stage of the live flow (`... -> Detectors -> Alerts -> delivery`).
//!
//! ```text
//! pipeline ──on_evaluation──> Dispatcher ──try_send──> [bounded queue] ──> receiver task ──POST──> receiver
//!                                         (one queue and one task per configured receiver)
//! ```
//!
//! The pipeline hands every evaluation to the [`Dispatcher`], which copies it into each
//! receiver's bounded queue with `try_send`: it never blocks the pipeline, and a full queue
//! counts `skewwatch_alert_deliveries_dropped_total{receiver, reason="queue_full"}`. Each
//! receiver has its own task, so a slow or dead receiver delays no other.
//!
//! - [`alertmanager`]: an Alertmanager API v2 client that behaves like Prometheus: firing alerts
//!   are re-sent every `resend_interval` with `endsAt = now + 4 × max(window, resend_interval)`,
//!   resolved ones are sent with `endsAt` = the resolve time and re-sent for
//!   `resolved_retention` (15 min), several alerts per request, to every Alertmanager.
//! - [`webhook`]: a generic webhook that POSTs Alertmanager's version-4 webhook payload, one
//!   notification per alert group that changed, optionally signed with HMAC-SHA256
//!   (`X-Skewwatch-Signature: sha256=<hex>` over the raw body).
//!
//! # Bounds
//! - Each receiver's update queue holds `queue_capacity` evaluations; each webhook's backlog of
//!   undelivered notifications holds `queue_capacity` notifications (the oldest is dropped,
//!   reason `queue_full`). An Alertmanager task keeps one entry per active or recently resolved
//!   alert, which the detectors' caps bound.
//! - A failed POST is retried after `backoff_initial × 2^(n-1)`, capped at `backoff_max`, times
//!   a jitter factor in [0.5, 1]. After `max_retries` retries a webhook notification is dropped
//!   (`retries_exhausted`); it is also dropped once older than `max_notification_age`
//!   (`expired`). An Alertmanager batch that exhausts its retries is given up until the next
//!   resend (Prometheus drops failed batches the same way and relies on the resend), and a
//!   resolved alert no Alertmanager acknowledged within `resolved_retention` is forgotten
//!   (`expired`). A 4xx answer other than 408 and 429 is not retried (`rejected`).
//! - On shutdown the pipeline stops first; each task then delivers what it owes (webhook
//!   notifications, Alertmanager alerts whose state changed since the last send) for at most
//!   the flush timeout, and counts the rest as `shutdown`.
//!
//! # Transport
//! Plain HTTP only: the agent is built without a TLS backend, so `https://` receivers are
//! refused by the configuration check. User info in a URL (`http://user:pass@host`) becomes
//! basic authentication. Proxy environment variables are not read.

pub mod alertmanager;
pub mod config;
pub mod webhook;

pub use config::{AlertingConfig, AlertmanagerTarget, WebhookTarget};

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use sha2::Sha256;
use skewwatch_detectors::alert::{Alert, Transition};
use skewwatch_detectors::engine::Evaluation;
use skewwatch_detectors::prng::{SplitMix64, fnv1a64};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::Secret;
use crate::stage::Stage;
use crate::telemetry::Registrar;

/// The header carrying a webhook payload's HMAC-SHA256 signature.
pub const SIGNATURE_HEADER: &str = "X-Skewwatch-Signature";

/// The header carrying the unix time a webhook notification was sent, which the signature
/// covers.
pub const TIMESTAMP_HEADER: &str = "X-Skewwatch-Timestamp";

/// The header naming one state of one alert group; the same on every retry of it.
pub const DELIVERY_HEADER: &str = "X-Skewwatch-Delivery";

/// Errors preparing alert delivery at start-up.
#[derive(Debug, thiserror::Error)]
pub enum AlertingError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for alert delivery: {0}")]
    Client(#[source] reqwest::Error),
}

/// Why a delivery POST failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No answer: refused, reset or timed out. Retried.
    #[error("no answer from the receiver: {0}")]
    Transport(String),
    /// The receiver answered with a status other than 2xx.
    #[error("the receiver answered {status}: {body}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The shutdown flush deadline passed during the request.
    #[error("the shutdown deadline passed before the receiver answered")]
    Deadline,
}

impl SendError {
    /// True when retrying the same request cannot help: a 4xx answer other than 408 (request
    /// timeout) and 429 (too many requests).
    pub fn is_permanent(&self) -> bool {
        matches!(self, SendError::Status { status, .. }
            if (400..500).contains(status) && *status != 408 && *status != 429)
    }
}

/// Why an update or notification was given up: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The receiver's queue or backlog was full.
    QueueFull,
    /// `max_retries` retries failed.
    RetriesExhausted,
    /// Older than `max_notification_age` (webhook) or `resolved_retention` (Alertmanager).
    Expired,
    /// The receiver refused it with a 4xx status.
    Rejected,
    /// Still undelivered when the shutdown flush timed out.
    Shutdown,
}

impl DropReason {
    /// Every reason, for pre-creating series.
    pub const ALL: [DropReason; 5] = [
        DropReason::QueueFull,
        DropReason::RetriesExhausted,
        DropReason::Expired,
        DropReason::Rejected,
        DropReason::Shutdown,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::RetriesExhausted => "retries_exhausted",
            DropReason::Expired => "expired",
            DropReason::Rejected => "rejected",
            DropReason::Shutdown => "shutdown",
        }
    }
}

/// One evaluation, as the receiver tasks see it.
#[derive(Debug, Clone)]
pub struct Update {
    /// Evaluation time (end of the window), unix seconds.
    pub ts: f64,
    /// Alerts that started firing or resolved in this evaluation.
    pub transitions: Vec<Transition>,
    /// Every active alert after this evaluation.
    pub alerts: Arc<Vec<Alert>>,
}

impl Update {
    /// The parts of `ev` delivery needs (the snapshot is left out).
    pub fn from_evaluation(ev: &Evaluation) -> Update {
        Update {
            ts: ev.snapshot.end,
            transitions: ev.transitions.clone(),
            alerts: ev.alerts.clone(),
        }
    }
}

/// Exponential backoff between retries, capped, with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the first retry (before jitter).
    pub initial: Duration,
    /// Largest delay (before jitter).
    pub max: Duration,
}

impl Backoff {
    /// Delay before retry number `retry` (1 for the first): `initial × 2^(retry-1)` capped at
    /// `max`, times `0.5 + 0.5 × jitter` (`jitter` in [0, 1], clamped), so it is never more
    /// than `max` and never less than half of the un-jittered delay.
    pub fn delay(&self, retry: u32, jitter: f64) -> Duration {
        let exp = retry.saturating_sub(1).min(64) as i32;
        let base = (self.initial.as_secs_f64() * 2f64.powi(exp)).min(self.max.as_secs_f64());
        Duration::from_secs_f64(base * (0.5 + 0.5 * jitter.clamp(0.0, 1.0)))
    }
}

/// Retry jitter: a generator seeded from the clock and the receiver's name, so receivers (and
/// agents) that fail together do not retry in step. Not for anything secret.
#[derive(Debug)]
struct Jitter(SplitMix64);

impl Jitter {
    #[expect(
        clippy::disallowed_types,
        reason = "a seed, not a time reading: it only has to differ between agents"
    )]
    fn seeded(salt: &str) -> Jitter {
        let nanos = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Jitter(SplitMix64::new(nanos ^ fnv1a64(salt.as_bytes())))
    }

    /// A value in [0, 1).
    fn next(&mut self) -> f64 {
        self.0.next_f64()
    }
}

/// `sha256=<lowercase hex HMAC-SHA256 of body>`, the value of [`SIGNATURE_HEADER`].
pub fn sign(secret: &Secret, body: &[u8]) -> String {
    // HMAC accepts keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose()).expect("any key length");
    mac.update(body);
    format!("sha256={:x}", mac.finalize().into_bytes())
}

/// The most of a receiver's error body read: enough for a message in the log, and a receiver
/// that answers with megabytes cannot make the agent buffer them.
const ERROR_BODY_BYTES: usize = 4096;

/// The start of an error answer's body, read at most [`ERROR_BODY_BYTES`], for the log.
async fn error_body(mut resp: reqwest::Response) -> String {
    let mut buf = Vec::new();
    while buf.len() < ERROR_BODY_BYTES {
        match resp.chunk().await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    buf.truncate(ERROR_BODY_BYTES);
    let text = String::from_utf8_lossy(&buf);
    let mut body: String = text.chars().take(256).collect();
    if body.len() < text.len() {
        body.push('…');
    }
    body.trim().to_owned()
}

/// Renders `error` and its sources, `a: b: c`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut s = error.to_string();
    let mut cur = error.source();
    while let Some(e) = cur {
        s.push_str(": ");
        s.push_str(&e.to_string());
        cur = e.source();
    }
    s
}

/// What every receiver task shares: where it posts, how it retries, what it counts.
#[derive(Debug)]
struct Delivery {
    name: Arc<str>,
    client: reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
    backoff: Backoff,
    max_retries: u32,
    flush_timeout: Duration,
    jitter: Jitter,
    success: IntCounter,
    failure: IntCounter,
    dropped: IntCounterVec,
    queue_length: IntGauge,
}

impl Delivery {
    /// POSTs `body` as JSON with `headers`; counts the attempt. `deadline` cuts the request
    /// short during the shutdown flush.
    async fn post(
        &self,
        body: Vec<u8>,
        headers: &[(&'static str, String)],
        deadline: Option<Instant>,
    ) -> Result<(), SendError> {
        let mut req = self
            .client
            .post(self.url.clone())
            .timeout(self.timeout)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body);
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let send = async {
            let resp = req
                .send()
                .await
                .map_err(|e| SendError::Transport(error_chain(&e.without_url())))?;
            let status = resp.status();
            if status.is_success() {
                return Ok(());
            }
            Err(SendError::Status {
                status: status.as_u16(),
                body: error_body(resp).await,
            })
        };
        let result = match deadline {
            Some(d) => tokio::time::timeout_at(d, send)
                .await
                .unwrap_or(Err(SendError::Deadline)),
            None => send.await,
        };
        match &result {
            Ok(()) => self.success.inc(),
            Err(_) => self.failure.inc(),
        }
        result
    }

    fn drop_counted(&self, reason: DropReason, n: usize) {
        if n > 0 {
            self.dropped
                .with_label_values(&[&*self.name, reason.as_str()])
                .inc_by(n as u64);
        }
    }

    /// Seconds to wait before retry number `retry`.
    fn retry_delay(&mut self, retry: u32) -> f64 {
        let j = self.jitter.next();
        self.backoff.delay(retry, j).as_secs_f64()
    }
}

/// Delivery prepared at start-up, before any port is bound: secrets read, client built.
#[derive(Debug)]
pub struct Receivers {
    cfg: AlertingConfig,
    client: reqwest::Client,
}

/// Alert delivery's metrics, registered by delivery once (a reload rebuilds the receivers,
/// not the metrics): attempts, updates given up and what each receiver is owed.
#[derive(Debug, Clone)]
pub struct DeliveryMetrics {
    /// Delivery attempts (HTTP POSTs), by receiver and result.
    deliveries: IntCounterVec,
    /// Updates or notifications given up, by receiver and reason.
    dropped: IntCounterVec,
    /// What each receiver is owed and has not yet acknowledged.
    queue_length: IntGaugeVec,
}

impl DeliveryMetrics {
    /// Registers delivery's metrics in `registry`.
    pub fn register(registry: &prometheus::Registry) -> prometheus::Result<DeliveryMetrics> {
        let r = Registrar(registry);
        Ok(DeliveryMetrics {
            deliveries: r.counters(
                "skewwatch_alert_deliveries_total",
                "Alert delivery attempts (HTTP POSTs), by receiver and result (success, failure).",
                &["receiver", "result"],
            )?,
            dropped: r.counters(
                "skewwatch_alert_deliveries_dropped_total",
                "Alert updates or notifications given up, by receiver and reason \
                 (queue_full, retries_exhausted, expired, rejected, shutdown).",
                &["receiver", "reason"],
            )?,
            queue_length: r.gauges(
                "skewwatch_alert_delivery_queue_length",
                "Per receiver: webhook notifications waiting, or alerts whose latest state an \
                 Alertmanager has not acknowledged.",
                &["receiver"],
            )?,
        })
    }
}

/// What [`Receivers::spawn`] needs from the running agent.
#[derive(Debug)]
pub struct StartContext<'a> {
    /// `generatorURL` of every alert and `externalURL` of webhook payloads.
    pub external_url: String,
    /// The window length (evaluation interval), for `endsAt` of firing alerts.
    pub window_secs: f64,
    /// Delivery's metrics.
    pub metrics: &'a DeliveryMetrics,
    /// How long the tasks may keep delivering after the pipeline stops.
    pub flush_timeout: Duration,
}

impl Receivers {
    /// Builds the HTTP client; the webhook secrets were read when the configuration was
    /// validated.
    pub fn prepare(cfg: &AlertingConfig) -> Result<Receivers, AlertingError> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("skewwatch/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            // A receiver that redirects is misconfigured; following it could send alerts
            // (and their signature) somewhere nobody configured.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(AlertingError::Client)?;
        Ok(Receivers {
            cfg: cfg.clone(),
            client,
        })
    }

    /// True when no receiver is configured.
    pub fn is_empty(&self) -> bool {
        self.cfg.alertmanagers.is_empty() && self.cfg.webhooks.is_empty()
    }

    /// What one receiver's task needs to post, retry and count.
    fn delivery(
        &self,
        ctx: &StartContext<'_>,
        name: &str,
        url: &reqwest::Url,
        timeout: Duration,
    ) -> Delivery {
        let (cfg, m) = (&self.cfg, ctx.metrics);
        for reason in DropReason::ALL {
            m.dropped.with_label_values(&[name, reason.as_str()]);
        }
        Delivery {
            name: name.into(),
            client: self.client.clone(),
            url: url.clone(),
            timeout,
            backoff: Backoff {
                initial: cfg.backoff_initial,
                max: cfg.backoff_max,
            },
            max_retries: cfg.max_retries,
            flush_timeout: ctx.flush_timeout,
            jitter: Jitter::seeded(name),
            success: m.deliveries.with_label_values(&[name, "success"]),
            failure: m.deliveries.with_label_values(&[name, "failure"]),
            dropped: m.dropped.clone(),
            queue_length: m.queue_length.with_label_values(&[name]),
        }
    }

    /// Spawns one watched task per receiver into a new `delivery` stage; returns the
    /// dispatcher for the pipeline and the stage. Each task stops once the dispatcher is
    /// dropped (the pipeline stopped) and it has flushed what it owes.
    pub fn spawn(self, ctx: StartContext<'_>) -> (Dispatcher, Stage) {
        let cfg = &self.cfg;
        let external_url: Arc<str> = ctx.external_url.as_str().into();
        let mut queues = Vec::new();
        let mut stage = Stage::new("delivery");
        for am in &cfg.alertmanagers {
            let (tx, rx) = mpsc::channel(cfg.queue_capacity);
            let d = self.delivery(&ctx, &am.name, &am.url, am.timeout);
            let timing = alertmanager::Timing::new(
                cfg.resend_interval.as_secs_f64(),
                ctx.window_secs,
                cfg.resolved_retention.as_secs_f64(),
            );
            let task = alertmanager::AlertmanagerTask::new(d, timing, external_url.clone());
            queues.push(Queue::new(&am.name, tx, false, ctx.metrics));
            let span = tracing::info_span!("alertmanager", receiver = %am.name);
            stage.watch(
                format!("alert delivery {}", am.name),
                tokio::spawn(task.run(rx).instrument(span)),
            );
        }
        for w in &cfg.webhooks {
            let (tx, rx) = mpsc::channel(cfg.queue_capacity);
            let d = self.delivery(&ctx, &w.name, &w.url, w.timeout);
            let task = webhook::WebhookTask::new(
                d,
                w.hmac_secret.clone(),
                external_url.clone(),
                webhook::Timing {
                    repeat_interval: cfg.repeat_interval.as_secs_f64(),
                    resolved_retention: cfg.max_notification_age.as_secs_f64(),
                },
            );
            queues.push(Queue::new(&w.name, tx, true, ctx.metrics));
            let span = tracing::info_span!("webhook", receiver = %w.name);
            stage.watch(
                format!("alert delivery {}", w.name),
                tokio::spawn(task.run(rx).instrument(span)),
            );
        }
        if !queues.is_empty() {
            tracing::info!(
                alertmanagers = cfg.alertmanagers.len(),
                webhooks = cfg.webhooks.len(),
                "Alert delivery started."
            );
        }
        (Dispatcher { queues }, stage)
    }
}

/// One receiver's queue, as the dispatcher holds it.
#[derive(Debug)]
struct Queue {
    name: Arc<str>,
    tx: mpsc::Sender<Arc<Update>>,
    /// Webhooks only care about evaluations with transitions.
    changes_only: bool,
    dropped: IntCounter,
    dropping: bool,
}

impl Queue {
    fn new(
        name: &str,
        tx: mpsc::Sender<Arc<Update>>,
        changes_only: bool,
        metrics: &DeliveryMetrics,
    ) -> Queue {
        Queue {
            name: name.into(),
            tx,
            changes_only,
            dropped: metrics
                .dropped
                .with_label_values(&[name, DropReason::QueueFull.as_str()]),
            dropping: false,
        }
    }
}

/// The pipeline's side of delivery: copies each evaluation into every receiver's queue
/// without blocking.
#[derive(Debug, Default)]
pub struct Dispatcher {
    queues: Vec<Queue>,
}

impl Dispatcher {
    /// True when there is no receiver to offer evaluations to.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Offers `ev` to every receiver. Never waits: a full queue drops the update for that
    /// receiver and counts it (`reason="queue_full"`).
    pub fn offer(&mut self, ev: &Evaluation) {
        if self.queues.is_empty() {
            return;
        }
        let update = Arc::new(Update::from_evaluation(ev));
        for q in &mut self.queues {
            if q.changes_only && update.transitions.is_empty() {
                continue;
            }
            match q.tx.try_send(update.clone()) {
                Ok(()) => q.dropping = false,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    q.dropped.inc();
                    if !q.dropping {
                        tracing::warn!(
                            receiver = %q.name,
                            "Alert delivery queue is full; dropping updates for this receiver."
                        );
                    }
                    q.dropping = true;
                }
                // The task has ended; its join handle reports why.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_signature_matches_rfc_4231_test_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let s = Secret::new(b"Jefe");
        assert_eq!(
            sign(&s, b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn backoff_doubles_is_capped_and_jitter_stays_within_half_to_full() {
        let b = Backoff {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
        };
        let secs = |r, j| b.delay(r, j).as_secs_f64();
        assert_eq!(secs(1, 1.0), 0.5);
        assert_eq!(secs(2, 1.0), 1.0);
        assert_eq!(secs(7, 1.0), 30.0);
        assert_eq!(secs(1000, 1.0), 30.0);
        assert_eq!(secs(u32::MAX, 1.0), 30.0);
        assert_eq!(secs(3, 0.0), 1.0);
        assert_eq!(secs(3, 7.0), 2.0);
        let mut j = Jitter::seeded("x");
        for r in 1..100 {
            let v = b.delay(r, j.next()).as_secs_f64();
            let full = (0.5 * 2f64.powi(r as i32 - 1)).min(30.0);
            assert!(v >= full / 2.0 && v <= full, "retry {r}: {v}");
        }
    }

    #[test]
    fn jitter_is_in_unit_interval() {
        let mut j = Jitter::seeded("receiver");
        for _ in 0..10_000 {
            let x = j.next();
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn client_errors_are_permanent_except_timeouts_and_rate_limits() {
        let st = |status| SendError::Status {
            status,
            body: String::new(),
        };
        assert!(st(400).is_permanent());
        assert!(st(404).is_permanent());
        assert!(!st(408).is_permanent());
        assert!(!st(429).is_permanent());
        assert!(!st(500).is_permanent());
        assert!(!st(503).is_permanent());
        assert!(!SendError::Transport("refused".into()).is_permanent());
    }
}
