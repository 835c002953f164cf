//! The workload a search measures (`tune search --workload CMD`): a benchmark command run once
//! per measurement, its latency and request count read from its JSON Lines (the client
//! `summary` of `netsteer bench udp-echo|tcp-rr client --json`, docs/json.md), and its cost,
//! the CPU time the host spent per request while it ran, from /proc/stat.
//!
//! **Why CPU from /proc/stat, not the benchmark's own threads.** What a setting trades is the
//! host's work: busy polling burns the application's CPU, coalescing and deferral move work
//! between hard IRQ, softirq and nothing, RPS moves it to other CPUs. Only the busy time of
//! the CPUs that do that work sees every one of those.
//!
//! **Busy is the time a CPU was not idle, not the sum of the busy columns.** On a tickless
//! kernel the user, system, irq and softirq columns are sampled by the tick: a burst of work
//! shorter than a tick (a request's) is counted only when a tick lands in it, so a latency
//! workload's runs read 5 to 120 µs per request from the same load (measured on the lab's veth
//! with memcached at 5,000/s). The idle and iowait columns are measured, not sampled (NO_HZ
//! keeps each CPU's idle time exactly, fs/proc/stat.c get_idle_time), so busy = the run's wall
//! time − idle − iowait, per CPU, which read 88 to 99 µs per request on the same runs. On a
//! host that does other work too, `--cost-cpus` names the CPUs that count; the search
//! alternates every candidate with the baseline, so load that comes and goes falls on both
//! sides.
//!
//! **Steal is not taken out of busy: on a guest, most of it is idle time already.** A vCPU
//! that halts and is woken waits in the hypervisor's run queue before it runs again; that wait
//! is steal (kernel/sched/cputime.c, steal_account_process_time), and on a NO_HZ kernel it is
//! also inside the idle period /proc/stat shows (fs/proc/stat.c get_idle_time reads tick_sched's
//! idle_sleeptime; only the tick-sampled idle is reduced by steal, in account_idle_ticks). A
//! latency workload wakes its CPUs thousands of times a second, so much of its steal is of
//! that kind, and wall − idle − iowait − steal counts it twice. Measured on the development
//! guest with the old formula, one search's runs read 60 µs per request at 1 % steal and
//! 2.9 µs (the one-tick floor) at 19 %, and a CI search stopped at 0 ("no measurable CPU");
//! with this one, another search's runs read 25 to 45 µs from 1 % to 19 % (different runs,
//! two searches sharing the CPUs: the collapse is what is gone, not the level). The bounds
//! of what this leaves:
//! - steal that lands on a running task is counted as busy, so a run with much steal reads
//!   dearer (70 µs per request at none, 120 to 150 at 30 to 40 % on the same configurations),
//!   and not evenly: a configuration that halts less (busy polling) has more of its steal
//!   charged than one that sleeps. `--max-steal` bounds how much a run taken can carry.
//! - a kernel whose idle is tick-sampled (nohz=off, or a HZ_PERIODIC build) already takes
//!   steal out of idle, and there busy over-counts by the whole steal; so does a kernel that
//!   stops counting idle steal in idle_sleeptime. On such a guest keep `--max-steal` low.
//!
//! **A run the hypervisor disturbed is measured again.** A run one of whose cost CPUs lost
//! more than `--max-steal` of its time ([`DEFAULT_MAX_STEAL`]) measured the neighbour, not
//! this configuration, so [`Workload::measure`] runs it again after a pause, at most
//! [`MAX_RERUNS`] times; the report lists every run not taken and the steal of every run
//! taken.
//!
//! The workload command's own CPU (user and system time of its process tree, getrusage
//! RUSAGE_CHILDREN) is taken out of the busy time by default: in production the clients run
//! elsewhere, and a load generator on the same host is not what a setting should be cheap for
//! (its softirq work stays counted: with IRQ time accounting the kernel charges it to no task).

use crate::experiment::Metric;
use crate::search::Obs;
use netsteer_host::HostFs;
use netsteer_host::parse::{CpuTimes, ProcStat, parse_proc_stat};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// /proc/stat counts in USER_HZ ticks, 100 per second on every Linux ABI.
const NS_PER_TICK: f64 = 10_000_000.0;

/// The most of a workload's output kept (its JSON Lines summary is a few KiB; a command that
/// prints more is cut, not read into memory without end).
const MAX_OUTPUT: u64 = 16 << 20;

/// What the search is after.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Goal {
    /// A latency percentile at most `limit_ns`, at the least CPU per request.
    Latency { metric: Metric, limit_ns: f64 },
    /// The most requests per second (cost: ns per request at the rate reached).
    MaxRate,
}

impl std::str::FromStr for Goal {
    type Err = String;

    /// `p99<=200us`, `p50<=40us`, `p999<=2ms`, `p99<=150000ns`, or `max-rate`.
    fn from_str(s: &str) -> Result<Goal, String> {
        let s = s.trim();
        if s == "max-rate" {
            return Ok(Goal::MaxRate);
        }
        let bad = || {
            format!(
                "{s:?}: expected METRIC<=LIMIT with METRIC p50, p99 or p999 and LIMIT in ns, us \
                 or ms (p99<=200us), or max-rate"
            )
        };
        let (metric, limit) = s.split_once("<=").ok_or_else(bad)?;
        let metric: Metric = metric.trim().parse().map_err(|_| bad())?;
        if !metric.lower_is_better() {
            return Err(bad());
        }
        let limit = limit.trim();
        let (number, scale) = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6)]
            .iter()
            .find_map(|(unit, scale)| limit.strip_suffix(unit).map(|n| (n, *scale)))
            .ok_or_else(bad)?;
        let n: f64 = number.trim().parse().map_err(|_| bad())?;
        let limit_ns = n * scale;
        // A latency goal of 0 or of more than a minute is a typo, not a goal.
        if !(limit_ns.is_finite() && limit_ns > 0.0 && limit_ns <= 60e9) {
            return Err(format!(
                "{s:?}: the limit must be more than 0 and at most 60 s"
            ));
        }
        Ok(Goal::Latency { metric, limit_ns })
    }
}

impl std::fmt::Display for Goal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Goal::Latency { metric, limit_ns } => write!(f, "{metric}<={}us", limit_ns / 1e3),
            Goal::MaxRate => f.write_str("max-rate"),
        }
    }
}

impl Goal {
    /// The percentile a run reports as its latency.
    pub fn metric(&self) -> Metric {
        match self {
            Goal::Latency { metric, .. } => *metric,
            Goal::MaxRate => Metric::P99,
        }
    }

    /// The latency limit the search keeps to (none for max-rate).
    pub fn limit_ns(&self) -> f64 {
        match self {
            Goal::Latency { limit_ns, .. } => *limit_ns,
            Goal::MaxRate => f64::INFINITY,
        }
    }
}

/// What one run of a benchmark reported: its client summaries together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The worst of the summaries' percentiles (one summary per target), ns.
    pub latency_ns: f64,
    /// Every request of the run, the warm-up's included: what the run's CPU time divides by.
    pub requests: u64,
    /// Requests per second over the measured time, all summaries together.
    pub rate: f64,
    pub lost: u64,
    /// The workload's own price of a request, when it reports one (`cost_ns_per_request` in
    /// its summaries, e.g. a wrapper that reads a remote server's CPU): then this, not the
    /// local /proc/stat, is the cost.
    pub cost_ns_per_request: Option<f64>,
}

/// Reads the client summaries of a benchmark's JSON Lines: udp-echo's (`received` plus
/// `warmup_round_trips`, `pps`, `lost`) and tcp-rr's (`all_transactions`, or `transactions`,
/// `transactions_per_second`).
pub fn read_report(stdout: &str, metric: Metric) -> Result<RunReport, String> {
    let mut r = RunReport {
        latency_ns: f64::NAN,
        requests: 0,
        rate: 0.0,
        lost: 0,
        cost_ns_per_request: None,
    };
    let mut seen = 0;
    // Summaries that price their requests: their total cost and their requests.
    let (mut cost_ns, mut cost_requests) = (0.0, 0u64);
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["type"] != "summary" || v["role"] != "client" {
            continue;
        }
        let key = match metric {
            Metric::P50 => "p50",
            Metric::P999 => "p999",
            _ => "p99",
        };
        let Some(latency) = v["latency_ns"][key].as_f64() else {
            return Err(format!(
                "a client summary without latency_ns.{key} (nothing came back?)"
            ));
        };
        if !(latency.is_finite() && latency >= 0.0) {
            return Err(format!(
                "a client summary whose latency_ns.{key} is {latency}: no latency"
            ));
        }
        // A count is a whole number or absent: "lost": -1 or 1e3 read as 0 would hide a loss.
        if let Some(k) = [
            "lost",
            "received",
            "warmup_round_trips",
            "transactions",
            "all_transactions",
        ]
        .into_iter()
        .find(|k| {
            v.get(*k)
                .is_some_and(|x| !x.is_null() && x.as_u64().is_none())
        }) {
            return Err(format!(
                "a client summary whose {k} is {} (not a whole number)",
                v[k]
            ));
        }
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let (requests, rate) = if v.get("received").is_some() {
            (
                n("received").saturating_add(n("warmup_round_trips")),
                v["pps"].as_f64(),
            )
        } else {
            (
                n("all_transactions").max(n("transactions")),
                v["transactions_per_second"].as_f64(),
            )
        };
        r.latency_ns = if seen == 0 {
            latency
        } else {
            r.latency_ns.max(latency)
        };
        r.requests = r.requests.saturating_add(requests);
        r.rate += rate.unwrap_or(0.0);
        r.lost = r.lost.saturating_add(n("lost"));
        if let Some(c) = v["cost_ns_per_request"].as_f64() {
            // Weighted by requests over the summaries that give it, and only those.
            cost_ns += c * requests as f64;
            cost_requests = cost_requests.saturating_add(requests);
            r.cost_ns_per_request = Some(cost_ns / cost_requests.max(1) as f64);
        }
        seen += 1;
    }
    if seen == 0 {
        return Err(
            "no client summary in the workload's output (a netsteer bench client with --json)"
                .into(),
        );
    }
    if r.requests == 0 {
        return Err("the workload completed no request".into());
    }
    Ok(r)
}

/// The CPUs in `cpus` (all that both reads list, when empty) as (before, after) pairs.
fn cpu_pairs<'a>(
    before: &'a ProcStat,
    after: &'a ProcStat,
    cpus: &[u32],
) -> Vec<(&'a CpuTimes, &'a CpuTimes)> {
    if cpus.is_empty() {
        before
            .cpus
            .iter()
            .filter_map(|(c, b)| Some((b, after.cpus.get(c)?)))
            .collect()
    } else {
        cpus.iter()
            .filter_map(|c| Some((before.cpus.get(c)?, after.cpus.get(c)?)))
            .collect()
    }
}

/// The CPU ns the CPUs in `cpus` (all that both reads list, when empty) were busy between two
/// /proc/stat reads `elapsed_ns` apart: per CPU, the wall time less its idle and iowait (not
/// its steal, which a guest's idle time already holds: see the module's comment).
pub fn busy_ns(before: &ProcStat, after: &ProcStat, cpus: &[u32], elapsed_ns: f64) -> f64 {
    let not_busy = |t: &CpuTimes| t.idle + t.iowait;
    let one = |b: &CpuTimes, a: &CpuTimes| {
        let away = not_busy(a).saturating_sub(not_busy(b)) as f64 * NS_PER_TICK;
        (elapsed_ns - away).max(0.0)
    };
    cpu_pairs(before, after, cpus)
        .into_iter()
        .map(|(b, a)| one(b, a))
        .sum()
}

/// The most CPU ns the hypervisor ran something else on any one of the CPUs in `cpus` (all,
/// when empty) between two /proc/stat reads: the steal column of the CPU that lost most. The
/// most, not the sum: on a guest of 64 vCPUs whose workload runs on two, half of those two
/// taken is 1.6 % of the whole, and still half of the run.
pub fn steal_ns(before: &ProcStat, after: &ProcStat, cpus: &[u32]) -> f64 {
    cpu_pairs(before, after, cpus)
        .into_iter()
        .map(|(b, a)| a.steal.saturating_sub(b.steal) as f64 * NS_PER_TICK)
        .fold(0.0, f64::max)
}

/// A run shorter than this is not judged on its steal: the kernel adds steal to a CPU's
/// counter at its tick or when it leaves idle, in chunks of several ticks after a long wait,
/// so on a run of a few ticks one chunk reads as most of it.
pub const STEAL_MIN_SPAN: Duration = Duration::from_millis(500);

/// The host's busy time with the workload's own CPU (`own_ns`, its rusage) taken out, over
/// `cpus` CPUs. The two clocks differ: /proc/stat counts whole ticks per CPU (each CPU's
/// difference is off by up to one tick), rusage counts nanoseconds, so when the workload is
/// most of what ran (a client that busy-polls under a latency profile) the difference can
/// come out at or below zero by measurement alone. What is left is then below what the
/// ticks can tell apart, and that bound (one tick per CPU) is the cost's honest upper
/// estimate; a run where the host was not measurably busy at all stays zero (too short).
pub fn cost_busy_ns(busy_ns: f64, own_ns: f64, cpus: usize) -> f64 {
    if busy_ns <= 0.0 {
        return 0.0;
    }
    (busy_ns - own_ns).max(NS_PER_TICK * cpus.max(1) as f64)
}

/// A benchmark command and how its runs are priced.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Run with `sh -c`, stdin from /dev/null, in its own process group.
    pub command: String,
    pub goal: Goal,
    /// The CPUs whose busy time is the cost (empty: every CPU).
    pub cost_cpus: Vec<u32>,
    /// A run that takes longer is killed (with its whole process group) and fails.
    pub timeout: Duration,
    /// Count the workload command's own CPU in the cost (a workload whose clients are the
    /// service being tuned); by default it is taken out.
    pub count_workload_cpu: bool,
    /// A run in which one cost CPU lost more than this share of its time to steal is
    /// measured again ([`DEFAULT_MAX_STEAL`]; 1 takes every run).
    pub max_steal: f64,
    /// The pause before a run is measured again, doubled each time ([`DEFAULT_RERUN_PAUSE`]).
    pub rerun_pause: Duration,
}

/// One run's numbers as the search sees them, and as the report shows them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub report: RunReport,
    /// The CPUs' busy time over the run, the workload's own taken out unless asked.
    pub busy_ns: f64,
    /// The workload command's own CPU time (its process tree's rusage).
    pub workload_cpu_ns: f64,
    /// The most time the hypervisor gave any one cost CPU to someone else over the run
    /// (its steal).
    pub steal_ns: f64,
    /// The run's wall time between the two /proc/stat reads.
    pub span_ns: f64,
}

/// By default, a run one of whose cost CPUs lost more than this share of its time to the
/// hypervisor is measured again (`--max-steal`). On the development machine (a shared guest)
/// steal is 0.3 % when quiet, 0.8 % over 16 hours of builds, 8 to 26 % in a neighbour's bursts
/// and up to 41 % at the worst seen. The same configurations' runs read a p99 of 60 to 100 µs
/// and 70 µs of CPU per request without steal, 0.4 to 1 ms and 85 µs at 5 to 15 %, 1 to 3 ms
/// and 120 to 150 µs at 30 to 40 %. So even 5 % changes a run's p99; 20 % is a compromise,
/// not a clean line: lower, a search on this guest re-ran one run six times at 21 to 26 % and
/// stopped; higher, a run's cost is off by half. A quiet host never meets it; on a busy guest
/// `--max-steal 5` buys cleaner runs with a longer search, and the report's steal spread says
/// what the runs taken carried.
pub const DEFAULT_MAX_STEAL: f64 = 0.2;

/// How often one run is measured again when it is disturbed, before the search stops.
pub const MAX_RERUNS: u32 = 6;

/// The pause before the first re-run, doubled before each next one (1 + 2 + … + 32 s, about a
/// minute in all): time for a neighbour's burst to pass.
pub const DEFAULT_RERUN_PAUSE: Duration = Duration::from_secs(1);

/// The longest one pause is (a library caller's hour is a minute).
const MAX_RERUN_PAUSE: Duration = Duration::from_secs(60);

/// A run measured: the run, its observation, and the disturbed runs measured again before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub run: Run,
    pub obs: Obs,
    /// Why each earlier attempt was not taken, in order.
    pub reruns: Vec<String>,
}

impl Run {
    /// The share of its time the hypervisor took from the cost CPU that lost most, at least:
    /// steal is counted in ticks, so a run can straddle one it never had. 0 for a run shorter
    /// than [`STEAL_MIN_SPAN`], which steal's chunks cannot judge.
    pub fn steal_share(&self) -> f64 {
        if self.span_ns >= STEAL_MIN_SPAN.as_nanos() as f64 {
            ((self.steal_ns - NS_PER_TICK) / self.span_ns).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// Why this run's numbers cannot be believed, if they cannot: the hypervisor took more
    /// than `max_steal` (a share, 0 to 1) of a cost CPU's time.
    pub fn disturbed(&self, max_steal: f64) -> Option<String> {
        let share = self.steal_share();
        (share > max_steal).then(|| {
            format!(
                "the hypervisor took {:.1} % of a cost CPU's time during the run (steal in \
                 /proc/stat, more than --max-steal {} %: its cost and latency are another \
                 machine's)",
                share * 100.0,
                // 7, not 7.000000000000001 (0.07 × 100).
                (max_steal * 1000.0).round() / 10.0
            )
        })
    }

    pub fn obs(&self, goal: &Goal) -> Result<Obs, String> {
        let cost = match (goal, self.report.cost_ns_per_request) {
            (Goal::Latency { .. }, Some(c)) => c,
            (Goal::Latency { .. }, None) => self.busy_ns / self.report.requests as f64,
            (Goal::MaxRate, _) => 1e9 / self.report.rate,
        };
        if !(cost.is_finite() && cost > 0.0) {
            return Err(match goal {
                Goal::Latency { .. } => "the run used no measurable CPU (/proc/stat counts 10 ms \
                                         ticks): make each run last a second or more"
                    .into(),
                Goal::MaxRate => "the run reported no rate".into(),
            });
        }
        Ok(Obs {
            latency: self.report.latency_ns,
            cost,
            lost: self.report.lost,
        })
    }
}

/// A workload's last three stderr lines (newest first) on one line: what says why it failed.
fn last_lines(stderr: &str) -> String {
    stderr.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
}

impl Workload {
    /// Runs the command once. `stop` is polled while it runs: when it says so, the run is
    /// killed and fails ("interrupted"), so the search leaves the configuration at once.
    pub fn run(&self, proc_stat: &HostFs, stop: &dyn Fn() -> bool) -> Result<Run, String> {
        let stat = || -> Result<ProcStat, String> {
            let text = proc_stat
                .read_value("/proc/stat")
                .map_err(|e| format!("/proc/stat: {e}"))?;
            parse_proc_stat(&text).map_err(|e| format!("/proc/stat: {e}"))
        };
        let children = || {
            netsteer_sock::cpu::ThreadUsage::children()
                .map(|u| (u.user_us + u.sys_us) as f64 * 1e3)
                .map_err(|e| format!("getrusage(RUSAGE_CHILDREN): {e}"))
        };
        let before = stat()?;
        let t0 = Instant::now();
        let own_before = children()?;
        let (stdout, stderr) = self.run_command(stop)?;
        let own = (children()? - own_before).max(0.0);
        let after = stat()?;
        let elapsed = t0.elapsed().as_nanos() as f64;
        let report = read_report(&stdout, self.goal.metric()).map_err(|e| {
            let tail = last_lines(&stderr);
            if tail.is_empty() {
                format!("the workload {:?}: {e}", self.command)
            } else {
                format!("the workload {:?}: {e} (stderr: {tail})", self.command)
            }
        })?;
        let busy = busy_ns(&before, &after, &self.cost_cpus, elapsed);
        let cpus = cpu_pairs(&before, &after, &self.cost_cpus).len();
        let steal = steal_ns(&before, &after, &self.cost_cpus);
        Ok(Run {
            report,
            busy_ns: if self.count_workload_cpu {
                busy
            } else {
                cost_busy_ns(busy, own, cpus)
            },
            workload_cpu_ns: own,
            steal_ns: steal,
            span_ns: elapsed,
        })
    }

    /// Runs the command until a run can be believed: one the hypervisor disturbed
    /// ([`Run::disturbed`]) is run again, after a pause, at most
    /// [`MAX_RERUNS`] times; then the last reason is the error. `on_rerun` hears of each run
    /// not taken. `stop` ends the pauses too.
    pub fn measure(
        &self,
        proc_stat: &HostFs,
        stop: &dyn Fn() -> bool,
        on_rerun: &mut dyn FnMut(&Run, &str),
    ) -> Result<Measured, String> {
        // A library caller's NaN is the default, not "never disturbed".
        let max_steal = if self.max_steal.is_finite() {
            self.max_steal.clamp(0.0, 1.0)
        } else {
            DEFAULT_MAX_STEAL
        };
        let mut reruns = Vec::new();
        let mut pause = self.rerun_pause.min(MAX_RERUN_PAUSE);
        loop {
            let run = self.run(proc_stat, stop)?;
            // Only steal is worth a re-run: a run that measured no CPU, or no rate, says so
            // again the next time (a --cost-cpus that names idle CPUs, runs too short).
            let Some(why) = run.disturbed(max_steal) else {
                let obs = run.obs(&self.goal)?;
                return Ok(Measured { run, obs, reruns });
            };
            if reruns.len() as u32 >= MAX_RERUNS {
                return Err(format!(
                    "{why} ({} runs in a row; on a host whose steal stays this high, a higher \
                     --max-steal searches on with noisier verdicts)",
                    reruns.len() + 1
                ));
            }
            on_rerun(&run, &why);
            reruns.push(why);
            let until = Instant::now() + pause;
            while Instant::now() < until {
                if stop() {
                    return Err("interrupted".into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            pause = (pause * 2).min(MAX_RERUN_PAUSE);
        }
    }

    fn run_command(&self, stop: &dyn Fn() -> bool) -> Result<(String, String), String> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&self.command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        netsteer_sock::signal::unblock_termination_in(&mut cmd);
        // sh does not outlive a search killed with SIGKILL (what sh started in turn may: a
        // lone simple command is exec'd by sh, and so goes too).
        netsteer_sock::signal::die_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("the workload {:?}: {e}", self.command))?;
        let pid = child.id();
        let drain = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut s = Vec::new();
                if let Some(r) = r {
                    let _ = r.take(MAX_OUTPUT).read_to_end(&mut s);
                }
                String::from_utf8_lossy(&s).into_owned()
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => {}
                Err(e) => break Err(format!("waiting for the workload: {e}")),
            }
            let why = if stop() {
                Some("interrupted".to_string())
            } else if started.elapsed() > self.timeout {
                Some(format!(
                    "ran longer than its timeout ({:.0} s) and was killed",
                    self.timeout.as_secs_f64()
                ))
            } else {
                None
            };
            if let Some(why) = why {
                let _ = netsteer_sock::signal::kill_group(pid);
                let _ = child.wait();
                break Err(format!("the workload {:?}: {why}", self.command));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The group may hold a background child that keeps a pipe open; it goes too.
        let _ = netsteer_sock::signal::kill_group(pid);
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        let status = status?;
        if !status.success() {
            return Err(format!(
                "the workload {:?} failed ({status}): {}",
                self.command,
                last_lines(&stderr)
            ));
        }
        Ok((stdout, stderr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_parse_with_their_units_and_refuse_the_rest() {
        assert_eq!(
            "p99<=200us".parse::<Goal>().unwrap(),
            Goal::Latency {
                metric: Metric::P99,
                limit_ns: 200_000.0
            }
        );
        assert_eq!(
            "p50 <= 1.5ms".parse::<Goal>().unwrap().limit_ns(),
            1_500_000.0
        );
        assert_eq!("max-rate".parse::<Goal>().unwrap(), Goal::MaxRate);
        for bad in [
            "p99<200us",
            "p99<=200",
            "pps<=5us",
            "p99<=0us",
            "p99<=-1us",
            "p99<=NaNus",
            "p99<=2e12ms",
            "",
        ] {
            let e = bad.parse::<Goal>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    /// A count that is no whole number, or a latency that is no latency, is an error naming
    /// the field: read as 0 (or within any goal) it would hide a loss from the search. Counts
    /// that would overflow saturate.
    #[test]
    fn a_summary_that_hides_its_loss_is_refused() {
        let summary = |extra: &str| {
            format!(
                r#"{{"type":"summary","role":"client","received":10,{extra}"latency_ns":{{"p99":5}}}}"#
            )
        };
        for (extra, field) in [
            (r#""lost":-1,"#, "lost"),
            (r#""lost":1e3,"#, "lost"),
            (r#""lost":"7","#, "lost"),
            (r#""received":2.5,"#, "received"),
        ] {
            let text =
                summary(extra).replacen(r#""received":10,"#, "", usize::from(field == "received"));
            let e = read_report(&text, Metric::P99).unwrap_err();
            assert!(e.contains(field), "{extra}: {e}");
        }
        let negative =
            r#"{"type":"summary","role":"client","received":10,"latency_ns":{"p99":-5}}"#;
        assert!(
            read_report(negative, Metric::P99)
                .unwrap_err()
                .contains("p99")
        );
        let huge = format!(
            "{}\n{}",
            summary(&format!(r#""lost":{},"#, u64::MAX)),
            summary(r#""lost":1,"#)
        );
        assert_eq!(read_report(&huge, Metric::P99).unwrap().lost, u64::MAX);
    }

    #[test]
    fn the_report_sums_targets_and_keeps_the_worst_percentile() {
        let out = r#"{"type":"interval","role":"client","latency_ns":{"p99":1}}
{"type":"summary","bench":"udp-echo","role":"client","received":900,"warmup_round_trips":100,"pps":450.0,"lost":2,"latency_ns":{"p50":10,"p99":40,"p999":50}}
{"type":"summary","bench":"udp-echo","role":"client","received":1000,"warmup_round_trips":0,"pps":500.0,"lost":0,"latency_ns":{"p50":12,"p99":30,"p999":60}}
"#;
        let r = read_report(out, Metric::P99).unwrap();
        assert_eq!(r.latency_ns, 40.0);
        assert_eq!(r.requests, 2000);
        assert_eq!(r.rate, 950.0);
        assert_eq!(r.lost, 2);
        let rr = r#"{"type":"summary","bench":"tcp-rr","role":"client","transactions":500,"all_transactions":600,"transactions_per_second":250.0,"latency_ns":{"p50":5,"p99":9,"p999":11}}"#;
        let r = read_report(rr, Metric::P999).unwrap();
        assert_eq!((r.latency_ns, r.requests, r.lost), (11.0, 600, 0));
        assert_eq!(r.cost_ns_per_request, None);
        let own = r#"{"type":"summary","role":"client","received":100,"latency_ns":{"p99":3},"cost_ns_per_request":10}
{"type":"summary","role":"client","received":300,"latency_ns":{"p99":3},"cost_ns_per_request":30}"#;
        assert_eq!(
            read_report(own, Metric::P99).unwrap().cost_ns_per_request,
            Some(25.0)
        );
        // Mixed: a summary without a price does not dilute the others' (it was once counted
        // in the weights as if priced at 0).
        let mixed = r#"{"type":"summary","role":"client","received":100,"latency_ns":{"p99":3}}
{"type":"summary","role":"client","received":100,"latency_ns":{"p99":3},"cost_ns_per_request":10}
{"type":"summary","role":"client","received":300,"latency_ns":{"p99":3},"cost_ns_per_request":30}"#;
        assert_eq!(
            read_report(mixed, Metric::P99).unwrap().cost_ns_per_request,
            Some(25.0)
        );
        assert!(read_report("garbage\n", Metric::P99).is_err());
        let none = r#"{"type":"summary","role":"client","received":0,"latency_ns":{"p99":3}}"#;
        assert!(
            read_report(none, Metric::P99)
                .unwrap_err()
                .contains("no request")
        );
    }

    #[test]
    fn busy_time_is_wall_time_less_idle_and_iowait_on_the_named_cpus() {
        // cpu0 idles 300 ticks, cpu1 idles 250, waits 10 and is stolen 20 of 400 (4 s): the
        // steal was inside its idle time (a vCPU woken late), so it is not taken out again.
        let stat = |idle0: u64, idle1: u64, io1: u64, steal1: u64| {
            parse_proc_stat(&format!(
                "cpu  1 0 1 {} {io1} 0 0 {steal1} 0 0\ncpu0 1 0 1 {idle0} 0 0 0 0 0 0\ncpu1 0 0 0 {idle1} {io1} 0 0 {steal1} 0 0\n",
                idle0 + idle1
            ))
            .unwrap()
        };
        let (a, b) = (stat(1000, 1000, 0, 0), stat(1300, 1250, 10, 20));
        let wall = 4e9;
        assert_eq!(busy_ns(&a, &b, &[0], wall), 100.0 * NS_PER_TICK);
        assert_eq!(busy_ns(&a, &b, &[1], wall), 140.0 * NS_PER_TICK);
        assert_eq!(busy_ns(&a, &b, &[], wall), 240.0 * NS_PER_TICK);
        assert_eq!(busy_ns(&a, &b, &[7], wall), 0.0);
        // Never below zero when the reads straddle a tick.
        assert_eq!(busy_ns(&a, &b, &[0], 2e9), 0.0);
    }

    /// The search that CI saw stop: a busy-polling client was nearly all the host ran, its
    /// rusage came out above /proc/stat's ticks, and the run's cost was zero ("no measurable
    /// CPU") although the host had been busy for 1.6 s.
    #[test]
    fn a_workload_that_is_most_of_the_busy_time_leaves_a_cost_at_the_tick_bound() {
        let tick = NS_PER_TICK;
        // Measurably more than the workload: the difference.
        assert_eq!(cost_busy_ns(160.0 * tick, 100.0 * tick, 2), 60.0 * tick);
        // Within the ticks' error, or past it by rusage's finer clock: one tick per CPU.
        assert_eq!(cost_busy_ns(160.0 * tick, 159.5 * tick, 2), 2.0 * tick);
        assert_eq!(cost_busy_ns(160.0 * tick, 163.0 * tick, 2), 2.0 * tick);
        assert_eq!(cost_busy_ns(160.0 * tick, 163.0 * tick, 0), tick);
        // Not busy at all: the run was too short, and says so.
        assert_eq!(cost_busy_ns(0.0, 3.0 * tick, 2), 0.0);
    }

    /// A workload that burns a few hundred ms of its own CPU: that time is measured as its own
    /// and taken out of the cost, unless asked to count.
    #[test]
    fn the_workload_s_own_cpu_is_taken_out_of_the_cost() {
        let summary = r#"{\"type\":\"summary\",\"role\":\"client\",\"received\":1000,\"latency_ns\":{\"p99\":5}}"#;
        let mut w = Workload {
            command: format!(
                "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo \"{summary}\""
            ),
            goal: "p99<=1ms".parse().unwrap(),
            cost_cpus: vec![],
            timeout: Duration::from_secs(60),
            count_workload_cpu: false,
            max_steal: DEFAULT_MAX_STEAL,
            rerun_pause: DEFAULT_RERUN_PAUSE,
        };
        let out = w.run(&HostFs::live(), &|| false).unwrap();
        assert!(out.workload_cpu_ns >= 50e6, "{out:?}");
        w.count_workload_cpu = true;
        let counted = w.run(&HostFs::live(), &|| false).unwrap();
        // Counted, the cost holds at least the workload's own time (/proc/stat's ticks on two
        // CPUs: within 30 ms).
        assert!(
            counted.busy_ns + 30e6 >= counted.workload_cpu_ns,
            "{counted:?}"
        );
    }

    /// A tree whose /proc/stat the workload itself moves on: each run lasts 0.6 s (long
    /// enough to be judged on steal), and its first `disturbed` runs add two seconds of steal
    /// to cpu1 (more than the run), the later ones none.
    fn stealing_workload(root: &std::path::Path, disturbed: u32) -> Workload {
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::write(
            root.join("proc/stat"),
            "cpu  1 0 1 1000 0 0 0 0 0 0\ncpu0 1 0 1 500 0 0 0 0 0 0\ncpu1 0 0 0 500 0 0 0 0 0 0\n",
        )
        .unwrap();
        let summary = r#"{\"type\":\"summary\",\"role\":\"client\",\"received\":1000,\"latency_ns\":{\"p99\":5000}}"#;
        let dir = root.display();
        Workload {
            command: format!(
                "n=$(cat {dir}/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > {dir}/count; \
                 sleep 0.6; s=$(( (n < {disturbed} ? n : {disturbed}) * 200 )); \
                 printf 'cpu  1 0 1 1000 0 0 0 %d 0 0\\ncpu0 1 0 1 500 0 0 0 0 0 0\\ncpu1 0 0 0 500 0 0 0 %d 0 0\\n' $s $s > {dir}/proc/stat; \
                 echo \"{summary}\""
            ),
            goal: "p99<=1ms".parse().unwrap(),
            cost_cpus: vec![],
            timeout: Duration::from_secs(60),
            count_workload_cpu: true,
            max_steal: DEFAULT_MAX_STEAL,
            rerun_pause: Duration::from_millis(100),
        }
    }

    /// Steal is the cost CPU's that lost most, and only the cost CPUs'; a run past the limit
    /// is disturbed, one under it is not, and a run too short for steal's chunks is not judged.
    #[test]
    fn steal_over_the_limit_disturbs_a_run() {
        let stat = |steal0: u64, steal1: u64| {
            parse_proc_stat(&format!(
                "cpu  0 0 0 0 0 0 0 {} 0 0\ncpu0 0 0 0 0 0 0 0 {steal0} 0 0\ncpu1 0 0 0 0 0 0 0 {steal1} 0 0\n",
                steal0 + steal1
            ))
            .unwrap()
        };
        let (a, b) = (stat(10, 10), stat(16, 30));
        assert_eq!(steal_ns(&a, &b, &[0]), 6.0 * NS_PER_TICK);
        assert_eq!(
            steal_ns(&a, &b, &[]),
            20.0 * NS_PER_TICK,
            "the most, not the sum"
        );
        assert_eq!(steal_ns(&a, &b, &[7]), 0.0);
        assert_eq!(
            steal_ns(&b, &a, &[]),
            0.0,
            "a counter that went back is no steal"
        );
        let run = |steal_ns: f64| Run {
            report: RunReport {
                latency_ns: 1.0,
                requests: 1,
                rate: 1.0,
                lost: 0,
                cost_ns_per_request: None,
            },
            busy_ns: 1e9,
            workload_cpu_ns: 0.0,
            steal_ns,
            span_ns: 1e9,
        };
        // A second's run: the share is what lies beyond one tick.
        assert_eq!(run(0.21e9).disturbed(DEFAULT_MAX_STEAL), None);
        let why = run(0.215e9).disturbed(DEFAULT_MAX_STEAL).unwrap();
        assert!(
            why.contains("20.5 %") && why.contains("--max-steal 20 %"),
            "{why}"
        );
        assert_eq!(
            run(2e9).disturbed(1.0),
            None,
            "--max-steal 100 takes every run"
        );
        // A run of 0.4 s with a chunk of 30 ticks: not judged; at 0.5 s it is.
        let mut short = run(30.0 * NS_PER_TICK);
        short.span_ns = 0.4e9;
        assert_eq!(short.steal_share(), 0.0);
        short.span_ns = 0.5e9;
        assert!(short.disturbed(DEFAULT_MAX_STEAL).is_some());
        let mut none = run(1e9);
        none.span_ns = 0.0;
        assert_eq!(none.disturbed(0.0), None, "no span, no division by 0");
    }

    /// Two disturbed runs are measured again (after a pause), the third is taken; every
    /// attempt not taken is named.
    #[test]
    fn a_disturbed_run_is_measured_again_until_one_is_not() {
        let root = tempfile::tempdir().unwrap();
        let w = stealing_workload(root.path(), 2);
        let mut heard = Vec::new();
        let m = w
            .measure(&HostFs::new(root.path()), &|| false, &mut |r, why| {
                heard.push((r.steal_share(), why.to_string()))
            })
            .unwrap();
        assert_eq!(m.reruns.len(), 2, "{m:?}");
        assert_eq!(heard.len(), 2);
        assert!(
            heard
                .iter()
                .all(|(s, why)| *s > DEFAULT_MAX_STEAL && why.contains("hypervisor")),
            "{heard:?}"
        );
        assert_eq!(m.run.steal_ns, 0.0);
        assert!(m.obs.cost > 0.0);
        let runs: u32 = std::fs::read_to_string(root.path().join("count"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(runs, 3);
    }

    /// A host whose hypervisor never lets go: after MAX_RERUNS re-runs the reason is the error;
    /// a run that measured no CPU is no steal and is an error at once.
    #[test]
    fn a_run_disturbed_every_time_ends_with_the_reason() {
        let root = tempfile::tempdir().unwrap();
        let w = stealing_workload(root.path(), u32::MAX / 400);
        let e = w
            .measure(&HostFs::new(root.path()), &|| false, &mut |_, _| {})
            .unwrap_err();
        assert!(
            e.contains("hypervisor") && e.contains("7 runs in a row"),
            "{e}"
        );
        // No CPU measured (the cost CPU named is not in the tree's /proc/stat: a library
        // caller's mistake, which the CLI refuses before it starts), no steal: one run, then
        // the error.
        let root = tempfile::tempdir().unwrap();
        let mut w = stealing_workload(root.path(), 0);
        w.count_workload_cpu = false;
        w.cost_cpus = vec![7];
        let mut heard = 0;
        let e = w
            .measure(&HostFs::new(root.path()), &|| false, &mut |_, _| heard += 1)
            .unwrap_err();
        assert!(e.contains("no measurable CPU"), "{e}");
        assert_eq!(heard, 0);
    }

    /// A stop asked for during a pause ends it at once: the pause is 30 s, the stop comes as
    /// soon as the first re-run is heard.
    #[test]
    fn a_stop_ends_a_pause_at_once() {
        let root = tempfile::tempdir().unwrap();
        let mut w = stealing_workload(root.path(), u32::MAX / 400);
        w.rerun_pause = Duration::from_secs(30);
        let heard = std::cell::Cell::new(false);
        let t = Instant::now();
        let e = w
            .measure(&HostFs::new(root.path()), &|| heard.get(), &mut |_, _| {
                heard.set(true)
            })
            .unwrap_err();
        assert_eq!(e, "interrupted");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn a_run_that_outlives_its_timeout_is_killed_with_its_children() {
        let w = Workload {
            command: "sleep 30 & sleep 30".into(),
            goal: Goal::MaxRate,
            cost_cpus: vec![],
            timeout: Duration::from_millis(200),
            count_workload_cpu: false,
            max_steal: DEFAULT_MAX_STEAL,
            rerun_pause: DEFAULT_RERUN_PAUSE,
        };
        let t = Instant::now();
        let e = w.run(&HostFs::live(), &|| false).unwrap_err();
        assert!(e.contains("timeout"), "{e}");
        // The background sleep held stdout open: had it lived, the drain would wait for it.
        assert!(t.elapsed() < Duration::from_secs(10));
        let stopped = w.run(&HostFs::live(), &|| true).unwrap_err();
        assert!(stopped.contains("interrupted"), "{stopped}");
    }
}
