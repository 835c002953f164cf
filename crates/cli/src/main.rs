//! `netsteer`: the command line. Thin: the host crate does the work; this file parses flags,
//! picks the data sources (live host or a `--root` tree) and maps errors to exit codes
//! (0 ok, 1 findings or threshold failed, 2 error).

mod agent;
mod args;
mod bench;
mod doctor;
mod lab;
mod netchannel;
mod safe;
mod show;
mod snapshot;
mod top;
mod tui;
mod tune;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use netsteer_host::HostFs;
use netsteer_host::ethtool::NicSettings;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = io::Error::from_raw_os_error(2);
        let host = netsteer_host::HostError::Io {
            path: "/proc/stat".into(),
            source: io,
        };
        let e = anyhow::Error::new(host).context("reading counters");
        assert_eq!(
            error_text(&e),
            "reading counters: /proc/stat: No such file or directory (os error 2)"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&plain), "outer: inner");
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "netsteer",
    version,
    about = "See, diagnose and tune how a Linux host spreads packet work over its CPUs"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct Global {
    /// Read the host from this directory instead of `/` (a `netsteer snapshot` or fixture tree).
    /// `doctor` takes it several times, or a directory of snapshots, for a fleet table.
    #[arg(long, global = true, value_name = "DIR", action = clap::ArgAction::Append)]
    root: Vec<PathBuf>,
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
    /// The lab: scenarios of the seeds run between namespace hosts, before and after a tune
    /// change, with a report.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Serve the host's packet path as Prometheus metrics (text format on /metrics), read
    /// at each scrape: per-CPU IRQ/softirq time, softnet, per-queue IRQs, RPS/RFS/XPS, NIC
    /// settings, the doctor's findings and tune drift.
    Agent(agent::AgentArgs),
    /// netchannel for unmodified applications: a TCP proxy pair that carries each connection
    /// as a virtual socket over several channels (and survives a channel's death).
    #[command(subcommand)]
    Netchannel(netchannel::NetchannelCommand),
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

/// The host as the user chose it: the live host or a tree.
pub struct Host {
    pub fs: HostFs,
}

impl Host {
    fn open(global: &Global) -> Result<Host> {
        let fs = match global.root.as_slice() {
            [] => HostFs::live(),
            [root] => HostFs::open(root).with_context(|| format!("--root {}", root.display()))?,
            more => anyhow::bail!(
                "--root given {} times: only `doctor` reads several hosts",
                more.len()
            ),
        };
        Ok(Host { fs })
    }

    /// Where NIC settings come from: ethtool netlink on the live host, the tree's recorded
    /// state (`netsteer/ethtool.json`) under `--root`. Err(reason) when netlink cannot be
    /// opened.
    pub fn nic_backend(&self) -> std::result::Result<Box<dyn netsteer_nic::NicBackend>, String> {
        netsteer_nic::backend_for(&self.fs)
    }

    /// NIC settings for one interface, with the reason in place of values when there is no
    /// backend.
    pub fn nic_settings_source(&self) -> Box<dyn Fn(&str) -> NicSettings> {
        match self.nic_backend() {
            Ok(backend) => Box::new(move |name: &str| backend.settings(name)),
            Err(reason) => Box::new(move |_: &str| NicSettings::unavailable(&reason)),
        }
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
    use clap::CommandFactory;
    match &cli.command {
        Command::Completions { shell } => {
            // Into a buffer first: the generator panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "netsteer", &mut script);
            io::stdout().write_all(&script)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Lab(cmd) => return lab::run(cmd),
        Command::Netchannel(cmd) => return netchannel::run(cmd),
        Command::Doctor(args) if doctor::fleet_roots(&cli.global.root)?.is_some() => {
            let roots = doctor::fleet_roots(&cli.global.root)?.unwrap_or_default();
            return doctor::run_fleet(&roots, args);
        }
        Command::Man { out } => {
            std::fs::create_dir_all(out).with_context(|| format!("--out {}", out.display()))?;
            clap_mangen::generate_to(Cli::command(), out)
                .with_context(|| format!("writing man pages to {}", out.display()))?;
            eprintln!("netsteer: man pages written to {}", out.display());
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let host = Host::open(&cli.global)?;
    match cli.command {
        Command::Show(args) => show::run(&host, &args),
        Command::Snapshot(args) => snapshot::run(&host, &args),
        Command::Top(args) => top::run(&host, &args),
        Command::Doctor(args) => doctor::run(&host, &args),
        Command::Bench(cmd) => bench::run(&host, &cmd),
        Command::Tune(cmd) => tune::run(&host, &cmd),
        Command::Agent(args) => agent::run(&host, &args),
        Command::Completions { .. }
        | Command::Man { .. }
        | Command::Lab(_)
        | Command::Netchannel(_) => {
            unreachable!("handled above")
        }
    }
}

/// The error and its causes joined by ": ", as `{:#}` does, but without a cause its parent's
/// message already ends with: library errors such as `"{path}: {source}"` print their cause
/// and also return it from `source()`, which `{:#}` would print twice.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if out.ends_with(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
    }
    out
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
