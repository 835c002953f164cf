//! What peers may take of an accepting endpoint, counted three ways: per address, per source
//! prefix (a /24 of IPv4, a /64 of IPv6 by default: what one host, one customer or one cloud
//! subnet commonly holds, so adding addresses does not add places), and for the whole endpoint.
//! A per-address cap alone let 64 loopback addresses take all 256 session places in 0.2 s;
//! with no whole-endpoint cap, each extra address added its own share of memory.
//!
//! IPv6 prefixes are counted at two widths: the /64 and the /48 around it (one customer's
//! site: a /56 or /48 holds 256 or 65,536 /64s, which counted as /64s alone held every place),
//! and a prefix cap holds at each.
//!
//! No table may be cornered: a prefix gets only a share of each (by default 1/4 of the
//! handshakes, one link of 16 channels dialled at once; 1/8 of the half-built links; 1/16 of
//! the sessions), a full handshake table makes room
//! for a new dial by closing its oldest silent connection (no complete HELLO yet) of the
//! prefix holding the most ([`Handshakes`]), so a peer that sends its HELLO promptly always
//! gets in, and part of the session table is kept for prefixes that had a session recently.
//!
//! Handshakes and receive memory are counted here ([`Tally`], [`Handshakes`]); pending links
//! and sessions are counted from the endpoint's own lists, with the same [`nets`].

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

/// One source prefix an address counts under: the masked address and its width.
pub type Net = (IpAddr, u8);

/// The prefixes `ip` counts under: its /`v4` for IPv4 (and IPv4-mapped IPv6), its /`v6` and
/// its /`v6_wide` for IPv6 (one, when the widths are the same).
pub fn nets(ip: IpAddr, v4: u8, v6: u8, v6_wide: u8) -> Vec<Net> {
    let v4_like = match ip {
        IpAddr::V4(_) => true,
        IpAddr::V6(a) => a.to_ipv4_mapped().is_some(),
    };
    if v4_like {
        return vec![(prefix(ip, v4, v6), v4.min(32))];
    }
    let mut v = vec![(prefix(ip, v4, v6), v6.min(128))];
    if v6_wide.min(128) < v6.min(128) {
        v.push((prefix(ip, v4, v6_wide), v6_wide));
    }
    v
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

/// A quantity counted per address, per prefix (at each width) and in total; entries leave at
/// zero, so the maps hold only peers that hold something.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    by_address: HashMap<IpAddr, u64>,
    by_prefix: HashMap<Net, u64>,
    total: u64,
}

impl Tally {
    /// (from `ip`, from the fullest of its prefixes, in all).
    fn counts(&self, ip: IpAddr, nets: &[Net]) -> (u64, u64, u64) {
        (
            self.by_address.get(&ip).copied().unwrap_or(0),
            nets.iter()
                .map(|n| self.by_prefix.get(n).copied().unwrap_or(0))
                .max()
                .unwrap_or(0),
            self.total,
        )
    }

    fn prefix_count(&self, net: &Net) -> u64 {
        self.by_prefix.get(net).copied().unwrap_or(0)
    }

    /// Adds `n` when it fits under `caps`.
    pub fn take(
        &mut self,
        what: &str,
        ip: IpAddr,
        nets: &[Net],
        n: u64,
        caps: &Caps,
    ) -> Result<(), String> {
        fits(what, n, self.counts(ip, nets), caps)?;
        *self.by_address.entry(ip).or_insert(0) += n;
        for net in nets {
            *self.by_prefix.entry(*net).or_insert(0) += n;
        }
        self.total += n;
        Ok(())
    }

    pub fn give_back(&mut self, ip: IpAddr, nets: &[Net], n: u64) {
        if let Some(v) = self.by_address.get_mut(&ip) {
            *v = v.saturating_sub(n);
            if *v == 0 {
                self.by_address.remove(&ip);
            }
        }
        for net in nets {
            if let Some(v) = self.by_prefix.get_mut(net) {
                *v = v.saturating_sub(n);
                if *v == 0 {
                    self.by_prefix.remove(net);
                }
            }
        }
        self.total = self.total.saturating_sub(n);
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

/// A connection in handshake, as [`Handshakes`] keeps it.
#[derive(Debug)]
struct Dialer {
    ip: IpAddr,
    nets: Vec<Net>,
    /// A handle on the connection, to close it if it is evicted (a duplicate descriptor: the
    /// handshake's thread reads its own).
    stream: Option<std::net::TcpStream>,
    /// Its whole HELLO arrived: no longer silent, never evicted.
    heard: bool,
}

/// A connection closed to make room, and why (recorded as a refusal naming the cap).
#[derive(Debug)]
pub(crate) struct Evicted {
    pub stream: Option<std::net::TcpStream>,
    pub why: String,
}

/// The handshake table: connections that have not sent their whole HELLO yet, counted per
/// address, per prefix and in all. Full, per prefix or in all, it evicts instead of refusing
/// while it can: the oldest silent connection of that prefix, or (in all) of the prefix that
/// holds the most. Silent dialers re-dialled as they are dropped then only push each other
/// out, and a dial from a prefix with few places held (a peer that sends its HELLO at once)
/// is never the one evicted while another prefix holds more.
#[derive(Debug, Default)]
pub(crate) struct Handshakes {
    entries: std::collections::BTreeMap<u64, Dialer>,
    tally: Tally,
    next: u64,
}

impl Handshakes {
    /// Admits a connection from `ip`: its id, and the connections evicted for it (to be
    /// closed by the caller, outside the lock). Refused (with the cap's name) only when the
    /// address is at its own cap, or no connection that could make room is silent.
    pub fn admit(
        &mut self,
        ip: IpAddr,
        nets: Vec<Net>,
        stream: Option<std::net::TcpStream>,
        caps: &Caps,
    ) -> Result<(u64, Vec<Evicted>), String> {
        let (mine, _, _) = self.tally.counts(ip, &nets);
        fits("handshakes in progress", 1, (mine, 0, 0), caps)?;
        let mut evicted = Vec::new();
        for net in &nets {
            if self.tally.prefix_count(net) >= caps.per_prefix.0 {
                let victim = self.oldest_silent(|d| d.nets.contains(net)).ok_or_else(|| {
                    format!(
                        "{} handshakes in progress from its prefix {}/{}, none silent to make                          room ({})",
                        self.tally.prefix_count(net),
                        net.0,
                        net.1,
                        caps.per_prefix.1
                    )
                })?;
                evicted.push(self.evict(victim, caps.per_prefix));
            }
        }
        if self.tally.total() >= caps.total.0 {
            let fullest = self.fullest_prefix();
            let victim = fullest
                .and_then(|net| self.oldest_silent(|d| d.nets[0] == net))
                .or_else(|| self.oldest_silent(|_| true))
                .ok_or_else(|| {
                    format!(
                        "{} handshakes in progress in all, none silent to make room ({})",
                        self.tally.total(),
                        caps.total.1
                    )
                })?;
            evicted.push(self.evict(victim, caps.total));
        }
        self.tally
            .take("handshakes in progress", ip, &nets, 1, caps)?;
        let id = self.next;
        self.next += 1;
        self.entries.insert(
            id,
            Dialer {
                ip,
                nets,
                stream,
                heard: false,
            },
        );
        Ok((id, evicted))
    }

    /// The narrow prefix holding the most silent connections (ties: the one whose oldest
    /// came first).
    fn fullest_prefix(&self) -> Option<Net> {
        let mut count: HashMap<Net, (u64, u64)> = HashMap::new();
        for (&id, d) in self.entries.iter().filter(|(_, d)| !d.heard) {
            let e = count.entry(d.nets[0]).or_insert((0, id));
            e.0 += 1;
        }
        count
            .into_iter()
            .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.cmp(&a.1.1)))
            .map(|(net, _)| net)
    }

    fn oldest_silent(&self, which: impl Fn(&Dialer) -> bool) -> Option<u64> {
        self.entries
            .iter()
            .find(|(_, d)| !d.heard && which(d))
            .map(|(&id, _)| id)
    }

    fn evict(&mut self, id: u64, (cap, name): (u64, &str)) -> Evicted {
        let d = self.entries.remove(&id).expect("a listed entry");
        self.tally.give_back(d.ip, &d.nets, 1);
        Evicted {
            stream: d.stream,
            why: format!(
                "channel from {}: closed with no HELLO to make room for a new dial ({cap} \
                 handshakes at most: {name}; the oldest silent one of the prefix holding the \
                 most goes)",
                d.ip
            ),
        }
    }

    /// Its HELLO arrived: the connection is no longer silent. False if it was evicted.
    pub fn heard(&mut self, id: u64) -> bool {
        match self.entries.get_mut(&id) {
            Some(d) => {
                d.heard = true;
                d.stream = None;
                true
            }
            None => false,
        }
    }

    /// Whether the connection is still in the table (false: evicted).
    pub fn holds(&self, id: u64) -> bool {
        self.entries.contains_key(&id)
    }

    /// The handshake ended (its place is given back, unless it was evicted).
    pub fn leave(&mut self, id: u64) {
        if let Some(d) = self.entries.remove(&id) {
            self.tally.give_back(d.ip, &d.nets, 1);
        }
    }

    #[cfg(test)]
    fn total(&self) -> u64 {
        self.tally.total()
    }
}

/// The endpoint-wide accounting its accepted sessions share: receive memory leased per
/// virtual socket a peer opens, and the record of refusals ([`crate::Stats`]).
#[derive(Debug)]
pub(crate) struct Guard {
    cfg: Arc<Config>,
    memory: Mutex<Tally>,
    /// What peers' sockets hold now, charged as [`crate::reorder`] charges it (each within
    /// its lease).
    held: Arc<AtomicU64>,
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

impl Lease {
    /// Where the socket's receive side counts what it holds.
    pub fn meter(&self) -> Arc<AtomicU64> {
        self.guard.held.clone()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let nets = self.guard.nets(self.ip);
        crate::socket::lock(&self.guard.memory).give_back(self.ip, &nets, self.bytes);
    }
}

impl Guard {
    pub fn new(cfg: Arc<Config>) -> Arc<Guard> {
        Arc::new(Guard {
            cfg,
            memory: Mutex::default(),
            held: Arc::default(),
            rejected: AtomicU64::new(0),
            rejected_opens: AtomicU64::new(0),
            last_rejection: Mutex::new(None),
        })
    }

    /// The prefixes `ip` counts under ([`nets`] with this endpoint's widths).
    pub fn nets(&self, ip: IpAddr) -> Vec<Net> {
        nets(
            ip,
            self.cfg.peer_prefix_v4,
            self.cfg.peer_prefix_v6,
            self.cfg.peer_prefix_v6_wide,
        )
    }

    /// What the holders `items` (each an address and how much it holds) count against one
    /// more from `ip`: (from `ip`, from the fullest of its prefixes, in all), for [`fits`].
    pub fn counts(
        &self,
        ip: IpAddr,
        items: impl Iterator<Item = (IpAddr, u64)>,
    ) -> (u64, u64, u64) {
        let mine = self.nets(ip);
        let mut per_net = vec![0u64; mine.len()];
        let (mut a, mut t) = (0, 0);
        for (other, n) in items {
            if other == ip {
                a += n;
            }
            t += n;
            let theirs = self.nets(other);
            for (k, net) in mine.iter().enumerate() {
                if theirs.contains(net) {
                    per_net[k] += n;
                }
            }
        }
        (a, per_net.into_iter().max().unwrap_or(0), t)
    }

    /// Leases one socket's receive share (its window and what holding it may cost:
    /// [`Config::receive_share`]) for a socket `ip` opened. Per address the sessions' own
    /// bound applies (`max_sessions_per_peer × session_memory`).
    pub fn lease(self: &Arc<Self>, ip: IpAddr) -> Result<Lease, String> {
        let bytes = self.cfg.receive_share();
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
            "bytes of receive shares",
            ip,
            &self.nets(ip),
            bytes,
            &caps,
        )?;
        Ok(Lease {
            guard: self.clone(),
            ip,
            bytes,
        })
    }

    /// Receive-share bytes leased now, all peers together.
    pub fn memory_leased(&self) -> u64 {
        crate::socket::lock(&self.memory).total()
    }

    /// What peers' sockets hold now (at most what is leased).
    pub fn memory_held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
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
        let net = |s: &str| vec![(prefix(ip(s), 24, 64), 24)];
        for host in ["10.0.0.1", "10.0.0.1"] {
            t.take("x", ip(host), &net(host), 1, &caps).unwrap();
        }
        let e = t
            .take("x", ip("10.0.0.1"), &net("10.0.0.1"), 1, &caps)
            .unwrap_err();
        assert!(e.contains("(a)") && e.contains("from this address"), "{e}");
        t.take("x", ip("10.0.0.2"), &net("10.0.0.2"), 1, &caps)
            .unwrap();
        let e = t
            .take("x", ip("10.0.0.3"), &net("10.0.0.3"), 1, &caps)
            .unwrap_err();
        assert!(e.contains("(p)"), "{e}");
        t.take("x", ip("10.0.1.1"), &net("10.0.1.1"), 1, &caps)
            .unwrap();
        let e = t
            .take("x", ip("10.0.2.1"), &net("10.0.2.1"), 1, &caps)
            .unwrap_err();
        assert!(e.contains("(t)") && e.contains("4 x in all"), "{e}");
        for host in ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.1.1"] {
            t.give_back(ip(host), &net(host), 1);
        }
        assert_eq!(t.total(), 0);
        assert!(t.by_address.is_empty() && t.by_prefix.is_empty());
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn hs_caps() -> Caps {
        Caps {
            per_address: (8, "max_handshakes_per_peer"),
            per_prefix: (8, "max_handshakes_per_prefix"),
            total: (64, "max_handshakes"),
        }
    }

    fn nets_of(s: &str) -> Vec<Net> {
        nets(ip(s), 24, 64, 48)
    }

    /// IPv6 addresses count under their /64 and their /48: 256 /64s of one /56 are one
    /// prefix at the wider width.
    #[test]
    fn ipv6_prefixes_count_at_the_64_and_the_48() {
        assert_eq!(nets_of("192.0.2.9"), vec![(ip("192.0.2.0"), 24)]);
        assert_eq!(
            nets_of("2001:db8:1:2::9"),
            vec![(ip("2001:db8:1:2::"), 64), (ip("2001:db8:1::"), 48)]
        );
        assert_eq!(nets(ip("2001:db8:1:2::9"), 24, 64, 64).len(), 1);
        let caps = Caps {
            per_address: (100, "a"),
            per_prefix: (16, "p"),
            total: (1000, "t"),
        };
        let mut t = Tally::default();
        let mut taken = 0;
        let mut last = String::new();
        // One customer's /56: 256 /64s, four sessions each.
        for k in 0..256u32 {
            for _ in 0..4 {
                let a = ip(&format!("2001:db8:7:{:x}::1", k));
                match t.take("sessions", a, &nets(a, 24, 64, 48), 1, &caps) {
                    Ok(()) => taken += 1,
                    Err(e) => last = e,
                }
            }
        }
        assert_eq!(taken, 16, "{last}");
        assert!(last.contains("(p)"), "{last}");
    }

    /// Issue 77, item 2, the table's logic: silent dials from eight prefixes fill every
    /// place and are re-dialled as they go; each new dial evicts the oldest silent one of the
    /// prefix holding the most, so a dial from a ninth prefix gets in, is not the one evicted
    /// while others hold more, and once its HELLO is heard is never evicted. A prefix at its
    /// share evicts its own oldest; an address at its cap is refused by name. (Before: the
    /// 65th dial was refused, whoever it came from.)
    #[test]
    fn a_full_handshake_table_evicts_the_oldest_silent_dial_of_the_fullest_prefix() {
        let caps = hs_caps();
        let mut t = Handshakes::default();
        let mut ids = Vec::new();
        for net in 1..=8 {
            for host in 1..=8 {
                let a = format!("10.0.{net}.{host}");
                let (id, ev) = t.admit(ip(&a), nets_of(&a), None, &caps).unwrap();
                assert!(ev.is_empty());
                ids.push(id);
            }
        }
        assert_eq!(t.total(), 64);
        // The legitimate dial from a ninth prefix.
        let (legit, ev) = t
            .admit(ip("10.9.0.1"), nets_of("10.9.0.1"), None, &caps)
            .unwrap();
        assert_eq!(ev.len(), 1);
        assert!(ev[0].why.contains("max_handshakes"), "{}", ev[0].why);
        assert!(!t.holds(ids[0]), "the oldest silent dial stays");
        // The attackers re-dial, many times over: they only push each other out.
        for round in 0..1000 {
            let a = format!("10.0.{}.{}", 1 + round % 8, 1 + (round / 8) % 8);
            let (_, ev) = t.admit(ip(&a), nets_of(&a), None, &caps).unwrap();
            assert_eq!(ev.len(), 1);
            assert!(
                t.holds(legit),
                "the legitimate dial was evicted at round {round}"
            );
        }
        assert_eq!(t.total(), 64);
        assert!(t.heard(legit));
        t.leave(legit);
        assert_eq!(t.total(), 63);
        // A prefix at its share makes room from its own silent dials.
        let mut u = Handshakes::default();
        let first = u
            .admit(ip("10.1.1.1"), nets_of("10.1.1.1"), None, &caps)
            .unwrap()
            .0;
        for host in 2..=8 {
            let a = format!("10.1.1.{host}");
            u.admit(ip(&a), nets_of(&a), None, &caps).unwrap();
        }
        let (_, ev) = u
            .admit(ip("10.1.1.9"), nets_of("10.1.1.9"), None, &caps)
            .unwrap();
        assert_eq!(ev.len(), 1);
        assert!(
            ev[0].why.contains("max_handshakes_per_prefix"),
            "{}",
            ev[0].why
        );
        assert!(!u.holds(first));
        // Every dial of the prefix heard: nothing to evict, refused by name.
        let mut v = Handshakes::default();
        for host in 1..=8 {
            let a = format!("10.2.2.{host}");
            let (id, _) = v.admit(ip(&a), nets_of(&a), None, &caps).unwrap();
            v.heard(id);
        }
        let e = v
            .admit(ip("10.2.2.9"), nets_of("10.2.2.9"), None, &caps)
            .unwrap_err();
        assert!(e.contains("max_handshakes_per_prefix"), "{e}");
        // One address at its own cap is refused.
        let mut w = Handshakes::default();
        for _ in 0..8 {
            w.admit(ip("10.3.3.3"), nets_of("10.3.3.3"), None, &caps)
                .unwrap();
        }
        let e = w
            .admit(ip("10.3.3.3"), nets_of("10.3.3.3"), None, &caps)
            .unwrap_err();
        assert!(e.contains("max_handshakes_per_peer"), "{e}");
        // IPv6: one /48 holds one prefix's share, however many /64s it dials from.
        let mut x = Handshakes::default();
        for k in 0..64u32 {
            let a = format!("2001:db8:5:{k:x}::1");
            x.admit(ip(&a), nets_of(&a), None, &caps).unwrap();
        }
        assert_eq!(x.total(), 8);
    }
}
