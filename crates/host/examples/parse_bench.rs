//! Parses one counter sample of a synthetic 256-CPU host (/proc/interrupts with 600 IRQ rows,
//! /proc/softirqs, /proc/stat, 15-column softnet_stat) many times and prints min/median/max of
//! the time per sample. Target: < 2 ms per sample. Run: `cargo run --release --example parse_bench`.

use netsteer_host::sample::parse_sample;
use std::fmt::Write;
use std::time::Instant;

const CPUS: u32 = 256;
const IRQ_ROWS: u32 = 600;

fn texts() -> (String, String, String, String) {
    let mut interrupts = String::from("     ");
    for c in 0..CPUS {
        let _ = write!(interrupts, "     CPU{c:<4}");
    }
    interrupts.push('\n');
    for irq in 0..IRQ_ROWS {
        let _ = write!(interrupts, "{irq:>4}:");
        for c in 0..CPUS {
            let _ = write!(
                interrupts,
                " {:>10}",
                (irq as u64 * 7919 + c as u64 * 104729) % 4_000_000_000
            );
        }
        let _ = writeln!(
            interrupts,
            "  IR-PCI-MSIX-0000:3b:00.0 {irq}-edge      mlx5_comp{irq}@pci:0000:3b:00.0"
        );
    }
    for arch in [
        "NMI", "LOC", "SPU", "PMI", "IWI", "RTR", "RES", "CAL", "TLB", "TRM", "THR", "DFR", "MCE",
        "MCP", "HYP",
    ] {
        let _ = write!(interrupts, "{arch}:");
        for c in 0..CPUS {
            let _ = write!(interrupts, " {:>10}", c * 31);
        }
        let _ = writeln!(interrupts, "   Some architecture interrupts");
    }
    interrupts.push_str("ERR:          0\nMIS:          0\n");

    let mut softirqs = String::from("                    ");
    for c in 0..CPUS {
        let _ = write!(softirqs, "CPU{c:<8}");
    }
    softirqs.push('\n');
    for v in [
        "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER",
        "RCU",
    ] {
        let _ = write!(softirqs, "{v:>12}:");
        for c in 0..CPUS {
            let _ = write!(softirqs, " {:>10}", c as u64 * 1_000_003 % 3_000_000_000);
        }
        softirqs.push('\n');
    }

    let mut stat = String::from("cpu  1 2 3 4 5 6 7 8 0 0\n");
    for c in 0..CPUS {
        let _ = writeln!(stat, "cpu{c} 123456 789 234567 98765432 1234 0 56789 0 0 0");
    }
    stat.push_str("intr 1 2 3\nctxt 123456789\nbtime 1700000000\nprocesses 1\nprocs_running 1\nprocs_blocked 0\nsoftirq 1 2 3 4 5 6 7 8 9 10 11\n");

    let mut softnet = String::new();
    for c in 0..CPUS {
        let cols = [c * 1000, 0, c, 0, 0, 0, 0, 0, 0, c * 3, 0, 0, c, 0, 0];
        let line: Vec<String> = cols.iter().map(|v| format!("{v:08x}")).collect();
        let _ = writeln!(softnet, "{}", line.join(" "));
    }
    (stat, softirqs, interrupts, softnet)
}

fn main() {
    let (stat, softirqs, interrupts, softnet) = texts();
    let iterations = 200;
    let mut per_sample_us = Vec::new();
    for _ in 0..9 {
        let start = Instant::now();
        for _ in 0..iterations {
            let s = parse_sample(
                &stat,
                Some(&softirqs),
                Some(&interrupts),
                Some(&softnet),
                None,
            )
            .expect("synthetic sample parses");
            assert_eq!(s.softnet.len(), CPUS as usize);
            std::hint::black_box(s);
        }
        per_sample_us.push(start.elapsed().as_secs_f64() * 1e6 / iterations as f64);
    }
    per_sample_us.sort_by(f64::total_cmp);
    let bytes = stat.len() + softirqs.len() + interrupts.len() + softnet.len();
    println!(
        "parse one {CPUS}-CPU sample ({IRQ_ROWS} IRQ rows, {} KiB): min {:.0} us  median {:.0} us  max {:.0} us  (target < 2000 us: {})",
        bytes / 1024,
        per_sample_us[0],
        per_sample_us[per_sample_us.len() / 2],
        per_sample_us[per_sample_us.len() - 1],
        if per_sample_us[per_sample_us.len() / 2] < 2000.0 {
            "met"
        } else {
            "NOT met"
        }
    );
}
