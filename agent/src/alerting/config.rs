//! The `alerting:` section, owned by alert delivery: the validated receivers and timing, and
//! their validation from the raw file (webhook secrets read then, so `check-config` refuses
//! what `run` would).

use std::time::Duration;

use crate::config::Secret;
use crate::config::raw::{RawAlerting, RawAlertmanager, RawWebhook};
use crate::config::validate::Check;

/// Largest timeout of one delivery POST, and largest retry delay.
const MAX_DELIVERY_SECS: f64 = 300.0;

/// Default timeout of one delivery POST.
const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// A validated Alertmanager target.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertmanagerTarget {
    /// The `receiver` label value.
    pub name: String,
    /// The full `.../api/v2/alerts` URL.
    pub url: reqwest::Url,
    /// Timeout of one POST.
    pub timeout: Duration,
}

/// A validated webhook target.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookTarget {
    /// The `receiver` field and label value.
    pub name: String,
    /// Where the payload is POSTed.
    pub url: reqwest::Url,
    /// Signing secret, if the payload is signed.
    pub hmac_secret: Option<Secret>,
    /// Timeout of one POST.
    pub timeout: Duration,
}

/// Validated `alerting:` settings. The bounds they imply are described in
/// [`crate::alerting`].
#[derive(Debug, Clone, PartialEq)]
pub struct AlertingConfig {
    /// Alertmanagers, each sent every alert.
    pub alertmanagers: Vec<AlertmanagerTarget>,
    /// Generic webhooks.
    pub webhooks: Vec<WebhookTarget>,
    /// Re-send period of firing and recently resolved alerts (Prometheus `resend-delay`).
    pub resend_interval: Duration,
    /// How long resolved alerts are re-sent (Prometheus `resolvedRetention`).
    pub resolved_retention: Duration,
    /// Capacity of each receiver's update queue and of each webhook's notification backlog.
    pub queue_capacity: usize,
    /// Retries after the first failed attempt of a notification.
    pub max_retries: u32,
    /// First retry delay.
    pub backoff_initial: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
    /// How long a webhook retries the notification of a resolved alert before forgetting it.
    pub max_notification_age: Duration,
    /// A webhook is notified again of a group that still fires after this long
    /// (Alertmanager's `repeat_interval`).
    pub repeat_interval: Duration,
    /// `generatorURL` / `externalURL`; `None` means `http://<HTTP listener>/api/v1/alerts`,
    /// resolved once the listener is bound.
    pub external_url: Option<String>,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        AlertingConfig {
            alertmanagers: Vec::new(),
            webhooks: Vec::new(),
            resend_interval: Duration::from_secs(60),
            resolved_retention: Duration::from_secs(15 * 60),
            queue_capacity: 1024,
            max_retries: 10,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            max_notification_age: Duration::from_secs(15 * 60),
            repeat_interval: Duration::from_secs(4 * 3600),
            external_url: None,
        }
    }
}

/// Validates `alerting:`, reading the webhooks' secrets, every problem pushed to `c`.
pub fn validate(c: &mut Check<'_>, raw: RawAlerting) -> AlertingConfig {
    let d = AlertingConfig::default();
    let backoff = (raw.backoff_initial_secs, raw.backoff_max_secs);
    let (alertmanagers, webhooks) = receivers(
        c,
        raw.alertmanagers.unwrap_or_default(),
        raw.webhooks.unwrap_or_default(),
    );
    let resend_interval = c.secs(
        "alerting.resend_interval_secs",
        raw.resend_interval_secs,
        d.resend_interval,
        0.1,
        86_400.0,
    );
    let resolved_retention = c.secs(
        "alerting.resolved_retention_secs",
        raw.resolved_retention_secs,
        d.resolved_retention,
        0.0,
        86_400.0,
    );
    let queue_capacity = c.range(
        "alerting.queue_capacity",
        raw.queue_capacity,
        d.queue_capacity,
        1,
        1 << 20,
    );
    let max_retries = c.range(
        "alerting.max_retries",
        raw.max_retries,
        d.max_retries,
        0,
        1000,
    );
    let (backoff_initial, backoff_max) = backoff_bounds(c, backoff.0, backoff.1, &d);
    let max_notification_age = c.secs(
        "alerting.max_notification_age_secs",
        raw.max_notification_age_secs,
        d.max_notification_age,
        1.0,
        7.0 * 86_400.0,
    );
    let repeat_interval = c.secs(
        "alerting.repeat_interval_secs",
        raw.repeat_interval_secs,
        d.repeat_interval,
        1.0,
        7.0 * 86_400.0,
    );
    let external_url = external_url(c, raw.external_url);
    AlertingConfig {
        alertmanagers,
        webhooks,
        resend_interval,
        resolved_retention,
        queue_capacity,
        max_retries,
        backoff_initial,
        backoff_max,
        max_notification_age,
        repeat_interval,
        external_url,
    }
}

/// Every receiver, with names unique across both kinds.
fn receivers(
    c: &mut Check<'_>,
    alertmanagers: Vec<RawAlertmanager>,
    webhooks: Vec<RawWebhook>,
) -> (Vec<AlertmanagerTarget>, Vec<WebhookTarget>) {
    let mut names = Vec::new();
    let alertmanagers = alertmanagers
        .into_iter()
        .enumerate()
        .filter_map(|(i, am)| alertmanager(c, i, am, &mut names))
        .collect();
    let webhooks = webhooks
        .into_iter()
        .enumerate()
        .filter_map(|(i, w)| webhook(c, i, w, &mut names))
        .collect();
    (alertmanagers, webhooks)
}

fn alertmanager(
    c: &mut Check<'_>,
    i: usize,
    am: RawAlertmanager,
    names: &mut Vec<String>,
) -> Option<AlertmanagerTarget> {
    let f = format!("alerting.alertmanagers[{i}]");
    let name = am.name.unwrap_or_else(|| format!("alertmanager-{i}"));
    receiver_name(c, &format!("{f}.name"), &name, names);
    let url = c.receiver_url(&format!("{f}.url"), am.url.as_deref());
    let timeout = c.secs(
        &format!("{f}.timeout_secs"),
        am.timeout_secs,
        DEFAULT_DELIVERY_TIMEOUT,
        0.1,
        MAX_DELIVERY_SECS,
    );
    Some(AlertmanagerTarget {
        name,
        url: alertmanager_api_url(url?),
        timeout,
    })
}

fn webhook(
    c: &mut Check<'_>,
    i: usize,
    w: RawWebhook,
    names: &mut Vec<String>,
) -> Option<WebhookTarget> {
    let f = format!("alerting.webhooks[{i}]");
    match w.name.as_deref() {
        Some(n) => receiver_name(c, &format!("{f}.name"), n, names),
        None => c.fail(&format!("{f}.name"), "required: names the receiver"),
    }
    let url = c.receiver_url(&format!("{f}.url"), w.url.as_deref());
    let timeout = c.secs(
        &format!("{f}.timeout_secs"),
        w.timeout_secs,
        DEFAULT_DELIVERY_TIMEOUT,
        0.1,
        MAX_DELIVERY_SECS,
    );
    let hmac_secret = c.secret(&f, "hmac_secret", w.hmac_secret_file, w.hmac_secret_env);
    Some(WebhookTarget {
        name: w.name?,
        url: url?,
        hmac_secret,
        timeout,
    })
}

fn backoff_bounds(
    c: &mut Check<'_>,
    initial: Option<f64>,
    max: Option<f64>,
    d: &AlertingConfig,
) -> (Duration, Duration) {
    let initial = c.secs(
        "alerting.backoff_initial_secs",
        initial,
        d.backoff_initial,
        0.01,
        MAX_DELIVERY_SECS,
    );
    let max = c.secs(
        "alerting.backoff_max_secs",
        max,
        d.backoff_max,
        0.01,
        MAX_DELIVERY_SECS,
    );
    if initial > max {
        c.fail(
            "alerting.backoff_initial_secs",
            format!(
                "{} exceeds alerting.backoff_max_secs ({})",
                initial.as_secs_f64(),
                max.as_secs_f64()
            ),
        );
    }
    (initial, max)
}

fn external_url(c: &mut Check<'_>, url: Option<String>) -> Option<String> {
    let s = url?;
    match reqwest::Url::parse(&s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Some(s),
        _ => {
            c.fail(
                "alerting.external_url",
                format!(
                    "`{s}` is not an http(s) URL; write e.g. http://skewwatch:9477/api/v1/alerts"
                ),
            );
            None
        }
    }
}

/// A plain-HTTP receiver URL. TLS is not built in (reqwest without a TLS backend).
fn receiver_name(c: &mut Check<'_>, field: &str, name: &str, seen: &mut Vec<String>) {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !ok {
        c.fail(
            field,
            format!("`{name}`: use 1 to 64 characters from A-Z a-z 0-9 _ . -"),
        );
    } else if seen.iter().any(|n| n == name) {
        c.fail(
            field,
            format!("`{name}` is used by another receiver; names must be unique"),
        );
    }
    seen.push(name.to_owned());
}

/// The API v2 endpoint under an Alertmanager base URL (which may carry a path prefix); a URL
/// that already names the endpoint is kept.
fn alertmanager_api_url(mut url: reqwest::Url) -> reqwest::Url {
    const ENDPOINT: &str = "/api/v2/alerts";
    let path = url.path().trim_end_matches('/').to_owned();
    if !path.ends_with(ENDPOINT) {
        url.set_path(&format!("{path}{ENDPOINT}"));
    }
    url
}
