//! StatsD mappings applied: a line under a service's own metric name (`db.orders.query_time`,
//! `cache.get` with tags) becomes an observation through the first matching
//! [`StatsdMapping`] (see [`super::config`] for the rules).
//!
//! Only lines the native parser does not take reach this module, so `skewwatch.request` lines
//! keep their fast path. A mapped line is slower than a native one (a pattern match, and the
//! templates rendered into scratch strings), but allocates nothing once the scratch has grown.

use std::sync::Arc;

use regex::CaptureLocations;
use skewwatch_detectors::observation::{
    Batch, CacheResult, ObservationRef, Outcome, RejectReason, hash_cache_key,
};

use super::config::{Matcher, Piece, StatsdMapping, Template, Types};
use super::lex::{METRIC_NAME, parse_f64, parse_u64, scale_by_rate};

/// What became of a line that was not a native one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapped {
    /// A mapping turned it into an observation, pushed to the batch.
    Accepted,
    /// A mapping matched, but the observation is invalid.
    Rejected(RejectReason),
    /// No mapping matched: another metric, skipped and counted, not an error.
    Unmapped,
}

/// The mappings and the scratch space applying them needs; one per receiver thread.
#[derive(Debug)]
pub struct Mapper {
    mappings: Arc<[StatsdMapping]>,
    /// Capture slots of each regex mapping (`None` for globs).
    locations: Vec<Option<CaptureLocations>>,
    /// Byte ranges of the captures of the mapping that matched; index 0 unused.
    captures: Vec<(usize, usize)>,
    /// Rendered group, shard, key, outcome, cache.
    fields: [String; 6],
}

impl Mapper {
    /// A mapper over `mappings` (possibly none).
    pub fn new(mappings: Arc<[StatsdMapping]>) -> Mapper {
        let locations = mappings
            .iter()
            .map(|m| match &m.matcher {
                Matcher::Regex(r) => Some(r.capture_locations()),
                Matcher::Glob(_) => None,
            })
            .collect();
        Mapper {
            mappings,
            locations,
            captures: Vec::with_capacity(10),
            fields: Default::default(),
        }
    }

    /// True when there are mappings: without any, other metrics stay rejected as
    /// `unsupported_metric`, as before mappings existed.
    pub fn is_active(&self) -> bool {
        !self.mappings.is_empty()
    }

    /// Maps one line (without its line end) into `out`.
    pub fn map_line(&mut self, line: &str, out: &mut Batch) -> Mapped {
        let Some(parts) = Line::split(line) else {
            return Mapped::Rejected(RejectReason::Malformed);
        };
        if parts.name == METRIC_NAME {
            return Mapped::Rejected(RejectReason::UnsupportedMetric);
        }
        let Some(kind) = Types::of(parts.kind) else {
            return Mapped::Unmapped;
        };
        let Some(index) = self.find(parts.name, kind) else {
            return Mapped::Unmapped;
        };
        if parts.value.contains(':') {
            return self.map_values(index, &parts, kind, out);
        }
        match self.observation(index, &parts, kind, parts.value) {
            Ok(obs) => {
                out.push(&obs);
                Mapped::Accepted
            }
            Err(reason) => Mapped::Rejected(reason),
        }
    }

    /// A DogStatsD 1.1 multi-value line of mapping `index`: one observation per value, and one
    /// bad value rejects the whole line, so every value is checked (the first pass) before any
    /// is pushed (the second). Out of line and cold, and with a single call of
    /// [`Mapper::observation`], so that a single-value line keeps its inlined copy.
    #[cold]
    #[inline(never)]
    fn map_values(
        &mut self,
        index: usize,
        parts: &Line<'_>,
        kind: Types,
        out: &mut Batch,
    ) -> Mapped {
        for push in [false, true] {
            for value in parts.value.split(':') {
                match (self.observation(index, parts, kind, value), push) {
                    (Err(reason), false) => return Mapped::Rejected(reason),
                    (Ok(obs), true) => out.push(&obs),
                    _ => {}
                }
            }
        }
        Mapped::Accepted
    }

    /// The first mapping that takes `name` of this type; its captures are in `self.captures`.
    fn find(&mut self, name: &str, kind: Types) -> Option<usize> {
        for (i, m) in self.mappings.iter().enumerate() {
            if !m.types.contains(kind) {
                continue;
            }
            self.captures.clear();
            self.captures.push((0, 0));
            let matched = match (&m.matcher, self.locations[i].as_mut()) {
                (Matcher::Glob(pieces), _) => glob(pieces, name, 0, &mut self.captures),
                (Matcher::Regex(r), Some(locs)) => {
                    let hit = r.captures_read(locs, name).is_some();
                    if hit {
                        for g in 1..locs.len() {
                            self.captures.push(locs.get(g).unwrap_or((0, 0)));
                        }
                    }
                    hit
                }
                (Matcher::Regex(_), None) => false,
            };
            if matched {
                return Some(i);
            }
        }
        None
    }

    /// Renders the fields of mapping `index` and builds the observation of `value` (the
    /// line's value, or one of a multi-value line's) from them. Always inlined: with the
    /// multi-value lines as a second caller the compiler kept it out of line, which cost every
    /// mapped line about 50 instructions (`scripts/instructions.sh statsd_mapped_lines`).
    #[inline(always)]
    fn observation<'s>(
        &'s mut self,
        index: usize,
        parts: &Line<'_>,
        kind: Types,
        value: &str,
    ) -> Result<ObservationRef<'s>, RejectReason> {
        let m = &self.mappings[index];
        let [group, shard, key, outcome, cache, cache_key] = &mut self.fields;
        let ctx = Context {
            name: parts.name,
            captures: &self.captures,
            tags: &parts.tags,
        };
        let has_group = ctx.render(&m.group, group);
        let has_shard = ctx.render(&m.shard, shard);
        let has_key = m.key.as_ref().is_some_and(|t| ctx.render(t, key));
        let has_outcome = m.outcome.as_ref().is_some_and(|t| ctx.render(t, outcome));
        let has_cache = m.cache.as_ref().is_some_and(|t| ctx.render(t, cache));
        let has_cache_key = m
            .cache_key
            .as_ref()
            .is_some_and(|t| ctx.render(t, cache_key));
        // Rendered: from here on the scratch strings are only read, for as long as the
        // observation borrows them.
        let (group, shard, key, outcome, cache): (
            &'s String,
            &'s String,
            &'s String,
            &'s String,
            &'s String,
        ) = (group, shard, key, outcome, cache);
        if !has_group {
            return Err(RejectReason::MissingGroup);
        }
        if !has_shard {
            return Err(RejectReason::MissingShard);
        }
        let (requests, latency_ms) = if kind == Types::C {
            (parse_u64(value).ok_or(RejectReason::BadCount)?, None)
        } else {
            let latency = parse_f64(value).ok_or(RejectReason::BadLatency)?;
            (1, Some(latency))
        };
        let count = match parts.rate {
            None => requests,
            Some(rate) => scale_by_rate(requests, rate)?,
        };
        let ts = match parts.ts {
            None => None,
            Some(t) => Some(parse_u64(t).ok_or(RejectReason::BadTimestamp)? as f64),
        };
        let outcome = match has_outcome {
            false => Outcome::Ok,
            true => m
                .outcomes
                .translate(outcome)
                .ok_or(RejectReason::UnknownOutcome)?,
        };
        let cache = match has_cache {
            false => None,
            true => Some(CacheResult::parse(cache).ok_or(RejectReason::BadCache)?),
        };
        let cache_key = match has_cache_key {
            false => None,
            true => Some(hash_cache_key(cache_key.as_bytes())?),
        };
        let obs = ObservationRef {
            ts,
            group,
            shard,
            key: has_key.then_some(key.as_str()),
            count,
            latency_ms,
            outcome,
            cache,
            cache_key,
        };
        obs.validate()?;
        Ok(obs)
    }
}

/// What the templates of a line read from.
struct Context<'a> {
    name: &'a str,
    captures: &'a [(usize, usize)],
    tags: &'a [&'a str],
}

impl Context<'_> {
    /// Renders `t` into `out`; false when the template is exactly one tag and the line does
    /// not carry it (the field is then absent, not empty).
    fn render(&self, t: &Template, out: &mut String) -> bool {
        out.clear();
        if let Some(name) = t.only_tag() {
            return match self.tag(name) {
                Some(v) => {
                    out.push_str(v);
                    true
                }
                None => false,
            };
        }
        for piece in &t.pieces {
            match piece {
                Piece::Text(s) => out.push_str(s),
                Piece::Capture(n) => {
                    let (a, b) = self.captures.get(*n).copied().unwrap_or((0, 0));
                    out.push_str(self.name.get(a..b).unwrap_or_default());
                }
                Piece::Tag(name) => out.push_str(self.tag(name).unwrap_or_default()),
            }
        }
        true
    }

    /// The value of tag `name` (everything after its first `:`); the last occurrence wins,
    /// as on the native path.
    fn tag(&self, name: &str) -> Option<&str> {
        let mut found = None;
        for section in self.tags {
            for tag in section.split(',') {
                if let Some(v) = tag.strip_prefix(name).and_then(|r| r.strip_prefix(':')) {
                    found = Some(v);
                }
            }
        }
        found
    }
}

/// Most `|#` tag sections read from one line; DogStatsD clients send one.
const MAX_TAG_SECTIONS: usize = 4;

/// A StatsD line split into its sections.
struct Line<'a> {
    name: &'a str,
    value: &'a str,
    kind: &'a str,
    rate: Option<&'a str>,
    ts: Option<&'a str>,
    tags: arrayvec_lite::Sections<'a>,
}

impl<'a> Line<'a> {
    /// `name:value|type[|@rate][|#tags][|T<ts>][|...]`; `None` when it is not that shape.
    fn split(line: &'a str) -> Option<Line<'a>> {
        let (name, rest) = line.split_once(':')?;
        let mut sections = rest.split('|');
        let value = sections.next()?;
        let kind = sections.next().filter(|k| !k.is_empty())?;
        let mut parts = Line {
            name,
            value,
            kind,
            rate: None,
            ts: None,
            tags: Default::default(),
        };
        for s in sections {
            match s.as_bytes().first()? {
                b'@' => parts.rate = Some(&s[1..]),
                b'#' => parts.tags.push(&s[1..]),
                b'T' => parts.ts = Some(&s[1..]),
                _ => {}
            }
        }
        (!name.is_empty()).then_some(parts)
    }
}

/// A fixed-size list of tag sections, so splitting a line allocates nothing.
mod arrayvec_lite {
    use super::MAX_TAG_SECTIONS;

    /// Up to [`MAX_TAG_SECTIONS`] sections; more are ignored.
    #[derive(Default)]
    pub struct Sections<'a> {
        items: [&'a str; MAX_TAG_SECTIONS],
        len: usize,
    }

    impl<'a> Sections<'a> {
        pub fn push(&mut self, s: &'a str) {
            if let Some(slot) = self.items.get_mut(self.len) {
                *slot = s;
                self.len += 1;
            }
        }
    }

    impl<'a> std::ops::Deref for Sections<'a> {
        type Target = [&'a str];
        fn deref(&self) -> &[&'a str] {
            &self.items[..self.len]
        }
    }
}

/// Matches `name[at..]` against the glob `pieces` (literals between `*`s); each `*` takes one
/// or more characters other than `.`, recorded in `captures`. Backtracks, which the bound on
/// captures keeps cheap.
fn glob(pieces: &[String], name: &str, at: usize, captures: &mut Vec<(usize, usize)>) -> bool {
    let Some((first, rest)) = pieces.split_first() else {
        return at == name.len();
    };
    let Some(tail) = name.get(at..) else {
        return false;
    };
    if !tail.starts_with(first.as_str()) {
        return false;
    }
    let start = at + first.len();
    if rest.is_empty() {
        return start == name.len();
    }
    // `start` begins a capture: try each end, shortest first, within one component.
    let bytes = name.as_bytes();
    let mut end = start;
    while end < bytes.len() && bytes[end] != b'.' {
        end += 1;
        captures.push((start, end));
        if glob(rest, name, end, captures) {
            return true;
        }
        captures.pop();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Config;
    use crate::ingest::statsd::parse_datagram_mapped;
    use skewwatch_detectors::observation::Rejections;

    fn mapper(yaml: &str) -> Mapper {
        let c = Config::from_yaml(yaml, "t").unwrap();
        Mapper::new(c.startup.statsd.mappings.into())
    }

    /// An accepted line's group, shard, key, count, latency, outcome and cache result.
    type Fields = (
        String,
        String,
        Option<String>,
        u64,
        Option<f64>,
        Outcome,
        Option<CacheResult>,
    );

    fn one(m: &mut Mapper, line: &str) -> Result<Fields, Mapped> {
        let mut b = Batch::default();
        match m.map_line(line, &mut b) {
            Mapped::Accepted => {
                let o = b.iter().next().unwrap();
                Ok((
                    o.group.to_owned(),
                    o.shard.to_owned(),
                    o.key.map(str::to_owned),
                    o.count,
                    o.latency_ms,
                    o.outcome,
                    o.cache,
                ))
            }
            other => Err(other),
        }
    }

    const YAML: &str = r#"
statsd:
  mappings:
    - match: "db.*.query_time"
      types: [ms, h, d]
      group: orders-db
      shard: "$1"
      key: "${tag:table}"
    - match: "cache.get"
      types: [c]
      group: "${tag:service}-cache"
      shard: "${tag:shard}"
      cache: "${tag:result}"
    - match: 'rpc\.(\w+)\.(\w+)\.(ok|error|timeout)'
      match_type: regex
      group: "rpc-$1"
      shard: "$2"
      outcome: "$3"
"#;

    #[test]
    fn glob_captures_one_component_and_tags_fill_fields() {
        let mut m = mapper(YAML);
        let (g, s, k, n, lat, o, c) = one(&mut m, "db.s7.query_time:12.5|ms|#table:users").unwrap();
        assert_eq!(
            (g.as_str(), s.as_str(), k.as_deref()),
            ("orders-db", "s7", Some("users"))
        );
        assert_eq!((n, lat, o, c), (1, Some(12.5), Outcome::Ok, None));
        // The key tag absent means no key, not the empty key.
        assert_eq!(one(&mut m, "db.s1.query_time:1|d").unwrap().2, None);
        assert_eq!(
            one(&mut m, "db.s1.query_time:1|d|#table:")
                .unwrap()
                .2
                .as_deref(),
            Some("")
        );
        // `*` does not cross a dot, and the type must be one the mapping takes.
        assert_eq!(one(&mut m, "db.a.b.query_time:1|ms"), Err(Mapped::Unmapped));
        assert_eq!(one(&mut m, "db.s1.query_time:1|c"), Err(Mapped::Unmapped));
        assert_eq!(one(&mut m, "db.s1.query_time:1|g"), Err(Mapped::Unmapped));
    }

    #[test]
    fn a_cache_key_template_is_rendered_then_hashed_and_an_empty_one_rejected() {
        let mut m = mapper(
            "statsd:\n  mappings:\n    - match: \"cache.get\"\n      group: kv\n      \
             shard: \"${tag:shard}\"\n      cache_key: \"user:${tag:user}\"\n",
        );
        let mut b = Batch::default();
        assert_eq!(
            m.map_line("cache.get:1|c|#shard:3,user:42", &mut b),
            Mapped::Accepted
        );
        let o = b.cache_keyed().next().unwrap();
        assert_eq!(o.cache_key, Some(hash_cache_key(b"user:42").unwrap()));
        let mut only_tag = mapper(
            "statsd:\n  mappings:\n    - match: \"cache.get\"\n      group: kv\n      \
             shard: s\n      cache_key: \"${tag:user}\"\n",
        );
        assert_eq!(
            only_tag.map_line("cache.get:1|c|#user:", &mut b),
            Mapped::Rejected(RejectReason::FieldLength)
        );
    }

    #[test]
    fn dogstatsd_tags_rate_and_cache_result() {
        let mut m = mapper(YAML);
        let (g, s, _, n, lat, _, c) = one(
            &mut m,
            "cache.get:1|c|@0.25|#service:meta,shard:3,result:miss",
        )
        .unwrap();
        assert_eq!(
            (g.as_str(), s.as_str(), n, lat),
            ("meta-cache", "3", 4, None)
        );
        assert_eq!(c, Some(CacheResult::Miss));
        assert_eq!(
            one(&mut m, "cache.get:1|c|#service:meta,result:hit"),
            Err(Mapped::Rejected(RejectReason::MissingShard))
        );
        assert_eq!(
            one(&mut m, "cache.get:1|c|#service:meta,shard:1,result:maybe"),
            Err(Mapped::Rejected(RejectReason::BadCache))
        );
    }

    #[test]
    fn regex_captures_and_outcome() {
        let mut m = mapper(YAML);
        let (g, s, _, _, lat, o, _) = one(&mut m, "rpc.users.eu1.timeout:30|ms").unwrap();
        assert_eq!(
            (g.as_str(), s.as_str(), lat, o),
            ("rpc-users", "eu1", Some(30.0), Outcome::Timeout)
        );
        assert_eq!(
            one(&mut m, "rpc.users.eu1.weird:30|ms"),
            Err(Mapped::Unmapped)
        );
    }

    #[test]
    fn an_outcome_table_translates_codes_and_the_vocabulary_covers_the_rest() {
        let mut m = mapper(
            r#"
statsd:
  mappings:
    - match: "http.*.requests"
      types: [c]
      group: web
      shard: "$1"
      outcome: "${tag:status}"
      outcomes:
        - match: "418"
          outcome: throttled
        - regex: "5\\d\\d|5xx"
          outcome: unavailable
"#,
        );
        let mut outcome = |line: &str| one(&mut m, line).map(|f| f.5);
        assert_eq!(
            outcome("http.a.requests:1|c|#status:418"),
            Ok(Outcome::Throttled)
        );
        assert_eq!(
            outcome("http.a.requests:1|c|#status:502"),
            Ok(Outcome::Unavailable)
        );
        assert_eq!(
            outcome("http.a.requests:1|c|#status:5xx"),
            Ok(Outcome::Unavailable)
        );
        // Not in the table: the built-in vocabulary.
        assert_eq!(
            outcome("http.a.requests:1|c|#status:404"),
            Ok(Outcome::NotFound)
        );
        assert_eq!(outcome("http.a.requests:1|c|#status:2xx"), Ok(Outcome::Ok));
        assert_eq!(
            outcome("http.a.requests:1|c|#status:NOT_FOUND"),
            Ok(Outcome::NotFound)
        );
        assert_eq!(
            outcome("http.a.requests:1|c|#status:teapot"),
            Err(Mapped::Rejected(RejectReason::UnknownOutcome))
        );
    }

    #[test]
    fn a_multi_value_line_maps_to_one_request_per_value_or_is_rejected_whole() {
        let mut m = mapper(YAML);
        let mut b = Batch::default();
        assert_eq!(
            m.map_line("db.s7.query_time:12:15.5:20|ms|#table:users", &mut b),
            Mapped::Accepted
        );
        let got: Vec<_> = b
            .iter()
            .map(|o| (o.shard, o.key, o.count, o.latency_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("s7", Some("users"), 1, Some(12.0)),
                ("s7", Some("users"), 1, Some(15.5)),
                ("s7", Some("users"), 1, Some(20.0)),
            ]
        );
        let mut b = Batch::default();
        assert_eq!(
            m.map_line("db.s7.query_time:12:nope:20|ms", &mut b),
            Mapped::Rejected(RejectReason::BadLatency)
        );
        assert!(b.is_empty());
        assert_eq!(
            m.map_line("cache.get:1:2|c|#service:m,shard:1,result:hit", &mut b),
            Mapped::Accepted
        );
        assert_eq!(b.iter().map(|o| o.count).sum::<u64>(), 3);
    }

    #[test]
    fn native_name_and_bad_values_are_rejected_not_skipped() {
        let mut m = mapper(YAML);
        assert_eq!(
            one(&mut m, "skewwatch.request:1|g|#group:g,shard:s"),
            Err(Mapped::Rejected(RejectReason::UnsupportedMetric))
        );
        assert_eq!(
            one(&mut m, "db.s1.query_time:abc|ms"),
            Err(Mapped::Rejected(RejectReason::BadLatency))
        );
        assert_eq!(
            one(&mut m, "db.s1.query_time"),
            Err(Mapped::Rejected(RejectReason::Malformed))
        );
    }

    #[test]
    fn glob_backtracks_within_a_component() {
        let pieces: Vec<String> = ["a.", "_", "_count"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut caps = vec![(0, 0)];
        let name = "a.x_y_z_count";
        assert!(glob(&pieces, name, 0, &mut caps));
        let got: Vec<_> = caps[1..].iter().map(|&(a, b)| &name[a..b]).collect();
        assert_eq!(got, ["x", "y_z"]);
        let mut caps = vec![(0, 0)];
        assert!(!glob(&pieces, "a.x_count", 0, &mut caps));
    }

    #[test]
    fn a_datagram_mixes_native_mapped_unmapped_and_bad_lines() {
        let mut m = mapper(YAML);
        let datagram = b"skewwatch.request:1|ms|#group:g,shard:a\n\
            db.s1.query_time:5|ms\n\
            process.rss:100|g\n\
            unrelated.timer:3|ms|#shard:x\n\
            cache.get:1|c|#service:m,shard:2,result:nope\n\
            skewwatch.request:1|ms|#shard:a\n\
            garbage\n";
        let mut batch = Batch::default();
        let mut rejected = Rejections::default();
        let mut skipped = 0;
        let accepted =
            parse_datagram_mapped(datagram, &mut m, &mut batch, &mut rejected, &mut skipped);
        assert_eq!((accepted, batch.len(), skipped), (2, 2, 2));
        let groups: Vec<_> = batch.iter().map(|o| (o.group, o.shard)).collect();
        assert_eq!(groups, [("g", "a"), ("orders-db", "s1")]);
        assert_eq!(rejected.get(RejectReason::BadCache), 1);
        assert_eq!(rejected.get(RejectReason::MissingGroup), 1);
        assert_eq!(rejected.get(RejectReason::Malformed), 1);
        assert_eq!(rejected.total(), 3);
        // Without mappings the same datagram rejects the other metrics, as before.
        let mut none = Mapper::new(Arc::from([]));
        let mut rejected = Rejections::default();
        let mut skipped = 0;
        parse_datagram_mapped(
            datagram,
            &mut none,
            &mut Batch::default(),
            &mut rejected,
            &mut skipped,
        );
        assert_eq!(skipped, 0);
        assert_eq!(rejected.get(RejectReason::UnsupportedMetric), 4);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_lines_never_panic_and_what_is_accepted_is_valid(
            line in "[a-z.*_:|#@,0-9$]{0,60}"
        ) {
            let mut m = mapper(YAML);
            let mut b = Batch::default();
            let mapped = m.map_line(&line, &mut b);
            proptest::prop_assert_eq!(mapped == Mapped::Accepted, b.len() == 1);
            for o in b.iter() {
                proptest::prop_assert_eq!(o.validate(), Ok(()));
            }
        }
    }
}
