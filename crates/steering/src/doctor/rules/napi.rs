//! Rules over the netdev family's per-NAPI view: settings sysfs does not show, IRQ suspension
//! that cannot act, and NAPI kthreads placed where they hurt
//! (Documentation/networking/napi.rst).

use crate::doctor::model::{Finding, Fix, Goal, Severity, Subjects};
use crate::model::ctx::{Ctx, cpus_text};
use netsteer_host::CpuSet;
use netsteer_host::field::Field;
use netsteer_host::netdev::ns_text;
use netsteer_host::nic::{NapiView, Nic};

/// The `ynl` line that sets one NAPI (tools/net/ynl; netsteer's own is `tune --napi`).
fn ynl_set(id: u32, attr: &str, v: u64) -> String {
    format!("ynl --family netdev --do napi-set --json '{{\"id\": {id}, \"{attr}\": {v}}}'")
}

/// netsteer's own fix: a per-NAPI mode for every NAPI of the device.
fn napi_tune(mode: &str, dev: &str) -> String {
    format!("netsteer tune apply --profile none --napi {mode} --dev {dev}")
}

/// The NAPIs of devices whose netdev data was read.
fn with_napis<'a>(ctx: &Ctx<'a>) -> impl Iterator<Item = &'a Nic> {
    ctx.view.nics.iter().filter(|n| !n.napis.is_empty())
}

/// Per-NAPI settings that differ from the device-wide sysfs files. Writing sysfs sets every
/// NAPI of the device, but NAPI_SET changes one, and sysfs keeps reporting what was last
/// written there (verified on 6.18: a threaded veth NAPI while `threaded` reads 0); anyone
/// reading sysfs is misled about what the queues do.
pub fn napi_sysfs_mismatch(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in with_napis(ctx) {
        let sysfs_gro = nic.gro_flush_timeout.known().copied();
        let sysfs_defer = nic.napi_defer_hard_irqs.known().copied();
        // The sysfs file prints the device's mode number (0, 1, 2 for busy-poll).
        let sysfs_threaded = nic
            .threaded
            .known()
            .and_then(|t| t.trim().parse::<u32>().ok());
        let mut evidence = Vec::new();
        let mut steps = Vec::new();
        for n in &nic.napis {
            let mut diffs = Vec::new();
            if let (Some(s), Some(v)) = (sysfs_defer, n.defer_hard_irqs)
                && s != u64::from(v)
            {
                diffs.push(format!(
                    "defer-hard-irqs {v} (sysfs napi_defer_hard_irqs {s})"
                ));
                steps.push(ynl_set(n.id, "defer-hard-irqs", s));
            }
            if let (Some(s), Some(v)) = (sysfs_gro, n.gro_flush_timeout_ns)
                && s != v
            {
                diffs.push(format!(
                    "gro-flush-timeout {} (sysfs gro_flush_timeout {s} ns)",
                    ns_text(v)
                ));
                steps.push(ynl_set(n.id, "gro-flush-timeout", s));
            }
            if let (Some(s), Some(v)) = (sysfs_threaded, n.threaded)
                && s != v
            {
                diffs.push(format!("threaded {v} (sysfs threaded {s})"));
                steps.push(ynl_set(n.id, "threaded", u64::from(s)));
            }
            if !diffs.is_empty() {
                evidence.push(format!("NAPI {}: {}", n.id, diffs.join(", ")));
            }
        }
        if evidence.is_empty() {
            continue;
        }
        let differing = evidence.len();
        out.push(Finding {
            id: "napi-sysfs-mismatch".into(),
            severity: Severity::Warning,
            title: format!(
                "{}: {differing} of {} NAPI instances run with settings its sysfs files do not show",
                nic.name,
                nic.napis.len()
            ),
            evidence,
            why: "Since 6.13 each NAPI instance has its own defer-hard-irqs, gro-flush-timeout and threaded setting (netdev netlink NAPI_SET). The device's sysfs files only report the last value written to them, so some queues defer interrupts or poll from a kthread while sysfs says they do not; latency then differs queue by queue for no visible reason.".into(),
            fix: Fix {
                summary: format!(
                    "make them one: set the NAPIs back to the device-wide values, or choose a per-NAPI mode on purpose with netsteer tune --napi for {}",
                    nic.name
                ),
                steps,
                tune: Some(napi_tune("irq", &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}

/// IRQ suspension set where it cannot act as napi.rst describes: it needs defer-hard-irqs and
/// gro-flush-timeout alongside (they end a suspension the application abandons) and a value
/// well above gro-flush-timeout; and it only acts for an epoll busy poller with
/// prefer_busy_poll (EPIOCSPARAMS), which busy polling off everywhere rules out.
pub fn irq_suspend_misconfigured(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    let s = &ctx.view.sysctls;
    let busy = s.busy_read.known().copied().unwrap_or(0) > 0
        || s.busy_poll.known().copied().unwrap_or(0) > 0;
    for nic in with_napis(ctx) {
        let mut evidence = Vec::new();
        let mut ids = Vec::new();
        for n in &nic.napis {
            let Some(suspend) = n.irq_suspend_timeout_ns.filter(|v| *v > 0) else {
                continue;
            };
            let defer = n.defer_hard_irqs.unwrap_or(0);
            let gro = n.gro_flush_timeout_ns.unwrap_or(0);
            let mut wrong = Vec::new();
            if defer == 0 {
                wrong.push("defer-hard-irqs 0".to_string());
            }
            if gro == 0 {
                wrong.push("gro-flush-timeout 0".to_string());
            } else if suspend <= gro {
                wrong.push(format!(
                    "irq-suspend-timeout not above gro-flush-timeout {}",
                    ns_text(gro)
                ));
            }
            if wrong.is_empty() {
                continue;
            }
            evidence.push(format!(
                "NAPI {}: irq-suspend-timeout {} with {}",
                n.id,
                ns_text(suspend),
                wrong.join(", ")
            ));
            ids.push(n.id);
        }
        if evidence.is_empty() {
            continue;
        }
        evidence.push(format!(
            "net.core.busy_read = {}, net.core.busy_poll = {}{}",
            s.busy_read,
            s.busy_poll,
            if busy {
                ""
            } else {
                " (no socket busy-polls by default; suspension needs an epoll context with prefer_busy_poll)"
            }
        ));
        out.push(Finding {
            id: "irq-suspend-misconfigured".into(),
            severity: Severity::Warning,
            title: format!(
                "{}: IRQ suspension set on {} NAPI(s) without the settings it depends on",
                nic.name,
                ids.len()
            ),
            evidence,
            why: "IRQ suspension (6.13) keeps a queue's interrupts off while an epoll busy poller with prefer_busy_poll keeps finding packets. napi.rst requires defer-hard-irqs and gro-flush-timeout as well, with irq-suspend-timeout well above gro-flush-timeout: they re-arm the interrupt when the application stops polling. Without them the suspension either never starts or, if the application stalls, leaves the queue unserviced until the long timeout fires.".into(),
            fix: Fix {
                summary: "set the three together (netsteer tune --napi irq-suspend), or clear the suspension".into(),
                steps: ids
                    .iter()
                    .map(|id| ynl_set(*id, "irq-suspend-timeout", 0))
                    .collect(),
                tune: Some(napi_tune("irq-suspend", &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}

/// The CPUs a NAPI kthread runs on: its one allowed CPU when pinned, else the last it ran on.
fn thread_cpus(p: &NapiView) -> Option<(u32, CpuSet)> {
    let t = p.thread.as_ref()?;
    let cpus = match (&t.allowed, &t.last_cpu) {
        (Field::Known(a), _) if a.len() == 1 => a.clone(),
        (_, Field::Known(c)) => std::iter::once(*c).collect(),
        _ => return None,
    };
    Some((t.pid, cpus))
}

/// A threaded NAPI's kthread on the application's CPU (the poller and the reader take turns on
/// one core: every packet waits for a context switch), or on another NUMA node than the NIC
/// (every packet's memory is remote).
pub fn napi_thread_placement(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    let app_cpus: CpuSet = ctx.app.map_or_else(CpuSet::new, |a| {
        a.threads
            .iter()
            .flat_map(|t| {
                if t.allowed.len() == 1 {
                    t.allowed.iter().collect::<Vec<_>>()
                } else {
                    vec![t.last_cpu]
                }
            })
            .collect()
    });
    for nic in with_napis(ctx) {
        let node = ctx.nic_node(nic);
        let mut evidence = Vec::new();
        let mut steps = Vec::new();
        for p in &nic.napis {
            let Some((pid, cpus)) = thread_cpus(p) else {
                continue;
            };
            let shared = cpus.intersection(&app_cpus);
            let remote: CpuSet = cpus
                .iter()
                .filter(|c| {
                    node.and_then(|n| ctx.view.topology.node_cpus(n))
                        .is_some_and(|local| !local.contains(*c))
                })
                .collect();
            let mut why = Vec::new();
            if !shared.is_empty() {
                let app = ctx
                    .app
                    .map_or(String::new(), |a| format!("{} (pid {})", a.comm, a.pid));
                why.push(format!(
                    "the application {app} runs on {}",
                    cpus_text(&shared)
                ));
            }
            if !remote.is_empty() {
                why.push(format!(
                    "{} is not on the NIC's NUMA node {}",
                    cpus_text(&remote),
                    node.unwrap_or(0)
                ));
            }
            if why.is_empty() {
                continue;
            }
            let irq = match (p.irq, &p.irq_cpus) {
                (Some(i), Some(Field::Known(c))) => format!("; its IRQ {i} is on {}", cpus_text(c)),
                _ => String::new(),
            };
            evidence.push(format!(
                "NAPI {} kthread napi/{}-{} (pid {pid}) on {}: {}{irq}",
                p.id,
                nic.name,
                p.id,
                cpus_text(&cpus),
                why.join("; ")
            ));
            // Beside its IRQ when that is free of the application, else any local CPU that is.
            let local = ctx.local_cpus(nic).difference(&app_cpus);
            let target = match &p.irq_cpus {
                Some(Field::Known(c)) if c.intersection(&app_cpus).is_empty() && !c.is_empty() => {
                    c.clone()
                }
                _ => local,
            };
            if !target.is_empty() {
                steps.push(format!("taskset -pc {} {pid}", target.to_list()));
            }
        }
        if evidence.is_empty() {
            continue;
        }
        out.push(Finding {
            id: "napi-thread-placement".into(),
            severity: if ctx.goal == Goal::Latency || !app_cpus.is_empty() {
                Severity::Warning
            } else {
                Severity::Info
            },
            title: format!("{}: threaded NAPI kthreads run where they hurt", nic.name),
            evidence,
            why: "A threaded NAPI is polled by a kernel thread the scheduler places like any other. On the application's CPU the poller and the reader take turns, so every packet waits for a context switch; on another NUMA node than the NIC every packet is touched through remote memory. Pinning the kthread beside its interrupt, on a local core of its own, keeps what threaded NAPI is for.".into(),
            fix: Fix {
                summary: format!(
                    "pin the kthreads to local CPUs the application does not use, or turn threaded NAPI off for {}",
                    nic.name
                ),
                steps,
                tune: Some(napi_tune("irq", &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}
