//! Live StatsD traffic: for the delivery tests, a background sender that can switch between
//! healthy traffic and an error surge, so an alert fires and later resolves; for the fleet
//! test, [`Steady`] streams at exact long-run rates to several agents.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// StatsD traffic for several groups, every 100 ms until dropped: healthy, or (during a surge)
/// half the requests of every group failing.
pub struct Traffic {
    surge: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Traffic {
    /// Starts healthy traffic: 20 requests per shard per tick to every group and shard.
    pub fn start(statsd: SocketAddr, groups: &[String], shards: &[&str]) -> Traffic {
        let surge = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (failing, s) = (surge.clone(), stop.clone());
        let groups = groups.to_vec();
        let shards: Vec<String> = shards.iter().map(|s| (*s).to_owned()).collect();
        let thread = std::thread::spawn(move || {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            while !s.load(Ordering::Relaxed) {
                for group in &groups {
                    let mut lines = String::new();
                    for shard in &shards {
                        lines.push_str(&format!(
                            "skewwatch.request:20|c|#group:{group},shard:{shard},outcome:ok\n"
                        ));
                        if failing.load(Ordering::Relaxed) {
                            lines.push_str(&format!(
                                "skewwatch.request:20|c|#group:{group},shard:{shard},outcome:error\n"
                            ));
                        }
                    }
                    let _ = sock.send_to(lines.trim_end().as_bytes(), statsd);
                }
                // Pacing of the traffic, not a wait for a result.
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Traffic {
            surge,
            stop,
            thread: Some(thread),
        }
    }

    /// Starts (`true`) or ends (`false`) the error surge.
    pub fn surge(&self, on: bool) {
        self.surge.store(on, Ordering::Relaxed);
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One kind of request sent at a steady rate: its StatsD tags and, for timing lines, the
/// latency each request carries.
#[derive(Debug, Clone)]
pub struct Stream {
    /// The tags after `#` (`group:g,shard:s3,cache:hit`).
    pub tags: String,
    /// Requests per second.
    pub per_second: f64,
    /// `Some(ms)`: one `|ms` line per request with this latency; `None`: counter lines.
    pub latency_ms: Option<f64>,
}

/// Streams of requests to several agents at exact long-run rates, until dropped: every tick
/// sends what is due since the start (rate x elapsed time) minus what was sent, so sleep
/// jitter never changes the rates, only when the requests arrive.
pub struct Steady {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Largest datagram sent, as a client on an Ethernet network would.
const DATAGRAM_BYTES: usize = 1_400;

impl Steady {
    /// Starts sending each target its streams.
    pub fn start(targets: Vec<(SocketAddr, Vec<Stream>)>) -> Steady {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let start = Instant::now();
            let mut sent: Vec<Vec<u64>> = targets.iter().map(|(_, v)| vec![0; v.len()]).collect();
            while !s.load(Ordering::Relaxed) {
                let elapsed = start.elapsed().as_secs_f64();
                for ((addr, streams), sent) in targets.iter().zip(&mut sent) {
                    let mut lines = Vec::new();
                    for (stream, sent) in streams.iter().zip(sent.iter_mut()) {
                        let due = (stream.per_second * elapsed) as u64 - *sent;
                        *sent += due;
                        match stream.latency_ms {
                            _ if due == 0 => {}
                            Some(ms) => lines
                                .extend((0..due).map(|_| {
                                    format!("skewwatch.request:{ms}|ms|#{}", stream.tags)
                                })),
                            None => {
                                lines.push(format!("skewwatch.request:{due}|c|#{}", stream.tags))
                            }
                        }
                    }
                    send_lines(&sock, *addr, &lines);
                }
                // Pacing of the traffic, not a wait for a result.
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Steady {
            stop,
            thread: Some(thread),
        }
    }
}

/// Sends `lines` in datagrams of at most [`DATAGRAM_BYTES`].
fn send_lines(sock: &UdpSocket, addr: SocketAddr, lines: &[String]) {
    let mut datagram = String::new();
    for line in lines {
        if !datagram.is_empty() && datagram.len() + 1 + line.len() > DATAGRAM_BYTES {
            let _ = sock.send_to(datagram.as_bytes(), addr);
            datagram.clear();
        }
        if !datagram.is_empty() {
            datagram.push('\n');
        }
        datagram.push_str(line);
    }
    if !datagram.is_empty() {
        let _ = sock.send_to(datagram.as_bytes(), addr);
    }
}

impl Drop for Steady {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
