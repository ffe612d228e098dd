//! `statsd.mappings`: how StatsD metrics a service already sends, under its own names and
//! tags, become observations. The validated, compiled form lives here; applying it to a line
//! is [`crate::ingest::mapping`].
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
