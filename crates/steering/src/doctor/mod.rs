//! `netsteer doctor`: pure rules from a host view (and a load sample) to findings with
//! evidence and the exact fix. Nothing here reads the host; the caller supplies the data, so a
//! snapshot tree, a fixture or a test-built view diagnose the same way as the live host.
//!
//! The rules read the shared steering model ([`crate::model`]): its context, and the planner's
//! desired state for a fix's steps, so doctor and tune cannot disagree. Nothing here imports
//! [`crate::tune`].

pub mod fleet;
pub mod model;
pub mod report;
pub mod rules;
pub mod sampling;
pub mod text;

pub use crate::model::ctx::Ctx;
pub use model::{App, Finding, Fix, Goal, Load, LoadSource, Severity, Subjects};
pub use report::{Report, diagnose, diagnose_traced};

use rules::{cpu, drops, latency, napi, rps, rss, spread, trace, tx};

pub struct Rule {
    pub id: &'static str,
    /// What it looks for, for `netsteer doctor --list-rules` and docs/doctor.md.
    pub looks_for: &'static str,
    pub check: fn(&Ctx) -> Vec<Finding>,
}

/// Every rule, in report order within a severity.
pub const RULES: &[Rule] = &[
    Rule {
        id: "softirq-hot-cpu",
        looks_for: "packet processing (%soft, NET_RX, softnet processed) concentrated on few CPUs while others idle",
        check: cpu::softirq_hot_cpu,
    },
    Rule {
        id: "single-queue-no-rps",
        looks_for: "a one-queue device with several CPUs and RPS off",
        check: rps::single_queue_no_rps,
    },
    Rule {
        id: "irqs-not-spread",
        looks_for: "a multi-queue NIC's IRQs stacked on few CPUs",
        check: spread::irqs_not_spread,
    },
    Rule {
        id: "irqs-on-isolated-cpus",
        looks_for: "queue IRQs delivered only to isolcpus/nohz_full CPUs while housekeeping CPUs exist",
        check: spread::irqs_on_isolated_cpus,
    },
    Rule {
        id: "irq-remote-numa",
        looks_for: "queue IRQs on CPUs of another NUMA node than the NIC",
        check: spread::irq_remote_numa,
    },
    Rule {
        id: "irq-ht-siblings",
        looks_for: "busy queues on HT siblings while whole cores are free",
        check: spread::irq_ht_siblings,
    },
    Rule {
        id: "rss-remote-queues",
        looks_for: "the RSS indirection table sending flows to remote-node queues",
        check: tx::rss_remote_queues,
    },
    Rule {
        id: "rss-table-skewed",
        looks_for: "an RSS table that gives one queue most buckets while that queue takes most receive interrupts",
        check: rss::rss_table_skewed,
    },
    Rule {
        id: "rss-table-not-followed",
        looks_for: "receive interrupts on queues the RSS table gives no bucket (the device dropped the table)",
        check: rss::rss_table_not_followed,
    },
    Rule {
        id: "rss-hash-no-ports",
        looks_for: "UDP hashed on addresses only on a multi-queue NIC",
        check: rss::rss_hash_no_ports,
    },
    Rule {
        id: "xps-unset",
        looks_for: "multi-queue transmit without XPS",
        check: tx::xps_unset,
    },
    Rule {
        id: "rfs-off",
        looks_for: "RPS or multi-queue without RFS; aRFS possible but off",
        check: rps::rfs_off,
    },
    Rule {
        id: "backlog-drops",
        looks_for: "softnet drops: backlog (netdev_max_backlog) or flow limit",
        check: drops::backlog_drops,
    },
    Rule {
        id: "budget-squeeze",
        looks_for: "softnet time_squeeze: netdev_budget / netdev_budget_usecs",
        check: drops::budget_squeeze,
    },
    Rule {
        id: "nic-rx-drops",
        looks_for: "receive drops and ring overruns of a NIC",
        check: drops::nic_rx_drops,
    },
    Rule {
        id: "socket-rcvbuf-errors",
        looks_for: "UDP datagrams lost to full socket buffers",
        check: drops::socket_rcvbuf_errors,
    },
    Rule {
        id: "irqbalance-conflict",
        looks_for: "irqbalance running over hand-pinned IRQs, or in a one-queue VM",
        check: spread::irqbalance_conflict,
    },
    Rule {
        id: "managed-irq",
        looks_for: "queue IRQs the kernel will not let anyone move",
        check: spread::managed_irq,
    },
    Rule {
        id: "busy-poll-ineffective",
        looks_for: "busy polling on where there is no NAPI to poll",
        check: latency::busy_poll_ineffective,
    },
    Rule {
        id: "coalescing-latency",
        looks_for: "interrupt coalescing delaying packets (--goal latency)",
        check: latency::coalescing_latency,
    },
    Rule {
        id: "flow-control-on",
        looks_for: "Ethernet pause frames on (--goal latency)",
        check: latency::flow_control_on,
    },
    Rule {
        id: "app-on-irq-cpu",
        looks_for: "the application (--pid) on the CPU of the receive interrupts",
        check: latency::app_on_irq_cpu,
    },
    Rule {
        id: "napi-sysfs-mismatch",
        looks_for: "per-NAPI settings (netdev netlink) that differ from what the device's sysfs files say",
        check: napi::napi_sysfs_mismatch,
    },
    Rule {
        id: "irq-suspend-misconfigured",
        looks_for: "irq-suspend-timeout set without defer-hard-irqs and gro-flush-timeout below it",
        check: napi::irq_suspend_misconfigured,
    },
    Rule {
        id: "napi-thread-placement",
        looks_for: "threaded NAPI kthreads on the application's CPU or another NUMA node",
        check: napi::napi_thread_placement,
    },
    Rule {
        id: "softirq-delayed",
        looks_for: "NET_RX waiting ≥ 100 µs (p99) after being raised (doctor --trace)",
        check: trace::softirq_delayed,
    },
    Rule {
        id: "socket-reads-late",
        looks_for: "data waiting ≥ 1 ms (p99) in sockets, ten times the stack's delivery (doctor --trace)",
        check: trace::socket_reads_late,
    },
    Rule {
        id: "cpu-steal",
        looks_for: "vCPUs losing time to the hypervisor",
        check: cpu::cpu_steal,
    },
];
