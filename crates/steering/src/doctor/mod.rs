//! `netsteer doctor`: pure rules from a host view (and a load sample) to findings with
//! evidence and the exact fix. Nothing here reads the host; the caller supplies the data, so a
//! snapshot tree, a fixture or a test-built view diagnose the same way as the live host.
//!
//! The rules read the shared steering model ([`crate::model`]): its context, and the planner's
//! desired state for a fix's steps, so doctor and tune cannot disagree. Nothing here imports
//! [`crate::tune`].

pub mod fleet;
pub mod inputs;
pub mod model;
pub mod report;
pub mod rules;
pub mod sampling;
pub mod shared;
pub mod text;

pub use crate::model::ctx::Ctx;
pub use model::{App, Finding, Fix, Goal, Load, LoadSource, Severity, Subjects};
pub use report::{Report, diagnose, diagnose_traced};

pub use inputs::{Input, NotJudged, Scope};
use rules::{cpu, drops, irqrate, latency, napi, pool, rps, rss, spread, trace, tx};

pub struct Rule {
    pub id: &'static str,
    /// When the rule applies at all (a goal, a question the user asked).
    pub when: When,
    /// What it reads: with any of these unknown for a subject it found nothing on, that
    /// subject is not judged ([`inputs::unjudged`]).
    pub reads: &'static [Input],
    /// Which devices its device inputs are checked on (a rule about multi-queue transmit has
    /// nothing to judge on a one-queue device, whatever its files say).
    pub scope: Scope,
    /// What it looks for, for `netsteer doctor --list-rules` and docs/doctor.md.
    pub looks_for: &'static str,
    pub check: fn(&Ctx) -> Vec<Finding>,
}

/// When a rule applies. Outside it the rule is not counted at all: a latency rule under a
/// throughput goal, or a question (`--pid`, `--trace`) nobody asked, is not a blind spot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Always,
    /// `--goal latency`.
    GoalLatency,
    /// `--pid`: an application to judge.
    App,
    /// `--trace`: stage latencies.
    Trace,
    /// A kernel with per-NAPI state in netdev netlink (`napi-get`, 6.9+), known by its release
    /// or by NAPIs it reported; a kernel without it has no per-NAPI settings to get wrong.
    /// Not by NAPIs alone: NIC settings not read (a tree without them, `--no-ethtool`) leave
    /// no NAPI listed, and the rules then say "not judged" instead of not applying.
    Napi,
    /// A kernel whose netdev netlink lists page pools (`page-pool-get`, 6.8), known by its
    /// release or by pools it listed.
    PagePools,
}

impl When {
    pub fn applies(self, ctx: &Ctx) -> bool {
        match self {
            When::Always => true,
            When::GoalLatency => ctx.goal == Goal::Latency,
            When::App => ctx.app.is_some(),
            When::Trace => ctx.trace.is_some(),
            When::Napi => {
                ctx.view.nics.iter().any(|n| !n.napis.is_empty())
                    || kernel_at_least(ctx, NAPI_GET_SINCE)
            }
            When::PagePools => {
                ctx.view.nics.iter().any(|n| {
                    n.settings
                        .as_ref()
                        .and_then(|s| s.netdev().ok())
                        .is_some_and(|d| {
                            matches!(d.page_pools, Some(netsteer_host::field::Field::Known(_)))
                        })
                }) || kernel_at_least(ctx, PAGE_POOL_GET_SINCE)
            }
        }
    }
}

/// Whether the host's kernel release is known and at least `since`.
fn kernel_at_least(ctx: &Ctx, since: (u32, u32)) -> bool {
    ctx.view
        .kernel
        .known()
        .and_then(|k| crate::model::desired::kernel_version(k))
        .is_some_and(|v| v >= since)
}

/// The first kernel whose netdev netlink reports NAPIs (`napi-get`, Documentation/netlink/
/// specs/netdev.yaml).
const NAPI_GET_SINCE: (u32, u32) = (6, 9);
/// The first kernel that lists page pools (`page-pool-get`, net/core/page_pool_user.c).
const PAGE_POOL_GET_SINCE: (u32, u32) = (6, 8);

/// Every rule, in report order within a severity.
pub const RULES: &[Rule] = &[
    Rule {
        id: "softirq-hot-cpu",
        when: When::Always,
        reads: &[Input::CpuTimes, Input::Interrupts],
        scope: Scope::Any,
        looks_for: "packet processing (%soft, NET_RX, softnet processed) concentrated on few CPUs while others idle",
        check: cpu::softirq_hot_cpu,
    },
    Rule {
        id: "single-queue-no-rps",
        when: When::Always,
        reads: &[Input::Queues, Input::RpsCpus],
        scope: Scope::OneRxQueue,
        looks_for: "a one-queue device with several CPUs and RPS off",
        check: rps::single_queue_no_rps,
    },
    Rule {
        id: "irqs-not-spread",
        when: When::Always,
        reads: &[Input::Interrupts, Input::Queues],
        scope: Scope::Any,
        looks_for: "a multi-queue NIC's IRQs stacked on few CPUs",
        check: spread::irqs_not_spread,
    },
    Rule {
        id: "irqs-on-isolated-cpus",
        when: When::Always,
        reads: &[Input::Interrupts, Input::Isolated],
        scope: Scope::Any,
        looks_for: "queue IRQs delivered only to isolcpus/nohz_full CPUs while housekeeping CPUs exist",
        check: spread::irqs_on_isolated_cpus,
    },
    Rule {
        id: "irq-remote-numa",
        when: When::Always,
        reads: &[Input::Interrupts, Input::Numa],
        scope: Scope::Any,
        looks_for: "queue IRQs on CPUs of another NUMA node than the NIC",
        check: spread::irq_remote_numa,
    },
    Rule {
        id: "irq-ht-siblings",
        when: When::Always,
        reads: &[Input::Interrupts, Input::CpuTimes, Input::Siblings],
        scope: Scope::Any,
        looks_for: "busy queues on HT siblings while whole cores are free",
        check: spread::irq_ht_siblings,
    },
    Rule {
        id: "rss-remote-queues",
        when: When::Always,
        reads: &[Input::Interrupts, Input::Numa, Input::Rss],
        scope: Scope::MultiRxQueue,
        looks_for: "the RSS indirection table sending flows to remote-node queues",
        check: tx::rss_remote_queues,
    },
    Rule {
        id: "rss-table-skewed",
        when: When::Always,
        reads: &[Input::Interrupts, Input::SampledLoad, Input::Rss],
        scope: Scope::MultiRxQueue,
        looks_for: "an RSS table that gives one queue most buckets while that queue takes most receive interrupts",
        check: rss::rss_table_skewed,
    },
    Rule {
        id: "rss-table-not-followed",
        when: When::Always,
        reads: &[Input::Interrupts, Input::SampledLoad, Input::Rss],
        scope: Scope::MultiRxQueue,
        looks_for: "receive interrupts on queues the RSS table gives no bucket (the device dropped the table)",
        check: rss::rss_table_not_followed,
    },
    Rule {
        id: "rss-hash-no-ports",
        when: When::Always,
        reads: &[Input::Interrupts, Input::Queues, Input::FlowHash],
        scope: Scope::MultiRxQueue,
        looks_for: "UDP hashed on addresses only on a multi-queue NIC",
        check: rss::rss_hash_no_ports,
    },
    Rule {
        id: "xps-unset",
        when: When::Always,
        reads: &[Input::Queues, Input::XpsCpus],
        scope: Scope::MultiTxQueue,
        looks_for: "multi-queue transmit without XPS",
        check: tx::xps_unset,
    },
    Rule {
        id: "rfs-off",
        when: When::Always,
        reads: &[
            Input::Queues,
            Input::RpsCpus,
            Input::RpsFlowCnt,
            Input::Features,
        ],
        scope: Scope::Any,
        looks_for: "RPS or multi-queue without RFS; aRFS possible but off",
        check: rps::rfs_off,
    },
    Rule {
        id: "backlog-drops",
        when: When::Always,
        reads: &[Input::Softnet],
        scope: Scope::Any,
        looks_for: "softnet drops: backlog (netdev_max_backlog) or flow limit",
        check: drops::backlog_drops,
    },
    Rule {
        id: "budget-squeeze",
        when: When::Always,
        reads: &[Input::Softnet],
        scope: Scope::Any,
        looks_for: "softnet time_squeeze: netdev_budget / netdev_budget_usecs",
        check: drops::budget_squeeze,
    },
    Rule {
        id: "nic-rx-drops",
        when: When::Always,
        reads: &[Input::DeviceCounters],
        scope: Scope::Any,
        looks_for: "receive drops and ring overruns of a NIC",
        check: drops::nic_rx_drops,
    },
    Rule {
        id: "socket-rcvbuf-errors",
        when: When::Always,
        reads: &[Input::Snmp],
        scope: Scope::Any,
        looks_for: "UDP datagrams lost to full socket buffers",
        check: drops::socket_rcvbuf_errors,
    },
    Rule {
        id: "interrupt-rate-high",
        when: When::Always,
        reads: &[Input::Interrupts, Input::SampledLoad],
        scope: Scope::Any,
        looks_for: "a live device interrupt rate at or above 1 M/s, where many SoCs lose I/O throughput",
        check: irqrate::interrupt_rate_high,
    },
    Rule {
        id: "irqbalance-conflict",
        when: When::Always,
        reads: &[Input::Irqbalance, Input::Interrupts],
        scope: Scope::Any,
        looks_for: "irqbalance running over hand-pinned IRQs, or in a one-queue VM",
        check: spread::irqbalance_conflict,
    },
    Rule {
        id: "managed-irq",
        when: When::Always,
        reads: &[Input::Interrupts],
        scope: Scope::Any,
        looks_for: "queue IRQs the kernel will not let anyone move",
        check: spread::managed_irq,
    },
    Rule {
        id: "busy-poll-ineffective",
        when: When::Always,
        reads: &[Input::BusyPoll],
        scope: Scope::Any,
        looks_for: "busy polling on where there is no NAPI to poll",
        check: latency::busy_poll_ineffective,
    },
    Rule {
        id: "coalescing-latency",
        when: When::GoalLatency,
        reads: &[Input::Coalesce],
        scope: Scope::Any,
        looks_for: "interrupt coalescing delaying packets (--goal latency)",
        check: latency::coalescing_latency,
    },
    Rule {
        id: "flow-control-on",
        when: When::GoalLatency,
        reads: &[Input::Pause],
        scope: Scope::Any,
        looks_for: "Ethernet pause frames on (--goal latency)",
        check: latency::flow_control_on,
    },
    Rule {
        id: "app-on-irq-cpu",
        when: When::App,
        reads: &[Input::Interrupts],
        scope: Scope::Any,
        looks_for: "the application (--pid) on the CPU of the receive interrupts",
        check: latency::app_on_irq_cpu,
    },
    Rule {
        id: "napi-sysfs-mismatch",
        when: When::Napi,
        reads: &[Input::Napis],
        scope: Scope::Any,
        looks_for: "per-NAPI settings (netdev netlink) that differ from what the device's sysfs files say",
        check: napi::napi_sysfs_mismatch,
    },
    Rule {
        id: "irq-suspend-misconfigured",
        when: When::Napi,
        reads: &[Input::Napis],
        scope: Scope::Any,
        looks_for: "irq-suspend-timeout set without defer-hard-irqs and gro-flush-timeout below it",
        check: napi::irq_suspend_misconfigured,
    },
    Rule {
        id: "napi-thread-placement",
        when: When::Napi,
        reads: &[Input::Napis],
        scope: Scope::Any,
        looks_for: "threaded NAPI kthreads on the application's CPU or another NUMA node",
        check: napi::napi_thread_placement,
    },
    Rule {
        id: "page-pool-freeing",
        when: When::PagePools,
        reads: &[Input::PagePools],
        scope: Scope::Any,
        looks_for: "a receive page pool freeing a quarter or more of the pages that come back (ring full, pages still referenced, another NUMA node), so buffers come from the page allocator",
        check: pool::page_pool_freeing,
    },
    Rule {
        id: "softirq-delayed",
        when: When::Trace,
        reads: &[],
        scope: Scope::Any,
        looks_for: "NET_RX waiting ≥ 100 µs (p99) after being raised (doctor --trace)",
        check: trace::softirq_delayed,
    },
    Rule {
        id: "socket-reads-late",
        when: When::Trace,
        reads: &[],
        scope: Scope::Any,
        looks_for: "data waiting ≥ 1 ms (p99) in sockets, ten times the stack's delivery (doctor --trace)",
        check: trace::socket_reads_late,
    },
    Rule {
        id: "cpu-steal",
        when: When::Always,
        reads: &[Input::CpuTimes],
        scope: Scope::Any,
        looks_for: "vCPUs losing time to the hypervisor",
        check: cpu::cpu_steal,
    },
];
