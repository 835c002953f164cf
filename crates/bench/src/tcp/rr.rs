//! tcp-rr: request/response transactions over persistent connections; each flow keeps
//! `pipeline` requests outstanding and times each from its write to the last byte of its
//! response.

use crate::clock::Clock;
use crate::report::{Kind, Role};
use crate::stats::{LatencyRecorder, Spread};
use crate::tcp::cost::CostMeter;
use crate::tcp::message::{RrInterval, RrSummary, Sides};
use crate::tcp::proto::{Finish, ServerFlow, TestKind, TestSpec};
use crate::tcp::{Session, SockOpts, io_ctx, wait_of};
use crate::udp_echo::{BenchError, Wait};
use crate::waiter::{Busy, Waiter};
use netsteer_sock::buf::AlignedBuf;
use netsteer_sock::cpu::{ThreadUsage, current_cpu, pin_current_thread};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

pub const BENCH: &str = "tcp-rr";

/// Reads exactly `buf.len()` bytes. Ok(false) when the peer closed before the first byte (a
/// clean end between transactions). In spin mode the socket is non-blocking and this loops.
fn read_full(
    mut sock: &TcpStream,
    buf: &mut [u8],
    stop: &AtomicBool,
    waiter: &Waiter,
) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match sock.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("peer closed after {got} of {} bytes", buf.len()),
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
                }
                waiter.idle()?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn write_full(mut sock: &TcpStream, buf: &[u8], stop: &AtomicBool) -> io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match sock.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Prepares a flow's socket for its wait mode (in the thread that will wait: the epoll
/// instance is that thread's).
fn set_wait(sock: &TcpStream, wait: Wait, busy: Busy) -> io::Result<Waiter> {
    use std::os::fd::AsFd;
    sock.set_nonblocking(wait.nonblocking())?;
    Waiter::new(sock.as_fd(), wait, busy)
}

/// The server side of one flow: answer each request with a response until the client closes.
pub(crate) fn respond(
    sock: &TcpStream,
    spec: &TestSpec,
    stop: &AtomicBool,
    cpus: &mut BTreeSet<u32>,
) -> ServerFlow {
    let mut out = ServerFlow::default();
    // Page-aligned both ways: the kernel's copies into and out of a misaligned buffer are
    // slower (see `AlignedBuf`), and a 4 KiB malloc'd buffer starts at 16 mod 64.
    let mut req = AlignedBuf::new(spec.request_size as usize);
    let mut resp = AlignedBuf::new(spec.response_size as usize);
    resp.fill(0x5a);
    let r: io::Result<()> = (|| {
        sock.set_nodelay(true)?;
        let waiter = set_wait(sock, wait_of(spec), spec.busy())?;
        while read_full(sock, &mut req, stop, &waiter)? {
            write_full(sock, &resp, stop)?;
            out.transactions += 1;
            out.bytes += req.len() as u64;
            if out.transactions % 1024 == 0 {
                cpus.extend(current_cpu());
            }
        }
        Ok(())
    })();
    if let Err(e) = r
        && !stop.load(Ordering::Relaxed)
    {
        out.error = Some(e.to_string());
    }
    out
}

#[derive(Debug, Clone)]
pub struct RrConfig {
    pub target: SocketAddr,
    pub flows: u32,
    pub cpus: Vec<u32>,
    pub request_size: u32,
    pub response_size: u32,
    /// Requests each flow keeps outstanding.
    pub pipeline: u32,
    pub wait: Wait,
    /// Busy polling for `Wait::BusyPoll` and `Wait::EpollBusy` (both sides).
    pub busy: Busy,
    pub duration: Duration,
    pub interval: Duration,
    pub warmup: Duration,
    /// A response later than this ends the run with an error.
    pub timeout: Duration,
    pub congestion: Option<String>,
    pub mss: Option<u32>,
    /// Source port of data connection 0 (the others count up); None: the kernel's choice.
    pub src_port: Option<u16>,
}

impl RrConfig {
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Config(m));
        if self.flows == 0 || self.flows > 256 {
            return bad(format!("--flows {}: 1..=256", self.flows));
        }
        for (flag, v) in [
            ("--request-size", self.request_size),
            ("--response-size", self.response_size),
        ] {
            if v == 0 || v > 16 << 20 {
                return bad(format!("{flag} {v}: 1 B..=16 MiB"));
            }
        }
        if self.pipeline == 0 || self.pipeline > 1024 {
            return bad(format!("--pipeline {}: 1..=1024", self.pipeline));
        }
        if self.duration.is_zero() || self.interval.is_zero() {
            return bad("--duration and --interval must be more than 0".into());
        }
        if let Some(p) = self.src_port
            && (p == 0 || u32::from(p) + self.flows - 1 > u32::from(u16::MAX))
        {
            return bad(format!(
                "--src-port {p} with {} flows: ports 1..=65535 for every flow",
                self.flows
            ));
        }
        netsteer_sock::cpu::check_cpus("--cpu", &self.cpus)
            .map_err(|e| BenchError::Config(e.to_string()))?;
        Ok(())
    }

    fn spec(&self) -> TestSpec {
        TestSpec {
            kind: TestKind::TcpRr,
            flows: self.flows,
            duration_s: (self.warmup + self.duration).as_secs_f64(),
            write_size: 1,
            verify: false,
            zerocopy_recv: false,
            mss: self.mss,
            congestion: self.congestion.clone(),
            nodelay: true,
            request_size: self.request_size,
            response_size: self.response_size,
            wait: self.wait.to_string(),
            busy_poll_us: self.busy.usecs,
            busy_poll_budget: self.busy.budget,
            prefer_busy_poll: self.busy.prefer,
            read_size: None,
            engine: crate::tcp::Engine::Threads,
        }
    }
}

enum FlowMsg {
    Interval {
        index: u64,
        rec: Box<LatencyRecorder>,
    },
    Done {
        usage: ThreadUsage,
        cpus: BTreeSet<u32>,
        all_transactions: u64,
    },
    Failed(BenchError),
}

/// Measurement window shared by the flows, in clock nanoseconds.
#[derive(Clone, Copy)]
struct Plan {
    start_ns: u64,
    end_ns: u64,
    interval_ns: u64,
}

fn run_flow(
    cfg: &RrConfig,
    flow: u32,
    sock: &TcpStream,
    clock: &dyn Clock,
    plan: Plan,
    tx: &mpsc::Sender<FlowMsg>,
    stop: &AtomicBool,
) -> Result<(), BenchError> {
    let what = || format!("flow {flow}");
    let waiter = set_wait(sock, cfg.wait, cfg.busy)
        .map_err(io_ctx(format!("flow {flow}: --wait {}", cfg.wait)))?;
    let before = ThreadUsage::current().unwrap_or_default();
    let mut cpus = BTreeSet::new();
    cpus.extend(current_cpu());
    // Page-aligned, as the server's (see `AlignedBuf`).
    let mut req = AlignedBuf::new(cfg.request_size as usize);
    req.fill(0xa5);
    let mut resp = AlignedBuf::new(cfg.response_size as usize);
    let mut sent_at: VecDeque<u64> = VecDeque::with_capacity(cfg.pipeline as usize);
    let mut rec = LatencyRecorder::new();
    let mut index = 0u64;
    let mut all = 0u64;
    for _ in 0..cfg.pipeline {
        sent_at.push_back(clock.now_ns());
        write_full(sock, &req, stop).map_err(io_ctx(what()))?;
    }
    while let Some(t_sent) = sent_at.front().copied() {
        if !read_full(sock, &mut resp, stop, &waiter).map_err(io_ctx(what()))? {
            return Err(BenchError::Config(format!(
                "{}: the server closed the connection",
                what()
            )));
        }
        let now = clock.now_ns();
        sent_at.pop_front();
        all += 1;
        if t_sent >= plan.start_ns {
            let i = (now.saturating_sub(plan.start_ns)) / plan.interval_ns;
            if i > index && rec.count() > 0 {
                let full = std::mem::take(&mut rec);
                let _ = tx.send(FlowMsg::Interval {
                    index,
                    rec: Box::new(full),
                });
            }
            index = index.max(i);
            if now <= plan.end_ns {
                rec.record(now - t_sent);
            }
        }
        if all.is_multiple_of(1024) {
            cpus.extend(current_cpu());
        }
        if now < plan.end_ns && !stop.load(Ordering::Relaxed) {
            sent_at.push_back(clock.now_ns());
            write_full(sock, &req, stop).map_err(io_ctx(what()))?;
        }
    }
    if rec.count() > 0 {
        let _ = tx.send(FlowMsg::Interval {
            index,
            rec: Box::new(rec),
        });
    }
    let _ = sock.shutdown(Shutdown::Write);
    cpus.extend(current_cpu());
    let _ = tx.send(FlowMsg::Done {
        usage: ThreadUsage::current().unwrap_or_default().since(&before),
        cpus,
        all_transactions: all,
    });
    Ok(())
}

#[derive(Default)]
struct Pending {
    rec: LatencyRecorder,
    reports: u32,
}

/// Runs a tcp-rr test; `on_interval` gets each interval once every flow has reported it.
pub fn run_rr_client(
    cfg: &RrConfig,
    clock: Arc<dyn Clock>,
    mut on_interval: impl FnMut(&RrInterval) -> io::Result<()>,
) -> Result<RrSummary, BenchError> {
    cfg.validate()?;
    let session = Session::open(cfg.target, &cfg.spec(), cfg.timeout)?;
    let opts = SockOpts {
        nodelay: true,
        congestion: cfg.congestion.clone(),
        mss: cfg.mss,
        // Each flow's thread sets its wait mode up itself (set_wait).
        busy_poll_us: None,
        src_port: cfg.src_port,
    };
    let mut socks = Vec::new();
    for f in 0..cfg.flows {
        socks.push(Arc::new(session.data(f, &opts, cfg.timeout)?));
    }
    let go = Arc::new(Barrier::new(cfg.flows as usize + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let meter = CostMeter::start();
    // The plan is fixed before the flows start; they wait for it at the barrier.
    let t0 = clock.now_ns();
    let plan = Plan {
        start_ns: t0 + cfg.warmup.as_nanos() as u64,
        end_ns: t0 + (cfg.warmup + cfg.duration).as_nanos() as u64,
        interval_ns: cfg.interval.as_nanos() as u64,
    };
    let handles: Vec<_> = socks
        .iter()
        .enumerate()
        .map(|(f, sock)| {
            let (cfg, sock, go, stop, tx, clock) = (
                cfg.clone(),
                sock.clone(),
                go.clone(),
                stop.clone(),
                tx.clone(),
                clock.clone(),
            );
            std::thread::spawn(move || {
                let pinned = match cfg.cpus.get(f % cfg.cpus.len().max(1)) {
                    Some(&cpu) => pin_current_thread(&[cpu])
                        .map_err(io_ctx(format!("pinning flow {f} to CPU {cpu}"))),
                    None => Ok(()),
                };
                go.wait();
                if let Err(e) =
                    pinned.and_then(|()| run_flow(&cfg, f as u32, &sock, &*clock, plan, &tx, &stop))
                {
                    let _ = tx.send(FlowMsg::Failed(e));
                }
            })
        })
        .collect();
    drop(tx);
    go.wait();
    let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
    let mut total = LatencyRecorder::new();
    let mut p50s = Vec::new();
    let (mut usage, mut cpus, mut all) = (ThreadUsage::default(), BTreeSet::new(), 0u64);
    let mut done = 0u32;
    let mut failure = None;
    let mut write_err = None;
    let mut emit = |index: u64, p: &Pending, p50s: &mut Vec<u64>| {
        let secs = plan.interval_ns as f64 / 1e9;
        let end_s = ((index + 1) * plan.interval_ns).min(plan.end_ns - plan.start_ns) as f64 / 1e9;
        let len = (end_s - index as f64 * secs).max(1e-9);
        let m = RrInterval {
            kind: Kind::Interval,
            bench: BENCH.into(),
            role: Role::Client,
            t_s: end_s,
            interval_s: len,
            transactions: p.rec.count(),
            transactions_per_second: p.rec.count() as f64 / len,
            latency_ns: p.rec.summary(),
        };
        if let Some(l) = &m.latency_ns {
            p50s.push(l.p50);
        }
        if write_err.is_none()
            && let Err(e) = on_interval(&m)
        {
            write_err = Some(e);
        }
    };
    // Past this, a flow still waiting for a response is stuck on a dead or frozen server.
    let give_up = plan.end_ns + cfg.timeout.as_nanos() as u64;
    loop {
        let m = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if clock.now_ns() > give_up && !stop.swap(true, Ordering::Relaxed) {
                    failure.get_or_insert(BenchError::NoEcho {
                        target: cfg.target.to_string(),
                        secs: cfg.timeout.as_secs_f64(),
                        hint: " (tcp-rr: a response is overdue)".into(),
                    });
                    for s in &socks {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match m {
            FlowMsg::Interval { index, rec } => {
                total.merge(&rec);
                let p = pending.entry(index).or_default();
                p.rec.merge(&rec);
                p.reports += 1;
            }
            FlowMsg::Done {
                usage: u,
                cpus: c,
                all_transactions,
            } => {
                usage.add(&u);
                cpus.extend(c);
                all += all_transactions;
                done += 1;
            }
            FlowMsg::Failed(e) => {
                if !stop.swap(true, Ordering::Relaxed) {
                    for s in &socks {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
                failure.get_or_insert(e);
            }
        }
        // An interval is complete when every flow still running has reported it (a flow may
        // skip an interval only by having finished).
        while let Some(e) = pending.first_entry() {
            if e.get().reports < cfg.flows - done && done < cfg.flows {
                break;
            }
            let (index, p) = e.remove_entry();
            emit(index, &p, &mut p50s);
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if let Some(e) = failure {
        return Err(e);
    }
    while let Some((index, p)) = pending.pop_first() {
        emit(index, &p, &mut p50s);
    }
    if let Some(e) = write_err {
        return Err(io_ctx("writing the report")(e));
    }
    let client_cost = meter.finish(&usage, &cpus);
    drop(socks);
    let (server_flows, server_cost, _) = session.finish(
        &Finish {
            sent_bytes: Vec::new(),
        },
        cfg.timeout,
    )?;
    let server_all: u64 = server_flows.iter().map(|f| f.transactions).sum();
    let mut notes: Vec<String> = server_flows
        .iter()
        .filter_map(|f| {
            Some(format!(
                "flow {} at the server: {}",
                f.flow,
                f.error.as_ref()?
            ))
        })
        .collect();
    if server_all != all {
        notes.push(format!(
            "the server answered {server_all} requests, the client counted {all} responses"
        ));
    }
    let duration_s = cfg.duration.as_secs_f64();
    let per_tx = |us: u64, n: u64| (n > 0).then(|| us as f64 / n as f64);
    Ok(RrSummary {
        kind: Kind::Summary,
        bench: BENCH.into(),
        role: Role::Client,
        target: cfg.target.to_string(),
        duration_s,
        flows: cfg.flows,
        request_size: cfg.request_size,
        response_size: cfg.response_size,
        pipeline: cfg.pipeline,
        wait: cfg.wait.to_string(),
        transactions: total.count(),
        transactions_per_second: total.count() as f64 / duration_s,
        all_transactions: all,
        latency_ns: total.summary(),
        interval_p50_ns: Spread::of_ints(&p50s),
        cpu_us_per_transaction: Sides {
            client: per_tx(client_cost.thread_us(), all),
            server: per_tx(server_cost.thread_us(), server_all),
        },
        context_switches: Sides {
            client: client_cost.voluntary_switches + client_cost.involuntary_switches,
            server: server_cost.voluntary_switches + server_cost.involuntary_switches,
        },
        cost: Sides {
            client: client_cost,
            server: server_cost,
        },
        notes,
    })
}
