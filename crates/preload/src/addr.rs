//! sockaddr ⇄ SocketAddr.

use libc::{sockaddr, socklen_t};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The address at `addr` if it is IPv4 or IPv6.
///
/// # Safety
/// `addr` must be null or valid for `len` bytes.
pub(crate) unsafe fn read(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: at least the family field is readable (checked above).
    let family = unsafe { (*addr).sa_family } as i32;
    match family {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family and length say it is a sockaddr_in; read unaligned.
            let a = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in>()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family and length say it is a sockaddr_in6; read unaligned.
            let a = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
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
    let mut st: libc::sockaddr_storage = unsafe_zeroed();
    let size = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write((&raw mut st).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            unsafe { std::ptr::write((&raw mut st).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `len` is valid (the caller's contract); `addr` is valid for `*len` bytes.
    unsafe {
        let room = (*len as usize).min(size);
        std::ptr::copy_nonoverlapping((&raw const st).cast::<u8>(), addr.cast::<u8>(), room);
        *len = size as socklen_t;
    }
}

fn unsafe_zeroed() -> libc::sockaddr_storage {
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
