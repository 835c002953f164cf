//! sockaddr ⇄ SocketAddr at the C boundary (the conversions are `netsteer_sock::sockaddr`).

use libc::{sockaddr, socklen_t};
use netsteer_sock::sockaddr as raw;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The address at `addr` if it is IPv4 or IPv6 (the conversion is `netsteer_sock`'s).
///
/// # Safety
/// `addr` must be null or valid for `len` bytes.
pub(crate) unsafe fn read(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() {
        return None;
    }
    let mut st = zeroed();
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: `addr` is valid for `len` ≥ `n` bytes (the caller's contract); `st` for `n`.
    unsafe { std::ptr::copy_nonoverlapping(addr.cast::<u8>(), (&raw mut st).cast::<u8>(), n) };
    raw::to_std(&st, n as socklen_t)
}

/// Writes `a` to `addr` as getpeername/accept do: truncated to `*len`, `*len` set to the
/// full size.
///
/// # Safety
/// `addr` and `len` must be null, or `len` valid and `addr` valid for `*len` bytes.
pub(crate) unsafe fn write(a: SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let (st, size) = raw::to_raw(&a);
    // SAFETY: `len` is valid (the caller's contract); `addr` is valid for `*len` bytes.
    unsafe {
        let room = (*len as usize).min(size as usize);
        std::ptr::copy_nonoverlapping((&raw const st).cast::<u8>(), addr.cast::<u8>(), room);
        *len = size;
    }
}

fn zeroed() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain bytes; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The unspecified address of `a`'s family.
pub(crate) fn unspecified_like(a: &SocketAddr, port: u16) -> SocketAddr {
    let ip: IpAddr = match a {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    SocketAddr::new(ip, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_v4_and_v6() {
        for a in ["10.0.0.2:6379", "[fe80::1%3]:80", "[::ffff:1.2.3.4]:7"] {
            let a: SocketAddr = a.parse().unwrap();
            // SAFETY: zeroed storage is a valid sockaddr_storage.
            let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
            // SAFETY: `st` is valid for `len` bytes.
            unsafe { write(a, (&raw mut st).cast(), &raw mut len) };
            // SAFETY: written just above, `len` bytes valid.
            let back = unsafe { read((&raw const st).cast(), len) };
            assert_eq!(back, Some(a));
        }
    }

    #[test]
    fn short_buffers_are_truncated_and_told_the_size() {
        let a: SocketAddr = "10.0.0.2:6379".parse().unwrap();
        let mut buf = [0u8; 4];
        let mut len: socklen_t = 4;
        // SAFETY: `buf` is valid for 4 bytes, as `len` says.
        unsafe { write(a, buf.as_mut_ptr().cast(), &raw mut len) };
        assert_eq!(len as usize, std::mem::size_of::<libc::sockaddr_in>());
        assert_eq!(u16::from_ne_bytes([buf[0], buf[1]]), libc::AF_INET as u16);
        // SAFETY: a null address is refused before any read.
        assert_eq!(unsafe { read(std::ptr::null(), 16) }, None);
    }
}
