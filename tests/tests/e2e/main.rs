//! skewwatch's end-to-end tests, in one test binary with a module per area (the shape of
//! linkerd2-proxy's integration crate). Each former test binary became a module, so the agent is
//! linked once instead of once per area. Run one area with
//! `cargo test --release -p skewwatch-e2e --test e2e hardening::`.
//!
//! The areas share one process and run on parallel threads. They keep no process-wide state:
//! each starts its own agents and peers on port 0 in its own temporary directory, reads the
//! environment only, and hands settings to the children it spawns through their command lines
//! and environments, never through its own.

#![expect(
    clippy::disallowed_types,
    reason = "the end-to-end crate drives real processes in real time: there is no paused clock to honour"
)]

mod alertmanager;
mod cli;
mod clients;
mod crash;
mod dashboards;
mod deploy;
mod detection_bench;
mod docs;
mod fleet;
mod fleet_input;
mod foundation;
mod haproxy;
mod hardening;
mod inputs_agree;
mod otel_instrumentation;
mod otlp_http;
mod otlp_python;
mod replay_benign;
mod replay_deadline;
mod replay_failing;
mod replay_hot;
mod replay_incidents;
mod rules;
mod saturation;
mod shutdown;
mod soak;
mod top;
mod ui;
mod webhook;
mod whatif;
