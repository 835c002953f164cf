//! `netsteer trace`: where each microsecond of the receive path goes, per device, receive
//! queue, NAPI and CPU — hard IRQ → NET_RX softirq, the softirq's run, NAPI polls (work against
//! budget, time per poll), the stack from GRO entry to the socket, the socket until the
//! application copies, the application's wake-up, and drops with their reason.
//!
//! The programs are C (`bpf/trace.bpf.c`) compiled by clang at build time and loaded with
//! **aya**, a maintained pure-Rust loader: no libbpf C build, no libelf, and no BPF toolchain in
//! Rust (aya's own BPF side needs a nightly compiler and bpf-linker; programs in C need only
//! clang). They attach to tracepoints only — a stable interface, where kprobes are often
//! compiled out — and need no BTF: each field is read at the offset the running kernel's
//! tracefs format file gives (`format.rs`), set as a read-only global before loading.
//!
//! The existing hand-encoded XDP filter (`netsteer-sock`'s AF_XDP redirect) stays as it is: it
//! is a dozen instructions that must load wherever AF_XDP does, with no build-time compiler
//! and no loader crate in the sock crate's dependencies; moving it would add clang to every
//! build of the socket layer for no change in what it does.

pub mod format;
pub mod hist;
pub mod run;
pub mod session;

use hist::Hist;
use std::collections::BTreeMap;

pub use session::{Options, Session};

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("netsteer trace needs root (it loads BPF programs and attaches them to tracepoints)")]
    NotRoot,
    #[error("{0}")]
    Missing(String),
    #[error("BPF: {0}")]
    Bpf(String),
    #[error("{0}")]
    Setup(String),
}

pub use netsteer_trace_model::{
    Cost, DropRow, Interval, ProgramCost, Stage, StageRow, Start, Unavailable,
};

/// How an interval is shaped for people and programs.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Only these devices' rows (stages without a device — per CPU — are always shown).
    pub devices: Vec<String>,
    /// At most this many rows per stage, busiest first; the rest folded into one `others` row
    /// (a 64-queue host stays readable).
    pub top: usize,
    /// IRQ number → name (/proc/interrupts), for irq-to-softirq rows.
    pub irq_names: BTreeMap<u32, String>,
}

/// A device name as the BPF side keeps it (NUL-padded); None when empty.
pub fn dev_name(raw: &[u8; 16]) -> Option<String> {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    (end > 0).then(|| String::from_utf8_lossy(&raw[..end]).into_owned())
}

fn row(stage: Stage, key: Option<&session::HKey>, h: &Hist, rows: u32, shape: &Shape) -> StageRow {
    let (cpu, dev, queue, napi_id, irq) = match key {
        Some(k) => (
            Some(u32::from(k.cpu)),
            dev_name(&k.dev),
            (k.queue != 0xffff).then_some(u32::from(k.queue)),
            (k.napi_id != 0).then_some(k.napi_id),
            (k.irq != 0).then_some(k.irq),
        ),
        None => (None, None, None, None, None),
    };
    StageRow {
        stage,
        cpu,
        dev,
        queue,
        napi_id,
        irq,
        irq_name: irq.and_then(|i| shape.irq_names.get(&i).cloned()),
        rows,
        count: h.count,
        p50: h.quantile(0.5),
        p99: h.quantile(0.99),
        p999: h.quantile(0.999),
        max: h.max,
        mean: h.mean(),
        squeezed: (stage == Stage::PollWork).then_some(h.squeezed),
    }
}

/// Names, filters and bounds one reading.
pub fn interval(
    reading: &session::Reading,
    reasons: &BTreeMap<u32, String>,
    shape: &Shape,
    seq: u64,
    interval_s: f64,
    traced_s: f64,
) -> Interval {
    let wanted = |dev: &Option<String>| {
        shape.devices.is_empty() || dev.as_ref().is_none_or(|d| shape.devices.contains(d))
    };
    let mut by_stage: BTreeMap<Stage, Vec<(&session::HKey, &Hist)>> = BTreeMap::new();
    for (k, h) in &reading.hists {
        let Some(stage) = Stage::from_code(k.stage) else {
            continue;
        };
        if !wanted(&dev_name(&k.dev)) {
            continue;
        }
        by_stage.entry(stage).or_default().push((k, h));
    }
    let mut stages = Vec::new();
    for (stage, mut rows) in by_stage {
        rows.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        let rest = rows.split_off(rows.len().min(shape.top.max(1)));
        for (k, h) in &rows {
            stages.push(row(stage, Some(k), h, 1, shape));
        }
        if !rest.is_empty() {
            let mut folded = Hist::empty();
            for (_, h) in &rest {
                folded.add(h);
            }
            stages.push(row(stage, None, &folded, rest.len() as u32, shape));
        }
    }
    let drops = reading
        .drops
        .iter()
        .filter(|(k, _)| wanted(&dev_name(&k.dev)))
        .map(|(k, n)| DropRow {
            reason: match k.reason {
                0x10000 => "udp_fail_queue_rcv_skb".into(),
                0x10001 => "sock_rcvqueue_full".into(),
                r => reasons
                    .get(&r)
                    .cloned()
                    .unwrap_or_else(|| format!("reason {r}")),
            },
            cpu: u32::from(k.cpu),
            dev: dev_name(&k.dev),
            queue: (k.queue != 0xffff).then_some(u32::from(k.queue)),
            count: *n,
        })
        .collect();
    Interval {
        kind: "interval".into(),
        seq,
        interval_s,
        traced_s,
        stages,
        drops,
        lost_events: reading.lost_events,
        cost: Some(cost(reading, interval_s, traced_s)),
    }
}

/// The programs' own cost in one reading (every device: the programs run for all of them,
/// whatever `--dev` shows), priced for part of the `traced_s` seconds of an interval.
pub fn cost(reading: &session::Reading, interval_s: f64, traced_s: f64) -> Cost {
    let mut programs: Vec<ProgramCost> = reading
        .programs
        .iter()
        .filter(|p| p.runs > 0 || p.run_ns > 0)
        .map(|p| ProgramCost {
            program: p.program.to_string(),
            runs: p.runs,
            run_ns: p.run_ns,
        })
        .collect();
    programs.sort_by(|a, b| b.run_ns.cmp(&a.run_ns).then(a.program.cmp(&b.program)));
    let runs: u64 = programs.iter().map(|p| p.runs).sum();
    let run_ns: u64 = programs.iter().map(|p| p.run_ns).sum();
    let packets: u64 = reading
        .programs
        .iter()
        .filter(|p| p.entry)
        .map(|p| p.runs)
        .sum();
    let per = |n: u64| (n > 0).then(|| run_ns as f64 / n as f64);
    let priced_s = reading.priced.map_or(traced_s, |d| d.as_secs_f64());
    Cost {
        unpriced: reading.unpriced.clone(),
        runs,
        run_ns,
        ns_per_run: per(runs),
        packets,
        ns_per_packet: per(packets),
        priced_s,
        // The sysctl's counting covers the runs outside the windows too (the drop hooks').
        cpus: if priced_s > 0.0 && interval_s > 0.0 {
            run_ns as f64 / (priced_s * 1e9) * traced_s.max(priced_s) / interval_s
        } else {
            0.0
        },
        programs,
    }
}

/// The cost line of an interval's text.
fn cost_line(c: &Cost) -> String {
    if let Some(why) = &c.unpriced {
        return format!("trace-cost      unpriced: {}", netsteer_safe(why));
    }
    let ns = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}ns"));
    format!(
        "trace-cost      {:<40} n {:>8}  per run {:>7}  per packet {:>7} ({} packets)  {:.2}% of a CPU",
        format!("bpf programs (timed {:.2} s)", c.priced_s),
        c.runs,
        ns(c.ns_per_run),
        ns(c.ns_per_packet),
        c.packets,
        c.cpus * 100.0
    )
}

fn us(v: Option<u64>, time: bool) -> String {
    match v {
        None => "-".into(),
        Some(v) if time => format!("{:.1}us", v as f64 / 1e3),
        Some(v) => v.to_string(),
    }
}

/// An interval as text: a line per row, grouped by stage.
pub fn text(iv: &Interval) -> Vec<String> {
    let mut out = vec![format!(
        "--- interval {} ({:.2} s{}){}",
        iv.seq,
        iv.interval_s,
        if iv.traced_s + 1e-3 < iv.interval_s {
            format!(", sampled {:.2} s", iv.traced_s)
        } else {
            String::new()
        },
        if iv.lost_events > 0 {
            format!("  ({} events lost to full maps)", iv.lost_events)
        } else {
            String::new()
        }
    )];
    for r in &iv.stages {
        let t = r.stage.is_time();
        let place = if r.rows > 1 {
            format!("others ({} rows)", r.rows)
        } else {
            let mut p = Vec::new();
            if let Some(d) = &r.dev {
                p.push(d.clone());
            }
            if let Some(q) = r.queue {
                p.push(format!("rx-{q}"));
            }
            if let Some(n) = r.napi_id {
                p.push(format!("napi {n}"));
            }
            if let Some(i) = r.irq {
                p.push(format!(
                    "irq {i}{}",
                    r.irq_name
                        .as_ref()
                        .map(|n| format!(" ({})", netsteer_safe(n)))
                        .unwrap_or_default()
                ));
            }
            if let Some(c) = r.cpu {
                p.push(format!("cpu {c}"));
            }
            p.join(" ")
        };
        out.push(format!(
            "{:<15} {:<40} n {:>8}  p50 {:>9}  p99 {:>9}  p99.9 {:>9}  max {:>9}{}",
            r.stage.name(),
            place,
            r.count,
            us(r.p50, t),
            us(r.p99, t),
            us(r.p999, t),
            us(Some(r.max), t),
            r.squeezed
                .map(|s| format!("  squeezed {s}"))
                .unwrap_or_default()
        ));
    }
    for d in &iv.drops {
        out.push(format!(
            "drops           {:<40} n {:>8}  {}",
            format!(
                "{}{} cpu {}",
                d.dev.clone().map(|d| format!("{d} ")).unwrap_or_default(),
                d.queue.map(|q| format!("rx-{q}")).unwrap_or_default(),
                d.cpu
            ),
            d.count,
            d.reason
        ));
    }
    if let Some(c) = &iv.cost {
        out.push(cost_line(c));
    }
    out
}

/// Names from the host (device names, IRQ names) as one printable line.
fn netsteer_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use session::{DKey, HKey};

    fn key(stage: u8, cpu: u16, queue: u16, dev: &str) -> HKey {
        let mut d = [0u8; 16];
        d[..dev.len()].copy_from_slice(dev.as_bytes());
        HKey {
            stage,
            pad: 0,
            cpu,
            queue,
            pad2: 0,
            napi_id: 0,
            irq: 0,
            dev: d,
        }
    }

    fn hist(values: &[u64]) -> Hist {
        let mut h = Hist::empty();
        for v in values {
            h.buckets[hist::bucket(*v)] += 1;
            h.count += 1;
            h.sum += v;
            h.max = h.max.max(*v);
        }
        h
    }

    #[test]
    fn an_interval_is_bounded_filtered_and_named() {
        // 64 queues of one device and one of another: the top 4 kept, 60 folded, the other
        // device filtered out; drops named from the reasons table.
        let mut hists: Vec<(HKey, Hist)> = (0..64)
            .map(|q| (key(5, 0, q, "eth0"), hist(&vec![1000; q as usize + 1])))
            .collect();
        hists.push((key(5, 1, 0, "eth1"), hist(&[5])));
        hists.push((key(2, 1, 0xffff, ""), hist(&[20_000, 30_000])));
        let mut dev = [0u8; 16];
        dev[..4].copy_from_slice(b"eth0");
        let reading = session::Reading {
            hists,
            drops: vec![(
                DKey {
                    reason: 6,
                    cpu: 1,
                    queue: 3,
                    dev,
                },
                7,
            )],
            lost_events: 0,
            programs: vec![
                session::ProgramRuns {
                    program: "gro_entry",
                    runs: 1000,
                    run_ns: 150_000,
                    entry: true,
                },
                session::ProgramRuns {
                    program: "rcv_core",
                    runs: 1000,
                    run_ns: 250_000,
                    entry: false,
                },
                session::ProgramRuns {
                    program: "napi_poll",
                    runs: 0,
                    run_ns: 0,
                    entry: false,
                },
            ],
            unpriced: None,
            priced: Some(std::time::Duration::from_millis(100)),
        };
        let reasons = [(6, "SOCKET_RCVBUFF".to_string())].into_iter().collect();
        let shape = Shape {
            devices: vec!["eth0".into()],
            top: 4,
            irq_names: BTreeMap::new(),
        };
        let iv = interval(&reading, &reasons, &shape, 1, 1.0, 1.0);
        let stack: Vec<&StageRow> = iv
            .stages
            .iter()
            .filter(|r| r.stage == Stage::Stack)
            .collect();
        assert_eq!(stack.len(), 5, "four rows and one of others");
        assert_eq!(stack[0].queue, Some(63), "busiest first");
        assert_eq!(stack[4].rows, 60);
        assert_eq!(stack[4].count, (1..=60).sum::<u64>());
        assert!(stack.iter().all(|r| r.dev.as_deref() != Some("eth1")));
        let run = iv
            .stages
            .iter()
            .find(|r| r.stage == Stage::SoftirqRun)
            .unwrap();
        assert_eq!(
            (run.cpu, run.dev.as_deref(), run.max),
            (Some(1), None, 30_000)
        );
        assert_eq!(iv.drops[0].reason, "SOCKET_RCVBUFF");
        // What --json prints reads back into the public type.
        let json = serde_json::to_string(&iv).unwrap();
        let back: Interval = serde_json::from_str(&json).unwrap();
        assert_eq!(back, iv);
        assert!(text(&iv).iter().any(|l| l.contains("others (60 rows)")));
        // The cost: every program, per run and per entering packet, over the interval.
        let c = iv.cost.as_ref().unwrap();
        assert_eq!((c.runs, c.run_ns, c.packets), (2000, 400_000, 1000));
        assert_eq!((c.ns_per_run, c.ns_per_packet), (Some(200.0), Some(400.0)));
        // 400 us in the 0.1 s priced, of 1 s traced in a 1 s interval: 0.4 % of a CPU.
        assert!((c.cpus - 4e-3).abs() < 1e-12, "{}", c.cpus);
        assert_eq!(c.priced_s, 0.1);
        assert_eq!(
            c.programs.len(),
            2,
            "a program that never ran is not listed"
        );
        assert_eq!(c.programs[0].program, "rcv_core", "costliest first");
        assert!(
            text(&iv)
                .iter()
                .any(|l| l.contains("per packet   400ns (1000 packets)  0.40% of a CPU")),
            "{:?}",
            text(&iv)
        );
        // Unpriced is said, never zeros.
        let mut off = reading;
        off.programs.clear();
        off.unpriced = Some("not asked".into());
        off.priced = Some(std::time::Duration::ZERO);
        let iv = interval(&off, &reasons, &shape, 2, 1.0, 1.0);
        assert_eq!(iv.cost.as_ref().unwrap().ns_per_run, None);
        assert!(text(&iv).iter().any(|l| l.ends_with("unpriced: not asked")));
    }
}
