use crate::args::Seconds;
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_host::read_host;
use netsteer_host::sample::{QueueRate, Rates, TopInterval, rates, read_sample};
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

pub fn interval_message(r: Rates, labels: &IrqLabels, problems: Vec<String>) -> TopInterval {
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
    for p in &m.problems {
        lines.push(format!("  problem: {p}"));
    }
    lines
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

    let mut prev = read_sample(&host.fs).context("first sample")?;
    let mut prev_at = Instant::now();
    let mut next = |deadline: Instant| -> Result<TopInterval> {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        let cur = read_sample(&host.fs).context("sample")?;
        let at = Instant::now();
        let r = rates(&prev, &cur, (at - prev_at).as_secs_f64(), Some(&wanted));
        let mut problems = cur.problems.clone();
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
        prev_at = at;
        Ok(interval_message(r, &labels, problems))
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
                emit(&mut out, &l)?;
            }
        }
        if args.count.is_some_and(|c| seq >= c) {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
