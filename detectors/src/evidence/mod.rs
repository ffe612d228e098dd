//! The evidence the detectors weigh, in one vocabulary: what sits between a closed window's
//! counts and a detector's verdict (`... -> SkewStats -> Detectors`), shared by every detector
//! and owned by none.
//!
//! - [`baseline`]: what is normal for an entity. An EWMA with warm-up ([`baseline::Ewma`]), a
//!   ratio's events among trials ([`baseline::Ratio`]) and its two-average baseline
//!   ([`baseline::RatioBaseline`]), the windows of an excursion held back from it
//!   ([`baseline::HeldWindows`]), and the upper bound a test takes for its reference
//!   ([`baseline::BOUND_Z`]).
//! - [`shape`]: how long a change over threshold has provably lasted, from the shape of its
//!   streak of windows ([`shape::StreakShape`], docs/adr/003-the-shape-of-the-evidence.md), and
//!   how many windows in a row are always enough ([`shape::Persistence`]).
//! - [`cusum`]: evidence that accumulates across windows: Page's CUSUM of log-likelihood
//!   ratios ([`cusum::Cusum`], its [`cusum::CusumSettings`], the quick path
//!   [`cusum::QuickCusum`]) of binomial and Poisson tests
//!   (docs/adr/006-evidence-that-accumulates.md).
//! - [`ratio`]: the three above put together for one entity's ratio
//!   ([`ratio::RatioEvidence`]): weigh a window, say which CUSUM proved a rise, teach the
//!   baseline.

pub mod baseline;
pub mod cusum;
pub mod ratio;
pub mod shape;
