//! `/proc/net/dev` (net/core/net-procfs.c `dev_seq_printf_stats()`).

use crate::error::ParseError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetDevStats {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errs: u64,
    pub rx_drop: u64,
    pub rx_fifo: u64,
    pub rx_frame: u64,
    pub rx_compressed: u64,
    pub rx_multicast: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errs: u64,
    pub tx_drop: u64,
    pub tx_fifo: u64,
    pub tx_colls: u64,
    pub tx_carrier: u64,
    pub tx_compressed: u64,
}

pub fn parse_net_dev(text: &str) -> Result<Vec<NetDevStats>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // Two header lines ("Inter-|   Receive ...", " face |bytes ...") carry a '|'.
        if line.contains('|') || line.trim().is_empty() {
            continue;
        }
        // Interface names cannot contain ':' (dev_valid_name), and old kernels glue the first
        // counter to it ("eth0:1234"), so split at the first colon rather than on blanks.
        let (name, rest) = line
            .split_once(':')
            .ok_or_else(|| ParseError::new(i + 1, "no \"name:\" prefix"))?;
        let v = rest
            .split_ascii_whitespace()
            .map(|f| f.parse::<u64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| ParseError::new(i + 1, format!("{}: non-numeric counter", name.trim())))?;
        if v.len() != 16 {
            return Err(ParseError::new(
                i + 1,
                format!("{}: {} counters, 16 expected", name.trim(), v.len()),
            ));
        }
        out.push(NetDevStats {
            name: name.trim().to_string(),
            rx_bytes: v[0],
            rx_packets: v[1],
            rx_errs: v[2],
            rx_drop: v[3],
            rx_fifo: v[4],
            rx_frame: v[5],
            rx_compressed: v[6],
            rx_multicast: v[7],
            tx_bytes: v[8],
            tx_packets: v[9],
            tx_errs: v[10],
            tx_drop: v[11],
            tx_fifo: v[12],
            tx_colls: v[13],
            tx_carrier: v[14],
            tx_compressed: v[15],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_and_glued_names() {
        let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0:12345678 9000 1 2 3 4 5 6 7654321 8000 0 9 0 0 0 0
";
        let devs = parse_net_dev(text).unwrap();
        assert_eq!(devs.len(), 2);
        assert_eq!(devs[1].name, "eth0");
        assert_eq!(devs[1].rx_bytes, 12345678);
        assert_eq!(devs[1].rx_drop, 2);
        assert_eq!(devs[1].tx_drop, 9);
    }

    #[test]
    fn rejects_short_rows() {
        assert!(parse_net_dev("eth0: 1 2 3").is_err());
        assert!(parse_net_dev("eth0 1 2 3").is_err());
    }
}
