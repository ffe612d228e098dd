//! What the OTLP input skips on purpose, and its counters: the reasons ([`SkipReason`]) are the
//! `reason` label of `skewwatch_ingest_skipped_total{source="otlp"}`, named here with the input
//! that decides them; [`OtlpMetrics`] resolves them once beside the input's ingest counters.

use prometheus::IntCounter;

use crate::telemetry::{IngestMetrics, Source, SourceMetrics};

/// Why an OTLP span or data point was skipped. Skipping is not an error: the telemetry was
/// valid but does not describe a call to a shard.
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

/// The OTLP input's counters, resolved once so counting takes no lock: the `source="otlp"`
/// ingest counters and one skip counter per [`SkipReason`].
#[derive(Debug, Clone)]
pub struct OtlpMetrics {
    /// The `source="otlp"` ingest counters.
    pub source: SourceMetrics,
    /// Skipped items, indexed by the reason's discriminant.
    skipped: [IntCounter; SkipReason::ALL.len()],
}

impl OtlpMetrics {
    /// Resolves the input's series of the shared ingest counters (every reason, so zeros show).
    pub fn new(ingest: &IngestMetrics) -> OtlpMetrics {
        OtlpMetrics {
            source: ingest.source(Source::Otlp).clone(),
            skipped: SkipReason::ALL.map(|r| ingest.skipped(Source::Otlp, r.as_str())),
        }
    }

    /// Adds a decoder's skip counts.
    pub fn add_skips(&self, skipped: &Skips) {
        for (reason, n) in skipped.iter() {
            self.skipped[reason as usize].inc_by(n);
        }
    }
}
