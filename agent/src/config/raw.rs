//! The configuration as written: serde structs that mirror the YAML, every field optional and
//! unknown fields refused. [`super::validate`] turns a [`RawConfig`] into a validated
//! [`crate::app::Config`].

use std::path::PathBuf;

use serde::Deserialize;
use skewwatch_detectors::detect::DetectorsConfig;

/// `listen:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawListen {
    /// HTTP listener address.
    pub http: Option<String>,
    /// StatsD UDP listener address; `"disabled"` turns it off.
    pub statsd: Option<String>,
}

/// `window:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawWindow {
    /// Window length in seconds.
    pub window_secs: Option<f64>,
    /// Windows an idle shard stays known.
    pub shard_idle_windows: Option<u32>,
    /// Threads that record observations, each over its part of the shards.
    pub record_threads: Option<usize>,
}

/// `whatif:` section: the look-aside cache as it runs, the candidates simulated beside it,
/// and the memory the simulations may hold.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawWhatIf {
    /// The cache's TTL for answers, seconds.
    pub ttl_secs: Option<f64>,
    /// The cache's TTL for `not_found` answers, seconds; absent: not cached.
    pub negative_ttl_secs: Option<f64>,
    /// Whether the cache answers a failed backend call with the expired copy it holds.
    pub stale_on_error: Option<bool>,
    /// The cache's size in entries (LRU); absent: no limit.
    pub capacity_entries: Option<u64>,
    /// The cache's clock tick, seconds (memcached: 1); absent: exact time.
    pub clock_tick_secs: Option<f64>,
    /// The candidate policies (`ttl=20m`, `serve-stale`, `ttl=20m+serve-stale`, ...).
    pub candidates: Option<Vec<String>>,
    /// The memory one group's simulation may hold, bytes.
    pub memory_bytes_per_group: Option<usize>,
    /// Groups simulated at once.
    pub max_groups: Option<usize>,
    /// Shards tallied per group.
    pub max_shards_per_group: Option<usize>,
    /// Shards' backend capacities, calls a second.
    pub backend_capacities: Option<Vec<skewwatch_detectors::whatif::BackendCapacity>>,
}

/// `limits:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawLimits {
    /// Groups tracked.
    pub max_groups: Option<usize>,
    /// Shards tracked per group.
    pub max_shards_per_group: Option<usize>,
    /// Shards tracked over every group: the memory budget.
    pub max_shards_total: Option<usize>,
    /// Groups always tracked, whatever `max_groups`.
    pub pinned_groups: Option<Vec<String>>,
    /// Key summary slots per group.
    pub group_key_slots: Option<usize>,
    /// Key summary slots per shard.
    pub shard_key_slots: Option<usize>,
    /// Top keys exported per group.
    pub exported_keys_per_group: Option<usize>,
    /// HDR significant figures.
    pub latency_sigfig: Option<u8>,
    /// Largest HTTP body.
    pub http_body_limit_bytes: Option<usize>,
    /// Ingest queue length in batches.
    pub ingest_queue_batches: Option<usize>,
    /// Ingest queue size in bytes.
    pub ingest_queue_bytes: Option<usize>,
}

/// `statsd:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawStatsd {
    /// SO_RCVBUF size.
    pub receive_buffer_bytes: Option<usize>,
    /// Mappings of other metric names to observations.
    pub mappings: Option<Vec<RawMapping>>,
}

/// One mapping in `statsd.mappings`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawMapping {
    /// The metric name pattern.
    #[serde(rename = "match")]
    pub pattern: Option<String>,
    /// `glob` (default) or `regex`.
    pub match_type: Option<String>,
    /// StatsD types taken (`ms`, `h`, `d`, `c`); default all four.
    pub types: Option<Vec<String>>,
    /// Group template.
    pub group: Option<String>,
    /// Shard template.
    pub shard: Option<String>,
    /// Key template.
    pub key: Option<String>,
    /// Outcome template.
    pub outcome: Option<String>,
    /// Cache result template.
    pub cache: Option<String>,
    /// Template of the look-aside cache's key (kept only as its hash).
    pub cache_key: Option<String>,
    /// How the rendered outcome translates into an outcome class, first matching row wins.
    pub outcomes: Option<Vec<RawOutcomeRow>>,
}

/// One row of an `outcomes:` table (a scrape job's, a StatsD mapping's).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawOutcomeRow {
    /// An exact value.
    #[serde(rename = "match")]
    pub exact: Option<String>,
    /// An anchored regex.
    pub regex: Option<String>,
    /// The outcome of a value the row recognizes.
    pub outcome: Option<String>,
}

/// One job in `scrape:`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawScrapeJob {
    /// The `job` label of the scrape metrics.
    pub name: Option<String>,
    /// The `/metrics` URL (plain http).
    pub url: Option<String>,
    /// Time between scrapes.
    pub interval_secs: Option<f64>,
    /// Time one scrape may take.
    pub timeout_secs: Option<f64>,
    /// Counter and classic histogram names to read.
    pub metrics: Option<Vec<String>>,
    /// The group: literal text, or a template over labels (`{proxy}`); default the job name.
    pub group: Option<String>,
    /// A label whose value is the group, when present.
    pub group_label: Option<String>,
    /// The shard: a template over labels (`{proxy}/{server}`).
    pub shard: Option<String>,
    /// The label naming the shard (shorthand for `shard: "{label}"`).
    pub shard_label: Option<String>,
    /// The key: a template over labels (`{table}`).
    pub key: Option<String>,
    /// The label naming the key.
    pub key_label: Option<String>,
    /// The label naming the outcome.
    pub outcome_label: Option<String>,
    /// How the outcome label's value translates into an outcome class.
    pub outcomes: Option<Vec<RawOutcomeRow>>,
    /// The label naming the cache result.
    pub cache_label: Option<String>,
    /// File holding a bearer token sent to the target.
    pub bearer_token_file: Option<PathBuf>,
    /// Environment variable holding a bearer token sent to the target.
    pub bearer_token_env: Option<String>,
    /// Series whose previous value is kept.
    pub max_series: Option<usize>,
}

/// `fleet:` section: a fleet instance reads the sidecars' cumulative series from a
/// PromQL-compatible HTTP API instead of taking observations.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawFleet {
    /// Base URL of the API (`http://prometheus:9090`); absent or null: no fleet input.
    pub url: Option<String>,
    /// Label matchers added to every series read (`job="skewwatch",namespace="prod"`).
    pub selector: Option<String>,
    /// How long a series may go unseen and still count as the same series.
    pub lookback_secs: Option<f64>,
    /// How long before a window closes its query is made.
    pub query_lead_secs: Option<f64>,
    /// How long before it is made a query is evaluated (the TSDB's latency offset).
    pub evaluation_delay_secs: Option<f64>,
    /// Time one query may take.
    pub timeout_secs: Option<f64>,
    /// History read at start-up to learn baselines; 0 reads none.
    pub backfill_secs: Option<f64>,
    /// Largest answer read, bytes.
    pub max_response_bytes: Option<usize>,
    /// Most series one answer may hold.
    pub max_series: Option<usize>,
    /// File holding a bearer token sent to the API.
    pub bearer_token_file: Option<PathBuf>,
    /// Environment variable holding a bearer token sent to the API.
    pub bearer_token_env: Option<String>,
    /// HTTP basic authentication.
    pub basic_auth: Option<RawBasicAuth>,
    /// Fleet instances that split the groups between them.
    pub instances: Option<u32>,
    /// This instance's place among them, from 0.
    pub instance: Option<u32>,
}

/// `fleet.basic_auth`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawBasicAuth {
    /// The user name.
    pub username: Option<String>,
    /// File holding the password.
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the password.
    pub password_env: Option<String>,
}

/// `exposition:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawExposition {
    /// What `/metrics` writes: `full` or `fleet`.
    pub profile: Option<String>,
    /// Upper bounds of the per-shard latency histogram's buckets, seconds, ascending.
    pub latency_buckets_secs: Option<Vec<f64>>,
    /// How long the counters of a shard, group or key that stopped appearing stay exported.
    pub counter_retention_secs: Option<f64>,
}

/// `auth:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawAuth {
    /// File holding the bearer token.
    pub bearer_token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token.
    pub bearer_token_env: Option<String>,
    /// Allow a listener off loopback without a token.
    pub allow_unauthenticated: Option<bool>,
}

/// `state:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawState {
    /// The state file; absent means no state is kept.
    pub path: Option<PathBuf>,
    /// Windows between writes.
    pub save_every_windows: Option<u32>,
    /// Oldest state restored.
    pub max_age_secs: Option<f64>,
}

/// `shutdown:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawShutdown {
    /// Longest wait for a scrape of the last counts once ingest has stopped.
    pub final_scrape_grace_secs: Option<f64>,
}

/// `ui:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawUi {
    /// Windows kept for the live view.
    pub history_windows: Option<usize>,
}

/// `http:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawHttp {
    /// Time to receive a request's headers (also the keep-alive idle time).
    pub header_read_timeout_secs: Option<f64>,
    /// Time for a whole request: body, handling and answer.
    pub request_timeout_secs: Option<f64>,
    /// Connections served at once.
    pub max_connections: Option<usize>,
    /// Ingest bodies read and parsed at once.
    pub max_concurrent_ingest: Option<usize>,
}

/// One Alertmanager in `alerting.alertmanagers`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawAlertmanager {
    /// The `receiver` label value in the delivery metrics; default `alertmanager-<index>`.
    pub name: Option<String>,
    /// Base URL (`http://alertmanager:9093`, optionally with a path prefix); alerts go to
    /// `<url>/api/v2/alerts`.
    pub url: Option<String>,
    /// Timeout of one POST.
    pub timeout_secs: Option<f64>,
}

/// One generic webhook in `alerting.webhooks`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawWebhook {
    /// The `receiver` field of the payload and label of the delivery metrics.
    pub name: Option<String>,
    /// Where the Alertmanager v4 webhook payload is POSTed.
    pub url: Option<String>,
    /// File holding the HMAC-SHA256 signing secret.
    pub hmac_secret_file: Option<PathBuf>,
    /// Environment variable holding the HMAC-SHA256 signing secret.
    pub hmac_secret_env: Option<String>,
    /// Timeout of one POST.
    pub timeout_secs: Option<f64>,
}

/// `alerting:` section.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawAlerting {
    /// Alertmanagers (API v2); every alert goes to each of them.
    pub alertmanagers: Option<Vec<RawAlertmanager>>,
    /// Generic webhooks (Alertmanager's v4 webhook payload).
    pub webhooks: Option<Vec<RawWebhook>>,
    /// How often firing (and recently resolved) alerts are re-sent to Alertmanagers.
    pub resend_interval_secs: Option<f64>,
    /// How long resolved alerts keep being re-sent to Alertmanagers.
    pub resolved_retention_secs: Option<f64>,
    /// Updates queued per receiver, and webhook notifications waiting per webhook.
    pub queue_capacity: Option<usize>,
    /// Retries of one notification after its first failed attempt.
    pub max_retries: Option<u32>,
    /// Delay before the first retry.
    pub backoff_initial_secs: Option<f64>,
    /// Longest delay between retries.
    pub backoff_max_secs: Option<f64>,
    /// How long a webhook keeps retrying the notification of a resolved alert.
    pub max_notification_age_secs: Option<f64>,
    /// How often a webhook is notified again of a group that still fires.
    pub repeat_interval_secs: Option<f64>,
    /// `generatorURL` of every alert and `externalURL` of webhook payloads.
    pub external_url: Option<String>,
}

/// `otlp:` section: how OpenTelemetry spans and metric points map to observations.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawOtlp {
    /// Entries naming the group (attribute names or `{attr}` templates), first match wins.
    pub group_attributes: Option<Vec<String>>,
    /// Entries naming the shard, first match wins.
    pub shard_attributes: Option<Vec<String>>,
    /// Entries naming the key, first match wins.
    pub key_attributes: Option<Vec<String>>,
    /// Entries giving the cache result, first match wins.
    pub cache_attributes: Option<Vec<String>>,
    /// Entries naming the look-aside cache's key, first match wins.
    pub cache_key_attributes: Option<Vec<String>>,
    /// Take only spans of kind CLIENT.
    pub client_spans_only: Option<bool>,
    /// Metrics taken from `POST /v1/metrics`; empty takes all.
    pub metric_names: Option<Vec<String>>,
    /// Cumulative metric series tracked to compute deltas.
    pub max_cumulative_series: Option<usize>,
}

/// The configuration as written, before validation.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    /// Listeners.
    pub listen: Option<RawListen>,
    /// Windowing.
    pub window: Option<RawWindow>,
    /// Caps and sizes.
    pub limits: Option<RawLimits>,
    /// StatsD socket options.
    pub statsd: Option<RawStatsd>,
    /// The cumulative series that add up across sidecars.
    pub exposition: Option<RawExposition>,
    /// Ingest authentication.
    pub auth: Option<RawAuth>,
    /// HTTP server limits.
    pub http: Option<RawHttp>,
    /// State kept across restarts.
    pub state: Option<RawState>,
    /// How the agent stops.
    pub shutdown: Option<RawShutdown>,
    /// Detector thresholds and alert timing.
    pub detectors: Option<DetectorsConfig>,
    /// Alert delivery.
    pub alerting: Option<RawAlerting>,
    /// The live view.
    pub ui: Option<RawUi>,
    /// OTLP/HTTP receiver mapping.
    pub otlp: Option<RawOtlp>,
    /// Prometheus targets read as input.
    pub scrape: Option<Vec<RawScrapeJob>>,
    /// The fleet input: the sidecars' cumulative series read from a PromQL API.
    pub fleet: Option<RawFleet>,
    /// The what-if simulations of the look-aside cache.
    pub whatif: Option<RawWhatIf>,
}
