//! Rate limits that keep the echo server from being a reflector.
//!
//! An echo server answers whoever the source address says, and UDP source addresses can be
//! forged: without a limit, anyone who can reach the port can aim the server's full packet rate
//! at a third party. So every source address gets a token bucket (`per_source` datagrams per
//! second), and all sources together another (`global`). Datagrams over either are dropped
//! without an answer and counted; the summary reports them.
//!
//! Time is passed in (nanoseconds from any fixed origin), so the arithmetic is tested without a
//! clock. Each server thread has its own limiter: no lock on the datagram path. The global
//! rate is divided among threads by the caller.

use std::collections::HashMap;
use std::net::IpAddr;

/// Most sources tracked at once per thread; when full, buckets idle for a second are dropped,
/// and if none is, an unknown source shares one overflow bucket (so memory stays bounded
/// however many addresses a flood forges).
const MAX_SOURCES: usize = 4096;

/// Datagrams per second; `None` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    pub per_source: Option<u32>,
    pub global: Option<u32>,
}

impl Limits {
    pub fn is_unlimited(&self) -> bool {
        self.per_source.is_none() && self.global.is_none()
    }

    /// As [`Limits::for_listen`], except that the AF_XDP path (which answers every datagram,
    /// with no limiter) only takes limits asked for explicitly.
    pub fn for_server(
        listen: std::net::SocketAddr,
        xdp: bool,
        per_source: Option<u32>,
        global: Option<u32>,
    ) -> Limits {
        if xdp && per_source.is_none() && global.is_none() {
            Limits::default()
        } else {
            Limits::for_listen(listen, per_source, global)
        }
    }

    /// The echo server's answer limits on `listen`: what was asked (0 = unlimited), else none
    /// on loopback — nothing there can reach a third party — and a reflector-proof default
    /// (10,000 per source, 100,000 in all, per second) anywhere else.
    pub fn for_listen(
        listen: std::net::SocketAddr,
        per_source: Option<u32>,
        global: Option<u32>,
    ) -> Limits {
        let loopback = listen.ip().is_loopback()
            || matches!(listen.ip(), std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()));
        let pick = |asked: Option<u32>, remote_default: u32| match asked {
            Some(0) => None,
            Some(v) => Some(v),
            None if loopback => None,
            None => Some(remote_default),
        };
        Limits {
            per_source: pick(per_source, 10_000),
            global: pick(global, 100_000),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last_ns: u64,
}

impl Bucket {
    fn full(rate: u32, now_ns: u64) -> Bucket {
        Bucket {
            tokens: burst(rate),
            last_ns: now_ns,
        }
    }

    fn take(&mut self, rate: u32, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns) as f64 / 1e9;
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + dt * f64::from(rate)).min(burst(rate));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A tenth of a second's worth, and at least 32: a client's burst of a batch is not cut.
fn burst(rate: u32) -> f64 {
    (f64::from(rate) / 10.0).max(32.0)
}

pub struct Limiter {
    limits: Limits,
    sources: HashMap<IpAddr, Bucket>,
    overflow: Option<Bucket>,
    global: Option<Bucket>,
}

impl Limiter {
    pub fn new(limits: Limits) -> Limiter {
        Limiter {
            limits,
            sources: HashMap::new(),
            overflow: None,
            global: None,
        }
    }

    /// True when a datagram from `from` may be answered at `now_ns`.
    pub fn allow(&mut self, from: IpAddr, now_ns: u64) -> bool {
        if let Some(rate) = self.limits.per_source {
            if !self.sources.contains_key(&from) && self.sources.len() >= MAX_SOURCES {
                self.sources
                    .retain(|_, b| now_ns.saturating_sub(b.last_ns) < 1_000_000_000);
            }
            let bucket = if self.sources.len() < MAX_SOURCES || self.sources.contains_key(&from) {
                self.sources
                    .entry(from)
                    .or_insert_with(|| Bucket::full(rate, now_ns))
            } else {
                self.overflow
                    .get_or_insert_with(|| Bucket::full(rate, now_ns))
            };
            if !bucket.take(rate, now_ns) {
                return false;
            }
        }
        if let Some(rate) = self.limits.global {
            let g = self
                .global
                .get_or_insert_with(|| Bucket::full(rate, now_ns));
            if !g.take(rate, now_ns) {
                return false;
            }
        }
        true
    }

    pub fn sources(&self) -> usize {
        self.sources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn ip(n: u32) -> IpAddr {
        IpAddr::from(n.to_be_bytes())
    }

    #[test]
    fn one_source_gets_its_rate_and_burst_no_more() {
        let mut l = Limiter::new(Limits {
            per_source: Some(1000),
            global: None,
        });
        // The burst (100) at t = 0, then nothing until tokens refill.
        let first = (0..1000).filter(|_| l.allow(ip(1), 0)).count();
        assert_eq!(first, 100);
        // Over the next second, 1000 more at most (fed one per 100 µs = 10 000/s offered).
        let more = (1..=10_000u64)
            .filter(|i| l.allow(ip(1), i * S / 10_000))
            .count();
        assert!((999..=1001).contains(&more), "{more}");
        // Another source is not affected.
        assert!(l.allow(ip(2), S));
    }

    #[test]
    fn the_global_rate_caps_many_sources() {
        let mut l = Limiter::new(Limits {
            per_source: Some(1_000_000),
            global: Some(500),
        });
        let mut ok = 0;
        for i in 0..10_000u64 {
            if l.allow(ip(i as u32), i * S / 10_000) {
                ok += 1;
            }
        }
        // 50 burst + 500/s for one second.
        assert!((540..=560).contains(&ok), "{ok}");
    }

    #[test]
    fn forged_sources_cannot_grow_memory_or_escape_the_limit() {
        let mut l = Limiter::new(Limits {
            per_source: Some(100),
            global: None,
        });
        // 100 000 distinct sources, one datagram each, in the same instant: the table stays
        // bounded, each tracked source is answered once, and the rest share one bucket (32).
        let ok = (0..100_000u32).filter(|&i| l.allow(ip(i), 0)).count();
        assert!(l.sources() <= MAX_SOURCES);
        assert_eq!(ok, MAX_SOURCES + 32);
    }

    #[test]
    fn unlimited_lets_everything_through() {
        let mut l = Limiter::new(Limits::default());
        assert!(Limits::default().is_unlimited());
        assert!((0..10_000).all(|_| l.allow(ip(1), 0)));
    }
}
