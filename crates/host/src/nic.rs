//! The NIC model: every interface with its queues, the IRQ serving each queue, where those IRQs
//! may and do run, and the per-queue steering (RPS/RFS/XPS).

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::ethtool::NicSettings;
use crate::field::Field;
use crate::fs::HostFs;
use crate::irqname::{IrqRole, NameContext, classify, resolve_device};
use crate::parse::{Interrupts, parse_int, parse_uint};
use crate::topology::{read_list, read_mask};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const NET_DIR: &str = "/sys/class/net";

/// The kind of an interface a tree does not describe: its `/sys/class/net/NAME` is a plain
/// directory (sysfs always makes it a link, into /sys/devices/…) with no `device` link.
pub const KIND_UNKNOWN: &str = "unknown";

/// Affinity of one IRQ as /proc/irq/N shows it (kernel/irq/proc.c).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrqAffinity {
    /// `smp_affinity_list`: where the IRQ may be delivered (the requested, maybe pending, mask).
    pub requested: Field<CpuSet>,
    /// `effective_affinity_list`: where it is delivered now (one CPU on x86 even for a wide mask).
    pub effective: Field<CpuSet>,
    /// `affinity_hint`: the driver's suggestion; empty when it gave none.
    pub hint: Field<CpuSet>,
    /// `node`: NUMA node of the IRQ's device (-1 unknown).
    pub node: Field<i64>,
    /// False when `smp_affinity` is read-only: a kernel-managed IRQ that nobody may move
    /// (6.12+ marks them 0444; older kernels only answer EIO on write, so they look settable).
    pub settable: Field<bool>,
}

impl IrqAffinity {
    /// True when the IRQ is delivered to a CPU outside the set it was asked for: a write to
    /// `smp_affinity` the kernel has not carried out yet. Unless the interrupt can be moved from
    /// process context (interrupt remapping), x86 only records the new mask and moves the MSI
    /// when it next fires (kernel/irq/manage.c, irq_set_affinity_locked → irq_copy_pending;
    /// kernel/irq/migration.c, irq_move_masked_irq), so a quiet vector, or one just pinned,
    /// keeps showing its old CPU. Its next interrupt goes within the requested set. False
    /// when either list is unknown or empty: absent is not "pending".
    pub fn move_pending(&self) -> bool {
        match (self.requested.known(), self.effective.known()) {
            (Some(r), Some(e)) if !r.is_empty() && !e.is_empty() => !e.is_subset(r),
            _ => false,
        }
    }
}

pub fn read_irq_affinity(fs: &HostFs, irq: u32, nr_cpu_ids: u32) -> IrqAffinity {
    let dir = format!("/proc/irq/{irq}");
    let requested = read_list(fs, &format!("{dir}/smp_affinity_list"), Some(nr_cpu_ids))
        .or_else(|_| read_mask(fs, &format!("{dir}/smp_affinity")));
    IrqAffinity {
        requested: requested.into(),
        effective: read_list(
            fs,
            &format!("{dir}/effective_affinity_list"),
            Some(nr_cpu_ids),
        )
        .into(),
        hint: read_mask(fs, &format!("{dir}/affinity_hint")).into(),
        node: fs.read_parsed(format!("{dir}/node"), parse_int).into(),
        settable: fs
            .mode(format!("{dir}/smp_affinity"))
            .map(|m| m & 0o200 != 0)
            .into(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicIrq {
    pub irq: u32,
    /// Action name from /proc/interrupts (`virtio2-input.0`).
    pub name: String,
    pub role: IrqRole,
    /// Interrupts since boot, all CPUs.
    pub count: u64,
    /// The CPU that took most of them, if any were taken.
    pub busiest_cpu: Option<u32>,
    pub affinity: IrqAffinity,
    /// `intx` for the device's legacy interrupt line (`device/irq`, no MSI vectors); absent
    /// for an MSI or MSI-X vector.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub line: Option<IrqLine>,
    /// The other actions on the same IRQ line (`/proc/interrupts` lists each `request_irq`):
    /// whatever they are, they fire on the same CPUs as this NIC's interrupt.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub shared_with: Vec<String>,
}

/// How a NIC's interrupt arrives, when it is not an MSI vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IrqLine {
    /// A legacy INTx line (Documentation/PCI/msi-howto.rst: may be shared by several devices).
    Intx,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxQueue {
    pub index: u32,
    /// RPS: CPUs this queue's packets are steered to in software (empty = off).
    pub rps_cpus: Field<CpuSet>,
    /// RFS flow table size of this queue (0 = RFS off for it).
    pub rps_flow_cnt: Field<u64>,
    /// IRQs that serve this queue.
    pub irqs: Vec<u32>,
    /// The page pools feeding this queue (by id, from their NAPI): absent when the pools are
    /// unknown (no netdev netlink, or a tree captured before netsteer read them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_pools: Option<Vec<u64>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxQueue {
    pub index: u32,
    /// XPS: CPUs that transmit on this queue.
    pub xps_cpus: Field<CpuSet>,
    /// XPS by receive queue (bit i = rx-i).
    pub xps_rxqs: Field<CpuSet>,
    pub irqs: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    pub name: String,
    pub ifindex: Field<u32>,
    /// `physical`, or the virtual kind (`loopback`, `veth`, `bridge`, `bond`, `vlan`, ...).
    pub kind: String,
    pub driver: Field<String>,
    /// PCI function whose MSI vectors serve the queues (for virtio, the parent of `virtioN`).
    pub bus_id: Option<String>,
    pub operstate: Field<String>,
    pub mtu: Field<u32>,
    /// NUMA node of the device (-1 = unknown, treat as any).
    pub numa_node: Field<i64>,
    pub local_cpus: Field<CpuSet>,
    /// Software IRQ coalescing (Documentation/networking/napi.rst).
    pub gro_flush_timeout: Field<u64>,
    pub napi_defer_hard_irqs: Field<u64>,
    /// Threaded NAPI: `0`, `1` (EOPNOTSUPP when the device has no NAPI).
    pub threaded: Field<String>,
    pub rx_queues: Vec<RxQueue>,
    pub tx_queues: Vec<TxQueue>,
    /// Why `queues/` could not be listed (then both queue lists are empty for that reason,
    /// not because the device has none).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub queues_unknown: Option<String>,
    pub irqs: Vec<NicIrq>,
    /// Settings read over ethtool netlink (absent when not asked for).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub settings: Option<NicSettings>,
    /// The NAPI instances, each resolved to its queues, IRQ, CPUs and kthread (from the
    /// settings' netdev data; empty when it was not read or the device has none).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub napis: Vec<NapiView>,
}

/// How a NAPI's IRQ was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IrqSource {
    /// The kernel links them (netdev's napi `irq` attribute).
    Netdev,
    /// The driver does not (virtio_net): the IRQ of the queue the NAPI serves, by its name in
    /// /proc/interrupts.
    InterruptsName,
}

/// A threaded NAPI's kthread (`napi/<dev>-<id>`): where it last ran and where it may run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NapiThread {
    pub pid: u32,
    pub last_cpu: Field<u32>,
    pub allowed: Field<CpuSet>,
}

/// One NAPI: queue → NAPI → IRQ → CPU, and its kthread, with the per-NAPI settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NapiView {
    pub id: u32,
    pub rx_queues: Vec<u32>,
    pub tx_queues: Vec<u32>,
    pub irq: Option<u32>,
    pub irq_source: Option<IrqSource>,
    /// Where the IRQ is delivered now (`effective_affinity_list`).
    pub irq_cpus: Option<Field<CpuSet>>,
    pub thread: Option<NapiThread>,
    pub defer_hard_irqs: Option<u32>,
    pub gro_flush_timeout_ns: Option<u64>,
    pub irq_suspend_timeout_ns: Option<u64>,
    /// 0 disabled, 1 enabled, 2 busy-poll ([`crate::netdev::Napi::threaded`]).
    #[serde(default, deserialize_with = "crate::netdev::threaded_mode")]
    pub threaded: Option<u32>,
}

/// Names each receive queue's page pools: the pools whose NAPI is the queue's (a pool serves
/// the NAPI it was created for, page_pool_params.napi). Left absent when the pools or the
/// queue links are unknown.
pub fn link_page_pools(nic: &mut Nic) {
    let Some(netdev) = nic.settings.as_ref().and_then(|s| s.netdev().ok()) else {
        return;
    };
    let Some(crate::field::Field::Known(pools)) = &netdev.page_pools else {
        return;
    };
    for q in &mut nic.rx_queues {
        let napi = netdev
            .queues
            .iter()
            .find(|nq| nq.kind == crate::netdev::QueueType::Rx && nq.id == q.index)
            .and_then(|nq| nq.napi_id);
        q.page_pools = Some(
            pools
                .pools
                .iter()
                .filter(|p| napi.is_some() && p.napi_id == napi)
                .map(|p| p.id)
                .collect(),
        );
    }
}

/// Resolves the netdev data of `nic`'s settings into [`NapiView`]s, reading the IRQs'
/// affinities and kthreads' placement through `fs` (so a snapshot tree carries them).
pub fn resolve_napis(fs: &HostFs, nic: &Nic, nr_cpu_ids: u32) -> Vec<NapiView> {
    let Some(netdev) = nic.settings.as_ref().and_then(|s| s.netdev().ok()) else {
        return Vec::new();
    };
    netdev
        .napis
        .iter()
        .map(|n| {
            let serves = |kind| -> Vec<u32> {
                netdev
                    .queues
                    .iter()
                    .filter(|q| q.kind == kind && q.napi_id == Some(n.id))
                    .map(|q| q.id)
                    .collect()
            };
            let rx_queues = serves(crate::netdev::QueueType::Rx);
            let tx_queues = serves(crate::netdev::QueueType::Tx);
            let by_name = || {
                rx_queues
                    .iter()
                    .filter_map(|q| nic.rx_queues.iter().find(|r| r.index == *q))
                    .find_map(|r| r.irqs.first().copied())
            };
            let (irq, irq_source) = match (n.irq, by_name()) {
                (Some(i), _) => (Some(i), Some(IrqSource::Netdev)),
                (None, Some(i)) => (Some(i), Some(IrqSource::InterruptsName)),
                (None, None) => (None, None),
            };
            let irq_cpus = irq.map(|i| match nic.irq(i) {
                Some(known) => known.affinity.effective.clone(),
                None => read_irq_affinity(fs, i, nr_cpu_ids).effective,
            });
            let thread = n.pid.map(|pid| NapiThread {
                pid,
                last_cpu: fs
                    .read_parsed(format!("/proc/{pid}/stat"), crate::process::parse_task_stat)
                    .map(|(_, cpu, _)| cpu)
                    .into(),
                allowed: fs
                    .read_parsed(
                        format!("/proc/{pid}/status"),
                        crate::process::parse_status_allowed,
                    )
                    .into(),
            });
            NapiView {
                id: n.id,
                rx_queues,
                tx_queues,
                irq,
                irq_source,
                irq_cpus,
                thread,
                defer_hard_irqs: n.defer_hard_irqs,
                gro_flush_timeout_ns: n.gro_flush_timeout_ns,
                irq_suspend_timeout_ns: n.irq_suspend_timeout_ns,
                threaded: n.threaded,
            }
        })
        .collect()
}

impl Nic {
    /// Takes the kind rtnetlink reported with the settings (IFLA_INFO_KIND) over the one
    /// guessed from sysfs, for virtual devices (a physical NIC keeps `physical`).
    pub fn take_link_kind(&mut self) {
        if self.kind == "physical" {
            return;
        }
        if let Some(kind) = self.settings.as_ref().and_then(|s| s.link_kind.clone()) {
            self.driver = Field::Known(kind.clone());
            self.kind = kind;
        }
    }

    /// Fills each queue's `irqs` from the device's vectors and their roles.
    pub fn link_queue_irqs(&mut self) {
        let serving = |want: &dyn Fn(IrqRole) -> bool| -> Vec<u32> {
            self.irqs
                .iter()
                .filter(|i| want(i.role) || i.role == IrqRole::AllQueues)
                .map(|i| i.irq)
                .collect()
        };
        let rx: Vec<Vec<u32>> = self
            .rx_queues
            .iter()
            .map(|q| serving(&|r| r.rx_queue() == Some(q.index)))
            .collect();
        let tx: Vec<Vec<u32>> = self
            .tx_queues
            .iter()
            .map(|q| serving(&|r| r.tx_queue() == Some(q.index)))
            .collect();
        for (q, irqs) in self.rx_queues.iter_mut().zip(rx) {
            q.irqs = irqs;
        }
        for (q, irqs) in self.tx_queues.iter_mut().zip(tx) {
            q.irqs = irqs;
        }
    }

    pub fn is_virtual(&self) -> bool {
        self.kind != "physical"
    }

    pub fn irq(&self, irq: u32) -> Option<&NicIrq> {
        self.irqs.iter().find(|i| i.irq == irq)
    }

    /// The receive queues the page pool `id` feeds ([`link_page_pools`]).
    pub fn pool_queues(&self, id: u64) -> impl Iterator<Item = &RxQueue> {
        self.rx_queues
            .iter()
            .filter(move |q| q.page_pools.as_ref().is_some_and(|ids| ids.contains(&id)))
    }

    /// IRQs that carry packets (not control vectors).
    pub fn queue_irqs(&self) -> impl Iterator<Item = &NicIrq> {
        self.irqs.iter().filter(|i| i.role.carries_packets())
    }

    /// Whether a vector of this role serves a queue the device has now (`queues/` lists it:
    /// `real_num_rx_queues`, `real_num_tx_queues`). A driver keeps a vector for each queue it
    /// could have: virtio_net requests one per queue pair the device offers
    /// (`virtnet_find_vqs`) and keeps them all when `ethtool -L` lowers the count, where they
    /// take no interrupt but keep an affinity. Vectors of no one queue (all queues, control,
    /// unrecognised) are not judged by this; of a device whose queues could not be listed,
    /// every vector is taken as live (which are is not known, and dropping them would blind
    /// every placement check).
    pub fn serves_live_queue(&self, role: IrqRole) -> bool {
        if self.queues_unknown.is_some() {
            return true;
        }
        let rx = |q: u32| self.rx_queues.iter().any(|r| r.index == q);
        let tx = |q: u32| self.tx_queues.iter().any(|t| t.index == q);
        match role {
            IrqRole::Rx(q) => rx(q),
            IrqRole::Tx(q) => tx(q),
            // A combined channel's vector goes by its receive queue: transmit queues can
            // outnumber the channels (XDP, mqprio, PTP queues) without the vector serving one.
            IrqRole::RxTx(q) => rx(q),
            IrqRole::RxAndTx { rx: r, tx: t } => rx(r) || tx(t),
            IrqRole::AllQueues | IrqRole::Control | IrqRole::Other => true,
        }
    }

    /// The packet-carrying IRQs of the queues the device has now ([`Nic::serves_live_queue`]).
    pub fn live_queue_irqs(&self) -> impl Iterator<Item = &NicIrq> {
        self.queue_irqs().filter(|i| self.serves_live_queue(i.role))
    }
}

fn file_name(p: &Path) -> Option<String> {
    p.file_name().map(|n| n.to_string_lossy().into_owned())
}

fn read_u32(fs: &HostFs, path: &str) -> Field<u32> {
    fs.read_parsed(path, parse_uint)
        .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
        .into()
}

fn uevent_devtype(fs: &HostFs, dir: &str) -> Option<String> {
    let text = fs.read(format!("{dir}/uevent")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("DEVTYPE="))
        .map(|s| s.trim().to_string())
}

/// `type` of an IPoIB netdev (include/uapi/linux/if_arp.h).
const ARPHRD_INFINIBAND: u32 = 32;

/// Reads one interface. `interrupts` is the parsed /proc/interrupts, when it could be read.
pub fn read_nic(fs: &HostFs, name: &str, interrupts: Option<&Interrupts>, nr_cpu_ids: u32) -> Nic {
    let dir = format!("{NET_DIR}/{name}");
    let canonical = fs.canonical(&dir).ok();
    let ifindex = read_u32(fs, &format!("{dir}/ifindex"));
    let iflink = read_u32(fs, &format!("{dir}/iflink"));
    let dev_type = read_u32(fs, &format!("{dir}/type"));
    // Virtual: sysfs puts the device under /sys/devices/virtual. A device under a bus
    // (/sys/devices/pci…, /sys/devices/vmbus…) is physical even when a tree lacks its
    // `device` link; only when the canonical path is unknown does the link decide.
    let is_virtual = match &canonical {
        Some(p) if p.starts_with("/sys/devices/virtual") => true,
        Some(p) if p.starts_with("/sys/devices") => false,
        _ => !fs.exists(format!("{dir}/device")),
    };
    // Real sysfs makes every /sys/class/net entry a link; a tree whose entry is a plain
    // directory without a `device` link (a partial dump) does not say what the interface is.
    let undescribed = is_virtual
        && fs.read_link(&dir).is_err()
        && canonical
            .as_ref()
            .is_none_or(|p| !p.starts_with("/sys/devices"));
    let kind = if undescribed
        && !fs.exists(format!("{dir}/type"))
        && !fs.is_dir(format!("{dir}/bonding"))
        && !fs.is_dir(format!("{dir}/bridge"))
    {
        KIND_UNKNOWN.to_string()
    } else if !is_virtual {
        "physical".to_string()
    } else if let Some(t) = uevent_devtype(fs, &dir) {
        t
    } else if dev_type.known() == Some(&772) {
        "loopback".to_string()
    } else if fs.is_dir(format!("{dir}/bridge")) {
        "bridge".to_string()
    } else if fs.is_dir(format!("{dir}/bonding")) {
        "bond".to_string()
    } else if matches!((ifindex.known(), iflink.known()), (Some(a), Some(b)) if a != b) {
        // A link to another interface: veth (or a tunnel); rtnetlink knows the exact kind.
        "veth".to_string()
    } else {
        "virtual".to_string()
    };

    let device = format!("{dir}/device");

    // The function holding the MSI vectors: the device itself, or for virtio_net its parent PCI
    // function (`device` is `virtioN`, which has neither msi_irqs nor numa_node).
    // Without the `device` link, a netdev at <function>/net/<name> still names its function.
    let dev_canonical = if is_virtual {
        None
    } else {
        fs.canonical(&device).ok().or_else(|| {
            let p = canonical.as_deref()?;
            (p.parent()?.file_name()? == "net")
                .then(|| p.parent()?.parent().map(Path::to_path_buf))
                .flatten()
        })
    };
    let driver: Field<String> = if kind == KIND_UNKNOWN {
        Field::unknown("the tree does not say what this interface is")
    } else if is_virtual {
        Field::Known(kind.clone())
    } else {
        let dev = dev_canonical
            .as_ref()
            .map_or(device.clone(), |d| d.to_string_lossy().into_owned());
        fs.read_link(format!("{dev}/driver"))
            .map(|t| file_name(&t).unwrap_or_default())
            .into()
    };
    let virtio_index = dev_canonical
        .as_deref()
        .and_then(file_name)
        .and_then(|n| n.strip_prefix("virtio").and_then(|i| i.parse().ok()));
    let function = match (&dev_canonical, virtio_index) {
        (Some(d), Some(_)) => d.parent().map(Path::to_path_buf),
        (Some(d), None) => Some(d.clone()),
        _ => None,
    };
    let function_str = function.as_ref().map(|p| p.to_string_lossy().into_owned());
    let msi_dir = function_str
        .as_ref()
        .map(|f| format!("{f}/msi_irqs"))
        .filter(|d| fs.is_dir(d));
    let bus_id = function
        .as_deref()
        .and_then(file_name)
        .filter(|_| !is_virtual);

    let (numa_node, local_cpus) = match &function_str {
        Some(f) => (
            fs.read_parsed(format!("{f}/numa_node"), parse_int).into(),
            read_list(fs, &format!("{f}/local_cpulist"), Some(nr_cpu_ids)).into(),
        ),
        None => (
            Field::unknown("virtual device: no bus"),
            Field::unknown("virtual device: no bus"),
        ),
    };

    let (queue_names, queues_unknown) = match fs.read_dir(format!("{dir}/queues")) {
        Ok(names) => (names, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let mut rx_idx: Vec<u32> = queue_names
        .iter()
        .filter_map(|q| q.strip_prefix("rx-")?.parse().ok())
        .collect();
    let mut tx_idx: Vec<u32> = queue_names
        .iter()
        .filter_map(|q| q.strip_prefix("tx-")?.parse().ok())
        .collect();
    rx_idx.sort_unstable();
    tx_idx.sort_unstable();

    let irqs = if is_virtual {
        Vec::new()
    } else {
        let ctx = NameContext {
            ifname: name,
            driver: driver.known().map(String::as_str),
            virtio_index,
            bus_id: bus_id.as_deref(),
        };
        // The INTx line of the function (for virtio_net, of its PCI parent): 0 means none.
        let intx = function_str
            .as_ref()
            .and_then(|f| fs.read_parsed(format!("{f}/irq"), parse_uint).ok())
            .and_then(|i| u32::try_from(i).ok())
            .filter(|i| *i > 0);
        let mut irqs = find_irqs(fs, interrupts, msi_dir.as_deref(), intx, &ctx, nr_cpu_ids);
        // An IPoIB netdev (type 32, ARPHRD_INFINIBAND) sits on the HCA's PCI function, whose
        // mlx4/mlx5 completion vectors every verbs consumer shares: IPoIB picks one for its
        // CQs (drivers/infiniband/ulp/ipoib/ipoib_verbs.c, `comp_vector`), and no vector name
        // says which. They are not its rings: never a queue of it.
        if dev_type.known() == Some(&ARPHRD_INFINIBAND) {
            for irq in &mut irqs {
                let hca = irq.name.starts_with("mlx4-") || irq.name.starts_with("mlx5_comp");
                if hca && irq.role.placement_queue().is_some() {
                    irq.role = IrqRole::Other;
                }
            }
        }
        irqs
    };
    let single_tx = tx_idx.len() == 1;
    let rx_queues = rx_idx
        .iter()
        .map(|&q| {
            let qd = format!("{dir}/queues/rx-{q}");
            RxQueue {
                index: q,
                rps_cpus: read_mask(fs, &format!("{qd}/rps_cpus")).into(),
                rps_flow_cnt: fs
                    .read_parsed(format!("{qd}/rps_flow_cnt"), parse_uint)
                    .into(),
                irqs: Vec::new(),
                page_pools: None,
            }
        })
        .collect();
    let tx_queues = tx_idx
        .iter()
        .map(|&q| {
            let qd = format!("{dir}/queues/tx-{q}");
            let xps_cpus = match read_mask(fs, &format!("{qd}/xps_cpus")) {
                // net-sysfs.c xps_cpus_show(): -ENOENT when the device has one tx queue.
                Err(e) if single_tx && e.is_not_found() => {
                    Field::unknown("not available: XPS has no effect with a single tx queue")
                }
                other => other.into(),
            };
            TxQueue {
                index: q,
                xps_cpus,
                xps_rxqs: read_mask(fs, &format!("{qd}/xps_rxqs")).into(),
                irqs: Vec::new(),
            }
        })
        .collect();

    let mut nic = Nic {
        name: name.to_string(),
        ifindex,
        kind,
        driver,
        bus_id,
        operstate: fs.read_value(format!("{dir}/operstate")).into(),
        mtu: read_u32(fs, &format!("{dir}/mtu")),
        numa_node,
        local_cpus,
        gro_flush_timeout: fs
            .read_parsed(format!("{dir}/gro_flush_timeout"), parse_uint)
            .into(),
        napi_defer_hard_irqs: fs
            .read_parsed(format!("{dir}/napi_defer_hard_irqs"), parse_uint)
            .into(),
        threaded: fs.read_value(format!("{dir}/threaded")).into(),
        rx_queues,
        tx_queues,
        irqs,
        queues_unknown,
        settings: None,
        napis: Vec::new(),
    };
    nic.link_queue_irqs();
    nic
}

fn find_irqs(
    fs: &HostFs,
    interrupts: Option<&Interrupts>,
    msi_dir: Option<&str>,
    intx: Option<u32>,
    ctx: &NameContext<'_>,
    nr_cpu_ids: u32,
) -> Vec<NicIrq> {
    let Some(interrupts) = interrupts else {
        return Vec::new();
    };
    // The device's own vectors when sysfs lists them; otherwise every IRQ whose name is ours.
    let own: Option<Vec<u32>> = msi_dir.and_then(|d| {
        let mut v: Vec<u32> = fs
            .read_dir(d)
            .ok()?
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        // Read each entry (msi/msix) so snapshots carry them; numeric order, not lexicographic.
        for n in &v {
            let _ = fs.read(format!("{d}/{n}"));
        }
        v.sort_unstable();
        Some(v)
    });
    // `msi_irqs` read: the kernel's own list of the function's vectors decides, and names
    // only label them. Empty, MSI is off (a VF whose driver fell back, a NIC on INTx).
    let listed = own.is_some();
    // A device without MSI vectors interrupts on its INTx line (`device/irq`), which other
    // devices may share: that row is ours whatever its actions are named.
    let own = own.filter(|v| !v.is_empty());
    let intx = intx.filter(|_| own.is_none());
    let mut found: Vec<NicIrq> = Vec::new();
    // The function's one INTx line, when no action on it is named after the device.
    let mut unnamed_line: Option<u32> = None;
    for row in &interrupts.rows {
        let Some(irq) = row.number() else { continue };
        let is_own = own.as_ref().is_some_and(|v| v.binary_search(&irq).is_ok());
        if own.is_some() && !is_own {
            continue;
        }
        let on_line = intx == Some(irq);
        // MSI off by the list: no vector but the INTx line is this function's, however it
        // is named (another device's vectors may carry this one's name: a renamed VF's).
        if listed && own.is_none() && !on_line {
            continue;
        }
        // Each action is one request_irq: a shared line lists several ("eth0, ehci_hcd:usb1").
        let mine = row
            .actions
            .iter()
            .find_map(|a| classify(a, ctx).map(|r| (a.clone(), r)));
        if on_line && mine.is_none() {
            unnamed_line = Some(irq);
        }
        let (name, role) = match mine {
            Some(m) => m,
            None if on_line => (row.actions.join(", "), IrqRole::AllQueues),
            None if is_own => (row.actions.join(", "), IrqRole::Other),
            None => continue,
        };
        let shared: Vec<String> = if on_line || row.actions.len() > 1 {
            row.actions
                .iter()
                .filter(|a| **a != name)
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let busiest_cpu = interrupts
            .per_cpu(row)
            .filter(|(_, c)| *c > 0)
            .max_by_key(|(_, c)| *c)
            .map(|(cpu, _)| cpu);
        found.push(NicIrq {
            irq,
            name,
            role,
            count: row.total(),
            busiest_cpu,
            affinity: read_irq_affinity(fs, irq, nr_cpu_ids),
            line: on_line.then_some(IrqLine::Intx),
            shared_with: shared,
        });
    }
    // A function interrupts on its INTx line or on MSI/MSI-X vectors, never both (enabling
    // MSI disables INTx: Documentation/PCI/msi-howto.rst). Where sysfs did not list the
    // vectors (a tree without msi_irqs) but vectors named after the device were found,
    // `device/irq` is only the pin's routing: the line belongs to whoever is named on it.
    if let Some(line) = unnamed_line
        && found.iter().any(|i| i.line.is_none())
    {
        found.retain(|i| i.irq != line);
    }
    let mut roles: Vec<(&str, IrqRole)> = found.iter().map(|i| (i.name.as_str(), i.role)).collect();
    resolve_device(&mut roles, ctx);
    let roles: Vec<IrqRole> = roles.into_iter().map(|(_, r)| r).collect();
    for (irq, role) in found.iter_mut().zip(roles) {
        irq.role = role;
    }
    found
}

/// Netdevs that share one PCI function (the ports of a ConnectX-3, or of any multi-port
/// function) all see the function's `msi_irqs`. Each keeps only its own vectors:
/// - a vector another port recognised by name is that port's, not an unrecognised one here;
/// - mlx4 names its EQs after the function, not the port: `mlx4_enable_msi_x` (mlx4/main.c)
///   gives each port `num_comp_vectors / num_ports` consecutive completion EQs, unless there
///   are fewer than `MIN_MSIX_P_PORT` (5) per port (`MLX4_IS_LEGACY_EQ_MODE`), when every EQ
///   serves every port. The port is the netdev's `dev_port` (mlx4_en sets `port - 1`).
pub fn split_shared_function(fs: &HostFs, nics: &mut [Nic]) {
    let mut groups: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
    for (i, n) in nics.iter().enumerate() {
        if let (false, Some(b)) = (n.is_virtual(), &n.bus_id) {
            groups.entry(b.clone()).or_default().push(i);
        }
    }
    for members in groups.values().filter(|m| m.len() > 1) {
        let recognised: std::collections::BTreeMap<u32, usize> = members
            .iter()
            .flat_map(|&i| {
                nics[i]
                    .irqs
                    .iter()
                    .filter(|q| q.role != IrqRole::Other && !q.name.starts_with("mlx4-"))
                    .map(move |q| (q.irq, i))
            })
            .collect();
        let ports: Vec<(usize, u64)> = {
            let mut p: Vec<(usize, u64)> = members
                .iter()
                .map(|&i| {
                    let port = fs
                        .read_parsed(format!("{NET_DIR}/{}/dev_port", nics[i].name), parse_uint)
                        .unwrap_or(u64::MAX);
                    (i, port)
                })
                .collect();
            p.sort_by_key(|&(i, port)| (port, nics[i].name.clone()));
            p
        };
        let nports = ports.len() as u32;
        for (pos, &(i, _)) in ports.iter().enumerate() {
            let nic = &mut nics[i];
            nic.irqs.retain(|q| {
                q.role != IrqRole::Other || recognised.get(&q.irq).is_none_or(|o| *o == i)
            });
            let ncomp = nic
                .irqs
                .iter()
                .filter(|q| q.name.starts_with("mlx4-") && q.role.rx_queue().is_some())
                .count() as u32;
            if ncomp == 0 || ncomp < nports * 5 {
                nic.link_queue_irqs();
                continue;
            }
            let per_port = ncomp / nports;
            let first = pos as u32 * per_port;
            nic.irqs.retain_mut(|q| {
                if !q.name.starts_with("mlx4-") {
                    return true;
                }
                match q.role.rx_queue() {
                    Some(eq) if (first..first + per_port).contains(&eq) => {
                        q.role = IrqRole::RxTx(eq - first);
                        true
                    }
                    Some(_) => false,
                    None => true,
                }
            });
            nic.link_queue_irqs();
        }
    }
}

/// Interface names under /sys/class/net, sorted.
pub fn list_interfaces(fs: &HostFs) -> Result<Vec<String>> {
    let mut names = fs.read_dir(NET_DIR)?;
    names.retain(|n| n != "bonding_masters");
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn read_only_smp_affinity_marks_a_managed_irq_also_from_tree_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for irq in [36, 37] {
            let d = r.join(format!("proc/irq/{irq}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("smp_affinity"), "3\n").unwrap();
            fs::write(d.join("smp_affinity_list"), "0-1\n").unwrap();
        }
        fs::create_dir_all(r.join("netsteer")).unwrap();
        fs::write(
            r.join("netsteer/meta.json"),
            r#"{"netsteer_version":"t","kernel":null,"captured_at_unix":0,"modes":{"/proc/irq/36/smp_affinity":292}}"#,
        )
        .unwrap();
        let fs = HostFs::new(r);
        let managed = read_irq_affinity(&fs, 36, 2);
        assert_eq!(managed.settable, Field::Known(false));
        assert_eq!(managed.requested, Field::Known(CpuSet::first_n(2)));
        assert_eq!(read_irq_affinity(&fs, 37, 2).settable, Field::Known(true));
        assert!(matches!(
            read_irq_affinity(&fs, 38, 2).requested,
            Field::Unknown { .. }
        ));
    }

    /// A move is pending only when both lists are read and the effective CPU lies outside the
    /// requested set; a subset (x86 delivers a wide mask to one CPU) is where it belongs.
    #[test]
    fn a_move_is_pending_only_when_the_effective_cpu_is_outside_the_requested_set() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        // (irq, smp_affinity_list, effective_affinity_list or None for absent)
        let cases: [(u32, &str, Option<&str>, bool); 5] = [
            (40, "2", Some("0"), true),    // pinned to 2, not fired since
            (41, "0-3", Some("1"), false), // a wide mask, delivered to one of its CPUs
            (42, "2", Some("2"), false),   // moved
            (43, "2", None, false),        // no effective_affinity_list (not x86)
            (44, "1,3", Some(""), false),  // an IRQ not started: no effective CPU
        ];
        for (irq, req, eff, _) in cases {
            let d = r.join(format!("proc/irq/{irq}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("smp_affinity_list"), format!("{req}\n")).unwrap();
            if let Some(e) = eff {
                fs::write(d.join("effective_affinity_list"), format!("{e}\n")).unwrap();
            }
        }
        let fs = HostFs::new(r);
        for (irq, req, eff, want) in cases {
            assert_eq!(
                read_irq_affinity(&fs, irq, 4).move_pending(),
                want,
                "IRQ {irq}: requested {req}, effective {eff:?}"
            );
        }
        // Neither list readable: unknown, not pending.
        assert!(!read_irq_affinity(&fs, 45, 4).move_pending());
    }
}
