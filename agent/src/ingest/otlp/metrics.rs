//! `ExportMetricsServiceRequest` bodies into observations.
//!
//! - A histogram data point (`db.client.operation.duration`, say) becomes one record per
//!   non-empty bucket: the bucket's count, at the bucket's midpoint latency (the overflow
//!   bucket at its lower bound). A request's latency is thus off by at most half its bucket's
//!   width (the overflow bucket's by an unknown amount, always understated); docs/ingest.md
//!   works the error out for the semantic conventions' bounds.
//! - A monotonic sum data point becomes one record of its count, without latency.
//! - Delta points count as they are. Cumulative points are turned into deltas against the
//!   previous point of the same series, kept in [`Cumulative`]: bounded by
//!   `otlp.max_cumulative_series`, reset-aware (a new start time, a count that went down or
//!   changed bucket bounds start the series again from zero).
//!
//! Gauges, summaries, exponential histograms and non-monotonic sums carry no per-request
//! counts; their points are skipped and counted.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    HistogramDataPoint, Metric, NumberDataPoint, metric, number_data_point,
};
use prost::Message;
use skewwatch_detectors::observation::{Batch, RejectReason};

use super::attrs::Found;
use super::traces::{DecodeError, attr_value, offer_all};
use super::{AttrValue, Call, Mapping, OtlpOutcome, Scratch, SkipReason, emit, outcome};

/// `AggregationTemporality` values.
const DELTA: i32 = 1;
const CUMULATIVE: i32 = 2;

/// A series not updated for this long may be forgotten when the map is full.
const STALE_NS: u64 = 10 * 60 * 1_000_000_000;

/// The last point of one cumulative series.
#[derive(Debug, Clone)]
struct Last {
    start_ns: u64,
    seen_ns: u64,
    counts: Vec<u64>,
}

/// The last value of each cumulative series, to turn cumulative points into deltas. At most
/// `cap` series; when full, series not updated for ten minutes are forgotten, and a new series
/// that still finds no room is skipped (`reason="series_cap"`) until one does.
#[derive(Debug)]
pub struct Cumulative {
    series: HashMap<u64, Last>,
    cap: usize,
    started_ns: u64,
    hasher: foldhash::quality::FixedState,
}

impl Cumulative {
    /// An empty map of at most `cap` series. `started_ns` is when the agent started: a
    /// series first seen with a start time after it began while the agent listened, so its
    /// first point counts in full; an older series' first point is only a baseline.
    pub fn new(cap: usize, started_ns: u64) -> Self {
        Cumulative {
            series: HashMap::new(),
            cap,
            started_ns,
            hasher: foldhash::quality::FixedState::with_seed(0x5eed),
        }
    }

    /// Series tracked now.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// True when no series is tracked.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// The identity of a series: metric name, every attribute of its resource and of the
    /// point (two processes export the same point attributes under different resources).
    fn id(&self, name: &str, resource: &[KeyValue], attrs: &[KeyValue]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(name.as_bytes());
        for (part, attrs) in [(0xfd, resource), (0xfc, attrs)] {
            h.write_u8(part);
            Self::hash_attrs(&mut h, attrs);
        }
        h.finish()
    }

    /// Hashes a set of attributes in key order, whatever order they came in.
    fn hash_attrs(h: &mut impl Hasher, attrs: &[KeyValue]) {
        let mut sorted: Vec<&KeyValue> = attrs.iter().collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        for kv in sorted {
            h.write_u8(0xff);
            h.write(kv.key.as_bytes());
            h.write_u8(0xfe);
            match attr_value(kv.value.as_ref()) {
                AttrValue::Str(s) => h.write(s.as_bytes()),
                AttrValue::Int(i) => h.write_i64(i),
                AttrValue::Bool(b) => h.write_u8(u8::from(b)),
                AttrValue::Other => h.write(format!("{:?}", kv.value).as_bytes()),
            }
        }
    }

    /// The increase of `counts` since the series' previous point, or why there is none.
    fn delta(
        &mut self,
        id: u64,
        start_ns: u64,
        now_ns: u64,
        counts: &[u64],
    ) -> Result<Vec<u64>, SkipReason> {
        if let Some(last) = self.series.get_mut(&id) {
            let reset = last.start_ns != start_ns
                || last.counts.len() != counts.len()
                || last.counts.iter().zip(counts).any(|(l, c)| c < l);
            let delta = if reset {
                counts.to_vec()
            } else {
                counts
                    .iter()
                    .zip(&last.counts)
                    .map(|(c, l)| c - l)
                    .collect()
            };
            last.start_ns = start_ns;
            last.seen_ns = now_ns;
            last.counts.clear();
            last.counts.extend_from_slice(counts);
            return Ok(delta);
        }
        if self.series.len() >= self.cap {
            self.series
                .retain(|_, l| now_ns.saturating_sub(l.seen_ns) < STALE_NS);
            if self.series.len() >= self.cap {
                return Err(SkipReason::SeriesCap);
            }
        }
        self.series.insert(
            id,
            Last {
                start_ns,
                seen_ns: now_ns,
                counts: counts.to_vec(),
            },
        );
        if start_ns != 0 && start_ns >= self.started_ns {
            Ok(counts.to_vec())
        } else {
            Err(SkipReason::Baseline)
        }
    }
}

/// Decodes a protobuf body with prost and maps it.
pub fn decode_protobuf(
    body: &[u8],
    m: &Mapping,
    cumulative: &mut Cumulative,
    batch: &mut Batch,
) -> Result<OtlpOutcome, DecodeError> {
    let request = ExportMetricsServiceRequest::decode(body)?;
    Ok(map_request(&request, m, cumulative, batch))
}

/// Decodes an OTLP/JSON body and maps it.
pub fn decode_json(
    body: &[u8],
    m: &Mapping,
    cumulative: &mut Cumulative,
    batch: &mut Batch,
) -> Result<OtlpOutcome, DecodeError> {
    let request: ExportMetricsServiceRequest = serde_json::from_slice(body)?;
    Ok(map_request(&request, m, cumulative, batch))
}

/// Maps every data point of a decoded request.
pub fn map_request(
    request: &ExportMetricsServiceRequest,
    m: &Mapping,
    cumulative: &mut Cumulative,
    batch: &mut Batch,
) -> OtlpOutcome {
    let mut cx = Context {
        m,
        cumulative,
        batch,
        out: OtlpOutcome::default(),
        scratch: Scratch::default(),
        resource: Found::default(),
        resource_attrs: &[],
    };
    for rm in &request.resource_metrics {
        cx.resource.clear();
        cx.resource_attrs = rm
            .resource
            .as_ref()
            .map_or(&[], |r| r.attributes.as_slice());
        offer_all(m, &mut cx.resource, cx.resource_attrs);
        for metric in rm.scope_metrics.iter().flat_map(|sm| &sm.metrics) {
            cx.metric(metric);
        }
    }
    cx.out
}

/// What mapping one request carries along.
struct Context<'c> {
    m: &'c Mapping,
    cumulative: &'c mut Cumulative,
    batch: &'c mut Batch,
    out: OtlpOutcome,
    scratch: Scratch,
    /// The mapped attributes of the current resource, which each point starts from.
    resource: Found<'c>,
    /// All attributes of the current resource, part of each series' identity.
    resource_attrs: &'c [KeyValue],
}

/// Milliseconds per unit of a duration metric (UCUM units, as the semantic conventions write
/// them), or `None` for a unit that is not a time.
fn ms_per_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "s" => 1e3,
        "ms" => 1.0,
        "us" => 1e-3,
        "ns" => 1e-6,
        _ => return None,
    })
}

impl<'c> Context<'c> {
    fn metric(&mut self, metric: &'c Metric) {
        let points = match &metric.data {
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Summary(s)) => s.data_points.len(),
            Some(metric::Data::ExponentialHistogram(e)) => e.data_points.len(),
            None => 0,
        };
        let skip_all = |out: &mut OtlpOutcome, reason| {
            for _ in 0..points {
                out.skipped.add(reason);
            }
        };
        if !self.m.takes_metric(&metric.name) {
            return skip_all(&mut self.out, SkipReason::MetricName);
        }
        match &metric.data {
            Some(metric::Data::Histogram(h))
                if matches!(h.aggregation_temporality, DELTA | CUMULATIVE) =>
            {
                let Some(scale) = ms_per_unit(&metric.unit) else {
                    return skip_all(&mut self.out, SkipReason::MetricType);
                };
                for (i, p) in h.data_points.iter().enumerate() {
                    self.histogram_point(metric, h.aggregation_temporality, scale, i, p);
                }
            }
            Some(metric::Data::Sum(s))
                if s.is_monotonic && matches!(s.aggregation_temporality, DELTA | CUMULATIVE) =>
            {
                for (i, p) in s.data_points.iter().enumerate() {
                    self.sum_point(metric, s.aggregation_temporality, i, p);
                }
            }
            _ => skip_all(&mut self.out, SkipReason::MetricType),
        }
    }

    /// The mapped attributes of a point over its resource's, or `None` when it is not a
    /// shard's (counted by [`emit`], which finds no shard or group).
    fn found(&mut self, attrs: &'c [KeyValue]) -> Option<Found<'c>> {
        let mut found = Found::default();
        found.start_from(&self.resource);
        offer_all(self.m, &mut found, attrs);
        match self.m.skip_reason(&found, &mut self.scratch) {
            None => Some(found),
            Some(reason) => {
                self.out.skipped.add(reason);
                None
            }
        }
    }

    /// `counts` as deltas: as they are for delta temporality, else against the last point.
    fn deltas(
        &mut self,
        metric: &Metric,
        temporality: i32,
        attrs: &[KeyValue],
        start_ns: u64,
        now_ns: u64,
        counts: &[u64],
    ) -> Option<Vec<u64>> {
        if temporality == DELTA {
            return Some(counts.to_vec());
        }
        let id = self.cumulative.id(&metric.name, self.resource_attrs, attrs);
        match self.cumulative.delta(id, start_ns, now_ns, counts) {
            Ok(d) => Some(d),
            Err(reason) => {
                self.out.skipped.add(reason);
                None
            }
        }
    }

    fn histogram_point(
        &mut self,
        metric: &Metric,
        temporality: i32,
        ms_per_unit: f64,
        i: usize,
        p: &'c HistogramDataPoint,
    ) {
        let what = || format!("data point {i} of {}", metric.name);
        let Some(found) = self.found(&p.attributes) else {
            return;
        };
        let bounds = &p.explicit_bounds;
        let shaped = if p.bucket_counts.is_empty() {
            bounds.is_empty()
        } else {
            p.bucket_counts.len() == bounds.len() + 1 && bounds.windows(2).all(|w| w[0] < w[1])
        };
        if !shaped || bounds.iter().any(|b| !b.is_finite()) {
            return self.out.reject(RejectReason::Malformed, &what());
        }
        // A point without buckets still counts its requests, without latency.
        let counts: &[u64] = if p.bucket_counts.is_empty() {
            std::slice::from_ref(&p.count)
        } else {
            &p.bucket_counts
        };
        let Some(deltas) = self.deltas(
            metric,
            temporality,
            &p.attributes,
            p.start_time_unix_nano,
            p.time_unix_nano,
            counts,
        ) else {
            return;
        };
        let o = outcome(0, &found, || None);
        for (b, &count) in deltas.iter().enumerate().filter(|(_, c)| **c > 0) {
            let latency_ms =
                (!p.bucket_counts.is_empty()).then(|| bucket_latency(bounds, b) * ms_per_unit);
            let call = Call {
                count,
                latency_ms,
                outcome: o,
            };
            emit(
                self.m,
                &found,
                Ok(call),
                &mut self.scratch,
                self.batch,
                &mut self.out,
                &what,
            );
        }
    }

    fn sum_point(&mut self, metric: &Metric, temporality: i32, i: usize, p: &'c NumberDataPoint) {
        let what = || format!("data point {i} of {}", metric.name);
        let Some(found) = self.found(&p.attributes) else {
            return;
        };
        let value = match p.value {
            Some(number_data_point::Value::AsInt(v)) => u64::try_from(v).ok(),
            Some(number_data_point::Value::AsDouble(v)) if v.is_finite() && v >= 0.0 => {
                Some(v.round() as u64)
            }
            _ => None,
        };
        let Some(value) = value else {
            return self.out.reject(RejectReason::BadCount, &what());
        };
        let Some(deltas) = self.deltas(
            metric,
            temporality,
            &p.attributes,
            p.start_time_unix_nano,
            p.time_unix_nano,
            &[value],
        ) else {
            return;
        };
        if deltas[0] > 0 {
            let call = Call {
                count: deltas[0],
                latency_ms: None,
                outcome: outcome(0, &found, || None),
            };
            emit(
                self.m,
                &found,
                Ok(call),
                &mut self.scratch,
                self.batch,
                &mut self.out,
                &what,
            );
        }
    }
}

/// The latency that stands for bucket `b` (in the metric's unit): the midpoint of its bounds;
/// the first bucket's lower bound is 0 and the overflow bucket stands at its lower bound.
pub fn bucket_latency(bounds: &[f64], b: usize) -> f64 {
    let lo = if b == 0 { 0.0 } else { bounds[b - 1].max(0.0) };
    match bounds.get(b) {
        Some(&hi) => (lo + hi.max(0.0)) / 2.0,
        None => lo,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{Histogram, ResourceMetrics, ScopeMetrics, Sum};
    use skewwatch_detectors::observation::ObservationRef;

    const T0: u64 = 1_700_000_000_000_000_000;

    fn attrs(shard: &str) -> Vec<KeyValue> {
        let s = |k: &str, v: &str| KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..KeyValue::default()
        };
        vec![s("db.namespace", "users"), s("server.address", shard)]
    }

    fn hist(temporality: i32, start: u64, now: u64, shard: &str, buckets: Vec<u64>) -> Metric {
        Metric {
            name: "db.client.operation.duration".into(),
            unit: "s".into(),
            data: Some(metric::Data::Histogram(Histogram {
                aggregation_temporality: temporality,
                data_points: vec![HistogramDataPoint {
                    attributes: attrs(shard),
                    start_time_unix_nano: start,
                    time_unix_nano: now,
                    count: buckets.iter().sum(),
                    explicit_bounds: vec![0.005, 0.01, 0.1],
                    bucket_counts: buckets,
                    ..HistogramDataPoint::default()
                }],
            })),
            ..Metric::default()
        }
    }

    fn sum(temporality: i32, start: u64, now: u64, value: i64) -> Metric {
        Metric {
            name: "db.client.operations".into(),
            data: Some(metric::Data::Sum(Sum {
                aggregation_temporality: temporality,
                is_monotonic: true,
                data_points: vec![NumberDataPoint {
                    attributes: attrs("pg-1"),
                    start_time_unix_nano: start,
                    time_unix_nano: now,
                    value: Some(number_data_point::Value::AsInt(value)),
                    ..NumberDataPoint::default()
                }],
            })),
            ..Metric::default()
        }
    }

    fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        }
    }

    fn run(
        c: &mut Cumulative,
        m: &Mapping,
        metrics: Vec<Metric>,
    ) -> (Vec<(String, u64, Option<f64>)>, OtlpOutcome) {
        let mut b = Batch::default();
        let out = map_request(&request(metrics), m, c, &mut b);
        let recs = b
            .iter()
            .map(|o: ObservationRef<'_>| (o.shard.to_owned(), o.count, o.latency_ms))
            .collect();
        (recs, out)
    }

    #[test]
    fn histogram_buckets_become_counts_at_bucket_midpoints() {
        let mut c = Cumulative::new(10, T0);
        let (recs, out) = run(
            &mut c,
            &Mapping::default(),
            vec![hist(DELTA, T0, T0 + 1, "pg-1", vec![3, 0, 2, 1])],
        );
        assert_eq!(out.accepted, 3);
        assert_eq!(
            recs,
            vec![
                ("pg-1".into(), 3, Some(2.5)),
                ("pg-1".into(), 2, Some(55.0)),
                ("pg-1".into(), 1, Some(100.0))
            ]
        );
        assert!(c.is_empty(), "delta series need no state");
    }

    #[test]
    fn cumulative_points_become_deltas_and_resets_start_again() {
        let mut c = Cumulative::new(10, T0);
        let m = Mapping {
            metric_names: vec![],
            ..Mapping::default()
        };
        // Started after the agent: the first point counts in full.
        let (recs, _) = run(&mut c, &m, vec![sum(CUMULATIVE, T0 + 5, T0 + 10, 7)]);
        assert_eq!(recs, vec![("pg-1".into(), 7, None)]);
        let (recs, _) = run(&mut c, &m, vec![sum(CUMULATIVE, T0 + 5, T0 + 20, 10)]);
        assert_eq!(recs, vec![("pg-1".into(), 3, None)]);
        let (recs, _) = run(&mut c, &m, vec![sum(CUMULATIVE, T0 + 5, T0 + 30, 10)]);
        assert_eq!(recs, vec![]);
        // The counter went down: the exporter restarted; the new value is all new.
        let (recs, _) = run(&mut c, &m, vec![sum(CUMULATIVE, T0 + 5, T0 + 40, 4)]);
        assert_eq!(recs, vec![("pg-1".into(), 4, None)]);
        // Histogram series: per-bucket deltas; a new start time is a reset too.
        let (recs, _) = run(
            &mut c,
            &m,
            vec![hist(CUMULATIVE, T0 + 5, T0 + 10, "pg-2", vec![1, 1, 0, 0])],
        );
        assert_eq!(recs.len(), 2);
        let (recs, _) = run(
            &mut c,
            &m,
            vec![hist(CUMULATIVE, T0 + 5, T0 + 20, "pg-2", vec![1, 4, 0, 0])],
        );
        assert_eq!(recs, vec![("pg-2".into(), 3, Some(7.5))]);
        let (recs, _) = run(
            &mut c,
            &m,
            vec![hist(CUMULATIVE, T0 + 25, T0 + 30, "pg-2", vec![2, 4, 0, 0])],
        );
        assert_eq!(
            recs,
            vec![("pg-2".into(), 2, Some(2.5)), ("pg-2".into(), 4, Some(7.5))]
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_series_older_than_the_agent_sets_a_baseline_and_the_map_is_bounded() {
        let mut c = Cumulative::new(1, T0);
        let m = Mapping {
            metric_names: vec![],
            ..Mapping::default()
        };
        let (recs, out) = run(&mut c, &m, vec![sum(CUMULATIVE, T0 - 1, T0 + 10, 100)]);
        assert_eq!((recs.len(), out.skipped.get(SkipReason::Baseline)), (0, 1));
        let (recs, _) = run(&mut c, &m, vec![sum(CUMULATIVE, T0 - 1, T0 + 20, 130)]);
        assert_eq!(recs, vec![("pg-1".into(), 30, None)]);
        let (recs, out) = run(
            &mut c,
            &m,
            vec![hist(CUMULATIVE, T0 + 1, T0 + 30, "pg-2", vec![1, 0, 0, 0])],
        );
        assert_eq!((recs.len(), out.skipped.get(SkipReason::SeriesCap)), (0, 1));
        // Once the old series has gone stale, the new one finds room.
        let (recs, _) = run(
            &mut c,
            &m,
            vec![hist(
                CUMULATIVE,
                T0 + 1,
                T0 + STALE_NS + 30,
                "pg-2",
                vec![1, 0, 0, 0],
            )],
        );
        assert_eq!(recs.len(), 1);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn unselected_and_untimed_metrics_are_skipped_and_bad_shapes_rejected() {
        let mut c = Cumulative::new(10, T0);
        let mut untimed = hist(DELTA, T0, T0 + 1, "pg-1", vec![1, 0, 0, 0]);
        untimed.unit = "By".into();
        let mut bad = hist(DELTA, T0, T0 + 1, "pg-1", vec![1, 0]);
        bad.name = "db.client.operation.duration".into();
        let (recs, out) = run(
            &mut c,
            &Mapping::default(),
            vec![sum(DELTA, T0, T0 + 1, 5), untimed, bad],
        );
        assert!(recs.is_empty());
        assert_eq!(out.skipped.get(SkipReason::MetricName), 1);
        assert_eq!(out.skipped.get(SkipReason::MetricType), 1);
        assert_eq!(out.rejected.get(RejectReason::Malformed), 1);
    }

    #[test]
    fn the_json_and_protobuf_forms_map_alike() {
        let req = request(vec![hist(DELTA, T0, T0 + 1, "pg-1", vec![3, 0, 2, 1])]);
        let m = Mapping::default();
        let (mut a, mut b) = (Batch::default(), Batch::default());
        decode_protobuf(
            &req.encode_to_vec(),
            &m,
            &mut Cumulative::new(1, T0),
            &mut a,
        )
        .unwrap();
        decode_json(
            &serde_json::to_vec(&req).unwrap(),
            &m,
            &mut Cumulative::new(1, T0),
            &mut b,
        )
        .unwrap();
        assert_eq!(a.iter().collect::<Vec<_>>(), b.iter().collect::<Vec<_>>());
        assert_eq!(a.len(), 3);
    }
}
