//! Drift: the live state against the plan last applied. The events that silently undo tuning
//! (knobs.md 4.2 and 4.6): a channel change recreates queues with RPS/RFS/XPS reset, a driver
//! reload renumbers IRQs, irqbalance moves a pinned IRQ.

use super::apply::Backend;
use crate::model::desired::{Action, Item, ItemKind, Plan};
use crate::model::knob::ItemId;
use netsteer_host::view::HostView;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    pub id: String,
    pub target: String,
    pub expected: String,
    /// What is there now (`None`: the file or setting is gone).
    pub found: Option<String>,
    /// The likely cause, for people.
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub profile: String,
    pub devices: Vec<String>,
    pub checked: usize,
    pub drift: Vec<Drift>,
}

/// Compares every item the applied plan set or found already set with what the backend reads
/// now. `view` (the host as it is now) names IRQs, so a renumbered one is recognised.
pub fn verify(applied: &Plan, backend: &dyn Backend, view: &HostView) -> VerifyReport {
    let mut drift = Vec::new();
    let mut checked = 0;
    let irqbalance = view.irqbalance_may_run();
    for item in applied
        .items
        .iter()
        .filter(|i| matches!(i.action, Action::Change | Action::Keep))
    {
        checked += 1;
        let found = backend.read(&item.target).ok();
        if let Some(f) = &found
            && item.format.same(f, &item.desired)
        {
            continue;
        }
        let why = explain(item, found.as_deref(), view, irqbalance.as_deref());
        drift.push(Drift {
            id: item.id.clone(),
            target: item.target.to_string(),
            expected: item.desired.clone(),
            found: found.map(|f| f.trim().to_string()),
            why,
        });
    }
    VerifyReport {
        profile: applied.profile.to_string(),
        devices: applied.devices.clone(),
        checked,
        drift,
    }
}

fn explain(item: &Item, found: Option<&str>, view: &HostView, irqbalance: Option<&str>) -> String {
    let zero = found.is_some_and(|f| f.trim().trim_start_matches(['0', ',']).is_empty());
    match item.kind {
        ItemKind::IrqAffinity => {
            let now = item.label.as_ref().and_then(|label| {
                view.nics
                    .iter()
                    .flat_map(|n| n.irqs.iter())
                    .find(|i| &i.name == label)
                    .map(|i| i.irq)
            });
            match (now, ItemId::irq_of(&item.id), found) {
                (Some(n), Some(old), _) if n != old => format!(
                    "{} is IRQ {n} now, not {old}: the driver re-requested its vectors (reload, ifdown/up or a channel change); re-apply",
                    item.label.as_deref().unwrap_or("the queue")
                ),
                (None, _, _) if item.label.is_some() => format!(
                    "no IRQ is named {} any more: the device or queue is gone",
                    item.label.as_deref().unwrap_or("")
                ),
                (_, _, None) => "the IRQ is gone".into(),
                _ if view.irqbalance.known().is_some_and(|i| i.running) => {
                    "moved: irqbalance is running and rebalanced it".into()
                }
                _ if let Some(who) = irqbalance => {
                    format!("moved by someone else: {who}, or a script, or the driver on ifup")
                }
                _ => "moved by someone else (irqbalance, a script, the driver on ifup)".into(),
            }
        }
        ItemKind::Rps | ItemKind::RfsFlowCnt | ItemKind::Xps => match found {
            None => "the queue is gone: the channel count was lowered".into(),
            Some(_) if zero => {
                "reset to 0: the queue was recreated (a channel change re-creates queue kobjects with RPS/RFS/XPS off)".into()
            }
            Some(_) => "changed by someone else".into(),
        },
        ItemKind::Channels => "the channel count was changed (ethtool -L)".into(),
        ItemKind::Irqbalance => "irqbalance was started again".into(),
        _ => match (&item.target, found) {
            (t, None) if t.path().is_some() => "the file is gone".into(),
            _ => "changed by someone else (sysctl.d at boot, tuned, NetworkManager)".into(),
        },
    }
}
