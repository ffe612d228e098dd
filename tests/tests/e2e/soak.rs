//! A one-minute soak of the real agent (the ten-minute one is `scripts/soak.sh`): sustained
//! StatsD load with hostile lines, a thousand reconnecting HTTP clients, an error surge that
//! comes and goes, a flapping webhook receiver and a SIGHUP reload every 20 s.

use std::time::Duration;

use skewwatch_e2e::soak::{SoakPlan, run};

#[test]
fn a_minute_of_mixed_load_and_faults_loses_nothing_and_converges() {
    let plan = SoakPlan {
        flap_period: Duration::from_secs(15),
        reload_period: Duration::from_secs(20),
        ..SoakPlan::standard(Duration::from_secs(60))
    };
    let r = run(&plan);
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    // Every line is accounted for: each valid StatsD line a record, a queue-full drop or in a
    // whole datagram the kernel counted as dropped, each hostile one rejected (or in such a
    // datagram), each acknowledged HTTP record counted and each hostile one rejected once.
    assert!(
        r.unaccounted.is_empty(),
        "unaccounted lines: {:?}\n{r:?}",
        r.unaccounted
    );
    assert!(r.http_valid_acked > 0 && r.agent_rejected_http > 0, "{r:?}");
    // Memory is flat: within 10%, or within 2 MiB while the whole agent is a few MiB and
    // allocator noise alone is that large a share.
    let growth = r.rss_end as f64 / r.rss_start as f64;
    assert!(
        growth <= 1.10 || r.rss_end <= r.rss_start + (2 << 20),
        "RSS grew {growth:.2}x: {r:?}"
    );
    // Every reload applied; the receiver ended every up period in the agent's state.
    assert!(r.reloads >= 2 && r.reloads_failed == 0, "{r:?}");
    assert!(r.flaps >= 1 && r.flaps_converged == r.flaps, "{r:?}");
}
