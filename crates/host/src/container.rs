//! A container's view of the host: its network namespace lists only its own interfaces (a
//! veth, a bridge), while `/proc/interrupts` is the host's (procfs does not namespace it) and
//! shows the queue vectors of NICs the namespace cannot see. Judged as healthy from inside,
//! those NICs would look judged; they are not, and the view says so.

use crate::nic::Nic;
use crate::parse::Interrupts;
use serde::{Deserialize, Serialize};

/// True when `name` reads as one queue of a multi-queue NIC: `virtio3-input.0`,
/// `eth0-TxRx-5` (ixgbe/i40e/ice/bnxt `%s-TxRx-%u`), `eth0-Tx-Rx-0` (ena), `ens1f0-rx-2`,
/// `mlx5_comp7@pci:…`, `gve-ntfy-blk4@…`, `mana_q3@pci:…` (the drivers' own request_irq
/// names, as in drivers/net/virtio_net.c). EFA's `efa-comp%d` are an RDMA function's vectors,
/// no netdev's: not a NIC queue.
fn queue_like(name: &str) -> bool {
    let base = name.split('@').next().unwrap_or(name).to_ascii_lowercase();
    if base.starts_with("efa-") {
        return false;
    }
    let tail_digits = base.trim_end_matches(|c: char| c.is_ascii_digit());
    if tail_digits.len() == base.len() {
        return false;
    }
    let stem = tail_digits.trim_end_matches(['-', '_', '.']);
    [
        "input", "output", "txrx", "rx", "tx", "comp", "fp", "blk", "io", "queue", "mana_q",
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
        // The chip column ends in the whole PCI address (`IR-PCI-MSIX-0000:01:00.0`): a NIC
        // at 0000:01:00.0 is not one at 10000:01:00.0 (a VMD domain).
        let on_function = match (&self.chip, &nic.bus_id) {
            (Some(chip), Some(bus)) => chip == bus || chip.ends_with(&format!("-{bus}")),
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
            // `PCI-MSI`, `IR-PCI-MSIX-…`, Xen's `xen-pirq-msi-x`.
            let msi = r
                .chip
                .as_deref()
                .is_some_and(|c| c.to_ascii_lowercase().contains("msi"));
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
    Some(format!(
        "a container's view: its namespace lists {} (no physical NIC), while /proc/interrupts holds {} queue vector(s) of NICs it cannot see (IRQs {})",
        listed_names(nics),
        foreign.len(),
        irq_ranges(foreign, 8)
    ))
}

/// Why this view is a container's when no vector says so: its namespace is not the host's
/// (`netns`, [`crate::view::non_init_netns`]) and holds no physical NIC.
pub fn netns_container_view(nics: &[Nic], netns: Option<&str>) -> Option<String> {
    let why = netns?;
    if nics.iter().any(|n| n.kind != "loopback" && !n.is_virtual()) {
        return None;
    }
    Some(format!(
        "a container's view: {why}; it lists {} (no physical NIC), so the host's NICs and their interrupts are not in it",
        listed_names(nics)
    ))
}

/// The interfaces a namespace lists besides loopback, or "no interface".
fn listed_names(nics: &[Nic]) -> String {
    let names: Vec<&str> = nics
        .iter()
        .filter(|n| n.kind != "loopback")
        .map(|n| n.name.as_str())
        .collect();
    if names.is_empty() {
        "no interface".to_string()
    } else {
        names.join(", ")
    }
}

/// `40-53,60` for the (sorted) vectors' IRQs, at most `max` ranges, then how many IRQs more.
/// Not a CpuSet: IRQ numbers come from the file and may be as large as u32 allows, and a
/// bitmap of them would be as large (512 MiB for IRQ 4294967295).
pub fn irq_ranges(vectors: &[ForeignVector], max: usize) -> String {
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for v in vectors {
        match ranges.last_mut() {
            Some((_, end)) if v.irq == end.saturating_add(1) => *end = v.irq,
            Some((_, end)) if v.irq == *end => {}
            _ => ranges.push((v.irq, v.irq)),
        }
    }
    let mut text: Vec<String> = ranges
        .iter()
        .take(max)
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    let rest: u64 = ranges
        .iter()
        .skip(max)
        .map(|(a, b)| u64::from(b - a) + 1)
        .sum();
    if rest > 0 {
        text.push(format!("and {rest} more"));
    }
    text.join(",")
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
            "eth0-Tx-Rx-7",
            "gve-ntfy-blk4@pci:0000:00:04.0",
            "mana_q3@pci:7870:00:00.0",
        ] {
            assert!(queue_like(n), "{n}");
        }
        for n in [
            "virtio0-config",
            "ahci[0000:00:1f.2]",
            "i8042",
            "eth0",
            "nvme0q1",
            "nvme0q1x",
            "timer",
            "efa-comp3@pci:0000:10:1c.0",
        ] {
            assert!(!queue_like(n), "{n}");
        }
    }

    /// An IRQ number as large as the file may hold costs no bitmap of that size.
    #[test]
    fn irq_ranges_of_huge_numbers() {
        let v = |irq| super::ForeignVector {
            irq,
            names: vec!["eth9-TxRx-0".into()],
            chip: None,
        };
        let all = [v(40), v(41), v(42), v(60), v(u32::MAX - 1), v(u32::MAX)];
        assert_eq!(super::irq_ranges(&all, 8), "40-42,60,4294967294-4294967295");
        assert_eq!(super::irq_ranges(&all, 1), "40-42,and 3 more");
    }
}
