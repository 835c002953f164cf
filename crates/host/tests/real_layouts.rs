//! Vector names as real drivers print them, read through a whole host tree: each case is a
//! layout a real host showed (tg3 numbering vectors not rings, qlcnic's combined tx-0/rx-N,
//! e1000e on MSI, e1000 on a shared INTx line, two mlx4 ports on one PCI function, a netdev
//! whose tree lacks its `device` link).

use netsteer_host::fs::HostFs;
use netsteer_host::irqname::IrqRole;
use netsteer_host::nic::{IrqLine, Nic};
use netsteer_host::view::read_host;
use std::fs;
use std::path::Path;

struct Tree(tempfile::TempDir);

impl Tree {
    fn new(cpus: u32) -> Tree {
        let t = Tree(tempfile::tempdir().unwrap());
        let list = format!("0-{}\n", cpus - 1);
        t.write("sys/devices/system/cpu/online", &list);
        t.write("sys/devices/system/cpu/possible", &list);
        let mut stat = String::from("cpu 1 0 0 0 0 0 0 0 0 0\n");
        for c in 0..cpus {
            stat.push_str(&format!("cpu{c} 1 0 0 0 0 0 0 0 0 0\n"));
        }
        t.write("proc/stat", &stat);
        t
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.0.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.0.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        if p.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(target, p).unwrap();
        }
    }

    /// A PCI netdev: /sys/devices/pci0000:00/<bdf>/net/<name>, its class link, the device
    /// and driver links, `rx`/`tx` queue directories, and the function's MSI vectors.
    fn pci_nic(&self, name: &str, bdf: &str, driver: &str, queues: u32, msi: &[u32]) {
        let func = format!("sys/devices/pci0000:00/{bdf}");
        let dev = format!("{func}/net/{name}");
        for q in 0..queues {
            self.write(&format!("{dev}/queues/rx-{q}/rps_cpus"), "0\n");
            self.write(&format!("{dev}/queues/tx-{q}/xps_cpus"), "0\n");
        }
        self.write(&format!("{dev}/ifindex"), "2\n");
        self.write(&format!("{dev}/operstate"), "up\n");
        self.link(
            &format!("sys/class/net/{name}"),
            &format!("../../devices/pci0000:00/{bdf}/net/{name}"),
        );
        self.link(&format!("{dev}/device"), "../../");
        self.write(&format!("sys/bus/pci/drivers/{driver}/.keep"), "");
        self.link(
            &format!("{func}/driver"),
            &format!("../../../bus/pci/drivers/{driver}"),
        );
        self.write(&format!("{func}/numa_node"), "-1\n");
        for v in msi {
            self.write(&format!("{func}/msi_irqs/{v}"), "msix\n");
        }
    }

    fn interrupts(&self, cpus: u32, rows: &[(u32, &[u64], &str)]) {
        let mut t: String = (0..cpus).map(|c| format!("       CPU{c}")).collect();
        t.push('\n');
        for (irq, counts, actions) in rows {
            t.push_str(&format!("{irq:>4}:"));
            for c in *counts {
                t.push_str(&format!(" {c:>10}"));
            }
            t.push_str(&format!("   PCI-MSI 524288-edge      {actions}\n"));
        }
        self.write("proc/interrupts", &t);
    }

    fn nics(&self) -> Vec<Nic> {
        let fs = HostFs::open(self.0.path()).unwrap();
        read_host(&fs, None).nics
    }
}

fn roles(n: &Nic) -> Vec<(String, IrqRole)> {
    n.irqs.iter().map(|i| (i.name.clone(), i.role)).collect()
}

/// tg3 with RSS: vector 0 serves link events only, rx-1…rx-4 serve rings 0…3 (tg3.c
/// `tg3_request_irq` prints the vector index). The busiest vector (rx-4) must serve rx-3.
#[test]
fn tg3_vectors_are_numbered_from_one_past_the_link_vector() {
    let t = Tree::new(4);
    t.pci_nic("eth0", "0000:02:00.0", "tg3", 4, &[60, 61, 62, 63, 64]);
    t.interrupts(
        4,
        &[
            (60, &[5, 0, 0, 0], "eth0-0"),
            (61, &[100, 0, 0, 0], "eth0-rx-1"),
            (62, &[0, 200, 0, 0], "eth0-rx-2"),
            (63, &[0, 0, 300, 0], "eth0-rx-3"),
            (64, &[0, 0, 0, 9000], "eth0-rx-4"),
        ],
    );
    let nics = t.nics();
    let eth0 = &nics[0];
    assert_eq!(eth0.irq(60).unwrap().role, IrqRole::Control);
    assert_eq!(eth0.irq(64).unwrap().role, IrqRole::Rx(3));
    assert_eq!(eth0.rx_queues[3].irqs, vec![64]);
    assert_eq!(eth0.rx_queues[0].irqs, vec![61]);
    // With TSS: "txrx-V" serves both rings V-1; "tx-0" is tx ring 0 on vector 0 without TSS.
    let c = netsteer_host::irqname::classify_named;
    assert_eq!(c("eth0-txrx-1", "eth0", "tg3"), Some(IrqRole::RxTx(0)));
    assert_eq!(c("eth0-tx-0", "eth0", "tg3"), Some(IrqRole::Tx(0)));
    assert_eq!(c("eth0-tx-2", "eth0", "tg3"), Some(IrqRole::Tx(1)));
}

/// qlcnic's last status ring also completes tx ring 0: "eth0-tx-0-rx-3".
#[test]
fn qlcnic_combined_tx_rx_vector_serves_both_queues() {
    let t = Tree::new(4);
    t.pci_nic("eth0", "0000:04:00.0", "qlcnic", 4, &[70, 71, 72, 73]);
    t.interrupts(
        4,
        &[
            (70, &[1, 0, 0, 0], "eth0-rx-0"),
            (71, &[0, 1, 0, 0], "eth0-rx-1"),
            (72, &[0, 0, 1, 0], "eth0-rx-2"),
            (73, &[0, 0, 0, 1], "eth0-tx-0-rx-3"),
        ],
    );
    let nics = t.nics();
    let eth0 = &nics[0];
    assert_eq!(
        eth0.irq(73).unwrap().role,
        IrqRole::RxAndTx { rx: 3, tx: 0 }
    );
    assert_eq!(eth0.rx_queues[3].irqs, vec![73]);
    assert_eq!(eth0.tx_queues[0].irqs, vec![73]);
    assert_eq!(eth0.queue_irqs().count(), 4);
}

/// e1000e on MSI has one vector named after the interface: it serves every queue; with
/// MSI-X the same name is the "other causes" vector beside rx-0 and tx-0.
#[test]
fn a_vector_named_after_the_interface_alone_is_all_queues_only_when_alone() {
    let t = Tree::new(2);
    t.pci_nic("eth2", "0000:00:19.0", "e1000e", 1, &[45]);
    t.pci_nic("eth3", "0000:00:1a.0", "e1000e", 1, &[46, 47, 48]);
    t.interrupts(
        2,
        &[
            (45, &[500, 0], "eth2"),
            (46, &[10, 0], "eth3-rx-0"),
            (47, &[10, 0], "eth3-tx-0"),
            (48, &[1, 0], "eth3"),
        ],
    );
    let nics = t.nics();
    assert_eq!(roles(&nics[0]), vec![("eth2".into(), IrqRole::AllQueues)]);
    assert_eq!(nics[0].rx_queues[0].irqs, vec![45]);
    assert_eq!(nics[1].irq(48).unwrap().role, IrqRole::Control);
    assert_eq!(nics[1].irq(46).unwrap().role, IrqRole::Rx(0));
}

/// A NIC without MSI interrupts on its INTx line (`device/irq`), shared with other devices.
#[test]
fn a_legacy_intx_line_is_read_from_device_irq_with_its_sharing_named() {
    let t = Tree::new(2);
    t.pci_nic("eth0", "0000:00:03.0", "e1000", 1, &[]);
    t.write("sys/devices/pci0000:00/0000:00:03.0/irq", "11\n");
    t.interrupts(
        2,
        &[
            (10, &[3, 0], "ehci_hcd:usb2"),
            (11, &[40, 2], "ehci_hcd:usb1, eth0"),
        ],
    );
    let nics = t.nics();
    let eth0 = &nics[0];
    let irq = eth0.irq(11).expect("the INTx line");
    assert_eq!(irq.role, IrqRole::AllQueues);
    assert_eq!(irq.line, Some(IrqLine::Intx));
    assert_eq!(irq.shared_with, vec!["ehci_hcd:usb1".to_string()]);
    assert!(eth0.irq(10).is_none());
    let text = netsteer_host::text::host_view(&read_host(&HostFs::open(t.0.path()).unwrap(), None));
    assert!(
        text.contains("[legacy INTx line] [shared with ehci_hcd:usb1]"),
        "{text}"
    );
}

/// A vector pinned to a CPU but not fired since: `effective_affinity_list` still names the old
/// CPU. show prints both and says the move is pending, so nobody reads it as a pin that failed.
#[test]
fn a_vector_delivered_outside_its_requested_cpus_is_marked_move_pending() {
    let t = Tree::new(4);
    t.pci_nic("eth0", "0000:00:03.0", "igb", 2, &[50, 51, 52]);
    t.interrupts(
        4,
        &[
            (50, &[0, 0, 0, 0], "eth0-TxRx-0"),
            (51, &[90, 0, 0, 0], "eth0-TxRx-1"),
            (52, &[1, 0, 0, 0], "eth0"),
        ],
    );
    for (irq, req, eff) in [(50, "3", "0"), (51, "0-3", "0"), (52, "2", "2")] {
        t.write(
            &format!("proc/irq/{irq}/smp_affinity_list"),
            &format!("{req}\n"),
        );
        t.write(
            &format!("proc/irq/{irq}/effective_affinity_list"),
            &format!("{eff}\n"),
        );
    }
    let text = netsteer_host::text::host_view(&read_host(&HostFs::open(t.0.path()).unwrap(), None));
    let line = |irq: u32| {
        text.lines()
            .map(str::trim_start)
            .find(|l| l.starts_with(&format!("irq {irq} ")))
            .unwrap_or_else(|| panic!("no line for IRQ {irq}: {text}"))
            .to_string()
    };
    let pending = " [move pending: goes to its cpus at its next interrupt]";
    assert!(
        line(50).contains("cpus 3") && line(50).contains("effective 0"),
        "{text}"
    );
    assert!(line(50).contains(pending), "{text}");
    assert!(!line(51).contains("[move pending"), "{text}");
    assert!(!line(52).contains("[move pending"), "{text}");
}

/// Two mlx4 ports on one PCI function: ten completion EQs, five per port (mlx4_enable_msi_x),
/// each port listing only its own.
#[test]
fn two_mlx4_ports_on_one_function_split_the_completion_eqs() {
    let t = Tree::new(8);
    let bdf = "0000:81:00.0";
    let msi: Vec<u32> = (100..=110).collect();
    t.pci_nic("eth4", bdf, "mlx4_core", 5, &msi);
    t.pci_nic("eth5", bdf, "mlx4_core", 5, &msi);
    t.write(
        &format!("sys/devices/pci0000:00/{bdf}/net/eth4/dev_port"),
        "0\n",
    );
    t.write(
        &format!("sys/devices/pci0000:00/{bdf}/net/eth5/dev_port"),
        "1\n",
    );
    let mut rows: Vec<(u32, Vec<u64>, String)> =
        vec![(100, vec![1; 8], format!("mlx4-async@pci:{bdf}"))];
    for eq in 1..=10u32 {
        rows.push((99 + eq + 1, vec![eq as u64; 8], format!("mlx4-{eq}@{bdf}")));
    }
    let rows: Vec<(u32, &[u64], &str)> = rows
        .iter()
        .map(|(i, c, n)| (*i, c.as_slice(), n.as_str()))
        .collect();
    t.interrupts(8, &rows);
    let nics = t.nics();
    let queue_irqs =
        |n: &Nic| -> Vec<(u32, IrqRole)> { n.queue_irqs().map(|i| (i.irq, i.role)).collect() };
    assert_eq!(
        queue_irqs(&nics[0]),
        (0..5)
            .map(|q| (101 + q, IrqRole::RxTx(q)))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        queue_irqs(&nics[1]),
        (0..5)
            .map(|q| (106 + q, IrqRole::RxTx(q)))
            .collect::<Vec<_>>()
    );
    assert!(nics[0].irqs.iter().any(|i| i.role == IrqRole::Control));
}

/// Two ports of one function named by interface (i40e-style) do not list each other's vectors
/// as "unrecognised".
#[test]
fn ports_of_one_function_named_by_interface_keep_their_own_vectors() {
    let t = Tree::new(2);
    let bdf = "0000:3b:00.0";
    t.pci_nic("p1", bdf, "ixgbe", 1, &[30, 31]);
    t.pci_nic("p2", bdf, "ixgbe", 1, &[30, 31]);
    t.interrupts(2, &[(30, &[1, 0], "p1-TxRx-0"), (31, &[0, 1], "p2-TxRx-0")]);
    let nics = t.nics();
    assert_eq!(
        roles(&nics[0]),
        vec![("p1-TxRx-0".into(), IrqRole::RxTx(0))]
    );
    assert_eq!(
        roles(&nics[1]),
        vec![("p2-TxRx-0".into(), IrqRole::RxTx(0))]
    );
}

/// A netdev under /sys/devices/pci… whose tree lacks the `device` link is still physical,
/// with its function (driver, vectors) found from its own path.
#[test]
fn a_pci_netdev_without_its_device_link_is_physical() {
    let t = Tree::new(2);
    t.pci_nic("eth1", "0000:05:00.0", "igb", 1, &[50]);
    fs::remove_file(
        t.0.path()
            .join("sys/devices/pci0000:00/0000:05:00.0/net/eth1/device"),
    )
    .unwrap();
    t.interrupts(2, &[(50, &[7, 0], "eth1-TxRx-0")]);
    let nics = t.nics();
    assert_eq!(nics[0].kind, "physical");
    assert_eq!(nics[0].driver.known().map(String::as_str), Some("igb"));
    assert_eq!(nics[0].irq(50).unwrap().role, IrqRole::RxTx(0));
    assert!(Path::new(t.0.path()).exists());
}

/// A name no rule knows is "unrecognised vector", not a guessed queue.
#[test]
fn an_unknown_vector_name_is_unrecognised_not_guessed() {
    let t = Tree::new(2);
    t.pci_nic("eth0", "0000:06:00.0", "weird", 1, &[80, 81]);
    t.interrupts(
        2,
        &[(80, &[1, 0], "eth0-TxRx-0"), (81, &[1, 0], "wq-blob-7")],
    );
    let nics = t.nics();
    let other = nics[0].irq(81).unwrap();
    assert_eq!(other.role, IrqRole::Other);
    assert_eq!(other.role.to_string(), "unrecognised vector");
}

// Absent, unreadable and zero are three answers.

/// A netdev whose `queues/` the tree lacks has unknown queues, not zero.
#[test]
fn a_netdev_without_queues_has_unknown_queues_not_zero() {
    let t = Tree::new(2);
    t.pci_nic("eth0", "0000:07:00.0", "igb", 1, &[]);
    fs::remove_dir_all(
        t.0.path()
            .join("sys/devices/pci0000:00/0000:07:00.0/net/eth0/queues"),
    )
    .unwrap();
    t.interrupts(2, &[]);
    let view = read_host(&HostFs::open(t.0.path()).unwrap(), None);
    assert!(view.nics[0].queues_unknown.is_some());
    let text = netsteer_host::text::host_view(&view);
    assert!(text.contains("queues unknown ("), "{text}");
    assert!(!text.contains("0 rx / 0 tx queues"), "{text}");
}

/// A tree with no process in /proc cannot say whether irqbalance runs.
#[test]
fn irqbalance_is_unknown_in_a_tree_without_processes() {
    let t = Tree::new(2);
    t.interrupts(2, &[]);
    let view = read_host(&HostFs::open(t.0.path()).unwrap(), None);
    assert!(view.irqbalance.known().is_none(), "{:?}", view.irqbalance);
    // One process that is not irqbalance: then "not running" is an answer.
    t.write("proc/1/comm", "systemd\n");
    let view = read_host(&HostFs::open(t.0.path()).unwrap(), None);
    assert_eq!(view.irqbalance.known().map(|i| i.running), Some(false));
}

/// No cpu/online, no cpu/possible and no /proc/stat: the cpuN directories name the CPUs.
#[test]
fn cpu_directories_name_the_cpus_when_the_lists_and_proc_stat_are_absent() {
    let t = Tree(tempfile::tempdir().unwrap());
    for c in 0..12 {
        t.write(
            &format!("sys/devices/system/cpu/cpu{c}/topology/core_id"),
            &format!("{c}\n"),
        );
    }
    t.write("sys/devices/system/cpu/cpu11/online", "0\n");
    let view = read_host(&HostFs::open(t.0.path()).unwrap(), None);
    assert_eq!(view.topology.possible.to_list(), "0-11");
    assert_eq!(view.topology.online.to_list(), "0-10");
    assert_eq!(view.topology.nr_cpu_ids, 12);
}

/// A snapshot of a tree that lacks /proc/stat is still written, naming the hole; a bond
/// (known only by its `bonding/` directory) is still a bond when the snapshot is read back.
#[test]
fn a_snapshot_keeps_what_it_can_and_a_bond_stays_a_bond() {
    let t = Tree(tempfile::tempdir().unwrap());
    t.write("sys/devices/system/cpu/online", "0-1\n");
    t.write("proc/interrupts", "  CPU0 CPU1\n");
    let bond = "sys/devices/virtual/net/bond0";
    t.write(&format!("{bond}/bonding/mode"), "802.3ad 4\n");
    t.write(&format!("{bond}/ifindex"), "5\n");
    t.write(&format!("{bond}/iflink"), "5\n");
    t.link("sys/class/net/bond0", "../../devices/virtual/net/bond0");
    let fs = HostFs::open(t.0.path()).unwrap();
    assert_eq!(read_host(&fs, None).nics[0].kind, "bond");
    let out = tempfile::tempdir().unwrap();
    let bundle = out.path().join("snap");
    let unavailable = |_: &str| netsteer_host::ethtool::NicSettings::unavailable("test");
    let (files, problems) = netsteer_host::capture::snapshot(&fs, &unavailable, &bundle)
        .expect("a bundle despite the hole");
    assert!(files > 0);
    assert!(
        problems.iter().any(|p| p.contains("/proc/stat")),
        "{problems:?}"
    );
    let back = read_host(&HostFs::open(&bundle).unwrap(), None);
    assert_eq!(back.nics[0].kind, "bond");
}

/// `cpu/possible` absent (most real bundles keep only `online`): the online CPUs stand in for
/// it, and show says so instead of stating them as the kernel's possible CPUs.
#[test]
fn possible_cpus_absent_are_said_as_such() {
    let t = Tree::new(4);
    t.interrupts(4, &[]);
    let read = || read_host(&HostFs::open(t.0.path()).unwrap(), None);
    let v = read();
    assert!(v.topology.possible_unknown.is_none(), "{:?}", v.topology);
    assert!(netsteer_host::text::host_view(&v).contains("CPUs: possible 0-3  online 0-3"));
    fs::remove_file(t.0.path().join("sys/devices/system/cpu/possible")).unwrap();
    let v = read();
    assert!(v.topology.possible_unknown.is_some());
    assert_eq!(v.topology.possible.to_list(), "0-3");
    let text = netsteer_host::text::host_view(&v);
    assert!(
        text.contains(
            "CPUs: possible ? (at least 0-3)  online 0-3  (masks are 4 bits wide or more)"
        ),
        "{text}"
    );
}

/// A function whose `msi_irqs` is there and empty has MSI off: only its INTx line can be its.
/// Vectors elsewhere named like it (a VF renamed to a name another device's vectors carry)
/// are not taken by name; names decide only when `msi_irqs` cannot be read at all.
#[test]
fn an_empty_msi_irqs_list_takes_no_vector_by_name() {
    let t = Tree::new(2);
    t.pci_nic("eth0", "0000:00:05.0", "ixgbevf", 2, &[]);
    fs::create_dir_all(
        t.0.path()
            .join("sys/devices/pci0000:00/0000:00:05.0/msi_irqs"),
    )
    .unwrap();
    t.write("sys/devices/pci0000:00/0000:00:05.0/irq", "11\n");
    t.interrupts(
        2,
        &[
            (11, &[5000, 0], "eth0"),
            (40, &[9000, 0], "eth0-TxRx-0"),
            (41, &[0, 9000], "eth0-TxRx-1"),
        ],
    );
    let read = || read_host(&HostFs::open(t.0.path()).unwrap(), None);
    let v = read();
    let irqs: Vec<u32> = v.nic("eth0").unwrap().irqs.iter().map(|i| i.irq).collect();
    assert_eq!(irqs, [11], "{:#?}", v.nic("eth0").unwrap().irqs);
    // Without msi_irqs, the names are all there is to go by.
    fs::remove_dir(
        t.0.path()
            .join("sys/devices/pci0000:00/0000:00:05.0/msi_irqs"),
    )
    .unwrap();
    let v = read();
    let irqs: Vec<u32> = v.nic("eth0").unwrap().irqs.iter().map(|i| i.irq).collect();
    assert!(irqs.contains(&40) && irqs.contains(&41), "{irqs:?}");
}
