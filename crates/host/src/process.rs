//! One process as the scheduler sees it: its threads, the CPU each last ran on and the CPUs each
//! may run on (`/proc/PID/task/TID/stat` field 39 `processor`, `status` `Cpus_allowed_list`;
//! Documentation/filesystems/proc.rst, table 1-4).

use crate::cpuset::CpuSet;
use crate::error::{ParseError, Result};
use crate::fs::HostFs;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPlacement {
    pub tid: u32,
    pub comm: String,
    /// The CPU the thread last ran on.
    pub last_cpu: u32,
    /// Where the scheduler may run it (`sched_setaffinity`, cpusets).
    pub allowed: CpuSet,
    /// User + system time in USER_HZ ticks, to tell busy threads from sleepers.
    pub cpu_ticks: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessPlacement {
    pub pid: u32,
    pub comm: String,
    pub threads: Vec<ThreadPlacement>,
}

/// `(comm, last_cpu, utime + stime)` from one `stat` line. The comm is in parentheses and may
/// itself contain spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_task_stat(text: &str) -> std::result::Result<(String, u32, u64), ParseError> {
    let open = text
        .find('(')
        .ok_or_else(|| ParseError::new(1, "no \"(comm)\" field"))?;
    let close = text
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| ParseError::new(1, "no closing \")\" after comm"))?;
    let comm = text[open + 1..close].to_string();
    // Fields after the comm start at field 3 (state); `processor` is field 39, utime 14, stime 15.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> std::result::Result<u64, ParseError> {
        rest.get(n - 3)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| ParseError::new(1, format!("field {n} missing or not a number")))
    };
    let cpu = u32::try_from(field(39)?)
        .map_err(|_| ParseError::new(1, "field 39 (processor) out of range"))?;
    Ok((comm, cpu, field(14)? + field(15)?))
}

/// A process's start time (`stat` field 22, in clock ticks after boot): with the pid, what
/// names one process, since a pid is reused once its process is gone.
pub fn parse_start_time(text: &str) -> std::result::Result<u64, ParseError> {
    let close = text
        .rfind(')')
        .ok_or_else(|| ParseError::new(1, "no closing \")\" after comm"))?;
    text[close + 1..]
        .split_whitespace()
        .nth(22 - 3)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| ParseError::new(1, "field 22 (starttime) missing or not a number"))
}

/// `Cpus_allowed_list` from a `status` file.
pub fn parse_status_allowed(text: &str) -> std::result::Result<CpuSet, ParseError> {
    let (i, line) = text
        .lines()
        .enumerate()
        .find(|(_, l)| l.starts_with("Cpus_allowed_list:"))
        .ok_or_else(|| ParseError::new(1, "no Cpus_allowed_list line"))?;
    let list = line["Cpus_allowed_list:".len()..].trim();
    CpuSet::parse_list(list, None).map_err(|e| ParseError::new(i + 1, e.to_string()))
}

/// A process's parent and its four uids (real, effective, saved, file system) from its
/// `status` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusIds {
    pub ppid: u32,
    pub uids: [u32; 4],
}

/// The value of one `Key:` line of a `status` file, trimmed (`Name:` → `irqbalance`).
pub fn status_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

/// `PPid:` and `Uid:` from a `status` file.
pub fn parse_status_ids(text: &str) -> std::result::Result<StatusIds, ParseError> {
    let field = |key: &str| {
        text.lines()
            .enumerate()
            .find_map(|(i, l)| l.strip_prefix(key).map(|v| (i, v.trim())))
            .ok_or_else(|| ParseError::new(1, format!("no {key} line")))
    };
    let (i, ppid) = field("PPid:")?;
    let ppid = ppid
        .parse()
        .map_err(|_| ParseError::new(i + 1, "PPid is not a number"))?;
    let (i, uids) = field("Uid:")?;
    let uids: Vec<u32> = uids
        .split_whitespace()
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| ParseError::new(i + 1, "Uid is not four numbers"))?;
    let uids: [u32; 4] = uids
        .try_into()
        .map_err(|_| ParseError::new(i + 1, "Uid is not four numbers"))?;
    Ok(StatusIds { ppid, uids })
}

/// Whether a `/proc/PID/cgroup` text puts the process in `rel`, a path below /sys/fs/cgroup:
/// on cgroup v2 the unified path (`0::/rel`); on v1 either a hierarchy's path (`rel` whole) or
/// a hierarchy named by its first component (`cpu,cpuacct/grp` → the line whose controllers
/// are `cpu,cpuacct`, or one of them, with the path `/grp`).
pub fn in_cgroup(text: &str, rel: &str) -> bool {
    let whole = format!("/{rel}");
    let split = rel.split_once('/');
    text.lines().any(|line| {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            return false;
        };
        if path == whole {
            return true;
        }
        split.is_some_and(|(c, rest)| {
            path.strip_prefix('/') == Some(rest)
                && (controllers == c
                    || controllers
                        .split(',')
                        .any(|x| x == c || x.strip_prefix("name=") == Some(c)))
        })
    })
}

/// Reads every thread of `pid`. Threads that exit while being read are skipped.
pub fn read_process(fs: &HostFs, pid: u32) -> Result<ProcessPlacement> {
    let comm = fs.read_value(format!("/proc/{pid}/comm"))?;
    let mut threads = Vec::new();
    let mut tids: Vec<u32> = fs
        .read_dir(format!("/proc/{pid}/task"))?
        .iter()
        .filter_map(|t| t.parse().ok())
        .collect();
    tids.sort_unstable();
    for tid in tids {
        let dir = format!("/proc/{pid}/task/{tid}");
        let Ok((tcomm, last_cpu, cpu_ticks)) =
            fs.read_parsed(format!("{dir}/stat"), parse_task_stat)
        else {
            continue;
        };
        let Ok(allowed) = fs.read_parsed(format!("{dir}/status"), parse_status_allowed) else {
            continue;
        };
        threads.push(ThreadPlacement {
            tid,
            comm: tcomm,
            last_cpu,
            allowed,
            cpu_ticks,
        });
    }
    Ok(ProcessPlacement { pid, comm, threads })
}

#[cfg(test)]
mod tests {
    #[test]
    fn cgroup_membership_on_v1_and_v2() {
        let v2 = "0::/system.slice/echo.service\n";
        assert!(super::in_cgroup(v2, "system.slice/echo.service"));
        assert!(!super::in_cgroup(v2, "system.slice/other.service"));
        assert!(!super::in_cgroup(v2, "system.slice"));
        let v1 = "12:blkio:/grp\n11:cpu,cpuacct:/grp2\n1:name=systemd:/system.slice/echo.service\n";
        assert!(super::in_cgroup(v1, "blkio/grp"));
        assert!(super::in_cgroup(v1, "cpu,cpuacct/grp2"));
        assert!(super::in_cgroup(v1, "cpu/grp2"));
        assert!(super::in_cgroup(v1, "system.slice/echo.service"));
        assert!(super::in_cgroup(v1, "systemd/system.slice/echo.service"));
        assert!(!super::in_cgroup(v1, "blkio/grp2"));
        assert!(!super::in_cgroup(v1, "memory/grp"));
    }

    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_paren() {
        let line = "4242 (my (odd) app) S 1 4242 4242 0 -1 4194560 100 0 0 0 70 30 0 0 20 0 2 0 \
                    123 1000 50 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0";
        let (comm, cpu, ticks) = parse_task_stat(line).unwrap();
        assert_eq!(comm, "my (odd) app");
        assert_eq!(cpu, 3);
        assert_eq!(ticks, 100);
        assert!(parse_task_stat("4242 (x) S 1 2").is_err());
        assert!(parse_task_stat("no parens").is_err());
        assert_eq!(parse_start_time(line).unwrap(), 123);
        assert!(parse_start_time("4242 (x) S 1 2").is_err());
    }

    #[test]
    fn allowed_list() {
        let s = "Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1,4\n";
        assert_eq!(parse_status_allowed(s).unwrap().to_list(), "0-1,4");
        assert!(parse_status_allowed("Name: x\n").is_err());
    }

    #[test]
    fn parent_and_uids() {
        let s = "Name:\tnginx\nPPid:\t1\nUid:\t33\t33\t0\t33\nGid:\t33\t33\t33\t33\n";
        let ids = parse_status_ids(s).unwrap();
        assert_eq!((ids.ppid, ids.uids), (1, [33, 33, 0, 33]));
        assert!(parse_status_ids("PPid:\t1\nUid:\t1 2\n").is_err());
        assert!(parse_status_ids("Uid:\t1 2 3 4\n").is_err());
    }
}
