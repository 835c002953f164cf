//! The closed loop as a library: put the system into each variant, measure it, leave it, in an
//! order that spreads drift over the variants, then decide each variant against the first one.
//!
//! Everything outside is behind two seams, as hyperfine keeps its executor apart from its
//! statistics: an [`Executor`] (enter a variant, measure, leave) and a [`Clock`]. The lab's
//! executor runs workloads between namespaces and changes the host with `netsteer tune`;
//! `tune apply --verify-with` drives an external command; the tests drive a fake one with a
//! `ManualClock`, so the order, the timing and the decision are checked exactly.

use crate::{LabError, Result};
use netsteer_bench::clock::Clock;
use netsteer_tune::tune::closed_loop::{Decision, Metric, decide};

/// What the loop drives.
pub trait Executor {
    /// One run's result (a typed benchmark summary, or a number).
    type Measure;
    /// Makes `variant` the system's state (e.g. `tune apply`). Variant 0 is the baseline.
    fn enter(&mut self, variant: usize) -> Result<()>;
    /// Measures the current state once.
    fn measure(&mut self, variant: usize, repeat: u32) -> Result<Self::Measure>;
    /// Undoes `enter` (e.g. `tune rollback`). Called after every `enter` that succeeded,
    /// also when a measurement failed.
    fn leave(&mut self, variant: usize) -> Result<()>;
}

/// In which order the runs happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Repeat by repeat, every variant once: A B A B. Slow drift (thermal, a neighbour VM
    /// waking up) then falls on all variants alike instead of on one.
    Alternated,
    /// All runs of A, then all of B: one `enter` per variant, for changes that are costly to
    /// make and undo, or (tune's closed loop) that must stay in place when kept.
    Sequential,
}

/// One finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed<M> {
    pub variant: usize,
    /// 1-based.
    pub repeat: u32,
    /// When the measurement started, ns after the loop started (on the loop's clock).
    pub started_ns: u64,
    pub elapsed_ns: u64,
    pub measure: M,
}

/// The (variant, repeat) pairs in the order they run, grouped by `enter`/`leave`.
pub fn schedule(variants: usize, repeats: u32, order: Order) -> Vec<(usize, Vec<u32>)> {
    match order {
        Order::Alternated => (1..=repeats)
            .flat_map(|r| (0..variants).map(move |v| (v, vec![r])))
            .collect(),
        Order::Sequential => (0..variants)
            .map(|v| (v, (1..=repeats).collect()))
            .collect(),
    }
}

/// Runs every variant `repeats` times in `order`; `on_run` sees each run as it finishes (and
/// may stop the loop with an error). The first error stops the loop, after the variant it
/// happened in was left.
pub fn run<E: Executor>(
    exec: &mut E,
    variants: usize,
    repeats: u32,
    order: Order,
    clock: &dyn Clock,
    mut on_run: impl FnMut(&Timed<E::Measure>) -> Result<()>,
) -> Result<Vec<Timed<E::Measure>>> {
    if variants == 0 || repeats == 0 {
        return Err(LabError::Invalid(
            "the closed loop needs at least one variant and one repeat".into(),
        ));
    }
    let origin = clock.now_ns();
    let mut done = Vec::new();
    for (variant, repeats) in schedule(variants, repeats, order) {
        exec.enter(variant)?;
        let mut failed = None;
        for repeat in repeats {
            let t0 = clock.now_ns();
            let m = match exec.measure(variant, repeat) {
                Ok(m) => m,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let t = Timed {
                variant,
                repeat,
                started_ns: t0.saturating_sub(origin),
                elapsed_ns: clock.now_ns().saturating_sub(t0),
                measure: m,
            };
            if let Err(e) = on_run(&t) {
                failed = Some(e);
                break;
            }
            done.push(t);
        }
        let left = exec.leave(variant);
        match (failed, left) {
            (None, Ok(())) => {}
            (Some(e), Ok(())) => return Err(e),
            (None, Err(e)) => return Err(e),
            (Some(e), Err(l)) => {
                return Err(LabError::Invalid(format!(
                    "{e}; then leaving variant {variant} failed too: {l}"
                )));
            }
        }
    }
    Ok(done)
}

/// Each variant after the first against the first: kept only beyond the noise (tune's rule).
/// `None` for a variant with no usable value.
pub fn decide_all<M>(
    metric: Metric,
    variants: usize,
    runs: &[Timed<M>],
    value: impl Fn(&M) -> Option<f64>,
) -> Vec<Option<Decision>> {
    let values = |v: usize| -> Vec<f64> {
        runs.iter()
            .filter(|t| t.variant == v)
            .filter_map(|t| value(&t.measure))
            .collect()
    };
    let base = values(0);
    (1..variants)
        .map(|v| decide(metric, &base, &values(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsteer_bench::clock::ManualClock;

    /// Records every call; each measurement takes `step_ns` on the manual clock and gives a
    /// value from a script.
    struct Fake<'a> {
        clock: &'a ManualClock,
        calls: Vec<String>,
        values: Vec<f64>,
        fail_at: Option<(usize, u32)>,
        fail_leave: bool,
    }

    impl Executor for Fake<'_> {
        type Measure = f64;
        fn enter(&mut self, v: usize) -> Result<()> {
            self.calls.push(format!("enter {v}"));
            Ok(())
        }
        fn measure(&mut self, v: usize, r: u32) -> Result<f64> {
            self.calls.push(format!("measure {v}.{r}"));
            self.clock.advance(1_000);
            if self.fail_at == Some((v, r)) {
                return Err(LabError::Invalid(format!("run {v}.{r} broke")));
            }
            Ok(self.values.remove(0))
        }
        fn leave(&mut self, v: usize) -> Result<()> {
            self.calls.push(format!("leave {v}"));
            if self.fail_leave {
                return Err(LabError::Invalid("rollback failed".into()));
            }
            Ok(())
        }
    }

    fn fake<'a>(clock: &'a ManualClock, values: &[f64]) -> Fake<'a> {
        Fake {
            clock,
            calls: Vec::new(),
            values: values.to_vec(),
            fail_at: None,
            fail_leave: false,
        }
    }

    #[test]
    fn alternated_runs_interleave_and_every_enter_is_left() {
        let clock = ManualClock::new(5_000);
        let mut f = fake(&clock, &[10.0, 15.0, 11.0, 16.0]);
        let runs = run(&mut f, 2, 2, Order::Alternated, &clock, |_| Ok(())).unwrap();
        assert_eq!(
            f.calls,
            [
                "enter 0",
                "measure 0.1",
                "leave 0",
                "enter 1",
                "measure 1.1",
                "leave 1",
                "enter 0",
                "measure 0.2",
                "leave 0",
                "enter 1",
                "measure 1.2",
                "leave 1"
            ]
        );
        // The clock is the loop's: starts count from the loop's origin, each run took 1 µs.
        let starts: Vec<u64> = runs.iter().map(|t| t.started_ns).collect();
        assert_eq!(starts, [0, 1_000, 2_000, 3_000]);
        assert!(runs.iter().all(|t| t.elapsed_ns == 1_000));
        let d = decide_all(Metric::BitsPerSecond, 2, &runs, |v| Some(*v));
        let d = d[0].as_ref().unwrap();
        assert!(d.keep, "{d:?}");
        assert_eq!((d.before.median, d.after.median), (10.5, 15.5));
    }

    #[test]
    fn sequential_runs_enter_each_variant_once() {
        let clock = ManualClock::new(0);
        let mut f = fake(&clock, &[3.0, 3.0, 3.0, 9.0, 9.0, 9.0]);
        let runs = run(&mut f, 2, 3, Order::Sequential, &clock, |_| Ok(())).unwrap();
        assert_eq!(f.calls.iter().filter(|c| c.starts_with("enter")).count(), 2);
        assert_eq!(f.calls[4], "leave 0");
        // Lower is better for a latency: 9 after 3 is worse, so not kept.
        let d = decide_all(Metric::P99, 2, &runs, |v| Some(*v));
        assert!(!d[0].as_ref().unwrap().keep);
    }

    #[test]
    fn a_failed_run_still_leaves_its_variant_and_stops_the_loop() {
        let clock = ManualClock::new(0);
        let mut f = fake(&clock, &[1.0, 2.0, 3.0]);
        f.fail_at = Some((1, 1));
        let e = run(&mut f, 2, 2, Order::Alternated, &clock, |_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("run 1.1 broke"), "{e}");
        assert_eq!(f.calls.last().unwrap(), "leave 1");
        assert!(!f.calls.iter().any(|c| c == "measure 0.2"));

        // Both the run and the leaving failed: both are told.
        let mut f = fake(&clock, &[1.0]);
        f.fail_at = Some((0, 1));
        f.fail_leave = true;
        let e = run(&mut f, 1, 1, Order::Alternated, &clock, |_| Ok(())).unwrap_err();
        assert!(
            e.to_string().contains("broke") && e.to_string().contains("rollback failed"),
            "{e}"
        );

        // The observer can stop the loop too (a report that cannot be written).
        let mut f = fake(&clock, &[1.0, 2.0]);
        let e = run(&mut f, 2, 1, Order::Alternated, &clock, |_| {
            Err(LabError::Invalid("disk full".into()))
        })
        .unwrap_err();
        assert!(e.to_string().contains("disk full"));
        assert_eq!(f.calls, ["enter 0", "measure 0.1", "leave 0"]);
        assert!(run(&mut f, 0, 1, Order::Alternated, &clock, |_| Ok(())).is_err());
    }

    #[test]
    fn three_variants_are_each_decided_against_the_first() {
        let clock = ManualClock::new(0);
        // Per repeat: A B C.
        let mut f = fake(&clock, &[100.0, 50.0, 99.0, 102.0, 52.0, 101.0]);
        let runs = run(&mut f, 3, 2, Order::Alternated, &clock, |_| Ok(())).unwrap();
        let d = decide_all(Metric::P50, 3, &runs, |v| Some(*v));
        assert_eq!(d.len(), 2);
        assert!(d[0].as_ref().unwrap().keep, "B halves the latency");
        assert!(!d[1].as_ref().unwrap().keep, "C is within A's noise");
        assert_eq!(
            schedule(3, 2, Order::Alternated)
                .iter()
                .map(|(v, _)| *v)
                .collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2]
        );
    }
}
