//! The StatsD UDP receiver: one OS thread that reads datagrams in batches, parses them into a
//! [`Batch`] and hands the batch to the pipeline when it is full or has waited long enough.
//!
//! A dedicated thread (not a tokio task) because the loop is pure syscalls and parsing: it
//! never waits on anything but the socket, and it keeps the async workers free for HTTP.
//!
//! Cost per datagram is what limits a StatsD receiver, so the loop is built to spend few
//! system calls and wake-ups on each (docs/performance.md has the measurements):
//!
//! - `recvmmsg` takes up to [`RECV_BATCH`] datagrams per system call.
//! - The socket asks for a large receive buffer (`SO_RCVBUFFORCE` when the process may,
//!   else `SO_RCVBUF`, which the kernel caps at `net.core.rmem_max`), so bursts queue in the
//!   kernel instead of being dropped.
//! - When the socket runs dry the thread naps for [`IDLE_NAP`] and reads again; only when it
//!   is still dry does it block in `poll`. At a sidecar's rate it wakes a few hundred times a
//!   second rather than once per datagram.
//! - A batch goes to the pipeline when it holds [`BATCH_RECORDS`] records or its first record
//!   has waited [`FLUSH_AFTER`], so a trickle of traffic costs the pipeline a few wake-ups a
//!   second, not one per datagram.
//! - Datagrams the kernel dropped because the buffer was full are counted: `SO_RXQ_OVFL`
//!   makes the kernel attach its cumulative drop count to each datagram it delivers, and the
//!   growth of that count feeds `skewwatch_statsd_kernel_drops_total`. The count travels with
//!   the *next* datagram delivered, so drops show up once traffic resumes.

#![expect(
    clippy::disallowed_types,
    reason = "the StatsD receiver is a blocking thread, outside tokio's clock"
)]

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, MultiHeaders, recvmmsg, setsockopt, sockopt,
};
use prometheus::{IntCounter, Registry};
use skewwatch_detectors::observation::{Batch, Rejections};
use socket2::{Domain, Protocol, Socket, Type};
use tokio_util::sync::CancellationToken;

use super::config::{StatsdConfig, StatsdMapping};
use super::mapping::Mapper;
use super::parse;
use crate::ingest::IngestQueue;
use crate::stage::Stage;
use crate::telemetry::{IngestMetrics, Registrar, Source, SourceMetrics};

/// Largest datagram read: a UDP payload is at most 65,507 bytes over IPv4. StatsD clients
/// keep datagrams under the MTU, but a loopback client may send more. The buffers are
/// allocated untouched, so only the pages datagrams actually fill become resident.
pub const MAX_DATAGRAM: usize = 65_536;
/// Datagrams read per `recvmmsg` call.
pub const RECV_BATCH: usize = 64;
/// Records per batch before it is handed over.
pub const BATCH_RECORDS: usize = 4096;
/// Longest a record waits in a partly filled batch before the batch is handed over.
pub const FLUSH_AFTER: Duration = Duration::from_millis(20);
/// Pause after the socket runs dry, so datagrams arriving at a low rate are read in groups.
/// Far below what the receive buffer absorbs: at 150,000 datagrams a second (3 M lines/s) a
/// nap queues about 300 datagrams, under 1 MiB, a small part of the default
/// `statsd.receive_buffer_bytes`.
pub const IDLE_NAP: Duration = Duration::from_millis(2);
/// First pause after a receive error; it doubles while errors last.
const ERROR_BACKOFF_MIN: Duration = Duration::from_millis(1);
/// Longest pause after a receive error.
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often the thread wakes to check for shutdown when no data arrives.
const POLL_MS: u16 = 100;

/// Binds the StatsD socket with a large receive buffer and kernel drop reporting.
pub fn bind(addr: SocketAddr, receive_buffer_bytes: usize) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // SO_RCVBUFFORCE passes net.core.rmem_max when the process has CAP_NET_ADMIN; otherwise
    // SO_RCVBUF, which the kernel caps at rmem_max. A smaller buffer still works.
    if setsockopt(&socket, sockopt::RcvBufForce, &receive_buffer_bytes).is_err()
        && let Err(error) = socket.set_recv_buffer_size(receive_buffer_bytes)
    {
        tracing::warn!(%error, "Could not set the StatsD receive buffer size.");
    }
    // The kernel reports twice the usable size (it counts its bookkeeping too).
    let granted = socket.recv_buffer_size().unwrap_or(0) / 2;
    if granted < receive_buffer_bytes {
        tracing::warn!(
            requested_bytes = receive_buffer_bytes,
            granted_bytes = granted,
            "The StatsD receive buffer is smaller than configured; raise net.core.rmem_max."
        );
    }
    if let Err(error) = setsockopt(&socket, sockopt::RxqOvfl, &1) {
        tracing::warn!(%error, "Kernel drop counting (SO_RXQ_OVFL) is unavailable.");
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Why the StatsD input could not start.
#[derive(Debug, thiserror::Error)]
pub enum StatsdError {
    /// The listener could not be bound (the port is in use, or the address is not local).
    #[error(
        "binding the StatsD listener on {addr}: {source}; free the port or change listen.statsd"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The socket error.
        source: io::Error,
    },
    /// The receiver thread could not be started (the process is out of threads or memory).
    #[error("starting the StatsD receiver thread: {0}")]
    Thread(io::Error),
}

/// The StatsD input's counters, registered by the input and resolved once, so the receiver
/// thread counts without a lock.
#[derive(Debug, Clone)]
pub struct StatsdMetrics {
    /// The `source="statsd"` ingest counters.
    source: SourceMetrics,
    /// `skewwatch_ingest_skipped_total{source="statsd",reason="unmapped"}`.
    unmapped: IntCounter,
    /// UDP datagrams received.
    datagrams: IntCounter,
    /// Kernel receive-queue drops reported for the socket (SO_RXQ_OVFL).
    kernel_drops: IntCounter,
    /// Errors receiving from the socket (other than "no data").
    receive_errors: IntCounter,
}

impl StatsdMetrics {
    /// Registers the input's own metrics in `registry` and resolves its series of the shared
    /// ingest counters. Registered whether StatsD listens or not, so the page has one shape.
    pub fn register(registry: &Registry, ingest: &IngestMetrics) -> prometheus::Result<Self> {
        let r = Registrar(registry);
        Ok(StatsdMetrics {
            source: ingest.source(Source::Statsd).clone(),
            unmapped: ingest.skipped(Source::Statsd, "unmapped"),
            receive_errors: r.counter(
                "skewwatch_statsd_receive_errors_total",
                "Errors receiving from the StatsD socket; the receiver backs off after each.",
            )?,
            datagrams: r.counter(
                "skewwatch_statsd_datagrams_total",
                "UDP datagrams received on the StatsD listener.",
            )?,
            kernel_drops: r.counter(
                "skewwatch_statsd_kernel_drops_total",
                "Datagrams the kernel dropped because the StatsD socket's receive buffer was full.",
            )?,
        })
    }
}

/// The StatsD input with its socket bound and nothing started: [`StatsdConfig::bind`] makes
/// it, [`BoundStatsd::spawn`] starts the receiver thread in a stage.
#[derive(Debug)]
pub struct BoundStatsd {
    socket: UdpSocket,
    addr: SocketAddr,
    mappings: Arc<[StatsdMapping]>,
    metrics: StatsdMetrics,
}

impl StatsdConfig {
    /// Binds the StatsD socket at `addr` with this section's receive buffer, the first half of
    /// the input's start: a port in use fails here, before any task runs.
    pub fn bind(
        &self,
        addr: SocketAddr,
        metrics: StatsdMetrics,
    ) -> Result<BoundStatsd, StatsdError> {
        let socket = bind(addr, self.receive_buffer_bytes)
            .map_err(|source| StatsdError::Bind { addr, source })?;
        let addr = socket
            .local_addr()
            .map_err(|source| StatsdError::Bind { addr, source })?;
        Ok(BoundStatsd {
            socket,
            addr,
            mappings: Arc::from(self.mappings.clone()),
            metrics,
        })
    }
}

impl BoundStatsd {
    /// Where the socket is bound (the port the OS chose when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts the receiver thread into `stage`, handing batches to `queue`; it stops with the
    /// stage, after handing over its last batch.
    pub fn spawn(self, queue: IngestQueue, stage: &mut Stage) -> Result<(), StatsdError> {
        let thread = spawn(
            self.socket,
            queue,
            self.metrics,
            self.mappings,
            stage.stop_token(),
        )
        .map_err(StatsdError::Thread)?;
        stage.watch_thread("statsd receiver", thread);
        Ok(())
    }
}

/// Starts the receiver thread, applying `mappings` to lines of other metric names. It stops
/// when `cancel` fires, after handing over its last batch.
pub fn spawn(
    socket: UdpSocket,
    queue: IngestQueue,
    metrics: StatsdMetrics,
    mappings: Arc<[StatsdMapping]>,
    cancel: CancellationToken,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("statsd-udp".into())
        .spawn(move || receive_loop(&socket, &queue, &metrics, Mapper::new(mappings), &cancel))
}

/// The receive buffers and what the kernel reported with the last datagrams.
struct Datagrams {
    /// `RECV_BATCH` buffers of `MAX_DATAGRAM` bytes, back to back.
    buf: Vec<u8>,
    /// Length of each datagram of the last call.
    lens: [usize; RECV_BATCH],
    /// Datagrams of the last call.
    count: usize,
    /// The kernel's cumulative drop count for this socket, as last reported.
    drops_seen: u32,
}

impl Datagrams {
    fn new() -> Self {
        Datagrams {
            buf: vec![0; RECV_BATCH * MAX_DATAGRAM],
            lens: [0; RECV_BATCH],
            count: 0,
            drops_seen: 0,
        }
    }

    /// Reads up to `RECV_BATCH` datagrams without blocking; returns how many the kernel
    /// dropped since the last report (0 when it did not say).
    fn receive(&mut self, fd: RawFd) -> nix::Result<u64> {
        // Fresh headers every call: the kernel shrinks each header's control length to what
        // it wrote, and `recvmmsg` does not restore it, so reused headers would stop
        // carrying the drop count after the first datagram without one.
        let mut headers = MultiHeaders::<()>::preallocate(RECV_BATCH, Some(nix::cmsg_space!(u32)));
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
            .buf
            .chunks_exact_mut(MAX_DATAGRAM)
            .map(|b| [IoSliceMut::new(b)])
            .collect();
        let results = recvmmsg(fd, &mut headers, &mut iovs, MsgFlags::MSG_DONTWAIT, None)?;
        let mut count = 0;
        let mut reported = None;
        for (len, msg) in self.lens.iter_mut().zip(results) {
            *len = msg.bytes;
            count += 1;
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::RxqOvfl(n) = c {
                        reported = Some(n);
                    }
                }
            }
        }
        self.count = count;
        // Cumulative and wrapping at 2^32; the latest datagram's count is the newest.
        Ok(match reported {
            Some(n) => {
                let new = n.wrapping_sub(self.drops_seen);
                self.drops_seen = n;
                u64::from(new)
            }
            None => 0,
        })
    }

    /// The datagrams of the last call.
    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.buf
            .chunks_exact(MAX_DATAGRAM)
            .zip(&self.lens)
            .take(self.count)
            .map(|(b, &len)| &b[..len.min(MAX_DATAGRAM)])
    }
}

/// The batch being filled and the counts that go with it.
struct Pending<'a> {
    queue: &'a IngestQueue,
    metrics: &'a StatsdMetrics,
    batch: Batch,
    rejected: Rejections,
    datagrams: u64,
    /// `statsd.mappings`, applied to lines of other metric names.
    mapper: Mapper,
    /// Lines no mapping took, since the last hand-over.
    skipped: u64,
    /// When the first record (or datagram) of the batch arrived.
    since: Option<Instant>,
}

impl<'a> Pending<'a> {
    /// An empty batch, with the StatsD counters resolved once.
    fn new(queue: &'a IngestQueue, metrics: &'a StatsdMetrics, mapper: Mapper) -> Pending<'a> {
        Pending {
            queue,
            metrics,
            batch: Batch::with_capacity(BATCH_RECORDS),
            rejected: Rejections::default(),
            datagrams: 0,
            mapper,
            skipped: 0,
            since: None,
        }
    }

    /// Parses one datagram into the batch, handing it over when full.
    fn parse(&mut self, datagram: &[u8], now: Instant) {
        self.since.get_or_insert(now);
        self.datagrams += 1;
        parse::parse_datagram_mapped(
            datagram,
            &mut self.mapper,
            &mut self.batch,
            &mut self.rejected,
            &mut self.skipped,
        );
        if self.batch.len() >= BATCH_RECORDS {
            self.flush();
        }
    }

    /// When the batch must be handed over, if it holds anything.
    fn due(&self) -> Option<Instant> {
        self.since.map(|t| t + FLUSH_AFTER)
    }

    /// Hands the batch to the pipeline and adds the counts to the self-metrics.
    fn flush(&mut self) {
        self.since = None;
        if self.datagrams > 0 {
            self.metrics.datagrams.inc_by(self.datagrams);
            self.datagrams = 0;
        }
        if self.skipped > 0 {
            self.metrics.unmapped.inc_by(self.skipped);
            self.skipped = 0;
        }
        if self.rejected.total() > 0 {
            self.metrics.source.add_rejections(&self.rejected);
            self.rejected = Rejections::default();
        }
        if !self.batch.is_empty() {
            let full = std::mem::replace(&mut self.batch, Batch::with_capacity(BATCH_RECORDS));
            // A full queue is counted inside `submit`; UDP has no one to tell.
            let _ = self.queue.submit(&self.metrics.source, full);
        }
    }
}

/// The receiver's state machine in one place (read, dry and nap, idle in `poll`, error and
/// back off), so its transitions can be read together; each state's work is a call.
fn receive_loop(
    socket: &UdpSocket,
    queue: &IngestQueue,
    metrics: &StatsdMetrics,
    mapper: Mapper,
    cancel: &CancellationToken,
) {
    let mut datagrams = Datagrams::new();
    let mut pending = Pending::new(queue, metrics, mapper);
    let fd = socket.as_raw_fd();
    // Whether the last empty read came right after a nap.
    let mut napped = false;
    // The pause after the last receive error, while errors last.
    let mut errors: Option<Duration> = None;
    while !cancel.is_cancelled() {
        match datagrams.receive(fd) {
            Ok(dropped) => {
                napped = false;
                if dropped > 0 {
                    metrics.kernel_drops.inc_by(dropped);
                }
                let now = Instant::now();
                for d in datagrams.iter() {
                    pending.parse(d, now);
                }
                if pending.due().is_some_and(|due| now >= due) {
                    pending.flush();
                }
            }
            Err(Errno::EAGAIN) => {
                // Dry. Hand over a batch that has waited long enough, then nap so the next
                // datagrams arrive together: one sleep per few datagrams at a sidecar's rate,
                // rather than a wake-up (two context switches) per datagram.
                let now = Instant::now();
                if pending.due().is_some_and(|due| now >= due) {
                    pending.flush();
                }
                if !napped {
                    std::thread::sleep(IDLE_NAP);
                    napped = true;
                    continue;
                }
                napped = false;
                wait_for_data(socket, &mut pending);
            }
            Err(Errno::EINTR) => {}
            Err(error) => {
                pending.flush();
                errors = Some(back_off(error, errors, metrics));
                continue;
            }
        }
        if errors.take().is_some() {
            tracing::info!("Receiving from the StatsD socket works again.");
        }
    }
    pending.flush();
    tracing::info!("StatsD receiver stopped.");
}

/// After a receive error: counts it, logs the first of a run, and sleeps. A persistent error (a
/// socket in a bad state, a kernel out of memory) must not spin a core, so the pause doubles,
/// up to a bound, while errors last. Returns the pause taken.
fn back_off(error: Errno, last: Option<Duration>, metrics: &StatsdMetrics) -> Duration {
    metrics.receive_errors.inc();
    if last.is_none() {
        tracing::warn!(%error, "Receiving from the StatsD socket failed; backing off.");
    }
    let pause = last.map_or(ERROR_BACKOFF_MIN, |p| (p * 2).min(ERROR_BACKOFF_MAX));
    std::thread::sleep(pause);
    pause
}

/// Still dry after a nap: idle. Sleeps in `poll` until there is data, the batch is due, or it
/// is time to check for shutdown.
fn wait_for_data(socket: &UdpSocket, pending: &mut Pending<'_>) {
    let timeout = match pending.due() {
        Some(due) => {
            let ms = due.saturating_duration_since(Instant::now()).as_millis();
            PollTimeout::from(u16::try_from(ms).unwrap_or(POLL_MS))
        }
        None => PollTimeout::from(POLL_MS),
    };
    let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(0) => pending.flush(),
        Ok(_) | Err(Errno::EINTR) => {}
        Err(error) => {
            tracing::error!(%error, "Polling the StatsD socket failed.");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Registry;
    use tokio::sync::mpsc;

    fn agent_side() -> (
        UdpSocket,
        (IngestMetrics, StatsdMetrics),
        mpsc::Receiver<crate::ingest::Queued>,
        IngestQueue,
    ) {
        let socket = bind("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        let registry = Registry::new();
        let ingest = IngestMetrics::register(&registry).unwrap();
        let metrics = (
            ingest.clone(),
            StatsdMetrics::register(&registry, &ingest).unwrap(),
        );
        let (tx, rx) = IngestQueue::new(1024, 1 << 30);
        (socket, metrics, rx, tx)
    }

    /// Receives batches until `records` records arrived or two seconds passed.
    fn collect(rx: &mut mpsc::Receiver<crate::ingest::Queued>, records: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut got = 0;
        while got < records && Instant::now() < deadline {
            match rx.try_recv() {
                Ok(q) => got += q.batch.len(),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        got
    }

    #[test]
    fn every_line_of_many_datagrams_arrives_and_rejections_are_counted() {
        let (socket, (ingest, metrics), mut rx, tx) = agent_side();
        let addr = socket.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let thread = spawn(socket, tx, metrics.clone(), Arc::from([]), cancel.clone()).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        // More datagrams than one recvmmsg call takes, each two good lines and a bad one.
        for i in 0..(3 * RECV_BATCH) {
            let d = format!(
                "skewwatch.request:{i}|ms|#group:g,shard:s{i}\n\
                 garbage\n\
                 skewwatch.request:1|c|#group:g,shard:t"
            );
            client.send_to(d.as_bytes(), addr).unwrap();
        }
        assert_eq!(collect(&mut rx, 6 * RECV_BATCH), 6 * RECV_BATCH);
        cancel.cancel();
        thread.join().unwrap();
        assert_eq!(metrics.datagrams.get(), 3 * RECV_BATCH as u64);
        let rejected = ingest
            .rejected
            .with_label_values(&["statsd", "malformed"])
            .get();
        assert_eq!(rejected, 3 * RECV_BATCH as u64);
        assert_eq!(metrics.kernel_drops.get(), 0);
    }

    #[test]
    fn a_trickle_is_handed_over_within_the_flush_delay() {
        let (socket, (_, metrics), mut rx, tx) = agent_side();
        let addr = socket.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let thread = spawn(socket, tx, metrics, Arc::from([]), cancel.clone()).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .send_to(b"skewwatch.request:1|ms|#group:g,shard:s", addr)
            .unwrap();
        let sent = Instant::now();
        assert_eq!(collect(&mut rx, 1), 1);
        // Generous bound for a loaded machine; the point is that it does not wait for more.
        assert!(sent.elapsed() < Duration::from_secs(1));
        cancel.cancel();
        thread.join().unwrap();
    }

    #[test]
    fn kernel_drops_are_counted_when_the_buffer_overflows() {
        // A tiny buffer and a receiver that is not reading: the kernel must drop, and the
        // count arrives with the first datagram read afterwards.
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        setsockopt(&socket, sockopt::RxqOvfl, &1).unwrap();
        socket
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        socket.set_nonblocking(true).unwrap();
        let socket: UdpSocket = socket.into();
        let addr = socket.local_addr().unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        let line = [b'x'; 1000];
        for _ in 0..200 {
            client.send_to(&line, addr).unwrap();
        }
        let mut d = Datagrams::new();
        let (mut dropped, mut received) = (0, 0);
        let mut drain = |d: &mut Datagrams| loop {
            match d.receive(socket.as_raw_fd()) {
                Ok(n) => {
                    dropped += n;
                    received += d.count as u64;
                }
                Err(Errno::EAGAIN) => break,
                Err(e) => panic!("{e}"),
            }
        };
        // What was queued before the overflow carries no drop count...
        drain(&mut d);
        // ...the next datagram delivered does.
        client.send_to(b"", addr).unwrap();
        drain(&mut d);
        assert!(dropped > 0, "nothing dropped");
        assert_eq!(received + dropped, 201);
    }
}
