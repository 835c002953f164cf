//! `netsteer --root <fixture> show --json` against committed expectations, plus semantic checks
//! that read the JSON back into the library's types. Re-bless after an intended change with
//! `NETSTEER_BLESS=1 cargo test --test hosts` and review the diff.

use netsteer_host::CpuSet;
use netsteer_host::field::Field;
use netsteer_host::irqname::IrqRole;
use netsteer_host::sample::TopInterval;
use netsteer_host::view::HostView;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn netsteer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(args)
        .output()
        .expect("run netsteer")
}

fn show(host: &str) -> (String, HostView) {
    let root = fixtures().join("hosts").join(host);
    let out = netsteer(&["--root", root.to_str().unwrap(), "show", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let view: HostView = serde_json::from_str(&text).expect("show --json deserializes");
    (text, view)
}

fn golden(host: &str) -> HostView {
    let (text, view) = show(host);
    let expected = fixtures()
        .join("expected")
        .join(format!("{host}.show.json"));
    if std::env::var_os("NETSTEER_BLESS").is_some() {
        std::fs::write(&expected, &text).unwrap();
    }
    let want = std::fs::read_to_string(&expected)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with NETSTEER_BLESS=1)", expected.display()));
    assert!(
        text == want,
        "{host}: show --json differs from {}",
        expected.display()
    );
    // The JSON is the whole model: serializing what was read back gives the same text.
    assert_eq!(serde_json::to_string_pretty(&view).unwrap() + "\n", text);
    view
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse_list(s, None).unwrap()
}

#[test]
fn dev_vm_snapshot_reproduces() {
    let v = golden("dev-vm");
    let eth0 = v.nic("eth0").unwrap();
    assert_eq!(eth0.driver, Field::Known("virtio_net".into()));
    assert_eq!(eth0.bus_id.as_deref(), Some("0000:00:03.0"));
    assert!(eth0.irqs.iter().any(|i| i.role == IrqRole::Rx(0)));
    let settings = eth0.settings.as_ref().unwrap();
    assert_eq!(settings.channels.known().unwrap().combined, Some(1));
}

#[test]
fn kvm_guest_single_queue_pinned_to_cpu9_without_rps() {
    let v = golden("kvm-virtio-16cpu");
    assert_eq!(v.topology.nr_cpu_ids, 16);
    let eth0 = v.nic("eth0").unwrap();
    assert_eq!(eth0.rx_queues.len(), 1);
    assert_eq!(eth0.rx_queues[0].rps_cpus, Field::Known(CpuSet::new()));
    let rx_irq = eth0.irq(eth0.rx_queues[0].irqs[0]).unwrap();
    assert_eq!((rx_irq.irq, rx_irq.role), (48, IrqRole::Rx(0)));
    assert_eq!(rx_irq.affinity.requested, Field::Known(set("9")));
    assert_eq!(rx_irq.busiest_cpu, Some(9));
    // POWER with a 4.18 kernel has no effective_affinity_list: unknown, with the reason.
    match &rx_irq.affinity.effective {
        Field::Unknown { unknown } => {
            assert!(unknown.contains("/proc/irq/48/effective_affinity_list"))
        }
        other => panic!("expected unknown, got {other:?}"),
    }
    assert!(matches!(eth0.tx_queues[0].xps_cpus, Field::Unknown { .. }));
}

#[test]
fn two_socket_host_with_eleven_sfc_queues() {
    let v = golden("cloudflare-24cpu");
    assert_eq!(v.topology.node_cpus(1), Some(&set("6-11,18-23")));
    assert_eq!(
        v.topology.cpu(3).unwrap().siblings,
        Field::Known(set("3,15"))
    );
    let eth2 = v.nic("eth2").unwrap();
    assert_eq!(eth2.rx_queues.len(), 11);
    for q in &eth2.rx_queues {
        let irq = eth2.irq(q.irqs[0]).unwrap();
        assert_eq!(irq.role, IrqRole::RxTx(q.index));
        assert_eq!(
            irq.affinity.requested,
            Field::Known(CpuSet::from_iter([q.index]))
        );
        assert_eq!(q.rps_flow_cnt, Field::Known(2048));
    }
    // The host before seed 000 set XPS: every tx queue's mask reads back empty.
    assert!(
        eth2.tx_queues
            .iter()
            .all(|q| q.xps_cpus == Field::Known(CpuSet::new()))
    );
    assert_eq!(v.sysctls.rps_sock_flow_entries, Field::Known(32768));
    let rss = eth2.settings.as_ref().unwrap().rss.known().unwrap();
    assert_eq!(rss.indirection.len(), 128);
}

#[test]
fn large_host_masks_have_comma_groups() {
    let v = golden("mlx5-128cpu");
    assert_eq!(v.topology.nr_cpu_ids, 128);
    let nic = v.nic("ens1f0np0").unwrap();
    assert_eq!(nic.rx_queues.len(), 64);
    assert_eq!(nic.queue_irqs().count(), 64);
    assert!(
        nic.irqs
            .iter()
            .any(|i| i.role == IrqRole::Control && i.irq == 180)
    );
    assert_eq!(nic.tx_queues[40].xps_cpus, Field::Known(set("40")));
    assert_eq!(
        v.topology.mask(&set("40")).unwrap(),
        "00000000,00000000,00000100,00000000"
    );
    assert_eq!(nic.numa_node, Field::Known(0));
    assert_eq!(v.nic("docker0").unwrap().kind, "bridge");
}

#[test]
fn old_kernel_maps_softnet_rows_to_online_cpus() {
    let v = golden("rhel7-4cpu");
    assert_eq!(v.topology.online, set("0-1,3"));
    assert!(matches!(
        v.sysctls.netdev_budget_usecs,
        Field::Unknown { .. }
    ));
    let root = fixtures().join("hosts/rhel7-4cpu");
    let out = netsteer(&[
        "--root",
        root.to_str().unwrap(),
        "top",
        "--json",
        "--count",
        "2",
        "--interval",
        "0.05",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<TopInterval> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("top --json line deserializes"))
        .collect();
    assert_eq!(lines.len(), 2);
    for m in &lines {
        assert_eq!(m.kind, "interval");
        // Three softnet rows without an index column belong to CPUs 0, 1 and 3, not 0, 1, 2.
        let ids: Vec<u32> = m.cpus.iter().map(|c| c.cpu).collect();
        assert_eq!(ids, [0, 1, 3]);
        assert!(m.cpus.iter().all(|c| c.processed == Some(0.0)));
        assert!(m.queues.iter().any(|q| q.queue == "rx/tx-3" && q.irq == 44));
    }
}

#[test]
fn a_directory_that_is_not_a_host_tree_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = netsteer(&["--root", dir.path().to_str().unwrap(), "show"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--root") && err.contains("not a host tree"),
        "{err}"
    );
    let out = netsteer(&["--root", "/nonexistent/netsteer", "top", "--count", "1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bad_flags_name_the_flag() {
    let root = fixtures().join("hosts/rhel7-4cpu");
    let r = root.to_str().unwrap();
    let out = netsteer(&["--root", r, "top", "--interval=-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--interval"));
    let out = netsteer(&["--root", r, "show", "--dev", "nope0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope0"));
}

#[test]
fn missing_files_become_unknown_not_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join("hosts/kvm-virtio-16cpu");
    copy_tree(&src, dir.path());
    std::fs::remove_file(dir.path().join("proc/interrupts")).unwrap();
    std::fs::write(dir.path().join("proc/sys/net/core/busy_poll"), "garbage\n").unwrap();
    let out = netsteer(&["--root", dir.path().to_str().unwrap(), "show", "--json"]);
    assert!(out.status.success());
    let v: HostView = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.problems.iter().any(|p| p.contains("/proc/interrupts")));
    assert!(
        matches!(&v.sysctls.busy_poll, Field::Unknown { unknown } if unknown.contains("busy_poll"))
    );
    assert!(v.nic("eth0").unwrap().irqs.is_empty());
}

#[test]
fn snapshot_of_a_tree_reproduces_show() {
    let src = fixtures().join("hosts/cloudflare-24cpu");
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("snap");
    let out = netsteer(&[
        "--root",
        src.to_str().unwrap(),
        "snapshot",
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = netsteer(&["--root", src.to_str().unwrap(), "show", "--json"]);
    let b = netsteer(&["--root", out_dir.to_str().unwrap(), "show", "--json"]);
    assert!(
        a.stdout == b.stdout,
        "show of the snapshot differs from show of its source"
    );
    // Refuses to write into a non-empty directory.
    let again = netsteer(&[
        "--root",
        src.to_str().unwrap(),
        "snapshot",
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2));
}

fn copy_tree(src: &Path, dst: &Path) {
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        let ty = entry.file_type().unwrap();
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &to).unwrap();
        } else if ty.is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            copy_tree(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

#[test]
fn tuned_host_model() {
    let v = golden("tuned-ixgbe-16cpu");
    let eth0 = v.nic("eth0").unwrap();
    assert_eq!(eth0.rx_queues.len(), 8);
    assert_eq!(eth0.queue_irqs().count(), 8);
    assert_eq!(eth0.tx_queues[3].xps_cpus, Field::Known(set("3,11")));
}

/// The VM lab's guests (captured by `vm_drivers.rs`'s ignored `capture_driver_fixtures`):
/// Intel igb on Debian's 6.1 and backports' 6.12, virtio-net with RSS on 6.12. Each has every
/// RSS bucket on rx-0, UDP hashed on ports, and the hot queue's interrupts since boot.
fn driver_guest(host: &str, driver: &str) -> HostView {
    let v = golden(host);
    let eth0 = v.nic("eth0").unwrap();
    assert_eq!(eth0.driver, Field::Known(driver.into()));
    assert_eq!((eth0.rx_queues.len(), eth0.tx_queues.len()), (2, 2));
    // Every queue has its vector, named as the driver names it, and a CPU.
    for q in &eth0.rx_queues {
        let irq = eth0.irq(q.irqs[0]).unwrap();
        assert!(
            matches!(irq.role, IrqRole::Rx(n) | IrqRole::RxTx(n) if n == q.index),
            "{irq:?}"
        );
        assert!(
            irq.affinity
                .effective
                .known()
                .is_some_and(|c| !c.is_empty())
        );
    }
    let s = eth0.settings.as_ref().unwrap();
    let rss = s.rss.known().unwrap();
    assert_eq!(rss.indirection, vec![0; 128]);
    assert_eq!(
        s.flow_hash().unwrap().get("udp4").map(String::as_str),
        Some("sdfn")
    );
    let hot = eth0.irq(eth0.rx_queues[0].irqs[0]).unwrap().count;
    let cold = eth0.irq(eth0.rx_queues[1].irqs[0]).unwrap().count;
    assert!(hot > 50 * cold.max(1), "rx-0 {hot} rx-1 {cold}");
    v
}

#[test]
fn igb_on_6_1_reads_rss_over_the_ioctl_and_says_what_the_kernel_lacks() {
    let v = driver_guest("igb-6.1", "igb");
    let eth0 = v.nic("eth0").unwrap();
    let s = eth0.settings.as_ref().unwrap();
    assert!(
        s.interfaces
            .iter()
            .any(|i| i.contains("ETHTOOL_GRSSH") && i.contains("RSS_GET (Linux 6.2+)")),
        "{:?}",
        s.interfaces
    );
    let netdev = s.netdev().unwrap_err();
    assert!(
        netdev.contains("netdev netlink family (Linux 6.3+)"),
        "{netdev}"
    );
    // igb: combined 2 of 8, separate rx and tx vectors, the "other" vector for the link.
    let c = s.channels.known().unwrap();
    assert_eq!((c.combined, c.combined_max), (Some(2), Some(8)));
    assert!(
        eth0.irqs
            .iter()
            .any(|i| i.name == "eth0" && i.role == IrqRole::Control)
    );
    assert!(s.coalesce.known().unwrap().contains_key("rx-usecs"));
    let text = String::from_utf8(
        netsteer(&[
            "--root",
            fixtures().join("hosts/igb-6.1").to_str().unwrap(),
            "show",
        ])
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains("rss 128 entries over 1 queues [q0:128]"),
        "{text}"
    );
    assert!(
        text.contains("kernel: rss: read over the ETHTOOL_GRSSH ioctl"),
        "{text}"
    );
}

#[test]
fn igb_on_6_12_lists_napis_the_driver_does_not_link() {
    let v = driver_guest("igb-6.12", "igb");
    let eth0 = v.nic("eth0").unwrap();
    assert_eq!(eth0.napis.len(), 4);
    assert!(
        eth0.napis
            .iter()
            .all(|n| n.irq.is_none() && n.rx_queues.is_empty() && n.defer_hard_irqs.is_none())
    );
    let s = eth0.settings.as_ref().unwrap();
    assert!(
        s.interfaces
            .iter()
            .any(|i| i.contains("NETDEV_CMD_NAPI_SET (Linux 6.13+)")),
        "{:?}",
        s.interfaces
    );
}

#[test]
fn virtio_rss_on_6_12_has_a_key_and_per_queue_counters() {
    let v = driver_guest("virtio-rss-6.12", "virtio_net");
    let s = v.nic("eth0").unwrap().settings.as_ref().unwrap();
    let rss = s.rss.known().unwrap();
    assert_eq!(rss.key.as_ref().map(String::len), Some(80), "a 40-byte key");
    assert_eq!(rss.hfunc.as_deref(), Some("toeplitz"));
    let q = &s.netdev().unwrap().qstats;
    assert!(
        q.iter().any(|q| q.packets.is_some_and(|p| p > 1000)),
        "{q:?}"
    );
}

/// tune on the three trees: the table is shared equally (through the ioctl path's tree twin on
/// 6.1, the same item everywhere), per-NAPI modes go to the device-wide files (no NAPI_SET on
/// either kernel), and igb's n-tuple filters are said to be fixed off.
#[test]
fn tune_plans_on_the_driver_trees() {
    for host in ["igb-6.1", "igb-6.12", "virtio-rss-6.12"] {
        let root = fixtures().join("hosts").join(host);
        let out = netsteer(&[
            "--root",
            root.to_str().unwrap(),
            "tune",
            "plan",
            "--profile",
            "latency",
            "--dev",
            "eth0",
            "--napi",
            "irq-suspend",
            "--reserve-queue",
            "1",
            "--ports",
            "4321",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let p: netsteer_steering::tune::Plan = serde_json::from_slice(&out.stdout).unwrap();
        let item = |id: &str| p.items.iter().find(|i| i.id == id);
        let table = item("nic/eth0/rss/indirection").unwrap_or_else(|| panic!("{host}: {p:?}"));
        assert_eq!(
            table.desired,
            vec!["0"; 128].join(" "),
            "{host}: rx-1 reserved"
        );
        assert!(
            item("napi/eth0/napi_defer_hard_irqs").is_some(),
            "{host}: {p:?}"
        );
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("irq-suspend-timeout not planned")),
            "{host}: {:?}",
            p.notes
        );
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("n-tuple filters are fixed off by the driver")),
            "{host}: {:?}",
            p.notes
        );
        assert!(!p.items.iter().any(|i| i.id.contains("/ntuple/")), "{host}");
    }
}

/// The zoo's real guests (two NUMA nodes, five NIC models, a bond, a VLAN, CPU 3 offline), as
/// Debian's 5.10, 6.1, 6.12 and trixie-backports' 7.3 show them: golden `show --json`, and the
/// facts the zoo exists for, read from the view.
#[test]
fn zoo_guests_read_as_their_kernels_show_them() {
    for kernel in ["5.10", "6.1", "6.12", "7.3"] {
        let host = &format!("zoo-2node-5nic-{kernel}");
        let view = golden(host);
        assert_eq!(
            view.topology.online.to_list(),
            "0-2",
            "{host}: CPU 3 offline"
        );
        assert_eq!(view.topology.nodes.len(), 2, "{host}");
        let by_driver = |d: &str| {
            view.nics
                .iter()
                .find(|n| n.driver.known().is_some_and(|x| x == d))
                .unwrap_or_else(|| panic!("{host}: no {d}"))
        };
        assert_eq!(by_driver("igb").numa_node.known(), Some(&1), "{host}");
        assert_eq!(
            by_driver("virtio_net").numa_node.known(),
            Some(&0),
            "{host}"
        );
        let e1000 = by_driver("e1000");
        assert!(
            e1000
                .irqs
                .iter()
                .any(|i| i.line.is_some() && i.role == IrqRole::AllQueues),
            "{host}: e1000's INTx line"
        );
        let e1000e = by_driver("e1000e");
        assert!(
            e1000e.irqs.iter().any(|i| i.role == IrqRole::Control),
            "{host}: e1000e's other-causes vector"
        );
        assert!(
            view.nics
                .iter()
                .any(|n| n.kind == "bond" && n.name == "bond1"),
            "{host}: bond1"
        );
        assert!(
            view.nics.iter().any(|n| n.kind == "vlan"),
            "{host}: the VLAN"
        );
    }
}

/// The zoo's legacy guests: five NICs on INTx lines, more NICs than lines, so lines are shared:
/// each NIC lists the line with the others on it, and a plan places each line once.
#[test]
fn zoo_legacy_guests_share_their_intx_lines() {
    for kernel in ["5.10", "6.1", "6.12", "7.3"] {
        let host = &format!("zoo-legacy-intx-{kernel}");
        let view = golden(host);
        let physical: Vec<_> = view.nics.iter().filter(|n| !n.is_virtual()).collect();
        assert_eq!(physical.len(), 5, "{host}");
        let mut lines = std::collections::BTreeMap::new();
        for n in &physical {
            let irq = n
                .irqs
                .iter()
                .find(|i| i.line.is_some())
                .unwrap_or_else(|| panic!("{host}: {} has no INTx line: {:?}", n.name, n.irqs));
            assert_eq!(irq.role, IrqRole::AllQueues, "{host}: {}", n.name);
            lines
                .entry(irq.irq)
                .or_insert_with(Vec::new)
                .push((n.name.clone(), irq.shared_with.clone()));
        }
        assert!(
            lines.len() < 5,
            "{host}: five NICs on {} lines",
            lines.len()
        );
        for (irq, nics) in &lines {
            for (name, shared) in nics {
                for (other, _) in nics.iter().filter(|(o, _)| o != name) {
                    assert!(
                        shared.contains(other),
                        "{host}: IRQ {irq}: {name} names {other}: {shared:?}"
                    );
                }
            }
        }
    }
}
