//! The whole packet path of a host at one moment: what `netsteer show` prints and what doctor
//! and tune reason about.

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::ethtool::NicSettings;
use crate::field::Field;
use crate::fs::HostFs;
use crate::nic::{Nic, list_interfaces, read_nic};
use crate::parse::{Interrupts, parse_interrupts, parse_proc_stat};
use crate::process::status_field;
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
    /// What made the process irqbalance (its name's file, its uid, executable or unit), when
    /// it runs: the inputs of that verdict.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// It runs in systemd's `irqbalance.service`, so `systemctl stop irqbalance` stops it
    /// (one started by hand, upstart or another init is not stopped that way).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unit: bool,
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
    /// Why this view's network namespace is not the host's, when its sysctls say so
    /// ([`non_init_netns`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
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
        // No queue vector betrays the host's NICs (Hyper-V's netvsc channels interrupt over
        // VMBus, not a vector per queue), but the namespace is not the host's: the same view.
        crate::container::container_view(&self.nics, &self.foreign_vectors)
            .or_else(|| crate::container::netns_container_view(&self.nics, self.netns.as_deref()))
    }

    /// irqbalance as a plan must take it: `None` only when it is known not to run; else the
    /// words for it, "irqbalance is running (pid 812)" or, when the view cannot tell,
    /// "irqbalance may be running (its state is unknown: …)". Unknown is planned as running:
    /// pinning IRQs that irqbalance moves back within 10 s is a silent undo.
    pub fn irqbalance_may_run(&self) -> Option<String> {
        match &self.irqbalance {
            Field::Known(i) if i.running => Some(match i.pid {
                Some(p) => format!("irqbalance is running (pid {p})"),
                None => "irqbalance is running".into(),
            }),
            Field::Known(_) => None,
            Field::Unknown { unknown } => Some(format!(
                "irqbalance may be running (its state is unknown: {unknown})"
            )),
        }
    }

    /// Whether irqbalance is known to run outside systemd's `irqbalance.service` (by hand,
    /// upstart, OpenRC): `systemctl stop irqbalance` would find the unit inactive and leave the
    /// process moving pinned IRQs back.
    pub fn irqbalance_outside_unit(&self) -> bool {
        self.irqbalance
            .known()
            .is_some_and(|i| i.running && !i.unit)
    }

    /// Why no NIC IRQ is known, when /proc/interrupts could not be read: then every NIC looks
    /// interrupt-less, and nothing about IRQ placement may be decided from this view.
    pub fn irqs_unknown(&self) -> Option<&str> {
        self.problems
            .iter()
            .find_map(|p| p.strip_suffix(IRQS_UNKNOWN))
    }
}

/// Finds a running irqbalance. A process's name only makes it a candidate: any user can name a
/// process `irqbalance` (prctl PR_SET_NAME, or a copied binary), and an unprivileged one cannot
/// move an IRQ (smp_affinity is root's), so it must not make root's plan skip its IRQ pins. A
/// candidate is irqbalance when [`judge`] says so.
///
/// Three answers: running, not running, and unknown (the error) when the tree cannot tell: no
/// process at all (a /proc dump of a few files), or processes none of which names itself (no
/// `comm`, `status` or `cmdline` readable). Only the files read of the matching process are
/// recorded, so a snapshot carries no list of the host's processes; without irqbalance it
/// records the lowest named process's name (PID 1's: init), so it still answers.
pub fn find_irqbalance(fs: &HostFs) -> Result<Irqbalance> {
    use crate::error::HostError::Unavailable;
    let scan = fs.unrecorded();
    let entries = scan.read_dir("/proc")?;
    // Only a directory the kernel could have made: `+7` or `07` is not process 7.
    let mut pids: Vec<u32> = entries
        .iter()
        .filter_map(|e| e.parse().ok().filter(|p: &u32| p.to_string() == *e))
        .collect();
    pids.sort_unstable();
    if pids.is_empty() {
        return Err(Unavailable(
            "/proc holds no process to look for irqbalance in".into(),
        ));
    }
    if pids.len() > MAX_PROCESSES {
        return Err(Unavailable(format!(
            "/proc lists {} processes, more than the {MAX_PROCESSES} looked through for irqbalance",
            pids.len()
        )));
    }
    // A /proc of a PID namespace of its own (a container without the host's PIDs) lists only
    // that namespace's processes: the host's irqbalance is not among them. The host's
    // namespace always has kthreadd at PID 2 (init/main.c rest_init), a child one never.
    if fs.is_live() && !is_kthreadd(&scan, 2) {
        return Err(Unavailable(
            "this /proc is a PID namespace's own (PID 2 is not kthreadd): the host's processes, irqbalance among them, are not in it".into(),
        ));
    }
    let mut first_named = None;
    for &pid in &pids {
        let Some((name, from)) = process_name(&scan, pid) else {
            continue;
        };
        first_named.get_or_insert((pid, from));
        if name != "irqbalance" {
            continue;
        }
        if let Some((by, unit)) = judge(&scan, pid) {
            // Recorded: what made it irqbalance, for a snapshot to answer the same.
            let _ = fs.read_at_most(format!("/proc/{pid}/{from}"), PROC_TEXT_BYTES);
            let _ = fs.read_at_most(format!("/proc/{pid}/status"), PROC_TEXT_BYTES);
            let _ = fs.read_at_most(format!("/proc/{pid}/cgroup"), PROC_TEXT_BYTES);
            let _ = fs.read_link(format!("/proc/{pid}/exe"));
            return Ok(Irqbalance {
                running: true,
                pid: Some(pid),
                by: format!("pid {pid} named irqbalance in /proc/{pid}/{from}, {by}"),
                unit,
            });
        }
    }
    let Some((lowest, from)) = first_named else {
        return Err(Unavailable(format!(
            "none of the {} processes in /proc names itself (no comm, status or cmdline readable)",
            pids.len()
        )));
    };
    // "Not running" needs the whole process list. A tree holding a few processes (a kernel
    // thread's directory, a copy of one service's) is not one; a list begins at init (PID 1),
    // which is what a snapshot of a host without irqbalance records.
    if !fs.is_live() && lowest != 1 {
        return Err(Unavailable(format!(
            "/proc holds {} process(es) but not PID 1 (init): not a process list, so whether irqbalance runs is not known",
            pids.len()
        )));
    }
    let _ = fs.read_at_most(format!("/proc/{lowest}/{from}"), PROC_TEXT_BYTES);
    Ok(Irqbalance {
        running: false,
        pid: None,
        by: String::new(),
        unit: false,
    })
}

/// The most processes looked through for irqbalance (a tree may list any number).
const MAX_PROCESSES: usize = 1 << 18;

/// The most read of a process's `status`, `cmdline` or `cgroup`: their useful part (`Name:`,
/// `Uid:`, argv0, the unit) is at the start, and a tree's copy may be of any size.
const PROC_TEXT_BYTES: u64 = 64 << 10;

/// Whether process `pid` is the kernel's kthreadd (its parent is PID 0).
fn is_kthreadd(fs: &HostFs, pid: u32) -> bool {
    fs.read_at_most(format!("/proc/{pid}/status"), PROC_TEXT_BYTES)
        .is_ok_and(|s| {
            status_field(&s, "Name:") == Some("kthreadd") && status_field(&s, "PPid:") == Some("0")
        })
}

/// A process's name and the file it came from: `comm`, else `status`'s `Name:` (sosreport
/// keeps status but not comm), else the file name of `cmdline`'s first word (a process list
/// copied without either). The kernel truncates comm to 15 bytes (TASK_COMM_LEN); "irqbalance"
/// fits.
fn process_name(fs: &HostFs, pid: u32) -> Option<(String, &'static str)> {
    if let Ok(c) = fs.read_value(format!("/proc/{pid}/comm")) {
        return Some((c, "comm"));
    }
    if let Some(n) = fs
        .read_at_most(format!("/proc/{pid}/status"), PROC_TEXT_BYTES)
        .ok()
        .and_then(|s| status_field(&s, "Name:").map(str::to_string))
    {
        return Some((n, "status"));
    }
    let cmdline = fs
        .read_at_most(format!("/proc/{pid}/cmdline"), PROC_TEXT_BYTES)
        .ok()?;
    let argv0 = cmdline.split('\0').next()?.split_whitespace().next()?;
    let name = Path::new(argv0).file_name()?.to_string_lossy().into_owned();
    Some((name, "cmdline"))
}

/// Whether process `pid` is irqbalance: it runs as root (real and effective uid 0 in
/// `/proc/PID/status`) and either its executable (`/proc/PID/exe`) is a file named
/// `irqbalance` or it runs in systemd's `irqbalance.service` (`/proc/PID/cgroup`, which only
/// root can move a process into). A process of another user is never irqbalance, whatever it is
/// called.
pub fn is_irqbalance(fs: &HostFs, pid: u32) -> bool {
    judge(fs, pid).is_some()
}

/// What confirms that `pid` (named irqbalance) is it, and whether it runs in systemd's
/// `irqbalance.service`; `None` when it is not.
///
/// Live, root's uid and its executable or unit are required: a process that vanished or whose
/// files cannot be read is not confirmed. A tree holds what its collector kept: a status of
/// another user says no, an executable link decides, the unit confirms; when neither link nor
/// unit was kept (upstart starts `/usr/sbin/irqbalance` in no unit; sosreport keeps no `exe`),
/// root's process of that name is taken for it, as it is in a tree that kept only the name.
fn judge(fs: &HostFs, pid: u32) -> Option<(String, bool)> {
    let status = fs.read_at_most(format!("/proc/{pid}/status"), PROC_TEXT_BYTES);
    let exe = fs.read_link(format!("/proc/{pid}/exe"));
    let cgroup = fs.read_at_most(format!("/proc/{pid}/cgroup"), PROC_TEXT_BYTES);
    let root = status.as_ref().ok().map(|s| {
        status_field(s, "Uid:").is_some_and(|ids| {
            let ids: Vec<&str> = ids.split_whitespace().collect();
            ids.len() >= 2 && ids[0] == "0" && ids[1] == "0"
        })
    });
    let live = fs.is_live();
    match root {
        Some(false) => return None,
        None if live => return None,
        _ => {}
    }
    let uid = if root == Some(true) {
        "uid 0"
    } else {
        "no status kept"
    };
    // The system's unit, not a user's: `systemd-run --user --unit=irqbalance` makes
    // `…/user@UID.service/app.slice/irqbalance.service`, which stopping the system unit
    // does not reach.
    let by_unit = cgroup.as_ref().is_ok_and(|c| {
        c.lines().any(|l| {
            l.rsplit(':').next().is_some_and(|p| {
                p == "/system.slice/irqbalance.service"
                    || p.starts_with("/system.slice/irqbalance.service/")
            })
        })
    });
    let unit = if by_unit {
        ", in irqbalance.service"
    } else {
        ""
    };
    if let Ok(target) = &exe {
        let t = target.to_string_lossy();
        let t = t.strip_suffix(" (deleted)").unwrap_or(&t);
        if Path::new(t).file_name().is_some_and(|n| n == "irqbalance") {
            return Some((format!("{uid}, executable {t}{unit}"), by_unit));
        }
    }
    if by_unit {
        return Some((format!("{uid}{unit}"), true));
    }
    if live || exe.is_ok() {
        return None;
    }
    Some((
        format!("{uid}, no executable link in this tree and no systemd unit"),
        false,
    ))
}

/// Why the network namespace `fs` shows is not the host's (the initial one): its
/// `/proc/sys/net/core` holds `somaxconn`, which every namespace has, but not
/// `netdev_max_backlog`, which only the initial one registers (net/core/sysctl_net_core.c:
/// `net_core_table` for init_net, `netns_core_table` for each namespace). A tree that kept no
/// sysctl says nothing.
pub fn non_init_netns(fs: &HostFs) -> Option<String> {
    const CORE: &str = "/proc/sys/net/core";
    fs.read_value(format!("{CORE}/somaxconn")).ok()?;
    match fs.read_value(format!("{CORE}/netdev_max_backlog")) {
        Err(e) if e.is_not_found() => Some(format!(
            "its network namespace is not the host's ({CORE}/somaxconn is there, {CORE}/netdev_max_backlog, which only the initial namespace has, is not)"
        )),
        _ => None,
    }
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
        crate::nic::link_page_pools(nic);
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
        netns: non_init_netns(fs),
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
