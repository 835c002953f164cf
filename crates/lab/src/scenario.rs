//! Scenarios as data: a TOML file names the topology, the workloads (netsteer's benchmark or a
//! real tool, side by side), the change (a `tune` profile), the duration and the repeats. The
//! repository ships `scenarios/*.toml`; a user's own file is loaded by path.

use crate::{LabError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// Seconds per workload run.
    pub duration_s: f64,
    /// Runs of each variant (before, after), alternated.
    pub repeats: u32,
    pub topology: Topology,
    pub workloads: Vec<Workload>,
    pub change: Change,
}

/// Two hosts, `client` and `server`, joined by one veth link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub queues: u32,
    /// CPU list the client's processes run on (taskset).
    pub client_cpus: String,
    pub server_cpus: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tool {
    /// `netsteer bench tcp-stream` (server in the server host, client in the client host).
    #[serde(rename = "netsteer-tcp-stream")]
    NetsteerTcpStream,
    /// iperf3 from Debian (`iperf3 -s -1` / `iperf3 -c -J`).
    #[serde(rename = "iperf3")]
    Iperf3,
    /// nginx (Debian `nginx-light`) serving a small static file, driven by wrk.
    #[serde(rename = "nginx-wrk")]
    NginxWrk,
    /// memcached driven by memcaslap (Debian `memcached`, `libmemcached-tools`).
    #[serde(rename = "memcached-memcaslap")]
    MemcachedMemcaslap,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::NetsteerTcpStream => "netsteer-tcp-stream",
            Tool::Iperf3 => "iperf3",
            Tool::NginxWrk => "nginx-wrk",
            Tool::MemcachedMemcaslap => "memcached-memcaslap",
        }
    }

    /// What a run of this tool measures: bits per second for the stream tools, requests per
    /// second for the applications.
    pub fn unit(self) -> &'static str {
        match self {
            Tool::NetsteerTcpStream | Tool::Iperf3 => "bit/s",
            Tool::NginxWrk | Tool::MemcachedMemcaslap => "requests/s",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub tool: Tool,
    /// Connections (streams, or the load generator's concurrent connections).
    pub flows: u32,
    /// Bytes per write of the stream tools (not used by the applications).
    #[serde(default)]
    pub write_size: Option<u32>,
    #[serde(default)]
    pub nodelay: bool,
}

/// The change between "before" and "after": `netsteer tune apply --profile P` on the server
/// host's link device, rolled back after every "after" run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub profile: String,
}

/// The directory of shipped scenarios: `NETSTEER_SCENARIOS`, else `scenarios/` of the source
/// tree this binary was built from.
pub fn shipped_dir() -> PathBuf {
    std::env::var_os("NETSTEER_SCENARIOS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios"))
}

/// The shipped scenarios' names, sorted.
pub fn list() -> Result<Vec<String>> {
    let dir = shipped_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|source| LabError::Io {
            what: format!("listing {}", dir.display()),
            source,
        })?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".toml").map(str::to_string)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// A shipped scenario by name, or a file by path (anything with a '/' or ending in .toml).
pub fn load(name_or_path: &str) -> Result<Scenario> {
    let path = if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        PathBuf::from(name_or_path)
    } else {
        shipped_dir().join(format!("{name_or_path}.toml"))
    };
    let meta = std::fs::metadata(&path).map_err(|source| LabError::Io {
        what: format!("scenario {}", path.display()),
        source,
    })?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(LabError::Invalid(format!(
            "scenario {}: not a regular file of at most 1 MiB",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| LabError::Io {
        what: format!("scenario {}", path.display()),
        source,
    })?;
    parse(&text).map_err(|e| LabError::Invalid(format!("scenario {}: {e}", path.display())))
}

/// Parses and checks a scenario's text.
pub fn parse(text: &str) -> std::result::Result<Scenario, String> {
    let s: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
    if !(s.duration_s.is_finite() && (0.2..=3600.0).contains(&s.duration_s)) {
        return Err(format!("duration_s {}: 0.2 to 3600", s.duration_s));
    }
    if !(1..=100).contains(&s.repeats) {
        return Err(format!("repeats {}: 1 to 100", s.repeats));
    }
    if !(1..=64).contains(&s.topology.queues) {
        return Err(format!("topology.queues {}: 1 to 64", s.topology.queues));
    }
    for (what, list) in [
        ("client_cpus", &s.topology.client_cpus),
        ("server_cpus", &s.topology.server_cpus),
    ] {
        netsteer_host::CpuSet::parse_list(list, None)
            .map_err(|e| format!("topology.{what} {list:?}: {e}"))?;
    }
    if s.workloads.is_empty() {
        return Err("no [[workloads]]".into());
    }
    for w in &s.workloads {
        let stream = matches!(w.tool, Tool::NetsteerTcpStream | Tool::Iperf3);
        if !(1..=1024).contains(&w.flows)
            || stream != w.write_size.is_some()
            || w.write_size.is_some_and(|n| !(1..=1 << 20).contains(&n))
        {
            return Err(format!(
                "workload {}: flows 1 to 1024, write_size 1 B to 1 MiB for the stream tools only",
                w.tool.name()
            ));
        }
    }
    if !["latency", "throughput", "balanced"].contains(&s.change.profile.as_str()) {
        return Err(format!(
            "change.profile {:?}: latency, throughput or balanced",
            s.change.profile
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_scenarios_parse() {
        let names = list().unwrap();
        assert!(names.contains(&"seed-003".to_string()), "{names:?}");
        for n in names {
            load(&n).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }

    #[test]
    fn bad_scenarios_say_what_is_wrong() {
        let good = std::fs::read_to_string(shipped_dir().join("seed-003.toml")).unwrap();
        assert!(parse(&good).is_ok());
        for (from, to, want) in [
            ("repeats = 3", "repeats = 0", "repeats 0"),
            ("duration_s = 5.0", "duration_s = 1e9", "duration_s"),
            ("queues = 1", "queues = 999", "queues 999"),
            ("client_cpus = \"0\"", "client_cpus = \"x\"", "client_cpus"),
            ("profile = \"throughput\"", "profile = \"fast\"", "profile"),
            ("flows = 6", "flows = 0", "flows"),
            ("tool = \"iperf3\"", "tool = \"netperf\"", "netperf"),
            ("queues = 1", "queues = 1\nextra = 1", "extra"),
        ] {
            let e = parse(&good.replacen(from, to, 1)).unwrap_err();
            assert!(e.contains(want), "{from} -> {to}: {e}");
        }
        assert!(load("/nonexistent/x.toml").is_err());
    }
}
