//! `netsteer lane`: one latency-critical service's lane (planned by
//! [`crate::model::planner::lane`]), applied through tune's transaction and kept with the
//! service's life. Each lane lives in its own state directory (`STATE/lanes/NAME/`): the lane
//! as asked (`lane.json`), tune's journals and its applied plan. So the main `tune` state, the
//! watcher's and each lane's never roll back each other's changes.
//!
//! [`Lanes::hold`] binds a lane to its service: applied while the service runs (its threads
//! pinned, whichever pids it has now), rolled back when it stops, applied again when it comes
//! back. A holder that restarts adopts a lane that still matches its service; it leaves the
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

use crate::model::planner::lane::{LaneClaim, LaneError, LaneProcess};
use crate::tune::apply::ApplyOptions;
use crate::tune::journal::{self, Record};
use crate::tune::{ApplyReport, Plan, RollbackReport, Target, TuneError, Tuner};
use netsteer_host::HostFs;
use netsteer_host::sockets::{self, OwnerScan, Proto, SocketRow};
use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use crate::model::planner::lane::{
    LaneMode, LaneSpec, LaneSpec as Spec, ServiceRef, plan_lane, valid_lane_name,
};

pub mod text;

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

/// Who the service of a lane of "whoever holds the port" is: the uid its sockets have in the
/// socket table (`/proc/net/{tcp,udp}{,6}`, whoever created them) and their local addresses
/// (an address's kind is its socket's family), for the port they were found on. Recorded
/// when the lane is applied and kept while the lane is recorded (a `lane apply` for another
/// port records it again; `lane remove` forgets it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceOwner {
    pub proto: Proto,
    pub port: u16,
    pub uid: u32,
    pub addrs: BTreeSet<IpAddr>,
}

impl ServiceOwner {
    /// Whether `row` is one of the service's sockets.
    pub fn owns(&self, row: &SocketRow) -> bool {
        row.uid == self.uid && self.addrs.contains(&row.local)
    }

    fn serves(&self, spec: &LaneSpec) -> bool {
        self.proto == spec.proto && self.port == spec.port
    }
}

/// What the lanes' readers did so far: journals parsed, processes and descriptors read to find
/// sockets' holders. The holder's cost is these; tests bound them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LaneWork {
    pub journals_parsed: u64,
    pub processes_scanned: u64,
    pub descriptors_scanned: u64,
}

#[derive(Debug, Default)]
struct WorkCounter {
    journals: AtomicU64,
    processes: AtomicU64,
    descriptors: AtomicU64,
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

/// The sockets serving a lane now.
struct Served {
    /// Its sockets: for a port's service, its owner's; for a unit or cgroup, every socket on
    /// the port (the group's processes tell).
    inodes: BTreeSet<u64>,
    /// A port's service's owner: the one recorded, or the one found now (a first apply).
    owner: Option<ServiceOwner>,
    /// The sockets on the port that are not the owner's.
    others: Vec<SocketRow>,
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
        let base = Tuner::open(fs.clone(), false, state_dir)?
            .state_dir()
            .to_path_buf();
        Ok(Lanes {
            fs,
            use_nic,
            dir: base.join("lanes"),
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
        Ok(Tuner::open(
            self.fs.clone(),
            self.use_nic,
            Some(self.lane_dir(name)?),
        )?)
    }

    /// The lane recorded as `name`.
    pub fn spec(&self, name: &str) -> Result<LaneSpec, LaneOpError> {
        let path = self.lane_dir(name)?.join(SPEC_FILE);
        let bytes = match netsteer_host::fs::read_regular_nofollow(&path, MAX_SPEC_BYTES) {
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

    /// The owner recorded for lane `name` (None: none recorded, as for a lane of a unit or
    /// cgroup, or one recorded before owners were).
    pub fn owner(&self, name: &str) -> Result<Option<ServiceOwner>, LaneOpError> {
        let path = self.lane_dir(name)?.join(OWNER_FILE);
        // A state file like a journal (root's, writable by nobody else): it decides whose
        // processes root pins.
        let bytes = match journal::read_state_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(state_err(&path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| state_err(&path)(io::Error::new(io::ErrorKind::InvalidData, e)))
    }

    /// The recorded owner that names `spec`'s service: a port's lane's, for the same port.
    fn owner_for(&self, spec: &LaneSpec) -> Result<Option<ServiceOwner>, LaneOpError> {
        if spec.service != ServiceRef::Port {
            return Ok(None);
        }
        Ok(self.owner(&spec.name)?.filter(|o| o.serves(spec)))
    }

    /// The sockets serving `spec` now, for the `recorded` owner (or, with none, the owner the
    /// port's sockets make now: one uid, or the lane is refused).
    fn served(
        &self,
        spec: &LaneSpec,
        recorded: Option<&ServiceOwner>,
    ) -> Result<Served, LaneOpError> {
        let rows = sockets::serving_rows(&self.fs, spec.proto, spec.port)
            .map_err(|e| service_err(spec, e))?;
        if spec.service != ServiceRef::Port {
            return Ok(Served {
                inodes: rows.iter().map(|r| r.inode).collect(),
                owner: None,
                others: Vec::new(),
            });
        }
        let owner = match recorded {
            Some(o) => Some(o.clone()),
            None => owner_of(spec, &rows)?,
        };
        let (mine, others): (Vec<SocketRow>, Vec<SocketRow>) = rows
            .into_iter()
            .partition(|r| owner.as_ref().is_some_and(|o| o.owns(r)));
        Ok(Served {
            inodes: mine.iter().map(|r| r.inode).collect(),
            owner,
            others,
        })
    }

    /// The service's processes, given the sockets serving it: their holders among the
    /// candidates (the owner's uid's processes and the children of holders; a unit's or
    /// cgroup's processes), never every process's descriptors.
    fn holders(&self, spec: &LaneSpec, served: &Served) -> Result<Vec<LaneProcess>, LaneOpError> {
        let pids: Vec<u32> = match (&spec.service, &served.owner) {
            (ServiceRef::Port, _) if served.inodes.is_empty() => Vec::new(),
            (ServiceRef::Port, Some(owner)) => {
                let scan = sockets::socket_owners_of_uid(&self.fs, &served.inodes, owner.uid)
                    .map_err(|e| service_err(spec, e))?;
                self.work.scan(&scan);
                scan.pids
            }
            (ServiceRef::Port, None) => Vec::new(),
            (ServiceRef::Unit(_) | ServiceRef::Cgroup(_), _) => {
                // The group first, nobody on the port or not: a unit systemd does not know
                // is refused whether or not the port is held.
                let group = self.group_pids(&spec.service)?;
                let scan =
                    sockets::socket_owners_among(&self.fs, &served.inodes, group.iter().copied());
                self.work.scan(&scan);
                if scan.pids.is_empty() {
                    Vec::new()
                } else {
                    group.into_iter().collect()
                }
            }
        };
        Ok(pids
            .into_iter()
            .filter_map(|pid| self.process(pid))
            .collect())
    }

    /// The service's processes now: the holders of its owner's sockets on its port, or (for a
    /// unit or cgroup) the group's processes once one of them holds the port. Empty: not
    /// running.
    pub fn service(&self, spec: &LaneSpec) -> Result<Vec<LaneProcess>, LaneOpError> {
        let recorded = self.owner_for(spec)?;
        let served = self.served(spec, recorded.as_ref())?;
        self.holders(spec, &served)
    }

    /// As [`Lanes::service`], through what the holder saw last: while the service's sockets
    /// are the same and each process seen is still the same process, the search for their
    /// holders is skipped. What that misses: a process forked after the search inherits the
    /// service's CPU affinity (sched_setaffinity is inherited across fork and exec), so the
    /// lane already holds it; a new socket of the service (SO_REUSEPORT, a restart) changes
    /// the inodes; a descriptor passed over a Unix socket is found by the search every
    /// [`FULL_SCAN_EVERY`] looks. Another user's socket on the port is not the service's: it
    /// changes nothing here.
    pub fn service_seen(
        &self,
        spec: &LaneSpec,
        seen: &mut Option<SeenService>,
    ) -> Result<Vec<LaneProcess>, LaneOpError> {
        let recorded = self.owner_for(spec)?;
        let served = self.served(spec, recorded.as_ref())?;
        if let Some(s) = seen.as_mut()
            && s.inodes == served.inodes
            && !served.inodes.is_empty()
            && !s.procs.is_empty()
            && s.looks < FULL_SCAN_EVERY
            && s.procs
                .iter()
                .all(|p| self.start_of(p.pid) == Some(p.start))
        {
            s.looks += 1;
            return Ok(s.procs.clone());
        }
        let procs = self.holders(spec, &served)?;
        *seen = Some(SeenService {
            inodes: served.inodes,
            procs: procs.clone(),
            looks: 0,
        });
        Ok(procs)
    }

    /// A process's start time (`/proc/PID/stat` field 22): with its pid, which process it is.
    fn start_of(&self, pid: u32) -> Option<u64> {
        self.fs
            .read_parsed(
                format!("/proc/{pid}/stat"),
                netsteer_host::process::parse_start_time,
            )
            .ok()
    }

    fn process(&self, pid: u32) -> Option<LaneProcess> {
        use netsteer_host::process::parse_status_allowed;
        let start = self.start_of(pid)?;
        Some(LaneProcess {
            pid,
            start,
            comm: self
                .fs
                .read_value(format!("/proc/{pid}/comm"))
                .unwrap_or_default(),
            allowed: self
                .fs
                .read_parsed(format!("/proc/{pid}/status"), parse_status_allowed)
                .ok(),
        })
    }

    /// The processes of a unit's or cgroup's cgroup, by each process's own
    /// `/proc/PID/cgroup` (so it works where /sys/fs/cgroup is not mounted, as in `ip netns
    /// exec`, which mounts a fresh sysfs).
    fn group_pids(&self, service: &ServiceRef) -> Result<BTreeSet<u32>, LaneOpError> {
        let (flag, rel) = match service {
            ServiceRef::Port => return Ok(BTreeSet::new()),
            ServiceRef::Cgroup(c) => ("--cgroup", c.clone()),
            // A stopped unit has no cgroup: no process of it runs.
            ServiceRef::Unit(u) => match unit_cgroup(u)? {
                Some(c) => ("--unit", c),
                None => return Ok(BTreeSet::new()),
            },
        };
        let rel = rel.trim_matches('/').to_string();
        if rel.is_empty()
            || rel
                .split('/')
                .any(|c| c == ".." || c == "." || c.is_empty())
        {
            return Err(LaneOpError::Service(format!(
                "{flag} {rel:?}: a path below /sys/fs/cgroup, without '.', '..' or '//'"
            )));
        }
        let scan = self.fs.unrecorded();
        let pids: Vec<u32> = scan
            .read_dir("/proc")
            .map_err(|e| LaneOpError::Service(format!("/proc: {e}")))?
            .iter()
            .filter_map(|e| e.parse().ok())
            .collect();
        Ok(pids
            .into_iter()
            .filter(|pid| {
                scan.read(format!("/proc/{pid}/cgroup"))
                    .is_ok_and(|text| in_cgroup(&text, &rel))
            })
            .collect())
    }

    /// The plan of `spec` for its service as it runs now.
    pub fn plan(&self, spec: &LaneSpec) -> Result<Plan, LaneOpError> {
        Ok(self.plan_for(spec)?.0)
    }

    /// [`Lanes::plan`], with the owner it was planned for (to record at its apply).
    fn plan_for(&self, spec: &LaneSpec) -> Result<(Plan, Option<ServiceOwner>), LaneOpError> {
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
        let t = self.tuner(&spec.name)?;
        let plan = plan_lane(&t.view(), spec, &processes, &others, self.fs.is_live())?;
        Ok((plan, served.owner))
    }

    /// Records `spec` and applies its plan (all or nothing). An interrupted apply of the
    /// same lane is rolled back first; a lane already applied is rolled back and applied
    /// again (its settings or its service changed).
    pub fn apply(&self, spec: &LaneSpec, opts: &ApplyOptions) -> Result<ApplyReport, LaneOpError> {
        // Refused requests change nothing: planned once before anything is rolled back.
        let (mut plan, mut owner) = self.plan_for(spec)?;
        let dir = self.lane_dir(&spec.name)?;
        let t = self.tuner(&spec.name)?;
        let (state, newest) = self.state_at(&spec.name)?;
        if state != LaneState::Down {
            t.rollback(newest.as_deref())?;
            // Planned again from the host as the rollback left it: what read as already set
            // under the old lane is to be written again.
            (plan, owner) = self.plan_for(spec)?;
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
        if let Ok((all, parsed)) = journals_by_name(&dir) {
            self.work.journals(parsed + 2 * all.len());
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

    /// Rolls the lane back (its service stopped), then repairs the other lanes of its device.
    fn roll_back(
        &self,
        name: &str,
    ) -> Result<(RollbackReport, Vec<(String, ApplyReport)>), LaneOpError> {
        let dev = self.spec(name)?.dev;
        let (_, newest) = self.state_at(name)?;
        let r = self.tuner(name)?.rollback(newest.as_deref())?;
        self.compact(name);
        Ok((r, self.repair_others(name, &dev)?))
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
            let broken = drift.iter().any(|d| !d.id.starts_with("process/"));
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
        let state = if journal::rolled_back(&records) {
            LaneState::Down
        } else if records
            .iter()
            .any(|r| matches!(r, Record::End { status, .. } if status == "applied"))
        {
            LaneState::Applied
        } else {
            LaneState::Interrupted
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
        let plan = match self.tuner(name)?.applied_plan() {
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

    /// One step of holding: brings the lane in line with its service (see [`HoldEvent`]).
    pub fn reconcile(&self, name: &str, opts: &ApplyOptions) -> Result<HoldEvent, LaneOpError> {
        self.reconcile_seen(name, opts, &mut None)
    }

    /// [`Lanes::reconcile`] with what the holder saw last ([`Lanes::service_seen`]).
    pub fn reconcile_seen(
        &self,
        name: &str,
        opts: &ApplyOptions,
        seen: &mut Option<SeenService>,
    ) -> Result<HoldEvent, LaneOpError> {
        let spec = self.spec(name)?;
        let (state, newest) = self.state_at(name)?;
        if state == LaneState::Interrupted {
            let r = self.tuner(name)?.rollback(newest.as_deref())?;
            self.compact(name);
            return Ok(HoldEvent::Recovered(r));
        }
        if state == LaneState::Applied
            && spec.service == ServiceRef::Port
            && self.owner_for(&spec)?.is_none()
        {
            self.owner_from_pinned(&spec, state)?;
        }
        let running = self.service_seen(&spec, seen)?;
        let now: BTreeSet<(u32, u64)> = running.iter().map(|p| (p.pid, p.start)).collect();
        match (state, running.is_empty()) {
            (LaneState::Applied, true) => {
                let (r, repaired) = self.roll_back(name)?;
                Ok(HoldEvent::RolledBack(r, repaired))
            }
            (LaneState::Applied, false) => {
                if self.pinned_in(name, state)? == now {
                    Ok(HoldEvent::Holding)
                } else {
                    // The service restarted between two looks (or gained a process): the
                    // lane goes with its processes as they are now.
                    let r = self.apply(&spec, opts)?;
                    Ok(HoldEvent::Reapplied(r))
                }
            }
            (_, true) => Ok(HoldEvent::Waiting),
            (_, false) => Ok(HoldEvent::Applied(self.apply(&spec, opts)?)),
        }
    }

    /// Holds the lane until `stop` is set: [`Lanes::reconcile`] every `interval`, each event
    /// passed to `on_event`. An error of one step (a plan refused now, a write failed) is
    /// reported and the loop goes on; it never rolls back on its own exit unless
    /// `rollback_on_exit`.
    pub fn hold(
        &self,
        name: &str,
        interval: Duration,
        rollback_on_exit: bool,
        opts: &ApplyOptions,
        stop: &dyn Fn() -> bool,
        on_event: &mut dyn FnMut(Result<&HoldEvent, &LaneOpError>),
    ) -> Result<(), LaneOpError> {
        self.spec(name)?;
        let _lock = self.lock(name)?;
        let mut last_err: Option<String> = None;
        let mut seen = None;
        while !stop() {
            match self.reconcile_seen(name, opts, &mut seen) {
                Ok(HoldEvent::Holding | HoldEvent::Waiting) => last_err = None,
                Ok(ev) => {
                    last_err = None;
                    on_event(Ok(&ev));
                }
                Err(e) => {
                    // The same refusal every interval is said once.
                    let text = e.to_string();
                    if last_err.as_deref() != Some(text.as_str()) {
                        on_event(Err(&e));
                        last_err = Some(text);
                    }
                }
            }
            sleep_unless(stop, interval);
        }
        if rollback_on_exit && self.state(name)? != LaneState::Down {
            let (r, repaired) = self.roll_back(name)?;
            on_event(Ok(&HoldEvent::RolledBack(r, repaired)));
        }
        Ok(())
    }
}

fn service_err(spec: &LaneSpec, e: netsteer_host::HostError) -> LaneOpError {
    LaneOpError::Service(format!("--{} {}: {e}", spec.proto, spec.port))
}

/// Looks at the service between two full /proc scans (0.2 s each by default: 2 s).
pub const FULL_SCAN_EVERY: u32 = 10;

/// What the holder saw of the service at its last full scan.
#[derive(Debug, Clone)]
pub struct SeenService {
    inodes: BTreeSet<u64>,
    procs: Vec<LaneProcess>,
    looks: u32,
}

/// The owner the port's sockets make now, for a lane of "whoever holds the port" that has
/// none recorded: their one uid and their addresses. Sockets of several uids are refused: a
/// lane serves one service, and which of them it is cannot be told from the port.
fn owner_of(spec: &LaneSpec, rows: &[SocketRow]) -> Result<Option<ServiceOwner>, LaneOpError> {
    let uids: BTreeSet<u32> = rows.iter().map(|r| r.uid).collect();
    match uids.len() {
        0 => Ok(None),
        1 => Ok(Some(ServiceOwner {
            proto: spec.proto,
            port: spec.port,
            uid: rows[0].uid,
            addrs: rows.iter().map(|r| r.local).collect(),
        })),
        _ => {
            let held: BTreeSet<String> = rows
                .iter()
                .map(|r| format!("uid {} on {}", r.uid, r.local))
                .collect();
            Err(LaneOpError::Service(format!(
                "--{} {}: sockets of {} users hold the port ({}): a lane serves one service; name it with --unit or --cgroup, or stop the others",
                spec.proto,
                spec.port,
                uids.len(),
                held.into_iter().collect::<Vec<_>>().join(", ")
            )))
        }
    }
}

fn addr_list(addrs: &BTreeSet<IpAddr>) -> String {
    addrs
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The journals of a state directory in their order, by name alone (`<seq>.jsonl`, the
/// sequence number tune's journal gives each, [`journal::Journal::create`]) with the number
/// of journals parsed to get it: none, unless a journal of the older `<seconds>-<pid>.jsonl`
/// naming is there, when tune's own order ([`journal::list`], which parses each) is used.
fn journals_by_name(state_dir: &Path) -> io::Result<(Vec<PathBuf>, usize)> {
    let dir = state_dir.join("journal");
    let rd = match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
        // A link where the directory should be: tune's reader says why.
        Ok(m) if !m.is_dir() => return journal::list(state_dir).map(|l| (l, 0)),
        Ok(_) => {
            // What tune's list checks before trusting the journals it finds: a directory
            // nobody else could have written into (each journal's own owner and mode are
            // checked as it is read).
            journal::check_state_dir(&dir)?;
            std::fs::read_dir(&dir)?
        }
    };
    let mut named = Vec::new();
    for e in rd {
        let e = e?;
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
            continue;
        };
        match stem.parse::<u64>() {
            Ok(seq) if stem.bytes().all(|b| b.is_ascii_digit()) => named.push((seq, e.path())),
            _ => {
                let all = journal::list(state_dir)?;
                let n = all.len();
                return Ok((all, n));
            }
        }
    }
    named.sort();
    Ok((named.into_iter().map(|(_, p)| p).collect(), 0))
}

/// The newest journal of a state directory (by its name: [`journals_by_name`]), and the
/// number of journals parsed to find it.
pub fn newest_journal(state_dir: &Path) -> io::Result<(Option<PathBuf>, usize)> {
    let (mut all, parsed) = journals_by_name(state_dir)?;
    Ok((all.pop(), parsed))
}

/// What one step of holding did.
#[derive(Debug)]
pub enum HoldEvent {
    /// The service runs and the lane is in place for its processes.
    Holding,
    /// The service does not run and the lane is down.
    Waiting,
    /// The service came (back): the lane was applied.
    Applied(ApplyReport),
    /// The service's processes changed: rolled back and applied for the new ones.
    Reapplied(ApplyReport),
    /// The service stopped: the lane was rolled back (and these other lanes of its device,
    /// which the rollback undid part of, applied again).
    RolledBack(RollbackReport, Vec<(String, ApplyReport)>),
    /// An apply cut short was rolled back.
    Recovered(RollbackReport),
}

fn sleep_unless(stop: &dyn Fn() -> bool, d: Duration) {
    let step = Duration::from_millis(20);
    let mut left = d;
    while !left.is_zero() && !stop() {
        let s = left.min(step);
        std::thread::sleep(s);
        left -= s;
    }
}

/// Whether a `/proc/PID/cgroup` text puts the process in `rel`, a path below /sys/fs/cgroup:
/// on cgroup v2 the unified path (`0::/rel`); on v1 either a hierarchy's path (`rel` whole) or
/// a hierarchy named by its first component (`cpu,cpuacct/grp` → the line whose controllers
/// are `cpu,cpuacct`, or one of them, with the path `/grp`).
pub fn in_cgroup(text: &str, rel: &str) -> bool {
    let whole = format!("/{rel}");
    let split = rel.split_once('/');
    text.lines().any(|line| {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            return false;
        };
        if path == whole {
            return true;
        }
        split.is_some_and(|(c, rest)| {
            path.strip_prefix('/') == Some(rest)
                && (controllers == c
                    || controllers
                        .split(',')
                        .any(|x| x == c || x.strip_prefix("name=") == Some(c)))
        })
    })
}

/// The cgroup of a systemd unit (`systemctl show -p LoadState -p ControlGroup`); None while
/// the unit is stopped: systemd empties `ControlGroup` when a unit goes inactive (a failed
/// unit may keep it until reset, and its cgroup is then empty). A unit systemd does not know
/// is an error naming it, not a service that never starts.
fn unit_cgroup(unit: &str) -> Result<Option<String>, LaneOpError> {
    let ok = !unit.is_empty()
        && unit.len() <= 256
        && !unit.starts_with('-')
        && unit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@:\\".contains(c));
    if !ok {
        return Err(LaneOpError::Service(format!(
            "--unit {unit:?}: not a unit name"
        )));
    }
    let out = std::process::Command::new("systemctl")
        .args(["show", "-p", "LoadState", "-p", "ControlGroup", unit])
        .output()
        .map_err(|e| LaneOpError::Service(format!("--unit {unit}: systemctl: {e}")))?;
    if !out.status.success() {
        return Err(LaneOpError::Service(format!(
            "--unit {unit}: systemctl show: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    parse_unit_show(unit, &String::from_utf8_lossy(&out.stdout))
}

/// `systemctl show -p LoadState -p ControlGroup`'s `KEY=VALUE` lines.
fn parse_unit_show(unit: &str, text: &str) -> Result<Option<String>, LaneOpError> {
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::trim)
    };
    match get("LoadState") {
        Some("loaded") => {}
        state => {
            return Err(LaneOpError::Service(format!(
                "--unit {unit}: not a unit systemd has loaded (LoadState={})",
                state.unwrap_or("absent")
            )));
        }
    }
    Ok(get("ControlGroup")
        .filter(|c| !c.is_empty())
        .map(str::to_string))
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

#[cfg(test)]
mod tests {
    use super::in_cgroup;

    #[test]
    fn a_units_cgroup_from_systemctl_show() {
        use super::parse_unit_show;
        let running = "LoadState=loaded\nControlGroup=/system.slice/echo.service\n";
        assert_eq!(
            parse_unit_show("echo.service", running).unwrap().as_deref(),
            Some("/system.slice/echo.service")
        );
        // Stopped: systemd shows the property empty.
        let stopped = "LoadState=loaded\nControlGroup=\n";
        assert_eq!(parse_unit_show("echo.service", stopped).unwrap(), None);
        let unknown = "LoadState=not-found\nControlGroup=\n";
        let e = parse_unit_show("nosuch.service", unknown).unwrap_err();
        assert!(
            e.to_string().contains(
                "--unit nosuch.service: not a unit systemd has loaded (LoadState=not-found)"
            ),
            "{e}"
        );
    }

    #[test]
    fn cgroup_membership_on_v1_and_v2() {
        let v2 = "0::/system.slice/echo.service\n";
        assert!(in_cgroup(v2, "system.slice/echo.service"));
        assert!(!in_cgroup(v2, "system.slice/other.service"));
        assert!(!in_cgroup(v2, "system.slice"));
        let v1 = "12:blkio:/grp\n11:cpu,cpuacct:/grp2\n1:name=systemd:/system.slice/echo.service\n";
        assert!(in_cgroup(v1, "blkio/grp"));
        assert!(in_cgroup(v1, "cpu,cpuacct/grp2"));
        assert!(in_cgroup(v1, "cpu/grp2"));
        assert!(in_cgroup(v1, "system.slice/echo.service"));
        assert!(in_cgroup(v1, "systemd/system.slice/echo.service"));
        assert!(!in_cgroup(v1, "blkio/grp2"));
        assert!(!in_cgroup(v1, "memory/grp"));
    }
}
