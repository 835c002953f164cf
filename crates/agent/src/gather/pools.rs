//! The page pools a device registers (netdev page-pool-get and page-pool-stats-get, read with
//! the NIC settings at each sampler tick), as series.

use super::families::Families;
use netsteer_host::field::Field;
use netsteer_host::nic::Nic;

/// A device's page pools: pages in flight and, where the kernel counts them, allocations and
/// recycling by path. At most one pool per queue of the device (lowest ids first), so a
/// device's series stay bounded by its queues whatever its driver creates.
pub(super) fn page_pools(out: &mut Families, nic: &Nic) {
    let Some(netdev) = nic.settings.as_ref().and_then(|s| s.netdev().ok()) else {
        return;
    };
    let Some(Field::Known(pools)) = &netdev.page_pools else {
        return;
    };
    let cap = nic.rx_queues.len().max(nic.tx_queues.len()).max(1);
    for p in pools.pools.iter().take(cap) {
        let queue = nic
            .rx_queues
            .iter()
            .find(|q| q.page_pools.as_ref().is_some_and(|ids| ids.contains(&p.id)))
            .map_or(String::new(), |q| format!("rx-{}", q.index));
        let labels = || {
            vec![
                ("device", nic.name.clone()),
                ("pool", p.id.to_string()),
                ("queue", queue.clone()),
            ]
        };
        if let Some(v) = p.inflight {
            out.pool_inflight.push(labels(), v as f64);
        }
        if let Some(v) = p.inflight_mem {
            out.pool_inflight_bytes.push(labels(), v as f64);
        }
        let Some(st) = &p.stats else { continue };
        let paths = [
            ("fast", st.alloc_fast),
            ("slow", st.alloc_slow),
            ("slow_high_order", st.alloc_slow_high_order),
            ("empty", st.alloc_empty),
            ("refill", st.alloc_refill),
            ("waive", st.alloc_waive),
        ];
        for (path, v) in paths {
            if let Some(v) = v {
                let mut l = labels();
                l.push(("path", path.into()));
                out.pool_allocations.push(l, v as f64);
            }
        }
        let results = [
            ("cached", st.recycle_cached),
            ("cache_full", st.recycle_cache_full),
            ("ring", st.recycle_ring),
            ("ring_full", st.recycle_ring_full),
            ("released_refcnt", st.recycle_released_refcnt),
        ];
        for (result, v) in results {
            if let Some(v) = v {
                let mut l = labels();
                l.push(("result", result.into()));
                out.pool_recycles.push(l, v as f64);
            }
        }
    }
}
