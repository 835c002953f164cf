//! Rules for a latency goal and for the application's placement: busy polling that cannot
//! work, interrupt coalescing, pause frames, and threads sharing the interrupt CPU.

use super::rps::tune_cmd;
use crate::doctor::model::{Finding, Fix, Goal, Severity, Subjects};
use crate::model::ctx::{Ctx, cpus_text};
use crate::model::desired::Profile;
use netsteer_host::CpuSet;
use netsteer_host::nic::Nic;

/// A device that never gets a NAPI id onto its packets: busy polling a socket fed by it has
/// nothing to poll (net/core/dev.c napi_busy_loop() needs skb->napi_id).
fn lacks_napi(nic: &Nic) -> Option<&'static str> {
    let feature = |name: &str| {
        nic.settings
            .as_ref()
            .and_then(|s| s.features.known())
            .and_then(|f| f.get(name))
            .map(|f| f.active)
    };
    let veth = nic.kind == "veth" || nic.driver.known().is_some_and(|d| d == "veth");
    // The netdev family says whether there is a NAPI at all when it was read.
    if let Some(nd) = nic.settings.as_ref().and_then(|s| s.netdev().ok())
        && nd.napis.is_empty()
    {
        return Some("the device has no NAPI instance (netdev netlink napi-get lists none)");
    }
    if veth && feature("rx-gro") != Some(true) {
        return Some("veth without GRO/XDP receives through the backlog, not NAPI");
    }
    // veth_xmit() uses the NAPI only for packets veth_skb_is_eligible_for_gro() accepts:
    // with TSO on the sender (its default), a local socket's packets need the receiver's
    // rx-udp-gro-forwarding or rx-gro-list, or they go through netif_rx() without a NAPI id
    // (verified here: SO_INCOMING_NAPI_ID 0 with GRO alone, the NAPI's id with forwarding on).
    if veth
        && feature("rx-udp-gro-forwarding") != Some(true)
        && feature("rx-gro-list") != Some(true)
    {
        return Some(
            "veth with GRO alone still delivers local sockets' UDP through the backlog: rx-udp-gro-forwarding (or rx-gro-list) must be on too",
        );
    }
    if nic.kind == "tun" || nic.driver.known().is_some_and(|d| d == "tun") {
        return Some("tun/tap devices have no NAPI unless created with IFF_NAPI");
    }
    None
}

pub fn busy_poll_ineffective(ctx: &Ctx) -> Vec<Finding> {
    let s = &ctx.view.sysctls;
    let read = s.busy_read.known().copied().unwrap_or(0);
    let poll = s.busy_poll.known().copied().unwrap_or(0);
    if read <= 0 && poll <= 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some(reason) = lacks_napi(nic) else {
            continue;
        };
        out.push(Finding {
            id: "busy-poll-ineffective".into(),
            severity: Severity::Warning,
            title: format!("busy polling is on but {} has no NAPI context to poll", nic.name),
            evidence: vec![
                format!("net.core.busy_read = {read}, net.core.busy_poll = {poll} (µs)"),
                format!("{}: {reason}", nic.name),
            ],
            why: "Busy polling spins on the NAPI instance recorded in the socket's last packet; packets that arrive without a NAPI id leave nothing to spin on, so the sockets still sleep and wake by interrupt while the setting suggests otherwise.".into(),
            fix: Fix {
                summary: format!("give {} a NAPI context (GRO and UDP GRO forwarding on for veth) or drop busy polling for its traffic", nic.name),
                steps: vec![format!("ethtool -K {} gro on rx-udp-gro-forwarding on", nic.name)],
                tune: Some(tune_cmd(ctx, Profile::Latency, &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}

pub fn coalescing_latency(ctx: &Ctx) -> Vec<Finding> {
    if ctx.goal != Goal::Latency {
        return Vec::new();
    }
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some(c) = nic.settings.as_ref().and_then(|s| s.coalesce.known()) else {
            continue;
        };
        let usecs = c.get("rx-usecs").copied().unwrap_or(0);
        let adaptive = c.get("adaptive-rx").copied().unwrap_or(0) != 0;
        let frames = c.get("rx-frames").copied().unwrap_or(0);
        if usecs == 0 && !adaptive {
            continue;
        }
        out.push(Finding {
            id: "coalescing-latency".into(),
            severity: Severity::Warning,
            title: format!("{} holds receive interrupts back (rx-usecs {usecs}{})", nic.name, if adaptive { ", adaptive" } else { "" }),
            evidence: vec![format!(
                "{}: rx-usecs = {usecs}, rx-frames = {frames}, adaptive-rx = {}",
                nic.name,
                if adaptive { "on" } else { "off" }
            )],
            why: "Interrupt coalescing makes the NIC wait up to rx-usecs (or until rx-frames packets) before interrupting, which saves CPU under load but adds that wait to every lone packet's latency; adaptive mode raises it as soon as traffic grows.".into(),
            fix: Fix {
                summary: "interrupt at once for a latency goal".into(),
                steps: vec![format!("ethtool -C {} adaptive-rx off rx-usecs 0", nic.name)],
                tune: Some(tune_cmd(ctx, Profile::Latency, &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}

pub fn flow_control_on(ctx: &Ctx) -> Vec<Finding> {
    if ctx.goal != Goal::Latency {
        return Vec::new();
    }
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some(p) = nic.settings.as_ref().and_then(|s| s.pause.known()) else {
            continue;
        };
        if p.rx != Some(true) && p.tx != Some(true) {
            continue;
        }
        out.push(Finding {
            id: "flow-control-on".into(),
            severity: Severity::Warning,
            title: format!("{}: Ethernet flow control (pause frames) is on", nic.name),
            evidence: vec![format!(
                "{}: pause rx = {}, tx = {}, autoneg = {}",
                nic.name,
                p.rx.map_or("?".into(), |v| v.to_string()),
                p.tx.map_or("?".into(), |v| v.to_string()),
                p.autoneg.map_or("?".into(), |v| v.to_string())
            )],
            why: "A receiver whose buffers fill sends pause frames and the link stops for every flow on it, so one slow consumer stalls unrelated latency-sensitive traffic for up to milliseconds; without pause the packet is dropped and the transport recovers.".into(),
            fix: Fix {
                summary: "turn pause frames off for a latency goal (and on the switch port)".into(),
                steps: vec![format!("ethtool -A {} autoneg off rx off tx off", nic.name)],
                tune: Some(tune_cmd(ctx, Profile::Latency, &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}

pub fn app_on_irq_cpu(ctx: &Ctx) -> Vec<Finding> {
    let Some(app) = ctx.app else {
        return Vec::new();
    };
    let mut irq_cpus = CpuSet::new();
    let mut irq_names = Vec::new();
    for nic in ctx.traffic_nics() {
        for i in ctx.rx_irqs(nic) {
            // Only interrupts that fire matter: now, or ever since boot (a quiet sample of a
            // low-rate request/response service still has its interrupt CPU).
            if ctx.irq_rate(i.irq).is_some_and(|r| r <= 0.0) && i.count == 0 {
                continue;
            }
            // Only CPUs something says it goes to: one CPU of a wide mask is not every CPU of
            // it, and an idle vector goes nowhere anyone can say.
            let Some(cpus) = ctx.irq_placement(i).cpus().cloned() else {
                continue;
            };
            irq_names.push((i.irq, format!("{} {}", nic.name, i.role), cpus.clone()));
            irq_cpus = irq_cpus.union(&cpus);
        }
    }
    let mut evidence = Vec::new();
    let mut cpus_hit = CpuSet::new();
    let mut tids = Vec::new();
    for t in &app.threads {
        let runs_on: CpuSet = if t.allowed.len() == 1 {
            t.allowed.clone()
        } else {
            std::iter::once(t.last_cpu).collect()
        };
        let shared = runs_on.intersection(&irq_cpus);
        if shared.is_empty() {
            continue;
        }
        let irqs: Vec<String> = irq_names
            .iter()
            .filter(|(_, _, c)| !c.intersection(&shared).is_empty())
            .map(|(n, label, _)| format!("IRQ {n} ({label})"))
            .collect();
        evidence.push(format!(
            "thread {} ({}) {} {}, which takes {}; allowed CPUs {}",
            t.tid,
            t.comm,
            if t.allowed.len() == 1 {
                "is pinned to"
            } else {
                "last ran on"
            },
            cpus_text(&shared),
            irqs.join(", "),
            t.allowed.to_list()
        ));
        cpus_hit = cpus_hit.union(&shared);
        tids.push(t.tid);
    }
    if tids.is_empty() {
        return Vec::new();
    }
    evidence.push("the CPU each socket's packets arrive on (SO_INCOMING_CPU) is visible only inside the application (getsockopt on its sockets)".into());
    let away = ctx.usable.difference(&irq_cpus);
    vec![Finding {
        id: "app-on-irq-cpu".into(),
        severity: if ctx.goal == Goal::Latency { Severity::Warning } else { Severity::Info },
        title: format!("{} (pid {}) runs on the CPU that takes the NIC's receive interrupts", app.comm, app.pid),
        evidence,
        why: "The interrupt and its softirq preempt the application thread on that CPU, so each reply waits for the next packets' processing; seed 000 measured about 2 µs more round trip with the client on the interrupt CPU.".into(),
        fix: Fix {
            summary: if away.is_empty() {
                "no CPU is free of receive interrupts: move an IRQ away first".into()
            } else {
                format!("pin the application to {} (no receive interrupts there)", cpus_text(&away))
            },
            steps: if away.is_empty() {
                Vec::new()
            } else {
                vec![format!("taskset -a -p -c {} {}", away.to_list(), app.pid)]
            },
            tune: None,
        },
        subjects: Subjects { cpus: cpus_hit.iter().collect(), ..Default::default() },
    }]
}
