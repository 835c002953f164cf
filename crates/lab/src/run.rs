//! Running a scenario: make the lab, then run every workload in every variant, alternated
//! repeat by repeat through the experiment ([`netsteer_experiment::experiment`]); a variant that
//! changes the host is applied with the tune library ([`Tuner`]) on a thread inside the server
//! host and rolled back after its runs — no netsteer process is started. Each run counts the
//! packets every CPU processed; each variant is judged against the first with the experiment's
//! three-way verdict; at the end the server host must read exactly as before.

use crate::pair::{Pair, PairSpec};
use crate::scenario::{Scenario, Unit, Variant};
use crate::workload::{self, Measured, Place};
use crate::{LabError, Result};
use netsteer_experiment::clock::{Clock, MonotonicClock};
use netsteer_experiment::experiment::{
    self, BoxError, Decision, Executor, Order, Spread, Timed, decide,
};
use netsteer_host::HostFs;
use netsteer_host::parse::parse_softnet_stat;
use netsteer_steering::tune::{ApplyOptions, PlanOptions, TuneError, Tuner};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub use crate::pair::{CLIENT_DEV, SERVER_DEV};

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub repeats: Option<u32>,
    pub duration_s: Option<f64>,
    /// Trace every packet of every run (`netsteer trace --duty 100`) and record where the
    /// receive path's time went. The trace costs what BENCHMARKS.md#trace says, in every
    /// variant alike: compare the variants, not the figures with untraced ones.
    pub trace: bool,
}

/// One stage of the receive path in one run, from the trace: a row of `netsteer trace`'s
/// interval, on the lab's devices (or per CPU).
pub type StageRow = netsteer_trace::StageRow;

/// One workload run. JSON Lines: `{"type":"run",...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub scenario: String,
    pub repeat: u32,
    /// The variant's name (the scenario's `[[variants]]`).
    pub variant: String,
    /// The workload's label: its tool's name unless the scenario gave it a `label`.
    pub tool: String,
    /// What the workload measured, in `unit`: the receiver's bits per second, requests per
    /// second for an application, the median round trip in ns for an echo tool.
    pub value: f64,
    pub unit: Unit,
    /// The 99th percentile round trip, where the tool reports one (wrk, the echo tools).
    pub p99_us: Option<f64>,
    /// Points of the round-trip CDF, `[percentile 0-100, ns]` (echo tools).
    #[serde(default)]
    pub latency_points: Vec<[f64; 2]>,
    /// Secondary measures by name (docs/json.md: `rx_mapped_pct`, `cpu_us_per_mib_client`, ...).
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
    /// When the run started, seconds after the first run started, and how long it took.
    pub started_s: f64,
    pub elapsed_s: f64,
    /// Packets each CPU processed (softnet_stat) during the run, and its share of all.
    pub per_cpu: Vec<CpuPackets>,
    /// Where the receive path's time went during the run (`--trace`; empty without): the
    /// trace's rows on the lab's two devices and its per-CPU softirq rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageRow>,
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

/// One CPU in the baseline and in a variant: medians over the runs of its share of the
/// packets and of its %soft and %idle.
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

/// One tool in one variant against the baseline (the first variant).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub tool: String,
    /// The unit of the decision's values (the runs' `unit`).
    pub unit: Unit,
    pub baseline: String,
    pub variant: String,
    pub decision: Decision,
    pub per_cpu: Vec<CpuShares>,
}

/// One tool in one variant: the spread of its measure and the medians of everything else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantStats {
    pub tool: String,
    pub variant: String,
    pub unit: Unit,
    pub value: Spread,
    /// Median of each extra measure over the runs.
    pub extra: BTreeMap<String, f64>,
    /// Median of each CDF point over the runs, `[percentile, ns]`.
    pub latency_points: Vec<[f64; 2]>,
    /// The traced runs' stages (`--trace`), one per stage, device, queue and CPU: the median
    /// over the runs of each row's mean and p99 (ns; packets for poll-work), and its events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageStat>,
}

/// A stage of the receive path in one variant, over its traced runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageStat {
    pub stage: netsteer_trace::Stage,
    pub cpu: Option<u32>,
    pub dev: Option<String>,
    pub queue: Option<u32>,
    /// Events in all the runs together.
    pub count: u64,
    pub mean: f64,
    pub p99: Option<u64>,
}

/// A variant as the report names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantInfo {
    pub name: String,
    /// What entering it does (the tune command, the echo tools' wait mode).
    pub change: String,
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
    pub variants: Vec<VariantInfo>,
    /// What this scenario cannot show on this lab (from the scenario file).
    pub limits: Vec<String>,
    pub environment: Environment,
    /// Every variant after the first against the first, per tool.
    pub rows: Vec<Row>,
    pub stats: Vec<VariantStats>,
    /// Every file a variant wrote reads as before, after the last rollback.
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

/// The lab's executor: a variant that changes the host is entered by applying its plan with
/// the tune library on a thread inside the server host (its namespace, with that namespace's
/// sysfs) and left by rolling it back there; a measurement runs every workload once.
struct LabExecutor<'a> {
    scn: &'a Scenario,
    place: Place<'a>,
    state: PathBuf,
    /// `--trace`: loaded once, attached for each run.
    trace: Option<netsteer_trace::Session>,
}

/// One measurement: every workload of the scenario, with its per-CPU counts.
type Measures = Vec<(usize, Measured, Vec<CpuPackets>, Vec<StageRow>)>;

impl LabExecutor<'_> {
    /// Runs `f` with a tuner of the server host, on a thread inside it.
    fn in_server<T: Send>(
        &self,
        f: impl FnOnce(&Tuner) -> std::result::Result<T, TuneError> + Send,
    ) -> Result<T> {
        let ns = self.place.server.netns_path().ok_or_else(|| {
            LabError::Invalid(format!(
                "{}: tuning a lab host needs a namespace host",
                self.place.server.label()
            ))
        })?;
        let state = self.state.clone();
        let label = self.place.server.label().to_string();
        let place = netsteer_sock::netns::Place {
            netns: Some(Path::new(&ns)),
            cpus: &[],
            sysfs: true,
        };
        netsteer_sock::netns::on_thread(place, move || {
            let t = Tuner::open(HostFs::default(), true, Some(state))?;
            f(&t)
        })
        .map_err(|source| LabError::Io {
            what: format!("entering {label}"),
            source,
        })?
        .map_err(|e| LabError::Invalid(format!("tune in {label}: {e}")))
    }

    fn plan_options(&self, variant: usize) -> Result<PlanOptions> {
        let v = &self.scn.variants[variant];
        v.plan_options(SERVER_DEV)
            .map_err(|e| LabError::Invalid(format!("variant {}: {e}", v.name)))
    }

    /// The files any variant writes (the plans' file targets) and their contents now, read in
    /// one visit to the server host.
    fn change_files(&self) -> Result<BTreeMap<String, String>> {
        let all: Vec<PlanOptions> = (0..self.scn.variants.len())
            .filter(|&i| self.scn.variants[i].changes_host())
            .map(|i| self.plan_options(i))
            .collect::<Result<_>>()?;
        self.in_server(move |t| {
            let mut files = BTreeMap::new();
            for opts in &all {
                for item in t.plan(opts)?.items {
                    if let Some(path) = item.target.path() {
                        let content = t
                            .fs()
                            .read_value(&path)
                            .unwrap_or_else(|e| format!("<unreadable: {e}>"));
                        files.insert(path, content);
                    }
                }
            }
            Ok(files)
        })
    }
}

impl Executor for LabExecutor<'_> {
    type Measure = Measures;

    fn enter(&mut self, variant: usize) -> Result<(), BoxError> {
        if self.scn.variants[variant].changes_host() {
            let opts = self.plan_options(variant)?;
            let r = self.in_server(move |t| {
                let plan = t.plan(&opts)?;
                t.apply(&plan, Some(&opts), &ApplyOptions::default())
            })?;
            if r.status != netsteer_steering::tune::ApplyStatus::Applied {
                return Err(LabError::Invalid(format!(
                    "variant {}: the apply failed and was undone: {}",
                    self.scn.variants[variant].name,
                    r.error.as_deref().unwrap_or(r.status.as_str())
                ))
                .into());
            }
        }
        Ok(())
    }

    fn measure(&mut self, variant: usize, _repeat: u32) -> Result<Measures, BoxError> {
        let v: &Variant = &self.scn.variants[variant];
        let mut out = Vec::new();
        for (i, w) in self.scn.workloads.iter().enumerate() {
            if let Some(t) = &mut self.trace {
                // What came before this run is not its own.
                t.read()?;
                t.resume()?;
            }
            let started = std::time::Instant::now();
            let (p0, t0) = (softnet_processed()?, cpu_times()?);
            let m = workload::run(&self.place, w, v);
            let processed = delta(&p0, &softnet_processed()?);
            let t1 = cpu_times()?;
            let stages = match &mut self.trace {
                Some(t) => {
                    t.pause();
                    stages_of(t, started.elapsed().as_secs_f64())?
                }
                None => Vec::new(),
            };
            out.push((i, m?, per_cpu(&processed, &t0, &t1), stages));
        }
        Ok(out)
    }

    fn leave(&mut self, variant: usize) -> Result<(), BoxError> {
        if let Some(t) = &mut self.trace {
            t.pause();
        }
        if self.scn.variants[variant].changes_host() {
            let r = self.in_server(|t| t.rollback(None))?;
            if !r.failed.is_empty() {
                return Err(LabError::Invalid(format!(
                    "rolling back variant {}: {} item(s) not restored: {}",
                    self.scn.variants[variant].name,
                    r.failed.len(),
                    r.failed.join("; ")
                ))
                .into());
            }
        }
        Ok(())
    }
}

/// The trace's rows since the last read: those of the lab's two devices, and the per-CPU
/// softirq stages (which name no device).
fn stages_of(t: &mut netsteer_trace::Session, seconds: f64) -> Result<Vec<StageRow>> {
    let reading = t
        .read()
        .map_err(|e| LabError::Invalid(format!("--trace: {e}")))?;
    let shape = netsteer_trace::Shape {
        devices: vec![CLIENT_DEV.to_string(), SERVER_DEV.to_string()],
        top: 64,
        irq_names: BTreeMap::new(),
    };
    let iv = netsteer_trace::interval(&reading, &t.reasons, &shape, 1, seconds, seconds);
    Ok(iv.stages)
}

fn cpus_of(list: &str) -> Result<Vec<u32>> {
    netsteer_host::CpuSet::parse_list(list, None)
        .map(|c| c.iter().collect())
        .map_err(|e| LabError::Invalid(format!("CPU list {list:?}: {e}")))
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
    let (client_cpus, server_cpus) = (
        cpus_of(&scn.topology.client_cpus)?,
        cpus_of(&scn.topology.server_cpus)?,
    );
    netsteer_sock::cpu::check_cpus("client_cpus", &client_cpus)
        .and_then(|()| netsteer_sock::cpu::check_cpus("server_cpus", &server_cpus))
        .map_err(|e| LabError::Invalid(format!("scenario {}: {e}", scn.name)))?;
    let pair = Pair::new(
        "lab",
        &PairSpec {
            queues: scn.topology.queues,
            mtu: scn.topology.mtu,
            ipv6: false,
            client_rps: scn
                .topology
                .client_rps
                .then(|| client_cpus.iter().copied().collect()),
        },
    )?;
    let (client, server, lab) = (&pair.client, &pair.server, &pair.lab);
    let scratch = lab.scratch()?;
    let trace = if opts.trace {
        Some(
            netsteer_trace::Session::start(&netsteer_trace::Options::default())
                .map_err(|e| LabError::Invalid(format!("--trace: {e}")))?,
        )
    } else {
        None
    };
    let mut exec = LabExecutor {
        scn,
        trace,
        state: scratch.join("tune"),
        place: Place {
            client,
            server,
            client_cpus,
            server_cpus,
            duration: Duration::from_secs_f64(duration_s),
            scratch: &scratch,
        },
    };
    let before_files = exec.change_files()?;
    let (steal0, total0) = steal_and_total();
    let clock = MonotonicClock::default();
    let mut runs: Vec<RunRecord> = Vec::new();
    experiment::run(
        &mut exec,
        scn.variants.len(),
        repeats,
        Order::Alternated,
        &clock as &dyn Clock,
        |t: &Timed<Measures>| {
            for (i, m, cpus, stages) in &t.measure {
                let w = &scn.workloads[*i];
                let tool = w.tool;
                let r = RunRecord {
                    scenario: scn.name.clone(),
                    repeat: t.repeat,
                    variant: scn.variants[t.variant].name.clone(),
                    tool: w.label().into(),
                    value: m.value,
                    unit: tool.unit(),
                    p99_us: m.p99_us,
                    latency_points: m.latency_points.iter().map(|(p, v)| [*p, *v]).collect(),
                    extra: m.extra.clone(),
                    started_s: t.started_ns as f64 / 1e9,
                    elapsed_s: t.elapsed_ns as f64 / 1e9,
                    per_cpu: cpus.clone(),
                    stages: stages.clone(),
                };
                emit(&Message::Run(r.clone())).map_err(out_err)?;
                runs.push(r);
            }
            Ok(())
        },
    )?;
    let (steal1, total1) = steal_and_total();
    let after_files = exec.change_files()?;
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
    // Labels are unique (scenario::validate), so each names one workload's runs.
    let tool_names: Vec<&str> = scn.workloads.iter().map(|w| w.label()).collect();
    let baseline = &scn.variants[0].name;
    let mut rows = Vec::new();
    let mut stats = Vec::new();
    for tool in &tool_names {
        for v in &scn.variants {
            stats.extend(variant_stats(tool, &v.name, &runs));
            if v.name != *baseline {
                rows.extend(row(tool, baseline, &v.name, &runs));
            }
        }
    }
    let mut tools = BTreeMap::new();
    for w in &scn.workloads {
        let (prog, arg) = match w.tool {
            crate::scenario::Tool::Iperf3 => ("iperf3", "--version"),
            crate::scenario::Tool::NginxWrk => ("wrk", "--version"),
            crate::scenario::Tool::MemcachedMemcaslap => ("memcached", "--version"),
            crate::scenario::Tool::Sockperf => ("sockperf", "--version"),
            _ => continue,
        };
        tools.insert(prog.to_string(), tool_version(prog, arg));
    }
    let summary = Summary {
        scenario: scn.name.clone(),
        description: scn.description.clone(),
        repeats,
        duration_s,
        variants: scn
            .variants
            .iter()
            .map(|v| VariantInfo {
                name: v.name.clone(),
                change: v.describe(SERVER_DEV),
            })
            .collect(),
        limits: scn.limits.clone(),
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
        stats,
        restored: restore_problems.is_empty(),
        restore_problems,
    };
    emit(&Message::Summary(summary.clone())).map_err(out_err)?;
    drop(exec);
    let failed = pair.close();
    if !failed.is_empty() {
        return Err(LabError::Invalid(format!(
            "lab cleanup failed: {}",
            failed.join("; ")
        )));
    }
    Ok(summary)
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

fn of<'a>(runs: &'a [RunRecord], tool: &str, variant: &str) -> Vec<&'a RunRecord> {
    runs.iter()
        .filter(|r| r.tool == tool && r.variant == variant)
        .collect()
}

/// One tool in one variant: the spread of its measure, the medians of the rest.
pub fn variant_stats(tool: &str, variant: &str, runs: &[RunRecord]) -> Option<VariantStats> {
    let rs = of(runs, tool, variant);
    let value = Spread::of(&rs.iter().map(|r| r.value).collect::<Vec<_>>())?;
    let mut extra: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut points: BTreeMap<u64, (f64, Vec<f64>)> = BTreeMap::new();
    for r in &rs {
        for (k, v) in &r.extra {
            extra.entry(k.clone()).or_default().push(*v);
        }
        for [p, v] in &r.latency_points {
            // Keyed by the percentile in thousandths, so 99.9 and 99.99 stay apart.
            points
                .entry((p * 1000.0).round() as u64)
                .or_insert((*p, Vec::new()))
                .1
                .push(*v);
        }
    }
    Some(VariantStats {
        stages: stage_stats(&rs),
        tool: tool.into(),
        variant: variant.into(),
        unit: rs[0].unit,
        value,
        extra: extra
            .into_iter()
            .filter_map(|(k, v)| Some((k, Spread::of(&v)?.median)))
            .collect(),
        latency_points: points
            .into_values()
            .filter_map(|(p, v)| Some([p, Spread::of(&v)?.median]))
            .collect(),
    })
}

/// Each traced stage row of the runs, by stage, CPU, device and queue: the medians of the runs'
/// means and p99s.
fn stage_stats(rs: &[&RunRecord]) -> Vec<StageStat> {
    type Key = (
        netsteer_trace::Stage,
        Option<u32>,
        Option<String>,
        Option<u32>,
    );
    let mut by: BTreeMap<Key, (u64, Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in rs {
        for st in r.stages.iter().filter(|st| st.rows == 1) {
            let e = by
                .entry((st.stage, st.cpu, st.dev.clone(), st.queue))
                .or_default();
            e.0 += st.count;
            if let Some(m) = st.mean {
                e.1.push(m);
            }
            if let Some(p) = st.p99 {
                e.2.push(p as f64);
            }
        }
    }
    by.into_iter()
        .filter_map(|((stage, cpu, dev, queue), (count, means, p99s))| {
            Some(StageStat {
                stage,
                cpu,
                dev,
                queue,
                count,
                mean: Spread::of(&means)?.median,
                p99: Spread::of(&p99s).map(|s| s.median as u64),
            })
        })
        .collect()
}

/// One tool's runs in `variant` against its runs in `baseline`.
pub fn row(tool: &str, baseline: &str, variant: &str, runs: &[RunRecord]) -> Option<Row> {
    let (b, a) = (of(runs, tool, baseline), of(runs, tool, variant));
    let values = |v: &[&RunRecord]| v.iter().map(|r| r.value).collect::<Vec<_>>();
    let unit = b.first()?.unit;
    let decision = decide(unit.metric(), &values(&b), &values(&a))?;
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
        baseline: baseline.into(),
        variant: variant.into(),
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
            unit: Unit::BitsPerSecond,
            p99_us: None,
            latency_points: vec![[50.0, bps], [100.0, bps * 2.0]],
            extra: [("x".to_string(), bps)].into(),
            started_s: 0.0,
            elapsed_s: 1.0,
            per_cpu: per_cpu(&processed, &Times::new(), &Times::new()),
            stages: Vec::new(),
        }
    }

    fn stage(stage: netsteer_trace::Stage, dev: &str, mean: f64, count: u64) -> StageRow {
        StageRow {
            stage,
            cpu: Some(1),
            dev: Some(dev.into()),
            queue: None,
            napi_id: None,
            irq: None,
            irq_name: None,
            rows: 1,
            count,
            p50: Some(mean as u64),
            p99: Some(mean as u64 * 3),
            p999: None,
            max: mean as u64 * 4,
            mean: Some(mean),
            squeezed: None,
        }
    }

    /// The traced stages of a variant are the medians of its runs' means, per stage and place;
    /// folded rows (`others`) stay out; the report stacks stack and residence per queue.
    #[test]
    fn traced_runs_give_each_variant_its_stage_medians_and_a_bar_per_queue() {
        use netsteer_trace::Stage::{Residence, Stack};
        let mut runs = Vec::new();
        for (variant, res) in [
            ("before", [20e3, 22e3, 90e3]),
            ("after", [400e3, 500e3, 600e3]),
        ] {
            for r in res {
                let mut x = rec("echo", variant, 1.0, 1, 1);
                x.stages = vec![
                    stage(Stack, "v0b", 10e3, 100),
                    stage(Residence, "v0b", r, 100),
                ];
                let mut folded = stage(Stack, "v0b", 1e9, 5);
                folded.rows = 3;
                x.stages.push(folded);
                runs.push(x);
            }
        }
        let before = variant_stats("echo", "before", &runs).unwrap();
        let after = variant_stats("echo", "after", &runs).unwrap();
        let res = |v: &VariantStats| {
            v.stages
                .iter()
                .find(|s| s.stage == Residence)
                .map(|s| (s.mean, s.count))
        };
        assert_eq!(res(&before), Some((22e3, 300)));
        assert_eq!(res(&after), Some((500e3, 300)));
        // The folded row's 1 s mean is nowhere.
        assert!(
            after.stages.iter().all(|s| s.mean < 1e6),
            "{:?}",
            after.stages
        );
        let summary = Summary {
            scenario: "t".into(),
            description: String::new(),
            repeats: 3,
            duration_s: 1.0,
            variants: Vec::new(),
            limits: Vec::new(),
            environment: Environment {
                kernel: String::new(),
                cpus: 2,
                netsteer_version: String::new(),
                tools: BTreeMap::new(),
                steal_pct: 0.0,
            },
            rows: Vec::new(),
            stats: vec![before, after],
            restored: true,
            restore_problems: Vec::new(),
        };
        let html = crate::report::html(&summary, &runs);
        assert!(html.contains("echo receive path per queue"), "{html}");
        assert!(html.contains("v0b (backlog)"));
        assert!(html.contains("10.0 + 22.0 µs") && html.contains("10.0 + 500.0 µs"));
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
        let r = row("x", "before", "after", &runs).unwrap();
        assert!(r.decision.keep, "{r:?}");
        assert_eq!(r.decision.before.median, 10.5);
        assert_eq!(r.per_cpu[0].before, Some(0.95));
        assert_eq!(r.per_cpu[1].after, Some(0.55));
        // Only "before" runs for y: no comparison.
        assert!(row("y", "before", "after", &runs).is_none());
        let st = variant_stats("x", "after", &runs).unwrap();
        assert_eq!((st.value.min, st.value.max), (15.0, 16.0));
        assert_eq!(st.extra["x"], 15.5);
        assert_eq!(st.latency_points, [[50.0, 15.5], [100.0, 31.0]]);
        assert!(variant_stats("x", "nowhere", &runs).is_none());
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
