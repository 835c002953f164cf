//! Seed 000's top rung: `netsteer lane` for the echo server in guest b, against no lane, under
//! the same bulk neighbour, runs alternated (without, with, without, ...), judged by the
//! three-way verdict on the latency flow's p99. Every readback is the guest's own: the lane
//! NAPI's settings over netdev netlink (`netsteer show`), per-queue packets from the driver's
//! counters (`ethtool -S`), interrupts from `/proc/interrupts`.
//!
//! The lane takes rx-[`RESERVED_QUEUE`] and CPU 1. The emulated NICs have no n-tuple filters,
//! so the latency flow's RSS bucket is found first by the ladder's bisection (UDP hashed on
//! ports) and given to the lane as `--rss-bucket`. The mode is `suspend` on kernels with IRQ
//! suspension (6.13+, the server busy-polling through an epoll context with prefer-busy-poll)
//! and `busy-poll` before (SO_BUSY_POLL with SO_PREFER_BUSY_POLL).
//!
//! The service is the UDP echo server or, with [`Service::Tcp`], a TCP request/response
//! server (`bench tcp-rr`, 64-byte requests and responses) on [`TCP_PORT`], its one data
//! connection from a fixed source port so that its bucket is found the same way; the bulk
//! neighbour is the same 16 UDP flows (to an echo server on CPU 0 then).
//!
//! Under TCG the microseconds are not bare metal's: the verdict and the ratio of the medians
//! are what the run shows, and where each flow's packets went.

use super::ladder::{
    self, BULK_FLOWS, BULK_PORT, LATENCY_PORT, Listener, RESERVED_QUEUE, SERVER_PORT, T, apply,
    delta, irq_counts, last_json, latency_bucket, latency_bucket_of, latency_run, rollback_one,
    rx_by_queue, stop_server, table_len, wait_listening, wait_port,
};
use super::{Guest, VM_B_ADDR, VmPair};
use crate::{LabError, Result};
use netsteer_bench::tcp::message::RrSummary;
use netsteer_bench::udp_echo::message::ClientSummary;
use netsteer_experiment::experiment::{Comparison, compare};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The lane's state directory in guest b (apart from the ladder's tune state).
const LANE_STATE: &str = "/tmp/netsteer-lane";
const STATE: &str = "/tmp/netsteer-lane-tune";
/// The lane's CPU in guest b (the echo server is pinned there too).
pub const LANE_CPU: u32 = 1;

/// The TCP service's port in guest b (the UDP echo server keeps [`SERVER_PORT`]).
pub const TCP_PORT: u16 = 4322;
/// Seconds each TCP run measures (after half a second of warm-up).
const TCP_SECONDS: u32 = 3;

/// The latency-critical service the lane is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// `bench udp-echo server` on [`SERVER_PORT`]: `--count` round trips a run.
    #[default]
    Udp,
    /// `bench tcp-rr server` on [`TCP_PORT`]: one connection, 64-byte requests and responses,
    /// for a few seconds a run.
    Tcp,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::Udp => "udp",
            Service::Tcp => "tcp",
        }
    }

    fn port(self) -> u16 {
        match self {
            Service::Udp => SERVER_PORT,
            Service::Tcp => TCP_PORT,
        }
    }
}

impl std::str::FromStr for Service {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Service, String> {
        match s {
            "udp" => Ok(Service::Udp),
            "tcp" => Ok(Service::Tcp),
            _ => Err(format!("{s:?}: udp or tcp")),
        }
    }
}

/// One run: the latency flow's round trips while the bulk flows run beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaneRun {
    #[serde(rename = "type")]
    pub kind: String,
    /// With the lane applied.
    pub lane: bool,
    #[serde(default)]
    pub service: Service,
    pub repeat: u32,
    /// Requests sent and answered (for TCP: the transactions, both).
    pub sent: u64,
    pub received: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    /// Packets the server's driver counted per rx queue during the run (`ethtool -S`).
    pub rx_packets: BTreeMap<u32, u64>,
    /// Receive interrupts per rx queue during the run (`/proc/interrupts`).
    pub rx_irqs: BTreeMap<u32, u64>,
    /// The icount shift when the run was in virtual time (the twin): its ns are the guest's
    /// virtual ns, every vCPU's instructions counted on one clock. None: the host's clock.
    #[serde(default)]
    pub virtual_time: Option<u32>,
}

/// The whole experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaneSummary {
    #[serde(rename = "type")]
    pub kind: String,
    pub kernel: String,
    pub nic: String,
    #[serde(default)]
    pub service: Service,
    pub mode: String,
    /// The latency flow's RSS bucket (the bisection's answer).
    pub bucket: u32,
    /// What `lane apply` changed, and its notes.
    pub applied: Vec<String>,
    /// The lane NAPI's settings as netdev netlink reads them back with the lane applied:
    /// `defer-hard-irqs`, `gro-flush-timeout`, `irq-suspend-timeout` (absent: not reported).
    pub napi: BTreeMap<String, u64>,
    /// A burst of the bulk flows alone with the lane applied: packets on the lane's queue and
    /// on every queue (a bulk flow whose hash falls in the lane's bucket shares it: 1 in 128).
    pub bulk_on_lane_queue: u64,
    pub bulk_total: u64,
    /// The p99s without the lane (before) against with it (after).
    pub p99: Option<Comparison>,
    /// The lane queue's receive interrupts per answered request, without against with the
    /// lane: a count, which emulation slows down but does not blur, so it can be judged where
    /// TCG's milliseconds cannot.
    #[serde(default)]
    pub lane_queue_irqs_per_request: Option<Comparison>,
    /// The lane queue's receive interrupts per packet it received, without against with the
    /// lane: interrupt mitigation (suspension, deferral) alone, whoever's packets they are.
    /// The per-request figure above also falls when the lane moves neighbours off the queue.
    #[serde(default)]
    pub lane_queue_irqs_per_packet: Option<Comparison>,
    /// As [`LaneRun::virtual_time`].
    #[serde(default)]
    pub virtual_time: Option<u32>,
    /// `lane remove`'s status: `restored` when every value is back.
    pub removed: String,
}

/// Packets received per queue since boot, from the driver's own counters (`ethtool -S eth0`):
/// `rx_queue_N_packets` (igb; virtio-net before 6.10) or `rxN_packets`; where the driver names
/// them otherwise (virtio-net on 6.12+), the kernel's per-queue counters over netdev netlink
/// (`qstats-get`, read by `netsteer show`).
pub fn rx_packets(g: &mut Guest, bin: &str) -> Result<BTreeMap<u32, u64>> {
    let out = g.host_ok(&["ethtool", "-S", "eth0"], T)?;
    let mut m = ethtool_rx_packets(&out);
    if !m.is_empty() {
        return Ok(m);
    }
    let out = g.host_ok(&[bin, "show", "--json", "--dev", "eth0"], T)?;
    let v: netsteer_host::view::HostView =
        serde_json::from_str(&out).map_err(|e| LabError::Invalid(format!("show output: {e}")))?;
    let stats = v
        .nic("eth0")
        .and_then(|n| n.settings.as_ref())
        .and_then(|s| s.netdev().ok())
        .map(|nd| nd.qstats.clone())
        .unwrap_or_default();
    for q in stats {
        if q.kind == netsteer_host::netdev::QueueType::Rx
            && let Some(p) = q.packets
        {
            m.insert(q.id, p);
        }
    }
    Ok(m)
}

/// The per-queue receive packet counters in `ethtool -S` output, under the names the lab's
/// drivers give them: `rx_queue_N_packets` (igb; virtio-net before 6.10) or `rxN_packets`
/// (virtio-net since its per-queue statistics are named by `virtnet_get_strings`'s "rx%u_%s").
/// Empty when the driver names them otherwise (virtio-net on 6.12+).
pub fn ethtool_rx_packets(ethtool_s: &str) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for l in ethtool_s.lines() {
        let Some((k, v)) = l.trim().split_once(':') else {
            continue;
        };
        let q = k
            .strip_prefix("rx_queue_")
            .or_else(|| k.strip_prefix("rx"))
            .and_then(|r| r.strip_suffix("_packets"))
            .and_then(|n| n.parse::<u32>().ok());
        if let (Some(q), Ok(n)) = (q, v.trim().parse::<u64>()) {
            m.insert(q, n);
        }
    }
    m
}

fn since(before: &BTreeMap<u32, u64>, after: &BTreeMap<u32, u64>) -> BTreeMap<u32, u64> {
    after
        .iter()
        .map(|(q, n)| (*q, n.saturating_sub(before.get(q).copied().unwrap_or(0))))
        .collect()
}

/// The mode for the guest's kernel and the server's wait flags that go with it. The server
/// busy-polls for 20 ms before it sleeps: under TCG a round trip takes milliseconds, and a
/// poller that sleeps between two requests lets the queue's IRQ back on (napi.rst: suspension
/// holds only while the poller finds work); on bare metal 50 µs would do.
fn mode_for(release: &str) -> (&'static str, &'static [&'static str]) {
    let v = netsteer_steering::tune::kernel_version(release);
    if v.is_some_and(|v| v >= netsteer_steering::tune::NAPI_SET_SINCE) {
        (
            "suspend",
            &[
                "--wait",
                "epoll-busy",
                "--busy-poll",
                "20000",
                "--prefer-busy-poll",
            ],
        )
    } else {
        (
            "busy-poll",
            &[
                "--wait",
                "busy-poll",
                "--busy-poll",
                "20000",
                "--prefer-busy-poll",
            ],
        )
    }
}

fn start_server(g: &mut Guest, bin: &str, wait: &[&str]) -> Result<()> {
    start_echo(g, bin, LANE_CPU, wait)
}

fn start_echo(g: &mut Guest, bin: &str, cpu: u32, wait: &[&str]) -> Result<()> {
    let server = format!("{VM_B_ADDR}:{SERVER_PORT}");
    g.sh(
        &format!(
            "chroot /host {bin} bench udp-echo server --listen {server} --cpu {cpu} {} --max-pps-per-source 0 --max-pps 0 --duration 3600 > /x/echo-server.log 2>&1 &",
            wait.join(" ")
        ),
        T,
    )?;
    wait_port(g, true, "start")
}

/// The TCP service in guest b.
const RR: Listener = Listener {
    ss: "-Hltn",
    port: TCP_PORT,
    log: "/x/rr-server.log",
    name: "the tcp-rr server",
};

/// The TCP service on the lane's CPU (its wait follows each client's).
fn start_tcp_server(g: &mut Guest, bin: &str) -> Result<()> {
    let server = format!("{VM_B_ADDR}:{TCP_PORT}");
    g.sh(
        &format!(
            "chroot /host {bin} bench tcp-rr server --listen {server} --cpu {LANE_CPU} > {} 2>&1 &",
            RR.log
        ),
        T,
    )?;
    wait_listening(g, &RR, true, "start")
}

fn stop_tcp_server(g: &mut Guest) -> Result<()> {
    g.sh("chroot /host pkill -TERM -f 'tcp-rr [s]erver'", T)?;
    wait_listening(g, &RR, false, "stop")
}

/// One TCP run from guest a's CPU 0: `seconds` of 64-byte transactions on one connection from
/// [`LATENCY_PORT`], the client's wait flags (the server follows them).
fn tcp_run(pair: &mut VmPair, bin: &str, wait: &[&str], seconds: u32) -> Result<(i32, String)> {
    let mut argv = vec![
        bin.to_string(),
        "bench".into(),
        "tcp-rr".into(),
        "client".into(),
        format!("{VM_B_ADDR}:{TCP_PORT}"),
        "--src-port".into(),
        LATENCY_PORT.to_string(),
        "--cpu".into(),
        pair.client_cpus[0].to_string(),
        "--request-size".into(),
        "64".into(),
        "--response-size".into(),
        "64".into(),
        "--warmup".into(),
        "0.5".into(),
        "--duration".into(),
        seconds.to_string(),
        "--timeout".into(),
        "5".into(),
        "--json".into(),
    ];
    argv.extend(wait.iter().map(|w| w.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    pair.a.host(&argv, T)
}

/// The bulk neighbour in guest a (on `cpu`), in the background for `seconds`.
fn start_bulk(g: &mut Guest, bin: &str, cpu: u32, seconds: u32) -> Result<()> {
    g.sh(
        &format!(
            "chroot /host {bin} bench udp-echo client {VM_B_ADDR}:{SERVER_PORT} --flows {BULK_FLOWS} --src-port {BULK_PORT} --cpu {cpu} --duration {seconds} --timeout 5 > /x/bulk.log 2>&1 &"
        ),
        T,
    )?;
    Ok(())
}

fn stop_bulk(g: &mut Guest) -> Result<()> {
    g.sh(
        "chroot /host pkill -TERM -f 'src-port [4]1000' ; i=0; while chroot /host pgrep -f 'src-port [4]1000' >/dev/null && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done",
        T,
    )?;
    Ok(())
}

fn lane_args<'a>(
    bin: &'a str,
    service: Service,
    port: &'a str,
    mode: &'a str,
    bucket: &'a str,
) -> Vec<&'a str> {
    vec![
        bin,
        "lane",
        "apply",
        "--name",
        "lat",
        "--dev",
        "eth0",
        match service {
            Service::Udp => "--udp",
            Service::Tcp => "--tcp",
        },
        port,
        "--cpu",
        "1",
        "--queue",
        "1",
        "--mode",
        mode,
        "--rss-bucket",
        bucket,
        "--state-dir",
        LANE_STATE,
        "--json",
    ]
}

fn remove_lane(g: &mut Guest, bin: &str) -> Result<String> {
    let out = g.host_ok(
        &[
            bin,
            "lane",
            "remove",
            "lat",
            "--state-dir",
            LANE_STATE,
            "--json",
        ],
        T,
    )?;
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .map_err(|e| LabError::Invalid(format!("lane remove output: {e}: {out}")))?;
    Ok(v["status"].as_str().unwrap_or("?").to_string())
}

/// The lane NAPI's settings, read back by netsteer show (netdev netlink) in guest b.
fn lane_napi(g: &mut Guest, bin: &str) -> Result<BTreeMap<String, u64>> {
    let out = g.host_ok(&[bin, "show", "--json", "--dev", "eth0"], T)?;
    let v: netsteer_host::view::HostView =
        serde_json::from_str(&out).map_err(|e| LabError::Invalid(format!("show output: {e}")))?;
    let nic = v
        .nic("eth0")
        .ok_or_else(|| LabError::Invalid("show: no eth0".into()))?;
    let mut m = BTreeMap::new();
    let napi = nic
        .napis
        .iter()
        .find(|n| n.rx_queues.contains(&RESERVED_QUEUE));
    match napi {
        Some(n) => {
            let mut put = |k: &str, v: Option<u64>| {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            };
            put("defer-hard-irqs", n.defer_hard_irqs.map(u64::from));
            put("gro-flush-timeout", n.gro_flush_timeout_ns);
            put("irq-suspend-timeout", n.irq_suspend_timeout_ns);
        }
        None => {
            // A driver that links no NAPI to its queues: the device-wide files.
            if let Some(d) = nic.napi_defer_hard_irqs.known() {
                m.insert("napi_defer_hard_irqs (device)".into(), *d);
            }
            if let Some(g) = nic.gro_flush_timeout.known() {
                m.insert("gro_flush_timeout (device)".into(), *g);
            }
        }
    }
    Ok(m)
}

fn one_run(
    pair: &mut VmPair,
    bin: &str,
    (service, wait): (Service, &[&str]),
    lane: bool,
    repeat: u32,
    count: u64,
) -> Result<LaneRun> {
    let model = pair.nic;
    // Long enough to cover the latency run under TCG; stopped right after it.
    start_bulk(&mut pair.a, bin, pair.client_cpus[1], 600)?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (p0, i0) = (
        rx_packets(&mut pair.b, bin)?,
        irq_counts(&mut pair.b, model)?,
    );
    let (rc, out) = match service {
        Service::Udp => latency_run(pair, bin, "spin", count)?,
        Service::Tcp => tcp_run(pair, bin, wait, TCP_SECONDS)?,
    };
    let (p1, i1) = (
        rx_packets(&mut pair.b, bin)?,
        irq_counts(&mut pair.b, model)?,
    );
    stop_bulk(&mut pair.a)?;
    if rc != 0 {
        return Err(LabError::Invalid(format!("lane run: client: {out}")));
    }
    let no_summary = || LabError::Invalid(format!("lane run: no summary: {out}"));
    let (sent, received, latency) = match service {
        Service::Udp => {
            let s: ClientSummary = last_json(&out).ok_or_else(no_summary)?;
            (s.sent, s.received, s.latency_ns.map(|l| (l.p50, l.p99)))
        }
        Service::Tcp => {
            let s: RrSummary = last_json(&out).ok_or_else(no_summary)?;
            (
                s.transactions,
                s.transactions,
                s.latency_ns.map(|l| (l.p50, l.p99)),
            )
        }
    };
    Ok(LaneRun {
        kind: "vm-lane-run".into(),
        lane,
        service,
        repeat,
        sent,
        received,
        p50_ns: latency.map(|l| l.0),
        p99_ns: latency.map(|l| l.1),
        rx_packets: since(&p0, &p1),
        rx_irqs: rx_by_queue(&delta(&i0, &i1)),
        virtual_time: pair.virtual_time,
    })
}

/// Runs the experiment: `repeats` pairs of runs (without, then with the lane), `count` round
/// trips each. Everything the lane and the flow hash changed is rolled back at the end, also
/// when a run fails.
pub fn run(
    pair: &mut VmPair,
    bin: &str,
    service: Service,
    (count, repeats): (u64, u32),
    emit: &mut dyn FnMut(&LaneRun) -> std::io::Result<()>,
) -> Result<LaneSummary> {
    let (mode, wait) = mode_for(&pair.b.release);
    let port_s = service.port().to_string();
    let mut hash_journal: Option<String> = None;
    let mut lane_on = false;
    let result = (|| -> Result<LaneSummary> {
        // Ports in the hash, then the latency flow's bucket (the ladder's bisection).
        let (journal, _) = apply(
            &mut pair.b,
            bin,
            STATE,
            &["--profile", "none", "--set", "nic/eth0/flow-hash/udp4=sdfn"],
        )?;
        hash_journal = Some(journal);
        // The bisection reads which queue took the flow's interrupts: a busy-polling server
        // would keep its own queue's interrupts down and point it the wrong way, so it runs
        // against a server that sleeps, and the lane's server starts after.
        let len = table_len(&mut pair.b)?;
        let bucket = match service {
            Service::Udp => {
                start_server(&mut pair.b, bin, &["--wait", "block"])?;
                let bucket = latency_bucket(pair, bin, len)?;
                stop_server(&mut pair.b)?;
                start_server(&mut pair.b, bin, wait)?;
                bucket
            }
            Service::Tcp => {
                // The TCP server waits as each client asks: the probes block, the runs
                // busy-poll. The bulk flows' echo server stays off the lane's CPU.
                start_tcp_server(&mut pair.b, bin)?;
                let bucket = latency_bucket_of(pair, bin, len, &mut |p| {
                    let (rc, out) = tcp_run(p, bin, &["--wait", "block"], 1)?;
                    if rc != 0 {
                        return Err(LabError::Invalid(format!("bucket probe: client: {out}")));
                    }
                    Ok(())
                })?;
                start_echo(&mut pair.b, bin, 0, &["--wait", "block"])?;
                bucket
            }
        };
        let bucket_s = bucket.to_string();
        let mut applied = Vec::new();
        let mut napi = BTreeMap::new();
        let mut runs = Vec::new();
        for repeat in 1..=repeats {
            for lane in [false, true] {
                if lane {
                    let out = pair
                        .b
                        .host_ok(&lane_args(bin, service, &port_s, mode, &bucket_s), T)?;
                    lane_on = true;
                    let r: netsteer_steering::tune::ApplyReport = serde_json::from_str(&out)
                        .map_err(|e| LabError::Invalid(format!("lane apply output: {e}: {out}")))?;
                    if r.status != netsteer_steering::tune::ApplyStatus::Applied {
                        return Err(LabError::Invalid(format!(
                            "lane apply: {}",
                            r.error.unwrap_or_else(|| r.status.to_string())
                        )));
                    }
                    if applied.is_empty() {
                        applied = r
                            .steps
                            .iter()
                            .filter(|s| s.status == netsteer_steering::tune::StepStatus::Changed)
                            .map(|s| format!("{}: {} -> {}", s.id, s.old, s.new))
                            .chain(r.notes.iter().cloned())
                            .collect();
                        napi = lane_napi(&mut pair.b, bin)?;
                    }
                }
                let run = one_run(pair, bin, (service, wait), lane, repeat, count)?;
                emit(&run).map_err(|source| LabError::Io {
                    what: "writing the report".into(),
                    source,
                })?;
                runs.push(run);
                if lane {
                    remove_lane(&mut pair.b, bin)?;
                    lane_on = false;
                }
            }
        }
        // The bulk flows alone with the lane in place: how many land on its queue.
        pair.b
            .host_ok(&lane_args(bin, service, &port_s, mode, &bucket_s), T)?;
        lane_on = true;
        let p0 = rx_packets(&mut pair.b, bin)?;
        ladder::bulk_burst(pair, bin)?;
        let bulk = since(&p0, &rx_packets(&mut pair.b, bin)?);
        let removed = remove_lane(&mut pair.b, bin)?;
        lane_on = false;
        let p99 = |lane: bool| -> Vec<f64> {
            runs.iter()
                .filter(|r| r.lane == lane)
                .filter_map(|r| r.p99_ns.map(|v| v as f64))
                .collect()
        };
        let irqs = |lane: bool| -> Vec<f64> {
            runs.iter()
                .filter(|r| r.lane == lane && r.received > 0)
                .map(|r| {
                    r.rx_irqs.get(&RESERVED_QUEUE).copied().unwrap_or(0) as f64 / r.received as f64
                })
                .collect()
        };
        let per_packet = |lane: bool| -> Vec<f64> {
            runs.iter()
                .filter(|r| r.lane == lane)
                .filter_map(|r| {
                    let packets = *r.rx_packets.get(&RESERVED_QUEUE)?;
                    let irqs = r.rx_irqs.get(&RESERVED_QUEUE).copied().unwrap_or(0);
                    (packets > 0).then(|| irqs as f64 / packets as f64)
                })
                .collect()
        };
        Ok(LaneSummary {
            kind: "vm-lane".into(),
            kernel: pair.b.release.clone(),
            nic: pair.nic.name().into(),
            service,
            mode: mode.into(),
            bucket,
            applied,
            napi,
            bulk_on_lane_queue: bulk.get(&RESERVED_QUEUE).copied().unwrap_or(0),
            bulk_total: bulk.values().sum(),
            p99: compare(true, &p99(false), &p99(true)),
            lane_queue_irqs_per_request: compare(true, &irqs(false), &irqs(true)),
            lane_queue_irqs_per_packet: compare(true, &per_packet(false), &per_packet(true)),
            virtual_time: pair.virtual_time,
            removed,
        })
    })();
    // Undo whatever is still in place, newest first; the first error is the one reported.
    let mut undo: Result<()> = Ok(());
    if lane_on {
        undo = remove_lane(&mut pair.b, bin).map(|_| ());
    }
    let _ = stop_server(&mut pair.b);
    if service == Service::Tcp {
        let _ = stop_tcp_server(&mut pair.b);
    }
    if let Some(j) = hash_journal {
        let r = rollback_one(&mut pair.b, bin, STATE, &j);
        if undo.is_ok() {
            undo = r;
        }
    }
    let summary = result?;
    undo?;
    Ok(summary)
}

/// Boots the pair, installs `bin` and runs the experiment; a line (or a JSON object) per run,
/// then the summary.
pub fn run_pair(
    spec: &super::VmPairSpec,
    bin: &std::path::Path,
    services: &[Service],
    (count, repeats): (u64, u32),
    emit: &mut dyn FnMut(&str) -> std::io::Result<()>,
    json: bool,
    virtual_time: Option<u32>,
) -> Result<Vec<LaneSummary>> {
    let mut pair = match virtual_time {
        None => VmPair::boot_announced("lane", spec)?,
        Some(shift) => {
            eprintln!(
                "netsteer lab: booting the twin in virtual time (icount shift {shift}): both ends in one guest ({}), the client in its own namespace",
                spec.describe()
            );
            let p = VmPair::twin("lane", spec, Some(shift))?;
            eprintln!(
                "netsteer lab: up in {:.1} s (kernel {})",
                p.b.boot_time.as_secs_f64(),
                p.b.release
            );
            p
        }
    };
    let guest_bin = pair.install(bin)?;
    let io = |source| LabError::Io {
        what: "writing the report".into(),
        source,
    };
    let mut out = Vec::new();
    for &service in services {
        let summary = run(&mut pair, &guest_bin, service, (count, repeats), &mut |r| {
            let line = if json {
                serde_json::to_string(r).map_err(std::io::Error::other)?
            } else {
                run_line(r)
            };
            emit(&line)
        })?;
        if json {
            emit(
                &serde_json::to_string(&summary)
                    .map_err(std::io::Error::other)
                    .map_err(io)?,
            )
            .map_err(io)?;
        } else {
            for l in summary_lines(&summary) {
                emit(&l).map_err(io)?;
            }
        }
        out.push(summary);
    }
    Ok(out)
}

/// The summary as lines for people.
pub fn summary_lines(s: &LaneSummary) -> Vec<String> {
    let mut out = vec![format!(
        "{} lane on guest b (kernel {}, {} NIC{}): mode {}, rx-{RESERVED_QUEUE} and CPU {LANE_CPU}, the latency flow's RSS bucket {}",
        s.service.name(),
        s.kernel,
        s.nic,
        match s.virtual_time {
            Some(shift) => format!(
                "; the twin in virtual time, icount shift {shift}: both ends' instructions on one clock"
            ),
            None => String::new(),
        },
        s.mode,
        s.bucket
    )];
    for a in &s.applied {
        out.push(format!("  {a}"));
    }
    let napi: Vec<String> = s.napi.iter().map(|(k, v)| format!("{k} {v}")).collect();
    out.push(format!(
        "  the lane's NAPI read back: {}",
        if napi.is_empty() {
            "nothing reported".into()
        } else {
            napi.join(", ")
        }
    ));
    out.push(format!(
        "  bulk flows alone with the lane: {} of {} packets on rx-{RESERVED_QUEUE}",
        s.bulk_on_lane_queue, s.bulk_total
    ));
    let unit = unit(s.virtual_time);
    match &s.p99 {
        Some(c) => out.push(format!(
            "  latency flow p99, without → with the lane: median {:.0} → {:.0} {unit} (ratio {:.2}), {} ({:+.1}%, noise {:.1}%)",
            c.before.median / 1e3,
            c.after.median / 1e3,
            c.after.median / c.before.median,
            c.verdict,
            c.improvement_pct,
            c.noise_pct
        )),
        None => out.push("  latency flow p99: no usable runs".into()),
    }
    for (what, c) in [
        ("request", &s.lane_queue_irqs_per_request),
        ("packet it received", &s.lane_queue_irqs_per_packet),
    ] {
        if let Some(c) = c {
            out.push(format!(
                "  rx-{RESERVED_QUEUE}'s hard IRQs per {what}, without → with the lane: median {:.2} → {:.2}, {} ({:+.1}%, noise {:.1}%)",
                c.before.median, c.after.median, c.verdict, c.improvement_pct, c.noise_pct
            ));
        }
    }
    out.push(format!("  lane removed: {}", s.removed));
    out
}

/// One run as a line.
/// `µs`, or `virtual µs` in virtual time.
fn unit(virtual_time: Option<u32>) -> &'static str {
    if virtual_time.is_some() {
        "virtual µs"
    } else {
        "µs"
    }
}

pub fn run_line(r: &LaneRun) -> String {
    let unit = unit(r.virtual_time);
    let us = |v: Option<u64>| v.map_or("-".into(), |v| format!("{:.0} {unit}", v as f64 / 1e3));
    let q = |m: &BTreeMap<u32, u64>| {
        m.iter()
            .map(|(q, n)| format!("rx-{q} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{} #{} p50 {} p99 {} | packets {} | irqs {}",
        if r.lane {
            "with lane   "
        } else {
            "without lane"
        },
        r.repeat,
        us(r.p50_ns),
        us(r.p99_ns),
        q(&r.rx_packets),
        q(&r.rx_irqs)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_follows_the_kernel() {
        assert_eq!(mode_for("7.3.4+deb13-amd64").0, "suspend");
        assert_eq!(mode_for("6.13.0-1-amd64").0, "suspend");
        assert_eq!(mode_for("6.12.95+deb12-amd64").0, "busy-poll");
        assert_eq!(mode_for("6.1.0-56-amd64").0, "busy-poll");
    }

    #[test]
    fn per_queue_packets_are_read_under_both_names() {
        let igb = "NIC statistics:\n     rx_packets: 900\n     rx_queue_0_packets: 500\n     rx_queue_1_packets: 400\n     rx_queue_1_bytes: 1\n";
        assert_eq!(
            ethtool_rx_packets(igb),
            BTreeMap::from([(0, 500), (1, 400)])
        );
        assert_eq!(
            ethtool_rx_packets("     rx0_packets: 7\n     tx0_packets: 9\n"),
            BTreeMap::from([(0, 7)])
        );
    }
}
