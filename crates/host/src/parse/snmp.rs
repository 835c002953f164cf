//! `/proc/net/snmp` (net/ipv4/proc.c): pairs of lines, `Proto: Name Name ...` then
//! `Proto: value value ...`.

use crate::error::ParseError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snmp {
    /// Protocol (`Udp`, `Tcp`, `Ip`, ...) → counter name → value (some, like Tcp MaxConn, are -1).
    pub tables: BTreeMap<String, BTreeMap<String, i64>>,
}

impl Snmp {
    pub fn get(&self, proto: &str, counter: &str) -> Option<i64> {
        self.tables.get(proto)?.get(counter).copied()
    }
}

pub fn parse_snmp(text: &str) -> Result<Snmp, ParseError> {
    let mut snmp = Snmp::default();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    while let Some((i, names)) = lines.next() {
        let (proto, names) = names
            .split_once(':')
            .ok_or_else(|| ParseError::new(i + 1, "no \"Proto:\" prefix"))?;
        let (j, values) = lines
            .next()
            .ok_or_else(|| ParseError::new(i + 1, format!("{proto}: header without values")))?;
        let (proto2, values) = values
            .split_once(':')
            .ok_or_else(|| ParseError::new(j + 1, "no \"Proto:\" prefix"))?;
        if proto != proto2 {
            return Err(ParseError::new(
                j + 1,
                format!("{proto2} values follow {proto} names"),
            ));
        }
        let names: Vec<&str> = names.split_ascii_whitespace().collect();
        let values = values
            .split_ascii_whitespace()
            .map(|v| v.parse::<i64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| ParseError::new(j + 1, format!("{proto}: non-numeric value")))?;
        if names.len() != values.len() {
            return Err(ParseError::new(
                j + 1,
                format!("{proto}: {} names but {} values", names.len(), values.len()),
            ));
        }
        let table = snmp.tables.entry(proto.trim().to_string()).or_default();
        for (n, v) in names.into_iter().zip(values) {
            table.insert(n.to_string(), v);
        }
    }
    Ok(snmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_udp_errors() {
        let text = "Tcp: RtoAlgorithm RtoMin MaxConn
Tcp: 1 200 -1
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 100 2 7 90 5 0 0 0 0
";
        let s = parse_snmp(text).unwrap();
        assert_eq!(s.get("Udp", "InErrors"), Some(7));
        assert_eq!(s.get("Udp", "RcvbufErrors"), Some(5));
        assert_eq!(s.get("Tcp", "MaxConn"), Some(-1));
        assert_eq!(s.get("Udp", "Nope"), None);
    }

    #[test]
    fn rejects_mismatches() {
        assert!(parse_snmp("Udp: A B\nUdp: 1\n").is_err());
        assert!(parse_snmp("Udp: A B\n").is_err());
        assert!(parse_snmp("Udp: A\nTcp: 1\n").is_err());
    }
}
