//! `skewwatch bench`: a load generator for StatsD over UDP and NDJSON over HTTP. (Being written.)

use std::process::ExitCode;

/// `skewwatch bench` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the load generator.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the load generator is not written yet")
}
