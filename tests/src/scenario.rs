//! The seeded scenario generator: deterministic traces of observations for incident shapes and
//! for benign traffic, written as NDJSON that `skewwatch replay` reads.
//!
//! Traces are compact: each record stands for several identical requests (`count`), one record
//! per shard, second, outcome class, cache result and latency draw, so an hour of thousands of
//! requests per second stays a few hundred thousand lines.

use std::fmt::Write as _;
use std::path::Path;

use skewwatch_detectors::prng::{GOLDEN_GAMMA, SplitMix64};

/// The scenario generator: the workspace's [`SplitMix64`] plus the distributions scenarios
/// draw from.
#[derive(Debug, Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    /// A generator from a seed. The seed is mixed with [`GOLDEN_GAMMA`] first, so small
    /// neighbouring seeds do not start from neighbouring states.
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed ^ GOLDEN_GAMMA))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0.next_f64()
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Poisson with mean `lambda`: exact (Knuth) below 30, normal approximation above.
    pub fn poisson(&mut self, lambda: f64) -> u64 {
        if lambda <= 0.0 {
            return 0;
        }
        if lambda < 30.0 {
            let l = (-lambda).exp();
            let mut k = 0;
            let mut p = 1.0;
            loop {
                p *= self.uniform();
                if p <= l {
                    return k;
                }
                k += 1;
            }
        }
        (lambda + lambda.sqrt() * self.normal()).round().max(0.0) as u64
    }

    /// Lognormal with the given median and shape `sigma`.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Binomial(n, p): exact for small n, normal approximation for large.
    pub fn binomial(&mut self, n: u64, p: f64) -> u64 {
        if p <= 0.0 || n == 0 {
            return 0;
        }
        if p >= 1.0 {
            return n;
        }
        if n < 64 {
            return (0..n).filter(|_| self.chance(p)).count() as u64;
        }
        let mean = n as f64 * p;
        let sd = (mean * (1.0 - p)).sqrt();
        (mean + sd * self.normal()).round().clamp(0.0, n as f64) as u64
    }
}

/// Cumulative Zipf(s) weights over `n` ranks, for sampling by binary search.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// Zipf with exponent `s` over ranks `0..n`.
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for i in 1..=n {
            acc += 1.0 / (i as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    /// A rank in `0..n`.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.uniform();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }

    /// Probability of rank `i`.
    pub fn p(&self, i: usize) -> f64 {
        self.cdf[i] - if i == 0 { 0.0 } else { self.cdf[i - 1] }
    }
}

/// One observation record of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Unix seconds.
    pub ts: f64,
    /// Group.
    pub group: String,
    /// Shard.
    pub shard: String,
    /// Key (`Some("")` is the empty key).
    pub key: Option<String>,
    /// Requests it stands for.
    pub count: u64,
    /// Latency of each.
    pub latency_ms: Option<f64>,
    /// Outcome class.
    pub outcome: &'static str,
    /// Cache result.
    pub cache: Option<&'static str>,
    /// The shard's in-flight reading; a record with one and `count` 0 reports the reading and
    /// no request.
    pub inflight: Option<f64>,
}

impl Record {
    /// A record of `count` ok requests.
    pub fn new(ts: f64, group: &str, shard: &str, count: u64) -> Record {
        Record {
            ts,
            group: group.to_owned(),
            shard: shard.to_owned(),
            key: None,
            count,
            latency_ms: None,
            outcome: "ok",
            cache: None,
            inflight: None,
        }
    }

    /// Appends the NDJSON line (without newline) to `out`.
    pub fn write_json(&self, out: &mut String) {
        let _ = write!(out, "{{\"ts\":{:.3},\"group\":", self.ts);
        push_json_str(out, &self.group);
        out.push_str(",\"shard\":");
        push_json_str(out, &self.shard);
        if let Some(k) = &self.key {
            out.push_str(",\"key\":");
            push_json_str(out, k);
        }
        if self.count != 1 {
            let _ = write!(out, ",\"count\":{}", self.count);
        }
        if let Some(l) = self.latency_ms {
            let _ = write!(out, ",\"latency_ms\":{l:.3}");
        }
        if self.outcome != "ok" {
            let _ = write!(out, ",\"outcome\":\"{}\"", self.outcome);
        }
        if let Some(c) = self.cache {
            let _ = write!(out, ",\"cache\":\"{c}\"");
        }
        if let Some(n) = self.inflight {
            let _ = write!(out, ",\"inflight\":{n:.1}");
        }
        out.push('}');
    }
}

fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A whole trace, kept in time order.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The records.
    pub records: Vec<Record>,
}

impl Trace {
    /// Adds a record.
    pub fn push(&mut self, r: Record) {
        self.records.push(r);
    }

    /// Sorts by time, stably, so generators may emit shards in any order within a second.
    pub fn sort(&mut self) {
        self.records.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    }

    /// Total requests.
    pub fn requests(&self) -> u64 {
        self.records.iter().map(|r| r.count).sum()
    }

    /// The NDJSON text.
    pub fn to_ndjson(&self) -> String {
        let mut out = String::with_capacity(self.records.len() * 100);
        for r in &self.records {
            r.write_json(&mut out);
            out.push('\n');
        }
        out
    }

    /// Writes the NDJSON file.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_ndjson())
    }
}

/// Spreads `n` requests of one shard-second over up to `parts` records, each with its own
/// latency draw, so histograms see a distribution and not one value.
#[allow(clippy::too_many_arguments)]
pub fn emit_split(
    trace: &mut Trace,
    rng: &mut Rng,
    base: &Record,
    n: u64,
    parts: u64,
    latency_median_ms: f64,
    latency_sigma: f64,
) {
    if n == 0 {
        return;
    }
    let parts = parts.clamp(1, n);
    let each = n / parts;
    let extra = n % parts;
    for i in 0..parts {
        let count = each + u64::from(i < extra);
        if count == 0 {
            continue;
        }
        let mut r = base.clone();
        r.ts = base.ts + (i as f64 + rng.uniform()) / parts as f64 * 0.999;
        r.count = count;
        r.latency_ms = Some(rng.lognormal(latency_median_ms, latency_sigma).max(0.001));
        trace.push(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_poisson_has_the_right_mean() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut r = Rng::new(1);
        for lambda in [3.0, 100.0] {
            let n = 20_000;
            let mean = (0..n).map(|_| r.poisson(lambda) as f64).sum::<f64>() / n as f64;
            assert!(
                (mean - lambda).abs() < lambda * 0.03 + 0.05,
                "{lambda}: {mean}"
            );
        }
    }

    #[test]
    fn records_render_as_ndjson_with_the_empty_key() {
        let mut r = Record::new(1.5, "db", "s\"1", 3);
        r.key = Some(String::new());
        r.outcome = "timeout";
        let mut s = String::new();
        r.write_json(&mut s);
        assert_eq!(
            s,
            r#"{"ts":1.500,"group":"db","shard":"s\"1","key":"","count":3,"outcome":"timeout"}"#
        );
    }
}
