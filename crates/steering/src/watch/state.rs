//! What the watcher owns, kept in its journal directory so that a restart adopts it (a
//! SIGKILL leaves journals and this file; the next watcher keeps what still holds the value it
//! wrote and gives up the rest), and the standing advice the agent exports.

use super::{Advice, Reflex, same_value};
use crate::tune::{TuneError, Tuner};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The knobs the watcher set and still owns (JSON, in its journal directory).
pub const OWNED_FILE: &str = "owned.json";
/// The advice standing now (JSON, in its journal directory), for the agent.
pub const ADVICE_FILE: &str = "advice.json";

/// The largest state file read back (a few hundred knobs at most).
const MAX_STATE_BYTES: u64 = 1 << 20;

/// A knob someone else rewrote: its path, what the watcher wrote, what it found, and the
/// journal that wrote it.
#[derive(Debug, Clone)]
pub(super) struct Drift {
    pub path: String,
    pub ours: String,
    pub now: String,
    pub journal: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct OwnedKnob {
    value: String,
    journal: String,
    id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Owned {
    knobs: BTreeMap<String, OwnedKnob>,
    /// Knobs someone else rewrote: (what the watcher wrote, what was found), with the journal
    /// that set them. Never written again by this watcher.
    disowned: BTreeMap<String, (String, String, String)>,
    /// Journals in the order applied, with their advice id.
    journals: Vec<(String, String)>,
    /// When each standing advice first stood (Unix seconds).
    #[serde(default)]
    since: BTreeMap<String, f64>,
}

/// One standing advice as the agent exports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StandingAdvice {
    pub id: String,
    pub reflex: Reflex,
    /// Unix seconds when it first stood.
    pub since: f64,
    pub evidence: Vec<String>,
    pub changes: Vec<super::Change>,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> TuneError {
    TuneError::State {
        path: path.display().to_string(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Reads a watcher's advice file (a regular file of at most 1 MiB, never through a link).
/// No file: no advice.
pub fn read_advice(dir: &Path) -> std::io::Result<Vec<StandingAdvice>> {
    let path = dir.join(ADVICE_FILE);
    match netsteer_host::fs::read_regular_nofollow(&path, MAX_STATE_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        )),
    }
}

impl Owned {
    /// The previous watcher's record, and the knobs it set that now hold another value: the
    /// watcher gives those up ([`super::Watcher::give_up`]).
    pub(super) fn load(tuner: &Tuner) -> Result<(Owned, Vec<Drift>), TuneError> {
        let path = tuner.state_dir().join(OWNED_FILE);
        // Root's own file only (netsteer_host::trust): it names what the watcher may take
        // back and roll back.
        let mut owned: Owned = match netsteer_host::trust::read_owned_file(&path, MAX_STATE_BYTES) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| io_err(&path, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Owned::default(),
            Err(e) => return Err(io_err(&path, e)),
        };
        owned.since.clear();
        let drifted = owned.drifted(tuner);
        Ok((owned, drifted))
    }

    pub(super) fn save(&self, tuner: &Tuner) -> Result<(), TuneError> {
        let path = tuner.state_dir().join(OWNED_FILE);
        // Nothing owned and no file yet: advice mode leaves no state behind.
        let empty = self.knobs.is_empty() && self.disowned.is_empty() && self.journals.is_empty();
        if empty && !path.exists() {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| io_err(&path, e))?;
        crate::tune::journal::write_atomic(&path, &bytes).map_err(|e| io_err(&path, e))
    }

    /// Writes the standing advice for the agent (only when it changed).
    pub(super) fn save_advice<'a>(
        &mut self,
        tuner: &Tuner,
        standing: impl Iterator<Item = &'a Advice>,
    ) -> Result<(), TuneError> {
        let now = unix_now();
        let mut since = BTreeMap::new();
        let list: Vec<StandingAdvice> = standing
            .map(|a| {
                let s = *self.since.get(&a.id).unwrap_or(&now);
                since.insert(a.id.clone(), s);
                StandingAdvice {
                    id: a.id.clone(),
                    reflex: a.reflex,
                    since: s,
                    evidence: a.evidence.clone(),
                    changes: a.changes.clone(),
                }
            })
            .collect();
        let path = tuner.state_dir().join(ADVICE_FILE);
        if since == self.since && (path.exists() || list.is_empty()) {
            return Ok(());
        }
        self.since = since;
        let bytes = serde_json::to_vec_pretty(&list).map_err(|e| io_err(&path, e))?;
        crate::tune::journal::write_atomic(&path, &bytes).map_err(|e| io_err(&path, e))
    }

    pub(super) fn own(&mut self, path: &str, value: &str, journal: &str, id: &str) {
        self.knobs.insert(
            path.to_string(),
            OwnedKnob {
                value: value.to_string(),
                journal: journal.to_string(),
                id: id.to_string(),
            },
        );
        if !self.journals.iter().any(|(j, _)| j == journal) {
            self.journals.push((journal.to_string(), id.to_string()));
        }
    }

    /// Owned knobs whose value is no longer the one written, as (path, ours, now, the journal
    /// that wrote it): to be given up ([`Owned::disown`]). A knob that cannot be read is
    /// listed too (it is not ours to guess).
    pub(super) fn drifted(&self, tuner: &Tuner) -> Vec<Drift> {
        let mut out = Vec::new();
        for (path, ours) in &self.knobs {
            // A NIC setting a watcher without NIC access cannot read is not someone else's.
            if crate::model::knob::is_nic_path(path) && !tuner.reads_nic() {
                continue;
            }
            let now = tuner
                .read_knob(path)
                .unwrap_or_else(|e| format!("(unreadable: {e})"));
            if same_value(path, &ours.value, &now) {
                continue;
            }
            out.push(Drift {
                path: path.clone(),
                ours: ours.value.clone(),
                now,
                journal: ours.journal.clone(),
            });
        }
        out
    }

    /// A knob given up: no longer owned, never written by this watcher again (unless told to
    /// reclaim it). `journal` is the one that wrote `ours`.
    pub(super) fn disown(&mut self, d: &Drift) {
        self.knobs.remove(&d.path);
        self.disowned.insert(
            d.path.clone(),
            (d.ours.clone(), d.now.clone(), d.journal.clone()),
        );
    }

    /// The knobs given up, as (path, what the watcher wrote, the advice id that wrote it).
    pub(super) fn disowned(&self) -> Vec<(String, String, String)> {
        self.disowned
            .iter()
            .map(|(path, (ours, _, journal))| {
                let id = self
                    .journals
                    .iter()
                    .find(|(j, _)| j == journal)
                    .map_or_else(String::new, |(_, id)| id.clone());
                (path.clone(), ours.clone(), id)
            })
            .collect()
    }

    /// A given-up knob written back by `journal`: owned again.
    pub(super) fn reclaimed(&mut self, path: &str, value: &str, journal: &str, id: &str) {
        self.disowned.remove(path);
        self.own(path, value, journal, id);
    }

    pub(super) fn is_disowned(&self, path: &str) -> bool {
        self.disowned.contains_key(path)
    }

    /// A knob given up: what the watcher wrote and what it found.
    pub(super) fn disowned_as(&self, path: &str) -> Option<(&str, &str)> {
        self.disowned
            .get(path)
            .map(|(ours, now, _)| (ours.as_str(), now.as_str()))
    }

    pub(super) fn forget_journal(&mut self, journal: &str) {
        self.knobs.retain(|_, k| k.journal != journal);
        self.journals.retain(|(j, _)| j != journal);
    }

    pub(super) fn journals_newest_first(&self) -> Vec<(String, String)> {
        self.journals.iter().rev().cloned().collect()
    }
}
