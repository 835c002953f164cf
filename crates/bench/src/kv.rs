//! `netsteer bench kv`: a fixed-rate client for memcached (text protocol) and Redis (RESP), the
//! cache workloads `tune search` prices at a rate, where memcaslap and redis-benchmark only
//! run flat out. Each connection sends GETs (and a share of SETs) on a schedule, one request
//! outstanding, and times each from its send to its whole reply, as udp-echo times a round
//! trip. Timing from the due time instead (wrk2's answer to coordinated omission) would add
//! the sleeping thread's wake-up (timer slack, 50 µs by default) to every request; what it
//! guards against, a reply so late it holds back the next request, is counted instead
//! (`late`: sends more than one gap behind their schedule).
//!
//! Nothing the server sends is trusted: a reply is read into a buffer of at most
//! [`MAX_REPLY`] bytes (the value size asked for plus headers), its lengths are parsed as
//! bounded numbers, and anything else ends the run with an error naming the server.

use crate::report::{Kind, Message, Role, us};
use crate::stats::LatencyRecorder;
use crate::stats::LatencySummary;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub const BENCH: &str = "kv";

/// A reply may hold the value asked for (at most `MAX_VALUE`) and its framing.
pub const MAX_VALUE: usize = 1 << 20;
const MAX_REPLY: usize = MAX_VALUE + 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Protocol {
    /// memcached's text protocol (`get`/`set`).
    Memcache,
    /// Redis RESP (`GET`/`SET`).
    Redis,
}

#[derive(Debug, Clone)]
pub struct KvConfig {
    pub target: SocketAddr,
    pub protocol: Protocol,
    /// Requests per second, all connections together.
    pub rate: u32,
    pub connections: u32,
    pub duration: Duration,
    pub warmup: Duration,
    /// Keys `key:0` … `key:N-1`, set before the run.
    pub keys: u32,
    pub value_size: usize,
    /// One request in this many is a SET (0: only GETs).
    pub set_every: u32,
    /// A reply later than this ends the run.
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvSummary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub target: String,
    pub protocol: Protocol,
    pub duration_s: f64,
    pub connections: u32,
    pub rate: u32,
    pub value_size: usize,
    /// Requests completed in the measured time.
    pub transactions: u64,
    pub transactions_per_second: f64,
    /// With the warm-up's: what the run's CPU time divides by.
    pub all_transactions: u64,
    /// Requests sent more than one gap after they were due: the rate was not kept.
    pub late: u64,
    /// GETs that found no value (the keys are set before the run, so a miss means an eviction
    /// or another client).
    pub misses: u64,
    /// From each request's due time to its whole reply (HDR, 3 significant digits).
    pub latency_ns: Option<LatencySummary>,
    pub notes: Vec<String>,
}

impl Message for KvSummary {
    fn human(&self) -> Vec<String> {
        let l = self.latency_ns.unwrap_or_default();
        vec![format!(
            "--- {} {:?} {} conn: {} requests in {:.1}s ({:.0}/s at {}/s asked, {} late), p50 {} p99 {} p999 {}, {} misses",
            self.target,
            self.protocol,
            self.connections,
            self.transactions,
            self.duration_s,
            self.transactions_per_second,
            self.rate,
            self.late,
            us(l.p50),
            us(l.p99),
            us(l.p999),
            self.misses
        )]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error("{0}")]
    Config(String),
    #[error("{target}: {what}: {source}")]
    Io {
        target: SocketAddr,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{1}: {0}")]
    Protocol(String, SocketAddr),
}

impl KvConfig {
    fn check(&self) -> Result<(), KvError> {
        let bad = |s: &str| Err(KvError::Config(s.into()));
        if self.rate == 0 || self.rate > 10_000_000 {
            return bad("--rate: 1 to 10000000 requests per second");
        }
        if self.connections == 0 || self.connections > 1024 || self.connections > self.rate {
            return bad("--connections: 1 to 1024, and at most --rate");
        }
        if self.keys == 0 || self.keys > 10_000_000 {
            return bad("--keys: 1 to 10000000");
        }
        if self.value_size == 0 || self.value_size > MAX_VALUE {
            return bad("--value-size: 1 B to 1 MiB");
        }
        if self.duration.is_zero() {
            return bad("--duration: more than 0");
        }
        Ok(())
    }
}

/// One request's bytes.
fn request(p: Protocol, set: bool, key: &str, value: &[u8], out: &mut Vec<u8>) {
    out.clear();
    match (p, set) {
        (Protocol::Memcache, false) => out.extend_from_slice(format!("get {key}\r\n").as_bytes()),
        (Protocol::Memcache, true) => {
            out.extend_from_slice(format!("set {key} 0 0 {}\r\n", value.len()).as_bytes());
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        (Protocol::Redis, false) => out.extend_from_slice(
            format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).as_bytes(),
        ),
        (Protocol::Redis, true) => {
            out.extend_from_slice(
                format!(
                    "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
                    key.len(),
                    value.len()
                )
                .as_bytes(),
            );
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// How much of `buf` one whole reply takes, if it is all there: `Some((len, hit))`. `Err` for
/// a reply that is not one (an error, a length out of bounds, garbage).
pub fn reply_len(p: Protocol, set: bool, buf: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let line_end = |from: usize| {
        buf[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|i| from + i)
    };
    let Some(eol) = line_end(0) else {
        return if buf.len() > 512 {
            Err("a reply line longer than 512 bytes".into())
        } else {
            Ok(None)
        };
    };
    let line = &buf[..eol];
    let text = String::from_utf8_lossy(line);
    let bounded = |s: &str| -> Result<usize, String> {
        s.trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= MAX_VALUE)
            .ok_or_else(|| format!("a value length {s:?} out of bounds"))
    };
    match (p, set) {
        (Protocol::Memcache, true) => match line {
            b"STORED" => Ok(Some((eol + 2, true))),
            _ => Err(format!("set answered {text:?}")),
        },
        (Protocol::Memcache, false) => {
            if line == b"END" {
                return Ok(Some((eol + 2, false)));
            }
            // VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n
            let mut f = text.split(' ');
            if f.next() != Some("VALUE") {
                return Err(format!("get answered {text:?}"));
            }
            let n = bounded(f.nth(2).unwrap_or(""))?;
            let total = eol + 2 + n + 2 + 5;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[total - 7..total] != b"\r\nEND\r\n" {
                return Err("a get reply not ended by END".into());
            }
            Ok(Some((total, true)))
        }
        (Protocol::Redis, true) => match line {
            b"+OK" => Ok(Some((eol + 2, true))),
            _ => Err(format!("SET answered {text:?}")),
        },
        (Protocol::Redis, false) => {
            if line == b"$-1" {
                return Ok(Some((eol + 2, false)));
            }
            let Some(n) = text.strip_prefix('$') else {
                return Err(format!("GET answered {text:?}"));
            };
            let n = bounded(n)?;
            let total = eol + 2 + n + 2;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[total - 2..total] != b"\r\n" {
                return Err("a bulk reply not ended by CRLF".into());
            }
            Ok(Some((total, true)))
        }
    }
}

struct Conn {
    stream: TcpStream,
    target: SocketAddr,
    protocol: Protocol,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl Conn {
    fn open(cfg: &KvConfig) -> Result<Conn, KvError> {
        let io = |what| {
            move |source| KvError::Io {
                target: cfg.target,
                what,
                source,
            }
        };
        let stream = TcpStream::connect_timeout(&cfg.target, cfg.timeout).map_err(io("connect"))?;
        stream.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
        stream
            .set_read_timeout(Some(cfg.timeout))
            .map_err(io("SO_RCVTIMEO"))?;
        Ok(Conn {
            stream,
            target: cfg.target,
            protocol: cfg.protocol,
            out: Vec::new(),
            buf: Vec::with_capacity(cfg.value_size + 256),
        })
    }

    /// One request and its whole reply: whether a GET found its value.
    fn call(&mut self, set: bool, key: &str, value: &[u8]) -> Result<bool, KvError> {
        let target = self.target;
        request(self.protocol, set, key, value, &mut self.out);
        self.stream
            .write_all(&self.out)
            .map_err(|source| KvError::Io {
                target,
                what: "send",
                source,
            })?;
        self.buf.clear();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match reply_len(self.protocol, set, &self.buf) {
                Ok(Some((n, hit))) if n == self.buf.len() => return Ok(hit),
                Ok(Some(_)) => {
                    return Err(KvError::Protocol(
                        "more bytes than the one reply asked for".into(),
                        target,
                    ));
                }
                Ok(None) => {}
                Err(e) => return Err(KvError::Protocol(e, target)),
            }
            let n = self.stream.read(&mut chunk).map_err(|source| KvError::Io {
                target,
                what: "reply",
                source,
            })?;
            if n == 0 {
                return Err(KvError::Protocol("closed the connection".into(), target));
            }
            if self.buf.len() + n > MAX_REPLY {
                return Err(KvError::Protocol("a reply over 1 MiB".into(), target));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

struct Counts {
    recorder: LatencyRecorder,
    done: u64,
    all: u64,
    misses: u64,
    late: u64,
}

/// Sets every key, then runs the schedule on every connection and merges what they measured.
pub fn run_kv(cfg: &KvConfig) -> Result<KvSummary, KvError> {
    cfg.check()?;
    let value = vec![b'x'; cfg.value_size];
    let mut first = Conn::open(cfg)?;
    for k in 0..cfg.keys {
        first.call(true, &format!("key:{k}"), &value)?;
    }
    drop(first);
    let start = Instant::now() + Duration::from_millis(50);
    let results: Vec<Result<Counts, KvError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.connections)
            .map(|c| {
                let value = &value;
                s.spawn(move || connection(cfg, c, start, value))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a kv connection thread panicked"))
            .collect()
    });
    let mut recorder = LatencyRecorder::new();
    let (mut done, mut all, mut misses, mut late) = (0, 0, 0, 0);
    for r in results {
        let c = r?;
        recorder.merge(&c.recorder);
        done += c.done;
        all += c.all;
        misses += c.misses;
        late += c.late;
    }
    let secs = cfg.duration.as_secs_f64();
    let mut notes = Vec::new();
    let asked = f64::from(cfg.rate) * secs;
    if (done as f64) < asked * 0.95 {
        notes.push(format!(
            "completed {done} of the {asked:.0} requests asked: the server or this client could not keep the rate"
        ));
    }
    Ok(KvSummary {
        kind: Kind::Summary,
        bench: BENCH.into(),
        role: Role::Client,
        target: cfg.target.to_string(),
        protocol: cfg.protocol,
        duration_s: secs,
        connections: cfg.connections,
        rate: cfg.rate,
        value_size: cfg.value_size,
        transactions: done,
        transactions_per_second: done as f64 / secs,
        all_transactions: all,
        late,
        misses,
        latency_ns: recorder.summary(),
        notes,
    })
}

/// One connection's schedule: its k-th request is due at start + (k × connections + c) / rate,
/// so the connections interleave evenly.
fn connection(cfg: &KvConfig, c: u32, start: Instant, value: &[u8]) -> Result<Counts, KvError> {
    let mut conn = Conn::open(cfg)?;
    let gap_ns = 1_000_000_000 * u64::from(cfg.connections) / u64::from(cfg.rate);
    let offset = Duration::from_nanos(1_000_000_000 * u64::from(c) / u64::from(cfg.rate));
    let measured_from = start + cfg.warmup;
    let end = measured_from + cfg.duration;
    let mut counts = Counts {
        recorder: LatencyRecorder::new(),
        done: 0,
        all: 0,
        misses: 0,
        late: 0,
    };
    let mut k: u64 = 0;
    // xorshift over the keys: spread, not quality.
    let mut x = (u64::from(c) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    loop {
        let due = start + offset + Duration::from_nanos(gap_ns.saturating_mul(k));
        if due >= end {
            return Ok(counts);
        }
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = format!("key:{}", x % u64::from(cfg.keys));
        let set = cfg.set_every > 0 && k.is_multiple_of(u64::from(cfg.set_every));
        let sent = Instant::now();
        let hit = conn.call(set, &key, value)?;
        let took = sent.elapsed();
        counts.all += 1;
        if due >= measured_from {
            counts.recorder.record(took.as_nanos() as u64);
            counts.done += 1;
            if sent.saturating_duration_since(due) > Duration::from_nanos(gap_ns) {
                counts.late += 1;
            }
            if !set && !hit {
                counts.misses += 1;
            }
        }
        k += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_framed_and_bounded() {
        let m = Protocol::Memcache;
        assert_eq!(reply_len(m, false, b"END\r\n"), Ok(Some((5, false))));
        assert_eq!(reply_len(m, false, b"VALUE k 0 3\r\nabc\r\nEN"), Ok(None));
        assert_eq!(
            reply_len(m, false, b"VALUE k 0 3\r\nabc\r\nEND\r\n"),
            Ok(Some((23, true)))
        );
        assert!(reply_len(m, false, b"VALUE k 0 99999999999\r\n").is_err());
        assert!(reply_len(m, false, b"SERVER_ERROR out of memory\r\n").is_err());
        assert!(reply_len(m, false, &[b'a'; 600]).is_err());
        assert_eq!(reply_len(m, true, b"STORED\r\n"), Ok(Some((8, true))));
        let r = Protocol::Redis;
        assert_eq!(reply_len(r, false, b"$-1\r\n"), Ok(Some((5, false))));
        assert_eq!(reply_len(r, false, b"$3\r\nabc\r\n"), Ok(Some((9, true))));
        assert_eq!(reply_len(r, false, b"$3\r\nab"), Ok(None));
        assert!(reply_len(r, false, b"-ERR wrong\r\n").is_err());
        assert!(reply_len(r, false, b"$2000000\r\n").is_err());
        assert_eq!(reply_len(r, true, b"+OK\r\n"), Ok(Some((5, true))));
    }

    #[test]
    fn requests_are_what_the_servers_parse() {
        let mut out = Vec::new();
        request(Protocol::Redis, true, "key:1", b"vv", &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$2\r\nvv\r\n");
        request(Protocol::Memcache, true, "key:1", b"vv", &mut out);
        assert_eq!(out, b"set key:1 0 0 2\r\nvv\r\n");
        request(Protocol::Memcache, false, "key:1", b"", &mut out);
        assert_eq!(out, b"get key:1\r\n");
    }
}
