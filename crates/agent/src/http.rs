//! The agent's HTTP front: `GET /metrics` and nothing else, written for a listener that may
//! face the network. The request head is read with a size cap (8 KiB) and a whole-head
//! deadline (5 s); connections are capped in total and per source network (a slow or hostile
//! client can hold at most a few slots, never all of them), with places kept for the
//! configured scrapers; anything it does not know (a path, a method, a body) gets a 404 and a
//! closed connection.

use crate::Agent;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// An address prefix (`--scraper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    len: u8,
}

impl Net {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, unmap(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

pub fn parse_net(s: &str) -> std::result::Result<Net, String> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IP address"))?;
    let addr = unmap(addr);
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| format!("prefix length {l:?} (0..={max})"))?,
    };
    Ok(Net { addr, len })
}

/// An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The key a client's connections are counted under: its /24 (IPv4) or /64 (IPv6), or for a
/// configured scraper, its own address.
fn peer_key(ip: IpAddr, scrapers: &[Net]) -> (IpAddr, bool) {
    let ip = unmap(ip);
    if scrapers.iter().any(|n| n.contains(ip)) {
        return (ip, true);
    }
    let net = match ip {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) & 0xffff_ff00).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & !((1u128 << 64) - 1)).into()),
    };
    (net, false)
}

/// The request head's cap: a scrape's head is a few hundred bytes.
const MAX_HEAD: usize = 8192;
/// A connection that sends nothing at all is closed after this: idle costs a short deadline
/// (a scraper sends its request as soon as it connects).
const FIRST_BYTE_DEADLINE: Duration = Duration::from_secs(2);
/// The whole head must arrive within this (not per read: a client trickling a byte a second
/// would otherwise hold its slot forever).
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Writing the response must finish within this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections are served at once.
#[derive(Debug, Clone)]
pub struct Limits {
    /// In total; more are answered 503 and closed.
    pub total: usize,
    /// Per source network (/24, /64), or per scraper address.
    pub per_peer: usize,
    /// Scrapers' addresses or networks: counted apart, with `per_peer` places kept for them.
    pub scrapers: Vec<Net>,
}

impl Limits {
    /// Places of `total` that clients other than the scrapers may hold.
    fn for_others(&self) -> usize {
        if self.scrapers.is_empty() {
            self.total
        } else {
            self.total.saturating_sub(self.per_peer).max(1)
        }
    }
}

/// Connections held, in total, by clients other than the scrapers, and per peer key
/// ([`peer_key`]).
#[derive(Default)]
struct Slots {
    total: usize,
    others: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Gives the slot back when the connection's thread ends, however it ends.
struct Slot {
    slots: Arc<Mutex<Slots>>,
    peer: IpAddr,
    scraper: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        s.total -= 1;
        if !self.scraper {
            s.others -= 1;
        }
        if let Some(n) = s.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                s.by_peer.remove(&self.peer);
            }
        }
    }
}

/// Serves `/metrics` on `listener` until the process ends.
pub fn serve(listener: TcpListener, agent: Arc<Agent>, limits: Limits) -> ! {
    let slots = Arc::new(Mutex::new(Slots::default()));
    loop {
        let (mut stream, peer) = match listener.accept() {
            Ok(c) => c,
            // A connection reset before accept, or out of fds for a moment: keep serving.
            Err(e) => {
                eprintln!("netsteer agent: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let slot = {
            let mut s = slots.lock().unwrap_or_else(|p| p.into_inner());
            let (key, scraper) = peer_key(peer.ip(), &limits.scrapers);
            let mine = s.by_peer.get(&key).copied().unwrap_or(0);
            if s.total >= limits.total
                || mine >= limits.per_peer
                || (!scraper && s.others >= limits.for_others())
            {
                None
            } else {
                s.total += 1;
                s.others += usize::from(!scraper);
                *s.by_peer.entry(key).or_default() += 1;
                Some(Slot {
                    slots: slots.clone(),
                    peer: key,
                    scraper,
                })
            }
        };
        let Some(slot) = slot else {
            // Told why in one non-blocking write, then closed: refusing costs no thread.
            let _ = stream.set_nonblocking(true);
            let _ = stream.write_all(&response(
                "503 Service Unavailable",
                "text/plain",
                b"too many connections\n",
                false,
            ));
            continue;
        };
        let agent = agent.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("agent {peer}"))
            .spawn(move || {
                let _slot = slot;
                if let Err(e) = handle(&mut stream, &agent) {
                    // Timeouts and resets are the client's business; nothing to log at rate.
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::BrokenPipe
                            | io::ErrorKind::UnexpectedEof
                    ) {
                        eprintln!("netsteer agent: {peer}: {e}");
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!("netsteer agent: {peer}: no thread for the connection: {e}");
        }
    }
}

/// What the request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics { head_only: bool },
    Index { head_only: bool },
    NotFound,
}

/// Parses a complete request head (`httparse`), or says it is not complete yet.
fn route(head: &[u8]) -> Result<Option<Route>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(_)) => {}
        Err(_) => return Err(()),
    }
    // A body is nothing this server knows: GET /metrics has none.
    let has_body = req.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding")
            || (h.name.eq_ignore_ascii_case("content-length")
                && std::str::from_utf8(h.value).map(str::trim) != Ok("0"))
    });
    let head_only = match req.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Ok(Some(Route::NotFound)),
    };
    if has_body {
        return Ok(Some(Route::NotFound));
    }
    let path = req.path.unwrap_or("");
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    Ok(Some(match path {
        "/metrics" => Route::Metrics { head_only },
        "/" => Route::Index { head_only },
        _ => Route::NotFound,
    }))
}

/// Reads the head within the deadline and the size cap.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<Route>> {
    let start = Instant::now();
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let deadline = if buf.is_empty() {
            FIRST_BYTE_DEADLINE
        } else {
            HEAD_DEADLINE
        };
        let left = deadline
            .checked_sub(start.elapsed())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        match route(&buf) {
            Ok(Some(r)) => return Ok(Some(r)),
            Ok(None) if buf.len() >= MAX_HEAD => return Ok(None),
            Ok(None) => {}
            Err(()) => return Ok(None),
        }
    }
}

fn response(status: &str, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

fn handle(stream: &mut TcpStream, agent: &Agent) -> io::Result<()> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let reply = match read_head(stream)? {
        None => response(
            "400 Bad Request",
            "text/plain",
            b"malformed or oversized request head\n",
            false,
        ),
        Some(Route::Metrics { head_only }) => response(
            "200 OK",
            crate::CONTENT_TYPE,
            crate::encode(agent.scrape(Instant::now(), SystemTime::now())).as_bytes(),
            head_only,
        ),
        Some(Route::Index { head_only }) => response(
            "200 OK",
            "text/plain; charset=utf-8",
            b"netsteer agent: metrics at /metrics\n",
            head_only,
        ),
        Some(Route::NotFound) => response("404 Not Found", "text/plain", b"not found\n", false),
    };
    stream.write_all(&reply)?;
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = |s: &str| route(s.as_bytes());
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(Some(Route::Metrics { head_only: false }))
        );
        assert_eq!(
            r("GET /metrics?x=1 HTTP/1.1\r\n\r\n"),
            Ok(Some(Route::Metrics { head_only: false }))
        );
        assert_eq!(
            r("HEAD / HTTP/1.0\r\n\r\n"),
            Ok(Some(Route::Index { head_only: true }))
        );
        assert_eq!(r("GET /metrics HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(
            r("GET /etc/passwd HTTP/1.1\r\n\r\n"),
            Ok(Some(Route::NotFound))
        );
        assert_eq!(
            r("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
            Ok(Some(Route::NotFound))
        );
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
            Ok(Some(Route::NotFound))
        );
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Ok(Some(Route::NotFound))
        );
        assert_eq!(r("\x00\x01garbage\r\n\r\n"), Err(()));
    }
}
