//! Proxy mode on loopback: half-close passes through both proxies in both directions, a
//! backend that is down and a connection over the cap reach the application as resets, and
//! an application's reset reaches the backend as one; each with its log line.
#![cfg(feature = "proxy")]

use netchannel::proxy::{Backend, Limits, Log, Proxy, Route};
use netchannel::{Class, Config, Endpoint};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Rig {
    client: Proxy,
    _server: Proxy,
    log: Arc<Mutex<Vec<String>>>,
}

impl Rig {
    fn addr(&self) -> SocketAddr {
        self.client.local_addrs()[0]
    }

    fn logged(&self, what: &str) -> bool {
        // The log line can come a moment after the TCP side saw the event.
        for _ in 0..100 {
            if self.log.lock().unwrap().iter().any(|l| l.contains(what)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn rig(backend: SocketAddr, max_connections: usize) -> Rig {
    rig_with(backend, max_connections, Config::default())
}

/// Run to completion, as `netsteer netchannel proxy` runs: the runtime's tasks read the
/// channels. The standbys wait a minute before they step in, so a proxy whose runtime did
/// not drive would stall (the server proxy would not see the OPEN before the connect
/// timeout) rather than pass on its standbys' reads.
fn driven() -> Config {
    Config {
        app_driven: true,
        standby_after: Duration::from_secs(60),
        inline_send: true,
        async_inline_send: true,
        ..Config::default()
    }
}

fn rig_with(backend: SocketAddr, max_connections: usize, cfg: Config) -> Rig {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let to_log: Log = Arc::new(move |l: &str| sink.lock().unwrap().push(l.to_string()));
    let limits = Limits {
        max_connections,
        verbose: true,
        ..Limits::default()
    };
    let server_ep =
        Arc::new(Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg.clone()).unwrap());
    let peer = server_ep.local_addr().unwrap();
    let server = Proxy::server(
        server_ep,
        &[Backend { port: 80, backend }],
        limits.clone(),
        to_log.clone(),
    )
    .unwrap();
    let client_ep = Arc::new(Endpoint::new(cfg).unwrap());
    let client = Proxy::client(
        client_ep,
        peer,
        &[Route {
            listen: "127.0.0.1:0".parse().unwrap(),
            port: 80,
            class: Class::Throughput,
        }],
        limits,
        to_log,
    )
    .unwrap();
    Rig {
        client,
        _server: server,
        log,
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn half_close_passes_through_both_ways() {
    half_close(Config::default());
}

#[test]
fn half_close_passes_through_both_ways_run_to_completion() {
    half_close(driven());
}

fn half_close(cfg: Config) {
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let rig = rig_with(backend.local_addr().unwrap(), 16, cfg);
    let mut app = connect(rig.addr());
    let server = std::thread::spawn(move || {
        let (mut b, _) = backend.accept().unwrap();
        let mut req = Vec::new();
        // EOF here means the application's half-close came through.
        b.read_to_end(&mut req).unwrap();
        b.write_all(&req.iter().rev().copied().collect::<Vec<u8>>())
            .unwrap();
        b.shutdown(Shutdown::Write).unwrap();
    });
    let request: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    app.write_all(&request).unwrap();
    app.shutdown(Shutdown::Write).unwrap();
    let mut reply = Vec::new();
    app.read_to_end(&mut reply).unwrap();
    server.join().unwrap();
    assert_eq!(reply, request.iter().rev().copied().collect::<Vec<u8>>());
    let st = rig.client.stats();
    assert_eq!((st.bytes_in, st.bytes_out), (300_000, 300_000));
    assert!(
        rig.logged("closed, 300000 bytes in, 300000 out"),
        "{:?}",
        rig.log.lock().unwrap()
    );
}

#[test]
fn a_backend_that_is_down_resets_the_application() {
    // A port nobody listens on: bind, note it, close.
    let gone = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let rig = rig(gone, 16);
    let mut app = connect(rig.addr());
    let _ = app.write_all(b"PING\r\n");
    let mut buf = [0u8; 16];
    let err = app
        .read(&mut buf)
        .expect_err("the connection is reset, not closed");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    assert!(rig.logged("backend down"), "{:?}", rig.log.lock().unwrap());
}

#[test]
fn an_application_reset_reaches_the_backend() {
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let rig = rig(backend.local_addr().unwrap(), 16);
    let app = connect(rig.addr());
    (&app).write_all(b"hello").unwrap();
    let (mut b, _) = backend.accept().unwrap();
    b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = [0u8; 5];
    b.read_exact(&mut got).unwrap();
    // SO_LINGER 0 then close: the application resets its connection.
    netsteer_sock::opt::set_linger_zero(std::os::fd::AsFd::as_fd(&app)).unwrap();
    drop(app);
    let mut rest = [0u8; 8];
    let err = b.read(&mut rest).expect_err("reset, not EOF");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    assert!(
        rig.logged("TCP side failed"),
        "{:?}",
        rig.log.lock().unwrap()
    );
    assert_eq!(rig.client.stats().tcp_resets, 1);
}

#[test]
fn a_connection_over_the_cap_is_reset_and_the_others_go_on() {
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let rig = rig(backend.local_addr().unwrap(), 1);
    let mut first = connect(rig.addr());
    first.write_all(b"a").unwrap();
    let (mut b, _) = backend.accept().unwrap();
    let mut one = [0u8; 1];
    b.read_exact(&mut one).unwrap();
    let mut second = connect(rig.addr());
    let mut buf = [0u8; 1];
    let err = second.read(&mut buf).expect_err("over the cap");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    assert!(rig.logged("(the cap)"), "{:?}", rig.log.lock().unwrap());
    // The first is untouched.
    b.write_all(b"z").unwrap();
    first.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"z");
    assert_eq!(rig.client.stats().over_cap, 1);
}

#[test]
fn a_slow_application_backs_the_sink_up_and_loses_nothing() {
    slow_application(Config::default());
}

#[test]
fn a_slow_application_backs_the_sink_up_and_loses_nothing_run_to_completion() {
    slow_application(driven());
}

fn slow_application(cfg: Config) {
    // The backend sends 32 MiB at once; the application sleeps before reading, so the
    // proxy's writes into its connection hit a full buffer many times (and the virtual
    // socket's window holds the sender back), and every byte must still arrive in order.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let rig = rig_with(backend.local_addr().unwrap(), 16, cfg);
    let mut app = connect(rig.addr());
    app.write_all(b"go").unwrap();
    let total = 32usize << 20;
    let server = std::thread::spawn(move || {
        let (mut b, _) = backend.accept().unwrap();
        let mut go = [0u8; 2];
        b.read_exact(&mut go).unwrap();
        let data: Vec<u8> = (0..total).map(|i| (i % 253) as u8).collect();
        b.write_all(&data).unwrap();
        b.shutdown(Shutdown::Write).unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::with_capacity(total);
    let mut buf = vec![0u8; 4096];
    let mut reads = 0u64;
    loop {
        let n = app.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        reads += 1;
        if reads.is_multiple_of(512) {
            // Pause now and then so the buffer fills again.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    server.join().unwrap();
    assert_eq!(got.len(), total);
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8));
    // The connection's counts land when it closes.
    app.shutdown(Shutdown::Write).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rig.client.stats().bytes_out < total as u64 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(rig.client.stats().bytes_out, total as u64);
}

/// Issue 35 item 4: one peer endpoint address opening 120 virtual sockets gets at most
/// `max_per_peer` backend connections; the rest are refused (RST Refused) and a client from
/// another address is still served. (Before: one session took every place of the cap and
/// legitimate clients were reset.)
#[test]
fn one_peer_cannot_take_every_place_of_the_server_cap() {
    peer_cap(Config::default());
}

/// The same hostile peer against a server proxy whose runtime reads the channels.
#[test]
fn one_peer_cannot_take_every_place_of_the_server_cap_run_to_completion() {
    peer_cap(driven());
}

fn peer_cap(cfg: Config) {
    use netchannel::wire::{FrameType, HEADER_LEN, Header, Hello};
    // The endpoint's own bound on one session's sockets (session_memory / receive share)
    // is kept out of the way: this is the proxy's per-peer cap.
    let cfg = Config {
        session_memory: 128 * cfg.receive_share(),
        ..cfg
    };
    use socket2::{Domain, SockAddr, Socket, Type};
    // An echo backend.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend_addr = backend.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in backend.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut r = c.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut c);
            });
        }
    });
    let log: Log = Arc::new(|_: &str| {});
    let limits = Limits {
        max_connections: 64,
        max_per_peer: 16,
        ..Limits::default()
    };
    let server_ep =
        Arc::new(Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg.clone()).unwrap());
    let peer = server_ep.local_addr().unwrap();
    let server = Proxy::server(
        server_ep,
        &[Backend {
            port: 80,
            backend: backend_addr,
        }],
        limits.clone(),
        log.clone(),
    )
    .unwrap();
    // The hostile peer: a one-channel session from 127.0.0.2 and 120 OPENs, its replies
    // read (so it is not cut off for leaving them unread).
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&SockAddr::from(
        "127.0.0.2:0".parse::<SocketAddr>().unwrap(),
    ))
    .unwrap();
    s.connect(&SockAddr::from(peer)).unwrap();
    let mut s: TcpStream = s.into();
    let hello = Hello {
        version: u16::from(netchannel::wire::VERSION),
        link_id: 4242,
        channel_index: 0,
        class: Class::Throughput,
        throughput_channels: 1,
        latency_channels: 0,
        max_frame: 65536,
    };
    s.write_all(&hello.encode()).unwrap();
    let mut answer = [0u8; HEADER_LEN + 32];
    s.read_exact(&mut answer).unwrap();
    let mut drain = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while matches!(drain.read(&mut buf), Ok(n) if n > 0) {}
    });
    for k in 0..120u16 {
        let open = Header::control(FrameType::Open, 40000 + k, 80, 65536, 0);
        s.write_all(&open.encode()).unwrap();
    }
    let t = std::time::Instant::now();
    while server.stats().accepted < 120 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = server.stats();
    assert_eq!(st.accepted, 120, "{st:?}");
    assert!(st.active <= 16, "{st:?}");
    assert_eq!(st.over_peer_cap, 120 - st.active, "{st:?}");
    // And a frame it never finishes: a DATA header announcing 32 KiB, then 100 bytes. The
    // server's reader keeps what came and goes on when the rest comes, holding nobody (with
    // run to completion the runtime's one thread reads this channel): the client below
    // must still be served.
    let data = Header {
        kind: FrameType::Data,
        flags: 0,
        src_port: 40000,
        dst_port: 80,
        len: 32 << 10,
        credit: 0,
        seq: 0,
    };
    s.write_all(&data.encode()).unwrap();
    s.write_all(&[7u8; 100]).unwrap();
    // A client proxy from 127.0.0.1 is served: 8 connections echo.
    let client = Proxy::client(
        Arc::new(Endpoint::new(cfg).unwrap()),
        peer,
        &[Route {
            listen: "127.0.0.1:0".parse().unwrap(),
            port: 80,
            class: Class::Throughput,
        }],
        limits,
        log,
    )
    .unwrap();
    let conns: Vec<TcpStream> = (0..8).map(|_| connect(client.local_addrs()[0])).collect();
    for (i, mut c) in conns.iter().enumerate() {
        let msg = format!("hello {i}");
        c.write_all(msg.as_bytes()).unwrap();
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got).unwrap();
        assert_eq!(got, msg.as_bytes());
    }
    drop(s);
}

/// A stopping proxy drains: new connections are reset while an open one goes on to its end,
/// and the drain returns as soon as the last one closed (or says how many are left).
#[test]
fn a_drain_refuses_new_connections_and_waits_for_the_open_ones() {
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let rig = rig(backend.local_addr().unwrap(), 16);
    let mut app = connect(rig.addr());
    app.write_all(b"ping").unwrap();
    let (mut b, _) = backend.accept().unwrap();
    b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = [0u8; 4];
    b.read_exact(&mut got).unwrap();
    // Still open when the deadline comes: the drain says so.
    assert_eq!(rig.client.drain(Duration::from_millis(200)), 1);
    // A new connection during the drain is reset, naming why.
    let mut late = connect(rig.addr());
    let mut buf = [0u8; 1];
    let err = late.read(&mut buf).expect_err("refused while draining");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    assert!(
        rig.logged("the proxy is stopping"),
        "{:?}",
        rig.log.lock().unwrap()
    );
    // The open one is untouched and closes normally; then the drain ends at once.
    b.write_all(b"pong").unwrap();
    app.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"pong");
    app.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    b.read_to_end(&mut rest).unwrap();
    drop(b);
    app.read_to_end(&mut rest).unwrap();
    assert_eq!(rig.client.drain(Duration::from_secs(10)), 0);
}

/// Issue 77, item 3: a flood of DATA frames for sockets the proxy server does not have (no
/// socket, a socket its application closed, any offset up to the largest), from a peer that
/// never reads the replies, four times over: each flood costs only its own channel (cut off
/// at `max_queued_control`), and the server still proxies a real connection.
#[test]
fn orphan_data_floods_leave_the_proxy_server_serving() {
    use netchannel::wire::{FrameType, HEADER_LEN, Header, Hello};
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend_addr = backend.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in backend.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut r = c.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut c);
            });
        }
    });
    // As `netsteer netchannel proxy server` sets it up.
    let cfg = Config {
        app_driven: true,
        inline_send: true,
        async_inline_send: true,
        ..Config::default()
    };
    let log: Log = Arc::new(|_: &str| {});
    let server_ep =
        Arc::new(Endpoint::listen("127.0.0.1:0".parse().unwrap(), cfg.clone()).unwrap());
    let peer = server_ep.local_addr().unwrap();
    let _server = Proxy::server(
        server_ep.clone(),
        &[Backend {
            port: 80,
            backend: backend_addr,
        }],
        Limits::default(),
        log.clone(),
    )
    .unwrap();
    for round in 0..4u64 {
        let mut s = TcpStream::connect(peer).unwrap();
        let hello = Hello {
            version: u16::from(netchannel::wire::VERSION),
            link_id: 7700 + round,
            channel_index: 0,
            class: Class::Throughput,
            throughput_channels: 1,
            latency_channels: 0,
            max_frame: 65536,
        };
        s.write_all(&hello.encode()).unwrap();
        let mut answer = [0u8; HEADER_LEN + 32];
        s.read_exact(&mut answer).unwrap();
        // A socket that exists and is then closed by its backend's side: OPEN port 80,
        // FIN, so the server's side ends and lingers or goes.
        s.write_all(&Header::control(FrameType::Open, 40000, 80, 65536, 0).encode())
            .unwrap();
        s.write_all(&Header::control(FrameType::Fin, 40000, 80, 0, 0).encode())
            .unwrap();
        let mut batch = Vec::new();
        let mut k = 0u64;
        for (i, seq) in [0, 1, 1 << 40, u64::MAX - 3, u64::MAX].iter().enumerate() {
            for len in [0u32, 1, 100, 40_000] {
                for src in [40000u16, 40001, 65535] {
                    let mut h = Header::control(FrameType::Data, src, 80 + i as u16 % 2, 0, *seq);
                    h.len = len;
                    batch.extend(h.encode());
                    batch.extend(std::iter::repeat_n(k as u8, len as usize));
                    k += 1;
                }
            }
        }
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut written = 0u64;
        while written < 64 << 20 {
            if s.write_all(&batch).is_err() {
                break;
            }
            written += batch.len() as u64;
        }
        drop(s);
    }
    // The server still proxies.
    let client_ep = Arc::new(Endpoint::new(cfg).unwrap());
    let client = Proxy::client(
        client_ep,
        peer,
        &[Route {
            listen: "127.0.0.1:0".parse().unwrap(),
            port: 80,
            class: Class::Throughput,
        }],
        Limits::default(),
        log,
    )
    .unwrap();
    let mut app = connect(client.local_addrs()[0]);
    app.write_all(b"still here").unwrap();
    let mut got = [0u8; 10];
    app.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still here");
}
