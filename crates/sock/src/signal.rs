//! Turning Ctrl-C and `kill` into an orderly exit: the terminating signals are blocked in every
//! thread and one thread takes them with sigwait(2), so cleanup runs in normal code (namespaces
//! deleted, changes undone) instead of inside a signal handler where almost nothing is allowed.

use std::io;

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it before any use.
    let mut s: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is a live sigset_t; sigemptyset/sigaddset only write inside it, and the
    // signal numbers are valid constants.
    unsafe {
        libc::sigemptyset(&mut s);
        for sig in SIGNALS {
            libc::sigaddset(&mut s, sig);
        }
    }
    s
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and so in every thread it starts
/// afterwards (threads inherit the mask; programs started with `std::process::Command` get an
/// empty mask back). Call it before starting threads, then [`wait_termination`] in one of them.
pub fn block_termination() -> io::Result<()> {
    let s = set();
    // SAFETY: `s` is initialized; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &s, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Waits until SIGINT, SIGTERM or SIGHUP arrives (they must be blocked, see
/// [`block_termination`]) and returns its number.
pub fn wait_termination() -> io::Result<i32> {
    let s = set();
    let mut sig: libc::c_int = 0;
    // SAFETY: `s` is initialized and `sig` is a valid place for the result.
    let rc = unsafe { libc::sigwait(&s, &mut sig) };
    if rc == 0 {
        Ok(sig)
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_sigterm_is_taken_by_the_waiting_thread() {
        // In a thread of its own, so the test harness's other threads keep their masks.
        let h = std::thread::spawn(|| {
            block_termination().unwrap();
            // SAFETY: raising a blocked signal at this thread only marks it pending.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGTERM) };
            wait_termination().unwrap()
        });
        assert_eq!(h.join().unwrap(), libc::SIGTERM);
    }
}
