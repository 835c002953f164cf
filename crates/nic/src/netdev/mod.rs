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
use netsteer_host::netdev::{Netdev, PagePools};

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

/// Reads everything the family says about one device. The NAPI and queue dumps must work;
/// queue counters and XDP features are optional (drivers without qstats answer EOPNOTSUPP,
/// and kernels before 6.8 lack the command).
pub fn read(sock: &mut NlSocket, family: u16, ifindex: u32) -> Result<Netdev, String> {
    let napis = napis(sock, family, ifindex)?;
    let queues = sock
        .dump(family, queue::CMD, &queue::dump(ifindex))
        .map_err(|e| format!("queue-get: {e}"))?;
    let mut queues = each(queues, queue::parse)?;
    queues.sort_by_key(|q| (q.kind, q.id));
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

/// The device's page pools, each with its counters where the kernel keeps them. Unknown with
/// the reason on a kernel without PAGE_POOL_GET (before 6.8); an empty list is a device with
/// no pool the kernel names. Counters absent are said why (`stats_unavailable`), not zeroed.
pub fn page_pools(sock: &mut NlSocket, family: &Family, ifindex: u32) -> Field<PagePools> {
    if !family.has(page_pool::CMD) {
        return Field::unknown(
            "this kernel's netdev netlink has no PAGE_POOL_GET (Linux 6.8+): page pools unknown",
        );
    }
    let replies = match sock.dump(family.id, page_pool::CMD, &[]) {
        Ok(r) => r,
        Err(e) => return Field::unknown(format!("page-pool-get: {e}")),
    };
    let pools = match each(replies, page_pool::parse) {
        Ok(p) => p,
        Err(e) => return Field::unknown(format!("page-pool-get: {e}")),
    };
    let mut pools: Vec<_> = pools
        .into_iter()
        .filter(|p| p.ifindex == Some(ifindex))
        .collect();
    pools.sort_by_key(|p| p.id);
    let mut stats_unavailable = None;
    if pools.is_empty() {
        // Nothing to count.
    } else if !family.has(page_pool::CMD_STATS) {
        stats_unavailable = Some(
            "the kernel was built without CONFIG_PAGE_POOL_STATS (no PAGE_POOL_STATS_GET)".into(),
        );
    } else {
        match sock
            .dump(family.id, page_pool::CMD_STATS, &[])
            .map_err(|e| e.to_string())
            .and_then(|r| each(r, page_pool::parse_stats))
        {
            Ok(all) => {
                for (id, _, stats) in all {
                    if let Some(p) = pools.iter_mut().find(|p| p.id == id) {
                        p.stats = Some(stats);
                    }
                }
                let missing = pools.iter().filter(|p| p.stats.is_none()).count();
                if missing > 0 {
                    // A pool created between the two dumps, or one the stats dump skipped.
                    stats_unavailable = Some(format!(
                        "page-pool-stats-get answered for {} of {} pools",
                        pools.len() - missing,
                        pools.len()
                    ));
                }
            }
            Err(e) => stats_unavailable = Some(format!("page-pool-stats-get: {e}")),
        }
    }
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
