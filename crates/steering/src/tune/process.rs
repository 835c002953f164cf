//! A process's CPU affinity as a tune target (a lane pins its service): every thread's,
//! through `taskset -a` (sched_setaffinity per task; threads made later inherit it from
//! their creator). A pid names the process only with its start time: once the process is
//! gone its pid may name another, which is never touched (ESRCH, as the kernel says).

use super::apply::{StepError, step_err};
use crate::model::desired::Target;
use netsteer_host::HostFs;
use netsteer_host::process::{parse_start_time, parse_status_allowed};

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
    match fs.read_parsed(format!("/proc/{pid}/stat"), parse_start_time) {
        Ok(s) if s == start => Ok(()),
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
