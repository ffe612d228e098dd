//! Time for the agent: the [`Clock`] the pipeline and alert delivery read, and the RFC 3339
//! conversions every output uses.
//!
//! A leaf module: it imports nothing from the rest of the agent, so any stage may use it.
//! The detectors never read a clock; the agent reads one here and passes `now` in.

#![expect(
    clippy::disallowed_types,
    reason = "the one place the agent reads wall time: the system clock behind `Clock`"
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Go's zero time, which Alertmanager's webhook payload gives a firing alert's `endsAt`, and
/// what [`rfc3339`] writes for a time RFC 3339 cannot express.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Reads wall-clock time as unix seconds. A trait so tests can drive time themselves.
pub trait Clock: Send + Sync + 'static {
    /// Now, in unix seconds.
    fn now(&self) -> f64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> f64 {
        wall_now()
    }
}

/// Wall-clock now, unix seconds (0 if the clock is before 1970).
pub fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The tokio instant at wall-clock time `at` (unix seconds): now when `at` has passed, and at
/// most a day ahead, so a wild timestamp cannot park a timer for years.
pub fn instant_at(at: f64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs_f64((at - wall_now()).clamp(0.0, 86_400.0))
}

/// Formats unix seconds as RFC 3339 in UTC with millisecond precision
/// (`2024-05-01T12:00:00.5Z`); out-of-range times give [`ZERO_TIME`].
pub fn rfc3339(unix_secs: f64) -> String {
    // Years 1..=9999, the range RFC 3339 can write.
    if !(-62_135_596_800.0..=253_402_300_799.0).contains(&unix_secs) {
        return ZERO_TIME.to_owned();
    }
    let nanos = (unix_secs * 1000.0).round() as i128 * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| ZERO_TIME.to_owned())
}

/// Reads an RFC 3339 timestamp (`2024-05-01T12:00:00.250Z`, `...+02:00`) as unix seconds;
/// `None` when `s` is not one.
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    Some(t.unix_timestamp() as f64 + f64::from(t.nanosecond()) * 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_is_utc_with_milliseconds_when_needed() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_714_564_800.5), "2024-05-01T12:00:00.5Z");
        assert_eq!(rfc3339(1_714_564_800.000_4), "2024-05-01T12:00:00Z");
        assert_eq!(rfc3339(f64::NAN), ZERO_TIME);
        assert_eq!(rfc3339(1e300), ZERO_TIME);
    }

    #[test]
    fn rfc3339_round_trips_and_reads_offsets() {
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.5Z"),
            Some(1_714_564_800.5)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T14:00:00+02:00"),
            Some(1_714_564_800.0)
        );
        assert_eq!(
            parse_rfc3339(&rfc3339(1_714_564_800.25)),
            Some(1_714_564_800.25)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
