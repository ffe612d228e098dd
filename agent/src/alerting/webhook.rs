//! The generic webhook: POSTs Alertmanager's version-4 webhook payload, so receivers written
//! for Alertmanager (chat bridges, incident tools) take skewwatch alerts unchanged.
//!
//! Notifications are per alert group (`alertname` + `group`, like an Alertmanager route with
//! `group_by: [alertname, group]`). Like Alertmanager's, one lists every alert of the group:
//! the ones still firing and the ones that just resolved; `status` is `firing` while any of
//! them fires. A firing alert's `endsAt` is Go's zero time, `0001-01-01T00:00:00Z`.
//!
//! Delivery converges on the current state rather than replaying a history: the [`Outbox`]
//! keeps, per group, what the receiver should know and the version it acknowledged. A group is
//! sent when its state changed, and again every `repeat_interval` while it fires; a failed
//! attempt is retried with capped backoff for as long as the state is owed (a newer state
//! replaces an older one that never got through). A resolved alert is retried for
//! `resolved_retention`, then forgotten. So after an outage of the receiver, or a restart of
//! the agent, the receiver ends in the right state.
//!
//! Every POST carries `X-Skewwatch-Timestamp` (unix seconds) and `X-Skewwatch-Delivery` (the
//! same for every attempt at one state of one group, so a receiver can drop duplicates); with
//! a secret, `X-Skewwatch-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use skewwatch_detectors::alert::{AlertState, Labels, TransitionState};
use skewwatch_detectors::prng::{fnv1a64, fnv1a64_extend};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{
    DELIVERY_HEADER, Delivery, DropReason, SIGNATURE_HEADER, TIMESTAMP_HEADER, Update, sign,
};
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

/// An alert group: `alertname` and `group`, like an Alertmanager route with
/// `group_by: [alertname, group]`.
fn group_of(labels: &Labels) -> Labels {
    labels
        .iter()
        .filter(|(k, _)| *k == "alertname" || *k == "group")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// When notifications are due.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// A group that still fires is notified again after this long (Alertmanager's
    /// `repeat_interval`), so a receiver that lost a notification converges.
    pub repeat_interval: f64,
    /// How long a resolved alert that no notification has delivered is still retried.
    pub resolved_retention: f64,
}

/// One alert group as the receiver should see it.
#[derive(Debug, Clone, Default)]
struct GroupState {
    /// Firing alerts, and resolved ones not yet delivered, by labels.
    alerts: BTreeMap<Labels, MessageAlert>,
    /// When each resolved alert resolved (unix seconds).
    resolved_at: BTreeMap<Labels, f64>,
    /// Bumped whenever what the group would say changes.
    version: u64,
    /// The version the receiver acknowledged, and when.
    delivered: Option<(u64, f64)>,
    /// Failed attempts at the current version.
    failures: u32,
    /// No attempt before this time (backoff).
    retry_at: Option<f64>,
}

impl GroupState {
    fn firing(&self) -> bool {
        self.alerts.values().any(|a| a.status == "firing")
    }

    /// The receiver has not acknowledged the latest state.
    fn owed(&self) -> bool {
        self.delivered.is_none_or(|(v, _)| v != self.version)
    }

    /// Due at `now`: changed since the last delivery, or still firing a repeat interval after
    /// it; and not backing off.
    fn due(&self, now: f64, timing: &Timing) -> bool {
        if self.retry_at.is_some_and(|r| now < r) {
            return false;
        }
        match self.delivered {
            None => true,
            Some((v, at)) => {
                v != self.version || (self.firing() && now - at >= timing.repeat_interval)
            }
        }
    }

    /// When this group next needs an attempt.
    fn next_due(&self, timing: &Timing) -> f64 {
        let by_state = match self.delivered {
            Some((v, at)) if v == self.version => {
                if self.firing() {
                    at + timing.repeat_interval
                } else {
                    f64::INFINITY
                }
            }
            _ => f64::NEG_INFINITY,
        };
        self.retry_at.map_or(by_state, |r| by_state.max(r))
    }
}

/// What each alert group should tell the receiver, and what it has acknowledged: the state a
/// webhook converges on, whatever was lost on the way.
///
/// Bounded by the alerts themselves: one entry per active alert group, plus resolved alerts
/// until they are delivered or `resolved_retention` passes.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    groups: BTreeMap<Labels, GroupState>,
}

impl Outbox {
    /// Takes in one evaluation: every active firing alert, and the alerts that resolved.
    pub fn apply(&mut self, u: &Update, external_url: &str) {
        let firing: BTreeMap<&Labels, &skewwatch_detectors::alert::Alert> = u
            .alerts
            .iter()
            .filter(|a| a.state == AlertState::Firing)
            .map(|a| (&a.labels, a))
            .collect();
        for a in firing.values() {
            let g = self.groups.entry(group_of(&a.labels)).or_default();
            let new = MessageAlert {
                status: "firing",
                labels: a.labels.clone(),
                annotations: a.annotations.clone(),
                starts_at: rfc3339(a.fired_at.unwrap_or(a.active_at)),
                ends_at: ZERO_TIME.to_owned(),
                generator_url: external_url.to_owned(),
                fingerprint: fingerprint(&a.labels),
            };
            match g.alerts.get_mut(&a.labels) {
                // Annotations change every window; they ride along without a new version.
                Some(old) if old.status == "firing" => old.annotations = new.annotations,
                _ => {
                    g.resolved_at.remove(&a.labels);
                    g.alerts.insert(a.labels.clone(), new);
                    g.version += 1;
                }
            }
        }
        for t in &u.transitions {
            if t.state != TransitionState::Resolved {
                continue;
            }
            self.resolve(&t.labels, &t.annotations, t.ts);
        }
        // A firing alert that is no longer active resolved without a transition reaching us
        // (a dropped update): resolve it now rather than leave the receiver with it firing.
        let stale: Vec<Labels> = self
            .groups
            .values()
            .flat_map(|g| g.alerts.values())
            .filter(|a| a.status == "firing" && !firing.contains_key(&a.labels))
            .map(|a| a.labels.clone())
            .collect();
        for l in stale {
            let annotations = Labels::new();
            self.resolve(&l, &annotations, u.ts);
        }
    }

    fn resolve(&mut self, labels: &Labels, annotations: &Labels, at: f64) {
        let Some(g) = self.groups.get_mut(&group_of(labels)) else {
            return;
        };
        let Some(a) = g.alerts.get_mut(labels) else {
            return;
        };
        if a.status == "resolved" {
            return;
        }
        a.status = "resolved";
        a.ends_at = rfc3339(at);
        if !annotations.is_empty() {
            a.annotations = annotations.clone();
        }
        g.resolved_at.insert(labels.clone(), at);
        g.version += 1;
    }

    /// Groups due at `now`.
    pub fn due(&self, now: f64, timing: &Timing) -> Vec<Labels> {
        self.groups
            .iter()
            .filter(|(_, g)| g.due(now, timing))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// How many groups' latest state the receiver has not acknowledged.
    pub fn owed(&self) -> usize {
        self.groups.values().filter(|g| g.owed()).count()
    }

    /// The groups whose latest state the receiver has not acknowledged.
    pub fn unacknowledged(&self) -> Vec<Labels> {
        self.groups
            .iter()
            .filter(|(_, g)| g.owed())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// When the next attempt is due (`None`: nothing to send).
    pub fn next_due(&self, timing: &Timing) -> Option<f64> {
        self.groups
            .values()
            .map(|g| g.next_due(timing))
            .filter(|t| t.is_finite() || *t == f64::NEG_INFINITY)
            .min_by(f64::total_cmp)
    }

    /// The notification for `group` now, and the version it carries.
    pub fn message(
        &self,
        group: &Labels,
        receiver: &str,
        external_url: &str,
    ) -> Option<(Message, u64)> {
        let g = self.groups.get(group)?;
        let alerts: Vec<MessageAlert> = g.alerts.values().cloned().collect();
        let m = Message {
            version: "4",
            group_key: format!("{{}}:{}", go_label_set(group)),
            truncated_alerts: 0,
            status: if g.firing() { "firing" } else { "resolved" },
            receiver: receiver.to_owned(),
            common_labels: common(alerts.iter().map(|a| &a.labels)),
            common_annotations: common(alerts.iter().map(|a| &a.annotations)),
            group_labels: group.clone(),
            external_url: external_url.to_owned(),
            alerts,
        };
        Some((m, g.version))
    }

    /// The receiver acknowledged `version` of `group` at `now`: its resolved alerts are done.
    pub fn delivered(&mut self, group: &Labels, version: u64, now: f64) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.delivered = Some((version, now));
        g.failures = 0;
        g.retry_at = None;
        if g.version == version {
            g.alerts.retain(|_, a| a.status == "firing");
            g.resolved_at.clear();
        }
        if g.alerts.is_empty() {
            self.groups.remove(group);
        }
    }

    /// An attempt at `group` failed; the next waits `delay` seconds. Returns the failures so
    /// far.
    pub fn failed(&mut self, group: &Labels, now: f64, delay: f64) -> u32 {
        let Some(g) = self.groups.get_mut(group) else {
            return 0;
        };
        g.failures += 1;
        g.retry_at = Some(now + delay);
        g.failures
    }

    /// Failures so far of `group`'s current attempt.
    fn failures(&self, group: &Labels) -> u32 {
        self.groups.get(group).map_or(0, |g| g.failures)
    }

    /// Forgets resolved alerts undelivered for longer than `resolved_retention`; returns how
    /// many.
    pub fn expire(&mut self, now: f64, timing: &Timing) -> usize {
        let mut expired = 0;
        for g in self.groups.values_mut() {
            let old: Vec<Labels> = g
                .resolved_at
                .iter()
                .filter(|(_, at)| now - **at > timing.resolved_retention)
                .map(|(l, _)| l.clone())
                .collect();
            if !old.is_empty() {
                g.version += 1;
            }
            for l in old {
                g.resolved_at.remove(&l);
                g.alerts.remove(&l);
                expired += 1;
            }
        }
        self.groups.retain(|_, g| !g.alerts.is_empty());
        expired
    }
}

/// The headers that sign `body`: the timestamp, the delivery id and, with a secret,
/// `sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`. Signing the timestamp with the
/// body lets a receiver refuse a replayed notification (docs/alerting.md has the recipe).
pub fn signed_headers(
    body: &[u8],
    secret: Option<&Secret>,
    timestamp: u64,
    delivery_id: &str,
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        (TIMESTAMP_HEADER, timestamp.to_string()),
        (DELIVERY_HEADER, delivery_id.to_owned()),
    ];
    if let Some(secret) = secret {
        let mut signed = Vec::with_capacity(body.len() + 24);
        signed.extend_from_slice(timestamp.to_string().as_bytes());
        signed.push(b'.');
        signed.extend_from_slice(body);
        headers.push((SIGNATURE_HEADER, sign(secret, &signed)));
    }
    headers
}

/// The task that delivers to one webhook.
#[derive(Debug)]
pub(super) struct WebhookTask {
    delivery: Delivery,
    secret: Option<Secret>,
    external_url: Arc<str>,
    outbox: Outbox,
    timing: Timing,
    /// Tells this process's delivery ids apart from another run's.
    nonce: u64,
}

impl WebhookTask {
    pub(super) fn new(
        delivery: Delivery,
        secret: Option<Secret>,
        external_url: Arc<str>,
        timing: Timing,
    ) -> Self {
        let nonce = fnv1a64(format!("{}{}", delivery.name, wall_now()).as_bytes());
        WebhookTask {
            delivery,
            secret,
            external_url,
            outbox: Outbox::default(),
            timing,
            nonce,
        }
    }

    /// Runs until the dispatcher is dropped, then flushes.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Arc<Update>>) {
        loop {
            let wake = self.outbox.next_due(&self.timing);
            tokio::select! {
                u = rx.recv() => match u {
                    Some(u) => self.outbox.apply(&u, &self.external_url),
                    None => break,
                },
                _ = sleep_until(wake) => self.attempt(None).await,
            }
            self.expire();
            self.delivery.queue_length.set(self.outbox.owed() as i64);
        }
        self.flush().await;
    }

    fn expire(&mut self) {
        let expired = self.outbox.expire(wall_now(), &self.timing);
        if expired > 0 {
            tracing::warn!(
                alerts = expired,
                "Resolved alerts expired before the webhook acknowledged them."
            );
            self.delivery.drop_counted(DropReason::Expired, expired);
        }
    }

    /// Sends every due group once.
    async fn attempt(&mut self, deadline: Option<Instant>) {
        for group in self.outbox.due(wall_now(), &self.timing) {
            self.send(&group, deadline).await;
        }
    }

    /// One POST of `group`'s current notification.
    async fn send(&mut self, group: &Labels, deadline: Option<Instant>) {
        let Some((m, version)) =
            self.outbox
                .message(group, &self.delivery.name, &self.external_url)
        else {
            return;
        };
        let body = serde_json::to_vec(&m).expect("messages serialize");
        let now = wall_now();
        let id = format!(
            "{:016x}-{:016x}-{version}",
            self.nonce,
            fnv1a64(m.group_key.as_bytes())
        );
        let headers = signed_headers(&body, self.secret.as_ref(), now as u64, &id);
        match self.delivery.post(body, &headers, deadline).await {
            Ok(()) => {
                let failures = self.outbox.failures(group);
                if failures > 0 {
                    tracing::info!(failures, "Webhook notification delivered after retries.");
                }
                self.outbox.delivered(group, version, wall_now());
            }
            Err(error) if error.is_permanent() => {
                tracing::error!(
                    error = %error,
                    "Webhook rejected a notification; not sending this state again."
                );
                self.delivery.drop_counted(DropReason::Rejected, 1);
                self.outbox.delivered(group, version, wall_now());
            }
            Err(error) => {
                let delay = self
                    .delivery
                    .retry_delay(self.outbox.failures(group).saturating_add(1));
                let failures = self.outbox.failed(group, now, delay);
                tracing::warn!(
                    failures,
                    retry_in_secs = delay,
                    error = %error,
                    "Webhook delivery failed; retrying."
                );
            }
        }
    }

    /// Delivers what is owed within the flush timeout; what is left is counted for
    /// `shutdown`.
    async fn flush(&mut self) {
        let deadline = Instant::now() + self.delivery.flush_timeout;
        loop {
            let owed = self.outbox.unacknowledged();
            if owed.is_empty() || Instant::now() >= deadline {
                break;
            }
            // Every owed group is tried at once, whatever its backoff: the receiver may be
            // back, and shutdown should not sit out a long backoff.
            for g in &owed {
                self.send(g, Some(deadline)).await;
            }
            let pause = Instant::now() + Duration::from_millis(200);
            tokio::time::sleep_until(deadline.min(pause)).await;
        }
        let left = self.outbox.owed();
        self.delivery.queue_length.set(left as i64);
        if left > 0 {
            tracing::warn!(
                groups = left,
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
        None => tokio::time::sleep(Duration::from_secs(3600)).await,
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

    fn firing(l: Labels, fired_at: f64) -> Alert {
        Alert {
            labels: l,
            annotations: labels(&[("summary", "hot"), ("share", "0.9")]),
            state: AlertState::Firing,
            active_at: fired_at,
            fired_at: Some(fired_at),
            last_true_at: fired_at,
        }
    }

    fn update(ts: f64, transitions: Vec<Transition>, alerts: Vec<Alert>) -> Update {
        Update {
            ts,
            transitions,
            alerts: Arc::new(alerts),
        }
    }

    const TIMING: Timing = Timing {
        repeat_interval: 3600.0,
        resolved_retention: 900.0,
    };

    fn db_hot() -> Labels {
        group_of(&hot("s1"))
    }

    #[test]
    fn payload_has_alertmanagers_v4_field_names_and_values() {
        let mut o = Outbox::default();
        o.apply(
            &update(
                T0,
                vec![transition(hot("s1"), TransitionState::Firing, T0)],
                vec![firing(hot("s1"), T0)],
            ),
            "http://sw:9477/api/v1/alerts",
        );
        assert_eq!(o.due(T0, &TIMING), [db_hot()]);
        let (m, _) = o
            .message(&db_hot(), "chat", "http://sw:9477/api/v1/alerts")
            .unwrap();
        let v = serde_json::to_value(&m).unwrap();
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
        let mut o = Outbox::default();
        let other_group = labels(&[
            ("alertname", "HotShard"),
            ("group", "cache"),
            ("shard", "x"),
        ]);
        o.apply(
            &update(
                T0,
                vec![],
                vec![
                    firing(hot("s1"), T0),
                    firing(hot("s2"), T0),
                    firing(other_group, T0),
                ],
            ),
            "u",
        );
        o.apply(
            &update(
                T0 + 60.0,
                vec![transition(hot("s1"), TransitionState::Resolved, T0 + 60.0)],
                vec![firing(hot("s2"), T0)],
            ),
            "u",
        );
        let (m, _) = o.message(&db_hot(), "chat", "u").unwrap();
        assert_eq!(m.status, "firing");
        assert_eq!(m.alerts.len(), 2);
        assert_eq!(m.alerts[0].status, "resolved");
        assert_eq!(m.alerts[0].ends_at, "2024-05-01T12:01:00Z");
        assert_eq!(m.alerts[1].status, "firing");
        assert_eq!(m.alerts[1].ends_at, ZERO_TIME);
        assert_eq!(
            m.common_labels,
            labels(&[
                ("alertname", "HotShard"),
                ("group", "db"),
                ("severity", "critical")
            ])
        );
        // The cache group's alert is no longer active at all: it resolves too.
        let cache = group_of(&labels(&[("alertname", "HotShard"), ("group", "cache")]));
        assert_eq!(o.message(&cache, "chat", "u").unwrap().0.status, "resolved");
    }

    #[test]
    fn groups_split_by_alertname_and_group() {
        let eg = labels(&[
            ("alertname", "ErrorSurge"),
            ("group", "db"),
            ("severity", "critical"),
        ]);
        let mut o = Outbox::default();
        o.apply(
            &update(T0, vec![], vec![firing(hot("s1"), T0), firing(eg, T0)]),
            "u",
        );
        let due = o.due(T0, &TIMING);
        assert_eq!(due.len(), 2);
        assert_eq!(
            o.message(&due[0], "r", "u").unwrap().0.group_key,
            "{}:{alertname=\"ErrorSurge\", group=\"db\"}"
        );
    }

    #[test]
    fn a_failed_state_is_retried_until_delivered_and_a_newer_state_replaces_it() {
        let mut o = Outbox::default();
        o.apply(&update(T0, vec![], vec![firing(hot("s1"), T0)]), "u");
        let (_, v1) = o.message(&db_hot(), "r", "u").unwrap();
        assert_eq!(o.failed(&db_hot(), T0, 30.0), 1);
        assert!(o.due(T0 + 29.0, &TIMING).is_empty(), "backing off");
        assert_eq!(o.next_due(&TIMING), Some(T0 + 30.0));
        // Ten minutes of outage later the alert resolved: the receiver is owed the resolve.
        let t = T0 + 600.0;
        o.apply(
            &update(
                t,
                vec![transition(hot("s1"), TransitionState::Resolved, t)],
                vec![],
            ),
            "u",
        );
        o.failed(&db_hot(), t, 30.0);
        let (m, v2) = o.message(&db_hot(), "r", "u").unwrap();
        assert!(v2 > v1);
        assert_eq!(m.status, "resolved");
        assert_eq!(o.due(t + 30.0, &TIMING), [db_hot()]);
        o.delivered(&db_hot(), v2, t + 30.0);
        assert_eq!(o.owed(), 0);
        assert!(
            o.message(&db_hot(), "r", "u").is_none(),
            "a delivered resolve is done"
        );
    }

    #[test]
    fn a_firing_group_is_repeated_and_a_quiet_one_is_not() {
        let mut o = Outbox::default();
        o.apply(&update(T0, vec![], vec![firing(hot("s1"), T0)]), "u");
        let (_, v) = o.message(&db_hot(), "r", "u").unwrap();
        o.delivered(&db_hot(), v, T0);
        // New annotations every window are not a new state.
        o.apply(&update(T0 + 10.0, vec![], vec![firing(hot("s1"), T0)]), "u");
        assert!(o.due(T0 + 10.0, &TIMING).is_empty());
        assert_eq!(o.next_due(&TIMING), Some(T0 + 3600.0));
        assert_eq!(o.due(T0 + 3600.0, &TIMING), [db_hot()]);
    }

    #[test]
    fn an_undelivered_resolve_expires_after_the_retention() {
        let mut o = Outbox::default();
        o.apply(&update(T0, vec![], vec![firing(hot("s1"), T0)]), "u");
        o.apply(
            &update(
                T0 + 10.0,
                vec![transition(hot("s1"), TransitionState::Resolved, T0 + 10.0)],
                vec![],
            ),
            "u",
        );
        assert_eq!(o.expire(T0 + 10.0 + 899.0, &TIMING), 0);
        assert_eq!(o.expire(T0 + 10.0 + 901.0, &TIMING), 1);
        assert_eq!(o.owed(), 0);
        assert_eq!(o.next_due(&TIMING), None);
    }

    #[test]
    fn notifications_are_signed_over_the_timestamp_and_the_exact_body() {
        let secret = Secret::new(b"s3cret");
        let body = br#"{"version":"4"}"#;
        let h = signed_headers(body, Some(&secret), 1_714_564_800, "abc-1");
        let get = |name: &str| h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        assert_eq!(get(TIMESTAMP_HEADER).as_deref(), Some("1714564800"));
        assert_eq!(get(DELIVERY_HEADER).as_deref(), Some("abc-1"));
        let expected = sign(&secret, b"1714564800.{\"version\":\"4\"}");
        assert_eq!(get(SIGNATURE_HEADER), Some(expected));
        assert!(
            signed_headers(body, None, 1, "x")
                .iter()
                .all(|(n, _)| *n != SIGNATURE_HEADER)
        );
    }
}
