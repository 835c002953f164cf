//! Reading into a vector's spare capacity: the bytes land once, with no zero-fill before.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Reads up to `max` bytes from a socket or pipe into `buf`'s spare capacity (growing it if
/// needed) without zero-filling it first, in one read(2); returns the count (0 = end of
/// stream). std's `read_to_end` would do the same but starts at 8 KiB per call and doubles,
/// costing several system calls per large frame.
pub fn read_append(fd: BorrowedFd<'_>, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let spare = buf.spare_capacity_mut();
    let want = max.min(spare.len());
    loop {
        // SAFETY: `spare` is the vector's uninitialised spare capacity, at least `want` bytes
        // long; read(2) writes at most `want` bytes there and nothing else.
        let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), want) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        // SAFETY: the kernel initialised the first `n` (≤ want ≤ spare) bytes after the
        // current length.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

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
