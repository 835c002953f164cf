//! NetChannel across the lab's link: two network namespaces joined by a veth, with packet loss
//! on the path (netem where the kernel has it; otherwise a token bucket with a tiny queue, which
//! drops by overflow), and data verified end to end. Needs root; skipped (with a message)
//! otherwise, a failure under CI=true. It lives with the lab, which builds on netchannel through
//! bench, so that netchannel's own tests never depend on the lab (no crate cycle, even a
//! test-only one); the stream helpers are netchannel's tests' own, included by path.

#[path = "../../netchannel/tests/common/mod.rs"]
mod common;

use common::*;
use netchannel::{Config, Endpoint, Policy, SocketOptions, VListener, VSocket};
use netsteer_lab::is_root;
use netsteer_lab::pair::SERVER_ADDR;
use netsteer_lab::{NsHost, Pair, PairSpec};
use std::thread;
use std::time::Duration;

/// Two lab hosts (the lab's namespaces, cleaned up even if the test panics) and the impairment
/// on their link.
struct Lab {
    a: NsHost,
    b: NsHost,
    _pair: Pair,
}

impl Lab {
    fn new() -> Lab {
        let pair = Pair::new("ncloss", &PairSpec::default()).unwrap();
        Lab {
            a: pair.client.clone(),
            b: pair.server.clone(),
            _pair: pair,
        }
    }

    /// Puts loss (and reordering, with netem) on both directions; returns what was used.
    fn impair(&self) -> &'static str {
        let netem = |h: &NsHost, dev: &str| {
            h.exec(&[
                "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms", "500us", "loss",
                "1%", "reorder", "10%",
            ])
            .is_ok()
        };
        if netem(&self.a, "v0a") && netem(&self.b, "v0b") {
            return "netem";
        }
        // No netem in this kernel: a 300 Mbit/s bucket with a 20 KB queue drops whatever
        // overflows it, so TCP loses and retransmits segments on every channel.
        for (h, dev) in [(&self.a, "v0a"), (&self.b, "v0b")] {
            h.exec(&[
                "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", "300mbit", "burst",
                "16kb", "limit", "20kb",
            ])
            .unwrap();
        }
        "tbf"
    }

    /// A listening endpoint in B with `port` bound, and an endpoint in A with one socket
    /// open to it. Channels are TCP sockets opened by the thread that first connects, so that
    /// happens inside A; later sockets reuse the session from any thread.
    fn endpoints(&self, cfg: Config, port: u16) -> (Endpoint, VListener, Endpoint, VSocket) {
        let (na, nb) = (
            std::path::PathBuf::from(self.a.path()),
            std::path::PathBuf::from(self.b.path()),
        );
        let server_cfg = cfg.clone();
        let server = netsteer_sock::netns::spawn(Some(nb), vec![], move || {
            Endpoint::listen(format!("{SERVER_ADDR}:0").parse().unwrap(), server_cfg).unwrap()
        })
        .join()
        .unwrap()
        .unwrap();
        let addr = server.local_addr().unwrap();
        let listener = server.bind(port).unwrap();
        let (client, first) = netsteer_sock::netns::spawn(Some(na), vec![], move || {
            let c = Endpoint::new(cfg).unwrap();
            let s = c.connect(addr, port, SocketOptions::default()).unwrap();
            (c, s)
        })
        .join()
        .unwrap()
        .unwrap();
        (server, listener, client, first)
    }

    fn drops(&self) -> u64 {
        let o = self
            .a
            .exec(&["tc", "-s", "qdisc", "show", "dev", "v0a"])
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        text.split("dropped ")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

#[test]
fn streams_survive_loss_and_reordering_across_a_veth() {
    if !is_root() {
        common::cannot_run("needs root for namespaces");
        return;
    }
    let lab = Lab::new();
    let how = lab.impair();
    let cfg = Config {
        throughput_channels: 4,
        policy: Policy::RoundRobin {
            stick_bytes: 64 * 1024,
        },
        ..Config::default()
    };
    let (server, listener, client, first) = lab.endpoints(cfg, 7);
    let addr = server.local_addr().unwrap();
    let total = 24u64 << 20;
    let mut writers = Vec::new();
    let mut first = Some(first);
    for k in 0..2u64 {
        let s = match first.take() {
            Some(s) => s,
            None => client.connect(addr, 7, SocketOptions::default()).unwrap(),
        };
        writers.push(thread::spawn(move || {
            send_stream(&s, 40 + k, total).unwrap();
            s.shutdown_write().unwrap();
            s.wait_acknowledged(Duration::from_secs(60)).unwrap();
            s
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..2 {
        let s = listener.accept_timeout(Duration::from_secs(10)).unwrap();
        readers.push(thread::spawn(move || {
            let seed = 40 + u64::from(s.peer_port() - 32768);
            recv_stream(&s, seed).map_err(|(_, e)| e).unwrap()
        }));
    }
    for r in readers {
        assert_eq!(r.join().unwrap(), total);
    }
    for w in writers {
        drop(w.join().unwrap());
    }
    let st = server.stats();
    let ooo: u64 = st.sessions.iter().map(|s| s.out_of_order_frames).sum();
    eprintln!(
        "impairment {how}: qdisc drops {}, frames reordered across channels {ooo}",
        lab.drops()
    );
    assert!(lab.drops() > 0, "the path dropped packets");
    assert!(
        ooo > 0,
        "frames arrived out of order across channels: {st:?}"
    );
}

#[test]
fn a_path_that_goes_silent_fails_the_sockets_instead_of_hanging() {
    if !is_root() {
        common::cannot_run("needs root for namespaces");
        return;
    }
    let lab = Lab::new();
    // No FIN or RST will ever come: only the dead-channel timeout can end this.
    let cfg = Config {
        throughput_channels: 2,
        latency_channels: 0,
        dead_channel_timeout: Some(Duration::from_secs(2)),
        ..Config::default()
    };
    let (_server, listener, client, s) = lab.endpoints(cfg, 8);
    let a = listener.accept_timeout(Duration::from_secs(10)).unwrap();
    let started = std::time::Instant::now();
    let writer = thread::spawn(move || {
        let r = send_stream(&s, 9, 1 << 40);
        (r, s)
    });
    let reader = thread::spawn(move || (recv_stream(&a, 9), a));
    thread::sleep(Duration::from_millis(300));
    // The client's end of the link goes down: packets vanish, nothing is ever answered.
    lab.a.exec(&["ip", "link", "set", "v0a", "down"]).unwrap();
    let (got, _a) = reader.join().unwrap();
    let (n, e) = got.expect_err("the receiver must learn that its peer is gone");
    assert!(n > 0);
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    let (w, _s) = writer.join().unwrap();
    let e = w.expect_err("the sender too");
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    // Generous: the point is minutes (tcp_retries2) against seconds, not a timing.
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "took {:?}",
        started.elapsed()
    );
    drop(client);
}
