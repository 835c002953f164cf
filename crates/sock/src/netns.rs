//! Moving the calling thread into a network namespace (setns(2) with CLONE_NEWNET). Sockets
//! keep the namespace they were created in, so a thread that creates its sockets inside a
//! namespace can hand them to any other thread afterwards.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Moves the calling thread into the namespace at `path` (e.g. /run/netns/NAME).
pub fn enter(path: &Path) -> io::Result<()> {
    let f = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    // SAFETY: `f` is an open namespace file for the call; setns touches no memory of ours.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("setns({}): {e}", path.display()),
        ));
    }
    Ok(())
}
