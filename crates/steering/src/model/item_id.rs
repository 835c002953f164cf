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

#[cfg(test)]
use crate::model::desired::ItemKind;
use crate::model::desired::Target;
use crate::model::target::IrqFile;
pub use crate::model::target::QueueFile;

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
mod tests {
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
