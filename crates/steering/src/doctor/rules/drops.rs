//! Where packets are lost or delayed: the per-CPU backlog, the softirq budget, the NIC ring
//! and socket buffers.

use crate::doctor::model::{Finding, Fix, Severity, Subjects};
use crate::model::ctx::{Ctx, capped, pct};
use crate::model::desired::Profile;
use netsteer_host::CpuSet;
use netsteer_host::nic::Nic;
use netsteer_host::sample::CpuRates;

/// Idle (with iowait: time the CPU could run anything) below this share of the sample: the
/// CPU had no time to drain its backlog.
pub const SATURATED_IDLE: f64 = 10.0;
/// Idle share from which a CPU can take another's RPS work.
pub const ROOM_IDLE: f64 = 20.0;

/// Time the CPU could have run anything: idle and iowait, % of the sample.
pub fn idle(c: &CpuRates) -> f64 {
    c.idle + c.iowait
}

/// Backlog drops on CPUs with no idle time, and a device whose RPS sends packets there.
///
/// `enqueue_to_backlog()` (net/core/dev.c) drops when the CPU's input queue already holds
/// `netdev_max_backlog` packets: they came faster than `process_backlog()` ran there. With
/// idle time left the CPU catches up between bursts and a longer queue holds the burst; with
/// none (a higher-priority task or other softirq work holds the CPU) the queue is full at any
/// length, and only sending the packets elsewhere helps: the RPS masks naming that CPU.
pub struct RpsAway<'a> {
    pub nic: &'a Nic,
    /// The CPUs with drops (at least `min_rate` a second) and no idle time: (cpu, drops/s,
    /// idle %).
    pub saturated: Vec<(u32, f64, f64)>,
    /// CPUs near the device, usable for kernel work, with room (idle ≥ [`ROOM_IDLE`], no
    /// drops).
    pub room: CpuSet,
    /// Each receive queue whose mask names a saturated CPU: (queue, mask now, mask without
    /// the saturated CPUs — the rest of its mask, or else `room`).
    pub moves: Vec<(u32, CpuSet, CpuSet)>,
}

/// The devices whose RPS feeds a saturated, dropping CPU, each with a new mask for every such
/// queue, never naming a CPU of `keep_off` (a lane's; asked only when some CPU is saturated);
/// a device that would leave a queue nowhere to go is not listed (the backlog is then all
/// there is).
pub fn rps_away<'a>(
    ctx: &Ctx<'a>,
    min_rate: f64,
    keep_off: impl FnOnce() -> CpuSet,
) -> Vec<RpsAway<'a>> {
    let Some(load) = ctx.load else {
        return Vec::new();
    };
    let dropping = |c: &CpuRates| c.dropped.is_some_and(|d| d >= min_rate && d > 0.0);
    let saturated: Vec<(u32, f64, f64)> = load
        .cpu
        .cpus
        .iter()
        .filter(|c| dropping(c) && idle(c) < SATURATED_IDLE)
        .map(|c| (c.cpu, c.dropped.unwrap_or(0.0), idle(c)))
        .collect();
    if saturated.is_empty() {
        return Vec::new();
    }
    let full: CpuSet = saturated.iter().map(|c| c.0).collect();
    let keep_off = keep_off();
    let mut out = Vec::new();
    for nic in &ctx.view.nics {
        let fed: Vec<(u32, &CpuSet)> = nic
            .rx_queues
            .iter()
            .filter_map(|q| Some((q.index, q.rps_cpus.known()?)))
            .filter(|(_, m)| !m.intersection(&full).is_empty())
            .collect();
        if fed.is_empty() {
            continue;
        }
        let room: CpuSet = ctx
            .local_cpus(nic)
            .iter()
            .filter(|c| {
                ctx.cpu(*c)
                    .is_some_and(|r| !dropping(r) && idle(r) >= ROOM_IDLE)
            })
            .filter(|c| !full.contains(*c) && !keep_off.contains(*c))
            .collect();
        let moves: Vec<(u32, CpuSet, CpuSet)> = fed
            .iter()
            .filter_map(|(q, mask)| {
                let rest = mask.difference(&full);
                let to = if rest.is_empty() { room.clone() } else { rest };
                (!to.is_empty()).then(|| (*q, (*mask).clone(), to))
            })
            .collect();
        if moves.len() == fed.len() {
            out.push(RpsAway {
                nic,
                saturated: saturated.clone(),
                room,
                moves,
            });
        }
    }
    out
}

/// Severity of a loss counter: any growth in a live sample is a warning; since boot, an average
/// of at least one per second is, anything less is history worth knowing.
fn loss_severity(ctx: &Ctx, per_s: f64) -> Severity {
    if !ctx.since_boot() || per_s >= 1.0 {
        Severity::Warning
    } else {
        Severity::Info
    }
}

pub fn backlog_drops(ctx: &Ctx) -> Vec<Finding> {
    let Some(load) = ctx.load else {
        return Vec::new();
    };
    let dropping: Vec<_> = load
        .cpu
        .cpus
        .iter()
        .filter(|c| c.dropped.unwrap_or(0.0) > 0.0)
        .collect();
    if dropping.is_empty() {
        return Vec::new();
    }
    let total: f64 = dropping.iter().filter_map(|c| c.dropped).sum();
    let flow_limited: f64 = load.cpu.cpus.iter().filter_map(|c| c.flow_limit).sum();
    let backlog = ctx.view.sysctls.netdev_max_backlog.known().copied();
    let mut evidence = capped(
        dropping
            .iter()
            .map(|c| {
                format!(
                    "CPU {}: {} packets dropped",
                    c.cpu,
                    ctx.amount(c.dropped.unwrap_or(0.0))
                )
            })
            .collect(),
        8,
    );
    if let Some(b) = backlog {
        evidence.push(format!("net.core.netdev_max_backlog = {b}"));
    }
    let mut steps = Vec::new();
    let mut summary = "lengthen the per-CPU backlog".to_string();
    if flow_limited > 0.0 {
        let share = flow_limited * 100.0 / total.max(flow_limited);
        evidence.push(format!(
            "{} of them ({}) were cut by the flow limit (one flow over its share of the backlog)",
            ctx.amount(flow_limited),
            pct(share)
        ));
        // Blame the flow limit only for what it did: most of the drops (163 of 161,088 is
        // the backlog's doing, not one flow's).
        if share >= 50.0 {
            summary = "one flow fills the backlog: the flow limit is protecting the others; spread that flow's work or lengthen the backlog".into();
        }
    }
    let away = rps_away(ctx, 0.0, CpuSet::default);
    for a in &away {
        evidence.extend(away_evidence(a));
        let moves: Vec<(u32, String)> = a
            .moves
            .iter()
            .map(|(q, _, to)| (*q, ctx.mask(to)))
            .collect();
        steps.extend(crate::model::ctx::queue_writes(
            a.nic, "rx", "rps_cpus", &moves,
        ));
    }
    if !away.is_empty() {
        summary = "a CPU with no idle time cannot drain its backlog at any length: move RPS off it first, then lengthen the backlog for what bursts remain".into();
    }
    let next = backlog.map_or(4096, |b| (b * 2).max(4096));
    steps.push(format!("sysctl -w net.core.netdev_max_backlog={next}"));
    if away.is_empty() && dropping.len() == 1 && load.cpu.cpus.len() > 1 {
        summary += "; the drops are on one CPU, so spread its work first (RPS)";
    }
    vec![Finding {
        id: "backlog-drops".into(),
        severity: loss_severity(ctx, total),
        title: format!("packets dropped at the per-CPU backlog ({})", ctx.amount(total)),
        evidence,
        why: "Packets queued to a CPU by RPS, RFS or netif_rx() (veth, loopback, non-NAPI drivers) wait in that CPU's backlog; when it holds netdev_max_backlog packets (or one flow exceeds its flow-limit share) new ones are dropped (softnet_stat column 2).".into(),
        fix: Fix { summary, steps, tune: Some("netsteer tune apply --profile throughput".into()) },
        subjects: Subjects { cpus: dropping.iter().map(|c| c.cpu).collect(), ..Default::default() },
    }]
}

/// The evidence lines for one device of [`rps_away`].
pub fn away_evidence(a: &RpsAway) -> Vec<String> {
    let queues: Vec<String> = a.moves.iter().map(|m| format!("rx-{}", m.0)).collect();
    let mut out = vec![
        format!(
            "drops on CPUs with no idle time: {}",
            a.saturated
                .iter()
                .map(|(c, d, i)| format!("CPU {c} {d:.0}/s at {i:.0} % idle"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "RPS sends {}'s {} there; a CPU with no time to drain its backlog drops at any backlog length",
            a.nic.name,
            queues.join(", ")
        ),
    ];
    if !a.room.is_empty() {
        out.push(format!(
            "CPUs near {} with at least {ROOM_IDLE:.0} % idle: {}",
            a.nic.name,
            a.room.to_list()
        ));
    }
    out
}

pub fn budget_squeeze(ctx: &Ctx) -> Vec<Finding> {
    let Some(load) = ctx.load else {
        return Vec::new();
    };
    // The share of NET_RX runs that were squeezed; unknown when /proc/softirqs has no count
    // of runs for the CPU (no column for it, or no file): then no share is made up.
    let ratio = |c: &netsteer_host::sample::CpuRates| -> Option<f64> {
        let runs = c.net_rx?;
        Some(if runs > 0.0 {
            c.squeezed.unwrap_or(0.0) * 100.0 / runs
        } else {
            100.0
        })
    };
    // An occasional squeeze is normal on a busy host; below 0.1% of the NET_RX runs it is noise.
    let squeezed: Vec<_> = load
        .cpu
        .cpus
        .iter()
        .filter(|c| c.squeezed.unwrap_or(0.0) > 0.0 && ratio(c).is_none_or(|r| r >= 0.1))
        .collect();
    if squeezed.is_empty() {
        return Vec::new();
    }
    let heavy = squeezed
        .iter()
        .any(|c| ratio(c).is_some_and(|r| r >= 1.0) && c.squeezed.unwrap_or(0.0) >= 1.0);
    let budget = ctx.view.sysctls.netdev_budget.known().copied();
    let usecs = ctx.view.sysctls.netdev_budget_usecs.known().copied();
    let mut evidence = capped(
        squeezed
            .iter()
            .map(|c| {
                match ratio(c) {
                    Some(r) => format!(
                        "CPU {}: {} squeezes ({} of its NET_RX softirq runs)",
                        c.cpu,
                        ctx.amount(c.squeezed.unwrap_or(0.0)),
                        pct(r)
                    ),
                    None => format!(
                        "CPU {}: {} squeezes (its NET_RX runs are unknown: /proc/softirqs has no count for it)",
                        c.cpu,
                        ctx.amount(c.squeezed.unwrap_or(0.0))
                    ),
                }
            })
            .collect(),
        8,
    );
    evidence.push(format!(
        "net.core.netdev_budget = {}, netdev_budget_usecs = {}",
        budget.map_or("?".into(), |b| b.to_string()),
        usecs.map_or("?".into(), |u| u.to_string())
    ));
    let mut steps = Vec::new();
    if let Some(b) = budget {
        steps.push(format!("sysctl -w net.core.netdev_budget={}", b * 2));
    }
    if let Some(u) = usecs {
        steps.push(format!("sysctl -w net.core.netdev_budget_usecs={}", u * 2));
    }
    vec![Finding {
        id: "budget-squeeze".into(),
        severity: if heavy { Severity::Warning } else { Severity::Info },
        title: "NET_RX softirq runs out of budget with packets still waiting".into(),
        evidence,
        why: "One net_rx_action may process netdev_budget packets or run netdev_budget_usecs; when it stops with work left it counts a time_squeeze and defers the rest to ksoftirqd, which competes with normal threads, adding latency and risking ring overflows.".into(),
        fix: Fix {
            summary: "double the softirq budget (packets and time); if one CPU squeezes, spreading its work helps more".into(),
            steps,
            tune: Some("netsteer tune apply --profile throughput".into()),
        },
        subjects: Subjects { cpus: squeezed.iter().map(|c| c.cpu).collect(), ..Default::default() },
    }]
}

pub fn nic_rx_drops(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some(d) = ctx.device(&nic.name) else {
            continue;
        };
        let lost = d.rx_drop + d.rx_fifo;
        if lost <= 0.0 {
            continue;
        }
        let mut evidence = vec![format!(
            "{}: {} packets dropped and {} ring overruns (of {} received)",
            nic.name,
            ctx.amount(d.rx_drop),
            ctx.amount(d.rx_fifo),
            ctx.amount(d.rx_packets)
        )];
        let mut steps = Vec::new();
        if let Some(r) = nic.settings.as_ref().and_then(|s| s.rings.known())
            && let (Some(rx), Some(max)) = (r.rx, r.rx_max)
        {
            evidence.push(format!("rx ring: {rx} descriptors of at most {max}"));
            if rx < max {
                steps.push(format!("ethtool -G {} rx {max}", nic.name));
            }
        }
        steps.push(format!(
            "ethtool -S {} | grep -i -e drop -e miss -e no_buf   # which counter grows",
            nic.name
        ));
        out.push(Finding {
            id: "nic-rx-drops".into(),
            severity: loss_severity(ctx, lost),
            title: format!("{} drops received packets before the stack sees them", nic.name),
            evidence,
            why: "The NIC writes packets into a ring of receive descriptors that the queue's NAPI poll refills; when the poll falls behind (a busy or far CPU, a short ring, a small budget) the ring fills and the hardware drops.".into(),
            fix: Fix {
                summary: "lengthen the rx ring and make sure the queue's CPU keeps up (spread queues, raise the budget)".into(),
                steps,
                tune: Some(super::rps::tune_cmd(ctx, Profile::Throughput, &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}

pub fn socket_rcvbuf_errors(ctx: &Ctx) -> Vec<Finding> {
    let Some(load) = ctx.load else {
        return Vec::new();
    };
    let Some(errors) = load.net.udp_rcvbuf_errors.filter(|e| *e > 0.0) else {
        return Vec::new();
    };
    let delivered = load.net.udp_in.unwrap_or(0.0);
    vec![Finding {
        id: "socket-rcvbuf-errors".into(),
        severity: loss_severity(ctx, errors),
        title: "UDP datagrams dropped because a socket's receive buffer was full".into(),
        evidence: vec![format!(
            "Udp RcvbufErrors: {} (InDatagrams {})",
            ctx.amount(errors),
            ctx.amount(delivered)
        )],
        why: "The kernel delivered the datagram but the application did not read fast enough and the socket's SO_RCVBUF was full; no stack tuning fixes a slow reader, but a bigger buffer absorbs bursts and more readers (SO_REUSEPORT) add capacity.".into(),
        fix: Fix {
            summary: "give the socket a bigger buffer and the application more reader threads, on CPUs other than the IRQ CPUs".into(),
            steps: vec![
                "sysctl -w net.core.rmem_max=16777216   # then SO_RCVBUF up to it in the application".into(),
                "nstat -az UdpRcvbufErrors   # confirm it stops growing".into(),
            ],
            tune: None,
        },
        subjects: Subjects::default(),
    }]
}
