//! NETDEV_CMD_PAGE_POOL_GET (5) and NETDEV_CMD_PAGE_POOL_STATS_GET (9), both dumped: the kernel
//! takes no device filter on either (netdev.yaml lists no dump request attributes), so every
//! pool in the namespace comes back and the caller keeps its device's.
use crate::attr;
use netsteer_host::netdev::{PagePool, PagePoolStats};

pub const CMD: u8 = 5;
pub const CMD_STATS: u8 = 9;

/// enum NETDEV_A_PAGE_POOL_* (include/uapi/linux/netdev.h; `id`, `napi-id`, `inflight`,
/// `inflight-mem` and `detach-time` are `uint`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum A {
    Id = 1,
    Ifindex = 2,
    NapiId = 3,
    Inflight = 4,
    InflightMem = 5,
    DetachTime = 6,
    Dmabuf = 7,
    IoUring = 8,
}

/// enum NETDEV_A_PAGE_POOL_STATS_* (counters are `uint`s; `info` nests the pool's id and
/// ifindex in the page-pool attribute space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum S {
    Info = 1,
    AllocFast = 8,
    AllocSlow = 9,
    AllocSlowHighOrder = 10,
    AllocEmpty = 11,
    AllocRefill = 12,
    AllocWaive = 13,
    RecycleCached = 14,
    RecycleCacheFull = 15,
    RecycleRing = 16,
    RecycleRingFull = 17,
    RecycleReleasedRefcnt = 18,
}

pub fn parse(buf: &[u8]) -> Result<PagePool, String> {
    let a = attr::parse(buf)?;
    let uint = |k: A| attr::find(&a, k as u16).and_then(attr::uint_of);
    Ok(PagePool {
        id: uint(A::Id).ok_or("a page pool without an id")?,
        ifindex: attr::find(&a, A::Ifindex as u16).and_then(attr::u32_of),
        napi_id: uint(A::NapiId).and_then(|v| u32::try_from(v).ok()),
        inflight: uint(A::Inflight),
        inflight_mem: uint(A::InflightMem),
        detach_time: uint(A::DetachTime),
        dmabuf: attr::find(&a, A::Dmabuf as u16).and_then(attr::u32_of),
        io_uring: attr::find(&a, A::IoUring as u16).is_some(),
        stats: None,
    })
}

/// One stats message: the pool it is for (id, ifindex from `info`) and its counters.
pub fn parse_stats(buf: &[u8]) -> Result<(u64, Option<u32>, PagePoolStats), String> {
    let a = attr::parse(buf)?;
    let info = attr::parse(attr::find(&a, S::Info as u16).ok_or("page pool stats without info")?)?;
    let id = attr::find(&info, A::Id as u16)
        .and_then(attr::uint_of)
        .ok_or("page pool stats without a pool id")?;
    let ifindex = attr::find(&info, A::Ifindex as u16).and_then(attr::u32_of);
    let c = |k: S| attr::find(&a, k as u16).and_then(attr::uint_of);
    Ok((
        id,
        ifindex,
        PagePoolStats {
            alloc_fast: c(S::AllocFast),
            alloc_slow: c(S::AllocSlow),
            alloc_slow_high_order: c(S::AllocSlowHighOrder),
            alloc_empty: c(S::AllocEmpty),
            alloc_refill: c(S::AllocRefill),
            alloc_waive: c(S::AllocWaive),
            recycle_cached: c(S::RecycleCached),
            recycle_cache_full: c(S::RecycleCacheFull),
            recycle_ring: c(S::RecycleRing),
            recycle_ring_full: c(S::RecycleRingFull),
            recycle_released_refcnt: c(S::RecycleReleasedRefcnt),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_pool_round_trips() {
        let mut b = Vec::new();
        attr::put_uint(&mut b, A::Id as u16, 7);
        attr::put(&mut b, A::Ifindex as u16, &4u32.to_ne_bytes());
        attr::put(&mut b, A::NapiId as u16, &8193u32.to_ne_bytes());
        attr::put_uint(&mut b, A::Inflight as u16, 1024);
        // A uint the kernel sends as 8 bytes once it passes 32 bits.
        attr::put(&mut b, A::InflightMem as u16, &(5u64 << 32).to_ne_bytes());
        attr::put(&mut b, A::IoUring as u16 | attr::NLA_F_NESTED, &[]);
        let p = parse(&b).unwrap();
        assert_eq!(
            p,
            PagePool {
                id: 7,
                ifindex: Some(4),
                napi_id: Some(8193),
                inflight: Some(1024),
                inflight_mem: Some(5 << 32),
                detach_time: None,
                dmabuf: None,
                io_uring: true,
                stats: None,
            }
        );
        // A detached pool (moved to loopback when its device went) keeps its counters.
        let mut d = Vec::new();
        attr::put_uint(&mut d, A::Id as u16, 9);
        attr::put_uint(&mut d, A::DetachTime as u16, 1234);
        attr::put(&mut d, A::Dmabuf as u16, &3u32.to_ne_bytes());
        let p = parse(&d).unwrap();
        assert_eq!(
            (p.detach_time, p.dmabuf, p.napi_id),
            (Some(1234), Some(3), None)
        );
        let mut bad = Vec::new();
        attr::put(&mut bad, A::Ifindex as u16, &4u32.to_ne_bytes());
        assert!(parse(&bad).is_err());
    }

    #[test]
    fn page_pool_stats_round_trip_and_absent_counters_stay_absent() {
        let mut info = Vec::new();
        attr::put_uint(&mut info, A::Id as u16, 7);
        attr::put(&mut info, A::Ifindex as u16, &4u32.to_ne_bytes());
        let mut b = Vec::new();
        attr::put(&mut b, S::Info as u16 | attr::NLA_F_NESTED, &info);
        attr::put_uint(&mut b, S::AllocFast as u16, 900);
        attr::put_uint(&mut b, S::AllocSlow as u16, 100);
        attr::put_uint(&mut b, S::RecycleRing as u16, 800);
        attr::put_uint(&mut b, S::RecycleRingFull as u16, 0);
        let (id, ifindex, s) = parse_stats(&b).unwrap();
        assert_eq!((id, ifindex), (7, Some(4)));
        assert_eq!(s.alloc_fast, Some(900));
        assert_eq!(s.recycle_ring_full, Some(0));
        assert_eq!(s.alloc_waive, None, "not sent is not zero");
        assert_eq!(s.allocated(), Some(1000));
        assert_eq!(s.recycled(), Some(800));
        assert_eq!(PagePoolStats::default().allocated(), None);
        let mut no_info = Vec::new();
        attr::put_uint(&mut no_info, S::AllocFast as u16, 1);
        assert!(parse_stats(&no_info).is_err());
    }
}
