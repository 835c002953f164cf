//! One line of text per watcher event (`netsteer watch` without `--json`).

use super::{Change, Event};

/// One event as a line of text.
pub fn text(e: &Event) -> String {
    let changes = |cs: &[Change]| {
        cs.iter()
            .map(|c| format!("{} {} -> {}", c.path(), c.from, c.to))
            .collect::<Vec<_>>()
            .join("; ")
    };
    match e {
        Event::Advice { at, advice } => format!(
            "{at:7.1}s advice  {}: {} | {}",
            advice.id,
            advice.evidence.join("; "),
            changes(&advice.changes)
        ),
        Event::AdviceGone { at, id } => format!("{at:7.1}s gone    {id}: the signal went away"),
        Event::AtCap { at, id, evidence } => format!(
            "{at:7.1}s at-cap  {id}: every knob is at its cap; {}",
            evidence.join("; ")
        ),
        Event::Applied {
            at,
            id,
            journal,
            changes: cs,
        } => format!(
            "{at:7.1}s applied {id}: {} (journal {journal})",
            changes(cs)
        ),
        Event::ApplyFailed { at, id, error } => format!("{at:7.1}s failed  {id}: {error}"),
        Event::GuardPassed {
            at,
            id,
            signal,
            cpu,
        } => format!(
            "{at:7.1}s guard   {id}: kept (signal {:.1} -> {:.1}, CPU {:.1} -> {:.1})",
            signal.0, signal.1, cpu.0, cpu.1
        ),
        Event::RolledBack { at, id, why } => format!("{at:7.1}s undone  {id}: {why}"),
        Event::Reclaimed {
            at,
            path,
            value,
            was,
            journal,
        } => format!("{at:7.1}s reclaim {path}: {was} -> {value} (told to; journal {journal})"),
        Event::SteppedAside {
            at,
            path,
            ours,
            now,
            who,
        } => format!(
            "{at:7.1}s aside   {path}: we wrote {ours}, it holds {now} ({who}); not touched again"
        ),
        Event::Held { at, id, why } => format!("{at:7.1}s held    {id}: {why}"),
        Event::Started {
            at,
            apply,
            interval_s,
        } => format!(
            "{at:7.1}s started every {interval_s:.1} s, {}",
            if *apply {
                "acting (--apply)"
            } else {
                "advising only"
            }
        ),
    }
}
