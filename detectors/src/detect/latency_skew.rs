//! `LatencySkew`: one shard's p99 latency is far above its peers' and above its own usual p99
//! (labels `group`, `shard`).
//!
//! Two paths. The window rule compares a shard's p99 (of its merged latency histograms) with its
//! eligible peers' median and its own baseline in windows with `min_samples`; beside it, every
//! shard with samples gathers evidence across windows that its requests are slower than its
//! peers' p99 (a burst-proof, a quick and a severe test) and than their median (the bulk's
//! test), two [`RatioEvidence`]s. Its firing paths, as the `proven_by` annotation names them:
//! `consecutive_windows` and `step_shape` (the window rule's streak, by count or by the shape of
//! its excess mean latency), `cusum`, `severe_cusum` and `quick_cusum` (the slow share's
//! evidence) and `bulk_cusum` (the bulk's).
//!
//! docs/detectors.md ("LatencySkew") gives the method, the defaults and why ordinary traffic
//! does not fire it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, Problems, RuleSettings, num, pct,
};
use crate::evidence::baseline::{BOUND_Z, Ewma, Ratio, alpha_for};
use crate::evidence::cusum::{Binomial, wilson_upper};
use crate::evidence::ratio::{Hypotheses, Proof, RatioEvidence, RatioSettings, RatioTests};
use crate::evidence::shape::{Persistence, StreakShape};
use crate::observation::{Outcome, quote};
use crate::snapshot::{GroupSnapshot, ShardSnapshot};

/// The peers' quantile whose latency bucket marks a request as slow: their p99.
const SLOW_QUANTILE: f64 = 0.99;

/// The peers' quantile whose latency bucket marks a request as slower than the bulk of its
/// peers': their median. A shard that is slow throughout (every request some times slower, a
/// saturated or degraded replica) has few requests past its peers' p99 when most of its
/// peers' requests are fast (cache hits: 10× a 0.8 ms hit is still under a 12 ms p99), but
/// nearly all past their median.
const BULK_QUANTILE: f64 = 0.5;

/// Windows the slow-share evidence takes beyond [`crate::evidence::cusum::burst_proof_windows`]: its reference, the
/// share of requests past the peers' p99 bucket, moves with that bucket every window, so the
/// noise before and after a slow spell charges the evidence more than the bound allows for an
/// exact reference. With five windows at 10 s a 15 s spell and a 2% blip two windows later
/// fired (`short_pile_ups`, seed 20251107, in the scenario traces); with six it does not.
pub const SLOW_SHARE_MARGIN_WINDOWS: u32 = 1;

/// The severe test's raised share of slow requests is `slow_share_ratio` to this power times
/// the reference (9× at the shipped 3×), against the same √ratio null as the first test: a
/// slow request adds ln(ratio^1.5) (1.65) instead of ln(√ratio) (0.55), so a shard whose
/// requests are mostly slow past its peers' p99 proves it two to three times sooner, and one
/// a little slower stays the first test's.
const SEVERE_POWER: f64 = 2.0;

/// The severe test's raised share is at most this: a binomial test needs a ratio under 1.
const SEVERE_CAP: f64 = 0.9;

/// The sequential tests whose false alarms share `false_alarms_per_shard_hour`: the slow
/// share's (its quick path is the same evidence, capped less), the severe slowdown's and the
/// bulk's ([`BULK_QUANTILE`]). Each gets a third of the rate (a union bound; the threshold
/// rises by ln 3).
const TESTS: u32 = 3;

/// `detectors.latency_skew` settings. Defaults are those of `rules/skewwatch.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LatencySkewConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Time constant of the per-shard p99 baseline, seconds.
    pub baseline_tau_secs: f64,
    /// Eligible windows a shard's baseline needs before any verdict.
    pub warmup_windows: u32,
    /// Latency samples a shard needs in a window to be judged or to serve as a peer.
    pub min_samples: u64,
    /// Eligible shards a group needs in a window for any verdict.
    pub min_shards: usize,
    /// Smallest p99 over the peers' median p99.
    pub peer_ratio: f64,
    /// Smallest p99 minus the peers' median p99, milliseconds.
    pub min_excess_ms: f64,
    /// Smallest p99 over the shard's own baseline p99.
    pub baseline_ratio: f64,
    /// Consecutive windows the condition must hold.
    pub consecutive_windows: u32,
    /// The longest slow spell to tolerate, seconds: the condition also holds as soon as the
    /// shape of the streak proves the change has lasted longer (docs/adr/003).
    pub tolerated_burst_secs: f64,
    /// The path without a sample floor: the share of a shard's requests slower than its
    /// peers' p99 must rise to this multiple of its reference (the higher of its peers' share
    /// and its own baseline share, each at its upper bound).
    pub slow_share_ratio: f64,
    /// False alarms per shard-hour the evidence test of slow requests allows while a shard is
    /// no slower than its reference: sets the CUSUM threshold (`consecutive_windows` is its
    /// fewest windows).
    pub false_alarms_per_shard_hour: f64,
}

impl Default for LatencySkewConfig {
    fn default() -> Self {
        LatencySkewConfig {
            rule: RuleSettings::new(Severity::Warning, 0.0, 60.0),
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
            min_samples: 50,
            min_shards: 3,
            peer_ratio: 3.0,
            min_excess_ms: 50.0,
            baseline_ratio: 2.0,
            consecutive_windows: 4,
            tolerated_burst_secs: 20.0,
            slow_share_ratio: 3.0,
            false_alarms_per_shard_hour: 1e-4,
        }
    }
}

impl DetectorSettings for LatencySkewConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    /// Checks every field, reporting every problem with why.
    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        p.time_constant("baseline_tau_secs", self.baseline_tau_secs);
        p.windows("warmup_windows", self.warmup_windows);
        if self.min_samples < 10 {
            p.fail(
                "min_samples",
                format!(
                    "{} is too small: a p99 from fewer than 10 samples is the maximum, not a percentile (use 10 or more; 50 is the default)",
                    self.min_samples
                ),
            );
        }
        if !(3..=100_000).contains(&self.min_shards) {
            p.fail(
                "min_shards",
                format!(
                    "{} is out of range: use 3..=100000 (a median of peers needs at least two other shards)",
                    self.min_shards
                ),
            );
        }
        p.range("peer_ratio", self.peer_ratio, 1.0, 1000.0);
        p.range("min_excess_ms", self.min_excess_ms, 0.0, 3_600_000.0);
        p.range("baseline_ratio", self.baseline_ratio, 1.0, 1000.0);
        p.windows("consecutive_windows", self.consecutive_windows);
        p.burst("tolerated_burst_secs", self.tolerated_burst_secs);
        p.range("slow_share_ratio", self.slow_share_ratio, 1.1, 50.0);
        p.false_alarm_rate(
            "false_alarms_per_shard_hour",
            self.false_alarms_per_shard_hour,
        );
    }
}

/// What the detector remembers about one shard.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShardState {
    p99: Ewma,
    streak: u32,
    /// Excess mean latency over the peers' of the streak's windows.
    #[serde(default)]
    shape: StreakShape,
    /// Requests slower than the peers' p99 among requests with a latency (the path without a
    /// sample floor), tested burst-proof, quickly and for a severe slowdown
    /// ([`SEVERE_POWER`]), on a baseline learned from every window with samples.
    #[serde(default)]
    slow: RatioEvidence,
    /// Requests slower than the peers' median among them ([`BULK_QUANTILE`]), burst-proof.
    #[serde(default)]
    bulk: RatioEvidence,
}

/// A group's latency buckets in one window, pooled over its tracked shards, and the median
/// p99 over the shards with samples.
struct Pool {
    buckets: Vec<u64>,
    total: u64,
    /// Timed-out requests with a latency among them ([`timed_out`]).
    timeouts: u64,
    /// p99s of the shards with samples, sorted.
    p99s: Vec<f64>,
}

impl Pool {
    fn of(g: &GroupSnapshot) -> Pool {
        let mut buckets: Vec<u64> = Vec::new();
        let mut p99s = Vec::new();
        let mut timeouts = 0;
        for s in g.tracked_shards() {
            timeouts += timed_out(s);
            if buckets.len() < s.latency_buckets.len() {
                buckets.resize(s.latency_buckets.len(), 0);
            }
            for (b, c) in buckets.iter_mut().zip(&s.latency_buckets) {
                *b += c;
            }
            if let Some(l) = s.traffic.latency.filter(|l| l.count > 0) {
                p99s.push(l.p99_ms);
            }
        }
        p99s.sort_by(f64::total_cmp);
        Pool {
            total: buckets.iter().sum(),
            buckets,
            timeouts,
            p99s,
        }
    }

    /// For shard `s`: the index of the bucket holding its peers' p99 (a request in a later
    /// bucket is slow), its peers' requests and slow requests, and its own; `None` when the
    /// peers have no samples or their p99 lies in the last bucket (nothing is above it).
    fn slow_counts(&self, s: &ShardSnapshot) -> Option<Split> {
        self.split_at(s, SLOW_QUANTILE)
    }

    /// As [`Pool::slow_counts`], for the bucket holding the peers' `quantile`.
    fn split_at(&self, s: &ShardSnapshot, quantile: f64) -> Option<Split> {
        let own = |i: usize| s.latency_buckets.get(i).copied().unwrap_or(0);
        let peers = self.total.checked_sub(s.latency_buckets.iter().sum())?;
        if peers == 0 {
            return None;
        }
        let mut below = 0;
        for i in 0..self.buckets.len().saturating_sub(1) {
            below += self.buckets[i] - own(i);
            if below as f64 >= quantile * peers as f64 {
                let own_n: u64 = s.latency_buckets.iter().sum();
                let own_below: u64 = (0..=i).map(own).sum();
                // Timed-out requests are errors, `ShardFailing`'s to judge: they wait for
                // the deadline, so they sit in the slowest buckets, and are taken from the
                // slow ones of the shard and of its peers alike.
                let own_t = timed_out(s).min(own_n);
                let peer_t = (self.timeouts - timed_out(s)).min(peers);
                let (own_slow, peers_slow) = (own_n - own_below, peers - below);
                return Some(Split {
                    peers: peers - peer_t,
                    peers_slow: peers_slow - peers_slow.min(peer_t),
                    samples: own_n - own_t,
                    slow: own_slow - own_slow.min(own_t),
                });
            }
        }
        None
    }
}

/// Requests and slow requests of a shard and of its peers in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Split {
    peers: u64,
    peers_slow: u64,
    samples: u64,
    slow: u64,
}

impl Split {
    /// The shard's slow requests among its requests.
    fn own(&self) -> Ratio<u64> {
        Ratio::of(self.slow, self.samples)
    }

    /// The upper bound of the peers' share of slow requests.
    fn peers_upper(&self) -> f64 {
        wilson_upper(self.peers_slow as f64, self.peers as f64, BOUND_Z)
    }
}

/// The `LatencySkew` detector. See the module docs.
#[derive(Debug, Clone)]
pub struct LatencySkew {
    cfg: LatencySkewConfig,
    alpha: f64,
    persistence: Persistence,
    /// The tests of slow requests among requests: burst-proof, quick and severe.
    tests: RatioTests,
    /// The bulk's test: burst-proof, on the same part of the false-alarm rate.
    bulk_tests: RatioTests,
    state: BTreeMap<String, BTreeMap<String, ShardState>>,
}

impl GroupDetector for LatencySkew {
    type State = BTreeMap<String, ShardState>;

    fn states(&self) -> &BTreeMap<String, Self::State> {
        &self.state
    }

    fn states_mut(&mut self) -> &mut BTreeMap<String, Self::State> {
        &mut self.state
    }

    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        states: &mut Self::State,
        out: &mut Vec<Finding>,
    ) {
        let first = out.len();
        self.judge_p99s(ctx, g, states, out);
        // The shards the p99 path reported: the evidence path does not report them twice.
        let named: BTreeSet<String> = out[first..]
            .iter()
            .filter_map(|f| f.labels.get("shard").cloned())
            .collect();
        self.judge_slow_requests(ctx, g, states, &named, out);
    }
}

impl LatencySkew {
    /// The p99 path, for shards with `min_samples` in the window: p99 against the peers'
    /// median p99 and the shard's own baseline, window by window.
    fn judge_p99s(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        states: &mut BTreeMap<String, ShardState>,
        out: &mut Vec<Finding>,
    ) {
        let cfg = &self.cfg;
        let eligible: Vec<(&ShardSnapshot, f64)> = g
            .tracked_shards()
            .filter_map(|s| {
                s.traffic
                    .latency
                    .filter(|l| l.count >= cfg.min_samples)
                    .map(|l| (s, l.p99_ms))
            })
            .collect();
        if eligible.len() < cfg.min_shards {
            // No verdict: every run of over windows ends.
            for st in states.values_mut() {
                st.streak = 0;
                st.shape = StreakShape::default();
            }
            return;
        }
        let names: BTreeSet<&str> = eligible.iter().map(|(s, _)| s.shard.as_str()).collect();
        for (name, st) in states.iter_mut() {
            if !names.contains(name.as_str()) {
                st.streak = 0;
                st.shape = StreakShape::default();
            }
        }
        let mut sorted: Vec<f64> = eligible.iter().map(|(_, p)| *p).collect();
        sorted.sort_by(f64::total_cmp);
        // The shape of the evidence is judged on mean latencies: a p99 is set by the slowest
        // 1% and reads the same for a slow spell covering a fifth of a window as for a whole
        // one, while the mean grows with the part of the window the spell covers.
        let mut means: Vec<f64> = eligible.iter().map(|(s, _)| mean_ms(s)).collect();
        means.sort_by(f64::total_cmp);
        for (s, p99) in eligible {
            let peers = median_without(&sorted, p99);
            let excess = mean_ms(s) - median_without(&means, mean_ms(s));
            let st = states.entry(s.shard.clone()).or_default();
            let labels = [("group", g.group.as_str()), ("shard", s.shard.as_str())];
            let active = ctx.alerts.is_active(LatencySkew::ALERTNAME, &labels);
            let Some(base) = st.p99.value(cfg.warmup_windows) else {
                st.p99.update(p99, self.alpha);
                continue;
            };
            let over = p99 >= cfg.peer_ratio * peers
                && p99 - peers >= cfg.min_excess_ms
                && p99 >= cfg.baseline_ratio * base;
            st.streak = if over { st.streak + 1 } else { 0 };
            st.shape.push(over, excess);
            if !(active || over) {
                st.p99.update(p99, self.alpha);
            }
            if let Some(lasted) = self.persistence.lasted(st.streak, &st.shape) {
                let fig = Figures::of(s, (p99, peers, Some(base)), lasted.name());
                out.push(render(cfg, &g.group, &s.shard, &fig));
            }
        }
    }

    /// The path without a sample floor: per shard, its requests slower than its peers' p99
    /// (the bucket their p99 falls in; [`Pool::slow_counts`]) among its requests add the
    /// binomial LLR of `slow_share_ratio` times its reference share against the square root
    /// of that ratio times it, the reference being the higher of the Wilson upper bounds of
    /// its peers' share in the window and its own baseline share; the severe test does the same
    /// for [`SEVERE_POWER`], and the bulk's for its requests past its peers' median
    /// ([`LatencySkew::weigh_bulk`]). The condition holds while any evidence is at its
    /// threshold and the shard's p99 exceeds its peers' median p99 by `min_excess_ms`.
    fn judge_slow_requests(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        states: &mut BTreeMap<String, ShardState>,
        named: &BTreeSet<String>,
        out: &mut Vec<Finding>,
    ) {
        let cfg = &self.cfg;
        let pool = Pool::of(g);
        if pool.p99s.len() < cfg.min_shards {
            return;
        }
        for s in g.tracked_shards() {
            let (Some(split), Some(latency)) = (pool.slow_counts(s), s.traffic.latency) else {
                continue;
            };
            if split.samples == 0 {
                continue;
            }
            let st = states.entry(s.shard.clone()).or_default();
            let labels = [("group", g.group.as_str()), ("shard", s.shard.as_str())];
            let active = ctx.alerts.is_active(LatencySkew::ALERTNAME, &labels);
            let ratio = cfg.slow_share_ratio;
            // Before its baseline is warm the peers in the window are the reference alone.
            let tested = st.slow.weigh_from_start(&self.tests, split.own(), |seen| {
                let r = seen.map_or(0.0, |s| s.upper()).max(split.peers_upper());
                let null = ratio.sqrt() * r;
                Some(Hypotheses {
                    reference: r,
                    rise: Binomial::new(null, ratio * r),
                    severe: Binomial::new(null, (ratio.powf(SEVERE_POWER) * r).min(SEVERE_CAP)),
                })
            });
            let bulk = pool.split_at(s, BULK_QUANTILE);
            let bulk_reference = bulk.and_then(|b| self.weigh_bulk(st, b));
            let proof = self.proven(st);
            let frozen = active || proof.is_some();
            st.slow.learn(&self.tests, split.own(), frozen);
            if let Some(b) = bulk {
                st.bulk.learn(&self.bulk_tests, b.own(), frozen);
            }
            let Some(reference) = tested.map(|h| h.reference) else {
                continue;
            };
            let peers = median_without(&pool.p99s, latency.p99_ms);
            let Some(proof) = proof else {
                continue;
            };
            if latency.p99_ms - peers >= cfg.min_excess_ms && !named.contains(&s.shard) {
                let mut fig = Figures::of(s, (latency.p99_ms, peers, st.p99.raw()), proof);
                fig.slow = Some(SlowShare {
                    share: split.slow as f64 / split.samples as f64,
                    reference,
                    evidence: st
                        .slow
                        .fraction(&self.tests)
                        .max(st.bulk.fraction(&self.bulk_tests)),
                    bulk: bulk
                        .zip(bulk_reference)
                        .map(|(b, r)| (b.slow as f64 / b.samples.max(1) as f64, r)),
                });
                out.push(render(cfg, &g.group, &s.shard, &fig));
            }
        }
    }

    /// The firing path that has proven shard state `st` slow, if one has: the first of the
    /// slow share's burst-proof and severe tests, the bulk's, and the slow share's quick path.
    fn proven(&self, st: &ShardState) -> Option<&'static str> {
        let bulk = st.bulk.proven(&self.bulk_tests, true).map(|_| "bulk_cusum");
        match st.slow.proven(&self.tests, true) {
            Some(Proof::Quick) => bulk.or(Some(Proof::Quick.name())),
            slow => slow.map(Proof::name).or(bulk),
        }
    }

    /// Adds the window's requests past its peers' median ([`BULK_QUANTILE`]) to the bulk's
    /// evidence (against its peers alone while its baseline is cold): the test of the reference share (the higher of
    /// its own baseline share and its peers' share in the window, each at its upper bound)
    /// whose crossover is halfway from the reference to every request. Returns the reference.
    fn weigh_bulk(&self, st: &mut ShardState, split: Split) -> Option<f64> {
        let tested = st
            .bulk
            .weigh_from_start(&self.bulk_tests, split.own(), |seen| {
                let r = seen.map_or(0.0, |s| s.upper()).max(split.peers_upper());
                Some(Hypotheses {
                    reference: r,
                    rise: Binomial::with_crossover(r, (1.0 + r) / 2.0),
                    severe: None,
                })
            });
        tested.map(|h| h.reference)
    }
}

/// The requests of `s` that timed out and carried a latency: its timeouts, at most its errors
/// with a latency.
fn timed_out(s: &ShardSnapshot) -> u64 {
    let with_latency = s.error_latency.map_or(0, |l| l.count);
    s.traffic.outcome(Outcome::Timeout).min(with_latency)
}

/// Mean latency of all responses of `s`, ms (0 without any).
fn mean_ms(s: &ShardSnapshot) -> f64 {
    s.latency_sum_secs * 1000.0 / s.latency_samples.max(1) as f64
}

/// Median of `sorted` with one element equal to `x` removed (`x` must be in `sorted`).
fn median_without(sorted: &[f64], x: f64) -> f64 {
    let i = sorted.partition_point(|v| *v < x);
    let n = sorted.len() - 1;
    let at = |j: usize| if j < i { sorted[j] } else { sorted[j + 1] };
    if n % 2 == 1 {
        at(n / 2)
    } else {
        (at(n / 2 - 1) + at(n / 2)) / 2.0
    }
}

/// Everything a `LatencySkew` finding reports; [`render`] turns it into text.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    /// The shard's p99 latency, ms.
    p99: f64,
    /// The median p99 of its eligible peers, ms.
    peers: f64,
    /// Its own baseline p99, ms, once it has one (windows with `min_samples` teach it).
    baseline: Option<f64>,
    /// Its p50 latency of all responses and p99 of successful ones, ms.
    p50: Option<f64>,
    ok_p99: Option<f64>,
    error_ratio: f64,
    /// Its share of the group's load.
    load_share: f64,
    /// Requests that carried a latency.
    samples: u64,
    /// What the evidence path measured, when it reported.
    slow: Option<SlowShare>,
    /// The firing path that proved the slowdown.
    proven_by: &'static str,
}

/// The evidence path's figures: slow requests (over the peers' p99) among the shard's.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SlowShare {
    /// The window's share of slow requests.
    share: f64,
    /// The reference share it was tested against.
    reference: f64,
    /// The evidence, as a fraction of the threshold.
    evidence: f64,
    /// The window's share of requests past the peers' median, and its reference.
    bulk: Option<(f64, f64)>,
}

impl Figures {
    fn of(
        s: &ShardSnapshot,
        (p99, peers, baseline): (f64, f64, Option<f64>),
        proven_by: &'static str,
    ) -> Figures {
        Figures {
            p99,
            peers,
            baseline,
            p50: s.traffic.latency.map(|l| l.p50_ms),
            ok_p99: s.traffic.ok_latency.map(|l| l.p99_ms),
            error_ratio: s.traffic.error_ratio.unwrap_or(0.0),
            load_share: s.share,
            samples: s.latency_samples,
            slow: None,
            proven_by,
        }
    }

    /// The p99 over the peers' median p99.
    fn peer_ratio(&self) -> f64 {
        self.p99 / self.peers.max(f64::MIN_POSITIVE)
    }

    /// The p99 over the shard's own baseline p99, once it has one.
    fn baseline_ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.p99 / b.max(f64::MIN_POSITIVE))
    }
}

/// The finding for `shard` of `group`: summary, description and the figures as annotations.
fn render(cfg: &LatencySkewConfig, group: &str, shard: &str, fig: &Figures) -> Finding {
    let ratio = fig.peer_ratio();
    let labels = [("group", group), ("shard", shard)];
    let (group, shard) = (quote(group), quote(shard));
    let own = match (fig.baseline_ratio(), fig.baseline) {
        (Some(r), Some(b)) => format!("{}x its own usual p99 ({} ms)", num(r), num(b)),
        _ => "its own usual p99 is not known (too few samples per window to learn it)".to_owned(),
    };
    let evidence = fig.slow.map_or(String::new(), |e| {
        let bulk = e.bulk.map_or(String::new(), |(share, reference)| {
            format!(
                " and {} slower than their median against a reference of {}",
                pct(share),
                pct(reference)
            )
        });
        format!(
            "; {} of its requests were slower than its peers' p99 against a reference of \
             {}{bulk}, evidence gathered over several windows",
            pct(e.share),
            pct(e.reference)
        )
    });
    let mut f = Finding::new(LatencySkew::ALERTNAME, cfg.rule.severity, &labels)
        .annotate(
            "summary",
            format!(
                "Shard {shard} of {group} is slow: p99 {} ms, {}x its peers'",
                num(fig.p99),
                num(ratio)
            ),
        )
        .annotate(
            "description",
            format!(
                "shard {shard} of {group} has a p99 latency of {} ms, {}x the median p99 of its \
                 peers ({} ms) and {own}{evidence}; error ratio {}, {} of the group's load",
                num(fig.p99),
                num(ratio),
                num(fig.peers),
                pct(fig.error_ratio),
                pct(fig.load_share)
            ),
        )
        .annotate("p99_ms", format!("{:.1}", fig.p99))
        .annotate("peer_median_p99_ms", format!("{:.1}", fig.peers))
        .annotate("ratio", format!("{ratio:.2}"))
        .annotate("samples", fig.samples.to_string())
        .annotate("proven_by", fig.proven_by);
    if let Some(b) = fig.baseline {
        f = f.annotate("baseline_p99_ms", format!("{b:.1}"));
    }
    if let Some(e) = fig.slow {
        f = f
            .annotate("slow_share", pct(e.share))
            .annotate("reference_slow_share", pct(e.reference))
            .annotate("evidence", format!("{:.2}", e.evidence));
        if let Some((share, reference)) = e.bulk {
            f = f
                .annotate("share_over_peer_median", pct(share))
                .annotate("reference_share_over_peer_median", pct(reference));
        }
    }
    if let Some(p50) = fig.p50 {
        f = f.annotate("p50_ms", format!("{p50:.1}"));
    }
    if let Some(ok_p99) = fig.ok_p99 {
        f = f.annotate("ok_p99_ms", format!("{ok_p99:.1}"));
    }
    f
}

impl DetectorKind for LatencySkew {
    const ALERTNAME: &'static str = "LatencySkew";
    const KEY: &'static str = "latency_skew";
    type Config = LatencySkewConfig;

    fn new(cfg: LatencySkewConfig, window_secs: f64) -> Self {
        let settings = RatioSettings {
            false_alarms_per_hour: cfg.false_alarms_per_shard_hour,
            tests: TESTS,
            window_secs,
            consecutive_windows: cfg.consecutive_windows,
            tolerated_burst_secs: cfg.tolerated_burst_secs,
            margin_windows: SLOW_SHARE_MARGIN_WINDOWS,
            warmup_windows: cfg.warmup_windows,
            baseline_tau_secs: cfg.baseline_tau_secs,
        };
        LatencySkew {
            alpha: alpha_for(window_secs, cfg.baseline_tau_secs),
            persistence: Persistence::new(
                cfg.consecutive_windows,
                cfg.tolerated_burst_secs,
                window_secs,
            ),
            tests: RatioTests::new(settings).with_quick(false).with_severe(),
            bulk_tests: RatioTests::new(settings),
            cfg,
            state: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::ObservationRef;
    use crate::window::{WindowConfig, Windows};

    type Rig = crate::detect::testkit::Rig<LatencySkew>;

    /// Windows built from latency scales.
    impl Rig {
        /// The detector with its default settings.
        fn with_defaults() -> Rig {
            Rig::new(LatencySkewConfig::default())
        }

        /// One window: shard `s{i}` gets `samples` requests whose latencies spread from
        /// 0.2x to 4x `scale[i]` ms (a p99 of about 3.7x the scale).
        fn window(&mut self, scale: &[f64], samples: u64) -> Vec<Finding> {
            for (i, &ms) in scale.iter().enumerate() {
                let name = format!("s{i}");
                for j in 0..samples {
                    let mut o = ObservationRef::new("db", &name);
                    o.latency_ms = Some(ms * (0.2 + 3.8 * (j as f64 / samples as f64).powi(4)));
                    self.record(&o);
                }
            }
            self.close()
        }

        /// One window of 100 requests per shard at scale 10 ms, except that a part `cover`
        /// of shard `slow`'s requests come from a slow spell at scale `ms`.
        fn spell(&mut self, slow: usize, ms: f64, cover: f64) -> Vec<Finding> {
            let spread = |j: u64, n: u64| 0.2 + 3.8 * (j as f64 / n as f64).powi(4);
            for i in 0..8 {
                let name = format!("s{i}");
                let hit = if i == slow { (100.0 * cover) as u64 } else { 0 };
                for (n, scale) in [(hit, ms), (100 - hit, 10.0)] {
                    for j in 0..n {
                        let mut o = ObservationRef::new("db", &name);
                        o.latency_ms = Some(scale * spread(j, n));
                        self.record(&o);
                    }
                }
            }
            self.close()
        }
    }

    #[test]
    fn a_shard_ten_times_slower_than_its_peers_fires_on_the_third_window() {
        let mut rig = Rig::with_defaults();
        let normal = vec![10.0; 8];
        for _ in 0..40 {
            assert!(rig.window(&normal, 100).is_empty());
        }
        let mut slow = normal.clone();
        slow[3] = 100.0;
        // Three full windows outlast a 20 s spell (docs/adr/003); two do not.
        for _ in 0..2 {
            assert!(rig.window(&slow, 100).is_empty());
        }
        let f = rig.window(&slow, 100);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].labels["shard"], "s3");
        let ratio: f64 = f[0].annotations["ratio"].parse().unwrap();
        assert!((9.0..11.0).contains(&ratio), "{ratio}");
        // The baseline does not learn the incident; recovery ends the condition at once.
        for _ in 0..50 {
            assert_eq!(rig.window(&slow, 100).len(), 1);
        }
        assert!(rig.window(&normal, 100).is_empty());
    }

    #[test]
    fn a_group_wide_slowdown_does_not_fire() {
        let mut rig = Rig::with_defaults();
        for _ in 0..40 {
            rig.window(&[10.0; 8], 100);
        }
        for _ in 0..20 {
            assert!(rig.window(&[200.0; 8], 100).is_empty());
        }
    }

    #[test]
    fn a_shard_with_few_samples_is_judged_later_not_never() {
        // 20 samples a window (under `min_samples`): the p99 path cannot judge it, its slow
        // requests among its requests can, from the fourth window: the quick path, each window
        // adding at most a quarter of its threshold, once the streak outlasts a 20 s spell.
        let mut rig = Rig::with_defaults();
        for _ in 0..40 {
            rig.window(&[10.0; 8], 20);
        }
        let mut slow = vec![10.0; 8];
        slow[0] = 500.0;
        for _ in 0..3 {
            assert!(rig.window(&slow, 20).is_empty());
        }
        let f = rig.window(&slow, 20);
        assert_eq!(f.len(), 1, "{f:?}");
        let a = &f[0].annotations;
        assert_eq!(f[0].labels["shard"], "s0");
        assert_eq!(a["slow_share"], "100.0%");
        assert_eq!(a["evidence"], "1.00");
        assert!(!a.contains_key("baseline_p99_ms"), "{a:?}");
        assert!(a["description"].contains("not known"), "{a:?}");
        // Two samples a window: later still, but judged, by the severe test (every request
        // slow is far past nine times the reference) on the tenth window; the first test
        // alone took fourteen.
        let mut rig = Rig::with_defaults();
        for _ in 0..40 {
            rig.window(&[10.0; 8], 2);
        }
        let first = (1..=40).find(|_| !rig.window(&slow, 2).is_empty());
        assert_eq!(first, Some(10));
    }

    #[test]
    fn timeouts_are_shard_failings_not_a_slow_shard() {
        // From the agent's first window, a shard whose 5% of requests, then half of them, time
        // out at a 150 ms deadline while its successes are as fast as its peers': its slow
        // requests are its timeouts, `ShardFailing`'s to report. The same shard with its
        // successes slow is reported.
        let run = |ok_ms: f64| {
            let mut rig = Rig::with_defaults();
            (1..=60)
                .filter(|w| {
                    for i in 0..8 {
                        let name = format!("s{i}");
                        for j in 0..20 {
                            let mut o = ObservationRef::new("db", &name);
                            let spread = 0.2 + 3.8 * (j as f64 / 20.0).powi(4);
                            o.latency_ms = Some(if i == 0 { ok_ms } else { 10.0 } * spread);
                            rig.record(&o);
                        }
                    }
                    // Beside its 20 successes, 1 timeout (5%), then 20 (half).
                    for _ in 0..if *w > 30 { 20 } else { 1 } {
                        let mut o = ObservationRef::new("db", "s0");
                        o.latency_ms = Some(150.0);
                        o.outcome = Outcome::Timeout;
                        rig.record(&o);
                    }
                    !rig.close().is_empty()
                })
                .count()
        };
        assert_eq!(run(10.0), 0);
        assert!(run(100.0) > 40);
    }

    /// One window of 16 requests per shard of 8 as behind a cache: 15 hits from 0.5 to 1.5 ms
    /// and one miss at 20 ms (the peers' p99), every latency of shard `s0` times `factor`.
    fn cached(rig: &mut Rig, factor: f64) -> Vec<Finding> {
        for i in 0..8 {
            let name = format!("s{i}");
            let f = if i == 0 { factor } else { 1.0 };
            for j in 0..16 {
                let mut o = ObservationRef::new("db", &name);
                let ms = if j == 15 { 20.0 } else { 0.5 + j as f64 / 14.0 };
                o.latency_ms = Some(ms * f);
                rig.record(&o);
            }
        }
        rig.close()
    }

    #[test]
    fn a_shard_slow_throughout_is_proven_by_its_bulk() {
        // Ten times slower throughout, its hits (5–15 ms) stay under its peers' p99 (the
        // 20 ms miss): one request in sixteen is past it, too few for the tests of the slow
        // share, but every one is past its peers' median.
        let mut rig = Rig::with_defaults();
        for _ in 0..40 {
            assert!(cached(&mut rig, 1.0).is_empty());
        }
        let mut first = None;
        for w in 1..=20 {
            let f = cached(&mut rig, 10.0);
            if let Some(f) = f.first() {
                first = Some(w);
                // One request in sixteen past the peers' p99, all past their median.
                assert_eq!(f.annotations["slow_share"], "6.2%");
                assert_eq!(f.annotations["share_over_peer_median"], "100.0%");
                assert_eq!(f.annotations["proven_by"], "bulk_cusum");
                assert!(f.annotations["description"].contains("slower than their median"));
                break;
            }
        }
        // Six windows at the fewest (a tolerated 20 s spell, three more, and one for the
        // reference's noise).
        assert_eq!(first, Some(6));
        let st = &rig.det.state["db"]["s0"];
        assert!(st.bulk.proven(&rig.det.bulk_tests, true).is_some());
        let slow = st.slow.proven(&rig.det.tests, true);
        assert!(
            !matches!(slow, Some(Proof::Cusum | Proof::Severe)),
            "{slow:?}"
        );
        // Back to normal, it drains at once.
        assert!(cached(&mut rig, 1.0).is_empty());
    }

    #[test]
    fn a_shard_slow_throughout_from_the_start_is_judged_against_its_peers() {
        // Its peers are a reference from the first window: slow from the agent's start, it is
        // proven as soon as its evidence allows (the bulk's burst-proof six windows), and the
        // slowness is never learned as its normal.
        let mut rig = Rig::with_defaults();
        let hits: Vec<usize> = (1..=400)
            .filter(|_| !cached(&mut rig, 10.0).is_empty())
            .collect();
        assert_eq!(hits.first(), Some(&6), "{:?}", &hits[..hits.len().min(5)]);
        assert_eq!(hits.len(), 395);
        // Back to normal, it drains at once.
        assert!(cached(&mut rig, 1.0).is_empty());
    }

    #[test]
    fn quiet_shards_with_random_latencies_stay_silent_for_hours() {
        // Four simulated hours of 8 shards with 5 lognormal (sigma 1) latencies a window each:
        // their p99s are the maxima of five draws, wildly apart, but none is slow against
        // its reference share.
        let mut rng = crate::prng::SplitMix64::new(3);
        let mut rig = Rig::with_defaults();
        for w in 0..1440 {
            for i in 0..8 {
                let name = format!("s{i}");
                for _ in 0..5 {
                    let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
                    let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                    let mut o = ObservationRef::new("db", &name);
                    o.latency_ms = Some(20.0 * z.exp());
                    rig.record(&o);
                }
            }
            let f = rig.close();
            assert!(f.is_empty(), "window {w}: {f:?}");
        }
    }

    #[test]
    fn a_shard_that_is_always_slow_is_reported_from_the_start() {
        // Eight times its peers' latency from the first window: without a baseline of its
        // own it is judged against its peers, and reported to the end.
        let mut rig = Rig::with_defaults();
        let mut scale = vec![10.0; 6];
        scale[2] = 80.0;
        let hits: Vec<usize> = (1..=200)
            .filter(|_| !rig.window(&scale, 100).is_empty())
            .collect();
        // The fourth window: the quick path allows slow requests half a window to drain.
        assert_eq!((hits.first(), hits.len()), (Some(&4), 197), "{hits:?}");
    }

    #[test]
    fn a_20_s_slow_spell_does_not_fire_at_any_alignment() {
        // The spell covers a part of the first window, all of the second and the rest of the
        // third: the p99 of all three is slow, but the mean holds two windows' worth.
        for part in [0.2, 0.5, 0.8] {
            let mut rig = Rig::with_defaults();
            for _ in 0..40 {
                rig.window(&[10.0; 8], 100);
            }
            for cover in [part, 1.0, 1.0 - part] {
                assert!(rig.spell(5, 300.0, cover).is_empty(), "{part}");
            }
            for _ in 0..5 {
                assert!(rig.window(&[10.0; 8], 100).is_empty());
            }
        }
        // Four slow windows fire whatever their shape.
        let mut rig = Rig::with_defaults();
        for _ in 0..40 {
            rig.window(&[10.0; 8], 100);
        }
        for cover in [0.5, 1.0, 1.0] {
            assert!(rig.spell(5, 300.0, cover).is_empty());
        }
        assert_eq!(rig.spell(5, 300.0, 0.5).len(), 1);
    }

    #[test]
    fn figures_compare_the_shard_with_its_peers_and_its_own_baseline() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut o = ObservationRef::new("db", "a");
        o.count = 90;
        o.latency_ms = Some(20.0);
        w.record(&o);
        o.count = 10;
        o.latency_ms = Some(400.0);
        o.outcome = crate::observation::Outcome::Timeout;
        w.record(&o);
        let mut peer = ObservationRef::new("db", "b");
        peer.count = 300;
        w.record(&peer);
        let snap = w.close(10.0);
        let a = snap.groups[0].shard("a").unwrap();
        let fig = Figures::of(a, (400.0, 40.0, Some(100.0)), "step_shape");
        assert_eq!((fig.peer_ratio(), fig.baseline_ratio()), (10.0, Some(4.0)));
        assert_eq!((fig.error_ratio, fig.load_share), (0.1, 0.25));
        assert_eq!(fig.samples, 100);
        assert!(fig.p50.is_some_and(|p| (p - 20.0).abs() < 0.5), "{fig:?}");
        assert!(
            fig.ok_p99.is_some_and(|p| (p - 20.0).abs() < 0.5),
            "{fig:?}"
        );
        // A zero median of peers gives an infinite ratio, never NaN.
        assert_eq!(
            Figures::of(a, (400.0, 0.0, Some(100.0)), "step_shape").peer_ratio(),
            f64::INFINITY
        );
    }

    #[test]
    fn median_without_removes_one_copy() {
        let v = [1.0, 2.0, 3.0, 10.0];
        assert_eq!(median_without(&v, 10.0), 2.0);
        assert_eq!(median_without(&v, 1.0), 3.0);
        assert_eq!(median_without(&[5.0, 5.0, 9.0], 5.0), 7.0);
        assert_eq!(median_without(&[5.0, 5.0, 9.0], 9.0), 5.0);
    }

    #[test]
    fn check_names_every_bad_field() {
        let cfg = LatencySkewConfig {
            min_samples: 1,
            min_shards: 2,
            peer_ratio: 0.5,
            baseline_ratio: f64::NAN,
            consecutive_windows: 0,
            ..LatencySkewConfig::default()
        };
        let mut v = Vec::new();
        cfg.check(&mut Problems::new("detectors.latency_skew", &mut v));
        let fields: Vec<&str> = v.iter().map(|p| p.field.as_str()).collect();
        for f in [
            "min_samples",
            "min_shards",
            "peer_ratio",
            "baseline_ratio",
            "consecutive_windows",
        ] {
            let full = format!("detectors.latency_skew.{f}");
            assert!(
                fields.contains(&full.as_str()),
                "{f} missing from {fields:?}"
            );
        }
        let mut v = Vec::new();
        LatencySkewConfig::default().check(&mut Problems::new("d", &mut v));
        assert!(v.is_empty(), "{v:?}");
    }
}
