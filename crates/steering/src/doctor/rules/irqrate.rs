//! The platform's interrupt rate: above about a million device interrupts a second, many SoCs
//! lose I/O throughput to the interrupts themselves.
//!
//! Google's soft interrupt moderation series for the kernel (2024–25) measured many SoCs losing
//! 3–4× of their I/O throughput above 1–3 M interrupts/s in total: a 100G NIC of 32 queues went
//! from 50–60 to 92.8 Gbit/s once its interrupts were moderated. The cost is the platform's (the
//! MSI writes, the interrupt controller, the exits of a guest), not one CPU's, so spreading the
//! vectors over more CPUs does not help; fewer interrupts do.

use crate::doctor::Goal;
use crate::doctor::model::{Finding, Fix, LoadSource, Severity, Subjects};
use crate::model::ctx::{Ctx, pct, rate};
use crate::model::knob::{DeviceFile, Target};
use netsteer_host::balance::INTERRUPT_CEILING_PER_S;

/// The NICs shown by name in the evidence, busiest first.
const SHOWN: usize = 3;

/// Halving the device's queues, from its channel counts (ethtool -l): not from its vectors,
/// which a driver can keep per direction (virtio-net's input and output vectors serve one
/// combined channel) or for every queue it could have. None when the device has one queue
/// per direction left, or does not say how many it has.
fn fewer_queues(nic: &netsteer_host::nic::Nic, vectors: usize) -> Option<String> {
    let dev = &nic.name;
    let why = "# or fewer queues, each batching more per interrupt:";
    let Some(c) = nic.settings.as_ref().and_then(|s| s.channels.known()) else {
        // Unknown channels: the count to halve is the user's to read.
        return (vectors > 2).then(|| {
            format!("{why} ethtool -l {dev}, then ethtool -L {dev} with half the queues")
        });
    };
    match (
        c.combined.unwrap_or(0),
        c.rx.unwrap_or(0),
        c.tx.unwrap_or(0),
    ) {
        (n, 0, 0) if n > 1 => Some(format!("{why} ethtool -L {dev} combined {}", n / 2)),
        (n, rx, tx) if rx > 1 || tx > 1 => {
            let half = |k: u32| (k / 2).max(1);
            let mut cmd = format!("{why} ethtool -L {dev}");
            if n > 1 {
                cmd.push_str(&format!(" combined {}", half(n)));
            }
            if rx > 1 {
                cmd.push_str(&format!(" rx {}", half(rx)));
            }
            if tx > 1 {
                cmd.push_str(&format!(" tx {}", half(tx)));
            }
            Some(cmd)
        }
        _ => None,
    }
}

/// `interrupt-rate-high`: the device interrupts of a live sample (every numbered IRQ of
/// /proc/interrupts; the local timer and IPIs are the CPUs' own) at or above
/// [`INTERRUPT_CEILING_PER_S`], with the NICs' queue vectors' share and the fix on the NIC
/// that raises most. An average since boot is not judged: a burst a week ago is no rate now.
pub fn interrupt_rate_high(ctx: &Ctx) -> Vec<Finding> {
    let Some(load) = ctx.load.filter(|l| l.source == LoadSource::Sampled) else {
        return Vec::new();
    };
    let total: f64 = load.cpu.irqs.iter().map(|r| r.total).sum();
    if total < INTERRUPT_CEILING_PER_S {
        return Vec::new();
    }
    let mut nics: Vec<(&netsteer_host::nic::Nic, f64, usize)> = ctx
        .view
        .nics
        .iter()
        .map(|n| {
            let vectors: Vec<f64> = n
                .live_queue_irqs()
                .filter_map(|i| ctx.irq_rate(i.irq))
                .collect();
            (n, vectors.iter().sum::<f64>(), vectors.len())
        })
        .filter(|(_, r, _)| *r > 0.0)
        .collect();
    nics.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut evidence = vec![format!(
        "{} device interrupts/s over the last {:.1} s (every numbered IRQ of /proc/interrupts), {} of the {} where SoCs were measured losing throughput",
        rate(total),
        load.seconds,
        pct(total * 100.0 / INTERRUPT_CEILING_PER_S),
        rate(INTERRUPT_CEILING_PER_S)
    )];
    for (n, r, vectors) in nics.iter().take(SHOWN) {
        evidence.push(format!(
            "{}: {}/s on {vectors} queue vectors ({} of them)",
            n.name,
            rate(*r),
            pct(r * 100.0 / total)
        ));
    }
    let (summary, steps, subjects) = match nics.first() {
        Some((n, _, vectors)) => {
            let dev = &n.name;
            let mut steps = if ctx.goal == Goal::Latency {
                // A latency goal wants each packet handled at once: deferral keeps the
                // interrupt masked while the stack (or a busy-polling reader) keeps finding
                // work, instead of making every packet wait (Documentation/networking/napi.rst).
                let echo = |file, value: &str| {
                    let t = Target::DeviceFile {
                        dev: dev.clone(),
                        file,
                    };
                    t.path().map(|p| format!("echo {value} > {p}"))
                };
                [
                    echo(DeviceFile::NapiDeferHardIrqs, "2"),
                    echo(DeviceFile::GroFlushTimeout, "200000"),
                ]
                .into_iter()
                .flatten()
                .collect()
            } else {
                vec![format!("ethtool -C {dev} adaptive-rx on adaptive-tx on")]
            };
            if let Some(step) = fewer_queues(n, *vectors) {
                steps.push(step);
            }
            let summary = if ctx.goal == Goal::Latency {
                format!(
                    "moderate {dev}'s interrupts without delaying a lone packet: defer re-arming them while there is work (or use fewer queues)"
                )
            } else {
                format!("moderate {dev}'s interrupts: adaptive coalescing (or fewer queues)")
            };
            (summary, steps, Subjects::device(dev))
        }
        None => (
            "find the device raising them (netsteer top shows each IRQ's rate) and moderate its interrupts".into(),
            Vec::new(),
            Subjects::default(),
        ),
    };
    vec![Finding {
        id: "interrupt-rate-high".into(),
        severity: Severity::Warning,
        title: format!(
            "the host takes {} device interrupts/s, above the {} where many SoCs lose I/O throughput",
            rate(total),
            rate(INTERRUPT_CEILING_PER_S)
        ),
        evidence,
        why: "Each interrupt costs the platform, not only the CPU that takes it (the MSI write, the interrupt controller, a guest's exit): measured on many SoCs, I/O throughput fell 3-4x above 1-3 M interrupts/s in total, and a 100G NIC of 32 queues went from 50-60 to 92.8 Gbit/s once its interrupts were moderated. Spreading vectors over more CPUs does not lower the total; coalescing, deferral or fewer queues do.".into(),
        fix: Fix {
            summary,
            steps,
            tune: None,
        },
        subjects,
    }]
}
