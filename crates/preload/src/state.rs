//! The library's process-wide state: its settings, the endpoint, and which file descriptors
//! are virtual sockets. A descriptor the program holds for a virtual socket is an eventfd (a
//! real kernel object, so its number is the program's and poll/epoll can watch it); the
//! socket itself lives in [`Obj`].
//!
//! Lookups of descriptors that are not ours (nearly every call a program makes) cost one
//! atomic load: a bitmap says which numbers are ours.
//!
//! fork(2): only the calling thread survives in the child, so the endpoint's I/O threads do
//! not; the child must never touch a virtual socket it inherited (its channels are the
//! parent's TCP connections: a byte written from the child would corrupt the parent's
//! stream, and a lock held by a parent thread at the fork stays held). The fork handlers take
//! this module's locks around the fork, and every object remembers the process that made it.

use crate::config::Settings;
use crate::sys;
use libc::c_int;
use netchannel::{Config, Endpoint, VListener, VSocket};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockWriteGuard};
use std::task::Waker;
use std::time::Duration;

/// Descriptors below this are looked up in the bitmap (one atomic load). A virtual socket
/// may still live above it (`F_DUPFD` to 65,536 and beyond, as TCP allows): such numbers are
/// counted in [`HIGH`] and looked up in the table, so a program without them pays nothing.
pub(crate) const MAX_FD: usize = 1 << 16;
/// Virtual-socket descriptors at or above [`MAX_FD`].
static HIGH: AtomicU64 = AtomicU64::new(0);

pub(crate) struct Bitmap([AtomicU64; MAX_FD / 64]);

impl Bitmap {
    const fn new() -> Bitmap {
        Bitmap([const { AtomicU64::new(0) }; MAX_FD / 64])
    }

    fn get(&self, fd: c_int) -> bool {
        fd >= 0
            && (fd as usize) < MAX_FD
            && self.0[fd as usize / 64].load(Ordering::Acquire) & (1 << (fd % 64)) != 0
    }

    fn set(&self, fd: c_int, on: bool) {
        if fd < 0 || fd as usize >= MAX_FD {
            return;
        }
        let bit = 1u64 << (fd % 64);
        if on {
            self.0[fd as usize / 64].fetch_or(bit, Ordering::AcqRel);
        } else {
            self.0[fd as usize / 64].fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

static OURS: Bitmap = Bitmap::new();
/// epoll descriptors that watch at least one virtual socket.
pub(crate) static EPOLL_OURS: Bitmap = Bitmap::new();
static TABLE: RwLock<BTreeMap<c_int, Arc<Obj>>> = RwLock::new(BTreeMap::new());
static ENDPOINT: Mutex<Option<Arc<Endpoint>>> = Mutex::new(None);
/// This process's id, set again in a fork's child.
static PID: AtomicU32 = AtomicU32::new(0);

pub(crate) fn is_ours(fd: c_int) -> bool {
    if fd >= 0 && fd as usize >= MAX_FD {
        return HIGH.load(Ordering::Acquire) > 0
            && TABLE
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&fd);
    }
    OURS.get(fd)
}

/// The virtual-socket descriptors in `first..=last`, with their objects.
pub(crate) fn in_range(first: c_int, last: c_int) -> Vec<c_int> {
    TABLE
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .range(first..=last)
        .map(|(fd, _)| *fd)
        .collect()
}

pub(crate) fn epoll_is_ours(fd: c_int) -> bool {
    EPOLL_OURS.get(fd)
}

pub(crate) fn set_epoll_ours(fd: c_int, on: bool) {
    EPOLL_OURS.set(fd, on);
}

pub(crate) fn get(fd: c_int) -> Option<Arc<Obj>> {
    if !is_ours(fd) {
        return None;
    }
    TABLE
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&fd)
        .cloned()
}

pub(crate) fn insert(fd: c_int, obj: Arc<Obj>) {
    if fd < 0 {
        return;
    }
    let prev = TABLE
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(fd, obj);
    if fd as usize >= MAX_FD {
        if prev.is_none() {
            HIGH.fetch_add(1, Ordering::AcqRel);
        }
    } else {
        OURS.set(fd, true);
    }
}

/// A connect the peer refused goes over TCP after all: every number naming `obj` becomes a
/// copy of `kernel` (with the FD_CLOEXEC the program set) and stops being ours, and `then`
/// runs for each (the epoll sets' registrations move over), all under the table's lock, so a
/// close or a dup of one of them comes wholly before or wholly after. The numbers.
pub(crate) fn hand_back(obj: &Arc<Obj>, kernel: &OwnedFd, then: impl Fn(c_int)) -> Vec<c_int> {
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    let numbers: Vec<c_int> = t
        .iter()
        .filter(|(_, o)| Arc::ptr_eq(o, obj))
        .map(|(fd, _)| *fd)
        .collect();
    let flags = if obj.cloexec.load(Ordering::Relaxed) {
        libc::O_CLOEXEC
    } else {
        0
    };
    let dup3 = sys::real!(dup3: fn(c_int, c_int, c_int) -> c_int);
    let mut moved = Vec::new();
    for fd in numbers {
        // SAFETY: both descriptors are open (the number is the program's, still ours under
        // the lock); dup3 replaces the eventfd copy there atomically.
        if unsafe { dup3(kernel.as_raw_fd(), fd, flags) } < 0 {
            continue;
        }
        t.remove(&fd);
        if fd as usize >= MAX_FD {
            HIGH.fetch_sub(1, Ordering::AcqRel);
        } else {
            OURS.set(fd, false);
        }
        then(fd);
        moved.push(fd);
    }
    moved
}

/// Every number naming `old` names `new` from now on (a finished connect; dups included).
pub(crate) fn succeed(old: &Arc<Obj>, new: &Arc<Obj>) {
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    for v in t.values_mut() {
        if Arc::ptr_eq(v, old) {
            *v = new.clone();
        }
    }
}

pub(crate) fn remove(fd: c_int) -> Option<Arc<Obj>> {
    if !is_ours(fd) {
        return None;
    }
    OURS.set(fd, false);
    let gone = TABLE.write().unwrap_or_else(|p| p.into_inner()).remove(&fd);
    if gone.is_some() && fd as usize >= MAX_FD {
        HIGH.fetch_sub(1, Ordering::AcqRel);
    }
    gone
}

pub(crate) fn pid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    let p = std::process::id();
    PID.store(p, Ordering::Relaxed);
    p
}

/// The settings, read once; a program started with settings that do not parse is stopped
/// before it runs with them (the CLI checks them first, so this is someone setting the
/// variables by hand).
pub(crate) fn settings() -> &'static Settings {
    static S: OnceLock<Settings> = OnceLock::new();
    S.get_or_init(|| match Settings::from_env(|k| std::env::var(k).ok()) {
        Ok(s) => s,
        Err(e) => {
            sys::say(&format!("bad setting {e}; stopping"));
            // SAFETY: ends the process; nothing of it is used after.
            unsafe { libc::_exit(2) }
        }
    })
}

/// `0` (or `refuse`): a connect whose session the peer refuses fails with ECONNREFUSED.
/// Unset, `1` (or `tcp`): it goes over plain TCP instead (the default, as OpenOnload's
/// EF_NO_FAIL falls back to the kernel's stack when it cannot accelerate a socket).
pub(crate) const ENV_FALLBACK: &str = "NETSTEER_NC_FALLBACK";
/// Sessions one peer address may hold with this process when it accepts channels
/// (`max_sessions_per_peer`; default [`netchannel::preload_env::SESSIONS_PER_PEER`]): a host
/// whose prefork workers each talk to this one needs one session per worker.
pub(crate) const ENV_SESSIONS_PER_PEER: &str = "NETSTEER_NC_SESSIONS_PER_PEER";

/// The library's settings beyond netchannel's [`Settings`], read once like them.
pub(crate) struct Extra {
    pub fallback: bool,
    pub sessions_per_peer: Option<usize>,
}

impl Extra {
    fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Extra, String> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let fallback = match get(ENV_FALLBACK).as_deref().map(str::trim) {
            None | Some("1" | "tcp") => true,
            Some("0" | "refuse") => false,
            Some(v) => return Err(format!("{ENV_FALLBACK}={v:?}: need 1 (tcp) or 0 (refuse)")),
        };
        let sessions_per_peer = match get(ENV_SESSIONS_PER_PEER) {
            None => None,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=MAX_SESSIONS).contains(&n) => Some(n),
                _ => {
                    return Err(format!(
                        "{ENV_SESSIONS_PER_PEER}={v:?}: need a number in 1..={MAX_SESSIONS}"
                    ));
                }
            },
        };
        Ok(Extra {
            fallback,
            sessions_per_peer,
        })
    }
}

/// Sessions a preloaded program accepts in all (`apply_peer_caps`' max_sessions).
const MAX_SESSIONS: usize = 128;

pub(crate) fn extra() -> &'static Extra {
    static E: OnceLock<Extra> = OnceLock::new();
    E.get_or_init(|| match Extra::from_env(|k| std::env::var(k).ok()) {
        Ok(e) => e,
        Err(e) => {
            sys::say(&format!("bad setting {e}; stopping"));
            // SAFETY: ends the process; nothing of it is used after.
            unsafe { libc::_exit(2) }
        }
    })
}

/// How long a peer that refused this process a session is not asked again: connects to it
/// meanwhile go straight to their fallback (no handshake each, no line each), and after it a
/// place the peer freed is found.
const REFUSAL_MEMORY: Duration = Duration::from_secs(5);
static REFUSED: Mutex<Vec<(SocketAddr, std::time::Instant)>> = Mutex::new(Vec::new());

/// `peer` refused this process a session now.
pub(crate) fn note_refused(peer: SocketAddr) {
    let mut g = REFUSED.lock().unwrap_or_else(|p| p.into_inner());
    g.retain(|(p, at)| *p != peer && at.elapsed() < REFUSAL_MEMORY);
    g.push((peer, std::time::Instant::now()));
}

/// Whether `peer` refused this process a session within [`REFUSAL_MEMORY`].
pub(crate) fn recently_refused(peer: SocketAddr) -> bool {
    let mut g = REFUSED.lock().unwrap_or_else(|p| p.into_inner());
    g.retain(|(_, at)| at.elapsed() < REFUSAL_MEMORY);
    g.iter().any(|(p, _)| *p == peer)
}

/// The endpoint of this process, made on first use (so a parent that only forks workers, as
/// nginx's master does, never makes one).
pub(crate) fn endpoint() -> std::io::Result<Arc<Endpoint>> {
    let mut g = ENDPOINT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = &*g {
        return Ok(e.clone());
    }
    let s = settings();
    let mut cfg = Config {
        throughput_channels: s.channels,
        latency_channels: s.latency_channels,
        window: s.window,
        max_frame: s.window.min(1 << 20),
        // The program's own thread writes its frames when a channel is idle: no hand-off
        // to the channel's writer per write(2) (as the proxy does).
        inline_send: true,
        async_inline_send: true,
        session_memory: s.session_memory,
        app_driven: s.app_driven,
        ..Config::default()
    };
    netchannel::preload_env::apply_peer_caps(&mut cfg);
    if let Some(n) = extra().sessions_per_peer {
        // One address's sessions count against its prefix's too: a prefix takes at least
        // what one of its hosts may (channels: three a session, the default layout).
        cfg.max_sessions_per_peer = n;
        cfg.max_sessions_per_prefix = cfg.max_sessions_per_prefix.max(n);
        cfg.max_channels_per_prefix = cfg.max_channels_per_prefix.max(3 * n).min(cfg.max_channels);
    }
    let e = Arc::new(match s.listen {
        Some(addr) => Endpoint::listen(addr, cfg)?,
        None => Endpoint::new(cfg)?,
    });
    if s.listen.is_some() {
        let ep = Arc::downgrade(&e);
        // Without it, no thread: the program still runs; only the lines are missing.
        let _ = std::thread::Builder::new()
            .name("nc-refusals".into())
            .spawn(move || report_refusals(&ep));
    }
    *g = Some(e.clone());
    Ok(e)
}

/// Says on stderr, at most once a second, that the endpoint refused peers and by which cap
/// (the newest refusal names it): a refused peer learns only that it was refused, since the
/// handshake has no refusal message.
fn report_refusals(ep: &std::sync::Weak<Endpoint>) {
    let mut said = 0u64;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let Some(e) = ep.upgrade() else { return };
        let st = e.stats();
        drop(e);
        let now = st.rejected_channels + st.rejected_opens;
        if now != said {
            sys::say(&format!(
                "netchannel refused peers {} time(s) since the last such line; the newest: {}",
                now.saturating_sub(said),
                st.last_rejection.as_deref().unwrap_or("?")
            ));
            said = now;
        }
    }
}

/// The driver of this process's endpoint when it has one and its program's threads read the
/// channels (a wait never makes the endpoint: a process with no virtual socket has none).
pub(crate) fn driver() -> Option<Arc<netchannel::Driver>> {
    let g = ENDPOINT.lock().unwrap_or_else(|p| p.into_inner());
    g.as_ref()?.driver().cloned()
}

/// Wakes whoever waits on a virtual socket: an eventfd of the object's own (never the
/// program's descriptor, which the program may close while a waker is still out).
pub(crate) struct Wake {
    pub fd: OwnedFd,
}

impl std::task::Wake for Wake {
    fn wake(self: Arc<Self>) {
        sys::kick(self.fd.as_raw_fd());
    }

    fn wake_by_ref(self: &Arc<Self>) {
        sys::kick(self.fd.as_raw_fd());
    }
}

/// Socket options the program set on a virtual socket: kept, read back, and the few that
/// change behaviour applied (timeouts, SO_LINGER zero).
#[derive(Default)]
pub(crate) struct SockState {
    pub opts: BTreeMap<(c_int, c_int), Vec<u8>>,
    pub shut_rd: bool,
    pub linger_abort: bool,
    pub rcvtimeo: Option<Duration>,
    pub sndtimeo: Option<Duration>,
    /// The error poll reported and SO_ERROR has not yet handed out.
    pub error_taken: bool,
}

pub(crate) enum Kind {
    Stream {
        vs: VSocket,
        local: SocketAddr,
        peer: SocketAddr,
    },
    Listener {
        /// The kernel's listening socket (kept so plain TCP clients still connect).
        real: OwnedFd,
        port: u16,
        /// The virtual port, bound on first use by the process that accepts.
        virt: Mutex<Option<VListener>>,
        failed: AtomicBool,
    },
    /// A non-blocking connect that needs a session dialed first: connect(2) said EINPROGRESS
    /// and a thread dials. When it is done the table holds a `Stream` object sharing this
    /// one's eventfd (so the program's number, and its epoll registrations, stay right) and
    /// `done` points at it; a failure is kept for SO_ERROR and every later call.
    Connecting {
        to: SocketAddr,
        done: OnceLock<Result<Arc<Obj>, c_int>>,
        /// The failure was handed out by SO_ERROR.
        error_taken: AtomicBool,
        /// The program's kernel socket, kept (when fallback is allowed) so that a refused
        /// session can hand the connection back to TCP: see [`hand_back`].
        kernel: Mutex<Option<OwnedFd>>,
        /// Handed back: the program's numbers name the kernel socket now; whoever still
        /// holds this object looks again.
        handed_back: AtomicBool,
    },
}

pub(crate) struct Obj {
    pub kind: Kind,
    pub wake: Arc<Wake>,
    pub waker: Waker,
    /// The process that may use it (see the module docs): the one that made it, or for a
    /// listener whose virtual port was never bound, the first process that uses it (nginx's
    /// master listens, its worker accepts).
    pub owner: AtomicU32,
    pub nonblock: AtomicBool,
    /// FD_CLOEXEC as the program set it. The descriptor itself is always close-on-exec: a
    /// virtual socket cannot live on in an exec'd program (its endpoint is this process's),
    /// and a descriptor passed on would read as an eventfd there, wrong data; closed, the
    /// program gets EBADF.
    pub cloexec: AtomicBool,
    pub st: Mutex<SockState>,
}

impl Obj {
    pub fn new(kind: Kind, nonblock: bool, cloexec: bool) -> std::io::Result<Arc<Obj>> {
        Ok(Obj::with_wake(kind, sys::eventfd()?, nonblock, cloexec))
    }

    /// The object a finished connect becomes: `kind`, with this one's eventfd and waker (the
    /// program's number is a dup of that eventfd), flags and socket options.
    pub fn successor(&self, kind: Kind) -> Arc<Obj> {
        let st = std::mem::take(&mut *self.st());
        Arc::new(Obj {
            kind,
            wake: self.wake.clone(),
            waker: self.waker.clone(),
            owner: AtomicU32::new(self.owner.load(Ordering::Acquire)),
            nonblock: AtomicBool::new(self.nonblock.load(Ordering::Relaxed)),
            cloexec: AtomicBool::new(self.cloexec.load(Ordering::Relaxed)),
            st: Mutex::new(st),
        })
    }

    /// An object around eventfd `efd`, made by the caller (who then cannot fail after taking
    /// the socket).
    pub fn with_wake(kind: Kind, efd: OwnedFd, nonblock: bool, cloexec: bool) -> Arc<Obj> {
        let wake = Arc::new(Wake { fd: efd });
        Arc::new(Obj {
            kind,
            waker: Waker::from(wake.clone()),
            wake,
            owner: AtomicU32::new(pid()),
            nonblock: AtomicBool::new(nonblock),
            cloexec: AtomicBool::new(cloexec),
            st: Mutex::new(SockState::default()),
        })
    }

    pub fn efd(&self) -> c_int {
        self.wake.fd.as_raw_fd()
    }

    pub fn st(&self) -> MutexGuard<'_, SockState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this process may use it.
    pub fn usable(&self, call: &str) -> Result<(), c_int> {
        let owner = self.owner.load(Ordering::Acquire);
        if owner == pid() {
            return Ok(());
        }
        if let Kind::Listener { virt, failed, .. } = &self.kind
            && !failed.load(Ordering::Relaxed)
            // try_lock: a lock some thread of the parent held at the fork stays held here.
            && virt.try_lock().is_ok_and(|g| g.is_none())
            && self
                .owner
                .compare_exchange(owner, pid(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(());
        }
        sys::say(&format!(
            "{call}() on a netchannel socket inherited across fork(): it belongs to process \
             {owner} (its channels are that process's connections); refused"
        ));
        Err(libc::EOPNOTSUPP)
    }

    /// The virtual listener, bound now if this is the first use in this process. None if
    /// it cannot be (the kernel listener still serves plain TCP clients).
    pub fn virt(&self) -> Option<MutexGuard<'_, Option<VListener>>> {
        let Kind::Listener {
            port, virt, failed, ..
        } = &self.kind
        else {
            return None;
        };
        let mut g = virt.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            if failed.load(Ordering::Relaxed) {
                return None;
            }
            match endpoint().and_then(|e| e.bind(*port)) {
                Ok(l) => {
                    if settings().verbose {
                        sys::say(&format!("listening on virtual port {port}"));
                    }
                    *g = Some(l);
                }
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    sys::say(&format!(
                        "port {port}: netchannel listener not available ({e}); this process \
                         accepts only plain TCP connections on it"
                    ));
                    return None;
                }
            }
        }
        Some(g)
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        if let Kind::Stream { vs, .. } = &self.kind {
            let abort = self.st.get_mut().is_ok_and(|s| s.linger_abort);
            if abort {
                vs.abort(netchannel::RstReason::Aborted);
            }
        }
    }
}

/// Releases an object: the last reference closes the virtual socket (FIN, or RST with
/// SO_LINGER 0), except in a process that did not make it, which must not touch the
/// parent's channels and leaks it instead.
pub(crate) fn release(obj: Arc<Obj>) {
    if obj.owner.load(Ordering::Acquire) != pid() {
        std::mem::forget(obj);
    }
}

thread_local! {
    static HELD: std::cell::RefCell<Option<Held>> = const { std::cell::RefCell::new(None) };
}

type Held = (
    RwLockWriteGuard<'static, BTreeMap<c_int, Arc<Obj>>>,
    MutexGuard<'static, Option<Arc<Endpoint>>>,
    crate::epoll::Held,
);

extern "C" fn before_fork() {
    let held = (
        TABLE.write().unwrap_or_else(|p| p.into_inner()),
        ENDPOINT.lock().unwrap_or_else(|p| p.into_inner()),
        crate::epoll::hold(),
    );
    HELD.with(|h| *h.borrow_mut() = Some(held));
}

extern "C" fn after_fork_parent() {
    HELD.with(|h| h.borrow_mut().take());
}

extern "C" fn after_fork_child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    HELD.with(|h| {
        if let Some(mut held) = h.borrow_mut().take() {
            // The parent's endpoint is of no use here (its threads are gone); the child makes
            // its own if it ever needs one. Forgotten, not dropped: dropping would close the
            // parent's channels from here.
            if let Some(e) = held.1.take() {
                std::mem::forget(e);
            }
        }
    });
}

/// Registers the fork handlers; called once from the library's constructor.
pub(crate) fn init() {
    pid();
    // SAFETY: the handlers are plain extern "C" functions that live as long as the process.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_and_the_session_cap_are_read_and_bad_values_named() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let e = Extra::from_env(env(&[])).unwrap();
        assert!(e.fallback && e.sessions_per_peer.is_none());
        let e =
            Extra::from_env(env(&[(ENV_FALLBACK, "0"), (ENV_SESSIONS_PER_PEER, "32")])).unwrap();
        assert!(!e.fallback && e.sessions_per_peer == Some(32));
        assert!(Extra::from_env(env(&[(ENV_FALLBACK, "refuse")])).is_ok_and(|e| !e.fallback));
        assert!(Extra::from_env(env(&[(ENV_FALLBACK, "tcp")])).is_ok_and(|e| e.fallback));
        let bad = Extra::from_env(env(&[(ENV_FALLBACK, "maybe")]))
            .err()
            .unwrap();
        assert!(bad.contains(ENV_FALLBACK), "{bad}");
        for v in ["0", "129", "x"] {
            let pairs: &'static [(&str, &str)] = Box::leak(Box::new([(ENV_SESSIONS_PER_PEER, v)]));
            let bad = Extra::from_env(env(pairs)).err().unwrap();
            assert!(bad.contains(ENV_SESSIONS_PER_PEER), "{bad}");
        }
    }

    /// A virtual socket above the bitmap (F_DUPFD to 65,536 and beyond) is found, counted and
    /// forgotten like one below it.
    #[test]
    fn descriptors_past_the_bitmap_are_looked_up_in_the_table() {
        // Any descriptor stands in for the listener's kernel socket (a real listen(2) in this
        // binary would go through the library's own hook).
        let real = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let obj = Obj::new(
            Kind::Listener {
                real,
                port: 1,
                virt: Mutex::new(None),
                failed: AtomicBool::new(false),
            },
            false,
            true,
        )
        .unwrap();
        for fd in [(MAX_FD + 7) as c_int, 70_000, c_int::MAX - 1] {
            assert!(!is_ours(fd));
            insert(fd, obj.clone());
            insert(fd, obj.clone());
            assert!(is_ours(fd) && get(fd).is_some());
            assert_eq!(in_range(fd, fd), [fd]);
            assert_eq!(HIGH.load(Ordering::Acquire), 1);
            assert!(remove(fd).is_some());
            assert!(!is_ours(fd) && remove(fd).is_none());
            assert_eq!(HIGH.load(Ordering::Acquire), 0);
        }
    }
}
