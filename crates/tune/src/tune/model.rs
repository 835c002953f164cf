//! What `netsteer tune` plans, applies and journals: one [`Item`] per knob, each naming its
//! target, the value found, the value wanted and why.

use netsteer_host::CpuSet;
use netsteer_host::ethtool::NicKnob;
use serde::{Deserialize, Serialize};
use std::fmt;

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

/// Where a value lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Target {
    /// A /proc or /sys file, read and written through the `HostFs` root.
    File { path: String },
    /// A NIC setting over ethtool netlink (or a tree's recorded NIC state).
    Nic { dev: String, knob: NicKnob },
    /// A systemd service's running state (`active` / `inactive`); live host only.
    Service { name: String },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::File { path } => f.write_str(path),
            Target::Nic { dev, knob } => write!(f, "ethtool {dev} {knob}"),
            Target::Service { name } => write!(f, "service {name}"),
        }
    }
}

/// How two values of a target are compared (the kernel prints `00000003` for `3`, rounds
/// `rps_flow_cnt` up to a power of two, ...).
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
            Format::Int => match (a.trim().parse::<i64>(), b.trim().parse::<i64>()) {
                (Ok(x), Ok(y)) => x == y,
                _ => a.trim() == b.trim(),
            },
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
}

impl ItemKind {
    /// Order of application: queues exist before they are steered (a channel change recreates
    /// queue kobjects with RPS/XPS reset, knobs.md 4.6), IRQs are pinned before the RPS masks
    /// that avoid their CPUs, and irqbalance is dealt with before any IRQ moves.
    pub fn phase(self) -> u8 {
        match self {
            ItemKind::Irqbalance => 0,
            ItemKind::Channels => 1,
            ItemKind::Feature | ItemKind::Coalesce | ItemKind::Pause | ItemKind::Rss => 2,
            ItemKind::IrqAffinity => 3,
            ItemKind::Rps | ItemKind::RfsTable | ItemKind::RfsFlowCnt | ItemKind::Xps => 4,
            ItemKind::Sysctl => 5,
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
            ItemKind::Rss => "rss",
            ItemKind::IrqAffinity => "irq-affinity",
            ItemKind::Rps => "rps",
            ItemKind::RfsTable => "rfs-table",
            ItemKind::RfsFlowCnt => "rfs-flow-cnt",
            ItemKind::Xps => "xps",
            ItemKind::Sysctl => "sysctl",
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
}

impl Item {
    pub fn phase(&self) -> u8 {
        self.kind.phase()
    }

    /// The shell command that makes this item's change by hand, for a file target: a sysctl
    /// as `sysctl -w`, anything else as `echo VALUE > PATH` (doctor prints these as the exact
    /// fix, so they are the very writes `tune apply` would make).
    pub fn shell_command(&self) -> Option<String> {
        let Target::File { path } = &self.target else {
            return None;
        };
        Some(match path.strip_prefix("/proc/sys/") {
            Some(key) => format!("sysctl -w {}={}", key.replace('/', "."), self.desired),
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
