//! The reflexes over softnet drops (`/proc/net/softnet_stat` column 2): `rps-away` when the
//! dropping CPU has no idle time and RPS feeds it (doctor's [`rps_away`], which says why),
//! `backlog` unless NET_RX on the dropping CPU can take no more ([`NetRx`]).

use super::signals::Signals;
use super::{BACKLOG, Change, FLOW_LIMIT, Proposal, Reflex};
use crate::doctor::Ctx;
use crate::doctor::shared::{SATURATED_IDLE, away_evidence, idle, rps_away};
use crate::model::knob::{ItemId, QueueFile};
use netsteer_host::sample::CpuRates;

/// Softirq + hard IRQ share of a CPU from which NET_RX has the CPU already: the complement of
/// doctor's "no idle time".
const NET_RX_FULL: f64 = 100.0 - SATURATED_IDLE;

/// What NET_RX got on one CPU in one interval: the room a longer backlog needs is time for
/// `process_backlog()`, and that is NET_RX's, not the CPU's idle time. Softirqs run when an
/// interrupt returns (`irq_exit()` → `invoke_softirq()`, kernel/softirq.c), before any task
/// gets the CPU back, so an ordinary task taking every idle cycle leaves NET_RX its time
/// (issue 77: a nice-0 task at 0 % idle, held here "for no idle time", dropped 48,261 and
/// 105,402 packets after 10 s; the same load at the 16384 backlog it proposed dropped none).
/// NET_RX gets no more when it already has the CPU (softirq + hard IRQ ≥ [`NET_RX_FULL`] %),
/// or when `net_rx_action()` stops with work left (`time_squeeze`, softnet_stat column 3:
/// budget or `netdev_budget_usecs` spent) on a CPU with no idle time: what is left is re-raised,
/// and after `MAX_SOFTIRQ_TIME` (2 ms) or `MAX_SOFTIRQ_RESTART` (10) rounds `__do_softirq()`
/// hands it to ksoftirqd, a SCHED_OTHER thread the CPU's tasks compete with (a nice -20 loop
/// leaves it almost nothing: the lab's guest).
#[derive(Debug, Clone, Copy)]
pub(super) struct NetRx {
    /// Softirq + hard IRQ, % of the interval.
    busy: f64,
    /// Time squeezes a second.
    squeezed: f64,
    /// Idle + iowait, %.
    idle: f64,
}

impl NetRx {
    pub(super) fn of(c: &CpuRates) -> NetRx {
        NetRx {
            busy: c.soft + c.irq,
            squeezed: c.squeezed.unwrap_or(0.0),
            idle: idle(c),
        }
    }

    /// Why NET_RX could take no more on this CPU in this interval, if so.
    fn short(&self, min_rate: f64) -> Option<String> {
        if self.busy >= NET_RX_FULL {
            return Some(format!(
                "{:.0} % softirq + irq, NET_RX has the CPU already",
                self.busy
            ));
        }
        (self.squeezed >= min_rate && self.idle < SATURATED_IDLE).then(|| {
            format!(
                "{:.0} squeezes/s at {:.0} % idle, what NET_RX leaves waits for ksoftirqd behind the CPU's tasks",
                self.squeezed, self.idle
            )
        })
    }
}

/// `backlog`: on softnet drops, `netdev_max_backlog` grown and the dropping CPUs added to
/// `flow_limit_cpu_bitmap`, held while NET_RX gets no more time on every dropping CPU.
pub(super) fn backlog(s: &Signals) -> Option<Proposal> {
    let (view, load) = (s.view, s.load);
    let (dropping, total, line) =
        s.per_cpu(|c| c.dropped, "softnet drops (backlog full or flow limit)")?;
    let mut evidence = vec![line];
    // How much idle time each dropping CPU had, and the most any other had (where
    // rps-away could send its packets).
    let (dropping_rates, others): (Vec<_>, Vec<_>) = load
        .cpu
        .cpus
        .iter()
        .partition(|c| dropping.contains(&c.cpu));
    let mut line = dropping_rates
        .iter()
        .map(|c| format!("CPU {} {:.0} %", c.cpu, idle(c)))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(o) = others.iter().max_by(|a, b| idle(a).total_cmp(&idle(b))) {
        line += &format!("; the most idle other: CPU {} {:.0} %", o.cpu, idle(o));
    }
    evidence.push(format!("idle: {line}"));
    // What NET_RX got on each dropping CPU, this interval.
    evidence.push(format!(
        "NET_RX: {}",
        dropping_rates
            .iter()
            .map(|c| {
                let n = NetRx::of(c);
                format!(
                    "CPU {} {:.0} % softirq + irq, {:.0} squeezes/s",
                    c.cpu, n.busy, n.squeezed
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // Held only for CPUs whose NET_RX could take no more in every interval of the
    // hysteresis window (the window holds this interval too): a CPU that bursts take only
    // part of the time drains a longer backlog between them (in the lab, CPU 1 taken
    // 0.3 s of every 0.5 s read under 10 % idle in some seconds, not in all, and a hold
    // on one second's reading kept the backlog from the bursts it absorbs).
    let short_always = |cpu: u32| {
        s.recent.iter().all(|i| {
            i.cpus
                .get(&cpu)
                .is_some_and(|n| n.short(s.cfg.min_rate).is_some())
        })
    };
    let starved: Vec<String> = dropping_rates
        .iter()
        .filter(|c| short_always(c.cpu))
        .filter_map(|c| {
            let why = NetRx::of(c).short(s.cfg.min_rate)?;
            Some(format!("CPU {}: {why}", c.cpu))
        })
        .collect();
    let hold = (starved.len() == dropping_rates.len()).then(|| {
            let (who, its) = match dropping_rates.len() {
                1 => (format!("CPU {}", dropping_rates[0].cpu), "its"),
                _ => (
                    format!(
                        "CPUs {}",
                        dropping_rates
                            .iter()
                            .map(|c| c.cpu.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    "their",
                ),
            };
            format!(
                "NET_RX gets no more time on {who} in every interval of the window ({}): a longer backlog only turns {its} drops into seconds of queueing, then drops again; {its} packets must go elsewhere (rps-away, when a CPU near the device has room; else more queues or less load)",
                starved.join("; ")
            )
        });
    let mut changes = Vec::new();
    if let Some(cur) = view.sysctls.netdev_max_backlog.known().copied() {
        let cap = s.cfg.max_backlog;
        evidence.push(format!("net.core.netdev_max_backlog = {cur} (cap {cap})"));
        // The most one CPU dropped in a second (while drops went on) is packets its
        // backlog did not hold: the backlog grows by twice that (a burst's worth with
        // room for a larger one), rounded up to a power of two so the advice moves only
        // when a burst twice as large comes, and at least doubles. One step sized by the
        // evidence, not several doublings each judged by the guard in turn.
        let need = cur.saturating_add((2.0 * s.peak_drops).ceil() as i64);
        let next = if need > cur.saturating_mul(2) {
            (need as u64).next_power_of_two().min(i64::MAX as u64) as i64
        } else {
            cur.saturating_mul(2)
        }
        .min(cap);
        if next > cur {
            changes.push(Change::file(BACKLOG, cur.to_string(), next.to_string()));
        }
    }
    let ctx = Ctx::new(view, None, s.cfg.goal, None);
    if let Some(set) = view.sysctls.flow_limit_cpu_bitmap.known() {
        let want = dropping.iter().fold(set.clone(), |mut s, c| {
            s.insert(*c);
            s
        });
        if &want != set {
            // The kernel parses this file as a hex CPU mask (bitmap_parse in
            // flow_limit_cpu_sysctl, net/core/sysctl_net_core.c).
            changes.push(Change::file(FLOW_LIMIT, ctx.mask(set), ctx.mask(&want)));
        }
    }
    let mut p = Proposal::of(Reflex::Backlog, "backlog", evidence, changes, total);
    p.hold = hold;
    Some(p)
}

/// doctor's `backlog-drops` on CPUs with no idle time that RPS feeds
/// ([`rps_away`]): per device, the new RPS mask of each queue that sends there, never onto
/// a lane's CPU.
pub(super) fn rps_away_of(s: &Signals) -> Vec<Proposal> {
    let ctx = Ctx::new(s.view, Some(s.load), s.cfg.goal, None);
    rps_away(&ctx, s.cfg.min_rate, s.lane_cpus)
        .iter()
        .map(|a| {
            let changes = a
                .moves
                .iter()
                .map(|(q, from, to)| Change {
                    target: ItemId::Queue {
                        dev: a.nic.name.clone(),
                        file: QueueFile::RpsCpus,
                        index: *q,
                    }
                    .target()
                    .expect("a queue file's id names it"),
                    from: ctx.mask(from),
                    to: ctx.mask(to),
                })
                .collect();
            Proposal::of(
                Reflex::RpsAway,
                &format!("rps-away/{}", a.nic.name),
                away_evidence(a),
                changes,
                a.saturated.iter().map(|s| s.1).sum(),
            )
        })
        .collect()
}
