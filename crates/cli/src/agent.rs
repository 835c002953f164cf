//! `netsteer agent`: flags for `netsteer_agent` and its HTTP front (`netsteer_agent::http`).

use crate::Host;
use anyhow::{Context, Result};
use clap::Args;
use netsteer_agent::Agent;
use netsteer_steering::doctor::Goal;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    /// Address to serve /metrics on. Loopback by default: another address (a host IP, 0.0.0.0)
    /// only when given.
    #[arg(long, default_value = "127.0.0.1:9641", value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Interface to export (repeat for several); default: every physical NIC, or every
    /// non-loopback device on a host without one.
    #[arg(long = "dev", value_name = "IF")]
    devices: Vec<String>,
    /// Where `tune apply` keeps its journals and the applied plan, for the drift and
    /// last-apply metrics (default /var/lib/netsteer; with --root, that path inside the tree).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The goal the doctor evaluates the host for at each scrape.
    #[arg(long, value_enum, default_value = "balanced")]
    goal: Goal,
    /// Export receive-path stage histograms (root, BPF; 1 s traced in 10: docs/agent.md).
    #[arg(long)]
    trace: bool,
    /// Print one scrape (Prometheus text format) on stdout and exit, instead of serving.
    #[arg(long)]
    once: bool,
    /// Connections served at once; more are answered 503 and closed.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_connections: u32,
    /// Connections one source network may hold at once (a scraper needs one). Counted per
    /// /24 for IPv4 and per /64 for IPv6: a host has many addresses in its own network, so a
    /// cap per address is no cap.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_per_peer: u32,
    /// The scraper's address or network (`ADDR` or `ADDR/LEN`, repeatable). Its connections
    /// are counted apart, per address, and `--max-per-peer` places of `--max-connections` are
    /// kept for it, so no other client can lock it out.
    #[arg(long, value_name = "ADDR[/LEN]", value_parser = netsteer_agent::http::parse_net)]
    scraper: Vec<netsteer_agent::http::Net>,
}

pub fn run(host: &Host, args: &AgentArgs) -> Result<ExitCode> {
    let mut agent = Agent::for_host(
        host.fs.clone(),
        args.devices.clone(),
        args.state_dir.clone(),
        args.goal,
        env!("CARGO_PKG_VERSION"),
    )
    .map_err(anyhow::Error::msg)?;
    if args.trace {
        let feed = netsteer_agent::trace::TraceFeed::standard(args.once);
        agent = agent.with_trace(feed.map_err(|e| anyhow::anyhow!("--trace: {e}"))?);
    }
    if args.once {
        let text = netsteer_agent::encode(agent.scrape(Instant::now(), SystemTime::now()));
        io::stdout().lock().write_all(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let listener =
        TcpListener::bind(args.listen).with_context(|| format!("--listen {}", args.listen))?;
    let addr = listener.local_addr()?;
    // The address line is what scripts (and the tests) wait for; port 0 picks a free port.
    eprintln!("netsteer agent: serving http://{addr}/metrics");
    netsteer_agent::http::serve(
        listener,
        Arc::new(agent),
        netsteer_agent::http::Limits {
            total: args.max_connections as usize,
            per_peer: args.max_per_peer as usize,
            scrapers: args.scraper.clone(),
        },
    )
}
