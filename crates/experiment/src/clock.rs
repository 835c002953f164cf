//! Clocks. Latency is measured on a monotonic clock behind the [`Clock`] trait, so statistics
//! and interval logic can be driven by a [`ManualClock`] in tests; kernel software timestamps are
//! CLOCK_REALTIME and are compared with [`realtime_ns`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync {
    /// Nanoseconds since an arbitrary origin that never goes backwards.
    fn now_ns(&self) -> u64;
}

/// CLOCK_MONOTONIC through `Instant` (vDSO, no system call).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    ns: AtomicU64,
}

impl ManualClock {
    pub fn new(start_ns: u64) -> Self {
        ManualClock {
            ns: AtomicU64::new(start_ns),
        }
    }

    pub fn advance(&self, ns: u64) {
        self.ns.fetch_add(ns, Ordering::SeqCst);
    }

    pub fn set(&self, ns: u64) {
        self.ns.store(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.ns.load(Ordering::SeqCst)
    }
}

/// CLOCK_REALTIME in nanoseconds since the epoch: the base of kernel software timestamps.
pub fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
