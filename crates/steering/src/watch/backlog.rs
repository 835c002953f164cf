//! The reflexes over softnet drops (`/proc/net/softnet_stat` column 2): `rps-away` when the
//! dropping CPU has no time left to drain its backlog (doctor's [`rps_away`], which says why),
//! `backlog` when it has.

use super::{BACKLOG, Change, FLOW_LIMIT, Proposal, Reflex, Watcher};
use crate::doctor::rules::drops::{SATURATED_IDLE, away_evidence, idle, rps_away};
use crate::doctor::{Ctx, Load};
use netsteer_host::CpuSet;
use netsteer_host::view::HostView;

impl Watcher {
    pub(super) fn backlog(&self, view: &HostView, load: &Load) -> Option<Proposal> {
        let (dropping, total, line) = self.per_cpu(
            load,
            |c| c.dropped,
            "softnet drops (backlog full or flow limit)",
        )?;
        let mut evidence = vec![line];
        // How much time each dropping CPU had left, and the most any other had: a CPU with
        // none cannot drain a longer backlog either (see `rps_away`).
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
        // Starved: no idle time in any interval of the hysteresis window. A CPU that bursts
        // take only part of the time drains a longer backlog between them (in the lab, CPU 1
        // taken 0.3 s of every 0.5 s read under 10 % idle in some seconds, not in all).
        // The window holds this interval too.
        let most_idle = |cpu: u32| {
            self.recent
                .iter()
                .filter_map(|i| i.idle.get(&cpu).copied())
                .fold(0.0, f64::max)
        };
        let starved: Vec<String> = dropping_rates
            .iter()
            .filter(|c| most_idle(c.cpu) < SATURATED_IDLE)
            .map(|c| c.cpu.to_string())
            .collect();
        let hold = (starved.len() == dropping_rates.len()).then(|| {
            let (who, has, its) = match starved.len() {
                1 => ("CPU", "has", "its"),
                _ => ("CPUs", "have", "their"),
            };
            format!(
                "{who} {} {has} no idle time: a longer backlog only turns {its} drops into seconds of queueing, then drops again; {its} packets must go elsewhere (rps-away, when a CPU near the device has room; else more queues or less load)",
                starved.join(", ")
            )
        });
        let mut changes = Vec::new();
        if let Some(cur) = view.sysctls.netdev_max_backlog.known().copied() {
            let cap = self.cfg.max_backlog;
            evidence.push(format!("net.core.netdev_max_backlog = {cur} (cap {cap})"));
            // The most one CPU dropped in a second (while drops went on) is packets its
            // backlog did not hold: the backlog grows by twice that (a burst's worth with
            // room for a larger one), rounded up to a power of two so the advice moves only
            // when a burst twice as large comes, and at least doubles. One step sized by the
            // evidence, not several doublings each judged by the guard in turn.
            let need = cur.saturating_add((2.0 * self.peak_drops).ceil() as i64);
            let next = if need > cur.saturating_mul(2) {
                (need as u64).next_power_of_two().min(i64::MAX as u64) as i64
            } else {
                cur.saturating_mul(2)
            }
            .min(cap);
            if next > cur {
                changes.push(Change {
                    path: BACKLOG.into(),
                    from: cur.to_string(),
                    to: next.to_string(),
                });
            }
        }
        let ctx = Ctx::new(view, None, self.cfg.goal, None);
        if let Some(set) = view.sysctls.flow_limit_cpu_bitmap.known() {
            let want = dropping.iter().fold(set.clone(), |mut s, c| {
                s.insert(*c);
                s
            });
            if &want != set {
                // The kernel parses this file as a hex CPU mask (bitmap_parse in
                // flow_limit_cpu_sysctl, net/core/sysctl_net_core.c).
                changes.push(Change {
                    path: FLOW_LIMIT.into(),
                    from: ctx.mask(set),
                    to: ctx.mask(&want),
                });
            }
        }
        let mut p = Proposal::of(Reflex::Backlog, "backlog", evidence, changes, total);
        p.hold = hold;
        Some(p)
    }

    /// doctor's `backlog-drops` on CPUs with no idle time that RPS feeds
    /// ([`rps_away`]): per device, the new RPS mask of each queue that sends there, never onto
    /// a lane's CPU.
    pub(super) fn rps_away(&self, view: &HostView, load: &Load) -> Vec<Proposal> {
        let ctx = Ctx::new(view, Some(load), self.cfg.goal, None);
        rps_away(&ctx, self.cfg.min_rate, || self.lane_cpus())
            .iter()
            .map(|a| {
                let changes = a
                    .moves
                    .iter()
                    .map(|(q, from, to)| Change {
                        path: format!("{}/rps_cpus", Ctx::queue_dir(a.nic, &format!("rx-{q}"))),
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

    /// The CPUs of every lane recorded in the state directory the watcher's own lives in
    /// (`lane apply` keeps RPS off them; a lane that is down keeps its CPU for its service's
    /// return). Read each time it is needed (a CPU saturated): a lane may come while the
    /// watcher runs. Unreadable: none.
    fn lane_cpus(&self) -> CpuSet {
        let Some(base) = self.tuner.state_dir().parent() else {
            return CpuSet::default();
        };
        crate::lane::Lanes::open(self.tuner.fs().clone(), false, Some(base.to_path_buf()))
            .and_then(|l| l.claims(""))
            .map(|c| {
                c.iter()
                    .flat_map(|c| std::iter::once(c.cpu).chain(c.poll_cpu))
                    .collect()
            })
            .unwrap_or_default()
    }
}
