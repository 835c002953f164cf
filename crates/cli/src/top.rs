use crate::args::Seconds;
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_host::read_host;
use netsteer_host::sample::{
    QueueCounters, QueuePackets, QueueRate, Rates, TopInterval, queue_rates, rates, read_sample,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, IsTerminal};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Seconds between samples (more than 0).
    #[arg(
        long,
        default_value = "1",
        value_name = "S",
        allow_negative_numbers = true
    )]
    interval: Seconds,
    /// Stop after this many intervals (default: until interrupted, or `q` in the live view).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// JSON Lines: one `{"type":"interval",...}` object per interval.
    #[arg(long)]
    json: bool,
    /// Plain text lines even on a terminal.
    #[arg(long)]
    plain: bool,
}

/// IRQ → (nic, queue label), from the NIC model.
pub type IrqLabels = BTreeMap<u32, (String, String)>;

pub fn interval_message(
    r: Rates,
    labels: &IrqLabels,
    queue_packets: Vec<QueuePackets>,
    problems: Vec<String>,
) -> TopInterval {
    let queues = r
        .irqs
        .into_iter()
        .filter_map(|i| {
            let (nic, queue) = labels.get(&i.irq)?.clone();
            Some(QueueRate {
                nic,
                queue,
                irq: i.irq,
                name: i.name,
                per_cpu: i.per_cpu,
                total: i.total,
            })
        })
        .collect();
    TopInterval {
        kind: "interval".into(),
        time_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        interval_s: r.interval_s,
        cpus: r.cpus,
        queues,
        went_offline: r.went_offline,
        queue_packets,
        problems,
    }
}

fn f(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// Plain-text rendering of one interval (also used for tests).
pub fn plain_lines(m: &TopInterval, seq: u64) -> Vec<String> {
    let mut lines = vec![
        format!("--- interval {seq} ({:.2} s)", m.interval_s),
        format!(
            "{:>4} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            "CPU",
            "%usr",
            "%nice",
            "%sys",
            "%irq",
            "%soft",
            "%steal",
            "%idle",
            "NET_RX/s",
            "NET_TX/s",
            "pkts/s",
            "drop/s",
            "sqz/s",
            "rps/s"
        ),
    ];
    for c in &m.cpus {
        lines.push(format!(
            "{:>4} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            c.cpu,
            c.usr,
            c.nice,
            c.sys,
            c.irq,
            c.soft,
            c.steal,
            c.idle,
            f(c.net_rx),
            f(c.net_tx),
            f(c.processed),
            f(c.dropped),
            f(c.squeezed),
            f(c.rps_ipi)
        ));
    }
    for cpu in &m.went_offline {
        lines.push(format!("{cpu:>4} went offline"));
    }
    for q in m.queues.iter().filter(|q| q.total > 0.0) {
        lines.push(format!(
            "  {} {} irq {} {}: {:.0}/s on {}",
            q.nic,
            q.queue,
            q.irq,
            q.name,
            q.total,
            q.cpus_text()
        ));
    }
    for q in m
        .queue_packets
        .iter()
        .filter(|q| q.packets_per_s.is_some_and(|p| p > 0.0))
    {
        lines.push(format!(
            "  {} {}-{}: {} pkt/s {} B/s (driver's queue counters)",
            q.nic,
            q.kind,
            q.queue,
            f(q.packets_per_s),
            f(q.bytes_per_s)
        ));
    }
    for p in &m.problems {
        lines.push(format!("  problem: {p}"));
    }
    lines
}

/// Every queue counter of the devices that keep them (netdev qstats), by device and queue.
fn queue_counters(
    backend: &dyn netsteer_nic::NicBackend,
    devices: &[String],
    problems: &mut Vec<String>,
) -> QueueCounters {
    let mut all = QueueCounters::new();
    for d in devices {
        match backend.queue_stats(d) {
            Ok(qs) => all.extend(qs.into_iter().map(|q| ((d.clone(), q.kind, q.id), q))),
            Err(e) => problems.push(format!("{d}: per-queue counters: {e}")),
        }
    }
    all
}

pub fn run(host: &Host, args: &TopArgs) -> Result<ExitCode> {
    if args.interval.get().is_zero() || args.interval.get().as_secs_f64() > 3600.0 {
        bail!(
            "--interval {}: must be a number of seconds above 0 and at most 3600",
            args.interval
        );
    }
    if args.count == Some(0) {
        bail!("--count 0: must be at least 1");
    }
    let view = read_host(&host.fs, None);
    let labels: IrqLabels = view
        .nics
        .iter()
        .flat_map(|n| {
            n.irqs
                .iter()
                .map(move |i| (i.irq, (n.name.clone(), i.role.to_string())))
        })
        .collect();
    let wanted: BTreeSet<u32> = labels.keys().copied().collect();
    let interval = args.interval.get();
    let tui = !args.json && !args.plain && io::stdout().is_terminal();

    // The driver's per-queue counters, on the live host, from the devices that keep them.
    let backend = host.fs.is_live().then(|| host.nic_backend().ok()).flatten();
    // One read of every device: it is the first sample, and it tells which devices keep
    // counters at all (the others are not asked again; their errors are not problems).
    let all: Vec<String> = view.nics.iter().map(|n| n.name.clone()).collect();
    let mut prev_q = match &backend {
        Some(b) => queue_counters(b.as_ref(), &all, &mut Vec::new()),
        None => QueueCounters::new(),
    };
    let qdevs: Vec<String> = all
        .into_iter()
        .filter(|d| prev_q.keys().any(|(n, _, _)| n == d))
        .collect();
    let mut prev = read_sample(&host.fs).context("first sample")?;
    let mut prev_at = Instant::now();
    let mut next = |deadline: Instant| -> Result<TopInterval> {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        let cur = read_sample(&host.fs).context("sample")?;
        let mut problems = cur.problems.clone();
        let cur_q = match &backend {
            Some(b) => queue_counters(b.as_ref(), &qdevs, &mut problems),
            None => QueueCounters::new(),
        };
        let at = Instant::now();
        let dt = (at - prev_at).as_secs_f64();
        let r = rates(&prev, &cur, dt, Some(&wanted));
        let qp = queue_rates(&prev_q, &cur_q, dt);
        if !host.fs.is_live() {
            // A tree is one moment: both samples read the same counters.
            problems.insert(
                0,
                format!(
                    "--root {}: rates need two live samples and a tree holds one moment, so every rate is 0; run top on the live host (or `doctor --root` for since-boot averages)",
                    host.fs.root().display()
                ),
            );
        }
        prev = cur;
        prev_q = cur_q;
        prev_at = at;
        Ok(interval_message(r, &labels, qp, problems))
    };

    if tui {
        return crate::tui::run_live(args.count, interval, &mut next);
    }
    let mut out = io::stdout().lock();
    let start = Instant::now();
    let mut seq = 0u64;
    loop {
        seq += 1;
        // Deadlines on a fixed grid so intervals do not drift by the work done in each.
        let m = next(start + interval.mul_f64(seq as f64))?;
        if args.json {
            emit(&mut out, &serde_json::to_string(&m)?)?;
        } else {
            for l in plain_lines(&m, seq) {
                emit(&mut out, &crate::safe::line(&l))?;
            }
        }
        if args.count.is_some_and(|c| seq >= c) {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsteer_host::netdev::QueueType;

    #[test]
    fn queue_counter_rates_are_printed_and_serialized_only_where_there_are_some() {
        let r = Rates {
            interval_s: 1.0,
            ..Rates::default()
        };
        let busy = QueuePackets {
            nic: "eth0".into(),
            kind: QueueType::Rx,
            queue: 3,
            packets_per_s: Some(1500.0),
            bytes_per_s: Some(2_000_000.0),
        };
        let idle = QueuePackets {
            queue: 4,
            packets_per_s: Some(0.0),
            ..busy.clone()
        };
        let m = interval_message(r.clone(), &IrqLabels::new(), vec![busy, idle], vec![]);
        let lines = plain_lines(&m, 1);
        let q: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("queue counters"))
            .collect();
        assert_eq!(q.len(), 1, "{lines:#?}");
        assert!(
            q[0].contains("eth0 rx-3: 1500 pkt/s 2000000 B/s"),
            "{}",
            q[0]
        );
        let back: TopInterval = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back.queue_packets, m.queue_packets);
        // Devices without queue counters add nothing to the JSON.
        let none = interval_message(r, &IrqLabels::new(), vec![], vec![]);
        assert!(
            !serde_json::to_string(&none)
                .unwrap()
                .contains("queue_packets")
        );
    }
}
