//! TCP options the standard library does not have (include/uapi/linux/tcp.h, man 7 tcp).

use crate::opt::{get_int, set_int};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The part of `struct tcp_info` the benchmarks report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Smoothed RTT and its variation, µs.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_cwnd: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub segs_out: u32,
    pub segs_in: u32,
    /// Milliseconds since the last data segment arrived (tcpi_last_data_recv): how long the
    /// peer has been silent.
    pub last_data_recv_ms: u32,
}

/// getsockopt(TCP_INFO). The kernel copies min(our length, its length) bytes, so libc's
/// (older, shorter) struct is always filled completely on newer kernels.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    // SAFETY: tcp_info is plain integers, for which all-zero bytes are valid.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `fd` is valid for the borrow; `info` and `len` are live locals and `len` is the
    // size of `info`, so the kernel writes within it.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpInfo {
        total_retrans: info.tcpi_total_retrans,
        rtt_us: info.tcpi_rtt,
        rttvar_us: info.tcpi_rttvar,
        snd_cwnd: info.tcpi_snd_cwnd,
        snd_mss: info.tcpi_snd_mss,
        rcv_mss: info.tcpi_rcv_mss,
        segs_out: info.tcpi_segs_out,
        segs_in: info.tcpi_segs_in,
        last_data_recv_ms: info.tcpi_last_data_recv,
    })
}

/// TCP_MAXSEG before connect(2)/listen(2): clamps the MSS this side announces and uses. 4108 =
/// 4096 payload + 12 bytes of timestamp option, so every segment fills exactly one page (what
/// TCP_ZEROCOPY_RECEIVE needs to map it; tools/testing/selftests/net/tcp_mmap.c).
pub fn set_max_segment(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let v =
        libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, v)
}

/// The current MSS (TCP_MAXSEG read back).
pub fn max_segment(fd: BorrowedFd<'_>) -> io::Result<u32> {
    get_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG).map(|v| v as u32)
}

/// TCP_CONGESTION: the congestion control algorithm by name (must be loaded and allowed:
/// net.ipv4.tcp_allowed_congestion_control, or CAP_NET_ADMIN).
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a congestion control name has 1 to 15 bytes (TCP_CA_NAME_MAX)",
        ));
    }
    // SAFETY: `fd` is valid; the name bytes are a live slice whose exact length is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The congestion control algorithm in use.
pub fn congestion(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` and `len` are live locals; `len` is the buffer's size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = buf[..len as usize]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(len as usize);
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// SO_RCVLOWAT: poll(2) and blocking reads wait for this many bytes (or EOF).
pub fn set_recv_low_water(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let v =
        libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)
}

/// TCP_NOTSENT_LOWAT: how many unsent bytes the socket holds before writers block or poll
/// reports it unwritable (keeps queues short for latency-sensitive senders).
pub fn set_notsent_low_water(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let v =
        libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, v)
}

/// Bounds how long a connection may go unanswered before the kernel gives it up with
/// ETIMEDOUT: TCP_USER_TIMEOUT for data not acknowledged (RFC 5482; otherwise the kernel
/// retransmits for about 15 minutes, `tcp_retries2`), and keepalive probes every third of
/// `timeout` after `timeout` of silence, so an idle connection to a vanished peer fails too
/// (man 7 tcp: the user timeout then also bounds the probes).
pub fn set_dead_peer_timeout(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<()> {
    let ms = libc::c_int::try_from(timeout.as_millis())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?
        .max(1);
    let secs = libc::c_int::try_from(timeout.as_secs())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)?;
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs.max(1))?;
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        (secs / 3).max(1),
    )?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)
}

/// Waits until `fd` is readable (or has an error or hang-up) for at most `timeout_ms`
/// (-1 = forever). Ok(false) on timeout; EINTR (a wake-up signal) is also Ok(false).
pub fn wait_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd and a count of 1.
    let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(rc > 0)
}

/// Waits until one of `fds` is readable (or has an error or hang-up) for at most
/// `timeout_ms` (-1 = forever); returns which are. All false on timeout or EINTR.
pub fn wait_any_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` is a live array of `p.len()` pollfd structs.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        return Ok(vec![false; fds.len()]);
    }
    Ok(p.iter().map(|q| q.revents != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn info_mss_congestion_on_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        set_max_segment(s.as_fd(), 4108).unwrap();
        s.connect(&l.local_addr().unwrap().into()).unwrap();
        let mut c: TcpStream = s.into();
        let (mut a, _) = l.accept().unwrap();
        c.write_all(&[7u8; 100_000]).unwrap();
        let mut buf = vec![0u8; 100_000];
        a.read_exact(&mut buf).unwrap();
        // 4108 minus the 12-byte timestamp option.
        assert_eq!(tcp_info(c.as_fd()).unwrap().snd_mss, 4096);
        assert!(max_segment(c.as_fd()).unwrap() <= 4108);
        assert!(tcp_info(c.as_fd()).unwrap().segs_out >= 100_000 / 4096);
        set_congestion(c.as_fd(), "reno").unwrap();
        assert_eq!(congestion(c.as_fd()).unwrap(), "reno");
        assert!(set_congestion(c.as_fd(), "no-such-algorithm").is_err());
        assert!(set_congestion(c.as_fd(), "").is_err());
        set_recv_low_water(a.as_fd(), 1000).unwrap();
        set_notsent_low_water(c.as_fd(), 16384).unwrap();
        assert!(!wait_readable(a.as_fd(), 10).unwrap());
        c.write_all(&[1u8; 10]).unwrap();
        // 10 bytes are below the low-water mark: still not readable.
        assert!(!wait_readable(a.as_fd(), 50).unwrap());
        drop(c);
        assert!(wait_readable(a.as_fd(), 1000).unwrap());
    }
}
