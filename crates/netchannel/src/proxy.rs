//! Proxy mode (feature `proxy`): unmodified TCP applications over netchannel, as the paper
//! runs Redis. The client side listens on TCP addresses; each accepted connection becomes a
//! virtual socket to a virtual port of the peer endpoint, in the class its route names. The
//! server side accepts virtual sockets on its ports and connects each to a backend TCP
//! address. So `redis-benchmark → client proxy → channels → server proxy → redis-server`
//! runs with neither program changed.
//!
//! How TCP events map (each logged with the connection's addresses):
//!
//! | TCP side | virtual socket |
//! |---|---|
//! | EOF from the application (half-close) | FIN: the peer proxy half-closes its TCP side |
//! | FIN from the peer | `shutdown(SHUT_WR)` towards the application |
//! | reset from the application, or a write to it fails | RST (Aborted) |
//! | RST from the peer, or the session has no channel left | reset (SO_LINGER 0) towards the application |
//! | backend refuses or does not answer in time | RST (Refused): the client proxy resets its connection |
//! | more connections than the cap | the new connection is reset at once |
//! | more virtual sockets from one peer address than `max_per_peer` | the new one is reset (Refused) |
//!
//! Memory per connection is bounded: towards the channels, one read block of `buffer`
//! bytes plus the frames the peer has not consumed (its window); towards the application,
//! the one frame payload being written; and the virtual socket's receive window at each end
//! (the sender stops at the peer's credit). No byte is copied in user space: what is read
//! from TCP is the frames' payload, and a frame's payload is what is written to TCP.
//!
//! The copies run on a tokio runtime (one task per connection, no thread per connection).
//! With `Config::app_driven` (what `netsteer netchannel proxy` sets) the runtime reads the
//! channels too (`drive_channels`): an arrival is handled on the worker that runs the copy
//! it wakes. Blocking calls of the library (opening a virtual socket, accepting one) run on
//! their own threads.

use crate::{Class, Endpoint, RstReason, SocketOptions, VListener, VSocket};
use bytes::{Buf, BytesMut};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client-side route: TCP connections accepted on `listen` go to virtual port `port` of
/// the peer, in class `class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub listen: SocketAddr,
    pub port: u16,
    pub class: Class,
}

/// A server-side route: virtual sockets opened to `port` are connected to `backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    pub port: u16,
    pub backend: SocketAddr,
}

/// Bounds of one proxy.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once; one more is reset at once.
    pub max_connections: usize,
    /// Connections from one peer endpoint's address at once (the server side, where peers
    /// arrive over the network), so one peer cannot take every place of `max_connections`.
    pub max_per_peer: usize,
    /// Copy buffer per direction of a connection.
    pub buffer: usize,
    /// How long opening a virtual socket or connecting to a backend may take.
    pub connect_timeout: Duration,
    /// Tokio worker threads that run the copies.
    pub threads: usize,
    /// Log every connection's open and clean close too, not only failures.
    pub verbose: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_per_peer: 256,
            buffer: 64 * 1024,
            connect_timeout: Duration::from_secs(5),
            threads: 1,
            verbose: false,
        }
    }
}

/// What a proxy has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyStats {
    pub accepted: u64,
    pub active: u64,
    /// Connections reset because `max_connections` were open.
    pub over_cap: u64,
    /// Connections reset because their peer address had `max_per_peer` open.
    pub over_peer_cap: u64,
    /// Connections whose other side could not be opened (peer port or backend).
    pub open_failures: u64,
    /// Connections reset by the TCP application (passed on as RST).
    pub tcp_resets: u64,
    /// Connections reset from the virtual side (peer RST, no channel left).
    pub virtual_resets: u64,
    /// Bytes from TCP into virtual sockets, and back.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    active: AtomicU64,
    over_cap: AtomicU64,
    over_peer_cap: AtomicU64,
    open_failures: AtomicU64,
    tcp_resets: AtomicU64,
    virtual_resets: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// Where log lines go (one event a line, already naming the connection).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

struct Shared {
    counters: Counters,
    limits: Limits,
    log: Log,
    /// Open connections per peer address (server side; entries leave at zero).
    per_peer: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    /// Set by [`Proxy::drain`]: new connections are refused while the open ones finish.
    draining: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn log(&self, line: fmt::Arguments<'_>) {
        (self.log)(&line.to_string());
    }

    /// Takes a connection slot, or says which cap refused it.
    fn admit(self: &Arc<Self>, peer: Option<std::net::IpAddr>) -> Result<Slot, String> {
        let c = &self.counters;
        c.accepted.fetch_add(1, Ordering::Relaxed);
        if self.draining.load(Ordering::Acquire) {
            return Err("the proxy is stopping".into());
        }
        let mut per_peer = crate::socket::lock(&self.per_peer);
        if let Some(ip) = peer {
            let open = per_peer.get(&ip).copied().unwrap_or(0);
            if open >= self.limits.max_per_peer {
                c.over_peer_cap.fetch_add(1, Ordering::Relaxed);
                return Err(format!(
                    "{open} connections from {ip} are open (the per-peer cap)"
                ));
            }
        }
        let max = self.limits.max_connections as u64;
        if c.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                (a < max).then_some(a + 1)
            })
            .is_err()
        {
            c.over_cap.fetch_add(1, Ordering::Relaxed);
            return Err(format!(
                "{} connections are open (the cap)",
                self.limits.max_connections
            ));
        }
        if let Some(ip) = peer {
            *per_peer.entry(ip).or_insert(0) += 1;
        }
        Ok(Slot(self.clone(), peer))
    }
}

/// One open connection; gives its slot back when dropped.
struct Slot(Arc<Shared>, Option<std::net::IpAddr>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(ip) = self.1 {
            let mut per_peer = crate::socket::lock(&self.0.per_peer);
            if let Some(n) = per_peer.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    per_peer.remove(&ip);
                }
            }
        }
        self.0.counters.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running proxy. Dropping it stops accepting and aborts open connections.
pub struct Proxy {
    shared: Arc<Shared>,
    _runtime: Exec,
    listen: Vec<SocketAddr>,
    _endpoint: Arc<Endpoint>,
    _listeners: Vec<Arc<VListener>>,
}

impl Proxy {
    /// The client side: listens on each route's address and forwards to `peer` (the server
    /// proxy's endpoint address). Fails, naming the address, if one cannot be bound.
    pub fn client(
        endpoint: Arc<Endpoint>,
        peer: SocketAddr,
        routes: &[Route],
        limits: Limits,
        log: Log,
    ) -> io::Result<Proxy> {
        let (runtime, shared) = prepare(limits, log)?;
        let mut listen = Vec::new();
        for route in routes {
            let l = std::net::TcpListener::bind(route.listen).map_err(|e| {
                io::Error::new(e.kind(), format!("listen on {}: {e}", route.listen))
            })?;
            l.set_nonblocking(true)?;
            listen.push(l.local_addr()?);
            let route = Route {
                listen: l.local_addr()?,
                ..*route
            };
            let l = {
                let _g = runtime.handle.enter();
                tokio::net::TcpListener::from_std(l)?
            };
            let (shared, endpoint) = (shared.clone(), endpoint.clone());
            runtime
                .handle
                .spawn(accept_tcp(l, route, peer, endpoint, shared));
        }
        Ok(Proxy::assemble(
            runtime,
            shared,
            endpoint,
            listen,
            Vec::new(),
        ))
    }

    /// The server side: binds each backend's virtual port on `endpoint` (which listens for
    /// the client proxy's channels) and connects every virtual socket to its backend.
    pub fn server(
        endpoint: Arc<Endpoint>,
        backends: &[Backend],
        limits: Limits,
        log: Log,
    ) -> io::Result<Proxy> {
        let (runtime, shared) = prepare(limits, log)?;
        let mut listeners = Vec::new();
        for b in backends {
            let l = Arc::new(endpoint.bind(b.port)?);
            listeners.push(l.clone());
            let (shared, handle, b) = (shared.clone(), runtime.handle.clone(), *b);
            std::thread::Builder::new()
                .name(format!("nc-proxy-{}", b.port))
                .spawn(move || accept_virtual(&l, b, &handle, &shared))?;
        }
        Ok(Proxy::assemble(
            runtime,
            shared,
            endpoint,
            Vec::new(),
            listeners,
        ))
    }

    /// Starts watching the channels and holds what the proxy's tasks and threads need.
    fn assemble(
        runtime: Exec,
        shared: Arc<Shared>,
        endpoint: Arc<Endpoint>,
        listen: Vec<SocketAddr>,
        listeners: Vec<Arc<VListener>>,
    ) -> Proxy {
        runtime
            .handle
            .spawn(watch_channels(endpoint.clone(), shared.clone()));
        if let Some(driver) = endpoint.driver() {
            runtime.handle.spawn(drive_channels(driver.clone()));
        }
        Proxy {
            shared,
            _runtime: runtime,
            listen,
            _endpoint: endpoint,
            _listeners: listeners,
        }
    }

    /// Stops taking connections (new ones are reset) and waits, up to `within`, for the open
    /// ones to finish as their ends close them; returns how many were still open. A proxy
    /// dropped at once aborts what is open, and the peer proxy then resets its side: a
    /// connection that was only closing (a FIN on its way through the channel) would be cut
    /// as if it had failed. Stopping on a signal drains first.
    pub fn drain(&self, within: Duration) -> u64 {
        self.shared.draining.store(true, Ordering::Release);
        let deadline = std::time::Instant::now() + within;
        loop {
            let open = self.shared.counters.active.load(Ordering::Acquire);
            if open == 0 || std::time::Instant::now() >= deadline {
                return open;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The client side's bound TCP addresses, in route order.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.listen
    }

    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProxyStats {
            accepted: g(&c.accepted),
            active: g(&c.active),
            over_cap: g(&c.over_cap),
            over_peer_cap: g(&c.over_peer_cap),
            open_failures: g(&c.open_failures),
            tcp_resets: g(&c.tcp_resets),
            virtual_resets: g(&c.virtual_resets),
            bytes_in: g(&c.bytes_in),
            bytes_out: g(&c.bytes_out),
        }
    }
}

/// The runtime that runs the copies. One thread (the default) is a current-thread runtime on
/// a thread of its own: tokio's multi-thread runtime with one worker pays for its
/// work-stealing queues and wake-ups on every task switch, and a proxy at pipelining 1 is
/// made of task switches (redis-benchmark through a proxy pair: 21.7-24.3 k GET/s on the
/// multi-thread runtime, against 25.9-28.2 k for a HAProxy pair, with 20 % of both CPUs
/// idle). More threads: the multi-thread runtime.
struct Exec {
    handle: tokio::runtime::Handle,
    multi: Option<tokio::runtime::Runtime>,
    /// Ends the current-thread runtime's thread (its `block_on`).
    single: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Exec {
    fn new(threads: usize) -> io::Result<Exec> {
        if threads > 1 {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("nc-proxy")
                .enable_io()
                .enable_time()
                .build()?;
            return Ok(Exec {
                handle: rt.handle().clone(),
                multi: Some(rt),
                single: None,
            });
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("nc-proxy".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
                // As the multi-thread runtime's drop: tasks dropped, blocking calls (an
                // open in progress) left to finish on their own.
                rt.shutdown_background();
            })?;
        Ok(Exec {
            handle,
            multi: None,
            single: Some(stop),
        })
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        if let Some(rt) = self.multi.take() {
            rt.shutdown_background();
        }
        if let Some(stop) = self.single.take() {
            // Not joined, as shutdown_background does not wait: a task stuck in a call would
            // otherwise hold whoever drops the proxy.
            let _ = stop.send(());
        }
    }
}

/// The runtime that runs the copies, and the state every task shares.
fn prepare(limits: Limits, log: Log) -> io::Result<(Exec, Arc<Shared>)> {
    let runtime = Exec::new(limits.threads.max(1))?;
    let shared = Arc::new(Shared {
        counters: Counters::default(),
        limits,
        log,
        per_peer: Default::default(),
        draining: Default::default(),
    });
    Ok((runtime, shared))
}

/// Logs each channel that dies or is re-opened (the library keeps sockets going; the operator
/// should still hear of it), with what was re-sent. Counters, not snapshots of `alive`, so
/// a channel that dies and comes back between two looks is still reported.
async fn watch_channels(endpoint: Arc<Endpoint>, shared: Arc<Shared>) {
    let mut known: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for s in endpoint.stats().sessions {
            let (lost, rejoined) = known.get(&s.link_id).copied().unwrap_or((0, 0));
            if s.lost_channels > lost {
                let dead: Vec<usize> = s
                    .channels
                    .iter()
                    .filter(|c| !c.alive)
                    .map(|c| c.index)
                    .collect();
                shared.log(format_args!(
                    "{} channel(s) to {} died (down now: {dead:?}); their frames went out on the others ({} re-sent so far)",
                    s.lost_channels - lost,
                    s.peer,
                    s.resent_frames
                ));
            }
            if s.rejoined_channels > rejoined {
                shared.log(format_args!(
                    "{} channel(s) to {} re-opened",
                    s.rejoined_channels - rejoined,
                    s.peer
                ));
            }
            known.insert(s.link_id, (s.lost_channels, s.rejoined_channels));
        }
    }
}

/// How often the driving task looks for channels that joined (one that joins is read by
/// its standby meanwhile, so this bounds only how long that hand-off lasts).
const DRIVE_LOOK: Duration = Duration::from_millis(10);

/// Run to completion on the proxy's runtime (an endpoint with `Config::app_driven`): each
/// channel gets a task that waits on its socket in the runtime's reactor and reads the
/// frames on the worker thread itself, so the copy task an arrival wakes runs on that
/// worker next, without a reader thread's hand-off per frame (the preload library does the
/// same in the program's epoll; see `drive`). A channel's standby thread reads it only until
/// its task has started: the task waits on the socket for as long as it lives, so the
/// standby sleeps.
async fn drive_channels(driver: Arc<crate::Driver>) {
    let mut running = std::collections::HashSet::new();
    let mut seen = None;
    loop {
        let generation = driver.generation();
        if seen != Some(generation) {
            seen = Some(generation);
            let chans = driver.channels();
            running.retain(|k| chans.iter().any(|c| c.key() == *k));
            for c in chans {
                if running.insert(c.key()) {
                    tokio::spawn(drive_channel(c));
                }
            }
        }
        tokio::time::sleep(DRIVE_LOOK).await;
    }
}

/// Reads `ch` whenever its socket is readable, until the channel dies.
async fn drive_channel(ch: crate::DrivenChannel) {
    // A duplicate in the reactor, for readiness only: the pump reads the channel's own.
    let Ok(fd) = ch
        .fd()
        .try_clone_to_owned()
        .and_then(netsteer_sock::reactor::readable)
    else {
        // Not in the reactor: the channel's standby reads it.
        return;
    };
    let chans = [ch.clone()];
    // This task waits on the socket, so the standby sleeps while it lives.
    let _watching = crate::watch(&chans);
    loop {
        let Ok(mut ready) = fd.readable().await else {
            return;
        };
        match ch.pump() {
            crate::Pumped::Closed => return,
            // Stopped at its batch limit: more is queued; let other tasks run first.
            crate::Pumped::Frames(n) if n >= crate::drive::PUMP_FRAMES => {
                tokio::task::yield_now().await
            }
            // Read until the socket ran dry: wait for the next arrival (an arrival since the
            // readiness was seen keeps it set; tokio clears only that tick).
            crate::Pumped::Frames(_) => ready.clear_ready(),
            // The standby is reading (it stepped in before this task looked): it stops
            // once it sees this task's watch; look again shortly.
            crate::Pumped::Busy => {
                drop(ready);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
    }
}

/// Resets a TCP connection when it is dropped: SO_LINGER 0, so close(2) sends RST.
fn reset_on_close(tcp: &TcpStream) {
    // Best effort: if it fails the application sees a FIN instead of a reset.
    let _ = netsteer_sock::opt::set_linger_zero(tcp.as_fd());
}

async fn accept_tcp(
    l: tokio::net::TcpListener,
    route: Route,
    peer: SocketAddr,
    endpoint: Arc<Endpoint>,
    shared: Arc<Shared>,
) {
    loop {
        let (tcp, from) = match l.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                shared.log(format_args!("accept on {}: {e}", route.listen));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match shared.admit(None) {
            Ok(slot) => slot,
            Err(why) => {
                shared.log(format_args!("{from} → {}: reset, {why}", route.listen));
                reset_on_close(&tcp);
                continue;
            }
        };
        let (endpoint, shared) = (endpoint.clone(), shared.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _ = tcp.set_nodelay(true);
            let opts = SocketOptions {
                class: Some(route.class),
                ..SocketOptions::default()
            };
            let timeout = shared.limits.connect_timeout;
            let open =
                tokio::task::spawn_blocking(move || endpoint.connect(peer, route.port, opts));
            let vs = match tokio::time::timeout(timeout, open).await {
                Ok(Ok(Ok(vs))) => vs,
                Ok(Ok(Err(e))) => {
                    shared
                        .counters
                        .open_failures
                        .fetch_add(1, Ordering::Relaxed);
                    shared.log(format_args!(
                        "{from} → {peer} port {}: {e}; resetting the connection",
                        route.port
                    ));
                    reset_on_close(&tcp);
                    return;
                }
                Ok(Err(_)) | Err(_) => {
                    shared
                        .counters
                        .open_failures
                        .fetch_add(1, Ordering::Relaxed);
                    shared.log(format_args!(
                        "{from} → {peer} port {}: no answer in {timeout:?}; resetting the connection",
                        route.port
                    ));
                    reset_on_close(&tcp);
                    return;
                }
            };
            let label = format!("{from} → {peer} port {}", route.port);
            pump(tcp, vs, &label, &shared).await;
        });
    }
}

fn accept_virtual(
    l: &VListener,
    b: Backend,
    handle: &tokio::runtime::Handle,
    shared: &Arc<Shared>,
) {
    loop {
        let vs = match l.accept() {
            Ok(vs) => vs,
            // The endpoint is closing.
            Err(_) => return,
        };
        let slot = match shared.admit(Some(vs.peer_addr().ip())) {
            Ok(slot) => slot,
            Err(why) => {
                shared.log(format_args!(
                    "{} port {} → {}: reset, {why}",
                    vs.peer_addr(),
                    b.port,
                    b.backend
                ));
                vs.abort(RstReason::Refused);
                continue;
            }
        };

        let shared = shared.clone();
        handle.spawn(async move {
            let _slot = slot;
            let label = format!(
                "{} port {} (virtual {}) → {}",
                vs.peer_addr(),
                b.port,
                vs.peer_port(),
                b.backend
            );
            let timeout = shared.limits.connect_timeout;
            let tcp = match tokio::time::timeout(timeout, TcpStream::connect(b.backend)).await {
                Ok(Ok(tcp)) => tcp,
                Ok(Err(e)) => {
                    shared
                        .counters
                        .open_failures
                        .fetch_add(1, Ordering::Relaxed);
                    shared.log(format_args!("{label}: backend down ({e}); resetting"));
                    vs.abort(RstReason::Refused);
                    return;
                }
                Err(_) => {
                    shared
                        .counters
                        .open_failures
                        .fetch_add(1, Ordering::Relaxed);
                    shared.log(format_args!(
                        "{label}: backend did not answer in {timeout:?}; resetting"
                    ));
                    vs.abort(RstReason::Refused);
                    return;
                }
            };
            let _ = tcp.set_nodelay(true);
            pump(tcp, vs, &label, &shared).await;
        });
    }
}

/// How one direction of a connection ended.
enum End {
    /// EOF passed on as a half-close.
    Eof,
    /// The TCP side failed or reset: reset the virtual socket.
    Tcp(io::Error),
    /// The virtual socket failed or was reset: reset the TCP side.
    Virtual(io::Error),
}

/// Copies the TCP side into the virtual socket until EOF, then half-closes the virtual
/// socket; counts into `total` (the proxy's) and `count` (the connection's). The bytes read
/// are the frames' payloads as they are (`poll_write_owned`): the frames the sender keeps
/// for re-sending share the read buffer's blocks, so a byte is copied only by the kernel.
/// Memory: one block of `buffer` bytes being filled, plus what the peer has not consumed
/// (bounded by its window), which pins at most one partly used block more.
async fn tcp_to_virtual<R>(
    from: &mut R,
    to: &VSocket,
    buffer: usize,
    total: &AtomicU64,
    count: &AtomicU64,
) -> End
where
    R: tokio::io::AsyncRead + Unpin,
{
    let mut buf = BytesMut::with_capacity(buffer);
    loop {
        // A fresh block only when the current one is nearly full: its front is in frames
        // the sender keeps, so reserving more in place would copy or reallocate each read.
        if buf.capacity() - buf.len() < buffer.min(4096) {
            buf = BytesMut::with_capacity(buffer);
        }
        let n = match from.read_buf(&mut buf).await {
            Ok(0) => {
                return match to.shutdown_write() {
                    Ok(()) => End::Eof,
                    Err(e) => End::Virtual(e),
                };
            }
            Ok(n) => n,
            Err(e) => return End::Tcp(e),
        };
        let mut data = buf.split().freeze();
        while !data.is_empty() {
            match std::future::poll_fn(|cx| to.poll_write_owned(cx, &data)).await {
                Ok(k) => data.advance(k),
                Err(e) => return End::Virtual(e),
            }
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        total.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Copies the virtual socket into the TCP side until EOF, then half-closes the TCP side.
/// Each piece goes on as it arrived ([`VSocket::poll_read_chunk`]: no copy in user space);
/// memory: the one piece being written, at most a frame's payload.
async fn virtual_to_tcp<W>(from: &VSocket, to: &mut W, total: &AtomicU64, count: &AtomicU64) -> End
where
    W: tokio::io::AsyncWrite + Unpin,
{
    loop {
        let piece = match std::future::poll_fn(|cx| from.poll_read_chunk(cx)).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return match to.shutdown().await {
                    Ok(()) => End::Eof,
                    Err(e) => End::Tcp(e),
                };
            }
            Err(e) => return End::Virtual(e),
        };
        if let Err(e) = to.write_all(&piece).await {
            return End::Tcp(e);
        }
        count.fetch_add(piece.len() as u64, Ordering::Relaxed);
        total.fetch_add(piece.len() as u64, Ordering::Relaxed);
    }
}

/// Copies both directions until both have ended, or one fails and resets the other side.
async fn pump(mut tcp: TcpStream, vs: VSocket, label: &str, shared: &Shared) {
    let buffer = shared.limits.buffer;
    let c = &shared.counters;
    let (sent, received) = (AtomicU64::new(0), AtomicU64::new(0));
    if shared.limits.verbose {
        shared.log(format_args!("{label}: open"));
    }
    let failure = {
        let (mut tr, mut tw) = tcp.split();
        let up = tcp_to_virtual(&mut tr, &vs, buffer, &c.bytes_in, &sent);
        let down = virtual_to_tcp(&vs, &mut tw, &c.bytes_out, &received);
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            let end = tokio::select! {
                e = &mut up, if !up_done => { up_done = true; e }
                e = &mut down, if !down_done => { down_done = true; e }
            };
            match end {
                End::Eof if up_done && down_done => break None,
                End::Eof => {}
                other => break Some(other),
            }
        }
    };
    match failure {
        None | Some(End::Eof) => {
            if shared.limits.verbose {
                shared.log(format_args!(
                    "{label}: closed, {} bytes in, {} out",
                    sent.load(Ordering::Relaxed),
                    received.load(Ordering::Relaxed)
                ));
            }
        }
        Some(End::Tcp(e)) => {
            c.tcp_resets.fetch_add(1, Ordering::Relaxed);
            shared.log(format_args!(
                "{label}: TCP side failed ({e}); resetting the virtual socket"
            ));
            vs.abort(RstReason::Aborted);
        }
        Some(End::Virtual(e)) => {
            c.virtual_resets.fetch_add(1, Ordering::Relaxed);
            shared.log(format_args!(
                "{label}: virtual socket failed ({e}); resetting the TCP connection"
            ));
            reset_on_close(&tcp);
        }
    }
}

/// `HOST:PORT` resolved, the flag named in every error.
fn resolve(flag: &str, value: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    value
        .to_socket_addrs()
        .map_err(|e| format!("{flag} {value}: {e}"))?
        .next()
        .ok_or_else(|| format!("{flag} {value}: no address"))
}

fn split<'a>(flag: &str, s: &'a str, want: &str) -> Result<(&'a str, u16), String> {
    let (a, b) = match want {
        "LISTEN=PORT" => s.split_once('='),
        _ => s.split_once('=').map(|(p, b)| (b, p)),
    }
    .ok_or_else(|| format!("{flag} {s}: expected {want}"))?;
    let port = b
        .parse()
        .map_err(|_| format!("{flag} {s}: virtual port {b:?} is not 0-65535"))?;
    Ok((a, port))
}

impl Route {
    /// `LISTEN=PORT` of `--route`/`--latency-route` (`flag`, for errors).
    pub fn parse(flag: &str, s: &str, class: Class) -> Result<Route, String> {
        let (listen, port) = split(flag, s, "LISTEN=PORT")?;
        Ok(Route {
            listen: resolve(flag, listen)?,
            port,
            class,
        })
    }
}

impl Backend {
    /// Every `PORT=BACKEND` of `--backend`; a virtual port given twice is an error.
    pub fn parse_all(values: &[String]) -> Result<Vec<Backend>, String> {
        let mut out: Vec<Backend> = Vec::new();
        for v in values {
            let (addr, port) = split("--backend", v, "PORT=BACKEND")?;
            let b = Backend {
                port,
                backend: resolve("--backend", addr)?,
            };
            if out.iter().any(|o| o.port == b.port) {
                return Err(format!(
                    "--backend {v}: virtual port {} is given twice",
                    b.port
                ));
            }
            out.push(b);
        }
        Ok(out)
    }
}

impl ProxyStats {
    /// One line for the end of a run: the proxy's counters and what the channels went
    /// through.
    pub fn summary_line(&self, role: &str, e: &crate::Stats) -> String {
        let (mut alive, mut total, mut resent, mut dups) = (0, 0, 0, 0);
        for s in &e.sessions {
            total += s.channels.len();
            alive += s.channels.iter().filter(|c| c.alive).count();
            resent += s.resent_frames;
            dups += s.duplicate_frames;
        }
        format!(
            "netchannel proxy {role}: {} connections ({} over the cap, {} over the per-peer cap, {} could not open, {} reset by TCP, {} reset by the virtual side), {} bytes in, {} out; channels alive {alive}/{total}, frames re-sent {resent}, duplicates dropped {dups}",
            self.accepted,
            self.over_cap,
            self.over_peer_cap,
            self.open_failures,
            self.tcp_resets,
            self.virtual_resets,
            self.bytes_in,
            self.bytes_out
        )
    }
}
