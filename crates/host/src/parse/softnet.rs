//! `/proc/net/softnet_stat` (net/core/net-procfs.c `softnet_seq_show()`): one row per *online*
//! CPU, `%08x` 32-bit counters that wrap.
//!
//! | columns | kernels | adds |
//! |---|---|---|
//! | 9  | 2.6.x     | processed, dropped, time_squeeze, 5 zeros, cpu_collision |
//! | 10 | 2.6.35+   | received_rps |
//! | 11 | 3.11+     | flow_limit_count |
//! | 13 | 5.10+     | backlog_len, cpu index |
//! | 15 | 6.4+      | input_qlen, process_qlen |
//!
//! Without the index column a row's CPU is its position among the online CPUs, not its line
//! number (see [`SoftnetRow::resolve_cpus`]). More columns than known are accepted, for kernels
//! yet to come.

use crate::cpuset::CpuSet;
use crate::error::ParseError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftnetRow {
    /// 0-based line number.
    pub line: usize,
    pub columns: usize,
    pub processed: u32,
    pub dropped: u32,
    pub time_squeeze: u32,
    pub cpu_collision: u32,
    pub received_rps: Option<u32>,
    pub flow_limit_count: Option<u32>,
    pub backlog_len: Option<u32>,
    /// The CPU id printed by the kernel (5.10+).
    pub cpu_index: Option<u32>,
    pub input_qlen: Option<u32>,
    pub process_qlen: Option<u32>,
}

impl SoftnetRow {
    /// CPU id of every row: the printed index when there is one, else the n-th online CPU (the
    /// kernel skips offline CPUs), else the line number.
    pub fn resolve_cpus(rows: &[SoftnetRow], online: Option<&CpuSet>) -> Vec<u32> {
        let online: Vec<u32> = online.map(|s| s.iter().collect()).unwrap_or_default();
        rows.iter()
            .map(|r| {
                r.cpu_index
                    .or_else(|| online.get(r.line).copied())
                    .unwrap_or(r.line as u32)
            })
            .collect()
    }
}

fn hex_u32(tok: &str, line_no: usize, col: usize) -> Result<u32, ParseError> {
    if tok.is_empty() || tok.len() > 8 || !tok.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError::new(
            line_no,
            format!("column {col}: {tok:?} is not a 32-bit hex counter"),
        ));
    }
    u32::from_str_radix(tok, 16)
        .map_err(|_| ParseError::new(line_no, format!("column {col}: {tok:?} is not hex")))
}

pub fn parse_softnet_stat(text: &str) -> Result<Vec<SoftnetRow>, ParseError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut vals = [0u32; 15];
        let mut n = 0;
        for tok in line.split_ascii_whitespace() {
            let v = hex_u32(tok, i + 1, n + 1)?;
            if n < vals.len() {
                vals[n] = v;
            }
            n += 1;
        }
        if n < 9 {
            return Err(ParseError::new(
                i + 1,
                format!("{n} columns, at least 9 expected"),
            ));
        }
        let col = |c: usize| (n >= c).then(|| vals[c - 1]);
        rows.push(SoftnetRow {
            line: rows.len(),
            columns: n,
            processed: vals[0],
            dropped: vals[1],
            time_squeeze: vals[2],
            cpu_collision: vals[8],
            received_rps: col(10),
            flow_limit_count: col(11),
            backlog_len: col(12),
            cpu_index: col(13),
            input_qlen: col(14),
            process_qlen: col(15),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifteen_columns_use_the_index() {
        let text = "00000014 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
000000f2 00000001 00000002 00000000 00000000 00000000 00000000 00000000 00000000 00001c59 00000003 00000004 00000003 00000001 00000003
";
        let rows = parse_softnet_stat(text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].processed, 0xf2);
        assert_eq!(rows[1].dropped, 1);
        assert_eq!(rows[1].time_squeeze, 2);
        assert_eq!(rows[1].received_rps, Some(0x1c59));
        assert_eq!(rows[1].flow_limit_count, Some(3));
        assert_eq!(rows[1].backlog_len, Some(4));
        assert_eq!(rows[1].cpu_index, Some(3));
        assert_eq!(rows[1].process_qlen, Some(3));
        // The index wins over the line order.
        assert_eq!(SoftnetRow::resolve_cpus(&rows, None), [0, 3]);
    }

    #[test]
    fn every_historic_width() {
        for n in [9usize, 10, 11, 12, 13, 15, 16] {
            let line = (0..n)
                .map(|c| format!("{:08x}", c + 1))
                .collect::<Vec<_>>()
                .join(" ");
            let rows = parse_softnet_stat(&line).unwrap();
            assert_eq!(rows[0].columns, n);
            assert_eq!(rows[0].processed, 1);
            assert_eq!(rows[0].cpu_collision, 9);
            assert_eq!(rows[0].received_rps.is_some(), n >= 10);
            assert_eq!(rows[0].flow_limit_count.is_some(), n >= 11);
            assert_eq!(rows[0].cpu_index, (n >= 13).then_some(13));
        }
    }

    #[test]
    fn old_kernels_map_lines_to_online_cpus() {
        let line = "00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000";
        let text = format!("{line}\n{line}\n{line}\n");
        let rows = parse_softnet_stat(&text).unwrap();
        let online = CpuSet::parse_list("0,2-3", None).unwrap();
        assert_eq!(SoftnetRow::resolve_cpus(&rows, Some(&online)), [0, 2, 3]);
        assert_eq!(SoftnetRow::resolve_cpus(&rows, None), [0, 1, 2]);
    }

    #[test]
    fn rejects_short_or_non_hex_rows() {
        assert!(parse_softnet_stat("00000001 00000002").is_err());
        assert!(parse_softnet_stat("0000000g 0 0 0 0 0 0 0 0").is_err());
        assert!(parse_softnet_stat("100000000 0 0 0 0 0 0 0 0").is_err());
        assert_eq!(parse_softnet_stat("").unwrap(), vec![]);
    }
}
