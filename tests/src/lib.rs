//! Test support for skewwatch's end-to-end tests: starting the real binary on loopback ports,
//! scraping and matching Prometheus series regardless of line order, and the seeded scenario
//! generator that builds incident and benign traces, a real Prometheus to query, and the
//! generators of the dashboards and the PrometheusRule.

#![expect(
    clippy::disallowed_types,
    reason = "the end-to-end crate drives real processes in real time: there is no paused clock to honour"
)]

pub mod agent;
pub mod alertmanager;
pub mod bench;
pub mod dashboards;
pub mod demo_feed;
pub mod deploy;
pub mod prometheus;
/// The Prometheus text-format reader, shared with the agent.
pub use skewwatch::client::text as prom;
pub mod replay;
pub mod scenario;
pub mod scenarios;
pub mod soak;
pub mod tools;
pub mod traffic;
