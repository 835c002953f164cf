//! RFS sizing (Documentation/networking/scaling.rst), the same for the doctor's advice and
//! tune's writes.

/// scaling.rst, "Suggested Configuration" for RFS: 32768 for a moderately loaded server.
pub const RFS_ENTRIES: u64 = 32768;

/// `rps_flow_cnt` per queue: the global table shared out, rounded up to a power of two as the
/// kernel does (net-sysfs.c store_rps_dev_flow_table_cnt()).
pub fn flow_cnt_per_queue(entries: u64, queues: usize) -> u64 {
    (entries / queues.max(1) as u64).max(1).next_power_of_two()
}
