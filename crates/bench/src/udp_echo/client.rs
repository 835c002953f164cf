//! The echo client: per flow one connected socket and one thread, one datagram in flight at a
//! time, its round trip timed on the monotonic clock. Flow threads hand their per-interval
//! accumulators to the caller's thread, which merges the flows of each target and reports.

use super::message::{BENCH, ClientInterval, ClientSummary, Kind, Role};
use super::payload::{self, Header, MIN_SIZE};
use super::{BenchError, Wait, io_err};
use crate::clock::{Clock, realtime_ns};
use crate::stats::{LatencyRecorder, Spread};
use crate::waiter::{Busy, Waiter};
use netsteer_sock::{cpu, msg, opt};
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::thread::JoinHandleExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Consecutive datagrams without an echo after which the server is taken to be gone.
const GIVE_UP_AFTER: u32 = 3;
/// Sequence numbers remembered to tell duplicates from late echoes: a bitmap of 512 bytes,
/// small enough not to push the kernel's cache lines out of L1 on every round trip.
const SEEN_WINDOW: u64 = 4096;

/// Which of the last [`SEEN_WINDOW`] sequence numbers have been echoed.
struct Seen([u64; (SEEN_WINDOW / 64) as usize]);

impl Seen {
    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % SEEN_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    /// Forgets the number that `seq` replaces in the window (called before `seq` is sent).
    fn clear(&mut self, seq: u64) {
        let (w, b) = Self::bit(seq);
        self.0[w] &= !b;
    }

    /// Marks `seq` echoed; false when it already was (a duplicate).
    fn insert(&mut self, seq: u64) -> bool {
        let (w, b) = Self::bit(seq);
        let fresh = self.0[w] & b == 0;
        self.0[w] |= b;
        fresh
    }
}

#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub targets: Vec<SocketAddr>,
    pub size: usize,
    /// Measured time after the warm-up; `None` with `count`.
    pub duration: Option<Duration>,
    /// Round trips per flow.
    pub count: Option<u64>,
    pub interval: Duration,
    pub warmup: Duration,
    pub wait: Wait,
    /// Busy polling for `Wait::BusyPoll` and `Wait::EpollBusy`.
    pub busy: Busy,
    /// Round trips per second per flow (None: as fast as the echoes come back). A paced
    /// client shows what a wait mode costs the server at a fixed load.
    pub rate: Option<u32>,
    /// Flow thread i runs on `cpus[i % len]`; empty = not pinned.
    pub cpus: Vec<u32>,
    /// Source port of the first flow; the others count up from it.
    pub src_port: Option<u16>,
    /// Flows (sockets and threads) per target.
    pub flows: usize,
    /// How long to wait for each echo before counting it lost.
    pub timeout: Duration,
    pub timestamp: bool,
    /// Send and receive through an AF_XDP socket on this interface (one flow, one target,
    /// IPv4, `--wait spin`).
    pub xdp: Option<super::xdp::XdpConfig>,
}

impl ClientConfig {
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Config(m));
        if self.targets.is_empty() {
            return bad("no target: give HOST:PORT".into());
        }
        if self.size < MIN_SIZE || self.size > 65507 {
            return bad(format!(
                "--size {}: must be {MIN_SIZE}..=65507 bytes (the datagram carries a {MIN_SIZE}-byte header)",
                self.size
            ));
        }
        if self.flows == 0 {
            return bad("--flows must be at least 1".into());
        }
        if self.interval.is_zero() {
            return bad("--interval must be more than 0".into());
        }
        if self.timeout.is_zero() {
            return bad("--timeout must be more than 0".into());
        }
        if self.duration.is_none() && self.count.is_none() {
            return bad("give --duration or --count".into());
        }
        if self.rate.is_some_and(|r| r == 0 || r > 10_000_000) {
            return bad("--rate: 1 to 10000000 round trips per second".into());
        }
        if self.xdp.is_some() {
            if self.targets.len() != 1 || self.flows != 1 {
                return bad("--xdp: one target and one flow (the socket serves one queue)".into());
            }
            if self.wait != Wait::Spin {
                return bad("--xdp spins on its ring: give --wait spin".into());
            }
            if self.timestamp {
                return bad("--timestamp reads socket timestamps; the AF_XDP path has none".into());
            }
            if self.targets.iter().any(|t| !t.is_ipv4()) {
                return bad("--xdp: the AF_XDP path speaks IPv4 only".into());
            }
        }
        if let Some(p) = self.src_port {
            let last = u32::from(p) + (self.targets.len() * self.flows) as u32 - 1;
            if p == 0 || last > 65535 {
                return bad(format!("--src-port {p}: the flows need ports {p}..={last}"));
            }
        }
        Ok(())
    }
}

/// Everything one flow counted over some span of time.
#[derive(Debug, Clone, Default)]
struct Acc {
    rtt: LatencyRecorder,
    rx_delivery: LatencyRecorder,
    tx_send: LatencyRecorder,
    sent: u64,
    received: u64,
    lost: u64,
    reordered: u64,
    duplicated: u64,
    corrupted: u64,
    send_errors: u64,
    hw_stamps: bool,
    /// Round trips completed during the warm-up (not in any other count).
    warmup_received: u64,
}

impl Acc {
    fn merge(&mut self, o: &Acc) {
        self.rtt.merge(&o.rtt);
        self.rx_delivery.merge(&o.rx_delivery);
        self.tx_send.merge(&o.tx_send);
        self.sent += o.sent;
        self.received += o.received;
        self.lost += o.lost;
        self.reordered += o.reordered;
        self.duplicated += o.duplicated;
        self.corrupted += o.corrupted;
        self.send_errors += o.send_errors;
        self.hw_stamps |= o.hw_stamps;
        self.warmup_received += o.warmup_received;
    }
}

enum FlowMsg {
    Interval {
        target: usize,
        index: u64,
        len_ns: u64,
        acc: Box<Acc>,
        incoming_cpu: Option<u32>,
        cpu: Option<u32>,
    },
    Done {
        target: usize,
        total: Box<Acc>,
        napi_id: Option<u32>,
        xdp: Option<Box<super::xdp::XdpSummary>>,
    },
    Failed(BenchError),
}

struct Flow {
    target: usize,
    id: u32,
    addr: SocketAddr,
    src_port: Option<u16>,
    cpu: Option<u32>,
}

/// Timing shared by all flows: measurement starts at `start_ns` (after the warm-up).
#[derive(Clone, Copy)]
struct Plan {
    start_ns: u64,
    end_ns: Option<u64>,
    interval_ns: u64,
}

fn connect(flow: &Flow) -> io::Result<UdpSocket> {
    let s = Socket::new(
        Domain::for_address(flow.addr),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    let local: SocketAddr = if flow.addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, flow.src_port.unwrap_or(0)).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, flow.src_port.unwrap_or(0)).into()
    };
    s.bind(&local.into())?;
    // Connected: the kernel filters other senders, and RFS / SO_INCOMING_CPU work for it.
    s.connect(&flow.addr.into())?;
    Ok(s.into())
}

/// One received datagram: length and kernel receive stamp.
struct Rx {
    len: usize,
    stamps: msg::Stamps,
    user_realtime: u64,
}

enum Recv {
    Got(Rx),
    /// Nothing before the wait slice ended.
    Nothing,
    /// ICMP port unreachable came back: nothing listens there.
    Refused,
}

struct FlowRun<'a> {
    cfg: &'a ClientConfig,
    clock: &'a dyn Clock,
    flow: &'a Flow,
    sock: UdpSocket,
    /// The AF_XDP path instead of `sock` (which then only holds the flow's source port).
    xdp: Option<std::cell::RefCell<super::xdp::XdpLink>>,
    waiter: Waiter,
    tx: &'a mpsc::Sender<FlowMsg>,
    plan: Plan,
    /// Set when another flow failed: every flow ends.
    stop: &'a AtomicBool,
    /// When the reporting thread must interrupt this flow's blocking receive: the echo's loss
    /// deadline or the end of the interval, whichever comes first (u64::MAX: not waiting).
    wake_at: &'a AtomicU64,
}

impl FlowRun<'_> {
    fn send(&self, out: &[u8]) -> io::Result<usize> {
        match &self.xdp {
            Some(x) => x.borrow_mut().send(out),
            None => self.sock.send(out),
        }
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<Recv> {
        if let Some(x) = &self.xdp {
            return Ok(match x.borrow_mut().recv(buf)? {
                Some(len) => Recv::Got(Rx {
                    len,
                    stamps: msg::Stamps::default(),
                    user_realtime: 0,
                }),
                None => Recv::Nothing,
            });
        }
        let fd = self.sock.as_fd();
        let spin = self.cfg.wait.nonblocking();
        let r = if self.cfg.timestamp {
            msg::recv_msg(fd, buf, spin).map(|m| Rx {
                len: if m.truncated { usize::MAX } else { m.len },
                stamps: m.stamps,
                user_realtime: realtime_ns(),
            })
        } else {
            self.sock.recv(buf).map(|len| Rx {
                len,
                stamps: msg::Stamps::default(),
                user_realtime: 0,
            })
        };
        match r {
            Ok(rx) => Ok(Recv::Got(rx)),
            // Nothing yet on an epoll-mode socket: sleep in epoll_wait (the reporting thread's
            // signal ends it at a deadline, as it ends a blocking receive).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.cfg.wait != Wait::Spin => {
                self.waiter.idle()?;
                Ok(Recv::Nothing)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(Recv::Nothing)
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(Recv::Refused),
            Err(e) => Err(e),
        }
    }

    fn run(self) -> Result<(), BenchError> {
        let cfg = self.cfg;
        let fd = self.sock.as_fd();
        let target = self.flow.target;
        let mut out = vec![0u8; cfg.size];
        // Larger than any datagram, so an oversized echo shows as a wrong length.
        let mut inb = vec![0u8; 65536];
        let mut seen = Seen([0; (SEEN_WINDOW / 64) as usize]);
        let (mut acc, mut total) = (Acc::default(), Acc::default());
        // The warm-up's own counts: kept apart, only its round trips are reported (so a cost
        // per round trip can be taken over the whole run).
        let mut warm = Acc::default();
        let mut index = 0u64;
        let mut next_flush = self.plan.start_ns + self.plan.interval_ns;
        let mut tx_id: u32 = 0;
        let mut lost_in_a_row = 0u32;
        let mut refused = false;
        let mut seq = 0u64;
        // Paced sends: the k-th goes at start + k / rate (a late one goes at once; the gap is
        // not made up in a burst).
        let gap_ns = cfg.rate.map(|r| 1_000_000_000 / u64::from(r));
        let mut next_send = self.clock.now_ns();
        let flush = |acc: &mut Acc,
                     total: &mut Acc,
                     index: &mut u64,
                     len_ns: u64|
         -> Result<(), BenchError> {
            let done = std::mem::take(acc);
            total.merge(&done);
            let m = FlowMsg::Interval {
                target,
                index: *index,
                len_ns,
                acc: Box::new(done),
                incoming_cpu: opt::incoming_cpu(fd).ok().flatten(),
                cpu: cpu::current_cpu(),
            };
            *index += 1;
            self.tx
                .send(m)
                .map_err(|_| BenchError::Config("the reporting thread is gone".into()))
        };
        loop {
            let mut now = self.clock.now_ns();
            if now >= next_flush && self.plan.end_ns.is_none_or(|e| next_flush <= e) {
                while now >= next_flush && self.plan.end_ns.is_none_or(|e| next_flush <= e) {
                    flush(&mut acc, &mut total, &mut index, self.plan.interval_ns)?;
                    next_flush += self.plan.interval_ns;
                }
                // Reporting took time: the send below is timed from now.
                now = self.clock.now_ns();
            }
            let measuring = now >= self.plan.start_ns;
            let finished = self.plan.end_ns.is_some_and(|e| now >= e)
                || cfg.count.is_some_and(|c| total.sent + acc.sent >= c)
                || self.stop.load(Ordering::Relaxed);
            if finished {
                break;
            }
            if let Some(gap) = gap_ns {
                if now < next_send {
                    std::thread::sleep(Duration::from_nanos(next_send - now));
                    continue;
                }
                next_send = next_send.max(now.saturating_sub(gap)) + gap;
            }
            // The payload carries the loop's clock reading; the round trip is timed from just
            // before the send call, so encoding is not part of it.
            payload::encode(
                &mut out,
                Header {
                    flow: self.flow.id,
                    seq,
                    send_ns: now,
                },
            );
            seen.clear(seq);
            let rt_send = if cfg.timestamp { realtime_ns() } else { 0 };
            let t_send = self.clock.now_ns();
            let a = if measuring { &mut acc } else { &mut warm };
            match self.send(&out) {
                Ok(_) => {
                    a.sent += 1;
                    tx_id = tx_id.wrapping_add(1);
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    a.sent += 1;
                    refused = true;
                }
                Err(_) => a.send_errors += 1,
            }
            // Wait for this datagram's echo; late, duplicate and corrupt ones are counted on
            // the way.
            let deadline = t_send + cfg.timeout.as_nanos() as u64;
            let mut got = false;
            let mut empty_polls = 0u32;
            loop {
                if cfg.wait != Wait::Spin {
                    self.wake_at
                        .store(deadline.min(next_flush), Ordering::Relaxed);
                }
                let got_rx = match self
                    .recv(&mut inb)
                    // Lazily: this runs on every round trip, before the receive time is taken.
                    .map_err(|e| io_err(format!("receiving from {}", self.flow.addr))(e))?
                {
                    Recv::Got(rx) => rx,
                    Recv::Refused => {
                        refused = true;
                        break;
                    }
                    Recv::Nothing => {
                        // A spinning receive looks at the clock every 32nd empty poll only:
                        // deadlines are milliseconds away, and a shorter loop notices the echo
                        // sooner.
                        if cfg.wait == Wait::Spin {
                            empty_polls = empty_polls.wrapping_add(1);
                            if !empty_polls.is_multiple_of(32) {
                                continue;
                            }
                        }
                        let now = self.clock.now_ns();
                        if now >= deadline {
                            break;
                        }
                        if now >= next_flush && self.plan.end_ns.is_none_or(|e| next_flush <= e) {
                            flush(&mut acc, &mut total, &mut index, self.plan.interval_ns)?;
                            next_flush += self.plan.interval_ns;
                        }
                        continue;
                    }
                };
                let t_recv = self.clock.now_ns();
                let a = if measuring { &mut acc } else { &mut warm };
                let header = if got_rx.len == usize::MAX {
                    None
                } else {
                    payload::decode(&inb[..got_rx.len], cfg.size)
                };
                let Some(h) = header.filter(|h| h.flow == self.flow.id && h.seq <= seq) else {
                    a.corrupted += 1;
                    continue;
                };
                // Older than the window: late beyond telling whether it is a duplicate.
                if seq - h.seq >= SEEN_WINDOW {
                    a.reordered += 1;
                    continue;
                }
                // The echo of the datagram in flight carries its send time: one that does not
                // is corrupt (or forged) and must not mark the sequence as seen, or the true
                // echo behind it would count as its duplicate.
                if h.seq == seq && h.send_ns != now {
                    a.corrupted += 1;
                    continue;
                }
                if !seen.insert(h.seq) {
                    a.duplicated += 1;
                    continue;
                }
                if h.seq < seq {
                    a.reordered += 1;
                    continue;
                }
                a.received += 1;
                a.rtt.record(t_recv.saturating_sub(t_send));
                if cfg.timestamp {
                    if let Some(rx) = got_rx.stamps.software {
                        a.rx_delivery
                            .record(got_rx.user_realtime.saturating_sub(rx));
                    }
                    a.hw_stamps |= got_rx.stamps.hardware.is_some();
                    // OPT_ID numbers sends from 0: this one is tx_id - 1.
                    while let Ok(Some(stamp)) = msg::read_tx_stamp(fd) {
                        a.hw_stamps |= stamp.stamps.hardware.is_some();
                        if stamp.id == tx_id.wrapping_sub(1)
                            && let Some(sw) = stamp.stamps.software
                        {
                            a.tx_send.record(sw.saturating_sub(rt_send));
                        }
                    }
                }
                got = true;
                break;
            }
            if got {
                lost_in_a_row = 0;
            } else {
                if measuring {
                    acc.lost += 1;
                }
                lost_in_a_row += 1;
                if lost_in_a_row >= GIVE_UP_AFTER {
                    let secs = if refused {
                        0.0
                    } else {
                        f64::from(GIVE_UP_AFTER) * cfg.timeout.as_secs_f64()
                    };
                    return Err(BenchError::NoEcho {
                        target: self.flow.addr.to_string(),
                        secs,
                        hint: if refused {
                            " (ICMP port unreachable: nothing listens there)".into()
                        } else {
                            " (is a server running there? see --timeout)".into()
                        },
                    });
                }
                if refused {
                    // Do not hammer a closed port; the next try may find the server started.
                    std::thread::sleep(cfg.timeout.min(Duration::from_millis(100)));
                    refused = false;
                }
            }
            seq += 1;
        }
        // The last, partial interval, if datagrams were sent in it (count mode). An echo that
        // came back after the last full interval was flushed counts in the totals only.
        let now = self.clock.now_ns().max(self.plan.start_ns);
        let interval_start = self.plan.start_ns + index * self.plan.interval_ns;
        let len_ns = self
            .plan
            .end_ns
            .map_or(now, |e| e.min(now))
            .saturating_sub(interval_start);
        if acc.sent > 0 && len_ns > 0 {
            flush(&mut acc, &mut total, &mut index, len_ns)?;
        } else {
            total.merge(&acc);
        }
        self.wake_at.store(u64::MAX, Ordering::Relaxed);
        total.warmup_received += warm.received;
        // The AF_XDP path's socket only holds the port: it has no NAPI id of the echoes.
        let napi_id = if self.xdp.is_some() {
            None
        } else {
            opt::incoming_napi_id(fd).ok()
        };
        let xdp = self.xdp.as_ref().map(|x| Box::new(x.borrow_mut().finish()));
        self.tx
            .send(FlowMsg::Done {
                target,
                total: Box::new(total),
                napi_id,
                xdp,
            })
            .map_err(|_| BenchError::Config("the reporting thread is gone".into()))
    }
}

fn setup_socket(cfg: &ClientConfig, flow: &Flow) -> Result<(UdpSocket, Waiter), BenchError> {
    let ctx = |what: &str| format!("{what} (flow {} to {})", flow.id, flow.addr);
    let sock = connect(flow).map_err(io_err(match flow.src_port {
        Some(p) => ctx(&format!("binding source port {p} and connecting")),
        None => ctx("connecting"),
    }))?;
    let fd = sock.as_fd();
    // Blocking receives sleep without a timeout: a timeout arms a kernel timer on every
    // sleep (about 0.2 µs per round trip here). The reporting thread interrupts a flow whose
    // echo is overdue or whose interval has ended (see `wake_at`).
    if cfg.wait.nonblocking() {
        sock.set_nonblocking(true)
            .map_err(io_err(ctx("non-blocking socket")))?;
    }
    let waiter = Waiter::new(fd, cfg.wait, cfg.busy)
        .map_err(io_err(ctx(&format!("--wait {}", cfg.wait))))?;
    if cfg.timestamp {
        opt::set_timestamping(fd, opt::stamp::ROUND_TRIP)
            .map_err(io_err(ctx("SO_TIMESTAMPING")))?;
    }
    if let Some(c) = flow.cpu {
        cpu::pin_current_thread(&[c]).map_err(io_err(ctx(&format!("--cpu {c}"))))?;
    }
    Ok((sock, waiter))
}

/// Per-target merge of the flows' intervals.
#[derive(Default)]
struct Pending {
    acc: Acc,
    reports: usize,
    len_ns: u64,
    incoming: BTreeSet<u32>,
    cpus: BTreeSet<u32>,
}

fn interval_message(
    cfg: &ClientConfig,
    target: &SocketAddr,
    index: u64,
    p: &Pending,
) -> ClientInterval {
    let secs = (p.len_ns as f64 / 1e9).max(1e-9);
    ClientInterval {
        kind: Kind::Interval,
        bench: BENCH.into(),
        role: Role::Client,
        target: target.to_string(),
        t_s: (index as f64 * cfg.interval.as_nanos() as f64 + p.len_ns as f64) / 1e9,
        interval_s: secs,
        sent: p.acc.sent,
        received: p.acc.received,
        lost: p.acc.lost,
        pps: p.acc.received as f64 / secs,
        latency_ns: p.acc.rtt.summary(),
        rx_delivery_ns: p.acc.rx_delivery.mean_dev(),
        tx_send_ns: p.acc.tx_send.mean_dev(),
        incoming_cpus: p.incoming.iter().copied().collect(),
        client_cpus: p.cpus.iter().copied().collect(),
    }
}

/// Runs the client: reports each interval of each target through `on_interval` as soon as all
/// of its flows have reported it, and returns one summary per target.
pub fn run_client(
    cfg: &ClientConfig,
    clock: Arc<dyn Clock>,
    mut on_interval: impl FnMut(&ClientInterval) -> io::Result<()>,
) -> Result<Vec<ClientSummary>, BenchError> {
    cfg.validate()?;
    let t0 = clock.now_ns();
    let plan = Plan {
        start_ns: t0 + cfg.warmup.as_nanos() as u64,
        end_ns: cfg
            .duration
            .map(|d| t0 + (cfg.warmup + d).as_nanos() as u64),
        interval_ns: cfg.interval.as_nanos() as u64,
    };
    netsteer_sock::wake::install().map_err(io_err("installing the SIGURG wake-up handler"))?;
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    let mut wakes: Vec<Arc<AtomicU64>> = Vec::new();
    for (t, addr) in cfg.targets.iter().enumerate() {
        for f in 0..cfg.flows {
            let n = t * cfg.flows + f;
            let flow = Flow {
                target: t,
                id: n as u32,
                addr: *addr,
                src_port: cfg.src_port.map(|p| p + n as u16),
                cpu: (!cfg.cpus.is_empty()).then(|| cfg.cpus[n % cfg.cpus.len()]),
            };
            let wake_at = Arc::new(AtomicU64::new(u64::MAX));
            wakes.push(wake_at.clone());
            let (cfg, clock, tx, stop) = (cfg.clone(), clock.clone(), tx.clone(), stop.clone());
            handles.push(std::thread::spawn(move || {
                let result = setup_socket(&cfg, &flow).and_then(|(sock, waiter)| {
                    let xdp = match &cfg.xdp {
                        Some(x) => Some(std::cell::RefCell::new(super::xdp::XdpLink::open(
                            x, &sock, flow.addr,
                        )?)),
                        None => None,
                    };
                    let run = FlowRun {
                        cfg: &cfg,
                        clock: &*clock,
                        flow: &flow,
                        sock,
                        xdp,
                        waiter,
                        tx: &tx,
                        plan,
                        stop: &stop,
                        wake_at: &wake_at,
                    };
                    run.run()
                });
                if let Err(e) = result {
                    let _ = tx.send(FlowMsg::Failed(e));
                }
            }));
        }
    }
    drop(tx);

    let ntargets = cfg.targets.len();
    let mut pending: Vec<BTreeMap<u64, Pending>> = (0..ntargets).map(|_| BTreeMap::new()).collect();
    let mut totals: Vec<Acc> = vec![Acc::default(); ntargets];
    let mut p50s: Vec<Vec<u64>> = vec![Vec::new(); ntargets];
    let mut incoming: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); ntargets];
    let mut cpus: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); ntargets];
    let mut napi: Vec<Option<u32>> = vec![None; ntargets];
    let mut xdp: Vec<Option<super::xdp::XdpSummary>> = vec![None; ntargets];
    let mut done = vec![0usize; ntargets];
    let mut failure = None;
    let mut write_err = None;
    let mut emit = |t: usize, index: u64, p: &Pending, p50s: &mut Vec<Vec<u64>>| {
        let m = interval_message(cfg, &cfg.targets[t], index, p);
        if let Some(l) = &m.latency_ns {
            p50s[t].push(l.p50);
        }
        if write_err.is_none()
            && let Err(e) = on_interval(&m)
        {
            write_err = Some(e);
        }
    };
    // How often the reporting thread looks for flows to wake: a tenth of the loss timeout or
    // interval, within 1..=100 ms. Losses and interval ends are noticed that much late at most.
    let tick = (cfg.timeout.min(cfg.interval) / 10)
        .clamp(Duration::from_millis(1), Duration::from_millis(100));
    loop {
        let m = match rx.recv_timeout(tick) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = clock.now_ns();
                for (h, w) in handles.iter().zip(&wakes) {
                    if !h.is_finished()
                        && (now >= w.load(Ordering::Relaxed) || stop.load(Ordering::Relaxed))
                    {
                        let _ = netsteer_sock::wake::interrupt(h.as_pthread_t());
                    }
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match m {
            FlowMsg::Interval {
                target,
                index,
                len_ns,
                acc,
                incoming_cpu,
                cpu,
            } => {
                let p = pending[target].entry(index).or_default();
                p.acc.merge(&acc);
                p.reports += 1;
                p.len_ns = p.len_ns.max(len_ns);
                p.incoming.extend(incoming_cpu);
                p.cpus.extend(cpu);
                incoming[target].extend(incoming_cpu);
                cpus[target].extend(cpu);
                // Intervals complete in order: emit every complete one at the front.
                while let Some(entry) = pending[target].first_entry() {
                    if entry.get().reports < cfg.flows - done[target] {
                        break;
                    }
                    let (index, p) = entry.remove_entry();
                    emit(target, index, &p, &mut p50s);
                }
            }
            FlowMsg::Done {
                target,
                total,
                napi_id,
                xdp: flow_xdp,
            } => {
                if let Some(x) = flow_xdp {
                    xdp[target] = Some(*x);
                }
                totals[target].merge(&total);
                napi[target] = napi[target].or(napi_id);
                done[target] += 1;
            }
            FlowMsg::Failed(e) => {
                stop.store(true, Ordering::Relaxed);
                failure.get_or_insert(e);
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if let Some(e) = failure {
        return Err(e);
    }
    for (t, map) in pending.iter_mut().enumerate() {
        while let Some((index, p)) = map.pop_first() {
            emit(t, index, &p, &mut p50s);
        }
    }
    if let Some(e) = write_err {
        return Err(io_err("writing the report")(e));
    }
    let measured_s = (clock.now_ns().saturating_sub(plan.start_ns)) as f64 / 1e9;
    let duration_s = cfg
        .duration
        .map_or(measured_s, |d| d.as_secs_f64().min(measured_s.max(0.0)));
    Ok((0..ntargets)
        .map(|t| {
            let a = &totals[t];
            let mut notes = Vec::new();
            if cfg.timestamp && !a.hw_stamps {
                notes.push("no hardware timestamps: this NIC/driver gives none (loopback and veth never do); the split uses software stamps".into());
            }
            if matches!(cfg.wait, Wait::BusyPoll | Wait::EpollBusy) && napi[t] == Some(0) {
                notes.push("SO_INCOMING_NAPI_ID is 0: these packets have no NAPI context (loopback, veth without GRO), so busy polling had nothing to poll".into());
            }
            if a.tx_send.count() == 0 && cfg.timestamp {
                notes.push("no software TX stamps came back from the error queue".into());
            }
            ClientSummary {
                kind: Kind::Summary,
                bench: BENCH.into(),
                role: Role::Client,
                target: cfg.targets[t].to_string(),
                duration_s,
                flows: cfg.flows,
                size: cfg.size,
                wait: cfg.wait.to_string(),
                sent: a.sent,
                received: a.received,
                lost: a.lost,
                reordered: a.reordered,
                duplicated: a.duplicated,
                corrupted: a.corrupted,
                send_errors: a.send_errors,
                pps: if duration_s > 0.0 { a.received as f64 / duration_s } else { 0.0 },
                latency_ns: a.rtt.summary(),
                interval_p50_ns: Spread::of_ints(&p50s[t]),
                rx_delivery_ns: a.rx_delivery.summary(),
                tx_send_ns: a.tx_send.summary(),
                hardware_timestamps: cfg.timestamp.then_some(a.hw_stamps),
                incoming_cpus: incoming[t].iter().copied().collect(),
                client_cpus: cpus[t].iter().copied().collect(),
                napi_id: napi[t],
                warmup_round_trips: a.warmup_received,
                notes,
                xdp: xdp[t].clone(),
            }
        })
        .collect())
}
