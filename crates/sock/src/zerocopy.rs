//! Zero-copy TCP: MSG_ZEROCOPY sends with their completions from the error queue
//! (Documentation/networking/msg_zerocopy.rst), and TCP_ZEROCOPY_RECEIVE, which maps received
//! pages into an mmap of the socket instead of copying them (net/ipv4/tcp.c
//! tcp_zerocopy_receive; tools/testing/selftests/net/tcp_mmap.c).

use crate::msg::recv_raw;
use crate::opt::set_int;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

/// include/uapi/asm-generic/socket.h (not exported by libc for every target).
const SO_ZEROCOPY: libc::c_int = 60;
/// include/uapi/linux/errqueue.h.
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// SO_ZEROCOPY: allow MSG_ZEROCOPY sends on this socket (4.14+).
pub fn enable_zerocopy_send(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, SO_ZEROCOPY, 1)
}

/// send(2) with MSG_ZEROCOPY: the kernel pins `buf`'s pages instead of copying them, so the
/// caller must not change them until the completion covering this call arrives. ENOBUFS means
/// the optmem limit is reached: read completions and retry.
pub fn send_zerocopy(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live slice and its exact length is passed. The kernel keeps
    // references to its pages past the call; the callers in this workspace send only from
    // buffers that stay alive and unchanged until their completions are read.
    let rc = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_ZEROCOPY,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// True for the ENOBUFS of a MSG_ZEROCOPY send whose socket has too many notifications
/// pending (net.core.optmem_max): read completions, then retry.
pub fn is_optmem_full(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

/// MSG_ZEROCOPY completions read so far. The kernel numbers zero-copy send calls from 0 and
/// reports inclusive ranges [ee_info, ee_data] of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completions {
    /// Send calls completed.
    pub calls: u64,
    /// Of those, calls the kernel had to copy after all (SO_EE_CODE_ZEROCOPY_COPIED: always
    /// on loopback and veth, where skb_orphan_frags_rx copies the pages on delivery).
    pub copied: u64,
    /// Highest call number completed (+1), to know when every call is done.
    pub done_through: u64,
}

/// Reads every completion waiting on the error queue without blocking; returns how many
/// notifications were read.
pub fn read_completions(fd: BorrowedFd<'_>, into: &mut Completions) -> io::Result<usize> {
    let mut n = 0;
    let mut scratch = [0u8; 1];
    loop {
        match recv_raw(fd, &mut scratch, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) {
            Ok(r) => {
                if let Some(ee) = r.err
                    && ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY
                    && ee.ee_errno == 0
                {
                    let (lo, hi) = (ee.ee_info, ee.ee_data);
                    let calls = u64::from(hi.wrapping_sub(lo)) + 1;
                    into.calls += calls;
                    if ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                        into.copied += calls;
                    }
                    into.done_through = into.done_through.max(u64::from(hi) + 1);
                    n += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
            Err(e) => return Err(e),
        }
    }
}

/// `struct tcp_zerocopy_receive` (include/uapi/linux/tcp.h, 5.11+ layout; the kernel accepts
/// any length from the first two fields up and copies back as much as we pass).
#[repr(C)]
#[derive(Default)]
struct TcpZerocopyReceive {
    address: u64,
    length: u32,
    recv_skip_hint: u32,
    inq: u32,
    err: i32,
    copybuf_address: u64,
    copybuf_len: i32,
    flags: u32,
    msg_control: u64,
    msg_controllen: u64,
    msg_flags: u32,
    reserved: u32,
}

/// What one TCP_ZEROCOPY_RECEIVE call consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZcOutcome {
    /// Bytes mapped at the start of the window (whole pages).
    pub mapped: usize,
    /// Bytes copied into the copy buffer (the unaligned tail, or a small queue).
    pub copied: usize,
    /// Bytes that must be read with read(2) before mapping can go on.
    pub skip_hint: usize,
    /// Bytes left in the receive queue.
    pub inq: usize,
    /// The queue is empty and the peer has closed its side.
    pub eof: bool,
}

/// A read-only mmap of a TCP socket that received pages are mapped into.
pub struct ZeroCopyReceiver {
    addr: *mut libc::c_void,
    len: usize,
    /// Bytes of the window mapped by the last call (valid until the next call or release).
    mapped: usize,
}

// SAFETY: the mapping is owned by this value alone (no aliasing handles), so moving it to
// another thread is as safe as moving a Vec.
unsafe impl Send for ZeroCopyReceiver {}

impl ZeroCopyReceiver {
    /// Maps a window of `len` bytes (rounded up to pages) of the socket `fd`.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        let page = page_size();
        let len = len.max(page).div_ceil(page) * page;
        // SAFETY: a fresh shared read-only mapping of the socket; tcp_mmap() only accepts
        // PROT_READ without exec and the kernel picks the address, so no memory of ours is
        // touched. Failure is MAP_FAILED, checked below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ZeroCopyReceiver {
            addr,
            len,
            mapped: 0,
        })
    }

    pub fn window(&self) -> usize {
        self.len
    }

    /// One TCP_ZEROCOPY_RECEIVE: maps up to a window of whole pages, then copies up to
    /// `copybuf.len()` bytes of what cannot be mapped into `copybuf` (5.11+). Does not block;
    /// wait for readability (SO_RCVLOWAT) first.
    pub fn receive(&mut self, fd: BorrowedFd<'_>, copybuf: &mut [u8]) -> io::Result<ZcOutcome> {
        let mut zc = TcpZerocopyReceive {
            address: self.addr as u64,
            length: u32::try_from(self.len).unwrap_or(u32::MAX),
            copybuf_address: copybuf.as_mut_ptr() as u64,
            copybuf_len: i32::try_from(copybuf.len()).unwrap_or(i32::MAX),
            ..Default::default()
        };
        let mut len = size_of::<TcpZerocopyReceive>() as libc::socklen_t;
        self.mapped = 0;
        // SAFETY: `zc` is a live, correctly laid out struct and `len` its size. The kernel
        // maps pages only into our mapping [addr, addr+len) (it checks the VMA belongs to this
        // socket) and copies at most copybuf_len bytes into `copybuf`, which is borrowed
        // mutably for the call.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_ZEROCOPY_RECEIVE,
                (&mut zc as *mut TcpZerocopyReceive).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // An empty queue after the peer's FIN is EIO (tcp_zerocopy_receive: `!inq &&
            // sock_flag(sk, SOCK_DONE)`), the zero-copy form of read() returning 0.
            if e.raw_os_error() == Some(libc::EIO) {
                return Ok(ZcOutcome {
                    eof: true,
                    ..ZcOutcome::default()
                });
            }
            return Err(e);
        }
        if zc.err != 0 {
            return Err(io::Error::from_raw_os_error(zc.err.abs()));
        }
        self.mapped = zc.length as usize;
        Ok(ZcOutcome {
            mapped: zc.length as usize,
            copied: usize::try_from(zc.copybuf_len).unwrap_or(0),
            skip_hint: zc.recv_skip_hint as usize,
            inq: zc.inq as usize,
            eof: false,
        })
    }

    /// The bytes mapped by the last `receive`.
    pub fn mapped(&self) -> &[u8] {
        // SAFETY: the first `mapped` bytes of our read-only mapping hold pages the kernel
        // mapped in the last call; they stay mapped until the next call or release, both of
        // which need `&mut self`, so the slice cannot outlive them.
        unsafe { std::slice::from_raw_parts(self.addr.cast::<u8>(), self.mapped) }
    }

    /// Unmaps the pages of the last call now (MADV_DONTNEED, as tcp_mmap does), releasing
    /// them to the socket's memory accounting sooner than the next call's zap would.
    pub fn release(&mut self) -> io::Result<()> {
        if self.mapped == 0 {
            return Ok(());
        }
        let n = self.mapped.div_ceil(page_size()) * page_size();
        self.mapped = 0;
        // SAFETY: the range lies inside our own mapping; dropping its pages only affects it.
        let rc = unsafe { libc::madvise(self.addr, n.min(self.len), libc::MADV_DONTNEED) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for ZeroCopyReceiver {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` are exactly the mapping created in new(), unmapped once here.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the running system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::{set_max_segment, set_recv_low_water, wait_readable};
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    /// tcp_mmap's loopback recipe: MSS 4096 and a MSG_ZEROCOPY sender (whose pages loopback
    /// copies into order-0 pages) let the receiver map nearly everything.
    #[test]
    fn zerocopy_send_and_receive_on_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        set_max_segment(s.as_fd(), 4108).unwrap();
        s.connect(&l.local_addr().unwrap().into()).unwrap();
        let c: TcpStream = s.into();
        let (mut a, _) = l.accept().unwrap();
        enable_zerocopy_send(c.as_fd()).unwrap();
        let total = 8 << 20;
        let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        let sender = std::thread::spawn(move || {
            let mut off = 0;
            let mut done = Completions::default();
            let mut calls = 0u64;
            while off < data.len() {
                let end = (off + (256 << 10)).min(data.len());
                match send_zerocopy(c.as_fd(), &data[off..end]) {
                    Ok(n) => {
                        off += n;
                        calls += 1;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                    Err(e) => panic!("{e}"),
                }
                read_completions(c.as_fd(), &mut done).unwrap();
            }
            while done.done_through < calls {
                std::thread::sleep(std::time::Duration::from_millis(1));
                read_completions(c.as_fd(), &mut done).unwrap();
            }
            c.shutdown(std::net::Shutdown::Write).unwrap();
            (c, done, calls, data)
        });
        let mut zc = ZeroCopyReceiver::new(a.as_fd(), 512 << 10).unwrap();
        // Wake only when a whole window is queued: with less, the kernel copies everything
        // into the copy buffer instead of mapping (receive_fallback_to_copy).
        set_recv_low_water(a.as_fd(), 512 << 10).unwrap();
        let mut copybuf = vec![0u8; 64 << 10];
        let mut got = Vec::with_capacity(total);
        let (mut mapped, mut copied) = (0, 0);
        loop {
            assert!(wait_readable(a.as_fd(), 5000).unwrap());
            let o = zc.receive(a.as_fd(), &mut copybuf).unwrap();
            if o.eof {
                assert_eq!(a.read(&mut [0u8; 1]).unwrap(), 0);
                break;
            }
            got.extend_from_slice(zc.mapped());
            got.extend_from_slice(&copybuf[..o.copied]);
            mapped += o.mapped;
            copied += o.copied;
            zc.release().unwrap();
            if o.mapped == 0 && o.copied == 0 && o.skip_hint > 0 {
                let mut b = vec![0u8; o.skip_hint];
                a.read_exact(&mut b).unwrap();
                got.extend_from_slice(&b);
            }
        }
        let (c, done, calls, data) = sender.join().unwrap();
        assert_eq!(got, data);
        assert_eq!(done.calls, calls);
        // Loopback always copies zero-copy sends on delivery.
        assert_eq!(done.copied, calls);
        // Usually 99.99 % is mapped; when the sender's pushes end mid-page the kernel copies
        // those pages' leftovers instead, which was seen at up to 1.3 % (2 of 12 runs of the
        // crate's tests in parallel). Broken zero-copy maps 0 %; 95 % separates the two.
        assert!(
            mapped as f64 / total as f64 > 0.95,
            "mapped {mapped} copied {copied}"
        );
        drop(c);
    }
}
