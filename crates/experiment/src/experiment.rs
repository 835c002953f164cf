//! The experiment: the one closed loop of netsteer. Put the system into each variant, measure
//! it, leave it, in an order that spreads drift over the variants, then judge each variant
//! against the first with a three-way verdict. `lab run`, `tune apply --verify-with` and any
//! search go through it.
//!
//! Everything outside is behind two seams, as hyperfine keeps its executor apart from its
//! statistics: an [`Executor`] (enter a variant, measure, leave) and a [`Clock`]. The lab's
//! executor runs workloads between namespaces and changes the host through the tune library;
//! `tune apply --verify-with` runs a command; the tests drive a fake with a
//! [`ManualClock`](crate::clock::ManualClock), so the order, the timing and the decision are
//! checked exactly.

use crate::clock::Clock;
pub use crate::stats::Spread;
use serde::{Deserialize, Serialize};

/// An executor's error, kept whole (its source chain) for the caller.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error("an experiment needs at least one variant and one repeat")]
    Empty,
    /// Entering, measuring, leaving or the observer failed; the variant was left.
    #[error("{0}")]
    Failed(BoxError),
    #[error("{failure}; then leaving variant {variant} failed too: {leave}")]
    LeaveAfterFailure {
        failure: BoxError,
        variant: usize,
        leave: BoxError,
    },
}

/// What the experiment drives.
pub trait Executor {
    /// One run's result (a typed benchmark summary, or a number).
    type Measure;
    /// Makes `variant` the system's state (e.g. applies a tuning plan). Variant 0 is the
    /// baseline.
    fn enter(&mut self, variant: usize) -> Result<(), BoxError>;
    /// Measures the current state once.
    fn measure(&mut self, variant: usize, repeat: u32) -> Result<Self::Measure, BoxError>;
    /// Undoes `enter` (e.g. rolls the plan back). Called after every `enter` that succeeded,
    /// also when a measurement failed.
    fn leave(&mut self, variant: usize) -> Result<(), BoxError>;
}

/// In which order the runs happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Repeat by repeat, every variant once: A B A B. Slow drift (thermal, a neighbour VM
    /// waking up) then falls on all variants alike instead of on one.
    Alternated,
    /// All runs of A, then all of B: one `enter` per variant, for changes that are costly to
    /// make and undo, or (`tune apply --verify-with`) that must stay in place when kept.
    Sequential,
}

/// One finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed<M> {
    pub variant: usize,
    /// 1-based.
    pub repeat: u32,
    /// When the measurement started, ns after the experiment started (on its clock).
    pub started_ns: u64,
    pub elapsed_ns: u64,
    pub measure: M,
}

/// The (variant, repeats) groups in the order they run, each one `enter`/`leave`.
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
/// may stop the experiment with an error). The first error stops it, after the variant it
/// happened in was left.
pub fn run<E: Executor>(
    exec: &mut E,
    variants: usize,
    repeats: u32,
    order: Order,
    clock: &dyn Clock,
    mut on_run: impl FnMut(&Timed<E::Measure>) -> Result<(), BoxError>,
) -> Result<Vec<Timed<E::Measure>>, ExperimentError> {
    if variants == 0 || repeats == 0 {
        return Err(ExperimentError::Empty);
    }
    let origin = clock.now_ns();
    let mut done = Vec::new();
    for (variant, repeats) in schedule(variants, repeats, order) {
        exec.enter(variant).map_err(ExperimentError::Failed)?;
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
        match (failed, exec.leave(variant)) {
            (None, Ok(())) => {}
            (Some(e), Ok(())) | (None, Err(e)) => return Err(ExperimentError::Failed(e)),
            (Some(failure), Err(leave)) => {
                return Err(ExperimentError::LeaveAfterFailure {
                    failure,
                    variant,
                    leave,
                });
            }
        }
    }
    Ok(done)
}

/// What an experiment compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Metric {
    /// Median latency (lower is better).
    P50,
    /// 99th percentile latency (lower is better).
    P99,
    /// 99.9th percentile latency (lower is better).
    P999,
    /// Throughput (higher is better).
    #[cfg_attr(feature = "clap", value(name = "bits_per_second"))]
    BitsPerSecond,
    /// Request/response rate (higher is better).
    #[cfg_attr(feature = "clap", value(name = "transactions_per_second"))]
    TransactionsPerSecond,
    /// Echoed datagrams per second (higher is better).
    Pps,
}

impl std::str::FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "p50" => Metric::P50,
            "p99" => Metric::P99,
            "p999" | "p99.9" => Metric::P999,
            "bits_per_second" => Metric::BitsPerSecond,
            "transactions_per_second" => Metric::TransactionsPerSecond,
            "pps" => Metric::Pps,
            _ => {
                return Err(format!(
                    "unknown metric {s:?} (p50, p99, p999, bits_per_second, transactions_per_second, pps)"
                ));
            }
        })
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Metric::P50 => "p50",
            Metric::P99 => "p99",
            Metric::P999 => "p999",
            Metric::BitsPerSecond => "bits_per_second",
            Metric::TransactionsPerSecond => "transactions_per_second",
            Metric::Pps => "pps",
        })
    }
}

impl Metric {
    pub fn lower_is_better(self) -> bool {
        matches!(self, Metric::P50 | Metric::P99 | Metric::P999)
    }

    /// The metric from a benchmark's JSON Lines output: the last client `summary` that has it
    /// (latencies from `latency_ns`, in ns).
    pub fn from_output(self, stdout: &str) -> Result<f64, String> {
        for line in stdout.lines().rev() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["type"] != "summary" || v["role"] != "client" {
                continue;
            }
            let x = match self {
                Metric::P50 => &v["latency_ns"]["p50"],
                Metric::P99 => &v["latency_ns"]["p99"],
                Metric::P999 => &v["latency_ns"]["p999"],
                Metric::BitsPerSecond => &v["bits_per_second"],
                Metric::TransactionsPerSecond => &v["transactions_per_second"],
                Metric::Pps => &v["pps"],
            };
            if let Some(x) = x.as_f64() {
                return Ok(x);
            }
        }
        Err(format!(
            "no client summary with {self} in the benchmark's output (run it with --json)"
        ))
    }

    /// Runs a benchmark command line with `sh -c` and reads the metric from its JSON Lines.
    pub fn from_command(self, cmd: &str) -> Result<f64, String> {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("{cmd:?}: {e}"))?;
        self.from_output(&String::from_utf8_lossy(&out.stdout))
            .map_err(|e| format!("{cmd:?} (exit {}): {e}", out.status))
    }
}

/// How a variant compares with the baseline. The same words go to the terminal, the JSON and
/// the lab's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The median moved the right way by more than the noise.
    #[serde(rename = "better beyond the noise")]
    Better,
    /// The median moved by no more than the noise, either way.
    #[serde(rename = "within the noise")]
    WithinNoise,
    /// The median moved the wrong way by more than the noise.
    #[serde(rename = "worse beyond the noise")]
    Worse,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Better => "better beyond the noise",
            Verdict::WithinNoise => "within the noise",
            Verdict::Worse => "worse beyond the noise",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub metric: Metric,
    pub before: Spread,
    pub after: Spread,
    /// Change of the median, % of the before median (positive = better).
    pub improvement_pct: f64,
    /// The wider of the two runs' spreads (max − min), % of the before median.
    pub noise_pct: f64,
    pub verdict: Verdict,
    /// Only a change better beyond the noise is kept.
    pub keep: bool,
    /// The verdict with its numbers, for people.
    pub why: String,
}

/// The three-way rule: the change of the median against the noise, the wider spread of either
/// set of runs. A change no larger than the noise is within it, whichever way it went; only
/// "better beyond the noise" is kept. `None` when a side has no finite value or the baseline's
/// median is zero.
pub fn decide(metric: Metric, before: &[f64], after: &[f64]) -> Option<Decision> {
    let Comparison {
        before: b,
        after: a,
        improvement_pct,
        noise_pct,
        verdict,
    } = compare(metric.lower_is_better(), before, after)?;
    let moved = if improvement_pct >= 0.0 {
        format!("{metric} {:.1}% better", improvement_pct)
    } else {
        format!("{metric} {:.1}% worse", -improvement_pct)
    };
    let why = format!("{verdict}: {moved}, noise {noise_pct:.1}%");
    Some(Decision {
        metric,
        before: b,
        after: a,
        improvement_pct,
        noise_pct,
        verdict,
        keep: verdict == Verdict::Better,
        why,
    })
}

/// The three-way rule on two sets of values, whatever they measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub before: Spread,
    pub after: Spread,
    /// Change of the median, % of the before median (positive = better).
    pub improvement_pct: f64,
    /// The wider of the two spreads (max − min), % of the before median.
    pub noise_pct: f64,
    pub verdict: Verdict,
}

/// [`decide`]'s rule without a metric: `None` when a side has no finite value or the before
/// median is zero.
pub fn compare(lower_is_better: bool, before: &[f64], after: &[f64]) -> Option<Comparison> {
    let b = Spread::of(before)?;
    let a = Spread::of(after)?;
    if b.median == 0.0 {
        return None;
    }
    let sign = if lower_is_better { 1.0 } else { -1.0 };
    let improvement_pct = sign * (b.median - a.median) / b.median.abs() * 100.0;
    let noise_pct = b.width().max(a.width()) / b.median.abs() * 100.0;
    let verdict = if improvement_pct > noise_pct {
        Verdict::Better
    } else if -improvement_pct > noise_pct {
        Verdict::Worse
    } else {
        Verdict::WithinNoise
    };
    Some(Comparison {
        before: b,
        after: a,
        improvement_pct,
        noise_pct,
        verdict,
    })
}

/// Each variant after the first against the first. `None` for a variant with no usable value.
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
    use crate::clock::ManualClock;

    /// Records every call; each measurement takes 1 µs on the manual clock and gives a value
    /// from a script.
    struct Fake<'a> {
        clock: &'a ManualClock,
        calls: Vec<String>,
        values: Vec<f64>,
        fail_at: Option<(usize, u32)>,
        fail_leave: bool,
    }

    impl Executor for Fake<'_> {
        type Measure = f64;
        fn enter(&mut self, v: usize) -> Result<(), BoxError> {
            self.calls.push(format!("enter {v}"));
            Ok(())
        }
        fn measure(&mut self, v: usize, r: u32) -> Result<f64, BoxError> {
            self.calls.push(format!("measure {v}.{r}"));
            self.clock.advance(1_000);
            if self.fail_at == Some((v, r)) {
                return Err(format!("run {v}.{r} broke").into());
            }
            Ok(self.values.remove(0))
        }
        fn leave(&mut self, v: usize) -> Result<(), BoxError> {
            self.calls.push(format!("leave {v}"));
            if self.fail_leave {
                return Err("rollback failed".into());
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
    fn three_way_verdict_against_the_noise() {
        // Latency: 100 ± 2 → 80 is better beyond the noise; → 99 and → 103 are within it;
        // → 110 is worse beyond it.
        let d = decide(Metric::P99, &[98.0, 100.0, 102.0], &[79.0, 80.0, 81.0]).unwrap();
        assert_eq!((d.verdict, d.keep), (Verdict::Better, true), "{d:?}");
        assert!((d.improvement_pct - 20.0).abs() < 1e-9);
        assert!((d.noise_pct - 4.0).abs() < 1e-9);
        assert_eq!(
            d.why,
            "better beyond the noise: p99 20.0% better, noise 4.0%"
        );
        for after in [[97.0, 99.0, 101.0], [101.0, 103.0, 105.0]] {
            let d = decide(Metric::P99, &[98.0, 100.0, 102.0], &after).unwrap();
            assert_eq!((d.verdict, d.keep), (Verdict::WithinNoise, false), "{d:?}");
        }
        let d = decide(Metric::P99, &[98.0, 100.0, 102.0], &[108.0, 110.0, 112.0]).unwrap();
        assert_eq!((d.verdict, d.keep), (Verdict::Worse, false), "{d:?}");
        // Seed 001 on 2 vCPUs: requests/s 31 % down with 22 % noise reads as worse, not as
        // "not beyond the noise".
        let d = decide(
            Metric::TransactionsPerSecond,
            &[88.0, 100.0, 110.3],
            &[60.0, 68.9, 75.0],
        )
        .unwrap();
        assert_eq!(d.verdict, Verdict::Worse, "{d:?}");
        assert_eq!(
            d.why,
            "worse beyond the noise: transactions_per_second 31.1% worse, noise 22.3%"
        );
        // Throughput: higher is better.
        let d = decide(Metric::BitsPerSecond, &[10.0; 3], &[12.0; 3]).unwrap();
        assert_eq!(d.verdict, Verdict::Better);
        let d = decide(Metric::BitsPerSecond, &[10.0; 3], &[8.0; 3]).unwrap();
        assert_eq!(d.verdict, Verdict::Worse);
        // Nothing to compare, or a zero baseline, gives no decision.
        assert!(decide(Metric::P50, &[], &[1.0]).is_none());
        assert!(decide(Metric::P50, &[0.0], &[1.0]).is_none());
        // The JSON carries the same words as the terminal.
        let j = serde_json::to_value(&d).unwrap();
        assert_eq!(j["verdict"], "worse beyond the noise");
        let back: Decision = serde_json::from_value(j).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn reads_the_metric_from_json_lines() {
        let out = r#"{"type":"interval","role":"client","latency_ns":{"p99":5}}
{"type":"summary","role":"server","bits_per_second":1}
{"type":"summary","role":"client","latency_ns":{"p50":10,"p99":20},"bits_per_second":3e9}
"#;
        assert_eq!(Metric::P99.from_output(out).unwrap(), 20.0);
        assert_eq!(Metric::BitsPerSecond.from_output(out).unwrap(), 3e9);
        assert!(Metric::Pps.from_output(out).is_err());
        assert!(Metric::P50.from_output("not json\n").is_err());
        assert!("p98".parse::<Metric>().is_err());
        assert_eq!("p99.9".parse::<Metric>().unwrap(), Metric::P999);
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
        // The clock is the experiment's: starts count from its origin, each run took 1 µs.
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
        // Lower is better for a latency: 9 after 3 is worse.
        let d = decide_all(Metric::P99, 2, &runs, |v| Some(*v));
        assert_eq!(d[0].as_ref().unwrap().verdict, Verdict::Worse);
    }

    #[test]
    fn a_failed_run_still_leaves_its_variant_and_stops_the_experiment() {
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

        // The observer can stop the experiment too (a report that cannot be written).
        let mut f = fake(&clock, &[1.0, 2.0]);
        let e = run(&mut f, 2, 1, Order::Alternated, &clock, |_| {
            Err("disk full".into())
        })
        .unwrap_err();
        assert!(e.to_string().contains("disk full"));
        assert_eq!(f.calls, ["enter 0", "measure 0.1", "leave 0"]);
        assert!(matches!(
            run(&mut f, 0, 1, Order::Alternated, &clock, |_| Ok(())),
            Err(ExperimentError::Empty)
        ));
    }

    #[test]
    fn three_variants_are_each_decided_against_the_first() {
        let clock = ManualClock::new(0);
        // Per repeat: A B C.
        let mut f = fake(&clock, &[100.0, 50.0, 99.0, 102.0, 52.0, 101.0]);
        let runs = run(&mut f, 3, 2, Order::Alternated, &clock, |_| Ok(())).unwrap();
        let d = decide_all(Metric::P50, 3, &runs, |v| Some(*v));
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].as_ref().unwrap().verdict, Verdict::Better);
        assert_eq!(d[1].as_ref().unwrap().verdict, Verdict::WithinNoise);
        assert_eq!(
            schedule(3, 2, Order::Alternated)
                .iter()
                .map(|(v, _)| *v)
                .collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2]
        );
    }
}
