//! Hostile peers, round two (issue 35, items 1–5): each test drives an attack well past the
//! bound it checks and asserts memory, slots or bytes stay within it. One test at a time
//! (RSS is the process's, and the rlimit test changes the process's limit).

mod common;
use common::{connect_from, hello, rejection};

use netchannel::wire::{FrameType, HEADER_LEN, Header};
use netchannel::{Config, Endpoint, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// A one-channel session from `from`, handshake done.
fn one_channel(from: &str, addr: SocketAddr, link: u64) -> TcpStream {
    let mut s = connect_from(from, addr);
    s.write_all(&hello(link, 0, 1, 0)).unwrap();
    let mut answer = [0u8; HEADER_LEN + 32];
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.read_exact(&mut answer).unwrap();
    s
}

fn frame(kind: FrameType, src: u16, dst: u16, credit: u32, seq: u64, len: u32) -> Vec<u8> {
    let mut h = Header::control(kind, src, dst, credit, seq);
    h.len = len;
    h.encode().to_vec()
}

/// Reads one frame; its payload (pads passed over) is returned.
fn read_frame(s: &mut TcpStream) -> std::io::Result<(Header, Vec<u8>)> {
    let mut raw = [0u8; HEADER_LEN];
    s.read_exact(&mut raw)?;
    let h = Header::decode(&raw, 1 << 20).unwrap();
    let mut rest = vec![0u8; h.wire_len() - HEADER_LEN];
    s.read_exact(&mut rest)?;
    let (head, _) = h.pads();
    Ok((h, rest[head..head + h.len as usize].to_vec()))
}

/// Sends `frames` copies of `one` in large writes until the server cuts the connection off;
/// returns how many were written before that (None: never cut off).
fn flood_until_cut(s: &mut TcpStream, one: &[u8], frames: usize) -> Option<usize> {
    let batch: Vec<u8> = one.repeat(4096);
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut sent = 0;
    while sent < frames {
        match s.write_all(&batch) {
            Ok(()) => sent += 4096,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                return None;
            }
            Err(_) => return Some(sent),
        }
    }
    None
}

/// Item 1: DATA for sockets that do not exist and OPENs to a port nobody listens on each
/// force a reply (RST). A peer that sends millions and reads none is cut off once
/// `max_queued_control` replies wait, and the server's memory stays flat. (Before: +82 MB per
/// million refused OPENs, +340 MB for 4 M orphan DATA frames.)
#[test]
fn a_peer_that_never_reads_its_replies_is_cut_off_with_flat_memory() {
    let _g = serial();
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), Config::default()).unwrap();
    let addr = server.local_addr().unwrap();
    let before = rss();
    let orphan = frame(FrameType::Data, 5, 6, 0, 0, 0);
    let refused_open = frame(FrameType::Open, 7, 4242, 65536, 0, 0);
    for (link, one) in [(1u64, &orphan), (2, &refused_open)] {
        let mut s = one_channel("127.0.0.1", addr, link);
        let cut = flood_until_cut(&mut s, one, 4_000_000);
        assert!(
            cut.is_some(),
            "link {link}: 4 M unanswerable frames and still connected"
        );
    }
    let grown = rss().saturating_sub(before);
    assert!(grown < 24 << 20, "memory grew by {} MiB", grown >> 20);
    // The cause is named.
    let t = Instant::now();
    while server.stats().sessions.iter().any(|s| s.channels[0].alive)
        && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        server
            .stats()
            .sessions
            .iter()
            .all(|s| s.channels.iter().all(|c| !c.alive)),
        "{:?}",
        server.stats()
    );
    // A real peer still gets in and is served.
    let client = Endpoint::new(Config::default()).unwrap();
    let l = server.bind(3).unwrap();
    let c = client.connect(addr, 3, SocketOptions::default()).unwrap();
    (&c).write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    (&l.accept().unwrap()).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok");
}

/// Item 2: an OPEN advertising a 4 GiB window, and no CREDIT ever: the server's sender keeps
/// at most its own `window` unacknowledged for that socket, whatever the peer said. (Before:
/// it sent, and kept, everything the application wrote.)
#[test]
fn the_send_window_is_bounded_by_our_window_not_the_peers() {
    let _g = serial();
    let window = 256 * 1024;
    let cfg = Config {
        window,
        max_frame: 64 * 1024,
        ..Config::default()
    };
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let addr = server.local_addr().unwrap();
    let l = server.bind(9).unwrap();
    let mut s = one_channel("127.0.0.1", addr, 77);
    s.write_all(&frame(FrameType::Open, 40000, 9, u32::MAX, 0, 0))
        .unwrap();
    let (ack, _) = read_frame(&mut s).unwrap();
    assert_eq!(ack.kind, FrameType::OpenAck);
    let victim = l.accept_timeout(Duration::from_secs(5)).unwrap();
    let total = 32u64 << 20;
    let writer = std::thread::spawn(move || {
        let chunk = vec![7u8; 64 * 1024];
        let mut written = 0u64;
        while written < total {
            if (&victim).write_all(&chunk).is_err() {
                break;
            }
            written += chunk.len() as u64;
        }
        written
    });
    // Read everything the server sends for two seconds, answering nothing.
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut got = 0u64;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        match read_frame(&mut s) {
            Ok((h, p)) if h.kind == FrameType::Data => got += p.len() as u64,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        got <= u64::from(window),
        "the server sent {got} bytes past a {window}-byte window with no CREDIT"
    );
    assert!(got > 0, "nothing was sent at all");
    assert!(!writer.is_finished(), "the writer was never held back");
    drop(s);
    drop(server);
    writer.join().unwrap();
}

/// Item 3: 1-byte DATA pieces with 1-byte holes inside the window. The socket is reset once
/// it holds `max_pieces` of them, and the application is told the peer fragments its stream.
/// (Before: 524,287 pieces, ~65 MB, for one 1 MiB window.)
#[test]
fn one_byte_pieces_with_holes_reset_the_socket_at_the_piece_bound() {
    let _g = serial();
    let window = 1u32 << 20;
    let server = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            window,
            ..Config::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let l = server.bind(9).unwrap();
    let mut s = one_channel("127.0.0.1", addr, 78);
    s.write_all(&frame(FrameType::Open, 40000, 9, 65536, 0, 0))
        .unwrap();
    assert_eq!(read_frame(&mut s).unwrap().0.kind, FrameType::OpenAck);
    let victim = l.accept_timeout(Duration::from_secs(5)).unwrap();
    let before = rss();
    // Every other byte of the whole window (524,287 pieces): far past the bound.
    let mut buf = Vec::new();
    let mut reset = false;
    s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    for k in 0..u64::from(window / 2 - 1) {
        buf.extend(frame(FrameType::Data, 40000, 9, 0, 2 + 2 * k, 1));
        buf.push(0);
        if buf.len() > 64 * 1024 {
            if s.write_all(&buf).is_err() {
                break;
            }
            buf.clear();
            if let Ok((h, _)) = read_frame(&mut s) {
                reset = h.kind == FrameType::Rst;
                break;
            }
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    reset = reset || read_frame(&mut s).is_ok_and(|(h, _)| h.kind == FrameType::Rst);
    assert!(reset, "no RST for a fragmented stream");
    let e = (&victim).read(&mut [0u8; 8]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains("fragments"), "{e}");
    let grown = rss().saturating_sub(before);
    assert!(grown < 16 << 20, "memory grew by {} MiB", grown >> 20);
}

/// Item 4: one peer address keeping single-HELLO links topped up, and holding silent
/// connections in handshake, fills only its own share: a second peer's sessions all open.
/// (Before: 8 of 22 legitimate attempts failed.)
#[test]
fn one_peer_cannot_hold_every_half_built_link_or_handshake() {
    let _g = serial();
    let server = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            hello_timeout: Duration::from_secs(30),
            ..Config::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let _l = server.bind(1).unwrap();
    // 64 half-built links (each the first of two channels) and 64 silent connections, all
    // from 127.0.0.2.
    let mut hostile = Vec::new();
    for link in 0..64u64 {
        let mut s = connect_from("127.0.0.2", addr);
        s.write_all(&hello(5000 + link, 0, 2, 0)).unwrap();
        hostile.push(s);
        hostile.push(connect_from("127.0.0.2", addr));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut ok = 0;
    for _ in 0..22 {
        let client = Endpoint::new(Config {
            hello_timeout: Duration::from_secs(5),
            ..Config::default()
        })
        .unwrap();
        if let Ok(c) = client.connect(addr, 1, SocketOptions::default()) {
            ok += 1;
            drop(c);
        }
    }
    assert_eq!(ok, 22, "{:?}", server.stats().last_rejection);
    drop(hostile);
}

/// Item 5: sessions and channels per peer, and file descriptors against RLIMIT_NOFILE. Under
/// a 2,048-descriptor limit (the attacker's sockets live in this process too: 1,024 for each
/// side), one address opening 40 sessions of 64 channels gets at most
/// `max_sessions_per_peer` sessions of at most `max_accepted_channels` channels, each refusal
/// names its limit, and another peer still gets in. (Before: 7 such sessions stopped new
/// legitimate ones.)
#[test]
fn sessions_channels_and_descriptors_are_budgeted_per_peer() {
    let _g = serial();
    let mut old = libc_rlimit();
    let cur = old.0;
    set_nofile(2048.min(cur), old.1);
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), Config::default()).unwrap();
    let addr = server.local_addr().unwrap();
    let l = server.bind(1).unwrap();
    let mut hostile = Vec::new();
    // 64-channel links are refused outright.
    let mut s = connect_from("127.0.1.2", addr);
    s.write_all(&hello(6000, 0, 64, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(s.read(&mut [0u8; 64]), Ok(0) | Err(_)));
    let why = rejection(&server, "max_accepted_channels");
    assert!(why.contains("max_accepted_channels"), "{why}");
    // 40 links of 16 channels: at most 16 complete.
    let mut complete = 0;
    for link in 0..40u64 {
        let mut chans = Vec::new();
        for i in 0..16u16 {
            let mut c = connect_from("127.0.1.2", addr);
            c.write_all(&hello(6100 + link, i, 16, 0)).unwrap();
            chans.push(c);
        }
        let mut answered = true;
        for c in chans.iter_mut() {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut a = [0u8; HEADER_LEN + 32];
            answered &= c.read_exact(&mut a).is_ok();
        }
        complete += usize::from(answered);
        if answered {
            hostile.push(chans);
        }
    }
    assert!(complete <= 16, "{complete} sessions from one address");
    let why = rejection(&server, "max_sessions_per_peer");
    assert!(
        why.contains("max_sessions_per_peer") || why.contains("RLIMIT_NOFILE"),
        "{why}"
    );
    // Another peer (of another /24: one prefix is one peer's share too) is still served.
    let client = Endpoint::new(Config::default()).unwrap();
    let c = client.connect(addr, 1, SocketOptions::default()).unwrap();
    (&c).write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    (&l.accept().unwrap()).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok");
    drop(hostile);
    // The budget: a reserve that leaves no room refuses a link and says why.
    drop(client);
    let tight = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            fd_reserve: 2047,
            ..Config::default()
        },
    )
    .unwrap();
    let mut s = connect_from("127.0.0.3", tight.local_addr().unwrap());
    s.write_all(&hello(7000, 0, 1, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(s.read(&mut [0u8; 64]), Ok(0) | Err(_)));
    let why = rejection(&tight, "RLIMIT_NOFILE");
    assert!(why.contains("RLIMIT_NOFILE 2048"), "{why}");
    old.0 = cur;
    set_nofile(old.0, old.1);
}

/// (soft, hard) RLIMIT_NOFILE, from /proc/self/limits.
fn libc_rlimit() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut it = line["Max open files".len()..].split_whitespace();
    let soft = it.next().unwrap().parse().unwrap();
    let hard = it.next().unwrap().parse().unwrap();
    (soft, hard)
}

/// Sets this process's RLIMIT_NOFILE with prlimit(1) (util-linux), so the test needs no
/// unsafe code.
fn set_nofile(soft: u64, hard: u64) {
    let st = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={soft}:{hard}"))
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(libc_rlimit().0, soft);
}

/// Run to completion (`Config::app_driven`): the thread that reads a channel is the
/// application's own. A peer that sends a frame's header and part of its payload and then
/// stops must not hold it: the pump returns at once, keeps what came, and finishes the frame
/// when the rest arrives, for a payload read directly into its own buffer (40,000 bytes) and
/// one staged (100 bytes) alike.
#[test]
fn a_half_sent_frame_never_holds_the_thread_that_reads_it() {
    use netchannel::{DrivenChannel, Pumped};
    use std::task::{Context, Poll, Waker};
    let _g = serial();
    let cfg = Config {
        app_driven: true,
        // Only this test's thread reads: the standby never steps in.
        standby_after: Duration::from_secs(3600),
        max_frame: 64 * 1024,
        window: 256 * 1024,
        ..Config::default()
    };
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let d = server.driver().unwrap().clone();
    let addr = server.local_addr().unwrap();
    let l = server.bind(9).unwrap();
    let mut s = one_channel("127.0.0.1", addr, 78);
    // Pumps every channel on another thread; fails if that does not come back.
    let pump_all = || {
        let chans: Vec<DrivenChannel> = d.channels();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let done: Vec<Pumped> = chans.iter().map(DrivenChannel::pump).collect();
            let _ = tx.send(done);
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a pump waited for the rest of a frame")
    };
    let mut cx = Context::from_waker(Waker::noop());
    s.write_all(&frame(FrameType::Open, 40000, 9, u32::MAX, 0, 0))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let victim = loop {
        pump_all();
        if let Poll::Ready(v) = l.poll_accept(&mut cx) {
            break v.unwrap();
        }
        assert!(Instant::now() < deadline, "the OPEN was never read");
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut seq = 0u64;
    for len in [40_000u32, 100] {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let half = len as usize / 2;
        s.write_all(&frame(FrameType::Data, 40000, 9, 0, seq, len))
            .unwrap();
        s.write_all(&payload[..half]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        pump_all();
        let mut buf = vec![0u8; len as usize];
        assert!(
            victim.poll_read(&mut cx, &mut buf).is_pending(),
            "half a frame was delivered"
        );
        s.write_all(&payload[half..]).unwrap();
        let mut got = Vec::new();
        while got.len() < len as usize {
            pump_all();
            if let Poll::Ready(n) = victim.poll_read(&mut cx, &mut buf) {
                got.extend_from_slice(&buf[..n.unwrap()]);
            }
            assert!(
                Instant::now() < deadline + Duration::from_secs(10),
                "stalled"
            );
        }
        assert!(got == payload, "a {len}-byte frame resumed changed");
        seq += u64::from(len);
    }
}

/// A peer that grants a large window and then stops reading its channel must not hold a
/// writer that may not wait (an event loop's thread: the preload library and the proxy write
/// with `poll_write` and `async_inline_send`): each call returns at once, what the socket did
/// not take is queued for the channel's writer thread, and the writer is told to wait
/// (Pending) once the channel's queue is full.
#[test]
fn a_peer_that_stops_reading_never_holds_a_writer_that_may_not_wait() {
    use std::task::{Context, Poll, Waker};
    let _g = serial();
    let cfg = Config {
        window: 64 << 20,
        max_frame: 1 << 20,
        inline_send: true,
        async_inline_send: true,
        ..Config::default()
    };
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
    let addr = server.local_addr().unwrap();
    let l = server.bind(9).unwrap();
    let mut s = one_channel("127.0.0.1", addr, 79);
    s.write_all(&frame(FrameType::Open, 40000, 9, u32::MAX, 0, 0))
        .unwrap();
    let victim = l.accept_timeout(Duration::from_secs(5)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut cx = Context::from_waker(Waker::noop());
        let chunk = vec![7u8; 256 * 1024];
        let mut written = 0usize;
        let outcome = loop {
            match victim.poll_write(&mut cx, &chunk) {
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => break Err(e.to_string()),
                Poll::Pending => break Ok(written),
            }
            if written >= 64 << 20 {
                break Ok(written);
            }
        };
        let _ = tx.send(outcome);
        victim
    });
    let written = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a write that may not wait waited for a peer that does not read")
        .unwrap();
    // The peer reads nothing: the kernel holds a few MiB, the channel's queue its limit.
    assert!(written > 0 && written < 64 << 20, "{written} bytes taken");
    drop(s);
}

/// Issue 77, item 1: a peer filling every window it may lease with 1-byte DATA frames, in
/// order, the application reading none. Receive memory is charged by what it holds (small
/// pieces are coalesced into shared buffers), so the prefix's cap holds for what the process
/// really keeps, not just for payload bytes. (Before: each 1-byte frame was its own allocation
/// and queue entry, ~72 bytes a byte: +288 MiB for a 4 MiB cap.)
#[test]
fn one_byte_frames_stay_within_the_receive_memory_cap() {
    let _g = serial();
    let window = 1u32 << 20;
    let cap = 4u64 << 20;
    let server = Endpoint::listen(
        "127.0.0.1:0".parse().unwrap(),
        Config {
            window,
            max_frame: 64 * 1024,
            max_receive_memory_per_prefix: cap,
            max_receive_memory: cap,
            ..Config::default()
        },
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let l = server.bind(9).unwrap();
    let mut s = one_channel("127.0.0.1", addr, 80);
    // OPENs past the cap: the ones beyond it are reset.
    for port in 0..8u16 {
        s.write_all(&frame(FrameType::Open, 40000 + port, 9, 65536, 0, 0))
            .unwrap();
    }
    let mut open = Vec::new();
    let mut answers = 0;
    while answers < 8 {
        let (h, _) = read_frame(&mut s).unwrap();
        match h.kind {
            FrameType::OpenAck => open.push(h.dst_port),
            FrameType::Rst => {}
            _ => continue,
        }
        answers += 1;
    }
    assert!(!open.is_empty() && open.len() < 8, "{open:?} opened");
    let mut victims = Vec::new();
    for _ in &open {
        victims.push(l.accept_timeout(Duration::from_secs(5)).unwrap());
    }
    let before = rss();
    // A whole window of 1-byte frames on each socket the server took, and one byte past it.
    let mut frames = 0u64;
    for &port in &open {
        let mut buf = Vec::with_capacity(1 << 20);
        for seq in 0..=u64::from(window) {
            buf.extend(frame(FrameType::Data, port, 9, 0, seq, 1));
            buf.push(seq as u8);
            frames += 1;
            if buf.len() >= 1 << 20 {
                if let Err(e) = s.write_all(&buf) {
                    panic!("{e} after {frames} frames: {:?}", server.stats());
                }
                buf.clear();
            }
        }
        s.write_all(&buf).unwrap();
    }
    // Every frame handled (counted by the channel) before memory is read.
    let frames_in = |server: &Endpoint| -> u64 {
        server
            .stats()
            .sessions
            .iter()
            .map(|x| x.channels[0].frames_in)
            .sum()
    };
    let t = Instant::now();
    while frames_in(&server) < frames + 8 && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(frames_in(&server) >= frames + 8, "{:?}", server.stats());
    let grown = rss().saturating_sub(before);
    let stats = server.stats();
    eprintln!(
        "{} sockets filled with {frames} 1-byte frames: {} bytes held (charged), {} leased, \
         RSS +{} KiB",
        open.len(),
        stats.receive_memory_held,
        stats.receive_memory_leased,
        grown >> 10
    );
    // What the sockets hold, charged by allocation, is within what they leased, and that
    // within the cap.
    assert!(stats.receive_memory_leased <= cap, "{stats:?}");
    assert!(
        stats.receive_memory_held <= stats.receive_memory_leased,
        "{stats:?}"
    );
    assert!(
        stats.receive_memory_held >= open.len() as u64 * u64::from(window),
        "{stats:?}"
    );
    // The cap, plus what the test's own buffers and the allocator's slack may add.
    assert!(
        grown < cap + (12 << 20),
        "memory grew by {} MiB for a {} MiB cap",
        grown >> 20,
        cap >> 20
    );
    // The byte past each window reset its socket; the application is told why.
    for v in &victims {
        let mut b = vec![0u8; window as usize];
        let mut got = 0;
        let e = loop {
            match (&*v).read(&mut b) {
                Ok(0) => panic!("EOF instead of a reset"),
                Ok(n) => got += n,
                Err(e) => break e,
            }
        };
        assert!(got <= window as usize, "{got}");
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    }
}

/// Issue 77, item 3: 48 peers each send 16,000 DATA frames for no socket (just under the
/// per-channel `max_queued_control`) and read none of the RSTs. The channel's writer drains
/// the replies into the kernel's buffer, but the queue they passed through kept its grown
/// allocation: ~1 MiB on every such channel, ~1 GiB over `max_channels` — what a flood of
/// orphan DATA cost a server on many channels. A drained queue now gives it back. (Before:
/// +66 MiB for 48 channels; now ~18 MiB, mostly each channel's 256 KiB read buffer.)
#[test]
fn a_drained_reply_queue_gives_its_memory_back() {
    let _g = serial();
    let server = Endpoint::listen("127.0.0.1:0".parse().unwrap(), Config::default()).unwrap();
    let addr = server.local_addr().unwrap();
    let before = rss();
    let batch: Vec<u8> = frame(FrameType::Data, 5, 6, 0, 0, 0).repeat(16_000);
    let mut held = Vec::new();
    for k in 0..48u64 {
        let from = format!("127.20.{}.{}", k / 8, 1 + k % 8);
        let mut s = one_channel(&from, addr, 5000 + k);
        // A channel cut off meanwhile may refuse the rest: that is the point.
        let _ = s.write_all(&batch);
        held.push(s);
    }
    // Every channel read to its end or cut off.
    let settled = |server: &Endpoint| {
        server
            .stats()
            .sessions
            .iter()
            .all(|x| !x.channels[0].alive || x.channels[0].frames_in >= 16_000)
    };
    let t = Instant::now();
    while !settled(&server) && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(settled(&server), "{:?}", server.stats());
    let grown = rss().saturating_sub(before);
    let alive = server
        .stats()
        .sessions
        .iter()
        .filter(|x| x.channels[0].alive)
        .count();
    eprintln!(
        "48 channels x 16,000 unread replies: {alive} channels left, RSS +{} KiB",
        grown >> 10
    );
    assert!(grown < 32 << 20, "memory grew by {} MiB", grown >> 20);
    // The peers that read are still served.
    let client = Endpoint::new(Config::default()).unwrap();
    let l = server.bind(3).unwrap();
    let c = client.connect(addr, 3, SocketOptions::default()).unwrap();
    (&c).write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    (&l.accept().unwrap()).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok");
    drop(held);
}
