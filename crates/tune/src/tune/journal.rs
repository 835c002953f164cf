//! The apply journal: JSON Lines, one record per step, each appended and fsync'd before the step
//! it announces. Every old value is on disk before the first write; a `write` record is on disk
//! before its write, so after a crash at any point `rollback` knows every value that may have
//! changed and what it was.

use super::model::{Format, Plan, Target};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

pub const JOURNAL_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Record {
    /// The first line: what is being applied, and to which root.
    Begin {
        version: u32,
        root: String,
        started_unix: u64,
        plan: Box<Plan>,
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
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A rollback ran over this journal (possibly after a crash) and restored these ids.
    RolledBack {
        restored: Vec<String>,
        failed: Vec<String>,
    },
}

/// An open journal, appended to record by record.
pub struct Journal {
    path: PathBuf,
    file: File,
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(at(dir))
}

/// Names the file in an I/O error ("No space left on device" alone does not say where), with
/// the same kind so callers can still tell NotFound from the rest.
fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl Journal {
    /// Creates `<state_dir>/journal/<unix-seconds>-<pid>.jsonl` (exclusively) and syncs the
    /// directory so the file survives a crash.
    pub fn create(state_dir: &Path, started_unix: u64) -> io::Result<Journal> {
        let dir = state_dir.join("journal");
        fs::create_dir_all(&dir).map_err(at(&dir))?;
        let mut n = 0;
        loop {
            let name = if n == 0 {
                format!("{started_unix:012}-{}.jsonl", std::process::id())
            } else {
                format!("{started_unix:012}-{}-{n}.jsonl", std::process::id())
            };
            let path = dir.join(name);
            match OpenOptions::new().append(true).create_new(true).open(&path) {
                Ok(file) => {
                    sync_dir(&dir)?;
                    return Ok(Journal { path, file });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                Err(e) => return Err(at(&path)(e)),
            }
        }
    }

    /// Re-opens an existing journal to append (rollback's own record).
    pub fn reopen(path: &Path) -> io::Result<Journal> {
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(at(path))?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
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
    let file = File::open(path).map_err(at(path))?;
    let mut out = Vec::new();
    let lines: Vec<String> = io::BufReader::new(file)
        .lines()
        .collect::<io::Result<_>>()
        .map_err(at(path))?;
    let n = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
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

/// Journals in a state directory, oldest first.
pub fn list(state_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = state_dir.join("journal");
    let mut out: Vec<PathBuf> = match fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    out.sort();
    Ok(out)
}

/// True when the journal has had a complete rollback (nothing left to restore).
pub fn rolled_back(records: &[Record]) -> bool {
    records.iter().any(|r| {
        matches!(r, Record::RolledBack { failed, .. } if failed.is_empty())
            || matches!(r, Record::End { status, .. } if status == "rolled-back")
    })
}

/// The state directory's pointer to the plan last applied and kept, for `verify` and `persist`.
pub fn applied_plan_path(state_dir: &Path) -> PathBuf {
    state_dir.join("applied.json")
}

/// Writes a file atomically: a temporary file in the same directory, synced, renamed over.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(at(dir))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(at(path)(e));
    }
    fs::rename(&tmp, path).map_err(at(path))?;
    sync_dir(dir)
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
        let e = Journal::create(&not_a_dir, 1).err().unwrap();
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
            };
            let e = j.append(&Record::Write { id: "irq/1".into() }).unwrap_err();
            assert!(e.to_string().starts_with("/dev/full: "), "{e}");
        }
    }
}
