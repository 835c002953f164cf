//! `HostFs`: every read and write of /proc and /sys goes through a root directory.
//!
//! The default root is `/`, the live host. A snapshot or fixture tree is a directory holding the
//! same relative paths (`proc/stat`, `sys/class/net/eth0 -> ../../devices/...`). Symbolic links in
//! a tree are followed *inside* the root: an absolute target such as `/sys/devices/...` is taken
//! relative to the root, and `..` never climbs above it, so a tree can never read the live host by
//! accident.
//!
//! A `HostFs` can carry a [`Recorder`]: it notes every file read, every directory listed and every
//! link crossed, which is exactly what `netsteer snapshot` copies.

use crate::error::{HostError, ParseError, Result};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Linux's own limit on symlinks followed in one lookup (MAXSYMLINKS).
const MAX_LINK_HOPS: usize = 40;

/// Most bytes read from any one file. The largest file netsteer reads on a real host is
/// `/proc/interrupts`: about 11 bytes per CPU per line, so 4096 CPUs × 1000 IRQs is ~45 MB at
/// the very worst and a 256-CPU host ~3 MB. A file beyond this is not a kernel file; reading
/// it whole once cost 677 MB and 32 s for a 200 MB `proc/interrupts` in a tree.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads a whole regular file of at most `limit` bytes. Opened with `O_NONBLOCK` and checked
/// with `fstat` first: a FIFO planted in a tree would otherwise block `open(2)` forever, and a
/// device would never end. (procfs and sysfs files are regular files to `fstat`.)
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_regular_with(path, limit, 0)
}

/// As [`read_regular`], refusing a link as the last component (ELOOP).
pub fn read_regular_nofollow(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_regular_with(path, limit, libc::O_NOFOLLOW)
}

/// As [`read_regular`], refusing a link as the last component (ELOOP) when `flags` has
/// O_NOFOLLOW.
fn read_regular_with(path: &Path, limit: u64, flags: i32) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)?;
    read_open(file, limit)
}

/// Reads an opened file whole, when it is a regular file of at most `limit` bytes (the
/// descriptor's own `fstat`, not a look at its name before).
pub(crate) fn read_open(mut file: fs::File, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let size = check_regular(&file)?;
    let mut bytes = Vec::new();
    // A tree's files are plain files of their exact size: one read that returns exactly that
    // many bytes is the whole file, without the extra read that would only find EOF (about
    // a thousand saved syscalls per read of a 128-CPU tree). /proc files say 0 and sysfs ones
    // 4096, so they take the general path.
    if size > 0 && size <= limit {
        bytes.resize(size as usize, 0);
        let n = file.read(&mut bytes)?;
        if n as u64 == size {
            return Ok(bytes);
        }
        bytes.truncate(n);
    }
    (&mut file)
        .take(limit + 1 - bytes.len() as u64)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "larger than {} MiB, far beyond any kernel file of a real host; not read",
                limit >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// The file's size when it is a regular file.
fn check_regular(file: &fs::File) -> io::Result<u64> {
    let meta = file.metadata()?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok(meta.len());
    }
    use std::os::unix::fs::FileTypeExt;
    let kind = if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "not a plain file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file ({kind})"),
    ))
}

/// What a [`Recorder`] saw at one host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// A regular file that was read; `mode` keeps the permission bits (a 0444 `smp_affinity`
    /// marks a managed IRQ).
    File { mode: u32, content: Vec<u8> },
    /// A symbolic link and its target text, kept verbatim.
    Link { target: String },
    /// A directory that was listed, with the entries seen.
    Dir,
}

/// Collects the host paths a `HostFs` touched.
#[derive(Debug, Default)]
pub struct Recorder {
    entries: BTreeMap<PathBuf, Recorded>,
}

impl Recorder {
    pub fn entries(&self) -> &BTreeMap<PathBuf, Recorded> {
        &self.entries
    }

    fn note(&mut self, path: PathBuf, what: Recorded) {
        // A file read later under a listed directory wins over a bare listing entry.
        self.entries.entry(path).or_insert(what);
    }
}

/// The root through which the host is read and written.
#[derive(Debug, Clone)]
pub struct HostFs {
    root: PathBuf,
    recorder: Option<Arc<Mutex<Recorder>>>,
    /// Permission bits a tree's metadata restores (see `capture::SnapshotMeta::modes`).
    tree_modes: Arc<OnceLock<BTreeMap<String, u32>>>,
    /// Directories of a tree already resolved (host path as asked → resolved host path), so a
    /// read under `/sys/class/net/eth2/queues/rx-N/` checks each link of the way once, not per
    /// file: a scrape of the 128-CPU fixture went from 25 ms, mostly lstat(2), to under 10. A
    /// tree's links do not change while it is read; when a directory the cache leads to is
    /// gone (a tree replaced under a long-running agent), the cache is dropped and the walk
    /// done again.
    dirs: Arc<Mutex<HashMap<PathBuf, PathBuf>>>,
}

impl Default for HostFs {
    fn default() -> Self {
        HostFs::live()
    }
}

impl HostFs {
    /// The live host, rooted at `/`.
    pub fn live() -> Self {
        HostFs::new("/")
    }

    pub fn new(root: impl Into<PathBuf>) -> Self {
        HostFs {
            root: root.into(),
            recorder: None,
            tree_modes: Arc::default(),
            dirs: Arc::default(),
        }
    }

    /// A root that exists and holds at least `proc/stat` or `sys/devices/system/cpu`; anything
    /// else is refused up front with a message naming the directory.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let fs = HostFs::new(root);
        let meta = fs::metadata(&fs.root).map_err(|e| HostError::NotAHostTree {
            root: fs.root.clone(),
            reason: e.to_string(),
        })?;
        if !meta.is_dir() {
            return Err(HostError::NotAHostTree {
                root: fs.root.clone(),
                reason: "not a directory".into(),
            });
        }
        // A /proc/interrupts alone is a host's tree too (the dump most often shared).
        let has_proc =
            fs.root.join("proc/stat").exists() || fs.root.join("proc/interrupts").exists();
        let has_sys = fs.root.join("sys/devices/system/cpu").is_dir();
        if !has_proc && !has_sys {
            return Err(HostError::NotAHostTree {
                root: fs.root.clone(),
                reason: "none of proc/stat, proc/interrupts, sys/devices/system/cpu is inside it"
                    .into(),
            });
        }
        if !fs.is_live() {
            // Read once, here, so a corrupt file is an error up front rather than overrides
            // silently dropped later.
            let meta =
                crate::capture::read_meta(&fs.root).map_err(|reason| HostError::NotAHostTree {
                    root: fs.root.clone(),
                    reason,
                })?;
            let _ = fs.tree_modes.set(meta.map(|m| m.modes).unwrap_or_default());
        }
        Ok(fs)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True for the live host (root `/`), where netlink, processes and services are real.
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The same root, noting everything read from now on into the returned recorder.
    pub fn recording(&self) -> (HostFs, Arc<Mutex<Recorder>>) {
        let recorder = Arc::new(Mutex::new(Recorder::default()));
        // A cache of its own: every link crossed from now on must be crossed (and recorded).
        let fs = HostFs {
            root: self.root.clone(),
            recorder: Some(recorder.clone()),
            tree_modes: self.tree_modes.clone(),
            dirs: Arc::default(),
        };
        (fs, recorder)
    }

    /// The same root without recording (for scans whose results are recorded selectively).
    pub fn unrecorded(&self) -> HostFs {
        HostFs {
            root: self.root.clone(),
            recorder: None,
            tree_modes: self.tree_modes.clone(),
            dirs: self.dirs.clone(),
        }
    }

    fn record(&self, path: PathBuf, what: Recorded) {
        if let Some(rec) = &self.recorder
            && let Ok(mut rec) = rec.lock()
        {
            rec.note(path, what);
        }
    }

    /// Host path (`/proc/stat`) → normalized relative components.
    fn components(host_path: &Path) -> Vec<&OsStr> {
        host_path
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    /// Resolves `host_path` to a real path under the root, following links inside the root and
    /// recording each link crossed. Returns the resolved *host* path and the real path.
    fn resolve(&self, host_path: &Path) -> Result<(PathBuf, PathBuf)> {
        if self.is_live() && self.recorder.is_none() {
            // The kernel resolves links itself on the live host; no bookkeeping needed.
            return Ok((host_path.to_path_buf(), host_path.to_path_buf()));
        }
        self.resolve_in_root(host_path)
    }

    /// A tree path whose directory is resolved and whose last component is taken as it is (the
    /// caller opens it with O_NOFOLLOW). None on the live host, while recording (every link
    /// must be walked to be recorded) or when the directory cannot be resolved (the full walk
    /// then reports why).
    fn resolve_parent(&self, host_path: &Path) -> Option<(PathBuf, PathBuf)> {
        if self.is_live() || self.recorder.is_some() {
            return None;
        }
        let mut parts = Self::components(host_path);
        let last = parts.pop()?;
        let dir = if parts.is_empty() {
            PathBuf::from("/")
        } else {
            let dir: PathBuf = std::iter::once(OsStr::new("/")).chain(parts).collect();
            self.resolve_dir(&dir).ok()?
        };
        let resolved = dir.join(last);
        let real = self.real(&resolved);
        Some((resolved, real))
    }

    /// A directory's resolved host path, from the cache or resolved (and cached) now.
    fn resolve_dir(&self, dir: &Path) -> Result<PathBuf> {
        if let Some(hit) = self.dirs.lock().ok().and_then(|d| d.get(dir).cloned()) {
            return Ok(hit);
        }
        let (resolved, _) = self.resolve_in_root(dir)?;
        if let Ok(mut d) = self.dirs.lock() {
            d.insert(dir.to_path_buf(), resolved.clone());
        }
        Ok(resolved)
    }

    fn resolve_in_root(&self, host_path: &Path) -> Result<(PathBuf, PathBuf)> {
        let io_err = |source| HostError::Io {
            path: host_path.to_path_buf(),
            source,
        };
        let mut parts = Self::components(host_path);
        let last = parts.pop();
        // The parent first (cached), then the last component from there: the state the walk
        // below would reach after the parent's components, links followed.
        let mut resolved = if parts.is_empty() {
            PathBuf::from("/")
        } else {
            let dir: PathBuf = std::iter::once(OsStr::new("/")).chain(parts).collect();
            self.resolve_dir(&dir).map_err(|e| match e {
                // A missing directory on the way is reported as the file asked for, as a
                // one-pass walk reports it.
                HostError::Io { source, .. } => io_err(source),
                other => other,
            })?
        };
        let mut pending: Vec<PathBuf> = last.into_iter().map(PathBuf::from).collect();
        let mut hops = 0;
        while let Some(part) = pending.pop() {
            if part == Path::new("..") {
                resolved.pop();
                continue;
            }
            if part == Path::new(".") {
                continue;
            }
            let candidate = resolved.join(&part);
            let real = self.real(&candidate);
            let meta = match fs::symlink_metadata(&real) {
                Ok(m) => m,
                Err(e) if pending.is_empty() => {
                    return Err(HostError::Io {
                        path: candidate,
                        source: e,
                    });
                }
                Err(e) => return Err(io_err(e)),
            };
            if meta.file_type().is_symlink() {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(HostError::LinkLoop {
                        path: host_path.to_path_buf(),
                    });
                }
                let target = fs::read_link(&real).map_err(io_err)?;
                self.record(
                    candidate.clone(),
                    Recorded::Link {
                        target: target.to_string_lossy().into_owned(),
                    },
                );
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                // Push the target's components so they are resolved (and recorded) in turn.
                let mut parts: Vec<PathBuf> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(s) => Some(PathBuf::from(s)),
                        Component::ParentDir => Some(PathBuf::from("..")),
                        _ => None,
                    })
                    .collect();
                parts.reverse();
                pending.extend(parts);
            } else {
                resolved = candidate;
            }
        }
        let real = self.real(&resolved);
        Ok((resolved, real))
    }

    /// The path under the root for an already resolved host path.
    fn real(&self, host_path: &Path) -> PathBuf {
        let mut p = self.root.clone();
        for c in Self::components(host_path) {
            p.push(c);
        }
        p
    }

    /// Reads a whole file as text.
    pub fn read(&self, host_path: impl AsRef<Path>) -> Result<String> {
        self.read_at_most(host_path, MAX_FILE_BYTES)
    }

    /// As [`HostFs::read`], refusing a file of more than `limit` bytes: for files whose
    /// useful part is small and whose size anyone may choose (a process's `cmdline`, `status`
    /// in a tree), so that thousands of them cannot cost 64 MiB each.
    pub fn read_at_most(&self, host_path: impl AsRef<Path>, limit: u64) -> Result<String> {
        let host_path = host_path.as_ref();
        let io_err = |source| HostError::Io {
            path: host_path.to_path_buf(),
            source,
        };
        // In a tree, the file itself is opened with O_NOFOLLOW under its resolved directory:
        // no lstat(2) of its own. Only a link (ELOOP) takes the full walk.
        let fast = self.resolve_parent(host_path).and_then(|(resolved, real)| {
            match read_regular_with(&real, limit, libc::O_NOFOLLOW) {
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => None,
                other => Some((resolved, real, other)),
            }
        });
        let fast = match fast {
            // The directory the cache led to is gone (the tree was replaced): walk again.
            Some((_, real, Err(_))) if !real.parent().is_some_and(Path::is_dir) => {
                if let Ok(mut d) = self.dirs.lock() {
                    d.clear();
                }
                None
            }
            other => other,
        };
        let (resolved, real, bytes) = match fast {
            Some((resolved, real, bytes)) => {
                let bytes = bytes.map_err(|source| HostError::Io {
                    // A missing file is named by its resolved path, as the full walk names it.
                    path: if source.kind() == io::ErrorKind::NotFound {
                        resolved.clone()
                    } else {
                        host_path.to_path_buf()
                    },
                    source,
                })?;
                (resolved, real, bytes)
            }
            None => {
                let (resolved, real) = self.resolve(host_path)?;
                let bytes = read_regular(&real, limit).map_err(io_err)?;
                (resolved, real, bytes)
            }
        };
        if self.recorder.is_some() {
            let mode = self.mode_at(&resolved, &real).unwrap_or(0o644);
            self.record(
                resolved,
                Recorded::File {
                    mode,
                    content: bytes.clone(),
                },
            );
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads a file and hands it to a pure parser, attaching the path to any error.
    pub fn read_parsed<T>(
        &self,
        host_path: impl AsRef<Path>,
        parse: impl FnOnce(&str) -> std::result::Result<T, ParseError>,
    ) -> Result<T> {
        let host_path = host_path.as_ref();
        let text = self.read(host_path)?;
        parse(&text).map_err(|source| HostError::Parse {
            path: host_path.to_path_buf(),
            source,
        })
    }

    /// Reads a one-value file (sysfs attribute, sysctl) as a trimmed string.
    pub fn read_value(&self, host_path: impl AsRef<Path>) -> Result<String> {
        Ok(self.read(host_path)?.trim().to_string())
    }

    /// Lists a directory's entry names, sorted.
    pub fn read_dir(&self, host_path: impl AsRef<Path>) -> Result<Vec<String>> {
        let host_path = host_path.as_ref();
        let (resolved, real) = self.resolve(host_path)?;
        let io_err = |source| HostError::Io {
            path: host_path.to_path_buf(),
            source,
        };
        let mut names = Vec::new();
        for entry in fs::read_dir(&real).map_err(io_err)? {
            let entry = entry.map_err(io_err)?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        if self.recorder.is_some() {
            self.record(resolved.clone(), Recorded::Dir);
            for name in &names {
                let child = resolved.join(name);
                if let Ok(meta) = fs::symlink_metadata(real.join(name)) {
                    if meta.file_type().is_symlink() {
                        if let Ok(target) = fs::read_link(real.join(name)) {
                            let target = target.to_string_lossy().into_owned();
                            self.record(child, Recorded::Link { target });
                        }
                    } else if meta.is_dir() {
                        self.record(child, Recorded::Dir);
                    }
                }
            }
        }
        Ok(names)
    }

    /// The target text of a link, e.g. the driver name behind `device/driver`.
    pub fn read_link(&self, host_path: impl AsRef<Path>) -> Result<PathBuf> {
        let host_path = host_path.as_ref();
        let parent = host_path.parent().unwrap_or(Path::new("/"));
        let name = host_path.file_name().ok_or_else(|| HostError::Io {
            path: host_path.to_path_buf(),
            source: io::Error::from(io::ErrorKind::InvalidInput),
        })?;
        let (resolved_parent, real_parent) = self.resolve(parent)?;
        let real = real_parent.join(name);
        let target = fs::read_link(&real).map_err(|source| HostError::Io {
            path: host_path.to_path_buf(),
            source,
        })?;
        self.record(
            resolved_parent.join(name),
            Recorded::Link {
                target: target.to_string_lossy().into_owned(),
            },
        );
        Ok(target)
    }

    /// Where a link-laden host path really lives (host path form), e.g.
    /// `/sys/class/net/eth0/device` → `/sys/devices/pci0000:00/0000:00:03.0/virtio2`.
    /// While recording, the directory it resolves to is recorded too: a reader that judged
    /// from where a link lands (an interface under /sys/devices/pci… is physical) must judge
    /// the same in the snapshot, where a link to a directory never written would dangle.
    pub fn canonical(&self, host_path: impl AsRef<Path>) -> Result<PathBuf> {
        let (resolved, real) = self.resolve_in_root(host_path.as_ref())?;
        if self.recorder.is_some() && real.is_dir() {
            self.record(resolved.clone(), Recorded::Dir);
        }
        Ok(resolved)
    }

    /// The real path under the root for a directory netsteer will create and write (a state
    /// directory): the part that exists is resolved inside the root like every read — a link
    /// in it, even an absolute one, cannot point outside — and the part that does not exist yet
    /// is appended as plain names.
    pub fn real_path_for_write(&self, host_path: impl AsRef<Path>) -> Result<PathBuf> {
        let host_path = host_path.as_ref();
        if self.is_live() {
            return Ok(host_path.to_path_buf());
        }
        let parts = Self::components(host_path);
        if parts.iter().any(|p| *p == OsStr::new("..")) {
            return Err(HostError::Io {
                path: host_path.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "`..` in a state path"),
            });
        }
        // Component by component: each one that exists is resolved inside the root (a link
        // whose target is not in the tree is an error, never followed by the OS), so the real
        // path returned crosses no link at all; the rest does not exist yet.
        let mut resolved = PathBuf::from("/");
        let mut existing = 0;
        while existing < parts.len() {
            let candidate = resolved.join(parts[existing]);
            if fs::symlink_metadata(self.real(&candidate)).is_err() {
                break;
            }
            resolved = self.resolve_in_root(&candidate)?.0;
            existing += 1;
        }
        let mut real = self.real(&resolved);
        if existing > 0 && !real.is_dir() {
            return Err(HostError::Io {
                path: resolved,
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
            });
        }
        for p in &parts[existing..] {
            real.push(p);
        }
        Ok(real)
    }

    pub fn exists(&self, host_path: impl AsRef<Path>) -> bool {
        self.resolve(host_path.as_ref())
            .map(|(_, real)| real.exists())
            .unwrap_or(false)
    }

    /// True for a directory. While recording, a directory found is recorded (empty unless
    /// listed too): what a reader decided from a directory's presence (a bond's `bonding/`,
    /// a bridge's `bridge/`) must decide the same in the snapshot.
    pub fn is_dir(&self, host_path: impl AsRef<Path>) -> bool {
        let Ok((resolved, real)) = self.resolve(host_path.as_ref()) else {
            return false;
        };
        let dir = real.is_dir();
        if dir && self.recorder.is_some() {
            self.record(resolved, Recorded::Dir);
        }
        dir
    }

    /// Permission bits of a file (0444 on `smp_affinity` = the kernel will refuse writes).
    pub fn mode(&self, host_path: impl AsRef<Path>) -> Result<u32> {
        let host_path = host_path.as_ref();
        let (resolved, real) = self.resolve(host_path)?;
        let mode = self
            .mode_at(&resolved, &real)
            .map_err(|source| HostError::Io {
                path: host_path.to_path_buf(),
                source,
            })?;
        if let Some(rec) = &self.recorder
            && let Ok(content) = read_regular(&real, MAX_FILE_BYTES)
            && let Ok(mut rec) = rec.lock()
        {
            // A snapshot must carry the file whose mode was asked about, with that mode.
            rec.note(resolved, Recorded::File { mode, content });
        }
        Ok(mode)
    }

    /// Permission bits of an already resolved file, with a tree's recorded override; records
    /// nothing, so `read` can ask without reading the file a second time.
    fn mode_at(&self, resolved: &Path, real: &Path) -> io::Result<u32> {
        let mut mode = fs::metadata(real)?.permissions().mode() & 0o7777;
        if !self.is_live() {
            let modes = self.tree_modes.get_or_init(|| {
                crate::capture::read_meta(&self.root)
                    .ok()
                    .flatten()
                    .map(|m| m.modes)
                    .unwrap_or_default()
            });
            if let Some(m) = modes.get(resolved.to_string_lossy().as_ref()) {
                mode = *m;
            }
        }
        Ok(mode)
    }

    /// Writes a value to an existing file (a sysfs attribute, a sysctl, an IRQ affinity) in one
    /// `write(2)`, as the kernel's store functions expect; never creates or truncates-and-grows
    /// files the kernel did not make. The errno of a refusal is kept in the error.
    pub fn write(&self, host_path: impl AsRef<Path>, value: &str) -> Result<()> {
        let host_path = host_path.as_ref();
        let (_, real) = self.resolve(host_path)?;
        let io_err = |source| HostError::Io {
            path: host_path.to_path_buf(),
            source,
        };
        // A tree is written only where nobody else could swap a directory or link between
        // the resolution above and the open below: another user who can write the tree can
        // otherwise send root's write out of it (a directory renamed to a link mid-apply).
        if !self.is_live()
            && let Some(parent) = real.parent()
        {
            crate::trust::check_dir(parent).map_err(io_err)?;
        }
        // Said by type before opening (opening a FIFO for writing with no reader fails with
        // the obscure ENXIO), and O_NONBLOCK in case it was swapped in between: a blocking
        // open would wait for a reader forever.
        if let Ok(meta) = fs::metadata(&real)
            && !meta.is_file()
        {
            return Err(io_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&real)
            .map_err(io_err)?;
        check_regular(&file).map_err(io_err)?;
        if !self.is_live() {
            // A tree's file holds just the value; sysfs takes the write as it is.
            file.set_len(0).map_err(io_err)?;
        }
        file.write_all(value.as_bytes()).map_err(io_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        fs::create_dir_all(r.join("proc")).unwrap();
        fs::write(r.join("proc/stat"), "cpu 1 2 3 4\n").unwrap();
        fs::create_dir_all(r.join("sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0")).unwrap();
        fs::create_dir_all(r.join("sys/class/net")).unwrap();
        fs::write(
            r.join("sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/mtu"),
            "1500\n",
        )
        .unwrap();
        // Relative link, as sysfs makes them.
        symlink(
            "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0",
            r.join("sys/class/net/eth0"),
        )
        .unwrap();
        // Absolute link: must resolve inside the root, never on the live host.
        symlink(
            "/sys/devices/pci0000:00/0000:00:03.0",
            r.join("sys/class/net/abs"),
        )
        .unwrap();
        symlink("loop", r.join("sys/class/net/loop")).unwrap();
        dir
    }

    #[test]
    fn links_resolve_inside_the_root_and_are_recorded() {
        let dir = tree();
        let (fs, rec) = HostFs::open(dir.path()).unwrap().recording();
        assert_eq!(fs.read_value("/sys/class/net/eth0/mtu").unwrap(), "1500");
        assert_eq!(
            fs.canonical("/sys/class/net/abs/virtio2").unwrap(),
            PathBuf::from("/sys/devices/pci0000:00/0000:00:03.0/virtio2")
        );
        assert_eq!(
            fs.read_dir("/sys/class/net").unwrap(),
            ["abs", "eth0", "loop"]
        );
        let rec = rec.lock().unwrap();
        assert_eq!(
            rec.entries().get(Path::new("/sys/class/net/eth0")),
            Some(&Recorded::Link {
                target: "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0".into()
            })
        );
        assert!(matches!(
            rec.entries().get(Path::new(
                "/sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0/mtu"
            )),
            Some(Recorded::File { .. })
        ));
    }

    /// The directory cache: a file that is a link is still followed (the O_NOFOLLOW fast path
    /// falls back), escapes are still refused, and a tree replaced under a long-lived reader is
    /// read anew rather than through stale directories.
    #[test]
    fn cached_directories_follow_links_and_notice_a_replaced_tree() {
        let dir = tree();
        let r = dir.path();
        let dev = r.join("sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0");
        fs::write(dev.join("real_mtu"), "9000\n").unwrap();
        symlink("real_mtu", dev.join("mtu_link")).unwrap();
        symlink("/../../../../etc/hostname", dev.join("escape")).unwrap();
        let fs = HostFs::open(r).unwrap();
        for _ in 0..2 {
            assert_eq!(fs.read_value("/sys/class/net/eth0/mtu").unwrap(), "1500");
            assert_eq!(
                fs.read_value("/sys/class/net/eth0/mtu_link").unwrap(),
                "9000"
            );
            assert!(fs.read("/sys/class/net/eth0/escape").is_err());
            assert!(
                fs.read("/sys/class/net/eth0/absent")
                    .unwrap_err()
                    .is_not_found()
            );
        }
        // The device moves (another tree unpacked in the same place): eth0 now leads elsewhere.
        fs::remove_dir_all(r.join("sys/devices/pci0000:00/0000:00:03.0")).unwrap();
        let moved = r.join("sys/devices/pci0000:00/0000:00:04.0/virtio3/net/eth0");
        fs::create_dir_all(&moved).unwrap();
        fs::write(moved.join("mtu"), "1400\n").unwrap();
        fs::remove_file(r.join("sys/class/net/eth0")).unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:04.0/virtio3/net/eth0",
            r.join("sys/class/net/eth0"),
        )
        .unwrap();
        assert_eq!(fs.read_value("/sys/class/net/eth0/mtu").unwrap(), "1400");
    }

    /// A tree's files are read whole, also when a read returns less than the size (the
    /// one-read shortcut only takes a read of exactly the file's size).
    #[test]
    fn files_are_read_whole() {
        let dir = tree();
        let big = "x".repeat(300_000) + "\n";
        fs::write(dir.path().join("proc/big"), &big).unwrap();
        fs::write(dir.path().join("proc/empty"), "").unwrap();
        let fs = HostFs::open(dir.path()).unwrap();
        assert_eq!(fs.read("/proc/big").unwrap(), big);
        assert_eq!(fs.read("/proc/empty").unwrap(), "");
    }

    #[test]
    fn errors_name_the_host_path_and_loops_end() {
        let dir = tree();
        let fs = HostFs::open(dir.path()).unwrap();
        let err = fs.read("/proc/net/snmp").unwrap_err();
        assert!(err.is_not_found());
        assert!(err.to_string().starts_with("/proc/net/snmp: "), "{err}");
        assert!(matches!(
            fs.read("/sys/class/net/loop/x"),
            Err(HostError::LinkLoop { .. })
        ));
    }

    #[test]
    fn open_refuses_what_is_not_a_host_tree() {
        let dir = tempfile::tempdir().unwrap();
        let err = HostFs::open(dir.path()).unwrap_err();
        assert!(matches!(err, HostError::NotAHostTree { .. }));
        assert!(err.to_string().contains("not a host tree"));
        assert!(HostFs::open(dir.path().join("missing")).is_err());
    }

    #[test]
    fn fifos_and_huge_files_are_refused_not_waited_on() {
        let dir = tree();
        let r = dir.path();
        let fifo = r.join("proc/interrupts");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let fs = HostFs::open(r).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = fs.clone();
        std::thread::spawn(move || {
            let _ = tx.send((
                f2.read("/proc/interrupts")
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                f2.write("/proc/interrupts", "1").map_err(|e| e.to_string()),
            ));
        });
        let (read, write) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a FIFO must not block");
        let read = read.unwrap_err();
        assert!(
            read.contains("/proc/interrupts: not a regular file (a FIFO)"),
            "{read}"
        );
        assert!(write.unwrap_err().contains("not a regular file"));
        // A file past the cap is refused with the reason, without reading it all.
        let big = fs::File::create(r.join("proc/softirqs")).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();
        let e = fs.read("/proc/softirqs").unwrap_err().to_string();
        assert!(e.contains("/proc/softirqs: larger than 64 MiB"), "{e}");
        // At the cap exactly it is read.
        big.set_len(MAX_FILE_BYTES).unwrap();
        assert_eq!(
            fs.read("/proc/softirqs").unwrap().len() as u64,
            MAX_FILE_BYTES
        );
    }

    #[test]
    fn a_state_directory_behind_a_link_stays_inside_the_root() {
        let dir = tree();
        let r = dir.path();
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir_all(r.join("var")).unwrap();
        // ROOT/var/lib -> /elsewhere (absolute, outside the tree): refused, not followed.
        symlink(outside.path(), r.join("var/lib")).unwrap();
        let fs = HostFs::open(r).unwrap();
        assert!(fs.real_path_for_write("/var/lib/netsteer").is_err());
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
        // ROOT/var/lib -> /data: taken inside the root, as reads are.
        fs::remove_file(r.join("var/lib")).unwrap();
        fs::create_dir_all(r.join("data")).unwrap();
        symlink("/data", r.join("var/lib")).unwrap();
        assert_eq!(
            fs.real_path_for_write("/var/lib/netsteer").unwrap(),
            r.join("data/netsteer")
        );
        // A relative link that climbs out stops at the root.
        fs::remove_file(r.join("var/lib")).unwrap();
        symlink("../../../../../../../..", r.join("var/lib")).unwrap();
        let real = fs.real_path_for_write("/var/lib/netsteer").unwrap();
        assert_eq!(real, r.join("netsteer"));
        // Nothing existing: plain names under the root.
        fs::remove_file(r.join("var/lib")).unwrap();
        assert_eq!(
            fs.real_path_for_write("/var/lib/netsteer").unwrap(),
            r.join("var/lib/netsteer")
        );
    }

    #[test]
    fn writes_go_to_the_tree() {
        let dir = tree();
        let fs = HostFs::open(dir.path()).unwrap();
        fs.write("/sys/class/net/eth0/mtu", "9000\n").unwrap();
        assert_eq!(fs.read_value("/sys/class/net/eth0/mtu").unwrap(), "9000");
        assert!(
            fs.write("/sys/class/net/eth0/nope", "1")
                .unwrap_err()
                .is_not_found()
        );
    }
}
