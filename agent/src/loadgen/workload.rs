//! The synthetic traffic `skewwatch bench` sends: StatsD lines packed into datagrams and NDJSON
//! bodies, generated once up front from a seed so the senders spend their time sending.
//!
//! Every record is one request to a shard of a group, drawn uniformly; latencies follow an
//! exponential distribution (mean about 4 ms); 1% of requests are errors. With keys, a key id
//! is drawn either uniformly or skewed towards low ids (the square of a uniform draw, so key 0
//! is the hottest), which is what a hot-key detector should see.

use std::fmt::Write as _;

use skewwatch_detectors::prng::SplitMix64;

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
            line.clear();
            let _ = write!(
                line,
                "skewwatch.request:{}.{:02}|ms|#group:group-{},shard:shard-{}",
                r.latency_centi_ms / 100,
                r.latency_centi_ms % 100,
                r.group,
                r.shard
            );
            if let Some(k) = r.key {
                let _ = write!(line, ",key:user:{k}");
            }
            if r.error {
                line.push_str(",outcome:error");
            }
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
