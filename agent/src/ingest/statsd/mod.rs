//! StatsD / DogStatsD over UDP: the first stage of the flow for services that already emit
//! StatsD. Each part depends only on the ones listed before it:
//!
//! - [`config`]: the validated `statsd:` section, the compiled `statsd.mappings` among it.
//! - [`lex`]: byte search, word loads and numbers, shared by the two readers of a line.
//! - [`mapping`]: `statsd.mappings` applied, other metric names turned into observations.
//! - [`parse`]: the native lines (`skewwatch.request`, the saturation gauges) into a
//!   [`Batch`](skewwatch_detectors::observation::Batch); a line of another metric name goes
//!   to the mappings.
//! - [`receiver`]: the UDP receiver thread that feeds the parser and hands batches to the
//!   pipeline.

pub mod config;
pub mod lex;
pub mod mapping;
pub mod parse;
pub mod receiver;

pub use config::{StatsdConfig, StatsdMapping};
pub use lex::METRIC_NAME;
pub use parse::{parse_datagram, parse_datagram_mapped, parse_gauge, parse_line};
