//! NDJSON observation parser: the HTTP input and the `replay` trace format.
//!
//! It sits at the start of the flow (`Observation -> Window -> SkewStats -> Detectors ->
//! Alerts/Snapshot -> Outputs`): `POST /api/v1/observations` hands its body to [`parse_body`],
//! which validates each record and packs the good ones into a [`Batch`] for the pipeline;
//! `skewwatch replay` reads a trace in blocks and hands each block's whole lines to
//! [`for_each_line`], which gives each line's [`Record`] (its `ts` kept) as [`parse_record`]
//! would. Both scan the text in place: one UTF-8 check per block, and the fast path finds each
//! line's end as it reads the record.
//!
//! A body is one JSON object per line (blank lines skipped), or a single JSON array of objects
//! (told apart by the first non-whitespace byte being `[`). The fields follow the data model of
//! the external interface: `ts`, `group`, `shard`, `key`, `count`, `latency_ms`, `outcome`,
//! `cache`, `cache_key` (the look-aside cache's key, 1..=1024 bytes, kept only as its hash),
//! and the shard's saturation readings `inflight` (requests in flight, 0..=1e9) and
//! `utilisation` (0..=1); unknown fields are ignored, a JSON `null` counts as an absent field,
//! and a field given twice takes its last value.
//!
//! A record with a reading gives a [`ReadingRef`] per reading besides its observation; with
//! `count: 0` it reports the shard's state and stands for no request (without a reading,
//! `count: 0` stays `BadCount`). Readings go to the batch's own list, so a record without
//! them costs what it did before readings existed.
//!
//! Each record is either taken or rejected with one [`RejectReason`]; valid records around a
//! bad one are still taken. When a record breaks several rules, the first of this order is
//! reported: `Malformed` (not JSON, not UTF-8, not an object), `MissingGroup`, `MissingShard`
//! (or `WrongType` for either), then per field in the order `key`, `count`, `latency_ms`,
//! `outcome`, `cache`, `cache_key`, `ts`, `inflight`, `utilisation` (`WrongType` for a JSON type that field
//! never takes, else its own reason), then the data-model rules of
//! [`ObservationRef::validate`] and [`ReadingRef::validate`].
//!
//! Records are read by a serde visitor straight from the body: strings borrow from it unless
//! they hold JSON escapes, unknown fields are skipped without being built, and a wrong JSON
//! type is noted per field instead of failing the whole parse.

use std::borrow::Cow;
use std::fmt;
use std::io::BufRead;
use std::ops::ControlFlow;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use skewwatch_detectors::observation::{
    Batch, CacheKeyHash, CacheResult, ObservationRef, Outcome, ReadingKind, ReadingRef,
    RejectReason, Rejections, hash_cache_key,
};

use crate::clock;

mod fast;

/// How many [`LineError`]s a [`NdjsonOutcome`] keeps; the counts in
/// [`NdjsonOutcome::rejected`] still cover every rejected record.
pub const MAX_LINE_ERRORS: usize = 20;

/// What [`parse_body`] did with a body: what the HTTP reply reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NdjsonOutcome {
    /// Records validated and pushed to the batch.
    pub accepted: usize,
    /// Rejected records by reason.
    pub rejected: Rejections,
    /// The first [`MAX_LINE_ERRORS`] rejected records, in body order.
    pub errors: Vec<LineError>,
}

/// One rejected record of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number (NDJSON), or 1-based element number (JSON array body).
    pub line: usize,
    /// Why the record was rejected.
    pub reason: RejectReason,
}

/// One valid record, its strings borrowed from the input unless they held JSON escapes.
///
/// [`Record::observation`] gives the [`ObservationRef`] the pipeline takes, and
/// [`Record::readings`] the saturation readings, when the record carries any.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    ts: PackedF64,
    group: Cow<'a, str>,
    shard: Cow<'a, str>,
    key: Option<Cow<'a, str>>,
    count: u64,
    latency_ms: Option<f64>,
    outcome: Outcome,
    cache: Option<CacheResult>,
    /// The hash of `cache_key`: the key itself is not kept.
    cache_key: Option<CacheKeyHash>,
    /// The `inflight` and `utilisation` readings, in the order of [`ReadingKind::ALL`];
    /// boxed, so a record without readings carries 8 bytes for them rather than 32.
    readings: Option<Box<[Option<f64>; 2]>>,
}

/// An `Option<f64>` in 8 bytes rather than 16: the bits of the number, or [`PackedF64::NONE`],
/// a NaN no JSON number reads as, when absent. A record's `ts` is one, which keeps [`Record`]
/// as narrow as it was before `cache_key` joined it (a wider record is copied at a cost on
/// every line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedF64(u64);

impl PackedF64 {
    const NONE: PackedF64 = PackedF64(u64::MAX);

    #[inline(always)]
    fn new(ts: Option<f64>) -> PackedF64 {
        ts.map_or(PackedF64::NONE, |t| PackedF64(t.to_bits()))
    }

    #[inline(always)]
    fn get(self) -> Option<f64> {
        (self != PackedF64::NONE).then(|| f64::from_bits(self.0))
    }
}

/// Parses a body of one JSON object per line, or a single JSON array of objects.
///
/// Valid records are pushed to `out`. In the NDJSON form a bad line costs only that line. In
/// the array form a bad element costs only that element, except a JSON syntax error, after
/// which nothing more can be read: it is counted once, as `Malformed`, on the element where it
/// happened, and the elements before it are kept.
pub fn parse_body(body: &[u8], out: &mut Batch) -> NdjsonOutcome {
    let mut result = NdjsonOutcome::default();
    // Some Windows tools start a UTF-8 file with a byte order mark; JSON has no place for it.
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    match body.iter().find(|b| !is_json_whitespace(**b)) {
        None => {}
        Some(b'[') => parse_array(body, out, &mut result),
        Some(_) => parse_lines(body, out, &mut result),
    }
    result
}

/// Parses the NDJSON lines of `buf` in order, calling `each` with the 0-based number of each
/// line that is not blank and what [`parse_record`] gives for it; stops when `each` breaks.
/// Returns the number of lines read: a last line without a newline counts.
///
/// This is [`parse_record`] on each line, at a lower cost: the UTF-8 check runs once over the
/// whole of `buf` rather than line by line, and a record on the fast path finds its line's end
/// as it is read, so no separate scan for newlines runs and nothing is copied. A line the
/// fast path declines is found with `memchr` and given to serde_json.
pub fn for_each_line<'b, B>(
    buf: &'b [u8],
    mut each: impl FnMut(usize, Result<Record<'b>, RejectReason>) -> ControlFlow<B>,
) -> ControlFlow<B, usize> {
    walk_lines(buf, |number, line| {
        each(
            number,
            match line {
                Line::Fast(obs) => Ok(Record::observed(obs)),
                Line::Serde(record) => record,
            },
        )
    })
}

/// A line that is not blank, as [`walk_lines`] read it.
enum Line<'r, 'b> {
    /// A valid record the fast path read, as its observation (which is all of it: the fast
    /// path declines readings).
    Fast(&'r ObservationRef<'b>),
    /// What the serde path gives for a line the fast path declined.
    Serde(Result<Record<'b>, RejectReason>),
}

/// [`for_each_line`], with the fast path's records handed over as the [`ObservationRef`] it
/// read them into, in place: [`parse_body`] pushes that to its batch as it is, with no
/// [`Record`] built and moved in between.
#[inline(always)]
fn walk_lines<'b, B>(
    buf: &'b [u8],
    mut each: impl FnMut(usize, Line<'_, 'b>) -> ControlFlow<B>,
) -> ControlFlow<B, usize> {
    // The fast path's record, written field by field in this frame (see `fast::record_at`).
    let mut obs = ObservationRef::new("", "");
    let mut pos = 0;
    let mut number = 0;
    while let Some(rest) = buf.get(pos..).filter(|r| !r.is_empty()) {
        // The valid UTF-8 from `pos` on. A line wholly inside it may take the fast path; the
        // line with the first bad byte goes to serde (which rejects it), and the check starts
        // again after it.
        let text = match std::str::from_utf8(rest) {
            Ok(text) => text,
            Err(e) => std::str::from_utf8(rest.get(..e.valid_up_to()).unwrap_or_default())
                .unwrap_or_default(),
        };
        let whole = text.len() == rest.len();
        let mut i = 0;
        loop {
            let end = match fast::record_at(text, i, &mut obs) {
                // A line that reaches the end of `text` ends there only if `text` is all of
                // `rest`; otherwise it goes on with the bad byte.
                Some(end) if whole || end < text.len() => {
                    each(number, Line::Fast(&obs))?;
                    end
                }
                _ => {
                    let end = line_end(rest, i);
                    let line = rest.get(i..end).unwrap_or_default();
                    if !line.iter().all(|&b| is_json_whitespace(b)) {
                        each(number, Line::Serde(parse_record_serde(line)))?;
                    }
                    end
                }
            };
            number += 1;
            i = end + 1;
            if i >= text.len() {
                break;
            }
        }
        pos += i;
    }
    ControlFlow::Continue(number)
}

/// Index of the first `\n` at or after `from` in `b`, or `b.len()`.
fn line_end(b: &[u8], from: usize) -> usize {
    let rest = b.get(from..).unwrap_or_default();
    // `BufRead::skip_until` on a slice finds the newline with the platform's `memchr`; reading
    // a slice cannot fail.
    match (&mut &*rest).skip_until(b'\n') {
        Ok(n) if rest.get(n.wrapping_sub(1)) == Some(&b'\n') => from + n - 1,
        _ => b.len(),
    }
}

/// Parses and validates one NDJSON record (surrounding whitespace allowed).
pub fn parse_record(line: &[u8]) -> Result<Record<'_>, RejectReason> {
    // Flat records of plain values take the fast path; everything else, including every
    // malformed record, is read by serde_json.
    match fast::record(line) {
        Some(record) => Ok(record),
        None => parse_record_serde(line),
    }
}

/// [`parse_record`] through serde_json alone.
fn parse_record_serde(line: &[u8]) -> Result<Record<'_>, RejectReason> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let mut raw = RawRecord::default();
    let mut readings = RawReadings::default();
    let seed = RawSeed {
        raw: &mut raw,
        readings: &mut readings,
    };
    let is_object = seed
        .deserialize(&mut de)
        .map_err(|_| RejectReason::Malformed)?;
    de.end().map_err(|_| RejectReason::Malformed)?;
    if !is_object {
        return Err(RejectReason::Malformed);
    }
    raw.interpret_read(readings)
}

/// Reads a `ts` value: a number of unix seconds (fractional ok) or an RFC 3339 string.
///
/// Other JSON types are [`RejectReason::WrongType`]; a string that is not RFC 3339 or a
/// non-finite number is [`RejectReason::BadTimestamp`].
pub fn parse_timestamp(value: &serde_json::Value) -> Result<f64, RejectReason> {
    match value {
        serde_json::Value::Number(n) => n
            .as_f64()
            .filter(|t| t.is_finite())
            .ok_or(RejectReason::BadTimestamp),
        serde_json::Value::String(s) => parse_rfc3339(s),
        _ => Err(RejectReason::WrongType),
    }
}

/// Reads an RFC 3339 timestamp (`2024-05-01T12:00:00.250Z`, `...+02:00`) as unix seconds.
fn parse_rfc3339(s: &str) -> Result<f64, RejectReason> {
    clock::parse_rfc3339(s).ok_or(RejectReason::BadTimestamp)
}

impl NdjsonOutcome {
    fn reject(&mut self, line: usize, reason: RejectReason) {
        self.rejected.add(reason);
        if self.errors.len() < MAX_LINE_ERRORS {
            self.errors.push(LineError { line, reason });
        }
    }

    // Called once per record from the body loop: always inlined, so where the compiler's
    // units happen to split the crate does not decide whether the hot path pays for a call
    // (measured: +2% instructions per record when a restructuring of the crate left it out of
    // line; a plain `#[inline]` did not bring it back).
    #[inline(always)]
    fn take(&mut self, line: usize, record: Result<Record<'_>, RejectReason>, out: &mut Batch) {
        match record {
            Ok(record) => {
                if record.has_readings() {
                    push_readings(&record, out);
                }
                if record.stands_for_requests() {
                    out.push(&record.observation());
                }
                self.accepted += 1;
            }
            Err(reason) => self.reject(line, reason),
        }
    }
}

/// Pushes the readings of a record that has some; out of line, as few records carry them.
#[cold]
#[inline(never)]
fn push_readings(record: &Record<'_>, out: &mut Batch) {
    for r in record.readings() {
        out.push_reading(&r);
    }
}

impl Record<'_> {
    /// Whether the record carries a saturation reading.
    pub fn has_readings(&self) -> bool {
        self.readings.is_some()
    }

    /// Whether the record stands for requests (`count` >= 1), so that its
    /// [`Record::observation`] is to be recorded; a record of readings alone does not.
    pub fn stands_for_requests(&self) -> bool {
        self.count > 0
    }

    /// The saturation readings, borrowing from this record.
    pub fn readings(&self) -> impl Iterator<Item = ReadingRef<'_>> + '_ {
        let values = self.readings.as_deref().copied().unwrap_or_default();
        ReadingKind::ALL
            .into_iter()
            .zip(values)
            .filter_map(move |(kind, value)| {
                value.map(|value| ReadingRef {
                    ts: self.ts.get(),
                    group: &self.group,
                    shard: &self.shard,
                    kind,
                    value,
                })
            })
    }

    /// Checks the data-model rules. A record without readings is its observation, whose
    /// rules apply as they are; one with readings goes the colder way. Always inlined, so a
    /// record without readings pays one test for them.
    #[inline(always)]
    fn validate(&self) -> Result<(), RejectReason> {
        if !self.has_readings() {
            return self.observation().validate();
        }
        self.validate_with_readings()
    }

    /// [`Record::validate`] for a record with readings: `count` may be 0 (readings alone), the
    /// other fields follow the observation's rules either way, and each reading its own.
    #[cold]
    #[inline(never)]
    fn validate_with_readings(&self) -> Result<(), RejectReason> {
        let mut obs = self.observation();
        obs.count = obs.count.max(1);
        obs.validate()?;
        self.readings().try_for_each(|r| r.validate())
    }

    /// The observation, borrowing from this record.
    pub fn observation(&self) -> ObservationRef<'_> {
        ObservationRef {
            ts: self.ts.get(),
            group: &self.group,
            shard: &self.shard,
            key: self.key.as_deref(),
            count: self.count,
            latency_ms: self.latency_ms,
            outcome: self.outcome,
            cache: self.cache,
            cache_key: self.cache_key,
        }
    }

    /// The record of a valid observation without readings, borrowing what `obs` borrows.
    #[inline(always)]
    fn observed<'a>(obs: &ObservationRef<'a>) -> Record<'a> {
        Record {
            ts: PackedF64::new(obs.ts),
            group: Cow::Borrowed(obs.group),
            shard: Cow::Borrowed(obs.shard),
            key: obs.key.map(Cow::Borrowed),
            count: obs.count,
            latency_ms: obs.latency_ms,
            outcome: obs.outcome,
            cache: obs.cache,
            cache_key: obs.cache_key,
            readings: None,
        }
    }

    /// The record's trace time in unix seconds, when it carried one.
    pub fn ts(&self) -> Option<f64> {
        self.ts.get()
    }
}

/// JSON's four whitespace bytes; `u8::is_ascii_whitespace` also takes form feed, which
/// `serde_json` does not.
fn is_json_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn parse_lines(body: &[u8], out: &mut Batch, result: &mut NdjsonOutcome) {
    let _ = walk_lines(body, |number, line| {
        match line {
            // Valid, and stands for requests: the fast path declines readings.
            Line::Fast(obs) => {
                out.push(obs);
                result.accepted += 1;
            }
            Line::Serde(record) => result.take(number + 1, record, out),
        }
        ControlFlow::<()>::Continue(())
    });
}

fn parse_array(body: &[u8], out: &mut Batch, result: &mut NdjsonOutcome) {
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut element = 1;
    let seed = ArraySeed {
        out,
        result: &mut *result,
        element: &mut element,
    };
    let read = seed.deserialize(&mut de).and_then(|()| de.end());
    if read.is_err() {
        // `element` is the element being read when the syntax broke (or one past the last,
        // for bytes after the closing bracket).
        result.reject(element, RejectReason::Malformed);
    }
}

/// A JSON value as far as a record field needs it: no nested values are built.
enum Json<'a> {
    Null,
    Str(Cow<'a, str>),
    U64(u64),
    I64(i64),
    F64(f64),
    /// A boolean, array or object: no field takes one.
    Other,
}

/// A record's known fields as they came, before any rule is applied; `None` is absent.
#[derive(Default)]
struct RawRecord<'a> {
    ts: Option<Json<'a>>,
    group: Option<Json<'a>>,
    shard: Option<Json<'a>>,
    key: Option<Json<'a>>,
    count: Option<Json<'a>>,
    latency_ms: Option<Json<'a>>,
    outcome: Option<Json<'a>>,
    cache: Option<Json<'a>>,
    cache_key: Option<Json<'a>>,
}

/// A record's raw `inflight` and `utilisation` fields, in the order of [`ReadingKind::ALL`].
/// Kept apart from [`RawRecord`], which every record moves: readings are rare, and a wider
/// `RawRecord` cost each record an extra copy.
type RawReadings<'a> = [Option<Json<'a>>; 2];

impl<'a> RawRecord<'a> {
    /// Applies the data-model rules, in the order the module docs give, to a record without
    /// reading fields.
    fn interpret(self) -> Result<Record<'a>, RejectReason> {
        let record = self.fields()?;
        record.validate()?;
        Ok(record)
    }

    /// [`RawRecord::interpret`] for a record with reading fields; out of line, as few records
    /// carry readings and the others should not pay for reading them.
    #[cold]
    #[inline(never)]
    fn interpret_with(self, readings: RawReadings<'_>) -> Result<Record<'a>, RejectReason> {
        let mut record = self.fields()?;
        let [inflight, utilisation] = readings;
        let values = [optional_number(inflight)?, optional_number(utilisation)?];
        // Fields given as `null` are absent: a record with nothing else stands as it would
        // without them.
        if values.iter().any(Option::is_some) {
            record.readings = Some(Box::new(values));
        }
        record.validate()?;
        Ok(record)
    }

    /// The fields read by their own rules, before the data-model rules.
    #[inline(always)]
    fn fields(self) -> Result<Record<'a>, RejectReason> {
        let group = required_str(self.group, RejectReason::MissingGroup)?;
        let shard = required_str(self.shard, RejectReason::MissingShard)?;
        let key = match present(self.key) {
            None => None,
            Some(Json::Str(s)) => Some(s),
            Some(_) => return Err(RejectReason::WrongType),
        };
        let count = match present(self.count) {
            None => 1,
            Some(Json::U64(n)) => n,
            // serde_json reads non-negative integers as u64, so an i64 is negative.
            Some(Json::I64(_) | Json::F64(_)) => return Err(RejectReason::BadCount),
            Some(_) => return Err(RejectReason::WrongType),
        };
        let latency_ms = match present(self.latency_ms) {
            None => None,
            Some(j) => Some(number(j).ok_or(RejectReason::WrongType)?),
        };
        let outcome = match present(self.outcome) {
            None => Outcome::Ok,
            Some(Json::Str(s)) => Outcome::parse(&s).ok_or(RejectReason::UnknownOutcome)?,
            Some(_) => return Err(RejectReason::WrongType),
        };
        let cache = match present(self.cache) {
            None => None,
            Some(Json::Str(s)) => Some(CacheResult::parse(&s).ok_or(RejectReason::BadCache)?),
            Some(_) => return Err(RejectReason::WrongType),
        };
        let cache_key = match present(self.cache_key) {
            None => None,
            Some(Json::Str(s)) => Some(hash_cache_key(s.as_bytes())?),
            Some(_) => return Err(RejectReason::WrongType),
        };
        let ts = match present(self.ts) {
            None => None,
            Some(Json::Str(s)) => Some(parse_rfc3339(&s)?),
            Some(j) => Some(number(j).ok_or(RejectReason::WrongType)?),
        };
        Ok(Record {
            ts: PackedF64::new(ts),
            group,
            shard,
            key,
            count,
            latency_ms,
            outcome,
            cache,
            cache_key,
            readings: None,
        })
    }
}

/// A field that is there and not `null`.
fn present(field: Option<Json<'_>>) -> Option<Json<'_>> {
    field.filter(|j| !matches!(j, Json::Null))
}

fn required_str<'a>(
    field: Option<Json<'a>>,
    missing: RejectReason,
) -> Result<Cow<'a, str>, RejectReason> {
    match present(field) {
        None => Err(missing),
        Some(Json::Str(s)) => Ok(s),
        Some(_) => Err(RejectReason::WrongType),
    }
}

/// An optional numeric field: absent or `null` is `None`, any other JSON type `WrongType`.
fn optional_number(field: Option<Json<'_>>) -> Result<Option<f64>, RejectReason> {
    match present(field) {
        None => Ok(None),
        Some(j) => number(j).map(Some).ok_or(RejectReason::WrongType),
    }
}

fn number(j: Json<'_>) -> Option<f64> {
    match j {
        Json::U64(n) => Some(n as f64),
        Json::I64(n) => Some(n as f64),
        Json::F64(f) => Some(f),
        _ => None,
    }
}

/// Names of the fields a record reads; anything else is skipped.
enum Field {
    Ts,
    Group,
    Shard,
    Key,
    Count,
    LatencyMs,
    Outcome,
    Cache,
    CacheKey,
    Inflight,
    Utilisation,
    Unknown,
}

impl<'de> de::Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

struct FieldVisitor;

impl Visitor<'_> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Field, E> {
        Ok(match name {
            "ts" => Field::Ts,
            "group" => Field::Group,
            "shard" => Field::Shard,
            "key" => Field::Key,
            "count" => Field::Count,
            "latency_ms" => Field::LatencyMs,
            "outcome" => Field::Outcome,
            "cache" => Field::Cache,
            "cache_key" => Field::CacheKey,
            "inflight" => Field::Inflight,
            "utilisation" => Field::Utilisation,
            _ => Field::Unknown,
        })
    }
}

impl<'de> de::Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Json::Other)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Json::U64(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Json::I64(n))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Self::Value, E> {
        Ok(Json::F64(f))
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        // Only strings with escapes get here: they had to be unescaped into a scratch buffer.
        Ok(Json::Str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Owned(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Json::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Json::Other)
    }
}

/// Reads one record into `raw`, in place: the record is large enough that returning it
/// through serde's layers showed up as copying. Yields `false` for a JSON value that is not
/// an object (consumed whole, so an array body can go on to its next element); an `Err` is a
/// JSON syntax error.
struct RawSeed<'r, 'de> {
    raw: &'r mut RawRecord<'de>,
    readings: &'r mut RawReadings<'de>,
}

impl<'de> RawRecord<'de> {
    /// [`RawRecord::interpret`], or [`RawRecord::interpret_with`] when `readings` holds a field.
    fn interpret_read(self, readings: RawReadings<'de>) -> Result<Record<'de>, RejectReason> {
        if readings.iter().all(Option::is_none) {
            self.interpret()
        } else {
            self.interpret_with(readings)
        }
    }
}

impl<'de> DeserializeSeed<'de> for RawSeed<'_, 'de> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RawSeed<'_, 'de> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an observation object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let (raw, readings) = (self.raw, self.readings);
        while let Some(field) = map.next_key::<Field>()? {
            let slot = match field {
                Field::Ts => &mut raw.ts,
                Field::Group => &mut raw.group,
                Field::Shard => &mut raw.shard,
                Field::Key => &mut raw.key,
                Field::Count => &mut raw.count,
                Field::LatencyMs => &mut raw.latency_ms,
                Field::Outcome => &mut raw.outcome,
                Field::Cache => &mut raw.cache,
                Field::CacheKey => &mut raw.cache_key,
                Field::Inflight => &mut readings[ReadingKind::Inflight as usize],
                Field::Utilisation => &mut readings[ReadingKind::Utilisation as usize],
                Field::Unknown => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value::<Json<'de>>()?);
        }
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
}

/// Reads an array body element by element, taking each record as soon as it is read.
struct ArraySeed<'s> {
    out: &'s mut Batch,
    result: &'s mut NdjsonOutcome,
    /// 1-based number of the element being read.
    element: &'s mut usize,
}

impl<'de> DeserializeSeed<'de> for ArraySeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ArraySeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of observation objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let mut raw = RawRecord::default();
            let mut readings = RawReadings::default();
            let seed = RawSeed {
                raw: &mut raw,
                readings: &mut readings,
            };
            let record = match seq.next_element_seed(seed)? {
                None => return Ok(()),
                Some(true) => raw.interpret_read(readings),
                Some(false) => Err(RejectReason::Malformed),
            };
            self.result.take(*self.element, record, self.out);
            *self.element += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(line: &str) -> ObservationRef<'static> {
        // Leaked so the test can hold the borrowed observation; tests only.
        let line: &'static str = Box::leak(line.to_owned().into_boxed_str());
        let record: &'static Record<'static> = match parse_record(line.as_bytes()) {
            Ok(r) => Box::leak(Box::new(r)),
            Err(reason) => panic!("{line:?} rejected: {reason:?}"),
        };
        record.observation()
    }

    fn err(line: &str) -> RejectReason {
        match parse_record(line.as_bytes()) {
            Ok(r) => panic!("{line:?} accepted: {r:?}"),
            Err(reason) => reason,
        }
    }

    #[test]
    fn parses_a_full_record() {
        let obs = ok(
            r#"{"ts":1700000000.5,"group":"db","shard":"s1","key":"u42","count":3,"latency_ms":12.5,"outcome":"throttled","cache":"hit"}"#,
        );
        assert_eq!(
            obs,
            ObservationRef {
                ts: Some(1_700_000_000.5),
                group: "db",
                shard: "s1",
                key: Some("u42"),
                count: 3,
                latency_ms: Some(12.5),
                outcome: Outcome::Throttled,
                cache: Some(CacheResult::Hit),
                cache_key: None,
            }
        );
    }

    #[test]
    fn a_cache_key_is_kept_as_its_hash_on_both_paths_and_checked() {
        let fast = ok(r#"{"group":"db","shard":"s1","cache_key":"user:42"}"#);
        // An escape sends the record to the serde path, which hashes the unescaped key.
        let serde = ok(r#"{"group":"db","shard":"s1","cache_key":"user:42"}"#);
        let want = Some(hash_cache_key(b"user:42").unwrap());
        assert_eq!((fast.cache_key, serde.cache_key), (want, want));
        for (line, reason) in [
            (
                r#"{"group":"g","shard":"s","cache_key":""}"#,
                RejectReason::FieldLength,
            ),
            (
                r#"{"group":"g","shard":"s","cache_key":7}"#,
                RejectReason::WrongType,
            ),
            (
                r#"{"group":"g","shard":"s","cache_key":["a"]}"#,
                RejectReason::WrongType,
            ),
        ] {
            assert_eq!(parse_record(line.as_bytes()).unwrap_err(), reason, "{line}");
        }
        let long = format!(
            r#"{{"group":"g","shard":"s","cache_key":"{}"}}"#,
            "k".repeat(1025)
        );
        assert_eq!(
            parse_record(long.as_bytes()).unwrap_err(),
            RejectReason::FieldLength
        );
        let absent = ok(r#"{"group":"g","shard":"s","cache_key":null}"#);
        assert_eq!(absent.cache_key, None);
    }

    #[test]
    fn saturation_readings_are_read_on_both_paths_and_checked() {
        let line =
            br#"{"ts":5,"group":"db","shard":"s1","count":0,"inflight":42,"utilisation":0.85}"#;
        // The fast path leaves readings to the serde path.
        assert!(fast::record(line).is_none());
        let record = parse_record(line).unwrap();
        assert!(!record.stands_for_requests());
        let readings: Vec<_> = record.readings().collect();
        let reading = |kind, value| ReadingRef {
            ts: Some(5.0),
            group: "db",
            shard: "s1",
            kind,
            value,
        };
        assert_eq!(
            readings,
            [
                reading(ReadingKind::Inflight, 42.0),
                reading(ReadingKind::Utilisation, 0.85)
            ]
        );
        // A request may carry a reading too; count keeps its default of one.
        let record =
            parse_record(br#"{"group":"db","shard":"s1","latency_ms":3,"inflight":7}"#).unwrap();
        let array = br#"[{"group":"db","shard":"s1","latency_ms":3,"inflight":7}]"#;
        let mut batch = Batch::default();
        assert_eq!(parse_body(array, &mut batch).accepted, 1);
        assert_eq!(batch.readings().map(|r| r.value).collect::<Vec<_>>(), [7.0]);
        assert!(record.stands_for_requests());
        assert_eq!(record.observation().count, 1);
        assert_eq!(
            record.readings().map(|r| r.value).collect::<Vec<_>>(),
            [7.0]
        );
        // Without a reading, count 0 stands for nothing and stays rejected.
        assert_eq!(
            err(r#"{"group":"db","shard":"s1","count":0}"#),
            RejectReason::BadCount
        );
        for (line, reason) in [
            (
                r#"{"group":"d","shard":"s","count":0,"utilisation":1.5}"#,
                RejectReason::BadGauge,
            ),
            (
                r#"{"group":"d","shard":"s","utilisation":-0.1}"#,
                RejectReason::BadGauge,
            ),
            (
                r#"{"group":"d","shard":"s","inflight":2e9}"#,
                RejectReason::BadGauge,
            ),
            (
                r#"{"group":"d","shard":"s","inflight":"5"}"#,
                RejectReason::WrongType,
            ),
            // A reading given as null is absent, so count 0 stands for nothing again.
            (
                r#"{"group":"d","shard":"s","count":0,"inflight":null}"#,
                RejectReason::BadCount,
            ),
            // The request fields keep their rules on a record of readings alone.
            (
                r#"{"group":"d","shard":"s","count":0,"inflight":1,"latency_ms":-1}"#,
                RejectReason::BadLatency,
            ),
        ] {
            assert_eq!(err(line), reason, "{line}");
        }
    }

    #[test]
    fn a_body_puts_readings_beside_the_observations_and_keeps_good_records_around_a_bad_one() {
        let body = br#"{"group":"db","shard":"s1","latency_ms":2}
{"group":"db","shard":"s1","count":0,"utilisation":0.9}
{"group":"db","shard":"s2","count":0,"utilisation":1.9}
{"group":"db","shard":"s2","count":2,"inflight":3}
"#;
        let mut batch = Batch::default();
        let outcome = parse_body(body, &mut batch);
        assert_eq!(outcome.accepted, 3);
        assert_eq!(outcome.rejected.get(RejectReason::BadGauge), 1);
        assert_eq!(
            outcome.errors,
            [LineError {
                line: 3,
                reason: RejectReason::BadGauge
            }]
        );
        let requests: Vec<_> = batch.iter().map(|o| (o.shard, o.count)).collect();
        assert_eq!(requests, [("s1", 1), ("s2", 2)]);
        let readings: Vec<_> = batch
            .readings()
            .map(|r| (r.shard, r.kind, r.value))
            .collect();
        assert_eq!(
            readings,
            [
                ("s1", ReadingKind::Utilisation, 0.9),
                ("s2", ReadingKind::Inflight, 3.0)
            ]
        );
    }

    #[test]
    fn defaults_for_optional_fields() {
        assert_eq!(
            ok(r#"{"group":"g","shard":"s"}"#),
            ObservationRef::new("g", "s")
        );
        // null is the same as absent.
        let obs = ok(
            r#"{"group":"g","shard":"s","key":null,"count":null,"latency_ms":null,"outcome":null,"cache":null,"ts":null}"#,
        );
        assert_eq!(obs, ObservationRef::new("g", "s"));
    }

    #[test]
    fn empty_key_differs_from_absent_key() {
        assert_eq!(ok(r#"{"group":"g","shard":"s","key":""}"#).key, Some(""));
        assert_eq!(ok(r#"{"group":"g","shard":"s"}"#).key, None);
        assert_eq!(ok(r#"{"group":"g","shard":"s","key":null}"#).key, None);
    }

    #[test]
    fn escaped_strings_are_unescaped() {
        let obs = ok(r#"{"group":"meta\u002ddb","shard":"s\"1\"","key":"a\\b\nc"}"#);
        assert_eq!(obs.group, "meta-db");
        assert_eq!(obs.shard, "s\"1\"");
        assert_eq!(obs.key, Some("a\\b\nc"));
        // An escaped field name is still that field.
        assert_eq!(ok(r#"{"gro\u0075p":"g","shard":"s"}"#).group, "g");
    }

    #[test]
    fn unknown_fields_are_ignored_and_duplicates_take_the_last_value() {
        let obs = ok(
            r#"{"env":"prod","nested":{"a":[1,2,{"b":null}]},"group":"g","shard":"s","shard":"t","tags":["x"],"flag":true}"#,
        );
        assert_eq!((obs.group, obs.shard), ("g", "t"));
    }

    #[test]
    fn missing_group_or_shard() {
        assert_eq!(err(r#"{"shard":"s"}"#), RejectReason::MissingGroup);
        assert_eq!(err(r#"{"group":"g"}"#), RejectReason::MissingShard);
        assert_eq!(err(r#"{}"#), RejectReason::MissingGroup);
        assert_eq!(
            err(r#"{"group":null,"shard":"s"}"#),
            RejectReason::MissingGroup
        );
    }

    #[test]
    fn wrong_types() {
        for line in [
            r#"{"group":5,"shard":"s"}"#,
            r#"{"group":"g","shard":["s"]}"#,
            r#"{"group":"g","shard":"s","key":7}"#,
            r#"{"group":"g","shard":"s","count":"3"}"#,
            r#"{"group":"g","shard":"s","count":true}"#,
            r#"{"group":"g","shard":"s","latency_ms":"12"}"#,
            r#"{"group":"g","shard":"s","outcome":1}"#,
            r#"{"group":"g","shard":"s","cache":false}"#,
            r#"{"group":"g","shard":"s","ts":{"s":1}}"#,
        ] {
            assert_eq!(err(line), RejectReason::WrongType, "{line}");
        }
    }

    #[test]
    fn count_must_be_an_integer_of_at_least_one() {
        assert_eq!(ok(r#"{"group":"g","shard":"s","count":7}"#).count, 7);
        for c in [
            "0",
            "-1",
            "1.5",
            "2.0",
            "1e3",
            "18446744073709551616",
            "1099511627777",
        ] {
            let line = format!(r#"{{"group":"g","shard":"s","count":{c}}}"#);
            assert_eq!(err(&line), RejectReason::BadCount, "{c}");
        }
    }

    #[test]
    fn latency_rules() {
        assert_eq!(
            ok(r#"{"group":"g","shard":"s","latency_ms":0}"#).latency_ms,
            Some(0.0)
        );
        assert_eq!(
            ok(r#"{"group":"g","shard":"s","latency_ms":2e1}"#).latency_ms,
            Some(20.0)
        );
        assert_eq!(
            err(r#"{"group":"g","shard":"s","latency_ms":-1}"#),
            RejectReason::BadLatency
        );
        assert_eq!(
            err(r#"{"group":"g","shard":"s","latency_ms":-0.5}"#),
            RejectReason::BadLatency
        );
        assert_eq!(
            err(r#"{"group":"g","shard":"s","latency_ms":1e12}"#),
            RejectReason::BadLatency
        );
        // JSON has no NaN or Infinity literal: such a line is not JSON.
        assert_eq!(
            err(r#"{"group":"g","shard":"s","latency_ms":NaN}"#),
            RejectReason::Malformed
        );
        assert_eq!(
            err(r#"{"group":"g","shard":"s","latency_ms":Infinity}"#),
            RejectReason::Malformed
        );
        assert_eq!(
            err(r#"{"group":"g","shard":"s","latency_ms":1e999}"#),
            RejectReason::Malformed
        );
    }

    #[test]
    fn outcome_and_cache_values() {
        for o in Outcome::ALL {
            let line = format!(r#"{{"group":"g","shard":"s","outcome":"{o}"}}"#);
            assert_eq!(ok(&line).outcome, o);
        }
        assert_eq!(
            err(r#"{"group":"g","shard":"s","outcome":"fail"}"#),
            RejectReason::UnknownOutcome
        );
        assert_eq!(
            err(r#"{"group":"g","shard":"s","outcome":"OK"}"#),
            RejectReason::UnknownOutcome
        );
        assert_eq!(
            ok(r#"{"group":"g","shard":"s","cache":"miss"}"#).cache,
            Some(CacheResult::Miss)
        );
        assert_eq!(
            err(r#"{"group":"g","shard":"s","cache":"HIT"}"#),
            RejectReason::BadCache
        );
    }

    #[test]
    fn overlong_and_empty_fields() {
        let long = "x".repeat(129);
        assert_eq!(
            err(&format!(r#"{{"group":"{long}","shard":"s"}}"#)),
            RejectReason::FieldLength
        );
        assert_eq!(
            err(&format!(r#"{{"group":"g","shard":"{long}"}}"#)),
            RejectReason::FieldLength
        );
        let key = "k".repeat(257);
        let line = format!(r#"{{"group":"g","shard":"s","key":"{key}"}}"#);
        assert_eq!(err(&line), RejectReason::FieldLength);
        let key = "k".repeat(256);
        let line = format!(r#"{{"group":"g","shard":"s","key":"{key}"}}"#);
        assert_eq!(ok(&line).key.map(str::len), Some(256));
        assert_eq!(
            err(r#"{"group":"","shard":"s"}"#),
            RejectReason::FieldLength
        );
        // Lengths count the unescaped bytes: 128 escaped `a`s are 128 bytes.
        let escaped = r"\u0061".repeat(128);
        assert_eq!(
            ok(&format!(r#"{{"group":"{escaped}","shard":"s"}}"#))
                .group
                .len(),
            128
        );
    }

    #[test]
    fn timestamps_numeric_and_rfc3339() {
        assert_eq!(
            ok(r#"{"group":"g","shard":"s","ts":1700000000}"#).ts,
            Some(1_700_000_000.0)
        );
        assert_eq!(
            ok(r#"{"group":"g","shard":"s","ts":1700000000.25}"#).ts,
            Some(1_700_000_000.25)
        );
        assert_eq!(
            ok(r#"{"group":"g","shard":"s","ts":"2023-11-14T22:13:20Z"}"#).ts,
            Some(1_700_000_000.0)
        );
        assert_eq!(
            ok(r#"{"group":"g","shard":"s","ts":"2023-11-15T00:13:20.5+02:00"}"#).ts,
            Some(1_700_000_000.5)
        );
        for bad in [
            r#""yesterday""#,
            r#""2023-11-14 22:13:20""#,
            r#""2023-11-14""#,
            r#""""#,
        ] {
            let line = format!(r#"{{"group":"g","shard":"s","ts":{bad}}}"#);
            assert_eq!(err(&line), RejectReason::BadTimestamp, "{bad}");
        }
        assert_eq!(parse_timestamp(&serde_json::json!(12.5)), Ok(12.5));
        assert_eq!(
            parse_timestamp(&serde_json::json!("1970-01-01T00:00:01Z")),
            Ok(1.0)
        );
        assert_eq!(
            parse_timestamp(&serde_json::json!(true)),
            Err(RejectReason::WrongType)
        );
        assert_eq!(
            parse_timestamp(&serde_json::json!("x")),
            Err(RejectReason::BadTimestamp)
        );
    }

    #[test]
    fn garbage_and_non_objects_are_malformed() {
        for line in [
            "hello",
            "{",
            r#"{"group":"g","shard":"s"} trailing"#,
            r#"{"group":"g","shard":"s"}{"group":"g","shard":"s"}"#,
            r#"{"group":"g",,"shard":"s"}"#,
            "5",
            r#""group""#,
            "null",
            "[]",
            "\u{feff}{}",
        ] {
            assert_eq!(err(line), RejectReason::Malformed, "{line:?}");
        }
        assert_eq!(
            parse_record(b"{\"group\":\"g\xff\",\"shard\":\"s\"}"),
            Err(RejectReason::Malformed)
        );
        assert_eq!(
            parse_record(b"\xff\xfe\x00\x01"),
            Err(RejectReason::Malformed)
        );
    }

    #[test]
    fn deep_nesting_does_not_overflow_the_stack() {
        let (open, close) = ("[".repeat(100_000), "]".repeat(100_000));
        // Skipped values are skipped without recursion, so an unknown field may nest deeply.
        assert_eq!(
            ok(&format!(r#"{{"group":"g","shard":"s","x":{open}{close}}}"#)).group,
            "g"
        );
        assert_eq!(
            err(&format!(
                r#"{{"group":"g","shard":"s","key":{open}{close}}}"#
            )),
            RejectReason::WrongType
        );
        assert_eq!(err(&format!("{open}{close}")), RejectReason::Malformed);
        assert_eq!(
            err(&format!(r#"{{"group":"g","shard":"s","x":{open}}}"#)),
            RejectReason::Malformed
        );
        let result = parse_body(format!("{open}{close}").as_bytes(), &mut Batch::default());
        assert_eq!(result.rejected.total(), 1);
    }

    #[test]
    fn ndjson_body_keeps_good_lines_around_bad_ones() {
        let body = b"{\"group\":\"g\",\"shard\":\"a\"}\r\n\
            not json\n\
            \n\
            {\"group\":\"g\",\"shard\":\"b\",\"key\":\"\"}\n   \n\
            {\"group\":\"g\",\"shard\":\"c\",\"latency_ms\":-3}\n\
            {\"shard\":\"d\"}\n\
            {\"group\":\"g\",\"shard\":\"e\",\"count\":5}";
        let mut batch = Batch::default();
        let result = parse_body(body, &mut batch);
        assert_eq!(result.accepted, 3);
        let got: Vec<_> = batch.iter().map(|o| (o.shard, o.key, o.count)).collect();
        assert_eq!(
            got,
            vec![("a", None, 1), ("b", Some(""), 1), ("e", None, 5)]
        );
        assert_eq!(result.rejected.total(), 3);
        assert_eq!(
            result.errors,
            vec![
                LineError {
                    line: 2,
                    reason: RejectReason::Malformed
                },
                LineError {
                    line: 6,
                    reason: RejectReason::BadLatency
                },
                LineError {
                    line: 7,
                    reason: RejectReason::MissingGroup
                },
            ]
        );
    }

    #[test]
    fn array_body_is_read_element_by_element() {
        let body = br#"  [
            {"group":"g","shard":"a"},
            {"group":5,"shard":"b"},
            "not an object",
            [1, 2],
            {"group":"g","shard":"c","outcome":"nope"},
            {"group":"g","shard":"d","key":"k\u00e9"}
        ]
        "#;
        let mut batch = Batch::default();
        let result = parse_body(body, &mut batch);
        assert_eq!(result.accepted, 2);
        let got: Vec<_> = batch.iter().map(|o| (o.shard, o.key)).collect();
        assert_eq!(got, vec![("a", None), ("d", Some("ké"))]);
        assert_eq!(
            result.errors,
            vec![
                LineError {
                    line: 2,
                    reason: RejectReason::WrongType
                },
                LineError {
                    line: 3,
                    reason: RejectReason::Malformed
                },
                LineError {
                    line: 4,
                    reason: RejectReason::Malformed
                },
                LineError {
                    line: 5,
                    reason: RejectReason::UnknownOutcome
                },
            ]
        );
    }

    #[test]
    fn array_body_syntax_error_keeps_the_elements_before_it() {
        let body = br#"[{"group":"g","shard":"a"},{"group":"g","shard":"b"},{"group":"g" "shard":"c"},{"group":"g","shard":"d"}]"#;
        let mut batch = Batch::default();
        let result = parse_body(body, &mut batch);
        assert_eq!(result.accepted, 2);
        assert_eq!(result.rejected.total(), 1);
        assert_eq!(
            result.errors,
            vec![LineError {
                line: 3,
                reason: RejectReason::Malformed
            }]
        );

        let mut batch = Batch::default();
        let result = parse_body(br#"[{"group":"g","shard":"a"}] junk"#, &mut batch);
        assert_eq!(result.accepted, 1);
        assert_eq!(
            result.errors,
            vec![LineError {
                line: 2,
                reason: RejectReason::Malformed
            }]
        );

        let result = parse_body(b"[", &mut Batch::default());
        assert_eq!(
            result.errors,
            vec![LineError {
                line: 1,
                reason: RejectReason::Malformed
            }]
        );
        let result = parse_body(b" [ ] ", &mut Batch::default());
        assert_eq!(result, NdjsonOutcome::default());
    }

    #[test]
    fn empty_and_blank_bodies_take_nothing() {
        for body in [&b""[..], b"\n\n", b"  \r\n\t\n", b"\xEF\xBB\xBF"] {
            assert_eq!(
                parse_body(body, &mut Batch::default()),
                NdjsonOutcome::default()
            );
        }
        // A byte order mark before the first record is skipped.
        let result = parse_body(
            b"\xEF\xBB\xBF{\"group\":\"g\",\"shard\":\"s\"}",
            &mut Batch::default(),
        );
        assert_eq!(result.accepted, 1);
    }

    #[test]
    fn a_byte_that_is_not_utf8_costs_only_its_line() {
        let body = b"{\"group\":\"g\",\"shard\":\"a\"}\n\
            {\"group\":\"g\xff\",\"shard\":\"s\"}\n\
            {\"group\":\"g\",\"shard\":\"b\"}\n\
            \xe2\x82\n\
            {\"group\":\"g\",\"shard\":\"c\",\"key\":\"\xc3\xa9\"}";
        let mut batch = Batch::default();
        let result = parse_body(body, &mut batch);
        let got: Vec<_> = batch.iter().map(|o| (o.shard, o.key)).collect();
        assert_eq!(got, vec![("a", None), ("b", None), ("c", Some("\u{e9}"))]);
        assert_eq!(
            result.errors,
            vec![
                LineError {
                    line: 2,
                    reason: RejectReason::Malformed
                },
                LineError {
                    line: 4,
                    reason: RejectReason::Malformed
                },
            ]
        );
    }

    #[test]
    fn errors_are_capped_but_counts_are_not() {
        let body = "x\n".repeat(50);
        let result = parse_body(body.as_bytes(), &mut Batch::default());
        assert_eq!(result.rejected.get(RejectReason::Malformed), 50);
        assert_eq!(result.errors.len(), MAX_LINE_ERRORS);
        assert_eq!(result.errors[19].line, 20);
    }

    fn non_blank_lines(body: &[u8]) -> usize {
        body.split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(|&b| is_json_whitespace(b)))
            .count()
    }

    fn line_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..80),
            proptest::collection::vec(
                prop_oneof![
                    Just(&br#"{"group":"g","#[..]),
                    Just(&br#""shard":"s""#[..]),
                    Just(&br#""key":"""#[..]),
                    Just(&br#""count":2"#[..]),
                    Just(&br#""latency_ms":-1"#[..]),
                    Just(&br#""ts":"2024-01-01T00:00:00Z""#[..]),
                    Just(&br#""outcome":"error""#[..]),
                    Just(&b"\"\\u00e9\""[..]),
                    Just(&b"{"[..]),
                    Just(&b"}"[..]),
                    Just(&b"["[..]),
                    Just(&b"]"[..]),
                    Just(&b","[..]),
                    Just(&b":"[..]),
                    Just(&b"\n"[..]),
                    Just(&b"\xff"[..]),
                    Just(&b"null"[..]),
                ],
                0..12
            )
            .prop_map(|parts| parts.concat()),
        ]
    }

    /// Object records built from pieces the fast path takes and pieces it must decline:
    /// escapes, nested values, negative and exponent numbers, leading zeros, long digit
    /// strings, non-JSON whitespace, duplicate and unknown fields, trailing garbage.
    fn object_strategy() -> impl Strategy<Value = String> {
        let name = prop_oneof![
            Just("ts"),
            Just("group"),
            Just("shard"),
            Just("key"),
            Just("count"),
            Just("latency_ms"),
            Just("outcome"),
            Just("cache"),
            Just("cache_key"),
            Just("inflight"),
            Just("utilisation"),
            Just("other"),
            Just(r"gr\u006fup"),
            // Near misses of the names the fast path matches in place.
            Just("tsx"),
            Just("t"),
            Just("cach"),
            Just("counts"),
            Just("latency_msx"),
            Just("inflights"),
            Just(""),
        ];
        let value = prop_oneof![
            "\"[a-z0-9:_-]{0,12}\"",
            "\"(ok|error|hit|miss|not_found|2024-01-01T00:00:00Z|\u{e9}t\u{e9})\"",
            Just(r#""a\"b""#.to_string()),
            Just(r#""\u00e9""#.to_string()),
            Just("\"tab\there\"".to_string()),
            "(0|[1-9][0-9]{0,20})(\\.[0-9]{0,18})?",
            "[0-9]{1,6}(\\.[0-9]{1,4})?[eE][+-]?[0-9]{1,3}",
            "-[0-9]{1,5}(\\.[0-9]{1,3})?",
            "0[0-9]{1,3}",
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            Just("nul".to_string()),
            Just(String::new()),
            Just("{}".to_string()),
            Just("[1,2]".to_string()),
            Just(r#"{"a":[null]}"#.to_string()),
        ];
        let ws = prop_oneof![
            4 => Just(""),
            1 => Just(" "),
            1 => Just("\t"),
            1 => Just("\r\n"),
            1 => Just("\u{c}"),
        ];
        let field = (ws.clone(), name, ws.clone(), value, ws)
            .prop_map(|(a, n, b, v, c)| format!("{a}\"{n}\"{b}:{v}{c}"));
        let tail = prop_oneof![4 => Just(""), 1 => Just("\n"), 1 => Just(" x"), 1 => Just(",")];
        (proptest::collection::vec(field, 0..9), tail)
            .prop_map(|(fields, tail)| format!("{{{}}}{tail}", fields.join(",")))
    }

    #[test]
    fn typical_records_take_the_fast_path() {
        for line in [
            &br#"{"ts":1700000000.125,"group":"db","shard":"s1","key":"user:4","count":3,"latency_ms":12.5,"outcome":"error","cache":"miss"}"#[..],
            br#" { "group" : "g" , "shard":"s", "extra": null, "latency_ms": 0.25 } "#,
            b"{\"group\":\"g\",\"shard\":\"s\",\"key\":\"\",\"latency_ms\":3}\r\n",
            br#"{"ts":"2024-05-01T12:00:00.250Z","group":"g","shard":"s","cache":"hit","outcome":"timeout"}"#,
            br#"{"ts":null,"group":"g","shard":"s","key":null,"count":null,"latency_ms":null,"outcome":null,"cache":null}"#,
        ] {
            let fast = fast::record(line).map(Ok);
            assert_eq!(fast, Some(parse_record_serde(line)), "{}", String::from_utf8_lossy(line));
        }
        // Nested values, escapes and negative numbers go to serde.
        for line in [
            &br#"{"group":"g","shard":"s","extra":[1]}"#[..],
            br#"{"group":"g\u00e9","shard":"s"}"#,
            br#"{"group":"g","shard":"s","latency_ms":-1}"#,
        ] {
            assert!(
                fast::record(line).is_none(),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn invalid_records_are_left_to_serde_which_names_the_reason() {
        for (line, reason) in [
            (&br#"{"shard":"s"}"#[..], RejectReason::MissingGroup),
            (br#"{"group":"g","shard":null}"#, RejectReason::MissingShard),
            (
                br#"{"group":"g","shard":"s","key":1}"#,
                RejectReason::WrongType,
            ),
            (
                br#"{"group":"g","shard":"s","count":0}"#,
                RejectReason::BadCount,
            ),
            (
                br#"{"group":"g","shard":"s","count":1.5}"#,
                RejectReason::BadCount,
            ),
            (
                br#"{"group":"g","shard":"s","latency_ms":true}"#,
                RejectReason::WrongType,
            ),
            (
                br#"{"group":"g","shard":"s","latency_ms":1e9}"#,
                RejectReason::BadLatency,
            ),
            (
                br#"{"group":"g","shard":"s","latency_ms":99999999999}"#,
                RejectReason::BadLatency,
            ),
            (
                br#"{"group":"g","shard":"s","outcome":"nope"}"#,
                RejectReason::UnknownOutcome,
            ),
            (
                br#"{"group":"g","shard":"s","cache":"warm"}"#,
                RejectReason::BadCache,
            ),
            (
                br#"{"group":"g","shard":"s","ts":"yesterday"}"#,
                RejectReason::BadTimestamp,
            ),
            (br#"{"group":"","shard":"s"}"#, RejectReason::FieldLength),
            // A field with no value is not JSON.
            (
                br#"{"group":"g","shard":"s","latency_ms":,"x":1}"#,
                RejectReason::Malformed,
            ),
            (
                br#"{"group":"g","shard":"s","count":}"#,
                RejectReason::Malformed,
            ),
            (
                br#"{"ts":,"group":"g","shard":"s"}"#,
                RejectReason::Malformed,
            ),
        ] {
            let text = String::from_utf8_lossy(line);
            assert!(fast::record(line).is_none(), "{text}");
            assert_eq!(parse_record(line), Err(reason), "{text}");
        }
        // A bad value that a later duplicate replaces also goes to serde, which takes the
        // record with the last values.
        let line =
            br#"{"group":"g","shard":"s","count":"x","count":7,"outcome":"nope","outcome":"ok"}"#;
        assert!(fast::record(line).is_none());
        assert_eq!(parse_record(line).map(|r| r.observation().count), Ok(7));
    }

    proptest! {
        #[test]
        fn the_fast_path_takes_only_what_serde_takes(line in object_strategy()) {
            if let Some(record) = fast::record(line.as_bytes()) {
                prop_assert_eq!(Ok(record), parse_record_serde(line.as_bytes()));
            }
        }

        #[test]
        fn fast_path_agrees_with_serde(line in object_strategy()) {
            prop_assert_eq!(parse_record(line.as_bytes()), parse_record_serde(line.as_bytes()));
        }

        /// `parse_body` pushes the fast path's records without building a `Record`: the same
        /// batch and outcome as `parse_record` on each line, taken one by one.
        #[test]
        fn parse_body_is_parse_record_on_each_line(
            lines in proptest::collection::vec(
                prop_oneof![line_strategy(), object_strategy().prop_map(String::into_bytes)],
                0..8,
            ),
        ) {
            let body = lines.join(&b'\n');
            prop_assume!(body.iter().find(|&&b| !is_json_whitespace(b)) != Some(&b'['));
            let mut got = Batch::default();
            let got_result = parse_body(&body, &mut got);
            let mut want = Batch::default();
            let mut want_result = NdjsonOutcome::default();
            for (number, line) in body.split(|&b| b == b'\n').enumerate() {
                if !line.iter().all(|&b| is_json_whitespace(b)) {
                    want_result.take(number + 1, parse_record(line), &mut want);
                }
            }
            prop_assert_eq!(got_result, want_result);
            prop_assert_eq!(
                got.iter_with_cache_keys().collect::<Vec<_>>(),
                want.iter_with_cache_keys().collect::<Vec<_>>()
            );
            prop_assert_eq!(
                got.readings().collect::<Vec<_>>(),
                want.readings().collect::<Vec<_>>()
            );
        }

        #[test]
        fn for_each_line_is_parse_record_on_each_line(
            lines in proptest::collection::vec(
                prop_oneof![line_strategy(), object_strategy().prop_map(String::into_bytes)],
                0..8,
            ),
            newline_at_end in any::<bool>(),
        ) {
            let mut body = lines.join(&b'\n');
            if newline_at_end {
                body.push(b'\n');
            }
            let mut got = Vec::new();
            let read = for_each_line(&body, |number, record| {
                got.push((number, record));
                ControlFlow::<()>::Continue(())
            });
            let want: Vec<_> = body
                .split(|&b| b == b'\n')
                .enumerate()
                .filter(|(_, line)| !line.iter().all(|&b| is_json_whitespace(b)))
                .map(|(number, line)| (number, parse_record(line)))
                .collect();
            prop_assert_eq!(got, want);
            let newlines = body.iter().filter(|&&b| b == b'\n').count();
            let lines = newlines + usize::from(body.last().is_some_and(|&b| b != b'\n'));
            prop_assert_eq!(read, ControlFlow::Continue(lines));
        }

        #[test]
        fn arbitrary_bodies_never_panic_and_every_line_is_counted(
            lines in proptest::collection::vec(line_strategy(), 0..8)
        ) {
            let body = lines.join(&b'\n');
            let mut batch = Batch::default();
            let result = parse_body(&body, &mut batch);
            // Each accepted record gives its observation, its readings or both.
            let readings = batch.readings().count();
            prop_assert!(result.accepted <= batch.len());
            prop_assert!(batch.len() <= result.accepted + readings);
            prop_assert!(result.errors.len() <= MAX_LINE_ERRORS);
            for obs in batch.iter() {
                prop_assert_eq!(obs.validate(), Ok(()));
            }
            let first = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&body)
                .iter().copied().find(|&b| !is_json_whitespace(b));
            if first != Some(b'[') {
                prop_assert_eq!(
                    result.accepted + result.rejected.total() as usize,
                    non_blank_lines(body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&body))
                );
            }
        }

        #[test]
        fn arbitrary_array_bodies_never_panic(elems in proptest::collection::vec(line_strategy(), 0..8)) {
            let body = [b"[".as_slice(), &elems.join(&b','), b"]"].concat();
            let mut batch = Batch::default();
            let result = parse_body(&body, &mut batch);
            // Each accepted record gives its observation, its readings or both.
            let readings = batch.readings().count();
            prop_assert!(result.accepted <= batch.len());
            prop_assert!(batch.len() <= result.accepted + readings);
            prop_assert!(result.errors.len() <= MAX_LINE_ERRORS);
        }

        #[test]
        fn serialized_records_round_trip(
            group in "\\PC{1,20}",
            shard in "[a-z0-9-]{1,20}",
            key in proptest::option::of("\\PC{0,30}"),
            count in 1u64..1_000_000,
            latency in proptest::option::of(0.0f64..1e6),
            ts in 0.0f64..2e9,
        ) {
            prop_assume!(group.len() <= 128 && key.as_ref().is_none_or(|k| k.len() <= 256));
            let mut v = serde_json::json!({
                "group": group, "shard": shard, "count": count, "ts": ts,
            });
            if let Some(k) = &key { v["key"] = serde_json::json!(k); }
            if let Some(l) = latency { v["latency_ms"] = serde_json::json!(l); }
            let line = serde_json::to_vec(&v).unwrap();
            let record = parse_record(&line).unwrap();
            let obs = record.observation();
            prop_assert_eq!(obs.group, group.as_str());
            prop_assert_eq!(obs.shard, shard.as_str());
            prop_assert_eq!(obs.key, key.as_deref());
            prop_assert_eq!(obs.count, count);
            match (obs.latency_ms, latency) {
                (Some(got), Some(l)) => prop_assert!((got - l).abs() <= l * 4.0 * f64::EPSILON),
                (got, l) => prop_assert_eq!(got, l),
            }
            // serde_json's default float parser may be one ulp off (exact needs its
            // `float_roundtrip` feature); a ulp of a unix time is a fraction of a microsecond.
            let got = obs.ts.unwrap();
            prop_assert!((got - ts).abs() <= ts * 4.0 * f64::EPSILON, "{} vs {}", got, ts);
        }
    }
}
