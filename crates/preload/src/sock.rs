//! Taking a socket over (connect, listen) and the calls that describe or configure it.

use crate::addr;
use crate::epoll;
use crate::state::{self, Kind, Obj};
use crate::sys::{self, real};
use libc::{c_int, c_void, socklen_t};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Whether `fd` is a TCP stream socket of the kernel (what may be taken over).
fn is_tcp(fd: c_int) -> bool {
    sys::sockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && sys::sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
}

fn fd_flags(fd: c_int) -> (bool, bool) {
    let fcntl = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
    // SAFETY: F_GETFD/F_GETFL take no argument and return flags or -1.
    let (fdf, fl) = unsafe { (fcntl(fd, libc::F_GETFD, 0), fcntl(fd, libc::F_GETFL, 0)) };
    (
        fdf >= 0 && fdf & libc::FD_CLOEXEC != 0,
        fl >= 0 && fl & libc::O_NONBLOCK != 0,
    )
}

/// Options worth carrying from the kernel socket the program configured to the virtual one
/// (so getsockopt reads back what it set before connect or listen).
const CARRIED: [(c_int, c_int); 6] = [
    (libc::SOL_SOCKET, libc::SO_KEEPALIVE),
    (libc::SOL_SOCKET, libc::SO_REUSEADDR),
    (libc::SOL_SOCKET, libc::SO_RCVBUF),
    (libc::SOL_SOCKET, libc::SO_SNDBUF),
    (libc::IPPROTO_TCP, libc::TCP_NODELAY),
    (libc::SOL_SOCKET, libc::SO_REUSEPORT),
];

/// Puts `obj`'s eventfd at the number `fd` (closing the kernel socket there) and records it.
fn install(fd: c_int, obj: Arc<Obj>) -> Result<(), c_int> {
    {
        let mut st = obj.st();
        for (level, name) in CARRIED {
            if let Some(v) = sys::sockopt_int(fd, level, name) {
                st.opts.insert((level, name), v.to_ne_bytes().to_vec());
            }
        }
    }
    let dup3 = real!(dup3: fn(c_int, c_int, c_int) -> c_int);
    // SAFETY: both descriptors are open; dup3 atomically replaces `fd` (close-on-exec: see
    // `Obj::cloexec`).
    if unsafe { dup3(obj.efd(), fd, libc::O_CLOEXEC) } < 0 {
        return Err(sys::errno());
    }
    state::insert(fd, obj);
    Ok(())
}

/// Why a peer would not carry a connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// It took the channels' TCP connections and closed them with the handshake unanswered:
    /// what an accepting endpoint does at any of its caps (netchannel has no refusal
    /// message), so this side learns that it was refused, not which cap.
    Session,
    /// The session is up and the peer reset the new virtual socket (RST Refused): a cap of
    /// the session (receive memory, sockets a session), or no virtual listener on the port.
    Socket,
}

/// Whether `e`, from a connect to `peer`, is the peer refusing to carry it.
fn refusal(ep: &netchannel::Endpoint, peer: SocketAddr, e: &std::io::Error) -> Option<Refusal> {
    use std::io::ErrorKind::*;
    match e.kind() {
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
            if !ep.has_session(peer) =>
        {
            Some(Refusal::Session)
        }
        ConnectionRefused if ep.has_session(peer) => Some(Refusal::Socket),
        _ => None,
    }
}

impl Refusal {
    fn what(self) -> &'static str {
        match self {
            Refusal::Session => {
                "refused the netchannel session (it closed the handshake unanswered, which an \
                 endpoint does only at one of its caps: sessions from one address — 4 for a \
                 preloaded program, max_sessions_per_peer, NETSTEER_NC_SESSIONS_PER_PEER there \
                 — or from its prefix or in all, channels, handshakes, half-built links, file \
                 descriptors; the peer's stderr names the cap)"
            }
            Refusal::Socket => {
                "refused the netchannel connection (RST Refused: a cap of the session — \
                 receive memory, sockets a session — or no virtual listener on the port)"
            }
        }
    }
}

/// The errno connect(2) gives for `e`: EIO, which TCP never gives there, becomes
/// ECONNREFUSED (no connection was made).
fn connect_errno(e: &std::io::Error) -> c_int {
    match sys::errno_of(e) {
        libc::EIO => libc::ECONNREFUSED,
        n => n,
    }
}

/// A connect the peer refused: Ok(None) (the caller connects the kernel socket: plain TCP)
/// when fallback is allowed, else ECONNREFUSED; a line on stderr either way.
fn refused(to: SocketAddr, peer: SocketAddr, why: &str) -> Result<Option<()>, c_int> {
    if state::extra().fallback {
        sys::say(&format!(
            "connect to {to}: netchannel peer {peer} {why}; this connection goes over plain TCP"
        ));
        Ok(None)
    } else {
        sys::say(&format!(
            "connect to {to}: netchannel peer {peer} {why}; refused with ECONNREFUSED \
             ({}=0)",
            state::ENV_FALLBACK
        ));
        Err(libc::ECONNREFUSED)
    }
}

/// A non-blocking connect whose session the peer refused goes over TCP after all: its kept
/// kernel socket `k` connects (non-blocking, as the program asked) and takes the program's
/// numbers back, epoll registrations included ([`state::hand_back`]); whoever polls the
/// number is woken and finds the kernel socket, whose SO_ERROR gives the TCP outcome. Err:
/// the TCP connect failed at once (its errno, for SO_ERROR).
fn tcp_instead(obj: &Arc<Obj>, to: SocketAddr, k: &OwnedFd) -> Result<(), c_int> {
    let (sa, len) = netsteer_sock::sockaddr::to_raw(&to);
    let connect = real!(connect: fn(c_int, *const libc::sockaddr, socklen_t) -> c_int);
    // SAFETY: `sa` is a valid address of `len` bytes; `k` is an open socket.
    if unsafe { connect(k.as_raw_fd(), (&raw const sa).cast(), len) } < 0 {
        let e = sys::errno();
        if e != libc::EINPROGRESS {
            return Err(e);
        }
    }
    if let Kind::Connecting { handed_back, .. } = &obj.kind {
        handed_back.store(true, Ordering::Release);
    }
    state::hand_back(obj, k, epoll::handed_back);
    sys::kick(obj.efd());
    Ok(())
}

/// connect(2): a chosen destination opens a virtual socket to the peer. Ok(None): not ours,
/// the caller connects the kernel socket (also when the peer refused and fallback is
/// allowed: see [`refused`]).
pub(crate) fn connect(fd: c_int, to: SocketAddr) -> Result<Option<()>, c_int> {
    let s = state::settings();
    let Some(peer) = s.peer_for(to) else {
        return Ok(None);
    };
    if !is_tcp(fd) {
        return Ok(None);
    }
    if state::recently_refused(peer) {
        // Refused moments ago (said then): not asked again yet.
        if s.verbose {
            sys::say(&format!(
                "connect to {to}: netchannel peer {peer} refused this process a session less \
                 than 5 s ago; not asked again yet"
            ));
        }
        return if state::extra().fallback {
            Ok(None)
        } else {
            Err(libc::ECONNREFUSED)
        };
    }
    let class = s
        .class_of(to.port())
        .unwrap_or(netchannel::Class::Throughput);
    let opts = match class {
        netchannel::Class::Latency => netchannel::SocketOptions::latency(),
        netchannel::Class::Throughput => netchannel::SocketOptions::default(),
    };
    let ep = match state::endpoint() {
        Ok(ep) => ep,
        Err(e) => {
            let why = format!("cannot be reached: this process has no netchannel endpoint ({e})");
            return refused(to, peer, &why);
        }
    };
    let (cloexec, nonblock) = fd_flags(fd);
    // Opening a virtual socket on a session that is up is one round trip on a channel: it
    // completes now (as a local TCP connect may). A session to dial first takes the peer's
    // handshake: a non-blocking socket gets EINPROGRESS, as on TCP, and the program learns the
    // outcome from poll (writable) and SO_ERROR.
    if nonblock && !ep.has_session(peer) {
        // The kernel socket, kept: a refused session hands the connection back to it.
        let kernel = if state::extra().fallback {
            let fcntl = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
            // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1.
            let n = unsafe { fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            // SAFETY: `n` is a new descriptor owned by nobody else.
            (n >= 0).then(|| sys::move_high(unsafe { OwnedFd::from_raw_fd(n) }))
        } else {
            None
        };
        let obj = Obj::new(
            Kind::Connecting {
                to,
                done: std::sync::OnceLock::new(),
                error_taken: std::sync::atomic::AtomicBool::new(false),
                kernel: std::sync::Mutex::new(kernel),
                handed_back: std::sync::atomic::AtomicBool::new(false),
            },
            nonblock,
            cloexec,
        )
        .map_err(|e| sys::errno_of(&e))?;
        install(fd, obj.clone())?;
        let verbose = s.verbose;
        let dial = move || {
            let r = ep.connect(peer, to.port(), opts);
            let Kind::Connecting { done, kernel, .. } = &obj.kind else {
                return;
            };
            // Taken now whatever the outcome: kept past it, the descriptor would live as long
            // as anything holds this object (an epoll registration does).
            let kept = kernel.lock().unwrap_or_else(|p| p.into_inner()).take();
            let outcome = match r {
                Ok(vs) => {
                    let local = addr::unspecified_like(&to, vs.local_port());
                    let next = obj.successor(Kind::Stream {
                        vs,
                        local,
                        peer: to,
                    });
                    state::succeed(&obj, &next);
                    Ok(next)
                }
                Err(e) => match refusal(&ep, peer, &e) {
                    Some(r) => {
                        if r == Refusal::Session {
                            state::note_refused(peer);
                        }
                        let why = format!(
                            "connect to {to} (non-blocking): netchannel peer {peer} {} ({e})",
                            r.what()
                        );
                        match kept.map(|k| tcp_instead(&obj, to, &k)) {
                            Some(Ok(())) => {
                                sys::say(&format!("{why}; this connection goes over plain TCP"));
                                return;
                            }
                            Some(Err(n)) => {
                                sys::say(&format!(
                                    "{why}; over plain TCP instead the connect failed: {}",
                                    std::io::Error::from_raw_os_error(n)
                                ));
                                Err(n)
                            }
                            None => {
                                sys::say(&format!(
                                    "{why}; refused with ECONNREFUSED{}",
                                    if state::extra().fallback {
                                        ""
                                    } else {
                                        " (NETSTEER_NC_FALLBACK=0)"
                                    }
                                ));
                                Err(libc::ECONNREFUSED)
                            }
                        }
                    }
                    None => {
                        if verbose {
                            sys::say(&format!("connect to {to} over netchannel peer {peer}: {e}"));
                        }
                        Err(connect_errno(&e))
                    }
                },
            };
            let _ = done.set(outcome);
            sys::kick(obj.efd());
        };
        if let Err(e) = std::thread::Builder::new()
            .name("nc-connect".into())
            .spawn(dial)
        {
            return Err(sys::errno_of(&e));
        }
        return Err(libc::EINPROGRESS);
    }
    let vs = match ep.connect(peer, to.port(), opts) {
        Ok(vs) => vs,
        // The kernel socket is untouched so far: a refused connect can still be a TCP one.
        Err(e) => {
            return match refusal(&ep, peer, &e) {
                Some(r) => {
                    if r == Refusal::Session {
                        state::note_refused(peer);
                    }
                    refused(to, peer, &format!("{} ({e})", r.what()))
                }
                None => {
                    if s.verbose {
                        sys::say(&format!("connect to {to} over netchannel peer {peer}: {e}"));
                    }
                    Err(connect_errno(&e))
                }
            };
        }
    };
    let local = addr::unspecified_like(&to, vs.local_port());
    let obj = Obj::new(
        Kind::Stream {
            vs,
            local,
            peer: to,
        },
        nonblock,
        cloexec,
    )
    .map_err(|e| sys::errno_of(&e))?;
    install(fd, obj)?;
    if s.verbose {
        sys::say(&format!(
            "fd {fd}: connected to {to} over netchannel peer {peer}"
        ));
    }
    Ok(Some(()))
}

/// listen(2) on a chosen port: the kernel socket keeps listening (hidden) for plain TCP
/// clients, and the program's descriptor becomes the listener of both.
pub(crate) fn listen(fd: c_int, backlog: c_int) -> Result<Option<()>, c_int> {
    let s = state::settings();
    if s.listen.is_none() || !is_tcp(fd) {
        return Ok(None);
    }
    let mut st: libc::sockaddr_storage = zeroed();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    let gsn = real!(getsockname: fn(c_int, *mut libc::sockaddr, *mut socklen_t) -> c_int);
    // SAFETY: `st` is valid for `len` bytes.
    if unsafe { gsn(fd, (&raw mut st).cast(), &raw mut len) } < 0 {
        return Ok(None);
    }
    // SAFETY: written by getsockname, `len` bytes valid.
    let Some(local) = (unsafe { addr::read((&raw const st).cast(), len) }) else {
        return Ok(None);
    };
    if s.class_of(local.port()).is_none() {
        return Ok(None);
    }
    // Channels arrive at the --listen address: a listener bound to another address (a
    // service on 127.0.0.1 only) must not become reachable through it. Taken over only when
    // bound to every address or to the channel address itself.
    if let Some(channel) = s.listen
        && !takes_over(local.ip(), channel.ip())
    {
        sys::say(&format!(
            "fd {fd}: port {} is bound to {}, not to the netchannel address {} nor to all \
             addresses; it stays plain TCP",
            local.port(),
            local.ip(),
            channel.ip()
        ));
        return Ok(None);
    }
    let lst = real!(listen: fn(c_int, c_int) -> c_int);
    // SAFETY: plain system call on the program's socket.
    if unsafe { lst(fd, backlog) } < 0 {
        return Err(sys::errno());
    }
    let (cloexec, nonblock) = fd_flags(fd);
    let fcntl = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1.
    let hidden = unsafe { fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if hidden < 0 {
        return Err(sys::errno());
    }
    // SAFETY: `hidden` is a new descriptor owned by nobody else.
    let real_fd = sys::move_high(unsafe { OwnedFd::from_raw_fd(hidden) });
    // The hidden listener never blocks: accept waits on it with poll.
    // SAFETY: F_GETFL/F_SETFL on our own descriptor.
    unsafe {
        let fl = fcntl(real_fd.as_raw_fd(), libc::F_GETFL, 0);
        fcntl(
            real_fd.as_raw_fd(),
            libc::F_SETFL,
            libc::c_long::from(fl | libc::O_NONBLOCK),
        );
    }
    let obj = Obj::new(
        Kind::Listener {
            real: real_fd,
            port: local.port(),
            virt: std::sync::Mutex::new(None),
            failed: std::sync::atomic::AtomicBool::new(false),
        },
        nonblock,
        cloexec,
    )
    .map_err(|e| sys::errno_of(&e))?;
    install(fd, obj)?;
    if s.verbose {
        sys::say(&format!(
            "fd {fd}: port {} listens on netchannel and TCP",
            local.port()
        ));
    }
    Ok(Some(()))
}

fn zeroed() -> libc::sockaddr_storage {
    // SAFETY: plain bytes; zero is valid.
    unsafe { std::mem::zeroed() }
}

/// getsockname/getpeername.
pub(crate) fn name(
    obj: &Obj,
    peer: bool,
    out: *mut libc::sockaddr,
    len: *mut socklen_t,
) -> Result<(), c_int> {
    match &obj.kind {
        Kind::Stream { local, peer: p, .. } => {
            let a = if peer { *p } else { *local };
            // SAFETY: the program's buffers (its contract with getsockname/getpeername).
            unsafe { addr::write(a, out, len) };
            Ok(())
        }
        Kind::Connecting { to, done, .. } => match done.get() {
            Some(Ok(next)) => name(next, peer, out, len),
            _ if peer => Err(libc::ENOTCONN),
            _ => {
                // SAFETY: the program's buffers (its contract with getsockname).
                unsafe { addr::write(addr::unspecified_like(to, 0), out, len) };
                Ok(())
            }
        },
        Kind::Listener { real, .. } => {
            if peer {
                return Err(libc::ENOTCONN);
            }
            let gsn = real!(getsockname: fn(c_int, *mut libc::sockaddr, *mut socklen_t) -> c_int);
            // SAFETY: the program's buffers, forwarded.
            if unsafe { gsn(real.as_raw_fd(), out, len) } < 0 {
                return Err(sys::errno());
            }
            Ok(())
        }
    }
}

/// Options a virtual stream socket keeps and reads back. Those marked apply change what
/// the library does; the rest describe the kernel TCP socket the program would have had
/// and have no meaning for a virtual one (the channels carry their own settings).
fn emulated(level: c_int, name: c_int) -> bool {
    matches!(
        (level, name),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE)
            | (libc::SOL_SOCKET, libc::SO_REUSEADDR)
            | (libc::SOL_SOCKET, libc::SO_REUSEPORT)
            | (libc::SOL_SOCKET, libc::SO_RCVBUF)
            | (libc::SOL_SOCKET, libc::SO_SNDBUF)
            | (libc::SOL_SOCKET, libc::SO_RCVLOWAT)
            | (libc::SOL_SOCKET, libc::SO_LINGER) // applied: l_linger 0 resets on close
            | (libc::SOL_SOCKET, libc::SO_RCVTIMEO) // applied
            | (libc::SOL_SOCKET, libc::SO_SNDTIMEO) // applied
            | (libc::SOL_SOCKET, libc::SO_PRIORITY)
            | (libc::SOL_SOCKET, libc::SO_OOBINLINE)
            | (libc::SOL_SOCKET, libc::SO_BUSY_POLL)
            | (libc::SOL_SOCKET, libc::SO_MARK)
            | (libc::IPPROTO_TCP, libc::TCP_NODELAY)
            | (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE)
            | (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL)
            | (libc::IPPROTO_TCP, libc::TCP_KEEPCNT)
            | (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT)
            | (libc::IPPROTO_TCP, libc::TCP_QUICKACK)
            | (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)
            | (libc::IPPROTO_TCP, libc::TCP_CORK)
            | (libc::IPPROTO_IP, libc::IP_TOS)
            | (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
            | (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)
    )
}

fn timeval(v: &[u8]) -> Option<Option<Duration>> {
    if v.len() < std::mem::size_of::<libc::timeval>() {
        return None;
    }
    // SAFETY: length checked; read unaligned.
    let tv = unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<libc::timeval>()) };
    if tv.tv_sec < 0 || !(0..1_000_000).contains(&tv.tv_usec) {
        return None;
    }
    let d = Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64);
    Some((!d.is_zero()).then_some(d))
}

/// setsockopt on a virtual socket. A listener's go to its kernel socket too.
pub(crate) fn setsockopt(
    fd: c_int,
    obj: &Obj,
    level: c_int,
    name: c_int,
    val: &[u8],
) -> Result<(), c_int> {
    if let Kind::Listener { real, .. } = &obj.kind {
        let set = real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int);
        // SAFETY: `val` is valid for its length.
        if unsafe {
            set(
                real.as_raw_fd(),
                level,
                name,
                val.as_ptr().cast(),
                val.len() as socklen_t,
            )
        } < 0
        {
            return Err(sys::errno());
        }
        obj.st().opts.insert((level, name), val.to_vec());
        return Ok(());
    }
    if !emulated(level, name) {
        sys::say(&format!(
            "setsockopt(fd {fd}, level {level}, option {name}) is not supported on a netchannel socket; refused with ENOPROTOOPT"
        ));
        return Err(libc::ENOPROTOOPT);
    }
    let mut st = obj.st();
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => st.rcvtimeo = timeval(val).ok_or(libc::EINVAL)?,
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => st.sndtimeo = timeval(val).ok_or(libc::EINVAL)?,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if val.len() < std::mem::size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: length checked; read unaligned.
            let l = unsafe { std::ptr::read_unaligned(val.as_ptr().cast::<libc::linger>()) };
            st.linger_abort = l.l_onoff != 0 && l.l_linger == 0;
        }
        _ => {
            if val.len() < std::mem::size_of::<c_int>() && level != libc::IPPROTO_TCP {
                return Err(libc::EINVAL);
            }
        }
    }
    st.opts.insert((level, name), val.to_vec());
    Ok(())
}

/// getsockopt on a virtual socket: kept values, and what describes a virtual socket.
pub(crate) fn getsockopt(
    fd: c_int,
    obj: &Obj,
    level: c_int,
    name: c_int,
) -> Result<Vec<u8>, c_int> {
    let int = |v: c_int| Ok(v.to_ne_bytes().to_vec());
    if level == libc::SOL_SOCKET {
        match name {
            libc::SO_TYPE => return int(libc::SOCK_STREAM),
            libc::SO_PROTOCOL => return int(libc::IPPROTO_TCP),
            libc::SO_ACCEPTCONN => return int(matches!(obj.kind, Kind::Listener { .. }) as c_int),
            libc::SO_DOMAIN => {
                let fam = match &obj.kind {
                    Kind::Stream {
                        local: SocketAddr::V6(_),
                        ..
                    }
                    | Kind::Connecting {
                        to: SocketAddr::V6(_),
                        ..
                    } => libc::AF_INET6,
                    _ => libc::AF_INET,
                };
                return int(fam);
            }
            libc::SO_ERROR => {
                let e = match &obj.kind {
                    Kind::Stream { vs, .. } => {
                        let mut st = obj.st();
                        match vs.error() {
                            Some(e) if !st.error_taken => {
                                st.error_taken = true;
                                sys::errno_of(&e)
                            }
                            _ => 0,
                        }
                    }
                    // A failed connect's error, once (as TCP hands out sk_err).
                    Kind::Connecting {
                        done, error_taken, ..
                    } => match done.get() {
                        Some(Err(e)) if !error_taken.swap(true, Ordering::AcqRel) => *e,
                        Some(Ok(next)) => {
                            return getsockopt(fd, next, level, name);
                        }
                        _ => 0,
                    },
                    Kind::Listener { .. } => 0,
                };
                return int(e);
            }
            _ => {}
        }
    }
    if let Kind::Listener { real, .. } = &obj.kind {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len() as socklen_t;
        let get = real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int);
        // SAFETY: `buf` is valid for `len` bytes.
        if unsafe {
            get(
                real.as_raw_fd(),
                level,
                name,
                buf.as_mut_ptr().cast(),
                &raw mut len,
            )
        } < 0
        {
            return Err(sys::errno());
        }
        buf.truncate(len as usize);
        return Ok(buf);
    }
    if let Some(v) = obj.st().opts.get(&(level, name)) {
        return Ok(v.clone());
    }
    if emulated(level, name) {
        // Never set: what a fresh kernel socket reads (0 for flags and timeouts; the
        // window for buffers).
        let v = match (level, name) {
            (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => {
                state::settings().window as c_int
            }
            (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => 1,
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO) => {
                return Ok(vec![0u8; std::mem::size_of::<libc::timeval>()]);
            }
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                return Ok(vec![0u8; std::mem::size_of::<libc::linger>()]);
            }
            _ => 0,
        };
        return int(v);
    }
    sys::say(&format!(
        "getsockopt(fd {fd}, level {level}, option {name}) is not supported on a netchannel socket; refused with ENOPROTOOPT"
    ));
    Err(libc::ENOPROTOOPT)
}

/// shutdown(2).
pub(crate) fn shutdown(obj: &Obj, how: c_int) -> Result<(), c_int> {
    obj.usable("shutdown")?;
    match &obj.kind {
        Kind::Stream { vs, .. } => {
            if how == libc::SHUT_RD || how == libc::SHUT_RDWR {
                obj.st().shut_rd = true;
                sys::kick(obj.efd());
            }
            if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
                vs.shutdown_write().map_err(|e| sys::errno_of(&e))?;
            }
            if !(libc::SHUT_RD..=libc::SHUT_RDWR).contains(&how) {
                return Err(libc::EINVAL);
            }
            Ok(())
        }
        Kind::Connecting { done, .. } => match done.get() {
            Some(Ok(next)) => shutdown(next, how),
            _ => Err(libc::ENOTCONN),
        },
        Kind::Listener { real, virt, .. } => {
            let sd = real!(shutdown: fn(c_int, c_int) -> c_int);
            // SAFETY: plain system call on our descriptor.
            unsafe { sd(real.as_raw_fd(), how) };
            drop(virt.lock().unwrap_or_else(|p| p.into_inner()).take());
            sys::kick(obj.efd());
            Ok(())
        }
    }
}

/// close(2) of a virtual socket's descriptor.
pub(crate) fn close(fd: c_int) -> c_int {
    let obj = state::remove(fd);
    if obj.is_some()
        && obj
            .as_ref()
            .is_some_and(|o| o.owner.load(Ordering::Acquire) == state::pid())
    {
        epoll::forget_fd(fd);
    }
    let close = real!(close: fn(c_int) -> c_int);
    // SAFETY: plain system call on the program's descriptor.
    let r = unsafe { close(fd) };
    if let Some(o) = obj {
        state::release(o);
    }
    r
}

/// Whether a listener bound to `bound` serves connections that arrive at `channel` (the
/// --listen address): bound to all addresses, or to that one (an IPv4-mapped IPv6 address
/// counts as its IPv4 address). A channel address of 0.0.0.0 accepts at every address, so
/// only listeners on every address are taken over then.
pub(crate) fn takes_over(bound: std::net::IpAddr, channel: std::net::IpAddr) -> bool {
    let canon = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
    };
    bound.is_unspecified() || (!channel.is_unspecified() && canon(bound) == canon(channel))
}

/// Numbers `lo..=hi` are being closed by other means than close(2) (close_range, closefrom,
/// dup2/dup3 over them): the virtual sockets and epoll sets there stop being ours, as
/// [`close`] does, before the kernel reuses the numbers.
pub(crate) fn forget_range(lo: c_int, hi: c_int) {
    for fd in state::in_range(lo, hi) {
        if let Some(o) = state::remove(fd) {
            if o.owner.load(Ordering::Acquire) == state::pid() {
                epoll::forget_fd(fd);
            }
            state::release(o);
        }
    }
    epoll::forget_sets_in(lo, hi);
}

/// CLOSE_RANGE_CLOEXEC over `lo..=hi`: the program's view of FD_CLOEXEC (the descriptors
/// themselves are always close-on-exec, see `Obj::cloexec`).
pub(crate) fn mark_cloexec_range(lo: c_int, hi: c_int) {
    for fd in state::in_range(lo, hi) {
        if let Some(o) = state::get(fd) {
            o.cloexec.store(true, Ordering::Relaxed);
        }
    }
}

/// dup family: the new number names the same virtual socket.
pub(crate) fn dup_to(obj: Arc<Obj>, newfd: c_int) {
    state::insert(newfd, obj);
}

/// fcntl(2) on a virtual socket.
pub(crate) fn fcntl(
    fd: c_int,
    obj: &Arc<Obj>,
    cmd: c_int,
    arg: libc::c_long,
) -> Result<c_int, c_int> {
    match cmd {
        libc::F_GETFL => Ok(libc::O_RDWR
            | if obj.nonblock.load(Ordering::Relaxed) {
                libc::O_NONBLOCK
            } else {
                0
            }),
        libc::F_SETFL => {
            obj.nonblock
                .store(arg as c_int & libc::O_NONBLOCK != 0, Ordering::Relaxed);
            Ok(0)
        }
        libc::F_GETFD => Ok(if obj.cloexec.load(Ordering::Relaxed) {
            libc::FD_CLOEXEC
        } else {
            0
        }),
        libc::F_SETFD => {
            obj.cloexec
                .store(arg as c_int & libc::FD_CLOEXEC != 0, Ordering::Relaxed);
            Ok(0)
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let f = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
            // SAFETY: duplicating the program's descriptor (close-on-exec, see
            // `Obj::cloexec`).
            let n = unsafe { f(fd, libc::F_DUPFD_CLOEXEC, arg) };
            if n < 0 {
                return Err(sys::errno());
            }
            dup_to(obj.clone(), n);
            Ok(n)
        }
        _ => {
            sys::say(&format!(
                "fcntl(fd {fd}, command {cmd}) is not supported on a netchannel socket; refused with EINVAL"
            ));
            Err(libc::EINVAL)
        }
    }
}

/// ioctl(2) on a virtual socket.
///
/// # Safety
/// `arg` must be what `req` takes (an int pointer for the ones handled).
pub(crate) unsafe fn ioctl(
    fd: c_int,
    obj: &Obj,
    req: libc::c_ulong,
    arg: usize,
) -> Result<c_int, c_int> {
    let out = arg as *mut c_int;
    match req {
        libc::FIONBIO => {
            if out.is_null() {
                return Err(libc::EFAULT);
            }
            // SAFETY: FIONBIO takes a pointer to int (the caller's contract).
            let on = unsafe { *out } != 0;
            obj.nonblock.store(on, Ordering::Relaxed);
            Ok(0)
        }
        libc::FIOCLEX | libc::FIONCLEX => {
            obj.cloexec.store(req == libc::FIOCLEX, Ordering::Relaxed);
            Ok(0)
        }
        libc::FIONREAD | libc::TIOCOUTQ => {
            if out.is_null() {
                return Err(libc::EFAULT);
            }
            let vs = match &obj.kind {
                Kind::Stream { vs, .. } => vs,
                Kind::Connecting { done, .. } => match done.get() {
                    Some(Ok(next)) => match &next.kind {
                        Kind::Stream { vs, .. } => vs,
                        _ => return Err(libc::EINVAL),
                    },
                    _ => return Err(libc::ENOTCONN),
                },
                Kind::Listener { .. } => return Err(libc::EINVAL),
            };
            let v = if req == libc::FIONREAD {
                vs.readable_bytes()
            } else {
                vs.unacknowledged()
            };
            // SAFETY: these take a pointer to int (the caller's contract).
            unsafe { *out = v.min(c_int::MAX as u64) as c_int };
            Ok(0)
        }
        _ => {
            sys::say(&format!(
                "ioctl(fd {fd}, request {req:#x}) is not supported on a netchannel socket; refused with ENOTTY"
            ));
            Err(libc::ENOTTY)
        }
    }
}
