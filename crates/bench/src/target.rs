//! Where a benchmark client connects: `HOST:PORT`, `[V6]:PORT`, or a bare host or address
//! with the benchmark's default port.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

/// The first address `target` resolves to; errors name the target.
pub fn resolve(target: &str, default_port: u16) -> io::Result<SocketAddr> {
    if let Ok(a) = target.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = target
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
    {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let found = match target.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => target.to_socket_addrs(),
        _ => (target, default_port).to_socket_addrs(),
    };
    found
        .map_err(|e| io::Error::new(e.kind(), format!("target {target}: {e}")))?
        .next()
        .ok_or_else(|| io::Error::other(format!("target {target}: no address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_with_and_without_a_port() {
        assert_eq!(resolve("127.0.0.1:9", 1).unwrap().port(), 9);
        assert_eq!(resolve("127.0.0.1", 4321).unwrap().port(), 4321);
        assert_eq!(
            resolve("[::1]", 4321).unwrap(),
            "[::1]:4321".parse().unwrap()
        );
        assert_eq!(resolve("localhost:7", 1).unwrap().port(), 7);
        let e = resolve("no-such-host.invalid", 1).unwrap_err();
        assert!(e.to_string().contains("no-such-host.invalid"), "{e}");
    }
}
