//! Socket options by number (include/uapi/asm-generic/socket.h, man 7 socket).

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

pub(crate) fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is a valid open descriptor for the borrow; the option value is a c_int on
    // the stack whose address and exact size are passed, as setsockopt(2) requires.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is valid for the borrow; `value` and `len` are live stack variables and
    // `len` holds the size of `value`, so the kernel writes at most that many bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SO_BUSY_POLL: spin up to `usec` µs on the device queue in blocking receives (3.11+).
/// `net.core.busy_read` is only the default; raising a socket's value above it needs
/// CAP_NET_ADMIN (net/core/sock.c sk_setsockopt()).
pub fn set_busy_poll(fd: BorrowedFd<'_>, usec: u32) -> io::Result<()> {
    let v =
        libc::c_int::try_from(usec).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    set_int(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, v)
}

/// SO_PREFER_BUSY_POLL (5.11+): keep the device's interrupts masked while the application busy
/// polls, so softirq processing does not compete with it.
pub fn set_prefer_busy_poll(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_PREFER_BUSY_POLL,
        libc::c_int::from(on),
    )
}

/// SO_BUSY_POLL_BUDGET (5.11+): packets per busy-poll round.
pub fn set_busy_poll_budget(fd: BorrowedFd<'_>, packets: u16) -> io::Result<()> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL_BUDGET,
        libc::c_int::from(packets),
    )
}

/// SO_INCOMING_CPU (3.19+): the CPU that processed the last packet queued to the socket; None
/// before the first packet (-1). UDP updates it only on connected sockets.
pub fn incoming_cpu(fd: BorrowedFd<'_>) -> io::Result<Option<u32>> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_INCOMING_CPU).map(|v| u32::try_from(v).ok())
}

/// SO_INCOMING_NAPI_ID (4.12+): the NAPI instance of the last packet; 0 when the driver marks
/// none (loopback; veth, which was measured at 0 here with GRO on as well), in which case busy
/// polling has nothing to poll.
pub fn incoming_napi_id(fd: BorrowedFd<'_>) -> io::Result<u32> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID).map(|v| v as u32)
}

/// SO_TIMESTAMPING flags (Documentation/networking/timestamping.rst).
pub mod stamp {
    pub const TX_HARDWARE: u32 = libc::SOF_TIMESTAMPING_TX_HARDWARE;
    pub const TX_SOFTWARE: u32 = libc::SOF_TIMESTAMPING_TX_SOFTWARE;
    pub const RX_HARDWARE: u32 = libc::SOF_TIMESTAMPING_RX_HARDWARE;
    pub const RX_SOFTWARE: u32 = libc::SOF_TIMESTAMPING_RX_SOFTWARE;
    pub const SOFTWARE: u32 = libc::SOF_TIMESTAMPING_SOFTWARE;
    pub const RAW_HARDWARE: u32 = libc::SOF_TIMESTAMPING_RAW_HARDWARE;
    /// Number each send so error-queue stamps can be matched to it.
    pub const OPT_ID: u32 = libc::SOF_TIMESTAMPING_OPT_ID;
    /// Return only the stamp on the error queue, not a copy of the packet.
    pub const OPT_TSONLY: u32 = libc::SOF_TIMESTAMPING_OPT_TSONLY;
    /// Every stamp the client of a round-trip benchmark wants: software and hardware, both ways.
    pub const ROUND_TRIP: u32 = TX_HARDWARE
        | TX_SOFTWARE
        | RX_HARDWARE
        | RX_SOFTWARE
        | SOFTWARE
        | RAW_HARDWARE
        | OPT_ID
        | OPT_TSONLY;
}

/// Turns on SO_TIMESTAMPING with `flags` (see [`stamp`]).
pub fn set_timestamping(fd: BorrowedFd<'_>, flags: u32) -> io::Result<()> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        flags as libc::c_int,
    )
}

/// SO_RCVTIMEO: how long a blocking receive waits (None: forever).
pub fn set_recv_timeout(
    fd: BorrowedFd<'_>,
    timeout: Option<std::time::Duration>,
) -> io::Result<()> {
    let tv = match timeout {
        Some(d) => libc::timeval {
            tv_sec: d.as_secs() as libc::time_t,
            // A zero timeval means "forever"; the smallest real timeout is 1 µs.
            tv_usec: (d.subsec_micros().max(u32::from(d.is_zero()))) as libc::suseconds_t,
        },
        None => libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
    };
    // SAFETY: `fd` is valid for the borrow; `tv` is a live timeval whose exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SO_PRIORITY: the skb priority, which picks the band of a prio/mqprio qdisc on the way out.
/// 0..=6 need no privilege; 7 and above need CAP_NET_ADMIN (man 7 socket).
pub fn set_priority(fd: BorrowedFd<'_>, priority: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(priority)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    set_int(fd, libc::SOL_SOCKET, libc::SO_PRIORITY, v)
}

/// SO_LINGER with a zero timeout: close(2) then aborts the connection with RST instead of a
/// FIN (man 7 socket; net/ipv4/tcp.c __tcp_close() sends a reset when linger is 0). A proxy
/// uses it to pass a reset through.
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> io::Result<()> {
    let value = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `fd` is valid for the borrow; `value` is a live `struct linger` on the stack and
    // its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&value as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The socket's SO_PRIORITY.
pub fn priority(fd: BorrowedFd<'_>) -> io::Result<u32> {
    Ok(get_int(fd, libc::SOL_SOCKET, libc::SO_PRIORITY)? as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn options_round_trip_on_a_udp_socket() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(incoming_cpu(a.as_fd()).unwrap(), None);
        set_timestamping(a.as_fd(), stamp::ROUND_TRIP).unwrap();
        // UDP records the incoming CPU only for connected sockets (udp.c __udp_queue_rcv_skb()).
        a.connect(b.local_addr().unwrap()).unwrap();
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 8];
        a.recv(&mut buf).unwrap();
        // After a packet: the CPU that processed it, and no NAPI on loopback.
        assert!(incoming_cpu(a.as_fd()).unwrap().is_some());
        assert_eq!(incoming_napi_id(a.as_fd()).unwrap(), 0);
        set_recv_timeout(a.as_fd(), Some(std::time::Duration::from_millis(1))).unwrap();
        assert!(a.recv(&mut buf).is_err());
        assert!(set_busy_poll(a.as_fd(), u32::MAX).is_err());
    }
}
