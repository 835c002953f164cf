//! The messages of `netsteer bench tcp-stream` and `netsteer bench tcp-rr`, as printed with
//! `--json` (one object per line) and as human lines. Every object has `"type"` (`interval`,
//! `summary`, `error`), `"bench"` (`tcp-stream` or `tcp-rr`) and `"role"`.

use crate::report::{Kind, Message, Role, us};
use crate::stats::{LatencySummary, Spread};
use crate::tcp::cost::SideCost;
use serde::{Deserialize, Serialize};

/// One flow over an interval or over the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRate {
    pub flow: u32,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: u64,
}

/// A stream interval, measured at the sender (bytes written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInterval {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub t_s: f64,
    pub interval_s: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: u64,
    pub flows: Vec<FlowRate>,
}

/// A pair of client-side and server-side figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sides<T> {
    pub client: T,
    pub server: T,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verify {
    /// True when every byte arrived as sent.
    pub ok: bool,
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSummary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub target: String,
    pub duration_s: f64,
    pub flows: u32,
    pub write_size: u32,
    /// MSS the sender used (TCP_INFO snd_mss of the first flow).
    pub mss: Option<u32>,
    pub congestion: Option<String>,
    /// What the receiver got, over the measured time.
    pub bits_per_second: f64,
    pub bytes: u64,
    /// What the sender wrote.
    pub sent_bytes: u64,
    pub retransmits: u64,
    /// Per flow, at the receiver.
    pub per_flow: Vec<FlowRate>,
    /// Jain's fairness index of the per-flow rates (1 = equal shares).
    pub fairness: f64,
    /// User + system CPU of each side's benchmark threads per MiB received.
    pub cpu_us_per_mb: Sides<Option<f64>>,
    /// Softirq time of the CPUs each side's threads ran on, per MiB.
    pub softirq_us_per_mb: Sides<Option<f64>>,
    pub context_switches: Sides<u64>,
    /// Voluntary context switches of each side's benchmark threads per MiB received: how often
    /// they slept. Each sleep ends in a wake-up, which the CPU that queued the data pays for
    /// (a receiver's in the softirq, `sock_def_readable`), so on a path whose softirq runs on
    /// the sender's CPU (veth, loopback) this prices a receiver's threading model. Absent from
    /// older clients.
    #[serde(default)]
    pub sleeps_per_mb: Sides<Option<f64>>,
    pub cost: Sides<SideCost>,
    /// How each side drove its flows (`threads` or `poll`; the server's is absent from older
    /// servers).
    #[serde(default)]
    pub engine: Sides<Option<crate::tcp::Engine>>,
    /// Zero-copy receive: bytes mapped, copied into the copy buffer, read with read(2).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rx_mapped_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rx_copybuf_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rx_read_bytes: Option<u64>,
    /// MSG_ZEROCOPY: send calls completed, and how many the kernel copied after all.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub zc_send_completions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub zc_send_copied: Option<u64>,
    /// With `--verify`.
    pub verify: Option<Verify>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrInterval {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub t_s: f64,
    pub interval_s: f64,
    pub transactions: u64,
    pub transactions_per_second: f64,
    pub latency_ns: Option<LatencySummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrSummary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub target: String,
    pub duration_s: f64,
    pub flows: u32,
    pub request_size: u32,
    pub response_size: u32,
    pub pipeline: u32,
    pub wait: String,
    pub transactions: u64,
    pub transactions_per_second: f64,
    /// Every transaction of the run, the warm-up's included: what process-level CPU time
    /// (as a script measures for an anchor tool beside this one) divides by.
    #[serde(default)]
    pub all_transactions: u64,
    /// Request sent → whole response received, exact over the run (HDR, 3 significant digits).
    pub latency_ns: Option<LatencySummary>,
    /// Min, median and max of the per-interval p50s.
    pub interval_p50_ns: Option<Spread<u64>>,
    /// CPU (user + system) of each side's threads per transaction, µs.
    pub cpu_us_per_transaction: Sides<Option<f64>>,
    pub context_switches: Sides<u64>,
    pub cost: Sides<SideCost>,
    pub notes: Vec<String>,
}

/// The server's line for each test it served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerTest {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub peer: String,
    pub test_id: u64,
    pub flows: u32,
    pub duration_s: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub transactions: u64,
    /// Connections refused so far (bad preamble, unknown test, silence, over the limit).
    pub rejected_connections: u64,
    pub errors: Vec<String>,
}

/// The server's last line when it stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSummary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub listen: String,
    pub tests: u64,
    pub rejected_connections: u64,
}

impl Message for ServerSummary {
    fn human(&self) -> Vec<String> {
        vec![format!(
            "--- server {}: {} test(s) served, {} connection(s) refused",
            self.listen, self.tests, self.rejected_connections
        )]
    }
}

fn gbps(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else {
        format!("{:.1} Mbit/s", bps / 1e6)
    }
}

fn opt_f(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn opt_f2(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

fn latency(l: &Option<LatencySummary>) -> String {
    match l {
        Some(l) => format!(
            "avg={} dev={} min={} p50={} p90={} p99={} p99.9={} max={}",
            us(l.mean),
            us(l.stdev),
            us(l.min),
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            us(l.max)
        ),
        None => "(no transactions)".into(),
    }
}

impl Message for StreamInterval {
    fn human(&self) -> Vec<String> {
        let mut line = format!(
            "{:>7.2}s {:>14} retr={}",
            self.t_s,
            gbps(self.bits_per_second),
            self.retransmits
        );
        if self.flows.len() > 1 {
            let per: Vec<String> = self
                .flows
                .iter()
                .map(|f| format!("{:.2}", f.bits_per_second / 1e9))
                .collect();
            line += &format!(" flows(Gbit/s)=[{}]", per.join(" "));
        }
        vec![line]
    }
}

impl Message for StreamSummary {
    fn human(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "--- {} tcp-stream: {:.2} s, {} flow(s) of {} B writes: {} received ({} bytes, {} sent), retransmits {}, fairness {:.3}",
            self.target,
            self.duration_s,
            self.flows,
            self.write_size,
            gbps(self.bits_per_second),
            self.bytes,
            self.sent_bytes,
            self.retransmits,
            self.fairness
        )];
        lines.push(format!(
            "cpu us/MB: client {} server {}; softirq us/MB: client {} server {}; context switches: client {} server {}; sleeps/MB: client {} server {}",
            opt_f(self.cpu_us_per_mb.client),
            opt_f(self.cpu_us_per_mb.server),
            opt_f(self.softirq_us_per_mb.client),
            opt_f(self.softirq_us_per_mb.server),
            self.context_switches.client,
            self.context_switches.server,
            opt_f2(self.sleeps_per_mb.client),
            opt_f2(self.sleeps_per_mb.server)
        ));
        if let (Some(m), Some(c), Some(r)) = (
            self.rx_mapped_bytes,
            self.rx_copybuf_bytes,
            self.rx_read_bytes,
        ) {
            let total = (m + c + r).max(1) as f64;
            lines.push(format!(
                "zero-copy receive: mapped {:.4}% copy-buffer {:.4}% read {:.4}%",
                m as f64 * 100.0 / total,
                c as f64 * 100.0 / total,
                r as f64 * 100.0 / total
            ));
        }
        if let (Some(n), Some(c)) = (self.zc_send_completions, self.zc_send_copied) {
            lines.push(format!(
                "MSG_ZEROCOPY: {n} send calls completed, {c} copied by the kernel"
            ));
        }
        let soft: Vec<String> = self
            .cost
            .server
            .per_cpu
            .iter()
            .map(|c| {
                format!(
                    "cpu{} {:.1}%soft {}/s NET_RX",
                    c.cpu,
                    c.soft_pct,
                    c.net_rx_per_s.map_or("?".into(), |r| format!("{r:.0}"))
                )
            })
            .collect();
        if !soft.is_empty() {
            lines.push(format!("receiver softirq: {}", soft.join(", ")));
        }
        if let Some(v) = &self.verify {
            lines.push(if v.ok {
                "verify: every byte arrived as sent".into()
            } else {
                format!("verify FAILED: {}", v.problems.join("; "))
            });
        }
        lines.extend(self.notes.iter().map(|n| format!("note: {n}")));
        lines
    }
}

impl Message for RrInterval {
    fn human(&self) -> Vec<String> {
        vec![format!(
            "{:>7.2}s tps={:>8.0} {}",
            self.t_s,
            self.transactions_per_second,
            latency(&self.latency_ns)
        )]
    }
}

impl Message for RrSummary {
    fn human(&self) -> Vec<String> {
        let mut lines = vec![
            format!(
                "--- {} tcp-rr: {:.2} s, {} flow(s), {}/{} B, pipeline {}, wait {}: {} transactions ({:.0}/s)",
                self.target,
                self.duration_s,
                self.flows,
                self.request_size,
                self.response_size,
                self.pipeline,
                self.wait,
                self.transactions,
                self.transactions_per_second
            ),
            latency(&self.latency_ns),
            format!(
                "cpu us/transaction: client {} server {}; context switches: client {} server {}",
                self.cpu_us_per_transaction
                    .client
                    .map_or("-".into(), |v| format!("{v:.2}")),
                self.cpu_us_per_transaction
                    .server
                    .map_or("-".into(), |v| format!("{v:.2}")),
                self.context_switches.client,
                self.context_switches.server
            ),
        ];
        if let Some(s) = &self.interval_p50_ns {
            lines.push(format!(
                "interval p50: min {} median {} max {}",
                us(s.min),
                us(s.median),
                us(s.max)
            ));
        }
        lines.extend(self.notes.iter().map(|n| format!("note: {n}")));
        lines
    }
}

impl Message for ServerTest {
    fn human(&self) -> Vec<String> {
        let mut line = format!(
            "test {:016x} from {}: {} {} flow(s), {:.2} s",
            self.test_id, self.peer, self.bench, self.flows, self.duration_s
        );
        if self.bench == "tcp-rr" {
            line += &format!(", {} transactions", self.transactions);
        } else {
            line += &format!(", {} ({} bytes)", gbps(self.bits_per_second), self.bytes);
        }
        if self.rejected_connections > 0 {
            line += &format!(", {} connections refused so far", self.rejected_connections);
        }
        let mut lines = vec![line];
        lines.extend(self.errors.iter().map(|e| format!("  error: {e}")));
        lines
    }
}

/// Jain's fairness index: (Σx)² / (n·Σx²); 1 when all flows got the same.
pub fn jain(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let sum: f64 = values.iter().sum();
    let sq: f64 = values.iter().map(|v| v * v).sum();
    if n == 0.0 || sq == 0.0 {
        1.0
    } else {
        sum * sum / (n * sq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), 1.0);
        assert!((jain(&[10.0, 0.0]) - 0.5).abs() < 1e-12);
        assert_eq!(jain(&[]), 1.0);
    }
}
