//! The zoo: single guests shaped like the hosts users run, so the readers meet real kernels'
//! sysfs and /proc rather than trees made here. A zoo guest has NUMA nodes (QEMU's `-numa`,
//! each NIC on its node's PCI expander bridge, whose ACPI proximity the guest kernel reads into
//! `numa_node`), several NICs of different models at once (virtio multi-queue, igb, e1000e,
//! vmxnet3, and e1000 or rtl8139 on a legacy INTx line), a bond and a VLAN over them, and a
//! CPU taken offline. Its NICs sit on QEMU hubs of their own: no packet leaves the guest.

use super::image::Image;
use super::{Guest, GuestSpec};
use crate::{Lab, LabError, Result};
use std::path::Path;
use std::time::Duration;

/// One emulated NIC of a zoo guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZooNic {
    /// virtio-net-pci with `queues` queue pairs: a vector per queue each way.
    Virtio { queues: u32 },
    /// Intel 82576 (igb): an MSI-X vector per combined queue.
    Igb,
    /// Intel 82574L (e1000e): MSI-X rx-0, tx-0 and "other".
    E1000e,
    /// VMware vmxnet3: a vector per queue pair and an event vector.
    Vmxnet3,
    /// Intel 82540EM (e1000): no MSI, one legacy INTx line.
    E1000,
    /// Realtek 8139 (8139cp in C+ mode, else 8139too): no MSI, one legacy INTx line.
    Rtl8139,
    /// NE2000 (ne2k-pci): no MSI, one legacy INTx line.
    Ne2kPci,
    /// AMD PCnet (pcnet32): no MSI, one legacy INTx line.
    Pcnet,
    /// Intel i82559ER (e100): no MSI, one legacy INTx line.
    E100,
    /// DEC 21143 (tulip): no MSI, one legacy INTx line.
    Tulip,
}

impl ZooNic {
    /// QEMU's device name.
    pub fn device(self) -> &'static str {
        match self {
            ZooNic::Virtio { .. } => "virtio-net-pci",
            ZooNic::Igb => "igb",
            ZooNic::E1000e => "e1000e",
            ZooNic::Vmxnet3 => "vmxnet3",
            ZooNic::E1000 => "e1000",
            ZooNic::Rtl8139 => "rtl8139",
            ZooNic::Ne2kPci => "ne2k_pci",
            ZooNic::Pcnet => "pcnet",
            ZooNic::E100 => "i82559er",
            ZooNic::Tulip => "tulip",
        }
    }

    /// The guest's driver.
    pub fn driver(self) -> &'static str {
        match self {
            ZooNic::Virtio { .. } => "virtio_net",
            ZooNic::Igb => "igb",
            ZooNic::E1000e => "e1000e",
            ZooNic::Vmxnet3 => "vmxnet3",
            ZooNic::E1000 => "e1000",
            ZooNic::Rtl8139 => "8139cp",
            ZooNic::Ne2kPci => "ne2k-pci",
            ZooNic::Pcnet => "pcnet32",
            ZooNic::E100 => "e100",
            ZooNic::Tulip => "tulip",
        }
    }

    fn device_args(self, netdev: &str, bus: Option<&str>, mac: &str) -> String {
        let mut d = match self {
            ZooNic::Virtio { queues } => format!(
                "virtio-net-pci,netdev={netdev},mq=on,vectors={}",
                2 * queues + 2
            ),
            other => format!("{},netdev={netdev}", other.device()),
        };
        d.push_str(&format!(",mac={mac}"));
        if let Some(b) = bus {
            d.push_str(&format!(",bus={b}"));
        }
        d
    }

    fn queues(self) -> u32 {
        match self {
            ZooNic::Virtio { queues } => queues,
            _ => 1,
        }
    }
}

/// A zoo guest's shape.
#[derive(Debug, Clone)]
pub struct ZooSpec {
    /// The guest kernel's series (`6.1`, `6.12`); None: the apt candidate.
    pub kernel: Option<String>,
    pub cpus: u32,
    /// NUMA nodes (1: none declared); the CPUs split evenly, node 0 first.
    pub nodes: u32,
    pub mem_mb: u32,
    /// Each NIC and the NUMA node of the expander bridge it sits on (None: the root bus,
    /// whose node the platform does not state).
    pub nics: Vec<(ZooNic, Option<u32>)>,
    pub boot_limit: Duration,
}

impl ZooSpec {
    /// QEMU's arguments: memory per node, the nodes' CPUs, one `pxb` expander bridge per node
    /// that has a NIC (bus numbers 32 apart, so each has room for its devices), and the NICs.
    pub fn qemu_args(&self) -> Result<Vec<String>> {
        let mut a = Vec::new();
        if self.nodes > 1 {
            if !self.cpus.is_multiple_of(self.nodes) || !self.mem_mb.is_multiple_of(self.nodes) {
                return Err(LabError::Invalid(format!(
                    "zoo guest: {} CPUs and {} MiB do not split over {} nodes",
                    self.cpus, self.mem_mb, self.nodes
                )));
            }
            let per = self.cpus / self.nodes;
            for n in 0..self.nodes {
                a.push("-object".into());
                a.push(format!(
                    "memory-backend-ram,id=mem{n},size={}M",
                    self.mem_mb / self.nodes
                ));
                a.push("-numa".into());
                a.push(format!(
                    "node,nodeid={n},cpus={}-{},memdev=mem{n}",
                    n * per,
                    n * per + per - 1
                ));
            }
        }
        let mut bridges: Vec<u32> = self.nics.iter().filter_map(|(_, n)| *n).collect();
        bridges.sort_unstable();
        bridges.dedup();
        for n in &bridges {
            if *n >= self.nodes.max(1) {
                return Err(LabError::Invalid(format!(
                    "zoo guest: a NIC on node {n} of {}",
                    self.nodes
                )));
            }
            a.push("-device".into());
            a.push(format!(
                "pxb,id=pxb{n},bus=pci.0,bus_nr={},numa_node={n}",
                32 * (n + 1)
            ));
        }
        for (i, (nic, node)) in self.nics.iter().enumerate() {
            let id = format!("z{i}");
            a.push("-netdev".into());
            a.push(format!("hubport,id={id},hubid={i}"));
            a.push("-device".into());
            // A NIC without a node goes on the root bus by name: left to QEMU it would take
            // the last bus created, an expander's, and land on that node.
            let bus = Some(node.map_or("pci.0".to_string(), |n| format!("pxb{n}")));
            a.push(nic.device_args(
                &id,
                bus.as_deref(),
                &format!("52:54:00:5a:4f:{:02x}", i + 1),
            ));
        }
        Ok(a)
    }

    /// `4 vCPUs on 2 nodes, virtio×4 (node 0), igb (node 1), e1000 (root bus), kernel 6.1`.
    pub fn describe(&self) -> String {
        let nics: Vec<String> = self
            .nics
            .iter()
            .map(|(n, node)| {
                let q = if n.queues() > 1 {
                    format!("×{}", n.queues())
                } else {
                    String::new()
                };
                match node {
                    Some(node) => format!("{}{q} (node {node})", n.device()),
                    None => format!("{}{q} (root bus)", n.device()),
                }
            })
            .collect();
        format!(
            "{} vCPUs on {} node(s), {}, kernel {}",
            self.cpus,
            self.nodes,
            nics.join(", "),
            self.kernel.as_deref().unwrap_or("of the apt candidate")
        )
    }
}

/// A booted zoo guest; killed (and its lab's scratch removed) when dropped.
pub struct ZooGuest {
    /// Set when the first boot's emulator crashed and the guest was booted again.
    pub retried: Option<String>,
    pub guest: Guest,
    pub image: Image,
    pub spec: ZooSpec,
    // Last: the lab's scratch outlives the guest that writes into it.
    pub lab: Lab,
}

impl ZooGuest {
    /// Builds (or reuses) the kernel's image and boots the guest. A QEMU that dies or stalls
    /// before the guest is up is the emulator's failure (TCG has its own bugs): said on stderr,
    /// kept in [`ZooGuest::retried`], and booted once more; a second failure is the error.
    pub fn boot(tag: &str, spec: &ZooSpec) -> Result<ZooGuest> {
        let (mut g, retried) = super::once_more_after_a_crash(|| Self::boot_once(tag, spec))?;
        g.retried = retried;
        Ok(g)
    }

    fn boot_once(tag: &str, spec: &ZooSpec) -> Result<ZooGuest> {
        let (guest, image, lab) = super::boot_single(
            tag,
            spec.kernel.as_deref(),
            &GuestSpec {
                name: "zoo".into(),
                cpus: spec.cpus,
                mem_mb: spec.mem_mb,
                nic: None,
                mac: String::new(),
                extra: spec.qemu_args()?,
                virtual_time: None,
                peer_channel: false,
            },
            spec.boot_limit,
        )?;
        Ok(ZooGuest {
            retried: None,
            guest,
            image,
            spec: spec.clone(),
            lab,
        })
    }

    /// Gives the guest the program at `host_bin` and returns its path inside `chroot /host`.
    pub fn install(&self, host_bin: &Path) -> Result<String> {
        super::install_into(host_bin, &[&self.guest])
    }

    /// A guest shell line that must succeed; its output.
    pub fn sh_ok(&mut self, cmd: &str, limit: Duration) -> Result<String> {
        self.guest.sh_ok(cmd, limit)
    }

    /// The shapes users run and the zoo adds to a booted guest: a bond (`bond1`) over two NICs, a VLAN
    /// on a third, and the last CPU taken offline (Documentation/core-api/cpu_hotplug.rst).
    /// The interfaces are named by the guest's own enumeration (`eth0`…), in the NICs' order.
    pub fn shape(
        &mut self,
        bond: Option<(&str, &str)>,
        vlan: Option<&str>,
        offline: Option<u32>,
    ) -> Result<()> {
        let t = Duration::from_secs(120);
        let ip = "chroot /host ip";
        for i in 0..self.spec.nics.len() {
            self.sh_ok(&format!("{ip} link set eth{i} up"), t)?;
        }
        // Loading `bonding` makes a bond0 of its own (max_bonds=1): the zoo's is bond1.
        if let Some((a, b)) = bond {
            self.sh_ok(
                &format!("{ip} link add bond1 type bond mode active-backup"),
                t,
            )?;
            for port in [a, b] {
                self.sh_ok(
                    &format!("{ip} link set {port} down && {ip} link set {port} master bond1"),
                    t,
                )?;
            }
            self.sh_ok(&format!("{ip} link set bond1 up"), t)?;
        }
        if let Some(dev) = vlan {
            self.sh_ok(&format!("{ip} link add link {dev} name {dev}.10 type vlan id 10 && {ip} link set {dev}.10 up"), t)?;
        }
        if let Some(cpu) = offline {
            self.sh_ok(
                &format!("echo 0 > /sys/devices/system/cpu/cpu{cpu}/online"),
                t,
            )?;
        }
        Ok(())
    }
}
