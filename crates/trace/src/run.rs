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
    /// The share of each interval the per-packet programs are attached, in (0, 1].
    pub duty: f64,
    /// The share of each traced window the kernel counts the programs' run time for the
    /// intervals' cost, in [0, 1] (0: unpriced). The counting is global (see
    /// `session::Pricing`), hence a share.
    pub price: f64,
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

/// Traces every packet for `seconds` and returns every row, nothing folded: what `doctor
/// --trace` gives its rules (a short look, so no sampling).
pub fn collect(seconds: Duration) -> Result<Interval, TraceError> {
    // A short look for the rules, which read no cost: the kernel's counting is not turned on.
    let mut session = Session::start(&Options::default())?;
    session.resume()?;
    std::thread::sleep(seconds);
    session.pause();
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
    if !(opts.duty > 0.0 && opts.duty <= 1.0) {
        return Err(TraceError::Setup(format!(
            "--duty {}: a percentage above 0 and at most 100",
            opts.duty * 100.0
        )));
    }
    if !(0.0..=1.0).contains(&opts.price) {
        return Err(TraceError::Setup(format!(
            "--price {}: a percentage from 0 to 100",
            opts.price * 100.0
        )));
    }
    let mut session = Session::start(&Options {
        pid: opts.pid,
        price: opts.price > 0.0,
    })?;
    let io = |e: std::io::Error| TraceError::Setup(format!("writing the output: {e}"));
    let full = opts.duty >= 1.0;
    // Every packet timed (--duty 100 --price 100): the kernel counts from before the first
    // packet can be traced until after the last reading, so no run the histograms saw falls
    // outside what the cost line counts (a toggle at each interval's edges would miss the
    // packets in flight across it).
    let always = full && opts.price >= 1.0;
    // The first interval starts when the timing does, so its `priced_s` and `cpus` cover the
    // attach's runs and do not pass the interval.
    let timed_from = Instant::now();
    if always {
        session.price(true);
    }
    // Traced throughout: attached before the start message, which then means "every packet
    // from now on is seen" (a caller may wait for it before sending).
    if full {
        session.resume()?;
    }
    emit(&Message::Start(Start {
        kind: "start".into(),
        interval_s: opts.interval.as_secs_f64(),
        duty: opts.duty,
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
    // Always priced, the run (its intervals and --duration) counts from when the timing
    // began: one origin, so the attach adds no stub interval at the end.
    let started = if always { timed_from } else { Instant::now() };
    let mut last = started;
    let mut seq = 0;
    let mut rng = Lcg::seeded();
    loop {
        let next = last + opts.interval;
        let end = opts.duration.map(|d| started + d);
        let until = end.map_or(next, |e| e.min(next));
        // The sampling window: duty x the interval, placed at random in it so that nothing
        // periodic is always missed (or always caught).
        let span = until.saturating_duration_since(last);
        let window = span.mul_f64(opts.duty);
        let open_at = last + (span - window).mul_f64(rng.unit());
        let mut traced = if full { span } else { Duration::ZERO };
        // A stop (a signal) ends the interval early: what it counted is still reported.
        let mut stopped = false;
        if !full {
            stopped = sleep_until(open_at, stop);
            if !stopped {
                // After the attach (which first waits for the last window's detaches).
                session.resume()?;
                let opened = Instant::now();
                stopped = sleep_priced(
                    &mut session,
                    (opened, opened + window),
                    opts.price,
                    &mut rng,
                    stop,
                );
                session.pause();
                traced = opened.elapsed();
            }
        }
        if !stopped {
            stopped = if full && !always {
                sleep_priced(&mut session, (last, until), opts.price, &mut rng, stop)
            } else {
                sleep_until(until, stop)
            };
        }
        let now = Instant::now();
        if full {
            traced = now - last;
        }
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
            traced.as_secs_f64(),
        );
        emit(&Message::Interval(iv)).map_err(io)?;
        last = now;
        if stopped || end.is_some_and(|e| now >= e) || stop() {
            session.pause();
            return Ok(());
        }
    }
}

/// Sleeps through `span` with the kernel's counting of BPF run time on for `share` of it, in
/// one stretch at a random offset (like the duty window, so nothing periodic is always priced
/// or never); true when stopped.
fn sleep_priced(
    session: &mut Session,
    span: (Instant, Instant),
    share: f64,
    rng: &mut Lcg,
    stop: &dyn Fn() -> bool,
) -> bool {
    let (from, end) = span;
    if share <= 0.0 {
        return sleep_until(end, stop);
    }
    let len = end.saturating_duration_since(from);
    let priced = len.mul_f64(share.min(1.0));
    let at = from + (len - priced).mul_f64(rng.unit());
    if sleep_until(at, stop) {
        return true;
    }
    session.price(true);
    let stopped = sleep_until(at + priced, stop);
    session.price(false);
    stopped || sleep_until(end, stop)
}

/// Sleeps until `t` in steps short enough to notice `stop()`; true when stopped.
pub fn sleep_until(t: Instant, stop: &dyn Fn() -> bool) -> bool {
    loop {
        if stop() {
            return true;
        }
        let now = Instant::now();
        if now >= t {
            return false;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    }
}

/// Window placement only: no statistics rest on it (a 64-bit LCG, Knuth's MMIX constants).
pub struct Lcg(u64);

impl Lcg {
    /// Seeded from the wall clock and the process id.
    pub fn seeded() -> Lcg {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Lcg(t ^ u64::from(std::process::id()) << 32)
    }

    /// A number in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}
