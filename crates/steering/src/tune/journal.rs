//! The apply journal: JSON Lines, one record per step, each appended and fsync'd before the step
//! it announces. Every old value is on disk before the first write; a `write` record is on disk
//! before its write, so after a crash at any point `rollback` knows every value that may have
//! changed and what it was.
//!
//! The state directory is written as root, and under `--root` it lies inside a tree someone
//! else may have made. So nothing in it is followed out of it: its `journal` directory is
//! opened with O_NOFOLLOW|O_DIRECTORY and every file below is reached through that open
//! descriptor (`/proc/self/fd/N/name`, so a link swapped in later redirects nothing); files are
//! created with O_EXCL|O_NOFOLLOW under unpredictable names; and state files are read only
//! when they are regular files, opened O_NONBLOCK|O_NOFOLLOW, up to [`MAX_STATE_FILE`] bytes
//! (a FIFO would hang the reader, /dev/zero would exhaust its memory).

use crate::model::desired::{Format, Plan, Target};
use netsteer_host::trust::{check_dir_meta, check_file_meta};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The largest state file read (a journal of a 4096-CPU host's plan is a few MiB).
pub const MAX_STATE_FILE: u64 = 64 << 20;

/// A directory held open, so the files named in it cannot be redirected by swapping a link
/// in for one of its path's components after it was opened.
struct HeldDir {
    file: File,
    path: PathBuf,
}

impl HeldDir {
    /// Opens `path`; with `nofollow`, a link as its last component is refused.
    fn open(path: &Path, nofollow: bool) -> io::Result<HeldDir> {
        HeldDir::open_as(path, path, nofollow)
    }

    /// Opens `path` (perhaps a `/proc/self/fd/N/name` of [`HeldDir::child`]), naming it
    /// `shown` in errors.
    fn open_as(path: &Path, shown: &Path, nofollow: bool) -> io::Result<HeldDir> {
        let flags = libc::O_DIRECTORY | if nofollow { libc::O_NOFOLLOW } else { 0 };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR)
                {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "{}: not a directory of its own (a link?): state files are never \
                             followed out of the state directory",
                            shown.display()
                        ),
                    )
                } else {
                    at(shown)(e)
                }
            })?;
        Ok(HeldDir {
            file,
            path: shown.to_path_buf(),
        })
    }

    /// The path of `name` inside the held directory, through its descriptor.
    fn child(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.file.as_raw_fd()))
    }

    /// Creates `name` exclusively (O_EXCL|O_NOFOLLOW), mode 0644: the plan and journals hold
    /// knob values every user can read in /proc and /sys anyway, and the agent reads them as
    /// an unprivileged user (deploy/systemd/netsteer-agent.service) for its drift metrics.
    fn create_new(&self, name: &str, append: bool) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .append(append)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.child(name))
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_all().map_err(at(&self.path))
    }

    /// [`check_dir_meta`] on the directory held (not a path that may have changed since).
    fn check(&self, ancestor: bool) -> io::Result<()> {
        let meta = self.file.metadata().map_err(at(&self.path))?;
        check_dir_meta(&self.path, &meta, ancestor)
    }
}

/// The mode of every directory netsteer creates for its state, whatever the umask: root
/// writes there, and the agent reads the journals as an unprivileged user
/// (deploy/systemd/netsteer-agent.service), so others may read and list but never write.
/// `fs::create_dir_all` gives 0777 minus the umask: under `umask 000` another user could
/// plant a journal that root's rollback then obeys.
pub const STATE_DIR_MODE: u32 = 0o755;

/// Checks `dir` and everything above it: every link crossed root's own, every directory
/// root's and writable by nobody else, but a sticky one above (`netsteer_host::trust`). A
/// state directory is only as safe as the directories and links that could replace it.
pub fn check_state_dir(dir: &Path) -> io::Result<()> {
    netsteer_host::trust::check_dir(dir).map(|_| ())
}

/// Makes `dir` (and any missing parent) [`STATE_DIR_MODE`] whatever the umask, then checks
/// it and its ancestors ([`check_state_dir`]).
pub fn ensure_state_dir(dir: &Path) -> io::Result<()> {
    let abs = std::path::absolute(dir).map_err(at(dir))?;
    let mut cur = PathBuf::new();
    for c in abs.components() {
        cur.push(c);
        if fs::symlink_metadata(&cur).is_ok() {
            continue;
        }
        mkdir_state(&cur)?;
    }
    check_state_dir(&abs)
}

/// One directory, created [`STATE_DIR_MODE`] exactly: the mode given to mkdir(2) is cut by
/// the umask (a 077 umask would hide the journals from the agent), so it is set again
/// after. Already there is not an error.
fn mkdir_state(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match fs::DirBuilder::new().mode(STATE_DIR_MODE).create(path) {
        Ok(()) => {
            fs::set_permissions(path, fs::Permissions::from_mode(STATE_DIR_MODE)).map_err(at(path))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(at(path)(e)),
    }
}

/// An unpredictable suffix for temporary names (another user cannot pre-create them).
fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// Reads a state file: a regular file only (not a link, FIFO or device), opened without
/// blocking, of at most [`MAX_STATE_FILE`] bytes. Errors name the file.
pub fn read_state_file(path: &Path) -> io::Result<Vec<u8>> {
    // The directories above checked, the file opened without following a link and judged by
    // fstat on what was opened: a name another user could swap between a look and the open
    // (a `tune rollback FILE` in their directory) is never what root reads.
    netsteer_host::trust::read_owned_file(path, MAX_STATE_FILE).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: a symbolic link; state files are never followed",
                    path.display()
                ),
            )
        } else if e.to_string().contains(&path.display().to_string()) {
            e
        } else {
            at(path)(e)
        }
    })
}

pub const JOURNAL_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Record {
    /// The first line: what is being applied, and to which root.
    Begin {
        version: u32,
        /// This apply's place among the state directory's journals: one more than any before
        /// it, claimed by creating the file named after it exclusively. Rollback and recovery
        /// go by it, not by names or clocks (two applies in one second by pids 9999 and 10000
        /// sort the wrong way as text). Journals written before it existed read as 0.
        #[serde(default)]
        seq: u64,
        root: String,
        started_unix: u64,
        plan: Box<Plan>,
        /// Rollback leaves a knob that no longer holds what this apply wrote
        /// ([`crate::tune::ApplyOptions::leave_rewritten`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        leave_rewritten: bool,
    },
    /// A value about to be changed: where, how it compares, what it was and what it becomes.
    Old {
        id: String,
        target: Target,
        format: Format,
        old: String,
        new: String,
    },
    /// Written (and synced) just before the write of `id`.
    Write { id: String },
    /// The write of `id` took and reads back as wanted.
    Done { id: String, readback: String },
    /// The kernel refused `id` by design (managed IRQ, unsupported knob): nothing changed.
    Skipped { id: String, why: String },
    /// The apply finished: `applied`, or `rolled-back` after a failure (with the error).
    End {
        status: super::status::ApplyStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A rollback ran over this journal (possibly after a crash) and restored these ids.
    RolledBack {
        restored: Vec<String>,
        failed: Vec<String>,
    },
    /// Whoever applied this journal gave `id` up after someone else rewrote it (`watch`'s
    /// step-aside): no rollback of this journal writes it again, whoever runs it, so the
    /// value the other writer chose stays. `now` is what the knob held when it was given up.
    GivenUp {
        id: String,
        now: String,
        why: String,
    },
}

/// Records in the journal at `path` that `id` is given up (see [`Record::GivenUp`]): a
/// later rollback of it restores everything else and leaves `id` as it is.
pub fn give_up(path: &Path, id: &str, now: &str, why: &str) -> io::Result<()> {
    Journal::reopen(path)?.append(&Record::GivenUp {
        id: id.to_string(),
        now: now.to_string(),
        why: why.to_string(),
    })
}

/// The ids a journal's writer gave up ([`Record::GivenUp`]).
pub fn given_up(records: &[Record]) -> std::collections::BTreeSet<String> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::GivenUp { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// An open journal, appended to record by record.
pub struct Journal {
    path: PathBuf,
    file: File,
    seq: u64,
}

/// Names the file in an I/O error ("No space left on device" alone does not say where), with
/// the same kind so callers can still tell NotFound from the rest.
fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl Journal {
    /// Creates the next journal of `state_dir/journal/`, `<seq>.jsonl` (exclusively), and syncs
    /// the directory so the file survives a crash. The sequence number is one more than the
    /// highest there; the exclusive create claims it, so two applies racing for one number both
    /// get their own (the loser takes the next). Its [`Journal::seq`] goes into the begin record.
    pub fn create(state_dir: &Path) -> io::Result<Journal> {
        ensure_state_dir(state_dir)?;
        let state = HeldDir::open(state_dir, false)?;
        let dir = state_dir.join("journal");
        match fs::symlink_metadata(state.child("journal")) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                mkdir_state(&state.child("journal"))?;
                state.sync()?;
            }
            _ => {}
        }
        let held = HeldDir::open_as(&state.child("journal"), &dir, true)?;
        held.check(false)?;
        let mut seq = order(&held, &dir)?
            .iter()
            .map(|(k, _)| k.seq)
            .max()
            .unwrap_or(0)
            + 1;
        for _ in 0..1000 {
            let name = format!("{seq:012}.jsonl");
            let path = dir.join(&name);
            match held.create_new(&name, true) {
                Ok(file) => {
                    held.sync()?;
                    return Ok(Journal { path, file, seq });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => seq += 1,
                Err(e) => return Err(at(&path)(e)),
            }
        }
        Err(at(&dir)(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "a thousand journal sequence numbers in a row were taken while this apply looked",
        )))
    }

    /// This journal's sequence number (for its begin record).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Re-opens an existing journal to append (rollback's own record).
    pub fn reopen(path: &Path) -> io::Result<Journal> {
        let file = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(at(path))?;
        let meta = file.metadata().map_err(at(path))?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a regular file", path.display()),
            ));
        }
        check_file_meta(path, &meta)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            seq: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record and waits until it is on disk.
    pub fn append(&mut self, r: &Record) -> io::Result<()> {
        let mut line = serde_json::to_string(r).map_err(io::Error::other)?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(at(&self.path))
    }
}

/// Reads a journal. A torn last line (a crash in the middle of an append) is ignored: its
/// step had not started, since every record is synced before its step.
pub fn read(path: &Path) -> io::Result<Vec<Record>> {
    let bytes = read_state_file(path)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not UTF-8 text", path.display()),
        )
    })?;
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => out.push(r),
            Err(_) if i + 1 == n => break,
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: line {}: {e}", path.display(), i + 1),
                ));
            }
        }
    }
    match out.first() {
        Some(Record::Begin { version, .. }) if *version == JOURNAL_VERSION => Ok(out),
        Some(Record::Begin { version, .. }) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: journal version {version}, this netsteer reads {JOURNAL_VERSION}",
                path.display()
            ),
        )),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: not a netsteer tune journal (no begin record)",
                path.display()
            ),
        )),
    }
}

/// Journals in a state directory, oldest first: in the order of their sequence numbers
/// (the `<seq>.jsonl` each apply claimed by an exclusive create, which its begin record
/// repeats); journals from before sequence numbers first, by start time and pid as numbers,
/// never as text. The state directory is root's own ([`check_state_dir`]), so a name is as
/// trustworthy as what is inside.
pub fn list(state_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let Some((held, dir)) = held_journals(state_dir)? else {
        return Ok(Vec::new());
    };
    Ok(order(&held, &dir)?.into_iter().map(|(_, p)| p).collect())
}

/// A state directory's `journal/` held open, once it and everything above it were found
/// root's own: the journals found there are what a rollback restores, so only from a
/// directory nobody else could have written into. None when there is no `journal/` yet.
fn held_journals(state_dir: &Path) -> io::Result<Option<(HeldDir, PathBuf)>> {
    let dir = state_dir.join("journal");
    let held = match HeldDir::open(&dir, true) {
        Ok(h) => h,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    check_state_dir(state_dir)?;
    held.check(false)?;
    Ok(Some((held, dir)))
}

/// Removes the journals of a state directory that have nothing left to undo (fully rolled
/// back), all but the newest `keep` of them, and never the newest journal of all (its
/// sequence number is the one the next apply counts from). A directory that is re-applied
/// again and again (a lane whose service restarts) would otherwise grow a journal each time,
/// and every look at it parse them all. Returns how many were removed.
pub fn compact(state_dir: &Path, keep: usize) -> io::Result<usize> {
    let Some((held, dir)) = held_journals(state_dir)? else {
        return Ok(0);
    };
    let all = order(&held, &dir)?;
    let Some((_, newest)) = all.last() else {
        return Ok(0);
    };
    let done: Vec<&PathBuf> = all
        .iter()
        .map(|(_, p)| p)
        .filter(|p| *p != newest && read(p).is_ok_and(|r| rolled_back(&r)))
        .collect();
    let mut removed = 0;
    for p in done.iter().rev().skip(keep) {
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        fs::remove_file(held.child(name)).map_err(at(p))?;
        removed += 1;
    }
    if removed > 0 {
        held.sync()?;
    }
    Ok(removed)
}

/// Where a journal stands among the others.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    /// The begin record's `seq`; for a journal whose begin record is not on disk yet (just
    /// created, or torn), the number its name claims.
    seq: u64,
    /// Journals from before sequence numbers (all 0) go by when they started, then by the
    /// pid in their name `<seconds>-<pid>[-n].jsonl` as a number, then by that `n`.
    started_unix: u64,
    pid: u64,
    n: u64,
}

/// The journals of a held directory with their places, oldest first.
fn order(held: &HeldDir, dir: &Path) -> io::Result<Vec<(Place, PathBuf)>> {
    let mut out: Vec<(Place, PathBuf)> =
        fs::read_dir(format!("/proc/self/fd/{}", held.file.as_raw_fd()))
            .map_err(at(dir))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| dir.join(e.file_name()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .map(|p| (place(&p), p))
            .collect();
    out.sort();
    Ok(out)
}

/// Whether a journal's name is its sequence number (`<12 digits>.jsonl`), which orders it
/// without reading it; journals from before sequence numbers are read for their place.
pub fn named_by_sequence(path: &Path) -> bool {
    path.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|s| s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit()))
}

fn place(path: &Path) -> Place {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parts: Vec<u64> = stem.split('-').map(|p| p.parse().unwrap_or(0)).collect();
    let (named_seq, started, pid, n) = match parts.as_slice() {
        [seq] => (*seq, 0, 0, 0),
        [s, pid] => (0, *s, *pid, 0),
        [s, pid, n, ..] => (0, *s, *pid, *n),
        [] => (0, 0, 0, 0),
    };
    // `<seq>.jsonl`: the number was claimed by creating the file exclusively, and the begin
    // record inside repeats it. The name alone orders it, so a look at a directory of many
    // journals (a lane re-applied, a long watch, a scrape) parses none of them. Only a
    // journal from before sequence numbers is read for its start time.
    if let [seq] = parts.as_slice()
        && named_by_sequence(path)
    {
        return Place {
            seq: *seq,
            started_unix: 0,
            pid: 0,
            n: 0,
        };
    }
    match read(path).ok().and_then(|r| r.into_iter().next()) {
        Some(Record::Begin {
            seq, started_unix, ..
        }) => Place {
            seq,
            started_unix,
            pid,
            n,
        },
        _ => Place {
            seq: named_seq,
            started_unix: started,
            pid,
            n,
        },
    }
}

/// Where one journal's apply stands: the one reading of its records that lanes, the agent and
/// tune share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalState {
    /// The apply finished and nothing has rolled it back.
    Applied,
    /// A complete rollback ran (after a failure, or asked for): nothing is left to restore.
    RolledBack,
    /// Neither: the apply was cut short (a crash, a kill) or its rollback was incomplete.
    Interrupted,
}

/// [`JournalState`] of a journal's records.
pub fn state(records: &[Record]) -> JournalState {
    if rolled_back(records) {
        JournalState::RolledBack
    } else if finished_applying(records) {
        JournalState::Applied
    } else {
        JournalState::Interrupted
    }
}

/// True when the journal's apply finished (`End` with `applied`), whatever came after it.
pub fn finished_applying(records: &[Record]) -> bool {
    records.iter().any(|r| {
        matches!(
            r,
            Record::End {
                status: super::status::ApplyStatus::Applied,
                ..
            }
        )
    })
}

/// True when the journal has had a complete rollback (nothing left to restore).
pub fn rolled_back(records: &[Record]) -> bool {
    records.iter().any(|r| {
        matches!(r, Record::RolledBack { failed, .. } if failed.is_empty())
            || matches!(
                r,
                Record::End {
                    status: super::status::ApplyStatus::RolledBack,
                    ..
                }
            )
    })
}

/// The state directory's pointer to the plan last applied and kept, for `verify` and `persist`.
pub fn applied_plan_path(state_dir: &Path) -> PathBuf {
    state_dir.join("applied.json")
}

/// Reads the applied plan's file ([`applied_plan_path`]) as a state file: None when there
/// is none.
pub fn read_applied(state_dir: &Path) -> io::Result<Option<Vec<u8>>> {
    match read_state_file(&applied_plan_path(state_dir)) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes a file atomically: a temporary file with an unpredictable name, created O_EXCL|
/// O_NOFOLLOW in the same (held) directory, synced, renamed over. rename(2) replaces a link
/// at `path` itself; it never writes through one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ensure_state_dir(dir)?;
    let held = HeldDir::open(dir, false)?;
    let (tmp, mut file) = loop {
        let tmp = format!(".{name}.tmp-{}", random_suffix());
        match held.create_new(&tmp, false) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(at(path)(e)),
        }
    };
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(held.child(&tmp));
        return Err(at(path)(e));
    }
    fs::rename(held.child(&tmp), held.child(&name)).map_err(at(path))?;
    held.sync()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "No space left on device" alone does not say where: every journal error names its file.
    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("state");
        fs::write(&not_a_dir, "x").unwrap();
        let e = Journal::create(&not_a_dir).err().unwrap();
        assert!(
            e.to_string().starts_with(&not_a_dir.display().to_string()),
            "{e}"
        );
        let e = read(&dir.path().join("missing.jsonl")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("missing.jsonl"), "{e}");
        let e = write_atomic(&not_a_dir.join("applied.json"), b"{}").unwrap_err();
        assert!(e.to_string().contains("state"), "{e}");
        // A full disk: /dev/full answers every write with ENOSPC.
        if Path::new("/dev/full").exists() {
            let mut j = Journal {
                path: PathBuf::from("/dev/full"),
                file: OpenOptions::new().append(true).open("/dev/full").unwrap(),
                seq: 0,
            };
            let e = j.append(&Record::Write { id: "irq/1".into() }).unwrap_err();
            assert!(e.to_string().starts_with("/dev/full: "), "{e}");
        }
    }

    fn begin(seq: u64, started_unix: u64) -> Record {
        Record::Begin {
            version: JOURNAL_VERSION,
            seq,
            root: "/".into(),
            started_unix,
            leave_rewritten: false,
            plan: Box::new(Plan {
                schema_version: 1,
                profile: crate::model::desired::Profile::Latency,
                devices: Vec::new(),
                cpus: None,
                items: Vec::new(),
                notes: Vec::new(),
            }),
        }
    }

    /// Journals go by their sequence number. Before it, names `<seconds>-<pid>` sorted as
    /// text put pid 10000 before pid 9999 of the same second, and a second apply of one
    /// process in that second (`<seconds>-<pid>-1`) before its first: rollback then undid
    /// the older apply first and left the knob at the value in between.
    #[test]
    fn journals_are_ordered_by_their_sequence_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let mut made = Vec::new();
        for _ in 0..12 {
            let mut j = Journal::create(dir.path()).unwrap();
            j.append(&begin(j.seq(), 1_700_000_000)).unwrap();
            made.push(j.path().to_path_buf());
        }
        assert_eq!(list(dir.path()).unwrap(), made);
        // A journal created but whose begin record is not on disk yet still holds its number.
        let j = Journal::create(dir.path()).unwrap();
        assert_eq!(j.seq(), 13);
        assert_eq!(Journal::create(dir.path()).unwrap().seq(), 14);
        assert_eq!(list(dir.path()).unwrap().len(), 14);
        // The order is the numbers', not the text's: 10 after 9, whatever a clock said.
        let many = tempfile::tempdir().unwrap();
        let jd = many.path().join("journal");
        fs::create_dir(&jd).unwrap();
        let line = |r: &Record| serde_json::to_string(r).unwrap() + "\n";
        fs::write(jd.join("000000000010.jsonl"), line(&begin(10, 5))).unwrap();
        fs::write(jd.join("000000000009.jsonl"), line(&begin(9, 9))).unwrap();
        let l = list(many.path()).unwrap();
        assert!(l[0].ends_with("000000000009.jsonl"), "{l:?}");
        // The next claims one more than the highest.
        assert_eq!(Journal::create(many.path()).unwrap().seq(), 11);
        // Nothing is parsed to order them: a journal that does not parse (being written,
        // torn) keeps the place its name claimed.
        fs::write(jd.join("000000000012.jsonl"), "{\"type\":\"beg").unwrap();
        let l = list(many.path()).unwrap();
        assert!(l.last().unwrap().ends_with("000000000012.jsonl"), "{l:?}");
    }

    /// Compaction removes only journals with nothing left to undo, keeps the newest `keep`
    /// of those and the newest journal of all, and the next journal still counts on.
    #[test]
    fn compaction_keeps_what_may_still_be_undone() {
        let dir = tempfile::tempdir().unwrap();
        let mut made = Vec::new();
        for i in 0..10 {
            let mut j = Journal::create(dir.path()).unwrap();
            j.append(&begin(j.seq(), 1_700_000_000)).unwrap();
            // Every journal but the 4th and the last two is rolled back.
            if i != 3 && i < 8 {
                j.append(&Record::RolledBack {
                    restored: vec!["irq/1".into()],
                    failed: Vec::new(),
                })
                .unwrap();
            }
            made.push(j.path().to_path_buf());
        }
        assert_eq!(compact(dir.path(), 2).unwrap(), 5);
        let left = list(dir.path()).unwrap();
        // Rolled back: 0,1,2,4,5,6,7 → the newest two (6, 7) stay; 3, 8, 9 are not done.
        assert_eq!(
            left,
            [&made[3], &made[6], &made[7], &made[8], &made[9]]
                .map(|p| p.clone())
                .to_vec()
        );
        assert_eq!(compact(dir.path(), 2).unwrap(), 0);
        assert_eq!(Journal::create(dir.path()).unwrap().seq(), 11);
    }

    /// Journals written before sequence numbers existed go first, by start time and pid as
    /// numbers.
    #[test]
    fn journals_from_before_sequence_numbers_go_by_time_and_pid() {
        let dir = tempfile::tempdir().unwrap();
        let jd = dir.path().join("journal");
        fs::create_dir(&jd).unwrap();
        let mut old = serde_json::to_value(begin(0, 1_700_000_000)).unwrap();
        old.as_object_mut().unwrap().remove("seq");
        let old = old.to_string() + "\n";
        for name in [
            "001700000000-10000",
            "001700000000-9999",
            "001700000000-9999-1",
        ] {
            fs::write(jd.join(format!("{name}.jsonl")), &old).unwrap();
        }
        let mut j = Journal::create(dir.path()).unwrap();
        j.append(&begin(j.seq(), 1_600_000_000)).unwrap();
        let names: Vec<String> = list(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "001700000000-9999.jsonl",
                "001700000000-9999-1.jsonl",
                "001700000000-10000.jsonl",
                "000000000001.jsonl"
            ]
        );
    }
}
