//! Pipes as in-kernel page queues: splice(2) moves a socket's received pages into a pipe
//! without copying them, and another thread read(2)s them out. This is how a TCP channel's
//! bytes can be copied to user memory by a thread other than the one that owns the socket
//! (a socket is read by one thread at a time; a pipe decouples the copy from that thread).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Both ends of one pipe, as files (read(2)/write(2) through `&File`).
pub struct Pipe {
    pub read: File,
    pub write: File,
}

impl Pipe {
    /// A close-on-exec pipe holding up to `capacity` bytes (F_SETPIPE_SZ; an unprivileged
    /// process may not go over /proc/sys/fs/pipe-max-size, 1 MiB by default).
    pub fn new(capacity: usize) -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a live two-element array, exactly what pipe2(2) writes.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let size = libc::c_int::try_from(capacity)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: F_SETPIPE_SZ takes an int argument; the descriptor is open.
        let rc = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, size) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pipe {
            read: File::from(read),
            write: File::from(write),
        })
    }
}

/// Moves up to `len` bytes from `from` (a socket) into `to` (a pipe's write end) without a
/// copy to user space; blocks like a read when nothing is queued. Ok(0) means end of stream.
pub fn splice_into(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the borrow; null offsets are required for sockets
    // and pipes (splice(2)); no memory of ours is touched.
    let n = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn socket_bytes_move_through_a_pipe() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        c.write_all(&data).unwrap();
        drop(c);
        let pipe = Pipe::new(1 << 20).unwrap();
        let mut got = Vec::new();
        loop {
            let n = splice_into(s.as_fd(), pipe.write.as_fd(), 65536).unwrap();
            if n == 0 {
                break;
            }
            let mut buf = vec![0u8; n];
            (&pipe.read).read_exact(&mut buf).unwrap();
            got.extend_from_slice(&buf);
        }
        assert_eq!(got, data);
    }
}
