//! Validation: [`RawConfig`](super::RawConfig) into [`Config`](crate::app::Config), one function per section, every problem
//! collected with its field so a user fixes them all in one pass.
//!
//! Secrets are read here too (through the [`EnvLookup`] passed in), so `check-config` refuses
//! exactly what `run` would refuse.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use skewwatch_detectors::whatif::{BackendCapacity, WhatIfConfig};
use skewwatch_detectors::window::WindowConfig;

use super::Problem;
use super::raw::{RawAuth, RawLimits, RawListen, RawWhatIf, RawWindow};
use super::secret::{EnvLookup, Secret, SecretSource};

/// Default largest request body (`limits.http_body_limit_bytes`).
pub const DEFAULT_HTTP_BODY_LIMIT_BYTES: usize = 1 << 20;

/// Most groups `limits.pinned_groups` may list: pinned groups take slots beyond
/// `limits.max_groups`, so their number must stay bounded too.
const MAX_PINNED_GROUPS: usize = 64;

/// Default ingest queue length, in batches: with the body limit it bounds queued memory
/// (docs/performance.md has the measurement behind it).
const DEFAULT_QUEUE_BATCHES: usize = 64;

/// Default ingest queue size in bytes: what queued batches may hold while the pipeline is
/// behind, part of the memory budget.
const DEFAULT_QUEUE_BYTES: usize = 32 << 20;

/// The most candidate policies `whatif.candidates` takes: each costs every sampled key a cell.
pub const MAX_CANDIDATES: usize = 16;

/// The `limits:` fields that are not window sizes.
pub(crate) struct Limits {
    pub(crate) http_body_limit_bytes: usize,
    pub(crate) ingest_queue_batches: usize,
    pub(crate) ingest_queue_bytes: usize,
}

/// Collects problems while validating: every section's validator (here, and in the stages
/// that own their settings) pushes what it finds, so a user sees all of them at once.
pub struct Check<'a> {
    problems: Vec<Problem>,
    env: EnvLookup<'a>,
}

impl<'a> Check<'a> {
    /// A collector that reads secrets through `env`.
    pub fn new(env: EnvLookup<'a>) -> Check<'a> {
        Check {
            problems: Vec::new(),
            env,
        }
    }

    /// The problems found.
    pub fn into_problems(self) -> Vec<Problem> {
        self.problems
    }

    /// Adds a problem found elsewhere.
    pub fn push(&mut self, problem: Problem) {
        self.problems.push(problem);
    }

    /// How many problems were found so far: a validator compares the count before and after
    /// a part to know whether that part is valid.
    pub(crate) fn found(&self) -> usize {
        self.problems.len()
    }
}

impl Check<'_> {
    /// Records that `field` is wrong and why.
    pub fn fail(&mut self, field: &str, why: impl fmt::Display) {
        self.problems.push(Problem {
            field: field.to_owned(),
            why: why.to_string(),
        });
    }

    pub(crate) fn addr(
        &mut self,
        field: &str,
        v: Option<&str>,
        default: &str,
    ) -> Option<SocketAddr> {
        let s = v.unwrap_or(default);
        match s.parse() {
            Ok(a) => Some(a),
            Err(_) => {
                self.fail(
                    field,
                    format!("`{s}` is not an IP:port address (write e.g. 127.0.0.1:9477)"),
                );
                None
            }
        }
    }

    pub(crate) fn range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        field: &str,
        v: Option<T>,
        default: T,
        lo: T,
        hi: T,
    ) -> T {
        let x = v.unwrap_or(default);
        if !(lo..=hi).contains(&x) {
            self.fail(field, format!("{x} is out of range: use {lo}..={hi}"));
        }
        x
    }

    pub(crate) fn secs(
        &mut self,
        field: &str,
        v: Option<f64>,
        default: Duration,
        lo: f64,
        hi: f64,
    ) -> Duration {
        let x = v.unwrap_or(default.as_secs_f64());
        if !(x.is_finite() && (lo..=hi).contains(&x)) {
            self.fail(
                field,
                format!("{x} is out of range: use {lo}..={hi} seconds"),
            );
            return default;
        }
        Duration::from_secs_f64(x)
    }

    /// The secret `{parent}.{name}_file` or `{parent}.{name}_env` (not both), read now.
    pub(crate) fn secret(
        &mut self,
        parent: &str,
        name: &str,
        file: Option<std::path::PathBuf>,
        env_name: Option<String>,
    ) -> Option<Secret> {
        let (source, field) = match (file, env_name) {
            (Some(_), Some(_)) => {
                self.fail(parent, format!("set {name}_file or {name}_env, not both"));
                return None;
            }
            (Some(p), None) => (SecretSource::File(p), format!("{parent}.{name}_file")),
            (None, Some(e)) if e.is_empty() => {
                self.fail(
                    &format!("{parent}.{name}_env"),
                    "the variable name is empty",
                );
                return None;
            }
            (None, Some(e)) => (SecretSource::Env(e), format!("{parent}.{name}_env")),
            (None, None) => return None,
        };
        match source.read(self.env) {
            Ok(s) => Some(s),
            Err(e) => {
                self.fail(&field, e);
                None
            }
        }
    }

    pub(crate) fn listen(&mut self, listen: RawListen) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let http = self.addr("listen.http", listen.http.as_deref(), "127.0.0.1:9477");
        // Absent means the default address; "disabled" (or "") turns the listener off.
        let statsd = match listen.statsd.as_deref() {
            Some("disabled" | "") => None,
            other => self.addr("listen.statsd", other, "127.0.0.1:8125"),
        };
        (http, statsd)
    }

    /// The window sizes and caps (`window:` and the sizing half of `limits:`).
    pub(crate) fn window(&mut self, window: RawWindow, limits: &RawLimits) -> WindowConfig {
        let d = WindowConfig::default();
        let window_secs = window.window_secs.unwrap_or(d.window_secs);
        if !(window_secs.is_finite() && (0.1..=3600.0).contains(&window_secs)) {
            self.fail(
                "window.window_secs",
                format!("{window_secs} is out of range: use 0.1..=3600 seconds"),
            );
        }
        let shard_idle_windows = self.range(
            "window.shard_idle_windows",
            window.shard_idle_windows,
            d.shard_idle_windows,
            0,
            10_000,
        );
        let record_threads = self.range(
            "window.record_threads",
            window.record_threads,
            d.record_threads,
            1,
            skewwatch_detectors::parts::MAX_RECORD_THREADS,
        );
        let max_groups = self.range(
            "limits.max_groups",
            limits.max_groups,
            d.max_groups,
            1,
            10_000,
        );
        let max_shards_per_group = self.range(
            "limits.max_shards_per_group",
            limits.max_shards_per_group,
            d.max_shards_per_group,
            1,
            100_000,
        );
        let max_shards_total = self.range(
            "limits.max_shards_total",
            limits.max_shards_total,
            d.max_shards_total,
            1,
            1 << 20,
        );
        let pinned_groups = self.pinned_groups(limits.pinned_groups.clone().unwrap_or_default());
        let (group_key_slots, shard_key_slots, top_keys) = self.key_slots(limits, &d);
        let latency_sigfig = self.range(
            "limits.latency_sigfig",
            limits.latency_sigfig,
            d.latency_sigfig,
            1,
            3,
        );
        WindowConfig {
            window_secs,
            shard_idle_windows,
            max_groups,
            max_shards_per_group,
            max_shards_total,
            pinned_groups,
            group_key_slots,
            shard_key_slots,
            top_keys,
            latency_sigfig,
            record_threads,
            ..d
        }
    }

    /// The `whatif:` section: the observed cache, its candidates (each spec parsed), the
    /// memory bound and caps.
    pub(crate) fn whatif(&mut self, raw: RawWhatIf) -> WhatIfConfig {
        use skewwatch_detectors::whatif::{DEFAULT_CANDIDATES, MAX_TTL_SECS, Policy};
        let d = WhatIfConfig::default();
        let observed = &d.policies[0];
        let ttl = |c: &mut Self, field: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0 && x <= MAX_TTL_SECS) => {
                c.fail(
                    field,
                    format!("{x} is out of range: use (0, {MAX_TTL_SECS}] seconds"),
                );
                None
            }
            v => v,
        };
        let ttl_secs = ttl(self, "whatif.ttl_secs", raw.ttl_secs).unwrap_or(observed.ttl_secs);
        let negative = ttl(self, "whatif.negative_ttl_secs", raw.negative_ttl_secs);
        if raw.capacity_entries == Some(0) {
            self.fail(
                "whatif.capacity_entries",
                "0 entries: use at least 1, or leave it out",
            );
        }
        let observed = Policy::observed(
            ttl_secs,
            negative,
            raw.stale_on_error.unwrap_or(false),
            raw.capacity_entries.filter(|&n| n > 0),
        );
        let specs: Vec<String> = raw
            .candidates
            .unwrap_or_else(|| DEFAULT_CANDIDATES.iter().map(|s| s.to_string()).collect());
        if specs.len() > MAX_CANDIDATES {
            self.fail(
                "whatif.candidates",
                format!(
                    "{} candidates: simulate at most {MAX_CANDIDATES}",
                    specs.len()
                ),
            );
        }
        let mut policies = vec![observed.clone()];
        for (i, spec) in specs.iter().enumerate() {
            match Policy::parse(spec, &observed) {
                Ok(p) if !policies.iter().any(|q| q.name == p.name) => policies.push(p),
                Ok(p) => self.fail(
                    &format!("whatif.candidates[{i}]"),
                    format!("`{}` is named twice (or is the observed cache)", p.name),
                ),
                Err(e) => self.fail(&format!("whatif.candidates[{i}]"), e.to_string()),
            }
        }
        let shortest = policies
            .iter()
            .flat_map(|p| [Some(p.ttl_secs), p.negative_ttl_secs])
            .flatten()
            .fold(f64::INFINITY, f64::min);
        let clock_tick_secs = match raw.clock_tick_secs {
            None => d.clock_tick_secs,
            Some(t) if t.is_finite() && (0.0..=60.0).contains(&t) && t < shortest => t,
            Some(t) => {
                self.fail(
                    "whatif.clock_tick_secs",
                    format!(
                        "{t} is out of range: use 0..=60 seconds, below the shortest TTL \
                         simulated ({shortest} s)"
                    ),
                );
                d.clock_tick_secs
            }
        };
        WhatIfConfig {
            policies,
            memory_bytes_per_group: self.range(
                "whatif.memory_bytes_per_group",
                raw.memory_bytes_per_group,
                d.memory_bytes_per_group,
                64 << 10,
                1 << 30,
            ),
            max_groups: self.range("whatif.max_groups", raw.max_groups, d.max_groups, 0, 1024),
            max_shards_per_group: self.range(
                "whatif.max_shards_per_group",
                raw.max_shards_per_group,
                d.max_shards_per_group,
                1,
                4096,
            ),
            clock_tick_secs,
            backend_capacities: self.backend_capacities(raw.backend_capacities.unwrap_or_default()),
            window_secs: d.window_secs,
            exact: false,
            exact_beside: false,
        }
    }

    /// `whatif.backend_capacities`: each entry names a group and a shard (or `*`) once, with
    /// a positive rate.
    fn backend_capacities(&mut self, entries: Vec<BackendCapacity>) -> Vec<BackendCapacity> {
        let mut seen = std::collections::BTreeSet::new();
        for (i, c) in entries.iter().enumerate() {
            let at = |f: &str| format!("whatif.backend_capacities[{i}]{f}");
            if c.group.is_empty() {
                self.fail(&at(".group"), "is empty: name the group");
            }
            if c.shard.is_empty() {
                self.fail(
                    &at(".shard"),
                    "is empty: name the shard, or `*` for every shard of the group",
                );
            }
            if !(c.calls_per_second.is_finite() && c.calls_per_second > 0.0) {
                self.fail(
                    &at(".calls_per_second"),
                    format!("{} is not a positive number", c.calls_per_second),
                );
            }
            if !seen.insert((c.group.as_str(), c.shard.as_str())) {
                self.fail(
                    &at(""),
                    format!(
                        "group `{}` shard `{}` is listed twice: keep one entry",
                        c.group, c.shard
                    ),
                );
            }
        }
        entries
    }

    /// Pinned group names: valid names, no repeats, at most [`MAX_PINNED_GROUPS`].
    fn pinned_groups(&mut self, names: Vec<String>) -> Vec<String> {
        if names.len() > MAX_PINNED_GROUPS {
            self.fail(
                "limits.pinned_groups",
                format!(
                    "{} groups: pin at most {MAX_PINNED_GROUPS}; raise limits.max_groups for more",
                    names.len()
                ),
            );
        }
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() || n.len() > skewwatch_detectors::observation::MAX_NAME_BYTES {
                self.fail(
                    &format!("limits.pinned_groups[{i}]"),
                    "a group name is 1 to 128 bytes",
                );
            } else if names[..i].contains(n) {
                self.fail(
                    &format!("limits.pinned_groups[{i}]"),
                    format!("`{n}` is listed twice"),
                );
            }
        }
        names
    }

    /// Key summary slots per group and per shard, and the top keys exported per group.
    fn key_slots(&mut self, limits: &RawLimits, d: &WindowConfig) -> (usize, usize, usize) {
        let group_key_slots = self.range(
            "limits.group_key_slots",
            limits.group_key_slots,
            d.group_key_slots,
            1,
            1 << 20,
        );
        let shard_key_slots = self.range(
            "limits.shard_key_slots",
            limits.shard_key_slots,
            d.shard_key_slots,
            1,
            1 << 16,
        );
        let exported = self.range(
            "limits.exported_keys_per_group",
            limits.exported_keys_per_group,
            d.top_keys,
            0,
            1000,
        );
        if exported > group_key_slots {
            self.fail(
                "limits.exported_keys_per_group",
                format!(
                    "{exported} exceeds limits.group_key_slots ({group_key_slots}): \
                     a summary cannot report more keys than it tracks"
                ),
            );
        }
        (group_key_slots, shard_key_slots, exported)
    }

    pub(crate) fn limits(&mut self, limits: RawLimits) -> Limits {
        Limits {
            http_body_limit_bytes: self.range(
                "limits.http_body_limit_bytes",
                limits.http_body_limit_bytes,
                DEFAULT_HTTP_BODY_LIMIT_BYTES,
                1024,
                1 << 30,
            ),
            ingest_queue_bytes: self.range(
                "limits.ingest_queue_bytes",
                limits.ingest_queue_bytes,
                DEFAULT_QUEUE_BYTES,
                1 << 16,
                1 << 31,
            ),
            ingest_queue_batches: self.range(
                "limits.ingest_queue_batches",
                limits.ingest_queue_batches,
                DEFAULT_QUEUE_BATCHES,
                1,
                1 << 20,
            ),
        }
    }

    pub(crate) fn auth(&mut self, auth: RawAuth) -> Option<Secret> {
        self.secret(
            "auth",
            "bearer_token",
            auth.bearer_token_file,
            auth.bearer_token_env,
        )
    }
}

/// Listeners reachable from off the machine without a token, unless the configuration allows
/// it. StatsD over UDP has no token at all, so a StatsD listener off loopback always needs
/// `auth.allow_unauthenticated: true`.
pub fn exposure_problems(
    http: SocketAddr,
    statsd: Option<SocketAddr>,
    has_token: bool,
    allow_unauthenticated: bool,
) -> Vec<Problem> {
    let mut out = Vec::new();
    if allow_unauthenticated {
        return out;
    }
    if !http.ip().is_loopback() && !has_token {
        out.push(Problem {
            field: "listen.http".into(),
            why: format!(
                "{http} is reachable from other machines and no auth.bearer_token_file or \
                 auth.bearer_token_env is set: set a token, bind 127.0.0.1, or set \
                 auth.allow_unauthenticated: true"
            ),
        });
    }
    if let Some(addr) = statsd.filter(|a| !a.ip().is_loopback()) {
        out.push(Problem {
            field: "listen.statsd".into(),
            why: format!(
                "{addr} is reachable from other machines and StatsD cannot carry a token: bind \
                 127.0.0.1, or set auth.allow_unauthenticated: true"
            ),
        });
    }
    out
}

impl Check<'_> {
    /// An `http://host` URL at `field` (a receiver's or a scrape target's); https is refused
    /// with what to do instead, and a password never shows in a message.
    pub(crate) fn receiver_url(&mut self, field: &str, v: Option<&str>) -> Option<reqwest::Url> {
        let Some(s) = v else {
            self.fail(field, "required: the receiver's http:// URL");
            return None;
        };
        match reqwest::Url::parse(s) {
            Ok(u) if u.scheme() == "http" && u.host().is_some() => Some(u),
            Ok(u) if u.scheme() == "https" => {
                self.fail(
                    field,
                    format!(
                        "`{}`: https is not supported, this build has no TLS; reach the receiver \
                         over plain http on a trusted network or through a TLS-terminating proxy",
                        redact(&u)
                    ),
                );
                None
            }
            Ok(u) => {
                self.fail(field, format!("`{}` is not an http://host URL", redact(&u)));
                None
            }
            Err(e) => {
                self.fail(
                    field,
                    format!("not a URL ({e}); write e.g. http://127.0.0.1:9093"),
                );
                None
            }
        }
    }
}

/// `url` with any password replaced, for messages.
fn redact(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    if u.password().is_some() {
        let _ = u.set_password(Some("xxxxx"));
    }
    u.to_string()
}
