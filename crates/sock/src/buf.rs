//! Reading into a vector's spare capacity: the bytes land once, with no zero-fill before; and
//! page-aligned buffers for the kernel to copy into.

use std::io;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Reads up to `max` bytes from a socket or pipe into `buf`'s spare capacity (growing it if
/// needed) without zero-filling it first, in one read(2); returns the count (0 = end of
/// stream). std's `read_to_end` would do the same but starts at 8 KiB per call and doubles,
/// costing several system calls per large frame.
pub fn read_append(fd: BorrowedFd<'_>, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    // SAFETY: `append_with` passes `len` writable bytes of spare capacity at `ptr`; read(2)
    // writes at most `len` bytes there and nothing else.
    append_with(buf, max, |ptr, len| unsafe {
        libc::read(fd.as_raw_fd(), ptr, len)
    })
}

/// As [`read_append`] from a socket, without blocking: Ok(None) when nothing is queued.
pub fn recv_append_now(
    fd: BorrowedFd<'_>,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<usize>> {
    // SAFETY: `append_with` passes `len` writable bytes of spare capacity at `ptr`; recv(2)
    // writes at most `len` bytes there and nothing else.
    let got = append_with(buf, max, |ptr, len| unsafe {
        libc::recv(fd.as_raw_fd(), ptr, len, libc::MSG_DONTWAIT)
    });
    match got {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// One recv(2) into `buf` that never blocks: WouldBlock when nothing is queued (whatever
/// the descriptor's O_NONBLOCK says, so a blocking socket shared with a writer can still be
/// read without waiting). Retries on EINTR.
pub fn recv_now(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; recv(2) writes at most
        // that many and nothing else.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One sendmsg(2) of `bufs` that never blocks (MSG_DONTWAIT, whatever the descriptor's
/// O_NONBLOCK says) and never raises SIGPIPE: the count the socket took, possibly short;
/// WouldBlock when its send buffer is full. Retries on EINTR.
pub fn send_vectored_now(fd: BorrowedFd<'_>, bufs: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec (std documents it); sendmsg only reads them.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
    loop {
        // SAFETY: `msg` points at `msg_iovlen` live iovecs for the duration of the call.
        let n = unsafe {
            libc::sendmsg(
                fd.as_raw_fd(),
                &msg,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Runs `op` (a read(2)-like call: at most `len` bytes to `ptr`, the count or -1) on up to
/// `max` bytes of `buf`'s spare capacity, retrying on EINTR, and extends `buf` by the count.
fn append_with(
    buf: &mut Vec<u8>,
    max: usize,
    mut op: impl FnMut(*mut libc::c_void, usize) -> isize,
) -> io::Result<usize> {
    buf.reserve(max);
    let spare = buf.spare_capacity_mut();
    let want = max.min(spare.len());
    loop {
        let n = op(spare.as_mut_ptr().cast(), want);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        // SAFETY: `op` wrote the first `n` (≤ want ≤ spare) bytes after the current length:
        // the kernel initialised them.
        unsafe { buf.set_len(buf.len() + n) };
        return Ok(n);
    }
}

/// Appends exactly `n` bytes from `fd` to `buf` (several reads if they arrive in pieces);
/// UnexpectedEof if the stream ends first.
pub fn read_append_exact(fd: BorrowedFd<'_>, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    let want = buf.len() + n;
    while buf.len() < want {
        if read_append(fd, buf, want - buf.len())? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Where [`AlignedBuf`] starts: a page, as iperf3's mmap'd buffers and tcp_mmap's do.
pub const BUF_ALIGN: usize = 4096;

/// A zeroed byte buffer whose first byte is page-aligned, for reads the kernel copies into.
///
/// Why: the kernel copies to user space with `rep movsb` on CPUs with fast short rep-mov
/// (`copy_user_generic`, arch/x86/include/asm/uaccess_64.h), and on the AMD EPYC measured
/// here that copy ran at half speed into a destination that is not 64-byte aligned. glibc
/// serves allocations from 128 KiB up with mmap and a 16-byte chunk header, so a plain
/// `vec![0u8; 128 << 10]` starts at 16 mod 64, and every read into it pays. Measured on the
/// 2-vCPU EPYC VM (veth, 4 flows, one select() reader): 13.8-17.3 Gbit/s into a 16-byte-offset
/// buffer, 29-42 into a 64- or 4096-aligned one (BENCHMARKS.md, issue 14 sixth pass).
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes, starting on a [`BUF_ALIGN`] boundary.
    pub fn new(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + BUF_ALIGN];
        // A u8 pointer can always be aligned, so align_offset is exact (< BUF_ALIGN).
        let start = storage.as_ptr().align_offset(BUF_ALIGN);
        AlignedBuf {
            storage,
            start,
            len,
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

// Not derived: a copied Vec lands at a new address, so the offset must be found again.
impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        let mut b = AlignedBuf::new(self.len);
        b.copy_from_slice(self);
        b
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn aligned_buffers_start_on_a_page_and_hold_exactly_their_length() {
        for len in [0, 1, 64, 4095, 4096, 128 << 10, (1 << 20) + 3] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0, "len {len}");
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            if len > 0 {
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
            let c = b.clone();
            assert_eq!(c.as_ptr() as usize % BUF_ALIGN, 0, "a clone is aligned too");
            assert_eq!(&c[..], &b[..]);
        }
    }

    #[test]
    fn read_append_fills_spare_capacity_exactly() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let w = std::thread::spawn(move || {
            c.write_all(&data).unwrap();
            data
        });
        let mut got = vec![7u8; 3];
        while got.len() < 3 + 300_000 {
            let left = 3 + 300_000 - got.len();
            let n = read_append(s.as_fd(), &mut got, left.min(70_000)).unwrap();
            assert!(n > 0 && n <= 70_000);
        }
        let data = w.join().unwrap();
        assert_eq!(&got[..3], &[7, 7, 7]);
        assert_eq!(&got[3..], &data[..]);
        drop(data);
    }

    #[test]
    fn read_append_exact_reads_a_pipe_and_reports_a_short_one() {
        let p = crate::pipe::Pipe::new(1 << 16).unwrap();
        (&p.write).write_all(&[1, 2, 3, 4, 5]).unwrap();
        let mut v = vec![9];
        read_append_exact(p.read.as_fd(), &mut v, 3).unwrap();
        assert_eq!(v, [9, 1, 2, 3]);
        drop(p.write);
        let e = read_append_exact(p.read.as_fd(), &mut v, 5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(v, [9, 1, 2, 3, 4, 5]);
    }
}
