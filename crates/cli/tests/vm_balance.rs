//! Root-only, live: issue 75's per-interval balance. Two QEMU guests with virtio-net with RSS
//! (Debian's backports 6.12); guest a sends 64 UDP flows to netsteer's echo server in guest b
//! over an even indirection table, then, mid-run, `ethtool -X eth0 weight 1 0` puts every
//! bucket on rx-0. `netsteer top --json` and the agent run in guest b throughout.
//!
//! What must hold: the interval's CV and normalized spread of the receive queues (interrupts,
//! and packets where the driver counts them per queue) go from even to "one queue has it all"
//! (spread 2) within an interval of the table's change, while the since-boot figure, the one
//! `ynltool qstats balance` gives, barely moves; the agent's `window="interval"` and
//! `window="boot"` series say the same. The guest's own /proc/interrupts is the readback: over
//! the skewed phase rx-1 takes (almost) nothing, and its since-boot counts give top's
//! since-boot spread.
//!
//! Emulated (TCG): the driver, vectors and table are real, the rates are not measured here
//! (the assertions are on shares of counts, not on how many).

mod common;

use common::guest::{GBIN, now_ms, sh, start_flows, start_server, stop_flows, wait_for_echoes};
use netsteer_host::balance::{BalanceOf, QueueBalance, cv_and_spread};
use netsteer_host::sample::TopInterval;
use netsteer_lab::vm::{Guest, NicModel, VmPair, VmPairSpec, ladder};
use std::collections::BTreeMap;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const AGENT: &str = "127.0.0.1:9641";
/// Seconds of even flows before the table changes: the since-boot counts hold this much even
/// traffic (and the boot's), so one skewed second moves their spread by about 2/20.
const EVEN_S: u64 = 20;
/// Seconds of skewed flows after it.
const SKEWED_S: u64 = 12;

/// The receive vectors' interrupts per queue since boot, from the guest's /proc/interrupts,
/// of the receive queues its /sys/class/net/eth0/queues lists (virtio_net keeps the vectors
/// of every queue pair the device offers, turned on or not).
fn rx_irqs(g: &mut Guest) -> BTreeMap<u32, u64> {
    let listed = sh(g, "ls /sys/class/net/eth0/queues");
    let on: Vec<u32> = listed
        .split_whitespace()
        .filter_map(|q| q.strip_prefix("rx-")?.parse().ok())
        .collect();
    assert!(on.len() >= 2, "eth0's queues: {listed}");
    let now = ladder::irq_counts(g, NicModel::VirtioRss).unwrap();
    ladder::rx_by_queue(&ladder::delta(&Default::default(), &now))
        .into_iter()
        .filter(|(q, _)| on.contains(q))
        .collect()
}

fn spread_of(counts: &BTreeMap<u32, u64>) -> f64 {
    let v: Vec<f64> = counts.values().map(|n| *n as f64).collect();
    cv_and_spread(&v)
        .unwrap_or_else(|| panic!("nothing counted: {counts:?}"))
        .1
}

/// One scrape of the agent in guest b: `netsteer_queue_balance_spread` of eth0's `of` by
/// window (`interval`, `boot`).
fn agent_spreads(b: &mut Guest, of: &str) -> BTreeMap<String, f64> {
    let text = sh(b, &format!("chroot /host curl -sf http://{AGENT}/metrics"));
    let mut m = BTreeMap::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("netsteer_queue_balance_spread{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").unwrap();
        if !labels.contains("device=\"eth0\"") || !labels.contains(&format!("of=\"{of}\"")) {
            continue;
        }
        let window = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("window=\""))
            .map(|w| w.trim_end_matches('"').to_string())
            .unwrap();
        m.insert(window, value.trim().parse().unwrap());
    }
    m
}

/// The interval's start and end on the guest's clock, in milliseconds.
fn span(i: &TopInterval) -> (u64, u64) {
    let end = i.time_unix_ms;
    (end.saturating_sub((i.interval_s * 1000.0) as u64), end)
}

fn group(list: &[QueueBalance], of: BalanceOf) -> Option<&QueueBalance> {
    list.iter().find(|b| b.nic == "eth0" && b.of == of)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What top's intervals show for one group: the even phase's and the skewed phase's spreads
/// move apart, the since-boot spread of the first skewed interval moves little from the last
/// even one's, and the since-boot totals never go back.
fn top_shows(intervals: &[TopInterval], of: BalanceOf, skew: (u64, u64)) {
    let series: Vec<(u64, u64, f64, f64, f64)> = intervals
        .iter()
        .filter_map(|i| {
            let now = group(&i.balance, of)?;
            let boot = group(&i.balance_since_boot, of)?;
            let (start, end) = span(i);
            Some((start, end, now.spread?, boot.spread?, boot.total))
        })
        .collect();
    for (start, end, now, boot, _) in &series {
        eprintln!(
            "{}: {start}..{end}: interval spread {now:.2}, since boot {boot:.2}",
            of.word()
        );
    }
    for w in series.windows(2) {
        assert!(
            w[1].4 >= w[0].4,
            "{}: the since-boot total went back: {} → {}",
            of.word(),
            w[0].4,
            w[1].4
        );
    }
    let even: Vec<_> = series.iter().filter(|s| s.1 <= skew.0).collect();
    let skewed: Vec<_> = series.iter().filter(|s| s.0 >= skew.1).collect();
    assert!(
        even.len() >= 5 && skewed.len() >= 5,
        "{}: {} even and {} skewed intervals",
        of.word(),
        even.len(),
        skewed.len()
    );
    let even_spread = median(even.iter().map(|s| s.2).collect());
    // Every bucket on rx-0: rx-1 takes nothing, so the spread is 2 (a stray packet aside).
    for s in &skewed {
        assert!(
            s.2 >= 1.8,
            "{}: a skewed interval's spread is {:.2}: {s:?}",
            of.word(),
            s.2
        );
    }
    // Even: the quieter queue has at least a quarter of the busier one's (a TCG guest's
    // interrupts are not its packets: a busy queue stays in NAPI polling longer).
    assert!(
        even_spread <= 1.2,
        "{}: the even table's median spread is {even_spread:.2}",
        of.word()
    );
    let (last_even, first_skewed) = (even[even.len() - 1], skewed[0]);
    let moved_now = first_skewed.2 - last_even.2;
    let moved_boot = (first_skewed.3 - last_even.3).abs();
    assert!(
        moved_boot <= 0.4 * moved_now,
        "{}: the since-boot spread moved {moved_boot:.2} where the interval's moved {moved_now:.2}",
        of.word()
    );
    eprintln!(
        "{}: interval spread {:.2} → {:.2}, since boot {:.2} → {:.2}",
        of.word(),
        last_even.2,
        first_skewed.2,
        last_even.3,
        first_skewed.3
    );
}

#[test]
fn per_interval_balance_moves_when_the_table_is_skewed_and_since_boot_does_not() {
    if !common::vm_usable(NicModel::VirtioRss) {
        return;
    }
    let mut pair = VmPair::new(
        "bal",
        &VmPairSpec {
            nic: NicModel::VirtioRss,
            kernel: Some("6.12".into()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("virtio-rss guests on 6.12: {e}"));
    if let Some(what) = &pair.retried {
        eprintln!("balance: retried after an emulator crash: {what}");
    }
    assert_eq!(pair.install(std::path::Path::new(BIN)).unwrap(), GBIN);
    let (a, b) = (&mut pair.a, &mut pair.b);
    start_server(b);
    // An even table, UDP hashed on ports too.
    sh(
        b,
        "chroot /host ethtool -X eth0 equal 2 && chroot /host ethtool -N eth0 rx-flow-hash udp4 sdfn",
    );
    eprintln!(
        "guest b's table and channels:\n{}",
        sh(
            b,
            "chroot /host ethtool -x eth0; chroot /host ethtool -l eth0; chroot /host ethtool -n eth0 rx-flow-hash udp4"
        )
    );
    start_flows(a, 300);
    assert!(
        wait_for_echoes(b, 20, 60),
        "the echo server saw no flows in a minute"
    );
    sh(
        b,
        &format!(
            "chroot /host {GBIN} agent --listen {AGENT} --dev eth0 --rate-interval 1 > /x/agent.log 2>&1 &"
        ),
    );
    sh(
        b,
        "i=0; while [ $i -lt 100 ]; do chroot /host ss -Hltn 'sport = :9641' | grep -q . && exit 0; i=$((i+1)); sleep 0.1; done; cat /x/agent.log; exit 1",
    );
    sh(
        b,
        &format!(
            "chroot /host {GBIN} top --json --interval 1 --count 600 > /x/top.jsonl 2> /x/top.err & echo $! > /x/top.pid"
        ),
    );
    std::thread::sleep(Duration::from_secs(EVEN_S));
    eprintln!("{}", sh(b, "grep virtio /proc/interrupts"));
    let agent_even = agent_spreads(b, "rx-interrupts");

    let skew_from = now_ms(b);
    sh(b, "chroot /host ethtool -X eth0 weight 1 0");
    let skew_to = now_ms(b);
    let irqs_at_skew = rx_irqs(b);
    // The agent's sampler (every second) has a whole skewed interval within about two; a
    // starved guest may take longer, so the scrape is repeated (up to 10 s) until it does.
    std::thread::sleep(Duration::from_millis(2200));
    let mut agent_skewed = agent_spreads(b, "rx-interrupts");
    let asked = std::time::Instant::now();
    while agent_skewed.get("interval").is_none_or(|v| *v < 1.8)
        && asked.elapsed() < Duration::from_secs(8)
    {
        std::thread::sleep(Duration::from_millis(500));
        agent_skewed = agent_spreads(b, "rx-interrupts");
    }
    let own_at_scrape = spread_of(&rx_irqs(b));
    std::thread::sleep(Duration::from_secs(SKEWED_S - 2));
    let irqs_end = rx_irqs(b);
    let read_end = now_ms(b);
    sh(b, "kill $(cat /x/top.pid)");
    stop_flows(a);
    sh(
        b,
        "chroot /host killall netsteer; chroot /host ethtool -X eth0 default",
    );

    let err = std::fs::read_to_string(b.share_dir().join("top.err")).unwrap();
    let text = std::fs::read_to_string(b.share_dir().join("top.jsonl")).unwrap();
    let intervals: Vec<TopInterval> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!intervals.is_empty(), "top printed nothing: {err}");
    let has_packets = intervals
        .iter()
        .any(|i| group(&i.balance, BalanceOf::RxPackets).is_some());
    eprintln!(
        "top: {} intervals; per-queue packet counters: {has_packets}",
        intervals.len()
    );
    top_shows(&intervals, BalanceOf::RxInterrupts, (skew_from, skew_to));
    if has_packets {
        top_shows(&intervals, BalanceOf::RxPackets, (skew_from, skew_to));
    }

    // The guest's own counts: over the skewed phase rx-1 took almost nothing, and their
    // since-boot spread is the one top gave for its last interval before the read.
    let skewed: BTreeMap<u32, u64> = irqs_end
        .iter()
        .map(|(q, n)| (*q, n - irqs_at_skew.get(q).copied().unwrap_or(0)))
        .collect();
    let total: u64 = skewed.values().sum();
    assert!(
        total > 0 && skewed.get(&1).copied().unwrap_or(0) * 20 <= total,
        "/proc/interrupts over the skewed phase: {skewed:?}"
    );
    let last = intervals
        .iter()
        .rfind(|i| i.time_unix_ms <= read_end)
        .unwrap();
    let top_boot = group(&last.balance_since_boot, BalanceOf::RxInterrupts)
        .and_then(|g| g.spread)
        .unwrap();
    let own_boot = spread_of(&irqs_end);
    assert!(
        (top_boot - own_boot).abs() <= 0.1,
        "since boot: top {top_boot:.3} at {}, /proc/interrupts {own_boot:.3} at {read_end} ({irqs_end:?})",
        last.time_unix_ms
    );

    // The agent's two windows, scraped before and after the change.
    eprintln!("agent: even {agent_even:?}, skewed {agent_skewed:?}");
    let at = |m: &BTreeMap<String, f64>, w: &str| {
        *m.get(w)
            .unwrap_or_else(|| panic!("no {w} series for eth0 rx-interrupts: {m:?}"))
    };
    assert!(
        at(&agent_skewed, "interval") >= 1.8 && at(&agent_even, "interval") <= 1.2,
        "agent: {agent_even:?} → {agent_skewed:?}"
    );
    // Since boot stays far from "one queue has it all", and is the figure the guest's own
    // counts give (read just after the scrape: a second of skew moves it by about 0.1).
    assert!(
        at(&agent_skewed, "boot") <= at(&agent_skewed, "interval") - 0.5,
        "agent: since boot {agent_skewed:?}"
    );
    assert!(
        (at(&agent_skewed, "boot") - own_at_scrape).abs() <= 0.15,
        "agent: since boot {:.3}, /proc/interrupts {own_at_scrape:.3}",
        at(&agent_skewed, "boot")
    );
}
