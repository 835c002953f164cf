//! The host's side of `tune search` (the engine is `netsteer_bench::search`): the knobs to
//! search as dimensions, each with the host's current value as its baseline level, and the
//! host as the search's target: every configuration is applied through tune's transaction
//! (journaled, all or nothing) and left by rolling its own journal back, so a search, even a
//! killed one, leaves nothing `tune rollback` cannot undo.

use super::apply::ApplyOptions;
use super::tuner::{TuneError, Tuner};
use crate::model::desired::{Plan, Profile};
use crate::model::planner::{Knob, PlanOptions};
use netsteer_bench::experiment::BoxError;
use netsteer_bench::search::{Dim, Obs, Target};
use std::path::Path;

/// One knob to search: a `--set` path and the values to try, in order (the order the search
/// interpolates along).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchKnob {
    pub path: String,
    pub values: Vec<String>,
}

impl SearchKnob {
    /// Parses `PATH=V1,V2,...`; every `PATH=Vi` must be a knob `tune apply --set` takes.
    pub fn parse(s: &str) -> Result<SearchKnob, String> {
        let (path, values) = s
            .split_once('=')
            .ok_or_else(|| format!("--knob {s:?}: expected PATH=V1,V2,..."))?;
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if values.len() < 2 || values.len() > 32 {
            return Err(format!("--knob {s:?}: give 2 to 32 values"));
        }
        for v in &values {
            Knob::parse(&format!("{path}={v}")).map_err(|e| format!("--knob {s:?}: {e}"))?;
        }
        let mut seen = values.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != values.len() {
            return Err(format!("--knob {s:?}: a value is given twice"));
        }
        Ok(SearchKnob {
            path: path.to_string(),
            values,
        })
    }
}

/// What a configuration asks of the host: the knobs (each dimension is named by its path)
/// whose level differs from the baseline's.
fn knobs_of(dims: &[Dim], baseline: &[usize], config: &[usize]) -> Vec<Knob> {
    config
        .iter()
        .enumerate()
        .filter(|&(d, &l)| l != baseline[d])
        .map(|(d, &l)| Knob {
            path: dims[d].name.clone(),
            value: dims[d].levels[l].clone(),
            current: None,
        })
        .collect()
}

/// The search space on this host: each knob's values, with the value it holds now among them
/// (put in its numeric place, or first, when it is not one of them), and the baseline, the
/// configuration of the host as it is.
pub struct Space {
    /// One per knob, named by its path.
    pub dims: Vec<Dim>,
    pub baseline: Vec<usize>,
    /// The devices the knobs' plans are made for.
    pub devices: Vec<String>,
}

impl Space {
    pub fn read(
        tuner: &Tuner,
        knobs: &[SearchKnob],
        devices: &[String],
    ) -> Result<Space, TuneError> {
        let mut dims = Vec::new();
        let mut baseline = Vec::new();
        for k in knobs {
            let plan = tuner.plan(&options(
                devices,
                vec![Knob {
                    path: k.path.clone(),
                    value: k.values[0].clone(),
                    current: None,
                }],
            ))?;
            let current = plan
                .items
                .iter()
                .find_map(|i| i.current.clone())
                .ok_or_else(|| {
                    TuneError::Search(format!("--knob {}: its value cannot be read", k.path))
                })?;
            let mut levels = k.values.clone();
            let at = match levels.iter().position(|v| *v == current) {
                Some(i) => i,
                None => {
                    let n = |v: &str| v.parse::<f64>().ok();
                    let i = match n(&current) {
                        Some(c) if levels.iter().all(|v| n(v).is_some()) => levels
                            .iter()
                            .position(|v| n(v).unwrap() > c)
                            .unwrap_or(levels.len()),
                        _ => 0,
                    };
                    levels.insert(i, current);
                    i
                }
            };
            dims.push(Dim {
                name: k.path.clone(),
                levels,
            });
            baseline.push(at);
        }
        Ok(Space {
            dims,
            baseline,
            devices: devices.to_vec(),
        })
    }

    /// The plan that puts the host into `config` (what `tune apply --plan` takes).
    pub fn plan(&self, tuner: &Tuner, config: &[usize]) -> Result<Plan, TuneError> {
        tuner.plan(&options(
            &self.devices,
            knobs_of(&self.dims, &self.baseline, config),
        ))
    }
}

fn options(devices: &[String], knobs: Vec<Knob>) -> PlanOptions {
    PlanOptions {
        devices: devices.to_vec(),
        knobs,
        ..PlanOptions::for_profile(Profile::None)
    }
}

/// The host as the search's target. `measure` runs the workload once.
pub struct HostTarget<'a> {
    pub tuner: &'a Tuner,
    pub space: &'a Space,
    pub measure: &'a mut dyn FnMut() -> Result<Obs, BoxError>,
    /// The journal of the configuration entered now, rolled back on leaving.
    journal: Option<String>,
}

impl<'a> HostTarget<'a> {
    pub fn new(
        tuner: &'a Tuner,
        space: &'a Space,
        measure: &'a mut dyn FnMut() -> Result<Obs, BoxError>,
    ) -> HostTarget<'a> {
        HostTarget {
            tuner,
            space,
            measure,
            journal: None,
        }
    }
}

impl Target for HostTarget<'_> {
    fn enter(&mut self, config: &[usize]) -> Result<(), BoxError> {
        if config == self.space.baseline.as_slice() {
            return Ok(());
        }
        let plan = self.space.plan(self.tuner, config)?;
        let r = self.tuner.apply(&plan, None, &ApplyOptions::default())?;
        if r.status != "applied" {
            // A failed apply restores what it wrote before it returns.
            return Err(format!("applying {config:?}: {}", r.status).into());
        }
        self.journal = Some(r.journal);
        Ok(())
    }

    fn measure(&mut self) -> Result<Obs, BoxError> {
        (self.measure)()
    }

    fn leave(&mut self, _config: &[usize]) -> Result<(), BoxError> {
        let Some(journal) = self.journal.take() else {
            return Ok(());
        };
        let r = self.tuner.rollback(Some(Path::new(&journal)))?;
        if r.status != "restored" && r.status != "nothing-to-do" {
            return Err(format!("rolling back {journal}: {}", r.status).into());
        }
        Ok(())
    }
}
