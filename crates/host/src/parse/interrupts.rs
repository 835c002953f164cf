//! `/proc/interrupts` (kernel/irq/proc.c `show_interrupts()` and the arch hooks).
//!
//! Layout: a header naming the *online* CPUs (`CPU0 CPU1 CPU5`), then one row per IRQ with a
//! count per online CPU, the chip name, the hardware IRQ with its trigger, and the actions. The
//! chip column has changed over the years and differs per architecture:
//!
//! ```text
//!  28:  0  0  PCI-MSIX-0000:00:01.0   0-edge      virtio0-config        (6.x x86)
//!  53:  0  9  IR-PCI-MSI 524288-edge      eth0-TxRx-0                    (4.x/5.x x86)
//!  40:  0  3  PCI-MSI-edge      eth0                                     (2.6/3.x)
//!  48: 48  0  XICS 4127 Edge      virtio0-input.0                        (POWER)
//!  11:  0  0  IO-APIC  11-fasteoi   uhci_hcd:usb3, ehci_hcd:usb1        (shared line)
//! NMI:  0  0   Non-maskable interrupts                                    (arch row)
//! ERR:  0                                                                 (one value)
//! ```
//!
//! The parser is a byte scanner (no regex, no per-count allocation): a 256-CPU host has
//! hundreds of thousands of counts and `netsteer top` reads it every interval.

use super::parse_cpu_header;
use crate::error::ParseError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IrqLabel {
    /// A numbered IRQ (the directory name under /proc/irq).
    Number(u32),
    /// An architecture row: NMI, LOC, RES, CAL, TLB, HYP, IPI0, ERR, MIS, ...
    Arch(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrqRow {
    pub label: IrqLabel,
    /// Counts per column; columns are the header's CPUs (arch rows like ERR may have fewer).
    pub counts: Vec<u64>,
    /// Chip name (`PCI-MSIX-0000:00:03.0`, `IO-APIC`, `XICS`, `PCI-MSI-edge` on old kernels).
    pub chip: Option<String>,
    /// Hardware IRQ number within the chip's domain.
    pub hwirq: Option<String>,
    /// `edge`, `level`, `fasteoi`, `Edge`, ...
    pub trigger: Option<String>,
    /// Handler names; a shared line has several.
    pub actions: Vec<String>,
    /// Text of an arch row (`Non-maskable interrupts`).
    pub description: Option<String>,
}

impl IrqRow {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn number(&self) -> Option<u32> {
        match self.label {
            IrqLabel::Number(n) => Some(n),
            IrqLabel::Arch(_) => None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interrupts {
    /// CPU id of each count column.
    pub cpus: Vec<u32>,
    pub rows: Vec<IrqRow>,
}

impl Interrupts {
    pub fn irq(&self, irq: u32) -> Option<&IrqRow> {
        self.rows.iter().find(|r| r.label == IrqLabel::Number(irq))
    }

    /// Counts of one row keyed by CPU id.
    pub fn per_cpu<'a>(&'a self, row: &'a IrqRow) -> impl Iterator<Item = (u32, u64)> + 'a {
        self.cpus.iter().copied().zip(row.counts.iter().copied())
    }
}

/// Splits off the next white-space-delimited token; returns (token, rest).
fn next_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(|c: char| c.is_ascii_whitespace()).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

/// Reads up to `max` decimal counts from the start of `s` into `out`, byte by byte (this is the
/// hot loop of a 256-CPU host). A count is a run of digits followed by white space or the end;
/// anything else stops the scan. Returns the offset where the first non-count token starts.
fn scan_counts(s: &str, max: usize, out: &mut Vec<u64>) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    while out.len() < max {
        let token_start = i;
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        let start = i;
        let mut v: u64 = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            v = v.wrapping_mul(10).wrapping_add(u64::from(b[i] - b'0'));
            i += 1;
        }
        // The kernel prints `%10u`; more than 20 digits cannot be a count.
        let is_count = i > start && i - start <= 20 && (i == b.len() || b[i].is_ascii_whitespace());
        if !is_count {
            return token_start;
        }
        out.push(v);
    }
    i
}

fn is_trigger(tok: &str) -> bool {
    matches!(
        tok.to_ascii_lowercase().as_str(),
        "edge" | "level" | "fasteoi" | "simple" | "percpu" | "none"
    )
}

/// `1-edge`, `524288-edge`, `11-fasteoi` → (hwirq, trigger).
fn hwirq_with_trigger(tok: &str) -> Option<(&str, &str)> {
    let (num, trig) = tok.split_once('-')?;
    (!num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) && is_trigger(trig))
        .then_some((num, trig))
}

fn split_actions(s: &str) -> Vec<String> {
    let s = s.trim();
    if s.is_empty() {
        return Vec::new();
    }
    s.split(", ")
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

/// Chip names are one to a few words ("Hyper-V PCIe MSI"); the hwirq is looked for this far in.
const MAX_CHIP_WORDS: usize = 4;

/// The text after the counts of a numbered row: chip, hwirq/trigger, actions.
fn parse_irq_tail(row: &mut IrqRow, tail: &str) {
    let base = tail.as_ptr() as usize;
    let mut tokens: Vec<(usize, &str, &str)> = Vec::with_capacity(MAX_CHIP_WORDS + 2);
    let mut rest = tail;
    while tokens.len() < MAX_CHIP_WORDS + 2 {
        let Some((tok, after)) = next_token(rest) else {
            break;
        };
        tokens.push((tok.as_ptr() as usize - base, tok, after));
        rest = after;
    }
    for k in 1..tokens.len().min(MAX_CHIP_WORDS + 1) {
        let (start, tok, after) = tokens[k];
        let found = if let Some((hw, trig)) = hwirq_with_trigger(tok) {
            Some((hw, trig, after))
        } else if tok.bytes().all(|b| b.is_ascii_digit()) {
            tokens
                .get(k + 1)
                .filter(|(_, t, _)| is_trigger(t))
                .map(|(_, trig, after_trig)| (tok, *trig, *after_trig))
        } else {
            None
        };
        if let Some((hw, trig, actions)) = found {
            row.chip = Some(tail[..start].trim().to_string());
            row.hwirq = Some(hw.to_string());
            row.trigger = Some(trig.to_string());
            row.actions = split_actions(actions);
            return;
        }
    }
    // No hwirq column (2.6/3.x kernels print `PCI-MSI-edge  eth0`): one-word chip, then actions.
    if let Some((_, chip, after)) = tokens.first() {
        row.chip = Some(chip.to_string());
        row.actions = split_actions(after);
    }
}

pub fn parse_interrupts(text: &str) -> Result<Interrupts, ParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .skip_while(|(_, l)| l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| ParseError::new(0, "empty file"))?;
    let cpus = parse_cpu_header(header, 1)?;
    let ncpus = cpus.len();
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let (label, mut rest) = line
            .split_once(':')
            .ok_or_else(|| ParseError::new(i + 1, "no \"IRQ:\" label"))?;
        let label = label.trim();
        if label.is_empty() || label.contains(char::is_whitespace) {
            return Err(ParseError::new(i + 1, format!("bad IRQ label {label:?}")));
        }
        let label = match label.parse::<u32>() {
            Ok(n) => IrqLabel::Number(n),
            Err(_) if label.bytes().all(|b| b.is_ascii_digit()) => {
                return Err(ParseError::new(
                    i + 1,
                    format!("IRQ number {label} too large"),
                ));
            }
            Err(_) => IrqLabel::Arch(label.to_string()),
        };
        let mut counts = Vec::with_capacity(ncpus);
        let used = scan_counts(rest, ncpus, &mut counts);
        rest = &rest[used..];
        let mut row = IrqRow {
            label,
            counts,
            chip: None,
            hwirq: None,
            trigger: None,
            actions: Vec::new(),
            description: None,
        };
        match row.label {
            IrqLabel::Number(_) => {
                if row.counts.len() != ncpus {
                    return Err(ParseError::new(
                        i + 1,
                        format!("{} counts for {} CPUs", row.counts.len(), ncpus),
                    ));
                }
                parse_irq_tail(&mut row, rest);
            }
            IrqLabel::Arch(_) => {
                let d = rest.trim();
                row.description = (!d.is_empty()).then(|| d.to_string());
            }
        }
        rows.push(row);
    }
    Ok(Interrupts { cpus, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_6_18: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
 37:       5148          0 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 11:          0          0  IO-APIC  11-fasteoi   uhci_hcd:usb3, ehci_hcd:usb1, my dev
NMI:          0          0   Non-maskable interrupts
LOC:     283741     309175   Local timer interrupts
ERR:          0
MIS:          0
";

    #[test]
    fn parses_modern_x86() {
        let irqs = parse_interrupts(X86_6_18).unwrap();
        assert_eq!(irqs.cpus, [0, 1]);
        let r = irqs.irq(37).unwrap();
        assert_eq!(r.counts, [5148, 0]);
        assert_eq!(r.chip.as_deref(), Some("PCI-MSIX-0000:00:03.0"));
        assert_eq!(r.hwirq.as_deref(), Some("1"));
        assert_eq!(r.trigger.as_deref(), Some("edge"));
        assert_eq!(r.actions, ["virtio2-input.0"]);
        let shared = irqs.irq(11).unwrap();
        assert_eq!(shared.actions, ["uhci_hcd:usb3", "ehci_hcd:usb1", "my dev"]);
        assert_eq!(shared.trigger.as_deref(), Some("fasteoi"));
        let nmi = &irqs.rows[4];
        assert_eq!(nmi.label, IrqLabel::Arch("NMI".into()));
        assert_eq!(nmi.description.as_deref(), Some("Non-maskable interrupts"));
        let err = &irqs.rows[6];
        assert_eq!(err.counts, [0]);
        assert_eq!(err.description, None);
    }

    #[test]
    fn parses_old_and_other_architectures() {
        let text = "           CPU0       CPU1       CPU2
 40:          0          3          0   PCI-MSI-edge      eth0
 53:          1          2          3  IR-PCI-MSI 524288-edge      eth1-TxRx-0
 48:         48          0          0      XICS 4127 Edge      virtio0-input.0
 60:          0          0          0  Hyper-V PCIe MSI 134217728-edge      mlx5_comp0@pci:7870:00:02.0
 61:          0          0          0  GICv3  27 Level     arch_timer
 62:          0          0          0  dummy
IPI0:       10         20         30  Rescheduling interrupts
";
        let irqs = parse_interrupts(text).unwrap();
        let old = irqs.irq(40).unwrap();
        assert_eq!(old.chip.as_deref(), Some("PCI-MSI-edge"));
        assert_eq!(old.hwirq, None);
        assert_eq!(old.actions, ["eth0"]);
        let ir = irqs.irq(53).unwrap();
        assert_eq!(ir.chip.as_deref(), Some("IR-PCI-MSI"));
        assert_eq!(ir.hwirq.as_deref(), Some("524288"));
        assert_eq!(ir.actions, ["eth1-TxRx-0"]);
        let xics = irqs.irq(48).unwrap();
        assert_eq!(xics.chip.as_deref(), Some("XICS"));
        assert_eq!(xics.hwirq.as_deref(), Some("4127"));
        assert_eq!(xics.trigger.as_deref(), Some("Edge"));
        assert_eq!(xics.actions, ["virtio0-input.0"]);
        let hv = irqs.irq(60).unwrap();
        assert_eq!(hv.chip.as_deref(), Some("Hyper-V PCIe MSI"));
        assert_eq!(hv.actions, ["mlx5_comp0@pci:7870:00:02.0"]);
        let gic = irqs.irq(61).unwrap();
        assert_eq!(
            (gic.hwirq.as_deref(), gic.trigger.as_deref()),
            (Some("27"), Some("Level"))
        );
        let bare = irqs.irq(62).unwrap();
        assert_eq!(bare.chip.as_deref(), Some("dummy"));
        assert!(bare.actions.is_empty());
        assert_eq!(irqs.rows[6].counts, [10, 20, 30]);
    }

    #[test]
    fn offline_cpus_are_named_by_header() {
        let irqs = parse_interrupts("  CPU0 CPU3\n 5: 1 9 IO-APIC 5-edge x\n").unwrap();
        let row = irqs.irq(5).unwrap();
        assert_eq!(irqs.per_cpu(row).collect::<Vec<_>>(), [(0, 1), (3, 9)]);
    }

    #[test]
    fn rejects_broken_rows() {
        assert!(parse_interrupts("").is_err());
        assert!(parse_interrupts("CPU0 CPU1\n 5: 1\n").is_err());
        assert!(parse_interrupts("CPU0\n 5 1 chip\n").is_err());
        assert!(parse_interrupts("CPU0\n 99999999999: 1 chip\n").is_err());
    }
}
