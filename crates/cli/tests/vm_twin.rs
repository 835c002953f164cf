//! Root-only, live: the twin rig in virtual time — one QEMU process (`-icount`, one TCG
//! thread), two igb NICs on one QEMU hub, the client's in a namespace of its own inside the
//! guest — and the noise floor's measurement over it. This is CI's one short run of the mode;
//! the ten-run floors against the pair are benchmarks (BENCHMARKS.md, benches/lab-noise.sh).
//! Every readback is the guest's own: `ip`, `/sys/class/net/*/statistics`, `/proc/interrupts`.

mod common;

use netsteer_lab::vm::NicModel;
use netsteer_lab::vm::noise::{self, Rig};
use netsteer_lab::vm::twin::{PEER_NS, Twin, TwinSpec};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const T: Duration = Duration::from_secs(300);

fn usable() -> bool {
    common::vm_usable(NicModel::Igb)
}

fn sh(t: &mut Twin, cmd: &str) -> String {
    let (rc, out) = t.guest.sh(cmd, T).unwrap();
    assert_eq!(rc, 0, "{cmd}: {out}");
    out
}

fn counter(t: &mut Twin, ns: Option<&str>, dev: &str, name: &str) -> u64 {
    let path = format!("/sys/class/net/{dev}/statistics/{name}");
    let cmd = match ns {
        // sysfs shows a namespace's own devices only: read it from inside.
        Some(ns) => format!("chroot /host /bin/ip netns exec {ns} cat {path}"),
        None => format!("cat {path}"),
    };
    sh(t, &cmd).trim().parse().unwrap()
}

#[test]
fn the_twin_measures_both_ends_inside_one_guest_in_virtual_time() {
    if !usable() {
        return;
    }
    let spec = TwinSpec {
        nic: NicModel::Igb,
        kernel: Some("7.3".into()),
        virtual_time: Some(0),
        ..Default::default()
    };
    let mut t = Twin::boot("nst", &spec).unwrap_or_else(|e| panic!("{}: {e}", spec.describe()));
    if let Some(what) = &t.retried {
        eprintln!("twin: retried after an emulator crash: {what}");
    }
    assert!(t.guest.release.starts_with("7.3"), "{}", t.guest.release);
    // The emulator runs in virtual time: QEMU was started with icount on one TCG thread.
    let cmdline =
        std::fs::read_to_string(format!("/proc/{}/cmdline", t.guest.pid().unwrap())).unwrap();
    let argv: Vec<&str> = cmdline.split('\0').collect();
    let after = |flag: &str| argv.iter().position(|a| *a == flag).map(|i| argv[i + 1]);
    assert_eq!(after("-icount"), Some("shift=0,sleep=off"), "{argv:?}");
    assert_eq!(after("-accel"), Some("tcg,thread=single"), "{argv:?}");

    // Two igbs, each end's own: the client's interface is in the peer namespace and no
    // longer in the root one, so the kernel cannot route the echo over loopback.
    let (server, client) = (t.server.clone(), t.client.clone());
    assert_ne!(server.pci, client.pci);
    for dev in [&server.dev, &client.dev] {
        let driver = sh(
            &mut t,
            &format!(
                "chroot /host ethtool -i {dev} 2>/dev/null || chroot /host /bin/ip netns exec {PEER_NS} ethtool -i {dev}"
            ),
        );
        assert!(driver.contains("driver: igb"), "{dev}: {driver}");
    }
    let root_links = sh(&mut t, "chroot /host /bin/ip -o link");
    assert!(
        root_links.contains(&format!(": {}:", server.dev)),
        "{root_links}"
    );
    assert!(
        !root_links.contains(&format!(": {}:", client.dev)),
        "{root_links}"
    );
    let peer_links = sh(
        &mut t,
        &format!("chroot /host /bin/ip -n {PEER_NS} -o link"),
    );
    assert!(
        peer_links.contains(&format!(": {}:", client.dev)),
        "{peer_links}"
    );
    // The second channel runs in the peer namespace, sysfs included: what a program there
    // reads of /sys/class/net is its namespace's, as it would be on the client's own host.
    let (rc, seen) = t
        .peer
        .sh(
            "ls /sys/class/net; echo @; chroot /host ls /sys/class/net",
            T,
        )
        .unwrap();
    assert_eq!(rc, 0, "{seen}");
    let (outside, inside) = seen.split_once('@').unwrap();
    for view in [outside, inside] {
        // bonding_masters: the bonding module's file, in every namespace's view.
        let mut devs: Vec<&str> = view
            .split_whitespace()
            .filter(|d| *d != "bonding_masters")
            .collect();
        devs.sort_unstable();
        assert_eq!(devs, [client.dev.as_str(), "lo"], "{seen}");
    }
    let (rc, seen) = t.guest.sh("ls /sys/class/net", T).unwrap();
    let root: Vec<&str> = seen.split_whitespace().collect();
    assert!(
        rc == 0 && root.contains(&server.dev.as_str()) && !root.contains(&client.dev.as_str()),
        "{seen}"
    );

    let bin = t.install(std::path::Path::new(BIN)).unwrap();
    let rx_before = counter(&mut t, None, &server.dev, "rx_packets");
    let tx_before = counter(&mut t, Some(PEER_NS), &client.dev, "tx_packets");
    let (runs, count) = (3, 300);
    let mut rig = Rig::Twin(Box::new(t));
    let mut lines = Vec::new();
    let floor = noise::measure(&mut rig, &bin, runs, count, &mut |l| {
        eprintln!("{l}");
        lines.push(l.to_string());
        Ok(())
    })
    .unwrap();
    let Rig::Twin(mut t) = rig else {
        unreachable!()
    };
    for l in noise::summary_lines(&floor) {
        eprintln!("{l}");
    }
    assert_eq!(lines.len(), runs as usize);
    assert!(lines.iter().all(|l| l.contains("virtual ns")), "{lines:?}");
    assert_eq!((floor.rig.as_str(), floor.virtual_time), ("twin", Some(0)));
    assert_eq!(floor.runs.len(), runs as usize);

    // Every round trip crossed both emulated NICs: the server's igb received at least every
    // request of every run (the client's warm-up and ARP come on top), and the client's igb
    // sent them.
    let rx = counter(&mut t, None, &server.dev, "rx_packets") - rx_before;
    let tx = counter(&mut t, Some(PEER_NS), &client.dev, "tx_packets") - tx_before;
    let answered: u64 = floor.runs.iter().map(|r| r.received).sum();
    assert!(
        rx >= answered && tx >= answered,
        "rx {rx}, tx {tx}, answered {answered}"
    );
    for (i, r) in floor.runs.iter().enumerate() {
        assert_eq!((r.received, r.lost), (count, 0), "run {}: {r:?}", i + 1);
        assert!(r.p50_ns > 0 && r.p50_ns <= r.p99_ns, "run {}: {r:?}", i + 1);
        // The server's NIC interrupts on the server's CPU, where its vectors were pinned: at
        // least one hard IRQ and one NET_RX run per request (each request arrives alone: one
        // datagram in flight), and the server sleeps between requests (no busy polling).
        // And not many more: one receive and one transmit completion on igb's combined vector,
        // one NET_RX pass each, one wake-up of the server (the client's warm-up and the
        // driver's watchdog are inside the window too, so some room above).
        let p = r.per_request;
        assert!((1.0..=3.0).contains(&p.hard_irqs), "run {}: {p:?}", i + 1);
        assert!(
            (1.0..=3.0).contains(&p.net_rx_softirqs),
            "run {}: {p:?}",
            i + 1
        );
        // One wake-up per request, less one: the first request can find the server still
        // running from its start-up, inside the window (a CI run: 299 in 300, 0.997).
        let first = 1.0 - 1.0 / count as f64;
        assert!(
            (first..=2.0).contains(&p.context_switches),
            "run {}: {p:?}",
            i + 1
        );
    }
    // The vectors read back where the measurement put them.
    let irqs = sh(
        &mut t,
        &format!("ls /sys/bus/pci/devices/{}/msi_irqs", server.pci),
    );
    for irq in irqs.split_whitespace() {
        let aff = sh(&mut t, &format!("cat /proc/irq/{irq}/smp_affinity_list"));
        assert_eq!(aff.trim(), noise::SERVER_CPU.to_string(), "IRQ {irq}");
    }
}
