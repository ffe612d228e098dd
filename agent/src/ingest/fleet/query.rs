//! What the fleet input asks the PromQL API, and how it reads the answers.
//!
//! One expression per family of cumulative series ([`Family`]) gives, for every label set it
//! is summed by, what the sidecars' counters grew by between two evaluation times, exactly
//! (ADR 007 weighs it against `increase()`):
//!
//! ```text
//! cur  = last_over_time(metric{selector}[lookback])
//! prev = last_over_time(metric{selector}[lookback] offset d)     d = now - previous query
//! sum by (labels) (cur)                                   every series' value now   (part="cur")
//! sum by (labels) (prev <= cur)                           of those that counted on  (part="prev")
//! sum by (labels) (max_over_time(metric[d]) - (prev > cur))  of those that restarted  (part="lost")
//! ```
//!
//! The growth of a label set is `cur - prev + lost` ([`net`]): a series that went on counting
//! adds its growth; one that restarted (its value went down) its value since the restart, plus
//! what it had counted before the restart since the previous query (its highest sample in `d`
//! less `prev`, never below zero); one that is new its value from zero, and one that left
//! nothing. What a restarted sidecar counted after its last scrape never reached the TSDB and is
//! lost to every reader of it. `last_over_time` reads the last sample at or before each time, so
//! a missed scrape or windows that do not line up with scrapes shift growth from one window to
//! the next but never lose or double it; it skips staleness markers, so a sidecar whose scrape
//! failed for less than `lookback` continues where it left off. The answers are small: at most
//! three series per label set summed over every sidecar.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;

use super::config::{Auth, FleetConfig};

/// A family of cumulative series the sidecars export, and what it is summed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `skewwatch_shard_requests_total` by group, shard and outcome.
    Requests,
    /// `skewwatch_shard_cache_requests_total` by group, shard and result.
    Cache,
    /// `skewwatch_shard_request_duration_seconds_bucket` by group, shard and `le`.
    Buckets,
    /// `skewwatch_key_requests_total` by group and key.
    Keys,
    /// `skewwatch_key_unlisted_bound_total` by group.
    KeysUnlisted,
    /// `skewwatch_key_overcount_bound_total` by group.
    KeysOvercount,
}

impl Family {
    /// Every family, in the order they are asked for.
    pub const ALL: [Family; 6] = [
        Family::Requests,
        Family::Cache,
        Family::Buckets,
        Family::Keys,
        Family::KeysUnlisted,
        Family::KeysOvercount,
    ];

    /// The series' metric name.
    pub fn metric(self) -> &'static str {
        match self {
            Family::Requests => "skewwatch_shard_requests_total",
            Family::Cache => "skewwatch_shard_cache_requests_total",
            Family::Buckets => "skewwatch_shard_request_duration_seconds_bucket",
            Family::Keys => "skewwatch_key_requests_total",
            Family::KeysUnlisted => "skewwatch_key_unlisted_bound_total",
            Family::KeysOvercount => "skewwatch_key_overcount_bound_total",
        }
    }

    /// The label the sums keep beside `group` (and `shard`, for the shard families).
    pub fn label(self) -> Option<&'static str> {
        match self {
            Family::Requests => Some("outcome"),
            Family::Cache => Some("result"),
            Family::Buckets => Some("le"),
            Family::Keys => Some("key"),
            Family::KeysUnlisted | Family::KeysOvercount => None,
        }
    }

    /// Whether the family is counted per shard (else per group).
    pub fn per_shard(self) -> bool {
        matches!(self, Family::Requests | Family::Cache | Family::Buckets)
    }

    /// The labels the sums are taken by.
    pub fn by(self) -> String {
        let mut by = vec!["group"];
        if self.per_shard() {
            by.push("shard");
        }
        by.extend(self.label());
        by.join(", ")
    }

    /// The `family` label of the fleet self-metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Requests => "requests",
            Family::Cache => "cache",
            Family::Buckets => "buckets",
            Family::Keys => "keys",
            Family::KeysUnlisted => "keys_unlisted",
            Family::KeysOvercount => "keys_overcount",
        }
    }
}

/// The expression whose answer [`net`] turns into what `family` grew by in the `offset` before
/// its evaluation time.
pub fn growth_expr(family: Family, selector: &str, lookback: Duration, offset: Duration) -> String {
    let series = format!("{}{{{selector}}}", family.metric());
    let range = format!("[{}s]", lookback.as_secs().max(1));
    let offset_ms = offset.as_millis().max(1);
    let cur = format!("last_over_time({series}{range})");
    let prev = format!("last_over_time({series}{range} offset {offset_ms}ms)");
    let since = format!("max_over_time({series}[{offset_ms}ms])");
    let by = family.by();
    format!(
        "label_replace(sum by ({by}) ({cur}), \"part\", \"cur\", \"\", \"\") or \
         label_replace(sum by ({by}) ({prev} <= {cur}), \"part\", \"prev\", \"\", \"\") or \
         label_replace(sum by ({by}) (clamp_min({since} - ({prev} > {cur}), 0)), \"part\", \"lost\", \"\", \"\")"
    )
}

/// The growth of each label set in an answer to [`growth_expr`]: its `part="cur"` sum less its
/// `part="prev"` sum plus its `part="lost"` sum at each time (a missing part: zero), never below
/// zero; the `part` label is dropped.
/// Series without a `part` label are taken as growth already.
pub fn net(answer: Vec<Series>) -> Vec<Series> {
    /// A label set's `cur`, `prev` and `lost` points.
    type Parts = (Vec<(f64, f64)>, Vec<(f64, f64)>, Vec<(f64, f64)>);
    let mut by_labels: HashMap<Vec<(String, String)>, Parts> = HashMap::new();
    for mut s in answer {
        let part = s.labels.remove("part");
        let mut key: Vec<(String, String)> = s.labels.into_iter().collect();
        key.sort();
        let e = by_labels.entry(key).or_default();
        match part.as_deref() {
            Some("prev") => e.1.extend(s.points),
            Some("lost") => e.2.extend(s.points),
            _ => e.0.extend(s.points),
        }
    }
    let mut out: Vec<Series> = by_labels
        .into_iter()
        .filter(|(_, (cur, _, _))| !cur.is_empty())
        .map(|(key, (cur, prev, lost))| {
            let at = |part: &[(f64, f64)], t: f64| {
                part.iter()
                    .find(|(tp, _)| (tp - t).abs() < 1e-6)
                    .map_or(0.0, |&(_, v)| v)
            };
            let points = cur
                .into_iter()
                .map(|(t, c)| (t, (c - at(&prev, t) + at(&lost, t)).max(0.0)))
                .collect();
            Series {
                labels: key.into_iter().collect(),
                points,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        let key = |s: &Series| {
            let mut k: Vec<_> = s.labels.iter().collect();
            k.sort();
            format!("{k:?}")
        };
        key(a).cmp(&key(b))
    });
    out
}

/// Why a query failed: the `reason` label of `skewwatch_fleet_query_failures_total`.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The API could not be reached or the connection broke.
    #[error("cannot reach the API: {0}")]
    Connect(reqwest::Error),
    /// No complete answer within `fleet.timeout_secs`.
    #[error("no complete answer within the timeout; raise fleet.timeout_secs or check the API")]
    Timeout,
    /// The API answered with a status other than 2xx (and no readable error).
    #[error("the API answered HTTP {0}; check fleet.url and the credentials")]
    Status(u16),
    /// The API refused the query (`"status": "error"`).
    #[error("the API refused the query ({kind}): {message}")]
    Refused {
        /// Prometheus' `errorType`.
        kind: String,
        /// Prometheus' `error`, at most 512 bytes of it.
        message: String,
    },
    /// The answer is larger than `fleet.max_response_bytes`.
    #[error("the answer is larger than fleet.max_response_bytes ({0} bytes)")]
    TooLarge(usize),
    /// The answer holds more series than `fleet.max_series`.
    #[error("the answer holds more than fleet.max_series ({0}) series")]
    TooManySeries(usize),
    /// The answer is not what the Prometheus HTTP API returns.
    #[error("the answer is not a Prometheus API answer: {0}")]
    Malformed(String),
    /// The API says the answer may be missing data (warnings, as a partial response has).
    #[error("the answer may be partial: {0}")]
    Partial(String),
    /// Every answer came, but after the window closed.
    #[error(
        "the answers came after the window closed; raise fleet.query_lead_secs (the time the \
         queries have before the window closes) or give the TSDB more room"
    )]
    Late,
}

impl QueryError {
    /// The label value.
    pub fn reason(&self) -> &'static str {
        match self {
            QueryError::Connect(_) => "connect",
            QueryError::Timeout => "timeout",
            QueryError::Status(_) => "status",
            QueryError::Refused { .. } => "refused",
            QueryError::TooLarge(_) => "too_large",
            QueryError::TooManySeries(_) => "too_many_series",
            QueryError::Malformed(_) => "malformed",
            QueryError::Partial(_) => "partial",
            QueryError::Late => "late",
        }
    }
}

/// One series of an answer: its labels and its points (time, value); an instant answer has
/// one point per series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The labels.
    pub labels: HashMap<String, String>,
    /// (unix seconds, value), in time order.
    pub points: Vec<(f64, f64)>,
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawSeries {
    #[serde(default)]
    metric: HashMap<String, String>,
    #[serde(default)]
    value: Option<(f64, String)>,
    #[serde(default)]
    values: Option<Vec<(f64, String)>>,
}

/// Reads an answer of `/api/v1/query` or `/api/v1/query_range`: a vector or a matrix, at most
/// `max_series` series. An error answer, warnings (a partial answer), another result type, or a
/// value that is not a finite number is an error: the fleet input never judges on data the API
/// itself doubts.
pub fn parse_answer(body: &[u8], max_series: usize) -> Result<Vec<Series>, QueryError> {
    let env: Envelope =
        serde_json::from_slice(body).map_err(|e| QueryError::Malformed(e.to_string()))?;
    if env.status != "success" {
        return Err(QueryError::Refused {
            kind: env.error_type.unwrap_or_else(|| "unknown".to_owned()),
            message: clip(&env.error.unwrap_or_default(), 512),
        });
    }
    if let Some(w) = env.warnings.first() {
        return Err(QueryError::Partial(clip(w, 512)));
    }
    let data = env
        .data
        .ok_or_else(|| QueryError::Malformed("`data` is missing".to_owned()))?;
    if data.result_type != "vector" && data.result_type != "matrix" {
        return Err(QueryError::Malformed(format!(
            "a `{}` answer where a vector or matrix was asked for",
            clip(&data.result_type, 32)
        )));
    }
    let serde_json::Value::Array(items) = data.result else {
        return Err(QueryError::Malformed("`result` is not a list".to_owned()));
    };
    if items.len() > max_series {
        return Err(QueryError::TooManySeries(max_series));
    }
    items
        .into_iter()
        .map(|item| {
            let raw: RawSeries =
                serde_json::from_value(item).map_err(|e| QueryError::Malformed(e.to_string()))?;
            let points = match (raw.value, raw.values) {
                (Some(p), None) => vec![point(p)?],
                (None, Some(ps)) => ps.into_iter().map(point).collect::<Result<_, _>>()?,
                _ => {
                    return Err(QueryError::Malformed(
                        "a series with neither `value` nor `values`".to_owned(),
                    ));
                }
            };
            Ok(Series {
                labels: raw.metric,
                points,
            })
        })
        .collect()
}

fn point((t, v): (f64, String)) -> Result<(f64, f64), QueryError> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && t.is_finite() => Ok((t, x)),
        _ => Err(QueryError::Malformed(format!(
            "`{}` is not a finite sample value",
            clip(&v, 32)
        ))),
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn clip(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The HTTP side: one client for the API, bounded in time and size, with the credentials.
#[derive(Debug, Clone)]
pub struct Api {
    client: reqwest::Client,
    base: reqwest::Url,
    auth: Option<Auth>,
    max_bytes: usize,
    max_series: usize,
}

/// How much one answer weighed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Weight {
    /// Bytes of the body.
    pub bytes: usize,
    /// Series in it.
    pub series: usize,
}

impl Api {
    /// A client for `config`. As the scrape jobs' and alert delivery's, it follows no
    /// redirect (it would carry the credentials wherever it points) and takes no proxy from
    /// the environment.
    pub fn new(config: &FleetConfig) -> reqwest::Result<Api> {
        Api::with_timeout(config, config.timeout)
    }

    /// Like [`Api::new`], each query bounded by `timeout` instead of `fleet.timeout_secs`.
    pub fn with_timeout(config: &FleetConfig, timeout: Duration) -> reqwest::Result<Api> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("skewwatch/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout)
            .timeout(timeout)
            .build()?;
        Ok(Api {
            client,
            base: config.url.clone(),
            auth: config.auth.clone(),
            max_bytes: config.max_response_bytes,
            max_series: config.max_series,
        })
    }

    /// `expr` evaluated at `time` (unix seconds).
    pub async fn instant(
        &self,
        expr: &str,
        time: f64,
    ) -> Result<(Vec<Series>, Weight), QueryError> {
        let time = format!("{time:.3}");
        self.post("api/v1/query", &[("query", expr), ("time", &time)])
            .await
    }

    /// `expr` evaluated every `step` seconds from `start` to `end` (unix seconds).
    pub async fn range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<(Vec<Series>, Weight), QueryError> {
        let (start, end, step) = (
            format!("{start:.3}"),
            format!("{end:.3}"),
            format!("{step}"),
        );
        self.post(
            "api/v1/query_range",
            &[
                ("query", expr),
                ("start", &start),
                ("end", &end),
                ("step", &step),
            ],
        )
        .await
    }

    /// One form POST (as Prometheus' own UI sends long queries), read within the size bound.
    async fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
    ) -> Result<(Vec<Series>, Weight), QueryError> {
        let url = endpoint(&self.base, path);
        let mut request = self
            .client
            .post(url)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Accept", "application/json")
            .body(form_body(form));
        request = match &self.auth {
            None => request,
            Some(Auth::Bearer(token)) => request.header(
                "Authorization",
                format!("Bearer {}", String::from_utf8_lossy(token.expose())),
            ),
            Some(Auth::Basic { username, password }) => request.basic_auth(
                username,
                Some(String::from_utf8_lossy(password.expose()).into_owned()),
            ),
        };
        let classify = |e: reqwest::Error| {
            if e.is_timeout() {
                QueryError::Timeout
            } else {
                QueryError::Connect(e)
            }
        };
        let mut response = request.send().await.map_err(classify)?;
        let status = response.status();
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(QueryError::TooLarge(self.max_bytes));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(classify)? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(QueryError::TooLarge(self.max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        // Prometheus answers a bad query with 400 or 422 and an error body: read it, so the
        // log says what the API said.
        match parse_answer(&body, self.max_series) {
            Ok(series) if status.is_success() => {
                let weight = Weight {
                    bytes: body.len(),
                    series: series.len(),
                };
                Ok((series, weight))
            }
            Ok(_) => Err(QueryError::Status(status.as_u16())),
            Err(e @ QueryError::Refused { .. }) => Err(e),
            Err(_) if !status.is_success() => Err(QueryError::Status(status.as_u16())),
            Err(e) => Err(e),
        }
    }
}

/// `base` joined with `path`, keeping a path prefix the base has (`http://h/prometheus/`).
fn endpoint(base: &reqwest::Url, path: &str) -> reqwest::Url {
    let mut url = base.clone();
    let prefix = base.path().trim_end_matches('/');
    url.set_path(&format!("{prefix}/{path}"));
    url.set_query(None);
    url
}

/// An `application/x-www-form-urlencoded` body.
fn form_body(form: &[(&str, &str)]) -> String {
    let mut scratch = reqwest::Url::parse("http://form.invalid/").expect("a valid URL");
    scratch.query_pairs_mut().extend_pairs(form.iter().copied());
    scratch.query().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_growth_expression_reads_as_documented() {
        let e = growth_expr(
            Family::Requests,
            r#"job="sw""#,
            Duration::from_secs(600),
            Duration::from_millis(30_000),
        );
        let cur = r#"last_over_time(skewwatch_shard_requests_total{job="sw"}[600s])"#;
        let prev =
            r#"last_over_time(skewwatch_shard_requests_total{job="sw"}[600s] offset 30000ms)"#;
        let since = r#"max_over_time(skewwatch_shard_requests_total{job="sw"}[30000ms])"#;
        assert_eq!(
            e,
            format!(
                "label_replace(sum by (group, shard, outcome) ({cur}), \"part\", \"cur\", \"\", \"\") or \
                 label_replace(sum by (group, shard, outcome) ({prev} <= {cur}), \"part\", \"prev\", \"\", \"\") or \
                 label_replace(sum by (group, shard, outcome) (clamp_min({since} - ({prev} > {cur}), 0)), \"part\", \"lost\", \"\", \"\")"
            )
        );
    }

    #[test]
    fn the_growth_is_the_current_sum_less_the_previous_one_of_what_counted_on() {
        let s = |part: Option<&str>, shard: &str, points: Vec<(f64, f64)>| Series {
            labels: [("shard", shard)]
                .into_iter()
                .chain(part.map(|p| ("part", p)))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            points,
        };
        let got = net(vec![
            s(Some("cur"), "a", vec![(1.0, 100.0), (2.0, 130.0)]),
            s(Some("prev"), "a", vec![(1.0, 90.0), (2.0, 100.0)]),
            // Only new or restarted series: no `prev` part at all; one restarted after
            // counting 4 more since the previous query.
            s(Some("cur"), "b", vec![(1.0, 7.0)]),
            s(Some("lost"), "b", vec![(1.0, 4.0)]),
            // A `prev` without a `cur` (everything left): nothing.
            s(Some("prev"), "c", vec![(1.0, 5.0)]),
        ]);
        let flat: Vec<(String, Vec<(f64, f64)>)> = got
            .into_iter()
            .map(|s| (s.labels["shard"].clone(), s.points))
            .collect();
        assert_eq!(
            flat,
            [
                ("a".to_owned(), vec![(1.0, 10.0), (2.0, 30.0)]),
                ("b".to_owned(), vec![(1.0, 11.0)])
            ]
        );
    }

    #[test]
    fn key_families_are_summed_by_group() {
        let e = growth_expr(
            Family::KeysUnlisted,
            "",
            Duration::from_secs(60),
            Duration::from_secs(10),
        );
        assert!(e.starts_with("label_replace(sum by (group) ("), "{e}");
        assert!(
            e.contains("skewwatch_key_unlisted_bound_total{}[60s] offset 10000ms"),
            "{e}"
        );
        assert_eq!(Family::Keys.by(), "group, key");
    }

    #[test]
    fn vectors_and_matrices_are_read() {
        let v = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"group":"db","shard":"s1","outcome":"ok"},"value":[1700000000.5,"42"]},
            {"metric":{},"value":[1700000000.5,"0"]}]}}"#;
        let s = parse_answer(v, 10).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].labels["shard"], "s1");
        assert_eq!(s[0].points, vec![(1_700_000_000.5, 42.0)]);
        let m = br#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"group":"db"},"values":[[1,"1"],[2,"3.5"]]}]}}"#;
        assert_eq!(
            parse_answer(m, 10).unwrap()[0].points,
            vec![(1.0, 1.0), (2.0, 3.5)]
        );
    }

    #[test]
    fn doubtful_answers_are_errors_with_their_reason() {
        let cases: [(&[u8], &str); 8] = [
            (b"not json", "malformed"),
            (
                br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
                "refused",
            ),
            (
                br#"{"status":"success","warnings":["store unavailable"],"data":{"resultType":"vector","result":[]}}"#,
                "partial",
            ),
            (
                br#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#,
                "malformed",
            ),
            (
                br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#,
                "malformed",
            ),
            (
                br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"+Inf"]}]}}"#,
                "malformed",
            ),
            (
                br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}"#,
                "malformed",
            ),
            (
                br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]},{"metric":{},"value":[1,"1"]},{"metric":{},"value":[1,"1"]}]}}"#,
                "too_many_series",
            ),
        ];
        for (body, reason) in cases {
            let e = parse_answer(body, 2).unwrap_err();
            assert_eq!(e.reason(), reason, "{}: {e}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn endpoints_keep_a_path_prefix() {
        let u = |s: &str| reqwest::Url::parse(s).unwrap();
        assert_eq!(
            endpoint(&u("http://p:9090"), "api/v1/query").as_str(),
            "http://p:9090/api/v1/query"
        );
        assert_eq!(
            endpoint(&u("http://p/prometheus/"), "api/v1/query").as_str(),
            "http://p/prometheus/api/v1/query"
        );
        assert_eq!(
            form_body(&[("query", "a{b=\"c\"} + 1")]),
            "query=a%7Bb%3D%22c%22%7D+%2B+1"
        );
    }
}
