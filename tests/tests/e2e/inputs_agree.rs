//! End-to-end: the inputs agree. The same generated traffic goes, tick by tick, to five agents,
//! each through one input: StatsD, NDJSON, OTLP spans, OTLP histogram metrics and a scrape
//! target serving a classic histogram. Every agent must count exactly the requests sent, per
//! group, shard and outcome; put each in the same latency bucket (the exposition's bounds are
//! the histogram inputs' bounds, and the exact latencies are drawn inside the buckets, away
//! from the edges by more than the HDR resolution); keep its latency sum within the bucket
//! error (a histogram input knows a request's latency only as its bucket's midpoint, so it is
//! off by at most half the bucket's width); and raise the same alerts: ErrorSurge for the
//! group whose errors surged, nothing for the other. A few seeds, each with its own traffic.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Histogram, HistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics, metric,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use serde_json::Value;
use skewwatch_e2e::agent::{Agent, SURGE_DETECTORS};
use skewwatch_e2e::scenario::Rng;

/// Upper bounds of the latency buckets, seconds: of the OTLP histograms, the scrape target's
/// histogram and the agents' exposition alike.
const BOUNDS_SECS: [f64; 4] = [0.005, 0.01, 0.05, 0.25];
/// The group whose errors surge, and one that stays healthy.
const GROUPS: [&str; 2] = ["orders-db", "ledger-db"];
const SHARDS: [&str; 3] = ["s1", "s2", "s3"];
const INPUTS: [&str; 5] = ["statsd", "ndjson", "otlp_spans", "otlp_metrics", "scrape"];
const TICK: Duration = Duration::from_millis(250);

/// One generated request.
#[derive(Debug, Clone, Copy)]
struct Request {
    group: usize,
    shard: usize,
    error: bool,
    bucket: usize,
    latency_ms: f64,
}

impl Request {
    fn outcome(&self) -> &'static str {
        if self.error { "error" } else { "ok" }
    }
}

/// The requests of one tick: 4 to 12 per shard of each group, latencies uniform over a
/// bucket's middle 90%, and while `surge` half of the first group's requests failing.
fn tick_requests(rng: &mut Rng, surge: bool) -> Vec<Request> {
    let mut out = Vec::new();
    for group in 0..GROUPS.len() {
        for shard in 0..SHARDS.len() {
            for _ in 0..4 + rng.next_u64() % 9 {
                let bucket = (rng.next_u64() % BOUNDS_SECS.len() as u64) as usize;
                let lo = if bucket == 0 {
                    0.0
                } else {
                    BOUNDS_SECS[bucket - 1]
                };
                let width = BOUNDS_SECS[bucket] - lo;
                let latency_ms = 1000.0 * (lo + width * (0.05 + 0.9 * rng.uniform()));
                out.push(Request {
                    group,
                    shard,
                    error: surge && group == 0 && rng.next_u64().is_multiple_of(2),
                    bucket,
                    latency_ms,
                });
            }
        }
    }
    out
}

/// What was sent, summed: requests by (group, shard, outcome), by (group, shard, bucket), and
/// the exact latency sum by (group, shard); and for the scrape page, requests by bucket of
/// each (group, shard, error) series.
#[derive(Debug, Default, Clone)]
struct Sent {
    requests: BTreeMap<(usize, usize, &'static str), u64>,
    buckets: BTreeMap<(usize, usize, usize), u64>,
    sum_ms: BTreeMap<(usize, usize), f64>,
    by_outcome: BTreeMap<(usize, usize, bool), Vec<u64>>,
}

impl Sent {
    fn add(&mut self, r: &Request) {
        *self
            .requests
            .entry((r.group, r.shard, r.outcome()))
            .or_default() += 1;
        *self
            .buckets
            .entry((r.group, r.shard, r.bucket))
            .or_default() += 1;
        *self.sum_ms.entry((r.group, r.shard)).or_default() += r.latency_ms;
        self.by_outcome
            .entry((r.group, r.shard, r.error))
            .or_insert_with(|| vec![0; BOUNDS_SECS.len() + 1])[r.bucket] += 1;
    }
}

fn kv(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..KeyValue::default()
    }
}

fn attrs(r: &Request) -> Vec<KeyValue> {
    let mut a = vec![
        kv("skewwatch.group", GROUPS[r.group]),
        kv("skewwatch.shard", SHARDS[r.shard]),
    ];
    if r.error {
        a.push(kv("error.type", "QueryError"));
    }
    a
}

fn statsd_datagrams(tick: &[Request]) -> Vec<String> {
    tick.chunks(20)
        .map(|chunk| {
            chunk
                .iter()
                .map(|r| {
                    format!(
                        "skewwatch.request:{}|ms|#group:{},shard:{},outcome:{}",
                        r.latency_ms,
                        GROUPS[r.group],
                        SHARDS[r.shard],
                        r.outcome()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

fn ndjson_body(tick: &[Request]) -> String {
    tick.iter()
        .map(|r| {
            serde_json::json!({
                "group": GROUPS[r.group],
                "shard": SHARDS[r.shard],
                "latency_ms": r.latency_ms,
                "outcome": r.outcome(),
            })
            .to_string()
                + "\n"
        })
        .collect()
}

fn spans_body(tick: &[Request]) -> Vec<u8> {
    let start = 1_700_000_000_000_000_000u64;
    let spans = tick
        .iter()
        .map(|r| Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            name: "query".into(),
            kind: 3,
            start_time_unix_nano: start,
            end_time_unix_nano: start + (r.latency_ms * 1e6).round() as u64,
            attributes: attrs(r),
            status: Some(Status {
                message: String::new(),
                code: if r.error { 2 } else { 0 },
            }),
            ..Span::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
    .encode_to_vec()
}

/// One delta histogram point per (group, shard, outcome) series of the tick.
fn metrics_body(tick: &[Request], now_ns: u64) -> Vec<u8> {
    let mut series: BTreeMap<(usize, usize, bool), Vec<u64>> = BTreeMap::new();
    for r in tick {
        series
            .entry((r.group, r.shard, r.error))
            .or_insert_with(|| vec![0; BOUNDS_SECS.len() + 1])[r.bucket] += 1;
    }
    let data_points = series
        .iter()
        .map(|(&(group, shard, error), counts)| HistogramDataPoint {
            attributes: attrs(&Request {
                group,
                shard,
                error,
                bucket: 0,
                latency_ms: 0.0,
            }),
            start_time_unix_nano: now_ns - TICK.as_nanos() as u64,
            time_unix_nano: now_ns,
            count: counts.iter().sum(),
            explicit_bounds: BOUNDS_SECS.to_vec(),
            bucket_counts: counts.clone(),
            ..HistogramDataPoint::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "db.client.operation.duration".into(),
                    unit: "s".into(),
                    data: Some(metric::Data::Histogram(Histogram {
                        aggregation_temporality: 1,
                        data_points,
                    })),
                    ..Metric::default()
                }],
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
    .encode_to_vec()
}

/// The scrape target's page: the cumulative classic histogram of everything sent so far,
/// every series present from the start (at zero), as a long-running service's would be.
fn scrape_page(sent: &Sent) -> String {
    let mut page = String::from("# TYPE db_request_duration_seconds histogram\n");
    for (g, group) in GROUPS.iter().enumerate() {
        for (s, shard) in SHARDS.iter().enumerate() {
            for outcome in ["ok", "error"] {
                let labels = format!("cluster=\"{group}\",shard=\"{shard}\",outcome=\"{outcome}\"");
                let total = sent.requests.get(&(g, s, outcome)).copied().unwrap_or(0);
                let per_bucket = sent.outcome_buckets(g, s, outcome);
                let mut cumulative = 0;
                for (b, bound) in BOUNDS_SECS.iter().enumerate() {
                    cumulative += per_bucket[b];
                    page += &format!(
                        "db_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}\n"
                    );
                }
                page += &format!(
                    "db_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {total}\n\
                     db_request_duration_seconds_count{{{labels}}} {total}\n"
                );
            }
        }
    }
    page
}

impl Sent {
    /// Requests by bucket of one (group, shard, outcome) series.
    fn outcome_buckets(&self, g: usize, s: usize, outcome: &str) -> Vec<u64> {
        self.by_outcome
            .get(&(g, s, outcome == "error"))
            .cloned()
            .unwrap_or_else(|| vec![0; BOUNDS_SECS.len() + 1])
    }
}

/// Serves `page` at any path, one request per connection.
fn serve(page: Arc<Mutex<String>>, stop: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut conn, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            let _ = conn.set_nonblocking(false);
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = page.lock().unwrap().clone();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.flush();
            let _ = conn.read(&mut [0u8; 1]);
        }
    });
    addr
}

fn config(extra: &str) -> String {
    format!(
        r#"window:
  window_secs: 1
exposition:
  latency_buckets_secs: {BOUNDS_SECS:?}
{SURGE_DETECTORS}{extra}"#
    )
}

/// The (alertname, group) of every alert the agent holds as firing.
fn firing(agent: &Agent) -> Vec<(String, String)> {
    let (_, body) = agent.request("GET", "/api/v1/alerts", &[], b"");
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let mut out: Vec<(String, String)> = v["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["state"] == "firing")
        .map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap_or("").to_owned(),
                a["labels"]["group"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// What an agent counted: the same shape as [`Sent`], read from its cumulative counters.
fn counted(agent: &Agent) -> Sent {
    let s = agent.scrape();
    let mut c = Sent::default();
    for (g, group) in GROUPS.iter().enumerate() {
        for (sh, shard) in SHARDS.iter().enumerate() {
            for outcome in ["ok", "error"] {
                let n = s.sum(
                    "skewwatch_shard_requests_total",
                    &[("group", group), ("shard", shard), ("outcome", outcome)],
                ) as u64;
                if n > 0 {
                    c.requests.insert((g, sh, outcome), n);
                }
            }
            let labels = [("group", *group), ("shard", *shard)];
            let mut below = 0.0;
            for (b, bound) in BOUNDS_SECS
                .iter()
                .map(|b| b.to_string())
                .chain(["+Inf".to_owned()])
                .enumerate()
            {
                let le = s.sum(
                    "skewwatch_shard_request_duration_seconds_bucket",
                    &[labels[0], labels[1], ("le", &bound)],
                );
                if le - below > 0.0 {
                    c.buckets.insert((g, sh, b), (le - below) as u64);
                }
                below = le;
            }
            let sum = s.sum("skewwatch_shard_request_duration_seconds_sum", &labels);
            if sum > 0.0 {
                c.sum_ms.insert((g, sh), 1000.0 * sum);
            }
        }
    }
    c
}

/// Runs one seed's traffic through the five inputs and checks that they agree.
fn one_seed(seed: u64) {
    let page = Arc::new(Mutex::new(String::new()));
    let stop = Arc::new(AtomicBool::new(false));
    *page.lock().unwrap() = scrape_page(&Sent::default());
    let target = serve(page.clone(), stop.clone());
    let agents: Vec<Agent> = INPUTS
        .iter()
        .map(|input| {
            let extra = if *input == "scrape" {
                format!(
                    "scrape:\n  - name: db\n    url: \"http://{target}/metrics\"\n    interval_secs: 0.25\n    timeout_secs: 0.25\n    metrics: [db_request_duration_seconds]\n    group_label: cluster\n    outcome_label: outcome\n"
                )
            } else {
                String::new()
            };
            Agent::start(&config(&extra))
        })
        .collect();
    // The scrape agent's first page is its baseline: the traffic starts after it.
    let baseline = agents[4].wait_for(Duration::from_secs(20), |a| {
        (a.scrape().sum("skewwatch_scrapes_total", &[]) >= 1.0).then_some(())
    });
    assert!(baseline.is_some(), "the scrape job never read its target");

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rng = Rng::new(seed);
    let mut sent = Sent::default();
    let surge_from = 12;
    let mut alerted = vec![None; INPUTS.len()];
    let started = Instant::now();
    for tick in 0.. {
        let surge = tick >= surge_from;
        let requests = tick_requests(&mut rng, surge);
        for r in &requests {
            sent.add(r);
        }
        for d in statsd_datagrams(&requests) {
            udp.send_to(d.as_bytes(), agents[0].statsd).unwrap();
        }
        let ndjson = ndjson_body(&requests);
        let (code, body) = agents[1].post_ndjson(ndjson.as_bytes(), &[]);
        assert_eq!(code, 200, "{body}");
        let proto = [("Content-Type", "application/x-protobuf")];
        let (code, body) = agents[2].request("POST", "/v1/traces", &proto, &spans_body(&requests));
        assert_eq!(code, 200, "{body}");
        let now_ns = 1_700_000_000_000_000_000 + tick * TICK.as_nanos() as u64;
        let (code, body) = agents[3].request(
            "POST",
            "/v1/metrics",
            &proto,
            &metrics_body(&requests, now_ns),
        );
        assert_eq!(code, 200, "{body}");
        *page.lock().unwrap() = scrape_page(&sent);
        std::thread::sleep(TICK);
        if surge {
            for (i, agent) in agents.iter().enumerate() {
                if alerted[i].is_none() && !firing(agent).is_empty() {
                    alerted[i] = Some(firing(agent));
                }
            }
            if alerted.iter().all(Option::is_some) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "seed {seed}: not every input raised an alert during the surge: {:?}",
                INPUTS.iter().zip(&alerted).collect::<Vec<_>>()
            );
        }
    }
    let expected = vec![("ErrorSurge".to_owned(), GROUPS[0].to_owned())];
    for (input, alerts) in INPUTS.iter().zip(&alerted) {
        assert_eq!(
            alerts.as_ref(),
            Some(&expected),
            "seed {seed}: {input} raised other alerts"
        );
    }

    // Everything sent is counted once the last scrape and window are in.
    for (input, agent) in INPUTS.iter().zip(&agents) {
        let got = agent.wait_for(Duration::from_secs(15), |a| {
            let c = counted(a);
            (c.requests == sent.requests && c.buckets == sent.buckets).then_some(c)
        });
        let c = got.unwrap_or_else(|| {
            let c = counted(agent);
            panic!(
                "seed {seed}: {input} counted\n{:?}\n{:?}\nbut was sent\n{:?}\n{:?}",
                c.requests, c.buckets, sent.requests, sent.buckets
            )
        });
        for (key, &sent_ms) in &sent.sum_ms {
            let got_ms = c.sum_ms.get(key).copied().unwrap_or(0.0);
            // A histogram input takes each request at its bucket's midpoint.
            let bound: f64 = (0..=BOUNDS_SECS.len())
                .map(|b| {
                    let n = sent.buckets.get(&(key.0, key.1, b)).copied().unwrap_or(0) as f64;
                    let lo = if b == 0 { 0.0 } else { BOUNDS_SECS[b - 1] };
                    n * 1000.0 * (BOUNDS_SECS.get(b).copied().unwrap_or(lo) - lo) / 2.0
                })
                .sum();
            assert!(
                (got_ms - sent_ms).abs() <= bound * 1.001 + 1e-6 * sent_ms,
                "seed {seed}: {input} latency sum of {key:?} is {got_ms} ms, sent {sent_ms} ms (bucket error {bound} ms)"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn the_same_traffic_through_every_input_gives_the_same_counts_buckets_and_alerts() {
    for seed in [1, 2] {
        one_seed(seed);
    }
}
