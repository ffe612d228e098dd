//! Scenario traces: callers with a deadline, and a backend whose latency crowds against it.
//!
//! Every trace is one RPC group of 16 replicas at 800 req/s whose callers give up after a
//! deadline: latencies are lognormal (median 40 ms, σ 0.35, p99 ~90 ms), and a request whose
//! drawn latency passes the deadline is recorded as a `timeout` at the deadline, as a client
//! records it. A steady 0.1% of requests hang until the deadline whatever the latency (lost
//! connections), and 0.2% fail fast (`error`, ~15 ms). Every replica reports its requests in
//! flight once a second (a record with `count` 0 and `inflight`), by Little's law: its request
//! rate times its mean latency *before* the deadline cuts it short, because the backend keeps
//! working on requests whose callers gave up.
//!
//! Incidents (they must fire `DeadlinePileUp`):
//! - [`deadline_pile_up`]: a dependency of every replica slows down; latency creeps toward the
//!   250 ms deadline over [`RAMP_SECS`] and stays there for five minutes, so about a quarter of
//!   the requests time out while the rest answer just under the deadline.
//! - [`replica_pile_up`]: the same on one replica only ([`PILE_UP_REPLICA`]).
//!
//! Benign traces (they must raise nothing):
//! - [`steady_timeouts`]: 2% of requests hang until the deadline, all along.
//! - [`slow_far_from_deadline`]: latency triples and hangs rise to 3%, but the deadline is 2 s
//!   and the slowest successes stay under a fifth of it.
//! - [`short_pile_ups`]: one replica at a time piles up against the deadline for 10, 15 and
//!   20 s ([`SHORT_PILE_UPS`]), straddling window boundaries.
//!
//! Every trace starts at [`START`] with [`WARM_SECS`] of plain traffic, so baselines are warm.

use crate::scenario::{Record, Rng, Trace};
use crate::scenarios::benign::{START, WARM_SECS};

/// Group of the deadline traces.
pub const RPC_GROUP: &str = "ranking-rpc";
/// Replicas.
pub const RPC_REPLICAS: usize = 16;
/// Requests per second of the group.
pub const RPC_RPS: f64 = 800.0;
/// The callers' deadline in the incidents, milliseconds.
pub const RPC_DEADLINE_MS: f64 = 250.0;
/// Onset of the incidents (trace time, on a window boundary).
pub const PILE_UP_ONSET: f64 = START + WARM_SECS;
/// Seconds the latency takes to creep from normal to [`PILE_UP_FACTOR`] times normal.
pub const RAMP_SECS: f64 = 40.0;
/// How much slower the backend gets: median 40 ms -> 200 ms, so about 26% of requests pass
/// the 250 ms deadline.
pub const PILE_UP_FACTOR: f64 = 5.0;
/// The backend is fast again.
pub const PILE_UP_RECOVERY: f64 = PILE_UP_ONSET + 300.0;
/// End of the incident traces.
pub const PILE_UP_END: f64 = PILE_UP_RECOVERY + 300.0;
/// The replica of [`replica_pile_up`].
pub const PILE_UP_REPLICA: &str = "replica-05";
/// The pile-ups of [`short_pile_ups`]: (replica index, start offset from [`START`], seconds).
pub const SHORT_PILE_UPS: [(usize, f64, f64); 3] =
    [(3, 604.0, 10.0), (9, 845.0, 20.0), (12, 1087.0, 15.0)];

/// What one replica does during one second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moment {
    /// Multiplier of every latency.
    pub latency_factor: f64,
    /// Share of requests that hang until the deadline whatever their latency.
    pub hang_ratio: f64,
}

/// The callers and their backend.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcWorkload {
    /// The callers' deadline, milliseconds.
    pub deadline_ms: f64,
    /// Normal median latency, milliseconds.
    pub median_ms: f64,
    /// Shape of the lognormal.
    pub sigma: f64,
    /// Latency draws per replica-second (each one a record of a few requests).
    pub parts: u64,
}

impl RpcWorkload {
    /// A 250 ms deadline over a 40 ms median.
    pub fn new() -> RpcWorkload {
        RpcWorkload {
            deadline_ms: RPC_DEADLINE_MS,
            median_ms: 40.0,
            sigma: 0.35,
            parts: 6,
        }
    }

    /// The normal moment: no slowdown, 0.1% hangs.
    pub fn normal(&self) -> Moment {
        Moment {
            latency_factor: 1.0,
            hang_ratio: 0.001,
        }
    }

    /// Emits `secs` seconds from [`START`]; `moment(t, replica)` gives each replica's
    /// behaviour in the second starting `t` seconds after [`START`].
    pub fn emit(&self, rng: &mut Rng, secs: u64, moment: impl Fn(f64, usize) -> Moment) -> Trace {
        let mut trace = Trace::default();
        let names: Vec<String> = (0..RPC_REPLICAS)
            .map(|i| format!("replica-{i:02}"))
            .collect();
        let per_replica = RPC_RPS / RPC_REPLICAS as f64;
        for t in 0..secs {
            for (i, name) in names.iter().enumerate() {
                let m = moment(t as f64, i);
                let base = Record::new(START + t as f64, RPC_GROUP, name, 0);
                trace.push(self.inflight(rng, &base, per_replica, m));
                let n = rng.poisson(per_replica);
                let hangs = rng.binomial(n, m.hang_ratio);
                let errors = rng.binomial(n - hangs, 0.002);
                self.push(&mut trace, rng, &base, "timeout", hangs, self.deadline_ms);
                self.push(&mut trace, rng, &base, "error", errors, 15.0);
                self.emit_answers(&mut trace, rng, &base, n - hangs - errors, m);
            }
        }
        trace.sort();
        trace
    }

    /// The in-flight reading of one replica-second at `rps`: Little's law over the latency
    /// the backend spends (the lognormal's mean, uncut by the deadline), with 10% noise.
    fn inflight(&self, rng: &mut Rng, base: &Record, rps: f64, m: Moment) -> Record {
        let mean_ms = self.median_ms * m.latency_factor * (self.sigma * self.sigma / 2.0).exp();
        let mut r = base.clone();
        r.ts = base.ts + rng.uniform() * 0.999;
        r.inflight = Some((rps * mean_ms / 1000.0 * (1.0 + 0.1 * rng.normal())).max(0.0));
        r
    }

    /// `n` answered requests in up to `parts` records, each with its own latency draw; a draw
    /// past the deadline is a timeout at the deadline.
    fn emit_answers(&self, trace: &mut Trace, rng: &mut Rng, base: &Record, n: u64, m: Moment) {
        let parts = self.parts.clamp(1, n.max(1));
        for j in 0..parts {
            let count = n / parts + u64::from(j < n % parts);
            let ms = rng.lognormal(self.median_ms, self.sigma) * m.latency_factor;
            if ms >= self.deadline_ms {
                self.push(trace, rng, base, "timeout", count, self.deadline_ms);
            } else {
                self.push(trace, rng, base, "ok", count, ms);
            }
        }
    }

    /// One record of `count` requests with `outcome` at about `ms` (a timeout at the deadline
    /// gets a little jitter, as client timers have).
    #[allow(clippy::too_many_arguments)]
    fn push(
        &self,
        trace: &mut Trace,
        rng: &mut Rng,
        base: &Record,
        outcome: &'static str,
        count: u64,
        ms: f64,
    ) {
        if count == 0 {
            return;
        }
        let mut r = base.clone();
        r.ts = base.ts + rng.uniform() * 0.999;
        r.count = count;
        r.outcome = outcome;
        r.latency_ms = Some(if outcome == "timeout" {
            ms * (1.0 + 0.01 * rng.uniform())
        } else {
            ms.max(0.001)
        });
        trace.push(r);
    }
}

impl Default for RpcWorkload {
    fn default() -> Self {
        RpcWorkload::new()
    }
}

/// The slowdown of the incidents `t` seconds after [`START`]: a linear creep from 1 to
/// [`PILE_UP_FACTOR`] over [`RAMP_SECS`] from the onset, held until the recovery.
fn creep(t: f64) -> f64 {
    let (from, to) = (PILE_UP_ONSET - START, PILE_UP_RECOVERY - START);
    if t < from || t >= to {
        1.0
    } else {
        1.0 + (PILE_UP_FACTOR - 1.0) * ((t - from) / RAMP_SECS).min(1.0)
    }
}

/// Every replica's latency creeps toward the deadline from [`PILE_UP_ONSET`] to
/// [`PILE_UP_RECOVERY`].
pub fn deadline_pile_up(seed: u64) -> Trace {
    let w = RpcWorkload::new();
    let normal = w.normal();
    w.emit(&mut Rng::new(seed), (PILE_UP_END - START) as u64, |t, _| {
        Moment {
            latency_factor: creep(t),
            ..normal
        }
    })
}

/// [`PILE_UP_REPLICA`]'s latency creeps toward the deadline from [`PILE_UP_ONSET`] to
/// [`PILE_UP_RECOVERY`]; the other replicas stay normal.
pub fn replica_pile_up(seed: u64) -> Trace {
    let w = RpcWorkload::new();
    let normal = w.normal();
    let slow = replica_index(PILE_UP_REPLICA);
    w.emit(&mut Rng::new(seed), (PILE_UP_END - START) as u64, |t, i| {
        Moment {
            latency_factor: if i == slow { creep(t) } else { 1.0 },
            ..normal
        }
    })
}

/// 2% of requests hang until the deadline for the whole 20 minutes.
pub fn steady_timeouts(seed: u64) -> Trace {
    let w = RpcWorkload::new();
    w.emit(&mut Rng::new(seed), 1200, |_, _| Moment {
        latency_factor: 1.0,
        hang_ratio: 0.02,
    })
}

/// A 2 s deadline; from [`PILE_UP_ONSET`] every replica gets 3x slower (p99 ~270 ms) and 3% of
/// requests hang until the deadline, for five minutes: more timeouts and higher latency, but
/// the successes stay far from the deadline.
pub fn slow_far_from_deadline(seed: u64) -> Trace {
    let w = RpcWorkload {
        deadline_ms: 2000.0,
        ..RpcWorkload::new()
    };
    let (from, to) = (PILE_UP_ONSET - START, PILE_UP_RECOVERY - START);
    w.emit(&mut Rng::new(seed), (PILE_UP_END - START) as u64, |t, _| {
        if t >= from && t < to {
            Moment {
                latency_factor: 3.0,
                hang_ratio: 0.03,
            }
        } else {
            w.normal()
        }
    })
}

/// 22 minutes; one replica at a time piles up against the deadline ([`PILE_UP_FACTOR`] times
/// slower) for 10, 20 and 15 s ([`SHORT_PILE_UPS`]), starting and ending mid-window.
pub fn short_pile_ups(seed: u64) -> Trace {
    let w = RpcWorkload::new();
    let normal = w.normal();
    w.emit(&mut Rng::new(seed), 1320, |t, i| {
        let on = SHORT_PILE_UPS
            .iter()
            .any(|&(r, from, len)| r == i && t >= from && t < from + len);
        Moment {
            latency_factor: if on { PILE_UP_FACTOR } else { 1.0 },
            ..normal
        }
    })
}

/// Index of a replica by name.
fn replica_index(name: &str) -> usize {
    name.trim_start_matches("replica-")
        .parse()
        .expect("replica names are replica-NN")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timeout ratio and successful p99 (ms) of the records in `[from, to)`, optionally of one
    /// replica.
    fn measure(t: &Trace, from: f64, to: f64, replica: Option<&str>) -> (f64, f64) {
        let (mut all, mut timeouts) = (0u64, 0u64);
        let mut ok: Vec<(f64, u64)> = Vec::new();
        // Readings (count 0) are no requests.
        for r in t
            .records
            .iter()
            .filter(|r| r.ts >= from && r.ts < to && r.count > 0)
        {
            if replica.is_some_and(|s| s != r.shard) {
                continue;
            }
            all += r.count;
            match r.outcome {
                "timeout" => timeouts += r.count,
                "ok" => ok.push((r.latency_ms.unwrap(), r.count)),
                _ => {}
            }
        }
        ok.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: u64 = ok.iter().map(|o| o.1).sum();
        let mut seen = 0;
        let p99 = ok
            .iter()
            .find(|o| {
                seen += o.1;
                seen as f64 >= 0.99 * total as f64
            })
            .map_or(0.0, |o| o.0);
        (timeouts as f64 / all as f64, p99)
    }

    #[test]
    fn the_pile_up_crowds_the_deadline_and_times_out_a_quarter() {
        let t = deadline_pile_up(1);
        let (before, p99_before) = measure(&t, START, PILE_UP_ONSET, None);
        assert!(before < 0.003, "{before}");
        assert!((70.0..120.0).contains(&p99_before), "{p99_before}");
        let held = PILE_UP_ONSET + RAMP_SECS;
        let (during, p99) = measure(&t, held, PILE_UP_RECOVERY, None);
        assert!((0.2..0.33).contains(&during), "{during}");
        assert!(
            p99 > 0.8 * RPC_DEADLINE_MS && p99 < RPC_DEADLINE_MS,
            "{p99}"
        );
    }

    #[test]
    fn the_replica_pile_up_stays_on_its_replica() {
        let t = replica_pile_up(1);
        let held = PILE_UP_ONSET + RAMP_SECS;
        let (on, _) = measure(&t, held, PILE_UP_RECOVERY, Some(PILE_UP_REPLICA));
        let (off, _) = measure(&t, held, PILE_UP_RECOVERY, Some("replica-04"));
        assert!((0.2..0.33).contains(&on), "{on}");
        assert!(off < 0.003, "{off}");
    }

    #[test]
    fn in_flight_grows_with_the_latency_the_backend_spends() {
        let t = deadline_pile_up(1);
        let mean = |from: f64, to: f64| {
            let v: Vec<f64> = t
                .records
                .iter()
                .filter(|r| r.ts >= from && r.ts < to && r.shard == PILE_UP_REPLICA)
                .filter_map(|r| r.inflight)
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        let before = mean(START, PILE_UP_ONSET);
        let during = mean(PILE_UP_ONSET + RAMP_SECS, PILE_UP_RECOVERY);
        // 50 req/s x 42.5 ms, then five times the latency.
        assert!((1.8..2.5).contains(&before), "{before}");
        assert!(
            (during / before - PILE_UP_FACTOR).abs() < 0.5,
            "{before} {during}"
        );
    }

    #[test]
    fn far_from_the_deadline_the_successes_stay_under_a_fifth_of_it() {
        let t = slow_far_from_deadline(1);
        let (timeouts, p99) = measure(&t, PILE_UP_ONSET, PILE_UP_RECOVERY, None);
        assert!((0.02..0.04).contains(&timeouts), "{timeouts}");
        assert!(p99 < 0.2 * 2000.0, "{p99}");
    }
}
