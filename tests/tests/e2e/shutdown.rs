//! End-to-end: shutdown is bounded by its grace time, whatever the clients do, and a scraped
//! agent hands what it counted since its last scrape to one more scrape before it exits.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use skewwatch::app::{GRACE, INGEST_DRAIN};
use skewwatch::client::text::Scrape;
use skewwatch_e2e::agent::Agent;

#[test]
fn a_half_open_http_connection_does_not_keep_the_agent_alive_past_its_grace_time() {
    let mut agent = Agent::start("");
    // Half a request line, and then nothing: the headers never finish.
    let mut half = TcpStream::connect(agent.http).unwrap();
    half.write_all(b"GET /metr").unwrap();
    // The agent still answers others, so the half-open connection has been accepted by now.
    assert_eq!(agent.request("GET", "/healthz", &[], b"").0, 200);
    let (status, took) = agent.stop_timed();
    assert!(status.success(), "exit status {status}");
    assert!(
        took < GRACE,
        "the agent took {took:?} to exit after SIGTERM (grace {GRACE:?})"
    );
    drop(half);
}

/// Long windows, so the requests a test sends are still in the open window when it sends
/// SIGTERM: only the flush at shutdown can put them in the counters.
const LONG_WINDOWS: &str = "window: {window_secs: 600}\n";

/// `count` requests to group `final`, shard `s1`, over HTTP.
fn send(agent: &Agent, count: u64) {
    let body = format!("{{\"group\":\"final\",\"shard\":\"s1\",\"count\":{count}}}\n");
    let (code, text) = agent.post_ndjson(body.as_bytes(), &[]);
    assert_eq!(code, 200, "{text}");
}

/// The requests of group `final` in the counters of a page.
fn counted(page: &str) -> f64 {
    Scrape::parse(page)
        .unwrap()
        .sum("skewwatch_shard_requests_total", &[("group", "final")])
}

#[test]
fn after_sigterm_a_scraped_agent_serves_its_open_windows_counts_to_the_next_scrape_then_exits() {
    let mut agent = Agent::start(LONG_WINDOWS);
    // Scraped before: a scraper is expected back.
    assert_eq!(counted(&agent.request("GET", "/metrics", &[], b"").1), 0.0);
    send(&agent, 37);
    agent.signal("TERM");
    // Draining: not ready, ingest refused, the page still served. /readyz is no scrape, so
    // polling it does not end the wait.
    let not_ready = agent.wait_for(Duration::from_secs(5), |a| {
        (a.request("GET", "/readyz", &[], b"").0 == 503).then_some(())
    });
    assert!(not_ready.is_some(), "/readyz still ready after SIGTERM");
    // Another group, so a body taken before ingest closed does not change the count.
    let closed = agent.wait_for(Duration::from_secs(5), |a| {
        let late = b"{\"group\":\"late\",\"shard\":\"s1\"}\n";
        (a.post_ndjson(late, &[]).0 == 503).then_some(())
    });
    assert!(closed.is_some(), "ingest still open after SIGTERM");
    // A scrape that began before the pipeline published the open window's counts does not
    // end the wait; the first one after does, and holds them.
    let mut scrape_served = None;
    let mut last = 0.0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let (code, page) = agent.request("GET", "/metrics", &[], b"");
        assert_eq!(code, 200, "the page is served while the agent drains");
        last = counted(&page);
        if last == 37.0 {
            scrape_served = Some(Instant::now());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let served = scrape_served
        .unwrap_or_else(|| panic!("no scrape after SIGTERM held the 37 requests (last: {last})"));
    let status = agent
        .wait_exit(Duration::from_secs(5))
        .expect("the agent still runs 5 s after its final scrape");
    assert!(status.success(), "exit status {status}");
    // Exit follows the scrape by the server's drain at most, not by the grace.
    assert!(
        served.elapsed() < INGEST_DRAIN + Duration::from_secs(2),
        "exited {:?} after the final scrape",
        served.elapsed()
    );
    let log = agent.drain_log().join("\n");
    assert!(
        log.contains("Waiting for a final scrape") && log.contains("ended=\"scraped\""),
        "{log}"
    );
}

#[test]
fn a_never_scraped_agent_exits_at_once_on_sigterm() {
    let mut agent = Agent::start(&format!(
        "{LONG_WINDOWS}shutdown: {{final_scrape_grace_secs: 60}}\n"
    ));
    send(&agent, 5);
    let sent = Instant::now();
    agent.signal("TERM");
    let status = agent
        .wait_exit(Duration::from_secs(5))
        .expect("a never-scraped agent waited after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(sent.elapsed() < Duration::from_secs(5));
    let log = agent.drain_log().join("\n");
    assert!(log.contains("/metrics was never read"), "{log}");
}

#[test]
fn with_no_scrape_after_sigterm_the_agent_exits_when_the_final_scrape_grace_expires() {
    let grace = Duration::from_secs(3);
    let mut agent = Agent::start(&format!(
        "{LONG_WINDOWS}shutdown: {{final_scrape_grace_secs: {}}}\n",
        grace.as_secs()
    ));
    agent.scrape();
    send(&agent, 5);
    let sent = Instant::now();
    agent.signal("TERM");
    let status = agent
        .wait_exit(grace + INGEST_DRAIN + Duration::from_secs(3))
        .expect("the agent outlived its final-scrape grace");
    let took = sent.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(
        took >= grace,
        "exited after {took:?}, before the grace of {grace:?}"
    );
    let log = agent.drain_log().join("\n");
    assert!(log.contains("ended=\"grace expired\""), "{log}");
}
