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
/// afterwards (threads inherit the mask, and so do programs started from them: see
/// [`unblock_termination_in`]). Call it before starting threads, then [`wait_termination`] in
/// one of them.
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

/// Makes the program `cmd` starts begin with SIGINT, SIGTERM and SIGHUP unblocked. A child
/// inherits its parent's signal mask across fork and execve (signal(7)), and std's `Command`
/// leaves it alone: without this, a program started by a process that called
/// [`block_termination`] would ignore Ctrl-C and `kill`.
pub fn unblock_termination_in(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    let s = set();
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it makes one, sigprocmask(2), on a sigset_t it
    // owns (a copy, made before the fork), and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sigprocmask(libc::SIG_UNBLOCK, &s, std::ptr::null_mut()) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        })
    }
}

/// Makes the program `cmd` starts receive SIGKILL when the thread that started it ends
/// (PR_SET_PDEATHSIG, prctl(2)): a virtual machine or server a test started does not outlive
/// the test, even when the test is killed with SIGKILL and no destructor runs.
pub fn die_with_parent(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and makes one
    // async-signal-safe system call, prctl(2), with constant arguments; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        })
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP set `stop` instead of killing the process, so a server
/// started in the background by a script ends its run, restores what it changed and prints its
/// summary when stopped with `kill`. Call it before starting threads (they inherit the blocked
/// signals; one thread waits for them).
pub fn stop_on_termination(stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> io::Result<()> {
    block_termination()?;
    std::thread::Builder::new()
        .name("stop-on-signal".into())
        .spawn(move || {
            if wait_termination().is_ok() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })?;
    Ok(())
}

/// Sends SIGKILL to every process of the process group `pgid` (a command started with
/// `process_group(0)` leads its own group, so its children go with it).
pub fn kill_group(pgid: u32) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid)
        .ok()
        .filter(|p| *p > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process group id"))?;
    // SAFETY: kill(2) takes plain integers; a negative pid names the group, and pgid > 1 keeps
    // it from ever meaning "every process" (-1).
    if unsafe { libc::kill(-pgid, libc::SIGKILL) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
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

    #[test]
    fn a_started_program_gets_the_termination_signals_unblocked() {
        let h = std::thread::spawn(|| {
            block_termination().unwrap();
            let blocked = |unblock: bool| {
                let mut c = std::process::Command::new("grep");
                c.args(["^SigBlk:", "/proc/self/status"]);
                if unblock {
                    unblock_termination_in(&mut c);
                }
                let out = c.output().unwrap();
                let line = String::from_utf8(out.stdout).unwrap();
                u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
            };
            (blocked(false), blocked(true))
        });
        let (inherited, unblocked) = h.join().unwrap();
        let term = 1u64 << (libc::SIGTERM - 1);
        assert_ne!(inherited & term, 0, "the mask is inherited: {inherited:x}");
        assert_eq!(unblocked & term, 0, "and undone: {unblocked:x}");
    }
}
