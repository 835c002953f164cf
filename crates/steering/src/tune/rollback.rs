//! Rollback: restores exactly what a journal recorded as written, after a failed apply, a
//! crash at any point of one, or on request; refuses a journal that is not netsteer's own
//! (an entry that is not a knob) and leaves the knobs its writer gave up.

use super::apply::{Backend, Written, undo};
use super::journal::{self, Journal, Record};
use super::status::RollbackStatus;
use crate::model::desired::{Action, Item, ItemKind, Target};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RollbackReport {
    pub journal: String,
    pub status: RollbackStatus,
    pub restored: Vec<String>,
    pub failed: Vec<String>,
    /// Ids this journal's writer gave up to someone who rewrote them ([`Record::GivenUp`]):
    /// left as they are, not restored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given_up: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error("{0}")]
    Journal(std::io::Error),
    #[error("no journal in {0}: nothing was applied with this --state-dir")]
    NoJournal(String),
    #[error("journal {journal} was written for root {journal_root}, not {root}")]
    WrongRoot {
        journal: String,
        journal_root: String,
        root: String,
    },
    /// A journal entry whose target is not a knob ([`Target::knob_check`]): someone else
    /// wrote it. The whole journal is refused before anything is restored.
    #[error("journal {journal}: entry {id}: {why}; refused, nothing was restored")]
    NotAKnob {
        journal: String,
        id: String,
        why: String,
    },
}

/// The newest journal that still has something to undo (or the newest one at all).
pub fn latest_journal(state_dir: &Path) -> Result<std::path::PathBuf, RollbackError> {
    let all = journal::list(state_dir).map_err(RollbackError::Journal)?;
    for p in all.iter().rev() {
        if let Ok(r) = journal::read(p)
            && !journal::rolled_back(&r)
        {
            return Ok(p.clone());
        }
    }
    all.last()
        .cloned()
        .ok_or_else(|| RollbackError::NoJournal(state_dir.display().to_string()))
}

/// Restores exactly what a journal recorded as written (or about to be), newest first. Safe
/// after a crash at any point of apply, and harmless to run again.
pub fn rollback(
    path: &Path,
    root: &str,
    backend: &dyn Backend,
) -> Result<RollbackReport, RollbackError> {
    let records = journal::read(path).map_err(RollbackError::Journal)?;
    if let Some(Record::Begin { root: jroot, .. }) = records.first()
        && jroot != root
    {
        return Err(RollbackError::WrongRoot {
            journal: path.display().to_string(),
            journal_root: jroot.clone(),
            root: root.to_string(),
        });
    }
    let journal_name = path.display().to_string();
    // Every target first, before any write: a rollback restores what the journal says was
    // there, so a journal that names anything but a knob is not netsteer's and is not obeyed.
    // An id names its own target, and one target only (a journal journals an id again after
    // a channel change, for the same knob).
    let mut targets: BTreeMap<&str, &Target> = BTreeMap::new();
    for r in &records {
        if let Record::Old { id, target, .. } = r {
            let checked = crate::model::knob::check_knob(id, target).and_then(|()| {
                match targets.insert(id, target) {
                    Some(other) if other != target => Err(format!(
                        "the journal names this id for {other} and for {target}"
                    )),
                    _ => Ok(()),
                }
            });
            if let Err(why) = checked {
                return Err(RollbackError::NotAKnob {
                    journal: journal_name,
                    id: id.clone(),
                    why,
                });
            }
        }
    }
    if journal::rolled_back(&records) {
        return Ok(RollbackReport {
            journal: journal_name,
            status: RollbackStatus::NothingToDo,
            restored: Vec::new(),
            failed: Vec::new(),
            given_up: Vec::new(),
        });
    }
    // Each id's first Old record: its value before the apply. An id journaled again later
    // (re-planned after a channel change) keeps the first.
    let mut olds: BTreeMap<String, Item> = BTreeMap::new();
    let mut old_values: BTreeMap<String, String> = BTreeMap::new();
    let mut born_after: BTreeMap<String, bool> = BTreeMap::new();
    let mut channels_written = false;
    let mut written = Vec::new();
    let mut readbacks: BTreeMap<&str, &str> = BTreeMap::new();
    for r in &records {
        if let Record::Done { id, readback } = r {
            readbacks.insert(id, readback);
        }
        match r {
            Record::Old { id, .. } if olds.contains_key(id) => {}
            Record::Old {
                id,
                target,
                format,
                old,
                new,
            } => {
                born_after.insert(id.clone(), channels_written);
                olds.insert(
                    id.clone(),
                    Item {
                        id: id.clone(),
                        kind: target.kind(),
                        target: target.clone(),
                        format: *format,
                        label: None,
                        current: Some(old.clone()),
                        desired: new.clone(),
                        reason: String::new(),
                        action: Action::Change,
                        rewrite: false,
                    },
                );
                old_values.insert(id.clone(), old.clone());
            }
            Record::Write { id } => {
                if let (Some(item), Some(old)) = (olds.get(id), old_values.get(id)) {
                    written.push(Written {
                        item: item.clone(),
                        old: old.clone(),
                        after_channels: born_after.get(id).copied().unwrap_or(false),
                    });
                    if item.kind == ItemKind::Channels {
                        channels_written = true;
                    }
                }
            }
            _ => {}
        }
    }
    // A knob given up to another writer keeps that writer's value: step-aside holds for
    // every rollback of this journal, not only the watcher's own.
    let given_up = journal::given_up(&records);
    let mut left: Vec<String> = written
        .iter()
        .filter(|w| given_up.contains(&w.item.id))
        .map(|w| w.item.id.clone())
        .collect();
    written.retain(|w| !given_up.contains(&w.item.id));
    // A journal that asks for it (watch's) leaves what someone else rewrote since: a knob
    // that holds neither what this apply wrote (nor read back) nor what it found.
    let leave = matches!(
        records.first(),
        Some(Record::Begin {
            leave_rewritten: true,
            ..
        })
    );
    if leave {
        let mut rewritten = Vec::new();
        for w in &written {
            let f = w.item.format;
            let Ok(now) = backend.read(&w.item.target) else {
                continue;
            };
            let ours = f.same(&now, &w.item.desired)
                || readbacks
                    .get(w.item.id.as_str())
                    .is_some_and(|r| f.same(&now, r));
            if !ours && !f.same(&now, &w.old) {
                rewritten.push((w.item.id.clone(), now));
            }
        }
        if !rewritten.is_empty() {
            let mut j = Journal::reopen(path).map_err(RollbackError::Journal)?;
            for (id, now) in &rewritten {
                j.append(&Record::GivenUp {
                    id: id.clone(),
                    now: now.clone(),
                    why: "rewritten by someone else before this rollback".into(),
                })
                .map_err(RollbackError::Journal)?;
                left.push(id.clone());
            }
            written.retain(|w| !rewritten.iter().any(|(id, _)| *id == w.item.id));
        }
    }
    left.sort();
    left.dedup();
    if written.is_empty() {
        let mut j = Journal::reopen(path).map_err(RollbackError::Journal)?;
        j.append(&Record::RolledBack {
            restored: Vec::new(),
            failed: Vec::new(),
        })
        .map_err(RollbackError::Journal)?;
        return Ok(RollbackReport {
            journal: journal_name,
            status: RollbackStatus::NothingToDo,
            restored: Vec::new(),
            failed: Vec::new(),
            given_up: left,
        });
    }
    let (restored, failed) = undo(backend, &written);
    let mut j = Journal::reopen(path).map_err(RollbackError::Journal)?;
    j.append(&Record::RolledBack {
        restored: restored.clone(),
        failed: failed.clone(),
    })
    .map_err(RollbackError::Journal)?;
    Ok(RollbackReport {
        journal: journal_name,
        status: if failed.is_empty() {
            RollbackStatus::Restored
        } else {
            RollbackStatus::Incomplete
        },
        restored,
        failed,
        given_up: left,
    })
}
