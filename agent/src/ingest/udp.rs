//! The StatsD UDP receiver: one OS thread that reads datagrams, parses them into a batch and
//! hands the batch to the pipeline when the socket runs dry or the batch is full.
//!
//! A dedicated thread (not a tokio task) because the loop is pure syscalls and parsing: it
//! never waits on anything but the socket, and it keeps the async workers free for HTTP.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::thread::JoinHandle;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use skewwatch_detectors::observation::{Batch, Rejections};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ingest::{statsd, submit};
use crate::telemetry::{SelfMetrics, Source};

/// Largest datagram read; StatsD clients keep datagrams under the MTU, but a loopback client
/// may send up to 64 KiB.
const MAX_DATAGRAM: usize = 65_536;
/// Records per batch before it is handed over even if the socket still has data.
const BATCH_RECORDS: usize = 4096;
/// How often the thread wakes to check for shutdown when no data arrives.
const POLL_MS: u16 = 100;

/// Binds the StatsD socket with a large receive buffer.
pub fn bind(addr: SocketAddr, receive_buffer_bytes: usize) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // The kernel caps this at net.core.rmem_max; a smaller buffer still works.
    if let Err(error) = socket.set_recv_buffer_size(receive_buffer_bytes) {
        tracing::warn!(%error, "Could not set the StatsD receive buffer size.");
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Starts the receiver thread. It stops when `cancel` fires.
pub fn spawn(
    socket: UdpSocket,
    tx: mpsc::Sender<Batch>,
    metrics: SelfMetrics,
    cancel: CancellationToken,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("statsd-udp".into())
        .spawn(move || receive_loop(&socket, &tx, &metrics, &cancel))
}

fn receive_loop(
    socket: &UdpSocket,
    tx: &mpsc::Sender<Batch>,
    metrics: &SelfMetrics,
    cancel: &CancellationToken,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut batch = Batch::with_capacity(BATCH_RECORDS);
    let mut rejected = Rejections::default();
    let mut datagrams = 0u64;
    while !cancel.is_cancelled() {
        match socket.recv(&mut buf) {
            Ok(n) => {
                datagrams += 1;
                statsd::parse_datagram(&buf[..n], &mut batch, &mut rejected);
                if batch.len() >= BATCH_RECORDS {
                    flush(tx, metrics, &mut batch, &mut rejected, &mut datagrams);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                flush(tx, metrics, &mut batch, &mut rejected, &mut datagrams);
                let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLIN)];
                if let Err(error) = poll(&mut fds, PollTimeout::from(POLL_MS)) {
                    if error != nix::errno::Errno::EINTR {
                        tracing::error!(%error, "Polling the StatsD socket failed.");
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::warn!(%error, "Receiving from the StatsD socket failed.");
            }
        }
    }
    flush(tx, metrics, &mut batch, &mut rejected, &mut datagrams);
    tracing::info!("StatsD receiver stopped.");
}

fn flush(
    tx: &mpsc::Sender<Batch>,
    metrics: &SelfMetrics,
    batch: &mut Batch,
    rejected: &mut Rejections,
    datagrams: &mut u64,
) {
    if *datagrams > 0 {
        metrics.datagrams.inc_by(*datagrams);
        *datagrams = 0;
    }
    if rejected.total() > 0 {
        metrics.add_rejections(Source::Statsd, rejected);
        *rejected = Rejections::default();
    }
    if !batch.is_empty() {
        let full = std::mem::replace(batch, Batch::with_capacity(BATCH_RECORDS));
        // A full queue is counted inside `submit`; UDP has no one to tell.
        let _ = submit(tx, metrics, Source::Statsd, full);
    }
}
