//! Where the CPU time goes: one CPU drowning in softirq, and a hypervisor taking the vCPUs.

use super::rps::{rps_off, rps_plan};
use super::spread::irq_spread;
use crate::doctor::model::{Finding, Fix, Severity, Subjects};
use crate::model::ctx::{Ctx, cpus_text, pct, rate};
use netsteer_host::CpuSet;
use netsteer_host::sample::CpuRates;

/// %soft + %irq from which a CPU counts as busy with packet work.
const HOT_BUSY_PCT: f64 = 25.0;
/// A hot CPU does at least this many times the average work of each other CPU.
const CONCENTRATION: f64 = 3.0;
/// The others must have this much idle time on average for spreading to help.
const ROOM_IDLE_PCT: f64 = 30.0;
/// Below this many packets per second in total, shares of packets mean nothing.
const MIN_TOTAL_PPS: f64 = 100.0;

fn busy(c: &CpuRates) -> f64 {
    c.soft + c.irq
}

/// How the work per CPU is measured: packets processed (softnet), NET_RX runs, or %soft.
enum Work {
    Packets,
    NetRxRuns,
    SoftPct,
}

impl Work {
    fn of(&self, c: &CpuRates) -> f64 {
        match self {
            Work::Packets => c.processed.unwrap_or(0.0),
            Work::NetRxRuns => c.net_rx.unwrap_or(0.0),
            Work::SoftPct => busy(c),
        }
    }
}

pub fn softirq_hot_cpu(ctx: &Ctx) -> Vec<Finding> {
    let Some(load) = ctx.load else {
        return Vec::new();
    };
    let cpus: Vec<&CpuRates> = load
        .cpu
        .cpus
        .iter()
        .filter(|c| ctx.online.contains(c.cpu))
        .collect();
    if cpus.len() < 2 {
        return Vec::new();
    }
    let total = |f: fn(&CpuRates) -> Option<f64>| -> Option<f64> {
        cpus.iter().map(|c| f(c)).sum::<Option<f64>>()
    };
    let work = match (total(|c| c.processed), total(|c| c.net_rx)) {
        (Some(p), _) if p >= MIN_TOTAL_PPS => Work::Packets,
        (_, Some(r)) if r >= MIN_TOTAL_PPS => Work::NetRxRuns,
        _ => Work::SoftPct,
    };
    let all_work: f64 = cpus.iter().map(|c| work.of(c)).sum();
    let hot: Vec<&CpuRates> = cpus
        .iter()
        .copied()
        .filter(|c| busy(c) >= HOT_BUSY_PCT || (busy(c) >= 10.0 && c.idle < 10.0))
        .filter(|c| {
            let mine = work.of(c);
            let others = (all_work - mine) / (cpus.len() - 1) as f64;
            mine > 0.0 && mine >= CONCENTRATION * others
        })
        .collect();
    if hot.is_empty() {
        return Vec::new();
    }
    let hot_set: CpuSet = hot.iter().map(|c| c.cpu).collect();
    let rest: Vec<&CpuRates> = cpus
        .iter()
        .copied()
        .filter(|c| !hot_set.contains(c.cpu))
        .collect();
    let rest_idle = rest.iter().map(|c| c.idle).sum::<f64>() / rest.len().max(1) as f64;
    let rest_soft = rest.iter().map(|c| busy(c)).sum::<f64>() / rest.len().max(1) as f64;
    if rest.is_empty() || rest_idle < ROOM_IDLE_PCT {
        return Vec::new();
    }
    let saturated = hot.iter().any(|c| busy(c) >= 50.0 || c.idle < 5.0);
    let unit = ctx.rate_unit();

    let mut evidence = Vec::new();
    for c in &hot {
        let share = |w: &Work| {
            let t: f64 = cpus.iter().map(|x| w.of(x)).sum();
            if t > 0.0 { w.of(c) * 100.0 / t } else { 0.0 }
        };
        let mut line = format!(
            "CPU {}: {} softirq + {} hard irq, {} idle",
            c.cpu,
            pct(c.soft),
            pct(c.irq),
            pct(c.idle)
        );
        if let (Some(p), Some(t)) = (c.processed, total(|c| c.processed)) {
            line += &format!(
                "; processed {} of the packets ({} of {} packets{unit})",
                pct(share(&Work::Packets)),
                rate(p),
                rate(t)
            );
        }
        if c.net_rx.is_some() {
            line += &format!(
                "; ran {} of the NET_RX softirqs",
                pct(share(&Work::NetRxRuns))
            );
        }
        evidence.push(line);
    }
    evidence.push(format!(
        "the other {} online CPUs: {} idle and {} softirq + irq on average",
        rest.len(),
        pct(rest_idle),
        pct(rest_soft)
    ));

    let mut subjects = Subjects {
        cpus: hot_set.iter().collect(),
        ..Default::default()
    };
    // What lands on the hot CPUs: a single-queue NIC's interrupt, several queues' interrupts,
    // or packets that no interrupt of this CPU brings (a local sender, RPS).
    let mut fix = None;
    for nic in ctx.traffic_nics() {
        let on_hot: Vec<_> = ctx
            .rx_irqs(nic)
            .into_iter()
            .filter(|i| {
                ctx.irq_placement(i)
                    .cpus()
                    .is_some_and(|c| !c.intersection(&hot_set).is_empty())
            })
            .collect();
        for i in &on_hot {
            evidence.push(format!(
                "{} takes IRQ {} ({} {}, {})",
                ctx.irq_placement(i).text(),
                i.irq,
                nic.name,
                i.role,
                i.name
            ));
            subjects.irqs.push(i.irq);
        }
        // Only NICs whose receive interrupts land on a hot CPU explain it.
        if on_hot.is_empty() {
            continue;
        }
        subjects.devices.push(nic.name.clone());
        if fix.is_some() {
            continue;
        }
        if nic.rx_queues.len() == 1 && rps_off(nic) {
            let plan = rps_plan(ctx, nic);
            fix = Some(Fix {
                summary: format!(
                    "{} has one receive queue, so one CPU does all of its protocol work: spread it with RPS over {} (and size RFS so each flow follows its reader)",
                    nic.name,
                    cpus_text(&plan.cpus)
                ),
                steps: plan.steps,
                tune: Some(plan.tune),
            });
        } else if on_hot.len() >= 2 {
            let spread = irq_spread(ctx, nic);
            fix = Some(Fix {
                summary: format!(
                    "{} queue IRQs of {} share the hot CPU: give each queue its own CPU",
                    on_hot.len(),
                    nic.name
                ),
                steps: spread.steps_in(ctx),
                tune: Some(spread.tune(ctx, &nic.name)),
            });
        }
    }
    let fix = fix.unwrap_or_else(|| {
        // No NIC interrupt explains it: virtual devices (veth, loopback) and netif_rx() paths
        // process packets on the CPU that sent them, and RPS/RFS may steer flows there.
        let receivers: Vec<_> = ctx
            .traffic_nics()
            .into_iter()
            .filter(|n| n.is_virtual())
            .filter(|n| rps_off(n))
            .collect();
        match receivers.first() {
            Some(nic) => {
                let plan = rps_plan(ctx, nic);
                subjects.devices.push(nic.name.clone());
                Fix {
                    summary: format!(
                        "{} is a virtual device: its packets are processed on the sending CPU unless RPS moves them; set RPS on its receive queues over {}",
                        nic.name,
                        cpus_text(&plan.cpus)
                    ),
                    steps: plan.steps,
                    tune: Some(plan.tune),
                }
            }
            None => Fix {
                summary: "no NIC interrupt explains the load: find who sends or steers packets to this CPU (RPS/RFS masks, a local sender on veth/loopback, one elephant flow) and spread them".into(),
                steps: vec![
                    "grep . /sys/class/net/*/queues/rx-*/rps_cpus".into(),
                    "netsteer top   # watch which CPUs process packets while you move threads".into(),
                ],
                tune: None,
            },
        }
    });
    let title = format!(
        "{} {} most of the packet processing while the others have room",
        cpus_text(&hot_set),
        if hot.len() == 1 { "does" } else { "do" }
    );
    vec![Finding {
        id: "softirq-hot-cpu".into(),
        severity: if saturated { Severity::Critical } else { Severity::Warning },
        title,
        evidence,
        why: "Receive processing runs in NET_RX softirq on the CPU that took the interrupt (or the one RPS chose); when one CPU gets it all, throughput stops at what that CPU can do and its queue overflows while the other CPUs idle.".into(),
        fix,
        subjects,
    }]
}

/// Steal from this percentage on means vCPUs wait for the hypervisor often enough to matter.
const STEAL_PCT: f64 = 5.0;

pub fn cpu_steal(ctx: &Ctx) -> Vec<Finding> {
    let Some(load) = ctx.load else {
        return Vec::new();
    };
    let stolen: Vec<&CpuRates> = load
        .cpu
        .cpus
        .iter()
        .filter(|c| c.steal >= STEAL_PCT)
        .collect();
    if stolen.is_empty() {
        return Vec::new();
    }
    let worst = stolen.iter().map(|c| c.steal).fold(0.0, f64::max);
    vec![Finding {
        id: "cpu-steal".into(),
        severity: if worst >= 20.0 { Severity::Critical } else { Severity::Warning },
        title: format!("the hypervisor takes up to {} of the vCPUs' time", pct(worst)),
        evidence: stolen
            .iter()
            .map(|c| format!("CPU {}: {} steal", c.cpu, pct(c.steal)))
            .collect(),
        why: "Steal is time a runnable vCPU waited for a physical CPU; packets that arrive meanwhile wait too, so tail latency and softirq backlogs grow by whole scheduler slices that no tuning inside the guest removes.".into(),
        fix: Fix {
            summary: "ask for dedicated (pinned, not overcommitted) vCPUs, or move the VM to a less loaded host".into(),
            steps: vec!["mpstat -P ALL 1   # watch %steal per CPU".into()],
            tune: None,
        },
        subjects: Subjects {
            cpus: stolen.iter().map(|c| c.cpu).collect(),
            ..Default::default()
        },
    }]
}
