//! `netsteer lane`: one latency-critical service's lane (planned by
//! [`crate::model::planner::lane`]), applied through tune's transaction and kept with the
//! service's life. Each lane lives in its own state directory (`STATE/lanes/NAME/`): the lane
//! as asked (`lane.json`), tune's journals and its applied plan. So the main `tune` state, the
//! watcher's and each lane's never roll back each other's changes.
//!
//! [`Lanes::hold`] (in `hold.rs`, with the one step it repeats) binds a lane to its service:
//! applied while the service runs (its threads pinned, whichever pids it has now), rolled back
//! when it stops, applied again when it comes back. A holder that restarts adopts a lane that still matches its service; it leaves the
//! lane in place when it exits unless told otherwise (OpenShift's tuning operator learnt both
//! the hard way: a restart cleared the IRQ bans running pods relied on, and rollback on exit
//! caused outages).
//!
//! A service is known by its owner: a lane of "whoever holds the port" records, at its apply,
//! the uid the socket table gives the service's sockets and their local addresses
//! ([`ServiceOwner`], `owner.json`); from then on only sockets of that uid on those addresses
//! are the service's, so another user's socket on the port (another family, another address)
//! never joins the lane, and its coming and going is nothing to the holder. The holder's cost
//! is its own: it reads the lane's newest journal only, the lane's rolled-back journals are
//! compacted to the newest few, and the search for the sockets' holders reads the
//! descriptors of their candidates only (the owner's uid, or the unit's processes).

use crate::model::knob::ItemId;
use crate::model::planner::lane::{LaneClaim, LaneError};
use crate::tune::apply::ApplyOptions;
use crate::tune::journal;
use crate::tune::{ApplyReport, Plan, RollbackReport, Target, TuneError, Tuner};
use netsteer_host::HostFs;
use netsteer_host::sockets::{self, OwnerScan, SocketRow};
use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::model::planner::lane::{
    LaneMode, LaneSpec, LaneSpec as Spec, ServiceRef, plan_lane, valid_lane_name,
};

pub mod hold;
pub mod service;
pub mod text;
pub use hold::{Foreign, HoldEvent, Holding, Lane, Seen, Watching};
pub use service::{FULL_SCAN_EVERY, SeenService, ServiceOwner};
use service::{addr_list, service_err};

/// The lane as asked, in its directory.
pub const SPEC_FILE: &str = "lane.json";
/// Held (flock) by the lane's holder while it runs: one holder per lane.
pub const LOCK_FILE: &str = "hold.lock";
/// Who the service of a port's lane is ([`ServiceOwner`]), recorded at its apply.
pub const OWNER_FILE: &str = "owner.json";
/// Journals kept whatever they hold: the newest few. Older ones that are rolled back (nothing
/// left in them to undo) are removed after each apply and rollback of the lane, so a lane
/// applied and rolled back all day long keeps a handful, and tune's own readers of the
/// directory (the next journal's number, the newest one to roll back) stay cheap.
pub const KEEP_JOURNALS: usize = 4;
/// The largest `lane.json` read back.
const MAX_SPEC_BYTES: u64 = 64 << 10;
/// At most this many lanes on a host are read (a directory of thousands is not ours).
const MAX_LANES: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum LaneOpError {
    #[error(transparent)]
    Lane(#[from] LaneError),
    #[error(transparent)]
    Tune(#[from] TuneError),
    #[error("{path}: {source}")]
    State {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("lane {0:?}: no such lane (netsteer lane list shows them)")]
    NoLane(String),
    #[error("{0}")]
    Service(String),
    #[error("lane {0:?}: another netsteer holds it (lane hold runs for it already; {1} is locked)")]
    Held(String, String),
}

/// What the lanes' readers did so far: journals parsed, processes and descriptors read to find
/// sockets' holders. The holder's cost is these; tests bound them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LaneWork {
    pub journals_parsed: u64,
    pub processes_scanned: u64,
    pub descriptors_scanned: u64,
    /// Tuners opened (each opens the ethtool and netdev netlink sockets on a live host): for
    /// an apply or a rollback, not for a look at a lane that holds.
    pub tuners_opened: u64,
}

#[derive(Debug, Default)]
struct WorkCounter {
    journals: AtomicU64,
    processes: AtomicU64,
    descriptors: AtomicU64,
    tuners: AtomicU64,
}

impl WorkCounter {
    fn journals(&self, n: usize) {
        self.journals.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn scan(&self, s: &OwnerScan) {
        self.processes
            .fetch_add(s.processes as u64, Ordering::Relaxed);
        self.descriptors
            .fetch_add(s.descriptors as u64, Ordering::Relaxed);
    }
}

fn state_err(path: &Path) -> impl FnOnce(io::Error) -> LaneOpError + '_ {
    move |source| LaneOpError::State {
        path: path.display().to_string(),
        source,
    }
}

/// Where a lane stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LaneState {
    /// Applied and kept.
    Applied,
    /// Recorded, not applied (its service is not running, or it was rolled back).
    Down,
    /// An apply was cut short (netsteer killed): rollback completes it.
    Interrupted,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LaneStatus {
    pub spec: LaneSpec,
    pub state: LaneState,
    /// The pids its applied plan pinned.
    pub pids: Vec<u32>,
    pub dir: String,
}

/// The lanes of one host: their state directories under `STATE/lanes`.
pub struct Lanes {
    fs: HostFs,
    use_nic: bool,
    dir: PathBuf,
    work: WorkCounter,
}

impl Lanes {
    /// The lanes under `state_dir/lanes` (default state directory: tune's, /var/lib/netsteer
    /// inside the root).
    pub fn open(
        fs: HostFs,
        use_nic: bool,
        state_dir: Option<PathBuf>,
    ) -> Result<Lanes, LaneOpError> {
        let home =
            crate::tune::StateDir::new(Tuner::open(fs.clone(), false, state_dir)?.state_dir());
        Ok(Lanes {
            fs,
            use_nic,
            dir: home.lanes(),
            work: WorkCounter::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What this `Lanes` has read so far ([`LaneWork`]).
    pub fn work(&self) -> LaneWork {
        LaneWork {
            journals_parsed: self.work.journals.load(Ordering::Relaxed),
            processes_scanned: self.work.processes.load(Ordering::Relaxed),
            descriptors_scanned: self.work.descriptors.load(Ordering::Relaxed),
            tuners_opened: self.work.tuners.load(Ordering::Relaxed),
        }
    }

    fn lane_dir(&self, name: &str) -> Result<PathBuf, LaneOpError> {
        if !valid_lane_name(name) {
            return Err(LaneError::BadName(name.to_string()).into());
        }
        Ok(self.dir.join(name))
    }

    /// The tuner of one lane: the host's NIC backend, the lane's own journals.
    pub fn tuner(&self, name: &str) -> Result<Tuner, LaneOpError> {
        self.work.tuners.fetch_add(1, Ordering::Relaxed);
        Ok(Tuner::open(
            self.fs.clone(),
            self.use_nic,
            Some(self.lane_dir(name)?),
        )?)
    }

    /// The lane recorded as `name`.
    pub fn spec(&self, name: &str) -> Result<LaneSpec, LaneOpError> {
        let path = self.lane_dir(name)?.join(SPEC_FILE);
        // Root's own file only (netsteer_host::trust): the lane names the CPU and the
        // processes root pins.
        let bytes = match netsteer_host::trust::read_owned_file(&path, MAX_SPEC_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(LaneOpError::NoLane(name.to_string()));
            }
            Err(e) => return Err(state_err(&path)(e)),
        };
        let spec: LaneSpec = serde_json::from_slice(&bytes)
            .map_err(|e| state_err(&path)(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        if spec.name != name {
            return Err(state_err(&path)(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("names lane {:?}, not {name:?}", spec.name),
            )));
        }
        Ok(spec)
    }

    /// Every recorded lane's name, sorted.
    pub fn names(&self) -> Result<Vec<String>, LaneOpError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(state_err(&self.dir)(e)),
        };
        let mut out: Vec<String> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| valid_lane_name(n))
            .filter(|n| self.dir.join(n).join(SPEC_FILE).is_file())
            .take(MAX_LANES)
            .collect();
        out.sort();
        Ok(out)
    }

    /// What the other lanes hold (every recorded lane: a lane that is down keeps its CPU, so
    /// its service finds it free when it comes back).
    pub fn claims(&self, except: &str) -> Result<Vec<LaneClaim>, LaneOpError> {
        let mut out = Vec::new();
        for name in self.names()?.into_iter().filter(|n| n != except) {
            let Ok(spec) = self.spec(&name) else { continue };
            let queue = self.claimed_queue(&spec);
            out.push(LaneClaim {
                name,
                dev: spec.dev.clone(),
                cpu: spec.cpu,
                queue,
                poll_cpu: spec.poll_cpu,
            });
        }
        Ok(out)
    }

    /// The queue a lane holds: the one given, else the device's last (as the planner picks).
    fn claimed_queue(&self, spec: &LaneSpec) -> u32 {
        let n = self
            .fs
            .read_dir(format!("/sys/class/net/{}/queues", spec.dev))
            .map(|q| q.iter().filter(|q| q.starts_with("rx-")).count() as u32)
            .unwrap_or(1);
        spec.queue_of(n)
    }

    /// The plan of `spec` for its service as it runs now.
    pub fn plan(&self, spec: &LaneSpec) -> Result<Plan, LaneOpError> {
        Ok(self.plan_for(spec)?.0)
    }

    /// [`Lanes::plan`], with the owner it was planned for (to record at its apply).
    fn plan_for(&self, spec: &LaneSpec) -> Result<(Plan, Option<ServiceOwner>), LaneOpError> {
        self.plan_with(spec, &self.tuner(&spec.name)?)
    }

    /// [`Lanes::plan_for`] through the lane's tuner `t` (a holder's, opened once).
    fn plan_with(
        &self,
        spec: &LaneSpec,
        t: &Tuner,
    ) -> Result<(Plan, Option<ServiceOwner>), LaneOpError> {
        let recorded = self.owner_for(spec)?;
        let served = self.served(spec, recorded.as_ref())?;
        let processes = self.holders(spec, &served)?;
        if processes.is_empty()
            && let (Some(o), false) = (&recorded, served.others.is_empty())
        {
            // Held, but not by the lane's service: say whose it is, and how to serve another.
            let held: BTreeSet<String> = served
                .others
                .iter()
                .map(|r| format!("uid {} on {}", r.uid, r.local))
                .collect();
            return Err(LaneOpError::Service(format!(
                "--{} {}: held only by sockets that are not the lane's service ({}); its service is uid {} on {} (recorded at its first apply: netsteer lane remove {}, then lane apply, to serve another)",
                spec.proto,
                spec.port,
                held.into_iter().collect::<Vec<_>>().join(", "),
                o.uid,
                addr_list(&o.addrs),
                spec.name
            )));
        }
        let others = self.claims(&spec.name)?;
        let plan = plan_lane(&t.view(), spec, &processes, &others, self.fs.is_live())?;
        Ok((plan, served.owner))
    }

    /// Records `spec` and applies its plan (all or nothing). An interrupted apply of the
    /// same lane is rolled back first; a lane already applied is rolled back and applied
    /// again (its settings or its service changed).
    pub fn apply(&self, spec: &LaneSpec, opts: &ApplyOptions) -> Result<ApplyReport, LaneOpError> {
        self.apply_with(spec, opts, &self.tuner(&spec.name)?)
    }

    /// [`Lanes::apply`] through the lane's tuner `t`.
    pub(super) fn apply_with(
        &self,
        spec: &LaneSpec,
        opts: &ApplyOptions,
        t: &Tuner,
    ) -> Result<ApplyReport, LaneOpError> {
        // Refused requests change nothing: planned once before anything is rolled back.
        let (mut plan, mut owner) = self.plan_with(spec, t)?;
        let dir = self.lane_dir(&spec.name)?;
        let (state, newest) = self.state_at(&spec.name)?;
        if state != LaneState::Down {
            t.rollback(newest.as_deref())?;
            // Planned again from the host as the rollback left it: what read as already set
            // under the old lane is to be written again.
            (plan, owner) = self.plan_with(spec, t)?;
        }
        let bytes = serde_json::to_vec_pretty(spec).expect("a lane serialises");
        journal::write_atomic(&dir.join(SPEC_FILE), &bytes).map_err(state_err(&dir))?;
        match owner {
            Some(o) if self.owner(&spec.name)?.as_ref() != Some(&o) => {
                self.write_owner(&spec.name, &o)?;
            }
            Some(_) => {}
            // A unit's or cgroup's lane is known by its group: an owner recorded for the
            // port before is forgotten, not found again if the lane goes back to the port.
            None if spec.service != ServiceRef::Port => self.forget_owner(&spec.name)?,
            None => {}
        }
        let r = t.apply(&plan, None, opts)?;
        self.compact(&spec.name);
        Ok(r)
    }

    /// A lane applied before owners were recorded: its owner is the uid whose sockets on the
    /// port the processes it pinned hold (not whoever holds the port now, who may be another
    /// user beside it, or alone on the port once the service stopped). Recorded when found;
    /// with its pinned processes holding nothing of the port, none is, and the next apply
    /// records one as a first apply does.
    fn owner_from_pinned(&self, spec: &LaneSpec, state: LaneState) -> Result<(), LaneOpError> {
        let pinned: Vec<u32> = self
            .pinned_in(&spec.name, state)?
            .into_iter()
            .filter(|(pid, start)| self.start_of(*pid) == Some(*start))
            .map(|(pid, _)| pid)
            .collect();
        let rows = sockets::serving_rows(&self.fs, spec.proto, spec.port)
            .map_err(|e| service_err(spec, e))?;
        let uids: BTreeSet<u32> = rows.iter().map(|r| r.uid).collect();
        for uid in uids {
            let mine: Vec<&SocketRow> = rows.iter().filter(|r| r.uid == uid).collect();
            let inodes = mine.iter().map(|r| r.inode).collect();
            let scan = sockets::socket_owners_among(&self.fs, &inodes, pinned.iter().copied());
            self.work.scan(&scan);
            if !scan.pids.is_empty() {
                let owner = ServiceOwner {
                    proto: spec.proto,
                    port: spec.port,
                    uid,
                    addrs: mine.iter().map(|r| r.local).collect(),
                };
                return self.write_owner(&spec.name, &owner);
            }
        }
        Ok(())
    }

    fn forget_owner(&self, name: &str) -> Result<(), LaneOpError> {
        let path = self.lane_dir(name)?.join(OWNER_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(state_err(&path)(e)),
        }
    }

    fn write_owner(&self, name: &str, owner: &ServiceOwner) -> Result<(), LaneOpError> {
        let path = self.lane_dir(name)?.join(OWNER_FILE);
        let bytes = serde_json::to_vec_pretty(owner).expect("an owner serialises");
        journal::write_atomic(&path, &bytes).map_err(state_err(&path))
    }

    /// Removes the lane's rolled-back journals beyond the newest [`KEEP_JOURNALS`]
    /// ([`journal::compact`], which parses each journal of the directory twice at most: counted
    /// so). Best effort: a journal left behind costs a read, never a wrong rollback (only
    /// journals with nothing left to undo are removed), so a failure here does not fail the
    /// apply or the rollback that came before it.
    fn compact(&self, name: &str) {
        let Ok(dir) = self.lane_dir(name) else { return };
        // Compaction reads each journal once to see whether it is rolled back.
        if let Ok(all) = journal::list(&dir) {
            self.work.journals(all.len());
        }
        let _ = journal::compact(&dir, KEEP_JOURNALS);
    }

    /// Rolls the lane back (its newest journal) and, with `forget`, removes its record.
    pub fn remove(&self, name: &str, forget: bool) -> Result<Option<RollbackReport>, LaneOpError> {
        let dir = self.lane_dir(name)?;
        if !dir.join(SPEC_FILE).exists() {
            return Err(LaneOpError::NoLane(name.to_string()));
        }
        let dev = self.spec(name)?.dev;
        let report = match self.newest_journal(&dir)? {
            None => None,
            Some(_) => Some(self.tuner(name)?.rollback(None)?),
        };
        if forget && report.as_ref().is_none_or(|r| r.failed.is_empty()) {
            let spec = dir.join(SPEC_FILE);
            std::fs::remove_file(&spec).map_err(state_err(&spec))?;
            self.forget_owner(name)?;
        }
        self.compact(name);
        self.repair_others(name, &dev)?;
        Ok(report)
    }

    /// Rolls the lane `name` of device `dev` back (its service stopped) through its tuner `t`,
    /// then repairs the other lanes of its device.
    pub(super) fn roll_back_with(
        &self,
        name: &str,
        dev: &str,
        t: &Tuner,
    ) -> Result<(RollbackReport, Vec<(String, ApplyReport)>), LaneOpError> {
        let (_, newest) = self.state_at(name)?;
        let r = t.rollback(newest.as_deref())?;
        self.compact(name);
        Ok((r, self.repair_others(name, dev)?))
    }

    /// Another applied lane of `dev` that a rollback undid part of (the RSS table or the
    /// n-tuple feature both relied on, put back to what it was before the first of them) is
    /// applied again: its drift says so. Returns the lanes applied again.
    pub fn repair_others(
        &self,
        except: &str,
        dev: &str,
    ) -> Result<Vec<(String, ApplyReport)>, LaneOpError> {
        let mut out = Vec::new();
        for other in self.names()?.into_iter().filter(|n| n != except) {
            let Ok(spec) = self.spec(&other) else {
                continue;
            };
            if spec.dev != dev || self.state(&other)? != LaneState::Applied {
                continue;
            }
            let drift = self.tuner(&other)?.verify()?.drift;
            // A pinned process that is gone is its holder's business, not a repair.
            let broken = drift
                .iter()
                .any(|d| !matches!(ItemId::parse(&d.id), Some(ItemId::Process(_))));
            if broken {
                out.push((other.clone(), self.apply(&spec, &ApplyOptions::default())?));
            }
        }
        Ok(out)
    }

    /// Applied, down or interrupted, from the lane's newest journal.
    pub fn state(&self, name: &str) -> Result<LaneState, LaneOpError> {
        Ok(self.state_at(name)?.0)
    }

    /// [`Lanes::state`] and the newest journal it was read from: that journal alone is
    /// parsed (found by its name, [`newest_journal`]), however many the lane has.
    fn state_at(&self, name: &str) -> Result<(LaneState, Option<PathBuf>), LaneOpError> {
        let dir = self.lane_dir(name)?;
        let Some(newest) = self.newest_journal(&dir)? else {
            return Ok((LaneState::Down, None));
        };
        self.work.journals(1);
        let records = journal::read(&newest).map_err(state_err(&newest))?;
        let state = match journal::state(&records) {
            journal::JournalState::RolledBack => LaneState::Down,
            journal::JournalState::Applied => LaneState::Applied,
            journal::JournalState::Interrupted => LaneState::Interrupted,
        };
        Ok((state, Some(newest)))
    }

    /// The newest journal of a lane's directory, counting what finding it parsed.
    fn newest_journal(&self, dir: &Path) -> Result<Option<PathBuf>, LaneOpError> {
        let (newest, parsed) = newest_journal(dir).map_err(state_err(dir))?;
        self.work.journals(parsed);
        Ok(newest)
    }

    /// The pids the applied plan pinned (none when the lane is down).
    pub fn pinned(&self, name: &str) -> Result<BTreeSet<(u32, u64)>, LaneOpError> {
        self.pinned_in(name, self.state(name)?)
    }

    /// [`Lanes::pinned`] for a lane whose state was just read.
    fn pinned_in(&self, name: &str, state: LaneState) -> Result<BTreeSet<(u32, u64)>, LaneOpError> {
        if state != LaneState::Applied {
            return Ok(BTreeSet::new());
        }
        // Read from the lane's directory, not through a Tuner: a holder looks every interval,
        // and a Tuner opens two netlink sockets on a live host for nothing a look needs.
        let plan = match crate::tune::applied_plan_in(&self.lane_dir(name)?) {
            Ok(p) => p,
            Err(TuneError::NothingApplied { .. }) => return Ok(BTreeSet::new()),
            Err(e) => return Err(e.into()),
        };
        Ok(plan
            .items
            .iter()
            .filter_map(|i| match i.target {
                Target::Process { pid, start } => Some((pid, start)),
                _ => None,
            })
            .collect())
    }

    pub fn status(&self, name: &str) -> Result<LaneStatus, LaneOpError> {
        let state = self.state(name)?;
        Ok(LaneStatus {
            spec: self.spec(name)?,
            state,
            pids: self
                .pinned_in(name, state)?
                .into_iter()
                .map(|(p, _)| p)
                .collect(),
            dir: self.lane_dir(name)?.display().to_string(),
        })
    }

    /// Takes the lane's hold lock (one holder per lane): held while the returned file lives.
    pub fn lock(&self, name: &str) -> Result<File, LaneOpError> {
        let dir = self.lane_dir(name)?;
        let path = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags_nofollow()
            .open(&path)
            .map_err(state_err(&path))?;
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => Err(LaneOpError::Held(
                name.to_string(),
                path.display().to_string(),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(state_err(&path)(e)),
        }
    }
}

/// The newest journal of a state directory ([`journal::list`], which orders by the sequence
/// number in the names and so parses none but journals from before sequence numbers), and
/// how many it parsed.
pub fn newest_journal(state_dir: &Path) -> io::Result<(Option<PathBuf>, usize)> {
    let mut all = journal::list(state_dir)?;
    let parsed = all
        .iter()
        .filter(|p| !journal::named_by_sequence(p))
        .count();
    Ok((all.pop(), parsed))
}

/// `OpenOptions` without following a link at the last component.
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NOFOLLOW)
    }
}
