//! `netsteer netchannel proxy client|server`: unmodified TCP applications over netchannel.
//! The work is in `netchannel::proxy`; this is flags, start-up and the summary at exit.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use netchannel::proxy::{Backend, Limits, Proxy, Route};
use netchannel::{Class, Config, Endpoint};

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum NetchannelCommand {
    /// Carry unmodified TCP applications over netchannel: `client` listens for the
    /// application's connections, `server` connects them to the real backend.
    #[command(subcommand)]
    Proxy(ProxyCommand),
    /// Run an unmodified program with its chosen TCP sockets on netchannel, in-process (a
    /// preloaded library takes them over; no proxy hop).
    Run(RunArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A peer's channel address (HOST:PORT): the program's connects to HOST on a chosen
    /// port ride netchannel to it (repeatable).
    #[arg(long, value_name = "ADDR")]
    peer: Vec<String>,
    /// Accept channels on ADDR: the program's listening sockets on chosen ports also take
    /// virtual connections (plain TCP clients still connect).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Throughput-class ports (comma-separated).
    #[arg(long, value_name = "LIST", default_value = "")]
    ports: String,
    /// Latency-class ports (comma-separated): their sockets get the latency channels, apart
    /// from bulk traffic.
    #[arg(long, value_name = "LIST", default_value = "")]
    latency_ports: String,
    /// Throughput-class channels (TCP connections) per peer.
    #[arg(long, default_value_t = 2, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=32))]
    channels: u16,
    /// Latency-class channels per peer.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(0..=32))]
    latency_channels: u16,
    /// Receive window of each virtual socket, in bytes (the memory one connection may hold
    /// at the receiver).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(65536..=256 << 20))]
    window: u32,
    /// Receive memory one peer's session may hold (its open sockets × --window), in bytes; a
    /// peer may hold 4 sessions, so 4× this bounds what one peer can make the program buffer.
    #[arg(long, default_value_t = 256 << 20, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range((1 << 20)..=(1 << 40)))]
    session_memory: u64,
    /// Who reads the channels: the program's own threads when they wait (app: no hand-off
    /// per arrival), or a reader thread per channel (thread).
    #[arg(long, default_value = "app", value_parser = ["app", "thread"])]
    receive: String,
    /// The preload library (default: beside this binary, then /usr/lib/netsteer).
    #[arg(long, value_name = "PATH")]
    preload: Option<std::path::PathBuf>,
    /// One line on stderr per socket taken over.
    #[arg(long)]
    verbose: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

#[derive(Subcommand, Debug)]
pub enum ProxyCommand {
    /// Accept TCP connections and open a virtual socket to the server proxy for each.
    Client(ClientArgs),
    /// Accept channels from client proxies and connect each virtual socket to a backend.
    Server(ServerArgs),
}

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The server proxy's channel address (HOST:PORT).
    #[arg(long, value_name = "ADDR")]
    peer: String,
    /// LISTEN=PORT: TCP connections accepted on LISTEN go to virtual port PORT as
    /// throughput-class sockets (repeatable).
    #[arg(long, value_name = "LISTEN=PORT")]
    route: Vec<String>,
    /// LISTEN=PORT, as --route but latency-class sockets: their own channels and I/O
    /// threads, isolated from the bulk routes (repeatable).
    #[arg(long, value_name = "LISTEN=PORT")]
    latency_route: Vec<String>,
    /// Throughput-class channels (TCP connections) to the server proxy.
    #[arg(long, default_value_t = 2, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=63))]
    channels: u16,
    /// Latency-class channels (needed by --latency-route).
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(0..=63))]
    latency_channels: u16,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Address to accept the client proxies' channels on.
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// PORT=BACKEND: virtual sockets opened to PORT are connected to the TCP address
    /// BACKEND (repeatable).
    #[arg(long, value_name = "PORT=BACKEND", required = true)]
    backend: Vec<String>,
    /// Connections one peer address may have open at once (below --max-connections, so one
    /// peer cannot take every place).
    #[arg(long, default_value_t = 256, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_per_peer: u64,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct Common {
    /// Connections open at once; more are reset at once.
    #[arg(long, default_value_t = 1024, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Copy buffer per direction of a connection, in bytes.
    #[arg(long, default_value_t = 65536, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(4096..=16 << 20))]
    buffer: u64,
    /// Receive window of each virtual socket, in bytes (the memory one connection may hold
    /// at the receiving proxy).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(65536..=256 << 20))]
    window: u32,
    /// Threads that copy between TCP and virtual sockets.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: u64,
    /// Seconds an open (virtual socket or backend connection) may take.
    #[arg(long, default_value_t = 5, value_name = "S",
          value_parser = clap::value_parser!(u64).range(1..=600))]
    connect_timeout: u64,
    /// Log every connection's open and close, not only failures.
    #[arg(long)]
    verbose: bool,
    /// Seconds a stop (SIGTERM, SIGINT) waits for open connections to finish, refusing new
    /// ones; what is still open then is aborted.
    #[arg(long, default_value_t = 5, value_name = "S",
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    drain: u64,
}

impl Common {
    /// The endpoint settings both roles share. The copy task writes frames itself when a
    /// channel is idle (no hand-off to the channel's writer thread per frame).
    fn config(&self) -> Config {
        Config {
            window: self.window,
            inline_send: true,
            async_inline_send: true,
            app_driven: true,
            ..Config::default()
        }
    }

    fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections as usize,
            buffer: self.buffer as usize,
            connect_timeout: Duration::from_secs(self.connect_timeout),
            threads: self.threads as usize,
            verbose: self.verbose,
            ..Limits::default()
        }
    }
}

pub fn run(cmd: &NetchannelCommand) -> Result<ExitCode> {
    let p = match cmd {
        NetchannelCommand::Proxy(p) => p,
        NetchannelCommand::Run(a) => return run_preloaded(a),
    };
    // Before any thread starts, so all inherit the mask and one sigwait sees the signal.
    netsteer_sock::signal::block_termination().context("blocking SIGINT/SIGTERM")?;
    let (proxy, endpoint, role) = match p {
        ProxyCommand::Client(a) => client(a)?,
        ProxyCommand::Server(a) => server(a)?,
    };
    let drain = match p {
        ProxyCommand::Client(a) => a.common.drain,
        ProxyCommand::Server(a) => a.common.drain,
    };
    let sig = netsteer_sock::signal::wait_termination().context("waiting for a signal")?;
    eprintln!("netchannel proxy {role}: signal {sig}, stopping");
    let open = proxy.drain(std::time::Duration::from_secs(drain));
    if open > 0 {
        eprintln!(
            "netchannel proxy {role}: {open} connection(s) still open after {drain} s: aborted"
        );
    }
    println!("{}", proxy.stats().summary_line(role, &endpoint.stats()));
    drop(proxy);
    drop(endpoint);
    Ok(ExitCode::SUCCESS)
}

fn log_line() -> netchannel::proxy::Log {
    Arc::new(|line: &str| eprintln!("netchannel proxy: {line}"))
}

/// Every value of a route flag.
fn routes(flag: &str, values: &[String], class: Class) -> Result<Vec<Route>> {
    values
        .iter()
        .map(|v| Route::parse(flag, v, class).map_err(anyhow::Error::msg))
        .collect()
}

fn client(a: &ClientArgs) -> Result<(Proxy, Arc<Endpoint>, &'static str)> {
    let mut all = routes("--route", &a.route, Class::Throughput)?;
    let lat = routes("--latency-route", &a.latency_route, Class::Latency)?;
    if !lat.is_empty() && a.latency_channels == 0 {
        bail!("--latency-route needs --latency-channels of at least 1");
    }
    all.extend(lat);
    if all.is_empty() {
        bail!("give at least one --route or --latency-route");
    }
    let peer = crate::resolve_flag("--peer", &a.peer)?;
    let cfg = Config {
        throughput_channels: a.channels,
        latency_channels: a.latency_channels,
        ..a.common.config()
    };
    let endpoint = Arc::new(Endpoint::new(cfg).context("starting the netchannel endpoint")?);
    let proxy = Proxy::client(endpoint.clone(), peer, &all, a.common.limits(), log_line())?;
    for (r, addr) in all.iter().zip(proxy.local_addrs()) {
        eprintln!(
            "netchannel proxy client: {addr} → {peer} port {} ({:?}, {} + {} channels)",
            r.port, r.class, a.channels, a.latency_channels
        );
    }
    Ok((proxy, endpoint, "client"))
}

fn server(a: &ServerArgs) -> Result<(Proxy, Arc<Endpoint>, &'static str)> {
    let backends = Backend::parse_all(&a.backend).map_err(anyhow::Error::msg)?;
    let listen = crate::resolve_flag("--listen", &a.listen)?;
    let cfg = a.common.config();
    let endpoint =
        Arc::new(Endpoint::listen(listen, cfg).with_context(|| format!("--listen {listen}"))?);
    let local = endpoint.local_addr().unwrap_or(listen);
    let limits = Limits {
        max_per_peer: a.max_per_peer as usize,
        ..a.common.limits()
    };
    let proxy = Proxy::server(endpoint.clone(), &backends, limits, log_line())?;
    for b in &backends {
        eprintln!(
            "netchannel proxy server: channels on {local}, port {} → {}",
            b.port, b.backend
        );
    }
    Ok((proxy, endpoint, "server"))
}

fn run_preloaded(a: &RunArgs) -> Result<ExitCode> {
    use netchannel::preload_env::{self as env, Settings};
    use std::os::unix::process::CommandExt;
    let mut peers = Vec::new();
    for p in &a.peer {
        peers.push(crate::resolve_flag("--peer", p)?);
    }
    let listen = a
        .listen
        .as_deref()
        .map(|l| crate::resolve_flag("--listen", l))
        .transpose()?;
    let flag = |name: &str, e: env::BadSetting| anyhow::anyhow!("{name} {:?}: {}", e.value, e.why);
    let settings = Settings {
        peers,
        listen,
        ports: env::parse_ports(env::ENV_PORTS, &a.ports).map_err(|e| flag("--ports", e))?,
        latency_ports: env::parse_ports(env::ENV_LATENCY_PORTS, &a.latency_ports)
            .map_err(|e| flag("--latency-ports", e))?,
        channels: a.channels,
        latency_channels: a.latency_channels,
        window: a.window,
        verbose: a.verbose,
        session_memory: a.session_memory,
        app_driven: a.receive == "app",
    };
    if let Err(e) = settings.check() {
        bail!("{}: {}", env::flag_of(e.name), e.why);
    }
    let exe = std::env::current_exe().ok();
    let lib =
        env::find_library(a.preload.as_deref(), exe.as_deref()).map_err(anyhow::Error::msg)?;
    let (program, args) = a
        .command
        .split_first()
        .context("no command given after --")?;
    let mut cmd = settings.command(&lib, program, args);
    // exec: the program takes this process's place (its pid, signals and exit status).
    let e = cmd.exec();
    bail!("running {}: {e}", program.to_string_lossy())
}
