//! The guard of an action: the intervals after it measured, and its verdict — confirmed, or
//! rolled back with the reason and its reflex put to sleep.

use super::{Event, Pending, Proposal, Reflex, Watcher};
use crate::doctor::Load;

impl Watcher {
    /// The guards of the pending actions: one more interval measured, and each one's verdict
    /// when its window is full.
    pub(super) fn judge(
        &mut self,
        now: f64,
        proposals: &[Proposal],
        load: &Load,
        cpu: Cost,
        out: &mut Vec<Event>,
    ) {
        for p in std::mem::take(&mut self.pending) {
            if let Some(p) = self.judge_one(now, p, proposals, load, cpu, out) {
                self.pending.push(p);
            }
        }
    }

    /// One pending action's interval; the action back while its window is not full.
    fn judge_one(
        &mut self,
        now: f64,
        mut p: Pending,
        proposals: &[Proposal],
        load: &Load,
        cpu: Cost,
        out: &mut Vec<Event>,
    ) -> Option<Pending> {
        let sum = |f: fn(&netsteer_host::sample::CpuRates) -> Option<f64>| {
            load.cpu.cpus.iter().filter_map(f).sum::<f64>()
        };
        let signal = match p.reflex {
            // Every CPU's drops, not only the proposal's: packets moved off one CPU must
            // not be dropped at another's backlog instead.
            Reflex::Backlog | Reflex::RpsAway => sum(|c| c.dropped),
            Reflex::Budget => sum(|c| c.squeezed),
            Reflex::Rps | Reflex::Rss => proposals
                .iter()
                .find(|x| x.advice.id == p.id)
                .map_or(0.0, |x| x.signal),
        };
        p.seen.push((signal, cpu));
        // A change made for another signal must not cost packets: judged at the first
        // interval that shows drops, not after the window, as each interval waited loses more.
        // Seen in the lab: `netdev_budget` 300 → 600 after rps-away, and 150–580 drops a second
        // 1–3 s later at the CPU that took every packet, where there had been none (the budget
        // is global: each `net_rx_action` round, net/core/dev.c, may hand a backlog a bigger
        // batch).
        if let Some(why) = self.brought_drops(&p, &cpu) {
            self.roll_back(now, p, why, out);
            return None;
        }
        if p.seen.len() < self.cfg.guard_intervals as usize {
            return Some(p);
        }
        let n = p.seen.len() as f64;
        let signal_after = p.seen.iter().map(|s| s.0).sum::<f64>() / n;
        let cpu_after = Cost::mean(p.seen.iter().map(|s| &s.1));
        // A quarter, not half: a backlog step that saves a third of the drops under bursts
        // whose size TCG varies run to run helps, and the next step may follow; halving made
        // such a step sleep the reflex for good.
        let (before, after) = (p.cpu_before, cpu_after);
        // Drops are judged as a share of the packets that came (taken + dropped) where both
        // are known: a step taken while a flood still ramps up faces more drops after it even
        // when it saved a share of them (seen in the lab: 1000 → 2048 rolled back, the reflex
        // asleep for the run, while the flood doubled).
        let shares = match p.reflex.answers_drops() {
            true => before.drop_share().zip(after.drop_share()),
            false => None,
        };
        let fell = signal_after < self.cfg.min_rate
            || match shares {
                Some((b, a)) => a <= b * (1.0 - GUARD_FALL),
                None => signal_after <= p.signal_before * (1.0 - GUARD_FALL),
            };
        let cost = after.points - before.points;
        // CPU that delivers the packets an action saved is what the action is for: past the
        // bound in points, the cost per packet the stack took decides (a bigger budget that
        // only holds the CPU longer raises it; a backlog that stops drops does not).
        let cheap = cost <= self.cfg.guard_cpu_points
            || matches!(Cost::per_packet(&before, &after),
                Some((b, a)) if a <= b * PER_PACKET_SLACK);
        if fell && cheap {
            out.push(Event::GuardPassed {
                at: now,
                id: p.id,
                signal: (p.signal_before, signal_after),
                cpu: (before.points, after.points),
            });
            return None;
        }
        let why = if !fell {
            match shares {
                Some((b, a)) => format!(
                    "the share of packets dropped did not fall by a quarter ({:.1} % before, {:.1} % after; {:.1}/s before, {:.1}/s after)",
                    b * 100.0,
                    a * 100.0,
                    p.signal_before,
                    signal_after
                ),
                None => format!(
                    "the signal did not fall by a quarter ({:.1} before, {:.1} after)",
                    p.signal_before, signal_after
                ),
            }
        } else {
            format!(
                "it cost {cost:.1} points of CPU (softirq + system + irq, {:.1} → {:.1}), more than {:.1}, and {} per packet the stack took",
                before.points,
                after.points,
                self.cfg.guard_cpu_points,
                match Cost::per_packet(&before, &after) {
                    Some((b, a)) => format!("{b:.2} → {a:.2} µs of CPU"),
                    None => format!(
                        "too few packets to price it ({} → {} packets/s)",
                        pps_text(before.pps),
                        pps_text(after.pps)
                    ),
                }
            )
        };
        self.roll_back(now, p, why, out);
        None
    }

    /// Why an action that answers something other than drops is to be undone now: every
    /// CPU's backlog drops this interval at least `BROUGHT` times what they were before it
    /// (and never below `min_rate` a second). Drop reflexes have their own verdict.
    fn brought_drops(&self, p: &Pending, now: &Cost) -> Option<String> {
        if p.reflex.answers_drops() {
            return None;
        }
        let (before, after) = (p.cpu_before.dropped?, now.dropped?);
        (after >= before.max(self.cfg.min_rate) * BROUGHT).then(|| {
            format!(
                "it brought drops: {before:.1}/s at every CPU's backlog before it, {after:.1}/s after"
            )
        })
    }

    /// Undoes a pending action through its journal and puts its reflex to sleep with `why`.
    /// A knob someone else rewrote is left as they set it ([`Watcher::undo`]): when that is
    /// every knob the action set, nothing is rolled back, and the event says so.
    fn roll_back(&mut self, now: f64, p: Pending, why: String, out: &mut Vec<Event>) {
        let undone = self.undo(now, &p.journal, out);
        // The move is undone (or its knobs are someone else's): not one to reverse.
        self.moves.retain(|_, m| m.journal != p.journal);
        let (why, rolled_back) = match undone {
            Ok(u) if u.restored.is_empty() && !u.left.is_empty() => (
                format!(
                    "{why}; not rolled back: every knob it set was rewritten by someone else and is theirs: {}",
                    u.left.join(", ")
                ),
                false,
            ),
            Ok(u) => (super::with_left(why, &u.left), true),
            Err(e) => (format!("{why}; its rollback failed: {e}"), true),
        };
        self.asleep.insert(p.reflex, why.clone());
        out.push(match rolled_back {
            true => Event::RolledBack {
                at: now,
                id: p.id,
                why,
            },
            false => Event::Held {
                at: now,
                id: p.id,
                why,
            },
        });
    }
}

/// How many times the drops before it an action for another signal may not bring.
const BROUGHT: f64 = 2.0;

/// The share of its signal an action must take away (over its guard's intervals).
const GUARD_FALL: f64 = 0.25;

/// How much more CPU per packet an action may cost once it costs more than
/// `guard_cpu_points` (per-packet costs wander a little with batching).
const PER_PACKET_SLACK: f64 = 1.5;
/// Fewer packets a second than this (all CPUs) after an action price nothing per packet;
/// before it, they are priced as this many.
const PRICED_PPS: f64 = 100.0;

/// What an interval cost: softirq + system + hard IRQ time over all CPUs, in percentage
/// points of one CPU, and the packets the stack took per second (softnet column 1, counted
/// in `__netif_receive_skb_core()` on the CPU that ran the packet: once a packet, RPS or not).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cost {
    points: f64,
    pps: Option<f64>,
    /// Packets dropped per second at every CPU's backlog (softnet column 2).
    dropped: Option<f64>,
}

impl Cost {
    pub(super) fn of(load: &Load) -> Cost {
        let c = &load.cpu.cpus;
        Cost {
            points: c.iter().map(|c| c.soft + c.sys + c.irq).sum(),
            pps: c.iter().map(|c| c.processed).sum(),
            dropped: c.iter().map(|c| c.dropped).sum(),
        }
    }

    pub(super) fn mean<'a>(all: impl Iterator<Item = &'a Cost>) -> Cost {
        let all: Vec<&Cost> = all.collect();
        if all.is_empty() {
            return Cost::default();
        }
        let n = all.len() as f64;
        let mean = |f: fn(&Cost) -> Option<f64>| {
            all.iter().map(|c| f(c)).sum::<Option<f64>>().map(|s| s / n)
        };
        Cost {
            points: all.iter().map(|c| c.points).sum::<f64>() / n,
            pps: mean(|c| c.pps),
            dropped: mean(|c| c.dropped),
        }
    }

    /// The share of the packets that came which a backlog dropped: a packet is counted once,
    /// taken (column 1, on the CPU that ran it) or dropped (column 2, at the CPU whose
    /// backlog was full); unknown when either column is, or when nothing came.
    fn drop_share(&self) -> Option<f64> {
        let (taken, dropped) = (self.pps?, self.dropped?);
        (taken + dropped > 0.0).then(|| dropped / (taken + dropped))
    }

    /// Microseconds of CPU per packet before and after an action (points are % of a
    /// CPU-second per second), when the intervals after it took at least `PRICED_PPS`.
    /// A "before" with fewer packets than that is priced as if it had taken `PRICED_PPS`:
    /// a CPU with no time left takes almost nothing off its backlog and drops the rest, so
    /// the action that lets the stack take the packets again is exactly the one whose
    /// "before" has none to divide by (seen in the lab: 36.6 points to deliver a flood that
    /// had been dropped whole). The floor prices that "before" low, never at infinity, so a
    /// change whose CPU the packets do not explain is still rolled back.
    fn per_packet(before: &Cost, after: &Cost) -> Option<(f64, f64)> {
        let a = after.pps.filter(|p| *p >= PRICED_PPS)?;
        let b = before.pps?.max(PRICED_PPS);
        Some((before.points * 1e4 / b, after.points * 1e4 / a))
    }
}

fn pps_text(pps: Option<f64>) -> String {
    pps.map_or_else(|| "unknown".into(), |p| format!("{p:.0}"))
}
