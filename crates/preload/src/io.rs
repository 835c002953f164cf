//! Reads, writes and accepts on virtual sockets, blocking or not as the program set the
//! descriptor. Every wait is a poll(2) on the socket's eventfd, so a signal interrupts it as
//! it would a kernel socket's.

use crate::epoll;
use crate::signals;
use crate::state::{self, Kind, Obj};
use crate::sys::{self, real};
use bytes_like::gather;
use libc::c_int;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Largest piece one write hands the endpoint at a time (the endpoint frames it further).
const CHUNK: usize = 256 * 1024;

mod bytes_like {
    /// Copies up to `limit` bytes from `bufs`, starting `skip` bytes in, into one buffer.
    pub fn gather(bufs: &[&[u8]], skip: usize, limit: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(limit);
        let mut skip = skip;
        for b in bufs {
            if out.len() >= limit {
                break;
            }
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            let part = &b[skip..];
            skip = 0;
            let take = part.len().min(limit - out.len());
            out.extend_from_slice(&part[..take]);
        }
        out
    }
}

/// Runs `op` until it is ready, waiting on the socket's eventfd (and `also`, a kernel
/// descriptor whose readability matters too) in between. Non-blocking: EAGAIN at once.
pub(crate) fn block_on<T>(
    obj: &Obj,
    nonblock: bool,
    timeout: Option<Duration>,
    also: Option<c_int>,
    mut op: impl FnMut(&mut Context<'_>) -> Poll<Result<T, c_int>>,
) -> Result<T, c_int> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut cx = Context::from_waker(&obj.waker);
    loop {
        if let Poll::Ready(r) = op(&mut cx) {
            return r;
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(libc::EAGAIN);
                }
                left.as_millis().clamp(1, c_int::MAX as u128) as c_int
            }
        };
        let efd = obj.efd();
        let fds: Vec<c_int> = std::iter::once(efd).chain(also).collect();
        signals::wait_begins();
        match wait_driving(&fds, ms) {
            // A signal came. TCP restarts a wait without a timeout when the handler of the
            // signal that came has SA_RESTART, and fails one with a timeout with EINTR
            // (sock_intr_errno() in include/net/sock.h: -ERESTARTSYS only for
            // MAX_SCHEDULE_TIMEOUT), whatever other signals' handlers ask for.
            Err(libc::EINTR) if deadline.is_none() && signals::restart_after_interrupt() => {}
            Err(e) => return Err(e),
            Ok(()) => {}
        }
        sys::drain(efd);
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes, and meanwhile for the
/// endpoint's channels: an arrival there is read on this thread (netchannel's `drive`), and
/// the wait returns so the caller looks again. Err(EINTR) when a signal came.
pub(crate) fn wait_driving(fds: &[c_int], timeout_ms: c_int) -> Result<(), c_int> {
    let Some(d) = state::driver() else {
        return sys::wait_readable(fds, timeout_ms);
    };
    let chans = d.channels();
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .copied()
        .chain(chans.iter().map(|c| c.fd().as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let poll = real!(poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
    let waiting = netchannel::watch(&chans);
    // SAFETY: `p` is a valid array of `p.len()` pollfd structs.
    let n = unsafe { poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    drop(waiting);
    if n < 0 {
        return Err(sys::errno());
    }
    for (q, c) in p[fds.len()..].iter().zip(&chans) {
        if q.revents != 0 {
            c.pump();
        }
    }
    Ok(())
}

fn io_errno(e: io::Error) -> c_int {
    sys::errno_of(&e)
}

fn stream(obj: &Obj) -> Result<&netchannel::VSocket, c_int> {
    match &obj.kind {
        Kind::Stream { vs, .. } => Ok(vs),
        Kind::Listener { .. } => Err(libc::ENOTCONN),
        Kind::Connecting {
            done, handed_back, ..
        } => loop {
            match done.get() {
                Some(Ok(next)) => return stream(next),
                Some(Err(e)) => return Err(*e),
                // Handed back to TCP while this call was under way: the program's number is
                // the kernel socket now, still connecting (what TCP answers then).
                None if handed_back.load(Ordering::Acquire) => return Err(libc::EAGAIN),
                // Still connecting: TCP answers EAGAIN on a non-blocking socket and waits on
                // a blocking one (the program may have cleared O_NONBLOCK since).
                None if obj.nonblock.load(Ordering::Relaxed) => return Err(libc::EAGAIN),
                None => {
                    sys::wait_readable(&[obj.efd()], 100)?;
                }
            }
        },
    }
}

/// recv(2) family into `bufs`.
pub(crate) fn recv(obj: &Obj, bufs: &mut [&mut [u8]], flags: c_int) -> Result<usize, c_int> {
    obj.usable("recv")?;
    let vs = stream(obj)?;
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let (shut, timeout) = {
        let st = obj.st();
        (st.shut_rd, st.rcvtimeo)
    };
    if shut || total == 0 {
        return Ok(0);
    }
    if flags & libc::MSG_OOB != 0 {
        // TCP without urgent data says the same.
        return Err(libc::EINVAL);
    }
    if flags & libc::MSG_ERRQUEUE != 0 {
        return Err(libc::EAGAIN);
    }
    let nonblock = obj.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
    if flags & libc::MSG_PEEK != 0 {
        return block_on(obj, nonblock, timeout, None, |cx| {
            let mut tmp = vec![0u8; total];
            match vs.peek(&mut tmp) {
                Err(e) => Poll::Ready(Err(io_errno(e))),
                Ok(Some(n)) => {
                    scatter(bufs, &tmp[..n]);
                    Poll::Ready(Ok(n))
                }
                Ok(None) => {
                    // Leaves the waker for the next arrival.
                    let _ = vs.readiness(Some(cx));
                    if vs.readable_bytes() > 0 {
                        cx.waker().wake_by_ref();
                    }
                    Poll::Pending
                }
            }
        });
    }
    let waitall = flags & libc::MSG_WAITALL != 0;
    let mut got = 0usize;
    let r = block_on(obj, nonblock, timeout, None, |cx| {
        // Walk the buffers from where the stream stopped filling them.
        let mut skip = got;
        let mut n_this = 0usize;
        for b in bufs.iter_mut() {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            let dst = &mut b[skip..];
            skip = 0;
            match vs.poll_read(cx, dst) {
                Poll::Ready(Ok(0)) => {
                    got += n_this;
                    return Poll::Ready(Ok(true));
                }
                Poll::Ready(Ok(n)) => {
                    n_this += n;
                    if n < dst.len() {
                        break;
                    }
                }
                Poll::Ready(Err(e)) => {
                    got += n_this;
                    if got > 0 {
                        return Poll::Ready(Ok(true));
                    }
                    return Poll::Ready(Err(io_errno(e)));
                }
                Poll::Pending => break,
            }
        }
        got += n_this;
        if got == total || (got > 0 && !waitall) {
            Poll::Ready(Ok(false))
        } else {
            Poll::Pending
        }
    });
    match r {
        Ok(_) => Ok(got),
        // Bytes already taken are the program's, whatever stopped the wait for more: TCP
        // returns what it copied when a signal or the timeout comes (tcp_recvmsg).
        Err(libc::EAGAIN | libc::EINTR) if got > 0 => Ok(got),
        Err(e) => Err(e),
    }
}

fn scatter(bufs: &mut [&mut [u8]], mut src: &[u8]) {
    for b in bufs.iter_mut() {
        if src.is_empty() {
            break;
        }
        let n = b.len().min(src.len());
        b[..n].copy_from_slice(&src[..n]);
        src = &src[n..];
    }
}

/// send(2) family from `bufs`. A blocking socket sends everything (or fails); a
/// non-blocking one what fits now.
pub(crate) fn send(obj: &Obj, bufs: &[&[u8]], flags: c_int) -> Result<usize, c_int> {
    obj.usable("send")?;
    let vs = stream(obj)?;
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if total == 0 {
        return Ok(0);
    }
    let nonblock = obj.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
    let timeout = obj.st().sndtimeo;
    let mut sent = 0usize;
    let r = block_on(obj, nonblock, timeout, None, |cx| {
        while sent < total {
            let piece = bytes::Bytes::from(gather(bufs, sent, CHUNK.min(total - sent)));
            match vs.poll_write_owned(cx, &piece) {
                Poll::Ready(Ok(n)) => sent += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(io_errno(e))),
                Poll::Pending => {
                    return if sent > 0 && nonblock {
                        Poll::Ready(Ok(()))
                    } else {
                        Poll::Pending
                    };
                }
            }
        }
        Poll::Ready(Ok(()))
    });
    match r {
        Ok(()) => Ok(sent),
        // As TCP's sendmsg: what was sent before a signal or the timeout is counted (an
        // EINTR would have the program send it again).
        Err(libc::EAGAIN | libc::EINTR) if sent > 0 => Ok(sent),
        Err(libc::EPIPE) => {
            if flags & libc::MSG_NOSIGNAL == 0 {
                // SAFETY: raising a signal on this thread, as the kernel does for EPIPE.
                unsafe { libc::raise(libc::SIGPIPE) };
            }
            Err(libc::EPIPE)
        }
        Err(e) => Err(e),
    }
}

/// accept4(2) on a listener: a queued virtual connection first, else the kernel's.
pub(crate) fn accept(
    obj: &Obj,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> Result<c_int, c_int> {
    obj.usable("accept")?;
    let Kind::Listener { real, .. } = &obj.kind else {
        return Err(libc::EINVAL);
    };
    let kfd = real.as_raw_fd();
    let nonblock = obj.nonblock.load(Ordering::Relaxed);
    block_on(obj, nonblock, None, Some(kfd), |cx| {
        if let Some(g) = obj.virt()
            && let Some(l) = g.as_ref()
        {
            match l.poll_accept(cx) {
                Poll::Ready(Ok(vs)) => {
                    return Poll::Ready(match adopt(vs, addr, len, flags) {
                        Ok(fd) => Ok(fd),
                        // No descriptor for it (EMFILE, ENFILE): the connection goes back
                        // to the head of the queue, as TCP leaves it queued, and the
                        // program sees the errno.
                        Err((e, vs)) => {
                            l.requeue(vs);
                            Err(e)
                        }
                    });
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(io_errno(e))),
                Poll::Pending => {}
            }
        }
        let acc =
            real!(accept4: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t, c_int) -> c_int);
        // SAFETY: `addr`/`len` are the program's (null or valid, its contract with accept).
        let n = unsafe { acc(kfd, addr, len, flags) };
        if n >= 0 {
            return Poll::Ready(Ok(n));
        }
        match sys::errno() {
            libc::EAGAIN => Poll::Pending,
            e => Poll::Ready(Err(e)),
        }
    })
}

/// A descriptor for an accepted virtual socket. Both descriptors it needs (the socket's
/// eventfd and the program's number for it) are made before the socket is wrapped, so when
/// either cannot be, the socket is handed back untouched.
fn adopt(
    vs: netchannel::VSocket,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> Result<c_int, (c_int, netchannel::VSocket)> {
    let efd = match sys::eventfd() {
        Ok(f) => f,
        Err(e) => return Err((io_errno(e), vs)),
    };
    let fd = match program_fd(efd.as_raw_fd()) {
        Ok(fd) => fd,
        Err(e) => return Err((e, vs)),
    };
    let peer = std::net::SocketAddr::new(vs.peer_addr().ip(), vs.peer_port());
    let local = std::net::SocketAddr::new(
        state::settings()
            .listen
            .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |l| l.ip()),
        vs.local_port(),
    );
    let obj = Obj::with_wake(
        Kind::Stream { vs, local, peer },
        efd,
        flags & libc::SOCK_NONBLOCK != 0,
        flags & libc::SOCK_CLOEXEC != 0,
    );
    if state::settings().verbose {
        sys::say(&format!("fd {fd}: accepted virtual connection from {peer}"));
    }
    // SAFETY: `addr`/`len` are the program's (null or valid, its contract with accept).
    unsafe { crate::addr::write(peer, addr, len) };
    state::insert(fd, obj);
    Ok(fd)
}

/// The program's descriptor for a virtual socket: a close-on-exec dup (see [`Obj::cloexec`])
/// of its eventfd `efd`, the lowest number free (as socket(2) and accept(2) give), at any
/// height: numbers past the bitmap are looked up in the table.
fn program_fd(efd: c_int) -> Result<c_int, c_int> {
    let fcntl = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
    // SAFETY: F_DUPFD_CLOEXEC takes an int and returns a new descriptor or -1.
    let fd = unsafe { fcntl(efd, libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Err(sys::errno());
    }
    Ok(fd)
}

/// Readiness as poll(2) bits.
pub(crate) fn poll_bits(obj: &Obj) -> libc::c_short {
    let ev = epoll::events_of(obj);
    let mut p = 0;
    if ev & libc::EPOLLIN as u32 != 0 {
        p |= libc::POLLIN | libc::POLLRDNORM;
    }
    if ev & libc::EPOLLOUT as u32 != 0 {
        p |= libc::POLLOUT | libc::POLLWRNORM;
    }
    if ev & libc::EPOLLRDHUP as u32 != 0 {
        p |= libc::POLLRDHUP;
    }
    if ev & libc::EPOLLERR as u32 != 0 {
        p |= libc::POLLERR;
    }
    if ev & libc::EPOLLHUP as u32 != 0 {
        p |= libc::POLLHUP;
    }
    p
}
