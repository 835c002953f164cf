//! poll/ppoll/select/pselect over descriptors some of which are virtual sockets: their
//! readiness comes from the library, their eventfds (and a listener's kernel socket) stand in
//! for them in the kernel's poll so a change wakes the wait.

use crate::state::{self, Kind};
use crate::sys::{self, real};
use libc::{c_int, pollfd};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// poll over `fds`; `timeout` None waits for ever. Returns the count poll(2) would, or -1
/// with errno set.
pub(crate) fn poll(
    fds: &mut [pollfd],
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> c_int {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        // Ours first: each asked (leaving its waker), ready ones counted.
        let mut ours_ready = 0;
        let mut objs = Vec::new();
        for (i, p) in fds.iter_mut().enumerate() {
            p.revents = 0;
            if let Some(obj) = state::get(p.fd) {
                if obj.usable("poll").is_err() {
                    p.revents = libc::POLLNVAL;
                    ours_ready += 1;
                    continue;
                }
                let want = p.events | libc::POLLERR | libc::POLLHUP;
                p.revents = crate::io::poll_bits(&obj) & want;
                if p.revents != 0 {
                    ours_ready += 1;
                }
                objs.push((i, obj));
            }
        }
        // The kernel's part: the program's other descriptors as given, ours as their
        // eventfd (and kernel listener) for POLLIN.
        let mut k: Vec<pollfd> = Vec::with_capacity(fds.len() + 1);
        let mut origin: Vec<Option<usize>> = Vec::with_capacity(fds.len() + 1);
        for (i, p) in fds.iter().enumerate() {
            if objs.iter().any(|(j, _)| *j == i) {
                continue;
            }
            k.push(pollfd {
                fd: p.fd,
                events: p.events,
                revents: 0,
            });
            origin.push(Some(i));
        }
        for (_, obj) in &objs {
            k.push(pollfd {
                fd: obj.efd(),
                events: libc::POLLIN,
                revents: 0,
            });
            origin.push(None);
            if let Kind::Listener { real, .. } = &obj.kind {
                k.push(pollfd {
                    fd: real.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                origin.push(None);
            }
        }
        // The endpoint's channels: an arrival wakes this wait, which reads it here.
        let driver = if objs.is_empty() {
            None
        } else {
            state::driver()
        };
        let chans = driver.as_ref().map(|d| d.channels()).unwrap_or_default();
        let chan_start = k.len();
        for c in &chans {
            k.push(pollfd {
                fd: c.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let wait = if ours_ready > 0 {
            Some(Duration::ZERO)
        } else {
            deadline.map(|d| d.saturating_duration_since(Instant::now()))
        };
        let ts = wait.map(|w| libc::timespec {
            tv_sec: w.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(w.subsec_nanos() as i32),
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        let ppoll = real!(ppoll: fn(*mut pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int);
        let waiting = netchannel::watch(&chans);
        // SAFETY: `k` is a valid array; `tsp` null or `ts`; `mask` the program's.
        let n = unsafe { ppoll(k.as_mut_ptr(), k.len() as libc::nfds_t, tsp, mask) };
        drop(waiting);
        if n < 0 {
            if ours_ready > 0 {
                return ours_ready;
            }
            return -1;
        }
        let mut theirs = 0;
        let mut woke = false;
        for (p, o) in k.iter().zip(&origin) {
            match o {
                Some(i) => {
                    fds[*i].revents = p.revents;
                    if p.revents != 0 {
                        theirs += 1;
                    }
                }
                None if p.revents != 0 => {
                    woke = true;
                    sys::drain(p.fd);
                }
                None => {}
            }
        }
        for (p, c) in k[chan_start..].iter().zip(&chans) {
            if p.revents != 0 {
                c.pump();
                woke = true;
            }
        }
        if ours_ready + theirs > 0 {
            return ours_ready + theirs;
        }
        if !woke && deadline.is_some_and(|d| Instant::now() >= d) {
            return 0;
        }
    }
}

/// select/pselect by way of [`poll`].
///
/// # Safety
/// The sets must be null or valid fd_sets; `nfds` ≤ FD_SETSIZE.
pub(crate) unsafe fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> c_int {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        sys::set_errno(libc::EINVAL);
        return -1;
    }
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        // SAFETY: each set is null or a valid fd_set (the caller's contract); fd < nfds ≤
        // FD_SETSIZE.
        unsafe {
            if !r.is_null() && libc::FD_ISSET(fd, r) {
                ev |= libc::POLLIN;
            }
            if !w.is_null() && libc::FD_ISSET(fd, w) {
                ev |= libc::POLLOUT;
            }
            if !e.is_null() && libc::FD_ISSET(fd, e) {
                ev |= libc::POLLPRI;
            }
        }
        if ev != 0 {
            fds.push(pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    let n = poll(&mut fds, timeout, mask);
    if n < 0 {
        return -1;
    }
    // SAFETY: as above.
    unsafe {
        for set in [r, w, e] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
        let mut count = 0;
        for p in &fds {
            if p.revents & libc::POLLNVAL != 0 {
                sys::set_errno(libc::EBADF);
                return -1;
            }
            let rd = p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            let wr = p.revents & (libc::POLLOUT | libc::POLLERR) != 0;
            let ex = p.revents & libc::POLLPRI != 0;
            if rd && !r.is_null() && p.events & libc::POLLIN != 0 {
                libc::FD_SET(p.fd, r);
                count += 1;
            }
            if wr && !w.is_null() && p.events & libc::POLLOUT != 0 {
                libc::FD_SET(p.fd, w);
                count += 1;
            }
            if ex && !e.is_null() && p.events & libc::POLLPRI != 0 {
                libc::FD_SET(p.fd, e);
                count += 1;
            }
        }
        count
    }
}
