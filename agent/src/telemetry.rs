//! Self-metrics: what the agent itself did (records taken, rejected and dropped, datagrams,
//! windows, alert deliveries). Counters live in a [`prometheus::Registry`] passed explicitly,
//! never a global one, so tests with several agents in one process do not collide.
//!
//! The ingest counters of each source are resolved to plain [`IntCounter`]s once, at start-up
//! ([`SourceMetrics`]): `with_label_values` takes the metric family's lock, and the ingest hot
//! path should take none.

use prometheus::core::Collector;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use skewwatch_detectors::observation::{RejectReason, Rejections};

/// Where records come from: the `source` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// StatsD over UDP.
    Statsd,
    /// HTTP NDJSON.
    Http,
    /// OTLP/HTTP spans and metrics.
    Otlp,
    /// `scrape:` jobs (Prometheus targets).
    Scrape,
    /// The fleet input (`fleet:`, sums read from a PromQL API).
    Fleet,
}

impl Source {
    /// Every source, in [`Source::index`] order.
    pub const ALL: [Source; 5] = [
        Source::Statsd,
        Source::Http,
        Source::Otlp,
        Source::Scrape,
        Source::Fleet,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Statsd => "statsd",
            Source::Http => "http",
            Source::Otlp => "otlp",
            Source::Scrape => "scrape",
            Source::Fleet => "fleet",
        }
    }

    /// Position in [`Source::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Adds `n` to `counter`, stopping at `u64::MAX` instead of wrapping to a small number that
/// `rate()` would read as a reset (a client can claim 2^40 requests per record, so 2^64 is
/// reachable in seconds). The read and the add are not one atomic step: two writers adding at
/// the very top at once could still wrap, which needs that same hostile volume from two
/// connections at the same instant.
pub fn saturating_inc(counter: &IntCounter, n: u64) {
    counter.inc_by(n.min(u64::MAX - counter.get()));
}

/// Why a valid record was dropped before the pipeline: the `reason` label of
/// `skewwatch_ingest_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The ingest queue was full.
    QueueFull,
    /// The pipeline had stopped (shutdown).
    Shutdown,
}

impl DropReason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::Shutdown => "shutdown",
        }
    }
}

/// Why an OTLP span or data point was skipped: the `reason` label of
/// `skewwatch_ingest_skipped_total{source="otlp"}`. Skipping is not an error: the telemetry was valid but
/// does not describe a call to a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SkipReason {
    /// A span whose kind is not CLIENT (with `otlp.client_spans_only`).
    NotClient = 0,
    /// No attribute named the shard.
    NoShard = 1,
    /// No attribute named the group.
    NoGroup = 2,
    /// A metric type that carries no per-request counts (gauge, summary, exponential
    /// histogram, non-monotonic sum), or a histogram whose unit is not a time.
    MetricType = 3,
    /// A metric whose name is not in `otlp.metric_names`.
    MetricName = 4,
    /// The first point of a cumulative series that started before the agent: it only sets
    /// the baseline the next point's delta is taken from.
    Baseline = 5,
    /// A new cumulative series while `otlp.max_cumulative_series` series are tracked.
    SeriesCap = 6,
}

impl SkipReason {
    /// Every reason, for pre-registering counters so that zeros are visible.
    pub const ALL: [SkipReason; 7] = [
        SkipReason::NotClient,
        SkipReason::NoShard,
        SkipReason::NoGroup,
        SkipReason::MetricType,
        SkipReason::MetricName,
        SkipReason::Baseline,
        SkipReason::SeriesCap,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::NotClient => "not_client",
            SkipReason::NoShard => "no_shard",
            SkipReason::NoGroup => "no_group",
            SkipReason::MetricType => "metric_type",
            SkipReason::MetricName => "metric_name",
            SkipReason::Baseline => "baseline",
            SkipReason::SeriesCap => "series_cap",
        }
    }
}

/// Skipped OTLP spans or data points by reason, as a decoder counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skips {
    counts: [u64; SkipReason::ALL.len()],
}

impl Skips {
    /// Counts one skipped item.
    pub fn add(&mut self, reason: SkipReason) {
        self.counts[reason as usize] += 1;
    }

    /// How many were skipped for `reason`.
    pub fn get(&self, reason: SkipReason) -> u64 {
        self.counts[reason as usize]
    }

    /// All skipped items.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The non-zero counts.
    pub fn iter(&self) -> impl Iterator<Item = (SkipReason, u64)> + '_ {
        SkipReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// One source's ingest counters, resolved once so counting takes no lock.
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    /// Accepted records.
    pub records: IntCounter,
    /// Requests the accepted records stand for.
    pub requests: IntCounter,
    /// Rejected records, by [`RejectReason`] (indexed by its discriminant).
    rejected: Vec<IntCounter>,
    /// Valid records dropped because the queue was full.
    pub dropped_queue_full: IntCounter,
    /// Valid records dropped because the pipeline had stopped.
    pub dropped_shutdown: IntCounter,
    /// OTLP's skipped items by [`SkipReason`] (indexed by its discriminant); empty for the
    /// other sources, whose skips are counted where they happen.
    skipped: Vec<IntCounter>,
}

impl SourceMetrics {
    fn resolve(m: &SelfMetrics, source: Source) -> SourceMetrics {
        let s = source.as_str();
        SourceMetrics {
            records: m.records.with_label_values(&[s]),
            requests: m.requests.with_label_values(&[s]),
            rejected: RejectReason::ALL
                .iter()
                .map(|r| m.rejected.with_label_values(&[s, r.as_str()]))
                .collect(),
            dropped_queue_full: m
                .dropped
                .with_label_values(&[s, DropReason::QueueFull.as_str()]),
            dropped_shutdown: m
                .dropped
                .with_label_values(&[s, DropReason::Shutdown.as_str()]),
            skipped: match source {
                Source::Otlp => SkipReason::ALL
                    .iter()
                    .map(|r| m.skipped.with_label_values(&[s, r.as_str()]))
                    .collect(),
                // StatsD's `unmapped` and the scrape jobs' reasons are resolved where they count.
                Source::Statsd | Source::Http | Source::Scrape | Source::Fleet => Vec::new(),
            },
        }
    }

    /// Adds a decoder's skip counts.
    pub fn add_skips(&self, skipped: &Skips) {
        for (reason, n) in skipped.iter() {
            if let Some(c) = self.skipped.get(reason as usize) {
                c.inc_by(n);
            }
        }
    }

    /// Adds a parser's rejection counts.
    pub fn add_rejections(&self, rejected: &Rejections) {
        for (reason, n) in rejected.iter() {
            self.rejected[reason as usize].inc_by(n);
        }
    }

    /// Counts `n` valid records dropped for `reason`.
    pub fn dropped(&self, reason: DropReason, n: u64) {
        match reason {
            DropReason::QueueFull => self.dropped_queue_full.inc_by(n),
            DropReason::Shutdown => self.dropped_shutdown.inc_by(n),
        }
    }
}

/// The agent's own counters.
#[derive(Debug, Clone)]
pub struct SelfMetrics {
    /// Accepted records, by source.
    pub records: IntCounterVec,
    /// Requests the accepted records stand for (sum of counts), by source.
    pub requests: IntCounterVec,
    /// Rejected records, by source and reason.
    pub rejected: IntCounterVec,
    /// Valid records dropped before the pipeline, by source and reason.
    pub dropped: IntCounterVec,
    /// Input that is not an observation and was skipped on purpose, by source and reason.
    pub skipped: IntCounterVec,
    /// Successful scrapes, by job.
    pub scrapes: IntCounterVec,
    /// Failed scrapes, by job and reason.
    pub scrape_failures: IntCounterVec,
    /// Supervised tasks (the `scrape:` jobs) started again after they failed, by task.
    pub task_restarts: IntCounterVec,
    /// UDP datagrams received.
    pub datagrams: IntCounter,
    /// Kernel receive-queue drops reported for the StatsD socket (SO_RXQ_OVFL).
    pub kernel_drops: IntCounter,
    /// Windows closed by the pipeline.
    pub windows: IntCounter,
    /// End of the last closed window, unix seconds.
    pub last_window_end: IntGauge,
    /// Build information.
    pub build_info: IntGaugeVec,
    /// Alert delivery attempts (HTTP POSTs), by receiver and result.
    pub alert_deliveries: IntCounterVec,
    /// Alert updates or notifications given up, by receiver and reason.
    pub alert_deliveries_dropped: IntCounterVec,
    /// What each receiver is owed and has not yet acknowledged.
    pub alert_delivery_queue_length: IntGaugeVec,
    /// 1 when the last configuration reload succeeded (or none was tried), else 0.
    pub config_last_reload_successful: IntGauge,
    /// When the last successful reload (or the start) happened, unix seconds.
    pub config_last_reload_success_timestamp: IntGauge,
    /// Records folded into `__other__`, by level (`group`, `shard`).
    pub folded: IntCounterVec,
    /// Wall-clock steps the pipeline re-aligned its windows to, by direction.
    pub clock_steps: IntCounterVec,
    /// Errors receiving from the StatsD socket (other than "no data").
    pub statsd_receive_errors: IntCounter,
    /// HTTP connections open now.
    pub http_connections_open: IntGauge,
    /// HTTP connections closed at once because the listener was full.
    pub http_connections_refused: IntCounter,
    /// Each source's ingest counters, indexed by [`Source::index`].
    sources: Vec<SourceMetrics>,
}

/// Registers metrics in one registry; each constructor is one line at the call site.
struct Registrar<'a>(&'a Registry);

impl Registrar<'_> {
    fn add<C: Collector + Clone + 'static>(&self, c: C) -> prometheus::Result<C> {
        self.0.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn counter(&self, name: &str, help: &str) -> prometheus::Result<IntCounter> {
        self.add(IntCounter::new(name, help)?)
    }

    fn counters(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntCounterVec> {
        self.add(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    fn gauge(&self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        self.add(IntGauge::new(name, help)?)
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
        self.add(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }
}

impl SelfMetrics {
    /// Creates the counters and registers them in `registry`.
    ///
    /// Long because it is a table: one entry per metric, with its name and help text, which
    /// reads best in one place.
    pub fn register(registry: &Registry) -> prometheus::Result<SelfMetrics> {
        let r = Registrar(registry);
        let mut m = SelfMetrics {
            records: r.counters(
                "skewwatch_ingest_records_total",
                "Observation records accepted, by input source.",
                &["source"],
            )?,
            requests: r.counters(
                "skewwatch_ingest_requests_total",
                "Requests the accepted records stand for (the sum of their counts), by source.",
                &["source"],
            )?,
            rejected: r.counters(
                "skewwatch_ingest_rejected_total",
                "Observation records rejected as invalid, by source and reason.",
                &["source", "reason"],
            )?,
            dropped: r.counters(
                "skewwatch_ingest_dropped_total",
                "Valid records dropped before the pipeline, by source and reason.",
                &["source", "reason"],
            )?,
            skipped: r.counters(
                "skewwatch_ingest_skipped_total",
                "Input skipped on purpose, not an error, by source and reason: StatsD lines no \
                 statsd.mappings entry takes (unmapped), scraped series without the shard label \
                 (no_shard) or past a job's max_series (series_cap), OTLP spans or metric points \
                 that describe no shard call (not a client span, no shard or group attribute, a \
                 metric without per-request counts).",
                &["source", "reason"],
            )?,
            scrapes: r.counters(
                "skewwatch_scrapes_total",
                "Successful scrapes of a scrape: job's target, by job.",
                &["job"],
            )?,
            scrape_failures: r.counters(
                "skewwatch_scrape_failures_total",
                "Failed scrapes, by job and reason (connect, timeout, status, body_too_large, \
                 not_utf8); a failed scrape adds no observations.",
                &["job", "reason"],
            )?,
            task_restarts: r.counters(
                "skewwatch_task_restarts_total",
                "Supervised tasks started again after a failure (a panic), by task \
                 (scrape:<job>); each restart is logged with the error.",
                &["task"],
            )?,
            alert_deliveries: r.counters(
                "skewwatch_alert_deliveries_total",
                "Alert delivery attempts (HTTP POSTs), by receiver and result (success, failure).",
                &["receiver", "result"],
            )?,
            alert_deliveries_dropped: r.counters(
                "skewwatch_alert_deliveries_dropped_total",
                "Alert updates or notifications given up, by receiver and reason \
                 (queue_full, retries_exhausted, expired, rejected, shutdown).",
                &["receiver", "reason"],
            )?,
            alert_delivery_queue_length: r.gauges(
                "skewwatch_alert_delivery_queue_length",
                "Per receiver: webhook notifications waiting, or alerts whose latest state an \
                 Alertmanager has not acknowledged.",
                &["receiver"],
            )?,
            config_last_reload_successful: r.gauge(
                "skewwatch_config_last_reload_successful",
                "1 when the last configuration reload succeeded (or none was tried), 0 when it failed and the previous configuration still runs.",
            )?,
            config_last_reload_success_timestamp: r.gauge(
                "skewwatch_config_last_reload_success_timestamp_seconds",
                "When the configuration in force was loaded (start or last successful reload), unix seconds.",
            )?,
            folded: r.counters(
                "skewwatch_ingest_folded_total",
                "Records folded into __other__ because a cap was full, by level: shard (a group's shard cap or the total shard budget) or group (the group cap).",
                &["level"],
            )?,
            clock_steps: r.counters(
                "skewwatch_clock_steps_total",
                "Times the wall clock stepped away from the window schedule and windows were re-aligned, by direction.",
                &["direction"],
            )?,
            statsd_receive_errors: r.counter(
                "skewwatch_statsd_receive_errors_total",
                "Errors receiving from the StatsD socket; the receiver backs off after each.",
            )?,
            http_connections_open: r.gauge(
                "skewwatch_http_connections_open",
                "HTTP connections open now, including health-check-only ones past http.max_connections.",
            )?,
            http_connections_refused: r.counter(
                "skewwatch_http_connections_refused_total",
                "HTTP connections closed at once because the listener and its health-check reserve were full.",
            )?,
            datagrams: r.counter(
                "skewwatch_statsd_datagrams_total",
                "UDP datagrams received on the StatsD listener.",
            )?,
            kernel_drops: r.counter(
                "skewwatch_statsd_kernel_drops_total",
                "Datagrams the kernel dropped because the StatsD socket's receive buffer was full.",
            )?,
            windows: r.counter(
                "skewwatch_windows_closed_total",
                "Statistics windows closed by the pipeline.",
            )?,
            last_window_end: r.gauge(
                "skewwatch_last_window_end_timestamp_seconds",
                "End of the last closed statistics window, unix seconds.",
            )?,
            build_info: r.gauges(
                "skewwatch_build_info",
                "Build information; always 1.",
                &["version"],
            )?,
            sources: Vec::new(),
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        m.config_last_reload_successful.set(1);
        for level in ["group", "shard"] {
            m.folded.with_label_values(&[level]);
        }
        m.skipped.with_label_values(&["statsd", "unmapped"]);
        for direction in ["forward", "backward"] {
            m.clock_steps.with_label_values(&[direction]);
        }
        m.config_last_reload_success_timestamp
            .set(crate::clock::wall_now() as i64);
        // Resolving every series up front also makes it exist from the first scrape, so a
        // dashboard sees zeros rather than gaps.
        m.sources = Source::ALL
            .iter()
            .map(|&s| SourceMetrics::resolve(&m, s))
            .collect();
        Ok(m)
    }

    /// The folded-records counter of `level` (`group` or `shard`).
    pub fn folded(&self, level: &str) -> IntCounter {
        self.folded.with_label_values(&[level])
    }

    /// The clock-step counter of `direction` (`forward` or `backward`).
    pub fn clock_steps(&self, direction: &str) -> IntCounter {
        self.clock_steps.with_label_values(&[direction])
    }

    /// The ingest counters of `source`.
    pub fn source(&self, source: Source) -> &SourceMetrics {
        &self.sources[source.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_counters_are_the_labelled_series() {
        let m = SelfMetrics::register(&Registry::new()).unwrap();
        let http = m.source(Source::Http);
        http.records.inc_by(3);
        let mut r = Rejections::default();
        r.add(RejectReason::BadCount);
        r.add(RejectReason::BadCount);
        http.add_rejections(&r);
        http.dropped(DropReason::QueueFull, 5);
        assert_eq!(m.records.with_label_values(&["http"]).get(), 3);
        assert_eq!(m.records.with_label_values(&["statsd"]).get(), 0);
        assert_eq!(
            m.rejected.with_label_values(&["http", "bad_count"]).get(),
            2
        );
        assert_eq!(
            m.dropped.with_label_values(&["http", "queue_full"]).get(),
            5
        );
    }
}
