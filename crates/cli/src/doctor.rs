use crate::args::Seconds;
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_host::process::read_process;
use netsteer_steering::doctor::fleet::examine_trees;
use netsteer_steering::doctor::{App, Goal, RULES, Report, sampling, text};
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
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
    /// One JSON document (`findings` plus the host summary; docs/json.md) instead of the report.
    #[arg(long)]
    json: bool,
    /// Skip reading NIC settings over ethtool netlink.
    #[arg(long)]
    no_ethtool: bool,
    /// List the rules and exit.
    #[arg(long)]
    list_rules: bool,
    /// Trace the receive path (netsteer trace, root) over a sample of this many seconds, in
    /// place of --sample: its stage latencies become evidence (softirq-delayed, ...).
    #[arg(long, value_name = "SECONDS", conflicts_with = "sample")]
    trace: Option<Seconds>,
}

/// Doctor on every tree (averages since boot, as for one `--root`), then one table.
pub fn run_fleet(roots: &[PathBuf], args: &DoctorArgs) -> Result<ExitCode> {
    if args.list_rules {
        return list_rules();
    }
    if args.pid.is_some() {
        bail!("--pid names a process of one live host, not of a fleet's trees");
    }
    if args.trace.is_some() {
        bail!("--trace traces this live host, not a fleet's trees");
    }
    let fleet = examine_trees(roots, args.goal, !args.no_ethtool);
    let mut out = io::stdout().lock();
    if args.json {
        emit(&mut out, &serde_json::to_string_pretty(&fleet)?)?;
    } else {
        for line in netsteer_host::safe::text(&text::render_fleet(&fleet)).lines() {
            emit(&mut out, line)?;
        }
    }
    Ok(ExitCode::from(fleet.exit_code()))
}

/// One host's report and the core inputs it could not read (`doctor::sampling::examine`).
fn examine(host: &Host, args: &DoctorArgs, app: Option<&App>) -> (Report, Vec<String>) {
    let settings = host.nic_settings_source();
    let mut trace = |d| {
        let iv = netsteer_trace::run::collect(d).map_err(|e| format!("--trace: {e}"))?;
        Ok(sampling::Trace {
            seconds: iv.interval_s,
            stages: iv.stages,
        })
    };
    let during = args.trace.map(|_| &mut trace as sampling::During);
    let sample = args.trace.unwrap_or(args.sample).get();
    let fs = &host.fs;
    let on = (!args.no_ethtool).then_some(&*settings);
    sampling::examine(fs, on, sample, args.goal, app, during)
}

fn list_rules() -> Result<ExitCode> {
    let mut out = io::stdout().lock();
    for r in RULES {
        emit(&mut out, &format!("{:<22} {}", r.id, r.looks_for))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(host: &Host, args: &DoctorArgs) -> Result<ExitCode> {
    if args.list_rules {
        return list_rules();
    }
    let mut out = io::stdout().lock();
    let app = match args.pid {
        Some(pid) => Some(read_process(&host.fs, pid).with_context(|| format!("--pid {pid}"))?),
        None => None,
    };
    let (report, missing_core) = examine(host, args, app.as_ref());
    if args.json {
        emit(&mut out, &serde_json::to_string_pretty(&report)?)?;
    } else {
        for line in netsteer_host::safe::text(&text::render(&report)).lines() {
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
