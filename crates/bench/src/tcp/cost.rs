//! Whole-cost CPU accounting of one side of a test: the CPU time and context switches of its
//! threads (getrusage per thread), plus the softirq time of the CPUs those threads ran on and
//! the per-CPU NET_RX distribution, from /proc/stat and /proc/softirqs deltas. Per-thread
//! figures alone (tcp_mmap's "usec per MB", iperf3's CPU %) miss the softirq work the kernel
//! does for the flow on other CPUs; the /proc deltas catch it.

use netsteer_host::HostFs;
use netsteer_host::sample::{CounterSample, rates, read_sample};
use netsteer_sock::cpu::ThreadUsage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// /proc/stat counts in USER_HZ ticks, 100 per second on every Linux ABI.
const US_PER_TICK: u64 = 10_000;

/// One CPU over the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuSoft {
    pub cpu: u32,
    /// %soft as mpstat prints it.
    pub soft_pct: f64,
    /// NET_RX softirq runs per second.
    pub net_rx_per_s: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideCost {
    pub user_us: u64,
    pub sys_us: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// CPUs this side's benchmark threads ran on.
    pub cpus: Vec<u32>,
    /// Softirq time on those CPUs during the test (all softirq work there, whoever caused it).
    pub softirq_us: u64,
    /// Every CPU's %soft and NET_RX rate during the test.
    pub per_cpu: Vec<CpuSoft>,
}

impl SideCost {
    pub fn thread_us(&self) -> u64 {
        self.user_us + self.sys_us
    }
}

/// Counters at the start of a test; `finish` turns them into a [`SideCost`].
pub struct CostMeter {
    start: Option<CounterSample>,
    started: std::time::Instant,
}

impl CostMeter {
    pub fn start() -> CostMeter {
        CostMeter {
            // Without /proc (a strange container) the thread times are still reported.
            start: read_sample(&HostFs::default()).ok(),
            started: std::time::Instant::now(),
        }
    }

    pub fn finish(&self, usage: &ThreadUsage, cpus: &BTreeSet<u32>) -> SideCost {
        let mut cost = SideCost {
            user_us: usage.user_us,
            sys_us: usage.sys_us,
            voluntary_switches: usage.voluntary_switches,
            involuntary_switches: usage.involuntary_switches,
            cpus: cpus.iter().copied().collect(),
            ..SideCost::default()
        };
        if let (Some(start), Ok(end)) = (&self.start, read_sample(&HostFs::default())) {
            cost.softirq_us = cpus
                .iter()
                .filter_map(|c| Some((start.stat.cpus.get(c)?, end.stat.cpus.get(c)?)))
                .map(|(a, b)| b.softirq.saturating_sub(a.softirq) * US_PER_TICK)
                .sum();
            let r = rates(start, &end, self.started.elapsed().as_secs_f64(), None);
            cost.per_cpu = r
                .cpus
                .iter()
                .map(|c| CpuSoft {
                    cpu: c.cpu,
                    soft_pct: c.soft,
                    net_rx_per_s: c.net_rx,
                })
                .collect();
        }
        cost
    }
}

/// µs of CPU per MiB moved (tcp_mmap's unit: 1 MB = 2^20 bytes).
pub fn us_per_mb(us: u64, bytes: u64) -> Option<f64> {
    per_mb(us, bytes)
}

/// A count per MiB moved; None when nothing moved.
pub fn per_mb(count: u64, bytes: u64) -> Option<f64> {
    (bytes > 0).then(|| count as f64 / (bytes as f64 / (1u64 << 20) as f64))
}
