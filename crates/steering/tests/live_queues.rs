//! Vectors of queues a device does not have now. virtio_net keeps a vector for each queue pair
//! the device offers: the real guest tree `virtio-rss-6.12` has 2 of 4 channels on, so
//! /proc/interrupts lists `virtio2-input.0..3` and `output.0..3` (IRQs 25-32) while
//! `queues/` lists rx-0, rx-1, tx-0, tx-1. The vectors of queues 2 and 3 take no interrupt but
//! keep an affinity: counted, they read as placed work (doctor) and take CPUs of the IRQ cap
//! (tune). A copy with one channel on (queues rx-1 and tx-1 gone, the recorded channels 1)
//! shows the planner placing the vectors of the queue its channels item turns on, and only
//! those.

use netsteer_host::{HostFs, read_host};
use netsteer_nic::{NicBackend, TreeNic};
use netsteer_steering::model::ctx::Ctx;
use netsteer_steering::model::knob::ItemId;
use netsteer_steering::model::load::Goal;
use netsteer_steering::tune::{IrqbalancePolicy, ItemKind, Plan, PlanOptions, Profile, plan};
use std::collections::BTreeSet;
use std::path::Path;

mod common;
use common::{copy_tree, fixture};

fn view(root: &Path) -> netsteer_host::HostView {
    let fs = HostFs::open(root).unwrap();
    let nic = TreeNic::new(root);
    let settings = |n: &str| nic.settings(n);
    read_host(&fs, Some(&settings))
}

fn irq_items(p: &Plan) -> BTreeSet<u32> {
    p.items
        .iter()
        .filter(|i| i.kind == ItemKind::IrqAffinity)
        .filter_map(|i| ItemId::irq_of(&i.id))
        .collect()
}

fn balanced() -> PlanOptions {
    PlanOptions {
        irqbalance: IrqbalancePolicy::Stop,
        ..PlanOptions::for_profile(Profile::Balanced)
    }
}

/// The tree with one channel on: rx-1 and tx-1 gone, the recorded channels 1.
fn one_channel() -> tempfile::TempDir {
    let t = copy_tree(&fixture("virtio-rss-6.12"));
    let q = t.path().join("sys/class/net/eth0/queues");
    std::fs::remove_dir_all(q.join("rx-1")).unwrap();
    std::fs::remove_dir_all(q.join("tx-1")).unwrap();
    let f = t.path().join("netsteer/ethtool.json");
    let mut e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    e["eth0"]["channels"]["combined"] = 1.into();
    std::fs::write(&f, serde_json::to_string(&e).unwrap()).unwrap();
    t
}

#[test]
fn doctor_counts_the_vectors_of_live_queues_only() {
    let v = view(&fixture("virtio-rss-6.12"));
    let nic = v.nic("eth0").unwrap();
    let live: Vec<u32> = nic.live_queue_irqs().map(|i| i.irq).collect();
    assert_eq!(live, [25, 26, 27, 28]);
    assert_eq!(nic.queue_irqs().count(), 8);
    let ctx = Ctx::new(&v, None, Goal::Balanced, None);
    let rx: Vec<u32> = ctx.rx_irqs(nic).iter().map(|i| i.irq).collect();
    assert_eq!(rx, [25, 27]);
    // Whose queues are unknown: every vector is kept (nothing says which are live).
    let mut blind = nic.clone();
    blind.rx_queues.clear();
    blind.tx_queues.clear();
    blind.queues_unknown = Some("queues/: permission denied".into());
    assert_eq!(blind.live_queue_irqs().count(), 8);
}

#[test]
fn tune_pins_the_vectors_of_live_queues_and_of_those_it_turns_on() {
    let p = plan(&view(&fixture("virtio-rss-6.12")), &balanced()).unwrap();
    assert_eq!(irq_items(&p), [25, 26, 27, 28].into(), "{:#?}", p.items);

    let one = one_channel();
    let v = view(one.path());
    let nic = v.nic("eth0").unwrap();
    assert_eq!(
        nic.live_queue_irqs().map(|i| i.irq).collect::<Vec<_>>(),
        [25, 26]
    );
    let p = plan(&v, &balanced()).unwrap();
    let channels = p
        .items
        .iter()
        .find(|i| i.id == "nic/eth0/channels/combined")
        .unwrap_or_else(|| panic!("no channels item: {:#?}", p.items));
    assert_eq!(channels.desired, "2", "{channels:?}");
    // Queue 1 comes up with the channels item: its vectors are placed; 2 and 3 stay off.
    assert_eq!(irq_items(&p), [25, 26, 27, 28].into(), "{:#?}", p.items);
}
