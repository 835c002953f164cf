//! Root-only, live: seed 002's page pool driven onto its slow path on a real driver, and
//! found by doctor. virtio_net on Debian's 7.3 registers each receive queue's page pool with
//! the device (counters built). A UDP receiver with a 64 MiB buffer that reads nothing while
//! guest a floods it holds some 16,000 pages out of the pool; read dry at once, they come back
//! faster than the pool's 256-page ring takes them, and all the rest are freed
//! (`recycle_ring_full`), to be allocated again from the page allocator. doctor's
//! `page-pool-freeing` names that pool with the counters the tests' own netlink reader
//! (page_pools.py) dumps, its fix step (`ss -u -a -n -p`) shows the receiver holding the
//! pages, and `top` rates the pool over a held round as the reader counts it. Reading the same
//! datagrams as they arrive does not end the freeing here: measured and printed.
//!
//! What this driver taught the rule: its pools keep their ring across `ethtool -G rx 64` and a
//! link down and up (the same pool, some 250 pages taken back before the rest are freed), so
//! doctor proposes no ring change on virtio_net.

mod common;

use netsteer_lab::vm::{Guest, NicModel, VM_B_ADDR, VmPair, VmPairSpec};
use netsteer_steering::doctor::Report;
use netsteer_steering::doctor::rules::pool::{HANDED_FLOOR, count};
use serde_json::Value;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const GBIN: &str = "/tmp/netsteer-x/netsteer";
const T: Duration = Duration::from_secs(240);
/// The flood's source port: one flow, so one queue and one pool take every round.
const SPORT: u16 = 40_000;

fn sh(g: &mut Guest, cmd: &str) -> String {
    let (rc, out) = g.sh(cmd, T).unwrap();
    assert_eq!(rc, 0, "guest {}: {cmd}: {out}", g.name);
    out
}

/// The receiver: a socket of `argv[1]` bytes of buffer bound to :5001. `hold`: it reads
/// nothing until /x/go appears, then reads dry; `live`: it reads as datagrams arrive until
/// /x/go appears, then reads dry. It prints how many datagrams it got.
const RECV: &str = r#"
import os, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(sys.argv[1]))
s.bind(("0.0.0.0", 5001))
open("/tmp/netsteer-x/recv.ready", "w").close()
n = 0
if sys.argv[2] == "live":
    s.settimeout(0.05)
    while not os.path.exists("/tmp/netsteer-x/go"):
        try:
            s.recv(2048); n += 1
        except socket.timeout:
            pass
while not os.path.exists("/tmp/netsteer-x/go"):
    time.sleep(0.05)
s.setblocking(False)
try:
    while True:
        s.recv(2048); n += 1
except BlockingIOError:
    pass
print(n)
"#;

/// The flood: `argv[2]` datagrams of 1400 bytes from one source port, as fast as it goes
/// (`argv[4]` 0) or at most `argv[4]` a second.
const SEND: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[3])))
b = b"x" * 1400
pps = int(sys.argv[4])
t = time.monotonic()
for i in range(int(sys.argv[2])):
    s.sendto(b, (sys.argv[1], 5001))
    if pps and i % 100 == 99:
        t += 100 / pps
        time.sleep(max(0.0, t - time.monotonic()))
"#;

/// The reader's dump, run in guest b.
fn reader(b: &mut Guest) -> Value {
    let out = sh(b, "chroot /host python3 /tmp/netsteer-x/page_pools.py");
    serde_json::from_str(out.trim()).unwrap()
}

fn stats_of(r: &Value, id: u64) -> Value {
    r["stats"]
        .as_array()
        .expect("a 7.3 guest has CONFIG_PAGE_POOL_STATS")
        .iter()
        .find(|s| s["id"].as_u64() == Some(id))
        .unwrap_or_else(|| panic!("no counters for pool {id}: {r}"))
        .clone()
}

fn n(s: &Value, k: &str) -> u64 {
    s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"))
}

/// One round: the receiver (buffer `rcvbuf`, mode `hold` or `live`) takes `packets`
/// datagrams, then reads dry. Returns what `ss` said of it before it read dry, and how many
/// datagrams it got.
fn round(
    a: &mut Guest,
    b: &mut Guest,
    rcvbuf: u32,
    mode: &str,
    (packets, pps): (u32, u32),
) -> (String, u64) {
    sh(
        b,
        &format!(
            "rm -f /x/recv.ready /x/go; chroot /host python3 /tmp/netsteer-x/recv.py {rcvbuf} {mode} > /x/recv.out 2>&1 & i=0; while [ ! -e /x/recv.ready ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.1; done; [ -e /x/recv.ready ]"
        ),
    );
    sh(
        a,
        &format!(
            "chroot /host python3 /tmp/netsteer-x/send.py {VM_B_ADDR} {packets} {SPORT} {pps}"
        ),
    );
    // Whatever is still in flight lands before the socket is looked at.
    sh(b, "sleep 1");
    let held = sh(b, "chroot /host ss -u -a -n -p 'sport = :5001'");
    let got = sh(
        b,
        "touch /x/go; i=0; while [ ! -s /x/recv.out ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.1; done; cat /x/recv.out",
    );
    let got = got
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("receiver: {got}"));
    (held, got)
}

/// The pair, booted, and the flood sent in rounds until one of guest b's pools has handed out
/// enough pages to be judged (two, at 80,000 datagrams each: two per page): the pair, eth0's
/// ifindex in b, and what `ss` said of the last round's receiver while it held.
fn flooded() -> (VmPair, u64, String) {
    let mut pair = VmPair::new(
        "pool",
        &VmPairSpec {
            nic: NicModel::Virtio,
            queues: 2,
            kernel: Some("7.3".into()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("virtio guests on 7.3: {e}"));
    if let Some(what) = &pair.retried {
        eprintln!("pool: retried after an emulator crash: {what}");
    }
    pair.install(std::path::Path::new(BIN)).unwrap();
    std::fs::write(pair.b.share_dir().join("recv.py"), RECV).unwrap();
    std::fs::write(pair.a.share_dir().join("send.py"), SEND).unwrap();
    std::fs::write(
        pair.b.share_dir().join("page_pools.py"),
        common::pools::READER,
    )
    .unwrap();
    let (a, b) = (&mut pair.a, &mut pair.b);
    sh(b, "chroot /host sysctl -q -w net.core.rmem_max=134217728");
    let ifindex: u64 = sh(b, "cat /sys/class/net/eth0/ifindex")
        .trim()
        .parse()
        .unwrap();
    // The rx ring shrunk to 64 and the link taken down and up: if the pools followed the rx
    // ring, a drained socket's pages would overflow a ring of 64; they overflow one of some
    // 256, the size the pool was made with.
    sh(
        b,
        "chroot /host ethtool -G eth0 rx 64 && chroot /host ip link set eth0 down && chroot /host ip link set eth0 up && sleep 2",
    );
    let start = reader(b);
    let mut held = String::new();
    for i in 0.. {
        held = round(a, b, 64 << 20, "hold", (80_000, 0)).0;
        let now = reader(b);
        let (id, s) = busiest(&now, ifindex);
        eprintln!("round {i}: pool {id}: {s}");
        if i == 0 {
            let was = stats_of(&start, id);
            let ring = n(&s, "recycle_ring") - n(&was, "recycle_ring");
            assert!(
                ring >= 128 && n(&s, "recycle_ring_full") > n(&was, "recycle_ring_full"),
                "pool {id}'s ring took {ring} pages of a drained socket with the rx ring at 64: {was} → {s}"
            );
            eprintln!("with the rx ring at 64, pool {id}'s ring took {ring} pages before freeing");
        }
        if handed(&s) >= HANDED_FLOOR + 4096 {
            break;
        }
        assert!(
            i < 4,
            "pool {id} handed out too few pages after {i} rounds: {s}"
        );
    }
    (pair, ifindex, held)
}

/// The doctor's sums, from the reader's counters (netdev.yaml names).
fn handed(s: &Value) -> u64 {
    n(s, "alloc_fast") + n(s, "alloc_refill") + n(s, "alloc_slow") + n(s, "alloc_slow_high_order")
}

fn kept(s: &Value) -> u64 {
    n(s, "recycle_cached") + n(s, "recycle_ring") - n(s, "alloc_waive")
}

fn freed(s: &Value) -> u64 {
    n(s, "recycle_ring_full") + n(s, "recycle_released_refcnt") + n(s, "alloc_waive")
}

/// The pool of the device `ifindex` that handed out most pages, and its counters.
fn busiest(r: &Value, ifindex: u64) -> (u64, Value) {
    r["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["ifindex"].as_u64() == Some(ifindex))
        .map(|p| {
            let id = p["id"].as_u64().unwrap();
            (id, stats_of(r, id))
        })
        .max_by_key(|(_, s)| n(s, "alloc_fast"))
        .unwrap()
}

#[test]
fn a_page_pool_that_frees_its_pages_is_found_by_doctor() {
    if !common::vm_usable(NicModel::Virtio) {
        return;
    }
    let (mut pair, ifindex, held) = flooded();
    let (a, b) = (&mut pair.a, &mut pair.b);
    // The fix's step, run while the receiver held: it names the receiver and its pages.
    // `UNCONN 87031808 0 0.0.0.0:5001 … users:(("python3",…))`: Recv-Q, in bytes.
    let rmem: u64 = held
        .lines()
        .find(|l| l.contains(":5001"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no Recv-Q in {held}"));
    assert!(held.contains("python3"), "{held}");
    assert!(rmem >= 16 << 20, "the receiver held {rmem} bytes: {held}");

    // doctor, between two reads of the reader that agree (no page moved meanwhile).
    let (report, r) = (0..3)
        .find_map(|_| {
            let before = reader(b);
            let (rc, out) = b
                .host(&[GBIN, "doctor", "--json", "--sample", "1"], T)
                .unwrap();
            assert!(rc == 0 || rc == 1, "doctor: exit {rc}: {out}");
            let after = reader(b);
            (before == after).then(|| (serde_json::from_str::<Report>(&out).unwrap(), after))
        })
        .expect("page pools kept moving across three doctor runs");
    let found: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.id == "page-pool-freeing")
        .collect();
    assert_eq!(found.len(), 1, "{:#?}", report.findings);
    let f = found[0];
    let (id, s) = busiest(&r, ifindex);
    let full = n(&s, "recycle_ring_full");
    let e = f.evidence.join("\n");
    for want in [
        format!("page pool {id} (eth0 rx-"),
        format!("{} pages handed out", count(handed(&s))),
        format!("{} were kept", count(kept(&s))),
        format!("{} with the ring full", count(full)),
        format!("and {} (", count(freed(&s))),
        // The ring below its maximum, and still no ring step: said why.
        "rx ring: 64 descriptors of at most 256".to_string(),
    ] {
        assert!(e.contains(&want), "{want:?} in\n{e}\nreader: {s}");
    }
    assert!(
        e.contains("virtio_net keeps the pools it made at probe"),
        "{e}"
    );
    assert_eq!(f.fix.tune, None, "no ring change on virtio_net");
    assert!(
        f.fix.steps.iter().any(|s| s.starts_with("ss -u -a -n -p")),
        "{:?}",
        f.fix.steps
    );
    eprintln!("doctor: {}\n{e}", f.title);

    // top, running across one more held round: it names the pool on its device in every
    // interval the pool moved pages, and its intervals together cover what the reader saw the
    // pool count between before top began and after it ended (nothing but the round moves
    // pages). That a rate times its interval is the interval's count is true by construction;
    // this holds top's window, its pool and its sums to the kernel's counters.
    let before = stats_of(&reader(b), id);
    sh(
        b,
        &format!(
            "rm -f /x/top.jsonl; chroot /host {GBIN} top --json --interval 1 > /x/top.jsonl 2> /x/top.err & echo $! > /x/top.pid; i=0; while [ ! -s /x/top.jsonl ] && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done; [ -s /x/top.jsonl ]"
        ),
    );
    round(a, b, 64 << 20, "hold", (80_000, 0));
    sh(
        b,
        "sleep 2.5; kill $(cat /x/top.pid); sleep 0.5; cat /x/top.err",
    );
    let after = stats_of(&reader(b), id);
    let lines = std::fs::read_to_string(b.share_dir().join("top.jsonl")).unwrap();
    let mut sums = [0.0f64; 3];
    let mut shown = 0;
    for l in lines.lines() {
        let m: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let dt = m["interval_s"].as_f64().unwrap();
        for p in m["page_pools"].as_array().into_iter().flatten() {
            if p["pool"].as_u64() != Some(id) {
                continue;
            }
            shown += 1;
            assert_eq!(p["nic"], "eth0", "{p}");
            for (k, key) in ["handed_per_s", "kept_per_s", "freed_per_s"]
                .iter()
                .enumerate()
            {
                sums[k] += p[key].as_f64().unwrap_or_else(|| panic!("{key} in {p}")) * dt;
            }
        }
    }
    assert!(shown >= 3, "pool {id} in {shown} intervals of\n{lines}");
    let delta = |f: &dyn Fn(&Value) -> u64| (f(&after) - f(&before)) as f64;
    let want = [delta(&handed), delta(&kept), delta(&freed)];
    // What top can miss: pages that move between its last read and the reader's after it.
    // Seen: 20 pages freed. The likely source is skbs whose free was deferred to the CPU that
    // received them (skb_attempt_defer_free, net/core/skbuff.c), freed at that CPU's next
    // NET_RX; at most net.core.skb_defer_max skbs a CPU, each one buffer of one page.
    let defer: f64 = sh(b, "cat /proc/sys/net/core/skb_defer_max")
        .trim()
        .parse()
        .unwrap();
    let cpus: f64 = sh(b, "nproc").trim().parse().unwrap();
    for k in 0..3 {
        let missed = want[k] - sums[k];
        assert!(
            (-0.5..=defer * cpus + 0.5).contains(&missed),
            "top's rates over {shown} intervals add up to {sums:?}, the reader counted {want:?} (up to {} deferred)",
            defer * cpus
        );
    }
    assert!(want[2] > 10_000.0, "the held round freed {want:?}");
    eprintln!("top across a held round: handed, kept, freed {sums:?} = the reader's {want:?}");

    // What reading sooner does: 20,000 datagrams at 5,000 a second (the 64 MiB buffer holds
    // all of them, so none is dropped whoever is slow), held then read at once, and read as
    // they arrive. Measured, not judged: held, all but the ring's 250 of their 10,000 pages are
    // freed; read as they arrive, 6,052 and 8,742 still were in two runs (the frees of a
    // reader in process context go to the ring, which the NAPI drains only when its cache is
    // empty), so reading sooner does not end the freeing here.
    let paced = (20_000, 5_000);
    let ring_full = |b: &mut Guest| n(&stats_of(&reader(b), id), "recycle_ring_full");
    let at = ring_full(b);
    let (_, got_held) = round(a, b, 64 << 20, "hold", paced);
    let held = ring_full(b) - at;
    let at = ring_full(b);
    let (_, got_live) = round(a, b, 64 << 20, "live", paced);
    let live = ring_full(b) - at;
    eprintln!(
        "20000 datagrams at 5000/s: held then read at once, {got_held} read and {held} pages freed with the ring full; read as they arrive, {got_live} read and {live} freed"
    );
    assert!(
        got_held >= 19_000 && got_live >= 19_000,
        "datagrams lost: held {got_held}, live {got_live} of 20000"
    );
    assert!(held > 5_000, "held, only {held} freed");
}

/// Regenerates `fixtures/hosts/zoo-virtio-pool-freeing-7.3`: guest b's tree right after the
/// flood, its busiest pool freeing 40 % of what came back; the tree doctor's rule test and the
/// ablation test read. Run by hand: `cargo test -p netsteer --test vm_pool -- --ignored`.
#[test]
#[ignore]
fn capture_pool_freeing_fixture() {
    assert!(common::vm_usable(NicModel::Virtio));
    let (mut pair, _, _) = flooded();
    common::capture_guest(&mut pair.b, GBIN, "zoo-virtio-pool-freeing-7.3");
}
