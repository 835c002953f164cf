//! `netsteer lab`: list, run and clean scenarios, and `with`, which lends the two-host lab to
//! any command (the benchmark scripts run inside it). The lab crate does the work.

use crate::{args, emit};
use anyhow::{Context, Result};
use clap::Subcommand;
use netsteer_host::output::NewFile;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// List the shipped scenarios.
    List,
    /// Run a scenario (a shipped name or a TOML file): every workload before and after the
    /// change, alternated, then roll back and check the host is as before.
    Run(RunArgs),
    /// Remove the namespaces of lab runs whose process is gone (a run killed with SIGKILL
    /// cannot clean up; its record in /run/netsteer-lab says what it made). Live labs and
    /// namespaces no record names are left alone.
    Clean,
    /// Make the two-host lab (namespaces `client` and `server` joined by a veth link), run
    /// COMMAND in the root namespace with the lab described in its environment
    /// (NETSTEER_LAB_CLIENT_NS, NETSTEER_LAB_SERVER_ADDR, ...; docs/lab.md), then take the lab down,
    /// also on Ctrl-C or a kill. Exits with COMMAND's status (2 when the lab cannot be made).
    With(WithArgs),
    /// Measure the VM lab's noise floor: RUNS identical runs of the UDP echo round trip (the
    /// server and its NIC's vectors on CPU 1, the client on CPU 0), the spread of their p99 —
    /// what a change must beat to be "beyond the noise" — and the server CPU's hard IRQs,
    /// NET_RX softirqs and context switches per request (docs/lab.md).
    Noise(NoiseArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RigArg {
    /// Two guests on a tap bridge (the lab's usual form: --vm runs use it).
    Pair,
    /// One guest, both NICs on one QEMU hub, the client's in a namespace of its own.
    Twin,
}

#[derive(clap::Args, Debug)]
pub struct NoiseArgs {
    /// Where to run: `pair` (two guests) or `twin` (both ends in one guest).
    #[arg(long, value_enum, default_value = "twin")]
    rig: RigArg,
    /// With --rig twin: run the guest in virtual time (QEMU's -icount, single-threaded TCG):
    /// its clock follows the instructions it runs, not the host's; SHIFT makes each
    /// instruction 2^SHIFT ns (0: one instruction, one virtual ns).
    #[arg(long, value_name = "SHIFT", num_args = 0..=1, default_missing_value = "0", value_parser = clap::value_parser!(u32).range(0..=10))]
    virtual_time: Option<u32>,
    /// The NICs' model (virtio, virtio-rss, igb, e1000e).
    #[arg(long, value_name = "MODEL", default_value = "igb", value_parser = clap::value_parser!(netsteer_lab::vm::NicModel))]
    nic: netsteer_lab::vm::NicModel,
    /// The guest kernel's series (6.1, 6.12, 7.3); default: the apt candidate.
    #[arg(long, value_name = "SERIES")]
    kernel: Option<String>,
    /// Identical runs.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=100))]
    runs: u32,
    /// Round trips per run.
    #[arg(long, default_value_t = 2000, value_name = "N", value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    count: u64,
    /// JSON Lines: one `noise` message at the end (docs/json.md).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Scenario name (`netsteer lab list`), `all` for every shipped one, or a path to a
    /// .toml file.
    scenario: String,
    /// Repeats of each variant (overrides the scenario's).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: Option<u32>,
    /// Seconds per workload run (overrides the scenario's; 0.2 to 3600).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    duration: Option<args::Seconds>,
    /// Write a self-contained HTML report (inline SVG, no external URL) to this file (with
    /// `all`: a directory, one NAME.html each).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// JSON Lines: one `run` message per workload run, then a `summary` (docs/json.md).
    #[arg(long)]
    json: bool,
    /// Trace every packet of every run (root, BPF) and show per queue where the receive
    /// path's time went; the trace's cost is in every variant alike (docs/lab.md).
    #[arg(long)]
    trace: bool,
    /// Run seed-000's ladder between two QEMU guests (real virtio-net queues, interrupts
    /// and NAPI) instead of namespaces: each rung reports the NAPI id, where each queue's
    /// interrupts landed and whether busy polling engaged. Emulated (TCG): timings are not
    /// bare metal's.
    #[arg(long)]
    vm: bool,
    /// With --vm: the guests' NIC (virtio, virtio-rss, igb); default: the scenario's `[vm]`.
    #[arg(long, value_name = "MODEL", requires = "vm", value_parser = clap::value_parser!(netsteer_lab::vm::NicModel))]
    nic: Option<netsteer_lab::vm::NicModel>,
    /// With --vm: the guest kernel's series (6.1, 6.12: Debian's, fetched with apt-get
    /// download); default: the scenario's, else the apt candidate.
    #[arg(long, value_name = "SERIES", requires = "vm")]
    kernel: Option<String>,
    /// With --vm: instead of the ladder, seed 000's top rung alone: `netsteer lane` for the
    /// service against no lane, under 16 bulk flows, runs alternated, judged by the
    /// three-way verdict on the latency flow's p99 (docs/lab.md). The service: `udp` (the
    /// echo server, the default), `tcp` (a request/response server) or `udp,tcp` (both, one
    /// after the other in the same guests).
    #[arg(long, requires = "vm", conflicts_with = "trace", value_name = "SERVICES", num_args = 0..=1, default_missing_value = "udp", value_delimiter = ',')]
    lane: Option<Vec<netsteer_lab::vm::lane::Service>>,
    /// With --vm --lane: run both ends in one guest (two NICs on a QEMU hub, the client's in a
    /// namespace of its own) in virtual time (QEMU's -icount, one TCG thread), so the host's
    /// load does not reach the latencies; SHIFT makes each instruction 2^SHIFT ns (docs/lab.md).
    #[arg(long, requires = "lane", value_name = "SHIFT", num_args = 0..=1, default_missing_value = "0", value_parser = clap::value_parser!(u32).range(0..=10))]
    virtual_time: Option<u32>,
    /// Round trips per run with --vm.
    #[arg(long, default_value_t = 2000, value_name = "N", requires = "vm", value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    count: u64,
}

#[derive(clap::Args, Debug)]
pub struct WithArgs {
    /// rx and tx queues on each end of the link.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    queues: u32,
    /// The link's MTU (veth default 1500).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(68..=65535))]
    mtu: Option<u32>,
    /// IPv6 on the link as well (fd77::1 client, fd77::2 server); off by default so no router
    /// solicitation or DAD packet mixes into a measurement.
    #[arg(long)]
    ipv6: bool,
    /// Process the client's receive work on these CPUs (RPS on the client's end), as if the
    /// client were another machine; e.g. `0` or `0-1`.
    #[arg(long, value_name = "CPULIST")]
    client_rps: Option<String>,
    /// The program to run, and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<std::ffi::OsString>,
}

fn with(w: &WithArgs) -> Result<ExitCode> {
    let client_rps = match &w.client_rps {
        None => None,
        Some(list) => Some(
            netsteer_host::CpuSet::parse_list(list, None)
                .with_context(|| format!("--client-rps {list}"))?,
        ),
    };
    let spec = netsteer_lab::PairSpec {
        queues: w.queues,
        mtu: w.mtu,
        ipv6: w.ipv6,
        client_rps,
    };
    let code = netsteer_lab::pair::run_command(&spec, &w.command)?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(2)))
}

pub fn run(cmd: &LabCommand) -> Result<ExitCode> {
    match cmd {
        LabCommand::List => {
            let mut out = io::stdout().lock();
            for name in netsteer_lab::scenario::list()? {
                let scn = netsteer_lab::scenario::load(&name)?;
                emit(&mut out, &format!("{name:<12} {}", scn.description))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        LabCommand::Run(a) if a.vm => {
            if a.scenario != "seed-000" {
                anyhow::bail!("--vm runs seed-000's ladder only (got {})", a.scenario);
            }
            if a.report.is_some() || a.duration.is_some() {
                anyhow::bail!(
                    "--vm takes --repeat, --count, --json and --trace (not --report or --duration)"
                );
            }
            let scn = netsteer_lab::scenario::load(&a.scenario)?;
            let spec = netsteer_lab::vm::VmPairSpec::of(scn.vm, a.nic, a.kernel.clone());
            if !spec.nic.has_queues_to_steer() {
                anyhow::bail!(
                    "--nic {}: one receive queue and no RSS table, so no ladder rung or lane has queues to steer between (it is a `lab noise` model); use virtio, virtio-rss or igb",
                    spec.nic.name()
                );
            }
            let repeats = a.repeat.unwrap_or(if a.lane.is_some() { 3 } else { 1 });
            vm_run(
                &spec,
                (repeats, a.count),
                a.json,
                a.trace,
                (a.lane.as_deref(), a.virtual_time),
            )
        }
        LabCommand::Run(a) => lab_run(a),
        LabCommand::With(w) => with(w),
        LabCommand::Noise(a) => noise(a),
        LabCommand::Clean => {
            let removed = netsteer_lab::clean_stale().context("lab clean")?;
            let mut out = io::stdout().lock();
            for ns in &removed {
                emit(&mut out, &format!("removed namespace {ns}"))?;
            }
            emit(
                &mut out,
                &format!(
                    "netsteer lab clean: {} leftover namespace(s) removed",
                    removed.len()
                ),
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn lab_run(a: &RunArgs) -> Result<ExitCode> {
    let (scenario, report, json) = (&a.scenario, a.report.as_deref(), a.json);
    // Before any thread starts: Ctrl-C or a kill takes the lab down before the process exits.
    netsteer_lab::clean_up_on_termination()?;
    let opts = netsteer_lab::run::RunOptions {
        repeats: a.repeat,
        duration_s: a.duration.map(|d| d.get().as_secs_f64()),
        trace: a.trace,
    };
    let names = if scenario == "all" {
        netsteer_lab::scenario::list()?
    } else {
        vec![scenario.to_string()]
    };
    // Every report file is made before the first scenario runs (several go into a directory).
    let mut reports = Vec::new();
    for name in &names {
        reports.push(match (report, names.len() > 1) {
            (Some(dir), true) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("--report {}", dir.display()))?;
                Some(NewFile::create(
                    "--report",
                    &dir.join(format!("{name}.html")),
                )?)
            }
            (r, _) => NewFile::maybe("--report", r)?,
        });
    }
    let mut code = ExitCode::SUCCESS;
    for (name, report) in names.iter().zip(reports) {
        let one = lab_run_one(name, &opts, report, json);
        // A signal being handled makes the lab's commands fail; its exit status wins.
        netsteer_lab::wait_if_terminating();
        if one? != ExitCode::SUCCESS {
            code = ExitCode::from(1);
        }
    }
    Ok(code)
}

fn lab_run_one(
    scenario: &str,
    opts: &netsteer_lab::run::RunOptions,
    report: Option<NewFile>,
    json: bool,
) -> Result<ExitCode> {
    use netsteer_lab::run::Message;
    let scn = netsteer_lab::scenario::load(scenario)?;
    let mut runs = Vec::new();
    let mut out = io::stdout().lock();
    let summary = netsteer_lab::run::run(&scn, opts, |m| {
        if json {
            emit(
                &mut out,
                &serde_json::to_string(m).map_err(io::Error::other)?,
            )?;
        }
        if let Message::Run(r) = m {
            eprintln!("netsteer lab: {}", netsteer_lab::report::run_line(r));
            runs.push(r.clone());
        }
        Ok(())
    })?;
    if !json {
        for line in netsteer_lab::report::summary_lines(&summary) {
            emit(&mut out, &line)?;
        }
    }
    if let Some(out) = report {
        out.write(netsteer_lab::report::html(&summary, &runs).as_bytes())?;
    }
    Ok(if summary.restored {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `lab run seed-000 --vm`: the ladder between two guests, a line per run, then a table; with
/// `--lane`, the lane against no lane, a line per run, then the summary.
fn vm_run(
    spec: &netsteer_lab::vm::VmPairSpec,
    (repeats, count): (u32, u64),
    json: bool,
    trace: bool,
    (lane, virtual_time): (Option<&[netsteer_lab::vm::lane::Service]>, Option<u32>),
) -> Result<ExitCode> {
    netsteer_lab::clean_up_on_termination()?;
    let bin = std::env::current_exe().context("the netsteer binary")?;
    let mut out = io::stdout().lock();
    let mut line = |l: &str| emit(&mut out, l);
    if let Some(services) = lane {
        netsteer_lab::vm::lane::run_pair(
            spec,
            &bin,
            services,
            (count, repeats),
            &mut line,
            json,
            virtual_time,
        )
        .context("the VM lane")?;
    } else {
        netsteer_lab::vm::ladder::run_pair(spec, &bin, repeats, count, &mut line, json, trace)
            .context("the VM ladder")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn noise(a: &NoiseArgs) -> Result<ExitCode> {
    use netsteer_lab::vm::{self, noise::Rig};
    if a.virtual_time.is_some() && a.rig == RigArg::Pair {
        anyhow::bail!(
            "--virtual-time needs --rig twin: virtual time holds inside one QEMU process, and the pair is two"
        );
    }
    netsteer_lab::clean_up_on_termination()?;
    let bin = std::env::current_exe().context("the netsteer binary")?;
    let mut rig = match a.rig {
        RigArg::Pair => {
            let spec = vm::VmPairSpec {
                nic: a.nic,
                kernel: a.kernel.clone(),
                ..Default::default()
            };
            Rig::Pair(Box::new(
                vm::VmPair::boot_announced("nsn", &spec).context("booting the pair")?,
            ))
        }
        RigArg::Twin => {
            let spec = vm::twin::TwinSpec {
                nic: a.nic,
                kernel: a.kernel.clone(),
                virtual_time: a.virtual_time,
                ..Default::default()
            };
            eprintln!("netsteer lab: booting {}", spec.describe());
            let t = vm::twin::Twin::boot("nsn", &spec).context("booting the twin")?;
            eprintln!(
                "netsteer lab: up in {:.1} s (kernel {}); server {} ({}), client {} ({}) in namespace {}",
                t.guest.boot_time.as_secs_f64(),
                t.guest.release,
                t.server.dev,
                t.server.pci,
                t.client.dev,
                t.client.pci,
                vm::twin::PEER_NS
            );
            Rig::Twin(Box::new(t))
        }
    };
    let guest_bin = rig
        .install(&bin)
        .context("installing netsteer in the guest")?;
    let mut out = io::stdout().lock();
    let json = a.json;
    let floor = {
        let mut line = |l: &str| if json { Ok(()) } else { emit(&mut out, l) };
        vm::noise::measure(&mut rig, &guest_bin, a.runs, a.count, &mut line)
            .context("measuring the noise floor")?
    };
    if json {
        emit(&mut out, &serde_json::to_string(&floor)?)?;
    } else {
        for l in vm::noise::summary_lines(&floor) {
            emit(&mut out, &l)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
