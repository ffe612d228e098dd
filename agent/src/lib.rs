//! The skewwatch agent: ingest, the pipeline task, and the outputs.
//!
//! ```text
//! StatsD/UDP ─┐                    ┌─> /metrics (outputs::metrics)
//!             ├─> Batch ─> pipeline (Engine: windows, stats) ─> Arc<WindowSnapshot>
//! HTTP NDJSON ┘     bounded channel   │                         └─> /api/v1/status
//!                                     ├─> Arc<Vec<Alert>> ─> /api/v1/alerts, skewwatch_alert_firing
//!                                     ├─> Arc<Totals>, Arc<History> (outputs) ─> /metrics, /api/v1/history, GET /
//!                                     └─> Evaluation ─> alerting (bounded queues) ─> Alertmanagers, webhooks
//! ```
//!
//! - [`clock`]: the clock trait and RFC 3339 helpers (a leaf every stage may use).
//! - [`config`]: YAML configuration, its validation and its secrets.
//! - [`ingest`]: wire formats into batches ([`ingest::statsd`], [`ingest::ndjson`], [`ingest::otlp`], [`ingest::scrape`]).
//! - [`pipeline`]: the one task that owns the engine and publishes snapshots.
//! - [`outputs`]: the views the pipeline publishes after each window (the cumulative counters,
//!   the live view's history ring) and the one function that renders `/metrics`.
//! - [`http`]: the HTTP server, its routes and the state its handlers share, by concern.
//! - [`client`]: the blocking HTTP/1.1 client, the Prometheus text-format reader and the probe
//!   that `bench`, `demo` and the tests use to talk to an agent.
//! - [`alerting`]: alert delivery to Alertmanagers and webhooks.
//! - [`telemetry`]: the ingest counters every input shares, and how a stage registers its own
//!   metrics in the registry it is passed.
//! - [`stage`]: a stage's stop token and watched tasks, which every stage spawns into.
//! - [`app`]: the daemon assembled: [`app::start`] returns a [`app::Running`] agent that owns
//!   its bound addresses and tasks, and shuts down in order within a grace time.
//! - [`replay`]: the engine over a recorded trace, in trace time.
//! - [`state`]: the state file that carries alerts and baselines across restarts.
//! - [`demo`]: the agent fed a simulated incident.
//! - [`loadgen`]: `skewwatch bench`, the load generator.
//! - [`top`]: `skewwatch top`, the live view in a terminal, read from an agent's HTTP API.
//!
//! Statistics and detectors live in the pure `skewwatch-detectors` crate.

pub mod alerting;
pub mod app;
pub mod client;
pub mod clock;
pub mod config;
pub mod demo;
pub mod http;
pub mod ingest;
pub mod loadgen;
pub mod outputs;
pub mod pipeline;
pub mod replay;
pub mod stage;
pub mod state;
pub mod telemetry;
pub mod top;
