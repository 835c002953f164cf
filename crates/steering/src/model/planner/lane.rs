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

/// One process of the service: what names it (pid and start time) and where it may run now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneProcess {
    pub pid: u32,
    pub start: u64,
    pub comm: String,
    pub allowed: Option<CpuSet>,
}

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
        "irqbalance is running{pid} and would move the lane's IRQ within 10 s: rerun with --irqbalance stop (removing the lane starts it again)"
    )]
    Irqbalance { pid: String },
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
    let queue = spec.queue.unwrap_or(nq.saturating_sub(1));
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
    };

    // irqbalance would move the lane's IRQ again: stopped when asked, else refused.
    let has_irqs = nic.queue_irqs().next().is_some();
    if let Some(ib) = view.irqbalance.known().filter(|i| i.running)
        && has_irqs
    {
        let pid = ib.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        if !spec.stop_irqbalance {
            return Err(LaneError::Irqbalance { pid });
        }
        if live {
            b.push(
                "service/irqbalance".into(),
                ItemKind::Irqbalance,
                Target::Service {
                    name: "irqbalance".into(),
                },
                Format::Text,
                Some("active".into()),
                "inactive".into(),
                format!("irqbalance{pid} rewrites smp_affinity every 10 s and would move the lane's IRQ; removing the lane starts it again"),
                None,
            );
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
            format!("process/{}", p.pid),
            ItemKind::Affinity,
            Target::Process {
                pid: p.pid,
                start: p.start,
            },
            Format::List,
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

impl Builder<'_> {
    /// The flow onto the lane's queue: the n-tuple rules (TCP or UDP, IPv4 and IPv6) with the
    /// queue out of the RSS table, or the given RSS buckets alone on it.
    fn lane_steering(
        &mut self,
        nic: &Nic,
        spec: &LaneSpec,
        queue: u32,
        held: &BTreeSet<u32>,
    ) -> Result<(), LaneError> {
        let nq = nic.rx_queues.len() as u32;
        if nq <= 1 {
            self.notes.push(format!(
                "{}: one rx queue: every flow of the device shares the lane's queue (nothing to steer)",
                nic.name
            ));
            return Ok(());
        }
        let no_steering = |why: String| LaneError::NoSteering {
            dev: nic.name.clone(),
            proto: spec.proto,
            port: spec.port,
            queue,
            why,
        };
        let Some(s) = nic.settings.clone() else {
            return Err(no_steering("its NIC settings were not read".into()));
        };
        let table_len = s.rss.known().map_or(0, |r| r.indirection.len());
        if !spec.rss_buckets.is_empty() {
            if table_len == 0 {
                return Err(LaneError::BadBucket(format!(
                    "{} reports no RSS indirection table",
                    nic.name
                )));
            }
            if let Some(b) = spec.rss_buckets.iter().find(|b| **b as usize >= table_len) {
                return Err(LaneError::BadBucket(format!(
                    "bucket {b}: {}'s table has {table_len} (0 to {})",
                    nic.name,
                    table_len - 1
                )));
            }
            let rest: Vec<u32> = (0..nq)
                .filter(|q| *q != queue && !held.contains(q))
                .collect();
            if rest.is_empty() {
                return Err(no_steering(format!(
                    "every other rx queue is a lane's ({})",
                    held.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            }
            let mut k = 0usize;
            let table: Vec<String> = (0..table_len as u32)
                .map(|i| {
                    if spec.rss_buckets.contains(&i) {
                        queue.to_string()
                    } else {
                        k += 1;
                        rest[(k - 1) % rest.len()].to_string()
                    }
                })
                .collect();
            // The buckets were found for one flow: with addresses alone in the hash every
            // flow between the same two hosts shares them (igb hashes UDP that way).
            if let Ok(hash) = s.flow_hash() {
                for t in match spec.proto {
                    Proto::Udp => ["udp4", "udp6"],
                    Proto::Tcp => ["tcp4", "tcp6"],
                } {
                    let Some(now) = hash.get(t) else { continue };
                    if now.contains('f') && now.contains('n') {
                        continue;
                    }
                    let want: String = "mvtsdfnr"
                        .chars()
                        .filter(|c| now.contains(*c) || *c == 'f' || *c == 'n')
                        .collect();
                    self.nic_text_item(
                        nic,
                        ItemKind::Rss,
                        NicKnob::FlowHash(t.into()),
                        Format::Text,
                        want,
                        format!(
                            "{t} hashed on the ports too: with addresses alone every flow between two hosts shares the lane's bucket(s)"
                        ),
                    );
                }
            }
            let buckets: Vec<String> = spec.rss_buckets.iter().map(u32::to_string).collect();
            self.nic_text_item(
                nic,
                ItemKind::Rss,
                NicKnob::RssIndirection,
                Format::Text,
                table.join(" "),
                format!(
                    "RSS: bucket(s) {} (the service's flow) alone on rx-{queue}, the other {} buckets over the other {} queues",
                    buckets.join(","),
                    table_len - spec.rss_buckets.len(),
                    rest.len()
                ),
            );
            self.notes.push(format!(
                "{}: a flow steered by RSS bucket stays on rx-{queue} only while its hash does: other flows hashing into bucket(s) {} share the queue, and a new RSS key moves it",
                nic.name,
                buckets.join(",")
            ));
            return Ok(());
        }
        let features = s.features.known();
        let ntuple = features.and_then(|f| f.get("ntuple-filters")).copied();
        let why = match (features, ntuple) {
            (None, _) => Some("its offload features could not be read".to_string()),
            (Some(_), None) => Some("the driver has no n-tuple filters".to_string()),
            (Some(_), Some(f)) if !f.active && !f.changeable => Some(
                "n-tuple filters are fixed off by the driver (ntuple-filters off [fixed])"
                    .to_string(),
            ),
            _ => None,
        };
        if let Some(why) = why {
            return Err(no_steering(why));
        }
        // The lanes' queues out of the RSS table (no bulk flow hashes to them), then the rules.
        self.lane_table(nic, &s, queue, held, nq)
            .map_err(no_steering)?;
        self.nic_item(
            nic,
            ItemKind::Feature,
            NicKnob::Feature("ntuple-filters".into()),
            1,
            "n-tuple filters on: the lane's rules need them".into(),
        );
        let protos = match spec.proto {
            Proto::Udp => [NtupleProto::Udp4, NtupleProto::Udp6],
            Proto::Tcp => [NtupleProto::Tcp4, NtupleProto::Tcp6],
        };
        for proto in protos {
            let key = NtupleKey {
                proto,
                port: spec.port,
            };
            self.nic_text_item(
                nic,
                ItemKind::Ntuple,
                NicKnob::Ntuple(key),
                Format::Text,
                key.rule_text(u64::from(queue)),
                format!(
                    "the service's {} port {} to rx-{queue}, past RSS",
                    proto.name(),
                    spec.port
                ),
            );
        }
        Ok(())
    }

    /// The RSS table without the lanes' queues: kept when it already shares its buckets
    /// equally (within one) over exactly the other queues, else dealt round robin.
    fn lane_table(
        &mut self,
        nic: &Nic,
        s: &NicSettings,
        queue: u32,
        held: &BTreeSet<u32>,
        nq: u32,
    ) -> Result<(), String> {
        let Some(rss) = s.rss.known().filter(|r| !r.indirection.is_empty()) else {
            self.notes.push(format!(
                "{}: no RSS indirection table reported: bulk flows may still hash to rx-{queue}",
                nic.name
            ));
            return Ok(());
        };
        let rest: Vec<u32> = (0..nq)
            .filter(|q| *q != queue && !held.contains(q))
            .collect();
        if rest.is_empty() {
            return Err("every other rx queue is a lane's".into());
        }
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        for q in &rss.indirection {
            *counts.entry(*q).or_default() += 1;
        }
        let (lo, hi) = rest.iter().fold((usize::MAX, 0), |(lo, hi), q| {
            let n = counts.get(q).copied().unwrap_or(0);
            (lo.min(n), hi.max(n))
        });
        let table: Vec<String> = if counts.keys().all(|q| rest.contains(q)) && hi - lo <= 1 {
            rss.indirection.iter().map(u32::to_string).collect()
        } else {
            (0..rss.indirection.len())
                .map(|i| rest[i % rest.len()].to_string())
                .collect()
        };
        let lanes: Vec<String> = std::iter::once(queue)
            .chain(held.iter().copied())
            .map(|q| format!("rx-{q}"))
            .collect();
        self.nic_text_item(
            nic,
            ItemKind::Rss,
            NicKnob::RssIndirection,
            Format::Text,
            table.join(" "),
            format!(
                "RSS: no hash bucket on the lane queue(s) {}; the other {} queues share the {} buckets equally",
                lanes.join(", "),
                rest.len(),
                table.len()
            ),
        );
        Ok(())
    }

    /// The lane queue's vectors on the lane's CPU; every other queue vector of the device
    /// that may be delivered on a lane's CPU keeps the rest of its CPUs (or, with none left,
    /// the CPUs near the NIC that no lane holds).
    fn lane_irqs(
        &mut self,
        nic: &Nic,
        spec: &LaneSpec,
        queue: u32,
        lane_cpus: &CpuSet,
        held: &BTreeSet<u32>,
    ) -> Result<(), LaneError> {
        let cpu = spec.cpu;
        let irqs: Vec<NicIrq> = nic.queue_irqs().cloned().collect();
        if irqs.is_empty() {
            self.notes.push(format!(
                "{}: no queue IRQ (a virtual device): its queues are processed on the sending CPU, so only RPS, XPS, the NAPI and the service's pin apply",
                nic.name
            ));
            return Ok(());
        }
        let near = self.ctx.local_cpus(nic).difference(lane_cpus);
        let mine = |i: &NicIrq| i.role.placement_queue() == Some(queue);
        for irq in &irqs {
            // Another lane's queue stays where that lane put it.
            if irq
                .role
                .placement_queue()
                .is_some_and(|q| q != queue && held.contains(&q))
            {
                continue;
            }
            let requested = irq.affinity.requested.known().cloned();
            let managed = irq.affinity.settable.known() == Some(&false);
            let (want, reason) = if mine(irq) {
                if managed {
                    let eff = irq.affinity.effective.known().cloned().unwrap_or_default();
                    if eff.len() == 1 && eff.contains(cpu) {
                        continue;
                    }
                    return Err(LaneError::ManagedIrq {
                        cpu,
                        queue,
                        irq: irq.irq,
                        effective: eff.to_list(),
                    });
                }
                (
                    std::iter::once(cpu).collect::<CpuSet>(),
                    format!(
                        "{} ({}) on the lane's CPU {cpu}: the queue's NET_RX runs there, beside the service",
                        irq.name, irq.role
                    ),
                )
            } else {
                let Some(req) = requested.clone() else {
                    continue;
                };
                if req.intersection(lane_cpus).is_empty() {
                    continue;
                }
                let rest = req.difference(lane_cpus);
                let want = if rest.is_empty() { near.clone() } else { rest };
                if managed {
                    self.notes.push(format!(
                        "{}: IRQ {} ({}) is kernel-managed and may be delivered on lane CPU(s) {}: it cannot be moved off",
                        nic.name,
                        irq.irq,
                        irq.name,
                        req.intersection(lane_cpus).to_list()
                    ));
                    continue;
                }
                (
                    want,
                    format!(
                        "{} ({}) off the lane CPU(s) {}: no other queue interrupts a lane",
                        irq.name,
                        irq.role,
                        lane_cpus.to_list()
                    ),
                )
            };
            self.push(
                format!("irq/{}", irq.irq),
                ItemKind::IrqAffinity,
                Target::File {
                    path: format!("/proc/irq/{}/smp_affinity_list", irq.irq),
                },
                Format::List,
                requested.as_ref().map(CpuSet::to_list),
                want.to_list(),
                reason,
                None,
            );
            if let Some(last) = self.items.last_mut() {
                last.label = Some(irq.name.clone());
            }
        }
        Ok(())
    }

    /// No RPS after the lane's queue (its packets stay on the lane's CPU); no other queue's
    /// RPS onto a lane's CPU; the lane's CPU sends on the lane's tx queue, and no other tx
    /// queue lists it (scaling.rst: XPS picks the queue by the sending CPU).
    fn lane_rps_xps(
        &mut self,
        nic: &Nic,
        queue: u32,
        cpu: u32,
        lane_cpus: &CpuSet,
        held: &BTreeSet<u32>,
    ) {
        if self.queues_unreadable(nic, ItemKind::Rps, "rps") {
            return;
        }
        for q in nic.rx_queues.clone() {
            let Some(now) = q.rps_cpus.known().cloned() else {
                continue;
            };
            if q.index != queue && held.contains(&q.index) {
                continue;
            }
            let (want, reason) = if q.index == queue {
                (
                    CpuSet::new(),
                    "no RPS after the lane's queue: its packets are processed on the lane's CPU, with no IPI to another".to_string(),
                )
            } else if !now.intersection(lane_cpus).is_empty() {
                (
                    now.difference(lane_cpus),
                    format!(
                        "rx-{}'s RPS off the lane CPU(s) {}",
                        q.index,
                        lane_cpus.to_list()
                    ),
                )
            } else {
                continue;
            };
            let mask = self.ctx.mask(&want);
            let current = Some(self.ctx.mask(&now));
            self.push(
                format!("rps/{}/rx-{}", nic.name, q.index),
                ItemKind::Rps,
                Target::File {
                    path: format!("/sys/class/net/{}/queues/rx-{}/rps_cpus", nic.name, q.index),
                },
                Format::Mask,
                current,
                mask,
                reason,
                None,
            );
        }
        let ntx = nic.tx_queues.len() as u32;
        if ntx < 2 {
            self.notes.push(format!(
                "{}: {ntx} tx queue(s): XPS has no choice to make for the replies",
                nic.name
            ));
            return;
        }
        if queue >= ntx {
            self.notes.push(format!(
                "{}: no tx-{queue} (the device has {ntx} tx queues): the replies leave on the queue XPS or the hash picks",
                nic.name
            ));
        }
        for q in nic.tx_queues.clone() {
            let Some(now) = q.xps_cpus.known().cloned() else {
                continue;
            };
            if q.index != queue && held.contains(&q.index) {
                continue;
            }
            let (want, reason) = if q.index == queue {
                (
                    std::iter::once(cpu).collect::<CpuSet>(),
                    format!(
                        "the replies leave on tx-{queue}, the lane's own: its completions interrupt the lane's CPU {cpu}"
                    ),
                )
            } else if now.contains(cpu) {
                let mut w = now.clone();
                w.remove(cpu);
                (
                    w,
                    format!("tx-{} no longer takes the lane CPU {cpu}", q.index),
                )
            } else {
                continue;
            };
            let mask = self.ctx.mask(&want);
            let current = Some(self.ctx.mask(&now));
            self.push(
                format!("xps/{}/tx-{}", nic.name, q.index),
                ItemKind::Xps,
                Target::File {
                    path: format!("/sys/class/net/{}/queues/tx-{}/xps_cpus", nic.name, q.index),
                },
                Format::Mask,
                current,
                mask,
                reason,
                None,
            );
        }
    }

    /// Interrupt coalescing is device-wide over ethtool netlink: set off only when asked,
    /// otherwise what it would cost the other queues is said.
    fn lane_coalesce(&mut self, nic: &Nic, spec: &LaneSpec) {
        let Some(c) = nic.settings.as_ref().and_then(|s| s.coalesce.known()) else {
            return;
        };
        let now = c.get("rx-usecs").copied();
        let adaptive = c.get("adaptive-rx").copied();
        if now.unwrap_or(0) == 0 && adaptive.unwrap_or(0) == 0 {
            return;
        }
        if !spec.device_coalesce {
            self.notes.push(format!(
                "{}: interrupt coalescing (rx-usecs {}, adaptive-rx {}) is device-wide here (ethtool netlink sets no queue alone): left as it is; --device-coalesce sets it off on every queue, the bulk queues then interrupt once per packet too",
                nic.name,
                now.map_or("-".into(), |v| v.to_string()),
                adaptive.map_or("-".into(), |v| v.to_string())
            ));
            return;
        }
        for (name, why) in [
            (
                "adaptive-rx",
                "--device-coalesce: a fixed moderation, so rx-usecs 0 holds",
            ),
            (
                "rx-usecs",
                "--device-coalesce: the lane's packets interrupt at once; the device's other queues too (more interrupts per packet for the bulk flows)",
            ),
        ] {
            if c.contains_key(name) {
                self.nic_item(
                    nic,
                    ItemKind::Coalesce,
                    NicKnob::Coalesce(name.into()),
                    0,
                    why.into(),
                );
            }
        }
    }

    /// The lane's NAPI in the mode asked for: per-NAPI settings where the kernel has them;
    /// on kernels before 6.13 the device-wide files for busy-poll (said: they are every
    /// queue's), suspension named as missing, threaded busy polling refused before 6.19.
    fn lane_napi(&mut self, nic: &Nic, spec: &LaneSpec, queue: u32) -> Result<(), LaneError> {
        let mode = spec.mode;
        let kernel = self
            .ctx
            .view
            .kernel
            .known()
            .cloned()
            .unwrap_or_else(|| "?".into());
        let version = kernel_version(&kernel);
        let at_least = |v: (u32, u32)| version.is_some_and(|k| k >= v);
        let netdev = nic.settings.as_ref().and_then(|s| s.netdev().ok());
        let napi = netdev.and_then(|nd| {
            let linked = nd
                .queues
                .iter()
                .find(|q| q.kind == netsteer_host::netdev::QueueType::Rx && q.id == queue)
                .and_then(|q| q.napi_id);
            match linked {
                Some(id) => nd.napis.iter().find(|n| n.id == id),
                // veth links no queue to its NAPI (no netif_queue_set_napi), but adds one per
                // rx queue in queue order (veth_napi_add), and NAPI ids count up as added.
                None if nic.kind == "veth" && nd.napis.len() == nic.rx_queues.len() => {
                    let mut by_id: Vec<_> = nd.napis.iter().collect();
                    by_id.sort_by_key(|n| n.id);
                    by_id.get(queue as usize).copied()
                }
                None => None,
            }
        });
        let per_napi = napi.is_some_and(|n| n.irq_suspend_timeout_ns.is_some())
            || (napi.is_some() && at_least(NAPI_SET_SINCE));
        match napi {
            Some(n) if per_napi => {
                for (attr, v, why) in mode.napi().settings() {
                    self.nic_item(
                        nic,
                        ItemKind::Napi,
                        NicKnob::Napi(n.id, *attr),
                        *v,
                        format!("{mode}: {why} (NAPI {} of rx-{queue} only)", n.id),
                    );
                }
                if let (LaneMode::ThreadedPoll, Some(p)) = (mode, spec.poll_cpu) {
                    // The kthread exists once `threaded` is written (napi_set_threaded makes
                    // it at once); the pin is written after, in the last phase. No kthread
                    // reads as "" and is what a rollback leaves (it goes with threaded 0).
                    let current = nic
                        .napis
                        .iter()
                        .find(|v| v.id == n.id)
                        .and_then(|v| v.thread.as_ref())
                        .and_then(|t| t.allowed.known().map(CpuSet::to_list))
                        .unwrap_or_default();
                    let want: CpuSet = std::iter::once(p).collect();
                    self.push(
                        format!("napi-thread/{}/{}", nic.name, n.id),
                        ItemKind::Affinity,
                        Target::NapiThread {
                            dev: nic.name.clone(),
                            napi: n.id,
                        },
                        Format::List,
                        Some(current),
                        want.to_list(),
                        format!(
                            "threaded-poll: NAPI {}'s kthread (napi/{}-{}) on its own CPU {p}, off the service's {}: it polls without pause (napi.rst pins each NAPI thread to one CPU)",
                            n.id, nic.name, n.id, spec.cpu
                        ),
                        None,
                    );
                }
                Ok(())
            }
            _ if mode == LaneMode::Irq => {
                self.notes.push(format!(
                    "{}: rx-{queue}'s NAPI settings left as they are (no per-NAPI settings on {kernel}, or no NAPI reported)",
                    nic.name
                ));
                Ok(())
            }
            // The kernel lists the device's NAPIs and it has none: nothing to poll.
            None if netdev.is_some_and(|nd| nd.napis.is_empty()) => Err(LaneError::Mode {
                mode,
                why: format!(
                    "{} has no NAPI{}, so there is nothing to busy-poll",
                    nic.name,
                    if nic.kind == "veth" {
                        " (a veth has NAPIs with GRO on or XDP attached)"
                    } else {
                        ""
                    }
                ),
            }),
            _ => {
                // Before 6.13 (or without netdev netlink, before 6.8), or a driver that links
                // no NAPI to its queues (igb on 6.12): the device-wide defaults napi.rst
                // describes, every queue's.
                if mode == LaneMode::Suspend {
                    self.notes.push(format!(
                        "{}: --mode suspend: irq-suspend-timeout is per-NAPI only (NAPI_SET, Linux {}.{}+) and this kernel is {kernel}: the lane runs as busy-poll (hard-IRQ deferral) instead",
                        nic.name, NAPI_SET_SINCE.0, NAPI_SET_SINCE.1
                    ));
                }
                for (file, v, current) in [
                    (
                        "napi_defer_hard_irqs",
                        2u64,
                        nic.napi_defer_hard_irqs.known().map(u64::to_string),
                    ),
                    (
                        "gro_flush_timeout",
                        200_000,
                        nic.gro_flush_timeout.known().map(u64::to_string),
                    ),
                ] {
                    let path = format!("/sys/class/net/{}/{file}", nic.name);
                    let skip = current
                        .is_none()
                        .then(|| format!("{path} cannot be read on this host"));
                    self.push(
                        format!("napi/{}/{file}", nic.name),
                        ItemKind::Napi,
                        Target::File { path },
                        Format::Int,
                        current,
                        v.to_string(),
                        format!(
                            "{mode}: device-wide ({}): every queue of {} defers its hard IRQs while a busy poller polls it, and a queue nobody polls waits for the 200 µs timer",
                            if napi.is_some() || !at_least(NAPI_SET_SINCE) {
                                format!("no per-NAPI settings before {}.{}", NAPI_SET_SINCE.0, NAPI_SET_SINCE.1)
                            } else {
                                format!("the driver links no NAPI to rx-{queue}")
                            },
                            nic.name
                        ),
                        skip,
                    );
                }
                Ok(())
            }
        }
    }
}
