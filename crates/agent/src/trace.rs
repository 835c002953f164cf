//! `agent --trace`: receive-path stage histograms from `netsteer trace`'s programs, sampled in
//! the background and exported as classic Prometheus histograms at each scrape.
//!
//! A background loop beside the rates' sampler: the programs are attached for a window of each
//! period (1 s of every 10 s by default, at a random offset: the trace's own sampling, whose
//! cost is in BENCHMARKS.md#trace) by a thread of the feed, and what each window counted is added
//! to cumulative histograms kept here. A scrape only reads them.
//!
//! Bounds: classic buckets at powers of four from 1,024 ns to 1.07 s (11 bounds, exact edges of
//! the trace's log-linear buckets, so a bucket's count is exact, not interpolated); per exported
//! device and receive queue, `stack` and `residence`; NET_RX's wait and run over all CPUs
//! together (a per-CPU histogram would be 28 series per CPU). At most `MAX_KEYS` keys are kept
//! (each 14 numbers); beyond them a window's rows are counted in `dropped` and not kept.

use crate::family::{Family, HistogramValue, Kind};
use netsteer_trace::hist::Hist;
use netsteer_trace::run::{Lcg, sleep_until};
use netsteer_trace::{Options, Session, Stage, dev_name};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Upper bounds of the classic buckets, in ns: 4^5 .. 4^15.
pub const BOUNDS_NS: [u64; 11] = [
    1 << 10,
    1 << 12,
    1 << 14,
    1 << 16,
    1 << 18,
    1 << 20,
    1 << 22,
    1 << 24,
    1 << 26,
    1 << 28,
    1 << 30,
];

/// Histogram keys kept at most: every queue of 8 devices of 64 queues, both stages, with room.
pub const MAX_KEYS: usize = 1200;

/// Series per exported histogram: the buckets, `+Inf`, `_sum` and `_count`.
pub const SERIES_PER_HISTOGRAM: usize = BOUNDS_NS.len() + 3;

/// The most series the trace families make for `devices` exported devices of `queues` receive
/// queues each: stack and residence per queue and the backlog, the two all-CPU stages, and the
/// feed's two counters.
pub fn series_bound(devices: usize, queues: usize) -> usize {
    (devices * (queues + 1) * 2 + 2) * SERIES_PER_HISTOGRAM + 2
}

/// (stage, device, queue): device and queue are None for the all-CPU NET_RX stages; queue None
/// on a device is its backlog (netif_rx: veth, loopback, tunnels).
type Key = (Stage, Option<String>, Option<u32>);

/// One key's cumulative classic histogram.
#[derive(Debug, Clone, Default, PartialEq)]
struct Classic {
    below: [u64; 11],
    count: u64,
    sum_ns: u64,
}

#[derive(Debug, Default)]
struct Cumulative {
    hists: BTreeMap<Key, Classic>,
    traced: Duration,
    dropped: u64,
    error: Option<String>,
}

impl Cumulative {
    /// Adds one window's histogram of one row.
    fn add(&mut self, key: Key, h: &Hist) {
        if !self.hists.contains_key(&key) && self.hists.len() >= MAX_KEYS {
            self.dropped += h.count;
            return;
        }
        let c = self.hists.entry(key).or_default();
        for (a, b) in c.below.iter_mut().zip(h.below(&BOUNDS_NS)) {
            *a += b;
        }
        c.count += h.count;
        c.sum_ns += h.sum;
    }
}

/// The key a trace row is kept under, or None for the stages not exported.
fn key_of(stage: Stage, dev: Option<String>, queue: u16) -> Option<Key> {
    match stage {
        Stage::Stack | Stage::Residence => Some((
            stage,
            Some(dev?),
            (queue != 0xffff).then_some(u32::from(queue)),
        )),
        Stage::IrqToSoftirq | Stage::SoftirqRun => Some((stage, None, None)),
        _ => None,
    }
}

/// The background sampler and what it has counted.
pub struct TraceFeed {
    state: Arc<Mutex<Cumulative>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TraceFeed {
    /// Loads the programs (an error names what is missing: root, BPF, a tracepoint) and starts
    /// sampling a `window` of every `period`.
    pub fn start(window: Duration, period: Duration) -> Result<TraceFeed, String> {
        if window.is_zero() || window > period {
            return Err(format!(
                "trace window {window:?} must be above 0 and at most the period {period:?}"
            ));
        }
        let mut session = Session::start(&Options::default()).map_err(|e| e.to_string())?;
        let state = Arc::new(Mutex::new(Cumulative::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("trace-feed".into())
            .spawn(move || {
                let mut rng = Lcg::seeded();
                let stop = || sp.load(Ordering::Relaxed);
                while !stop() {
                    let start = Instant::now();
                    let offset = (period - window).mul_f64(rng.unit());
                    if sleep_until(start + offset, &stop) {
                        break;
                    }
                    if let Err(e) = session.read().and_then(|_| session.resume()) {
                        lock(&st).error = Some(e.to_string());
                        break;
                    }
                    let opened = Instant::now();
                    let stopped = sleep_until(opened + window, &stop);
                    session.pause();
                    let traced = opened.elapsed();
                    match session.read() {
                        Ok(reading) => {
                            let mut c = lock(&st);
                            c.traced += traced;
                            for (k, h) in &reading.hists {
                                let key = Stage::from_code(k.stage)
                                    .and_then(|s| key_of(s, dev_name(&k.dev), k.queue));
                                if let Some(key) = key {
                                    c.add(key, h);
                                }
                            }
                        }
                        Err(e) => {
                            lock(&st).error = Some(e.to_string());
                            break;
                        }
                    }
                    if stopped || sleep_until(start + period, &stop) {
                        break;
                    }
                }
            })
            .map_err(|e| format!("starting the trace thread: {e}"))?;
        Ok(TraceFeed {
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// `agent --trace`: 1 s of every 10 s; for a single scrape (`once`), returns after the
    /// first window.
    pub fn standard(once: bool) -> Result<TraceFeed, String> {
        let period = Duration::from_secs(10);
        let feed = TraceFeed::start(Duration::from_secs(1), period)?;
        if once {
            feed.wait_first_window(period + Duration::from_secs(5));
        }
        Ok(feed)
    }

    /// Waits until a first window has been counted (or the sampler stopped), at most
    /// `timeout`: for a single scrape (`agent --once --trace`).
    pub fn wait_first_window(&self, timeout: Duration) {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            {
                let c = lock(&self.state);
                if !c.traced.is_zero() || c.error.is_some() {
                    return;
                }
            }
            if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The scrape's trace families, for the exported devices only; Err(why) when the sampler
    /// has stopped on an error (its counts so far are still exported).
    pub fn families(&self, devices: &[&str]) -> (Vec<Family>, Result<(), String>) {
        let c = lock(&self.state);
        let mut hist = Family::new(
            "netsteer_trace_stage_seconds",
            Kind::Histogram,
            "Receive-path stage latency from netsteer trace's sampled windows: stack (an skb's entry to its socket) and residence (the socket to the application's read) per device and receive queue (queue=\"backlog\": netif_rx), irq-to-softirq and softirq-run over all CPUs.",
        );
        for ((stage, dev, queue), h) in &c.hists {
            if dev.as_deref().is_some_and(|d| !devices.contains(&d)) {
                continue;
            }
            let mut labels = vec![("stage", stage.name().to_string())];
            if let Some(d) = dev {
                labels.push(("device", d.clone()));
                labels.push((
                    "queue",
                    queue.map_or("backlog".to_string(), |q| q.to_string()),
                ));
            }
            hist.push_hist(
                labels,
                HistogramValue {
                    buckets: BOUNDS_NS
                        .iter()
                        .zip(h.below)
                        .map(|(le, n)| (*le as f64 / 1e9, n))
                        .collect(),
                    sum: h.sum_ns as f64 / 1e9,
                    count: h.count,
                },
            );
        }
        let mut traced = Family::new(
            "netsteer_trace_sampled_seconds",
            Kind::Counter,
            "Time the trace's programs were attached: the stage counts cover this time.",
        );
        traced.push(Vec::new(), c.traced.as_secs_f64());
        let mut dropped = Family::new(
            "netsteer_trace_rows_dropped",
            Kind::Counter,
            "Events not kept because the feed held its maximum of histogram keys.",
        );
        dropped.push(Vec::new(), c.dropped as f64);
        let status = match &c.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        };
        (vec![hist, traced, dropped], status)
    }
}

impl Drop for TraceFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(m: &Mutex<Cumulative>) -> std::sync::MutexGuard<'_, Cumulative> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsteer_trace::hist::bucket;

    fn hist(values: &[u64]) -> Hist {
        let mut h = Hist::empty();
        for v in values {
            h.buckets[bucket(*v)] += 1;
            h.count += 1;
            h.sum += v;
        }
        h
    }

    #[test]
    fn windows_add_up_into_exact_classic_buckets_and_the_keys_are_bounded() {
        let mut c = Cumulative::default();
        let q3 = key_of(Stage::Stack, Some("eth0".into()), 3).unwrap();
        c.add(q3.clone(), &hist(&[500, 1023, 5000]));
        c.add(q3.clone(), &hist(&[2_000_000]));
        let h = &c.hists[&q3];
        assert_eq!(h.count, 4);
        assert_eq!(h.sum_ns, 500 + 1023 + 5000 + 2_000_000);
        // Below 1,024 ns: two; below 16,384: three; the 2 ms one below 4,194,304 only.
        assert_eq!(h.below[0], 2);
        assert_eq!(h.below[2], 3);
        assert_eq!(h.below[5], 3);
        assert_eq!(h.below[6], 4);
        // The backlog of a device, and the all-CPU stages.
        assert_eq!(
            key_of(Stage::Residence, Some("v0b".into()), 0xffff),
            Some((Stage::Residence, Some("v0b".into()), None))
        );
        assert_eq!(
            key_of(Stage::IrqToSoftirq, None, 0xffff),
            Some((Stage::IrqToSoftirq, None, None))
        );
        assert_eq!(key_of(Stage::PollWork, Some("eth0".into()), 1), None);
        assert_eq!(key_of(Stage::Stack, None, 1), None);
        for q in 0..(MAX_KEYS as u16 + 10) {
            c.add(
                key_of(Stage::Stack, Some("eth1".into()), q).unwrap(),
                &hist(&[1]),
            );
        }
        assert_eq!(c.hists.len(), MAX_KEYS);
        assert_eq!(c.dropped, 11);
    }

    /// A 64-queue NIC with every queue busy, the backlog and both NET_RX stages: what
    /// `series_bound` counts for the trace, and a device not exported adds nothing.
    #[test]
    fn a_64_queue_device_makes_the_series_series_bound_counts() {
        let mut c = Cumulative::default();
        for dev in ["eth0", "other0"] {
            for q in (0..64).chain([0xffff]) {
                for stage in [Stage::Stack, Stage::Residence] {
                    c.add(key_of(stage, Some(dev.into()), q).unwrap(), &hist(&[3000]));
                }
            }
        }
        for stage in [Stage::IrqToSoftirq, Stage::SoftirqRun] {
            c.add(key_of(stage, None, 0xffff).unwrap(), &hist(&[900]));
        }
        let feed = TraceFeed {
            state: Arc::new(Mutex::new(c)),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        let (families, status) = feed.families(&["eth0"]);
        assert!(status.is_ok());
        let text = crate::encode(families);
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(series, series_bound(1, 64), "{text}");
        assert!(!text.contains("other0"));
        assert!(text.contains(r#"netsteer_trace_stage_seconds_bucket{stage="stack",device="eth0",queue="backlog",le="0.000004096"} 1"#), "{text}");
    }
}
