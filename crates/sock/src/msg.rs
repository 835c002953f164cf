//! One datagram in with its kernel receive timestamps, and transmit timestamps read back from
//! the error queue (Documentation/networking/timestamping.rst, sections 2.1 and 3).

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A kernel timestamp in nanoseconds of CLOCK_REALTIME (software) or of the NIC clock (raw
/// hardware).
pub type StampNs = u64;

/// Control-message space: a SCM_TIMESTAMPING (3 timespecs) plus an extended error with its
/// offender address, with room to spare. u64 elements keep it aligned for cmsghdr.
type ControlBuf = [u64; 64];

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamps {
    /// Software stamp (`ts[0]` of SCM_TIMESTAMPING): when the stack saw the packet.
    pub software: Option<StampNs>,
    /// Raw hardware stamp (`ts[2]`), when the NIC and its driver provide one.
    pub hardware: Option<StampNs>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    pub len: usize,
    /// The datagram was longer than the buffer (MSG_TRUNC): `len` bytes were kept.
    pub truncated: bool,
    pub source: Option<SocketAddr>,
    pub stamps: Stamps,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxStamp {
    /// SOF_TIMESTAMPING_OPT_ID counter: 0 for the first send on the socket, then 1, 2, ...
    pub id: u32,
    pub stamps: Stamps,
}

fn stamp_ns(ts: &libc::timespec) -> Option<StampNs> {
    let ns = (ts.tv_sec as i128) * 1_000_000_000 + ts.tv_nsec as i128;
    (ns > 0).then_some(ns as u64)
}

/// Walks the control messages of a received `msghdr`: timestamps, and the extended error when
/// the message came from the error queue (a timestamp's OPT_ID, or a MSG_ZEROCOPY completion).
fn parse_control(msg: &libc::msghdr) -> (Stamps, Option<libc::sock_extended_err>) {
    let mut stamps = Stamps::default();
    let mut err = None;
    // SAFETY: `msg` was filled by recvmsg(2); msg_control/msg_controllen describe our control
    // buffer and the kernel's valid length, which is what CMSG_FIRSTHDR/CMSG_NXTHDR walk.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/NXTHDR return either null or a header inside the buffer.
        let hdr = unsafe { &*cmsg };
        // SAFETY: CMSG_DATA points just past this header, inside the same buffer.
        let data = unsafe { libc::CMSG_DATA(cmsg) };
        let payload = hdr.cmsg_len as usize - (data as usize - cmsg as usize);
        if hdr.cmsg_level == libc::SOL_SOCKET
            && hdr.cmsg_type == libc::SCM_TIMESTAMPING
            && payload >= 3 * size_of::<libc::timespec>()
        {
            // SAFETY: the payload holds struct scm_timestamping (three timespecs), checked by
            // length above; read_unaligned because cmsg data has no alignment guarantee.
            let ts: [libc::timespec; 3] = unsafe { std::ptr::read_unaligned(data.cast()) };
            stamps.software = stamp_ns(&ts[0]);
            stamps.hardware = stamp_ns(&ts[2]);
        } else if ((hdr.cmsg_level == libc::SOL_IP && hdr.cmsg_type == libc::IP_RECVERR)
            || (hdr.cmsg_level == libc::SOL_IPV6 && hdr.cmsg_type == libc::IPV6_RECVERR))
            && payload >= size_of::<libc::sock_extended_err>()
        {
            // SAFETY: the payload starts with struct sock_extended_err, checked by length.
            err = Some(unsafe { std::ptr::read_unaligned(data.cast()) });
        }
        // SAFETY: `msg` and `cmsg` are the header and a control message inside it.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    (stamps, err)
}

/// What one recvmsg(2) returned besides the bytes.
pub(crate) struct Received {
    len: usize,
    msg_flags: libc::c_int,
    stamps: Stamps,
    /// The extended error of an error-queue message.
    pub(crate) err: Option<libc::sock_extended_err>,
    source: Option<SocketAddr>,
}

pub(crate) fn recv_raw(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: libc::c_int,
) -> io::Result<Received> {
    let mut control = MaybeUninit::<ControlBuf>::zeroed();
    let mut name = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = name.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<ControlBuf>() as _;
    // SAFETY: every pointer in `msg` refers to a live buffer of the stated length (`buf` via
    // `iov`, `name`, `control`), all outliving the call.
    let rc = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let (stamps, err) = parse_control(&msg);
    // SAFETY: the storage was zero-initialized and recvmsg wrote at most msg_namelen bytes.
    let name = unsafe { name.assume_init() };
    let source = crate::sockaddr::to_std(&name, msg.msg_namelen);
    Ok(Received {
        len: rc as usize,
        msg_flags: msg.msg_flags,
        stamps,
        err,
        source,
    })
}

/// Receives one datagram into `buf` with its timestamps (when SO_TIMESTAMPING is on).
/// `dontwait` returns `WouldBlock` instead of sleeping.
pub fn recv_msg(fd: BorrowedFd<'_>, buf: &mut [u8], dontwait: bool) -> io::Result<RxMeta> {
    let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
    let r = recv_raw(fd, buf, flags | libc::MSG_TRUNC)?;
    Ok(RxMeta {
        len: r.len.min(buf.len()),
        truncated: r.msg_flags & libc::MSG_TRUNC != 0,
        source: r.source,
        stamps: r.stamps,
    })
}

/// recvfrom(2) of one datagram: the cheapest receive (no msghdr to copy in), for servers of
/// ping-pong traffic. Returns the datagram's full length (MSG_TRUNC: more than `buf.len()` when
/// it was cut) and its sender.
pub fn recv_from(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    dontwait: bool,
) -> io::Result<(usize, Option<SocketAddr>)> {
    let mut name = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let flags = libc::MSG_TRUNC | if dontwait { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: `buf` and `name` are live buffers of the lengths passed, and `namelen` holds the
    // size of `name`, so the kernel writes within them.
    let rc = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags,
            name.as_mut_ptr().cast(),
            &mut namelen,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialized storage of which the kernel wrote at most `namelen` bytes.
    let name = unsafe { name.assume_init() };
    Ok((rc as usize, crate::sockaddr::to_std(&name, namelen)))
}

/// Reads one transmit timestamp from the error queue; `Ok(None)` when none is waiting.
pub fn read_tx_stamp(fd: BorrowedFd<'_>) -> io::Result<Option<TxStamp>> {
    let mut scratch = [0u8; 64];
    match recv_raw(fd, &mut scratch, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) {
        Ok(r) => Ok(Some(TxStamp {
            id: r
                .err
                .filter(|e| e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING)
                .map_or(0, |e| e.ee_data),
            stamps: r.stamps,
        })),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opt::{set_timestamping, stamp};
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn software_stamps_both_ways_on_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_timestamping(a.as_fd(), stamp::ROUND_TRIP).unwrap();
        set_timestamping(b.as_fd(), stamp::ROUND_TRIP).unwrap();
        // The first timestamping socket flips a static key from a work item (net/core/dev.c
        // net_enable_timestamp()), so packets sent at once may not be stamped yet.
        std::thread::sleep(std::time::Duration::from_millis(100));
        a.send_to(b"hello", b.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 3];
        let m = recv_msg(b.as_fd(), &mut buf, false).unwrap();
        assert_eq!((m.len, m.truncated), (3, true));
        assert_eq!(&buf, b"hel");
        assert_eq!(m.source, Some(a.local_addr().unwrap()));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let rx = m.stamps.software.expect("software RX stamp");
        assert!(rx <= now && now - rx < 10_000_000_000);
        let tx = read_tx_stamp(a.as_fd())
            .unwrap()
            .expect("TX stamp on the error queue");
        assert_eq!(tx.id, 0);
        assert!(tx.stamps.software.unwrap() <= rx);
        assert_eq!(read_tx_stamp(a.as_fd()).unwrap(), None);
        assert!(
            matches!(recv_msg(b.as_fd(), &mut buf, true), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
        );
    }
}
