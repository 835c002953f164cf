//! The statistics engine every benchmark uses: latencies into an HDR histogram (3 significant
//! digits, so any percentile is within 0.1 %), with the exact minimum, maximum, mean and
//! standard deviation kept beside it in 64/128-bit and f64 accumulators (seed 000's tool
//! overflowed a 32-bit sum of squares above 46 µs).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest latency the histogram resolves: one hour. Larger values are clamped into the top
/// bucket for percentiles; `max` still reports them exactly.
const HIGHEST_NS: u64 = 3_600_000_000_000;
const SIGFIG: u8 = 3;

/// Latency percentiles and moments in integer nanoseconds (the `"latency_ns"` JSON object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: u64,
    pub stdev: u64,
}

/// Mean and standard deviation only (for quantities where percentiles are not reported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeanDev {
    pub mean: u64,
    pub stdev: u64,
}

/// One latency distribution. The histogram is made at the first sample and dropped by
/// [`LatencyRecorder::reset`]: at these bounds it is 256 KiB of counters, and a recorder that
/// records nothing (a timestamp series without timestamps, a warm-up's) or is reset every
/// interval must not hold it. A 64-flow udp-echo client holds three recorders per flow in each
/// of three accumulators: with the histograms made up front and zeroed in place it held
/// 210 MiB, enough for two clients beside each other to exhaust a 1 GiB test guest.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: Option<Box<Histogram<u64>>>,
    count: u64,
    min: u64,
    max: u64,
    /// Welford's running mean and sum of squared differences: stable at any magnitude.
    mean: f64,
    m2: f64,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    pub fn new() -> Self {
        LatencyRecorder {
            hist: None,
            count: 0,
            min: u64::MAX,
            max: 0,
            mean: 0.0,
            m2: 0.0,
        }
    }

    fn histogram(&mut self) -> &mut Histogram<u64> {
        self.hist.get_or_insert_with(|| {
            Box::new(
                Histogram::new_with_bounds(1, HIGHEST_NS, SIGFIG)
                    .expect("constant histogram bounds are valid"),
            )
        })
    }

    pub fn record(&mut self, ns: u64) {
        // The histogram cannot hold 0 with a lowest value of 1; 0 ns only happens with a
        // coarse clock and lands in the first bucket.
        self.histogram().saturating_record(ns.clamp(1, HIGHEST_NS));
        self.count += 1;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        let x = ns as f64;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds another recorder's samples (Chan et al.'s parallel variance).
    pub fn merge(&mut self, other: &LatencyRecorder) {
        let Some(theirs) = other.hist.as_deref().filter(|_| other.count > 0) else {
            return;
        };
        self.histogram()
            .add(theirs)
            .expect("histograms with the same bounds always add");
        let (n1, n2) = (self.count as f64, other.count as f64);
        let delta = other.mean - self.mean;
        let n = n1 + n2;
        self.mean += delta * n2 / n;
        self.m2 += other.m2 + delta * delta * n1 * n2 / n;
        self.count += other.count;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    pub fn reset(&mut self) {
        self.hist = None;
        self.count = 0;
        self.min = u64::MAX;
        self.max = 0;
        self.mean = 0.0;
        self.m2 = 0.0;
    }

    /// Value at quantile `q` (0..=1): the middle of the histogram bucket holding it (so the
    /// bucket width, 0.05 % either way, is no bias), never outside the exact [min, max].
    /// 0 when nothing was recorded.
    pub fn quantile(&self, q: f64) -> u64 {
        match self.hist.as_deref().filter(|_| self.count > 0) {
            Some(h) => h
                .median_equivalent(h.value_at_quantile(q))
                .clamp(self.min, self.max),
            None => 0,
        }
    }

    pub fn mean_dev(&self) -> Option<MeanDev> {
        (self.count > 0).then(|| MeanDev {
            mean: self.mean.round() as u64,
            stdev: self.stdev().round() as u64,
        })
    }

    fn stdev(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            (self.m2 / (self.count - 1) as f64).max(0.0).sqrt()
        }
    }

    /// None when nothing was recorded.
    pub fn summary(&self) -> Option<LatencySummary> {
        (self.count > 0).then(|| LatencySummary {
            min: self.min,
            p50: self.quantile(0.50),
            p90: self.quantile(0.90),
            p99: self.quantile(0.99),
            p999: self.quantile(0.999),
            max: self.max,
            mean: self.mean.round() as u64,
            stdev: self.stdev().round() as u64,
        })
    }
}

/// Minimum, median and maximum of a list: how stable a run was (the p50 of every interval, in
/// ns), or how far the repeats of an experiment scatter. The one spread type of netsteer: the
/// benchmarks' messages, the experiment's decisions and the lab's reports all use it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread<T = f64> {
    pub min: T,
    pub median: T,
    pub max: T,
}

impl<T: Copy> Spread<T> {
    /// min, median and max of sorted values; `mid` makes the median of an even count from the
    /// middle two.
    fn of_sorted(v: &[T], mid: impl Fn(T, T) -> T) -> Option<Spread<T>> {
        let n = v.len();
        (n > 0).then(|| Spread {
            min: v[0],
            median: if n % 2 == 1 {
                v[n / 2]
            } else {
                mid(v[n / 2 - 1], v[n / 2])
            },
            max: v[n - 1],
        })
    }
}

impl Spread<f64> {
    /// The spread of the finite values; `None` when there are none. An even count takes the
    /// mean of the middle two as its median.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Spread::of_sorted(&v, |a, b| (a + b) / 2.0)
    }

    /// max − min.
    pub fn width(&self) -> f64 {
        self.max - self.min
    }
}

impl Spread<u64> {
    /// The spread of integer values (ns), the median of an even count rounded down.
    pub fn of_ints(values: &[u64]) -> Option<Spread<u64>> {
        let mut v = values.to_vec();
        v.sort_unstable();
        Spread::of_sorted(&v, |a, b| (a + b) / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_moments_and_percentiles_within_a_tenth_of_a_percent() {
        let mut r = LatencyRecorder::new();
        assert!(r.summary().is_none());
        for v in 1..=100_000u64 {
            r.record(v * 10);
        }
        let s = r.summary().unwrap();
        assert_eq!((s.min, s.max), (10, 1_000_000));
        assert_eq!(s.mean, 500_005);
        // Sample stdev of 10..=1e6 step 10 is 10 * sqrt((n^2 - 1) / 12) with n = 1e5.
        assert!((s.stdev as f64 - 288_676.0).abs() < 2.0, "{}", s.stdev);
        for (q, want) in [
            (s.p50, 500_000.0),
            (s.p90, 900_000.0),
            (s.p99, 990_000.0),
            (s.p999, 999_000.0),
        ] {
            assert!((q as f64 - want).abs() / want <= 0.001, "{q} vs {want}");
        }
        assert!(
            s.min <= s.p50
                && s.p50 <= s.p90
                && s.p90 <= s.p99
                && s.p99 <= s.p999
                && s.p999 <= s.max
        );
    }

    /// A recorder holds its 256 KiB of counters only between its first sample and its reset;
    /// merging an empty one or reading one adds none.
    #[test]
    fn only_a_recorder_with_samples_holds_a_histogram() {
        let mut r = LatencyRecorder::new();
        let empty = LatencyRecorder::new();
        r.merge(&empty);
        assert!(r.hist.is_none());
        assert_eq!((r.quantile(0.5), r.summary()), (0, None));
        r.record(5_000);
        assert!(r.hist.is_some());
        let mut total = LatencyRecorder::new();
        total.merge(&r);
        r.reset();
        assert!(r.hist.is_none() && r.summary().is_none());
        r.record(7_000);
        total.merge(&r);
        let s = total.summary().unwrap();
        assert_eq!((s.min, s.max, s.mean), (5_000, 7_000, 6_000));
        assert!((s.p50 as f64 - 5_000.0).abs() <= 5.0, "{s:?}");
    }

    #[test]
    fn large_values_do_not_overflow_the_deviation() {
        // Seed 000's tool summed squares in 32 bits and printed dev=32491 µs at avg 56 µs.
        let mut r = LatencyRecorder::new();
        for i in 0..1000 {
            r.record(56_000 + (i % 2) * 2_000);
        }
        let s = r.summary().unwrap();
        assert_eq!(s.mean, 57_000);
        // Sample standard deviation: sqrt(1000 * 1000^2 / 999) = 1000.5.
        assert_eq!(s.stdev, 1_001);
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (
            LatencyRecorder::new(),
            LatencyRecorder::new(),
            LatencyRecorder::new(),
        );
        for v in [5u64, 7, 1_000, 40_000] {
            a.record(v);
            all.record(v);
        }
        for v in [3u64, 90, 2_000_000] {
            b.record(v);
            all.record(v);
        }
        a.merge(&b);
        assert_eq!(a.summary(), all.summary());
        a.reset();
        assert_eq!(a.count(), 0);
        assert!(a.summary().is_none());
    }

    #[test]
    fn zero_and_huge_values_are_kept_exactly_at_the_ends() {
        let mut r = LatencyRecorder::new();
        r.record(0);
        r.record(10 * HIGHEST_NS);
        let s = r.summary().unwrap();
        assert_eq!((s.min, s.max), (0, 10 * HIGHEST_NS));
    }

    #[test]
    fn spreads() {
        assert_eq!(Spread::of_ints(&[]), None);
        assert_eq!(
            Spread::of_ints(&[9, 1, 5]),
            Some(Spread {
                min: 1,
                median: 5,
                max: 9
            })
        );
        assert_eq!(Spread::of_ints(&[4, 1, 2, 3]).unwrap().median, 2);
        // Floats: non-finite values are left out; an even count takes the middle two's mean.
        assert_eq!(
            Spread::of(&[4.0, 1.0, f64::NAN, 3.0, 2.0]).unwrap().median,
            2.5
        );
        assert_eq!(Spread::of(&[f64::INFINITY]), None);
        assert_eq!(Spread::of(&[1.0, 3.0]).unwrap().width(), 2.0);
    }
}
