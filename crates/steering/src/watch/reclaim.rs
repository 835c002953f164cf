//! Taking back a knob the watcher gave up, when told (`--reclaim`). The watcher never fights
//! another writer on its own (bpftune's lesson: a tuner that rewrites what a person set is a
//! tuner people turn off); a person who wants the watcher's value back says so, and it is
//! written through tune's transaction like any action, in a journal of its own.

use super::{Advice, Change, Event, Reflex, Watcher};
use crate::tune::TuneError;

impl Watcher {
    /// Writes back every given-up knob `cfg.reclaim` names (a path, or `all`). A path that
    /// is not a knob the watcher gave up is refused by name before anything is written.
    pub(super) fn reclaim(&mut self) -> Result<Vec<Event>, TuneError> {
        if self.cfg.reclaim.is_empty() {
            return Ok(Vec::new());
        }
        let given_up = self.state.disowned();
        let all = self.cfg.reclaim.iter().any(|r| r == "all");
        for want in self.cfg.reclaim.iter().filter(|r| *r != "all") {
            if !given_up.iter().any(|(p, _, _)| p == want) {
                let known: Vec<&str> = given_up.iter().map(|(p, _, _)| p.as_str()).collect();
                return Err(TuneError::Refused(format!(
                    "--reclaim {want}: not a knob the watcher gave up (given up: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        }
        let mut out = Vec::new();
        for (path, ours, id) in given_up {
            if !all && !self.cfg.reclaim.contains(&path) {
                continue;
            }
            let was = self.tuner.read_knob(&path).unwrap_or_default();
            let id = if id.is_empty() { path.clone() } else { id };
            let target = match crate::model::knob::target_of_set_path(&path) {
                Ok(t) => t,
                Err(error) => {
                    out.push(Event::ApplyFailed {
                        at: 0.0,
                        id: format!("reclaim/{id}"),
                        error,
                    });
                    continue;
                }
            };
            let advice = Advice {
                id: format!("reclaim/{id}"),
                reflex: Reflex::of_id(&id),
                evidence: vec![format!(
                    "told to reclaim {path}: the watcher wrote {ours}, someone else {was}"
                )],
                changes: vec![Change {
                    target,
                    from: was.clone(),
                    to: ours.clone(),
                }],
            };
            let items: Vec<_> = advice.changes.iter().map(Change::item).collect();
            match self.apply(&advice, &items) {
                Ok(journal) => {
                    self.state.reclaimed(&path, &ours, &journal, &id);
                    out.push(Event::Reclaimed {
                        at: 0.0,
                        path,
                        value: ours,
                        was,
                        journal,
                    });
                }
                Err(error) => out.push(Event::ApplyFailed {
                    at: 0.0,
                    id: advice.id,
                    error,
                }),
            }
        }
        let _ = self.state.save(&self.tuner);
        Ok(out)
    }
}

impl Reflex {
    /// The reflex behind an advice id (`backlog`, `budget`, `rps/eth0`, `rss/eth0`,
    /// `rps-away/eth0`): the one whose name is its first part.
    pub(super) fn of_id(id: &str) -> Reflex {
        let head = id.split('/').next().unwrap_or_default();
        Reflex::ALL
            .into_iter()
            .find(|r| r.name() == head)
            .unwrap_or(Reflex::Backlog)
    }
}

#[cfg(test)]
mod tests {
    use super::Reflex;

    #[test]
    fn every_reflex_is_found_again_from_its_advice_ids() {
        for r in Reflex::ALL {
            assert_eq!(Reflex::of_id(r.name()), r);
            assert_eq!(Reflex::of_id(&format!("{}/eth0", r.name())), r);
        }
    }
}
