//! A container's view of the host: its network namespace lists only its own interfaces (a
//! veth, a bridge), while `/proc/interrupts` is the host's (procfs does not namespace it) and
//! shows the queue vectors of NICs the namespace cannot see. Judged as healthy from inside,
//! those NICs would look judged; they are not, and the view says so.

use crate::nic::Nic;
use crate::parse::Interrupts;
use serde::{Deserialize, Serialize};

/// True when `name` reads as one queue of a multi-queue device: `virtio3-input.0`,
/// `eth0-TxRx-5`, `ens1f0-rx-2`, `mlx5_comp7@pci:…`, `bnxt_en-fp-3`, `gve-ntfy-blk4@…`,
/// `ena-io-0` style names (the driver's own request_irq names, as in
/// drivers/net/virtio_net.c, ixgbe/i40e/ice `%s-TxRx-%u`, mlx5 `mlx5_comp%d`).
fn queue_like(name: &str) -> bool {
    let base = name.split('@').next().unwrap_or(name).to_ascii_lowercase();
    let tail_digits = base.trim_end_matches(|c: char| c.is_ascii_digit());
    if tail_digits.len() == base.len() {
        return false;
    }
    let stem = tail_digits.trim_end_matches(['-', '_', '.']);
    [
        "input", "output", "txrx", "rx", "tx", "comp", "fp", "blk", "io", "queue",
    ]
    .iter()
    .any(|k| stem.ends_with(k))
}

/// A vector of `/proc/interrupts` named like a NIC queue that no listed interface owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignVector {
    pub irq: u32,
    /// Its handler names (`eth0-TxRx-3`).
    pub names: Vec<String>,
    /// Its chip column (`IR-PCI-MSIX-0000:3b:00.0` names the PCI function on recent kernels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chip: Option<String>,
}

impl ForeignVector {
    /// Whether the vector looks like `nic`'s own: named after it (`eth0-TxRx-3`) or on its
    /// PCI function's chip. Then `nic`'s vector list (its `msi_irqs`) is missing one.
    pub fn looks_like(&self, nic: &Nic) -> bool {
        let named = self.names.iter().any(|a| {
            a.strip_prefix(nic.name.as_str())
                .is_some_and(|rest| rest.starts_with(['-', '_', '@']))
        });
        let on_function = match (&self.chip, &nic.bus_id) {
            (Some(chip), Some(bus)) => chip.ends_with(bus.as_str()),
            _ => false,
        };
        named || on_function
    }
}

/// The vectors of `/proc/interrupts` named like NIC queue vectors that no listed interface
/// owns, lowest first.
pub fn foreign_queue_vectors(interrupts: &Interrupts, nics: &[Nic]) -> Vec<ForeignVector> {
    let mut out: Vec<ForeignVector> = interrupts
        .rows
        .iter()
        .filter_map(|r| {
            let irq = r.number()?;
            let msi = r.chip.as_deref().is_some_and(|c| c.contains("MSI"));
            (msi && r.actions.iter().any(|a| queue_like(a))
                && !nics.iter().any(|n| n.irq(irq).is_some()))
            .then(|| ForeignVector {
                irq,
                names: r.actions.clone(),
                chip: r.chip.clone(),
            })
        })
        .collect();
    out.sort_by_key(|v| v.irq);
    out.dedup_by_key(|v| v.irq);
    out
}

/// Why this view is a container's, when it is: no interface but loopback is a physical device,
/// and `/proc/interrupts` holds queue vectors none of them owns.
pub fn container_view(nics: &[Nic], foreign: &[ForeignVector]) -> Option<String> {
    let listed: Vec<&Nic> = nics.iter().filter(|n| n.kind != "loopback").collect();
    if foreign.is_empty() || listed.iter().any(|n| !n.is_virtual()) {
        return None;
    }
    let names: Vec<&str> = listed.iter().map(|n| n.name.as_str()).collect();
    Some(format!(
        "a container's view: its namespace lists {} (no physical NIC), while /proc/interrupts holds {} queue vector(s) of NICs it cannot see (IRQs {})",
        if names.is_empty() {
            "no interface".to_string()
        } else {
            names.join(", ")
        },
        foreign.len(),
        crate::CpuSet::from_iter(foreign.iter().map(|v| v.irq)).to_list()
    ))
}

#[cfg(test)]
mod tests {
    use super::queue_like;

    #[test]
    fn queue_vector_names() {
        for n in [
            "virtio3-input.0",
            "virtio3-output.12",
            "eth0-TxRx-5",
            "ens1f0-rx-2",
            "mlx5_comp7@pci:0000:3b:00.0",
            "bnxt_en-fp-3",
            "gve-ntfy-blk4@pci:0000:00:04.0",
        ] {
            assert!(queue_like(n), "{n}");
        }
        for n in [
            "virtio0-config",
            "ahci[0000:00:1f.2]",
            "i8042",
            "eth0",
            "nvme0q1x",
            "timer",
        ] {
            assert!(!queue_like(n), "{n}");
        }
    }
}
