//! Which queue an IRQ serves, from the names drivers give their vectors.
//!
//! Patterns checked against the names each driver gives its vectors in the kernel sources
//! (the `request_irq` callers in drivers/net/virtio_net.c and under drivers/net/ethernet/: e.g.
//! virtio's `virtioN-input.Q`, mlx5's `mlx5_compQ@pci:…`, ixgbe/igb's `IF-TxRx-Q`); the index is
//! the queue or channel number.

use serde::{Deserialize, Serialize};

/// What one NIC interrupt vector is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "queue", rename_all = "kebab-case")]
pub enum IrqRole {
    /// Receive queue N only (`virtio0-input.N`, `eth0-rx-N`).
    Rx(u32),
    /// Transmit queue N only (`virtio0-output.N`, `eth0-tx-N`).
    Tx(u32),
    /// A combined channel N serving rx-N and tx-N (`eth0-TxRx-N`, `mlx5_compN@pci:...`).
    RxTx(u32),
    /// One vector for every queue (`virtio0-virtqueues`, INTx `virtio0`).
    AllQueues,
    /// Configuration, mailbox, admin or async events: no packets.
    Control,
    /// A vector of the device whose name matches no known pattern.
    Other,
}

/// The queue label used in reports: `rx-0`, `tx-3`, `rx/tx-5`, `all queues`, `control`, `other`.
impl std::fmt::Display for IrqRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IrqRole::Rx(q) => write!(f, "rx-{q}"),
            IrqRole::Tx(q) => write!(f, "tx-{q}"),
            IrqRole::RxTx(q) => write!(f, "rx/tx-{q}"),
            IrqRole::AllQueues => f.write_str("all queues"),
            IrqRole::Control => f.write_str("control"),
            IrqRole::Other => f.write_str("other"),
        }
    }
}

/// What is known about the device whose vectors are being named.
#[derive(Debug, Clone, Default)]
pub struct NameContext<'a> {
    pub ifname: &'a str,
    pub driver: Option<&'a str>,
    /// N of the `virtioN` device behind a virtio_net interface.
    pub virtio_index: Option<u32>,
    /// PCI address of the function (`0000:3b:00.0`), matched against `@pci:` suffixes.
    pub bus_id: Option<&'a str>,
}

fn index(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Splits `name@pci:BDF` / `name@BDF`; returns the name and whether the address (if any) is ours.
fn strip_bus<'a>(name: &'a str, ctx: &NameContext<'_>) -> (&'a str, bool) {
    match name.split_once('@') {
        Some((base, addr)) => {
            let addr = addr.strip_prefix("pci:").unwrap_or(addr);
            (base, ctx.bus_id.is_none_or(|b| b == addr))
        }
        None => (name, true),
    }
}

/// Classifies one vector name. `None` means the name is not this interface's; callers that
/// took the IRQ from the device's own `msi_irqs` turn that into [`IrqRole::Other`].
pub fn classify(name: &str, ctx: &NameContext<'_>) -> Option<IrqRole> {
    let name = name.trim();
    if let Some(n) = ctx.virtio_index {
        let prefix = format!("virtio{n}");
        if let Some(rest) = name.strip_prefix(&prefix) {
            if rest.is_empty() || rest == "-virtqueues" {
                return Some(IrqRole::AllQueues);
            }
            if rest == "-config" {
                return Some(IrqRole::Control);
            }
            if let Some(q) = rest.strip_prefix("-input.").and_then(index) {
                return Some(IrqRole::Rx(q));
            }
            if let Some(q) = rest.strip_prefix("-output.").and_then(index) {
                return Some(IrqRole::Tx(q));
            }
        }
    }
    let (base, ours) = strip_bus(name, ctx);
    if name.contains('@') {
        if !ours {
            return None;
        }
        // mlx5: mlx5_comp<i>@pci:BDF, control mlx5_async<i>@pci:BDF (older: no @pci:)
        if let Some(i) = base.strip_prefix("mlx5_comp").and_then(index) {
            return Some(IrqRole::RxTx(i));
        }
        if let Some(i) = base.strip_prefix("mana_q").and_then(index) {
            return Some(IrqRole::RxTx(i));
        }
        if let Some(i) = base.strip_prefix("mlx4-").and_then(index) {
            return Some(IrqRole::RxTx(i));
        }
        // gve: TX blocks are the lower half, RX the upper half; resolved by the caller that
        // knows how many blocks there are (see `gve_block`).
        if base.starts_with("gve-ntfy-blk") {
            return Some(IrqRole::Other);
        }
        if base.contains("async") || base.contains("mgmnt") || base.contains("ctrl") {
            return Some(IrqRole::Control);
        }
        return ctx.bus_id.map(|_| IrqRole::Other);
    }
    if ctx.driver == Some("mlx5_core")
        && let Some(i) = base.strip_prefix("mlx5_comp").and_then(index)
    {
        return Some(IrqRole::RxTx(i));
    }
    let ifname = ctx.ifname;
    if ifname.is_empty() {
        return None;
    }
    if let Some(b) = ctx.bus_id
        && name.ends_with(":misc")
        && name.contains(b)
    {
        return Some(IrqRole::Control);
    }
    // Find "<ifname>-" either at the start or after "<driver>-" (i40e/ice/idpf).
    let pos = name
        .match_indices(ifname)
        .map(|(p, _)| p)
        .find(|&p| p == 0 || name.as_bytes()[p - 1] == b'-')?;
    if pos > 0 {
        // i40e/ice/idpf prefix the driver name: "<drv>-<if>-TxRx-<i>".
        let prefix = &name[..pos - 1];
        let is_driver = match ctx.driver {
            Some(d) => prefix == d,
            None => {
                !prefix.is_empty()
                    && prefix
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            }
        };
        if !is_driver {
            return None;
        }
    }
    let rest = &name[pos + ifname.len()..];
    if rest.is_empty() {
        // ixgbe's "other causes" vector is named after the interface alone.
        return Some(IrqRole::Control);
    }
    let rest = rest.strip_prefix('-')?;
    if rest.contains("fdir") {
        return Some(IrqRole::Other);
    }
    let lower = rest.to_ascii_lowercase();
    for (prefix, role) in [
        ("txrx-", IrqRole::RxTx as fn(u32) -> IrqRole),
        ("tx-rx-", IrqRole::RxTx),
        ("fp-", IrqRole::RxTx),
        ("rx-", IrqRole::Rx),
        ("tx-", IrqRole::Tx),
    ] {
        if let Some(i) = lower.strip_prefix(prefix).and_then(index) {
            return Some(role(i));
        }
    }
    // xen-netfront: <if>-q<i>-tx / -rx
    if let Some(q) = rest.strip_prefix('q')
        && let Some((i, dir)) = q.split_once('-')
        && let Some(i) = index(i)
    {
        return match dir {
            "tx" => Some(IrqRole::Tx(i)),
            "rx" => Some(IrqRole::Rx(i)),
            _ => None,
        };
    }
    // legacy gve: <if>-ntfy-block.<i>
    if rest.starts_with("ntfy-block.") {
        return Some(IrqRole::Other);
    }
    // sfc: <if>-<i>
    if let Some(i) = index(rest) {
        return Some(IrqRole::RxTx(i));
    }
    None
}

/// gve names notification blocks, not queues: with `blocks` blocks, block i < blocks/2 serves
/// tx queue i and the rest serve rx queue i - blocks/2 (gve_main.c `gve_rx_idx_to_ntfy`).
pub fn gve_block(name: &str) -> Option<u32> {
    let base = name.split('@').next()?;
    base.strip_prefix("gve-ntfy-blk")
        .or_else(|| base.rsplit_once("-ntfy-block.").map(|(_, i)| i))
        .and_then(index)
}

pub fn gve_role(block: u32, blocks: u32) -> IrqRole {
    let half = blocks / 2;
    if block < half {
        IrqRole::Tx(block)
    } else {
        IrqRole::Rx(block - half)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(ifname: &'a str, driver: Option<&'a str>, bus: Option<&'a str>) -> NameContext<'a> {
        NameContext {
            ifname,
            driver,
            virtio_index: None,
            bus_id: bus,
        }
    }

    #[test]
    fn virtio_names_use_the_virtio_index_not_the_ifname() {
        let c = NameContext {
            ifname: "eth0",
            driver: Some("virtio_net"),
            virtio_index: Some(2),
            bus_id: Some("0000:00:03.0"),
        };
        assert_eq!(classify("virtio2-input.0", &c), Some(IrqRole::Rx(0)));
        assert_eq!(classify("virtio2-output.3", &c), Some(IrqRole::Tx(3)));
        assert_eq!(classify("virtio2-config", &c), Some(IrqRole::Control));
        assert_eq!(classify("virtio2-virtqueues", &c), Some(IrqRole::AllQueues));
        assert_eq!(classify("virtio1-input.0", &c), None);
    }

    #[test]
    fn vendor_patterns() {
        let mlx = ctx("ens1f0", Some("mlx5_core"), Some("0000:3b:00.0"));
        assert_eq!(
            classify("mlx5_comp7@pci:0000:3b:00.0", &mlx),
            Some(IrqRole::RxTx(7))
        );
        assert_eq!(classify("mlx5_comp7@pci:0000:3b:00.1", &mlx), None);
        assert_eq!(
            classify("mlx5_async0@pci:0000:3b:00.0", &mlx),
            Some(IrqRole::Control)
        );
        assert_eq!(classify("mlx5_comp3", &mlx), Some(IrqRole::RxTx(3)));
        let ixgbe = ctx("eth2", Some("ixgbe"), None);
        assert_eq!(classify("eth2-TxRx-5", &ixgbe), Some(IrqRole::RxTx(5)));
        assert_eq!(classify("eth2-rx-1", &ixgbe), Some(IrqRole::Rx(1)));
        assert_eq!(classify("eth2-tx-1", &ixgbe), Some(IrqRole::Tx(1)));
        assert_eq!(classify("eth2", &ixgbe), Some(IrqRole::Control));
        assert_eq!(classify("eth20-TxRx-5", &ixgbe), None);
        let ice = ctx("ens785f0", Some("ice"), None);
        assert_eq!(
            classify("ice-ens785f0-TxRx-12", &ice),
            Some(IrqRole::RxTx(12))
        );
        assert_eq!(
            classify("ice-ens785f0-fdir-TxRx-0", &ice),
            Some(IrqRole::Other)
        );
        let ena = ctx("eth0", Some("ena"), None);
        assert_eq!(classify("eth0-Tx-Rx-3", &ena), Some(IrqRole::RxTx(3)));
        let sfc = ctx("enp1s0f0", Some("sfc"), None);
        assert_eq!(classify("enp1s0f0-4", &sfc), Some(IrqRole::RxTx(4)));
        let qede = ctx("eth4", Some("qede"), None);
        assert_eq!(classify("eth4-fp-2", &qede), Some(IrqRole::RxTx(2)));
        let xen = ctx("eth0", Some("vif"), None);
        assert_eq!(classify("eth0-q1-rx", &xen), Some(IrqRole::Rx(1)));
        let mana = ctx("eth1", Some("mana"), Some("7870:00:00.0"));
        assert_eq!(
            classify("mana_q4@pci:7870:00:00.0", &mana),
            Some(IrqRole::RxTx(4))
        );
        assert_eq!(classify("other-eth2-TxRx-1", &ixgbe), None);
    }

    #[test]
    fn gve_blocks_split_in_halves() {
        assert_eq!(gve_block("gve-ntfy-blk5@pci:0000:00:04.0"), Some(5));
        assert_eq!(gve_block("eth0-ntfy-block.3"), Some(3));
        assert_eq!(gve_role(1, 8), IrqRole::Tx(1));
        assert_eq!(gve_role(5, 8), IrqRole::Rx(1));
    }
}
