//! `netsteer bench netchannel`: the NetChannel paper's experiments at this machine's scale,
//! each beside plain TCP run the same way in the same process. Both "hosts" live in this
//! process: on loopback, or in two network namespaces joined by a veth (threads enter a
//! namespace to create their sockets, which keep it).
//!
//! * E1 — one virtual socket, one app thread per side, 1 MiB writes and reads, across
//!   channels × copy workers (receive and send); beside one TCP connection (paper Fig. 6a/6b).
//! * E2 — 4 KiB messages from one app thread across channels (Fig. 6c).
//! * E3 — one latency app (4 KiB ping-pong) beside N bulk apps: plain TCP, netchannel with
//!   the latency app on the bulk apps' channels (shared), and on its own latency channel
//!   (isolated) (Fig. 6d).
//! * E4 — throughput per core (all CPU busy time of the machine, from /proc/stat) with one
//!   channel and no workers, against raw TCP (Fig. 8a).

mod e1_e2;
mod e3;
mod e4;
pub mod message;
mod recovery;

use e1_e2::{e1, e2};
use e3::e3;
use e4::e4;
use recovery::recovery;

use crate::report::Kind;
use crate::stats::LatencyRecorder;
use message::*;
use netchannel::{Endpoint, Policy, SocketOptions, VSocket};
use netsteer_host::HostFs;
use netsteer_host::sample::read_sample;
use netsteer_sock::buf::AlignedBuf;
use netsteer_sock::{cpu, netns};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Experiment {
    /// One socket: 1 vs N channels × receive copy workers.
    #[cfg_attr(feature = "clap", value(name = "E1"))]
    E1,
    /// 4 KiB messages: throughput vs channel count.
    #[cfg_attr(feature = "clap", value(name = "E2"))]
    E2,
    /// A latency app's tail beside bulk apps, shared vs isolated channels.
    #[cfg_attr(feature = "clap", value(name = "E3"))]
    E3,
    /// Throughput per core against plain TCP.
    #[cfg_attr(feature = "clap", value(name = "E4"))]
    E4,
    /// A channel killed mid-stream: re-sent, re-opened, throughput before vs after.
    #[cfg_attr(feature = "clap", value(name = "recovery"))]
    Recovery,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub experiments: Vec<Experiment>,
    pub duration: Duration,
    pub repeat: usize,
    /// Channel counts for E1 and E2.
    pub channels: Vec<u16>,
    /// Copy-worker counts for E1.
    pub copy_workers: Vec<usize>,
    pub bulk_apps: usize,
    /// Namespace files (e.g. /run/netns/A) of the two hosts; None = this namespace.
    pub client_netns: Option<PathBuf>,
    pub server_netns: Option<PathBuf>,
    /// The server's address (127.0.0.1 on loopback, its veth address otherwise).
    pub server_ip: IpAddr,
    /// CPUs of the sending and receiving app threads.
    pub sender_cpu: Option<u32>,
    pub receiver_cpu: Option<u32>,
    /// With neither CPU given, pin the sender to the first allowed CPU and the receiver to
    /// the second.
    pub pin: bool,
    /// E3 isolated: run the latency channels' I/O threads under SCHED_FIFO.
    pub latency_realtime: bool,
    /// Bytes per write and read in the stream experiments.
    pub io_bytes: usize,
    /// E1 and E2 also run one MPTCP connection (IPPROTO_MPTCP, same writes and reads) beside
    /// plain TCP; its subflows are whatever the namespaces' path managers open.
    pub mptcp: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            experiments: vec![
                Experiment::E1,
                Experiment::E2,
                Experiment::E3,
                Experiment::E4,
            ],
            duration: Duration::from_secs(3),
            repeat: 3,
            channels: vec![1, 2],
            copy_workers: vec![0, 1, 2],
            bulk_apps: 2,
            client_netns: None,
            server_netns: None,
            server_ip: IpAddr::from([127, 0, 0, 1]),
            sender_cpu: None,
            receiver_cpu: None,
            pin: true,
            latency_realtime: true,
            io_bytes: 1 << 20,
            mptcp: false,
        }
    }
}

const MESSAGE: usize = 4096;
const WARMUP_RTTS: usize = 100;
/// Round trips a latency row needs after the warm-up before its percentiles mean anything.
const MIN_SAMPLES: u64 = 200;

/// A connection of either kind, as the experiments use it.
trait Conn: Send + Sync + 'static {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_all_of(&self, buf: &[u8]) -> io::Result<()>;
    fn finish(&self) -> io::Result<()>;
    /// Sends one message (a byte stream has no boundaries: a plain write).
    fn send_message(&self, m: &[u8]) -> io::Result<()> {
        self.write_all_of(m)
    }
    /// Takes whatever is next without copying it where the API allows (bytes, 0 at EOF).
    fn drain_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf)
    }
    /// Writes a buffer the application hands over (it will not change it): a virtual socket
    /// keeps a reference for re-sending instead of a copy.
    fn write_shared(&self, b: &bytes::Bytes) -> io::Result<()> {
        self.write_all_of(b)
    }
}

impl Conn for TcpStream {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
    fn write_all_of(&self, buf: &[u8]) -> io::Result<()> {
        (&*self).write_all(buf)
    }
    fn finish(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

impl Conn for VSocket {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
    fn write_all_of(&self, buf: &[u8]) -> io::Result<()> {
        (&*self).write_all(buf)
    }
    fn finish(&self) -> io::Result<()> {
        self.shutdown_write()
    }
    fn send_message(&self, m: &[u8]) -> io::Result<()> {
        VSocket::send_message(self, m)
    }
    fn drain_some(&self, _buf: &mut [u8]) -> io::Result<usize> {
        Ok(self.read_chunk()?.map_or(0, |c| c.len()))
    }
    fn write_shared(&self, b: &bytes::Bytes) -> io::Result<()> {
        self.write_owned(b.clone())
    }
}

fn in_netns<T: Send>(
    ns: Option<&PathBuf>,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let place = netns::Place {
        netns: ns.map(PathBuf::as_path),
        ..Default::default()
    };
    netns::on_thread(place, f)?
}

fn pin(cpu_id: Option<u32>) {
    if let Some(c) = cpu_id {
        let _ = cpu::pin_current_thread(&[c]);
    }
}

/// Machine-wide CPU time over a run, from /proc/stat.
struct Busy {
    start: Option<netsteer_host::parse::CpuTimes>,
}

fn cpu_total() -> Option<netsteer_host::parse::CpuTimes> {
    read_sample(&HostFs::default()).ok().map(|s| s.stat.total)
}

impl Busy {
    fn start() -> Busy {
        Busy { start: cpu_total() }
    }

    /// (cores busy on average, % stolen) over `secs`.
    fn finish(&self, secs: f64) -> (f64, f64) {
        let (Some(a), Some(b)) = (self.start, cpu_total()) else {
            return (f64::NAN, f64::NAN);
        };
        let busy =
            |c: &netsteer_host::parse::CpuTimes| c.user + c.nice + c.system + c.irq + c.softirq;
        let ticks = busy(&b).saturating_sub(busy(&a)) as f64;
        let total = b.total().saturating_sub(a.total()) as f64;
        let steal = b.steal.saturating_sub(a.steal) as f64;
        // USER_HZ is 100 on every Linux ABI.
        (
            ticks / 100.0 / secs,
            if total > 0.0 {
                100.0 * steal / total
            } else {
                0.0
            },
        )
    }
}

struct Net<'a> {
    cfg: &'a Config,
}

impl Net<'_> {
    fn path(&self) -> &'static str {
        if self.cfg.server_netns.is_some() || self.cfg.client_netns.is_some() {
            "veth"
        } else {
            "loopback"
        }
    }

    /// Two endpoints and `opts.len()` virtual sockets: (client sockets, server sockets) in
    /// the same order.
    fn nc(
        &self,
        server_cfg: netchannel::Config,
        client_cfg: netchannel::Config,
        opts: &[SocketOptions],
    ) -> io::Result<(Endpoint, Endpoint, Vec<VSocket>, Vec<VSocket>)> {
        let ip = self.cfg.server_ip;
        let server = in_netns(self.cfg.server_netns.as_ref(), || {
            Endpoint::listen(SocketAddr::new(ip, 0), server_cfg)
        })?;
        let addr = server.local_addr().expect("listening");
        let listener = server.bind(1)?;
        let (client, socks) = in_netns(self.cfg.client_netns.as_ref(), || {
            let c = Endpoint::new(client_cfg)?;
            let socks = opts
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    c.connect(addr, 1, *o).map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("netchannel socket {i} of {} to {addr}: {e}", opts.len()),
                        )
                    })
                })
                .collect::<io::Result<Vec<_>>>()?;
            Ok((c, socks))
        })?;
        let accepted = socks
            .iter()
            .enumerate()
            .map(|(i, _)| {
                listener
                    .accept_timeout(Duration::from_secs(10))
                    .map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("accepting netchannel socket {i} on {addr}: {e}"),
                        )
                    })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok((server, client, socks, accepted))
    }

    fn tcp(&self, n: usize) -> io::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
        let ip = self.cfg.server_ip;
        let l = in_netns(self.cfg.server_netns.as_ref(), || {
            TcpListener::bind(SocketAddr::new(ip, 0))
        })?;
        let addr = l.local_addr()?;
        let clients = in_netns(self.cfg.client_netns.as_ref(), || {
            (0..n)
                .map(|i| {
                    let s = TcpStream::connect(addr).map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("TCP connection {i} of {n} to {addr}: {e}"),
                        )
                    })?;
                    s.set_nodelay(true)?;
                    Ok(s)
                })
                .collect::<io::Result<Vec<_>>>()
        })?;
        let servers = (0..n)
            .map(|_| {
                let s = l.accept()?.0;
                s.set_nodelay(true)?;
                Ok(s)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok((clients, servers))
    }
}

/// One timed transfer: bits per second, cores busy, % steal.
#[derive(Debug, Clone, Copy)]
struct Point {
    bps: f64,
    cores: f64,
    steal: f64,
}

/// What one transfer sends and how it reads.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    /// Bytes per write (or per message).
    chunk: usize,
    /// Send each chunk as a message (EOM-delimited on netchannel).
    messages: bool,
    /// Read into the app's buffer (`read`) rather than taking chunks as they arrived.
    copy_reads: bool,
    /// Hand the sender's buffer over (`write_owned`) instead of lending it.
    owned: bool,
}

/// The sender writes `traffic.chunk`-byte buffers for `duration`, then finishes; the receiver
/// drains to EOF. Throughput counts what the receiver got.
fn transfer<C: Conn>(tx: C, rx: C, cfg: &Config, traffic: Traffic) -> io::Result<Point> {
    let tx = Arc::new(tx);
    let rx = Arc::new(rx);
    let (scpu, rcpu, duration) = (cfg.sender_cpu, cfg.receiver_cpu, cfg.duration);
    let busy = Busy::start();
    let started = Instant::now();
    let reader = {
        let rx = rx.clone();
        thread::spawn(move || -> io::Result<(u64, Instant)> {
            pin(rcpu);
            // Page-aligned, as iperf3's buffer is: into a malloc'd one the kernel's copy runs
            // at half speed or full speed depending on where the allocator put it (see
            // `AlignedBuf`), which made plain TCP's per-core rate bimodal in E4.
            let mut buf = AlignedBuf::new(1 << 20);
            let mut total = 0u64;
            loop {
                let n = if traffic.copy_reads {
                    rx.read_some(&mut buf)?
                } else {
                    rx.drain_some(&mut buf)?
                };
                match n {
                    0 => return Ok((total, Instant::now())),
                    n => total += n as u64,
                }
            }
        })
    };
    let writer = {
        let tx = tx.clone();
        thread::spawn(move || -> io::Result<()> {
            pin(scpu);
            let buf = bytes::Bytes::from(vec![0x5au8; traffic.chunk]);
            let deadline = started + duration;
            while Instant::now() < deadline {
                if traffic.messages {
                    tx.send_message(&buf)?;
                } else if traffic.owned {
                    tx.write_shared(&buf)?;
                } else {
                    tx.write_all_of(&buf)?;
                }
            }
            tx.finish()
        })
    };
    writer
        .join()
        .map_err(|_| io::Error::other("writer panicked"))??;
    let (bytes, end) = reader
        .join()
        .map_err(|_| io::Error::other("reader panicked"))??;
    let secs = (end - started).as_secs_f64();
    let (cores, steal) = busy.finish(secs);
    Ok(Point {
        bps: bytes as f64 * 8.0 / secs,
        cores,
        steal,
    })
}

fn nc_cfg(channels: u16, workers: usize) -> netchannel::Config {
    netchannel::Config {
        throughput_channels: channels,
        latency_channels: 0,
        copy_workers: workers,
        ..netchannel::Config::default()
    }
}

/// Pins an endpoint's channel I/O threads to `cpu` (its application thread's CPU), if the
/// run pins at all.
fn io_on(cfg: &netchannel::Config, cpu: Option<u32>) -> netchannel::Config {
    netchannel::Config {
        io_cpus: cpu.map_or_else(|| cfg.io_cpus.clone(), |c| vec![c]),
        ..cfg.clone()
    }
}

/// One virtual socket streaming from the client endpoint to the server endpoint. With
/// `pin_io` each endpoint's I/O threads share its application thread's CPU, as the kernel's
/// own TCP work for a socket runs on (or is steered to) the CPU of the thread using it.
fn nc_stream(
    net: &Net<'_>,
    cfg: netchannel::Config,
    read_copy: bool,
    owned: bool,
    pin_io: bool,
) -> io::Result<Point> {
    let (server, client) = if pin_io {
        (
            io_on(&cfg, net.cfg.receiver_cpu),
            io_on(&cfg, net.cfg.sender_cpu),
        )
    } else {
        (cfg.clone(), cfg)
    };
    let (_s, _c, mut cs, mut ss) = net.nc(server, client, &[SocketOptions::default()])?;
    let (tx, rx) = (cs.pop().expect("one"), ss.pop().expect("one"));
    let traffic = Traffic {
        chunk: net.cfg.io_bytes,
        messages: false,
        copy_reads: read_copy,
        owned,
    };
    transfer(tx, rx, net.cfg, traffic)
}

fn tcp_stream(net: &Net<'_>, chunk: usize) -> io::Result<Point> {
    let (mut c, mut s) = net.tcp(1)?;
    let traffic = Traffic {
        chunk,
        messages: false,
        copy_reads: true,
        owned: false,
    };
    transfer(
        c.pop().expect("one"),
        s.pop().expect("one"),
        net.cfg,
        traffic,
    )
}

/// One MPTCP connection, as `tcp_stream`: the point and the subflows it had beyond the first.
fn mptcp_stream(net: &Net<'_>, chunk: usize) -> io::Result<(Point, u8)> {
    use netsteer_sock::mptcp;
    let cfg = net.cfg;
    let ip = cfg.server_ip;
    let l = in_netns(cfg.server_netns.as_ref(), || {
        mptcp::listen(SocketAddr::new(ip, 0))
    })?;
    let addr = l.local_addr()?;
    let c = in_netns(cfg.client_netns.as_ref(), || mptcp::connect(addr))?;
    c.set_nodelay(true)?;
    let s = l.accept()?.0;
    s.set_nodelay(true)?;
    // The path manager adds subflows once the connection is fully established (after the
    // first data): count them halfway through the transfer, on a second descriptor.
    let probe = c.try_clone()?;
    let half = cfg.duration / 2;
    let counter = thread::spawn(move || {
        thread::sleep(half);
        mptcp::extra_subflows(std::os::fd::AsFd::as_fd(&probe))
    });
    let traffic = Traffic {
        chunk,
        messages: false,
        copy_reads: true,
        owned: false,
    };
    let point = transfer(c, s, cfg, traffic)?;
    let counted = counter
        .join()
        .map_err(|_| io::Error::other("the subflow counter panicked"))?;
    let extra = counted.ok_or_else(|| {
        io::Error::other(format!(
            "the MPTCP connection to {addr} fell back to TCP (is net.mptcp.enabled 1 on both hosts?)"
        ))
    })?;
    Ok((point, extra))
}

fn mptcp_row(points: &[(Point, u8)]) -> Option<MptcpRow> {
    if points.is_empty() {
        return None;
    }
    let pts: Vec<Point> = points.iter().map(|(p, _)| *p).collect();
    let spread = median_of(&pts, |p| p.bps);
    Some(MptcpRow {
        bits_per_second: spread.median,
        spread,
        extra_subflows: points.iter().map(|(_, n)| *n).min().unwrap_or(0),
    })
}

/// The spread of a point's repeats; all zero when none gave a finite value (the message keeps
/// its shape).
fn spread_of(values: &[f64]) -> Spread {
    Spread::of(values).unwrap_or_default()
}

fn median_of(points: &[Point], f: impl Fn(&Point) -> f64) -> Spread {
    spread_of(&points.iter().map(f).collect::<Vec<_>>())
}

/// Steal (% of CPU time the hypervisor gave to other guests) in any one run at or above
/// which the experiment's figures are void: on the 2-vCPU development VM a quiet run sees
/// 0.3–1 %, and a run with 5 % stolen from the two app threads no longer compares like with
/// like.
pub const STEAL_VOID_PCT: f64 = 5.0;

fn setup(net: &Net<'_>, steal: Spread) -> Setup {
    Setup {
        cores: thread::available_parallelism().map_or(0, |n| n.get()),
        path: net.path().into(),
        duration_s: net.cfg.duration.as_secs_f64(),
        repeat: net.cfg.repeat,
        steal_pct: steal.median,
        steal_max_pct: steal.max,
        void: (steal.max >= STEAL_VOID_PCT).then(|| {
            format!(
                "void: {:.1}% of the CPU time was stolen by the hypervisor in one run (≥ {STEAL_VOID_PCT}%); run again on a quieter host",
                steal.max
            )
        }),
        sender_cpu: net.cfg.sender_cpu,
        receiver_cpu: net.cfg.receiver_cpu,
    }
}

fn summary(net: &Net<'_>, steal: Spread, result: Result) -> Summary {
    Summary {
        kind: Kind::Summary,
        bench: BENCH.into(),
        setup: setup(net, steal),
        result,
    }
}

fn steal_of(points: &[Point]) -> Spread {
    median_of(points, |p| p.steal)
}

/// With neither app thread pinned (and `pin` on), the sender goes to the first CPU the
/// process may use and the receiver to the second, as benches/netchannel.sh does: unpinned,
/// the scheduler sometimes stacks both app threads and the I/O threads on one CPU, and E4's
/// per-core ratio then measures the scheduler (0.75–0.95 over five unpinned runs on the
/// 2-vCPU VM, issue 14).
fn with_default_pins(cfg: &Config) -> Config {
    let mut cfg = cfg.clone();
    if cfg.pin && cfg.sender_cpu.is_none() && cfg.receiver_cpu.is_none() {
        let allowed = cpu::allowed_cpus().unwrap_or_default();
        if let [a, b, ..] = allowed[..] {
            cfg.sender_cpu = Some(a);
            cfg.receiver_cpu = Some(b);
        }
    }
    cfg
}

/// Runs the chosen experiments in order, handing each summary to `emit` as soon as it is done.
pub fn run(cfg: &Config, mut emit: impl FnMut(&Summary) -> io::Result<()>) -> io::Result<()> {
    if cfg.channels.is_empty() || cfg.channels.contains(&0) || cfg.copy_workers.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--channels and --copy-workers need at least one value, channels ≥ 1",
        ));
    }
    if cfg.duration.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--duration must be above 0",
        ));
    }
    // Checked up front: a CPU the process may not use would otherwise leave a thread unpinned
    // and the run silently different from what was asked.
    cpu::check_cpus("--sender-cpu", cfg.sender_cpu.as_slice())?;
    cpu::check_cpus("--receiver-cpu", cfg.receiver_cpu.as_slice())?;
    let cfg = &with_default_pins(cfg);
    let net = Net { cfg };
    for e in &cfg.experiments {
        let s = match e {
            Experiment::E1 => e1(&net)?,
            Experiment::E2 => e2(&net)?,
            Experiment::E3 => e3(&net)?,
            Experiment::E4 => e4(&net)?,
            Experiment::Recovery => recovery(&net)?,
        };
        emit(&s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Message;

    #[test]
    fn app_threads_are_pinned_to_the_first_two_allowed_cpus_unless_told() {
        let allowed = cpu::allowed_cpus().unwrap();
        let pinned = with_default_pins(&Config::default());
        if allowed.len() >= 2 {
            assert_eq!(pinned.sender_cpu, Some(allowed[0]));
            assert_eq!(pinned.receiver_cpu, Some(allowed[1]));
        } else {
            assert_eq!((pinned.sender_cpu, pinned.receiver_cpu), (None, None));
        }
        let unpinned = with_default_pins(&Config {
            pin: false,
            ..Config::default()
        });
        assert_eq!((unpinned.sender_cpu, unpinned.receiver_cpu), (None, None));
        // One CPU given: the other is left to the scheduler, as asked.
        let one = with_default_pins(&Config {
            receiver_cpu: Some(allowed[0]),
            ..Config::default()
        });
        assert_eq!((one.sender_cpu, one.receiver_cpu), (None, Some(allowed[0])));
    }

    #[test]
    fn a_run_with_enough_steal_is_void_and_says_so() {
        let cfg = Config::default();
        let net = Net { cfg: &cfg };
        let quiet = setup(&net, spread_of(&[0.3, 0.9, 4.9]));
        assert_eq!(quiet.void, None);
        assert_eq!((quiet.steal_pct, quiet.steal_max_pct), (0.9, 4.9));
        let stolen = setup(&net, spread_of(&[0.3, 0.9, 7.5]));
        let why = stolen.void.clone().unwrap();
        assert!(why.contains("7.5%"), "{why}");
        let s = Summary {
            kind: Kind::Summary,
            bench: BENCH.into(),
            setup: stolen,
            result: Result::E4(E4 {
                bits_per_second_per_core: 1.0,
                ratio: 1.0,
                rows: Vec::new(),
                tcp_bits_per_second: 1.0,
                tcp_cores_used: 1.0,
                tcp_bits_per_second_per_core: 1.0,
                tcp_spread: spread_of(&[1.0]),
                ratio_spread: None,
            }),
        };
        assert!(s.human()[1].contains("void"), "{:?}", s.human());
        let back: Summary = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
