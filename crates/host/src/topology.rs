//! CPU topology from /sys/devices/system/{cpu,node} (Documentation/ABI/stable/sysfs-devices-system-cpu).

use crate::cpuset::{CpuSet, nr_cpu_ids};
use crate::error::{HostError, Result};
use crate::field::Field;
use crate::fs::HostFs;
use crate::parse::parse_uint;
use serde::{Deserialize, Serialize};

const CPU_DIR: &str = "/sys/devices/system/cpu";
const NODE_DIR: &str = "/sys/devices/system/node";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    pub id: u32,
    pub online: bool,
    /// NUMA node, when the kernel has NUMA sysfs.
    pub node: Option<u32>,
    pub package: Field<u32>,
    pub core: Field<u32>,
    /// Hyperthread siblings including this CPU (`thread_siblings_list`).
    pub siblings: Field<CpuSet>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: Field<CpuSet>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub possible: CpuSet,
    pub online: CpuSet,
    /// `isolcpus=` CPUs: RPS silently skips them (`rps_cpumask_housekeeping()`).
    pub isolated: Field<CpuSet>,
    /// Absent when the kernel was not booted with nohz_full.
    pub nohz_full: Field<CpuSet>,
    /// `smt/control`: on, off, forceoff, notsupported, notimplemented.
    pub smt: Field<String>,
    /// Width in bits of every CPU mask this host reads and accepts.
    pub nr_cpu_ids: u32,
    pub cpus: Vec<CpuInfo>,
    pub nodes: Vec<NumaNode>,
    /// Why the NUMA layout is unknown: none of the forms the kernel gives it in was found
    /// (`node/online`, `node/possible`, `node/nodeN/`, `cpu/cpuN/nodeM`). Then `nodes` is
    /// empty and means "unknown", never "one node" (a two-socket Xeon's partial bundle read
    /// as one). None when `nodes` was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_unknown: Option<String>,
    /// Why `possible` is not the kernel's list: `cpu/possible` could not be read, so the online
    /// CPUs (or the CPU directories) stand in for it, and the mask width derived from it is a
    /// lower bound. None when `cpu/possible` was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub possible_unknown: Option<String>,
}

impl Topology {
    pub fn cpu(&self, id: u32) -> Option<&CpuInfo> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// CPUs of a NUMA node, if known.
    pub fn node_cpus(&self, node: u32) -> Option<&CpuSet> {
        self.nodes.iter().find(|n| n.id == node)?.cpus.known()
    }

    /// Prints a set as a mask at this host's exact width.
    pub fn mask(&self, set: &CpuSet) -> std::result::Result<String, crate::cpuset::CpuSetError> {
        set.to_mask(self.nr_cpu_ids)
    }
}

pub(crate) fn read_list(fs: &HostFs, path: &str, nr: Option<u32>) -> Result<CpuSet> {
    parse_list_of(path, &fs.read(path)?, nr)
}

/// A CPU list read from `path`, an error naming the file.
fn parse_list_of(path: &str, text: &str, nr: Option<u32>) -> Result<CpuSet> {
    CpuSet::parse_list(text, nr).map_err(|source| HostError::CpuSet {
        path: path.into(),
        source,
    })
}

pub(crate) fn read_mask(fs: &HostFs, path: &str) -> Result<CpuSet> {
    let text = fs.read(path)?;
    CpuSet::parse_mask(&text).map_err(|source| HostError::CpuSet {
        path: path.into(),
        source,
    })
}

/// The CPUs a boot parameter names (Documentation/admin-guide/kernel-parameters.txt), `None`
/// when the command line does not carry it. `isolcpus=[flag,...,]cpu-list`: the flags `nohz`,
/// `domain` and `managed_irq`; without flags it means `domain`, and only domain isolation is
/// what sysfs `isolated` lists (`housekeeping_isolcpus_setup`, kernel/sched/isolation.c), so
/// `isolcpus=managed_irq,…` alone isolates no CPU from the scheduler: an empty set.
fn boot_cpus(cmdline: &str, key: &str, nr: u32) -> Option<std::result::Result<CpuSet, String>> {
    let value = cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .next_back()?;
    let mut flags = Vec::new();
    let mut list = value;
    if key == "isolcpus" {
        while let Some((head, rest)) = list.split_once(',')
            && head.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        {
            flags.push(head);
            list = rest;
        }
        if list.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            return Some(Err(format!("{key}={value}: no CPU list after the flags")));
        }
    }
    let cpus = match CpuSet::parse_list(list, Some(nr)) {
        Ok(c) => c,
        Err(e) => return Some(Err(format!("{key}={value}: {e}"))),
    };
    if key == "isolcpus" && !flags.is_empty() && !flags.contains(&"domain") {
        return Some(Ok(CpuSet::new()));
    }
    Some(Ok(cpus))
}

fn read_u32(fs: &HostFs, path: &str) -> Result<u32> {
    let v = fs.read_parsed(path, parse_uint)?;
    u32::try_from(v).map_err(|_| HostError::Parse {
        path: path.into(),
        source: crate::error::ParseError::new(1, format!("{v} does not fit 32 bits")),
    })
}

/// Reads the topology. `fallback_cpus` (the CPUs /proc/stat lists) stands in when the cpu sysfs
/// lists are missing, e.g. in a partial tree.
pub fn read_topology(fs: &HostFs, fallback_cpus: Option<&CpuSet>) -> Topology {
    read_topology_reusing(fs, fallback_cpus, None)
}

/// As [`read_topology`], taking each CPU's package, core and siblings from `previous` when the
/// possible and online CPUs are the same as then: those change only when a CPU comes or goes
/// (hotplug changes `online`), and they are three files per CPU, most of what a 128-CPU
/// host's read costs. The host-wide lists (isolated, nohz_full, SMT, NUMA nodes) are read
/// again every time.
pub fn read_topology_reusing(
    fs: &HostFs,
    fallback_cpus: Option<&CpuSet>,
    previous: Option<&Topology>,
) -> Topology {
    let online_r = read_list(fs, &format!("{CPU_DIR}/online"), None);
    // Without the lists and without /proc/stat, the cpuN directories still name the CPUs
    // (a tree that kept only per-CPU sysfs): never an empty host beside twelve of them.
    // Listed at most once, when a fallback first needs it.
    let listed = std::cell::OnceCell::new();
    let dirs = || -> Option<CpuSet> {
        listed
            .get_or_init(|| {
                let set: CpuSet = fs
                    .read_dir(CPU_DIR)
                    .ok()?
                    .iter()
                    .filter_map(|n| n.strip_prefix("cpu")?.parse::<u32>().ok())
                    .collect();
                (!set.is_empty()).then_some(set)
            })
            .clone()
    };
    let possible_r = read_list(fs, &format!("{CPU_DIR}/possible"), None);
    let possible_unknown = possible_r.as_ref().err().map(|e| e.to_string());
    let possible = possible_r
        .ok()
        .or_else(|| online_r.as_ref().ok().cloned())
        .or_else(|| fallback_cpus.cloned())
        .or_else(dirs)
        .unwrap_or_default();
    let nr = nr_cpu_ids(&possible);
    // Each cpuN's own `online` file (absent for a CPU that cannot go offline, such as CPU 0
    // on x86) says which of the directories' CPUs are online.
    let per_cpu_online = || -> Option<CpuSet> {
        let dirs = dirs()?;
        Some(
            dirs.iter()
                .filter(|c| {
                    fs.read_value(format!("{CPU_DIR}/cpu{c}/online"))
                        .map_or(true, |v| v != "0")
                })
                .collect(),
        )
    };
    let online = online_r
        .ok()
        .or_else(|| fallback_cpus.cloned())
        .or_else(per_cpu_online)
        .unwrap_or_else(|| possible.clone());
    // Without the sysfs lists (a partial tree, an old kernel), the command line the kernel was
    // booted with says the same: isolcpus= and nohz_full=.
    let cmdline = std::cell::OnceCell::new();
    let boot = |key: &str| -> Option<std::result::Result<CpuSet, String>> {
        let text: &Option<String> = cmdline.get_or_init(|| fs.read("/proc/cmdline").ok());
        boot_cpus(text.as_deref()?, key, nr)
    };
    let isolated = match read_list(fs, &format!("{CPU_DIR}/isolated"), Some(nr)) {
        Err(e) if e.is_not_found() => match boot("isolcpus") {
            Some(r) => r.map_err(|why| format!("/proc/cmdline: {why}")).into(),
            None => Field::unknown(e),
        },
        other => other.into(),
    };
    let nohz_path = format!("{CPU_DIR}/nohz_full");
    let nohz_read = match fs.read(&nohz_path) {
        // Booted without nohz_full, the kernel prints its NULL tick_nohz_full_mask as "(null)"
        // (print_cpus_nohz_full, drivers/base/cpu.c; Debian's 5.10 to 6.12 guests here do,
        // 7.3 prints an empty line): none, not an unreadable list.
        Ok(text) if text.trim() == "(null)" => Ok(CpuSet::new()),
        Ok(text) => parse_list_of(&nohz_path, &text, Some(nr)),
        Err(e) => Err(e),
    };
    let nohz_full = match nohz_read {
        Err(e) if e.is_not_found() => match boot("nohz_full") {
            Some(r) => r.map_err(|why| format!("/proc/cmdline: {why}")).into(),
            // A kernel without CONFIG_NO_HZ_FULL has no file: none. A tree without the cpu
            // directory at all says nothing.
            None if fs.is_dir(CPU_DIR) => Field::Known(CpuSet::new()),
            None => Field::unknown(e),
        },
        other => other.into(),
    };
    let smt = fs.read_value(format!("{CPU_DIR}/smt/control")).into();

    let (nodes, numa_unknown) = read_nodes(fs, &possible, nr, &dirs);

    let reuse = previous.filter(|p| p.possible == possible && p.online == online);
    let cpus = possible
        .iter()
        .map(|id| {
            let node = nodes
                .iter()
                .find(|n| n.cpus.known().is_some_and(|c| c.contains(id)))
                .map(|n| n.id);
            if let Some(before) = reuse.and_then(|p| p.cpu(id)) {
                return CpuInfo {
                    id,
                    online: online.contains(id),
                    node,
                    ..before.clone()
                };
            }
            let topo = format!("{CPU_DIR}/cpu{id}/topology");
            let siblings = read_list(fs, &format!("{topo}/thread_siblings_list"), Some(nr))
                .or_else(|_| read_list(fs, &format!("{topo}/core_cpus_list"), Some(nr)))
                .into();
            CpuInfo {
                id,
                online: online.contains(id),
                node,
                package: read_u32(fs, &format!("{topo}/physical_package_id")).into(),
                core: read_u32(fs, &format!("{topo}/core_id")).into(),
                siblings,
            }
        })
        .collect();

    Topology {
        possible,
        online,
        isolated,
        nohz_full,
        smt,
        nr_cpu_ids: nr,
        cpus,
        nodes,
        numa_unknown,
        possible_unknown,
    }
}

/// The NUMA nodes and their CPUs, from whichever of the kernel's forms the host or tree has
/// (Documentation/ABI/stable/sysfs-devices-node): the node ids from `node/online`, else
/// `node/possible`, else the `nodeN` directories, else the `cpuN/nodeM` links every CPU
/// directory carries (drivers/base/node.c, register_cpu_under_node); each node's CPUs from
/// its `cpulist`, else its `cpumap`, else those links. None of them: unknown, with why.
fn read_nodes(
    fs: &HostFs,
    possible: &CpuSet,
    nr: u32,
    cpu_dirs: &dyn Fn() -> Option<CpuSet>,
) -> (Vec<NumaNode>, Option<String>) {
    // cpuN/nodeM links, read once and only when a node needs them.
    let links = std::cell::OnceCell::new();
    let by_link = || -> &std::collections::BTreeMap<u32, CpuSet> {
        links.get_or_init(|| {
            let mut m: std::collections::BTreeMap<u32, CpuSet> = Default::default();
            let cpus = cpu_dirs().unwrap_or_else(|| possible.clone());
            for c in cpus.iter() {
                let Ok(names) = fs.read_dir(format!("{CPU_DIR}/cpu{c}")) else {
                    continue;
                };
                for n in names {
                    if let Some(id) = n.strip_prefix("node").and_then(|i| i.parse::<u32>().ok()) {
                        m.entry(id).or_default().insert(c);
                        // Read as what it is, so a snapshot keeps it: a listing records links
                        // and directories, and some trees hold the entry as a plain file.
                        let entry = format!("{CPU_DIR}/cpu{c}/{n}");
                        if fs.read_link(&entry).is_err() {
                            let _ = fs.read(&entry);
                        }
                    }
                }
            }
            m
        })
    };
    let listed_dirs = || -> Option<CpuSet> {
        let set: CpuSet = fs
            .read_dir(NODE_DIR)
            .ok()?
            .iter()
            .filter(|n| fs.is_dir(format!("{NODE_DIR}/{n}")))
            .filter_map(|n| n.strip_prefix("node")?.parse::<u32>().ok())
            .collect();
        (!set.is_empty()).then_some(set)
    };
    let ids = read_list(fs, &format!("{NODE_DIR}/online"), None)
        .ok()
        .or_else(|| read_list(fs, &format!("{NODE_DIR}/possible"), None).ok())
        .or_else(listed_dirs)
        .or_else(|| {
            let m = by_link();
            (!m.is_empty()).then(|| m.keys().copied().collect())
        });
    let Some(ids) = ids else {
        return (
            Vec::new(),
            Some(format!(
                "no {NODE_DIR}/online, possible or nodeN, and no {CPU_DIR}/cpuN/nodeM links"
            )),
        );
    };
    let nodes = ids
        .iter()
        .map(|id| {
            let dir = format!("{NODE_DIR}/node{id}");
            let cpus: Field<CpuSet> = match read_list(fs, &format!("{dir}/cpulist"), Some(nr))
                .or_else(|_| read_mask(fs, &format!("{dir}/cpumap")))
            {
                Ok(c) => Field::Known(c),
                Err(e) => match by_link().get(&id) {
                    Some(c) => Field::Known(c.clone()),
                    // A memory-only node (CXL, a node whose CPUs are offline) has links from
                    // no CPU: its cpulist would have been empty.
                    None if !by_link().is_empty() => Field::Known(CpuSet::new()),
                    None => Field::unknown(e),
                },
            };
            NumaNode { id, cpus }
        })
        .collect();
    (nodes, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_parameters_stand_in_for_missing_sysfs_lists() {
        let line =
            "BOOT_IMAGE=/vmlinuz rw isolcpus=managed_irq,0-4,11-79 nohz_full=0-4,11-79 quiet";
        let nohz = boot_cpus(line, "nohz_full", 80).unwrap().unwrap();
        assert_eq!(nohz.to_string(), "0-4,11-79");
        // managed_irq alone isolates nobody from the scheduler: sysfs `isolated` is empty.
        assert!(boot_cpus(line, "isolcpus", 80).unwrap().unwrap().is_empty());
        let plain = boot_cpus("isolcpus=2-3", "isolcpus", 8).unwrap().unwrap();
        assert_eq!(plain.to_string(), "2-3");
        let domain = boot_cpus("isolcpus=domain,managed_irq,1,5", "isolcpus", 8).unwrap();
        assert_eq!(domain.unwrap().to_string(), "1,5");
        assert!(boot_cpus("quiet", "isolcpus", 8).is_none());
        assert!(boot_cpus("isolcpus=nohz", "isolcpus", 8).unwrap().is_err());
        // A tree holding /proc/cmdline but no cpu lists reads them from it.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::create_dir_all(dir.path().join("sys/devices/system/cpu/cpu0")).unwrap();
        std::fs::write(dir.path().join("proc/cmdline"), "nohz_full=0 isolcpus=0\n").unwrap();
        let fs = HostFs::new(dir.path());
        let t = read_topology(&fs, None);
        assert_eq!(t.nohz_full.known().map(|c| c.to_string()), Some("0".into()));
        assert_eq!(t.isolated.known().map(|c| c.to_string()), Some("0".into()));
        // Neither the lists nor the command line nor the cpu directory: nohz_full unknown.
        let bare = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(bare.path().join("proc")).unwrap();
        let t = read_topology(&HostFs::new(bare.path()), None);
        assert!(t.nohz_full.known().is_none() && t.isolated.known().is_none());
    }

    /// A copy of `fixtures/<set>/<name>` to change freely.
    fn copy_of(set: &str, name: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures")
            .join(set)
            .join(name);
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", from.display()))
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok);
        dir
    }

    fn copy_fixture(name: &str) -> tempfile::TempDir {
        copy_of("hosts", name)
    }

    fn copy_real(name: &str) -> tempfile::TempDir {
        copy_of("real", name)
    }

    fn layout(t: &Topology) -> Vec<(u32, String)> {
        t.nodes
            .iter()
            .map(|n| (n.id, n.cpus.known().map_or("?".into(), |c| c.to_list())))
            .collect()
    }

    /// Issue 72 class 4: NUMA in every form the kernel gives it. sysstat's test trees (a
    /// real desktop's files) carry only `cpu/cpuN/nodeM`, no `node/` directory, and read as
    /// one node before; eight nodes given by `nodeN/cpumap` and the links, with no
    /// `node/online` and no `cpulist`, read as one; a `node0/cpulist` without `node/online`
    /// was ignored; and a tree with none of them is "unknown", not one node.
    #[test]
    fn numa_is_read_from_every_form_and_unknown_when_none_is_there() {
        let real = copy_real("sysstat-root1");
        let t = read_topology(&HostFs::open(real.path()).unwrap(), None);
        assert_eq!(
            layout(&t),
            [(0, "0,2,4,6".to_string()), (1, "1,3,5,7-8".to_string())]
        );
        assert_eq!(t.numa_unknown, None);
        assert_eq!(t.cpu(8).unwrap().node, Some(1));

        // Eight nodes of two CPUs each, by cpumap and by the links, nothing else.
        let dir = copy_fixture("kvm-virtio-16cpu");
        let sys = dir.path().join("sys/devices/system");
        std::fs::remove_dir_all(sys.join("node")).unwrap();
        for n in 0..8u32 {
            let d = sys.join(format!("node/node{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpumap"), format!("{:04x}\n", 3u32 << (2 * n))).unwrap();
            for c in [2 * n, 2 * n + 1] {
                std::os::unix::fs::symlink(
                    format!("../../node/node{n}"),
                    sys.join(format!("cpu/cpu{c}/node{n}")),
                )
                .unwrap();
            }
        }
        let fs = HostFs::open(dir.path()).unwrap();
        let t = read_topology(&fs, None);
        assert_eq!(t.nodes.len(), 8, "{:?}", layout(&t));
        assert_eq!(layout(&t)[7], (7, "14-15".to_string()));
        assert_eq!(t.cpu(5).unwrap().node, Some(2));
        // Only the links: the node directory gone entirely.
        std::fs::remove_dir_all(sys.join("node")).unwrap();
        let t = read_topology(&fs, None);
        assert_eq!(t.nodes.len(), 8, "{:?}", layout(&t));
        assert_eq!(layout(&t)[3], (3, "6-7".to_string()));

        // A node0/cpulist with no online or possible list beside it.
        let dir = copy_fixture("kvm-virtio-16cpu");
        let node = dir.path().join("sys/devices/system/node");
        std::fs::remove_file(node.join("online")).unwrap();
        std::fs::remove_file(node.join("possible")).unwrap();
        let t = read_topology(&HostFs::open(dir.path()).unwrap(), None);
        assert_eq!(layout(&t), [(0, "0-15".to_string())]);

        // Nothing at all: unknown, and said why.
        std::fs::remove_dir_all(&node).unwrap();
        let t = read_topology(&HostFs::open(dir.path()).unwrap(), None);
        assert!(t.nodes.is_empty());
        let why = t.numa_unknown.expect("NUMA unknown");
        assert!(why.contains("nodeM links"), "{why}");
    }

    #[test]
    fn per_cpu_topology_is_reused_only_while_no_cpu_comes_or_goes() {
        let dir = copy_fixture("kvm-virtio-16cpu");
        let fs = HostFs::open(dir.path()).unwrap();
        let first = read_topology(&fs, None);
        let core0 = first.cpu(0).unwrap().core.clone();
        let cpu_dir = dir.path().join("sys/devices/system/cpu");
        std::fs::write(cpu_dir.join("cpu0/topology/core_id"), "77\n").unwrap();
        // Same CPUs online: the three per-CPU files are not read again.
        let again = read_topology_reusing(&fs, None, Some(&first));
        assert_eq!(again.cpu(0).unwrap().core, core0);
        assert_eq!(again, first);
        // The host-wide lists are read every time.
        std::fs::write(cpu_dir.join("isolated"), "2-3\n").unwrap();
        let isolated = read_topology_reusing(&fs, None, Some(&first));
        assert_eq!(
            isolated
                .isolated
                .known()
                .map(|c| c.iter().collect::<Vec<_>>()),
            Some(vec![2, 3])
        );
        // CPU 15 goes offline: everything is read again.
        std::fs::write(cpu_dir.join("online"), "0-14\n").unwrap();
        let hotplug = read_topology_reusing(&fs, None, Some(&first));
        assert_eq!(hotplug.cpu(0).unwrap().core, Field::Known(77));
        assert!(!hotplug.cpu(15).unwrap().online);
    }
}
