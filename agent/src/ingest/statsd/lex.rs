//! Lexing: the pieces every StatsD line is read with, shared by the native parser
//! ([`super::parse`]) and the mappings ([`super::mapping`]), so both read a value, a count and
//! a sample rate the same way.
//!
//! - Byte search within a line, eight bytes at a time (`find`), and the word loads it and
//!   the tag matcher use (`word_at`).
//! - Numbers: decimals with a fast path that rounds as `str::parse` does (`parse_f64`),
//!   counts (`parse_u64`) and the sample rate's scaling (`scale_by_rate`).
//!
//! Everything here is on the hot path and allocates nothing.

use skewwatch_detectors::observation::{MAX_COUNT, RejectReason};

/// The StatsD metric name of requests (the saturation gauges have their own).
pub const METRIC_NAME: &str = "skewwatch.request";

/// The eight bytes at `at` as a little-endian word, with the bytes at and after `end` zeroed.
#[inline(always)]
pub(super) fn word_at(bytes: &[u8], at: usize, end: usize) -> u64 {
    let word = load_word(bytes, at);
    match end.saturating_sub(at) {
        0 => 0,
        n if n < 8 => word & ((1u64 << (8 * n)) - 1),
        _ => word,
    }
}

/// The eight bytes at `at` as a little-endian word, zero-padded past the end of `bytes`.
#[inline(always)]
fn load_word(bytes: &[u8], at: usize) -> u64 {
    let tail = bytes.get(at..).unwrap_or_default();
    if let Some(chunk) = tail.first_chunk::<8>() {
        return u64::from_le_bytes(*chunk);
    }
    let mut word = [0u8; 8];
    for (w, b) in word.iter_mut().zip(tail) {
        *w = *b;
    }
    u64::from_le_bytes(word)
}

/// Index of the first byte equal to `a` or `b` in `bytes[from..end]`, or `end`
/// (`end <= bytes.len()`).
///
/// Reads eight bytes at a time (the "has zero byte" trick on `word ^ pattern`), also past
/// `end` while inside `bytes`, and ignores hits at or past `end`: within a datagram a line's
/// last word is then one read rather than a byte-by-byte tail. Pass `a == b` to look for one
/// byte. Neither may be 0, the padding past the end of `bytes`.
#[inline(always)]
pub(super) fn find(bytes: &[u8], from: usize, end: usize, a: u8, b: u8) -> usize {
    const LOW: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let zero_bytes = |x: u64| x.wrapping_sub(LOW) & !x & HIGH;
    let (pa, pb) = (LOW * u64::from(a), LOW * u64::from(b));
    let mut i = from;
    while i < end {
        let word = load_word(bytes, i);
        // The lowest flagged byte is exact (only bytes above a match can be flagged
        // falsely), and only the lowest is read.
        let hits = if a == b {
            zero_bytes(word ^ pa)
        } else {
            zero_bytes(word ^ pa) | zero_bytes(word ^ pb)
        };
        if hits != 0 {
            return (i + (hits.trailing_zeros() / 8) as usize).min(end);
        }
        i += 8;
    }
    end
}

/// `s[start..end]`, for indices at ASCII delimiters or line boundaries (always char
/// boundaries); empty when out of range, which the callers never ask for.
// The helpers below sat beside the parser before the lexing moved to a file of its own;
// `#[inline]` keeps them available to the parser's codegen unit wherever the crate is split,
// as they were (measured: `parse_f64` out of line cost 2.6% per StatsD line).
#[inline]
pub(super) fn sub(s: &str, start: usize, end: usize) -> &str {
    s.get(start..end).unwrap_or_default()
}

/// `round(requests / rate)` for a sample rate in `(0, 1]`.
#[inline]
pub(super) fn scale_by_rate(requests: u64, rate: &str) -> Result<u64, RejectReason> {
    let rate = parse_f64(rate).ok_or(RejectReason::BadCount)?;
    // Written so that NaN fails too.
    if !(rate > 0.0 && rate <= 1.0) {
        return Err(RejectReason::BadCount);
    }
    // `x + 0.5` truncated is `x.round()` for 1 <= x <= 2^40, where the addition is exact,
    // and avoids a libm call on baseline x86-64. Not NaN, as the rate is in (0, 1]. Compared
    // as a float first: the cast saturates, which would hide an overflow.
    let half_up = requests as f64 / rate + 0.5;
    if half_up >= (MAX_COUNT + 1) as f64 {
        return Err(RejectReason::BadCount);
    }
    Ok(half_up as u64)
}

/// Powers of ten that are exact in an `f64`.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Parses a decimal number; `None` when it is not one.
///
/// Plain decimals of at most 15 digits (`12`, `3.25`, `0.001`) take a fast path that gives the
/// same, correctly rounded result as `str::parse`: the digits form an integer below 2^53 and
/// the divisor is an exact power of ten, so the one IEEE division rounds correctly (Clinger's
/// fast path). Everything else (signs, exponents, `NaN`, long inputs) goes to `str::parse`.
/// Always inlined: once the mappings' observation was inlined into their line function, a
/// plain `#[inline]` no longer kept it inlined there (`scripts/instructions.sh
/// statsd_mapped_lines`: 3.5 instructions a line).
#[inline(always)]
pub(super) fn parse_f64(s: &str) -> Option<f64> {
    let bytes = s.as_bytes();
    if bytes.len() <= 16 {
        let mut mantissa: u64 = 0;
        let mut dot = None;
        let mut simple = true;
        for (i, &b) in bytes.iter().enumerate() {
            let digit = b.wrapping_sub(b'0');
            if digit < 10 {
                mantissa = mantissa * 10 + u64::from(digit);
            } else if b == b'.' && dot.is_none() {
                dot = Some(i);
            } else {
                simple = false;
                break;
            }
        }
        let (digits, frac_digits) = match dot {
            None => (bytes.len(), 0),
            Some(i) => (bytes.len() - 1, bytes.len() - 1 - i),
        };
        if simple
            && (1..=15).contains(&digits)
            && let Some(scale) = POW10.get(frac_digits)
        {
            return Some(mantissa as f64 / scale);
        }
    }
    s.parse().ok()
}

/// Parses a non-empty string of ASCII digits; `None` on anything else or on overflow.
#[inline]
pub(super) fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.bytes().try_fold(0u64, |n, b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fast_float_path_agrees_with_std_on_examples() {
        for s in [
            "0",
            "1",
            "12.5",
            "0.1",
            "0.3",
            "123456789012345",
            "1234567890.12345",
            "9007199254740993",
            "0.000000000000001",
            "99999.99999",
            "5.",
            ".5",
            "00012.50",
            "1.2.3",
            ".",
            "",
        ] {
            assert_eq!(parse_f64(s), s.parse::<f64>().ok(), "{s:?}");
        }
    }

    proptest! {
        #[test]
        fn fast_float_path_agrees_with_std(s in "[0-9]{0,10}(\\.[0-9]{0,8})?") {
            prop_assert_eq!(parse_f64(&s), s.parse::<f64>().ok());
        }

        #[test]
        fn fast_float_path_agrees_with_std_on_float_text(x in 0.0f64..1e9, places in 0usize..8) {
            let s = format!("{x:.places$}");
            prop_assert_eq!(parse_f64(&s), s.parse::<f64>().ok());
        }
    }
}
