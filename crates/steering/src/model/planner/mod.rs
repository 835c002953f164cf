//! Profiles → desired state → a plan. Pure: a host view in, items out; nothing is read or
//! written here, so every decision can be tested on fixture trees.

use crate::model::ctx::Ctx;
use crate::model::desired::{
    Action, Format, Item, ItemKind, NAPI_SET_SINCE, NapiMode, PLAN_SCHEMA_VERSION, Plan, Profile,
    THREADED_POLL_SINCE, Target, kernel_version,
};
use crate::model::knob::{ItemId, QueueFile};
use crate::model::load::{Goal, Load};
use crate::model::rfs::{RFS_ENTRIES, flow_cnt_per_queue};
use netsteer_host::CpuSet;
use netsteer_host::ethtool::{NicKnob, NicSettings};
use netsteer_host::field::Field;
use netsteer_host::netdev::NapiAttr;
use netsteer_host::nic::{Nic, NicIrq};
use netsteer_host::view::HostView;
use std::collections::BTreeMap;

/// busy_poll / busy_read for the latency profile: tuned's network-latency value and the one
/// Documentation/networking/napi.rst uses in its example.
pub const BUSY_POLL_US: i64 = 50;
/// netdev_budget for the throughput profile: twice the default 300, so a busy CPU squeezes less.
pub const THROUGHPUT_BUDGET: i64 = 600;
/// netdev_max_backlog for the throughput profile (scaling.rst suggests 1000 or 10000 with flow
/// limits; RPS enqueues to per-CPU backlogs, which this bounds).
pub const THROUGHPUT_BACKLOG: i64 = 10000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum IrqbalancePolicy {
    /// Leave irqbalance running; IRQ pins are then skipped (it would move them back).
    #[default]
    Leave,
    /// Stop the irqbalance service (rollback starts it again).
    Stop,
}

#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub profile: Profile,
    /// Interfaces to tune; empty means every physical NIC that is not down.
    pub devices: Vec<String>,
    /// Only these CPUs take kernel packet work (IRQs, RPS, XPS).
    pub cpus: Option<CpuSet>,
    pub irqbalance: IrqbalancePolicy,
    /// A queue kept out of the RSS table (seed 000 reserves one for SSH/BGP).
    pub reserve_queue: Option<u32>,
    /// Ports meant for the reserved queue; the plan prints the n-tuple rules for them.
    pub ports: Vec<u16>,
    /// True on the live host, where services exist; a tree has none to stop.
    pub live: bool,
    /// Explicit knobs (`--set PATH=VALUE`), planned after the profile's items; one on the same
    /// file as a profile item replaces it.
    pub knobs: Vec<Knob>,
    /// Per-NAPI settings for every NAPI of the tuned devices (`--napi`); the latency profile
    /// without it turns hard-IRQ deferral off.
    pub napi: Option<NapiMode>,
    /// The host's load (`tune plan --sample`, or the doctor's own sample for its fixes). A
    /// sampled load weighs the IRQ placement: queues that move go hottest first, each to the
    /// CPU with the fewest interrupts per second planned so far (irqbalance balances by
    /// interrupt counts the same way). An average since boot mixes every load the host has
    /// had and is not used.
    pub load: Option<Load>,
}

impl PlanOptions {
    /// `profile` on every device that qualifies, with nothing else asked: no CPU restriction,
    /// irqbalance left alone, no reserved queue, no explicit knob, no per-NAPI setting, and no
    /// live services (callers on the live host set `live`).
    pub fn for_profile(profile: Profile) -> PlanOptions {
        PlanOptions {
            profile,
            devices: Vec::new(),
            cpus: None,
            irqbalance: IrqbalancePolicy::Leave,
            reserve_queue: None,
            ports: Vec::new(),
            live: false,
            knobs: Vec::new(),
            napi: None,
            load: None,
        }
    }
}

/// One explicit knob: a kernel file and the value to write into it. Only the files netsteer
/// tunes are accepted — sysctls, per-queue RPS/XPS/RFS files and IRQ affinities — so a typo
/// cannot turn `tune apply` into a general file writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    pub path: String,
    pub value: String,
    /// What the file holds now, read by the caller through its `HostFs` (plan stays pure).
    pub current: Option<String>,
}

/// Why a value would not read back as written: the kernel rounds a queue's `rps_flow_cnt`
/// (net/core/net-sysfs.c, `store_rps_dev_flow_table_cnt`) and `rps_sock_flow_entries`
/// (net/core/sysctl_net_core.c, `rps_sock_flow_sysctl`) up to a power of two (0 turns the
/// table off and stays 0). Refused before anything is written, with the value that would
/// hold, instead of a write whose read-back fails.
fn rounded_by_the_kernel(target: &Target, value: &str) -> Option<String> {
    let what = match target {
        Target::Queue {
            file: crate::model::knob::QueueFile::RpsFlowCnt,
            ..
        } => "rps_flow_cnt",
        Target::Sysctl { name } if name == "net/core/rps_sock_flow_entries" => {
            "rps_sock_flow_entries"
        }
        _ => return None,
    };
    let Ok(n) = value.parse::<u64>() else {
        return Some(format!("{what} is a count: a number from 0 up"));
    };
    // rps_sock_flow_sysctl caps the table at 2^29 entries before rounding.
    const SOCK_FLOW_CAP: u64 = 1 << 29;
    if what == "rps_sock_flow_entries" && n > SOCK_FLOW_CAP {
        return Some(format!(
            "the kernel caps rps_sock_flow_entries at {SOCK_FLOW_CAP}, so {n} would read back as {SOCK_FLOW_CAP}"
        ));
    }
    if n == 0 || n.is_power_of_two() {
        return None;
    }
    let up = n.checked_next_power_of_two()?;
    Some(format!(
        "the kernel rounds {what} up to a power of two, so {n} would read back as {up}: ask for {up} (or {})",
        up / 2
    ))
}

impl Knob {
    /// Parses `PATH=VALUE`.
    pub fn parse(s: &str) -> Result<Knob, PlanError> {
        let bad = |why: &str| PlanError::BadKnob(s.to_string(), why.to_string());
        let (path, value) = s
            .split_once('=')
            .ok_or_else(|| bad("expected PATH=VALUE"))?;
        let value = value.trim();
        if value.is_empty() || value.len() > 4096 || value.contains('\n') {
            return Err(bad("the value must be one line of 1 to 4096 bytes"));
        }
        if path.split('/').any(|c| c == ".." || c == ".") || path.contains("//") {
            return Err(bad("no '.', '..' or '//' in the path"));
        }
        if let Some(napi) = Knob::napi_knob(path) {
            napi.map_err(|why| bad(&why))?;
            if value.parse::<u64>().is_err() {
                return Err(bad("a NAPI setting's value is a number"));
            }
        } else if crate::model::knob::is_nic_path(path) {
            Knob::nic_knob(path).map_err(|why| bad(&why))?;
            Knob::check_nic_value(value).map_err(|why| bad(&why))?;
        } else if let Some(why) = rounded_by_the_kernel(&Target::file(path), value) {
            return Err(bad(&why));
        } else if Target::file(path).knob_check().is_err() {
            return Err(bad(
                "not a knob netsteer tunes (/proc/sys/net/..., /sys/class/net/IF/queues/{rx,tx}-N/{rps_cpus,rps_flow_cnt,xps_cpus,xps_rxqs}, /sys/class/net/IF/{gro_flush_timeout,napi_defer_hard_irqs,threaded}, /proc/irq/N/smp_affinity[_list], nic/IF/{channels,coalesce,rings,feature,pause}/NAME, nic/IF/napi/{defer-hard-irqs,gro-flush-timeout,irq-suspend-timeout,threaded}, nic/IF/rss/{indirection,weight}, nic/IF/flow-hash/{tcp4,udp4,tcp6,udp6})",
            ));
        }
        Ok(Knob {
            path: path.to_string(),
            value: value.to_string(),
            current: None,
        })
    }

    /// A per-NAPI setting for every NAPI a device has: `nic/IF/napi/ATTR`, ATTR as netdev.yaml
    /// names it. None when `path` is not of that shape; the error says what is wrong with the
    /// device or the attribute.
    pub fn napi_knob(path: &str) -> Option<Result<(String, NapiAttr), String>> {
        let parts: Vec<&str> = path.split('/').collect();
        let ["nic", dev, "napi", attr] = parts.as_slice() else {
            return None;
        };
        Some(if !valid_device_name(dev) {
            Err(format!("{dev:?} is not an interface name"))
        } else {
            NapiAttr::parse(attr)
                .map(|a| (dev.to_string(), a))
                .ok_or_else(|| {
                    format!(
                        "no NAPI setting {attr:?} (defer-hard-irqs, gro-flush-timeout, irq-suspend-timeout, threaded)"
                    )
                })
        })
    }

    /// A NIC setting named as plan items name them: `nic/IF/coalesce/rx-usecs`,
    /// `nic/IF/channels/combined`, `nic/IF/rings/rx`, `nic/IF/rings/tcp-data-split` (header split,
    /// 0/1) or `nic/IF/rings/hds-thresh`, `nic/IF/feature/rx-gro`, `nic/IF/pause/rx`,
    /// `nic/IF/rss/indirection` (the table) or `nic/IF/rss/weight` (`ethtool -X weight`),
    /// `nic/IF/flow-hash/udp4`. Returns the device, the knob and its item kind.
    pub fn nic_knob(path: &str) -> Result<(String, NicKnob, ItemKind), String> {
        let parts: Vec<&str> = path.split('/').collect();
        let ["nic", dev, group, name] = parts.as_slice() else {
            return Err("a NIC knob is nic/IF/GROUP/NAME".into());
        };
        if !valid_device_name(dev) {
            return Err(format!("{dev:?} is not an interface name"));
        }
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(format!("{name:?} is not a setting name"));
        }
        let knob = match *group {
            "channels" if ["combined", "rx", "tx", "other"].contains(name) => {
                NicKnob::Channels(name.to_string())
            }
            "coalesce" => NicKnob::Coalesce(name.to_string()),
            "rings" if netsteer_host::ethtool::RING_PARAMS.contains(name) => {
                NicKnob::Rings(name.to_string())
            }
            "feature" => NicKnob::Feature(name.to_string()),
            "pause" if ["autoneg", "rx", "tx"].contains(name) => NicKnob::Pause(name.to_string()),
            "rss" if ["indirection", "weight"].contains(name) => NicKnob::RssIndirection,
            "flow-hash" if ["tcp4", "udp4", "tcp6", "udp6"].contains(name) => {
                NicKnob::FlowHash(name.to_string())
            }
            _ => {
                return Err(format!(
                    "no NIC knob {group}/{name} (channels/{{combined,rx,tx,other}}, coalesce/NAME, rings/{{rx,tx,tcp-data-split,hds-thresh}}, feature/NAME, pause/{{autoneg,rx,tx}}, rss/{{indirection,weight}}, flow-hash/{{tcp4,udp4,tcp6,udp6}})"
                ));
            }
        };
        let kind = ItemKind::of_nic(&knob);
        Ok((dev.to_string(), knob, kind))
    }

    fn check_nic_value(value: &str) -> Result<(), String> {
        let numbers = value.split_whitespace().all(|w| w.parse::<u64>().is_ok());
        if value.chars().all(|c| "mvtsdfnr".contains(c)) || numbers {
            Ok(())
        } else {
            Err(format!(
                "{value:?}: a NIC knob's value is a number, numbers separated by spaces (an RSS table or weights) or flow-hash letters"
            ))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "--dev {0:?}: not an interface name (1-15 characters, no '/', no whitespace, not '.' or '..')"
    )]
    BadDevice(String),
    #[error("--dev {0}: no such interface (known: {1})")]
    NoDevice(String, String),
    #[error("--cpus {0}: none of these CPUs is online and usable (online: {1})")]
    NoCpus(String, String),
    #[error("no interface to tune: no physical NIC is up; name one with --dev")]
    NothingToTune,
    #[error("--set {0:?}: {1}")]
    BadKnob(String, String),
    #[error(
        "--profile none plans nothing by itself: give knobs with --set PATH=VALUE or per-NAPI settings with --napi"
    )]
    NoKnobs,
    #[error("{0}: without it no NIC IRQ is known, so IRQ affinity, RPS and XPS cannot be planned")]
    IrqsUnknown(String),
}

/// An interface name the kernel could have made (dev_valid_name in net/core/dev.c): the name
/// becomes a path component under /sys/class/net, so nothing else may pass.
pub fn valid_device_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains(':')
        && !name.chars().any(char::is_whitespace)
}

struct Builder<'a> {
    ctx: Ctx<'a>,
    opts: &'a PlanOptions,
    items: Vec<Item>,
    notes: Vec<String>,
    /// Queue vectors the plan puts on each CPU so far, over every NIC: the NICs are placed
    /// one after another on one host, not each as if it were alone.
    irq_load: BTreeMap<u32, usize>,
    /// The CPU each IRQ was given, over every NIC: a legacy INTx line shared by several NICs
    /// is one IRQ, placed once (by the first NIC), never planned twice with two answers.
    irq_cpu: BTreeMap<u32, u32>,
    /// No CPU takes more than this many queue vectors: ⌈vectors ÷ usable CPUs⌉ + 1 over every
    /// NIC planned (the + 1 lets a NIC stay on its own node when the split is uneven).
    irq_cap: usize,
    /// Interrupts per second the plan puts on each CPU so far (a sampled load only).
    irq_rate: BTreeMap<u32, f64>,
    /// The receive and transmit queue counts a channels item of this plan raises a device
    /// to: their vectors come up with it, so they are placed beside the live ones.
    raised: BTreeMap<String, (u32, u32)>,
}

impl Builder<'_> {
    /// Whether the plan places `irq` of `nic`: a vector of a queue the device has now, or of
    /// one the plan's channels item turns on. A vector the driver keeps for a queue that is
    /// off takes no interrupt: pinning it would spend a CPU of the cap on nothing.
    fn places(&self, nic: &Nic, irq: &NicIrq) -> bool {
        if nic.serves_live_queue(irq.role) {
            return true;
        }
        let (rx, tx) = self.raised.get(&nic.name).copied().unwrap_or((0, 0));
        irq.role.rx_queue().is_some_and(|q| q < rx) || irq.role.tx_queue().is_some_and(|q| q < tx)
    }
}

pub mod lane;
mod nic;
mod steering;

fn change_or_keep(current: Option<&str>, desired: &str, format: Format) -> Action {
    match current {
        Some(c) if format.same(c, desired) => Action::Keep,
        _ => Action::Change,
    }
}

impl Builder<'_> {
    /// Adds an item; its kind and format are its target's ([`Target::kind`],
    /// [`Target::format`]), so no planner can file a knob under another kind.
    pub(super) fn push(
        &mut self,
        id: String,
        target: Target,
        current: Option<String>,
        desired: String,
        reason: String,
        skip: Option<String>,
    ) {
        let (kind, format) = (target.kind(), target.format());
        let action = match skip {
            Some(why) => Action::Skip(why),
            None => change_or_keep(current.as_deref(), &desired, format),
        };
        self.items.push(Item {
            id,
            kind,
            target,
            format,
            label: None,
            current,
            desired,
            reason,
            action,
            rewrite: false,
        });
    }

    /// Stopping the irqbalance service (active → inactive; a rollback starts it again). What
    /// it is now is unknown (`None`) when the view could not tell whether it runs.
    pub(super) fn stop_irqbalance(&mut self, reason: String) {
        let current = self
            .ctx
            .view
            .irqbalance
            .known()
            .map(|_| "active".to_string());
        let id = ItemId::Service("irqbalance".into());
        let target = id.target().expect("a service's id names it");
        self.push(id.into(), target, current, "inactive".into(), reason, None);
    }

    pub(super) fn sysctl(&mut self, name: &str, field: &Field<i64>, desired: i64, reason: String) {
        let item_id = ItemId::Sysctl(name.to_string());
        let target = item_id.target().expect("a sysctl's id names its file");
        let id = item_id.to_string();
        if self.items.iter().any(|i| i.id == id) {
            return;
        }
        let (current, skip) = match field {
            Field::Known(v) => (Some(v.to_string()), None),
            // Absent from a tree is not absent from a host: only a live read of a missing
            // file says where this process runs (a global sysctl exists only in the initial
            // network namespace, Documentation/admin-guide/sysctl/net.rst).
            Field::Unknown { unknown } if !self.opts.live => {
                (None, Some(format!("{unknown} (the tree does not hold it)")))
            }
            Field::Unknown { unknown } if unknown.contains("No such file") => (
                None,
                Some(format!(
                    "{unknown} (a global sysctl exists only in the root network namespace)"
                )),
            ),
            Field::Unknown { unknown } => (None, Some(unknown.clone())),
        };
        // Raise-only knobs: never lower what an operator already raised.
        let desired = match current.as_deref().and_then(|c| c.parse::<i64>().ok()) {
            Some(c) if c > desired => c,
            _ => desired,
        };
        self.push(id, target, current, desired.to_string(), reason, skip);
    }
}

/// Every `--dev` must be a valid name of a device the host has.
fn check_devices(view: &HostView, devices: &[String]) -> Result<(), PlanError> {
    for d in devices {
        if !valid_device_name(d) {
            return Err(PlanError::BadDevice(d.clone()));
        }
        if view.nic(d).is_none() {
            let known: Vec<&str> = view.nics.iter().map(|n| n.name.as_str()).collect();
            return Err(PlanError::NoDevice(d.clone(), known.join(", ")));
        }
    }
    Ok(())
}

/// Computes the plan: the desired value of every knob the profile cares about, for the chosen
/// interfaces, and whether each must change.
pub fn plan(view: &HostView, opts: &PlanOptions) -> Result<Plan, PlanError> {
    // Only a sampled load weighs the IRQ placement ([`PlanOptions::load`]).
    let load = opts
        .load
        .as_ref()
        .filter(|l| l.source == crate::model::load::LoadSource::Sampled);
    if opts.profile == Profile::None {
        if opts.knobs.is_empty() && opts.napi.is_none() {
            return Err(PlanError::NoKnobs);
        }
        let mut b = Builder {
            ctx: Ctx::new(view, None, Goal::Balanced, None),
            opts,
            items: Vec::new(),
            notes: Vec::new(),
            irq_load: BTreeMap::new(),
            irq_cpu: BTreeMap::new(),
            irq_cap: usize::MAX,
            irq_rate: BTreeMap::new(),
            raised: BTreeMap::new(),
        };
        if opts.napi.is_some() {
            // Only the per-NAPI settings, on the devices named (every one when none is).
            check_devices(view, &opts.devices)?;
            for nic in view
                .nics
                .iter()
                .filter(|n| opts.devices.is_empty() || opts.devices.contains(&n.name))
            {
                if let Some(s) = &nic.settings {
                    b.napis(nic, s, opts.napi);
                }
            }
        }
        let mut p = Plan {
            schema_version: PLAN_SCHEMA_VERSION,
            profile: Profile::None,
            devices: opts.devices.clone(),
            cpus: None,
            items: b.items,
            notes: b.notes,
        };
        add_knobs(&mut p, &opts.knobs, view)?;
        return Ok(p);
    }
    if let Some(why) = view.irqs_unknown() {
        return Err(PlanError::IrqsUnknown(why.to_string()));
    }
    check_devices(view, &opts.devices)?;
    let goal = match opts.profile {
        Profile::Latency => Goal::Latency,
        Profile::Throughput => Goal::Throughput,
        Profile::Balanced | Profile::None => Goal::Balanced,
    };
    let mut ctx = Ctx::new(view, load, goal, None);
    if let Some(cpus) = &opts.cpus {
        let usable = ctx.usable.intersection(cpus);
        if usable.is_empty() {
            return Err(PlanError::NoCpus(cpus.to_list(), ctx.usable.to_list()));
        }
        ctx.usable = usable;
    }
    // The devices the host-wide plan tunes: every physical NIC that is not down.
    let host_nics = |n: &&Nic| !n.is_virtual() && n.operstate.known().is_none_or(|s| s != "down");
    let nics: Vec<&Nic> = if opts.devices.is_empty() {
        view.nics.iter().filter(host_nics).collect()
    } else {
        opts.devices.iter().filter_map(|d| view.nic(d)).collect()
    };
    if nics.is_empty() {
        return Err(PlanError::NothingToTune);
    }
    // `--dev NAME` plans NAME's slice of the whole host's plan: the queues of every NIC are
    // placed, in the host plan's order, and only the named ones' items kept. Planned alone,
    // each NIC would start from CPU 0 again, and the `tune apply --dev ethN` lines doctor
    // prints under each finding, run one by one, would stack the NICs on the same CPUs that
    // one `tune apply` keeps apart (crates/steering/tests/placement.rs).
    let placed: Vec<&Nic> = view
        .nics
        .iter()
        .filter(|n| host_nics(n) || nics.iter().any(|m| m.name == n.name))
        .collect();
    // Each IRQ once: NICs sharing an INTx line share its one vector.
    let vectors: usize = placed
        .iter()
        .flat_map(|n| n.live_queue_irqs().map(|i| i.irq))
        .collect::<std::collections::BTreeSet<u32>>()
        .len();
    let irq_cap = vectors.div_ceil(ctx.usable.len().max(1)) + 1;
    let mut b = Builder {
        ctx,
        opts,
        items: Vec::new(),
        notes: Vec::new(),
        irq_load: BTreeMap::new(),
        irq_cpu: BTreeMap::new(),
        irq_cap,
        irq_rate: BTreeMap::new(),
        raised: BTreeMap::new(),
    };

    // irqbalance: stopped only when asked; otherwise IRQ pins are skipped, and the plan says so.
    // A view that cannot tell whether it runs is planned as if it did (issue 72): the pins carry
    // the same skip and the same flag, with the reason the state is unknown.
    let has_irqs = nics.iter().any(|n| n.queue_irqs().next().is_some());
    let mut irqbalance_blocks = None;
    if let Some(who) = view.irqbalance_may_run()
        && has_irqs
    {
        let known = view.irqbalance.known().is_some();
        match (opts.irqbalance, opts.live) {
            (IrqbalancePolicy::Stop, true) if view.irqbalance_outside_unit() => {
                irqbalance_blocks = Some(format!(
                    "{who} outside systemd's irqbalance.service, which --irqbalance stop cannot stop; stop it the way it was started, then plan again"
                ));
            }
            (IrqbalancePolicy::Stop, true) => b.stop_irqbalance(
                format!("{who}: it rewrites smp_affinity every 10 s and would undo the IRQ pins; rollback starts it again"),
            ),
            (IrqbalancePolicy::Stop, false) => {
                b.notes.push(format!(
                    "{who} in this tree's host; with --root no service is stopped, the IRQ pins are planned as if it were"
                ));
            }
            (IrqbalancePolicy::Leave, _) => {
                if !known {
                    b.notes.push(format!(
                        "{who}: IRQ pins are skipped as they are when it runs; --irqbalance stop plans them"
                    ));
                }
                irqbalance_blocks = Some(format!(
                    "{who} and would move this IRQ again within 10 s; rerun with --irqbalance stop (rollback restarts it)"
                ));
            }
        }
    }

    for nic in &placed {
        let named = nics.iter().any(|m| m.name == nic.name);
        let (items_before, notes_before) = (b.items.len(), b.notes.len());
        if let Some(s) = nic.settings.clone() {
            b.channels(nic, &s);
            b.features(nic, &s);
            b.coalesce(nic, &s);
            b.pause(nic, &s);
            b.rss(nic, &s);
            b.flow_hash(nic, &s);
            b.napis(nic, &s, opts.napi);
        } else {
            b.notes.push(format!(
                "{}: NIC settings (channels, GRO, coalescing, flow control) not read: left alone",
                nic.name
            ));
        }
        let queue_cpu = b.irqs(nic, irqbalance_blocks.clone());
        let rx_queue_cpus: CpuSet = nic
            .queue_irqs()
            .filter(|i| i.role.carries_rx() && b.places(nic, i))
            .filter_map(|i| queue_cpu.get(&i.role.placement_queue()?).copied())
            .collect();
        b.rps(nic, &rx_queue_cpus);
        b.xps(nic, &queue_cpu);
        if nic.irqs.is_empty() && !nic.is_virtual() {
            b.notes.push(format!(
                "{}: no IRQ of this NIC was recognised by name; IRQ affinity left alone",
                nic.name
            ));
        }
        if !named {
            // Placed so the named NICs' queues go where the host plan puts them; not tuned,
            // except a line it shares with a named NIC (INTx), which that NIC then follows.
            let theirs: Vec<Item> = b.items.drain(items_before..).collect();
            b.items.extend(theirs.into_iter().filter(|i| {
                i.kind == ItemKind::IrqAffinity
                    && ItemId::irq_of(&i.id)
                        .is_some_and(|irq| nics.iter().any(|m| m.irq(irq).is_some()))
            }));
            b.notes.truncate(notes_before);
        }
    }

    let sys = view.sysctls.clone();
    match opts.profile {
        Profile::Latency => {
            let why = |k: &str| {
                format!(
                    "latency: {k} spins up to {BUSY_POLL_US} µs on the device queue before sleeping (napi.rst); costs CPU while waiting"
                )
            };
            b.sysctl(
                "net.core.busy_poll",
                &sys.busy_poll,
                BUSY_POLL_US,
                why("poll/select/epoll"),
            );
            b.sysctl(
                "net.core.busy_read",
                &sys.busy_read,
                BUSY_POLL_US,
                why("a blocking read"),
            );
        }
        Profile::Throughput => {
            b.sysctl(
                "net.core.netdev_budget",
                &sys.netdev_budget,
                THROUGHPUT_BUDGET,
                format!(
                    "throughput: {THROUGHPUT_BUDGET} packets per NET_RX run, fewer time squeezes"
                ),
            );
            b.sysctl(
                "net.core.netdev_max_backlog",
                &sys.netdev_max_backlog,
                THROUGHPUT_BACKLOG,
                format!("throughput: per-CPU backlog of {THROUGHPUT_BACKLOG} packets before drops (RPS enqueues there)"),
            );
        }
        Profile::Balanced | Profile::None => {}
    }

    b.items.sort_by_key(|i| i.phase());
    let mut p = Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        profile: opts.profile,
        devices: nics.iter().map(|n| n.name.clone()).collect(),
        cpus: opts.cpus.as_ref().map(CpuSet::to_list),
        items: b.items,
        notes: b.notes,
    };
    add_knobs(&mut p, &opts.knobs, view)?;
    Ok(p)
}

/// A plan of items made elsewhere (a watcher's reflex: the planner's own items, or its own
/// sysctl steps), each one's value now given by `read` and its action from it, as `--set`
/// knobs are planned: a value that cannot be read is skipped with the reason, one already as
/// desired kept. The devices are those its NIC items are of.
pub fn plan_of(items: Vec<Item>, read: impl Fn(&Target) -> Result<String, String>) -> Plan {
    let mut p = Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        profile: Profile::None,
        devices: Vec::new(),
        cpus: None,
        items: Vec::new(),
        notes: Vec::new(),
    };
    for item in items {
        let (current, action) = match read(&item.target) {
            Ok(v) => {
                let a = change_or_keep(Some(&v), &item.desired, item.format);
                (Some(v), a)
            }
            Err(why) => (
                None,
                Action::Skip(format!("{}: not readable here: {why}", item.target)),
            ),
        };
        if let Some(d) = item.target_device()
            && !p.devices.iter().any(|x| x == d)
        {
            p.devices.push(d.to_string());
        }
        p.items.push(Item {
            current,
            action,
            ..item
        });
    }
    p.items.sort_by_key(|i| i.phase());
    p
}

/// The largest value `knob` takes on a device with settings `s`, when `value` is a number past
/// it: what `--set` and `tune search --knob` both refuse before anything is written.
pub(crate) fn past_limit(knob: &NicKnob, s: &NicSettings, value: &str) -> Option<u64> {
    let max = knob.limit(s)?;
    value
        .trim()
        .parse::<u64>()
        .is_ok_and(|v| v > max)
        .then_some(max)
}

/// Says in the plan's notes that the explicit knob `key=value` is not set, and why; a later
/// `--set` of the same key replaces an earlier one's note (and clears it when it is set).
fn refused_note(notes: &mut Vec<String>, key: &str, value: &str, why: Option<&str>) {
    let said = format!("{key}=");
    notes.retain(|n| !n.starts_with(&said));
    if let Some(why) = why {
        notes.push(format!("{key}={value} not set: {why}"));
    }
}

/// An explicit NIC knob as a plan item, its current value read from the view's NIC settings.
fn nic_knob_item(k: &Knob, view: &HostView) -> Result<Item, PlanError> {
    let bad = |why: String| PlanError::BadKnob(format!("{}={}", k.path, k.value), why);
    let (dev, knob, kind) = Knob::nic_knob(&k.path).map_err(bad)?;
    let nic = view.nic(&dev).ok_or_else(|| {
        let known: Vec<&str> = view.nics.iter().map(|n| n.name.as_str()).collect();
        PlanError::NoDevice(dev.clone(), known.join(", "))
    })?;
    let settings = nic.settings.as_ref();
    // A value past what the device says it takes is refused here, naming the bound, before
    // anything is journaled: the kernel's EINVAL would come after earlier writes and undo
    // them all.
    if let Some(max) = settings.and_then(|s| past_limit(&knob, s, &k.value)) {
        return Err(bad(if max == 1 {
            format!("{knob} is 0 (off) or 1 (on)")
        } else {
            format!(
                "{knob} {} is above the device's maximum {max}",
                k.value.trim()
            )
        }));
    }
    let read = settings.map(|s| knob.read(s));
    let (format, desired) = match (&knob, k.path.ends_with("/weight")) {
        (NicKnob::RssIndirection, true) => {
            let weights: Vec<u32> = k
                .value
                .split_whitespace()
                .map(|w| w.parse::<u32>().map_err(|_| bad(format!("weight {w:?}"))))
                .collect::<Result<_, _>>()?;
            let size = match &read {
                Some(Ok(t)) => t.split_whitespace().count(),
                Some(Err(why)) => return Err(bad(why.clone())),
                None => return Err(bad("NIC settings were not read".into())),
            };
            let table =
                netsteer_host::ethtool::indirection_of_weights(&weights, size).map_err(bad)?;
            let text: Vec<String> = table.iter().map(u32::to_string).collect();
            (Format::Text, text.join(" "))
        }
        (NicKnob::RssIndirection | NicKnob::FlowHash(_), _) => (Format::Text, k.value.clone()),
        _ => (Format::Int, k.value.clone()),
    };
    let id = ItemId::Nic {
        dev: dev.clone(),
        knob: knob.clone(),
    }
    .to_string();
    let (current, action) = match read {
        None => (
            None,
            Action::Skip("NIC settings were not read (--no-ethtool or no ethtool netlink)".into()),
        ),
        Some(Err(why)) => (None, Action::Skip(why)),
        Some(Ok(v)) => {
            let a = match change_or_keep(Some(&v), &desired, format) {
                // A `[fixed]` feature would be asked for, ignored and then fail its read-back,
                // undoing the rest: refused here with the reason, as the planner's own are.
                Action::Change if settings.is_some_and(|s| !knob.changeable(s)) => {
                    Action::Skip(format!("{knob} is fixed by the driver"))
                }
                a => a,
            };
            (Some(v), a)
        }
    };
    // An explicit table is written even when it reads back the same: the user asks for the
    // device to have it (rss-table-not-followed's fix).
    let rewrite = knob == NicKnob::RssIndirection && current.is_some();
    Ok(Item {
        id,
        kind,
        target: Target::Nic { dev, knob },
        format,
        label: None,
        current,
        desired,
        reason: "set explicitly (--set)".into(),
        action: if rewrite { Action::Change } else { action },
        rewrite,
    })
}

/// A per-NAPI knob (`nic/IF/napi/ATTR`) as one item per NAPI the device has now: NAPI ids are
/// the kernel's and change when queues are re-created, so the path names the device and the
/// plan names the instances (each restored by id on rollback).
fn napi_knob_items(k: &Knob, view: &HostView) -> Result<Vec<Item>, PlanError> {
    let bad = |why: String| PlanError::BadKnob(format!("{}={}", k.path, k.value), why);
    let (dev, attr) = Knob::napi_knob(&k.path)
        .unwrap_or_else(|| Err("not a NAPI knob".into()))
        .map_err(bad)?;
    let nic = view.nic(&dev).ok_or_else(|| {
        let known: Vec<&str> = view.nics.iter().map(|n| n.name.as_str()).collect();
        PlanError::NoDevice(dev.clone(), known.join(", "))
    })?;
    let settings = nic.settings.as_ref().ok_or_else(|| {
        bad("NIC settings were not read (--no-ethtool or no ethtool netlink)".into())
    })?;
    let nd = settings.netdev().map_err(|why| bad(why.to_string()))?;
    if nd.napis.is_empty() {
        return Err(bad(format!(
            "{dev} has no NAPI instances now{}",
            if nic.kind == "veth" {
                " (a veth gets them with GRO on or XDP attached)"
            } else {
                ""
            }
        )));
    }
    if nd.napis.iter().all(|n| attr.read(n).is_none()) {
        use crate::model::knob::DeviceFile;
        let file = match attr {
            NapiAttr::IrqSuspendTimeout => None,
            NapiAttr::DeferHardIrqs => Some(DeviceFile::NapiDeferHardIrqs),
            NapiAttr::GroFlushTimeout => Some(DeviceFile::GroFlushTimeout),
            NapiAttr::Threaded => Some(DeviceFile::Threaded),
        };
        let files = match file {
            None => "it has no device-wide file".to_string(),
            Some(file) => format!(
                "{} is the device-wide one",
                Target::DeviceFile {
                    dev: dev.to_string(),
                    file
                }
            ),
        };
        return Err(bad(format!(
            "this kernel does not report per-NAPI {attr} (NETDEV_CMD_NAPI_SET: Linux 6.13+, threaded 6.17+); {files}"
        )));
    }
    let mut items = Vec::new();
    for n in &nd.napis {
        let knob = NicKnob::Napi(n.id, attr);
        let (current, action) = match knob.read(settings) {
            Ok(v) => {
                let a = change_or_keep(Some(&v), &k.value, Format::Int);
                (Some(v), a)
            }
            Err(why) => (None, Action::Skip(why)),
        };
        items.push(Item {
            id: ItemId::Nic {
                dev: dev.clone(),
                knob: knob.clone(),
            }
            .into(),
            kind: ItemKind::Napi,
            target: Target::Nic {
                dev: dev.clone(),
                knob,
            },
            format: Format::Int,
            label: None,
            current,
            desired: k.value.clone(),
            reason: format!("set explicitly (--set {}, on every NAPI of {dev})", k.path),
            action,
            rewrite: false,
        });
    }
    Ok(items)
}

/// Adds the explicit knobs to a plan: each replaces a profile item on the same file, or joins
/// the plan in its kind's phase (so an RPS mask is still written after the IRQ it follows).
fn add_knobs(p: &mut Plan, knobs: &[Knob], view: &HostView) -> Result<(), PlanError> {
    for k in knobs {
        if crate::model::knob::is_nic_path(&k.path) {
            let items = if Knob::napi_knob(&k.path).is_some() {
                napi_knob_items(k, view)?
            } else {
                vec![nic_knob_item(k, view)?]
            };
            for item in items {
                // Asked for by name and refused: said where `apply` reports it too, as a
                // profile's own skips (a queue not in this namespace) need not be.
                let why = match &item.action {
                    Action::Skip(why) => Some(why.as_str()),
                    _ => None,
                };
                refused_note(&mut p.notes, &item.id, &k.value, why);
                p.items.retain(|i| i.target != item.target);
                if let Some(d) = item.target_device()
                    && !p.devices.iter().any(|x| x == d)
                {
                    p.devices.push(d.to_string());
                }
                p.items.push(item);
            }
            continue;
        }
        let target = Target::file(&k.path);
        if target.knob_check().is_err() {
            continue;
        }
        let (kind, format) = (target.kind(), target.format());
        let unread = k.current.is_none().then_some("not readable here");
        refused_note(&mut p.notes, &k.path, &k.value, unread);
        p.items.retain(|i| i.target != target);
        p.items.push(Item {
            id: ItemId::Set(k.path.clone()).into(),
            kind,
            target,
            format,
            label: None,
            current: k.current.clone(),
            desired: k.value.clone(),
            reason: "set explicitly (--set)".into(),
            action: match &k.current {
                Some(_) => change_or_keep(k.current.as_deref(), &k.value, format),
                None => Action::Skip(format!("{}: not readable here", k.path)),
            },
            rewrite: false,
        });
    }
    p.items.sort_by_key(|i| i.phase());
    Ok(())
}
