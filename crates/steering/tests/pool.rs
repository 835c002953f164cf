//! `page-pool-freeing` on a real 7.3 guest's tree (fixtures/hosts/zoo-virtio-pools-7.3:
//! virtio_net registers its receive queue's pool with the device), its counters set to what a
//! pool that frees its pages would have counted: it fires, names the cause the counters
//! show, stays quiet on a pool that recycles or has done too little to judge, and says "not
//! judged" where the counters are not there, never "healthy".

use netsteer_host::field::Field;
use netsteer_host::netdev::{PagePool, PagePoolStats, PagePools};
use netsteer_host::view::HostView;
use netsteer_steering::doctor::{Goal, Load, Report, diagnose};

mod common;

const TREE: &str = "zoo-virtio-pools-7.3";
const RULE: &str = "page-pool-freeing";

fn pools(v: &mut HostView) -> &mut Option<Field<PagePools>> {
    let nic = v.nics.iter_mut().find(|n| n.name == "eth0").unwrap();
    let s = nic.settings.as_mut().unwrap();
    let Some(Field::Known(d)) = s.netdev.as_mut() else {
        panic!("{TREE}: eth0 has netdev data");
    };
    &mut d.page_pools
}

fn the_pool(v: &mut HostView) -> &mut PagePool {
    let Some(Field::Known(p)) = pools(v) else {
        panic!("{TREE}: eth0's pools are known");
    };
    &mut p.pools[0]
}

/// Counters of a pool that handed out `handed` pages, kept `kept` of those returned and freed
/// the rest as (ring full, still referenced, other node).
fn counted(v: &mut HostView, handed: u64, kept: u64, freed: (u64, u64, u64)) {
    the_pool(v).stats = Some(PagePoolStats {
        alloc_fast: Some(handed - handed / 64),
        alloc_slow: Some(handed / 64),
        alloc_slow_high_order: Some(0),
        alloc_empty: Some(handed / 64),
        alloc_refill: Some(kept / 64),
        alloc_waive: Some(freed.2),
        recycle_cached: Some(kept / 2),
        recycle_cache_full: Some(0),
        recycle_ring: Some(kept - kept / 2),
        recycle_ring_full: Some(freed.0),
        recycle_released_refcnt: Some(freed.1),
    });
}

fn the_pool_clone(v: &HostView) -> PagePool {
    let nic = v.nic("eth0").unwrap();
    match &nic.settings.as_ref().unwrap().netdev().unwrap().page_pools {
        Some(Field::Known(p)) => p.pools[0].clone(),
        other => panic!("{other:?}"),
    }
}

fn the_pool_stats(v: &HostView) -> PagePoolStats {
    the_pool_clone(v).stats.unwrap()
}

fn doctor(v: &HostView, load: &Load) -> Report {
    diagnose(v, Some(load), Goal::Throughput, None)
}

fn fired(r: &Report) -> Vec<&netsteer_steering::doctor::Finding> {
    r.findings.iter().filter(|f| f.id == RULE).collect()
}

fn unjudged(r: &Report) -> Vec<String> {
    r.unjudged
        .iter()
        .filter(|u| u.rule == RULE)
        .map(|u| format!("{}: {}", u.subject, u.needs))
        .collect()
}

#[test]
fn the_real_tree_is_judged_and_its_fresh_pool_is_not_a_finding() {
    // As captured: a pool that filled its ring (126 fast, 2 slow) and recycled nothing yet.
    let (v, load) = common::offline(TREE);
    let r = doctor(&v, &load);
    assert!(fired(&r).is_empty(), "{:#?}", fired(&r));
    assert!(unjudged(&r).is_empty(), "{:?}", unjudged(&r));
}

/// The tree of a real flood (crates/cli/tests/vm_pool.rs `capture_pool_freeing_fixture`): a
/// receiver held 16,000 pages of rx-1's pool twice and read them dry at once.
#[test]
fn the_captured_flood_is_found_on_the_pool_that_took_it() {
    let (v, load) = common::offline("zoo-virtio-pool-freeing-7.3");
    let r = doctor(&v, &load);
    let f = fired(&r);
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert_eq!(f[0].subjects.queues, vec!["eth0/rx-1".to_string()]);
    let e = f[0].evidence.join("\n");
    assert!(
        e.contains("page pool 4 (eth0 rx-1)") && e.contains("(40.4%) freed"),
        "{e}"
    );
    // rx-0's pool, which took no flood, is not named.
    assert!(!e.contains("page pool 3"), "{e}");
}

#[test]
fn a_pool_whose_ring_overflows_is_found_with_the_ring_to_grow() {
    let (mut v, load) = common::offline(TREE);
    counted(&mut v, 1_000_000, 600_000, (390_000, 10_000, 0));
    let r = doctor(&v, &load);
    let f = fired(&r);
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    let f = f[0];
    let e = f.evidence.join("\n");
    assert!(e.contains("page pool 3 (eth0 rx-0)"), "{e}");
    assert!(e.contains("1.0 M pages handed out"), "{e}");
    assert!(
        e.contains("600.0 k were kept") && e.contains("400.0 k (40.0%) freed"),
        "{e}"
    );
    assert!(e.contains("390.0 k with the ring full"), "{e}");
    assert!(f.why.contains("recycle_ring_full"), "{}", f.why);
    assert!(e.contains("rx ring: 256 descriptors of at most 256"), "{e}");
    assert_eq!(f.subjects.queues, vec!["eth0/rx-0".to_string()]);
    // virtio_net keeps its pool's ring whatever its rx ring: no ring step, said why.
    assert!(
        e.contains("virtio_net keeps the pools it made at probe"),
        "{e}"
    );
    assert!(
        f.fix.steps[0].starts_with("ss -u -a -n -p"),
        "{:?}",
        f.fix.steps
    );
    assert_eq!(f.fix.tune, None);

    // Another driver on a ring shrunk below its maximum: the maximum is the first step, and
    // the tune that journals it.
    let nic = v.nics.iter_mut().find(|n| n.name == "eth0").unwrap();
    nic.driver = Field::Known("mlx5_core".into());
    let Field::Known(r) = &mut nic.settings.as_mut().unwrap().rings else {
        panic!()
    };
    r.rx = Some(64);
    r.rx_max = Some(1024);
    let f = doctor(&v, &load);
    let f = fired(&f)[0];
    assert_eq!(f.fix.steps[0], "ethtool -G eth0 rx 1024");
    assert_eq!(
        f.fix.tune.as_deref(),
        Some("netsteer tune apply --profile none --dev eth0 --set nic/eth0/rings/rx=1024")
    );
}

#[test]
fn the_cause_named_is_the_counter_that_freed_most() {
    let (mut v, load) = common::offline(TREE);
    counted(&mut v, 1_000_000, 500_000, (10_000, 480_000, 10_000));
    let f = doctor(&v, &load);
    let f = fired(&f);
    assert!(f[0].why.contains("recycle_released_refcnt"), "{}", f[0].why);
    assert!(
        f[0].fix.steps[0].starts_with("grep -E 'MemFree|MemAvailable' /proc/meminfo"),
        "{:?}",
        f[0].fix.steps
    );
    assert_eq!(f[0].fix.tune, None);

    // Waived pages left the ring counted as recycled: 500,000 recycled with 480,000 of them
    // waived kept 20,000, and 500,000 freed is 96 % of what came back, not 49 %.
    counted(&mut v, 1_000_000, 500_000, (10_000, 10_000, 480_000));
    let f = doctor(&v, &load);
    let f = fired(&f);
    assert!(f[0].why.contains("alloc_waive"), "{}", f[0].why);
    let e = f[0].evidence.join("\n");
    assert!(
        e.contains("20.0 k were kept") && e.contains("(96.2%) freed"),
        "{e}"
    );
    // On a tie the ring comes first.
    counted(&mut v, 1_000_000, 500_000, (100_000, 0, 100_000));
    let f = doctor(&v, &load);
    assert!(fired(&f)[0].why.contains("recycle_ring_full"));
}

#[test]
fn a_pool_that_recycles_or_did_little_is_not_a_finding() {
    let (mut v, load) = common::offline(TREE);
    // 20 % freed: below the quarter.
    counted(&mut v, 1_000_000, 800_000, (200_000, 0, 0));
    assert!(fired(&doctor(&v, &load)).is_empty());
    // Every page freed, but fewer handed out than the floor (a ring's first fills).
    counted(&mut v, 60_000, 0, (50_000, 0, 0));
    assert!(fired(&doctor(&v, &load)).is_empty());
    // Just over both: found.
    counted(&mut v, 65_536, 3_000, (1_000, 0, 0));
    assert_eq!(fired(&doctor(&v, &load)).len(), 1);
    // A detached pool (its device's queue reconfigured) only waits for its pages.
    the_pool(&mut v).detach_time = Some(100);
    assert!(fired(&doctor(&v, &load)).is_empty());
}

#[test]
fn pools_without_counters_are_not_judged_and_no_pool_is_nothing_to_judge() {
    let (mut v, load) = common::offline(TREE);
    counted(&mut v, 1_000_000, 0, (1_000_000, 0, 0));
    let why = "the kernel was built without CONFIG_PAGE_POOL_STATS (no PAGE_POOL_STATS_GET)";
    {
        let Some(Field::Known(p)) = pools(&mut v) else {
            panic!()
        };
        p.stats_unavailable = Some(why.into());
        p.pools[0].stats = None;
    }
    let r = doctor(&v, &load);
    assert!(fired(&r).is_empty());
    assert_eq!(
        unjudged(&r),
        vec![format!("eth0: eth0 page pool counters: {why}")]
    );
    assert!(!r.healthy());

    // The kernel could not list pools: not judged, with its words.
    *pools(&mut v) = Some(Field::unknown("page-pool-get: Operation not permitted"));
    let r = doctor(&v, &load);
    assert_eq!(
        unjudged(&r),
        vec![
            "eth0: eth0 page pools (netdev netlink): page-pool-get: Operation not permitted"
                .to_string()
        ]
    );
    // A tree captured before pools were read.
    *pools(&mut v) = None;
    assert!(unjudged(&doctor(&v, &load))[0].contains("not recorded"));

    // Counters, but one the rule sums not sent: not judged, not a smaller sum.
    let (mut v, load) = common::offline(TREE);
    counted(&mut v, 1_000_000, 0, (1_000_000, 0, 0));
    *pools(&mut v) = Some(Field::Known(PagePools {
        pools: vec![PagePool {
            stats: Some(PagePoolStats {
                recycle_cached: None,
                ..the_pool_stats(&v)
            }),
            ..the_pool_clone(&v)
        }],
        stats_unavailable: None,
    }));
    let r = doctor(&v, &load);
    assert!(fired(&r).is_empty());
    assert_eq!(
        unjudged(&r),
        vec!["eth0: eth0 page pool 3 counters: not every counter was sent".to_string()]
    );

    // A pool a memory provider feeds (devmem): its buffers go back to the provider; nothing
    // to judge, and no finding from its counters.
    counted(&mut v, 1_000_000, 0, (1_000_000, 0, 0));
    the_pool(&mut v).dmabuf = Some(7);
    let r = doctor(&v, &load);
    assert!(fired(&r).is_empty() && unjudged(&r).is_empty());

    // No pool on the device: judged, nothing found.
    *pools(&mut v) = Some(Field::Known(PagePools::default()));
    let r = doctor(&v, &load);
    assert!(unjudged(&r).is_empty() && fired(&r).is_empty());
}

#[test]
fn counters_at_the_edge_of_u64_do_not_wrap_into_a_verdict() {
    // A recorded tree may say anything: sums saturate instead of wrapping to small numbers.
    let (mut v, load) = common::offline(TREE);
    counted(&mut v, u64::MAX, u64::MAX, (u64::MAX, u64::MAX, u64::MAX));
    let r = doctor(&v, &load);
    assert_eq!(fired(&r).len(), 1, "{:#?}", r.findings);
}

#[test]
fn the_device_takes_the_cause_most_pools_show_ties_to_the_ring_and_refills_count() {
    use netsteer_steering::doctor::Severity;
    let (mut v, load) = common::offline(TREE);
    // Two pools, one freeing with its ring full, one to another node: a tie between pools,
    // which goes to the ring.
    counted(&mut v, 1_000_000, 500_000, (480_000, 0, 0));
    let mut other = the_pool_clone(&v);
    other.id = 99;
    other.stats = Some(PagePoolStats {
        alloc_waive: Some(480_000),
        recycle_ring_full: Some(0),
        recycle_ring: Some(750_000),
        ..other.stats.unwrap()
    });
    let Some(Field::Known(p)) = pools(&mut v) else {
        panic!()
    };
    p.pools.push(other);
    let r = doctor(&v, &load);
    let f = fired(&r);
    assert_eq!(f.len(), 1, "one finding for the device: {f:#?}");
    assert!(f[0].why.contains("recycle_ring_full"), "{}", f[0].why);
    assert_eq!(
        f[0].evidence
            .iter()
            .filter(|e| e.contains("since it was created"))
            .count(),
        2
    );
    // Counters since creation are history: information, not a warning.
    assert_eq!(f[0].severity, Severity::Info);

    // A refill hands out a page too: 65,000 fast and slow pages and 600 refills are over the
    // floor of 65,536; without the refills they would not be.
    let (mut v, load) = common::offline(TREE);
    counted(&mut v, 65_000, 38_400, (20_000, 0, 0));
    assert_eq!(fired(&doctor(&v, &load)).len(), 1);
    the_pool(&mut v).stats.as_mut().unwrap().alloc_refill = Some(0);
    assert!(fired(&doctor(&v, &load)).is_empty());
}
