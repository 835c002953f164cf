//! A lane's life with its service: a [`Lane`] is one lane opened once by its holder,
//! [`Lane::reconcile`] one look (applied while the service runs, rolled back when it stops,
//! applied again for new processes, an apply cut short rolled back), [`Lanes::hold`] the loop
//! of looks a holder runs under the lane's lock. The store
//! (specs, journals, owners) is in `lane/mod.rs`, finding the service in `lane/service.rs`.

use super::{LaneOpError, LaneSpec, LaneState, Lanes, SPEC_FILE, SeenService, ServiceRef};
use crate::tune::apply::ApplyOptions;
use crate::tune::{ApplyReport, RollbackReport, Tuner};
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

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

/// One lane as its holder keeps it, opened once ([`Lanes::lane`]): the name checked once, the
/// spec re-read only when its file changed (a `lane apply` elsewhere rewrote it), what the
/// holder saw of the service last ([`SeenService`]), and the lane's tuner, opened at the first
/// write and kept (a [`Tuner`] opens two netlink sockets on a live host; a look that changes
/// nothing opens none).
pub struct Lane<'a> {
    lanes: &'a Lanes,
    name: String,
    spec: LaneSpec,
    stamp: Option<Stamp>,
    seen: Option<SeenService>,
    tuner: Option<Tuner>,
}

/// What says a lane's spec file is the one read last: `journal::write_atomic` renames a new
/// file into place, so a rewrite is a new inode (and a change in place, a new size or mtime).
/// An inode number is reused once its file is gone, and mtime can be set back (utimensat);
/// ctime cannot be set by anyone and moves with every write and every rename (the new
/// file's own, taken at its creation): with it, a new file on a reused inode of the same
/// size and mtime is still told apart, to the clock's resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

impl Lanes {
    /// The lane recorded as `name`, opened for holding: see [`Lane`].
    pub fn lane(&self, name: &str) -> Result<Lane<'_>, LaneOpError> {
        let path = self.lane_dir(name)?.join(SPEC_FILE);
        // Stamped before it is read: a rewrite between the two is read again at the next look.
        let stamp = Stamp::of(&path);
        Ok(Lane {
            lanes: self,
            name: name.to_string(),
            spec: self.spec(name)?,
            stamp,
            seen: None,
            tuner: None,
        })
    }

    /// One look at the lane `name` (a [`Lane`] opened for it alone): see [`Lane::reconcile`].
    pub fn reconcile(&self, name: &str, opts: &ApplyOptions) -> Result<HoldEvent, LaneOpError> {
        self.lane(name)?.reconcile(opts)
    }

    /// Holds the lane until `stop` is set: [`Lane::reconcile`] every `interval`, each event
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
        let mut lane = self.lane(name)?;
        let _lock = self.lock(name)?;
        let mut last_err: Option<String> = None;
        while !stop() {
            match lane.reconcile(opts) {
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
            // The spec as it is now (its device may have changed since the last look; a lane
            // removed meanwhile is NoLane, not rolled back from a stale record).
            lane.refresh()?;
            let (r, repaired) = lane.roll_back()?;
            on_event(Ok(&HoldEvent::RolledBack(r, repaired)));
        }
        Ok(())
    }
}

impl Lane<'_> {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The spec as last read.
    pub fn spec(&self) -> &LaneSpec {
        &self.spec
    }

    /// Reads the spec again if its file changed since it was read (removed: the lane is gone,
    /// [`LaneOpError::NoLane`]).
    fn refresh(&mut self) -> Result<(), LaneOpError> {
        let path = self.lanes.lane_dir(&self.name)?.join(SPEC_FILE);
        let stamp = Stamp::of(&path);
        if stamp.is_none() || stamp != self.stamp {
            self.spec = self.lanes.spec(&self.name)?;
            self.stamp = stamp;
        }
        Ok(())
    }

    /// The lane's tuner, opened at its first use.
    fn tuner(&mut self) -> Result<&Tuner, LaneOpError> {
        if self.tuner.is_none() {
            self.tuner = Some(self.lanes.tuner(&self.name)?);
        }
        Ok(self.tuner.as_ref().expect("opened above"))
    }

    fn apply(&mut self, opts: &ApplyOptions) -> Result<ApplyReport, LaneOpError> {
        let spec = self.spec.clone();
        let lanes = self.lanes;
        let r = lanes.apply_with(&spec, opts, self.tuner()?);
        self.drop_tuner_on_error(&r);
        r
    }

    fn roll_back(&mut self) -> Result<(RollbackReport, Vec<(String, ApplyReport)>), LaneOpError> {
        let (name, dev) = (self.name.clone(), self.spec.dev.clone());
        let lanes = self.lanes;
        let r = lanes.roll_back_with(&name, &dev, self.tuner()?);
        self.drop_tuner_on_error(&r);
        r
    }

    /// A failed write is retried with a tuner opened anew: the kept one may have been opened
    /// while ethtool netlink could not be (EMFILE, ENOBUFS), and would plan without the NIC
    /// for the holder's whole life.
    fn drop_tuner_on_error<T>(&mut self, r: &Result<T, LaneOpError>) {
        if r.is_err() {
            self.tuner = None;
        }
    }

    /// One step of holding: brings the lane in line with its service (see [`HoldEvent`]).
    pub fn reconcile(&mut self, opts: &ApplyOptions) -> Result<HoldEvent, LaneOpError> {
        self.refresh()?;
        let lanes = self.lanes;
        let (state, newest) = lanes.state_at(&self.name)?;
        if state == LaneState::Interrupted {
            let r = self.tuner()?.rollback(newest.as_deref())?;
            lanes.compact(&self.name);
            return Ok(HoldEvent::Recovered(r));
        }
        if state == LaneState::Applied
            && self.spec.service == ServiceRef::Port
            && lanes.owner_for(&self.spec)?.is_none()
        {
            lanes.owner_from_pinned(&self.spec, state)?;
        }
        let running = lanes.service_seen(&self.spec, &mut self.seen)?;
        let now: BTreeSet<(u32, u64)> = running.iter().map(|p| (p.pid, p.start)).collect();
        match (state, running.is_empty()) {
            (LaneState::Applied, true) => {
                let (r, repaired) = self.roll_back()?;
                Ok(HoldEvent::RolledBack(r, repaired))
            }
            (LaneState::Applied, false) => {
                if lanes.pinned_in(&self.name, state)? == now {
                    Ok(HoldEvent::Holding)
                } else {
                    // The service restarted between two looks (or gained a process): the
                    // lane goes with its processes as they are now.
                    Ok(HoldEvent::Reapplied(self.apply(opts)?))
                }
            }
            (_, true) => Ok(HoldEvent::Waiting),
            (_, false) => Ok(HoldEvent::Applied(self.apply(opts)?)),
        }
    }
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
