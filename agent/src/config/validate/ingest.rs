//! Validation of the inputs that read telemetry a service already emits: `statsd.mappings`
//! and `scrape:` jobs.

use std::time::Duration;

use skewwatch_detectors::observation::{CacheResult, Outcome};

use super::Check;
use crate::config::mapping::{
    self, MAX_MAPPINGS, MAX_PATTERN_BYTES, MAX_REGEX_MAPPINGS, StatsdMapping, Template, Types,
};
use crate::config::raw::{RawMapping, RawScrapeJob};
use crate::config::{GroupSource, ScrapeJob};

/// Most `scrape:` jobs: each is one task and one `job` label value.
pub const MAX_SCRAPE_JOBS: usize = 32;
/// Most metric names one job reads.
const MAX_SCRAPE_METRICS: usize = 32;
/// Default and largest series state per job.
const DEFAULT_MAX_SERIES: usize = 10_000;
const MAX_MAX_SERIES: usize = 1_000_000;

impl Check<'_> {
    /// `statsd.mappings`: every mapping compiled, every problem named.
    pub(crate) fn mappings(&mut self, raw: Vec<RawMapping>) -> Vec<StatsdMapping> {
        if raw.len() > MAX_MAPPINGS {
            self.fail(
                "statsd.mappings",
                format!(
                    "{} mappings: at most {MAX_MAPPINGS}; merge names with a regex",
                    raw.len()
                ),
            );
            return Vec::new();
        }
        let regexes = raw
            .iter()
            .filter(|m| m.match_type.as_deref() == Some("regex"))
            .count();
        if regexes > MAX_REGEX_MAPPINGS {
            self.fail(
                "statsd.mappings",
                format!(
                    "{regexes} regex mappings: at most {MAX_REGEX_MAPPINGS}; use globs where they do"
                ),
            );
            return Vec::new();
        }
        raw.into_iter()
            .enumerate()
            .filter_map(|(i, m)| self.mapping(&format!("statsd.mappings[{i}]"), m))
            .collect()
    }

    fn mapping(&mut self, f: &str, m: RawMapping) -> Option<StatsdMapping> {
        let before = self.problems.len();
        let pattern = m.pattern.unwrap_or_default();
        let matcher = if pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES {
            self.fail(
                &format!("{f}.match"),
                format!("required: a metric name pattern of 1 to {MAX_PATTERN_BYTES} bytes"),
            );
            None
        } else {
            let compiled = match m.match_type.as_deref().unwrap_or("glob") {
                "glob" => mapping::compile_glob(&pattern),
                "regex" => mapping::compile_regex(&pattern),
                other => Err(format!("`{other}` is not a match_type: use glob or regex")),
            };
            compiled
                .map_err(|why| self.fail(&format!("{f}.match"), why))
                .ok()
        };
        let captures = matcher
            .as_ref()
            .map_or(mapping::MAX_CAPTURES, |m| m.captures());
        let types = match m.types {
            None => Types::ALL,
            Some(letters) => mapping::parse_types(&letters)
                .map_err(|why| self.fail(&format!("{f}.types"), why))
                .unwrap_or(Types::ALL),
        };
        let group = self.template(f, "group", m.group, captures, true);
        let shard = self.template(f, "shard", m.shard, captures, true);
        let key = self.template(f, "key", m.key, captures, false);
        let outcome = self.template(f, "outcome", m.outcome, captures, false);
        let cache = self.template(f, "cache", m.cache, captures, false);
        self.literal_values(f, outcome.as_ref(), cache.as_ref());
        if self.problems.len() > before {
            return None;
        }
        Some(StatsdMapping {
            pattern,
            matcher: matcher?,
            types,
            group: group?,
            shard: shard?,
            key,
            outcome,
            cache,
        })
    }

    fn template(
        &mut self,
        f: &str,
        name: &str,
        text: Option<String>,
        captures: usize,
        required: bool,
    ) -> Option<Template> {
        let field = format!("{f}.{name}");
        let Some(text) = text else {
            if required {
                self.fail(
                    &field,
                    format!("required: e.g. `$1`, `${{tag:{name}}}` or a literal name"),
                );
            }
            return None;
        };
        if text.len() > MAX_PATTERN_BYTES {
            self.fail(&field, format!("at most {MAX_PATTERN_BYTES} bytes"));
            return None;
        }
        Template::parse(&text, captures)
            .map_err(|why| self.fail(&field, why))
            .ok()
    }

    /// A literal outcome or cache result must be one skewwatch knows, or every line it maps
    /// would be rejected.
    fn literal_values(&mut self, f: &str, outcome: Option<&Template>, cache: Option<&Template>) {
        if let Some(o) = outcome.and_then(Template::literal)
            && Outcome::parse(o).is_none()
        {
            self.fail(
                &format!("{f}.outcome"),
                format!("`{o}` is not an outcome: use ok, error, timeout, not_found, throttled or unavailable"),
            );
        }
        if let Some(c) = cache.and_then(Template::literal)
            && CacheResult::parse(c).is_none()
        {
            self.fail(&format!("{f}.cache"), format!("`{c}` is not hit or miss"));
        }
    }

    /// `scrape:`: every job, names unique.
    pub(crate) fn scrape(&mut self, raw: Vec<RawScrapeJob>) -> Vec<ScrapeJob> {
        if raw.len() > MAX_SCRAPE_JOBS {
            self.fail(
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
                self.fail(
                    &format!("{f}.name"),
                    "required: 1 to 64 of A-Z a-z 0-9 _ . -",
                );
            } else if names.contains(&name) {
                self.fail(&format!("{f}.name"), format!("`{name}` is not unique"));
            }
            names.push(name.clone());
            if let Some(job) = self.scrape_job(&f, name, r) {
                jobs.push(job);
            }
        }
        jobs
    }

    fn scrape_job(&mut self, f: &str, name: String, r: RawScrapeJob) -> Option<ScrapeJob> {
        let before = self.problems.len();
        let url = self.receiver_url(&format!("{f}.url"), r.url.as_deref());
        let interval = self.secs(
            &format!("{f}.interval_secs"),
            r.interval_secs,
            Duration::from_secs(10),
            0.1,
            3600.0,
        );
        let timeout = self.secs(
            &format!("{f}.timeout_secs"),
            r.timeout_secs,
            Duration::from_secs(5),
            0.1,
            3600.0,
        );
        if timeout > interval {
            self.fail(
                &format!("{f}.timeout_secs"),
                "longer than interval_secs: scrapes would overlap",
            );
        }
        let metrics = r.metrics.clone().unwrap_or_default();
        if metrics.is_empty() || metrics.len() > MAX_SCRAPE_METRICS {
            self.fail(
                &format!("{f}.metrics"),
                format!("list 1 to {MAX_SCRAPE_METRICS} counter or histogram names"),
            );
        }
        let labels = self.scrape_labels(f, &r);
        let max_series = self.range(
            &format!("{f}.max_series"),
            r.max_series,
            DEFAULT_MAX_SERIES,
            1,
            MAX_MAX_SERIES,
        );
        let bearer_token = self.secret(f, "bearer_token", r.bearer_token_file, r.bearer_token_env);
        if self.problems.len() > before {
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

    /// The five label names, each a valid Prometheus label name when set.
    fn scrape_labels(&mut self, f: &str, r: &RawScrapeJob) -> [Option<String>; 5] {
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
            self.fail(&format!("{f}.group"), "a group name is 1 to 128 bytes");
        }
        labels.map(|(field, v)| {
            if let Some(l) = &v
                && !valid_label_name(l)
            {
                self.fail(
                    &format!("{f}.{field}"),
                    format!("`{l}` is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"),
                );
            }
            v
        })
    }
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

    fn fields(yaml: &str) -> Vec<String> {
        let err = Config::from_yaml_with_env(yaml, "f.yaml", &|_| None).unwrap_err();
        let ConfigError::Invalid { problems, .. } = err else {
            panic!("{err}")
        };
        problems.into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn every_mapping_and_scrape_problem_is_named_with_its_field() {
        let yaml = r#"
statsd:
  mappings:
    - match: "db.*.q"
      shard: "$2"
      outcome: maybe
    - match: "("
      match_type: regex
      types: [g]
      group: g
      shard: s
      cache: "${tag:"
    - match: x
      match_type: fuzzy
      group: g
      shard: s
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
                "statsd.mappings[0].group",
                "statsd.mappings[0].shard",
                "statsd.mappings[0].outcome",
                "statsd.mappings[1].match",
                "statsd.mappings[1].types",
                "statsd.mappings[1].cache",
                "statsd.mappings[2].match",
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
    fn mapping_and_scrape_counts_are_capped() {
        let many = "    - match: a\n      group: g\n      shard: s\n".repeat(129);
        assert_eq!(
            fields(&format!("statsd:\n  mappings:\n{many}")),
            ["statsd.mappings"]
        );
        let regexes =
            "    - match: a\n      match_type: regex\n      group: g\n      shard: s\n".repeat(17);
        assert_eq!(
            fields(&format!("statsd:\n  mappings:\n{regexes}")),
            ["statsd.mappings"]
        );
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
