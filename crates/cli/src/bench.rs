use crate::Host;
use crate::args::Seconds;
use anyhow::{Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::{Args, Subcommand};
use netsteer_bench::clock::{Clock, MonotonicClock};
use netsteer_bench::netchannel::Experiment;
use netsteer_bench::report::{ErrorMessage, Role};
use netsteer_bench::report::{Format, Reporter};
use netsteer_bench::tcp;
use netsteer_bench::udp_echo::client::{ClientConfig, run_client};
use netsteer_bench::udp_echo::irq_suspend;
use netsteer_bench::udp_echo::limit::Limits;
use netsteer_bench::udp_echo::message::BENCH as UDP_ECHO;
use netsteer_bench::udp_echo::server::{Server, ServerConfig};
use netsteer_host::CpuSet;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// UDP echo round trips (seed 000): `server` echoes datagrams, `client` times them.
    #[command(subcommand)]
    UdpEcho(UdpEcho),
    /// TCP bulk transfer over many flows (seeds 001/003): throughput, retransmits, CPU per MB
    /// on both sides, zero-copy send/receive, per-CPU NET_RX during the run.
    #[command(subcommand)]
    TcpStream(TcpBench<StreamArgs>),
    /// TCP request/response (seed 004): exact latency percentiles and transactions/s.
    #[command(subcommand)]
    TcpRr(TcpBench<RrArgs>),
    /// NetChannel's experiments (seed 004) with the netchannel library, beside plain TCP in
    /// the same run: E1 one socket vs channels x copy workers, E2 4 KiB messages vs channels,
    /// E3 latency isolation beside bulk apps, E4 throughput per core.
    Netchannel(NetchannelArgs),
}

#[derive(Args, Debug)]
pub struct NetchannelArgs {
    /// Experiments to run, in order.
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        value_delimiter = ',',
        default_value = "E1,E2,E3,E4",
        value_name = "LIST"
    )]
    experiment: Vec<Experiment>,
    /// Seconds per point.
    #[arg(
        long,
        default_value = "3",
        value_name = "S",
        allow_negative_numbers = true
    )]
    duration: Seconds,
    /// Repeats per point (min/median/max reported).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=100))]
    repeat: usize,
    /// Channel counts for E1 and E2 (each 1 to 64).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2",
        value_name = "LIST",
        value_parser = clap::value_parser!(u16).range(1..=64)
    )]
    channels: Vec<u16>,
    /// Receive copy-worker counts for E1 (each 0 to 64).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,1,2",
        value_name = "LIST",
        value_parser = RangedU64ValueParser::<usize>::new().range(0..=64)
    )]
    copy_workers: Vec<usize>,
    /// Bulk apps beside the latency app in E3 (1 to 64).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=64))]
    bulk_apps: usize,
    /// Network namespace (name under /run/netns, or a path) of the client "host".
    #[arg(long, value_name = "NS")]
    client_netns: Option<String>,
    /// Network namespace of the server "host".
    #[arg(long, value_name = "NS")]
    server_netns: Option<String>,
    /// The server's address (its veth address when namespaces are used).
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    server_ip: std::net::IpAddr,
    /// CPU of the sending app thread.
    #[arg(long, value_name = "CPU")]
    sender_cpu: Option<u32>,
    /// CPU of the receiving app thread. With neither CPU given, the sender runs on the first
    /// CPU this process may use and the receiver on the second.
    #[arg(long, value_name = "CPU")]
    receiver_cpu: Option<u32>,
    /// Leave the app threads to the scheduler when no CPU is given.
    #[arg(long, conflicts_with_all = ["sender_cpu", "receiver_cpu"])]
    no_pin: bool,
    /// Keep the latency channels' I/O threads at normal priority in E3 (default: SCHED_FIFO
    /// when allowed).
    #[arg(long)]
    no_realtime: bool,
    /// E1 and E2 also run one MPTCP connection (IPPROTO_MPTCP) beside plain TCP. Its subflows
    /// come from the hosts' path managers (`ip mptcp endpoint add ADDR subflow`, `ip mptcp
    /// limits`); the row shows how many it got.
    #[arg(long)]
    mptcp: bool,
    /// JSON Lines, one message per line (docs/json.md).
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
pub enum TcpBench<C: clap::Args> {
    /// Serve tcp-stream and tcp-rr tests from any number of clients (one server runs both).
    Server(TcpServerArgs),
    /// Run a test against a server.
    Client(C),
}

#[derive(Args, Debug)]
pub struct TcpServerArgs {
    /// Address to listen on. Loopback by default: give a routable address (or `0.0.0.0:4322`)
    /// to serve other hosts.
    #[arg(long, default_value = "127.0.0.1:4322", value_name = "ADDR:PORT")]
    listen: String,
    /// Pin data threads round-robin over these CPUs.
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// Connections served at once; more are told the server is full and closed.
    #[arg(long, default_value_t = 1024, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=65536))]
    max_connections: usize,
    /// MiB of buffers all running tests may take together; a client asking for more (sizes
    /// times flows) is rejected with the figures.
    #[arg(long, default_value_t = tcp::server::DEFAULT_MAX_MEMORY >> 20, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_memory: u64,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    duration: Option<Seconds>,
    /// JSON Lines, one message per line (docs/json.md).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct StreamArgs {
    /// The server, `HOST:PORT` (port 4322 by default).
    #[arg(value_name = "HOST:PORT")]
    target: String,
    /// Flows (connections), 1 to 256.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    flows: u32,
    /// Pin flow i to the i-th CPU of this list.
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// Bytes per write (16 reproduces seed 003's tiny writes; iperf3's default is 128 KiB).
    #[arg(long, default_value_t = 131_072, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=64 << 20))]
    write_size: u32,
    /// Bytes per read on the server (default: 64 KiB to 1 MiB, with a low-water mark for
    /// small writes). `--read-size 16` reads as `iperf3 -l 16` does, for seed 003's case
    /// compared on the same receive workload.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    read_size: Option<u32>,
    /// Seconds to send.
    #[arg(
        long,
        default_value = "10",
        value_name = "S",
        allow_negative_numbers = true
    )]
    duration: Seconds,
    /// TCP_NODELAY on the data connections (iperf3 -N).
    #[arg(long)]
    nodelay: bool,
    /// Congestion control algorithm (TCP_CONGESTION).
    #[arg(long, value_name = "ALG")]
    congestion: Option<String>,
    /// Send with MSG_ZEROCOPY (completions read from the error queue).
    #[arg(long)]
    zerocopy_send: bool,
    /// The server receives with TCP_ZEROCOPY_RECEIVE + mmap (with a copy buffer for tails).
    #[arg(long)]
    zerocopy_recv: bool,
    /// TCP_MAXSEG for the data connections (4108 = one page of payload per segment).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(88..=65535))]
    mss: Option<u32>,
    /// The server checks every byte against the sender's pattern; a mismatch exits 1.
    #[arg(long)]
    verify: bool,
    /// How each side drives its flows; the server decides `auto` for its own CPUs and path.
    #[arg(long, value_enum, default_value_t = tcp::Engine::Auto)]
    engine: tcp::Engine,
    /// Test hook: corrupt the byte at this stream offset of flow 0 before sending it.
    #[arg(long, hide = true, value_name = "OFFSET")]
    inject_corruption: Option<u64>,
    /// Seconds to wait for the server (connect, results).
    #[arg(
        long,
        default_value = "5",
        value_name = "S",
        allow_negative_numbers = true
    )]
    timeout: Seconds,
    #[command(flatten)]
    out: Output,
}

#[derive(Args, Debug)]
pub struct RrArgs {
    /// The server, `HOST:PORT` (port 4322 by default).
    #[arg(value_name = "HOST:PORT")]
    target: String,
    /// Bytes per request (1 B to 16 MiB).
    #[arg(long, default_value_t = 4096, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=16 << 20))]
    request_size: u32,
    /// Bytes per response (1 B to 16 MiB).
    #[arg(long, default_value_t = 4096, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=16 << 20))]
    response_size: u32,
    /// Flows (connections), one thread each (1 to 256).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    flows: u32,
    /// Requests each flow keeps outstanding (1 to 1024).
    #[arg(long, default_value_t = 1, value_name = "DEPTH", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pipeline: u32,
    /// Pin flow i to the i-th CPU of this list.
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// How both sides wait (the server follows the client's choice).
    #[command(flatten)]
    wait: netsteer_bench::waiter::WaitArgs,
    /// Seconds to measure after the warm-up.
    #[arg(
        long,
        default_value = "10",
        value_name = "S",
        allow_negative_numbers = true
    )]
    duration: Seconds,
    /// Seconds of round trips before measuring (not reported).
    #[arg(
        long,
        default_value = "0",
        value_name = "S",
        allow_negative_numbers = true
    )]
    warmup: Seconds,
    /// Congestion control algorithm (TCP_CONGESTION).
    #[arg(long, value_name = "ALG")]
    congestion: Option<String>,
    /// TCP_MAXSEG for the data connections.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(88..=65535))]
    mss: Option<u32>,
    /// Seconds a response may be late before the run ends with an error.
    #[arg(
        long,
        default_value = "5",
        value_name = "S",
        allow_negative_numbers = true
    )]
    timeout: Seconds,
    #[command(flatten)]
    out: Output,
}

#[derive(Subcommand, Debug)]
pub enum UdpEcho {
    /// Echo every datagram back to its sender (any echo client can use it).
    Server(ServerArgs),
    /// Send one datagram at a time per flow and time its echo.
    Client(ClientArgs),
}

/// How often a benchmark role reports and in which form (every client and the echo server).
#[derive(Args, Debug, Clone)]
pub struct Output {
    /// Seconds between report lines (a server reports only intervals with traffic).
    #[arg(
        long,
        default_value = "1",
        value_name = "S",
        allow_negative_numbers = true
    )]
    interval: Seconds,
    /// JSON Lines, one message per line (docs/json.md).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Address to listen on. Loopback by default: give a routable address (or `0.0.0.0:4321`,
    /// `[::]:4321` for IPv6 and IPv4) to serve other hosts; answers are then rate-limited.
    #[arg(long, default_value = "127.0.0.1:4321", value_name = "ADDR:PORT")]
    listen: String,
    /// Threads, one SO_REUSEPORT socket each (1 to 1024).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    threads: usize,
    /// Pin thread i to the i-th CPU of this list (`1`, `2-3`, `0,4`).
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// How each thread waits for the next datagram.
    #[command(flatten)]
    wait: netsteer_bench::waiter::WaitArgs,
    /// IRQ suspension for the run (6.13+): set irq-suspend-timeout to NS, defer-hard-irqs to 2
    /// and gro-flush-timeout to 200 µs on every NAPI of `--dev`, and restore them after
    /// (also on Ctrl-C or SIGTERM). Needs `--wait epoll-busy --prefer-busy-poll`, the only
    /// mode in which suspension acts.
    #[arg(long, value_name = "NS", requires = "dev", value_parser = clap::value_parser!(u64).range(1..=10_000_000_000))]
    irq_suspend: Option<u64>,
    /// The device whose NAPIs `--irq-suspend` sets (the one the clients' packets arrive on).
    #[arg(long, value_name = "IF")]
    dev: Option<String>,
    /// Answers per second to one source address; 0 = unlimited. Default: unlimited on a
    /// loopback address, 10000 on any other (an echo server must not be a reflector).
    #[arg(long, value_name = "PPS")]
    max_pps_per_source: Option<u32>,
    /// Answers per second in all; 0 = unlimited. Default: unlimited on a loopback address,
    /// 100000 on any other.
    #[arg(long, value_name = "PPS")]
    max_pps: Option<u32>,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    duration: Option<Seconds>,
    #[command(flatten)]
    xdp: netsteer_bench::udp_echo::xdp::XdpArgs,
    #[command(flatten)]
    out: Output,
}

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Servers to ping, each `HOST:PORT` (`[::1]:4321`); the port defaults to 4321.
    #[arg(required = true, value_name = "HOST:PORT")]
    targets: Vec<String>,
    /// Datagram size in bytes (28 to 65507: sequence, send time and checksum ride in it).
    #[arg(long, default_value_t = 32, value_name = "BYTES", value_parser = RangedU64ValueParser::<usize>::new().range(28..=65507))]
    size: usize,
    /// Seconds to measure after the warm-up (default 10 unless --count is given).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    duration: Option<Seconds>,
    /// Round trips per flow instead of a duration.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Seconds of round trips before measuring (not reported).
    #[arg(
        long,
        default_value = "0",
        value_name = "S",
        allow_negative_numbers = true
    )]
    warmup: Seconds,
    /// How each flow waits for its echo.
    #[command(flatten)]
    wait: netsteer_bench::waiter::WaitArgs,
    /// Round trips per second per flow (default: as fast as the echoes come back); a paced
    /// client shows what a wait mode costs the server at a fixed load.
    #[arg(long, value_name = "PER_S", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    rate: Option<u32>,
    /// Pin flow i to the i-th CPU of this list.
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// Fixed source port of the first flow (the others count up), as seed 000 does.
    #[arg(long, value_name = "PORT")]
    src_port: Option<u16>,
    /// Flows (sockets and threads) per target, each with its own source port (1 to 1024).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    flows: usize,
    /// Seconds to wait for each echo before counting it lost; three in a row end the run.
    #[arg(
        long,
        default_value = "1",
        value_name = "S",
        allow_negative_numbers = true
    )]
    timeout: Seconds,
    /// SO_TIMESTAMPING: split each round trip into send-side and kernel-delivery time.
    #[arg(long)]
    timestamp: bool,
    #[command(flatten)]
    xdp: netsteer_bench::udp_echo::xdp::XdpArgs,
    #[command(flatten)]
    out: Output,
}

fn cpus(list: Option<&str>) -> Result<Vec<u32>> {
    match list {
        None => Ok(Vec::new()),
        Some(l) => Ok(CpuSet::parse_list(l, None)
            .with_context(|| format!("--cpu {l}"))?
            .iter()
            .collect()),
    }
}

fn reporter(json: bool) -> Reporter<io::StdoutLock<'static>> {
    Reporter::new(
        if json {
            Format::JsonLines
        } else {
            Format::Human
        },
        io::stdout().lock(),
    )
}

/// Reports an error as a message (so JSON consumers see it) and on stderr.
fn fail(json: bool, bench: &str, role: Role, e: impl std::fmt::Display) -> ExitCode {
    let msg = ErrorMessage::new(bench, role, e.to_string());
    if json {
        let mut r = reporter(true);
        let _ = r.emit(&msg);
    }
    let _ = writeln!(io::stderr(), "netsteer: error: {e}");
    ExitCode::from(2)
}

pub fn run(host: &Host, cmd: &BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::UdpEcho(UdpEcho::Server(a)) => server(host, a),
        BenchCommand::UdpEcho(UdpEcho::Client(a)) => client(a),
        BenchCommand::TcpStream(TcpBench::Server(a)) => tcp_server(a, tcp::stream::BENCH),
        BenchCommand::TcpStream(TcpBench::Client(a)) => stream_client(a),
        BenchCommand::TcpRr(TcpBench::Server(a)) => tcp_server(a, tcp::rr::BENCH),
        BenchCommand::TcpRr(TcpBench::Client(a)) => rr_client(a),
        BenchCommand::Netchannel(a) => netchannel_bench(a),
    }
}

fn netns_path(flag: &str, ns: &Option<String>) -> Result<Option<std::path::PathBuf>> {
    ns.as_deref()
        .map(|n| netsteer_sock::netns::named(n).with_context(|| format!("{flag} {n}")))
        .transpose()
}

fn netchannel_bench(a: &NetchannelArgs) -> Result<ExitCode> {
    use netsteer_bench::netchannel as nc;
    let cfg = nc::Config {
        experiments: a.experiment.clone(),
        duration: a.duration.get(),
        repeat: a.repeat,
        channels: a.channels.clone(),
        copy_workers: a.copy_workers.clone(),
        bulk_apps: a.bulk_apps,
        client_netns: netns_path("--client-netns", &a.client_netns)?,
        server_netns: netns_path("--server-netns", &a.server_netns)?,
        server_ip: a.server_ip,
        sender_cpu: a.sender_cpu,
        receiver_cpu: a.receiver_cpu,
        pin: !a.no_pin,
        latency_realtime: !a.no_realtime,
        mptcp: a.mptcp,
        ..nc::Config::default()
    };
    let mut rep = reporter(a.json);
    match nc::run(&cfg, |s| rep.emit(s)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => Ok(fail(a.json, nc::message::BENCH, Role::Client, e)),
    }
}

fn listen_addr(listen: &str) -> Result<SocketAddr> {
    crate::resolve_flag("--listen", listen)
}

fn tcp_server(a: &TcpServerArgs, bench: &str) -> Result<ExitCode> {
    let cfg = tcp::server::ServerConfig {
        listen: listen_addr(&a.listen)?,
        cpus: cpus(a.cpu.as_deref())?,
        max_connections: a.max_connections,
        hello_timeout: tcp::proto::HELLO_TIMEOUT,
        duration: a.duration.map(Seconds::get),
        max_memory: a.max_memory << 20,
        flow_idle: tcp::server::FLOW_IDLE,
    };
    let server = match tcp::server::Server::bind(cfg) {
        Ok(s) => s,
        Err(e) => return Ok(fail(a.json, bench, Role::Server, e)),
    };
    let listen = server.local_addr()?;
    eprintln!("netsteer: tcp-stream/tcp-rr server on {listen}");
    let mut out = reporter(a.json);
    // SIGINT/SIGTERM end the server with its summary (a script stops a background server with
    // kill, not Ctrl-C); the accept loop looks at the flag every 100 ms.
    let stop = Arc::new(AtomicBool::new(false));
    netsteer_sock::signal::stop_on_termination(stop.clone()).context("handling SIGINT/SIGTERM")?;
    match server.run(&stop, |m| out.emit(m)) {
        Ok(t) => {
            out.emit(&t.summary(bench, listen))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(fail(a.json, bench, Role::Server, e)),
    }
}

fn stream_client(a: &StreamArgs) -> Result<ExitCode> {
    let cfg = tcp::stream::StreamConfig {
        target: netsteer_bench::target::resolve(&a.target, tcp::DEFAULT_PORT)?,
        flows: a.flows,
        cpus: cpus(a.cpu.as_deref())?,
        write_size: a.write_size,
        read_size: a.read_size,
        duration: a.duration.get(),
        interval: a.out.interval.get(),
        nodelay: a.nodelay,
        congestion: a.congestion.clone(),
        mss: a.mss,
        zerocopy_send: a.zerocopy_send,
        zerocopy_recv: a.zerocopy_recv,
        verify: a.verify,
        inject_corruption_at: a.inject_corruption,
        timeout: a.timeout.get(),
        engine: a.engine,
    };
    let mut out = reporter(a.out.json);
    match tcp::stream::run_stream_client(&cfg, |m| out.emit(m)) {
        Ok(s) => {
            out.emit(&s)?;
            let bad = s.verify.as_ref().is_some_and(|v| !v.ok);
            Ok(if bad {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Err(e) => {
            drop(out);
            Ok(fail(a.out.json, tcp::stream::BENCH, Role::Client, e))
        }
    }
}

fn rr_client(a: &RrArgs) -> Result<ExitCode> {
    let cfg = tcp::rr::RrConfig {
        target: netsteer_bench::target::resolve(&a.target, tcp::DEFAULT_PORT)?,
        flows: a.flows,
        cpus: cpus(a.cpu.as_deref())?,
        request_size: a.request_size,
        response_size: a.response_size,
        pipeline: a.pipeline,
        wait: a.wait.wait,
        busy: a.wait.busy(),
        duration: a.duration.get(),
        interval: a.out.interval.get(),
        warmup: a.warmup.get(),
        timeout: a.timeout.get(),
        congestion: a.congestion.clone(),
        mss: a.mss,
    };
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::default());
    let mut out = reporter(a.out.json);
    match tcp::rr::run_rr_client(&cfg, clock, |m| out.emit(m)) {
        Ok(s) => {
            out.emit(&s)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            drop(out);
            Ok(fail(a.out.json, tcp::rr::BENCH, Role::Client, e))
        }
    }
}

fn server(host: &Host, a: &ServerArgs) -> Result<ExitCode> {
    if a.irq_suspend.is_some() {
        irq_suspend::check(a.wait.wait, a.wait.prefer_busy_poll).map_err(anyhow::Error::msg)?;
    }
    let listen = listen_addr(&a.listen)?;
    let cfg = ServerConfig {
        listen,
        threads: a.threads,
        cpus: cpus(a.cpu.as_deref())?,
        wait: a.wait.wait,
        busy: a.wait.busy(),
        interval: a.out.interval.get(),
        duration: a.duration.map(Seconds::get),
        limits: Limits::for_server(listen, a.xdp.xdp.is_some(), a.max_pps_per_source, a.max_pps),
        xdp: a.xdp.config(),
    };
    let server = match Server::bind(&cfg) {
        Ok(s) => s,
        Err(e) => return Ok(fail(a.out.json, UDP_ECHO, Role::Server, e)),
    };
    match &cfg.xdp {
        Some(x) => eprintln!(
            "netsteer: udp-echo server on {} (AF_XDP on {}, spinning)",
            server.local_addr(),
            x.dev
        ),
        None => eprintln!(
            "netsteer: udp-echo server on {} ({} thread(s), wait {})",
            server.local_addr(),
            cfg.threads,
            cfg.wait
        ),
    }
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::default());
    let mut out = reporter(a.out.json);
    let stop = Arc::new(AtomicBool::new(false));
    // Before the server's threads start: Ctrl-C or a kill ends the run with a summary and the
    // NAPI settings put back.
    netsteer_sock::signal::stop_on_termination(stop.clone()).context("handling SIGINT/SIGTERM")?;
    let result = match (a.irq_suspend, &a.dev) {
        (Some(ns), Some(dev)) => {
            let backend = host
                .nic_backend()
                .map_err(|e| anyhow::anyhow!("--irq-suspend: {e}"))?;
            irq_suspend::around_run(backend.as_ref(), dev, ns, || {
                server.run(stop, clock, |m| out.emit(m))
            })
            .map_err(anyhow::Error::msg)?
        }
        _ => server.run(stop, clock, |m| out.emit(m)),
    };
    match result {
        Ok(summary) => {
            out.emit(&summary)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(fail(a.out.json, UDP_ECHO, Role::Server, e)),
    }
}

fn client(a: &ClientArgs) -> Result<ExitCode> {
    let targets = a
        .targets
        .iter()
        .map(|t| netsteer_bench::target::resolve(t, 4321).map_err(anyhow::Error::from))
        .collect::<Result<Vec<_>>>()?;
    let duration = match (a.duration, a.count) {
        (Some(d), _) => Some(d.get()),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let cfg = ClientConfig {
        targets,
        size: a.size,
        duration,
        count: a.count,
        interval: a.out.interval.get(),
        warmup: a.warmup.get(),
        wait: a.wait.wait,
        busy: a.wait.busy(),
        rate: a.rate,
        cpus: cpus(a.cpu.as_deref())?,
        src_port: a.src_port,
        flows: a.flows,
        timeout: a.timeout.get(),
        timestamp: a.timestamp,
        xdp: a.xdp.config(),
    };
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::default());
    let mut out = reporter(a.out.json);
    match run_client(&cfg, clock, |m| out.emit(m)) {
        Ok(summaries) => {
            for s in &summaries {
                out.emit(s)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            drop(out);
            Ok(fail(a.out.json, UDP_ECHO, Role::Client, e))
        }
    }
}
