//! tune's reports as lines for people: the plan, the apply, the rollback and the drift. Long
//! values (an RSS table) are shortened to their start and length.

use super::verify::VerifyReport;
use super::{Action, ApplyReport, Plan, RollbackReport, StepStatus};
use netsteer_experiment::experiment::Decision;

/// A value for people: long ones (an RSS table) shortened to their start and length.
fn short(v: &str) -> String {
    let v = v.trim();
    if v.len() <= 48 {
        return v.to_string();
    }
    let head: String = v.chars().take(40).collect();
    format!("{head}… ({} entries)", v.split_whitespace().count())
}

pub fn render_plan(p: &Plan) -> Vec<String> {
    let (c, k, s) = p.counts();
    let mut lines = vec![format!(
        "tune plan: profile {}, {} ({c} to change, {k} already set, {s} skipped){}",
        p.profile,
        p.devices.join(", "),
        p.cpus
            .as_ref()
            .map(|c| format!(", CPUs {c}"))
            .unwrap_or_default()
    )];
    for i in &p.items {
        let cur = i
            .current
            .as_deref()
            .map(short)
            .unwrap_or_else(|| "?".into());
        match &i.action {
            Action::Change => lines.push(format!(
                "  change  {:<28} {} : {cur} -> {}  ({})",
                i.id, i.target, i.desired, i.reason
            )),
            Action::Keep => lines.push(format!(
                "  keep    {:<28} {} = {}",
                i.id, i.target, i.desired
            )),
            Action::Skip(why) => lines.push(format!("  skip    {:<28} {} : {why}", i.id, i.target)),
        }
    }
    for n in &p.notes {
        lines.push(format!("  note: {n}"));
    }
    lines
}

pub fn render_apply(r: &ApplyReport) -> Vec<String> {
    let n = |s: StepStatus| r.steps.iter().filter(|x| x.status == s).count();
    let rewritten = match n(StepStatus::Rewritten) {
        0 => String::new(),
        k => format!(", {k} rewritten"),
    };
    let mut lines = vec![format!(
        "tune apply: {} ({} changed{rewritten}, {} unchanged, {} skipped, {} restored); journal {}",
        r.status,
        n(StepStatus::Changed),
        n(StepStatus::Unchanged),
        n(StepStatus::Skipped),
        n(StepStatus::Restored),
        r.journal
    )];
    for s in &r.steps {
        let why = s
            .why
            .as_deref()
            .map(|w| format!("  ({w})"))
            .unwrap_or_default();
        lines.push(format!(
            "  {:<9} {:<28} {} : {} -> {}{why}",
            s.status,
            s.id,
            s.target,
            short(&s.old),
            short(&s.new)
        ));
    }
    for note in &r.notes {
        lines.push(format!("  note: {note}"));
    }
    if let Some(e) = &r.error {
        lines.push(format!("error: {e}"));
    }
    lines
}

pub fn render_rollback(r: &RollbackReport) -> Vec<String> {
    let mut lines = vec![format!(
        "tune rollback: {} ({} restored, {} failed); journal {}",
        r.status,
        r.restored.len(),
        r.failed.len(),
        r.journal
    )];
    lines.extend(r.restored.iter().map(|i| format!("  restored {i}")));
    lines.extend(r.failed.iter().map(|i| format!("  FAILED   {i}")));
    lines
}

pub fn render_verify(r: &VerifyReport) -> Vec<String> {
    let mut lines = vec![format!(
        "tune verify: profile {} on {}: {} item(s) checked, {} drifted",
        r.profile,
        r.devices.join(", "),
        r.checked,
        r.drift.len()
    )];
    for d in &r.drift {
        lines.push(format!(
            "  drift {:<28} {} : expected {}, found {} — {}",
            d.id,
            d.target,
            d.expected,
            d.found.as_deref().unwrap_or("nothing"),
            d.why
        ));
    }
    lines
}

/// The experiment's decision on a verified apply: both sides' spreads, the verdict with its
/// numbers, and what became of the change.
pub fn render_decision(d: &Decision) -> String {
    format!(
        "closed loop: {} before min/median/max {:.0}/{:.0}/{:.0}, after {:.0}/{:.0}/{:.0}: {} — {}",
        d.metric,
        d.before.min,
        d.before.median,
        d.before.max,
        d.after.min,
        d.after.median,
        d.after.max,
        d.why,
        if d.keep { "kept" } else { "rolled back" }
    )
}
