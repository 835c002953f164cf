//! `netsteer tune`: flags and rendering; the work is in `netsteer_steering::tune`.

use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use netsteer_experiment::clock::MonotonicClock;
use netsteer_experiment::experiment::{BoxError, Metric};
use netsteer_host::CpuSet;
use netsteer_steering::model::load::Reading;
use netsteer_steering::tune::persist::{self, Invocation};
use netsteer_steering::tune::text::{
    render_apply, render_decision, render_plan, render_rollback, render_verify,
};
use netsteer_steering::tune::{
    ApplyOptions, ApplyStatus, Check, IrqbalancePolicy, Knob, NapiMode, Plan, PlanOptions, Profile,
    Side, Tuner, Verified,
};
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

impl TuneCommand {
    pub fn roots(&self) -> &[PathBuf] {
        match self {
            TuneCommand::Plan(a) | TuneCommand::Persist(PersistArgs { plan: a, .. }) => {
                &a.root.roots
            }
            TuneCommand::Apply(a) => &a.plan.root.roots,
            TuneCommand::Search(a) => &a.root.roots,
            TuneCommand::Rollback(RollbackArgs { state: a, .. })
            | TuneCommand::Verify(a)
            | TuneCommand::Unpersist(a) => &a.root.roots,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum TuneCommand {
    /// Compute the profile's desired state and print current → desired per item, with the
    /// reason. Changes nothing.
    Plan(PlanArgs),
    /// Apply a profile: journal every old value, write in dependency order, read each back,
    /// and on any failure restore everything (all or nothing).
    Apply(ApplyArgs),
    /// Restore what a journal recorded (default: the newest one not yet rolled back). Safe
    /// after a crash in the middle of an apply; running it twice is harmless.
    Rollback(RollbackArgs),
    /// Compare the host with the last applied plan; exit 1 on drift.
    Verify(StateArgs),
    /// Install a systemd unit (and a udev rule for device add) that re-applies the profile at
    /// boot and when the interface reappears.
    Persist(PersistArgs),
    /// Remove what `persist` installed.
    Unpersist(StateArgs),
    /// Find the settings that meet a latency goal at the least CPU: trials of knob values,
    /// each applied through tune's transaction, measured against the host as it is (runs
    /// alternated) and rolled back; the best confirmed becomes a plan file.
    Search(crate::search::SearchArgs),
}

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    /// What to tune for (`none`: only the --set knobs). Required, except with `tune apply
    /// --plan FILE`.
    #[arg(long, value_enum)]
    profile: Option<Profile>,
    /// An explicit knob, written after the profile's items (repeatable): a sysctl under
    /// /proc/sys/net, a queue's rps_cpus/rps_flow_cnt/xps_cpus/xps_rxqs, an IRQ's
    /// smp_affinity[_list], or a NIC setting as plan items name it (nic/IF/coalesce/rx-usecs,
    /// nic/IF/rss/weight='1 1 0', ...: docs/tune.md). Journaled and rolled back like the rest.
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = parse_knob)]
    knobs: Vec<Knob>,
    /// Per-NAPI settings for every NAPI of the tuned devices, set over netdev netlink
    /// (NAPI_SET) and rolled back like the rest. Without it the latency profile only turns
    /// hard-IRQ deferral off. With `--profile none`, only these are planned.
    #[arg(long, value_enum, value_name = "MODE")]
    napi: Option<NapiMode>,
    /// Interface to tune (repeat for several); default: every physical NIC that is up.
    #[arg(long = "dev", value_name = "IF")]
    devices: Vec<String>,
    /// Only these CPUs take IRQs, RPS and XPS (a CPU list: 0-3,8).
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// What to do about an irqbalance that runs or may run (its state unknown), which would
    /// move pinned IRQs back.
    #[arg(long, value_enum, default_value = "leave")]
    irqbalance: IrqbalancePolicy,
    /// Keep this rx queue out of the RSS table (for control traffic, as seed 000 does).
    #[arg(long, value_name = "Q")]
    reserve_queue: Option<u32>,
    /// Ports meant for the reserved queue (the plan prints their n-tuple rules).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        requires = "reserve_queue"
    )]
    ports: Vec<u16>,
    /// Skip NIC settings (channels, GRO, coalescing, flow control).
    #[arg(long)]
    no_ethtool: bool,
    /// Sample the load for this many seconds first (live host only): the IRQs that move are
    /// placed by their measured interrupt rate, hottest first. Without it, by vector count.
    #[arg(long, value_name = "S")]
    sample: Option<crate::args::Seconds>,
    /// One JSON document instead of the text report (docs/json.md).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct StateDirArg {
    /// Where journals and the applied plan live (default /var/lib/netsteer; with --root, that
    /// path inside the tree).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct StateArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    #[command(flatten)]
    dir: StateDirArg,
    /// One JSON document instead of the text report (docs/json.md).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ApplyArgs {
    #[command(flatten)]
    plan: PlanArgs,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Apply this saved plan (`tune plan --json > FILE`, reviewed once) instead of planning
    /// here: every host of a fleet applies the same desired state. IRQs are found again by
    /// name; what already matches is left alone, so applying it twice changes nothing.
    #[arg(
        long = "plan",
        value_name = "FILE",
        conflicts_with_all = ["profile", "knobs", "napi", "devices", "cpus", "reserve_queue", "ports", "sample"]
    )]
    plan_file: Option<PathBuf>,
    #[command(flatten)]
    dir: StateDirArg,
    /// Closed loop: run this benchmark (with --json) before and after; keep the change only if
    /// --metric improved by more than the runs' spread, else roll back.
    #[arg(long, value_name = "COMMAND")]
    verify_with: Option<String>,
    /// Which number of the benchmark's JSON summary decides.
    #[arg(long, value_enum, default_value = "p99")]
    metric: Metric,
    /// Runs of the benchmark before and after (2 to 100: at least 2, to know the noise).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=100))]
    repeat: u32,
    /// Test hook: abort after this many writes, as a crash would.
    #[arg(long, hide = true, value_name = "K")]
    crash_after_writes: Option<usize>,
}

#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// A journal file (default: the newest in the state directory that is not rolled back).
    #[arg(value_name = "JOURNAL")]
    journal: Option<PathBuf>,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Args, Debug)]
pub struct PersistArgs {
    #[command(flatten)]
    plan: PlanArgs,
    #[command(flatten)]
    dir: StateDirArg,
}

/// Writing the live host needs root; a tree only needs its files to be writable.
pub fn need_root(host: &Host, what: &str) -> Result<()> {
    if host.fs.is_live() && !netsteer_sock::is_root() {
        bail!(
            "{what} writes /proc, /sys and NIC settings: run it as root (or use --root DIR on a tree)"
        );
    }
    Ok(())
}

fn tuner(host: &Host, use_nic: bool, state_dir: &Option<PathBuf>) -> Result<Tuner> {
    Tuner::open(host.fs.clone(), use_nic, state_dir.clone()).context("the state directory")
}

fn parse_knob(s: &str) -> Result<Knob, String> {
    Knob::parse(s).map_err(|e| e.to_string())
}

fn options(host: &Host, a: &PlanArgs) -> Result<PlanOptions> {
    let cpus = a
        .cpus
        .as_deref()
        .map(|c| CpuSet::parse_list(c, None).with_context(|| format!("--cpus {c}")))
        .transpose()?;
    let profile = a
        .profile
        .context("--profile is required (latency, throughput, balanced, or none with --set)")?;
    Ok(PlanOptions {
        profile,
        devices: a.devices.clone(),
        cpus,
        irqbalance: a.irqbalance,
        reserve_queue: a.reserve_queue,
        ports: a.ports.clone(),
        live: host.fs.is_live(),
        knobs: a.knobs.clone(),
        napi: a.napi,
        load: match a.sample.map(|s| s.get()).filter(|d| !d.is_zero()) {
            None => None,
            Some(_) if !host.fs.is_live() => {
                bail!("--sample: a --root tree has no live counters to sample")
            }
            Some(d) => Some(Reading::sample(&host.fs, d).context("--sample")?),
        },
    })
}

/// Lines for people, each made safe for a terminal.
pub(crate) fn print_lines(lines: &[String]) -> Result<()> {
    let mut out = io::stdout().lock();
    for l in lines {
        emit(&mut out, &netsteer_host::safe::line(l))?;
    }
    Ok(())
}

/// One JSON document on a line.
pub(crate) fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    emit(&mut io::stdout().lock(), &serde_json::to_string(v)?)?;
    Ok(())
}

pub fn run(host: &Host, cmd: &TuneCommand) -> Result<ExitCode> {
    match cmd {
        TuneCommand::Plan(a) => {
            let t = tuner(host, !a.no_ethtool, &None)?;
            let p = t.plan(&options(host, a)?)?;
            if a.json {
                print_json(&p)?;
            } else {
                print_lines(&render_plan(&p))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TuneCommand::Apply(a) => run_apply(host, a),
        TuneCommand::Search(a) => crate::search::run(host, a),
        TuneCommand::Rollback(a) => {
            need_root(host, "tune rollback")?;
            let rs = tuner(host, true, &a.state.dir.state_dir)?
                .rollback_or_recover(a.journal.as_deref())?;
            for r in &rs {
                if a.state.json {
                    print_json(r)?;
                } else {
                    print_lines(&render_rollback(r))?;
                }
            }
            Ok(if rs.iter().all(|r| r.failed.is_empty()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
        TuneCommand::Verify(a) => {
            let r = tuner(host, true, &a.dir.state_dir)?.verify()?;
            if a.json {
                print_json(&r)?;
            } else {
                print_lines(&render_verify(&r))?;
            }
            Ok(if r.drift.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        TuneCommand::Persist(a) => {
            need_root(host, "tune persist")?;
            // Validate the invocation now rather than at boot.
            let t = tuner(host, !a.plan.no_ethtool, &a.dir.state_dir)?;
            let opts = options(host, &a.plan)?;
            t.plan(&opts)?;
            let inv =
                Invocation::from_options(a.plan.profile, &opts, a.plan.cpus.clone(), t.state_dir());
            let exe = std::env::current_exe().context("finding the netsteer binary")?;
            print_lines(&persist::install(&host.fs, &exe, &inv)?)?;
            Ok(ExitCode::SUCCESS)
        }
        TuneCommand::Unpersist(_) => {
            need_root(host, "tune unpersist")?;
            print_lines(&persist::uninstall(&host.fs)?)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The saved plan of `--plan FILE`, made this host's (IRQs found by name, devices checked).
fn saved_plan(t: &Tuner, file: &Path) -> Result<Plan> {
    use netsteer_steering::tune::saved;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("--plan {}", file.display()))?;
    let p = saved::parse(&text).with_context(|| format!("--plan {}", file.display()))?;
    saved::for_host(&p, &t.view()).with_context(|| format!("--plan {}", file.display()))
}

fn run_apply(host: &Host, a: &ApplyArgs) -> Result<ExitCode> {
    let t = tuner(host, !a.plan.no_ethtool, &a.dir.state_dir)?;
    let (p, opts) = match &a.plan_file {
        Some(file) => (saved_plan(&t, file)?, None),
        None => {
            let opts = options(host, &a.plan)?;
            (t.plan(&opts)?, Some(opts))
        }
    };
    if a.dry_run {
        if a.plan.json {
            print_json(&p)?;
        } else {
            let mut lines = render_plan(&p);
            lines.push("dry run: nothing was changed".into());
            print_lines(&lines)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    need_root(host, "tune apply")?;
    let apply_opts = ApplyOptions {
        crash_after_writes: a.crash_after_writes,
        ..ApplyOptions::default()
    };
    let v = match &a.verify_with {
        None => Verified {
            report: t.apply(&p, opts.as_ref(), &apply_opts)?,
            closed_loop: None,
            rollback: None,
        },
        Some(cmd) => {
            let metric = a.metric;
            let repeats = a.repeat;
            let mut measure = |side: Side, repeat: u32| -> Result<f64, BoxError> {
                let x = metric.from_command(cmd)?;
                let side = if side == Side::Before {
                    "before"
                } else {
                    "after"
                };
                eprintln!("netsteer: {side} run {repeat}/{repeats}: {metric} = {x}");
                Ok(x)
            };
            t.apply_verified(
                &p,
                opts.as_ref(),
                &apply_opts,
                Check { metric, repeats },
                &mut measure,
                &MonotonicClock::default(),
            )
            .context("--verify-with")?
        }
    };
    if a.plan.json {
        print_json(&v)?;
    } else {
        let mut lines = render_apply(&v.report);
        lines.extend(v.closed_loop.as_ref().map(render_decision));
        if let Some(r) = &v.rollback {
            lines.extend(render_rollback(r));
        }
        print_lines(&lines)?;
    }
    Ok(match (v.report.status, &v.closed_loop) {
        (ApplyStatus::Applied, Some(d)) if !d.keep => ExitCode::from(1),
        (ApplyStatus::Applied, _) => ExitCode::SUCCESS,
        _ => ExitCode::from(2),
    })
}
