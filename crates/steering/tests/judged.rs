//! Doctor judges only what the files support (issue 72, class 2): a rule whose inputs are
//! unknown for a device it found nothing on says so, the healthy sentence needs every rule that
//! applies judged, and a container's view is named as one.

use netsteer_host::{HostFs, read_host};
use netsteer_steering::doctor::{Goal, Load, Report, diagnose, text};
use std::fs;
use std::path::Path;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

/// Four CPUs, /proc/stat, softnet and uptime: enough for the host-wide rules to judge.
fn base(root: &Path, interrupts: &str) {
    let mut stat = String::from("cpu  100 0 100 10000 0 0 10 0 0 0\n");
    let mut softnet = String::new();
    for c in 0..4 {
        stat.push_str(&format!("cpu{c} 25 0 25 2500 0 0 2 0 0 0\n"));
        softnet.push_str(&format!(
            "00000100 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 {c:08x}\n"
        ));
    }
    write(root, "proc/stat", &stat);
    write(root, "proc/net/softnet_stat", &softnet);
    write(root, "proc/uptime", "1000.00 3000.00\n");
    write(root, "proc/interrupts", interrupts);
    write(root, "sys/devices/system/cpu/online", "0-3\n");
    write(root, "proc/1/comm", "systemd\n");
}

/// A PCI NIC `eth0` at 0000:00:03.0 (its sysfs link and `device` link), owning `msi`; returns
/// its function's directory, under which a test adds queues.
fn pci_eth0(root: &Path, msi: &[u32]) -> &'static str {
    let func = "sys/devices/pci0000:00/0000:00:03.0";
    write(root, &format!("{func}/net/eth0/operstate"), "up\n");
    write(root, &format!("{func}/net/eth0/ifindex"), "2\n");
    for irq in msi {
        write(root, &format!("{func}/msi_irqs/{irq}"), "msix\n");
    }
    class_net(root, "../../devices/pci0000:00/0000:00:03.0/net/eth0");
    std::os::unix::fs::symlink(
        "../../../0000:00:03.0",
        root.join(format!("{func}/net/eth0/device")),
    )
    .unwrap();
    func
}

/// A veth `eth0` with one queue each way, as a container's namespace holds it.
fn veth_eth0(root: &Path) {
    let veth = "sys/devices/virtual/net/eth0";
    write(root, &format!("{veth}/operstate"), "up\n");
    write(root, &format!("{veth}/ifindex"), "5\n");
    write(root, &format!("{veth}/iflink"), "6\n");
    write(root, &format!("{veth}/queues/rx-0/rps_cpus"), "0\n");
    write(root, &format!("{veth}/queues/tx-0/xps_cpus"), "0\n");
    class_net(root, "../../devices/virtual/net/eth0");
}

/// `/sys/class/net/eth0`, the link to the device's directory.
fn class_net(root: &Path, target: &str) {
    fs::create_dir_all(root.join("sys/class/net")).unwrap();
    std::os::unix::fs::symlink(target, root.join("sys/class/net/eth0")).unwrap();
}

fn doctor(root: &Path) -> Report {
    let fs = HostFs::open(root).unwrap();
    let view = read_host(&fs, None);
    let sample = netsteer_host::sample::read_sample(&fs).unwrap();
    let net = netsteer_host::sample::read_net_counters(&fs);
    let load = Load::since_boot(&sample, &net, 1000.0);
    diagnose(&view, Some(&load), Goal::Balanced, None)
}

/// The single-queue case unseen: eth0 is a PCI NIC whose queue directories the tree does not
/// hold. Doctor used to say "No findings: nothing keeps packet processing here from scaling."
#[test]
fn a_nic_whose_queues_are_unknown_is_not_judged_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    base(
        root,
        "           CPU0       CPU1       CPU2       CPU3\n 24:     500000          0          0          0  PCI-MSI 524288-edge      eth0\n",
    );
    pci_eth0(root, &[24]);
    let r = doctor(root);
    assert!(
        r.findings.iter().all(|f| f.id != "single-queue-no-rps"),
        "{:#?}",
        r.findings
    );
    assert!(!r.healthy(), "{r:#?}");
    let blind = r
        .unjudged
        .iter()
        .find(|n| n.rule == "single-queue-no-rps" && n.subject == "eth0")
        .unwrap_or_else(|| panic!("{:#?}", r.unjudged));
    assert!(blind.needs.contains("eth0 queues"), "{blind:?}");
    let out = text::render(&r);
    assert!(!out.contains("nothing keeps packet processing"), "{out}");
    assert!(
        out.contains("not judged: single-queue-no-rps: eth0 needs eth0 queues"),
        "{out}"
    );
    assert_eq!(r.rules.applied, r.rules.judged + r.rules.not_judged);
    assert!(
        r.rules.not_judged >= 1 && r.rules.judged >= 1,
        "{:?}",
        r.rules
    );
}

/// Inside a container: its netns holds a veth, its /proc/interrupts the host's virtio queue
/// vectors of devices it cannot see.
#[test]
fn a_containers_view_is_named_and_not_judged_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut irqs = String::from("           CPU0       CPU1       CPU2       CPU3\n");
    for q in 0..7 {
        for (i, dir) in [(0, "input"), (1, "output")] {
            irqs.push_str(&format!(
                " {}:       100        200        300        400  PCI-MSIX-0000:00:03.0 {}-edge      virtio1-{dir}.{q}\n",
                30 + q * 2 + i,
                q * 2 + i + 1
            ));
        }
    }
    base(root, &irqs);
    veth_eth0(root);
    let r = doctor(root);
    let view = r
        .host
        .container_view
        .clone()
        .unwrap_or_else(|| panic!("{:#?}", r.host));
    assert!(view.contains("14 queue vector(s)"), "{view}");
    assert!(!r.healthy());
    let out = text::render(&r);
    assert!(out.contains("view: a container's view"), "{out}");
    assert!(!out.contains("nothing keeps packet processing"), "{out}");
    assert!(
        out.contains("every NIC rule for the host's own NICs"),
        "{out}"
    );
}

/// A NIC whose vectors it owns (msi_irqs) but none of which is named like a queue (cxgb4 names
/// them `eth0-Rx0`): where its queues' interrupts go is not known, and the IRQ rules say so
/// instead of passing it as spread.
#[test]
fn owned_vectors_not_named_like_queues_are_not_judged() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut irqs = String::from("           CPU0       CPU1       CPU2       CPU3\n");
    for q in 0..4 {
        irqs.push_str(&format!(
            " {}:     900000          0          0          0  PCI-MSIX-0000:00:03.0 {q}-edge      eth0-Rx{q}\n",
            24 + q
        ));
    }
    base(root, &irqs);
    let func = pci_eth0(root, &[24, 25, 26, 27]);
    for q in 0..4 {
        write(
            root,
            &format!("{func}/net/eth0/queues/rx-{q}/rps_cpus"),
            "0\n",
        );
        write(
            root,
            &format!("{func}/net/eth0/queues/rx-{q}/rps_flow_cnt"),
            "0\n",
        );
        write(
            root,
            &format!("{func}/net/eth0/queues/tx-{q}/xps_cpus"),
            "0\n",
        );
    }
    let r = doctor(root);
    assert!(!r.healthy());
    let blind = r
        .unjudged
        .iter()
        .find(|n| n.rule == "irqs-not-spread" && n.subject == "eth0")
        .unwrap_or_else(|| panic!("{:#?}\n{:#?}", r.unjudged, r.findings));
    assert!(
        blind
            .needs
            .contains("none of its 4 vector(s) is named like a queue"),
        "{blind:?}"
    );
}

/// A container on a host whose NICs interrupt over no per-queue vector (Hyper-V netvsc: its
/// channels signal over VMBus): /proc/interrupts betrays nothing, but the namespace's sysctls
/// do — `somaxconn` is there and `netdev_max_backlog`, which only the host's namespace has,
/// is not (issue 72 review).
#[test]
fn a_containers_view_without_the_hosts_vectors_is_named_by_its_sysctls() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    base(
        root,
        "           CPU0       CPU1       CPU2       CPU3\nHYP:     100200      90000      80000      70000   Hypervisor callback interrupts\n",
    );
    veth_eth0(root);
    write(root, "proc/sys/net/core/somaxconn", "4096\n");
    let r = doctor(root);
    let view = r
        .host
        .container_view
        .clone()
        .unwrap_or_else(|| panic!("{:#?}", r.host));
    assert!(view.contains("netdev_max_backlog"), "{view}");
    assert!(!r.healthy());
    // The host's own namespace has both: not a container.
    write(root, "proc/sys/net/core/netdev_max_backlog", "1000\n");
    assert_eq!(doctor(root).host.container_view, None);
}
