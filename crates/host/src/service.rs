//! Finding a service's processes on a host, beside [`crate::sockets`] (who holds a port) and
//! [`crate::process`] (one process's threads): a process named by its pid *and* start time
//! ([`ServiceProcess`]), and the members of a cgroup by each process's own `/proc/PID/cgroup`.
//!
//! Why the start time: a pid is reused once its process is gone, and root must never pin (or
//! unpin) the process that got it next; `/proc/PID/stat` field 22 (`starttime`, in clock ticks
//! since boot; Documentation/filesystems/proc.rst, table 1-4) tells the two apart.

use crate::cpuset::CpuSet;
use crate::fs::HostFs;
use crate::process::{in_cgroup, parse_start_time, parse_status_allowed};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One process of a service: what names it (pid and start time) and where it may run now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceProcess {
    pub pid: u32,
    pub start: u64,
    pub comm: String,
    /// `Cpus_allowed_list` of its main thread; None when `status` could not be read.
    pub allowed: Option<CpuSet>,
}

/// A process's start time (`/proc/PID/stat` field 22): with its pid, which process it is.
/// None: no such process (or its `stat` unreadable), which is not "started at 0".
pub fn start_time(fs: &HostFs, pid: u32) -> Option<u64> {
    fs.read_parsed(format!("/proc/{pid}/stat"), parse_start_time)
        .ok()
}

/// The process `pid` as it is now (None once it is gone).
pub fn service_process(fs: &HostFs, pid: u32) -> Option<ServiceProcess> {
    let start = start_time(fs, pid)?;
    Some(ServiceProcess {
        pid,
        start,
        comm: fs
            .read_value(format!("/proc/{pid}/comm"))
            .unwrap_or_default(),
        allowed: fs
            .read_parsed(format!("/proc/{pid}/status"), parse_status_allowed)
            .ok(),
    })
}

/// A cgroup's path below /sys/fs/cgroup as a service is named by (`system.slice/echo.service`,
/// `cpu,cpuacct/grp` on v1): the slashes around it trimmed; None for an empty path or one with
/// `.`, `..` or an empty component, which names no group of its own.
pub fn cgroup_rel(path: &str) -> Option<String> {
    let rel = path.trim_matches('/');
    let ok = !rel.is_empty()
        && !rel
            .split('/')
            .any(|c| c == ".." || c == "." || c.is_empty());
    ok.then(|| rel.to_string())
}

/// Whether process `pid` is in the cgroup `rel` now, by its own `/proc/PID/cgroup`; false
/// once it is gone.
pub fn in_cgroup_now(fs: &HostFs, pid: u32, rel: &str) -> bool {
    fs.unrecorded()
        .read(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|text| in_cgroup(&text, rel))
}

/// The processes in the cgroup `rel` ([`cgroup_rel`]'s form), by each process's own
/// `/proc/PID/cgroup` ([`in_cgroup`]), not /sys/fs/cgroup's `cgroup.procs`: so it works where
/// /sys/fs/cgroup is not mounted, as under `ip netns exec`, which mounts a fresh sysfs. A
/// process that exits during the scan is not a member. The scan is not recorded (it reads
/// every process's `cgroup`; what it finds is recorded by its caller's later reads).
pub fn cgroup_members(fs: &HostFs, rel: &str) -> crate::Result<BTreeSet<u32>> {
    let scan = fs.unrecorded();
    let pids: Vec<u32> = scan
        .read_dir("/proc")?
        .iter()
        .filter_map(|e| e.parse().ok())
        .collect();
    Ok(pids
        .into_iter()
        .filter(|pid| in_cgroup_now(fs, *pid, rel))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, HostFs) {
        let d = tempfile::tempdir().unwrap();
        let put = |rel: &str, text: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        // Field 22 is the start time: 5000 for 77, 6000 for 78.
        let stat = |pid: u32, start: u64| {
            format!(
                "{pid} (echo d) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1000 50\n"
            )
        };
        put("proc/77/stat", &stat(77, 5000));
        put("proc/77/comm", "echo d\n");
        put("proc/77/status", "Name:\techo d\nCpus_allowed_list:\t0-3\n");
        put("proc/77/cgroup", "0::/system.slice/echo.service\n");
        put("proc/78/stat", &stat(78, 6000));
        put("proc/78/comm", "other\n");
        put("proc/78/cgroup", "0::/system.slice/other.service\n");
        // No stat: gone (or never a process), so no start time and no member.
        put("proc/79/comm", "half\n");
        put("proc/self/cgroup", "0::/system.slice/echo.service\n");
        let fs = HostFs::new(d.path());
        (d, fs)
    }

    #[test]
    fn a_process_is_its_pid_and_start_time() {
        let (_d, fs) = tree();
        assert_eq!(start_time(&fs, 77), Some(5000));
        assert_eq!(start_time(&fs, 79), None);
        assert_eq!(start_time(&fs, 80), None);
        let p = service_process(&fs, 77).unwrap();
        assert_eq!((p.pid, p.start, p.comm.as_str()), (77, 5000, "echo d"));
        assert_eq!(p.allowed.unwrap().to_list(), "0-3");
        // Its status unreadable: where it may run is unknown, not "nowhere".
        assert_eq!(service_process(&fs, 78).unwrap().allowed, None);
        assert!(service_process(&fs, 79).is_none());
    }

    #[test]
    fn a_cgroups_members_by_their_own_cgroup_files() {
        let (_d, fs) = tree();
        let m = cgroup_members(&fs, "system.slice/echo.service").unwrap();
        // `self` is no pid: not counted twice.
        assert_eq!(m.into_iter().collect::<Vec<_>>(), [77]);
        assert!(cgroup_members(&fs, "system.slice").unwrap().is_empty());
        assert_eq!(
            cgroup_rel("/system.slice/echo.service/").as_deref(),
            Some("system.slice/echo.service")
        );
        for bad in ["", "/", "a/../b", "a//b", "./a", "a/."] {
            assert_eq!(cgroup_rel(bad), None, "{bad:?}");
        }
    }
}
