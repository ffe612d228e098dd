//! `CacheHitCollapse`: the look-aside cache's miss ratio, the backend's load and the backend's
//! distress rising together, which is the amplification loop of a metastable failure (label
//! `group`).
//!
//! Backend latency or errors turn into cache misses, each miss is another backend call, and
//! more calls mean more latency and errors: a hit ratio that falls from h0 to h1 multiplies
//! backend load by `(1 - h1) / (1 - h0)`. The condition is the miss ratio, the amplification
//! (backend calls per request) and the backend's distress (its p99 or error ratio) all over
//! their baselines together; the phase turns `metastable` once it holds at normal front-end
//! load. Its firing paths, as the `proven_by` annotation names them: `consecutive_windows` and
//! `hysteresis` (an active alert whose window still meets the condition).
//!
//! docs/detectors.md ("CacheHitCollapse") gives the signals, the defaults, the mitigations and
//! why ordinary traffic does not fire it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alert::{Finding, Severity};
use crate::detect::{
    Context, DetectorKind, DetectorSettings, GroupDetector, GroupMemory, Problems, RuleSettings,
    Visit, factor, ms, num, pct, times,
};
use crate::evidence::baseline::{Ewma, alpha_for};
use crate::observation::{Outcome, key_label, label_value, quote, quote_key};
use crate::snapshot::{GroupSnapshot, ShardSnapshot};
use crate::stats::normal_quantile;
use crate::whatif::{GroupWhatIf, WhatIfWindow};

/// `detectors.cache_hit_collapse` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheHitCollapseConfig {
    /// Alert timing and severity.
    #[serde(rename = "alert")]
    pub rule: RuleSettings,
    /// Fewest requests a group needs in a window to be judged.
    pub min_requests: u64,
    /// Fewest requests with a cache result (hits + misses) a group needs in a window.
    pub min_cache_results: u64,
    /// (a) The miss ratio reaches this multiple of its baseline...
    pub miss_ratio_factor: f64,
    /// ...and exceeds it by at least this much (0.05 = 5 points).
    pub miss_ratio_min_increase: f64,
    /// (b) Backend calls per request reach this multiple of their baseline.
    pub amplification_factor: f64,
    /// (c) The p99 latency reaches this multiple of its baseline (times the quantile-shift
    /// allowance)...
    pub p99_factor: f64,
    /// Tail shape (lognormal sigma) assumed for backend latency when discounting the merged
    /// p99's rise that comes from more requests reaching the backend; 0 turns the discount off.
    pub p99_tail_sigma: f64,
    /// ...or the backend error ratio reaches at least this...
    pub error_ratio_floor: f64,
    /// ...and this multiple of its baseline.
    pub error_ratio_factor: f64,
    /// Windows in a row all three conditions must hold before the detector reports.
    pub consecutive_windows: u32,
    /// Time constant of the baseline EWMAs, in seconds.
    pub baseline_tau_secs: f64,
    /// Windows with volume the baselines need before the detector judges the group.
    pub warmup_windows: u32,
    /// Windows a lone condition may freeze the baselines before they learn again.
    pub freeze_limit_windows: u32,
    /// Front-end load at most this multiple of its baseline counts as "back to normal".
    pub metastable_load_factor: f64,
    /// Windows the loop must hold with normal front-end load to be called metastable.
    pub metastable_windows: u32,
    /// A shard's top key is named as the hot key when it takes at least this share of the
    /// shard's requests.
    pub dominant_key_share: f64,
}

impl Default for CacheHitCollapseConfig {
    fn default() -> Self {
        CacheHitCollapseConfig {
            rule: RuleSettings::new(Severity::Critical, 0.0, 60.0),
            min_requests: 500,
            min_cache_results: 200,
            miss_ratio_factor: 2.0,
            miss_ratio_min_increase: 0.05,
            amplification_factor: 2.0,
            p99_factor: 2.0,
            p99_tail_sigma: 0.8,
            error_ratio_floor: 0.05,
            error_ratio_factor: 5.0,
            consecutive_windows: 3,
            baseline_tau_secs: 3600.0,
            warmup_windows: 30,
            freeze_limit_windows: 180,
            metastable_load_factor: 1.1,
            metastable_windows: 6,
            dominant_key_share: 0.5,
        }
    }
}

impl DetectorSettings for CacheHitCollapseConfig {
    fn alert(&self) -> &RuleSettings {
        &self.rule
    }

    /// Checks every field.
    fn check(&self, p: &mut Problems<'_>) {
        self.rule.check(p);
        if self.min_requests == 0 {
            p.fail(
                "min_requests",
                "must be at least 1: a ratio of no requests means nothing",
            );
        }
        if self.min_cache_results == 0 {
            p.fail(
                "min_cache_results",
                "must be at least 1: a miss ratio of no cache results means nothing",
            );
        }
        p.range("miss_ratio_factor", self.miss_ratio_factor, 1.0, 1000.0);
        p.range(
            "miss_ratio_min_increase",
            self.miss_ratio_min_increase,
            0.0,
            1.0,
        );
        p.range(
            "amplification_factor",
            self.amplification_factor,
            1.0,
            1000.0,
        );
        p.range("p99_factor", self.p99_factor, 1.0, 1000.0);
        p.range("p99_tail_sigma", self.p99_tail_sigma, 0.0, 3.0);
        p.range("error_ratio_floor", self.error_ratio_floor, 0.0, 1.0);
        p.range("error_ratio_factor", self.error_ratio_factor, 1.0, 1000.0);
        p.windows("consecutive_windows", self.consecutive_windows);
        p.time_constant("baseline_tau_secs", self.baseline_tau_secs);
        p.windows("warmup_windows", self.warmup_windows);
        p.windows("freeze_limit_windows", self.freeze_limit_windows);
        p.range(
            "metastable_load_factor",
            self.metastable_load_factor,
            1.0,
            100.0,
        );
        p.windows("metastable_windows", self.metastable_windows);
        p.range("dominant_key_share", self.dominant_key_share, 0.0, 1.0);
    }
}

/// One window's signals for a group.
#[derive(Debug, Clone, Copy)]
struct Signals {
    miss: f64,
    amp: f64,
    err: f64,
    p99: Option<f64>,
    /// True when `p99` is the backend's own (the cache misses' histogram), false when it is
    /// the merged p99 of all responses, which the latency test discounts.
    exact: bool,
    load: f64,
    /// Share of requests that reached the backend (not hits): `f`.
    backend: f64,
}

impl Signals {
    fn of(g: &GroupSnapshot) -> Signals {
        let results = g.traffic.cache_hits + g.traffic.cache_misses;
        let backend = g.requests.saturating_sub(g.traffic.cache_hits);
        Signals {
            miss: g.traffic.cache_misses as f64 / results.max(1) as f64,
            amp: g.traffic.cache_misses as f64 / g.requests.max(1) as f64,
            err: (g.traffic.errors as f64 / backend.max(1) as f64).min(1.0),
            p99: g.miss_latency.or(g.traffic.latency).map(|l| l.p99_ms),
            exact: g.miss_latency.is_some(),
            load: g.traffic.requests_per_second,
            backend: backend as f64 / g.requests.max(1) as f64,
        }
    }
}

/// Baseline values of the signals.
#[derive(Debug, Clone, Copy)]
struct Base {
    miss: f64,
    amp: f64,
    err: f64,
    p99: Option<f64>,
    /// Baseline of the backend's own p99 (cache misses).
    miss_p99: Option<f64>,
    load: f64,
    backend: f64,
}

/// Which conditions hold.
#[derive(Debug, Clone, Copy, Default)]
struct Conditions {
    miss: bool,
    amp: bool,
    latency: bool,
    errors: bool,
}

impl Conditions {
    fn any(self) -> bool {
        self.miss || self.amp || self.latency || self.errors
    }

    fn all(self) -> bool {
        self.miss && self.amp && (self.latency || self.errors)
    }
}

/// Baselines and counters of one group.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupState {
    miss: Ewma,
    amp: Ewma,
    err: Ewma,
    p99: Ewma,
    /// The backend's own p99 (cache misses), learned apart from the merged p99 so the two
    /// never mix in one baseline.
    #[serde(default)]
    miss_p99: Ewma,
    load: Ewma,
    backend: Ewma,
    /// Windows in a row all conditions held.
    streak: u32,
    /// Windows in a row some condition held without the alert being active.
    frozen_run: u32,
    /// Windows reported with front-end load back at baseline, in a row (a window in which the
    /// condition lapses while the alert stays active does not break the run).
    calm: u32,
    /// Windows reported since the alert became active.
    reported: u32,
    /// Largest miss-ratio amplification `(1-h1)/(1-h0)` since the alert became active.
    peak: f64,
    /// The what-if predictions pooled over the windows the evidence covers: the streak's,
    /// then every window reported while the alert is active.
    #[serde(default)]
    whatif: WhatIfPool,
}

impl GroupMemory for GroupState {}

impl GroupState {
    fn base(&self, warmup: u32) -> Option<Base> {
        Some(Base {
            miss: self.miss.value(warmup)?,
            amp: self.amp.value(warmup)?,
            err: self.err.value(warmup)?,
            p99: self.p99.value(warmup),
            miss_p99: self.miss_p99.value(warmup),
            load: self.load.value(warmup)?,
            backend: self.backend.raw().unwrap_or(0.0),
        })
    }

    fn learn(&mut self, s: &Signals, alpha: f64) {
        self.miss.update(s.miss, alpha);
        self.amp.update(s.amp, alpha);
        self.err.update(s.err, alpha);
        match s.p99 {
            Some(p) if s.exact => self.miss_p99.update(p, alpha),
            Some(p) => {
                // The backend share of the same windows: the quantile level of the baseline p99.
                self.p99.update(p, alpha);
                self.backend.update(s.backend, alpha);
            }
            None => {}
        }
        self.load.update(s.load, alpha);
    }
}

/// The `CacheHitCollapse` detector.
#[derive(Debug, Clone)]
pub struct CacheHitCollapse {
    cfg: CacheHitCollapseConfig,
    alpha: f64,
    groups: BTreeMap<String, GroupState>,
}

impl CacheHitCollapse {
    fn conditions(&self, s: &Signals, b: &Base) -> Conditions {
        let c = &self.cfg;
        Conditions {
            miss: s.miss >= c.miss_ratio_factor * b.miss
                && s.miss - b.miss >= c.miss_ratio_min_increase,
            amp: s.amp > b.amp && s.amp >= c.amplification_factor * b.amp,
            latency: match (s.p99, b.p99) {
                // The backend's own p99 against its own baseline: no quantile shift to allow.
                (Some(now), _) if s.exact => b
                    .miss_p99
                    .is_some_and(|base| base > 0.0 && now >= c.p99_factor * base),
                (Some(now), Some(base)) if base > 0.0 && s.backend >= 0.01 && b.backend >= 0.01 => {
                    let k = quantile_shift(s.backend, b.backend, c.p99_tail_sigma);
                    now >= c.p99_factor * base * k
                }
                _ => false,
            },
            errors: s.err >= c.error_ratio_floor.max(c.error_ratio_factor * b.err),
        }
    }
}

impl DetectorKind for CacheHitCollapse {
    const ALERTNAME: &'static str = "CacheHitCollapse";
    const KEY: &'static str = "cache_hit_collapse";
    type Config = CacheHitCollapseConfig;

    fn new(cfg: CacheHitCollapseConfig, window_secs: f64) -> Self {
        CacheHitCollapse {
            alpha: alpha_for(window_secs, cfg.baseline_tau_secs),
            cfg,
            groups: BTreeMap::new(),
        }
    }
}

impl GroupDetector for CacheHitCollapse {
    type State = GroupState;

    fn states(&self) -> &BTreeMap<String, Self::State> {
        &self.groups
    }

    fn states_mut(&mut self) -> &mut BTreeMap<String, Self::State> {
        &mut self.groups
    }

    fn visit(&self, g: &GroupSnapshot) -> Visit {
        Visit::when(
            g.is_tracked()
                && g.requests >= self.cfg.min_requests
                && g.traffic.cache_hits + g.traffic.cache_misses >= self.cfg.min_cache_results,
        )
    }

    fn judge(
        &self,
        ctx: &Context<'_>,
        g: &GroupSnapshot,
        st: &mut Self::State,
        out: &mut Vec<Finding>,
    ) {
        let s = Signals::of(g);
        let base = st.base(self.cfg.warmup_windows);
        let cond = base.map(|b| self.conditions(&s, &b)).unwrap_or_default();
        let active = ctx
            .alerts
            .is_active(CacheHitCollapse::ALERTNAME, &[("group", &g.group)]);
        st.streak = if cond.all() { st.streak + 1 } else { 0 };
        if cond.all() {
            if st.streak == 1 && !active {
                st.whatif = WhatIfPool::default();
            }
            if let Some(w) = &ctx.snapshot.whatif {
                st.whatif.add(w, &g.group);
            }
        }
        match base {
            Some(b) if cond.all() && (st.streak >= self.cfg.consecutive_windows || active) => {
                st.reported += 1;
                let calm = s.load <= self.cfg.metastable_load_factor * b.load;
                st.calm = if calm { st.calm + 1 } else { 0 };
                if b.miss > 0.0 {
                    st.peak = st.peak.max(s.miss / b.miss);
                }
                let proven_by = if st.streak >= self.cfg.consecutive_windows {
                    "consecutive_windows"
                } else {
                    "hysteresis"
                };
                let f = render(&self.cfg, &g.group, &self.figures(g, st, &s, &b, cond));
                out.push(f.annotate("proven_by", proven_by));
            }
            _ if !active => {
                st.reported = 0;
                st.calm = 0;
                st.peak = 0.0;
                if st.streak == 0 {
                    st.whatif = WhatIfPool::default();
                }
            }
            _ => {}
        }
        // Baselines learn from windows where nothing is suspect; a lone condition that
        // lasts past the freeze limit is learned as the new normal.
        st.frozen_run = if cond.any() && !active {
            st.frozen_run + 1
        } else {
            0
        };
        let frozen = active || (cond.any() && st.frozen_run <= self.cfg.freeze_limit_windows);
        if !frozen {
            st.learn(&s, self.alpha);
        }
    }
}

/// Everything a `CacheHitCollapse` finding reports, as numbers and decisions; [`render`] turns
/// it into the alert's text.
#[derive(Debug, Clone)]
struct Figures {
    /// This window's signals.
    now: Signals,
    /// Their baselines.
    base: Base,
    /// Which conditions hold (the distress named in the text follows them).
    cond: Conditions,
    /// The loop has held `metastable_windows` with front-end load back at baseline.
    metastable: bool,
    /// Windows reported in a row with front-end load back at baseline.
    calm_windows: u32,
    /// Windows reported since the alert became active.
    windows: u32,
    /// Largest `(1-h1)/(1-h0)` since the alert became active.
    peak_amplification: f64,
    /// The shard with the most backend calls, when there is one.
    hot: Option<HotSpot>,
    /// Timeouts dominate the errors or the latency test holds: deadlines are too long.
    shorten_deadlines: bool,
    /// Metastable, or half the backend calls fail: only shedding load lets the cache refill.
    shed_load: bool,
    /// Which simulated policy would lower backend calls most, when the group's records name
    /// a cache key.
    whatif: Option<WhatIfAdvice>,
}

/// The shard with the most backend calls, and its dominant key when one key dominates it.
#[derive(Debug, Clone, PartialEq)]
struct HotSpot {
    shard: String,
    /// Its share of the group's requests.
    request_share: f64,
    /// `request_share` over the fair share 1/N (1 when the group has no tracked shard).
    fair_multiple: f64,
    /// Its share of the group's backend calls.
    backend_share: f64,
    error_ratio: f64,
    hit_ratio: Option<f64>,
    /// The key and its lower-bound share of the shard, when it reaches `dominant_key_share`.
    key: Option<(String, f64)>,
}

impl Figures {
    /// `(1 - h1) / (1 - h0)`: how much the hit-ratio drop alone multiplies backend load;
    /// `None` when the baseline miss ratio is zero.
    fn amplification(&self) -> Option<f64> {
        factor(self.now.miss, self.base.miss)
    }

    /// Measured backend calls per request over their baseline.
    fn measured_amplification(&self) -> Option<f64> {
        factor(self.now.amp, self.base.amp)
    }
}

impl CacheHitCollapse {
    fn figures(
        &self,
        g: &GroupSnapshot,
        st: &GroupState,
        s: &Signals,
        b: &Base,
        cond: Conditions,
    ) -> Figures {
        Figures {
            now: *s,
            base: *b,
            cond,
            metastable: st.calm >= self.cfg.metastable_windows,
            calm_windows: st.calm,
            windows: st.reported,
            peak_amplification: st.peak,
            hot: hot_spot(g, self.cfg.dominant_key_share),
            shorten_deadlines: Outcome::dominant_error(&g.traffic.by_outcome)
                == Some(Outcome::Timeout)
                || cond.latency,
            shed_load: st.calm >= self.cfg.metastable_windows || s.err >= 0.5,
            whatif: st.whatif.advice(),
        }
    }
}

/// The shard with the most backend calls, with its top key when that key's lower-bound share
/// of the shard reaches `dominant_share`.
fn hot_spot(g: &GroupSnapshot, dominant_share: f64) -> Option<HotSpot> {
    let h = hottest(g)?;
    let backend = g.requests.saturating_sub(g.traffic.cache_hits).max(1) as f64;
    let calls = h.requests.saturating_sub(h.traffic.cache_hits) as f64;
    // The key summary over-counts by at most `error`: judge dominance on the lower bound.
    let key = h.top_keys.first().and_then(|k| {
        let share = k.lower_bound() as f64 / h.requests.max(1) as f64;
        (share >= dominant_share).then(|| (k.key.clone(), share))
    });
    Some(HotSpot {
        shard: h.shard.clone(),
        request_share: h.share,
        fair_multiple: if g.fair_share > 0.0 {
            h.share / g.fair_share
        } else {
            1.0
        },
        backend_share: calls / backend,
        error_ratio: h.traffic.error_ratio.unwrap_or(0.0),
        hit_ratio: h.traffic.cache_hit_ratio,
        key,
    })
}

/// The finding for `group`: its figures as annotations, then the summary, description and
/// mitigations written from them.
fn render(cfg: &CacheHitCollapseConfig, group: &str, fig: &Figures) -> Finding {
    let (s, b) = (&fig.now, &fig.base);
    let mut f = Finding::new(
        CacheHitCollapse::ALERTNAME,
        cfg.rule.severity,
        &[("group", group)],
    )
    .annotate("hit_ratio", pct(1.0 - s.miss))
    .annotate("baseline_hit_ratio", pct(1.0 - b.miss))
    .annotate("amplification", times(fig.amplification()))
    .annotate(
        "backend_calls_per_request",
        format!(
            "{} (baseline {}, {})",
            num(s.amp),
            num(b.amp),
            times(fig.measured_amplification())
        ),
    )
    .annotate("backend_error_ratio", pct(s.err))
    .annotate("baseline_backend_error_ratio", pct(b.err))
    .annotate("p99_latency", ms(s.p99))
    .annotate(
        "baseline_p99_latency",
        ms(if s.exact { b.miss_p99 } else { b.p99 }),
    )
    .annotate(
        "p99_source",
        if s.exact {
            "backend (cache misses)"
        } else {
            "all responses"
        },
    )
    .annotate(
        "frontend_load",
        format!("{} req/s (baseline {})", num(s.load), num(b.load)),
    )
    .annotate("phase", if fig.metastable { "metastable" } else { "loop" })
    .annotate(
        "peak_amplification",
        format!("{}x", num(fig.peak_amplification)),
    )
    .annotate("windows", fig.windows.to_string());
    if let Some(h) = &fig.hot {
        f = f
            .annotate("hot_shard", label_value(&h.shard))
            .annotate("hot_shard_backend_share", pct(h.backend_share))
            .annotate("hot_shard_request_share", pct(h.request_share))
            .annotate("hot_shard_error_ratio", pct(h.error_ratio))
            .annotate(
                "hot_shard_hit_ratio",
                h.hit_ratio.map_or("n/a".to_owned(), pct),
            );
        if let Some((key, share)) = &h.key {
            f = f
                .annotate("hot_key", key_label(key))
                .annotate("hot_key_share", pct(*share));
        }
    }
    if let Some(w) = &fig.whatif {
        f = f
            .annotate("whatif", whatif_text(w))
            .annotate("whatif_basis", whatif_basis(w));
        if let Some(errors) = whatif_errors(w) {
            f = f.annotate("whatif_errors", errors);
        }
    }
    f.annotate("summary", summary(group, fig))
        .annotate("description", description(group, fig))
        .annotate("mitigations", mitigations(fig))
}

fn summary(group: &str, fig: &Figures) -> String {
    let group = quote(group);
    format!(
        "{group}: cache hit ratio {} (baseline {}), backend calls per request {} baseline: the \
         cache is feeding the fire",
        pct(1.0 - fig.now.miss),
        pct(1.0 - fig.base.miss),
        times(fig.measured_amplification())
    )
}

fn description(group: &str, fig: &Figures) -> String {
    let group = quote(group);
    let (s, b) = (&fig.now, &fig.base);
    let distress = match (fig.cond.errors, fig.cond.latency) {
        (true, true) => format!(
            "backend errors ({}) and latency (p99 {})",
            pct(s.err),
            ms(s.p99)
        ),
        (true, false) => format!("backend errors ({})", pct(s.err)),
        _ => format!(
            "backend latency (p99 {}, baseline {})",
            ms(s.p99),
            ms(if s.exact { b.miss_p99 } else { b.p99 })
        ),
    };
    let hot = fig.hot.as_ref().map_or(String::new(), |h| {
        let key = h.key.as_ref().map_or(String::new(), |(k, share)| {
            format!(
                ", and one key dominates it: {} (at least {} of its requests)",
                quote_key(k),
                pct(*share)
            )
        });
        format!(
            " The hottest shard is {}: {} of the requests ({}x its fair share), {} of the \
             backend calls, {} of its requests failing{key}.",
            quote(&h.shard),
            pct(h.request_share),
            num(h.fair_multiple),
            pct(h.backend_share),
            pct(h.error_ratio)
        )
    });
    let phase = if fig.metastable {
        format!(
            " Phase: metastable. Front-end load is back at its baseline ({} req/s), yet the \
             loop has held for {} windows: the amplification sustains itself, so removing the \
             trigger alone will not end it.",
            num(s.load),
            fig.calm_windows
        )
    } else {
        " Phase: loop.".to_owned()
    };
    format!(
        "The look-aside cache in front of {group} is collapsing: {distress} turn into cache \
         misses, because failed or slow fills leave entries empty, and every miss is another \
         backend call. The hit ratio fell from {} to {}, which alone multiplies backend load by \
         (1-h1)/(1-h0) = {}; measured backend calls per request are {} against a baseline of {} \
         ({}).{hot}{phase}",
        pct(1.0 - b.miss),
        pct(1.0 - s.miss),
        times(fig.amplification()),
        num(s.amp),
        num(b.amp),
        times(fig.measured_amplification())
    )
}

/// The mitigations that fit the figures, most generally useful first.
fn mitigations(fig: &Figures) -> String {
    let mut m = vec![
        "serve stale values on backend errors (stale-if-error / stale-while-revalidate, RFC \
         5861) so a failed fill is not a miss"
            .to_owned(),
        "coalesce concurrent fills of one key (singleflight)".to_owned(),
        "lengthen and jitter the TTL (or refresh early, XFetch)".to_owned(),
    ];
    if fig.shorten_deadlines {
        m.push(
            "shorten deadlines and drop work whose caller has given up, so the backend stops \
             serving dead requests"
                .to_owned(),
        );
    }
    if let Some(h) = &fig.hot {
        match &h.key {
            Some((k, _)) => m.push(format!(
                "rate-limit or shed load on shard {} (key {})",
                quote(&h.shard),
                quote_key(k)
            )),
            None => m.push(format!(
                "rate-limit or shed load on shard {}",
                quote(&h.shard)
            )),
        }
    }
    if fig.shed_load {
        m.push(
            "shed load (admission control) until the backend is below capacity, then let the \
             cache refill"
                .to_owned(),
        );
    }
    m.join("; ")
}

/// How much the merged p99 rises from the backend share moving from `base` to `now` alone, for
/// a lognormal backend latency of shape `sigma`: the merged p99 is the backend's `1 - 0.01/f`
/// quantile. At least 1 (a falling share never makes the test easier). Shares are >= 0.01.
fn quantile_shift(now: f64, base: f64, sigma: f64) -> f64 {
    let z = |f: f64| normal_quantile((1.0 - 0.01 / f).clamp(0.01, 0.99));
    (sigma * (z(now) - z(base)).max(0.0)).exp()
}

/// The shard with the most backend calls (requests that were not cache hits); ties go to the
/// first name. `__other__` is an aggregate, not a shard to name.
fn hottest(g: &GroupSnapshot) -> Option<&ShardSnapshot> {
    g.tracked_shards()
        .filter(|s| s.requests > 0)
        .rev()
        .max_by_key(|s| s.requests.saturating_sub(s.traffic.cache_hits))
}

/// Candidates named in the `whatif` annotation: the one that lowers backend calls most, then
/// the next best.
pub const WHATIF_CANDIDATES_NAMED: usize = 3;
/// The least drop in backend calls per request that counts as help, beyond the sample's bound:
/// a hundredth of a call per request, the precision the annotation prints, so a candidate said
/// to help never reads `0.74 → 0.74`.
pub const WHATIF_MIN_GAIN: f64 = 0.01;
/// The least drop in the predicted error ratio that the `whatif_errors` annotation names: a
/// point of the requests.
pub const WHATIF_MIN_ERROR_GAIN: f64 = 0.01;
/// How far the simulation of the cache as configured may sit from the cache's own hit ratio,
/// pooled over the windows, before the annotation says its predictions are not to be trusted
/// (the configured TTL or rules do not describe the cache).
pub const WHATIF_CHECK_TOLERANCE: f64 = 0.05;

/// The what-if predictions of one group, pooled over windows: the requests with a cache key
/// and, per policy, the predicted backend calls and their error bound, each summed weighted by
/// the window's requests, so a window with more requests counts for more.
///
/// The pooled bound is the request-weighted mean of the windows' bounds: the sum of the
/// windows' standard errors, which is what their sum's standard error is when the windows'
/// errors are fully correlated. They are positively correlated (the same sampled keys in every
/// window), so it never understates the pooled estimate's bound; it overstates it when the
/// sample's luck changes from window to window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct WhatIfPool {
    /// The policies pooled, observed first; a window with another list starts the pool again.
    policies: Vec<String>,
    /// Windows pooled.
    windows: u32,
    /// Requests with a cache key over the windows pooled.
    requests: u64,
    /// Per policy, Σ backend calls per request × requests.
    calls: Vec<f64>,
    /// Per policy, Σ error bound × requests.
    bound: Vec<f64>,
    /// Σ the observed policy's predicted hits (hit ratio × requests).
    observed_hits: f64,
    /// Hits and misses the cache itself reported.
    real_hits: u64,
    real_misses: u64,
    /// The lowest sampling rate of the windows pooled.
    sample_rate: f64,
    /// Per policy, Σ predicted error ratio × requests, over the windows that predicted one
    /// for every policy.
    #[serde(default)]
    errors: Vec<f64>,
    /// Requests of those windows.
    #[serde(default)]
    error_requests: u64,
    /// The busiest shard with a known capacity in the latest window pooled: where the
    /// predicted errors come from the capacity model.
    #[serde(default)]
    capacity: Option<CapacityNote>,
}

/// A shard whose predicted errors come from its capacity (docs/whatif.md, "Errors").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CapacityNote {
    shard: String,
    calls_per_second: f64,
    /// Learned from this many saturated windows; 0 when configured.
    saturated_windows: u32,
    /// Shards with a known capacity, of `shards`, in that window.
    known: usize,
    shards: usize,
}

/// One policy's pooled prediction.
#[derive(Debug, Clone, PartialEq)]
struct Prediction {
    /// The policy's written form (`observed`, `ttl=20m`, `serve-stale`).
    policy: String,
    /// Predicted backend calls per request, 0..=1.
    calls: f64,
    /// The sample's error bound of `calls` (about 95%).
    bound: f64,
    /// Predicted share of requests answered with an error; `None` when no window predicted it.
    errors: Option<f64>,
}

/// What the simulation says about the candidates, from a [`WhatIfPool`].
#[derive(Debug, Clone, PartialEq)]
struct WhatIfAdvice {
    /// The cache as configured: the "before" of every candidate.
    observed: Prediction,
    /// The candidates that lower backend calls by more than both bounds together and
    /// [`WHATIF_MIN_GAIN`], fewest calls first, at most [`WHATIF_CANDIDATES_NAMED`].
    helps: Vec<Prediction>,
    /// The candidate with the fewest predicted calls, whether it helps or not; `None` when
    /// only the observed policy is simulated.
    best: Option<Prediction>,
    /// The candidates that lower the error ratio by at least [`WHATIF_MIN_ERROR_GAIN`],
    /// fewest errors first, at most [`WHATIF_CANDIDATES_NAMED`]: serving stale changes no
    /// backend call, only what a failed one answers.
    fewer_errors: Vec<Prediction>,
    /// Windows pooled.
    windows: u32,
    /// Requests with a cache key in them.
    requests: u64,
    /// The lowest sampling rate among them.
    sample_rate: f64,
    /// The observed policy's predicted hit ratio minus the cache's own, pooled; `None` when
    /// the cache reported no result.
    check_error: Option<f64>,
    /// Where the predicted errors come from the capacity model; `None` when they are the
    /// backend's observed failures replayed.
    capacity: Option<CapacityNote>,
}

impl WhatIfPool {
    /// Adds `group`'s predictions of one window, when the window simulated it.
    fn add(&mut self, w: &WhatIfWindow, group: &str) {
        let Some(g) = w.group(group) else {
            return;
        };
        if g.requests == 0 || g.policies.len() != w.policies.len() {
            return;
        }
        if self.policies != w.policies {
            *self = WhatIfPool {
                policies: w.policies.clone(),
                calls: vec![0.0; w.policies.len()],
                bound: vec![0.0; w.policies.len()],
                errors: vec![0.0; w.policies.len()],
                sample_rate: 1.0,
                ..WhatIfPool::default()
            };
        }
        self.add_group(g);
    }

    fn add_group(&mut self, g: &GroupWhatIf) {
        let n = g.requests as f64;
        for (i, p) in g.policies.iter().enumerate() {
            self.calls[i] += p.backend_calls_per_request * n;
            self.bound[i] += p.error_bound * n;
        }
        if let Some(observed) = g.policies.first() {
            self.observed_hits += observed.hit_ratio * n;
        }
        if self.errors.len() == g.policies.len()
            && g.policies.iter().all(|p| p.error_ratio.is_some())
        {
            for (sum, p) in self.errors.iter_mut().zip(&g.policies) {
                *sum += p.error_ratio.unwrap_or(0.0) * n;
            }
            self.error_requests += g.requests;
        }
        if let Some(s) = g.capacity_shard()
            && let Some(c) = s.capacity
        {
            self.capacity = Some(CapacityNote {
                shard: s.shard.clone(),
                calls_per_second: c.calls_per_second,
                saturated_windows: c.saturated_windows,
                known: g.shards.iter().filter(|s| s.capacity.is_some()).count(),
                shards: g.shards.len(),
            });
        }
        self.windows += 1;
        self.requests += g.requests;
        self.real_hits += g.real_hits;
        self.real_misses += g.real_misses;
        self.sample_rate = self.sample_rate.min(g.sample_rate);
    }

    /// The pooled predictions, ranked; `None` when no window was pooled.
    fn advice(&self) -> Option<WhatIfAdvice> {
        if self.requests == 0 || self.policies.is_empty() {
            return None;
        }
        let n = self.requests as f64;
        let mut all = self
            .policies
            .iter()
            .enumerate()
            .map(|(i, policy)| Prediction {
                policy: policy.clone(),
                calls: (self.calls[i] / n).clamp(0.0, 1.0),
                bound: self.bound[i] / n,
                errors: (self.error_requests > 0).then(|| {
                    (self.errors.get(i).copied().unwrap_or(0.0) / self.error_requests as f64)
                        .clamp(0.0, 1.0)
                }),
            });
        let observed = all.next()?;
        let mut candidates: Vec<Prediction> = all.collect();
        let mut fewer_errors: Vec<Prediction> = match observed.errors {
            Some(before) => candidates
                .iter()
                .filter(|c| {
                    c.errors
                        .is_some_and(|e| before - e >= WHATIF_MIN_ERROR_GAIN)
                })
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        fewer_errors.sort_by(|a, b| a.errors.unwrap_or(1.0).total_cmp(&b.errors.unwrap_or(1.0)));
        fewer_errors.truncate(WHATIF_CANDIDATES_NAMED);
        // Fewest calls first; the configured order breaks ties (a stable sort).
        candidates.sort_by(|a, b| a.calls.total_cmp(&b.calls));
        let best = candidates.first().cloned();
        let helps = candidates
            .into_iter()
            .filter(|c| helps(&observed, c))
            .take(WHATIF_CANDIDATES_NAMED)
            .collect();
        let results = self.real_hits + self.real_misses;
        Some(WhatIfAdvice {
            observed,
            helps,
            best,
            fewer_errors,
            windows: self.windows,
            requests: self.requests,
            sample_rate: self.sample_rate,
            check_error: (results > 0)
                .then(|| self.observed_hits / n - self.real_hits as f64 / results as f64),
            capacity: self.capacity.clone(),
        })
    }
}

/// `ttl=20m: errors 14.9% → 0.0% of requests; serve-stale: → 7.7%`: the candidates that
/// lower the share of requests answered with an error; `None` when none does (or no error
/// ratio was predicted). Where a shard's capacity is known the errors are the calls beyond
/// it, so a policy that relieves the shard is seen to; elsewhere they are the failures the
/// cache as run met, replayed ([`whatif_basis`] says which).
fn whatif_errors(a: &WhatIfAdvice) -> Option<String> {
    let before = a.observed.errors?;
    let (first, rest) = a.fewer_errors.split_first()?;
    let mut out = format!(
        "{}: errors {} → {} of requests",
        first.policy,
        pct(before),
        pct(first.errors?)
    );
    for c in rest {
        out.push_str(&format!("; {}: → {}", c.policy, pct(c.errors?)));
    }
    Some(out)
}

/// A candidate helps when it lowers backend calls per request by more than the two bounds
/// added (the bound of a difference of two estimates from one sample is at most the sum of
/// theirs) and by at least [`WHATIF_MIN_GAIN`].
fn helps(observed: &Prediction, candidate: &Prediction) -> bool {
    let gain = observed.calls - candidate.calls;
    gain > observed.bound + candidate.bound && gain >= WHATIF_MIN_GAIN
}

/// `ttl=20m: backend calls 0.74 → 0.70 per request (±0.01); serve-stale: → 0.62 (±0.01)`, or
/// why no candidate helps.
fn whatif_text(a: &WhatIfAdvice) -> String {
    let bound = |b: f64| format!("±{}", num(b));
    let Some((first, rest)) = a.helps.split_first() else {
        return match &a.best {
            Some(best) => format!(
                "no candidate helps: backend calls {} per request as configured, {} at best \
                 ({}, {}), a drop within the sample's bound or under {}; the misses are ones \
                 none of the candidates would serve, such as first lookups of their keys",
                num(a.observed.calls),
                num(best.calls),
                best.policy,
                bound(best.bound),
                num(WHATIF_MIN_GAIN)
            ),
            None => format!(
                "no candidate simulated: backend calls {} per request as configured ({})",
                num(a.observed.calls),
                bound(a.observed.bound)
            ),
        };
    };
    let mut out = format!(
        "{}: backend calls {} → {} per request ({})",
        first.policy,
        num(a.observed.calls),
        num(first.calls),
        bound(first.bound)
    );
    for c in rest {
        out.push_str(&format!(
            "; {}: → {} ({})",
            c.policy,
            num(c.calls),
            bound(c.bound)
        ));
    }
    out
}

/// What the `whatif` figures rest on, and whether the simulation of the cache as configured
/// matches the cache.
fn whatif_basis(a: &WhatIfAdvice) -> String {
    let windows = if a.windows == 1 { "window" } else { "windows" };
    let mut out = format!(
        "pooled over the alert's {} {windows} ({} requests with a cache key, sampling rate {})",
        a.windows,
        a.requests,
        num(a.sample_rate)
    );
    match a.check_error {
        Some(e) if e.abs() > WHATIF_CHECK_TOLERANCE => out.push_str(&format!(
            "; not to be trusted: the simulation of the cache as configured is {} from the \
             cache's own hit ratio (tolerance {}), so whatif's ttl_secs, negative_ttl_secs, \
             stale_on_error or capacity_entries do not describe the cache",
            signed_points(e),
            pct(WHATIF_CHECK_TOLERANCE)
        )),
        Some(e) => out.push_str(&format!(
            "; the simulation of the cache as configured is {} from its own hit ratio",
            signed_points(e)
        )),
        None => out.push_str("; the cache reported no hit or miss to check the simulation by"),
    }
    match &a.capacity {
        Some(c) => {
            let known = match c.saturated_windows {
                0 => "configured".to_owned(),
                1 => "learned from 1 saturated window".to_owned(),
                n => format!("learned from {n} saturated windows"),
            };
            let others = if c.known < c.shards {
                ", the others' observed failures replayed"
            } else {
                ""
            };
            out.push_str(&format!(
                "; errors: the calls beyond each shard's capacity fail ({}: {} calls/s, {known}; \
                 {} of {} shards' capacities known{others})",
                c.shard,
                num(c.calls_per_second),
                c.known,
                c.shards
            ));
        }
        None => out.push_str(
            "; errors: the backend's observed failures replayed (no shard's capacity known)",
        ),
    }
    out
}

/// A difference of ratios in percentage points, signed: `+1.5 points`; one that rounds to
/// zero is `+0.0`, never `-0.0`.
fn signed_points(x: f64) -> String {
    let points = (x * 1000.0).round() / 10.0;
    format!("{:+.1} points", points + 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertBook;
    use crate::detect::Detector;
    use crate::detect::DetectorsConfig;
    use crate::observation::{CacheResult, ObservationRef};
    use crate::snapshot::WindowSnapshot;
    use crate::window::{WindowConfig, Windows};

    /// One window of the cache in front of a 4-shard backend.
    #[derive(Debug, Clone, Copy)]
    struct W {
        /// Front-end requests.
        requests: u64,
        /// Hit ratio.
        hit: f64,
        /// Backend error ratio.
        err: f64,
        /// Backend latency, ms.
        backend_ms: f64,
        /// Extra requests on shard "s1" with the empty key, with the same hit and error ratios.
        hot: u64,
        /// Backend latencies, as multiples of `backend_ms`, each for an equal share of calls.
        spread: &'static [f64],
    }

    const NARROW: &[f64] = &[0.5, 1.0, 1.0, 2.0];
    /// A long-tailed backend: the top 12.5% of calls take 2.5x the 75-87.5% band.
    const WIDE: &[f64] = &[0.5, 0.7, 0.85, 1.0, 1.2, 1.5, 1.8, 4.5];

    const NORMAL: W = W {
        requests: 4000,
        hit: 0.95,
        err: 0.001,
        backend_ms: 20.0,
        hot: 0,
        spread: NARROW,
    };

    fn record(w: &mut Windows, win: W) {
        for (i, shard) in ["s0", "s1", "s2", "s3"].into_iter().enumerate() {
            let n = win.requests / 4;
            let hits = (n as f64 * win.hit).round() as u64;
            let misses = n - hits;
            let errs = (misses as f64 * win.err).round() as u64;
            let mut o = ObservationRef::new("db", shard);
            o.key = Some(["a", "b", "c", "d"][i]);
            o.cache = Some(CacheResult::Hit);
            o.latency_ms = Some(0.5);
            o.count = hits;
            if hits > 0 {
                w.record(&o);
            }
            o.cache = Some(CacheResult::Miss);
            // A spread of backend latencies so the p99 is a tail.
            let parts = win.spread.len() as u64;
            for (j, f) in win.spread.iter().enumerate() {
                let c = (misses - errs) / parts + u64::from(j == 0) * ((misses - errs) % parts);
                if c > 0 {
                    o.count = c;
                    o.latency_ms = Some(win.backend_ms * f);
                    w.record(&o);
                }
            }
            if errs > 0 {
                o.count = errs;
                o.outcome = Outcome::Timeout;
                o.latency_ms = Some(1000.0);
                w.record(&o);
            }
        }
        if win.hot > 0 {
            // The hot key's traffic sees the same hit and error ratios.
            let hits = (win.hot as f64 * win.hit).round() as u64;
            let errs = ((win.hot - hits) as f64 * win.err).round() as u64;
            let mut o = ObservationRef::new("db", "s1");
            o.key = Some("");
            for (cache, outcome, count, ms) in [
                (CacheResult::Hit, Outcome::Ok, hits, 0.5),
                (
                    CacheResult::Miss,
                    Outcome::Ok,
                    win.hot - hits - errs,
                    win.backend_ms,
                ),
                (CacheResult::Miss, Outcome::Timeout, errs, 1000.0),
            ] {
                if count > 0 {
                    o.cache = Some(cache);
                    o.outcome = outcome;
                    o.count = count;
                    o.latency_ms = Some(ms);
                    w.record(&o);
                }
            }
        }
    }

    /// Runs the detector with an alert book; returns the 1-based windows with a finding and the
    /// last finding.
    fn run(cfg: CacheHitCollapseConfig, windows: &[W]) -> (Vec<usize>, Option<Finding>) {
        let mut d = CacheHitCollapse::new(cfg.clone(), 10.0);
        let config = DetectorsConfig {
            cache_hit_collapse: cfg,
            ..DetectorsConfig::default()
        };
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let snaps = windows.iter().enumerate().map(|(i, win)| {
            record(&mut w, *win);
            w.close((i + 1) as f64 * 10.0)
        });
        crate::detect::testkit::firings(&mut d, &config, snaps)
    }

    fn normal(n: usize) -> Vec<W> {
        vec![NORMAL; n]
    }

    #[test]
    fn the_loop_fires_on_the_third_window_and_names_the_hot_shard_and_key() {
        let mut ws = normal(40);
        ws.extend(vec![
            W {
                hit: 0.5,
                err: 0.6,
                backend_ms: 200.0,
                hot: 3000,
                ..NORMAL
            };
            10
        ]);
        let (hits, last) = run(CacheHitCollapseConfig::default(), &ws);
        assert_eq!(hits, (43..=50).collect::<Vec<_>>());
        let f = last.unwrap();
        let a = &f.annotations;
        assert_eq!(f.labels["group"], "db");
        assert_eq!(a["amplification"], "10.0x");
        assert_eq!(a["hot_shard"], "s1");
        assert_eq!(a["hot_key"], "(empty)");
        assert_eq!(a["baseline_hit_ratio"], "95.0%");
        // Front-end load is 1.75x baseline: still a loop, not yet metastable.
        assert_eq!(a["phase"], "loop");
        assert!(a["summary"].contains("feeding the fire"), "{a:?}");
        assert!(a["mitigations"].contains("singleflight"), "{a:?}");
        assert!(a["mitigations"].contains("rate-limit or shed load on shard \"s1\" (key (empty))"));
        assert!(a["description"].contains("(1-h1)/(1-h0) = 10.0x"), "{a:?}");
    }

    /// One window's simulation of group "db": requests, the cache's own hits, and per policy
    /// of [`POLICIES`] the predicted backend calls per request and their bound.
    fn sim(requests: u64, real_hits: u64, calls: &[(f64, f64)]) -> WhatIfWindow {
        WhatIfWindow {
            policies: POLICIES.iter().map(|p| p.to_string()).collect(),
            groups: vec![GroupWhatIf {
                group: "db".to_owned(),
                requests,
                real_hits,
                real_misses: requests - real_hits,
                sample_rate: 0.5,
                sampled_keys: 100,
                sampled_requests: requests / 2,
                policies: calls
                    .iter()
                    .map(|&(c, b)| crate::whatif::PolicyFigures {
                        hit_ratio: 1.0 - c,
                        backend_calls_per_request: c,
                        error_ratio: None,
                        error_bound: b,
                    })
                    .collect(),
                exact: None,
                shards: Vec::new(),
            }],
            unsimulated_requests: 0,
            heap_bytes: 0,
        }
    }

    const POLICIES: [&str; 4] = ["observed", "ttl=20m", "serve-stale", "ttl=10s"];

    /// [`run`], with the simulation `sims[i]` riding in window i + 1's snapshot.
    fn run_with(windows: &[W], sims: &[Option<WhatIfWindow>]) -> (Vec<usize>, Option<Finding>) {
        let cfg = CacheHitCollapseConfig::default();
        let mut d = CacheHitCollapse::new(cfg.clone(), 10.0);
        let config = DetectorsConfig {
            cache_hit_collapse: cfg,
            ..DetectorsConfig::default()
        };
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let snaps = windows.iter().enumerate().map(|(i, win)| {
            record(&mut w, *win);
            let mut snap = w.close((i + 1) as f64 * 10.0);
            snap.whatif = sims.get(i).cloned().flatten().map(std::sync::Arc::new);
            snap
        });
        crate::detect::testkit::firings(&mut d, &config, snaps)
    }

    fn the_loop() -> Vec<W> {
        let mut ws = normal(40);
        ws.extend(vec![
            W {
                hit: 0.5,
                err: 0.6,
                backend_ms: 200.0,
                ..NORMAL
            };
            10
        ]);
        ws
    }

    #[test]
    fn the_alert_names_the_candidate_that_lowers_backend_calls_most_pooled_over_its_windows() {
        // Calm windows simulate well (they are no evidence and must not be pooled); the three
        // windows of the streak disagree, the last one with twice the requests.
        let calm = sim(
            4000,
            3800,
            &[(0.05, 0.0), (0.01, 0.0), (0.05, 0.0), (0.3, 0.0)],
        );
        let early = [(0.80, 0.01), (0.70, 0.01), (0.50, 0.01), (0.90, 0.01)];
        let mut sims = vec![Some(calm); 40];
        sims.push(Some(sim(1000, 200, &early)));
        sims.push(Some(sim(1000, 200, &early)));
        let last = [(0.78, 0.03), (0.76, 0.03), (0.66, 0.03), (0.96, 0.03)];
        sims.push(Some(sim(2000, 440, &last)));
        // Windows after the firing carry none: the annotation keeps what was pooled.
        let (hits, f) = run_with(&the_loop(), &sims);
        assert_eq!(hits, (43..=50).collect::<Vec<_>>());
        let a = f.unwrap().annotations;
        // Over 4,000 requests: observed (800 + 800 + 1560) / 4000 = 0.79, serve-stale
        // (500 + 500 + 1320) / 4000 = 0.58, ttl=20m 0.73; bounds (10 + 10 + 60) / 4000. The
        // last window alone would say 0.78 → 0.66. ttl=10s raises them.
        assert_eq!(
            a["whatif"],
            "serve-stale: backend calls 0.79 → 0.58 per request (±0.02); ttl=20m: → 0.73 (±0.02)"
        );
        assert!(
            a["whatif_basis"].starts_with(
                "pooled over the alert's 3 windows (4000 requests with a cache key, sampling \
                 rate 0.50); the simulation of the cache as configured is +0.0 points"
            ),
            "{a:?}"
        );
    }

    #[test]
    fn without_a_simulation_the_alert_carries_no_whatif() {
        let (hits, f) = run_with(&the_loop(), &[]);
        assert_eq!(hits, (43..=50).collect::<Vec<_>>());
        let a = f.unwrap().annotations;
        assert!(
            !a.contains_key("whatif") && !a.contains_key("whatif_basis"),
            "{a:?}"
        );
    }

    #[test]
    fn through_the_engine_the_alert_names_what_the_simulation_of_the_real_keys_predicts() {
        // 100 keys on 4 shards, each asked once a second for 8 s of every 10-s window, in
        // front of a cache that keeps answers 60 s (the default observed policy) and reports
        // what such a cache does. From t = 400 every backend call fails: failed fills are not
        // stored, so from the first expiry (t = 421) every request misses. A 5-minute or
        // longer TTL would still hold the copies stored at t = 301 until the end (t = 498);
        // serving stale calls the backend on every miss too, and answers each with the copy.
        let cfg = crate::engine::EngineConfig::default();
        let mut e = crate::engine::Engine::new(cfg, 0.0);
        let shards = ["s0", "s1", "s2", "s3"];
        let mut stored = [f64::NEG_INFINITY; 100];
        let mut last = None;
        for w in 0..50u32 {
            for sec in 1..=8u32 {
                let t = f64::from(w * 10 + sec);
                last = e.advance(t).pop().or(last);
                for (k, at) in stored.iter_mut().enumerate() {
                    let mut o = ObservationRef::new("db", shards[k % 4]);
                    o.ts = Some(t);
                    o.cache_key = Some(crate::observation::CacheKeyHash::new(
                        0x9e37 * (k as u64 + 1),
                    ));
                    if t - *at < 60.0 {
                        o.cache = Some(CacheResult::Hit);
                        o.latency_ms = Some(0.5);
                    } else {
                        o.cache = Some(CacheResult::Miss);
                        if t < 400.0 {
                            *at = t;
                            o.latency_ms = Some(20.0);
                        } else {
                            o.outcome = Outcome::Error;
                            o.latency_ms = Some(200.0);
                        }
                    }
                    e.record(&o);
                }
            }
        }
        last = e.advance(500.0).pop().or(last);
        let ev = last.unwrap();
        let alert = ev
            .alerts
            .iter()
            .find(|a| a.alertname() == "CacheHitCollapse")
            .expect("CacheHitCollapse fires");
        let a = &alert.annotations;
        // Fired on t = 450 (the third window of misses, 421..448) and reported since: eight
        // windows, every request a backend call as configured; the three TTLs of 5 minutes and
        // more tie at none, in the configured order; serve-stale calls the backend as often as
        // configured (it answers the failures with the copy, which `whatif_errors` counts).
        assert_eq!(
            a["whatif"],
            "ttl=5m: backend calls 1.00 → 0.00 per request (±0.00); ttl=20m: → 0.00 (±0.00); \
             ttl=1h: → 0.00 (±0.00)",
            "{a:?}"
        );
        // Every failed call would be spared by the long TTLs and by serving the copy; the
        // first three in the configured order are named.
        assert_eq!(
            a["whatif_errors"],
            "ttl=5m: errors 100.0% → 0.0% of requests; ttl=20m: → 0.0%; ttl=1h: → 0.0%",
            "{a:?}"
        );
        assert!(
            a["whatif_basis"].starts_with(
                "pooled over the alert's 8 windows (6400 requests with a cache key, sampling \
                 rate 1.00); the simulation of the cache as configured is +0.0 points"
            ),
            "{a:?}"
        );
        // Every call failed, so each shard showed itself saturated at no call answered: the
        // errors come from that capacity, which fails every call a policy still makes.
        assert!(
            a["whatif_basis"].ends_with(
                "; errors: the calls beyond each shard's capacity fail (s0: 0.00 calls/s, \
                 learned from 8 saturated windows; 4 of 4 shards' capacities known)"
            ),
            "{a:?}"
        );
    }

    fn pool(windows: &[WhatIfWindow]) -> WhatIfPool {
        let mut p = WhatIfPool::default();
        for w in windows {
            p.add(w, "db");
        }
        p
    }

    #[test]
    fn a_candidate_helps_only_beyond_both_bounds_and_the_least_gain() {
        // ttl=20m: 0.10 lower, beyond 0.04 + 0.04; serve-stale: 0.07 lower, within 0.04 +
        // 0.04; ttl=10s: 0.005 lower with no bound, under the least gain.
        let w = sim(
            1000,
            300,
            &[(0.70, 0.04), (0.60, 0.04), (0.63, 0.04), (0.695, 0.0)],
        );
        let a = pool(&[w]).advice().unwrap();
        assert_eq!(a.observed.policy, "observed");
        let names: Vec<&str> = a.helps.iter().map(|c| c.policy.as_str()).collect();
        assert_eq!(names, ["ttl=20m"]);
        assert_eq!(a.best.as_ref().unwrap().policy, "ttl=20m");
        assert!((a.check_error.unwrap() - 0.0).abs() < 1e-12);
    }

    #[test]
    fn when_no_candidate_helps_it_says_so_and_names_the_nearest() {
        let w = sim(
            1000,
            250,
            &[(0.75, 0.01), (0.74, 0.01), (0.75, 0.01), (0.90, 0.01)],
        );
        let a = pool(&[w]).advice().unwrap();
        assert!(a.helps.is_empty());
        let text = whatif_text(&a);
        assert!(
            text.starts_with(
                "no candidate helps: backend calls 0.75 per request as configured, 0.74 at \
                 best (ttl=20m, ±0.01)"
            ),
            "{text}"
        );
        assert!(text.contains("first lookups"), "{text}");
    }

    #[test]
    fn serving_stale_is_named_for_the_errors_it_spares_not_for_backend_calls() {
        // Serve-stale calls the backend as often as the cache as configured but answers 7
        // points fewer requests with an error; ttl=20m spares 2.9 points and fewer calls;
        // ttl=10s spares none. Two windows of 1,000 requests, pooled.
        let errors = [0.149, 0.120, 0.077, 0.160];
        let one = || {
            let mut w = sim(
                1000,
                300,
                &[(0.70, 0.0), (0.60, 0.0), (0.70, 0.0), (0.80, 0.0)],
            );
            for (p, e) in w.groups[0].policies.iter_mut().zip(errors) {
                p.error_ratio = Some(e);
            }
            w
        };
        let a = pool(&[one(), one()]).advice().unwrap();
        let names: Vec<&str> = a.helps.iter().map(|c| c.policy.as_str()).collect();
        assert_eq!(names, ["ttl=20m"], "serve-stale lowers no backend call");
        assert_eq!(
            whatif_errors(&a).as_deref(),
            Some("serve-stale: errors 14.9% → 7.7% of requests; ttl=20m: → 12.0%")
        );
        // Without predicted errors (an older simulation) nothing is said of them.
        let a = pool(&[sim(
            1000,
            300,
            &[(0.70, 0.0), (0.60, 0.0), (0.70, 0.0), (0.80, 0.0)],
        )])
        .advice()
        .unwrap();
        assert_eq!(whatif_errors(&a), None);
    }

    #[test]
    fn a_simulation_that_does_not_match_the_cache_is_flagged() {
        // The simulation of the cache as configured predicts 25% hits; the cache served 60%.
        let w = sim(
            1000,
            600,
            &[(0.75, 0.0), (0.50, 0.0), (0.70, 0.0), (0.90, 0.0)],
        );
        let a = pool(&[w]).advice().unwrap();
        assert!((a.check_error.unwrap() + 0.35).abs() < 1e-12);
        let basis = whatif_basis(&a);
        assert!(basis.contains("not to be trusted"), "{basis}");
        assert!(basis.contains("-35.0 points"), "{basis}");
    }

    #[test]
    fn the_pool_starts_again_when_the_policies_change_and_ignores_other_groups() {
        let a = sim(1000, 0, &[(0.8, 0.0), (0.5, 0.0), (0.5, 0.0), (0.9, 0.0)]);
        let mut b = sim(3000, 0, &[(0.6, 0.0), (0.4, 0.0)]);
        b.policies.truncate(2);
        let p = pool(&[a.clone(), b]);
        assert_eq!((p.windows, p.requests), (1, 3000));
        let mut other = a.clone();
        other.groups[0].group = "not-db".to_owned();
        assert_eq!(pool(&[a, other]).windows, 1);
        assert_eq!(WhatIfPool::default().advice(), None);
    }

    #[test]
    fn it_turns_metastable_after_six_windows_at_normal_load() {
        let mut ws = normal(40);
        ws.extend(vec![
            W {
                hit: 0.5,
                err: 0.6,
                backend_ms: 200.0,
                ..NORMAL
            };
            9
        ]);
        let (hits, last) = run(CacheHitCollapseConfig::default(), &ws);
        assert_eq!(hits.len(), 7);
        let a = last.unwrap().annotations;
        assert_eq!(a["phase"], "metastable");
        assert!(a["description"].contains("will not end it"), "{a:?}");
        assert!(a["mitigations"].contains("admission control"), "{a:?}");
    }

    #[test]
    fn a_cold_cache_with_a_healthy_backend_does_not_fire() {
        let mut ws = normal(40);
        for hit in [0.0, 0.3, 0.6, 0.8, 0.9, 0.93, 0.95] {
            ws.push(W { hit, ..NORMAL });
        }
        ws.extend(normal(10));
        let (hits, _) = run(CacheHitCollapseConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_cold_cache_in_front_of_a_long_tailed_backend_does_not_fire() {
        // With more calls reaching the backend, the merged p99 climbs from the backend's 80th
        // to its 99th percentile (2.5x here) although the backend is unchanged; the backend's
        // own p99, from the misses' histogram, does not move.
        let wide = W {
            spread: WIDE,
            ..NORMAL
        };
        let mut ws = vec![wide; 40];
        for hit in [0.0, 0.3, 0.6, 0.8, 0.9, 0.93, 0.95] {
            ws.push(W { hit, ..wide });
        }
        ws.extend(vec![wide; 10]);
        let (hits, _) = run(CacheHitCollapseConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
        // Nor does it need the quantile-shift allowance, which only the merged p99 (a group
        // whose misses carry no latency) falls back on.
        let naive = CacheHitCollapseConfig {
            p99_tail_sigma: 0.0,
            ..CacheHitCollapseConfig::default()
        };
        let (hits, _) = run(naive, &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_slow_fill_loop_without_errors_fires_on_latency() {
        // The backend slows 10x without failing; slow fills leave entries empty.
        let wide = W {
            spread: WIDE,
            ..NORMAL
        };
        let mut ws = vec![wide; 40];
        ws.extend(vec![
            W {
                hit: 0.5,
                backend_ms: 200.0,
                ..wide
            };
            5
        ]);
        let (hits, last) = run(CacheHitCollapseConfig::default(), &ws);
        assert_eq!(hits, [43, 44, 45]);
        let a = last.unwrap().annotations;
        assert!(a["description"].contains("backend latency (p99"), "{a:?}");
        assert!(a["mitigations"].contains("shorten deadlines"), "{a:?}");
    }

    #[test]
    fn figures_measure_the_loop_and_locate_the_hot_shard_and_key() {
        let d = CacheHitCollapse::new(CacheHitCollapseConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let loop_window = W {
            hit: 0.5,
            err: 0.6,
            backend_ms: 200.0,
            hot: 3000,
            ..NORMAL
        };
        record(&mut w, loop_window);
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        let s = Signals::of(g);
        let b = Base {
            miss: 0.05,
            amp: 0.05,
            err: 0.001,
            p99: Some(40.0),
            miss_p99: Some(40.0),
            load: 400.0,
            backend: 0.05,
        };
        let cond = d.conditions(&s, &b);
        assert!(cond.all() && cond.errors, "{cond:?}");
        let st = GroupState {
            reported: 3,
            peak: 10.0,
            ..GroupState::default()
        };
        let fig = d.figures(g, &st, &s, &b, cond);
        // Half the requests miss against 5% at baseline: ten times the backend calls.
        assert!((fig.amplification().unwrap() - 10.0).abs() < 1e-9);
        assert!((fig.measured_amplification().unwrap() - 10.0).abs() < 1e-9);
        assert!(!fig.metastable && fig.shed_load && fig.shorten_deadlines);
        assert_eq!((fig.windows, fig.peak_amplification), (3, 10.0));
        // s1 takes 4000 of 7000 requests and 2000 of the 3500 backend calls.
        let hot = fig.hot.as_ref().unwrap();
        assert_eq!(hot.shard, "s1");
        assert!((hot.request_share - 4.0 / 7.0).abs() < 1e-9);
        assert!((hot.fair_multiple - 16.0 / 7.0).abs() < 1e-9);
        assert!((hot.backend_share - 4.0 / 7.0).abs() < 1e-9);
        let (key, share) = hot.key.as_ref().unwrap();
        assert_eq!(key, "");
        assert!((share - 0.75).abs() < 1e-9);

        let calm = GroupState {
            calm: CacheHitCollapseConfig::default().metastable_windows,
            ..st.clone()
        };
        assert!(d.figures(g, &calm, &s, &b, cond).metastable);
        let zero = Base { miss: 0.0, ..b };
        assert_eq!(d.figures(g, &st, &s, &zero, cond).amplification(), None);
    }

    #[test]
    fn the_quantile_shift_allowance_is_one_at_baseline_and_grows_with_the_backend_share() {
        assert!((quantile_shift(0.05, 0.05, 0.8) - 1.0).abs() < 1e-12);
        assert!((quantile_shift(0.02, 0.05, 0.8) - 1.0).abs() < 1e-12);
        // 80th -> 99th percentile of a lognormal with sigma 0.8: exp(0.8 x 1.484).
        let k = quantile_shift(1.0, 0.05, 0.8);
        assert!(
            (k - (0.8 * (2.326_348 - 0.841_621f64)).exp()).abs() < 1e-4,
            "{k}"
        );
        assert_eq!(quantile_shift(1.0, 0.05, 0.0), 1.0);
    }

    #[test]
    fn a_failing_backend_with_a_flat_miss_ratio_does_not_fire() {
        let mut ws = normal(40);
        ws.extend(vec![
            W {
                err: 0.8,
                backend_ms: 500.0,
                ..NORMAL
            };
            20
        ]);
        let (hits, _) = run(CacheHitCollapseConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_demand_surge_with_flat_amplification_does_not_fire() {
        // Three times the traffic, the backend struggles, but the hit ratio holds (hot keys get
        // hotter), so backend calls per request stay flat.
        let mut ws = normal(40);
        ws.extend(vec![
            W {
                requests: 12_000,
                hit: 0.96,
                err: 0.3,
                backend_ms: 300.0,
                ..NORMAL
            };
            20
        ]);
        let (hits, _) = run(CacheHitCollapseConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn two_windows_are_not_enough() {
        let bad = W {
            hit: 0.5,
            err: 0.6,
            ..NORMAL
        };
        let mut ws = normal(40);
        ws.extend([bad, bad, NORMAL, bad, bad, NORMAL]);
        let (hits, _) = run(CacheHitCollapseConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn no_verdict_during_warm_up() {
        let mut ws = normal(10);
        ws.extend(vec![
            W {
                hit: 0.5,
                err: 0.6,
                ..NORMAL
            };
            10
        ]);
        let (hits, _) = run(CacheHitCollapseConfig::default(), &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn a_lone_persistent_condition_is_learned_after_the_freeze_limit() {
        // A shorter TTL doubles the miss ratio for good; the backend is fine.
        let cfg = CacheHitCollapseConfig {
            freeze_limit_windows: 20,
            baseline_tau_secs: 100.0,
            ..CacheHitCollapseConfig::default()
        };
        let shifted = W {
            hit: 0.85,
            ..NORMAL
        };
        let mut ws = normal(40);
        ws.extend(vec![shifted; 60]);
        // Then a backend blip: with the shift learned, (a) and (b) no longer hold.
        ws.extend(vec![
            W {
                err: 0.5,
                ..shifted
            };
            5
        ]);
        let (hits, _) = run(cfg, &ws);
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn signals_follow_the_documented_definitions() {
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut o = ObservationRef::new("db", "s");
        o.cache = Some(CacheResult::Hit);
        o.count = 60;
        w.record(&o);
        o.cache = Some(CacheResult::Miss);
        o.count = 20;
        o.outcome = Outcome::Error;
        w.record(&o);
        // Requests without a cache result: requests, but not backend calls.
        o.cache = None;
        o.outcome = Outcome::Ok;
        o.count = 20;
        w.record(&o);
        let snap = w.close(10.0);
        let s = Signals::of(&snap.groups[0]);
        assert!((s.miss - 0.25).abs() < 1e-12);
        assert!((s.amp - 0.20).abs() < 1e-12);
        // 20 errors over the 40 requests that were not hits.
        assert!((s.err - 0.5).abs() < 1e-12);
    }

    #[test]
    fn the_latency_signal_is_the_backends_own_p99_when_misses_carry_latencies() {
        // 995 hits at 0.5 ms and 5 misses at 100 ms: the merged p99 is a hit's latency, the
        // backend's p99 is 100 ms.
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let mut o = ObservationRef::new("db", "s");
        o.cache = Some(CacheResult::Hit);
        o.count = 995;
        o.latency_ms = Some(0.5);
        w.record(&o);
        o.cache = Some(CacheResult::Miss);
        o.count = 5;
        o.latency_ms = Some(100.0);
        w.record(&o);
        let snap = w.close(10.0);
        let g = &snap.groups[0];
        assert!(
            g.traffic.latency.unwrap().p99_ms < 1.0,
            "{:?}",
            g.traffic.latency
        );
        let s = Signals::of(g);
        assert!(s.exact);
        assert!((s.p99.unwrap() - 100.0).abs() <= 1.0, "{:?}", s.p99);
        // Misses without a latency: the merged p99 stands in, marked as such.
        let mut w = Windows::new(WindowConfig::default(), 10.0);
        o.latency_ms = None;
        w.record(&o);
        o.cache = Some(CacheResult::Hit);
        o.latency_ms = Some(0.5);
        w.record(&o);
        let s = Signals::of(&w.close(20.0).groups[0]);
        assert!(!s.exact);
        assert!(s.p99.unwrap() < 1.0);
    }

    #[test]
    fn state_of_departed_groups_is_evicted() {
        let mut d = CacheHitCollapse::new(CacheHitCollapseConfig::default(), 10.0);
        let mut w = Windows::new(WindowConfig::default(), 0.0);
        let book = AlertBook::default();
        record(&mut w, NORMAL);
        let snap = w.close(10.0);
        for s in [&snap, &WindowSnapshot::empty(20.0)] {
            let ctx = Context {
                snapshot: s,
                alerts: &book,
                window_secs: 10.0,
            };
            d.evaluate(&ctx, &mut Vec::new());
        }
        assert!(d.groups.is_empty());
    }

    #[test]
    fn check_reports_every_bad_field() {
        let cfg = CacheHitCollapseConfig {
            min_requests: 0,
            min_cache_results: 0,
            miss_ratio_factor: 0.0,
            miss_ratio_min_increase: 2.0,
            amplification_factor: f64::NAN,
            p99_factor: 0.5,
            error_ratio_floor: -1.0,
            error_ratio_factor: 0.0,
            consecutive_windows: 0,
            baseline_tau_secs: 0.0,
            warmup_windows: 0,
            freeze_limit_windows: 0,
            metastable_load_factor: 0.5,
            metastable_windows: 0,
            dominant_key_share: 1.5,
            p99_tail_sigma: -1.0,
            ..CacheHitCollapseConfig::default()
        };
        let mut out = Vec::new();
        cfg.check(&mut Problems::new("d", &mut out));
        assert_eq!(out.len(), 16, "{out:?}");
        let mut out = Vec::new();
        CacheHitCollapseConfig::default().check(&mut Problems::new("d", &mut out));
        assert!(out.is_empty(), "{out:?}");
    }
}
