//! `netsteer top`'s sampler: two readings of the counters an interval apart become one
//! [`TopInterval`] — per-CPU rates, per-queue IRQ rates labelled from the NIC model, and the
//! driver's per-queue packet counters where a device keeps them.

use crate::HostFs;
use crate::balance::{self, IntervalBalance, IrqRoles};
use crate::error::Result;
use crate::netdev::QueueStats;
use crate::sample::{
    CounterSample, PoolCounters, PoolRate, QueueCounters, QueuePackets, QueueRate, Rates,
    TopInterval, pool_rates, queue_rates, rates, read_sample,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A device's per-queue counters (netdev qstats over netlink), or why not.
pub type QueueStatsSource = Box<dyn Fn(&str) -> std::result::Result<Vec<QueueStats>, String>>;

/// The page pools on the live host (netdev netlink): every pool read now, and a device's
/// receive queues by NAPI (to put a pool on its queue).
pub struct PoolSource {
    pub pools:
        Box<dyn Fn() -> std::result::Result<crate::netdev::PagePools, crate::netdev::PoolsError>>,
    pub rx_queues_by_napi: Box<dyn Fn(&str) -> NapiLookup>,
}

/// A device's receive queues by NAPI, or why they could not be read.
pub type NapiLookup = std::result::Result<NapiQueues, String>;

/// A device's receive queue by the NAPI serving it.
pub type NapiQueues = BTreeMap<u32, u32>;

/// IRQ → (nic, queue label), from the NIC model.
pub type IrqLabels = BTreeMap<u32, (String, String)>;

fn interval_message(
    r: Rates,
    labels: &IrqLabels,
    queue_packets: Vec<QueuePackets>,
    page_pools: Vec<PoolRate>,
    measured: IntervalBalance,
    problems: Vec<String>,
) -> TopInterval {
    let queues = r
        .irqs
        .into_iter()
        .filter_map(|i| {
            let (nic, queue) = labels.get(&i.irq)?.clone();
            Some(QueueRate {
                nic,
                queue,
                irq: i.irq,
                name: i.name,
                per_cpu: i.per_cpu,
                total: i.total,
            })
        })
        .collect();
    TopInterval {
        kind: "interval".into(),
        time_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        interval_s: r.interval_s,
        cpus: r.cpus,
        queues,
        went_offline: r.went_offline,
        queue_packets,
        page_pools,
        balance: measured.balance,
        balance_since_boot: measured.balance_since_boot,
        interrupts: measured.interrupts,
        problems,
    }
}

pub struct Sampler {
    fs: HostFs,
    queue_stats: Option<QueueStatsSource>,
    labels: IrqLabels,
    roles: IrqRoles,
    /// Each device's `queues/` listing when the roles were last named: `ethtool -L` turns
    /// queues on and off under vectors that stay (virtio_net), so the live roles are named
    /// again when it changes, not only when /proc/interrupts does.
    queue_dirs: QueueDirs,
    wanted: BTreeSet<u32>,
    /// The devices that keep per-queue counters (the others are not asked again).
    qdevs: Vec<String>,
    prev: CounterSample,
    prev_q: QueueCounters,
    pools: Option<PoolSource>,
    /// Device names by ifindex, and each device's receive queue by (device, NAPI).
    pool_names: BTreeMap<u32, String>,
    pool_queues: BTreeMap<(String, u32), u32>,
    prev_pools: PoolCounters,
    /// The NAPIs each device was last asked about, so that a NAPI no queue names (a PTP or
    /// XDP queue's, a driver that links none) is not asked about every interval.
    asked: BTreeMap<String, BTreeSet<u32>>,
    /// The pool problem said last: said again only when it changes.
    pool_problem: Option<String>,
    prev_at: Instant,
}

impl Sampler {
    /// Takes the first sample. One read of every device's queue counters tells which devices
    /// keep them at all (the others' errors are not problems).
    pub fn new(
        fs: HostFs,
        queue_stats: Option<QueueStatsSource>,
        pools: Option<PoolSource>,
    ) -> Result<Sampler> {
        let view = crate::read_host(&fs, None);
        let pool_names = pool_names(&view);
        let (roles, labels, wanted) = name_vectors(&view);
        let queue_dirs = queue_dirs(&fs, &view);
        let all: Vec<String> = view.nics.iter().map(|n| n.name.clone()).collect();
        let mut ignored = Vec::new();
        let prev_q = read_queues(queue_stats.as_ref(), &all, &mut ignored);
        let qdevs = all
            .into_iter()
            .filter(|d| prev_q.keys().any(|(n, _, _)| n == d))
            .collect();
        Ok(Sampler {
            prev: read_sample(&fs)?,
            fs,
            queue_stats,
            labels,
            roles,
            queue_dirs,
            wanted,
            qdevs,
            prev_q,
            prev_pools: read_pools(pools.as_ref()).0,
            pools,
            pool_names,
            pool_queues: BTreeMap::new(),
            asked: BTreeMap::new(),
            pool_problem: None,
            prev_at: Instant::now(),
        })
    }

    /// Reads the counters again: the rates since the last call.
    pub fn sample(&mut self) -> Result<TopInterval> {
        let cur = read_sample(&self.fs)?;
        let mut problems = cur.problems.clone();
        // Vectors come and go with the channels (ethtool -L), a driver reload or a device
        // added: the queues are named again from the NIC model, not kept from the start.
        let relaid = vector_layout(&cur) != vector_layout(&self.prev);
        // The same vectors: the same devices have them, so their listings are compared.
        let dirs = (!relaid).then(|| queue_dirs_of(&self.fs, self.queue_dirs.keys()));
        if let Some(dirs) = dirs.filter(|d| *d != self.queue_dirs) {
            let view = crate::read_host(&self.fs, None);
            self.roles = name_vectors(&view).0;
            self.queue_dirs = dirs;
            problems.push(
                "a device's queues changed since the last interval (ethtool -L): the balance counts the queues it has now"
                    .into(),
            );
        }
        if relaid {
            let view = crate::read_host(&self.fs, None);
            (self.roles, self.labels, self.wanted) = name_vectors(&view);
            self.queue_dirs = queue_dirs(&self.fs, &view);
            // A device added: its pools are named after it from now on, and every device's
            // queues are looked up again (channels change with the vectors). A rename alone
            // moves no vector and is not seen here.
            self.pool_names = pool_names(&view);
            self.asked.clear();
            problems.push(
                "the IRQs in /proc/interrupts changed since the last interval: the queues' vectors were named again (an IRQ new in this interval has no rate yet)"
                    .into(),
            );
        }
        let cur_q = read_queues(self.queue_stats.as_ref(), &self.qdevs, &mut problems);
        let (cur_pools, problem) = read_pools(self.pools.as_ref());
        if problem != self.pool_problem {
            problems.extend(problem.clone());
            self.pool_problem = problem;
        }
        let at = Instant::now();
        let dt = (at - self.prev_at).as_secs_f64();
        let r = rates(&self.prev, &cur, dt, Some(&self.wanted));
        let qp = queue_rates(&self.prev_q, &cur_q, dt);
        self.map_pool_queues(&cur_pools, &mut problems);
        let pp = pool_rates(
            &self.prev_pools,
            &cur_pools,
            &self.pool_names,
            &self.pool_queues,
            dt,
        );
        let measured = balance::interval(&self.roles, &self.prev, &cur, &r, &qp, &cur_q);
        if !self.fs.is_live() {
            // A tree is one moment: both samples read the same counters.
            problems.insert(
                0,
                format!(
                    "--root {}: rates need two live samples and a tree holds one moment, so every rate is 0; run top on the live host (or `doctor --root` for since-boot averages)",
                    self.fs.root().display()
                ),
            );
        }
        self.prev = cur;
        self.prev_q = cur_q;
        self.prev_pools = cur_pools;
        self.prev_at = at;
        Ok(interval_message(
            r,
            &self.labels,
            qp,
            pp,
            measured,
            problems,
        ))
    }

    /// Asks a device for its queues' NAPIs when the NAPIs its pools name are not those it was
    /// last asked about (the first interval, or channels changed): not every interval.
    fn map_pool_queues(&mut self, pools: &PoolCounters, problems: &mut Vec<String>) {
        let Some(src) = &self.pools else { return };
        let mut named: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for p in pools.values() {
            if let (Some(ix), Some(napi)) = (p.ifindex, p.napi_id)
                && let Some(dev) = self.pool_names.get(&ix)
            {
                named.entry(dev.clone()).or_default().insert(napi);
            }
        }
        for (dev, napis) in named {
            if self.asked.get(&dev) == Some(&napis) {
                continue;
            }
            match (src.rx_queues_by_napi)(&dev) {
                Ok(by_napi) => {
                    self.pool_queues.retain(|(d, _), _| *d != dev);
                    for (n, q) in by_napi {
                        self.pool_queues.insert((dev.clone(), n), q);
                    }
                    // A NAPI no queue names (a PTP or XDP queue's) stays "NAPI n" and is not
                    // asked about again until the pools' NAPIs or the vectors change.
                    self.asked.insert(dev, napis);
                }
                // Said, and asked again next interval.
                Err(e) => problems.push(format!("{dev}: its queues' NAPIs (queue-get): {e}")),
            }
        }
    }
}

/// Device names by ifindex.
fn pool_names(view: &crate::HostView) -> BTreeMap<u32, String> {
    view.nics
        .iter()
        .filter_map(|n| Some((*n.ifindex.known()?, n.name.clone())))
        .collect()
}

/// Each device's `queues/` entries (or why they could not be listed), by device.
type QueueDirs = BTreeMap<String, Result<Vec<String>, String>>;

/// Of the devices with queue vectors only (a host of thousands of veths has none to count,
/// and one deleted must not read as a channel change).
fn queue_dirs(fs: &HostFs, view: &crate::HostView) -> QueueDirs {
    queue_dirs_of(
        fs,
        view.nics
            .iter()
            .filter(|n| n.queue_irqs().next().is_some())
            .map(|n| &n.name),
    )
}

fn queue_dirs_of<'a>(fs: &HostFs, names: impl Iterator<Item = &'a String>) -> QueueDirs {
    names
        .map(|n| {
            let listed = fs
                .read_dir(format!("{}/{n}/queues", crate::nic::NET_DIR))
                .map(|mut v| {
                    v.sort();
                    v
                })
                .map_err(|e| e.to_string());
            (n.clone(), listed)
        })
        .collect()
}

/// Every pool, by id, and the problem to say: a failed read, or counters the kernel does not
/// give (a kernel without page pools at all is none: its hosts have no pools to rate).
fn read_pools(source: Option<&PoolSource>) -> (PoolCounters, Option<String>) {
    let Some(src) = source else {
        return (PoolCounters::new(), None);
    };
    match (src.pools)() {
        Ok(p) => {
            let problem = p
                .stats_unavailable
                .filter(|_| !p.pools.is_empty())
                .map(|w| format!("page pools: no rates: {w}"));
            (p.pools.into_iter().map(|p| (p.id, p)).collect(), problem)
        }
        Err(crate::netdev::PoolsError::NotKept(_)) => (PoolCounters::new(), None),
        Err(e) => (PoolCounters::new(), Some(format!("page pools: {e}"))),
    }
}

/// The roles of the vectors of the queues the devices have now (for the balance), and every
/// NIC queue vector's label and the IRQs to rate (a vector of a queue turned off is still
/// shown, at its rate), from the NIC model.
fn name_vectors(view: &crate::HostView) -> (IrqRoles, IrqLabels, BTreeSet<u32>) {
    let roles = balance::live_queue_roles(view);
    let labels: IrqLabels = balance::irq_roles(view)
        .iter()
        .map(|(irq, (nic, role))| (*irq, (nic.clone(), role.to_string())))
        .collect();
    let wanted = labels.keys().copied().collect();
    (roles, labels, wanted)
}

/// The numbered IRQs of a sample and their handlers' names: what the vectors' names depend on.
fn vector_layout(s: &CounterSample) -> Option<Vec<(u32, &[String])>> {
    s.interrupts.as_ref().map(|i| {
        i.rows
            .iter()
            .filter_map(|r| Some((r.number()?, r.actions.as_slice())))
            .collect()
    })
}

/// Every queue counter of the devices that keep them, by device and queue; a device whose
/// counters could not be read is a problem named after it.
pub fn read_queues(
    source: Option<&QueueStatsSource>,
    devices: &[String],
    problems: &mut Vec<String>,
) -> QueueCounters {
    let mut all = QueueCounters::new();
    let Some(source) = source else { return all };
    for d in devices {
        match source(d) {
            Ok(qs) => all.extend(qs.into_iter().map(|q| ((d.clone(), q.kind, q.id), q))),
            Err(e) => problems.push(format!("{d}: per-queue counters: {e}")),
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netdev::QueueType;

    #[test]
    fn queue_counter_rates_are_printed_and_serialized_only_where_there_are_some() {
        let r = Rates {
            interval_s: 1.0,
            ..Rates::default()
        };
        let busy = QueuePackets {
            nic: "eth0".into(),
            kind: QueueType::Rx,
            queue: 3,
            packets_per_s: Some(1500.0),
            bytes_per_s: Some(2_000_000.0),
        };
        let idle = QueuePackets {
            queue: 4,
            packets_per_s: Some(0.0),
            ..busy.clone()
        };
        let m = interval_message(
            r.clone(),
            &IrqLabels::new(),
            vec![busy, idle],
            vec![],
            IntervalBalance::default(),
            vec![],
        );
        let lines = crate::text::top_interval(&m, 1);
        let q: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("queue counters"))
            .collect();
        assert_eq!(q.len(), 1, "{lines:#?}");
        assert!(
            q[0].contains("eth0 rx-3: 1500 pkt/s 2000000 B/s"),
            "{}",
            q[0]
        );
        let back: TopInterval = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back.queue_packets, m.queue_packets);
        // Devices without queue counters add nothing to the JSON.
        let none = interval_message(
            r,
            &IrqLabels::new(),
            vec![],
            vec![],
            IntervalBalance::default(),
            vec![],
        );
        assert!(
            !serde_json::to_string(&none)
                .unwrap()
                .contains("queue_packets")
        );
    }

    /// A device even since boot whose last interval went to one queue: the interval's figure
    /// moves, the since-boot one does not; the platform's rate is the `intr` line's.
    #[test]
    fn the_intervals_balance_moves_where_the_since_boot_one_does_not() {
        let stat = |intr: u64| {
            format!("cpu  1 0 1 100 0 0 0 0 0 0\ncpu0 1 0 1 100 0 0 0 0 0 0\nintr {intr} 0\n")
        };
        let ints = |a: u64, b: u64| {
            format!(
                "           CPU0\n  30:   {a}  PCI-MSIX-0000:00:03.0 1-edge  eth0-rx-0\n  31:   {b}  PCI-MSIX-0000:00:03.0 2-edge  eth0-rx-1\n   1:   {a}  IO-APIC   1-edge  i8042\n"
            )
        };
        let prev = crate::sample::parse_sample(
            &stat(100_000),
            None,
            Some(&ints(10_000, 10_000)),
            None,
            None,
        )
        .unwrap();
        let cur = crate::sample::parse_sample(
            &stat(102_000),
            None,
            Some(&ints(10_900, 10_100)),
            None,
            None,
        )
        .unwrap();
        let roles: IrqRoles = [
            (30, ("eth0".to_string(), crate::irqname::IrqRole::Rx(0))),
            (31, ("eth0".to_string(), crate::irqname::IrqRole::Rx(1))),
        ]
        .into();
        let wanted = roles.keys().copied().collect();
        let r = rates(&prev, &cur, 1.0, Some(&wanted));
        let m = balance::interval(&roles, &prev, &cur, &r, &[], &QueueCounters::new());
        assert_eq!(m.balance.len(), 1, "{:#?}", m.balance);
        let now = &m.balance[0];
        assert_eq!(now.of, balance::BalanceOf::RxInterrupts);
        assert!((now.spread.unwrap() - 1.6).abs() < 1e-9, "{now:?}");
        let boot = &m.balance_since_boot[0];
        assert!(boot.spread.unwrap() < 0.08, "{boot:?}");
        assert_eq!(m.interrupts.total_per_s, Some(2000.0));
        // Both MSI rows (900 + 100); the IO-APIC row is not one.
        assert_eq!(m.interrupts.msi_per_s, Some(1000.0));
        assert_eq!(m.interrupts.nic_queues_per_s, Some(1000.0));
        // Every numbered row, the IO-APIC one too; the ceiling compares these.
        assert_eq!(m.interrupts.device_per_s, Some(1900.0));
        assert!((m.interrupts.of_ceiling().unwrap() - 1.9e-3).abs() < 1e-12);
        let msg = interval_message(r, &IrqLabels::new(), vec![], vec![], m, vec![]);
        let lines = crate::text::top_interval(&msg, 1);
        let line = lines.iter().find(|l| l.contains("balance eth0")).unwrap();
        assert!(
            line.contains("rx interrupts over 2 queues: CV 0.80 spread 1.60 (1000/s, busiest rx-0 90 %); since boot CV 0.04 spread 0.08"),
            "{line}"
        );
        assert!(
            lines.iter().any(|l| l
                .starts_with("  interrupts 1900/s from devices, MSI 1000/s, NIC queues 1000/s, all with timer and IPIs 2000/s: 0.2 % of 1 M/s")),
            "{lines:#?}"
        );
        let back: TopInterval =
            serde_json::from_str(&serde_json::to_string(&msg).unwrap()).unwrap();
        assert_eq!(back.balance, msg.balance);
        assert_eq!(back.interrupts, msg.interrupts);
    }

    /// A copy of a fixture tree (`cp -a` keeps its links as links).
    fn scratch(host: &str) -> tempfile::TempDir {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/hosts")
            .join(host);
        let tmp = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", fixture.display()))
            .arg(tmp.path())
            .status()
            .unwrap();
        assert!(st.success());
        tmp
    }

    /// A real virtio-net guest (6.12) with 2 of its 4 channels on keeps the vectors of all 4:
    /// the balance counts those of rx-0/1 and tx-0/1 only (top still rates and labels all),
    /// and counts the others once `ethtool -L` turns their queues on, vectors unchanged.
    #[test]
    fn the_balance_counts_the_queues_the_device_has_now() {
        let tmp = scratch("virtio-rss-6.12");
        let mut sampler = Sampler::new(HostFs::new(tmp.path()), None, None).unwrap();
        let counted = |s: &Sampler| s.roles.keys().copied().collect::<Vec<u32>>();
        // 24 is the config vector (no queue's); 25-28 input/output.0 and .1.
        assert_eq!(counted(&sampler), [24, 25, 26, 27, 28]);
        assert!(sampler.wanted.contains(&31) && sampler.labels.contains_key(&31));
        let first = sampler.sample().unwrap();
        let rx = |m: &TopInterval| {
            m.balance_since_boot
                .iter()
                .find(|b| b.of == balance::BalanceOf::RxInterrupts)
                .cloned()
                .unwrap()
        };
        // Since boot, rx-0 took 6283 and rx-1 none (the table put every bucket on rx-0).
        assert_eq!((rx(&first).queues, rx(&first).total), (2, 6283.0));
        for q in ["rx-2", "tx-2"] {
            std::fs::create_dir(tmp.path().join("sys/class/net/eth0/queues").join(q)).unwrap();
        }
        let second = sampler.sample().unwrap();
        assert!(
            second.problems.iter().any(|p| p.contains("queues changed")),
            "{:?}",
            second.problems
        );
        assert_eq!(counted(&sampler), [24, 25, 26, 27, 28, 29, 30]);
        assert_eq!(rx(&second).queues, 3);
        let third = sampler.sample().unwrap();
        assert!(!third.problems.iter().any(|p| p.contains("queues changed")));
    }

    /// A vector whose handler changes (channels cut, a driver reloaded) is named again from
    /// the NIC model at the next interval, not kept under its old queue's name.
    #[test]
    fn the_vectors_are_named_again_when_the_irqs_change() {
        let tmp = scratch("virtio-rss-6.12");
        let mut sampler = Sampler::new(HostFs::new(tmp.path()), None, None).unwrap();
        let named = |s: &Sampler| s.labels.get(&31).cloned();
        assert_eq!(
            named(&sampler),
            Some(("eth0".to_string(), "rx-3".to_string())),
            "{:?}",
            sampler.labels
        );
        let first = sampler.sample().unwrap();
        assert!(!first.problems.iter().any(|p| p.contains("named again")));
        let path = tmp.path().join("proc/interrupts");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("virtio2-input.3", "nvme0q1")).unwrap();
        let second = sampler.sample().unwrap();
        assert!(
            second.problems.iter().any(|p| p.contains("named again")),
            "{:?}",
            second.problems
        );
        let before = Some(("eth0".to_string(), "rx-3".to_string()));
        assert_ne!(named(&sampler), before, "{:?}", sampler.labels);
        let third = sampler.sample().unwrap();
        assert!(!third.problems.iter().any(|p| p.contains("named again")));
    }

    /// A device's queues are looked up once for its pools' NAPIs (not every interval, not
    /// again for a NAPI no queue names), again when they change or the lookup failed; a pool
    /// read that fails is said once, not every interval.
    #[test]
    fn pool_queues_are_looked_up_when_the_napis_change_and_a_failure_is_said_once() {
        use crate::netdev::{PagePool, PagePools};
        use std::cell::{Cell, RefCell};
        use std::rc::Rc;
        let tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/hosts/zoo-virtio-pool-freeing-7.3");
        let pool = |id: u64, napi: u32| PagePool {
            id,
            ifindex: Some(2),
            napi_id: Some(napi),
            ..Default::default()
        };
        // What the kernel answers, changed by the test between intervals.
        let pools: Rc<RefCell<Result<Vec<PagePool>, String>>> = Rc::new(RefCell::new(Ok(vec![
            pool(3, 8193),
            pool(4, 8194),
            pool(5, 9999),
        ])));
        let lookups = Rc::new(Cell::new(0));
        let fail = Rc::new(Cell::new(true));
        let (p, l, f) = (pools.clone(), lookups.clone(), fail.clone());
        let src = PoolSource {
            pools: Box::new(move || {
                p.borrow()
                    .clone()
                    .map(|pools| PagePools {
                        pools,
                        stats_unavailable: None,
                    })
                    .map_err(crate::netdev::PoolsError::Failed)
            }),
            rx_queues_by_napi: Box::new(move |dev: &str| {
                assert_eq!(dev, "eth0");
                l.set(l.get() + 1);
                if f.get() {
                    return Err("queue-get: Interrupted system call".into());
                }
                // 9999 serves no queue (an XDP or PTP queue's NAPI).
                Ok(BTreeMap::from([(8193, 0), (8194, 1)]))
            }),
        };
        let mut s = Sampler::new(HostFs::new(&tree), None, Some(src)).unwrap();
        // A failed lookup is said and asked again.
        let m = s.sample().unwrap();
        assert!(
            m.problems
                .iter()
                .any(|p| p.contains("queue-get: Interrupted")),
            "{:?}",
            m.problems
        );
        fail.set(false);
        let m = s.sample().unwrap();
        assert_eq!(lookups.get(), 2);
        let rx: BTreeMap<u64, Vec<u32>> = m
            .page_pools
            .iter()
            .map(|p| (p.pool, p.rx_queues.clone()))
            .collect();
        assert_eq!(
            rx,
            BTreeMap::from([(3, vec![0]), (4, vec![1]), (5, vec![])])
        );
        // Nothing changed: not asked again, though NAPI 9999 has no queue.
        s.sample().unwrap();
        assert_eq!(lookups.get(), 2);
        // A new pool on a NAPI not seen (channels changed): asked again.
        pools.borrow_mut().as_mut().unwrap().push(pool(6, 8195));
        s.sample().unwrap();
        assert_eq!(lookups.get(), 3);
        // The pool read fails: said once, then not again while it stays the same.
        *pools.borrow_mut() = Err("page-pool-get: No buffer space available".into());
        let said = |m: &TopInterval| {
            m.problems
                .iter()
                .filter(|p| p.contains("page-pool-get"))
                .count()
        };
        assert_eq!(said(&s.sample().unwrap()), 1);
        assert_eq!(said(&s.sample().unwrap()), 0);
    }

    /// A kernel that keeps no pool list (before 6.8, no netdev family) has none to rate: no
    /// problem said; a failed read is one. Told by the error's kind, not its words.
    #[test]
    fn no_pool_list_on_this_kernel_is_no_problem_and_a_failure_is_one() {
        use crate::netdev::PoolsError;
        let src = |e: PoolsError| PoolSource {
            pools: Box::new(move || Err(e.clone())),
            rx_queues_by_napi: Box::new(|_| Ok(BTreeMap::new())),
        };
        let quiet = src(PoolsError::NotKept("no PAGE_POOL_GET".into()));
        assert_eq!(read_pools(Some(&quiet)).1, None);
        let failed = src(PoolsError::Failed("no PAGE_POOL_GET".into()));
        assert_eq!(
            read_pools(Some(&failed)).1.as_deref(),
            Some("page pools: no PAGE_POOL_GET")
        );
    }
}
