//! Which signal interrupted a wait, so that a blocking call on a virtual socket restarts as
//! the kernel restarts a TCP one: when the handler of *the signal that came* has SA_RESTART
//! (and the socket has no timeout), not when every handler has it (signal(7), "Interruption
//! of system calls and library functions by signal handlers"; sock_intr_errno in
//! include/net/sock.h).
//!
//! The library interposes the calls that install handlers (sigaction and glibc's other names
//! for it, signal and its variants, sigset) and installs, for each handler the program asks
//! for, a trampoline with the program's own mask and flags (plus SA_SIGINFO, so it gets all
//! three arguments to pass on): it notes the signal in a per-thread set, then calls the
//! program's handler. The flags themselves are never kept here: a wait that a signal
//! interrupted reads that signal's SA_RESTART from the kernel, so siginterrupt(3) (which glibc
//! does with calls of its own, not interposed) is seen too. The program reads back its own
//! handler and SA_SIGINFO bit.
//!
//! Not wrapped: the signals a fault raises in the thread that faults (SIGSEGV, SIGBUS, SIGILL,
//! SIGFPE, SIGTRAP, SIGSYS, SIGABRT): they never interrupt a wait of another thread's making,
//! and a handler there (a runtime's stack-overflow guard, a crash reporter) is best left
//! exactly as installed. A wait interrupted with no signal noted (a handler installed past
//! these calls, e.g. by raw syscall) falls back to the rule of [`crate::sys::signals_restart`].

use crate::sys::{self, real};
use libc::{c_int, c_void, sighandler_t};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Signals 1..=64.
const NSIG: usize = 65;

/// The program's handler for each wrapped signal (0: none, the trampoline is not installed).
static HANDLERS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
/// Whether the program asked for SA_SIGINFO (read back by it; the trampoline always passes
/// three arguments, which a one-argument handler ignores under the C calling convention).
static SIGINFO: [AtomicBool; NSIG] = [const { AtomicBool::new(false) }; NSIG];

thread_local! {
    /// Signals whose handler ran on this thread since its wait began (bit `sig - 1`). An
    /// atomic, so that a handler interrupting another on the same thread loses no bit; no
    /// destructor and a constant initializer, so the slot is plain thread-local storage that a
    /// signal handler may touch.
    static SEEN: AtomicU64 = const { AtomicU64::new(0) };
}

fn wrapped(sig: c_int) -> bool {
    (1..NSIG as c_int).contains(&sig)
        && !matches!(
            sig,
            libc::SIGKILL
                | libc::SIGSTOP
                | libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGILL
                | libc::SIGFPE
                | libc::SIGTRAP
                | libc::SIGSYS
                | libc::SIGABRT
        )
}

fn is_handler(h: sighandler_t) -> bool {
    h != libc::SIG_DFL && h != libc::SIG_IGN && h != libc::SIG_ERR
}

type Handler = unsafe extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);

extern "C" fn trampoline(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    if !(1..NSIG as c_int).contains(&sig) {
        return;
    }
    // try_with: a thread being torn down has no slot; its signal is then not noted.
    let _ = SEEN.try_with(|s| s.fetch_or(1 << (sig - 1), Ordering::Relaxed));
    let h = HANDLERS[sig as usize].load(Ordering::Acquire);
    if is_handler(h) {
        // SAFETY: `h` is a handler the program installed for `sig`; the kernel called this
        // trampoline with the three arguments an SA_SIGINFO handler takes, and a handler
        // without SA_SIGINFO takes the first and ignores the others (x86-64 and aarch64 pass
        // them in registers; the kernel itself sets all three for every handler).
        unsafe { std::mem::transmute::<usize, Handler>(h)(sig, info, ctx) };
    }
}

fn tramp() -> sighandler_t {
    trampoline as Handler as usize
}

type RealSigaction =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

fn real_sigaction() -> RealSigaction {
    real!(sigaction: fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int)
}

/// What the program reads back of a disposition the kernel holds: its own handler and
/// SA_SIGINFO bit where the trampoline stands.
fn translate(old: &mut libc::sigaction, prev: sighandler_t, prev_info: bool) {
    if old.sa_sigaction == tramp() {
        old.sa_sigaction = prev;
        old.sa_flags &= !libc::SA_SIGINFO;
        if prev_info {
            old.sa_flags |= libc::SA_SIGINFO;
        }
    }
}

/// sigaction(2) for a wrapped signal: a handler goes in behind the trampoline.
///
/// # Safety
/// sigaction's contract: `act` and `old` null or valid.
unsafe fn sigaction_wrapped(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let real = real_sigaction();
    if !wrapped(sig) {
        // SAFETY: forwarded unchanged.
        return unsafe { real(sig, act, old) };
    }
    let i = sig as usize;
    let prev = HANDLERS[i].load(Ordering::Acquire);
    let prev_info = SIGINFO[i].load(Ordering::Relaxed);
    // SAFETY: `act` is null or valid (the caller's contract).
    let r = match unsafe { act.as_ref() } {
        Some(a) if is_handler(a.sa_sigaction) && a.sa_sigaction != tramp() => {
            // The handler first: a signal that comes as soon as the trampoline is in finds it.
            SIGINFO[i].store(a.sa_flags & libc::SA_SIGINFO != 0, Ordering::Relaxed);
            HANDLERS[i].store(a.sa_sigaction, Ordering::Release);
            let mut mine = *a;
            mine.sa_sigaction = tramp();
            mine.sa_flags |= libc::SA_SIGINFO;
            // SAFETY: `mine` is a valid sigaction; `old` as given.
            let r = unsafe { real(sig, &raw const mine, old) };
            if r != 0 {
                HANDLERS[i].store(prev, Ordering::Release);
                SIGINFO[i].store(prev_info, Ordering::Relaxed);
            }
            r
        }
        given => {
            // SAFETY: forwarded unchanged.
            let r = unsafe { real(sig, act, old) };
            if r == 0 && given.is_some_and(|a| !is_handler(a.sa_sigaction)) {
                HANDLERS[i].store(0, Ordering::Release);
            }
            r
        }
    };
    if r == 0 {
        // SAFETY: `old` is null or valid (the caller's contract).
        if let Some(o) = unsafe { old.as_mut() } {
            translate(o, prev, prev_info);
        }
    }
    r
}

/// After one of glibc's other calls installed a handler with its own calls (not
/// interposed): the trampoline goes in front of it, with the flags glibc chose.
fn adopt(sig: c_int) {
    let real = real_sigaction();
    // SAFETY: a zeroed sigaction is a valid out-parameter.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null `act` only queries.
    if unsafe { real(sig, std::ptr::null(), &raw mut cur) } != 0 {
        return;
    }
    let i = sig as usize;
    let h = cur.sa_sigaction;
    if h == tramp() {
        return;
    }
    if !is_handler(h) {
        HANDLERS[i].store(0, Ordering::Release);
        return;
    }
    SIGINFO[i].store(cur.sa_flags & libc::SA_SIGINFO != 0, Ordering::Relaxed);
    HANDLERS[i].store(h, Ordering::Release);
    cur.sa_sigaction = tramp();
    cur.sa_flags |= libc::SA_SIGINFO;
    // SAFETY: `cur` is a valid sigaction.
    unsafe { real(sig, &raw const cur, std::ptr::null_mut()) };
}

/// Runs glibc's `call` (signal and the like), then puts the trampoline in front; what the
/// call returns is the program's previous handler, never the trampoline.
fn around(sig: c_int, call: impl FnOnce() -> sighandler_t) -> sighandler_t {
    if !wrapped(sig) {
        return call();
    }
    let prev = HANDLERS[sig as usize].load(Ordering::Acquire);
    let old = call();
    if old == libc::SIG_ERR {
        return old;
    }
    adopt(sig);
    if old == tramp() { prev } else { old }
}

/// A wait on a virtual socket begins: no signal has come yet.
pub(crate) fn wait_begins() {
    let _ = SEEN.try_with(|s| s.store(0, Ordering::Relaxed));
}

/// A wait was interrupted (EINTR): whether to wait again, as the kernel restarts a socket
/// call without a timeout. Yes only when every signal whose handler ran during it has
/// SA_RESTART now (the kernel decides by the first; a second without SA_RESTART would have
/// interrupted the restarted call).
pub(crate) fn restart_after_interrupt() -> bool {
    let seen = SEEN.try_with(|s| s.swap(0, Ordering::Relaxed)).unwrap_or(0);
    if seen == 0 {
        return sys::signals_restart();
    }
    let real = real_sigaction();
    (1..NSIG as c_int)
        .filter(|sig| seen & (1 << (sig - 1)) != 0)
        .all(|sig| {
            // SAFETY: a zeroed sigaction is a valid out-parameter.
            let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null `act` only queries.
            let ok = unsafe { real(sig, std::ptr::null(), &raw mut cur) } == 0;
            ok && cur.sa_flags & libc::SA_RESTART != 0
        })
}

// ---- the interposed calls ----

/// # Safety
/// The C prototype of sigaction(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { sigaction_wrapped(sig, act, old) }
}

/// # Safety
/// As [`sigaction`] (glibc exports it under this name too).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { sigaction_wrapped(sig, act, old) }
}

/// # Safety
/// The C prototype of signal(3) (glibc: BSD semantics, SA_RESTART unless siginterrupt).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, h: sighandler_t) -> sighandler_t {
    let f = real!(signal: fn(c_int, sighandler_t) -> sighandler_t);
    // SAFETY: forwarded unchanged.
    around(sig, || unsafe { f(sig, h) })
}

/// # Safety
/// The C prototype of bsd_signal(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: c_int, h: sighandler_t) -> sighandler_t {
    let f = real!(bsd_signal: fn(c_int, sighandler_t) -> sighandler_t);
    // SAFETY: forwarded unchanged.
    around(sig, || unsafe { f(sig, h) })
}

/// # Safety
/// The C prototype of ssignal(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ssignal(sig: c_int, h: sighandler_t) -> sighandler_t {
    let f = real!(ssignal: fn(c_int, sighandler_t) -> sighandler_t);
    // SAFETY: forwarded unchanged.
    around(sig, || unsafe { f(sig, h) })
}

/// # Safety
/// The C prototype of sysv_signal(3) (what `signal` is under strict ISO C).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sysv_signal(sig: c_int, h: sighandler_t) -> sighandler_t {
    let f = real!(sysv_signal: fn(c_int, sighandler_t) -> sighandler_t);
    // SAFETY: forwarded unchanged.
    around(sig, || unsafe { f(sig, h) })
}

/// # Safety
/// As [`sysv_signal`] (the name glibc's headers redirect `signal` to).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, h: sighandler_t) -> sighandler_t {
    let f = real!(__sysv_signal: fn(c_int, sighandler_t) -> sighandler_t);
    // SAFETY: forwarded unchanged.
    around(sig, || unsafe { f(sig, h) })
}

/// # Safety
/// The C prototype of sigset(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigset(sig: c_int, h: sighandler_t) -> sighandler_t {
    let f = real!(sigset: fn(c_int, sighandler_t) -> sighandler_t);
    // SAFETY: forwarded unchanged.
    around(sig, || unsafe { f(sig, h) })
}

#[cfg(test)]
mod tests {
    use super::*;

    static COUNT: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" {
        // glibc's, which changes SA_RESTART through its own internal sigaction calls.
        fn siginterrupt(sig: c_int, flag: c_int) -> c_int;
    }

    extern "C" fn count(_: c_int) {
        COUNT.fetch_add(1, Ordering::SeqCst);
    }

    fn installed(sig: c_int) -> libc::sigaction {
        // SAFETY: a zeroed sigaction is a valid out-parameter; a null `act` only queries.
        unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            assert_eq!(real_sigaction()(sig, std::ptr::null(), &raw mut cur), 0);
            cur
        }
    }

    /// A handler goes in behind the trampoline with the program's flags; the program reads
    /// back its own handler and flags; the trampoline notes the signal and calls the handler;
    /// the restart decision follows the flags of the signal that came, including a change
    /// siginterrupt(3) makes behind the library's back.
    #[test]
    fn handlers_are_wrapped_read_back_and_decide_restarts_by_their_own_flags() {
        let sig = libc::SIGUSR1;
        // SAFETY: plain sigaction/raise calls on this test's own signal.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = count as extern "C" fn(c_int) as usize;
            act.sa_flags = libc::SA_RESTART;
            assert_eq!(sigaction(sig, &raw const act, std::ptr::null_mut()), 0);
            let k = installed(sig);
            assert_eq!(k.sa_sigaction, tramp());
            assert_ne!(k.sa_flags & libc::SA_SIGINFO, 0);
            let mut back: libc::sigaction = std::mem::zeroed();
            assert_eq!(sigaction(sig, std::ptr::null(), &raw mut back), 0);
            assert_eq!(back.sa_sigaction, act.sa_sigaction);
            assert_eq!(
                back.sa_flags & (libc::SA_SIGINFO | libc::SA_RESTART),
                libc::SA_RESTART
            );

            wait_begins();
            libc::raise(sig);
            assert_eq!(COUNT.load(Ordering::SeqCst), 1);
            assert!(restart_after_interrupt(), "SA_RESTART handler");

            assert_eq!(siginterrupt(sig, 1), 0);
            assert_eq!(installed(sig).sa_sigaction, tramp(), "siginterrupt kept it");
            wait_begins();
            libc::raise(sig);
            assert_eq!(COUNT.load(Ordering::SeqCst), 2);
            assert!(
                !restart_after_interrupt(),
                "siginterrupt took SA_RESTART away"
            );

            // signal(3): BSD semantics (SA_RESTART unless siginterrupt said otherwise, which
            // glibc remembers: undone first), also behind the trampoline.
            assert_eq!(siginterrupt(sig, 0), 0);
            let old = signal(sig, count as extern "C" fn(c_int) as usize);
            assert_eq!(
                old, act.sa_sigaction,
                "signal returns the program's handler"
            );
            assert_eq!(installed(sig).sa_sigaction, tramp());
            wait_begins();
            libc::raise(sig);
            assert_eq!(COUNT.load(Ordering::SeqCst), 3);
            assert!(restart_after_interrupt());

            assert_eq!(
                signal(sig, libc::SIG_DFL),
                count as extern "C" fn(c_int) as usize
            );
            assert_eq!(installed(sig).sa_sigaction, libc::SIG_DFL);
            assert_eq!(HANDLERS[sig as usize].load(Ordering::Relaxed), 0);
        }
    }
}
