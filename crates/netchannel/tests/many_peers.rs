//! Hostile peers, round three (issue 53): a peer with many addresses, caps for the whole
//! endpoint, and a HELLO that drips. Each test drives an attack past the cap it checks, reads
//! the refusal's named cap, and has a legitimate peer served afterwards.

mod common;
use common::{connect_from, hello, rejection};

use netchannel::wire::{FrameType, HEADER_LEN, Header, Hello};
use netchannel::{Config, Endpoint, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A one-channel session from `from`: Some(stream) when the server answered the HELLO.
fn one_channel(from: &str, addr: SocketAddr, link: u64) -> Option<TcpStream> {
    let mut s = connect_from(from, addr);
    s.write_all(&hello(link, 0, 1, 0)).ok()?;
    let mut answer = [0u8; HEADER_LEN + 32];
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.read_exact(&mut answer).ok()?;
    Some(s)
}

/// A legitimate peer (from 127.0.0.1, another /24 than the attackers') opens a socket and is
/// served.
fn served(server: &Endpoint, port: u16) {
    let addr = server.local_addr().unwrap();
    let l = server.bind(port).unwrap();
    let client = Endpoint::new(Config::default()).unwrap();
    let c = client
        .connect(addr, port, SocketOptions::default())
        .unwrap_or_else(|e| {
            panic!(
                "the legitimate peer was refused: {e}; server: {:?}",
                server.stats().last_rejection
            )
        });
    (&c).write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    (&l.accept().unwrap()).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok");
}

/// 64 addresses of one /24 opening four sessions each (256, every place of `max_sessions`
/// by per-address counting alone) get `max_sessions_per_prefix` between them; the refusal
/// names it, and a peer of another prefix is served. (Before: the 64 addresses took all 256
/// places in 0.2 s and the legitimate peer was refused.)
#[test]
fn many_addresses_of_one_prefix_share_one_prefix_s_places() {
    let _g = serial();
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), Config::default()).unwrap();
    let addr = server.local_addr().unwrap();
    let cfg = Config::default();
    let mut held = Vec::new();
    let mut link = 1u64;
    for host in 1..=64 {
        for _ in 0..4 {
            if let Some(s) = one_channel(&format!("127.1.0.{host}"), addr, link) {
                held.push(s);
            }
            link += 1;
        }
    }
    assert!(
        held.len() <= cfg.max_sessions_per_prefix,
        "{} sessions from one /24",
        held.len()
    );
    let why = rejection(&server, "max_sessions_per_prefix");
    assert!(why.contains("max_sessions_per_prefix"), "{why}");
    served(&server, 1);
    drop(held);
}

/// Eight prefixes, each within its own caps, together reach the endpoint's `max_channels`:
/// the link past it is refused by that name, and the channels alive never pass it.
#[test]
fn channels_are_capped_for_the_whole_endpoint() {
    let _g = serial();
    let server = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            max_channels: 40,
            ..Config::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let mut held = Vec::new();
    for net in 1..=8u64 {
        // Two links of four channels from each prefix.
        for k in 0..2u64 {
            let link = net * 100 + k;
            let mut chans: Vec<TcpStream> = (0..4u16)
                .map(|i| {
                    let mut c = connect_from(&format!("127.2.{net}.1"), addr);
                    c.write_all(&hello(link, i, 4, 0)).unwrap();
                    c
                })
                .collect();
            let answered = chans.iter_mut().all(|c| {
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                c.read_exact(&mut [0u8; HEADER_LEN + 32]).is_ok()
            });
            if answered {
                held.push(chans);
            }
        }
    }
    let alive: usize = server
        .stats()
        .sessions
        .iter()
        .map(|s| s.channels.iter().filter(|c| c.alive).count())
        .sum();
    assert!(alive <= 40, "{alive} channels alive");
    assert_eq!(held.len(), 10, "links of four accepted under a cap of 40");
    let why = rejection(&server, "max_channels");
    assert!(why.contains("(max_channels)"), "{why}");
    drop(held);
    // The dead are forgotten at the next accept: a new peer's link fits again.
    let t = Instant::now();
    while server
        .stats()
        .sessions
        .iter()
        .any(|s| s.channels.iter().any(|c| c.alive))
        && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    served(&server, 2);
}

/// A peer opening virtual sockets leases a receive window for each: past the prefix's share of
/// receive memory its OPENs are reset and the refusal names the cap; the leases come back when
/// its session goes. (Before: memory was bounded per session only; each address added its own
/// share.)
#[test]
fn receive_memory_is_leased_per_socket_and_capped_per_prefix() {
    let _g = serial();
    let window = 64 << 10;
    let mut cfg = Config {
        window,
        max_frame: 1 << 16,
        ..Config::default()
    };
    // Each socket leases its receive share: the window and what holding it may cost.
    let share = cfg.receive_share();
    cfg.max_receive_memory_per_prefix = 16 * share;
    cfg.max_receive_memory = 64 * share;
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let addr = server.local_addr().unwrap();
    let l = server.bind(9).unwrap();
    // Two addresses of one prefix, 20 OPENs each.
    let mut acks = 0;
    let mut resets = 0;
    let mut held = Vec::new();
    for (n, from) in ["127.3.0.1", "127.3.0.2"].iter().enumerate() {
        let mut s = one_channel(from, addr, 900 + n as u64).unwrap();
        for port in 0..20u16 {
            let open = Header::control(FrameType::Open, 40000 + port, 9, window, 0);
            s.write_all(&open.encode()).unwrap();
        }
        let mut answers = 0;
        while answers < 20 {
            let mut raw = [0u8; HEADER_LEN];
            s.read_exact(&mut raw).unwrap();
            let h = Header::decode(&raw, 1 << 20).unwrap_or_else(|e| panic!("{e}"));
            let mut rest = vec![0u8; h.wire_len() - HEADER_LEN];
            s.read_exact(&mut rest).unwrap();
            match h.kind {
                FrameType::OpenAck => acks += 1,
                FrameType::Rst => resets += 1,
                _ => continue,
            }
            answers += 1;
        }
        held.push(s);
    }
    assert_eq!((acks, resets), (16, 24));
    let stats = server.stats();
    assert_eq!(stats.receive_memory_leased, 16 * share);
    assert_eq!(stats.rejected_opens, 24);
    let why = stats.last_rejection.unwrap_or_default();
    assert!(why.contains("max_receive_memory_per_prefix"), "{why}");
    // The accepted sockets are the application's; when they and the peers' sessions are gone,
    // so are the leases.
    let mut accepted = Vec::new();
    for _ in 0..16 {
        accepted.push(l.accept().unwrap());
    }
    drop(accepted);
    drop(held);
    let t = Instant::now();
    while server.stats().receive_memory_leased != 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.stats().receive_memory_leased, 0);
    served(&server, 10);
}

/// A HELLO sent a byte at a time, each byte well inside `hello_timeout` of the last, is cut
/// off when the whole HELLO is late: the deadline is for all of it, not for each read.
/// (Before: one byte every 3 s held a handshake place for minutes.)
#[test]
fn a_dripped_hello_is_cut_off_at_its_deadline() {
    let _g = serial();
    let server = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            hello_timeout: Duration::from_secs(2),
            ..Config::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let mut s = connect_from("127.4.0.1", addr);
    let bytes = hello(1, 0, 1, 0);
    let mut sent = 0;
    // 200 ms a byte: the 56 bytes would take 11 s.
    for b in bytes {
        if s.write_all(&[b]).is_err() {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(200));
        // A closed connection shows as EOF on a non-blocking read.
        s.set_nonblocking(true).unwrap();
        let closed = matches!(s.read(&mut [0u8; 1]), Ok(0));
        s.set_nonblocking(false).unwrap();
        if closed {
            break;
        }
    }
    assert!(sent < bytes.len(), "the whole dripped HELLO was taken");
    let why = rejection(&server, "hello_timeout");
    assert!(
        why.contains("no HELLO") && why.contains("hello_timeout"),
        "{why}"
    );
}

/// The connecting side's wait for the HELLO answer is one deadline too: a server dripping its
/// answer makes `connect` fail with TimedOut naming the peer, not hang for the drip's length.
#[test]
fn a_dripped_hello_answer_fails_the_connect_at_its_deadline() {
    let _g = serial();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let dripper = std::thread::spawn(move || {
        // Every channel's HELLO is answered, a byte every 200 ms.
        let mut conns = Vec::new();
        l.set_nonblocking(false).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut h = [0u8; HEADER_LEN + 32];
        s.read_exact(&mut h).unwrap();
        let theirs = Hello::decode(&h).unwrap();
        let answer = Hello {
            max_frame: 65536,
            ..theirs
        }
        .encode();
        for b in answer {
            if s.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        conns.push(s);
    });
    let client = Endpoint::new(Config {
        hello_timeout: Duration::from_secs(2),
        throughput_channels: 1,
        latency_channels: 0,
        ..Config::default()
    })
    .unwrap();
    let e = client
        .connect(addr, 1, SocketOptions::default())
        .map(|_| ())
        .expect_err("a dripped HELLO answer was waited out");
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("hello_timeout"), "{e}");
    dripper.join().unwrap();
}

/// A connect to a peer that never answers its HELLO fails with TimedOut (ETIMEDOUT for a
/// program), never WouldBlock (EAGAIN, which programs read as "in progress"); and while one
/// peer drips its answer, a connect to another peer goes through: no lock is held across a
/// peer's I/O. (Before: the dial held the lock every other connect needed.)
#[test]
fn a_silent_or_slow_peer_neither_says_eagain_nor_holds_other_connects() {
    let _g = serial();
    // Accepts and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let keep = std::thread::spawn(move || {
        let c = silent.accept();
        std::thread::sleep(Duration::from_secs(3));
        drop(c);
    });
    let client = Endpoint::new(Config {
        hello_timeout: Duration::from_secs(1),
        throughput_channels: 1,
        latency_channels: 0,
        ..Config::default()
    })
    .unwrap();
    let e = client
        .connect(silent_addr, 1, SocketOptions::default())
        .map(|_| ())
        .expect_err("a silent peer was connected");
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    keep.join().unwrap();

    // One peer drips its answer (11 s at a byte every 200 ms); another answers at once.
    let slow = TcpListener::bind("127.0.0.1:0").unwrap();
    let slow_addr = slow.local_addr().unwrap();
    let dripper = std::thread::spawn(move || {
        let (mut s, _) = slow.accept().unwrap();
        let mut h = [0u8; HEADER_LEN + 32];
        s.read_exact(&mut h).unwrap();
        let answer = Hello {
            max_frame: 65536,
            ..Hello::decode(&h).unwrap()
        }
        .encode();
        for b in answer {
            if s.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let good = Endpoint::listen("127.0.0.1:0".parse().unwrap(), Config::default()).unwrap();
    let _l = good.bind(5).unwrap();
    let client = std::sync::Arc::new(
        Endpoint::new(Config {
            hello_timeout: Duration::from_secs(30),
            throughput_channels: 1,
            latency_channels: 0,
            ..Config::default()
        })
        .unwrap(),
    );
    let c2 = client.clone();
    let stuck = std::thread::spawn(move || c2.connect(slow_addr, 1, SocketOptions::default()));
    std::thread::sleep(Duration::from_millis(300));
    client
        .connect(good.local_addr().unwrap(), 5, SocketOptions::default())
        .expect("a connect to a good peer while another dials");
    assert!(
        !stuck.is_finished(),
        "the slow dial ended before the good connect: nothing was shown"
    );
    let _ = stuck.join().unwrap();
    dripper.join().unwrap();
}

/// One prefix cannot take every channel: past `max_channels_per_prefix` its links are refused
/// by that name while another prefix's link is accepted.
#[test]
fn one_prefix_cannot_take_every_channel() {
    let _g = serial();
    let server = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            max_channels_per_prefix: 8,
            ..Config::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let link = |from: &str, id: u64| -> Option<Vec<TcpStream>> {
        let mut chans: Vec<TcpStream> = (0..4u16)
            .map(|i| {
                let mut c = connect_from(from, addr);
                c.write_all(&hello(id, i, 4, 0)).unwrap();
                c
            })
            .collect();
        chans
            .iter_mut()
            .all(|c| {
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                c.read_exact(&mut [0u8; HEADER_LEN + 32]).is_ok()
            })
            .then_some(chans)
    };
    let a = link("127.6.0.1", 1).expect("first link of the prefix");
    let b = link("127.6.0.2", 2).expect("second link of the prefix");
    assert!(link("127.6.0.3", 3).is_none(), "a third link of one prefix");
    let why = rejection(&server, "max_channels_per_prefix");
    assert!(why.contains("max_channels_per_prefix"), "{why}");
    let c = link("127.7.0.1", 4).expect("another prefix's link");
    drop((a, b, c));
}

/// Issue 77, item 2: silent connections from eight /24s, eight each (every place of
/// `max_handshakes`, inside every per-address and per-prefix cap as they stood), re-dialled
/// as soon as the server drops them (at the HELLO deadline, or evicted). A legitimate peer
/// from a ninth prefix, whose HELLOs come at once, opens every session it asks for: a full
/// table evicts the oldest silent connection of the prefix holding the most, never the new
/// dial. (Before: 32 silent connections from each of two /24s kept all 64 places; a
/// legitimate peer opened 0 of 56 sessions.)
#[test]
fn re_dialled_silent_handshakes_never_keep_a_prompt_peer_out() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let _g = serial();
    let server = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            hello_timeout: Duration::from_secs(2),
            ..Config::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let _l = server.bind(1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let dials = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();
    for net in 1..=8 {
        for host in 1..=4 {
            for _ in 0..2 {
                let (stop, dials) = (stop.clone(), dials.clone());
                let from = format!("127.8.{net}.{host}");
                attackers.push(std::thread::spawn(move || {
                    let mut buf = [0u8; 64];
                    while !stop.load(Ordering::Relaxed) {
                        let mut s = connect_from(&from, addr);
                        dials.fetch_add(1, Ordering::Relaxed);
                        s.set_read_timeout(Some(Duration::from_millis(100)))
                            .unwrap();
                        // Silent until the server closes it; then dial again.
                        loop {
                            match s.read(&mut buf) {
                                Ok(_) => break,
                                Err(e)
                                    if e.kind() == ErrorKind::WouldBlock
                                        || e.kind() == ErrorKind::TimedOut =>
                                {
                                    if stop.load(Ordering::Relaxed) {
                                        return;
                                    }
                                }
                                Err(_) => break,
                            }
                        }
                    }
                }));
            }
        }
    }
    // All 64 dialled (each holds a place, or was refused and dials again).
    let t = Instant::now();
    while dials.load(Ordering::Relaxed) < 64 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut opened = 0;
    let mut last = None;
    let mut held = Vec::new();
    for _ in 0..12 {
        let client = Endpoint::new(Config {
            hello_timeout: Duration::from_secs(10),
            ..Config::default()
        })
        .unwrap();
        match client.connect(addr, 1, SocketOptions::default()) {
            Ok(c) => {
                opened += 1;
                held.push((client, c));
            }
            Err(e) => last = Some(e.to_string()),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    eprintln!(
        "{opened} of 12 sessions opened beside {} silent dials; server: {:?}",
        dials.load(Ordering::Relaxed),
        server.stats().last_rejection
    );
    assert_eq!(
        opened,
        12,
        "{last:?}; server: {:?}",
        server.stats().last_rejection
    );
}

/// Issue 77, item 2: idle sessions from four /24s, each opening as many as its addresses
/// may (64 addresses, four each), take only their prefixes' shares; a new prefix still gets
/// a session. (Before: four /24s took all 256 places, 64 each.)
#[test]
fn idle_sessions_from_four_prefixes_leave_places_for_a_new_prefix() {
    let _g = serial();
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), Config::default()).unwrap();
    let addr = server.local_addr().unwrap();
    let mut held = Vec::new();
    let mut link = 1u64;
    for net in 1..=4 {
        for host in 1..=16 {
            for _ in 0..4 {
                if let Some(s) = one_channel(&format!("127.9.{net}.{host}"), addr, link) {
                    held.push(s);
                }
                link += 1;
            }
        }
    }
    let cfg = Config::default();
    assert!(
        held.len() <= 4 * cfg.max_sessions_per_prefix,
        "{} sessions from four /24s",
        held.len()
    );
    // The new prefix first: with every place taken, it was refused (max_sessions).
    served(&server, 1);
    let why = rejection(&server, "max_sessions_per_prefix");
    assert!(why.contains("max_sessions_per_prefix"), "{why}");
    drop(held);
}

/// Issue 77, item 2: part of the session table is kept for prefixes already served. New
/// prefixes fill every other place; one more new prefix is refused, naming the reserve, while
/// a peer whose prefix had a session a moment ago comes back.
#[test]
fn places_are_kept_for_prefixes_already_served() {
    let _g = serial();
    let cfg = Config {
        max_sessions: 32,
        session_reserve: 8,
        max_sessions_per_prefix: 4,
        reserved_sessions_per_prefix: 2,
        ..Config::default()
    };
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let addr = server.local_addr().unwrap();
    // The returning peer's first visit.
    let first = one_channel("127.10.0.1", addr, 1).expect("a first session");
    drop(first);
    let t = Instant::now();
    while !server.stats().sessions.is_empty() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Six new prefixes, four sessions each: the 24 places not kept.
    let mut held = Vec::new();
    let mut link = 100u64;
    for net in 1..=6 {
        for host in 1..=4 {
            held.push(
                one_channel(&format!("127.11.{net}.{host}"), addr, link)
                    .expect("a session inside the open places"),
            );
            link += 1;
        }
    }
    assert!(
        one_channel("127.12.0.1", addr, 999).is_none(),
        "a new prefix took a kept place"
    );
    let why = rejection(&server, "session_reserve");
    assert!(why.contains("session_reserve"), "{why}");
    // A prefix already served, at its own share, gets no kept place either.
    assert!(one_channel("127.11.1.5", addr, 998).is_none());
    let back = one_channel("127.10.0.2", addr, 2).expect("the served prefix comes back");
    drop((back, held));
}
