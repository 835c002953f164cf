//! A saved plan (`tune plan --json > plan.json`, reviewed once) applied on many hosts: the
//! fleet applies the same desired state everywhere instead of each host planning its own.
//!
//! What differs between otherwise identical hosts is fixed up here, purely: IRQ numbers
//! (allocated at boot, so `virtio2-input.0` may be IRQ 45 here and 47 there) are found again by
//! their action name, which the plan records as each IRQ item's label. Items the planning host
//! already had right (`keep`) are wanted here too, so they are applied like changes; apply
//! reads every current value again and leaves what already matches untouched, so a second
//! apply of the same file changes nothing.

use crate::model::desired::{Action, ItemKind, PLAN_SCHEMA_VERSION, Plan, Target};
use crate::model::knob::ItemId;
use netsteer_host::HostView;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SavedPlanError {
    #[error("not a netsteer plan: {0}")]
    Parse(String),
    #[error("plan schema {found}, this netsteer reads schema {PLAN_SCHEMA_VERSION}")]
    Schema { found: u32 },
    #[error("the plan tunes {0}, which this host does not have")]
    MissingDevice(String),
}

/// Parses a plan file's text.
pub fn parse(text: &str) -> Result<Plan, SavedPlanError> {
    let plan: Plan =
        serde_json::from_str(text).map_err(|e| SavedPlanError::Parse(e.to_string()))?;
    if plan.schema_version != PLAN_SCHEMA_VERSION {
        return Err(SavedPlanError::Schema {
            found: plan.schema_version,
        });
    }
    Ok(plan)
}

/// The saved plan as this host must apply it: every device must exist, IRQ items point at this
/// host's IRQ of the same name (or are skipped, with why, when it has none), and `keep` items
/// become changes (apply skips those already as wanted).
pub fn for_host(saved: &Plan, view: &HostView) -> Result<Plan, SavedPlanError> {
    for d in &saved.devices {
        if view.nic(d).is_none() {
            return Err(SavedPlanError::MissingDevice(d.clone()));
        }
    }
    let mut plan = saved.clone();
    for item in &mut plan.items {
        if item.action == Action::Keep {
            item.action = Action::Change;
        }
        if item.kind != ItemKind::IrqAffinity || matches!(item.action, Action::Skip(_)) {
            continue;
        }
        let Some(name) = item.label.clone() else {
            continue;
        };
        let here = view
            .nics
            .iter()
            .flat_map(|n| n.irqs.iter())
            .find(|i| i.name == name)
            .map(|i| i.irq);
        let Some(irq) = here else {
            item.action = Action::Skip(format!(
                "no IRQ named {name} on this host (the plan's {})",
                item.id
            ));
            continue;
        };
        let Some(old) = ItemId::irq_of(&item.id) else {
            continue;
        };
        // Renumbered only where the id and the file name the same IRQ: one that says IRQ 48
        // beside IRQ 47's file is refused by the apply, not moved to a third.
        if old == irq || crate::model::knob::check_id(&item.id, &item.target).is_err() {
            continue;
        }
        item.id = ItemId::Irq(irq).into();
        if let Target::IrqAffinity { irq: n, .. } = &mut item.target {
            *n = irq;
        }
        item.current = None;
    }
    Ok(plan)
}
