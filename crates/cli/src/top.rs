use crate::args::Seconds;
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_host::sample::TopInterval;
use netsteer_host::top::Sampler;
use std::io::{self, IsTerminal};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
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
    let interval = args.interval.get();
    let tui = !args.json && !args.plain && io::stdout().is_terminal();
    // The driver's per-queue counters, on the live host, from the devices that keep them.
    let backend = host
        .fs
        .is_live()
        .then(|| host.nic_backend().ok())
        .flatten()
        .map(std::rc::Rc::new);
    let queue_stats = backend
        .clone()
        .map(|b| Box::new(move |d: &str| b.queue_stats(d)) as netsteer_host::top::QueueStatsSource);
    let pools = backend.map(|b| {
        let q = b.clone();
        netsteer_host::top::PoolSource {
            pools: Box::new(move || b.page_pools()),
            rx_queues_by_napi: Box::new(move |d: &str| q.rx_queues_by_napi(d)),
        }
    });
    let mut sampler = Sampler::new(host.fs.clone(), queue_stats, pools).context("first sample")?;
    let mut next = |deadline: Instant| -> Result<TopInterval> {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        sampler.sample().context("sample")
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
            for l in netsteer_host::text::top_interval(&m, seq) {
                emit(&mut out, &netsteer_host::safe::line(&l))?;
            }
        }
        if args.count.is_some_and(|c| seq >= c) {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
