//! The validated `scrape:` section: the jobs ([`ScrapeJob`]) and their validation
//! ([`validate`]), which names every problem with its field.

use std::borrow::Cow;
use std::time::Duration;

use crate::config::raw::RawScrapeJob;
use crate::config::secret::Secret;
use crate::config::validate::Check;
use crate::ingest::outcome::{self, OutcomeTable};

/// Most `scrape:` jobs: each is one task and one `job` label value.
pub const MAX_SCRAPE_JOBS: usize = 32;
/// Most metric names one job reads.
const MAX_SCRAPE_METRICS: usize = 32;
/// Default and largest series state per job.
const DEFAULT_MAX_SERIES: usize = 10_000;
const MAX_MAX_SERIES: usize = 1_000_000;

/// Longest `group`, `shard` or `key` template, bytes.
pub const MAX_TEMPLATE_BYTES: usize = 512;

/// One piece of a [`LabelTemplate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelPiece {
    /// Literal text.
    Text(String),
    /// The value of the series' label of this name.
    Label(String),
}

/// A field's value over a series' labels: literal text and `{label}`s (`{proxy}/{server}`);
/// `{{` and `}}` are literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelTemplate {
    /// The pieces in order.
    pub pieces: Vec<LabelPiece>,
}

impl LabelTemplate {
    /// The template that is one label's value.
    pub fn label(name: &str) -> LabelTemplate {
        LabelTemplate {
            pieces: vec![LabelPiece::Label(name.to_owned())],
        }
    }

    /// The template that is this text.
    pub fn literal(text: &str) -> LabelTemplate {
        LabelTemplate {
            pieces: vec![LabelPiece::Text(text.to_owned())],
        }
    }

    /// Parses `text`; an error says what is wrong.
    pub fn parse(text: &str) -> Result<LabelTemplate, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find(['{', '}']) {
            literal.push_str(&rest[..at]);
            let brace = &rest[at..at + 1];
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix(brace) {
                literal.push_str(brace);
                rest = tail;
                continue;
            }
            if brace == "}" {
                return Err(format!(
                    "`}}` without `{{` in `{text}`: write `}}}}` for a literal brace"
                ));
            }
            let close = after
                .find('}')
                .ok_or_else(|| format!("`{{` without a closing `}}` in `{text}`"))?;
            let name = &after[..close];
            if !valid_label_name(name) {
                return Err(format!(
                    "`{{{name}}}` in `{text}`: a label name ([a-zA-Z_][a-zA-Z0-9_]*) goes between \
                     the braces; write `{{{{` for a literal brace"
                ));
            }
            if !literal.is_empty() {
                pieces.push(LabelPiece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(LabelPiece::Label(name.to_owned()));
            rest = &after[close + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(LabelPiece::Text(literal));
        }
        Ok(LabelTemplate { pieces })
    }

    /// True when the template names at least one label.
    pub fn has_labels(&self) -> bool {
        self.pieces
            .iter()
            .any(|p| matches!(p, LabelPiece::Label(_)))
    }

    /// The value for a series whose labels `get` reads; `None` when a label it names is
    /// absent.
    pub fn render<'a>(&'a self, get: impl Fn(&str) -> Option<&'a str>) -> Option<Cow<'a, str>> {
        let piece = |p: &'a LabelPiece| match p {
            LabelPiece::Text(t) => Some(t.as_str()),
            LabelPiece::Label(name) => get(name),
        };
        match self.pieces.as_slice() {
            [] => Some(Cow::Borrowed("")),
            [one] => piece(one).map(Cow::Borrowed),
            many => {
                let mut out = String::new();
                for p in many {
                    out.push_str(piece(p)?);
                }
                Some(Cow::Owned(out))
            }
        }
    }
}

/// What a field is when its template names a label the series lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The series is skipped and counted (`no_group`, `no_shard`, `no_key`).
    Skip,
    /// This value (`group_label` with `group` or the job name).
    Fallback(String),
    /// No value: the observation has no key (`key_label`).
    Absent,
}

/// Where a scrape job takes one field of its observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSource {
    /// The value over the series' labels.
    pub template: LabelTemplate,
    /// When a label it names is absent.
    pub missing: Missing,
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
    pub group: FieldSource,
    /// The shard; a series without a label it names is skipped.
    pub shard: FieldSource,
    /// The key, if any.
    pub key: Option<FieldSource>,
    /// The label naming the outcome.
    pub outcome_label: Option<String>,
    /// How the outcome label's value becomes an outcome class.
    pub outcomes: OutcomeTable,
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
    outcome::check_regex_total(c, "scrape", jobs.iter().map(|j| &j.outcomes));
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
    let fields = fields(c, f, &name, &r);
    let outcomes = outcome::validate(c, &format!("{f}.outcomes"), r.outcomes.clone());
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
    let [outcome_label, cache_label] = labels;
    let (group, shard, key) = fields?;
    Some(ScrapeJob {
        name,
        url: url?,
        interval,
        timeout,
        metrics,
        group,
        shard,
        key,
        outcome_label,
        outcomes,
        cache_label,
        bearer_token,
        max_series,
    })
}

/// The group, shard and key: each from its template or its `_label` shorthand, never both.
fn fields(
    c: &mut Check<'_>,
    f: &str,
    job: &str,
    r: &RawScrapeJob,
) -> Option<(FieldSource, FieldSource, Option<FieldSource>)> {
    let before = c.found();
    let label = |c: &mut Check<'_>, field: &str, v: &Option<String>| -> Option<String> {
        let l = v.as_ref()?;
        if !valid_label_name(l) {
            c.fail(
                &format!("{f}.{field}"),
                format!("`{l}` is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"),
            );
        }
        Some(l.clone())
    };
    let template = |c: &mut Check<'_>, field: &str, v: &Option<String>| {
        let text = v.as_ref()?;
        let parsed = if text.len() > MAX_TEMPLATE_BYTES {
            Err(format!("at most {MAX_TEMPLATE_BYTES} bytes"))
        } else {
            LabelTemplate::parse(text)
        };
        parsed
            .map_err(|why| c.fail(&format!("{f}.{field}"), why))
            .ok()
    };
    let both = |c: &mut Check<'_>, field: &str| {
        c.fail(
            &format!("{f}.{field}_label"),
            format!(
                "set `{field}` (a template such as \"{{label}}\") or `{field}_label` (a label \
                 name), not both"
            ),
        );
    };
    let group_label = label(c, "group_label", &r.group_label);
    let shard_label = label(c, "shard_label", &r.shard_label);
    let key_label = label(c, "key_label", &r.key_label);
    let group_template = template(c, "group", &r.group);
    if let Some(t) = &group_template
        && !t.has_labels()
    {
        let name = t.render(|_| None).unwrap_or_default();
        if name.is_empty() || name.len() > skewwatch_detectors::observation::MAX_NAME_BYTES {
            c.fail(&format!("{f}.group"), "a group name is 1 to 128 bytes");
        }
    }
    let shard_template = template(c, "shard", &r.shard);
    let key_template = template(c, "key", &r.key);

    // A literal `group` with `group_label` is the fallback when the label is absent, as it
    // always was; a `group` template over labels and `group_label` would be two answers.
    let group = match (group_template, group_label) {
        (Some(t), Some(_)) if t.has_labels() => {
            both(c, "group");
            None
        }
        (t, Some(l)) => {
            let fallback = match t.as_ref().map(|t| t.render(|_| None)) {
                Some(Some(name)) => name.into_owned(),
                _ => job.to_owned(),
            };
            Some(FieldSource {
                template: LabelTemplate::label(&l),
                missing: Missing::Fallback(fallback),
            })
        }
        (t, None) => Some(FieldSource {
            template: t.unwrap_or_else(|| LabelTemplate::literal(job)),
            missing: Missing::Skip,
        }),
    };
    let shard = match (shard_template, shard_label) {
        (Some(_), Some(_)) => {
            both(c, "shard");
            None
        }
        (Some(t), None) => Some(t),
        (None, l) => Some(LabelTemplate::label(l.as_deref().unwrap_or("shard"))),
    }
    .map(|template| FieldSource {
        template,
        missing: Missing::Skip,
    });
    let key = match (key_template, key_label) {
        (Some(_), Some(_)) => {
            both(c, "key");
            None
        }
        (Some(t), None) => Some(Some(FieldSource {
            template: t,
            missing: Missing::Skip,
        })),
        (None, Some(l)) => Some(Some(FieldSource {
            template: LabelTemplate::label(&l),
            missing: Missing::Absent,
        })),
        (None, None) => Some(None),
    };
    if c.found() > before {
        return None;
    }
    Some((group?, shard?, key?))
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

/// The outcome and cache label names, each a valid Prometheus label name when set.
fn labels(c: &mut Check<'_>, f: &str, r: &RawScrapeJob) -> [Option<String>; 2] {
    let labels = [
        ("outcome_label", r.outcome_label.clone()),
        ("cache_label", r.cache_label.clone()),
    ];
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
        assert_eq!(job.group.template, super::LabelTemplate::literal("db"));
        assert_eq!(job.shard.template, super::LabelTemplate::label("shard"));
        assert_eq!(job.interval, std::time::Duration::from_secs(10));
        assert_eq!(job.timeout, std::time::Duration::from_secs(5));
        assert_eq!(job.max_series, 10_000);
        assert!(job.bearer_token.unwrap().matches(b"t0k"));
    }

    #[test]
    fn templates_parse_labels_and_literal_braces() {
        use super::{LabelPiece, LabelTemplate};
        let t = LabelTemplate::parse("{proxy}/{server}:{{x}}").unwrap();
        assert_eq!(
            t.pieces,
            vec![
                LabelPiece::Label("proxy".into()),
                LabelPiece::Text("/".into()),
                LabelPiece::Label("server".into()),
                LabelPiece::Text(":{x}".into()),
            ]
        );
        for bad in ["{", "{9x}", "a}b", "{}", "{a b}"] {
            assert!(LabelTemplate::parse(bad).is_err(), "{bad}");
        }
        let labels = |n: &str| match n {
            "proxy" => Some("be"),
            "server" => Some("s1"),
            _ => None,
        };
        assert_eq!(t.render(labels).as_deref(), Some("be/s1:{x}"));
        assert_eq!(LabelTemplate::parse("{x}").unwrap().render(labels), None);
    }

    #[test]
    fn a_field_and_its_label_shorthand_are_refused_together() {
        let yaml = r#"
scrape:
  - name: lb
    url: "http://t/metrics"
    metrics: [a_total]
    group: "{proxy}"
    group_label: proxy
    shard: "{proxy}/{server}"
    shard_label: server
    key: "{table}"
    key_label: table
  - name: ok
    url: "http://t/metrics"
    metrics: [a_total]
    group: orders
    group_label: proxy
    shard: "{x"
"#;
        assert_eq!(
            fields(yaml),
            [
                "scrape[0].group_label",
                "scrape[0].shard_label",
                "scrape[0].key_label",
                "scrape[1].shard",
            ]
        );
    }

    #[test]
    fn templates_and_shorthands_say_what_a_missing_label_does() {
        use super::{LabelTemplate, Missing};
        let job = |extra: &str| {
            let yaml = format!(
                "scrape:\n  - name: lb\n    url: http://t/m\n    metrics: [a_total]\n{extra}"
            );
            Config::from_yaml(&yaml, "t")
                .unwrap()
                .startup
                .scrape
                .remove(0)
        };
        let j = job("    group: \"{proxy}\"\n    shard: \"{proxy}/{server}\"\n    key: \"{t}\"\n");
        assert_eq!(j.group.missing, Missing::Skip);
        assert_eq!(
            j.shard.template,
            LabelTemplate::parse("{proxy}/{server}").unwrap()
        );
        assert_eq!(j.key.unwrap().missing, Missing::Skip);
        // A literal group with group_label is the fallback, as before templates.
        let j = job("    group: orders\n    group_label: g\n    key_label: t\n");
        assert_eq!(j.group.template, LabelTemplate::label("g"));
        assert_eq!(j.group.missing, Missing::Fallback("orders".into()));
        assert_eq!(j.key.unwrap().missing, Missing::Absent);
        let j = job("    group_label: g\n");
        assert_eq!(j.group.missing, Missing::Fallback("lb".into()));
    }

    #[test]
    fn outcome_tables_are_validated_and_their_regexes_capped_over_the_jobs() {
        let yaml = r#"
scrape:
  - name: lb
    url: "http://t/metrics"
    metrics: [a_total]
    outcome_label: code
    outcomes:
      - match: "4xx"
        outcome: not_found
      - regex: "5\\d\\d|5xx"
        outcome: error
      - match: x
        outcome: fine
"#;
        assert_eq!(fields(yaml), ["scrape[0].outcomes[2].outcome"]);
        let rows: String = (0..9)
            .map(|i| format!("      - regex: \"r{i}\"\n        outcome: ok\n"))
            .collect();
        let jobs: String = (0..2)
            .map(|j| {
                format!(
                    "  - name: j{j}\n    url: http://t/m\n    metrics: [a]\n    outcomes:\n{rows}"
                )
            })
            .collect();
        assert_eq!(fields(&format!("scrape:\n{jobs}")), ["scrape"]);
    }
}
