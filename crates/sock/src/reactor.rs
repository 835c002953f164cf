//! A descriptor in tokio's reactor, for its readiness only: the caller does the I/O with its
//! own calls (netchannel's proxy waits on a channel's socket this way and reads it with the
//! same non-blocking pump the preload library uses).
//!
//! tokio 1.54 deprecated the safe `AsyncFd::with_interest` (tokio PR 8587: a safe
//! `AsRawFd` may hand out a descriptor that closes while registered). Taking an [`OwnedFd`]
//! is what makes the registration sound, so the `unsafe` stays here.

use std::io;
use std::os::fd::OwnedFd;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Registers `fd` (typically a dup of a socket another handle reads) for readability in
/// the current runtime's reactor. The socket may be blocking: nothing reads through this
/// registration. Must be called within a tokio runtime.
pub fn readable(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: register_with_interest needs the descriptor open, the same file, and the same
    // number from every as_raw_fd() for the AsyncFd's whole life. An OwnedFd owns its
    // number: it is open until the OwnedFd drops, which happens inside AsyncFd's drop after
    // the deregistration, and it always returns that one number.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn a_dup_in_the_reactor_reports_what_arrives_on_the_original() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        rt.block_on(async {
            let fd = readable(b.as_fd().try_clone_to_owned().unwrap()).unwrap();
            a.write_all(b"x").unwrap();
            let mut g = fd.readable().await.unwrap();
            let mut one = [0u8; 1];
            // Read through the original: the registration only reports.
            assert_eq!(crate::buf::recv_now(b.as_fd(), &mut one).unwrap(), 1);
            g.clear_ready();
        });
    }
}
