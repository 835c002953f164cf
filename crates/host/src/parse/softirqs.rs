//! `/proc/softirqs` (fs/proc/softirqs.c): per-CPU counts of softirq handler *runs* per vector.

use super::parse_cpu_header;
use crate::error::ParseError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Softirqs {
    /// CPU ids of the columns (online CPUs only, from the header).
    pub cpus: Vec<u32>,
    /// Vector name (`NET_RX`) → count per column.
    pub rows: BTreeMap<String, Vec<u64>>,
}

impl Softirqs {
    /// Counts of one vector by CPU id.
    pub fn per_cpu(&self, vector: &str) -> BTreeMap<u32, u64> {
        self.rows
            .get(vector)
            .map(|counts| {
                self.cpus
                    .iter()
                    .copied()
                    .zip(counts.iter().copied())
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub fn parse_softirqs(text: &str) -> Result<Softirqs, ParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .skip_while(|(_, l)| l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| ParseError::new(0, "empty file"))?;
    let cpus = parse_cpu_header(header, 1)?;
    let mut rows = BTreeMap::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let (name, rest) = line
            .split_once(':')
            .ok_or_else(|| ParseError::new(i + 1, "no \"NAME:\" label"))?;
        let counts = rest
            .split_ascii_whitespace()
            .map(|f| f.parse::<u64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| ParseError::new(i + 1, format!("{}: non-numeric count", name.trim())))?;
        if counts.len() != cpus.len() {
            return Err(ParseError::new(
                i + 1,
                format!(
                    "{}: {} counts for {} CPUs",
                    name.trim(),
                    counts.len(),
                    cpus.len()
                ),
            ));
        }
        rows.insert(name.trim().to_string(), counts);
    }
    Ok(Softirqs { cpus, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_offline_cpu_gap() {
        let text = "                    CPU0       CPU2       \n          HI:          0          1\n      NET_TX:          5        100\n      NET_RX:     121000          7\n";
        let s = parse_softirqs(text).unwrap();
        assert_eq!(s.cpus, [0, 2]);
        let rx = s.per_cpu("NET_RX");
        assert_eq!(rx[&0], 121000);
        assert_eq!(rx[&2], 7);
        assert!(s.per_cpu("BLOCK").is_empty());
    }

    #[test]
    fn rejects_mismatched_rows() {
        assert!(parse_softirqs("").is_err());
        assert!(parse_softirqs("CPU0 CPU1\nNET_RX: 1\n").is_err());
        assert!(parse_softirqs("CPU0\nNET_RX 1\n").is_err());
        assert!(parse_softirqs("CPU0\nNET_RX: x\n").is_err());
    }
}
