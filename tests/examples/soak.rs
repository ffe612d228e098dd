//! The soak, for as long as you like: `cargo run --release -p skewwatch-e2e --example soak --
//! [SECONDS]` (default 600), or `scripts/soak.sh`. Prints the report as JSON and exits
//! non-zero when a valid record was lost, memory grew more than 10%, a reload failed or the
//! webhook did not converge after a flap.

use std::process::ExitCode;
use std::time::Duration;

use skewwatch_e2e::soak::{SoakPlan, run};

fn main() -> ExitCode {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(600);
    let r = run(&SoakPlan::standard(Duration::from_secs(secs)));
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
    let growth = r.rss_end as f64 / r.rss_start.max(1) as f64;
    let ok = r.http_valid_lost == 0
        && (r.udp_valid_lost == 0
            || (r.udp_valid_lost < 0 && r.kernel_drop_datagrams + r.agent_dropped_statsd > 0))
        && r.agent_rejected_statsd == r.udp_hostile_sent
        && growth <= 1.10
        && r.reloads_failed == 0
        && r.flaps_converged == r.flaps;
    eprintln!(
        "soak: {:.0} s, {} valid lines lost over UDP ({} kernel-dropped datagrams), {} over HTTP, \
         RSS {:.1} -> {:.1} MiB ({growth:.3}x), {} reloads ({} failed), {}/{} flaps converged: {}",
        r.secs,
        r.udp_valid_lost,
        r.kernel_drop_datagrams,
        r.http_valid_lost,
        r.rss_start as f64 / 1048576.0,
        r.rss_end as f64 / 1048576.0,
        r.reloads,
        r.reloads_failed,
        r.flaps_converged,
        r.flaps,
        if ok { "PASS" } else { "FAIL" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
