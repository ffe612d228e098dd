//! StatsD / DogStatsD line parser: the UDP input.
//!
//! It sits at the very start of the flow (`Observation -> Window -> SkewStats -> Detectors ->
//! Alerts/Snapshot -> Outputs`): the UDP listener hands each datagram to [`parse_datagram`],
//! which turns its lines into [`ObservationRef`]s, validates them and packs them into a
//! [`Batch`] for the pipeline; rejected lines are counted by [`RejectReason`].
//!
//! The native convention, with DogStatsD tags:
//!
//! ```text
//! skewwatch.request:<latency_ms>|ms|#group:<g>,shard:<s>[,key:<k>][,outcome:<o>][,cache:hit|miss]
//! skewwatch.request:<n>|c|#group:<g>,shard:<s>,...
//! ```
//!
//! - Types `ms`, `h` and `d` (timer, histogram, distribution of milliseconds) carry one
//!   request's latency; type `c` stands for `n` requests without latency (`n` an integer >= 1).
//!   Other types (`g`, `s`, ...) and other names (but the two gauges below) are
//!   [`RejectReason::UnsupportedMetric`].
//! - `|@<rate>` (rate in `(0, 1]`) scales the count to `round(n / rate)`: `|@0.1` is ten requests.
//! - Tags come in any order; the last of a duplicated tag wins; a value is everything after the
//!   tag's first `:` (so it may contain `:`); `key:` with nothing after it is the empty key;
//!   unknown tags and tags without a `:` are ignored.
//! - DogStatsD's other sections (`|c:<container-id>`, `|e:...`, `|card:...`) are ignored;
//!   `|T<unix seconds>` sets the observation's `ts`.
//! - DogStatsD 1.1 multi-value lines (`skewwatch.request:12:15:20|ms|#...`, sent by the Datadog
//!   clients' client-side aggregation) stand for one request per value (a `c` line: each value
//!   a number of requests), sharing the line's tags, rate and timestamp. One bad value rejects
//!   the whole line, counted once. They are read only after a line failed as a single value
//!   (`BadLatency` / `BadCount`), so single-value lines run the same instructions as before.
//!
//! When a line breaks several rules, the first of this order is reported: `Malformed`,
//! `UnsupportedMetric`, `MissingGroup`, `MissingShard`, the value (`BadLatency` / `BadCount`),
//! the sample rate (`BadCount`), `BadTimestamp`, `UnknownOutcome`, `BadCache`, then the
//! data-model rules of [`ObservationRef::validate`].
//!
//! Two gauges report a shard's saturation rather than a request; each line is a
//! [`ReadingRef`], pushed to the batch's list of readings:
//!
//! ```text
//! skewwatch.inflight:<n>|g|#group:<g>,shard:<s>        requests in flight, 0..=1e9
//! skewwatch.utilisation:<0..1>|g|#group:<g>,shard:<s>  busy fraction of the shard
//! ```
//!
//! They take type `g` only, and the `group` and `shard` tags (other tags and `|@` are ignored,
//! `|T` is read). A value with a sign is a StatsD gauge *delta*, which needs the sender's
//! previous value: it is [`RejectReason::BadGauge`], as is a value out of range. Errors come
//! in the order `Malformed`, `UnsupportedMetric`, `MissingGroup`, `MissingShard`, `BadGauge`,
//! `BadTimestamp`, then [`ReadingRef::validate`]. The request parser never sees them: a gauge
//! is read only after a line failed as a request for another metric name, so the request
//! path runs the same instructions as without gauges.
//!
//! The parser is on the hot path (millions of lines a second over UDP): it works on the
//! datagram's bytes, borrows every string from them and allocates nothing.

use skewwatch_detectors::observation::{
    Batch, CacheResult, ObservationRef, Outcome, ReadingKind, ReadingRef, RejectReason, Rejections,
    hash_cache_key,
};

use super::lex::{find, parse_f64, parse_u64, scale_by_rate, sub, word_at};
use super::mapping::{Mapped, Mapper};

/// Parses one datagram of newline-separated lines.
///
/// `\r\n` line ends and a trailing newline are tolerated; empty lines are skipped and counted
/// nowhere. Valid lines are validated and pushed to `out`; each rejected line adds its reason
/// to `rejected`. Returns the number of accepted lines.
pub fn parse_datagram(datagram: &[u8], out: &mut Batch, rejected: &mut Rejections) -> usize {
    parse_lines(datagram, out, rejected, |_, reason, _, rejected| {
        rejected.add(reason);
        false
    })
}

/// [`parse_datagram`] with `statsd.mappings`: a line of another metric goes through `mapper`;
/// one that no mapping takes adds one to `skipped` instead of being rejected. Without mappings
/// it is [`parse_datagram`].
pub fn parse_datagram_mapped(
    datagram: &[u8],
    mapper: &mut Mapper,
    out: &mut Batch,
    rejected: &mut Rejections,
    skipped: &mut u64,
) -> usize {
    if !mapper.is_active() {
        return parse_datagram(datagram, out, rejected);
    }
    parse_lines(datagram, out, rejected, |line, reason, out, rejected| {
        // Only a line of another metric name is offered to the mappings: the native path
        // stays as it was, and its own errors stay errors.
        let mapped = match (reason, std::str::from_utf8(line)) {
            (RejectReason::UnsupportedMetric, Ok(line)) => mapper.map_line(line, out),
            _ => Mapped::Rejected(reason),
        };
        match mapped {
            Mapped::Accepted => return true,
            Mapped::Rejected(reason) => rejected.add(reason),
            Mapped::Unmapped => *skipped += 1,
        }
        false
    })
}

/// The line loop of [`parse_datagram`]; `on_error(line, reason, out, rejected)` handles a
/// line the native parser refused and says whether it was accepted after all.
#[inline(always)]
fn parse_lines(
    datagram: &[u8],
    out: &mut Batch,
    rejected: &mut Rejections,
    mut on_error: impl FnMut(&[u8], RejectReason, &mut Batch, &mut Rejections) -> bool,
) -> usize {
    // One UTF-8 check for the whole datagram rather than one per line: every line of a valid
    // datagram is valid, as lines end at an ASCII byte. When the check fails, each line is
    // checked on its own, so a bad byte still costs only its line.
    let text = std::str::from_utf8(datagram).ok();
    let mut accepted = 0;
    let mut start = 0;
    while start < datagram.len() {
        let newline = find(datagram, start, datagram.len(), b'\n', b'\n');
        let end = if newline > start && datagram.get(newline - 1) == Some(&b'\r') {
            newline - 1
        } else {
            newline
        };
        let line_start = start;
        start = newline + 1;
        if end == line_start {
            continue;
        }
        let parsed = match text {
            // Scanning the datagram in place lets word-sized reads run past the line's end.
            Some(text) => parse_at(text, line_start, end),
            None => parse_line(datagram.get(line_start..end).unwrap_or_default()),
        };
        match parsed {
            Ok(obs) => {
                out.push(&obs);
                accepted += 1;
            }
            Err(reason) => {
                let line = datagram.get(line_start..end).unwrap_or_default();
                let taken = match take_refused(line, reason, out) {
                    Ok(()) => true,
                    Err(reason) => on_error(line, reason, out, rejected),
                };
                if taken {
                    accepted += 1;
                }
            }
        }
    }
    accepted
}

/// Parses and validates one line (without its line end).
pub fn parse_line(line: &[u8]) -> Result<ObservationRef<'_>, RejectReason> {
    // Validating the whole line up front keeps "not UTF-8" one rule, wherever the bad byte is,
    // and lets every later step split a `&str` at ASCII delimiters.
    let line = std::str::from_utf8(line).map_err(|_| RejectReason::Malformed)?;
    parse_at(line, 0, line.len())
}

/// `skewwatch.request:` as bytes.
const PREFIX: &[u8] = b"skewwatch.request:";
/// The saturation gauges' names and colons, as bytes.
const GAUGES: [(&[u8], ReadingKind); 2] = [
    (b"skewwatch.inflight:", ReadingKind::Inflight),
    (b"skewwatch.utilisation:", ReadingKind::Utilisation),
];

/// A line the request parser refused for `reason`: when it is a saturation gauge, pushes its
/// reading to `out`; when it is a multi-value request line, pushes its observations;
/// otherwise gives back why the line is refused (the gauge's own error for a bad gauge line).
/// Out of line and cold: gauges come once per shard per report, not per request, and inlined
/// into the line loop the gauge code made every request line dearer.
#[cold]
#[inline(never)]
fn take_refused(line: &[u8], reason: RejectReason, out: &mut Batch) -> Result<(), RejectReason> {
    match reason {
        RejectReason::UnsupportedMetric => {
            let reading = parse_gauge(line)?;
            out.push_reading(&reading);
            Ok(())
        }
        RejectReason::BadLatency | RejectReason::BadCount => {
            take_multi_value(line, out).ok_or(reason)?
        }
        _ => Err(reason),
    }
}

/// A DogStatsD 1.1 multi-value request line (`skewwatch.request:12:15:20|ms|#...`): every
/// value is checked first, then each is pushed to `out` as its own observation, so a bad
/// value rejects the whole line and nothing of it is kept. `None` when the line has one value
/// (the caller's reason stands). Out of line: inlined, it made [`take_refused`], which every
/// refused line passes, dearer (32 instructions for a mapped line instead of 21).
#[inline(never)]
fn take_multi_value(line: &[u8], out: &mut Batch) -> Option<Result<(), RejectReason>> {
    let text = std::str::from_utf8(line).ok()?;
    if !text.starts_with(std::str::from_utf8(PREFIX).ok()?) {
        return None;
    }
    let sections = match Sections::scan(text, PREFIX.len(), text.len()) {
        Ok(s) => s,
        Err(reason) => return Some(Err(reason)),
    };
    if !sections.value.contains(':') {
        return None;
    }
    let values = || sections.value.split(':');
    if let Err(reason) = values().try_for_each(|v| observation(&sections, v).map(drop)) {
        return Some(Err(reason));
    }
    for v in values() {
        if let Ok(obs) = observation(&sections, v) {
            out.push(&obs);
        }
    }
    Some(Ok(()))
}

/// Parses and validates one saturation gauge line (without its line end). A line that is not
/// one of the two gauges is [`RejectReason::UnsupportedMetric`].
pub fn parse_gauge(line: &[u8]) -> Result<ReadingRef<'_>, RejectReason> {
    let Some(&(name, kind)) = GAUGES.iter().find(|(name, _)| line.starts_with(name)) else {
        return Err(RejectReason::UnsupportedMetric);
    };
    let text = std::str::from_utf8(line).map_err(|_| RejectReason::Malformed)?;
    let sections = Sections::scan_typed(text, name.len(), text.len(), |t| match t {
        Some(b"g") => Ok(()),
        Some(b"") | None => Err(RejectReason::Malformed),
        Some(_) => Err(RejectReason::UnsupportedMetric),
    })?;
    let group = sections.tags.group.ok_or(RejectReason::MissingGroup)?;
    let shard = sections.tags.shard.ok_or(RejectReason::MissingShard)?;
    if sections.value.starts_with(['+', '-']) {
        return Err(RejectReason::BadGauge);
    }
    let value = parse_f64(sections.value).ok_or(RejectReason::BadGauge)?;
    let ts = match sections.ts {
        None => None,
        Some(t) => Some(parse_u64(t).ok_or(RejectReason::BadTimestamp)? as f64),
    };
    let reading = ReadingRef {
        ts,
        group,
        shard,
        kind,
        value,
    };
    reading.validate()?;
    Ok(reading)
}

/// Parses and validates the line `text[start..end]`. `start` and `end` are at line
/// boundaries (so at char boundaries), and the byte at `end`, if any, is `\r` or `\n`.
fn parse_at(text: &str, start: usize, end: usize) -> Result<ObservationRef<'_>, RejectReason> {
    let bytes = text.as_bytes();
    if !bytes
        .get(start..end)
        .is_some_and(|line| line.starts_with(PREFIX))
    {
        return Err(foreign_line_reason(sub(text, start, end)));
    }

    let sections = Sections::scan(text, start + PREFIX.len(), end)?;
    observation(&sections, sections.value)
}

/// The observation of a request line's `value` (the line's only value, or one of a
/// multi-value line's) with the line's other sections. Always inlined: on the single-value
/// path it is the rest of [`parse_at`].
#[inline(always)]
fn observation<'a>(
    sections: &Sections<'a>,
    value: &'a str,
) -> Result<ObservationRef<'a>, RejectReason> {
    let Sections {
        kind,
        rate,
        ts,
        tags: ref raw,
        ..
    } = *sections;
    let group = raw.group.ok_or(RejectReason::MissingGroup)?;
    let shard = raw.shard.ok_or(RejectReason::MissingShard)?;
    let (requests, latency_ms) = match kind {
        Kind::Latency => (1, Some(parse_f64(value).ok_or(RejectReason::BadLatency)?)),
        Kind::Counter => (parse_u64(value).ok_or(RejectReason::BadCount)?, None),
    };
    let count = match rate {
        None => requests,
        Some(rate) => scale_by_rate(requests, rate)?,
    };
    let ts = match ts {
        None => None,
        Some(t) => Some(parse_u64(t).ok_or(RejectReason::BadTimestamp)? as f64),
    };
    let outcome = match raw.outcome {
        None => Outcome::Ok,
        Some(o) => Outcome::parse(o).ok_or(RejectReason::UnknownOutcome)?,
    };
    let cache = match raw.cache {
        None => None,
        Some(c) => Some(CacheResult::parse(c).ok_or(RejectReason::BadCache)?),
    };
    let cache_key = match raw.cache_key {
        None => None,
        Some(k) => Some(hash_cache_key(k.as_bytes())?),
    };

    let obs = ObservationRef {
        ts,
        group,
        shard,
        key: raw.key,
        count,
        latency_ms,
        outcome,
        cache,
        cache_key,
    };
    obs.validate()?;
    Ok(obs)
}

/// What a line's value stands for, from its StatsD type.
#[derive(Clone, Copy)]
enum Kind {
    /// `ms`, `h`, `d`: one request and its latency in milliseconds.
    Latency,
    /// `c`: a number of requests.
    Counter,
}

/// The parts of a line after the metric name and its `:`, as raw text; `K` is what the
/// StatsD type says (a request's [`Kind`], or nothing for a gauge, whose only type is `g`).
struct Sections<'a, K = Kind> {
    value: &'a str,
    kind: K,
    rate: Option<&'a str>,
    ts: Option<&'a str>,
    tags: RawTags<'a>,
}

impl<'a> Sections<'a> {
    /// [`Sections::scan_typed`] for a request line. Always inlined: with the multi-value path
    /// as its second caller, the compiler kept it out of line and returned the sections through
    /// memory, which cost every request line about 65 instructions
    /// (`scripts/instructions.sh statsd_datagram`).
    #[inline(always)]
    fn scan(text: &'a str, from: usize, end: usize) -> Result<Self, RejectReason> {
        Self::scan_typed(text, from, end, |t| match t {
            Some(b"ms" | b"h" | b"d") => Ok(Kind::Latency),
            Some(b"c") => Ok(Kind::Counter),
            Some(b"") | None => Err(RejectReason::Malformed),
            Some(_) => Err(RejectReason::UnsupportedMetric),
        })
    }
}

impl<'a, K> Sections<'a, K> {
    /// Splits `<value>|<type>[|section]...` in `text[from..end]` in one pass over the bytes;
    /// `kind_of` reads the type. Hand-written rather than `str::split`, whose per-item searcher
    /// setup took most of a line's time. Always inlined, so each caller gets its own copy and
    /// the request path's type match is what it was before gauges had one.
    #[inline(always)]
    fn scan_typed(
        text: &'a str,
        from: usize,
        end: usize,
        kind_of: impl Fn(Option<&[u8]>) -> Result<K, RejectReason>,
    ) -> Result<Self, RejectReason> {
        let bytes = text.as_bytes();
        let value_end = find(bytes, from, end, b'|', b'|');
        if value_end == end {
            return Err(RejectReason::Malformed);
        }
        let type_end = find(bytes, value_end + 1, end, b'|', b'|');
        let kind = kind_of(bytes.get(value_end + 1..type_end))?;
        let mut sections = Sections {
            value: sub(text, from, value_end),
            kind,
            rate: None,
            ts: None,
            tags: RawTags::default(),
        };
        // `pipe` is the index of a `|` while the loop runs.
        let mut pipe = type_end;
        while pipe < end {
            let start = pipe + 1;
            let sigil = if start < end { bytes.get(start) } else { None };
            pipe = match sigil {
                None | Some(b'|') => return Err(RejectReason::Malformed),
                Some(b'#') => sections.tags.read(text, start + 1, end),
                Some(&sigil) => {
                    let section_end = find(bytes, start + 1, end, b'|', b'|');
                    let body = sub(text, start + 1, section_end);
                    match sigil {
                        b'@' => sections.rate = Some(body),
                        b'T' => sections.ts = Some(body),
                        // `c:<container-id>`, `e:<external data>`, `card:<cardinality>` and
                        // whatever DogStatsD adds next describe the sender, not the request.
                        _ => {}
                    }
                    section_end
                }
            };
        }
        Ok(sections)
    }
}

/// The tags skewwatch reads, as their raw values; the last occurrence wins.
#[derive(Default)]
struct RawTags<'a> {
    group: Option<&'a str>,
    shard: Option<&'a str>,
    key: Option<&'a str>,
    outcome: Option<&'a str>,
    cache: Option<&'a str>,
    cache_key: Option<&'a str>,
}

impl<'a> RawTags<'a> {
    /// Reads the `tag:value,tag:value` list that starts at `start` in `text`, up to the next
    /// `|` or `end`; returns where it stopped. Always inlined: the gauge parser calls it too,
    /// and with a second caller the compiler kept it out of line, which cost every request
    /// line about 35 instructions (`scripts/instructions.sh statsd_datagram`).
    #[inline(always)]
    fn read(&mut self, text: &'a str, start: usize, end: usize) -> usize {
        let bytes = text.as_bytes();
        let mut start = start;
        loop {
            // A tag's name is what precedes its first `:`, so a tag is `group` exactly when
            // the line continues with `group:` at its start (`,` and `|` end a tag and occur
            // in no name). Compared as one masked word rather than byte by byte.
            let head = word_at(bytes, start, end);
            let (slot, name_len) = if head & MASK6 == GROUP {
                (Some(&mut self.group), 6)
            } else if head & MASK6 == SHARD {
                (Some(&mut self.shard), 6)
            } else if head & MASK4 == KEY {
                (Some(&mut self.key), 4)
            } else if head == OUTCOME {
                (Some(&mut self.outcome), 8)
            } else if head & MASK6 == CACHE {
                (Some(&mut self.cache), 6)
            } else if head == CACHE_KE && bytes.get(start + 8..start + 10) == Some(b"y:") {
                // `cache_key:` is longer than a word: its last two bytes are compared apart,
                // after the other tags, so they pay nothing for it.
                (Some(&mut self.cache_key), 10)
            } else {
                // Unknown tags, and bare tags without a `:`, carry nothing skewwatch reads.
                (None, 0)
            };
            let tag_end = find(bytes, start + name_len, end, b',', b'|');
            if let Some(slot) = slot {
                *slot = Some(sub(text, start + name_len, tag_end));
            }
            if tag_end == end || bytes.get(tag_end) != Some(&b',') {
                return tag_end;
            }
            start = tag_end + 1;
        }
    }
}

/// `name:` as the low bytes of a little-endian word, for matching with [`word_at`].
const fn tag_word(name: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*name)
}

const MASK4: u64 = (1 << 32) - 1;
const MASK6: u64 = (1 << 48) - 1;
const GROUP: u64 = tag_word(b"group:\0\0");
const SHARD: u64 = tag_word(b"shard:\0\0");
const KEY: u64 = tag_word(b"key:\0\0\0\0");
const OUTCOME: u64 = tag_word(b"outcome:");
const CACHE: u64 = tag_word(b"cache:\0\0");
const CACHE_KE: u64 = tag_word(b"cache_ke");

/// The reason for a line that is not `skewwatch.request:...`: another metric when it has the
/// StatsD shape `name:value|type`, otherwise not StatsD at all.
fn foreign_line_reason(line: &str) -> RejectReason {
    match (line.find(':'), line.find('|')) {
        (Some(colon), Some(pipe)) if colon < pipe => RejectReason::UnsupportedMetric,
        _ => RejectReason::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::statsd::lex::METRIC_NAME;
    use proptest::prelude::*;
    use skewwatch_detectors::observation::{MAX_CACHE_KEY_BYTES, MAX_COUNT};

    fn ok(line: &str) -> ObservationRef<'_> {
        match parse_line(line.as_bytes()) {
            Ok(obs) => obs,
            Err(reason) => panic!("{line:?} rejected: {reason:?}"),
        }
    }

    fn err(line: &[u8]) -> RejectReason {
        match parse_line(line) {
            Ok(obs) => panic!("{line:?} accepted: {obs:?}"),
            Err(reason) => reason,
        }
    }

    /// Group, shard, count and latency of each observation of a datagram, and the rejections.
    fn datagram(d: &[u8]) -> (Vec<(String, u64, Option<f64>)>, Rejections) {
        let mut b = Batch::default();
        let mut r = Rejections::default();
        parse_datagram(d, &mut b, &mut r);
        let got = b
            .iter()
            .map(|o| (o.shard.to_owned(), o.count, o.latency_ms))
            .collect();
        (got, r)
    }

    #[test]
    fn a_multi_value_line_is_one_request_per_value() {
        let (got, r) = datagram(
            b"skewwatch.request:12:15:20|ms|#group:g,shard:a\n\
              skewwatch.request:2:3|c|@0.5|#group:g,shard:b\n\
              skewwatch.request:7.5|d|#group:g,shard:c\n",
        );
        assert_eq!(r.total(), 0);
        assert_eq!(
            got,
            [
                ("a".into(), 1, Some(12.0)),
                ("a".into(), 1, Some(15.0)),
                ("a".into(), 1, Some(20.0)),
                ("b".into(), 4, None),
                ("b".into(), 6, None),
                ("c".into(), 1, Some(7.5)),
            ]
        );
    }

    #[test]
    fn a_bad_value_rejects_its_multi_value_line_and_keeps_the_lines_around_it() {
        let (got, r) = datagram(
            b"skewwatch.request:1|ms|#group:g,shard:a\n\
              skewwatch.request:12::20|ms|#group:g,shard:x\n\
              skewwatch.request:12:x|ms|#group:g,shard:x\n\
              skewwatch.request:12:|ms|#group:g,shard:x\n\
              skewwatch.request:1:0|c|#group:g,shard:x\n\
              skewwatch.request:1:2|ms|#shard:x\n\
              skewwatch.request:3|ms|#group:g,shard:b\n",
        );
        assert_eq!(
            got,
            [("a".into(), 1, Some(1.0)), ("b".into(), 1, Some(3.0))]
        );
        assert_eq!(r.get(RejectReason::BadLatency), 3);
        assert_eq!(r.get(RejectReason::BadCount), 1);
        assert_eq!(r.get(RejectReason::MissingGroup), 1);
        assert_eq!(r.total(), 5);
    }

    #[test]
    fn prefix_is_the_metric_name_and_a_colon() {
        assert_eq!(PREFIX, format!("{METRIC_NAME}:").as_bytes());
    }

    #[test]
    fn parses_a_full_timer_line() {
        let obs = ok(
            "skewwatch.request:12.5|ms|#group:db,shard:s1,key:user42,outcome:timeout,cache:miss",
        );
        assert_eq!(
            obs,
            ObservationRef {
                ts: None,
                group: "db",
                shard: "s1",
                key: Some("user42"),
                count: 1,
                latency_ms: Some(12.5),
                outcome: Outcome::Timeout,
                cache: Some(CacheResult::Miss),
                cache_key: None,
            }
        );
    }

    #[test]
    fn a_cache_key_tag_is_kept_as_its_hash_and_checked_like_the_other_fields() {
        let obs = ok("skewwatch.request:1|ms|#group:g,shard:s,cache_key:user:42,cache:hit");
        assert_eq!(obs.cache_key, Some(hash_cache_key(b"user:42").unwrap()));
        assert_eq!(obs.cache, Some(CacheResult::Hit));
        // A tag that only starts like it is another tag.
        let other = ok("skewwatch.request:1|ms|#group:g,shard:s,cache_keys:a,cache_kex:b");
        assert_eq!(other.cache_key, None);
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:g,shard:s,cache_key:"),
            RejectReason::FieldLength
        );
        let long = format!(
            "skewwatch.request:1|ms|#group:g,shard:s,cache_key:{}",
            "k".repeat(MAX_CACHE_KEY_BYTES + 1)
        );
        assert_eq!(err(long.as_bytes()), RejectReason::FieldLength);
    }

    #[test]
    fn defaults_when_only_group_and_shard_are_given() {
        let obs = ok("skewwatch.request:3|ms|#group:db,shard:s1");
        assert_eq!(obs.key, None);
        assert_eq!(obs.count, 1);
        assert_eq!(obs.latency_ms, Some(3.0));
        assert_eq!(obs.outcome, Outcome::Ok);
        assert_eq!(obs.cache, None);
        assert_eq!(obs.ts, None);
    }

    #[test]
    fn histogram_and_distribution_types_carry_latency_like_ms() {
        for ty in ["ms", "h", "d"] {
            let line = format!("skewwatch.request:7.25|{ty}|#group:g,shard:s");
            assert_eq!(ok(&line).latency_ms, Some(7.25), "{ty}");
        }
    }

    #[test]
    fn sample_rate_scales_the_count() {
        assert_eq!(ok("skewwatch.request:5|ms|@0.1|#group:g,shard:s").count, 10);
        assert_eq!(ok("skewwatch.request:5|ms|@1|#group:g,shard:s").count, 1);
        assert_eq!(ok("skewwatch.request:5|ms|@0.5|#group:g,shard:s").count, 2);
        // round(1 / 0.3) = round(3.33) = 3; round(1 / 0.4) = round(2.5) = 3.
        assert_eq!(ok("skewwatch.request:5|ms|@0.3|#group:g,shard:s").count, 3);
        assert_eq!(ok("skewwatch.request:5|ms|@0.4|#group:g,shard:s").count, 3);
        // The rate may stand anywhere among the sections.
        assert_eq!(ok("skewwatch.request:5|ms|#group:g,shard:s|@0.25").count, 4);
        // A counter is scaled too.
        let obs = ok("skewwatch.request:3|c|@0.1|#group:g,shard:s");
        assert_eq!((obs.count, obs.latency_ms), (30, None));
    }

    #[test]
    fn sample_rate_outside_zero_to_one_is_bad_count() {
        for rate in ["0", "-0.5", "1.5", "NaN", "inf", "", "x", "1e-300"] {
            let line = format!("skewwatch.request:5|ms|@{rate}|#group:g,shard:s");
            assert_eq!(
                err(line.as_bytes()),
                RejectReason::BadCount,
                "rate {rate:?}"
            );
        }
    }

    #[test]
    fn counter_stands_for_n_requests_without_latency() {
        let obs = ok("skewwatch.request:42|c|#group:g,shard:s,outcome:not_found");
        assert_eq!(obs.count, 42);
        assert_eq!(obs.latency_ms, None);
        assert_eq!(obs.outcome, Outcome::NotFound);
        for bad in [
            "0",
            "-1",
            "1.5",
            "2.0",
            "",
            "abc",
            "99999999999999999999999",
            "1099511627777",
        ] {
            let line = format!("skewwatch.request:{bad}|c|#group:g,shard:s");
            assert_eq!(err(line.as_bytes()), RejectReason::BadCount, "{bad:?}");
        }
        // The largest count the model takes is still fine.
        let line = format!("skewwatch.request:{MAX_COUNT}|c|#group:g,shard:s");
        assert_eq!(ok(&line).count, MAX_COUNT);
    }

    #[test]
    fn empty_key_differs_from_absent_key() {
        assert_eq!(
            ok("skewwatch.request:1|ms|#group:g,shard:s,key:").key,
            Some("")
        );
        assert_eq!(
            ok("skewwatch.request:1|ms|#key:,group:g,shard:s").key,
            Some("")
        );
        assert_eq!(ok("skewwatch.request:1|ms|#group:g,shard:s").key, None);
        // A bare `key` tag has no colon, so it is not a key tag at all.
        assert_eq!(ok("skewwatch.request:1|ms|#group:g,shard:s,key").key, None);
    }

    #[test]
    fn tags_in_any_order_unknown_ignored_last_wins_values_keep_colons() {
        let obs = ok(
            "skewwatch.request:1|ms|#env:prod,cache:hit,shard:s1,canary,key:a:b:c,group:g,shard:s2,,outcome:error",
        );
        assert_eq!(obs.group, "g");
        assert_eq!(obs.shard, "s2");
        assert_eq!(obs.key, Some("a:b:c"));
        assert_eq!(obs.outcome, Outcome::Error);
        assert_eq!(obs.cache, Some(CacheResult::Hit));
        // Last wins also over an invalid earlier value.
        assert_eq!(
            ok("skewwatch.request:1|ms|#group:g,shard:s,outcome:bogus,outcome:ok").outcome,
            Outcome::Ok
        );
        // Tags spread over two sections read as one list.
        let obs = ok("skewwatch.request:1|ms|#group:g|#shard:s,group:h");
        assert_eq!((obs.group, obs.shard), ("h", "s"));
    }

    #[test]
    fn every_outcome_and_cache_value_parses() {
        for o in Outcome::ALL {
            let line = format!("skewwatch.request:1|ms|#group:g,shard:s,outcome:{o}");
            assert_eq!(ok(&line).outcome, o);
        }
        for c in [CacheResult::Hit, CacheResult::Miss] {
            let line = format!(
                "skewwatch.request:1|ms|#group:g,shard:s,cache:{}",
                c.as_str()
            );
            assert_eq!(ok(&line).cache, Some(c));
        }
    }

    #[test]
    fn unknown_outcome_and_bad_cache_are_rejected() {
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:g,shard:s,outcome:OK"),
            RejectReason::UnknownOutcome
        );
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:g,shard:s,outcome:"),
            RejectReason::UnknownOutcome
        );
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:g,shard:s,cache:maybe"),
            RejectReason::BadCache
        );
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:g,shard:s,cache:"),
            RejectReason::BadCache
        );
    }

    #[test]
    fn missing_group_or_shard() {
        assert_eq!(
            err(b"skewwatch.request:1|ms|#shard:s"),
            RejectReason::MissingGroup
        );
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:g"),
            RejectReason::MissingShard
        );
        assert_eq!(err(b"skewwatch.request:1|ms"), RejectReason::MissingGroup);
        assert_eq!(err(b"skewwatch.request:1|ms|#"), RejectReason::MissingGroup);
        // `group` without a colon is a bare tag, not an empty group.
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group,shard:s"),
            RejectReason::MissingGroup
        );
    }

    #[test]
    fn bad_latency_values() {
        for v in [
            "NaN", "nan", "-1", "-0.5", "inf", "abc", "", "1,5", "86400001", "1e300",
        ] {
            let line = format!("skewwatch.request:{v}|ms|#group:g,shard:s");
            assert_eq!(err(line.as_bytes()), RejectReason::BadLatency, "{v:?}");
        }
        // Forms that `str::parse` takes are fine.
        assert_eq!(
            ok("skewwatch.request:1e2|ms|#group:g,shard:s").latency_ms,
            Some(100.0)
        );
        assert_eq!(
            ok("skewwatch.request:.5|ms|#group:g,shard:s").latency_ms,
            Some(0.5)
        );
        assert_eq!(
            ok("skewwatch.request:0|ms|#group:g,shard:s").latency_ms,
            Some(0.0)
        );
        assert_eq!(
            ok("skewwatch.request:86400000|ms|#group:g,shard:s").latency_ms,
            Some(86_400_000.0)
        );
    }

    #[test]
    fn overlong_and_empty_fields_are_field_length() {
        let long = "x".repeat(129);
        let line = format!("skewwatch.request:1|ms|#group:{long},shard:s");
        assert_eq!(err(line.as_bytes()), RejectReason::FieldLength);
        let line = format!("skewwatch.request:1|ms|#group:g,shard:{long}");
        assert_eq!(err(line.as_bytes()), RejectReason::FieldLength);
        let key = "k".repeat(257);
        let line = format!("skewwatch.request:1|ms|#group:g,shard:s,key:{key}");
        assert_eq!(err(line.as_bytes()), RejectReason::FieldLength);
        let key = "k".repeat(256);
        let line = format!("skewwatch.request:1|ms|#group:g,shard:s,key:{key}");
        assert_eq!(ok(&line).key.map(str::len), Some(256));
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:,shard:s"),
            RejectReason::FieldLength
        );
        assert_eq!(
            err(b"skewwatch.request:1|ms|#group:g,shard:"),
            RejectReason::FieldLength
        );
    }

    #[test]
    fn other_metrics_and_types_are_unsupported() {
        for line in [
            "other.metric:1|ms|#group:g,shard:s",
            "skewwatch.requests:1|ms|#group:g,shard:s",
            "skewwatch.request:1|g|#group:g,shard:s",
            "skewwatch.request:1|s|#group:g,shard:s",
            "skewwatch.request:1|MS|#group:g,shard:s",
            "_e{5,4}:title|text",
        ] {
            assert_eq!(
                err(line.as_bytes()),
                RejectReason::UnsupportedMetric,
                "{line:?}"
            );
        }
    }

    #[test]
    fn garbage_and_bad_syntax_are_malformed() {
        for line in [
            &b"hello"[..],
            b"skewwatch.request",
            b"skewwatch.request:1",
            b"skewwatch.request:1||#group:g,shard:s",
            b"skewwatch.request:1|ms||#group:g,shard:s",
            b"skewwatch.request:1|ms|#group:g,shard:s|",
            b"\xff\xfe\x00garbage",
            b"skewwatch.request:1|ms|#group:g\xff,shard:s",
            b"skewwatch.request:1|ms|#group:g,shard:s,env:\xc3",
            b"|",
            b":",
        ] {
            assert_eq!(err(line), RejectReason::Malformed, "{line:?}");
        }
    }

    #[test]
    fn dogstatsd_extra_sections_are_tolerated() {
        let obs =
            ok("skewwatch.request:4|d|#group:g,shard:s|c:abc123|T1700000000|e:it-xyz|card:low");
        assert_eq!(obs.ts, Some(1_700_000_000.0));
        assert_eq!(obs.latency_ms, Some(4.0));
        let obs = ok("skewwatch.request:4|ms|@0.5|#group:g,shard:s|c:ci-0123");
        assert_eq!((obs.count, obs.ts), (2, None));
        assert_eq!(
            err(b"skewwatch.request:4|ms|#group:g,shard:s|Tyesterday"),
            RejectReason::BadTimestamp
        );
    }

    #[test]
    fn datagram_keeps_good_lines_around_bad_ones() {
        let datagram = b"skewwatch.request:1|ms|#group:g,shard:a\r\n\
            garbage\n\
            \n\
            skewwatch.request:2|ms|@0.5|#group:g,shard:b\n\
            skewwatch.request:x|ms|#group:g,shard:c\n\
            \r\n\
            other:1|c\n\
            skewwatch.request:3|c|#shard:d\n\
            skewwatch.request:4|h|#group:g,shard:e,key:\n";
        let mut batch = Batch::default();
        let mut rejected = Rejections::default();
        let accepted = parse_datagram(datagram, &mut batch, &mut rejected);
        assert_eq!(accepted, 3);
        assert_eq!(batch.len(), 3);
        let shards: Vec<_> = batch.iter().map(|o| (o.shard, o.count, o.key)).collect();
        assert_eq!(
            shards,
            vec![("a", 1, None), ("b", 2, None), ("e", 1, Some(""))]
        );
        assert_eq!(rejected.total(), 4);
        assert_eq!(rejected.get(RejectReason::Malformed), 1);
        assert_eq!(rejected.get(RejectReason::BadLatency), 1);
        assert_eq!(rejected.get(RejectReason::UnsupportedMetric), 1);
        assert_eq!(rejected.get(RejectReason::MissingGroup), 1);
    }

    #[test]
    fn saturation_gauges_are_readings_not_requests() {
        let r = parse_gauge(b"skewwatch.inflight:42|g|#group:db,shard:s1,key:ignored|T1700000000")
            .unwrap();
        assert_eq!(
            r,
            ReadingRef {
                ts: Some(1_700_000_000.0),
                group: "db",
                shard: "s1",
                kind: ReadingKind::Inflight,
                value: 42.0,
            }
        );
        let r = parse_gauge(b"skewwatch.utilisation:0.85|g|@0.5|#shard:s2,group:db").unwrap();
        assert_eq!(
            (r.kind, r.value, r.shard),
            (ReadingKind::Utilisation, 0.85, "s2")
        );
        for (line, reason) in [
            (
                &b"skewwatch.utilisation:1.2|g|#group:db,shard:s"[..],
                RejectReason::BadGauge,
            ),
            (
                b"skewwatch.inflight:+3|g|#group:db,shard:s",
                RejectReason::BadGauge,
            ),
            (
                b"skewwatch.inflight:-3|g|#group:db,shard:s",
                RejectReason::BadGauge,
            ),
            (
                b"skewwatch.inflight:many|g|#group:db,shard:s",
                RejectReason::BadGauge,
            ),
            (
                b"skewwatch.inflight:2e9|g|#group:db,shard:s",
                RejectReason::BadGauge,
            ),
            (
                b"skewwatch.inflight:3|c|#group:db,shard:s",
                RejectReason::UnsupportedMetric,
            ),
            (b"skewwatch.inflight:3", RejectReason::Malformed),
            (
                b"skewwatch.inflight:3|g|#shard:s",
                RejectReason::MissingGroup,
            ),
            (
                b"skewwatch.utilisation:0.5|g|#group:db",
                RejectReason::MissingShard,
            ),
            (
                b"skewwatch.utilisation:0.5|g|#group:db,shard:s|Tnoon",
                RejectReason::BadTimestamp,
            ),
            (
                b"skewwatch.inflightx:3|g|#group:db,shard:s",
                RejectReason::UnsupportedMetric,
            ),
        ] {
            let got = parse_gauge(line).map(|r| r.value);
            assert_eq!(got, Err(reason), "{}", String::from_utf8_lossy(line));
        }
        // A gauge of requests is not a request, and a gauge is not a request line either.
        assert_eq!(
            err(b"skewwatch.request:3|g|#group:db,shard:s"),
            RejectReason::UnsupportedMetric
        );
        assert_eq!(
            err(b"skewwatch.inflight:3|g|#group:db,shard:s"),
            RejectReason::UnsupportedMetric
        );
    }

    #[test]
    fn a_datagram_takes_gauges_beside_requests_and_counts_a_bad_gauge() {
        // The same lines, once valid UTF-8 and once with a bad byte in a line of its own, which
        // sends the datagram down the line-by-line path.
        for tail in [&b""[..], b"\xff\n"] {
            let mut datagram = b"skewwatch.request:1|ms|#group:g,shard:a\n\
                skewwatch.utilisation:0.9|g|#group:g,shard:a\n\
                skewwatch.inflight:+1|g|#group:g,shard:a\n\
                skewwatch.inflight:7|g|#group:g,shard:b\n\
                skewwatch.request:2|ms|#group:g,shard:b\n"
                .to_vec();
            datagram.extend_from_slice(tail);
            let mut batch = Batch::default();
            let mut rejected = Rejections::default();
            let accepted = parse_datagram(&datagram, &mut batch, &mut rejected);
            assert_eq!((accepted, batch.len(), batch.requests()), (4, 4, 2));
            let shards: Vec<_> = batch.iter().map(|o| o.shard).collect();
            assert_eq!(shards, ["a", "b"]);
            let readings: Vec<_> = batch
                .readings()
                .map(|r| (r.shard, r.kind, r.value))
                .collect();
            assert_eq!(
                readings,
                [
                    ("a", ReadingKind::Utilisation, 0.9),
                    ("b", ReadingKind::Inflight, 7.0)
                ]
            );
            assert_eq!(rejected.get(RejectReason::BadGauge), 1);
            assert_eq!(rejected.total(), 1 + u64::from(!tail.is_empty()));
        }
    }

    #[test]
    fn datagram_without_trailing_newline_and_empty_datagram() {
        let mut batch = Batch::default();
        let mut rejected = Rejections::default();
        let n = parse_datagram(
            b"skewwatch.request:1|ms|#group:g,shard:a\nskewwatch.request:1|ms|#group:g,shard:b",
            &mut batch,
            &mut rejected,
        );
        assert_eq!(n, 2);
        assert_eq!(parse_datagram(b"", &mut batch, &mut rejected), 0);
        assert_eq!(parse_datagram(b"\n\r\n\n", &mut batch, &mut rejected), 0);
        assert_eq!(rejected.total(), 0);
        assert_eq!(batch.len(), 2);
    }

    /// Counts what [`parse_datagram`] should see as lines.
    fn non_empty_lines(datagram: &[u8]) -> usize {
        datagram
            .split(|&b| b == b'\n')
            .filter(|l| !l.strip_suffix(b"\r").unwrap_or(l).is_empty())
            .count()
    }

    fn line_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            // Arbitrary bytes.
            proptest::collection::vec(any::<u8>(), 0..120),
            // Near-valid lines built from the grammar's own pieces.
            proptest::collection::vec(
                prop_oneof![
                    Just(&b"skewwatch.request:"[..]),
                    Just(&b"12.5"[..]),
                    Just(&b"-3"[..]),
                    Just(&b"NaN"[..]),
                    Just(&b"|ms"[..]),
                    Just(&b"|c"[..]),
                    Just(&b"|g"[..]),
                    Just(&b"|@0.1"[..]),
                    Just(&b"|@"[..]),
                    Just(&b"|#"[..]),
                    Just(&b"group:g"[..]),
                    Just(&b"shard:s"[..]),
                    Just(&b"key:"[..]),
                    Just(&b"outcome:error"[..]),
                    Just(&b"cache:hit"[..]),
                    Just(&b","[..]),
                    Just(&b":"[..]),
                    Just(&b"|"[..]),
                    Just(&b"\r"[..]),
                    Just(&b"\n"[..]),
                    Just(&b"\xff"[..]),
                    Just(&b"|T17"[..]),
                ],
                0..14
            )
            .prop_map(|parts| parts.concat()),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_datagrams_never_panic_and_every_line_is_counted(
            lines in proptest::collection::vec(line_strategy(), 0..8)
        ) {
            let datagram = lines.join(&b'\n');
            let mut batch = Batch::default();
            let mut rejected = Rejections::default();
            let accepted = parse_datagram(&datagram, &mut batch, &mut rejected);
            prop_assert_eq!(accepted, batch.len());
            prop_assert_eq!(accepted + rejected.total() as usize, non_empty_lines(&datagram));
            for obs in batch.iter() {
                prop_assert_eq!(obs.validate(), Ok(()));
            }
        }

        #[test]
        fn datagrams_parse_as_their_lines_do(
            lines in proptest::collection::vec(line_strategy(), 0..8)
        ) {
            // The in-place scan of a valid datagram and the line-by-line path (taken for a
            // datagram that is not UTF-8) must agree line for line.
            let datagram = lines.join(&b'\n');
            let mut batch = Batch::default();
            let mut rejected = Rejections::default();
            parse_datagram(&datagram, &mut batch, &mut rejected);
            let mut one_by_one = Batch::default();
            let mut rejected_one_by_one = Rejections::default();
            for line in datagram.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line.is_empty() {
                    continue;
                }
                match parse_line(line) {
                    Ok(obs) => one_by_one.push(&obs),
                    Err(reason) => rejected_one_by_one.add(reason),
                }
            }
            prop_assert_eq!(rejected, rejected_one_by_one);
            prop_assert!(batch.iter().eq(one_by_one.iter()));
        }

        #[test]
        fn accepted_lines_round_trip(
            latency in 0.0f64..1e6,
            group in "[a-z0-9-]{1,20}",
            shard in "[a-z0-9-]{1,20}",
            key in proptest::option::of("[a-zA-Z0-9:_-]{0,30}"),
            inv_rate in 1u32..1000,
        ) {
            let latency = (latency * 1000.0).round() / 1000.0;
            let key_tag = key.as_deref().map(|k| format!(",key:{k}")).unwrap_or_default();
            let rate = 1.0 / f64::from(inv_rate);
            let line = format!("skewwatch.request:{latency}|ms|@{rate}|#shard:{shard}{key_tag},group:{group}");
            let obs = parse_line(line.as_bytes()).unwrap();
            prop_assert_eq!(obs.latency_ms, Some(latency));
            prop_assert_eq!(obs.group, group.as_str());
            prop_assert_eq!(obs.shard, shard.as_str());
            prop_assert_eq!(obs.key, key.as_deref());
            prop_assert_eq!(obs.count, u64::from(inv_rate));
        }
    }
}
