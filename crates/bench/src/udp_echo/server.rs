//! The echo server: one SO_REUSEPORT socket per thread, bursts drained with recvmmsg(2) and
//! answered with sendmmsg(2), every datagram sent back verbatim to whoever sent it.

use super::limit::{Limiter, Limits};
use super::message::{BENCH, Kind, Role, ServerInterval, ServerSummary};
use super::{BenchError, Wait, io_err};
use crate::clock::Clock;
use crate::waiter::{Busy, Waiter};
use netsteer_sock::cpu::ThreadUsage;
use netsteer_sock::{cpu, mmsg::Batch};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::thread::JoinHandleExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A UDP datagram is at most 65535 bytes including its 8-byte header (65507 over IPv4); a slot
/// of 64 KiB holds any of them, so nothing is cut short.
const SLOT: usize = 65536;
/// Most datagrams one recvmmsg(2) takes.
const MAX_BATCH: usize = 64;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub threads: usize,
    /// Thread i runs on `cpus[i % len]`; empty = not pinned.
    pub cpus: Vec<u32>,
    pub wait: Wait,
    /// Busy polling for `Wait::BusyPoll` (SO_BUSY_POLL) and `Wait::EpollBusy` (EPIOCSPARAMS).
    pub busy: Busy,
    pub interval: Duration,
    pub duration: Option<Duration>,
    /// Answer rate limits (see [`super::limit`]); the global one is shared out over threads.
    pub limits: Limits,
    /// Serve from AF_XDP sockets on this interface instead of a UDP socket (one thread per
    /// queue; `threads`, `wait` and the limits do not apply).
    pub xdp: Option<super::xdp::XdpConfig>,
}

/// One thread's counters. Only that thread writes them (a relaxed load and store, no locked
/// instruction on the hot path); the reporting thread reads and sums them.
#[derive(Default)]
struct Counters {
    received: AtomicU64,
    echoed: AtomicU64,
    bytes: AtomicU64,
    empty: AtomicU64,
    truncated: AtomicU64,
    send_errors: AtomicU64,
    rate_limited: AtomicU64,
    /// The thread's user + system CPU time over its run, set when it ends.
    cpu_us: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Snapshot {
    received: u64,
    echoed: u64,
    bytes: u64,
    empty: u64,
    truncated: u64,
    send_errors: u64,
    rate_limited: u64,
}

impl Snapshot {
    fn add(mut self, o: Snapshot) -> Snapshot {
        self.received += o.received;
        self.echoed += o.echoed;
        self.bytes += o.bytes;
        self.empty += o.empty;
        self.truncated += o.truncated;
        self.rate_limited += o.rate_limited;
        self.send_errors += o.send_errors;
        self
    }
}

fn bump(a: &AtomicU64, by: u64) {
    a.store(a.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

fn total(all: &[Arc<Counters>]) -> Snapshot {
    all.iter()
        .fold(Snapshot::default(), |acc, c| acc.add(c.snapshot()))
}

impl Counters {
    fn snapshot(&self) -> Snapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot {
            received: r(&self.received),
            echoed: r(&self.echoed),
            bytes: r(&self.bytes),
            empty: r(&self.empty),
            truncated: r(&self.truncated),
            send_errors: r(&self.send_errors),
            rate_limited: r(&self.rate_limited),
        }
    }
}

pub struct Server {
    sockets: Vec<UdpSocket>,
    xdp: Option<super::xdp::XdpServer>,
    local: SocketAddr,
    cfg: ServerConfig,
}

fn bind_one(addr: SocketAddr, reuse_port: bool) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Only with several threads: a reuseport group adds a hash and a socket pick to every
    // received datagram's lookup.
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        // `[::]` serves IPv4 clients too, as mapped addresses.
        s.set_only_v6(false)?;
    }
    // Room for bursts from many clients; the kernel caps it at net.core.rmem_max.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    Ok(s.into())
}

impl Server {
    pub fn bind(cfg: &ServerConfig) -> Result<Server, BenchError> {
        if cfg.threads == 0 {
            return Err(BenchError::Config("--threads must be at least 1".into()));
        }
        if let Some(x) = &cfg.xdp {
            if !cfg.limits.is_unlimited() {
                return Err(BenchError::Config(
                    "--xdp answers every datagram: rate limits apply to the socket path only"
                        .into(),
                ));
            }
            let server = super::xdp::XdpServer::open(x, cfg.listen.port())?;
            return Ok(Server {
                sockets: Vec::new(),
                xdp: Some(server),
                local: cfg.listen,
                cfg: cfg.clone(),
            });
        }
        let what = format!("--listen {}", cfg.listen);
        let first = bind_one(cfg.listen, cfg.threads > 1).map_err(io_err(what.clone()))?;
        let local = first.local_addr().map_err(io_err(what.clone()))?;
        let mut sockets = vec![first];
        // The others join the first one's port (which may have been chosen by the kernel).
        for _ in 1..cfg.threads {
            sockets.push(bind_one(local, true).map_err(io_err(what.clone()))?);
        }
        Ok(Server {
            sockets,
            xdp: None,
            local,
            cfg: cfg.clone(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves until `stop` is set or `--duration` ends, reporting each interval that saw
    /// traffic through `on_interval`.
    pub fn run(
        self,
        stop: Arc<AtomicBool>,
        clock: Arc<dyn Clock>,
        mut on_interval: impl FnMut(&ServerInterval) -> io::Result<()>,
    ) -> Result<ServerSummary, BenchError> {
        netsteer_sock::wake::install().map_err(io_err("installing the SIGURG wake-up handler"))?;
        let nthreads = self.sockets.len() + self.xdp.as_ref().map_or(0, |x| x.sockets.len());
        let counters: Vec<Arc<Counters>> = (0..nthreads).map(|_| Arc::default()).collect();
        let mut handles = Vec::new();
        let xdp_summary = Arc::new(std::sync::Mutex::new(
            self.xdp.as_ref().map(|x| x.summary_head()),
        ));
        // The program stays attached until the threads are done (dropped at the end of run).
        let mut program = None;
        if let Some(x) = self.xdp {
            program = Some(x.program);
            for (i, (_, xsk)) in x.sockets.into_iter().enumerate() {
                let pin =
                    (!self.cfg.cpus.is_empty()).then(|| self.cfg.cpus[i % self.cfg.cpus.len()]);
                let (stop, counters, summary) =
                    (stop.clone(), counters[i].clone(), xdp_summary.clone());
                handles.push(std::thread::spawn(move || {
                    serve_xdp(xsk, pin, &stop, &counters, &summary)
                }));
            }
        }
        for (i, sock) in self.sockets.into_iter().enumerate() {
            let pin = (!self.cfg.cpus.is_empty()).then(|| self.cfg.cpus[i % self.cfg.cpus.len()]);
            let (stop, counters, cfg) = (stop.clone(), counters[i].clone(), self.cfg.clone());
            handles.push(std::thread::spawn(move || {
                serve(sock, pin, &cfg, &stop, &counters)
            }));
        }
        let start = clock.now_ns();
        let interval_ns = self.cfg.interval.as_nanos().max(1) as u64;
        let end = self.cfg.duration.map(|d| start + d.as_nanos() as u64);
        let mut last = total(&counters);
        let mut last_ns = start;
        let mut next = start + interval_ns;
        let mut result = Ok(());
        while !stop.load(Ordering::Relaxed) && !handles.iter().all(|h| h.is_finished()) {
            let now = clock.now_ns();
            if end.is_some_and(|e| now >= e) {
                break;
            }
            if now < next {
                let wait = (next - now).min(end.map_or(u64::MAX, |e| e.saturating_sub(now)));
                std::thread::sleep(Duration::from_nanos(wait.min(50_000_000)));
                continue;
            }
            let cur = total(&counters);
            let dt = (now - last_ns) as f64 / 1e9;
            if cur.received > last.received {
                let m = ServerInterval {
                    kind: Kind::Interval,
                    bench: BENCH.into(),
                    role: Role::Server,
                    t_s: (now - start) as f64 / 1e9,
                    interval_s: dt,
                    received: cur.received - last.received,
                    echoed: cur.echoed - last.echoed,
                    pps: (cur.echoed - last.echoed) as f64 / dt,
                    bytes: cur.bytes - last.bytes,
                    empty: cur.empty - last.empty,
                    truncated: cur.truncated - last.truncated,
                    send_errors: cur.send_errors - last.send_errors,
                    rate_limited: cur.rate_limited - last.rate_limited,
                };
                if let Err(e) = on_interval(&m) {
                    result = Err(e);
                    break;
                }
            }
            (last, last_ns) = (cur, now);
            next += interval_ns;
        }
        stop.store(true, Ordering::Relaxed);
        // Threads sleep in receives without a timeout: interrupt them until they have seen the
        // stop flag (a signal can land just before a thread blocks, so repeat).
        while handles.iter().any(|h| !h.is_finished()) {
            for h in handles.iter().filter(|h| !h.is_finished()) {
                let _ = netsteer_sock::wake::interrupt(h.as_pthread_t());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut thread_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => thread_err = thread_err.or(Some(e)),
                Err(_) => {
                    thread_err =
                        thread_err.or(Some(BenchError::Config("a server thread panicked".into())))
                }
            }
        }
        if let Some(e) = thread_err {
            return Err(e);
        }
        result.map_err(io_err("writing the report"))?;
        drop(program);
        let total = total(&counters);
        let xdp = xdp_summary.lock().ok().and_then(|s| s.clone());
        Ok(ServerSummary {
            kind: Kind::Summary,
            bench: BENCH.into(),
            role: Role::Server,
            listen: self.local.to_string(),
            threads: nthreads,
            duration_s: (clock.now_ns() - start) as f64 / 1e9,
            received: total.received,
            echoed: total.echoed,
            bytes: total.bytes,
            empty: total.empty,
            truncated: total.truncated,
            send_errors: total.send_errors,
            rate_limited: total.rate_limited,
            limit_per_source_pps: self.cfg.limits.per_source,
            limit_global_pps: self.cfg.limits.global,
            wait: if xdp.is_some() {
                "xdp-spin".into()
            } else {
                self.cfg.wait.to_string()
            },
            cpu_us: counters
                .iter()
                .map(|c| c.cpu_us.load(Ordering::Relaxed))
                .sum(),
            xdp,
        })
    }
}

/// What one receive brought and what became of it.
#[derive(Default)]
struct Tally {
    received: u64,
    echoed: u64,
    bytes: u64,
    empty: u64,
    truncated: u64,
    limited: u64,
}

fn count(c: &Counters, t: Tally) {
    let Tally {
        received,
        echoed,
        bytes,
        empty,
        truncated,
        limited,
    } = t;
    bump(&c.received, received);
    bump(&c.echoed, echoed);
    bump(&c.bytes, bytes);
    if empty > 0 {
        bump(&c.empty, empty);
    }
    if truncated > 0 {
        bump(&c.truncated, truncated);
    }
    if limited > 0 {
        bump(&c.rate_limited, limited);
    }
    if received > echoed + limited {
        bump(&c.send_errors, received - echoed - limited);
    }
}

fn echo_batch(
    batch: &mut Batch,
    fd: std::os::fd::BorrowedFd<'_>,
    n: usize,
    c: &Counters,
    limiter: &mut Option<TimedLimiter>,
) {
    let mut t = Tally {
        received: n as u64,
        ..Tally::default()
    };
    for i in 0..n {
        let (data, cut, _) = batch.datagram(i);
        t.bytes += data.len() as u64;
        t.empty += u64::from(data.is_empty());
        t.truncated += u64::from(cut);
    }
    let (sent, failed, _) = match limiter {
        None => batch.echo(fd),
        Some(l) => batch.echo_where(fd, |from| from.is_some_and(|f| l.allow(f))),
    };
    if limiter.is_some() {
        // What was neither sent nor failed was held back by the limiter.
        t.limited = (n - sent - failed) as u64;
    }
    t.echoed = sent as u64;
    count(c, t);
}

/// A limiter with its own monotonic origin (only built when a limit is set: the unlimited
/// path reads no clock).
struct TimedLimiter {
    limiter: Limiter,
    origin: std::time::Instant,
}

impl TimedLimiter {
    fn allow(&mut self, from: SocketAddr) -> bool {
        let now = self.origin.elapsed().as_nanos() as u64;
        self.limiter.allow(canonical_ip(from), now)
    }
}

/// An IPv4 client of a `[::]` socket arrives as `::ffff:a.b.c.d`: one bucket either way.
fn canonical_ip(a: SocketAddr) -> std::net::IpAddr {
    match a.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        ip => ip,
    }
}

fn serve(
    sock: UdpSocket,
    pin: Option<u32>,
    cfg: &ServerConfig,
    stop: &AtomicBool,
    c: &Counters,
) -> Result<(), BenchError> {
    accounted(pin, c, || serve_loop(&sock, cfg, stop, c))
}

/// Runs a server thread's loop pinned to `pin`, and stores the thread's CPU time over it in
/// `c` (also when the loop fails).
fn accounted<T>(
    pin: Option<u32>,
    c: &Counters,
    work: impl FnOnce() -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    if let Some(cpu) = pin {
        cpu::pin_current_thread(&[cpu]).map_err(io_err(format!("--cpu {cpu}")))?;
    }
    let start = ThreadUsage::current().unwrap_or_default();
    let r = work();
    if let Ok(u) = ThreadUsage::current() {
        let used = u.since(&start);
        c.cpu_us
            .store(used.user_us + used.sys_us, Ordering::Relaxed);
    }
    r
}

fn serve_loop(
    sock: &UdpSocket,
    cfg: &ServerConfig,
    stop: &AtomicBool,
    c: &Counters,
) -> Result<(), BenchError> {
    let fd = sock.as_fd();
    // Blocking receives sleep without a timeout (a timeout arms a kernel timer on every
    // sleep); `run` wakes the threads with a signal when it stops (epoll_wait too).
    if cfg.wait.nonblocking() {
        sock.set_nonblocking(true)
            .map_err(io_err("non-blocking socket"))?;
    }
    let waiter =
        Waiter::new(fd, cfg.wait, cfg.busy).map_err(io_err(format!("--wait {}", cfg.wait)))?;
    let mut batch = Batch::new(MAX_BATCH, SLOT);
    let mut single = vec![0u8; SLOT];
    let mut limiter = (!cfg.limits.is_unlimited()).then(|| TimedLimiter {
        limiter: Limiter::new(Limits {
            per_source: cfg.limits.per_source,
            // Each thread takes its share of the global rate.
            global: cfg
                .limits
                .global
                .map(|g| g.div_ceil(cfg.threads.max(1) as u32)),
        }),
        origin: std::time::Instant::now(),
    });
    let dontwait = cfg.wait.nonblocking();
    // Ping-pong traffic is served with recvfrom/sendto, which cost less per datagram than
    // the mmsg calls (no msghdr to copy in); bursts switch to recvmmsg/sendmmsg batches. Every
    // PROBE-th single datagram is followed by a non-blocking batch receive to detect a backlog
    // (two or more waiting), and PROBE batches of at most one datagram in a row switch back.
    const PROBE: u32 = 64;
    let mut batching = false;
    let (mut since_probe, mut lonely) = (0u32, 0u32);
    // Batch size while batching: doubled while batches come back full, halved when half empty.
    let mut want = 2usize;
    let quiet = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
        )
    };
    let fail = |e: io::Error| io_err(format!("receiving on {:?}", sock.local_addr().ok()))(e);
    while !stop.load(Ordering::Relaxed) {
        if !batching {
            let (len, from) = match netsteer_sock::msg::recv_from(fd, &mut single, dontwait) {
                Ok(r) => r,
                Err(e) if quiet(&e) => {
                    waiter.idle().map_err(fail)?;
                    continue;
                }
                // Datagram contents cannot cause other errors (an unconnected socket gets no
                // ICMP errors), so anything else is the socket itself failing.
                Err(e) => return Err(fail(e)),
            };
            let (len, cut) = (len.min(SLOT), len > SLOT);
            let allowed = match (&mut limiter, from) {
                (Some(l), Some(to)) => l.allow(to),
                _ => true,
            };
            let sent = allowed && from.is_some_and(|to| sock.send_to(&single[..len], to).is_ok());
            count(
                c,
                Tally {
                    received: 1,
                    echoed: u64::from(sent),
                    bytes: len as u64,
                    empty: u64::from(len == 0),
                    truncated: u64::from(cut),
                    limited: u64::from(!allowed),
                },
            );
            since_probe += 1;
            if since_probe < PROBE {
                continue;
            }
            since_probe = 0;
            match batch.recv(fd, MAX_BATCH, true) {
                Ok(n) => {
                    echo_batch(&mut batch, fd, n, c, &mut limiter);
                    // One waiting datagram is ping-pong overlapping (the peer answered while
                    // we were still in sendto); a backlog is two or more.
                    if n >= 2 {
                        batching = true;
                        lonely = 0;
                    }
                }
                Err(e) if quiet(&e) => {}
                Err(e) => return Err(fail(e)),
            }
            continue;
        }
        let n = match batch.recv(fd, want, dontwait) {
            Ok(n) => n,
            Err(e) if quiet(&e) => {
                waiter.idle().map_err(fail)?;
                continue;
            }
            Err(e) => return Err(fail(e)),
        };
        echo_batch(&mut batch, fd, n, c, &mut limiter);
        want = if n == want {
            (want * 2).min(MAX_BATCH)
        } else if n * 2 < want {
            (want / 2).max(2)
        } else {
            want
        };
        lonely = if n <= 1 { lonely + 1 } else { 0 };
        if lonely >= PROBE {
            batching = false;
        }
    }
    Ok(())
}

/// An AF_XDP socket's thread: spins on its rings until stopped, then adds its statistics.
fn serve_xdp(
    mut xsk: netsteer_sock::xdp::xsk::Xsk,
    pin: Option<u32>,
    stop: &AtomicBool,
    c: &Counters,
    summary: &std::sync::Mutex<Option<super::xdp::XdpSummary>>,
) -> Result<(), BenchError> {
    let not_udp4 = accounted(pin, c, || {
        let mut not_udp4 = 0;
        while !stop.load(Ordering::Relaxed) {
            let p = super::xdp::serve_pass(&mut xsk);
            if p.received == 0 {
                std::hint::spin_loop();
                continue;
            }
            not_udp4 += p.not_udp4;
            count(
                c,
                Tally {
                    received: p.received,
                    echoed: p.echoed,
                    bytes: p.bytes,
                    ..Tally::default()
                },
            );
        }
        Ok(not_udp4)
    })?;
    if let Ok(mut s) = summary.lock()
        && let Some(s) = s.as_mut()
    {
        s.not_udp4 += not_udp4;
        if let Ok(st) = xsk.stats() {
            s.add(&st);
        }
    }
    Ok(())
}
