//! Where a queue's IRQ goes is judged only from what says so: `effective_affinity`, a one-CPU
//! `smp_affinity`, or interrupt counts large enough to mean something, naming every CPU that
//! took a share of them. A vector that fired once at probe time, or a few times since boot,
//! says nothing about where its interrupts go (issue 72, class 3: real trees whose vectors
//! counted 1 each, or 116, 0, 4 and 0, were called "not spread"; counts over CPUs 0, 1, 8 and 9
//! were read as "only CPUs 1,8").

use netsteer_host::field::Field;
use netsteer_host::sample::IrqRate;
use netsteer_host::view::HostView;
use netsteer_host::{HostFs, read_host};
use netsteer_steering::doctor::rules::spread::irqs_not_spread;
use netsteer_steering::doctor::{Ctx, Finding, Goal, Load, diagnose};
use std::path::Path;

mod common;

/// The tuned ixgbe host (eth0: 8 TxRx vectors, IRQs 61-68, on 16 CPUs) as doctor reads its
/// tree offline, with the since-boot load.
fn host() -> (HostView, Load) {
    common::offline("tuned-ixgbe-16cpu")
}

/// Gives eth0's IRQ `irq` these since-boot counts by CPU, as a tree without /proc/irq shows
/// them: no affinity files, /proc/interrupts' columns only (the view's total and busiest
/// column, the since-boot load's per-CPU averages).
fn counted(view: &mut HostView, load: &mut Load, irq: u32, counts: &[(u32, u64)]) {
    let nic = view.nics.iter_mut().find(|n| n.name == "eth0").unwrap();
    let i = nic.irqs.iter_mut().find(|i| i.irq == irq).unwrap();
    i.count = counts.iter().map(|c| c.1).sum();
    i.busiest_cpu = counts
        .iter()
        .filter(|c| c.1 > 0)
        .max_by_key(|c| c.1)
        .map(|c| c.0);
    let absent =
        |f: &str| Field::unknown(format!("/proc/irq/{irq}/{f}: No such file or directory"));
    i.affinity.requested = absent("smp_affinity_list");
    i.affinity.effective = absent("effective_affinity_list");
    let name = i.name.clone();
    let s = load.seconds;
    load.cpu.irqs.retain(|r| r.irq != irq);
    load.cpu.irqs.push(IrqRate {
        irq,
        name,
        per_cpu: counts
            .iter()
            .filter(|c| c.1 > 0)
            .map(|c| (c.0, c.1 as f64 / s))
            .collect(),
        total: counts.iter().map(|c| c.1).sum::<u64>() as f64 / s,
    });
}

/// eth0 cut to its first four queues (IRQs 61-64).
fn four_queues(view: &mut HostView) {
    let nic = view.nics.iter_mut().find(|n| n.name == "eth0").unwrap();
    nic.irqs.retain(|i| i.irq <= 64);
    nic.rx_queues.truncate(4);
    nic.tx_queues.truncate(4);
}

/// The rule run alone, and what it recorded as not judged.
fn spread_rule(view: &HostView, load: &Load) -> (Vec<Finding>, Vec<(String, String, String)>) {
    let ctx = Ctx::new(view, Some(load), Goal::Balanced, None);
    let found = irqs_not_spread(&ctx);
    let blind = ctx
        .take_blind()
        .into_iter()
        .map(|b| (b.rule.to_string(), b.subject, b.needs))
        .collect();
    (found, blind)
}

fn not_spread(view: &HostView, load: &Load) -> Vec<Finding> {
    diagnose(view, Some(load), Goal::Balanced, None)
        .findings
        .into_iter()
        .filter(|f| f.id == "irqs-not-spread")
        .collect()
}

fn assert_idle_not_judged(view: &HostView, load: &Load) {
    let (found, blind) = spread_rule(view, load);
    assert!(found.is_empty(), "idle vectors judged: {found:#?}");
    assert!(not_spread(view, load).is_empty());
    // The report lists it among what it could not judge, so silence does not read as health.
    let report = diagnose(view, Some(load), Goal::Balanced, None);
    assert!(
        report
            .unjudged
            .iter()
            .any(|n| n.rule == "irqs-not-spread" && n.subject == "eth0"),
        "{:?}",
        report.unjudged
    );
    let said = blind
        .iter()
        .find(|b| b.0 == "irqs-not-spread" && b.1 == "eth0")
        .unwrap_or_else(|| panic!("eth0 not listed as not judged: {blind:?}"));
    assert!(
        said.2.contains("no effective_affinity/smp_affinity") && said.2.contains("floor"),
        "{said:?}"
    );
}

/// (a) Four queues whose vectors each fired once since boot (the probe-time interrupt), all on
/// CPU 0, with no affinity files: nothing says where their IRQs go.
#[test]
fn vectors_that_fired_once_are_idle_not_stacked() {
    let (mut v, mut l) = host();
    four_queues(&mut v);
    for irq in 61..=64 {
        counted(&mut v, &mut l, irq, &[(0, 1)]);
    }
    assert_idle_not_judged(&v, &l);
}

/// (b) Vectors totalling 116, 0, 4 and 0 interrupts since boot.
#[test]
fn a_few_interrupts_since_boot_say_nothing() {
    let (mut v, mut l) = host();
    four_queues(&mut v);
    for (irq, n) in (61..=64).zip([116, 0, 4, 0]) {
        counted(&mut v, &mut l, irq, &[(0, n)]);
    }
    assert_idle_not_judged(&v, &l);
}

/// (c) Queues 0-3 counted on CPUs 1 (most) and 0, queues 4-7 on CPUs 8 (most) and 9: the
/// IRQs went to all four, not only to the busiest columns 1 and 8.
#[test]
fn every_cpu_that_took_a_share_is_named() {
    let (mut v, mut l) = host();
    for irq in 61..=68 {
        let (most, some) = if irq < 65 { (1, 0) } else { (8, 9) };
        counted(&mut v, &mut l, irq, &[(most, 900_000), (some, 300_000)]);
    }
    let found = not_spread(&v, &l);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(f.subjects.cpus, [0, 1, 8, 9], "{f:#?}");
    assert!(f.title.contains("CPUs 0-1,8-9"), "{}", f.title);
    assert!(f.evidence[0].contains("CPUs 0-1,8-9"), "{:?}", f.evidence);
}

/// (d) A properly busy stacked NIC, known only from its counts: 5 million interrupts a vector,
/// every vector on CPU 0 or 1 (a probe-time interrupt elsewhere changes nothing).
#[test]
fn busy_stacked_vectors_still_are_not_spread() {
    let (mut v, mut l) = host();
    for irq in 61..=68 {
        counted(&mut v, &mut l, irq, &[(irq % 2, 5_000_000), (7, 1)]);
    }
    let found = not_spread(&v, &l);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].subjects.cpus, [0, 1]);
    assert!(
        found[0].evidence.iter().any(|e| e.contains("since boot")),
        "the evidence says where the placement came from: {:?}",
        found[0].evidence
    );
}

/// Idle vectors beside busy stacked ones: the finding judges the busy ones and says which were
/// idle.
#[test]
fn a_finding_names_its_idle_vectors() {
    let (mut v, mut l) = host();
    for irq in 61..=68 {
        let n = if irq < 66 { 5_000_000 } else { 3 };
        counted(&mut v, &mut l, irq, &[(0, n)]);
    }
    let found = not_spread(&v, &l);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].subjects.cpus, [0]);
    assert!(
        found[0]
            .evidence
            .iter()
            .any(|e| e.contains("idle") && e.contains("66") && e.contains("68")),
        "{:?}",
        found[0].evidence
    );
}

/// pcp-40cpu-mlx4 (a real 40-CPU tree without /proc/irq): each ixgbe vector's interrupts since
/// boot are spread over all 20 CPUs of its node, 1-14 % each, as an IRQ irqbalance kept
/// moving shows them. The busiest columns alone put eno1's 40 queues on 4 CPUs; every CPU
/// that took a share is all 20, which is as spread as the node allows.
#[test]
fn a_real_tree_whose_vectors_wandered_is_not_stacked() {
    use netsteer_steering::model::load::Reading;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/pcp-40cpu-mlx4");
    let fs = HostFs::open(&dir).unwrap();
    let view = read_host(&fs, None);
    let reading = Reading::take(&fs, std::time::Instant::now()).unwrap();
    let (load, _) = reading.since_boot(&fs).unwrap();
    let ctx = Ctx::new(&view, Some(&load), Goal::Balanced, None);
    let eno1 = view.nic("eno1").unwrap();
    let used = ctx
        .rx_irqs(eno1)
        .iter()
        .filter_map(|i| ctx.irq_placement(i).cpus().cloned())
        .fold(netsteer_host::CpuSet::new(), |a, s| a.union(&s));
    assert_eq!(used.to_list(), "0-9,20-29");
    assert!(not_spread(&view, &load).is_empty());
}
