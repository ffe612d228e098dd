//! The soak, for as long as you like: `cargo run --release -p skewwatch-e2e --example soak --
//! [SECONDS] [LINES_PER_SEC] [HTTP_CLIENTS]` (default 600 s at the standard plan's load), or
//! `scripts/soak.sh`. Prints the report as JSON and exits non-zero when any line is
//! unaccounted for, memory grew more than 10%, a reload failed or the webhook did not
//! converge after a flap.

use std::process::ExitCode;
use std::time::Duration;

use skewwatch_e2e::soak::{SoakPlan, run};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(600);
    let mut plan = SoakPlan::standard(Duration::from_secs(secs));
    // A lighter run on a shared machine: `soak 30 2000 20` is 2,000 lines/s and 20 clients.
    if let Some(rate) = args.next().and_then(|a| a.parse().ok()) {
        plan.udp_lines_per_sec = rate;
    }
    if let Some(clients) = args.next().and_then(|a| a.parse().ok()) {
        plan.http_clients = clients;
    }
    let r = run(&plan);
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
    let growth = r.rss_end as f64 / r.rss_start.max(1) as f64;
    let ok = r.unaccounted.is_empty()
        && growth <= 1.10
        && r.reloads_failed == 0
        && r.flaps_converged == r.flaps;
    eprintln!(
        "soak: {:.0} s, {} valid and {} hostile StatsD lines missing ({} kernel-dropped datagrams), \
         {} valid HTTP records lost, {} unaccounted, RSS {:.1} -> {:.1} MiB ({growth:.3}x), \
         {} reloads ({} failed), {}/{} flaps converged: {}",
        r.secs,
        r.udp_valid_missing,
        r.udp_hostile_missing,
        r.kernel_drop_datagrams,
        r.http_valid_lost,
        r.unaccounted.len(),
        r.rss_start as f64 / 1048576.0,
        r.rss_end as f64 / 1048576.0,
        r.reloads,
        r.reloads_failed,
        r.flaps_converged,
        r.flaps,
        if ok { "PASS" } else { "FAIL" }
    );
    for line in &r.unaccounted {
        eprintln!("soak: unaccounted: {line}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
