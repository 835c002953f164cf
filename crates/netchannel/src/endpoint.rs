//! The endpoint: opens sessions (groups of channels) to peers, accepts them from peers, and
//! hands out virtual sockets.
//!
//! Handshake. The connecting side opens `throughput + latency` TCP connections to the peer's
//! listen address and sends a HELLO on each, all with one random link id; channel i < the
//! throughput count is a throughput channel, the rest are latency channels. The accepting
//! side reads one HELLO per connection (within `hello_timeout`), groups connections by link
//! id, and when every index has arrived answers a HELLO on each and starts the session.
//! Anything else — bad magic, another version, a layout that disagrees with the link's first
//! channel, a duplicate index, too many half-built links, handshakes or sessions (in all, or
//! from one peer address), more channels than `max_accepted_channels`, or too few file
//! descriptors left below RLIMIT_NOFILE — closes the offending connection and is counted in
//! [`Stats::rejected_channels`], with the limit named in [`Stats::last_rejection`]. Full
//! handshake and half-built-link tables make room instead, by closing the oldest silent
//! connection or unfinished link of the prefix holding the most (named the same way), and
//! part of the session table is kept for prefixes served recently ([`crate::limits`]).

use crate::config::{Config, SocketOptions};
use crate::copy::CopyPool;
use crate::drive::Driver;
use crate::limits::{self, Caps, Guard, Handshakes};
use crate::session::{Listeners, Session, SessionParts};
use crate::socket::{VListener, VSocket, lock};
use crate::wire::{
    Class, HEADER_LEN, HELLO_LEN, Hello, MAX_CHANNELS, MAX_FRAME_LIMIT, MIN_FRAME, VERSION,
};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod admission;
use admission::{HandshakeSlot, make_room_for_link, mark_served, reserve_admits};

struct PendingLink {
    first: Hello,
    peer: SocketAddr,
    slots: Vec<Option<TcpStream>>,
    since: Instant,
}

struct Inner {
    cfg: Arc<Config>,
    driver: Option<Arc<Driver>>,
    listeners: Arc<Listeners>,
    pool: Option<Arc<CopyPool>>,
    outgoing: Mutex<HashMap<SocketAddr, Arc<Session>>>,
    /// Sessions being dialed, one per peer: a second connect to the peer waits for that dial
    /// instead of dialing again, and no lock is held across a peer's I/O (a peer dripping its
    /// HELLO answer once held the lock every other connect needed).
    dialing: Mutex<HashMap<SocketAddr, Arc<Dial>>>,
    incoming: Mutex<Vec<Arc<Session>>>,
    local: Option<SocketAddr>,
    shutdown: AtomicBool,
    pending: Mutex<HashMap<u64, PendingLink>>,
    /// Handshakes in progress, per address, per prefix and in all (evicting silent ones).
    handshakes: Mutex<Handshakes>,
    /// When each prefix (the narrow one) last had a session accepted, for the places of
    /// `session_reserve`.
    served: Mutex<HashMap<IpAddr, Instant>>,
    /// Receive memory leased to peers' sockets, and the refusals (shared with the accepted
    /// sessions, which lease and refuse OPENs).
    guard: Arc<Guard>,
}

/// One channel as [`Endpoint::stats`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelStats {
    pub index: usize,
    pub class: Class,
    pub alive: bool,
    pub bytes_out: u64,
    pub frames_out: u64,
    pub bytes_in: u64,
    pub frames_in: u64,
    /// Payload bytes this channel's send copy workers copied.
    pub send_copied: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStats {
    pub peer: SocketAddr,
    pub link_id: u64,
    pub accepted: bool,
    pub sockets: usize,
    pub orphan_frames: u64,
    pub protocol_resets: u64,
    /// DATA frames that arrived ahead of a gap (cross-channel reordering at work).
    pub out_of_order_frames: u64,
    /// DATA frames this side re-sent because the channel they went on died.
    pub resent_frames: u64,
    /// DATA frames received twice (a peer's re-send of bytes already here) and dropped.
    pub duplicate_frames: u64,
    /// Dead channels replaced by a new connection (re-dialed by the connecting side).
    pub rejoined_channels: u64,
    /// Channels that died while the session was open.
    pub lost_channels: u64,
    pub channels: Vec<ChannelStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats {
    pub sessions: Vec<SessionStats>,
    /// Incoming channel connections closed during the handshake.
    pub rejected_channels: u64,
    /// The newest refusal, naming the cap it hit (a channel, a link, a session or a peer's
    /// OPEN).
    pub last_rejection: Option<String>,
    /// Peers' OPENs reset for a cap (receive memory, sockets per session).
    pub rejected_opens: u64,
    /// Receive-share bytes peers' sockets hold leased now (bounded by max_receive_memory):
    /// [`Config::receive_share`] each.
    pub receive_memory_leased: u64,
    /// What peers' sockets hold now, charged by allocation and bookkeeping, not payload
    /// ([`crate::reorder`]); each socket's is within its lease.
    pub receive_memory_held: u64,
    /// Bytes each receive copy worker copied.
    pub copy_worker_bytes: Vec<u64>,
}

/// A netchannel endpoint. Dropping it flushes queued frames (up to one second) and closes
/// every channel; sockets still open then fail with [`crate::Error::Closed`].
pub struct Endpoint {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local_addr", &self.inner.local)
            .finish_non_exhaustive()
    }
}

fn check(cfg: &Config) -> io::Result<()> {
    let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
    let total = u32::from(cfg.throughput_channels) + u32::from(cfg.latency_channels);
    if cfg.throughput_channels == 0 || total > u32::from(MAX_CHANNELS) {
        return bad(format!(
            "channels: {} throughput + {} latency (need 1..={MAX_CHANNELS} in all, at least one throughput)",
            cfg.throughput_channels, cfg.latency_channels
        ));
    }
    if !(MIN_FRAME..=MAX_FRAME_LIMIT).contains(&cfg.max_frame) {
        return bad(format!(
            "max_frame {} outside {MIN_FRAME}..={MAX_FRAME_LIMIT}",
            cfg.max_frame
        ));
    }
    netsteer_sock::cpu::check_cpus("io_cpus", &cfg.io_cpus)?;
    netsteer_sock::cpu::check_cpus("latency_cpus", &cfg.latency_cpus)?;
    netsteer_sock::cpu::check_cpus("copy_cpus", &cfg.copy_cpus)?;
    if cfg.app_driven && cfg.copy_workers > 0 {
        return bad(format!(
            "copy_workers {} with app_driven: the application's threads copy what they read",
            cfg.copy_workers
        ));
    }
    if cfg.window < cfg.max_frame {
        return bad(format!(
            "window {} is smaller than max_frame {}",
            cfg.window, cfg.max_frame
        ));
    }
    if cfg.max_sockets == 0
        || cfg.accept_backlog == 0
        || cfg.max_sessions == 0
        || cfg.max_sessions_per_peer == 0
        || cfg.max_pending_links_per_peer == 0
        || cfg.max_handshakes_per_peer == 0
        || cfg.max_handshakes_per_prefix == 0
        || cfg.max_pending_links_per_prefix == 0
        || cfg.max_sessions_per_prefix == 0
        || cfg.max_channels == 0
        || cfg.max_channels_per_prefix == 0
        || (cfg
            .max_receive_memory_per_prefix
            .min(cfg.max_receive_memory))
            < cfg.receive_share()
        || cfg.max_accepted_channels == 0
        || cfg.max_queued_control == 0
    {
        return bad(
            "max_sockets, max_sessions(_per_peer, _per_prefix), max_pending_links_per_peer \
             (_per_prefix), max_handshakes_per_peer (_per_prefix), max_channels, \
             max_accepted_channels, max_queued_control and accept_backlog must be at least 1, \
             and max_receive_memory (_per_prefix) at least one socket's receive share \
             (Config::receive_share)"
                .into(),
        );
    }
    Ok(())
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

impl Endpoint {
    /// An endpoint that only connects.
    pub fn new(cfg: Config) -> io::Result<Endpoint> {
        Endpoint::build(cfg, None)
    }

    /// An endpoint that also accepts sessions on `addr` (port 0 picks one; see
    /// [`Endpoint::local_addr`]).
    pub fn listen(addr: SocketAddr, cfg: Config) -> io::Result<Endpoint> {
        let l = TcpListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("listen on {addr}: {e}")))?;
        Endpoint::build(cfg, Some(l))
    }

    fn build(cfg: Config, listener: Option<TcpListener>) -> io::Result<Endpoint> {
        check(&cfg)?;
        let pool = if cfg.copy_workers > 0 {
            Some(CopyPool::new(
                cfg.copy_workers,
                cfg.worker_pipe,
                cfg.worker_limit,
                &cfg.copy_cpus,
            )?)
        } else {
            None
        };
        let driver = cfg.app_driven.then(Arc::default);
        let cfg = Arc::new(cfg);
        let guard = Guard::new(cfg.clone());
        let inner = Arc::new(Inner {
            driver,
            cfg,
            listeners: Arc::default(),
            pool,
            outgoing: Mutex::default(),
            dialing: Mutex::default(),
            incoming: Mutex::default(),
            local: listener.as_ref().map(|l| l.local_addr()).transpose()?,
            shutdown: AtomicBool::new(false),
            pending: Mutex::default(),
            handshakes: Mutex::default(),
            served: Mutex::default(),
            guard,
        });
        if let Some(l) = listener {
            let i = inner.clone();
            std::thread::Builder::new()
                .name("nc-accept".into())
                .spawn(move || accept_loop(i, l))?;
        }
        Ok(Endpoint { inner })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.local
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// The channels the application's threads read, when [`Config::app_driven`] is set.
    pub fn driver(&self) -> Option<&Arc<Driver>> {
        self.inner.driver.as_ref()
    }

    /// Binds virtual port `port` for incoming virtual connections.
    pub fn bind(&self, port: u16) -> io::Result<VListener> {
        let queue = self
            .inner
            .listeners
            .bind(port, self.inner.cfg.accept_backlog)?;
        Ok(VListener {
            queue,
            listeners: self.inner.listeners.clone(),
        })
    }

    /// Opens a virtual socket to `port` at `peer`, opening the session first if needed.
    /// Whether a live session to `peer` is up (a connect then needs no handshake, only one
    /// OPEN round trip on a channel).
    pub fn has_session(&self, peer: SocketAddr) -> bool {
        lock(&self.inner.outgoing)
            .get(&peer)
            .is_some_and(|s| s.is_alive())
    }

    pub fn connect(&self, peer: SocketAddr, port: u16, opts: SocketOptions) -> io::Result<VSocket> {
        let session = self.session_to(peer)?;
        let class = opts.class();
        let policy = opts.policy.unwrap_or(self.inner.cfg.policy);
        session.open(port, class, policy)
    }

    fn session_to(&self, peer: SocketAddr) -> io::Result<Arc<Session>> {
        // Lock order: `dialing`, then `outgoing` (a finished dial takes them one at a time).
        let (dial, mine) = {
            let mut dialing = lock(&self.inner.dialing);
            {
                let mut out = lock(&self.inner.outgoing);
                out.retain(|_, s| s.is_alive());
                if let Some(s) = out.get(&peer) {
                    return Ok(s.clone());
                }
            }
            match dialing.get(&peer) {
                Some(d) => (d.clone(), false),
                None => {
                    let d = Arc::new(Dial::default());
                    dialing.insert(peer, d.clone());
                    (d, true)
                }
            }
        };
        if !mine {
            return dial.wait();
        }
        let r = self.open_session(peer);
        if let Ok(s) = &r {
            lock(&self.inner.outgoing).insert(peer, s.clone());
        }
        lock(&self.inner.dialing).remove(&peer);
        dial.finish(&r);
        r
    }

    fn open_session(&self, peer: SocketAddr) -> io::Result<Arc<Session>> {
        let cfg = &self.inner.cfg;
        let link_id = random_u64();
        let total = cfg.throughput_channels + cfg.latency_channels;
        let mut streams = Vec::with_capacity(total as usize);
        for i in 0..total {
            streams.push(send_hello(cfg, peer, link_id, i)?);
        }
        let mut peer_max = u32::MAX;
        for (s, mine) in &mut streams {
            peer_max = peer_max.min(read_hello_answer(cfg, peer, s, mine)?);
        }
        let session = Session::start(SessionParts {
            peer,
            link_id,
            cfg: cfg.clone(),
            peer_max_frame: peer_max,
            throughput: cfg.throughput_channels as usize,
            streams: streams.into_iter().map(|(s, _)| s).collect(),
            listeners: self.inner.listeners.clone(),
            pool: self.inner.pool.clone(),
            driver: self.inner.driver.clone(),
            guard: None,
        })?;
        if let Some(every) = cfg.reconnect_interval {
            let (weak, cfg) = (Arc::downgrade(&session), cfg.clone());
            std::thread::Builder::new()
                .name("nc-redial".into())
                .spawn(move || redial_loop(&weak, &cfg, every))?;
        }
        Ok(session)
    }

    fn sessions(&self) -> Vec<(Arc<Session>, bool)> {
        let mut v: Vec<_> = lock(&self.inner.outgoing)
            .values()
            .map(|s| (s.clone(), false))
            .collect();
        v.extend(lock(&self.inner.incoming).iter().map(|s| (s.clone(), true)));
        v
    }

    pub fn stats(&self) -> Stats {
        Stats {
            sessions: self
                .sessions()
                .into_iter()
                .map(|(s, accepted)| SessionStats {
                    peer: s.peer,
                    link_id: s.link_id,
                    accepted,
                    sockets: s.socket_count(),
                    orphan_frames: s.counters.orphan_frames.load(Ordering::Relaxed),
                    protocol_resets: s.counters.protocol_resets.load(Ordering::Relaxed),
                    out_of_order_frames: s.counters.out_of_order_frames.load(Ordering::Relaxed),
                    resent_frames: s.counters.resent_frames.load(Ordering::Relaxed),
                    duplicate_frames: s.counters.duplicate_frames.load(Ordering::Relaxed),
                    rejoined_channels: s.counters.rejoined_channels.load(Ordering::Relaxed),
                    lost_channels: s.counters.lost_channels.load(Ordering::Relaxed),
                    channels: s
                        .channels
                        .iter()
                        .map(|c| c.load_full())
                        .map(|c| ChannelStats {
                            index: c.index,
                            class: c.class,
                            alive: c.is_alive(),
                            bytes_out: c.counters.bytes_out.load(Ordering::Relaxed),
                            frames_out: c.counters.frames_out.load(Ordering::Relaxed),
                            bytes_in: c.counters.bytes_in.load(Ordering::Relaxed),
                            frames_in: c.counters.frames_in.load(Ordering::Relaxed),
                            send_copied: c.counters.send_copied.load(Ordering::Relaxed),
                        })
                        .collect(),
                })
                .collect(),
            rejected_channels: self.inner.guard.rejected.load(Ordering::Relaxed),
            last_rejection: lock(&self.inner.guard.last_rejection).clone(),
            rejected_opens: self.inner.guard.rejected_opens.load(Ordering::Relaxed),
            receive_memory_leased: self.inner.guard.memory_leased(),
            receive_memory_held: self.inner.guard.memory_held(),
            copy_worker_bytes: self
                .inner
                .pool
                .as_ref()
                .map(|p| p.copied())
                .unwrap_or_default(),
        }
    }

    /// Fault injection: shuts down channel `index` of every session, as a dead path would.
    pub fn break_channel(&self, index: usize) -> io::Result<()> {
        for (s, _) in self.sessions() {
            s.break_channel(index)?;
        }
        Ok(())
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.inner.shutdown.store(true, Ordering::Release);
        // One second in all to flush what is queued, however many sessions there are.
        let deadline = Instant::now() + Duration::from_secs(1);
        for (s, _) in self.sessions() {
            s.close(deadline);
        }
        if let Some(p) = &self.inner.pool {
            p.shutdown();
        }
        lock(&self.inner.pending).clear();
    }
}

/// How a dial ended: the session, or the error's kind and text (io::Error is not Clone).
type Dialed = Result<Arc<Session>, (io::ErrorKind, String)>;

/// A session being dialed, and its outcome for whoever waits on it.
#[derive(Default)]
struct Dial {
    done: Mutex<Option<Dialed>>,
    cv: std::sync::Condvar,
}

impl Dial {
    fn finish(&self, r: &io::Result<Arc<Session>>) {
        *lock(&self.done) = Some(match r {
            Ok(s) => Ok(s.clone()),
            Err(e) => Err((e.kind(), e.to_string())),
        });
        self.cv.notify_all();
    }

    /// Waits for the dial's outcome (the dial itself is bounded by its connect and HELLO
    /// deadlines).
    fn wait(&self) -> io::Result<Arc<Session>> {
        let mut g = lock(&self.done);
        loop {
            if let Some(r) = &*g {
                return r.clone().map_err(|(k, m)| io::Error::new(k, m));
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Opens channel `index` of link `link_id` to `peer` and sends its HELLO.
fn send_hello(
    cfg: &Config,
    peer: SocketAddr,
    link_id: u64,
    index: u16,
) -> io::Result<(TcpStream, Hello)> {
    let ctx = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what} {peer}: {e}"));
    let mut s = TcpStream::connect_timeout(&peer, cfg.hello_timeout)
        .map_err(|e| ctx(&format!("channel {index} to"), e))?;
    s.set_nodelay(true)?;
    let hello = Hello {
        version: u16::from(VERSION),
        link_id,
        channel_index: index,
        class: if index < cfg.throughput_channels {
            Class::Throughput
        } else {
            Class::Latency
        },
        throughput_channels: cfg.throughput_channels,
        latency_channels: cfg.latency_channels,
        max_frame: cfg.max_frame,
    };
    s.write_all(&hello.encode())
        .map_err(|e| ctx("HELLO to", e))?;
    Ok((s, hello))
}

/// Reads all of `buf` by `deadline`: each read waits only what is left, so a peer that
/// sends a byte now and then cannot stretch the wait (a per-read timeout restarts with every
/// byte: one byte every 3 s held a handshake place for minutes).
fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{got} of {} bytes by the deadline (hello_timeout)",
                    buf.len()
                ),
            ));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("closed after {got} of {} bytes", buf.len()),
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads the peer's HELLO answer on a channel and checks it matches ours; the peer's
/// max_frame.
fn read_hello_answer(
    cfg: &Config,
    peer: SocketAddr,
    s: &mut TcpStream,
    mine: &Hello,
) -> io::Result<u32> {
    let mut b = [0u8; HEADER_LEN + HELLO_LEN];
    read_exact_by(s, &mut b, Instant::now() + cfg.hello_timeout)
        .map_err(|e| io::Error::new(e.kind(), format!("HELLO answer from {peer}: {e}")))?;
    let theirs = Hello::decode(&b).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("HELLO answer from {peer}: {e}"),
        )
    })?;
    if theirs.link_id != mine.link_id
        || theirs.channel_index != mine.channel_index
        || theirs.throughput_channels != mine.throughput_channels
        || theirs.latency_channels != mine.latency_channels
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "HELLO answer from {peer} does not match channel {}",
                mine.channel_index
            ),
        ));
    }
    Ok(theirs.max_frame)
}

/// The connecting side re-opens dead channels of a session while any of its channels lives:
/// each try dials the peer again with the session's link id and the dead channel's index,
/// and the peer puts the new connection in the dead one's place (see `handshake`).
fn redial_loop(session: &std::sync::Weak<Session>, cfg: &Config, every: Duration) {
    loop {
        std::thread::sleep(every);
        let Some(s) = session.upgrade() else { return };
        if !s.is_alive() || s.closing.load(Ordering::Acquire) {
            return;
        }
        for index in 0..s.channels.len() {
            if s.channel(index).is_alive() {
                continue;
            }
            let rejoined =
                send_hello(cfg, s.peer, s.link_id, index as u16).and_then(|(mut stream, mine)| {
                    let peer_max = read_hello_answer(cfg, s.peer, &mut stream, &mine)?;
                    if peer_max < s.send_frame {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "the peer lowered its max_frame",
                        ));
                    }
                    s.rejoin(index, stream)
                });
            // A failed try (the peer still unreachable, or it has not seen the old channel
            // die yet) is simply tried again next round.
            let _ = rejoined;
        }
    }
}

fn accept_loop(inner: Arc<Inner>, l: TcpListener) {
    while !inner.shutdown.load(Ordering::Acquire) {
        // Half-built links that ran out of time are dropped here, closing their connections,
        // even when no new connection arrives.
        lock(&inner.pending).retain(|_, p| p.since.elapsed() < inner.cfg.hello_timeout);
        // Sessions whose channels are all gone are forgotten (their threads have ended), so
        // neither the list nor the cap below fills up with the dead.
        lock(&inner.incoming).retain(|s| s.is_alive());
        match netsteer_sock::tcp::wait_readable(l.as_fd(), 200) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        }
        let (stream, from) = match l.accept() {
            Ok(x) => x,
            Err(_) => continue,
        };
        let slot = match HandshakeSlot::take(&inner, from.ip(), stream.try_clone().ok()) {
            Ok(slot) => slot,
            Err(why) => {
                reject(&inner, from, &why);
                continue;
            }
        };
        let i = inner.clone();
        // A failed spawn drops the closure, and with it the slot.
        let _ = std::thread::Builder::new()
            .name("nc-hello".into())
            .spawn(move || {
                if let Err(why) = handshake(&i, stream, from, &slot)
                    && slot.held()
                {
                    // (An evicted connection's refusal was recorded when it was evicted.)
                    reject(&i, from, &why);
                }
            });
    }
}

/// The soft RLIMIT_NOFILE and the descriptors open now, read from /proc/self (the process's
/// own files: nothing a peer controls). None where /proc is not mounted.
fn fds_in_use() -> Option<(usize, usize)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    // "unlimited" cannot be set for RLIMIT_NOFILE (it is capped by fs.nr_open), but say so.
    let soft = if soft == "unlimited" {
        usize::MAX
    } else {
        soft.parse().ok()?
    };
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some((open, soft))
}

/// Refuses a new link whose channels would take the process within `fd_reserve` of its
/// descriptor limit: each channel holds two (the stream and its reader's clone).
fn fd_budget(cfg: &Config, channels: usize) -> Result<(), String> {
    let Some((open, limit)) = fds_in_use() else {
        return Ok(());
    };
    let need = 2 * channels;
    if open.saturating_add(need).saturating_add(cfg.fd_reserve) > limit {
        return Err(format!(
            "no file descriptors for {channels} channels: {open} open of RLIMIT_NOFILE {limit}, \
             {} kept in reserve (fd_reserve)",
            cfg.fd_reserve
        ));
    }
    Ok(())
}

fn reject(inner: &Inner, from: SocketAddr, why: &str) {
    inner.guard.reject(format!("channel from {from}: {why}"));
}

/// A HELLO for a session that exists: the connecting side re-dials a dead channel. The
/// address and layout must match the session's, and the channel must be dead here too.
fn rejoin(
    cfg: &Config,
    session: &Arc<Session>,
    mut s: TcpStream,
    from: SocketAddr,
    hello: &Hello,
) -> Result<(), String> {
    let index = usize::from(hello.channel_index);
    let theirs_throughput = usize::from(hello.throughput_channels);
    if from.ip() != session.peer.ip()
        || theirs_throughput != session.throughput
        || usize::try_from(hello.total_channels()).ok() != Some(session.channels.len())
        || session.send_frame > hello.max_frame
    {
        return Err(format!(
            "HELLO disagrees with session {:#x} it would rejoin",
            hello.link_id
        ));
    }
    if session.channel(index).is_alive() {
        return Err(format!(
            "channel {index} of session {:#x} is alive",
            hello.link_id
        ));
    }
    let answer = Hello {
        max_frame: cfg.max_frame,
        ..*hello
    };
    s.write_all(&answer.encode())
        .map_err(|e| format!("HELLO answer: {e}"))?;
    session.rejoin(index, s).map_err(|e| e.to_string())
}

/// Reads one HELLO and files the connection under its link; starts the session when the
/// link is complete.
fn handshake(
    inner: &Arc<Inner>,
    mut s: TcpStream,
    from: SocketAddr,
    slot: &HandshakeSlot,
) -> Result<(), String> {
    let cfg = &inner.cfg;
    let mut b = [0u8; HEADER_LEN + HELLO_LEN];
    read_exact_by(&mut s, &mut b, Instant::now() + cfg.hello_timeout)
        .map_err(|e| format!("no HELLO: {e}"))?;
    if !slot.heard() {
        return Err("evicted".into());
    }
    let hello = Hello::decode(&b).map_err(|e| e.to_string())?;
    let existing = lock(&inner.incoming)
        .iter()
        .find(|x| x.link_id == hello.link_id)
        .cloned();
    if let Some(session) = existing {
        return rejoin(cfg, &session, s, from, &hello);
    }
    let complete = {
        let mut pending = lock(&inner.pending);
        pending.retain(|_, p| p.since.elapsed() < cfg.hello_timeout);
        if !pending.contains_key(&hello.link_id) {
            make_room_for_link(inner, &mut pending, from.ip())?;
            let total = usize::try_from(hello.total_channels()).unwrap_or(usize::MAX);
            if total > usize::from(cfg.max_accepted_channels) {
                return Err(format!(
                    "link {:#x} asks for {total} channels; at most {} are accepted \
                     (max_accepted_channels)",
                    hello.link_id, cfg.max_accepted_channels
                ));
            }
            let held: usize = pending.values().map(|p| p.slots.len()).sum();
            fd_budget(cfg, held + total)?;
            pending.insert(
                hello.link_id,
                PendingLink {
                    first: hello,
                    peer: from,
                    slots: (0..hello.total_channels()).map(|_| None).collect(),
                    since: Instant::now(),
                },
            );
        }
        let link = pending.get_mut(&hello.link_id).expect("inserted");
        if link.first.throughput_channels != hello.throughput_channels
            || link.first.latency_channels != hello.latency_channels
            || link.first.max_frame != hello.max_frame
            || from.ip() != link.peer.ip()
        {
            return Err(format!("HELLO disagrees with link {:#x}", hello.link_id));
        }
        let slot = &mut link.slots[hello.channel_index as usize];
        if slot.is_some() {
            return Err(format!(
                "duplicate channel {} of link {:#x}",
                hello.channel_index, hello.link_id
            ));
        }
        *slot = Some(s);
        if link.slots.iter().all(Option::is_some) {
            pending.remove(&hello.link_id)
        } else {
            None
        }
    };
    let Some(link) = complete else {
        return Ok(());
    };
    // Held from the check to the push, so two links completing at once cannot both take the
    // last place. The writes below are 56-byte answers into fresh sockets: they do not block.
    let mut incoming = lock(&inner.incoming);
    incoming.retain(|s| s.is_alive());
    let ip = link.peer.ip();
    let counts = inner
        .guard
        .counts(ip, incoming.iter().map(|s| (s.peer.ip(), 1)));
    limits::fits(
        "sessions accepted",
        1,
        counts,
        &Caps {
            per_address: (cfg.max_sessions_per_peer as u64, "max_sessions_per_peer"),
            per_prefix: (
                cfg.max_sessions_per_prefix as u64,
                "max_sessions_per_prefix",
            ),
            total: (cfg.max_sessions as u64, "max_sessions"),
        },
    )?;
    reserve_admits(inner, ip, incoming.len(), counts.1)?;
    // Channels are capped per prefix and in all (each holds descriptors and threads here);
    // per address they follow from max_sessions_per_peer × max_accepted_channels.
    let channels = inner.guard.counts(
        ip,
        incoming
            .iter()
            .map(|s| (s.peer.ip(), s.channels.len() as u64)),
    );
    limits::fits(
        "channels of accepted sessions alive",
        link.slots.len() as u64,
        channels,
        &Caps {
            per_address: (u64::MAX, "max_sessions_per_peer × max_accepted_channels"),
            per_prefix: (
                cfg.max_channels_per_prefix as u64,
                "max_channels_per_prefix",
            ),
            total: (cfg.max_channels as u64, "max_channels"),
        },
    )?;
    let mut streams = Vec::with_capacity(link.slots.len());
    for (i, slot) in link.slots.into_iter().enumerate() {
        let mut s = slot.expect("complete link");
        let answer = Hello {
            channel_index: i as u16,
            class: if i < link.first.throughput_channels as usize {
                Class::Throughput
            } else {
                Class::Latency
            },
            max_frame: cfg.max_frame,
            ..link.first
        };
        s.write_all(&answer.encode())
            .map_err(|e| format!("HELLO answer: {e}"))?;
        streams.push(s);
    }
    if inner.shutdown.load(Ordering::Acquire) {
        return Err("endpoint closing".into());
    }
    let session = Session::start(SessionParts {
        peer: link.peer,
        link_id: link.first.link_id,
        cfg: cfg.clone(),
        peer_max_frame: link.first.max_frame,
        throughput: link.first.throughput_channels as usize,
        streams,
        listeners: inner.listeners.clone(),
        pool: inner.pool.clone(),
        driver: inner.driver.clone(),
        guard: Some(inner.guard.clone()),
    })
    .map_err(|e| e.to_string())?;
    incoming.push(session);
    drop(incoming);
    mark_served(inner, ip);
    Ok(())
}
