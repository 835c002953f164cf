//! `/proc/stat` (fs/proc/stat.c): per-CPU time in USER_HZ ticks, context switches, softirq totals.

use crate::error::ParseError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One `cpu` line. Columns absent on old kernels (steal since 2.6.11, guest 2.6.24, guest_nice
/// 2.6.33) read as zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
    pub guest: u64,
    pub guest_nice: u64,
}

impl CpuTimes {
    /// Total ticks the way mpstat sums them: guest time is already inside user/nice, so it is not
    /// added again.
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub total: CpuTimes,
    /// `cpuN` lines by CPU id (only online CPUs appear).
    pub cpus: BTreeMap<u32, CpuTimes>,
    pub ctxt: Option<u64>,
    /// First number of the `intr` line: all interrupts since boot.
    pub intr_total: Option<u64>,
    /// The `softirq` line: total, then per vector (HI TIMER NET_TX NET_RX ...).
    pub softirq: Vec<u64>,
}

pub fn parse_proc_stat(text: &str) -> Result<ProcStat, ParseError> {
    let mut stat = ProcStat::default();
    let mut saw_total = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let mut fields = line.split_ascii_whitespace();
        let Some(key) = fields.next() else { continue };
        if let Some(id) = key.strip_prefix("cpu") {
            let values = fields
                .map(|f| f.parse::<u64>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| ParseError::new(line_no, format!("{key}: non-numeric column")))?;
            if values.len() < 4 {
                return Err(ParseError::new(
                    line_no,
                    format!("{key}: {} columns, at least 4 expected", values.len()),
                ));
            }
            let v = |i: usize| values.get(i).copied().unwrap_or(0);
            let times = CpuTimes {
                user: v(0),
                nice: v(1),
                system: v(2),
                idle: v(3),
                iowait: v(4),
                irq: v(5),
                softirq: v(6),
                steal: v(7),
                guest: v(8),
                guest_nice: v(9),
            };
            if id.is_empty() {
                stat.total = times;
                saw_total = true;
            } else {
                let cpu = id
                    .parse()
                    .map_err(|_| ParseError::new(line_no, format!("{key:?} is not a CPU")))?;
                stat.cpus.insert(cpu, times);
            }
            continue;
        }
        let first = |name: &str, mut it: std::str::SplitAsciiWhitespace| {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| ParseError::new(line_no, format!("{name}: missing count")))
        };
        match key {
            "ctxt" => stat.ctxt = Some(first("ctxt", fields)?),
            "intr" => stat.intr_total = Some(first("intr", fields)?),
            "softirq" => {
                stat.softirq = fields
                    .map(|f| f.parse::<u64>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| ParseError::new(line_no, "softirq: non-numeric column"))?
            }
            _ => {}
        }
    }
    if !saw_total {
        return Err(ParseError::new(0, "no aggregate \"cpu\" line"));
    }
    Ok(stat)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT_6_18: &str = "cpu  2255 34 2290 22625563 6290 0 127 0 0 0
cpu0 1132 34 1105 11311746 3105 0 98 3 0 0
cpu1 1123 0 1185 11313817 3185 0 29 0 0 0
intr 114930548 113199788 3 0 5 263 0 0 0 0
ctxt 1990473
btime 1062191376
processes 2915
procs_running 1
procs_blocked 0
softirq 12121 3 5000 10 6990 0 0 1 100 0 17
";

    #[test]
    fn parses_current_kernel() {
        let s = parse_proc_stat(STAT_6_18).unwrap();
        assert_eq!(s.cpus.len(), 2);
        assert_eq!(s.cpus[&0].softirq, 98);
        assert_eq!(s.cpus[&0].steal, 3);
        assert_eq!(s.total.idle, 22625563);
        assert_eq!(s.ctxt, Some(1990473));
        assert_eq!(s.intr_total, Some(114930548));
        assert_eq!(s.softirq[4], 6990);
        assert_eq!(s.cpus[&1].total(), 1123 + 1185 + 11313817 + 3185 + 29);
    }

    #[test]
    fn offline_cpus_leave_gaps_and_old_kernels_have_fewer_columns() {
        let s = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4 5 6 7\ncpu5 1 1 1 1\n").unwrap();
        assert_eq!(s.cpus.keys().copied().collect::<Vec<_>>(), [0, 5]);
        assert_eq!(s.cpus[&0].softirq, 7);
        assert_eq!(s.cpus[&0].steal, 0);
    }

    #[test]
    fn rejects_broken_text() {
        assert!(parse_proc_stat("").is_err());
        assert!(parse_proc_stat("cpu 1 2\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 3 4\ncpuX 1 2 3 4\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 3 x\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 3 4\nctxt\n").is_err());
    }
}
