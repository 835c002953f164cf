//! Scenarios as data: a TOML file names the topology, the workloads (netsteer's benchmark or a
//! real tool, side by side), the change (a `tune` profile), the duration and the repeats. The
//! repository ships `scenarios/*.toml`; a user's own file is loaded by path.

use crate::{LabError, Result};
use netsteer_steering::tune::{Knob, PlanOptions, Profile};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// Seconds per workload run.
    pub duration_s: f64,
    /// Runs of each variant, alternated (A B C A B C ...).
    pub repeats: u32,
    /// What this scenario cannot show on a lab of namespaces (said in the report, not hidden).
    #[serde(default)]
    pub limits: Vec<String>,
    pub topology: Topology,
    /// The QEMU guests `lab run --vm` boots for this scenario (seed-000's ladder): their NIC
    /// model and kernel series; `--nic` and `--kernel` override.
    #[serde(default)]
    pub vm: Option<VmTopology>,
    pub workloads: Vec<Workload>,
    /// The states compared; the first is the baseline every other one is decided against.
    pub variants: Vec<Variant>,
}

/// Two hosts, `client` and `server`, joined by one veth link (`v0a` in the client, `v0b` in
/// the server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub queues: u32,
    /// CPU list the client's processes run on (taskset).
    pub client_cpus: String,
    pub server_cpus: String,
    /// Keep the client's receive work on the client's CPUs (RPS on `v0a`). The client stands
    /// for another machine: without this, a veth processes the server's answers on the
    /// server's CPU (the sender's) and mixes them into the server's picture.
    #[serde(default)]
    pub client_rps: bool,
    /// The link's MTU (default the veth's 1500).
    #[serde(default)]
    pub mtu: Option<u32>,
}

/// The guests of a `--vm` run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmTopology {
    /// `virtio`, `virtio-rss` or `igb`.
    #[serde(default)]
    pub nic: crate::vm::NicModel,
    /// The guest kernel's series (`6.1`, `6.12`); default: the apt candidate.
    #[serde(default)]
    pub kernel: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tool {
    /// `netsteer bench tcp-stream`, called as a library inside the two hosts.
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
    /// `netsteer bench udp-echo`, called as a library, with kernel timestamps.
    #[serde(rename = "netsteer-udp-echo")]
    NetsteerUdpEcho,
    /// sockperf ping-pong (Debian `sockperf`), full round trips.
    #[serde(rename = "sockperf")]
    Sockperf,
    /// `netsteer bench netchannel` (experiments E1-E4), called as a library between the hosts.
    #[serde(rename = "netsteer-netchannel")]
    NetsteerNetchannel,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::NetsteerTcpStream => "netsteer-tcp-stream",
            Tool::Iperf3 => "iperf3",
            Tool::NginxWrk => "nginx-wrk",
            Tool::MemcachedMemcaslap => "memcached-memcaslap",
            Tool::NetsteerUdpEcho => "netsteer-udp-echo",
            Tool::Sockperf => "sockperf",
            Tool::NetsteerNetchannel => "netsteer-netchannel",
        }
    }

    /// What a run of this tool measures: bits per second for the stream tools, requests per
    /// second for the applications, the median round trip for the echo tools.
    pub fn unit(self) -> Unit {
        match self {
            Tool::NetsteerTcpStream | Tool::Iperf3 | Tool::NetsteerNetchannel => {
                Unit::BitsPerSecond
            }
            Tool::NginxWrk | Tool::MemcachedMemcaslap => Unit::RequestsPerSecond,
            Tool::NetsteerUdpEcho | Tool::Sockperf => Unit::Nanoseconds,
        }
    }

    fn stream(self) -> bool {
        matches!(self, Tool::NetsteerTcpStream | Tool::Iperf3)
    }

    fn echo(self) -> bool {
        matches!(self, Tool::NetsteerUdpEcho | Tool::Sockperf)
    }
}

/// What a tool's runs measure, carried as a type from the tool to the verdict (the JSON keeps
/// the unit's text: "bit/s", "requests/s", "ns").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    #[serde(rename = "bit/s")]
    BitsPerSecond,
    #[serde(rename = "requests/s")]
    RequestsPerSecond,
    /// A round trip's median, in nanoseconds.
    #[serde(rename = "ns")]
    Nanoseconds,
}

impl Unit {
    /// How the experiment judges values of this unit: more is better for a rate, less for a
    /// round trip.
    pub fn metric(self) -> netsteer_experiment::experiment::Metric {
        use netsteer_experiment::experiment::Metric;
        match self {
            Unit::BitsPerSecond => Metric::BitsPerSecond,
            Unit::RequestsPerSecond => Metric::TransactionsPerSecond,
            Unit::Nanoseconds => Metric::P50,
        }
    }

    /// A value in this unit, scaled for reading: Gbit/s for bit/s, µs for ns, plain for
    /// requests/s.
    pub fn show(self, v: f64) -> String {
        match self {
            Unit::BitsPerSecond => format!("{:.3} Gbit/s", v / 1e9),
            Unit::Nanoseconds => format!("{:.1} µs", v / 1e3),
            Unit::RequestsPerSecond => format!("{v:.0} requests/s"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub tool: Tool,
    /// The workload's name in results (default: the tool's); needed when one scenario runs a
    /// tool twice (say 1 and 16 flows), and then unique.
    #[serde(default)]
    pub label: Option<String>,
    /// Connections (streams, the load generator's connections, echo flows).
    #[serde(default = "one")]
    pub flows: u32,
    /// Bytes per write of the stream tools.
    #[serde(default)]
    pub write_size: Option<u32>,
    /// Datagram bytes of the echo tools (default 32).
    #[serde(default)]
    pub size: Option<u32>,
    #[serde(default)]
    pub nodelay: bool,
    /// netsteer-tcp-stream: receive with TCP_ZEROCOPY_RECEIVE (mapped pages) instead of copies.
    #[serde(default)]
    pub zerocopy_recv: bool,
    /// netsteer-tcp-stream: MSG_ZEROCOPY sends (the receiver can map only whole pages).
    #[serde(default)]
    pub zerocopy_send: bool,
    /// netsteer-tcp-stream: TCP_MAXSEG (4108 puts 4096 payload bytes in a segment with
    /// timestamps, what mapping needs).
    #[serde(default)]
    pub mss: Option<u32>,
    /// netsteer-netchannel: which experiments (default E1 and E4).
    #[serde(default)]
    pub experiments: Vec<String>,
}

impl Workload {
    /// The name its runs and rows carry.
    pub fn label(&self) -> &str {
        self.label.as_deref().unwrap_or(self.tool.name())
    }
}

fn one() -> u32 {
    1
}

/// How the echo tools wait for a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wait {
    /// Sleep in the receive call until the softirq wakes the thread.
    Block,
    /// Non-blocking receive in a loop (sockperf `--nonblocked`).
    Spin,
    /// Blocking receive with SO_BUSY_POLL (sockperf `--lls`).
    BusyPoll,
}

/// One state of the system: a `tune` change in the server host (a profile, explicit knobs,
/// or both) and how the echo tools wait. An empty variant is the host as the lab made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// `netsteer tune apply --profile` on the server's `v0b`.
    #[serde(default)]
    pub profile: Option<String>,
    /// `--cpus`: the CPUs that profile may give packet work to.
    #[serde(default)]
    pub cpus: Option<String>,
    /// Explicit knobs, `PATH=VALUE` (`--set`), in the server host.
    #[serde(default)]
    pub set: Vec<String>,
    /// Echo tools: how to wait (default block).
    #[serde(default)]
    pub wait: Option<Wait>,
    /// Echo tools with `wait = "busy-poll"`: SO_BUSY_POLL in µs (default 50).
    #[serde(default)]
    pub busy_poll_us: Option<u32>,
    /// netsteer-tcp-stream: receive with TCP_ZEROCOPY_RECEIVE (overrides the workload's).
    #[serde(default)]
    pub zerocopy_recv: Option<bool>,
}

impl Variant {
    /// True when entering it changes the server host (a `tune apply` to roll back).
    pub fn changes_host(&self) -> bool {
        self.profile.is_some() || !self.set.is_empty()
    }

    /// What the tune library plans for this variant on the server's `dev` (the scenario was
    /// validated when loaded, so only a changed file fails here).
    pub fn plan_options(&self, dev: &str) -> std::result::Result<PlanOptions, String> {
        let profile = match &self.profile {
            Some(p) => p.parse::<Profile>()?,
            None => Profile::None,
        };
        let cpus = self
            .cpus
            .as_deref()
            .map(|c| {
                netsteer_host::CpuSet::parse_list(c, None).map_err(|e| format!("cpus {c:?}: {e}"))
            })
            .transpose()?;
        let knobs = self
            .set
            .iter()
            .map(|k| Knob::parse(k).map_err(|e| format!("set: {e}")))
            .collect::<std::result::Result<_, _>>()?;
        Ok(PlanOptions {
            devices: vec![dev.to_string()],
            cpus,
            live: true,
            knobs,
            ..PlanOptions::for_profile(profile)
        })
    }

    /// How the variant reads as a change, for reports.
    pub fn describe(&self, dev: &str) -> String {
        let mut parts = Vec::new();
        if self.changes_host() {
            let mut t = format!(
                "tune {dev}: profile {}",
                self.profile.as_deref().unwrap_or("none")
            );
            if let Some(c) = &self.cpus {
                t.push_str(&format!(" on CPUs {c}"));
            }
            for k in &self.set {
                t.push_str(&format!(", set {k}"));
            }
            parts.push(t);
        }
        if let Some(w) = self.wait {
            parts.push(match w {
                Wait::Block => "echo tools block".into(),
                Wait::Spin => "echo tools spin".into(),
                Wait::BusyPoll => format!(
                    "echo tools busy-poll {} µs",
                    self.busy_poll_us.unwrap_or(50)
                ),
            });
        }
        if let Some(z) = self.zerocopy_recv {
            parts.push(if z {
                "netsteer-tcp-stream receives zero-copy".into()
            } else {
                "netsteer-tcp-stream receives by copying".into()
            });
        }
        if parts.is_empty() {
            "the lab as made (no change)".into()
        } else {
            parts.join("; ")
        }
    }
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
    if s.topology.mtu.is_some_and(|m| !(576..=65535).contains(&m)) {
        return Err("topology.mtu: 576 to 65535".into());
    }
    if s.workloads.is_empty() {
        return Err("no [[workloads]]".into());
    }
    let mut labels = std::collections::BTreeSet::new();
    for w in &s.workloads {
        let name = w.label();
        if name.is_empty()
            || name.len() > 40
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(format!(
                "workload label {name:?}: 1-40 letters, digits, '-', '_' or '.'"
            ));
        }
        if !labels.insert(name) {
            return Err(format!(
                "two workloads named {name}: give one a label = \"...\""
            ));
        }
        if !(1..=1024).contains(&w.flows) {
            return Err(format!("workload {name}: flows {}: 1 to 1024", w.flows));
        }
        if w.tool.stream() != w.write_size.is_some()
            || w.write_size.is_some_and(|n| !(1..=1 << 20).contains(&n))
        {
            return Err(format!(
                "workload {name}: write_size 1 B to 1 MiB, for the stream tools only"
            ));
        }
        if w.size.is_some() && !w.tool.echo() || w.size.is_some_and(|n| !(32..=65507).contains(&n))
        {
            return Err(format!(
                "workload {name}: size 32 to 65507 B, for the echo tools only"
            ));
        }
        if (w.zerocopy_recv || w.zerocopy_send || w.mss.is_some())
            && w.tool != Tool::NetsteerTcpStream
        {
            return Err(format!(
                "workload {name}: zerocopy_recv, zerocopy_send and mss are for netsteer-tcp-stream"
            ));
        }
        for e in &w.experiments {
            if w.tool != Tool::NetsteerNetchannel || !["E1", "E2", "E3", "E4"].contains(&e.as_str())
            {
                return Err(format!(
                    "workload {name}: experiments {e:?}: E1-E4, for netsteer-netchannel only"
                ));
            }
        }
    }
    if s.variants.is_empty() || s.variants.len() > 16 {
        return Err("[[variants]]: 1 to 16 (the first is the baseline)".into());
    }
    for (i, v) in s.variants.iter().enumerate() {
        if v.name.is_empty()
            || v.name.len() > 32
            || !v
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || s.variants[..i].iter().any(|o| o.name == v.name)
        {
            return Err(format!(
                "variant {:?}: a unique name of 1-32 letters, digits, '-' or '_'",
                v.name
            ));
        }
        if let Some(p) = &v.profile
            && !["latency", "throughput", "balanced"].contains(&p.as_str())
        {
            return Err(format!(
                "variant {}: profile {p:?}: latency, throughput or balanced",
                v.name
            ));
        }
        if let Some(c) = &v.cpus {
            if v.profile.is_none() {
                return Err(format!("variant {}: cpus needs a profile", v.name));
            }
            netsteer_host::CpuSet::parse_list(c, None)
                .map_err(|e| format!("variant {}: cpus {c:?}: {e}", v.name))?;
        }
        v.plan_options("v0b")
            .map_err(|e| format!("variant {}: {e}", v.name))?;
        if v.busy_poll_us
            .is_some_and(|u| !(1..=1_000_000).contains(&u))
        {
            return Err(format!("variant {}: busy_poll_us 1 to 1000000", v.name));
        }
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
            ("name = \"rps\"", "name = \"before\"", "unique name"),
            ("rx-0/rps_cpus=2", "../../../../etc/passwd=1", "'..'"),
            (
                "set = [\"/sys",
                "set = [\"/etc/passwd=1\", \"/sys",
                "not a knob",
            ),
            (
                "name = \"rps\"",
                "name = \"rps\"\ncpus = \"0\"\nwait = \"spin\"\nbusy_poll_us = 0",
                "busy_poll_us",
            ),
            (
                "write_size = 16",
                "write_size = 16\nsize = 64",
                "echo tools only",
            ),
            (
                "tool = \"iperf3\"",
                "tool = \"iperf3\"\nzerocopy_recv = true",
                "zerocopy",
            ),
            ("flows = 6", "flows = 0", "flows"),
            ("tool = \"iperf3\"", "tool = \"netperf\"", "netperf"),
            ("queues = 1", "queues = 1\nextra = 1", "extra"),
            (
                "tool = \"iperf3\"",
                "tool = \"netsteer-tcp-stream\"",
                "two workloads named netsteer-tcp-stream",
            ),
            (
                "tool = \"iperf3\"",
                "tool = \"iperf3\"\nlabel = \"a b\"",
                "workload label",
            ),
        ] {
            let e = parse(&good.replacen(from, to, 1)).unwrap_err();
            assert!(e.contains(want), "{from} -> {to}: {e}");
        }
        assert!(load("/nonexistent/x.toml").is_err());
        // One tool twice is fine once labelled apart; runs then carry the labels.
        let twice = good.replacen(
            "tool = \"iperf3\"",
            "tool = \"netsteer-tcp-stream\"\nlabel = \"netsteer-second\"",
            1,
        );
        let scn = parse(&twice).unwrap();
        let labels: Vec<&str> = scn.workloads.iter().map(Workload::label).collect();
        assert_eq!(labels, ["netsteer-tcp-stream", "netsteer-second"]);
    }
}
