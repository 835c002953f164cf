//! The flags of `netsteer bench` (clap). Flags live in the binary (docs/architecture.md): the
//! engines in `netsteer-bench` take configs and never see clap.

use crate::args::Seconds;
use clap::builder::RangedU64ValueParser;
use clap::{Args, Subcommand};
use netsteer_bench::netchannel::Experiment;
use netsteer_bench::tcp;
use netsteer_bench::udp_echo::Wait;
use netsteer_bench::udp_echo::xdp::XdpConfig;
use netsteer_bench::waiter::Busy;
use netsteer_sock::xdp as x;

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
    /// memcached or Redis at a fixed request rate: GETs (and a share of SETs) on a schedule,
    /// each timed from when it was due; the cache workload `tune search` prices.
    Kv(KvArgs),
}

#[derive(Args, Debug)]
pub struct KvArgs {
    /// The server, `HOST:PORT` (11211 for memcache, 6379 for redis by default).
    #[arg(value_name = "HOST:PORT")]
    pub target: String,
    /// The server's protocol.
    #[arg(long, value_enum, default_value_t = netsteer_bench::kv::Protocol::Memcache)]
    pub protocol: netsteer_bench::kv::Protocol,
    /// Requests per second, all connections together.
    #[arg(long, value_name = "PER_S", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub rate: u32,
    /// Connections, one thread each, one request outstanding on each (1 to 1024).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub connections: u32,
    /// Seconds to measure after the warm-up.
    #[arg(long, default_value = "10", value_name = "S")]
    pub duration: Seconds,
    /// Seconds of requests before measuring (not reported).
    #[arg(long, default_value = "0", value_name = "S")]
    pub warmup: Seconds,
    /// Keys, each set once before the run.
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub keys: u32,
    /// Bytes per value (1 B to 1 MiB).
    #[arg(long, default_value_t = 64, value_name = "BYTES", value_parser = RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    pub value_size: usize,
    /// One request in this many is a SET (0: only GETs; 10 is memcaslap's 9:1).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub set_every: u32,
    /// Seconds a reply may take before the run ends with an error.
    #[arg(long, default_value = "5", value_name = "S")]
    pub timeout: Seconds,
    /// JSON Lines, one message per line (docs/json.md).
    #[arg(long)]
    pub json: bool,
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
    pub experiment: Vec<Experiment>,
    /// Seconds per point.
    #[arg(
        long,
        default_value = "3",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub duration: Seconds,
    /// Repeats per point (min/median/max reported).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=100))]
    pub repeat: usize,
    /// Channel counts for E1 and E2 (each 1 to 64).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2",
        value_name = "LIST",
        value_parser = clap::value_parser!(u16).range(1..=64)
    )]
    pub channels: Vec<u16>,
    /// Receive copy-worker counts for E1 (each 0 to 64).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,1,2",
        value_name = "LIST",
        value_parser = RangedU64ValueParser::<usize>::new().range(0..=64)
    )]
    pub copy_workers: Vec<usize>,
    /// Bulk apps beside the latency app in E3 (1 to 64).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub bulk_apps: usize,
    /// Network namespace (name under /run/netns, or a path) of the client "host".
    #[arg(long, value_name = "NS")]
    pub client_netns: Option<String>,
    /// Network namespace of the server "host".
    #[arg(long, value_name = "NS")]
    pub server_netns: Option<String>,
    /// The server's address (its veth address when namespaces are used).
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    pub server_ip: std::net::IpAddr,
    /// CPU of the sending app thread.
    #[arg(long, value_name = "CPU")]
    pub sender_cpu: Option<u32>,
    /// CPU of the receiving app thread. With neither CPU given, the sender runs on the first
    /// CPU this process may use and the receiver on the second.
    #[arg(long, value_name = "CPU")]
    pub receiver_cpu: Option<u32>,
    /// Leave the app threads to the scheduler when no CPU is given.
    #[arg(long, conflicts_with_all = ["sender_cpu", "receiver_cpu"])]
    pub no_pin: bool,
    /// Keep the latency channels' I/O threads at normal priority in E3 (default: SCHED_FIFO
    /// when allowed).
    #[arg(long)]
    pub no_realtime: bool,
    /// E1 and E2 also run one MPTCP connection (IPPROTO_MPTCP) beside plain TCP. Its subflows
    /// come from the hosts' path managers (`ip mptcp endpoint add ADDR subflow`, `ip mptcp
    /// limits`); the row shows how many it got.
    #[arg(long)]
    pub mptcp: bool,
    /// JSON Lines, one message per line (docs/json.md).
    #[arg(long)]
    pub json: bool,
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
    pub listen: String,
    /// Pin data threads round-robin over these CPUs.
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// Connections served at once; more are told the server is full and closed.
    #[arg(long, default_value_t = 1024, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub max_connections: usize,
    /// MiB of buffers all running tests may take together; a client asking for more (sizes
    /// times flows) is rejected with the figures.
    #[arg(long, default_value_t = tcp::server::DEFAULT_MAX_MEMORY >> 20, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_memory: u64,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub duration: Option<Seconds>,
    /// JSON Lines, one message per line (docs/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct StreamArgs {
    /// The server, `HOST:PORT` (port 4322 by default).
    #[arg(value_name = "HOST:PORT")]
    pub target: String,
    /// Flows (connections), 1 to 256.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub flows: u32,
    /// Pin flow i to the i-th CPU of this list.
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// Bytes per write (16 reproduces seed 003's tiny writes; iperf3's default is 128 KiB).
    #[arg(long, default_value_t = 131_072, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=64 << 20))]
    pub write_size: u32,
    /// Bytes per read on the server (default: 64 KiB to 1 MiB, with a low-water mark for
    /// small writes). `--read-size 16` reads as `iperf3 -l 16` does, for seed 003's case
    /// compared on the same receive workload.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub read_size: Option<u32>,
    /// Seconds to send.
    #[arg(
        long,
        default_value = "10",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub duration: Seconds,
    /// TCP_NODELAY on the data connections (iperf3 -N).
    #[arg(long)]
    pub nodelay: bool,
    /// Congestion control algorithm (TCP_CONGESTION).
    #[arg(long, value_name = "ALG")]
    pub congestion: Option<String>,
    /// Send with MSG_ZEROCOPY (completions read from the error queue).
    #[arg(long)]
    pub zerocopy_send: bool,
    /// The server receives with TCP_ZEROCOPY_RECEIVE + mmap (with a copy buffer for tails).
    #[arg(long)]
    pub zerocopy_recv: bool,
    /// TCP_MAXSEG for the data connections (4108 = one page of payload per segment).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(88..=65535))]
    pub mss: Option<u32>,
    /// The server checks every byte against the sender's pattern; a mismatch exits 1.
    #[arg(long)]
    pub verify: bool,
    /// How each side drives its flows; the server decides `auto` for its own CPUs and path.
    #[arg(long, value_enum, default_value_t = tcp::Engine::Auto)]
    pub engine: tcp::Engine,
    /// Test hook: corrupt the byte at this stream offset of flow 0 before sending it.
    #[arg(long, hide = true, value_name = "OFFSET")]
    pub inject_corruption: Option<u64>,
    /// Seconds to wait for the server (connect, results).
    #[arg(
        long,
        default_value = "5",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub timeout: Seconds,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct RrArgs {
    /// The server, `HOST:PORT` (port 4322 by default).
    #[arg(value_name = "HOST:PORT")]
    pub target: String,
    /// Bytes per request (1 B to 16 MiB).
    #[arg(long, default_value_t = 4096, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=16 << 20))]
    pub request_size: u32,
    /// Bytes per response (1 B to 16 MiB).
    #[arg(long, default_value_t = 4096, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=16 << 20))]
    pub response_size: u32,
    /// Flows (connections), one thread each (1 to 256).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub flows: u32,
    /// Requests each flow keeps outstanding (1 to 1024).
    #[arg(long, default_value_t = 1, value_name = "DEPTH", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub pipeline: u32,
    /// Pin flow i to the i-th CPU of this list.
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// How both sides wait (the server follows the client's choice).
    #[command(flatten)]
    pub wait: WaitArgs,
    /// Seconds to measure after the warm-up.
    #[arg(
        long,
        default_value = "10",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub duration: Seconds,
    /// Seconds of round trips before measuring (not reported).
    #[arg(
        long,
        default_value = "0",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub warmup: Seconds,
    /// Congestion control algorithm (TCP_CONGESTION).
    #[arg(long, value_name = "ALG")]
    pub congestion: Option<String>,
    /// TCP_MAXSEG for the data connections.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(88..=65535))]
    pub mss: Option<u32>,
    /// Fixed source port of the first data connection (the others count up): the same flow
    /// hash, so the same RSS bucket, run after run.
    #[arg(long, value_name = "PORT")]
    pub src_port: Option<u16>,
    /// Seconds a response may be late before the run ends with an error.
    #[arg(
        long,
        default_value = "5",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub timeout: Seconds,
    #[command(flatten)]
    pub out: Output,
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
    pub interval: Seconds,
    /// JSON Lines, one message per line (docs/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Address to listen on. Loopback by default: give a routable address (or `0.0.0.0:4321`,
    /// `[::]:4321` for IPv6 and IPv4) to serve other hosts; answers are then rate-limited.
    #[arg(long, default_value = "127.0.0.1:4321", value_name = "ADDR:PORT")]
    pub listen: String,
    /// Threads, one SO_REUSEPORT socket each (1 to 1024).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: usize,
    /// Pin thread i to the i-th CPU of this list (`1`, `2-3`, `0,4`).
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// How each thread waits for the next datagram.
    #[command(flatten)]
    pub wait: WaitArgs,
    /// IRQ suspension for the run (6.13+): set irq-suspend-timeout to NS, defer-hard-irqs to 2
    /// and gro-flush-timeout to 200 µs on every NAPI of `--dev`, and restore them after
    /// (also on Ctrl-C or SIGTERM). Needs `--wait epoll-busy --prefer-busy-poll`, the only
    /// mode in which suspension acts.
    #[arg(long, value_name = "NS", requires = "dev", value_parser = clap::value_parser!(u64).range(1..=10_000_000_000))]
    pub irq_suspend: Option<u64>,
    /// The device whose NAPIs `--irq-suspend` sets (the one the clients' packets arrive on).
    #[arg(long, value_name = "IF")]
    pub dev: Option<String>,
    /// Answers per second to one source address; 0 = unlimited. Default: unlimited on a
    /// loopback address, 10000 on any other (an echo server must not be a reflector).
    #[arg(long, value_name = "PPS")]
    pub max_pps_per_source: Option<u32>,
    /// Answers per second in all; 0 = unlimited. Default: unlimited on a loopback address,
    /// 100000 on any other.
    #[arg(long, value_name = "PPS")]
    pub max_pps: Option<u32>,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub duration: Option<Seconds>,
    #[command(flatten)]
    pub xdp: XdpArgs,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Servers to ping, each `HOST:PORT` (`[::1]:4321`); the port defaults to 4321.
    #[arg(required = true, value_name = "HOST:PORT")]
    pub targets: Vec<String>,
    /// Datagram size in bytes (28 to 65507: sequence, send time and checksum ride in it).
    #[arg(long, default_value_t = 32, value_name = "BYTES", value_parser = RangedU64ValueParser::<usize>::new().range(28..=65507))]
    pub size: usize,
    /// Seconds to measure after the warm-up (default 10 unless --count is given).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub duration: Option<Seconds>,
    /// Round trips per flow instead of a duration.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Seconds of round trips before measuring (not reported).
    #[arg(
        long,
        default_value = "0",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub warmup: Seconds,
    /// How each flow waits for its echo.
    #[command(flatten)]
    pub wait: WaitArgs,
    /// Round trips per second per flow (default: as fast as the echoes come back); a paced
    /// client shows what a wait mode costs the server at a fixed load.
    #[arg(long, value_name = "PER_S", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub rate: Option<u32>,
    /// Pin flow i to the i-th CPU of this list.
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// Fixed source port of the first flow (the others count up), as seed 000 does.
    #[arg(long, value_name = "PORT")]
    pub src_port: Option<u16>,
    /// Flows (sockets and threads) per target, each with its own source port (1 to 1024).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub flows: usize,
    /// Seconds to wait for each echo before counting it lost; three in a row end the run.
    #[arg(
        long,
        default_value = "1",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub timeout: Seconds,
    /// SO_TIMESTAMPING: split each round trip into send-side and kernel-delivery time.
    #[arg(long)]
    pub timestamp: bool,
    #[command(flatten)]
    pub xdp: XdpArgs,
    #[command(flatten)]
    pub out: Output,
}

/// The wait flags (`--wait`, `--busy-poll`, ...), one group for every benchmark that waits.
/// How a benchmark thread waits for data, shared by udp-echo and tcp-rr.
#[derive(clap::Args, Debug, Clone)]
pub struct WaitArgs {
    /// block: sleep in the receive; spin: non-blocking receives in a loop; busy-poll:
    /// SO_BUSY_POLL; epoll: sleep in epoll_wait; epoll-busy: epoll_wait busy-polling per
    /// context (EPIOCSPARAMS, 6.9+).
    #[arg(long, value_enum, default_value = "block")]
    pub wait: Wait,
    /// Busy-poll µs for `--wait busy-poll` and `epoll-busy` (up to 1 s).
    #[arg(long, default_value_t = 50, value_name = "USEC", value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub busy_poll: u32,
    /// Packets per busy-poll round (SO_BUSY_POLL_BUDGET / the epoll context's budget; 0: the
    /// kernel's 8; above 64 needs CAP_NET_ADMIN).
    #[arg(long, default_value_t = 0, value_name = "PACKETS")]
    pub busy_poll_budget: u16,
    /// Prefer busy polling (SO_PREFER_BUSY_POLL / the epoll context's prefer_busy_poll): the
    /// device's interrupts stay deferred while the application polls (with defer-hard-irqs).
    #[arg(long)]
    pub prefer_busy_poll: bool,
}

impl WaitArgs {
    pub fn busy(&self) -> Busy {
        Busy {
            usecs: self.busy_poll,
            budget: self.busy_poll_budget,
            prefer: self.prefer_busy_poll,
        }
    }
}

/// The AF_XDP flags, shared by the echo server and client.
#[derive(clap::Args, Debug, Clone)]
pub struct XdpArgs {
    /// Send and receive through AF_XDP sockets on IF (kernel bypass; root only): an XDP
    /// program takes IPv4/UDP datagrams to this side's port and passes everything else to the
    /// kernel. The server serves every rx queue (or QUEUE); the client one queue (QUEUE, else
    /// 0). The program is detached when the process ends, also when it is killed.
    #[arg(long, value_name = "IF[:QUEUE]", value_parser = parse_xdp)]
    pub xdp: Option<XdpConfig>,
    /// Where the XDP program runs (default: native, else generic).
    #[arg(long, value_enum, requires = "xdp")]
    pub xdp_attach: Option<x::AttachMode>,
    /// copy (the kernel copies into the UMEM, every driver) or zero-copy (the driver uses
    /// the UMEM; AF_XDP zero-copy drivers only). Default: zero-copy where offered, else copy.
    #[arg(long, value_name = "MODE", value_parser = ["copy", "zero-copy"], requires = "xdp")]
    pub xdp_bind: Option<String>,
    /// Attach even to the interface that carries the default route (the host's own traffic).
    #[arg(long, requires = "xdp")]
    pub xdp_allow_default_route: bool,
}

fn parse_xdp(s: &str) -> Result<XdpConfig, String> {
    XdpConfig::parse(s)
}

impl XdpArgs {
    pub fn config(&self) -> Option<XdpConfig> {
        let mut c = self.xdp.clone()?;
        c.mode = self.xdp_attach;
        c.zerocopy = self.xdp_bind.as_deref().map(|b| b == "zero-copy");
        c.allow_default_route = self.xdp_allow_default_route;
        Some(c)
    }
}
