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
    let possible = read_list(fs, &format!("{CPU_DIR}/possible"), None)
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

    let mut nodes = Vec::new();
    if let Ok(node_ids) = read_list(fs, &format!("{NODE_DIR}/online"), None)
        .or_else(|_| read_list(fs, &format!("{NODE_DIR}/possible"), None))
    {
        for id in node_ids.iter() {
            let cpus = read_list(fs, &format!("{NODE_DIR}/node{id}/cpulist"), Some(nr)).into();
            nodes.push(NumaNode { id, cpus });
        }
    }

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
    }
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

    fn copy_fixture(name: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/hosts")
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
