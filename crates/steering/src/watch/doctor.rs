//! The reflexes that take a doctor finding's fix: `rps` (doctor's `softirq-hot-cpu`) and
//! `rss` (doctor's `rss-table-skewed`), each proposing the planner's items for the device.

use super::{Change, Proposal, Reflex, Watcher};
use crate::doctor::rules::rps::{planned, spreading_profile};
use crate::doctor::{Ctx, Load, diagnose};
use crate::model::desired::{Action, ItemKind, Profile, Target};
use netsteer_host::view::HostView;

impl Watcher {
    /// The reflexes that take a doctor finding's fix, from one diagnosis of the interval.
    pub(super) fn doctor_reflexes(&self, view: &HostView, load: &Load) -> Vec<Proposal> {
        let report = diagnose(view, Some(load), self.cfg.goal, None);
        let ctx = Ctx::new(view, Some(load), self.cfg.goal, None);
        let mut out = self.rps(&ctx, &report);
        out.extend(self.rss(&ctx, &report));
        out
    }

    /// doctor's `softirq-hot-cpu` on a device with RPS off: the RPS/RFS the planner makes.
    fn rps(&self, ctx: &Ctx, report: &crate::doctor::Report) -> Vec<Proposal> {
        let mut out = Vec::new();
        for f in report.findings.iter().filter(|f| f.id == "softirq-hot-cpu") {
            let hot = f
                .subjects
                .cpus
                .iter()
                .filter_map(|c| ctx.cpu(*c))
                .map(|c| c.soft)
                .fold(0.0, f64::max);
            for dev in &f.subjects.devices {
                let Some(nic) = ctx.view.nic(dev) else {
                    continue;
                };
                if !crate::doctor::rules::rps::rps_off(nic) {
                    continue;
                }
                let p = planned(
                    ctx,
                    nic,
                    spreading_profile(ctx),
                    &[ItemKind::Rps, ItemKind::RfsTable, ItemKind::RfsFlowCnt],
                );
                let changes = changes_of(&p.items, |t| matches!(t, Target::File { .. }));
                if changes.is_empty() {
                    continue;
                }
                let mut evidence = vec![f.title.clone()];
                evidence.extend(f.evidence.iter().take(3).cloned());
                out.push(Proposal::of(
                    Reflex::Rps,
                    &format!("rps/{dev}"),
                    evidence,
                    changes,
                    hot,
                ));
            }
        }
        out
    }

    /// doctor's `rss-table-skewed`: the planner's equal table for the device (the table item
    /// only; the balanced profile's other NIC items are not this reflex's). The guard watches
    /// how far the hot queue's share of the receive interrupts stands above an equal share,
    /// in points (0 when equal, 100 when it takes them all), so that on two queues the
    /// signal falls as far as on eleven.
    fn rss(&self, ctx: &Ctx, report: &crate::doctor::Report) -> Vec<Proposal> {
        let mut out = Vec::new();
        for f in report
            .findings
            .iter()
            .filter(|f| f.id == "rss-table-skewed")
        {
            for dev in &f.subjects.devices {
                let Some(nic) = ctx.view.nic(dev) else {
                    continue;
                };
                let Some(skew) = crate::doctor::rules::rss::hot_queue_excess(ctx, nic) else {
                    continue;
                };
                let p = planned(ctx, nic, Profile::Balanced, &[ItemKind::Rss]);
                let changes = changes_of(&p.items, |t| {
                    matches!(
                        t,
                        Target::Nic {
                            knob: netsteer_host::ethtool::NicKnob::RssIndirection,
                            ..
                        }
                    )
                });
                let mut evidence = vec![f.title.clone()];
                evidence.extend(f.evidence.iter().cloned());
                out.push(Proposal::of(
                    Reflex::Rss,
                    &format!("rss/{dev}"),
                    evidence,
                    changes,
                    skew,
                ));
            }
        }
        out
    }
}

/// The changes among a plan's items whose target `which` takes, each by the path `tune apply
/// --set` takes (a NIC item's id is that path: `nic/IF/rss/indirection`).
fn changes_of(
    items: &[crate::model::desired::Item],
    which: impl Fn(&Target) -> bool,
) -> Vec<Change> {
    items
        .iter()
        .filter(|i| i.action == Action::Change && which(&i.target))
        .map(|i| Change {
            path: match &i.target {
                Target::File { path } => path.clone(),
                _ => i.id.clone(),
            },
            from: i.current.clone().unwrap_or_default(),
            to: i.desired.clone(),
        })
        .collect()
}
