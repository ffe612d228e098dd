//! The demo's metadata-database incident fed to a running agent over UDP, one window a
//! second, for the tests that look at it as a person would: the live page in a browser
//! (`ui.rs`) and `skewwatch top` in a terminal (`top.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use skewwatch::demo;
use skewwatch_detectors::prng::SplitMix64;

/// Normal windows before the incident: more than the detectors' shortened warm-up below.
pub const WARMUP: u32 = 12;

/// One-second windows, the demo's detectors with an 8-window warm-up instead of 30, so the
/// incident is detected within a minute.
pub const CONFIG: &str = r#"
window:
  window_secs: 1
detectors:
  hot_shard: {warmup_windows: 8}
  hot_key: {warmup_windows: 8}
  latency_skew: {warmup_windows: 8}
  error_surge: {warmup_windows: 8}
  cache_hit_collapse: {warmup_windows: 8}
  fast_failure_sink: {warmup_windows: 8}
"#;

/// Lines that name a look-aside cache key, so the agent simulates the demo group's cache and
/// the views draw its what-if curve: `keys` keys once each on `shard`, in every window. They
/// carry no cache result, so the demo's own cache figures (and `CacheHitCollapse`) are as
/// before; with one-second windows, every TTL simulated keeps them, so the curve is flat.
pub fn cache_keyed_lines(shard: &str, keys: usize) -> Vec<String> {
    (0..keys)
        .map(|i| {
            format!(
                "skewwatch.request:2|ms|#group:{},shard:{shard},cache_key:item-{i}",
                demo::GROUP
            )
        })
        .collect()
}

/// Sends the demo's incident to `statsd`, one window a second, until `stop` is set: each
/// window's lines drawn with `seed`, with `with_incident` in the same datagram, then `beside`
/// (when not empty) as a datagram of its own, so its lines land in one window together. The
/// incident holds, never reaching the demo's recovery, while the test looks at it.
pub fn feed(
    statsd: SocketAddr,
    seed: u64,
    stop: Arc<AtomicBool>,
    with_incident: Vec<String>,
    beside: Vec<String>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut rng = SplitMix64::new(seed);
        let mut w = 0;
        while !stop.load(Ordering::Relaxed) {
            let mut lines = demo::incident_lines(w.min(WARMUP + 30), WARMUP, 1.0, &mut rng);
            lines.extend(with_incident.iter().cloned());
            // Refused once the test stops the agent; the flag ends the loop then.
            let _ = demo::send(&sock, statsd, &lines);
            if !beside.is_empty() {
                let _ = demo::send(&sock, statsd, &beside);
            }
            w += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
    })
}
