//! Finding a lane's service: for a lane of "whoever holds the port", the owner recorded at
//! its apply ([`ServiceOwner`], `owner.json`) and the sockets of that owner only; for a unit
//! or a cgroup, the group's processes. The holders of the sockets are searched among their
//! candidates only (the owner's uid's processes, the unit's), so what other users hold costs
//! the holder nothing. What a process and a cgroup's members are is the host's
//! ([`netsteer_host::service`]); what is the lane's service, and whose, is decided here.

use super::{LaneOpError, LaneSpec, Lanes, OWNER_FILE, ServiceRef, state_err};
use crate::model::planner::lane::LaneProcess;
use crate::tune::journal;
use netsteer_host::service;
use netsteer_host::sockets::{self, Proto, SocketRow};
use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;

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

/// The sockets serving a lane now.
pub(super) struct Served {
    /// Its sockets: for a port's service, its owner's; for a unit or cgroup, every socket on
    /// the port (the group's processes tell).
    pub(super) inodes: BTreeSet<u64>,
    /// A port's service's owner: the one recorded, or the one found now (a first apply).
    pub(super) owner: Option<ServiceOwner>,
    /// The sockets on the port that are not the owner's.
    pub(super) others: Vec<SocketRow>,
}

impl Lanes {
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
    pub(super) fn owner_for(&self, spec: &LaneSpec) -> Result<Option<ServiceOwner>, LaneOpError> {
        if spec.service != ServiceRef::Port {
            return Ok(None);
        }
        Ok(self.owner(&spec.name)?.filter(|o| o.serves(spec)))
    }

    /// The sockets serving `spec` now, for the `recorded` owner (or, with none, the owner the
    /// port's sockets make now: one uid, or the lane is refused).
    pub(super) fn served(
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
    pub(super) fn holders(
        &self,
        spec: &LaneSpec,
        served: &Served,
    ) -> Result<Vec<LaneProcess>, LaneOpError> {
        // Each pid found, with what made it the service's, to ask again once its start time
        // is read: a pid can be reused between the scan and that read, and root must not
        // take the newcomer for the service. Member after its start time was read, and the
        // same start time after that: the process that was a member is the one recorded.
        let (pids, member): (Vec<u32>, Box<dyn Fn(u32) -> bool + '_>) =
            match (&spec.service, &served.owner) {
                (ServiceRef::Port, _) if served.inodes.is_empty() => {
                    (Vec::new(), Box::new(|_| false))
                }
                (ServiceRef::Port, Some(owner)) => {
                    let scan = sockets::socket_owners_of_uid(&self.fs, &served.inodes, owner.uid)
                        .map_err(|e| service_err(spec, e))?;
                    self.work.scan(&scan);
                    let inodes = &served.inodes;
                    (
                        scan.pids,
                        Box::new(move |pid| {
                            !sockets::socket_owners_among(&self.fs, inodes, [pid])
                                .pids
                                .is_empty()
                        }),
                    )
                }
                (ServiceRef::Port, None) => (Vec::new(), Box::new(|_| false)),
                (ServiceRef::Unit(_) | ServiceRef::Cgroup(_), _) => {
                    // The group first, nobody on the port or not: a unit systemd does not
                    // know is refused whether or not the port is held.
                    let (rel, group) = self.group_pids(&spec.service)?;
                    let scan = sockets::socket_owners_among(
                        &self.fs,
                        &served.inodes,
                        group.iter().copied(),
                    );
                    self.work.scan(&scan);
                    let pids = if scan.pids.is_empty() {
                        Vec::new()
                    } else {
                        group.into_iter().collect()
                    };
                    (
                        pids,
                        Box::new(move |pid| {
                            rel.as_deref()
                                .is_some_and(|rel| service::in_cgroup_now(&self.fs, pid, rel))
                        }),
                    )
                }
            };
        Ok(pids
            .into_iter()
            .filter_map(|pid| self.process(pid))
            .filter(|p| member(p.pid) && self.start_of(p.pid) == Some(p.start))
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

    /// A process's start time ([`service::start_time`]).
    pub(super) fn start_of(&self, pid: u32) -> Option<u64> {
        service::start_time(&self.fs, pid)
    }

    pub(super) fn process(&self, pid: u32) -> Option<LaneProcess> {
        service::service_process(&self.fs, pid)
    }

    /// The processes of a unit's or cgroup's cgroup, by each process's own
    /// `/proc/PID/cgroup` (so it works where /sys/fs/cgroup is not mounted, as in `ip netns
    /// exec`, which mounts a fresh sysfs).
    /// And the group's path (None: a stopped unit, which has no group).
    pub(super) fn group_pids(
        &self,
        service: &ServiceRef,
    ) -> Result<(Option<String>, BTreeSet<u32>), LaneOpError> {
        let (flag, rel) = match service {
            ServiceRef::Port => return Ok((None, BTreeSet::new())),
            ServiceRef::Cgroup(c) => ("--cgroup", c.clone()),
            // A stopped unit has no cgroup: no process of it runs.
            ServiceRef::Unit(u) => match unit_cgroup(u)? {
                Some(c) => ("--unit", c),
                None => return Ok((None, BTreeSet::new())),
            },
        };
        let Some(rel) = service::cgroup_rel(&rel) else {
            return Err(LaneOpError::Service(format!(
                "{flag} {rel:?}: a path below /sys/fs/cgroup, without '.', '..' or '//'"
            )));
        };
        let pids = service::cgroup_members(&self.fs, &rel)
            .map_err(|e| LaneOpError::Service(format!("{flag} {rel}: {e}")))?;
        Ok((Some(rel), pids))
    }
}

pub(super) fn service_err(spec: &LaneSpec, e: netsteer_host::HostError) -> LaneOpError {
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
pub(super) fn owner_of(
    spec: &LaneSpec,
    rows: &[SocketRow],
) -> Result<Option<ServiceOwner>, LaneOpError> {
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

pub(super) fn addr_list(addrs: &BTreeSet<IpAddr>) -> String {
    addrs
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cgroup of a systemd unit (`systemctl show -p LoadState -p ControlGroup`); None while
/// the unit is stopped: systemd empties `ControlGroup` when a unit goes inactive (a failed
/// unit may keep it until reset, and its cgroup is then empty). A unit systemd does not know
/// is an error naming it, not a service that never starts.
pub(super) fn unit_cgroup(unit: &str) -> Result<Option<String>, LaneOpError> {
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
pub(super) fn parse_unit_show(unit: &str, text: &str) -> Result<Option<String>, LaneOpError> {
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

#[cfg(test)]
mod tests {
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
}
