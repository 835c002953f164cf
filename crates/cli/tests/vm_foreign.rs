//! Root-only, live: issue 75's foreign changes, seen by a lane's holder. Two QEMU guests with
//! virtio-net with RSS; in guest b a lane for netsteer's echo server (`--rss-bucket`: the
//! emulated NIC has no n-tuple filters, so the lane owns one bucket of the table) and its
//! holder, `netsteer lane hold --json`. Then someone else rewrites the table (`ethtool -X eth0
//! equal 2`, the guest's own tool).
//!
//! On Debian's 7.3 the kernel announces it (ETHTOOL_MSG_RSS_NTF, 6.17+): the holder says it saw
//! the table change by the notification, within 100 ms of ethtool's return (measured on the
//! guest's clock). On backports' 6.12 the kernel announces channels but not RSS: the holder
//! says so when it starts and finds the change at its next read-back (`--verify-interval`).
//! Either way the drift names the table item, and with `--on-foreign report` nothing is written
//! back: the table stays as ethtool left it.

mod common;

use common::guest::{GBIN, now_ms, sh, start_server};
use netsteer_lab::vm::{Guest, NicModel, VmPair, VmPairSpec};
use serde_json::Value;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const LANES: &str = "/tmp/ln";
/// One pair of guests at a time: two would put eight emulated CPUs on CI's two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The holder's events so far.
fn events(b: &Guest) -> Vec<Value> {
    std::fs::read_to_string(b.share_dir().join("hold.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits (at most `within`) for the holder's first event of kind `event`.
fn wait_event(b: &Guest, event: &str, within: Duration) -> Value {
    let start = Instant::now();
    loop {
        if let Some(e) = events(b).into_iter().find(|e| e["event"] == event) {
            return e;
        }
        if start.elapsed() > within {
            let log = std::fs::read_to_string(b.share_dir().join("hold.jsonl")).unwrap_or_default();
            panic!("no {event} event from the holder in {within:?}: {log}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What each kernel must show (see the module doc).
fn held_lane_sees_a_foreign_table(kernel: &str, notified: bool) {
    if !common::vm_usable(NicModel::VirtioRss) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut pair = VmPair::new(
        "fgn",
        &VmPairSpec {
            nic: NicModel::VirtioRss,
            kernel: Some(kernel.into()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("virtio-rss guests on {kernel}: {e}"));
    if let Some(what) = &pair.retried {
        eprintln!("foreign: retried after an emulator crash: {what}");
    }
    assert_eq!(pair.install(std::path::Path::new(BIN)).unwrap(), GBIN);
    let b = &mut pair.b;
    start_server(b);
    let applied = sh(
        b,
        &format!(
            "chroot /host {GBIN} lane apply --name lat --dev eth0 --udp 4321 --cpu 1 --queue 1 --mode irq --rss-bucket 5 --state-dir {LANES} --json"
        ),
    );
    let applied: Value =
        serde_json::from_str(applied.trim()).unwrap_or_else(|e| panic!("{e}: {applied}"));
    assert_eq!(applied["status"], "applied", "{applied}");
    let table_before = sh(b, "chroot /host ethtool -x eth0");
    sh(
        b,
        &format!(
            "chroot /host {GBIN} lane hold lat --state-dir {LANES} --json --interval 0.2 --verify-interval 1 > /x/hold.jsonl 2>&1 &"
        ),
    );
    let watching = wait_event(b, "watching", Duration::from_secs(60));
    eprintln!("{kernel}: {watching}");
    assert_eq!(watching["watching"]["by"], "notifications", "{watching}");
    assert_eq!(watching["watching"]["rss"], notified, "{watching}");
    // Two read-backs, so the foreign change is not the holder's first look.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !events(b).iter().any(|e| e["event"] == "foreign"),
        "a foreign change before there was one: {:?}",
        events(b)
    );

    let before = now_ms(b);
    sh(b, "chroot /host ethtool -X eth0 equal 2");
    let after = now_ms(b);
    let ev = wait_event(b, "foreign", Duration::from_secs(30));
    eprintln!("{kernel}: ethtool -X ran {before}..{after} ms: {ev}");
    let drifted: Vec<&str> = ev["drift"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["id"].as_str())
        .collect();
    assert!(drifted.contains(&"nic/eth0/rss/indirection"), "{drifted:?}");
    assert!(ev["reasserted"].is_null(), "{ev}");
    let at = ev["seen"]["at_unix_ms"].as_u64().unwrap();
    assert!(at >= before, "seen at {at}, before ethtool ran at {before}");
    if notified {
        assert_eq!(ev["seen"]["by"], "notification", "{ev}");
        assert_eq!(ev["seen"]["change"], "RSS", "{ev}");
        // Read while ethtool ran, or at once after (the holder sleeps in poll(2) on the
        // socket); a read-back already running when the change landed reads it after that
        // read-back, which under TCG on a busy machine can take most of a second.
        assert!(
            at <= after + 1000,
            "the notification was read {} ms after ethtool returned",
            at - after
        );
    } else {
        assert_eq!(ev["seen"]["by"], "polling", "{ev}");
    }
    eprintln!(
        "{kernel}: seen by {} {} ms after ethtool returned",
        ev["seen"]["by"],
        at as i64 - after as i64
    );
    // Reported, not undone: the table is ethtool's.
    let table_after = sh(b, "chroot /host ethtool -x eth0");
    assert_ne!(table_after, table_before);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(sh(b, "chroot /host ethtool -x eth0"), table_after);
    // Said once: the same drift at the next read-backs is not said again.
    let foreign = events(b).iter().filter(|e| e["event"] == "foreign").count();
    assert_eq!(foreign, 1, "{:?}", events(b));
    // Left for good: removing the lane restores the rest and not the table ethtool wrote.
    sh(b, "chroot /host killall -TERM netsteer; sleep 1");
    let removed = sh(
        b,
        &format!("chroot /host {GBIN} lane remove lat --state-dir {LANES} --json"),
    );
    eprintln!("{kernel}: lane remove: {}", removed.trim());
    assert_eq!(sh(b, "chroot /host ethtool -x eth0"), table_after);
}

#[test]
fn on_7_3_the_holder_sees_a_foreign_table_by_the_kernels_notification() {
    held_lane_sees_a_foreign_table("7.3", true);
}

#[test]
fn on_6_12_the_holder_sees_a_foreign_table_at_its_next_read_back() {
    held_lane_sees_a_foreign_table("6.12", false);
}
