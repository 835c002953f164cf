//! The `netdev` generic netlink family (Documentation/netlink/specs/netdev.yaml), one module
//! per message: what a device's NAPIs, queues and counters are, and NAPI_SET. Numbers are our
//! own named table (include/uapi/linux/netdev.h), as for ethtool.

pub mod dev;
pub mod napi;
pub mod page_pool;
pub mod qstats;
pub mod queue;

use crate::genl::Family;
use crate::socket::NlSocket;
use netsteer_host::field::Field;
use netsteer_host::netdev::{Netdev, PagePools, PoolsError, Queue};

fn each<T>(replies: Vec<Vec<u8>>, f: fn(&[u8]) -> Result<T, String>) -> Result<Vec<T>, String> {
    replies.iter().map(|r| f(r)).collect()
}

/// The device's NAPI instances alone (NAPI_GET dump), by id.
pub fn napis(
    sock: &mut NlSocket,
    family: u16,
    ifindex: u32,
) -> Result<Vec<netsteer_host::netdev::Napi>, String> {
    let replies = sock
        .dump(family, napi::CMD, &napi::dump(ifindex))
        .map_err(|e| format!("napi-get: {e}"))?;
    let mut napis = each(replies, napi::parse)?;
    napis.sort_by_key(|n| n.id);
    Ok(napis)
}

/// The device's queues alone (QUEUE_GET dump), each with the NAPI serving it.
pub fn queues(sock: &mut NlSocket, family: u16, ifindex: u32) -> Result<Vec<Queue>, String> {
    let replies = sock
        .dump(family, queue::CMD, &queue::dump(ifindex))
        .map_err(|e| format!("queue-get: {e}"))?;
    let mut queues = each(replies, queue::parse)?;
    queues.sort_by_key(|q| (q.kind, q.id));
    Ok(queues)
}

/// Reads everything the family says about one device. The NAPI and queue dumps must work;
/// queue counters and XDP features are optional (drivers without qstats answer EOPNOTSUPP,
/// and kernels before 6.8 lack the command).
pub fn read(sock: &mut NlSocket, family: u16, ifindex: u32) -> Result<Netdev, String> {
    let napis = napis(sock, family, ifindex)?;
    let queues = queues(sock, family, ifindex)?;
    let qstats = queue_stats(sock, family, ifindex).unwrap_or_default();
    let (xdp_features, xdp_zc_max_segs) = sock
        .request(family, dev::CMD, &dev::get(ifindex))
        .ok()
        .and_then(|r| r.first().and_then(|b| dev::parse(b).ok()))
        .unwrap_or((None, None));
    Ok(Netdev {
        napis,
        queues,
        qstats,
        xdp_features,
        xdp_zc_max_segs,
        page_pools: None,
    })
}

/// Every page pool in the namespace with its counters merged in, as two dumps return them
/// (the kernel takes no device filter on either); [`pools_of`] keeps one device's. Read once
/// per pass over the devices, not once per device.
#[derive(Debug, Clone)]
pub struct AllPools {
    /// Why not when the pool dump itself failed or the kernel lacks it.
    pools: Result<Vec<netsteer_host::netdev::PagePool>, PoolsError>,
    /// Why no pool has counters, when none can have them.
    stats_unavailable: Option<String>,
}

impl AllPools {
    /// Every pool with its counters merged in (None where the stats dump gave none, and why),
    /// or why no pool could be listed.
    pub fn list(&self) -> Result<PagePools, PoolsError> {
        self.pools.clone().map(|pools| PagePools {
            pools,
            stats_unavailable: self.stats_unavailable.clone(),
        })
    }
}

/// Dumps every pool and, where the kernel has the command, every pool's counters. An entry
/// that does not parse is skipped alone: it cannot be told apart by device anyway, and one
/// bad answer must not blind the others.
pub fn dump_page_pools(sock: &mut NlSocket, family: &Family) -> AllPools {
    if !family.has(page_pool::CMD) {
        // NAPI_GET and QUEUE_GET (6.8) are checked before this is asked: a 6.8+ family
        // without PAGE_POOL_GET is a kernel built without CONFIG_PAGE_POOL (netdev.yaml
        // `config-cond: page-pool`).
        return AllPools {
            pools: Err(PoolsError::NotKept(
                "this kernel's netdev netlink has no PAGE_POOL_GET (built without CONFIG_PAGE_POOL, or before 6.8): page pools unknown".into(),
            )),
            stats_unavailable: None,
        };
    }
    let mut pools: Vec<_> = match sock.dump(family.id, page_pool::CMD, &[]) {
        Ok(r) => r.iter().filter_map(|b| page_pool::parse(b).ok()).collect(),
        Err(e) => {
            return AllPools {
                pools: Err(PoolsError::Failed(format!("page-pool-get: {e}"))),
                stats_unavailable: None,
            };
        }
    };
    pools.sort_by_key(|p| p.id);
    let stats_unavailable = if !family.has(page_pool::CMD_STATS) {
        Some("the kernel was built without CONFIG_PAGE_POOL_STATS (no PAGE_POOL_STATS_GET)".into())
    } else {
        match sock.dump(family.id, page_pool::CMD_STATS, &[]) {
            Ok(r) => {
                for (id, _, stats) in r.iter().filter_map(|b| page_pool::parse_stats(b).ok()) {
                    if let Ok(k) = pools.binary_search_by_key(&id, |p| p.id) {
                        pools[k].stats = Some(stats);
                    }
                }
                None
            }
            Err(e) => Some(format!("page-pool-stats-get: {e}")),
        }
    };
    AllPools {
        pools: Ok(pools),
        stats_unavailable,
    }
}

/// One device's pools out of [`dump_page_pools`]'s answer: an empty list is a device with no
/// pool the kernel names; counters absent are said why (`stats_unavailable`), not zeroed.
pub fn pools_of(all: &AllPools, ifindex: u32) -> Field<PagePools> {
    let pools: Vec<_> = match &all.pools {
        Err(e) => return Field::unknown(e.to_string()),
        Ok(p) => p
            .iter()
            .filter(|p| p.ifindex == Some(ifindex))
            .cloned()
            .collect(),
    };
    let missing = pools.iter().filter(|p| p.stats.is_none()).count();
    let stats_unavailable = if pools.is_empty() {
        None
    } else if let Some(why) = &all.stats_unavailable {
        Some(why.clone())
    } else if missing > 0 {
        // A pool created between the two dumps, or an entry of the stats dump that did not
        // parse.
        // One text whatever the counts: it is also a metric's label (the agent's
        // netsteer_page_pool_unknown_info), and which pools lack counters shows per pool.
        Some("page-pool-stats-get did not answer for every pool".to_string())
    } else {
        None
    };
    Field::Known(PagePools {
        pools,
        stats_unavailable,
    })
}

/// The per-queue counters alone (QSTATS_GET, scope queue), sorted; empty when the driver keeps
/// none (EOPNOTSUPP, or an empty dump).
pub fn queue_stats(
    sock: &mut NlSocket,
    family: u16,
    ifindex: u32,
) -> Result<Vec<netsteer_host::netdev::QueueStats>, String> {
    let replies = match sock.dump(family, qstats::CMD, &qstats::dump(ifindex)) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(Vec::new()),
        Err(e) => return Err(format!("qstats-get: {e}")),
    };
    let mut q = each(replies, qstats::parse)?;
    q.sort_by_key(|q| (q.kind, q.id));
    Ok(q)
}
