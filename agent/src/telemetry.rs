//! Self-metrics shared across stages: the ingest counters every input adds to, labelled by
//! `source` ([`IngestMetrics`]), and the [`Registrar`] each stage registers its own metrics
//! with. Every stage's metrics live in a [`prometheus::Registry`] passed explicitly, never a
//! global one, so tests with several agents in one process do not collide; what a stage counts
//! (StatsD datagrams, scrapes, windows, deliveries, connections) is registered by that stage,
//! and the reasons only one input knows (OTLP's skips, a scrape's failures) are named there.
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
}

impl SourceMetrics {
    fn resolve(m: &IngestMetrics, source: Source) -> SourceMetrics {
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

/// The ingest counters every input adds to, by `source`: one registration per agent, each
/// input resolving its own series ([`IngestMetrics::source`], [`IngestMetrics::skipped`]).
#[derive(Debug, Clone)]
pub struct IngestMetrics {
    /// Accepted records, by source.
    pub(crate) records: IntCounterVec,
    /// Requests the accepted records stand for (sum of their counts), by source.
    pub(crate) requests: IntCounterVec,
    /// Rejected records, by source and reason.
    pub(crate) rejected: IntCounterVec,
    /// Valid records dropped before the pipeline, by source and reason.
    pub(crate) dropped: IntCounterVec,
    /// Input that is not an observation and was skipped on purpose, by source and reason; the
    /// reasons are each input's own.
    pub(crate) skipped: IntCounterVec,
    /// Each source's ingest counters, indexed by [`Source::index`].
    sources: Vec<SourceMetrics>,
}

/// Registers metrics in one registry; each constructor is one line at the call site, so a
/// stage's metrics read as a table of names and help texts.
pub struct Registrar<'a>(pub &'a Registry);

impl Registrar<'_> {
    /// Registers any collector and hands it back.
    pub fn add<C: Collector + Clone + 'static>(&self, c: C) -> prometheus::Result<C> {
        self.0.register(Box::new(c.clone()))?;
        Ok(c)
    }

    /// A counter.
    pub fn counter(&self, name: &str, help: &str) -> prometheus::Result<IntCounter> {
        self.add(IntCounter::new(name, help)?)
    }

    /// A counter family with `labels`.
    pub fn counters(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntCounterVec> {
        self.add(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    /// A gauge.
    pub fn gauge(&self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        self.add(IntGauge::new(name, help)?)
    }

    /// A gauge family with `labels`.
    pub fn gauges(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntGaugeVec> {
        self.add(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }
}

impl IngestMetrics {
    /// Creates the ingest counters and registers them in `registry`, every source's series
    /// resolved, so a dashboard sees zeros rather than gaps from the first scrape.
    pub fn register(registry: &Registry) -> prometheus::Result<IngestMetrics> {
        let r = Registrar(registry);
        let mut m = IngestMetrics {
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
            sources: Vec::new(),
        };
        m.sources = Source::ALL
            .iter()
            .map(|&s| SourceMetrics::resolve(&m, s))
            .collect();
        Ok(m)
    }

    /// The ingest counters of `source`.
    pub fn source(&self, source: Source) -> &SourceMetrics {
        &self.sources[source.index()]
    }

    /// The counter of input `source` skipped for `reason` (the input's own word for it).
    pub fn skipped(&self, source: Source, reason: &str) -> IntCounter {
        self.skipped.with_label_values(&[source.as_str(), reason])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_counters_are_the_labelled_series() {
        let m = IngestMetrics::register(&Registry::new()).unwrap();
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
