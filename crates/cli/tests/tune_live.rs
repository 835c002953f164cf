//! Root-only, live, inside namespaces this test creates (deleted by drop guards, also on
//! failure); nothing of the root namespace is touched. Global sysctls do not exist inside a
//! network namespace, so tune skips them there (and says so) instead of changing the host's.
//!
//! 1. A 4-queue veth cut to 1 rx / 1 tx channel: `tune apply --profile throughput` raises the
//!    channels, turns GRO on and sets RPS, per-queue RFS and XPS; `verify` is clean; recreating
//!    queues with `ethtool -L` is reported as drift; `rollback` restores every value.
//! 2. Seed 003 end to end: a single-queue veth whose receiving side does all its softirq work on
//!    the sending CPU under 64 UDP flows; tune's throughput profile spreads NET_RX over both CPUs
//!    and rollback brings it back.

mod common;

use common::{Netns, Pair};
use netsteer_lab::pair::{CLIENT_ADDR as A_ADDR, SERVER_ADDR as B_ADDR};
use netsteer_steering::tune::verify::VerifyReport;
use std::net::UdpSocket;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

/// Everything tune may change on the device, as text, to compare before and after.
fn state(ns: &Netns, dev: &str) -> String {
    ns.text(&format!(
            "cd /sys/class/net/{dev}/queues && for q in rx-* tx-*; do \
               for f in rps_cpus rps_flow_cnt xps_cpus; do [ -e $q/$f ] && echo $q/$f=$(cat $q/$f 2>/dev/null); done; \
             done; ethtool -l {dev} | tail -n 5; ethtool -k {dev} | grep -E '^(generic-receive-offload|large-receive-offload):'"
        ),
    )
}

#[test]
fn multiqueue_veth_apply_verify_drift_rollback() {
    if !common::tune_live_usable() {
        return;
    }
    let pair = Pair::create(4);
    let b = &pair.server;
    b.sh("ethtool -L v0b rx 1 tx 1");
    let state_dir = tempfile::tempdir().unwrap();
    let sd = state_dir.path().to_str().unwrap();
    let before = state(b, "v0b");

    let out = b.netsteer(&[
        "tune",
        "apply",
        "--profile",
        "throughput",
        "--dev",
        "v0b",
        "--state-dir",
        sd,
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changed: Vec<String> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "changed")
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    eprintln!("changed: {changed:?}");
    for want in [
        "nic/v0b/channels/rx",
        "nic/v0b/channels/tx",
        "nic/v0b/feature/rx-gro",
        "rps/v0b/rx-0",
        "rps/v0b/rx-1",
        "rfs/v0b/rx-0",
        "rfs/v0b/rx-1",
        "xps/v0b/tx-0",
        "xps/v0b/tx-1",
    ] {
        assert!(
            changed.iter().any(|c| c == want),
            "{want} not changed: {report:#}"
        );
    }
    // The global RFS table and budgets are not in this namespace: skipped, not touched.
    assert!(!changed.iter().any(|c| c.starts_with("sysctl/")));
    let now = state(b, "v0b");
    assert!(
        now.contains("rx-1/rps_cpus=3") && now.contains("rx-0/rps_flow_cnt=16384"),
        "{now}"
    );
    assert!(now.contains("generic-receive-offload: on"), "{now}");

    // No drift right after apply.
    let out = b.netsteer(&["tune", "verify", "--state-dir", sd, "--json"]);
    let v: VerifyReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.drift.is_empty() && out.status.code() == Some(0), "{v:#?}");

    // ethtool -L down and up recreates rx-1/tx-1 with RPS/RFS/XPS reset: drift, exit 1.
    b.sh("ethtool -L v0b rx 1 tx 1 && ethtool -L v0b rx 2 tx 2");
    let out = b.netsteer(&["tune", "verify", "--state-dir", sd, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: VerifyReport = serde_json::from_slice(&out.stdout).unwrap();
    let drifted: Vec<&str> = v.drift.iter().map(|d| d.id.as_str()).collect();
    assert!(
        drifted.contains(&"rps/v0b/rx-1") && drifted.contains(&"xps/v0b/tx-1"),
        "{v:#?}"
    );
    assert!(
        !drifted.contains(&"rps/v0b/rx-0"),
        "rx-0 survives a channel change: {v:#?}"
    );
    let why = &v.drift.iter().find(|d| d.id == "rps/v0b/rx-1").unwrap().why;
    assert!(why.contains("recreated"), "{why}");

    // Rollback restores the recorded values (channels back to 1/1 removes rx-1 again).
    let out = b.netsteer(&["tune", "rollback", "--state-dir", sd, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(state(b, "v0b"), before);
    // Twice is harmless.
    let out = b.netsteer(&["tune", "rollback", "--state-dir", sd, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(state(b, "v0b"), before);
}

/// Packets processed in NET_RX per CPU: /proc/net/softnet_stat column 1 (global, one row per
/// online CPU). Runs of the softirq (/proc/softirqs) undercount the RPS target, which takes
/// whole batches per IPI; packets are what seed 003 compares.
fn net_rx() -> Vec<u64> {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap()
        .lines()
        .map(|l| u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap())
        .collect()
}

/// Each CPU's share of the packets processed over one second (the counters are 32-bit).
fn shares() -> Vec<f64> {
    let a = net_rx();
    thread::sleep(Duration::from_secs(1));
    let b = net_rx();
    let d: Vec<u64> = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (y.wrapping_sub(*x)) & 0xffff_ffff)
        .collect();
    let total: u64 = d.iter().sum::<u64>().max(1);
    d.iter().map(|x| *x as f64 / total as f64).collect()
}

#[test]
fn seed_003_throughput_profile_spreads_net_rx_and_rollback_undoes_it() {
    if !common::tune_live_usable() {
        return;
    }
    let pair = Pair::create(1);
    let (a, b) = (&pair.client, &pair.server);
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (stop, ns) = (stop.clone(), a.path());
        netsteer_sock::netns::spawn(Some(ns.into()), vec![0], move || {
            let socks: Vec<UdpSocket> = (0..64)
                .map(|_| UdpSocket::bind((A_ADDR, 0)).unwrap())
                .collect();
            let dst = format!("{B_ADDR}:9");
            while !stop.load(Ordering::Relaxed) {
                for s in &socks {
                    let _ = s.send_to(&[0u8; 32], &dst);
                }
            }
        })
    };
    thread::sleep(Duration::from_millis(300));
    let state_dir = tempfile::tempdir().unwrap();
    let sd = state_dir.path().to_str().unwrap();

    let before = shares();
    let out = b.netsteer(&[
        "tune",
        "apply",
        "--profile",
        "throughput",
        "--dev",
        "v0b",
        "--state-dir",
        sd,
    ]);
    let applied = String::from_utf8_lossy(&out.stdout).to_string();
    thread::sleep(Duration::from_millis(300));
    let during = shares();
    let out2 = b.netsteer(&["tune", "rollback", "--state-dir", sd]);
    thread::sleep(Duration::from_millis(300));
    let after = shares();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap().unwrap();

    let pct = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{:.0}%", x * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!(
        "packets processed per CPU (NET_RX): before {} | tuned {} | rolled back {}",
        pct(&before),
        pct(&during),
        pct(&after)
    );
    eprintln!("{applied}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{applied}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out2.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out2.stdout)
    );
    assert!(applied.contains("rps/v0b/rx-0"), "{applied}");
    // CPU 0 sends and, with RPS off, processes everything; tuned, CPU 1 takes a real share.
    assert!(before[0] > 0.8, "before: {}", pct(&before));
    assert!(during[1] > 0.25, "tuned: {}", pct(&during));
    assert!(after[0] > 0.8, "after rollback: {}", pct(&after));
}

/// Per-NAPI settings through netdev netlink: a 2-queue veth with GRO on has a NAPI per rx
/// queue. `show --json` lists them; `tune apply --profile none --napi irq-suspend` sets
/// defer-hard-irqs, gro-flush-timeout and irq-suspend-timeout on each; `--napi threaded`
/// starts a `napi/<dev>-<id>` kthread per NAPI, which `show` reports; `verify` is clean after
/// each apply and `rollback` restores every value, the kthreads gone.
#[test]
fn napi_settings_and_threaded_mode_apply_verify_and_roll_back() {
    if !common::tune_live_usable() {
        return;
    }
    let pair = Pair::create(2);
    let b = &pair.server;
    b.sh("ethtool -K v0b gro on");
    let napis = |ns: &Netns| -> Vec<netsteer_host::nic::NapiView> {
        let out = ns.netsteer(&["show", "--json", "--dev", "v0b"]);
        common::succeeded(&out);
        let v: netsteer_host::view::HostView = serde_json::from_slice(&out.stdout).unwrap();
        let nic = v.nic("v0b").unwrap();
        assert_eq!(nic.kind, "veth");
        // veth has no receive classification: said in words, not an error for the whole.
        let ntuple = nic.settings.as_ref().unwrap().ntuple().unwrap_err();
        assert!(ntuple.contains("no n-tuple filters"), "{ntuple}");
        nic.napis.clone()
    };
    let before = napis(b);
    assert_eq!(
        before.len(),
        2,
        "one NAPI per rx queue with GRO on: {before:#?}"
    );
    assert!(
        before
            .iter()
            .all(|n| n.thread.is_none() && n.threaded == Some(0))
    );
    // By name and id: the test's own NAPIs, not another lab's v0b.
    let names: Vec<String> = before
        .iter()
        .map(|n| format!("napi/v0b-{}", n.id))
        .collect();
    let kthreads = || {
        b.text("ps -e -o comm=")
            .lines()
            .filter(|c| names.iter().any(|n| n == c.trim()))
            .count()
    };
    let state_dir = tempfile::tempdir().unwrap();
    let sd = state_dir.path().to_str().unwrap();
    let ok = |out: Output| {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };

    for mode in ["irq-suspend", "threaded"] {
        let out = ok(b.netsteer(&[
            "tune",
            "apply",
            "--profile",
            "none",
            "--napi",
            mode,
            "--dev",
            "v0b",
            "--state-dir",
            sd,
            "--json",
        ]));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let changed = report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["status"] == "changed")
            .count();
        let now = napis(b);
        if mode == "irq-suspend" {
            assert_eq!(changed, 6, "{report:#}");
            for n in &now {
                assert_eq!(n.defer_hard_irqs, Some(2));
                assert_eq!(n.gro_flush_timeout_ns, Some(200_000));
                assert_eq!(n.irq_suspend_timeout_ns, Some(20_000_000));
            }
        } else {
            assert_eq!(changed, 2, "{report:#}");
            for n in &now {
                let t = n.thread.as_ref().expect("a kthread per threaded NAPI");
                assert!(t.pid > 0 && t.allowed.known().is_some(), "{n:#?}");
            }
            assert_eq!(kthreads(), 2);
        }
        let out = b.netsteer(&["tune", "verify", "--state-dir", sd, "--json"]);
        let v: VerifyReport = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v.drift.is_empty() && out.status.code() == Some(0), "{v:#?}");
        ok(b.netsteer(&["tune", "rollback", "--state-dir", sd]));
        assert_eq!(napis(b), before, "{mode} rolled back");
        assert_eq!(kthreads(), 0, "the kthreads go with threaded off");
    }
}
