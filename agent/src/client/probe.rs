//! What `skewwatch bench` reads besides its own counters: the agent's self-metrics from
//! `/metrics`, the agent process's CPU time and memory from `/proc/<pid>`, and the host's UDP
//! receive-buffer errors from `/proc/net/snmp`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::text::Scrape;
use crate::client;

/// The agent's self-metrics that account for every record sent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AgentCounters {
    /// `skewwatch_ingest_records_total{source}`.
    pub records: f64,
    /// `skewwatch_ingest_requests_total{source}`.
    pub requests: f64,
    /// `skewwatch_ingest_rejected_total{source}`, all reasons.
    pub rejected: f64,
    /// `skewwatch_ingest_dropped_total{source}`, all reasons.
    pub dropped: f64,
    /// `skewwatch_statsd_kernel_drops_total` (datagrams).
    pub kernel_drops: f64,
    /// `skewwatch_statsd_datagrams_total`.
    pub datagrams: f64,
}

impl AgentCounters {
    /// Scrapes `/metrics` at `addr` and reads the counters of `source`.
    pub fn scrape(addr: SocketAddr, source: &str) -> anyhow::Result<AgentCounters> {
        let resp = client::get(addr, "/metrics", Duration::from_secs(5))?;
        anyhow::ensure!(
            resp.status == 200,
            "GET /metrics on {addr} answered {}",
            resp.status
        );
        Ok(AgentCounters::read(&Scrape::parse(&resp.text())?, source))
    }

    /// The counters of `source` in a scrape.
    pub fn read(scrape: &Scrape, source: &str) -> AgentCounters {
        let by_source = [("source", source)];
        AgentCounters {
            records: scrape.sum("skewwatch_ingest_records_total", &by_source),
            requests: scrape.sum("skewwatch_ingest_requests_total", &by_source),
            rejected: scrape.sum("skewwatch_ingest_rejected_total", &by_source),
            dropped: scrape.sum("skewwatch_ingest_dropped_total", &by_source),
            kernel_drops: scrape.sum("skewwatch_statsd_kernel_drops_total", &[]),
            datagrams: scrape.sum("skewwatch_statsd_datagrams_total", &[]),
        }
    }

    /// Records the agent has accounted for: accepted, rejected or dropped.
    pub fn accounted(&self) -> f64 {
        self.records + self.rejected + self.dropped
    }

    /// `self - earlier`, counter by counter.
    pub fn since(&self, earlier: &AgentCounters) -> AgentCounters {
        AgentCounters {
            records: self.records - earlier.records,
            requests: self.requests - earlier.requests,
            rejected: self.rejected - earlier.rejected,
            dropped: self.dropped - earlier.dropped,
            kernel_drops: self.kernel_drops - earlier.kernel_drops,
            datagrams: self.datagrams - earlier.datagrams,
        }
    }
}

/// CPU time and memory of a process, from `/proc/<pid>`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessSample {
    /// User plus system CPU time of all threads, seconds.
    pub cpu_secs: f64,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
    /// Peak resident set size, bytes.
    pub hwm_bytes: u64,
}

impl ProcessSample {
    /// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`.
    pub fn read(pid: u32) -> anyhow::Result<ProcessSample> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command name, which is in parentheses and may hold spaces:
        // state is field 3, utime 14 and stime 15 (1-based), in USER_HZ ticks (100 a second
        // on Linux, whatever the kernel's HZ).
        let after = stat
            .rsplit_once(')')
            .map(|(_, a)| a)
            .ok_or_else(|| anyhow::anyhow!("unexpected /proc/{pid}/stat"))?;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let tick = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let cpu_secs = (tick(11) + tick(12)) / 100.0;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        Ok(ProcessSample {
            cpu_secs,
            rss_bytes: kib("VmRSS:"),
            hwm_bytes: kib("VmHWM:"),
        })
    }
}

/// CPU seconds (user plus system) of each thread of a process, summed by thread name
/// (`statsd-udp`, `tokio-rt-worker`, ...), from `/proc/<pid>/task/*/stat`. Threads that
/// ended are not counted; empty when unreadable.
pub fn thread_cpu(pid: u32) -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let tick = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        *by_name.entry(name).or_insert(0.0) += (tick(11) + tick(12)) / 100.0;
    }
    by_name
}

/// Host-wide CPU time from the first line of `/proc/stat`, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostCpu {
    /// User, system, irq and softirq time of every CPU.
    pub busy: f64,
    /// The softirq part of `busy`, where the kernel does most of a loopback datagram's
    /// delivery.
    pub softirq: f64,
    /// Time the hypervisor ran something else while this machine wanted a CPU.
    pub steal: f64,
}

impl HostCpu {
    /// Reads `/proc/stat`; zeros when unreadable.
    pub fn read() -> HostCpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let fields: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0.0))
            .collect();
        // user nice system idle iowait irq softirq steal guest guest_nice, in USER_HZ ticks.
        let get = |i: usize| fields.get(i).copied().unwrap_or(0.0) / 100.0;
        HostCpu {
            busy: get(0) + get(1) + get(2) + get(5) + get(6),
            softirq: get(6),
            steal: get(7),
        }
    }
}

/// `Udp: RcvbufErrors` of `/proc/net/snmp` (host-wide, IPv4): datagrams the kernel dropped
/// because a socket's receive buffer was full. 0 when unreadable.
pub fn udp_rcvbuf_errors() -> u64 {
    let Ok(snmp) = std::fs::read_to_string("/proc/net/snmp") else {
        return 0;
    };
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_matching_series_only() {
        let text = "# HELP skewwatch_ingest_records_total x\n\
            skewwatch_ingest_records_total{source=\"http\"} 5\n\
            skewwatch_ingest_records_total{source=\"statsd\"} 7\n\
            skewwatch_ingest_records_totalx{source=\"statsd\"} 100\n\
            skewwatch_ingest_dropped_total{source=\"statsd\",reason=\"queue_full\"} 2\n\
            skewwatch_ingest_dropped_total{source=\"statsd\",reason=\"shutdown\"} 1\n\
            skewwatch_statsd_kernel_drops_total 3\n";
        let c = AgentCounters::read(&Scrape::parse(text).unwrap(), "statsd");
        assert_eq!(c.records, 7.0);
        assert_eq!(c.dropped, 3.0);
        assert_eq!(c.kernel_drops, 3.0);
        assert_eq!(c.datagrams, 0.0);
    }

    #[test]
    fn reads_this_process() {
        let me = ProcessSample::read(std::process::id()).unwrap();
        assert!(me.rss_bytes > 0 && me.hwm_bytes >= me.rss_bytes);
        assert!(!thread_cpu(std::process::id()).is_empty());
    }
}
