//! Output files a command writes after measuring (`tune search --report/--plan-out`, `lab run
//! --report`): each is created before the first run, so a missing directory, a file already
//! there, a link or a read-only file system is said at once, not after an hour of trials.
//! Created O_EXCL|O_NOFOLLOW (as root, never through a link someone planted, never over a file)
//! and removed again when the command ends without writing it.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// An output file created empty at the start, written once at the end.
pub struct NewFile {
    flag: String,
    path: PathBuf,
    file: Option<File>,
}

/// `flag path: what`, keeping the error's kind.
fn named(flag: &str, path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{flag} {}: {e}", path.display()))
}

impl NewFile {
    /// Creates `path` anew, mode 0644; errors name `flag` (the option that gave the path)
    /// and the path.
    pub fn create(flag: &str, path: &Path) -> io::Result<NewFile> {
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(named(
                flag,
                path,
                io::Error::new(io::ErrorKind::AlreadyExists, "exists; give a new file"),
            ));
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| named(flag, path, e))?;
        Ok(NewFile {
            flag: flag.to_string(),
            path: path.to_path_buf(),
            file: Some(file),
        })
    }

    /// [`NewFile::create`] for an optional path.
    pub fn maybe(flag: &str, path: Option<&Path>) -> io::Result<Option<NewFile>> {
        path.map(|p| NewFile::create(flag, p)).transpose()
    }

    /// Writes the whole content and keeps the file.
    pub fn write(mut self, bytes: &[u8]) -> io::Result<()> {
        let mut f = self.file.take().expect("written once");
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| named(&self.flag, &self.path, e))
    }
}

impl Drop for NewFile {
    /// Not written (the command failed, or had nothing to write): the empty file goes, so a
    /// rerun with the same flag is not refused.
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_an_existing_file_and_a_link_are_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let e = NewFile::create("--report", &d.path().join("no/such/r.html"))
            .err()
            .unwrap();
        assert!(e.to_string().starts_with("--report "), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        std::fs::write(d.path().join("there"), "x").unwrap();
        let e = NewFile::create("--plan-out", &d.path().join("there"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("exists"), "{e}");
        std::os::unix::fs::symlink("/etc/passwd-nope", d.path().join("l")).unwrap();
        assert!(NewFile::create("--report", &d.path().join("l")).is_err());
        // Unwritten, it is removed; written, it stays.
        let p = d.path().join("r.html");
        drop(NewFile::create("--report", &p).unwrap());
        assert!(!p.exists());
        NewFile::create("--report", &p)
            .unwrap()
            .write(b"<p>")
            .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"<p>");
    }
}
