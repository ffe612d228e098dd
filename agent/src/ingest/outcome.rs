//! Outcome translation, shared by the inputs that read another system's names for a request's
//! result: a `scrape:` job's outcome label and a StatsD mapping's outcome template give a value
//! such as `4xx`, `404` or `NOT_FOUND`, which becomes one of skewwatch's six outcome classes.
//!
//! An [`OutcomeTable`] is the optional `outcomes:` list of a job or a mapping: rows tried in
//! order, each an exact value (`match:`) or an anchored regex (`regex:`) and the outcome it
//! stands for; the first matching row wins. A value no row matches goes to the built-in
//! vocabulary ([`builtin`]), so the common exporters work without a table and a table only
//! lists what it changes. A value nothing recognizes is `None`: the caller rejects the
//! observation as `unknown_outcome`.
//!
//! Bounds: at most [`MAX_OUTCOME_ROWS`] rows per table, values and regexes of at most
//! [`MAX_OUTCOME_TEXT_BYTES`], each regex compiled within [`MAX_OUTCOME_REGEX_BYTES`] with a
//! match cache of at most as much; the sections that hold tables also cap their regex rows in
//! total ([`MAX_OUTCOME_REGEXES`]).

use regex::{Regex, RegexBuilder};
use skewwatch_detectors::observation::Outcome;

use crate::config::raw::RawOutcomeRow;
use crate::config::validate::Check;

/// Most rows in one `outcomes:` table.
pub const MAX_OUTCOME_ROWS: usize = 32;
/// Most regex rows over all the tables of one section (`statsd.mappings`, `scrape`).
pub const MAX_OUTCOME_REGEXES: usize = 16;
/// Compiled size limit of one row's regex, bytes, and the limit of its lazy-DFA match cache:
/// with [`MAX_OUTCOME_REGEXES`], at most 2 MiB per section (per thread that matches).
pub const MAX_OUTCOME_REGEX_BYTES: usize = 64 << 10;
/// Longest `match:` value or `regex:` pattern, bytes.
pub const MAX_OUTCOME_TEXT_BYTES: usize = 256;

/// How a row recognizes a value.
#[derive(Debug, Clone)]
pub enum RowMatch {
    /// The value equals this text.
    Exact(String),
    /// The value matches this regex, anchored at both ends.
    Regex(Regex),
}

impl PartialEq for RowMatch {
    fn eq(&self, other: &RowMatch) -> bool {
        match (self, other) {
            (RowMatch::Exact(a), RowMatch::Exact(b)) => a == b,
            (RowMatch::Regex(a), RowMatch::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// One row of an `outcomes:` table.
#[derive(Debug, Clone, PartialEq)]
pub struct OutcomeRow {
    /// What the row recognizes.
    pub matcher: RowMatch,
    /// The outcome of a value it recognizes.
    pub outcome: Outcome,
}

/// A job's or a mapping's `outcomes:` table, then the built-in vocabulary.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OutcomeTable {
    rows: Vec<OutcomeRow>,
}

impl OutcomeTable {
    /// A table of these rows (none: the built-in vocabulary alone).
    pub fn new(rows: Vec<OutcomeRow>) -> OutcomeTable {
        OutcomeTable { rows }
    }

    /// The outcome `value` stands for: the first matching row's, else the built-in
    /// vocabulary's; `None` when nothing recognizes it.
    pub fn translate(&self, value: &str) -> Option<Outcome> {
        self.rows
            .iter()
            .find(|row| match &row.matcher {
                RowMatch::Exact(text) => text == value,
                RowMatch::Regex(r) => r.is_match(value),
            })
            .map(|row| row.outcome)
            .or_else(|| builtin(value))
    }

    /// The rows, in order.
    pub fn rows(&self) -> &[OutcomeRow] {
        &self.rows
    }

    /// Rows that are regexes.
    pub fn regex_rows(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| matches!(r.matcher, RowMatch::Regex(_)))
            .count()
    }
}

/// The built-in vocabulary, what common exporters and clients call a request's result:
///
/// | value | outcome |
/// |---|---|
/// | skewwatch's names: `ok` `error` `timeout` `not_found` `throttled` `unavailable` | the same |
/// | HTTP status `100`..`399` | `ok` |
/// | `404` | `not_found` |
/// | `408`, `504` | `timeout` |
/// | `429` | `throttled` |
/// | `503` | `unavailable` |
/// | other `400`..`599` | `error` |
/// | status classes `1xx` `2xx` `3xx` (any case) | `ok` |
/// | `4xx` `5xx`, HAProxy's `other` | `error` |
/// | gRPC `OK` / `0` | `ok` |
/// | `NOT_FOUND` / `5` | `not_found` |
/// | `DEADLINE_EXCEEDED` / `4` | `timeout` |
/// | `RESOURCE_EXHAUSTED` / `8` | `throttled` |
/// | `UNAVAILABLE` / `14` | `unavailable` |
/// | the other gRPC names and `1`..`16` | `error` |
///
/// Anything else (`600`, `6xx`, `17`, `Ok`, an empty value) is `None`.
pub fn builtin(value: &str) -> Option<Outcome> {
    if let Some(o) = Outcome::parse(value) {
        return Some(o);
    }
    match value.as_bytes() {
        [class @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => Some(if *class <= b'3' {
            Outcome::Ok
        } else {
            Outcome::Error
        }),
        [a, b, c] if [a, b, c].iter().all(|d| d.is_ascii_digit()) => {
            http_status(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        [a] if a.is_ascii_digit() => grpc_code(a - b'0'),
        [a @ b'1'..=b'9', b] if b.is_ascii_digit() => grpc_code((a - b'0') * 10 + (b - b'0')),
        _ => grpc_name(value),
    }
}

/// An HTTP status code's outcome; `None` outside 100..=599.
fn http_status(code: u16) -> Option<Outcome> {
    Some(match code {
        100..=399 => Outcome::Ok,
        404 => Outcome::NotFound,
        408 | 504 => Outcome::Timeout,
        429 => Outcome::Throttled,
        503 => Outcome::Unavailable,
        400..=599 => Outcome::Error,
        _ => return None,
    })
}

/// A gRPC status code number's outcome; `None` past 16 (`UNAUTHENTICATED`).
fn grpc_code(code: u8) -> Option<Outcome> {
    Some(match code {
        0 => Outcome::Ok,
        4 => Outcome::Timeout,
        5 => Outcome::NotFound,
        8 => Outcome::Throttled,
        14 => Outcome::Unavailable,
        1..=16 => Outcome::Error,
        _ => return None,
    })
}

/// A gRPC status code name's outcome (as the gRPC specification spells them), or HAProxy's
/// `other` status class.
fn grpc_name(name: &str) -> Option<Outcome> {
    Some(match name {
        "OK" => Outcome::Ok,
        "DEADLINE_EXCEEDED" => Outcome::Timeout,
        "NOT_FOUND" => Outcome::NotFound,
        "RESOURCE_EXHAUSTED" => Outcome::Throttled,
        "UNAVAILABLE" => Outcome::Unavailable,
        "CANCELLED"
        | "UNKNOWN"
        | "INVALID_ARGUMENT"
        | "ALREADY_EXISTS"
        | "PERMISSION_DENIED"
        | "FAILED_PRECONDITION"
        | "ABORTED"
        | "OUT_OF_RANGE"
        | "UNIMPLEMENTED"
        | "INTERNAL"
        | "DATA_LOSS"
        | "UNAUTHENTICATED"
        | "other" => Outcome::Error,
        _ => return None,
    })
}

/// Validates an `outcomes:` table at `field` (`scrape[0].outcomes`), every problem pushed to
/// `c` with its row (`scrape[0].outcomes[2].regex`).
pub fn validate(c: &mut Check<'_>, field: &str, raw: Option<Vec<RawOutcomeRow>>) -> OutcomeTable {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_OUTCOME_ROWS {
        c.fail(
            field,
            format!("{} rows: at most {MAX_OUTCOME_ROWS}", raw.len()),
        );
        return OutcomeTable::default();
    }
    let rows = raw
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| row(c, &format!("{field}[{i}]"), r))
        .collect();
    OutcomeTable { rows }
}

fn row(c: &mut Check<'_>, f: &str, r: RawOutcomeRow) -> Option<OutcomeRow> {
    let outcome = match r.outcome.as_deref().map(|o| (o, Outcome::parse(o))) {
        Some((_, Some(o))) => Some(o),
        Some((o, None)) => {
            c.fail(
                &format!("{f}.outcome"),
                format!(
                    "`{o}` is not an outcome: use ok, error, timeout, not_found, throttled or \
                     unavailable"
                ),
            );
            None
        }
        None => {
            c.fail(&format!("{f}.outcome"), "required: the outcome of the row");
            None
        }
    };
    let matcher = match (r.exact, r.regex) {
        (Some(_), Some(_)) => {
            c.fail(f, "set `match` (an exact value) or `regex`, not both");
            None
        }
        (None, None) => {
            c.fail(f, "required: `match` (an exact value) or `regex`");
            None
        }
        (Some(text), None) if text.len() > MAX_OUTCOME_TEXT_BYTES => {
            c.fail(
                &format!("{f}.match"),
                format!("at most {MAX_OUTCOME_TEXT_BYTES} bytes"),
            );
            None
        }
        (Some(text), None) => Some(RowMatch::Exact(text)),
        (None, Some(pattern)) => compile(&pattern)
            .map_err(|why| c.fail(&format!("{f}.regex"), why))
            .ok(),
    };
    Some(OutcomeRow {
        matcher: matcher?,
        outcome: outcome?,
    })
}

/// Compiles a row's regex, anchored, within [`MAX_OUTCOME_REGEX_BYTES`].
fn compile(pattern: &str) -> Result<RowMatch, String> {
    if pattern.len() > MAX_OUTCOME_TEXT_BYTES {
        return Err(format!("at most {MAX_OUTCOME_TEXT_BYTES} bytes"));
    }
    RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(MAX_OUTCOME_REGEX_BYTES)
        .dfa_size_limit(MAX_OUTCOME_REGEX_BYTES)
        .build()
        .map(RowMatch::Regex)
        .map_err(|e| {
            format!("not a valid regex within {MAX_OUTCOME_REGEX_BYTES} bytes compiled: {e}")
        })
}

/// Fails `field` when the tables hold more than [`MAX_OUTCOME_REGEXES`] regex rows in all.
pub fn check_regex_total<'t>(
    c: &mut Check<'_>,
    field: &str,
    tables: impl IntoIterator<Item = &'t OutcomeTable>,
) {
    let total: usize = tables.into_iter().map(OutcomeTable::regex_rows).sum();
    if total > MAX_OUTCOME_REGEXES {
        c.fail(
            field,
            format!(
                "{total} `outcomes` regex rows in all: at most {MAX_OUTCOME_REGEXES}; use `match` \
                 rows or one regex with alternatives"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_vocabulary_reads_http_classes_and_grpc() {
        use Outcome::*;
        for (value, want) in [
            ("ok", Ok),
            ("not_found", NotFound),
            ("unavailable", Unavailable),
            ("200", Ok),
            ("101", Ok),
            ("304", Ok),
            ("400", Error),
            ("404", NotFound),
            ("408", Timeout),
            ("429", Throttled),
            ("500", Error),
            ("503", Unavailable),
            ("504", Timeout),
            ("599", Error),
            ("1xx", Ok),
            ("2xx", Ok),
            ("3XX", Ok),
            ("4xx", Error),
            ("5xx", Error),
            ("other", Error),
            ("OK", Ok),
            ("0", Ok),
            ("NOT_FOUND", NotFound),
            ("5", NotFound),
            ("DEADLINE_EXCEEDED", Timeout),
            ("4", Timeout),
            ("RESOURCE_EXHAUSTED", Throttled),
            ("8", Throttled),
            ("UNAVAILABLE", Unavailable),
            ("14", Unavailable),
            ("INTERNAL", Error),
            ("13", Error),
            ("16", Error),
        ] {
            assert_eq!(builtin(value), Some(want), "{value}");
        }
        for value in [
            "", "600", "099", "6xx", "0xx", "17", "01", "Ok", "weird", "2xxx", "20",
        ] {
            // "20" is no gRPC code (they end at 16) and no HTTP status.
            assert_eq!(builtin(value), None, "{value}");
        }
    }

    fn table(yaml: &str) -> Result<OutcomeTable, Vec<String>> {
        let raw: Vec<RawOutcomeRow> = serde_saphyr::from_str(yaml).unwrap();
        let mut c = Check::new(&|_| None);
        let t = validate(&mut c, "t", Some(raw));
        let fields: Vec<String> = c.into_problems().into_iter().map(|p| p.field).collect();
        if fields.is_empty() {
            Ok(t)
        } else {
            Err(fields)
        }
    }

    #[test]
    fn the_first_matching_row_wins_then_the_builtin_vocabulary() {
        let t = table(
            "- match: \"4xx\"\n  outcome: not_found\n\
             - regex: \"5\\\\d\\\\d|5xx\"\n  outcome: unavailable\n\
             - regex: \"5.*\"\n  outcome: timeout\n",
        )
        .unwrap();
        assert_eq!(t.translate("4xx"), Some(Outcome::NotFound));
        assert_eq!(t.translate("502"), Some(Outcome::Unavailable));
        assert_eq!(t.translate("5xx"), Some(Outcome::Unavailable));
        // Anchored: `5\d\d` does not take `5000`, the next row does.
        assert_eq!(t.translate("5000"), Some(Outcome::Timeout));
        // Not in the table: the vocabulary.
        assert_eq!(t.translate("2xx"), Some(Outcome::Ok));
        assert_eq!(t.translate("404"), Some(Outcome::NotFound));
        assert_eq!(t.translate("weird"), None);
        assert_eq!(t.regex_rows(), 2);
    }

    #[test]
    fn every_row_problem_is_named_with_its_field() {
        let err = table(
            "- match: a\n  regex: b\n  outcome: ok\n\
             - outcome: ok\n\
             - match: a\n  outcome: fine\n\
             - regex: \"(\"\n  outcome: error\n\
             - match: a\n",
        )
        .unwrap_err();
        assert_eq!(
            err,
            ["t[0]", "t[1]", "t[2].outcome", "t[3].regex", "t[4].outcome"]
        );
        let many: String = (0..=MAX_OUTCOME_ROWS)
            .map(|i| format!("- match: v{i}\n  outcome: ok\n"))
            .collect();
        assert_eq!(table(&many).unwrap_err(), ["t"]);
        let big = format!("- regex: \"{}\"\n  outcome: ok\n", "\\\\w{100}".repeat(2));
        assert_eq!(table(&big).unwrap_err(), ["t[0].regex"]);
    }
}
