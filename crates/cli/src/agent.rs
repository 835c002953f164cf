//! `netsteer agent`: flags for `netsteer_agent` and its HTTP front (`netsteer_agent::http`).

use crate::Host;
use anyhow::{Context, Result, bail};
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
    /// How often the agent reads the counters for the doctor's rates (seconds): each scrape's
    /// findings are over the last such interval, the same for every scraper. Set it to the
    /// scrape interval (a finding shorter than the gap between scrapes is not seen).
    #[arg(long, default_value_t = netsteer_agent::RATE_INTERVAL.as_secs(), value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    rate_interval: u64,
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
    /// Serve only the `--scraper` addresses: every other client's connection is closed
    /// before a byte is read.
    #[arg(long, requires = "scraper")]
    scrapers_only: bool,
    /// Prometheus's web configuration file (exporter-toolkit format, as node_exporter's
    /// `--web.config.file`): TLS with optional client certificates, basic auth with bcrypt
    /// hashes. Needed to listen beyond loopback (docs/agent.md).
    #[arg(long, alias = "web.config.file", value_name = "FILE")]
    web_config_file: Option<PathBuf>,
}

pub fn run(host: &Host, args: &AgentArgs) -> Result<ExitCode> {
    // Checked first, with --once too: a bad file is said before anything runs.
    let web = args
        .web_config_file
        .as_deref()
        .map(netsteer_agent::web::WebConfig::load)
        .transpose()
        .context("--web-config-file")?;
    let mut agent = Agent::for_host(
        host.fs.clone(),
        args.devices.clone(),
        args.state_dir.clone(),
        args.goal,
        env!("CARGO_PKG_VERSION"),
    )
    .map_err(anyhow::Error::msg)?
    .with_rate_interval(std::time::Duration::from_secs(args.rate_interval));
    if args.trace {
        let feed = netsteer_agent::trace::TraceFeed::standard(args.once);
        agent = agent.with_trace(feed.map_err(|e| anyhow::anyhow!("--trace: {e}"))?);
    }
    if args.once {
        let text = netsteer_agent::encode(agent.scrape(Instant::now(), SystemTime::now()));
        io::stdout().lock().write_all(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    // Anything that listens beyond loopback authenticates its clients: the metrics name the
    // host's NICs, CPUs and findings.
    if !args.listen.ip().is_loopback() && !web.as_ref().is_some_and(|w| w.authenticates()) {
        bail!(
            "--listen {}: beyond loopback the agent authenticates its scrapers: give \
             --web-config-file with basic_auth_users or client certificates \
             (RequireAndVerifyClientCert); see docs/agent.md",
            args.listen
        );
    }
    let listener =
        TcpListener::bind(args.listen).with_context(|| format!("--listen {}", args.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if web.as_ref().is_some_and(|w| w.tls.is_some()) {
        "https"
    } else {
        "http"
    };
    // The address line is what scripts (and the tests) wait for; port 0 picks a free port.
    eprintln!("netsteer agent: serving {scheme}://{addr}/metrics");
    let never = netsteer_agent::http::serve(
        listener,
        Arc::new(agent),
        netsteer_agent::http::Limits {
            total: args.max_connections as usize,
            per_peer: args.max_per_peer as usize,
            scrapers: args.scraper.clone(),
            scrapers_only: args.scrapers_only,
        },
        web,
    )
    .context("serving /metrics")?;
    match never {}
}
