//! The trace as a command: start, one interval after another until the duration ends or a
//! termination signal arrives, each shaped and handed to the caller.

use crate::{Interval, Options, Session, Shape, Start, TraceError, Unavailable, interval};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What `netsteer trace` was asked for.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub devices: Vec<String>,
    pub interval: Duration,
    /// None: until stopped.
    pub duration: Option<Duration>,
    pub pid: Option<u32>,
    pub top: usize,
}

/// One message of the run.
#[derive(Debug, Clone)]
pub enum Message {
    Start(Start),
    Interval(Interval),
}

impl Message {
    /// The lines it prints: one JSON object with `json`, else text.
    pub fn lines(&self, json: bool) -> Vec<String> {
        let one = |v: serde_json::Result<String>| vec![v.unwrap_or_default()];
        match (self, json) {
            (Message::Start(s), true) => one(serde_json::to_string(s)),
            (Message::Interval(i), true) => one(serde_json::to_string(i)),
            (Message::Start(s), false) => s
                .unavailable
                .iter()
                .map(|u| format!("unavailable: {}: {}", u.stage.name(), u.why))
                .collect(),
            (Message::Interval(i), false) => crate::text(i),
        }
    }
}

/// `netsteer trace`'s flags.
#[cfg(feature = "clap")]
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// Only this interface's rows (repeatable); per-CPU stages are always shown.
    #[arg(long = "dev", value_name = "IF")]
    pub devices: Vec<String>,
    /// Stop after this many seconds (default: until interrupted).
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub duration: Option<Duration>,
    /// Seconds per interval (above 0, at most 3600).
    #[arg(long, default_value = "1", value_name = "S", value_parser = seconds)]
    pub interval: Duration,
    /// Also time the wake-up of this process's threads (sched_wakeup → sched_switch).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// At most this many rows per stage, busiest first (the rest folded into one).
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub top: u32,
    /// JSON Lines: a `start` message, then one `interval` per interval (docs/json.md).
    #[arg(long)]
    pub json: bool,
}

/// A number of seconds above 0 and at most an hour.
#[cfg(feature = "clap")]
fn seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v > 0.0 && v <= 3600.0) {
        return Err(format!("{s}: above 0 and at most 3600 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

#[cfg(feature = "clap")]
impl TraceArgs {
    pub fn options(&self) -> RunOptions {
        RunOptions {
            devices: self.devices.clone(),
            interval: self.interval,
            duration: self.duration,
            pid: self.pid,
            top: self.top as usize,
        }
    }
}

/// IRQ number → name from /proc/interrupts (the last column), for irq-to-softirq rows.
fn irq_names() -> BTreeMap<u32, String> {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (n, rest) = l.split_once(':')?;
            let irq = n.trim().parse::<u32>().ok()?;
            Some((irq, rest.split_whitespace().last()?.to_string()))
        })
        .collect()
}

/// Traces for `seconds` and returns every row, nothing folded: what `doctor --trace` gives its
/// rules.
pub fn collect(seconds: Duration) -> Result<Interval, TraceError> {
    let mut session = Session::start(&Options::default())?;
    std::thread::sleep(seconds);
    let reading = session.read()?;
    let shape = Shape {
        devices: Vec::new(),
        top: usize::MAX,
        irq_names: irq_names(),
    };
    Ok(interval(
        &reading,
        &session.reasons,
        &shape,
        1,
        seconds.as_secs_f64(),
    ))
}

/// Runs the trace: `emit` gets the start message and then each interval. Returns when the
/// duration is over or `stop()` says so (a signal); every program is detached on return.
pub fn run(
    opts: &RunOptions,
    stop: &dyn Fn() -> bool,
    emit: &mut dyn FnMut(&Message) -> std::io::Result<()>,
) -> Result<(), TraceError> {
    for d in &opts.devices {
        if !std::path::Path::new("/sys/class/net").join(d).exists() {
            return Err(TraceError::Setup(format!("--dev {d}: no such interface")));
        }
    }
    let mut session = Session::start(&Options { pid: opts.pid })?;
    let io = |e: std::io::Error| TraceError::Setup(format!("writing the output: {e}"));
    emit(&Message::Start(Start {
        kind: "start".into(),
        interval_s: opts.interval.as_secs_f64(),
        devices: opts.devices.clone(),
        unavailable: session
            .unavailable
            .iter()
            .map(|(stage, why)| Unavailable {
                stage: *stage,
                why: why.clone(),
            })
            .collect(),
    }))
    .map_err(io)?;
    let started = Instant::now();
    let mut last = started;
    let mut seq = 0;
    loop {
        let next = last + opts.interval;
        let end = opts.duration.map(|d| started + d);
        let until = end.map_or(next, |e| e.min(next));
        // A stop (a signal) ends the interval early: what it counted is still reported.
        let mut stopped = false;
        while Instant::now() < until {
            if stop() {
                stopped = true;
                break;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
        }
        let now = Instant::now();
        let reading = session.read()?;
        seq += 1;
        let shape = Shape {
            devices: opts.devices.clone(),
            top: opts.top,
            irq_names: irq_names(),
        };
        let iv = interval(
            &reading,
            &session.reasons,
            &shape,
            seq,
            (now - last).as_secs_f64(),
        );
        emit(&Message::Interval(iv)).map_err(io)?;
        last = now;
        if stopped || end.is_some_and(|e| now >= e) || stop() {
            return Ok(());
        }
    }
}
