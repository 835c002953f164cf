//! tcp-stream: bulk transfer from the client's flows to the server, measured at both ends.

use crate::report::{Kind, Role};
use crate::tcp::cost::{CostMeter, per_mb, us_per_mb};
use crate::tcp::message::{FlowRate, Sides, StreamInterval, StreamSummary, Verify, jain};
use crate::tcp::pattern::{Pattern, flow_seed};
use crate::tcp::proto::{Finish, ServerFlow, TestKind, TestSpec};
use crate::tcp::{
    ETHERNET_SEGMENT, Engine, Io, LARGE_SEGMENT, Session, Side, SockOpts, io_ctx, usable_cpus,
};
use crate::udp_echo::BenchError;
use netsteer_sock::buf::AlignedBuf;
use netsteer_sock::cpu::{ThreadUsage, current_cpu, pin_current_thread};
use netsteer_sock::epoll::{Epoll, Interest};
use netsteer_sock::tcp::{set_recv_low_water, tcp_info, wait_readable};
use netsteer_sock::zerocopy::{
    Completions, ZeroCopyReceiver, enable_zerocopy_send, is_optmem_full, read_completions,
    send_zerocopy,
};
use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

pub const BENCH: &str = "tcp-stream";

/// The zero-copy receive window (tcp_mmap's chunk) and SO_RCVLOWAT: waking only for a whole
/// window keeps the kernel mapping rather than falling back to copying a small queue.
const ZC_WINDOW: usize = 512 << 10;
/// SO_RCVLOWAT of a copying receiver whose sender writes less than SMALL_WRITE at a time.
const COPY_LOW_WATER: usize = 64 << 10;
/// SO_RCVLOWAT of a copying receiver of large writes, where it pays (see [`low_water`]).
const BULK_LOW_WATER: u32 = 128 << 10;
const SMALL_WRITE: u32 = 16 << 10;

/// Writes small enough that one segment wakes a reader for little (see `CopyRx::prepare`).
pub(crate) fn small_writes(write_size: u32) -> bool {
    write_size < SMALL_WRITE
}

/// Whether a copying receiver sleeps behind the COPY_LOW_WATER mark: for small writes, unless
/// a read size was asked for, which is taken as it is. `auto`'s engine rule (`Io::of`) keys on
/// the same answer.
pub(crate) fn reads_behind_low_water(write_size: u32, read_size: Option<u32>) -> bool {
    read_size.is_none() && small_writes(write_size)
}

/// The SO_RCVLOWAT a copying receiver sets on each flow, if any: what it takes for the kernel
/// to wake the reader. `segment` is the path's (see `server::path_segment`); `flows` share
/// `cpus` receiving CPUs.
///
/// - Small writes, no read size asked: 64 KiB, capped at the read buffer, so a 16-byte
///   segment does not wake a reader (see [`CopyRx::prepare`]).
/// - A read size asked: none; the reads are taken as asked (seed 003's `iperf3 -l 16` case).
/// - Large writes, on loopback-size segments, or on any path with at most one flow per
///   receiving CPU: 128 KiB. The receive softirq that queues the data runs on the sending
///   CPU (loopback, veth), and each wake-up of a sleeping reader is a cross-CPU wake paid
///   there (`sock_def_readable`); the sending CPU is the bottleneck, at 100 % busy. Waking
///   for two 64 KiB skbs instead of each one halved the reader's sleeps per MiB (loopback,
///   1 flow: 8.0 to 3.4), and the rate rose (1 flow: loopback 1.35× iperf3 against 0.96×
///   without, veth 1.16× against 0.89×; loopback 2 flows polled 1.14× against 0.79×),
///   BENCHMARKS.md seventh pass.
///   64 KiB wakes per skb, as no mark does, and changed nothing.
/// - Large writes, several flows per receiving CPU on Ethernet-size segments: none. There the
///   mark cost rate though it cut the sleeps as much (veth 2 flows threaded: 0.91× against
///   1.01× without; 4 flows polled: half speed). Not through the window: `ss` shows these
///   flows' rcvbuf autotuned to 8-32 MiB with or without the mark, far above it. Measured,
///   not explained.
pub(crate) fn low_water(
    write_size: u32,
    read_size: Option<u32>,
    segment: u32,
    flows: u32,
    cpus: usize,
) -> Option<u32> {
    if reads_behind_low_water(write_size, read_size) {
        Some(COPY_LOW_WATER.min(read_buffer_len(write_size)) as u32)
    } else if read_size.is_some() {
        None
    } else if segment >= LARGE_SEGMENT || flows as usize <= cpus.max(1) {
        Some(BULK_LOW_WATER)
    } else {
        None
    }
}

/// How many reads a polling receiver gives one ready flow before the next ready flow's turn.
///
/// Ethernet-size segments and large writes: one, as iperf3's select() loop does, so every
/// flow's queue is read (and its window opened, from the reader's CPU) once a round. Measured
/// on veth with page-aligned buffers, one read against sixteen: 3 flows on one CPU 1.20× the
/// threaded receiver, 4 flows 1.14× (1.11× iperf3, 10 of 12 pairs), 6 flows 1.13× sixteen
/// reads (BENCHMARKS.md, issue 14 sixth pass). Sixteen otherwise: with loopback's 64 KiB
/// segments one read a turn cost a third (4 flows: 14.6 against 20.2 Gbit/s), and small
/// writes behind the low-water mark ran 0.95× with one.
pub(crate) fn reads_per_turn(segment: u32, write_size: u32) -> u32 {
    if segment < LARGE_SEGMENT && !small_writes(write_size) {
        1
    } else {
        16
    }
}

fn read_buffer_len(write_size: u32) -> usize {
    (write_size as usize).clamp(64 << 10, 1 << 20)
}

struct Verifier {
    pattern: Pattern,
    first_mismatch: Option<u64>,
}

impl Verifier {
    fn check(&mut self, offset: u64, data: &[u8]) {
        if self.first_mismatch.is_none()
            && let Some(i) = self.pattern.first_mismatch(offset, data)
        {
            self.first_mismatch = Some(offset + i as u64);
        }
    }
}

/// The server side of one flow: read until EOF, counting (and with `verify`, checking) bytes.
pub(crate) fn receive(
    sock: &TcpStream,
    spec: &TestSpec,
    test_id: u64,
    flow: u32,
    low_water: Option<u32>,
    stop: &AtomicBool,
    cpus: &mut BTreeSet<u32>,
) -> ServerFlow {
    if !spec.zerocopy_recv {
        let mut rx = CopyRx::new(spec, test_id, flow, low_water);
        let r = rx.prepare(sock).and_then(|()| {
            loop {
                match rx.pump(sock, 1024)? {
                    Pumped::Eof => return Ok(()),
                    Pumped::More | Pumped::Drained => {
                        cpus.extend(current_cpu());
                        if stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                    }
                }
            }
        });
        return rx.finish(r.err().filter(|_| !stop.load(Ordering::Relaxed)));
    }
    let buf_len = read_len(spec);
    let mut verifier = verifier(spec, test_id, flow, buf_len);
    let mut out = ServerFlow::default();
    let r = receive_zerocopy(sock, buf_len, &mut verifier, &mut out, stop, cpus);
    if let Err(e) = r
        && !stop.load(Ordering::Relaxed)
    {
        out.error = Some(e.to_string());
    }
    out.first_mismatch = verifier.and_then(|v| v.first_mismatch);
    out
}

pub(crate) fn read_len(spec: &TestSpec) -> usize {
    spec.read_size
        .map_or_else(|| read_buffer_len(spec.write_size), |r| r as usize)
}

fn verifier(spec: &TestSpec, test_id: u64, flow: u32, buf_len: usize) -> Option<Verifier> {
    spec.verify.then(|| Verifier {
        pattern: Pattern::new(flow_seed(test_id, flow), buf_len.max(ZC_WINDOW)),
        first_mismatch: None,
    })
}

/// What one [`CopyRx::pump`] ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pumped {
    /// The sender closed: everything was read.
    Eof,
    /// A non-blocking socket has nothing more queued (above its low-water mark).
    Drained,
    /// The read budget ran out with data possibly left.
    More,
}

/// The copying receiver of one flow, for a blocking socket (a thread per flow) or a
/// non-blocking one (served from epoll with others).
pub(crate) struct CopyRx {
    /// Page-aligned: the kernel's copy into a misaligned buffer is slow (see `AlignedBuf`).
    buf: AlignedBuf,
    /// SO_RCVLOWAT, from [`low_water`].
    low_water: Option<u32>,
    verifier: Option<Verifier>,
    out: ServerFlow,
}

impl CopyRx {
    pub(crate) fn new(spec: &TestSpec, test_id: u64, flow: u32, low_water: Option<u32>) -> CopyRx {
        let buf_len = read_len(spec);
        CopyRx {
            buf: AlignedBuf::new(buf_len),
            low_water,
            verifier: verifier(spec, test_id, flow, buf_len),
            out: ServerFlow {
                flow,
                ..ServerFlow::default()
            },
        }
    }

    /// Sets the flow's low-water mark. With small writes, a reader woken per 16-byte segment
    /// spends its CPU on wake-ups (6 flows × 16 B: the server's CPU per MiB fell 6× on veth
    /// with the 64 KiB mark; on loopback, where the sender's CPU also runs the receive softirq,
    /// the flows ran 5× faster); large writes are in [`low_water`]. EOF and shutdown wake the
    /// reader at once either way, and so does a window closed to one segment
    /// (`tcp_epollin_ready`), so a mark cannot stall a flow. epoll honours the mark too
    /// (tcp_poll() asks tcp_stream_is_readable() with sock_rcvlowat()).
    pub(crate) fn prepare(&self, sock: &TcpStream) -> io::Result<()> {
        if let Some(bytes) = self.low_water {
            set_recv_low_water(sock.as_fd(), bytes)?;
        }
        Ok(())
    }

    /// Reads at most `max_reads` times.
    pub(crate) fn pump(&mut self, mut sock: &TcpStream, max_reads: u32) -> io::Result<Pumped> {
        let mut reads = 0;
        while reads < max_reads {
            let n = match sock.read(&mut self.buf) {
                Ok(0) => return Ok(Pumped::Eof),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Pumped::Drained),
                Err(e) => return Err(e),
            };
            if let Some(v) = &mut self.verifier {
                v.check(self.out.bytes, &self.buf[..n]);
            }
            self.out.bytes += n as u64;
            self.out.rx_read_bytes += n as u64;
            reads += 1;
        }
        Ok(Pumped::More)
    }

    /// The flow's result; `error` is what ended it early, if anything.
    pub(crate) fn finish(mut self, error: Option<io::Error>) -> ServerFlow {
        self.out.error = error.map(|e| e.to_string());
        self.out.first_mismatch = self.verifier.and_then(|v| v.first_mismatch);
        self.out
    }
}

fn receive_zerocopy(
    mut sock: &TcpStream,
    buf_len: usize,
    verifier: &mut Option<Verifier>,
    out: &mut ServerFlow,
    stop: &AtomicBool,
    cpus: &mut BTreeSet<u32>,
) -> io::Result<()> {
    let fd = sock.as_fd();
    let mut zc = ZeroCopyReceiver::new(fd, ZC_WINDOW)?;
    set_recv_low_water(fd, ZC_WINDOW as u32)?;
    let mut buf = AlignedBuf::new(buf_len);
    let mut calls = 0u64;
    loop {
        calls += 1;
        if calls.is_multiple_of(256) {
            cpus.extend(current_cpu());
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Sleep until a whole window (or EOF) is queued; wake every second to see `stop`.
        if !wait_readable(fd, 1000)? {
            continue;
        }
        // No copy buffer: when the window fills in the middle of an skb, the kernel copies
        // min(copybuf_len, rest of that skb) into it as "straggler" data
        // (tcp_zc_handle_leftover), which leaves the next call off page alignment until the
        // skb ends: 16-40 KiB copied per episode, 0.0005-0.01 % of a stream with no
        // retransmit at all. Without one, the next call maps the rest of the skb, and only a
        // head that cannot be mapped is read past, as tcp_mmap does. (`rx_copybuf_bytes`
        // stays 0.)
        let o = zc.receive(fd, &mut [])?;
        if o.eof {
            return Ok(());
        }
        if let Some(v) = verifier {
            v.check(out.bytes, zc.mapped());
        }
        out.bytes += o.mapped as u64;
        out.rx_mapped_bytes += o.mapped as u64;
        zc.release()?;
        if o.mapped == 0 {
            // Nothing mappable at the head (linear data or a partial page): read past it. If
            // there is no hint either, read() tells EOF from a spurious wake-up.
            let want = if o.skip_hint > 0 {
                o.skip_hint.min(buf.len())
            } else {
                buf.len()
            };
            let n = match sock.read(&mut buf[..want]) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(v) = verifier {
                v.check(out.bytes, &buf[..n]);
            }
            out.bytes += n as u64;
            out.rx_read_bytes += n as u64;
        }
    }
}

#[derive(Debug, Clone)]
pub struct StreamConfig {
    pub target: SocketAddr,
    pub flows: u32,
    /// Flow i is pinned to cpus[i % len] (none: not pinned).
    pub cpus: Vec<u32>,
    pub write_size: u32,
    /// Bytes per read on the receiver (None: netsteer's own choice, see `receive`).
    pub read_size: Option<u32>,
    pub duration: Duration,
    pub interval: Duration,
    pub nodelay: bool,
    pub congestion: Option<String>,
    pub mss: Option<u32>,
    pub zerocopy_send: bool,
    pub zerocopy_recv: bool,
    pub verify: bool,
    /// Test hook: flip one bit of the byte at this stream offset of flow 0 before sending it,
    /// so tests can prove `--verify` catches corruption end to end.
    pub inject_corruption_at: Option<u64>,
    pub timeout: Duration,
    /// How each side drives its flows (the server resolves `auto` for its own CPUs and path).
    pub engine: Engine,
}

impl StreamConfig {
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Config(m));
        netsteer_sock::cpu::check_cpus("--cpu", &self.cpus)
            .map_err(|e| BenchError::Config(e.to_string()))?;
        if self.flows == 0 || self.flows > 256 {
            return bad(format!("--flows {}: 1..=256", self.flows));
        }
        if self.write_size == 0 || self.write_size > 64 << 20 {
            return bad(format!("--write-size {}: 1 B..=64 MiB", self.write_size));
        }
        if let Some(r) = self.read_size {
            if r == 0 || r > 1 << 20 {
                return bad(format!("--read-size {r}: 1 B..=1 MiB"));
            }
            if self.zerocopy_recv {
                return bad("--read-size is for copying receives, not --zerocopy-recv".into());
            }
        }
        if self.engine == Engine::Poll && (self.zerocopy_send || self.zerocopy_recv) {
            return bad(
                "--engine poll: zero-copy sends and receives run a thread per flow (--engine threads or auto)"
                    .into(),
            );
        }
        if self.duration.is_zero() {
            return bad("--duration must be more than 0".into());
        }
        if self.interval.is_zero() {
            return bad("--interval must be more than 0".into());
        }
        Ok(())
    }

    fn spec(&self) -> TestSpec {
        TestSpec {
            kind: TestKind::TcpStream,
            flows: self.flows,
            duration_s: self.duration.as_secs_f64(),
            write_size: self.write_size,
            verify: self.verify,
            zerocopy_recv: self.zerocopy_recv,
            mss: self.mss,
            congestion: self.congestion.clone(),
            nodelay: self.nodelay,
            request_size: 1,
            response_size: 1,
            wait: "block".into(),
            busy_poll_us: 0,
            busy_poll_budget: 0,
            prefer_busy_poll: false,
            read_size: self.read_size,
            engine: self.engine,
        }
    }
}

/// Shared between a sending flow and the reporting thread.
struct FlowShared {
    sock: TcpStream,
    written: AtomicU64,
}

#[derive(Default)]
struct FlowEnd {
    usage: ThreadUsage,
    cpus: BTreeSet<u32>,
    zc: Completions,
    error: Option<BenchError>,
}

fn send_flow(
    cfg: &StreamConfig,
    flow: u32,
    test_id: u64,
    shared: &FlowShared,
    go: &Barrier,
    stop: &AtomicBool,
) -> FlowEnd {
    let mut end = FlowEnd::default();
    if !cfg.cpus.is_empty() {
        let cpu = cfg.cpus[flow as usize % cfg.cpus.len()];
        if let Err(e) = pin_current_thread(&[cpu]) {
            end.error = Some(io_ctx(format!("pinning flow {flow} to CPU {cpu}"))(e));
        }
    }
    let before = ThreadUsage::current().unwrap_or_default();
    let pattern = Pattern::new(flow_seed(test_id, flow), cfg.write_size as usize);
    let len = cfg.write_size as usize;
    let fd = shared.sock.as_fd();
    // Corrupted copies must outlive their MSG_ZEROCOPY completions.
    let mut keep = Vec::new();
    go.wait();
    end.cpus.extend(current_cpu());
    let mut offset = 0u64;
    let mut calls = 0u64;
    let mut writes = 0u64;
    let mut sock = &shared.sock;
    let result: io::Result<()> = (|| {
        while !stop.load(Ordering::Relaxed) {
            let mut data = pattern.slice(offset, len);
            if let Some(bad) = corrupted(cfg, flow, offset, data) {
                keep.push(bad);
                data = keep.last().map(Vec::as_slice).unwrap_or(data);
            }
            let n = if cfg.zerocopy_send {
                match send_zerocopy(fd, data) {
                    Ok(n) => {
                        calls += 1;
                        if calls.is_multiple_of(32) {
                            read_completions(fd, &mut end.zc)?;
                        }
                        n
                    }
                    // The socket's optmem is full of pending notifications: reap them.
                    Err(e) if is_optmem_full(&e) => {
                        read_completions(fd, &mut end.zc)?;
                        std::thread::yield_now();
                        0
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                    Err(e) => return Err(e),
                }
            } else {
                match sock.write(data) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                    Err(e) => return Err(e),
                }
            };
            offset += n as u64;
            shared.written.store(offset, Ordering::Relaxed);
            writes += 1;
            if writes.is_multiple_of(4096) {
                end.cpus.extend(current_cpu());
            }
        }
        if cfg.zerocopy_send {
            // Every zero-copy call must complete before its buffer may go.
            let deadline = Instant::now() + cfg.timeout.max(Duration::from_secs(5));
            while end.zc.done_through < calls && Instant::now() < deadline {
                read_completions(fd, &mut end.zc)?;
                if end.zc.done_through < calls {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        sock.flush()?;
        shared.sock.shutdown(Shutdown::Write)
    })();
    if let Err(e) = result
        && end.error.is_none()
    {
        end.error = Some(io_ctx(format!("sending on flow {flow}"))(e));
    }
    end.cpus.extend(current_cpu());
    end.usage = ThreadUsage::current().unwrap_or_default().since(&before);
    end
}

/// `data` (at stream `offset` of `flow`) with the test hook's bit flipped, if it holds the
/// byte to corrupt.
fn corrupted(cfg: &StreamConfig, flow: u32, offset: u64, data: &[u8]) -> Option<Vec<u8>> {
    let at = cfg.inject_corruption_at.filter(|_| flow == 0)?;
    if !(offset..offset + data.len() as u64).contains(&at) {
        return None;
    }
    let mut bad = data.to_vec();
    bad[(at - offset) as usize] ^= 0x01;
    Some(bad)
}

/// How the polled sender shares a turn (an epoll wake-up) among its ready flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Turn {
    /// Rounds over the ready flows (iperf3's "multisend").
    rounds: u32,
    /// A flow's share of a round: writes until this many bytes, at most `writes` of them.
    bytes: u64,
    writes: u32,
    /// The turn ends at the first full send buffer (else only that flow's share does).
    end_at_full: bool,
}

impl Turn {
    /// The turn for a path whose segments are `segment` bytes.
    ///
    /// Ethernet-size segments: round-robin, one write (or 64 KiB of small ones) per flow per
    /// round, ending at the first full buffer, as iperf3's loop does. Filling each flow until
    /// it blocked left every buffer full and the thread asleep, so the flows' segments were
    /// sent by ACK processing and the pacing timer on the receiver's CPU (23 k `tcp_pace_kick`
    /// a second, iperf3 3.8 k), which then also received them and fell behind: veth, 4 flows,
    /// 21 Gbit/s against 28-35 round-robin. Small writes get 256 back to back, which TCP
    /// autocorking coalesces while the flow's previous segment is still in the stack (6 flows
    /// of 16-byte nodelay writes on loopback: 3.3x iperf3, 1.04x with one write a round).
    ///
    /// Loopback-size segments: each flow until it blocks, at most 256 writes. There the
    /// receiver acks from its reads anyway, and fewer wake-ups count under CPU contention:
    /// 4 flows beside a busy loop, 24-25 Gbit/s against 15 round-robin (iperf3 18-21).
    fn for_segment(segment: u32) -> Turn {
        if segment >= LARGE_SEGMENT {
            Turn {
                rounds: 1,
                bytes: u64::MAX,
                writes: 256,
                end_at_full: false,
            }
        } else {
            Turn {
                rounds: 10,
                bytes: 64 << 10,
                writes: 256,
                end_at_full: true,
            }
        }
    }
}

/// The sender of several flows on one thread (engine `poll`): non-blocking sockets, each
/// written while epoll says it has send-buffer room, until the run stops.
fn send_group(
    cfg: &StreamConfig,
    flows: &[(u32, Arc<FlowShared>)],
    turn: Turn,
    cpu: Option<u32>,
    test_id: u64,
    go: &Barrier,
    stop: &AtomicBool,
) -> FlowEnd {
    let mut end = FlowEnd::default();
    if let Some(cpu) = cpu
        && let Err(e) = pin_current_thread(&[cpu])
    {
        end.error = Some(io_ctx(format!("pinning the flows' thread to CPU {cpu}"))(e));
    }
    let before = ThreadUsage::current().unwrap_or_default();
    let len = cfg.write_size as usize;
    let patterns: Vec<Pattern> = flows
        .iter()
        .map(|(f, _)| Pattern::new(flow_seed(test_id, *f), len))
        .collect();
    let mut offsets = vec![0u64; flows.len()];
    let setup = (|| -> io::Result<Epoll> {
        let ep = Epoll::new()?;
        for (i, (_, f)) in flows.iter().enumerate() {
            f.sock.set_nonblocking(true)?;
            ep.watch(f.sock.as_fd(), Interest::Write, i as u64)?;
        }
        Ok(ep)
    })();
    go.wait();
    end.cpus.extend(current_cpu());
    let result: io::Result<()> = (|| {
        let ep = setup?;
        let mut ready = Vec::new();
        let mut turns = 0u64;
        while !stop.load(Ordering::Relaxed) {
            // Waking every 100 ms to look at `stop` also frees a sender whose peer stopped
            // reading.
            ep.ready(100, &mut ready)?;
            'turn: for _ in 0..turn.rounds {
                for r in &ready {
                    let i = r.token as usize;
                    let (flow, shared) = (&flows[i].0, &flows[i].1);
                    let mut sock = &shared.sock;
                    let start = offsets[i];
                    let mut blocked = false;
                    for _ in 0..turn.writes {
                        let off = offsets[i];
                        let data = patterns[i].slice(off, len);
                        let bad = corrupted(cfg, *flow, off, data);
                        match sock.write(bad.as_deref().unwrap_or(data)) {
                            Ok(n) => offsets[i] += n as u64,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                blocked = true;
                                break;
                            }
                            Err(e) => {
                                return Err(io::Error::new(
                                    e.kind(),
                                    format!("sending on flow {flow}: {e}"),
                                ));
                            }
                        }
                        if offsets[i] - start >= turn.bytes {
                            break;
                        }
                    }
                    shared.written.store(offsets[i], Ordering::Relaxed);
                    if blocked && turn.end_at_full {
                        break 'turn;
                    }
                }
            }
            turns += 1;
            if turns.is_multiple_of(1024) {
                end.cpus.extend(current_cpu());
            }
        }
        for (_, f) in flows {
            f.sock.shutdown(Shutdown::Write)?;
        }
        Ok(())
    })();
    if let Err(e) = result
        && end.error.is_none()
    {
        end.error = Some(io_ctx("sending on the polled flows")(e));
    }
    end.cpus.extend(current_cpu());
    end.usage = ThreadUsage::current().unwrap_or_default().since(&before);
    end
}

/// Runs a stream test against the server; `on_interval` gets each interval as it ends.
pub fn run_stream_client(
    cfg: &StreamConfig,
    mut on_interval: impl FnMut(&StreamInterval) -> io::Result<()>,
) -> Result<StreamSummary, BenchError> {
    cfg.validate()?;
    let spec = cfg.spec();
    let session = Session::open(cfg.target, &spec, cfg.timeout)?;
    let opts = SockOpts {
        nodelay: cfg.nodelay,
        congestion: cfg.congestion.clone(),
        mss: cfg.mss,
        busy_poll_us: None,
        src_port: None,
    };
    let mut flows = Vec::new();
    for f in 0..cfg.flows {
        let sock = session.data(f, &opts, cfg.timeout)?;
        if cfg.zerocopy_send {
            enable_zerocopy_send(sock.as_fd()).map_err(io_ctx("SO_ZEROCOPY"))?;
        }
        flows.push(Arc::new(FlowShared {
            sock,
            written: AtomicU64::new(0),
        }));
    }
    let mss = tcp_info(flows[0].sock.as_fd()).ok().map(|i| i.snd_mss);
    // The flows share one path: the first one's MSS (after any --mss clamp) stands for all.
    let turn = Turn::for_segment(mss.unwrap_or(ETHERNET_SEGMENT));
    let congestion = netsteer_sock::tcp::congestion(flows[0].sock.as_fd()).ok();
    let usable = usable_cpus(&cfg.cpus);
    let engine = cfg.engine.resolve(
        Side::Sender,
        cfg.flows,
        usable,
        Io::of(
            cfg.write_size,
            cfg.read_size,
            cfg.zerocopy_send || cfg.zerocopy_recv,
        ),
    );
    let groups = match engine {
        Engine::Poll => Engine::groups(cfg.flows, usable),
        _ => 0,
    };
    let threads = if groups > 0 { groups } else { flows.len() };
    let go = Arc::new(Barrier::new(threads + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let meter = CostMeter::start();
    let test_id = session.test_id;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (cfg, go, stop) = (cfg.clone(), go.clone(), stop.clone());
            if groups == 0 {
                let shared = flows[t].clone();
                return std::thread::spawn(move || {
                    send_flow(&cfg, t as u32, test_id, &shared, &go, &stop)
                });
            }
            // Flow i goes to thread i % groups, on the CPU that flow would have had.
            let mine: Vec<(u32, Arc<FlowShared>)> = (t..flows.len())
                .step_by(groups)
                .map(|i| (i as u32, flows[i].clone()))
                .collect();
            let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[t % cfg.cpus.len()]);
            std::thread::spawn(move || send_group(&cfg, &mine, turn, cpu, test_id, &go, &stop))
        })
        .collect();
    go.wait();
    let t0 = Instant::now();
    let n = flows.len();
    let retrans =
        |f: &FlowShared| tcp_info(f.sock.as_fd()).map_or(0, |i| u64::from(i.total_retrans));
    let mut last_bytes = vec![0u64; n];
    let mut last_retr: Vec<u64> = flows.iter().map(|f| retrans(f)).collect();
    let first_retr = last_retr.clone();
    let mut last_t = 0.0f64;
    let mut write_err = None;
    let mut k = 1u32;
    let end_at = cfg.duration.as_secs_f64();
    loop {
        let next = (cfg.interval.as_secs_f64() * k as f64).min(end_at);
        let now = t0.elapsed().as_secs_f64();
        // Flows that failed stop early; the run ends with them.
        let failed = handles.iter().any(|h| h.is_finished());
        if now < next && !failed {
            std::thread::sleep(Duration::from_secs_f64((next - now).min(0.05)));
            continue;
        }
        let last = now >= end_at || failed;
        if last {
            stop.store(true, Ordering::Relaxed);
            // The last interval includes what the flows wrote until they stopped. A sender
            // blocked on a peer that stopped reading is released by shutting its socket.
            let deadline = Instant::now() + cfg.timeout.max(Duration::from_secs(5));
            while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if handles.iter().any(|h| !h.is_finished()) {
                for f in &flows {
                    let _ = f.sock.shutdown(Shutdown::Both);
                }
            }
        }
        let t = t0.elapsed().as_secs_f64();
        let span = (t - last_t).max(1e-9);
        let mut rates = Vec::with_capacity(n);
        for (i, f) in flows.iter().enumerate() {
            let b = f.written.load(Ordering::Relaxed);
            let r = retrans(f);
            rates.push(FlowRate {
                flow: i as u32,
                bytes: b - last_bytes[i],
                bits_per_second: (b - last_bytes[i]) as f64 * 8.0 / span,
                retransmits: r.saturating_sub(last_retr[i]),
            });
            last_bytes[i] = b;
            last_retr[i] = r;
        }
        let bytes = rates.iter().map(|r| r.bytes).sum();
        let m = StreamInterval {
            kind: Kind::Interval,
            bench: BENCH.into(),
            role: Role::Client,
            t_s: t,
            interval_s: span,
            bytes,
            bits_per_second: bytes as f64 * 8.0 / span,
            retransmits: rates.iter().map(|r| r.retransmits).sum(),
            flows: rates,
        };
        if write_err.is_none()
            && let Err(e) = on_interval(&m)
        {
            write_err = Some(e);
        }
        last_t = t;
        k += 1;
        if last {
            break;
        }
    }
    let measured_s = last_t.max(1e-9);
    let mut usage = ThreadUsage::default();
    let mut cpus = BTreeSet::new();
    let mut zc = Completions::default();
    let mut failure = None;
    for h in handles {
        let end = h
            .join()
            .map_err(|_| BenchError::Config("a flow thread panicked".into()))?;
        usage.add(&end.usage);
        cpus.extend(end.cpus);
        zc.calls += end.zc.calls;
        zc.copied += end.zc.copied;
        if let Some(e) = end.error {
            failure.get_or_insert(e);
        }
    }
    let sent: Vec<u64> = flows
        .iter()
        .map(|f| f.written.load(Ordering::Relaxed))
        .collect();
    let retr: Vec<u64> = flows
        .iter()
        .zip(&first_retr)
        .map(|(f, r0)| retrans(f).saturating_sub(*r0))
        .collect();
    let client_cost = meter.finish(&usage, &cpus);
    drop(flows);
    if let Some(e) = failure {
        return Err(e);
    }
    let (server_flows, server_cost, server_engine) = session.finish(
        &Finish {
            sent_bytes: sent.clone(),
        },
        cfg.timeout,
    )?;
    if let Some(e) = write_err {
        return Err(io_ctx("writing the report")(e));
    }
    let bytes: u64 = server_flows.iter().map(|f| f.bytes).sum();
    let per_flow: Vec<FlowRate> = server_flows
        .iter()
        .map(|f| FlowRate {
            flow: f.flow,
            bytes: f.bytes,
            bits_per_second: f.bytes as f64 * 8.0 / measured_s,
            retransmits: retr.get(f.flow as usize).copied().unwrap_or(0),
        })
        .collect();
    let mut problems = Vec::new();
    for f in &server_flows {
        let want = sent.get(f.flow as usize).copied().unwrap_or(0);
        if let Some(at) = f.first_mismatch {
            problems.push(format!(
                "flow {}: first corrupt byte at stream offset {at}",
                f.flow
            ));
        }
        if f.bytes != want {
            problems.push(format!(
                "flow {}: sent {want} bytes, {} arrived",
                f.flow, f.bytes
            ));
        }
        if let Some(e) = &f.error {
            problems.push(format!("flow {} at the server: {e}", f.flow));
        }
    }
    let mut notes = Vec::new();
    if !cfg.verify {
        notes.extend(server_flows.iter().filter_map(|f| {
            Some(format!(
                "flow {} at the server: {}",
                f.flow,
                f.error.as_ref()?
            ))
        }));
    }
    if cfg.zerocopy_send && zc.copied > 0 {
        notes.push(format!(
            "{} of {} MSG_ZEROCOPY sends were copied by the kernel after all (always on loopback and veth: the pages are copied on local delivery)",
            zc.copied, zc.calls
        ));
    }
    let (mapped, copybuf, read) = server_flows.iter().fold((0, 0, 0), |a, f| {
        (
            a.0 + f.rx_mapped_bytes,
            a.1 + f.rx_copybuf_bytes,
            a.2 + f.rx_read_bytes,
        )
    });
    let total_retr: u64 = retr.iter().sum();
    if cfg.zerocopy_recv && mapped > 0 && total_retr > 0 {
        notes.push(format!(
            "{total_retr} retransmitted segments: a retransmitted or collapsed segment no longer sits in whole pages, so its bytes are copied, not mapped"
        ));
    }
    if cfg.zerocopy_recv && bytes > 0 && (mapped as f64) < 0.99 * bytes as f64 {
        notes.push(format!(
            "only {:.2}% of the bytes were mapped: TCP_ZEROCOPY_RECEIVE maps whole page-aligned page frags only; use --mss 4108 (4096 + timestamps) and a sender whose skbs hold order-0 pages (--zerocopy-send on loopback)",
            mapped as f64 * 100.0 / bytes as f64
        ));
    }
    let rates: Vec<f64> = per_flow.iter().map(|f| f.bits_per_second).collect();
    Ok(StreamSummary {
        kind: Kind::Summary,
        bench: BENCH.into(),
        role: Role::Client,
        target: cfg.target.to_string(),
        duration_s: measured_s,
        flows: cfg.flows,
        write_size: cfg.write_size,
        mss,
        congestion,
        bits_per_second: bytes as f64 * 8.0 / measured_s,
        bytes,
        sent_bytes: sent.iter().sum(),
        retransmits: total_retr,
        per_flow,
        fairness: jain(&rates),
        cpu_us_per_mb: Sides {
            client: us_per_mb(client_cost.thread_us(), bytes),
            server: us_per_mb(server_cost.thread_us(), bytes),
        },
        softirq_us_per_mb: Sides {
            client: us_per_mb(client_cost.softirq_us, bytes),
            server: us_per_mb(server_cost.softirq_us, bytes),
        },
        context_switches: Sides {
            client: client_cost.voluntary_switches + client_cost.involuntary_switches,
            server: server_cost.voluntary_switches + server_cost.involuntary_switches,
        },
        sleeps_per_mb: Sides {
            client: per_mb(client_cost.voluntary_switches, bytes),
            server: per_mb(server_cost.voluntary_switches, bytes),
        },
        cost: Sides {
            client: client_cost,
            server: server_cost,
        },
        engine: Sides {
            client: Some(engine),
            server: server_engine,
        },
        rx_mapped_bytes: cfg.zerocopy_recv.then_some(mapped),
        rx_copybuf_bytes: cfg.zerocopy_recv.then_some(copybuf),
        rx_read_bytes: cfg.zerocopy_recv.then_some(read),
        zc_send_completions: cfg.zerocopy_send.then_some(zc.calls),
        zc_send_copied: cfg.zerocopy_send.then_some(zc.copied),
        verify: cfg.verify.then(|| Verify {
            ok: problems.is_empty(),
            problems: problems.clone(),
        }),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_receivers_wake_for_128_kib_unless_flows_share_a_cpu_on_ethernet_size_segments() {
        let big = 128 << 10;
        // One flow per receiving CPU, any path.
        assert_eq!(
            low_water(big, None, ETHERNET_SEGMENT, 1, 1),
            Some(BULK_LOW_WATER)
        );
        assert_eq!(
            low_water(big, None, ETHERNET_SEGMENT, 2, 2),
            Some(BULK_LOW_WATER)
        );
        assert_eq!(low_water(1 << 20, None, 8948, 4, 8), Some(BULK_LOW_WATER));
        // Loopback-size segments, however many flows share a CPU.
        assert_eq!(low_water(big, None, 65483, 4, 1), Some(BULK_LOW_WATER));
        // Several flows per CPU on Ethernet-size segments: no mark.
        assert_eq!(low_water(big, None, ETHERNET_SEGMENT, 2, 1), None);
        assert_eq!(low_water(big, None, LARGE_SEGMENT - 1, 3, 2), None);
        // An unknown CPU count counts as one.
        assert_eq!(
            low_water(big, None, ETHERNET_SEGMENT, 1, 0),
            Some(BULK_LOW_WATER)
        );
        assert_eq!(low_water(big, None, ETHERNET_SEGMENT, 2, 0), None);
        // Small writes: 64 KiB, whatever the path; an asked-for read size turns marks off.
        assert_eq!(low_water(16, None, ETHERNET_SEGMENT, 6, 1), Some(64 << 10));
        assert_eq!(low_water(16, Some(16), ETHERNET_SEGMENT, 6, 1), None);
        assert_eq!(low_water(big, Some(big), 65483, 1, 1), None);
    }

    #[test]
    fn the_polled_reader_reads_once_a_turn_only_for_large_writes_on_ethernet_size_segments() {
        assert_eq!(reads_per_turn(ETHERNET_SEGMENT, 128 << 10), 1);
        assert_eq!(reads_per_turn(8948, SMALL_WRITE), 1);
        assert_eq!(reads_per_turn(ETHERNET_SEGMENT, 16), 16);
        assert_eq!(reads_per_turn(65483, 128 << 10), 16);
        assert_eq!(reads_per_turn(LARGE_SEGMENT, 1 << 20), 16);
    }

    /// Ethernet-size and jumbo segments get iperf3's round-robin turn with a 64 KiB share per
    /// flow; loopback-size ones fill each flow in one round; up to 256 writes a share either way.
    #[test]
    fn the_polled_turn_follows_the_segment_size() {
        for segment in [536, 1448, 4108, 8948, LARGE_SEGMENT - 1] {
            let t = Turn::for_segment(segment);
            assert!(t.end_at_full && t.rounds > 1, "{segment}: {t:?}");
            assert_eq!((t.bytes, t.writes), (64 << 10, 256), "{segment}");
        }
        for segment in [LARGE_SEGMENT, 65483] {
            let t = Turn::for_segment(segment);
            assert!(!t.end_at_full && t.rounds == 1, "{segment}: {t:?}");
            assert_eq!((t.bytes, t.writes), (u64::MAX, 256), "{segment}");
        }
    }
}
