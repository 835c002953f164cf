//! A blocking netlink socket, generic (ethtool) or route (rtnetlink): the only `unsafe` of
//! this crate.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const NLMSG_HDRLEN: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 1;
/// Ask for an acknowledgement: a SET that succeeds is otherwise answered with nothing at all.
pub const NLM_F_ACK: u16 = 4;
/// NLM_F_ROOT | NLM_F_MATCH: every object (or every object a filter attribute selects), in as
/// many messages as it takes, ended by NLMSG_DONE.
pub const NLM_F_DUMP: u16 = 0x300;

/// NLM_F_ACK_TLVS on an NLMSG_ERROR: extended-ack attributes follow (netlink.h).
const NLM_F_ACK_TLVS: u16 = 0x200;
/// NLM_F_CAPPED on an NLMSG_ERROR: the request's payload is not echoed back.
const NLM_F_CAPPED: u16 = 0x100;
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;
const NETLINK_ADD_MEMBERSHIP: libc::c_int = 1;
/// Datagrams [`NlSocket::notices`] reads in one call.
const MAX_DATAGRAMS: usize = 256;
/// NLMSGERR_ATTR_MSG: the kernel's words for a refusal; NLMSGERR_ATTR_OFFS: the offset of the
/// attribute it refused, in the request.
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLMSGERR_ATTR_OFFS: u16 = 2;

/// A request the kernel refused: its errno and, with extended ACKs (4.12+), its own words and
/// the offending attribute (kernel selftests name both; so do we).
#[derive(Debug)]
pub struct NlError {
    pub errno: i32,
    pub message: Option<String>,
    /// The refused attribute's type, found from the offset the kernel reported.
    pub attr: Option<u16>,
}

impl std::fmt::Display for NlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.errno))?;
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        if let Some(a) = self.attr {
            write!(f, " (attribute {a})")?;
        }
        Ok(())
    }
}

impl std::error::Error for NlError {}

/// The errno of an error from this socket: a plain OS error's, or a refusal's ([`NlError`]).
pub fn errno_of(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<NlError>())
            .map(|n| n.errno)
    })
}

/// The error of an NLMSG_ERROR body (`code` < 0) whose header carried `flags`, for a request
/// whose attributes began at `attrs_at` in the message and were `attrs`.
fn refusal(code: i32, flags: u16, body: &[u8], attrs_at: usize, attrs: &[u8]) -> io::Error {
    let errno = -code;
    let mut message = None;
    let mut attr = None;
    // With NETLINK_CAP_ACK the request comes back as its header only.
    if flags & NLM_F_ACK_TLVS != 0 && flags & NLM_F_CAPPED != 0 {
        let mut tlvs = body.get(4 + NLMSG_HDRLEN..).unwrap_or(&[]);
        while tlvs.len() >= 4 {
            let len = u16::from_ne_bytes([tlvs[0], tlvs[1]]) as usize;
            let kind = u16::from_ne_bytes([tlvs[2], tlvs[3]]) & 0x3fff;
            if len < 4 || len > tlvs.len() {
                break;
            }
            let value = &tlvs[4..len];
            match kind {
                NLMSGERR_ATTR_MSG => {
                    let text = value.split(|b| *b == 0).next().unwrap_or(&[]);
                    message = Some(String::from_utf8_lossy(text).into_owned());
                }
                NLMSGERR_ATTR_OFFS if value.len() >= 4 => {
                    let off = u32::from_ne_bytes([value[0], value[1], value[2], value[3]]) as usize;
                    // The offset is from the start of the request message.
                    attr = off
                        .checked_sub(attrs_at)
                        .and_then(|o| attrs.get(o + 2..o + 4))
                        .map(|t| u16::from_ne_bytes([t[0], t[1]]) & 0x3fff);
                }
                _ => {}
            }
            tlvs = &tlvs[((len + 3) & !3).min(tlvs.len())..];
        }
    }
    if message.is_none() && attr.is_none() {
        return io::Error::from_raw_os_error(errno);
    }
    io::Error::new(
        io::Error::from_raw_os_error(errno).kind(),
        NlError {
            errno,
            message,
            attr,
        },
    )
}

/// What one wait for notifications read ([`NlSocket::notices`]).
#[derive(Debug, Default)]
pub struct Notices {
    /// Each notification: its generic-netlink command and attributes.
    pub messages: Vec<(u8, Vec<u8>)>,
    /// The kernel dropped notifications before these (the receive buffer overran).
    pub overrun: bool,
}

/// One netlink message of a datagram: its header's type, flags and sequence, and its body.
struct Frame<'a> {
    mtype: u16,
    flags: u16,
    seq: u32,
    body: &'a [u8],
}

/// The messages of one datagram in order, and whether it held whole ones only (a truncated
/// message ends it: what it held is not guessed at).
fn frames(mut data: &[u8]) -> (Vec<Frame<'_>>, bool) {
    let mut out = Vec::new();
    while data.len() >= NLMSG_HDRLEN {
        let mlen = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
        if mlen < NLMSG_HDRLEN || mlen > data.len() {
            return (out, false);
        }
        out.push(Frame {
            mtype: u16::from_ne_bytes([data[4], data[5]]),
            flags: u16::from_ne_bytes([data[6], data[7]]),
            seq: u32::from_ne_bytes([data[8], data[9], data[10], data[11]]),
            body: &data[NLMSG_HDRLEN..mlen],
        });
        let step = (mlen + 3) & !3;
        data = &data[step.min(data.len())..];
    }
    (out, true)
}

/// The generic-netlink messages of one datagram as (command, attributes), up to a truncated
/// one.
pub fn split_notices(data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    // Control messages (NLMSG_NOOP, _ERROR, _DONE, _OVERRUN) are below 0x10; a genl message
    // starts with its 4-byte header (cmd, version, reserved).
    frames(data)
        .0
        .into_iter()
        .filter(|f| f.mtype >= 0x10 && f.body.len() >= 4)
        .map(|f| (f.body[0], f.body[4..].to_vec()))
        .collect()
}

pub struct NlSocket {
    fd: OwnedFd,
    seq: u32,
}

impl NlSocket {
    /// A generic netlink socket (ethtool, netdev families).
    pub fn generic() -> io::Result<NlSocket> {
        Self::open(libc::NETLINK_GENERIC)
    }

    /// An rtnetlink socket (links, addresses).
    pub fn route() -> io::Result<NlSocket> {
        Self::open(libc::NETLINK_ROUTE)
    }

    fn open(protocol: libc::c_int) -> io::Result<NlSocket> {
        // SAFETY: socket(2) with constant arguments; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Replies must not block forever if the kernel never answers (it always should).
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: `tv` lives across the call and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // Extended ACKs: a refusal comes with the kernel's reason and the attribute it refused.
        // Best effort: a kernel without them (before 4.12) answers with the errno alone.
        for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
            let one: libc::c_int = 1;
            // SAFETY: `one` lives across the call and its size is passed.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    SOL_NETLINK,
                    opt,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        Ok(NlSocket { fd, seq: 1 })
    }

    /// Joins multicast group `group` (an id from [`crate::genl::Family::groups`]): the kernel
    /// sends this socket the group's notifications from now on. A socket that joins one is
    /// for listening only ([`NlSocket::notices`]): a request's replies would be mixed with them.
    pub fn join(&mut self, group: u32) -> io::Result<()> {
        // Bound first: an unbound socket's port id is 0, the kernel's own, and a broadcast
        // skips the socket whose port id is the sender's (do_one_broadcast,
        // net/netlink/af_netlink.c), so it would hear nothing. nl_pid 0 lets the kernel pick.
        // SAFETY: sockaddr_nl is plain old data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` lives across the call and its size is passed.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `group` lives across the call and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                SOL_NETLINK,
                NETLINK_ADD_MEMBERSHIP,
                (&group as *const u32).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The notifications that arrive within `wait` (none if none do): each one's message type
    /// and payload (after the genl header's command byte is read: `(cmd, attributes)`).
    /// Returns as soon as one batch has been read. `overrun` says the kernel dropped some
    /// (ENOBUFS: the socket's receive buffer was full), so the caller must look for itself.
    pub fn notices(&mut self, wait: std::time::Duration) -> io::Result<Notices> {
        let mut out = Notices::default();
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(out);
            }
            return Err(e);
        }
        if rc == 0 {
            return Ok(out);
        }
        let mut buf = vec![0u8; 64 * 1024];
        // At most this many datagrams a call: a flood of notifications (thousands of devices
        // changing) is read over several calls, so the caller gets to check its stop flag.
        for _ in 0..MAX_DATAGRAMS {
            // SAFETY: sockaddr_nl is plain old data; all zeroes is a valid value.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: `buf` is writable for `buf.len()` bytes; `from` and `from_len` live
            // across the call and `from_len` holds `from`'s size.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut from_len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(out),
                    Some(libc::ENOBUFS) => {
                        out.overrun = true;
                        continue;
                    }
                    Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
            // Only the kernel's (port 0): a privileged process may send to a group too, and
            // what it says is not the kernel's word.
            if from.nl_pid == 0 {
                out.messages.extend(split_notices(&buf[..n as usize]));
            }
        }
        Ok(out)
    }

    /// Sends one request (`family`, `cmd`, attributes) and returns the payloads (after the genl
    /// header) of the reply messages, or the errno the kernel answered with.
    pub fn request(&mut self, family: u16, cmd: u8, attrs: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self.request_with(family, &[cmd, 1, 0, 0], attrs, NLM_F_REQUEST, 4)
    }

    /// A generic-netlink dump: every reply message's payload (after the genl header).
    pub fn dump(&mut self, family: u16, cmd: u8, attrs: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self.request_with(
            family,
            &[cmd, 1, 0, 0],
            attrs,
            NLM_F_REQUEST | NLM_F_DUMP,
            4,
        )
    }

    /// A request whose success is only an acknowledgement (ethtool SET messages).
    pub fn request_ack(&mut self, family: u16, cmd: u8, attrs: &[u8]) -> io::Result<()> {
        self.request_with(family, &[cmd, 1, 0, 0], attrs, NLM_F_REQUEST | NLM_F_ACK, 4)
            .map(|_| ())
    }

    /// A route-netlink request: message type (RTM_GETLINK ...), its fixed header (ifinfomsg
    /// ...) and attributes; returns the replies' whole bodies (their own fixed header first).
    pub fn route_request(
        &mut self,
        msg_type: u16,
        fixed: &[u8],
        attrs: &[u8],
    ) -> io::Result<Vec<Vec<u8>>> {
        self.request_with(msg_type, fixed, attrs, NLM_F_REQUEST, 0)
    }

    /// Sends a message of type `msg_type` made of a fixed header (genl's 4 bytes, rtnl's
    /// ifinfomsg) and attributes; replies are returned without their first `strip` bytes.
    fn request_with(
        &mut self,
        msg_type: u16,
        fixed: &[u8],
        attrs: &[u8],
        flags: u16,
        strip: usize,
    ) -> io::Result<Vec<Vec<u8>>> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDRLEN + fixed.len() + attrs.len();
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&msg_type.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(fixed);
        msg.extend_from_slice(attrs);
        // SAFETY: `msg` is a valid buffer of `msg.len()` bytes; a NULL address sends to the kernel.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 64 * 1024];
        let mut replies = Vec::new();
        loop {
            // SAFETY: `buf` is writable for `buf.len()` bytes.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let (frames, whole) = frames(&buf[..n as usize]);
            let mut done = false;
            for f in frames {
                if f.seq != self.seq {
                    continue;
                }
                match f.mtype {
                    NLMSG_ERROR => {
                        let code = f
                            .body
                            .get(..4)
                            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                            .unwrap_or(-libc::EIO);
                        if code != 0 {
                            return Err(refusal(
                                code,
                                f.flags,
                                f.body,
                                NLMSG_HDRLEN + fixed.len(),
                                attrs,
                            ));
                        }
                        done = true;
                    }
                    NLMSG_DONE => done = true,
                    _ => {
                        if f.body.len() >= strip {
                            replies.push(f.body[strip..].to_vec());
                        }
                        // A plain GET answers with exactly one message; a request with
                        // an ACK flag ends at the acknowledgement, a dump at NLMSG_DONE.
                        done = flags & (NLM_F_ACK | NLM_F_DUMP) == 0;
                    }
                }
            }
            if !whole {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "truncated netlink message",
                ));
            }
            if done {
                return Ok(replies);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NLMSG_ERROR body as the kernel builds it with NETLINK_EXT_ACK and NETLINK_CAP_ACK:
    /// the errno, the request's header, then the message and the offending attribute's offset.
    #[test]
    fn a_refusal_names_the_kernels_reason_and_the_attribute() {
        let attrs_at = NLMSG_HDRLEN + 4;
        // The request's attributes: a header nest (type 1, 8 bytes), then INDIR (type 4).
        let mut attrs = Vec::new();
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&1u16.to_ne_bytes());
        attrs.extend_from_slice(&[0; 4]);
        attrs.extend_from_slice(&12u16.to_ne_bytes());
        attrs.extend_from_slice(&4u16.to_ne_bytes());
        attrs.extend_from_slice(&[0; 8]);
        let mut body = (-libc::EINVAL).to_ne_bytes().to_vec();
        body.extend_from_slice(&[0; NLMSG_HDRLEN]);
        let msg = b"entry 3: queue out of range (2)\0";
        body.extend_from_slice(&((4 + msg.len()) as u16).to_ne_bytes());
        body.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        body.extend_from_slice(msg);
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        body.extend_from_slice(&8u16.to_ne_bytes());
        body.extend_from_slice(&NLMSGERR_ATTR_OFFS.to_ne_bytes());
        body.extend_from_slice(&((attrs_at + 8) as u32).to_ne_bytes());
        let e = refusal(
            -libc::EINVAL,
            NLM_F_ACK_TLVS | NLM_F_CAPPED,
            &body,
            attrs_at,
            &attrs,
        );
        assert_eq!(errno_of(&e), Some(libc::EINVAL));
        assert_eq!(
            e.to_string(),
            "Invalid argument (os error 22): entry 3: queue out of range (2) (attribute 4)"
        );
        // Without extended-ack attributes: the plain OS error.
        let plain = refusal(-libc::EPERM, 0, &body[..4], attrs_at, &attrs);
        assert_eq!(plain.raw_os_error(), Some(libc::EPERM));
    }
}
