//! Outputs: the views the pipeline publishes after each evaluation, and the `/metrics` page.
//!
//! The pipeline task owns one reducer per view, called from its evaluation hook
//! (`Pipeline::on_evaluation`); each folds the closed window into its own state and publishes
//! an immutable copy on a watch channel, so a reader never waits for the pipeline and the
//! pipeline never waits for a reader.
//!
//! - [`totals`]: the cumulative counters and latency histogram that add up across sidecars
//!   (`Arc<Totals>`).
//! - [`history`]: the live view's ring of per-window summaries (`Arc<History>`).
//! - [`metrics`]: the one function that renders the `/metrics` page from the latest snapshot,
//!   alerts and totals and the self-metrics registry.
//! - [`text_format`]: writing Prometheus text format 0.0.4, shared by [`metrics`] and
//!   [`totals`].
//!
//! The HTTP handlers (`crate::http`) read these views; nothing here knows about HTTP.

pub mod config;
pub mod history;
pub mod metrics;
pub mod text_format;
pub mod totals;
