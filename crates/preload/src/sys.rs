//! The C library's own definitions of the calls this library interposes, found with
//! `dlsym(RTLD_NEXT)`, and small helpers over them. Every call the library makes for itself
//! goes through these, never through its own hooks.

use libc::{c_int, c_void};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Looks up the next definition of `name` (NUL-terminated) after this library.
pub(crate) fn resolve(cache: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = cache.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated byte string with static lifetime; dlsym only reads it.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if f == 0 {
        let msg = b"netsteer-preload: the C library has no definition of an interposed call\n";
        // SAFETY: writes a static buffer to stderr; abort ends the process (nothing to call).
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    cache.store(f, Ordering::Relaxed);
    f
}

/// `real!(name: fn(args) -> ret)`: the C library's `name`, as a function pointer.
macro_rules! real {
    ($name:ident : fn($($a:ty),*) -> $r:ty) => {{
        static CACHE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::sys::resolve(&CACHE, concat!(stringify!($name), "\0").as_bytes());
        // SAFETY: `p` is the address dlsym gave for this symbol, whose C prototype is the
        // one written here (man 2 / glibc headers); a function pointer and usize have the
        // same size on Linux.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($a),*) -> $r>(p) }
    }};
}
pub(crate) use real;

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

pub(crate) fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The errno a user of a socket would see for `e`.
pub(crate) fn errno_of(e: &io::Error) -> c_int {
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    use io::ErrorKind::*;
    match e.kind() {
        WouldBlock => libc::EAGAIN,
        BrokenPipe => libc::EPIPE,
        ConnectionReset => libc::ECONNRESET,
        ConnectionRefused => libc::ECONNREFUSED,
        ConnectionAborted => libc::ECONNABORTED,
        NotConnected => libc::ENOTCONN,
        TimedOut => libc::ETIMEDOUT,
        AddrInUse => libc::EADDRINUSE,
        AddrNotAvailable => libc::EADDRNOTAVAIL,
        InvalidInput => libc::EINVAL,
        InvalidData => libc::EPROTO,
        Interrupted => libc::EINTR,
        _ => libc::EIO,
    }
}

/// One line on stderr, written with one write(2) (no allocation-free guarantee is needed:
/// this runs only on unsupported use and start-up failures).
pub(crate) fn say(msg: &str) {
    let line = format!("netsteer-preload[{}]: {msg}\n", std::process::id());
    let write = real!(write: fn(c_int, *const c_void, usize) -> isize);
    // SAFETY: the buffer is valid for its length for the duration of the call.
    unsafe { write(2, line.as_ptr().cast(), line.len()) };
}

pub(crate) fn eventfd() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain system call; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    let own = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    Ok(move_high(own))
}

/// Moves a descriptor of the library's own to the upper half of the descriptor limit, out
/// of the range a program sizes its tables by (wrk's event loop takes 10 + 3 per
/// connection, and a kernel socket is one descriptor where a virtual one is two). Stays
/// where it is when the limit is small or the upper half is full.
pub(crate) fn move_high(own: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is valid for writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } != 0 || lim.rlim_cur < 512 {
        return own;
    }
    let base = (lim.rlim_cur / 2).min(c_int::MAX as u64) as libc::c_long;
    let fcntl = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1.
    let n = unsafe { fcntl(own.as_raw_fd(), libc::F_DUPFD_CLOEXEC, base) };
    if n < 0 {
        return own;
    }
    // SAFETY: `n` is a new descriptor owned by nobody else; `own` is closed on return.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(n) }
}

/// Reads an eventfd's counter away (it is non-blocking): a waiter that woke looks again.
pub(crate) fn drain(fd: c_int) {
    let mut v = 0u64;
    let read = real!(read: fn(c_int, *mut c_void, usize) -> isize);
    // SAFETY: `v` is 8 writable bytes, the size an eventfd read takes.
    unsafe { read(fd, (&raw mut v).cast(), 8) };
}

/// Adds one to an eventfd: wakes whoever polls it.
pub(crate) fn kick(fd: c_int) {
    let v = 1u64;
    let write = real!(write: fn(c_int, *const c_void, usize) -> isize);
    // SAFETY: `v` is 8 readable bytes, the size an eventfd write takes.
    unsafe { write(fd, (&raw const v).cast(), 8) };
}

/// Polls `fds` for POLLIN until one is readable or `timeout_ms` (-1: none) passes.
/// Err(EINTR) when a signal came.
pub(crate) fn wait_readable(fds: &[c_int], timeout_ms: c_int) -> Result<(), c_int> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let poll = real!(poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
    // SAFETY: `p` is a valid array of `p.len()` pollfd structs.
    let n = unsafe { poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        return Err(errno());
    }
    Ok(())
}

/// Whether a wait a signal interrupted is to be restarted when which signal came is not
/// known (its handler was installed past the library's calls, see [`crate::signals`]): yes
/// when every signal with a handler has SA_RESTART, so a program whose handlers all ask for
/// restarts never sees EINTR from a virtual socket, as it never does from TCP. glibc's
/// internal signals cannot be queried (sigaction answers EINVAL) and are passed over.
pub(crate) fn signals_restart() -> bool {
    let sigaction =
        real!(sigaction: fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int);
    let rtmax = libc::SIGRTMAX();
    for sig in 1..=rtmax {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: a zeroed sigaction is a valid out-parameter; a null `act` only queries.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { sigaction(sig, std::ptr::null(), &raw mut old) } != 0 {
            continue;
        }
        if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        if old.sa_flags & libc::SA_RESTART == 0 {
            return false;
        }
    }
    // No handler at all (a stop and continue, a tracer): the kernel restarts those too.
    true
}

/// getsockopt for an int-sized option of a real socket.
pub(crate) fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    let get =
        real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut libc::socklen_t) -> c_int);
    // SAFETY: `v` and `len` are valid for writes of their sizes.
    let r = unsafe { get(fd, level, name, (&raw mut v).cast(), &raw mut len) };
    (r == 0).then_some(v)
}
