//! Two network namespaces joined by a veth, with packet loss on the path (netem where the
//! kernel has it; otherwise a token bucket with a tiny queue, which drops by overflow), and
//! data verified end to end. Needs root; skipped (with a message) otherwise.

mod common;

use common::*;
use netchannel::{Config, Endpoint, Policy, SocketOptions};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

struct Lab {
    a: String,
    b: String,
}

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh").arg("-c").arg(cmd).output().expect("sh")
}

fn ok(cmd: &str) {
    let o = sh(cmd);
    assert!(
        o.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Lab {
    fn new() -> Lab {
        let id = std::process::id();
        let lab = Lab {
            a: format!("ncl-{id}-a"),
            b: format!("ncl-{id}-b"),
        };
        ok(&format!("ip netns add {}", lab.a));
        ok(&format!("ip netns add {}", lab.b));
        ok(&format!(
            "ip link add ncv{id} netns {a} type veth peer name ncw{id} netns {b} && \
             ip -n {a} addr add 10.213.0.1/24 dev ncv{id} && ip -n {b} addr add 10.213.0.2/24 dev ncw{id} && \
             ip -n {a} link set ncv{id} up && ip -n {b} link set ncw{id} up && \
             ip -n {a} link set lo up && ip -n {b} link set lo up",
            a = lab.a,
            b = lab.b
        ));
        lab
    }

    /// Puts loss (and reordering, with netem) on both directions; returns what was used.
    fn impair(&self) -> &'static str {
        let id = std::process::id();
        let netem = |ns: &str, dev: String| {
            sh(&format!(
                "ip netns exec {ns} tc qdisc add dev {dev} root netem delay 1ms 500us loss 1% reorder 10%"
            ))
            .status
            .success()
        };
        if netem(&self.a, format!("ncv{id}")) && netem(&self.b, format!("ncw{id}")) {
            return "netem";
        }
        // No netem in this kernel: a 300 Mbit/s bucket with a 20 KB queue drops whatever
        // overflows it, so TCP loses and retransmits segments on every channel.
        for (ns, dev) in [(&self.a, format!("ncv{id}")), (&self.b, format!("ncw{id}"))] {
            ok(&format!(
                "ip netns exec {ns} tc qdisc replace dev {dev} root tbf rate 300mbit burst 16kb limit 20kb"
            ));
        }
        "tbf"
    }

    fn drops(&self) -> u64 {
        let id = std::process::id();
        let o = sh(&format!(
            "ip netns exec {} tc -s qdisc show dev ncv{id}",
            self.a
        ));
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        text.split("dropped ")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    fn ns(&self, name: &str) -> std::path::PathBuf {
        Path::new("/run/netns").join(name)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = sh(&format!("ip netns del {}; ip netns del {}", self.a, self.b));
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
    let (na, nb) = (lab.ns(&lab.a), lab.ns(&lab.b));
    let cfg = Config {
        throughput_channels: 4,
        policy: Policy::RoundRobin {
            stick_bytes: 64 * 1024,
        },
        ..Config::default()
    };
    let server_cfg = cfg.clone();
    let server = thread::spawn(move || {
        netsteer_sock::netns::enter(&nb).unwrap();
        Endpoint::listen("10.213.0.2:0".parse().unwrap(), server_cfg).unwrap()
    })
    .join()
    .unwrap();
    let addr = server.local_addr().unwrap();
    let listener = server.bind(7).unwrap();
    // Channels are TCP sockets opened by the thread that first connects: do that inside
    // namespace A. Later sockets reuse the session from any thread.
    let (client, first) = thread::spawn(move || {
        netsteer_sock::netns::enter(&na).unwrap();
        let c = Endpoint::new(cfg).unwrap();
        let s = c.connect(addr, 7, SocketOptions::default()).unwrap();
        (c, s)
    })
    .join()
    .unwrap();
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
