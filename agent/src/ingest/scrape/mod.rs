//! `scrape:` jobs: a Prometheus `/metrics` page a service already serves, read at an interval,
//! its per-shard counters and classic histograms turned into observations.
//!
//! One tokio task per job. Each scrape is a plain-HTTP GET (reqwest, no TLS) bounded by the
//! job's timeout and [`MAX_BODY_BYTES`]; the page is read by the `prometheus-parse` crate.
//! What the counters grew by since the previous scrape becomes observations of the current
//! window, handed to the pipeline like any other batch:
//!
//! - a counter's growth is that many requests (no latency);
//! - a classic histogram's growth per bucket is that many requests with the bucket's middle
//!   as their latency (the `+Inf` bucket: its lower bound), read in seconds;
//! - the first scrape of a series only records its value: what came before is unknown;
//! - a value that went down means the target restarted: the new value is the growth;
//! - a failed scrape adds nothing and keeps the previous values, so the next good scrape
//!   counts the requests of the gap once (in its window); nothing is made up for the gap;
//! - only the series of the last scrape are kept, at most `max_series` per job: a departed
//!   series is forgotten, a series past the cap is skipped and counted.
//!
//! Failures are counted in `skewwatch_scrape_failures_total{job,reason}` and logged once per
//! run of failures; they never block the pipeline (the hand-over is the same non-blocking
//! queue the other inputs use).

pub mod config;

use std::borrow::Cow;
use std::collections::HashMap;

use prometheus::{IntCounter, IntCounterVec, Registry};
use prometheus_parse::{Sample, Scrape, Value};
use skewwatch_detectors::observation::{
    Batch, CacheResult, MAX_COUNT, MAX_LATENCY_MS, ObservationRef, Outcome, RejectReason,
    Rejections,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use config::{FieldSource, LabelTemplate, Missing, ScrapeJob};

use crate::ingest::IngestQueue;
use crate::stage::{self, Stage};
use crate::telemetry::{IngestMetrics, Registrar, Source, SourceMetrics};

/// Largest page read; a larger one is a failure (`body_too_large`). 10,000 series of a
/// typical length are about 1 MiB.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// Why a scrape failed: the `reason` label of `skewwatch_scrape_failures_total`.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The target could not be reached or the connection broke.
    #[error("cannot reach the target: {0}")]
    Connect(reqwest::Error),
    /// The scrape took longer than the job's timeout.
    #[error("no complete answer within the timeout; raise timeout_secs or check the target")]
    Timeout,
    /// The target answered with a status other than 2xx.
    #[error("the target answered HTTP {0}; check the URL and the bearer token")]
    Status(u16),
    /// The page is larger than [`MAX_BODY_BYTES`].
    #[error("the page is larger than {MAX_BODY_BYTES} bytes; scrape a smaller page")]
    BodyTooLarge,
    /// The page is not UTF-8 text.
    #[error("the page is not UTF-8 text; is this a Prometheus /metrics page?")]
    NotUtf8,
}

impl ScrapeError {
    /// The label value.
    pub fn reason(&self) -> &'static str {
        match self {
            ScrapeError::Connect(_) => "connect",
            ScrapeError::Timeout => "timeout",
            ScrapeError::Status(_) => "status",
            ScrapeError::BodyTooLarge => "body_too_large",
            ScrapeError::NotUtf8 => "not_utf8",
        }
    }
}

/// The scrape jobs' metrics, registered by the input: scrapes and failures by job, the jobs'
/// restarts, and the input's series of the shared ingest counters.
#[derive(Debug, Clone)]
pub struct ScrapeMetrics {
    /// The `source="scrape"` ingest counters.
    source: SourceMetrics,
    /// Successful scrapes, by job.
    scrapes: IntCounterVec,
    /// Failed scrapes, by job and reason.
    failures: IntCounterVec,
    /// Jobs started again after they failed, by task (`scrape:<job>`).
    restarts: IntCounterVec,
    /// Skipped series by reason: no group, no shard, no key, past `max_series`.
    no_group: IntCounter,
    no_shard: IntCounter,
    no_key: IntCounter,
    series_cap: IntCounter,
}

impl ScrapeMetrics {
    /// Registers the jobs' metrics in `registry` (whether any job is configured, so the page
    /// has one shape) and resolves the input's ingest series.
    pub fn register(registry: &Registry, ingest: &IngestMetrics) -> prometheus::Result<Self> {
        let r = Registrar(registry);
        let skipped = |reason| ingest.skipped(Source::Scrape, reason);
        Ok(ScrapeMetrics {
            source: ingest.source(Source::Scrape).clone(),
            scrapes: r.counters(
                "skewwatch_scrapes_total",
                "Successful scrapes of a scrape: job's target, by job.",
                &["job"],
            )?,
            failures: r.counters(
                "skewwatch_scrape_failures_total",
                "Failed scrapes, by job and reason (connect, timeout, status, body_too_large, \
                 not_utf8); a failed scrape adds no observations.",
                &["job", "reason"],
            )?,
            restarts: r.counters(
                "skewwatch_task_restarts_total",
                "Supervised tasks started again after a failure (a panic), by task \
                 (scrape:<job>); each restart is logged with the error.",
                &["task"],
            )?,
            no_group: skipped("no_group"),
            no_shard: skipped("no_shard"),
            no_key: skipped("no_key"),
            series_cap: skipped("series_cap"),
        })
    }
}

/// Starts every job into `stage`, each under [`stage::supervise`]: a job that panics is
/// logged, counted in `skewwatch_task_restarts_total{task="scrape:<job>"}` and started again
/// after a backoff, so one exporter that trips a bug does not stop the other inputs.
pub fn spawn_jobs(
    jobs: &[ScrapeJob],
    queue: &IngestQueue,
    metrics: &ScrapeMetrics,
    stage: &mut Stage,
) {
    for job in jobs {
        let task = format!("scrape:{}", job.name);
        let restarts = metrics.restarts.with_label_values(&[&task]);
        let (job, queue, metrics, stop) = (
            job.clone(),
            queue.clone(),
            metrics.clone(),
            stage.stop_token(),
        );
        let attempt_stop = stop.clone();
        stage.spawn(
            task.clone(),
            stage::supervise(task, stop, restarts, move || {
                spawn(job.clone(), queue.clone(), &metrics, attempt_stop.clone())
            }),
        );
    }
}

/// Starts the task of one job; it stops when `cancel` fires.
pub fn spawn(
    job: ScrapeJob,
    queue: IngestQueue,
    metrics: &ScrapeMetrics,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let counters = Counters {
        source: metrics.source.clone(),
        scrapes: metrics.scrapes.with_label_values(&[&job.name]),
        no_group: metrics.no_group.clone(),
        no_shard: metrics.no_shard.clone(),
        no_key: metrics.no_key.clone(),
        series_cap: metrics.series_cap.clone(),
        failures: metrics.failures.clone(),
    };
    let span = tracing::info_span!("scrape", job = %job.name);
    tokio::spawn(run(job, queue, counters, cancel).instrument(span))
}

/// The counters a job adds to, resolved once.
struct Counters {
    source: SourceMetrics,
    scrapes: IntCounter,
    no_group: IntCounter,
    no_shard: IntCounter,
    no_key: IntCounter,
    series_cap: IntCounter,
    failures: IntCounterVec,
}

async fn run(job: ScrapeJob, queue: IngestQueue, counters: Counters, cancel: CancellationToken) {
    let client = match client(&job) {
        Ok(c) => c,
        Err(error) => {
            tracing::error!(%error, "The scrape client could not be built; the job does not run.");
            return;
        }
    };
    let mut state = Series::default();
    let mut failing = false;
    let mut ticks = tokio::time::interval(job.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let page = tokio::select! {
            _ = cancel.cancelled() => return,
            page = fetch(&client, &job) => page,
        };
        match page {
            Ok(text) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("Scraping works again.");
                }
                counters.scrapes.inc();
                scraped(&job, &text, &mut state, &queue, &counters);
            }
            Err(error) => {
                counters
                    .failures
                    .with_label_values(&[&job.name, error.reason()])
                    .inc();
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(url = %job.url, %error, "Scraping failed; retrying every interval.");
                }
            }
        }
    }
}

/// Turns one page into a batch and hands it over.
fn scraped(job: &ScrapeJob, text: &str, state: &mut Series, queue: &IngestQueue, c: &Counters) {
    let page = parse_page(text);
    let mut batch = Batch::default();
    let mut rejected = Rejections::default();
    let skips = state.observe(job, &page, &mut batch, &mut rejected);
    c.no_group.inc_by(skips.no_group);
    c.no_shard.inc_by(skips.no_shard);
    c.no_key.inc_by(skips.no_key);
    c.series_cap.inc_by(skips.series_cap);
    if rejected.total() > 0 {
        c.source.add_rejections(&rejected);
    }
    if !batch.is_empty() {
        // A full queue is counted inside `submit`; the next scrape goes on regardless.
        let _ = queue.submit(&c.source, batch);
    }
}

/// Parses a text-format page (the parser skips lines it cannot read).
pub fn parse_page(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap_or_else(|_: std::io::Error| {
        Scrape {
            docs: HashMap::new(),
            samples: Vec::new(),
        }
    })
}

/// The job's HTTP client. As alert delivery's, it reads the configured URL only: a target that
/// redirects is misconfigured, and following it would send the job's bearer token wherever it
/// points (the 3xx counts as a failed scrape, `reason="status"`); a proxy from the environment
/// would route the scrape somewhere the configuration does not say. Connecting, like the whole
/// scrape, takes at most the job's timeout.
fn client(job: &ScrapeJob) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .user_agent(concat!("skewwatch/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(job.timeout)
        .timeout(job.timeout)
        .build()
}

/// One GET of the job's page, bounded in time and size.
async fn fetch(client: &reqwest::Client, job: &ScrapeJob) -> Result<String, ScrapeError> {
    let classify = |e: reqwest::Error| {
        if e.is_timeout() {
            ScrapeError::Timeout
        } else {
            ScrapeError::Connect(e)
        }
    };
    let mut request = client
        .get(job.url.clone())
        .header("Accept", "text/plain;version=0.0.4");
    if let Some(token) = &job.bearer_token {
        let value = format!("Bearer {}", String::from_utf8_lossy(token.expose()));
        request = request.header("Authorization", value);
    }
    let mut response = request.send().await.map_err(classify)?;
    let status = response.status();
    if !status.is_success() {
        return Err(ScrapeError::Status(status.as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_BODY_BYTES as u64)
    {
        return Err(ScrapeError::BodyTooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(classify)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ScrapeError::BodyTooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| ScrapeError::NotUtf8)
}

/// Series skipped in one scrape, by reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Skips {
    /// Series without a label the group template names.
    pub no_group: u64,
    /// Series without a label the shard template names.
    pub no_shard: u64,
    /// Series without a label the key template names.
    pub no_key: u64,
    /// New series past `max_series`.
    pub series_cap: u64,
}

/// The last value of each series of a job.
#[derive(Debug, Default)]
pub struct Series {
    last: HashMap<String, Last>,
}

/// A series' last value: a counter's, or a histogram's cumulative buckets (upper bound,
/// count), ascending.
#[derive(Debug, Clone, PartialEq)]
enum Last {
    Counter(f64),
    Histogram(Vec<(f64, f64)>),
}

impl Series {
    /// Series kept now.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// True when no series is kept.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// Adds what each series of `job` grew by since the previous page to `out`, and keeps
    /// this page's values (only this page's series) for the next.
    pub fn observe(
        &mut self,
        job: &ScrapeJob,
        page: &Scrape,
        out: &mut Batch,
        rejected: &mut Rejections,
    ) -> Skips {
        let mut skips = Skips::default();
        let mut next = HashMap::with_capacity(self.last.len());
        for sample in page
            .samples
            .iter()
            .filter(|s| job.metrics.contains(&s.metric))
        {
            let Some(fields) = Fields::of(job, sample, &mut skips) else {
                continue;
            };
            let id = format!("{}{{{}}}", sample.metric, sample.labels);
            if next.len() >= job.max_series && !next.contains_key(&id) {
                skips.series_cap += 1;
                continue;
            }
            let Some(now) = last_of(&sample.value) else {
                continue;
            };
            if let Some(prev) = self.last.get(&id) {
                for (count, latency_ms) in growth(prev, &now) {
                    match observation(job, sample, &fields, count, latency_ms) {
                        Ok(obs) => out.push(&obs),
                        Err(reason) => rejected.add(reason),
                    }
                }
            }
            next.insert(id, now);
        }
        self.last = next;
        skips
    }
}

/// The value kept of a sample: counters (and untyped samples, as which `prometheus_client`'s
/// `_total` series parse) and classic histograms.
fn last_of(value: &Value) -> Option<Last> {
    match value {
        Value::Counter(v) | Value::Untyped(v) if v.is_finite() && *v >= 0.0 => {
            Some(Last::Counter(*v))
        }
        Value::Histogram(buckets) => {
            let mut b: Vec<(f64, f64)> = buckets.iter().map(|h| (h.less_than, h.count)).collect();
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
            Some(Last::Histogram(b))
        }
        _ => None,
    }
}

/// What a series grew by: (requests, latency) pairs with a non-zero count. A value that went
/// down is a restart: the new value is all growth. Counts are whole requests (floored), so a
/// fractional counter loses at most one request per scrape.
fn growth(prev: &Last, now: &Last) -> Vec<(u64, Option<f64>)> {
    match (prev, now) {
        (Last::Counter(p), Last::Counter(n)) => {
            let d = if n < p {
                n.floor()
            } else {
                n.floor() - p.floor()
            };
            whole(d).map(|c| vec![(c, None)]).unwrap_or_default()
        }
        (Last::Histogram(p), Last::Histogram(n)) => {
            let same_buckets = p.len() == n.len() && p.iter().zip(n).all(|(a, b)| a.0 == b.0);
            if !same_buckets {
                // Re-bucketed (a new version of the target): compare from the next scrape.
                return Vec::new();
            }
            let reset = p.iter().zip(n).any(|(a, b)| b.1 < a.1);
            let per_bucket =
                |b: &[(f64, f64)], i: usize| b[i].1 - if i == 0 { 0.0 } else { b[i - 1].1 };
            (0..n.len())
                .filter_map(|i| {
                    let now = per_bucket(n, i);
                    let d = if reset { now } else { now - per_bucket(p, i) };
                    let lower = if i == 0 { 0.0 } else { n[i - 1].0 };
                    whole(d.floor()).map(|c| (c, representative_ms(lower, n[i].0)))
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// A count of requests from a float difference; `None` when it is not at least one.
fn whole(d: f64) -> Option<u64> {
    (d.is_finite() && d >= 1.0).then(|| (d as u64).min(MAX_COUNT))
}

/// The latency, in ms, that stands for the requests of bucket (`lower`, `upper`] seconds: its
/// middle, or its lower bound for the `+Inf` bucket (none when there is no finite bound).
pub(crate) fn representative_ms(lower: f64, upper: f64) -> Option<f64> {
    let secs = if upper.is_finite() {
        (lower + upper) / 2.0
    } else if lower > 0.0 {
        lower
    } else {
        return None;
    };
    Some((secs.max(0.0) * 1000.0).min(MAX_LATENCY_MS))
}

/// A series' group, shard and key, rendered from the job's templates once per scrape.
struct Fields<'a> {
    group: Cow<'a, str>,
    shard: Cow<'a, str>,
    key: Option<Cow<'a, str>>,
}

impl<'a> Fields<'a> {
    /// The fields of `sample`; `None` (counted in `skips`) when a template names a label the
    /// series lacks and the field has no fallback.
    fn of(job: &'a ScrapeJob, sample: &'a Sample, skips: &mut Skips) -> Option<Fields<'a>> {
        let get = |name: &str| sample.labels.get(name);
        let render = |source: &'a FieldSource| match source.template.render(get) {
            Some(v) => Ok(Some(v)),
            None => match &source.missing {
                Missing::Skip => Err(()),
                Missing::Fallback(v) => Ok(Some(Cow::Borrowed(v.as_str()))),
                Missing::Absent => Ok(None),
            },
        };
        let Ok(Some(group)) = render(&job.group) else {
            skips.no_group += 1;
            return None;
        };
        let Ok(Some(shard)) = render(&job.shard) else {
            skips.no_shard += 1;
            return None;
        };
        let key = match job.key.as_ref().map(render) {
            None => None,
            Some(Ok(key)) => key,
            Some(Err(())) => {
                skips.no_key += 1;
                return None;
            }
        };
        Some(Fields { group, shard, key })
    }
}

/// The observation of `count` requests of one series.
fn observation<'a>(
    job: &'a ScrapeJob,
    sample: &'a Sample,
    fields: &'a Fields<'a>,
    count: u64,
    latency_ms: Option<f64>,
) -> Result<ObservationRef<'a>, RejectReason> {
    let label = |name: &Option<String>| name.as_ref().and_then(|n| sample.labels.get(n));
    let outcome = match label(&job.outcome_label) {
        None => Outcome::Ok,
        Some(v) => job
            .outcomes
            .translate(v)
            .ok_or(RejectReason::UnknownOutcome)?,
    };
    let cache = match label(&job.cache_label) {
        None => None,
        Some(v) => Some(CacheResult::parse(v).ok_or(RejectReason::BadCache)?),
    };
    let obs = ObservationRef {
        ts: None,
        group: &fields.group,
        shard: &fields.shard,
        key: fields.key.as_deref(),
        count,
        latency_ms,
        outcome,
        cache,
        // A page counts requests per label set over a scrape interval: no per-request time
        // for a cache simulation, so no cache key (docs/ingest.md).
        cache_key: None,
    };
    obs.validate()?;
    Ok(obs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Where the redirect points: it must never be asked.
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let elsewhere_addr = elsewhere.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((_conn, _)) = elsewhere.accept().await {
                h.fetch_add(1, Ordering::SeqCst);
            }
        });
        let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_addr = target.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = target.accept().await {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 302 Found\r\nLocation: http://{elsewhere_addr}/metrics\r\n\
                     Content-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        let yaml = format!(
            "scrape:\n  - name: t\n    url: http://{target_addr}/metrics\n    metrics: [x_total]\n"
        );
        let job = crate::app::Config::from_yaml(&yaml, "t")
            .unwrap()
            .startup
            .scrape
            .remove(0);
        let result = fetch(&client(&job).unwrap(), &job).await;
        assert!(
            matches!(result, Err(ScrapeError::Status(302))),
            "{result:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(hits.load(Ordering::SeqCst), 0, "the redirect was followed");
    }
    use crate::app::Config;

    fn job(extra: &str) -> ScrapeJob {
        let yaml = format!(
            "scrape:\n  - name: db\n    url: http://127.0.0.1:1/metrics\n    metrics: [db_requests_total, db_request_duration_seconds]\n    key_label: table\n    outcome_label: outcome\n{extra}"
        );
        Config::from_yaml(&yaml, "t")
            .unwrap()
            .startup
            .scrape
            .remove(0)
    }

    /// Shard, count, latency and key of each observation.
    type Got = Vec<(String, u64, Option<f64>, Option<String>)>;

    fn observe(s: &mut Series, job: &ScrapeJob, page: &str) -> (Got, Rejections, Skips) {
        let mut b = Batch::default();
        let mut r = Rejections::default();
        let skips = s.observe(job, &parse_page(page), &mut b, &mut r);
        let mut got: Vec<_> = b
            .iter()
            .map(|o| {
                (
                    o.shard.to_owned(),
                    o.count,
                    o.latency_ms,
                    o.key.map(str::to_owned),
                )
            })
            .collect();
        got.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (got, r, skips)
    }

    const COUNTERS: &str = "# TYPE db_requests counter\n\
        db_requests_total{shard=\"a\",table=\"users\"} COUNT_A\n\
        db_requests_total{shard=\"b\",table=\"users\"} 10\n\
        db_requests_total{table=\"users\"} 99\n\
        other_total{shard=\"a\"} 5\n";

    #[test]
    fn counters_give_their_growth_first_scrape_is_a_baseline_and_resets_restart() {
        let j = job("");
        let mut s = Series::default();
        let (got, _, skips) = observe(&mut s, &j, &COUNTERS.replace("COUNT_A", "100"));
        assert!(got.is_empty(), "{got:?}");
        assert_eq!(skips.no_shard, 1);
        assert_eq!(s.len(), 2);
        let (got, ..) = observe(&mut s, &j, &COUNTERS.replace("COUNT_A", "130"));
        assert_eq!(
            got,
            vec![("a".to_string(), 30, None, Some("users".to_string()))]
        );
        // The target restarted: 7 requests since.
        let (got, ..) = observe(&mut s, &j, &COUNTERS.replace("COUNT_A", "7"));
        assert_eq!(
            got,
            vec![("a".to_string(), 7, None, Some("users".to_string()))]
        );
        // A series that leaves the page is forgotten.
        let (got, ..) = observe(&mut s, &j, "db_requests_total{shard=\"b\"} 12\n");
        assert!(got.is_empty());
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn histogram_buckets_give_requests_at_their_middle() {
        let j = job("");
        let page = |a: u32, b: u32, inf: u32| {
            format!(
                "# TYPE db_request_duration_seconds histogram\n\
                 db_request_duration_seconds_bucket{{shard=\"s\",le=\"0.01\"}} {a}\n\
                 db_request_duration_seconds_bucket{{shard=\"s\",le=\"0.1\"}} {b}\n\
                 db_request_duration_seconds_bucket{{shard=\"s\",le=\"+Inf\"}} {inf}\n\
                 db_request_duration_seconds_count{{shard=\"s\"}} {inf}\n\
                 db_request_duration_seconds_sum{{shard=\"s\"}} 1\n"
            )
        };
        let mut s = Series::default();
        observe(&mut s, &j, &page(1, 1, 1));
        let (got, ..) = observe(&mut s, &j, &page(5, 8, 10));
        assert_eq!(
            got,
            vec![
                ("s".to_string(), 2, Some(100.0), None),
                ("s".to_string(), 3, Some(55.0), None),
                ("s".to_string(), 4, Some(5.0), None),
            ]
        );
    }

    #[test]
    fn bad_outcomes_are_rejected_and_the_series_cap_holds() {
        let j = job("    max_series: 1\n");
        let mut s = Series::default();
        let page = |n: u32| {
            format!(
                "db_requests_total{{shard=\"a\",outcome=\"error\"}} {n}\n\
                 db_requests_total{{shard=\"b\",outcome=\"weird\"}} {n}\n"
            )
        };
        let (_, _, skips) = observe(&mut s, &j, &page(1));
        assert_eq!(skips.series_cap, 1);
        let (got, _, _) = observe(&mut s, &j, &page(3));
        assert_eq!(got.len(), 1);
        let j = job("");
        let mut s = Series::default();
        observe(&mut s, &j, &page(1));
        let (got, rejected, _) = observe(&mut s, &j, &page(4));
        assert_eq!(got, vec![("a".to_string(), 3, None, None)]);
        assert_eq!(rejected.get(RejectReason::UnknownOutcome), 1);
    }

    /// HAProxy 2.6's exporter names a server by two labels and counts responses by status
    /// class; the recipe of docs/ingest.md reads it.
    const HAPROXY: &str = "# TYPE haproxy_server_http_responses_total counter\n\
        haproxy_server_http_responses_total{proxy=\"be\",server=\"s1\",code=\"2xx\"} OK\n\
        haproxy_server_http_responses_total{proxy=\"be\",server=\"s1\",code=\"4xx\"} NF\n\
        haproxy_server_http_responses_total{proxy=\"be\",server=\"s1\",code=\"5xx\"} 0\n\
        haproxy_server_http_responses_total{proxy=\"be\",server=\"s1\",code=\"other\"} OTHER\n\
        haproxy_server_http_responses_total{proxy=\"be\",code=\"2xx\"} 99\n";

    fn haproxy_job(extra: &str) -> ScrapeJob {
        let yaml = format!(
            "scrape:\n  - name: lb\n    url: http://127.0.0.1:1/metrics\n    \
             metrics: [haproxy_server_http_responses_total]\n    group: \"{{proxy}}\"\n    \
             shard: \"{{proxy}}/{{server}}\"\n    outcome_label: code\n{extra}"
        );
        Config::from_yaml(&yaml, "t")
            .unwrap()
            .startup
            .scrape
            .remove(0)
    }

    /// Group, shard, outcome and count of each observation, sorted.
    fn outcomes(job: &ScrapeJob, pages: [&str; 2]) -> (Vec<(String, String, Outcome, u64)>, Skips) {
        let mut s = Series::default();
        let mut b = Batch::default();
        let mut r = Rejections::default();
        s.observe(job, &parse_page(pages[0]), &mut b, &mut r);
        let skips = s.observe(job, &parse_page(pages[1]), &mut b, &mut r);
        assert_eq!(r.total(), 0);
        let mut got: Vec<_> = b
            .iter()
            .map(|o| (o.group.to_owned(), o.shard.to_owned(), o.outcome, o.count))
            .collect();
        got.sort_by_key(|g| (g.2 as u8, g.3));
        (got, skips)
    }

    #[test]
    fn haproxy_status_classes_translate_on_defaults_and_through_a_table() {
        let page = |ok: u32, nf: u32, other: u32| {
            HAPROXY
                .replace("OK", &ok.to_string())
                .replace("NF", &nf.to_string())
                .replace("OTHER", &other.to_string())
        };
        let (first, second) = (page(10, 1, 0), page(40, 6, 2));
        let (got, skips) = outcomes(&haproxy_job(""), [&first, &second]);
        let row = |o, n| ("be".to_string(), "be/s1".to_string(), o, n);
        assert_eq!(
            got,
            [
                row(Outcome::Ok, 30),
                row(Outcome::Error, 2),
                row(Outcome::Error, 5)
            ]
        );
        // The series without `server` is skipped, each scrape.
        assert_eq!(skips.no_shard, 1);
        let table = "    outcomes:\n      - match: \"4xx\"\n        outcome: not_found\n";
        let (got, _) = outcomes(&haproxy_job(table), [&first, &second]);
        assert_eq!(
            got,
            [
                row(Outcome::Ok, 30),
                row(Outcome::Error, 2),
                row(Outcome::NotFound, 5)
            ]
        );
    }

    #[test]
    fn a_key_template_skips_series_without_its_label_and_counts_them() {
        let j = haproxy_job("    key: \"{code}-{missing}\"\n");
        let page = HAPROXY
            .replace("OK", "1")
            .replace("NF", "1")
            .replace("OTHER", "1");
        let (got, skips) = outcomes(&j, [&page, &page]);
        assert!(got.is_empty());
        assert_eq!((skips.no_shard, skips.no_key), (1, 4));
    }
}
