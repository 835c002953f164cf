//! What each doctor rule reads, as data: the engine checks a rule's inputs before it trusts the
//! rule's silence. A rule whose input is unknown for a subject (a device, or the host) and that
//! found nothing there is "not judged: needs X (why)", never counted as healthy.
//!
//! Why declared and not discovered: a rule that returns no finding cannot say whether it looked
//! and saw nothing or could not look. The ablation test (crates/cli/tests/ablation.rs) takes
//! each file away from every real tree and checks that every finding lost is named here.

use crate::model::ctx::{Blind, Ctx};
use crate::model::load::LoadSource;
use netsteer_host::nic::Nic;
use serde::{Deserialize, Serialize};

/// One input of a rule. Host inputs are judged once; device inputs for each interface whose
/// steering matters ([`Ctx::traffic_nics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Input {
    /// `/proc/interrupts`: which vectors are each NIC's, and their counts.
    Interrupts,
    /// CPU times over the load window (`/proc/stat`).
    CpuTimes,
    /// A sampled load (two live reads): averages since boot mix every load the host has had,
    /// and rules about where traffic goes now cannot use them.
    SampledLoad,
    /// Per-CPU softnet counters (`/proc/net/softnet_stat`).
    Softnet,
    /// UDP counters (`/proc/net/snmp`).
    Snmp,
    /// Whether irqbalance runs (`/proc/PID/…`).
    Irqbalance,
    /// `isolcpus=` and `nohz_full=` (`cpu/isolated`, `cpu/nohz_full`).
    Isolated,
    /// `net.core.busy_poll` and `net.core.busy_read`.
    BusyPoll,
    /// Which CPUs are hyperthreads of one core (`cpu/cpuN/topology/thread_siblings_list`).
    Siblings,
    /// A device's queue directories (`sys/class/net/DEV/queues`).
    Queues,
    /// Every receive queue's `rps_cpus`.
    RpsCpus,
    /// Every receive queue's `rps_flow_cnt`.
    RpsFlowCnt,
    /// Every transmit queue's `xps_cpus`.
    XpsCpus,
    /// The device's NUMA node (`device/numa_node`) and the host's nodes.
    Numa,
    /// The device's packet and drop counters (sysfs statistics or `/proc/net/dev`).
    DeviceCounters,
    /// ethtool: the RSS indirection table.
    Rss,
    /// ethtool: offload features (ntuple, GRO).
    Features,
    /// ethtool: interrupt coalescing.
    Coalesce,
    /// ethtool: flow control.
    Pause,
    /// ethtool: which header fields UDP is hashed on.
    FlowHash,
    /// netdev netlink: the device's NAPIs and their settings (`napi-get`).
    Napis,
    /// netdev netlink: the device's page pools and their counters (`page-pool-get`,
    /// `page-pool-stats-get`).
    PagePools,
}

impl Input {
    pub fn per_device(self) -> bool {
        !matches!(
            self,
            Input::Interrupts
                | Input::CpuTimes
                | Input::SampledLoad
                | Input::Softnet
                | Input::Snmp
                | Input::Irqbalance
                | Input::Isolated
                | Input::BusyPoll
                | Input::Siblings
        )
    }

    /// Why this host input is unknown, or None when it is known.
    pub fn host_unknown(self, ctx: &Ctx) -> Option<String> {
        let v = ctx.view;
        let load = || {
            ctx.load
                .ok_or_else(|| "no load counters could be read".to_string())
        };
        let why = |f: &dyn Fn() -> Result<bool, String>| match f() {
            Ok(true) => None,
            Ok(false) => Some(String::new()),
            Err(e) => Some(e),
        };
        let reason = match self {
            Input::Interrupts => v.irqs_unknown().map(|w| w.to_string()),
            Input::CpuTimes => why(&|| Ok(!load()?.cpu.cpus.is_empty())),
            Input::SampledLoad => why(&|| Ok(load()?.source == LoadSource::Sampled)).map(|w| {
                if w.is_empty() {
                    "the load is an average since boot".into()
                } else {
                    w
                }
            }),
            Input::Softnet => why(&|| Ok(load()?.cpu.cpus.iter().any(|c| c.processed.is_some()))),
            Input::Snmp => why(&|| Ok(load()?.net.udp_rcvbuf_errors.is_some())),
            Input::Irqbalance => v.irqbalance.unknown_reason().map(str::to_string),
            Input::Isolated => v
                .topology
                .isolated
                .unknown_reason()
                .or(v.topology.nohz_full.unknown_reason())
                .map(str::to_string),
            Input::BusyPoll => v
                .sysctls
                .busy_poll
                .unknown_reason()
                .or(v.sysctls.busy_read.unknown_reason())
                .map(str::to_string),
            // The first online CPU whose siblings are unknown: without them a pair of
            // hyperthreads cannot be told from two cores.
            Input::Siblings => v.topology.cpus.iter().filter(|c| c.online).find_map(|c| {
                c.siblings
                    .unknown_reason()
                    .map(|w| format!("CPU {}: {w}", c.id))
            }),
            _ => None,
        }?;
        Some(if reason.is_empty() {
            format!("{}: absent", self.what())
        } else {
            format!("{}: {reason}", self.what())
        })
    }

    /// Why this device input is unknown for `nic`, or None when it is known.
    pub fn device_unknown(self, ctx: &Ctx, nic: &Nic) -> Option<String> {
        let dev = &nic.name;
        let queues = || {
            nic.queues_unknown
                .as_ref()
                .map(|w| format!("{dev} queues: {w}"))
        };
        // The first queue (`rx-3`) whose `what` is unknown, and why.
        let first =
            |what: &str, dir: &str, fields: &mut dyn Iterator<Item = (u32, Option<&str>)>| {
                for (i, w) in fields {
                    if let Some(w) = w {
                        return Some(format!("{dev} {dir}-{i} {what}: {w}"));
                    }
                }
                None
            };
        let setting = |f: Option<Option<&str>>, what: &str| match f {
            None => Some(format!("{dev} {what}: no NIC settings read")),
            Some(w) => w.map(|w| format!("{dev} {what}: {w}")),
        };
        let s = nic.settings.as_ref();
        match self {
            Input::Queues => queues(),
            Input::RpsCpus => queues().or_else(|| {
                let rx = &mut nic.rx_queues.iter();
                first(
                    "rps_cpus",
                    "rx",
                    &mut rx.map(|q| (q.index, q.rps_cpus.unknown_reason())),
                )
            }),
            Input::RpsFlowCnt => queues().or_else(|| {
                let rx = &mut nic.rx_queues.iter();
                first(
                    "rps_flow_cnt",
                    "rx",
                    &mut rx.map(|q| (q.index, q.rps_flow_cnt.unknown_reason())),
                )
            }),
            Input::XpsCpus => queues().or_else(|| {
                let tx = &mut nic.tx_queues.iter();
                first(
                    "xps_cpus",
                    "tx",
                    &mut tx.map(|q| (q.index, q.xps_cpus.unknown_reason())),
                )
            }),
            Input::Numa => {
                let topo = &ctx.view.topology;
                if let Some(w) = nic.numa_node.unknown_reason() {
                    Some(format!("{dev} numa_node: {w}"))
                } else if let Some(w) = &topo.numa_unknown {
                    Some(format!("the NUMA layout: {w}"))
                } else {
                    // A node the device names whose CPUs the tree does not list: nothing
                    // says whether an IRQ's CPU is on it.
                    nic.numa_node
                        .known()
                        .and_then(|n| u32::try_from(*n).ok())
                        .filter(|n| topo.node_cpus(*n).is_none())
                        .map(|n| format!("node {n}'s CPUs (node{n}/cpulist, cpumap): not listed"))
                }
            }
            Input::DeviceCounters => None,
            Input::Rss => setting(s.map(|s| s.rss.unknown_reason()), "RSS table (ethtool)"),
            Input::Features => {
                setting(s.map(|s| s.features.unknown_reason()), "features (ethtool)")
            }
            Input::Coalesce => setting(
                s.map(|s| s.coalesce.unknown_reason()),
                "coalescing (ethtool)",
            ),
            Input::Pause => setting(
                s.map(|s| s.pause.unknown_reason()),
                "flow control (ethtool)",
            ),
            Input::Napis => match s {
                None => Some(format!(
                    "{dev} per-NAPI settings (netdev netlink): no NIC settings read"
                )),
                Some(s) => s
                    .netdev()
                    .err()
                    .map(|w| format!("{dev} per-NAPI settings (netdev netlink): {w}")),
            },
            Input::PagePools => {
                let netdev = match s {
                    None => {
                        return Some(format!(
                            "{dev} page pools (netdev netlink): no NIC settings read"
                        ));
                    }
                    Some(s) => s.netdev(),
                };
                match netdev.map(|d| d.page_pools.as_ref()) {
                    Err(w) => Some(format!("{dev} page pools (netdev netlink): {w}")),
                    Ok(None) => Some(format!(
                        "{dev} page pools (netdev netlink): not recorded (a tree captured before netsteer read them)"
                    )),
                    Ok(Some(netsteer_host::field::Field::Unknown { unknown })) => {
                        Some(format!("{dev} page pools (netdev netlink): {unknown}"))
                    }
                    // Pools without counters cannot be judged; no pool at all has nothing
                    // to judge.
                    Ok(Some(netsteer_host::field::Field::Known(p))) => p
                        .stats_unavailable
                        .as_ref()
                        // Only pools the rule judges: memory-provider pools are left out.
                        .filter(|_| p.pools.iter().any(|q| q.dmabuf.is_none() && !q.io_uring))
                        .map(|w| format!("{dev} page pool counters: {w}"))
                        .or_else(|| {
                            crate::doctor::rules::pool::incomplete(nic)
                                .map(|w| format!("{dev} {w}"))
                        }),
                }
            }
            Input::FlowHash => setting(
                s.map(|s| match &s.flow_hash {
                    None => Some("not recorded"),
                    Some(f) => f.unknown_reason(),
                }),
                "UDP flow hash (ethtool)",
            ),
            _ => None,
        }
    }

    fn what(self) -> String {
        match self {
            Input::Interrupts => "/proc/interrupts",
            Input::CpuTimes => "CPU times (/proc/stat)",
            Input::SampledLoad => "a sampled load (doctor on the live host, --sample)",
            Input::Softnet => "softnet counters (/proc/net/softnet_stat)",
            Input::Snmp => "UDP counters (/proc/net/snmp)",
            Input::Irqbalance => "irqbalance's state",
            Input::Isolated => "isolated CPUs (cpu/isolated, cpu/nohz_full)",
            Input::BusyPoll => "net.core.busy_poll/busy_read",
            Input::Siblings => "hyperthread siblings (cpu/cpuN/topology/thread_siblings_list)",
            _ => "device input",
        }
        .to_string()
    }
}

/// A rule's device input that the load decides: counters of a device the load window holds.
fn counters_unknown(ctx: &Ctx, nic: &Nic) -> Option<String> {
    let Some(load) = ctx.load else {
        return Some(format!(
            "{} packet counters: no load counters could be read",
            nic.name
        ));
    };
    load.net
        .device(&nic.name)
        .is_none()
        .then(|| format!("{} packet counters: absent from the load", nic.name))
}

/// Why `nic`'s vector list is incomplete: a queue vector of /proc/interrupts is named after it
/// or sits on its PCI function, yet its `msi_irqs` does not list it.
fn vectors_missing(ctx: &Ctx, nic: &Nic) -> Option<String> {
    let theirs: Vec<String> = ctx
        .view
        .foreign_vectors
        .iter()
        .filter(|v| v.looks_like(nic))
        .map(|v| format!("{} ({})", v.irq, v.names.join(",")))
        .collect();
    // Vectors it owns (msi_irqs) none of which is named like a queue: a driver whose naming
    // is not recognised (cxgb4's `eth0-Rx0`); where its queues' IRQs go is not known.
    if theirs.is_empty()
        && !nic.is_virtual()
        && !nic.irqs.is_empty()
        && nic.queue_irqs().next().is_none()
    {
        let names: Vec<&str> = nic.irqs.iter().take(4).map(|i| i.name.as_str()).collect();
        return Some(format!(
            "{}'s queue vectors: none of its {} vector(s) is named like a queue ({})",
            nic.name,
            nic.irqs.len(),
            names.join(", ")
        ));
    }
    (!theirs.is_empty()).then(|| {
        format!(
            "{}'s vectors: IRQ {} named for it or on its function but not in its msi_irqs",
            nic.name,
            theirs.join(", ")
        )
    })
}

/// The devices a rule's device inputs are checked on. A device whose queues are unknown is
/// always checked: nothing says the rule does not apply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Any,
    /// One receive queue or none listed.
    OneRxQueue,
    /// Two receive queues or more.
    MultiRxQueue,
    /// Two transmit queues or more.
    MultiTxQueue,
}

impl Scope {
    pub fn covers(self, nic: &Nic) -> bool {
        if nic.queues_unknown.is_some() {
            return true;
        }
        match self {
            Scope::Any => true,
            Scope::OneRxQueue => nic.rx_queues.len() <= 1,
            Scope::MultiRxQueue => nic.rx_queues.len() >= 2,
            Scope::MultiTxQueue => nic.tx_queues.len() >= 2,
        }
    }
}

/// One subject a rule could not judge, for the report.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NotJudged {
    pub rule: String,
    /// The device, or empty for the host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// The input lacking and why (`eth0 tx-3 xps_cpus: absent`).
    pub needs: String,
}

impl From<Blind> for NotJudged {
    fn from(b: Blind) -> NotJudged {
        NotJudged {
            rule: b.rule.to_string(),
            subject: b.subject,
            needs: b.needs,
        }
    }
}

/// The subjects of `rule` (its id and inputs) that its inputs leave unjudged, given the
/// devices it reported findings on (a finding made from what was known stands).
pub fn unjudged(
    ctx: &Ctx,
    rule: &'static str,
    inputs: &[Input],
    scope: Scope,
    found_on: &[String],
    found_host: bool,
) -> Vec<NotJudged> {
    let mut out = Vec::new();
    // A rule about devices with no device in its scope has nothing to judge here: a host
    // input it lacks blinds nothing (the RSS table rules on a host of one-queue devices).
    let about_devices = scope != Scope::Any || inputs.iter().any(|i| i.per_device());
    let nics = ctx.traffic_nics();
    if about_devices && !nics.iter().any(|n| scope.covers(n)) {
        return out;
    }
    if !found_host {
        for i in inputs.iter().filter(|i| !i.per_device()) {
            if let Some(needs) = i.host_unknown(ctx) {
                out.push(NotJudged {
                    rule: rule.to_string(),
                    subject: String::new(),
                    needs,
                });
                // One host input missing blinds the whole rule: its devices are not listed.
                return out;
            }
        }
    }
    for nic in nics {
        if found_host || found_on.contains(&nic.name) || !scope.covers(nic) {
            continue;
        }
        let mut needs: Vec<String> = inputs
            .iter()
            .filter_map(|i| match i {
                Input::DeviceCounters => counters_unknown(ctx, nic),
                Input::Interrupts => vectors_missing(ctx, nic),
                i if i.per_device() => i.device_unknown(ctx, nic),
                _ => None,
            })
            .collect();
        needs.dedup();
        if !needs.is_empty() {
            out.push(NotJudged {
                rule: rule.to_string(),
                subject: nic.name.clone(),
                needs: needs.join("; "),
            });
        }
    }
    out
}
