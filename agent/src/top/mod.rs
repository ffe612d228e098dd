//! `skewwatch top`: the live view in a terminal, for a shell on a pod or host where no browser
//! reaches the agent.
//!
//! It reads a running agent from outside, over its HTTP API only (`GET /api/v1/history` and
//! `GET /api/v1/alerts`, once a window), like any other client: it imports the client side
//! ([`crate::client`]) and the clock, nothing of the agent's serving path.
//!
//! - [`source`]: the URL, the token, and the JSON shapes as the client reads them.
//! - [`figures`]: what the view shows, computed from one reading (headline, shard rows with
//!   their heat, keys, alerts, cache loop).
//! - [`text`]: the sentences and glyphs, and the plain `--once` output.
//! - [`screen`]: the full-screen view with ratatui and crossterm: keys, poller, drawing.
//!
//! Shard rows come in the agent's order: busiest in the newest window first, names in natural
//! order on a tie (`shard-2` before `shard-10`), the order the live page shows.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

pub mod figures;
pub mod screen;
pub mod source;
pub mod text;

use figures::{Figures, Selection};
use source::Source;

/// `skewwatch top` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's HTTP listener.
    #[arg(long, default_value = "http://127.0.0.1:9477")]
    pub url: String,
    /// The group to show first (default: the busiest).
    #[arg(long)]
    pub group: Option<String>,
    /// A file holding the bearer token, for an agent (or a proxy) that asks for one.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Print the view once, plain, and exit (non-zero when the agent cannot be read).
    #[arg(long)]
    pub once: bool,
    /// The `--once` output's format.
    #[arg(long, value_enum, default_value_t = Format::Text, requires = "once")]
    pub format: Format,
}

/// What `--once` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The screen's content as plain text, for a ticket or a chat channel.
    Text,
    /// The figures as one JSON object, for scripts.
    Json,
}

/// Runs `skewwatch top`; `env` reads the environment (`NO_COLOR`, `TERM`).
pub fn run(args: Args, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<ExitCode> {
    let source = Source::new(&args.url, args.token_file.as_deref())?;
    if args.once {
        let reading = source.read(args.group.as_deref())?;
        let figures = Figures::new(&reading, &Selection::default());
        let out = match args.format {
            Format::Text => text::render(&figures, &source.url),
            Format::Json => {
                let mut s = serde_json::to_string_pretty(&figures)?;
                s.push('\n');
                s
            }
        };
        print!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::ensure!(
        std::io::IsTerminal::is_terminal(&std::io::stdout()),
        "standard output is not a terminal: use `skewwatch top --once` to print the view"
    );
    screen::run(source, args.group, colour(env)).context("running the terminal view")?;
    Ok(ExitCode::SUCCESS)
}

/// Colour unless `NO_COLOR` is set to anything but the empty string (no-color.org) or the
/// terminal is unknown or `dumb`.
pub fn colour(env: &dyn Fn(&str) -> Option<String>) -> bool {
    let no_color = env("NO_COLOR").is_some_and(|v| !v.is_empty());
    let term = env("TERM").unwrap_or_default();
    !no_color && !term.is_empty() && term != "dumb"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_follows_no_color_and_the_terminal() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert!(colour(&env(&[("TERM", "xterm-256color")])));
        assert!(!colour(&env(&[
            ("TERM", "xterm-256color"),
            ("NO_COLOR", "1")
        ])));
        assert!(colour(&env(&[("TERM", "screen"), ("NO_COLOR", "")])));
        assert!(!colour(&env(&[("TERM", "dumb")])));
        assert!(!colour(&env(&[])));
    }
}
