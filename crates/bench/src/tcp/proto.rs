//! The control exchange between `netsteer bench tcp-* client` and the server.
//!
//! Every connection, control or data, opens with a preamble — the magic `NSTB`, a big-endian
//! u16 protocol version — followed by frames: a big-endian u32 length and that many bytes of
//! JSON. The first frame is a [`Hello`]. On a control connection the client then asks for a
//! test ([`Hello::Control`] carries the [`TestSpec`]), the server answers [`Reply::Accepted`]
//! with a test id or [`Reply::Rejected`]; each data connection names that id and its flow
//! ([`Hello::Data`]) and carries only benchmark bytes after its hello. When the client is done
//! it sends [`Finish`] on the control connection and the server answers with its side of the
//! results ([`Reply::Result`]).
//!
//! A peer gets `HELLO_TIMEOUT` to send its preamble and hello, frames are at most
//! `MAX_FRAME` bytes, and nothing is allocated before the length is checked: garbage, silence
//! (slowloris) or a huge length costs the server one bounded read and a closed connection.

use crate::tcp::cost::SideCost;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::io::{self, Read, Write};
use std::time::Duration;

pub const MAGIC: [u8; 4] = *b"NSTB";
pub const VERSION: u16 = 1;
pub const MAX_FRAME: usize = 64 << 10;
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Which benchmark a test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestKind {
    TcpStream,
    TcpRr,
}

impl TestKind {
    pub fn bench(self) -> &'static str {
        match self {
            TestKind::TcpStream => "tcp-stream",
            TestKind::TcpRr => "tcp-rr",
        }
    }
}

/// What the client asks the server to do on its side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    pub kind: TestKind,
    pub flows: u32,
    /// Seconds the client will run; the server gives up on a silent control connection
    /// `CONTROL_GRACE_S` after that.
    pub duration_s: f64,
    /// Stream: the sender's write size (the receiver reads in buffers of this size, within
    /// 64 KiB..1 MiB).
    pub write_size: u32,
    /// Stream: check every received byte against the sender's pattern.
    pub verify: bool,
    /// Stream: receive with TCP_ZEROCOPY_RECEIVE.
    pub zerocopy_recv: bool,
    /// TCP_MAXSEG for the server's sockets (its own sends; the client clamps its own).
    pub mss: Option<u32>,
    pub congestion: Option<String>,
    pub nodelay: bool,
    /// Request/response sizes for tcp-rr.
    pub request_size: u32,
    pub response_size: u32,
    /// `block`, `spin` or `busy-poll`, and SO_BUSY_POLL µs.
    pub wait: String,
    pub busy_poll_us: u32,
    /// Packets per busy-poll round (0: the kernel's default); absent from older clients.
    #[serde(default)]
    pub busy_poll_budget: u16,
    #[serde(default)]
    pub prefer_busy_poll: bool,
    /// tcp-stream: bytes per read on the receiver (None: netsteer's own, 64 KiB to 1 MiB with
    /// a low-water mark for small writes); `iperf3 -l 16` reads 16 bytes at a time.
    #[serde(default)]
    pub read_size: Option<u32>,
    /// tcp-stream: how the server drives its flows (absent from older clients: auto).
    #[serde(default)]
    pub engine: crate::tcp::Engine,
}

impl TestSpec {
    /// The busy-poll settings both sides use.
    pub fn busy(&self) -> crate::waiter::Busy {
        crate::waiter::Busy {
            usecs: self.busy_poll_us,
            budget: self.busy_poll_budget,
            prefer: self.prefer_busy_poll,
        }
    }
}

/// Seconds past the announced duration the server waits for a control message.
pub const CONTROL_GRACE_S: f64 = 30.0;

impl TestSpec {
    /// Limits a server enforces on what a client may ask for.
    pub fn check(&self) -> Result<(), String> {
        if self.flows == 0 || self.flows > 256 {
            return Err(format!("flows {} (1..=256)", self.flows));
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= 86_400.0) {
            return Err(format!("duration {} s (0..=86400)", self.duration_s));
        }
        if self.write_size == 0 || self.write_size > 64 << 20 {
            return Err(format!("write size {} (1..=64 MiB)", self.write_size));
        }
        for (what, v) in [
            ("request size", self.request_size),
            ("response size", self.response_size),
        ] {
            if v == 0 || v > 16 << 20 {
                return Err(format!("{what} {v} (1..=16 MiB)"));
            }
        }
        if let Some(m) = self.mss
            && !(88..=65535).contains(&m)
        {
            return Err(format!("mss {m} (88..=65535)"));
        }
        if self.read_size.is_some_and(|r| r == 0 || r > 1 << 20) {
            return Err(format!("read size {:?} (1..=1 MiB)", self.read_size));
        }
        if self.zerocopy_recv && self.engine == crate::tcp::Engine::Poll {
            return Err(
                "engine poll: TCP_ZEROCOPY_RECEIVE runs a thread per flow (engine threads or auto)"
                    .into(),
            );
        }
        if self.wait.parse::<crate::udp_echo::Wait>().is_err() {
            return Err(format!("wait mode {:?}", self.wait));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hello", rename_all = "kebab-case")]
pub enum Hello {
    Control { spec: TestSpec },
    Data { test_id: u64, flow: u32 },
}

/// Client → server at the end of a test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finish {
    /// Bytes each flow wrote (stream), to compare with what arrived.
    pub sent_bytes: Vec<u64>,
}

/// The server's side of one flow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerFlow {
    pub flow: u32,
    pub bytes: u64,
    /// Zero-copy receive: bytes mapped, copied into the copy buffer, and read with read(2).
    pub rx_mapped_bytes: u64,
    pub rx_copybuf_bytes: u64,
    pub rx_read_bytes: u64,
    /// `--verify`: stream offset of the first byte that differed from the pattern.
    pub first_mismatch: Option<u64>,
    pub transactions: u64,
    /// Set when the flow ended with an error other than the peer's close.
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply {
    Accepted {
        test_id: u64,
    },
    Rejected {
        error: String,
    },
    Result {
        flows: Vec<ServerFlow>,
        cost: SideCost,
        duration_s: f64,
        /// How the server drove the flows (absent from older servers).
        #[serde(default)]
        engine: Option<crate::tcp::Engine>,
    },
}

pub fn write_preamble(w: &mut impl Write) -> io::Result<()> {
    let mut p = [0u8; 6];
    p[..4].copy_from_slice(&MAGIC);
    p[4..].copy_from_slice(&VERSION.to_be_bytes());
    w.write_all(&p)
}

/// Reads and checks the preamble.
pub fn read_preamble(r: &mut impl Read) -> io::Result<()> {
    let mut p = [0u8; 6];
    r.read_exact(&mut p)?;
    if p[..4] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a netsteer bench peer (bad magic)",
        ));
    }
    let v = u16::from_be_bytes([p[4], p[5]]);
    if v != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("protocol version {v}, this build speaks {VERSION}"),
        ));
    }
    Ok(())
}

/// Reads from a socket against one deadline for a whole exchange, not a timeout per read: a
/// peer dripping one byte a second would otherwise keep a per-read timeout from ever firing
/// and hold its connection slot forever (slowloris).
pub struct DeadlineReader<'a> {
    sock: &'a std::net::TcpStream,
    deadline: std::time::Instant,
}

impl<'a> DeadlineReader<'a> {
    pub fn new(sock: &'a std::net::TcpStream, limit: Duration) -> Self {
        DeadlineReader {
            sock,
            deadline: std::time::Instant::now() + limit,
        }
    }
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not send its whole message before the deadline",
            ));
        }
        self.sock.set_read_timeout(Some(left))?;
        (&mut &*self.sock).read(buf)
    }
}

pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {} bytes exceeds {MAX_FRAME}", body.len()),
        ));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    w.write_all(&out)?;
    w.flush()
}

pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame length {len} exceeds {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec() -> TestSpec {
        TestSpec {
            kind: TestKind::TcpStream,
            flows: 2,
            duration_s: 1.0,
            write_size: 16,
            verify: true,
            zerocopy_recv: false,
            mss: None,
            congestion: None,
            nodelay: true,
            request_size: 4096,
            response_size: 4096,
            wait: "block".into(),
            busy_poll_us: 50,
            busy_poll_budget: 0,
            prefer_busy_poll: false,
            read_size: None,
            engine: crate::tcp::Engine::Threads,
        }
    }

    #[test]
    fn frames_round_trip_and_limits_hold() {
        let mut buf = Vec::new();
        write_preamble(&mut buf).unwrap();
        let hello = Hello::Control { spec: spec() };
        write_frame(&mut buf, &hello).unwrap();
        let mut r = &buf[..];
        read_preamble(&mut r).unwrap();
        assert_eq!(read_frame::<Hello>(&mut r).unwrap(), hello);

        let mut bad = b"GET / HTTP/1.1\r\n".as_slice();
        assert!(
            read_preamble(&mut bad)
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        let mut huge = [0xffu8, 0xff, 0xff, 0xff, b'{'].as_slice();
        assert!(
            read_frame::<Hello>(&mut huge)
                .unwrap_err()
                .to_string()
                .contains("exceeds")
        );
        let mut unknown = Vec::new();
        write_frame(&mut unknown, &serde_json::json!({"hello": "teapot"})).unwrap();
        assert!(read_frame::<Hello>(&mut unknown.as_slice()).is_err());
    }

    #[test]
    fn spec_limits() {
        assert_eq!(spec().check(), Ok(()));
        for bad in [
            TestSpec { flows: 0, ..spec() },
            TestSpec {
                flows: 10_000,
                ..spec()
            },
            TestSpec {
                duration_s: f64::NAN,
                ..spec()
            },
            TestSpec {
                write_size: 0,
                ..spec()
            },
            TestSpec {
                request_size: 1 << 30,
                ..spec()
            },
            TestSpec {
                mss: Some(10),
                ..spec()
            },
            TestSpec {
                wait: "nap".into(),
                ..spec()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
