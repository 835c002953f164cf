//! Records that let a later run remove what a killed run left behind.
//!
//! A lab writes `/run/netsteer-lab/<prefix>` holding its process id and that process's start
//! time (field 22 of `/proc/PID/stat`, so a reused pid is not mistaken for the owner). A record
//! whose owner is gone marks the namespaces named `<prefix>-*` as leftovers.

use crate::{LabError, Result, run};
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

impl Record {
    pub fn create(prefix: &str) -> Result<Record> {
        let io = |what: String| move |source| LabError::Io { what, source };
        std::fs::create_dir_all(RECORD_DIR).map_err(io(format!("creating {RECORD_DIR}")))?;
        let pid = std::process::id();
        let started = start_time(pid).unwrap_or(0);
        let path = Path::new(RECORD_DIR).join(prefix);
        std::fs::write(&path, format!("{pid} {started}\n"))
            .map_err(io(format!("writing {}", path.display())))?;
        Ok(Record { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// True while the process that wrote `text` ("pid starttime") still runs.
fn owner_alive(text: &str) -> bool {
    let mut f = text.split_whitespace();
    let (Some(pid), Some(started)) = (
        f.next().and_then(|p| p.parse::<u32>().ok()),
        f.next().and_then(|s| s.parse::<u64>().ok()),
    ) else {
        return false;
    };
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
    remove_labs(|text| !owner_alive(text)).map_err(|source| LabError::Io {
        what: format!("listing {RECORD_DIR}"),
        source,
    })
}

/// Removes every lab whose record text `select` picks: the namespaces named after it (with
/// what runs in them), its scratch directory, then the record. Returns the namespaces removed.
fn remove_labs(select: impl Fn(&str) -> bool) -> std::io::Result<Vec<String>> {
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
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if !select(&text) {
            continue;
        }
        let prefix = entry.file_name().to_string_lossy().into_owned();
        let mine = format!("{prefix}-");
        for ns in namespaces.iter().filter(|n| n.starts_with(&mine)) {
            if delete_namespace(ns).is_ok() {
                removed.push(ns.clone());
            }
        }
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&prefix));
        let _ = std::fs::remove_file(entry.path());
    }
    Ok(removed)
}

/// Removes the namespaces and scratch directories of this process's own labs, and their
/// records: what a signal handler thread does before the process exits (the labs' own cleanup
/// stacks will not run then). Returns the namespaces removed.
pub fn clean_own() -> Vec<String> {
    let me = std::process::id().to_string();
    remove_labs(|text| text.split_whitespace().next() == Some(me.as_str())).unwrap_or_default()
}

/// Programs the lab lent itself to (`netsteer lab with`): stopped before the lab goes.
static STOP_FIRST: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Registers a child process that a termination signal stops (SIGTERM, then up to 5 s for it
/// to exit, then SIGKILL) before the labs are taken down: a script running inside the lab gets to run its
/// own cleanup while the namespaces still exist, and is never left running without them.
pub fn stop_on_termination(pid: u32) {
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
        assert!(owner_alive(&format!("{me} {t}")));
        assert!(!owner_alive(&format!("{me} {}", t + 1)), "a reused pid");
        assert!(!owner_alive("4194305 1"), "no such pid");
        assert!(!owner_alive("garbage"));
    }
}
