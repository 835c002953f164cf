//! Pure parsers: `&str -> Result<T, ParseError>`, no I/O. Each takes the whole text of one file.

mod interrupts;
mod netdev;
mod snmp;
mod softirqs;
mod softnet;
mod stat;

pub use interrupts::{Interrupts, IrqLabel, IrqRow, parse_interrupts};
pub use netdev::{NetDevStats, parse_net_dev};
pub use snmp::{Snmp, parse_snmp};
pub use softirqs::{Softirqs, parse_softirqs};
pub use softnet::{SoftnetRow, parse_softnet_stat};
pub use stat::{CpuTimes, ProcStat, parse_proc_stat};

use crate::error::ParseError;

/// A decimal integer such as a sysctl or sysfs attribute (`300\n`, `-1`).
pub fn parse_int(text: &str) -> Result<i64, ParseError> {
    let t = text.trim();
    t.parse()
        .map_err(|_| ParseError::new(1, format!("{t:?} is not an integer")))
}

/// A non-negative decimal integer.
pub fn parse_uint(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse()
        .map_err(|_| ParseError::new(1, format!("{t:?} is not a non-negative integer")))
}

/// CPU ids from a header such as `CPU0 CPU1 CPU7` (/proc/interrupts, /proc/softirqs). The header
/// names only online CPUs, so the ids are taken from the names, never from the column position.
fn parse_cpu_header(line: &str, line_no: usize) -> Result<Vec<u32>, ParseError> {
    line.split_whitespace()
        .map(|tok| {
            tok.strip_prefix("CPU")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| {
                    ParseError::new(line_no, format!("{tok:?} is not a CPU column header"))
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ints() {
        assert_eq!(parse_int("-1\n").unwrap(), -1);
        assert_eq!(parse_uint(" 300\n").unwrap(), 300);
        assert!(parse_uint("-1").is_err());
        assert!(parse_int("abc").is_err());
        assert_eq!(parse_cpu_header("  CPU0 CPU3  ", 1).unwrap(), vec![0, 3]);
        assert!(parse_cpu_header("CPU0 X", 1).is_err());
    }

    proptest! {
        // Every parser must turn arbitrary text into Ok or Err, never a panic.
        #[test]
        fn no_parser_panics(s in "\\PC{0,400}") {
            let _ = parse_proc_stat(&s);
            let _ = parse_softirqs(&s);
            let _ = parse_interrupts(&s);
            let _ = parse_softnet_stat(&s);
            let _ = parse_net_dev(&s);
            let _ = parse_snmp(&s);
            let _ = parse_int(&s);
        }

        // Text that looks like the real files (digits, colons, hex, CPU headers) reaches deeper.
        #[test]
        fn no_parser_panics_on_lookalikes(lines in proptest::collection::vec("(CPU[0-9] ?){0,4}|[ 0-9a-fA-Z:,.|-]{0,60}", 0..12)) {
            let s = lines.join("\n");
            let _ = parse_proc_stat(&s);
            let _ = parse_softirqs(&s);
            let _ = parse_interrupts(&s);
            let _ = parse_softnet_stat(&s);
            let _ = parse_net_dev(&s);
            let _ = parse_snmp(&s);
        }
    }
}
