//! Waking a thread that sleeps in a blocking receive without giving the socket a timeout.
//!
//! A receive timeout (SO_RCVTIMEO) arms a kernel timer on every sleep, which costs about
//! 0.2 µs per round trip on this VM; a ping-pong benchmark does not want that on its hot path.
//! Instead the thread sleeps with no timeout, and a watchdog interrupts it with a signal when a
//! deadline passes: SIGURG with an empty handler installed without SA_RESTART, so the receive
//! returns EINTR. SIGURG's default action is to be ignored, so a signal that arrives before the
//! handler is installed (or after) is harmless.

use std::io;
use std::sync::OnceLock;

extern "C" fn on_wake(_: libc::c_int) {}

/// Installs the handler once per process.
pub fn install() -> io::Result<()> {
    static DONE: OnceLock<Result<(), i32>> = OnceLock::new();
    let r = DONE.get_or_init(|| {
        // SAFETY: sigaction is plain data; all-zero is a valid value that is filled in below.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_wake as *const () as usize;
        // No SA_RESTART: the interrupted receive must return EINTR instead of resuming.
        sa.sa_flags = 0;
        // SAFETY: `sa` is initialized and outlives the call; the handler is async-signal-safe
        // (it does nothing); a null old-action pointer is allowed.
        let rc = unsafe { libc::sigaction(libc::SIGURG, &sa, std::ptr::null_mut()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    });
    r.map_err(io::Error::from_raw_os_error)
}

/// Interrupts `thread` (from `JoinHandleExt::as_pthread_t`); its blocking call returns EINTR.
pub fn interrupt(thread: libc::pthread_t) -> io::Result<()> {
    // SAFETY: the caller passes the pthread_t of a thread it still holds the JoinHandle of, so
    // the thread has not been joined and its id is valid; SIGURG has a handler or is ignored.
    let rc = unsafe { libc::pthread_kill(thread, libc::SIGURG) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::unix::thread::JoinHandleExt;
    use std::time::{Duration, Instant};

    #[test]
    fn a_blocked_receive_returns_eintr() {
        install().unwrap();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let h = std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            sock.recv(&mut buf).map(|_| ()).map_err(|e| e.kind())
        });
        let t = Instant::now();
        // Signal until the thread has returned (it may not be blocked yet at the first one).
        while !h.is_finished() {
            std::thread::sleep(Duration::from_millis(20));
            interrupt(h.as_pthread_t()).unwrap();
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "receive was not interrupted"
            );
        }
        assert_eq!(h.join().unwrap(), Err(io::ErrorKind::Interrupted));
    }
}
