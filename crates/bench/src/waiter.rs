//! How a benchmark thread waits for data, for every wait mode: the socket options a mode sets
//! and what the thread does when a receive finds nothing (spin, or sleep in epoll_wait, which
//! busy-polls first when the epoll context asks for it).

use crate::udp_echo::Wait;
use netsteer_sock::epoll::{BusyParams, Epoll};
use netsteer_sock::opt;
use std::io;
use std::os::fd::BorrowedFd;

/// Busy-poll settings shared by the modes that poll (`busy-poll`, `epoll-busy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Busy {
    /// µs to poll before sleeping.
    pub usecs: u32,
    /// Packets per poll round (0: the kernel's default).
    pub budget: u16,
    /// SO_PREFER_BUSY_POLL / the epoll context's prefer_busy_poll: keep the device's
    /// interrupts deferred while the application polls (napi.rst; needs defer-hard-irqs).
    pub prefer: bool,
}

/// A socket prepared for a wait mode; [`Waiter::idle`] is what to do after a receive found
/// nothing.
#[derive(Debug)]
pub struct Waiter {
    epoll: Option<Epoll>,
}

impl Wait {
    /// True for the modes whose sockets are non-blocking.
    pub fn nonblocking(self) -> bool {
        matches!(self, Wait::Spin | Wait::Epoll | Wait::EpollBusy)
    }
}

impl Waiter {
    /// Sets `fd` up for `wait`. The caller makes the socket non-blocking when
    /// [`Wait::nonblocking`] says so (std's sockets do it themselves).
    pub fn new(fd: BorrowedFd<'_>, wait: Wait, busy: Busy) -> io::Result<Waiter> {
        let ctx =
            |what: String| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
        match wait {
            Wait::Block | Wait::Spin => Ok(Waiter { epoll: None }),
            Wait::BusyPoll => {
                opt::set_busy_poll(fd, busy.usecs).map_err(ctx(format!(
                    "SO_BUSY_POLL {} µs (above net.core.busy_read it needs CAP_NET_ADMIN)",
                    busy.usecs
                )))?;
                if busy.budget > 0 {
                    opt::set_busy_poll_budget(fd, busy.budget).map_err(ctx(format!(
                        "SO_BUSY_POLL_BUDGET {} (above 64 it needs CAP_NET_ADMIN)",
                        busy.budget
                    )))?;
                }
                if busy.prefer {
                    opt::set_prefer_busy_poll(fd, true)
                        .map_err(ctx("SO_PREFER_BUSY_POLL (5.11+)".into()))?;
                }
                Ok(Waiter { epoll: None })
            }
            Wait::Epoll | Wait::EpollBusy => {
                let ep = Epoll::new().map_err(ctx("epoll_create1".into()))?;
                ep.add(fd).map_err(ctx("epoll_ctl".into()))?;
                if wait == Wait::EpollBusy {
                    ep.set_busy(BusyParams {
                        usecs: busy.usecs,
                        budget: busy.budget,
                        prefer: busy.prefer,
                    })
                    .map_err(|e| {
                        let hint = if Epoll::is_unsupported(&e) {
                            " (per-epoll busy polling needs Linux 6.9+)"
                        } else {
                            ""
                        };
                        io::Error::new(e.kind(), format!("EPIOCSPARAMS: {e}{hint}"))
                    })?;
                }
                Ok(Waiter { epoll: Some(ep) })
            }
        }
    }

    /// After a receive found nothing: sleep in epoll_wait for the epoll modes (a signal ends
    /// it early, so stop flags and deadlines are seen); return at once otherwise (spin).
    pub fn idle(&self) -> io::Result<()> {
        match &self.epoll {
            Some(ep) => match ep.wait(-1) {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
                Err(e) => Err(e),
            },
            None => {
                std::hint::spin_loop();
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn an_epoll_waiter_sleeps_until_a_datagram_arrives() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let w = Waiter::new(rx.as_fd(), Wait::Epoll, Busy::default()).unwrap();
        let addr = rx.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .send_to(b"x", addr)
                .unwrap();
        });
        let mut buf = [0u8; 8];
        let n = loop {
            match rx.recv(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => w.idle().unwrap(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(n, 1);
        sender.join().unwrap();
        assert!(Wait::Epoll.nonblocking() && !Wait::BusyPoll.nonblocking());
    }
}
