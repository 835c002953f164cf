//! A defer stack: undo steps registered next to the set-up steps they undo, run in reverse.

use std::sync::Mutex;

type Step = (String, Box<dyn FnOnce() -> Result<(), String> + Send>);

/// Undo steps, run last-registered first, once, by [`Cleanup::run_all`] or on drop (so also
/// while a panic unwinds).
#[derive(Default)]
pub struct Cleanup {
    steps: Mutex<Vec<Step>>,
}

impl Cleanup {
    /// Registers a step that cannot fail (or whose failure does not matter).
    pub fn defer(&self, what: impl Into<String>, f: impl FnOnce() + Send + 'static) {
        self.defer_checked(what, move || {
            f();
            Ok(())
        });
    }

    /// Registers a step whose failure is reported by [`Cleanup::run_all`].
    pub fn defer_checked(
        &self,
        what: impl Into<String>,
        f: impl FnOnce() -> Result<(), String> + Send + 'static,
    ) {
        self.steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((what.into(), Box::new(f)));
    }

    /// Runs every step still registered, newest first; returns "what: why" for those that
    /// failed. A step that panics is reported and the others still run.
    pub fn run_all(&self) -> Vec<String> {
        let steps = std::mem::take(&mut *self.steps.lock().unwrap_or_else(|p| p.into_inner()));
        let mut failed = Vec::new();
        for (what, f) in steps.into_iter().rev() {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                Ok(Ok(())) => {}
                Ok(Err(why)) => failed.push(format!("{what}: {why}")),
                Err(_) => failed.push(format!("{what}: panicked")),
            }
        }
        failed
    }

    pub fn len(&self) -> usize {
        self.steps.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.run_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn steps_run_newest_first_once_even_after_a_failure_or_panic() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let c = Cleanup::default();
        for i in 0..3 {
            let l = log.clone();
            c.defer(format!("step {i}"), move || l.lock().unwrap().push(i));
        }
        c.defer_checked("fails", || Err("EBUSY".into()));
        c.defer("panics", || panic!("boom"));
        let failed = c.run_all();
        assert_eq!(failed, ["panics: panicked", "fails: EBUSY"]);
        assert_eq!(*log.lock().unwrap(), [2, 1, 0]);
        assert!(c.is_empty());
        assert!(c.run_all().is_empty(), "nothing runs twice");
    }

    #[test]
    fn dropping_runs_the_steps() {
        let log = Arc::new(Mutex::new(0));
        {
            let c = Cleanup::default();
            let l = log.clone();
            c.defer("count", move || *l.lock().unwrap() += 1);
        }
        assert_eq!(*log.lock().unwrap(), 1);
    }
}
