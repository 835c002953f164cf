//! The whole packet path of a host at one moment: what `netsteer show` prints and what doctor
//! and tune reason about.

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::ethtool::NicSettings;
use crate::field::Field;
use crate::fs::HostFs;
use crate::nic::{Nic, list_interfaces, read_nic};
use crate::parse::{Interrupts, parse_interrupts, parse_proc_stat};
use crate::sysctl::{NetCoreSysctls, read_net_core};
use crate::topology::{Topology, read_topology_reusing};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Bumped when a field changes meaning or disappears (additions keep it).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Irqbalance {
    pub running: bool,
    pub pid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostView {
    pub schema_version: u32,
    pub kernel: Field<String>,
    pub topology: Topology,
    pub sysctls: NetCoreSysctls,
    pub irqbalance: Field<Irqbalance>,
    pub nics: Vec<Nic>,
    /// Whole files that could not be read, and what is unknown because of it.
    pub problems: Vec<String>,
    /// The vectors of `/proc/interrupts` named like NIC queue vectors that no listed interface owns
    /// ([`crate::container::foreign_queue_vectors`]): a container's view shows the host's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign_vectors: Vec<crate::container::ForeignVector>,
}

/// Marks the problem recorded when /proc/interrupts could not be read.
const IRQS_UNKNOWN: &str = " (NIC IRQs unknown)";

impl HostView {
    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name)
    }

    /// Why this view is a container's, when it is ([`crate::container::container_view`]).
    pub fn container_view(&self) -> Option<String> {
        // Absent is not empty: a tree without /sys/class/net lists no interface because it
        // holds none, not because its namespace has only virtual ones.
        if self
            .problems
            .iter()
            .any(|p| p.ends_with("(no interfaces listed)"))
        {
            return None;
        }
        crate::container::container_view(&self.nics, &self.foreign_vectors)
    }

    /// Why no NIC IRQ is known, when /proc/interrupts could not be read: then every NIC looks
    /// interrupt-less, and nothing about IRQ placement may be decided from this view.
    pub fn irqs_unknown(&self) -> Option<&str> {
        self.problems
            .iter()
            .find_map(|p| p.strip_suffix(IRQS_UNKNOWN))
    }
}

/// Finds a running irqbalance. A process's name (`/proc/PID/comm`) only makes it a candidate:
/// any user can name a process `irqbalance` (prctl PR_SET_NAME, or a copied binary), and an
/// unprivileged one cannot move an IRQ (smp_affinity is root's), so it must not make root's
/// plan skip its IRQ pins. A candidate is irqbalance when [`is_irqbalance`] says so. Only the
/// files read of the matching process are recorded, so a snapshot carries no list of the
/// host's processes.
pub fn find_irqbalance(fs: &HostFs) -> Result<Irqbalance> {
    let scan = fs.unrecorded();
    let entries = scan.read_dir("/proc")?;
    // A tree that holds no process at all (a /proc dump of a few files) cannot say whether
    // irqbalance runs: that is unknown, not "not running". A snapshot of a host without
    // irqbalance records the lowest process's `comm` (PID 1's: init), so it still answers.
    let lowest = entries.iter().filter_map(|e| e.parse::<u32>().ok()).min();
    let Some(lowest) = lowest else {
        return Err(crate::error::HostError::Unavailable(
            "/proc holds no process to look for irqbalance in".into(),
        ));
    };
    for entry in entries {
        let Ok(pid) = entry.parse::<u32>() else {
            continue;
        };
        let path = format!("/proc/{pid}/comm");
        if scan.read_value(&path).is_ok_and(|c| c == "irqbalance") && is_irqbalance(&scan, pid) {
            // Recorded: what made it irqbalance, for a snapshot to answer the same.
            let _ = fs.read(&path);
            let _ = fs.read(format!("/proc/{pid}/status"));
            let _ = fs.read(format!("/proc/{pid}/cgroup"));
            let _ = fs.read_link(format!("/proc/{pid}/exe"));
            return Ok(Irqbalance {
                running: true,
                pid: Some(pid),
            });
        }
    }
    let _ = fs.read(format!("/proc/{lowest}/comm"));
    Ok(Irqbalance {
        running: false,
        pid: None,
    })
}

/// Whether process `pid` is irqbalance: it runs as root (real and effective uid 0 in
/// `/proc/PID/status`) and either its executable (`/proc/PID/exe`) is a file named
/// `irqbalance` or it runs in systemd's `irqbalance.service` (`/proc/PID/cgroup`, which only
/// root can move a process into). A process of another user is never irqbalance, whatever it is
/// called. A tree from before these files were recorded (only `comm`) is taken at its name:
/// that is what it recorded.
pub fn is_irqbalance(fs: &HostFs, pid: u32) -> bool {
    let status = fs.read(format!("/proc/{pid}/status"));
    let exe = fs.read_link(format!("/proc/{pid}/exe"));
    let cgroup = fs.read(format!("/proc/{pid}/cgroup"));
    let Ok(status) = status else {
        // Live, a process that vanished or whose status cannot be read is not confirmed; a
        // tree that recorded only `comm` answers by it.
        return !fs.is_live() && exe.is_err() && cgroup.is_err();
    };
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|ids| {
            let ids: Vec<&str> = ids.split_whitespace().collect();
            ids.len() >= 2 && ids[0] == "0" && ids[1] == "0"
        })
        .unwrap_or(false);
    if !root {
        return false;
    }
    let by_exe = exe.is_ok_and(|target| {
        let t = target.to_string_lossy();
        let t = t.strip_suffix(" (deleted)").unwrap_or(&t);
        Path::new(t).file_name().is_some_and(|n| n == "irqbalance")
    });
    let by_unit = cgroup.is_ok_and(|c| {
        c.lines().any(|l| {
            l.rsplit(':')
                .next()
                .is_some_and(|p| p.split('/').any(|part| part == "irqbalance.service"))
        })
    });
    by_exe || by_unit
}

/// Reads the host. Never fails on a missing or malformed file: that part becomes unknown and the
/// reason is kept. `settings` supplies ethtool netlink data per interface when wanted.
pub fn read_host(fs: &HostFs, settings: Option<&dyn Fn(&str) -> NicSettings>) -> HostView {
    read_host_reusing(fs, settings, None)
}

/// As [`read_host`], reusing the per-CPU topology of `previous` when no CPU came or went (see
/// [`crate::topology::read_topology_reusing`]): for readers that read the same host again
/// and again, such as the agent at each scrape.
pub fn read_host_reusing(
    fs: &HostFs,
    settings: Option<&dyn Fn(&str) -> NicSettings>,
    previous: Option<&Topology>,
) -> HostView {
    let mut problems = Vec::new();
    let stat_cpus: Option<CpuSet> = fs
        .read_parsed("/proc/stat", parse_proc_stat)
        .map(|s| s.cpus.keys().copied().collect())
        .map_err(|e| problems.push(format!("{e}")))
        .ok();
    let interrupts: Option<Interrupts> = fs
        .read_parsed("/proc/interrupts", parse_interrupts)
        .map_err(|e| problems.push(format!("{e}{IRQS_UNKNOWN}")))
        .ok();
    // Without /proc/stat, the columns of /proc/interrupts name the online CPUs (the kernel
    // prints one per online CPU, kernel/irq/proc.c show_interrupts).
    let fallback = stat_cpus.or_else(|| {
        let cpus: CpuSet = interrupts.as_ref()?.cpus.iter().copied().collect();
        (!cpus.is_empty()).then_some(cpus)
    });
    let topology = read_topology_reusing(fs, fallback.as_ref(), previous);
    let names = list_interfaces(fs)
        .map_err(|e| problems.push(format!("{e} (no interfaces listed)")))
        .unwrap_or_default();
    let mut nics: Vec<Nic> = names
        .iter()
        .map(|name| {
            let mut nic = read_nic(fs, name, interrupts.as_ref(), topology.nr_cpu_ids);
            nic.settings = settings.map(|f| f(name));
            nic.take_link_kind();
            nic
        })
        .collect();
    crate::nic::split_shared_function(fs, &mut nics);
    for nic in &mut nics {
        nic.napis = crate::nic::resolve_napis(fs, nic, topology.nr_cpu_ids);
    }
    let foreign_vectors = interrupts
        .as_ref()
        .map(|i| crate::container::foreign_queue_vectors(i, &nics))
        .unwrap_or_default();
    HostView {
        schema_version: SCHEMA_VERSION,
        kernel: fs.read_value("/proc/sys/kernel/osrelease").into(),
        sysctls: read_net_core(fs),
        irqbalance: find_irqbalance(fs).into(),
        topology,
        nics,
        problems,
        foreign_vectors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two fresh namespaces both number their first veth 2: sysfs then shows iflink ==
    /// ifindex and the veth looks like any virtual device; rtnetlink's kind corrects it.
    #[test]
    fn the_link_kind_from_rtnetlink_wins_over_the_sysfs_guess() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("sys/class/net/v0a");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(dir.path().join("proc/stat"), "cpu0 1 0 0 0 0 0 0 0 0 0\n").unwrap();
        for (f, v) in [("ifindex", "2"), ("iflink", "2"), ("type", "1")] {
            std::fs::write(net.join(f), format!("{v}\n")).unwrap();
        }
        let fs = HostFs::open(dir.path()).unwrap();
        let guessed = read_host(&fs, None);
        assert_eq!(guessed.nics[0].kind, "virtual");
        let with_kind = |_: &str| NicSettings {
            link_kind: Some("veth".into()),
            ..NicSettings::unavailable("test")
        };
        let told = read_host(&fs, Some(&with_kind));
        assert_eq!(told.nics[0].kind, "veth");
        assert_eq!(told.nics[0].driver, Field::Known("veth".into()));
    }
}
