//! Rules on the stage latencies of `netsteer trace` (`doctor --trace S`): where the receive path
//! makes packets wait, and where the wait is the application's own.

use crate::doctor::model::{Finding, Fix, Goal, Severity, Subjects};
use crate::model::ctx::{Ctx, cpus_text};
use crate::model::load::{Stage, StageRow};

/// Events a row needs before its tail says anything.
pub const MIN_EVENTS: u64 = 50;
/// NET_RX waiting this long after being raised means it was deferred (ksoftirqd) or the CPU
/// was held with bottom halves off: interrupt exit runs it within microseconds otherwise.
pub const SOFTIRQ_DELAY_NS: u64 = 100_000;
/// Data waiting this long in the socket, and ten times longer than the stack took to deliver
/// it, is the application's delay, not the kernel's.
pub const LATE_READ_NS: u64 = 1_000_000;

fn us(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.0} ms", ns as f64 / 1e6)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.0} µs", ns as f64 / 1e3)
    }
}

fn rows<'a>(ctx: &Ctx<'a>, stage: Stage) -> impl Iterator<Item = &'a StageRow> {
    ctx.trace
        .into_iter()
        .flat_map(|t| &t.stages)
        .filter(move |r| r.stage == stage && r.count >= MIN_EVENTS)
}

pub fn softirq_delayed(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for r in rows(ctx, Stage::IrqToSoftirq) {
        let (Some(cpu), Some(p99)) = (r.cpu, r.p99) else {
            continue;
        };
        if p99 < SOFTIRQ_DELAY_NS {
            continue;
        }
        let mut evidence = vec![format!(
            "NET_RX on CPU {cpu} waited p99 {} (max {}) after being raised, {} times{}",
            us(p99),
            us(r.max),
            r.count,
            r.irq_name
                .as_ref()
                .map(|n| format!(", raised by IRQ {} ({n})", r.irq.unwrap_or(0)))
                .unwrap_or_default()
        )];
        if let Some(c) = ctx.cpu(cpu) {
            evidence.push(format!(
                "CPU {cpu}: {:.1}% user + {:.1}% system, {:.1}% softirq, {:.1}% idle over the sample",
                c.usr, c.sys, c.soft, c.idle
            ));
        }
        // The CPUs the application's threads last ran on.
        let app_cpus = |a: &crate::doctor::App| -> netsteer_host::CpuSet {
            a.threads.iter().map(|t| t.last_cpu).collect()
        };
        let app_here = ctx.app.is_some_and(|a| app_cpus(a).contains(cpu));
        let mut steps = Vec::new();
        if let Some(a) = ctx.app.filter(|_| app_here) {
            let elsewhere = ctx.usable.difference(&std::iter::once(cpu).collect());
            evidence.push(format!(
                "the application (pid {}) runs on {}",
                a.pid,
                cpus_text(&app_cpus(a))
            ));
            if !elsewhere.is_empty() {
                steps.push(format!("taskset -apc {} {}", elsewhere.to_list(), a.pid));
            }
        }
        out.push(Finding {
            id: "softirq-delayed".into(),
            severity: Severity::Warning,
            title: format!("NET_RX on CPU {cpu} waits p99 {} before it runs", us(p99)),
            evidence,
            why: "The NET_RX softirq normally runs as the interrupt that raised it returns. When it has run too long or too often it is handed to ksoftirqd, a normal-priority thread: then every busy or real-time task on that CPU delays the packets, and they queue before any application sees them.".into(),
            fix: Fix {
                summary: if app_here {
                    format!("move the application off CPU {cpu}, or steer the receive work elsewhere (IRQ affinity, RPS/RFS)")
                } else {
                    format!("keep CPU {cpu} for receive work: move busy tasks off it, or steer the receive work to CPUs with room (IRQ affinity, RPS/RFS)")
                },
                steps,
                tune: Some("netsteer tune apply --profile balanced".into()),
            },
            subjects: Subjects {
                cpus: vec![cpu],
                irqs: r.irq.into_iter().collect(),
                ..Default::default()
            },
        });
    }
    out
}

pub fn socket_reads_late(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for r in rows(ctx, Stage::Residence) {
        let Some(p99) = r.p99 else {
            continue;
        };
        let stack = ctx
            .trace
            .into_iter()
            .flat_map(|t| &t.stages)
            .filter(|s| s.stage == Stage::Stack && s.dev == r.dev && s.queue == r.queue)
            .filter_map(|s| s.p99)
            .max();
        if p99 < LATE_READ_NS || stack.is_some_and(|s| p99 < 10 * s) {
            continue;
        }
        let place = format!(
            "{}{}",
            r.dev.as_deref().unwrap_or("?"),
            r.queue.map(|q| format!(" rx-{q}")).unwrap_or_default()
        );
        let mut evidence = vec![format!(
            "data from {place} waited p99 {} (max {}) in the socket before the application read it, {} reads",
            us(p99),
            us(r.max),
            r.count
        )];
        if let Some(s) = stack {
            evidence.push(format!(
                "the kernel delivered it to the socket in p99 {} (GRO entry → socket)",
                us(s)
            ));
        }
        out.push(Finding {
            id: "socket-reads-late".into(),
            severity: if ctx.goal == Goal::Latency {
                Severity::Warning
            } else {
                Severity::Info
            },
            title: format!("{place}: the application reads late (p99 {} in the socket)", us(p99)),
            evidence,
            why: "This wait starts after the kernel has queued the data on the socket: no steering, coalescing or busy-polling setting shortens it. The application reads late: an event loop busy with other work, a reader thread that is not scheduled, a sleep or a batch between reads.".into(),
            fix: Fix {
                summary: "not a kernel problem: look at the application's read loop and its threads' scheduling (`netsteer trace --pid PID` times their wake-ups)".into(),
                steps: Vec::new(),
                tune: None,
            },
            subjects: Subjects {
                devices: r.dev.iter().cloned().collect(),
                queues: match (&r.dev, r.queue) {
                    (Some(d), Some(q)) => vec![format!("{d}/rx-{q}")],
                    _ => Vec::new(),
                },
                ..Default::default()
            },
        });
    }
    out
}
