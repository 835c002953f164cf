//! Seed 002's receive memory: a page pool that gives its pages back to the page allocator
//! instead of recycling them, so that every receive buffer after that is a slow-path
//! allocation (the seed's `page_pool_refill_alloc_cache` → `clear_page_erms` profile).
//!
//! The counters are the pool's since it was created (netdev netlink `page-pool-stats-get`,
//! one read): like counters since boot they say what the pool has done, not what it does
//! now, so the finding is information, says so, and points at `netsteer top`, which rates
//! them each interval. Pools fed by a memory provider (devmem dmabuf, io_uring zero-copy
//! receive) give their buffers back to the provider, not the page allocator: not judged here.

use crate::doctor::model::{Finding, Fix, Severity, Subjects};
use crate::model::ctx::{Ctx, pct};
use crate::model::knob::{IrqFile, Target, set_path};
use netsteer_host::ethtool::NicKnob;
use netsteer_host::field::Field;
use netsteer_host::netdev::{PagePool, PagePoolStats};
use netsteer_host::nic::Nic;

/// Pages a pool must have handed out before its recycling is judged: well past the fill of
/// any ring (a ring of 8192 descriptors fills with 8192 pages, every one of them a slow
/// allocation with nothing to recycle yet).
pub const HANDED_FLOOR: u64 = 65_536;

/// The share of the pages coming back that the pool freed instead of keeping, from which it
/// is found: each freed page is one the pool must later take from the page allocator.
pub const FREED_SHARE: f64 = 25.0;

/// A driver whose pools keep the ring they were made with whatever the rx ring becomes.
const FIXED_POOL_RING: &str = "virtio_net";

/// One pool's recycling, from its counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Recycling {
    /// Pages handed out: from the cache (`alloc_fast`, or `alloc_refill` for the page a refill
    /// from the ring hands out) or by the page allocator (`alloc_slow`,
    /// `alloc_slow_high_order`: each one call, and a slow order-0 call refills the cache
    /// with up to 64 pages that are then counted as fast).
    pub handed: u64,
    /// Pages kept for reuse: into the cache (`recycle_cached`) or the ring (`recycle_ring`),
    /// less the ring's pages then waived.
    pub kept: u64,
    /// Pages returned to the page allocator: the ring was full (`recycle_ring_full`), the page
    /// was still referenced elsewhere (`recycle_released_refcnt`), or it was of another NUMA
    /// node when the cache was refilled (`alloc_waive`).
    pub ring_full: u64,
    pub referenced: u64,
    pub other_node: u64,
}

impl Recycling {
    /// None when any counter it sums is absent (a kernel that sends fewer, a tree that lost
    /// one): absent is not zero, and the pool is then not judged ([`incomplete`]).
    pub fn of(s: &PagePoolStats) -> Option<Recycling> {
        let _all = (
            s.alloc_fast?,
            s.alloc_slow?,
            s.alloc_slow_high_order?,
            s.alloc_refill?,
        );
        Some(Recycling {
            handed: s.allocated()?,
            kept: s.kept()?,
            ring_full: s.recycle_ring_full?,
            referenced: s.recycle_released_refcnt?,
            other_node: s.alloc_waive?,
        })
    }

    pub fn freed(&self) -> u64 {
        self.ring_full
            .saturating_add(self.referenced)
            .saturating_add(self.other_node)
    }

    /// Pages that came back, kept or freed (a waived page once: it is in `freed`, not in
    /// `kept`).
    pub fn back(&self) -> u64 {
        self.kept.saturating_add(self.freed())
    }

    /// Freed pages as a share of those that came back, in %.
    pub fn freed_share(&self) -> f64 {
        let back = self.back();
        if back == 0 {
            0.0
        } else {
            self.freed() as f64 * 100.0 / back as f64
        }
    }
}

/// Why pages leave the pool, the largest part first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    RingFull,
    Referenced,
    OtherNode,
}

/// The largest part; on a tie the first of ring full, referenced, other node.
fn cause(r: &Recycling) -> Cause {
    let parts = [
        (Cause::RingFull, r.ring_full),
        (Cause::Referenced, r.referenced),
        (Cause::OtherNode, r.other_node),
    ];
    let max = parts.iter().map(|p| p.1).max().unwrap_or(0);
    parts
        .iter()
        .find(|p| p.1 == max)
        .map_or(Cause::RingFull, |p| p.0)
}

/// The live pools of a device with counters: not a detached pool (it only waits for its last
/// pages), nor one a memory provider feeds (its buffers go back to the provider).
fn live_pools(nic: &Nic) -> Vec<(&PagePool, &PagePoolStats)> {
    let Some(Ok(netdev)) = nic.settings.as_ref().map(|s| s.netdev()) else {
        return Vec::new();
    };
    let Some(Field::Known(pools)) = &netdev.page_pools else {
        return Vec::new();
    };
    pools
        .pools
        .iter()
        .filter(|p| p.detach_time.is_none() && p.dmabuf.is_none() && !p.io_uring)
        .filter_map(|p| Some((p, p.stats.as_ref()?)))
        .collect()
}

/// Why a live pool of `nic` cannot be judged: counters it has, but not every one the rule
/// sums. None when every pool can be.
pub fn incomplete(nic: &Nic) -> Option<String> {
    live_pools(nic)
        .into_iter()
        .find(|(_, s)| Recycling::of(s).is_none())
        .map(|(p, _)| format!("page pool {} counters: not every counter was sent", p.id))
}

/// A page count as the evidence prints it: exact below 10,000, then `12.3 k`, `4.5 M`.
pub fn count(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..1_000_000 => format!("{:.1} k", n as f64 / 1e3),
        _ => format!("{:.1} M", n as f64 / 1e6),
    }
}

pub fn page_pool_freeing(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for nic in ctx.traffic_nics() {
        let mut evidence = Vec::new();
        let mut queues = Vec::new();
        let mut irqs = Vec::new();
        let mut causes = Vec::new();
        for (pool, stats) in live_pools(nic) {
            // Incomplete counters are said by the rule's input (`incomplete`).
            let Some(r) = Recycling::of(stats) else {
                continue;
            };
            if r.handed < HANDED_FLOOR || r.freed_share() < FREED_SHARE {
                continue;
            }
            let served: Vec<u32> = nic.pool_queues(pool.id).map(|q| q.index).collect();
            let at = netsteer_host::netdev::pool_place(&served, pool.napi_id);
            evidence.push(format!(
                "page pool {} ({} {at}), since it was created: {} pages handed out ({} calls to the page allocator, {} of them with the pool's ring empty); of the {} that came back {} were kept (cache {}, ring {}) and {} ({}) freed: {} with the ring full, {} still referenced elsewhere, {} of another NUMA node",
                pool.id,
                nic.name,
                count(r.handed),
                count(stats.slow().unwrap_or(0)),
                count(stats.alloc_empty.unwrap_or(0)),
                count(r.back()),
                count(r.kept),
                count(stats.recycle_cached.unwrap_or(0)),
                // The ring's pages that stayed: less those waived when they left it.
                count(
                    stats
                        .recycle_ring
                        .unwrap_or(0)
                        .saturating_sub(r.other_node)
                ),
                count(r.freed()),
                pct(r.freed_share()),
                count(r.ring_full),
                count(r.referenced),
                count(r.other_node),
            ));
            if let Some(i) = pool.inflight {
                evidence.push(format!(
                    "page pool {}: {} pages in flight now",
                    pool.id,
                    count(i)
                ));
            }
            for q in nic.pool_queues(pool.id) {
                queues.push(format!("{}/rx-{}", nic.name, q.index));
                irqs.extend(q.irqs.iter().copied());
            }
            causes.push(cause(&r));
        }
        if causes.is_empty() {
            continue;
        }
        irqs.sort_unstable();
        irqs.dedup();
        let (summary, why, steps, tune) = advice(ctx, nic, &causes, &irqs, &mut evidence);
        out.push(Finding {
            id: "page-pool-freeing".into(),
            // Counters since the pool was made: a history, as averages since boot are.
            severity: Severity::Info,
            title: format!(
                "{}'s page pool has freed the pages it should recycle, so its receive buffers came from the page allocator",
                nic.name
            ),
            evidence,
            why,
            fix: Fix {
                summary,
                steps,
                tune,
            },
            subjects: Subjects {
                devices: vec![nic.name.clone()],
                queues,
                irqs,
                ..Default::default()
            },
        });
    }
    out
}

/// The fix for the causes seen on one device (the one most of its pools show): summary, why,
/// steps, and the `netsteer tune` that makes the change where there is one to make.
fn advice(
    ctx: &Ctx,
    nic: &Nic,
    causes: &[Cause],
    irqs: &[u32],
    evidence: &mut Vec<String>,
) -> (String, String, Vec<String>, Option<String>) {
    let top = |c: Cause| causes.iter().filter(|x| **x == c).count();
    // The cause most pools show; on a tie the first of ring full, referenced, other node
    // (max_by_key would take the last).
    let order = [Cause::RingFull, Cause::Referenced, Cause::OtherNode];
    let most = order.iter().map(|c| top(*c)).max().unwrap_or(0);
    let main = order
        .into_iter()
        .find(|c| top(*c) == most)
        .unwrap_or(Cause::RingFull);
    let dev = &nic.name;
    let mut steps = Vec::new();
    // `--profile none`: only the knob this finding is about, journaled and rolled back as
    // any other item.
    let set = |knobs: &[String]| {
        (!knobs.is_empty()).then(|| {
            let sets: Vec<String> = knobs.iter().map(|k| format!(" --set {k}")).collect();
            format!(
                "netsteer tune apply --profile none --dev {dev}{}",
                sets.concat()
            )
        })
    };
    match main {
        Cause::RingFull => {
            let rings = nic.settings.as_ref().and_then(|s| s.rings.known());
            let mut knobs = Vec::new();
            let ring = rings.and_then(|r| Some((r.rx?, r.rx_max?)));
            if let Some((rx, max)) = ring {
                evidence.push(format!("rx ring: {rx} descriptors of at most {max}"));
            }
            if nic.driver.known().is_some_and(|d| d == FIXED_POOL_RING) {
                // Measured on Debian's 7.3 (crates/cli/tests/vm_pool.rs): with the rx ring at
                // 64 after a link down and up, the same pool's ring still takes some 256
                // pages of a drained socket before it frees the rest.
                evidence.push(format!(
                    "{FIXED_POOL_RING} keeps the pools it made at probe, ring and all, across ring resizes and a link down and up (measured on 7.3): a longer rx ring would not help"
                ));
            } else if let Some((rx, max)) = ring
                && rx < max
            {
                steps.push(format!("ethtool -G {dev} rx {max}"));
                let ring = Target::Nic {
                    dev: dev.clone(),
                    knob: NicKnob::Rings("rx".into()),
                };
                knobs.extend(set_path(&ring).map(|p| format!("{p}={max}")));
            }
            steps.push(
                "ss -u -a -n -p   # Recv-Q: bytes each receiver holds unread, every datagram of it in a page kept out of the pool".into(),
            );
            steps.push(format!(
                "netsteer top --plain --count 5   # {dev}'s pools' pages kept and freed each second: whether they free now"
            ));
            (
                "see which receivers sit on many pages (Recv-Q) and whether the pool still frees (`netsteer top`); a longer rx ring helps only where the driver sizes its pool by it".into(),
                "A page freed outside the queue's NAPI goes into the pool's ring (a ptr_ring sized when the pool is created, from the rx ring in drivers that pass it as pool_size); when that ring is full the page is released to the page allocator (net/core/page_pool.c, recycle_ring_full), and the pool later pays a slow-path allocation for it. Pages come back in bursts larger than the ring when sockets hold many packets and then drain at once (measured on virtio_net: all but the ring's pages of a held socket freed), and frees from process context go to the ring, which the NAPI drains only when its cache runs empty.".into(),
                steps,
                set(&knobs),
            )
        }
        Cause::Referenced => {
            steps.push(
                "grep -E 'MemFree|MemAvailable' /proc/meminfo   # pages taken from the emergency reserves (pfmemalloc) are never recycled".into(),
            );
            steps.push(format!(
                "netsteer top --plain --count 5   # {dev}'s pools' pages kept and freed each second: whether they free now"
            ));
            (
                "find what keeps a reference to receive pages when they come back (a zero-copy receiver that keeps them mapped, splice or vmsplice into a pipe) or whether memory ran so low that the pool got reserve pages, and release or avoid them".into(),
                "A page is recycled only when the pool holds its last reference and it is not a pfmemalloc page (net/core/page_pool.c, __page_pool_page_can_be_recycled); a page still mapped by TCP_ZEROCOPY_RECEIVE or held by splice, or one allocated from the emergency reserves, is released to the page allocator instead (recycle_released_refcnt), so the pool allocates anew for every such page.".into(),
                steps,
                None,
            )
        }
        Cause::OtherNode => {
            let mut knobs = Vec::new();
            if let Some(n) = ctx.nic_node(nic) {
                let cpus = ctx.local_cpus(nic).to_list();
                for irq in irqs {
                    let file = Target::IrqAffinity {
                        irq: *irq,
                        file: IrqFile::List,
                    }
                    .path()
                    .unwrap_or_default();
                    steps.push(format!("echo {cpus} > {file}   # node {n}"));
                    knobs.push(format!("{file}={cpus}"));
                }
            }
            if steps.is_empty() {
                steps.push(format!(
                    "netsteer show --dev {dev}   # where the queue's IRQ and NAPI run"
                ));
            }
            (
                "keep the pool's NAPI on CPUs of one NUMA node (the device's, unless the driver gives each channel's pool a node of its own), so the pages recycled are of the node it allocates on".into(),
                "When a pool refills its cache from its ring it drops pages of another NUMA node than its own (the driver's pool node, else the node of the CPU running the NAPI; net/core/page_pool.c, alloc_waive): a NAPI whose IRQ moves between nodes frees the pages it recycled on the other and allocates new ones, the cross-node loss seed 002 measured. Counted since the pool was made, this may be history: `netsteer top` says whether it goes on.".into(),
                steps,
                set(&knobs),
            )
        }
    }
}
