//! Who gets a place in the accepting endpoint's tables (issue 77: no table may be cornered):
//! a handshake place, evicting the oldest silent dial of the fullest prefix when full
//! ([`crate::limits::Handshakes`]); a half-built link's place, evicting the same way; and a
//! session's place past the part kept for prefixes served recently.

use super::{Inner, PendingLink};
use crate::limits::{self, Caps};
use crate::socket::lock;
use std::collections::HashMap;
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;

/// One handshake place (counted per address, per prefix and in all), given back when
/// dropped: on return, on a failed spawn and while a panicking handshake thread unwinds. A
/// place that leaked would, after `max_handshakes` of them, refuse every new session for good.
/// Taking one may evict a silent connection ([`crate::limits::Handshakes`]): it is closed
/// here, and its refusal names the cap.
pub(super) struct HandshakeSlot(Arc<Inner>, u64);

impl HandshakeSlot {
    pub(super) fn take(
        inner: &Arc<Inner>,
        peer: IpAddr,
        stream: Option<TcpStream>,
    ) -> Result<HandshakeSlot, String> {
        let cfg = &inner.cfg;
        let caps = Caps {
            per_address: (
                cfg.max_handshakes_per_peer as u64,
                "max_handshakes_per_peer",
            ),
            per_prefix: (
                cfg.max_handshakes_per_prefix as u64,
                "max_handshakes_per_prefix",
            ),
            total: (cfg.max_handshakes as u64, "max_handshakes"),
        };
        let (id, evicted) =
            lock(&inner.handshakes).admit(peer, inner.guard.nets(peer), stream, &caps)?;
        for e in evicted {
            if let Some(s) = e.stream {
                // Its thread's read ends at once and the thread gives up quietly.
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            inner.guard.reject(e.why);
        }
        Ok(HandshakeSlot(inner.clone(), id))
    }

    /// The whole HELLO arrived: the connection is no longer silent. False if it was evicted
    /// meanwhile (its place is gone; the handshake must stop).
    pub(super) fn heard(&self) -> bool {
        lock(&self.0.handshakes).heard(self.1)
    }

    /// Still in the table (false: evicted).
    pub(super) fn held(&self) -> bool {
        lock(&self.0.handshakes).holds(self.1)
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        lock(&self.0.handshakes).leave(self.1);
    }
}

/// Makes room for one more half-built link from `ip`, or says which cap refuses it. Past its
/// prefix's share, or with the table full, the oldest half-built link of that prefix (or of
/// the prefix holding the most) is closed instead: an honest link completes as soon as its
/// channels' HELLOs arrive, so only links that never complete are old; per address, the cap
/// refuses.
pub(super) fn make_room_for_link(
    inner: &Inner,
    pending: &mut HashMap<u64, PendingLink>,
    ip: IpAddr,
) -> Result<(), String> {
    let cfg = &inner.cfg;
    let guard = &inner.guard;
    let (mine, _, _) = guard.counts(ip, pending.values().map(|l| (l.peer.ip(), 1)));
    limits::fits(
        "links half-open",
        1,
        (mine, 0, 0),
        &Caps {
            per_address: (
                cfg.max_pending_links_per_peer as u64,
                "max_pending_links_per_peer",
            ),
            per_prefix: (u64::MAX, ""),
            total: (u64::MAX, ""),
        },
    )?;
    let evict = |pending: &mut HashMap<u64, PendingLink>,
                 which: &dyn Fn(&PendingLink) -> bool,
                 cap: usize,
                 name: &str| {
        let oldest = pending
            .iter()
            .filter(|(_, l)| which(l))
            .min_by_key(|(_, l)| l.since)
            .map(|(&id, _)| id);
        if let Some(id) = oldest
            && let Some(l) = pending.remove(&id)
        {
            // Dropping it closes its connections.
            guard.reject(format!(
                "link {id:#x} from {}: closed half-built to make room for a new link ({cap} at \
                 most: {name}; the oldest of the prefix holding the most goes)",
                l.peer
            ));
        }
    };
    for net in guard.nets(ip) {
        let held = pending
            .values()
            .filter(|l| guard.nets(l.peer.ip()).contains(&net))
            .count();
        if held >= cfg.max_pending_links_per_prefix {
            evict(
                pending,
                &|l| guard.nets(l.peer.ip()).contains(&net),
                cfg.max_pending_links_per_prefix,
                "max_pending_links_per_prefix",
            );
        }
    }
    if pending.len() >= cfg.max_pending_links {
        let mut count: HashMap<IpAddr, usize> = HashMap::new();
        for l in pending.values() {
            *count.entry(guard.nets(l.peer.ip())[0].0).or_insert(0) += 1;
        }
        if let Some((fullest, _)) = count.into_iter().max_by_key(|&(_, n)| n) {
            evict(
                pending,
                &|l| guard.nets(l.peer.ip())[0].0 == fullest,
                cfg.max_pending_links,
                "max_pending_links",
            );
        }
    }
    Ok(())
}

/// Past `max_sessions` less the reserve (`session_reserve`, at most a quarter) sessions, only a prefix that had a session accepted
/// within `served_for` and holds fewer than `reserved_sessions_per_prefix` gets in.
pub(super) fn reserve_admits(
    inner: &Inner,
    ip: IpAddr,
    alive: usize,
    ours: u64,
) -> Result<(), String> {
    let cfg = &inner.cfg;
    let general = cfg.max_sessions - cfg.session_reserve.min(cfg.max_sessions / 4);
    if alive < general {
        return Ok(());
    }
    let net = inner.guard.nets(ip)[0].0;
    let served = lock(&inner.served)
        .get(&net)
        .is_some_and(|t| t.elapsed() < cfg.served_for);
    if served && ours < cfg.reserved_sessions_per_prefix as u64 {
        return Ok(());
    }
    Err(format!(
        "{alive} sessions accepted in all; the {} places past {general} are kept for prefixes \
         served in the last {:?} while they hold fewer than {} (session_reserve, \
         reserved_sessions_per_prefix), and this one {}",
        cfg.max_sessions - general,
        cfg.served_for,
        cfg.reserved_sessions_per_prefix,
        if served {
            format!("holds {ours}")
        } else {
            "was not served".to_string()
        }
    ))
}

/// Records that `ip`'s prefix was served now; the record is bounded (stale entries go first,
/// then the oldest).
pub(super) fn mark_served(inner: &Inner, ip: IpAddr) {
    let cfg = &inner.cfg;
    let mut served = lock(&inner.served);
    served.insert(inner.guard.nets(ip)[0].0, Instant::now());
    let most = 4 * cfg.max_sessions;
    if served.len() > most {
        served.retain(|_, t| t.elapsed() < cfg.served_for);
        while served.len() > most {
            let Some(oldest) = served.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k) else {
                break;
            };
            served.remove(&oldest);
        }
    }
}
