//! Counter samples and per-interval rates in mpstat's semantics (sysstat `mpstat -P ALL`,
//! `mpstat -I SCPU`) plus softnet and per-IRQ rates.

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::fs::HostFs;
use crate::parse::{
    Interrupts, NetDevStats, ProcStat, Snmp, Softirqs, SoftnetRow, parse_interrupts, parse_net_dev,
    parse_proc_stat, parse_snmp, parse_softirqs, parse_softnet_stat,
};
use crate::topology::read_list;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The counters of one moment. Only /proc/stat is required; the other files may be missing
/// (a partial tree, a locked-down container) and their rates are then absent.
#[derive(Debug, Clone, Default)]
pub struct CounterSample {
    pub stat: ProcStat,
    pub softirqs: Option<Softirqs>,
    pub interrupts: Option<Interrupts>,
    /// Softnet rows keyed by CPU id.
    pub softnet: BTreeMap<u32, SoftnetRow>,
    /// Why optional files are missing.
    pub problems: Vec<String>,
}

/// Parses the counter files from their texts (pure: the benchmark and tests feed text).
pub fn parse_sample(
    stat: &str,
    softirqs: Option<&str>,
    interrupts: Option<&str>,
    softnet: Option<&str>,
    online: Option<&CpuSet>,
) -> std::result::Result<CounterSample, crate::error::ParseError> {
    let stat = parse_proc_stat(stat)?;
    let mut problems = Vec::new();
    let softirqs = softirqs.and_then(|t| {
        parse_softirqs(t)
            .map_err(|e| problems.push(format!("/proc/softirqs: {e}")))
            .ok()
    });
    let interrupts = interrupts.and_then(|t| {
        parse_interrupts(t)
            .map_err(|e| problems.push(format!("/proc/interrupts: {e}")))
            .ok()
    });
    let softnet = softnet
        .and_then(|t| {
            parse_softnet_stat(t)
                .map_err(|e| problems.push(format!("/proc/net/softnet_stat: {e}")))
                .ok()
        })
        .map(|rows| {
            let online = online
                .cloned()
                .unwrap_or_else(|| stat.cpus.keys().copied().collect());
            let ids = SoftnetRow::resolve_cpus(&rows, Some(&online));
            ids.into_iter().zip(rows).collect()
        })
        .unwrap_or_default();
    Ok(CounterSample {
        stat,
        softirqs,
        interrupts,
        softnet,
        problems,
    })
}

impl CounterSample {
    /// The same CPUs, IRQs and vectors with every counter at zero: the state at boot. Rates from
    /// it to a sample are since-boot averages, which is all an offline tree can tell.
    pub fn boot_baseline(&self) -> CounterSample {
        let mut zero = self.clone();
        for t in zero.stat.cpus.values_mut() {
            *t = Default::default();
        }
        zero.stat.total = Default::default();
        if let Some(s) = zero.softirqs.as_mut() {
            for counts in s.rows.values_mut() {
                counts.iter_mut().for_each(|c| *c = 0);
            }
        }
        if let Some(i) = zero.interrupts.as_mut() {
            for row in &mut i.rows {
                row.counts.iter_mut().for_each(|c| *c = 0);
            }
        }
        for row in zero.softnet.values_mut() {
            let keep = (row.line, row.columns, row.cpu_index);
            *row = SoftnetRow {
                line: keep.0,
                columns: keep.1,
                cpu_index: keep.2,
                received_rps: row.received_rps.map(|_| 0),
                flow_limit_count: row.flow_limit_count.map(|_| 0),
                backlog_len: row.backlog_len.map(|_| 0),
                ..Default::default()
            };
        }
        zero
    }

    /// Seconds since boot as /proc/stat itself counts them: the busiest CPU's ticks at USER_HZ
    /// (100 on every architecture Linux exports to user space, `include/asm-generic/param.h`).
    /// Used when /proc/uptime is missing from a tree.
    pub fn uptime_from_ticks(&self) -> Option<f64> {
        let ticks = self.stat.cpus.values().map(|t| t.total()).max()?;
        (ticks > 0).then(|| ticks as f64 / 100.0)
    }
}

/// Per-interface and per-protocol counters of one network namespace (/proc/net/dev and
/// /proc/net/snmp are per namespace, unlike the per-CPU files above).
#[derive(Debug, Clone, Default)]
pub struct NetCounters {
    pub devices: BTreeMap<String, NetDevStats>,
    pub snmp: Option<Snmp>,
    pub problems: Vec<String>,
}

impl NetCounters {
    /// Every counter at zero (see [`CounterSample::boot_baseline`]).
    pub fn boot_baseline(&self) -> NetCounters {
        NetCounters {
            devices: self
                .devices
                .keys()
                .map(|k| {
                    (
                        k.clone(),
                        NetDevStats {
                            name: k.clone(),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            snmp: self.snmp.as_ref().map(|s| Snmp {
                tables: s
                    .tables
                    .iter()
                    .map(|(p, t)| (p.clone(), t.keys().map(|k| (k.clone(), 0)).collect()))
                    .collect(),
            }),
            problems: Vec::new(),
        }
    }
}

pub fn read_net_counters(fs: &HostFs) -> NetCounters {
    let mut problems = Vec::new();
    let devices = fs
        .read_parsed("/proc/net/dev", parse_net_dev)
        .map(|v| v.into_iter().map(|d| (d.name.clone(), d)).collect())
        .map_err(|e| problems.push(e.to_string()))
        .unwrap_or_default();
    let snmp = fs
        .read_parsed("/proc/net/snmp", parse_snmp)
        .map_err(|e| problems.push(e.to_string()))
        .ok();
    NetCounters {
        devices,
        snmp,
        problems,
    }
}

/// One interface's traffic over an interval, per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceRates {
    pub name: String,
    pub rx_packets: f64,
    pub rx_bytes: f64,
    /// Dropped by the driver or stack before a socket (ring full on many drivers, no buffer).
    pub rx_drop: f64,
    /// FIFO/overrun errors: the NIC ran out of ring descriptors (`rx_missed_errors` on Intel).
    pub rx_fifo: f64,
    pub tx_packets: f64,
    pub tx_drop: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetRates {
    pub devices: Vec<DeviceRates>,
    /// UDP datagrams delivered to sockets, and dropped because a socket's buffer was full.
    pub udp_in: Option<f64>,
    pub udp_rcvbuf_errors: Option<f64>,
}

impl NetRates {
    pub fn device(&self, name: &str) -> Option<&DeviceRates> {
        self.devices.iter().find(|d| d.name == name)
    }
}

/// Rates of the namespace counters between two reads `interval_s` apart. These counters are
/// 64-bit (`rtnl_link_stats64`, SNMP mibs), so a decrease is a reset, not a wrap.
pub fn net_rates(prev: &NetCounters, cur: &NetCounters, interval_s: f64) -> NetRates {
    let per_s = |a: u64, b: u64| {
        if interval_s > 0.0 {
            b.saturating_sub(a) as f64 / interval_s
        } else {
            0.0
        }
    };
    let devices = cur
        .devices
        .values()
        .filter_map(|d| {
            let p = prev.devices.get(&d.name)?;
            Some(DeviceRates {
                name: d.name.clone(),
                rx_packets: per_s(p.rx_packets, d.rx_packets),
                rx_bytes: per_s(p.rx_bytes, d.rx_bytes),
                rx_drop: per_s(p.rx_drop, d.rx_drop),
                rx_fifo: per_s(p.rx_fifo, d.rx_fifo),
                tx_packets: per_s(p.tx_packets, d.tx_packets),
                tx_drop: per_s(p.tx_drop, d.tx_drop),
            })
        })
        .collect();
    let udp = |name: &str| {
        let a = prev.snmp.as_ref()?.get("Udp", name)?;
        let b = cur.snmp.as_ref()?.get("Udp", name)?;
        Some(per_s(a.max(0) as u64, b.max(0) as u64))
    };
    NetRates {
        devices,
        udp_in: udp("InDatagrams"),
        udp_rcvbuf_errors: udp("RcvbufErrors"),
    }
}

/// Reads one sample from the host.
pub fn read_sample(fs: &HostFs) -> Result<CounterSample> {
    let stat = fs.read("/proc/stat")?;
    let mut problems = Vec::new();
    let mut opt = |path: &str| fs.read(path).map_err(|e| problems.push(e.to_string())).ok();
    let softirqs = opt("/proc/softirqs");
    let interrupts = opt("/proc/interrupts");
    let softnet = opt("/proc/net/softnet_stat");
    let online = read_list(fs, "/sys/devices/system/cpu/online", None).ok();
    let mut sample = parse_sample(
        &stat,
        softirqs.as_deref(),
        interrupts.as_deref(),
        softnet.as_deref(),
        online.as_ref(),
    )
    .map_err(|source| crate::error::HostError::Parse {
        path: "/proc/stat".into(),
        source,
    })?;
    problems.append(&mut sample.problems);
    sample.problems = problems;
    Ok(sample)
}

/// Difference of a counter that the kernel keeps as a 32-bit `unsigned int` (softnet columns,
/// per-CPU IRQ and softirq counts) or 64-bit: a decrease from the upper half of the 32-bit
/// range is a wrap, anything else a reset (counted as zero rather than as a huge negative
/// rate). A counter that restarts from 0 below 2^31 (a driver freeing and reallocating its
/// vectors on `ethtool -L` or a reset, an IRQ number given to another device) is no wrap:
/// read as one it would add about 4.3 G to the interval.
pub fn counter_delta(prev: u64, cur: u64) -> u64 {
    if cur >= prev {
        cur - prev
    } else if (1u64 << 31..=u64::from(u32::MAX)).contains(&prev) {
        cur + (1u64 << 32) - prev
    } else {
        0
    }
}

/// One CPU's activity over an interval. Percentages as mpstat prints them; rates per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuRates {
    pub cpu: u32,
    pub usr: f64,
    pub nice: f64,
    pub sys: f64,
    pub iowait: f64,
    pub irq: f64,
    pub soft: f64,
    pub steal: f64,
    pub guest: f64,
    pub gnice: f64,
    pub idle: f64,
    /// NET_RX / NET_TX softirq handler runs per second (/proc/softirqs).
    pub net_rx: Option<f64>,
    pub net_tx: Option<f64>,
    /// Softnet: packets processed, dropped (backlog/flow limit), budget squeezes, RPS IPIs
    /// received, flow-limit drops — per second.
    pub processed: Option<f64>,
    pub dropped: Option<f64>,
    pub squeezed: Option<f64>,
    pub rps_ipi: Option<f64>,
    pub flow_limit: Option<f64>,
    /// Backlog length at the end of the interval (5.10+).
    pub backlog_len: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IrqRate {
    pub irq: u32,
    pub name: String,
    /// Interrupts per second by CPU (CPUs with none omitted).
    pub per_cpu: BTreeMap<u32, f64>,
    pub total: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    pub interval_s: f64,
    pub cpus: Vec<CpuRates>,
    /// CPUs that were in the previous sample but not in this one (went offline).
    pub went_offline: Vec<u32>,
    pub irqs: Vec<IrqRate>,
}

/// Which NIC queue an IRQ serves, for labelling IRQ rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueRate {
    pub nic: String,
    /// `rx-0`, `tx-3`, `rx/tx-5`, `all queues`, `control`.
    pub queue: String,
    pub irq: u32,
    pub name: String,
    /// Interrupts per second by CPU id (CPUs with none omitted).
    pub per_cpu: BTreeMap<u32, f64>,
    pub total: f64,
}

impl QueueRate {
    /// `CPU9:1234 CPU3:10`: interrupts per second on each CPU that took any.
    pub fn cpus_text(&self) -> String {
        let on: Vec<String> = self
            .per_cpu
            .iter()
            .map(|(cpu, r)| format!("CPU{cpu}:{r:.0}"))
            .collect();
        on.join(" ")
    }
}

/// One JSON Lines message of `netsteer top --json` (docs/json.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopInterval {
    /// Always `"interval"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Wall-clock end of the interval, milliseconds since the Unix epoch.
    pub time_unix_ms: u64,
    /// Measured length of the interval (monotonic clock), seconds.
    pub interval_s: f64,
    pub cpus: Vec<CpuRates>,
    pub queues: Vec<QueueRate>,
    pub went_offline: Vec<u32>,
    /// Packets and bytes per second of each queue whose driver keeps per-queue counters
    /// (netdev netlink qstats); empty where none does (veth, loopback).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_packets: Vec<QueuePackets>,
    /// Each receive page pool's pages over this interval (netdev netlink page-pool-stats-get;
    /// empty where no device registers a pool or the kernel keeps no counters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub page_pools: Vec<PoolRate>,
    /// How evenly each device's queues shared its interrupts and packets over this interval
    /// (a device with fewer than two queue vectors, or no per-queue counters, has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balance: Vec<crate::balance::QueueBalance>,
    /// The same measures over the counters since boot (what `ynltool qstats balance` shows):
    /// beside the interval's, the figure that does not move when the load changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balance_since_boot: Vec<crate::balance::QueueBalance>,
    /// The platform's interrupt rate over this interval, against the ceiling it may hit.
    #[serde(default)]
    pub interrupts: crate::balance::InterruptLoad,
    /// Files that could not be read this interval.
    pub problems: Vec<String>,
}

/// One queue's traffic over an interval, from its driver's counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuePackets {
    pub nic: String,
    #[serde(rename = "type")]
    pub kind: crate::netdev::QueueType,
    pub queue: u32,
    pub packets_per_s: Option<f64>,
    pub bytes_per_s: Option<f64>,
}

/// One page pool's pages per second over an interval, from its counters
/// ([`crate::netdev::PagePoolStats`]): a counter absent in either read, or one that went
/// back, gives no rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRate {
    pub nic: String,
    pub pool: u64,
    pub napi_id: Option<u32>,
    /// The receive queues its NAPI serves.
    pub rx_queues: Vec<u32>,
    /// Pages the pool holds from the page allocator now (taken and not released: in use, in
    /// flight, and in its own cache and ring).
    pub inflight: Option<u64>,
    /// Pages handed out (fast, refill, slow and high-order allocations).
    pub handed_per_s: Option<f64>,
    /// Calls to the page allocator (each refills the cache with up to 64 pages).
    pub slow_per_s: Option<f64>,
    /// Pages that came back and were kept (cache or ring, less the ring's pages waived).
    pub kept_per_s: Option<f64>,
    /// Pages that came back and were released to the page allocator (ring full, still
    /// referenced, another NUMA node).
    pub freed_per_s: Option<f64>,
}

/// Every pool of one read, by id.
pub type PoolCounters = BTreeMap<u64, crate::netdev::PagePool>;

/// Rates between two reads of the pools of the named devices (`ifindex` → name); a pool in
/// only one read (created or destroyed meanwhile) or of a device not named gives none.
pub fn pool_rates(
    prev: &PoolCounters,
    cur: &PoolCounters,
    names: &BTreeMap<u32, String>,
    queues: &BTreeMap<(String, u32), u32>,
    interval_s: f64,
) -> Vec<PoolRate> {
    use crate::netdev::PagePoolStats;
    let rate = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b >= a && interval_s > 0.0 => Some((b - a) as f64 / interval_s),
        _ => None,
    };
    cur.values()
        .filter_map(|c| {
            let p = prev.get(&c.id)?;
            let nic = names.get(&c.ifindex?)?.clone();
            let of = |f: fn(&PagePoolStats) -> Option<u64>| {
                rate(p.stats.as_ref().and_then(f), c.stats.as_ref().and_then(f))
            };
            let rx_queues = c
                .napi_id
                .and_then(|n| queues.get(&(nic.clone(), n)))
                .into_iter()
                .copied()
                .collect();
            Some(PoolRate {
                pool: c.id,
                napi_id: c.napi_id,
                rx_queues,
                inflight: c.inflight,
                handed_per_s: of(PagePoolStats::allocated),
                slow_per_s: of(PagePoolStats::slow),
                kept_per_s: of(PagePoolStats::kept),
                freed_per_s: of(PagePoolStats::freed),
                nic,
            })
        })
        .collect()
}

/// Per-queue counters of one moment, by (device, rx|tx, queue).
pub type QueueCounters =
    BTreeMap<(String, crate::netdev::QueueType, u32), crate::netdev::QueueStats>;

/// Rates between two readings of the queues' counters. A queue in only one reading (channels
/// changed) or a counter that went backwards (a driver reset) gives no rate, not a wrong one.
pub fn queue_rates(
    prev: &QueueCounters,
    cur: &QueueCounters,
    interval_s: f64,
) -> Vec<QueuePackets> {
    let rate = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b >= a && interval_s > 0.0 => Some((b - a) as f64 / interval_s),
        _ => None,
    };
    cur.iter()
        .filter_map(|((nic, kind, queue), c)| {
            let p = prev.get(&(nic.clone(), *kind, *queue))?;
            Some(QueuePackets {
                nic: nic.clone(),
                kind: *kind,
                queue: *queue,
                packets_per_s: rate(p.packets, c.packets),
                bytes_per_s: rate(p.bytes, c.bytes),
            })
        })
        .collect()
}

fn pct(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}

/// Rates between two samples taken `interval_s` apart. `irqs` selects the IRQs whose rates are
/// wanted (all numbered IRQs when `None`).
pub fn rates(
    prev: &CounterSample,
    cur: &CounterSample,
    interval_s: f64,
    irqs: Option<&BTreeSet<u32>>,
) -> Rates {
    let per_s = |d: u64| {
        if interval_s > 0.0 {
            d as f64 / interval_s
        } else {
            0.0
        }
    };
    let net = |s: &CounterSample, v: &str| s.softirqs.as_ref().map(|x| x.per_cpu(v));
    let (rx0, rx1) = (net(prev, "NET_RX"), net(cur, "NET_RX"));
    let (tx0, tx1) = (net(prev, "NET_TX"), net(cur, "NET_TX"));
    let softirq_rate = |a: &Option<BTreeMap<u32, u64>>, b: &Option<BTreeMap<u32, u64>>, cpu| {
        Some(per_s(counter_delta(
            *a.as_ref()?.get(&cpu)?,
            *b.as_ref()?.get(&cpu)?,
        )))
    };

    let mut cpus = Vec::new();
    for (&cpu, t1) in &cur.stat.cpus {
        let Some(t0) = prev.stat.cpus.get(&cpu) else {
            continue;
        };
        let d = |a: u64, b: u64| b.saturating_sub(a);
        let total = d(t0.total(), t1.total());
        let guest = d(t0.guest, t1.guest);
        let gnice = d(t0.guest_nice, t1.guest_nice);
        let sn = match (prev.softnet.get(&cpu), cur.softnet.get(&cpu)) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        let sn_rate = |f: fn(&SoftnetRow) -> Option<u32>| {
            let (a, b) = sn?;
            Some(per_s(counter_delta(u64::from(f(a)?), u64::from(f(b)?))))
        };
        cpus.push(CpuRates {
            cpu,
            usr: pct(d(t0.user, t1.user).saturating_sub(guest), total),
            nice: pct(d(t0.nice, t1.nice).saturating_sub(gnice), total),
            sys: pct(d(t0.system, t1.system), total),
            iowait: pct(d(t0.iowait, t1.iowait), total),
            irq: pct(d(t0.irq, t1.irq), total),
            soft: pct(d(t0.softirq, t1.softirq), total),
            steal: pct(d(t0.steal, t1.steal), total),
            guest: pct(guest, total),
            gnice: pct(gnice, total),
            idle: pct(d(t0.idle, t1.idle), total),
            net_rx: softirq_rate(&rx0, &rx1, cpu),
            net_tx: softirq_rate(&tx0, &tx1, cpu),
            processed: sn_rate(|r| Some(r.processed)),
            dropped: sn_rate(|r| Some(r.dropped)),
            squeezed: sn_rate(|r| Some(r.time_squeeze)),
            rps_ipi: sn_rate(|r| r.received_rps),
            flow_limit: sn_rate(|r| r.flow_limit_count),
            backlog_len: sn.and_then(|(_, b)| b.backlog_len),
        });
    }
    let went_offline = prev
        .stat
        .cpus
        .keys()
        .filter(|c| !cur.stat.cpus.contains_key(c))
        .copied()
        .collect();

    let mut irq_rates = Vec::new();
    if let (Some(i0), Some(i1)) = (&prev.interrupts, &cur.interrupts) {
        let before: BTreeMap<u32, BTreeMap<u32, u64>> = i0
            .rows
            .iter()
            .filter_map(|r| Some((r.number()?, i0.per_cpu(r).collect())))
            .collect();
        for row in &i1.rows {
            let Some(irq) = row.number() else { continue };
            if irqs.is_some_and(|set| !set.contains(&irq)) {
                continue;
            }
            let Some(old) = before.get(&irq) else {
                continue;
            };
            let mut per_cpu = BTreeMap::new();
            for (cpu, count) in i1.per_cpu(row) {
                if let Some(&was) = old.get(&cpu) {
                    let r = per_s(counter_delta(was, count));
                    if r > 0.0 {
                        per_cpu.insert(cpu, r);
                    }
                }
            }
            irq_rates.push(IrqRate {
                irq,
                name: row.actions.join(", "),
                total: per_cpu.values().fold(0.0, |acc, r| acc + r),
                per_cpu,
            });
        }
    }
    Rates {
        interval_s,
        cpus,
        went_offline,
        irqs: irq_rates,
    }
}

/// Seconds since boot from `/proc/uptime` (first field).
pub fn parse_uptime(text: &str) -> std::result::Result<f64, crate::error::ParseError> {
    text.split_whitespace()
        .next()
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| crate::error::ParseError::new(1, "first field is not a number of seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_rates_are_per_pool_and_skip_pools_that_came_or_counters_that_went_back() {
        use crate::netdev::{PagePool, PagePoolStats};
        let pool = |id: u64, fast: u64, full: Option<u64>| PagePool {
            id,
            ifindex: Some(2),
            napi_id: Some(8194),
            inflight: Some(400),
            stats: Some(PagePoolStats {
                alloc_fast: Some(fast),
                alloc_slow: Some(fast / 64),
                alloc_slow_high_order: Some(0),
                alloc_waive: Some(0),
                recycle_cached: Some(fast / 2),
                recycle_ring: Some(0),
                recycle_ring_full: full,
                recycle_released_refcnt: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        };
        let of =
            |ps: Vec<PagePool>| -> PoolCounters { ps.into_iter().map(|p| (p.id, p)).collect() };
        let names = BTreeMap::from([(2, "eth0".to_string())]);
        let queues = BTreeMap::from([(("eth0".to_string(), 8194), 1)]);
        let prev = of(vec![
            pool(3, 1000, Some(0)),
            pool(4, 6400, Some(10)),
            pool(6, 9, Some(0)),
        ]);
        let mut gone = pool(6, 1, Some(0));
        gone.ifindex = Some(9);
        let cur = of(vec![
            // 2 s later: 12,800 more handed out, 200 slow calls, 6,400 kept, 4,000 freed.
            pool(4, 19_200, Some(4_010)),
            // Counters that went back (a pool id reused cannot be, but a reset can): no rate.
            pool(3, 10, Some(0)),
            // New since the last read: nothing to rate yet.
            pool(5, 64, Some(0)),
            // Of a device not in the view.
            gone,
        ]);
        let r = pool_rates(&prev, &cur, &names, &queues, 2.0);
        assert_eq!(r.len(), 2, "{r:?}");
        let p4 = r.iter().find(|p| p.pool == 4).unwrap();
        assert_eq!(p4.nic, "eth0");
        assert_eq!(p4.rx_queues, vec![1]);
        assert_eq!(p4.handed_per_s, Some((12_800.0 + 200.0) / 2.0));
        assert_eq!(p4.slow_per_s, Some(100.0));
        assert_eq!(p4.kept_per_s, Some(3_200.0));
        assert_eq!(p4.freed_per_s, Some(2_000.0));
        let p3 = r.iter().find(|p| p.pool == 3).unwrap();
        assert_eq!((p3.handed_per_s, p3.kept_per_s), (None, None));
        // A part of "freed" absent: no freed rate, not a smaller one.
        let cur = of(vec![pool(4, 19_200, None)]);
        let r = pool_rates(&prev, &cur, &names, &queues, 2.0);
        assert_eq!(r[0].freed_per_s, None);
        assert!(r[0].handed_per_s.is_some());
    }

    #[test]
    fn queue_rates_skip_queues_that_came_or_went_and_counters_that_reset() {
        use crate::netdev::{QueueStats, QueueType};
        let q = |kind, id, packets: u64| {
            (
                ("eth0".to_string(), kind, id),
                QueueStats {
                    kind,
                    id,
                    packets: Some(packets),
                    bytes: Some(packets * 100),
                    drops: None,
                },
            )
        };
        let prev: QueueCounters = [
            q(QueueType::Rx, 0, 1000),
            q(QueueType::Rx, 1, 500),
            q(QueueType::Tx, 0, 10),
        ]
        .into();
        let cur: QueueCounters = [
            q(QueueType::Rx, 0, 3000),
            q(QueueType::Rx, 1, 100),
            q(QueueType::Rx, 2, 9),
        ]
        .into();
        let r = queue_rates(&prev, &cur, 2.0);
        assert_eq!(r.len(), 2, "rx-2 is new, tx-0 is gone: {r:?}");
        assert_eq!(
            (r[0].queue, r[0].packets_per_s, r[0].bytes_per_s),
            (0, Some(1000.0), Some(100_000.0))
        );
        assert_eq!(
            (r[1].queue, r[1].packets_per_s),
            (1, None),
            "a counter that went back"
        );
    }

    fn softnet_line(processed: u32, dropped: u32, cpu: u32) -> String {
        let mut cols = [0u32; 15];
        cols[0] = processed;
        cols[1] = dropped;
        cols[12] = cpu;
        cols.iter()
            .map(|c| format!("{c:08x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn sample(user: u64, soft: u64, rx: u64, processed: u32, irq37: u64) -> CounterSample {
        // Idle grows so that every interval below spans exactly 1000 ticks more than the last.
        let idle = 10_000 - user - soft;
        let stat = format!(
            "cpu 0 0 0 0\ncpu0 {user} 0 0 {idle} 0 0 {soft} 0 0 0\ncpu1 0 0 0 100 0 0 0 0 0 0\n"
        );
        let softirqs = format!("CPU0 CPU1\nNET_TX: 0 0\nNET_RX: {rx} 5\n");
        let interrupts =
            format!(" CPU0 CPU1\n37: {irq37} 1 PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0\n");
        let softnet = format!(
            "{}\n{}\n",
            softnet_line(processed, 0, 0),
            softnet_line(0, 0, 1)
        );
        parse_sample(
            &stat,
            Some(&softirqs),
            Some(&interrupts),
            Some(&softnet),
            None,
        )
        .unwrap()
    }

    #[test]
    fn mpstat_percentages_and_rates() {
        let a = sample(100, 50, 1_000, 10, 500);
        let mut b = sample(150, 250, 3_000, 4_010, 2_500);
        // Over the interval: user +50, softirq +200, idle +750 => 1000 ticks.
        b.stat.cpus.get_mut(&0).unwrap().idle = a.stat.cpus[&0].idle + 750;
        let r = rates(&a, &b, 2.0, None);
        let c0 = &r.cpus[0];
        assert_eq!(c0.usr, 5.0);
        assert_eq!(c0.soft, 20.0);
        assert_eq!(c0.idle, 75.0);
        assert_eq!(c0.net_rx, Some(1_000.0));
        assert_eq!(c0.processed, Some(2_000.0));
        assert_eq!(r.irqs[0].per_cpu[&0], 1_000.0);
        assert!(!r.irqs[0].per_cpu.contains_key(&1));
    }

    #[test]
    fn softnet_wraps_at_32_bits() {
        let a = sample(0, 0, 0, u32::MAX - 9, 0);
        let b = sample(0, 0, 0, 10, 0);
        let r = rates(&a, &b, 1.0, None);
        assert_eq!(r.cpus[0].processed, Some(20.0));
        assert_eq!(counter_delta(u64::from(u32::MAX), 4), 5);
        assert_eq!(counter_delta(1 << 40, 3), 0);
        // A vector freed and reallocated restarts from 0: a reset, not 4.3 G interrupts.
        assert_eq!(counter_delta(10_000, 5), 0);
    }

    #[test]
    fn offline_cpus_drop_out() {
        let a = sample(0, 0, 0, 0, 0);
        let mut b = sample(0, 0, 0, 0, 0);
        b.stat.cpus.remove(&1);
        b.softnet.remove(&1);
        let r = rates(&a, &b, 1.0, Some(&BTreeSet::from([99])));
        assert_eq!(r.cpus.len(), 1);
        assert_eq!(r.went_offline, [1]);
        // An idle IRQ totals +0.0 (an empty f64 sum would print as -0.0 in JSON).
        let all = rates(&a, &b, 1.0, None);
        assert!(all.irqs[0].total.is_sign_positive());
        assert!(r.irqs.is_empty());
    }

    #[test]
    fn boot_baseline_turns_counters_into_since_boot_averages() {
        let cur = sample(300, 700, 5_000, 2_000, 9_000);
        let zero = cur.boot_baseline();
        assert_eq!(zero.stat.cpus[&0].total(), 0);
        assert_eq!(zero.softnet[&0].processed, 0);
        let uptime = cur.uptime_from_ticks().unwrap();
        assert_eq!(uptime, 100.0);
        let r = rates(&zero, &cur, uptime, None);
        assert_eq!(r.cpus[0].soft, 7.0);
        assert_eq!(r.cpus[0].processed, Some(20.0));
        assert_eq!(r.irqs[0].per_cpu[&0], 90.0);
        assert_eq!(parse_uptime("1288.51 2426.51\n").unwrap(), 1288.51);
        assert!(parse_uptime("x").is_err());
    }

    #[test]
    fn net_rates_per_device_and_udp() {
        let dev = |rx: u64, drop: u64| {
            let mut d = NetDevStats {
                name: "eth0".into(),
                ..Default::default()
            };
            d.rx_packets = rx;
            d.rx_drop = drop;
            d
        };
        let snmp =
            |e: i64| parse_snmp(&format!("Udp: InDatagrams RcvbufErrors\nUdp: 100 {e}\n")).unwrap();
        let a = NetCounters {
            devices: BTreeMap::from([("eth0".to_string(), dev(1_000, 5))]),
            snmp: Some(snmp(1)),
            problems: vec![],
        };
        let b = NetCounters {
            devices: BTreeMap::from([("eth0".to_string(), dev(3_000, 9))]),
            snmp: Some(snmp(11)),
            problems: vec![],
        };
        let r = net_rates(&a, &b, 2.0);
        assert_eq!(r.device("eth0").unwrap().rx_packets, 1_000.0);
        assert_eq!(r.device("eth0").unwrap().rx_drop, 2.0);
        assert_eq!(r.udp_rcvbuf_errors, Some(5.0));
        let since_boot = net_rates(&b.boot_baseline(), &b, 10.0);
        assert_eq!(since_boot.device("eth0").unwrap().rx_packets, 300.0);
    }
}
