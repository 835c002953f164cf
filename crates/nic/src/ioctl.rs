//! The SIOCETHTOOL ioctl: what older kernels answer instead of ethtool netlink (RSS before
//! 6.2, n-tuple rules and flow-hash fields on every kernel), and its only `unsafe`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A socket to address SIOCETHTOOL to (any family works; the kernel only looks at the name).
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One SIOCETHTOOL call on `dev` with the command buffer `buf` (read and written by the kernel).
pub(crate) fn ethtool(dev: &str, buf: &mut [u8]) -> io::Result<()> {
    if dev.is_empty() || dev.len() >= libc::IFNAMSIZ || dev.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {dev:?}"),
        ));
    }
    let sock = ioctl_socket()?;
    // SAFETY: ifreq is plain data; all-zero is a valid value (empty name, null data).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(dev.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = buf.as_mut_ptr().cast();
    // SAFETY: `ifr` names the device (NUL-terminated: the name is shorter than IFNAMSIZ and
    // the rest is zero) and points at `buf`, which lives across the call and is as large as
    // the command it holds says (the callers size it for the command and its trailing array).
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
