//! epoll for a program whose epoll set holds virtual sockets.
//!
//! The kernel cannot know when a virtual socket is readable, so each registered socket's
//! eventfd (and a listener's kernel socket) goes into the program's own epoll set,
//! edge-triggered, under a token: a random 64-bit base whose low 32 bits carry the program's
//! descriptor number. Whenever the endpoint's threads change a socket's state they add to its
//! eventfd, and the program's epoll_wait returns. epoll_wait then asks the woken sockets (and
//! the level-triggered ones that were ready last time) for their readiness, reports them under
//! the program's own data, and hides the tokens. Level- and edge-triggered registrations and
//! EPOLLONESHOT keep their meaning: an edge-triggered socket is reported again only after a
//! change woke it. (A program's own data equal to a token is the one collision possible:
//! one in 2^32 per descriptor for data chosen at random, none for the pointers and small
//! integers programs store.)

use crate::state::{self, Kind, Obj};
use crate::sys::{self, real};
use libc::{c_int, epoll_event};
use netchannel::{DrivenChannel, Driver};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockWriteGuard};
use std::task::Context;
use std::time::Instant;

struct Reg {
    obj: Arc<Obj>,
    events: u32,
    data: u64,
    disabled: bool,
    /// Descriptors in the program's set for this registration.
    watch: Vec<Watch>,
}

/// A descriptor watched for a registration: the object's own (removed from the set by number),
/// or a dup made for a second registration of the same socket (closed with it).
enum Watch {
    Shared(c_int),
    Own(OwnedFd),
}

impl Watch {
    fn fd(&self) -> c_int {
        match self {
            Watch::Shared(fd) => *fd,
            Watch::Own(o) => o.as_raw_fd(),
        }
    }
}

pub(crate) struct EpState {
    /// The program's epoll descriptor.
    epfd: c_int,
    /// The process that made it (see [`not_inherited`]).
    owner: u32,
    regs: BTreeMap<c_int, Reg>,
    /// Registrations the program deleted whose descriptors are still open: their eventfds
    /// stay in the kernel's set (an arrival there is ignored), so that adding the socket
    /// again costs no system call. Event loops such as redis-benchmark's delete and add a
    /// socket twice per request; each was an epoll_ctl on the eventfd, a quarter of the
    /// client's CPU time in `perf`. At most one per open descriptor; closing it removes it.
    parked: BTreeMap<c_int, Reg>,
    /// Registrations to ask on the next wait without a wake: new ones and level-triggered
    /// ones that were ready.
    recheck: Vec<c_int>,
    /// The endpoint's channels, in the set level-triggered under channel tokens, so a wait
    /// wakes for an arrival and reads it itself (netchannel's `drive`), and the driver's
    /// generation they are of.
    chans: Vec<DrivenChannel>,
    chan_gen: Option<u64>,
}

static SETS: RwLock<BTreeMap<c_int, Arc<Mutex<EpState>>>> = RwLock::new(BTreeMap::new());

pub(crate) type Held = RwLockWriteGuard<'static, BTreeMap<c_int, Arc<Mutex<EpState>>>>;

pub(crate) fn hold() -> Held {
    SETS.write().unwrap_or_else(|p| p.into_inner())
}

/// The low bits of a token: the program's descriptor.
const TOKEN_FD: u64 = 0xffff_ffff;

/// The base of this process's tokens (low 32 bits zero).
fn token() -> u64 {
    static T: OnceLock<u64> = OnceLock::new();
    *T.get_or_init(|| {
        let mut v = 0u64;
        // SAFETY: `v` is 8 writable bytes.
        let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, 0) };
        if n != 8 {
            v = u64::from(std::process::id()) << 32 ^ 0x6e65_7473_7465_6572;
        }
        v & !TOKEN_FD
    })
}

/// The base of the tokens of channel sockets (low 32 bits: the channel's key).
fn chan_token() -> u64 {
    token() ^ (1 << 63)
}

/// Brings the set's channel registrations up to the driver's list: new channels in, dead
/// ones out (the set holds each channel's handle, so its descriptor is still open to be
/// removed by number).
fn sync_channels(s: &mut EpState, d: &Driver) {
    let generation = d.generation();
    if s.chan_gen == Some(generation) {
        return;
    }
    let now = d.channels();
    let keep = |c: &DrivenChannel| now.iter().any(|n| n.key() == c.key());
    for c in s.chans.iter().filter(|c| !keep(c)) {
        let _ = ctl_real(s.epfd, libc::EPOLL_CTL_DEL, c.fd().as_raw_fd(), 0, 0);
    }
    s.chans.retain(keep);
    for c in now {
        if s.chans.iter().any(|o| o.key() == c.key()) {
            continue;
        }
        let tok = chan_token() | (c.key() & TOKEN_FD);
        match ctl_real(
            s.epfd,
            libc::EPOLL_CTL_ADD,
            c.fd().as_raw_fd(),
            libc::EPOLLIN as u32,
            tok,
        ) {
            Ok(()) | Err(libc::EEXIST) => s.chans.push(c),
            // Not in the set: the standby reads it.
            Err(_) => {}
        }
    }
    s.chan_gen = Some(generation);
}

fn lock(m: &Mutex<EpState>) -> MutexGuard<'_, EpState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn set_of(epfd: c_int) -> Option<Arc<Mutex<EpState>>> {
    SETS.read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&epfd)
        .cloned()
}

fn ctl_real(epfd: c_int, op: c_int, fd: c_int, events: u32, data: u64) -> Result<(), c_int> {
    let ctl = real!(epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int);
    let mut ev = epoll_event { events, u64: data };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    if unsafe { ctl(epfd, op, fd, &raw mut ev) } < 0 {
        return Err(sys::errno());
    }
    Ok(())
}

fn dup_cloexec(fd: c_int) -> Result<OwnedFd, c_int> {
    let fcntl = real!(fcntl: fn(c_int, c_int, libc::c_long) -> c_int);
    // SAFETY: F_DUPFD_CLOEXEC takes an int argument and returns a new descriptor or -1.
    let n = unsafe { fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if n < 0 {
        return Err(sys::errno());
    }
    // SAFETY: `n` is a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// epoll_ctl on a virtual socket `fd`.
pub(crate) fn ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    obj: Arc<Obj>,
    ev: Option<&epoll_event>,
) -> Result<(), c_int> {
    obj.usable("epoll_ctl")?;
    // A set seen for the first time is recorded only once a registration in it worked (the
    // kernel refuses a descriptor that is not an epoll set).
    let (set, new) = match set_of(epfd) {
        Some(s) => (s, false),
        None if op == libc::EPOLL_CTL_ADD => {
            let st = EpState {
                epfd,
                owner: state::pid(),
                regs: BTreeMap::new(),
                parked: BTreeMap::new(),
                recheck: Vec::new(),
                chans: Vec::new(),
                chan_gen: None,
            };
            (Arc::new(Mutex::new(st)), true)
        }
        None => return Err(libc::ENOENT),
    };
    let mut s = lock(&set);
    not_inherited(&s, "epoll_ctl")?;
    match op {
        libc::EPOLL_CTL_ADD => {
            if s.regs.contains_key(&fd) {
                return Err(libc::EEXIST);
            }
            let ev = ev.ok_or(libc::EFAULT)?;
            let watch = match s.parked.remove(&fd) {
                Some(p) if Arc::ptr_eq(&p.obj, &obj) => p.watch,
                other => {
                    if let Some(p) = other {
                        unwatch(&s, p);
                    }
                    watch(epfd, fd, &obj)?
                }
            };
            s.regs.insert(
                fd,
                Reg {
                    obj,
                    events: ev.events,
                    data: ev.u64,
                    disabled: false,
                    watch,
                },
            );
            s.recheck.push(fd);
            drop(s);
            if new {
                SETS.write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(epfd, set.clone());
                state::set_epoll_ours(epfd, true);
            }
            // A listener binds its virtual port as soon as an event loop watches it, so
            // peers can connect before its first wait.
            if let Some(r) = lock(&set).regs.get(&fd) {
                let _ = r.obj.virt();
            }
        }
        libc::EPOLL_CTL_MOD => {
            let ev = ev.ok_or(libc::EFAULT)?;
            let r = s.regs.get_mut(&fd).ok_or(libc::ENOENT)?;
            r.events = ev.events;
            r.data = ev.u64;
            r.disabled = false;
            s.recheck.push(fd);
        }
        libc::EPOLL_CTL_DEL => {
            let r = s.regs.remove(&fd).ok_or(libc::ENOENT)?;
            if let Some(old) = s.parked.insert(fd, r) {
                unwatch(&s, old);
            }
        }
        _ => return Err(libc::EINVAL),
    }
    Ok(())
}

/// Puts the socket's eventfd (and a listener's kernel socket) in the program's set under
/// `fd`'s token; all or nothing. The object's own eventfd goes in as it is; a second
/// registration of the same socket in this set (under a dup'ed number) needs a descriptor of
/// its own.
fn watch(epfd: c_int, fd: c_int, obj: &Obj) -> Result<Vec<Watch>, c_int> {
    let mut watch = Vec::new();
    let mut fds = vec![obj.efd()];
    if let Kind::Listener { real, .. } = &obj.kind {
        fds.push(real.as_raw_fd());
    }
    let ev = (libc::EPOLLIN | libc::EPOLLET) as u32;
    let tok = token() | (fd as u64 & TOKEN_FD);
    for wfd in fds {
        let r = match ctl_real(epfd, libc::EPOLL_CTL_ADD, wfd, ev, tok) {
            Ok(()) => Ok(Watch::Shared(wfd)),
            Err(libc::EEXIST) => dup_cloexec(wfd).and_then(|own| {
                ctl_real(epfd, libc::EPOLL_CTL_ADD, own.as_raw_fd(), ev, tok)?;
                Ok(Watch::Own(own))
            }),
            Err(e) => Err(e),
        };
        match r {
            Ok(w) => watch.push(w),
            Err(e) => {
                for w in &watch {
                    let _ = ctl_real(epfd, libc::EPOLL_CTL_DEL, w.fd(), 0, 0);
                }
                return Err(e);
            }
        }
    }
    Ok(watch)
}

fn unwatch(s: &EpState, r: Reg) {
    for w in &r.watch {
        let _ = ctl_real(s.epfd, libc::EPOLL_CTL_DEL, w.fd(), 0, 0);
    }
    state::release(r.obj);
}

/// A virtual socket's descriptor was closed: it leaves every set (the kernel does the same
/// for a closed file).
pub(crate) fn forget_fd(fd: c_int) {
    let sets: Vec<_> = SETS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    for set in sets {
        let mut s = lock(&set);
        if let Some(r) = s.regs.remove(&fd) {
            unwatch(&s, r);
        }
        if let Some(r) = s.parked.remove(&fd) {
            unwatch(&s, r);
        }
    }
}

/// A virtual socket's number names its kernel socket now (a refused connect handed back to
/// TCP, [`state::hand_back`]): each set's registration of it becomes the kernel's own, with
/// the program's events and data; one the program had deleted is gone.
pub(crate) fn handed_back(fd: c_int) {
    let sets: Vec<_> = SETS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    for set in sets {
        let mut s = lock(&set);
        if let Some(r) = s.regs.remove(&fd) {
            let (events, data, disabled) = (r.events, r.data, r.disabled);
            unwatch(&s, r);
            // A one-shot registration that fired stays disarmed: interest in nothing.
            let events = if disabled {
                events & (libc::EPOLLONESHOT | libc::EPOLLET) as u32
            } else {
                events
            };
            let _ = ctl_real(s.epfd, libc::EPOLL_CTL_ADD, fd, events, data);
        }
        if let Some(r) = s.parked.remove(&fd) {
            unwatch(&s, r);
        }
    }
}

/// An epoll descriptor was closed. A set the program holds under another number too (a dup)
/// lives on under that number.
pub(crate) fn forget_set(epfd: c_int) {
    state::set_epoll_ours(epfd, false);
    let mut sets = SETS.write().unwrap_or_else(|p| p.into_inner());
    let Some(set) = sets.remove(&epfd) else {
        return;
    };
    let other = sets
        .iter()
        .find(|(_, s)| Arc::ptr_eq(s, &set))
        .map(|(fd, _)| *fd);
    drop(sets);
    let mut s = lock(&set);
    if let Some(other) = other {
        if s.epfd == epfd {
            s.epfd = other;
        }
        return;
    }
    let parked = std::mem::take(&mut s.parked);
    for (_, r) in std::mem::take(&mut s.regs).into_iter().chain(parked) {
        state::release(r.obj);
    }
}

/// The epoll sets numbered in `lo..=hi` are closed (close_range, closefrom, dup2 over one).
pub(crate) fn forget_sets_in(lo: c_int, hi: c_int) {
    let fds: Vec<c_int> = SETS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .range(lo..=hi)
        .map(|(fd, _)| *fd)
        .collect();
    for fd in fds {
        forget_set(fd);
    }
}

/// `new` is a dup of `old` (dup, dup2/dup3, F_DUPFD): when `old` is a set with virtual
/// sockets, `new` names the same set (a wait on it must translate the tokens too).
pub(crate) fn dup_set(old: c_int, new: c_int) {
    if !state::epoll_is_ours(old) || old == new {
        return;
    }
    let mut sets = SETS.write().unwrap_or_else(|p| p.into_inner());
    if let Some(set) = sets.get(&old).cloned() {
        sets.insert(new, set);
        state::set_epoll_ours(new, true);
    }
}

/// A set made by another process (inherited across fork) is never used here: its virtual
/// sockets' channels are that process's connections, and the kernel set itself is shared, so
/// a wait here would take the parent's edge-triggered wake-ups and read frames off its
/// channels (its connection then died with EPIPE).
fn not_inherited(s: &EpState, call: &str) -> Result<(), c_int> {
    if s.owner == state::pid() {
        return Ok(());
    }
    sys::say(&format!(
        "{call}() on epoll set {} inherited across fork(): it watches netchannel sockets of \
         process {} (their channels are that process's connections); refused",
        s.epfd, s.owner
    ));
    Err(libc::EOPNOTSUPP)
}

/// The epoll events of `obj` now, leaving its waker on what is not ready.
pub(crate) fn events_of(obj: &Obj) -> u32 {
    let mut cx = Context::from_waker(&obj.waker);
    match &obj.kind {
        Kind::Stream { vs, .. } => {
            let r = vs.readiness(Some(&mut cx));
            let shut_rd = obj.st().shut_rd;
            let mut ev = 0;
            if r.readable || shut_rd {
                ev |= libc::EPOLLIN | libc::EPOLLRDNORM;
            }
            if r.read_closed || shut_rd {
                ev |= libc::EPOLLRDHUP;
            }
            if r.writable {
                ev |= libc::EPOLLOUT | libc::EPOLLWRNORM;
            }
            if r.error {
                ev |= libc::EPOLLERR;
            }
            if r.error || (r.read_closed && r.write_closed) {
                ev |= libc::EPOLLHUP;
            }
            ev as u32
        }
        Kind::Connecting { done, .. } => match done.get() {
            // Still dialing, or handed back to TCP (its numbers are looked up again).
            None => 0,
            Some(Ok(next)) => events_of(next),
            // As a failed TCP connect polls: writable, with an error, hung up.
            Some(Err(_)) => (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32,
        },
        Kind::Listener { real, .. } => {
            let virt = obj
                .virt()
                .is_some_and(|g| g.as_ref().is_some_and(|l| l.has_pending(Some(&mut cx))));
            if virt || kernel_readable(real.as_raw_fd()) {
                (libc::EPOLLIN | libc::EPOLLRDNORM) as u32
            } else {
                0
            }
        }
    }
}

pub(crate) fn kernel_readable(fd: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let poll = real!(poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
    // SAFETY: one valid pollfd.
    unsafe { poll(&raw mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
}

/// What the program waits with: epoll_wait, epoll_pwait (a signal mask) or epoll_pwait2 (a
/// timespec).
pub(crate) enum Waiter {
    Wait,
    Pwait(*const libc::sigset_t),
    Pwait2(*const libc::sigset_t),
}

/// epoll_wait on a set that watches virtual sockets. `timeout_ns` < 0: no timeout.
///
/// # Safety
/// `events` must be valid for `max` writes.
pub(crate) unsafe fn wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout_ns: i64,
    how: Waiter,
) -> c_int {
    let Some(set) = set_of(epfd) else {
        // Its last virtual socket left in between: a plain epoll set again.
        // SAFETY: forwarded from the caller's contract.
        return unsafe { wait_real(epfd, events, max, timeout_ns, &how) };
    };
    if max <= 0 || events.is_null() {
        sys::set_errno(libc::EINVAL);
        return -1;
    }
    if let Err(e) = not_inherited(&lock(&set), "epoll_wait") {
        sys::set_errno(e);
        return -1;
    }
    let max = max as usize;
    let deadline = (timeout_ns >= 0)
        .then(|| Instant::now() + std::time::Duration::from_nanos(timeout_ns as u64));
    let base = token();
    let chan_base = chan_token();
    let driver = state::driver();
    loop {
        let ours = collect(&set, max);
        let room = max - ours.len();
        let remaining_ns: i64 = if !ours.is_empty() {
            0
        } else {
            match deadline {
                None => -1,
                Some(d) => d.saturating_duration_since(Instant::now()).as_nanos() as i64,
            }
        };
        let watched = match &driver {
            Some(d) => {
                let mut g = lock(&set);
                sync_channels(&mut g, d);
                g.chans.clone()
            }
            None => Vec::new(),
        };
        let n = if room > 0 {
            let _waiting = netchannel::watch(&watched);
            // SAFETY: `events` is valid for `max` ≥ `room` entries (the caller's contract).
            unsafe { wait_real(epfd, events, room as c_int, remaining_ns, &how) }
        } else {
            0
        };
        if n < 0 && ours.is_empty() {
            return -1;
        }
        let n = n.max(0) as usize;
        // SAFETY: the first `n` entries were written by epoll_wait; `max` are valid.
        let out = unsafe { std::slice::from_raw_parts_mut(events, max) };
        let mut kept = 0;
        let mut woke = Vec::new();
        let mut arrived = Vec::new();
        for i in 0..n {
            if out[i].u64 & !TOKEN_FD == base {
                woke.push((out[i].u64 & TOKEN_FD) as c_int);
            } else if out[i].u64 & !TOKEN_FD == chan_base {
                arrived.push(out[i].u64 & TOKEN_FD);
            } else {
                out[kept] = out[i];
                kept += 1;
            }
        }
        for e in &ours {
            out[kept] = *e;
            kept += 1;
        }
        // Frames on a channel: read them here, on this thread. The sockets they were for
        // signal their eventfds, which the next look at the set reports.
        let pumped = !arrived.is_empty();
        if pumped {
            let chans: Vec<DrivenChannel> = lock(&set)
                .chans
                .iter()
                .filter(|c| arrived.contains(&(c.key() & TOKEN_FD)))
                .cloned()
                .collect();
            for c in chans {
                c.pump();
            }
            if driver.is_none() {
                // A forked child waiting on its parent's set: the channels are not its to
                // read. Never spin on them.
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if !woke.is_empty() {
            // Asked now, in the room left (the rest wait for the next call); a socket already
            // reported in this call is not reported twice.
            let mut s = lock(&set);
            let seen: Vec<u64> = ours.iter().map(|e| e.u64).collect();
            woke.retain(|fd| s.regs.get(fd).is_none_or(|r| !seen.contains(&r.data)));
            let (evs, again) = ask(&mut s, woke.clone(), max - kept);
            s.recheck.extend(again);
            for e in evs {
                out[kept] = e;
                kept += 1;
            }
        }
        if kept > 0 {
            return kept as c_int;
        }
        if !woke.is_empty() || (pumped && driver.is_some()) {
            // Asked again at once: what the pump made ready is reported without a wait.
            continue;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return 0;
        }
    }
}

/// Asks the sockets to recheck (new, modified, level-triggered and ready last time) for
/// their events (at most `max` reported; the others stay for the next call).
fn collect(set: &Mutex<EpState>, max: usize) -> Vec<epoll_event> {
    let mut s = lock(set);
    let cands = std::mem::take(&mut s.recheck);
    let (out, again) = ask(&mut s, cands, max);
    s.recheck = again;
    out
}

/// The events of registrations `cands`, and those to ask again next time (level-triggered
/// ones that were ready, and any beyond `max`).
fn ask(s: &mut EpState, mut cands: Vec<c_int>, max: usize) -> (Vec<epoll_event>, Vec<c_int>) {
    cands.sort_unstable();
    cands.dedup();
    let mut out = Vec::new();
    let mut again = Vec::new();
    for fd in cands {
        let Some(r) = s.regs.get_mut(&fd) else {
            continue;
        };
        if r.disabled {
            continue;
        }
        if out.len() >= max {
            again.push(fd);
            continue;
        }
        let want = r.events | (libc::EPOLLERR | libc::EPOLLHUP) as u32;
        let ev = events_of(&r.obj) & want;
        if ev == 0 {
            continue;
        }
        out.push(epoll_event {
            events: ev,
            u64: r.data,
        });
        if r.events & libc::EPOLLONESHOT as u32 != 0 {
            r.disabled = true;
        } else if r.events & libc::EPOLLET as u32 == 0 {
            again.push(fd);
        }
    }
    (out, again)
}

/// # Safety
/// `events` valid for `max` entries.
unsafe fn wait_real(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    ns: i64,
    how: &Waiter,
) -> c_int {
    let ms = if ns < 0 {
        -1
    } else {
        // Rounded up: a wait must not end before its time.
        (ns as u64).div_ceil(1_000_000).min(c_int::MAX as u64) as c_int
    };
    match *how {
        Waiter::Wait => {
            let f = real!(epoll_wait: fn(c_int, *mut epoll_event, c_int, c_int) -> c_int);
            // SAFETY: forwarded from the caller's contract.
            unsafe { f(epfd, events, max, ms) }
        }
        Waiter::Pwait(mask) => {
            let f = real!(epoll_pwait: fn(c_int, *mut epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int);
            // SAFETY: forwarded from the caller's contract; `mask` is the program's.
            unsafe { f(epfd, events, max, ms, mask) }
        }
        Waiter::Pwait2(mask) => {
            let ts = (ns >= 0).then_some(libc::timespec {
                tv_sec: ns / 1_000_000_000,
                tv_nsec: ns % 1_000_000_000,
            });
            let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
            let f = real!(epoll_pwait2: fn(c_int, *mut epoll_event, c_int, *const libc::timespec, *const libc::sigset_t) -> c_int);
            // SAFETY: forwarded from the caller's contract; `tsp` is null or points at `ts`.
            unsafe { f(epfd, events, max, tsp, mask) }
        }
    }
}
