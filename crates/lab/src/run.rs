//! Running a scenario: make the lab, run every workload before and after the change (the change
//! applied and rolled back by `netsteer tune` inside the server host, alternated repeat by
//! repeat), count the packets each CPU processed during each run, decide with the closed loop's
//! rule (kept only beyond the noise), and check that the server host is exactly as before.

use crate::scenario::{Scenario, Tool, Workload};
use crate::{Lab, LabError, LinkSpec, NsHost, Result};
use netsteer_host::parse::parse_softnet_stat;
use netsteer_tune::tune::closed_loop::{Decision, Metric, Spread, decide};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

const CLIENT_ADDR: &str = "10.77.0.1";
const SERVER_ADDR: &str = "10.77.0.2";
/// The server's device on the lab link (see `Veth::create`).
const SERVER_DEV: &str = "v0b";

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The `netsteer` binary run inside the hosts (benchmarks, tune).
    pub netsteer: PathBuf,
    pub repeats: Option<u32>,
    pub duration_s: Option<f64>,
}

/// One workload run. JSON Lines: `{"type":"run",...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub scenario: String,
    pub repeat: u32,
    /// `before` or `after`.
    pub variant: String,
    pub tool: String,
    /// What the workload measured, in `unit` (the receiver's bits per second, or requests
    /// per second for an application).
    pub value: f64,
    pub unit: String,
    /// The load generator's 99th percentile latency, where it reports one (wrk).
    pub p99_us: Option<f64>,
    /// Packets each CPU processed (softnet_stat) during the run, and its share of all.
    pub per_cpu: Vec<CpuPackets>,
}

/// One CPU during one run: the packets it processed (softnet_stat) and, as mpstat prints
/// them, where its time went (/proc/stat; % of the CPU's time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuPackets {
    pub cpu: u32,
    pub processed: u64,
    /// 0..=1 of all packets processed during the run.
    pub share: f64,
    pub usr: f64,
    pub sys: f64,
    pub irq: f64,
    pub soft: f64,
    pub idle: f64,
}

/// One CPU before and after the change: medians over the runs of its share of the packets
/// and of its %soft and %idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuShares {
    pub cpu: u32,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub soft_before: Option<f64>,
    pub soft_after: Option<f64>,
    pub idle_before: Option<f64>,
    pub idle_after: Option<f64>,
}

/// One tool's before/after comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub tool: String,
    /// The unit of the decision's values (the runs' `unit`).
    pub unit: String,
    pub decision: Decision,
    /// Median share of the packets per CPU over the runs.
    pub per_cpu: Vec<CpuShares>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub kernel: String,
    pub cpus: usize,
    pub netsteer_version: String,
    pub tools: BTreeMap<String, String>,
    /// Steal time over the whole scenario, % of all CPU time (a VM's neighbours).
    pub steal_pct: f64,
}

/// The end of a scenario. JSON Lines: `{"type":"summary",...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub scenario: String,
    pub description: String,
    pub repeats: u32,
    pub duration_s: f64,
    pub change: String,
    pub environment: Environment,
    pub rows: Vec<Row>,
    /// Every file the change wrote reads as before, after the last rollback.
    pub restored: bool,
    pub restore_problems: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Message {
    Run(RunRecord),
    Summary(Summary),
}

fn softnet_processed() -> Result<BTreeMap<u32, u64>> {
    let text =
        std::fs::read_to_string("/proc/net/softnet_stat").map_err(|source| LabError::Io {
            what: "/proc/net/softnet_stat".into(),
            source,
        })?;
    let rows = parse_softnet_stat(&text)
        .map_err(|e| LabError::Invalid(format!("/proc/net/softnet_stat: {e}")))?;
    let cpus = netsteer_host::parse::SoftnetRow::resolve_cpus(&rows, None);
    Ok(cpus
        .into_iter()
        .zip(rows)
        .map(|(c, r)| (c, u64::from(r.processed)))
        .collect())
}

fn cpu_times() -> Result<BTreeMap<u32, netsteer_host::parse::CpuTimes>> {
    let text = std::fs::read_to_string("/proc/stat").map_err(|source| LabError::Io {
        what: "/proc/stat".into(),
        source,
    })?;
    netsteer_host::parse::parse_proc_stat(&text)
        .map(|s| s.cpus)
        .map_err(|e| LabError::Invalid(format!("/proc/stat: {e}")))
}

/// (steal, total) jiffies from /proc/stat's aggregate `cpu` line (total as mpstat sums it).
fn steal_and_total() -> (u64, u64) {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| netsteer_host::parse::parse_proc_stat(&t).ok())
        .map_or((0, 0), |s| (s.total.steal, s.total.total()))
}

fn delta(a: &BTreeMap<u32, u64>, b: &BTreeMap<u32, u64>) -> BTreeMap<u32, u64> {
    b.iter()
        .map(|(c, v)| {
            // softnet counters are 32-bit and wrap.
            let before = a.get(c).copied().unwrap_or(*v);
            let d = if *v >= before {
                v - before
            } else {
                v + (1 << 32) - before
            };
            (*c, d)
        })
        .collect()
}

type Times = BTreeMap<u32, netsteer_host::parse::CpuTimes>;

fn per_cpu(p: &BTreeMap<u32, u64>, t0: &Times, t1: &Times) -> Vec<CpuPackets> {
    let total: u64 = p.values().sum();
    p.iter()
        .map(|(c, v)| {
            // mpstat's percentages: each column's delta over the total delta.
            let (a, b) = (t0.get(c), t1.get(c));
            let pct = |f: fn(&netsteer_host::parse::CpuTimes) -> u64| -> f64 {
                match (a, b) {
                    (Some(a), Some(b)) if b.total() > a.total() => {
                        f(b).saturating_sub(f(a)) as f64 / (b.total() - a.total()) as f64 * 100.0
                    }
                    _ => 0.0,
                }
            };
            CpuPackets {
                cpu: *c,
                processed: *v,
                share: if total == 0 {
                    0.0
                } else {
                    *v as f64 / total as f64
                },
                usr: pct(|t| t.user + t.nice),
                sys: pct(|t| t.system),
                irq: pct(|t| t.irq),
                soft: pct(|t| t.softirq),
                idle: pct(|t| t.idle + t.iowait),
            }
        })
        .collect()
}

fn stdout_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A server process that is killed and reaped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something listens on `port` inside `host` (ss), for at most 5 s.
fn wait_listening(host: &NsHost, port: u16) -> Result<()> {
    for _ in 0..100 {
        if let Ok(o) = host.exec(&["ss", "-Htln", &format!("sport = :{port}")])
            && !stdout_of(&o).trim().is_empty()
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(LabError::Invalid(format!(
        "no server listened on port {port} in {} within 5 s",
        host.name()
    )))
}

struct Hosts<'a> {
    client: &'a NsHost,
    server: &'a NsHost,
    scn: &'a Scenario,
    opts: &'a RunOptions,
    duration_s: f64,
    /// The run's own directory (tune state, application configs), removed by the lab.
    scratch: PathBuf,
}

/// iperf3, wrk and memcaslap take whole seconds.
fn whole_seconds(s: f64) -> String {
    (s.ceil() as u64).max(1).to_string()
}

/// A minimal nginx: one worker, a 612-byte page (nginx's own default page size), no access
/// log, everything under `dir` (nothing of the host's nginx set-up is used or touched).
fn write_nginx_config(dir: &std::path::Path) -> Result<()> {
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
fn parse_wrk(out: &str) -> Result<(f64, Option<f64>)> {
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

/// Operations per second from memcaslap's closing `TPS:` line.
fn parse_memcaslap(out: &str) -> Result<f64> {
    out.lines()
        .rev()
        .find_map(|l| {
            let rest = &l[l.find("TPS:")? + 4..];
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| LabError::Invalid(format!("memcaslap: no TPS in {out:?}")))
}

impl Hosts<'_> {
    fn netsteer(&self) -> String {
        self.opts.netsteer.display().to_string()
    }

    /// Runs one workload: its measure (in `w.tool.unit()`) and p99 latency in µs if known.
    fn workload(&self, w: &Workload) -> Result<(f64, Option<f64>)> {
        let topo = &self.scn.topology;
        match w.tool {
            Tool::NetsteerTcpStream => {
                let listen = format!("{SERVER_ADDR}:4322");
                let bin = self.netsteer();
                let _server = Server(self.server.spawn(
                    Some(&topo.server_cpus),
                    &bin,
                    &["bench", "tcp-stream", "server", "--listen", &listen],
                )?);
                wait_listening(self.server, 4322)?;
                let (flows, write, dur) = (
                    w.flows.to_string(),
                    w.write_size.unwrap_or(131_072).to_string(),
                    self.duration_s.to_string(),
                );
                let mut args = vec![
                    "taskset",
                    "-c",
                    &topo.client_cpus,
                    &bin,
                    "bench",
                    "tcp-stream",
                    "client",
                    &listen,
                    "--flows",
                    &flows,
                    "--write-size",
                    &write,
                    "--duration",
                    &dur,
                    "--json",
                ];
                if w.nodelay {
                    args.push("--nodelay");
                }
                let out = self.client.exec(&args)?;
                Metric::BitsPerSecond
                    .from_output(&stdout_of(&out))
                    .map(|v| (v, None))
                    .map_err(|e| LabError::Invalid(format!("netsteer tcp-stream: {e}")))
            }
            Tool::Iperf3 => {
                let _server = Server(self.server.spawn(
                    Some(&topo.server_cpus),
                    "iperf3",
                    &["-s", "-1", "-p", "5201", "-B", SERVER_ADDR],
                )?);
                wait_listening(self.server, 5201)?;
                // iperf3 takes whole seconds.
                let (flows, write, dur) = (
                    w.flows.to_string(),
                    w.write_size.unwrap_or(131_072).to_string(),
                    whole_seconds(self.duration_s),
                );
                let mut args = vec![
                    "taskset",
                    "-c",
                    &topo.client_cpus,
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
                let out = self.client.exec(&args)?;
                let v: serde_json::Value = serde_json::from_str(&stdout_of(&out))
                    .map_err(|e| LabError::Invalid(format!("iperf3 -J: {e}")))?;
                v["end"]["sum_received"]["bits_per_second"]
                    .as_f64()
                    .map(|v| (v, None))
                    .ok_or_else(|| LabError::Invalid("iperf3 -J: no end.sum_received".into()))
            }
            Tool::NginxWrk => {
                let dir = self.scratch.join("nginx");
                write_nginx_config(&dir)?;
                let (prefix, conf) = (
                    dir.display().to_string(),
                    dir.join("nginx.conf").display().to_string(),
                );
                let _server = Server(self.server.spawn(
                    Some(&topo.server_cpus),
                    "nginx",
                    &["-p", &prefix, "-c", &conf],
                )?);
                wait_listening(self.server, 8080)?;
                let (conns, dur) = (w.flows.to_string(), whole_seconds(self.duration_s));
                let url = format!("http://{SERVER_ADDR}:8080/");
                let out = self.client.exec(&[
                    "taskset",
                    "-c",
                    &topo.client_cpus,
                    "wrk",
                    "-t",
                    "1",
                    "-c",
                    &conns,
                    "-d",
                    &format!("{dur}s"),
                    "--latency",
                    &url,
                ])?;
                parse_wrk(&stdout_of(&out))
            }
            Tool::MemcachedMemcaslap => {
                let _server = Server(self.server.spawn(
                    Some(&topo.server_cpus),
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
                wait_listening(self.server, 11211)?;
                let (conns, dur) = (w.flows.to_string(), whole_seconds(self.duration_s));
                let out = self.client.exec(&[
                    "taskset",
                    "-c",
                    &topo.client_cpus,
                    "memcaslap",
                    "-s",
                    &format!("{SERVER_ADDR}:11211"),
                    "-t",
                    &format!("{dur}s"),
                    "-T",
                    "1",
                    "-c",
                    &conns,
                ])?;
                parse_memcaslap(&stdout_of(&out)).map(|v| (v, None))
            }
        }
    }

    /// The files the change writes (the plan's file targets) and their contents now.
    fn change_files(&self) -> Result<BTreeMap<String, String>> {
        let bin = self.netsteer();
        let out = self.server.exec(&[
            &bin,
            "tune",
            "plan",
            "--profile",
            &self.scn.change.profile,
            "--dev",
            SERVER_DEV,
            "--json",
        ])?;
        let plan: netsteer_tune::tune::Plan = serde_json::from_str(&stdout_of(&out))
            .map_err(|e| LabError::Invalid(format!("tune plan --json: {e}")))?;
        let mut files = BTreeMap::new();
        for item in &plan.items {
            if let netsteer_tune::tune::Target::File { path } = &item.target {
                let content = self
                    .server
                    .exec(&["cat", path])
                    .map(|o| stdout_of(&o))
                    .unwrap_or_else(|e| format!("<unreadable: {e}>"));
                files.insert(path.clone(), content);
            }
        }
        Ok(files)
    }
}

fn tool_version(program: &str, arg: &str) -> String {
    std::process::Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into())
}

/// Runs the scenario; every run and then the summary go to `emit` as they are done.
pub fn run(
    scn: &Scenario,
    opts: &RunOptions,
    mut emit: impl FnMut(&Message) -> std::io::Result<()>,
) -> Result<Summary> {
    let repeats = opts.repeats.unwrap_or(scn.repeats);
    let duration_s = opts.duration_s.unwrap_or(scn.duration_s);
    if !(1..=100).contains(&repeats) || !(0.2..=3600.0).contains(&duration_s) {
        return Err(LabError::Invalid(
            "repeats 1 to 100, duration 0.2 to 3600 s".into(),
        ));
    }
    let out_err = |source| LabError::Io {
        what: "writing the report".into(),
        source,
    };
    let mut lab = Lab::new("lab")?;
    let client = lab.host("client", false)?;
    let server = lab.host("server", false)?;
    lab.link(
        &client,
        &server,
        &LinkSpec {
            queues: scn.topology.queues,
            addr_a: Some(format!("{CLIENT_ADDR}/24")),
            addr_b: Some(format!("{SERVER_ADDR}/24")),
            mtu: None,
        },
    )?;
    let scratch = std::env::temp_dir().join(lab.prefix());
    std::fs::create_dir_all(&scratch).map_err(|source| LabError::Io {
        what: format!("creating {}", scratch.display()),
        source,
    })?;
    let for_cleanup = scratch.clone();
    lab.defer(format!("remove {}", scratch.display()), move || {
        let _ = std::fs::remove_dir_all(&for_cleanup);
    });
    let state = scratch.join("tune").display().to_string();
    let h = Hosts {
        client: &client,
        server: &server,
        scn,
        opts,
        duration_s,
        scratch,
    };
    let before_files = h.change_files()?;
    let bin = h.netsteer();
    let (steal0, total0) = steal_and_total();
    let mut runs: Vec<RunRecord> = Vec::new();
    for repeat in 1..=repeats {
        for variant in ["before", "after"] {
            if variant == "after" {
                server.exec(&[
                    &bin,
                    "tune",
                    "apply",
                    "--profile",
                    &scn.change.profile,
                    "--dev",
                    SERVER_DEV,
                    "--state-dir",
                    &state,
                ])?;
            }
            for w in &scn.workloads {
                let (p0, t0) = (softnet_processed()?, cpu_times()?);
                let measured = h.workload(w);
                let processed = delta(&p0, &softnet_processed()?);
                let t1 = cpu_times()?;
                let (value, p99_us) = match measured {
                    Ok(m) => m,
                    Err(e) => {
                        if variant == "after" {
                            let _ = server.exec(&[&bin, "tune", "rollback", "--state-dir", &state]);
                        }
                        return Err(e);
                    }
                };
                let r = RunRecord {
                    scenario: scn.name.clone(),
                    repeat,
                    variant: variant.into(),
                    tool: w.tool.name().into(),
                    value,
                    unit: w.tool.unit().into(),
                    p99_us,
                    per_cpu: per_cpu(&processed, &t0, &t1),
                };
                emit(&Message::Run(r.clone())).map_err(out_err)?;
                runs.push(r);
            }
            if variant == "after" {
                server.exec(&[&bin, "tune", "rollback", "--state-dir", &state])?;
            }
        }
    }
    let (steal1, total1) = steal_and_total();
    let after_files = h.change_files()?;
    let restore_problems: Vec<String> = before_files
        .iter()
        .filter(|(path, content)| after_files.get(*path) != Some(content))
        .map(|(path, content)| {
            format!(
                "{path}: {:?} before, {:?} after the last rollback",
                content.trim(),
                after_files.get(path).map(|s| s.trim().to_string())
            )
        })
        .collect();
    let rows = scn
        .workloads
        .iter()
        .filter_map(|w| row(w.tool.name(), &runs))
        .collect();
    let mut tools = BTreeMap::new();
    tools.insert("iperf3".into(), tool_version("iperf3", "--version"));
    let summary = Summary {
        scenario: scn.name.clone(),
        description: scn.description.clone(),
        repeats,
        duration_s,
        change: format!(
            "netsteer tune apply --profile {} --dev {SERVER_DEV}",
            scn.change.profile
        ),
        environment: Environment {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            netsteer_version: env!("CARGO_PKG_VERSION").into(),
            tools,
            steal_pct: if total1 > total0 {
                (steal1 - steal0) as f64 / (total1 - total0) as f64 * 100.0
            } else {
                0.0
            },
        },
        rows,
        restored: restore_problems.is_empty(),
        restore_problems,
    };
    emit(&Message::Summary(summary.clone())).map_err(out_err)?;
    let failed = lab.close();
    if !failed.is_empty() {
        return Err(LabError::Invalid(format!(
            "lab cleanup failed: {}",
            failed.join("; ")
        )));
    }
    Ok(summary)
}

/// The median of one per-CPU figure over runs, by CPU.
fn median_per_cpu(runs: &[&RunRecord], f: fn(&CpuPackets) -> f64) -> BTreeMap<u32, f64> {
    let mut per: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for r in runs {
        for p in &r.per_cpu {
            per.entry(p.cpu).or_default().push(f(p));
        }
    }
    per.into_iter()
        .filter_map(|(c, v)| Some((c, Spread::of(&v)?.median)))
        .collect()
}

/// The before/after comparison of one tool's runs.
pub fn row(tool: &str, runs: &[RunRecord]) -> Option<Row> {
    let of = |variant: &str| -> Vec<&RunRecord> {
        runs.iter()
            .filter(|r| r.tool == tool && r.variant == variant)
            .collect()
    };
    let (b, a) = (of("before"), of("after"));
    let values = |v: &[&RunRecord]| v.iter().map(|r| r.value).collect::<Vec<_>>();
    let unit = b.first()?.unit.clone();
    let metric = match unit.as_str() {
        "bit/s" => Metric::BitsPerSecond,
        _ => Metric::TransactionsPerSecond,
    };
    let decision = decide(metric, &values(&b), &values(&a))?;
    let (sb, sa) = (
        median_per_cpu(&b, |p| p.share),
        median_per_cpu(&a, |p| p.share),
    );
    let (softb, softa) = (
        median_per_cpu(&b, |p| p.soft),
        median_per_cpu(&a, |p| p.soft),
    );
    let (idleb, idlea) = (
        median_per_cpu(&b, |p| p.idle),
        median_per_cpu(&a, |p| p.idle),
    );
    let cpus: std::collections::BTreeSet<u32> = sb.keys().chain(sa.keys()).copied().collect();
    Some(Row {
        tool: tool.into(),
        unit,
        decision,
        per_cpu: cpus
            .into_iter()
            .map(|cpu| CpuShares {
                cpu,
                before: sb.get(&cpu).copied(),
                after: sa.get(&cpu).copied(),
                soft_before: softb.get(&cpu).copied(),
                soft_after: softa.get(&cpu).copied(),
                idle_before: idleb.get(&cpu).copied(),
                idle_after: idlea.get(&cpu).copied(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tool: &str, variant: &str, bps: f64, cpu0: u64, cpu1: u64) -> RunRecord {
        let processed: BTreeMap<u32, u64> = [(0, cpu0), (1, cpu1)].into();
        RunRecord {
            scenario: "t".into(),
            repeat: 1,
            variant: variant.into(),
            tool: tool.into(),
            value: bps,
            unit: "bit/s".into(),
            p99_us: None,
            per_cpu: per_cpu(&processed, &Times::new(), &Times::new()),
        }
    }

    #[test]
    fn a_row_decides_like_the_closed_loop_and_takes_median_shares() {
        let runs = vec![
            rec("x", "before", 10.0, 100, 0),
            rec("x", "after", 15.0, 50, 50),
            rec("x", "before", 11.0, 90, 10),
            rec("x", "after", 16.0, 40, 60),
            rec("y", "before", 1.0, 1, 1),
        ];
        let r = row("x", &runs).unwrap();
        assert!(r.decision.keep, "{r:?}");
        assert_eq!(r.decision.before.median, 10.5);
        assert_eq!(r.per_cpu[0].before, Some(0.95));
        assert_eq!(r.per_cpu[1].after, Some(0.55));
        // Only "before" runs for y: no comparison.
        assert!(row("y", &runs).is_none());
    }

    #[test]
    fn the_load_generators_outputs_are_read() {
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
        assert_eq!(whole_seconds(0.4), "1");
        assert_eq!(whole_seconds(2.5), "3");
    }

    #[test]
    fn softnet_deltas_wrap_at_32_bits() {
        let a: BTreeMap<u32, u64> = [(0, u64::from(u32::MAX) - 1), (1, 5)].into();
        let b: BTreeMap<u32, u64> = [(0, 3), (1, 9)].into();
        assert_eq!(delta(&a, &b), [(0, 5), (1, 4)].into());
        let none = Times::new();
        assert_eq!(
            per_cpu(&[(0, 0), (1, 0)].into(), &none, &none)[0].share,
            0.0
        );
        // mpstat's arithmetic: 50 of 200 ticks in softirq is 25 %.
        let t = |user, softirq, idle| netsteer_host::parse::CpuTimes {
            user,
            softirq,
            idle,
            ..Default::default()
        };
        let t0: Times = [(0, t(0, 0, 0))].into();
        let t1: Times = [(0, t(100, 50, 50))].into();
        let c = &per_cpu(&[(0, 7)].into(), &t0, &t1)[0];
        assert_eq!((c.usr, c.soft, c.idle, c.share), (50.0, 25.0, 25.0, 1.0));
    }
}
