//! Transmit-side and RSS-table placement: XPS, and RSS sending flows to remote queues.

use super::rps::tune_cmd;
use super::spread::remote_irqs;
use crate::doctor::model::{Finding, Fix, Severity, Subjects};
use crate::model::ctx::{Ctx, pct};
use crate::model::desired::{ItemKind, Profile};
use netsteer_host::CpuSet;
use netsteer_host::irqname::IrqRole;
use std::collections::BTreeSet;

pub fn xps_unset(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        if nic.tx_queues.len() < 2 {
            continue;
        }
        let all_off = nic.tx_queues.iter().all(|q| {
            q.xps_cpus.known().is_some_and(CpuSet::is_empty)
                && q.xps_rxqs.known().is_none_or(CpuSet::is_empty)
        });
        if !all_off {
            continue;
        }
        // The planner's own XPS items: the same lines `tune` writes under the fix, over the
        // CPUs the planner may use (no isolated or nohz_full CPU).
        let xps = super::rps::planned(ctx, nic, Profile::for_goal(ctx.goal), &[ItemKind::Xps]);
        // Seed 000's layout sends each CPU on the queue whose interrupt it takes; with no
        // queue vector known (MSI off by an empty msi_irqs, an INTx line for all queues, or
        // none recognised) nothing says which CPU takes which queue's interrupt, and the
        // planner deals the CPUs over the queues instead. The fix says which it is.
        let by_irq = nic.queue_irqs().any(|i| {
            i.role
                .placement_queue()
                .is_some_and(|q| nic.tx_queues.iter().any(|t| t.index == q))
                && !matches!(i.role, IrqRole::AllQueues)
        });
        let mut evidence = vec![
            format!(
                "{}: xps_cpus and xps_rxqs are 0 on all {} tx queues",
                nic.name,
                nic.tx_queues.len()
            ),
            "without XPS the tx queue is picked by the flow hash, independent of the sending CPU"
                .into(),
        ];
        let summary = if by_irq {
            format!(
                "map every CPU to the tx queue whose interrupt it (or its HT sibling) takes on {}",
                nic.name
            )
        } else {
            evidence.push(format!(
                "{}: no per-queue interrupt vector is known (its IRQs: {}), so which CPU takes which queue's interrupt is not said by any file",
                nic.name,
                if nic.irqs.is_empty() {
                    "none recognised".to_string()
                } else {
                    nic.irqs.iter().take(8).map(|i| format!("{} ({})", i.irq, i.role)).collect::<Vec<_>>().join(", ")
                }
            ));
            format!(
                "map the CPUs over {}'s tx queues, {}dealt in turn (no queue interrupt to follow)",
                nic.name,
                if ctx.nic_node(nic).is_some() {
                    "its node's CPUs first, "
                } else {
                    ""
                }
            )
        };
        out.push(Finding {
            id: "xps-unset".into(),
            severity: Severity::Warning,
            title: format!("{}: {} transmit queues and no XPS: senders use queues of other CPUs", nic.name, nic.tx_queues.len()),
            evidence,
            why: "Each packet then completes on, and raises its transmit interrupt at, another CPU's queue: the queue lock and completion cache lines bounce between CPUs and latency grows (seed 000 saw transmit interrupts on a queue it had taken out of RSS); XPS maps each CPU to its own queue.".into(),
            fix: Fix {
                summary,
                steps: xps.steps_in(ctx),
                tune: Some(xps.tune(ctx, &nic.name)),
            },
            subjects: Subjects {
                devices: vec![nic.name.clone()],
                queues: nic.tx_queues.iter().map(|q| format!("{}/tx-{}", nic.name, q.index)).collect(),
                ..Default::default()
            },
        });
    }
    out
}

pub fn rss_remote_queues(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some(rss) = nic.settings.as_ref().and_then(|s| s.rss.known()) else {
            continue;
        };
        if rss.indirection.is_empty() {
            continue;
        }
        let remote: BTreeSet<u32> = remote_irqs(ctx, nic)
            .iter()
            .filter_map(|(i, _)| i.role.rx_queue())
            .collect();
        let hits = rss
            .indirection
            .iter()
            .filter(|q| remote.contains(q))
            .count();
        if hits == 0 {
            continue;
        }
        let queues = rss
            .indirection
            .iter()
            .max()
            .map_or(0, |m| m + 1)
            .max(nic.rx_queues.len() as u32);
        let weights: Vec<&str> = (0..queues)
            .map(|q| if remote.contains(&q) { "0" } else { "1" })
            .collect();
        let share = hits as f64 * 100.0 / rss.indirection.len() as f64;
        let node = ctx.nic_node(nic).unwrap_or(0);
        let remote_list: Vec<String> = remote.iter().map(u32::to_string).collect();
        out.push(Finding {
            id: "rss-remote-queues".into(),
            severity: Severity::Warning,
            title: format!("{}: RSS sends {} of flows to queues served on another NUMA node", nic.name, pct(share)),
            evidence: vec![
                format!(
                    "{}: {hits} of {} indirection table entries point to queues {}",
                    nic.name,
                    rss.indirection.len(),
                    remote_list.join(",")
                ),
                format!("the IRQs of those queues run on CPUs outside node {node} (see irq-remote-numa)"),
            ],
            why: "The indirection table maps each flow hash to a queue; flows hashed to these queues are processed far from the NIC's memory, about 2 µs more per packet in seed 000. Zero weights take the queues out of RSS without removing them.".into(),
            fix: Fix {
                summary: format!("give the remote queues weight 0 in the indirection table (or move their IRQs to node {node})"),
                steps: vec![format!("ethtool -X {} weight {}", nic.name, weights.join(" "))],
                tune: Some(tune_cmd(ctx, Profile::Balanced, &nic.name)),
            },
            subjects: Subjects {
                devices: vec![nic.name.clone()],
                queues: remote.iter().map(|q| format!("{}/rx-{q}", nic.name)).collect(),
                ..Default::default()
            },
        });
    }
    out
}
