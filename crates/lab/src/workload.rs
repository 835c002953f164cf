//! The workloads a scenario runs between its two hosts. netsteer's own benchmarks are called as
//! library functions on threads that entered the hosts' namespaces (setns), and return their
//! typed summaries; the real applications and the anchor tools (iperf3, nginx+wrk,
//! memcached+memcaslap, sockperf) run as processes inside the hosts, pinned with taskset.

use crate::scenario::{Tool, Variant, Wait, Workload};
use crate::{LabError, NsHost, Result};
use netsteer_bench::waiter::Busy;
use netsteer_experiment::clock::{Clock, MonotonicClock};
use netsteer_experiment::stats::LatencySummary;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use crate::pair::{CLIENT_ADDR, SERVER_ADDR};

/// What one run of a workload measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// The deciding measure, in the tool's unit (`Tool::unit`).
    pub value: f64,
    /// The 99th percentile round trip, where the tool reports one.
    pub p99_us: Option<f64>,
    /// Points of the round-trip CDF: (percentile 0-100, ns).
    pub latency_points: Vec<(f64, f64)>,
    /// Secondary measures by name (mapped share, CPU per MiB, timestamp split, ...).
    pub extra: BTreeMap<String, f64>,
}

/// Where a workload runs.
pub struct Place<'a> {
    pub client: &'a NsHost,
    pub server: &'a NsHost,
    pub client_cpus: Vec<u32>,
    pub server_cpus: Vec<u32>,
    pub duration: Duration,
    /// A directory of this run's own (application configs).
    pub scratch: &'a Path,
}

impl Place<'_> {
    fn cpu_list(v: &[u32]) -> String {
        v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    }

    fn server_ip() -> IpAddr {
        SERVER_ADDR.parse().expect("constant address")
    }
}

fn invalid(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Invalid(format!("{what}: {e}"))
}

/// The namespace file of a host this process can enter: netsteer's own benchmarks run
/// in-process, so they need a namespace host (see [`crate::remote`]).
fn namespace_of(host: &NsHost) -> Result<String> {
    host.netns_path().ok_or_else(|| {
        LabError::Invalid(format!(
            "{}: netsteer's benchmarks run in-process and need a namespace host",
            host.label()
        ))
    })
}

/// Runs `f` on a thread inside `host`'s network namespace, pinned to `cpus`. Sockets made
/// there belong to the host; threads it starts inherit the namespace.
fn in_host<T: Send>(
    host: &NsHost,
    cpus: &[u32],
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    let ns = namespace_of(host)?;
    let place = netsteer_sock::netns::Place {
        netns: Some(Path::new(&ns)),
        cpus,
        sysfs: false,
    };
    netsteer_sock::netns::on_thread(place, f).map_err(|source| LabError::Io {
        what: format!("a workload thread in {}", host.label()),
        source,
    })?
}

/// A server thread in the server host and a client thread in the client host: the server is
/// bound before the client starts, and stopped when the client is done.
fn client_server<S: Send, C: Send>(
    p: &Place<'_>,
    bind: impl FnOnce() -> Result<S> + Send,
    serve: impl FnOnce(S, Arc<AtomicBool>) -> Result<()> + Send,
    client: impl FnOnce() -> Result<C> + Send,
) -> Result<C> {
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let stop2 = stop.clone();
        let server = s.spawn(move || {
            in_host(p.server, &p.server_cpus, move || {
                let bound = match bind() {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = ready_tx.send(Err(LabError::Invalid(e.to_string())));
                        return Err(e);
                    }
                };
                let _ = ready_tx.send(Ok(()));
                serve(bound, stop2)
            })
        });
        let ready = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(LabError::Invalid("the server thread ended".into())));
        let out = ready.and_then(|()| in_host(p.client, &p.client_cpus, client));
        stop.store(true, Ordering::SeqCst);
        let served = server
            .join()
            .unwrap_or_else(|_| Err(LabError::Invalid("the server thread panicked".into())));
        let out = out?;
        served?;
        Ok(out)
    })
}

/// A process that is killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stdout_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Waits until something listens on `port` inside `host` (ss), for at most 5 s.
fn wait_listening(host: &NsHost, port: u16, udp: bool) -> Result<()> {
    let flags = if udp { "-Huln" } else { "-Htln" };
    for _ in 0..100 {
        if let Ok(o) = host.exec(&["ss", flags, &format!("sport = :{port}")])
            && !stdout_of(&o).trim().is_empty()
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(LabError::Invalid(format!(
        "no server listened on port {port} in {} within 5 s",
        host.label()
    )))
}

/// iperf3, wrk and memcaslap take whole seconds.
pub(crate) fn whole_seconds(d: Duration) -> String {
    (d.as_secs_f64().ceil() as u64).max(1).to_string()
}

/// Runs one workload in one variant.
pub fn run(p: &Place<'_>, w: &Workload, v: &Variant) -> Result<Measured> {
    match w.tool {
        Tool::NetsteerTcpStream => tcp_stream(p, w, v),
        Tool::NetsteerUdpEcho => udp_echo(p, w, v),
        Tool::NetsteerNetchannel => netchannel(p, w),
        Tool::Iperf3 => iperf3(p, w),
        Tool::NginxWrk => nginx_wrk(p, w),
        Tool::MemcachedMemcaslap => memcaslap(p, w),
        Tool::Sockperf => sockperf(p, w, v),
    }
}

fn tcp_stream(p: &Place<'_>, w: &Workload, v: &Variant) -> Result<Measured> {
    use netsteer_bench::tcp::server::{Server, ServerConfig};
    use netsteer_bench::tcp::stream::{StreamConfig, run_stream_client};
    let listen = SocketAddr::new(Place::server_ip(), 4322);
    let scfg = ServerConfig {
        listen,
        cpus: p.server_cpus.clone(),
        max_connections: 1024,
        hello_timeout: netsteer_bench::tcp::proto::HELLO_TIMEOUT,
        duration: None,
        max_memory: netsteer_bench::tcp::server::DEFAULT_MAX_MEMORY,
        flow_idle: netsteer_bench::tcp::server::FLOW_IDLE,
    };
    let ccfg = StreamConfig {
        target: listen,
        flows: w.flows,
        cpus: p.client_cpus.clone(),
        write_size: w.write_size.unwrap_or(131_072),
        read_size: None,
        duration: p.duration,
        interval: Duration::from_secs(1),
        nodelay: w.nodelay,
        congestion: None,
        mss: w.mss,
        zerocopy_send: w.zerocopy_send,
        zerocopy_recv: v.zerocopy_recv.unwrap_or(w.zerocopy_recv),
        verify: false,
        inject_corruption_at: None,
        timeout: Duration::from_secs(10),
        engine: netsteer_bench::tcp::Engine::Auto,
    };
    let s = client_server(
        p,
        || Server::bind(scfg).map_err(|e| invalid("tcp-stream server", e)),
        |server, stop| {
            server
                .run(&stop, |_| Ok(()))
                .map(|_| ())
                .map_err(|e| invalid("tcp-stream server", e))
        },
        || run_stream_client(&ccfg, |_| Ok(())).map_err(|e| invalid("tcp-stream client", e)),
    )?;
    let mut extra = BTreeMap::new();
    if let (Some(mapped), true) = (s.rx_mapped_bytes, s.bytes > 0) {
        extra.insert(
            "rx_mapped_pct".into(),
            mapped as f64 / s.bytes as f64 * 100.0,
        );
    }
    for (k, x) in [
        ("cpu_us_per_mib_client", s.cpu_us_per_mb.client),
        ("cpu_us_per_mib_server", s.cpu_us_per_mb.server),
        ("softirq_us_per_mib_client", s.softirq_us_per_mb.client),
        ("softirq_us_per_mib_server", s.softirq_us_per_mb.server),
        ("sleeps_per_mib_client", s.sleeps_per_mb.client),
        ("sleeps_per_mib_server", s.sleeps_per_mb.server),
    ] {
        // The summary's "MB" is the MiB of docs/bench-tcp.md (2^20 bytes).
        if let Some(x) = x {
            extra.insert(k.into(), x);
        }
    }
    extra.insert("retransmits".into(), s.retransmits as f64);
    Ok(Measured {
        value: s.bits_per_second,
        extra,
        ..Default::default()
    })
}

fn points(l: &LatencySummary) -> Vec<(f64, f64)> {
    vec![
        (0.0, l.min as f64),
        (50.0, l.p50 as f64),
        (90.0, l.p90 as f64),
        (99.0, l.p99 as f64),
        (99.9, l.p999 as f64),
        (100.0, l.max as f64),
    ]
}

fn udp_echo(p: &Place<'_>, w: &Workload, v: &Variant) -> Result<Measured> {
    use netsteer_bench::udp_echo::Wait as BWait;
    use netsteer_bench::udp_echo::client::{ClientConfig, run_client};
    use netsteer_bench::udp_echo::limit::Limits;
    use netsteer_bench::udp_echo::server::{Server, ServerConfig};
    let wait = match v.wait.unwrap_or(Wait::Block) {
        Wait::Block => BWait::Block,
        Wait::Spin => BWait::Spin,
        Wait::BusyPoll => BWait::BusyPoll,
    };
    let busy_poll_us = v.busy_poll_us.unwrap_or(50);
    let listen = SocketAddr::new(Place::server_ip(), 4321);
    let scfg = ServerConfig {
        listen,
        threads: 1,
        cpus: p.server_cpus.clone(),
        wait,
        busy: Busy {
            usecs: busy_poll_us,
            ..Busy::default()
        },
        interval: Duration::from_secs(1),
        duration: None,
        // The lab's own client, inside the lab's own namespaces: no reflection to limit.
        limits: Limits {
            per_source: None,
            global: None,
        },
        xdp: None,
    };
    let warmup = Duration::from_millis(500).min(p.duration / 4);
    let ccfg = ClientConfig {
        targets: vec![listen],
        size: w.size.unwrap_or(32) as usize,
        duration: Some(p.duration),
        count: None,
        interval: Duration::from_secs(1),
        warmup,
        wait,
        busy: Busy {
            usecs: busy_poll_us,
            ..Busy::default()
        },
        rate: None,
        cpus: p.client_cpus.clone(),
        src_port: None,
        flows: w.flows as usize,
        timeout: Duration::from_secs(1),
        timestamp: true,
        xdp: None,
    };
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::default());
    let client_clock = clock.clone();
    let mut s = client_server(
        p,
        || Server::bind(&scfg).map_err(|e| invalid("udp-echo server", e)),
        move |server, stop| {
            server
                .run(stop, clock, |_| Ok(()))
                .map(|_| ())
                .map_err(|e| invalid("udp-echo server", e))
        },
        || run_client(&ccfg, client_clock, |_| Ok(())).map_err(|e| invalid("udp-echo client", e)),
    )?;
    let s = s
        .pop()
        .ok_or_else(|| LabError::Invalid("udp-echo client: no summary".into()))?;
    let l = s.latency_ns.ok_or_else(|| {
        LabError::Invalid(format!(
            "udp-echo client: no echo came back ({} sent, {} lost)",
            s.sent, s.lost
        ))
    })?;
    let mut extra = BTreeMap::new();
    extra.insert("pps".into(), s.pps);
    extra.insert("lost".into(), s.lost as f64);
    if let Some(r) = s.rx_delivery_ns {
        extra.insert("rx_delivery_p50_ns".into(), r.p50 as f64);
    }
    if let Some(t) = s.tx_send_ns {
        extra.insert("tx_send_p50_ns".into(), t.p50 as f64);
    }
    if let Some(n) = s.napi_id {
        extra.insert("napi_id".into(), f64::from(n));
    }
    Ok(Measured {
        value: l.p50 as f64,
        p99_us: Some(l.p99 as f64 / 1e3),
        latency_points: points(&l),
        extra,
    })
}

fn netchannel(p: &Place<'_>, w: &Workload) -> Result<Measured> {
    use netsteer_bench::netchannel::message::Result as R;
    use netsteer_bench::netchannel::{Config, Experiment, run};
    let experiments: Vec<Experiment> = if w.experiments.is_empty() {
        vec![Experiment::E1, Experiment::E4]
    } else {
        w.experiments
            .iter()
            .map(|e| match e.as_str() {
                "E1" => Experiment::E1,
                "E2" => Experiment::E2,
                "E3" => Experiment::E3,
                _ => Experiment::E4,
            })
            .collect()
    };
    let cfg = Config {
        experiments,
        duration: p.duration,
        repeat: 1,
        client_netns: Some(PathBuf::from(namespace_of(p.client)?)),
        server_netns: Some(PathBuf::from(namespace_of(p.server)?)),
        server_ip: Place::server_ip(),
        sender_cpu: p.client_cpus.first().copied(),
        receiver_cpu: p.server_cpus.first().copied(),
        // SCHED_FIFO would change the machine's scheduling for every test beside the lab.
        latency_realtime: false,
        ..Config::default()
    };
    let mut m = Measured::default();
    run(&cfg, |s| {
        match &s.result {
            R::E1(e) => {
                let best = e.rows.iter().map(|r| r.bits_per_second).fold(0.0, f64::max);
                m.extra
                    .insert("e1_tcp_bits_per_second".into(), e.tcp_bits_per_second);
                m.extra.insert("e1_best_bits_per_second".into(), best);
                if e.tcp_bits_per_second > 0.0 {
                    m.extra
                        .insert("e1_best_over_tcp".into(), best / e.tcp_bits_per_second);
                }
                m.value = m.value.max(best);
            }
            R::E2(e) => {
                let best = e.rows.iter().map(|r| r.bits_per_second).fold(0.0, f64::max);
                m.extra.insert("e2_best_bits_per_second".into(), best);
                m.extra
                    .insert("e2_tcp_bits_per_second".into(), e.tcp_bits_per_second);
            }
            R::E3(e) => {
                for r in &e.rows {
                    m.extra
                        .insert(format!("e3_{}_p99_ns", r.config), r.latency_ns.p99 as f64);
                }
            }
            R::E4(e) => {
                m.extra.insert("e4_ratio_per_core".into(), e.ratio);
                m.extra.insert(
                    "e4_tcp_bits_per_second_per_core".into(),
                    e.tcp_bits_per_second_per_core,
                );
                m.extra.insert(
                    "e4_netchannel_bits_per_second_per_core".into(),
                    e.bits_per_second_per_core,
                );
            }
            R::Recovery(e) => {
                m.extra
                    .insert("recovery_after_over_before".into(), e.ratio_spread.median);
            }
        }
        Ok(())
    })
    .map_err(|source| LabError::Io {
        what: "netchannel experiments".into(),
        source,
    })?;
    Ok(m)
}

fn iperf3(p: &Place<'_>, w: &Workload) -> Result<Measured> {
    let scpus = Place::cpu_list(&p.server_cpus);
    let _server = Proc(p.server.spawn(
        Some(&scpus),
        "iperf3",
        &["-s", "-1", "-p", "5201", "-B", SERVER_ADDR],
    )?);
    wait_listening(p.server, 5201, false)?;
    let (ccpus, flows, write, dur) = (
        Place::cpu_list(&p.client_cpus),
        w.flows.to_string(),
        w.write_size.unwrap_or(131_072).to_string(),
        whole_seconds(p.duration),
    );
    let mut args = vec![
        "taskset",
        "-c",
        &ccpus,
        "iperf3",
        "-c",
        SERVER_ADDR,
        "-p",
        "5201",
        "-t",
        &dur,
        "-P",
        &flows,
        "-l",
        &write,
        "-J",
    ];
    if w.nodelay {
        args.push("-N");
    }
    let out = p.client.exec(&args)?;
    let v: serde_json::Value =
        serde_json::from_str(&stdout_of(&out)).map_err(|e| invalid("iperf3 -J", e))?;
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| LabError::Invalid("iperf3 -J: no end.sum_received".into()))?;
    let mut extra = BTreeMap::new();
    if let Some(r) = v["end"]["sum_sent"]["retransmits"].as_f64() {
        extra.insert("retransmits".into(), r);
    }
    Ok(Measured {
        value: bps,
        extra,
        ..Default::default()
    })
}

/// A minimal nginx: one worker, a 612-byte page (nginx's own default page size), no access
/// log, everything under `dir` (nothing of the host's nginx set-up is used or touched).
fn write_nginx_config(dir: &Path) -> Result<()> {
    let io = |what: &str| {
        let what = format!("{what} in {}", dir.display());
        move |source| LabError::Io { what, source }
    };
    std::fs::create_dir_all(dir.join("www")).map_err(io("creating www/"))?;
    std::fs::write(dir.join("www/index.html"), "x".repeat(612)).map_err(io("index.html"))?;
    let d = dir.display();
    let conf = format!(
        "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 4096; }}\n\
         http {{ access_log off; client_body_temp_path {d}/tmp; \
         server {{ listen {SERVER_ADDR}:8080 reuseport; root {d}/www; }} }}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).map_err(io("nginx.conf"))
}

/// Requests/s and the 99th percentile (µs) from `wrk --latency`.
pub(crate) fn parse_wrk(out: &str) -> Result<(f64, Option<f64>)> {
    let rps = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| LabError::Invalid(format!("wrk: no Requests/sec in {out:?}")))?;
    let p99 = out.lines().find_map(|l| {
        let v = l.trim().strip_prefix("99%")?.trim();
        let (num, mult) = if let Some(n) = v.strip_suffix("us") {
            (n, 1.0)
        } else if let Some(n) = v.strip_suffix("ms") {
            (n, 1e3)
        } else {
            (v.strip_suffix('s')?, 1e6)
        };
        num.parse::<f64>().ok().map(|x| x * mult)
    });
    Ok((rps, p99))
}

fn nginx_wrk(p: &Place<'_>, w: &Workload) -> Result<Measured> {
    let dir = p.scratch.join("nginx");
    write_nginx_config(&dir)?;
    let (prefix, conf) = (
        dir.display().to_string(),
        dir.join("nginx.conf").display().to_string(),
    );
    let scpus = Place::cpu_list(&p.server_cpus);
    let _server = Proc(
        p.server
            .spawn(Some(&scpus), "nginx", &["-p", &prefix, "-c", &conf])?,
    );
    wait_listening(p.server, 8080, false)?;
    let (ccpus, conns, dur) = (
        Place::cpu_list(&p.client_cpus),
        w.flows.to_string(),
        format!("{}s", whole_seconds(p.duration)),
    );
    let url = format!("http://{SERVER_ADDR}:8080/");
    let out = p.client.exec(&[
        "taskset",
        "-c",
        &ccpus,
        "wrk",
        "-t",
        "1",
        "-c",
        &conns,
        "-d",
        &dur,
        "--latency",
        &url,
    ])?;
    let (value, p99_us) = parse_wrk(&stdout_of(&out))?;
    Ok(Measured {
        value,
        p99_us,
        ..Default::default()
    })
}

/// Operations per second from memcaslap's closing `TPS:` line.
pub(crate) fn parse_memcaslap(out: &str) -> Result<f64> {
    out.lines()
        .rev()
        .find_map(|l| {
            let rest = &l[l.find("TPS:")? + 4..];
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| LabError::Invalid(format!("memcaslap: no TPS in {out:?}")))
}

fn memcaslap(p: &Place<'_>, w: &Workload) -> Result<Measured> {
    let scpus = Place::cpu_list(&p.server_cpus);
    let _server = Proc(p.server.spawn(
        Some(&scpus),
        "memcached",
        &[
            "-u",
            "root",
            "-l",
            SERVER_ADDR,
            "-p",
            "11211",
            "-t",
            "1",
            "-U",
            "0",
        ],
    )?);
    wait_listening(p.server, 11211, false)?;
    let (ccpus, conns, dur) = (
        Place::cpu_list(&p.client_cpus),
        w.flows.to_string(),
        format!("{}s", whole_seconds(p.duration)),
    );
    let out = p.client.exec(&[
        "taskset",
        "-c",
        &ccpus,
        "memcaslap",
        "-s",
        &format!("{SERVER_ADDR}:11211"),
        "-t",
        &dur,
        "-T",
        "1",
        "-c",
        &conns,
    ])?;
    Ok(Measured {
        value: parse_memcaslap(&stdout_of(&out))?,
        ..Default::default()
    })
}

/// sockperf's closing percentiles (`---> percentile 99.000 =   12.345`, µs) and `<MIN>` /
/// `<MAX>` lines, as (percentile, ns).
pub(crate) fn parse_sockperf(out: &str) -> Result<Vec<(f64, f64)>> {
    let mut pts = Vec::new();
    for l in out.lines() {
        let Some(i) = l.find("--->") else { continue };
        let rest = l[i + 4..].trim();
        let (pct, val) = if let Some(r) = rest.strip_prefix("percentile") {
            let Some((p, v)) = r.split_once('=') else {
                continue;
            };
            (p.trim().parse::<f64>().ok(), v.trim())
        } else if let Some(v) = rest.strip_prefix("<MAX> observation =") {
            (Some(100.0), v.trim())
        } else if let Some(v) = rest.strip_prefix("<MIN> observation =") {
            (Some(0.0), v.trim())
        } else {
            continue;
        };
        if let (Some(p), Ok(us)) = (pct, val.parse::<f64>()) {
            pts.push((p, us * 1e3));
        }
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    if !pts.iter().any(|(p, _)| *p == 50.0) {
        return Err(LabError::Invalid(format!(
            "sockperf: no percentiles in {:?}",
            out.lines().rev().take(5).collect::<Vec<_>>()
        )));
    }
    Ok(pts)
}

fn sockperf(p: &Place<'_>, w: &Workload, v: &Variant) -> Result<Measured> {
    let wait = v.wait.unwrap_or(Wait::Block);
    let lls = v.busy_poll_us.unwrap_or(50).to_string();
    let mode: Vec<&str> = match wait {
        Wait::Block => vec![],
        Wait::Spin => vec!["--nonblocked"],
        Wait::BusyPoll => vec!["--lls", &lls],
    };
    let scpus = Place::cpu_list(&p.server_cpus);
    let mut sargs = vec!["sr", "-i", SERVER_ADDR, "-p", "11111"];
    sargs.extend(&mode);
    let _server = Proc(p.server.spawn(Some(&scpus), "sockperf", &sargs)?);
    wait_listening(p.server, 11111, true)?;
    let (ccpus, size, dur) = (
        Place::cpu_list(&p.client_cpus),
        w.size.unwrap_or(32).to_string(),
        whole_seconds(p.duration),
    );
    let mut args = vec![
        "taskset",
        "-c",
        &ccpus,
        "sockperf",
        "pp",
        "-i",
        SERVER_ADDR,
        "-p",
        "11111",
        "-m",
        &size,
        "-t",
        &dur,
        // Round trips, as netsteer reports them (sockperf's default is half of one).
        "--full-rtt",
    ];
    args.extend(&mode);
    let out = p.client.exec(&args)?;
    let pts = parse_sockperf(&stdout_of(&out))?;
    let at = |q: f64| pts.iter().find(|(p, _)| *p == q).map(|(_, v)| *v);
    Ok(Measured {
        value: at(50.0).unwrap_or(0.0),
        p99_us: at(99.0).map(|v| v / 1e3),
        latency_points: pts,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_anchor_tools_outputs_are_read() {
        let wrk = "  Latency Distribution\n     50%  291.00us\n     99%    1.20ms\n  105827 requests in 2.00s, 24.22MB read\nRequests/sec:  52875.72\n";
        assert_eq!(parse_wrk(wrk).unwrap(), (52875.72, Some(1200.0)));
        assert_eq!(
            parse_wrk("Requests/sec: 10\n     99%  2.5s\n").unwrap().1,
            Some(2.5e6)
        );
        assert!(parse_wrk("garbage").is_err());
        let slap = "get_misses: 0\n\nRun time: 2.0s Ops: 179272 TPS: 89620 Net_rate: 100.3M/s\n";
        assert_eq!(parse_memcaslap(slap).unwrap(), 89620.0);
        assert!(parse_memcaslap("nothing").is_err());
        assert_eq!(whole_seconds(Duration::from_millis(400)), "1");
        assert_eq!(whole_seconds(Duration::from_millis(2500)), "3");
        let sp = "sockperf: ====> avg-rtt=21.334 (std-dev=3.2)\n\
                  sockperf: ---> <MAX> observation =  120.443\n\
                  sockperf: ---> percentile 99.999 =  100.100\n\
                  sockperf: ---> percentile 99.000 =   30.500\n\
                  sockperf: ---> percentile 50.000 =   20.250\n\
                  sockperf: ---> <MIN> observation =   15.000\n";
        let pts = parse_sockperf(sp).unwrap();
        assert_eq!(pts.first(), Some(&(0.0, 15_000.0)));
        assert_eq!(pts.last(), Some(&(100.0, 120_443.0)));
        assert!(pts.contains(&(50.0, 20_250.0)));
        assert!(parse_sockperf("sockperf: no data").is_err());
    }
}
