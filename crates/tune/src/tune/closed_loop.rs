//! Closed loop: a benchmark run several times before and after a change; the change is kept only
//! when the metric moved the right way by more than the runs' own spread.

use serde::{Deserialize, Serialize};

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
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Option<Spread> {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Some(Spread {
            min: s[0],
            median,
            max: s[n - 1],
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub metric: Metric,
    pub before: Spread,
    pub after: Spread,
    /// Improvement of the median, % of the before median (positive = better).
    pub improvement_pct: f64,
    /// The larger of the two runs' spreads (max − min), % of the before median.
    pub noise_pct: f64,
    pub keep: bool,
    pub why: String,
}

/// Keep the change when the median improved by more than the noise: the spread of either set
/// of runs. Equal-or-worse, or better by less than the runs scatter, rolls back.
pub fn decide(metric: Metric, before: &[f64], after: &[f64]) -> Option<Decision> {
    let b = Spread::of(before)?;
    let a = Spread::of(after)?;
    if b.median == 0.0 {
        return None;
    }
    let sign = if metric.lower_is_better() { 1.0 } else { -1.0 };
    let improvement_pct = sign * (b.median - a.median) / b.median.abs() * 100.0;
    let noise_pct = ((b.max - b.min).max(a.max - a.min)) / b.median.abs() * 100.0;
    let keep = improvement_pct > noise_pct;
    let why = if keep {
        format!("{metric} improved {improvement_pct:.1}%, more than the noise ({noise_pct:.1}%)")
    } else if improvement_pct > 0.0 {
        format!("{metric} improved only {improvement_pct:.1}%, within the noise ({noise_pct:.1}%)")
    } else {
        format!(
            "{metric} got worse by {:.1}% (noise {noise_pct:.1}%)",
            -improvement_pct
        )
    };
    Some(Decision {
        metric,
        before: b,
        after: a,
        improvement_pct,
        noise_pct,
        keep,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_improvements_beyond_the_noise() {
        // Latency: 100 ± 2 → 80 ± 2 is kept; → 99 is within the noise; → 110 is worse.
        let d = decide(Metric::P99, &[98.0, 100.0, 102.0], &[79.0, 80.0, 81.0]).unwrap();
        assert!(d.keep, "{d:?}");
        assert!((d.improvement_pct - 20.0).abs() < 1e-9);
        assert!((d.noise_pct - 4.0).abs() < 1e-9);
        let d = decide(Metric::P99, &[98.0, 100.0, 102.0], &[97.0, 99.0, 101.0]).unwrap();
        assert!(!d.keep && d.why.contains("within the noise"), "{d:?}");
        let d = decide(Metric::P99, &[98.0, 100.0, 102.0], &[108.0, 110.0, 112.0]).unwrap();
        assert!(!d.keep && d.why.contains("worse"), "{d:?}");
        // Throughput: higher is better.
        let d = decide(
            Metric::BitsPerSecond,
            &[10.0, 10.0, 10.0],
            &[12.0, 12.0, 12.0],
        )
        .unwrap();
        assert!(d.keep);
        let d = decide(Metric::BitsPerSecond, &[10.0, 10.0, 10.0], &[8.0, 8.0, 8.0]).unwrap();
        assert!(!d.keep);
        // Even counts use the mean of the middle two; nothing to compare gives None.
        assert_eq!(Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.5);
        assert!(decide(Metric::P50, &[], &[1.0]).is_none());
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
    }
}
