//! End-to-end: shutdown is bounded by its grace time, whatever the clients do.

use std::io::Write;
use std::net::TcpStream;

use skewwatch::app::GRACE;
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
