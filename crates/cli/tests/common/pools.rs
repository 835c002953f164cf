//! `show --json`'s page pools held against the tests' own netlink reader (page_pools.py): the
//! same pools (id, NAPI, pages and bytes in flight, detach time), counters where the kernel
//! has them and `null` with the reason where it does not, and each receive queue naming the
//! pools of its NAPI.

use netsteer_host::field::Field;
use netsteer_host::netdev::PagePools;
use netsteer_host::nic::Nic;
use serde_json::Value;

/// The reader, run with `python3 -` and this on its standard input.
pub const READER: &str = include_str!("page_pools.py");

/// The reader's answer, run on this host (or, through `sh`, wherever the caller runs it).
pub fn read_here() -> Value {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(READER.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The device's pools as netsteer showed them; panics when they are not known.
pub fn shown(nic: &Nic) -> &PagePools {
    let nd = nic
        .settings
        .as_ref()
        .and_then(|s| s.netdev().ok())
        .unwrap_or_else(|| panic!("{}: no netdev data", nic.name));
    match &nd.page_pools {
        Some(Field::Known(p)) => p,
        other => panic!("{}: page pools {other:?}", nic.name),
    }
}

/// Asserts that what `show --json` says of `nic` (whose ifindex is `ifindex`) is what the
/// reader found. Returns the number of pools compared.
pub fn agree(nic: &Nic, ifindex: u32, reader: &Value) -> usize {
    let pools = shown(nic);
    let theirs: Vec<&Value> = reader["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["ifindex"].as_u64() == Some(u64::from(ifindex)))
        .collect();
    assert_eq!(pools.pools.len(), theirs.len(), "{pools:?} {theirs:?}");
    let opt = |v: &Value| v.as_u64();
    for t in &theirs {
        let id = t["id"].as_u64().unwrap();
        let ours = pools
            .pools
            .iter()
            .find(|p| p.id == id)
            .unwrap_or_else(|| panic!("pool {id} not shown: {pools:?}"));
        assert_eq!(
            ours.napi_id.map(u64::from),
            opt(&t["napi_id"]),
            "{ours:?} {t}"
        );
        assert_eq!(ours.inflight, opt(&t["inflight"]), "{ours:?} {t}");
        assert_eq!(ours.inflight_mem, opt(&t["inflight_mem"]), "{ours:?} {t}");
        assert_eq!(ours.detach_time, opt(&t["detach_time"]), "{ours:?} {t}");
        match reader["stats"].as_array() {
            // A kernel without the counters: none shown, and why.
            None => {
                assert!(ours.stats.is_none(), "{ours:?}");
                let why = pools.stats_unavailable.as_deref().unwrap_or_default();
                assert!(why.contains("CONFIG_PAGE_POOL_STATS"), "{pools:?}");
            }
            Some(rows) => {
                let row = rows
                    .iter()
                    .find(|r| r["id"].as_u64() == Some(id))
                    .unwrap_or_else(|| panic!("no stats row for pool {id}"));
                let s = ours
                    .stats
                    .as_ref()
                    .expect("counters where the kernel has them");
                let fields = serde_json::to_value(s).unwrap();
                for (k, v) in fields.as_object().unwrap() {
                    assert_eq!(v.as_u64(), row[k].as_u64(), "{k} of pool {id}: {s:?} {row}");
                }
            }
        }
    }
    // Each receive queue names exactly the pools of its NAPI.
    let netdev = nic.settings.as_ref().unwrap().netdev().unwrap();
    for q in &nic.rx_queues {
        let napi = netdev
            .queues
            .iter()
            .find(|nq| nq.kind == netsteer_host::netdev::QueueType::Rx && nq.id == q.index)
            .and_then(|nq| nq.napi_id);
        let want: Vec<u64> = theirs
            .iter()
            .filter(|t| napi.is_some() && t["napi_id"].as_u64() == napi.map(u64::from))
            .map(|t| t["id"].as_u64().unwrap())
            .collect();
        let mut got = q.page_pools.clone().expect("a queue's pools, known");
        got.sort_unstable();
        let mut want = want;
        want.sort_unstable();
        assert_eq!(got, want, "rx-{} of {}", q.index, nic.name);
    }
    theirs.len()
}
