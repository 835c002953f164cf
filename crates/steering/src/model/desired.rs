//! What `netsteer tune` plans, applies and journals: one [`Item`] per knob, each naming its
//! target, the value found, the value wanted and why.

use netsteer_host::CpuSet;
use netsteer_host::ethtool::NicKnob;
use serde::{Deserialize, Serialize};
use std::fmt;

pub use crate::model::knob::Target;

pub const PLAN_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Profile {
    /// Shortest round trips: busy polling, no interrupt coalescing, no flow control pauses.
    Latency,
    /// Most packets per CPU: every queue in use, RPS/RFS over the local CPUs, bigger softirq
    /// budgets and backlogs, adaptive coalescing.
    Throughput,
    /// Spread the work (queues, IRQs, RPS/RFS, XPS) without the latency or CPU-hungry extras.
    Balanced,
    /// No profile: only the explicit knobs given with `--set PATH=VALUE`.
    None,
}

impl Profile {
    /// The profile that tunes for `goal` (doctor's `--goal` and tune's profiles are the same
    /// three aims).
    pub fn for_goal(goal: crate::model::load::Goal) -> Profile {
        use crate::model::load::Goal;
        match goal {
            Goal::Latency => Profile::Latency,
            Goal::Throughput => Profile::Throughput,
            Goal::Balanced => Profile::Balanced,
        }
    }
}

/// Per-NAPI settings (netdev netlink NAPI_SET), named after the modes of
/// Documentation/networking/napi.rst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum NapiMode {
    /// Interrupt-driven: no hard-IRQ deferral, no IRQ suspension, no NAPI kthread (the
    /// kernel's defaults).
    Irq,
    /// For applications that busy-poll with SO_PREFER_BUSY_POLL: defer-hard-irqs 2 and
    /// gro-flush-timeout 200 µs keep the queue's interrupts off while the application polls.
    PreferBusyPoll,
    /// IRQ suspension (6.13+) for epoll busy pollers (EPIOCSPARAMS prefer_busy_poll): as
    /// prefer-busy-poll, plus irq-suspend-timeout 20 ms.
    IrqSuspend,
    /// Each NAPI polled by its own kernel thread (`napi/<dev>-<id>`), which the scheduler
    /// places and which can be pinned, instead of in softirq context.
    Threaded,
    /// Threaded busy polling (Linux 6.19, netdev.yaml `napi-threaded: busy-poll`): the NAPI's
    /// kthread polls without stopping and its IRQ stays off; it burns a whole CPU, so pin it.
    ThreadedPoll,
}

/// The first kernel with threaded busy polling: the series "Add support to do threaded napi
/// busy poll" was merged into net-next on 2025-11-03, after 6.18's merge window.
pub const THREADED_POLL_SINCE: (u32, u32) = (6, 19);
/// The first kernel with per-NAPI settings over netdev netlink (NAPI_SET) and IRQ suspension.
pub const NAPI_SET_SINCE: (u32, u32) = (6, 13);

/// `(major, minor)` of a kernel release string (`6.12.57+deb13-amd64` → (6, 12)).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

impl NapiMode {
    /// The settings the mode writes, with why.
    pub fn settings(self) -> &'static [(netsteer_host::netdev::NapiAttr, u64, &'static str)] {
        use netsteer_host::netdev::NapiAttr::*;
        const DEFER: &str = "napi.rst: interrupts stay masked for this many empty polls, so a busy-polling application keeps the queue to itself";
        const GRO: &str =
            "napi.rst: the timer that ends a deferral if the application stops polling";
        match self {
            NapiMode::Irq => &[
                (
                    DeferHardIrqs,
                    0,
                    "interrupt-driven: every packet raises its IRQ at once",
                ),
                (
                    GroFlushTimeout,
                    0,
                    "interrupt-driven: no timer holds packets back",
                ),
                (
                    IrqSuspendTimeout,
                    0,
                    "interrupt-driven: IRQs are never suspended",
                ),
                (Threaded, 0, "NAPI runs in softirq on the IRQ's CPU"),
            ],
            NapiMode::PreferBusyPoll => &[
                (DeferHardIrqs, 2, DEFER),
                (GroFlushTimeout, 200_000, GRO),
                (IrqSuspendTimeout, 0, "prefer-busy-poll without suspension"),
            ],
            NapiMode::IrqSuspend => &[
                (DeferHardIrqs, 2, DEFER),
                (GroFlushTimeout, 200_000, GRO),
                (
                    IrqSuspendTimeout,
                    20_000_000,
                    "napi.rst: IRQs stay suspended while the epoll busy poller finds work, up to 20 ms (>> gro-flush-timeout); acts only with prefer_busy_poll",
                ),
            ],
            NapiMode::Threaded => &[(
                Threaded,
                1,
                "a kthread per NAPI: schedulable and pinnable, off the IRQ's CPU",
            )],
            NapiMode::ThreadedPoll => &[(
                Threaded,
                2,
                "napi.rst, threaded busy polling: the NAPI's kthread polls the queue continuously and its interrupt stays off",
            )],
        }
    }
}

impl fmt::Display for NapiMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NapiMode::Irq => "irq",
            NapiMode::PreferBusyPoll => "prefer-busy-poll",
            NapiMode::IrqSuspend => "irq-suspend",
            NapiMode::Threaded => "threaded",
            NapiMode::ThreadedPoll => "threaded-poll",
        })
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Profile::Latency => "latency",
            Profile::Throughput => "throughput",
            Profile::Balanced => "balanced",
            Profile::None => "none",
        })
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latency" => Ok(Profile::Latency),
            "throughput" => Ok(Profile::Throughput),
            "balanced" => Ok(Profile::Balanced),
            "none" => Ok(Profile::None),
            _ => Err(format!(
                "unknown profile {s:?} (latency, throughput, balanced or none)"
            )),
        }
    }
}

/// How two values of a target are compared: a mask `00000003` is the list `0-1`, an int
/// `0600` is 384 and `4096\t87380` is `4096 87380`. Not a value the kernel changes on write
/// (it rounds `rps_flow_cnt` and `rps_sock_flow_entries` up to a power of two): the planner
/// desires powers of two there, and a `--set` of another is refused before anything is
/// written, with the count that would hold (`planner::rounded_by_the_kernel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// A hex CPU (or queue) mask, compared as a set.
    Mask,
    /// A CPU list (`0-3,8`), compared as a set.
    List,
    /// An integer.
    Int,
    /// Anything else, compared after trimming whitespace.
    Text,
}

/// A number as a sysctl write parses it: an optional '-', then digits in the base their
/// prefix says (0x hex, a leading 0 octal, else decimal), as `proc_get_long` does with
/// `strtoul_lenient(.., 0, ..)` after its `isdigit` check (kernel/sysctl.c); so "+5" is no
/// number (EINVAL) and "0600" is 384.
fn kernel_int(word: &str) -> Option<i128> {
    let (neg, digits) = match word.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, word),
    };
    if !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let value = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i128::from_str_radix(hex, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        i128::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse::<i128>().ok()?
    };
    Some(if neg { -value } else { value })
}

impl Format {
    pub fn same(self, a: &str, b: &str) -> bool {
        match self {
            Format::Mask => match (CpuSet::parse_mask(a), CpuSet::parse_mask(b)) {
                (Ok(x), Ok(y)) => x == y,
                _ => a.trim() == b.trim(),
            },
            Format::List => match (CpuSet::parse_list(a, None), CpuSet::parse_list(b, None)) {
                (Ok(x), Ok(y)) => x == y,
                _ => a.trim() == b.trim(),
            },
            // Word by word, so a vector sysctl written "4096 131072 6291456" is the one the
            // kernel reads back tab-separated (`__do_proc_dointvec` puts '\t' between
            // values); each word a number as the kernel parses it, else text.
            Format::Int => {
                let (x, y): (Vec<&str>, Vec<&str>) = (
                    a.split_whitespace().collect(),
                    b.split_whitespace().collect(),
                );
                x.len() == y.len()
                    && x.iter()
                        .zip(&y)
                        .all(|(p, q)| match (kernel_int(p), kernel_int(q)) {
                            (Some(m), Some(n)) => m == n,
                            _ => p == q,
                        })
            }
            Format::Text => a.trim() == b.trim(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemKind {
    Irqbalance,
    Channels,
    Feature,
    Coalesce,
    Pause,
    Rss,
    IrqAffinity,
    Rps,
    RfsTable,
    RfsFlowCnt,
    Xps,
    Sysctl,
    /// A per-NAPI setting (netdev netlink).
    Napi,
    /// A receive flow-steering (n-tuple) rule.
    Ntuple,
    /// A process's CPU affinity (a lane pins its service).
    Affinity,
}

impl ItemKind {
    /// The kind of a NIC setting: ring sizes go with channel counts (both recreate the
    /// queues), flow-hash fields with the RSS table.
    pub fn of_nic(knob: &NicKnob) -> ItemKind {
        match knob {
            NicKnob::Channels(_) | NicKnob::Rings(_) => ItemKind::Channels,
            NicKnob::Coalesce(_) => ItemKind::Coalesce,
            NicKnob::Pause(_) => ItemKind::Pause,
            NicKnob::RssIndirection | NicKnob::FlowHash(_) => ItemKind::Rss,
            NicKnob::Napi(..) => ItemKind::Napi,
            NicKnob::Ntuple(_) => ItemKind::Ntuple,
            NicKnob::Feature(_) => ItemKind::Feature,
        }
    }

    /// Order of application: queues exist before they are steered (a channel change recreates
    /// queue kobjects with RPS/XPS reset, knobs.md 4.6), IRQs are pinned before the RPS masks
    /// that avoid their CPUs, and irqbalance is dealt with before any IRQ moves.
    pub fn phase(self) -> u8 {
        match self {
            ItemKind::Irqbalance => 0,
            ItemKind::Channels => 1,
            // After the RSS table and the ntuple-filters feature of the same phase (push order).
            ItemKind::Feature
            | ItemKind::Coalesce
            | ItemKind::Pause
            | ItemKind::Rss
            | ItemKind::Ntuple => 2,
            // After channels and features: a channel change or GRO on (veth) makes the NAPIs.
            ItemKind::IrqAffinity | ItemKind::Napi => 3,
            ItemKind::Rps | ItemKind::RfsTable | ItemKind::RfsFlowCnt | ItemKind::Xps => 4,
            ItemKind::Sysctl => 5,
            // Last: the service moves to its CPU once the queue's work is there.
            ItemKind::Affinity => 6,
        }
    }
}

impl fmt::Display for ItemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ItemKind::Irqbalance => "irqbalance",
            ItemKind::Channels => "channels",
            ItemKind::Feature => "feature",
            ItemKind::Coalesce => "coalesce",
            ItemKind::Pause => "pause",
            ItemKind::Napi => "napi",
            ItemKind::Ntuple => "ntuple",
            ItemKind::Rss => "rss",
            ItemKind::IrqAffinity => "irq-affinity",
            ItemKind::Rps => "rps",
            ItemKind::RfsTable => "rfs-table",
            ItemKind::RfsFlowCnt => "rfs-flow-cnt",
            ItemKind::Xps => "xps",
            ItemKind::Sysctl => "sysctl",
            ItemKind::Affinity => "affinity",
        })
    }
}

/// What apply will do with an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", content = "why", rename_all = "lowercase")]
pub enum Action {
    /// current → desired.
    Change,
    /// Already as wanted.
    Keep,
    /// Left alone, with the reason (a managed IRQ, a knob the driver lacks, a global sysctl in
    /// a namespace, irqbalance running ...).
    Skip(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Stable key: `irq/45`, `rps/eth0/rx-0`, `nic/eth0/feature/rx-gro`, `sysctl/net.core.busy_poll`.
    pub id: String,
    pub kind: ItemKind,
    pub target: Target,
    pub format: Format,
    /// What names the thing besides its id, for drift checks: an IRQ's action name
    /// (`virtio2-input.0`), so a renumbered IRQ is recognised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The value read now (`None` when it could not be read).
    pub current: Option<String>,
    pub desired: String,
    pub reason: String,
    #[serde(flatten)]
    pub action: Action,
    /// Written even when it already reads as desired: an RSS table given explicitly, or after
    /// a channel change, where the device may not follow the table the driver reports
    /// (virtio-net on Linux 6.1 keeps its copy while QEMU drops RSS on the queue-count command).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewrite: bool,
}

impl Item {
    pub fn phase(&self) -> u8 {
        self.kind.phase()
    }

    /// The device a NIC item is about.
    pub fn target_device(&self) -> Option<&str> {
        match &self.target {
            Target::Nic { dev, .. } => Some(dev),
            _ => None,
        }
    }

    /// The shell command that makes this item's change by hand, for a file target: a sysctl
    /// as `sysctl -w`, anything else as `echo VALUE > PATH` (doctor prints these as the exact
    /// fix, so they are the very writes `tune apply` would make).
    pub fn shell_command(&self) -> Option<String> {
        let path = self.target.path()?;
        Some(match self.target.sysctl_name() {
            Some(key) => format!("sysctl -w {key}={}", self.desired),
            None => format!("echo {} > {path}", self.desired),
        })
    }
}

/// The desired state of a host for one profile, and how to get there from the current one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub schema_version: u32,
    pub profile: Profile,
    /// The interfaces the plan covers.
    pub devices: Vec<String>,
    /// `--cpus`: the CPUs kernel packet work may use (all usable CPUs when absent).
    pub cpus: Option<String>,
    pub items: Vec<Item>,
    /// Things the plan chose not to do, and why (whole-device decisions).
    pub notes: Vec<String>,
}

impl Plan {
    pub fn changes(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|i| i.action == Action::Change)
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        let c = self
            .items
            .iter()
            .filter(|i| i.action == Action::Change)
            .count();
        let k = self
            .items
            .iter()
            .filter(|i| i.action == Action::Keep)
            .count();
        (c, k, self.items.len() - c - k)
    }
}

#[cfg(test)]
mod format_tests {
    use super::Format;

    #[test]
    fn an_int_is_compared_word_by_word_as_the_kernel_parses_it() {
        assert!(Format::Int.same("4096\t131072\t6291456\n", "4096 131072 6291456"));
        assert!(!Format::Int.same("4096\t131072", "4096 131072 6291456"));
        assert!(Format::Int.same("384", "0600"));
        assert!(!Format::Int.same("600", "0600"));
        assert!(Format::Int.same("32768", "0x8000"));
        assert!(!Format::Int.same("4096", "+4096"));
        assert!(Format::Int.same("-1", " -1\n"));
        assert!(Format::Int.same("32768 60999", "32768\t60999"));
        assert!(!Format::Int.same("cubic", "bbr"));
        assert!(Format::Int.same("bbr\n", "bbr"));
    }
}
