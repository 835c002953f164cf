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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_moves_the_thread() {
        std::thread::spawn(|| {
            pin_current_thread(&[0]).unwrap();
            assert_eq!(current_cpu(), Some(0));
            assert!(pin_current_thread(&[100_000]).is_err());
        })
        .join()
        .unwrap();
    }
}
