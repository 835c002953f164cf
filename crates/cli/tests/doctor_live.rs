//! Root-only, live: two namespaces joined by a single-queue veth pair; one thread in the first
//! namespace, pinned to CPU 0, sends UDP from 64 source ports to the second. A veth delivers
//! through the backlog of the sending CPU, so with RPS off CPU 0 processes every packet:
//! `netsteer doctor` (sampling, run inside the receiving namespace) must name CPU 0 as the hot
//! CPU and the receiving veth as single-queue without RPS. Then the RPS step of doctor's own
//! fix is applied inside the namespace and both findings must be gone. Nothing outside the two
//! namespaces is changed; the drop guards delete them, also on failure.

mod common;

use common::{Netns, Pair, is_root};
use netsteer_lab::pair::{CLIENT_ADDR as A_ADDR, SERVER_ADDR as B_ADDR};
use netsteer_steering::doctor::{LoadSource, Report};
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

fn online_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| netsteer_host::CpuSet::parse_list(&s, None).ok())
        .map_or(1, |s| s.len())
}

/// Sends until `stop`, from `flows` sockets in namespace `ns`, pinned to `cpu`.
fn load(
    ns: String,
    cpu: usize,
    flows: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> thread::JoinHandle<std::io::Result<()>> {
    netsteer_sock::netns::spawn(Some(ns.into()), vec![cpu as u32], move || {
        let socks: Vec<UdpSocket> = (0..flows)
            .map(|_| UdpSocket::bind((A_ADDR, 0)).expect("bind"))
            .collect();
        let payload = [0u8; 32];
        // Port 9 (discard) has no listener: the receiver processes each datagram up to the
        // socket lookup, which is the softirq work measured here.
        let dst = format!("{B_ADDR}:9");
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for s in &socks {
                if s.send_to(&payload, &dst).is_ok() {
                    n += 1;
                }
            }
        }
        sent.store(n, Ordering::Relaxed);
    })
}

/// CPU 1's idle + iowait ticks from /proc/stat.
fn cpu1_idle_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().find(|l| l.starts_with("cpu1 ")).unwrap();
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap())
        .collect();
    v[3] + v[4]
}

/// USER_HZ: 100 on every Linux architecture netsteer runs on (the /proc/stat unit).
fn ticks_per_second() -> f64 {
    100.0
}

fn doctor_in(ns: &Netns) -> Report {
    let bin = env!("CARGO_BIN_EXE_netsteer");
    let out = ns.exec(&[bin, "doctor", "--sample", "2", "--json"]);
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "doctor exit {code:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("doctor --json deserializes")
}

#[test]
fn doctor_names_the_hot_receiving_cpu_and_rps_clears_it() {
    if !is_root() || std::process::Command::new("ip").arg("-V").output().is_err() {
        common::cannot_run("needs root and iproute2");
        return;
    }
    if online_cpus() < 2 {
        common::cannot_run("needs two online CPUs");
        return;
    }
    let pair = Pair::create(1);
    let (a, b) = (&pair.client, &pair.server);

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sender = load(a.path(), 0, 64, stop.clone(), sent.clone());
    thread::sleep(Duration::from_millis(500));

    let idle0 = cpu1_idle_ticks();
    let before = doctor_in(b);
    let idle1 = cpu1_idle_ticks();
    assert_eq!(before.load.as_ref().unwrap().source, LoadSource::Sampled);
    let hot = before.findings.iter().find(|f| f.id == "softirq-hot-cpu");
    let single = before
        .findings
        .iter()
        .find(|f| f.id == "single-queue-no-rps");

    // RPS over the CPUs doctor proposes, set inside the receiving namespace only.
    let rps_step = single
        .and_then(|f| f.fix.steps.iter().find(|s| s.contains("/rps_cpus")))
        .cloned();
    if let Some(step) = &rps_step {
        b.sh(step);
    }
    thread::sleep(Duration::from_millis(500));
    let after = doctor_in(b);
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap().unwrap();

    for (when, r) in [("RPS off", &before), ("RPS on", &after)] {
        for f in &r.findings {
            eprintln!("{when}: {} {:?}", f.id, f.evidence);
        }
    }
    // softirq-hot-cpu fires only while the other CPUs have room (its contract, tested on
    // fixtures in crates/steering/tests/rules.rs). CI may run this beside a busy CPU 1, so it is
    // asserted when CPU 1 was mostly idle during doctor's sample, and otherwise must not name
    // any CPU but 0.
    let cpu1_idle = (idle1 - idle0) as f64 / (2.0 * ticks_per_second());
    eprintln!(
        "CPU 1 idle during the RPS-off sample: {:.0}%",
        cpu1_idle * 100.0
    );
    if cpu1_idle >= 0.6 {
        let hot = hot.unwrap_or_else(|| panic!("no softirq-hot-cpu with RPS off: {before:#?}"));
        assert_eq!(hot.subjects.cpus, [0], "{hot:#?}");
    } else if let Some(hot) = hot {
        assert_eq!(hot.subjects.cpus, [0], "{hot:#?}");
    }
    let single = single.unwrap_or_else(|| panic!("no single-queue-no-rps: {before:#?}"));
    assert_eq!(single.subjects.devices, ["v0b"]);
    assert!(rps_step.is_some(), "{single:#?}");
    assert!(sent.load(Ordering::Relaxed) > 10_000);
    let ids: Vec<&str> = after.findings.iter().map(|f| f.id.as_str()).collect();
    assert!(
        !ids.contains(&"softirq-hot-cpu"),
        "still hot after RPS: {after:#?}"
    );
    assert!(!ids.contains(&"single-queue-no-rps"), "{ids:?}");
}
