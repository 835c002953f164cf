//! Moving a thread into a network namespace (setns(2) with CLONE_NEWNET), and the one helper
//! that runs work on a thread inside a namespace host. Sockets keep the namespace they were
//! created in, so a thread that creates its sockets inside a namespace can hand them to any
//! other thread afterwards.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The file of a namespace given by name (under /run/netns, as `ip netns` makes them) or by
/// path; an error when it is not there.
pub fn named(ns: &str) -> io::Result<std::path::PathBuf> {
    let p = if ns.contains('/') {
        std::path::PathBuf::from(ns)
    } else {
        Path::new("/run/netns").join(ns)
    };
    match p.try_exists() {
        Ok(true) => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} does not exist", p.display()),
        )),
    }
}

/// Moves the calling thread into the namespace at `path` (e.g. /run/netns/NAME).
pub fn enter(path: &Path) -> io::Result<()> {
    let f = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    // SAFETY: `f` is an open namespace file for the call; setns touches no memory of ours.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("setns({}): {e}", path.display()),
        ));
    }
    Ok(())
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    Err(io::Error::new(e.kind(), format!("{what}: {e}")))
}

/// Gives the calling thread a mount namespace of its own whose /sys is a sysfs mounted from
/// the thread's current network namespace, as `ip netns exec` does for its commands
/// (iproute2 lib/namespace.c, netns_switch): sysfs shows the devices of the namespace that
/// mounted it, so without this /sys/class/net would still list the root namespace's.
///
/// The root is made a slave first, so nothing mounted here propagates back to the host. The
/// namespace lives as long as the thread (and threads it starts, which inherit it). /proc/net
/// is not changed: it follows the process, not the thread (readers that need the thread's view
/// use /proc/thread-self/net).
pub fn private_sysfs() -> io::Result<()> {
    const ROOT: &CStr = c"/";
    const SYS: &CStr = c"/sys";
    const SYSFS: &CStr = c"sysfs";
    const NONE: &CStr = c"none";
    // SAFETY: unshare(2) with CLONE_NEWNS only changes this thread's namespace set (it implies
    // CLONE_FS, which a thread may unshare); no memory of ours is touched.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNS) };
    check(rc, "unshare(CLONE_NEWNS)")?;
    // SAFETY: the strings are NUL-terminated constants; null type and data are allowed for a
    // propagation change.
    let rc = unsafe {
        libc::mount(
            NONE.as_ptr(),
            ROOT.as_ptr(),
            std::ptr::null(),
            libc::MS_SLAVE | libc::MS_REC,
            std::ptr::null(),
        )
    };
    check(rc, "making / a slave mount in the thread's mount namespace")?;
    // SAFETY: a NUL-terminated constant path. EINVAL (nothing mounted on /sys) is fine.
    let rc = unsafe { libc::umount2(SYS.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        check(rc, "unmounting /sys in the thread's mount namespace")?;
    }
    // SAFETY: NUL-terminated constants; sysfs takes no data.
    let rc = unsafe {
        libc::mount(
            SYSFS.as_ptr(),
            SYS.as_ptr(),
            SYSFS.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    check(rc, "mounting the namespace's sysfs on /sys")
}

/// Where a thread should be before it runs its work.
#[derive(Debug, Clone, Copy, Default)]
pub struct Place<'a> {
    /// The network namespace file to enter (`None`: stay in this one).
    pub netns: Option<&'a Path>,
    /// CPUs to pin the thread to (empty: leave it unpinned).
    pub cpus: &'a [u32],
    /// Also give the thread a /sys of that namespace ([`private_sysfs`]), for work that reads
    /// or writes its devices' files (tuning).
    pub sysfs: bool,
}

/// Puts the calling thread where `place` says: into the namespace (and its sysfs), then onto
/// the CPUs. Every thread netsteer runs inside a namespace host goes through here.
pub fn place_current_thread(place: Place<'_>) -> io::Result<()> {
    if let Some(ns) = place.netns {
        enter(ns)?;
        if place.sysfs {
            private_sysfs()?;
        }
    }
    if !place.cpus.is_empty() {
        crate::cpu::pin_current_thread(place.cpus).map_err(|e| {
            io::Error::new(e.kind(), format!("pinning to CPUs {:?}: {e}", place.cpus))
        })?;
    }
    Ok(())
}

/// Runs `f` on a new thread placed as `place` says, waits for it, and returns what it
/// returned. Sockets made there belong to the namespace; threads it starts inherit it. The
/// outer `Err` is for entering, pinning or a panic; `f`'s own errors are in `T`.
pub fn on_thread<T: Send>(place: Place<'_>, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            place_current_thread(place)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("a thread in a namespace panicked")))
    })
}

/// As [`on_thread`] for a thread that outlives the caller (a load generator, a server): the
/// handle gives `Err` when the thread could not be placed.
pub fn spawn<T: Send + 'static>(
    netns: Option<std::path::PathBuf>,
    cpus: Vec<u32>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<io::Result<T>> {
    std::thread::spawn(move || {
        place_current_thread(Place {
            netns: netns.as_deref(),
            cpus: &cpus,
            sysfs: false,
        })?;
        Ok(f())
    })
}
