use crate::args::Seconds;
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_host::process::read_process;
use netsteer_host::read_host;
use netsteer_host::sample::{CounterSample, parse_uptime, read_net_counters, read_sample};
use netsteer_tune::doctor::{Goal, Load, LoadSource, RULES, Report, Severity, diagnose};
use std::io;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Seconds of live sampling for rates (0: use the since-boot counters). Ignored with
    /// `--root`, where the tree's since-boot counters are used.
    #[arg(
        long,
        default_value = "3",
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    sample: Seconds,
    /// What the host is for: `latency` adds the coalescing and pause-frame rules.
    #[arg(long, value_enum, default_value = "balanced")]
    goal: Goal,
    /// Add the application's view: its threads' CPUs against the interrupt CPUs.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// One JSON document (`findings` plus the host summary; see README) instead of the report.
    #[arg(long)]
    json: bool,
    /// Skip reading NIC settings over ethtool netlink.
    #[arg(long)]
    no_ethtool: bool,
    /// List the rules and exit.
    #[arg(long)]
    list_rules: bool,
}

/// Counters of one moment, both the per-CPU files and the namespace's net counters.
fn read_counters(host: &Host) -> Result<(CounterSample, netsteer_host::sample::NetCounters)> {
    let s = read_sample(&host.fs).context("reading counters")?;
    Ok((s, read_net_counters(&host.fs)))
}

/// The load, the problems met, and whether /proc/interrupts could be read.
fn measure_load(host: &Host, sample: Duration) -> Result<(Load, Vec<String>, bool)> {
    let (s0, n0) = read_counters(host)?;
    let mut problems: Vec<String> = s0.problems.iter().chain(&n0.problems).cloned().collect();
    if host.fs.is_live() && !sample.is_zero() {
        let t0 = Instant::now();
        std::thread::sleep(sample);
        let (s1, n1) = read_counters(host)?;
        let dt = t0.elapsed().as_secs_f64();
        let interrupts = s0.interrupts.is_some() && s1.interrupts.is_some();
        return Ok((
            Load::sampled((&s0, &n0), (&s1, &n1), dt),
            problems,
            interrupts,
        ));
    }
    let uptime = match host.fs.read_parsed("/proc/uptime", parse_uptime) {
        Ok(u) => Some(u),
        Err(e) => {
            problems.push(format!("{e} (uptime taken from /proc/stat ticks)"));
            s0.uptime_from_ticks()
        }
    }
    .filter(|u| *u > 0.0)
    .context("no uptime: neither /proc/uptime nor /proc/stat ticks give one")?;
    let interrupts = s0.interrupts.is_some();
    Ok((Load::since_boot(&s0, &n0, uptime), problems, interrupts))
}

pub fn run(host: &Host, args: &DoctorArgs) -> Result<ExitCode> {
    let mut out = io::stdout().lock();
    if args.list_rules {
        for r in RULES {
            emit(&mut out, &format!("{:<22} {}", r.id, r.looks_for))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let settings = host.nic_settings_source();
    let view = read_host(&host.fs, (!args.no_ethtool).then_some(&*settings));
    let app = match args.pid {
        Some(pid) => Some(read_process(&host.fs, pid).with_context(|| format!("--pid {pid}"))?),
        None => None,
    };
    // /proc/stat and /proc/interrupts are doctor's core inputs: without them the spread and
    // drop rules cannot run, and "no finding" would read as "healthy" to a script or a fleet
    // job. The static rules still run and print, but the exit code says the run failed.
    let mut missing_core = Vec::new();
    let (load, problems) = match measure_load(host, args.sample.get()) {
        Ok((l, p, interrupts_read)) => {
            if !interrupts_read {
                missing_core.push("/proc/interrupts".to_string());
            }
            (Some(l), p)
        }
        Err(e) => {
            missing_core.push(crate::error_text(&e));
            (
                None,
                vec![format!(
                    "{} (rules that need rates were skipped)",
                    crate::error_text(&e)
                )],
            )
        }
    };
    let mut report = diagnose(&view, load.as_ref(), args.goal, app.as_ref());
    report.problems.extend(problems);
    if args.json {
        emit(&mut out, &serde_json::to_string_pretty(&report)?)?;
    } else {
        for line in render(&report).lines() {
            emit(&mut out, line)?;
        }
    }
    if !missing_core.is_empty() {
        bail!(
            "doctor could not read its core inputs ({}); the report above is incomplete",
            missing_core.join("; ")
        );
    }
    Ok(ExitCode::from(report.exit_code()))
}

fn label(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "CRITICAL",
        Severity::Warning => "WARNING",
        Severity::Info => "info",
    }
}

/// The human report: a header, then each finding with evidence, why and the fix.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let load = match &r.load {
        Some(l) if l.source == LoadSource::Sampled => {
            format!("load sampled over {:.1} s", l.seconds)
        }
        Some(l) => format!("load averaged since boot ({:.0} s)", l.seconds),
        None => "no load data".into(),
    };
    let _ = writeln!(s, "netsteer doctor: goal {}, {load}", r.goal);
    let h = &r.host;
    let _ = writeln!(
        s,
        "host: kernel {}, CPUs {} online, {} NUMA node(s){}, irqbalance {}",
        h.kernel.as_deref().unwrap_or("?"),
        h.online_cpus,
        h.numa_nodes,
        h.isolated_cpus
            .as_ref()
            .map(|i| format!(", isolated {i}"))
            .unwrap_or_default(),
        match h.irqbalance_running {
            Some(true) => "running",
            Some(false) => "not running",
            None => "?",
        }
    );
    for n in &h.nics {
        let _ = writeln!(
            s,
            "  {} ({}, {}): {} rx / {} tx queues, {} queue IRQs{}",
            n.name,
            n.kind,
            n.driver.as_deref().unwrap_or("?"),
            n.rx_queues,
            n.tx_queues,
            n.queue_irqs,
            n.numa_node
                .filter(|n| *n >= 0)
                .map(|n| format!(", NUMA node {n}"))
                .unwrap_or_default()
        );
    }
    for f in &r.findings {
        let _ = writeln!(s, "\n{:<8} {}: {}", label(f.severity), f.id, f.title);
        for (i, e) in f.evidence.iter().enumerate() {
            let _ = writeln!(s, "  {:<9}{e}", if i == 0 { "evidence" } else { "" });
        }
        let _ = writeln!(s, "  {:<9}{}", "why", f.why);
        let _ = writeln!(s, "  {:<9}{}", "fix", f.fix.summary);
        for step in &f.fix.steps {
            let _ = writeln!(s, "  {:<9}$ {step}", "");
        }
        if let Some(t) = &f.fix.tune {
            let _ = writeln!(s, "  {:<9}{t}", "tune");
        }
    }
    let c = r.counts;
    if r.findings.is_empty() {
        let _ = writeln!(
            s,
            "\nNo findings: nothing keeps packet processing here from scaling."
        );
    } else {
        let _ = writeln!(
            s,
            "\n{} finding(s): {} critical, {} warning, {} info",
            r.findings.len(),
            c.critical,
            c.warning,
            c.info
        );
    }
    for p in &r.problems {
        let _ = writeln!(s, "note: {p}");
    }
    s
}
