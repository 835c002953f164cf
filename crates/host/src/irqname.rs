//! Which queue an IRQ serves, from the names drivers give their vectors: the one place that
//! knows the naming of every driver netsteer reads (show, doctor, tune, the lab, the tests).
//!
//! Each rule was written from the function in the kernel (6.1) that builds the name:
//!
//! | driver | vector names | built by |
//! |---|---|---|
//! | virtio_net | `virtioN-input.Q`, `virtioN-output.Q`, `virtioN-config`, `virtioN-virtqueues`, INTx `virtioN` | virtio_net.c `virtnet_alloc_queues` ("input.%u"), virtio_pci_common.c `vp_request_msix_vectors` |
//! | igb, igc | `IF-TxRx-Q`, `IF-rx-Q`, `IF-tx-Q`, `IF-unused`; other causes `IF` | igb_main.c / igc_main.c `igb_request_msix` / `igc_request_msix` (`q_vector->name`) |
//! | ixgbe | `IF-TxRx-Q`, `IF-rx-Q`, `IF-tx-Q`; other causes `IF` | ixgbe_main.c `ixgbe_request_msix_irqs` |
//! | e1000e | `IF-rx-0`, `IF-tx-0`, other `IF`; on MSI or INTx the one vector `IF` | e1000e/netdev.c `e1000_request_msix`, `e1000_request_irq` |
//! | e1000, rtl8139, … | the one (often shared INTx) line `IF` | their `request_irq(pdev->irq, …, netdev->name, …)` |
//! | i40e | `i40e-IF-TxRx-Q`, flow director `…:fdir`, misc `i40e-BDF:misc` | i40e_main.c `i40e_vsi_request_irq_msix` |
//! | irdma | RDMA event queues on an ice/i40e function: `irdma-BDF-CEQ-N`, `irdma-BDF-AEQ` (control) | irdma/hw.c `irdma_cfg_ceq_vector` |
//! | ice | `ice-IF-TxRx-Q`; function-wide `ice-BDF:misc`, `ice-BDF:ll_ts` (PTP), `ice-BDF:ctrl-TxRx-0` (flow-director control VSI) | ice_main.c `ice_vsi_req_irq_msix`, `ice_req_irq_msix_misc` |
//! | mlx5 | `mlx5_compQ@pci:BDF` (older: `mlx5_compQ`), `mlx5_async…@pci:BDF` | mlx5/core/pci_irq.c `irq_set_name`, `MLX5_IRQ_NAME_FORMAT_STR` |
//! | mlx4 | `mlx4-E@BDF` (E = EQ index, 1-based; EQ 0 is `mlx4-async@pci:BDF`), the EQs split between the function's ports | mlx4/eq.c `mlx4_assign_eq`, mlx4/main.c `mlx4_enable_msi_x` |
//! | tg3 | by **vector** index V, rings from V − 1: `IF-rx-V`, `IF-txrx-V`, `IF-tx-V` (`IF-tx-0`: ring 0 on vector 0 without TSS), link-only `IF-0`; one vector: `IF` | tg3.c `tg3_request_irq`, `tg3_mem_rx_acquire` ("vector 0 does not handle rx") |
//! | qlcnic | `IF-rx-Q`, the last status ring also completes tx ring 0: `IF-tx-0-rx-Q`; `IF-tx-Q` | qlcnic_main.c `qlcnic_request_irq` |
//! | ena | `IF-Tx-Rx-Q`, management `ena-mgmnt@pci:BDF` | ena_netdev.c `ena_setup_io_intr` |
//! | gve | notification blocks `IF-ntfy-block.B` / `gve-ntfy-blkB@pci:BDF`: tx the lower half, rx the upper | gve_main.c `gve_alloc_notify_blocks`, `gve_rx_idx_to_ntfy` |
//! | bnxt | `IF-TxRx-Q` (shared rings); else `IF-rx-I` then `IF-tx-I` numbered on after the rx rings | bnxt.c `bnxt_setup_msix` |
//! | sfc | `IF-Q` (combined), `IF-rx-Q`, `IF-tx-Q` | sfc/efx_channels.c `efx_get_channel_name` |
//! | hns3 | `hns3-BDF-TxRx-N` with N counting by two (queue N ÷ 2), `hns3-BDF-Rx-N`, `hns3-BDF-Tx-N` | hns3_enet.c `hns3_nic_init_irq` |
//! | vmxnet3 | `IF-rxtx-Q`, `IF-rx-Q`, `IF-tx-Q`, `IF-event-N` | vmxnet3_drv.c `vmxnet3_request_irqs` |
//! | mana | `mana_qQ@pci:BDF`, `mana_hwc@pci:BDF` | mana/gdma_main.c `mana_gd_setup_irqs` |
//! | qede | `IF-fp-Q` | qede_main.c `qede_req_msix_irqs` |
//! | xen-netfront | `IF-qQ-tx`, `IF-qQ-rx` | xen-netfront.c `setup_netfront_split` |
//! | hv_netvsc | none of its own: its channels interrupt through VMBus (`Hyper-V VMbus`, `HYP` rows), so no vector names a queue | hyperv/netvsc.c (no `request_irq`) |
//!
//! A vector of the device whose name matches no rule is [`IrqRole::Other`], shown as
//! "unrecognised vector": never guessed into a queue.

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
    /// One vector for receive queue `rx` and transmit queue `tx` of different numbers
    /// (qlcnic's `eth0-tx-0-rx-3`: the last status ring also completes tx ring 0).
    RxAndTx { rx: u32, tx: u32 },
    /// One vector for every queue (`virtio0-virtqueues`, INTx `virtio0`).
    AllQueues,
    /// Configuration, mailbox, admin or async events: no packets.
    Control,
    /// A vector of the device whose name matches no known pattern: shown as
    /// "unrecognised vector", never guessed into a queue.
    Other,
}

impl IrqRole {
    /// The receive queue this vector serves, if it serves exactly one.
    pub fn rx_queue(self) -> Option<u32> {
        match self {
            IrqRole::Rx(q) | IrqRole::RxTx(q) | IrqRole::RxAndTx { rx: q, .. } => Some(q),
            _ => None,
        }
    }

    /// The transmit queue this vector serves, if it serves exactly one.
    pub fn tx_queue(self) -> Option<u32> {
        match self {
            IrqRole::Tx(q) | IrqRole::RxTx(q) | IrqRole::RxAndTx { tx: q, .. } => Some(q),
            _ => None,
        }
    }

    /// True for a vector that interrupts for received packets (a receive queue, or all).
    pub fn carries_rx(self) -> bool {
        self.rx_queue().is_some() || self == IrqRole::AllQueues
    }

    /// True for a vector that carries packets at all (not control, not unrecognised).
    pub fn carries_packets(self) -> bool {
        !matches!(self, IrqRole::Control | IrqRole::Other)
    }

    /// The queue number a placement keys this vector by: its receive queue (the one whose
    /// NET_RX softirq runs where it fires), else its transmit queue; 0 for a vector of all.
    pub fn placement_queue(self) -> Option<u32> {
        match self {
            IrqRole::AllQueues => Some(0),
            r => r.rx_queue().or(r.tx_queue()),
        }
    }
}

/// The queue label used in reports: `rx-0`, `tx-3`, `rx/tx-5`, `rx-3+tx-0`, `all queues`,
/// `control`, `unrecognised vector`.
impl std::fmt::Display for IrqRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IrqRole::Rx(q) => write!(f, "rx-{q}"),
            IrqRole::Tx(q) => write!(f, "tx-{q}"),
            IrqRole::RxTx(q) => write!(f, "rx/tx-{q}"),
            IrqRole::RxAndTx { rx, tx } => write!(f, "rx-{rx}+tx-{tx}"),
            IrqRole::AllQueues => f.write_str("all queues"),
            IrqRole::Control => f.write_str("control"),
            IrqRole::Other => f.write_str("unrecognised vector"),
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
        // mlx4: "mlx4-E@BDF" names event queue E; EQ 0 is the async EQ, so the completion
        // EQs are 1.. and serve rings 0.. (per port: see `view::split_shared_function`).
        if let Some(i) = base.strip_prefix("mlx4-").and_then(index) {
            return Some(i.checked_sub(1).map_or(IrqRole::Other, IrqRole::RxTx));
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
    // hns3 names the PCI function, not the interface: "hns3-<BDF>-TxRx-<n>", with n counting
    // by two for combined vectors (hns3_nic_init_irq increments txrx_int_idx twice).
    if let (Some(b), Some(rest)) = (ctx.bus_id, name.strip_prefix("hns3-"))
        && let Some(rest) = rest.strip_prefix(b).and_then(|r| r.strip_prefix('-'))
    {
        return Some(match rest.split_once('-') {
            Some(("TxRx", n)) => index(n).map_or(IrqRole::Other, |n| IrqRole::RxTx(n / 2)),
            Some(("Rx", n)) => index(n).map_or(IrqRole::Other, IrqRole::Rx),
            Some(("Tx", n)) => index(n).map_or(IrqRole::Other, IrqRole::Tx),
            _ => IrqRole::Other,
        });
    }
    let ifname = ctx.ifname;
    if ifname.is_empty() {
        return None;
    }
    // i40e and ice name their function-wide vectors after the PCI function, not the
    // interface: `i40e-BDF:misc`, `ice-BDF:misc`, the PTP timestamp vector `ice-BDF:ll_ts` and
    // the flow-director control VSI's `ice-BDF:ctrl-TxRx-0` (all on a real RHEL 9.4 host,
    // fixtures/real/nto-112cpu-ice-i40e): none carries a data queue.
    if let Some(b) = ctx.bus_id
        && name.contains(&format!("{b}:"))
    {
        return Some(IrqRole::Control);
    }
    // irdma (the RDMA half of ice and i40e) takes vectors of the same function for its event
    // queues, `irdma-BDF-CEQ-N` and `irdma-BDF-AEQ` (irdma/hw.c `irdma_cfg_ceq_vector`,
    // `irdma_cfg_aeq_vector`): no packet queue of the netdev.
    if let Some(b) = ctx.bus_id
        && name.starts_with(&format!("irdma-{b}-"))
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
        // The interface's name alone: ixgbe's, igb's and e1000e's "other causes" vector beside
        // queue vectors, or the one vector of a device on MSI or INTx (e1000e, tg3, e1000).
        // `resolve_device` tells them apart once it has seen every vector of the device.
        return Some(IrqRole::Control);
    }
    let rest = rest.strip_prefix('-')?;
    if rest.contains("fdir") {
        return Some(IrqRole::Other);
    }
    let lower = rest.to_ascii_lowercase();
    if ctx.driver == Some("tg3") {
        return Some(tg3_role(&lower));
    }
    // qlcnic: the last status ring also completes tx ring T: "<if>-tx-T-rx-R".
    if let Some(tr) = lower.strip_prefix("tx-")
        && let Some((t, r)) = tr.split_once("-rx-")
        && let (Some(tx), Some(rx)) = (index(t), index(r))
    {
        return Some(IrqRole::RxAndTx { rx, tx });
    }
    for (prefix, role) in [
        ("txrx-", IrqRole::RxTx as fn(u32) -> IrqRole),
        ("tx-rx-", IrqRole::RxTx),
        // vmxnet3_request_irqs: "<if>-rxtx-<i>" when a vector serves both.
        ("rxtx-", IrqRole::RxTx),
        ("fp-", IrqRole::RxTx),
        ("rx-", IrqRole::Rx),
        ("tx-", IrqRole::Tx),
    ] {
        if let Some(i) = lower.strip_prefix(prefix).and_then(index) {
            return Some(role(i));
        }
    }
    // igb/igc: a vector with no ring ("<if>-unused"); vmxnet3's event vector ("<if>-event-N").
    if lower == "unused" || lower.strip_prefix("event-").and_then(index).is_some() {
        return Some(IrqRole::Control);
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

/// The role of a vector named `name` on interface `ifname` driven by `driver`, for readers
/// that see only names (a guest's /proc/interrupts in the lab): virtio_net's vectors carry
/// the `virtioN` index in their own name. Alone, a vector named after the interface is taken
/// as the device's only one; [`classify_named_all`] judges it beside the others.
pub fn classify_named(name: &str, ifname: &str, driver: &str) -> Option<IrqRole> {
    classify_named_all(&[name], ifname, driver)
        .pop()
        .map(|(_, r)| r)
}

/// Every vector in `names` that is `ifname`'s, classified together so that
/// [`resolve_device`] sees them all (igb's vector named `eth0` beside `eth0-rx-0` is its
/// other-causes vector, not a queue).
pub fn classify_named_all<'a>(
    names: &[&'a str],
    ifname: &str,
    driver: &str,
) -> Vec<(&'a str, IrqRole)> {
    let ctx_of = |name: &str| {
        let virtio_index = (driver == "virtio_net")
            .then(|| {
                let rest = name.strip_prefix("virtio")?;
                let end = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                index(&rest[..end])
            })
            .flatten();
        NameContext {
            ifname,
            driver: Some(driver),
            virtio_index,
            bus_id: None,
        }
    };
    let mut out: Vec<(&str, IrqRole)> = names
        .iter()
        .filter_map(|n| Some((*n, classify(n, &ctx_of(n))?)))
        .collect();
    resolve_device(&mut out, &ctx_of(""));
    out
}

/// tg3 numbers its vectors, not its rings (tg3.c `tg3_request_irq` prints `irq_num`, the
/// vector). With several vectors RSS is on and vector 0 serves no receive ring
/// (`tg3_mem_rx_acquire`: "vector 0 does not handle rx"), so vector V serves rx ring V − 1;
/// with TSS vector 0 serves no transmit ring either (`tg3_mem_tx_acquire`), so `txrx-V` and
/// `tx-V` serve tx ring V − 1, while `tx-0` is tx ring 0 on vector 0 without TSS. `IF-0`
/// is vector 0 with neither: link and error events.
fn tg3_role(lower: &str) -> IrqRole {
    let ring = |v: &str| index(v).and_then(|v| v.checked_sub(1));
    if let Some(v) = lower.strip_prefix("txrx-") {
        return ring(v).map_or(IrqRole::Other, IrqRole::RxTx);
    }
    if let Some(v) = lower.strip_prefix("rx-") {
        return ring(v).map_or(IrqRole::Other, IrqRole::Rx);
    }
    if let Some(v) = lower.strip_prefix("tx-") {
        return match index(v) {
            Some(0) => IrqRole::Tx(0),
            _ => ring(v).map_or(IrqRole::Other, IrqRole::Tx),
        };
    }
    if index(lower) == Some(0) {
        return IrqRole::Control;
    }
    IrqRole::Other
}

/// Corrections that need every vector of one device at once, applied after [`classify`]:
/// - a vector named after the interface alone is the device's only packet vector when no
///   other vector serves a queue (e1000e, tg3 and e1000 on MSI or INTx), else "other causes";
/// - bnxt numbers its transmit vectors on after its receive vectors (`bnxt_setup_msix`:
///   "%s-tx-%d" with i ≥ rx_nr_rings), so tx-I serves tx ring I − (number of rx vectors);
/// - gve names notification blocks, not queues: split into tx (lower half) and rx (upper).
pub fn resolve_device(vectors: &mut [(&str, IrqRole)], ctx: &NameContext<'_>) {
    let queue_vectors = vectors
        .iter()
        .filter(|(n, r)| r.carries_packets() && gve_block(n).is_none())
        .count();
    if queue_vectors == 0 {
        for (n, r) in vectors.iter_mut() {
            if *r == IrqRole::Control && *n == ctx.ifname {
                *r = IrqRole::AllQueues;
            }
        }
    }
    if ctx.driver == Some("bnxt_en") {
        let rx = vectors
            .iter()
            .filter(|(_, r)| matches!(r, IrqRole::Rx(_)))
            .count() as u32;
        for (_, r) in vectors.iter_mut() {
            if let IrqRole::Tx(i) = r {
                *r = i.checked_sub(rx).map_or(IrqRole::Other, IrqRole::Tx);
            }
        }
    }
    let blocks: Vec<(usize, u32)> = vectors
        .iter()
        .enumerate()
        .filter_map(|(i, (n, _))| gve_block(n).map(|b| (i, b)))
        .collect();
    let nblocks = blocks.len() as u32;
    for (i, b) in blocks {
        vectors[i].1 = gve_role(b, nblocks);
    }
}

/// gve names notification blocks, not queues: with `blocks` blocks, block i < blocks/2 serves
/// tx queue i and the rest serve rx queue i - blocks/2 (gve_main.c `gve_rx_idx_to_ntfy`).
fn gve_block(name: &str) -> Option<u32> {
    let base = name.split('@').next()?;
    base.strip_prefix("gve-ntfy-blk")
        .or_else(|| base.rsplit_once("-ntfy-block.").map(|(_, i)| i))
        .and_then(index)
}

fn gve_role(block: u32, blocks: u32) -> IrqRole {
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

    /// By names alone (a guest's /proc/interrupts): igb's `eth0` is its other-causes vector
    /// beside its queues, and the only packet vector of an e1000e on MSI.
    #[test]
    fn names_judged_together_tell_an_other_vector_from_a_lone_one() {
        let igb = classify_named_all(
            &[
                "eth0",
                "eth0-rx-0",
                "eth0-tx-0",
                "virtio0-requests",
                "eth1-rx-0",
            ],
            "eth0",
            "igb",
        );
        assert_eq!(
            igb,
            [
                ("eth0", IrqRole::Control),
                ("eth0-rx-0", IrqRole::Rx(0)),
                ("eth0-tx-0", IrqRole::Tx(0))
            ]
        );
        assert_eq!(
            classify_named_all(&["eth0", "ahci"], "eth0", "e1000e"),
            [("eth0", IrqRole::AllQueues)]
        );
        let virtio = classify_named_all(
            &["virtio2-config", "virtio2-input.1", "virtio0-requests"],
            "eth0",
            "virtio_net",
        );
        assert_eq!(virtio[1], ("virtio2-input.1", IrqRole::Rx(1)));
        assert!(
            !virtio
                .iter()
                .any(|(_, r)| r.carries_packets() && r.rx_queue().is_none())
        );
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

    #[test]
    fn ice_function_wide_vectors_are_control_never_a_queue() {
        // As a real ice host names them (fixtures/real/nto-112cpu-ice-i40e).
        let c = ctx("ens3f0", Some("ice"), Some("0000:4b:00.0"));
        for name in [
            "ice-0000:4b:00.0:misc",
            "ice-0000:4b:00.0:ll_ts",
            "ice-0000:4b:00.0:ctrl-TxRx-0",
        ] {
            assert_eq!(classify(name, &c), Some(IrqRole::Control), "{name}");
        }
        assert_eq!(classify("ice-ens3f0-TxRx-7", &c), Some(IrqRole::RxTx(7)));
        assert_eq!(
            classify("irdma-0000:4b:00.0-CEQ-5", &c),
            Some(IrqRole::Control)
        );
        // Another function's are not ours at all.
        assert_eq!(classify("ice-0000:98:00.0:ctrl-TxRx-0", &c), None);
    }
}
