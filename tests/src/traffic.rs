//! Live StatsD traffic for the delivery tests: a background sender that can switch between
//! healthy traffic and an error surge, so an alert fires and later resolves.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

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
