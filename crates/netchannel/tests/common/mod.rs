#![allow(dead_code)]

use netchannel::wire::{HEADER_LEN, Hello};
use netchannel::{Class, Config, Endpoint};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub fn byte(seed: u64, i: u64) -> u8 {
    ((i ^ seed.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

pub fn fill(seed: u64, off: u64, buf: &mut [u8]) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = byte(seed, off + k as u64);
    }
}

/// A small deterministic generator for sizes.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % bound.max(1)
    }
}

/// Writes `total` pattern bytes in random-size writes.
pub fn send_stream(mut w: impl Write, seed: u64, total: u64) -> io::Result<()> {
    let mut rng = Lcg(seed ^ 0xabcdef);
    let mut buf = vec![0u8; 300_000];
    let mut off = 0u64;
    while off < total {
        let n = (1 + rng.next(buf.len())).min((total - off) as usize);
        fill(seed, off, &mut buf[..n]);
        w.write_all(&buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

/// Reads to EOF in random-size reads, checking every byte; returns the count, or the error
/// together with how many verified bytes came before it.
pub fn recv_stream(mut r: impl Read, seed: u64) -> Result<u64, (u64, io::Error)> {
    let mut rng = Lcg(seed ^ 0x123457);
    let mut buf = vec![0u8; 200_000];
    let mut off = 0u64;
    loop {
        let want = 1 + rng.next(buf.len());
        match r.read(&mut buf[..want]) {
            Ok(0) => return Ok(off),
            Ok(n) => {
                for (k, &b) in buf[..n].iter().enumerate() {
                    assert_eq!(
                        b,
                        byte(seed, off + k as u64),
                        "corrupt byte at {}",
                        off + k as u64
                    );
                }
                off += n as u64;
            }
            Err(e) => return Err((off, e)),
        }
    }
}

pub fn pair(server: Config, client: Config) -> (Endpoint, Endpoint) {
    let s = Endpoint::listen("127.0.0.1:0".parse().unwrap(), server).unwrap();
    let c = Endpoint::new(client).unwrap();
    (s, c)
}

#[path = "../../../../support/live.rs"]
mod live;
#[allow(unused_imports)]
pub use live::{cannot_run, is_root};

// The hostile peers' tools (hostile.rs, many_peers.rs).

/// A TCP connection to `to` from the loopback address `from` (another peer, as the server
/// sees it).
pub fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    s.bind(&SockAddr::from(local)).unwrap();
    s.connect_timeout(&SockAddr::from(to), Duration::from_secs(5))
        .unwrap();
    s.into()
}

pub fn hello(link: u64, index: u16, thpt: u16, lat: u16) -> [u8; HEADER_LEN + 32] {
    Hello {
        version: u16::from(netchannel::wire::VERSION),
        link_id: link,
        channel_index: index,
        class: if index < thpt {
            Class::Throughput
        } else {
            Class::Latency
        },
        throughput_channels: thpt,
        latency_channels: lat,
        max_frame: 65536,
    }
    .encode()
}

/// The endpoint's last rejection once it mentions `what` (it is recorded just after the
/// connection closes), or whatever it is after five seconds.
pub fn rejection(e: &Endpoint, what: &str) -> String {
    let t = Instant::now();
    loop {
        let why = e.stats().last_rejection.unwrap_or_default();
        if why.contains(what) || t.elapsed() > Duration::from_secs(5) {
            return why;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
