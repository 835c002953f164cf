//! `lab run seed-000 --vm --trace`: `netsteer trace` in the server guest during a rung, and the
//! line that says where the latency flow's time went.

use super::Guest;
use super::ladder::T;
use crate::Result;

/// Starts `netsteer trace` (every packet) in guest b, in the background, and waits for its
/// programs to attach. A trace that cannot start is a note, not a failed rung.
pub fn start(g: &mut Guest, bin: &str, notes: &mut Vec<String>) -> Result<bool> {
    let (rc, out) = g.sh(
        &format!(
            "rm -f /x/trace.json; chroot /host {bin} trace --json --duty 100 --interval 3600 --top 64 > /x/trace.json 2> /x/trace.err & echo $! > /x/trace.pid; i=0; while [ $i -lt 600 ]; do [ -s /x/trace.json ] && exit 0; kill -0 $(cat /x/trace.pid) 2>/dev/null || break; i=$((i+1)); sleep 0.1; done; cat /x/trace.err; exit 1"
        ),
        T,
    )?;
    if rc != 0 {
        notes.push(format!("trace: {}", out.trim()));
    }
    Ok(rc == 0)
}

/// Stops guest b's trace (SIGINT: it prints the interval so far) and returns its rows on eth0
/// and per CPU.
pub fn stop(
    g: &mut Guest,
    notes: &mut Vec<String>,
    said_unavailable: &mut bool,
) -> Result<Vec<netsteer_trace::StageRow>> {
    let (rc, out) = g.sh(
        "p=$(cat /x/trace.pid); kill -INT $p; i=0; while kill -0 $p 2>/dev/null && [ $i -lt 300 ]; do i=$((i+1)); sleep 0.1; done; cat /x/trace.json",
        T,
    )?;
    let rows: Vec<netsteer_trace::StageRow> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<netsteer_trace::Interval>(l).ok())
        .flat_map(|i| i.stages)
        .filter(|r| r.dev.as_deref().is_none_or(|d| d == "eth0"))
        .collect();
    if rc != 0 || rows.is_empty() {
        notes.push(format!("trace: no interval came back: {}", out.trim()));
    }
    let start = out
        .lines()
        .find_map(|l| serde_json::from_str::<netsteer_trace::Start>(l).ok());
    if let Some(start) = start.filter(|s| !s.unavailable.is_empty() && !*said_unavailable) {
        *said_unavailable = true;
        for u in start.unavailable {
            notes.push(format!("trace: {} unavailable: {}", u.stage.name(), u.why));
        }
    }
    Ok(rows)
}

/// The traced rows as ` | server: NET_RX wait p50 …, stack p50 … (rx-N), residence p50 …`:
/// each stage's busiest row.
pub fn breakdown(stages: &[netsteer_trace::StageRow]) -> String {
    use netsteer_trace::Stage;
    let busiest = |stage: Stage| {
        stages
            .iter()
            .filter(|r| r.stage == stage)
            .max_by_key(|r| r.count)
    };
    let parts: Vec<String> = [
        (Stage::IrqToSoftirq, "NET_RX wait"),
        (Stage::Stack, "stack"),
        (Stage::Residence, "residence"),
    ]
    .iter()
    .filter_map(|(stage, name)| {
        let r = busiest(*stage)?;
        let at = match (r.queue, r.cpu) {
            (Some(q), _) if *stage != Stage::IrqToSoftirq => format!(" rx-{q}"),
            (_, Some(c)) => format!(" CPU{c}"),
            _ => String::new(),
        };
        Some(format!(
            "{name}{at} p50 {:.1}us",
            r.p50.unwrap_or(0) as f64 / 1e3
        ))
    })
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" | server: {}", parts.join(", "))
    }
}
