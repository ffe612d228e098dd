//! `skewwatch demo`: the real agent on its defaults, fed a built-in simulated incident over UDP,
//! with a live account of what fires and why. (Being written.)

use std::process::ExitCode;

/// `skewwatch demo` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the demo.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the demo is not written yet")
}
