//! The RSS indirection table and hash against where receive interrupts actually go: a table
//! that gives one queue most of the buckets (a hot queue of the table's making), a table the
//! device no longer follows (virtio-net on Linux 6.1 after a queue-count change), and UDP
//! hashed on addresses alone (every flow between two hosts on one queue: igb's default).
//!
//! The interrupt shares come from a live sample only: the table is what the device has now,
//! so averages since boot (an offline tree, or the table changed since) would compare the
//! present table with past traffic.

use super::rps::tune_cmd;
use crate::doctor::model::{Finding, Fix, LoadSource, Severity, Subjects};
use crate::model::ctx::{Ctx, pct, rate};
use crate::model::desired::Profile;
use netsteer_host::ethtool::ethtool_x_args;
use netsteer_host::irqname::IrqRole;
use netsteer_host::nic::Nic;
use std::collections::BTreeMap;

/// Receive interrupts per second, over the device's rx queues, below which the shares say
/// nothing (a handful of ARP and timer packets).
pub const MIN_RX_IRQS_PER_S: f64 = 50.0;
/// The share of the buckets that makes a queue "favoured": 1.5 times an equal share, and a
/// majority of the table.
const SKEW: f64 = 1.5;
/// The share of the receive interrupts a bucketless queue must take before the table is called
/// not followed (queue 0 also takes what RSS does not hash: ARP, other protocols).
const UNFOLLOWED_SHARE: f64 = 0.25;

/// The receive queues in use: the driver's channel count where it says (virtio-net keeps the
/// vectors of every queue pair it could have), else the queues sysfs lists.
fn active_rx_queues(nic: &Nic) -> u32 {
    nic.settings
        .as_ref()
        .and_then(|s| s.channels.known())
        .map(|c| c.combined.unwrap_or(0) + c.rx.unwrap_or(0))
        .filter(|n| *n > 0)
        .unwrap_or(nic.rx_queues.len() as u32)
}

/// Receive interrupts per second of each rx queue in use of `nic` (queues whose vector serves
/// one queue only), over a live sample; None without one or when vectors serve every queue.
fn rx_queue_rates(ctx: &Ctx, nic: &Nic) -> Option<BTreeMap<u32, f64>> {
    if ctx.load?.source != LoadSource::Sampled {
        return None;
    }
    let active = active_rx_queues(nic);
    let mut rates = BTreeMap::new();
    for i in ctx.rx_irqs(nic) {
        match i.role.rx_queue() {
            Some(q) if q >= active => {}
            Some(q) => {
                *rates.entry(q).or_insert(0.0) += ctx.irq_rate(i.irq).unwrap_or(0.0);
            }
            None => return None,
        }
    }
    (rates.len() >= 2).then_some(rates)
}

/// A device's RSS table with its receive interrupts per queue and their total, when it has a
/// table and a live sample shows enough traffic to compare it with.
fn table_and_traffic<'n>(
    ctx: &Ctx,
    nic: &'n Nic,
) -> Option<(&'n netsteer_host::ethtool::Rss, BTreeMap<u32, f64>, f64)> {
    let rss = nic.settings.as_ref()?.rss.known()?;
    let rates = rx_queue_rates(ctx, nic)?;
    let total: f64 = rates.values().sum();
    (!rss.indirection.is_empty() && total >= MIN_RX_IRQS_PER_S).then_some((rss, rates, total))
}

/// Buckets per queue of the table.
fn bucket_counts(table: &[u32]) -> BTreeMap<u32, usize> {
    let mut c = BTreeMap::new();
    for q in table {
        *c.entry(*q).or_insert(0) += 1;
    }
    c
}

/// Queues an n-tuple rule sends traffic to (they take traffic without buckets by design).
fn ntuple_targets(nic: &Nic) -> Vec<u64> {
    nic.settings
        .as_ref()
        .and_then(|s| s.ntuple().ok())
        .map(|rules| rules.iter().filter_map(|r| r.queue).collect())
        .unwrap_or_default()
}

/// How far the busiest rx queue's share of the device's receive interrupts stands above an
/// equal share, in points of the way to taking them all: 0 when every queue takes as much,
/// 100 when one takes everything (so two queues and eleven read alike). None without a live
/// sample that shows enough traffic.
pub fn hot_queue_excess(ctx: &Ctx, nic: &Nic) -> Option<f64> {
    let (_, rates, total) = table_and_traffic(ctx, nic)?;
    let n = rates.len() as f64;
    let hot = rates.values().copied().fold(0.0, f64::max);
    let equal = 1.0 / n;
    Some(((hot / total - equal) / (1.0 - equal) * 100.0).max(0.0))
}

pub fn rss_table_skewed(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some((rss, rates, total)) = table_and_traffic(ctx, nic) else {
            continue;
        };
        let n = rates.len() as f64;
        let counts = bucket_counts(&rss.indirection);
        let len = rss.indirection.len();
        let Some((&hot, &hot_rate)) = rates.iter().max_by(|a, b| a.1.total_cmp(b.1)) else {
            continue;
        };
        let buckets = counts.get(&hot).copied().unwrap_or(0);
        let table_share = buckets as f64 / len as f64;
        let irq_share = hot_rate / total;
        if table_share < (SKEW / n).max(0.5) || irq_share < (SKEW / n).max(0.6) {
            continue;
        }
        let others: Vec<String> = rates
            .iter()
            .filter(|(q, _)| **q != hot)
            .map(|(q, r)| {
                format!(
                    "rx-{q}: {} bucket(s), {}",
                    counts.get(q).copied().unwrap_or(0),
                    pct(r * 100.0 / total)
                )
            })
            .collect();
        let nq = rates.len();
        out.push(Finding {
            id: "rss-table-skewed".into(),
            severity: Severity::Warning,
            title: format!(
                "{}: the RSS table sends {} of flows to rx-{hot}, which takes {} of the receive interrupts",
                nic.name,
                pct(table_share * 100.0),
                pct(irq_share * 100.0)
            ),
            evidence: vec![
                format!(
                    "{}: rx-{hot} holds {buckets} of the {len} indirection table entries (an equal share is {:.0})",
                    nic.name,
                    len as f64 / n
                ),
                format!(
                    "rx-{hot} took {} receive interrupts/s of {} on {nq} rx queues ({})",
                    rate(hot_rate),
                    rate(total),
                    pct(irq_share * 100.0)
                ),
                format!("the others: {}", others.join("; ")),
            ],
            why: "RSS picks a flow's queue by indexing the indirection table with the flow hash; a queue holding most entries gets most flows, and its one CPU does their interrupt and protocol work while the other queues' CPUs idle (a table left over from a reservation, or written with weights for another queue count).".into(),
            fix: Fix {
                summary: format!("share the table equally over the {nq} rx queues"),
                steps: vec![format!("ethtool -X {} equal {nq}", nic.name)],
                tune: Some(tune_cmd(ctx, Profile::Balanced, &nic.name)),
            },
            subjects: Subjects {
                devices: vec![nic.name.clone()],
                queues: vec![format!("{}/rx-{hot}", nic.name)],
                ..Default::default()
            },
        });
    }
    out
}

pub fn rss_table_not_followed(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some((rss, rates, total)) = table_and_traffic(ctx, nic) else {
            continue;
        };
        let counts = bucket_counts(&rss.indirection);
        let steered = ntuple_targets(nic);
        let strays: Vec<(u32, f64)> = rates
            .iter()
            .filter(|(q, r)| {
                !counts.contains_key(q)
                    && !steered.contains(&u64::from(**q))
                    && **r / total >= UNFOLLOWED_SHARE
            })
            .map(|(q, r)| (*q, *r))
            .collect();
        if strays.is_empty() {
            continue;
        }
        let len = rss.indirection.len();
        let mut evidence: Vec<String> = strays
            .iter()
            .map(|(q, r)| {
                format!(
                    "{}: rx-{q} has none of the {len} indirection table entries, yet took {} receive interrupts/s ({} of {})",
                    nic.name,
                    rate(*r),
                    pct(r * 100.0 / total),
                    rate(total)
                )
            })
            .collect();
        let table: Vec<String> = counts.iter().map(|(q, c)| format!("rx-{q} {c}")).collect();
        evidence.push(format!(
            "the table as the driver reports it: {}",
            table.join(", ")
        ));
        if steered.is_empty() {
            evidence.push("no n-tuple rule steers traffic to those queues".into());
        }
        let mut steps = Vec::new();
        match ethtool_x_args(&rss.indirection, rates.len() as u32) {
            Some(args) => steps.push(format!("ethtool -X {} {args}", nic.name)),
            None => steps.push(format!(
                "netsteer tune apply --profile none --set 'nic/{}/rss/indirection={}'",
                nic.name,
                rss.indirection
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        }
        out.push(Finding {
            id: "rss-table-not-followed".into(),
            severity: Severity::Warning,
            title: format!(
                "{}: traffic does not follow the RSS table the driver reports",
                nic.name
            ),
            evidence,
            why: "The kernel reports its own copy of the table; the device may have dropped it. virtio-net on Linux 6.1 under QEMU loses RSS when the queue count changes (QEMU turns RSS off on the queue-pairs command, while the driver keeps its copy and does not send it again), and a device reset can do the same elsewhere. Until the table is written again, flows land on queues the table keeps empty.".into(),
            fix: Fix {
                summary: "write the same table again, so the device has it (tune does this after every channel change)".into(),
                steps,
                tune: None,
            },
            subjects: Subjects {
                devices: vec![nic.name.clone()],
                queues: strays.iter().map(|(q, _)| format!("{}/rx-{q}", nic.name)).collect(),
                ..Default::default()
            },
        });
    }
    out
}

pub fn rss_hash_no_ports(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let Some(s) = nic.settings.as_ref() else {
            continue;
        };
        let Ok(hash) = s.flow_hash() else {
            continue;
        };
        let rx_queues = ctx
            .rx_irqs(nic)
            .iter()
            .filter(|i| matches!(i.role, IrqRole::Rx(_) | IrqRole::RxTx(_)))
            .count();
        let has_table = s.rss.known().is_some_and(|r| !r.indirection.is_empty());
        if rx_queues < 2 || !has_table {
            continue;
        }
        let no_ports: Vec<&str> = ["udp4", "udp6"]
            .into_iter()
            .filter(|t| {
                hash.get(*t)
                    .is_some_and(|f| !f.contains('f') || !f.contains('n'))
            })
            .collect();
        if no_ports.is_empty() {
            continue;
        }
        let fields: Vec<String> = no_ports
            .iter()
            .map(|t| format!("{t} {}", hash[*t]))
            .collect();
        let mut evidence = vec![format!(
            "{}: RSS hashes {} (ethtool -n {} rx-flow-hash): no port bytes (f, n)",
            nic.name,
            fields.join(", "),
            nic.name
        )];
        // With a live sample: is (IPv4) UDP arriving, all on one queue, and not because the
        // table sends everything there (rss-table-skewed says that)? Then it is a warning.
        let mut severity = Severity::Info;
        if let (true, Some(rates), Some(udp), Some(rss)) = (
            no_ports.contains(&"udp4"),
            rx_queue_rates(ctx, nic),
            ctx.load.and_then(|l| l.net.udp_in),
            s.rss.known(),
        ) {
            let total: f64 = rates.values().sum();
            if let Some((q, r)) = rates.iter().max_by(|a, b| a.1.total_cmp(b.1))
                && total >= MIN_RX_IRQS_PER_S
                && udp >= MIN_RX_IRQS_PER_S
            {
                let buckets = rss.indirection.iter().filter(|x| *x == q).count();
                let table_share = buckets as f64 / rss.indirection.len().max(1) as f64;
                evidence.push(format!(
                    "{} UDP datagrams/s delivered; rx-{q} took {} of the receive interrupts with {buckets} of the {} table entries",
                    rate(udp),
                    pct(r * 100.0 / total),
                    rss.indirection.len()
                ));
                if r / total >= 0.8 && table_share < (SKEW / rates.len() as f64).max(0.5) {
                    severity = Severity::Warning;
                }
            }
        }
        out.push(Finding {
            id: "rss-hash-no-ports".into(),
            severity,
            title: format!(
                "{}: UDP is hashed on addresses only, so all UDP between two hosts takes one of its {rx_queues} queues",
                nic.name
            ),
            evidence,
            why: "RSS spreads flows only over what it hashes: without the ports every UDP flow between the same two addresses (a DNS resolver and its upstream, a QUIC or memcached client pool) gets the same queue and CPU. Drivers default to this (igb, ixgbe) because fragments of a datagram carry no ports; hashing the ports sends a fragmented datagram's pieces to different queues, so keep it where UDP is not fragmented.".into(),
            fix: Fix {
                summary: "hash UDP on addresses and ports".into(),
                steps: no_ports
                    .iter()
                    .map(|t| format!("ethtool -N {} rx-flow-hash {t} sdfn", nic.name))
                    .collect(),
                tune: Some(tune_cmd(ctx, Profile::Throughput, &nic.name)),
            },
            subjects: Subjects::device(&nic.name),
        });
    }
    out
}
