//! A reflex that would undo its own move: a change that gives a knob back what the same
//! reflex's move took off it within `reverse_window` (a CPU put back into a mask, a number
//! stepped back towards where it was) chases the load from CPU to CPU; the reflex sleeps for
//! that knob instead, as one whose guard failed.

use super::{Proposal, Watcher};
use crate::model::desired::Format;

impl Watcher {
    /// Why `p` would undo its own reflex's recent move on one of its knobs, if it would: the
    /// change gives the knob back what the move took away, within `reverse_window`.
    pub(super) fn reverses(&self, p: &Proposal, now: f64) -> Option<String> {
        let window = self.cfg.reverse_window.as_secs_f64();
        p.advice.changes.iter().find_map(|c| {
            let path = c.path();
            let m = self.moves.get(&path)?;
            let ago = now - m.at;
            (m.reflex == p.reflex && ago < window && gives_back(&path, &m.from, &m.to, &c.to))
                .then(|| {
                    format!(
                        "{} would give {} back what it moved off it {ago:.0} s ago ({} → {}, now → {}): a move undone this soon chases the load from CPU to CPU; {} sleeps for {} until the watcher restarts",
                        p.reflex.name(),
                        path,
                        m.from,
                        m.to,
                        c.to,
                        p.reflex.name(),
                        path
                    )
                })
        })
    }
}

/// Whether `next` gives a knob moved `before` → `after` back what the move took away: for a
/// CPU mask or list, a CPU the move removed; for a number, a step back towards `before`;
/// otherwise `before` itself.
pub(super) fn gives_back(path: &str, before: &str, after: &str, next: &str) -> bool {
    let format = crate::model::desired::Target::file(path).format();
    let sets = match format {
        Format::Mask => [before, after, next].map(|v| netsteer_host::CpuSet::parse_mask(v).ok()),
        Format::List => {
            [before, after, next].map(|v| netsteer_host::CpuSet::parse_list(v, None).ok())
        }
        _ => [None, None, None],
    };
    if let [Some(b), Some(a), Some(n)] = sets {
        return !n.intersection(&b.difference(&a)).is_empty();
    }
    // Counts (sysctls compare as text, and a count is a number there too).
    if let (Ok(b), Ok(a), Ok(n)) = (
        before.trim().parse::<i64>(),
        after.trim().parse::<i64>(),
        next.trim().parse::<i64>(),
    ) {
        return (n - a).signum() * (a - b).signum() < 0;
    }
    format.same(before, next)
}

#[cfg(test)]
mod tests {
    use super::gives_back;

    const RPS: &str = "/sys/class/net/eth0/queues/rx-0/rps_cpus";
    const BACKLOG: &str = "/proc/sys/net/core/netdev_max_backlog";

    #[test]
    fn a_change_gives_back_what_a_move_took_away() {
        // CPU 1 → CPU 0, then back to CPU 1 (issue 77's flip-flop), or onto CPUs 0 and 1.
        assert!(gives_back(RPS, "2", "1", "2"));
        assert!(gives_back(RPS, "2", "1", "3"));
        // Off CPU 4 onto the rest, then off CPU 5 too: a new move, not a reversal.
        assert!(!gives_back(RPS, "0010", "ffef", "ffcf"));
        // Counts: back down after a raise is a reversal, further up is not.
        assert!(gives_back(BACKLOG, "1000", "2000", "1500"));
        assert!(!gives_back(BACKLOG, "1000", "2000", "4000"));
        // Anything else: only the value from before.
        assert!(gives_back("nic/eth0/rss/indirection", "0 0", "0 1", "0 0"));
        assert!(!gives_back("nic/eth0/rss/indirection", "0 0", "0 1", "1 1"));
    }
}
