//! The `skewwatch` command line: `run`, `check-config`, `replay`, `demo`, `top`, `bench`, and
//! the hidden `fleet-query`, which prints the fleet input's growth expression for the tools
//! that measure it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use skewwatch::app::Config;
use skewwatch::ingest::fleet::query::{Family, growth_expr};
use tokio_util::sync::CancellationToken;

/// What `--version` prints after the name: the package version, the commit built and the build
/// date, from build.rs (`unknown` where they cannot be known, as in a build from a tarball).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SKEWWATCH_COMMIT"),
    ", built ",
    env!("SKEWWATCH_BUILD_DATE"),
    ")"
);

/// Finds hot shards, hot keys and the feedback loops they start.
#[derive(Debug, Parser)]
#[command(name = "skewwatch", version = VERSION, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent (on the embedded defaults when no --config is given).
    Run {
        /// YAML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// HTTP listener address, overriding the configuration (e.g. 0.0.0.0:9477).
        #[arg(long)]
        http_listen: Option<std::net::SocketAddr>,
        /// StatsD UDP listener address, or `disabled`, overriding the configuration.
        #[arg(long, value_name = "ADDR|disabled")]
        statsd_listen: Option<skewwatch::app::config::StatsdListen>,
        /// Once every listener is bound, write their addresses to this file as JSON
        /// (`{"http": "127.0.0.1:9477", "statsd": "127.0.0.1:8125"}`): how a supervisor or a
        /// test that asked for port 0 learns the ports.
        #[arg(long, value_name = "FILE")]
        listen_addresses_file: Option<PathBuf>,
    },
    /// Validate a configuration file; exit 0 when valid, 1 with every problem named when not.
    CheckConfig {
        /// YAML configuration file.
        file: PathBuf,
    },
    /// Run the detectors over a recorded NDJSON trace in trace time; print alert transitions.
    Replay(skewwatch::replay::Args),
    /// Run the agent and feed it a built-in simulated incident over UDP.
    Demo(skewwatch::demo::Args),
    /// Show a running agent's live view in the terminal (or print it once with --once).
    Top(skewwatch::top::Args),
    /// Send StatsD or HTTP load at a target rate and report sent, accepted and dropped.
    Bench(skewwatch::loadgen::Args),
    /// Print the PromQL expression a fleet instance asks a family's growth with, for tools
    /// that measure it (scripts/fleet-counts.py, labs/fleet), so they ask what the product
    /// asks. Its answer holds three parts per label set (`part` = cur, prev, lost): the growth
    /// is cur - prev + lost, never below zero.
    #[command(hide = true)]
    FleetQuery {
        /// The family: requests, cache, buckets, keys, keys_unlisted or keys_overcount.
        #[arg(long, default_value = "requests", value_parser = family)]
        family: Family,
        /// Label matchers, as `fleet.selector`.
        #[arg(long, default_value = "")]
        selector: String,
        /// `fleet.lookback_secs`.
        #[arg(long, default_value_t = 600)]
        lookback_secs: u64,
        /// The time since the previous query (the fleet window), in seconds.
        #[arg(long)]
        since_secs: f64,
    },
}

/// A family of the fleet input by its name.
fn family(name: &str) -> Result<Family, String> {
    Family::ALL
        .into_iter()
        .find(|f| f.as_str() == name)
        .ok_or_else(|| {
            let names: Vec<_> = Family::ALL.iter().map(|f| f.as_str()).collect();
            format!("one of {}", names.join(", "))
        })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(_) => {
                println!("{}: configuration is valid", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Replay(args) => exit(skewwatch::replay::run(args)),
        Command::Demo(args) => exit(skewwatch::demo::run(args)),
        Command::Bench(args) => exit(skewwatch::loadgen::run(args)),
        Command::Top(args) => exit(skewwatch::top::run(args, &skewwatch::config::process_env)),
        Command::FleetQuery {
            family,
            selector,
            lookback_secs,
            since_secs,
        } => {
            if let Err(why) = skewwatch::ingest::fleet::config::check_selector(&selector) {
                eprintln!("skewwatch: --selector: {why}");
                return ExitCode::FAILURE;
            }
            if !(since_secs.is_finite() && since_secs > 0.0) {
                eprintln!("skewwatch: --since-secs: {since_secs} is not a positive time");
                return ExitCode::FAILURE;
            }
            println!(
                "{}",
                growth_expr(
                    family,
                    &selector,
                    std::time::Duration::from_secs(lookback_secs),
                    std::time::Duration::from_secs_f64(since_secs),
                )
            );
            ExitCode::SUCCESS
        }
        Command::Run {
            config,
            http_listen,
            statsd_listen,
            listen_addresses_file,
        } => {
            let options = skewwatch::app::RunOptions {
                source: skewwatch::app::ConfigSource {
                    path: config,
                    http_listen,
                    statsd_listen,
                },
                addresses_file: listen_addresses_file,
            };
            // Validated (secrets read) before the runtime starts or any port is bound.
            let result = options
                .source
                .load()
                .map_err(anyhow::Error::from)
                .and_then(|c| run_agent(c, options));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("skewwatch: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Runs the agent on a two-worker runtime until it is told to stop.
fn run_agent(config: Config, options: skewwatch::app::RunOptions) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(skewwatch::app::run(
        config,
        options,
        CancellationToken::new(),
    ));
    // Shutdown already waited out its grace time; do not wait again for a stuck thread.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(result?)
}

fn exit(result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|e| {
        eprintln!("skewwatch: {e:#}");
        ExitCode::FAILURE
    })
}
