//! Giving a knob up and undoing an action, so that stepping aside holds for every rollback:
//! the guard's, the one at exit, a later `tune rollback` of a watch journal.
//!
//! A knob someone else rewrote is recorded as given up in every journal of the watcher that
//! wrote it ([`journal::give_up`], `Record::GivenUp`), and tune's rollback of such a journal
//! restores everything else and leaves that knob as the other writer set it. Issue 77 saw the
//! step-aside undone without it: `watch` gave up `netdev_max_backlog` (and an `rps_cpus`
//! file) a person had rewritten, then its guard rolled the earlier action back and wrote the
//! old value over the person's. Polling sees a rewrite only at the next interval, so every
//! rollback of the watcher also reads each knob again just before: one that no longer holds
//! what the journal wrote is given up there and then (what is left is the time between that
//! read and tune's write).

use super::state::Drift;
use super::{Event, Watcher};
use crate::model::desired::{Format, Target};
use crate::tune::journal::{self, Record};
use std::collections::BTreeSet;
use std::path::Path;

/// One knob a journal wrote.
pub(super) struct Wrote {
    /// The journal's item id for it (what `Record::GivenUp` names).
    id: String,
    /// The path the watcher knows it by (a file, or `nic/IF/GROUP/NAME`).
    path: String,
    format: Format,
    /// What the journal wrote.
    value: String,
    /// Recorded as given up in this journal already.
    given_up: bool,
}

/// Every knob `journal` wrote (its `old` record followed by a `write`), in journal order.
pub(super) fn wrote(journal: &str) -> std::io::Result<Vec<Wrote>> {
    let records = journal::read(Path::new(journal))?;
    let given_up = journal::given_up(&records);
    let written: BTreeSet<&str> = records
        .iter()
        .filter_map(|r| match r {
            Record::Write { id } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let mut out: Vec<Wrote> = Vec::new();
    for r in &records {
        let Record::Old {
            id,
            target,
            format,
            new,
            ..
        } = r
        else {
            continue;
        };
        if !written.contains(id.as_str()) || out.iter().any(|w| &w.id == id) {
            continue;
        }
        let path = match (target.path(), target) {
            (Some(path), _) => path,
            // A NIC setting's item id is the path `tune apply --set` takes.
            (None, Target::Nic { .. }) => id.clone(),
            _ => continue,
        };
        out.push(Wrote {
            id: id.clone(),
            path,
            format: *format,
            value: new.clone(),
            given_up: given_up.contains(id),
        });
    }
    Ok(out)
}

/// What undoing one journal did.
pub(super) struct Undone {
    /// Item ids written back.
    pub restored: Vec<String>,
    /// The knobs left as someone else set them: `path (we wrote X, it holds Y)`.
    pub left: Vec<String>,
}

impl Watcher {
    /// Gives a knob up to whoever rewrote it: never written by this watcher again (until a
    /// person reclaims it), and recorded as given up in every journal of the watcher that
    /// wrote it, so that no rollback of those writes it. Says so (`stepped-aside`).
    pub(super) fn give_up(&mut self, at: f64, d: Drift, who: &str, out: &mut Vec<Event>) {
        self.state.disown(&d);
        let why = format!(
            "rewritten by someone else: netsteer watch wrote {}, it holds {}",
            d.ours, d.now
        );
        for (journal, _) in self.state.journals_newest_first() {
            let recorded = wrote(&journal).and_then(|ws| {
                ws.iter()
                    .filter(|w| w.path == d.path && !w.given_up)
                    .try_for_each(|w| journal::give_up(Path::new(&journal), &w.id, &d.now, &why))
            });
            if let Err(e) = recorded {
                // The watcher's own rollbacks still read the knob first; `tune rollback` of
                // this journal would not know.
                out.push(Event::ApplyFailed {
                    at,
                    id: d.path.clone(),
                    error: format!(
                        "recording {} as given up in {journal}: {e}; a `tune rollback` of that journal may write it",
                        d.path
                    ),
                });
            }
        }
        out.push(Event::SteppedAside {
            at,
            path: d.path,
            ours: d.ours,
            now: d.now,
            who: who.into(),
        });
    }

    /// Undoes one of the watcher's journals: every knob it wrote is read again first, and one
    /// that no longer holds what it wrote is given up now; then tune's rollback restores the
    /// rest and leaves every knob given up. A knob this journal took from an earlier one of
    /// the watcher's (a second step on the same knob) is that one's again, and watched.
    pub(super) fn undo(
        &mut self,
        at: f64,
        journal: &str,
        out: &mut Vec<Event>,
    ) -> Result<Undone, String> {
        let ws = wrote(journal).map_err(|e| e.to_string())?;
        let mut left = Vec::new();
        for w in &ws {
            if w.given_up {
                left.push(w.path.clone());
                continue;
            }
            if crate::model::knob::is_nic_path(&w.path) && !self.tuner.reads_nic() {
                continue;
            }
            let now = self
                .tuner
                .read_knob(&w.path)
                .unwrap_or_else(|e| format!("(unreadable: {e})"));
            if !w.format.same(&w.value, &now) {
                left.push(w.path.clone());
                let d = Drift {
                    path: w.path.clone(),
                    ours: w.value.clone(),
                    now,
                    journal: journal.to_string(),
                };
                self.give_up(at, d, "another writer (seen before a rollback)", out);
            }
        }
        let report = self
            .tuner
            .rollback(Some(Path::new(journal)))
            .map_err(|e| e.to_string())?;
        self.state.forget_journal(journal);
        self.reown(ws.iter().filter(|w| !left.contains(&w.path)));
        let _ = self.state.save(&self.tuner);
        let left = left
            .iter()
            .map(|p| match self.state.disowned_as(p) {
                Some((ours, now)) => format!("{p} (the watcher wrote {ours}, it holds {now})"),
                None => p.clone(),
            })
            .collect();
        if !report.failed.is_empty() {
            return Err(format!(
                "{journal}: {} could not be written back",
                report.failed.join(", ")
            ));
        }
        Ok(Undone {
            restored: report.restored,
            left,
        })
    }

    /// After a journal is undone: each knob it wrote that an earlier journal of the watcher
    /// wrote too, and that holds that journal's value again, is owned by that journal (so a
    /// rewrite now is seen, and its rollback compares against the right value).
    fn reown<'a>(&mut self, undone: impl Iterator<Item = &'a Wrote>) {
        let paths: Vec<&str> = undone.map(|w| w.path.as_str()).collect();
        let mut done: BTreeSet<&str> = BTreeSet::new();
        for (journal, id) in self.state.journals_newest_first() {
            let Ok(ws) = wrote(&journal) else { continue };
            for w in ws.iter().filter(|w| !w.given_up) {
                let Some(path) = paths.iter().find(|p| **p == w.path) else {
                    continue;
                };
                if !done.insert(path) {
                    continue;
                }
                if self
                    .tuner
                    .read_knob(path)
                    .is_ok_and(|now| w.format.same(&w.value, &now))
                {
                    self.state.own(path, &w.value, &journal, &id);
                }
            }
        }
    }
}
