//! A lane's life with its service: a [`Lane`] is one lane opened once by its holder,
//! [`Lane::reconcile`] one look (applied while the service runs, rolled back when it stops,
//! applied again for new processes, an apply cut short rolled back), [`Lanes::hold`] the loop
//! of looks a holder runs under the lane's lock. The store
//! (specs, journals, owners) is in `lane/mod.rs`, finding the service in `lane/service.rs`.

use super::{LaneOpError, LaneSpec, LaneState, Lanes, SPEC_FILE, SeenService, ServiceRef};
use crate::tune::apply::ApplyOptions;
use crate::tune::verify::Drift;
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
    /// How this holder sees changes made behind its back (said once, when it starts).
    Watching(Watching),
    /// Something other than this lane changed what the lane set: the items that differ now
    /// (tune's verify), how the holder saw it, and the apply that put them back where the
    /// policy is [`Foreign::Reassert`].
    Foreign {
        seen: Seen,
        drift: Vec<Drift>,
        reasserted: Option<ApplyReport>,
        /// Why it was not applied again under [`Foreign::Reassert`]: backing off (another
        /// writer keeps changing it back), or the apply failed.
        not_reasserted: Option<String>,
    },
}

/// How a holder holds ([`Lanes::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    /// Between two looks at the service.
    pub interval: Duration,
    /// Between two read-backs of what the lane set, besides those a kernel notification
    /// asks for (a read-back reads the host view and the device's ethtool settings).
    pub verify_every: Duration,
    /// Roll the lane back when the holder stops.
    pub rollback_on_exit: bool,
    pub foreign: Foreign,
}

/// What the holder does about a change made behind its back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Foreign {
    /// Say it (once per set of drifted items) and leave it: the other writer may be a
    /// person or a tool that means it, and two writers that each undo the other fight.
    #[default]
    Report,
    /// Say it and apply the lane again.
    Reassert,
}

/// How the holder sees foreign changes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "by")]
pub enum Watching {
    /// The ethtool netlink monitor group: the kernel announces a change as it is made.
    /// `rss`: whether this kernel announces RSS table changes (6.17+); what it does not
    /// announce (IRQ affinity, n-tuple rules, NAPI settings, RSS before 6.17) is still looked
    /// for every interval.
    Notifications { rss: bool },
    /// Only by looking every interval; why no notifications.
    Polling { why: String },
}

/// How one foreign change was seen.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "by")]
pub enum Seen {
    /// A kernel notification for the lane's device woke the holder: what it announced, and
    /// when it was read (milliseconds since the Unix epoch). The kernel does not say who.
    Notification { change: String, at_unix_ms: u64 },
    /// A read-back at its interval found it (the time of the read-back).
    Polling { at_unix_ms: u64 },
}

/// The holder's eyes: the monitor socket when the kernel has one, else only its clock.
struct Eyes {
    monitor: Option<netsteer_nic::Monitor>,
    /// When dropped notifications last made a read-back due: at most one a second (a busy
    /// host's notifications for other devices can overrun the socket while a read-back runs).
    overrun_at: Option<std::time::Instant>,
}

/// Whether a notification is about what a lane of `dev` sets: the main RSS context's table,
/// key and flow hashes (a lane steers by the main table), or the channels.
fn concerns(n: &netsteer_nic::Notice, dev: &str) -> bool {
    n.dev.as_deref() == Some(dev)
        && match n.change {
            netsteer_nic::Change::Rss => n.context.unwrap_or(0) == 0,
            netsteer_nic::Change::Channels => true,
            _ => false,
        }
}

/// Whether a drifted item is of the kind a notification named.
fn announced(change: &str, id: &str) -> bool {
    use crate::model::knob::ItemId;
    use netsteer_host::ethtool::NicKnob;
    let Some(ItemId::Nic { knob, .. }) = ItemId::parse(id) else {
        return false;
    };
    if change == netsteer_nic::Change::Rss.word() {
        matches!(knob, NicKnob::RssIndirection | NicKnob::FlowHash(_))
    } else if change == netsteer_nic::Change::Channels.word() {
        matches!(knob, NicKnob::Channels(_))
    } else {
        false
    }
}

/// The first of `notices` about what a lane of `dev` sets, as seen now.
fn noticed(notices: &[netsteer_nic::Notice], dev: &str) -> Option<Seen> {
    notices
        .iter()
        .find(|n| concerns(n, dev))
        .map(|n| Seen::Notification {
            change: n.change.word(),
            at_unix_ms: unix_ms(),
        })
}

impl Eyes {
    fn open(live: bool) -> (Eyes, Watching) {
        let (monitor, watching) = if !live {
            let why = "not a live host (a tree, or --no-nic)".to_string();
            (None, Watching::Polling { why })
        } else {
            match netsteer_nic::Monitor::open() {
                Ok(m) => {
                    let rss = m.announces_rss;
                    (Some(m), Watching::Notifications { rss })
                }
                Err(e) => {
                    let why = format!("no ethtool notifications: {e}");
                    (None, Watching::Polling { why })
                }
            }
        };
        let eyes = Eyes {
            monitor,
            overrun_at: None,
        };
        (eyes, watching)
    }

    /// Waits out `interval` (in steps that let `stop` end it), or less when the kernel
    /// announces a change of `dev` that the lane's items may be part of: what was seen.
    fn wait(&mut self, dev: &str, interval: Duration, stop: &dyn Fn() -> bool) -> Seen {
        let Some(m) = self.monitor.as_mut() else {
            sleep_unless(stop, interval);
            return Seen::Polling { at_unix_ms: 0 };
        };
        let end = std::time::Instant::now() + interval;
        let step = Duration::from_millis(100);
        while !stop() {
            let now = std::time::Instant::now();
            if now >= end {
                break;
            }
            match m.wait((end - now).min(step)) {
                Ok((notices, overrun)) => {
                    if let Some(seen) = noticed(&notices, dev) {
                        return seen;
                    }
                    let quiet = self
                        .overrun_at
                        .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
                    if overrun && quiet {
                        // Notifications were dropped: one of them may have been ours, so
                        // the read-back is due now.
                        self.overrun_at = Some(std::time::Instant::now());
                        return Seen::Notification {
                            change: "dropped notifications (overrun)".into(),
                            at_unix_ms: unix_ms(),
                        };
                    }
                }
                Err(_) => {
                    // A broken socket: the interval's look stays.
                    self.monitor = None;
                    sleep_unless(
                        stop,
                        end.saturating_duration_since(std::time::Instant::now()),
                    );
                    break;
                }
            }
        }
        Seen::Polling { at_unix_ms: 0 }
    }

    /// A notification about `dev` already waiting in the socket (read without waiting): one
    /// that came while a read-back ran.
    fn pending(&mut self, dev: &str) -> Option<Seen> {
        let m = self.monitor.as_mut()?;
        let (notices, _) = m.wait(Duration::ZERO).ok()?;
        noticed(&notices, dev)
    }
}

/// How often the holder applies a lane again that another writer keeps changing: once per
/// read-back at first, then at twice the wait each time the same items drift again (up to
/// 64 read-backs), so two writers that each undo the other do not spin.
#[derive(Debug, Default)]
struct Backoff {
    next: Option<std::time::Instant>,
    times: u32,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
        how: &Holding,
        opts: &ApplyOptions,
        stop: &dyn Fn() -> bool,
        on_event: &mut dyn FnMut(Result<&HoldEvent, &LaneOpError>),
    ) -> Result<(), LaneOpError> {
        let (interval, rollback_on_exit) = (how.interval, how.rollback_on_exit);
        let mut lane = self.lane(name)?;
        let _lock = self.lock(name)?;
        let (mut eyes, watching) = Eyes::open(self.use_nic && self.fs.is_live());
        on_event(Ok(&HoldEvent::Watching(watching)));
        let mut last_err: Option<String> = None;
        // The drifted items last said, so the same drift is said once.
        let mut said: Vec<String> = Vec::new();
        let mut seen = Seen::Polling { at_unix_ms: 0 };
        let mut looked: Option<std::time::Instant> = None;
        let mut backoff = Backoff::default();
        while !stop() {
            // What the lane set is read back (a whole host view and the device's settings)
            // when the kernel announced a change, else every `verify_every`.
            let due = matches!(seen, Seen::Notification { .. })
                || looked.is_none_or(|t| t.elapsed() >= how.verify_every);
            let step = lane.reconcile(opts).and_then(|ev| match ev {
                HoldEvent::Holding if due => {
                    looked = Some(std::time::Instant::now());
                    if let Seen::Polling { at_unix_ms } = &mut seen {
                        *at_unix_ms = unix_ms();
                    }
                    let mut ev = lane.foreign(&seen, how, &mut said, &mut backoff, opts)?;
                    if let HoldEvent::Foreign { seen: s, drift, .. } = &mut ev {
                        // A notification that came while the read-back ran is how it was
                        // seen; one of a kind no drifted item is, was not.
                        if let (Seen::Polling { .. }, Some(n)) = (&*s, eyes.pending(&lane.spec.dev))
                        {
                            *s = n;
                        }
                        if let Seen::Notification { change, .. } = &*s
                            && !drift.iter().any(|d| announced(change, &d.id))
                        {
                            *s = Seen::Polling {
                                at_unix_ms: unix_ms(),
                            };
                        }
                    }
                    Ok(ev)
                }
                HoldEvent::Holding => Ok(HoldEvent::Holding),
                ev => {
                    said.clear();
                    Ok(ev)
                }
            });
            match step {
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
            seen = eyes.wait(&lane.spec.dev, interval, stop);
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

    /// Looks at what the lane set (tune's verify of its applied plan): a drift not said yet is
    /// a [`HoldEvent::Foreign`], its items applied again under [`Foreign::Reassert`]; none is
    /// [`HoldEvent::Holding`].
    fn foreign(
        &mut self,
        seen: &Seen,
        how: &Holding,
        said: &mut Vec<String>,
        backoff: &mut Backoff,
        opts: &ApplyOptions,
    ) -> Result<HoldEvent, LaneOpError> {
        let drift = self.tuner()?.verify_own_devices()?.drift;
        let ids: Vec<String> = drift.iter().map(|d| d.id.clone()).collect();
        if drift.is_empty() {
            said.clear();
            *backoff = Backoff::default();
            return Ok(HoldEvent::Holding);
        }
        let now = std::time::Instant::now();
        let may = how.foreign == Foreign::Reassert && backoff.next.is_none_or(|t| now >= t);
        if !may && *said == ids {
            return Ok(HoldEvent::Holding);
        }
        let (mut reasserted, mut not_reasserted) = (None, None);
        if how.foreign == Foreign::Report {
            // Left to the other writer, for good: the lane's rollback (the service stopping,
            // `lane remove`) restores everything else and leaves these as they are now.
            if let (_, Some(journal)) = self.lanes.state_at(&self.name)? {
                for d in &drift {
                    crate::tune::journal::give_up(
                        &journal,
                        &d.id,
                        d.found.as_deref().unwrap_or(""),
                        "changed behind the lane's back; lane hold --on-foreign report leaves it",
                    )
                    .map_err(super::state_err(&journal))?;
                }
            }
        } else if may {
            // The wait doubles each time the same items drift again.
            let again = *said == ids;
            backoff.times = if again { (backoff.times + 1).min(6) } else { 0 };
            backoff.next = Some(now + how.verify_every * (1u32 << backoff.times));
            match self.apply(opts) {
                Ok(r) => reasserted = Some(r),
                Err(e) => not_reasserted = Some(format!("the apply failed: {e}")),
            }
        } else {
            not_reasserted = Some(format!(
                "backing off: the same items were changed back after the last apply; next try in {:.0} s",
                backoff
                    .next
                    .map_or(0.0, |t| t.saturating_duration_since(now).as_secs_f64())
            ));
        }
        *said = ids;
        Ok(HoldEvent::Foreign {
            seen: seen.clone(),
            drift,
            reasserted,
            not_reasserted,
        })
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
