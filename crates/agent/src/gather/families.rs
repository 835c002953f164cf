//! The families of one scrape, in exposition order: names, kinds and help texts in one
//! place, filled by the collectors in `gather`.

use crate::family::{Family, Kind};

/// Every family of a scrape, in exposition order.
#[derive(Clone)]
pub(super) struct Families {
    pub(super) build: Family,
    pub(super) collector_success: Family,
    pub(super) collector_error: Family,
    pub(super) cpu_seconds: Family,
    pub(super) softirqs: Family,
    pub(super) softnet_processed: Family,
    pub(super) softnet_dropped: Family,
    pub(super) softnet_squeezed: Family,
    pub(super) softnet_rps: Family,
    pub(super) softnet_flow_limit: Family,
    pub(super) softnet_backlog: Family,
    pub(super) queue_interrupts: Family,
    pub(super) irq_effective: Family,
    pub(super) balance_cv: Family,
    pub(super) balance_spread: Family,
    pub(super) interrupts_rate: Family,
    pub(super) interrupt_ceiling: Family,
    pub(super) udp_rcvbuf: Family,
    pub(super) udp_in_errors: Family,
    pub(super) rfs_sock_flow: Family,
    pub(super) nic_info: Family,
    pub(super) queues: Family,
    pub(super) rps_cpu: Family,
    pub(super) rps_flow: Family,
    pub(super) xps_cpu: Family,
    pub(super) channels: Family,
    pub(super) channels_max: Family,
    pub(super) ring: Family,
    pub(super) ring_max: Family,
    pub(super) feature: Family,
    pub(super) coalesce_seconds: Family,
    pub(super) coalesce_frames: Family,
    pub(super) coalesce_adaptive: Family,
    pub(super) rss_entries: Family,
    pub(super) finding: Family,
    pub(super) findings: Family,
    pub(super) rules: Family,
    pub(super) not_judged: Family,
    pub(super) doctor_time: Family,
    pub(super) rates_end: Family,
    pub(super) rates_seconds: Family,
    pub(super) tune_applied: Family,
    pub(super) tune_items: Family,
    pub(super) tune_drift: Family,
    pub(super) tune_info: Family,
    pub(super) tune_last_apply: Family,
    pub(super) tune_rollbacks: Family,
    pub(super) watch_advice: Family,
}

impl Default for Families {
    fn default() -> Families {
        use Kind::*;
        let f = Family::new;
        Families {
            build: f(
                "netsteer_build",
                Info,
                "netsteer's version and the kernel it reads.",
            ),
            collector_success: f(
                "netsteer_scrape_collector_success",
                Gauge,
                "1 when this scrape could read the source (stat, softirqs, softnet, interrupts, snmp, queues, nic, doctor, tune, watch, trace), else 0; netsteer_scrape_collector_error_info says why.",
            ),
            collector_error: f(
                "netsteer_scrape_collector_error",
                Info,
                "Why a collector failed this scrape (one series per failed collector, its reason a label).",
            ),
            cpu_seconds: f(
                "netsteer_cpu_seconds",
                Counter,
                "Seconds each CPU spent in hard IRQ, softirq and idle (/proc/stat); node_cpu_seconds_total has every mode.",
            ),
            softirqs: f(
                "netsteer_softirqs",
                Counter,
                "NET_RX and NET_TX softirqs raised per CPU (/proc/softirqs).",
            ),
            softnet_processed: f(
                "netsteer_softnet_processed",
                Counter,
                "Packets processed per CPU (/proc/net/softnet_stat column 1).",
            ),
            softnet_dropped: f(
                "netsteer_softnet_dropped",
                Counter,
                "Packets dropped because the CPU's backlog was full (netdev_max_backlog).",
            ),
            softnet_squeezed: f(
                "netsteer_softnet_times_squeezed",
                Counter,
                "Times net_rx_action ran out of budget with work left (netdev_budget, netdev_budget_usecs).",
            ),
            softnet_rps: f(
                "netsteer_softnet_received_rps",
                Counter,
                "RPS inter-processor interrupts this CPU received.",
            ),
            softnet_flow_limit: f(
                "netsteer_softnet_flow_limit_count",
                Counter,
                "Packets dropped by the per-flow backlog limit (flow_limit_cpu_bitmap).",
            ),
            softnet_backlog: f(
                "netsteer_softnet_backlog_packets",
                Gauge,
                "Packets waiting in the CPU's backlog at scrape time (kernel 6.0+).",
            ),
            queue_interrupts: f(
                "netsteer_queue_interrupts",
                Counter,
                "Interrupts of a NIC queue's IRQ per CPU; only CPUs that took any have a series.",
            ),
            irq_effective: f(
                "netsteer_queue_irq_effective_cpu",
                Gauge,
                "1 for each CPU a queue IRQ is delivered to now (effective_affinity_list).",
            ),
            balance_cv: f(
                "netsteer_queue_balance_cv",
                Gauge,
                "How evenly a device's queues share its work: the coefficient of variation (population standard deviation over the mean) of the queues' counts; `of` is rx-packets, tx-packets, rx-interrupts, tx-interrupts or rx-tx-interrupts; `window` is interval (the sampler's last) or boot (since boot, as ynltool qstats balance). No series when nothing was counted.",
            ),
            balance_spread: f(
                "netsteer_queue_balance_spread",
                Gauge,
                "Normalized spread 2(max-min)/(max+min) of a device's queues' counts: 0 even, 2 when one queue has it all; labels as netsteer_queue_balance_cv.",
            ),
            interrupts_rate: f(
                "netsteer_interrupts_per_second",
                Gauge,
                "The platform's interrupts per second over the sampler's last interval: kind all (/proc/stat intr), msi (MSI-domain rows of /proc/interrupts), nic-queues (the exported devices' queue vectors).",
            ),
            interrupt_ceiling: f(
                "netsteer_interrupt_ceiling_per_second",
                Gauge,
                "The total interrupt rate above which many SoCs were measured losing 3-4x I/O throughput (low end of 1-3 M/s; Google's soft interrupt moderation series).",
            ),
            udp_rcvbuf: f(
                "netsteer_udp_receive_buffer_errors",
                Counter,
                "UDP and UDP6 datagrams dropped because the socket's receive buffer was full, in the agent's network namespace.",
            ),
            udp_in_errors: f(
                "netsteer_udp_in_errors",
                Counter,
                "UDP and UDP6 datagrams that could not be delivered (InErrors), in the agent's network namespace.",
            ),
            rfs_sock_flow: f(
                "netsteer_rfs_sock_flow_entries",
                Gauge,
                "net.core.rps_sock_flow_entries: the global RFS table size (0 = RFS off).",
            ),
            nic_info: f(
                "netsteer_nic",
                Info,
                "An exported interface: its kind and driver.",
            ),
            queues: f(
                "netsteer_nic_queues",
                Gauge,
                "Queues the kernel exposes for the interface (/sys/class/net/IF/queues); no series when that directory could not be listed (collector=\"queues\" is 0).",
            ),
            rps_cpu: f(
                "netsteer_rps_cpu",
                Gauge,
                "1 for each CPU an rx queue steers packets to with RPS (rps_cpus); no series = RPS off, or rps_cpus unread (collector=\"queues\" is 0).",
            ),
            rps_flow: f(
                "netsteer_rps_flow_entries",
                Gauge,
                "An rx queue's RFS flow table size (rps_flow_cnt; 0 = RFS off for it).",
            ),
            xps_cpu: f(
                "netsteer_xps_cpu",
                Gauge,
                "1 for each CPU that transmits on a tx queue (xps_cpus).",
            ),
            channels: f(
                "netsteer_nic_channels",
                Gauge,
                "Channels in use by type (ethtool -l).",
            ),
            channels_max: f(
                "netsteer_nic_channels_max",
                Gauge,
                "Channels the driver offers by type (ethtool -l maximums).",
            ),
            ring: f(
                "netsteer_nic_ring_entries",
                Gauge,
                "Ring size in descriptors (ethtool -g).",
            ),
            ring_max: f(
                "netsteer_nic_ring_max_entries",
                Gauge,
                "Largest ring the driver allows (ethtool -g maximums).",
            ),
            feature: f(
                "netsteer_nic_feature_enabled",
                Gauge,
                "1 when an offload that changes where packet work happens is on (GRO, LRO, hashing, n-tuple, GSO/TSO).",
            ),
            coalesce_seconds: f(
                "netsteer_nic_coalesce_seconds",
                Gauge,
                "Interrupt coalescing delay (rx-usecs, tx-usecs).",
            ),
            coalesce_frames: f(
                "netsteer_nic_coalesce_frames",
                Gauge,
                "Interrupt coalescing frame count (rx-max-frames, tx-max-frames).",
            ),
            coalesce_adaptive: f(
                "netsteer_nic_coalesce_adaptive",
                Gauge,
                "1 when adaptive coalescing is on (adaptive-rx, adaptive-tx).",
            ),
            rss_entries: f(
                "netsteer_nic_rss_table_entries",
                Gauge,
                "RSS indirection table entries pointing at an rx queue (ethtool -x).",
            ),
            finding: f(
                "netsteer_doctor_finding",
                Gauge,
                "1 for each finding of the doctor's last evaluation (each tick of the agent's sampler), by rule, severity and device.",
            ),
            findings: f(
                "netsteer_doctor_findings",
                Gauge,
                "Findings of the doctor's last evaluation, by severity (0 when none).",
            ),
            rules: f(
                "netsteer_doctor_rules",
                Gauge,
                "Rules of the doctor's last evaluation that apply, by state: judged (every subject), not_judged (some subject lacked an input).",
            ),
            not_judged: f(
                "netsteer_doctor_not_judged",
                Gauge,
                "1 for each rule and device (empty: the host) the doctor's last evaluation could not judge for want of an input (doctor --json's unjudged says which).",
            ),
            doctor_time: f(
                "netsteer_doctor_last_evaluation_timestamp_seconds",
                Gauge,
                "When the doctor last evaluated the host (each tick of the agent's sampler).",
            ),
            rates_end: f(
                "netsteer_doctor_rates_end_timestamp_seconds",
                Gauge,
                "When the agent's sampler took the read that ends the interval the doctor's rates are over (the same for every scraper; absent while the rates are averages since boot).",
            ),
            rates_seconds: f(
                "netsteer_doctor_rates_interval_seconds",
                Gauge,
                "The length of the interval the doctor's rates are over (the sampler's, absent while they are averages since boot).",
            ),
            tune_applied: f(
                "netsteer_tune_plan_applied",
                Gauge,
                "1 when a tune plan is applied (and not rolled back), else 0.",
            ),
            tune_items: f(
                "netsteer_tune_items",
                Gauge,
                "Items of the applied plan that tune verify checks.",
            ),
            tune_drift: f(
                "netsteer_tune_drift_items",
                Gauge,
                "Items of the applied plan that no longer hold (tune verify).",
            ),
            tune_info: f("netsteer_tune_plan", Info, "The applied plan's profile."),
            tune_last_apply: f(
                "netsteer_tune_last_apply_timestamp_seconds",
                Gauge,
                "When the newest successful tune apply started.",
            ),
            tune_rollbacks: f(
                "netsteer_tune_rolled_back_journals",
                Gauge,
                "Journals in the state directory that were rolled back.",
            ),
            watch_advice: f(
                "netsteer_watch_advice_since_timestamp_seconds",
                Gauge,
                "When each advice netsteer watch stands by began (one series per advice id; none when no advice stands).",
            ),
        }
    }
}

impl Families {
    pub(super) fn into_vec(self) -> Vec<Family> {
        vec![
            self.build,
            self.collector_success,
            self.collector_error,
            self.cpu_seconds,
            self.softirqs,
            self.softnet_processed,
            self.softnet_dropped,
            self.softnet_squeezed,
            self.softnet_rps,
            self.softnet_flow_limit,
            self.softnet_backlog,
            self.queue_interrupts,
            self.irq_effective,
            self.balance_cv,
            self.balance_spread,
            self.interrupts_rate,
            self.interrupt_ceiling,
            self.udp_rcvbuf,
            self.udp_in_errors,
            self.rfs_sock_flow,
            self.nic_info,
            self.queues,
            self.rps_cpu,
            self.rps_flow,
            self.xps_cpu,
            self.channels,
            self.channels_max,
            self.ring,
            self.ring_max,
            self.feature,
            self.coalesce_seconds,
            self.coalesce_frames,
            self.coalesce_adaptive,
            self.rss_entries,
            self.finding,
            self.findings,
            self.rules,
            self.not_judged,
            self.doctor_time,
            self.rates_end,
            self.rates_seconds,
            self.tune_applied,
            self.tune_items,
            self.tune_drift,
            self.tune_info,
            self.tune_last_apply,
            self.tune_rollbacks,
            self.watch_advice,
        ]
    }
}
