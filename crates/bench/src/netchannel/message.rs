//! JSON Lines messages of `netsteer bench netchannel`: one summary per experiment, each with
//! `"type": "summary"`, `"bench": "netchannel"` and `"experiment"`.

use crate::report::{Kind, Message};
use crate::stats::LatencySummary;
pub use crate::stats::Spread;
use serde::{Deserialize, Serialize};

pub const BENCH: &str = "netchannel";

/// Where and how the experiments ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Online CPUs of the machine the run used (both "hosts" share them on loopback/veth).
    pub cores: usize,
    /// "loopback" or "veth".
    pub path: String,
    pub duration_s: f64,
    pub repeat: usize,
    /// Share of CPU time stolen by the hypervisor during the experiment (VM noise): the
    /// median over its runs, and the worst run.
    pub steal_pct: f64,
    #[serde(default)]
    pub steal_max_pct: f64,
    /// Set when steal in some run reached `STEAL_VOID_PCT`: the figures are not to be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub void: Option<String>,
    /// The CPUs the app threads were pinned to (by default the first two allowed).
    #[serde(default)]
    pub sender_cpu: Option<u32>,
    #[serde(default)]
    pub receiver_cpu: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E1Row {
    pub channels: u16,
    /// Receive copy workers (one pool per side).
    pub copy_workers: usize,
    /// Send copy workers per channel.
    pub send_copy_workers: usize,
    /// Median over the repeats.
    pub bits_per_second: f64,
    pub spread: Spread,
}

/// One MPTCP connection beside the others (`--mptcp`): the baseline for "one stream over N
/// connections" that the kernel offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MptcpRow {
    pub bits_per_second: f64,
    pub spread: Spread,
    /// Subflows beyond the first (fewest over the repeats; MPTCP_INFO mptcpi_subflows).
    pub extra_subflows: u8,
}

/// E1: one virtual socket, one application thread each side, vs channels × copy workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E1 {
    pub rows: Vec<E1Row>,
    /// One plain TCP connection, same writes and reads.
    pub tcp_bits_per_second: f64,
    pub tcp_spread: Spread,
    /// With `--mptcp`: one MPTCP connection, same writes and reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E2Row {
    pub channels: u16,
    pub bits_per_second: f64,
    pub messages_per_second: f64,
    pub spread: Spread,
}

/// E2: 4 KiB messages from one application thread vs channels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E2 {
    pub message_bytes: usize,
    pub rows: Vec<E2Row>,
    pub tcp_bits_per_second: f64,
    pub tcp_messages_per_second: f64,
    pub tcp_spread: Spread,
    /// With `--mptcp`: one MPTCP connection writing the same 4 KiB messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E3Row {
    /// "plain-tcp", "shared" or "isolated".
    pub config: String,
    /// The latency app's round trips, all repeats merged (first 100 of each run dropped).
    pub latency_ns: LatencySummary,
    /// p99 of each repeat.
    pub p99_spread: Spread,
    /// The bulk apps' total throughput (median over repeats).
    pub bits_per_second: f64,
}

/// E3: one latency app (4 KiB ping-pong) beside N bulk apps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E3 {
    pub bulk_apps: usize,
    pub message_bytes: usize,
    pub rows: Vec<E3Row>,
    /// shared p99 / isolated p99 (medians of the repeats' p99s).
    pub isolation_p99_gain: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E4Row {
    /// "inline" (the app thread writes frames itself) or "handoff" (the channel's I/O thread
    /// writes them).
    pub mode: String,
    pub bits_per_second: f64,
    /// CPUs busy during the run (all threads and softirq, both sides, from /proc/stat).
    pub cores_used: f64,
    pub bits_per_second_per_core: f64,
    pub spread: Spread,
}

/// E4: throughput per core against raw TCP, one channel, no copy workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E4 {
    pub rows: Vec<E4Row>,
    /// Of the "inline" row.
    pub bits_per_second_per_core: f64,
    pub tcp_bits_per_second: f64,
    pub tcp_cores_used: f64,
    pub tcp_bits_per_second_per_core: f64,
    pub tcp_spread: Spread,
    /// The median over the repeats of (inline per core / TCP per core) of the same repeat:
    /// TCP is measured just before and just after the inline run, and their mean taken.
    pub ratio: f64,
    /// Those per-repeat ratios.
    #[serde(default)]
    pub ratio_spread: Option<Spread>,
}

/// One recovery run: throughput before a channel is killed and after it was re-opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryRun {
    /// Received bits per second from the first tenth of the run to the kill.
    pub before_bits_per_second: f64,
    /// The lowest 100 ms window between the kill and the re-open.
    pub dip_bits_per_second: f64,
    /// From half a second after the re-open to the end.
    pub after_bits_per_second: f64,
    /// after / before.
    pub ratio: f64,
    /// From the kill until the connecting side had the channel back.
    pub reopen_ms: f64,
    /// Frames re-sent (both sides) because the killed channel had them.
    pub resent_frames: u64,
    /// The sender's and the receiver's byte counts (equal: nothing lost or duplicated).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// CPU time stolen by the hypervisor during the run, %.
    pub steal_pct: f64,
}

/// Recovery: one socket streams over N channels; one channel's connection is shut down at
/// a third of the run; the sender re-sends what it carried and the connecting side re-dials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recovery {
    pub channels: u16,
    pub runs: Vec<RecoveryRun>,
    /// after / before over the runs.
    pub ratio_spread: Spread,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "experiment")]
pub enum Result {
    E1(E1),
    E2(E2),
    E3(E3),
    E4(E4),
    Recovery(Recovery),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub setup: Setup,
    #[serde(flatten)]
    pub result: Result,
}

fn gbps(bps: f64) -> String {
    format!("{:.2} Gbit/s", bps / 1e9)
}

fn sp(s: &Spread) -> String {
    format!("[{:.2}..{:.2}]", s.min / 1e9, s.max / 1e9)
}

impl Message for Summary {
    fn human(&self) -> Vec<String> {
        let s = &self.setup;
        let head = format!(
            "netchannel {} on {} ({} cores, {:.0} s x {}, steal {:.1}%)",
            match &self.result {
                Result::E1(_) => "E1 single-socket throughput",
                Result::E2(_) => "E2 4 KiB messages",
                Result::E3(_) => "E3 latency isolation",
                Result::E4(_) => "E4 throughput per core",
                Result::Recovery(_) => "recovery from a killed channel",
            },
            s.path,
            s.cores,
            s.duration_s,
            s.repeat,
            s.steal_pct
        );
        let mut out = vec![head];
        if let Some(v) = &s.void {
            out.push(format!("  {v}"));
        }
        match &self.result {
            Result::E1(e) => {
                out.push(format!(
                    "  tcp (1 connection)                   {} {}",
                    gbps(e.tcp_bits_per_second),
                    sp(&e.tcp_spread)
                ));
                if let Some(m) = &e.mptcp {
                    out.push(format!(
                        "  mptcp (1 + {} subflows)              {} {}",
                        m.extra_subflows,
                        gbps(m.bits_per_second),
                        sp(&m.spread)
                    ));
                }
                for r in &e.rows {
                    out.push(format!(
                        "  channels {:>2} workers rx {:>2} tx {:>2}  {} {}",
                        r.channels,
                        r.copy_workers,
                        r.send_copy_workers,
                        gbps(r.bits_per_second),
                        sp(&r.spread)
                    ));
                }
            }
            Result::E2(e) => {
                out.push(format!(
                    "  tcp          {} {:.0} msg/s {}",
                    gbps(e.tcp_bits_per_second),
                    e.tcp_messages_per_second,
                    sp(&e.tcp_spread)
                ));
                if let Some(m) = &e.mptcp {
                    out.push(format!(
                        "  mptcp 1+{}   {} {:.0} msg/s {}",
                        m.extra_subflows,
                        gbps(m.bits_per_second),
                        m.bits_per_second / 8.0 / e.message_bytes as f64,
                        sp(&m.spread)
                    ));
                }
                for r in &e.rows {
                    out.push(format!(
                        "  channels {:>2}  {} {:.0} msg/s {}",
                        r.channels,
                        gbps(r.bits_per_second),
                        r.messages_per_second,
                        sp(&r.spread)
                    ));
                }
            }
            Result::E3(e) => {
                for r in &e.rows {
                    out.push(format!(
                        "  {:<10} p50 {} p99 {} p99.9 {}  bulk {}",
                        r.config,
                        crate::report::us(r.latency_ns.p50),
                        crate::report::us(r.latency_ns.p99),
                        crate::report::us(r.latency_ns.p999),
                        gbps(r.bits_per_second)
                    ));
                }
                out.push(format!(
                    "  isolation cuts p99 by {:.1}x",
                    e.isolation_p99_gain
                ));
            }
            Result::E4(e) => {
                out.push(format!(
                    "  tcp      {} on {:.2} cores = {} per core",
                    gbps(e.tcp_bits_per_second),
                    e.tcp_cores_used,
                    gbps(e.tcp_bits_per_second_per_core)
                ));
                for r in &e.rows {
                    out.push(format!(
                        "  {:<8} {} on {:.2} cores = {} per core",
                        r.mode,
                        gbps(r.bits_per_second),
                        r.cores_used,
                        gbps(r.bits_per_second_per_core)
                    ));
                }
                out.push(format!(
                    "  per-core ratio (inline / tcp before and after it) {:.3}{}",
                    e.ratio,
                    e.ratio_spread
                        .map(|s| format!(" [{:.3}..{:.3}]", s.min, s.max))
                        .unwrap_or_default()
                ));
            }
            Result::Recovery(e) => {
                for r in &e.runs {
                    out.push(format!(
                        "  {} channels: before {} dip {} after {} (×{:.3}); re-opened in {:.0} ms; {} frames re-sent; {} bytes sent, {} received",
                        e.channels,
                        gbps(r.before_bits_per_second),
                        gbps(r.dip_bits_per_second),
                        gbps(r.after_bits_per_second),
                        r.ratio,
                        r.reopen_ms,
                        r.resent_frames,
                        r.bytes_sent,
                        r.bytes_received
                    ));
                }
                out.push(format!(
                    "  after / before min/median/max {:.3}/{:.3}/{:.3}",
                    e.ratio_spread.min, e.ratio_spread.median, e.ratio_spread.max
                ));
            }
        }
        out
    }
}
