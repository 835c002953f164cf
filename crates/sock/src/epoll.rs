//! One epoll instance per thread, with per-instance busy polling (EPIOCSPARAMS, 6.9+): the
//! busy-poll time, budget and prefer-busy-poll of an epoll context instead of the global
//! `net.core.busy_poll` sysctl — the mode IRQ suspension (6.13) builds on
//! (Documentation/networking/napi.rst, "Busy polling" and "IRQ suspension").

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The per-context busy-poll parameters (`struct epoll_params`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BusyParams {
    /// How long epoll_wait() busy-polls the NAPI of its sockets before sleeping (µs).
    pub usecs: u32,
    /// Packets per busy-poll round (0: the kernel's default of 8; more than 64 needs
    /// CAP_NET_ADMIN).
    pub budget: u16,
    /// Keep the device's interrupts deferred while the application polls (what IRQ suspension
    /// needs).
    pub prefer: bool,
}

/// What a watched descriptor is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    Read,
    Write,
}

/// One ready descriptor: the token it was watched with, and what it is ready for. Errors and
/// hang-ups are reported as both readable and writable, so the next read or write says what
/// happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    pub token: u64,
    pub readable: bool,
    pub writable: bool,
}

const ONCE_READ: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32;

/// An epoll instance watching sockets for input.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 with a constant flag; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// Watches `fd` for input (level-triggered), reported with its descriptor number.
    pub fn add(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLIN as u32,
            fd.as_raw_fd() as u64,
        )
    }

    /// Watches `fd` (level-triggered) for `interest`; its readiness is reported with `token`.
    pub fn watch(&self, fd: BorrowedFd<'_>, interest: Interest, token: u64) -> io::Result<()> {
        let events = match interest {
            Interest::Read => libc::EPOLLIN | libc::EPOLLRDHUP,
            Interest::Write => libc::EPOLLOUT,
        };
        self.ctl(libc::EPOLL_CTL_ADD, fd, events as u32, token)
    }

    /// Watches `fd` for input once (EPOLLONESHOT): after it is reported, it is disarmed until
    /// [`Epoll::rearm`]. A watcher of many idle descriptors that wants to hear of each arrival
    /// once, not at every wait while the bytes sit unread.
    pub fn watch_once(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, ONCE_READ, token)
    }

    /// Arms a descriptor watched with [`Epoll::watch_once`] again (reported at once if input
    /// is already there).
    pub fn rearm(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, ONCE_READ, token)
    }

    /// Stops watching `fd`.
    pub fn unwatch(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // Before 2.6.9 the kernel wanted a non-null event even for a delete.
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    fn ctl(&self, op: libc::c_int, fd: BorrowedFd<'_>, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: both descriptors are open for the call; `ev` lives across it.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` (-1: no limit) and replaces `out` with the ready descriptors
    /// (at most 64 per call). A signal ends the wait early with nothing ready.
    pub fn ready(&self, timeout_ms: i32, out: &mut Vec<Ready>) -> io::Result<()> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: `evs` is writable for its length, passed as maxevents.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as libc::c_int,
                timeout_ms,
            )
        };
        out.clear();
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        let broken = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
        out.extend(evs[..n as usize].iter().map(|e| {
            let (events, token) = (e.events, e.u64);
            Ready {
                token,
                readable: events & (libc::EPOLLIN as u32 | libc::EPOLLRDHUP as u32 | broken) != 0,
                writable: events & (libc::EPOLLOUT as u32 | broken) != 0,
            }
        }));
        Ok(())
    }

    /// Waits up to `timeout_ms` (-1: no limit) for input; returns how many descriptors are
    /// ready. A signal ends the wait early (EINTR, returned as an error).
    pub fn wait(&self, timeout_ms: i32) -> io::Result<usize> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: `evs` is writable for its length, passed as maxevents.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// True for the error a kernel without per-context busy polling (before 6.9) answers.
    pub fn is_unsupported(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::ENOTTY)
    }

    /// Sets the context's busy polling (EPIOCSPARAMS). Kernels before 6.9 answer ENOTTY.
    pub fn set_busy(&self, p: BusyParams) -> io::Result<()> {
        let mut params = libc::epoll_params {
            busy_poll_usecs: p.usecs,
            busy_poll_budget: p.budget,
            prefer_busy_poll: u8::from(p.prefer),
            __pad: 0,
        };
        // SAFETY: `params` is the struct the ioctl's number encodes, live across the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::EPIOCSPARAMS, &mut params) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the context's busy polling back (EPIOCGPARAMS).
    pub fn busy(&self) -> io::Result<BusyParams> {
        let mut params = libc::epoll_params {
            busy_poll_usecs: 0,
            busy_poll_budget: 0,
            prefer_busy_poll: 0,
            __pad: 0,
        };
        // SAFETY: as for set_busy; the kernel writes the struct.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::EPIOCGPARAMS, &mut params) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(BusyParams {
            usecs: params.busy_poll_usecs,
            budget: params.busy_poll_budget,
            prefer: params.prefer_busy_poll != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn a_datagram_wakes_the_wait_and_busy_params_round_trip() {
        let ep = Epoll::new().unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        ep.add(rx.as_fd()).unwrap();
        assert_eq!(ep.wait(0).unwrap(), 0);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        assert_eq!(ep.wait(5000).unwrap(), 1);
        let mut ready = Vec::new();
        ep.ready(0, &mut ready).unwrap();
        assert_eq!(ready.len(), 1);
        assert!(ready[0].readable && !ready[0].writable);
        let p = BusyParams {
            usecs: 50,
            budget: 16,
            prefer: true,
        };
        match ep.set_busy(p) {
            Ok(()) => assert_eq!(ep.busy().unwrap(), p),
            // Kernels before 6.9 have no per-context busy polling.
            Err(e) => assert!(Epoll::is_unsupported(&e), "{e}"),
        }
    }
}

#[cfg(test)]
mod watch_tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn tokens_come_back_for_reads_writes_and_hangups() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let ep = Epoll::new().unwrap();
        ep.watch(a.as_fd(), Interest::Write, 7).unwrap();
        ep.watch(b.as_fd(), Interest::Read, 9).unwrap();
        let mut ready = Vec::new();
        ep.ready(1000, &mut ready).unwrap();
        // A fresh socket can be written; nothing has been sent to b yet.
        assert_eq!(
            ready,
            vec![Ready {
                token: 7,
                readable: false,
                writable: true
            }]
        );
        ep.unwatch(a.as_fd()).unwrap();
        a.write_all(b"hi").unwrap();
        ep.ready(1000, &mut ready).unwrap();
        assert_eq!(ready.len(), 1);
        assert_eq!((ready[0].token, ready[0].readable), (9, true));
        let mut buf = [0u8; 2];
        b.read_exact(&mut buf).unwrap();
        ep.ready(0, &mut ready).unwrap();
        assert!(ready.is_empty());
        drop(a);
        ep.ready(1000, &mut ready).unwrap();
        assert_eq!((ready[0].token, ready[0].readable), (9, true));
        assert_eq!(b.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn a_once_watch_reports_an_arrival_once_until_rearmed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let ep = Epoll::new().unwrap();
        ep.watch_once(b.as_fd(), 5).unwrap();
        let mut ready = Vec::new();
        ep.ready(0, &mut ready).unwrap();
        assert!(ready.is_empty(), "nothing sent yet");
        a.write_all(b"x").unwrap();
        ep.ready(1000, &mut ready).unwrap();
        assert_eq!((ready.len(), ready[0].token), (1, 5));
        // Unread, but disarmed: not reported again.
        ep.ready(50, &mut ready).unwrap();
        assert!(ready.is_empty());
        // Re-armed with the byte still there: reported at once.
        ep.rearm(b.as_fd(), 6).unwrap();
        ep.ready(1000, &mut ready).unwrap();
        assert_eq!((ready.len(), ready[0].token), (1, 6));
    }
}
