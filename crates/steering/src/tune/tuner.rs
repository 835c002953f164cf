//! The one entry point that changes a host: plan, apply, verify with an experiment, roll back.
//! It owns the state directory and its applied-plan file (written by a kept apply, removed by
//! a rollback or a rejected change), so `netsteer tune`, the lab and any search change hosts
//! the same way.
//!
//! The live host is the one the calling thread sees: its network namespace for /proc/sys/net
//! and netlink, its mount namespace for /sys. The lab enters a namespace host on a thread
//! (`netsteer_sock::netns::on_thread` with a fresh sysfs) and uses a `Tuner` there.

use super::apply::{
    ApplyError, ApplyOptions, ApplyReport, Backend, HostBackend, RollbackError, RollbackReport,
    apply, latest_journal, rollback,
};
use super::journal;
use super::status::ApplyStatus;
use super::verify::{VerifyReport, verify};
use crate::model::desired::{Item, Plan};
use crate::model::planner::{Knob, PlanError, PlanOptions, plan};
use netsteer_experiment::clock::Clock;
use netsteer_experiment::experiment::{self, BoxError, Decision, Executor, Metric, Order};
use netsteer_host::HostFs;
use netsteer_host::view::HostView;
use netsteer_nic::{NicBackend, NoNic};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Rollback(#[from] RollbackError),
    #[error("{path}: {source}")]
    State {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}: no applied plan (run `netsteer tune apply` first)")]
    NothingApplied { path: String },
    #[error("{path}: {source}")]
    BadAppliedPlan {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("--repeat {0}: at least 2 runs on each side are needed to know the noise")]
    TooFewRepeats(u32),
    #[error("the benchmark gave no usable {0}")]
    NoMeasure(Metric),
    #[error("{error}; the change was rolled back")]
    VerifyFailed { error: String },
    #[error("{0}")]
    Verify(String),
    #[error("{0}")]
    Search(String),
    /// A request refused before anything was written, naming the flag and value.
    #[error("{0}")]
    Refused(String),
}

/// The benchmark side of a verified apply: how many runs on each side and what to compare.
#[derive(Debug, Clone, Copy)]
pub struct Check {
    pub metric: Metric,
    pub repeats: u32,
}

/// Which side of the change a verification run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Before,
    After,
}

/// An apply checked by an experiment: the apply's report, the decision, and the rollback
/// when the change was not better beyond the noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verified {
    #[serde(flatten)]
    pub report: ApplyReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_loop: Option<Decision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackReport>,
}

pub struct Tuner {
    fs: HostFs,
    nic: Box<dyn NicBackend>,
    nic_enabled: bool,
    state_dir: PathBuf,
}

impl Tuner {
    /// A tuner for `fs` with its NIC backend (ethtool netlink live, the tree's record under a
    /// root) when `use_nic`; `state_dir` defaults to /var/lib/netsteer resolved inside the
    /// root (a link such as `ROOT/var/lib -> /elsewhere` must not carry the journal out).
    pub fn open(fs: HostFs, use_nic: bool, state_dir: Option<PathBuf>) -> Result<Tuner, TuneError> {
        let (nic, nic_enabled): (Box<dyn NicBackend>, bool) = if use_nic {
            match netsteer_nic::backend_for(&fs) {
                Ok(b) => (b, true),
                Err(e) => (
                    Box::new(NoNic {
                        reason: format!("ethtool netlink could not be opened: {e}"),
                    }),
                    false,
                ),
            }
        } else {
            let reason = "--no-ethtool was given".to_string();
            (Box::new(NoNic { reason }), false)
        };
        Tuner::with_nic(fs, nic, nic_enabled, state_dir)
    }

    /// As [`Tuner::open`] with a given NIC backend (a fake in tests).
    pub fn with_nic(
        fs: HostFs,
        nic: Box<dyn NicBackend>,
        nic_enabled: bool,
        state_dir: Option<PathBuf>,
    ) -> Result<Tuner, TuneError> {
        let state_dir = match state_dir {
            Some(d) => d,
            None => fs
                .real_path_for_write(super::state_dir::DEFAULT_STATE_DIR)
                .map_err(|e| TuneError::State {
                    path: "the state directory".into(),
                    source: io::Error::other(e.to_string()),
                })?,
        };
        Ok(Tuner {
            fs,
            nic,
            nic_enabled,
            state_dir,
        })
    }

    pub fn fs(&self) -> &HostFs {
        &self.fs
    }

    pub fn nic(&self) -> &dyn NicBackend {
        self.nic.as_ref()
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Whether NIC settings are read and written (ethtool netlink live, the tree's record
    /// under a root).
    pub fn reads_nic(&self) -> bool {
        self.nic_enabled
    }

    /// What a knob holds now, by the path `tune apply --set` takes: a file through the root, a
    /// NIC setting (`nic/IF/GROUP/NAME`) through the NIC backend, as a plan item reads it.
    pub fn read_knob(&self, path: &str) -> Result<String, String> {
        if crate::model::knob::is_nic_path(path) {
            if !self.nic_enabled {
                return Err(
                    "NIC settings are not read here (--no-ethtool or no ethtool netlink)".into(),
                );
            }
            let (dev, knob, _) = crate::model::planner::Knob::nic_knob(path)?;
            knob.read(&self.nic.settings(&dev))
        } else {
            self.fs
                .read_value(path)
                .map(|v| v.trim().to_string())
                .map_err(|e| e.to_string())
        }
    }

    /// The same tuner (its host and NIC backend) keeping its journals in `dir` instead.
    pub fn into_state_dir(self, dir: PathBuf) -> Tuner {
        Tuner {
            state_dir: dir,
            ..self
        }
    }

    /// The root as journals record it (canonical), so a rollback refuses another root's.
    pub fn root_name(&self) -> String {
        let root = self.fs.root();
        std::fs::canonicalize(root)
            .unwrap_or_else(|_| root.to_path_buf())
            .display()
            .to_string()
    }

    /// The host as the planner sees it, with NIC settings when the backend is enabled.
    pub fn view(&self) -> HostView {
        let settings = |name: &str| self.nic.settings(name);
        netsteer_host::read_host(
            &self.fs,
            self.nic_enabled.then_some(&settings as &dyn Fn(&str) -> _),
        )
    }

    fn backend(&self) -> HostBackend<'_> {
        HostBackend {
            fs: self.fs.clone(),
            nic: self.nic.as_ref(),
        }
    }

    /// The plan for `opts`, the explicit knobs' current values read through this host's root
    /// (the planner itself stays pure).
    pub fn plan(&self, opts: &PlanOptions) -> Result<Plan, TuneError> {
        let mut opts = opts.clone();
        opts.knobs = opts
            .knobs
            .into_iter()
            .map(|k| Knob {
                current: self.fs.read_value(&k.path).ok(),
                ..k
            })
            .collect();
        Ok(plan(&self.view(), &opts)?)
    }

    /// A plan of `items` made elsewhere (a watcher's reflex), each value read now through
    /// this host's root ([`crate::model::planner::plan_of`]).
    pub fn plan_of(&self, items: Vec<Item>) -> Plan {
        let backend = self.backend();
        crate::model::planner::plan_of(items, |t| backend.read(t).map_err(|e| e.message))
    }

    /// Applies `p` (journaled, all or nothing). After a channel change a live plan is made
    /// again from `replan` for the new queues; without it (a saved plan, reviewed as it is)
    /// `p` is used as it is.
    pub fn apply(
        &self,
        p: &Plan,
        replan: Option<&PlanOptions>,
        opts: &ApplyOptions,
    ) -> Result<ApplyReport, TuneError> {
        let mut again = || match replan {
            Some(o) => self.plan(o).map_err(|e| e.to_string()),
            None => Ok(p.clone()),
        };
        Ok(apply(
            p,
            &self.root_name(),
            &self.backend(),
            &self.state_dir,
            &mut again,
            opts,
        )?)
    }

    /// The tuner `tune search` applies its trials with: this one (its host and NIC backend),
    /// keeping its journals in the search's own directory, so a trial's apply and rollback
    /// never replace the plan `tune apply` last kept.
    pub fn for_search(self) -> Tuner {
        let dir = super::state_dir::StateDir::new(&self.state_dir).search();
        self.into_state_dir(dir)
    }

    /// `tune rollback`: with no journal named, a search killed mid-trial left its trial
    /// applied, and undoing that first is this rollback (every such journal, newest first);
    /// otherwise [`Tuner::rollback`]. One tuner (one NIC backend) moves to the search's
    /// directory for the recovery and back.
    pub fn rollback_or_recover(
        self,
        journal_path: Option<&Path>,
    ) -> Result<Vec<RollbackReport>, TuneError> {
        if journal_path.is_none() {
            let main = self.state_dir.clone();
            let search = self.for_search();
            let found = crate::tune::search::recover(&search)?;
            if !found.is_empty() {
                return Ok(found);
            }
            return Ok(vec![search.into_state_dir(main).rollback(None)?]);
        }
        Ok(vec![self.rollback(journal_path)?])
    }

    /// Restores what a journal recorded (default: the newest one not yet rolled back). When
    /// the host is back as it was, the applied plan no longer describes it and is removed.
    pub fn rollback(&self, journal_path: Option<&Path>) -> Result<RollbackReport, TuneError> {
        let path = match journal_path {
            Some(p) => p.to_path_buf(),
            None => latest_journal(&self.state_dir)?,
        };
        let r = rollback(&path, &self.root_name(), &self.backend())?;
        if r.status.is_clean() {
            self.forget_applied()?;
        }
        Ok(r)
    }

    fn forget_applied(&self) -> Result<(), TuneError> {
        let path = journal::applied_plan_path(&self.state_dir);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(TuneError::State {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// The plan last applied and kept.
    pub fn applied_plan(&self) -> Result<Plan, TuneError> {
        applied_plan_in(&self.state_dir)
    }

    /// The host against the plan last applied: what drifted and why.
    pub fn verify(&self) -> Result<VerifyReport, TuneError> {
        self.verify_asking(false)
    }

    /// [`Tuner::verify`] with the NIC settings (ethtool and netdev netlink, some 15 requests a
    /// device) asked of the devices the applied plan names only: what a lane's holder reads
    /// back every second on a host that may have thousands of other interfaces (veths).
    pub fn verify_own_devices(&self) -> Result<VerifyReport, TuneError> {
        self.verify_asking(true)
    }

    /// The verify, with the NIC settings of every device or (`own`) of the plan's only.
    fn verify_asking(&self, own: bool) -> Result<VerifyReport, TuneError> {
        let applied = self.applied_plan()?;
        let settings = |name: &str| {
            // A plan of every device names none: then all are asked.
            let asked = !own || applied.devices.is_empty();
            if asked || applied.devices.iter().any(|d| d == name) {
                self.nic.settings(name)
            } else {
                netsteer_host::ethtool::NicSettings::unavailable(
                    "not asked: no item of the plan read back is this device's",
                )
            }
        };
        let view = netsteer_host::read_host(&self.fs, Some(&settings));
        Ok(verify(&applied, &self.backend(), &view))
    }

    /// Applies `p` inside an experiment: `check.repeats` runs of `measure` before, the apply,
    /// as many after (sequential: a kept change must stay in place), then the three-way
    /// decision. Anything but "better beyond the noise" is rolled back; so is a change whose
    /// "after" run failed (it is not verified). A failed apply restores everything itself and
    /// is returned as it is, without a decision.
    pub fn apply_verified(
        &self,
        p: &Plan,
        replan: Option<&PlanOptions>,
        opts: &ApplyOptions,
        check: Check,
        measure: &mut dyn FnMut(Side, u32) -> Result<f64, BoxError>,
        clock: &dyn Clock,
    ) -> Result<Verified, TuneError> {
        if check.repeats < 2 {
            return Err(TuneError::TooFewRepeats(check.repeats));
        }
        let mut exec = VerifyExecutor {
            tuner: self,
            plan: p,
            replan,
            opts,
            measure,
            report: None,
        };
        let runs = experiment::run(
            &mut exec,
            2,
            check.repeats,
            Order::Sequential,
            clock,
            |_| Ok(()),
        );
        let report = exec.report.take();
        match (runs, report) {
            (Ok(runs), Some(report)) => {
                let decision = experiment::decide_all(check.metric, 2, &runs, |v| Some(*v))
                    .pop()
                    .flatten();
                let Some(d) = decision else {
                    self.undo(&report)?;
                    return Err(TuneError::NoMeasure(check.metric));
                };
                let rollback = if d.keep {
                    None
                } else {
                    Some(self.undo(&report)?)
                };
                Ok(Verified {
                    report,
                    closed_loop: Some(d),
                    rollback,
                })
            }
            (Err(_), Some(report)) if report.status != ApplyStatus::Applied => Ok(Verified {
                report,
                closed_loop: None,
                rollback: None,
            }),
            (Err(e), Some(report)) => {
                let undone = self.undo(&report);
                Err(TuneError::VerifyFailed {
                    error: match undone {
                        Ok(_) => e.to_string(),
                        Err(u) => format!("{e}; rolling back failed too: {u}"),
                    },
                })
            }
            (Err(e), None) => Err(TuneError::Verify(e.to_string())),
            (Ok(_), None) => Err(TuneError::Verify("the change was never applied".into())),
        }
    }

    fn undo(&self, report: &ApplyReport) -> Result<RollbackReport, TuneError> {
        self.rollback(Some(Path::new(&report.journal)))
    }
}

/// Variant 0 is the host as it is, variant 1 the applied plan; leaving does nothing, the
/// decision rolls back.
struct VerifyExecutor<'a> {
    tuner: &'a Tuner,
    plan: &'a Plan,
    replan: Option<&'a PlanOptions>,
    opts: &'a ApplyOptions,
    measure: &'a mut dyn FnMut(Side, u32) -> Result<f64, BoxError>,
    report: Option<ApplyReport>,
}

impl Executor for VerifyExecutor<'_> {
    type Measure = f64;

    fn enter(&mut self, variant: usize) -> Result<(), BoxError> {
        if variant == 1 {
            let r = self.tuner.apply(self.plan, self.replan, self.opts)?;
            let applied = r.status == ApplyStatus::Applied;
            self.report = Some(r);
            if !applied {
                return Err("the apply failed".into());
            }
        }
        Ok(())
    }

    fn measure(&mut self, variant: usize, repeat: u32) -> Result<f64, BoxError> {
        let side = if variant == 0 {
            Side::Before
        } else {
            Side::After
        };
        (self.measure)(side, repeat)
    }

    fn leave(&mut self, _variant: usize) -> Result<(), BoxError> {
        Ok(())
    }
}

/// The plan last applied from `state_dir` (its `applied.json`), read without opening a
/// [`Tuner`]: what a lane's holder checks every interval.
pub fn applied_plan_in(state_dir: &std::path::Path) -> Result<Plan, TuneError> {
    let path = journal::applied_plan_path(state_dir);
    let shown = path.display().to_string();
    let text = journal::read_applied(state_dir)
        .map_err(|source| TuneError::State {
            path: shown.clone(),
            source,
        })?
        .ok_or_else(|| TuneError::NothingApplied {
            path: shown.clone(),
        })?;
    serde_json::from_slice(&text).map_err(|source| TuneError::BadAppliedPlan {
        path: shown,
        source,
    })
}
