use crate::args::Seconds;
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_host::HostFs;
use netsteer_host::process::read_process;
use netsteer_host::read_host;
use netsteer_host::sample::{CounterSample, parse_uptime, read_net_counters, read_sample};
use netsteer_steering::doctor::fleet::{FleetHost, FleetReport, host_names};
use netsteer_steering::doctor::{Goal, Load, LoadSource, RULES, Report, Severity, diagnose};
use std::io;
use std::path::{Path, PathBuf};
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

/// A tree of one host: it has the /proc files doctor reads.
fn is_host_tree(dir: &Path) -> bool {
    dir.join("proc/stat").is_file() || dir.join("proc/interrupts").is_file()
}

/// The trees of a fleet run: several `--root`s, or one `--root` holding a directory per host
/// (what `netsteer snapshot` wrote on each, collected in one place). None for a single host.
pub fn fleet_roots(roots: &[PathBuf]) -> Result<Option<Vec<PathBuf>>> {
    match roots {
        [] => Ok(None),
        [one] if is_host_tree(one) => Ok(None),
        [one] => {
            let Ok(entries) = std::fs::read_dir(one) else {
                // Not a directory of trees: the single-host path reports the error.
                return Ok(None);
            };
            let mut trees: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir() && is_host_tree(p))
                .collect();
            if trees.is_empty() {
                return Ok(None);
            }
            trees.sort();
            Ok(Some(trees))
        }
        many => Ok(Some(many.to_vec())),
    }
}

/// Doctor on every tree (averages since boot, as for one `--root`), then one table.
pub fn run_fleet(roots: &[PathBuf], args: &DoctorArgs) -> Result<ExitCode> {
    if args.list_rules {
        return list_rules();
    }
    if args.pid.is_some() {
        bail!("--pid names a process of one live host, not of a fleet's trees");
    }
    let names = host_names(roots);
    let mut hosts = Vec::new();
    for (root, name) in roots.iter().zip(names) {
        let entry = |report: Option<Report>, error: Option<String>| FleetHost {
            host: name.clone(),
            root: root.display().to_string(),
            report,
            error,
        };
        let host = match HostFs::open(root) {
            Ok(fs) => Host { fs },
            Err(e) => {
                hosts.push(entry(None, Some(format!("--root {}: {e}", root.display()))));
                continue;
            }
        };
        match diagnose_host(&host, args, None) {
            Ok((report, missing)) if missing.is_empty() => hosts.push(entry(Some(report), None)),
            Ok((report, missing)) => hosts.push(entry(
                Some(report),
                Some(format!("could not read {}", missing.join("; "))),
            )),
            Err(e) => hosts.push(entry(None, Some(crate::error_text(&e)))),
        }
    }
    let fleet = FleetReport::new(hosts);
    let mut out = io::stdout().lock();
    if args.json {
        emit(&mut out, &serde_json::to_string_pretty(&fleet)?)?;
    } else {
        for line in crate::safe::text(&render_fleet(&fleet)).lines() {
            emit(&mut out, line)?;
        }
    }
    Ok(ExitCode::from(fleet.exit_code()))
}

fn severity_mark(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "C",
        Severity::Warning => "W",
        Severity::Info => "i",
    }
}

/// One line per host (counts, then its findings most severe first), then one line per rule
/// with the hosts it fired on.
pub fn render_fleet(f: &FleetReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let width = f
        .hosts
        .iter()
        .map(|h| h.host.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        s,
        "netsteer doctor: {} host(s), loads averaged since boot",
        f.hosts.len()
    );
    let _ = writeln!(
        s,
        "\n{:<width$}  crit  warn  info  findings (C critical, W warning, i info)",
        "host"
    );
    for h in &f.hosts {
        match (&h.report, &h.error) {
            (Some(r), err) => {
                let list: Vec<String> = r
                    .findings
                    .iter()
                    .map(|x| format!("{}:{}", severity_mark(x.severity), x.id))
                    .collect();
                let _ = writeln!(
                    s,
                    "{:<width$}  {:>4}  {:>4}  {:>4}  {}{}",
                    crate::safe::line(&h.host),
                    r.counts.critical,
                    r.counts.warning,
                    r.counts.info,
                    if list.is_empty() {
                        "-".to_string()
                    } else {
                        list.join(" ")
                    },
                    err.as_deref()
                        .map(|e| format!("  (incomplete: {})", crate::safe::line(e)))
                        .unwrap_or_default()
                );
            }
            (None, err) => {
                let _ = writeln!(
                    s,
                    "{:<width$}     ?     ?     ?  ERROR {}",
                    crate::safe::line(&h.host),
                    crate::safe::line(err.as_deref().unwrap_or("no report"))
                );
            }
        }
    }
    if !f.rules.is_empty() {
        let _ = writeln!(s, "\nby rule:");
        let idw = f.rules.iter().map(|r| r.id.len()).max().unwrap_or(0);
        for r in &f.rules {
            let _ = writeln!(
                s,
                "  {:<idw$}  {:<8}  {} of {} host(s): {}",
                r.id,
                label(r.severity),
                r.hosts.len(),
                f.hosts.len(),
                crate::safe::line(&r.hosts.join(", "))
            );
        }
    }
    s
}

/// One host's report and the core inputs it could not read. /proc/stat and /proc/interrupts
/// are doctor's core inputs: without them the spread and drop rules cannot run, and "no
/// finding" would read as "healthy" to a script or a fleet job. The static rules still run,
/// but the caller must say the run failed.
fn diagnose_host(
    host: &Host,
    args: &DoctorArgs,
    app: Option<&netsteer_steering::doctor::App>,
) -> Result<(Report, Vec<String>)> {
    let settings = host.nic_settings_source();
    let view = read_host(&host.fs, (!args.no_ethtool).then_some(&*settings));
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
    let mut report = diagnose(&view, load.as_ref(), args.goal, app);
    report.problems.extend(problems);
    Ok((report, missing_core))
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
    let (report, missing_core) = diagnose_host(host, args, app.as_ref())?;
    if args.json {
        emit(&mut out, &serde_json::to_string_pretty(&report)?)?;
    } else {
        for line in crate::safe::text(&render(&report)).lines() {
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
        crate::safe::line(h.kernel.as_deref().unwrap_or("?")),
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
            crate::safe::line(&n.name),
            n.kind,
            crate::safe::line(n.driver.as_deref().unwrap_or("?")),
            n.rx_queues,
            n.tx_queues,
            n.queue_irqs,
            n.numa_node
                .filter(|n| *n >= 0)
                .map(|n| format!(", NUMA node {n}"))
                .unwrap_or_default()
        );
    }
    // Every field is one line of its own: a name inside it (an interface, an IRQ's action)
    // must not add lines or escape sequences of its own.
    use crate::safe::line;
    for f in &r.findings {
        let _ = writeln!(s, "\n{:<8} {}: {}", label(f.severity), f.id, line(&f.title));
        for (i, e) in f.evidence.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {:<9}{}",
                if i == 0 { "evidence" } else { "" },
                line(e)
            );
        }
        let _ = writeln!(s, "  {:<9}{}", "why", line(&f.why));
        let _ = writeln!(s, "  {:<9}{}", "fix", line(&f.fix.summary));
        for step in &f.fix.steps {
            let _ = writeln!(s, "  {:<9}$ {}", "", line(step));
        }
        if let Some(t) = &f.fix.tune {
            let _ = writeln!(s, "  {:<9}{}", "tune", line(t));
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
        let _ = writeln!(s, "note: {}", line(p));
    }
    s
}
