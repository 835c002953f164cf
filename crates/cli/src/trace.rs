//! `netsteer trace`: the receive path's stage latencies (the trace crate does the work).
use netsteer_trace::run::{RunOptions, run};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub fn run_trace(a: &TraceArgs) -> anyhow::Result<ExitCode> {
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    netsteer_sock::signal::stop_on_termination(stop.clone())?;
    let mut out = std::io::stdout().lock();
    run(
        &RunOptions::from(a),
        &|| stop.load(Ordering::Relaxed),
        &mut |m| {
            m.lines(a.json)
                .iter()
                .try_for_each(|l| crate::emit(&mut out, l))
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `netsteer trace`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// Only this interface's rows (repeatable); per-CPU stages are always shown.
    #[arg(long = "dev", value_name = "IF")]
    pub devices: Vec<String>,
    /// Stop after this many seconds (default: until interrupted).
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub duration: Option<Duration>,
    /// Seconds per interval (above 0, at most 3600). With --duty below 100 each interval has
    /// one window of duty x interval: 1 s at the defaults.
    #[arg(long, default_value = "10", value_name = "S", value_parser = seconds)]
    pub interval: Duration,
    /// Also time the wake-up of this process's threads (sched_wakeup → sched_switch).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// At most this many rows per stage, busiest first (the rest folded into one).
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub top: u32,
    /// Percent of each interval the per-packet programs are attached, in one window at a
    /// random offset (1-100). Below 100 the latencies are a sample of the interval and the
    /// counts cover the window only (`traced_s`); 100 traces every packet, at a cost a flood
    /// feels (docs/trace.md, BENCHMARKS.md). Closing a window leaves the tracepoints
    /// registered for about half a second: windows under a second cost more than they trace.
    #[arg(long, allow_negative_numbers = true, default_value_t = 10, value_name = "PCT", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub duty: u32,
    /// Percent of each traced window the kernel times the trace's own programs for the cost
    /// line (0-100; 0: unpriced). The timing (BPF_ENABLE_STATS) is global: while it is on,
    /// every BPF program on the host pays two clock reads a run (docs/trace.md).
    #[arg(long, allow_negative_numbers = true, default_value_t = 10, value_name = "PCT", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub price: u32,
    /// JSON Lines: a `start` message, then one `interval` per interval (docs/json.md).
    #[arg(long)]
    pub json: bool,
}

/// A number of seconds above 0 and at most an hour.
fn seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v > 0.0 && v <= 3600.0) {
        return Err(format!("{s}: above 0 and at most 3600 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

impl From<&TraceArgs> for RunOptions {
    fn from(a: &TraceArgs) -> RunOptions {
        RunOptions {
            devices: a.devices.clone(),
            interval: a.interval,
            duration: a.duration,
            pid: a.pid,
            top: a.top as usize,
            duty: f64::from(a.duty) / 100.0,
            price: f64::from(a.price) / 100.0,
        }
    }
}
