//! What the `netdev` generic netlink family tells about a device (read by `netsteer-nic`;
//! Documentation/netlink/specs/netdev.yaml): its NAPI instances with their per-NAPI settings,
//! which queue each NAPI serves, per-queue counters, and XDP features. None of it is in sysfs:
//! per-NAPI `defer-hard-irqs`, `gro-flush-timeout`, `irq-suspend-timeout` and `threaded` can
//! differ from the device-wide sysfs files, which only report what was last written there.

use serde::{Deserialize, Serialize};

/// One NAPI instance (NETDEV_CMD_NAPI_GET).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Napi {
    pub id: u32,
    /// The hard IRQ that schedules it; absent for drivers that do not link it (virtio_net,
    /// veth), where the IRQ is found by name in /proc/interrupts or there is none.
    pub irq: Option<u32>,
    /// The kthread polling it when threaded (`napi/<dev>-<id>`).
    pub pid: Option<u32>,
    pub defer_hard_irqs: Option<u32>,
    pub gro_flush_timeout_ns: Option<u64>,
    /// IRQ suspension (6.13): how long a busy-polling application may keep the queue's
    /// interrupts off (acts only with prefer-busy-poll, Documentation/networking/napi.rst).
    pub irq_suspend_timeout_ns: Option<u64>,
    /// netdev.yaml `napi-threaded`: 0 disabled, 1 enabled, 2 busy-poll (6.19); a later
    /// kernel's value is kept as it is. Records written when this was a bool read as 0/1.
    #[serde(default, deserialize_with = "threaded_mode")]
    pub threaded: Option<u32>,
}

/// `threaded` as a number, also from the `true`/`false` of records made before busy-poll.
pub fn threaded_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Flag(bool),
        Mode(u32),
    }
    Ok(Option::<Either>::deserialize(d)?.map(|e| match e {
        Either::Flag(b) => u32::from(b),
        Either::Mode(m) => m,
    }))
}

/// rx or tx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueType {
    Rx,
    Tx,
}

impl std::fmt::Display for QueueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QueueType::Rx => "rx",
            QueueType::Tx => "tx",
        })
    }
}

/// One queue (NETDEV_CMD_QUEUE_GET) and the NAPI serving it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queue {
    pub id: u32,
    #[serde(rename = "type")]
    pub kind: QueueType,
    pub napi_id: Option<u32>,
    /// An AF_XDP socket is bound to it.
    #[serde(default)]
    pub xsk: bool,
}

/// Per-queue counters (NETDEV_CMD_QSTATS_GET, scope queue), where the driver keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    #[serde(rename = "type")]
    pub kind: QueueType,
    pub id: u32,
    pub packets: Option<u64>,
    pub bytes: Option<u64>,
    /// rx: allocation failures and hardware drops; tx: hardware drops.
    pub drops: Option<u64>,
}

/// Everything the family reports for one device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Netdev {
    pub napis: Vec<Napi>,
    pub queues: Vec<Queue>,
    /// Empty when the driver keeps no per-queue counters.
    #[serde(default)]
    pub qstats: Vec<QueueStats>,
    /// XDP feature flags (NETDEV_XDP_ACT_*: basic 1, redirect 2, ndo-xmit 4, xsk-zerocopy 8,
    /// hw-offload 16, rx-sg 32, ndo-xmit-sg 64).
    pub xdp_features: Option<u64>,
    pub xdp_zc_max_segs: Option<u32>,
    /// The device's page pools (NETDEV_CMD_PAGE_POOL_GET, 6.8); absent in trees captured
    /// before netsteer read them, unknown with the reason on a kernel without the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_pools: Option<crate::field::Field<PagePools>>,
}

/// Why the page pools could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolsError {
    /// This kernel keeps no list of them: no netdev netlink family (before 6.3), or no
    /// PAGE_POOL_GET (before 6.8, or built without CONFIG_PAGE_POOL). Its devices have no pool
    /// to rate, which is no failure.
    #[error("{0}")]
    NotKept(String),
    /// Asking failed (the dump refused, the socket broken): the pools are unknown.
    #[error("{0}")]
    Failed(String),
}

/// The page pools of one device and whether their counters could be read.
///
/// A pool is listed only when its driver registered it with the device (`page_pool_params.
/// netdev`, net/core/page_pool_user.c): veth's pools, for one, are not, so "no pool" means none
/// the kernel will name, not that the driver allocates without one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePools {
    pub pools: Vec<PagePool>,
    /// Why the pools carry no counters (`stats: null`), when they do not: the kernel was built
    /// without CONFIG_PAGE_POOL_STATS (the family then lacks PAGE_POOL_STATS_GET), or the
    /// dump failed. Never zeros in their place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_unavailable: Option<String>,
}

/// One page pool (netdev.yaml `page-pool`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePool {
    pub id: u64,
    pub ifindex: Option<u32>,
    /// The NAPI it serves, hence its receive queue; absent for a pool not tied to one.
    pub napi_id: Option<u32>,
    /// Pages (or net_iovs) handed out and not yet returned.
    pub inflight: Option<u64>,
    /// Their memory in bytes.
    pub inflight_mem: Option<u64>,
    /// CLOCK_BOOTTIME seconds at which the pool was detached from its device (it lingers
    /// until its pages come back); absent while it can still allocate.
    pub detach_time: Option<u64>,
    /// A dmabuf memory provider (devmem TCP) feeds it.
    pub dmabuf: Option<u32>,
    /// An io_uring zero-copy receive area feeds it.
    #[serde(default)]
    pub io_uring: bool,
    /// Since-creation counters (NETDEV_CMD_PAGE_POOL_STATS_GET); None when unavailable (see
    /// `PagePools::stats_unavailable`).
    pub stats: Option<PagePoolStats>,
}

/// struct page_pool_stats (include/net/page_pool/types.h), each counter as the kernel sent it
/// (absent: not sent). Allocation: `fast` from the pool's lockless cache, `slow` from the page
/// allocator (order 0) or `slow_high_order`, `empty` when the ptr_ring was empty and the
/// allocator had to be asked, `refill` cache refills from the ring, `waive` pages of the wrong
/// NUMA node not taken. Recycling: into the cache (`cached`), refused by a full cache
/// (`cache_full`), into the ring (`ring`), refused by a full ring (`ring_full`, the page is
/// freed), and pages released because something else held a reference (`released_refcnt`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePoolStats {
    pub alloc_fast: Option<u64>,
    pub alloc_slow: Option<u64>,
    pub alloc_slow_high_order: Option<u64>,
    pub alloc_empty: Option<u64>,
    pub alloc_refill: Option<u64>,
    pub alloc_waive: Option<u64>,
    pub recycle_cached: Option<u64>,
    pub recycle_cache_full: Option<u64>,
    pub recycle_ring: Option<u64>,
    pub recycle_ring_full: Option<u64>,
    pub recycle_released_refcnt: Option<u64>,
}

impl PagePoolStats {
    /// Allocations counted: from the cache and from the page allocator. Not a page count of
    /// either path: `alloc_slow` counts one refill of up to PP_ALLOC_CACHE_REFILL (64) pages,
    /// whose pages are then handed out from the cache and counted as `alloc_fast`
    /// (net/core/page_pool.c), so no share of "slow" pages is derived from them.
    ///
    /// `alloc_refill` is one of them too: a cache refilled from the ring hands out its last
    /// page counted as `refill` only (page_pool_refill_alloc_cache).
    pub fn allocated(&self) -> Option<u64> {
        known_sum(&[
            self.alloc_fast,
            self.alloc_slow,
            self.alloc_slow_high_order,
            self.alloc_refill,
        ])
    }

    /// Pages returned to the pool for reuse (cache or ring).
    pub fn recycled(&self) -> Option<u64> {
        known_sum(&[self.recycle_cached, self.recycle_ring])
    }

    /// Pages that came back and stayed: recycled, less those the ring took that were then
    /// waived (a page of another node leaves the ring counted as `recycle_ring` and then as
    /// `alloc_waive` when the cache refill drops it). Every part must be known.
    pub fn kept(&self) -> Option<u64> {
        Some(
            self.recycle_cached?
                .saturating_add(self.recycle_ring?)
                .saturating_sub(self.alloc_waive?),
        )
    }

    /// Pages that came back and were released to the page allocator instead of kept: the
    /// ring was full, the page was still referenced elsewhere, or it was of another NUMA node
    /// when the cache was refilled. None unless all three are known: a part absent is not 0.
    pub fn freed(&self) -> Option<u64> {
        known_sum(&[
            Some(self.recycle_ring_full?),
            Some(self.recycle_released_refcnt?),
            Some(self.alloc_waive?),
        ])
    }

    /// Calls to the page allocator (order 0 and higher).
    pub fn slow(&self) -> Option<u64> {
        known_sum(&[self.alloc_slow, self.alloc_slow_high_order])
    }
}

/// The sum of the counters the kernel sent, None when it sent none of them. Saturating: a
/// recorded tree may hold any number, and a sum must not wrap into a small one.
fn known_sum(parts: &[Option<u64>]) -> Option<u64> {
    parts.iter().any(Option::is_some).then(|| {
        parts
            .iter()
            .flatten()
            .fold(0u64, |a, b| a.saturating_add(*b))
    })
}

/// The receive queue each NAPI serves, by NAPI id, from a device's queues (`queue-get`):
/// how a pool, which names its NAPI, is put on its queue.
pub fn rx_queues_by_napi(queues: &[Queue]) -> std::collections::BTreeMap<u32, u32> {
    queues
        .iter()
        .filter(|q| q.kind == QueueType::Rx)
        .filter_map(|q| Some((q.napi_id?, q.id)))
        .collect()
}

/// Where a pool serves, as evidence and `top` print it: its receive queues (`rx-1`,
/// `rx-0,rx-2`), else its NAPI (`NAPI 8194`), else `no queue`.
pub fn pool_place(rx_queues: &[u32], napi_id: Option<u32>) -> String {
    match rx_queues {
        [] => napi_id.map_or("no queue".into(), |n| format!("NAPI {n}")),
        qs => qs
            .iter()
            .map(|q| format!("rx-{q}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// A duration in ns as people read it: `0`, `200 µs`, `20 ms`, `1500 ns`.
pub fn ns_text(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else if v.is_multiple_of(1_000_000) {
        format!("{} ms", v / 1_000_000)
    } else if v.is_multiple_of(1_000) {
        format!("{} µs", v / 1_000)
    } else {
        format!("{v} ns")
    }
}

/// The XDP feature names of NETDEV_XDP_ACT_* bits, in bit order.
pub const XDP_FEATURES: [&str; 7] = [
    "basic",
    "redirect",
    "ndo-xmit",
    "xsk-zerocopy",
    "hw-offload",
    "rx-sg",
    "ndo-xmit-sg",
];

/// `basic,redirect,...` for a feature mask (unknown bits as `bitN`).
pub fn xdp_feature_names(mask: u64) -> String {
    (0..64)
        .filter(|b| mask & (1 << b) != 0)
        .map(|b| {
            XDP_FEATURES
                .get(b as usize)
                .map_or_else(|| format!("bit{b}"), |n| n.to_string())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A per-NAPI setting netsteer can change with NETDEV_CMD_NAPI_SET.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NapiAttr {
    DeferHardIrqs,
    GroFlushTimeout,
    IrqSuspendTimeout,
    Threaded,
}

impl NapiAttr {
    pub const ALL: [NapiAttr; 4] = [
        NapiAttr::DeferHardIrqs,
        NapiAttr::GroFlushTimeout,
        NapiAttr::IrqSuspendTimeout,
        NapiAttr::Threaded,
    ];

    /// The attribute's name in netdev.yaml.
    pub fn name(self) -> &'static str {
        match self {
            NapiAttr::DeferHardIrqs => "defer-hard-irqs",
            NapiAttr::GroFlushTimeout => "gro-flush-timeout",
            NapiAttr::IrqSuspendTimeout => "irq-suspend-timeout",
            NapiAttr::Threaded => "threaded",
        }
    }

    pub fn parse(name: &str) -> Option<NapiAttr> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The current value (threaded as its mode number); `None` when the kernel did not report it.
    pub fn read(self, n: &Napi) -> Option<u64> {
        match self {
            NapiAttr::DeferHardIrqs => n.defer_hard_irqs.map(u64::from),
            NapiAttr::GroFlushTimeout => n.gro_flush_timeout_ns,
            NapiAttr::IrqSuspendTimeout => n.irq_suspend_timeout_ns,
            NapiAttr::Threaded => n.threaded.map(u64::from),
        }
    }

    /// Stores a value as NAPI_SET would (a tree's recorded state); the kernel's limits:
    /// defer-hard-irqs is an s32 ≥ 0 (napi_set_defer_hard_irqs), threaded 0, 1 or 2
    /// (netdev.yaml `napi-threaded`; 2 is busy-poll, 6.19).
    pub fn store(self, n: &mut Napi, v: u64) -> Result<(), String> {
        match self {
            NapiAttr::DeferHardIrqs => {
                let v = u32::try_from(v)
                    .ok()
                    .filter(|v| *v <= i32::MAX as u32)
                    .ok_or_else(|| format!("defer-hard-irqs {v}: 0 to {}", i32::MAX))?;
                n.defer_hard_irqs = Some(v);
            }
            NapiAttr::GroFlushTimeout => n.gro_flush_timeout_ns = Some(v),
            NapiAttr::IrqSuspendTimeout => n.irq_suspend_timeout_ns = Some(v),
            NapiAttr::Threaded => {
                if v > 2 {
                    return Err(format!("threaded {v}: 0, 1 or 2 (busy-poll)"));
                }
                n.threaded = Some(v as u32);
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for NapiAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn napi_attrs_read_store_and_refuse_what_the_kernel_would() {
        let mut n = Napi {
            id: 9,
            ..Napi::default()
        };
        for a in NapiAttr::ALL {
            assert_eq!(NapiAttr::parse(a.name()), Some(a));
            assert_eq!(a.read(&n), None);
            a.store(&mut n, 1).unwrap();
            assert_eq!(a.read(&n), Some(1));
        }
        NapiAttr::Threaded.store(&mut n, 2).unwrap();
        assert_eq!(n.threaded, Some(2), "busy-poll (6.19)");
        assert!(NapiAttr::Threaded.store(&mut n, 3).is_err());
        assert!(NapiAttr::DeferHardIrqs.store(&mut n, 1 << 31).is_err());
        assert_eq!(NapiAttr::parse("busy"), None);
        assert_eq!(xdp_feature_names(0b1001), "basic,xsk-zerocopy");
        assert_eq!(xdp_feature_names(1 << 9), "bit9");
    }
}

/// One receive flow-steering (n-tuple) rule, as `ethtool -N DEV flow-type tcp4 dst-port P
/// action Q` makes it: the kinds netsteer writes are read exactly, any other rule is kept as
/// `Other` so its location is never reused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NtupleRule {
    /// The rule's slot in the device's classification table.
    pub location: u32,
    pub flow: NtupleFlow,
    /// The rx queue it steers to (ring_cookie); `None` for drop or a VF/context action.
    pub queue: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum NtupleFlow {
    /// TCP or UDP over IPv4 or IPv6 to one destination port, nothing else matched.
    DstPort { proto: NtupleProto, port: u16 },
    /// Anything else: the flow type number (ethtool.h TCP_V4_FLOW ...).
    Other { flow_type: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NtupleProto {
    Tcp4,
    Udp4,
    Tcp6,
    Udp6,
}

impl NtupleProto {
    pub fn name(self) -> &'static str {
        match self {
            NtupleProto::Tcp4 => "tcp4",
            NtupleProto::Udp4 => "udp4",
            NtupleProto::Tcp6 => "tcp6",
            NtupleProto::Udp6 => "udp6",
        }
    }

    pub fn parse(s: &str) -> Option<NtupleProto> {
        [
            NtupleProto::Tcp4,
            NtupleProto::Udp4,
            NtupleProto::Tcp6,
            NtupleProto::Udp6,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }
}

/// What a netsteer n-tuple knob names: "steer PROTO to dst-port PORT", as its value text
/// `flow-type tcp4 dst-port 22 action 0` (empty: no such rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NtupleKey {
    pub proto: NtupleProto,
    pub port: u16,
}

impl NtupleKey {
    /// The value text of a rule steering this key to `queue` (ethtool -N's words).
    pub fn rule_text(self, queue: u64) -> String {
        format!(
            "flow-type {} dst-port {} action {queue}",
            self.proto.name(),
            self.port
        )
    }

    /// Reads a value text back: `None` for "" (no rule), the queue otherwise.
    pub fn parse_rule(self, text: &str) -> Result<Option<u64>, String> {
        let t = text.trim();
        if t.is_empty() {
            return Ok(None);
        }
        let w: Vec<&str> = t.split_whitespace().collect();
        match w.as_slice() {
            ["flow-type", p, "dst-port", port, "action", q]
                if NtupleProto::parse(p) == Some(self.proto)
                    && port.parse::<u16>().ok() == Some(self.port) =>
            {
                q.parse()
                    .map(Some)
                    .map_err(|_| format!("n-tuple rule {t:?}: action {q} is not a queue"))
            }
            _ => Err(format!(
                "n-tuple rule {t:?}: expected \"{}\" or nothing",
                self.rule_text(0).replace(" 0", " QUEUE")
            )),
        }
    }

    /// The rule of this key among `rules`, if any.
    pub fn find(self, rules: &[NtupleRule]) -> Option<&NtupleRule> {
        rules.iter().find(|r| {
            r.flow
                == NtupleFlow::DstPort {
                    proto: self.proto,
                    port: self.port,
                }
        })
    }
}

impl std::fmt::Display for NtupleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-dst-port-{}", self.proto.name(), self.port)
    }
}

#[cfg(test)]
mod ntuple_tests {
    use super::*;

    #[test]
    fn rule_texts_round_trip_and_bad_ones_are_refused() {
        let k = NtupleKey {
            proto: NtupleProto::Tcp4,
            port: 22,
        };
        assert_eq!(k.rule_text(3), "flow-type tcp4 dst-port 22 action 3");
        assert_eq!(k.parse_rule(&k.rule_text(3)).unwrap(), Some(3));
        assert_eq!(k.parse_rule("").unwrap(), None);
        assert!(k.parse_rule("flow-type udp4 dst-port 22 action 3").is_err());
        assert!(k.parse_rule("flow-type tcp4 dst-port 22 action x").is_err());
        assert_eq!(k.to_string(), "tcp4-dst-port-22");
        let rules = vec![NtupleRule {
            location: 5,
            flow: NtupleFlow::DstPort {
                proto: NtupleProto::Tcp4,
                port: 22,
            },
            queue: Some(0),
        }];
        assert_eq!(k.find(&rules).map(|r| r.location), Some(5));
    }
}
