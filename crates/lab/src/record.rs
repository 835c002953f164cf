//! Records that let a later run remove what a killed run left behind.
//!
//! A lab writes `/run/netsteer-lab/<prefix>` holding its process id and that process's start
//! time (field 22 of `/proc/PID/stat`, so a reused pid is not mistaken for the owner), then a
//! line for each thing it makes before making it: `ns NAME` for a namespace, `child PID START`
//! for a program it runs (`lab with`). A record whose owner is gone marks exactly those as
//! leftovers: a namespace whose name merely shares the prefix is not the lab's and stays.
//!
//! The lab's scratch directory is `/run/netsteer-lab/<prefix>.scratch`: inside a directory
//! only root can write (created 0700 and checked), made with mkdir(2), which fails if the
//! name exists, so no other user can hand root a directory of their choosing (a predictable
//! name in /tmp could be pre-created for upcoming pids).

use crate::{LabError, Result, run};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where records live (tmpfs: gone at reboot, like the namespaces they name).
pub const RECORD_DIR: &str = "/run/netsteer-lab";

/// The record of one live lab; the lab removes it last when it closes.
#[derive(Debug)]
pub struct Record {
    path: PathBuf,
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Makes sure the record directory is ours alone: a real directory (not a link), owned by
/// this process's user, writable by nobody else.
fn private_record_dir() -> Result<()> {
    let io = |what: String| move |source| LabError::Io { what, source };
    match std::fs::DirBuilder::new().mode(0o700).create(RECORD_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(format!("creating {RECORD_DIR}"))(e)),
    }
    let meta =
        std::fs::symlink_metadata(RECORD_DIR).map_err(io(format!("reading {RECORD_DIR}")))?;
    // /proc/self belongs to the process's effective user.
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if !meta.file_type().is_dir() || Some(meta.uid()) != me {
        return Err(LabError::Invalid(format!(
            "{RECORD_DIR} is not a directory of this user's (a link, or made by another user): \
             refusing to keep lab records there"
        )));
    }
    if meta.mode() & 0o022 != 0 {
        std::fs::set_permissions(RECORD_DIR, std::fs::Permissions::from_mode(0o700))
            .map_err(io(format!("chmod {RECORD_DIR}")))?;
    }
    Ok(())
}

impl Record {
    pub fn create(prefix: &str) -> Result<Record> {
        let io = |what: String| move |source| LabError::Io { what, source };
        private_record_dir()?;
        let pid = std::process::id();
        let started = start_time(pid).unwrap_or(0);
        let path = Path::new(RECORD_DIR).join(prefix);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{pid} {started}\n").as_bytes()))
            .map_err(io(format!("writing {}", path.display())))?;
        Ok(Record { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line (`ns NAME`, `child PID START`) before the thing it names exists.
    pub fn note(path: &Path, line: &str) -> Result<()> {
        std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
            .map_err(|source| LabError::Io {
                what: format!("writing {}", path.display()),
                source,
            })
    }

    /// Notes a program the lab runs, so `lab clean` stops it if the lab is killed.
    pub fn note_child(path: &Path, pid: u32) -> Result<()> {
        let started = start_time(pid).unwrap_or(0);
        Record::note(path, &format!("child {pid} {started}"))
    }
}

/// The scratch directory of the lab `prefix` (see the module docs).
pub fn scratch_path(prefix: &str) -> PathBuf {
    Path::new(RECORD_DIR).join(format!("{prefix}.scratch"))
}

/// Creates the scratch directory, refusing one that exists.
pub(crate) fn create_scratch(prefix: &str) -> Result<PathBuf> {
    private_record_dir()?;
    let path = scratch_path(prefix);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&path)
        .map_err(|source| LabError::Io {
            what: format!("creating {} (refusing one that exists)", path.display()),
            source,
        })?;
    Ok(path)
}

/// The owner line of a record ("pid starttime"), if it has been written whole.
fn owner(text: &str) -> Option<(u32, u64)> {
    let line = text.split_inclusive('\n').next()?.strip_suffix('\n')?;
    let mut f = line.split_whitespace();
    let pid = f.next()?.parse::<u32>().ok()?;
    let started = f.next()?.parse::<u64>().ok()?;
    f.next().is_none().then_some((pid, started))
}

/// True while the process of an owner line (pid, start time) still runs.
fn alive((pid, started): (u32, u64)) -> bool {
    start_time(pid) == Some(started)
}

/// Deletes a namespace after killing what still runs in it (`ip netns pids`), as the kernel
/// selftests' `cleanup_ns` does: a namespace with live processes outlives `ip netns del`.
pub(crate) fn delete_namespace(name: &str) -> std::result::Result<(), String> {
    if let Ok(out) = run("ip", &["netns", "pids", name]) {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = run("kill", &["-9", pid]);
        }
    }
    run("ip", &["netns", "del", name])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Removes the namespaces of every lab whose process is gone, and their records; returns the
/// namespaces removed. Labs of live processes (this one included) are left alone, and so is
/// every namespace that no record names.
pub fn clean_stale() -> Result<Vec<String>> {
    remove_labs(|text, age| match owner(text) {
        Some(owner) => !alive(owner),
        // No owner line yet: a lab of another thread or process is between creating its
        // record and writing it (create_new, then the write). Taken for stale only when old.
        // Before, a fresh-clone CI run failed when one test's new lab removed the record
        // another test's lab had just created, whose next note then found no file ("writing
        // /run/netsteer-lab/nsl…-ncloss: No such file or directory").
        None => age > UNWRITTEN_RECORD_AGE,
    })
    .map_err(|source| LabError::Io {
        what: format!("listing {RECORD_DIR}"),
        source,
    })
}

/// How old a record without its owner line must be before a later lab removes it.
const UNWRITTEN_RECORD_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes every lab whose record text `select` picks: the namespaces named after it (with
/// what runs in them), its scratch directory, then the record. Returns the namespaces removed.
fn remove_labs(select: impl Fn(&str, std::time::Duration) -> bool) -> std::io::Result<Vec<String>> {
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(RECORD_DIR) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    let namespaces: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    for entry in entries.filter_map(|e| e.ok()) {
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        // A record is a few lines; anything larger is not ours.
        let Ok(bytes) = netsteer_host::fs::read_regular_nofollow(&entry.path(), 1 << 20) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .unwrap_or_default();
        if !select(&text, age) {
            continue;
        }
        let prefix = entry.file_name().to_string_lossy().into_owned();
        for line in text.lines().skip(1) {
            let mut f = line.split_whitespace();
            match (f.next(), f.next(), f.next()) {
                // Only the very process noted (a reused pid has another start time).
                (Some("child"), Some(pid), Some(started))
                    if start_time(pid.parse().unwrap_or(0)).map(|s| s.to_string())
                        == Some(started.to_string()) =>
                {
                    let _ = run("kill", &["-9", pid]);
                }
                (Some("ns"), Some(ns), None)
                    if namespaces.iter().any(|n| n == ns) && delete_namespace(ns).is_ok() =>
                {
                    removed.push(ns.to_string());
                }
                _ => {}
            }
        }
        kill_marked(&prefix);
        let _ = std::fs::remove_dir_all(scratch_path(&prefix));
        let _ = std::fs::remove_file(entry.path());
    }
    Ok(removed)
}

/// Stops every process started with the lab's mark in its environment
/// (`NETSTEER_LAB_PREFIX=prefix`, which `lab with` gives its command, and which the command's
/// own children inherit). The record's `child` line cannot be the only way: it is written just
/// after the spawn, and a `lab with` killed in between (a fresh-clone CI run on a loaded
/// machine did) left its command running with no line naming it.
fn kill_marked(prefix: &str) {
    let mark = format!("{}={prefix}", crate::pair::PREFIX_VAR);
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| *p != me)
    {
        // environ is at most the exec's argument space; 1 MiB covers it.
        let Ok(env) = netsteer_host::fs::read_regular_nofollow(
            Path::new(&format!("/proc/{pid}/environ")),
            1 << 20,
        ) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == mark.as_bytes()) {
            let _ = run("kill", &["-9", &pid.to_string()]);
        }
    }
}

/// Removes the namespaces and scratch directories of this process's own labs, and their
/// records: what a signal handler thread does before the process exits (the labs' own cleanup
/// stacks will not run then). Returns the namespaces removed.
pub fn clean_own() -> Vec<String> {
    let me = std::process::id().to_string();
    remove_labs(|text, _| text.split_whitespace().next() == Some(me.as_str())).unwrap_or_default()
}

/// Programs the lab lent itself to (`netsteer lab with`): stopped before the lab goes.
static STOP_FIRST: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Registers a child process that a termination signal stops (SIGTERM, then up to 5 s for it
/// to exit, then SIGKILL) before the labs are taken down: a script running inside the lab gets to run its
/// own cleanup while the namespaces still exist, and is never left running without them.
pub fn stop_child_on_termination(pid: u32) {
    STOP_FIRST
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(pid);
}

fn stop_children() {
    let pids = std::mem::take(&mut *STOP_FIRST.lock().unwrap_or_else(|p| p.into_inner()));
    for pid in &pids {
        let _ = run("kill", &["-TERM", &pid.to_string()]);
    }
    // The thread that waits for the child reaps it, so its /proc entry goes when it exits.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let alive = |p: &u32| Path::new(&format!("/proc/{p}")).exists();
    while std::time::Instant::now() < deadline && pids.iter().any(alive) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // One that ignored SIGTERM is not left running without the lab it was lent.
    for pid in pids.iter().filter(|p| alive(p)) {
        let _ = run("kill", &["-KILL", &pid.to_string()]);
    }
}

static TERMINATING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called by the thread that ran a lab before it returns: while a termination signal is being
/// handled (the labs are coming down, so their commands fail), it waits for the signal thread
/// to end the process, so the exit status is the signal's and not that of a failed command.
pub fn wait_if_terminating() {
    while TERMINATING.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP end the process only after its labs are taken down: the
/// signals are blocked (call this before starting threads) and a thread waits for them, cleans
/// up and exits with 128 + the signal's number, as a shell reports a killed command.
pub fn clean_up_on_termination() -> Result<()> {
    netsteer_sock::signal::block_termination().map_err(|source| LabError::Io {
        what: "blocking SIGINT/SIGTERM/SIGHUP".into(),
        source,
    })?;
    std::thread::Builder::new()
        .name("lab-signals".into())
        .spawn(|| {
            if let Ok(sig) = netsteer_sock::signal::wait_termination() {
                TERMINATING.store(true, std::sync::atomic::Ordering::Release);
                stop_children();
                let removed = clean_own();
                eprintln!(
                    "netsteer lab: signal {sig}: removed {} namespace(s), exiting",
                    removed.len()
                );
                std::process::exit(128 + sig);
            }
        })
        .map_err(|source| LabError::Io {
            what: "starting the signal thread".into(),
            source,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_alive_only_with_its_own_process_and_start_time() {
        let me = std::process::id();
        let t = start_time(me).unwrap();
        assert!(alive((me, t)));
        assert!(!alive((me, t + 1)), "a reused pid");
        assert!(!alive((4194305, 1)), "no such pid");
        assert_eq!(owner("garbage\n"), None);
        // Half written: no whole owner line yet.
        assert_eq!(owner(""), None);
        assert_eq!(owner(&format!("{me}")), None);
        assert_eq!(owner(&format!("{me} {t}")), None);
        assert_eq!(owner(&format!("{me} {t}\nns x\n")), Some((me, t)));
    }
}
