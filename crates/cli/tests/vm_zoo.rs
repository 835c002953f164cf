//! Root-only, live: the zoo — single QEMU guests shaped like the hosts users run (two NUMA
//! nodes, several NIC models at once, a legacy INTx line, a bond and a VLAN, a CPU offline).
//! Every readback is the guest's own (/proc/interrupts, /proc/irq/N/smp_affinity_list).
//!
//! `capture_zoo_fixtures` (ignored, run by hand) snapshots each zoo shape on each guest kernel
//! into `fixtures/hosts/zoo-*`; the `--root` tests then read real kernels' trees without QEMU.
//! `a_two_node_guest_gets_each_nic_on_its_node` stays in the suite: it runs the whole story on
//! one live guest.

mod common;

use netsteer_host::view::HostView;
use netsteer_lab::vm::zoo::{ZooGuest, ZooNic, ZooSpec};
use std::collections::BTreeMap;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const T: Duration = Duration::from_secs(300);

fn usable() -> bool {
    // Every NIC model of the zoo is in a QEMU that has igb (QEMU 8+).
    common::vm_usable(netsteer_lab::vm::NicModel::Igb)
}

/// The zoo's main shape: 4 vCPUs on 2 nodes; virtio×4 on node 0, igb and e1000e on node 1,
/// vmxnet3 on node 0, e1000 on the root bus (INTx, node unknown).
fn two_node(kernel: &str) -> ZooSpec {
    ZooSpec {
        kernel: Some(kernel.into()),
        cpus: 4,
        nodes: 2,
        mem_mb: 1024,
        nics: vec![
            (ZooNic::Virtio { queues: 4 }, Some(0)),
            (ZooNic::Igb, Some(1)),
            (ZooNic::E1000e, Some(1)),
            (ZooNic::Vmxnet3, Some(0)),
            (ZooNic::E1000, None),
        ],
        boot_limit: Duration::from_secs(150),
    }
}

/// The zoo's legacy shape: 2 vCPUs, one node, five NICs of the kind that interrupt on INTx
/// lines (rtl8139, ne2k_pci, pcnet, i82559er, tulip): more devices than lines, so lines are
/// shared.
fn legacy(kernel: &str) -> ZooSpec {
    ZooSpec {
        kernel: Some(kernel.into()),
        cpus: 2,
        nodes: 1,
        mem_mb: 1024,
        nics: vec![
            (ZooNic::Rtl8139, None),
            (ZooNic::Ne2kPci, None),
            (ZooNic::Pcnet, None),
            (ZooNic::E100, None),
            (ZooNic::Tulip, None),
        ],
        boot_limit: Duration::from_secs(150),
    }
}

/// Boots a zoo guest (the lab boots once more after an emulator crash, and says so).
fn boot(tag: &str, spec: &ZooSpec) -> ZooGuest {
    let g = ZooGuest::boot(tag, spec).unwrap_or_else(|e| panic!("{}: {e}", spec.describe()));
    if let Some(what) = &g.retried {
        eprintln!("zoo: retried after an emulator crash: {what}");
    }
    g
}

fn ns(g: &mut ZooGuest, bin: &str, args: &[&str]) -> (i32, String) {
    let mut argv = vec![bin];
    argv.extend_from_slice(args);
    g.guest.host(&argv, T).unwrap()
}

/// Regenerates `fixtures/hosts/zoo-*`: each shape on each kernel, captured with `netsteer
/// snapshot` inside the guest. Run by hand (`cargo test --test vm_zoo -- --ignored capture`),
/// review the diff, then bless the golden `show` outputs (`NETSTEER_BLESS=1 cargo test --test
/// hosts`).
#[test]
#[ignore]
fn capture_zoo_fixtures() {
    assert!(usable());
    let kernels: Vec<String> = std::env::var("ZOO_KERNELS")
        .unwrap_or_else(|_| "5.10 6.1 6.12 7.3".into())
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for kernel in &kernels {
        for (shape, spec) in [
            ("2node-5nic", two_node(kernel)),
            ("legacy-intx", legacy(kernel)),
        ] {
            let mut g = boot("zoo", &spec);
            eprintln!(
                "zoo: {} booted in {:.0} s ({})",
                spec.describe(),
                g.guest.boot_time.as_secs_f64(),
                g.guest.release
            );
            let bin = g.install(std::path::Path::new(BIN)).unwrap();
            if shape == "2node-5nic" {
                g.shape(Some(("eth2", "eth3")), Some("eth0"), Some(3))
                    .unwrap();
            } else {
                g.shape(None, Some("eth1"), None).unwrap();
            }
            capture(&mut g, &bin, &format!("zoo-{shape}-{kernel}"));
        }
    }
}

/// Regenerates `fixtures/hosts/zoo-virtio-pools-7.3`: one virtio-net NIC, up, on Debian's 7.3,
/// whose driver registers its receive queue's page pool with the device (counters built): the
/// tree the agent's page-pool series are tested on. Run by hand like the one above.
#[test]
#[ignore]
fn capture_page_pool_fixture() {
    assert!(usable());
    let mut g = boot("zoocap", &one_virtio_on_7_3());
    let bin = g.install(std::path::Path::new(BIN)).unwrap();
    g.sh_ok("chroot /host ip link set eth0 up", T).unwrap();
    capture(&mut g, &bin, "zoo-virtio-pools-7.3");
}

/// `netsteer snapshot` in the guest, copied over `fixtures/hosts/NAME`.
fn capture(g: &mut ZooGuest, bin: &str, name: &str) {
    common::capture_guest(&mut g.guest, bin, name);
}

/// Two vCPUs and one virtio-net NIC of one queue pair on Debian's 7.3.
fn one_virtio_on_7_3() -> ZooSpec {
    ZooSpec {
        kernel: Some("7.3".into()),
        cpus: 2,
        nodes: 1,
        mem_mb: 1024,
        nics: vec![(ZooNic::Virtio { queues: 1 }, None)],
        boot_limit: Duration::from_secs(150),
    }
}

/// Which CPUs each NUMA node has, from the guest's own sysfs.
fn node_cpus(g: &mut ZooGuest) -> BTreeMap<u32, Vec<u32>> {
    let out = g
        .sh_ok(
            "for n in /sys/devices/system/node/node*; do echo ${n##*node} $(cat $n/cpulist); done",
            T,
        )
        .unwrap();
    out.lines()
        .filter_map(|l| {
            let (n, list) = l.split_once(' ')?;
            let set = netsteer_host::CpuSet::parse_list(list, None).ok()?;
            Some((n.parse().ok()?, set.iter().collect()))
        })
        .collect()
}

/// On a live two-node guest with five NICs: doctor runs, `tune apply --profile throughput`
/// places every NIC's queue vectors on its own node's CPUs with no CPU over the bound (read
/// from the guest's /proc/irq), traffic on every NIC fires each vector only on its pinned CPU
/// of its own node (read from the guest's /proc/interrupts), and rollback leaves every
/// affinity byte for byte as it was.
#[test]
fn a_two_node_guest_gets_each_nic_on_its_node() {
    if !usable() {
        return;
    }
    let spec = two_node("6.1");
    let mut g = boot("zoolive", &spec);
    let bin = g.install(std::path::Path::new(BIN)).unwrap();
    g.shape(None, None, None).unwrap();
    let nodes = node_cpus(&mut g);
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let (_, json) = ns(&mut g, &bin, &["show", "--json", "--no-ethtool"]);
    let view: HostView = serde_json::from_str(&json).expect("show --json");
    // The guest's own view of each NIC's node and vectors, found by driver: the guest names
    // its interfaces in its own PCI enumeration order, not the order QEMU was given.
    let by_driver = |d: &str| {
        view.nics
            .iter()
            .find(|n| n.driver.known().is_some_and(|x| x == d))
            .unwrap_or_else(|| {
                panic!(
                    "no {d} NIC in {:?}",
                    view.nics.iter().map(|n| &n.name).collect::<Vec<_>>()
                )
            })
    };
    for (driver, node) in [("virtio_net", 0), ("igb", 1), ("e1000e", 1), ("vmxnet3", 0)] {
        assert_eq!(
            by_driver(driver).numa_node.known().copied(),
            Some(node),
            "{driver} on the expander bridge of node {node}"
        );
    }
    let e1000 = by_driver("e1000");
    assert!(
        e1000
            .irqs
            .iter()
            .any(|i| i.line.is_some() && i.role == netsteer_host::irqname::IrqRole::AllQueues),
        "e1000's INTx line: {:?}",
        e1000.irqs
    );
    let affinities =
        "for i in /proc/irq/[0-9]*; do echo ${i##*/} $(cat $i/smp_affinity_list); done";
    let before = g.sh_ok(affinities, T).unwrap();
    let (rc, doctor) = ns(&mut g, &bin, &["doctor", "--sample", "1", "--no-ethtool"]);
    assert!(rc == 0 || rc == 1, "doctor: {doctor}");
    let (rc, out) = ns(
        &mut g,
        &bin,
        &[
            "tune",
            "apply",
            "--profile",
            "throughput",
            "--no-ethtool",
            "--state-dir",
            "/tmp/st",
            "--json",
        ],
    );
    assert_eq!(rc, 0, "tune apply: {out}");
    let after = g.sh_ok(affinities, T).unwrap();
    let affinity: BTreeMap<u32, String> = after
        .lines()
        .filter_map(|l| {
            let (i, a) = l.split_once(' ')?;
            Some((i.parse().ok()?, a.to_string()))
        })
        .collect();
    let mut per_cpu: BTreeMap<u32, usize> = BTreeMap::new();
    let mut vectors = 0usize;
    for nic in view.nics.iter().filter(|n| !n.is_virtual()) {
        let node = nic.numa_node.known().copied().filter(|n| *n >= 0);
        for irq in nic
            .queue_irqs()
            .filter(|i| i.affinity.settable.known() != Some(&false))
        {
            vectors += 1;
            let cpus = netsteer_host::CpuSet::parse_list(&affinity[&irq.irq], None).unwrap();
            assert_eq!(
                cpus.len(),
                1,
                "{} ({}) pinned to one CPU: {cpus:?}",
                irq.name,
                nic.name
            );
            let cpu = cpus.lowest().unwrap();
            *per_cpu.entry(cpu).or_default() += 1;
            if let Some(n) = node {
                assert!(
                    nodes[&(n as u32)].contains(&cpu),
                    "{} of {} (node {n}) on CPU {cpu}, off its node {:?}",
                    irq.name,
                    nic.name,
                    nodes
                );
            }
        }
    }
    let bound = vectors.div_ceil(spec.cpus as usize) + 1;
    assert!(
        per_cpu.values().all(|n| *n <= bound),
        "over {bound}: {per_cpu:?}"
    );
    // Traffic on every NIC: ICMPv6 echo to the link's all-nodes group (ff02::1 from the link's
    // own link-local address; it goes no further than the NIC's QEMU hub, which has no other
    // port). Where the interrupts fired is read from the guest's /proc/interrupts.
    let ncpus = spec.cpus as usize;
    let counts = |g: &mut ZooGuest| -> BTreeMap<u32, Vec<u64>> {
        g.sh_ok("cat /proc/interrupts", T)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (irq, rest) = l.split_once(':')?;
                let irq: u32 = irq.trim().parse().ok()?;
                let c: Vec<u64> = rest
                    .split_whitespace()
                    .take(ncpus)
                    .map_while(|f| f.parse().ok())
                    .collect();
                Some((irq, c))
            })
            .collect()
    };
    let pings = |n: u32| -> String {
        let each: Vec<String> = view
            .nics
            .iter()
            .filter(|nic| !nic.is_virtual())
            .map(|nic| {
                format!(
                    "ping6 -c {n} -i 0.05 -I {} ff02::1 >/dev/null 2>&1",
                    nic.name
                )
            })
            .collect();
        format!("{}; true", each.join("; "))
    };
    // A warm-up first: on x86 a new affinity takes effect when the next interrupt arrives
    // (the move is done from that interrupt), so the first one may still land on the old CPU.
    g.guest.sh(&format!("sleep 3; {}", pings(3)), T).unwrap();
    let before_counts = counts(&mut g);
    g.guest.sh(&pings(20), T).unwrap();
    let after_counts = counts(&mut g);
    let mut fired = 0;
    for nic in view.nics.iter().filter(|n| !n.is_virtual()) {
        let node = nic.numa_node.known().copied().filter(|n| *n >= 0);
        for irq in nic.queue_irqs() {
            let (Some(a), Some(b)) = (before_counts.get(&irq.irq), after_counts.get(&irq.irq))
            else {
                continue;
            };
            let pinned = netsteer_host::CpuSet::parse_list(&affinity[&irq.irq], None)
                .unwrap()
                .lowest()
                .unwrap();
            // x86 moves an MSI when its next interrupt arrives, from that interrupt: a vector
            // that did not fire since the apply takes one more on its old CPU. Beyond that one,
            // every interrupt is on the pinned CPU, of the NIC's own node.
            let elsewhere: u64 = a
                .iter()
                .zip(b)
                .enumerate()
                .filter(|(cpu, _)| *cpu as u32 != pinned)
                .map(|(_, (x, y))| y - x)
                .sum();
            let there = b[pinned as usize] - a[pinned as usize];
            assert!(
                elsewhere <= 1,
                "{} of {}: {elsewhere} interrupts off its pinned CPU {pinned}",
                irq.name,
                nic.name
            );
            if there > 0 {
                fired += 1;
                if let Some(n) = node {
                    assert!(
                        nodes[&(n as u32)].contains(&pinned),
                        "{} of {} fired off node {n}",
                        irq.name,
                        nic.name
                    );
                }
            }
        }
    }
    assert!(fired > 0, "no NIC vector fired under the pings");
    eprintln!("zoo: {fired} (vector, CPU) pairs fired under traffic, each on its NIC's node");
    let journal = serde_json::from_str::<serde_json::Value>(&out).unwrap()["journal"]
        .as_str()
        .unwrap()
        .to_string();
    let (rc, out) = ns(
        &mut g,
        &bin,
        &["tune", "rollback", &journal, "--state-dir", "/tmp/st"],
    );
    assert_eq!(rc, 0, "rollback: {out}");
    assert_eq!(
        g.sh_ok(affinities, T).unwrap(),
        before,
        "rollback byte for byte"
    );
}

/// `lane --mode threaded-poll` where the kernel has it (Debian's 7.3, a 3-CPU guest with a
/// virtio-net cut to one channel, so the lane's queue is every flow's): the lane NAPI's
/// `threaded` reads back 2 (busy-poll) over netdev netlink, its kthread is pinned to
/// `--poll-cpu` (read from the guest's /proc), the service to `--cpu`; `lane remove` turns
/// threaded off (the kthread goes) and restores the service's affinity.
#[test]
fn a_threaded_poll_lane_pins_its_kthread() {
    if !usable() {
        return;
    }
    let spec = ZooSpec {
        kernel: Some("7.3".into()),
        cpus: 3,
        nodes: 1,
        mem_mb: 1024,
        nics: vec![(ZooNic::Virtio { queues: 2 }, None)],
        boot_limit: Duration::from_secs(150),
    };
    let mut g = boot("zoolane", &spec);
    let bin = g.install(std::path::Path::new(BIN)).unwrap();
    g.sh_ok("ip link set eth0 up", T).unwrap();
    g.sh_ok("chroot /host ethtool -L eth0 combined 1", T)
        .unwrap();
    g.sh_ok(
        &format!(
            "chroot /host {bin} bench udp-echo server --listen 0.0.0.0:4321 --duration 600 > /x/srv.log 2>&1 &"
        ),
        T,
    )
    .unwrap();
    g.sh_ok(
        "i=0; while ! chroot /host ss -Hlun 'sport = :4321' | grep -q .; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done",
        T,
    )
    .unwrap();
    let napi = |g: &mut ZooGuest| -> netsteer_host::nic::NapiView {
        let (rc, json) = ns(g, &bin, &["show", "--json", "--dev", "eth0"]);
        assert_eq!(rc, 0, "{json}");
        let v: HostView = serde_json::from_str(&json).unwrap();
        v.nic("eth0")
            .unwrap()
            .napis
            .iter()
            .find(|n| n.rx_queues.contains(&0))
            .cloned()
            .expect("rx-0's NAPI")
    };
    let server_allowed = |g: &mut ZooGuest| {
        g.sh_ok(
            "grep Cpus_allowed_list /proc/$(chroot /host pgrep -f 'udp-echo [s]erver')/status",
            T,
        )
        .unwrap()
    };
    let before = (napi(&mut g), server_allowed(&mut g));
    assert_eq!(before.0.threaded, Some(0), "{:?}", before.0);
    let apply = [
        "lane",
        "apply",
        "--name",
        "poll",
        "--dev",
        "eth0",
        "--udp",
        "4321",
        "--cpu",
        "1",
        "--mode",
        "threaded-poll",
        "--poll-cpu",
        "2",
        "--state-dir",
        "/tmp/lanes",
    ];
    let (rc, out) = ns(&mut g, &bin, &apply);
    assert_eq!(rc, 0, "{out}");
    let n = napi(&mut g);
    assert_eq!(n.threaded, Some(2), "{n:?}");
    let t = n.thread.as_ref().expect("a kthread polls the lane's NAPI");
    assert_eq!(
        t.allowed.known().map(|c| c.to_list()),
        Some("2".into()),
        "{n:?}"
    );
    assert!(
        server_allowed(&mut g).trim().ends_with('1'),
        "the service on --cpu 1"
    );
    let (rc, out) = ns(
        &mut g,
        &bin,
        &["lane", "remove", "poll", "--state-dir", "/tmp/lanes"],
    );
    assert_eq!(rc, 0, "{out}");
    let n = napi(&mut g);
    assert_eq!((n.threaded, n.thread.is_none()), (Some(0), true), "{n:?}");
    assert_eq!(server_allowed(&mut g), before.1);
}

/// Seed 002's receive memory, observed on a real driver's page pools: virtio_net on Debian's
/// 7.3 registers its receive queue's page pool with the device. At each step `show --json`'s
/// pools equal what the tests' own netlink reader (page_pools.py, run in the guest) dumps:
/// the pool and its queue, pages and bytes in flight, and its counters where the guest
/// kernel has CONFIG_PAGE_POOL_STATS (said unavailable, never zero, where it has not); a ring
/// resize (`ethtool -G rx 128`) hands the ring's pages back to the pool and takes them out
/// again, which both readers see move the same way; the text says the same numbers.
#[test]
fn page_pools_are_shown_as_the_kernel_lists_them() {
    if !usable() {
        return;
    }
    let mut g = boot("zoopool", &one_virtio_on_7_3());
    let bin = g.install(std::path::Path::new(BIN)).unwrap();
    std::fs::write(
        g.guest.share_dir().join("page_pools.py"),
        common::pools::READER,
    )
    .unwrap();
    g.sh_ok("chroot /host ip link set eth0 up", T).unwrap();
    let ifindex: u32 = g
        .sh_ok("cat /sys/class/net/eth0/ifindex", T)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Both readings, netsteer's then the reader's, with no traffic moving pages in between.
    let look = |g: &mut ZooGuest| -> (netsteer_host::nic::Nic, serde_json::Value) {
        let (rc, json) = ns(g, &bin, &["show", "--json", "--dev", "eth0"]);
        assert_eq!(rc, 0, "{json}");
        let v: HostView = serde_json::from_str(&json).unwrap();
        let nic = v.nic("eth0").unwrap().clone();
        let out = g
            .sh_ok("chroot /host python3 /tmp/netsteer-x/page_pools.py", T)
            .unwrap();
        (nic, serde_json::from_str(out.trim()).unwrap())
    };
    let (nic, reader) = look(&mut g);
    assert!(
        common::pools::agree(&nic, ifindex, &reader) >= 1,
        "{reader}"
    );
    let pools = common::pools::shown(&nic).clone();
    let rx0 = nic.rx_queues[0].page_pools.clone().unwrap();
    assert_eq!(rx0.len(), 1, "rx-0 is fed by one pool: {pools:?}");
    let pool = pools.pools.iter().find(|p| p.id == rx0[0]).unwrap().clone();
    assert!(pool.inflight.unwrap() > 0, "the ring holds pages: {pool:?}");
    let counted = reader["stats"].is_array();
    eprintln!(
        "guest page pool {} on rx-0: {:?} pages in flight, counters {}",
        pool.id,
        pool.inflight,
        if counted { "built" } else { "not built" }
    );
    let (_, text) = ns(&mut g, &bin, &["show", "--dev", "eth0"]);
    let line = format!(
        "page pool {:<5} rx-0  inflight {} pages {} bytes",
        pool.id,
        pool.inflight.unwrap(),
        pool.inflight_mem.unwrap()
    );
    assert!(text.contains(&line), "{line:?} in\n{text}");
    if !counted {
        assert!(text.contains("page pool counters unavailable"), "{text}");
    }
    // A ring resize: the driver gives the ring's pages back and refills it from the pool.
    g.sh_ok("chroot /host ethtool -G eth0 rx 128", T).unwrap();
    let (nic, reader) = look(&mut g);
    common::pools::agree(&nic, ifindex, &reader);
    let after = common::pools::shown(&nic)
        .pools
        .iter()
        .find(|p| p.id == pool.id)
        .cloned()
        .expect("the same pool after a resize");
    if counted {
        let (b, a) = (pool.stats.clone().unwrap(), after.stats.clone().unwrap());
        assert!(
            a.recycled().unwrap() > b.recycled().unwrap_or(0)
                && a.allocated().unwrap() > b.allocated().unwrap(),
            "{b:?} → {a:?}"
        );
    }
    assert_eq!(
        nic.settings.as_ref().unwrap().rings.known().unwrap().rx,
        Some(128)
    );
}
