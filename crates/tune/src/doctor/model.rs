//! What doctor says, as data: the JSON of `netsteer doctor --json` is these types serialized.

use netsteer_host::process::ProcessPlacement;
use netsteer_host::sample::{CounterSample, NetCounters, NetRates, Rates, net_rates, rates};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        })
    }
}

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

/// The CPUs, IRQs, devices and queues a finding is about, for programs (the evidence says the
/// same in words).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subjects {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub irqs: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// `eth0/rx-0`, `eth2/tx-3`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<String>,
}

impl Subjects {
    /// A finding about one device and nothing else.
    pub fn device(name: &str) -> Subjects {
        Subjects {
            devices: vec![name.to_string()],
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fix {
    /// The change in one sentence.
    pub summary: String,
    /// Exact commands: file writes, `sysctl -w`, `ethtool` settings, in order.
    pub steps: Vec<String>,
    /// The `netsteer tune` invocation that makes this change.
    pub tune: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier (`softirq-hot-cpu`); see [`crate::doctor::RULES`].
    pub id: String,
    pub severity: Severity,
    pub title: String,
    /// The numbers behind the finding, one statement a line.
    pub evidence: Vec<String>,
    /// The mechanism, in one or two sentences.
    pub why: String,
    pub fix: Fix,
    pub subjects: Subjects,
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

/// The application named with `--pid`.
pub type App = ProcessPlacement;
