//! Whether root may act on a file or directory: only one nobody else could have written, or
//! swapped since it was checked.
//!
//! A path is as safe as every directory and link on the way to it. Another user who can write
//! a directory on the way can rename an entry in it and put a link or a directory of their own
//! in its place between root's check and root's use (a `tune rollback FILE` was raced so, and a
//! `--state-dir` reached through another user's link in /tmp was repointed at a directory of
//! theirs). So: every link crossed must belong to root or to the user running netsteer (only
//! they can repoint it), and every directory, once the links are resolved, must belong to one
//! of them and be writable by nobody else — except a sticky one (/tmp), in which others cannot
//! rename or remove what they do not own (unlink(2), EPERM). A file is then opened without
//! following a link and judged by `fstat` on what was opened, not by a name looked at before.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// Links followed at most while resolving one path (Linux's MAXSYMLINKS).
const MAX_HOPS: usize = 40;

/// This process's effective uid, from `/proc/self/status` (its `Uid:` line: real, effective,
/// saved, filesystem; proc(5)), so no `unsafe` is needed for it. Unknown reads as 0: then only
/// root's files are trusted, never more.
pub fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|r| r.split_whitespace().nth(1))
                    .and_then(|u| u.parse().ok())
            })
            .unwrap_or(0)
    })
}

/// Root, or the user running netsteer.
pub fn trusted_uid(uid: u32) -> bool {
    uid == 0 || uid == euid()
}

fn refused(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{}: {why}; refused: another user could plant or swap what root acts on here",
            path.display()
        ),
    )
}

fn owner_text() -> String {
    if euid() == 0 {
        "root".into()
    } else {
        format!("root or uid {}", euid())
    }
}

/// A directory's owner and mode, as [`check_dir`] judges them: `ancestor` allows a
/// world-writable sticky directory above (/tmp), never for the directory itself.
pub fn check_dir_meta(path: &Path, meta: &fs::Metadata, ancestor: bool) -> io::Result<()> {
    if !meta.is_dir() {
        return Err(refused(path, "not a directory".into()));
    }
    let uid = meta.uid();
    if !trusted_uid(uid) {
        return Err(refused(
            path,
            format!("owned by uid {uid}, not by {}", owner_text()),
        ));
    }
    let mode = meta.mode() & 0o7777;
    let sticky = mode & libc::S_ISVTX != 0;
    if mode & 0o022 != 0 && !(ancestor && sticky) {
        return Err(refused(
            path,
            format!(
                "mode {mode:04o} lets {} write it (chmod go-w {})",
                if mode & 0o002 != 0 {
                    "every user"
                } else {
                    "its group"
                },
                path.display()
            ),
        ));
    }
    Ok(())
}

/// A file's owner and mode: root's (or the running user's), writable by nobody else.
pub fn check_file_meta(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    let uid = meta.uid();
    let mode = meta.mode() & 0o7777;
    let why = if !trusted_uid(uid) {
        format!("owned by uid {uid}, not by {}", owner_text())
    } else if mode & 0o022 != 0 {
        format!("mode {mode:04o} lets others write it")
    } else {
        return Ok(());
    };
    Err(refused(path, why))
}

/// Resolves `path` as the kernel would, link by link, refusing a link that belongs to anyone
/// but root or the running user (they alone can repoint it); returns the real path.
fn resolve(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut todo: std::collections::VecDeque<PathBuf> = abs
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect();
    let mut out = PathBuf::from("/");
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        if c.as_os_str() == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&c);
        let meta = match fs::symlink_metadata(&next) {
            Ok(m) => m,
            // What does not exist yet is made by root below a directory checked here.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                out = next;
                continue;
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", next.display()))),
        };
        if !meta.file_type().is_symlink() {
            out = next;
            continue;
        }
        hops += 1;
        if hops > MAX_HOPS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: more than {MAX_HOPS} links", path.display()),
            ));
        }
        if !trusted_uid(meta.uid()) {
            return Err(refused(
                &next,
                format!(
                    "a link owned by uid {}, not by {}: its owner can repoint it",
                    meta.uid(),
                    owner_text()
                ),
            ));
        }
        let target = fs::read_link(&next)?;
        if target.is_absolute() {
            out = PathBuf::from("/");
        }
        for c in target.components().rev() {
            match c {
                Component::Normal(n) => todo.push_front(PathBuf::from(n)),
                Component::ParentDir => todo.push_front(PathBuf::from("..")),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Checks that `dir` and everything above it is root's own ([`check_dir_meta`] for each real
/// directory, every link crossed root's or the running user's), and returns its real path.
/// A part that does not exist yet is passed: root creates it inside what was checked.
pub fn check_dir(dir: &Path) -> io::Result<PathBuf> {
    let real = resolve(dir)?;
    let comps: Vec<_> = real.components().collect();
    let mut cur = PathBuf::new();
    for (i, c) in comps.iter().enumerate() {
        cur.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(meta) => check_dir_meta(&cur, &meta, i + 1 < comps.len())?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", cur.display()))),
        }
    }
    Ok(real)
}

/// Reads a state file root will act on: the directories above it checked ([`check_dir`]),
/// then opened without following a link (O_NOFOLLOW, O_NONBLOCK: a FIFO does not hang it)
/// and judged by `fstat` on the descriptor — a regular file of root's writable by nobody
/// else, of at most `limit` bytes — so what is read is what was checked.
pub fn read_owned_file(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        check_dir(parent)?;
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a regular file", path.display()),
        ));
    }
    check_file_meta(path, &meta)?;
    crate::fs::read_open(file, limit)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Another user's link on the way is refused whatever it points at; root's own link is
    /// followed and what it leads to judged; a directory others may write is refused, a
    /// sticky one above is not.
    #[test]
    fn links_and_directories_on_the_way_are_judged_by_who_can_change_them() {
        let t = tempfile::tempdir().unwrap();
        let mine = t.path().join("mine");
        fs::create_dir(&mine).unwrap();
        fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        assert_eq!(check_dir(&link.join("sub")).unwrap(), mine.join("sub"));
        if euid() == 0 {
            // lchown(2) the link to nobody: now its owner could repoint it.
            let st = std::process::Command::new("chown")
                .args(["-h", "65534:65534", link.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(st.success());
            let e = check_dir(&link).unwrap_err();
            assert!(e.to_string().contains("a link owned by uid 65534"), "{e}");
        }
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_dir(&open).unwrap_err();
        assert!(e.to_string().contains("mode 0777"), "{e}");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        fs::create_dir(open.join("inner")).unwrap();
        check_dir(&open.join("inner")).unwrap();
        assert!(check_dir(&open).is_err(), "the sticky directory itself");
    }
}
