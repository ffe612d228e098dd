//! The validated `fleet:` section ([`FleetConfig`]) and its validation ([`validate`]), which
//! names every problem with its field.

use std::time::Duration;

use crate::config::raw::{RawBasicAuth, RawFleet};
use crate::config::secret::Secret;
use crate::config::validate::Check;

/// Default and largest answer read, bytes.
const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 << 20;
const MAX_MAX_RESPONSE_BYTES: usize = 1 << 30;
/// Default and largest number of series in one answer.
const DEFAULT_MAX_SERIES: usize = 200_000;
const MAX_MAX_SERIES: usize = 10_000_000;
/// Longest `selector`, bytes.
const MAX_SELECTOR_BYTES: usize = 4096;
/// Most fleet instances one fleet is split over.
const MAX_INSTANCES: u32 = 1024;

/// How the fleet input proves who it is to the API.
#[derive(Debug, Clone, PartialEq)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer(Secret),
    /// `Authorization: Basic <user:password>`.
    Basic {
        /// The user name (not secret; it is logged nowhere all the same).
        username: String,
        /// The password.
        password: Secret,
    },
}

/// Which share of the groups this instance judges: groups whose hash modulo `instances` is
/// `instance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Fleet instances in all.
    pub instances: u32,
    /// This one, from 0.
    pub instance: u32,
}

impl Split {
    /// Whether this instance judges `group`: a fixed hash (FNV-1a, the same on every instance
    /// and every build), so every group has exactly one instance.
    pub fn owns(&self, group: &str) -> bool {
        self.instances <= 1
            || skewwatch_detectors::prng::fnv1a64(group.as_bytes()) % u64::from(self.instances)
                == u64::from(self.instance)
    }
}

/// The validated `fleet:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// Base URL of the PromQL API; `/api/v1/query` and `/api/v1/query_range` are joined to it.
    pub url: reqwest::Url,
    /// Label matchers added to every series read, as written between braces (may be empty).
    pub selector: String,
    /// How long a series may go unseen and still count as the same series.
    pub lookback: Duration,
    /// How long before a window closes its query is made.
    pub lead: Duration,
    /// How long before it is made a query is evaluated: a TSDB that moves a query of a recent
    /// time to a time of its own (VictoriaMetrics' `-search.latencyOffset`) evaluates one this
    /// far back at the time asked, so consecutive windows meet.
    pub delay: Duration,
    /// Time one query may take.
    pub timeout: Duration,
    /// History read at start-up to learn baselines (zero: none).
    pub backfill: Duration,
    /// Largest answer read, bytes.
    pub max_response_bytes: usize,
    /// Most series one answer may hold.
    pub max_series: usize,
    /// Credentials for the API, if any.
    pub auth: Option<Auth>,
    /// This instance's share of the groups.
    pub split: Split,
}

/// Validates `fleet:`; `None` when there is no fleet input (no `url`) or a field is wrong
/// (each problem pushed). `window_secs` is the fleet window the query lead must fit in.
pub fn validate(c: &mut Check<'_>, raw: RawFleet, window_secs: f64) -> Option<FleetConfig> {
    raw.url.as_ref()?;
    let before = c.found();
    let url = c.receiver_url("fleet.url", raw.url.as_deref());
    let selector = raw.selector.unwrap_or_default();
    if let Err(why) = check_selector(&selector) {
        c.fail("fleet.selector", why);
    }
    // The five durations: (field, value, default, lowest, highest), seconds.
    let [lookback, lead, delay, timeout, backfill] = [
        (
            "fleet.lookback_secs",
            raw.lookback_secs,
            600.0,
            60.0,
            86_400.0,
        ),
        (
            "fleet.query_lead_secs",
            raw.query_lead_secs,
            2.0,
            0.0,
            3600.0,
        ),
        (
            "fleet.evaluation_delay_secs",
            raw.evaluation_delay_secs,
            0.0,
            0.0,
            3600.0,
        ),
        ("fleet.timeout_secs", raw.timeout_secs, 5.0, 0.1, 300.0),
        (
            "fleet.backfill_secs",
            raw.backfill_secs,
            3600.0,
            0.0,
            7.0 * 86_400.0,
        ),
    ]
    .map(|(field, value, default, lo, hi)| {
        c.secs(field, value, Duration::from_secs_f64(default), lo, hi)
    });
    if lead.as_secs_f64() >= window_secs / 2.0 {
        c.fail(
            "fleet.query_lead_secs",
            format!(
                "{} s is not under half the window ({window_secs} s): the query would read the \
                 previous window's growth",
                lead.as_secs_f64()
            ),
        );
    }
    if lead + delay >= Duration::from_secs_f64(window_secs) {
        c.fail(
            "fleet.evaluation_delay_secs",
            format!(
                "{} s with the query lead of {} s is not under the window ({window_secs} s): \
                 a window's queries would be evaluated in the window before it; lower the \
                 TSDB's latency offset (VictoriaMetrics: -search.latencyOffset) or lengthen the \
                 window",
                delay.as_secs_f64(),
                lead.as_secs_f64()
            ),
        );
    }
    let max_response_bytes = c.range(
        "fleet.max_response_bytes",
        raw.max_response_bytes,
        DEFAULT_MAX_RESPONSE_BYTES,
        1024,
        MAX_MAX_RESPONSE_BYTES,
    );
    let max_series = c.range(
        "fleet.max_series",
        raw.max_series,
        DEFAULT_MAX_SERIES,
        1,
        MAX_MAX_SERIES,
    );
    let bearer = c.secret(
        "fleet",
        "bearer_token",
        raw.bearer_token_file,
        raw.bearer_token_env,
    );
    let basic = raw.basic_auth.and_then(|b| basic_auth(c, b));
    let auth = match (bearer, basic) {
        (Some(_), Some(_)) => {
            c.fail("fleet", "set a bearer token or basic_auth, not both");
            None
        }
        (Some(t), None) => Some(Auth::Bearer(t)),
        (None, b) => b,
    };
    let instances = c.range("fleet.instances", raw.instances, 1, 1, MAX_INSTANCES);
    let instance = raw.instance.unwrap_or(0);
    if instance >= instances {
        c.fail(
            "fleet.instance",
            format!(
                "{instance} is not below fleet.instances ({instances}); instances count from 0"
            ),
        );
    }
    if c.found() > before {
        return None;
    }
    Some(FleetConfig {
        url: url?,
        selector,
        lookback,
        lead,
        delay,
        timeout,
        backfill,
        max_response_bytes,
        max_series,
        auth,
        split: Split {
            instances,
            instance,
        },
    })
}

fn basic_auth(c: &mut Check<'_>, b: RawBasicAuth) -> Option<Auth> {
    let username = b.username.unwrap_or_default();
    if username.is_empty() || username.contains(':') {
        c.fail(
            "fleet.basic_auth.username",
            "required, without `:` (basic authentication joins user and password with it)",
        );
    }
    let password = c.secret(
        "fleet.basic_auth",
        "password",
        b.password_file,
        b.password_env,
    );
    if password.is_none() {
        c.fail(
            "fleet.basic_auth",
            "set password_file or password_env: basic authentication needs a password",
        );
    }
    Some(Auth::Basic {
        username,
        password: password?,
    })
}

/// Checks that `selector` is a comma-separated list of PromQL label matchers
/// (`name="value"`, `!=`, `=~`, `!~`), so nothing else can be spliced into the queries.
pub fn check_selector(selector: &str) -> Result<(), String> {
    if selector.len() > MAX_SELECTOR_BYTES {
        return Err(format!("longer than {MAX_SELECTOR_BYTES} bytes"));
    }
    let mut rest = selector.trim();
    while !rest.is_empty() {
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..name_end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!(
                "`{selector}`: expected a label name at `{rest}`; write matchers like \
                 job=\"skewwatch\",namespace=~\"prod-.*\""
            ));
        }
        let after = rest[name_end..].trim_start();
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| after.starts_with(op))
            .ok_or_else(|| format!("`{selector}`: `{name}` needs one of = != =~ !~"))?;
        let value = after[op.len()..].trim_start();
        let close = quoted_end(value)
            .ok_or_else(|| format!("`{selector}`: the value of `{name}` needs double quotes"))?;
        rest = value[close..].trim_start();
        if let Some(tail) = rest.strip_prefix(',') {
            rest = tail.trim_start();
            if rest.is_empty() {
                return Err(format!("`{selector}`: a comma without a matcher after it"));
            }
        } else if !rest.is_empty() {
            return Err(format!("`{selector}`: expected `,` before `{rest}`"));
        }
    }
    Ok(())
}

/// The byte after the closing quote of the double-quoted string `s` starts with.
fn quoted_end(s: &str) -> Option<usize> {
    let mut chars = s.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    let mut escaped = false;
    for (i, c) in chars {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(i + 1),
            '\n' => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_label_matchers_and_nothing_else() {
        for ok in [
            "",
            r#"job="skewwatch""#,
            r#"job="a", namespace=~"prod-.*",pod!="x""#,
            r#"a!~"\"q\"""#,
        ] {
            assert_eq!(check_selector(ok), Ok(()), "{ok}");
        }
        for bad in [
            "job",
            r#"job=skewwatch"#,
            r#"job="a"}[1h]"#,
            r#"job="a") or vector(1"#,
            r#"job="a","#,
            r#"1a="b""#,
            r#"job="unterminated"#,
        ] {
            assert!(check_selector(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_evaluation_delay_and_the_lead_fit_in_the_window() {
        let read = |delay: f64| {
            let mut c = Check::new(&|_| None);
            let raw = RawFleet {
                url: Some("http://vm:8428".into()),
                query_lead_secs: Some(4.0),
                evaluation_delay_secs: Some(delay),
                ..RawFleet::default()
            };
            let got = validate(&mut c, raw, 10.0);
            (got, c.into_problems())
        };
        let (got, problems) = read(1.0);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(got.unwrap().delay, Duration::from_secs(1));
        let (got, problems) = read(6.0);
        assert!(got.is_none());
        assert_eq!(
            problems[0].field, "fleet.evaluation_delay_secs",
            "{problems:?}"
        );
        assert!(problems[0].why.contains("latencyOffset"), "{problems:?}");
    }

    #[test]
    fn every_group_has_exactly_one_instance() {
        for g in ["db", "metadata-db", "", "ledger"] {
            let owners = (0..3)
                .filter(|&i| {
                    Split {
                        instances: 3,
                        instance: i,
                    }
                    .owns(g)
                })
                .count();
            assert_eq!(owners, 1, "{g}");
        }
        assert!(
            Split {
                instances: 1,
                instance: 0
            }
            .owns("x")
        );
    }
}
