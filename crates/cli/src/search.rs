//! `netsteer tune search`: flags, progress and files; the search is
//! `netsteer_steering::tune::search` over `netsteer_experiment::search`.

use crate::args::Seconds;
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_experiment::clock::MonotonicClock;
use netsteer_experiment::experiment::BoxError;
use netsteer_experiment::search::{self as engine, Obs, Options};
use netsteer_experiment::workload::{Goal, Workload};
use netsteer_host::output::NewFile;
use netsteer_host::{CpuSet, HostFs};
use netsteer_steering::tune::Tuner;
use netsteer_steering::tune::search::{self, Contender, Request, SearchKnob};
use netsteer_steering::tune::search_report;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Args, Debug)]
pub struct SearchArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    /// What to find: `p99<=200us` (a latency percentile, p50/p99/p999, in ns, us or ms, met at
    /// the least CPU per request), or `max-rate` (the most requests per second).
    #[arg(long, value_name = "GOAL", value_parser = |s: &str| s.parse::<Goal>())]
    goal: Goal,
    /// A knob and the values to try, in their order (repeatable): `PATH=V1,V2,...`, PATH as
    /// `tune apply --set` takes it. The value the host holds now is added to them: it is the
    /// baseline every trial is compared with. Without any, the knobs the `--dev` devices have
    /// here (docs/tune-search.md).
    #[arg(long = "knob", value_name = "PATH=V1,V2,...",
          value_parser = |s: &str| SearchKnob::parse(s))]
    knobs: Vec<SearchKnob>,
    /// The benchmark command one run is (`sh -c`): a `netsteer bench udp-echo client` or
    /// `tcp-rr client` with `--json` and a fixed `--rate` for a latency goal. Its client summary
    /// gives the latency and the request count.
    #[arg(long, value_name = "COMMAND")]
    workload: String,
    /// Trials (each the candidate against the baseline), the confirmations not counted.
    #[arg(long, default_value_t = engine::DEFAULT_BUDGET, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500))]
    budget: u32,
    /// Runs of each side per trial, alternated.
    #[arg(long, default_value_t = engine::DEFAULT_REPEATS, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=50))]
    repeat: u32,
    /// Runs of each side in each confirmation.
    #[arg(long, default_value_t = engine::DEFAULT_CONFIRM_REPEATS, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=50))]
    confirm_repeat: u32,
    /// A candidate run whose latency is above this times the worst of the goal and the
    /// baseline's runs on either side of it ends the search.
    #[arg(long, default_value_t = engine::DEFAULT_ABORT_FACTOR, value_name = "X", value_parser = abort_factor)]
    abort_factor: f64,
    /// At the end, measure the configuration found against these static settings, runs
    /// alternated (each applied through tune's transaction and rolled back).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    against: Vec<Contender>,
    /// The CPUs whose busy time is the cost (default: every CPU).
    #[arg(long, value_name = "LIST")]
    cost_cpus: Option<String>,
    /// Count the workload command's own CPU in the cost (by default its process tree's CPU
    /// time is taken out: in production the clients run elsewhere).
    #[arg(long)]
    count_workload_cpu: bool,
    /// A run whose cost CPUs lost more than this percentage of their time to the hypervisor
    /// (steal; the CPU that lost most) is measured again, after a pause, up to six times
    /// (100: take every run).
    #[arg(long, default_value = "20", value_name = "PCT", value_parser = percent)]
    max_steal: f64,
    /// A workload run that takes longer is killed and ends the search.
    #[arg(long, default_value = "600", value_name = "S")]
    workload_timeout: Seconds,
    /// The interfaces NIC knobs' plans are made for (default: the ones the knobs name).
    #[arg(long = "dev", value_name = "IF")]
    devices: Vec<String>,
    /// Write the plan of the configuration found here (a new file), for `tune apply --plan`.
    #[arg(long, value_name = "FILE")]
    plan_out: Option<PathBuf>,
    /// Write the HTML report here (a new file): every trial, each knob's response, the
    /// confirmations.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Seed of the candidate sampling (large spaces only).
    #[arg(long, default_value_t = engine::DEFAULT_SEED, value_name = "N")]
    seed: u64,
    /// Where tune's state lives (default /var/lib/netsteer); the trials' journals go to its
    /// `search/` directory.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Skip NIC settings (only /proc and /sys knobs).
    #[arg(long)]
    no_ethtool: bool,
    /// The report as one JSON document instead of lines (docs/json.md).
    #[arg(long)]
    json: bool,
}

fn percent(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && (0.0..=100.0).contains(&v) {
        Ok(v / 100.0)
    } else {
        Err(format!("{s}: must be from 0 to 100"))
    }
}

fn abort_factor(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && (1.0..=100.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s}: must be from 1 to 100"))
    }
}

pub fn run(host: &Host, a: &SearchArgs) -> Result<ExitCode> {
    crate::tune::need_root(host, "tune search")?;
    let plan_out = NewFile::maybe("--plan-out", a.plan_out.as_deref())?;
    let report_out = NewFile::maybe("--report", a.report.as_deref())?;
    let cost_cpus = match &a.cost_cpus {
        Some(l) => CpuSet::parse_list(l, None)
            .with_context(|| format!("--cost-cpus {l}"))?
            .iter()
            .collect(),
        None => Vec::new(),
    };
    // The CPU time is the machine's where the workload runs, also when the knobs are a tree's.
    let proc = HostFs::live();
    // A CPU /proc/stat does not list would be left out of every run's cost unsaid, and the
    // run then "used no CPU".
    if let Some(l) = &a.cost_cpus {
        let stat = proc.read_value("/proc/stat").context("/proc/stat")?;
        let stat = netsteer_host::parse::parse_proc_stat(&stat).context("/proc/stat")?;
        if let Some(c) = cost_cpus.iter().find(|c| !stat.cpus.contains_key(*c)) {
            bail!("--cost-cpus {l}: CPU {c} is not online (absent from /proc/stat)");
        }
    }
    let tuner = Tuner::open(host.fs.clone(), !a.no_ethtool, a.state_dir.clone())
        .context("the state directory")?
        .for_search();
    let knobs = if a.knobs.is_empty() {
        if a.devices.is_empty() {
            bail!("name the knobs to search (--knob PATH=V1,V2,...) or the devices (--dev IF)");
        }
        let k = search::auto_knobs(&tuner, &a.devices, &a.goal);
        if k.is_empty() {
            bail!(
                "--dev {}: no knob of these devices can be read here",
                a.devices.join(",")
            );
        }
        for k in &k {
            eprintln!("netsteer: knob {}={}", k.path, k.values.join(","));
        }
        k
    } else {
        a.knobs.clone()
    };
    let workload = Workload {
        command: a.workload.clone(),
        goal: a.goal,
        cost_cpus,
        timeout: a.workload_timeout.get(),
        count_workload_cpu: a.count_workload_cpu,
        max_steal: a.max_steal,
        rerun_pause: netsteer_experiment::workload::DEFAULT_RERUN_PAUSE,
    };
    // Ctrl-C or a kill ends the run in progress; the search then leaves (rolls back) the
    // configuration it is in and stops, the host restored.
    let stop = Arc::new(AtomicBool::new(false));
    netsteer_sock::signal::stop_on_termination(stop.clone()).context("handling SIGINT/SIGTERM")?;
    let mut runs = 0u32;
    let mut reruns = Vec::new();
    let mut steal = Vec::new();
    let mut measure = || -> Result<Obs, BoxError> {
        if stop.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        // Each re-run is kept as it happens, so a search stopped by them lists them too.
        let m = workload.measure(&proc, &|| stop.load(Ordering::Relaxed), &mut |_, why| {
            eprintln!("netsteer: run {}: measured again: {why}", runs + 1);
            reruns.push(format!("run {}: {why}", runs + 1));
        })?;
        runs += 1;
        let steal_pct = m.run.steal_share() * 100.0;
        steal.push(steal_pct);
        let o = m.obs;
        eprintln!(
            "netsteer: run {runs}: {} {:.1} µs, {} requests, {:.2} µs per request{}{}",
            a.goal.metric(),
            o.latency / 1e3,
            m.run.report.requests,
            o.cost / 1e3,
            if o.lost > 0 {
                format!(", {} lost", o.lost)
            } else {
                String::new()
            },
            // Steal a run was still taken with: a guest's neighbours, said where it shows.
            if steal_pct >= 0.5 {
                format!(", steal {steal_pct:.1} %")
            } else {
                String::new()
            }
        );
        Ok(o)
    };
    let req = Request {
        knobs,
        devices: a.devices.clone(),
        goal: a.goal,
        options: Options {
            budget: a.budget,
            repeats: a.repeat,
            confirm_repeats: a.confirm_repeat,
            abort_factor: a.abort_factor,
            seed: a.seed,
            ..Options::default()
        },
        against: a.against.clone(),
    };
    let mut report = search::run(&tuner, &req, &mut measure, &MonotonicClock::default())?;
    report.reruns = reruns;
    report.steal_pct = steal;
    if let (Some(out), Some(plan)) = (plan_out, &report.plan) {
        out.write(serde_json::to_string(plan)?.as_bytes())?;
    }
    if let Some(out) = report_out {
        out.write(search_report::html(&report).as_bytes())?;
    }
    // With --json the report is on stdout for a program; why the search ended early or left a
    // knob changed is also said on stderr, where the person watching the runs reads.
    if a.json {
        if let Some(why) = &report.outcome.stopped {
            eprintln!(
                "netsteer: search stopped early: {}",
                netsteer_host::safe::line(why)
            );
        }
        if !report.not_restored.is_empty() {
            eprintln!(
                "netsteer: NOT RESTORED: {}",
                netsteer_host::safe::line(&report.not_restored.join("; "))
            );
        }
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        emit(&mut out, &serde_json::to_string(&report)?)?;
    } else {
        for l in search_report::lines(&report) {
            emit(&mut out, &netsteer_host::safe::line(&l))?;
        }
    }
    Ok(
        if !report.not_restored.is_empty() || report.outcome.stopped.is_some() {
            ExitCode::from(2)
        } else if report.outcome.best.is_some() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}
