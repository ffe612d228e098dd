//! The synthetic traffic `skewwatch bench` sends: StatsD lines packed into datagrams and NDJSON
//! bodies, generated once up front from a seed so the senders spend their time sending.
//!
//! Every record is one request to a shard of a group, drawn uniformly; latencies follow an
//! exponential distribution (mean about 4 ms); 1% of requests are errors. With keys, a key id
//! is drawn either uniformly or skewed towards low ids (the square of a uniform draw, so key 0
//! is the hottest), which is what a hot-key detector should see.
//!
//! StatsD lines are DogStatsD by default (group, shard, key and outcome as tags, what skewwatch
//! reads). The plain form carries the same fields in the metric name instead
//! (`skewwatch.request.group-0.shard-12.error:4.12|ms`), for StatsD daemons that reject tags
//! (collectd's statsd plugin); it is for side-by-side runs, skewwatch itself needs the tags.
//! Plain lines send latencies under 1 ms as 1 ms: collectd keeps timer values in whole
//! milliseconds and silently ignores a value that truncates to zero, which would hide about a
//! fifth of these lines from its count.

use std::fmt::Write as _;

use skewwatch_detectors::prng::SplitMix64;

/// Smallest latency a plain line carries, hundredths of a millisecond (see the module docs).
const PLAIN_MIN_LATENCY_CENTI_MS: u64 = 100;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Groups (sharded systems).
    pub groups: usize,
    /// Shards per group.
    pub shards: usize,
    /// Distinct keys; 0 means records carry no key.
    pub keys: usize,
    /// Draw keys uniformly instead of skewed towards low ids.
    pub uniform_keys: bool,
    /// Seed of the generator.
    pub seed: u64,
    /// Write StatsD lines without tags, the fields folded into the metric name.
    pub plain: bool,
}

/// Datagrams ready to send, each holding whole lines.
#[derive(Debug, Clone, Default)]
pub struct DatagramPool {
    /// The datagrams.
    pub datagrams: Vec<Vec<u8>>,
    /// Lines in each datagram (same order).
    pub lines: Vec<u32>,
}

/// NDJSON bodies ready to send.
#[derive(Debug, Clone, Default)]
pub struct BodyPool {
    /// The bodies, each `records` lines long.
    pub bodies: Vec<Vec<u8>>,
    /// Records per body.
    pub records: usize,
}

/// One generated request.
struct Request {
    group: usize,
    shard: usize,
    key: Option<usize>,
    /// Latency in hundredths of a millisecond.
    latency_centi_ms: u64,
    error: bool,
}

impl Workload {
    fn requests(&self, seed_offset: u64) -> impl Iterator<Item = Request> + '_ {
        let mut rng = SplitMix64::new(self.seed ^ seed_offset.wrapping_mul(0xA076_1D64_78BD_642F));
        std::iter::from_fn(move || {
            let group = rng.below(self.groups.max(1));
            let shard = rng.below(self.shards.max(1));
            let key = (self.keys > 0).then(|| {
                let u = rng.next_f64();
                let u = if self.uniform_keys { u } else { u * u };
                ((u * self.keys as f64) as usize).min(self.keys - 1)
            });
            // Exponential with a mean of 4 ms, at least 0.05 ms.
            let latency_ms = -4.0 * (1.0 - rng.next_f64()).ln() + 0.05;
            let error = rng.below(100) == 0;
            Some(Request {
                group,
                shard,
                key,
                latency_centi_ms: (latency_ms * 100.0) as u64,
                error,
            })
        })
    }

    /// Packs at least `min_lines` lines into datagrams of at most `datagram_bytes` bytes
    /// (newline-separated, no trailing newline).
    pub fn datagrams(&self, min_lines: usize, datagram_bytes: usize) -> DatagramPool {
        let mut pool = DatagramPool::default();
        let mut current = Vec::with_capacity(datagram_bytes);
        let mut in_current = 0u32;
        let mut line = String::with_capacity(128);
        // `total`: lines packed before this one.
        for (total, r) in self.requests(1).enumerate() {
            self.statsd_line(&mut line, &r);
            let needed = line.len() + usize::from(in_current > 0);
            if in_current > 0 && current.len() + needed > datagram_bytes {
                pool.datagrams.push(std::mem::replace(
                    &mut current,
                    Vec::with_capacity(datagram_bytes),
                ));
                pool.lines.push(in_current);
                in_current = 0;
                if total >= min_lines {
                    break;
                }
            }
            if in_current > 0 {
                current.push(b'\n');
            }
            current.extend_from_slice(line.as_bytes());
            in_current += 1;
        }
        pool
    }

    /// Writes the StatsD line of `r` into `line` (cleared first): DogStatsD, or plain.
    fn statsd_line(&self, line: &mut String, r: &Request) {
        line.clear();
        let centi_ms = if self.plain {
            r.latency_centi_ms.max(PLAIN_MIN_LATENCY_CENTI_MS)
        } else {
            r.latency_centi_ms
        };
        let (whole, centi) = (centi_ms / 100, centi_ms % 100);
        if self.plain {
            // `-` rather than `:` inside names: a colon ends the name in most StatsD parsers.
            let _ = write!(
                line,
                "skewwatch.request.group-{}.shard-{}",
                r.group, r.shard
            );
            if let Some(k) = r.key {
                let _ = write!(line, ".key-user-{k}");
            }
            if r.error {
                line.push_str(".error");
            }
            let _ = write!(line, ":{whole}.{centi:02}|ms");
            return;
        }
        let _ = write!(
            line,
            "skewwatch.request:{whole}.{centi:02}|ms|#group:group-{},shard:shard-{}",
            r.group, r.shard
        );
        if let Some(k) = r.key {
            let _ = write!(line, ",key:user:{k}");
        }
        if r.error {
            line.push_str(",outcome:error");
        }
    }

    /// `count` NDJSON bodies of `records` records each.
    pub fn bodies(&self, count: usize, records: usize) -> BodyPool {
        let mut requests = self.requests(2);
        let bodies = (0..count)
            .map(|_| {
                let mut body = String::with_capacity(records * 96);
                for r in requests.by_ref().take(records) {
                    let _ = write!(
                        body,
                        "{{\"group\":\"group-{}\",\"shard\":\"shard-{}\",\"latency_ms\":{}.{:02}",
                        r.group,
                        r.shard,
                        r.latency_centi_ms / 100,
                        r.latency_centi_ms % 100
                    );
                    if let Some(k) = r.key {
                        let _ = write!(body, ",\"key\":\"user:{k}\"");
                    }
                    if r.error {
                        body.push_str(",\"outcome\":\"error\"");
                    }
                    body.push_str("}\n");
                }
                body.into_bytes()
            })
            .collect();
        BodyPool { bodies, records }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{ndjson, statsd};
    use skewwatch_detectors::observation::{Batch, Rejections};

    fn workload(keys: usize) -> Workload {
        Workload {
            groups: 2,
            shards: 10,
            keys,
            uniform_keys: false,
            seed: 7,
            plain: false,
        }
    }

    #[test]
    fn datagrams_fit_the_size_and_every_line_parses() {
        let pool = workload(1000).datagrams(5_000, 1_400);
        assert!(pool.lines.iter().map(|&n| n as usize).sum::<usize>() >= 5_000);
        let mut batch = Batch::default();
        let mut rejected = Rejections::default();
        for (d, &n) in pool.datagrams.iter().zip(&pool.lines) {
            assert!(d.len() <= 1_400);
            assert_eq!(
                statsd::parse_datagram(d, &mut batch, &mut rejected),
                n as usize
            );
        }
        assert_eq!(rejected.total(), 0);
        assert!(batch.iter().any(|o| o.key.is_some()));
        assert!(batch.iter().any(|o| o.outcome.is_error()));
    }

    /// The plain form is the tagged one with the fields moved into the name: same requests,
    /// same order, every line `name:value|ms` with nothing after the type, latencies under
    /// 1 ms raised to 1 ms.
    #[test]
    fn plain_lines_carry_the_tagged_lines_fields_in_the_name() {
        let tagged = workload(1000).datagrams(5_000, 1_400);
        let plain = Workload {
            plain: true,
            ..workload(1000)
        }
        .datagrams(5_000, 1_400);
        let mut batch = Batch::default();
        let mut rejected = Rejections::default();
        for d in &tagged.datagrams {
            statsd::parse_datagram(d, &mut batch, &mut rejected);
        }
        let lines: Vec<&[u8]> = plain
            .datagrams
            .iter()
            .flat_map(|d| d.split(|&b| b == b'\n'))
            .collect();
        let sum = |p: &DatagramPool| p.lines.iter().map(|&n| n as usize).sum::<usize>();
        assert_eq!(lines.len(), sum(&plain));
        assert!(plain.datagrams.iter().all(|d| d.len() <= 1_400));
        let (mut errors, mut raised) = (0, 0);
        for (line, o) in lines.iter().zip(batch.iter()) {
            let line = std::str::from_utf8(line).unwrap();
            let (name, rest) = line.split_once(':').unwrap();
            let value = rest.strip_suffix("|ms").unwrap();
            let mut want = format!("skewwatch.request.{}.{}", o.group, o.shard);
            if let Some(k) = o.key {
                want.push_str(&format!(".key-{}", k.replace(':', "-")));
            }
            if o.outcome.is_error() {
                want.push_str(".error");
                errors += 1;
            }
            assert_eq!(name, want);
            let ms: f64 = value.parse().unwrap();
            let want_ms = o.latency_ms.unwrap().max(1.0);
            assert!((ms - want_ms).abs() < 1e-9, "{line}");
            raised += usize::from(o.latency_ms.unwrap() < 1.0);
        }
        // Both branches were taken: error lines, and latencies raised to 1 ms.
        assert!(errors > 0 && raised > 0);
    }

    #[test]
    fn bodies_parse_completely_and_are_deterministic() {
        let a = workload(0).bodies(3, 100);
        assert_eq!(a.bodies, workload(0).bodies(3, 100).bodies);
        let mut batch = Batch::default();
        for body in &a.bodies {
            let outcome = ndjson::parse_body(body, &mut batch);
            assert_eq!((outcome.accepted, outcome.rejected.total()), (100, 0));
        }
        assert!(batch.iter().all(|o| o.key.is_none()));
    }
}
