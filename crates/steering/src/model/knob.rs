//! What a knob is and how its id is spelled, in one file.
//!
//! What a knob is: [`Target`], one variant per sort of thing netsteer writes, with the path
//! grammar of the files among them parsed here and nowhere else ([`Target::file`]) and printed
//! back by [`Target::path`].
//!
//! Why typed and not a path: a file's path says what it is (an IRQ's affinity, a queue's RPS
//! mask, a sysctl), and every reader used to re-parse it for that (the kind, the format, the
//! device, the IRQ a saved plan renumbers). Plan files, journals and `--json` keep the spelling
//! they always had, `{"type": "file", "path": "/proc/irq/41/smp_affinity_list"}`, through
//! [`Wire`]: reading one back parses the path into its variant, so no user sees the type.
//!
//! A path that names no knob stays a [`Target::File`], which [`Target::knob_check`] refuses:
//! a plan file or journal is someone's data, and what it names must be said back to them as
//! written, not dropped.
//!
//! ## How a knob's id is spelled
//!
//! What a plan item is called, in one place: the id grammar (`irq/41`, `rps/eth0/rx-3`,
//! `nic/eth0/coalesce/rx-usecs`, …) spelled by [`ItemId`]'s `Display` and read back by
//! [`ItemId::parse`], and the knob file each id stands for ([`ItemId::target`]).
//!
//! Why an id is its own type and not derived from the [`Target`]: the same file can be two
//! items with two names (`/proc/sys/net/core/busy_poll` is `sysctl/net.core.busy_poll` when a
//! profile plans it and `set/proc/sys/net/core/busy_poll` when `--set` names it), and some items
//! name what has no single file (`rps/eth0` for a device whose `queues/` could not be listed).
//! Plan files, journals and `--json` carry ids as text; this module is the only writer and
//! reader of that text, so a new kind of item cannot be spelled two ways.

use netsteer_host::ethtool::NicKnob;
use netsteer_host::netdev::{NapiAttr, NtupleKey, NtupleProto};
use serde::{Deserialize, Serialize};
use std::fmt;

use crate::model::desired::{Format, ItemKind};

/// An IRQ's affinity file (Documentation/core-api/irq/irq-affinity.rst): the CPU list the
/// planner writes, or the hex mask a hand-written plan may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IrqFile {
    /// `smp_affinity_list`: a CPU list (`0-3,8`).
    List,
    /// `smp_affinity`: a hex CPU mask.
    Mask,
}

impl IrqFile {
    pub fn file(self) -> &'static str {
        match self {
            IrqFile::List => "smp_affinity_list",
            IrqFile::Mask => "smp_affinity",
        }
    }
}

/// A per-queue file netsteer plans (Documentation/networking/scaling.rst): the RPS mask and
/// RFS flow count of a receive queue, the XPS masks (by CPU, by receive queue) of a transmit
/// queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueFile {
    RpsCpus,
    RpsFlowCnt,
    XpsCpus,
    XpsRxqs,
}

impl QueueFile {
    pub const ALL: [QueueFile; 4] = [
        QueueFile::RpsCpus,
        QueueFile::RpsFlowCnt,
        QueueFile::XpsCpus,
        QueueFile::XpsRxqs,
    ];

    /// An item id's first word: `rps`, `rfs`, `xps` (and `xps-rxqs`, which no planner writes).
    pub fn word(self) -> &'static str {
        match self {
            QueueFile::RpsCpus => "rps",
            QueueFile::RpsFlowCnt => "rfs",
            QueueFile::XpsCpus => "xps",
            QueueFile::XpsRxqs => "xps-rxqs",
        }
    }

    /// The queue directory's prefix: `rx` or `tx`.
    pub fn dir(self) -> &'static str {
        match self {
            QueueFile::XpsCpus | QueueFile::XpsRxqs => "tx",
            QueueFile::RpsCpus | QueueFile::RpsFlowCnt => "rx",
        }
    }

    /// The file's name in the queue's sysfs directory.
    pub fn file(self) -> &'static str {
        match self {
            QueueFile::RpsCpus => "rps_cpus",
            QueueFile::RpsFlowCnt => "rps_flow_cnt",
            QueueFile::XpsCpus => "xps_cpus",
            QueueFile::XpsRxqs => "xps_rxqs",
        }
    }

    /// The kind of item a file of this sort is.
    pub fn kind(self) -> ItemKind {
        match self {
            QueueFile::RpsCpus => ItemKind::Rps,
            QueueFile::RpsFlowCnt => ItemKind::RfsFlowCnt,
            QueueFile::XpsCpus | QueueFile::XpsRxqs => ItemKind::Xps,
        }
    }

    /// A count for rps_flow_cnt, a hex mask (of CPUs, or of receive queues) for the others.
    pub fn format(self) -> Format {
        match self {
            QueueFile::RpsFlowCnt => Format::Int,
            _ => Format::Mask,
        }
    }

    pub fn of_word(w: &str) -> Option<QueueFile> {
        Self::ALL.into_iter().find(|f| f.word() == w)
    }

    fn of_file(name: &str) -> Option<QueueFile> {
        Self::ALL.into_iter().find(|f| f.file() == name)
    }
}

/// A device-wide NAPI default in sysfs (Documentation/ABI/testing/sysfs-class-net,
/// Documentation/networking/napi.rst): what a search tries where the kernel has no per-NAPI
/// settings, and what `--napi` writes on such kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceFile {
    GroFlushTimeout,
    NapiDeferHardIrqs,
    Threaded,
}

impl DeviceFile {
    const ALL: [DeviceFile; 3] = [
        DeviceFile::GroFlushTimeout,
        DeviceFile::NapiDeferHardIrqs,
        DeviceFile::Threaded,
    ];

    pub fn file(self) -> &'static str {
        match self {
            DeviceFile::GroFlushTimeout => "gro_flush_timeout",
            DeviceFile::NapiDeferHardIrqs => "napi_defer_hard_irqs",
            DeviceFile::Threaded => "threaded",
        }
    }

    pub fn of_file(name: &str) -> Option<DeviceFile> {
        Self::ALL.into_iter().find(|f| f.file() == name)
    }
}

/// Where a value lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "Wire", into = "Wire")]
pub enum Target {
    /// A sysctl under `/proc/sys/net/`, by its path below `/proc/sys` (`net/core/busy_poll`).
    /// Slashes, not sysctl's dots: a device's name may hold a dot (`net/ipv4/conf/eth0.100/
    /// rp_filter`), so the dotted form does not say where the file is.
    Sysctl { name: String },
    /// An IRQ's affinity, `/proc/irq/N/smp_affinity_list` (or `smp_affinity`).
    IrqAffinity { irq: u32, file: IrqFile },
    /// A queue's file, `/sys/class/net/DEV/queues/{rx,tx}-N/FILE` (the direction is the
    /// file's: RPS and RFS on receive queues, XPS on transmit queues).
    Queue {
        dev: String,
        queue: u32,
        file: QueueFile,
    },
    /// A device's NAPI default, `/sys/class/net/DEV/FILE`.
    DeviceFile { dev: String, file: DeviceFile },
    /// Any other file: no knob. It comes from a plan file or journal someone wrote, or is the
    /// `queues/` directory a skipped item names; [`Target::knob_check`] refuses to write it.
    File { path: String },
    /// A NIC setting over ethtool netlink (or a tree's recorded NIC state).
    Nic { dev: String, knob: NicKnob },
    /// A systemd service's running state (`active` / `inactive`); live host only.
    Service { name: String },
    /// The CPUs every thread of one process may run on (`Cpus_allowed_list`, written with
    /// sched_setaffinity through `taskset -a`); live host only. `start` is the process's
    /// start time (`/proc/PID/stat` field 22): a pid reused by another process is not it.
    Process { pid: u32, start: u64 },
    /// The CPUs a NAPI's kthread may run on (`napi/DEV-ID`, its pid from netdev netlink); ""
    /// when the NAPI has no kthread. Live host only.
    NapiThread { dev: String, napi: u32 },
}

/// The systemd units a plan may start or stop: irqbalance, which would move pinned IRQs
/// back (the planner's `stop_irqbalance`). No other unit is a knob.
const KNOB_SERVICES: [&str; 2] = ["irqbalance", "irqbalance.service"];

impl Target {
    /// The target a file's path names: a knob's variant when the path is one, spelled exactly
    /// as [`Target::path`] spells it back (numbers without sign or leading zero, no empty,
    /// `.` or `..` component, a device named as the kernel names devices), else
    /// [`Target::File`]. `/proc/sys/net/../../../etc/shadow` matches the sysctl pattern
    /// component by component, hence the component check: this is the allow-list a journal's
    /// targets are held to before a rollback writes them, so it must not admit a way out.
    pub fn file(path: &str) -> Target {
        Self::knob_file(path).unwrap_or_else(|| Target::File { path: path.into() })
    }

    fn knob_file(path: &str) -> Option<Target> {
        use crate::model::planner::valid_device_name;
        let parts: Vec<&str> = path.split('/').collect();
        if parts
            .iter()
            .skip(1)
            .any(|c| c.is_empty() || *c == "." || *c == "..")
        {
            return None;
        }
        // A number as Display writes it, so that the path reads back as written.
        let num = |t: &str| t.parse::<u32>().ok().filter(|n| n.to_string() == t);
        let dev = |d: &str| valid_device_name(d).then(|| d.to_string());
        Some(match parts.as_slice() {
            ["", "proc", "sys", "net", rest @ ..] if !rest.is_empty() => Target::Sysctl {
                name: parts[3..].join("/"),
            },
            ["", "proc", "irq", n, f] => Target::IrqAffinity {
                irq: num(n)?,
                file: match *f {
                    "smp_affinity_list" => IrqFile::List,
                    "smp_affinity" => IrqFile::Mask,
                    _ => return None,
                },
            },
            ["", "sys", "class", "net", d, "queues", q, f] => {
                let file = QueueFile::of_file(f)?;
                let index = q.strip_prefix(file.dir())?.strip_prefix('-')?;
                Target::Queue {
                    dev: dev(d)?,
                    queue: num(index)?,
                    file,
                }
            }
            ["", "sys", "class", "net", d, f] => Target::DeviceFile {
                dev: dev(d)?,
                file: DeviceFile::of_file(f)?,
            },
            _ => return None,
        })
    }

    /// The file this target is read and written through (below the `HostFs` root), for the
    /// variants that are files.
    pub fn path(&self) -> Option<String> {
        Some(match self {
            Target::Sysctl { name } => format!("/proc/sys/{name}"),
            Target::IrqAffinity { irq, file } => format!("/proc/irq/{irq}/{}", file.file()),
            Target::Queue { dev, queue, file } => format!(
                "/sys/class/net/{dev}/queues/{}-{queue}/{}",
                file.dir(),
                file.file()
            ),
            Target::DeviceFile { dev, file } => format!("/sys/class/net/{dev}/{}", file.file()),
            Target::File { path } => path.clone(),
            Target::Nic { .. }
            | Target::Service { .. }
            | Target::Process { .. }
            | Target::NapiThread { .. } => return None,
        })
    }

    /// A sysctl's name as sysctl(8) takes and prints it: dotted (`net.core.busy_poll`), or
    /// slashed where a component holds a dot itself (`net/ipv4/conf/eth0.100/rp_filter`:
    /// sysctl(8) reads either form, and only this one says where the file is).
    pub fn sysctl_name(&self) -> Option<String> {
        match self {
            Target::Sysctl { name } if name.contains('.') => Some(name.clone()),
            Target::Sysctl { name } => Some(name.replace('/', ".")),
            _ => None,
        }
    }

    /// The network device this knob belongs to, if any.
    pub fn device(&self) -> Option<&str> {
        match self {
            Target::Queue { dev, .. }
            | Target::DeviceFile { dev, .. }
            | Target::Nic { dev, .. }
            | Target::NapiThread { dev, .. } => Some(dev),
            Target::Sysctl { .. }
            | Target::IrqAffinity { .. }
            | Target::File { .. }
            | Target::Service { .. }
            | Target::Process { .. } => None,
        }
    }

    /// Ok when this target is one of the knobs netsteer writes, else why not. The list is
    /// closed: a `/proc/sys/net/` sysctl, an IRQ's affinity file, a queue's RPS/RFS/XPS file,
    /// a device's NAPI defaults (every variant [`Target::file`] makes), a NIC setting of a
    /// device named as the kernel names devices, irqbalance's unit, a process's or a NAPI
    /// kthread's CPUs. A plan file and a journal are data someone wrote: every write root
    /// makes from them (apply, rollback, recovery) passes here first, so a planted journal
    /// naming `/etc/...` or another unit is refused by name rather than restored.
    pub fn knob_check(&self) -> Result<(), String> {
        use crate::model::planner::valid_device_name;
        match self {
            // A file knob built in memory (an item id's target, a planner's queue) must be
            // the one its path parses to: a device name the kernel allows and this check
            // does not (U+3000 is no whitespace to the kernel's dev_valid_name) would
            // otherwise be written by apply and then, read back from the journal as a plain
            // file, refused by the rollback.
            Target::Sysctl { .. }
            | Target::IrqAffinity { .. }
            | Target::Queue { .. }
            | Target::DeviceFile { .. } => {
                let path = self.path().unwrap_or_default();
                if Target::file(&path) == *self {
                    Ok(())
                } else {
                    Err(format!(
                        "{path:?} is not a knob netsteer writes (not spelled as a knob's path)"
                    ))
                }
            }
            Target::File { path } => Err(format!(
                "{path:?} is not a knob netsteer writes (a /proc/sys/net sysctl, \
                 /proc/irq/N/smp_affinity[_list], a queue's rps_cpus, rps_flow_cnt, \
                 xps_cpus or xps_rxqs, or a device's gro_flush_timeout, \
                 napi_defer_hard_irqs or threaded)"
            )),
            Target::Nic { dev, .. } | Target::NapiThread { dev, .. } => {
                if valid_device_name(dev) {
                    Ok(())
                } else {
                    Err(format!("{dev:?} is not an interface name"))
                }
            }
            Target::Service { name } => {
                if KNOB_SERVICES.contains(&name.as_str()) {
                    Ok(())
                } else {
                    Err(format!(
                        "service {name:?} is not one netsteer starts or stops (only irqbalance)"
                    ))
                }
            }
            Target::Process { pid, .. } => {
                if *pid > 1 {
                    Ok(())
                } else {
                    Err(format!("process {pid} is not one netsteer pins"))
                }
            }
        }
    }

    /// The kind of knob this is, from the target itself (never from an id or a kind someone
    /// wrote beside it in a plan file or journal): what decides, for one, that an EPERM is a
    /// managed IRQ's refusal by design rather than a failed write. A file that is no knob
    /// reads as a sysctl (it never passes [`Target::knob_check`]).
    pub fn kind(&self) -> ItemKind {
        match self {
            // The global RFS table, sized beside the queues' rps_flow_cnt (scaling.rst, RFS).
            Target::Sysctl { name } if name == "net/core/rps_sock_flow_entries" => {
                ItemKind::RfsTable
            }
            Target::Sysctl { .. } | Target::File { .. } => ItemKind::Sysctl,
            Target::IrqAffinity { .. } => ItemKind::IrqAffinity,
            Target::Queue { file, .. } => file.kind(),
            Target::DeviceFile { .. } => ItemKind::Napi,
            Target::Nic { knob, .. } => ItemKind::of_nic(knob),
            Target::Service { .. } => ItemKind::Irqbalance,
            Target::Process { .. } | Target::NapiThread { .. } => ItemKind::Affinity,
        }
    }

    /// How this target's values compare, as every planner item of it says.
    pub fn format(&self) -> Format {
        match self {
            // A CPU mask the kernel parses with bitmap_parse and prints at its own width:
            // compared as a set, not as text.
            Target::Sysctl { name } if name == "net/core/flow_limit_cpu_bitmap" => Format::Mask,
            // A count compares as a number, word by word for a vector such as tcp_rmem's
            // three (`Format::Int`; a word that is no number as text): what the planner's
            // own sysctl items say, so that `--set` and a profile judge a value alike.
            Target::Sysctl { .. } | Target::DeviceFile { .. } => Format::Int,
            Target::IrqAffinity {
                file: IrqFile::List,
                ..
            } => Format::List,
            Target::IrqAffinity {
                file: IrqFile::Mask,
                ..
            } => Format::Mask,
            Target::Queue { file, .. } => file.format(),
            Target::File { .. } => Format::Text,
            Target::Nic {
                knob: NicKnob::RssIndirection | NicKnob::FlowHash(_) | NicKnob::Ntuple(_),
                ..
            } => Format::Text,
            Target::Nic { .. } => Format::Int,
            Target::Process { .. } | Target::NapiThread { .. } => Format::List,
            Target::Service { .. } => Format::Text,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // NAPI settings go over the netdev family, everything else over ethtool's.
            Target::Nic {
                dev,
                knob: knob @ NicKnob::Napi(..),
            } => write!(f, "netdev {dev} {knob}"),
            Target::Nic { dev, knob } => write!(f, "ethtool {dev} {knob}"),
            Target::Service { name } => write!(f, "service {name}"),
            Target::Process { pid, .. } => write!(f, "process {pid}"),
            Target::NapiThread { dev, napi } => write!(f, "kthread of {dev} napi {napi}"),
            file => f.write_str(&file.path().unwrap_or_default()),
        }
    }
}

/// A target as plans, journals and `--json` have always spelled it: a file by its path.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Wire {
    File { path: String },
    Nic { dev: String, knob: NicKnob },
    Service { name: String },
    Process { pid: u32, start: u64 },
    NapiThread { dev: String, napi: u32 },
}

impl From<Wire> for Target {
    fn from(w: Wire) -> Target {
        match w {
            Wire::File { path } => Target::file(&path),
            Wire::Nic { dev, knob } => Target::Nic { dev, knob },
            Wire::Service { name } => Target::Service { name },
            Wire::Process { pid, start } => Target::Process { pid, start },
            Wire::NapiThread { dev, napi } => Target::NapiThread { dev, napi },
        }
    }
}

impl From<Target> for Wire {
    fn from(t: Target) -> Wire {
        match t {
            Target::Nic { dev, knob } => Wire::Nic { dev, knob },
            Target::Service { name } => Wire::Service { name },
            Target::Process { pid, start } => Wire::Process { pid, start },
            Target::NapiThread { dev, napi } => Wire::NapiThread { dev, napi },
            file => Wire::File {
                path: file.path().unwrap_or_default(),
            },
        }
    }
}

// ---- Item ids: how a knob (or another item) is called in plans, journals and reports ----

/// A plan item's id. `Display` spells it as plans, journals and reports have always spelled
/// it; [`ItemId::parse`] reads that spelling back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemId {
    /// `irq/N`: the IRQ's affinity (`/proc/irq/N/smp_affinity_list`).
    Irq(u32),
    /// `rps/DEV/rx-N`, `rfs/DEV/rx-N`, `xps/DEV/tx-N`: one queue's file.
    Queue {
        dev: String,
        file: QueueFile,
        index: u32,
    },
    /// `rps/DEV`, `rfs/DEV`, `xps/DEV`: a device whose `queues/` could not be listed (one
    /// skipped item naming why, instead of none).
    Queues { dev: String, file: QueueFile },
    /// `nic/DEV/WORDS`: a NIC setting, its knob's words joined by `/`
    /// (`nic/eth0/channels/combined`, `nic/eth0/napi/8193/threaded`).
    Nic { dev: String, knob: NicKnob },
    /// `napi/DEV/FILE`: a device-wide NAPI default in sysfs (`gro_flush_timeout`,
    /// `napi_defer_hard_irqs`, `threaded`).
    NapiDefault { dev: String, file: String },
    /// `napi-thread/DEV/ID`: the CPUs of a NAPI's kthread.
    NapiThread { dev: String, napi: u32 },
    /// `service/NAME`: a systemd unit's running state.
    Service(String),
    /// `process/PID`: the CPUs of a process's threads.
    Process(u32),
    /// `sysctl/NAME`: a sysctl a profile plans, by its dotted name (`net.core.busy_poll`).
    Sysctl(String),
    /// `setPATH`: a file `--set PATH=VALUE` named (`set/proc/sys/net/core/busy_poll`).
    Set(String),
}

impl std::fmt::Display for ItemId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ItemId::Irq(n) => write!(f, "irq/{n}"),
            ItemId::Queue { dev, file, index } => {
                write!(f, "{}/{dev}/{}-{index}", file.word(), file.dir())
            }
            ItemId::Queues { dev, file } => write!(f, "{}/{dev}", file.word()),
            ItemId::Nic { dev, knob } => {
                write!(f, "nic/{dev}/{}", knob.to_string().replace(' ', "/"))
            }
            ItemId::NapiDefault { dev, file } => write!(f, "napi/{dev}/{file}"),
            ItemId::NapiThread { dev, napi } => write!(f, "napi-thread/{dev}/{napi}"),
            ItemId::Service(name) => write!(f, "service/{name}"),
            ItemId::Process(pid) => write!(f, "process/{pid}"),
            ItemId::Sysctl(name) => write!(f, "sysctl/{name}"),
            ItemId::Set(path) => write!(f, "set{path}"),
        }
    }
}

impl From<ItemId> for String {
    fn from(id: ItemId) -> String {
        id.to_string()
    }
}

impl ItemId {
    /// Reads an id back; None for text no planner writes (which a plan file may still carry
    /// as a label: [`check_id`]).
    pub fn parse(s: &str) -> Option<ItemId> {
        // Numbers as Display writes them: no sign, no leading zero (parse is its inverse).
        let num = |t: &str| t.parse::<u32>().ok().filter(|n| n.to_string() == t);
        if let Some(path) = s.strip_prefix("set/") {
            return Some(ItemId::Set(format!("/{path}")));
        }
        let (word, rest) = s.split_once('/')?;
        let parts: Vec<&str> = rest.split('/').collect();
        let nonempty = |t: &str| !t.is_empty();
        Some(match (word, parts.as_slice()) {
            ("irq", [n]) => ItemId::Irq(num(n)?),
            ("service", [name]) if nonempty(name) => ItemId::Service(name.to_string()),
            ("process", [pid]) => ItemId::Process(num(pid)?),
            ("sysctl", [name]) if nonempty(name) => ItemId::Sysctl(name.to_string()),
            ("napi", [dev, file]) if nonempty(dev) && nonempty(file) => ItemId::NapiDefault {
                dev: dev.to_string(),
                file: file.to_string(),
            },
            ("napi-thread", [dev, napi]) if nonempty(dev) => ItemId::NapiThread {
                dev: dev.to_string(),
                napi: num(napi)?,
            },
            ("nic", [dev, words @ ..]) if nonempty(dev) => ItemId::Nic {
                dev: dev.to_string(),
                knob: knob_of_words(words)?,
            },
            (w, [dev]) if nonempty(dev) => ItemId::Queues {
                dev: dev.to_string(),
                file: QueueFile::of_word(w)?,
            },
            (w, [dev, queue]) if nonempty(dev) => {
                let file = QueueFile::of_word(w)?;
                let index = queue.strip_prefix(file.dir())?.strip_prefix('-')?;
                ItemId::Queue {
                    dev: dev.to_string(),
                    file,
                    index: num(index)?,
                }
            }
            _ => return None,
        })
    }

    /// The IRQ an `irq/N` id names.
    pub fn irq_of(s: &str) -> Option<u32> {
        match ItemId::parse(s)? {
            ItemId::Irq(n) => Some(n),
            _ => None,
        }
    }

    /// The knob this id stands for, where the id alone says it: a process's needs its start
    /// time as well (a pid reused by another process is not it), so it has none here.
    pub fn target(&self) -> Option<Target> {
        Some(match self {
            ItemId::Irq(n) => Target::IrqAffinity {
                irq: *n,
                file: IrqFile::List,
            },
            ItemId::Queue { dev, file, index } => Target::Queue {
                dev: dev.clone(),
                queue: *index,
                file: *file,
            },
            // No file of its own: the directory that could not be listed (no knob).
            ItemId::Queues { dev, .. } => Target::File {
                path: format!("/sys/class/net/{dev}/queues"),
            },
            ItemId::Nic { dev, knob } => Target::Nic {
                dev: dev.clone(),
                knob: knob.clone(),
            },
            // Through the one path parser: a file it does not know stays no knob.
            ItemId::NapiDefault { dev, file } => {
                Target::file(&format!("/sys/class/net/{dev}/{file}"))
            }
            ItemId::NapiThread { dev, napi } => Target::NapiThread {
                dev: dev.clone(),
                napi: *napi,
            },
            ItemId::Service(name) => Target::Service { name: name.clone() },
            ItemId::Process(_) => return None,
            ItemId::Sysctl(name) => Target::file(&format!("/proc/sys/{}", name.replace('.', "/"))),
            ItemId::Set(path) => Target::file(path),
        })
    }
}

/// Ok when `id` may stand beside `target` in a plan or journal: an id netsteer writes names
/// that target (`irq/48` is IRQ 48's affinity file, list or mask; `process/7` is pid 7), and
/// other text is a label only. A plan file or journal is someone's data: an id that names one
/// knob beside a target that is another would have the report, the rollback and a saved
/// plan's renumbering speak of one knob while the other is written.
pub fn check_id(id: &str, target: &Target) -> Result<(), String> {
    let Some(parsed) = ItemId::parse(id) else {
        return Ok(());
    };
    // Beside the id's own target: an IRQ's mask file (a hand-written plan's), and a process
    // by its pid (the target adds the start time the id leaves out).
    let fits = parsed.target().as_ref() == Some(target)
        || match (&parsed, target) {
            (ItemId::Irq(n), Target::IrqAffinity { irq, .. }) => irq == n,
            (ItemId::Process(pid), Target::Process { pid: p, .. }) => pid == p,
            _ => false,
        };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "its id names another knob than its target {target}"
        ))
    }
}

/// What a plan file's or journal's entry must be before anything of it is journaled or
/// written: a knob ([`Target::knob_check`]) that its id, if netsteer spells it, names.
pub fn check_knob(id: &str, target: &Target) -> Result<(), String> {
    target.knob_check().and_then(|()| check_id(id, target))
}

/// True for a path that names a NIC setting, not a file: `--set`'s `nic/IF/GROUP/NAME` and
/// `nic/IF/napi/ATTR` share the first word of a NIC item's id (and, but for the per-NAPI
/// form, the id itself).
pub fn is_nic_path(path: &str) -> bool {
    path.starts_with("nic/")
}

/// The path `tune apply --set` names `target` by, which a watcher's change is written with:
/// a file's own path, a NIC setting's id (`nic/eth0/rss/indirection`). A knob of another kind
/// (a service, a process, a NAPI kthread) has no `--set` path: None.
pub fn set_path(target: &Target) -> Option<String> {
    match target {
        Target::Nic { dev, knob } if !matches!(knob, NicKnob::Napi(..)) => Some(
            ItemId::Nic {
                dev: dev.clone(),
                knob: knob.clone(),
            }
            .to_string(),
        ),
        other => other.path(),
    }
}

/// The target a `--set` path names ([`set_path`]'s inverse): an absolute path is a file, a
/// `nic/IF/GROUP/NAME` a NIC setting (the `--set` grammar, [`Knob::nic_knob`]).
///
/// [`Knob::nic_knob`]: crate::model::planner::Knob::nic_knob
pub fn target_of_set_path(path: &str) -> Result<Target, String> {
    if path.starts_with('/') {
        return Ok(Target::file(path));
    }
    if is_nic_path(path) {
        let (dev, knob, _) = crate::model::planner::Knob::nic_knob(path)?;
        return Ok(Target::Nic { dev, knob });
    }
    Err(format!(
        "{path:?} is neither a file nor a NIC setting (nic/IF/GROUP/NAME)"
    ))
}

/// The id an item made for `target` alone carries, as `--set` names it: `set/PATH` for a
/// file, the NIC setting's own id, else the target's own text.
pub fn set_id(target: &Target) -> String {
    match target {
        Target::Nic { dev, knob } => ItemId::Nic {
            dev: dev.clone(),
            knob: knob.clone(),
        }
        .to_string(),
        other => match other.path() {
            Some(path) => ItemId::Set(path).to_string(),
            None => other.to_string(),
        },
    }
}

/// The `--set` path of a per-NAPI setting for every NAPI of `dev` (`nic/eth0/napi/threaded`);
/// each NAPI's item is then `nic/eth0/napi/ID/threaded`.
pub fn every_napi_path(dev: &str, attr: NapiAttr) -> String {
    format!("nic/{dev}/napi/{attr}")
}

/// A NIC knob from the words of its id (its `Display` with spaces as `/`).
fn knob_of_words(words: &[&str]) -> Option<NicKnob> {
    let one = |w: &str| Some(w.to_string()).filter(|w| !w.is_empty());
    Some(match words {
        ["feature", n] => NicKnob::Feature(one(n)?),
        ["channels", n] => NicKnob::Channels(one(n)?),
        ["coalesce", n] => NicKnob::Coalesce(one(n)?),
        ["pause", n] => NicKnob::Pause(one(n)?),
        ["rings", n] => NicKnob::Rings(one(n)?),
        ["rss", "indirection"] => NicKnob::RssIndirection,
        ["flow-hash", t] => NicKnob::FlowHash(one(t)?),
        ["napi", id, attr] => NicKnob::Napi(id.parse().ok()?, NapiAttr::parse(attr)?),
        ["ntuple", key] => {
            // `tcp4-dst-port-22`, as NtupleKey displays itself.
            let (proto, port) = key.split_once("-dst-port-")?;
            NicKnob::Ntuple(NtupleKey {
                proto: NtupleProto::parse(proto)?,
                port: port.parse().ok()?,
            })
        }
        _ => return None,
    })
}

#[cfg(test)]
mod target_tests {
    use super::*;

    /// The closed list a journal's and a plan file's targets are held to: each knob the
    /// planner writes passes; files outside the knob trees, a way out of them, another
    /// systemd unit, pid 1 and device names the kernel would not give are refused, saying why.
    #[test]
    fn only_knobs_pass_the_knob_check() {
        let file = Target::file;
        for ok in [
            file("/proc/sys/net/core/busy_poll"),
            file("/proc/sys/net/ipv4/tcp_fastopen"),
            file("/proc/irq/45/smp_affinity_list"),
            file("/sys/class/net/eth0/queues/rx-3/rps_cpus"),
            file("/sys/class/net/eth0/queues/tx-0/xps_cpus"),
            file("/sys/class/net/eth0/napi_defer_hard_irqs"),
            Target::Service {
                name: "irqbalance".into(),
            },
            Target::Nic {
                dev: "eth0".into(),
                knob: NicKnob::RssIndirection,
            },
            Target::Process {
                pid: 4242,
                start: 1,
            },
        ] {
            assert_eq!(ok.knob_check(), Ok(()), "{ok}");
        }
        for (bad, why) in [
            (file("/etc/victim"), "not a knob"),
            (file("/proc/sys/net/../../../etc/victim"), "not a knob"),
            (file("/proc/sys/net/./core/busy_poll"), "not a knob"),
            (file("/proc/sys/net//core"), "not a knob"),
            (file("/proc/sys/kernel/core_pattern"), "not a knob"),
            (
                file("/sys/class/net/eth0/queues/rx-0/../../address"),
                "not a knob",
            ),
            (file("/proc/irq/x/smp_affinity"), "not a knob"),
            // Numbers spelled otherwise than the kernel names the directory.
            (file("/proc/irq/+45/smp_affinity"), "not a knob"),
            (file("/proc/irq/045/smp_affinity"), "not a knob"),
            (
                file("/sys/class/net/eth0/queues/rx-03/rps_cpus"),
                "not a knob",
            ),
            // A file of the other direction's queue.
            (
                file("/sys/class/net/eth0/queues/tx-0/rps_cpus"),
                "not a knob",
            ),
            (file("/sys/class/net/eth0/address"), "not a knob"),
            // Built in memory with a device name the path parser refuses: refused too, so that
            // nothing is written that its journal could not roll back.
            (
                Target::Queue {
                    dev: "e\u{3000}x".into(),
                    queue: 0,
                    file: QueueFile::XpsCpus,
                },
                "not a knob",
            ),
            (
                Target::DeviceFile {
                    dev: "a/b".into(),
                    file: DeviceFile::Threaded,
                },
                "not a knob",
            ),
            (
                Target::Sysctl {
                    name: "net/../kernel/core_pattern".into(),
                },
                "not a knob",
            ),
            (Target::Service { name: "ssh".into() }, "only irqbalance"),
            (
                Target::Nic {
                    dev: "../eth0".into(),
                    knob: NicKnob::RssIndirection,
                },
                "not an interface name",
            ),
            (
                Target::Process { pid: 1, start: 1 },
                "not one netsteer pins",
            ),
        ] {
            let e = bad.knob_check().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    /// Every file path reads back as written, typed or not, and through the wire form (plan
    /// files and journals) as the same variant.
    #[test]
    fn a_path_reads_back_as_written_and_as_its_variant() {
        for (path, want) in [
            (
                "/proc/sys/net/ipv4/conf/eth0.100/rp_filter",
                Target::Sysctl {
                    name: "net/ipv4/conf/eth0.100/rp_filter".into(),
                },
            ),
            (
                "/proc/irq/41/smp_affinity",
                Target::IrqAffinity {
                    irq: 41,
                    file: IrqFile::Mask,
                },
            ),
            (
                "/sys/class/net/eth0/queues/tx-2/xps_rxqs",
                Target::Queue {
                    dev: "eth0".into(),
                    queue: 2,
                    file: QueueFile::XpsRxqs,
                },
            ),
            (
                "/sys/class/net/eth0/threaded",
                Target::DeviceFile {
                    dev: "eth0".into(),
                    file: DeviceFile::Threaded,
                },
            ),
            (
                "/proc/irq/045/smp_affinity",
                Target::File {
                    path: "/proc/irq/045/smp_affinity".into(),
                },
            ),
        ] {
            let t = Target::file(path);
            assert_eq!(t, want, "{path}");
            assert_eq!(t.path().as_deref(), Some(path));
            assert_eq!(t.to_string(), path);
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!(r#"{{"type":"file","path":"{path}"}}"#));
            assert_eq!(serde_json::from_str::<Target>(&json).unwrap(), want);
        }
        let nic = r#"{"type":"nic","dev":"eth0","knob":{"knob":"rss-indirection"}}"#;
        let t: Target = serde_json::from_str(nic).unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), nic);
        let t = r#"{"type":"napithread","dev":"eth0","napi":8193}"#;
        let back: Target = serde_json::from_str(t).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), t);
    }

    /// The kind and format of each variant, as the planner's items of it carry them.
    #[test]
    fn kinds_and_formats_come_from_the_variant() {
        let f = Target::file;
        for (path, kind, format) in [
            (
                "/proc/sys/net/core/busy_poll",
                ItemKind::Sysctl,
                Format::Int,
            ),
            (
                "/proc/sys/net/core/rps_sock_flow_entries",
                ItemKind::RfsTable,
                Format::Int,
            ),
            (
                "/proc/sys/net/core/flow_limit_cpu_bitmap",
                ItemKind::Sysctl,
                Format::Mask,
            ),
            (
                "/proc/irq/3/smp_affinity_list",
                ItemKind::IrqAffinity,
                Format::List,
            ),
            (
                "/proc/irq/3/smp_affinity",
                ItemKind::IrqAffinity,
                Format::Mask,
            ),
            (
                "/sys/class/net/eth0/queues/rx-1/rps_flow_cnt",
                ItemKind::RfsFlowCnt,
                Format::Int,
            ),
            (
                "/sys/class/net/eth0/queues/tx-1/xps_cpus",
                ItemKind::Xps,
                Format::Mask,
            ),
            (
                "/sys/class/net/eth0/gro_flush_timeout",
                ItemKind::Napi,
                Format::Int,
            ),
            ("/etc/victim", ItemKind::Sysctl, Format::Text),
        ] {
            assert_eq!((f(path).kind(), f(path).format()), (kind, format), "{path}");
        }
    }
}

#[cfg(test)]
mod id_tests {
    use super::*;

    fn all() -> Vec<ItemId> {
        let dev = || "eth0".to_string();
        let mut ids = vec![
            ItemId::Irq(41),
            ItemId::Service("irqbalance".into()),
            ItemId::Process(4242),
            ItemId::Sysctl("net.core.busy_poll".into()),
            ItemId::Set("/proc/sys/net/core/rps_sock_flow_entries".into()),
            ItemId::NapiDefault {
                dev: dev(),
                file: "gro_flush_timeout".into(),
            },
            ItemId::NapiThread {
                dev: dev(),
                napi: 8193,
            },
        ];
        for file in QueueFile::ALL {
            ids.push(ItemId::Queues { dev: dev(), file });
            ids.push(ItemId::Queue {
                dev: dev(),
                file,
                index: 3,
            });
        }
        let knobs = [
            NicKnob::Feature("rx-gro".into()),
            NicKnob::Channels("combined".into()),
            NicKnob::Coalesce("rx-usecs".into()),
            NicKnob::Pause("autoneg".into()),
            NicKnob::Rings("rx".into()),
            NicKnob::RssIndirection,
            NicKnob::FlowHash("udp4".into()),
            NicKnob::Napi(8193, NapiAttr::IrqSuspendTimeout),
            NicKnob::Ntuple(NtupleKey {
                proto: NtupleProto::parse("tcp6").unwrap(),
                port: 8080,
            }),
        ];
        ids.extend(
            knobs
                .into_iter()
                .map(|knob| ItemId::Nic { dev: dev(), knob }),
        );
        ids
    }

    #[test]
    fn every_id_reads_back_as_itself() {
        for id in all() {
            let text = id.to_string();
            assert_eq!(ItemId::parse(&text), Some(id.clone()), "{text}");
        }
    }

    /// The spellings plans and journals on disk already carry: a change here is a change
    /// every saved plan and journal would see.
    #[test]
    fn ids_are_spelled_as_saved_plans_spell_them() {
        let spelled: Vec<String> = all().iter().map(ItemId::to_string).collect();
        for want in [
            "irq/41",
            "service/irqbalance",
            "process/4242",
            "sysctl/net.core.busy_poll",
            "set/proc/sys/net/core/rps_sock_flow_entries",
            "napi/eth0/gro_flush_timeout",
            "napi-thread/eth0/8193",
            "rps/eth0",
            "rps/eth0/rx-3",
            "rfs/eth0/rx-3",
            "xps/eth0/tx-3",
            "nic/eth0/feature/rx-gro",
            "nic/eth0/channels/combined",
            "nic/eth0/rss/indirection",
            "nic/eth0/flow-hash/udp4",
            "nic/eth0/napi/8193/irq-suspend-timeout",
            "nic/eth0/ntuple/tcp6-dst-port-8080",
        ] {
            assert!(spelled.iter().any(|s| s == want), "{want}: {spelled:#?}");
        }
    }

    #[test]
    fn text_no_planner_writes_is_not_an_id() {
        for bad in [
            "",
            "irq/",
            "irq/x",
            "irq/+4",
            "irq/048",
            "process/07",
            "irq/4/5",
            "rps/eth0/tx-1",
            "xps/eth0/rx-1",
            "rps/eth0/rx-",
            "nic/eth0/rss/weight",
            "nic/eth0/napi/x/threaded",
            "nic/eth0/ntuple/sctp4-dst-port-1",
            "nic//channels/rx",
            "blah/eth0",
            "service/",
        ] {
            assert_eq!(ItemId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_id_fits_its_own_target_only_and_its_kind_is_the_targets() {
        for id in all() {
            if let Some(t) = id.target() {
                assert_eq!(check_id(&id.to_string(), &t), Ok(()), "{id}");
            }
        }
        let file = Target::file;
        assert_eq!(
            check_id("irq/48", &file("/proc/irq/48/smp_affinity")),
            Ok(())
        );
        assert!(check_id("irq/48", &file("/proc/irq/47/smp_affinity_list")).is_err());
        assert!(check_id("irq/1", &file("/proc/sys/net/core/busy_poll")).is_err());
        assert!(check_id("process/7", &Target::Process { pid: 8, start: 1 }).is_err());
        assert_eq!(
            check_id("process/7", &Target::Process { pid: 7, start: 1 }),
            Ok(())
        );
        // Text no planner writes is a label: the target alone decides.
        assert_eq!(
            check_id("my-knob", &file("/proc/sys/net/core/busy_poll")),
            Ok(())
        );
        // The kind comes from the target whatever the id says.
        assert_eq!(
            file("/proc/sys/net/core/busy_poll").kind(),
            ItemKind::Sysctl
        );
        assert_eq!(
            file("/proc/irq/3/smp_affinity_list").kind(),
            ItemKind::IrqAffinity
        );
        assert_eq!(
            ItemId::parse("nic/eth0/napi/8193/threaded")
                .and_then(|i| i.target())
                .map(|t| t.kind()),
            Some(ItemKind::Napi)
        );
    }

    #[test]
    fn an_id_stands_for_the_file_the_planner_writes() {
        let t = |id: &str| ItemId::parse(id).and_then(|i| i.target());
        let file = |p: &str| Some(Target::file(p));
        assert_eq!(t("irq/41"), file("/proc/irq/41/smp_affinity_list"));
        assert_eq!(
            t("rfs/eth0/rx-2"),
            file("/sys/class/net/eth0/queues/rx-2/rps_flow_cnt")
        );
        assert_eq!(
            t("xps/eth0/tx-0"),
            file("/sys/class/net/eth0/queues/tx-0/xps_cpus")
        );
        assert_eq!(
            t("sysctl/net.core.busy_poll"),
            file("/proc/sys/net/core/busy_poll")
        );
        assert_eq!(
            t("set/proc/sys/net/core/busy_read"),
            file("/proc/sys/net/core/busy_read")
        );
        assert_eq!(t("process/7"), None);
    }
}
