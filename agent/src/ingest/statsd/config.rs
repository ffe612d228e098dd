//! The validated `statsd:` section ([`StatsdConfig`], from [`validate`]): the receive buffer,
//! and `statsd.mappings`, how StatsD metrics a service already sends, under its own names and
//! tags, become observations. The compiled form of a mapping lives here; applying it to a line
//! is [`super::mapping`].
//!
//! A mapping matches a metric name with a glob (`*` captures one or more characters other
//! than `.`, as in statsd_exporter's globs) or an anchored regex, and a set of StatsD types.
//! Each observation field is a [`Template`]: literal text with `$1`..`$9` (or `${1}`) for
//! captures and `${tag:NAME}` for the value of a DogStatsD tag. The first mapping that matches
//! wins.
//!
//! Bounds: at most [`MAX_MAPPINGS`] mappings, [`MAX_CAPTURES`] captures each, at most
//! [`MAX_REGEX_MAPPINGS`] of them regexes, each compiled within [`MAX_REGEX_BYTES`] and with a
//! match cache of at most as much, so the regexes hold at most 8 MiB whatever the
//! configuration says. Unicode classes are large: `\w+` alone compiles to about 55 KiB, while
//! `[A-Za-z0-9_]+` takes a few hundred bytes.

use regex::{Regex, RegexBuilder};
use skewwatch_detectors::observation::CacheResult;

use crate::config::raw::{RawMapping, RawStatsd};
use crate::config::validate::Check;
use crate::ingest::outcome::{self, OutcomeTable};

/// Most mappings in `statsd.mappings`.
pub const MAX_MAPPINGS: usize = 128;
/// Most captures a pattern may have (`$1`..`$9`).
pub const MAX_CAPTURES: usize = 9;
/// Most mappings that are regexes.
pub const MAX_REGEX_MAPPINGS: usize = 16;
/// Compiled size limit of one regex, bytes (the `regex` crate's `size_limit`), and the limit
/// of its lazy-DFA match cache (`dfa_size_limit`).
pub const MAX_REGEX_BYTES: usize = 256 << 10;
/// Longest pattern or template, bytes.
pub const MAX_PATTERN_BYTES: usize = 512;
/// Default StatsD socket receive buffer.
const DEFAULT_RECEIVE_BUFFER_BYTES: usize = 32 << 20;

crate::config_part! {
    /// The validated `statsd:` section, fixed at start-up: the socket is bound and the receiver
    /// thread started with it. Each field declares the path it is read from, so a reload
    /// reports a change to it by name ([`crate::config::part`]).
    #[derive(Debug, Clone, PartialEq)]
    pub struct StatsdConfig {
        /// SO_RCVBUF for the StatsD socket.
        pub receive_buffer_bytes: usize => "statsd.receive_buffer_bytes",
        /// StatsD metrics of other names turned into observations, first match wins.
        pub mappings: Vec<StatsdMapping> => "statsd.mappings",
    }
}

/// StatsD types a mapping takes, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Types(u8);

impl Types {
    /// Timer `ms`.
    pub const MS: Types = Types(1);
    /// Histogram `h`.
    pub const H: Types = Types(2);
    /// Distribution `d`.
    pub const D: Types = Types(4);
    /// Counter `c`.
    pub const C: Types = Types(8);
    /// Every type a mapping can turn into observations.
    pub const ALL: Types = Types(15);

    /// The bit of a StatsD type letter, if a mapping can take that type.
    pub fn of(letter: &str) -> Option<Types> {
        match letter {
            "ms" => Some(Types::MS),
            "h" => Some(Types::H),
            "d" => Some(Types::D),
            "c" => Some(Types::C),
            _ => None,
        }
    }

    /// True when `other`'s bits are all in `self`.
    pub fn contains(self, other: Types) -> bool {
        self.0 & other.0 == other.0
    }

    fn union(self, other: Types) -> Types {
        Types(self.0 | other.0)
    }
}

/// How a mapping matches names.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// The literal pieces between the `*`s (one more piece than stars).
    Glob(Vec<String>),
    /// An anchored regex.
    Regex(Regex),
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Matcher) -> bool {
        match (self, other) {
            (Matcher::Glob(a), Matcher::Glob(b)) => a == b,
            (Matcher::Regex(a), Matcher::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Matcher {
    /// Captures the pattern defines.
    pub fn captures(&self) -> usize {
        match self {
            Matcher::Glob(pieces) => pieces.len() - 1,
            Matcher::Regex(r) => r.captures_len() - 1,
        }
    }
}

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text.
    Text(String),
    /// Capture `n` (1-based).
    Capture(usize),
    /// The value of the DogStatsD tag of this name.
    Tag(String),
}

/// A field's value: literal text, captures and tag values, concatenated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The pieces in order.
    pub pieces: Vec<Piece>,
}

impl Template {
    /// Parses `$1`, `${1}`, `${tag:NAME}` and `$$` (a literal `$`); `captures` is how many the
    /// pattern defines.
    pub fn parse(text: &str, captures: usize) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (piece, used) = if let Some(tail) = after.strip_prefix('$') {
                literal.push('$');
                rest = tail;
                continue;
            } else if let Some(tail) = after.strip_prefix('{') {
                let close = tail
                    .find('}')
                    .ok_or_else(|| format!("`${{` without a closing `}}` in `{text}`"))?;
                let inner = &tail[..close];
                let piece = match inner.strip_prefix("tag:") {
                    Some("") => return Err(format!("`${{tag:}}` names no tag in `{text}`")),
                    Some(name) => Piece::Tag(name.to_owned()),
                    None => Piece::Capture(capture_number(inner, captures, text)?),
                };
                (piece, close + 2)
            } else {
                let digit = after.get(..1).unwrap_or_default();
                (Piece::Capture(capture_number(digit, captures, text)?), 1)
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
            rest = &after[used..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// The tag name when the template is exactly one tag: such a field is absent when the tag
    /// is.
    pub fn only_tag(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Tag(name)] => Some(name),
            _ => None,
        }
    }

    /// The text when the template is a literal.
    pub fn literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Text(t)] => Some(t),
            [] => Some(""),
            _ => None,
        }
    }
}

fn capture_number(s: &str, captures: usize, text: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=captures).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "`${n}` in `{text}`: the pattern has {captures} capture(s)"
        )),
        Err(_) => Err(format!(
            "`$` in `{text}` must start `$1`..`$9`, `${{1}}`, `${{tag:NAME}}` or `$$`"
        )),
    }
}

/// A validated mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsdMapping {
    /// The pattern as written (for logs and docs).
    pub pattern: String,
    /// The compiled pattern.
    pub matcher: Matcher,
    /// The StatsD types it takes.
    pub types: Types,
    /// The group.
    pub group: Template,
    /// The shard.
    pub shard: Template,
    /// The key, if any.
    pub key: Option<Template>,
    /// The outcome, if any (default `ok`).
    pub outcome: Option<Template>,
    /// The cache result, if any.
    pub cache: Option<Template>,
    /// The look-aside cache's key, if any (hashed once rendered).
    pub cache_key: Option<Template>,
    /// How the rendered outcome becomes an outcome class.
    pub outcomes: OutcomeTable,
}

/// Compiles a glob: `*` may not follow `*` (two adjacent captures would split a component
/// arbitrarily).
pub fn compile_glob(pattern: &str) -> Result<Matcher, String> {
    if pattern.contains("**") {
        return Err("`**` is ambiguous: separate the captures with a literal".into());
    }
    let pieces: Vec<String> = pattern.split('*').map(str::to_owned).collect();
    if pieces.len() - 1 > MAX_CAPTURES {
        return Err(format!("at most {MAX_CAPTURES} `*` captures"));
    }
    Ok(Matcher::Glob(pieces))
}

/// Compiles an anchored regex within [`MAX_REGEX_BYTES`].
pub fn compile_regex(pattern: &str) -> Result<Matcher, String> {
    let regex = RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(MAX_REGEX_BYTES)
        .dfa_size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| format!("not a valid regex within {MAX_REGEX_BYTES} bytes compiled: {e}"))?;
    if regex.captures_len() - 1 > MAX_CAPTURES {
        return Err(format!("at most {MAX_CAPTURES} capture groups"));
    }
    Ok(Matcher::Regex(regex))
}

/// The union of the type letters; an error names the first unknown one.
pub fn parse_types(letters: &[String]) -> Result<Types, String> {
    if letters.is_empty() {
        return Err("list at least one of ms, h, d, c".into());
    }
    letters.iter().try_fold(Types(0), |acc, l| {
        Types::of(l).map(|t| acc.union(t)).ok_or_else(|| {
            format!("`{l}` is not a type a mapping takes: use ms, h, d (latency) or c (count)")
        })
    })
}

/// Validates the `statsd:` section: every mapping compiled, every problem pushed to `c`
/// with its field (`statsd.mappings[2].shard`).
pub fn validate(c: &mut Check<'_>, raw: RawStatsd) -> StatsdConfig {
    let mappings = mappings(c, raw.mappings.unwrap_or_default());
    let receive_buffer_bytes = c.range(
        "statsd.receive_buffer_bytes",
        raw.receive_buffer_bytes,
        DEFAULT_RECEIVE_BUFFER_BYTES,
        4096,
        1 << 30,
    );
    StatsdConfig {
        receive_buffer_bytes,
        mappings,
    }
}

/// `statsd.mappings`: every mapping compiled, every problem named.
fn mappings(c: &mut Check<'_>, raw: Vec<RawMapping>) -> Vec<StatsdMapping> {
    if raw.len() > MAX_MAPPINGS {
        c.fail(
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
        c.fail(
            "statsd.mappings",
            format!(
                "{regexes} regex mappings: at most {MAX_REGEX_MAPPINGS}; use globs where they do"
            ),
        );
        return Vec::new();
    }
    let mappings: Vec<StatsdMapping> = raw
        .into_iter()
        .enumerate()
        .filter_map(|(i, m)| mapping(c, &format!("statsd.mappings[{i}]"), m))
        .collect();
    outcome::check_regex_total(c, "statsd.mappings", mappings.iter().map(|m| &m.outcomes));
    mappings
}

fn mapping(c: &mut Check<'_>, f: &str, m: RawMapping) -> Option<StatsdMapping> {
    let before = c.found();
    let pattern = m.pattern.unwrap_or_default();
    let matcher = if pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES {
        c.fail(
            &format!("{f}.match"),
            format!("required: a metric name pattern of 1 to {MAX_PATTERN_BYTES} bytes"),
        );
        None
    } else {
        let compiled = match m.match_type.as_deref().unwrap_or("glob") {
            "glob" => compile_glob(&pattern),
            "regex" => compile_regex(&pattern),
            other => Err(format!("`{other}` is not a match_type: use glob or regex")),
        };
        compiled
            .map_err(|why| c.fail(&format!("{f}.match"), why))
            .ok()
    };
    let captures = matcher.as_ref().map_or(MAX_CAPTURES, |m| m.captures());
    let types = match m.types {
        None => Types::ALL,
        Some(letters) => parse_types(&letters)
            .map_err(|why| c.fail(&format!("{f}.types"), why))
            .unwrap_or(Types::ALL),
    };
    let group = template(c, f, "group", m.group, captures, true);
    let shard = template(c, f, "shard", m.shard, captures, true);
    let key = template(c, f, "key", m.key, captures, false);
    let outcome = template(c, f, "outcome", m.outcome, captures, false);
    let cache = template(c, f, "cache", m.cache, captures, false);
    let cache_key = template(c, f, "cache_key", m.cache_key, captures, false);
    let outcomes = outcome::validate(c, &format!("{f}.outcomes"), m.outcomes);
    literal_values(c, f, outcome.as_ref(), &outcomes, cache.as_ref());
    if c.found() > before {
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
        cache_key,
        outcomes,
    })
}

fn template(
    c: &mut Check<'_>,
    f: &str,
    name: &str,
    text: Option<String>,
    captures: usize,
    required: bool,
) -> Option<Template> {
    let field = format!("{f}.{name}");
    let Some(text) = text else {
        if required {
            c.fail(
                &field,
                format!("required: e.g. `$1`, `${{tag:{name}}}` or a literal name"),
            );
        }
        return None;
    };
    if text.len() > MAX_PATTERN_BYTES {
        c.fail(&field, format!("at most {MAX_PATTERN_BYTES} bytes"));
        return None;
    }
    Template::parse(&text, captures)
        .map_err(|why| c.fail(&field, why))
        .ok()
}

/// A literal outcome or cache result must be one skewwatch recognizes (the outcome through
/// the mapping's table), or every line it maps would be rejected.
fn literal_values(
    c: &mut Check<'_>,
    f: &str,
    outcome: Option<&Template>,
    outcomes: &OutcomeTable,
    cache: Option<&Template>,
) {
    if let Some(o) = outcome.and_then(Template::literal)
        && outcomes.translate(o).is_none()
    {
        c.fail(
            &format!("{f}.outcome"),
            format!(
                "`{o}` is not an outcome: use ok, error, timeout, not_found, throttled or \
                 unavailable, a value of the built-in vocabulary (404, 5xx, NOT_FOUND; \
                 docs/ingest.md) or add an `outcomes` row for it"
            ),
        );
    }
    if let Some(result) = cache.and_then(Template::literal)
        && CacheResult::parse(result).is_none()
    {
        c.fail(
            &format!("{f}.cache"),
            format!("`{result}` is not hit or miss"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn templates_parse_captures_tags_and_literals() {
        let t = Template::parse("db-$1.${2}:${tag:shard}$$", 2).unwrap();
        assert_eq!(
            t.pieces,
            vec![
                Piece::Text("db-".into()),
                Piece::Capture(1),
                Piece::Text(".".into()),
                Piece::Capture(2),
                Piece::Text(":".into()),
                Piece::Tag("shard".into()),
                Piece::Text("$".into()),
            ]
        );
        assert_eq!(
            Template::parse("${tag:result}", 0).unwrap().only_tag(),
            Some("result")
        );
        assert_eq!(Template::parse("hit", 0).unwrap().literal(), Some("hit"));
        for bad in ["$3", "$0", "${x}", "${tag:}", "${1", "$a", "$"] {
            assert!(Template::parse(bad, 2).is_err(), "{bad}");
        }
    }

    #[test]
    fn patterns_are_bounded() {
        assert_eq!(compile_glob("db.*.query_time").unwrap().captures(), 1);
        assert!(compile_glob("a**b").is_err());
        assert!(compile_glob(&"*.".repeat(10)).is_err());
        assert_eq!(
            compile_regex(r"db\.(\w+)\.(get|set)").unwrap().captures(),
            2
        );
        assert!(compile_regex("(").is_err());
        // A pattern that compiles to far more than the limit is refused, not built.
        assert!(compile_regex(r"\w{100}").is_err());
        assert!(compile_regex(r"[A-Za-z0-9_]{100}").is_ok());
        assert_eq!(
            parse_types(&["ms".into(), "c".into()]).unwrap(),
            Types(Types::MS.0 | Types::C.0)
        );
        assert!(parse_types(&["g".into()]).is_err());
        assert!(parse_types(&[]).is_err());
    }

    #[test]
    fn every_mapping_problem_is_named_with_its_field() {
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
            ]
        );
    }

    #[test]
    fn mapping_counts_are_capped() {
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
    }
}
