//! The interposed waits: poll, ppoll, select, pselect and the epoll calls (their fortified
//! glibc names too). Each goes straight to the C library unless a virtual socket is among
//! the descriptors waited on.

use crate::ret;
use crate::sys::real;
use crate::{epoll, poll, state};
use libc::{c_int, size_t};
use std::time::Duration;

fn ms(timeout: c_int) -> Option<Duration> {
    (timeout >= 0).then(|| Duration::from_millis(timeout as u64))
}

fn ts(t: *const libc::timespec) -> Option<Duration> {
    if t.is_null() {
        return None;
    }
    // SAFETY: a non-null timespec from the program.
    let t = unsafe { &*t };
    Some(Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    ))
}

/// # Safety
/// `fds` valid for `n` entries.
unsafe fn any_ours(fds: *const libc::pollfd, n: libc::nfds_t) -> bool {
    if fds.is_null() {
        return false;
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(fds, n as usize) };
    s.iter().any(|p| state::is_ours(p.fd))
}

/// # Safety
/// The C prototype of poll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the program's array.
    if !unsafe { any_ours(fds, n) } {
        let f = real!(poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fds, n, timeout) };
    }
    // SAFETY: the program's array of `n` entries.
    let s = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    poll::poll(s, ms(timeout), std::ptr::null())
}

/// # Safety
/// glibc's fortified poll.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    if (fdslen / std::mem::size_of::<libc::pollfd>()) < n as usize {
        // SAFETY: what glibc does on this overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: forwarded.
    unsafe { poll(fds, n, timeout) }
}

/// # Safety
/// The C prototype of ppoll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the program's array.
    if !unsafe { any_ours(fds, n) } {
        let f = real!(ppoll: fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(fds, n, t, mask) };
    }
    // SAFETY: the program's array of `n` entries.
    let s = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    poll::poll(s, ts(t), mask)
}

/// # Safety
/// glibc's fortified ppoll.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
    fdslen: size_t,
) -> c_int {
    if (fdslen / std::mem::size_of::<libc::pollfd>()) < n as usize {
        // SAFETY: what glibc does on this overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: forwarded.
    unsafe { ppoll(fds, n, t, mask) }
}

/// # Safety
/// Sets null or valid for `nfds` bits.
unsafe fn sets_have_ours(nfds: c_int, sets: [*mut libc::fd_set; 3]) -> bool {
    (0..nfds.clamp(0, libc::FD_SETSIZE as c_int)).any(|fd| {
        state::is_ours(fd)
            // SAFETY: each set is null or valid (the caller's contract).
            && sets.iter().any(|s| !s.is_null() && unsafe { libc::FD_ISSET(fd, *s) })
    })
}

/// # Safety
/// The C prototype of select(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: the program's sets.
    if !unsafe { sets_have_ours(nfds, [r, w, e]) } {
        let f = real!(select: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(nfds, r, w, e, t) };
    }
    let timeout = (!t.is_null()).then(|| {
        // SAFETY: a non-null timeval from the program.
        let tv = unsafe { &*t };
        Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64)
    });
    // SAFETY: the program's sets.
    unsafe { poll::select(nfds, r, w, e, timeout, std::ptr::null()) }
}

/// # Safety
/// The C prototype of pselect(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the program's sets.
    if !unsafe { sets_have_ours(nfds, [r, w, e]) } {
        let f = real!(pselect: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const libc::timespec, *const libc::sigset_t) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(nfds, r, w, e, t, mask) };
    }
    // SAFETY: the program's sets.
    unsafe { poll::select(nfds, r, w, e, ts(t), mask) }
}

/// # Safety
/// The C prototype of epoll_ctl(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    match state::get(fd) {
        Some(o) => {
            // SAFETY: `ev` null or valid (epoll_ctl's contract).
            let e = unsafe { ev.as_ref() };
            ret(epoll::ctl(epfd, op, fd, o, e).map(|()| 0)) as c_int
        }
        None => {
            let f = real!(epoll_ctl: fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int);
            // SAFETY: forwarded unchanged.
            unsafe { f(epfd, op, fd, ev) }
        }
    }
}

/// # Safety
/// The C prototype of epoll_wait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if !state::epoll_is_ours(epfd) {
        let f = real!(epoll_wait: fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(epfd, ev, max, timeout) };
    }
    let ns = if timeout < 0 {
        -1
    } else {
        i64::from(timeout) * 1_000_000
    };
    // SAFETY: `ev` valid for `max` entries (epoll_wait's contract).
    unsafe { epoll::wait(epfd, ev, max, ns, epoll::Waiter::Wait) }
}

/// # Safety
/// The C prototype of epoll_pwait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if !state::epoll_is_ours(epfd) {
        let f = real!(epoll_pwait: fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(epfd, ev, max, timeout, mask) };
    }
    let ns = if timeout < 0 {
        -1
    } else {
        i64::from(timeout) * 1_000_000
    };
    // SAFETY: `ev` valid for `max` entries.
    unsafe { epoll::wait(epfd, ev, max, ns, epoll::Waiter::Pwait(mask)) }
}

/// # Safety
/// The C prototype of epoll_pwait2(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !state::epoll_is_ours(epfd) {
        let f = real!(epoll_pwait2: fn(c_int, *mut libc::epoll_event, c_int, *const libc::timespec, *const libc::sigset_t) -> c_int);
        // SAFETY: forwarded unchanged.
        return unsafe { f(epfd, ev, max, t, mask) };
    }
    let ns = ts(t).map_or(-1, |d| d.as_nanos().min(i64::MAX as u128) as i64);
    // SAFETY: `ev` valid for `max` entries.
    unsafe { epoll::wait(epfd, ev, max, ns, epoll::Waiter::Pwait2(mask)) }
}
