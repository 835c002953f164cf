//! Batches of datagrams with recvmmsg(2) and sendmmsg(2): one system call moves up to `n`
//! datagrams, each with its own peer address, which is what an echo server drains bursts with.

use crate::sockaddr::to_std as sockaddr_to_std;
use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `n` slots of `cap` bytes each, with the headers, iovecs and addresses the kernel fills.
/// The raw pointers inside `hdrs` point into this struct's own vectors, which are never
/// resized after construction, so they stay valid as long as the batch lives.
pub struct Batch {
    cap: usize,
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    hdrs: Vec<libc::mmsghdr>,
    /// Bytes received in each slot (before truncation to `cap`) and whether it was cut.
    lens: Vec<usize>,
    truncated: Vec<bool>,
    /// Scratch for `echo_where`: which received datagrams go back.
    kept: Vec<bool>,
    filled: usize,
}

// SAFETY: the raw pointers in `iovs`/`hdrs` only point into the batch's own heap buffers, so
// moving the batch to another thread moves what they point to with it.
unsafe impl Send for Batch {}

/// An all-zero C struct.
fn zeroed<T: Copy>() -> T {
    // SAFETY: only used for iovec, sockaddr_storage and mmsghdr: plain C structs of integers
    // and pointers, for which all-zero bytes are a valid value (null pointers, zero lengths).
    unsafe { std::mem::zeroed() }
}

impl Batch {
    pub fn new(n: usize, cap: usize) -> Batch {
        let n = n.max(1);
        let mut b = Batch {
            cap,
            bufs: vec![0u8; n * cap],
            iovs: vec![zeroed(); n],
            addrs: vec![zeroed(); n],
            hdrs: vec![zeroed(); n],
            lens: vec![0; n],
            truncated: vec![false; n],
            kept: vec![false; n],
            filled: 0,
        };
        let base = b.bufs.as_mut_ptr();
        for i in 0..n {
            // SAFETY: i * cap < n * cap, the length of `bufs`, so the offset stays inside it.
            b.iovs[i].iov_base = unsafe { base.add(i * cap) }.cast();
            b.iovs[i].iov_len = cap;
        }
        for i in 0..n {
            let h = &mut b.hdrs[i].msg_hdr;
            h.msg_iov = &mut b.iovs[i];
            h.msg_iovlen = 1;
            h.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        b
    }

    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// Receives up to `max` (at most `capacity()`) datagrams. Blocking waits for the first one
    /// only (MSG_WAITFORONE); `dontwait` never sleeps. Returns how many arrived. With `max` 1
    /// the call costs what one recvmsg(2) costs: the kernel does not look for a second datagram.
    pub fn recv(&mut self, fd: BorrowedFd<'_>, max: usize, dontwait: bool) -> io::Result<usize> {
        let max = max.clamp(1, self.hdrs.len());
        for i in 0..max {
            self.iovs[i].iov_len = self.cap;
            self.hdrs[i].msg_hdr.msg_namelen =
                size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            self.hdrs[i].msg_hdr.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        let flags = libc::MSG_WAITFORONE | if dontwait { libc::MSG_DONTWAIT } else { 0 };
        // SAFETY: `hdrs` holds at least `max` headers whose iovecs and names point into this
        // batch's buffers with their true lengths; a null timeout means none.
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                max as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            self.filled = 0;
            return Err(io::Error::last_os_error());
        }
        self.filled = rc as usize;
        for i in 0..self.filled {
            let len = self.hdrs[i].msg_len as usize;
            self.truncated[i] = self.hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.lens[i] = len.min(self.cap);
        }
        Ok(self.filled)
    }

    /// Datagram `i` of the last receive: its bytes, whether it was cut to the slot size, and
    /// where it came from.
    pub fn datagram(&self, i: usize) -> (&[u8], bool, Option<SocketAddr>) {
        let start = i * self.cap;
        let bytes = &self.bufs[start..start + self.lens[i]];
        let from = sockaddr_to_std(&self.addrs[i], self.hdrs[i].msg_hdr.msg_namelen);
        (bytes, self.truncated[i], from)
    }

    /// Sends every datagram of the last receive back to its sender, unchanged. Returns how many
    /// were sent and the first error of those that could not be (each failing datagram is
    /// skipped, so one bad peer cannot stall the others).
    pub fn echo(&mut self, fd: BorrowedFd<'_>) -> (usize, usize, Option<io::Error>) {
        self.echo_where(fd, |_| true)
    }

    /// As [`Batch::echo`], for the datagrams whose sender `keep` says yes to (a rate
    /// limiter's pick); each run of kept ones goes out in one sendmmsg. Datagrams not kept
    /// are neither sent nor counted as failed.
    pub fn echo_where(
        &mut self,
        fd: BorrowedFd<'_>,
        mut keep: impl FnMut(Option<SocketAddr>) -> bool,
    ) -> (usize, usize, Option<io::Error>) {
        for i in 0..self.filled {
            self.iovs[i].iov_len = self.lens[i];
            let from = sockaddr_to_std(&self.addrs[i], self.hdrs[i].msg_hdr.msg_namelen);
            self.kept[i] = keep(from);
        }
        let kept = &self.kept;
        let (mut sent, mut failed, mut first_err) = (0, 0, None);
        let mut at = 0;
        while at < self.filled {
            if !kept[at] {
                at += 1;
                continue;
            }
            let end = (at..self.filled).find(|&j| !kept[j]).unwrap_or(self.filled);
            // SAFETY: headers `at..end` are received ones; their iovecs now carry the received
            // lengths and their names the senders' addresses, all inside this batch.
            let rc = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    self.hdrs[at..].as_mut_ptr(),
                    (end - at) as libc::c_uint,
                    0,
                )
            };
            if rc > 0 {
                sent += rc as usize;
                at += rc as usize;
            } else {
                // The datagram at `at` failed (sendmmsg reports the error of the first one).
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                first_err.get_or_insert(e);
                failed += 1;
                at += 1;
            }
        }
        (sent, failed, first_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn a_burst_in_one_call_and_echoed_back() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = server.local_addr().unwrap();
        a.send_to(b"one", to).unwrap();
        b.send_to(b"", to).unwrap();
        a.send_to(&[7u8; 40], to).unwrap();
        let mut batch = Batch::new(8, 16);
        let n = batch.recv(server.as_fd(), 8, false).unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            batch.datagram(0),
            (&b"one"[..], false, Some(a.local_addr().unwrap()))
        );
        assert_eq!(
            batch.datagram(1),
            (&b""[..], false, Some(b.local_addr().unwrap()))
        );
        assert_eq!(batch.datagram(2).0.len(), 16);
        assert!(
            batch.datagram(2).1,
            "40 bytes into a 16-byte slot are truncated"
        );
        let (sent, failed, err) = batch.echo(server.as_fd());
        assert_eq!((sent, failed), (3, 0), "{err:?}");
        let mut buf = [0u8; 64];
        assert_eq!(a.recv(&mut buf).unwrap(), 3);
        assert_eq!(b.recv(&mut buf).unwrap(), 0);
        assert_eq!(a.recv(&mut buf).unwrap(), 16);
        assert!(
            matches!(batch.recv(server.as_fd(), 8, true), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
        );
    }
}
