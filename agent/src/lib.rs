//! The skewwatch agent: ingest, the pipeline task, and the outputs.
//!
//! ```text
//! StatsD/UDP ─┐                    ┌─> /metrics (exposition)
//!             ├─> Batch ─> pipeline (Engine: windows, stats) ─> Arc<WindowSnapshot>
//! HTTP NDJSON ┘     bounded channel   │                         └─> /api/v1/status
//!                                     ├─> Arc<Vec<Alert>> ─> /api/v1/alerts, skewwatch_alert_firing
//!                                     └─> Evaluation ─> alerting (bounded queues) ─> Alertmanagers, webhooks
//! ```
//!
//! - [`config`]: YAML configuration and its validation.
//! - [`ingest`]: wire formats into batches ([`ingest::statsd`], [`ingest::ndjson`], [`ingest::udp`]).
//! - [`pipeline`]: the one task that owns the engine and publishes snapshots.
//! - [`exposition`] and [`http`]: what the outputs render.
//! - [`alerting`]: alert delivery to Alertmanagers and webhooks.
//! - [`telemetry`]: self-metrics, the agent's own counters.
//! - [`run`]: the daemon assembled, with graceful shutdown.
//! - [`replay`]: the engine over a recorded trace, in trace time.
//! - [`demo`]: the agent fed a simulated incident.
//! - [`loadgen`]: `skewwatch bench`, the load generator.
//!
//! Statistics and detectors live in the pure `skewwatch-detectors` crate.

pub mod alerting;
pub mod config;
pub mod demo;
pub mod exposition;
pub mod http;
pub mod ingest;
pub mod loadgen;
pub mod pipeline;
pub mod replay;
pub mod run;
pub mod telemetry;
