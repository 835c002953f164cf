//! The UDP echo benchmark end to end on loopback, through the library: exact accounting,
//! percentile ordering, IPv6, timestamps, misbehaving echo servers, a dead server, and a server
//! under malformed, empty and oversized datagrams from many sockets at once.

use netsteer_bench::udp_echo::client::{ClientConfig, run_client};
use netsteer_bench::udp_echo::limit::Limits;
use netsteer_bench::udp_echo::message::{ClientInterval, ClientSummary, ServerSummary};
use netsteer_bench::udp_echo::server::{Server, ServerConfig};
use netsteer_bench::udp_echo::{BenchError, Wait};
use netsteer_bench::waiter::Busy;
use netsteer_experiment::clock::{Clock, MonotonicClock};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

fn clock() -> Arc<dyn Clock> {
    Arc::new(MonotonicClock::default())
}

struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<ServerSummary>,
}

impl Running {
    fn finish(self) -> ServerSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

fn server(listen: &str, threads: usize, wait: Wait) -> Running {
    limited_server(listen, threads, wait, Limits::default())
}

fn limited_server(listen: &str, threads: usize, wait: Wait, limits: Limits) -> Running {
    let cfg = ServerConfig {
        listen: listen.parse().unwrap(),
        threads,
        cpus: vec![],
        wait,
        busy: Busy {
            usecs: 50,
            ..Busy::default()
        },
        interval: Duration::from_millis(100),
        duration: None,
        limits,
        xdp: None,
    };
    let s = Server::bind(&cfg).unwrap();
    let addr = s.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let handle = thread::spawn(move || s.run(st, clock(), |_| Ok(())).unwrap());
    Running { addr, stop, handle }
}

fn client_cfg(target: SocketAddr) -> ClientConfig {
    ClientConfig {
        targets: vec![target],
        size: 32,
        duration: None,
        count: Some(2000),
        interval: Duration::from_millis(50),
        warmup: Duration::ZERO,
        wait: Wait::Block,
        busy: Busy {
            usecs: 50,
            ..Busy::default()
        },
        rate: None,
        cpus: vec![],
        src_port: None,
        flows: 1,
        timeout: Duration::from_secs(1),
        timestamp: false,
        xdp: None,
    }
}

fn run(cfg: &ClientConfig) -> (Vec<ClientInterval>, Vec<ClientSummary>) {
    let mut intervals = Vec::new();
    let summaries = run_client(cfg, clock(), |m| {
        intervals.push(m.clone());
        Ok(())
    })
    .unwrap();
    (intervals, summaries)
}

fn check_clean(s: &ClientSummary, expect: u64) {
    assert_eq!((s.sent, s.received, s.lost), (expect, expect, 0), "{s:#?}");
    assert_eq!(
        (s.duplicated, s.reordered, s.corrupted, s.send_errors),
        (0, 0, 0, 0)
    );
    let l = s.latency_ns.unwrap();
    assert!(
        l.min > 0
            && l.min <= l.p50
            && l.p50 <= l.p90
            && l.p90 <= l.p99
            && l.p99 <= l.p999
            && l.p999 <= l.max,
        "{l:?}"
    );
    assert!(l.min <= l.mean && l.mean <= l.max);
}

#[test]
fn loopback_two_flows_nothing_lost_and_intervals_add_up() {
    let srv = server("127.0.0.1:0", 2, Wait::Block);
    let mut cfg = client_cfg(srv.addr);
    cfg.flows = 2;
    let (intervals, summaries) = run(&cfg);
    assert_eq!(summaries.len(), 1);
    check_clean(&summaries[0], 4000);
    // Every round trip is in exactly one interval line (or the totals' final carry-over).
    let sent: u64 = intervals.iter().map(|i| i.sent).sum();
    assert_eq!(sent, 4000);
    assert!(intervals.windows(2).all(|w| w[0].t_s < w[1].t_s));
    assert!(!summaries[0].incoming_cpus.is_empty());
    let spread = summaries[0].interval_p50_ns.unwrap();
    assert!(spread.min <= spread.median && spread.median <= spread.max);
    let served = srv.finish();
    assert_eq!(served.echoed, 4000);
    assert_eq!(served.bytes, 4000 * 32);
}

#[test]
fn ipv6_spin_and_fixed_source_ports() {
    let srv = server("[::1]:0", 1, Wait::Spin);
    let mut cfg = client_cfg(srv.addr);
    cfg.wait = Wait::Spin;
    cfg.count = Some(3000);
    cfg.flows = 2;
    let probe = UdpSocket::bind("[::1]:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    cfg.src_port = Some(port);
    let (_, summaries) = run(&cfg);
    check_clean(&summaries[0], 6000);
    assert_eq!(summaries[0].target, srv.addr.to_string());
    srv.finish();
}

#[test]
fn timestamps_split_the_round_trip() {
    let srv = server("127.0.0.1:0", 1, Wait::Block);
    let mut cfg = client_cfg(srv.addr);
    cfg.timestamp = true;
    // The first timestamping socket enables the kernel's stamping from a work item.
    cfg.warmup = Duration::from_millis(200);
    cfg.count = None;
    cfg.duration = Some(Duration::from_millis(500));
    let (intervals, summaries) = run(&cfg);
    let s = &summaries[0];
    let rx = s.rx_delivery_ns.expect("kernel RX stamps");
    let tx = s.tx_send_ns.expect("kernel TX stamps");
    let rtt = s.latency_ns.unwrap();
    assert!(
        rx.p50 < rtt.p50 && tx.p50 < rtt.p50,
        "{rx:?} {tx:?} {rtt:?}"
    );
    assert_eq!(s.hardware_timestamps, Some(false));
    assert!(s.notes.iter().any(|n| n.contains("no hardware timestamps")));
    assert!(intervals.iter().all(|i| i.rx_delivery_ns.is_some()));
    srv.finish();
}

/// An echo server that misbehaves on purpose: it duplicates, corrupts, holds back or drops
/// some echoes, so the client must count each kind.
/// A peer on loopback that hands every datagram it gets to `answer` until its flag is set.
fn peer(
    mut answer: impl FnMut(&UdpSocket, Vec<u8>, SocketAddr) + Send + 'static,
) -> (SocketAddr, Arc<AtomicBool>, JoinHandle<()>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let addr = sock.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let h = thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !st.load(Ordering::Relaxed) {
            if let Ok((len, from)) = sock.recv_from(&mut buf) {
                answer(&sock, buf[..len].to_vec(), from);
            }
        }
    });
    (addr, stop, h)
}

fn rogue_server() -> (SocketAddr, Arc<AtomicBool>, JoinHandle<()>) {
    let mut n = 0u64;
    let mut held: Option<(Vec<u8>, SocketAddr)> = None;
    peer(move |sock, d, from| {
        n += 1;
        match n % 10 {
            // Duplicate.
            1 => {
                sock.send_to(&d, from).unwrap();
                sock.send_to(&d, from).unwrap();
            }
            // Corrupt one byte (this datagram's real echo never comes: lost too).
            3 => {
                let mut bad = d.clone();
                bad[20] ^= 0xff;
                sock.send_to(&bad, from).unwrap();
            }
            // Hold back: sent after the next datagram's echo (late, out of order).
            5 => held = Some((d, from)),
            6 => {
                sock.send_to(&d, from).unwrap();
                if let Some((h, to)) = held.take() {
                    sock.send_to(&h, to).unwrap();
                }
            }
            // Drop.
            8 => {}
            _ => {
                sock.send_to(&d, from).unwrap();
            }
        }
    })
}

#[test]
fn duplicates_corruption_late_and_lost_echoes_are_told_apart() {
    let (addr, stop, h) = rogue_server();
    let mut cfg = client_cfg(addr);
    cfg.count = Some(100);
    cfg.timeout = Duration::from_millis(30);
    let (_, summaries) = run(&cfg);
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
    let s = &summaries[0];
    // Per 10 datagrams: #1 duplicated, #3 corrupted (and lost), #5 late (lost, then
    // reordered), #8 dropped (lost).
    assert_eq!(s.sent, 100);
    assert_eq!(s.duplicated, 10, "{s:#?}");
    assert_eq!(s.corrupted, 10);
    assert_eq!(s.reordered, 10);
    assert_eq!(s.lost, 30);
    assert_eq!(s.received, 70);
}

/// A peer that sends, before each true echo, a forgery of it (the same flow and sequence, a
/// send time off by one, a checksum that fits): the forgeries are corrupt, the true echoes
/// received. Marking the sequence seen before checking the send time counted every true echo
/// as the forgery's duplicate, and the client gave up for want of echoes.
#[test]
fn a_forged_echo_ahead_of_the_true_one_is_corrupt_and_the_true_one_counts() {
    use netsteer_bench::udp_echo::payload::{self, Header};
    let (addr, stop, h) = peer(|sock, d, from| {
        let real = payload::decode(&d, d.len()).expect("the client's own datagram");
        let mut forged = d.clone();
        payload::encode(
            &mut forged,
            Header {
                send_ns: real.send_ns ^ 1,
                ..real
            },
        );
        sock.send_to(&forged, from).unwrap();
        sock.send_to(&d, from).unwrap();
    });
    let mut cfg = client_cfg(addr);
    cfg.count = Some(100);
    let (_, summaries) = run(&cfg);
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
    let s = &summaries[0];
    assert_eq!((s.sent, s.received, s.lost), (100, 100, 0), "{s:#?}");
    assert_eq!((s.corrupted, s.duplicated), (100, 0), "{s:#?}");
}

#[test]
fn a_dead_server_ends_in_an_error_not_a_hang() {
    // Nothing listens: ICMP port unreachable comes back at once.
    let free = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut cfg = client_cfg(free);
    cfg.timeout = Duration::from_millis(100);
    let t = std::time::Instant::now();
    let err = run_client(&cfg, clock(), |_| Ok(())).unwrap_err();
    assert!(
        matches!(&err, BenchError::NoEcho { hint, .. } if hint.contains("nothing listens")),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(15));
    // Something listens but never answers: three timeouts.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    cfg.targets = vec![silent.local_addr().unwrap()];
    let t = std::time::Instant::now();
    let err = run_client(&cfg, clock(), |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("no echo from"), "{err}");
    assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(15));
}

#[test]
fn bad_configuration_is_refused_by_name() {
    let mut cfg = client_cfg("127.0.0.1:9".parse().unwrap());
    cfg.size = 8;
    assert!(
        run_client(&cfg, clock(), |_| Ok(()))
            .unwrap_err()
            .to_string()
            .contains("--size 8")
    );
    cfg.size = 32;
    cfg.flows = 0;
    assert!(
        run_client(&cfg, clock(), |_| Ok(()))
            .unwrap_err()
            .to_string()
            .contains("--flows")
    );
}

#[test]
fn server_echoes_malformed_empty_and_oversized_datagrams_from_many_sockets() {
    let srv = server("127.0.0.1:0", 2, Wait::Block);
    let senders: Vec<JoinHandle<u64>> = (0..32)
        .map(|i| {
            let to = srv.addr;
            thread::spawn(move || {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut buf = vec![0u8; 65536];
                let mut bytes = 0u64;
                // Raw bytes of every shape: empty, one byte, garbage, the largest datagram.
                for (k, len) in [0usize, 1, 13, 28, 1500, 9000, 65507]
                    .into_iter()
                    .enumerate()
                {
                    let d: Vec<u8> = (0..len).map(|j| (i * 31 + k * 7 + j) as u8).collect();
                    s.send_to(&d, to).unwrap();
                    let (n, from) = s.recv_from(&mut buf).expect("an echo for every datagram");
                    assert_eq!(from, to);
                    assert_eq!(
                        &buf[..n],
                        &d[..],
                        "socket {i}: {len}-byte datagram not echoed verbatim"
                    );
                    bytes += len as u64;
                }
                bytes
            })
        })
        .collect();
    let bytes: u64 = senders.into_iter().map(|h| h.join().unwrap()).sum();
    // Still serving a normal client afterwards.
    let (_, summaries) = run(&{
        let mut c = client_cfg(srv.addr);
        c.count = Some(200);
        c
    });
    check_clean(&summaries[0], 200);
    let s = srv.finish();
    assert_eq!(s.received, 32 * 7 + 200);
    assert_eq!(s.echoed, s.received);
    assert_eq!(s.empty, 32);
    assert_eq!(s.bytes, bytes + 200 * 32);
    assert_eq!((s.truncated, s.send_errors), (0, 0));
}

#[test]
fn server_drains_a_burst_from_many_sockets_at_once() {
    let srv = server("127.0.0.1:0", 1, Wait::Block);
    let socks: Vec<UdpSocket> = (0..64)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for round in 0..50u32 {
        for s in &socks {
            s.send_to(&round.to_le_bytes(), srv.addr).unwrap();
        }
    }
    let mut buf = [0u8; 16];
    for s in &socks {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut got = 0;
        while let Ok(n) = s.recv(&mut buf) {
            assert_eq!(n, 4);
            got += 1;
            if got == 50 {
                break;
            }
        }
        assert_eq!(got, 50, "every datagram of the burst comes back");
    }
    let s = srv.finish();
    assert_eq!(s.echoed, 64 * 50);
}

/// Hardening item 4: answers are rate-limited per source address (and in all), so the echo
/// server cannot be aimed at a third party; what was not answered is counted.
#[test]
fn rate_limits_cap_answers_per_source_and_count_the_rest() {
    let srv = limited_server(
        "127.0.0.1:0",
        1,
        Wait::Block,
        Limits {
            per_source: Some(50),
            global: None,
        },
    );
    let flood = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let other = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    let t0 = std::time::Instant::now();
    for i in 0..500u32 {
        flood.send_to(&i.to_be_bytes(), srv.addr).unwrap();
    }
    // Another source still gets its answers while the first is over its limit.
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for i in 0..5u32 {
        other.send_to(&i.to_be_bytes(), srv.addr).unwrap();
        let mut b = [0u8; 16];
        let (n, _) = other.recv_from(&mut b).unwrap();
        assert_eq!(&b[..n], &i.to_be_bytes());
    }
    flood.set_nonblocking(true).unwrap();
    let mut answered = 0u64;
    let mut b = [0u8; 16];
    let until = std::time::Instant::now() + Duration::from_millis(300);
    while std::time::Instant::now() < until {
        match flood.recv_from(&mut b) {
            Ok(_) => answered += 1,
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
    let s = srv.finish();
    let elapsed = t0.elapsed().as_secs_f64();
    // Never more than the bucket allows over the time that actually passed.
    let bound = 32 + (50.0 * elapsed).ceil() as u64;
    assert!(
        answered <= bound,
        "{answered} answers > {bound} ({elapsed:.2} s)"
    );
    assert!(answered >= 32, "the burst is answered: {answered}");
    assert_eq!(s.received, 505, "{s:?}");
    assert_eq!(
        s.echoed + s.rate_limited + s.send_errors,
        s.received,
        "{s:?}"
    );
    assert_eq!(s.send_errors, 0, "{s:?}");
    assert!(s.rate_limited >= 500 - bound, "{s:?}");
    assert_eq!(s.limit_per_source_pps, Some(50));
}

/// The epoll modes echo everything (epoll-busy with its per-context busy polling where the
/// kernel has it, 6.9+, and a clear error where it does not); the server reports its wait mode
/// and the CPU time it used; a paced client never sends faster than its rate.
#[test]
fn epoll_modes_cpu_accounting_and_a_paced_client() {
    for wait in [Wait::Epoll, Wait::EpollBusy] {
        let cfg = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            threads: 1,
            cpus: vec![],
            wait,
            busy: Busy {
                usecs: 20,
                budget: 16,
                prefer: true,
            },
            interval: Duration::from_millis(100),
            duration: None,
            limits: Limits::default(),
            xdp: None,
        };
        let s = Server::bind(&cfg).unwrap();
        let addr = s.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let handle = thread::spawn(move || s.run(st, clock(), |_| Ok(())));
        let mut c = client_cfg(addr);
        c.wait = wait;
        c.count = Some(500);
        c.busy.prefer = true;
        let client = run_client(&c, clock(), |_| Ok(()));
        stop.store(true, Ordering::Relaxed);
        let served = handle.join().unwrap();
        match (client, served) {
            (Ok(summaries), Ok(served)) => {
                check_clean(&summaries[0], 500);
                assert_eq!(summaries[0].wait, wait.to_string());
                assert_eq!(served.echoed, 500);
                assert_eq!(served.wait, wait.to_string());
                assert!(served.cpu_us > 0 && served.cpu_us_per_echo().is_some());
            }
            (c, s) => {
                let e = format!("{:?} {:?}", c.err(), s.err());
                assert!(
                    wait == Wait::EpollBusy && e.contains("needs Linux 6.9+"),
                    "{wait}: {e}"
                );
            }
        }
    }

    let srv = server("127.0.0.1:0", 1, Wait::Block);
    let mut c = client_cfg(srv.addr);
    c.count = None;
    c.duration = Some(Duration::from_millis(500));
    c.rate = Some(200);
    let (_, summaries) = run(&c);
    // At most one send per 5 ms over 0.5 s (the first goes at once).
    let sent = summaries[0].sent;
    assert!(
        (1..=101).contains(&sent),
        "{sent} sends at 200/s over 0.5 s"
    );
    c.rate = Some(0);
    assert!(run_client(&c, clock(), |_| Ok(())).is_err());
    srv.finish();
}
