//! Seed 000's latency ladder between two guests, on a NIC with interrupts: block → SO_BUSY_POLL
//! on a NAPI device → spin → one queue per CPU (IRQ pinning) → XPS to match → and, on a NIC
//! with an RSS table (igb, virtio-net with RSS), the NIC rungs: one channel, RSS isolation (the
//! latency flow's hash bucket alone on a reserved queue, every other bucket off it), the
//! n-tuple rule seed 000 adds on top (refused by drivers without n-tuple filters, and said so),
//! interrupt coalescing off (rx-usecs 0, where the driver has it) → the latency profile. Each
//! run reports, beside the round trip, what the mechanism did: the NAPI id the echoes came from
//! (non-zero: busy polling had something to poll), on which CPU each queue's interrupts
//! landed in both guests, which receive queue the latency flow's interrupts came from, and how
//! many of a burst of bulk flows' interrupts hit that queue.
//!
//! The latency flow keeps one source port ([`LATENCY_PORT`]) in every rung, so its hash — and
//! its queue — only move when the NIC's settings do. Without n-tuple filters the only way to
//! give it a queue of its own is the indirection table: its bucket is found by bisection (the
//! table splits the buckets between two queues, the flow's interrupts say which half holds it),
//! then that one bucket goes to the reserved queue. Bulk flows that hash to the same bucket (one
//! in 128 each) share it; the rung counts them.
//!
//! Under emulation the microseconds are not bare metal's; the placements and the directions
//! are what the ladder shows.

use super::{Guest, NicModel, VM_B_ADDR, VmPair};
use crate::{LabError, Result};
use netsteer_bench::udp_echo::message::ClientSummary;
use netsteer_host::irqname::IrqRole;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) const T: Duration = Duration::from_secs(300);
const STATE: &str = "/tmp/netsteer-ladder";
/// The state directory of the bucket probes (each applied and rolled back at once).
const PROBE_STATE: &str = "/tmp/netsteer-ladder-probe";
/// The latency flow's source port, the same in every rung.
pub const LATENCY_PORT: u16 = 40000;
/// The bulk flows: this many, from source ports counting up from [`BULK_PORT`].
pub const BULK_FLOWS: u32 = 16;
pub const BULK_PORT: u16 = 41000;
/// The port the server listens on, and that seed 000's n-tuple rule names.
pub const SERVER_PORT: u16 = 4321;
/// The queue the RSS-isolation rung reserves for the latency flow.
pub const RESERVED_QUEUE: u32 = 1;

/// A queue vector's interrupts during one run, by CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueIrq {
    pub irq: u32,
    /// `virtio2-input.0`, `eth0-rx-1`, `eth0-TxRx-0`.
    pub name: String,
    /// Interrupts per CPU during the run.
    pub per_cpu: Vec<u64>,
    /// The CPUs its affinity allows (smp_affinity_list).
    pub allowed: String,
}

/// The bulk flows' receive interrupts in the server during a burst of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkIrqs {
    pub flows: u32,
    /// On the latency flow's queue.
    pub on_latency_queue: u64,
    /// On every receive queue.
    pub total: u64,
}

/// One run of one rung.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RungRun {
    #[serde(rename = "type")]
    pub kind: String,
    pub rung: String,
    pub repeat: u32,
    pub sent: u64,
    pub received: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub round_trips_per_s: f64,
    /// SO_INCOMING_NAPI_ID of the client's echoes (0 or none: nothing for busy polling).
    pub napi_id: Option<u32>,
    /// With a busy-polling wait: whether it had a NAPI to poll.
    pub busy_poll_engaged: Option<bool>,
    pub client_irqs: Vec<QueueIrq>,
    pub server_irqs: Vec<QueueIrq>,
    /// The server's receive queue that took most of the latency flow's interrupts.
    #[serde(default)]
    pub latency_queue: Option<u32>,
    /// On a NIC with RSS: a burst of bulk flows alone, and how much of it hit that queue.
    #[serde(default)]
    pub bulk: Option<BulkIrqs>,
    /// The RSS-isolation rung: the latency flow's hash bucket, found by bisection.
    #[serde(default)]
    pub bucket: Option<u32>,
    /// What the rung changed, or could not (a device without coalescing, a driver that
    /// refuses n-tuple rules).
    pub notes: Vec<String>,
    /// `--trace`: where the latency flow's time went in guest b during the run (`netsteer
    /// trace` rows on eth0, and the per-CPU softirq rows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<netsteer_trace::StageRow>,
}

/// What a rung changes, in both guests unless it says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    None,
    /// Each queue's vectors on one CPU (queue i → CPU i mod cpus); with XPS to match.
    Pin {
        xps: bool,
    },
    /// `combined` channels.
    Channels(u32),
    /// The server's table: the latency flow's bucket alone on [`RESERVED_QUEUE`], UDP hashed
    /// on ports (so the bulk flows' buckets differ from it).
    RssIsolation,
    /// Seed 000's n-tuple rule for the server port on the reserved queue.
    Ntuple,
    /// Interrupt coalescing: rx-usecs.
    Coalesce(u32),
    /// tune's latency profile on eth0.
    LatencyProfile,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    pub name: String,
    /// The echo tools' wait mode.
    pub wait: &'static str,
    pub change: Change,
    /// Whether its change stays for the rungs above it (the ladder climbs), or is rolled back
    /// right after its run (a detour, like one channel).
    pub keep: bool,
}

fn rung(name: &str, wait: &'static str, change: Change, keep: bool) -> Rung {
    Rung {
        name: name.into(),
        wait,
        change,
        keep,
    }
}

/// The rungs for a NIC model, in order.
pub fn rungs(model: NicModel) -> Vec<Rung> {
    let mut r = vec![
        rung("block", "block", Change::None, true),
        rung("busy-poll 50", "busy-poll", Change::None, true),
        rung("spin", "spin", Change::None, true),
    ];
    let rss = matches!(model, NicModel::Igb | NicModel::VirtioRss);
    if rss {
        r.push(rung(
            "spin, one channel (every flow on one queue)",
            "spin",
            Change::Channels(1),
            false,
        ));
    }
    r.push(rung(
        "spin, one queue per CPU",
        "spin",
        Change::Pin { xps: false },
        true,
    ));
    r.push(rung(
        "spin, one queue per CPU + XPS",
        "spin",
        Change::Pin { xps: true },
        true,
    ));
    if rss {
        r.push(rung(
            "spin, RSS isolation (latency flow's bucket alone on the reserved queue)",
            "spin",
            Change::RssIsolation,
            true,
        ));
        r.push(rung(
            "spin, n-tuple rule for the latency port",
            "spin",
            Change::Ntuple,
            true,
        ));
    }
    if model == NicModel::Igb {
        r.push(rung(
            "spin, coalescing off (rx-usecs 0)",
            "spin",
            Change::Coalesce(0),
            true,
        ));
    }
    r.push(rung(
        "latency profile (coalescing, busy_read 50)",
        "block",
        Change::LatencyProfile,
        true,
    ));
    r
}

/// Per queue vector (by IRQ number): its name, its count per CPU and its allowed CPUs.
pub type Counts = BTreeMap<u32, (String, Vec<u64>, String)>;

/// The queue vectors' counts per CPU now, and their allowed CPUs: the guest's whole
/// /proc/interrupts and every IRQ's smp_affinity_list, read by the host crate's naming rules
/// (`queue_vectors`), not by a pattern of the lab's own.
pub fn irq_counts(g: &mut Guest, model: NicModel) -> Result<Counts> {
    let (_, out) = g.sh(
        "cat /proc/interrupts; for i in /proc/irq/[0-9]*; do echo \"@ ${i#/proc/irq/} $(cat $i/smp_affinity_list)\"; done",
        T,
    )?;
    queue_vectors(&out, model)
}

/// `irq_counts` from its text: /proc/interrupts (read by the host crate's parser), then
/// `@ IRQ LIST` lines. A vector is kept when `netsteer_host::irqname` names it a packet queue
/// of eth0 under the model's driver (config, control and other devices' vectors are not).
pub fn queue_vectors(text: &str, model: NicModel) -> Result<Counts> {
    let (affinity, interrupts): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.starts_with("@ "));
    let allowed: BTreeMap<u32, &str> = affinity
        .iter()
        .filter_map(|l| {
            let mut f = l[2..].split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?))
        })
        .collect();
    let parsed = netsteer_host::parse::parse_interrupts(&interrupts.join("\n"))
        .map_err(|e| LabError::Invalid(format!("the guest's /proc/interrupts: {e}")))?;
    // A row's name is its last handler's (a shared line lists several).
    let rows: Vec<(u32, &str, &Vec<u64>)> = parsed
        .rows
        .iter()
        .filter_map(|r| Some((r.number()?, r.actions.last()?.as_str(), &r.counts)))
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r.1).collect();
    let queues: Vec<&str> =
        netsteer_host::irqname::classify_named_all(&names, "eth0", model.driver())
            .into_iter()
            .filter(|(_, r)| r.carries_packets())
            .map(|(n, _)| n)
            .collect();
    Ok(rows
        .into_iter()
        .filter(|r| queues.contains(&r.1))
        .map(|(irq, name, counts)| {
            let a = allowed.get(&irq).copied().unwrap_or_default();
            (irq, (name.to_string(), counts.clone(), a.to_string()))
        })
        .collect())
}

pub fn delta(before: &Counts, after: &Counts) -> Vec<QueueIrq> {
    after
        .iter()
        .map(|(irq, (name, counts, allowed))| {
            let b = before.get(irq).map(|e| e.1.clone()).unwrap_or_default();
            QueueIrq {
                irq: *irq,
                name: name.clone(),
                per_cpu: counts
                    .iter()
                    .enumerate()
                    .map(|(i, c)| c.saturating_sub(*b.get(i).unwrap_or(&0)))
                    .collect(),
                allowed: allowed.clone(),
            }
        })
        .collect()
}

/// The receive queue a vector serves, from its name (`virtio2-input.1` → 1, `eth0-rx-1` → 1,
/// `eth0-TxRx-1` → 1); None for a transmit-only vector.
pub fn rx_queue_of(name: &str) -> Option<u32> {
    role_of(name)?.rx_queue()
}

/// A guest vector's role, by the host crate's naming rules for the lab's NIC models (each
/// guest has one NIC, eth0).
fn role_of(name: &str) -> Option<IrqRole> {
    [NicModel::Virtio, NicModel::Igb]
        .iter()
        .find_map(|m| netsteer_host::irqname::classify_named(name, "eth0", m.driver()))
        .filter(|r| r.carries_packets())
}

/// Receive interrupts per queue in a run.
pub fn rx_by_queue(irqs: &[QueueIrq]) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for i in irqs {
        if let Some(q) = rx_queue_of(&i.name) {
            *m.entry(q).or_insert(0) += i.per_cpu.iter().sum::<u64>();
        }
    }
    m
}

/// The queue with most receive interrupts, if any had some.
pub(super) fn busiest(by_queue: &BTreeMap<u32, u64>) -> Option<u32> {
    by_queue
        .iter()
        .filter(|(_, n)| **n > 0)
        .max_by_key(|(_, n)| **n)
        .map(|(q, _)| *q)
}

/// `tune apply` in a guest; returns the journal (to roll back) and a note of what it did.
pub(super) fn apply(
    g: &mut Guest,
    bin: &str,
    state: &str,
    args: &[&str],
) -> Result<(String, String)> {
    let mut argv = vec![bin, "tune", "apply", "--state-dir", state, "--json"];
    argv.extend_from_slice(args);
    let out = g.host_ok(&argv, T)?;
    let r: netsteer_steering::tune::ApplyReport = serde_json::from_str(&out).map_err(|e| {
        LabError::Invalid(format!("guest {}: tune apply output: {e}: {out:?}", g.name))
    })?;
    use netsteer_steering::tune::StepStatus;
    let n = |s: StepStatus| r.steps.iter().filter(|x| x.status == s).count();
    let skipped: Vec<String> = r
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Skipped)
        .map(|s| format!("{} ({})", s.id, s.why.as_deref().unwrap_or("")))
        .collect();
    let mut note = format!(
        "guest {}: {} changed, {} unchanged, {} skipped",
        g.name,
        n(StepStatus::Changed) + n(StepStatus::Rewritten),
        n(StepStatus::Unchanged),
        n(StepStatus::Skipped)
    );
    if !skipped.is_empty() {
        note.push_str(&format!(": {}", skipped.join("; ")));
    }
    for n in &r.notes {
        note.push_str(&format!("; {n}"));
    }
    Ok((r.journal, note))
}

pub(super) fn rollback_one(g: &mut Guest, bin: &str, state: &str, journal: &str) -> Result<()> {
    g.host_ok(&[bin, "tune", "rollback", journal, "--state-dir", state], T)?;
    Ok(())
}

/// The queue vectors of the guest's NIC, each pinned to one CPU (queue i → CPU i mod cpus),
/// and, with `xps`, each tx queue sent from the CPU of its vectors: `--set` knobs for tune.
fn pin_knobs(g: &mut Guest, model: NicModel, cpus: u32, xps: bool) -> Result<Vec<String>> {
    let counts = irq_counts(g, model)?;
    let mut knobs = Vec::new();
    for (irq, (name, _, _)) in &counts {
        let role = role_of(name);
        let q: u32 = role.and_then(IrqRole::placement_queue).unwrap_or(0);
        knobs.push(format!("/proc/irq/{irq}/smp_affinity_list={}", q % cpus));
        let transmits = role.and_then(IrqRole::tx_queue).is_some();
        if xps && transmits {
            knobs.push(format!(
                "/sys/class/net/eth0/queues/tx-{q}/xps_cpus={:x}",
                1u64 << (q % cpus)
            ));
        }
    }
    knobs.sort();
    knobs.dedup();
    Ok(knobs)
}

fn set_args(knobs: &[String]) -> Vec<String> {
    ["--profile".to_string(), "none".to_string()]
        .into_iter()
        .chain(knobs.iter().flat_map(|k| ["--set".to_string(), k.clone()]))
        .collect()
}

/// The server's indirection table length (entries), read by the guest's own ethtool.
pub(super) fn table_len(g: &mut Guest) -> Result<usize> {
    let out = g.host_ok(&["ethtool", "-x", "eth0"], T)?;
    match indirection_len(&out) {
        0 => Err(LabError::Invalid(format!(
            "guest {}: ethtool -x eth0 shows no indirection table: {out}",
            g.name
        ))),
        n => Ok(n),
    }
}

/// The entries of the table `ethtool -x` prints (`    0:      0     0 ...` rows). Only the
/// table's rows count: the hash key after it is hex bytes joined by ':', and a key that starts
/// with a decimal-looking byte (`48:6d:...`) would count as one more entry (a 7.3 guest's
/// 128-entry table once read as 129, and the kernel refused the 129-entry table).
pub fn indirection_len(ethtool_x: &str) -> usize {
    ethtool_x
        .lines()
        .take_while(|l| !l.trim_start().starts_with("RSS hash key"))
        .filter(|l| {
            l.trim_start()
                .split(':')
                .next()
                .is_some_and(|k| k.trim().parse::<u32>().is_ok())
        })
        .map(|l| {
            l.split(':')
                .nth(1)
                .map_or(0, |v| v.split_whitespace().count())
        })
        .sum()
}

/// Round trips of the latency flow (its fixed source port) to the server; the client summary.
pub(super) fn latency_run(
    pair: &mut VmPair,
    bin: &str,
    wait: &str,
    count: u64,
) -> Result<(i32, String)> {
    let server = format!("{VM_B_ADDR}:{SERVER_PORT}");
    let count = count.to_string();
    let port = LATENCY_PORT.to_string();
    let cpu = pair.client_cpus[0].to_string();
    pair.a.host(
        &[
            bin,
            "bench",
            "udp-echo",
            "client",
            &server,
            "--cpu",
            &cpu,
            "--wait",
            wait,
            "--busy-poll",
            "50",
            "--src-port",
            &port,
            "--count",
            &count,
            "--timeout",
            "5",
            "--json",
        ],
        T,
    )
}

/// The server's receive interrupts per queue during `run`.
pub(super) fn server_rx_during(
    pair: &mut VmPair,
    run: impl FnOnce(&mut VmPair) -> Result<()>,
) -> Result<BTreeMap<u32, u64>> {
    let model = pair.nic;
    let before = irq_counts(&mut pair.b, model)?;
    run(pair)?;
    let after = irq_counts(&mut pair.b, model)?;
    Ok(rx_by_queue(&delta(&before, &after)))
}

/// A burst of the bulk flows alone (they need no particular wait).
pub(super) fn bulk_burst(pair: &mut VmPair, bin: &str) -> Result<()> {
    let server = format!("{VM_B_ADDR}:{SERVER_PORT}");
    let flows = BULK_FLOWS.to_string();
    let port = BULK_PORT.to_string();
    let cpu = pair.client_cpus[1].to_string();
    pair.a.host_ok(
        &[
            bin,
            "bench",
            "udp-echo",
            "client",
            &server,
            "--cpu",
            &cpu,
            "--flows",
            &flows,
            "--src-port",
            &port,
            "--count",
            "20",
            "--timeout",
            "5",
        ],
        T,
    )?;
    Ok(())
}

/// The `--set` of a `len`-entry table sending the buckets `reserved` picks to
/// [`RESERVED_QUEUE`] and every other to rx-0.
fn table_knob(len: usize, reserved: impl Fn(usize) -> bool) -> String {
    let table: Vec<String> = (0..len)
        .map(|i| {
            if reserved(i) {
                RESERVED_QUEUE.to_string()
            } else {
                "0".to_string()
            }
        })
        .collect();
    format!("nic/eth0/rss/indirection={}", table.join(" "))
}

/// The latency flow's bucket in the server's table, by bisection over `len` entries: each
/// round sends the probed half to [`RESERVED_QUEUE`] and the rest to queue 0, sends a few of
/// the flow's round trips, and keeps the half whose queue took them. Every probe table is
/// applied with tune and rolled back before the next.
pub(super) fn latency_bucket(pair: &mut VmPair, bin: &str, len: usize) -> Result<u32> {
    latency_bucket_of(pair, bin, len, &mut |p| {
        let (rc, out) = latency_run(p, bin, "block", 10)?;
        if rc != 0 {
            return Err(LabError::Invalid(format!("bucket probe: client: {out}")));
        }
        Ok(())
    })
}

/// The RSS bucket of the flow `probe` sends, by bisection: each half of the table on the
/// reserved queue in turn, the probe run, the server's receive interrupts read.
pub(super) fn latency_bucket_of(
    pair: &mut VmPair,
    bin: &str,
    len: usize,
    probe: &mut dyn FnMut(&mut VmPair) -> Result<()>,
) -> Result<u32> {
    let (mut lo, mut hi) = (0usize, len);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let knob = table_knob(len, |i| (lo..mid).contains(&i));
        let (journal, _) = apply(
            &mut pair.b,
            bin,
            PROBE_STATE,
            &["--profile", "none", "--set", &knob],
        )?;
        let by_queue = server_rx_during(pair, |p| probe(p));
        rollback_one(&mut pair.b, bin, PROBE_STATE, &journal)?;
        let by_queue = by_queue?;
        let on = |q: u32| by_queue.get(&q).copied().unwrap_or(0);
        if on(RESERVED_QUEUE) > on(0) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(lo as u32)
}

/// What the rung changes, applied in both guests (or the server alone); journals to `keep`
/// and notes to `notes`. Returns the bucket the isolation rung found.
fn enter(
    pair: &mut VmPair,
    bin: &str,
    cpus: u32,
    change: &Change,
    journals: &mut Vec<(bool, String)>,
    notes: &mut Vec<String>,
) -> Result<Option<u32>> {
    let model = pair.nic;
    match change {
        Change::None => Ok(None),
        Change::Pin { xps } => {
            for (on_a, g) in [(true, &mut pair.a), (false, &mut pair.b)] {
                let knobs = pin_knobs(g, model, cpus, *xps)?;
                let args = set_args(&knobs);
                let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                let (journal, note) = apply(g, bin, STATE, &argv)?;
                journals.push((on_a, journal));
                notes.push(note);
            }
            Ok(None)
        }
        Change::Channels(n) | Change::Coalesce(n) => {
            let knob = match change {
                Change::Channels(_) => format!("nic/eth0/channels/combined={n}"),
                _ => format!("nic/eth0/coalesce/rx-usecs={n}"),
            };
            for (on_a, g) in [(true, &mut pair.a), (false, &mut pair.b)] {
                let (journal, note) = apply(g, bin, STATE, &["--profile", "none", "--set", &knob])?;
                journals.push((on_a, journal));
                notes.push(note);
            }
            Ok(None)
        }
        Change::LatencyProfile => {
            for (on_a, g) in [(true, &mut pair.a), (false, &mut pair.b)] {
                let (journal, note) =
                    apply(g, bin, STATE, &["--profile", "latency", "--dev", "eth0"])?;
                journals.push((on_a, journal));
                notes.push(note);
            }
            Ok(None)
        }
        Change::RssIsolation => {
            // Ports in the hash first: with addresses alone every flow between the two guests
            // has the latency flow's bucket (igb's default for UDP).
            let (journal, note) = apply(
                &mut pair.b,
                bin,
                STATE,
                &["--profile", "none", "--set", "nic/eth0/flow-hash/udp4=sdfn"],
            )?;
            journals.push((false, journal));
            notes.push(note);
            let len = table_len(&mut pair.b)?;
            let bucket = latency_bucket(pair, bin, len)?;
            let knob = table_knob(len, |i| i as u32 == bucket);
            let (journal, note) = apply(
                &mut pair.b,
                bin,
                STATE,
                &["--profile", "none", "--set", &knob],
            )?;
            journals.push((false, journal));
            notes.push(format!(
                "{note}; the latency flow (source port {LATENCY_PORT}) hashes to bucket {bucket} of {len}: that bucket alone goes to rx-{RESERVED_QUEUE}, every other to rx-0"
            ));
            Ok(Some(bucket))
        }
        Change::Ntuple => {
            // What tune plans for seed 000's rule, and what the driver says to ethtool itself
            // (ethtool 6.1 exits 0 when the insert fails: its words are the answer).
            let port = SERVER_PORT.to_string();
            let reserved = RESERVED_QUEUE.to_string();
            let plan = pair.b.host_ok(
                &[
                    bin,
                    "tune",
                    "plan",
                    "--profile",
                    "latency",
                    "--dev",
                    "eth0",
                    "--reserve-queue",
                    &reserved,
                    "--ports",
                    &port,
                    "--json",
                ],
                T,
            )?;
            let p: netsteer_steering::tune::Plan = serde_json::from_str(&plan)
                .map_err(|e| LabError::Invalid(format!("tune plan output: {e}")))?;
            let planned = p
                .items
                .iter()
                .filter(|i| i.kind == netsteer_steering::tune::ItemKind::Ntuple)
                .count();
            notes.push(format!(
                "tune plans {planned} n-tuple rule(s){}",
                p.notes
                    .iter()
                    .filter(|n| n.contains("n-tuple"))
                    .map(|n| format!("; {n}"))
                    .collect::<String>()
            ));
            let (_, out) = pair.b.host(
                &[
                    "ethtool",
                    "-N",
                    "eth0",
                    "flow-type",
                    "udp4",
                    "dst-port",
                    &port,
                    "action",
                    &reserved,
                ],
                T,
            )?;
            let said = out.trim().replace('\n', " / ");
            notes.push(format!(
                "ethtool -N eth0 flow-type udp4 dst-port {port} action {reserved}: {said}"
            ));
            if planned > 0 {
                // A driver that takes the rule (none emulated here): let tune make it.
                let (journal, note) = apply(
                    &mut pair.b,
                    bin,
                    STATE,
                    &[
                        "--profile",
                        "latency",
                        "--dev",
                        "eth0",
                        "--reserve-queue",
                        &reserved,
                        "--ports",
                        &port,
                    ],
                )?;
                journals.push((false, journal));
                notes.push(note);
            }
            Ok(None)
        }
    }
}

/// Starts the echo server in guest b with the rung's wait mode (pinned to CPU 1), and waits
/// until it listens.
fn start_server(g: &mut Guest, bin: &str, wait: &str) -> Result<()> {
    let server = format!("{VM_B_ADDR}:{SERVER_PORT}");
    g.sh(
        &format!(
            "chroot /host {bin} bench udp-echo server --listen {server} --cpu 1 --wait {wait} --busy-poll 50 --max-pps-per-source 0 --max-pps 0 --duration 900 > /x/echo-server.log 2>&1 &"
        ),
        T,
    )?;
    wait_port(g, true, "start")
}

/// Stops guest b's echo server and waits until its port is free for the next rung's.
pub(super) fn stop_server(g: &mut Guest) -> Result<()> {
    g.sh("chroot /host pkill -TERM -f 'udp-echo [s]erver'", T)?;
    wait_port(g, false, "stop")
}

/// The last line of a benchmark's JSON Lines output that reads as a `T` (its summary).
pub(super) fn last_json<T: serde::de::DeserializeOwned>(out: &str) -> Option<T> {
    out.lines().rev().find_map(|l| serde_json::from_str(l).ok())
}

/// A server in guest b: how `ss` lists its port, and the log that says why it did not start.
pub(super) struct Listener {
    /// `ss` flags for its protocol's listening sockets (`-Hlun`, `-Hltn`).
    pub ss: &'static str,
    pub port: u16,
    pub log: &'static str,
    pub name: &'static str,
}

/// The UDP echo server every rung and the lane's bulk flows talk to.
pub(super) const ECHO: Listener = Listener {
    ss: "-Hlun",
    port: SERVER_PORT,
    log: "/x/echo-server.log",
    name: "the echo server",
};

/// Waits up to 10 s until the echo server's port is (or is no longer) listened on in guest b.
pub(super) fn wait_port(g: &mut Guest, listening: bool, what: &str) -> Result<()> {
    wait_listening(g, &ECHO, listening, what)
}

/// Waits up to 10 s until `l`'s port is (or is no longer) listened on in guest b; its log in
/// the error when not.
pub(super) fn wait_listening(
    g: &mut Guest,
    l: &Listener,
    listening: bool,
    what: &str,
) -> Result<()> {
    let done = if listening { "&&" } else { "||" };
    let (rc, out) = g.sh(
        &format!(
            "i=0; while [ $i -lt 100 ]; do chroot /host ss {} 'sport = :{}' | grep -q . {done} exit 0; i=$((i+1)); sleep 0.1; done; cat {}; exit 1",
            l.ss, l.port, l.log
        ),
        T,
    )?;
    if rc != 0 {
        return Err(LabError::Invalid(format!(
            "guest {}: {} did not {what}: {out}",
            g.name, l.name
        )));
    }
    Ok(())
}

/// Runs the ladder `repeats` times (rungs in order each time), `count` round trips a run,
/// client on guest a's CPU 0, server on guest b's CPU 1. Every change is rolled back at the end,
/// also when a run fails.
#[allow(clippy::too_many_arguments)]
pub fn run(
    pair: &mut VmPair,
    bin: &str,
    cpus: u32,
    count: u64,
    repeats: u32,
    trace: bool,
    mut emit: impl FnMut(&RungRun) -> std::io::Result<()>,
) -> Result<Vec<RungRun>> {
    let model = pair.nic;
    let ladder = rungs(model);
    let rss = matches!(model, NicModel::Igb | NicModel::VirtioRss);
    let mut journals: Vec<(bool, String)> = Vec::new();
    // What the guest kernel cannot trace is said once, with the first rung.
    let mut said_unavailable = false;
    let result = (|| {
        let mut all = Vec::new();
        for repeat in 1..=repeats {
            for (i, r) in ladder.iter().enumerate() {
                let mut notes = Vec::new();
                let mark = journals.len();
                start_server(&mut pair.b, bin, r.wait)?;
                let bucket = enter(pair, bin, cpus, &r.change, &mut journals, &mut notes)?;
                let (ba, bb) = (
                    irq_counts(&mut pair.a, model)?,
                    irq_counts(&mut pair.b, model)?,
                );
                let traced = trace && super::trace::start(&mut pair.b, bin, &mut notes)?;
                let (rc, out) = latency_run(pair, bin, r.wait, count)?;
                let stages = match traced {
                    true => super::trace::stop(&mut pair.b, &mut notes, &mut said_unavailable)?,
                    false => Vec::new(),
                };
                if rc != 0 {
                    let _ = stop_server(&mut pair.b);
                    return Err(LabError::Invalid(format!("rung {}: client: {out}", r.name)));
                }
                let (aa, ab) = (
                    irq_counts(&mut pair.a, model)?,
                    irq_counts(&mut pair.b, model)?,
                );
                let server_irqs = delta(&bb, &ab);
                let latency_queue = busiest(&rx_by_queue(&server_irqs));
                let bulk = match (rss, latency_queue) {
                    (true, Some(q)) => {
                        let by_queue = server_rx_during(pair, |p| bulk_burst(p, bin))?;
                        Some(BulkIrqs {
                            flows: BULK_FLOWS,
                            on_latency_queue: by_queue.get(&q).copied().unwrap_or(0),
                            total: by_queue.values().sum(),
                        })
                    }
                    _ => None,
                };
                stop_server(&mut pair.b)?;
                let s: ClientSummary = last_json(&out).ok_or_else(|| {
                    LabError::Invalid(format!("rung {}: no summary: {out}", r.name))
                })?;
                let napi = s.napi_id;
                let run = RungRun {
                    kind: "vm-rung".into(),
                    rung: r.name.clone(),
                    repeat,
                    sent: s.sent,
                    received: s.received,
                    p50_ns: s.latency_ns.as_ref().map(|l| l.p50),
                    p99_ns: s.latency_ns.as_ref().map(|l| l.p99),
                    round_trips_per_s: s.pps,
                    napi_id: napi,
                    busy_poll_engaged: (r.wait == "busy-poll")
                        .then(|| napi.is_some_and(|n| n != 0)),
                    client_irqs: delta(&ba, &aa),
                    server_irqs,
                    latency_queue,
                    bulk,
                    bucket,
                    notes,
                    stages,
                };
                emit(&run).map_err(|source| LabError::Io {
                    what: "writing the report".into(),
                    source,
                })?;
                all.push(run);
                // A detour is undone before the next rung; the climb at the end of the repeat,
                // so each repeat starts from the guests as booted.
                if !r.keep {
                    let mut mine = journals.split_off(mark);
                    rollback(pair, bin, &mut mine)?;
                }
                if i == ladder.len() - 1 {
                    rollback(pair, bin, &mut journals)?;
                }
            }
        }
        Ok(all)
    })();
    let undo = rollback(pair, bin, &mut journals);
    let all = result?;
    undo?;
    Ok(all)
}

/// `lab run seed-000 --vm`: boots the pair `spec` describes, gives it the netsteer at `bin`,
/// runs the ladder and hands each run (a JSON line with `json`, else text) and then the summary
/// lines to `emit`; progress goes to stderr.
pub fn run_pair(
    spec: &super::VmPairSpec,
    bin: &std::path::Path,
    repeats: u32,
    count: u64,
    emit: &mut dyn FnMut(&str) -> std::io::Result<()>,
    json: bool,
    trace: bool,
) -> Result<Vec<RungRun>> {
    let mut pair = VmPair::boot_announced("ladder", spec)?;
    let guest_bin = pair.install(bin)?;
    let runs = run(
        &mut pair,
        &guest_bin,
        spec.cpus,
        count,
        repeats,
        trace,
        |r| {
            let line = if json {
                serde_json::to_string(r).map_err(std::io::Error::other)?
            } else {
                run_line(r)
            };
            emit(&line)
        },
    )?;
    if !json {
        for line in summary_lines(&runs) {
            emit(&line).map_err(|source| LabError::Io {
                what: "writing the report".into(),
                source,
            })?;
        }
    }
    Ok(runs)
}

/// Rolls back the rungs' journals, newest first.
fn rollback(pair: &mut VmPair, bin: &str, journals: &mut Vec<(bool, String)>) -> Result<()> {
    while let Some((on_a, j)) = journals.pop() {
        let g = if on_a { &mut pair.a } else { &mut pair.b };
        rollback_one(g, bin, STATE, &j)?;
    }
    Ok(())
}

/// Where a queue's interrupts went during a run: `input.0 → CPU1 (812)`, busiest CPU first.
pub fn placement(irqs: &[QueueIrq]) -> String {
    irqs.iter()
        .filter(|q| q.per_cpu.iter().sum::<u64>() > 0)
        .map(|q| {
            let short = q.name.split_once('-').map_or(q.name.as_str(), |(_, s)| s);
            let cpus: Vec<String> = q
                .per_cpu
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(c, n)| format!("CPU{c} ({n})"))
                .collect();
            format!("{short} → {}", cpus.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One run as a line: rung, repeat, p50/p99, the NAPI id, the latency flow's queue and the
/// bulk flows' share of it, and where each side's queue IRQs ran.
pub fn run_line(r: &RungRun) -> String {
    let us = |v: Option<u64>| v.map_or("-".into(), |v| format!("{:.1}us", v as f64 / 1e3));
    let queue = match (r.latency_queue, r.bulk) {
        (Some(q), Some(b)) => format!(
            " latency flow on rx-{q}, bulk {}/{} irqs there",
            b.on_latency_queue, b.total
        ),
        (Some(q), None) => format!(" latency flow on rx-{q}"),
        _ => String::new(),
    };
    format!(
        "{:<44} #{} p50 {:>8} p99 {:>8} napi {:<5}{queue} server {} | client {}{}",
        r.rung,
        r.repeat,
        us(r.p50_ns),
        us(r.p99_ns),
        r.napi_id.map_or("-".into(), |n| n.to_string()),
        placement(&r.server_irqs),
        placement(&r.client_irqs),
        super::trace::breakdown(&r.stages),
    )
}

/// After the runs: their notes, whether busy polling engaged, and what emulation cannot show.
pub fn summary_lines(runs: &[RungRun]) -> Vec<String> {
    let mut lines: Vec<String> = runs
        .iter()
        .flat_map(|r| r.notes.iter().map(move |n| format!("  {}: {n}", r.rung)))
        .collect();
    for r in runs.iter().filter(|r| r.busy_poll_engaged.is_some()) {
        lines.push(format!(
            "busy polling {} (NAPI id {})",
            if r.busy_poll_engaged == Some(true) {
                "engaged"
            } else {
                "did not engage"
            },
            r.napi_id.unwrap_or(0)
        ));
    }
    lines.push("emulated guests (QEMU TCG): the placements, NAPI ids and directions are the drivers' own; the microseconds are not bare metal's".into());
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_names_give_their_receive_queue() {
        assert_eq!(rx_queue_of("virtio2-input.3"), Some(3));
        let x = "RX flow hash indirection table for eth0 with 2 RX ring(s):\n    0:      0     0     0     0     0     0     0     0\n    8:      1     1     1     1     1     1     1     1\nRSS hash key:\n48:6d:1a:00:ff\nRSS hash function:\n    toeplitz: on\n";
        assert_eq!(indirection_len(x), 16, "the key is not a row");
        assert_eq!(rx_queue_of("virtio2-output.3"), None);
        assert_eq!(rx_queue_of("eth0-rx-1"), Some(1));
        assert_eq!(rx_queue_of("eth0-tx-1"), None);
        assert_eq!(rx_queue_of("eth0-TxRx-5"), Some(5));
        assert_eq!(rx_queue_of("eth0"), None);
    }

    /// Real guests' /proc/interrupts (fixtures/hosts, captured by vm_drivers.rs): the NIC's
    /// queue vectors and nothing else (not igb's other vector `eth0`, virtio's config, or
    /// the disks' `virtioN-requests`).
    #[test]
    fn queue_vectors_of_real_guests_are_the_nic_s_queues_only() {
        let read = |h: &str| {
            let root =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hosts");
            let mut t = std::fs::read_to_string(root.join(h).join("proc/interrupts")).unwrap();
            t.push_str("@ 25 1\n@ 26 0-1\n@ 99 0\n");
            t
        };
        let names = |c: &Counts| c.values().map(|v| v.0.clone()).collect::<Vec<_>>();
        let igb = queue_vectors(&read("igb-6.12"), NicModel::Igb).unwrap();
        assert_eq!(
            names(&igb),
            ["eth0-rx-0", "eth0-rx-1", "eth0-tx-0", "eth0-tx-1"]
        );
        assert_eq!(igb[&25].1, [9213, 0]);
        assert_eq!(igb[&25].2, "1");
        assert_eq!(igb[&26].2, "0-1");
        assert_eq!(igb[&27].2, "", "no affinity line read: none invented");
        let virtio = queue_vectors(&read("virtio-rss-6.12"), NicModel::VirtioRss).unwrap();
        assert_eq!(virtio.len(), 8, "{:?}", names(&virtio));
        assert!(names(&virtio).iter().all(|n| n.starts_with("virtio2-")));
        assert_eq!(rx_by_queue(&delta(&Counts::new(), &virtio))[&0], 6283);
    }

    #[test]
    fn nic_rungs_only_where_the_nic_has_the_knobs() {
        let names = |m| rungs(m).into_iter().map(|r| r.change).collect::<Vec<_>>();
        assert!(!names(NicModel::Virtio).contains(&Change::RssIsolation));
        assert!(names(NicModel::VirtioRss).contains(&Change::RssIsolation));
        assert!(!names(NicModel::VirtioRss).contains(&Change::Coalesce(0)));
        let igb = names(NicModel::Igb);
        for c in [
            Change::Channels(1),
            Change::RssIsolation,
            Change::Ntuple,
            Change::Coalesce(0),
        ] {
            assert!(igb.contains(&c), "{c:?}");
        }
        // The one-channel detour is rolled back before the rungs that need every queue.
        assert!(
            rungs(NicModel::Igb)
                .iter()
                .any(|r| r.change == Change::Channels(1) && !r.keep)
        );
    }
}
