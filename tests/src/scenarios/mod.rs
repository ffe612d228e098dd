//! Scenario traces, one module per family:
//!
//! - [`benign`]: ordinary traffic that must raise nothing.
//! - [`deadline`]: callers with a deadline and a backend that piles up against it, and the
//!   timeouts and slowdowns that are not a pile-up.
//! - [`failing`]: a dead shard among many, and a quiet shard with occasional errors.
//! - [`hot`]: hot shards and hot keys (slow burn, hot key inside a normal shard).
//! - [`incidents`]: the two incidents skewwatch exists for: the empty-key hot shard that feeds
//!   a cache-hit collapse loop, and the fast-failing cluster that draws traffic.

pub mod benign;
pub mod deadline;
pub mod failing;
pub mod hot;
pub mod incidents;
