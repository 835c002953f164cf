//! How evenly a device's queues share its work, over one interval and since boot, and how
//! many interrupts the whole platform takes.
//!
//! The measures are the kernel's own (`tools/net/ynl/ynltool`'s `qstats balance`): the
//! coefficient of variation (population standard deviation over the mean) and the normalized
//! spread `2 (max − min) / (max + min)` of the queues' counts. ynltool computes them over the
//! cumulative counters, so a device that was skewed last week and is even now (or the
//! reverse) reads as it was on average since boot; netsteer reports both, the interval's
//! figure beside the since-boot one, so the one that moves can be told from the one that
//! does not.
//!
//! The platform's ceiling: Google's soft-moderation series for the kernel ("net: soft
//! interrupt moderation", 2024–25) measured many SoCs losing 3–4× of their I/O throughput
//! above 1–3 M interrupts/s in total (a 100G NIC of 32 queues went from 50–60 to 92.8 Gbit/s
//! once its interrupts were moderated). [`INTERRUPT_CEILING_PER_S`] is the low end of that
//! range: a rate the platform may already pay for, not a limit it is known to have.

use crate::irqname::IrqRole;
use crate::netdev::QueueType;
use crate::parse::Interrupts;
use crate::sample::{CounterSample, QueueCounters, QueuePackets, Rates};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The low end of the total interrupt rates (1–3 M/s) above which many SoCs were measured
/// losing 3–4× of their I/O throughput (see the module's doc).
pub const INTERRUPT_CEILING_PER_S: f64 = 1.0e6;

/// What a device's queues share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BalanceOf {
    /// Received packets, from the driver's per-queue counters (netdev qstats).
    RxPackets,
    /// Sent packets, likewise.
    TxPackets,
    /// Interrupts of the receive-only vectors (`virtio0-input.N`, `eth0-rx-N`).
    RxInterrupts,
    /// Interrupts of the transmit-only vectors.
    TxInterrupts,
    /// Interrupts of the vectors that serve a receive and a transmit queue (`eth0-TxRx-N`,
    /// mlx5's completion vectors).
    RxTxInterrupts,
}

impl BalanceOf {
    pub fn word(self) -> &'static str {
        match self {
            BalanceOf::RxPackets => "rx packets",
            BalanceOf::TxPackets => "tx packets",
            BalanceOf::RxInterrupts => "rx interrupts",
            BalanceOf::TxInterrupts => "tx interrupts",
            BalanceOf::RxTxInterrupts => "rx/tx interrupts",
        }
    }

    /// The group an IRQ's counts belong to; None for a vector that is not one queue's (one
    /// vector for every queue, control, unrecognised).
    pub fn of_irq(role: IrqRole) -> Option<BalanceOf> {
        match role {
            IrqRole::Rx(_) => Some(BalanceOf::RxInterrupts),
            IrqRole::Tx(_) => Some(BalanceOf::TxInterrupts),
            IrqRole::RxTx(_) | IrqRole::RxAndTx { .. } => Some(BalanceOf::RxTxInterrupts),
            IrqRole::AllQueues | IrqRole::Control | IrqRole::Other => None,
        }
    }
}

/// How evenly one device's queues share one kind of work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueBalance {
    pub nic: String,
    pub of: BalanceOf,
    /// How many queues (or vectors) were counted.
    pub queues: usize,
    /// Their sum: per second over an interval, a count since boot.
    pub total: f64,
    /// Population standard deviation over the mean; None when nothing was counted (an idle
    /// device is not a balanced one).
    pub cv: Option<f64>,
    /// `2 (max − min) / (max + min)`: 0 when even, 2 when one queue has it all and another
    /// none; None when nothing was counted.
    pub spread: Option<f64>,
    /// The queue (`rx-3`) or vector (`rx/tx-3`) with the most, and its share of the total;
    /// None when nothing was counted or every queue counted the same.
    pub busiest: Option<(String, f64)>,
}

/// CV and normalized spread of `values`; None for fewer than two, or a sum of 0.
pub fn cv_and_spread(values: &[f64]) -> Option<(f64, f64)> {
    if values.len() < 2 || values.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return None;
    }
    let n = values.len() as f64;
    let sum: f64 = values.iter().sum();
    if sum <= 0.0 {
        return None;
    }
    let mean = sum / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    let (min, max) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        });
    Some((var.sqrt() / mean, 2.0 * (max - min) / (max + min)))
}

/// One group's balance from its labelled values (two at least; a lone queue has nothing to
/// be balanced with).
fn group(nic: &str, of: BalanceOf, values: &[(String, f64)]) -> Option<QueueBalance> {
    if values.len() < 2 {
        return None;
    }
    let counts: Vec<f64> = values.iter().map(|(_, v)| *v).collect();
    let total: f64 = counts.iter().sum();
    let measures = cv_and_spread(&counts);
    // An even group has no busiest queue (max_by would name the last of the equals).
    let even = measures.is_some_and(|(_, spread)| spread == 0.0);
    let busiest = values
        .iter()
        .filter(|_| total > 0.0 && !even)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(label, v)| (label.clone(), v / total));
    Some(QueueBalance {
        nic: nic.to_string(),
        of,
        queues: values.len(),
        total,
        cv: measures.map(|m| m.0),
        spread: measures.map(|m| m.1),
        busiest,
    })
}

/// Groups labelled values by (device, what) and measures each group.
fn measure(groups: BTreeMap<(String, BalanceOf), Vec<(String, f64)>>) -> Vec<QueueBalance> {
    groups
        .iter()
        .filter_map(|((nic, of), values)| group(nic, *of, values))
        .collect()
}

/// The balance of the devices' queue vectors from per-IRQ figures (rates over an interval, or
/// counts since boot): `irqs` maps an IRQ to its device and role.
pub fn irq_balance(irqs: &IrqRoles, figure: impl Fn(u32) -> Option<f64>) -> Vec<QueueBalance> {
    let mut groups: BTreeMap<(String, BalanceOf), Vec<(String, f64)>> = BTreeMap::new();
    for (irq, (nic, role)) in irqs {
        let Some(of) = BalanceOf::of_irq(*role) else {
            continue;
        };
        // A vector whose counts were not read is left out, not counted as 0.
        let Some(v) = figure(*irq) else { continue };
        groups
            .entry((nic.clone(), of))
            .or_default()
            .push((role.to_string(), v));
    }
    measure(groups)
}

/// The balance of the devices' queues from per-queue packet figures, by (device, rx|tx,
/// queue); queues whose driver gave no packet count are left out.
pub fn packet_balance<'a>(
    queues: impl IntoIterator<Item = ((&'a str, QueueType, u32), Option<f64>)>,
) -> Vec<QueueBalance> {
    let mut groups: BTreeMap<(String, BalanceOf), Vec<(String, f64)>> = BTreeMap::new();
    for ((nic, kind, queue), v) in queues {
        let Some(v) = v else { continue };
        let of = match kind {
            QueueType::Rx => BalanceOf::RxPackets,
            QueueType::Tx => BalanceOf::TxPackets,
        };
        groups
            .entry((nic.to_string(), of))
            .or_default()
            .push((format!("{kind}-{queue}"), v));
    }
    measure(groups)
}

/// The balance since boot: the vectors' counts in `interrupts` and the queues' cumulative
/// packet counters in `queues`.
pub fn since_boot(
    irqs: &IrqRoles,
    interrupts: Option<&Interrupts>,
    queues: &QueueCounters,
) -> Vec<QueueBalance> {
    let mut out = match interrupts {
        Some(ints) => irq_balance(irqs, |irq| {
            let row = ints.irq(irq)?;
            Some(ints.per_cpu(row).map(|(_, n)| n as f64).sum())
        }),
        None => Vec::new(),
    };
    out.extend(packet_balance(queues.iter().map(|((nic, kind, q), s)| {
        ((nic.as_str(), *kind, *q), s.packets.map(|p| p as f64))
    })));
    out.sort_by(|a, b| (&a.nic, a.of).cmp(&(&b.nic, b.of)));
    out
}

/// IRQ → (nic, the vector's role), from the NIC model.
pub type IrqRoles = BTreeMap<u32, (String, IrqRole)>;

/// The roles of every NIC vector the host view names (what `top` rates and labels).
pub fn irq_roles(view: &crate::HostView) -> IrqRoles {
    view.nics
        .iter()
        .flat_map(|n| {
            n.irqs
                .iter()
                .map(move |i| (i.irq, (n.name.clone(), i.role)))
        })
        .collect()
}

/// The roles of the NIC vectors that serve a queue the device has now: what the balance and
/// the queue vectors' interrupt load count.
///
/// A driver keeps a vector for each queue it could have ([`crate::nic::Nic::serves_live_queue`]):
/// counted, an unused vector's zero makes an even device read as "one queue has it all" (a
/// virtio guest with 2 of 4 channels on: spread 2, measured in vm_balance). Unlike the
/// placement checks, of a device whose queues could not be listed no queue's vector counts
/// (a balance over vectors that may be dead is no measure). Vectors for every queue or for
/// control keep their role (they are no queue's and no group counts them).
pub fn live_queue_roles(view: &crate::HostView) -> IrqRoles {
    view.nics
        .iter()
        .flat_map(|n| {
            let has = |role: IrqRole| {
                let queue = role.rx_queue().is_some() || role.tx_queue().is_some();
                !queue || (n.queues_unknown.is_none() && n.serves_live_queue(role))
            };
            n.irqs
                .iter()
                .filter(move |i| has(i.role))
                .map(move |i| (i.irq, (n.name.clone(), i.role)))
        })
        .collect()
}

/// What an interval adds to its rates: the queues' balance (over the interval and since
/// boot) and the platform's interrupt load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IntervalBalance {
    pub balance: Vec<QueueBalance>,
    pub balance_since_boot: Vec<QueueBalance>,
    pub interrupts: InterruptLoad,
}

/// [`interval`] between two counter samples `interval_s` apart, and the queues' packet
/// counters read with them where the devices keep some (`(prev, cur)`; the agent's sampler):
/// the queue vectors' and the queues' rates are computed here.
pub fn between(
    roles: &IrqRoles,
    prev: &CounterSample,
    cur: &CounterSample,
    interval_s: f64,
    queues: Option<(&QueueCounters, &QueueCounters)>,
) -> IntervalBalance {
    let wanted = roles.keys().copied().collect();
    let r = crate::sample::rates(prev, cur, interval_s, Some(&wanted));
    let empty = QueueCounters::new();
    let (prev_q, cur_q) = queues.unwrap_or((&empty, &empty));
    let qp = crate::sample::queue_rates(prev_q, cur_q, interval_s);
    interval(roles, prev, cur, &r, &qp, cur_q)
}

/// The interval's balance and interrupt load, from the two samples, the interval's rates and
/// its per-queue packet rates; `roles` names each NIC IRQ's device and queue.
pub fn interval(
    roles: &IrqRoles,
    prev: &CounterSample,
    cur: &CounterSample,
    r: &Rates,
    qp: &[QueuePackets],
    cur_q: &QueueCounters,
) -> IntervalBalance {
    let irq_rate: BTreeMap<u32, f64> = r.irqs.iter().map(|i| (i.irq, i.total)).collect();
    let mut balance = irq_balance(roles, |irq| irq_rate.get(&irq).copied());
    balance.extend(packet_balance(
        qp.iter()
            .map(|q| ((q.nic.as_str(), q.kind, q.queue), q.packets_per_s)),
    ));
    balance.sort_by(|a, b| (&a.nic, a.of).cmp(&(&b.nic, b.of)));
    let dt = r.interval_s;
    let total_per_s = match (prev.stat.intr_total, cur.stat.intr_total) {
        (Some(a), Some(b)) if b >= a && dt > 0.0 => Some((b - a) as f64 / dt),
        _ => None,
    };
    let (device_per_s, msi_per_s, nic_queues_per_s) = match (&prev.interrupts, &cur.interrupts) {
        (Some(a), Some(b)) => (
            device_rate(a, b, dt),
            msi_rate(a, b, dt),
            Some(
                roles
                    .iter()
                    .filter(|(_, (_, role))| role.carries_packets())
                    .filter_map(|(irq, _)| irq_rate.get(irq))
                    .sum(),
            ),
        ),
        _ => (None, None, None),
    };
    IntervalBalance {
        balance,
        balance_since_boot: since_boot(roles, cur.interrupts.as_ref(), cur_q),
        interrupts: InterruptLoad {
            total_per_s,
            device_per_s,
            msi_per_s,
            nic_queues_per_s,
            ceiling_per_s: INTERRUPT_CEILING_PER_S,
        },
    }
}

/// The platform's interrupts over an interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterruptLoad {
    /// Every interrupt (`/proc/stat` `intr`, its first number: the local timer and IPIs
    /// too); None when it could not be read in both samples.
    pub total_per_s: Option<f64>,
    /// The devices' (every numbered row of `/proc/interrupts`): what the ceiling is about,
    /// and what doctor's `interrupt-rate-high` sums.
    #[serde(default)]
    pub device_per_s: Option<f64>,
    /// The message-signalled ones (`/proc/interrupts` rows whose chip is an MSI domain:
    /// `PCI-MSI`, `IR-PCI-MSIX`, `ITS-MSI`, …), the kind a NIC's queues raise.
    pub msi_per_s: Option<f64>,
    /// The NIC queue vectors' share of them.
    pub nic_queues_per_s: Option<f64>,
    /// [`INTERRUPT_CEILING_PER_S`], carried so a reader of the JSON sees what was compared.
    pub ceiling_per_s: f64,
}

impl InterruptLoad {
    /// The device interrupts against the ceiling: a share, 1.0 at the ceiling. Not the total
    /// of /proc/stat, which counts the local timer and IPIs (the CPUs' own, not what a NIC's
    /// moderation lowers); None when /proc/interrupts was not read twice.
    pub fn of_ceiling(&self) -> Option<f64> {
        self.device_per_s.map(|r| r / self.ceiling_per_s)
    }
}

/// Message-signalled interrupts per second between two readings of /proc/interrupts (see
/// [`rows_rate`]).
pub fn msi_rate(prev: &Interrupts, cur: &Interrupts, interval_s: f64) -> Option<f64> {
    rows_rate(prev, cur, interval_s, |r| is_msi(r.chip.as_deref()))
}

/// Device interrupts per second between two readings of /proc/interrupts: every numbered
/// row (MSI or not), none of the architecture's own (LOC, RES, CAL, TLB, NMI, …), which the
/// CPUs raise for themselves; what doctor's interrupt-rate-high sums too.
pub fn device_rate(prev: &Interrupts, cur: &Interrupts, interval_s: f64) -> Option<f64> {
    rows_rate(prev, cur, interval_s, |r| {
        matches!(r.label, crate::parse::IrqLabel::Number(_))
    })
}

/// Interrupts per second of the rows `keep` takes, between two readings: per row and CPU, as
/// [`crate::sample::rates`] counts them ([`crate::sample::counter_delta`]: a 32-bit wrap
/// counted, a reset not), only CPUs in both readings (a CPU back from offline brings its
/// whole history, which is not this interval's).
fn rows_rate(
    prev: &Interrupts,
    cur: &Interrupts,
    interval_s: f64,
    keep: impl Fn(&crate::parse::IrqRow) -> bool,
) -> Option<f64> {
    if interval_s <= 0.0 {
        return None;
    }
    let before: BTreeMap<&crate::parse::IrqLabel, BTreeMap<u32, u64>> = prev
        .rows
        .iter()
        .map(|r| (&r.label, prev.per_cpu(r).collect()))
        .collect();
    let mut total = 0f64;
    for row in cur.rows.iter().filter(|r| keep(r)) {
        let Some(old) = before.get(&row.label) else {
            continue;
        };
        for (cpu, n) in cur.per_cpu(row) {
            if let Some(&was) = old.get(&cpu) {
                total += crate::sample::counter_delta(was, n) as f64;
            }
        }
    }
    Some(total / interval_s)
}

/// Whether an interrupt chip is an MSI domain (`PCI-MSI`, `PCI-MSIX-0000:…`, `IR-PCI-MSI`,
/// `ITS-MSI`, `DMAR-MSI`).
pub fn is_msi(chip: Option<&str>) -> bool {
    chip.is_some_and(|c| c.contains("MSI"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn cv_and_spread_are_ynltools() {
        // Even: both 0.
        let (cv, sp) = cv_and_spread(&[100.0, 100.0, 100.0, 100.0]).unwrap();
        assert!(close(cv, 0.0) && close(sp, 0.0));
        // One of four has it all: CV √3, spread 2.
        let (cv, sp) = cv_and_spread(&[400.0, 0.0, 0.0, 0.0]).unwrap();
        assert!(close(cv, 3f64.sqrt()), "{cv}");
        assert!(close(sp, 2.0));
        // 300 and 100: mean 200, sd 100 (population), spread 2·200/400.
        let (cv, sp) = cv_and_spread(&[300.0, 100.0]).unwrap();
        assert!(close(cv, 0.5) && close(sp, 1.0), "{cv} {sp}");
        // Nothing counted, one queue, a bad figure: no measure, not "balanced".
        assert_eq!(cv_and_spread(&[0.0, 0.0]), None);
        assert_eq!(cv_and_spread(&[5.0]), None);
        assert_eq!(cv_and_spread(&[5.0, f64::NAN]), None);
    }

    #[test]
    fn vectors_are_grouped_by_device_and_direction() {
        let irqs: BTreeMap<u32, (String, IrqRole)> = [
            (30, ("eth0".to_string(), IrqRole::Rx(0))),
            (31, ("eth0".to_string(), IrqRole::Rx(1))),
            (32, ("eth0".to_string(), IrqRole::Tx(0))),
            (33, ("eth0".to_string(), IrqRole::Tx(1))),
            (34, ("eth0".to_string(), IrqRole::Control)),
            (40, ("eth1".to_string(), IrqRole::RxTx(0))),
            (41, ("eth1".to_string(), IrqRole::RxTx(1))),
            (42, ("eth1".to_string(), IrqRole::RxTx(2))),
        ]
        .into();
        let rates: BTreeMap<u32, f64> = [
            (30, 900.0),
            (31, 100.0),
            (32, 50.0),
            (33, 50.0),
            (34, 1e6),
            (40, 10.0),
            (41, 10.0),
        ]
        .into();
        let b = irq_balance(&irqs, |i| rates.get(&i).copied());
        let of = |nic: &str, of| b.iter().find(|x| x.nic == nic && x.of == of).unwrap();
        let rx = of("eth0", BalanceOf::RxInterrupts);
        assert_eq!((rx.queues, rx.total), (2, 1000.0));
        assert!(close(rx.spread.unwrap(), 1.6));
        assert_eq!(rx.busiest, Some(("rx-0".into(), 0.9)));
        let tx = of("eth0", BalanceOf::TxInterrupts);
        assert!(close(tx.cv.unwrap(), 0.0));
        // The control vector is nobody's queue; irq 42's counts unread: left out, not 0.
        assert_eq!(b.len(), 3, "{b:#?}");
        assert_eq!(of("eth1", BalanceOf::RxTxInterrupts).queues, 2);
    }

    #[test]
    fn an_idle_device_is_not_judged_balanced() {
        let b = packet_balance([
            (("eth0", QueueType::Rx, 0), Some(0.0)),
            (("eth0", QueueType::Rx, 1), Some(0.0)),
            (("eth0", QueueType::Tx, 0), Some(10.0)),
            (("eth0", QueueType::Tx, 1), None),
        ]);
        assert_eq!(b.len(), 1, "{b:#?}");
        assert_eq!(
            (b[0].of, b[0].cv, b[0].busiest.clone()),
            (BalanceOf::RxPackets, None, None)
        );
    }

    #[test]
    fn msi_rows_are_counted_by_their_chip() {
        let text = |n: u64| {
            format!(
                "           CPU0       CPU1\n  24:   {n}   {n}  PCI-MSIX-0000:00:03.0 1-edge  virtio0-input.0\n  25:   {n}   0  IR-PCI-MSI 524288-edge  eth0-TxRx-0\n   1:   {n}   {n}   IO-APIC   1-edge      i8042\nLOC:   {n}   {n}   Local timer interrupts\n"
            )
        };
        let a = crate::parse::parse_interrupts(&text(100)).unwrap();
        let b = crate::parse::parse_interrupts(&text(300)).unwrap();
        // 24: 2 × 200, 25: 200; the IO-APIC and local timer rows are not MSI.
        assert_eq!(msi_rate(&a, &b, 2.0), Some(300.0));
        // Backwards (a counter reset): no rate for the row, never a negative one.
        assert_eq!(msi_rate(&b, &a, 2.0), Some(0.0));
    }
}
