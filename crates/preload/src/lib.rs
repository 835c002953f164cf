//! # netsteer-preload
//!
//! Loaded with `LD_PRELOAD` by `netsteer netchannel run`, this library carries the TCP
//! sockets an unmodified program opens to (or listens on) chosen ports over netchannel
//! virtual sockets, inside the program's own process: the OpenOnload way, without the two
//! extra processes and thread hand-offs of the proxy pair.
//!
//! * **Which sockets**: a `connect` to a chosen port on the host of a configured peer, and a
//!   `listen` on a chosen port when this process accepts channels ([`config`]). Everything
//!   else, and every call on other descriptors, goes straight to the C library (one atomic
//!   load decides).
//! * **What the program holds**: a descriptor that is an eventfd, so its number is a real
//!   one and the kernel's poll and epoll can watch it; the library keeps the eventfd
//!   readable-when-changed and translates readiness ([`epoll`], [`poll`]).
//! * **Listeners** keep their kernel socket: plain TCP clients still connect, and accept
//!   hands out whichever connection came.
//! * **fork**: a child never touches the virtual sockets it inherited (see [`state`]); it
//!   may close them, and is told on stderr, with the call named, if it tries anything else.
//! * **Signals**: the calls that install handlers (sigaction, signal and their kin) put a
//!   trampoline in front of each that notes which signal came, so a blocking call whose
//!   wait a signal interrupted restarts when that signal's handler has SA_RESTART and the
//!   socket no timeout, as the kernel restarts a TCP call ([`signals`]).
//! * **Refusals**: a connect whose session the peer refuses (any of its caps) goes over plain
//!   TCP instead, or with `NETSTEER_NC_FALLBACK=0` fails with ECONNREFUSED, with a line on
//!   stderr either way; a process that accepts channels says which cap it refused peers by
//!   (at most a line a second), and takes `NETSTEER_NC_SESSIONS_PER_PEER` sessions from one
//!   address (4 by default: one a client process, so a host's prefork workers each need one).
//! * **Unsupported use** (an option, fcntl or ioctl the library does not know) is refused
//!   with an errno and a line on stderr naming the call, never answered with wrong data.
//!   Not interposed: io_uring, splice, and raw `syscall(2)`; a program that reads a virtual
//!   socket's descriptor through them reads the eventfd.

pub use netchannel::preload_env as config;

mod addr;
mod epoll;
mod io;
mod poll;
mod signals;
mod sock;
mod state;
mod sys;
mod wait_hooks;

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use sys::{real, set_errno};

/// Runs once when the library is loaded.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn init() {
    state::init();
    let _ = state::settings();
    let _ = state::extra();
}

// Not in the unit-test binary: that program runs without settings (and its own reads and
// writes pass through the hooks untouched, as any program's other descriptors do).
#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

fn ret<T: Into<i64>>(r: Result<T, c_int>) -> i64 {
    match r {
        Ok(v) => v.into(),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// # Safety
/// `iov` valid for `n` iovecs, each valid for its length.
unsafe fn slices_mut<'a>(iov: *const iovec, n: c_int) -> Result<Vec<&'a mut [u8]>, c_int> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n > 0 && iov.is_null() {
        return Err(libc::EFAULT);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: `iov` has `n` entries (the caller's contract).
        let e = unsafe { &*iov.add(i) };
        if e.iov_len == 0 {
            continue;
        }
        // SAFETY: each iovec is valid for its length (the caller's contract).
        v.push(unsafe { std::slice::from_raw_parts_mut(e.iov_base.cast::<u8>(), e.iov_len) });
    }
    Ok(v)
}

/// # Safety
/// As [`slices_mut`].
unsafe fn slices<'a>(iov: *const iovec, n: c_int) -> Result<Vec<&'a [u8]>, c_int> {
    // SAFETY: forwarded.
    Ok(unsafe { slices_mut(iov, n) }?
        .into_iter()
        .map(|s| &*s)
        .collect())
}

/// # Safety
/// `buf` valid for `n` bytes.
unsafe fn one_mut<'a>(buf: *mut c_void, n: size_t) -> Result<Vec<&'a mut [u8]>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(vec![unsafe {
        std::slice::from_raw_parts_mut(buf.cast::<u8>(), n)
    }])
}

/// # Safety
/// `buf` valid for `n` bytes.
unsafe fn one<'a>(buf: *const c_void, n: size_t) -> Result<Vec<&'a [u8]>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(vec![unsafe {
        std::slice::from_raw_parts(buf.cast::<u8>(), n)
    }])
}

fn recv_on(fd: c_int, bufs: Result<Vec<&mut [u8]>, c_int>, flags: c_int) -> ssize_t {
    let r = state::get(fd)
        .ok_or(libc::EBADF)
        .and_then(|o| io::recv(&o, &mut bufs?, flags));
    ret(r.map(|n| n as i64)) as ssize_t
}

fn send_on(fd: c_int, bufs: Result<Vec<&[u8]>, c_int>, flags: c_int) -> ssize_t {
    let r = state::get(fd)
        .ok_or(libc::EBADF)
        .and_then(|o| io::send(&o, &bufs?, flags));
    ret(r.map(|n| n as i64)) as ssize_t
}

// ---- connect, listen, accept ----

/// # Safety
/// The C prototype of connect(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, len: socklen_t) -> c_int {
    if !state::is_ours(fd) {
        // SAFETY: the program's arguments (valid per connect's contract).
        if let Some(to) = unsafe { addr::read(a, len) } {
            match sock::connect(fd, to) {
                Ok(Some(())) => return 0,
                Ok(None) => {}
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            }
        }
        let f = real!(connect: fn(c_int, *const sockaddr, socklen_t) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, a, len) };
    }
    // Already connected (or a listener), or connecting: as TCP answers a second connect.
    let e = match state::get(fd).as_deref().map(|o| &o.kind) {
        Some(state::Kind::Connecting { done, .. }) => match done.get() {
            None => libc::EALREADY,
            Some(Err(e)) => *e,
            Some(Ok(_)) => libc::EISCONN,
        },
        _ => libc::EISCONN,
    };
    set_errno(e);
    -1
}

/// # Safety
/// The C prototype of listen(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    if let Some(o) = state::get(fd) {
        if let state::Kind::Listener { real, .. } = &o.kind {
            let f = real!(listen: fn(c_int, c_int) -> c_int);
            // SAFETY: plain system call on the hidden kernel listener.
            return unsafe { f(std::os::fd::AsRawFd::as_raw_fd(real), backlog) };
        }
        set_errno(libc::EINVAL);
        return -1;
    }
    match sock::listen(fd, backlog) {
        Ok(Some(())) => 0,
        Ok(None) => {
            let f = real!(listen: fn(c_int, c_int) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(fd, backlog) }
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// # Safety
/// The C prototype of accept4(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    a: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    match state::get(fd) {
        Some(o) => ret(io::accept(&o, a, len, flags)) as c_int,
        None => {
            let f = real!(accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(fd, a, len, flags) }
        }
    }
}

/// # Safety
/// The C prototype of accept(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match state::get(fd) {
        Some(o) => ret(io::accept(&o, a, len, 0)) as c_int,
        None => {
            let f = real!(accept: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(fd, a, len) }
        }
    }
}

// ---- reads ----

/// # Safety
/// The C prototype of read(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, buf, n) };
    }
    // SAFETY: the program's buffer, valid for `n` bytes.
    recv_on(fd, unsafe { one_mut(buf, n) }, 0)
}

/// # Safety
/// glibc's fortified read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: what glibc does on this overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: forwarded.
    unsafe { read(fd, buf, n) }
}

/// # Safety
/// The C prototype of readv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(readv: fn(c_int, *const iovec, c_int) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, iov, n) };
    }
    // SAFETY: the program's iovecs.
    recv_on(fd, unsafe { slices_mut(iov, n) }, 0)
}

/// # Safety
/// The C prototype of recv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, buf, n, flags) };
    }
    // SAFETY: the program's buffer.
    recv_on(fd, unsafe { one_mut(buf, n) }, flags)
}

/// # Safety
/// glibc's fortified recv.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n > buflen {
        // SAFETY: what glibc does on this overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: forwarded.
    unsafe { recv(fd, buf, n, flags) }
}

/// # Safety
/// The C prototype of recvfrom(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    from: *mut sockaddr,
    fromlen: *mut socklen_t,
) -> ssize_t {
    let Some(o) = state::get(fd) else {
        let f = real!(recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, buf, n, flags, from, fromlen) };
    };
    // SAFETY: the program's buffer.
    let r = recv_on(fd, unsafe { one_mut(buf, n) }, flags);
    if r >= 0 && !from.is_null() {
        // A connected TCP socket leaves the address alone; say its length is 0 as Linux does.
        // SAFETY: `fromlen` is valid when `from` is given (recvfrom's contract).
        unsafe {
            if !fromlen.is_null() {
                *fromlen = 0;
            }
        }
    }
    drop(o);
    r
}

/// # Safety
/// glibc's fortified recvfrom.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    from: *mut sockaddr,
    fromlen: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: what glibc does on this overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: forwarded.
    unsafe { recvfrom(fd, buf, n, flags, from, fromlen) }
}

/// # Safety
/// The C prototype of recvmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, msg, flags) };
    }
    if msg.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `msg` is a valid msghdr (recvmsg's contract).
    let m = unsafe { &mut *msg };
    // SAFETY: its iovecs are valid.
    let r = recv_on(
        fd,
        unsafe { slices_mut(m.msg_iov, m.msg_iovlen as c_int) },
        flags,
    );
    if r >= 0 {
        m.msg_controllen = 0;
        m.msg_flags = 0;
        m.msg_namelen = 0;
    }
    r
}

// ---- writes ----

/// # Safety
/// The C prototype of write(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(write: fn(c_int, *const c_void, size_t) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, buf, n) };
    }
    // SAFETY: the program's buffer.
    send_on(fd, unsafe { one(buf, n) }, 0)
}

/// # Safety
/// The C prototype of writev(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(writev: fn(c_int, *const iovec, c_int) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, iov, n) };
    }
    // SAFETY: the program's iovecs.
    send_on(fd, unsafe { slices(iov, n) }, 0)
}

/// # Safety
/// The C prototype of send(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, buf, n, flags) };
    }
    // SAFETY: the program's buffer.
    send_on(fd, unsafe { one(buf, n) }, flags)
}

/// # Safety
/// The C prototype of sendto(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    to: *const sockaddr,
    tolen: socklen_t,
) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, buf, n, flags, to, tolen) };
    }
    if !to.is_null() {
        // A connected TCP socket refuses a destination.
        set_errno(libc::EISCONN);
        return -1;
    }
    // SAFETY: the program's buffer.
    send_on(fd, unsafe { one(buf, n) }, flags)
}

/// # Safety
/// The C prototype of sendmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if !state::is_ours(fd) {
        let f = real!(sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, msg, flags) };
    }
    if msg.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: `msg` is a valid msghdr (sendmsg's contract).
    let m = unsafe { &*msg };
    if m.msg_controllen > 0 {
        sys::say(&format!(
            "sendmsg(fd {fd}) with control messages is not supported on a netchannel socket; refused with EOPNOTSUPP"
        ));
        set_errno(libc::EOPNOTSUPP);
        return -1;
    }
    // SAFETY: its iovecs are valid.
    send_on(
        fd,
        unsafe { slices(m.msg_iov, m.msg_iovlen as c_int) },
        flags,
    )
}

/// sendfile(2) to a virtual socket: the file's bytes are read here and written to it.
///
/// # Safety
/// The C prototype of sendfile(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    in_fd: c_int,
    off: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    let Some(o) = state::get(out) else {
        let f = real!(sendfile: fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t);
        // SAFETY: forwarded unchanged.
        return unsafe { f(out, in_fd, off, count) };
    };
    // SAFETY: forwarded contract.
    ret(unsafe { sendfile_virtual(&o, in_fd, off, count) }) as ssize_t
}

/// # Safety
/// The C prototype of sendfile64(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    in_fd: c_int,
    off: *mut libc::off64_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: off_t and off64_t are the same type on 64-bit Linux.
    unsafe { sendfile(out, in_fd, off.cast(), count) }
}

/// # Safety
/// `off` null or valid.
unsafe fn sendfile_virtual(
    o: &state::Obj,
    in_fd: c_int,
    off: *mut libc::off_t,
    count: size_t,
) -> Result<i64, c_int> {
    const MAX: usize = 1 << 20;
    let start = if off.is_null() {
        let lseek = real!(lseek: fn(c_int, libc::off_t, c_int) -> libc::off_t);
        // SAFETY: plain system call.
        let p = unsafe { lseek(in_fd, 0, libc::SEEK_CUR) };
        if p < 0 {
            return Err(sys::errno());
        }
        p
    } else {
        // SAFETY: `off` is valid (the caller's contract).
        unsafe { *off }
    };
    let mut buf = vec![0u8; count.min(MAX)];
    let pread = real!(pread: fn(c_int, *mut c_void, size_t, libc::off_t) -> ssize_t);
    // SAFETY: `buf` is valid for its length.
    let got = unsafe { pread(in_fd, buf.as_mut_ptr().cast(), buf.len(), start) };
    if got < 0 {
        return Err(sys::errno());
    }
    let sent = io::send(o, &[&buf[..got as usize]], libc::MSG_NOSIGNAL)?;
    let end = start + sent as libc::off_t;
    if off.is_null() {
        let lseek = real!(lseek: fn(c_int, libc::off_t, c_int) -> libc::off_t);
        // SAFETY: plain system call.
        unsafe { lseek(in_fd, end, libc::SEEK_SET) };
    } else {
        // SAFETY: `off` is valid.
        unsafe { *off = end };
    }
    Ok(sent as i64)
}

// ---- describing and configuring ----

/// # Safety
/// The C prototype of shutdown(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    match state::get(fd) {
        Some(o) => ret(sock::shutdown(&o, how).map(|()| 0)) as c_int,
        None => {
            let f = real!(shutdown: fn(c_int, c_int) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(fd, how) }
        }
    }
}

/// # Safety
/// The C prototype of close(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if state::is_ours(fd) {
        return sock::close(fd);
    }
    if state::epoll_is_ours(fd) {
        epoll::forget_set(fd);
    }
    let f = real!(close: fn(c_int) -> c_int);
    // SAFETY: forwarded unchanged.
    unsafe { f(fd) }
}

/// close_range(2) (glibc 2.34): every virtual socket and epoll set in the range stops being
/// one before the kernel closes the numbers, so a file opened later on a number is the
/// file's (CPython's `os.closerange` and `subprocess` close descriptors this way; before,
/// the library still took such a number for a virtual socket and sent the file's writes to
/// the peer). With CLOSE_RANGE_CLOEXEC nothing closes: the flag is recorded as F_SETFD would.
///
/// # Safety
/// The C prototype of close_range(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: c_int,
) -> c_int {
    const UNSHARE: c_int = 1 << 1;
    const CLOEXEC: c_int = 1 << 2;
    let f = real!(close_range: fn(libc::c_uint, libc::c_uint, c_int) -> c_int);
    if first <= last && flags & !(UNSHARE | CLOEXEC) == 0 {
        let (lo, hi) = (
            first.min(c_int::MAX as libc::c_uint) as c_int,
            last.min(c_int::MAX as libc::c_uint) as c_int,
        );
        if flags & CLOEXEC != 0 {
            sock::mark_cloexec_range(lo, hi);
        } else {
            sock::forget_range(lo, hi);
        }
    }
    // SAFETY: forwarded unchanged.
    unsafe { f(first, last, flags) }
}

/// closefrom(3) (glibc 2.34): as [`close_range`] from `low` up.
///
/// # Safety
/// The C prototype of closefrom(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closefrom(low: c_int) {
    if low >= 0 {
        sock::forget_range(low, c_int::MAX);
    }
    let f = real!(closefrom: fn(c_int) -> ());
    // SAFETY: forwarded unchanged.
    unsafe { f(low) }
}

/// fdopen(3) on a virtual socket is refused, loudly: the C library's stdio reads and writes
/// through its own internal calls, which no preload sees, so a FILE on it would read and write
/// the eventfd behind the number (before: `fwrite` + `fflush` succeeded and nothing arrived).
///
/// # Safety
/// The C prototype of fdopen(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const libc::c_char) -> *mut libc::FILE {
    if state::is_ours(fd) {
        sys::say(&format!(
            "fdopen(fd {fd}) on a netchannel socket: stdio bypasses the library's calls, so \
             a FILE on it would lose data; refused with EOPNOTSUPP (use read/write/send/recv)"
        ));
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    let f = real!(fdopen: fn(c_int, *const libc::c_char) -> *mut libc::FILE);
    // SAFETY: forwarded unchanged.
    unsafe { f(fd, mode) }
}

/// # Safety
/// The C prototype of getsockname(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, a: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match state::get(fd) {
        Some(o) => ret(sock::name(&o, false, a, len).map(|()| 0)) as c_int,
        None => {
            let f = real!(getsockname: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(fd, a, len) }
        }
    }
}

/// # Safety
/// The C prototype of getpeername(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, a: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match state::get(fd) {
        Some(o) => ret(sock::name(&o, true, a, len).map(|()| 0)) as c_int,
        None => {
            let f = real!(getpeername: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(fd, a, len) }
        }
    }
}

/// # Safety
/// The C prototype of setsockopt(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let Some(o) = state::get(fd) else {
        let f = real!(setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, level, name, val, len) };
    };
    if val.is_null() && len > 0 {
        set_errno(libc::EFAULT);
        return -1;
    }
    let v = if len == 0 {
        &[][..]
    } else {
        // SAFETY: `val` is valid for `len` bytes (setsockopt's contract).
        unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len as usize) }
    };
    ret(sock::setsockopt(fd, &o, level, name, v).map(|()| 0)) as c_int
}

/// # Safety
/// The C prototype of getsockopt(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let Some(o) = state::get(fd) else {
        let f = real!(getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, level, name, val, len) };
    };
    if val.is_null() || len.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    match sock::getsockopt(fd, &o, level, name) {
        Ok(v) => {
            // SAFETY: `len` valid, `val` valid for `*len` bytes (getsockopt's contract).
            unsafe {
                let n = (*len as usize).min(v.len());
                std::ptr::copy_nonoverlapping(v.as_ptr(), val.cast::<u8>(), n);
                *len = n as socklen_t;
            }
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// fcntl(2). Its third argument is variadic in C; on x86-64 and aarch64 Linux a variadic
/// integer or pointer travels exactly as a named one, so it is taken as a `c_long`.
///
/// # Safety
/// The C prototype of fcntl(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: libc::c_long) -> c_int {
    match state::get(fd) {
        Some(o) => ret(sock::fcntl(fd, &o, cmd, arg)) as c_int,
        None => {
            let f = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
            // SAFETY: forwarded unchanged (see the ABI note above).
            let n = unsafe { f(fd, cmd, arg) };
            if n >= 0 && matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) {
                epoll::dup_set(fd, n);
            }
            n
        }
    }
}

/// # Safety
/// As [`fcntl`] (glibc's name for it under 64-bit file offsets).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_long) -> c_int {
    match state::get(fd) {
        Some(o) => ret(sock::fcntl(fd, &o, cmd, arg)) as c_int,
        None => {
            let f = real!(fcntl64: fn(c_int, c_int, libc::c_long) -> c_int);
            // SAFETY: forwarded unchanged (see the ABI note on `fcntl`).
            let n = unsafe { f(fd, cmd, arg) };
            if n >= 0 && matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) {
                epoll::dup_set(fd, n);
            }
            n
        }
    }
}

/// ioctl(2); the variadic argument as for [`fcntl`].
///
/// # Safety
/// The C prototype of ioctl(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    match state::get(fd) {
        // SAFETY: `arg` is what `req` takes (the caller's contract).
        Some(o) => ret(unsafe { sock::ioctl(fd, &o, req, arg) }) as c_int,
        None => {
            let f = real!(ioctl: fn(c_int, libc::c_ulong, usize) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(fd, req, arg) }
        }
    }
}

/// # Safety
/// The C prototype of dup(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let Some(o) = state::get(fd) else {
        let f = real!(dup: fn(c_int) -> c_int);
        // SAFETY: forwarded unchanged.
        let n = unsafe { f(fd) };
        if n >= 0 {
            epoll::dup_set(fd, n);
        }
        return n;
    };
    // The copy of a virtual socket's descriptor is close-on-exec too (see `Obj::cloexec`).
    let f = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
    // SAFETY: F_DUPFD_CLOEXEC on the program's descriptor.
    let n = unsafe { f(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if n >= 0 {
        sock::dup_to(o, n);
    }
    n
}

/// # Safety
/// The C prototype of dup3(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let o = state::get(old);
    let getfd = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
    // Only a `new` that is ours needs forgetting: a program's other dup2s (a shell's stdio
    // redirections) cost one bitmap load here, as before. A closed `old` fails the dup3
    // without closing `new`, so `new` is forgotten only when it will be closed.
    let ours = old != new && (state::is_ours(new) || state::epoll_is_ours(new));
    // SAFETY: F_GETFD only reads the descriptor's flags.
    if ours && unsafe { getfd(old, libc::F_GETFD, 0) } >= 0 {
        // dup3 closes `new` first: so does the library, for a virtual socket and for an
        // epoll set (whose registrations would otherwise answer under the old set's data:
        // a freed pointer in a real event loop).
        sock::forget_range(new, new);
    }
    let f = real!(dup3: fn(c_int, c_int, c_int) -> c_int);
    // A virtual socket's copy is close-on-exec too (see `Obj::cloexec`).
    let flags = if o.is_some() {
        flags | libc::O_CLOEXEC
    } else {
        flags
    };
    // SAFETY: forwarded (with O_CLOEXEC for a virtual socket).
    let n = unsafe { f(old, new, flags) };
    if n >= 0 {
        match o {
            Some(o) => sock::dup_to(o, n),
            None => epoll::dup_set(old, n),
        }
    }
    n
}

/// # Safety
/// The C prototype of dup2(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        let f = real!(dup2: fn(c_int, c_int) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(old, new) };
    }
    // SAFETY: the same call with no flags.
    unsafe { dup3(old, new, 0) }
}
