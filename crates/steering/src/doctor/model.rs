//! What doctor says, as data: the JSON of `netsteer doctor --json` is these types serialized.

pub use crate::model::load::{App, Goal, Load, LoadSource};
use serde::{Deserialize, Serialize};
use std::fmt;

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
