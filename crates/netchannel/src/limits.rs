//! What peers may take of an accepting endpoint, counted three ways: per address, per source
//! prefix (a /24 of IPv4, a /64 of IPv6 by default: what one host, one customer or one cloud
//! subnet commonly holds, so adding addresses does not add places), and for the whole endpoint.
//! A per-address cap alone let 64 loopback addresses take all 256 session places in 0.2 s;
//! with no whole-endpoint cap, each extra address added its own share of memory.
//!
//! Handshakes and receive memory are counted here ([`Tally`]); pending links and sessions are
//! counted from the endpoint's own lists, with the same [`prefix`].

use crate::config::Config;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The source prefix `ip` is counted under: the address with its host bits cleared. An
/// IPv4-mapped IPv6 address counts as the IPv4 address it is.
pub fn prefix(ip: IpAddr, v4_bits: u8, v6_bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(v4_bits.min(32));
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => prefix(IpAddr::V4(v4), v4_bits, v6_bits),
            None => {
                let bits = u32::from(v6_bits.min(128));
                let mask = if bits == 0 {
                    0
                } else {
                    u128::MAX << (128 - bits)
                };
                IpAddr::V6((u128::from(a) & mask).into())
            }
        },
    }
}

/// The three caps on one quantity, with the names of the settings that set them (a refusal
/// names the one it hit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub per_address: (u64, &'static str),
    pub per_prefix: (u64, &'static str),
    pub total: (u64, &'static str),
}

/// Whether one more (`add`) fits: `mine` from this address, `ours` from its prefix, `all`
/// in total. The refusal says which cap and what is counted.
pub(crate) fn fits(
    what: &str,
    add: u64,
    (mine, ours, all): (u64, u64, u64),
    caps: &Caps,
) -> Result<(), String> {
    let over = |have: u64, (cap, name): (u64, &str), whose: &str| {
        if have.saturating_add(add) > cap {
            Err(format!(
                "{have} {what} {whose}, {add} more would pass {cap} ({name})"
            ))
        } else {
            Ok(())
        }
    };
    over(mine, caps.per_address, "from this address")?;
    over(ours, caps.per_prefix, "from its prefix")?;
    over(all, caps.total, "in all")
}

/// A quantity counted per address, per prefix and in total; entries leave at zero, so the
/// maps hold only peers that hold something.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    by_address: HashMap<IpAddr, u64>,
    by_prefix: HashMap<IpAddr, u64>,
    total: u64,
}

impl Tally {
    fn counts(&self, ip: IpAddr, net: IpAddr) -> (u64, u64, u64) {
        (
            self.by_address.get(&ip).copied().unwrap_or(0),
            self.by_prefix.get(&net).copied().unwrap_or(0),
            self.total,
        )
    }

    /// Adds `n` when it fits under `caps`.
    pub fn take(
        &mut self,
        what: &str,
        ip: IpAddr,
        net: IpAddr,
        n: u64,
        caps: &Caps,
    ) -> Result<(), String> {
        fits(what, n, self.counts(ip, net), caps)?;
        *self.by_address.entry(ip).or_insert(0) += n;
        *self.by_prefix.entry(net).or_insert(0) += n;
        self.total += n;
        Ok(())
    }

    pub fn give_back(&mut self, ip: IpAddr, net: IpAddr, n: u64) {
        for (map, key) in [(&mut self.by_address, ip), (&mut self.by_prefix, net)] {
            if let Some(v) = map.get_mut(&key) {
                *v = v.saturating_sub(n);
                if *v == 0 {
                    map.remove(&key);
                }
            }
        }
        self.total = self.total.saturating_sub(n);
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

/// The endpoint-wide accounting its accepted sessions share: receive memory leased per
/// virtual socket a peer opens, and the record of refusals ([`crate::Stats`]).
#[derive(Debug)]
pub(crate) struct Guard {
    cfg: Arc<Config>,
    memory: Mutex<Tally>,
    pub rejected: AtomicU64,
    pub rejected_opens: AtomicU64,
    pub last_rejection: Mutex<Option<String>>,
}

/// One socket's receive window, held from the peer's OPEN until the socket is gone.
#[derive(Debug)]
pub(crate) struct Lease {
    guard: Arc<Guard>,
    ip: IpAddr,
    bytes: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let net = self.guard.prefix(self.ip);
        crate::socket::lock(&self.guard.memory).give_back(self.ip, net, self.bytes);
    }
}

impl Guard {
    pub fn new(cfg: Arc<Config>) -> Arc<Guard> {
        Arc::new(Guard {
            cfg,
            memory: Mutex::default(),
            rejected: AtomicU64::new(0),
            rejected_opens: AtomicU64::new(0),
            last_rejection: Mutex::new(None),
        })
    }

    pub fn prefix(&self, ip: IpAddr) -> IpAddr {
        prefix(ip, self.cfg.peer_prefix_v4, self.cfg.peer_prefix_v6)
    }

    /// What the holders `items` (each an address and how much it holds) count against one
    /// more from `ip`: (from `ip`, from its prefix, in all), for [`fits`].
    pub fn counts(
        &self,
        ip: IpAddr,
        items: impl Iterator<Item = (IpAddr, u64)>,
    ) -> (u64, u64, u64) {
        let net = self.prefix(ip);
        items.fold((0, 0, 0), |(a, p, t), (other, n)| {
            (
                a + if other == ip { n } else { 0 },
                p + if self.prefix(other) == net { n } else { 0 },
                t + n,
            )
        })
    }

    /// Leases one receive window for a socket `ip` opened. Per address the sessions' own
    /// bound applies (`max_sessions_per_peer × session_memory`).
    pub fn lease(self: &Arc<Self>, ip: IpAddr) -> Result<Lease, String> {
        let bytes = u64::from(self.cfg.window);
        let caps = Caps {
            per_address: (
                (self.cfg.max_sessions_per_peer as u64).saturating_mul(self.cfg.session_memory),
                "max_sessions_per_peer × session_memory",
            ),
            per_prefix: (
                self.cfg.max_receive_memory_per_prefix,
                "max_receive_memory_per_prefix",
            ),
            total: (self.cfg.max_receive_memory, "max_receive_memory"),
        };
        crate::socket::lock(&self.memory).take(
            "bytes of receive windows",
            ip,
            self.prefix(ip),
            bytes,
            &caps,
        )?;
        Ok(Lease {
            guard: self.clone(),
            ip,
            bytes,
        })
    }

    /// Receive-window bytes leased now, all peers together.
    pub fn memory_leased(&self) -> u64 {
        crate::socket::lock(&self.memory).total()
    }

    /// A channel connection closed in its handshake, and why.
    pub fn reject(&self, what: String) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        *crate::socket::lock(&self.last_rejection) = Some(what);
    }

    /// A peer's OPEN reset for a cap, and why.
    pub fn refuse_open(&self, what: String) {
        self.rejected_opens.fetch_add(1, Ordering::Relaxed);
        *crate::socket::lock(&self.last_rejection) = Some(what);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_clear_the_host_bits_and_mapped_addresses_count_as_ipv4() {
        let p = |s: &str| prefix(s.parse().unwrap(), 24, 64).to_string();
        assert_eq!(p("192.0.2.77"), "192.0.2.0");
        assert_eq!(p("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::");
        assert_eq!(p("::ffff:192.0.2.77"), "192.0.2.0");
        assert_eq!(
            prefix("10.1.2.3".parse().unwrap(), 0, 0).to_string(),
            "0.0.0.0"
        );
        assert_eq!(
            prefix("10.1.2.3".parse().unwrap(), 40, 200).to_string(),
            "10.1.2.3"
        );
    }

    #[test]
    fn a_tally_refuses_at_each_cap_by_name_and_forgets_peers_at_zero() {
        let caps = Caps {
            per_address: (2, "a"),
            per_prefix: (3, "p"),
            total: (4, "t"),
        };
        let mut t = Tally::default();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let net = |s: &str| prefix(ip(s), 24, 64);
        for host in ["10.0.0.1", "10.0.0.1"] {
            t.take("x", ip(host), net(host), 1, &caps).unwrap();
        }
        let e = t
            .take("x", ip("10.0.0.1"), net("10.0.0.1"), 1, &caps)
            .unwrap_err();
        assert!(e.contains("(a)") && e.contains("from this address"), "{e}");
        t.take("x", ip("10.0.0.2"), net("10.0.0.2"), 1, &caps)
            .unwrap();
        let e = t
            .take("x", ip("10.0.0.3"), net("10.0.0.3"), 1, &caps)
            .unwrap_err();
        assert!(e.contains("(p)"), "{e}");
        t.take("x", ip("10.0.1.1"), net("10.0.1.1"), 1, &caps)
            .unwrap();
        let e = t
            .take("x", ip("10.0.2.1"), net("10.0.2.1"), 1, &caps)
            .unwrap_err();
        assert!(e.contains("(t)") && e.contains("4 x in all"), "{e}");
        for host in ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.1.1"] {
            t.give_back(ip(host), net(host), 1);
        }
        assert_eq!(t.total(), 0);
        assert!(t.by_address.is_empty() && t.by_prefix.is_empty());
    }
}
