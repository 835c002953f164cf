//! A process's CPU affinity as a tune target (a lane pins its service): every thread's,
//! through `taskset -a` (sched_setaffinity per task; threads made later inherit it from
//! their creator). A pid names the process only with its start time: once the process is
//! gone its pid may name another, which is never touched (ESRCH, as the kernel says).

use super::apply::{StepError, step_err};
use crate::model::desired::Target;
use netsteer_host::HostFs;
use netsteer_host::process::parse_status_allowed;
use netsteer_host::service::start_time;
use netsteer_nic::NicBackend;

fn gone(target: &Target, pid: u32) -> StepError {
    StepError {
        errno: Some(libc::ESRCH),
        ..step_err(
            target,
            None,
            format!("process {pid} is gone (its pid is free or names another process)"),
        )
    }
}

/// The process `pid` started at `start`, or ESRCH.
fn same_process(fs: &HostFs, target: &Target, pid: u32, start: u64) -> Result<(), StepError> {
    match start_time(fs, pid) {
        Some(s) if s == start => Ok(()),
        _ => Err(gone(target, pid)),
    }
}

/// `Cpus_allowed_list` of the process (its main thread's).
pub fn read_affinity(
    fs: &HostFs,
    target: &Target,
    pid: u32,
    start: u64,
) -> Result<String, StepError> {
    same_process(fs, target, pid, start)?;
    fs.read_parsed(format!("/proc/{pid}/status"), parse_status_allowed)
        .map(|c| c.to_list())
        .map_err(|_| gone(target, pid))
}

/// Every thread of the process to the CPUs of `value` (a CPU list).
pub fn write_affinity(
    fs: &HostFs,
    target: &Target,
    pid: u32,
    start: u64,
    value: &str,
) -> Result<(), StepError> {
    same_process(fs, target, pid, start)?;
    let out = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", value.trim(), &pid.to_string()])
        .output()
        .map_err(|e| step_err(target, None, format!("taskset: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    // Gone between the check and the write: said as ESRCH.
    same_process(fs, target, pid, start)?;
    Err(step_err(
        target,
        None,
        format!(
            "taskset -a -p -c {} {pid}: {}",
            value.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    ))
}

/// The pid of NAPI `napi`'s kthread on `dev` now (netdev netlink's napi-get), if it has one.
fn napi_thread_pid(nic: &dyn NicBackend, dev: &str, napi: u32) -> Option<u32> {
    nic.settings(dev)
        .netdev()
        .ok()?
        .napis
        .iter()
        .find(|n| n.id == napi)?
        .pid
}

/// The kthread's `Cpus_allowed_list`, or "" when the NAPI has none (not threaded).
pub fn read_napi_thread(
    fs: &HostFs,
    nic: &dyn NicBackend,
    target: &Target,
    dev: &str,
    napi: u32,
) -> Result<String, StepError> {
    let Some(pid) = napi_thread_pid(nic, dev, napi) else {
        return Ok(String::new());
    };
    fs.read_parsed(format!("/proc/{pid}/status"), parse_status_allowed)
        .map(|c| c.to_list())
        .map_err(|e| step_err(target, None, format!("kthread {pid}: {e}")))
}

/// Pins the NAPI's kthread to the CPUs of `value`; "" (what a NAPI without a kthread read as)
/// has nothing to pin: the kthread went with `threaded` 0.
pub fn write_napi_thread(
    fs: &HostFs,
    nic: &dyn NicBackend,
    target: &Target,
    dev: &str,
    napi: u32,
    value: &str,
) -> Result<(), StepError> {
    if value.trim().is_empty() {
        return Ok(());
    }
    let pid = napi_thread_pid(nic, dev, napi).ok_or_else(|| {
        step_err(
            target,
            Some(libc::ESRCH),
            format!("NAPI {napi} of {dev} has no kthread (threaded is off)"),
        )
    })?;
    let start = start_time(fs, pid).ok_or_else(|| gone(target, pid))?;
    write_affinity(fs, target, pid, start, value)
}
