//! The messages of `netsteer bench udp-echo`, as printed with `--json` (one object per line)
//! and as human lines. Every object has `"type"` (`interval`, `summary`, `error`), `"bench":
//! "udp-echo"` and `"role"` (`client`, `server`). Latencies are integer nanoseconds.

pub use crate::report::{ErrorMessage, Kind, Role};
use crate::report::{Message, us};
use crate::stats::{LatencySummary, MeanDev, Spread};
use serde::{Deserialize, Serialize};

pub const BENCH: &str = "udp-echo";

/// One interval of one target, all its flows together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientInterval {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub target: String,
    /// Seconds from the end of the warm-up to the end of this interval.
    pub t_s: f64,
    pub interval_s: f64,
    pub sent: u64,
    pub received: u64,
    /// Datagrams whose echo did not come back within `--timeout`.
    pub lost: u64,
    /// Round trips per second.
    pub pps: f64,
    /// Round-trip time; absent when nothing came back.
    pub latency_ns: Option<LatencySummary>,
    /// Kernel receive stamp → the application holding the datagram (seed 000's `packet=`).
    pub rx_delivery_ns: Option<MeanDev>,
    /// The application's send call → the kernel's transmit stamp.
    pub tx_send_ns: Option<MeanDev>,
    /// CPUs where the kernel processed the echoes (SO_INCOMING_CPU, last packet per flow).
    pub incoming_cpus: Vec<u32>,
    /// CPUs the client threads ran on.
    pub client_cpus: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientSummary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub target: String,
    /// Measured time (warm-up excluded).
    pub duration_s: f64,
    pub flows: usize,
    pub size: usize,
    /// `block`, `spin` or `busy-poll`.
    pub wait: String,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    /// Echoes that came back after their datagram was given up (out of order).
    pub reordered: u64,
    pub duplicated: u64,
    /// Echoes that were not what was sent (length, header, checksum or filler).
    pub corrupted: u64,
    pub send_errors: u64,
    pub pps: f64,
    /// Exact over the whole run (HDR histogram, 3 significant digits).
    pub latency_ns: Option<LatencySummary>,
    /// How stable the run was: min, median and max of the per-interval p50s.
    pub interval_p50_ns: Option<Spread<u64>>,
    pub rx_delivery_ns: Option<LatencySummary>,
    pub tx_send_ns: Option<LatencySummary>,
    /// With `--timestamp`: whether the NIC gave hardware stamps (loopback and veth never do).
    pub hardware_timestamps: Option<bool>,
    pub incoming_cpus: Vec<u32>,
    pub client_cpus: Vec<u32>,
    /// SO_INCOMING_NAPI_ID of the last echo: 0 means no NAPI, so busy polling cannot work.
    pub napi_id: Option<u32>,
    /// Round trips completed during `--warmup` (in no other count): with `received`, every
    /// round trip of the process, to price it per round trip from its CPU time.
    #[serde(default)]
    pub warmup_round_trips: u64,
    pub notes: Vec<String>,
    /// The AF_XDP path's attach and bind modes and XDP_STATISTICS (`--xdp` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp: Option<super::xdp::XdpSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInterval {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub t_s: f64,
    pub interval_s: f64,
    pub received: u64,
    pub echoed: u64,
    pub pps: f64,
    pub bytes: u64,
    pub empty: u64,
    pub truncated: u64,
    pub send_errors: u64,
    /// Datagrams not answered because a rate limit was reached.
    #[serde(default)]
    pub rate_limited: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSummary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub listen: String,
    pub threads: usize,
    pub duration_s: f64,
    pub received: u64,
    pub echoed: u64,
    pub bytes: u64,
    pub empty: u64,
    pub truncated: u64,
    pub send_errors: u64,
    /// Datagrams not answered because a rate limit was reached.
    #[serde(default)]
    pub rate_limited: u64,
    /// Answers per second allowed per source address and in all (None: unlimited).
    #[serde(default)]
    pub limit_per_source_pps: Option<u32>,
    #[serde(default)]
    pub limit_global_pps: Option<u32>,
    /// How the server threads waited (`block`, `spin`, `busy-poll`, `epoll`, `epoll-busy`).
    #[serde(default)]
    pub wait: String,
    /// User + system CPU time of the server threads over the run (getrusage per thread), µs:
    /// what a wait mode costs (softirq work on their CPUs is not in it).
    #[serde(default)]
    pub cpu_us: u64,
    /// The AF_XDP path's attach and bind modes and XDP_STATISTICS (`--xdp` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp: Option<super::xdp::XdpSummary>,
}

impl ServerSummary {
    /// CPU µs per echoed datagram.
    pub fn cpu_us_per_echo(&self) -> Option<f64> {
        (self.echoed > 0).then(|| self.cpu_us as f64 / self.echoed as f64)
    }
}

fn pps_limit(l: Option<u32>) -> String {
    l.map_or("unlimited".into(), |v| format!("{v}/s"))
}

fn cpus(v: &[u32]) -> String {
    if v.is_empty() {
        "?".into()
    } else {
        v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    }
}

impl Message for ClientInterval {
    fn human(&self) -> Vec<String> {
        let mut line = format!("{} pps={:>7.0}", self.target, self.pps);
        match &self.latency_ns {
            Some(l) => {
                line += &format!(
                    " avg={} dev={} min={} p50={} p99={} p99.9={} max={}",
                    us(l.mean),
                    us(l.stdev),
                    us(l.min),
                    us(l.p50),
                    us(l.p99),
                    us(l.p999),
                    us(l.max)
                )
            }
            None => line += " (no echoes)",
        }
        line += &format!(" lost={}", self.lost);
        if let Some(p) = &self.rx_delivery_ns {
            line += &format!(" packet={}/{}", us(p.mean), us(p.stdev));
        }
        if let Some(t) = &self.tx_send_ns {
            line += &format!(" send={}", us(t.mean));
        }
        line += &format!(
            " rx-cpu={} cpu={}",
            cpus(&self.incoming_cpus),
            cpus(&self.client_cpus)
        );
        vec![line]
    }
}

impl Message for ClientSummary {
    fn human(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "--- {} summary: {:.2} s, {} flow(s), {} B, wait {}: sent {} received {} lost {} reordered {} duplicated {} corrupted {} send-errors {} ({:.0} round trips/s)",
            self.target,
            self.duration_s,
            self.flows,
            self.size,
            self.wait,
            self.sent,
            self.received,
            self.lost,
            self.reordered,
            self.duplicated,
            self.corrupted,
            self.send_errors,
            self.pps
        )];
        let pct = |l: &LatencySummary| {
            format!(
                "min={} p50={} p90={} p99={} p99.9={} max={} mean={} stdev={}",
                us(l.min),
                us(l.p50),
                us(l.p90),
                us(l.p99),
                us(l.p999),
                us(l.max),
                us(l.mean),
                us(l.stdev)
            )
        };
        if let Some(l) = &self.latency_ns {
            lines.push(format!("rtt:         {}", pct(l)));
        }
        if let Some(s) = &self.interval_p50_ns {
            lines.push(format!(
                "interval p50: min={} median={} max={}",
                us(s.min),
                us(s.median),
                us(s.max)
            ));
        }
        if let Some(l) = &self.rx_delivery_ns {
            lines.push(format!(
                "rx delivery: {}  (kernel RX stamp -> application)",
                pct(l)
            ));
        }
        if let Some(l) = &self.tx_send_ns {
            lines.push(format!(
                "tx send:     {}  (send call -> kernel TX stamp)",
                pct(l)
            ));
        }
        lines.push(format!(
            "cpus: kernel processed echoes on {}, client ran on {}{}",
            cpus(&self.incoming_cpus),
            cpus(&self.client_cpus),
            self.napi_id
                .map(|n| format!(", napi id {n}"))
                .unwrap_or_default()
        ));
        lines.extend(self.notes.iter().map(|n| format!("note: {n}")));
        lines
    }
}

impl Message for ServerInterval {
    fn human(&self) -> Vec<String> {
        vec![format!(
            "server pps={:>7.0} received={} echoed={} bytes={} empty={} truncated={} send-errors={} rate-limited={}",
            self.pps,
            self.received,
            self.echoed,
            self.bytes,
            self.empty,
            self.truncated,
            self.send_errors,
            self.rate_limited
        )]
    }
}

impl Message for ServerSummary {
    fn human(&self) -> Vec<String> {
        vec![format!(
            "--- server {} ({} thread(s), wait {}) summary: {:.2} s, received {} echoed {} bytes {} empty {} truncated {} send-errors {} rate-limited {} (limits: {} per source, {} in all); CPU {:.3} s{}",
            self.listen,
            self.threads,
            self.wait,
            self.duration_s,
            self.received,
            self.echoed,
            self.bytes,
            self.empty,
            self.truncated,
            self.send_errors,
            self.rate_limited,
            pps_limit(self.limit_per_source_pps),
            pps_limit(self.limit_global_pps),
            self.cpu_us as f64 / 1e6,
            self.cpu_us_per_echo()
                .map_or(String::new(), |c| format!(" ({c:.2} µs per echo)")),
        )]
    }
}
