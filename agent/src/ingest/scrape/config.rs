//! The validated `scrape:` section: the jobs ([`ScrapeJob`]) and their validation
//! ([`validate`]), which names every problem with its field.

use std::time::Duration;

use crate::config::raw::RawScrapeJob;
use crate::config::secret::Secret;
use crate::config::validate::Check;

/// Most `scrape:` jobs: each is one task and one `job` label value.
pub const MAX_SCRAPE_JOBS: usize = 32;
/// Most metric names one job reads.
const MAX_SCRAPE_METRICS: usize = 32;
/// Default and largest series state per job.
const DEFAULT_MAX_SERIES: usize = 10_000;
const MAX_MAX_SERIES: usize = 1_000_000;

/// Where a scrape job takes the group of its observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSource {
    /// The group when the label is absent (or not configured).
    pub name: String,
    /// A label whose value, when present, is the group.
    pub label: Option<String>,
}

/// A validated `scrape:` job: a Prometheus `/metrics` page read at an interval, its
/// per-shard counters and classic histograms turned into observations (see
/// [`super`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeJob {
    /// The `job` label of the scrape metrics; unique.
    pub name: String,
    /// The page (plain http).
    pub url: reqwest::Url,
    /// Time between scrapes.
    pub interval: Duration,
    /// Time one scrape may take.
    pub timeout: Duration,
    /// Counter and classic histogram names read (as they appear in samples: `x_total`, and a
    /// histogram by its base name).
    pub metrics: Vec<String>,
    /// The group.
    pub group: GroupSource,
    /// The label naming the shard; a series without it is skipped.
    pub shard_label: String,
    /// The label naming the key.
    pub key_label: Option<String>,
    /// The label naming the outcome.
    pub outcome_label: Option<String>,
    /// The label naming the cache result.
    pub cache_label: Option<String>,
    /// Bearer token sent to the target.
    pub bearer_token: Option<Secret>,
    /// Series whose previous value is kept; new series past it are skipped, counted.
    pub max_series: usize,
}

/// Validates the `scrape:` section: every job, names unique, every problem pushed to `c`
/// with its field (`scrape[1].url`).
pub fn validate(c: &mut Check<'_>, raw: Vec<RawScrapeJob>) -> Vec<ScrapeJob> {
    if raw.len() > MAX_SCRAPE_JOBS {
        c.fail(
            "scrape",
            format!("{} jobs: at most {MAX_SCRAPE_JOBS}", raw.len()),
        );
        return Vec::new();
    }
    let mut names: Vec<String> = Vec::new();
    let mut jobs = Vec::new();
    for (i, r) in raw.into_iter().enumerate() {
        let f = format!("scrape[{i}]");
        let name = r.name.clone().unwrap_or_default();
        if !valid_label_value(&name) {
            c.fail(
                &format!("{f}.name"),
                "required: 1 to 64 of A-Z a-z 0-9 _ . -",
            );
        } else if names.contains(&name) {
            c.fail(&format!("{f}.name"), format!("`{name}` is not unique"));
        }
        names.push(name.clone());
        if let Some(job) = job(c, &f, name, r) {
            jobs.push(job);
        }
    }
    jobs
}

/// One job, every field checked; `None` when any of them is wrong (each problem is pushed).
fn job(c: &mut Check<'_>, f: &str, name: String, r: RawScrapeJob) -> Option<ScrapeJob> {
    let before = c.found();
    let url = c.receiver_url(&format!("{f}.url"), r.url.as_deref());
    let (interval, timeout) = timing(c, f, &r);
    let metrics = r.metrics.clone().unwrap_or_default();
    if metrics.is_empty() || metrics.len() > MAX_SCRAPE_METRICS {
        c.fail(
            &format!("{f}.metrics"),
            format!("list 1 to {MAX_SCRAPE_METRICS} counter or histogram names"),
        );
    }
    let labels = labels(c, f, &r);
    let max_series = c.range(
        &format!("{f}.max_series"),
        r.max_series,
        DEFAULT_MAX_SERIES,
        1,
        MAX_MAX_SERIES,
    );
    let bearer_token = c.secret(f, "bearer_token", r.bearer_token_file, r.bearer_token_env);
    if c.found() > before {
        return None;
    }
    let [
        group_label,
        shard_label,
        key_label,
        outcome_label,
        cache_label,
    ] = labels;
    Some(ScrapeJob {
        group: GroupSource {
            name: r.group.unwrap_or_else(|| name.clone()),
            label: group_label,
        },
        name,
        url: url?,
        interval,
        timeout,
        metrics,
        shard_label: shard_label.unwrap_or_else(|| "shard".into()),
        key_label,
        outcome_label,
        cache_label,
        bearer_token,
        max_series,
    })
}

/// The interval and the timeout; a timeout longer than the interval is refused, as scrapes
/// would overlap.
fn timing(c: &mut Check<'_>, f: &str, r: &RawScrapeJob) -> (Duration, Duration) {
    let interval = c.secs(
        &format!("{f}.interval_secs"),
        r.interval_secs,
        Duration::from_secs(10),
        0.1,
        3600.0,
    );
    let timeout = c.secs(
        &format!("{f}.timeout_secs"),
        r.timeout_secs,
        Duration::from_secs(5),
        0.1,
        3600.0,
    );
    if timeout > interval {
        c.fail(
            &format!("{f}.timeout_secs"),
            "longer than interval_secs: scrapes would overlap",
        );
    }
    (interval, timeout)
}

/// The five label names, each a valid Prometheus label name when set.
fn labels(c: &mut Check<'_>, f: &str, r: &RawScrapeJob) -> [Option<String>; 5] {
    let labels = [
        ("group_label", r.group_label.clone()),
        ("shard_label", r.shard_label.clone()),
        ("key_label", r.key_label.clone()),
        ("outcome_label", r.outcome_label.clone()),
        ("cache_label", r.cache_label.clone()),
    ];
    if let Some(g) = &r.group
        && (g.is_empty() || g.len() > skewwatch_detectors::observation::MAX_NAME_BYTES)
    {
        c.fail(&format!("{f}.group"), "a group name is 1 to 128 bytes");
    }
    labels.map(|(field, v)| {
        if let Some(l) = &v
            && !valid_label_name(l)
        {
            c.fail(
                &format!("{f}.{field}"),
                format!("`{l}` is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"),
            );
        }
        v
    })
}

fn valid_label_value(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

fn valid_label_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use crate::app::Config;
    use crate::config::ConfigError;

    /// The fields of the problems `yaml` has (it must have some).
    fn fields(yaml: &str) -> Vec<String> {
        let err = Config::from_yaml_with_env(yaml, "f.yaml", &|_| None).unwrap_err();
        let ConfigError::Invalid { problems, .. } = err else {
            panic!("{err}")
        };
        problems.into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn every_scrape_problem_is_named_with_its_field() {
        let yaml = r#"
scrape:
  - name: "bad name"
    url: "https://t/metrics"
    interval_secs: 1
    timeout_secs: 2
    metrics: []
    shard_label: "9x"
    bearer_token_env: NOPE
  - url: "http://t/metrics"
    metrics: [a_total]
"#;
        assert_eq!(
            fields(yaml),
            [
                "scrape[0].name",
                "scrape[0].url",
                "scrape[0].timeout_secs",
                "scrape[0].metrics",
                "scrape[0].shard_label",
                "scrape[0].bearer_token_env",
                "scrape[1].name",
            ]
        );
    }

    #[test]
    fn scrape_job_count_is_capped() {
        let jobs: String = (0..33)
            .map(|i| format!("  - name: j{i}\n    url: http://t/m\n    metrics: [a]\n"))
            .collect();
        assert_eq!(fields(&format!("scrape:\n{jobs}")), ["scrape"]);
    }

    #[test]
    fn a_scrape_job_takes_its_defaults_and_its_token() {
        let yaml = "scrape:\n  - name: db\n    url: http://127.0.0.1:9187/metrics\n    metrics: [db_requests_total]\n    bearer_token_env: TOK\n";
        let env = |n: &str| (n == "TOK").then(|| "t0k\n".to_string());
        let job = Config::from_yaml_with_env(yaml, "t", &env)
            .unwrap()
            .startup
            .scrape
            .remove(0);
        assert_eq!(job.group.name, "db");
        assert_eq!(job.shard_label, "shard");
        assert_eq!(job.interval, std::time::Duration::from_secs(10));
        assert_eq!(job.timeout, std::time::Duration::from_secs(5));
        assert_eq!(job.max_series, 10_000);
        assert!(job.bearer_token.unwrap().matches(b"t0k"));
    }
}
