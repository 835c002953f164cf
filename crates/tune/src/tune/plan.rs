//! Profiles → desired state → a plan. Pure: a host view in, items out; nothing is read or
//! written here, so every decision can be tested on fixture trees.

use super::model::{
    Action, Format, Item, ItemKind, NapiMode, PLAN_SCHEMA_VERSION, Plan, Profile, Target,
};
use crate::doctor::ctx::Ctx;
use crate::doctor::model::Goal;
use crate::doctor::rules::rps::{RFS_ENTRIES, flow_cnt_per_queue};
use netsteer_host::CpuSet;
use netsteer_host::ethtool::{NicKnob, NicSettings};
use netsteer_host::field::Field;
use netsteer_host::irqname::IrqRole;
use netsteer_host::netdev::NapiAttr;
use netsteer_host::nic::{Nic, NicIrq};
use netsteer_host::view::HostView;
use std::collections::BTreeMap;

/// busy_poll / busy_read for the latency profile: tuned's network-latency value and the one
/// Documentation/networking/napi.rst uses in its example.
pub const BUSY_POLL_US: i64 = 50;
/// netdev_budget for the throughput profile: twice the default 300, so a busy CPU squeezes less.
pub const THROUGHPUT_BUDGET: i64 = 600;
/// netdev_max_backlog for the throughput profile (scaling.rst suggests 1000 or 10000 with flow
/// limits; RPS enqueues to per-CPU backlogs, which this bounds).
pub const THROUGHPUT_BACKLOG: i64 = 10000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IrqbalancePolicy {
    /// Leave irqbalance running; IRQ pins are then skipped (it would move them back).
    #[default]
    Leave,
    /// Stop the irqbalance service (rollback starts it again).
    Stop,
}

#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub profile: Profile,
    /// Interfaces to tune; empty means every physical NIC that is not down.
    pub devices: Vec<String>,
    /// Only these CPUs take kernel packet work (IRQs, RPS, XPS).
    pub cpus: Option<CpuSet>,
    pub irqbalance: IrqbalancePolicy,
    /// A queue kept out of the RSS table (seed 000 reserves one for SSH/BGP).
    pub reserve_queue: Option<u32>,
    /// Ports meant for the reserved queue; the plan prints the n-tuple rules for them.
    pub ports: Vec<u16>,
    /// True on the live host, where services exist; a tree has none to stop.
    pub live: bool,
    /// Explicit knobs (`--set PATH=VALUE`), planned after the profile's items; one on the same
    /// file as a profile item replaces it.
    pub knobs: Vec<Knob>,
    /// Per-NAPI settings for every NAPI of the tuned devices (`--napi`); the latency profile
    /// without it turns hard-IRQ deferral off.
    pub napi: Option<NapiMode>,
}

/// One explicit knob: a kernel file and the value to write into it. Only the files netsteer
/// tunes are accepted — sysctls, per-queue RPS/XPS/RFS files and IRQ affinities — so a typo
/// cannot turn `tune apply` into a general file writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    pub path: String,
    pub value: String,
    /// What the file holds now, read by the caller through its `HostFs` (plan stays pure).
    pub current: Option<String>,
}

impl Knob {
    /// Parses `PATH=VALUE`.
    pub fn parse(s: &str) -> Result<Knob, PlanError> {
        let bad = |why: &str| PlanError::BadKnob(s.to_string(), why.to_string());
        let (path, value) = s
            .split_once('=')
            .ok_or_else(|| bad("expected PATH=VALUE"))?;
        let value = value.trim();
        if value.is_empty() || value.len() > 4096 || value.contains('\n') {
            return Err(bad("the value must be one line of 1 to 4096 bytes"));
        }
        if path.split('/').any(|c| c == ".." || c == ".") || path.contains("//") {
            return Err(bad("no '.', '..' or '//' in the path"));
        }
        if Knob::kind_of(path).is_none() {
            return Err(bad(
                "not a knob netsteer tunes (/proc/sys/net/..., /sys/class/net/IF/queues/{rx,tx}-N/{rps_cpus,rps_flow_cnt,xps_cpus,xps_rxqs}, /proc/irq/N/smp_affinity[_list])",
            ));
        }
        Ok(Knob {
            path: path.to_string(),
            value: value.to_string(),
            current: None,
        })
    }

    /// The kind and format of the file at `path`, or None if netsteer does not tune it.
    pub fn kind_of(path: &str) -> Option<(ItemKind, Format)> {
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["", "proc", "sys", "net", rest @ ..] if !rest.is_empty() => {
                Some((ItemKind::Sysctl, Format::Text))
            }
            ["", "proc", "irq", n, "smp_affinity"] if n.parse::<u32>().is_ok() => {
                Some((ItemKind::IrqAffinity, Format::Mask))
            }
            ["", "proc", "irq", n, "smp_affinity_list"] if n.parse::<u32>().is_ok() => {
                Some((ItemKind::IrqAffinity, Format::List))
            }
            ["", "sys", "class", "net", dev, "queues", q, file] if valid_device_name(dev) => {
                let rx = q
                    .strip_prefix("rx-")
                    .is_some_and(|n| n.parse::<u32>().is_ok());
                let tx = q
                    .strip_prefix("tx-")
                    .is_some_and(|n| n.parse::<u32>().is_ok());
                match *file {
                    "rps_cpus" if rx => Some((ItemKind::Rps, Format::Mask)),
                    "rps_flow_cnt" if rx => Some((ItemKind::RfsFlowCnt, Format::Int)),
                    "xps_cpus" | "xps_rxqs" if tx => Some((ItemKind::Xps, Format::Mask)),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "--dev {0:?}: not an interface name (1-15 characters, no '/', no whitespace, not '.' or '..')"
    )]
    BadDevice(String),
    #[error("--dev {0}: no such interface (known: {1})")]
    NoDevice(String, String),
    #[error("--cpus {0}: none of these CPUs is online and usable (online: {1})")]
    NoCpus(String, String),
    #[error("no interface to tune: no physical NIC is up; name one with --dev")]
    NothingToTune,
    #[error("--set {0:?}: {1}")]
    BadKnob(String, String),
    #[error(
        "--profile none plans nothing by itself: give knobs with --set PATH=VALUE or per-NAPI settings with --napi"
    )]
    NoKnobs,
    #[error("{0}: without it no NIC IRQ is known, so IRQ affinity, RPS and XPS cannot be planned")]
    IrqsUnknown(String),
}

/// An interface name the kernel could have made (dev_valid_name in net/core/dev.c): the name
/// becomes a path component under /sys/class/net, so nothing else may pass.
pub fn valid_device_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains(':')
        && !name.chars().any(char::is_whitespace)
}

struct Builder<'a> {
    ctx: Ctx<'a>,
    opts: &'a PlanOptions,
    items: Vec<Item>,
    notes: Vec<String>,
}

fn change_or_keep(current: Option<&str>, desired: &str, format: Format) -> Action {
    match current {
        Some(c) if format.same(c, desired) => Action::Keep,
        _ => Action::Change,
    }
}

impl Builder<'_> {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        id: String,
        kind: ItemKind,
        target: Target,
        format: Format,
        current: Option<String>,
        desired: String,
        reason: String,
        skip: Option<String>,
    ) {
        let action = match skip {
            Some(why) => Action::Skip(why),
            None => change_or_keep(current.as_deref(), &desired, format),
        };
        self.items.push(Item {
            id,
            kind,
            target,
            format,
            label: None,
            current,
            desired,
            reason,
            action,
        });
    }

    fn nic_item(&mut self, nic: &Nic, kind: ItemKind, knob: NicKnob, desired: u64, reason: String) {
        self.nic_text_item(nic, kind, knob, Format::Int, desired.to_string(), reason);
    }

    fn nic_text_item(
        &mut self,
        nic: &Nic,
        kind: ItemKind,
        knob: NicKnob,
        format: Format,
        desired: String,
        reason: String,
    ) {
        let id = format!("nic/{}/{}", nic.name, knob.to_string().replace(' ', "/"));
        let target = Target::Nic {
            dev: nic.name.clone(),
            knob: knob.clone(),
        };
        let (current, skip) = match &nic.settings {
            None => (
                None,
                Some("NIC settings were not read (--no-ethtool or no ethtool netlink)".to_string()),
            ),
            Some(s) => match knob.read(s) {
                Err(why) => (None, Some(why)),
                Ok(v) if !format.same(&v, &desired) && !knob.changeable(s) => {
                    (Some(v), Some(format!("{knob} is fixed by the driver")))
                }
                Ok(v) => (Some(v), None),
            },
        };
        self.push(id, kind, target, format, current, desired, reason, skip);
    }

    /// Seed 000's n-tuple rules: TCP and UDP to each reserved port go to the reserved queue
    /// (`ethtool -N DEV flow-type tcp4 dst-port P action Q`), with the filters turned on first.
    fn ntuple(&mut self, nic: &Nic, s: &NicSettings, queue: u32) {
        use netsteer_host::netdev::{NtupleKey, NtupleProto};
        if self.opts.ports.is_empty() {
            return;
        }
        if s.features
            .known()
            .is_some_and(|f| f.contains_key("ntuple-filters"))
        {
            self.nic_item(
                nic,
                ItemKind::Feature,
                NicKnob::Feature("ntuple-filters".into()),
                1,
                "n-tuple filters on: the rules below need them".into(),
            );
        }
        for port in &self.opts.ports {
            for proto in [NtupleProto::Tcp4, NtupleProto::Udp4] {
                let key = NtupleKey { proto, port: *port };
                self.nic_text_item(
                    nic,
                    ItemKind::Ntuple,
                    NicKnob::Ntuple(key),
                    Format::Text,
                    key.rule_text(u64::from(queue)),
                    format!(
                        "seed 000: {} port {port} to the reserved queue {queue}, past RSS",
                        proto.name()
                    ),
                );
            }
        }
    }

    /// The RSS indirection table: every active queue gets an equal share of the hash buckets,
    /// except a queue reserved (`--reserve-queue`) for traffic steered to it by n-tuple rules,
    /// as seed 000 keeps SSH and BGP away from the data queues.
    fn rss(&mut self, nic: &Nic, s: &NicSettings) {
        let Some(rss) = s.rss.known() else {
            return;
        };
        if rss.indirection.is_empty() {
            return;
        }
        let nq = nic.rx_queues.len() as u32;
        let reserved = self.opts.reserve_queue.filter(|q| *q < nq);
        if let Some(q) = self.opts.reserve_queue
            && reserved.is_none()
        {
            self.notes.push(format!(
                "{}: --reserve-queue {q}: the device has {nq} rx queue(s); nothing reserved",
                nic.name
            ));
        }
        let queues: Vec<u32> = (0..nq).filter(|q| Some(*q) != reserved).collect();
        if queues.is_empty() {
            return;
        }
        let table: Vec<String> = (0..rss.indirection.len())
            .map(|i| queues[i % queues.len()].to_string())
            .collect();
        let reason = match reserved {
            None => format!(
                "RSS: the {} hash buckets shared equally by the {nq} rx queues",
                table.len()
            ),
            Some(q) => {
                let ports = if self.opts.ports.is_empty() {
                    String::new()
                } else {
                    "; the n-tuple items below steer the reserved ports to it".to_string()
                };
                format!(
                    "RSS: queue {q} reserved (no hash bucket), the other {} queues share the {} buckets equally{ports}",
                    queues.len(),
                    table.len()
                )
            }
        };
        self.nic_text_item(
            nic,
            ItemKind::Rss,
            NicKnob::RssIndirection,
            Format::Text,
            table.join(" "),
            reason,
        );
        if let Some(q) = reserved {
            self.ntuple(nic, s, q);
        }
    }

    fn sysctl(&mut self, name: &str, field: &Field<i64>, desired: i64, reason: String) {
        let path = format!("/proc/sys/{}", name.replace('.', "/"));
        let id = format!("sysctl/{name}");
        if self.items.iter().any(|i| i.id == id) {
            return;
        }
        let (current, skip) = match field {
            Field::Known(v) => (Some(v.to_string()), None),
            Field::Unknown { unknown } => (
                None,
                Some(format!(
                    "{unknown} (a global sysctl exists only in the root network namespace)"
                )),
            ),
        };
        // Raise-only knobs: never lower what an operator already raised.
        let desired = match current.as_deref().and_then(|c| c.parse::<i64>().ok()) {
            Some(c) if c > desired => c,
            _ => desired,
        };
        self.push(
            id,
            ItemKind::Sysctl,
            Target::File { path },
            Format::Int,
            current,
            desired.to_string(),
            reason,
            skip,
        );
    }

    /// One CPU per queue IRQ, in the order `spread_order` gives (local node, one thread per core
    /// first, HT siblings next, CPU 0 last). Returns the CPU chosen for each queue index.
    fn irqs(&mut self, nic: &Nic, irqbalance_blocks: Option<String>) -> BTreeMap<u32, u32> {
        let order = self.ctx.spread_order(nic);
        let mut by_queue = BTreeMap::new();
        if order.is_empty() {
            return by_queue;
        }
        let queue_of = |irq: &NicIrq| match irq.role {
            IrqRole::Rx(q) | IrqRole::Tx(q) | IrqRole::RxTx(q) => Some(q),
            IrqRole::AllQueues => Some(0),
            _ => None,
        };
        let mut queues: Vec<u32> = nic.queue_irqs().filter_map(queue_of).collect();
        queues.sort_unstable();
        queues.dedup();
        // A queue whose receive IRQ already sits alone on an acceptable CPU (one of `order`:
        // local, usable, inside --cpus) stays there: a well-placed NIC plans no moves, and
        // doctor — which plans through this function — never proposes moving an IRQ it has
        // no complaint about. Each CPU takes at most its share of queues (one each while
        // there are enough CPUs); the other queues take the first free CPUs of the order.
        let share = queues.len().div_ceil(order.len()).max(1);
        let mut load: BTreeMap<u32, usize> = BTreeMap::new();
        let current_cpu = |q: u32| -> Option<u32> {
            let single = |i: &NicIrq| {
                let set = i.affinity.requested.known()?;
                (set.len() == 1).then(|| set.lowest()).flatten()
            };
            let of_queue: Vec<&NicIrq> = nic
                .queue_irqs()
                .filter(|i| queue_of(i) == Some(q))
                .collect();
            // The receive IRQ decides: its CPU runs the queue's NET_RX softirq. A transmit
            // IRQ of the same queue follows it.
            let rx = of_queue
                .iter()
                .filter(|i| !matches!(i.role, IrqRole::Tx(_)))
                .find_map(|i| single(i));
            rx.or_else(|| {
                let first = single(of_queue.first()?)?;
                of_queue
                    .iter()
                    .all(|i| single(i) == Some(first))
                    .then_some(first)
            })
        };
        for q in &queues {
            if let Some(cpu) = current_cpu(*q)
                && order.contains(&cpu)
                && load.get(&cpu).copied().unwrap_or(0) < share
            {
                by_queue.insert(*q, cpu);
                *load.entry(cpu).or_default() += 1;
            }
        }
        for q in &queues {
            if by_queue.contains_key(q) {
                continue;
            }
            let cpu = (1..=share)
                .find_map(|n| order.iter().find(|c| load.get(c).copied().unwrap_or(0) < n))
                .copied()
                .unwrap_or(order[0]);
            by_queue.insert(*q, cpu);
            *load.entry(cpu).or_default() += 1;
        }
        let irqs: Vec<NicIrq> = nic.queue_irqs().cloned().collect();
        for irq in irqs {
            let Some(q) = queue_of(&irq) else { continue };
            let cpu = by_queue[&q];
            let want: CpuSet = std::iter::once(cpu).collect();
            let current = irq.affinity.requested.known().map(CpuSet::to_list);
            let skip = if irq.affinity.settable.known() == Some(&false) {
                Some("kernel-managed IRQ: smp_affinity is read-only, writes fail with EPERM (EIO before 6.12)".to_string())
            } else {
                irqbalance_blocks.clone()
            };
            let reason = format!(
                "{} ({}) on CPU {cpu}: one queue per CPU near {}: a thread per core first, CPU 0 last of those, HT siblings after",
                irq.name, irq.role, nic.name
            );
            // smp_affinity_list rather than the mask: the kernel parses both the same way
            // (bitmap_parselist), the list reads the same at any nr_cpu_ids, and it is the
            // file the host model reads (and so the one a snapshot tree holds).
            self.push(
                format!("irq/{}", irq.irq),
                ItemKind::IrqAffinity,
                Target::File {
                    path: format!("/proc/irq/{}/smp_affinity_list", irq.irq),
                },
                Format::List,
                current,
                want.to_list(),
                reason,
                skip,
            );
            if let Some(last) = self.items.last_mut() {
                last.label = Some(irq.name.clone());
            }
        }
        by_queue
    }

    /// A device whose `queues/` could not be listed gets one skipped item naming why, instead
    /// of no RPS/RFS/XPS items at all (which would read as "nothing to do").
    fn queues_unreadable(&mut self, nic: &Nic, kind: ItemKind, what: &str) -> bool {
        let Some(why) = &nic.queues_unknown else {
            return false;
        };
        self.push(
            format!("{what}/{}", nic.name),
            kind,
            Target::File {
                path: format!("/sys/class/net/{}/queues", nic.name),
            },
            Format::Mask,
            None,
            "?".into(),
            format!("{what}: the device's queues could not be listed"),
            Some(why.clone()),
        );
        true
    }

    fn rps(&mut self, nic: &Nic, irq_cpus: &CpuSet) {
        if self.queues_unreadable(nic, ItemKind::Rps, "rps") {
            return;
        }
        let profile = self.opts.profile;
        let local = self.ctx.local_cpus(nic);
        let nq = nic.rx_queues.len();
        // scaling.rst: with a queue per CPU RPS is redundant; with fewer queues it helps when
        // each queue steers to CPUs near its interrupting CPU. Here: RPS once the queues cover
        // less than half of the local CPUs, each queue taking its own share of the CPUs that
        // do not take queue interrupts (so no CPU is every queue's RPS target).
        let cores = local
            .iter()
            .filter(|c| !self.ctx.is_secondary_thread(*c))
            .count();
        // A device without queue IRQs (veth, tun) processes every queue on the sending CPU:
        // its queues spread nothing, so only RPS can, and every queue gets every local CPU.
        let irqless = nic.queue_irqs().next().is_none();
        let spread =
            profile != Profile::Latency && nq > 0 && cores > 1 && (irqless || nq * 2 <= cores);
        let mut per_queue: Vec<CpuSet> = vec![CpuSet::new(); nq];
        let reason = if !spread {
            if profile == Profile::Latency {
                "latency: RPS adds an IPI and a second CPU to every packet's path".to_string()
            } else {
                format!(
                    "{nq} rx queues for {cores} local cores: RSS covers at least half of them, RPS would mostly add IPIs (scaling.rst)"
                )
            }
        } else {
            let without = local.difference(irq_cpus);
            let pool = if without.is_empty() {
                local.clone()
            } else {
                without
            };
            if irqless {
                per_queue.iter_mut().for_each(|q| *q = pool.clone());
            } else {
                for (i, cpu) in pool.iter().enumerate() {
                    per_queue[i % nq].insert(cpu);
                }
            }
            if irq_cpus.is_empty() || pool == local {
                format!(
                    "{nq} rx queue(s) for {} local CPUs: spread protocol work over CPUs {}",
                    local.len(),
                    pool.to_list()
                )
            } else {
                format!(
                    "{nq} rx queue(s) for {} local CPUs: spread protocol work over CPUs {}, not the IRQ CPU(s) {} (scaling.rst: at high interrupt rates exclude the interrupting CPU)",
                    local.len(),
                    pool.to_list(),
                    irq_cpus.to_list()
                )
            }
        };
        let queues = nic.rx_queues.clone();
        for (i, q) in queues.iter().enumerate() {
            let current = q.rps_cpus.known().map(|s| self.ctx.mask(s));
            let skip = q.rps_cpus.unknown_reason().map(str::to_string);
            let mask = self.ctx.mask(&per_queue[i]);
            self.push(
                format!("rps/{}/rx-{}", nic.name, q.index),
                ItemKind::Rps,
                Target::File {
                    path: format!("/sys/class/net/{}/queues/rx-{}/rps_cpus", nic.name, q.index),
                },
                Format::Mask,
                current,
                mask,
                reason.clone(),
                skip,
            );
        }
        if !spread {
            return;
        }
        // RFS: both the global table and each queue's share must be set (scaling.rst, RFS).
        let entries = self.ctx.view.sysctls.rps_sock_flow_entries.clone();
        self.sysctl(
            "net.core.rps_sock_flow_entries",
            &entries,
            RFS_ENTRIES as i64,
            format!("RFS: {RFS_ENTRIES} flow entries, \"works fairly well on a moderately loaded server\" (scaling.rst)"),
        );
        if let Some(last) = self.items.last_mut()
            && last.id == "sysctl/net.core.rps_sock_flow_entries"
        {
            last.kind = ItemKind::RfsTable;
        }
        let per_queue = flow_cnt_per_queue(RFS_ENTRIES, nic.rx_queues.len());
        for q in &queues {
            let current = q.rps_flow_cnt.known().map(u64::to_string);
            let skip = q.rps_flow_cnt.unknown_reason().map(str::to_string);
            self.push(
                format!("rfs/{}/rx-{}", nic.name, q.index),
                ItemKind::RfsFlowCnt,
                Target::File {
                    path: format!(
                        "/sys/class/net/{}/queues/rx-{}/rps_flow_cnt",
                        nic.name, q.index
                    ),
                },
                Format::Int,
                current,
                per_queue.to_string(),
                format!(
                    "RFS: the {RFS_ENTRIES}-entry table shared over {} queue(s)",
                    nic.rx_queues.len()
                ),
                skip,
            );
        }
    }

    /// XPS: each CPU sends on the queue whose IRQ it serves, so transmit completions stay on
    /// the CPU that sent (scaling.rst, XPS).
    fn xps(&mut self, nic: &Nic, queue_cpu: &BTreeMap<u32, u32>) {
        if self.queues_unreadable(nic, ItemKind::Xps, "xps") {
            return;
        }
        let ntx = nic.tx_queues.len();
        if ntx < 2 {
            if ntx == 1 {
                self.notes.push(format!(
                    "{}: one tx queue, XPS has no effect (and xps_cpus answers ENOENT)",
                    nic.name
                ));
            }
            return;
        }
        let order = self.ctx.spread_order(nic);
        let mut masks: BTreeMap<u32, CpuSet> = BTreeMap::new();
        let mut placed = CpuSet::new();
        // CPUs that serve a queue's IRQ send on that queue...
        for (q, cpu) in queue_cpu {
            if (*q as usize) < ntx {
                masks.entry(*q).or_default().insert(*cpu);
                placed.insert(*cpu);
            }
        }
        // ...and the others are dealt round-robin over the queues.
        for (i, cpu) in order.iter().filter(|c| !placed.contains(**c)).enumerate() {
            masks.entry((i % ntx) as u32).or_default().insert(*cpu);
        }
        let queues = nic.tx_queues.clone();
        for q in &queues {
            let want = masks.get(&q.index).cloned().unwrap_or_default();
            let current = q.xps_cpus.known().map(|s| self.ctx.mask(s));
            let skip = q.xps_cpus.unknown_reason().map(str::to_string);
            let reason = if want.is_empty() {
                format!(
                    "more tx queues ({ntx}) than CPUs: tx-{} gets no CPU",
                    q.index
                )
            } else {
                format!("CPU(s) {} send on tx-{}", want.to_list(), q.index)
            };
            let mask = self.ctx.mask(&want);
            self.push(
                format!("xps/{}/tx-{}", nic.name, q.index),
                ItemKind::Xps,
                Target::File {
                    path: format!("/sys/class/net/{}/queues/tx-{}/xps_cpus", nic.name, q.index),
                },
                Format::Mask,
                current,
                mask,
                reason,
                skip,
            );
        }
    }

    fn channels(&mut self, nic: &Nic, s: &NicSettings) {
        let Some(c) = s.channels.known() else {
            return;
        };
        let cores = self
            .ctx
            .local_cpus(nic)
            .iter()
            .filter(|cpu| !self.ctx.is_secondary_thread(*cpu))
            .count()
            .max(1) as u64;
        let kinds: &[&str] = if c.combined_max.unwrap_or(0) > 0 {
            &["combined"]
        } else {
            &["rx", "tx"]
        };
        for kind in kinds {
            let knob = NicKnob::Channels(kind.to_string());
            let (Ok(current), Some(max)) = (knob.read_number(s), knob.limit(s)) else {
                continue;
            };
            if max == 0 {
                continue;
            }
            let want = cores.min(max).max(current);
            let reason = if want == current {
                format!(
                    "{current} {kind} channel(s): at least one per local core ({cores}) or the maximum ({max})"
                )
            } else {
                format!(
                    "one {kind} channel per local core: {want} (of at most {max}; scaling.rst: a queue per CPU, not per hyperthread)"
                )
            };
            self.nic_item(nic, ItemKind::Channels, knob, want, reason);
        }
    }

    /// Per-NAPI items: the mode's settings on every NAPI the device has now (netdev netlink).
    fn napis(&mut self, nic: &Nic, s: &NicSettings, mode: Option<NapiMode>) {
        let settings: Vec<(NapiAttr, u64, String)> = match (mode, self.opts.profile) {
            (Some(m), _) => m
                .settings()
                .iter()
                .map(|(a, v, why)| (*a, *v, format!("napi {m}: {why}")))
                .collect(),
            (None, Profile::Latency) => NapiMode::Irq.settings()[..2]
                .iter()
                .map(|(a, v, _)| {
                    (
                        *a,
                        *v,
                        "latency: a deferred hard IRQ holds packets until gro-flush-timeout unless an application busy-polls (--napi prefer-busy-poll if one does)".to_string(),
                    )
                })
                .collect(),
            (None, _) => return,
        };
        let nd = match s.netdev() {
            Ok(nd) => nd,
            Err(why) => {
                if mode.is_some() {
                    self.notes.push(format!(
                        "{}: per-NAPI settings not planned: {why}",
                        nic.name
                    ));
                }
                return;
            }
        };
        if nd.napis.is_empty() {
            if mode.is_some() {
                self.notes.push(format!(
                    "{}: no NAPI instances now{}; per-NAPI settings not planned (tune again once they exist)",
                    nic.name,
                    if nic.kind == "veth" {
                        " (a veth gets them with GRO on or XDP attached)"
                    } else {
                        ""
                    }
                ));
            }
            return;
        }
        for n in &nd.napis {
            for (attr, v, why) in &settings {
                self.nic_item(
                    nic,
                    ItemKind::Napi,
                    NicKnob::Napi(n.id, *attr),
                    *v,
                    why.clone(),
                );
            }
        }
    }

    fn features(&mut self, nic: &Nic, s: &NicSettings) {
        let has = |n: &str| s.features.known().is_some_and(|f| f.contains_key(n));
        if has("rx-gro") {
            self.nic_item(
                nic,
                ItemKind::Feature,
                NicKnob::Feature("rx-gro".into()),
                1,
                "GRO on: fewer, larger packets up the stack; on veth it also gives the device a NAPI instance to busy-poll".into(),
            );
        }
        if self.opts.profile == Profile::Latency
            && nic.kind == "veth"
            && has("rx-udp-gro-forwarding")
        {
            self.nic_item(
                nic,
                ItemKind::Feature,
                NicKnob::Feature("rx-udp-gro-forwarding".into()),
                1,
                "latency: a veth hands a local socket's UDP to its NAPI (which busy polling needs) only with UDP GRO forwarding on; with GRO alone it goes through the backlog without a NAPI id (veth_skb_is_eligible_for_gro)".into(),
            );
        }
        if has("rx-lro") && self.opts.profile != Profile::Throughput {
            self.nic_item(
                nic,
                ItemKind::Feature,
                NicKnob::Feature("rx-lro".into()),
                0,
                "LRO off: it holds segments in the NIC to merge them (latency) and breaks forwarding".into(),
            );
        }
    }

    fn coalesce(&mut self, nic: &Nic, s: &NicSettings) {
        let reported = |n: &str| s.coalesce.known().is_some_and(|c| c.contains_key(n));
        let wanted: &[(&str, u64, &str)] = match self.opts.profile {
            Profile::Latency => &[
                (
                    "adaptive-rx",
                    0,
                    "latency: a fixed, immediate interrupt per packet",
                ),
                (
                    "rx-usecs",
                    0,
                    "latency: interrupt at once, no moderation delay",
                ),
            ],
            Profile::Throughput | Profile::Balanced | Profile::None => &[(
                "adaptive-rx",
                1,
                "adaptive moderation: few interrupts under load, quick ones when idle",
            )],
        };
        if let Field::Unknown { unknown } = &s.coalesce {
            self.notes
                .push(format!("{}: coalescing left alone: {unknown}", nic.name));
            return;
        }
        for (name, v, why) in wanted {
            if reported(name) {
                self.nic_item(
                    nic,
                    ItemKind::Coalesce,
                    NicKnob::Coalesce((*name).into()),
                    *v,
                    (*why).into(),
                );
            }
        }
    }

    fn pause(&mut self, nic: &Nic, s: &NicSettings) {
        if self.opts.profile == Profile::Throughput {
            return;
        }
        let Some(p) = s.pause.known() else {
            return;
        };
        for (name, on) in [("rx", p.rx), ("tx", p.tx)] {
            if on.is_some() {
                self.nic_item(
                    nic,
                    ItemKind::Pause,
                    NicKnob::Pause(name.into()),
                    0,
                    "flow control off: a PAUSE frame stalls every flow on the link for up to 3.4 ms at 10 Gbit/s".into(),
                );
            }
        }
    }
}

/// Every `--dev` must be a valid name of a device the host has.
fn check_devices(view: &HostView, devices: &[String]) -> Result<(), PlanError> {
    for d in devices {
        if !valid_device_name(d) {
            return Err(PlanError::BadDevice(d.clone()));
        }
        if view.nic(d).is_none() {
            let known: Vec<&str> = view.nics.iter().map(|n| n.name.as_str()).collect();
            return Err(PlanError::NoDevice(d.clone(), known.join(", ")));
        }
    }
    Ok(())
}

/// Computes the plan: the desired value of every knob the profile cares about, for the chosen
/// interfaces, and whether each must change.
pub fn plan(view: &HostView, opts: &PlanOptions) -> Result<Plan, PlanError> {
    if opts.profile == Profile::None {
        if opts.knobs.is_empty() && opts.napi.is_none() {
            return Err(PlanError::NoKnobs);
        }
        let mut b = Builder {
            ctx: Ctx::new(view, None, Goal::Balanced, None),
            opts,
            items: Vec::new(),
            notes: Vec::new(),
        };
        if opts.napi.is_some() {
            // Only the per-NAPI settings, on the devices named (every one when none is).
            check_devices(view, &opts.devices)?;
            for nic in view
                .nics
                .iter()
                .filter(|n| opts.devices.is_empty() || opts.devices.contains(&n.name))
            {
                if let Some(s) = &nic.settings {
                    b.napis(nic, s, opts.napi);
                }
            }
        }
        let mut p = Plan {
            schema_version: PLAN_SCHEMA_VERSION,
            profile: Profile::None,
            devices: opts.devices.clone(),
            cpus: None,
            items: b.items,
            notes: b.notes,
        };
        add_knobs(&mut p, &opts.knobs);
        return Ok(p);
    }
    if let Some(why) = view.irqs_unknown() {
        return Err(PlanError::IrqsUnknown(why.to_string()));
    }
    check_devices(view, &opts.devices)?;
    let goal = match opts.profile {
        Profile::Latency => Goal::Latency,
        Profile::Throughput => Goal::Throughput,
        Profile::Balanced | Profile::None => Goal::Balanced,
    };
    let mut ctx = Ctx::new(view, None, goal, None);
    if let Some(cpus) = &opts.cpus {
        let usable = ctx.usable.intersection(cpus);
        if usable.is_empty() {
            return Err(PlanError::NoCpus(cpus.to_list(), ctx.usable.to_list()));
        }
        ctx.usable = usable;
    }
    let nics: Vec<&Nic> = if opts.devices.is_empty() {
        view.nics
            .iter()
            .filter(|n| !n.is_virtual() && n.operstate.known().is_none_or(|s| s != "down"))
            .collect()
    } else {
        opts.devices.iter().filter_map(|d| view.nic(d)).collect()
    };
    if nics.is_empty() {
        return Err(PlanError::NothingToTune);
    }
    let mut b = Builder {
        ctx,
        opts,
        items: Vec::new(),
        notes: Vec::new(),
    };

    // irqbalance: stopped only when asked; otherwise IRQ pins are skipped, and the plan says so.
    let irqbalance = view.irqbalance.known().filter(|i| i.running).cloned();
    let has_irqs = nics.iter().any(|n| n.queue_irqs().next().is_some());
    let mut irqbalance_blocks = None;
    if let Some(ib) = &irqbalance
        && has_irqs
    {
        let pid = ib.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        match (opts.irqbalance, opts.live) {
            (IrqbalancePolicy::Stop, true) => b.push(
                "service/irqbalance".into(),
                ItemKind::Irqbalance,
                Target::Service {
                    name: "irqbalance".into(),
                },
                Format::Text,
                Some("active".into()),
                "inactive".into(),
                format!("irqbalance{pid} rewrites smp_affinity every 10 s and would undo the IRQ pins; rollback starts it again"),
                None,
            ),
            (IrqbalancePolicy::Stop, false) => {
                b.notes.push(format!(
                    "irqbalance{pid} runs in this tree's host; with --root no service is stopped, the IRQ pins are planned as if it were"
                ));
            }
            (IrqbalancePolicy::Leave, _) => {
                irqbalance_blocks = Some(format!(
                    "irqbalance is running{pid} and would move this IRQ again within 10 s; rerun with --irqbalance stop (rollback restarts it)"
                ));
            }
        }
    }

    for nic in &nics {
        if let Some(s) = nic.settings.clone() {
            b.channels(nic, &s);
            b.features(nic, &s);
            b.coalesce(nic, &s);
            b.pause(nic, &s);
            b.rss(nic, &s);
            b.napis(nic, &s, opts.napi);
        } else {
            b.notes.push(format!(
                "{}: NIC settings (channels, GRO, coalescing, flow control) not read: left alone",
                nic.name
            ));
        }
        let queue_cpu = b.irqs(nic, irqbalance_blocks.clone());
        let rx_queue_cpus: CpuSet = nic
            .queue_irqs()
            .filter(|i| {
                matches!(
                    i.role,
                    IrqRole::Rx(_) | IrqRole::RxTx(_) | IrqRole::AllQueues
                )
            })
            .filter_map(|i| match i.role {
                IrqRole::Rx(q) | IrqRole::RxTx(q) => queue_cpu.get(&q).copied(),
                _ => queue_cpu.get(&0).copied(),
            })
            .collect();
        b.rps(nic, &rx_queue_cpus);
        b.xps(nic, &queue_cpu);
        if nic.irqs.is_empty() && !nic.is_virtual() {
            b.notes.push(format!(
                "{}: no IRQ of this NIC was recognised by name; IRQ affinity left alone",
                nic.name
            ));
        }
    }

    let sys = view.sysctls.clone();
    match opts.profile {
        Profile::Latency => {
            let why = |k: &str| {
                format!(
                    "latency: {k} spins up to {BUSY_POLL_US} µs on the device queue before sleeping (napi.rst); costs CPU while waiting"
                )
            };
            b.sysctl(
                "net.core.busy_poll",
                &sys.busy_poll,
                BUSY_POLL_US,
                why("poll/select/epoll"),
            );
            b.sysctl(
                "net.core.busy_read",
                &sys.busy_read,
                BUSY_POLL_US,
                why("a blocking read"),
            );
        }
        Profile::Throughput => {
            b.sysctl(
                "net.core.netdev_budget",
                &sys.netdev_budget,
                THROUGHPUT_BUDGET,
                format!(
                    "throughput: {THROUGHPUT_BUDGET} packets per NET_RX run, fewer time squeezes"
                ),
            );
            b.sysctl(
                "net.core.netdev_max_backlog",
                &sys.netdev_max_backlog,
                THROUGHPUT_BACKLOG,
                format!("throughput: per-CPU backlog of {THROUGHPUT_BACKLOG} packets before drops (RPS enqueues there)"),
            );
        }
        Profile::Balanced | Profile::None => {}
    }

    b.items.sort_by_key(|i| i.phase());
    let mut p = Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        profile: opts.profile,
        devices: nics.iter().map(|n| n.name.clone()).collect(),
        cpus: opts.cpus.as_ref().map(CpuSet::to_list),
        items: b.items,
        notes: b.notes,
    };
    add_knobs(&mut p, &opts.knobs);
    Ok(p)
}

/// Adds the explicit knobs to a plan: each replaces a profile item on the same file, or joins
/// the plan in its kind's phase (so an RPS mask is still written after the IRQ it follows).
fn add_knobs(p: &mut Plan, knobs: &[Knob]) {
    for k in knobs {
        let Some((kind, format)) = Knob::kind_of(&k.path) else {
            continue;
        };
        p.items
            .retain(|i| !matches!(&i.target, Target::File { path } if *path == k.path));
        p.items.push(Item {
            id: format!("set{}", k.path),
            kind,
            target: Target::File {
                path: k.path.clone(),
            },
            format,
            label: None,
            current: k.current.clone(),
            desired: k.value.clone(),
            reason: "set explicitly (--set)".into(),
            action: match &k.current {
                Some(_) => change_or_keep(k.current.as_deref(), &k.value, format),
                None => Action::Skip(format!("{}: not readable here", k.path)),
            },
        });
    }
    p.items.sort_by_key(|i| i.phase());
}
