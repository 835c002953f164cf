//! What a reflex reads: [`Signals`], the interval's host and load with the watcher's own
//! limits and look-back. A reflex is a function from these to proposals (`backlog.rs`,
//! `budget.rs`, `doctor.rs`); it cannot reach the tuner, the journals or the guard's state,
//! so what it proposes follows from what it was shown, and a test can show it anything.

use super::{Interval, WatchConfig};
use crate::doctor::Load;
use netsteer_host::CpuSet;
use netsteer_host::sample::CpuRates;
use netsteer_host::view::HostView;
use std::collections::VecDeque;

pub(super) struct Signals<'a> {
    pub(super) cfg: &'a WatchConfig,
    pub(super) view: &'a HostView,
    pub(super) load: &'a Load,
    /// The last `persist` intervals, this one included (the backlog's hold looks back).
    pub(super) recent: &'a VecDeque<Interval>,
    /// The most one CPU dropped in a second while drops went on (backlog sizing).
    pub(super) peak_drops: f64,
    /// The CPUs lanes hold, read only when a reflex asks (a CPU saturated): a lane may come
    /// while the watcher runs, and most intervals need none.
    pub(super) lane_cpus: &'a dyn Fn() -> CpuSet,
}

impl Signals<'_> {
    /// The CPUs whose `rate` is at least the watcher's `min_rate`, their sum, and one evidence
    /// line.
    pub(super) fn per_cpu(
        &self,
        rate: fn(&CpuRates) -> Option<f64>,
        what: &str,
    ) -> Option<(Vec<u32>, f64, String)> {
        let over: Vec<(u32, f64)> = self
            .load
            .cpu
            .cpus
            .iter()
            .filter_map(|c| Some((c.cpu, rate(c)?)))
            .filter(|(_, r)| *r >= self.cfg.min_rate)
            .collect();
        if over.is_empty() {
            return None;
        }
        let line = over
            .iter()
            .map(|(c, r)| format!("CPU {c} {r:.0}/s"))
            .collect::<Vec<_>>()
            .join(", ");
        Some((
            over.iter().map(|o| o.0).collect(),
            over.iter().map(|o| o.1).sum(),
            format!("{what}: {line}"),
        ))
    }
}
