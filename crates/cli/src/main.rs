//! `netsteer`: the command line. It only speaks: the library crates do the work and render
//! their own reports; this binary parses flags (groups shared with `#[command(flatten)]`),
//! picks the host (live or a `--root` tree), prints, and maps errors to exit codes (0 ok,
//! 1 findings or threshold failed, 2 error).

mod agent;
mod args;
mod bench;
mod bench_args;
mod doctor;
mod lab;
mod lane;
mod netchannel;
mod search;
mod show;
mod snapshot;
mod top;
mod trace;
mod tui;
mod tune;
mod watch;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use netsteer_host::HostFs;
use netsteer_host::ethtool::NicSettings;
use netsteer_steering::doctor::fleet::fleet_roots;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "netsteer",
    version,
    about = "See, diagnose and tune how a Linux host spreads packet work over its CPUs"
)]
struct Cli {
    #[command(flatten)]
    root: args::RootArg,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The packet path at a glance: CPUs, NUMA, each NIC's queues → IRQs → CPUs, RPS/RFS/XPS,
    /// busy-poll/budget/backlog sysctls, irqbalance.
    Show(show::ShowArgs),
    /// Copy every file netsteer reads (plus NIC settings read over netlink) into DIR, so that
    /// `--root DIR` reproduces `show` offline: a support bundle.
    Snapshot(snapshot::SnapshotArgs),
    /// Benchmarks, each beside its anchor tool's numbers: `udp-echo` round trips (sockperf),
    /// `tcp-stream` bulk transfer and `tcp-rr` request/response (iperf3, sockperf), and
    /// `netchannel`'s experiments against plain TCP.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Find what keeps packet processing from scaling or from being fast: findings with
    /// evidence and the exact fix. Exit 0 when none is a warning or worse, 1 when one is.
    Doctor(doctor::DoctorArgs),
    /// Per-CPU rates each interval (mpstat's %usr %sys %irq %soft %steal %idle, NET_RX/NET_TX
    /// softirqs, softnet processed/dropped/squeezed, RPS IPIs) and per-queue IRQ rates.
    Top(top::TopArgs),
    /// Profiles (latency, throughput, balanced) → plan, transactional apply with a journal,
    /// rollback, drift verification, persistence, and a closed loop that keeps a change only
    /// if a benchmark says it helped.
    #[command(subcommand)]
    Tune(tune::TuneCommand),
    /// A lane for one latency-critical service: its flow on a receive queue of its own, that
    /// queue's IRQ and the service on one CPU, the rest kept off it, the NAPI in the mode asked
    /// for; one transaction, held with the service's life.
    #[command(subcommand)]
    Lane(lane::LaneCommand),
    /// The lab: scenarios of the seeds run between namespace hosts, before and after a tune
    /// change, with a report.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Serve the host's packet path as Prometheus metrics (text format on /metrics), read
    /// at each scrape: per-CPU IRQ/softirq time, softnet, per-queue IRQs, RPS/RFS/XPS, NIC
    /// settings, the doctor's findings and tune drift.
    Agent(agent::AgentArgs),
    /// Where each microsecond of the receive path goes, per device, queue, NAPI and CPU: hard
    /// IRQ → softirq, NAPI polls, stack, socket residence, wake-up, drops (eBPF, root).
    Trace(trace::TraceArgs),
    /// netchannel for unmodified applications: a TCP proxy pair that carries each connection
    /// as a virtual socket over several channels (and survives a channel's death).
    #[command(subcommand)]
    Netchannel(netchannel::NetchannelCommand),
    /// React within seconds to what the kernel reports: softnet drops → backlog and flow
    /// limit, squeezes → budget, one CPU drowning in NET_RX → RPS. Advice by default; with
    /// --apply through tune's journal, within caps, guarded, stepping aside when someone else
    /// rewrites a knob.
    Watch(watch::WatchArgs),
    /// Print a shell completion script (e.g. `netsteer completions bash >
    /// /etc/bash_completion.d/netsteer`).
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (netsteer.1 and one per subcommand) into DIR, generated from these
    /// very flag definitions.
    Man {
        /// Directory to write the pages to (created if absent).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

impl Command {
    /// The `--root`s given after the command; `None` for a command that reads no host.
    fn roots(&self) -> Option<&[PathBuf]> {
        Some(match self {
            Command::Show(a) => &a.root.roots,
            Command::Snapshot(a) => &a.root.roots,
            Command::Top(a) => &a.root.roots,
            Command::Doctor(a) => &a.root.roots,
            Command::Agent(a) => &a.root.roots,
            Command::Watch(a) => &a.root.roots,
            Command::Tune(c) => c.roots(),
            Command::Lane(c) => c.roots(),
            _ => return None,
        })
    }
}

/// The host as the user chose it: the live host or a tree.
pub struct Host {
    pub fs: HostFs,
}

impl Host {
    fn open(roots: &[PathBuf]) -> Result<Host> {
        let fs = match roots {
            [] => HostFs::live(),
            [root] => HostFs::open(root).with_context(|| format!("--root {}", root.display()))?,
            more => anyhow::bail!(
                "--root given {} times: only `doctor` reads several hosts",
                more.len()
            ),
        };
        Ok(Host { fs })
    }

    /// ethtool netlink on the live host, the tree's `netsteer/ethtool.json` under `--root`.
    pub fn nic_backend(&self) -> std::result::Result<Box<dyn netsteer_nic::NicBackend>, String> {
        netsteer_nic::backend_for(&self.fs)
    }

    pub fn nic_settings_source(&self) -> Box<dyn Fn(&str) -> NicSettings> {
        netsteer_nic::settings_source(&self.fs)
    }
}

/// The socket address a flag names (HOST:PORT, resolved), with the flag in every error.
pub fn resolve_flag(flag: &str, value: &str) -> Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    value
        .to_socket_addrs()
        .with_context(|| format!("{flag} {value}"))?
        .next()
        .with_context(|| format!("{flag} {value}: no address"))
}

/// Writes a line and flushes, so pipes keep every line; a closed pipe ends the program quietly.
pub fn emit(out: &mut impl Write, line: &str) -> io::Result<()> {
    writeln!(out, "{line}")?;
    out.flush()
}

fn run(cli: Cli) -> Result<ExitCode> {
    let Some(after) = cli.command.roots() else {
        if let Some(r) = cli.root.roots.first() {
            anyhow::bail!("--root {}: this command reads no host", r.display());
        }
        return run_hostless(cli);
    };
    let roots: Vec<PathBuf> = cli.root.roots.iter().chain(after).cloned().collect();
    if let Command::Doctor(args) = &cli.command
        && let Some(trees) = fleet_roots(&roots)
    {
        return doctor::run_fleet(&trees, args);
    }
    let host = Host::open(&roots)?;
    match cli.command {
        Command::Show(args) => show::run(&host, &args),
        Command::Snapshot(args) => snapshot::run(&host, &args),
        Command::Top(args) => top::run(&host, &args),
        Command::Doctor(args) => doctor::run(&host, &args),
        Command::Tune(cmd) => tune::run(&host, &cmd),
        Command::Lane(cmd) => lane::run(&host, &cmd),
        Command::Agent(args) => agent::run(&host, &args),
        Command::Watch(args) => watch::run(&host, &args),
        _ => unreachable!("every command with --root is above"),
    }
}

/// The commands that read no host: benchmarks (always the live host), the lab, netchannel,
/// completions and man pages.
fn run_hostless(cli: Cli) -> Result<ExitCode> {
    use clap::CommandFactory;
    match &cli.command {
        Command::Completions { shell } => {
            // Into a buffer first: the generator panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "netsteer", &mut script);
            io::stdout().write_all(&script)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Lab(cmd) => lab::run(cmd),
        Command::Netchannel(cmd) => netchannel::run(cmd),
        Command::Man { out } => {
            std::fs::create_dir_all(out).with_context(|| format!("--out {}", out.display()))?;
            clap_mangen::generate_to(Cli::command(), out)
                .with_context(|| format!("writing man pages to {}", out.display()))?;
            eprintln!("netsteer: man pages written to {}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(cmd) => bench::run(&Host::open(&[])?, cmd),
        Command::Trace(a) => trace::run_trace(a),
        _ => unreachable!("every command without --root is above"),
    }
}

/// The error and its causes, each cause said once (`netsteer_host::error::chain_text`).
pub fn error_text(e: &anyhow::Error) -> String {
    netsteer_host::error::chain_text(e.as_ref())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("netsteer: error: {}", error_text(&e));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod cli_tests {
    use super::*;
    use clap::CommandFactory;

    /// Every flag and argument says what it is for (`--help` is the manual most users read).
    #[test]
    fn every_flag_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                if a.is_hide_set() || a.get_id() == "help" || a.get_id() == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {}", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(format!("{path} {} (no about)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "netsteer", &mut missing);
        assert!(
            missing.is_empty(),
            "{} without help:\n{}",
            missing.len(),
            missing.join("\n")
        );
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
