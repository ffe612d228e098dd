//! The Alertmanager API v2 client: `POST <url>/api/v2/alerts` with
//! `[{labels, annotations, startsAt, endsAt, generatorURL}]`, sent the way Prometheus sends.
//!
//! The task keeps an [`Outbox`]: the alerts this Alertmanager should know about (firing ones,
//! and resolved ones for `resolved_retention`), each with when it was last sent. It is
//! state-synchronising rather than a log of events, so each attempt sends the current state
//! and a dropped update heals at the next one: an alert missing from the active list is
//! resolved. What is due is sent in batches of up to [`MAX_BATCH`] alerts:
//!
//! - a firing alert when it is new or `resend_interval` has passed since it was last sent,
//!   with `endsAt = now + 4 × max(window, resend_interval)`, so Alertmanager resolves it by
//!   itself if the agent dies, but not after one or two lost sends;
//! - a resolved alert at once and then every `resend_interval` for `resolved_retention`, with
//!   `endsAt` = the resolve time.
//!
//! A failed batch is retried with backoff; after `max_retries` retries it waits for the next
//! resend, as Prometheus does.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use skewwatch_detectors::alert::{AlertState, Labels, TransitionState};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Delivery, DropReason, SendError, Update};
use crate::clock::{instant_at, rfc3339, wall_now};

/// Most alerts in one POST (Prometheus' notifier uses the same).
pub const MAX_BATCH: usize = 64;

/// One alert as Alertmanager's `POST /api/v2/alerts` takes it (`postableAlert`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostableAlert {
    /// Identifying labels, with `alertname`.
    pub labels: Labels,
    /// Annotations.
    pub annotations: Labels,
    /// When the alert started firing, RFC 3339.
    pub starts_at: String,
    /// When Alertmanager should consider it resolved, RFC 3339.
    pub ends_at: String,
    /// Link back to the agent.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
}

/// Send timing, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Re-send period.
    pub resend: f64,
    /// How far ahead a firing alert's `endsAt` lies: `4 × max(window, resend)`.
    pub valid_for: f64,
    /// How long a resolved alert is kept and re-sent.
    pub retention: f64,
}

impl Timing {
    /// Prometheus' rules: `valid_for = 4 × max(evaluation interval, resend delay)`.
    pub fn new(resend: f64, window: f64, retention: f64) -> Timing {
        Timing {
            resend,
            valid_for: 4.0 * resend.max(window),
            retention,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    annotations: Labels,
    starts_at: f64,
    resolved_at: Option<f64>,
    last_sent: Option<f64>,
    /// Its state changed since it was last sent: send without waiting for the resend.
    changed: bool,
}

/// The alerts one Alertmanager should know about, with their send state.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    entries: BTreeMap<Labels, Entry>,
}

impl Outbox {
    /// Takes in one evaluation: new firing alerts are added, annotations refreshed, and a
    /// firing alert that is no longer firing becomes resolved at its transition time (or the
    /// evaluation time, if the transition was in a dropped update).
    pub fn observe(&mut self, u: &Update) {
        let firing: BTreeMap<&Labels, _> = u
            .alerts
            .iter()
            .filter(|a| a.state == AlertState::Firing)
            .map(|a| (&a.labels, a))
            .collect();
        for (labels, a) in &firing {
            match self.entries.get_mut(*labels) {
                Some(e) if e.resolved_at.is_none() => e.annotations = a.annotations.clone(),
                _ => {
                    self.entries.insert(
                        (*labels).clone(),
                        Entry {
                            annotations: a.annotations.clone(),
                            starts_at: a.fired_at.unwrap_or(a.active_at),
                            resolved_at: None,
                            last_sent: None,
                            changed: true,
                        },
                    );
                }
            }
        }
        for (labels, e) in &mut self.entries {
            if e.resolved_at.is_some() || firing.contains_key(labels) {
                continue;
            }
            let t = u
                .transitions
                .iter()
                .find(|t| t.state == TransitionState::Resolved && &t.labels == labels);
            e.resolved_at = Some(t.map_or(u.ts, |t| t.ts));
            if let Some(t) = t {
                e.annotations = t.annotations.clone();
            }
            e.changed = true;
        }
    }

    /// Forgets resolved alerts older than the retention; returns how many of them never
    /// reached this Alertmanager.
    pub fn expire(&mut self, now: f64, timing: &Timing) -> usize {
        let mut undelivered = 0;
        self.entries.retain(|_, e| match e.resolved_at {
            Some(r) if now >= r + timing.retention => {
                undelivered += usize::from(e.changed);
                false
            }
            _ => true,
        });
        undelivered
    }

    /// The alerts due at `now`, in label order.
    pub fn due(&self, now: f64, timing: &Timing) -> Vec<Labels> {
        self.entries
            .iter()
            .filter(|(_, e)| e.changed || e.last_sent.is_none_or(|t| now >= t + timing.resend))
            .map(|(l, _)| l.clone())
            .collect()
    }

    /// Alerts whose latest state was not yet sent (the queue length, and what shutdown owes).
    pub fn owed(&self) -> usize {
        self.entries.values().filter(|e| e.changed).count()
    }

    /// When something is next due (send or expiry), unix seconds.
    pub fn next_due(&self, timing: &Timing) -> Option<f64> {
        self.entries
            .values()
            .map(|e| {
                let send = match (e.changed, e.last_sent) {
                    (true, _) | (_, None) => f64::NEG_INFINITY,
                    (false, Some(t)) => t + timing.resend,
                };
                let expiry = e
                    .resolved_at
                    .map_or(f64::INFINITY, |r| r + timing.retention);
                send.min(expiry)
            })
            .min_by(f64::total_cmp)
    }

    /// The request body for `keys` at `now`.
    pub fn payload(
        &self,
        keys: &[Labels],
        now: f64,
        timing: &Timing,
        generator_url: &str,
    ) -> Vec<PostableAlert> {
        keys.iter()
            .filter_map(|k| {
                let e = self.entries.get(k)?;
                let ends_at = e.resolved_at.unwrap_or(now + timing.valid_for);
                Some(PostableAlert {
                    labels: k.clone(),
                    annotations: e.annotations.clone(),
                    starts_at: rfc3339(e.starts_at),
                    ends_at: rfc3339(ends_at),
                    generator_url: generator_url.to_owned(),
                })
            })
            .collect()
    }

    /// Marks `keys` as sent at `now` (or given up until the next resend).
    pub fn settle(&mut self, keys: &[Labels], now: f64) {
        for k in keys {
            if let Some(e) = self.entries.get_mut(k) {
                e.last_sent = Some(now);
                e.changed = false;
            }
        }
    }

    /// Alerts kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no alert is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The task that keeps one Alertmanager up to date.
#[derive(Debug)]
pub(super) struct AlertmanagerTask {
    delivery: Delivery,
    timing: Timing,
    generator_url: Arc<str>,
    outbox: Outbox,
    /// Failed attempts of the current batch.
    failures: u32,
    /// No attempt before this wall-clock time (backoff).
    retry_at: Option<f64>,
}

/// What one attempt achieved.
enum Attempt {
    /// Nothing is due, or all of it was sent or given up.
    Settled,
    /// A batch failed and will be retried at `retry_at`.
    Retrying,
}

impl AlertmanagerTask {
    pub(super) fn new(delivery: Delivery, timing: Timing, generator_url: Arc<str>) -> Self {
        AlertmanagerTask {
            delivery,
            timing,
            generator_url,
            outbox: Outbox::default(),
            failures: 0,
            retry_at: None,
        }
    }

    /// Runs until the dispatcher is dropped, then flushes.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Arc<Update>>) {
        loop {
            let wake = self.wake_at();
            tokio::select! {
                u = rx.recv() => match u {
                    Some(u) => self.outbox.observe(&u),
                    None => break,
                },
                _ = sleep_until(wake) => {
                    self.attempt(None).await;
                }
            }
            self.delivery.queue_length.set(self.outbox.owed() as i64);
        }
        self.flush().await;
    }

    fn wake_at(&self) -> Option<f64> {
        let due = self.outbox.next_due(&self.timing)?;
        Some(self.retry_at.map_or(due, |r| due.max(r)))
    }

    /// Sends what is due, batch by batch, until a batch fails.
    async fn attempt(&mut self, deadline: Option<Instant>) -> Attempt {
        let now = wall_now();
        let expired = self.outbox.expire(now, &self.timing);
        if expired > 0 {
            tracing::warn!(
                alerts = expired,
                "Resolved alerts expired before this Alertmanager acknowledged them."
            );
            self.delivery.drop_counted(DropReason::Expired, expired);
        }
        if self.retry_at.is_some_and(|r| now < r) {
            return Attempt::Retrying;
        }
        let due = self.outbox.due(now, &self.timing);
        for batch in due.chunks(MAX_BATCH) {
            let body = self
                .outbox
                .payload(batch, now, &self.timing, &self.generator_url);
            let body = serde_json::to_vec(&body).expect("alerts serialize");
            match self.delivery.post(body, &[], deadline).await {
                Ok(()) => {
                    if self.failures > 0 {
                        tracing::info!(failures = self.failures, "Alertmanager reachable again.");
                    }
                    tracing::debug!(alerts = batch.len(), "Alerts sent.");
                    self.outbox.settle(batch, now);
                    self.failures = 0;
                    self.retry_at = None;
                }
                Err(error) if error.is_permanent() => {
                    tracing::error!(
                        alerts = batch.len(),
                        error = %error,
                        "Alertmanager rejected alerts; not retrying them until the next resend."
                    );
                    self.delivery
                        .drop_counted(DropReason::Rejected, batch.len());
                    self.outbox.settle(batch, now);
                }
                Err(error) => {
                    self.failed(batch, &error, now);
                    return Attempt::Retrying;
                }
            }
        }
        Attempt::Settled
    }

    /// After a failed POST of `batch`: schedules a retry, or gives the batch up once the
    /// retries are spent (until the next resend, as Prometheus does).
    fn failed(&mut self, batch: &[Labels], error: &SendError, now: f64) {
        self.failures += 1;
        if self.failures > self.delivery.max_retries {
            tracing::warn!(
                alerts = batch.len(),
                failures = self.failures,
                error = %error,
                "Giving up on an alert batch until the next resend."
            );
            self.delivery
                .drop_counted(DropReason::RetriesExhausted, batch.len());
            self.outbox.settle(batch, now);
            self.failures = 0;
            self.retry_at = None;
        } else {
            let delay = self.delivery.retry_delay(self.failures);
            tracing::warn!(
                alerts = batch.len(),
                failures = self.failures,
                retry_in_secs = delay,
                error = %error,
                "Alertmanager delivery failed; retrying."
            );
            self.retry_at = Some(now + delay);
        }
    }

    /// Delivers what is owed (alerts whose state changed since they were last sent) within the
    /// flush timeout; what is left is counted as dropped for `shutdown`.
    async fn flush(&mut self) {
        let deadline = Instant::now() + self.delivery.flush_timeout;
        // The first try is immediate: the receiver may be back, and shutdown should not sit
        // out a long backoff.
        self.retry_at = None;
        while self.outbox.owed() > 0 {
            let at = self.retry_at.map_or_else(Instant::now, instant_at);
            if at >= deadline {
                break;
            }
            tokio::time::sleep_until(at).await;
            if let Attempt::Settled = self.attempt(Some(deadline)).await
                && self.outbox.owed() == 0
            {
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        let left = self.outbox.owed();
        self.delivery.queue_length.set(left as i64);
        if left > 0 {
            tracing::warn!(
                alerts = left,
                "Alert changes not delivered before shutdown."
            );
            self.delivery.drop_counted(DropReason::Shutdown, left);
        }
    }
}

/// Sleeps until wall-clock time `at`, or for an hour when nothing is scheduled.
async fn sleep_until(at: Option<f64>) {
    match at {
        Some(at) => tokio::time::sleep_until(instant_at(at)).await,
        None => tokio::time::sleep(std::time::Duration::from_secs(3600)).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewwatch_detectors::alert::{Alert, Transition};

    fn labels(shard: &str) -> Labels {
        [
            ("alertname", "HotShard"),
            ("group", "db"),
            ("severity", "critical"),
            ("shard", shard),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn firing(shard: &str, fired_at: f64) -> Alert {
        Alert {
            labels: labels(shard),
            annotations: [("summary".to_owned(), format!("{shard} is hot"))].into(),
            state: AlertState::Firing,
            active_at: fired_at - 10.0,
            fired_at: Some(fired_at),
            last_true_at: fired_at,
        }
    }

    fn update(ts: f64, alerts: Vec<Alert>, transitions: Vec<Transition>) -> Update {
        Update {
            ts,
            transitions,
            alerts: Arc::new(alerts),
        }
    }

    const T0: f64 = 1_714_564_800.0;

    #[test]
    fn payload_has_the_field_names_alertmanager_expects() {
        let mut o = Outbox::default();
        o.observe(&update(T0, vec![firing("s1", T0)], vec![]));
        let t = Timing::new(60.0, 10.0, 900.0);
        let keys = o.due(T0, &t);
        let body =
            serde_json::to_value(o.payload(&keys, T0 + 1.0, &t, "http://x/api/v1/alerts")).unwrap();
        assert_eq!(
            body,
            serde_json::json!([{
                "labels": {"alertname": "HotShard", "group": "db", "severity": "critical", "shard": "s1"},
                "annotations": {"summary": "s1 is hot"},
                "startsAt": "2024-05-01T12:00:00Z",
                "endsAt": "2024-05-01T12:04:01Z",
                "generatorURL": "http://x/api/v1/alerts"
            }])
        );
    }

    #[test]
    fn firing_ends_at_is_four_times_the_larger_of_window_and_resend() {
        assert_eq!(Timing::new(60.0, 10.0, 900.0).valid_for, 240.0);
        assert_eq!(Timing::new(60.0, 300.0, 900.0).valid_for, 1200.0);
    }

    #[test]
    fn firing_alerts_are_resent_every_resend_interval() {
        let t = Timing::new(60.0, 10.0, 900.0);
        let mut o = Outbox::default();
        o.observe(&update(T0, vec![firing("s1", T0)], vec![]));
        assert_eq!(o.owed(), 1);
        let due = o.due(T0, &t);
        assert_eq!(due.len(), 1);
        o.settle(&due, T0);
        assert_eq!(o.owed(), 0);
        // Later evaluations with the same alert change nothing until the resend is due.
        o.observe(&update(T0 + 10.0, vec![firing("s1", T0)], vec![]));
        assert!(o.due(T0 + 59.0, &t).is_empty());
        assert_eq!(o.next_due(&t), Some(T0 + 60.0));
        assert_eq!(o.due(T0 + 60.0, &t).len(), 1);
    }

    #[test]
    fn resolved_alerts_are_sent_at_once_with_ends_at_the_resolve_time_then_retained() {
        let t = Timing::new(60.0, 10.0, 900.0);
        let mut o = Outbox::default();
        o.observe(&update(T0, vec![firing("s1", T0)], vec![]));
        o.settle(&o.due(T0, &t), T0);
        let resolved = Transition {
            ts: T0 + 30.0,
            alertname: "HotShard".into(),
            state: TransitionState::Resolved,
            labels: labels("s1"),
            annotations: [("summary".to_owned(), "calm".to_owned())].into(),
            starts_at: T0,
        };
        o.observe(&update(T0 + 30.0, vec![], vec![resolved]));
        let due = o.due(T0 + 31.0, &t);
        assert_eq!(due.len(), 1, "sent at once, not at the next resend");
        let p = o.payload(&due, T0 + 31.0, &t, "u");
        assert_eq!(p[0].ends_at, "2024-05-01T12:00:30Z");
        assert_eq!(p[0].starts_at, "2024-05-01T12:00:00Z");
        assert_eq!(p[0].annotations["summary"], "calm");
        o.settle(&due, T0 + 31.0);
        // Re-sent every resend interval while retained, then forgotten.
        assert_eq!(o.due(T0 + 91.0, &t).len(), 1);
        assert_eq!(o.expire(T0 + 929.0, &t), 0);
        assert_eq!(o.len(), 1);
        assert_eq!(o.expire(T0 + 930.0, &t), 0);
        assert!(o.is_empty());
    }

    #[test]
    fn a_firing_alert_missing_from_a_later_update_is_resolved_even_if_its_transition_was_dropped() {
        let t = Timing::new(60.0, 10.0, 900.0);
        let mut o = Outbox::default();
        o.observe(&update(
            T0,
            vec![firing("s1", T0), firing("s2", T0)],
            vec![],
        ));
        o.settle(&o.due(T0, &t), T0);
        o.observe(&update(T0 + 20.0, vec![firing("s2", T0)], vec![]));
        let due = o.due(T0 + 20.0, &t);
        assert_eq!(due, vec![labels("s1")]);
        assert_eq!(
            o.payload(&due, T0 + 20.0, &t, "u")[0].ends_at,
            "2024-05-01T12:00:20Z"
        );
    }

    #[test]
    fn an_alert_that_fires_again_after_resolving_is_a_new_alert() {
        let t = Timing::new(60.0, 10.0, 900.0);
        let mut o = Outbox::default();
        o.observe(&update(T0, vec![firing("s1", T0)], vec![]));
        o.settle(&o.due(T0, &t), T0);
        o.observe(&update(T0 + 10.0, vec![], vec![]));
        o.settle(&o.due(T0 + 10.0, &t), T0 + 10.0);
        o.observe(&update(T0 + 20.0, vec![firing("s1", T0 + 20.0)], vec![]));
        let due = o.due(T0 + 20.0, &t);
        let p = o.payload(&due, T0 + 20.0, &t, "u");
        assert_eq!(p[0].starts_at, "2024-05-01T12:00:20Z");
        assert_eq!(p[0].ends_at, "2024-05-01T12:04:20Z");
    }

    #[test]
    fn pending_alerts_are_not_sent() {
        let mut a = firing("s1", T0);
        a.state = AlertState::Pending;
        a.fired_at = None;
        let mut o = Outbox::default();
        o.observe(&update(T0, vec![a], vec![]));
        assert!(o.is_empty());
    }

    #[test]
    fn undelivered_resolved_alerts_count_when_they_expire() {
        let t = Timing::new(60.0, 10.0, 900.0);
        let mut o = Outbox::default();
        o.observe(&update(T0, vec![firing("s1", T0)], vec![]));
        o.observe(&update(T0 + 10.0, vec![], vec![]));
        assert_eq!(o.expire(T0 + 910.0, &t), 1);
    }
}
