//! Software steering: RPS for devices with fewer queues than CPUs, RFS so that flows follow
//! their reading thread (Documentation/networking/scaling.rst).

use crate::doctor::model::{Finding, Fix, Severity, Subjects};
use crate::model::ctx::{Ctx, cpus_text, pct, queue_writes, rate};
use crate::model::desired::{Action, Item, ItemKind, Profile};
use crate::model::load::LoadSource;
use crate::model::planner::{IrqbalancePolicy, PlanOptions};
pub use crate::model::rfs::{RFS_ENTRIES, flow_cnt_per_queue};
use netsteer_host::CpuSet;
use netsteer_host::nic::Nic;

/// Drivers that implement `ndo_rx_flow_steer` (accelerated RFS) in mainline.
const ARFS_DRIVERS: &[&str] = &[
    "mlx5_core",
    "mlx4_en",
    "mlx4_core",
    "sfc",
    "bnxt_en",
    "ice",
    "qede",
    "enic",
    "hns3",
];

/// The `netsteer tune apply` line that makes a fix: `profile` on `dev`, with the doctor's own
/// sample length when its load was sampled, so tune places IRQs from the same kind of reading
/// the finding's steps were planned from ([`PlanOptions::load`]).
pub fn tune_cmd(ctx: &Ctx, profile: Profile, dev: &str) -> String {
    let sample = match ctx.load {
        Some(l) if l.source == LoadSource::Sampled => {
            format!(" --sample {}", l.seconds.round().max(1.0))
        }
        _ => String::new(),
    };
    format!("netsteer tune apply --profile {profile} --dev {dev}{sample}")
}

/// The profile for a fix that spreads packet work in software (RPS/RFS): the doctor's goal's,
/// except under a latency goal, whose profile leaves RPS and RFS off; there it is balanced,
/// which spreads without throughput's budgets and backlogs.
pub fn spreading_profile(ctx: &Ctx) -> Profile {
    match Profile::for_goal(ctx.goal) {
        Profile::Latency => Profile::Balanced,
        p => p,
    }
}

/// The `tune apply` line of a fix that pins IRQs: [`tune_cmd`], with `--irqbalance stop` where
/// irqbalance runs or may run (its state unknown), since `--irqbalance leave` skips every pin
/// then and the line would leave the IRQs where they are.
pub fn pin_tune_cmd(ctx: &Ctx, profile: Profile, dev: &str) -> String {
    let line = tune_cmd(ctx, profile, dev);
    match ctx.view.irqbalance_may_run() {
        Some(_) => format!("{line} --irqbalance stop"),
        None => line,
    }
}

/// The step that comes before IRQ pins where irqbalance runs or may run: it rewrites
/// smp_affinity every 10 s (irqbalance(1)), undoing them.
pub fn irqbalance_stop_step(ctx: &Ctx) -> Option<String> {
    let who = ctx.view.irqbalance_may_run()?;
    let why = if ctx.view.irqbalance.known().is_some() {
        who
    } else {
        "if it runs (this view cannot tell)".to_string()
    };
    Some(format!(
        "systemctl stop irqbalance   # {why}: it would move these IRQs back"
    ))
}

/// `steps` with [`irqbalance_stop_step`] first when one of them writes an IRQ's affinity (the
/// rules that write their own pins: NUMA placement and HT siblings).
pub fn with_irqbalance_stop(ctx: &Ctx, steps: Vec<String>) -> Vec<String> {
    let pins = steps.iter().any(|s| s.contains("/smp_affinity"));
    pins.then(|| irqbalance_stop_step(ctx))
        .flatten()
        .into_iter()
        .chain(steps)
        .collect()
}

/// A fix the planner made for one NIC: the profile that makes it and its items.
pub struct Planned {
    pub profile: Profile,
    pub items: Vec<Item>,
}

impl Planned {
    /// The item that moves IRQ `irq`, if the fix moves it.
    pub fn pin_of(&self, irq: u32) -> Option<&Item> {
        let file = crate::model::knob::ItemId::Irq(irq).target()?;
        self.items
            .iter()
            .find(|i| i.action == Action::Change && i.target == file)
    }

    /// Whether the fix moves an IRQ.
    fn pins(&self) -> bool {
        self.items
            .iter()
            .any(|i| i.kind == ItemKind::IrqAffinity && i.action == Action::Change)
    }

    /// The shell commands of the items that change something, in plan order; stopping
    /// irqbalance first when it runs or may run and the fix moves an IRQ.
    pub fn steps_in(&self, ctx: &Ctx) -> Vec<String> {
        let stop = self.pins().then(|| irqbalance_stop_step(ctx)).flatten();
        stop.into_iter()
            .chain(
                self.items
                    .iter()
                    .filter(|i| i.action == Action::Change)
                    .filter_map(|i| i.shell_command()),
            )
            .collect()
    }

    /// The `tune apply` line that makes these steps (with `--irqbalance stop` when they
    /// begin by stopping it).
    pub fn tune(&self, ctx: &Ctx, dev: &str) -> String {
        if self.pins() {
            pin_tune_cmd(ctx, self.profile, dev)
        } else {
            tune_cmd(ctx, self.profile, dev)
        }
    }
}

pub struct RpsPlan {
    pub cpus: CpuSet,
    pub steps: Vec<String>,
    /// The `tune apply` line that makes these steps.
    pub tune: String,
}

/// Whether RPS is off on every receive queue of `nic`: each queue's `rps_cpus` read, and
/// empty. A queue whose mask could not be read makes the answer no (unknown is not off). The
/// one place the doctor decides "RPS is off" (the rps and cpu rules ask it).
pub fn rps_off(nic: &Nic) -> bool {
    !nic.rx_queues.is_empty()
        && nic
            .rx_queues
            .iter()
            .all(|q| q.rps_cpus.known().is_some_and(CpuSet::is_empty))
}

fn rps_on(nic: &Nic) -> bool {
    nic.rx_queues
        .iter()
        .any(|q| q.rps_cpus.known().is_some_and(|s| !s.is_empty()))
}

/// The RPS/RFS change `netsteer tune apply` would make, taken from the planner itself so
/// doctor's steps and tune's writes cannot disagree: RPS over the NIC's local CPUs without
/// those taking its receive interrupts, RFS sized for the device, and any IRQ pin the plan
/// makes first (it keeps an IRQ already on an acceptable CPU). Planned for the doctor's goal
/// where that profile spreads with RPS; a latency goal's profile leaves RPS off (an IPI and a
/// second CPU per packet), so there the fix names the balanced profile, which spreads without
/// throughput's budgets and backlogs.
pub fn rps_plan(ctx: &Ctx, nic: &Nic) -> RpsPlan {
    let p = planned(
        ctx,
        nic,
        spreading_profile(ctx),
        &[
            ItemKind::IrqAffinity,
            ItemKind::Rps,
            ItemKind::RfsTable,
            ItemKind::RfsFlowCnt,
        ],
    );
    let cpus = p
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Rps)
        .filter_map(|i| CpuSet::parse_mask(&i.desired).ok())
        .fold(CpuSet::new(), |acc, s| acc.union(&s));
    RpsPlan {
        cpus,
        steps: p.steps_in(ctx),
        tune: p.tune(ctx, &nic.name),
    }
}

/// The items of `kinds` that concern this one NIC in the plan `tune` makes for the whole host
/// (all actions, in plan order), with `profile` (the doctor's goal's, or the one whose plan
/// holds this fix) and the doctor's own load; no items when the planner refuses. The
/// host-wide plan, not one made for this NIC alone: queues are placed over every NIC at once
/// (no two NICs stacked on the same CPUs), so doctor's fix and `tune plan`'s line are the
/// same line.
pub fn planned(ctx: &Ctx, nic: &Nic, profile: Profile, kinds: &[ItemKind]) -> Planned {
    // Where irqbalance runs or may run, a fix that pins IRQs is the one `--irqbalance stop`
    // plans (the flag its tune line carries): with it left running every pin is skipped.
    let irqbalance = match ctx.view.irqbalance_may_run() {
        Some(_) if kinds.contains(&ItemKind::IrqAffinity) => IrqbalancePolicy::Stop,
        _ => IrqbalancePolicy::Leave,
    };
    let host = PlanOptions {
        load: ctx.load.cloned(),
        irqbalance,
        ..PlanOptions::for_profile(profile)
    };
    let alone = PlanOptions {
        devices: vec![nic.name.clone()],
        ..host.clone()
    };
    let plan = crate::model::planner::plan(ctx.view, &host)
        .ok()
        .filter(|p| p.devices.contains(&nic.name))
        .or_else(|| crate::model::planner::plan(ctx.view, &alone).ok());
    let items = plan
        .map(|p| {
            p.items
                .into_iter()
                .filter(|i| kinds.contains(&i.kind))
                .filter(|i| concerns(i, nic))
                .collect()
        })
        .unwrap_or_default();
    Planned { profile, items }
}

/// True when a plan item is about `nic`: its IRQs, its queues, its own settings.
fn concerns(item: &Item, nic: &Nic) -> bool {
    use crate::model::knob::ItemId;
    match ItemId::parse(&item.id) {
        Some(ItemId::Irq(n)) => nic.irq(n).is_some(),
        Some(
            ItemId::Queue { dev, .. }
            | ItemId::Queues { dev, .. }
            | ItemId::Nic { dev, .. }
            | ItemId::NapiDefault { dev, .. }
            | ItemId::NapiThread { dev, .. },
        ) => dev == nic.name,
        // Host-wide items (sysctls, services, --set files) serve every NIC.
        _ => true,
    }
}

/// RFS for a device whose RPS (or RSS) is already set: the global table and each queue's share.
fn rfs_steps(ctx: &Ctx, nic: &Nic) -> Vec<String> {
    let mut steps = Vec::new();
    let entries = ctx.view.sysctls.rps_sock_flow_entries.known().copied();
    if entries.is_none_or(|e| e < RFS_ENTRIES as i64) {
        steps.push(format!(
            "sysctl -w net.core.rps_sock_flow_entries={RFS_ENTRIES}"
        ));
    }
    let per_queue = flow_cnt_per_queue(RFS_ENTRIES, nic.rx_queues.len());
    let values: Vec<(u32, String)> = nic
        .rx_queues
        .iter()
        .filter(|q| q.rps_flow_cnt.known().is_none_or(|c| *c < per_queue))
        .map(|q| (q.index, per_queue.to_string()))
        .collect();
    steps.extend(queue_writes(nic, "rx", "rps_flow_cnt", &values));
    steps
}

pub fn single_queue_no_rps(ctx: &Ctx) -> Vec<Finding> {
    if ctx.usable.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        if nic.rx_queues.len() != 1 || !rps_off(nic) {
            continue;
        }
        let q = &nic.rx_queues[0];
        let rps = q.rps_cpus.known().expect("read: rps_off");
        let plan = rps_plan(ctx, nic);
        let mut evidence = vec![format!(
            "{} has 1 receive queue and rx-0/rps_cpus = {} (RPS off); {} CPUs can take kernel work",
            nic.name,
            ctx.mask(rps),
            ctx.usable.len()
        )];
        let mut subjects = Subjects {
            devices: vec![nic.name.clone()],
            queues: vec![format!("{}/rx-0", nic.name)],
            ..Default::default()
        };
        let mut busiest = 0.0f64;
        for i in ctx.rx_irqs(nic) {
            // Only CPUs something says it goes to: a mask's or an idle vector's are none.
            let placement = ctx.irq_placement(i);
            let cpus = placement.cpus().cloned().unwrap_or_default();
            let load: Vec<String> = cpus
                .iter()
                .filter_map(|c| ctx.cpu(c))
                .map(|c| {
                    busiest = busiest.max(c.soft + c.irq);
                    format!("CPU {} at {} softirq + irq", c.cpu, pct(c.soft + c.irq))
                })
                .collect();
            evidence.push(format!(
                "IRQ {} ({}) is delivered to {}{}",
                i.irq,
                i.name,
                placement.text(),
                if load.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", load.join(", "))
                }
            ));
            subjects.irqs.push(i.irq);
            subjects.cpus.extend(cpus.iter());
        }
        let rx = ctx.device(&nic.name).map(|d| d.rx_packets);
        if let Some(rx) = rx {
            evidence.push(format!(
                "{} received {} packets{}",
                nic.name,
                rate(rx),
                ctx.rate_unit()
            ));
        }
        let loaded = busiest >= 10.0 || rx.is_some_and(|r| r >= 10_000.0);
        let channels = nic
            .settings
            .as_ref()
            .and_then(|s| s.channels.known())
            .and_then(|c| c.combined_max.or(c.rx_max));
        let more_queues = match channels {
            Some(max) if max > 1 => Some(format!(
                "ethtool -L {} combined {}   # the device offers up to {max} queues: RSS in hardware beats RPS",
                nic.name,
                max.min(ctx.usable.len() as u32)
            )),
            _ => None,
        };
        let mut steps = Vec::new();
        steps.extend(more_queues);
        steps.extend(plan.steps);
        out.push(Finding {
            id: "single-queue-no-rps".into(),
            severity: if loaded { Severity::Warning } else { Severity::Info },
            title: format!(
                "{} has a single receive queue and RPS is off: one CPU does all its receive work",
                nic.name
            ),
            evidence,
            why: if loaded {
                "Without RSS queues or RPS, every packet of this device is processed by the one CPU that takes its interrupt; RPS hashes flows to other CPUs in software (scaling.rst), which is how seed 003's 16-vCPU guest got past one CPU at 100% softirq.".into()
            } else {
                "At the load seen the interrupt CPU copes, but it is the ceiling: every packet of this device is processed by that one CPU. RPS would share the protocol work with the other CPUs when traffic grows.".into()
            },
            fix: Fix {
                summary: format!(
                    "set RPS on {}/rx-0 to {} (its local CPUs without the interrupt CPU) and size RFS ({} entries, {} per queue)",
                    nic.name,
                    cpus_text(&plan.cpus),
                    RFS_ENTRIES,
                    flow_cnt_per_queue(RFS_ENTRIES, 1)
                ),
                steps,
                tune: Some(plan.tune.clone()),
            },
            subjects,
        });
    }
    out
}

pub fn rfs_off(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    let entries = ctx.view.sysctls.rps_sock_flow_entries.known().copied();
    for nic in ctx.traffic_nics() {
        let rps = rps_on(nic);
        let multi = nic.rx_queues.len() >= 2;
        if !rps && !multi {
            continue;
        }
        let queues_off: Vec<u32> = nic
            .rx_queues
            .iter()
            .filter(|q| q.rps_flow_cnt.known() == Some(&0))
            .map(|q| q.index)
            .collect();
        let table_off = entries == Some(0);
        if !table_off && queues_off.is_empty() {
            continue;
        }
        let features = nic.settings.as_ref().and_then(|s| s.features.known());
        let ntuple = features.and_then(|f| f.get("ntuple-filters"));
        let driver = nic.driver.known().map(String::as_str).unwrap_or("");
        let arfs_possible =
            ARFS_DRIVERS.contains(&driver) && ntuple.is_some_and(|f| f.changeable && !f.active);
        // Software RFS adds a cross-CPU hop; seed 000 measured +2 µs on a latency test. For a
        // latency goal on a multi-queue NIC only the hardware variant is worth proposing.
        if ctx.goal == crate::doctor::Goal::Latency && !rps && !arfs_possible {
            continue;
        }
        let mut evidence = Vec::new();
        if table_off {
            evidence
                .push("net.core.rps_sock_flow_entries = 0 (the global RFS table is off)".into());
        }
        if !queues_off.is_empty() {
            evidence.push(format!(
                "{}: rps_flow_cnt = 0 on {} of {} receive queues",
                nic.name,
                queues_off.len(),
                nic.rx_queues.len()
            ));
        }
        evidence.push(if rps {
            format!("{}: RPS is on, so flows are hashed to CPUs without regard to where their readers run", nic.name)
        } else {
            format!("{}: {} hardware queues; each flow is processed on its queue's CPU, not its reader's", nic.name, nic.rx_queues.len())
        });
        let mut steps = rfs_steps(ctx, nic);
        if arfs_possible {
            evidence.push(format!(
                "{} ({driver}) supports accelerated RFS but ntuple-filters is off",
                nic.name
            ));
            steps.push(format!("ethtool -K {} ntuple on", nic.name));
        }
        out.push(Finding {
            id: "rfs-off".into(),
            severity: if rps { Severity::Warning } else { Severity::Info },
            title: format!("{}: RFS is off, so packets are not processed on the CPU of the thread that reads them", nic.name),
            evidence,
            why: "RFS records the CPU where each flow's socket was last read and steers the flow's packets there (aRFS programs the NIC to do it), keeping the socket's data in that CPU's cache; without it RPS/RSS choose a CPU by hash alone.".into(),
            fix: Fix {
                summary: format!(
                    "enable RFS: {RFS_ENTRIES} socket flow entries and {} per receive queue{}",
                    flow_cnt_per_queue(RFS_ENTRIES, nic.rx_queues.len()),
                    if arfs_possible { ", plus ntuple for aRFS" } else { "" }
                ),
                steps,
                tune: Some(tune_cmd(ctx, spreading_profile(ctx), &nic.name)),
            },
            subjects: Subjects {
                devices: vec![nic.name.clone()],
                queues: queues_off.iter().map(|q| format!("{}/rx-{q}", nic.name)).collect(),
                ..Default::default()
            },
        });
    }
    out
}
