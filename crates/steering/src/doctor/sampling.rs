//! The doctor's inputs from a host: the load (counters sampled over an interval on the live
//! host, or averaged since boot on a tree) and one host's report with the core inputs it could
//! not read. The rules stay pure; this is the one part of the doctor that reads, always through
//! the caller's `HostFs`.

use super::{App, Goal, Load, Report};
use crate::model::load::Reading;
pub use crate::model::load::Trace;
use netsteer_host::HostFs;
use netsteer_host::ethtool::NicSettings;
use std::time::{Duration, Instant};

/// What passes the sample's time: a sleep, or `netsteer trace` over it (returning its stages).
pub type During<'a> = &'a mut dyn FnMut(Duration) -> Result<Trace, String>;

/// The load, the problems met, and whether /proc/interrupts could be read. `during` (a
/// trace) takes the place of the sleep between the two reads.
pub fn measure_load(
    fs: &HostFs,
    sample: Duration,
    during: Option<During>,
) -> Result<(Load, Vec<String>, bool, Option<Trace>), String> {
    let read = |at| Reading::take(fs, at).map_err(|e| format!("reading counters: {e}"));
    let first = read(Instant::now())?;
    let mut problems: Vec<String> = first.problems().cloned().collect();
    if fs.is_live() && !sample.is_zero() {
        let trace = match during {
            Some(f) => Some(f(sample)?),
            None => {
                std::thread::sleep(sample);
                None
            }
        };
        let second = read(Instant::now())?;
        let interrupts =
            first.counters.interrupts.is_some() && second.counters.interrupts.is_some();
        return Ok((second.since(&first), problems, interrupts, trace));
    }
    let (load, note) = first.since_boot(fs)?;
    problems.extend(note);
    let interrupts = first.counters.interrupts.is_some();
    Ok((load, problems, interrupts, None))
}

/// One host's report and the core inputs it could not read. /proc/stat and /proc/interrupts
/// are doctor's core inputs: without them the spread and drop rules cannot run, and "no
/// finding" would read as "healthy" to a script or a fleet job. The static rules still run,
/// but the caller must say the run failed.
pub fn examine(
    fs: &HostFs,
    settings: Option<&dyn Fn(&str) -> NicSettings>,
    sample: Duration,
    goal: Goal,
    app: Option<&App>,
    during: Option<During>,
) -> (Report, Vec<String>) {
    let view = netsteer_host::read_host(fs, settings);
    let mut missing_core = Vec::new();
    let (load, problems, trace) = match measure_load(fs, sample, during) {
        Ok((l, p, interrupts_read, trace)) => {
            if !interrupts_read {
                missing_core.push("/proc/interrupts".to_string());
            }
            (Some(l), p, trace)
        }
        Err(e) => {
            let problem = format!("{e} (rules that need rates were skipped)");
            missing_core.push(e);
            (None, vec![problem], None)
        }
    };
    let mut report =
        super::report::diagnose_traced(&view, load.as_ref(), goal, app, trace.as_ref());
    report.problems.extend(problems);
    if load.is_none()
        && let Some(why) = missing_core.last()
    {
        report.not_judged.push(format!(
            "drops, squeezes and softirq load (every rule that needs rates): {why}"
        ));
    }
    (report, missing_core)
}
