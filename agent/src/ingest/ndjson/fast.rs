//! The fast path for the records almost every client sends: one flat JSON object on one line,
//! whose values are strings without escapes, plain non-negative numbers, `true`, `false` or
//! `null`.
//!
//! [`record_at`] reads such a line, straight out of a larger text, into the observation of
//! the valid [`Record`] the serde path would give (a record of the fast path has no readings,
//! so its observation is all of it), and finds the line's end as it goes, so a caller
//! scanning a body or a trace needs no separate search for newlines. Each known field's value
//! is read straight into its place, and the data-model rules run once, on the finished
//! record. It declines
//! (`None`) at the first thing it does not handle: an escape, a nested value, a negative
//! number or an exponent, more digits than an `f64` holds exactly, anything that is not valid
//! JSON, a newline inside the object, a saturation reading (`inflight`, `utilisation`: rare,
//! and kept off this path so that the other records stay cheap), and every record that is not
//! valid: a value of a type its field does not take, an unknown outcome, a missing group, a
//! rule of [`ObservationRef::validate`](skewwatch_detectors::observation::ObservationRef::validate).
//! The caller then runs the serde path on the line, which handles all of JSON and names the
//! reason a record is rejected; so the fast path never has to be right about an error, only
//! about a success, and a bad record costs the serde path's price (rare in practice).
//!
//! Numbers are computed exactly as serde_json and `str::parse` compute them: an integer as
//! `u64`; a decimal of at most 15 significant digits as its digits (an exact `f64`, below 2^53)
//! divided by a power of ten (exact up to 10^22), and one IEEE division of two exact operands
//! is correctly rounded. Property tests check the numbers against `str::parse::<f64>` bit for
//! bit, and whole records against the serde path.
//!
//! The text is already UTF-8 (the caller checks a whole block at once, which is cheaper than
//! a check per line); the bytes outside strings are ASCII by the grammar. Cost: one pass over
//! the line's bytes, strings scanned eight bytes at a time and the digits of a number up to
//! eight at a time, known field names matched in place (docs/performance.md).

use skewwatch_detectors::observation::{
    CacheKeyHash, CacheResult, ObservationRef, Outcome, hash_cache_key,
};

use super::{Json, Record};
use crate::clock;

/// Digits of a decimal the fast path reads: below 2^53, so the digits are exact in an `f64`.
const MAX_DECIMAL_DIGITS: usize = 15;
/// Digits of an integer the fast path reads: below 2^64.
const MAX_INTEGER_DIGITS: usize = 19;

/// Powers of ten that are exact in an `f64`.
const POW10: [f64; MAX_DECIMAL_DIGITS + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Reads one JSON object that is the whole of `line` (JSON whitespace around it allowed),
/// or declines.
pub(super) fn record(line: &[u8]) -> Option<Record<'_>> {
    let text = std::str::from_utf8(line).ok()?;
    let mut obs = ObservationRef::new("", "");
    let end = record_at(text, 0, &mut obs)?;
    let rest = text.as_bytes().get(end..)?;
    rest.iter()
        .all(|&b| super::is_json_whitespace(b))
        .then(|| Record::observed(&obs))
}

/// Reads the record of the line that starts at `start` of `text` into `obs`: one JSON object,
/// with spaces, tabs and carriage returns around its tokens, and nothing else up to the
/// line's end. Returns the index of that end (the line's `\n`, or `text.len()`) when the
/// record is valid; `obs` then holds it. On `None`, `obs` holds whatever was read.
///
/// Each known field's value is read straight into its place in `obs` (a string, a number,
/// an outcome), and the record is validated once at the end; a value of another type, or a
/// record the data-model rules reject, is declined, so the serde path names the reason.
///
/// The fields are written through `obs`, which the caller keeps in its frame and hands by
/// reference to `validate` and `Batch::push`, both out of line: so they live in memory, one
/// store each as read, and the field loop's state is the text, the index and the value being
/// read. When the fields were local values the loop kept in registers, its state was about
/// as large as x86-64's register file, and how much of the text's pointer and length the
/// compiler read back from the stack turned on small changes elsewhere in the crate; the
/// record was also built, moved and copied into an `ObservationRef` on every line
/// (docs/performance.md, the NDJSON body loop's registers).
#[inline(always)]
pub(super) fn record_at<'a>(
    text: &'a str,
    start: usize,
    obs: &mut ObservationRef<'a>,
) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, start);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    // Each field absent, or its default; an absent (or `null`) group or shard is empty,
    // which `validate` declines, as it declines an empty one.
    *obs = ObservationRef::new("", "");
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let (name, next) = name(text, i)?;
            i = skip_ws(b, expect(b, next, b':')?);
            // Duplicates overwrite and `null` is absent, so the last one wins, as in the serde
            // path.
            i = match name {
                Name::Ts => store(&mut obs.ts, ts(text, i)?),
                Name::Group => store_as(
                    &mut obs.group,
                    str_or_null(text, i)?,
                    Option::unwrap_or_default,
                ),
                Name::Shard => store_as(
                    &mut obs.shard,
                    str_or_null(text, i)?,
                    Option::unwrap_or_default,
                ),
                Name::Key => store(&mut obs.key, str_or_null(text, i)?),
                Name::Count => store_as(&mut obs.count, count(b, i)?, |n| n.unwrap_or(1)),
                Name::LatencyMs => store(&mut obs.latency_ms, float_or_null(b, i)?),
                Name::Outcome => {
                    store_as(&mut obs.outcome, parsed(text, i, Outcome::parse)?, |o| {
                        o.unwrap_or(Outcome::Ok)
                    })
                }
                Name::Cache => store(&mut obs.cache, parsed(text, i, CacheResult::parse)?),
                Name::CacheKey => store(&mut obs.cache_key, parsed(text, i, cache_key)?),
                Name::Reading => return None,
                Name::Other => skip_value(text, i)?,
            };
            i = skip_ws(b, i);
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
    i = skip_ws(b, i);
    if !matches!(b.get(i), None | Some(b'\n')) {
        return None;
    }
    obs.validate().ok()?;
    Some(i)
}

/// Puts a value read into its field and returns the index after it.
#[inline(always)]
fn store<T>(slot: &mut Option<T>, (value, next): (Option<T>, usize)) -> usize {
    *slot = value;
    next
}

/// Puts a value read, or `None` for `null`, into its field as `into` gives it (the field's
/// default for `None`), and returns the index after it.
#[inline(always)]
fn store_as<T, S>(
    slot: &mut S,
    (value, next): (Option<T>, usize),
    into: impl FnOnce(Option<T>) -> S,
) -> usize {
    *slot = into(value);
    next
}

/// `null` at `i`: the index after it.
#[inline(always)]
fn null(b: &[u8], i: usize) -> Option<usize> {
    b.get(i..)?.starts_with(b"null").then_some(i + 4)
}

/// A string or `null` at `i`, and the index after it.
#[inline(always)]
fn str_or_null(text: &str, i: usize) -> Option<(Option<&str>, usize)> {
    match string(text, i) {
        Some((s, next)) => Some((Some(s), next)),
        None => Some((None, null(text.as_bytes(), i)?)),
    }
}

/// A string that `parse` takes, or `null`, at `i`; a string it does not take is declined.
#[inline(always)]
fn parsed<T>(
    text: &str,
    i: usize,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<(Option<T>, usize)> {
    match str_or_null(text, i)? {
        (Some(s), next) => Some((Some(parse(s)?), next)),
        (None, next) => Some((None, next)),
    }
}

/// A number (read as an `f64`, as the serde path reads a `U64` or an `F64`) or `null` at `i`.
#[inline(always)]
fn float_or_null(b: &[u8], i: usize) -> Option<(Option<f64>, usize)> {
    match number(b, i) {
        Some((Json::U64(n), next)) => Some((Some(n as f64), next)),
        Some((Json::F64(x), next)) => Some((Some(x), next)),
        Some(_) => None,
        None => Some((None, null(b, i)?)),
    }
}

/// A `count`: an integer or `null` at `i`; a decimal is declined (serde: `BadCount`).
#[inline(always)]
fn count(b: &[u8], i: usize) -> Option<(Option<u64>, usize)> {
    match number(b, i) {
        Some((Json::U64(n), next)) => Some((Some(n), next)),
        Some(_) => None,
        None => Some((None, null(b, i)?)),
    }
}

/// A `cache_key` string's hash; one of a length the data model refuses is declined, so the
/// serde path names the reason.
#[inline(always)]
fn cache_key(s: &str) -> Option<CacheKeyHash> {
    hash_cache_key(s.as_bytes()).ok()
}

/// A `ts`: a number of unix seconds, an RFC 3339 string, or `null` at `i`.
#[inline(always)]
fn ts(text: &str, i: usize) -> Option<(Option<f64>, usize)> {
    match text.as_bytes().get(i)? {
        b'"' => parsed(text, i, clock::parse_rfc3339),
        _ => float_or_null(text.as_bytes(), i),
    }
}

/// What a field's name tells the fast path to do with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Ts,
    Group,
    Shard,
    Key,
    Count,
    LatencyMs,
    Outcome,
    Cache,
    /// `cache_key`: read into its hash.
    CacheKey,
    /// `inflight` or `utilisation`: the record goes to the serde path.
    Reading,
    /// A field the record does not read.
    Other,
}

/// The field name at `i` (its opening quote) and the index after its closing quote. A known
/// name is matched in place, closing quote included, by its first letter and one compare of
/// a few bytes; any other name is read as a string.
#[inline(always)]
fn name(text: &str, i: usize) -> Option<(Name, usize)> {
    let b = text.as_bytes();
    let rest = b.get(i + 1..).filter(|_| b.get(i) == Some(&b'"'))?;
    let known = |word: &[u8], name: Name| rest.starts_with(word).then_some((name, word.len()));
    let hit = match rest.first()? {
        b't' => known(b"ts\"", Name::Ts),
        b'g' => known(b"group\"", Name::Group),
        b's' => known(b"shard\"", Name::Shard),
        b'k' => known(b"key\"", Name::Key),
        b'c' => known(b"count\"", Name::Count)
            .or_else(|| known(b"cache\"", Name::Cache))
            .or_else(|| known(b"cache_key\"", Name::CacheKey)),
        b'l' => known(b"latency_ms\"", Name::LatencyMs),
        b'o' => known(b"outcome\"", Name::Outcome),
        b'i' => known(b"inflight\"", Name::Reading),
        b'u' => known(b"utilisation\"", Name::Reading),
        _ => None,
    };
    match hit {
        Some((name, len)) => Some((name, i + 1 + len)),
        None => string(text, i).map(|(_, next)| (Name::Other, next)),
    }
}

/// Index of the first byte at or after `i` that is not whitespace within a line.
#[inline(always)]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    // Compact JSON has no whitespace: one test for that before the loop.
    if b.get(i).is_none_or(|&c| c > b' ') {
        return i;
    }
    while let Some(b' ' | b'\t' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The index after `byte`, which is the first byte at or after `i` that is not whitespace.
#[inline(always)]
fn expect(b: &[u8], i: usize, byte: u8) -> Option<usize> {
    // Compact JSON has the byte right there: test that before looping over whitespace.
    if b.get(i) == Some(&byte) {
        return Some(i + 1);
    }
    let i = skip_ws(b, i);
    (b.get(i) == Some(&byte)).then_some(i + 1)
}

/// The index after the value at `i` of a field the record does not read: a string, a
/// number, or a literal.
fn skip_value(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    match b.get(i)? {
        b'"' => string(text, i).map(|(_, next)| next),
        b'0'..=b'9' => number(b, i).map(|(_, next)| next),
        b'n' => literal(b, i, b"null"),
        b't' => literal(b, i, b"true"),
        b'f' => literal(b, i, b"false"),
        _ => None,
    }
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    b.get(i..)?.starts_with(word).then_some(i + word.len())
}

/// A string without escapes or control characters at `i` (which holds its `"`): its
/// contents and the index after its closing quote.
#[inline(always)]
fn string(text: &str, i: usize) -> Option<(&str, usize)> {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let start = i + 1;
    let end = special_byte(b, start);
    // The closing quote, or decline: a backslash (escape), a control character (invalid
    // JSON, and the line's end) or the end of the text (unterminated).
    if b.get(end) != Some(&b'"') {
        return None;
    }
    Some((text.get(start..end)?, end + 1))
}

/// Index of the first `"`, `\` or control character (below 0x20) at or after `from`, or
/// `b.len()`. Eight bytes at a time: each test is exact for the lowest flagged byte, and only
/// the lowest is read.
#[inline(always)]
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

/// A non-negative number without exponent at `i`, as serde_json reads it: `U64` for an
/// integer, `F64` for a decimal; `None` when `i` holds no digit.
#[inline(always)]
fn number(b: &[u8], i: usize) -> Option<(Json<'static>, usize)> {
    let (mantissa, j) = digits(b, i, 0);
    let int_digits = j - i;
    // No digit: not a number (a caller may try `null` next). JSON allows no leading zero;
    // more integer digits than a u64 surely holds go to serde.
    if int_digits == 0
        || (int_digits > 1 && b.get(i) == Some(&b'0'))
        || int_digits > MAX_INTEGER_DIGITS
    {
        return None;
    }
    match b.get(j) {
        Some(b'.') => {}
        Some(b'e' | b'E') => return None,
        _ => return Some((Json::U64(mantissa), j)),
    }
    let frac_start = j + 1;
    let (mantissa, end) = digits(b, frac_start, mantissa);
    let frac_digits = end - frac_start;
    if frac_digits == 0
        || int_digits + frac_digits > MAX_DECIMAL_DIGITS
        || matches!(b.get(end), Some(b'e' | b'E'))
    {
        return None;
    }
    let scale = POW10.get(frac_digits)?;
    Some((Json::F64(mantissa as f64 / scale), end))
}

/// Reads the ASCII digits at `i` onto `acc` (`acc * 10^n + digits`): the value and the index
/// after the last digit. Wrapping arithmetic, so exact only while the result stays below
/// 2^64: the caller bounds the number of digits (19 for any `acc` below 10^19 / 10^n is safe).
#[inline(always)]
fn digits(b: &[u8], mut i: usize, mut acc: u64) -> (u64, usize) {
    // Up to eight digits at a time: a unix time has ten before its point, a latency a few.
    while let Some(chunk) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let (value, n) = leading_digits(u64::from_le_bytes(*chunk));
        acc = acc
            .wrapping_mul(POW10_U64.get(n).copied().unwrap_or(1))
            .wrapping_add(value);
        i += n;
        if n < 8 {
            return (acc, i);
        }
    }
    while let Some(&c @ b'0'..=b'9') = b.get(i) {
        acc = acc.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
        i += 1;
    }
    (acc, i)
}

/// Powers of ten for up to eight digits.
const POW10_U64: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The ASCII digits that begin eight bytes read as a little-endian word (first byte lowest):
/// their value and how many there are (0..=8).
#[inline(always)]
fn leading_digits(w: u64) -> (u64, usize) {
    const LOW7: u64 = u64::from_ne_bytes([0x7F; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // A digit byte becomes its value 0..=9; every other byte becomes 10 or more.
    let x = w ^ u64::from_ne_bytes([b'0'; 8]);
    // Flags bytes of 10 or more: the low seven bits plus 0x76 reach 0x80 exactly then, and
    // never carry into the next byte; a byte with its high bit set is flagged by `| x`.
    let flagged = ((x & LOW7).wrapping_add(u64::from_ne_bytes([0x76; 8])) | x) & HIGH;
    let n = (flagged.trailing_zeros() / 8) as usize;
    if n == 0 {
        return (0, 0);
    }
    // The `n` digits moved to the top, with zero digits below them: the same value, and
    // the bytes after the digits shifted out.
    let v = x << (64 - 8 * n);
    // Pairs, then quadruples, then all eight, each step one multiply: the first digit is the
    // most significant.
    let v = v.wrapping_mul(10).wrapping_add(v >> 8) & 0x00FF_00FF_00FF_00FF;
    let v = v.wrapping_mul(100).wrapping_add(v >> 16) & 0x0000_FFFF_0000_FFFF;
    (
        v.wrapping_mul(10_000).wrapping_add(v >> 32) & 0xFFFF_FFFF,
        n,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The number the fast path reads from `s`, which must be all of it.
    fn read(s: &str) -> Option<Json<'static>> {
        let (json, end) = number(s.as_bytes(), 0)?;
        (end == s.len()).then_some(json)
    }

    #[test]
    fn leading_digits_reads_the_digits_before_anything_else() {
        let read = |s: &[u8; 8]| leading_digits(u64::from_le_bytes(*s));
        assert_eq!(read(b"12345678"), (12_345_678, 8));
        assert_eq!(read(b"00000000"), (0, 8));
        assert_eq!(read(b"99999999"), (99_999_999, 8));
        assert_eq!(read(b"1234567."), (1_234_567, 7));
        assert_eq!(read(b"38.41}\n{"), (38, 2));
        assert_eq!(read(b"0012\"abc"), (12, 4));
        assert_eq!(read(b"7/345678"), (7, 1));
        for none in [
            b"/2345678",
            b":2345678",
            b" 2345678",
            b"\xb02345678",
            b"\xb92345678",
        ] {
            assert_eq!(read(none), (0, 0), "{none:?}");
        }
        // Every byte value in every place: only 0x30..=0x39 counts as a digit.
        for byte in 0..=255u8 {
            for at in 0..8 {
                let mut w = *b"55555555";
                w[at] = byte;
                let digits = if byte.is_ascii_digit() { 8 } else { at };
                let (value, n) = read(&w);
                assert_eq!(n, digits, "{w:?}");
                let text = std::str::from_utf8(&w[..n]).unwrap();
                assert_eq!(value, text.parse::<u64>().unwrap_or(0), "{w:?}");
            }
        }
    }

    #[test]
    fn numbers_at_the_limits() {
        assert!(read("18446744073709551615").is_none());
        assert!(matches!(
            read("9999999999999999999"),
            Some(Json::U64(9_999_999_999_999_999_999))
        ));
        assert!(
            matches!(read("1700000000.00001"), Some(Json::F64(f)) if f == 1_700_000_000.000_01)
        );
        // Sixteen significant digits may not be exact this way: serde decides.
        assert!(read("1700000000.000001").is_none());
        assert!(read("1.").is_none());
        assert!(read("").is_none());
        assert!(number(b"null", 0).is_none());
        assert!(number(b",", 0).is_none());
        assert!(read("01").is_none());
        assert!(read("1e5").is_none());
        assert!(read("1.5E5").is_none());
    }

    proptest! {
        #[test]
        fn decimals_are_bit_identical_to_the_std_parser(
            int in "(0|[1-9][0-9]{0,14})",
            frac in "[0-9]{1,15}",
        ) {
            let s = format!("{int}.{frac}");
            let want: f64 = s.parse().unwrap();
            match read(&s) {
                Some(Json::F64(got)) => prop_assert_eq!(got.to_bits(), want.to_bits(), "{}", s),
                None => prop_assert!(int.len() + frac.len() > MAX_DECIMAL_DIGITS, "{}", s),
                Some(_) => prop_assert!(false, "{} read as an integer", s),
            }
        }

        #[test]
        fn integers_are_identical_to_the_std_parser(int in "(0|[1-9][0-9]{0,21})") {
            match read(&int) {
                Some(Json::U64(got)) => prop_assert_eq!(got, int.parse::<u64>().unwrap()),
                None => prop_assert!(int.len() > MAX_INTEGER_DIGITS, "{}", int),
                Some(_) => prop_assert!(false, "{} read as a decimal", int),
            }
        }

        #[test]
        fn unix_times_are_bit_identical_to_the_std_parser(
            secs in 0u64..4_000_000_000,
            micros in 0u64..100_000,
            width in 1usize..=5,
        ) {
            let s = format!("{secs}.{:0width$}", micros % 10u64.pow(width as u32));
            let want: f64 = s.parse().unwrap();
            match read(&s) {
                Some(Json::F64(got)) => prop_assert_eq!(got.to_bits(), want.to_bits(), "{}", s),
                other => prop_assert!(false, "{} not read: {:?}", s, other.is_some()),
            }
        }
    }
}
