//! Where a NIC's queue interrupts land: spread over CPUs, on the NIC's NUMA node, off HT
//! siblings of each other, movable at all, and not fought over with irqbalance.

use super::rps::tune_cmd;
use crate::doctor::model::{Finding, Fix, Severity, Subjects};
use crate::model::ctx::{Ctx, IRQ_CPU_SHARE, Placement, capped, cpus_text, rate, unplaced_text};
use crate::model::desired::{ItemKind, Profile};
use netsteer_host::CpuSet;
use netsteer_host::irqname::IrqRole;
use netsteer_host::nic::{Nic, NicIrq};
use std::collections::BTreeSet;

/// Queue index of a packet-carrying IRQ (all-queue vectors count as queue 0).
fn queue_of(role: IrqRole) -> Option<u32> {
    role.placement_queue()
}

fn movable(irq: &NicIrq) -> bool {
    irq.affinity.settable.known() != Some(&false)
}

/// The IRQ pins `netsteer tune apply` would write for the doctor's goal and load, from the
/// planner itself (one CPU per queue, IRQs already well placed left alone; with a sampled
/// load the hottest queues placed first).
pub fn irq_spread(ctx: &Ctx, nic: &Nic) -> super::rps::Planned {
    // Every profile places IRQs alike: the goal's own names the fix.
    super::rps::planned(
        ctx,
        nic,
        Profile::for_goal(ctx.goal),
        &[ItemKind::IrqAffinity],
    )
}

fn rx_queue_count(nic: &Nic) -> usize {
    nic.live_queue_irqs()
        .filter_map(|i| i.role.rx_queue())
        .collect::<BTreeSet<_>>()
        .len()
}

/// IRQs, each with where it goes.
pub type Placed<'n> = Vec<(&'n NicIrq, Placement)>;

/// Each IRQ with where it goes, split into those something places and those nothing does
/// (idle vectors, or counts not read by CPU).
pub fn placed<'n>(
    ctx: &Ctx,
    irqs: impl IntoIterator<Item = &'n NicIrq>,
) -> (Placed<'n>, Placed<'n>) {
    irqs.into_iter()
        .map(|i| (i, ctx.irq_placement(i)))
        .partition(|(_, p)| p.bound().is_some())
}

/// "IRQs 66 (rx/tx-5), 67 (rx/tx-6)", at most 8 named.
fn irq_list(irqs: &[(&NicIrq, Placement)]) -> String {
    let mut names: Vec<String> = irqs
        .iter()
        .take(8)
        .map(|(i, _)| format!("{} ({})", i.irq, i.role))
        .collect();
    if irqs.len() > 8 {
        names.push(format!("… and {} more", irqs.len() - 8));
    }
    format!("IRQs {}", names.join(", "))
}

/// The evidence line for vectors nothing places: what the rule left out and why.
pub fn unplaced_line(nic: &Nic, unplaced: &[(&NicIrq, Placement)]) -> String {
    format!(
        "{}: {} not judged, idle or unplaced: {}",
        nic.name,
        irq_list(unplaced),
        unplaced_text(unplaced)
    )
}

/// Records that `rule` could not judge `nic` because none of its vectors is placed.
fn unplaced_not_judged(
    ctx: &Ctx,
    rule: &'static str,
    nic: &Nic,
    unplaced: &[(&NicIrq, Placement)],
) {
    ctx.not_judged(
        rule,
        &nic.name,
        format!(
            "{}: where its IRQs go ({}): {}",
            nic.name,
            irq_list(unplaced),
            unplaced_text(unplaced)
        ),
    );
}

/// What said where each placed IRQ goes, one line per kind of source.
fn sources_lines(placed: &[(&NicIrq, Placement)]) -> Vec<String> {
    let mut by: std::collections::BTreeMap<String, Vec<(&NicIrq, Placement)>> = Default::default();
    for (i, p) in placed {
        let how = match p {
            Placement::Affinity { source, .. } => format!("its {source}"),
            Placement::Within(_) => "its smp_affinity_list mask, without effective_affinity_list: one CPU of the mask each, which no file says".to_string(),
            Placement::Counted { since_boot, .. } => format!(
                "its interrupts counted {} (each CPU that took at least {:.0}% of a vector's)",
                if *since_boot { "since boot" } else { "over the sample" },
                IRQ_CPU_SHARE * 100.0
            ),
            Placement::Idle { .. } | Placement::Uncounted { .. } => continue,
        };
        by.entry(how).or_default().push((*i, p.clone()));
    }
    by.into_iter()
        .map(|(how, irqs)| format!("where {} go: {how}", irq_list(&irqs)))
        .collect()
}

pub fn irqs_not_spread(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        if rx_queue_count(nic) < 2 {
            continue;
        }
        // Only what says where an IRQ goes is judged; an idle vector carries no work to spread.
        let (irqs, unplaced) = placed(ctx, ctx.rx_irqs(nic));
        let queues = irqs
            .iter()
            .filter_map(|(i, _)| i.role.rx_queue())
            .collect::<BTreeSet<_>>()
            .len();
        if queues < 2 {
            if !unplaced.is_empty() {
                unplaced_not_judged(ctx, "irqs-not-spread", nic, &unplaced);
            }
            continue;
        }
        // A mask without effective affinity bounds where its IRQ goes: their union small is
        // stacked for certain.
        let used = irqs.iter().fold(CpuSet::new(), |acc, (_, p)| {
            acc.union(p.bound().expect("placed"))
        });
        // The room is the NIC's own node's usable CPUs where NUMA is known: 112 queues over
        // all 56 CPUs of their node are as spread as placement allows, not stacked.
        let local = ctx.local_cpus(nic).len();
        let room = queues.min(local);
        if used.is_empty() || used.len() * 2 > room {
            // Busy vectors whose placement nothing says: with their queues counted the room
            // may be large enough that these CPUs are too few (2 placed on 2 CPUs, 14 more
            // unknown), so silence here is not a judgement.
            let uncounted: Vec<(&NicIrq, Placement)> = unplaced
                .iter()
                .filter(|(_, p)| matches!(p, Placement::Uncounted { .. }))
                .cloned()
                .collect();
            let all_queues = rx_queue_count(nic).min(local);
            if !used.is_empty() && !uncounted.is_empty() && used.len() * 2 <= all_queues {
                unplaced_not_judged(ctx, "irqs-not-spread", nic, &uncounted);
            }
            continue;
        }
        let mut evidence = vec![format!(
            "{}: {} receive queue IRQs are delivered to only {} ({} usable CPUs)",
            nic.name,
            irqs.len(),
            cpus_text(&used),
            ctx.usable.len()
        )];
        for cpu in used.iter().take(8) {
            let here: Vec<String> = irqs
                .iter()
                .filter(|(_, p)| p.bound().is_some_and(|s| s.contains(cpu)))
                .map(|(i, _)| format!("{} ({})", i.irq, i.role))
                .collect();
            evidence.push(format!("CPU {cpu} takes IRQs {}", here.join(", ")));
        }
        evidence.extend(sources_lines(&irqs));
        if !unplaced.is_empty() {
            evidence.push(unplaced_line(nic, &unplaced));
        }
        let spread = irq_spread(ctx, nic);
        out.push(Finding {
            id: "irqs-not-spread".into(),
            severity: Severity::Warning,
            title: format!(
                "{}: {} queues but their interrupts land on {}",
                nic.name,
                queues,
                cpus_text(&used)
            ),
            evidence,
            why: "RSS spreads flows over queues, but each queue's packets are processed on the CPU that takes its interrupt; queues stacked on a few CPUs give those CPUs all the work and leave the hardware parallelism unused.".into(),
            fix: Fix {
                summary: format!("give each queue of {} its own CPU on the NIC's node", nic.name),
                steps: spread.steps_in(ctx),
                tune: Some(spread.tune(ctx, &nic.name)),
            },
            subjects: Subjects {
                cpus: used.iter().collect(),
                irqs: irqs.iter().map(|(i, _)| i.irq).collect(),
                devices: vec![nic.name.clone()],
                ..Default::default()
            },
        });
    }
    out
}

/// Queue IRQs delivered only to isolated or nohz_full CPUs while housekeeping CPUs exist.
pub fn irqs_on_isolated_cpus(ctx: &Ctx) -> Vec<Finding> {
    let topo = &ctx.view.topology;
    let isolated = topo.isolated.known().cloned().unwrap_or_default();
    let nohz = topo.nohz_full.known().cloned().unwrap_or_default();
    let kept = isolated.union(&nohz);
    if kept.is_empty() || ctx.usable.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        // A mask inside the kept CPUs is delivered there whichever CPU of it the kernel took.
        let (irqs, unplaced) = placed(ctx, nic.live_queue_irqs().filter(|i| movable(i)));
        let on: Vec<(&NicIrq, CpuSet)> = irqs
            .iter()
            .filter_map(|(i, p)| Some((*i, p.bound()?.clone())))
            .filter(|(_, cpus)| !cpus.is_empty() && cpus.difference(&kept).is_empty())
            .collect();
        if on.is_empty() {
            if !unplaced.is_empty() {
                unplaced_not_judged(ctx, "irqs-on-isolated-cpus", nic, &unplaced);
            }
            continue;
        }
        let cpus = on.iter().fold(CpuSet::new(), |a, (_, c)| a.union(c));
        let mut evidence = vec![format!(
            "{}: {} of its {} queue IRQs are delivered only to CPUs kept for isolated work ({}); housekeeping CPUs: {}",
            nic.name,
            on.len(),
            nic.live_queue_irqs().count(),
            cpus_text(&cpus),
            cpus_text(&ctx.usable)
        )];
        if !isolated.is_empty() {
            evidence.push(format!(
                "isolated (isolcpus= domain): {}",
                cpus_text(&isolated)
            ));
        }
        if !nohz.is_empty() {
            evidence.push(format!("nohz_full: {}", cpus_text(&nohz)));
        }
        for (irq, _) in on.iter().take(8) {
            evidence.push(format!(
                "IRQ {} ({}) on {}",
                irq.irq,
                irq.role,
                ctx.irq_placement(irq).text()
            ));
        }
        if !unplaced.is_empty() {
            evidence.push(unplaced_line(nic, &unplaced));
        }
        let spread = irq_spread(ctx, nic);
        out.push(Finding {
            id: "irqs-on-isolated-cpus".into(),
            severity: Severity::Warning,
            title: format!(
                "{}: {} queue IRQs on isolated or nohz_full {}",
                nic.name,
                on.len(),
                cpus_text(&cpus)
            ),
            evidence,
            why: "isolcpus= and nohz_full= keep CPUs for one undisturbed task; a queue interrupt there runs its hard IRQ and the NET_RX softirq it raises on that CPU for every burst of packets, the very interruption the isolation exists to avoid (Documentation/timers/no_hz.rst). isolcpus=managed_irq moves only kernel-managed IRQs, and a NIC's queue IRQs usually are not.".into(),
            fix: Fix {
                summary: format!(
                    "move {}'s queue IRQs to housekeeping CPUs of its node",
                    nic.name
                ),
                steps: spread.steps_in(ctx),
                tune: Some(spread.tune(ctx, &nic.name)),
            },
            subjects: Subjects {
                cpus: cpus.iter().collect(),
                irqs: on.iter().map(|(i, _)| i.irq).collect(),
                devices: vec![nic.name.clone()],
                ..Default::default()
            },
        });
    }
    out
}

/// Queue IRQs of a multi-node host delivered only to CPUs of another node than the NIC's.
pub fn remote_irqs<'n>(ctx: &Ctx, nic: &'n Nic) -> Vec<(&'n NicIrq, CpuSet)> {
    let Some(node) = ctx.nic_node(nic) else {
        return Vec::new();
    };
    let Some(local) = ctx.view.topology.node_cpus(node) else {
        return Vec::new();
    };
    // A mask without effective affinity that holds no local CPU is remote whichever CPU of
    // it the kernel took; idle vectors are not placed at all.
    nic.live_queue_irqs()
        .filter_map(|i| Some((i, ctx.irq_placement(i).bound()?.clone())))
        .filter(|(_, cpus)| !cpus.is_empty() && cpus.intersection(local).is_empty())
        .collect()
}

fn node_of(ctx: &Ctx, cpu: u32) -> String {
    ctx.view
        .topology
        .cpu(cpu)
        .and_then(|c| c.node)
        .map_or("?".into(), |n| n.to_string())
}

pub fn irq_remote_numa(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let remote = remote_irqs(ctx, nic);
        let (_, unplaced) = placed(ctx, nic.live_queue_irqs());
        if remote.is_empty() {
            if !unplaced.is_empty() && ctx.nic_node(nic).is_some() {
                unplaced_not_judged(ctx, "irq-remote-numa", nic, &unplaced);
            }
            continue;
        }
        let node = ctx.nic_node(nic).unwrap_or(0);
        let local = ctx.local_cpus(nic);
        let queues = nic
            .live_queue_irqs()
            .filter_map(|i| queue_of(i.role))
            .collect::<BTreeSet<_>>();
        let overflow = local.len() < queues.len();
        // The fix is the planner's, the pins `tune apply` writes: each remote IRQ to the
        // least loaded CPU of the NIC's node (spilling to another only past the cap).
        let spread = irq_spread(ctx, nic);
        let mut steps = spread.steps_in(ctx);
        let moved_home = |irq: u32| {
            spread.pin_of(irq).is_some_and(|i| {
                CpuSet::parse_list(&i.desired, None).is_ok_and(|s| s.is_subset(&local))
            })
        };
        let mut evidence = vec![format!(
            "{} is attached to NUMA node {node} (CPUs {})",
            nic.name,
            local.to_list()
        )];
        let mut subjects = Subjects::device(&nic.name);
        for (irq, cpus) in &remote {
            let nodes: BTreeSet<String> = cpus.iter().map(|c| node_of(ctx, c)).collect();
            let rate_text = ctx
                .irq_rate(irq.irq)
                .map(|r| format!(", {} interrupts{}", rate(r), ctx.rate_unit()))
                .unwrap_or_default();
            evidence.push(format!(
                "IRQ {} ({} {}) is delivered to {} on node {}{rate_text}",
                irq.irq,
                nic.name,
                irq.role,
                ctx.irq_placement(irq).text(),
                nodes.into_iter().collect::<Vec<_>>().join(",")
            ));
            subjects.irqs.push(irq.irq);
            subjects.cpus.extend(cpus.iter());
            subjects.queues.push(format!("{}/{}", nic.name, irq.role));
        }
        let mut evidence = capped(evidence, 9);
        if !unplaced.is_empty() {
            evidence.push(unplaced_line(nic, &unplaced));
        }
        if overflow {
            evidence.push(format!(
                "{} has {} queues for {} local CPUs, so some queues must use the other node",
                nic.name,
                queues.len(),
                local.len()
            ));
        }
        if remote.iter().any(|(i, _)| !moved_home(i.irq)) {
            steps.push(format!(
                "ethtool -L {} combined {}   # as many queues as local CPUs",
                nic.name,
                local.len()
            ));
        }
        out.push(Finding {
            id: "irq-remote-numa".into(),
            severity: if overflow { Severity::Info } else { Severity::Warning },
            title: format!(
                "{}: {} queue IRQs run on CPUs of another NUMA node than the NIC (node {node})",
                nic.name,
                remote.len()
            ),
            evidence,
            why: "The NIC DMAs packets into memory of its own node; a CPU of another node reads every packet and descriptor across the interconnect, which costs about 2 µs per packet in seed 000's measurements and memory bandwidth on both nodes.".into(),
            fix: Fix {
                summary: format!("move these IRQs to free CPUs of node {node}, or stop RSS from using their queues"),
                steps,
                tune: Some(spread.tune(ctx, &nic.name)),
            },
            subjects,
        });
    }
    out
}

pub fn irq_ht_siblings(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let rates: Vec<(&NicIrq, f64, u32)> = ctx
            .rx_irqs(nic)
            .into_iter()
            .filter_map(|i| {
                // One CPU said exactly: a mask or a vector counted on several is no pair.
                let placement = ctx.irq_placement(i);
                let cpus = placement.cpus()?;
                (cpus.len() == 1).then_some(())?;
                Some((i, ctx.irq_rate(i.irq)?, cpus.lowest()?))
            })
            .collect();
        let max = rates.iter().map(|r| r.1).fold(0.0, f64::max);
        let busy: Vec<&(&NicIrq, f64, u32)> = rates
            .iter()
            // Since boot, averages are low on any host; only relative load tells busy queues.
            .filter(|r| {
                r.1 > 0.0 && r.1 >= (max * 0.1).max(if ctx.since_boot() { 0.0 } else { 100.0 })
            })
            .collect();
        let used: CpuSet = rates.iter().map(|r| r.2).collect();
        let mut pairs = Vec::new();
        for (n, a) in busy.iter().enumerate() {
            for b in &busy[n + 1..] {
                if a.2 != b.2 && ctx.siblings(a.2).contains(b.2) {
                    pairs.push((*a, *b));
                }
            }
        }
        if pairs.is_empty() {
            continue;
        }
        let local = ctx.local_cpus(nic);
        // A core with another NIC's queue vector on it is not free either (the planner
        // counts every NIC's the same way).
        let used = ctx
            .view
            .nics
            .iter()
            .flat_map(|n| n.live_queue_irqs())
            .filter_map(|i| ctx.irq_placement(i).cpus().cloned())
            .fold(used, |a, s| a.union(&s));
        let mut free_cores: Vec<CpuSet> = Vec::new();
        for core in local.iter().map(|c| ctx.siblings(c)) {
            if core.len() >= 2
                && core.is_subset(&local)
                && core.intersection(&used).is_empty()
                && !free_cores.contains(&core)
            {
                free_cores.push(core);
            }
        }
        if free_cores.is_empty() {
            continue;
        }
        let mut evidence: Vec<String> = pairs
            .iter()
            .map(|(a, b)| {
                format!(
                    "IRQ {} ({}, {} interrupts{u}) on CPU {} and IRQ {} ({}, {}{u}) on CPU {} are hyperthreads of one core",
                    a.0.irq, a.0.role, rate(a.1), a.2, b.0.irq, b.0.role, rate(b.1), b.2,
                    u = ctx.rate_unit()
                )
            })
            .collect();
        evidence.push(format!(
            "{} whole cores take no queue IRQ of {}: {}",
            free_cores.len(),
            nic.name,
            free_cores
                .iter()
                .map(CpuSet::to_list)
                .collect::<Vec<_>>()
                .join(" ")
        ));
        // The fix is the planner's, which moves one queue of a pair to each free core (see
        // `Builder::irqs`): what `tune apply` would write. Where it parts no pair (the free
        // cores go to queues coming home from another node) the pairs are where the
        // queues must go, and there is nothing to say.
        let spread = irq_spread(ctx, nic);
        let parts = pairs
            .iter()
            .any(|(a, b)| spread.pin_of(a.0.irq).or(spread.pin_of(b.0.irq)).is_some());
        if !parts {
            continue;
        }
        let mut subjects = Subjects::device(&nic.name);
        for (a, b) in &pairs {
            subjects.irqs.extend([a.0.irq, b.0.irq]);
            subjects.cpus.extend([a.2, b.2]);
        }
        out.push(Finding {
            id: "irq-ht-siblings".into(),
            severity: Severity::Warning,
            title: format!("{}: busy queues share a physical core while whole cores are free", nic.name),
            evidence,
            why: "Hyperthreads of one core share its execution units and L1/L2 caches, so two busy queues on siblings get roughly one core's worth of softirq capacity; on separate cores each gets a full core.".into(),
            fix: Fix {
                summary: "move one IRQ of each pair, as far as whole free cores go, to a core no queue uses (HT siblings are the last choice)".into(),
                steps: spread.steps_in(ctx),
                tune: Some(spread.tune(ctx, &nic.name)),
            },
            subjects,
        });
    }
    out
}

pub fn managed_irq(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let managed: Vec<&NicIrq> = nic.live_queue_irqs().filter(|i| !movable(i)).collect();
        if managed.is_empty() {
            continue;
        }
        let evidence = capped(
            managed
                .iter()
                .map(|i| {
                    format!(
                        "IRQ {} ({} {}): smp_affinity is read-only; delivered to {}",
                        i.irq,
                        nic.name,
                        i.role,
                        ctx.irq_placement(i).text()
                    )
                })
                .collect(),
            8,
        );
        out.push(Finding {
            id: "managed-irq".into(),
            severity: Severity::Info,
            title: format!("{}: {} queue IRQs are kernel-managed and cannot be moved", nic.name, managed.len()),
            evidence,
            why: "The driver allocated these vectors with PCI_IRQ_AFFINITY, so the kernel spread them over the CPUs itself and refuses any change (kernel/irq/proc.c: EIO before 6.12, EPERM and mode 0444 since); irqbalance and netsteer leave them alone.".into(),
            fix: Fix {
                summary: "nothing to write: to change their placement change the queue count, or keep them off CPUs with isolcpus=managed_irq,<cpus> at boot".into(),
                steps: vec![format!("ethtool -l {}   # queue count decides the kernel's spreading", nic.name)],
                tune: None,
            },
            subjects: Subjects {
                irqs: managed.iter().map(|i| i.irq).collect(),
                devices: vec![nic.name.clone()],
                ..Default::default()
            },
        });
    }
    out
}

/// Drivers of paravirtual NICs: a guest whose NIC is one of these is a VM.
const VIRTUAL_NIC_DRIVERS: &[&str] = &[
    "virtio_net",
    "vmxnet3",
    "hv_netvsc",
    "xen-netfront",
    "ena",
    "gve",
];

pub fn irqbalance_conflict(ctx: &Ctx) -> Vec<Finding> {
    let Some(ib) = ctx.view.irqbalance.known() else {
        return Vec::new();
    };
    if !ib.running {
        return Vec::new();
    }
    let pid = ib.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let irqs: Vec<&NicIrq> = nic.live_queue_irqs().filter(|i| movable(i)).collect();
        let singles: Vec<(&NicIrq, u32)> = irqs
            .iter()
            .filter_map(|i| {
                let r = i.affinity.requested.known()?;
                (r.len() == 1).then(|| (*i, r.lowest().unwrap_or(0)))
            })
            .collect();
        let distinct: BTreeSet<u32> = singles.iter().map(|s| s.1).collect();
        let pinned = irqs.len() >= 2 && singles.len() == irqs.len() && distinct.len() == irqs.len();
        let driver = nic.driver.known().map(String::as_str).unwrap_or("");
        let vm_single = VIRTUAL_NIC_DRIVERS.contains(&driver) && nic.rx_queues.len() == 1;
        if pinned {
            let ban: Vec<String> = irqs.iter().map(|i| format!("--banirq={}", i.irq)).collect();
            out.push(Finding {
                id: "irqbalance-conflict".into(),
                severity: Severity::Warning,
                title: format!("irqbalance is running while {}'s queue IRQs are pinned one per CPU", nic.name),
                evidence: vec![
                    format!("irqbalance is running{pid}"),
                    format!(
                        "{}: {} queue IRQs each pinned to a single, distinct CPU ({})",
                        nic.name,
                        irqs.len(),
                        singles.iter().take(8).map(|(i, c)| format!("{}→{c}", i.irq)).collect::<Vec<_>>().join(" ")
                            + if singles.len() > 8 { " …" } else { "" }
                    ),
                ],
                why: "irqbalance does not notice pins made by hand or by a tuning tool; at its next rebalance (every 10 s) it moves any IRQ it has not been told to leave alone, silently undoing the layout.".into(),
                fix: Fix {
                    summary: "keep irqbalance off these IRQs (ban them) or stop it".into(),
                    steps: vec![
                        format!("echo 'IRQBALANCE_ARGS=\"{}\"' >> /etc/default/irqbalance && systemctl restart irqbalance", ban.join(" ")),
                        "or: systemctl disable --now irqbalance".into(),
                    ],
                    tune: Some(tune_cmd(ctx, Profile::for_goal(ctx.goal), &nic.name)),
                },
                subjects: Subjects {
                    irqs: irqs.iter().map(|i| i.irq).collect(),
                    devices: vec![nic.name.clone()],
                    ..Default::default()
                },
            });
        } else if vm_single {
            out.push(Finding {
                id: "irqbalance-conflict".into(),
                severity: Severity::Info,
                title: format!("irqbalance runs in a VM whose {} has one queue: it cannot help", nic.name),
                evidence: vec![
                    format!("irqbalance is running{pid}"),
                    format!("{} ({driver}) has 1 receive queue", nic.name),
                ],
                why: "irqbalance moves whole IRQs between CPUs; with one receive queue there is one IRQ to place, so it can only move the bottleneck around (its maintainer advises not running it in VMs). RPS is what spreads a single queue.".into(),
                fix: Fix {
                    summary: "stop irqbalance and pin the queue IRQ yourself, then spread with RPS".into(),
                    steps: vec!["systemctl disable --now irqbalance".into()],
                    tune: Some(tune_cmd(ctx, super::rps::spreading_profile(ctx), &nic.name)),
                },
                subjects: Subjects::device(&nic.name),
            });
        }
    }
    out
}
