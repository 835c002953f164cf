//! The guest's scratch share: the one directory of the host a guest writes (`/x` in the guest,
//! [`GUEST_SHARE`] inside its `chroot /host`), so what root reads from it and writes into it
//! is never taken at its word: output is read through the directory opened before the guest
//! ran, not through a link, with a size cap; a program is installed from the host's own file
//! into a file made here.

use super::{GUEST_SHARE, Guest};
use crate::{LabError, Result};
use std::path::{Path, PathBuf};

/// The most of a command's output read back (a guest's `cat` of a big file stays far below).
const MAX_OUTPUT: u64 = 16 << 20;

/// Opens a directory of the guest's share as it is now (not through a link).
pub(super) fn open_dir(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| LabError::Io {
            what: format!("opening {}", path.display()),
            source,
        })
}

/// `name` inside the directory `dir` was opened as, whatever has been put at its path since
/// (the kernel resolves `/proc/self/fd/N` to the open directory itself).
pub(super) fn in_dir(dir: &std::fs::File, name: &str) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()))
}

/// A command's output from the guest's share: a regular file, not through a link, at most
/// [`MAX_OUTPUT`] bytes (the guest writes there and root reads it). Missing or refused: empty,
/// and the caller judges the command by its exit code and what it expected to read.
pub(super) fn read_output(file: &Path) -> String {
    netsteer_host::fs::read_regular_nofollow(file, MAX_OUTPUT)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Gives `guests` the program at `host_bin` through their scratch shares and returns its path
/// inside `chroot /host`.
pub fn install_into(host_bin: &Path, guests: &[&Guest]) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = host_bin
        .file_name()
        .ok_or_else(|| LabError::Invalid(format!("{}: not a file", host_bin.display())))?
        .to_string_lossy()
        .into_owned();
    let io = |what: String| move |source| LabError::Io { what, source };
    let mut done: Vec<PathBuf> = Vec::new();
    for g in guests {
        let dest = g.share_dir().join(&name);
        if done.contains(&dest) {
            // A twin's two channels share one directory.
            continue;
        }
        done.push(dest.clone());
        // Always from the host's own file, into a file made here: the share is the guest's to
        // write, so whatever it left at that name (a link, another program) is removed, not
        // followed or trusted as a source.
        match std::fs::remove_file(&dest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LabError::Io {
                    what: format!("removing {}", dest.display()),
                    source: e,
                });
            }
            _ => {}
        }
        let mut from =
            std::fs::File::open(host_bin).map_err(io(format!("opening {}", host_bin.display())))?;
        let mut to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&dest)
            .map_err(io(format!("creating {}", dest.display())))?;
        // Whatever the umask: the guest runs it.
        use std::os::unix::fs::PermissionsExt;
        to.set_permissions(std::fs::Permissions::from_mode(0o755))
            .map_err(io(format!("chmod 755 {}", dest.display())))?;
        std::io::copy(&mut from, &mut to).map_err(io(format!(
            "copying {} to {}",
            host_bin.display(),
            dest.display()
        )))?;
    }
    Ok(format!("{GUEST_SHARE}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_commands_output_is_read_only_from_a_regular_file_in_the_directory_opened_first() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join("x")).unwrap();
        let secret = d.join("secret");
        std::fs::write(&secret, "not the guest's").unwrap();
        std::fs::write(d.join("x/out.1"), "eth0\n").unwrap();
        let x = open_dir(&d.join("x")).unwrap();
        assert_eq!(read_output(&in_dir(&x, "out.1")), "eth0\n");
        // A link the guest left as the output file is not followed.
        std::os::unix::fs::symlink(&secret, d.join("x/out.2")).unwrap();
        assert_eq!(read_output(&in_dir(&x, "out.2")), "");
        // Missing: empty.
        assert_eq!(read_output(&in_dir(&x, "out.3")), "");
        // The directory swapped for a link after it was opened: the files are still the
        // opened directory's, and removing one removes it there, not through the link.
        std::fs::create_dir(d.join("elsewhere")).unwrap();
        std::fs::write(d.join("elsewhere/out.1"), "planted").unwrap();
        std::fs::rename(d.join("x"), d.join("x-moved")).unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("x")).unwrap();
        assert_eq!(read_output(&in_dir(&x, "out.1")), "eth0\n");
        std::fs::remove_file(in_dir(&x, "out.1")).unwrap();
        assert!(d.join("elsewhere/out.1").exists());
        assert!(!d.join("x-moved/out.1").exists());
        // A directory that is a link when opened is refused.
        assert!(open_dir(&d.join("x")).is_err());
    }

    #[test]
    fn a_program_is_installed_from_the_hosts_file_over_whatever_the_guest_left() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let bin = d.join("netsteer");
        std::fs::write(&bin, "the real program").unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, "host file").unwrap();
        std::fs::create_dir_all(d.join("g/x")).unwrap();
        // The guest planted a link where the program goes.
        std::os::unix::fs::symlink(&victim, d.join("g/x/netsteer")).unwrap();
        let g = Guest {
            name: "g".into(),
            child: None,
            chan: None,
            dir: d.join("g"),
            sock: d.join("g/ch.sock"),
            out: open_dir(&d.join("g/x")).unwrap(),
            peer_out: None,
            next: 0,
            boot_time: Duration::ZERO,
            release: String::new(),
        };
        assert_eq!(
            install_into(&bin, &[&g, &g]).unwrap(),
            format!("{GUEST_SHARE}/netsteer")
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host file");
        let installed = d.join("g/x/netsteer");
        assert!(
            !std::fs::symlink_metadata(&installed)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(&installed).unwrap(),
            "the real program"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }
}
