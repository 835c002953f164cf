//! The reflexes that take a doctor finding's fix: `rps` (doctor's `softirq-hot-cpu`) and
//! `rss` (doctor's `rss-table-skewed`), each proposing the planner's items for the device.

use super::signals::Signals;
use super::{Proposal, Reflex};
use crate::doctor::shared::{hot_queue_excess, planned, rps_off, spreading_profile};
use crate::doctor::{Ctx, diagnose};
use crate::model::desired::{Action, Item, ItemKind, Profile, Target};
use crate::model::knob::{ItemId, QueueFile};
use netsteer_host::nic::Nic;

/// The reflexes that take a doctor finding's fix, from one diagnosis of the interval.
pub(super) fn doctor_reflexes(s: &Signals) -> Vec<Proposal> {
    let report = diagnose(s.view, Some(s.load), s.cfg.goal, None);
    let ctx = Ctx::new(s.view, Some(s.load), s.cfg.goal, None);
    let mut out = rps(s, &ctx, &report);
    out.extend(rss(&ctx, &report));
    out
}

/// doctor's `softirq-hot-cpu` on a device with RPS off: the RPS/RFS the planner makes.
fn rps(s: &Signals, ctx: &Ctx, report: &crate::doctor::Report) -> Vec<Proposal> {
    let mut out = Vec::new();
    for f in report.findings.iter().filter(|f| f.id == "softirq-hot-cpu") {
        let hot = f
            .subjects
            .cpus
            .iter()
            .filter_map(|c| ctx.cpu(*c))
            .map(|c| c.soft)
            .fold(0.0, f64::max);
        for dev in &f.subjects.devices {
            let Some(nic) = ctx.view.nic(dev) else {
                continue;
            };
            if !rps_off(nic) {
                continue;
            }
            let p = planned(
                ctx,
                nic,
                spreading_profile(ctx),
                &[ItemKind::Rps, ItemKind::RfsTable, ItemKind::RfsFlowCnt],
            );
            let items = changes_of(&p.items, |t| t.path().is_some());
            if items.is_empty() {
                continue;
            }
            let mut evidence = vec![f.title.clone()];
            evidence.extend(f.evidence.iter().take(3).cloned());
            let cause = caused_by(ctx, nic, &f.subjects.cpus, s.cfg.min_rate);
            evidence.push(match &cause {
                Ok(line) | Err(line) => line.clone(),
            });
            // Named as the device's RPS items are (`rps/DEV`).
            let id = ItemId::Queues {
                dev: dev.clone(),
                file: QueueFile::RpsCpus,
            };
            let mut p = Proposal::planned(Reflex::Rps, &id.to_string(), evidence, items, hot);
            p.declined = cause.err();
            out.push(p);
        }
    }
    out
}

/// doctor's `rss-table-skewed`: the planner's equal table for the device (the table item
/// only; the balanced profile's other NIC items are not this reflex's). The guard watches
/// how far the hot queue's share of the receive interrupts stands above an equal share,
/// in points (0 when equal, 100 when it takes them all), so that on two queues the
/// signal falls as far as on eleven.
fn rss(ctx: &Ctx, report: &crate::doctor::Report) -> Vec<Proposal> {
    let mut out = Vec::new();
    for f in report
        .findings
        .iter()
        .filter(|f| f.id == "rss-table-skewed")
    {
        for dev in &f.subjects.devices {
            let Some(nic) = ctx.view.nic(dev) else {
                continue;
            };
            let Some(skew) = hot_queue_excess(ctx, nic) else {
                continue;
            };
            let p = planned(ctx, nic, Profile::Balanced, &[ItemKind::Rss]);
            let items = changes_of(&p.items, |t| {
                matches!(
                    t,
                    Target::Nic {
                        knob: netsteer_host::ethtool::NicKnob::RssIndirection,
                        ..
                    }
                )
            });
            let mut evidence = vec![f.title.clone()];
            evidence.extend(f.evidence.iter().cloned());
            out.push(Proposal::planned(
                Reflex::Rss,
                &format!("rss/{dev}"),
                evidence,
                items,
                skew,
            ));
        }
    }
    out
}

/// Of the packets the hot CPUs processed, the share a device must have received itself for
/// its RPS to be the answer (GRO merges packets, so softnet counts fewer than the device).
const CAUSE_SHARE: f64 = 0.5;
/// Fewer packets a second than this explain no CPU's NET_RX work.
const CAUSE_MIN_PPS: f64 = 100.0;

/// Whether `nic`'s own packets brought the NET_RX work on the `hot` CPUs over the interval:
/// the line that says so, or (as the error) why not. doctor names a device whose receive
/// IRQs are *routed* to a hot CPU; that is not evidence that its packets arrived. Issue 77: a
/// UDP flood on veths in other namespaces, and `watch --apply` in the root namespace gave
/// the host's eth0 RPS and RFS on "CPU 1 takes IRQ 38 (eth0 rx-0)" while eth0 received 0
/// packets and CPU 1 processed 476k–618k a second. So the device must have received (its
/// `rx_packets` over the interval, `/proc/net/dev`, the `dev_get_stats()` counters that
/// /sys/class/net/DEV/statistics/rx_packets shows too) at least `CAUSE_SHARE` of the
/// packets the hot CPUs processed (softnet_stat column 1), and its receive IRQs must have
/// fired on a hot CPU (`/proc/interrupts` over the interval).
fn caused_by(ctx: &Ctx, nic: &Nic, hot: &[u32], min_rate: f64) -> Result<String, String> {
    let Some(load) = ctx.load else {
        return Err("no load to say whose packets these are".into());
    };
    let dev = &nic.name;
    let hot_text = match hot {
        [c] => format!("CPU {c}"),
        _ => format!(
            "CPUs {}",
            hot.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let irqs = ctx.rx_irqs(nic);
    let irq_text = match irqs.as_slice() {
        [i] => format!("IRQ {}", i.irq),
        _ => format!(
            "IRQs {}",
            irqs.iter()
                .map(|i| i.irq.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let on_hot: f64 = irqs
        .iter()
        .filter_map(|i| load.cpu.irqs.iter().find(|r| r.irq == i.irq))
        .map(|r| hot.iter().filter_map(|c| r.per_cpu.get(c)).sum::<f64>())
        .sum();
    let taken: Option<f64> = hot
        .iter()
        .map(|c| ctx.cpu(*c).and_then(|r| r.processed))
        .sum();
    let Some(received) = load.net.device(dev).map(|d| d.rx_packets) else {
        return Err(format!(
            "{dev}'s packets were not counted over the interval (no {dev} in /proc/net/dev): nothing says its packets brought {hot_text}'s NET_RX work; its RPS is left as it is"
        ));
    };
    let line = format!(
        "{dev} received {received:.0} packets/s and its receive {irq_text} fired {on_hot:.0} times/s on {hot_text}; {hot_text} processed {} packets/s (softnet_stat column 1)",
        taken.map_or_else(|| "an unknown number of".into(), |t| format!("{t:.0}"))
    );
    let need = taken.map_or(CAUSE_MIN_PPS, |t| (t * CAUSE_SHARE).max(CAUSE_MIN_PPS));
    if received >= need && on_hot >= min_rate {
        return Ok(line);
    }
    Err(format!(
        "{line}: {hot_text}'s NET_RX work is not {dev}'s packets (they come from elsewhere: another device, a namespace's veth, a local sender, RPS from another CPU), so {dev}'s RPS is left as it is"
    ))
}

/// The items of a plan that change a knob `which` takes: what the reflex hands the tuner.
fn changes_of(items: &[Item], which: impl Fn(&Target) -> bool) -> Vec<Item> {
    items
        .iter()
        .filter(|i| i.action == Action::Change && which(&i.target))
        .cloned()
        .collect()
}
