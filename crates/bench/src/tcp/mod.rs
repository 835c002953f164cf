//! TCP benchmarks: `tcp-stream` (bulk transfer over many flows, from 16-byte writes to MBs,
//! with optional MSG_ZEROCOPY sends and TCP_ZEROCOPY_RECEIVE, payload verification, and whole
//! CPU cost on both sides) and `tcp-rr` (request/response latency and rate). One server
//! ([`server`]) runs both for many clients at once; the control exchange is in [`proto`].

pub mod cost;
pub mod message;
pub mod pattern;
pub mod proto;
pub mod rr;
pub mod server;
pub mod stream;

use crate::udp_echo::{BenchError, Wait};
use cost::SideCost;
use proto::{Finish, Hello, Reply, ServerFlow, TestSpec};
use socket2::{Domain, Socket, Type};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

/// How one side of a tcp-stream test drives its flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Engine {
    /// The sender polls when it has more flows than CPUs to run them on; so does the receiver
    /// on a path with loopback-size segments, while with Ethernet-size ones it gives each flow
    /// a thread up to 2 flows per CPU. Each side decides for its own CPUs.
    #[default]
    Auto,
    /// A thread per flow, blocking I/O (iperf3 3.16+'s model).
    Threads,
    /// One thread per CPU serving all of its flows from epoll, non-blocking (neper's model):
    /// no context switch between flows that share a CPU.
    Poll,
}

/// Which end of a tcp-stream's flows a side is: `auto` picks differently for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sender,
    /// `segment`: the largest TCP segment the receiver gets on the test's path (its MSS).
    Receiver {
        segment: u32,
    },
}

/// What a tcp-stream's reads and writes are like, as far as `auto` cares. Both ends derive it
/// from the same test spec ([`Io::of`]), so they agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// Copying I/O whose reader wakes for a lot at once: large writes, or small ones read
    /// behind the receiver's 64 KiB low-water mark.
    Batched,
    /// MSG_ZEROCOPY or TCP_ZEROCOPY_RECEIVE.
    ZeroCopy,
    /// Small writes read with an asked-for read size, which turns the low-water mark off: every
    /// small segment wakes its reader (seed 003's 16-byte writes and reads).
    Unbatched,
}

impl Io {
    /// `zerocopy`: whether this side's I/O is zero-copy (the sender's if either end is, since
    /// a mapped receive needs MSG_ZEROCOPY's page layout).
    pub fn of(write_size: u32, read_size: Option<u32>, zerocopy: bool) -> Io {
        if zerocopy {
            Io::ZeroCopy
        } else if stream::small_writes(write_size)
            && !stream::reads_behind_low_water(write_size, read_size)
        {
            Io::Unbatched
        } else {
            Io::Batched
        }
    }
}

/// Flows per CPU above which a receiver on an Ethernet-size path polls under `auto`.
const RECEIVER_THREADS_PER_CPU: usize = 2;
/// Segments from this size up (loopback's 64 KiB MTU, not Ethernet's or a 9000-byte jumbo
/// frame's) are one per skb: the receiver acks them from its reads, not from the softirq.
/// Both ends of tcp-stream choose their loops by it.
pub(crate) const LARGE_SEGMENT: u32 = 32 << 10;
/// The segment size assumed when TCP_INFO cannot be read: Ethernet's (1500 - 40 - 12 bytes of
/// timestamps), the common path, so an unreadable MSS picks the loops that suit most links.
pub(crate) const ETHERNET_SEGMENT: u32 = 1448;

impl Engine {
    /// What `self` means for `side` with `flows` flows on `cpus` CPUs doing `io`. Zero-copy I/O
    /// always gets threads: its completions and mapped windows are driven by a blocking loop
    /// per flow. Unbatched small I/O gets threads too, on both ends: measured, not explained.
    /// With 16-byte writes read 16, 256 or 2048 bytes at a time, 6 and 12 flows on one CPU
    /// ran 5-17 % faster on veth and 10-140 % on loopback with a thread per flow than polled
    /// (BENCHMARKS.md, issue 14 fourth pass); with the low-water mark on, the same writes run
    /// faster polled (2.3x iperf3 on loopback), so the rule keys on the mark.
    ///
    /// The ends differ because what clocks the data differs. A sender that shares a thread
    /// writes its flows in turn (see `stream::Turn`), so its writes, not the ACKs, send the
    /// segments out. At the receiver, with Ethernet-size segments each 64 KiB skb is a
    /// train of ~44 segments, which the kernel acks at once from the softirq that queued it
    /// (`__tcp_ack_snd_check`), unless a reader owns the socket: then the skb waits in the
    /// socket backlog, and its ACK, and the sends that ACK clocks, run on the reader's CPU.
    /// A polling reader that takes 16 reads per flow per turn is almost always inside some
    /// flow's recvmsg, so those ACKs and the sends they clock move to its CPU (veth, 4 flows
    /// on one CPU: 17-21 Gbit/s, 28-35 with a thread per flow, into misaligned buffers).
    /// With page-aligned buffers (`AlignedBuf`) and one read per flow per turn
    /// (`stream::reads_per_turn`), the polled reader sleeps a third as often as the threads
    /// and runs ahead of them from 3 flows per CPU (1.20× at 3, 1.14× at 4), but not at 2
    /// (0.93×), medians of 8-12 alternated rounds (BENCHMARKS.md sixth pass). With loopback's 64 KiB
    /// segments an skb is one segment, whose ACK waits for the reader anyway (delayed ACK,
    /// `tcp_cleanup_rbuf`), so polling loses nothing there and saves the context switches
    /// (4 flows: 21-28 Gbit/s polled, 19-21 threaded); and from 8 flows per CPU polling caught
    /// up on veth too (16 flows: 17.5 against 15.1 Gbit/s, mean of 3).
    pub fn resolve(self, side: Side, flows: u32, cpus: usize, io: Io) -> Engine {
        let many = |per_cpu: usize| flows as usize > cpus.max(1) * per_cpu;
        match (self, side) {
            _ if io == Io::ZeroCopy => Engine::Threads,
            (Engine::Auto, _) if io == Io::Unbatched => Engine::Threads,
            (Engine::Auto, Side::Sender) if many(1) => Engine::Poll,
            (Engine::Auto, Side::Receiver { segment })
                if many(RECEIVER_THREADS_PER_CPU) || (segment >= LARGE_SEGMENT && many(1)) =>
            {
                Engine::Poll
            }
            (Engine::Auto, _) => Engine::Threads,
            (e, _) => e,
        }
    }

    /// How many polling threads serve `flows` flows on `cpus` CPUs.
    pub fn groups(flows: u32, cpus: usize) -> usize {
        (flows as usize).min(cpus.max(1))
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::Auto => "auto",
            Engine::Threads => "threads",
            Engine::Poll => "poll",
        })
    }
}

/// The CPUs a side's threads may use: its `--cpu` list, or else the process's affinity.
pub(crate) fn usable_cpus(pinned: &[u32]) -> usize {
    if pinned.is_empty() {
        netsteer_sock::cpu::allowed_cpus().map_or(1, |c| c.len())
    } else {
        pinned.len()
    }
}

/// Default port of the TCP benchmark server.
pub const DEFAULT_PORT: u16 = 4322;

/// Socket options a client applies to its data connections before connecting.
#[derive(Debug, Clone, Default)]
pub struct SockOpts {
    pub nodelay: bool,
    pub congestion: Option<String>,
    /// TCP_MAXSEG before connect: clamps the MSS both ways of the handshake.
    pub mss: Option<u32>,
    pub busy_poll_us: Option<u32>,
    /// Data connection i binds this source port + i before connecting (SO_REUSEADDR), so a
    /// flow hashes to the same RSS bucket run after run (the VM lab's lane finds its bucket
    /// by bisection). A port still in TIME_WAIT toward the same server refuses the connect
    /// (EADDRNOTAVAIL) unless `net.ipv4.tcp_tw_reuse` lets it.
    pub src_port: Option<u16>,
}

pub(crate) fn io_ctx(what: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// Applies the options that work on either side of a connection.
pub(crate) fn apply_opts(sock: &TcpStream, opts: &SockOpts) -> io::Result<()> {
    sock.set_nodelay(opts.nodelay)?;
    if let Some(cc) = &opts.congestion {
        netsteer_sock::tcp::set_congestion(sock.as_fd(), cc)
            .map_err(|e| io::Error::new(e.kind(), format!("congestion control {cc:?}: {e}")))?;
    }
    if let Some(us) = opts.busy_poll_us {
        netsteer_sock::opt::set_busy_poll(sock.as_fd(), us)?;
    }
    Ok(())
}

pub(crate) fn connect(
    target: SocketAddr,
    opts: &SockOpts,
    timeout: Duration,
    src_port: Option<u16>,
) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(target), Type::STREAM, None)?;
    if let Some(mss) = opts.mss {
        netsteer_sock::tcp::set_max_segment(s.as_fd(), mss)
            .map_err(|e| io::Error::new(e.kind(), format!("TCP_MAXSEG {mss}: {e}")))?;
    }
    if let Some(port) = src_port {
        let any: std::net::IpAddr = if target.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        s.set_reuse_address(true)?;
        s.bind(&SocketAddr::new(any, port).into())
            .map_err(|e| io::Error::new(e.kind(), format!("source port {port}: {e}")))?;
    }
    s.connect_timeout(&target.into(), timeout)?;
    let sock: TcpStream = s.into();
    apply_opts(&sock, opts)?;
    Ok(sock)
}

/// A test the server has accepted.
pub(crate) struct Session {
    pub control: TcpStream,
    pub test_id: u64,
    pub target: SocketAddr,
}

impl Session {
    pub fn open(
        target: SocketAddr,
        spec: &TestSpec,
        timeout: Duration,
    ) -> Result<Session, BenchError> {
        let what = format!("control connection to {target}");
        let mut control = connect(
            target,
            &SockOpts {
                nodelay: true,
                ..SockOpts::default()
            },
            timeout,
            None,
        )
        .map_err(io_ctx(what.clone()))?;
        control
            .set_read_timeout(Some(timeout))
            .map_err(io_ctx(what.clone()))?;
        // Preamble and hello in one write; if the write fails (a full server may have closed
        // its side already), its answer may still be waiting to be read.
        let mut hello = Vec::new();
        proto::write_preamble(&mut hello).map_err(io_ctx(what.clone()))?;
        proto::write_frame(&mut hello, &Hello::Control { spec: spec.clone() })
            .map_err(io_ctx(what.clone()))?;
        let sent = control.write_all(&hello);
        if let Err(e) = proto::read_preamble(&mut control) {
            return Err(io_ctx(what)(sent.err().unwrap_or(e)));
        }
        match proto::read_frame::<Reply>(&mut control).map_err(io_ctx(what.clone()))? {
            Reply::Accepted { test_id } => Ok(Session {
                control,
                test_id,
                target,
            }),
            Reply::Rejected { error } => Err(BenchError::Config(format!(
                "{target} refused the test: {error}"
            ))),
            Reply::Result { .. } => Err(BenchError::Config(format!(
                "{target}: unexpected result before the test"
            ))),
        }
    }

    /// Opens data connection `flow`.
    pub fn data(
        &self,
        flow: u32,
        opts: &SockOpts,
        timeout: Duration,
    ) -> Result<TcpStream, BenchError> {
        let what = format!("data connection {flow} to {}", self.target);
        let port = opts.src_port.map(|p| p + flow as u16);
        // The same 4-tuple as a connection of the run before may still be in TIME_WAIT here:
        // tcp_tw_reuse takes it over once its last timestamp is a second old
        // (tcp_twsk_unique), so a fixed port retries EADDRNOTAVAIL within the timeout.
        let deadline = std::time::Instant::now() + timeout;
        let mut s = loop {
            match connect(self.target, opts, timeout, port) {
                Err(e)
                    if port.is_some()
                        && e.kind() == io::ErrorKind::AddrNotAvailable
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(100))
                }
                r => break r.map_err(io_ctx(what.clone()))?,
            }
        };
        proto::write_preamble(&mut s).map_err(io_ctx(what.clone()))?;
        proto::write_frame(
            &mut s,
            &Hello::Data {
                test_id: self.test_id,
                flow,
            },
        )
        .map_err(io_ctx(what))?;
        Ok(s)
    }

    /// Tells the server the test is over and reads its side of the results.
    pub fn finish(
        mut self,
        finish: &Finish,
        timeout: Duration,
    ) -> Result<(Vec<ServerFlow>, SideCost, Option<Engine>), BenchError> {
        let what = format!("results from {}", self.target);
        // The server waits up to 10 s for stuck flows before it answers.
        self.control
            .set_read_timeout(Some(timeout + Duration::from_secs(15)))
            .map_err(io_ctx(what.clone()))?;
        proto::write_frame(&mut self.control, finish).map_err(io_ctx(what.clone()))?;
        match proto::read_frame::<Reply>(&mut self.control).map_err(io_ctx(what.clone()))? {
            Reply::Result {
                flows,
                cost,
                engine,
                ..
            } => Ok((flows, cost, engine)),
            other => Err(BenchError::Config(format!(
                "{what}: unexpected reply {other:?}"
            ))),
        }
    }
}

/// Parses `block|spin|busy-poll` from a spec (checked by the server already).
pub(crate) fn wait_of(spec: &TestSpec) -> Wait {
    spec.wait.parse().unwrap_or_default()
}
