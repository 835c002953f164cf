//! The histograms the BPF programs fill: log-linear buckets, exact below 8 and then eight
//! steps per power of two, so a percentile read from them is within 1/8 (12.5 %) of the true
//! value, and the maximum is exact. `bucket` mirrors the C function of `bpf/trace.bpf.c`; the
//! test below pins both to the same table.

pub const NBUCKETS: usize = 304;

/// The bucket of a value (the BPF programs' `bucket()`).
pub fn bucket(v: u64) -> usize {
    if v < 8 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let idx = (msb - 2) as usize * 8 + ((v >> (msb - 3)) & 7) as usize;
    idx.min(NBUCKETS - 1)
}

/// The smallest value of a bucket.
pub fn lower(b: usize) -> u64 {
    if b < 8 {
        return b as u64;
    }
    let msb = (b / 8 + 2) as u32;
    let step = (b % 8) as u64;
    (8 + step) << (msb - 3)
}

/// The largest value of a bucket.
pub fn upper(b: usize) -> u64 {
    if b + 1 >= NBUCKETS {
        return u64::MAX;
    }
    lower(b + 1) - 1
}

/// One histogram's worth of events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hist {
    pub count: u64,
    pub sum: u64,
    pub max: u64,
    pub squeezed: u64,
    pub buckets: Vec<u64>,
}

impl Hist {
    pub fn empty() -> Hist {
        Hist {
            count: 0,
            sum: 0,
            max: 0,
            squeezed: 0,
            buckets: vec![0; NBUCKETS],
        }
    }

    /// What happened between `before` and `self` (both cumulative; the BPF side never resets,
    /// so nothing is lost between a read and a reset). The maximum is the interval's only when
    /// it grew in it, else the bucket bound of the interval's largest value.
    pub fn since(&self, before: &Hist) -> Hist {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .zip(&before.buckets)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let max = if self.max > before.max {
            self.max
        } else {
            buckets
                .iter()
                .rposition(|n| *n > 0)
                .map_or(0, |b| upper(b).min(self.max))
        };
        Hist {
            count: self.count.saturating_sub(before.count),
            sum: self.sum.saturating_sub(before.sum),
            max,
            squeezed: self.squeezed.saturating_sub(before.squeezed),
            buckets,
        }
    }

    /// Counts of the values below each of `bounds` (ascending), for classic cumulative buckets:
    /// exact where a bound is a power of two of 8 or more (a bucket edge), else the buckets
    /// entirely below it.
    pub fn below(&self, bounds: &[u64]) -> Vec<u64> {
        bounds
            .iter()
            .map(|&le| {
                self.buckets
                    .iter()
                    .enumerate()
                    .take_while(|(b, _)| upper(*b) < le)
                    .map(|(_, n)| n)
                    .sum()
            })
            .collect()
    }

    /// Adds `h` in.
    pub fn add(&mut self, h: &Hist) {
        self.count += h.count;
        self.sum += h.sum;
        self.max = self.max.max(h.max);
        self.squeezed += h.squeezed;
        for (a, b) in self.buckets.iter_mut().zip(&h.buckets) {
            *a += b;
        }
    }

    /// The value at quantile `q` (0..=1): the midpoint of its bucket (exact below 8), never
    /// above the maximum.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let mid = if b < 8 {
                    lower(b)
                } else {
                    lower(b) + (upper(b) - lower(b)) / 2
                };
                return Some(mid.min(self.max.max(lower(b))));
            }
        }
        None
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_below_a_power_of_two_are_exact() {
        let mut h = Hist::empty();
        for v in [5u64, 1023, 1024, 1025, 4095, 70_000] {
            h.buckets[bucket(v)] += 1;
        }
        assert_eq!(h.below(&[8, 1024, 4096, 65536, 1 << 20]), [1, 2, 5, 5, 6]);
    }

    #[test]
    fn buckets_are_contiguous_and_within_an_eighth() {
        // Exact below 8; then each bucket starts where the last ended.
        for v in 0..8 {
            assert_eq!(bucket(v), v as usize);
        }
        for b in 8..NBUCKETS - 1 {
            assert_eq!(bucket(lower(b)), b, "bucket {b}");
            assert_eq!(bucket(upper(b)), b, "bucket {b}");
            assert_eq!(upper(b) + 1, lower(b + 1));
            assert!((upper(b) - lower(b)) as f64 <= lower(b) as f64 / 8.0 + 1.0);
        }
        // The same table as the C side: 16 → 16, 1000 → 63 (msb 9: 7·8 + 7), 1 s → 222.
        assert_eq!(bucket(16), 16);
        assert_eq!(bucket(1000), 63);
        assert_eq!(bucket(1_000_000_000), 222);
        assert_eq!(bucket(u64::MAX), NBUCKETS - 1);
    }

    #[test]
    fn quantiles_come_within_their_bucket_and_never_pass_the_max() {
        let mut h = Hist::empty();
        for v in (1..=1000u64).map(|i| i * 1000) {
            h.buckets[bucket(v)] += 1;
            h.count += 1;
            h.sum += v;
            h.max = h.max.max(v);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.07, "{p50}");
        let p99 = h.quantile(0.99).unwrap() as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.07, "{p99}");
        assert!(h.quantile(1.0).unwrap() <= 1_000_000);
        assert_eq!(Hist::empty().quantile(0.5), None);
        let later = {
            let mut l = h.clone();
            l.buckets[bucket(7)] += 2;
            l.count += 2;
            l.sum += 14;
            l
        };
        let d = later.since(&h);
        assert_eq!((d.count, d.sum, d.quantile(0.5)), (2, 14, Some(7)));
        assert_eq!(
            d.max, 7,
            "the interval's own largest value, not the old max"
        );
    }
}
