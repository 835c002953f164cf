//! What every rule needs to know about the host, computed once: online CPUs, each IRQ's CPU,
//! which interfaces carry traffic, the CPUs local to a NIC, and masks at the host's width.

use super::load::{App, Goal, Load, LoadSource, Trace};
use netsteer_host::CpuSet;
use netsteer_host::nic::{Nic, NicIrq};
use netsteer_host::sample::{CpuRates, DeviceRates};
use netsteer_host::view::HostView;

/// Packets per second above which a virtual device (veth, tun) counts as carrying traffic and
/// a rule about its steering matters.
pub const BUSY_DEVICE_PPS: f64 = 1000.0;

/// Interrupts a vector must have counted since boot before its counts by CPU say where it
/// goes. Every vector takes one at probe time (the driver's self-test or first link event,
/// usually on CPU 0) and a queue that carried no traffic a handful more: real trees show
/// vectors at 1 each, or 116, 0, 4 and 0. A queue that carried traffic counts thousands within
/// seconds (one interrupt per NAPI poll cycle even at 1,000 packets/s), so 1,000 parts the two.
pub const IRQ_COUNT_FLOOR: u64 = 1000;

/// Interrupts a vector must have counted over a sampled window before its counts by CPU say
/// where it goes now: at 100 a share of 1 % is one interrupt, below it a CPU's share is noise.
pub const IRQ_SAMPLED_FLOOR: f64 = 100.0;

/// The share of a vector's counted interrupts from which a CPU is named as one it goes to.
/// Counts since boot are a history: an IRQ irqbalance moved around shows a share on every CPU
/// it visited (pcp-40cpu-mlx4: 20 CPUs of 1-14 % each, none over half), and each of them did
/// take it; naming only the busiest column turns such a vector into "one CPU". Below 1 % is
/// the probe-time interrupt or the moments before a move.
pub const IRQ_CPU_SHARE: f64 = 0.01;

/// Where one IRQ goes, and what says so ([`Ctx::irq_placement`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The kernel's own word: `effective_affinity_list`, a one-CPU `smp_affinity_list`, or
    /// the requested CPU of a move still pending.
    Affinity { cpus: CpuSet, source: &'static str },
    /// A requested mask of several CPUs and no effective affinity: delivered to CPUs of this
    /// set. On x86 the vector allocator gives an MSI one CPU of the mask (the one with the fewest
    /// vectors: arch/x86/kernel/apic/vector.c, irq_matrix_alloc), which no file of this kernel shows; only "inside this set" holds.
    Within(CpuSet),
    /// Every CPU that took at least [`IRQ_CPU_SHARE`] of `interrupts`, counted since boot or
    /// over the sampled window.
    Counted {
        cpus: CpuSet,
        interrupts: u64,
        since_boot: bool,
    },
    /// No affinity file and fewer than [`IRQ_COUNT_FLOOR`] interrupts since boot: nothing
    /// says where it goes, and it carries no work.
    Idle { interrupts: u64 },
    /// No affinity file and its interrupts since boot not counted by CPU (no load read, or
    /// quiet over the sample): only the busiest column, which is not where an IRQ goes.
    Uncounted { interrupts: u64 },
}

impl Placement {
    /// The CPUs it goes to, when something says so exactly (affinity or counts).
    pub fn cpus(&self) -> Option<&CpuSet> {
        match self {
            Placement::Affinity { cpus, .. } | Placement::Counted { cpus, .. } => Some(cpus),
            _ => None,
        }
    }

    /// The CPUs it may go to: [`Placement::cpus`], or the mask it goes somewhere inside.
    pub fn bound(&self) -> Option<&CpuSet> {
        match self {
            Placement::Within(set) => Some(set),
            other => other.cpus(),
        }
    }

    /// "CPU 3", "one CPU of 0-15 (smp_affinity_list, no effective_affinity_list)", "CPUs
    /// 0-1,8-9 (counted since boot)": the placement and what says so.
    pub fn text(&self) -> String {
        match self {
            Placement::Affinity { cpus, .. } => cpus_text(cpus),
            Placement::Within(set) => format!(
                "one CPU of {} (smp_affinity_list; no effective_affinity_list says which)",
                set.to_list()
            ),
            Placement::Counted {
                cpus, since_boot, ..
            } => format!(
                "{} (counted {})",
                cpus_text(cpus),
                if *since_boot {
                    "since boot"
                } else {
                    "over the sample"
                }
            ),
            Placement::Idle { interrupts } => format!(
                "no CPU anything says (idle: {interrupts} interrupts since boot, no affinity file)"
            ),
            Placement::Uncounted { interrupts } => format!(
                "no CPU anything says ({interrupts} interrupts since boot not counted by CPU, no affinity file)"
            ),
        }
    }
}

/// What a set of vectors with no placement lacks, for a not-judged line or evidence: "no
/// effective_affinity/smp_affinity, and its vectors counted only 1, 1, 1, 1 interrupts since
/// boot (below the floor of 1000)".
pub fn unplaced_text(unplaced: &[(&NicIrq, Placement)]) -> String {
    let counts = |idle: bool| -> Vec<String> {
        unplaced
            .iter()
            .filter(|(_, p)| matches!(p, Placement::Idle { .. }) == idle)
            .map(|(i, _)| i.count.to_string())
            .collect()
    };
    let (idle, uncounted) = (counts(true), counts(false));
    let mut parts = Vec::new();
    if !idle.is_empty() {
        parts.push(format!(
            "counted only {} interrupts since boot (below the floor of {IRQ_COUNT_FLOOR})",
            idle.join(", ")
        ));
    }
    if !uncounted.is_empty() {
        parts.push(format!(
            "counted {} interrupts since boot, but not by CPU (no per-CPU rates in the load)",
            uncounted.join(", ")
        ));
    }
    format!(
        "no effective_affinity/smp_affinity, and its vectors {}",
        parts.join("; ")
    )
}

pub struct Ctx<'a> {
    pub view: &'a HostView,
    pub load: Option<&'a Load>,
    pub goal: Goal,
    pub app: Option<&'a App>,
    pub online: CpuSet,
    /// Online CPUs that are neither `isolcpus=` nor `nohz_full=`: where kernel work may be
    /// steered. Both lists name CPUs the admin set aside for an application that must not be
    /// interrupted (Documentation/admin-guide/kernel-per-CPU-kthreads.rst); an IRQ or RPS there
    /// undoes that.
    pub usable: CpuSet,
    /// Stage latencies from `netsteer trace` over the sample (`doctor --trace`).
    pub trace: Option<&'a Trace>,
    /// What a rule found it could not judge while it ran ([`Ctx::not_judged`]), beside the
    /// inputs the engine finds unknown before it runs (`doctor::inputs`).
    blind: std::cell::RefCell<Vec<Blind>>,
}

/// One rule that could not judge one subject: which input it lacked and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Blind {
    pub rule: &'static str,
    /// A device name, or empty for the host.
    pub subject: String,
    /// The input and why it is missing: `eth0 tx-3 xps_cpus: absent`.
    pub needs: String,
}

impl<'a> Ctx<'a> {
    pub fn new(
        view: &'a HostView,
        load: Option<&'a Load>,
        goal: Goal,
        app: Option<&'a App>,
    ) -> Self {
        let online = view.topology.online.clone();
        let mut usable = match view.topology.isolated.known() {
            Some(iso) => online.difference(iso),
            None => online.clone(),
        };
        if let Some(nohz) = view.topology.nohz_full.known() {
            usable = usable.difference(nohz);
        }
        Ctx {
            view,
            load,
            goal,
            app,
            online,
            usable,
            trace: None,
            blind: Default::default(),
        }
    }

    /// Records that `rule` could not judge `subject` (a device, or "" for the host) because it
    /// lacks `needs` (the input and why: "eth0 rx-0 rps_flow_cnt: absent"). A rule calls it
    /// where it would otherwise return no finding for want of data, so the report says "not
    /// judged" instead of letting silence read as health.
    pub fn not_judged(&self, rule: &'static str, subject: &str, needs: impl Into<String>) {
        self.blind.borrow_mut().push(Blind {
            rule,
            subject: subject.to_string(),
            needs: needs.into(),
        });
    }

    /// Everything [`Ctx::not_judged`] recorded, emptied.
    pub fn take_blind(&self) -> Vec<Blind> {
        std::mem::take(&mut self.blind.borrow_mut())
    }

    pub fn cpu(&self, cpu: u32) -> Option<&CpuRates> {
        self.load?.cpu.cpus.iter().find(|c| c.cpu == cpu)
    }

    pub fn device(&self, name: &str) -> Option<&DeviceRates> {
        self.load?.net.device(name)
    }

    pub fn since_boot(&self) -> bool {
        self.load.is_some_and(|l| l.source == LoadSource::SinceBoot)
    }

    /// "per second" or "per second on average since boot", for evidence lines.
    pub fn rate_unit(&self) -> &'static str {
        if self.since_boot() {
            "/s averaged since boot"
        } else {
            "/s"
        }
    }

    /// Interrupts per second of one IRQ over the load window.
    pub fn irq_rate(&self, irq: u32) -> Option<f64> {
        self.load?
            .cpu
            .irqs
            .iter()
            .find(|r| r.irq == irq)
            .map(|r| r.total)
    }

    /// Where an IRQ goes, from what says so: the effective affinity when the kernel shows it
    /// (the requested mask while a move is pending), else a one-CPU requested mask, else the
    /// CPUs that took a share of its interrupts when it counted enough of them (over the
    /// sampled window, else since boot), else a wider requested mask (somewhere in it), else
    /// nothing: an idle vector, or one whose counts by CPU were not read.
    pub fn irq_placement(&self, irq: &NicIrq) -> Placement {
        let requested = irq.affinity.requested.known().filter(|s| !s.is_empty());
        let from_mask = |r: &CpuSet, source: &'static str| {
            if r.len() == 1 {
                Placement::Affinity {
                    cpus: r.clone(),
                    source,
                }
            } else {
                Placement::Within(r.clone())
            }
        };
        if let Some(eff) = irq.affinity.effective.known().filter(|s| !s.is_empty()) {
            // A move still pending (IrqAffinity::move_pending) is delivered within the
            // requested set at the IRQ's next interrupt: that is where it goes.
            return match requested {
                Some(r) if irq.affinity.move_pending() => {
                    from_mask(r, "smp_affinity_list (move pending)")
                }
                _ => Placement::Affinity {
                    cpus: eff.clone(),
                    source: "effective_affinity_list",
                },
            };
        }
        if let Some(r) = requested.filter(|s| s.len() == 1) {
            return from_mask(r, "smp_affinity_list");
        }
        let rate = self
            .load
            .and_then(|l| Some((l, l.cpu.irqs.iter().find(|r| r.irq == irq.irq)?)));
        if let Some((l, rate)) = rate {
            // Counts in the load: since boot on a tree, over the window when sampled.
            let floor = if self.since_boot() {
                IRQ_COUNT_FLOOR as f64
            } else {
                IRQ_SAMPLED_FLOOR
            };
            let interrupts = rate.total * l.seconds;
            if interrupts >= floor {
                let cpus: CpuSet = rate
                    .per_cpu
                    .iter()
                    .filter(|(_, v)| **v > 0.0 && **v >= rate.total * IRQ_CPU_SHARE)
                    .map(|(c, _)| *c)
                    .collect();
                if !cpus.is_empty() {
                    return Placement::Counted {
                        cpus,
                        interrupts: interrupts.round() as u64,
                        since_boot: self.since_boot(),
                    };
                }
            }
        }
        if let Some(r) = requested {
            return from_mask(r, "smp_affinity_list");
        }
        if irq.count < IRQ_COUNT_FLOOR {
            Placement::Idle {
                interrupts: irq.count,
            }
        } else {
            // Busy since boot, but only its total and busiest column are at hand (no load,
            // or quiet over the sample): one column is not where an IRQ goes.
            Placement::Uncounted {
                interrupts: irq.count,
            }
        }
    }

    /// Interfaces whose steering matters: physical NICs that are not down, and any other
    /// interface except loopback that carries traffic in the load window.
    pub fn traffic_nics(&self) -> Vec<&'a Nic> {
        self.view
            .nics
            .iter()
            .filter(|n| n.kind != "loopback")
            .filter(|n| {
                let busy = self
                    .device(&n.name)
                    .is_some_and(|d| d.rx_packets >= BUSY_DEVICE_PPS);
                let up = n.operstate.known().is_none_or(|s| s != "down");
                (!n.is_virtual() && up) || busy
            })
            .collect()
    }

    /// Queue IRQs that receive (rx, combined or all-queue vectors), of the queues the device
    /// has now ([`Nic::serves_live_queue`]): a vector a driver keeps for a queue turned off
    /// keeps its affinity, so it would read as placed work where there is none.
    pub fn rx_irqs<'n>(&self, nic: &'n Nic) -> Vec<&'n NicIrq> {
        nic.live_queue_irqs()
            .filter(|i| i.role.carries_rx())
            .collect()
    }

    /// The NIC's NUMA node, when the device reports one (-1 means the platform does not know).
    pub fn nic_node(&self, nic: &Nic) -> Option<u32> {
        nic.numa_node
            .known()
            .and_then(|n| u32::try_from(*n).ok())
            .filter(|_| self.view.topology.nodes.len() > 1)
    }

    /// CPUs close to the NIC where kernel work may go: its node's CPUs, else its
    /// `local_cpulist`, else every usable CPU.
    pub fn local_cpus(&self, nic: &Nic) -> CpuSet {
        let local = self
            .nic_node(nic)
            .and_then(|n| self.view.topology.node_cpus(n).cloned())
            .or_else(|| nic.local_cpus.known().cloned())
            .map(|s| s.intersection(&self.usable))
            .filter(|s| !s.is_empty());
        local.unwrap_or_else(|| self.usable.clone())
    }

    /// Local CPUs in the order queues should take them: one thread per core first, CPU 0 last
    /// among those (it serves timers and housekeeping on most systems), then the HT siblings (a
    /// queue on a sibling shares a core with another queue, which costs more than CPU 0 does).
    pub fn spread_order(&self, nic: &Nic) -> Vec<u32> {
        let mut cpus: Vec<u32> = self.local_cpus(nic).iter().collect();
        cpus.sort_by_key(|&c| (self.is_secondary_thread(c), c == 0, c));
        cpus
    }

    /// True for the second and later hyperthreads of a core.
    pub fn is_secondary_thread(&self, cpu: u32) -> bool {
        self.siblings(cpu)
            .lowest()
            .is_some_and(|first| first != cpu)
    }

    /// HT siblings of a CPU including itself (just itself when unknown).
    pub fn siblings(&self, cpu: u32) -> CpuSet {
        self.view
            .topology
            .cpu(cpu)
            .and_then(|c| c.siblings.known().cloned())
            .unwrap_or_else(|| std::iter::once(cpu).collect())
    }

    /// A mask at this host's exact width (what the kernel prints and accepts).
    pub fn mask(&self, set: &CpuSet) -> String {
        self.view
            .topology
            .mask(set)
            .unwrap_or_else(|_| set.to_list())
    }

    pub fn queue_dir(nic: &Nic, queue: &str) -> String {
        format!("/sys/class/net/{}/queues/{queue}", nic.name)
    }

    /// A per-second rate for evidence; since boot also the count it stands for.
    pub fn amount(&self, per_s: f64) -> String {
        match self.load {
            Some(l) if l.source == LoadSource::SinceBoot => {
                format!("{:.0} since boot ({}/s)", per_s * l.seconds, rate(per_s))
            }
            _ => format!("{}/s", rate(per_s)),
        }
    }
}

/// Writes of one value to the same file of many queues, as one shell loop when there are many
/// (`kind` is `rx` or `tx`).
pub fn queue_writes(nic: &Nic, kind: &str, file: &str, values: &[(u32, String)]) -> Vec<String> {
    let all_same = values.windows(2).all(|w| w[0].1 == w[1].1);
    let count = if kind == "rx" {
        nic.rx_queues.len()
    } else {
        nic.tx_queues.len()
    };
    if values.len() > 4 && all_same && values.len() == count {
        return vec![format!(
            "for q in /sys/class/net/{}/queues/{kind}-*; do echo {} > $q/{file}; done",
            nic.name, values[0].1
        )];
    }
    values
        .iter()
        .map(|(q, v)| {
            format!(
                "echo {v} > {}/{file}",
                Ctx::queue_dir(nic, &format!("{kind}-{q}"))
            )
        })
        .collect()
}

/// At most `max` lines, then one saying how many were left out.
pub fn capped(mut lines: Vec<String>, max: usize) -> Vec<String> {
    if lines.len() > max {
        let more = lines.len() - max;
        lines.truncate(max);
        lines.push(format!("… and {more} more"));
    }
    lines
}

pub fn pct(v: f64) -> String {
    format!("{v:.1}%")
}

/// A rate for people: `1234`, `57.0k`, `1.20M`.
pub fn rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

pub fn cpus_text(set: &CpuSet) -> String {
    if set.len() == 1 {
        format!("CPU {}", set.to_list())
    } else {
        format!("CPUs {}", set.to_list())
    }
}
