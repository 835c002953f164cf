//! The per-CPU counter files read each on its own, for a scrape without /proc/stat.
//!
//! The doctor's counter sample ([`netsteer_steering::model::load::Reading`]) needs /proc/stat,
//! but the agent's collectors do not: interrupts come from /proc/interrupts, softirqs from
//! /proc/softirqs, softnet from /proc/net/softnet_stat. A host (or an OpenShift must-gather)
//! without a readable /proc/stat still has its interrupts, and exporting none of them would say
//! less than the files do (issue 72, class 5).

use netsteer_host::parse::{SoftnetRow, parse_interrupts, parse_softirqs, parse_softnet_stat};
use netsteer_host::sample::CounterSample;
use netsteer_host::{CpuSet, HostFs};

/// The counters of `fs` but /proc/stat's (whose CPU times are left empty: no series, never
/// zeros). `online` is the host's online CPUs as its topology read them, for softnet rows that
/// do not print their CPU (kernels before 5.10): the kernel prints one row per online CPU
/// (net/core/net-procfs.c, `softnet_get_online`), so row n is the n-th online CPU. Without
/// that list such a row's CPU is unknown and it is left out, its reason in `problems`.
pub(super) fn read_without_stat(fs: &HostFs, online: &CpuSet) -> CounterSample {
    let mut problems = Vec::new();
    let mut read = |path: &str| fs.read(path).map_err(|e| problems.push(e.to_string())).ok();
    let softirqs = read("/proc/softirqs");
    let interrupts = read("/proc/interrupts");
    let softnet = read("/proc/net/softnet_stat");
    let softirqs = softirqs.and_then(|t| {
        parse_softirqs(&t)
            .map_err(|e| problems.push(format!("/proc/softirqs: {e}")))
            .ok()
    });
    let interrupts = interrupts.and_then(|t| {
        parse_interrupts(&t)
            .map_err(|e| problems.push(format!("/proc/interrupts: {e}")))
            .ok()
    });
    let rows = softnet
        .and_then(|t| {
            parse_softnet_stat(&t)
                .map_err(|e| problems.push(format!("/proc/net/softnet_stat: {e}")))
                .ok()
        })
        .unwrap_or_default();
    let placed = !online.is_empty() || rows.iter().all(|r| r.cpu_index.is_some());
    let softnet = if placed {
        let ids = SoftnetRow::resolve_cpus(&rows, Some(online));
        ids.into_iter().zip(rows).collect()
    } else {
        problems.push(
            "/proc/net/softnet_stat: rows without a CPU column, and neither \
             /sys/devices/system/cpu/online nor /proc/stat to say whose they are"
                .to_string(),
        );
        rows.into_iter()
            .filter_map(|r| Some((r.cpu_index?, r)))
            .collect()
    };
    CounterSample {
        stat: Default::default(),
        softirqs,
        interrupts,
        softnet,
        problems,
    }
}
