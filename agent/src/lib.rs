//! The skewwatch agent: ingest, the pipeline task, and the outputs.
//!
//! ```text
//! StatsD/UDP ─┐                    ┌─> /metrics (exposition)
//!             ├─> Batch ─> pipeline (Engine: windows, stats) ─> Arc<WindowSnapshot>
//! HTTP NDJSON ┘     bounded channel   │                         └─> /api/v1/status
//!                                     ├─> Arc<Vec<Alert>> ─> /api/v1/alerts, skewwatch_alert_firing
//!                                     ├─> Arc<History> (history ring) ─> /api/v1/history, GET /
//!                                     └─> Evaluation ─> alerting (bounded queues) ─> Alertmanagers, webhooks
//! ```
//!
//! - [`clock`]: the clock trait and RFC 3339 helpers (a leaf every stage may use).
//! - [`config`]: YAML configuration, its validation and its secrets.
//! - [`ingest`]: wire formats into batches ([`ingest::statsd`], [`ingest::ndjson`], [`ingest::otlp`], [`ingest::scrape`]).
//! - [`pipeline`]: the one task that owns the engine and publishes snapshots.
//! - [`exposition`] and [`http`]: what the outputs render, the HTTP server, and the small
//!   client and text-format reader that `bench`, `demo` and the tests use to talk to an agent.
//! - [`history`]: the bounded ring of per-window summaries the live view (`GET /`) draws.
//! - [`alerting`]: alert delivery to Alertmanagers and webhooks.
//! - [`telemetry`]: self-metrics, the agent's own counters.
//! - [`app`]: the daemon assembled: [`app::start`] returns a [`app::Running`] agent that owns
//!   its bound addresses and tasks, and shuts down in order within a grace time.
//! - [`replay`]: the engine over a recorded trace, in trace time.
//! - [`state`]: the state file that carries alerts and baselines across restarts.
//! - [`demo`]: the agent fed a simulated incident.
//! - [`loadgen`]: `skewwatch bench`, the load generator.
//!
//! Statistics and detectors live in the pure `skewwatch-detectors` crate.

pub mod alerting;
pub mod app;
pub mod clock;
pub mod config;
pub mod demo;
pub mod exposition;
pub mod history;
pub mod http;
pub mod ingest;
pub mod loadgen;
pub mod pipeline;
pub mod replay;
pub mod state;
pub mod telemetry;
