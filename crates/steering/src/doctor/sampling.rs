//! The doctor's inputs from a host: the load (counters sampled over an interval on the live
//! host, or averaged since boot on a tree) and one host's report with the core inputs it could
//! not read. The rules stay pure; this is the one part of the doctor that reads, always through
//! the caller's `HostFs`.

use super::{App, Goal, Load, Report};
pub use crate::model::load::Trace;
use netsteer_host::HostFs;
use netsteer_host::ethtool::NicSettings;
use netsteer_host::sample::{
    CounterSample, NetCounters, parse_uptime, read_net_counters, read_sample,
};
use std::time::{Duration, Instant};

/// Counters of one moment, both the per-CPU files and the namespace's net counters.
fn read_counters(fs: &HostFs) -> Result<(CounterSample, NetCounters), String> {
    let s = read_sample(fs).map_err(|e| format!("reading counters: {e}"))?;
    Ok((s, read_net_counters(fs)))
}

/// What passes the sample's time: a sleep, or `netsteer trace` over it (returning its stages).
pub type During<'a> = &'a mut dyn FnMut(Duration) -> Result<Trace, String>;

/// The load, the problems met, and whether /proc/interrupts could be read. `during` (a
/// trace) takes the place of the sleep between the two reads.
pub fn measure_load(
    fs: &HostFs,
    sample: Duration,
    during: Option<During>,
) -> Result<(Load, Vec<String>, bool, Option<Trace>), String> {
    let (s0, n0) = read_counters(fs)?;
    let mut problems: Vec<String> = s0.problems.iter().chain(&n0.problems).cloned().collect();
    if fs.is_live() && !sample.is_zero() {
        let t0 = Instant::now();
        let trace = match during {
            Some(f) => Some(f(sample)?),
            None => {
                std::thread::sleep(sample);
                None
            }
        };
        let (s1, n1) = read_counters(fs)?;
        let dt = t0.elapsed().as_secs_f64();
        let interrupts = s0.interrupts.is_some() && s1.interrupts.is_some();
        return Ok((
            Load::sampled((&s0, &n0), (&s1, &n1), dt),
            problems,
            interrupts,
            trace,
        ));
    }
    let uptime = match fs.read_parsed("/proc/uptime", parse_uptime) {
        Ok(u) => Some(u),
        Err(e) => {
            problems.push(format!("{e} (uptime taken from /proc/stat ticks)"));
            s0.uptime_from_ticks()
        }
    }
    .filter(|u| *u > 0.0)
    .ok_or("no uptime: neither /proc/uptime nor /proc/stat ticks give one")?;
    let interrupts = s0.interrupts.is_some();
    Ok((
        Load::since_boot(&s0, &n0, uptime),
        problems,
        interrupts,
        None,
    ))
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
