//! Skew statistics over one window of per-shard loads, and the noise floors that say how much
//! of that skew pure sampling noise explains.
//!
//! This is the `SkewStats` stage of the flow
//! (`Observation -> Window -> SkewStats -> Detectors`): a window hands over one count (or
//! other load) per shard, [`SkewStats::from_counts`] reduces it to the indices below, and the
//! detectors and the dashboard read them.
//!
//! Every index is computed from a sorted copy of the input, so it is bit-for-bit identical under
//! any permutation of the shards: replay and the live agent give the same numbers whatever order
//! the shards arrive in. Inputs must be finite and non-negative; a slice with a negative, NaN or
//! infinite load gets `None`, like an empty or all-zero slice.
//!
//! Noise floors model each shard's count as an independent Poisson(λ) variable, λ being the mean
//! count per shard in the window. They hold for *counts*; for other loads (bytes, CPU seconds)
//! the indices are still valid but the floors do not apply.

use serde::Serialize;

/// Fraction of the shards that [`SkewStats::topk_share`] covers: the top 10%, rounded up.
pub const TOP_FRACTION: f64 = 0.1;

/// Mean count per shard below which a window is marked [`SkewStats::insufficient_data`]: under
/// it, Poisson noise alone gives a corrected Gini near 0.18 and a CV near 0.32, so real skew and
/// noise cannot be told apart.
pub const MIN_MEAN_COUNT: f64 = 10.0;

/// Result of the Poisson dispersion test on one window of counts (see [`dispersion_test`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Dispersion {
    /// The index of dispersion D = (N−1)·s²/x̄ = Σ(x_i − x̄)²/x̄. Range [0, (N−1)·Σx]; about N−1
    /// when the counts are pure Poisson noise.
    pub statistic: f64,
    /// Degrees of freedom N−1 of the reference χ² distribution.
    pub df: usize,
    /// The χ²_{N−1} quantile at 1 − α (Wilson–Hilferty): the largest D that noise explains.
    pub critical: f64,
    /// `statistic > critical`: the spread between shards is beyond Poisson noise at level α.
    pub beyond_noise: bool,
}

/// All skew indices of one window of per-shard request counts, each next to its noise floor.
///
/// Built by [`SkewStats::from_counts`]. Field ranges assume N shards with a positive total.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkewStats {
    /// Number of shards N in the window, including shards with a count of zero.
    pub shards: usize,
    /// Sum of the counts.
    pub total: f64,
    /// Mean count per shard λ̄ = total/N, the λ of the noise floors.
    pub mean: f64,
    /// Bias-corrected Gini coefficient, see [`gini_corrected`]. 0 for a single shard.
    pub gini: f64,
    /// Expected corrected Gini of pure Poisson noise at [`Self::mean`], see [`gini_noise_floor`].
    pub gini_noise_floor: f64,
    /// Share of the busiest shard, in [1/N, 1].
    pub top1_share: f64,
    /// Number of shards in [`Self::topk_share`]: ⌈10% of N⌉, at least 1.
    pub topk: usize,
    /// Share of the [`Self::topk`] busiest shards, in [topk/N, 1].
    pub topk_share: f64,
    /// Peak-to-mean ratio max/mean, in [1, N], see [`peak_to_mean`].
    pub peak_to_mean: f64,
    /// Coefficient of variation, see [`coefficient_of_variation`].
    pub cv: f64,
    /// Expected CV of pure Poisson noise at [`Self::mean`], see [`cv_noise_floor`].
    pub cv_noise_floor: f64,
    /// CV with the Poisson noise removed, see [`cv_excess`].
    pub cv_excess: f64,
    /// Hoover index, see [`hoover`].
    pub hoover: f64,
    /// Poisson dispersion test, see [`dispersion_test`]; `None` for a single shard or an `alpha`
    /// outside (0, 1).
    pub dispersion: Option<Dispersion>,
    /// The mean count per shard is below [`MIN_MEAN_COUNT`]: noise dominates, so detectors
    /// should not act on this window alone and the window should be extended.
    pub insufficient_data: bool,
}

/// Loads validated and sorted ascending, with their sum.
struct Sorted {
    asc: Vec<f64>,
    sum: f64,
}

impl Sorted {
    /// Validates and sorts `loads`. `None` if the slice is empty, holds a negative or non-finite
    /// value, or sums to zero (or overflows).
    fn new(loads: &[f64]) -> Option<Self> {
        if loads.is_empty() || loads.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return None;
        }
        let mut asc = loads.to_vec();
        asc.sort_unstable_by(f64::total_cmp);
        // Summing ascending loses the least precision and does not depend on input order.
        let sum: f64 = asc.iter().sum();
        (sum > 0.0 && sum.is_finite()).then_some(Self { asc, sum })
    }

    fn n(&self) -> f64 {
        self.asc.len() as f64
    }

    fn mean(&self) -> f64 {
        self.sum / self.n()
    }

    /// Corrected Gini; 0 for a single shard.
    fn gini(&self) -> f64 {
        let n = self.asc.len();
        if n < 2 {
            return 0.0;
        }
        // Σ_i (2i−N−1)·x_(i) with 1-based i, folded into pairs (i, N+1−i):
        // Σ_{i≤N/2} (N+1−2i)·(x_(N+1−i) − x_(i)). Every term is ≥ 0, and the sum is exactly 0
        // for equal loads and exactly (N−1)·x for a one-hot vector, so the known vectors come
        // out exact instead of off by rounding.
        let acc: f64 = (0..n / 2)
            .map(|j| (n - 1 - 2 * j) as f64 * (self.asc[n - 1 - j] - self.asc[j]))
            .sum();
        // G·N/(N−1) = acc / ((N−1)·Σx).
        (acc / ((n - 1) as f64 * self.sum)).clamp(0.0, 1.0)
    }

    /// Share of the `k` largest loads.
    fn top_k_share(&self, k: usize) -> f64 {
        let n = self.asc.len();
        if k == 0 {
            return 0.0;
        }
        if k >= n {
            return 1.0;
        }
        let top: f64 = self.asc[n - k..].iter().sum();
        (top / self.sum).clamp(0.0, 1.0)
    }

    fn peak_to_mean(&self) -> f64 {
        let n = self.n();
        let max = self.asc[self.asc.len() - 1];
        // max/sum·N rather than max/(sum/N): a one-hot vector gives exactly N.
        (max / self.sum * n).clamp(1.0, n)
    }

    fn coefficient_of_variation(&self) -> f64 {
        let mean = self.mean();
        let var = self.asc.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / self.n();
        (var.sqrt() / mean).clamp(0.0, (self.n() - 1.0).sqrt())
    }

    fn hoover(&self) -> f64 {
        let mean = self.mean();
        let dev: f64 = self.asc.iter().map(|x| (x - mean).abs()).sum();
        (0.5 * dev / self.sum).clamp(0.0, 1.0)
    }

    fn dispersion(&self, alpha: f64) -> Option<Dispersion> {
        let n = self.asc.len();
        if n < 2 || !(alpha > 0.0 && alpha < 1.0) {
            return None;
        }
        let mean = self.mean();
        let statistic = self.asc.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / mean;
        let df = n - 1;
        let critical = chi_square_quantile(df as f64, 1.0 - alpha);
        Some(Dispersion {
            statistic,
            df,
            critical,
            beyond_noise: statistic > critical,
        })
    }
}

impl SkewStats {
    /// Computes every index for one window of request counts per shard, with
    /// significance level `alpha` (for example 1e-3) for the dispersion test.
    ///
    /// `None` if there is no shard, the total is zero, or a count is negative or not finite.
    /// A single shard gives Gini 0, shares 1, peak-to-mean 1, CV 0, Hoover 0 and no dispersion
    /// test. The noise floors treat `counts` as event counts (see the module docs).
    pub fn from_counts(counts: &[f64], alpha: f64) -> Option<SkewStats> {
        let sorted = Sorted::new(counts)?;
        let shards = counts.len();
        let mean = sorted.mean();
        let topk = top_k_for_fraction(shards, TOP_FRACTION);
        let cv = sorted.coefficient_of_variation();
        Some(SkewStats {
            shards,
            total: sorted.sum,
            mean,
            gini: sorted.gini(),
            // mean > 0 here, so the floors exist.
            gini_noise_floor: gini_noise_floor(mean).unwrap_or(1.0),
            top1_share: sorted.top_k_share(1),
            topk,
            topk_share: sorted.top_k_share(topk),
            peak_to_mean: sorted.peak_to_mean(),
            cv,
            cv_noise_floor: cv_noise_floor(mean).unwrap_or(f64::INFINITY),
            cv_excess: cv_excess(cv, mean),
            hoover: sorted.hoover(),
            dispersion: sorted.dispersion(alpha),
            insufficient_data: mean < MIN_MEAN_COUNT,
        })
    }
}

/// Bias-corrected Gini coefficient G_c = G·N/(N−1) of per-shard loads.
///
/// - Definition: with loads sorted ascending x_(1) ≤ … ≤ x_(N),
///   G = Σ_i (2i−N−1)·x_(i) / (N·Σx), and G_c = G·N/(N−1). Computed exactly in O(N log N).
/// - Range: [0, 1]. Equal loads give exactly 0; one shard carrying everything gives exactly 1
///   (the correction makes this hold for every N, where the plain Gini tops out at 1−1/N).
/// - Error: floating-point rounding only (relative ~N·2⁻⁵³); the result is clamped to [0, 1].
/// - Noise: pure Poisson counts with mean λ give about [`gini_noise_floor`]`(λ)` = 1/√(πλ).
/// - Degenerate: `None` for n = 0, n = 1 (one shard cannot be unequal; callers that need a
///   number use 0), all zeros, or any negative or non-finite load.
pub fn gini_corrected(loads: &[f64]) -> Option<f64> {
    let sorted = Sorted::new(loads)?;
    (sorted.asc.len() >= 2).then(|| sorted.gini())
}

/// Share of the total load carried by the `k` busiest shards.
///
/// - Definition: Σ of the k largest x_i divided by Σx.
/// - Range: [min(k, N)/N, 1]. `k >= N` gives exactly 1, `k == 0` gives 0, and a one-hot
///   vector gives exactly 1 for every k ≥ 1.
/// - Error: floating-point rounding only; clamped to [0, 1].
/// - Degenerate: `None` for n = 0, all zeros, or any negative or non-finite load. n = 1 gives
///   1 for k ≥ 1.
pub fn top_k_share(loads: &[f64], k: usize) -> Option<f64> {
    Sorted::new(loads).map(|sorted| sorted.top_k_share(k))
}

/// Number of shards in the top `fraction` of `n` shards: ⌈fraction·n⌉, clamped to [1, max(n, 1)].
///
/// Two ulps of slack absorb the rounding of decimal fractions, so 10% of 30 shards is 3, not 4
/// (0.1·30 is 3.0000000000000004 in floating point). A NaN or non-positive `fraction` gives 1.
pub fn top_k_for_fraction(n: usize, fraction: f64) -> usize {
    let x = fraction * n as f64 * (1.0 - 4.0 * f64::EPSILON);
    if x.is_nan() {
        return 1;
    }
    // `as usize` saturates, so a huge fraction cannot overflow.
    (x.ceil().max(0.0) as usize).clamp(1, n.max(1))
}

/// Peak-to-mean ratio (PAR) of per-shard loads: how many times the mean the busiest shard
/// carries. It maps directly to "which shard saturates first".
///
/// - Definition: max_i x_i / x̄ = N·max_i s_i, with shares s_i = x_i/Σx.
/// - Range: [1, N]. Equal loads give 1 (up to rounding, clamped); one-hot gives exactly N.
/// - Noise: for Poisson counts with mean λ ≥ 100, its p99.9 is about 1 + z/√λ with
///   z = [`hot_shard_z_threshold`]`(N, 1e-3)`.
/// - Degenerate: `None` for n = 0, all zeros, or any negative or non-finite load; n = 1 gives 1.
pub fn peak_to_mean(loads: &[f64]) -> Option<f64> {
    Sorted::new(loads).map(|sorted| sorted.peak_to_mean())
}

/// Coefficient of variation (CV) of per-shard loads.
///
/// - Definition: population standard deviation √(Σ(x_i − x̄)²/N) divided by the mean x̄.
/// - Range: [0, √(N−1)]. Equal loads give 0 (up to rounding of the mean); one-hot gives √(N−1).
/// - Noise: Poisson counts with mean λ give about [`cv_noise_floor`]`(λ)` = 1/√λ; see
///   [`cv_excess`] for the debiased value.
/// - Error: two-pass computation, relative rounding error ~N·2⁻⁵³.
/// - Degenerate: `None` for n = 0, all zeros, or any negative or non-finite load; n = 1 gives 0.
pub fn coefficient_of_variation(loads: &[f64]) -> Option<f64> {
    Sorted::new(loads).map(|sorted| sorted.coefficient_of_variation())
}

/// Hoover index: the fraction of the total load that would have to move to equalise the shards
/// ("how much to re-home").
///
/// - Definition: ½·Σ_i |s_i − 1/N| with shares s_i = x_i/Σx, computed as ½·Σ|x_i − x̄| / Σx.
/// - Range: [0, 1 − 1/N]. Equal loads give 0 (up to rounding of the mean); one-hot gives 1 − 1/N.
/// - Error: floating-point rounding only; clamped to [0, 1].
/// - Degenerate: `None` for n = 0, all zeros, or any negative or non-finite load; n = 1 gives 0.
pub fn hoover(loads: &[f64]) -> Option<f64> {
    Sorted::new(loads).map(|sorted| sorted.hoover())
}

/// Expected bias-corrected Gini ([`gini_corrected`]) of pure Poisson noise: shards with
/// independent Poisson(λ) counts and no real skew.
///
/// - Definition: 1/√(πλ), with λ = `mean_count`, the mean count per shard in the window. It does
///   not depend on N once the Gini is bias-corrected.
/// - Range: (0, 1]; clamped to 1 for λ < 1/π, where the formula exceeds the Gini's range.
/// - Error: matches simulation within 2% for λ ≥ 100 (0.0564 at λ = 100, simulated 0.056 at
///   N = 64); at λ = 10 it gives 0.178, also the simulated value. The spread around it is about
///   0.72·floor/√N for N ≥ 64, right-skewed for N < 16.
/// - Degenerate: `None` for λ ≤ 0 or non-finite λ (no traffic, no noise model).
pub fn gini_noise_floor(mean_count: f64) -> Option<f64> {
    (mean_count > 0.0 && mean_count.is_finite())
        .then(|| (1.0 / (std::f64::consts::PI * mean_count).sqrt()).min(1.0))
}

/// Expected coefficient of variation ([`coefficient_of_variation`]) of pure Poisson noise.
///
/// - Definition: 1/√λ, with λ = `mean_count`, the mean count per shard in the window.
/// - Range: (0, ∞).
/// - Error: exact for the variance (a Poisson variable has variance λ); the mean of the sample
///   CV is about 0.4% lower at N = 64, λ = 100 (simulated 0.0996 against 0.1).
/// - Degenerate: `None` for λ ≤ 0 or non-finite λ.
pub fn cv_noise_floor(mean_count: f64) -> Option<f64> {
    (mean_count > 0.0 && mean_count.is_finite()).then(|| 1.0 / mean_count.sqrt())
}

/// Coefficient of variation with the Poisson sampling noise removed: the skew the traffic
/// would show with infinitely many events.
///
/// - Definition: √max(0, CV² − 1/λ), λ = `mean_count`. Variances add, so CV² ≈ N/K_eff + 1/λ
///   for a key population with effective key count K_eff, and this estimates √(N/K_eff).
/// - Range: [0, |cv|]. 0 whenever the observed CV is within the noise floor.
/// - Error: inherits the sampling error of `cv`; it is biased up slightly near the floor because
///   of the clamp at 0.
/// - Degenerate: λ ≤ 0 or NaN (no traffic) gives 0; λ = ∞ gives |cv|; a NaN `cv` gives 0.
pub fn cv_excess(cv: f64, mean_count: f64) -> f64 {
    if mean_count.is_nan() || mean_count <= 0.0 {
        return 0.0;
    }
    // (|cv| − f)(|cv| + f) rather than cv² − 1/λ: a CV exactly at the floor gives exactly 0.
    let floor = 1.0 / mean_count.sqrt();
    let cv = cv.abs();
    ((cv - floor) * (cv + floor)).max(0.0).sqrt()
}

/// Inverse of the standard normal CDF, Φ⁻¹(p).
///
/// Wichura's algorithm AS241 (PPND16, *Applied Statistics* 37(3), 1988), the same one Python's
/// `statistics.NormalDist.inv_cdf` uses. Relative error below 1e-15 over (0, 1); the tails
/// are computed from min(p, 1−p), so tiny tail probabilities keep full precision when passed
/// as p (use −Φ⁻¹(α) rather than Φ⁻¹(1−α) for tiny α).
///
/// Degenerate: `p == 0` gives −∞, `p == 1` gives +∞; p outside [0, 1] or NaN gives NaN.
pub fn normal_quantile(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        let r = 0.180625 - q * q;
        return q * horner(&AS241_A, r) / horner(&AS241_B, r);
    }
    let tail = if q < 0.0 { p } else { 1.0 - p };
    let r = (-tail.ln()).sqrt();
    let x = if r <= 5.0 {
        horner(&AS241_C, r - 1.6) / horner(&AS241_D, r - 1.6)
    } else {
        horner(&AS241_E, r - 5.0) / horner(&AS241_F, r - 5.0)
    };
    if q < 0.0 { -x } else { x }
}

/// Evaluates the polynomial with coefficients `c` (constant term first) at `x`.
fn horner(c: &[f64; 8], x: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &k| acc * x + k)
}

// AS241 (PPND16) coefficients, constant term first, digit for digit as published so they can be
// checked against the paper. Central region |p − 0.5| ≤ 0.425, in r = 0.180625 − q².
#[allow(clippy::excessive_precision, reason = "published AS241 digits")]
const AS241_A: [f64; 8] = [
    3.3871328727963666080e0,
    1.3314166789178437745e2,
    1.9715909503065514427e3,
    1.3731693765509461125e4,
    4.5921953931549871457e4,
    6.7265770927008700853e4,
    3.3430575583588128105e4,
    2.5090809287301226727e3,
];
#[allow(clippy::excessive_precision, reason = "published AS241 digits")]
const AS241_B: [f64; 8] = [
    1.0,
    4.2313330701600911252e1,
    6.8718700749205790830e2,
    5.3941960214247511077e3,
    2.1213794301586595867e4,
    3.9307895800092710610e4,
    2.8729085735721942674e4,
    5.2264952788528545610e3,
];
// Intermediate tail, r = √(−ln(min(p, 1−p))) ≤ 5, in r − 1.6.
#[allow(clippy::excessive_precision, reason = "published AS241 digits")]
const AS241_C: [f64; 8] = [
    1.42343711074968357734e0,
    4.63033784615654529590e0,
    5.76949722146069140550e0,
    3.64784832476320460504e0,
    1.27045825245236838258e0,
    2.41780725177450611770e-1,
    2.27238449892691845833e-2,
    7.74545014278341407640e-4,
];
#[allow(clippy::excessive_precision, reason = "published AS241 digits")]
const AS241_D: [f64; 8] = [
    1.0,
    2.05319162663775882187e0,
    1.67638483018380384940e0,
    6.89767334985100004550e-1,
    1.48103976427480074590e-1,
    1.51986665636164571966e-2,
    5.47593808499534494600e-4,
    1.05075007164441684324e-9,
];
// Far tail, r > 5 (p < about 1.4e-11), in r − 5.
#[allow(clippy::excessive_precision, reason = "published AS241 digits")]
const AS241_E: [f64; 8] = [
    6.65790464350110377720e0,
    5.46378491116411436990e0,
    1.78482653991729133580e0,
    2.96560571828504891230e-1,
    2.65321895265761230930e-2,
    1.24266094738807843860e-3,
    2.71155556874348757815e-5,
    2.01033439929228813265e-7,
];
#[allow(clippy::excessive_precision, reason = "published AS241 digits")]
const AS241_F: [f64; 8] = [
    1.0,
    5.99832206555887937690e-1,
    1.36929880922735805310e-1,
    1.48753612908506148525e-2,
    7.86869131145613259100e-4,
    1.84631831751005468180e-5,
    1.42151175831644588870e-7,
    2.04426310338993978564e-15,
];

/// Quantile of the χ² distribution with `df` degrees of freedom at probability `p`, by the
/// Wilson–Hilferty approximation: df·(1 − 2/(9df) + z·√(2/(9df)))³ with z = Φ⁻¹(p).
///
/// - Range: [0, ∞); clamped at 0 where the cube goes negative (tiny df, tiny p).
/// - Error (against the exact quantile): 0.07% at df = 63, p = 0.999 (103.51 vs 103.44); under
///   1% for df ≥ 10 and 0.5 ≤ p ≤ 0.999; 6.5% at df = 10, p = 0.001; 3.4% at df = 1, p = 0.5.
///   Good for the upper-tail dispersion gate it serves, not for the far lower tail or df < 5.
/// - Degenerate: NaN for df ≤ 0, non-finite df, or p outside [0, 1]; p = 0 gives 0 and p = 1
///   gives +∞.
pub fn chi_square_quantile(df: f64, p: f64) -> f64 {
    if !(df > 0.0 && df.is_finite() && (0.0..=1.0).contains(&p)) {
        return f64::NAN;
    }
    let z = normal_quantile(p);
    let h = 2.0 / (9.0 * df);
    let base = 1.0 - h + z * h.sqrt();
    (df * base.powi(3)).max(0.0)
}

/// Poisson dispersion test: is the spread of counts across shards larger than Poisson noise
/// explains? The gate for "skew beyond noise".
///
/// - Definition: D = (N−1)·s²/x̄ = Σ(x_i − x̄)²/x̄, with sample variance s². Under the null
///   hypothesis (independent Poisson counts with a common mean) D ~ χ²_{N−1}, so the window is
///   [`Dispersion::beyond_noise`] when D exceeds the χ²_{N−1} quantile at 1 − α.
/// - Range: D in [0, (N−1)·Σx]; 0 for equal counts, (N−1)·Σx for one-hot. Unlike the other
///   indices it is not scale invariant: it needs raw counts, not rates or normalised loads.
/// - Error: the false-positive rate is α up to the Wilson–Hilferty error of the critical value
///   (simulated 0.1% at N = 64, λ = 100, α = 1e-3) and up to how well counts follow Poisson.
///   Bursty traffic is over-dispersed even without skew, so it trips this gate more often.
/// - Degenerate: `None` for n < 2, all zeros, any negative or non-finite count, or `alpha`
///   outside (0, 1).
pub fn dispersion_test(counts: &[f64], alpha: f64) -> Option<Dispersion> {
    Sorted::new(counts)?.dispersion(alpha)
}

/// The z-score a single shard must exceed to be "hot" at family-wise false-positive rate
/// `alpha` over `n` shards: Φ⁻¹(1 − α/N) (Bonferroni).
///
/// A shard with Poisson(λ) count is hot when its count exceeds λ + z·√λ, i.e. its load ratio
/// exceeds 1 + z/√λ. Values: 3.84, 4.16 and 4.76 for N = 16, 64 and 1024 at α = 1e-3.
/// Computed as −Φ⁻¹(α/N), which keeps full precision for tiny α/N.
///
/// Degenerate: `n == 0` is treated as 1; NaN for `alpha` outside (0, 1].
pub fn hot_shard_z_threshold(n: usize, alpha: f64) -> f64 {
    if !(alpha > 0.0 && alpha <= 1.0) {
        return f64::NAN;
    }
    -normal_quantile(alpha / n.max(1) as f64)
}

/// The largest top-1 share that Poisson noise explains among `shards` shards with `mean`
/// requests each: the top-1 counterpart of [`gini_noise_floor`] and [`cv_noise_floor`].
///
/// - Definition: (1/N)·(1 + z/√λ), with z = [`hot_shard_z_threshold`]`(N, alpha)`, the
///   Bonferroni threshold of the hot-shard test, and λ = `mean`.
/// - Range: (1/N, 1]; capped at 1 where the formula exceeds a share's range.
/// - Error: inherits the normal approximation of the Poisson tail, good for λ ≥ 100 (see
///   [`peak_to_mean`], whose noise bound this is divided by N).
/// - Degenerate: `None` without shards, without traffic (λ ≤ 0) or for non-finite λ, and when
///   `alpha` gives no threshold (outside (0, 1]).
pub fn top1_noise_floor(shards: usize, mean: f64, alpha: f64) -> Option<f64> {
    if shards == 0 || mean <= 0.0 || !mean.is_finite() {
        return None;
    }
    let z = hot_shard_z_threshold(shards, alpha);
    let floor = (1.0 + z / mean.sqrt()) / shards as f64;
    floor.is_finite().then(|| floor.min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prng::{SplitMix64, mix};
    use proptest::prelude::*;

    /// Poisson(λ) by inversion over a precomputed CDF table: one uniform per sample.
    struct Poisson {
        cdf: Vec<f64>,
    }

    impl Poisson {
        fn new(lambda: f64) -> Self {
            let last = (lambda + 12.0 * lambda.sqrt() + 20.0) as usize;
            let mut pmf = (-lambda).exp();
            let mut acc = 0.0;
            let mut cdf = Vec::with_capacity(last + 1);
            for k in 0..=last {
                if k > 0 {
                    pmf *= lambda / k as f64;
                }
                acc += pmf;
                cdf.push(acc);
            }
            Self { cdf }
        }

        fn sample(&self, rng: &mut SplitMix64) -> f64 {
            let u = rng.next_f64();
            self.cdf.partition_point(|&c| c <= u) as f64
        }
    }

    fn assert_close(actual: f64, expected: f64, rel: f64) {
        assert!(
            ((actual - expected) / expected).abs() <= rel,
            "{actual} is not within {rel} (relative) of {expected}"
        );
    }

    /// Loads with many exact zeros, as real windows have idle shards.
    fn loads() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(prop_oneof![1 => Just(0.0), 3 => 0.0f64..1e6], 0..80)
    }

    /// A load vector and a shuffled copy of it.
    fn loads_and_permutation() -> impl Strategy<Value = (Vec<f64>, Vec<f64>)> {
        loads().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
    }

    /// Every statistic of one vector, for comparing vectors wholesale.
    fn all_statistics(loads: &[f64]) -> Vec<Option<f64>> {
        vec![
            gini_corrected(loads),
            top_k_share(loads, 1),
            top_k_share(loads, 3),
            peak_to_mean(loads),
            coefficient_of_variation(loads),
            hoover(loads),
            dispersion_test(loads, 1e-3).map(|d| d.statistic),
        ]
    }

    fn close_or_both_none(a: Option<f64>, b: Option<f64>, tol: f64) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0),
            (None, None) => true,
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn every_statistic_stays_in_its_range(loads in loads()) {
            let n = loads.len() as f64;
            if let Some(g) = gini_corrected(&loads) {
                prop_assert!((0.0..=1.0).contains(&g), "gini {g}");
            }
            for k in [0, 1, 2, 5, 100] {
                if let Some(s) = top_k_share(&loads, k) {
                    let lower = (k as f64).min(n) / n;
                    prop_assert!(
                        (0.0..=1.0).contains(&s) && s >= lower * (1.0 - 1e-12),
                        "top-{k} share {s} below {lower}"
                    );
                }
            }
            if let Some(par) = peak_to_mean(&loads) {
                prop_assert!(par >= 1.0 && par <= n, "peak_to_mean {par}");
            }
            if let Some(cv) = coefficient_of_variation(&loads) {
                prop_assert!(cv >= 0.0 && cv <= (n - 1.0).sqrt(), "cv {cv}");
            }
            if let Some(h) = hoover(&loads) {
                prop_assert!(h >= 0.0 && h <= 1.0 - 1.0 / n + 1e-12, "hoover {h}");
            }
            if let Some(d) = dispersion_test(&loads, 1e-3) {
                let sum: f64 = loads.iter().sum();
                prop_assert!(d.statistic >= 0.0 && d.statistic <= (n - 1.0) * sum * (1.0 + 1e-12));
                prop_assert_eq!(d.df, loads.len() - 1);
                prop_assert_eq!(d.beyond_noise, d.statistic > d.critical);
            }
        }

        #[test]
        fn every_statistic_is_exactly_invariant_under_shard_permutation(
            (loads, shuffled) in loads_and_permutation()
        ) {
            prop_assert_eq!(all_statistics(&loads), all_statistics(&shuffled));
            prop_assert_eq!(
                SkewStats::from_counts(&loads, 1e-3),
                SkewStats::from_counts(&shuffled, 1e-3)
            );
        }

        #[test]
        fn every_statistic_is_invariant_under_scaling(loads in loads(), c in 1e-3f64..1e3) {
            let scaled: Vec<f64> = loads.iter().map(|x| x * c).collect();
            let (mut before, mut after) = (all_statistics(&loads), all_statistics(&scaled));
            // D is tied to counts: it scales with them instead of staying put.
            let (d, d_scaled) = (before.pop().unwrap(), after.pop().unwrap());
            prop_assert!(close_or_both_none(d.map(|d| d * c), d_scaled, 1e-9));
            for (a, b) in before.into_iter().zip(after) {
                prop_assert!(close_or_both_none(a, b, 1e-9), "{a:?} vs {b:?}");
            }
        }

        #[test]
        fn inequality_grows_when_load_moves_to_the_busiest_shard(loads in loads(), frac in 0.01f64..1.0) {
            // Moving load from the idlest to the busiest shard is a regressive transfer: every
            // inequality index must not decrease.
            prop_assume!(loads.len() >= 2);
            let mut moved = loads.clone();
            let (min_i, max_i) = (argmin(&moved), argmax(&moved));
            prop_assume!(min_i != max_i);
            let amount = moved[min_i] * frac;
            moved[min_i] -= amount;
            moved[max_i] += amount;
            if let (Some(a), Some(b)) = (gini_corrected(&loads), gini_corrected(&moved)) {
                prop_assert!(b >= a - 1e-12, "gini fell from {a} to {b}");
                let (ha, hb) = (hoover(&loads).unwrap(), hoover(&moved).unwrap());
                prop_assert!(hb >= ha - 1e-12, "hoover fell from {ha} to {hb}");
            }
        }

        #[test]
        fn gini_matches_the_mean_absolute_difference_definition(loads in loads()) {
            // G = Σ_i Σ_j |x_i − x_j| / (2N²x̄), an independent O(N²) definition.
            if let Some(g) = gini_corrected(&loads) {
                let n = loads.len() as f64;
                let sum: f64 = loads.iter().sum();
                let mad: f64 = loads
                    .iter()
                    .flat_map(|a| loads.iter().map(move |b| (a - b).abs()))
                    .sum();
                let expected = mad / (2.0 * n * sum) * n / (n - 1.0);
                prop_assert!((g - expected).abs() <= 1e-9, "{g} vs {expected}");
            }
        }

        #[test]
        fn noise_floors_are_bounded_and_monotone(
            lambda in 1e-3f64..1e6,
            factor in 1.0f64..100.0,
            cv in 0.0f64..10.0,
        ) {
            let (g, g_more) = (gini_noise_floor(lambda).unwrap(), gini_noise_floor(lambda * factor).unwrap());
            prop_assert!(g > 0.0 && g <= 1.0 && g_more <= g);
            let (c, c_more) = (cv_noise_floor(lambda).unwrap(), cv_noise_floor(lambda * factor).unwrap());
            prop_assert!(c > 0.0 && c_more <= c);
            let excess = cv_excess(cv, lambda);
            prop_assert!((0.0..=cv).contains(&excess));
            prop_assert!(cv_excess(cv * factor, lambda) >= excess);
            prop_assert_eq!(excess == 0.0, cv <= c);
        }

        #[test]
        fn chi_square_quantile_is_increasing_and_near_its_mean(df in 1usize..5000, p in 0.001f64..0.998) {
            let df = df as f64;
            let (lo, hi) = (chi_square_quantile(df, p), chi_square_quantile(df, p + 0.001));
            // Increasing, except where both are clamped at 0: the documented lower tail of
            // small df (df = 1 below p ≈ 0.05), which a random draw reaches now and then.
            prop_assert!(hi > lo || (hi == 0.0 && lo == 0.0), "df {df}, p {p}: {lo} then {hi}");
            prop_assert!(lo >= 0.0);
            // The median of χ²_df is close to df (within 1 for df ≥ 1).
            prop_assert!((chi_square_quantile(df, 0.5) - df).abs() < 1.0);
        }

        #[test]
        fn top_k_for_fraction_is_the_ceiling(n in 0usize..100_000, percent in 1u32..=100) {
            let k = top_k_for_fraction(n, f64::from(percent) / 100.0);
            let exact = (n * percent as usize).div_ceil(100).clamp(1, n.max(1));
            prop_assert_eq!(k, exact);
        }

        #[test]
        fn normal_quantile_is_odd_and_increasing(m in 1u64..(1 << 39), dm in 1u64..(1 << 30)) {
            // p = m/2⁴⁰ keeps 1 − p exact, so oddness can be checked to the last bits.
            let scale = (1u64 << 40) as f64;
            let p = m as f64 / scale;
            let (lo, hi) = (normal_quantile(p), normal_quantile(1.0 - p));
            prop_assert!((lo + hi).abs() <= 1e-15 * hi.abs().max(1.0), "not odd at {p}: {lo} {hi}");
            let q = ((m + dm).min(1 << 39)) as f64 / scale;
            prop_assert!(normal_quantile(q) >= lo, "not increasing between {p} and {q}");
        }
    }

    fn argmin(v: &[f64]) -> usize {
        (0..v.len()).min_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap()
    }

    fn argmax(v: &[f64]) -> usize {
        (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap()
    }

    #[test]
    fn known_vectors_give_exact_values() {
        for n in [2usize, 3, 7, 64, 1000] {
            let nf = n as f64;
            for c in [1.0, 0.1, 3.7, 1e9] {
                let uniform = vec![c; n];
                assert_eq!(gini_corrected(&uniform), Some(0.0), "uniform n={n} c={c}");
                let mut one_hot = vec![0.0; n];
                one_hot[n / 2] = c;
                assert_eq!(gini_corrected(&one_hot), Some(1.0), "one-hot n={n} c={c}");
                assert_eq!(top_k_share(&one_hot, 1), Some(1.0));
                assert_eq!(peak_to_mean(&one_hot), Some(nf));
                assert_close(
                    coefficient_of_variation(&one_hot).unwrap(),
                    (nf - 1.0).sqrt(),
                    1e-12,
                );
                assert_close(hoover(&one_hot).unwrap(), 1.0 - 1.0 / nf, 1e-12);
                assert_close(peak_to_mean(&uniform).unwrap(), 1.0, 1e-12);
                assert!(coefficient_of_variation(&uniform).unwrap() < 1e-12);
                assert!(hoover(&uniform).unwrap() < 1e-12);
                assert_close(top_k_share(&uniform, 1).unwrap(), 1.0 / nf, 1e-12);
            }
        }
        // Hand-computed: sorted [1, 2, 3, 4], Σ(2i−N−1)x = −3−2+3+12 = 10, G = 10/(4·10) = 0.25,
        // G_c = 1/3. Shares [.1,.2,.3,.4]: Hoover = ½(.15+.05+.05+.15) = 0.2.
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_close(gini_corrected(&v).unwrap(), 1.0 / 3.0, 1e-15);
        assert_close(top_k_share(&v, 2).unwrap(), 0.7, 1e-15);
        assert_close(peak_to_mean(&v).unwrap(), 1.6, 1e-15);
        assert_close(hoover(&v).unwrap(), 0.2, 1e-15);
        assert_close(
            coefficient_of_variation(&v).unwrap(),
            1.25f64.sqrt() / 2.5,
            1e-15,
        );
        let d = dispersion_test(&v, 0.05).unwrap();
        assert_close(d.statistic, 5.0 / 2.5, 1e-15);
        assert_eq!(d.df, 3);
    }

    #[test]
    fn degenerate_inputs_give_none_or_documented_values() {
        let bad: [&[f64]; 6] = [
            &[],
            &[0.0, 0.0, 0.0],
            &[1.0, -1.0, 2.0],
            &[1.0, f64::NAN],
            &[1.0, f64::INFINITY],
            &[f64::MAX, f64::MAX],
        ];
        for loads in bad {
            assert_eq!(all_statistics(loads), vec![None; 7], "{loads:?}");
            assert_eq!(SkewStats::from_counts(loads, 1e-3), None, "{loads:?}");
        }
        // One shard: no Gini or dispersion, everything else trivially "equal".
        let single = [5.0];
        assert_eq!(gini_corrected(&single), None);
        assert_eq!(dispersion_test(&single, 1e-3), None);
        assert_eq!(top_k_share(&single, 1), Some(1.0));
        assert_eq!(peak_to_mean(&single), Some(1.0));
        assert_eq!(coefficient_of_variation(&single), Some(0.0));
        assert_eq!(hoover(&single), Some(0.0));
        let stats = SkewStats::from_counts(&single, 1e-3).unwrap();
        assert_eq!((stats.gini, stats.topk, stats.dispersion), (0.0, 1, None));
        assert!(stats.insufficient_data);
        // k at the edges.
        assert_eq!(top_k_share(&[1.0, 2.0], 0), Some(0.0));
        assert_eq!(top_k_share(&[1.0, 2.0], 2), Some(1.0));
        assert_eq!(top_k_share(&[1.0, 2.0], usize::MAX), Some(1.0));
        assert_eq!(top_k_share(&[0.0, 0.0], 1), None);
        // Alpha outside (0, 1).
        assert_eq!(dispersion_test(&[1.0, 2.0], 0.0), None);
        assert_eq!(dispersion_test(&[1.0, 2.0], 1.0), None);
        assert_eq!(dispersion_test(&[1.0, 2.0], f64::NAN), None);
    }

    #[test]
    fn top_k_for_fraction_edges() {
        assert_eq!(top_k_for_fraction(64, 0.1), 7);
        assert_eq!(top_k_for_fraction(30, 0.1), 3);
        assert_eq!(top_k_for_fraction(10, 0.1), 1);
        assert_eq!(top_k_for_fraction(5, 0.1), 1);
        assert_eq!(top_k_for_fraction(0, 0.1), 1);
        assert_eq!(top_k_for_fraction(8, 0.0), 1);
        assert_eq!(top_k_for_fraction(8, -1.0), 1);
        assert_eq!(top_k_for_fraction(8, f64::NAN), 1);
        assert_eq!(top_k_for_fraction(8, 5.0), 8);
        assert_eq!(top_k_for_fraction(8, f64::INFINITY), 8);
    }

    #[test]
    fn noise_floors_match_the_formulas_and_reject_no_traffic() {
        assert_close(gini_noise_floor(100.0).unwrap(), 0.056_419, 1e-4);
        assert_close(gini_noise_floor(10.0).unwrap(), 0.178, 3e-3);
        assert_close(gini_noise_floor(1e4).unwrap(), 0.0056, 1e-2);
        assert_eq!(gini_noise_floor(0.01), Some(1.0));
        assert_close(cv_noise_floor(100.0).unwrap(), 0.1, 1e-15);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(gini_noise_floor(bad), None);
            assert_eq!(cv_noise_floor(bad), None);
        }
        assert_eq!(cv_excess(0.1, 100.0), 0.0);
        assert_eq!(cv_excess(0.05, 100.0), 0.0);
        assert_close(cv_excess(0.5, 100.0), (0.25f64 - 0.01).sqrt(), 1e-15);
        assert_eq!(cv_excess(0.5, f64::INFINITY), 0.5);
        assert_eq!(cv_excess(0.5, 0.0), 0.0);
        assert_eq!(cv_excess(f64::NAN, 100.0), 0.0);
    }

    #[test]
    fn normal_quantile_matches_reference_values() {
        // References: mpmath, sqrt(2)·erfinv(2p − 1) at 30 digits.
        let cases = [
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054_2),
            (0.999, 3.090_232_306_167_813_5),
            (0.9, 1.281_551_565_544_600_5),
            (0.3, -0.524_400_512_708_040_8),
            (0.02425, -1.972_961_051_311_885),
            (1e-10, -6.361_340_902_404_057),
            (1.0 - 1e-3 / 64.0, 4.164_160_673_543_728),
        ];
        for (p, z) in cases {
            let got = normal_quantile(p);
            assert!(
                (got - z).abs() <= 1e-12 * z.abs().max(1.0),
                "Φ⁻¹({p}) = {got}, want {z}"
            );
        }
        // 1 − 1e-3/64 is not exact in binary, so the threshold form is the precise one.
        assert!((hot_shard_z_threshold(64, 1e-3) - 4.164_160_673_543_728).abs() < 1e-13);
        assert!((hot_shard_z_threshold(16, 1e-3) - 3.836_106_931_175_897_7).abs() < 1e-13);
        assert!((hot_shard_z_threshold(1024, 1e-3) - 4.758_214_904_066_802_6).abs() < 1e-13);
        assert_eq!(hot_shard_z_threshold(0, 0.5), hot_shard_z_threshold(1, 0.5));
        assert!(hot_shard_z_threshold(64, 0.0).is_nan());
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
        assert_eq!(normal_quantile(1.0), f64::INFINITY);
        assert!(normal_quantile(-0.1).is_nan() && normal_quantile(1.1).is_nan());
        assert!(normal_quantile(f64::NAN).is_nan());
        assert!(normal_quantile(1e-300) < -37.0 && normal_quantile(1e-300) > -37.1);
    }

    #[test]
    fn chi_square_quantile_matches_reference_values() {
        // Exact quantiles from mpmath (regularised incomplete gamma); tolerance is the
        // documented Wilson–Hilferty error.
        assert_close(chi_square_quantile(63.0, 0.999), 103.442_377, 0.01);
        assert_close(chi_square_quantile(63.0, 0.999), 103.5, 0.001);
        assert_close(chi_square_quantile(15.0, 0.999), 37.697_298, 0.01);
        assert_close(chi_square_quantile(1023.0, 0.999), 1_168.497_164, 0.001);
        assert_close(chi_square_quantile(10.0, 0.999), 29.588_298, 0.01);
        assert_close(chi_square_quantile(100.0, 0.01), 70.064_895, 0.01);
        assert_eq!(chi_square_quantile(5.0, 0.0), 0.0);
        assert_eq!(chi_square_quantile(5.0, 1.0), f64::INFINITY);
        assert!(chi_square_quantile(0.0, 0.5).is_nan());
        assert!(chi_square_quantile(5.0, 2.0).is_nan());
        // The documented clamp: at df = 1 the cube is negative below p ≈ 0.049.
        assert_eq!(chi_square_quantile(1.0, 0.001), 0.0);
        assert_eq!(chi_square_quantile(1.0, 0.002), 0.0);
        assert!(chi_square_quantile(1.0, 0.06) > 0.0);
    }

    /// Seeded simulation: N = 64 shards, Poisson(100) counts, 2000 windows. The mean corrected Gini
    /// is 0.056 ± 0.002 and matches [`gini_noise_floor`]; the CV matches [`cv_noise_floor`];
    /// noise alone never reaches the hot-shard thresholds.
    #[test]
    fn poisson_noise_gives_the_documented_gini_and_cv_floors() {
        let (shards, lambda, windows) = (64, 100.0, 2000);
        let poisson = Poisson::new(lambda);
        let mut rng = SplitMix64::new(0x5EED_0001);
        let mut counts = vec![0.0; shards];
        let (mut gini_sum, mut cv_sum) = (0.0, 0.0);
        for _ in 0..windows {
            counts
                .iter_mut()
                .for_each(|c| *c = poisson.sample(&mut rng));
            let stats = SkewStats::from_counts(&counts, 1e-3).unwrap();
            gini_sum += stats.gini;
            cv_sum += stats.cv;
            assert!(!stats.insufficient_data);
        }
        let mean_gini = gini_sum / f64::from(windows);
        let mean_cv = cv_sum / f64::from(windows);
        assert!((mean_gini - 0.056).abs() <= 0.002, "mean G_c {mean_gini}");
        assert!(
            (mean_gini - gini_noise_floor(lambda).unwrap()).abs() <= 0.002,
            "mean G_c {mean_gini} is off the noise floor"
        );
        assert_close(mean_cv, cv_noise_floor(lambda).unwrap(), 0.02);
    }

    /// The dispersion gate's false-positive rate on pure Poisson noise is at most 0.2% at
    /// α = 1e-3. 10,000 windows, so the expected 10 false positives make the bound a real test;
    /// the lower bound catches a gate that never fires.
    #[test]
    fn dispersion_gate_false_positive_rate_is_alpha_on_poisson_noise() {
        let (shards, lambda, windows) = (64, 100.0, 10_000u32);
        let poisson = Poisson::new(lambda);
        let mut rng = SplitMix64::new(0x5EED_0002);
        let mut counts = vec![0.0; shards];
        let mut fired = 0u32;
        for _ in 0..windows {
            counts
                .iter_mut()
                .for_each(|c| *c = poisson.sample(&mut rng));
            if dispersion_test(&counts, 1e-3).unwrap().beyond_noise {
                fired += 1;
            }
        }
        let rate = f64::from(fired) / f64::from(windows);
        assert!(rate <= 0.002, "false-positive rate {rate}");
        assert!(rate >= 0.0002, "gate suspiciously quiet: {rate}");
    }

    /// Hot-value fixture: one empty-value key with 20% of traffic, the rest Zipf 0.8
    /// over 10⁶ keys hashed onto 64 shards. Loads are the exact expected counts of a window of
    /// 640,000 requests (λ = 10⁴ per shard), not samples.
    #[test]
    fn hot_value_fixture_is_caught_by_peak_to_mean_not_gini() {
        let (shards, keys, s, hot, events) = (64usize, 1_000_000u64, 0.8, 0.2, 640_000.0);
        let weights: Vec<f64> = (1..=keys).map(|k| (k as f64).powf(-s)).collect();
        let norm: f64 = weights.iter().sum();
        let mut zipf_only = vec![0.0; shards];
        for (k, w) in (1..=keys).zip(&weights) {
            zipf_only[(mix(k) % shards as u64) as usize] += w / norm;
        }
        let mut loads: Vec<f64> = zipf_only.iter().map(|x| x * (1.0 - hot) * events).collect();
        loads[(mix(0) % shards as u64) as usize] += hot * events;
        zipf_only.iter_mut().for_each(|x| *x *= events);

        let fixture = SkewStats::from_counts(&loads, 1e-3).unwrap();
        let background = SkewStats::from_counts(&zipf_only, 1e-3).unwrap();
        // Measured: PAR 13.58, G_c 0.259. The hot key alone puts N·p = 12.8 times the mean on
        // its shard; its share of the rest adds about 1 − p.
        assert!(fixture.peak_to_mean >= 13.0, "{fixture:?}");
        assert!(fixture.dispersion.unwrap().beyond_noise && !fixture.insufficient_data);
        // Gini reads like broad Zipf-1.0 skew (0.25), so it cannot name one hot shard...
        assert!((0.22..0.30).contains(&fixture.gini), "{fixture:?}");
        // ...while the same keys without the hot value stay near-flat (measured: PAR 2.06,
        // G_c 0.075).
        assert!(background.peak_to_mean < 3.0, "{background:?}");
        assert!(background.gini < 0.12, "{background:?}");
    }

    #[test]
    fn the_top1_floor_is_above_fair_share_and_shrinks_with_volume() {
        let low = top1_noise_floor(16, 10.0, 1e-3).unwrap();
        let high = top1_noise_floor(16, 10_000.0, 1e-3).unwrap();
        assert!(low > high && high > 1.0 / 16.0, "{low} {high}");
        // z = 3.84 for 16 shards at 1e-3: (1 + 3.84/100)/16.
        assert!((high - (1.0 + 0.0384) / 16.0).abs() < 1e-4, "{high}");
        assert_eq!(top1_noise_floor(16, 0.0, 1e-3), None);
        assert_eq!(top1_noise_floor(1, 0.01, 1e-3), Some(1.0));
    }

    #[test]
    fn skew_stats_agree_with_the_single_statistics() {
        let counts = [
            120.0, 80.0, 95.0, 0.0, 300.0, 101.0, 99.0, 105.0, 98.0, 102.0, 97.0,
        ];
        let stats = SkewStats::from_counts(&counts, 1e-3).unwrap();
        assert_eq!(stats.shards, 11);
        assert_eq!(stats.topk, 2);
        assert_eq!(Some(stats.gini), gini_corrected(&counts));
        assert_eq!(Some(stats.top1_share), top_k_share(&counts, 1));
        assert_eq!(Some(stats.topk_share), top_k_share(&counts, 2));
        assert_eq!(Some(stats.peak_to_mean), peak_to_mean(&counts));
        assert_eq!(Some(stats.cv), coefficient_of_variation(&counts));
        assert_eq!(Some(stats.hoover), hoover(&counts));
        assert_eq!(stats.dispersion, dispersion_test(&counts, 1e-3));
        assert_eq!(Some(stats.gini_noise_floor), gini_noise_floor(stats.mean));
        assert_eq!(Some(stats.cv_noise_floor), cv_noise_floor(stats.mean));
        assert_eq!(stats.cv_excess, cv_excess(stats.cv, stats.mean));
        assert!(stats.dispersion.unwrap().beyond_noise);
        assert!(!stats.insufficient_data);
        assert!(
            SkewStats::from_counts(&[9.0, 9.0], 1e-3)
                .unwrap()
                .insufficient_data
        );
    }
}
