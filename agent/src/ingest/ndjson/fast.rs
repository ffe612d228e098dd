//! The fast path for the records almost every client sends: one flat JSON object whose values
//! are strings without escapes, plain non-negative numbers, `true`, `false` or `null`.
//!
//! [`record`] reads such a line into the same [`RawRecord`] the serde path builds, or
//! declines (`None`) at the first thing it does not handle: an escape, a nested value, a
//! negative number or an exponent, more digits than an `f64` holds exactly, bytes that are not
//! UTF-8, anything that is not valid JSON, or a saturation reading (`inflight`,
//! `utilisation`: rare, and kept out of [`RawRecord`] so that the other records stay cheap).
//! The caller then runs the serde path, which
//! handles all of JSON and decides what is malformed; so the fast path never has to be right
//! about an error, only about a success. Its numbers are computed exactly as serde_json
//! computes them (an integer as `u64`; a decimal as its digits divided by a power of ten,
//! which is exact and correctly rounded below 2^53 and 10^22). A property test checks that the
//! two paths agree.
//!
//! Cost: one UTF-8 check of the line and one pass over its bytes, strings scanned eight bytes
//! at a time; the serde path spent about six times as many instructions on a typical record
//! (docs/performance.md).

use std::borrow::Cow;

use super::{Json, RawRecord};

/// Digits of a decimal the fast path reads: below 2^53, so the digits are exact in an `f64`.
const MAX_DECIMAL_DIGITS: usize = 15;
/// Digits of an integer the fast path reads: below 2^64.
const MAX_INTEGER_DIGITS: usize = 19;

/// Powers of ten that are exact in an `f64`.
const POW10: [f64; MAX_DECIMAL_DIGITS + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Reads one JSON object (JSON whitespace around it allowed), or declines.
pub(super) fn record(line: &[u8]) -> Option<RawRecord<'_>> {
    let text = std::str::from_utf8(line).ok()?;
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    let mut raw = RawRecord::default();
    // Where a reading field's value goes: any sends the record down the serde path.
    let mut reading = None;
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let (name, next) = string(text, i)?;
            i = skip_ws(b, next);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i = skip_ws(b, i + 1);
            let (value, next) = value(text, i)?;
            if let Some(slot) = slot(&mut raw, &mut reading, name) {
                *slot = Some(value);
            }
            i = skip_ws(b, next);
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(b'}') => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_ws(b, i) == b.len() && reading.is_none()).then_some(raw)
}

/// Where a field's value goes (`reading` for a saturation reading); `None` for a field the
/// record does not read. Duplicates overwrite, so the last one wins, as in the serde path.
fn slot<'r, 'a>(
    raw: &'r mut RawRecord<'a>,
    reading: &'r mut Option<Json<'a>>,
    name: &str,
) -> Option<&'r mut Option<Json<'a>>> {
    Some(match name {
        "ts" => &mut raw.ts,
        "group" => &mut raw.group,
        "shard" => &mut raw.shard,
        "key" => &mut raw.key,
        "count" => &mut raw.count,
        "latency_ms" => &mut raw.latency_ms,
        "outcome" => &mut raw.outcome,
        "cache" => &mut raw.cache,
        "inflight" | "utilisation" => reading,
        _ => return None,
    })
}

/// Index of the first byte at or after `i` that is not JSON whitespace.
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// A value at `i`: its JSON reading and the index after it.
fn value(text: &str, i: usize) -> Option<(Json<'_>, usize)> {
    let b = text.as_bytes();
    match b.get(i)? {
        b'"' => string(text, i).map(|(s, next)| (Json::Str(Cow::Borrowed(s)), next)),
        b'0'..=b'9' => number(b, i),
        b'n' => literal(b, i, b"null", Json::Null),
        b't' => literal(b, i, b"true", Json::Other),
        b'f' => literal(b, i, b"false", Json::Other),
        _ => None,
    }
}

fn literal<'a>(b: &[u8], i: usize, word: &[u8], json: Json<'a>) -> Option<(Json<'a>, usize)> {
    b.get(i..)?
        .starts_with(word)
        .then_some((json, i + word.len()))
}

/// A string without escapes or control characters at `i` (which holds its `"`): its
/// contents and the index after its closing quote.
fn string(text: &str, i: usize) -> Option<(&str, usize)> {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let start = i + 1;
    let end = special_byte(b, start);
    // The closing quote, or decline: a backslash (escape), a control character (invalid
    // JSON) or the end of the line (unterminated).
    if b.get(end) != Some(&b'"') {
        return None;
    }
    Some((text.get(start..end)?, end + 1))
}

/// Index of the first `"`, `\` or control character (below 0x20) at or after `from`, or
/// `b.len()`. Eight bytes at a time: each test is exact for the lowest flagged byte, and only
/// the lowest is read.
fn special_byte(b: &[u8], from: usize) -> usize {
    const LOW: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTE: u64 = LOW * b'"' as u64;
    const BACKSLASH: u64 = LOW * b'\\' as u64;
    const SPACE: u64 = LOW * 0x20;
    let mut i = from;
    while let Some(chunk) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let w = u64::from_le_bytes(*chunk);
        let zero = |x: u64| x.wrapping_sub(LOW) & !x & HIGH;
        // Bytes below 0x20: `w - 0x20..` borrows exactly there (bytes >= 0x80 are masked by
        // `!w`).
        let below_space = w.wrapping_sub(SPACE) & !w & HIGH;
        let hits = zero(w ^ QUOTE) | zero(w ^ BACKSLASH) | below_space;
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return i;
        }
        i += 1;
    }
    b.len()
}

/// A non-negative number without exponent at `i` (which holds a digit), as serde_json reads
/// it: `U64` for an integer, `F64` for a decimal.
fn number(b: &[u8], i: usize) -> Option<(Json<'static>, usize)> {
    let mut j = i;
    let mut mantissa: u64 = 0;
    while let Some(&c @ b'0'..=b'9') = b.get(j) {
        mantissa = mantissa.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
        j += 1;
    }
    let int_digits = j - i;
    // JSON allows no leading zero; more integer digits than a u64 holds go to serde.
    if (int_digits > 1 && b.get(i) == Some(&b'0')) || int_digits > MAX_INTEGER_DIGITS {
        return None;
    }
    if b.get(j) != Some(&b'.') {
        return match b.get(j) {
            Some(b'e' | b'E') => None,
            _ => Some((Json::U64(mantissa), j)),
        };
    }
    j += 1;
    let frac_start = j;
    while let Some(&c @ b'0'..=b'9') = b.get(j) {
        mantissa = mantissa.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
        j += 1;
    }
    let frac_digits = j - frac_start;
    if frac_digits == 0
        || int_digits + frac_digits > MAX_DECIMAL_DIGITS
        || matches!(b.get(j), Some(b'e' | b'E'))
    {
        return None;
    }
    let scale = POW10.get(frac_digits)?;
    Some((Json::F64(mantissa as f64 / scale), j))
}
