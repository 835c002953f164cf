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

    /// The CPUs an IRQ is delivered to: the effective affinity when the kernel shows it, else a
    /// one-CPU requested mask, else where its interrupts were counted, else the requested mask.
    pub fn irq_cpus(&self, irq: &NicIrq) -> CpuSet {
        let requested = irq.affinity.requested.known();
        if let Some(eff) = irq.affinity.effective.known().filter(|s| !s.is_empty()) {
            // A move still pending (IrqAffinity::move_pending) is delivered within the
            // requested set at the IRQ's next interrupt: that is where it goes.
            return match requested {
                Some(r) if irq.affinity.move_pending() => r.clone(),
                _ => eff.clone(),
            };
        }
        if let Some(r) = requested.filter(|s| s.len() == 1) {
            return r.clone();
        }
        if let Some(rate) = self
            .load
            .and_then(|l| l.cpu.irqs.iter().find(|r| r.irq == irq.irq))
            .filter(|r| r.total > 0.0)
        {
            let set: CpuSet = rate
                .per_cpu
                .iter()
                .filter(|(_, v)| **v >= rate.total * 0.5)
                .map(|(c, _)| *c)
                .collect();
            if !set.is_empty() {
                return set;
            }
        }
        if let Some(c) = irq.busiest_cpu {
            return std::iter::once(c).collect();
        }
        requested.cloned().unwrap_or_default()
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

    /// Queue IRQs that receive (rx, combined or all-queue vectors).
    pub fn rx_irqs<'n>(&self, nic: &'n Nic) -> Vec<&'n NicIrq> {
        nic.irqs.iter().filter(|i| i.role.carries_rx()).collect()
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
