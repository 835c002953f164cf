//! Running a watcher over its source: the live host, one reading per interval, or a recorded
//! incident replayed against a `--root` tree.

use super::{Event, Watcher};
use crate::doctor::Load;
use netsteer_host::view::HostView;
use std::time::Duration;

/// Where the intervals come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The live host: one reading per interval.
    Live,
    /// Recorded loads, one per interval (`doctor --json`'s `load`, one JSON object a line),
    /// replayed against a `--root` tree as fast as they are read: what the watcher would have
    /// said and done during a recorded incident.
    Replay(Vec<Load>),
}

/// How a run goes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub interval: Duration,
    /// None: until `stop` says so (live) or the recording ends (replay).
    pub duration: Option<Duration>,
    /// Roll back what the watcher still owns when it stops (not the default: a service that
    /// relies on a change must not lose it because the watcher restarted).
    pub rollback_on_exit: bool,
    pub source: Source,
}

/// Parses a recording: one `Load` per non-empty line; errors name the line.
pub fn parse_replay(text: &str) -> Result<Vec<Load>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// Runs `w` over its source: on the live host one reading per interval (the one load
/// sampler), the host view read again every ten intervals and after each change; a replay
/// steps through its loads against the tree. Every event is handed to `emit` as it happens.
pub fn run(
    mut w: Watcher,
    opts: &RunOptions,
    stop: &dyn Fn() -> bool,
    emit: &mut dyn FnMut(&Event) -> std::io::Result<()>,
) -> Result<(), String> {
    use crate::model::load::Reading;
    use std::time::Instant;
    let fs = w.tuner.fs().clone();
    let io = |e: std::io::Error| e.to_string();
    // The tuner's view: with NIC settings when it reads them (the rss reflex needs the table).
    let mut view = w.tuner.view();
    let mut at = 0.0;
    let step = |w: &mut Watcher, view: &mut HostView, at: f64, load: &Load, fresh: &mut u32| {
        let events = w.step(at, view, load);
        *fresh += 1;
        if *fresh >= 10
            || events
                .iter()
                .any(|e| matches!(e, Event::Applied { .. } | Event::RolledBack { .. }))
        {
            *view = w.tuner.view();
            *fresh = 0;
        }
        events
    };
    let mut fresh = 0u32;
    match &opts.source {
        Source::Replay(loads) => {
            if fs.is_live() {
                return Err(
                    "a replay is for a --root tree: recorded loads must not change the live host"
                        .into(),
                );
            }
            for load in loads {
                if stop() || opts.duration.is_some_and(|d| at >= d.as_secs_f64()) {
                    break;
                }
                at += opts.interval.as_secs_f64();
                step(&mut w, &mut view, at, load, &mut fresh)
                    .iter()
                    .try_for_each(&mut *emit)
                    .map_err(io)?;
            }
        }
        Source::Live => {
            if !fs.is_live() {
                return Err(
                    "watch reads the live host's counters; a --root tree has none (give --replay FILE)"
                        .into(),
                );
            }
            let take = |t| Reading::take(&fs, t).map_err(|e| format!("reading counters: {e}"));
            let start = Instant::now();
            let mut prev = take(start)?;
            emit(&Event::Started {
                at: 0.0,
                apply: w.cfg.apply,
                interval_s: opts.interval.as_secs_f64(),
            })
            .map_err(io)?;
            loop {
                let due = prev.at + opts.interval;
                while Instant::now() < due && !stop() {
                    std::thread::sleep((due - Instant::now()).min(Duration::from_millis(100)));
                }
                if stop() || opts.duration.is_some_and(|d| start.elapsed() >= d) {
                    break;
                }
                let cur = take(Instant::now())?;
                let load = cur.since(&prev);
                prev = cur;
                at = start.elapsed().as_secs_f64();
                step(&mut w, &mut view, at, &load, &mut fresh)
                    .iter()
                    .try_for_each(&mut *emit)
                    .map_err(io)?;
            }
        }
    }
    for e in w.finish(at, opts.rollback_on_exit) {
        emit(&e).map_err(io)?;
    }
    Ok(())
}
