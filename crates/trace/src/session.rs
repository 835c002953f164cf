//! Loading and attaching the BPF programs, and reading what they count.
//!
//! tracefs is mounted, when the host has not mounted it, in a mount namespace of the loading
//! thread's own (unshare CLONE_NEWNS), so nothing is left mounted however the process ends; the
//! programs are attached through perf event file descriptors the process owns, so a SIGKILLed
//! trace leaves nothing attached either.

use crate::format::{self, Field};
use crate::hist::{Hist, NBUCKETS};
use crate::{Stage, TraceError};
use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use aya::programs::Program;
use aya::programs::raw_trace_point::RawTracePointLinkId;
use aya::programs::trace_point::TracePointLinkId;
use aya::{Ebpf, EbpfLoader};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The compiled programs (build.rs compiles `bpf/trace.bpf.c` with clang), aligned as the ELF
/// parser needs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/trace.bpf.o"));

const TRACEFS: &str = "/sys/kernel/tracing";

/// Histogram key, as `struct hkey` in the C source.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HKey {
    pub stage: u8,
    pub pad: u8,
    pub cpu: u16,
    pub queue: u16,
    pub pad2: u16,
    pub napi_id: u32,
    pub irq: u32,
    pub dev: [u8; 16],
}

/// Histogram value, as `struct hval`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HVal {
    pub count: u64,
    pub sum: u64,
    pub max: u64,
    pub squeezed: u64,
    pub buckets: [u64; NBUCKETS],
}

/// Drop key, as `struct dkey`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DKey {
    pub reason: u32,
    pub cpu: u16,
    pub queue: u16,
    pub dev: [u8; 16],
}

// SAFETY: plain `#[repr(C)]` data of integers and byte arrays with no padding the kernel could
// leave uninitialized that we rely on (the C structs have the same explicit pad fields), valid
// for any bit pattern, as aya's Pod requires.
unsafe impl aya::Pod for HKey {}
// SAFETY: as above; only integers.
unsafe impl aya::Pod for HVal {}
// SAFETY: as above.
unsafe impl aya::Pod for DKey {}

/// A tracepoint a program attaches to, and whether tracing can go on without it.
struct Hook {
    program: &'static str,
    group: &'static str,
    event: &'static str,
    /// The stages that need it (empty: the core, without which nothing runs).
    needed_by: &'static [Stage],
}

/// Record fields whose presence shows a raw tracepoint's argument is there: kfree_skb's
/// `reason` came with the argument (5.17).
const RAW_ARGS: &[(&str, &str, &str)] = &[("skb", "kfree_skb", "reason")];

/// An attached hook's link, by program type. A program is a raw tracepoint (`raw_tp/` in the
/// C source) when it reads only the tracepoint's arguments: a classic tracepoint formats its
/// whole record (device names copied, fields filled) before the program runs, which on a
/// 64-byte UDP flood was most of what tracing cost. The arguments are the tracepoint's
/// TP_PROTO, a kernel ABI that only grows at the end (consume_skb gained `location` in 6.3,
/// kfree_skb `rx_sk` in 6.11). Which kind a program is comes from its section, through the
/// loaded object.
enum LinkId {
    Classic(&'static str, TracePointLinkId),
    Raw(&'static str, RawTracePointLinkId),
}

const HOOKS: &[Hook] = &[
    Hook {
        program: "irq_entry",
        group: "irq",
        event: "irq_handler_entry",
        needed_by: &[],
    },
    Hook {
        program: "softirq_raise",
        group: "irq",
        event: "softirq_raise",
        needed_by: &[],
    },
    Hook {
        program: "softirq_entry",
        group: "irq",
        event: "softirq_entry",
        needed_by: &[],
    },
    Hook {
        program: "softirq_exit",
        group: "irq",
        event: "softirq_exit",
        needed_by: &[],
    },
    Hook {
        program: "napi_poll",
        group: "napi",
        event: "napi_poll",
        needed_by: &[],
    },
    Hook {
        program: "gro_entry",
        group: "net",
        event: "napi_gro_receive_entry",
        needed_by: &[],
    },
    Hook {
        program: "rcv_entry",
        group: "net",
        event: "netif_receive_skb_entry",
        needed_by: &[],
    },
    Hook {
        program: "rcv_list_entry",
        group: "net",
        event: "netif_receive_skb_list_entry",
        needed_by: &[Stage::Stack],
    },
    Hook {
        program: "netif_rx_entry",
        group: "net",
        event: "netif_rx_entry",
        needed_by: &[Stage::Stack],
    },
    Hook {
        program: "netif_rx",
        group: "net",
        event: "netif_rx",
        needed_by: &[Stage::Stack],
    },
    Hook {
        program: "rcv_core",
        group: "net",
        event: "netif_receive_skb",
        needed_by: &[Stage::Stack, Stage::Residence],
    },
    Hook {
        program: "data_ready",
        group: "sock",
        event: "sk_data_ready",
        needed_by: &[Stage::Stack, Stage::Residence],
    },
    Hook {
        program: "recv_length",
        group: "sock",
        event: "sock_recv_length",
        needed_by: &[Stage::Residence],
    },
    Hook {
        program: "copy",
        group: "skb",
        event: "skb_copy_datagram_iovec",
        needed_by: &[Stage::Residence],
    },
    Hook {
        program: "kfree",
        group: "skb",
        event: "kfree_skb",
        needed_by: &[Stage::Drops],
    },
    Hook {
        program: "consume",
        group: "skb",
        event: "consume_skb",
        needed_by: &[],
    },
    Hook {
        program: "udp_fail",
        group: "udp",
        event: "udp_fail_queue_rcv_skb",
        needed_by: &[Stage::Drops],
    },
    Hook {
        program: "rcvqueue_full",
        group: "sock",
        event: "sock_rcvqueue_full",
        needed_by: &[Stage::Drops],
    },
    Hook {
        program: "wakeup",
        group: "sched",
        event: "sched_wakeup",
        needed_by: &[Stage::Wakeup],
    },
    Hook {
        program: "sched_switch",
        group: "sched",
        event: "sched_switch",
        needed_by: &[Stage::Wakeup],
    },
];

/// (global in the C source, event, field).
const OFFSETS: &[(&str, &str, &str, &str)] = &[
    ("OFF_GRO_NAME", "net", "napi_gro_receive_entry", "name"),
    ("OFF_GRO_NAPI", "net", "napi_gro_receive_entry", "napi_id"),
    (
        "OFF_GRO_QUEUE",
        "net",
        "napi_gro_receive_entry",
        "queue_mapping",
    ),
    ("OFF_GRO_SKB", "net", "napi_gro_receive_entry", "skbaddr"),
    ("OFF_NETIF_RX_SKB", "net", "netif_rx", "skbaddr"),
    ("OFF_NETIF_RX_NAME", "net", "netif_rx", "name"),
    ("OFF_READY_SK", "sock", "sk_data_ready", "skaddr"),
    ("OFF_READY_PROTO", "sock", "sk_data_ready", "protocol"),
    ("OFF_WAKE_PID", "sched", "sched_wakeup", "pid"),
    ("OFF_SWITCH_NEXT_PID", "sched", "sched_switch", "next_pid"),
];

/// What to trace.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The threads of this process get the wake-up stage.
    pub pid: Option<u32>,
    /// Let [`Session::price`] have the kernel count the programs' run time; without, the
    /// intervals' cost says "unpriced: not asked".
    pub price: bool,
}

/// The hooks whose runs count packets entering the receive path (one of them per skb, by the
/// path its driver takes: GRO, netif_receive_skb, the list variant, or netif_rx's backlog,
/// which veth and loopback use; netif_rx_entry is not one: netif_rx's own event follows it).
const ENTRIES: &[&str] = &["gro_entry", "rcv_entry", "rcv_list_entry", "netif_rx"];

/// How the programs' run time is counted. The kernel's statistics are global: while they are
/// on, every BPF program on the host (a load balancer's XDP program too) pays two clock reads
/// a run (`__bpf_prog_run`'s `bpf_stats_enabled_key` branch, include/linux/filter.h), which
/// on a 64-byte flood traced at full duty here cost a sixth of the flood's rate. So they are
/// turned on only for a share of each traced window ([`Session::price`]).
enum Pricing {
    /// BPF_ENABLE_STATS works: counted while the descriptor is open, which the session opens
    /// for a pricing window and closes after (the kernel also closes it when the process
    /// dies). The kernel.bpf_stats_enabled sysctl is not touched.
    Windows {
        on: Option<(std::os::fd::OwnedFd, Instant)>,
        /// Time priced since the last reading.
        priced: Duration,
    },
    /// The kernel would not give a descriptor, but the sysctl already has statistics on
    /// (someone else's choice): every run is counted.
    Sysctl,
    /// Not counted, and why.
    Off(String),
}

impl Pricing {
    fn start(price: bool) -> Pricing {
        if !price {
            return Pricing::Off("not asked".into());
        }
        // Asked once here, so that an old kernel is said at once, and given back.
        match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
            Ok(_fd) => Pricing::Windows {
                on: None,
                priced: Duration::ZERO,
            },
            Err(e) => {
                let sysctl = "/proc/sys/kernel/bpf_stats_enabled";
                match std::fs::read_to_string(sysctl) {
                    Ok(v) if v.trim() == "1" => Pricing::Sysctl,
                    // BPF_ENABLE_STATS came in 5.8; the sysctl in 5.1.
                    _ => Pricing::Off(format!(
                        "the kernel would not count BPF run time (BPF_ENABLE_STATS: {}) and \
                         {sysctl} is not 1",
                        chain(&e)
                    )),
                }
            }
        }
    }
}

/// Hooks attached for the whole session, not only in sampling windows: they fire per dropped
/// packet, not per packet, and a drop count is wanted whole. (kfree_skb needs the window's skb
/// table to tell a received skb from any other: it is sampled with the rest.)
const ALWAYS: &[&str] = &["udp_fail", "rcvqueue_full"];

/// The scheduler's hooks fire on every context switch of the machine: attached only for --pid.
const SCHED: &[&str] = &["wakeup", "sched_switch"];

/// Loaded and attached programs, and the last values read (to report intervals).
pub struct Session {
    ebpf: Ebpf,
    /// The hooks attached only while sampling (`resume` .. `pause`), and their links when
    /// attached.
    sampled: Vec<&'static Hook>,
    links: Vec<LinkId>,
    /// Detaches still finishing in the kernel (see `pause`).
    detaching: Vec<std::thread::JoinHandle<()>>,
    /// Stages that cannot run on this kernel, with why.
    pub unavailable: Vec<(Stage, String)>,
    /// `reason number → name` of skb drop reasons, from kfree_skb's format.
    pub reasons: BTreeMap<u32, String>,
    /// The programs loaded, for their run counts.
    loaded: Vec<&'static str>,
    pricing: Pricing,
    /// Each program's (runs, ns) at the last read.
    last_runs: BTreeMap<&'static str, (u64, u64)>,
    last: BTreeMap<HKey, Hist>,
    last_drops: BTreeMap<DKey, u64>,
    last_lost: [u64; 2],
}

fn event_dir(group: &str, event: &str) -> String {
    format!("{TRACEFS}/events/{group}/{event}")
}

/// Runs `f` on a new thread that has a mount namespace of its own with tracefs at
/// /sys/kernel/tracing (mounted there only when the host has not: it goes with the thread).
fn with_tracefs<T: Send>(
    f: impl FnOnce() -> Result<T, TraceError> + Send,
) -> Result<T, TraceError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            private_mounts()?;
            if !Path::new(&format!("{TRACEFS}/events")).is_dir() {
                mount_tracefs()?;
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(TraceError::Setup("the loading thread panicked".into())))
    })
}

fn private_mounts() -> Result<(), TraceError> {
    // SAFETY: unshare(2) with constant flags; it only changes this thread's own namespaces
    // (CLONE_FS makes the filesystem context private first, which a thread needs).
    let rc = unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) };
    if rc != 0 {
        return Err(TraceError::Setup(format!(
            "unshare(CLONE_NEWNS): {}",
            std::io::Error::last_os_error()
        )));
    }
    // Nothing mounted here may propagate back to the host.
    let root = c"/";
    // SAFETY: mount(2) with NUL-terminated constant strings and null data; changes only the
    // propagation of this thread's new mount namespace.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(TraceError::Setup(format!(
            "making / private in the trace's mount namespace: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

fn mount_tracefs() -> Result<(), TraceError> {
    let (src, target, fstype) = (c"tracefs", c"/sys/kernel/tracing", c"tracefs");
    // SAFETY: mount(2) with NUL-terminated constant strings and null data, in this thread's
    // private mount namespace.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(TraceError::Missing(format!(
            "tracefs: mounting it at {TRACEFS} failed ({}); the kernel needs CONFIG_TRACING",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

fn read_format(group: &str, event: &str) -> Result<String, String> {
    let path = format!("{}/format", event_dir(group, event));
    // tracefs files are small and regular; read with a cap all the same.
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(1 << 20).read_to_string(&mut text))
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(text)
}

/// `{ 2, "NOT_SPECIFIED" }, ...` of the kfree_skb format's `__print_symbolic(REC->reason, ...)`.
pub fn drop_reasons(format_text: &str) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    let Some(start) = format_text.find("__print_symbolic(REC->reason") else {
        return out;
    };
    let mut rest = &format_text[start..];
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find('}') else {
            break;
        };
        let entry = &rest[..close];
        if let Some((num, name)) = entry.split_once(',') {
            let name = name.trim().trim_matches('"');
            if let Ok(n) = num.trim().parse::<u32>() {
                out.insert(n, name.to_string());
            }
        }
        rest = &rest[close + 1..];
    }
    out
}

impl Session {
    /// Loads the programs and attaches every hook the kernel has. Err when not root, when the
    /// kernel refuses BPF, or when a core tracepoint is missing (named).
    pub fn start(opts: &Options) -> Result<Session, TraceError> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(TraceError::NotRoot);
        }
        raise_memlock();
        let opts = opts.clone();
        with_tracefs(move || {
            let mut unavailable: Vec<(Stage, String)> = Vec::new();
            let mut missing_core = Vec::new();
            let mut present = Vec::new();
            for h in HOOKS {
                if Path::new(&event_dir(h.group, h.event)).is_dir() {
                    present.push(h.program);
                } else if h.needed_by.is_empty() {
                    missing_core.push(format!("{}:{}", h.group, h.event));
                } else {
                    for s in h.needed_by {
                        if !unavailable.iter().any(|(u, _)| u == s) {
                            unavailable.push((
                                *s,
                                format!("this kernel has no tracepoint {}:{}", h.group, h.event),
                            ));
                        }
                    }
                }
            }
            // netif_receive_skb_entry alone would do for drivers without GRO; both are core
            // in practice (every kernel with one has the other).
            if !missing_core.is_empty() {
                return Err(TraceError::Missing(format!(
                    "this kernel has no tracepoint {} (tracefs {TRACEFS}/events)",
                    missing_core.join(", ")
                )));
            }
            let mut loader = EbpfLoader::new();
            // No CO-RE relocation is used: offsets come from the format files below.
            loader.btf(None);
            let mut offsets: Vec<(&'static str, u32)> = Vec::new();
            let globals = OFFSETS.iter().map(|&(g, gr, e, f)| (Some(g), gr, e, f));
            let raw = RAW_ARGS.iter().map(|&(gr, e, f)| (None, gr, e, f));
            for (global, group, event, field) in globals.chain(raw) {
                let Ok(text) = read_format(group, event) else {
                    continue;
                };
                let fields = format::parse(&text)
                    .map_err(|e| TraceError::Missing(format!("{group}:{event} format: {e}")))?;
                let Field { offset, .. } = *fields.get(field).ok_or_else(|| {
                    TraceError::Missing(format!(
                        "{group}:{event} has no field {field} on this kernel"
                    ))
                })?;
                if let Some(global) = global {
                    offsets.push((global, offset));
                }
            }
            for (global, offset) in &offsets {
                loader.set_global(global, offset, true);
            }
            let watch = u32::from(opts.pid.is_some());
            loader.set_global("WATCH_PID", &watch, true);
            let mut ebpf = loader
                .load(OBJECT)
                .map_err(|e| TraceError::Bpf(format!("loading the programs: {}", chain(&e))))?;
            let mut sampled = Vec::new();
            let mut loaded = Vec::new();
            for h in HOOKS.iter().filter(|h| present.contains(&h.program)) {
                if SCHED.contains(&h.program) && opts.pid.is_none() {
                    continue;
                }
                let refused = |e: aya::programs::ProgramError| {
                    TraceError::Bpf(format!(
                        "the kernel refused program {}: {}",
                        h.program,
                        chain(&e)
                    ))
                };
                match ebpf.program_mut(h.program) {
                    Some(Program::RawTracePoint(p)) => p.load().map_err(refused)?,
                    Some(Program::TracePoint(p)) => p.load().map_err(refused)?,
                    _ => {
                        return Err(TraceError::Bpf(format!(
                            "no tracepoint program {} in the object",
                            h.program
                        )));
                    }
                }
                loaded.push(h.program);
                if ALWAYS.contains(&h.program) {
                    attach(&mut ebpf, h)?;
                } else {
                    sampled.push(h);
                }
            }
            let reasons = read_format("skb", "kfree_skb")
                .map(|t| drop_reasons(&t))
                .unwrap_or_default();
            let mut session = Session {
                ebpf,
                sampled,
                links: Vec::new(),
                detaching: Vec::new(),
                unavailable,
                reasons,
                loaded,
                pricing: Pricing::start(opts.price),
                last_runs: BTreeMap::new(),
                last: BTreeMap::new(),
                last_drops: BTreeMap::new(),
                last_lost: [0; 2],
            };
            if let Some(pid) = opts.pid {
                session.watch_threads(pid)?;
            }
            Ok(session)
        })
    }

    /// Opens a sampling window: every per-packet hook is attached from now until `pause`.
    /// Times begun before this call are not sampled (the programs compare with ctl[0]).
    pub fn resume(&mut self) -> Result<(), TraceError> {
        if !self.links.is_empty() {
            return Ok(());
        }
        // The last window's hooks must be gone from the tracepoints before they come back.
        for t in self.detaching.drain(..) {
            let _ = t.join();
        }
        let bpf = |e: aya::maps::MapError| TraceError::Bpf(format!("ctl: {e}"));
        let mut ctl: Array<&mut MapData, u64> = Array::try_from(
            self.ebpf
                .map_mut("ctl")
                .ok_or_else(|| TraceError::Bpf("no map ctl".into()))?,
        )
        .map_err(bpf)?;
        ctl.set(0, monotonic_ns(), 0).map_err(bpf)?;
        let (ebpf, sampled) = (&mut self.ebpf, &self.sampled);
        let links = with_tracefs(move || {
            let mut links = Vec::new();
            for h in sampled {
                match attach(ebpf, h) {
                    Ok(id) => links.push(id),
                    Err(e) => {
                        for t in detach_all(ebpf, links) {
                            let _ = t.join();
                        }
                        return Err(e);
                    }
                }
            }
            Ok(links)
        })?;
        self.links = links;
        Ok(())
    }

    /// Closes the sampling window: the per-packet programs stop running at once; their
    /// tracepoints are unregistered in the background (see `detach_all`).
    pub fn pause(&mut self) {
        let links = std::mem::take(&mut self.links);
        self.detaching.extend(detach_all(&mut self.ebpf, links));
    }

    /// Turns the kernel's counting of BPF run time on or off (see [`Pricing`]); a kernel that
    /// refuses later than at the start leaves the rest of the session unpriced, said why.
    pub fn price(&mut self, want: bool) {
        let Pricing::Windows { on, priced } = &mut self.pricing else {
            return;
        };
        match (want, on.is_some()) {
            (true, false) => match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
                Ok(fd) => *on = Some((fd, Instant::now())),
                Err(e) => {
                    self.pricing =
                        Pricing::Off(format!("BPF_ENABLE_STATS failed mid-trace: {}", chain(&e)))
                }
            },
            (false, true) => {
                if let Some((fd, since)) = on.take() {
                    *priced += since.elapsed();
                    drop(fd);
                }
            }
            _ => {}
        }
    }

    /// Puts every thread of `pid` into the wake-up map.
    fn watch_threads(&mut self, pid: u32) -> Result<(), TraceError> {
        let dir = format!("/proc/{pid}/task");
        let tids: Vec<u32> = std::fs::read_dir(&dir)
            .map_err(|e| TraceError::Setup(format!("--pid {pid}: {dir}: {e}")))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .take(4096)
            .collect();
        let mut map: BpfHashMap<&mut MapData, u32, u64> = BpfHashMap::try_from(
            self.ebpf
                .map_mut("threads")
                .ok_or_else(|| TraceError::Bpf("no map threads".into()))?,
        )
        .map_err(|e| TraceError::Bpf(format!("threads: {e}")))?;
        for t in tids {
            map.insert(t, 0, 0)
                .map_err(|e| TraceError::Bpf(format!("threads: {e}")))?;
        }
        Ok(())
    }

    /// What every histogram counted since the last call (the first call: since the start).
    pub fn read(&mut self) -> Result<Reading, TraceError> {
        let bpf = |e: aya::maps::MapError| TraceError::Bpf(e.to_string());
        let hist: BpfHashMap<&MapData, HKey, HVal> = BpfHashMap::try_from(
            self.ebpf
                .map("hist")
                .ok_or_else(|| TraceError::Bpf("no map hist".into()))?,
        )
        .map_err(bpf)?;
        let mut now: BTreeMap<HKey, Hist> = BTreeMap::new();
        for item in hist.iter() {
            let (k, v) = item.map_err(bpf)?;
            now.insert(
                k,
                Hist {
                    count: v.count,
                    sum: v.sum,
                    max: v.max,
                    squeezed: v.squeezed,
                    buckets: v.buckets.to_vec(),
                },
            );
        }
        let drops: BpfHashMap<&MapData, DKey, u64> = BpfHashMap::try_from(
            self.ebpf
                .map("drops")
                .ok_or_else(|| TraceError::Bpf("no map drops".into()))?,
        )
        .map_err(bpf)?;
        let mut drops_now = BTreeMap::new();
        for item in drops.iter() {
            let (k, v) = item.map_err(bpf)?;
            drops_now.insert(k, v);
        }
        let overflow: Array<&MapData, u64> = Array::try_from(
            self.ebpf
                .map("overflow")
                .ok_or_else(|| TraceError::Bpf("no map overflow".into()))?,
        )
        .map_err(bpf)?;
        let lost = [
            overflow.get(&0, 0).map_err(bpf)?,
            overflow.get(&1, 0).map_err(bpf)?,
        ];
        let empty = Hist::empty();
        let hists = now
            .iter()
            .map(|(k, h)| (*k, h.since(self.last.get(k).unwrap_or(&empty))))
            .filter(|(_, h)| h.count > 0)
            .collect();
        let drops = drops_now
            .iter()
            .map(|(k, n)| (*k, n - self.last_drops.get(k).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        // The time priced since the last reading: None for the whole of it (the sysctl's).
        let (unpriced, priced) = match &mut self.pricing {
            Pricing::Off(why) => (Some(why.clone()), Some(Duration::ZERO)),
            Pricing::Sysctl => (None, None),
            Pricing::Windows { on, priced } => {
                let mut p = std::mem::take(priced);
                if let Some((_, since)) = on {
                    let now = Instant::now();
                    p += now - *since;
                    *since = now;
                }
                (None, Some(p))
            }
        };
        let mut programs = Vec::new();
        if unpriced.is_none() {
            for name in &self.loaded {
                let Some(info) = self.ebpf.program(name).and_then(|p| p.info().ok()) else {
                    continue;
                };
                let now = (info.run_count(), info.run_time().as_nanos() as u64);
                let (runs0, ns0) = self.last_runs.insert(name, now).unwrap_or((0, 0));
                programs.push(ProgramRuns {
                    program: name,
                    runs: now.0.saturating_sub(runs0),
                    run_ns: now.1.saturating_sub(ns0),
                    entry: ENTRIES.contains(name),
                });
            }
        }
        let reading = Reading {
            hists,
            drops,
            lost_events: (lost[0] + lost[1]).saturating_sub(self.last_lost[0] + self.last_lost[1]),
            programs,
            unpriced,
            priced,
        };
        self.last = now;
        self.last_drops = drops_now;
        self.last_lost = lost;
        Ok(reading)
    }
}

impl Drop for Session {
    /// Returns once every hook is off its tracepoint.
    fn drop(&mut self) {
        self.pause();
        for t in self.detaching.drain(..) {
            let _ = t.join();
        }
    }
}

/// One interval's counts, raw (keys as the BPF side has them).
pub struct Reading {
    pub hists: Vec<(HKey, Hist)>,
    pub drops: Vec<(DKey, u64)>,
    /// Events not counted because a map was full.
    pub lost_events: u64,
    /// Each loaded program's runs and run time since the last reading (empty when unpriced).
    pub programs: Vec<ProgramRuns>,
    /// Why the programs' run time was not counted; None: `programs` has it.
    pub unpriced: Option<String>,
    /// How long the run time was counted in the interval; None: all of it (the sysctl's
    /// statistics were on).
    pub priced: Option<Duration>,
}

/// One program's runs in an interval, from the kernel's BPF statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramRuns {
    pub program: &'static str,
    pub runs: u64,
    pub run_ns: u64,
    /// Its runs count packets entering the receive path (see `ENTRIES`).
    pub entry: bool,
}

fn attach(ebpf: &mut Ebpf, h: &'static Hook) -> Result<LinkId, TraceError> {
    let failed = |e: aya::programs::ProgramError| {
        TraceError::Bpf(format!(
            "attaching to {}:{}: {}",
            h.group,
            h.event,
            chain(&e)
        ))
    };
    match ebpf.program_mut(h.program) {
        Some(Program::RawTracePoint(p)) => {
            Ok(LinkId::Raw(h.program, p.attach(h.event).map_err(failed)?))
        }
        Some(Program::TracePoint(p)) => Ok(LinkId::Classic(
            h.program,
            p.attach(h.group, h.event).map_err(failed)?,
        )),
        _ => Err(TraceError::Bpf(format!(
            "no tracepoint program {}",
            h.program
        ))),
    }
}

/// Detaching a hook takes two steps in the kernel: closing the BPF link takes the program off
/// the tracepoint at once; closing the perf event, when it was the tracepoint's last, then
/// unregisters the probe and waits for a grace period (perf_trace_event_unreg), about 40 ms a
/// hook here and serialized between hooks, 0.6 s for all of them. Each link is dropped on a
/// thread of its own, not waited for: the window closes when the programs are off, and the
/// tracepoints cost nothing between windows once the threads are done (`resume` joins them).
/// Keeping the probes registered between windows instead (an idle perf event on each) made
/// the detach quick but cost a 64-byte flood 13 % of its rate between windows.
fn detach_all(ebpf: &mut Ebpf, links: Vec<LinkId>) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    for link in links {
        let taken = match link {
            LinkId::Classic(name, id) => match ebpf.program_mut(name) {
                Some(Program::TracePoint(p)) => p.take_link(id).ok().map(spawn_drop),
                _ => None,
            },
            LinkId::Raw(name, id) => match ebpf.program_mut(name) {
                Some(Program::RawTracePoint(p)) => p.take_link(id).ok().map(spawn_drop),
                _ => None,
            },
        };
        threads.extend(taken);
    }
    threads
}

/// Drops a link on a thread of its own (see `detach_all`).
fn spawn_drop<L: Send + 'static>(link: L) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || drop(link))
}

/// CLOCK_MONOTONIC in ns: bpf_ktime_get_ns's clock.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes into the timespec, which lives across the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An error with every cause it carries (aya's own messages are terse on their own).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones to the cgroup, where
/// raising the limit may fail harmlessly (a container).
fn raise_memlock() {
    let inf = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit(2) with a valid struct that lives across the call.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &inf) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_reasons_come_from_the_format() {
        let fmt = r#"print fmt: "skbaddr=%p protocol=%u location=%pS reason: %s", REC->skbaddr, REC->protocol, REC->location, __print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, { 3, "NO_SOCKET" }, { 6, "SOCKET_RCVBUFF" })"#;
        let r = drop_reasons(fmt);
        assert_eq!(r[&3], "NO_SOCKET");
        assert_eq!(r[&6], "SOCKET_RCVBUFF");
        assert_eq!(r.len(), 3);
        assert!(drop_reasons("print fmt: \"x\"").is_empty());
    }

    #[test]
    fn the_key_and_value_layouts_match_the_c_structs() {
        // struct hkey: 1+1+2+2+2+4+4+16; struct hval: 4 u64 + the buckets; struct dkey: 4+2+2+16.
        assert_eq!(std::mem::size_of::<HKey>(), 32);
        assert_eq!(std::mem::size_of::<HVal>(), 8 * (4 + NBUCKETS));
        assert_eq!(std::mem::size_of::<DKey>(), 24);
    }
}
