//! `netsteer tune`: flags and rendering; the work is in `netsteer_tune::tune`.

use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use netsteer_host::{CpuSet, HostFs, read_host};
use netsteer_nic::NicBackend;
use netsteer_tune::tune::closed_loop::{Decision, Metric};
use netsteer_tune::tune::journal;
use netsteer_tune::tune::persist::{self, Invocation};
use netsteer_tune::tune::verify::{VerifyReport, verify};
use netsteer_tune::tune::{
    Action, ApplyOptions, ApplyReport, HostBackend, IrqbalancePolicy, Knob, NapiMode, Plan,
    PlanOptions, Profile, RollbackReport, apply, latest_journal, plan, rollback,
};
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum IrqbalanceArg {
    /// Leave it running; IRQ pins are skipped (it would move them back).
    Leave,
    /// Stop the service; rollback starts it again.
    Stop,
}

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// What to tune for (`none`: only the --set knobs). Required, except with `tune apply
    /// --plan FILE`.
    #[arg(long, value_enum)]
    profile: Option<Profile>,
    /// An explicit knob, written after the profile's items (repeatable): a sysctl under
    /// /proc/sys/net, a queue's rps_cpus/rps_flow_cnt/xps_cpus/xps_rxqs, or an IRQ's
    /// smp_affinity[_list]. Journaled and rolled back like the profile's items.
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
    /// What to do about a running irqbalance, which would move pinned IRQs back.
    #[arg(long, value_enum, default_value = "leave")]
    irqbalance: IrqbalanceArg,
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
    /// One JSON document instead of the text report (see README).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct StateArgs {
    /// Where journals and the applied plan live (default /var/lib/netsteer; with --root,
    /// ROOT/var/lib/netsteer).
    /// Where journals and the applied plan live (default /var/lib/netsteer; with --root, that
    /// path inside the tree).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// One JSON document instead of the text report (see README).
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
        conflicts_with_all = ["profile", "knobs", "napi", "devices", "cpus", "reserve_queue", "ports"]
    )]
    plan_file: Option<PathBuf>,
    /// Where journals and the applied plan live (default /var/lib/netsteer; with --root, that
    /// path inside the tree).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
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
    /// Where journals and the applied plan live (default /var/lib/netsteer; with --root, that
    /// path inside the tree).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// The state directory: as given, or `/var/lib/netsteer` on the live host, or that path
/// resolved inside the `--root` tree (a link such as `ROOT/var/lib -> /elsewhere` must not carry
/// the journal out of the tree).
fn state_dir(host: &Host, given: &Option<PathBuf>) -> Result<PathBuf> {
    match given {
        Some(d) => Ok(d.clone()),
        None => host
            .fs
            .real_path_for_write("/var/lib/netsteer")
            .context("the state directory"),
    }
}

/// Writing the live host needs root; a tree only needs its files to be writable.
fn need_root(host: &Host, what: &str) -> Result<()> {
    if host.fs.is_live() && effective_uid() != Some(0) {
        bail!(
            "{what} writes /proc, /sys and NIC settings: run it as root (or use --root DIR on a tree)"
        );
    }
    Ok(())
}

/// The effective uid from /proc/self/status (`Uid: real effective saved fs`): the binary keeps
/// no `unsafe` of its own (that lives in sock and nic).
fn effective_uid() -> Option<u32> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
}

/// The NIC backend tune reads and writes through; a disabled one (`--no-ethtool`, or no
/// netlink) knows no NIC and refuses every write.
struct Nic {
    backend: Box<dyn NicBackend>,
    enabled: bool,
}

impl Nic {
    fn open(host: &Host, enabled: bool) -> Nic {
        let reason = if enabled {
            match host.nic_backend() {
                Ok(backend) => {
                    return Nic {
                        backend,
                        enabled: true,
                    };
                }
                Err(e) => format!("ethtool netlink could not be opened: {e}"),
            }
        } else {
            "--no-ethtool was given".to_string()
        };
        Nic {
            backend: Box::new(netsteer_nic::NoNic { reason }),
            enabled: false,
        }
    }

    fn backend(&self) -> &dyn NicBackend {
        self.backend.as_ref()
    }

    fn enabled(&self) -> bool {
        self.enabled
    }
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
        irqbalance: match a.irqbalance {
            IrqbalanceArg::Leave => IrqbalancePolicy::Leave,
            IrqbalanceArg::Stop => IrqbalancePolicy::Stop,
        },
        reserve_queue: a.reserve_queue,
        ports: a.ports.clone(),
        live: host.fs.is_live(),
        // Read through the host's root, like every other current value of the plan.
        knobs: a
            .knobs
            .iter()
            .map(|k| Knob {
                current: host.fs.read_value(&k.path).ok(),
                ..k.clone()
            })
            .collect(),
        napi: a.napi,
    })
}

fn make_plan(host: &Host, nic: &Nic, opts: &PlanOptions) -> Result<Plan> {
    let settings = |name: &str| nic.backend().settings(name);
    let view = read_host(
        &host.fs,
        nic.enabled().then_some(&settings as &dyn Fn(&str) -> _),
    );
    Ok(plan(&view, opts)?)
}

/// A value for people: long ones (an RSS table) shortened to their start and length.
fn short(v: &str) -> String {
    let v = v.trim();
    if v.len() <= 48 {
        return v.to_string();
    }
    let head: String = v.chars().take(40).collect();
    format!("{head}… ({} entries)", v.split_whitespace().count())
}

fn render_plan(p: &Plan) -> Vec<String> {
    let (c, k, s) = p.counts();
    let mut lines = vec![format!(
        "tune plan: profile {}, {} ({c} to change, {k} already set, {s} skipped){}",
        p.profile,
        p.devices.join(", "),
        p.cpus
            .as_ref()
            .map(|c| format!(", CPUs {c}"))
            .unwrap_or_default()
    )];
    for i in &p.items {
        let cur = i
            .current
            .as_deref()
            .map(short)
            .unwrap_or_else(|| "?".into());
        match &i.action {
            Action::Change => lines.push(format!(
                "  change  {:<28} {} : {cur} -> {}  ({})",
                i.id, i.target, i.desired, i.reason
            )),
            Action::Keep => lines.push(format!(
                "  keep    {:<28} {} = {}",
                i.id, i.target, i.desired
            )),
            Action::Skip(why) => lines.push(format!("  skip    {:<28} {} : {why}", i.id, i.target)),
        }
    }
    for n in &p.notes {
        lines.push(format!("  note: {n}"));
    }
    lines
}

fn print_lines(lines: &[String]) -> Result<()> {
    let mut out = io::stdout().lock();
    for l in lines {
        emit(&mut out, &crate::safe::line(l))?;
    }
    Ok(())
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    emit(&mut io::stdout().lock(), &serde_json::to_string(v)?)?;
    Ok(())
}

pub fn run(host: &Host, cmd: &TuneCommand) -> Result<ExitCode> {
    match cmd {
        TuneCommand::Plan(a) => {
            let nic = Nic::open(host, !a.no_ethtool);
            let p = make_plan(host, &nic, &options(host, a)?)?;
            if a.json {
                print_json(&p)?;
            } else {
                print_lines(&render_plan(&p))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TuneCommand::Apply(a) => run_apply(host, a),
        TuneCommand::Rollback(a) => {
            need_root(host, "tune rollback")?;
            let dir = state_dir(host, &a.state.state_dir)?;
            let path = match &a.journal {
                Some(p) => p.clone(),
                None => latest_journal(&dir)?,
            };
            let nic = Nic::open(host, true);
            let backend = HostBackend {
                fs: host.fs.clone(),
                nic: nic.backend(),
            };
            let r = rollback(&path, &root_name(&host.fs), &backend)?;
            if r.status == "restored" || r.status == "nothing-to-do" {
                // The applied plan no longer describes the host.
                let _ = std::fs::remove_file(journal::applied_plan_path(&dir));
            }
            if a.state.json {
                print_json(&r)?;
            } else {
                print_lines(&render_rollback(&r))?;
            }
            Ok(if r.failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
        TuneCommand::Verify(a) => {
            let dir = state_dir(host, &a.state_dir)?;
            let path = journal::applied_plan_path(&dir);
            let text = journal::read_applied(&dir)
                .with_context(|| format!("{}", path.display()))?
                .with_context(|| {
                    format!(
                        "{}: no applied plan (run `netsteer tune apply` first)",
                        path.display()
                    )
                })?;
            let applied: Plan =
                serde_json::from_slice(&text).with_context(|| format!("{}", path.display()))?;
            let nic = Nic::open(host, true);
            let backend = HostBackend {
                fs: host.fs.clone(),
                nic: nic.backend(),
            };
            let settings = |name: &str| nic.backend().settings(name);
            let view = read_host(&host.fs, Some(&settings));
            let r = verify(&applied, &backend, &view);
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
            let nic = Nic::open(host, !a.plan.no_ethtool);
            make_plan(host, &nic, &options(host, &a.plan)?)?;
            let inv = Invocation {
                profile: a.plan.profile.map(|p| p.to_string()).unwrap_or_default(),
                knobs: a
                    .plan
                    .knobs
                    .iter()
                    .map(|k| format!("{}={}", k.path, k.value))
                    .collect(),
                devices: a.plan.devices.clone(),
                cpus: a.plan.cpus.clone(),
                irqbalance: match a.plan.irqbalance {
                    IrqbalanceArg::Leave => "leave".into(),
                    IrqbalanceArg::Stop => "stop".into(),
                },
                state_dir: state_dir(host, &a.state_dir)?.display().to_string(),
                reserve_queue: a.plan.reserve_queue,
                ports: a.plan.ports.clone(),
                napi: a.plan.napi.map(|m| m.to_string()),
            };
            let exe = std::env::current_exe().context("finding the netsteer binary")?;
            let root = host.fs.root();
            let unit = persist::in_root(root, persist::UNIT_PATH);
            let rule = persist::in_root(root, persist::RULE_PATH);
            for (path, text) in [
                (&unit, persist::unit_text(&exe, &inv)),
                (&rule, persist::rule_text(&inv)),
            ] {
                journal::write_atomic(path, text.as_bytes())
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            let mut lines = vec![
                format!("wrote {}", unit.display()),
                format!("wrote {}", rule.display()),
            ];
            if host.fs.is_live() {
                for args in [
                    vec!["systemctl", "daemon-reload"],
                    vec!["systemctl", "enable", persist::UNIT_NAME],
                    vec!["udevadm", "control", "--reload"],
                ] {
                    lines.push(run_tool(&args));
                }
            } else {
                lines.push("with --root: no systemctl or udevadm was run".into());
            }
            print_lines(&lines)?;
            Ok(ExitCode::SUCCESS)
        }
        TuneCommand::Unpersist(_) => {
            need_root(host, "tune unpersist")?;
            let root = host.fs.root();
            let mut lines = Vec::new();
            if host.fs.is_live() {
                lines.push(run_tool(&["systemctl", "disable", persist::UNIT_NAME]));
            }
            for rel in [persist::UNIT_PATH, persist::RULE_PATH] {
                let p = persist::in_root(root, rel);
                match std::fs::remove_file(&p) {
                    Ok(()) => lines.push(format!("removed {}", p.display())),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        lines.push(format!("{}: not there", p.display()))
                    }
                    Err(e) => bail!("removing {}: {e}", p.display()),
                }
            }
            if host.fs.is_live() {
                lines.push(run_tool(&["systemctl", "daemon-reload"]));
                lines.push(run_tool(&["udevadm", "control", "--reload"]));
            }
            print_lines(&lines)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_tool(args: &[&str]) -> String {
    match std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
    {
        Ok(o) if o.status.success() => format!("ran {}", args.join(" ")),
        Ok(o) => format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("{}: {e}", args.join(" ")),
    }
}

fn root_name(fs: &HostFs) -> String {
    let root = fs.root();
    std::fs::canonicalize(root)
        .unwrap_or_else(|_| root.to_path_buf())
        .display()
        .to_string()
}

fn run_benchmark(cmd: &str, metric: Metric) -> Result<f64> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .with_context(|| format!("--verify-with {cmd:?}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    metric
        .from_output(&stdout)
        .map_err(|e| anyhow::anyhow!("--verify-with {cmd:?} (exit {}): {e}", out.status))
}

/// The closed loop's executor for `--verify-with`: variant 0 is the host as it is, variant 1
/// the applied plan. The runs are sequential (all before, apply once, all after), because a
/// kept change must stay applied; leaving does nothing, the decision rolls back.
struct VerifyExecutor<'a> {
    cmd: &'a str,
    metric: Metric,
    repeat: u32,
    apply: &'a mut dyn FnMut() -> Result<ApplyReport>,
    report: Option<ApplyReport>,
}

impl netsteer_lab::closed_loop::Executor for VerifyExecutor<'_> {
    type Measure = f64;

    fn enter(&mut self, variant: usize) -> netsteer_lab::Result<()> {
        if variant == 1 {
            let r =
                (self.apply)().map_err(|e| netsteer_lab::LabError::Invalid(format!("{e:#}")))?;
            let applied = r.status == "applied";
            self.report = Some(r);
            if !applied {
                return Err(netsteer_lab::LabError::Invalid("the apply failed".into()));
            }
        }
        Ok(())
    }

    fn measure(&mut self, variant: usize, repeat: u32) -> netsteer_lab::Result<f64> {
        let x = run_benchmark(self.cmd, self.metric)
            .map_err(|e| netsteer_lab::LabError::Invalid(format!("{e:#}")))?;
        eprintln!(
            "netsteer: {} run {repeat}/{}: {} = {x}",
            if variant == 0 { "before" } else { "after" },
            self.repeat,
            self.metric
        );
        Ok(x)
    }

    fn leave(&mut self, _variant: usize) -> netsteer_lab::Result<()> {
        Ok(())
    }
}

#[derive(serde::Serialize)]
struct ApplyOutput<'a> {
    #[serde(flatten)]
    report: &'a ApplyReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    closed_loop: Option<&'a Decision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollback: Option<&'a RollbackReport>,
}

/// The saved plan of `--plan FILE`, made this host's (IRQs found by name, devices checked).
fn saved_plan(host: &Host, nic: &Nic, file: &Path) -> Result<Plan> {
    use netsteer_tune::tune::saved;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("--plan {}", file.display()))?;
    let p = saved::parse(&text).with_context(|| format!("--plan {}", file.display()))?;
    let settings = |name: &str| nic.backend().settings(name);
    let view = read_host(
        &host.fs,
        nic.enabled().then_some(&settings as &dyn Fn(&str) -> _),
    );
    saved::for_host(&p, &view).with_context(|| format!("--plan {}", file.display()))
}

fn run_apply(host: &Host, a: &ApplyArgs) -> Result<ExitCode> {
    let nic = Nic::open(host, !a.plan.no_ethtool);
    let (p, opts) = match &a.plan_file {
        Some(file) => (saved_plan(host, &nic, file)?, None),
        None => {
            let opts = options(host, &a.plan)?;
            (make_plan(host, &nic, &opts)?, Some(opts))
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
    if a.verify_with.is_some() && a.repeat < 2 {
        bail!(
            "--repeat {}: at least 2 runs on each side are needed to know the noise",
            a.repeat
        );
    }
    let dir = state_dir(host, &a.state_dir)?;
    let backend = HostBackend {
        fs: host.fs.clone(),
        nic: nic.backend(),
    };
    // After a channel change, a live plan is made again for the new queues; a saved plan is
    // what was reviewed, so it is used as it is.
    let mut replan = || match &opts {
        Some(opts) => make_plan(host, &nic, opts).map_err(|e| crate::error_text(&e)),
        None => Ok(p.clone()),
    };
    let mut do_apply = || -> Result<ApplyReport> {
        Ok(apply(
            &p,
            &root_name(&host.fs),
            &backend,
            &dir,
            &mut replan,
            &ApplyOptions {
                crash_after_writes: a.crash_after_writes,
            },
        )?)
    };
    let mut decision = None;
    let mut undo = None;
    let report = match &a.verify_with {
        None => do_apply()?,
        Some(cmd) => {
            use netsteer_lab::closed_loop::{Order, decide_all, run};
            let mut exec = VerifyExecutor {
                cmd,
                metric: a.metric,
                repeat: a.repeat,
                apply: &mut do_apply,
                report: None,
            };
            let clock = netsteer_bench::clock::MonotonicClock::default();
            let runs = run(
                &mut exec,
                2,
                a.repeat,
                Order::Sequential,
                &clock,
                |_| Ok(()),
            );
            let report = exec.report.take();
            match (runs, report) {
                (Ok(runs), Some(report)) => {
                    let d = decide_all(a.metric, 2, &runs, |v| Some(*v))
                        .pop()
                        .flatten()
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "--verify-with: the benchmark gave no usable {}",
                                a.metric
                            )
                        })?;
                    if !d.keep {
                        let r =
                            rollback(Path::new(&report.journal), &root_name(&host.fs), &backend)?;
                        let _ = std::fs::remove_file(journal::applied_plan_path(&dir));
                        undo = Some(r);
                    }
                    decision = Some(d);
                    report
                }
                // The apply itself failed (and restored everything): report it as without
                // the closed loop.
                (Err(_), Some(report)) if report.status != "applied" => report,
                (Err(e), Some(report)) => {
                    // An "after" run failed: the change is not verified, so it is undone.
                    let _ = rollback(Path::new(&report.journal), &root_name(&host.fs), &backend);
                    let _ = std::fs::remove_file(journal::applied_plan_path(&dir));
                    bail!("--verify-with: {e}; the change was rolled back");
                }
                (Err(e), None) => bail!("--verify-with: {e}"),
                (Ok(_), None) => bail!("--verify-with: the change was never applied"),
            }
        }
    };
    if a.plan.json {
        print_json(&ApplyOutput {
            report: &report,
            closed_loop: decision.as_ref(),
            rollback: undo.as_ref(),
        })?;
    } else {
        let mut lines = render_apply(&report);
        if let Some(d) = &decision {
            lines.push(format!(
                "closed loop: {} before min/median/max {:.0}/{:.0}/{:.0}, after {:.0}/{:.0}/{:.0}: {} — {}",
                d.metric,
                d.before.min,
                d.before.median,
                d.before.max,
                d.after.min,
                d.after.median,
                d.after.max,
                d.why,
                if d.keep { "kept" } else { "rolled back" }
            ));
        }
        if let Some(r) = &undo {
            lines.extend(render_rollback(r));
        }
        print_lines(&lines)?;
    }
    Ok(match (report.status.as_str(), &decision) {
        ("applied", Some(d)) if !d.keep => ExitCode::from(1),
        ("applied", _) => ExitCode::SUCCESS,
        _ => ExitCode::from(2),
    })
}

fn render_apply(r: &ApplyReport) -> Vec<String> {
    let n = |s: &str| r.steps.iter().filter(|x| x.status == s).count();
    let mut lines = vec![format!(
        "tune apply: {} ({} changed, {} unchanged, {} skipped, {} restored); journal {}",
        r.status,
        n("changed"),
        n("unchanged"),
        n("skipped"),
        n("restored"),
        r.journal
    )];
    for s in &r.steps {
        let why = s
            .why
            .as_deref()
            .map(|w| format!("  ({w})"))
            .unwrap_or_default();
        lines.push(format!(
            "  {:<9} {:<28} {} : {} -> {}{why}",
            s.status,
            s.id,
            s.target,
            short(&s.old),
            short(&s.new)
        ));
    }
    if let Some(e) = &r.error {
        lines.push(format!("error: {e}"));
    }
    lines
}

fn render_rollback(r: &RollbackReport) -> Vec<String> {
    let mut lines = vec![format!(
        "tune rollback: {} ({} restored, {} failed); journal {}",
        r.status,
        r.restored.len(),
        r.failed.len(),
        r.journal
    )];
    lines.extend(r.restored.iter().map(|i| format!("  restored {i}")));
    lines.extend(r.failed.iter().map(|i| format!("  FAILED   {i}")));
    lines
}

fn render_verify(r: &VerifyReport) -> Vec<String> {
    let mut lines = vec![format!(
        "tune verify: profile {} on {}: {} item(s) checked, {} drifted",
        r.profile,
        r.devices.join(", "),
        r.checked,
        r.drift.len()
    )];
    for d in &r.drift {
        lines.push(format!(
            "  drift {:<28} {} : expected {}, found {} — {}",
            d.id,
            d.target,
            d.expected,
            d.found.as_deref().unwrap_or("nothing"),
            d.why
        ));
    }
    lines
}
