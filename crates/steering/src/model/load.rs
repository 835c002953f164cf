//! What the doctor's rules and the planner read besides the host: the goal, the load (rates
//! measured over an interval) and the application's placement.

use netsteer_host::HostFs;
use netsteer_host::process::ProcessPlacement;
use netsteer_host::sample::{
    CounterSample, NetCounters, NetRates, Rates, net_rates, parse_uptime, rates, read_net_counters,
    read_sample,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the host is for. Some rules only apply to one goal (interrupt coalescing and pause
/// frames cost latency but save CPU or drops, so they are findings only for `latency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Goal {
    /// Round trips first: also flags interrupt coalescing and pause frames.
    Latency,
    /// Packets per CPU first.
    Throughput,
    /// Spread the work; neither extreme.
    #[default]
    Balanced,
}

impl fmt::Display for Goal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Goal::Latency => "latency",
            Goal::Throughput => "throughput",
            Goal::Balanced => "balanced",
        })
    }
}

impl FromStr for Goal {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latency" => Ok(Goal::Latency),
            "throughput" => Ok(Goal::Throughput),
            "balanced" => Ok(Goal::Balanced),
            other => Err(format!(
                "{other:?} is not a goal (latency, throughput, balanced)"
            )),
        }
    }
}

/// Where the rates came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadSource {
    /// Two live samples `seconds` apart: rates of now.
    Sampled,
    /// Counters of one moment divided by the uptime (an offline tree): averages since boot,
    /// which cannot tell whether a counter is still growing.
    SinceBoot,
}

/// The host under load: per-CPU and per-IRQ rates, per-device and UDP rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Load {
    pub source: LoadSource,
    pub seconds: f64,
    pub cpu: Rates,
    pub net: NetRates,
}

impl Load {
    /// Rates between two live reads `seconds` apart.
    pub fn sampled(
        before: (&CounterSample, &NetCounters),
        after: (&CounterSample, &NetCounters),
        seconds: f64,
    ) -> Load {
        Load {
            source: LoadSource::Sampled,
            seconds,
            cpu: rates(before.0, after.0, seconds, None),
            net: net_rates(before.1, after.1, seconds),
        }
    }

    /// Averages since boot from the counters of one moment (all an offline tree can give).
    pub fn since_boot(now: &CounterSample, net: &NetCounters, uptime_s: f64) -> Load {
        Load {
            source: LoadSource::SinceBoot,
            seconds: uptime_s,
            cpu: rates(&now.boot_baseline(), now, uptime_s, None),
            net: net_rates(&net.boot_baseline(), net, uptime_s),
        }
    }
}

/// One moment's counters, the per-CPU files and the namespace's net counters, and when they were
/// read: the one load sampler. The doctor reads two of them a sample apart; the agent keeps each
/// client's previous one and reads the next at its next scrape. Both fall back to averages since
/// boot the same way.
#[derive(Debug, Clone)]
pub struct Reading {
    pub at: std::time::Instant,
    pub counters: CounterSample,
    pub net: NetCounters,
}

impl Reading {
    /// Reads the counters now. Without /proc/stat there is no sample (the error names it);
    /// every other file missing is a problem carried inside the sample.
    pub fn take(fs: &HostFs, at: std::time::Instant) -> netsteer_host::Result<Reading> {
        Ok(Reading {
            at,
            counters: read_sample(fs)?,
            net: read_net_counters(fs),
        })
    }

    /// The load over the next `d`: two reads `d` apart (`tune plan --sample`).
    pub fn sample(fs: &HostFs, d: std::time::Duration) -> netsteer_host::Result<Load> {
        let first = Reading::take(fs, std::time::Instant::now())?;
        std::thread::sleep(d);
        Ok(Reading::take(fs, std::time::Instant::now())?.since(&first))
    }

    /// What the two reads could not see, in the order they met it.
    pub fn problems(&self) -> impl Iterator<Item = &String> {
        self.counters.problems.iter().chain(&self.net.problems)
    }

    /// The rates over the interval since `earlier` (the clock's own interval, not a nominal one).
    pub fn since(&self, earlier: &Reading) -> Load {
        let seconds = self.at.saturating_duration_since(earlier.at).as_secs_f64();
        Load::sampled(
            (&earlier.counters, &earlier.net),
            (&self.counters, &self.net),
            seconds,
        )
    }

    /// Averages since boot (a tree's counters never move; a first scrape has no earlier read).
    /// The uptime comes from /proc/uptime, else from /proc/stat's ticks, and the note says why
    /// the second was used; a host with neither gives no load.
    pub fn since_boot(&self, fs: &HostFs) -> Result<(Load, Option<String>), String> {
        let (uptime, note) = match fs.read_parsed("/proc/uptime", parse_uptime) {
            Ok(u) => (Some(u), None),
            Err(e) => (
                self.counters.uptime_from_ticks(),
                Some(format!("{e} (uptime taken from /proc/stat ticks)")),
            ),
        };
        let uptime = uptime
            .filter(|u| *u > 0.0)
            .ok_or("no uptime: neither /proc/uptime nor /proc/stat ticks give one")?;
        Ok((Load::since_boot(&self.counters, &self.net, uptime), note))
    }
}

/// The application named with `--pid`.
pub type App = ProcessPlacement;

/// Receive-path stage latencies measured by `netsteer trace` over the doctor's sample: the
/// trace's own typed rows (`netsteer-trace-model`, no BPF in it), read by the rules as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub seconds: f64,
    pub stages: Vec<StageRow>,
}

pub use netsteer_trace_model::{Stage, StageRow};
