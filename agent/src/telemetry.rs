//! Self-metrics: what the agent itself did (records taken, rejected and dropped, datagrams,
//! windows, alert deliveries). Counters live in a [`prometheus::Registry`] passed explicitly, never a global one,
//! so tests with several agents in one process do not collide.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use skewwatch_detectors::observation::{RejectReason, Rejections};

/// Where records come from: the `source` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// StatsD over UDP.
    Statsd,
    /// HTTP NDJSON.
    Http,
}

impl Source {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Statsd => "statsd",
            Source::Http => "http",
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
}

impl SelfMetrics {
    /// Creates the counters and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<SelfMetrics> {
        let records = IntCounterVec::new(
            Opts::new(
                "skewwatch_ingest_records_total",
                "Observation records accepted, by input source.",
            ),
            &["source"],
        )?;
        let requests = IntCounterVec::new(
            Opts::new(
                "skewwatch_ingest_requests_total",
                "Requests the accepted records stand for (the sum of their counts), by source.",
            ),
            &["source"],
        )?;
        let rejected = IntCounterVec::new(
            Opts::new(
                "skewwatch_ingest_rejected_total",
                "Observation records rejected as invalid, by source and reason.",
            ),
            &["source", "reason"],
        )?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "skewwatch_ingest_dropped_total",
                "Valid records dropped before the pipeline, by source and reason.",
            ),
            &["source", "reason"],
        )?;
        let datagrams = IntCounter::new(
            "skewwatch_statsd_datagrams_total",
            "UDP datagrams received on the StatsD listener.",
        )?;
        let kernel_drops = IntCounter::new(
            "skewwatch_statsd_kernel_drops_total",
            "Datagrams the kernel dropped because the StatsD socket's receive buffer was full.",
        )?;
        let windows = IntCounter::new(
            "skewwatch_windows_closed_total",
            "Statistics windows closed by the pipeline.",
        )?;
        let last_window_end = IntGauge::new(
            "skewwatch_last_window_end_timestamp_seconds",
            "End of the last closed statistics window, unix seconds.",
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new("skewwatch_build_info", "Build information; always 1."),
            &["version"],
        )?;
        let alert_deliveries = IntCounterVec::new(
            Opts::new(
                "skewwatch_alert_deliveries_total",
                "Alert delivery attempts (HTTP POSTs), by receiver and result (success, failure).",
            ),
            &["receiver", "result"],
        )?;
        let alert_deliveries_dropped = IntCounterVec::new(
            Opts::new(
                "skewwatch_alert_deliveries_dropped_total",
                "Alert updates or notifications given up, by receiver and reason \
                 (queue_full, retries_exhausted, expired, rejected, shutdown).",
            ),
            &["receiver", "reason"],
        )?;
        let alert_delivery_queue_length = IntGaugeVec::new(
            Opts::new(
                "skewwatch_alert_delivery_queue_length",
                "Per receiver: webhook notifications waiting, or alerts whose latest state an \
                 Alertmanager has not acknowledged.",
            ),
            &["receiver"],
        )?;
        for c in [&records, &requests] {
            registry.register(Box::new(c.clone()))?;
        }
        for c in [
            &rejected,
            &dropped,
            &alert_deliveries,
            &alert_deliveries_dropped,
        ] {
            registry.register(Box::new(c.clone()))?;
        }
        registry.register(Box::new(alert_delivery_queue_length.clone()))?;
        registry.register(Box::new(datagrams.clone()))?;
        registry.register(Box::new(kernel_drops.clone()))?;
        registry.register(Box::new(windows.clone()))?;
        registry.register(Box::new(last_window_end.clone()))?;
        registry.register(Box::new(build_info.clone()))?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        // Pre-create the series so a dashboard sees zeros rather than gaps.
        for s in [Source::Statsd, Source::Http] {
            records.with_label_values(&[s.as_str()]);
            requests.with_label_values(&[s.as_str()]);
            for r in RejectReason::ALL {
                rejected.with_label_values(&[s.as_str(), r.as_str()]);
            }
            dropped.with_label_values(&[s.as_str(), "queue_full"]);
        }
        Ok(SelfMetrics {
            records,
            requests,
            rejected,
            dropped,
            datagrams,
            kernel_drops,
            windows,
            last_window_end,
            build_info,
            alert_deliveries,
            alert_deliveries_dropped,
            alert_delivery_queue_length,
        })
    }

    /// Adds a parser's rejection counts.
    pub fn add_rejections(&self, source: Source, rejected: &Rejections) {
        for (reason, n) in rejected.iter() {
            self.rejected
                .with_label_values(&[source.as_str(), reason.as_str()])
                .inc_by(n);
        }
    }
}
