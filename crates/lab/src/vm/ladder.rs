//! Seed 000's latency ladder between two guests, on a NIC with interrupts: block → SO_BUSY_POLL
//! on a NAPI device → spin → one queue per CPU (IRQ pinning) → XPS to match → the latency
//! profile (coalescing where the device offers it, busy_read). Each run reports, beside the
//! round trip, what the mechanism did: the NAPI id the echoes came from (non-zero: busy polling
//! had something to poll), and on which CPU each queue's interrupts landed, in both guests.
//!
//! Under emulation the microseconds are not bare metal's; the placements and the directions
//! are what the ladder shows.

use super::{Guest, VM_B_ADDR, VmPair};
use crate::{LabError, Result};
use netsteer_bench::udp_echo::message::ClientSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(300);
const STATE: &str = "/tmp/netsteer-ladder";

/// A queue vector's interrupts during one run, by CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueIrq {
    pub irq: u32,
    /// `virtio2-input.0`.
    pub name: String,
    /// Interrupts per CPU during the run.
    pub per_cpu: Vec<u64>,
    /// The CPUs its affinity allows (smp_affinity_list).
    pub allowed: String,
}

/// One run of one rung.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RungRun {
    #[serde(rename = "type")]
    pub kind: String,
    pub rung: String,
    pub repeat: u32,
    pub sent: u64,
    pub received: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub round_trips_per_s: f64,
    /// SO_INCOMING_NAPI_ID of the client's echoes (0 or none: nothing for busy polling).
    pub napi_id: Option<u32>,
    /// With a busy-polling wait: whether it had a NAPI to poll.
    pub busy_poll_engaged: Option<bool>,
    pub client_irqs: Vec<QueueIrq>,
    pub server_irqs: Vec<QueueIrq>,
    /// What the rung changed, or could not (a device without coalescing).
    pub notes: Vec<String>,
}

/// Per queue vector (by IRQ number): its name, its count per CPU and its allowed CPUs.
type Counts = BTreeMap<u32, (String, Vec<u64>, String)>;

/// The queue vectors' counts per CPU now, and their allowed CPUs.
fn irq_counts(g: &mut Guest) -> Result<Counts> {
    let (_, out) = g.sh(
        "grep -E 'virtio[0-9]+-(input|output)' /proc/interrupts; for i in $(grep -E 'virtio[0-9]+-(input|output)' /proc/interrupts | cut -d: -f1); do echo \"@ $i $(cat /proc/irq/$i/smp_affinity_list)\"; done",
        T,
    )?;
    let mut m = BTreeMap::new();
    let mut allowed = BTreeMap::new();
    for l in out.lines() {
        if let Some(rest) = l.strip_prefix("@ ") {
            let mut f = rest.split_whitespace();
            if let (Some(i), Some(a)) = (f.next().and_then(|i| i.parse::<u32>().ok()), f.next()) {
                allowed.insert(i, a.to_string());
            }
            continue;
        }
        let Some((irq, rest)) = l.split_once(':') else {
            continue;
        };
        let Ok(irq) = irq.trim().parse::<u32>() else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let counts: Vec<u64> = f.iter().map_while(|t| t.parse().ok()).collect();
        let name = f.last().unwrap_or(&"").to_string();
        m.insert(irq, (name, counts, String::new()));
    }
    for (irq, a) in allowed {
        if let Some(e) = m.get_mut(&irq) {
            e.2 = a;
        }
    }
    Ok(m)
}

fn delta(before: &Counts, after: &Counts) -> Vec<QueueIrq> {
    after
        .iter()
        .map(|(irq, (name, counts, allowed))| {
            let b = before.get(irq).map(|e| e.1.clone()).unwrap_or_default();
            QueueIrq {
                irq: *irq,
                name: name.clone(),
                per_cpu: counts
                    .iter()
                    .enumerate()
                    .map(|(i, c)| c.saturating_sub(*b.get(i).unwrap_or(&0)))
                    .collect(),
                allowed: allowed.clone(),
            }
        })
        .collect()
}

/// `tune apply` in a guest, for the rung's change; returns the journal (to roll back) and a
/// note of what it did.
fn apply(g: &mut Guest, bin: &str, args: &[&str]) -> Result<(String, String)> {
    let mut argv = vec![bin, "tune", "apply", "--state-dir", STATE, "--json"];
    argv.extend_from_slice(args);
    let out = g.host_ok(&argv, T)?;
    let r: netsteer_steering::tune::ApplyReport = serde_json::from_str(&out)
        .map_err(|e| LabError::Invalid(format!("guest {}: tune apply output: {e}", g.name)))?;
    let n = |s: &str| r.steps.iter().filter(|x| x.status == s).count();
    let skipped: Vec<String> = r
        .steps
        .iter()
        .filter(|s| s.status == "skipped")
        .map(|s| format!("{} ({})", s.id, s.why.as_deref().unwrap_or("")))
        .collect();
    let mut note = format!(
        "guest {}: {} changed, {} unchanged, {} skipped",
        g.name,
        n("changed"),
        n("unchanged"),
        n("skipped")
    );
    if !skipped.is_empty() {
        note.push_str(&format!(": {}", skipped.join("; ")));
    }
    Ok((r.journal, note))
}

/// The queue vectors of the guest's NIC, each pinned to one CPU (queue i → CPU i mod cpus),
/// and, with `xps`, each tx queue sent from the CPU of its vectors: `--set` knobs for tune.
fn pin_knobs(g: &mut Guest, cpus: u32, xps: bool) -> Result<Vec<String>> {
    let counts = irq_counts(g)?;
    let mut knobs = Vec::new();
    for (irq, (name, _, _)) in &counts {
        let q: u32 = name
            .rsplit('.')
            .next()
            .and_then(|q| q.parse().ok())
            .unwrap_or(0);
        knobs.push(format!("/proc/irq/{irq}/smp_affinity_list={}", q % cpus));
        if xps && name.contains("output") {
            knobs.push(format!(
                "/sys/class/net/eth0/queues/tx-{q}/xps_cpus={:x}",
                1u64 << (q % cpus)
            ));
        }
    }
    Ok(knobs)
}

/// The rungs, in order.
pub const RUNGS: &[&str] = &[
    "block",
    "busy-poll 50",
    "spin",
    "spin, one queue per CPU",
    "spin, one queue per CPU + XPS",
    "latency profile (coalescing, busy_read 50)",
];

/// Runs the ladder `repeats` times (rungs in order each time), `count` round trips a run,
/// client on guest a's CPU 0, server on guest b's CPU 1. Every change is rolled back at the end,
/// also when a run fails.
pub fn run(
    pair: &mut VmPair,
    bin: &str,
    cpus: u32,
    count: u64,
    repeats: u32,
    mut emit: impl FnMut(&RungRun) -> std::io::Result<()>,
) -> Result<Vec<RungRun>> {
    let mut journals: Vec<(bool, String)> = Vec::new();
    let result = (|| {
        let mut all = Vec::new();
        for repeat in 1..=repeats {
            for (i, rung) in RUNGS.iter().enumerate() {
                let mut notes = Vec::new();
                let wait = match i {
                    0 | 5 => "block",
                    1 => "busy-poll",
                    _ => "spin",
                };
                if i == 3 || i == 4 || i == 5 {
                    for (on_a, g) in [(true, &mut pair.a), (false, &mut pair.b)] {
                        let args: Vec<String> = match i {
                            3 | 4 => {
                                let knobs = pin_knobs(g, cpus, i == 4)?;
                                std::iter::once("--profile".to_string())
                                    .chain(std::iter::once("none".to_string()))
                                    .chain(knobs.into_iter().flat_map(|k| ["--set".to_string(), k]))
                                    .collect()
                            }
                            _ => ["--profile", "latency", "--dev", "eth0"]
                                .iter()
                                .map(|s| s.to_string())
                                .collect(),
                        };
                        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                        let (journal, note) = apply(g, bin, &argv)?;
                        journals.push((on_a, journal));
                        notes.push(note);
                    }
                }
                let port = 4400 + i as u32;
                let server = format!("{VM_B_ADDR}:{port}");
                pair.b.sh(
                    &format!(
                        "chroot /host {bin} bench udp-echo server --listen {server} --cpu 1 --wait {wait} --busy-poll 50 --max-pps-per-source 0 --max-pps 0 --duration 600 > /dev/null 2>&1 &"
                    ),
                    T,
                )?;
                std::thread::sleep(Duration::from_millis(500));
                let (ba, bb) = (irq_counts(&mut pair.a)?, irq_counts(&mut pair.b)?);
                let count_s = count.to_string();
                let (rc, out) = pair.a.host(
                    &[
                        bin,
                        "bench",
                        "udp-echo",
                        "client",
                        &server,
                        "--cpu",
                        "0",
                        "--wait",
                        wait,
                        "--busy-poll",
                        "50",
                        "--count",
                        &count_s,
                        "--timeout",
                        "5",
                        "--json",
                    ],
                    T,
                )?;
                let _ = pair.b.sh("pkill -TERM -f 'udp-echo server'", T);
                if rc != 0 {
                    return Err(LabError::Invalid(format!("rung {rung}: client: {out}")));
                }
                let (aa, ab) = (irq_counts(&mut pair.a)?, irq_counts(&mut pair.b)?);
                let s: ClientSummary = out
                    .lines()
                    .rev()
                    .find_map(|l| serde_json::from_str(l).ok())
                    .ok_or_else(|| LabError::Invalid(format!("rung {rung}: no summary: {out}")))?;
                let napi = s.napi_id;
                let r = RungRun {
                    kind: "vm-rung".into(),
                    rung: (*rung).to_string(),
                    repeat,
                    sent: s.sent,
                    received: s.received,
                    p50_ns: s.latency_ns.as_ref().map(|l| l.p50),
                    p99_ns: s.latency_ns.as_ref().map(|l| l.p99),
                    round_trips_per_s: s.pps,
                    napi_id: napi,
                    busy_poll_engaged: (wait == "busy-poll").then(|| napi.is_some_and(|n| n != 0)),
                    client_irqs: delta(&ba, &aa),
                    server_irqs: delta(&bb, &ab),
                    notes,
                };
                emit(&r).map_err(|source| LabError::Io {
                    what: "writing the report".into(),
                    source,
                })?;
                all.push(r);
                // Each repeat starts from the guests as booted.
                if i == RUNGS.len() - 1 {
                    rollback(pair, bin, &mut journals)?;
                }
            }
        }
        Ok(all)
    })();
    let undo = rollback(pair, bin, &mut journals);
    let all = result?;
    undo?;
    Ok(all)
}

/// Rolls back the rungs' journals, newest first.
fn rollback(pair: &mut VmPair, bin: &str, journals: &mut Vec<(bool, String)>) -> Result<()> {
    while let Some((on_a, j)) = journals.pop() {
        let g = if on_a { &mut pair.a } else { &mut pair.b };
        g.host_ok(&[bin, "tune", "rollback", &j, "--state-dir", STATE], T)?;
    }
    Ok(())
}

/// Where a queue's interrupts went during a run: `input.0 → CPU1 (812)`, busiest CPU first.
pub fn placement(irqs: &[QueueIrq]) -> String {
    irqs.iter()
        .filter(|q| q.per_cpu.iter().sum::<u64>() > 0)
        .map(|q| {
            let short = q.name.split('-').next_back().unwrap_or(&q.name);
            let cpus: Vec<String> = q
                .per_cpu
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(c, n)| format!("CPU{c} ({n})"))
                .collect();
            format!("{short} → {}", cpus.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One run as a line: rung, repeat, p50/p99, the NAPI id and where each side's queue IRQs ran.
pub fn run_line(r: &RungRun) -> String {
    let us = |v: Option<u64>| v.map_or("-".into(), |v| format!("{:.1}us", v as f64 / 1e3));
    format!(
        "{:<44} #{} p50 {:>8} p99 {:>8} napi {:<5} server {} | client {}",
        r.rung,
        r.repeat,
        us(r.p50_ns),
        us(r.p99_ns),
        r.napi_id.map_or("-".into(), |n| n.to_string()),
        placement(&r.server_irqs),
        placement(&r.client_irqs),
    )
}

/// After the runs: their notes, whether busy polling engaged, and what emulation cannot show.
pub fn summary_lines(runs: &[RungRun]) -> Vec<String> {
    let mut lines: Vec<String> = runs
        .iter()
        .flat_map(|r| r.notes.iter().map(move |n| format!("  {}: {n}", r.rung)))
        .collect();
    for r in runs.iter().filter(|r| r.busy_poll_engaged.is_some()) {
        lines.push(format!(
            "busy polling {} (NAPI id {})",
            if r.busy_poll_engaged == Some(true) {
                "engaged"
            } else {
                "did not engage"
            },
            r.napi_id.unwrap_or(0)
        ));
    }
    lines.push("emulated guests (QEMU TCG): the placements, NAPI ids and directions are the drivers' own; the microseconds are not bare metal's".into());
    lines
}
