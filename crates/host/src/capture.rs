//! Snapshot trees: the files netsteer read, copied to a directory at the same host paths, plus
//! `netsteer/meta.json` and the NIC settings read over netlink (`netsteer/ethtool.json`).
//!
//! A tree holds only what a [`Recorder`](crate::fs::Recorder) saw netsteer read: no other file of
//! the host. Files keep the content they had *when read*, so the tree reproduces exactly the
//! report that was printed while it was captured.

use crate::error::{HostError, Result};
use crate::ethtool::{TREE_ETHTOOL_FILE, TreeEthtool};
use crate::fs::{Recorded, Recorder};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

pub const TREE_META_FILE: &str = "/netsteer/meta.json";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub netsteer_version: String,
    pub kernel: Option<String>,
    /// Seconds since the Unix epoch when the tree was captured.
    pub captured_at_unix: u64,
    /// Permission bits that carry meaning but that version control drops (git keeps only the
    /// execute bit): a read-only `smp_affinity` marks an IRQ the kernel manages.
    #[serde(default)]
    pub modes: BTreeMap<String, u32>,
}

/// Reads a tree's metadata: None when it has none, an error naming the file when it has one
/// that cannot be read or parsed (its mode overrides would otherwise vanish silently, and a
/// managed IRQ would look movable).
pub fn read_meta(root: &Path) -> Result<Option<SnapshotMeta>, String> {
    let path = join(root, Path::new(TREE_META_FILE));
    let bytes = match crate::fs::read_regular(&path, crate::fs::MAX_FILE_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("{}: not netsteer tree metadata: {e}", path.display()))
}

fn join(root: &Path, host_path: &Path) -> PathBuf {
    root.join(host_path.strip_prefix("/").unwrap_or(host_path))
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> HostError + '_ {
    move |source| HostError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes what `recorder` saw into `out` (which must be empty or absent). Returns the number of
/// files written.
pub fn write_tree(
    recorder: &Recorder,
    out: &Path,
    mut meta: SnapshotMeta,
    ethtool: Option<&TreeEthtool>,
) -> Result<usize> {
    if out.exists() {
        let mut entries = fs::read_dir(out).map_err(io_err(out))?;
        if entries.next().is_some() {
            return Err(HostError::Io {
                path: out.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "output directory is not empty; refusing to mix trees",
                ),
            });
        }
    }
    fs::create_dir_all(out).map_err(io_err(out))?;
    let mut files = 0;
    for (host_path, what) in recorder.entries() {
        let dest = join(out, host_path);
        match what {
            Recorded::Dir => {
                if fs::symlink_metadata(&dest).is_err() {
                    fs::create_dir_all(&dest).map_err(io_err(&dest))?;
                }
            }
            Recorded::Link { target } => {
                if let Some(parent) = dest.parent() {
                    fs::create_dir_all(parent).map_err(io_err(parent))?;
                }
                if fs::symlink_metadata(&dest).is_err() {
                    symlink(target, &dest).map_err(io_err(&dest))?;
                }
            }
            Recorded::File { mode, content } => {
                if let Some(parent) = dest.parent() {
                    fs::create_dir_all(parent).map_err(io_err(parent))?;
                }
                fs::write(&dest, content).map_err(io_err(&dest))?;
                files += 1;
                if mode & 0o200 == 0 && host_path.file_name().is_some_and(|n| n == "smp_affinity") {
                    meta.modes
                        .insert(host_path.to_string_lossy().into_owned(), mode & 0o7777);
                }
            }
        }
    }
    let meta_path = join(out, Path::new(TREE_META_FILE));
    if let Some(parent) = meta_path.parent() {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let json = serde_json::to_string_pretty(&meta).unwrap_or_default();
    fs::write(&meta_path, json + "\n").map_err(io_err(&meta_path))?;
    if let Some(ethtool) = ethtool {
        let path = join(out, Path::new(TREE_ETHTOOL_FILE));
        fs::write(&path, crate::ethtool::tree_ethtool_text(ethtool)).map_err(io_err(&path))?;
    }
    Ok(files)
}

/// The NIC settings a tree recorded, by interface.
pub fn read_tree_ethtool(root: &Path) -> Result<TreeEthtool> {
    let path = join(root, Path::new(TREE_ETHTOOL_FILE));
    let text = crate::fs::read_regular(&path, crate::fs::MAX_FILE_BYTES).map_err(|source| {
        HostError::Io {
            path: TREE_ETHTOOL_FILE.into(),
            source,
        }
    })?;
    serde_json::from_slice(&text).map_err(|e| HostError::Parse {
        path: TREE_ETHTOOL_FILE.into(),
        source: crate::error::ParseError::new(e.line(), e.to_string()),
    })
}

/// `netsteer snapshot`: reads everything `show`, `top` and the doctor read through a
/// recording root (NIC settings from `settings`), and writes it as a tree into `output`.
/// Returns the number of files written and what could not be read (a support bundle with
/// holes must say so: its reader cannot tell an unreadable file from an absent one).
pub fn snapshot(
    fs: &crate::HostFs,
    settings: &dyn Fn(&str) -> crate::ethtool::NicSettings,
    output: &Path,
) -> Result<(usize, Vec<String>)> {
    let (fs, recorder) = fs.recording();
    let view = crate::read_host(&fs, Some(settings));
    let mut problems = view.problems.clone();
    // A counter file that cannot be read is a hole the bundle names, not a reason to write
    // no bundle: what could be read is still worth having.
    if let Err(e) = crate::sample::read_sample(&fs) {
        let e = e.to_string();
        if !problems.contains(&e) {
            problems.push(e);
        }
    }
    for optional in [
        "/proc/softirqs",
        "/proc/net/softnet_stat",
        "/proc/net/dev",
        "/proc/net/snmp",
        "/proc/uptime",
    ] {
        let _ = fs.read(optional);
    }
    let ethtool: TreeEthtool = view
        .nics
        .iter()
        .filter_map(|n| Some((n.name.clone(), n.settings.clone()?)))
        .collect();
    let meta = SnapshotMeta {
        netsteer_version: env!("CARGO_PKG_VERSION").to_string(),
        kernel: view.kernel.known().cloned(),
        captured_at_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        modes: Default::default(),
    };
    let recorder = recorder.lock().unwrap_or_else(|p| p.into_inner());
    let files = write_tree(&recorder, output, meta, Some(&ethtool))?;
    Ok((files, problems))
}
