//! AF_XDP: the kernel-bypass path of the UDP echo benchmark. An XDP program (a few hand-encoded
//! eBPF instructions, [`prog`]) redirects IPv4/UDP datagrams to one port into an AF_XDP socket
//! ([`xsk`]) on each queue; everything else passes to the kernel. The program is attached
//! through a BPF link, so it is detached when the process exits or is killed.
//!
//! * [`insn`]: the eBPF instruction encoder; [`prog`]: the filter program.
//! * [`sys`]: bpf(2) — XSKMAP, program load (with the verifier's log on a rejection), link.
//! * [`xsk`]: the socket, its UMEM and rings, statistics.
//! * [`frame`]: Ethernet/IPv4/UDP frames built, parsed and echoed in place.

pub mod frame;
pub mod insn;
pub mod prog;
pub mod sys;
pub mod xsk;

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum AttachMode {
    /// In the driver (XDP_FLAGS_DRV_MODE): before an skb is allocated; an error if the
    /// driver has no native XDP.
    Native,
    /// After the skb is built (XDP_FLAGS_SKB_MODE): any device, slower.
    Generic,
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        })
    }
}

/// A failure of the AF_XDP path, naming the device and saying what to do where the errno has a
/// usual cause.
#[derive(Debug)]
pub struct XdpError {
    pub dev: String,
    pub what: String,
    pub source: io::Error,
}

impl XdpError {
    fn new(dev: &str, what: impl Into<String>, source: io::Error) -> XdpError {
        XdpError {
            dev: dev.to_string(),
            what: what.into(),
            source,
        }
    }

    fn hint(&self) -> Option<&'static str> {
        Some(match self.source.raw_os_error()? {
            libc::EPERM => "needs root (CAP_NET_ADMIN and CAP_BPF, or CAP_SYS_ADMIN)",
            libc::EAFNOSUPPORT => "this kernel has no AF_XDP (CONFIG_XDP_SOCKETS)",
            libc::ENOSYS => "this kernel has no bpf(2) (CONFIG_BPF_SYSCALL)",
            libc::EOPNOTSUPP if self.what.contains("zero-copy") => {
                "the driver has no AF_XDP zero-copy; use copy mode"
            }
            libc::EOPNOTSUPP => "the device has no native XDP; use generic mode",
            libc::EBUSY if self.what.contains("bind") => "that queue already has an AF_XDP socket",
            libc::EBUSY | libc::EEXIST => "the device already has an XDP program attached",
            libc::EINVAL if self.what.contains("bind") => {
                "no such queue on the device (see `ethtool -l`), or the device is down"
            }
            libc::ENODEV => "no such device",
            _ => return None,
        })
    }
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.dev, self.what, self.source)?;
        if let Some(h) = self.hint() {
            write!(f, " ({h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for XdpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The interface index of `name` in the calling thread's network namespace.
pub fn if_index(name: &str) -> Result<u32, XdpError> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| XdpError::new(name, "interface name", io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: a NUL-terminated name that lives through the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(XdpError::new(
            name,
            "no such interface",
            io::Error::last_os_error(),
        ));
    }
    Ok(i)
}

/// A MAC address from its text (`02:00:00:00:00:01`).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.trim().split(':');
    for o in &mut out {
        *o = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// The interface's MAC address (/sys/class/net/IF/address).
pub fn if_mac(name: &str) -> Result<[u8; 6], XdpError> {
    let path = format!("/sys/class/net/{name}/address");
    let text = std::fs::read_to_string(&path).map_err(|e| XdpError::new(name, &path, e))?;
    parse_mac(&text).ok_or_else(|| {
        XdpError::new(
            name,
            format!("{path}: {text:?} is not a MAC address"),
            io::ErrorKind::InvalidData.into(),
        )
    })
}

/// The neighbour entry of `ip` on `dev` from an /proc/net/arp text (complete entries only).
pub fn parse_arp(text: &str, ip: Ipv4Addr, dev: &str) -> Option<[u8; 6]> {
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // IP address, HW type, Flags, HW address, Mask, Device; flag 0x2 = complete.
        if f.len() < 6 || f[5] != dev || f[0].parse::<Ipv4Addr>().ok()? != ip {
            return None;
        }
        let flags = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).ok()?;
        (flags & 0x2 != 0).then(|| parse_mac(f[3])).flatten()
    })
}

/// Whether /proc/net/route (the calling thread's namespace) has an IPv4 default route through
/// `dev`: the AF_XDP path refuses such an interface unless asked, since the host's own
/// traffic runs there.
pub fn carries_default_route(route_text: &str, dev: &str) -> bool {
    route_text.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 7 && f[0] == dev && f[1] == "00000000" && f[7] == "00000000"
    })
}

/// The program attached to one interface, its XSKMAP, and the link that holds it there.
/// Dropping it (or the process ending, however it ends) detaches the program.
pub struct XdpProgram {
    // Drop order: the link first (detach), then program and map.
    _link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    pub mode: AttachMode,
    pub dev: String,
    pub ifindex: u32,
}

impl XdpProgram {
    /// Loads the filter for UDP `port` and attaches it to `dev` in `mode`, or native and then
    /// generic when `mode` is None. `queues`: XSKMAP slots (queue ids 0..queues).
    pub fn attach(
        dev: &str,
        port: u16,
        queues: u32,
        mode: Option<AttachMode>,
    ) -> Result<XdpProgram, XdpError> {
        let ifindex = if_index(dev)?;
        let map =
            sys::xskmap(queues.max(1)).map_err(|e| XdpError::new(dev, "creating the XSKMAP", e))?;
        let prog = sys::load_xdp(&prog::udp_port_redirect(port, map.as_raw_fd()))
            .map_err(|e| XdpError::new(dev, "loading the XDP program", e))?;
        let try_mode = |m: AttachMode| {
            let flags = match m {
                AttachMode::Native => sys::XDP_FLAGS_DRV_MODE,
                AttachMode::Generic => sys::XDP_FLAGS_SKB_MODE,
            };
            sys::link_xdp(prog.as_fd(), ifindex, flags)
                .map_err(|e| XdpError::new(dev, format!("attaching in {m} mode"), e))
        };
        let (link, mode) = match mode {
            Some(m) => (try_mode(m)?, m),
            None => match try_mode(AttachMode::Native) {
                Ok(l) => (l, AttachMode::Native),
                Err(e)
                    if matches!(
                        e.source.raw_os_error(),
                        Some(libc::EOPNOTSUPP | libc::EINVAL)
                    ) =>
                {
                    (try_mode(AttachMode::Generic)?, AttachMode::Generic)
                }
                Err(e) => return Err(e),
            },
        };
        Ok(XdpProgram {
            _link: link,
            _prog: prog,
            map,
            mode,
            dev: dev.to_string(),
            ifindex,
        })
    }

    /// Sends `queue`'s matching datagrams to `xsk`.
    pub fn register(&self, queue: u32, xsk: &xsk::Xsk) -> Result<(), XdpError> {
        sys::map_update(self.map.as_fd(), queue, xsk.as_fd().as_raw_fd() as u32).map_err(|e| {
            XdpError::new(
                &self.dev,
                format!("adding queue {queue}'s socket to the XSKMAP"),
                e,
            )
        })
    }
}

/// Binds an AF_XDP socket to `dev`'s `queue`: zero-copy when `zerocopy` is Some(true), copy
/// when Some(false), else zero-copy and then copy.
pub fn bind_socket(
    dev: &str,
    ifindex: u32,
    queue: u32,
    frames: u32,
    ring: u32,
    zerocopy: Option<bool>,
) -> Result<xsk::Xsk, XdpError> {
    let attempt = |mode: xsk::BindMode| {
        let umem = xsk::Umem::new(frames, 4096)
            .map_err(|e| XdpError::new(dev, "allocating the UMEM", e))?;
        xsk::Xsk::bind(umem, ring, ifindex, queue, mode).map_err(|e| {
            let what = match mode {
                xsk::BindMode::Copy => format!("{} (queue {queue}, copy mode)", e.step),
                xsk::BindMode::ZeroCopy => format!("{} (queue {queue}, zero-copy)", e.step),
            };
            XdpError::new(dev, what, e.source)
        })
    };
    match zerocopy {
        Some(true) => attempt(xsk::BindMode::ZeroCopy),
        Some(false) => attempt(xsk::BindMode::Copy),
        None => match attempt(xsk::BindMode::ZeroCopy) {
            Ok(x) => Ok(x),
            Err(e) if e.source.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                attempt(xsk::BindMode::Copy)
            }
            Err(e) => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arp_and_route_tables_are_read() {
        let arp = "IP address       HW type     Flags       HW address            Mask     Device\n\
                   10.77.0.2        0x1         0x2         6a:1b:00:aa:bb:cc     *        v0a\n\
                   10.77.0.3        0x1         0x0         00:00:00:00:00:00     *        v0a\n\
                   10.77.0.2        0x1         0x2         02:00:00:00:00:09     *        eth0\n";
        assert_eq!(
            parse_arp(arp, "10.77.0.2".parse().unwrap(), "v0a"),
            Some([0x6a, 0x1b, 0, 0xaa, 0xbb, 0xcc])
        );
        // Incomplete entries and other devices do not count.
        assert_eq!(parse_arp(arp, "10.77.0.3".parse().unwrap(), "v0a"), None);
        assert_eq!(parse_arp(arp, "10.77.0.9".parse().unwrap(), "v0a"), None);
        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                     eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                     v0a\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        assert!(carries_default_route(route, "eth0"));
        assert!(!carries_default_route(route, "v0a"));
        assert_eq!(
            parse_mac("02:00:0a:0B:00:ff\n"),
            Some([2, 0, 10, 11, 0, 255])
        );
        assert_eq!(parse_mac("02:00:0a:0b:00"), None);
        assert_eq!(parse_mac("02:00:0a:0b:00:ff:01"), None);
    }

    #[test]
    fn errors_name_the_device_and_the_usual_cause() {
        let e = XdpError::new(
            "v0b",
            "bind (queue 3, copy mode)",
            io::Error::from_raw_os_error(libc::EINVAL),
        );
        let s = e.to_string();
        assert!(s.starts_with("v0b: bind (queue 3, copy mode): "), "{s}");
        assert!(s.contains("no such queue"), "{s}");
        let e = XdpError::new(
            "v0b",
            "attaching in native mode",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert!(e.to_string().contains("needs root"));
    }
}
