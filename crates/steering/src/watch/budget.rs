//! The reflex over time squeezes (`/proc/net/softnet_stat` column 3): `netdev_budget` and
//! `netdev_budget_usecs` doubled up to their caps, held while a bigger batch would not fit the
//! backlog RPS hands it to.

use super::signals::Signals;
use super::{BUDGET, BUDGET_USECS, Change, Proposal, Reflex};

/// While RPS hands packets across CPUs, the backlog holds at least this many budgets (see
/// [`batches_cross`]).
const BATCHES_PER_BACKLOG: i64 = 3;

/// `budget`: on time squeezes, `netdev_budget` and `netdev_budget_usecs` doubled up to their
/// caps, held while a bigger batch would not fit the backlog RPS hands it to.
pub(super) fn budget(s: &Signals) -> Option<Proposal> {
    let view = s.view;
    let (_, total, line) = s.per_cpu(
        |c| c.squeezed,
        "NET_RX ran out of budget or time with work left (time_squeeze)",
    )?;
    let mut evidence = vec![line];
    let mut changes = Vec::new();
    for (path, field, cap) in [
        (BUDGET, &view.sysctls.netdev_budget, s.cfg.max_budget),
        (
            BUDGET_USECS,
            &view.sysctls.netdev_budget_usecs,
            s.cfg.max_budget_usecs,
        ),
    ] {
        doubling((path, field, cap), &mut evidence, &mut changes);
    }
    let mut p = Proposal::of(Reflex::Budget, "budget", evidence, changes, total);
    p.hold = batches_cross(s, &p.advice.changes);
    Some(p)
}

/// Why a budget (raised to what `changes` say) must wait while RPS hands packets across
/// CPUs, if it must. A CPU's `net_rx_action` queues what RPS sends elsewhere on the other
/// CPU's backlog and kicks that CPU only when it ends (net/core/dev.c: `napi_schedule_rps`
/// puts the CPU on `rps_ipi_list`, `net_rps_action_and_irq_enable` sends the IPIs), so a
/// whole budget may land on another backlog at once. The budget is global: it grows every
/// such batch. In the lab, `netdev_budget` 300 → 600 beside a backlog of 1000 after
/// rps-away brought 150–580 drops a second at the CPU that took the packets (6 rounds of
/// 12 had drops after 10 s); held by this rule, 12 rounds of 12 had none (BENCHMARKS.md).
fn batches_cross(s: &Signals, changes: &[Change]) -> Option<String> {
    let view = s.view;
    // RPS at work: IPIs a CPU took, or a queue's mask (a CPU whose backlog is always
    // scheduled takes no IPI, however much RPS queues on it).
    let ipis = s.per_cpu(|c| c.rps_ipi, "IPIs");
    let masks: Vec<String> = view
        .nics
        .iter()
        .flat_map(|n| n.rx_queues.iter().map(move |q| (n, q)))
        .filter_map(|(n, q)| {
            let m = q.rps_cpus.known()?;
            (!m.is_empty()).then(|| format!("{} rx-{} → {m}", n.name, q.index))
        })
        .collect();
    let mut seen = Vec::new();
    seen.extend(ipis.map(|(_, _, line)| line));
    if !masks.is_empty() {
        let more = masks.len().saturating_sub(4);
        let mut shown = masks.into_iter().take(4).collect::<Vec<_>>().join(", ");
        if more > 0 {
            shown.push_str(&format!(" and {more} more"));
        }
        seen.push(format!("masks: {shown}"));
    }
    if seen.is_empty() {
        return None;
    }
    let budget = changes
        .iter()
        .find(|c| c.path() == BUDGET)
        .and_then(|c| c.to.parse::<i64>().ok())
        .or_else(|| view.sysctls.netdev_budget.known().copied())?;
    let across = format!("RPS hands packets across CPUs ({})", seen.join("; "));
    match view.sysctls.netdev_max_backlog.known().copied() {
        Some(backlog) if backlog >= BATCHES_PER_BACKLOG * budget => None,
        Some(backlog) => Some(format!(
            "{across}: a budget of {budget} would be more than 1/{BATCHES_PER_BACKLOG} of \
                 netdev_max_backlog {backlog}, and one CPU's batch may land on another's \
                 backlog whole; grow the backlog first"
        )),
        None => Some(format!(
            "{across}, and netdev_max_backlog is unreadable ({}): a bigger batch may not fit",
            view.sysctls.netdev_max_backlog
        )),
    }
}

/// An integer sysctl doubled up to its cap: its value (and cap) as evidence, the change when
/// there is room. An unreadable one is left out.
fn doubling(
    (path, field, cap): (&str, &netsteer_host::field::Field<i64>, i64),
    evidence: &mut Vec<String>,
    changes: &mut Vec<Change>,
) {
    let Some(cur) = field.known().copied() else {
        return;
    };
    let name = crate::model::desired::Target::file(path)
        .sysctl_name()
        .unwrap_or_else(|| path.to_string());
    evidence.push(format!("{name} = {cur} (cap {cap})"));
    let next = cur.saturating_mul(2).min(cap);
    if next > cur {
        changes.push(Change::file(path, cur.to_string(), next.to_string()));
    }
}
