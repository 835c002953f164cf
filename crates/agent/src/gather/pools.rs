//! The page pools a device registers (netdev page-pool-get and page-pool-stats-get, read with
//! the NIC settings at each sampler tick), as series.

use super::families::Families;
use netsteer_host::field::Field;
use netsteer_host::nic::Nic;

/// A device's page pools: pages in flight and, where the kernel counts them, allocations and
/// recycling by path. At most one pool per rx queue of the device, so a device's series stay
/// bounded by its queues whatever its driver creates.
pub(super) fn page_pools(out: &mut Families, nic: &Nic) {
    let Some(netdev) = nic.settings.as_ref().and_then(|s| s.netdev().ok()) else {
        return;
    };
    let unknown = |out: &mut Families, part: &str, why: &str| {
        out.pool_unknown.push(
            vec![
                ("device", nic.name.clone()),
                ("part", part.into()),
                ("reason", why.into()),
            ],
            1.0,
        );
    };
    let pools = match &netdev.page_pools {
        // Trees captured before netsteer read pools: nothing said either way.
        None => return,
        Some(Field::Unknown { unknown: why }) => return unknown(out, "pools", why),
        Some(Field::Known(pools)) => pools,
    };
    if let Some(why) = &pools.stats_unavailable {
        unknown(out, "stats", why);
    }
    // The pools serving a queue first, live before detached ones (a detached pool is
    // usually older and would otherwise take a live queue's place), then the rest.
    let cap = nic.rx_queues.len().max(1);
    let mut order: Vec<&netsteer_host::netdev::PagePool> = pools.pools.iter().collect();
    order.sort_by_key(|p| {
        let serves = nic.pool_queues(p.id).next().is_some();
        (!serves, p.detach_time.is_some(), p.id)
    });
    for p in order.into_iter().take(cap) {
        let queue = nic
            .pool_queues(p.id)
            .next()
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
        counters(&mut out.pool_allocations, &labels, "path", &paths);
        let results = [
            ("cached", st.recycle_cached),
            ("cache_full", st.recycle_cache_full),
            ("ring", st.recycle_ring),
            ("ring_full", st.recycle_ring_full),
            ("released_refcnt", st.recycle_released_refcnt),
        ];
        counters(&mut out.pool_recycles, &labels, "result", &results);
    }
}

/// One series per counter the kernel sent, `key` naming which; none for a counter not sent.
fn counters(
    family: &mut crate::family::Family,
    labels: &dyn Fn() -> Vec<(&'static str, String)>,
    key: &'static str,
    values: &[(&str, Option<u64>)],
) {
    for (name, v) in values {
        if let Some(v) = v {
            let mut l = labels();
            l.push((key, (*name).into()));
            family.push(l, *v as f64);
        }
    }
}
