//! The observation model: one or more identical requests to one shard of one sharded system.
//!
//! This is the first stage of the flow (`Observation -> Window -> SkewStats -> Detectors`).
//! Inputs (StatsD, NDJSON, replay traces) parse into [`ObservationRef`], borrowing from their
//! buffers; [`Batch`] packs many of them into one string arena so a batch crosses a channel
//! with two allocations instead of several per record.
//!
//! A shard's saturation (requests in flight, utilisation) is not a request: it arrives as a
//! [`ReadingRef`], its own record in the batch's second, short list. Readings come once per
//! shard per report rather than once per request, so the request records stay as narrow as
//! the hot paths need them.

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU64;

use crate::keys::same_key;

/// Longest accepted `group` or `shard` value, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest accepted `key` value, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest accepted `cache_key` value, in bytes: room for the longest keys caches take
/// (memcached's 250 bytes) and for composite keys; the value is hashed on arrival, so its
/// length costs nothing after parsing.
pub const MAX_CACHE_KEY_BYTES: usize = 1024;
/// Largest accepted `latency_ms`: one day. Longer values are almost surely unit mistakes.
pub const MAX_LATENCY_MS: f64 = 86_400_000.0;
/// Largest accepted `count` for one record.
pub const MAX_COUNT: u64 = 1 << 40;
/// Largest accepted `inflight` reading: a billion requests in flight on one shard is a unit
/// mistake.
pub const MAX_INFLIGHT: f64 = 1e9;

/// The label value that stands for the empty key, because Prometheus and Alertmanager drop
/// empty label values.
pub const EMPTY_KEY_LABEL: &str = "(empty)";
/// The label value that collects shards, keys or groups beyond their caps.
pub const OTHER_LABEL: &str = "__other__";

/// Result class of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum Outcome {
    /// The request succeeded.
    #[default]
    Ok = 0,
    /// A generic failure.
    Error = 1,
    /// The request ran out of time.
    Timeout = 2,
    /// The shard answered that the item does not exist (the fast-failure incident's answer).
    NotFound = 3,
    /// The shard refused the request because of a rate limit.
    Throttled = 4,
    /// The shard could not serve at all.
    Unavailable = 5,
}

impl Outcome {
    /// Every outcome class, in index order.
    pub const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::Error,
        Outcome::Timeout,
        Outcome::NotFound,
        Outcome::Throttled,
        Outcome::Unavailable,
    ];
    /// Number of outcome classes.
    pub const COUNT: usize = 6;
    /// The error classes: every outcome but `ok`, in index order.
    pub const ERRORS: [Outcome; 5] = [
        Outcome::Error,
        Outcome::Timeout,
        Outcome::NotFound,
        Outcome::Throttled,
        Outcome::Unavailable,
    ];

    /// Parses the wire name (`ok`, `error`, `timeout`, `not_found`, `throttled`, `unavailable`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ok" => Outcome::Ok,
            "error" => Outcome::Error,
            "timeout" => Outcome::Timeout,
            "not_found" => Outcome::NotFound,
            "throttled" => Outcome::Throttled,
            "unavailable" => Outcome::Unavailable,
            _ => return None,
        })
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::NotFound => "not_found",
            Outcome::Throttled => "throttled",
            Outcome::Unavailable => "unavailable",
        }
    }

    /// Index into per-outcome arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// True for every class but `ok`.
    pub fn is_error(self) -> bool {
        self != Outcome::Ok
    }

    /// The error class with the most requests in `by_outcome` (counts indexed by
    /// [`Outcome::index`]); `None` when no request failed. Ties go to the class that comes
    /// first in [`Outcome::ERRORS`], so the answer is deterministic.
    pub fn dominant_error(by_outcome: &[u64; Outcome::COUNT]) -> Option<Outcome> {
        Outcome::ERRORS
            .iter()
            .copied()
            .filter(|c| by_outcome[c.index()] > 0)
            .fold(None, |best: Option<Outcome>, c| match best {
                Some(b) if by_outcome[b.index()] >= by_outcome[c.index()] => Some(b),
                _ => Some(c),
            })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Look-aside cache result of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheResult {
    /// Served from the cache.
    Hit,
    /// Not in the cache: the request went to the backend.
    Miss,
}

impl CacheResult {
    /// Parses `hit` or `miss`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hit" => Some(CacheResult::Hit),
            "miss" => Some(CacheResult::Miss),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheResult::Hit => "hit",
            CacheResult::Miss => "miss",
        }
    }
}

/// Why a record was rejected. Each reason is a label value of
/// `skewwatch_ingest_rejected_total{source,reason}`, so the set is closed and small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
#[repr(u8)]
pub enum RejectReason {
    /// The bytes are not valid UTF-8, or not the expected syntax (JSON, StatsD line).
    #[error("malformed record: not valid JSON / StatsD syntax or not UTF-8")]
    Malformed,
    /// `group` is absent.
    #[error("missing required field `group`")]
    MissingGroup,
    /// `shard` is absent.
    #[error("missing required field `shard`")]
    MissingShard,
    /// `group` or `shard` is empty or longer than 128 bytes, `key` longer than 256 bytes, or
    /// `cache_key` empty or longer than 1024 bytes.
    #[error(
        "field too long or empty: group and shard take 1..=128 bytes, key 0..=256, \
         cache_key 1..=1024"
    )]
    FieldLength,
    /// A field has the wrong JSON type (a number where a string belongs, say).
    #[error("field has the wrong type")]
    WrongType,
    /// `latency_ms` is negative, NaN, infinite or above one day.
    #[error("latency_ms must be a finite number in 0..=86400000")]
    BadLatency,
    /// `count` is not an integer in 1..=2^40, or a StatsD sample rate is not in (0, 1].
    #[error("count must be an integer >= 1; sample rate must be in (0, 1]")]
    BadCount,
    /// `outcome` is not one of the six classes.
    #[error("outcome must be one of ok, error, timeout, not_found, throttled, unavailable")]
    UnknownOutcome,
    /// `cache` is not `hit` or `miss`.
    #[error("cache must be hit or miss")]
    BadCache,
    /// `ts` is not unix seconds or an RFC 3339 string.
    #[error("ts must be unix seconds or an RFC 3339 timestamp")]
    BadTimestamp,
    /// A StatsD line with a metric name or type that skewwatch does not take.
    #[error("unsupported StatsD metric name or type")]
    UnsupportedMetric,
    /// `inflight` is not a number in 0..=1e9, or `utilisation` not in 0..=1 (StatsD gauge
    /// deltas `+n`/`-n` included: they need the sender's previous value).
    #[error(
        "inflight must be a number in 0..=1e9 and utilisation a number in 0..=1, both absolute \
         (a StatsD gauge delta +n/-n is not taken)"
    )]
    BadGauge,
}

impl RejectReason {
    /// Every reason, for pre-registering counters so that zeros are visible.
    pub const ALL: [RejectReason; 12] = [
        RejectReason::Malformed,
        RejectReason::MissingGroup,
        RejectReason::MissingShard,
        RejectReason::FieldLength,
        RejectReason::WrongType,
        RejectReason::BadLatency,
        RejectReason::BadCount,
        RejectReason::UnknownOutcome,
        RejectReason::BadCache,
        RejectReason::BadTimestamp,
        RejectReason::UnsupportedMetric,
        RejectReason::BadGauge,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Malformed => "malformed",
            RejectReason::MissingGroup => "missing_group",
            RejectReason::MissingShard => "missing_shard",
            RejectReason::FieldLength => "field_length",
            RejectReason::WrongType => "wrong_type",
            RejectReason::BadLatency => "bad_latency",
            RejectReason::BadCount => "bad_count",
            RejectReason::UnknownOutcome => "unknown_outcome",
            RejectReason::BadCache => "bad_cache",
            RejectReason::BadTimestamp => "bad_timestamp",
            RejectReason::UnsupportedMetric => "unsupported_metric",
            RejectReason::BadGauge => "bad_gauge",
        }
    }
}

/// Rejected-record counts by reason, kept by a parser and added to the self-metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rejections {
    counts: [u64; RejectReason::ALL.len()],
}

impl Rejections {
    /// Counts one rejected record.
    pub fn add(&mut self, reason: RejectReason) {
        self.counts[reason as usize] += 1;
    }

    /// How many records were rejected for `reason`.
    pub fn get(&self, reason: RejectReason) -> u64 {
        self.counts[reason as usize]
    }

    /// All rejected records.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The non-zero counts.
    pub fn iter(&self) -> impl Iterator<Item = (RejectReason, u64)> + '_ {
        RejectReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Rejections) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }
}

/// One observation, borrowing its strings from the input buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObservationRef<'a> {
    /// Trace time in unix seconds, when the input carried one.
    pub ts: Option<f64>,
    /// The sharded system.
    pub group: &'a str,
    /// The shard, partition, backend or cluster.
    pub shard: &'a str,
    /// The partition or index key; `Some("")` is the empty key, `None` is no key.
    pub key: Option<&'a str>,
    /// How many identical requests this record stands for (>= 1).
    pub count: u64,
    /// Latency of each request, when known.
    pub latency_ms: Option<f64>,
    /// Result class.
    pub outcome: Outcome,
    /// Cache result, when the request went through a look-aside cache.
    pub cache: Option<CacheResult>,
    /// The hash ([`hash_cache_key`]) of the look-aside cache's key for this request, when the
    /// input named it. Only the hash is kept: the what-if simulation needs to tell keys apart
    /// and to sample them, never to show them.
    pub cache_key: Option<CacheKeyHash>,
}

/// The hash of a look-aside cache's key: all the agent keeps of it.
///
/// Computed by [`hash_cache_key`], the same on every platform and in every build (FNV-1a,
/// then the splitmix64 mix so every bit depends on every byte), so a replayed trace samples
/// the same keys as the live agent did.
///
/// Never zero, so `Option<CacheKeyHash>` is 8 bytes: an observation without a cache key is
/// only that much wider than before cache keys existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKeyHash(NonZeroU64);

impl CacheKeyHash {
    /// The hash `h` (0 is taken as 1: one value in 2⁶⁴ shares a hash with another).
    pub const fn new(h: u64) -> Self {
        match NonZeroU64::new(h) {
            Some(n) => CacheKeyHash(n),
            None => CacheKeyHash(NonZeroU64::MIN),
        }
    }

    /// The 64 bits.
    pub const fn get(self) -> u64 {
        self.0.get()
    }
}

/// Checks a cache key's length (1..=[`MAX_CACHE_KEY_BYTES`] bytes) and hashes it; every input
/// path calls this, so the rules and the hash are the same whichever way the key came.
#[inline]
pub fn hash_cache_key(key: &[u8]) -> Result<CacheKeyHash, RejectReason> {
    if key.is_empty() || key.len() > MAX_CACHE_KEY_BYTES {
        return Err(RejectReason::FieldLength);
    }
    Ok(CacheKeyHash::new(crate::prng::mix(crate::prng::fnv1a64(
        key,
    ))))
}

impl<'a> ObservationRef<'a> {
    /// A successful single request with no key, latency or cache result.
    pub fn new(group: &'a str, shard: &'a str) -> Self {
        ObservationRef {
            ts: None,
            group,
            shard,
            key: None,
            count: 1,
            latency_ms: None,
            outcome: Outcome::Ok,
            cache: None,
            cache_key: None,
        }
    }

    /// Checks the data-model rules that do not depend on the wire format.
    pub fn validate(&self) -> Result<(), RejectReason> {
        if !names_fit(self.group, self.shard) {
            return Err(RejectReason::FieldLength);
        }
        if self.key.is_some_and(|k| k.len() > MAX_KEY_BYTES) {
            return Err(RejectReason::FieldLength);
        }
        if self.count == 0 || self.count > MAX_COUNT {
            return Err(RejectReason::BadCount);
        }
        if let Some(l) = self.latency_ms
            && !(l.is_finite() && (0.0..=MAX_LATENCY_MS).contains(&l))
        {
            return Err(RejectReason::BadLatency);
        }
        if let Some(ts) = self.ts
            && !ts.is_finite()
        {
            return Err(RejectReason::BadTimestamp);
        }
        Ok(())
    }
}

/// Whether `group` and `shard` are each 1..=[`MAX_NAME_BYTES`] bytes long.
#[inline(always)]
fn names_fit(group: &str, shard: &str) -> bool {
    !(group.is_empty()
        || group.len() > MAX_NAME_BYTES
        || shard.is_empty()
        || shard.len() > MAX_NAME_BYTES)
}

/// What a saturation reading measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadingKind {
    /// Requests in flight on the shard, 0..=[`MAX_INFLIGHT`].
    Inflight,
    /// Busy fraction of the shard (CPU, worker pool, connection pool), 0..=1.
    Utilisation,
}

impl ReadingKind {
    /// Both kinds.
    pub const ALL: [ReadingKind; 2] = [ReadingKind::Inflight, ReadingKind::Utilisation];

    /// The field and gauge name: `inflight` or `utilisation`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadingKind::Inflight => "inflight",
            ReadingKind::Utilisation => "utilisation",
        }
    }

    /// The largest value a reading of this kind takes.
    pub fn max(self) -> f64 {
        match self {
            ReadingKind::Inflight => MAX_INFLIGHT,
            ReadingKind::Utilisation => 1.0,
        }
    }
}

/// One saturation reading of a shard as its sender sees it, borrowing its strings from the
/// input buffer. It stands for no request: the window keeps each shard's highest reading of
/// each kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadingRef<'a> {
    /// Trace time in unix seconds, when the input carried one.
    pub ts: Option<f64>,
    /// The sharded system.
    pub group: &'a str,
    /// The shard that reports.
    pub shard: &'a str,
    /// What was read.
    pub kind: ReadingKind,
    /// The value, absolute (not a change since the previous reading).
    pub value: f64,
}

impl ReadingRef<'_> {
    /// Checks the data-model rules: names as for an observation, the value in
    /// 0..=[`ReadingKind::max`] (NaN is out), a finite `ts`.
    pub fn validate(&self) -> Result<(), RejectReason> {
        if !names_fit(self.group, self.shard) {
            return Err(RejectReason::FieldLength);
        }
        if !(0.0..=self.kind.max()).contains(&self.value) {
            return Err(RejectReason::BadGauge);
        }
        if self.ts.is_some_and(|ts| !ts.is_finite()) {
            return Err(RejectReason::BadTimestamp);
        }
        Ok(())
    }
}

/// Marks a user-supplied name that would otherwise read as a reserved rendering.
pub const LITERAL_ESCAPE: char = '\\';

/// Renders a user-supplied name (group, shard or key value) as a label value.
///
/// Two renderings are reserved: [`EMPTY_KEY_LABEL`] for the empty key and [`OTHER_LABEL`] for
/// what overflowed a cap. A name equal to one of them, or starting with [`LITERAL_ESCAPE`], is
/// written with one more `\` in front, so no input can pass for the empty key or for the
/// overflow series, and two different names never render the same. Every other name is
/// written as is.
pub fn label_value(name: &str) -> Cow<'_, str> {
    if name == EMPTY_KEY_LABEL || name == OTHER_LABEL || name.starts_with(LITERAL_ESCAPE) {
        Cow::Owned(format!("{LITERAL_ESCAPE}{name}"))
    } else {
        Cow::Borrowed(name)
    }
}

/// Renders a key as a label value: the empty key becomes [`EMPTY_KEY_LABEL`]; any other key as
/// [`label_value`] writes it.
pub fn key_label(key: &str) -> Cow<'_, str> {
    if key.is_empty() {
        Cow::Borrowed(EMPTY_KEY_LABEL)
    } else {
        label_value(key)
    }
}

/// Renders a user-supplied name for prose (alert summaries and descriptions), which chat
/// receivers may treat as markup: in double quotes, with `\` and `"` escaped and every
/// character that could start markup, a link or a mention (`< > & @ [ ] \``) or that is a
/// control character written as `\u{..}`. Ordinary names read as themselves, in quotes.
pub fn quote(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '<' | '>' | '&' | '@' | '[' | ']' | '`' => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A key for prose: the empty key as [`EMPTY_KEY_LABEL`], any other in quotes ([`quote`]).
pub fn quote_key(key: &str) -> String {
    if key.is_empty() {
        EMPTY_KEY_LABEL.to_owned()
    } else {
        quote(key)
    }
}

/// A packed record inside a [`Batch`]: string fields are byte ranges of the arena.
#[derive(Debug, Clone, Copy)]
struct Packed {
    ts: Option<f64>,
    group: (u32, u32),
    shard: (u32, u32),
    /// `u32::MAX` start marks "no key".
    key: (u32, u32),
    count: u64,
    latency_ms: Option<f64>,
    outcome: Outcome,
    cache: Option<CacheResult>,
}

/// A packed [`ReadingRef`] inside a [`Batch`].
#[derive(Debug, Clone, Copy)]
struct PackedReading {
    ts: Option<f64>,
    group: (u32, u32),
    shard: (u32, u32),
    kind: ReadingKind,
    value: f64,
}

/// Requests that carried a key, counted where their shards are not known: the group's key
/// summary learns them and they count as the group's keyed requests, but they are no request of
/// any shard (the fleet input's summed key counters, whose requests the shard records already
/// count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyCountRef<'a> {
    /// The group.
    pub group: &'a str,
    /// The key; `None` for keyed requests whose key is not named (a sidecar's `__other__`).
    pub key: Option<&'a str>,
    /// Requests.
    pub count: u64,
}

/// A packed [`KeyCountRef`] inside a [`Batch`].
#[derive(Debug, Clone, Copy)]
struct PackedKeyCount {
    group: (u32, u32),
    /// `u32::MAX` start marks "no key".
    key: (u32, u32),
    count: u64,
}

/// Many observations in one string arena: what ingest hands the pipeline.
///
/// Saturation readings ([`ReadingRef`]) are a second list beside the observations, with
/// their strings in the same arena. A consumer applies both lists; their order does not
/// matter within a window, as a window keeps the highest of each reading.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    arena: String,
    records: Vec<Packed>,
    readings: Vec<PackedReading>,
    key_counts: Vec<PackedKeyCount>,
    /// The cache keys of the records that carry one, by record index, in record order: a side
    /// list, so a record without a cache key is as narrow as before cache keys existed.
    cache_keys: Vec<(u32, CacheKeyHash)>,
}

impl Batch {
    /// Heap bytes the batch holds: what it costs while it waits in a queue.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + self.records.capacity() * std::mem::size_of::<Packed>()
            + self.readings.capacity() * std::mem::size_of::<PackedReading>()
            + self.key_counts.capacity() * std::mem::size_of::<PackedKeyCount>()
            + self.cache_keys.capacity() * std::mem::size_of::<(u32, CacheKeyHash)>()
    }

    /// An empty batch with room for `records` records of about 48 string bytes each.
    pub fn with_capacity(records: usize) -> Self {
        Batch {
            arena: String::with_capacity(records * 48),
            records: Vec::with_capacity(records),
            readings: Vec::new(),
            key_counts: Vec::new(),
            cache_keys: Vec::new(),
        }
    }

    /// Appends a copy of `obs`. The caller validates first.
    pub fn push(&mut self, obs: &ObservationRef<'_>) {
        // Consecutive records usually share their group and often their shard: compare each
        // with the same field of the previous record and reuse its copy. A key is copied
        // without looking, as it rarely repeats.
        let last = self.records.last().map(|p| (p.group, p.shard));
        let group = match last {
            Some((g, _)) if self.holds(g, obs.group) => g,
            _ => self.append(obs.group),
        };
        let shard = match last {
            Some((_, s)) if self.holds(s, obs.shard) => s,
            _ if obs.shard == obs.group => group,
            _ => self.append(obs.shard),
        };
        let key = match obs.key {
            Some(k) => self.append(k),
            None => (u32::MAX, 0),
        };
        if let Some(h) = obs.cache_key {
            self.push_cache_key(h);
        }
        self.records.push(Packed {
            ts: obs.ts,
            group,
            shard,
            key,
            count: obs.count,
            latency_ms: obs.latency_ms,
            outcome: obs.outcome,
            cache: obs.cache,
        });
    }

    /// Notes the cache key of the record about to be pushed; out of line, so the records
    /// without one carry no more code than a test of the field.
    #[cold]
    #[inline(never)]
    fn push_cache_key(&mut self, h: CacheKeyHash) {
        self.cache_keys.push((self.records.len() as u32, h));
    }

    /// How many observations carry a cache key.
    pub fn cache_keyed_len(&self) -> usize {
        self.cache_keys.len()
    }

    /// The observations that carry a cache key, in insertion order, each with its
    /// `cache_key` set ([`Batch::iter`] leaves it `None`: the windows do not read it).
    pub fn cache_keyed(&self) -> impl ExactSizeIterator<Item = ObservationRef<'_>> + '_ {
        self.cache_keys.iter().map(move |&(i, h)| ObservationRef {
            cache_key: Some(h),
            ..self.unpack(&self.records[i as usize])
        })
    }

    /// The observations, in insertion order, each with its `cache_key` where it has one: what
    /// a consumer that reads cache keys record by record (replay) iterates; the windows'
    /// recording loops use [`Batch::iter`], which does not look for them.
    pub fn iter_with_cache_keys(&self) -> impl ExactSizeIterator<Item = ObservationRef<'_>> + '_ {
        // The index of the next record with a cache key (`u32::MAX` when none is left): one
        // compare per record, none of whose records pays more when the batch has no key.
        let at = |i: usize| self.cache_keys.get(i).map_or(u32::MAX, |c| c.0);
        let (mut next, mut next_at) = (0, at(0));
        self.records.iter().enumerate().map(move |(i, p)| {
            let mut obs = self.unpack(p);
            if i as u32 == next_at {
                obs.cache_key = Some(self.cache_keys[next].1);
                next += 1;
                next_at = at(next);
            }
            obs
        })
    }

    /// Appends a copy of `reading`. The caller validates first.
    pub fn push_reading(&mut self, reading: &ReadingRef<'_>) {
        let group = self.append(reading.group);
        let shard = self.append(reading.shard);
        self.readings.push(PackedReading {
            ts: reading.ts,
            group,
            shard,
            kind: reading.kind,
            value: reading.value,
        });
    }

    /// Appends a copy of `kc`. The caller validates the names first.
    pub fn push_key_count(&mut self, kc: &KeyCountRef<'_>) {
        let group = self.append(kc.group);
        let key = match kc.key {
            Some(k) => self.append(k),
            None => (u32::MAX, 0),
        };
        self.key_counts.push(PackedKeyCount {
            group,
            key,
            count: kc.count,
        });
    }

    /// The key counts, in insertion order.
    pub fn key_counts(&self) -> impl ExactSizeIterator<Item = KeyCountRef<'_>> + '_ {
        self.key_counts.iter().map(move |p| KeyCountRef {
            group: self.text(p.group),
            key: (p.key.0 != u32::MAX).then(|| self.text(p.key)),
            count: p.count,
        })
    }

    /// Whether the arena range `r` holds exactly `s`.
    #[inline]
    fn holds(&self, r: (u32, u32), s: &str) -> bool {
        // Bytes, not `str` slicing: no char-boundary checks on the hot path; and an inline
        // word compare, not a `memcmp` call, which costs more than comparing a short name.
        self.arena
            .as_bytes()
            .get(r.0 as usize..r.1 as usize)
            .is_some_and(|held| same_key(held, s.as_bytes()))
    }

    /// Copies `s` into the arena and returns its range.
    fn append(&mut self, s: &str) -> (u32, u32) {
        let start = self.arena.len() as u32;
        self.arena.push_str(s);
        (start, self.arena.len() as u32)
    }

    /// Number of records: observations, readings and key counts.
    pub fn len(&self) -> usize {
        self.records.len() + self.readings.len() + self.key_counts.len()
    }

    /// True when the batch holds no record, observation, reading or key count.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.readings.is_empty() && self.key_counts.is_empty()
    }

    /// Total requests the batch stands for (sum of counts).
    pub fn requests(&self) -> u64 {
        self.records
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(r.count))
    }

    /// Removes every record, keeping the allocations.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.records.clear();
        self.readings.clear();
        self.key_counts.clear();
        self.cache_keys.clear();
    }

    /// The arena text a record's `(start, end)` span points at.
    #[inline]
    fn text(&self, (start, end): (u32, u32)) -> &str {
        &self.arena[start as usize..end as usize]
    }

    /// The saturation readings, in insertion order.
    pub fn readings(&self) -> impl ExactSizeIterator<Item = ReadingRef<'_>> + '_ {
        self.readings.iter().map(move |p| {
            let s = |r| self.text(r);
            ReadingRef {
                ts: p.ts,
                group: s(p.group),
                shard: s(p.shard),
                kind: p.kind,
                value: p.value,
            }
        })
    }

    /// The observations, in insertion order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = ObservationRef<'_>> + '_ {
        self.records.iter().map(move |p| self.unpack(p))
    }

    /// A packed record as an observation. Always inlined: the iterator's closure is on every
    /// recording loop's path, and once it had several callers the compiler kept it out of
    /// line, which cost about 15 instructions an observation (`scripts/instructions.sh`).
    #[inline(always)]
    fn unpack(&self, p: &Packed) -> ObservationRef<'_> {
        let s = |r| self.text(r);
        ObservationRef {
            ts: p.ts,
            group: s(p.group),
            shard: s(p.shard),
            key: (p.key.0 != u32::MAX).then(|| s(p.key)),
            count: p.count,
            latency_ms: p.latency_ms,
            outcome: p.outcome,
            cache: p.cache,
            cache_key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trips_records_and_keeps_empty_key_apart_from_absent_key() {
        let mut b = Batch::with_capacity(4);
        let mut a = ObservationRef::new("db", "s1");
        a.key = Some("");
        let mut c = ObservationRef::new("db", "s2");
        c.count = 10;
        c.latency_ms = Some(2.5);
        c.outcome = Outcome::NotFound;
        c.cache = Some(CacheResult::Miss);
        b.push(&a);
        b.push(&c);
        let got: Vec<_> = b.iter().collect();
        assert_eq!(got, vec![a, c]);
        assert_eq!(got[0].key, Some(""));
        assert_eq!(got[1].key, None);
        assert_eq!(b.requests(), 11);
        assert_eq!(b.cache_keyed_len(), 0);
    }

    #[test]
    fn cache_keys_ride_in_a_side_list_and_come_back_with_their_records() {
        let mut b = Batch::default();
        let plain = ObservationRef::new("db", "s1");
        let mut keyed = ObservationRef::new("db", "s2");
        keyed.cache_key = Some(hash_cache_key(b"user:1").unwrap());
        for o in [plain, keyed, plain, keyed] {
            b.push(&o);
        }
        assert_eq!(
            b.iter_with_cache_keys().collect::<Vec<_>>(),
            [plain, keyed, plain, keyed]
        );
        assert_eq!(b.cache_keyed().collect::<Vec<_>>(), [keyed, keyed]);
        assert!(b.iter().all(|o| o.cache_key.is_none()));
        b.clear();
        assert_eq!(b.cache_keyed_len(), 0);
    }

    #[test]
    fn a_cache_key_is_one_to_a_thousand_and_twenty_four_bytes() {
        assert_eq!(hash_cache_key(b""), Err(RejectReason::FieldLength));
        let long = vec![b'k'; MAX_CACHE_KEY_BYTES + 1];
        assert_eq!(hash_cache_key(&long), Err(RejectReason::FieldLength));
        assert!(hash_cache_key(&long[1..]).is_ok());
        assert_ne!(hash_cache_key(b"a"), hash_cache_key(b"b"));
    }

    #[test]
    fn key_counts_ride_beside_the_observations_and_stand_for_no_request() {
        let mut b = Batch::default();
        b.push(&ObservationRef::new("db", "s1"));
        let named = KeyCountRef {
            group: "db",
            key: Some(""),
            count: 40,
        };
        let unnamed = KeyCountRef { key: None, ..named };
        b.push_key_count(&named);
        b.push_key_count(&unnamed);
        assert_eq!((b.len(), b.requests()), (3, 1));
        assert_eq!(b.key_counts().collect::<Vec<_>>(), vec![named, unnamed]);
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn readings_ride_beside_the_observations_and_stand_for_no_request() {
        let mut b = Batch::with_capacity(2);
        b.push(&ObservationRef::new("db", "s1"));
        let r = ReadingRef {
            ts: Some(1_700_000_000.5),
            group: "db",
            shard: "s2",
            kind: ReadingKind::Utilisation,
            value: 0.85,
        };
        b.push_reading(&r);
        assert_eq!((b.len(), b.requests()), (2, 1));
        assert_eq!(b.iter().count(), 1);
        assert_eq!(b.readings().collect::<Vec<_>>(), vec![r]);
        let with_readings = b.heap_bytes();
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.readings().count(), 0);
        b.push_reading(&r);
        assert!(
            !b.is_empty(),
            "a batch of readings alone must still be handed over"
        );
        assert!(with_readings > 0);
    }

    #[test]
    fn reading_validate_rejects_each_rule() {
        let ok = ReadingRef {
            ts: None,
            group: "g",
            shard: "s",
            kind: ReadingKind::Inflight,
            value: MAX_INFLIGHT,
        };
        assert_eq!(ok.validate(), Ok(()));
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        for (r, reason) in [
            (ReadingRef { shard: "", ..ok }, RejectReason::FieldLength),
            (ReadingRef { group: &long, ..ok }, RejectReason::FieldLength),
            (ReadingRef { value: -0.5, ..ok }, RejectReason::BadGauge),
            (ReadingRef { value: 2e9, ..ok }, RejectReason::BadGauge),
            (
                ReadingRef {
                    value: f64::NAN,
                    ..ok
                },
                RejectReason::BadGauge,
            ),
            (
                ReadingRef {
                    kind: ReadingKind::Utilisation,
                    value: 1.01,
                    ..ok
                },
                RejectReason::BadGauge,
            ),
            (
                ReadingRef {
                    ts: Some(f64::INFINITY),
                    ..ok
                },
                RejectReason::BadTimestamp,
            ),
        ] {
            assert_eq!(r.validate(), Err(reason), "{r:?}");
        }
        let full = ReadingRef {
            kind: ReadingKind::Utilisation,
            value: 1.0,
            ..ok
        };
        assert_eq!(full.validate(), Ok(()));
    }

    #[test]
    fn validate_rejects_each_rule() {
        let ok = ObservationRef::new("g", "s");
        assert_eq!(ok.validate(), Ok(()));
        let long = "x".repeat(129);
        assert_eq!(
            ObservationRef::new(&long, "s").validate(),
            Err(RejectReason::FieldLength)
        );
        assert_eq!(
            ObservationRef::new("g", "").validate(),
            Err(RejectReason::FieldLength)
        );
        let mut o = ok;
        o.latency_ms = Some(f64::NAN);
        assert_eq!(o.validate(), Err(RejectReason::BadLatency));
        o.latency_ms = Some(-1.0);
        assert_eq!(o.validate(), Err(RejectReason::BadLatency));
        let mut o = ok;
        o.count = 0;
        assert_eq!(o.validate(), Err(RejectReason::BadCount));
        let key = "k".repeat(257);
        let mut o = ok;
        o.key = Some(&key);
        assert_eq!(o.validate(), Err(RejectReason::FieldLength));
    }

    #[test]
    fn dominant_error_breaks_ties_by_order() {
        let mut by = [0u64; Outcome::COUNT];
        assert_eq!(Outcome::dominant_error(&by), None);
        by[Outcome::Timeout.index()] = 5;
        by[Outcome::NotFound.index()] = 5;
        assert_eq!(Outcome::dominant_error(&by), Some(Outcome::Timeout));
        by[Outcome::NotFound.index()] = 6;
        assert_eq!(Outcome::dominant_error(&by), Some(Outcome::NotFound));
    }

    #[test]
    fn the_error_classes_are_every_outcome_but_ok() {
        let errors: Vec<Outcome> = Outcome::ALL.into_iter().filter(|o| o.is_error()).collect();
        assert_eq!(errors, Outcome::ERRORS);
    }

    #[test]
    fn outcome_names_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(Outcome::parse("NOT_FOUND"), None);
    }
}
