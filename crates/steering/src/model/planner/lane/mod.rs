//! A lane for one latency-critical service: seed 000's recipe as one plan. The service's flow
//! gets a receive queue of its own (an n-tuple rule, or RSS buckets the lab's bisection found),
//! that queue's IRQ goes to the lane's CPU with no RPS after it, the replies leave on the
//! matching transmit queue (XPS), every other queue's IRQ, RPS and XPS is kept off that CPU,
//! the queue's NAPI gets the mode asked for, and the service's threads are pinned there.
//!
//! Pure like the rest of the planner: the caller finds the service's processes and the other
//! lanes; every refusal happens here, before anything is written, naming the flag.

use super::*;
use netsteer_host::netdev::{NtupleKey, NtupleProto};
use netsteer_host::sockets::Proto;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// What the lane's NAPI does (Documentation/networking/napi.rst).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LaneMode {
    /// Interrupt-driven, the kernel's defaults on the lane's NAPI.
    Irq,
    /// The service busy-polls (SO_PREFER_BUSY_POLL): hard IRQs deferred while it polls.
    BusyPoll,
    /// IRQ suspension (6.13+): the epoll busy poller keeps the queue's IRQ off while it finds
    /// work.
    Suspend,
    /// Threaded busy polling (6.19+): a kernel thread polls the queue without pause.
    ThreadedPoll,
}

impl LaneMode {
    pub fn napi(self) -> NapiMode {
        match self {
            LaneMode::Irq => NapiMode::Irq,
            LaneMode::BusyPoll => NapiMode::PreferBusyPoll,
            LaneMode::Suspend => NapiMode::IrqSuspend,
            LaneMode::ThreadedPoll => NapiMode::ThreadedPoll,
        }
    }
}

impl fmt::Display for LaneMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LaneMode::Irq => "irq",
            LaneMode::BusyPoll => "busy-poll",
            LaneMode::Suspend => "suspend",
            LaneMode::ThreadedPoll => "threaded-poll",
        })
    }
}

use std::fmt;

/// Which processes are the service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", content = "name", rename_all = "lowercase")]
pub enum ServiceRef {
    /// Whoever holds the port (its sockets' owners).
    Port,
    /// A systemd unit: the processes of its cgroup.
    Unit(String),
    /// A cgroup v2 directory under /sys/fs/cgroup: its processes.
    Cgroup(String),
}

/// A lane as asked for (`netsteer lane apply`), and as kept in its state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneSpec {
    pub name: String,
    pub dev: String,
    pub proto: Proto,
    pub port: u16,
    pub cpu: u32,
    /// The receive queue; default: the device's last.
    pub queue: Option<u32>,
    pub mode: LaneMode,
    /// RSS buckets that carry the service's flow, for a device without n-tuple filters.
    #[serde(default)]
    pub rss_buckets: Vec<u32>,
    /// Set interrupt coalescing off device-wide where the driver has no per-queue setting.
    #[serde(default)]
    pub device_coalesce: bool,
    /// Stop a running irqbalance (which would move the lane's IRQ back within 10 s).
    #[serde(default)]
    pub stop_irqbalance: bool,
    pub service: ServiceRef,
    /// `threaded-poll`: the CPU the NAPI's kthread is pinned to (it polls without pause, so
    /// not the service's).
    #[serde(default)]
    pub poll_cpu: Option<u32>,
}

impl LaneSpec {
    /// The receive queue the lane takes on a device with `rx_queues` of them: the one given,
    /// else the last (the planner and the other lanes' claims both ask here).
    pub fn queue_of(&self, rx_queues: u32) -> u32 {
        self.queue.unwrap_or(rx_queues.saturating_sub(1))
    }
}

/// One process of the service: what names it (pid and start time) and where it may run now,
/// as the host shows it ([`netsteer_host::service`]).
pub use netsteer_host::service::ServiceProcess as LaneProcess;

/// What another lane holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneClaim {
    pub name: String,
    pub dev: String,
    pub cpu: u32,
    pub queue: u32,
    /// The CPU its threaded-poll kthread holds.
    #[serde(default)]
    pub poll_cpu: Option<u32>,
}

impl LaneClaim {
    /// Every CPU the lane holds.
    fn cpus(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.cpu).chain(self.poll_cpu)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LaneError {
    #[error("--name {0:?}: a lane's name is 1 to 32 characters of a-z, 0-9 and '-'")]
    BadName(String),
    #[error("{0}")]
    Device(String),
    #[error("--cpu {cpu}: no such online CPU (online: {online})")]
    NoCpu { cpu: u32, online: String },
    #[error(
        "--cpu {cpu}: the CPU is set aside for something else ({why}); a lane does not take an isolated CPU"
    )]
    Isolated { cpu: u32, why: String },
    #[error("--cpu {cpu}: lane {lane:?} holds it already; two lanes never share a CPU")]
    CpuTaken { cpu: u32, lane: String },
    #[error("--queue {queue}: lane {lane:?} holds rx-{queue} of {dev} already")]
    QueueTaken {
        dev: String,
        queue: u32,
        lane: String,
    },
    #[error(
        "--cpu {cpu}: it is the last CPU left near {dev} ({near}, lanes hold {held}): the device's other queues and the host's own work would have nowhere to go"
    )]
    LastCpu {
        cpu: u32,
        dev: String,
        near: String,
        held: String,
    },
    #[error("--queue {queue}: {dev} has {count} rx queue(s) (rx-0 to rx-{last})", last = count.saturating_sub(1))]
    NoQueue { dev: String, queue: u32, count: u32 },
    #[error(
        "--dev {dev}: nothing would steer {proto} port {port} to rx-{queue}: {why}; give --rss-bucket LIST (the flow's RSS buckets, as the lab's bisection finds them) or use a device with n-tuple filters"
    )]
    NoSteering {
        dev: String,
        proto: Proto,
        port: u16,
        queue: u32,
        why: String,
    },
    #[error("--rss-bucket: {0}")]
    BadBucket(String),
    #[error("--mode {mode}: {why}")]
    Mode { mode: LaneMode, why: String },
    #[error("--poll-cpu: {0}")]
    PollCpu(String),
    #[error(
        "--{proto} {port}: nobody serves it in this network namespace (no {what} socket on the port){unit}"
    )]
    NoService {
        proto: Proto,
        port: u16,
        what: &'static str,
        unit: String,
    },
    #[error(
        "{who} and would move the lane's IRQ within 10 s: rerun with --irqbalance stop (removing the lane starts it again)"
    )]
    Irqbalance { who: String },
    #[error(
        "{who} outside systemd's irqbalance.service, which --irqbalance stop cannot stop: stop it the way it was started"
    )]
    IrqbalanceOutsideUnit { who: String },
    #[error(
        "--cpu {cpu}: rx-{queue}'s IRQ {irq} is kernel-managed (smp_affinity read-only) and delivered on CPU(s) {effective}: choose --cpu among those"
    )]
    ManagedIrq {
        cpu: u32,
        queue: u32,
        irq: u32,
        effective: String,
    },
}

/// A lane's name becomes a directory name: nothing but a-z, 0-9 and '-'.
pub fn valid_lane_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
}

/// The plan of `spec` on `view`, for the service's `processes`, beside the `others` lanes
/// already on the host. `live`: on the live host (services can be stopped).
pub fn plan_lane(
    view: &HostView,
    spec: &LaneSpec,
    processes: &[LaneProcess],
    others: &[LaneClaim],
    live: bool,
) -> Result<Plan, LaneError> {
    if !valid_lane_name(&spec.name) {
        return Err(LaneError::BadName(spec.name.clone()));
    }
    check_devices(view, std::slice::from_ref(&spec.dev))
        .map_err(|e| LaneError::Device(e.to_string()))?;
    if let Some(why) = view.irqs_unknown() {
        return Err(LaneError::Device(format!(
            "{why}: the lane's IRQ cannot be found"
        )));
    }
    let nic = view.nic(&spec.dev).expect("checked above");
    let ctx = Ctx::new(view, None, Goal::Latency, None);
    let cpu = spec.cpu;

    // The CPU: online, not set aside, not another lane's, not the last one near the NIC.
    if !ctx.online.contains(cpu) {
        return Err(LaneError::NoCpu {
            cpu,
            online: ctx.online.to_list(),
        });
    }
    if !ctx.usable.contains(cpu) {
        let listed = |f: &Field<CpuSet>, what: &str| {
            f.known()
                .filter(|s| s.contains(cpu))
                .map(|s| format!("{what} {}", s.to_list()))
        };
        let why = [
            listed(&view.topology.isolated, "isolated"),
            listed(&view.topology.nohz_full, "nohz_full"),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        return Err(LaneError::Isolated { cpu, why });
    }
    // A mode this kernel does not have, before anything else is looked at.
    if spec.mode == LaneMode::ThreadedPoll {
        let kernel = view.kernel.known().cloned().unwrap_or_else(|| "?".into());
        if kernel_version(&kernel).is_none_or(|k| k < THREADED_POLL_SINCE) {
            return Err(LaneError::Mode {
                mode: spec.mode,
                why: format!(
                    "threaded busy polling (napi threaded = busy-poll) is in Linux {}.{} and later; this kernel is {kernel}",
                    THREADED_POLL_SINCE.0, THREADED_POLL_SINCE.1
                ),
            });
        }
    }
    let others: Vec<&LaneClaim> = others.iter().filter(|o| o.name != spec.name).collect();
    if let Some(o) = others.iter().find(|o| o.cpus().any(|c| c == cpu)) {
        return Err(LaneError::CpuTaken {
            cpu,
            lane: o.name.clone(),
        });
    }
    // threaded-poll's kthread gets a CPU of its own: online, not set aside, no lane's.
    match (spec.mode, spec.poll_cpu) {
        (LaneMode::ThreadedPoll, None) => {
            return Err(LaneError::PollCpu(
                "--mode threaded-poll needs it: the NAPI's kthread polls without pause and burns the CPU it runs on, which must not be the service's".into(),
            ));
        }
        (LaneMode::ThreadedPoll, Some(p)) => {
            let why = if p == cpu {
                Some("the service's CPU (--cpu); the kthread needs one of its own".to_string())
            } else if !ctx.usable.contains(p) {
                Some(format!(
                    "CPU {p} is not online and usable (usable: {})",
                    ctx.usable.to_list()
                ))
            } else {
                others
                    .iter()
                    .find(|o| o.cpus().any(|c| c == p))
                    .map(|o| format!("CPU {p}: lane {:?} holds it already", o.name))
            };
            if let Some(why) = why {
                return Err(LaneError::PollCpu(why));
            }
        }
        (_, Some(_)) => {
            return Err(LaneError::PollCpu(
                "only --mode threaded-poll has a polling kthread to pin".into(),
            ));
        }
        (_, None) => {}
    }
    let nq = nic.rx_queues.len() as u32;
    let queue = spec.queue_of(nq);
    if queue >= nq.max(1) {
        return Err(LaneError::NoQueue {
            dev: nic.name.clone(),
            queue,
            count: nq,
        });
    }
    if let Some(o) = others
        .iter()
        .find(|o| o.dev == nic.name && o.queue == queue)
    {
        return Err(LaneError::QueueTaken {
            dev: nic.name.clone(),
            queue,
            lane: o.name.clone(),
        });
    }
    let lane_cpus: CpuSet = others
        .iter()
        .flat_map(|o| o.cpus())
        .chain(std::iter::once(cpu))
        .chain(spec.poll_cpu)
        .collect();
    let near = ctx.local_cpus(nic);
    if near.difference(&lane_cpus).is_empty() {
        let node = ctx
            .nic_node(nic)
            .map_or(String::new(), |n| format!("NUMA node {n}: "));
        return Err(LaneError::LastCpu {
            cpu,
            dev: nic.name.clone(),
            near: format!("{node}CPUs {}", near.to_list()),
            held: lane_cpus.to_list(),
        });
    }
    if processes.is_empty() {
        return Err(LaneError::NoService {
            proto: spec.proto,
            port: spec.port,
            what: match spec.proto {
                Proto::Tcp => "listening TCP",
                Proto::Udp => "bound UDP",
            },
            unit: match &spec.service {
                ServiceRef::Port => String::new(),
                ServiceRef::Unit(u) => format!(" held by unit {u}"),
                ServiceRef::Cgroup(c) => format!(" held by cgroup {c}"),
            },
        });
    }

    let opts = PlanOptions {
        devices: vec![nic.name.clone()],
        cpus: Some(std::iter::once(cpu).collect()),
        reserve_queue: Some(queue),
        live,
        ..PlanOptions::for_profile(Profile::None)
    };
    let mut b = Builder {
        ctx,
        opts: &opts,
        items: Vec::new(),
        notes: Vec::new(),
        irq_load: BTreeMap::new(),
        irq_cpu: BTreeMap::new(),
        irq_cap: usize::MAX,
        irq_rate: BTreeMap::new(),
        raised: BTreeMap::new(),
    };

    // irqbalance would move the lane's IRQ again: stopped when asked, else refused. One that
    // may run (its state unknown) is taken as running.
    let has_irqs = nic.queue_irqs().next().is_some();
    if let Some(who) = view.irqbalance_may_run()
        && has_irqs
    {
        if !spec.stop_irqbalance {
            return Err(LaneError::Irqbalance { who });
        }
        if live && view.irqbalance_outside_unit() {
            return Err(LaneError::IrqbalanceOutsideUnit { who });
        }
        if live {
            b.stop_irqbalance(format!("{who}: it rewrites smp_affinity every 10 s and would move the lane's IRQ; removing the lane starts it again"));
        }
    }

    // Queues other lanes hold on this device: never in the RSS table, never moved.
    let held: BTreeSet<u32> = others
        .iter()
        .filter(|o| o.dev == nic.name)
        .map(|o| o.queue)
        .collect();
    b.lane_steering(nic, spec, queue, &held)?;
    b.lane_irqs(nic, spec, queue, &lane_cpus, &held)?;
    b.lane_rps_xps(nic, queue, cpu, &lane_cpus, &held);
    b.lane_coalesce(nic, spec);
    b.lane_napi(nic, spec, queue)?;
    for p in processes {
        let want: CpuSet = std::iter::once(cpu).collect();
        b.push(
            ItemId::Process(p.pid).into(),
            Target::Process {
                pid: p.pid,
                start: p.start,
            },
            p.allowed.as_ref().map(CpuSet::to_list),
            want.to_list(),
            format!(
                "the service ({} pid {}) runs where its queue's packets are processed: its socket reads find them in the cache they were written to",
                p.comm, p.pid
            ),
            (!live).then(|| "processes are not touched with --root".to_string()),
        );
        if let Some(last) = b.items.last_mut() {
            last.label = Some(p.comm.clone());
        }
    }
    b.notes.extend(service_advice(spec, queue));
    let mut items = b.items;
    items.sort_by_key(Item::phase);
    Ok(Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        profile: Profile::None,
        devices: vec![nic.name.clone()],
        cpus: Some(cpu.to_string()),
        items,
        notes: b.notes,
    })
}

/// What the service itself should set for the mode, and why (the kernel cannot set it for
/// the service: these are socket and epoll options).
fn service_advice(spec: &LaneSpec, queue: u32) -> Vec<String> {
    let dev = &spec.dev;
    let mut out = vec![format!(
        "service: keep every socket of the lane's epoll set on {dev} rx-{queue}'s NAPI (SO_INCOMING_NAPI_ID reads the same id on each): busy polling polls one NAPI per epoll context (napi.rst)"
    )];
    match spec.mode {
        LaneMode::Irq => out.push(
            "service: nothing to set; the lane's queue interrupts its CPU for every packet".into(),
        ),
        LaneMode::BusyPoll => out.push(
            "service: setsockopt SO_BUSY_POLL 50 (µs) and SO_PREFER_BUSY_POLL 1 on its sockets (or epoll ioctl EPIOCSPARAMS {busy_poll_usecs 50, busy_poll_budget 64, prefer_busy_poll 1}): without prefer-busy-poll the deferred IRQs are not deferred for it".into(),
        ),
        LaneMode::Suspend => out.push(
            "service: epoll ioctl EPIOCSPARAMS {busy_poll_usecs 64, busy_poll_budget 64, prefer_busy_poll 1} on its epoll fd: IRQ suspension acts only for an epoll busy poller with prefer_busy_poll (napi.rst, IRQ suspension)".into(),
        ),
        LaneMode::ThreadedPoll => out.push(
            "service: nothing to poll itself: the NAPI's kthread polls without pause on the --poll-cpu and keeps the queue's IRQ off; the service reads what it delivered".into(),
        ),
    }
    out
}

mod items;
