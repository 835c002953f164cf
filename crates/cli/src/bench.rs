use crate::Host;
use crate::args::Seconds;
pub use crate::bench_args::*;
use anyhow::{Context, Result};
use netsteer_bench::report::{ErrorMessage, Role};
use netsteer_bench::report::{Format, Reporter};
use netsteer_bench::tcp;
use netsteer_bench::udp_echo::client::{ClientConfig, run_client};
use netsteer_bench::udp_echo::irq_suspend;
use netsteer_bench::udp_echo::limit::Limits;
use netsteer_bench::udp_echo::message::BENCH as UDP_ECHO;
use netsteer_bench::udp_echo::server::{Server, ServerConfig};
use netsteer_experiment::clock::{Clock, MonotonicClock};
use netsteer_host::CpuSet;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

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
        BenchCommand::Kv(a) => kv_client(a),
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
        src_port: a.src_port,
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

fn kv_client(a: &KvArgs) -> Result<ExitCode> {
    use netsteer_bench::kv;
    let port = match a.protocol {
        kv::Protocol::Memcache => 11211,
        kv::Protocol::Redis => 6379,
    };
    let cfg = kv::KvConfig {
        target: netsteer_bench::target::resolve(&a.target, port)?,
        protocol: a.protocol,
        rate: a.rate,
        connections: a.connections,
        duration: a.duration.get(),
        warmup: a.warmup.get(),
        keys: a.keys,
        value_size: a.value_size,
        set_every: a.set_every,
        timeout: a.timeout.get(),
    };
    let mut out = reporter(a.json);
    match kv::run_kv(&cfg) {
        Ok(s) => {
            out.emit(&s)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            drop(out);
            Ok(fail(a.json, kv::BENCH, Role::Client, e))
        }
    }
}
