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

use netsteer_host::ethtool::NicKnob;
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

#[cfg(test)]
mod tests {
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
