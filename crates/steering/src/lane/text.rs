//! Lanes for people (and the holder's JSON Lines).

use super::{HoldEvent, LaneOpError, LaneState, LaneStatus, Seen, Watching};
use crate::model::planner::lane::ServiceRef;

/// `netsteer lane list`: one line per lane.
pub fn render_list(all: &[LaneStatus]) -> Vec<String> {
    if all.is_empty() {
        return vec!["no lane recorded".into()];
    }
    all.iter()
        .map(|l| {
            let s = &l.spec;
            let state = match l.state {
                LaneState::Applied => "applied",
                LaneState::Down => "down",
                LaneState::Interrupted => "interrupted (netsteer lane remove, or the holder's next start, completes its rollback)",
            };
            let service = match &s.service {
                ServiceRef::Port => "whoever holds the port".to_string(),
                ServiceRef::Unit(u) => format!("unit {u}"),
                ServiceRef::Cgroup(c) => format!("cgroup {c}"),
            };
            let pids = if l.pids.is_empty() {
                String::new()
            } else {
                let p: Vec<String> = l.pids.iter().map(u32::to_string).collect();
                format!(", pinned pid(s) {}", p.join(","))
            };
            format!(
                "{}: {} {} on {} rx-{} → CPU {}, mode {}, service {service}: {state}{pids}",
                s.name,
                s.proto,
                s.port,
                s.dev,
                s.queue.map_or("last".to_string(), |q| q.to_string()),
                s.cpu,
                s.mode
            )
        })
        .collect()
}

/// One holder event as a line.
pub fn event_line(name: &str, e: Result<&HoldEvent, &LaneOpError>) -> String {
    match e {
        Err(e) => format!("lane {name}: {e}"),
        Ok(HoldEvent::Holding) => format!("lane {name}: holding"),
        Ok(HoldEvent::Waiting) => format!("lane {name}: waiting for the service"),
        Ok(HoldEvent::Applied(r)) => format!(
            "lane {name}: the service runs: applied ({} change(s), {})",
            r.changed(),
            r.journal
        ),
        Ok(HoldEvent::Reapplied(r)) => format!(
            "lane {name}: the service's processes changed: applied again ({} change(s), {})",
            r.changed(),
            r.journal
        ),
        Ok(HoldEvent::RolledBack(r, repaired)) => format!(
            "lane {name}: the service stopped: rolled back ({}, {} restored{}){}",
            r.status,
            r.restored.len(),
            if r.failed.is_empty() {
                String::new()
            } else {
                format!(", failed: {}", r.failed.join("; "))
            },
            if repaired.is_empty() {
                String::new()
            } else {
                let names: Vec<&str> = repaired.iter().map(|(n, _)| n.as_str()).collect();
                format!(
                    "; lane(s) {} of the same device applied again",
                    names.join(", ")
                )
            }
        ),
        Ok(HoldEvent::Recovered(r)) => format!(
            "lane {name}: an interrupted apply was rolled back ({}, {} restored)",
            r.status,
            r.restored.len()
        ),
        Ok(HoldEvent::Watching(w)) => match w {
            Watching::Notifications { rss: true } => format!(
                "lane {name}: foreign changes are seen by ethtool notifications (RSS and channels at once; the rest at each read-back)"
            ),
            Watching::Notifications { rss: false } => format!(
                "lane {name}: foreign changes are seen by ethtool notifications for channels; this kernel announces no RSS change (before 6.17), so the table is read back at each read-back"
            ),
            Watching::Polling { why } => format!(
                "lane {name}: foreign changes are seen by reading back at each read-back only ({why})"
            ),
        },
        Ok(HoldEvent::Foreign {
            seen,
            drift,
            reasserted,
            not_reasserted,
        }) => {
            let how = match seen {
                Seen::Notification { change, at_unix_ms } => {
                    format!("seen by the kernel's {change} notification at {at_unix_ms} ms")
                }
                Seen::Polling { at_unix_ms } => {
                    format!("seen by reading it back at {at_unix_ms} ms")
                }
            };
            let items: Vec<String> = drift
                .iter()
                .map(|d| {
                    format!(
                        "{} is {} (the lane set {})",
                        d.id,
                        d.found.as_deref().unwrap_or("gone"),
                        d.expected
                    )
                })
                .collect();
            let then = match (reasserted, not_reasserted) {
                (Some(r), _) => {
                    format!("applied again ({} change(s), {})", r.changed(), r.journal)
                }
                (None, Some(why)) => format!("not applied again: {why}"),
                (None, None) => {
                    "left as it is (--on-foreign reassert applies the lane again)".into()
                }
            };
            format!(
                "lane {name}: changed behind the lane's back ({how}; the kernel does not say who): {}; {then}",
                items.join("; ")
            )
        }
    }
}

/// One holder event as a JSON object (docs/json.md).
pub fn event_json(name: &str, e: Result<&HoldEvent, &LaneOpError>) -> serde_json::Value {
    use serde_json::json;
    match e {
        Err(e) => json!({"lane": name, "event": "error", "error": e.to_string()}),
        Ok(HoldEvent::Holding) => json!({"lane": name, "event": "holding"}),
        Ok(HoldEvent::Waiting) => json!({"lane": name, "event": "waiting"}),
        Ok(HoldEvent::Applied(r)) => json!({"lane": name, "event": "applied", "report": r}),
        Ok(HoldEvent::Reapplied(r)) => json!({"lane": name, "event": "reapplied", "report": r}),
        Ok(HoldEvent::RolledBack(r, repaired)) => {
            let repaired: Vec<serde_json::Value> = repaired
                .iter()
                .map(|(n, a)| json!({"lane": n, "report": a}))
                .collect();
            json!({"lane": name, "event": "rolled-back", "report": r, "repaired": repaired})
        }
        Ok(HoldEvent::Recovered(r)) => json!({"lane": name, "event": "recovered", "report": r}),
        Ok(HoldEvent::Watching(w)) => json!({"lane": name, "event": "watching", "watching": w}),
        Ok(HoldEvent::Foreign {
            seen,
            drift,
            reasserted,
            not_reasserted,
        }) => json!({"lane": name, "event": "foreign", "seen": seen, "drift": drift,
            "reasserted": reasserted, "not_reasserted": not_reasserted}),
    }
}

/// `lane plan`: tune's plan lines under a heading that names the lane.
pub fn render_plan(
    spec: &crate::model::planner::lane::LaneSpec,
    p: &crate::tune::Plan,
) -> Vec<String> {
    let (change, keep, skip) = p.counts();
    let mut lines = vec![format!(
        "lane {}: {} {} on {} rx-{} → CPU {}, mode {} ({change} to change, {keep} already set, {skip} skipped)",
        spec.name,
        spec.proto,
        spec.port,
        spec.dev,
        spec.queue.map_or("last".to_string(), |q| q.to_string()),
        spec.cpu,
        spec.mode
    )];
    lines.extend(crate::tune::text::render_plan(p).into_iter().skip(1));
    lines
}
