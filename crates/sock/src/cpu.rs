//! The CPU a thread runs on, and pinning threads (sched_setaffinity(2) with pid 0 = the
//! calling thread).

use std::io;
use std::mem::size_of;

/// The CPU this thread is running on now (sched_getcpu(3)); None if the call fails.
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// Restricts the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[u32]) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bitmap for which all-zero bytes are a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu as usize >= max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is beyond the {max}-CPU affinity mask"),
            ));
        }
        // SAFETY: `cpu` was checked to be inside the bitmap, so CPU_SET writes within `set`.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    }
    // SAFETY: `set` is a live, initialized cpu_set_t and its exact size is passed; pid 0 means
    // the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The CPUs the calling thread may run on (sched_getaffinity(2)): the cgroup's cpuset and any
/// taskset the process was started under.
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is a plain bitmap for which all-zero bytes are a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t and its exact size is passed; the kernel writes at
    // most that many bytes. pid 0 means the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * size_of::<libc::cpu_set_t>();
    // SAFETY: every index is below the bitmap's size in bits, so CPU_ISSET reads within `set`.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

/// Checks up front that every CPU asked for is one this process may run on, so a typo such
/// as `--cpu 99` is an error naming the CPU instead of a silently unpinned run.
/// `what` names the flag or setting in the message.
pub fn check_cpus(what: &str, cpus: &[u32]) -> io::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let allowed = allowed_cpus()?;
    if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{what}: CPU {bad} is not one this process may run on (allowed: {})",
                list(&allowed)
            ),
        ));
    }
    Ok(())
}

/// `0-3,6` form of a sorted CPU list.
fn list(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Moves the calling thread to SCHED_FIFO at `priority` (1..=99): it then runs before every
/// normal thread on its CPU. Needs CAP_SYS_NICE (or an RLIMIT_RTPRIO allowance).
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a live sched_param; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CPU time and context switches of one thread (getrusage(RUSAGE_THREAD), 2.6.26+).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    pub user_us: u64,
    pub sys_us: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl ThreadUsage {
    /// The calling thread's usage so far.
    pub fn current() -> io::Result<ThreadUsage> {
        /// include/uapi/linux/resource.h; not exported by libc for every target.
        const RUSAGE_THREAD: libc::c_int = 1;
        ThreadUsage::of(RUSAGE_THREAD)
    }

    /// What this process's waited-for children (and the descendants they waited for) have
    /// used so far (getrusage(RUSAGE_CHILDREN)): the delta over a child's run is that child's
    /// whole process tree.
    pub fn children() -> io::Result<ThreadUsage> {
        ThreadUsage::of(libc::RUSAGE_CHILDREN)
    }

    fn of(who: libc::c_int) -> io::Result<ThreadUsage> {
        // SAFETY: rusage is plain integers, for which all-zero bytes are valid.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a live rusage the kernel fills.
        let rc = unsafe { libc::getrusage(who, &mut ru) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Ok(ThreadUsage {
            user_us: us(ru.ru_utime),
            sys_us: us(ru.ru_stime),
            voluntary_switches: ru.ru_nvcsw as u64,
            involuntary_switches: ru.ru_nivcsw as u64,
        })
    }

    /// Usage since `earlier`.
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
        }
    }

    pub fn add(&mut self, o: &ThreadUsage) {
        self.user_us += o.user_us;
        self.sys_us += o.sys_us;
        self.voluntary_switches += o.voluntary_switches;
        self.involuntary_switches += o.involuntary_switches;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_moves_the_thread() {
        std::thread::spawn(|| {
            pin_current_thread(&[0]).unwrap();
            assert_eq!(current_cpu(), Some(0));
            assert!(pin_current_thread(&[100_000]).is_err());
            // Spin until the thread's own accounting shows 10 ms, with a wall deadline far
            // beyond it: a fixed 30 ms of wall time got 3.7 ms of CPU on a busy 2-core
            // machine. What is tested is that the usage grows with work, not how fast.
            let a = ThreadUsage::current().unwrap();
            let t = std::time::Instant::now();
            let mut d = ThreadUsage::current().unwrap().since(&a);
            while d.user_us + d.sys_us < 10_000 && t.elapsed() < std::time::Duration::from_secs(60)
            {
                for _ in 0..100_000 {
                    std::hint::black_box(0);
                }
                d = ThreadUsage::current().unwrap().since(&a);
            }
            assert!(d.user_us + d.sys_us >= 10_000, "{d:?}");
        })
        .join()
        .unwrap();
    }
}

#[cfg(test)]
mod check_tests {
    use super::*;

    #[test]
    fn a_cpu_outside_the_allowed_set_is_named() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        check_cpus("--cpu", &allowed).unwrap();
        let e = check_cpus("--cpu", &[9999]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().starts_with("--cpu: CPU 9999 is not"), "{e}");
        assert_eq!(list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }
}
