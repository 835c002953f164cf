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
    let text = fs.read(path)?;
    CpuSet::parse_list(&text, nr).map_err(|source| HostError::CpuSet {
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
    let isolated = read_list(fs, &format!("{CPU_DIR}/isolated"), Some(nr)).into();
    let nohz_full = match read_list(fs, &format!("{CPU_DIR}/nohz_full"), Some(nr)) {
        Err(e) if e.is_not_found() => Field::Known(CpuSet::new()),
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
