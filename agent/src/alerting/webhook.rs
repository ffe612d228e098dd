//! The generic webhook: POSTs Alertmanager's version-4 webhook payload, so receivers written
//! for Alertmanager (chat bridges, incident tools) take skewwatch alerts unchanged.
//!
//! One notification goes out per alert group (`alertname` + `group`, like an Alertmanager route
//! with `group_by: [alertname, group]`) in which an alert started firing or resolved. Like
//! Alertmanager's, it lists every alert of the group: the ones that changed and the ones still
//! firing; `status` is `firing` while any of them fires. A firing alert's `endsAt` is Go's zero
//! time, `0001-01-01T00:00:00Z`. Notifications are not repeated while nothing changes.
//!
//! With a secret configured, the raw body is signed: `X-Skewwatch-Signature:
//! sha256=<hex HMAC-SHA256(secret, body)>`. Notifications wait in a bounded backlog and are
//! delivered in order (a resolve never overtakes its firing), the oldest first, each retried
//! with backoff until `max_retries` or `max_notification_age`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use skewwatch_detectors::alert::{AlertState, Labels, TransitionState};
use skewwatch_detectors::prng::{fnv1a64, fnv1a64_extend};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Delivery, DropReason, Update, sign};
use crate::clock::{ZERO_TIME, instant_at, rfc3339, wall_now};
use crate::config::Secret;

/// The webhook payload (Alertmanager's `webhook.Message`, version 4).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Always `"4"`.
    pub version: &'static str,
    /// Identifies the group: `{}:{alertname="HotShard", group="db"}`.
    pub group_key: String,
    /// Alerts left out for size; always 0.
    pub truncated_alerts: u64,
    /// `firing` while any alert in the group fires, else `resolved`.
    pub status: &'static str,
    /// The webhook's configured name.
    pub receiver: String,
    /// The labels the group is keyed by.
    pub group_labels: Labels,
    /// Labels every alert in the notification shares.
    pub common_labels: Labels,
    /// Annotations every alert in the notification shares.
    pub common_annotations: Labels,
    /// The agent's external URL.
    #[serde(rename = "externalURL")]
    pub external_url: String,
    /// The alerts.
    pub alerts: Vec<MessageAlert>,
}

/// One alert in a [`Message`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageAlert {
    /// `firing` or `resolved`.
    pub status: &'static str,
    /// Labels, with `alertname` and `severity`.
    pub labels: Labels,
    /// Annotations.
    pub annotations: Labels,
    /// When it started firing, RFC 3339.
    pub starts_at: String,
    /// When it resolved, or [`ZERO_TIME`] while firing.
    pub ends_at: String,
    /// Link back to the agent.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// Alertmanager's fingerprint of the label set, 16 hex digits.
    pub fingerprint: String,
}

/// Alertmanager's (Prometheus `model.LabelSet.Fingerprint`) label-set hash: FNV-1a 64 over
/// each name and value in name order, each followed by a 0xff separator, as 16 hex digits.
pub fn fingerprint(labels: &Labels) -> String {
    let mut h = fnv1a64(&[]);
    for (k, v) in labels {
        h = fnv1a64_extend(h, k.as_bytes());
        h = fnv1a64_extend(h, &[0xff]);
        h = fnv1a64_extend(h, v.as_bytes());
        h = fnv1a64_extend(h, &[0xff]);
    }
    format!("{h:016x}")
}

/// A label set the way Go prints `model.LabelSet`: `{a="x", b="y"}`.
fn go_label_set(labels: &Labels) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
        .collect();
    format!("{{{}}}", inner.join(", "))
}

/// The pairs every map in `maps` shares.
fn common<'a>(mut maps: impl Iterator<Item = &'a Labels>) -> Labels {
    let Some(first) = maps.next() else {
        return Labels::new();
    };
    let mut out = first.clone();
    for m in maps {
        out.retain(|k, v| m.get(k) == Some(v));
    }
    out
}

/// The notifications `u` calls for: one per (alertname, group) with a transition.
pub fn messages(u: &Update, receiver: &str, external_url: &str) -> Vec<Message> {
    let group_of = |l: &Labels| -> Labels {
        l.iter()
            .filter(|(k, _)| *k == "alertname" || *k == "group")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut groups: BTreeMap<Labels, Vec<MessageAlert>> = BTreeMap::new();
    for t in &u.transitions {
        let (status, ends_at) = match t.state {
            TransitionState::Firing => ("firing", ZERO_TIME.to_owned()),
            TransitionState::Resolved => ("resolved", rfc3339(t.ts)),
        };
        groups
            .entry(group_of(&t.labels))
            .or_default()
            .push(MessageAlert {
                status,
                labels: t.labels.clone(),
                annotations: t.annotations.clone(),
                starts_at: rfc3339(t.starts_at),
                ends_at,
                generator_url: external_url.to_owned(),
                fingerprint: fingerprint(&t.labels),
            });
    }
    for a in u.alerts.iter().filter(|a| a.state == AlertState::Firing) {
        let Some(alerts) = groups.get_mut(&group_of(&a.labels)) else {
            continue;
        };
        if alerts.iter().any(|m| m.labels == a.labels) {
            continue;
        }
        alerts.push(MessageAlert {
            status: "firing",
            labels: a.labels.clone(),
            annotations: a.annotations.clone(),
            starts_at: rfc3339(a.fired_at.unwrap_or(a.active_at)),
            ends_at: ZERO_TIME.to_owned(),
            generator_url: external_url.to_owned(),
            fingerprint: fingerprint(&a.labels),
        });
    }
    groups
        .into_iter()
        .map(|(group_labels, alerts)| Message {
            version: "4",
            group_key: format!("{{}}:{}", go_label_set(&group_labels)),
            truncated_alerts: 0,
            status: if alerts.iter().any(|a| a.status == "firing") {
                "firing"
            } else {
                "resolved"
            },
            receiver: receiver.to_owned(),
            common_labels: common(alerts.iter().map(|a| &a.labels)),
            common_annotations: common(alerts.iter().map(|a| &a.annotations)),
            group_labels,
            external_url: external_url.to_owned(),
            alerts,
        })
        .collect()
}

/// One notification waiting for delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The serialized [`Message`].
    pub body: Vec<u8>,
    /// The signature header value, if signed.
    pub signature: Option<String>,
    /// When it was made, unix seconds.
    pub created: f64,
    /// Failed attempts so far.
    pub failures: u32,
}

impl Notification {
    /// Serializes and, with a secret, signs `m`.
    pub fn new(m: &Message, secret: Option<&Secret>, created: f64) -> Notification {
        let body = serde_json::to_vec(m).expect("messages serialize");
        Notification {
            signature: secret.map(|s| sign(s, &body)),
            body,
            created,
            failures: 0,
        }
    }
}

/// Notifications in delivery order, at most `capacity` of them.
#[derive(Debug, Clone)]
pub struct Backlog {
    pending: VecDeque<Notification>,
    capacity: usize,
}

impl Backlog {
    /// An empty backlog holding at most `capacity` (at least 1) notifications.
    pub fn new(capacity: usize) -> Backlog {
        Backlog {
            pending: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Appends `n`; when full, the oldest notification is dropped and returned.
    pub fn push(&mut self, n: Notification) -> Option<Notification> {
        let evicted = if self.pending.len() >= self.capacity {
            self.pending.pop_front()
        } else {
            None
        };
        self.pending.push_back(n);
        evicted
    }

    /// The next notification to deliver.
    pub fn front_mut(&mut self) -> Option<&mut Notification> {
        self.pending.front_mut()
    }

    /// Removes the next notification.
    pub fn pop(&mut self) -> Option<Notification> {
        self.pending.pop_front()
    }

    /// Notifications waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The task that delivers to one webhook.
#[derive(Debug)]
pub(super) struct WebhookTask {
    delivery: Delivery,
    secret: Option<Secret>,
    external_url: Arc<str>,
    backlog: Backlog,
    max_age: f64,
    /// No attempt before this wall-clock time (backoff of the head notification).
    retry_at: Option<f64>,
}

impl WebhookTask {
    pub(super) fn new(
        delivery: Delivery,
        secret: Option<Secret>,
        external_url: Arc<str>,
        capacity: usize,
        max_age: f64,
    ) -> Self {
        WebhookTask {
            delivery,
            secret,
            external_url,
            backlog: Backlog::new(capacity),
            max_age,
            retry_at: None,
        }
    }

    /// Runs until the dispatcher is dropped, then flushes.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Arc<Update>>) {
        loop {
            let wake = (!self.backlog.is_empty()).then(|| self.retry_at.unwrap_or(f64::MIN));
            tokio::select! {
                u = rx.recv() => match u {
                    Some(u) => self.enqueue(&u),
                    None => break,
                },
                _ = sleep_until(wake) => self.attempt(None).await,
            }
            self.delivery.queue_length.set(self.backlog.len() as i64);
        }
        self.flush().await;
    }

    fn enqueue(&mut self, u: &Update) {
        let now = wall_now();
        for m in messages(u, &self.delivery.name, &self.external_url) {
            if self
                .backlog
                .push(Notification::new(&m, self.secret.as_ref(), now))
                .is_some()
            {
                // The evicted one was the head: the new head starts without its backoff.
                self.retry_at = None;
                tracing::warn!(
                    capacity = self.backlog.capacity,
                    "Webhook backlog is full; dropped the oldest notification."
                );
                self.delivery.drop_counted(DropReason::QueueFull, 1);
            }
        }
    }

    /// Tries the head notification once.
    async fn attempt(&mut self, deadline: Option<Instant>) {
        let now = wall_now();
        let max_age = self.max_age;
        let max_retries = self.delivery.max_retries;
        let Some(head) = self.backlog.front_mut() else {
            return;
        };
        if now - head.created > max_age {
            tracing::warn!(
                failures = head.failures,
                "Webhook notification expired undelivered."
            );
            self.backlog.pop();
            self.retry_at = None;
            self.delivery.drop_counted(DropReason::Expired, 1);
            return;
        }
        let result = self
            .delivery
            .post(head.body.clone(), head.signature.as_deref(), deadline)
            .await;
        match result {
            Ok(()) => {
                if head.failures > 0 {
                    tracing::info!(
                        failures = head.failures,
                        "Webhook notification delivered after retries."
                    );
                }
                self.backlog.pop();
                self.retry_at = None;
            }
            Err(error) if error.is_permanent() => {
                tracing::error!(
                    error = %error,
                    "Webhook rejected a notification; dropping it."
                );
                self.backlog.pop();
                self.retry_at = None;
                self.delivery.drop_counted(DropReason::Rejected, 1);
            }
            Err(error) => {
                head.failures += 1;
                let failures = head.failures;
                if failures > max_retries {
                    tracing::warn!(
                        failures,
                        error = %error,
                        "Webhook notification dropped after its last retry."
                    );
                    self.backlog.pop();
                    self.retry_at = None;
                    self.delivery.drop_counted(DropReason::RetriesExhausted, 1);
                } else {
                    let delay = self.delivery.retry_delay(failures);
                    tracing::warn!(
                        failures,
                        retry_in_secs = delay,
                        error = %error,
                        "Webhook delivery failed; retrying."
                    );
                    self.retry_at = Some(now + delay);
                }
            }
        }
    }

    /// Delivers the backlog within the flush timeout; what is left is counted for `shutdown`.
    async fn flush(&mut self) {
        let deadline = Instant::now() + self.delivery.flush_timeout;
        // The first try is immediate: the receiver may be back, and shutdown should not sit
        // out a long backoff.
        self.retry_at = None;
        while !self.backlog.is_empty() {
            let at = self.retry_at.map_or_else(Instant::now, instant_at);
            if at >= deadline || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep_until(at).await;
            self.attempt(Some(deadline)).await;
        }
        let left = self.backlog.len();
        self.delivery.queue_length.set(left as i64);
        if left > 0 {
            tracing::warn!(
                notifications = left,
                "Webhook notifications not delivered before shutdown."
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

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn hot(shard: &str) -> Labels {
        labels(&[
            ("alertname", "HotShard"),
            ("group", "db"),
            ("severity", "critical"),
            ("shard", shard),
        ])
    }

    fn transition(l: Labels, state: TransitionState, ts: f64) -> Transition {
        Transition {
            ts,
            alertname: l["alertname"].clone(),
            state,
            labels: l,
            annotations: labels(&[("summary", "hot"), ("share", "0.9")]),
            starts_at: T0,
        }
    }

    const T0: f64 = 1_714_564_800.0;

    #[test]
    fn fingerprint_matches_alertmanager() {
        // Read back from Alertmanager 0.25's GET /api/v2/alerts for this label set.
        assert_eq!(fingerprint(&hot("s1")), "f1aa8919870e17aa");
        assert_eq!(fingerprint(&Labels::new()), "cbf29ce484222325");
    }

    #[test]
    fn payload_has_alertmanagers_v4_field_names_and_values() {
        let u = Update {
            ts: T0,
            transitions: vec![transition(hot("s1"), TransitionState::Firing, T0)],
            alerts: Arc::new(vec![]),
        };
        let m = messages(&u, "chat", "http://sw:9477/api/v1/alerts");
        assert_eq!(m.len(), 1);
        let v = serde_json::to_value(&m[0]).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "version": "4",
                "groupKey": "{}:{alertname=\"HotShard\", group=\"db\"}",
                "truncatedAlerts": 0,
                "status": "firing",
                "receiver": "chat",
                "groupLabels": {"alertname": "HotShard", "group": "db"},
                "commonLabels": {"alertname": "HotShard", "group": "db", "severity": "critical", "shard": "s1"},
                "commonAnnotations": {"share": "0.9", "summary": "hot"},
                "externalURL": "http://sw:9477/api/v1/alerts",
                "alerts": [{
                    "status": "firing",
                    "labels": {"alertname": "HotShard", "group": "db", "severity": "critical", "shard": "s1"},
                    "annotations": {"share": "0.9", "summary": "hot"},
                    "startsAt": "2024-05-01T12:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "http://sw:9477/api/v1/alerts",
                    "fingerprint": "f1aa8919870e17aa"
                }]
            })
        );
    }

    #[test]
    fn a_group_lists_its_still_firing_alerts_and_is_firing_while_any_fires() {
        let still = Alert {
            labels: hot("s2"),
            annotations: labels(&[("summary", "s2 hot")]),
            state: AlertState::Firing,
            active_at: T0,
            fired_at: Some(T0),
            last_true_at: T0 + 60.0,
        };
        let other_group = Alert {
            labels: labels(&[
                ("alertname", "HotShard"),
                ("group", "cache"),
                ("shard", "x"),
            ]),
            ..still.clone()
        };
        let u = Update {
            ts: T0 + 60.0,
            transitions: vec![transition(hot("s1"), TransitionState::Resolved, T0 + 60.0)],
            alerts: Arc::new(vec![still, other_group]),
        };
        let m = messages(&u, "chat", "u");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].status, "firing");
        assert_eq!(m[0].alerts.len(), 2);
        assert_eq!(m[0].alerts[0].status, "resolved");
        assert_eq!(m[0].alerts[0].ends_at, "2024-05-01T12:01:00Z");
        assert_eq!(m[0].alerts[1].status, "firing");
        assert_eq!(m[0].alerts[1].ends_at, ZERO_TIME);
        assert_eq!(
            m[0].common_labels,
            labels(&[
                ("alertname", "HotShard"),
                ("group", "db"),
                ("severity", "critical")
            ])
        );
        assert!(m[0].common_annotations.is_empty());
    }

    #[test]
    fn resolved_only_groups_are_resolved_and_groups_split_by_alertname_and_group() {
        let eg = labels(&[
            ("alertname", "ErrorSurge"),
            ("group", "db"),
            ("severity", "critical"),
        ]);
        let u = Update {
            ts: T0,
            transitions: vec![
                transition(hot("s1"), TransitionState::Resolved, T0),
                transition(eg, TransitionState::Resolved, T0),
            ],
            alerts: Arc::new(vec![]),
        };
        let m = messages(&u, "r", "u");
        assert_eq!(m.len(), 2);
        assert!(m.iter().all(|m| m.status == "resolved"));
        assert_eq!(
            m[0].group_key,
            "{}:{alertname=\"ErrorSurge\", group=\"db\"}"
        );
    }

    #[test]
    fn notifications_are_signed_over_the_exact_body() {
        let u = Update {
            ts: T0,
            transitions: vec![transition(hot("s1"), TransitionState::Firing, T0)],
            alerts: Arc::new(vec![]),
        };
        let m = &messages(&u, "r", "u")[0];
        let secret = Secret::new(b"s3cret");
        let n = Notification::new(m, Some(&secret), T0);
        assert_eq!(
            n.signature.as_deref(),
            Some(sign(&secret, &n.body).as_str())
        );
        assert!(Notification::new(m, None, T0).signature.is_none());
    }

    #[test]
    fn the_backlog_is_bounded_and_drops_the_oldest() {
        let mut b = Backlog::new(2);
        let n = |c: f64| Notification {
            body: vec![],
            signature: None,
            created: c,
            failures: 0,
        };
        assert!(b.push(n(1.0)).is_none());
        assert!(b.push(n(2.0)).is_none());
        assert_eq!(b.push(n(3.0)).map(|n| n.created), Some(1.0));
        assert_eq!(b.len(), 2);
        assert_eq!(b.pop().map(|n| n.created), Some(2.0));
    }
}
