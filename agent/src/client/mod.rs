//! The client side: what talks to an agent from outside, for `skewwatch bench` and the
//! end-to-end tests. Nothing in the agent's serving path uses it, and it uses nothing of the
//! agent.
//!
//! - The blocking HTTP/1.1 client ([`get`], [`request`], [`Connection`]): enough to POST
//!   NDJSON on a keep-alive connection and to read `/metrics`, without an async runtime.
//! - [`text`]: a Prometheus text-format reader ([`text::Scrape`]).
//! - [`probe`]: what `skewwatch bench` reads besides its own counters: the agent's
//!   self-metrics, its process's CPU time and memory, the host's UDP receive errors.

mod http;
pub mod probe;
pub mod text;

pub use http::{Connection, Response, get, request};
