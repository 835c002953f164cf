//! The AF_XDP path of the echo benchmark: the same protocol, payload and statistics as the
//! socket path, with the datagrams taken from (and given to) the NIC queue's ring in user
//! space. A socket client can talk to an XDP server and an XDP client to a socket server.

use super::BenchError;
pub use netsteer_sock::xdp::AttachMode;
use netsteer_sock::xdp::frame::{self, Udp4};
use netsteer_sock::xdp::xsk::{self, BindMode, Xsk, XskStats};
use netsteer_sock::xdp::{self as x, XdpProgram};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Ring entries per socket, and UMEM frames (twice that: one half for receiving, one for
/// sending).
pub const RING: u32 = 1024;
const FRAMES: u32 = 2 * RING;
/// Descriptors taken per pass.
const BATCH: u32 = 64;

/// `--xdp IF[:QUEUE]` and the options around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    pub dev: String,
    /// One queue, or every rx queue of the device (server only).
    pub queue: Option<u32>,
    /// None: native, else generic.
    pub mode: Option<AttachMode>,
    /// None: zero-copy where the driver has it, else copy.
    pub zerocopy: Option<bool>,
    /// Attach even to the interface of the default route.
    pub allow_default_route: bool,
}

impl XdpConfig {
    /// `IF` or `IF:QUEUE`.
    pub fn parse(s: &str) -> Result<XdpConfig, String> {
        let (dev, queue) = match s.rsplit_once(':') {
            Some((d, q)) => (
                d,
                Some(
                    q.parse::<u32>()
                        .map_err(|_| format!("{s:?}: the queue after ':' must be a number"))?,
                ),
            ),
            None => (s, None),
        };
        if dev.is_empty() || dev.len() > 15 || dev.contains('/') {
            return Err(format!("{s:?}: not an interface name"));
        }
        Ok(XdpConfig {
            dev: dev.to_string(),
            queue,
            mode: None,
            zerocopy: None,
            allow_default_route: false,
        })
    }
}

/// What the XDP path reports in the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpSummary {
    pub dev: String,
    /// `native` or `generic`.
    pub attach: String,
    /// `copy` or `zero-copy`.
    pub bind: String,
    pub queues: Vec<u32>,
    /// XDP_STATISTICS summed over the sockets.
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
    /// Frames the server took from the ring that were not echoes it could answer.
    #[serde(default)]
    pub not_udp4: u64,
}

impl XdpSummary {
    pub fn add(&mut self, s: &XskStats) {
        self.rx_dropped += s.rx_dropped;
        self.rx_invalid_descs += s.rx_invalid_descs;
        self.tx_invalid_descs += s.tx_invalid_descs;
        self.rx_ring_full += s.rx_ring_full;
        self.rx_fill_ring_empty_descs += s.rx_fill_ring_empty_descs;
        self.tx_ring_empty_descs += s.tx_ring_empty_descs;
    }
}

fn xdp_err(e: x::XdpError) -> BenchError {
    BenchError::Config(e.to_string())
}

/// Refuses loopback, and the interface that carries the host's default route unless asked:
/// the program would sit in front of all of the host's own traffic.
fn check_route(cfg: &XdpConfig) -> Result<(), BenchError> {
    // IFF_LOOPBACK (0x8) in /sys/class/net/IF/flags.
    let flags = std::fs::read_to_string(format!("/sys/class/net/{}/flags", cfg.dev))
        .ok()
        .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok());
    if flags.is_some_and(|f| f & 0x8 != 0) {
        return Err(BenchError::Config(format!(
            "--xdp {}: loopback has no NIC queue to bypass (its packets never leave the kernel); \
             run the two ends on a veth pair (`netsteer lab with`)",
            cfg.dev
        )));
    }
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    if !cfg.allow_default_route && x::carries_default_route(&routes, &cfg.dev) {
        return Err(BenchError::Config(format!(
            "--xdp {}: this interface carries the default route (the host's own traffic); \
             give --xdp-allow-default-route to attach there anyway",
            cfg.dev
        )));
    }
    Ok(())
}

/// The rx queues of `dev` (/sys/class/net/DEV/queues/rx-N).
fn rx_queues(dev: &str) -> Result<Vec<u32>, BenchError> {
    let dir = format!("/sys/class/net/{dev}/queues");
    let mut qs: Vec<u32> = std::fs::read_dir(&dir)
        .map_err(|e| BenchError::Config(format!("--xdp {dev}: {dir}: {e}")))?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("rx-")?
                .parse()
                .ok()
        })
        .collect();
    qs.sort_unstable();
    Ok(qs)
}

fn bind_name(x: &Xsk) -> &'static str {
    match x.mode {
        BindMode::Copy => "copy",
        BindMode::ZeroCopy => "zero-copy",
    }
}

/// The server's program and one socket per queue.
pub struct XdpServer {
    pub program: XdpProgram,
    pub sockets: Vec<(u32, Xsk)>,
}

impl XdpServer {
    pub fn open(cfg: &XdpConfig, port: u16) -> Result<XdpServer, BenchError> {
        if port == 0 {
            return Err(BenchError::Config(
                "--xdp needs --listen with a port (the program matches on it)".into(),
            ));
        }
        check_route(cfg)?;
        let all = rx_queues(&cfg.dev)?;
        let queues = match cfg.queue {
            Some(q) if !all.contains(&q) => {
                return Err(BenchError::Config(format!(
                    "--xdp {}:{q}: the device has rx queues {all:?}",
                    cfg.dev
                )));
            }
            Some(q) => vec![q],
            None => all.clone(),
        };
        let slots = all.iter().max().map_or(1, |m| m + 1);
        let program = XdpProgram::attach(&cfg.dev, port, slots, cfg.mode).map_err(xdp_err)?;
        let mut sockets = Vec::new();
        for q in queues {
            let xsk = x::bind_socket(&cfg.dev, program.ifindex, q, FRAMES, RING, cfg.zerocopy)
                .map_err(xdp_err)?;
            program.register(q, &xsk).map_err(xdp_err)?;
            sockets.push((q, xsk));
        }
        Ok(XdpServer { program, sockets })
    }

    pub fn summary_head(&self) -> XdpSummary {
        XdpSummary {
            dev: self.program.dev.clone(),
            attach: self.program.mode.to_string(),
            bind: self
                .sockets
                .first()
                .map_or("copy", |(_, x)| bind_name(x))
                .to_string(),
            queues: self.sockets.iter().map(|(q, _)| *q).collect(),
            ..XdpSummary::default()
        }
    }
}

/// What one pass of the server loop did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pass {
    pub received: u64,
    pub echoed: u64,
    pub bytes: u64,
    pub not_udp4: u64,
}

/// One pass: completed sends back to FILL, received frames echoed in place onto TX. Spins
/// (returns an empty pass) when nothing came.
pub fn serve_pass(x: &mut Xsk) -> Pass {
    let mut p = Pass::default();
    let done = x.comp.ready(BATCH);
    if done > 0 {
        // Only the frames of the initial FILL circulate, so FILL always has room for them.
        let room = x.fill.free(done);
        for i in 0..done {
            let a = x.comp.take();
            if i < room {
                x.fill.put(a);
            }
        }
        x.comp.release();
        x.fill.submit();
    }
    let n = x.rx.ready(BATCH);
    if n == 0 {
        x.wake_rx();
        return p;
    }
    let room = x.tx.free(n);
    let mut to_fill = 0;
    for i in 0..n {
        let d = x.rx.take();
        p.received += 1;
        let echo = if i < room {
            x.umem
                .bytes(d.addr, d.len as usize)
                .and_then(frame::echo_in_place)
        } else {
            None
        };
        match echo {
            Some(len) => {
                p.echoed += 1;
                p.bytes += (len - frame::HEADERS) as u64;
                x.tx.put(xsk::desc(d.addr, len as u32));
            }
            None => {
                if i < room {
                    p.not_udp4 += 1;
                }
                if x.fill.free(1) == 1 {
                    x.fill.put(d.addr);
                    to_fill += 1;
                }
            }
        }
    }
    x.rx.release();
    if to_fill > 0 {
        x.fill.submit();
    }
    if p.echoed > 0 {
        x.tx.submit();
        if x.tx_needs_kick() {
            let _ = x.kick_tx();
        }
    }
    p
}

/// The client's side: its own program on its interface (matching its own port), a socket on
/// one queue, and the addresses of the flow.
pub struct XdpLink {
    _program: XdpProgram,
    xsk: Xsk,
    addrs: Udp4,
    /// Frames of the sending half not in flight.
    free: Vec<u64>,
    ip_id: u16,
    frame: Vec<u8>,
    pub summary: XdpSummary,
}

/// Waits (up to `limit`) for the kernel to resolve `ip` on `dev`, prompting it with a datagram
/// to the discard port (the answer, if any, is an ICMP error the kernel handles).
fn neighbour(dev: &str, ip: Ipv4Addr, limit: Duration) -> Result<[u8; 6], BenchError> {
    let start = Instant::now();
    let mut prodded = false;
    loop {
        let arp = std::fs::read_to_string("/proc/net/arp").unwrap_or_default();
        if let Some(mac) = x::parse_arp(&arp, ip, dev) {
            return Ok(mac);
        }
        if !prodded {
            if let Ok(s) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) {
                let _ = s.send_to(b"", (ip, 9));
            }
            prodded = true;
        }
        if start.elapsed() > limit {
            return Err(BenchError::Config(format!(
                "--xdp {dev}: no neighbour entry for {ip} on {dev} after {:.1} s (is {ip} on that link?)",
                limit.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl XdpLink {
    /// `sock` is the flow's connected UDP socket: it holds the source port (so the kernel gives
    /// it to no one else) and tells the source address the kernel would use toward `to`.
    pub fn open(cfg: &XdpConfig, sock: &UdpSocket, to: SocketAddr) -> Result<XdpLink, BenchError> {
        let SocketAddr::V4(to) = to else {
            return Err(BenchError::Config(format!(
                "--xdp: {to}: the AF_XDP path speaks IPv4 only"
            )));
        };
        let from = match sock.local_addr() {
            Ok(SocketAddr::V4(a)) => a,
            Ok(other) => {
                return Err(BenchError::Config(format!(
                    "--xdp: the flow's source {other} is not IPv4"
                )));
            }
            Err(e) => return Err(BenchError::Config(format!("--xdp: source address: {e}"))),
        };
        check_route(cfg)?;
        let src_mac = x::if_mac(&cfg.dev).map_err(xdp_err)?;
        let dst_mac = neighbour(&cfg.dev, *to.ip(), Duration::from_secs(3))?;
        let queue = cfg.queue.unwrap_or(0);
        let slots = rx_queues(&cfg.dev)?.iter().max().map_or(1, |m| m + 1);
        let program = XdpProgram::attach(&cfg.dev, from.port(), slots.max(queue + 1), cfg.mode)
            .map_err(xdp_err)?;
        let xsk = x::bind_socket(&cfg.dev, program.ifindex, queue, FRAMES, RING, cfg.zerocopy)
            .map_err(xdp_err)?;
        program.register(queue, &xsk).map_err(xdp_err)?;
        let first = xsk.first_tx_frame();
        let free = (first..xsk.umem.frames)
            .map(|i| xsk.umem.frame_addr(i))
            .collect();
        let summary = XdpSummary {
            dev: cfg.dev.clone(),
            attach: program.mode.to_string(),
            bind: bind_name(&xsk).to_string(),
            queues: vec![queue],
            ..XdpSummary::default()
        };
        Ok(XdpLink {
            _program: program,
            xsk,
            addrs: Udp4 {
                src_mac,
                dst_mac,
                src: *from.ip(),
                dst: *to.ip(),
                sport: from.port(),
                dport: to.port(),
            },
            free,
            ip_id: 0,
            frame: vec![0u8; 4096],
            summary,
        })
    }

    fn reclaim(&mut self) {
        let n = self.xsk.comp.ready(BATCH);
        for _ in 0..n {
            self.free.push(self.xsk.comp.take());
        }
        if n > 0 {
            self.xsk.comp.release();
        }
    }

    /// Sends one datagram carrying `payload`.
    pub fn send(&mut self, payload: &[u8]) -> io::Result<usize> {
        self.reclaim();
        let Some(addr) = self.free.pop() else {
            // Every sending frame is in flight: the kernel has not completed any yet.
            let _ = self.xsk.kick_tx();
            return Err(io::ErrorKind::WouldBlock.into());
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        let len =
            frame::build(&mut self.frame, &self.addrs, self.ip_id, payload).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "datagram too large for one frame",
                )
            })?;
        let Some(dst) = self.xsk.umem.bytes(addr, len) else {
            self.free.push(addr);
            return Err(io::Error::other("frame outside the UMEM"));
        };
        dst.copy_from_slice(&self.frame[..len]);
        if self.xsk.tx.free(1) == 0 {
            self.free.push(addr);
            let _ = self.xsk.kick_tx();
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.xsk.tx.put(xsk::desc(addr, len as u32));
        self.xsk.tx.submit();
        if self.xsk.tx_needs_kick() {
            self.xsk.kick_tx()?;
        }
        Ok(payload.len())
    }

    /// The payload of the next datagram from the flow's peer, copied into `buf` (None when
    /// nothing is waiting). Frames from elsewhere are dropped (they matched only the port).
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            if self.xsk.rx.ready(1) == 0 {
                self.xsk.wake_rx();
                return Ok(None);
            }
            let d = self.xsk.rx.take();
            let mut got = None;
            if let Some(f) = self.xsk.umem.bytes(d.addr, d.len as usize)
                && let Some((a, range)) = frame::parse(f)
                && a.src == self.addrs.dst
                && a.sport == self.addrs.dport
            {
                let n = range.len().min(buf.len());
                buf[..n].copy_from_slice(&f[range.start..range.start + n]);
                // A payload longer than the buffer shows as a wrong length.
                got = Some(if range.len() > buf.len() {
                    usize::MAX
                } else {
                    n
                });
            } else {
                self.summary.not_udp4 += 1;
            }
            self.xsk.rx.release();
            if self.xsk.fill.free(1) == 1 {
                self.xsk.fill.put(d.addr);
                self.xsk.fill.submit();
            }
            if got.is_some() {
                return Ok(got);
            }
        }
    }

    /// The summary with the socket's statistics now.
    pub fn finish(&mut self) -> XdpSummary {
        let mut s = self.summary.clone();
        if let Ok(st) = self.xsk.stats() {
            s.add(&st);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdp_flags_parse() {
        assert_eq!(XdpConfig::parse("v0b").unwrap().queue, None);
        let c = XdpConfig::parse("v0b:3").unwrap();
        assert_eq!((c.dev.as_str(), c.queue), ("v0b", Some(3)));
        assert!(XdpConfig::parse("v0b:x").is_err());
        assert!(XdpConfig::parse(":1").is_err());
        assert!(XdpConfig::parse("a/b").is_err());
        assert!(XdpConfig::parse("abcdefghijklmnop").is_err());
    }
}
