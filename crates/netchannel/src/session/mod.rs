//! A session: the channels between this endpoint and one peer endpoint, the virtual sockets
//! multiplexed over them, and the I/O threads that run them.
//!
//! Channel failure. Bytes a dead channel had accepted may or may not have reached the peer,
//! and neither side can tell which. So a sender keeps every DATA frame until the peer's
//! CREDIT says its application consumed it (the window already bounds that: at most
//! `window` bytes per socket), and when a channel dies — both ends see its TCP connection
//! end — each side re-sends, on the surviving channels of the socket's class, the frames it
//! had put on the dead one, plus the control state the peer may have missed there (FIN with
//! the final length, the latest CREDIT, an unanswered OPEN; an OPEN for a socket that exists
//! is answered again). The receiver drops what it already has ([`crate::reorder`]), so
//! sockets go on with no byte lost or duplicated. Only when no channel of a socket's class
//! is left does it fail, with [`Error::ChannelLost`]. A socket the application dropped with
//! data unacknowledged stays in the table until the peer's final CREDIT, as TCP keeps
//! sending after close(2). MPTCP recovers the same way at the data level (DATA_ACK and
//! re-injection on another subflow, RFC 8684 §3.3); NetChannel itself has no recovery.

use crate::channel::{Channel, Inline, broken};
use crate::config::Config;
use crate::copy::CopyPool;
use crate::drive::Driver;
use crate::error::Error;
use crate::frame_io::FrameReader;
use crate::reorder::Placed;
use crate::sched::Load;
use crate::socket::{ListenQueue, OpenState, VSocket, VsShared, lock};
use crate::wire::{Class, FrameType, Header, RstReason, flags};
use arc_swap::ArcSwap;
use bytes::Bytes;
use netsteer_sock::{cpu, opt, tcp};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes readable on a socket after which its reader is woken without waiting for the burst
/// to end.
const WAKE_BURST: u64 = 256 * 1024;

/// Sockets whose readers have data but were not woken yet.
#[derive(Default)]
pub(crate) struct Wakes(Vec<Arc<VsShared>>);

impl Wakes {
    fn add(&mut self, vs: &Arc<VsShared>) {
        if !self.0.iter().any(|v| Arc::ptr_eq(v, vs)) {
            self.0.push(vs.clone());
        }
    }

    pub fn flush(&mut self) {
        for vs in self.0.drain(..) {
            let mut rx = lock(&vs.rx);
            vs.wake_rx(&mut rx);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Virtual ports a connecting side gives its sockets.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=65535;

/// Bound virtual ports of an endpoint.
#[derive(Default)]
pub(crate) struct Listeners {
    map: Mutex<HashMap<u16, Arc<ListenQueue>>>,
}

impl Listeners {
    pub fn bind(&self, port: u16, backlog: usize) -> io::Result<Arc<ListenQueue>> {
        let mut m = lock(&self.map);
        if m.contains_key(&port) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("virtual port {port} is already bound"),
            ));
        }
        let q = Arc::new(ListenQueue {
            port,
            backlog,
            queue: Mutex::new((Default::default(), false)),
            cv: Condvar::new(),
            waker: Mutex::new(None),
        });
        m.insert(port, q.clone());
        Ok(q)
    }

    pub fn unbind(&self, port: u16) {
        lock(&self.map).remove(&port);
    }

    fn get(&self, port: u16) -> Option<Arc<ListenQueue>> {
        lock(&self.map).get(&port).cloned()
    }
}

struct Table {
    socks: HashMap<(u16, u16), Arc<VsShared>>,
    next_port: u16,
}

/// Counters of a session that are not per channel.
#[derive(Debug, Default)]
pub(crate) struct SessionCounters {
    /// Frames for sockets that no longer exist (answered with RST for DATA).
    pub orphan_frames: AtomicU64,
    /// Sockets reset because the peer broke the protocol.
    pub protocol_resets: AtomicU64,
    /// DATA frames that arrived ahead of a gap and waited in a reorder buffer.
    pub out_of_order_frames: AtomicU64,
    /// DATA frames this side re-sent because their channel died.
    pub resent_frames: AtomicU64,
    /// DATA frames that arrived twice (a re-send of bytes the socket had) and were dropped.
    pub duplicate_frames: AtomicU64,
    /// Dead channels replaced by a new connection.
    pub rejoined_channels: AtomicU64,
    /// Channels that died while the session was open (not at its close).
    pub lost_channels: AtomicU64,
}

pub(crate) struct Session {
    pub peer: SocketAddr,
    pub link_id: u64,
    pub cfg: Arc<Config>,
    /// Largest DATA payload we send: the smaller of both sides' max_frame.
    pub send_frame: u32,
    /// One slot per channel index; a re-dialed channel replaces a dead one in its slot.
    pub channels: Vec<ArcSwap<Channel>>,
    pub throughput: usize,
    /// Ids for channels (a rejoined channel gets a new one, so frames sent on the dead
    /// connection are told apart from frames on its successor).
    next_channel_id: AtomicU64,
    table: Mutex<Table>,
    listeners: Arc<Listeners>,
    space: Mutex<()>,
    space_cv: Condvar,
    space_waiters: AtomicUsize,
    pub closing: AtomicBool,
    pool: Option<Arc<CopyPool>>,
    pub counters: SessionCounters,
    /// Async writers waiting for a channel below its limit, and how many there are (read
    /// without the lock on every drained batch).
    space_wakers: Mutex<Vec<std::task::Waker>>,
    async_space_waiters: AtomicUsize,
    driver: Option<Arc<Driver>>,
    guard: Option<Arc<crate::limits::Guard>>,
}

pub(crate) struct SessionParts {
    pub peer: SocketAddr,
    pub link_id: u64,
    pub cfg: Arc<Config>,
    pub peer_max_frame: u32,
    pub throughput: usize,
    pub streams: Vec<TcpStream>,
    pub listeners: Arc<Listeners>,
    pub pool: Option<Arc<CopyPool>>,
    /// Set when the application's threads read the channels ([`Config::app_driven`]).
    pub driver: Option<Arc<Driver>>,
    /// An accepted session's share of the endpoint's caps (receive memory); None for a
    /// session this side dialed.
    pub guard: Option<Arc<crate::limits::Guard>>,
}

mod failure;
mod recv;
mod spin_read;

pub(crate) use spin_read::SpinRead;

impl Session {
    /// Sets the channels' socket options and starts two I/O threads per channel.
    pub fn start(p: SessionParts) -> io::Result<Arc<Session>> {
        if p.throughput == 0 || p.throughput > p.streams.len() {
            // The handshake checks this; a session with a slice bound past its channels
            // would panic on the first frame of a class.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} throughput channels of {} in the session with {}",
                    p.throughput,
                    p.streams.len(),
                    p.peer
                ),
            ));
        }
        let cfg = p.cfg.clone();
        let mut channels = Vec::with_capacity(p.streams.len());
        let mut readers = Vec::with_capacity(p.streams.len());
        for (i, s) in p.streams.into_iter().enumerate() {
            let class = if i < p.throughput {
                Class::Throughput
            } else {
                Class::Latency
            };
            let (ch, reader) = make_channel(&cfg, i, i as u64, class, s)?;
            channels.push(ArcSwap::from(ch));
            readers.push(reader);
        }
        let session = Arc::new(Session {
            peer: p.peer,
            link_id: p.link_id,
            send_frame: cfg.max_frame.min(p.peer_max_frame),
            cfg,
            throughput: p.throughput,
            next_channel_id: AtomicU64::new(channels.len() as u64),
            channels,
            table: Mutex::new(Table {
                socks: HashMap::new(),
                next_port: *EPHEMERAL.start(),
            }),
            listeners: p.listeners,
            space: Mutex::new(()),
            space_cv: Condvar::new(),
            space_waiters: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            pool: p.pool,
            counters: SessionCounters::default(),
            space_wakers: Mutex::default(),
            async_space_waiters: AtomicUsize::new(0),
            driver: p.driver,
            guard: p.guard,
        });
        for (slot, reader) in session.channels.iter().zip(readers) {
            session.run_channel(slot.load_full(), reader)?;
        }
        Ok(session)
    }

    /// Starts a channel: its reader thread (or the endpoint's standby when the application
    /// drives), and the means to start its writer when frames wait.
    fn run_channel(self: &Arc<Self>, ch: Arc<Channel>, reader: ChannelReader) -> io::Result<()> {
        let cpus = self.cpus_for(&ch);
        let rt = if ch.class == Class::Latency {
            self.cfg.latency_realtime
        } else {
            None
        };
        // The writer thread exists only while frames wait (channel.rs, WRITER_LINGER). The
        // spawner holds the session and channel weakly: the channel keeps it.
        let (ws, wc) = (Arc::downgrade(self), Arc::downgrade(&ch));
        let cpus2 = cpus.clone();
        ch.set_writer(Box::new(move || {
            let (Some(s), Some(c)) = (ws.upgrade(), wc.upgrade()) else {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "session gone"));
            };
            let cpus = cpus2.clone();
            std::thread::Builder::new()
                .name(format!("nc-tx-{}", c.index))
                .spawn(move || {
                    let _g = FailOnUnwind(&s, &c, "writer");
                    pin(&cpus, rt);
                    if let Some(e) = c.write_loop(|| s.space_freed()) {
                        s.channel_failed(&c, &format!("write failed: {e}"));
                    }
                })
                .map(|_| ())
        }))?;
        if let Some(driver) = &self.driver {
            // The endpoint's one standby stands by for it (crate::standby): no thread here.
            driver.add(self, ch, reader, self.cfg.standby_after)?;
            return Ok(());
        }
        let (s, c) = (self.clone(), ch);
        std::thread::Builder::new()
            .name(format!("nc-rx-{}", c.index))
            .spawn(move || {
                let _g = FailOnUnwind(&s, &c, "reader");
                pin(&cpus, rt);
                s.read_loop(&c, reader);
            })?;
        Ok(())
    }

    /// Puts a new connection in place of dead channel `index` (the connecting side re-dialed
    /// it and both sides exchanged HELLO). Err if the channel is alive or the session is not.
    pub fn rejoin(self: &Arc<Self>, index: usize, stream: TcpStream) -> io::Result<()> {
        let slot = self.channels.get(index).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("no channel {index}"))
        })?;
        if slot.load().is_alive() || !self.is_alive() || self.closing.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "channel {index} to {} is alive, or its session is gone",
                    self.peer
                ),
            ));
        }
        let class = slot.load().class;
        let id = self.next_channel_id.fetch_add(1, Ordering::Relaxed);
        let (ch, reader) = make_channel(&self.cfg, index, id, class, stream)?;
        slot.store(ch.clone());
        self.counters
            .rejoined_channels
            .fetch_add(1, Ordering::Relaxed);
        self.run_channel(ch, reader)?;
        // Writers waiting for room may use it now.
        self.space_freed();
        let _g = lock(&self.space);
        self.space_cv.notify_all();
        Ok(())
    }

    /// The channel now in slot `index`.
    pub fn channel(&self, index: usize) -> Arc<Channel> {
        self.channels[index].load_full()
    }

    fn cpus_for(&self, ch: &Channel) -> Vec<u32> {
        let (list, i) = match ch.class {
            Class::Throughput => (&self.cfg.io_cpus, ch.index),
            Class::Latency => (&self.cfg.latency_cpus, ch.index - self.throughput),
        };
        if list.is_empty() {
            Vec::new()
        } else {
            vec![list[i % list.len()]]
        }
    }

    /// False once every channel is closed: the session's threads have ended or are ending.
    pub fn is_alive(&self) -> bool {
        self.channels.iter().any(|c| c.load().is_alive())
    }

    pub fn class_base(&self, class: Class) -> usize {
        match class {
            Class::Throughput => 0,
            Class::Latency => self.throughput,
        }
    }

    pub fn class_channels(&self, class: Class) -> &[ArcSwap<Channel>] {
        match class {
            Class::Throughput => &self.channels[..self.throughput],
            Class::Latency => &self.channels[self.throughput..],
        }
    }

    pub fn loads(&self, class: Class) -> Vec<Load> {
        self.class_channels(class)
            .iter()
            .map(|c| c.load().load())
            .collect()
    }

    pub fn no_channel(&self, class: Class) -> Error {
        if self.closing.load(Ordering::Acquire) {
            return Error::Closed;
        }
        Error::NoChannel {
            peer: self.peer,
            class: match class {
                Class::Throughput => "throughput",
                Class::Latency => "latency",
            },
        }
    }

    fn space_freed(&self) {
        if self.space_waiters.load(Ordering::Acquire) > 0 {
            let _g = lock(&self.space);
            self.space_cv.notify_all();
        }
        if self.async_space_waiters.load(Ordering::Acquire) > 0 {
            let wakers = {
                let mut list = lock(&self.space_wakers);
                self.async_space_waiters.store(0, Ordering::Release);
                std::mem::take(&mut *list)
            };
            for w in wakers {
                w.wake();
            }
        }
    }

    /// Whether a sender of `class` would find a live channel below its limit now (or no live
    /// channel at all: the write then fails instead of waiting).
    pub fn has_space(&self, class: Class) -> bool {
        let limit = self.cfg.channel_limit;
        let chans = self.class_channels(class);
        !chans.iter().any(|c| c.load().is_alive())
            || chans.iter().any(|c| {
                let c = c.load();
                c.is_alive() && c.load().queued < limit
            })
    }

    /// Registers an async writer to be woken when a channel drains (once).
    pub fn wake_on_space(&self, w: &std::task::Waker) {
        let mut list = lock(&self.space_wakers);
        if !list.iter().any(|x| x.will_wake(w)) {
            list.push(w.clone());
        }
        self.async_space_waiters
            .store(list.len(), Ordering::Release);
    }

    /// Waits until some channel of `class` drops below its limit (or dies).
    pub fn wait_for_space(&self, class: Class) {
        self.space_waiters.fetch_add(1, Ordering::AcqRel);
        let g = lock(&self.space);
        let limit = self.cfg.channel_limit;
        let full = self.class_channels(class).iter().all(|c| {
            let c = c.load();
            !c.is_alive() || c.load().queued >= limit
        });
        if full && self.class_alive(class) {
            let _ = self.space_cv.wait_timeout(g, Duration::from_millis(50));
        }
        self.space_waiters.fetch_sub(1, Ordering::AcqRel);
    }

    /// Sends a control frame for `vs`: on its hash channel if alive, else on any live
    /// channel of its class, else of the other class. Control frames ignore the channel
    /// limit (they are tiny and unblock senders). False if nothing is alive.
    pub fn send_control(&self, vs: &VsShared, h: Header) -> bool {
        let own = self.class_channels(vs.class);
        let base = self.class_base(vs.class);
        let mut order: Vec<usize> = Vec::with_capacity(self.channels.len());
        if !own.is_empty() {
            let home = (vs.hash % own.len() as u64) as usize;
            order.extend((0..own.len()).map(|k| base + (home + k) % own.len()));
        }
        let others: Vec<usize> = (0..self.channels.len())
            .filter(|i| !order.contains(i))
            .collect();
        order.extend(others);
        for i in order {
            let c = self.channels[i].load();
            if !c.is_alive() {
                continue;
            }
            if c.send(&h, Bytes::new()).is_ok() {
                return true;
            }
        }
        false
    }

    /// Sockets this session may hold: the configured maximum, and no more than the session's
    /// memory allows at one receive share each (what a socket may hold here:
    /// [`crate::reorder::share`]).
    fn socket_limit(&self) -> usize {
        let by_memory = self.cfg.session_memory / self.cfg.receive_share().max(1);
        self.cfg.max_sockets.min(by_memory.max(1) as usize)
    }

    /// The window a sender honours: what the peer advertises, but never more than our own
    /// `window`. A sender keeps every byte it sent until the peer's CREDIT (for re-sending
    /// over a surviving channel), so a peer advertising 4 GiB and never crediting would
    /// otherwise make this side retain 4 GiB for one socket.
    fn send_window(&self, advertised: u32) -> u64 {
        u64::from(advertised.min(self.cfg.window))
    }

    /// A reply on the channel the request came in on. Only queued, never written inline:
    /// this runs on the channel's reader thread, which must not block in write(2) on a peer
    /// that does not read (the queue's bound then cuts it off).
    fn send_raw_control(&self, channel: usize, h: Header) {
        let _ = self.channels[channel]
            .load()
            .send_with(&h, Bytes::new(), Inline::Never);
    }

    /// Opens a virtual socket to `port` on the peer and waits for OPEN_ACK.
    pub fn open(
        self: &Arc<Self>,
        port: u16,
        class: Class,
        policy: crate::sched::Policy,
    ) -> io::Result<VSocket> {
        if self.class_channels(class).is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the session to {} has no {class:?} channels", self.peer),
            ));
        }
        let shared = {
            let mut t = lock(&self.table);
            if t.socks.len() >= self.socket_limit().min(EPHEMERAL.len()) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!(
                        "{} virtual sockets already open to {}",
                        t.socks.len(),
                        self.peer
                    ),
                ));
            }
            let mut local = t.next_port;
            while t.socks.contains_key(&(local, port)) {
                local = if local == *EPHEMERAL.end() {
                    *EPHEMERAL.start()
                } else {
                    local + 1
                };
            }
            t.next_port = if local == *EPHEMERAL.end() {
                *EPHEMERAL.start()
            } else {
                local + 1
            };
            let vs = Arc::new(
                VsShared::new(
                    local,
                    port,
                    class,
                    policy,
                    u64::from(self.cfg.window),
                    OpenState::Opening,
                    0,
                )
                .holding_at_most(self.cfg.receive_share()),
            );
            t.socks.insert((local, port), vs.clone());
            vs
        };
        let sock = VSocket {
            shared: shared.clone(),
            session: self.clone(),
        };
        let mut f = Header::control(FrameType::Open, shared.local, port, self.cfg.window, 0);
        if class == Class::Latency {
            f.flags |= flags::LAT;
        }
        if !self.send_control(&shared, f) {
            return Err(self.no_channel(class).into());
        }
        let deadline = Instant::now() + self.cfg.hello_timeout;
        let opened = |tx: &crate::socket::Tx| (tx.state == OpenState::Open).then_some(());
        let answer = match &self.driver {
            // No reader thread will see the OPEN_ACK: this thread reads until it comes.
            Some(d) => d.drive_until(deadline, || {
                let tx = lock(&shared.tx);
                match &tx.error {
                    Some(e) => Some(Err(io::Error::from(e.clone()))),
                    None => opened(&tx).map(Ok),
                }
            }),
            None => shared.wait_tx(deadline, opened)?.map(Ok),
        };
        match answer.transpose()? {
            Some(()) => Ok(sock),
            None => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no answer from {} to opening virtual port {port}",
                    self.peer
                ),
            )),
        }
    }

    pub fn forget(&self, vs: &VsShared) {
        let mut t = lock(&self.table);
        if let Some(cur) = t.socks.get(&(vs.local, vs.remote))
            && std::ptr::eq(Arc::as_ptr(cur), vs)
        {
            t.socks.remove(&(vs.local, vs.remote));
        }
    }

    pub fn socket_count(&self) -> usize {
        lock(&self.table).socks.len()
    }

    fn lookup(&self, h: &Header) -> Option<Arc<VsShared>> {
        lock(&self.table)
            .socks
            .get(&(h.dst_port, h.src_port))
            .cloned()
    }

    /// Flushes what is queued (until `deadline`) and closes every channel.
    pub fn close(&self, deadline: Instant) {
        for c in &self.channels {
            c.load().drain(deadline);
        }
        self.closing.store(true, Ordering::Release);
        for c in &self.channels {
            self.channel_failed(&c.load(), "endpoint closed");
        }
    }

    /// Shuts one channel's connection down, as a cable pull would (fault injection).
    pub fn break_channel(&self, ch: usize) -> io::Result<()> {
        let c = self.channels.get(ch).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("no channel {ch}"))
        })?;
        let c = c.load();
        c.stream.shutdown(std::net::Shutdown::Both).map_err(|e| {
            if e.kind() == io::ErrorKind::NotConnected {
                broken()
            } else {
                e
            }
        })
    }
}

/// Sets a channel's socket options and builds it and its reader.
fn make_channel(
    cfg: &Config,
    index: usize,
    id: u64,
    class: Class,
    s: TcpStream,
) -> io::Result<(Arc<Channel>, ChannelReader)> {
    s.set_nodelay(true)?;
    s.set_read_timeout(None)?;
    let fd = s.as_fd();
    if let Some(t) = cfg.dead_channel_timeout {
        tcp::set_dead_peer_timeout(fd, t)?;
    }
    match class {
        Class::Throughput => {
            if let Some(l) = cfg.throughput_notsent_lowat {
                tcp::set_notsent_low_water(fd, l)?;
            }
        }
        Class::Latency => {
            tcp::set_notsent_low_water(fd, cfg.latency_notsent_lowat)?;
            opt::set_priority(fd, cfg.latency_priority)?;
            let us = cfg.latency_busy_poll.as_micros() as u32;
            if us > 0 {
                // Raising SO_BUSY_POLL above net.core.busy_read needs CAP_NET_ADMIN; the
                // spin below works without it.
                let _ = opt::set_busy_poll(fd, us);
            }
        }
    }
    let inline = class == Class::Latency || cfg.inline_send;
    let reader = FrameReader::with_staging(
        SpinRead {
            stream: s.try_clone()?,
            spin: if class == Class::Latency {
                cfg.latency_busy_poll
            } else {
                Duration::ZERO
            },
            wakes: Wakes::default(),
            whole_payloads: class == Class::Throughput,
            dontwait: false,
            drained: false,
        },
        cfg.max_frame,
        // With copy workers the reader must not pull payloads into its own buffer: it reads
        // a header and its head pad (64 bytes at most at a time) and splices payloads to a
        // worker.
        if cfg.copy_workers > 0 {
            crate::wire::ALIGN
        } else {
            256 * 1024
        },
    )
    // One window plus the frame the reader is filling: the most it can hold ahead of the
    // application without any payload needing a fresh allocation.
    .keep_free(cfg.window as usize + cfg.max_frame as usize);
    let copy = crate::channel::SendCopy {
        workers: if class == Class::Throughput {
            cfg.send_copy_workers
        } else {
            0
        },
        pipe: cfg.worker_pipe,
        limit: cfg.worker_limit,
        cpus: &cfg.copy_cpus,
        max_control: cfg.max_queued_control,
    };
    let ch = Arc::new(Channel::new(index, id, class, s, inline, copy)?);
    Ok((ch, reader))
}

/// Closes a channel (failing its sockets as a dead path would) when its I/O thread unwinds
/// from a panic: a bug must cost one channel, never a zombie session whose sockets wait forever.
struct FailOnUnwind<'a>(&'a Session, &'a Channel, &'static str);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.channel_failed(
                self.1,
                &format!("internal error: the {} thread panicked", self.2),
            );
        }
    }
}

fn pin(cpus: &[u32], realtime: Option<i32>) {
    if !cpus.is_empty() {
        // Best effort: a CPU outside the cgroup's set leaves the thread unpinned.
        let _ = cpu::pin_current_thread(cpus);
    }
    if let Some(p) = realtime {
        // Best effort too: without CAP_SYS_NICE the thread stays a normal one.
        let _ = cpu::set_realtime(p);
    }
}

pub(crate) type ChannelReader = FrameReader<SpinRead>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame_io::Source;
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A payload whose first piece is already queued when the read starts, and whose other
    /// pieces follow with pauses and nothing after them (the end of a burst), is read whole,
    /// and the low-water mark is back at one byte after. A reader that slept in read(2) with
    /// the mark at the missing bytes stalled here: it had copied the first piece, and the
    /// kernel counts only uncopied bytes against the mark.
    #[test]
    fn a_payload_arriving_in_pieces_is_read_whole_and_headers_still_wake() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        tx.set_nodelay(true).unwrap();
        let rx = l.accept().unwrap().0;
        let piece = 100 * 1024;
        let payload: Vec<u8> = (0..3 * piece).map(|i| (i % 253) as u8).collect();
        let mut r = SpinRead {
            stream: rx,
            spin: Duration::ZERO,
            wakes: Wakes::default(),
            whole_payloads: true,
            dontwait: false,
            drained: false,
        };
        tx.write_all(&payload[..piece]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let (done, got) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            let res = r.append_exact(&mut v, 3 * piece);
            let mut header = [0u8; 10];
            let res = res.and_then(|_| r.read_exact(&mut header));
            done.send(()).unwrap();
            res.map(|_| (v, header))
        });
        for chunk in payload[piece..].chunks(piece) {
            std::thread::sleep(Duration::from_millis(50));
            tx.write_all(chunk).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        tx.write_all(b"0123456789").unwrap();
        got.recv_timeout(Duration::from_secs(10))
            .expect("the reader stalled");
        let (v, header) = reader.join().unwrap().unwrap();
        assert!(v == payload, "the payload arrived changed");
        assert_eq!(&header, b"0123456789");
    }
}
