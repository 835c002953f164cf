//! One plan for every NIC of a host: queues on their NIC's node, NICs interleaved so that no
//! CPU carries more than ⌈vectors ÷ CPUs⌉ + 1, isolated CPUs left alone, unknown NUMA said.

use netsteer_host::{HostFs, read_host};
use netsteer_steering::tune::{ItemKind, PlanOptions, Profile, plan};
use std::collections::BTreeMap;
use std::fs;

mod common;
use common::sampled;

/// A two-socket host of `cpus` CPUs (node 0 the lower half) whose NICs each have `queues`
/// combined vectors (`NAME-TxRx-Q`), all pinned to CPU 0 as a fresh boot may leave them.
fn two_socket(cpus: u32, nics: &[(&str, i32)], queues: u32, isolated: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let w = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    };
    let half = cpus / 2;
    w(
        "sys/devices/system/cpu/online",
        &format!("0-{}\n", cpus - 1),
    );
    w(
        "sys/devices/system/cpu/possible",
        &format!("0-{}\n", cpus - 1),
    );
    w("sys/devices/system/cpu/isolated", &format!("{isolated}\n"));
    w("sys/devices/system/node/online", "0-1\n");
    w(
        "sys/devices/system/node/node0/cpulist",
        &format!("0-{}\n", half - 1),
    );
    w(
        "sys/devices/system/node/node1/cpulist",
        &format!("{half}-{}\n", cpus - 1),
    );
    let mut stat = String::from("cpu 1 0 0 0 0 0 0 0 0 0\n");
    let mut interrupts: String = (0..cpus).map(|c| format!(" CPU{c}")).collect();
    interrupts.push('\n');
    for c in 0..cpus {
        stat.push_str(&format!("cpu{c} 1 0 0 0 0 0 0 0 0 0\n"));
        w(
            &format!("sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
            &format!("{c}\n"),
        );
    }
    w("proc/stat", &stat);
    let mut irq = 100;
    for (slot, (name, node)) in nics.iter().enumerate() {
        let func = format!("sys/devices/pci0000:00/0000:{:02x}:00.0", slot + 1);
        let dev = format!("{func}/net/{name}");
        w(&format!("{dev}/operstate"), "up\n");
        w(&format!("{func}/numa_node"), &format!("{node}\n"));
        for q in 0..queues {
            w(&format!("{dev}/queues/rx-{q}/rps_cpus"), "0\n");
            w(&format!("{dev}/queues/tx-{q}/xps_cpus"), "0\n");
            w(&format!("{func}/msi_irqs/{irq}"), "msix\n");
            w(&format!("proc/irq/{irq}/smp_affinity_list"), "0\n");
            interrupts.push_str(&format!(
                "{irq}:{}  PCI-MSI-edge  {name}-TxRx-{q}\n",
                " 0".repeat(cpus as usize)
            ));
            irq += 1;
        }
        let link = dir.path().join(format!("sys/class/net/{name}"));
        fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(
            format!(
                "../../devices/pci0000:00/0000:{:02x}:00.0/net/{name}",
                slot + 1
            ),
            &link,
        )
        .unwrap();
        std::os::unix::fs::symlink("../../", dir.path().join(format!("{dev}/device"))).unwrap();
    }
    w("proc/interrupts", &interrupts);
    dir
}

/// NIC → (CPU → vectors), and the reasons, from `tune plan --profile throughput`.
fn placement(dir: &tempfile::TempDir) -> (BTreeMap<String, BTreeMap<u32, usize>>, Vec<String>) {
    let fs = HostFs::open(dir.path()).unwrap();
    let view = read_host(&fs, None);
    let p = plan(&view, &PlanOptions::for_profile(Profile::Throughput)).unwrap();
    let mut by_nic: BTreeMap<String, BTreeMap<u32, usize>> = BTreeMap::new();
    let mut reasons = Vec::new();
    for item in p.items.iter().filter(|i| i.kind == ItemKind::IrqAffinity) {
        let irq: u32 = item.id.strip_prefix("irq/").unwrap().parse().unwrap();
        let nic = view.nics.iter().find(|n| n.irq(irq).is_some()).unwrap();
        let cpu: u32 = item.desired.parse().unwrap();
        *by_nic
            .entry(nic.name.clone())
            .or_default()
            .entry(cpu)
            .or_default() += 1;
        reasons.push(item.reason.clone());
    }
    (by_nic, reasons)
}

fn per_cpu(by_nic: &BTreeMap<String, BTreeMap<u32, usize>>) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for cpus in by_nic.values() {
        for (c, n) in cpus {
            *m.entry(*c).or_default() += n;
        }
    }
    m
}

#[test]
fn four_nics_on_two_sockets_are_interleaved_on_their_own_nodes() {
    // eth0 and eth1 on node 0, eth2 on node 1, eth3's node unknown: 16 vectors, 16 CPUs.
    let dir = two_socket(
        16,
        &[("eth0", 0), ("eth1", 0), ("eth2", 1), ("eth3", -1)],
        4,
        "",
    );
    let (by_nic, reasons) = placement(&dir);
    let load = per_cpu(&by_nic);
    let cap = 16usize.div_ceil(16) + 1;
    assert!(
        load.values().all(|n| *n <= cap),
        "over the cap {cap}: {load:?}"
    );
    for nic in ["eth0", "eth1"] {
        assert!(
            by_nic[nic].keys().all(|c| *c < 8),
            "{nic} off node 0: {by_nic:?}"
        );
    }
    assert!(
        by_nic["eth2"].keys().all(|c| *c >= 8),
        "eth2 off node 1: {by_nic:?}"
    );
    // Two NICs of one node do not stack: eth0 and eth1 share no CPU.
    assert!(
        by_nic["eth0"]
            .keys()
            .all(|c| !by_nic["eth1"].contains_key(c)),
        "{by_nic:?}"
    );
    // Every CPU takes one vector: none is left idle while another takes two.
    assert_eq!(load.len(), 16, "{load:?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("eth3's NUMA node is unknown")),
        "{reasons:?}"
    );
    assert!(reasons.iter().all(|r| !r.contains("near eth3")));
}

#[test]
fn two_nics_of_one_node_fill_their_node_before_the_cap_sends_one_away() {
    // 32 CPUs, two 8-queue NICs on node 1 (CPUs 16-31): all 16 vectors fit on node 1.
    let dir = two_socket(32, &[("eth6", 1), ("eth7", 1)], 8, "");
    let (by_nic, _) = placement(&dir);
    let load = per_cpu(&by_nic);
    assert!(load.keys().all(|c| *c >= 16), "{load:?}");
    assert!(load.values().all(|n| *n == 1), "{load:?}");
    // Three 8-queue NICs on node 0 of a 16-CPU host: 24 vectors, cap ⌈24 ÷ 16⌉ + 1 = 3, and
    // node 0's 8 CPUs hold at most 24: nothing needs to leave the node, and no CPU passes 3.
    let dir = two_socket(16, &[("a", 0), ("b", 0), ("c", 0)], 8, "");
    let (by_nic, _) = placement(&dir);
    let load = per_cpu(&by_nic);
    assert!(load.values().all(|n| *n <= 3), "{load:?}");
    assert!(load.keys().all(|c| *c < 8), "{load:?}");
    // Four on node 0: 32 vectors, cap 3, node 0 holds 24; the rest spill to node 1 with a reason.
    let dir = two_socket(16, &[("a", 0), ("b", 0), ("c", 0), ("d", 0)], 8, "");
    let (by_nic, reasons) = placement(&dir);
    let load = per_cpu(&by_nic);
    assert!(load.values().all(|n| *n <= 3), "{load:?}");
    assert!(
        reasons.iter().any(|r| r.contains("another node")),
        "{reasons:?}"
    );
}

#[test]
fn isolated_and_nohz_full_cpus_take_no_queue() {
    let dir = two_socket(16, &[("eth0", 0), ("eth1", 1)], 8, "6-7,14-15");
    fs::write(dir.path().join("sys/devices/system/cpu/nohz_full"), "5\n").unwrap();
    let (by_nic, _) = placement(&dir);
    let load = per_cpu(&by_nic);
    for c in [5, 6, 7, 14, 15] {
        assert!(!load.contains_key(&c), "CPU {c} is set aside: {load:?}");
    }
    assert!(
        load.values().all(|n| *n <= 16usize.div_ceil(11) + 1),
        "{load:?}"
    );
}

/// Queue → CPU of `dev`'s IRQ pins in a plan.
fn queue_cpus(
    view: &netsteer_host::view::HostView,
    p: &netsteer_steering::tune::Plan,
    dev: &str,
) -> BTreeMap<u32, u32> {
    let nic = view.nic(dev).unwrap();
    p.items
        .iter()
        .filter(|i| i.kind == ItemKind::IrqAffinity)
        .map(|i| {
            let irq: u32 = i.id.strip_prefix("irq/").unwrap().parse().unwrap();
            let q = nic.irq(irq).unwrap().role.placement_queue().unwrap();
            (q, i.desired.parse().unwrap())
        })
        .collect()
}

#[test]
fn a_sampled_load_keeps_the_hot_queues_apart_and_an_average_since_boot_is_not_used() {
    // Four queues on node 0's two CPUs, all on CPU 0. By vector count alone the plan pairs
    // rx-0 with rx-3 (CPU 0 keeps rx-0; rx-1, rx-2 fill CPU 1; rx-3 comes back to CPU 0).
    let dir = two_socket(4, &[("eth0", 0)], 4, "");
    let fs = HostFs::open(dir.path()).unwrap();
    let view = read_host(&fs, None);
    let by_count = plan(&view, &PlanOptions::for_profile(Profile::Throughput)).unwrap();
    let q = queue_cpus(&view, &by_count, "eth0");
    assert_eq!(q[&0], q[&3], "{q:?}");
    // rx-0 and rx-3 are the hot queues: a sampled load puts them on different CPUs, and says
    // why in the reason.
    let load = sampled(&view, "eth0", &[100_000.0, 10.0, 10.0, 100_000.0], 0.0);
    let opts = PlanOptions {
        load: Some(load.clone()),
        ..PlanOptions::for_profile(Profile::Throughput)
    };
    let weighted = plan(&view, &opts).unwrap();
    let q = queue_cpus(&view, &weighted, "eth0");
    assert_ne!(q[&0], q[&3], "{q:?}");
    assert!(
        weighted
            .items
            .iter()
            .any(|i| i.reason.contains("100000 interrupts/s sampled")),
        "{:?}",
        weighted.items
    );
    // Still at most ⌈4 ÷ 4⌉ + 1 vectors per CPU, all on node 0.
    let mut per: BTreeMap<u32, usize> = BTreeMap::new();
    q.values().for_each(|c| *per.entry(*c).or_default() += 1);
    assert!(per.iter().all(|(c, n)| *c < 2 && *n <= 2), "{per:?}");
    // The same rates as an average since boot weigh nothing: the plan is the count's.
    let boot = PlanOptions {
        load: Some(netsteer_steering::model::load::Load {
            source: netsteer_steering::model::load::LoadSource::SinceBoot,
            ..load
        }),
        ..PlanOptions::for_profile(Profile::Throughput)
    };
    assert_eq!(plan(&view, &boot).unwrap().items, by_count.items);
}

#[test]
fn a_well_placed_host_moves_nothing_under_a_sampled_load() {
    // Four queues, each already alone on one of four CPUs of its node: uneven rates (one queue
    // ten times the others) are no reason to move an IRQ that has its CPU to itself.
    let dir = two_socket(8, &[("eth0", 0)], 4, "");
    for q in 0..4u32 {
        fs::write(
            dir.path()
                .join(format!("proc/irq/{}/smp_affinity_list", 100 + q)),
            format!("{q}\n"),
        )
        .unwrap();
    }
    let fs = HostFs::open(dir.path()).unwrap();
    let view = read_host(&fs, None);
    let opts = PlanOptions {
        load: Some(sampled(
            &view,
            "eth0",
            &[50_000.0, 5_000.0, 5_000.0, 5_000.0],
            0.0,
        )),
        ..PlanOptions::for_profile(Profile::Throughput)
    };
    let p = plan(&view, &opts).unwrap();
    let moves: Vec<_> = p
        .items
        .iter()
        .filter(|i| {
            i.kind == ItemKind::IrqAffinity && i.action == netsteer_steering::tune::Action::Change
        })
        .collect();
    assert!(moves.is_empty(), "{moves:?}");
}

/// Doctor prints, under each NIC's finding, the steps of the host-wide plan and a `tune apply
/// --dev NAME` line. Those lines are run one by one: each must plan its NIC where the
/// host-wide plan puts it (the other NICs' queues counted), or the printed lines stack the
/// NICs on the same CPUs that one `tune apply` keeps apart (issue 72, class 6: a 4-port
/// server's eth1-eth3 each planned on CPUs 1-5 by their own lines).
#[test]
fn each_devices_plan_is_its_slice_of_the_whole_hosts_plan() {
    let dir = two_socket(
        16,
        &[("eth0", 0), ("eth1", 0), ("eth2", 0), ("eth3", 0)],
        4,
        "",
    );
    let fs = HostFs::open(dir.path()).unwrap();
    let view = read_host(&fs, None);
    let pins = |opts: &PlanOptions| -> BTreeMap<String, String> {
        plan(&view, opts)
            .unwrap()
            .items
            .into_iter()
            .filter(|i| i.kind == ItemKind::IrqAffinity)
            .map(|i| (i.id, i.desired))
            .collect()
    };
    let whole = pins(&PlanOptions::for_profile(Profile::Throughput));
    assert_eq!(whole.len(), 16, "{whole:?}");
    let mut sliced = BTreeMap::new();
    for dev in ["eth0", "eth1", "eth2", "eth3"] {
        let mine = pins(&PlanOptions {
            devices: vec![dev.to_string()],
            ..PlanOptions::for_profile(Profile::Throughput)
        });
        let nic = view.nic(dev).unwrap();
        assert_eq!(mine.len(), 4, "{dev}: {mine:?}");
        for id in mine.keys() {
            let irq: u32 = id.strip_prefix("irq/").unwrap().parse().unwrap();
            assert!(nic.irq(irq).is_some(), "{dev}'s plan pins {id}");
        }
        sliced.extend(mine);
    }
    assert_eq!(
        sliced, whole,
        "the --dev lines together must be the one host-wide plan"
    );
}
