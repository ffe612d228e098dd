//! Pure statistics, windows and detectors of skewwatch.
//!
//! The data flow, one module per stage:
//!
//! ```text
//! observation -> window -> stats (SkewStats) -> detectors -> alerts / snapshot
//! ```
//!
//! - [`observation`]: the data model and the packed [`observation::Batch`].
//! - [`window`]: per-group, per-shard windows with counts, HDR latency histograms and key
//!   summaries; closing a window yields a [`snapshot::WindowSnapshot`].
//! - [`parts`]: the windows partitioned by shard over recording threads, merged at close.
//! - [`histogram`]: the window's latency histogram, a log-linear (HDR-style) one of our own,
//!   cheap to record into.
//! - [`keys`]: the heavy-hitter key summary (Space-Saving family).
//! - [`stats`]: skew statistics (bias-corrected Gini, top-k share, peak-to-mean, CV and its
//!   noise floor, dispersion test).
//! - [`detect`]: the detectors, each reading a closed window and its own baselines.
//! - [`evidence`]: what the detectors weigh: baselines, the shape of a run of over-threshold
//!   windows, evidence that accumulates across windows (a CUSUM of log-likelihood ratios of
//!   counts, so a quiet entity is judged later instead of never), and one entity's ratio
//!   evidence built from them.
//! - [`alert`]: the alert state machine (inactive, pending, firing, resolved).
//! - [`engine`]: owns the windows and detectors and is driven by time passed in.
//! - [`prng`]: the seeded generator and the small hashes every crate of the workspace shares.
//!
//! This crate does no I/O, reads no clock and has no global state: every function that depends
//! on time takes `now`. It starts threads only when asked to record on several
//! ([`parts`]). The live agent, `skewwatch replay` and the tests share it, so a scenario
//! gives the same verdict everywhere.

pub mod alert;
pub mod detect;
pub mod engine;
pub mod evidence;
pub mod histogram;
pub mod keys;
pub mod observation;
pub mod parts;
pub mod prng;
pub mod snapshot;
pub mod stats;
pub mod whatif;
pub mod window;
