//! Output files the commands write after measuring (`tune search --report/--plan-out`,
//! `lab run --report`): each is created before the first run, so a missing directory, a file
//! already there, a link or a read-only file system is said at once, not after an hour of
//! trials. Created O_EXCL|O_NOFOLLOW (as root, never through a link someone planted, never over
//! a file) and removed again when the command ends without writing it.

use anyhow::{Context, Result, bail};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// An output file created empty at the start, written once at the end.
pub struct Output {
    flag: &'static str,
    path: PathBuf,
    file: Option<File>,
}

impl Output {
    /// Creates `path` anew, mode 0644; the error names the flag and the path.
    pub fn reserve(flag: &'static str, path: &Path) -> Result<Output> {
        if std::fs::symlink_metadata(path).is_ok() {
            bail!("{flag} {}: exists; give a new file", path.display());
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("{flag} {}", path.display()))?;
        Ok(Output {
            flag,
            path: path.to_path_buf(),
            file: Some(file),
        })
    }

    /// [`Output::reserve`] for an optional flag.
    pub fn maybe(flag: &'static str, path: Option<&Path>) -> Result<Option<Output>> {
        path.map(|p| Output::reserve(flag, p)).transpose()
    }

    /// Writes the whole content and keeps the file.
    pub fn write(mut self, bytes: &[u8]) -> Result<()> {
        let mut f = self.file.take().expect("written once");
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("{} {}", self.flag, self.path.display()))
    }
}

impl Drop for Output {
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
        let e = Output::reserve("--report", &d.path().join("no/such/r.html"))
            .err()
            .unwrap();
        assert!(format!("{e:#}").starts_with("--report "), "{e:#}");
        assert!(format!("{e:#}").contains("No such file"), "{e:#}");
        std::fs::write(d.path().join("there"), "x").unwrap();
        let e = Output::reserve("--plan-out", &d.path().join("there"))
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("exists"), "{e:#}");
        std::os::unix::fs::symlink("/etc/passwd-nope", d.path().join("l")).unwrap();
        assert!(Output::reserve("--report", &d.path().join("l")).is_err());
        // Unwritten, it is removed; written, it stays.
        let p = d.path().join("r.html");
        drop(Output::reserve("--report", &p).unwrap());
        assert!(!p.exists());
        Output::reserve("--report", &p)
            .unwrap()
            .write(b"<p>")
            .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"<p>");
    }
}
