//! Cache policies: the cache as it runs and the candidates simulated beside it, and how a
//! policy is written (`ttl=20m+serve-stale`), in the configuration, in `replay --what-if` and
//! as the `policy` label.

use std::fmt;

/// One cache policy: how long an answer stays fresh and what the cache does with answers that
/// are not plain successes.
///
/// A request whose key holds a fresh entry is a hit; any other is a miss, one backend call,
/// whose answer (the request's observed outcome) is stored when the policy caches it:
/// - `ok` answers are stored for `ttl_secs`;
/// - `not_found` answers are stored for `negative_ttl_secs` when set (negative caching),
///   otherwise not stored, so every such request calls the backend;
/// - error answers (`error`, `timeout`, `throttled`, `unavailable`) are never stored; with
///   `stale_on_error`, a failed call made while an expired copy is held is answered with that
///   copy instead of the error, and the copy stays as it was, so the next request calls the
///   backend again (RFC 5861's `stale-if-error`). It changes the errors the requests see,
///   not the backend calls.
///
/// With `capacity_entries`, the cache also evicts its least recently used entry when full.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The name written in the `policy` label and in replay's output: `observed` for the
    /// cache as configured, otherwise the candidate's spec (`ttl=20m+serve-stale`).
    pub name: String,
    /// How long an `ok` answer stays fresh, seconds (> 0).
    pub ttl_secs: f64,
    /// How long a `not_found` answer stays fresh, seconds; `None` caches no `not_found`.
    pub negative_ttl_secs: Option<f64>,
    /// Answer a failed backend call with the copy held, however old, without renewing it.
    pub stale_on_error: bool,
    /// Entries the cache holds before it evicts the least recently used; `None`: no limit.
    pub capacity_entries: Option<u64>,
}

/// The name of the policy that stands for the cache as it runs.
pub const OBSERVED: &str = "observed";

/// The candidates simulated when the configuration names none: a TTL ladder from 10 s to an
/// hour, serving stale on error, and negative caching of `not_found` for a minute.
pub const DEFAULT_CANDIDATES: [&str; 7] = [
    "ttl=10s",
    "ttl=1m",
    "ttl=5m",
    "ttl=20m",
    "ttl=1h",
    "serve-stale",
    "negative=1m",
];

/// The longest TTL a policy takes: a week. Longer ones are almost surely unit mistakes.
pub const MAX_TTL_SECS: f64 = 7.0 * 86_400.0;

/// Why a policy spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A part of the spec is none of the known ones.
    #[error(
        "`{0}` is not a policy part: write observed, ttl=DURATION, serve-stale, \
         negative=DURATION, no-negative or capacity=ENTRIES, joined by `+` (ttl=20m+serve-stale)"
    )]
    UnknownPart(String),
    /// A duration is not a number of seconds or a number with `s`, `m` or `h`, or out of range.
    #[error("`{0}` is not a duration in (0, 7d]: write 10s, 5m, 1h or plain seconds")]
    BadDuration(String),
    /// A capacity is not a whole number of entries >= 1.
    #[error("`{0}` is not a capacity: write a whole number of entries >= 1")]
    BadCapacity(String),
    /// The list named no policy, or a policy is empty.
    #[error("empty policy: name at least one, e.g. ttl=20m")]
    Empty,
}

impl Policy {
    /// The cache as it runs: `ttl_secs` for answers, the rest as given.
    pub fn observed(
        ttl_secs: f64,
        negative_ttl_secs: Option<f64>,
        stale_on_error: bool,
        capacity_entries: Option<u64>,
    ) -> Policy {
        Policy {
            name: OBSERVED.to_owned(),
            ttl_secs,
            negative_ttl_secs,
            stale_on_error,
            capacity_entries,
        }
    }

    /// A candidate written as `part+part+…`, each part changing the observed policy:
    /// `ttl=D`, `serve-stale`, `negative=D`, `no-negative`, `capacity=N` (or `observed`,
    /// which changes nothing). Its name is the spec with its durations written the one way
    /// [`format_duration`] writes them.
    pub fn parse(spec: &str, observed: &Policy) -> Result<Policy, PolicyError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(PolicyError::Empty);
        }
        let mut p = Policy {
            name: String::new(),
            ..observed.clone()
        };
        let mut names = Vec::new();
        for part in spec.split('+').map(str::trim) {
            let (word, value) = match part.split_once('=') {
                Some((w, v)) => (w.trim(), Some(v.trim())),
                None => (part, None),
            };
            match (word, value) {
                (OBSERVED, None) => continue,
                ("ttl", Some(v)) => {
                    p.ttl_secs = parse_duration(v)?;
                    names.push(format!("ttl={}", format_duration(p.ttl_secs)));
                }
                ("serve-stale" | "stale-on-error", None) => {
                    p.stale_on_error = true;
                    names.push("serve-stale".to_owned());
                }
                ("negative", Some(v)) => {
                    let d = parse_duration(v)?;
                    p.negative_ttl_secs = Some(d);
                    names.push(format!("negative={}", format_duration(d)));
                }
                ("no-negative", None) => {
                    p.negative_ttl_secs = None;
                    names.push("no-negative".to_owned());
                }
                ("capacity", Some(v)) => {
                    let n = v
                        .parse::<u64>()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| PolicyError::BadCapacity(v.to_owned()))?;
                    p.capacity_entries = Some(n);
                    names.push(format!("capacity={n}"));
                }
                _ => return Err(PolicyError::UnknownPart(part.to_owned())),
            }
        }
        p.name = if names.is_empty() {
            OBSERVED.to_owned()
        } else {
            names.join("+")
        };
        Ok(p)
    }

    /// The observed policy followed by the candidates of a comma-separated list, each once
    /// (a candidate whose name repeats an earlier one is left out).
    pub fn parse_list<'a>(
        specs: impl IntoIterator<Item = &'a str>,
        observed: &Policy,
    ) -> Result<Vec<Policy>, PolicyError> {
        let mut out = vec![observed.clone()];
        for spec in specs {
            let p = Policy::parse(spec, observed)?;
            if !out.iter().any(|q| q.name == p.name) {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// The policy as a cache whose clock ticks every `tick_secs` keeps it, under the same
    /// name. Such a cache stores an entry's expiry in whole ticks and expires it once its
    /// clock reaches that tick (memcached: whole seconds), so an entry lives between
    /// TTL − tick and TTL, depending on where in a tick it was stored: TTL − tick/2 on
    /// average, which each TTL becomes (never below half of itself). 0 changes nothing.
    pub fn on_clock(mut self, tick_secs: f64) -> Policy {
        if tick_secs > 0.0 {
            let half = tick_secs / 2.0;
            self.ttl_secs = (self.ttl_secs - half).max(self.ttl_secs / 2.0);
            self.negative_ttl_secs = self.negative_ttl_secs.map(|t| (t - half).max(t / 2.0));
        }
        self
    }

    /// How long, in seconds, the entry this policy keeps for a key can still matter: the
    /// longest of its TTLs. An expired copy still answers failures under `stale_on_error`,
    /// for as long as it is held; the simulation holds it for one TTL more (a key idle for
    /// longer leaves the sample and loses it), which bounds the sample's memory.
    pub fn horizon_secs(&self) -> f64 {
        let ttl = self.ttl_secs.max(self.negative_ttl_secs.unwrap_or(0.0));
        if self.stale_on_error { 2.0 * ttl } else { ttl }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Reads `10s`, `5m`, `1h`, `1d` or plain seconds (`90`, `0.5`) into seconds in
/// (0, [`MAX_TTL_SECS`]].
pub fn parse_duration(s: &str) -> Result<f64, PolicyError> {
    let bad = || PolicyError::BadDuration(s.to_owned());
    let (number, unit) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1.0),
        Some((i, 'm')) => (&s[..i], 60.0),
        Some((i, 'h')) => (&s[..i], 3600.0),
        Some((i, 'd')) => (&s[..i], 86_400.0),
        _ => (s, 1.0),
    };
    let secs = number.trim().parse::<f64>().map_err(|_| bad())? * unit;
    if secs.is_finite() && secs > 0.0 && secs <= MAX_TTL_SECS {
        Ok(secs)
    } else {
        Err(bad())
    }
}

/// Writes seconds the shortest exact way: `1h`, `20m`, `10s`, `0.5s`.
pub fn format_duration(secs: f64) -> String {
    if secs >= 3600.0 && secs % 3600.0 == 0.0 {
        format!("{}h", secs / 3600.0)
    } else if secs >= 60.0 && secs % 60.0 == 0.0 {
        format!("{}m", secs / 60.0)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed() -> Policy {
        Policy::observed(60.0, None, false, None)
    }

    #[test]
    fn a_candidate_changes_the_observed_policy_and_is_named_canonically() {
        let p = Policy::parse(" ttl=1200 + serve-stale ", &observed()).unwrap();
        assert_eq!(p.name, "ttl=20m+serve-stale");
        assert_eq!(p.ttl_secs, 1200.0);
        assert!(p.stale_on_error);
        assert_eq!(p.negative_ttl_secs, None);
        let n = Policy::parse("negative=60s", &observed()).unwrap();
        assert_eq!((n.name.as_str(), n.ttl_secs), ("negative=1m", 60.0));
        assert_eq!(n.negative_ttl_secs, Some(60.0));
        assert_eq!(Policy::parse("observed", &observed()).unwrap(), observed());
    }

    #[test]
    fn the_default_candidates_parse_and_keep_their_names() {
        let all = Policy::parse_list(DEFAULT_CANDIDATES, &observed()).unwrap();
        let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names[0], OBSERVED);
        assert_eq!(&names[1..], DEFAULT_CANDIDATES);
    }

    #[test]
    fn bad_specs_are_refused_with_their_reason() {
        for (spec, want) in [
            ("ttl=0", PolicyError::BadDuration("0".into())),
            ("ttl=-5m", PolicyError::BadDuration("-5m".into())),
            ("ttl=8d", PolicyError::BadDuration("8d".into())),
            ("ttl=soon", PolicyError::BadDuration("soon".into())),
            ("ttl", PolicyError::UnknownPart("ttl".into())),
            ("lfu", PolicyError::UnknownPart("lfu".into())),
            ("capacity=0", PolicyError::BadCapacity("0".into())),
            ("", PolicyError::Empty),
        ] {
            assert_eq!(Policy::parse(spec, &observed()), Err(want), "{spec}");
        }
    }

    #[test]
    fn a_ticking_clock_shortens_every_ttl_by_half_a_tick_and_keeps_the_name() {
        let p = Policy::parse("ttl=20s+negative=10s", &observed()).unwrap();
        let on = p.clone().on_clock(1.0);
        assert_eq!((on.ttl_secs, on.negative_ttl_secs), (19.5, Some(9.5)));
        assert_eq!(on.name, p.name);
        assert_eq!(p.clone().on_clock(0.0), p);
        // A tick as long as the TTL still leaves an entry half of it.
        assert_eq!(
            Policy::parse("ttl=1s", &observed())
                .unwrap()
                .on_clock(5.0)
                .ttl_secs,
            0.5
        );
    }

    #[test]
    fn durations_round_trip_through_their_names() {
        for s in ["10s", "1m", "5m", "20m", "1h", "0.5s", "90s"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}
