//! A lane's life with its service: [`Lanes::reconcile`] is one look (applied while the service
//! runs, rolled back when it stops, applied again for new processes, an apply cut short rolled
//! back), [`Lanes::hold`] the loop of looks a holder runs under the lane's lock. The store
//! (specs, journals, owners) is in `lane/mod.rs`, finding the service in `lane/service.rs`.

use super::{LaneOpError, LaneState, Lanes, SeenService, ServiceRef};
use crate::tune::apply::ApplyOptions;
use crate::tune::{ApplyReport, RollbackReport};
use std::collections::BTreeSet;
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

impl Lanes {
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

fn sleep_unless(stop: &dyn Fn() -> bool, d: Duration) {
    let step = Duration::from_millis(20);
    let mut left = d;
    while !left.is_zero() && !stop() {
        let s = left.min(step);
        std::thread::sleep(s);
        left -= s;
    }
}
