//! The `net.core` sysctls that steer packet processing (Documentation/admin-guide/sysctl/net.rst).
//! Most exist only in the initial network namespace; `rps_default_mask` (6.2+) is per namespace.

use crate::cpuset::CpuSet;
use crate::field::Field;
use crate::fs::HostFs;
use crate::parse::parse_int;
use crate::topology::read_mask;
use serde::{Deserialize, Serialize};

pub const NET_CORE: &str = "/proc/sys/net/core";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetCoreSysctls {
    /// µs of busy polling for poll/select (0 = off).
    pub busy_poll: Field<i64>,
    /// µs of busy polling for blocking reads (0 = off).
    pub busy_read: Field<i64>,
    /// Packets one `net_rx_action` may process before yielding (time_squeeze when hit).
    pub netdev_budget: Field<i64>,
    /// µs one `net_rx_action` may run (default 2 jiffies: 2000 on HZ=1000, 8000 on HZ=250).
    pub netdev_budget_usecs: Field<i64>,
    /// Per-CPU backlog length; softnet `dropped` counts overflows.
    pub netdev_max_backlog: Field<i64>,
    /// Global RFS table size (0 = RFS off).
    pub rps_sock_flow_entries: Field<i64>,
    pub dev_weight: Field<i64>,
    pub flow_limit_cpu_bitmap: Field<CpuSet>,
    pub flow_limit_table_len: Field<i64>,
    /// RPS mask given to queues created later (6.2+, per network namespace).
    pub rps_default_mask: Field<CpuSet>,
}

fn int(fs: &HostFs, name: &str) -> Field<i64> {
    fs.read_parsed(format!("{NET_CORE}/{name}"), parse_int)
        .into()
}

fn mask(fs: &HostFs, name: &str) -> Field<CpuSet> {
    read_mask(fs, &format!("{NET_CORE}/{name}")).into()
}

pub fn read_net_core(fs: &HostFs) -> NetCoreSysctls {
    NetCoreSysctls {
        busy_poll: int(fs, "busy_poll"),
        busy_read: int(fs, "busy_read"),
        netdev_budget: int(fs, "netdev_budget"),
        netdev_budget_usecs: int(fs, "netdev_budget_usecs"),
        netdev_max_backlog: int(fs, "netdev_max_backlog"),
        rps_sock_flow_entries: int(fs, "rps_sock_flow_entries"),
        dev_weight: int(fs, "dev_weight"),
        flow_limit_cpu_bitmap: mask(fs, "flow_limit_cpu_bitmap"),
        flow_limit_table_len: int(fs, "flow_limit_table_len"),
        rps_default_mask: mask(fs, "rps_default_mask"),
    }
}
