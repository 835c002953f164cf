//! The whole answer of `netsteer doctor`: findings sorted by severity plus a host summary.

use super::RULES;
use super::inputs::{NotJudged, unjudged};
use super::model::{App, Finding, Goal, Load, LoadSource, Severity};
use crate::model::ctx::Ctx;
use netsteer_host::balance::{self, QueueBalance};
use netsteer_host::view::HostView;
use serde::{Deserialize, Serialize};

/// Bumped when a field changes meaning or disappears (additions keep it).
pub const REPORT_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadInfo {
    pub source: LoadSource,
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicSummary {
    pub name: String,
    pub kind: String,
    pub driver: Option<String>,
    pub numa_node: Option<i64>,
    pub rx_queues: usize,
    pub tx_queues: usize,
    pub queue_irqs: usize,
    /// Why the queues could not be listed (then the counts above are not the device's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues_unknown: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSummary {
    pub kernel: Option<String>,
    /// Online CPUs as a list (`0-15`).
    pub online_cpus: String,
    /// None (null) when the host's or tree's files do not say ([`Topology::numa_unknown`]).
    ///
    /// [`Topology::numa_unknown`]: netsteer_host::topology::Topology::numa_unknown
    pub numa_nodes: Option<usize>,
    pub isolated_cpus: Option<String>,
    pub irqbalance_running: Option<bool>,
    /// Interfaces other than loopback.
    pub nics: Vec<NicSummary>,
    /// Set when the view is a container's: its namespace holds no physical NIC while the
    /// host's queue vectors show in /proc/interrupts ([`HostView::container_view`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_view: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub critical: usize,
    pub warning: usize,
    pub info: usize,
}

/// How many rules applied (their goal and question given), and of those how many judged every
/// subject and how many left one unjudged ([`Report::unjudged`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleCounts {
    pub applied: usize,
    pub judged: usize,
    pub not_judged: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub goal: Goal,
    /// Absent when no counters could be read: rules that need rates were skipped.
    pub load: Option<LoadInfo>,
    pub host: HostSummary,
    /// Most severe first.
    pub findings: Vec<Finding>,
    pub counts: Counts,
    /// Files that could not be read, so some rules saw less.
    pub problems: Vec<String>,
    /// What doctor could not judge at all, and why (a core input missing): with any of these
    /// an empty `findings` does not mean healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<String>,
    /// Rule by rule, the subjects not judged and the input each lacked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unjudged: Vec<NotJudged>,
    #[serde(default)]
    pub rules: RuleCounts,
    /// How evenly each device's queue vectors shared its interrupts over the load's window
    /// (the sample, or the average since boot `load.source` says): CV and normalized spread
    /// as `top` and ynltool's `qstats balance` give them (`netsteer_host::balance`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balance: Vec<QueueBalance>,
}

impl Report {
    /// Healthy is said only when every rule that applied judged every subject, no core part
    /// of the host was blind, and nothing was found.
    pub fn healthy(&self) -> bool {
        self.findings.is_empty() && self.not_judged.is_empty() && self.unjudged.is_empty()
    }
}

impl Report {
    /// 1 when any finding is a warning or worse (the CLI exits with it), else 0.
    pub fn exit_code(&self) -> u8 {
        u8::from(
            self.findings
                .iter()
                .any(|f| f.severity >= Severity::Warning),
        )
    }
}

fn summarize(view: &HostView) -> HostSummary {
    HostSummary {
        kernel: view.kernel.known().cloned(),
        online_cpus: view.topology.online.to_list(),
        numa_nodes: match view.topology.numa_unknown {
            Some(_) => None,
            None => Some(view.topology.nodes.len().max(1)),
        },
        isolated_cpus: view
            .topology
            .isolated
            .known()
            .filter(|s| !s.is_empty())
            .map(|s| s.to_list()),
        irqbalance_running: view.irqbalance.known().map(|i| i.running),
        nics: view
            .nics
            .iter()
            .filter(|n| n.kind != "loopback")
            .map(|n| NicSummary {
                name: n.name.clone(),
                kind: n.kind.clone(),
                driver: n.driver.known().cloned(),
                numa_node: n.numa_node.known().copied(),
                rx_queues: n.rx_queues.len(),
                tx_queues: n.tx_queues.len(),
                queue_irqs: n.queue_irqs().count(),
                queues_unknown: n.queues_unknown.clone(),
            })
            .collect(),
        container_view: view.container_view(),
    }
}

/// Runs every rule. Pure: the same inputs always give the same report.
pub fn diagnose(view: &HostView, load: Option<&Load>, goal: Goal, app: Option<&App>) -> Report {
    diagnose_traced(view, load, goal, app, None)
}

/// As [`diagnose`], with the stage latencies of `netsteer trace` as evidence.
pub fn diagnose_traced(
    view: &HostView,
    load: Option<&Load>,
    goal: Goal,
    app: Option<&App>,
    trace: Option<&crate::model::load::Trace>,
) -> Report {
    let mut ctx = Ctx::new(view, load, goal, app);
    ctx.trace = trace;
    // Knowledge before judgement: each rule runs, then its inputs are checked for the subjects
    // it found nothing on; what it could not judge while running (Ctx::not_judged) joins them.
    let mut findings: Vec<Finding> = Vec::new();
    let mut blind: Vec<NotJudged> = Vec::new();
    let mut rules = RuleCounts::default();
    for r in RULES.iter().filter(|r| r.when.applies(&ctx)) {
        let found = (r.check)(&ctx);
        let on: Vec<String> = found
            .iter()
            .flat_map(|f| f.subjects.devices.iter().cloned())
            .collect();
        let host = found.iter().any(|f| f.subjects.devices.is_empty());
        let mut mine = unjudged(&ctx, r.id, r.reads, r.scope, &on, host);
        mine.extend(
            ctx.take_blind()
                .into_iter()
                .filter(|b| !on.contains(&b.subject))
                .map(NotJudged::from),
        );
        mine.sort();
        mine.dedup();
        rules.applied += 1;
        if mine.is_empty() {
            rules.judged += 1;
        } else {
            rules.not_judged += 1;
        }
        blind.extend(mine);
        findings.extend(found);
    }
    // Stable: within a severity, rule order (the order of RULES) is kept.
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let mut counts = Counts::default();
    for f in &findings {
        match f.severity {
            Severity::Critical => counts.critical += 1,
            Severity::Warning => counts.warning += 1,
            Severity::Info => counts.info += 1,
        }
    }
    Report {
        schema_version: REPORT_SCHEMA_VERSION,
        goal,
        load: load.map(|l| LoadInfo {
            source: l.source,
            seconds: l.seconds,
        }),
        host: summarize(view),
        findings,
        counts,
        problems: view.problems.clone(),
        not_judged: blind_spots(view, load),
        unjudged: blind,
        rules,
        balance: load.map_or_else(Vec::new, |l| {
            let rate: std::collections::BTreeMap<u32, f64> =
                l.cpu.irqs.iter().map(|r| (r.irq, r.total)).collect();
            balance::irq_balance(&balance::live_queue_roles(view), |irq| {
                rate.get(&irq).copied()
            })
        }),
    }
}

/// The parts of the host the view could not see at all, each with the rules it blinds.
fn blind_spots(view: &HostView, load: Option<&Load>) -> Vec<String> {
    let mut out = Vec::new();
    // Interfaces the counters name that the interface list lacks: their NIC rules cannot run.
    let listed = !view
        .problems
        .iter()
        .any(|p| p.ends_with("(no interfaces listed)"));
    if let Some(l) = load.filter(|_| listed) {
        let unlisted: Vec<&str> = l
            .net
            .devices
            .iter()
            .map(|d| d.name.as_str())
            .filter(|d| *d != "lo" && view.nic(d).is_none())
            .collect();
        if !unlisted.is_empty() {
            let more = unlisted.len().saturating_sub(8);
            let mut names = unlisted
                .iter()
                .take(8)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            if more > 0 {
                names.push_str(&format!(" and {more} more"));
            }
            out.push(format!(
                "every NIC rule for {names}: the counters (/proc/net/dev) name them but /sys/class/net does not list them"
            ));
        }
    }
    // Queue vectors no listed interface owns or resembles (in a container, every NIC's).
    let orphans: Vec<String> = view
        .foreign_vectors
        .iter()
        .filter(|v| !view.nics.iter().any(|n| v.looks_like(n)))
        .map(|v| format!("{} ({})", v.irq, v.names.join(",")))
        .collect();
    if !orphans.is_empty() && view.container_view().is_none() {
        let more = orphans.len().saturating_sub(4);
        let mut named = orphans.into_iter().take(4).collect::<Vec<_>>().join(", ");
        if more > 0 {
            named.push_str(&format!(" and {more} more"));
        }
        out.push(format!(
            "every NIC rule for the devices of IRQs {named}: /proc/interrupts names these queue vectors but no listed interface owns them"
        ));
    }
    if let Some(why) = view.irqs_unknown() {
        out.push(format!(
            "IRQ placement (spread, remote NUMA, RSS and XPS rules): {why}"
        ));
    }
    if let Some(why) = view
        .problems
        .iter()
        .find(|p| p.ends_with("(no interfaces listed)"))
    {
        out.push(format!("every NIC rule: {why}"));
    }
    let unknown: Vec<&str> = view
        .nics
        .iter()
        .filter(|n| n.kind == netsteer_host::nic::KIND_UNKNOWN)
        .map(|n| n.name.as_str())
        .collect();
    if !unknown.is_empty() {
        out.push(format!(
            "NIC rules for {}: the tree does not say what these interfaces are (no sysfs link to a device or to /sys/devices/virtual)",
            unknown.join(", ")
        ));
    }
    if let Some(why) = view.container_view() {
        out.push(format!(
            "every NIC rule for the host's own NICs: {why}; they are judged from the host (doctor there, or doctor --root on its snapshot)"
        ));
    }
    if view.topology.online.is_empty() {
        out.push("every CPU rule: no online CPU could be read (cpu/online, /proc/stat, cpuN directories)".into());
    }
    out
}
