//! `netsteer lane`'s plan on recorded hosts: what the lane takes (queue, IRQ, RPS, XPS, the
//! queue's NAPI, the service's threads), what it keeps off the lane's CPU, and every request
//! refused before anything is written, naming the flag. Applied to a copy of a tree and rolled
//! back, the tree is byte-identical again.

use netsteer_host::sockets::Proto;
use netsteer_host::{CpuSet, HostFs, HostView, read_host};
use netsteer_nic::{NicBackend, TreeNic};
use netsteer_steering::model::planner::lane::{
    LaneClaim, LaneError, LaneMode, LaneProcess, LaneSpec, ServiceRef, plan_lane,
};
use netsteer_steering::tune::{
    Action, ApplyOptions, HostBackend, Item, ItemKind, Plan, Target, apply, rollback,
};
use netsteer_steering::tune::{ApplyStatus, RollbackStatus};
use std::fs;
use std::path::Path;

mod common;
use common::{contents, copy_tree, fixture};

fn view_of(root: &Path) -> HostView {
    let fs = HostFs::open(root).unwrap();
    let nic = TreeNic::new(root);
    let settings = |n: &str| nic.settings(n);
    read_host(&fs, Some(&settings))
}

fn spec(dev: &str, cpu: u32, mode: LaneMode) -> LaneSpec {
    LaneSpec {
        name: "echo".into(),
        dev: dev.into(),
        proto: Proto::Udp,
        port: 4321,
        cpu,
        queue: None,
        mode,
        rss_buckets: Vec::new(),
        device_coalesce: false,
        // Most fixture trees cannot tell whether irqbalance ran (no process list), and a lane
        // there is refused unless told to stop it; the irqbalance test asks for false.
        stop_irqbalance: true,
        service: ServiceRef::Port,
        poll_cpu: None,
    }
}

fn service() -> Vec<LaneProcess> {
    vec![LaneProcess {
        pid: 4242,
        start: 777,
        comm: "echo-server".into(),
        allowed: Some(CpuSet::parse_list("0-15", None).unwrap()),
    }]
}

fn item<'a>(p: &'a Plan, id: &str) -> &'a Item {
    p.items
        .iter()
        .find(|i| i.id == id)
        .unwrap_or_else(|| panic!("no item {id} in {:#?}", p.items))
}

fn list(s: &str) -> CpuSet {
    CpuSet::parse_list(s, None).unwrap()
}

fn mask(s: &str) -> CpuSet {
    CpuSet::parse_mask(s).unwrap()
}

/// ixgbe on 6.13 (n-tuple filters off but changeable, NAPIs linked to queues): the whole
/// recipe on rx-7 and CPU 3, whose own queue (rx/tx-3) moves off it.
#[test]
fn an_ixgbe_lane_takes_its_queue_and_cpu_and_keeps_the_rest_off() {
    let view = view_of(&fixture("ixgbe-napi-16cpu"));
    let p = plan_lane(
        &view,
        &spec("eth0", 3, LaneMode::Suspend),
        &service(),
        &[],
        false,
    )
    .unwrap();

    // Steering: both rules of the lane's protocol to rx-7, the feature on, rx-7 out of RSS.
    assert_eq!(item(&p, "nic/eth0/feature/ntuple-filters").desired, "1");
    for proto in ["udp4", "udp6"] {
        let r = item(&p, &format!("nic/eth0/ntuple/{proto}-dst-port-4321"));
        assert_eq!(
            r.desired,
            format!("flow-type {proto} dst-port 4321 action 7")
        );
    }
    assert!(!p.items.iter().any(|i| i.id.contains("tcp4")));
    let table: Vec<u32> = item(&p, "nic/eth0/rss/indirection")
        .desired
        .split(' ')
        .map(|q| q.parse().unwrap())
        .collect();
    assert_eq!(table.len(), 512);
    assert!(!table.contains(&7) && (0..7).all(|q| table.iter().filter(|t| **t == q).count() >= 73));

    // The lane's IRQ on CPU 3; the queue that was there moves off, nothing else lands on 3.
    assert_eq!(item(&p, "irq/68").desired, "3");
    let moved = item(&p, "irq/64");
    assert_eq!(moved.current.as_deref(), Some("3"));
    assert!(!list(&moved.desired).contains(3) && !list(&moved.desired).is_empty());
    for i in p
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::IrqAffinity && i.id != "irq/68")
    {
        assert!(!list(&i.desired).contains(3), "{i:#?}");
    }
    // No RPS after the lane's queue, none onto its CPU; replies on tx-7 from CPU 3 only.
    assert!(mask(&item(&p, "rps/eth0/rx-7").desired).is_empty());
    assert_eq!(mask(&item(&p, "xps/eth0/tx-7").desired), list("3"));
    for i in p
        .items
        .iter()
        .filter(|i| matches!(i.kind, ItemKind::Rps | ItemKind::Xps))
    {
        if !i.id.ends_with("-7") {
            assert!(!mask(&i.desired).contains(3), "{i:#?}");
        }
    }
    // Suspend on rx-7's NAPI only (8200 serves rx/tx-7 in this tree).
    let napi: Vec<&Item> = p
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Napi)
        .collect();
    assert_eq!(napi.len(), 3, "{napi:#?}");
    let napi7 = view
        .nic("eth0")
        .unwrap()
        .settings
        .as_ref()
        .unwrap()
        .netdev()
        .unwrap()
        .queues
        .iter()
        .find(|q| q.id == 7 && q.kind == netsteer_host::netdev::QueueType::Rx)
        .and_then(|q| q.napi_id)
        .unwrap();
    for n in &napi {
        assert!(
            n.id.starts_with(&format!("nic/eth0/napi/{napi7}/")),
            "{n:#?}"
        );
    }
    assert_eq!(
        item(&p, &format!("nic/eth0/napi/{napi7}/irq-suspend-timeout")).desired,
        "20000000"
    );
    // The service pinned, and told what to set (coalescing is device-wide: said, not done).
    let pin = item(&p, "process/4242");
    assert_eq!(pin.desired, "3");
    assert_eq!(
        pin.target,
        Target::Process {
            pid: 4242,
            start: 777
        }
    );
    assert!(
        p.notes.iter().any(|n| n.contains("EPIOCSPARAMS")),
        "{:#?}",
        p.notes
    );
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("rx-usecs 50") && n.contains("--device-coalesce")),
        "{:#?}",
        p.notes
    );
    let mut coalesce = spec("eth0", 3, LaneMode::Suspend);
    coalesce.device_coalesce = true;
    let p2 = plan_lane(&view, &coalesce, &service(), &[], false).unwrap();
    assert_eq!(item(&p2, "nic/eth0/coalesce/rx-usecs").desired, "0");
}

/// Applied to a copy of the tree (a tree's processes are never touched: that item is
/// skipped), read back, and rolled back byte for byte.
#[test]
fn a_lane_applies_to_a_tree_and_rolls_back_byte_for_byte() {
    let dir = copy_tree(&fixture("ixgbe-napi-16cpu"));
    let state = tempfile::tempdir().unwrap();
    let before = contents(dir.path());
    let view = view_of(dir.path());
    let p = plan_lane(
        &view,
        &spec("eth0", 3, LaneMode::BusyPoll),
        &service(),
        &[],
        false,
    )
    .unwrap();
    assert!(matches!(item(&p, "process/4242").action, Action::Skip(_)));
    let fs = HostFs::open(dir.path()).unwrap();
    let nic = TreeNic::new(dir.path());
    let backend = HostBackend { fs, nic: &nic };
    let root = fs::canonicalize(dir.path()).unwrap().display().to_string();
    let r = apply(
        &p,
        &root,
        &backend,
        state.path(),
        &mut || Ok(p.clone()),
        &ApplyOptions::default(),
    )
    .unwrap();
    assert_eq!(r.status, ApplyStatus::Applied, "{r:#?}");
    let after = view_of(dir.path());
    let again = plan_lane(
        &after,
        &spec("eth0", 3, LaneMode::BusyPoll),
        &service(),
        &[],
        false,
    )
    .unwrap();
    let left: Vec<&Item> = again
        .items
        .iter()
        .filter(|i| i.action == Action::Change)
        .collect();
    assert!(
        left.is_empty(),
        "a lane applied plans nothing more: {left:#?}"
    );
    let rb = rollback(Path::new(&r.journal), &root, &backend).unwrap();
    assert_eq!(rb.status, RollbackStatus::Restored, "{rb:#?}");
    let after = contents(dir.path());
    let differ: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(differ.is_empty(), "not as before: {differ:?}");
}

/// Another lane of eth0 on CPU `cpu` and rx-`queue`.
fn claim(name: &str, cpu: u32, queue: u32) -> LaneClaim {
    LaneClaim {
        name: name.into(),
        dev: "eth0".into(),
        cpu,
        queue,
        poll_cpu: None,
    }
}

/// The second lane of the two-lane tests: eth0 rx-6 on CPU 6, port 5000.
fn second_spec() -> LaneSpec {
    let mut s = spec("eth0", 6, LaneMode::Irq);
    s.queue = Some(6);
    s.port = 5000;
    s
}

/// Two lanes on one device: the second keeps the first's queue out of RSS and leaves its IRQ,
/// RPS and XPS where the first put them.
#[test]
fn a_second_lane_leaves_the_first_alone() {
    let view = view_of(&fixture("ixgbe-napi-16cpu"));
    let first = claim("first", 7, 7);
    let s = second_spec();
    let p = plan_lane(&view, &s, &service(), &[first], false).unwrap();
    let table = &item(&p, "nic/eth0/rss/indirection").desired;
    assert!(!table.split(' ').any(|q| q == "6" || q == "7"), "{table}");
    assert!(
        !p.items.iter().any(|i| i.id == "irq/68"),
        "the first lane's IRQ stays"
    );
    assert_eq!(item(&p, "irq/67").desired, "6");
    for i in p
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::IrqAffinity && i.id != "irq/67")
    {
        assert!(
            !list(&i.desired).contains(6) && !list(&i.desired).contains(7),
            "{i:#?}"
        );
    }
    assert!(
        !p.items
            .iter()
            .any(|i| i.id.ends_with("/rx-7") || i.id.ends_with("/tx-7"))
    );
}

/// Two lanes steered by RSS bucket on one device: the second's table keeps the buckets the
/// first's queue has now (its own `--rss-bucket`), or it would move the first lane's flow off
/// its queue (and a holder reasserting each would fight the other's).
#[test]
fn a_second_bucket_lane_keeps_the_first_lanes_buckets() {
    let mut view = view_of(&fixture("ixgbe-napi-16cpu"));
    let nic = view.nics.iter_mut().find(|n| n.name == "eth0").unwrap();
    let s = nic.settings.as_mut().unwrap();
    let rss = match &mut s.rss {
        netsteer_host::field::Field::Known(r) => r,
        other => panic!("no table in the fixture: {other:?}"),
    };
    // As the first lane left it: bucket 3 alone on its queue 7.
    let n = rss.indirection.len() as u32;
    rss.indirection = (0..n).map(|i| if i == 3 { 7 } else { i % 7 }).collect();
    let first = claim("first", 7, 7);
    let mut s = second_spec();
    s.rss_buckets = vec![5];
    let p = plan_lane(&view, &s, &service(), &[first], false).unwrap();
    let table: Vec<&str> = item(&p, "nic/eth0/rss/indirection")
        .desired
        .split(' ')
        .collect();
    assert_eq!(table.len(), n as usize);
    for (i, q) in table.iter().enumerate() {
        let want_here = match i {
            3 => Some("7"),
            5 => Some("6"),
            _ => None,
        };
        match want_here {
            Some(w) => assert_eq!(*q, w, "bucket {i}: {table:?}"),
            None => assert!(*q != "6" && *q != "7", "bucket {i}: {table:?}"),
        }
    }
}

fn refused(view: &HostView, s: &LaneSpec, others: &[LaneClaim]) -> LaneError {
    plan_lane(view, s, &service(), others, false).unwrap_err()
}

#[test]
fn bad_requests_are_refused_naming_the_flag() {
    let view = view_of(&fixture("ixgbe-napi-16cpu"));
    let cases: Vec<(LaneSpec, Vec<LaneClaim>, &str)> = vec![
        (
            spec("eth0", 99, LaneMode::Irq),
            vec![],
            "--cpu 99: no such online CPU",
        ),
        (spec("eth9", 3, LaneMode::Irq), vec![], "--dev eth9"),
        (
            spec("eth0", 3, LaneMode::Irq),
            vec![claim("db", 3, 5)],
            "--cpu 3: lane \"db\" holds it",
        ),
        (
            spec("eth0", 3, LaneMode::Irq),
            vec![claim("db", 5, 7)],
            "--queue 7: lane \"db\" holds rx-7",
        ),
        (
            LaneSpec {
                queue: Some(8),
                ..spec("eth0", 3, LaneMode::Irq)
            },
            vec![],
            "--queue 8: eth0 has 8 rx queue(s)",
        ),
        (
            LaneSpec {
                name: "../x".into(),
                ..spec("eth0", 3, LaneMode::Irq)
            },
            vec![],
            "--name",
        ),
        (
            spec("eth0", 3, LaneMode::ThreadedPoll),
            vec![],
            "--mode threaded-poll: threaded busy polling (napi threaded = busy-poll) is in Linux 6.19 and later; this kernel is 6.13",
        ),
    ];
    for (s, others, want) in cases {
        let e = refused(&view, &s, &others).to_string();
        assert!(e.contains(want), "{e}\nwanted: {want}");
    }
    // Nobody serves the port.
    let e = plan_lane(&view, &spec("eth0", 3, LaneMode::Irq), &[], &[], false)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--udp 4321: nobody serves it"), "{e}");
}

#[test]
fn an_isolated_cpu_and_the_last_cpu_near_the_nic_are_refused() {
    let dir = copy_tree(&fixture("ixgbe-napi-16cpu"));
    fs::write(
        dir.path().join("sys/devices/system/cpu/isolated"),
        "12-15\n",
    )
    .unwrap();
    let view = view_of(dir.path());
    let e = refused(&view, &spec("eth0", 13, LaneMode::Irq), &[]).to_string();
    assert!(
        e.contains("--cpu 13: the CPU is set aside for something else (isolated 12-15)"),
        "{e}"
    );
    // CPUs 0-11 are the NIC's usable ones: lanes on 0-10 leave 11 alone for everything else.
    let others: Vec<LaneClaim> = (0..11)
        .map(|c| LaneClaim {
            name: format!("l{c}"),
            dev: format!("other{c}"),
            cpu: c,
            queue: 0,
            poll_cpu: None,
        })
        .collect();
    let e = refused(&view, &spec("eth0", 11, LaneMode::Irq), &others).to_string();
    assert!(
        e.contains("--cpu 11: it is the last CPU left near eth0"),
        "{e}"
    );
}

/// mlx5 with irqbalance running: refused unless told to stop it, which becomes an item when
/// it runs in systemd's unit; one outside it (this tree kept only its name) cannot be stopped
/// so, and the lane is refused saying why.
#[test]
fn irqbalance_is_stopped_only_when_asked() {
    let mut view = view_of(&fixture("mlx5-128cpu"));
    let leave = LaneSpec {
        stop_irqbalance: false,
        ..spec("ens1f0np0", 5, LaneMode::Irq)
    };
    let e = refused(&view, &leave, &[]).to_string();
    assert!(e.contains("--irqbalance stop"), "{e}");
    let s = spec("ens1f0np0", 5, LaneMode::Irq);
    let e = plan_lane(&view, &s, &service(), &[], true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside systemd's irqbalance.service"), "{e}");
    if let netsteer_host::Field::Known(ib) = &mut view.irqbalance {
        ib.unit = true;
    }
    let p = plan_lane(&view, &s, &service(), &[], true).unwrap();
    assert_eq!(item(&p, "service/irqbalance").desired, "inactive");
    // igb-6.12's snapshot kept no process's name: irqbalance may be running, and is taken as
    // running (issue 72, class 1).
    let view = view_of(&fixture("igb-6.12"));
    let leave = LaneSpec {
        stop_irqbalance: false,
        ..spec("eth0", 1, LaneMode::Irq)
    };
    let e = refused(&view, &leave, &[]).to_string();
    assert!(
        e.starts_with("irqbalance may be running (its state is unknown")
            && e.contains("--irqbalance stop"),
        "{e}"
    );
}

/// igb on 6.12: no n-tuple filters, so the lane needs the flow's RSS buckets; given them, they
/// alone go to the lane's queue. Suspension is not there before 6.13: the plan says so and
/// uses the device-wide deferral instead.
#[test]
fn without_ntuple_filters_the_lane_needs_rss_buckets() {
    let dir = copy_tree(&fixture("igb-6.12"));
    let view = view_of(dir.path());
    let nq = view.nic("eth0").unwrap().rx_queues.len() as u32;
    assert!(nq >= 2, "igb-6.12 has {nq} rx queues");
    let e = refused(&view, &spec("eth0", 1, LaneMode::Irq), &[]).to_string();
    assert!(
        e.contains("--dev eth0: nothing would steer udp port 4321 to rx-1")
            && e.contains("--rss-bucket"),
        "{e}"
    );
    let mut s = spec("eth0", 1, LaneMode::Suspend);
    s.rss_buckets = vec![5, 77];
    let p = plan_lane(&view, &s, &service(), &[], false).unwrap();
    let table: Vec<&str> = item(&p, "nic/eth0/rss/indirection")
        .desired
        .split(' ')
        .collect();
    for (i, q) in table.iter().enumerate() {
        assert_eq!(*q == "1", i == 5 || i == 77, "bucket {i} → {q}");
    }
    s.rss_buckets = vec![128];
    let e = refused(&view, &s, &[]).to_string();
    assert!(e.starts_with("--rss-bucket: bucket 128"), "{e}");
}

#[test]
fn before_6_13_suspend_becomes_device_wide_deferral_and_says_so() {
    let view = view_of(&fixture("igb-6.12"));
    let mut s = spec("eth0", 1, LaneMode::Suspend);
    s.rss_buckets = vec![5];
    let p = plan_lane(&view, &s, &service(), &[], false).unwrap();
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("irq-suspend-timeout is per-NAPI only") && n.contains("6.12")),
        "{:#?}",
        p.notes
    );
    assert_eq!(item(&p, "napi/eth0/napi_defer_hard_irqs").desired, "2");
    assert!(
        item(&p, "napi/eth0/gro_flush_timeout")
            .reason
            .contains("every queue")
    );
    assert!(!p.items.iter().any(|i| i.id.contains("irq-suspend")));
}

#[test]
fn a_lane_spec_round_trips_and_old_threaded_records_still_read() {
    let s = spec("eth0", 3, LaneMode::ThreadedPoll);
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains("\"mode\":\"threaded-poll\""), "{text}");
    assert_eq!(serde_json::from_str::<LaneSpec>(&text).unwrap(), s);
    let n: netsteer_host::netdev::Napi =
        serde_json::from_str(r#"{"id":1,"irq":null,"pid":null,"defer_hard_irqs":0,"gro_flush_timeout_ns":0,"irq_suspend_timeout_ns":0,"threaded":true}"#).unwrap();
    assert_eq!(n.threaded, Some(1));
    let n: netsteer_host::netdev::Napi = serde_json::from_str(r#"{"id":1,"threaded":2}"#).unwrap();
    assert_eq!(n.threaded, Some(2));
}

/// A 7.3 guest (recorded from the VM lab) has threaded busy polling: the lane sets its NAPI's
/// `threaded` to 2 (busy-poll) and says the kthread wants a CPU of its own; 6.12 refuses it.
#[test]
fn threaded_poll_where_the_kernel_has_it() {
    let view = view_of(&fixture("zoo-2node-5nic-7.3"));
    let mut s = spec("eth0", 1, LaneMode::ThreadedPoll);
    let e = refused(&view, &s, &[]).to_string();
    assert!(
        e.starts_with("--poll-cpu: --mode threaded-poll needs it"),
        "{e}"
    );
    s.poll_cpu = Some(1);
    let e = refused(&view, &s, &[]).to_string();
    assert!(e.contains("the service's CPU"), "{e}");
    // Node 0 has CPUs 0-1: the lane's two would leave eth0's node nothing.
    s.poll_cpu = Some(0);
    let e = refused(&view, &s, &[]).to_string();
    assert!(e.contains("the last CPU left near eth0"), "{e}");
    s.poll_cpu = Some(2);
    let p = plan_lane(&view, &s, &service(), &[], false).unwrap();
    let t = item(&p, "nic/eth0/napi/8193/threaded");
    assert_eq!(t.desired, "2");
    let k = item(&p, "napi-thread/eth0/8193");
    assert_eq!((k.desired.as_str(), k.current.as_deref()), ("2", Some("")));
    assert_eq!(
        k.target,
        Target::NapiThread {
            dev: "eth0".into(),
            napi: 8193
        }
    );
    assert!(
        k.phase() > t.phase(),
        "the kthread is pinned after it exists"
    );
    // Another lane's poll CPU is held like its service CPU.
    let other = LaneClaim {
        name: "db".into(),
        dev: "eth1".into(),
        cpu: 0,
        queue: 0,
        poll_cpu: Some(2),
    };
    let e = refused(&view, &s, &[other]).to_string();
    assert!(e.contains("--poll-cpu: CPU 2: lane \"db\" holds it"), "{e}");
    let mut irq = spec("eth0", 1, LaneMode::Irq);
    irq.poll_cpu = Some(0);
    let e = refused(&view, &irq, &[]).to_string();
    assert!(e.contains("only --mode threaded-poll"), "{e}");
    let old = view_of(&fixture("igb-6.12"));
    let e = refused(&old, &spec("eth0", 1, LaneMode::ThreadedPoll), &[]).to_string();
    assert!(
        e.contains("Linux 6.19 and later; this kernel is 6.12"),
        "{e}"
    );
}

/// The holder looks at its service every 0.2 s; between full /proc scans (every
/// `FULL_SCAN_EVERY` looks) it trusts what it saw while the port's sockets and each process
/// are the same. Shown on a tree: with the server's descriptor table gone from the tree, the
/// holder still sees it until the next full scan, which then finds nobody; a new socket on the
/// port or a restarted process (a new start time) forces the full scan at once.
#[test]
fn the_holder_scans_proc_only_when_the_service_may_have_changed() {
    use netsteer_steering::lane::{FULL_SCAN_EVERY, Lanes};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    };
    let head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n";
    // Port 4321 is 10E1.
    let udp = |inodes: &[u64]| {
        let mut t = head.to_string();
        for (i, ino) in inodes.iter().enumerate() {
            t += &format!(
                "  {i}: 00000000:10E1 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 {ino} 2 0000000000000000 0\n"
            );
        }
        t
    };
    write("proc/net/udp", &udp(&[4242]));
    let process = |pid: u32, start: u64| {
        write(
            &format!("proc/{pid}/stat"),
            &format!(
                "{pid} (echo) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 1 1 0 0 20 0 1 0 {start} 1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
            ),
        );
        write(&format!("proc/{pid}/comm"), "echo\n");
        write(
            &format!("proc/{pid}/status"),
            "Name:\techo\nPPid:\t1\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t0-3\n",
        );
    };
    process(77, 5000);
    let fd = |pid: u32, ino: u64| {
        let d = root.join(format!("proc/{pid}/fd"));
        fs::create_dir_all(&d).unwrap();
        let _ = fs::remove_file(d.join("3"));
        std::os::unix::fs::symlink(format!("socket:[{ino}]"), d.join("3")).unwrap();
    };
    fd(77, 4242);
    let lanes = Lanes::open(HostFs::new(root), false, Some(root.join("state"))).unwrap();
    let s = spec("eth0", 1, LaneMode::Irq);
    let pids = |seen: &mut Option<_>| -> Vec<u32> {
        lanes
            .service_seen(&s, seen)
            .unwrap()
            .iter()
            .map(|p| p.pid)
            .collect()
    };
    let mut seen = None;
    assert_eq!(pids(&mut seen), vec![77]);
    // Its descriptors vanish from the tree: not scanned again until the full scan is due.
    fs::remove_dir_all(root.join("proc/77/fd")).unwrap();
    for _ in 0..FULL_SCAN_EVERY {
        assert_eq!(pids(&mut seen), vec![77]);
    }
    assert_eq!(pids(&mut seen), Vec::<u32>::new(), "the full scan is due");
    // Nobody seen: every look scans (a socket whose owner was not found is not trusted).
    fd(77, 4242);
    assert_eq!(pids(&mut seen), vec![77]);
    // A new socket on the port: scanned at once.
    assert_eq!(pids(&mut seen), vec![77]);
    process(88, 6000);
    fd(88, 4343);
    write("proc/net/udp", &udp(&[4242, 4343]));
    assert_eq!(pids(&mut seen), vec![77, 88]);
    // The process restarted under the same pid (a new start time): scanned at once.
    fs::remove_dir_all(root.join("proc/88/fd")).unwrap();
    process(88, 7000);
    assert_eq!(pids(&mut seen), vec![77]);
}

/// A host tree the lane's service readers look at: a copy of the ixgbe fixture (so lanes
/// plan and apply on it), its UDP table written row by row, processes with their parents,
/// uids and descriptors.
struct Served {
    dir: tempfile::TempDir,
}

impl Served {
    fn new() -> Served {
        Served {
            dir: copy_tree(&fixture("ixgbe-napi-16cpu")),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.root().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// `/proc/net/udp` and `udp6` with these sockets on UDP 4321: (uid, hex local address as
    /// the kernel prints it, inode).
    fn udp(&self, rows: &[(u32, &str, u64)]) {
        let head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n";
        let (mut v4, mut v6) = (head.to_string(), head.to_string());
        for (i, (uid, addr, ino)) in rows.iter().enumerate() {
            let zero = "0".repeat(addr.len());
            let line = format!(
                "  {i}: {addr}:10E1 {zero}:0000 07 00000000:00000000 00:00000000 00000000 {uid:>5}        0 {ino} 2 0000000000000000 0\n"
            );
            if addr.len() == 8 { &mut v4 } else { &mut v6 }.push_str(&line);
        }
        self.write("proc/net/udp", &v4);
        self.write("proc/net/udp6", &v6);
    }

    /// A process: its stat (start time), comm, status (parent, uids, allowed CPUs) and one
    /// socket descriptor per inode given, after `other_fds` descriptors that are not sockets.
    fn process(&self, pid: u32, ppid: u32, uid: u32, start: u64, inodes: &[u64], other_fds: usize) {
        self.write(
            &format!("proc/{pid}/stat"),
            &format!(
                "{pid} (echo) S {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 1 1 0 0 20 0 1 0 {start} 1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
            ),
        );
        self.write(&format!("proc/{pid}/comm"), "echo\n");
        self.write(
            &format!("proc/{pid}/status"),
            &format!(
                "Name:\techo\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCpus_allowed_list:\t0-15\n"
            ),
        );
        let d = self.root().join(format!("proc/{pid}/fd"));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        for n in 0..other_fds {
            std::os::unix::fs::symlink("/dev/null", d.join(n.to_string())).unwrap();
        }
        for (i, ino) in inodes.iter().enumerate() {
            std::os::unix::fs::symlink(
                format!("socket:[{ino}]"),
                d.join((other_fds + i).to_string()),
            )
            .unwrap();
        }
    }

    fn lanes(&self) -> netsteer_steering::lane::Lanes {
        netsteer_steering::lane::Lanes::open(
            HostFs::new(self.root()),
            true,
            Some(self.root().join("var/lib/netsteer")),
        )
        .unwrap()
    }
}

/// The service on 0.0.0.0:4321, as root (a tree's sockets: the kernel prints 0.0.0.0 as
/// 00000000; `[::]` as 32 zeros; 127.0.0.2 as 0200007F on a little-endian host).
const ANY4: &str = "00000000";
const ANY6: &str = "00000000000000000000000000000000";
const LO2: &str = "0200007F";

fn pids_of(p: &[LaneProcess]) -> Vec<u32> {
    p.iter().map(|p| p.pid).collect()
}

/// Issue 77 on a tree: the owner recorded at the apply is the service from then on. Another
/// uid's socket on the port (`[::]`, or the service's family on another address) and the
/// service's own uid on an address it was not planned for are not the service's; a port held
/// by two uids at a first apply is refused, naming them; a port held only by strangers after
/// the service left is said so, naming both. The uid column's parse and the socket owner's
/// search are the host's (`crates/host/src/sockets.rs`); the live attack is
/// `crates/cli/tests/lane.rs`'s `a_stranger_*` tests.
#[test]
fn only_the_recorded_owners_sockets_are_the_service() {
    use netsteer_steering::tune::ApplyOptions;
    let t = Served::new();
    let s = spec("eth0", 3, LaneMode::Irq);
    t.udp(&[(0, ANY4, 100), (65534, ANY6, 200)]);
    t.process(77, 1, 0, 5000, &[100], 3);
    t.process(66, 1, 65534, 5001, &[200], 3);
    let lanes = t.lanes();
    let e = lanes.plan(&s).unwrap_err().to_string();
    assert!(
        e.contains(
            "--udp 4321: sockets of 2 users hold the port (uid 0 on 0.0.0.0, uid 65534 on ::)"
        ) && e.contains("--unit or --cgroup"),
        "{e}"
    );
    // The stranger gone, the lane is applied and its owner recorded.
    t.udp(&[(0, ANY4, 100)]);
    let r = lanes.apply(&s, &ApplyOptions::default()).unwrap();
    assert_eq!(r.status, ApplyStatus::Applied);
    let owner = lanes.owner("echo").unwrap().unwrap();
    assert_eq!((owner.uid, owner.port), (0, 4321));
    assert_eq!(
        owner
            .addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>(),
        ["0.0.0.0"]
    );
    // Strangers beside it: not the service, whatever their family or address.
    let mut cases = vec![(65534, ANY6), (0, ANY6)];
    if cfg!(target_endian = "little") {
        cases.extend([(65534, LO2), (0, LO2)]);
    }
    for (uid, addr) in cases {
        t.udp(&[(0, ANY4, 100), (uid, addr, 200)]);
        t.process(66, 1, uid, 5001, &[200], 3);
        assert_eq!(
            pids_of(&lanes.service(&s).unwrap()),
            [77],
            "uid {uid} on {addr}"
        );
        // The service gone, a stranger alone on the port is nobody's service.
        t.udp(&[(uid, addr, 200)]);
        assert!(lanes.service(&s).unwrap().is_empty(), "uid {uid} on {addr}");
    }
    t.udp(&[(65534, ANY6, 200)]);
    t.process(66, 1, 65534, 5001, &[200], 3);
    let e = lanes.plan(&s).unwrap_err().to_string();
    assert!(
        e.contains("held only by sockets that are not the lane's service (uid 65534 on ::); its service is uid 0 on 0.0.0.0")
            && e.contains("netsteer lane remove echo"),
        "{e}"
    );
    // Forgotten with the lane: the next apply records whoever serves then.
    lanes.remove("echo", true).unwrap();
    assert!(lanes.owner("echo").unwrap().is_none());
}

/// A server that binds as root and forks its workers under another uid (nginx's way) hands
/// them its socket: a holder's children are searched too, and they are the service.
#[test]
fn a_root_servers_workers_under_another_uid_are_its_service() {
    let t = Served::new();
    t.udp(&[(0, ANY4, 100)]);
    t.process(77, 1, 0, 5000, &[100], 3);
    t.process(78, 77, 33, 5001, &[100], 3);
    t.process(79, 77, 33, 5002, &[], 3);
    // Another uid-33 process, not a child, holding nothing of the service: not it.
    t.process(90, 1, 33, 5003, &[555], 3);
    let lanes = t.lanes();
    assert_eq!(
        pids_of(&lanes.service(&spec("eth0", 3, LaneMode::Irq)).unwrap()),
        [77, 78]
    );
}

/// Issue 77's second half: what a look costs is the lane's own, whatever others do. Ten
/// processes of another uid with 2,000 descriptors each beside the service: the search for
/// the service's holders reads the descriptors of the socket's uid's processes only. 5,000
/// rolled-back journals in the lane: a look parses one (the newest, found by its name); the
/// next rollback compacts them to the newest few, and applies and rollbacks again and again
/// keep it so. Counted work (`Lanes::work`), not time.
#[test]
fn a_holders_work_is_bounded_by_its_own_lane() {
    use netsteer_steering::lane::{HoldEvent, KEEP_JOURNALS};
    use netsteer_steering::tune::ApplyOptions;
    let t = Served::new();
    t.udp(&[(0, ANY4, 100)]);
    t.process(77, 1, 0, 5000, &[100], 5);
    for i in 0..10 {
        t.process(1000 + i, 1, 65534, 6000 + u64::from(i), &[], 2000);
    }
    let lanes = t.lanes();
    let s = spec("eth0", 3, LaneMode::Irq);
    let opts = ApplyOptions::default();
    let before = lanes.work();
    assert_eq!(pids_of(&lanes.service(&s).unwrap()), [77]);
    let w = lanes.work();
    assert_eq!(w.processes_scanned - before.processes_scanned, 1, "{w:?}");
    assert!(
        w.descriptors_scanned - before.descriptors_scanned <= 6,
        "{w:?}"
    );

    let r = lanes.apply(&s, &opts).unwrap();
    assert_eq!(r.status, ApplyStatus::Applied);
    // 5,000 older journals, each rolled back (a small one: the plan's items are not what is
    // counted), numbered below the applied one, which is renumbered above them.
    let jdir = t.root().join("var/lib/netsteer/lanes/echo/journal");
    let applied = Path::new(&r.journal);
    let text = fs::read_to_string(applied).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[0]["seq"] = 9999.into();
    let renum = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>()
    };
    fs::write(jdir.join("000000009999.jsonl"), renum(&lines)).unwrap();
    fs::remove_file(applied).unwrap();
    let mut old = lines[0].clone();
    old["plan"]["items"] = serde_json::json!([]);
    for seq in 1..=5000u64 {
        old["seq"] = seq.into();
        let end = serde_json::json!({"type": "end", "status": "rolled-back"});
        fs::write(
            jdir.join(format!("{seq:012}.jsonl")),
            renum(&[old.clone(), end]),
        )
        .unwrap();
    }
    let count = || fs::read_dir(&jdir).unwrap().count();
    assert_eq!(count(), 5001);

    // Looks while the service runs: one journal each, no descriptor read between full scans.
    let mut lane = lanes.lane("echo").unwrap();
    let w0 = lanes.work();
    for _ in 0..5 {
        let ev = lane.reconcile(&opts).unwrap();
        assert!(matches!(ev, HoldEvent::Holding), "{ev:?}");
    }
    let w = lanes.work();
    assert!(w.journals_parsed - w0.journals_parsed <= 5, "{w:?}");
    assert!(w.descriptors_scanned - w0.descriptors_scanned <= 6, "{w:?}");
    // And no Tuner (two netlink sockets on a live host) for a look that changes nothing.
    assert_eq!(w.tuners_opened, w0.tuners_opened, "{w0:?} {w:?}");

    // The service stops: rolled back, and the rolled-back journals compacted.
    t.udp(&[]);
    let ev = lane.reconcile(&opts).unwrap();
    assert!(matches!(ev, HoldEvent::RolledBack(..)), "{ev:?}");
    assert!(count() <= KEEP_JOURNALS + 1, "{} journals", count());
    // Twenty restarts: applied and rolled back each time, the journals stay few, each look
    // parses at most the few there are, and the holder's one tuner serves them all.
    let tuners = lanes.work().tuners_opened;
    for _ in 0..20 {
        t.udp(&[(0, ANY4, 100)]);
        let ev = lane.reconcile(&opts).unwrap();
        assert!(matches!(ev, HoldEvent::Applied(..)), "{ev:?}");
        t.udp(&[]);
        let w0 = lanes.work();
        let ev = lane.reconcile(&opts).unwrap();
        assert!(matches!(ev, HoldEvent::RolledBack(..)), "{ev:?}");
        let w = lanes.work();
        assert!(
            w.journals_parsed - w0.journals_parsed <= 2 * (KEEP_JOURNALS as u64 + 2) + 2,
            "{w0:?} {w:?}"
        );
        assert!(count() <= KEEP_JOURNALS + 1, "{} journals", count());
    }
    let opened = lanes.work().tuners_opened - tuners;
    assert!(opened <= 1, "{opened} tuners for 40 applies and rollbacks");
    let newest: u64 = fs::read_dir(&jdir)
        .unwrap()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()
        })
        .max()
        .unwrap();
    assert_eq!(newest, 9999 + 20, "the numbers go on from the newest kept");
}

#[path = "../../../support/live.rs"]
mod live;

/// A forked child that runs `body` (system calls only: a child of a threaded process may not
/// allocate) after taking `uid`, killed by the kernel if the test dies (PR_SET_PDEATHSIG) and
/// killed and reaped when dropped, also while a failed assertion unwinds.
struct Child {
    pid: libc::pid_t,
}

impl Child {
    /// `body` gets the child's end of a pipe whose other end is returned, to say it is ready.
    fn fork(uid: u32, body: impl FnOnce(libc::c_int)) -> (Child, std::fs::File) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe2 writes.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the child runs `body` (system calls only) and _exits; it never returns here.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: system calls on values made before fork.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent
                    || libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    libc::_exit(3);
                }
                body(fds[1]);
                loop {
                    libc::pause();
                }
            }
        }
        // SAFETY: the write end is the child's now; ours is closed so a read sees its end.
        unsafe { libc::close(fds[1]) };
        // SAFETY: the read end, owned by this File only from here.
        let ready = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        (Child { pid }, ready)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: our own child, reaped here once.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

fn read_exact(f: &mut std::fs::File, n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut b = vec![0; n];
    f.read_exact(&mut b)
        .expect("the child is gone before it was ready");
    b
}

/// Issue 77's cost, live: ten processes of uid 65534 with 2,000 open descriptors each (the
/// "other users' open descriptors" that set a holder's cost at 34 % of a core) beside a
/// service of a uid of the test's own (4242, so that no other process of the host is a
/// candidate) bound to a UDP port of its own in this network namespace. Finding the
/// service's holder reads its uid's processes only: fewer descriptors than one of the others
/// holds, where the whole-/proc search reads them all (checked too, so the setup means
/// something). Counted descriptors, not time.
#[test]
fn finding_the_service_never_reads_other_users_descriptors() {
    use netsteer_steering::lane::Lanes;
    if let Err(why) = live::root_and_tools(&[]) {
        live::cannot_run(&why);
        return;
    }
    const SERVICE_UID: u32 = 4242;
    const OTHERS: usize = 10;
    const FDS: usize = 2000;
    // What the children need, made before fork.
    let devnull = std::fs::File::open("/dev/null").unwrap();
    let null_fd = std::os::fd::AsRawFd::as_raw_fd(&devnull);
    // SAFETY: all-zero bytes are a valid sockaddr_in.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
    // SAFETY: all-zero bytes are a valid rlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: lim is a valid rlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    assert!(
        lim.rlim_max >= (FDS + 100) as libc::rlim_t,
        "RLIMIT_NOFILE's hard limit {} is below {FDS} descriptors",
        lim.rlim_max
    );
    let raised = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    let mut others = Vec::new();
    for _ in 0..OTHERS {
        let (child, mut ready) = Child::fork(65534, |w| {
            // SAFETY: system calls only (see Child::fork).
            unsafe {
                libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
                let mut ok = 1u8;
                for _ in 0..FDS {
                    if libc::dup(null_fd) < 0 {
                        ok = 0;
                    }
                }
                libc::write(w, &ok as *const u8 as *const libc::c_void, 1);
            }
        });
        assert_eq!(
            read_exact(&mut ready, 1),
            [1],
            "a child could not open {FDS} descriptors"
        );
        others.push(child);
    }
    let (service, mut ready) = Child::fork(SERVICE_UID, |w| {
        // SAFETY: system calls only (see Child::fork).
        unsafe {
            let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
            let mut a = addr;
            let mut len = std::mem::size_of_val(&a) as libc::socklen_t;
            let bound = s >= 0
                && libc::bind(s, &a as *const _ as *const libc::sockaddr, len) == 0
                && libc::getsockname(s, &mut a as *mut _ as *mut libc::sockaddr, &mut len) == 0;
            let port = if bound { a.sin_port } else { 0 };
            libc::write(w, &port as *const u16 as *const libc::c_void, 2);
        }
    });
    let port = u16::from_be(u16::from_ne_bytes(
        read_exact(&mut ready, 2).try_into().unwrap(),
    ));
    assert_ne!(port, 0, "the service could not bind a UDP port");

    let state = tempfile::tempdir().unwrap();
    let lanes = Lanes::open(HostFs::live(), false, Some(state.path().to_path_buf())).unwrap();
    let s = LaneSpec {
        port,
        ..spec("lo", 1, LaneMode::Irq)
    };
    let w0 = lanes.work();
    let found = lanes.service(&s).unwrap();
    let w = lanes.work();
    assert_eq!(pids_of(&found), [service.pid as u32], "{w:?}");
    let read = w.descriptors_scanned - w0.descriptors_scanned;
    assert!(
        read < FDS as u64,
        "{read} descriptors read to find the service (processes {}), beside {OTHERS} processes of another uid with {FDS} each",
        w.processes_scanned - w0.processes_scanned
    );
    // The search over every process (what the holder did before) reads theirs too.
    let fs = HostFs::live();
    let rows = netsteer_host::sockets::serving_rows(&fs, Proto::Udp, port).unwrap();
    let inodes = rows.iter().map(|r| r.inode).collect();
    let every: Vec<u32> = fs
        .read_dir("/proc")
        .unwrap()
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    let all = netsteer_host::sockets::socket_owners_among(&fs, &inodes, every);
    assert!(all.descriptors >= OTHERS * FDS, "{all:?}");
    drop(others);
    drop(service);
}

/// A lane applied before owners were recorded (no `owner.json`) with a stranger beside its
/// service when the new holder first looks: its owner is the uid whose sockets the processes
/// it pinned hold, not whoever holds the port, so the stranger joins neither then nor once the
/// service has stopped.
#[test]
fn a_lane_from_before_owners_learns_its_owner_from_what_it_pinned() {
    use netsteer_steering::lane::{HoldEvent, OWNER_FILE};
    use netsteer_steering::tune::ApplyOptions;
    let t = Served::new();
    let s = spec("eth0", 3, LaneMode::Irq);
    let opts = ApplyOptions::default();
    t.udp(&[(0, ANY4, 100)]);
    t.process(77, 1, 0, 5000, &[100], 3);
    let lanes = t.lanes();
    assert_eq!(lanes.apply(&s, &opts).unwrap().status, ApplyStatus::Applied);
    fs::remove_file(
        t.root()
            .join("var/lib/netsteer/lanes/echo")
            .join(OWNER_FILE),
    )
    .unwrap();
    t.udp(&[(0, ANY4, 100), (65534, ANY6, 200)]);
    t.process(66, 1, 65534, 5001, &[200], 3);
    let mut lane = lanes.lane("echo").unwrap();
    let ev = lane.reconcile(&opts).unwrap();
    assert!(matches!(ev, HoldEvent::Holding), "{ev:?}");
    let owner = lanes
        .owner("echo")
        .unwrap()
        .expect("recorded from the pinned process");
    assert_eq!(owner.uid, 0);
    t.udp(&[(65534, ANY6, 200)]);
    let ev = lane.reconcile(&opts).unwrap();
    assert!(matches!(ev, HoldEvent::RolledBack(..)), "{ev:?}");
    let ev = lane.reconcile(&opts).unwrap();
    assert!(matches!(ev, HoldEvent::Waiting), "{ev:?}");
}

/// A holder's lane is opened once, but its spec is the file's: rewritten by another `lane
/// apply` (another CPU), the next look plans from the new one; the file removed, the look says
/// the lane is gone.
#[test]
fn a_holders_lane_follows_its_spec_file() {
    use netsteer_steering::lane::{HoldEvent, LaneOpError};
    use netsteer_steering::tune::ApplyOptions;
    let t = Served::new();
    t.udp(&[(0, ANY4, 100)]);
    t.process(77, 1, 0, 5000, &[100], 3);
    let lanes = t.lanes();
    let opts = ApplyOptions::default();
    assert_eq!(
        lanes
            .apply(&spec("eth0", 3, LaneMode::Irq), &opts)
            .unwrap()
            .status,
        ApplyStatus::Applied
    );
    let mut lane = lanes.lane("echo").unwrap();
    assert!(matches!(lane.reconcile(&opts).unwrap(), HoldEvent::Holding));
    assert_eq!(lane.spec().cpu, 3);
    // Another apply of the same lane on CPU 2, as `netsteer lane apply` run beside the holder.
    assert_eq!(
        lanes
            .apply(&spec("eth0", 2, LaneMode::Irq), &opts)
            .unwrap()
            .status,
        ApplyStatus::Applied
    );
    let ev = lane.reconcile(&opts).unwrap();
    assert!(matches!(ev, HoldEvent::Holding), "{ev:?}");
    assert_eq!(lane.spec().cpu, 2, "the holder still holds the old spec");
    let dir = t.root().join("var/lib/netsteer/lanes/echo");
    fs::remove_file(dir.join(netsteer_steering::lane::SPEC_FILE)).unwrap();
    match lane.reconcile(&opts) {
        Err(LaneOpError::NoLane(n)) => assert_eq!(n, "echo"),
        other => panic!("{other:?}"),
    }
}
