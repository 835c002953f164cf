//! The typed rows of `netsteer trace`: stages of the receive path, a stage's histogram row,
//! drops, and the messages of a trace (start, interval). No BPF here: the collector
//! (`netsteer-trace`) fills them, and every reader — doctor's trace rules, the lab's
//! breakdowns, the agent — takes them from this crate (the way retis keeps its event types
//! apart from its collector), instead of parsing the trace's JSON back.

use serde::{Deserialize, Serialize};

/// A stage of the receive path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// NET_RX raised by a hard IRQ → the NET_RX softirq starts on that CPU (ksoftirqd deferral
    /// and softirq scheduling delay land here).
    IrqToSoftirq,
    /// NET_RX softirq entry → exit.
    SoftirqRun,
    /// One NAPI poll, inside a NET_RX softirq.
    PollTime,
    /// Packets per NAPI poll (a count); `squeezed` polls used their whole budget.
    PollWork,
    /// GRO/receive entry of an skb → sk_data_ready of its socket.
    Stack,
    /// sk_data_ready → the application's copy (how long data waited for the application).
    Residence,
    /// sched_wakeup → sched_switch of a thread of `--pid`.
    Wakeup,
    /// Drops (not a histogram; a stage only to be named as unavailable).
    Drops,
}

impl Stage {
    /// The stage of a histogram key's code (`HKey::stage`).
    pub fn from_code(c: u8) -> Option<Stage> {
        Some(match c {
            1 => Stage::IrqToSoftirq,
            2 => Stage::SoftirqRun,
            3 => Stage::PollTime,
            4 => Stage::PollWork,
            5 => Stage::Stack,
            6 => Stage::Residence,
            7 => Stage::Wakeup,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Stage::IrqToSoftirq => "irq-to-softirq",
            Stage::SoftirqRun => "softirq-run",
            Stage::PollTime => "poll-time",
            Stage::PollWork => "poll-work",
            Stage::Stack => "stack",
            Stage::Residence => "residence",
            Stage::Wakeup => "wakeup",
            Stage::Drops => "drops",
        }
    }

    /// Whether its values are nanoseconds (poll-work counts packets).
    pub fn is_time(self) -> bool {
        self != Stage::PollWork
    }
}

/// One histogram row of an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRow {
    pub stage: Stage,
    pub cpu: Option<u32>,
    /// The device, for the stages an skb carries (stack, residence, polls).
    pub dev: Option<String>,
    pub queue: Option<u32>,
    pub napi_id: Option<u32>,
    /// irq-to-softirq: the hard IRQ that raised NET_RX, and its name in /proc/interrupts.
    pub irq: Option<u32>,
    pub irq_name: Option<String>,
    /// How many rows of this stage were folded into this one (an `others` row: > 1).
    pub rows: u32,
    pub count: u64,
    /// Nanoseconds (poll-work: packets).
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub p999: Option<u64>,
    pub max: u64,
    pub mean: Option<f64>,
    /// poll-work: polls that used their whole budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub squeezed: Option<u64>,
}

/// Drops in an interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropRow {
    /// The kernel's skb drop reason (`SOCKET_RCVBUFF`), or `udp_fail_queue_rcv_skb`,
    /// `sock_rcvqueue_full`.
    pub reason: String,
    pub cpu: u32,
    pub dev: Option<String>,
    pub queue: Option<u32>,
    pub count: u64,
}

/// One interval, as `--json` prints it (`"type": "interval"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    #[serde(rename = "type")]
    pub kind: String,
    pub seq: u64,
    pub interval_s: f64,
    /// How long the per-packet programs were attached in the interval (`--duty`): the counts
    /// cover this time; a rate is a count over it.
    pub traced_s: f64,
    pub stages: Vec<StageRow>,
    pub drops: Vec<DropRow>,
    /// Events not counted because a map was full (the maps are bounded).
    pub lost_events: u64,
    /// What the trace's own programs cost in the interval. None: not recorded (a trace from
    /// before the trace priced itself).
    #[serde(default)]
    pub cost: Option<Cost>,
}

/// What the trace's own BPF programs cost in an interval, as the kernel counted it for a
/// share of the traced time (`priced_s`): its BPF
/// run-time statistics (`BPF_ENABLE_STATS`, include/uapi/linux/bpf.h; the `run_time_ns`
/// and `run_cnt` of `bpf_prog_info`). That is the time inside the programs, on every CPU: not
/// a classic tracepoint's record formatting before its program runs, nor the two clock reads
/// the statistics themselves add to each run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Why there are no figures (the kernel would not count, or `--price 0`); None: priced.
    pub unpriced: Option<String>,
    /// Program runs in the interval, all programs.
    pub runs: u64,
    /// Nanoseconds spent inside the programs, summed over CPUs.
    pub run_ns: u64,
    /// `run_ns / runs`; None without a run.
    pub ns_per_run: Option<f64>,
    /// Packets that entered the receive path while traced: runs of the entry hooks
    /// (napi_gro_receive_entry, netif_receive_skb_entry, netif_receive_skb_list_entry,
    /// netif_rx), every device.
    pub packets: u64,
    /// `run_ns / packets`: what tracing cost per received packet, every program included;
    /// None without a packet.
    pub ns_per_packet: Option<f64>,
    /// How long the kernel counted in the interval (`--price`: a share of the traced time,
    /// since the counting is global and not free); the runs and times above cover this.
    pub priced_s: f64,
    /// What the programs cost over the interval, in CPUs (0.01: one percent of one CPU):
    /// their run time per priced second, times the seconds traced, over the interval.
    pub cpus: f64,
    /// Per program, busiest first.
    pub programs: Vec<ProgramCost>,
}

/// One program's runs and time in an interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramCost {
    pub program: String,
    pub runs: u64,
    pub run_ns: u64,
}

/// The first message: what runs and what cannot (`"type": "start"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    #[serde(rename = "type")]
    pub kind: String,
    pub interval_s: f64,
    /// The share of each interval the per-packet programs are attached (1: all of it).
    pub duty: f64,
    pub devices: Vec<String>,
    pub unavailable: Vec<Unavailable>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unavailable {
    pub stage: Stage,
    pub why: String,
}
