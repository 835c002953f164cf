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
        Ok(NlSocket { fd, seq: 1 })
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
            let mut data = &buf[..n as usize];
            let mut done = false;
            while data.len() >= NLMSG_HDRLEN {
                let mlen = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
                let mtype = u16::from_ne_bytes([data[4], data[5]]);
                let mseq = u32::from_ne_bytes([data[8], data[9], data[10], data[11]]);
                if mlen < NLMSG_HDRLEN || mlen > data.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "truncated netlink message",
                    ));
                }
                let body = &data[NLMSG_HDRLEN..mlen];
                if mseq == self.seq {
                    match mtype {
                        NLMSG_ERROR => {
                            let code = body
                                .get(..4)
                                .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                                .unwrap_or(-libc::EIO);
                            if code != 0 {
                                return Err(io::Error::from_raw_os_error(-code));
                            }
                            done = true;
                        }
                        NLMSG_DONE => done = true,
                        _ => {
                            if body.len() >= strip {
                                replies.push(body[strip..].to_vec());
                            }
                            // A plain GET answers with exactly one message; a request with
                            // an ACK flag ends at the acknowledgement, a dump at NLMSG_DONE.
                            done = flags & (NLM_F_ACK | NLM_F_DUMP) == 0;
                        }
                    }
                }
                let step = (mlen + 3) & !3;
                data = &data[step.min(data.len())..];
            }
            if done {
                return Ok(replies);
            }
        }
    }
}
