//! Root-only, live on drivers that have the seed-000 knobs: two QEMU guests with Intel igb
//! (82576) or virtio-net with RSS, on Debian's 6.1 kernel and bookworm-backports' 6.12. The
//! host's netsteer runs inside guest b, guest a sends the traffic. Every readback is the
//! guest's own: `ethtool -x/-c/-l/-g` and /proc/interrupts, never netsteer's reading of them.
//!
//! Each test boots one pair and runs the whole story on it: `show` gives every queue's vector
//! and CPU; an indirection table with all weight on queue 0 under 64 flows makes a hot queue
//! `doctor` names; `tune apply` rebalances it (with channels, and coalescing and rings where the
//! driver has them) and the interrupts move to the queues the table now names; `verify` is
//! clean and then catches a table changed behind tune's back; `rollback` leaves the four
//! readbacks and every vector's affinity byte for byte as they were. Then what differs by
//! kernel: on 6.1 the interfaces it lacks are named and nothing fails; on 6.12 the NAPIs netdev
//! netlink lists and what it cannot say; and for virtio-net with RSS, the table QEMU drops on a
//! queue-count change (on 6.1 and 6.12 alike here), which doctor names and tune writes again.
//!
//! Emulated (TCG): the drivers, vectors, tables and placements are real; timings are not
//! measured here.

mod common;

use common::guest::{GBIN, sh, start_flows, start_server, stop_flows};

use netsteer_host::view::HostView;
use netsteer_lab::vm::{Guest, NicModel, VM_B_ADDR, VmPair, VmPairSpec, ladder};
use netsteer_steering::doctor::Report;
use netsteer_steering::tune::ApplyReport;
use netsteer_steering::tune::{ApplyStatus, StepStatus};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
const T: Duration = Duration::from_secs(240);
const STATE: &str = "/tmp/st";
/// One pair of guests at a time: two would put eight emulated CPUs on CI's two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn usable(model: NicModel) -> bool {
    common::vm_usable(model)
}

fn boot(model: NicModel, kernel: &str) -> VmPair {
    let pair = VmPair::new(
        "drv",
        &VmPairSpec {
            nic: model,
            kernel: Some(kernel.into()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{} guests on {kernel}: {e}", model.name()));
    assert_eq!(pair.install(std::path::Path::new(BIN)).unwrap(), GBIN);
    eprintln!(
        "{} guests booted in {:.1} s and {:.1} s (kernel {})",
        model.name(),
        pair.a.boot_time.as_secs_f64(),
        pair.b.boot_time.as_secs_f64(),
        pair.a.release
    );
    assert!(
        pair.a.release.starts_with(&format!("{kernel}.")),
        "asked for {kernel}, booted {}",
        pair.a.release
    );
    pair
}

/// netsteer in the guest: exit code and output.
fn ns(g: &mut Guest, args: &[&str]) -> (i32, String) {
    let mut argv = vec![GBIN];
    argv.extend_from_slice(args);
    g.host(&argv, T).unwrap()
}

fn ns_ok(g: &mut Guest, args: &[&str]) -> String {
    let (rc, out) = ns(g, args);
    assert_eq!(rc, 0, "netsteer {}: {out}", args.join(" "));
    out
}

/// What the guest's own tools say about eth0: the four ethtool readbacks and each queue
/// vector's affinity, as text to compare byte for byte.
fn readbacks(g: &mut Guest, model: NicModel) -> String {
    let mut out = sh(
        g,
        "chroot /host ethtool -x eth0; chroot /host ethtool -c eth0; chroot /host ethtool -l eth0; chroot /host ethtool -g eth0",
    );
    for (irq, (name, _, allowed)) in ladder::irq_counts(g, model).unwrap() {
        out.push_str(&format!("{irq} {name} {allowed}\n"));
    }
    out
}

/// The receive queue of a vector name (`eth0-rx-1`, `eth0-TxRx-1`, `virtio2-input.1`).
fn rx_queue(name: &str) -> Option<u32> {
    netsteer_lab::vm::ladder::rx_queue_of(name)
}

/// Receive interrupts per queue since boot, from the guest's /proc/interrupts.
fn rx_irqs(g: &mut Guest, model: NicModel) -> BTreeMap<u32, u64> {
    let now = ladder::irq_counts(g, model).unwrap();
    ladder::rx_by_queue(&ladder::delta(&Default::default(), &now))
}

fn since(before: &BTreeMap<u32, u64>, after: &BTreeMap<u32, u64>) -> BTreeMap<u32, u64> {
    after
        .iter()
        .map(|(q, n)| (*q, n - before.get(q).copied().unwrap_or(0)))
        .collect()
}

/// Buckets per queue of the table `ethtool -x eth0` prints.
fn table(g: &mut Guest) -> BTreeMap<u32, usize> {
    let out = sh(g, "chroot /host ethtool -x eth0");
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        if k.trim().parse::<u32>().is_err() {
            continue;
        }
        for q in v.split_whitespace().filter_map(|q| q.parse::<u32>().ok()) {
            *m.entry(q).or_insert(0) += 1;
        }
    }
    assert!(!m.is_empty(), "no indirection table: {out}");
    m
}

/// `flows` UDP flows from guest a for `seconds`, in the foreground.
fn burst(a: &mut Guest, flows: u32, seconds: u32) {
    stop_flows(a);
    sh(
        a,
        &format!(
            "chroot /host {GBIN} bench udp-echo client {VM_B_ADDR}:4321 --flows {flows} --duration {seconds} --timeout 5 > /dev/null"
        ),
    );
}

/// Packets received per queue since boot, from the driver's own counters (`ethtool -S eth0`).
fn rx_packets(g: &mut Guest) -> BTreeMap<u32, u64> {
    netsteer_lab::vm::lane::ethtool_rx_packets(&sh(g, "chroot /host ethtool -S eth0"))
}

/// The server's received packets per queue during a one-second burst of 64 flows: the
/// driver's per-queue counters where it has them (igb, virtio-net on 6.1), not interrupts (under a loaded host a busy queue stays in
/// NAPI polling and takes fewer interrupts for more packets: a CI run once saw rx-0 take
/// 0.76 of the interrupts of a table split in two).
/// Packets per rx queue over one-second bursts of 64 flows, repeated (up to six) until they
/// add up to at least `min_total`: a burst that a loaded machine's TCG guests carried 94
/// packets of once left a queue with 32 of 128 buckets at zero by chance (a fresh-clone run
/// with a busy loop), which says nothing about the table.
fn rx_during_bursts(pair: &mut VmPair, min_total: u64) -> BTreeMap<u32, u64> {
    let mut sum: BTreeMap<u32, u64> = BTreeMap::new();
    for _ in 0..6 {
        for (q, n) in rx_during_burst(pair) {
            *sum.entry(q).or_default() += n;
        }
        if sum.values().sum::<u64>() >= min_total {
            break;
        }
    }
    sum
}

fn rx_during_burst(pair: &mut VmPair) -> BTreeMap<u32, u64> {
    // A driver without per-queue packet counters under these names (virtio-net on 6.12
    // names them otherwise) is read by its receive interrupts, as before.
    if rx_packets(&mut pair.b).is_empty() {
        let before = rx_irqs(&mut pair.b, pair.nic);
        burst(&mut pair.a, 64, 1);
        let after = rx_irqs(&mut pair.b, pair.nic);
        return since(&before, &after);
    }
    let before = rx_packets(&mut pair.b);
    burst(&mut pair.a, 64, 1);
    let after = rx_packets(&mut pair.b);
    since(&before, &after)
}

/// `doctor --sample 2` in guest b while guest a sends 64 flows. The RSS rules judge only a
/// sample with enough receive interrupts (`MIN_RX_IRQS_PER_S`, counted here from the guest's
/// /proc/interrupts around the doctor run); on a loaded machine TCG guests can be too slow to reach it (a fresh-clone
/// run under a busy loop once carried 7 to 106 echoes/s), so a sample too quiet for the rule is
/// taken again (up to six times) rather than judged, each only once the echo server says the
/// traffic arrives. So is one without the finding the caller `wants`. A rule that never fires
/// still fails: the last report goes back to the caller's assertion.
fn doctor_sampled(pair: &mut VmPair, wants: &dyn Fn(&Report) -> bool) -> Report {
    use netsteer_steering::doctor::rules::rss::MIN_RX_IRQS_PER_S;
    const ATTEMPTS: u32 = 6;
    // One client for every attempt (a TCG guest under load can take seconds to reach its
    // rate), ended before the report goes back so no later measurement counts its packets.
    start_flows(&mut pair.a, 300);
    for attempt in 1..=ATTEMPTS {
        // Until the server's last second shows echoes (at most 10 s): a TCG guest can take
        // seconds to start 64 threads.
        common::guest::wait_for_echoes(&mut pair.b, 20, 10);
        let before = rx_irqs(&mut pair.b, pair.nic);
        let started = std::time::Instant::now();
        let (rc, out) = ns(&mut pair.b, &["doctor", "--json", "--sample", "2"]);
        let seconds = started.elapsed().as_secs_f64();
        let after = rx_irqs(&mut pair.b, pair.nic);
        assert!(rc == 0 || rc == 1, "doctor exit {rc}: {out}");
        let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        // Over the whole doctor run (its sample is 2 s of it), with a fifth over the rule's
        // threshold for the part of the run outside the sample.
        let rate = since(&before, &after).values().sum::<u64>() as f64 / seconds / 1.2;
        if rate >= MIN_RX_IRQS_PER_S && wants(&report) {
            stop_flows(&mut pair.a);
            return report;
        }
        if attempt == ATTEMPTS {
            stop_flows(&mut pair.a);
            assert!(
                rate >= MIN_RX_IRQS_PER_S,
                "{ATTEMPTS} samples too quiet to judge ({rate:.0} receive interrupts/s): the guests cannot carry the test's traffic here"
            );
            return report;
        }
        eprintln!(
            "doctor's sample saw {rate:.0} receive interrupts/s (attempt {attempt}) and {} the finding wanted: sampling again",
            if wants(&report) { "has" } else { "lacks" }
        );
        // What the guests saw, for a run that stays quiet: the echo server's own rates tell a
        // slow guest (a few packets/s) from interrupts a busy NAPI held back.
        let (_, server) = pair.b.sh("tail -n 3 /x/server.log", T).unwrap();
        eprintln!("the echo server's last seconds:\n{}", server.trim_end());
        std::thread::sleep(Duration::from_secs(10));
    }
    unreachable!("the last attempt returns");
}

/// `show` gives every queue of eth0 its vector(s), each named as /proc/interrupts names it, and
/// the CPU it is delivered to as /proc/irq/N/effective_affinity_list says.
fn show_names_every_queue_vector(b: &mut Guest) -> HostView {
    let eff_before = effective_cpus(b);
    let out = ns_ok(b, &["show", "--json", "--dev", "eth0"]);
    let eff_after = effective_cpus(b);
    let view: HostView = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let nic = view.nic("eth0").expect("eth0");
    let interrupts = sh(b, "cat /proc/interrupts");
    let queues: Vec<(String, &Vec<u32>)> = nic
        .rx_queues
        .iter()
        .map(|q| (format!("rx-{}", q.index), &q.irqs))
        .chain(
            nic.tx_queues
                .iter()
                .map(|q| (format!("tx-{}", q.index), &q.irqs)),
        )
        .collect();
    assert!(queues.len() >= 4, "{queues:?}");
    for (q, irqs) in queues {
        assert!(!irqs.is_empty(), "eth0 {q}: no vector in show");
        for irq in irqs {
            let i = nic.irq(*irq).unwrap();
            let line = interrupts
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{irq}:")))
                .unwrap_or_else(|| panic!("IRQ {irq} is not in /proc/interrupts"));
            assert!(
                line.trim_end().ends_with(&i.name),
                "{q}: {line} vs {}",
                i.name
            );
            let cpus = i
                .affinity
                .effective
                .known()
                .unwrap_or_else(|| panic!("{q}: IRQ {irq} has no effective CPU in show"));
            let shown = cpus.to_list();
            let read = |m: &BTreeMap<u32, String>| {
                m.get(irq)
                    .cloned()
                    .unwrap_or_else(|| panic!("{q}: no /proc/irq/{irq}/effective_affinity_list"))
            };
            let (was, is) = (read(&eff_before), read(&eff_after));
            if was == is {
                assert_eq!(shown, was, "{q}: IRQ {irq}");
            } else {
                // Where an IRQ cannot be moved from process context, a new affinity is only
                // pending until the IRQ's next interrupt moves it (kernel/irq/migration.c,
                // irq_move_masked_irq): a tx vector the driver pointed at another CPU at boot
                // moved while show ran in a fresh-clone run. show must give one of the two.
                assert!(
                    shown == was || shown == is,
                    "{q}: IRQ {irq}: show says CPU {shown}, the kernel {was} before and {is} after"
                );
                eprintln!(
                    "{q}: IRQ {irq} moved from CPU {was} to {is} while show ran; show saw {shown}"
                );
            }
        }
    }
    view
}

/// Every IRQ's effective CPU list in guest `b`, as /proc/irq/N/effective_affinity_list says now
/// (empty where the kernel gives none).
fn effective_cpus(b: &mut Guest) -> BTreeMap<u32, String> {
    let out = sh(
        b,
        r#"for f in /proc/irq/*/effective_affinity_list; do n=${f#/proc/irq/}; echo "${n%%/*} $(cat $f)"; done"#,
    );
    let cpus: BTreeMap<u32, String> = out
        .lines()
        .filter_map(|l| {
            let (n, c) = l.split_once(' ')?;
            Some((n.parse().ok()?, c.trim().to_string()))
        })
        .collect();
    assert!(!cpus.is_empty(), "no effective_affinity_list read: {out}");
    cpus
}

/// The story every driver with an RSS table must tell (see the module doc). `extra` knobs go
/// into the apply beside the table and the channels (coalescing and rings, where the driver
/// has them).
fn hot_queue_rebalanced_verified_and_rolled_back(
    pair: &mut VmPair,
    channels: Option<u32>,
    extra: &[&str],
) {
    let model = pair.nic;
    start_server(&mut pair.b);
    show_names_every_queue_vector(&mut pair.b);

    // All weight on queue 0, UDP hashed on ports (igb hashes addresses only by default).
    sh(
        &mut pair.b,
        "chroot /host ethtool -X eth0 weight 1 0 && chroot /host ethtool -N eth0 rx-flow-hash udp4 sdfn",
    );
    let before = readbacks(&mut pair.b, model);

    let report = doctor_sampled(pair, &|r| {
        r.findings.iter().any(|f| f.id == "rss-table-skewed")
    });
    let hot = report
        .findings
        .iter()
        .find(|f| f.id == "rss-table-skewed")
        .unwrap_or_else(|| panic!("doctor did not name the hot queue: {report:#?}"));
    assert_eq!(hot.subjects.queues, ["eth0/rx-0"], "{hot:?}");
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.id == "rss-table-not-followed"),
        "the table is followed here: {report:#?}"
    );

    let mut sets: Vec<String> = extra.iter().map(|k| k.to_string()).collect();
    if let Some(n) = channels {
        sets.push(format!("nic/eth0/channels/combined={n}"));
    }
    let mut args = vec![
        "tune",
        "apply",
        "--profile",
        "balanced",
        "--dev",
        "eth0",
        "--state-dir",
        STATE,
        "--json",
    ];
    for k in &sets {
        args.extend(["--set", k.as_str()]);
    }
    let out = ns_ok(&mut pair.b, &args);
    let applied: ApplyReport = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(applied.status, ApplyStatus::Applied, "{out}");
    let changed = |id: &str| {
        applied.steps.iter().any(|s| {
            s.id == id && (s.status == StepStatus::Changed || s.status == StepStatus::Rewritten)
        })
    };
    assert!(changed("nic/eth0/rss/indirection"), "{out}");
    for k in &sets {
        let id = k.split('=').next().unwrap();
        assert!(changed(id), "{id}: {out}");
    }
    let queues = channels.unwrap_or(2);
    let l = sh(&mut pair.b, "chroot /host ethtool -l eth0");
    assert!(
        l.split("Current hardware settings:")
            .nth(1)
            .is_some_and(|c| c.contains(&format!("Combined:\t{queues}"))),
        "{l}"
    );

    // Within a second of traffic the packets are where the table now sends flows.
    let buckets = table(&mut pair.b);
    assert_eq!(
        buckets.len() as u32,
        queues,
        "the table does not use every queue: {buckets:?}"
    );
    // Enough packets that a queue holding a quarter of the buckets gets none only if the
    // device does not follow the table (each of 64 flows sends several).
    let moved = rx_during_bursts(pair, 640);
    let total: u64 = moved.values().sum();
    for q in buckets.keys() {
        assert!(
            moved.get(q).copied().unwrap_or(0) > 0,
            "rx-{q} has {} buckets and received no packet: {moved:?}",
            buckets[q]
        );
    }
    let hot_share = moved.get(&0).copied().unwrap_or(0) as f64 / total.max(1) as f64;
    assert!(
        hot_share < 0.75,
        "rx-0 still takes {hot_share:.2} of {moved:?}"
    );

    let (rc, out) = ns(&mut pair.b, &["tune", "verify", "--state-dir", STATE]);
    assert_eq!(rc, 0, "{out}");
    // Behind tune's back: the table put back on one queue.
    sh(&mut pair.b, "chroot /host ethtool -X eth0 weight 1 0 0 0");
    let (rc, out) = ns(&mut pair.b, &["tune", "verify", "--state-dir", STATE]);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("nic/eth0/rss/indirection"), "{out}");

    let out = ns_ok(&mut pair.b, &["tune", "rollback", "--state-dir", STATE]);
    assert!(out.contains("restored"), "{out}");
    assert_eq!(
        readbacks(&mut pair.b, model),
        before,
        "rollback did not restore the table, coalescing, channels, rings and affinities"
    );
}

/// 6.1: no RSS_GET, no netdev family: said, read another way, and nothing fails.
fn missing_interfaces_are_named_on_6_1(b: &mut Guest) {
    let out = ns_ok(b, &["show", "--dev", "eth0"]);
    assert!(
        out.contains("kernel: rss: read over the ETHTOOL_GRSSH ioctl")
            && out.contains("RSS_GET (Linux 6.2+)"),
        "{out}"
    );
    assert!(
        out.contains("no netdev netlink family (Linux 6.3+)"),
        "{out}"
    );
    assert!(out.contains("rss 128 entries"), "{out}");
    let (rc, out) = ns(b, &["doctor", "--sample", "1"]);
    assert!(rc == 0 || rc == 1, "{out}");
    // Per-NAPI modes go to the device-wide sysfs files, IRQ suspension is said to need 6.13.
    let out = irq_suspend_needs_6_13(b);
    assert!(out.contains("napi/eth0/napi_defer_hard_irqs"), "{out}");
    assert!(out.contains("napi/eth0/gro_flush_timeout"), "{out}");
}

/// `tune plan --napi irq-suspend` on a kernel before 6.13: the plan says why the timeout is
/// not planned. Returns the plan's text.
fn irq_suspend_needs_6_13(b: &mut Guest) -> String {
    let out = ns_ok(
        b,
        &[
            "tune",
            "plan",
            "--profile",
            "none",
            "--napi",
            "irq-suspend",
            "--dev",
            "eth0",
        ],
    );
    assert!(
        out.contains("irq-suspend-timeout not planned") && out.contains("Linux 6.13+"),
        "{out}"
    );
    out
}

/// 6.12: netdev netlink lists the NAPIs; these drivers do not link queues or IRQs to them yet
/// (that came after 6.12), which show says instead of guessing; per-NAPI settings (6.13) are
/// named as missing; the queue → IRQ map by name matches /proc/interrupts.
fn napis_on_6_12(b: &mut Guest) {
    let view = show_names_every_queue_vector(b);
    let nic = view.nic("eth0").unwrap();
    assert!(!nic.napis.is_empty(), "netdev netlink listed no NAPI");
    let s = nic.settings.as_ref().unwrap();
    assert!(
        s.interfaces
            .iter()
            .any(|i| i.contains("NETDEV_CMD_NAPI_SET (Linux 6.13+)")),
        "{:?}",
        s.interfaces
    );
    let text = ns_ok(b, &["show", "--dev", "eth0"]);
    for n in &nic.napis {
        if n.rx_queues.is_empty() && n.tx_queues.is_empty() {
            assert!(text.contains(&format!("napi {}", n.id)), "{text}");
        }
    }
    if nic.napis.iter().all(|n| n.irq.is_none()) {
        assert!(text.contains("queues not linked by the driver"), "{text}");
    }
    irq_suspend_needs_6_13(b);
}

/// `netsteer trace` inside guest b while guest a sends 8 flows: real hard IRQs. Every stack
/// row on eth0 names the receive queue the skb came in on (napi_gro_receive_entry's
/// queue_mapping), and those are the queues whose vectors took the receive interrupts in the
/// guest's own /proc/interrupts; NET_RX's wait is attributed to eth0's vectors by name. A
/// kernel without one of the trace's tracepoints names it in the start message (6.1 lacks
/// some: `sk_data_ready` and `sock_recv_length` came later), and what it can measure it does.
fn traced_in_the_guest(pair: &mut VmPair) {
    use netsteer_trace::{Interval, Stage, Start};
    start_server(&mut pair.b);
    // Interrupts over the whole trace, not only the burst: whatever else arrives is traced too.
    let before = rx_irqs(&mut pair.b, pair.nic);
    sh(
        &mut pair.b,
        &format!(
            "chroot /host {GBIN} trace --json --duty 100 --interval 20 --duration 20 --top 64 > /x/trace.json 2> /x/trace.err &"
        ),
    );
    // The start message comes once the programs are attached (seconds under TCG).
    sh(
        &mut pair.b,
        "i=0; while [ $i -lt 600 ]; do [ -s /x/trace.json ] && exit 0; i=$((i+1)); sleep 0.1; done; cat /x/trace.err; exit 1",
    );
    // One 20 s interval around a 3 s burst: guest a's burst can start seconds after the start
    // message under TCG on a busy host (an 8 s window once closed with the burst's receive
    // interrupts, 2,017 on rx-1, nearly all after it).
    burst(&mut pair.a, 8, 3);
    let out = sh(
        &mut pair.b,
        "i=0; while [ $i -lt 600 ]; do [ $(wc -l < /x/trace.json) -ge 2 ] && { sleep 0.5; cat /x/trace.json; exit 0; }; i=$((i+1)); sleep 0.1; done; cat /x/trace.err; exit 1",
    );
    let took = since(&before, &rx_irqs(&mut pair.b, pair.nic));
    let mut lines = out.lines().filter(|l| l.starts_with('{'));
    let start: Start = serde_json::from_str(lines.next().unwrap()).unwrap();
    let ivs: Vec<Interval> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    for u in &start.unavailable {
        assert!(u.why.contains("has no tracepoint"), "{u:?}");
    }
    eprintln!(
        "guest trace: unavailable {:?}; receive interrupts by queue {took:?}",
        start.unavailable
    );
    let rows: Vec<_> = ivs.iter().flat_map(|i| &i.stages).collect();
    let busy: Vec<u32> = took
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(q, _)| *q)
        .collect();
    let stack: Vec<_> = rows
        .iter()
        .filter(|r| r.stage == Stage::Stack && r.dev.as_deref() == Some("eth0"))
        .collect();
    if !start.unavailable.iter().any(|u| u.stage == Stage::Stack) {
        assert!(!stack.is_empty(), "no stack row on eth0: {out}");
        for r in &stack {
            let q = r
                .queue
                .unwrap_or_else(|| panic!("a stack row without its queue: {r:?}"));
            assert!(busy.contains(&q), "stack on rx-{q}, interrupts on {busy:?}");
        }
    }
    // NET_RX raised in the hard IRQ of a receive vector that took this traffic.
    let named: Vec<_> = rows
        .iter()
        .filter(|r| r.stage == Stage::IrqToSoftirq)
        .filter_map(|r| rx_queue(r.irq_name.as_deref()?))
        .collect();
    assert!(
        named.iter().any(|q| busy.contains(q)),
        "NET_RX waits named after queues {named:?}, interrupts on {busy:?}: {out}"
    );
}

/// Ground truth (b), on real IRQs: a SCHED_FIFO thread that hogs the CPU taking eth0's receive
/// interrupts in bursts moves NET_RX's wait (raise → softirq start) on that CPU, and not socket
/// residence (the reader runs on the other CPU). Under a flood NET_RX re-raises itself, and
/// __do_softirq hands a pending softirq to ksoftirqd when a task of higher priority is waiting
/// (need_resched): ksoftirqd then waits behind the real-time hog. Guest b's own settings only:
/// vector affinities, restored after.
fn fifo_hog_moves_the_net_rx_wait(pair: &mut VmPair) {
    use netsteer_trace::{Interval, Stage, StageRow};
    let vectors = "grep -E 'eth0-(rx|TxRx)-' /proc/interrupts | cut -d: -f1";
    let saved = sh(
        &mut pair.b,
        &format!("for i in $({vectors}); do echo $i $(cat /proc/irq/$i/smp_affinity); done"),
    );
    sh(
        &mut pair.b,
        &format!("for i in $({vectors}); do echo 2 > /proc/irq/$i/smp_affinity; done"),
    );
    // One trace window of the flood, with or without the hog: (NET_RX wait on CPU 1, residence),
    // each as (rows, mean ns, p99 ns).
    let measure = |pair: &mut VmPair, hog: bool| {
        // A server a hung client left behind would hold the port: gone first (and waited
        // for: pkill only sends the signal).
        sh(
            &mut pair.b,
            "chroot /host sh -c 'pkill -x iperf3; i=0; while pgrep -x iperf3 > /dev/null && [ $i -lt 50 ]; do i=$((i+1)); sleep 0.1; done; exec iperf3 -s -1 -A 0' > /x/iperf3.log 2>&1 &",
        );
        sh(
            &mut pair.b,
            &format!(
                "chroot /host {GBIN} trace --json --duty 100 --interval 6 --duration 6 --top 64 > /x/trace.json 2> /x/trace.err &"
            ),
        );
        sh(
            &mut pair.b,
            "i=0; while [ $i -lt 600 ]; do [ -s /x/trace.json ] && exit 0; i=$((i+1)); sleep 0.1; done; cat /x/trace.err; exit 1",
        );
        if hog {
            // Spin (a busybox loop: some ms under TCG), sleep 10 ms, for 5 s, at real-time
            // priority, on CPU 1.
            sh(
                &mut pair.b,
                "chroot /host chrt -f 50 taskset -c 1 sh -c 'end=$(( $(date +%s) + 5 )); while [ $(date +%s) -lt $end ]; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; sleep 0.01; done' > /dev/null 2>&1 &",
            );
        }
        // iperf3 can hang at a test's end, before the results are exchanged (esnet/iperf
        // #1527; seen once in CI under the hog: no answer in 240 s). The flood is over by
        // then and the trace window has it, so a client past 30 s is killed and said.
        let rc = sh(
            &mut pair.a,
            &format!(
                "chroot /host timeout -k 5 30 iperf3 -c {VM_B_ADDR} -u -b 0 -l 64 -t 3 -A 0 > /dev/null 2>&1; echo $?"
            ),
        );
        if matches!(rc.trim(), "124" | "137") {
            eprintln!("hog {hog}: the iperf3 client hung past 30 s at the test's end; killed");
        }
        let out = sh(
            &mut pair.b,
            "i=0; while [ $i -lt 300 ]; do [ $(wc -l < /x/trace.json) -ge 2 ] && { sleep 0.5; cat /x/trace.json; exit 0; }; i=$((i+1)); sleep 0.1; done; cat /x/trace.err; exit 1",
        );
        let ivs: Vec<Interval> = out
            .lines()
            .skip(1)
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let rows: Vec<StageRow> = ivs.into_iter().flat_map(|i| i.stages).collect();
        // Count-weighted mean and the largest p99 of a stage's rows (CPU 1 for NET_RX's wait).
        let of = |stage: Stage, cpu: Option<u32>| {
            let rs: Vec<&StageRow> = rows
                .iter()
                .filter(|r| r.stage == stage && (cpu.is_none() || r.cpu == cpu))
                .collect();
            let n: u64 = rs.iter().map(|r| r.count).sum();
            let mean = rs
                .iter()
                .map(|r| r.mean.unwrap_or(0.0) * r.count as f64)
                .sum::<f64>()
                / n.max(1) as f64;
            (n, mean, rs.iter().filter_map(|r| r.p99).max().unwrap_or(0))
        };
        let wait = of(Stage::IrqToSoftirq, Some(1));
        let res = of(Stage::Residence, None);
        eprintln!(
            "hog {hog}: NET_RX wait on CPU 1 (n, mean ns, p99 ns) {wait:?}; residence {res:?}"
        );
        (wait, res)
    };
    // One round: the flood without, then with the hog; each stage's (rows, mean, p99).
    let round = |pair: &mut VmPair| {
        let mut measured = Vec::new();
        for hog in [false, true] {
            let mut m = measure(pair, hog);
            // A window in which a stage got no row at all measured nothing (under a busy host
            // the hog can starve CPU 1 until the 3 s flood is over): said, and measured once
            // more.
            if m.0.0 == 0 || m.1.0 == 0 {
                eprintln!(
                    "hog {hog}: a stage had no rows in the window ({m:?}); measuring once more"
                );
                m = measure(pair, hog);
            }
            measured.push(m);
        }
        (measured[0], measured[1])
    };
    // Under a flood the wait is already ksoftirqd's now and then without the hog (tens of µs
    // under TCG); the hog multiplies it, each wait up to a timer tick (4 ms: the tick's IRQ
    // exit runs the pending softirq). Residence is the flood's queue in the socket, in ms: it
    // moves with how bursty delivery is and with the host CPU the spinning vCPU takes from the
    // reader's (TCG: four vCPU threads on CI's two cores), so the comparison is of how many
    // times each stage's mean grew: the injected one by a wide margin. Means, not p99s: with a
    // busy loop on the host, a descheduled vCPU gives the baseline's tail milliseconds too.
    // Seen: wait mean 48 -> 226, 46 -> 404, 22 -> 348 and, under a busy loop, 14 -> 405 µs;
    // residence 0.9x, 2.1x, 2.6x and 2.8x — and once in CI 56 -> 130 µs (2.3x) with residence
    // 0.4x: a round that does not show the effect by that margin is measured again (two rounds
    // at most), and the test fails only when neither does.
    let x = |a: (u64, f64, u64), b: (u64, f64, u64)| b.1 / a.1.max(1.0);
    let mut rounds = Vec::new();
    for _ in 0..2 {
        let ((w0, r0), (w1, r1)) = round(pair);
        assert!(
            w0.0 > 0 && w1.0 > 0 && r0.0 > 0 && r1.0 > 0,
            "{:?}",
            (w0, r0, w1, r1)
        );
        let (wait_x, res_x) = (x(w0, w1), x(r0, r1));
        rounds.push(format!(
            "NET_RX wait mean {:.0} -> {:.0} ns (p99 {} -> {}), residence mean {:.0} -> {:.0} ns (p99 {} -> {})",
            w0.1, w1.1, w0.2, w1.2, r0.1, r1.1, r0.2, r1.2
        ));
        if wait_x >= 3.0 && wait_x >= 2.0 * res_x {
            break;
        }
        eprintln!(
            "this round did not show the hog's effect by the margin: {}",
            rounds.last().unwrap()
        );
        if rounds.len() == 2 {
            panic!("neither round: {}", rounds.join("; "));
        }
    }
    let restore: String = saved
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(i, m)| format!("echo {m} > /proc/irq/{i}/smp_affinity; "))
        .collect();
    sh(&mut pair.b, &restore);
}

/// Seed 002's receive offloads as items of the transaction, on virtio-net over tap: tap gives
/// the guest vnet headers, so the driver offers TSO "hardware" GRO (`rx-gro-hw`, switched by
/// VIRTIO_NET_CTRL_GUEST_OFFLOADS). `tune apply --set` flips it, ethtool in the guest reads the
/// flip back, and `tune rollback` leaves `ethtool -k` and `-g` byte for byte as they were.
/// Header split, its threshold and LRO in the same apply are refused, each named in the
/// report's notes with the driver's reason (virtio-net reports no split and has had no LRO
/// feature since it took GRO_HW), and written to nothing: the apply still succeeds.
fn receive_offloads_set_or_refused(b: &mut Guest) {
    let look = |b: &mut Guest| {
        sh(
            b,
            "chroot /host ethtool -k eth0; chroot /host ethtool -g eth0",
        )
    };
    let before = look(b);
    let was_on = before.contains("rx-gro-hw: on\n");
    assert!(
        was_on || before.contains("rx-gro-hw: off\n"),
        "rx-gro-hw is not switchable here: {before}"
    );
    let flip = format!("nic/eth0/feature/rx-gro-hw={}", u8::from(!was_on));
    let out = ns_ok(
        b,
        &[
            "tune",
            "apply",
            "--profile",
            "none",
            "--set",
            &flip,
            "--set",
            "nic/eth0/rings/tcp-data-split=1",
            "--set",
            "nic/eth0/rings/hds-thresh=0",
            "--set",
            "nic/eth0/feature/rx-lro=1",
            "--state-dir",
            "/tmp/st-offloads",
            "--json",
        ],
    );
    let applied: ApplyReport = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(applied.status, ApplyStatus::Applied, "{out}");
    let step = |id: &str| {
        applied
            .steps
            .iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("no step {id}: {out}"))
            .clone()
    };
    assert_eq!(
        step("nic/eth0/feature/rx-gro-hw").status,
        StepStatus::Changed
    );
    // Each refused knob is named with the driver's reason in the report's notes, and none
    // is a step: nothing was written to it.
    assert_eq!(applied.steps.len(), 1, "{out}");
    for (id, why) in [
        (
            "nic/eth0/rings/tcp-data-split=1",
            netsteer_host::ethtool::NO_DATA_SPLIT,
        ),
        ("nic/eth0/rings/hds-thresh=0", "no header-split threshold"),
        (
            "nic/eth0/feature/rx-lro=1",
            "the device has no feature rx-lro",
        ),
    ] {
        assert!(
            applied
                .notes
                .iter()
                .any(|n| n.starts_with(&format!("{id} not set: ")) && n.contains(why)),
            "{id}: {why:?} not in the notes: {out}"
        );
    }
    let now = look(b);
    let want = format!("rx-gro-hw: {}\n", if was_on { "off" } else { "on" });
    assert!(
        now.contains(&want),
        "the guest's ethtool -k does not read {want:?}: {now}"
    );
    let out = ns_ok(b, &["tune", "rollback", "--state-dir", "/tmp/st-offloads"]);
    assert!(out.contains("restored"), "{out}");
    assert_eq!(look(b), before, "rollback left ethtool -k or -g changed");
}

/// One driver on one kernel: boot the pair (one at a time), the kernel's own checks, then the
/// rebalance story with these channels and extra knobs.
fn on(
    model: NicModel,
    kernel: &str,
    kernel_checks: fn(&mut Guest),
    lost_table: bool,
    channels: Option<u32>,
    extra: &[&str],
) {
    if !usable(model) {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut pair = boot(model, kernel);
    kernel_checks(&mut pair.b);
    if model == NicModel::Igb {
        traced_in_the_guest(&mut pair);
    }
    if lost_table {
        lost_table_named_and_written_again(&mut pair);
    }
    if model == NicModel::VirtioRss {
        receive_offloads_set_or_refused(&mut pair.b);
    }
    hot_queue_rebalanced_verified_and_rolled_back(&mut pair, channels, extra);
    if model == NicModel::Igb && kernel == "6.12" {
        watch_takes_the_hot_queue(&mut pair);
        fifo_hog_moves_the_net_rx_wait(&mut pair);
    }
}

/// `netsteer watch --apply` on the table the rebalance story left skewed (its rollback put
/// `weight 1 0` back, UDP hashed on ports): under 64 flows the rss reflex writes the equal
/// table over ethtool netlink, journaled; the watcher's own read-back of the table (over
/// netlink, every interval) does not take it for another writer's; and `tune rollback` of the
/// watcher's directory puts the guest's readbacks back as they were.
fn watch_takes_the_hot_queue(pair: &mut VmPair) {
    const WSTATE: &str = "/tmp/st-watch";
    let before = readbacks(&mut pair.b, pair.nic);
    let mut events = Vec::new();
    // Traffic can be too slow under TCG on a loaded machine for two intervals in a row over
    // the rule's floor (doctor_sampled's note): a watcher that saw nothing runs again, with
    // traffic again, up to three times.
    for _ in 0..3 {
        start_flows(&mut pair.a, 30);
        std::thread::sleep(Duration::from_secs(4));
        let out = ns_ok(
            &mut pair.b,
            &[
                "watch",
                "--apply",
                "--interval",
                "1",
                "--persist",
                "2",
                "--duration",
                "20",
                "--state-dir",
                WSTATE,
                "--json",
            ],
        );
        events = out
            .lines()
            .map(|l| {
                serde_json::from_str::<netsteer_steering::watch::Event>(l)
                    .unwrap_or_else(|e| panic!("{e}: {l}"))
            })
            .collect();
        stop_flows(&mut pair.a);
        if events
            .iter()
            .any(|e| matches!(e, netsteer_steering::watch::Event::Applied { .. }))
        {
            break;
        }
    }
    use netsteer_steering::watch::Event;
    let Some(Event::Applied { id, changes, .. }) = events
        .iter()
        .find(|e| matches!(e, Event::Applied { id, .. } if id == "rss/eth0"))
    else {
        panic!("the rss reflex did not act: {events:?}")
    };
    assert_eq!(changes.len(), 1, "{id}: {changes:?}");
    assert_eq!(changes[0].path(), "nic/eth0/rss/indirection");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::SteppedAside { .. })),
        "the watcher took its own table for another writer's: {events:?}"
    );
    let buckets = table(&mut pair.b);
    let rolled_back = events
        .iter()
        .any(|e| matches!(e, Event::RolledBack { id, .. } if id == "rss/eth0"));
    assert!(
        rolled_back || buckets.len() > 1,
        "the equal table is not in the device: {buckets:?}"
    );
    for round in 0.. {
        let out = ns_ok(
            &mut pair.b,
            &[
                "tune",
                "rollback",
                "--state-dir",
                &format!("{WSTATE}/watch"),
                "--json",
            ],
        );
        if out.contains("nothing-to-do") {
            break;
        }
        assert!(round < 6, "rollback never ends: {out}");
    }
    assert_eq!(
        readbacks(&mut pair.b, pair.nic),
        before,
        "tune rollback of the watcher's journals left eth0 changed"
    );
}

const IGB_EXTRA: &[&str] = &["nic/eth0/coalesce/rx-usecs=50", "nic/eth0/rings/rx=512"];

#[test]
fn igb_on_debian_6_1() {
    on(
        NicModel::Igb,
        "6.1",
        missing_interfaces_are_named_on_6_1,
        false,
        Some(4),
        IGB_EXTRA,
    );
}

#[test]
fn igb_on_backports_6_12() {
    on(
        NicModel::Igb,
        "6.12",
        napis_on_6_12,
        false,
        Some(4),
        IGB_EXTRA,
    );
}

/// virtio-net with RSS under QEMU: a queue-count change (the queue-pairs command) turns RSS
/// off in the device while the driver keeps reporting the table it had. Here a fresh table is
/// honoured and doctor stays quiet (the near miss); after `-L 1; -L 2` it reads back the same,
/// flows land on a queue it gives no bucket, and doctor names that; a tune apply that changes
/// the channel count writes the table again even though it reads as wanted, and traffic
/// follows it again; rollback restores it byte for byte.
fn lost_table_named_and_written_again(pair: &mut VmPair) {
    let model = pair.nic;
    start_server(&mut pair.b);
    sh(&mut pair.b, "chroot /host ethtool -X eth0 weight 1 0");
    let followed = rx_during_burst(pair);
    let total: u64 = followed.values().sum();
    assert!(
        followed.get(&1).copied().unwrap_or(0) * 20 <= total,
        "the fresh table is not honoured: {followed:?}"
    );
    let report = doctor_sampled(pair, &|_| true);
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.id == "rss-table-not-followed"),
        "{report:#?}"
    );
    // A queue-count change: the driver still reports every bucket on rx-0 ...
    sh(
        &mut pair.b,
        "chroot /host ethtool -L eth0 combined 1 && chroot /host ethtool -L eth0 combined 2",
    );
    assert_eq!(table(&mut pair.b).keys().collect::<Vec<_>>(), [&0]);
    // ... but flows land on rx-1 too, and doctor says the table is not followed.
    let report = doctor_sampled(pair, &|r| {
        r.findings.iter().any(|f| f.id == "rss-table-not-followed")
    });
    let lost = report
        .findings
        .iter()
        .find(|f| f.id == "rss-table-not-followed")
        .unwrap_or_else(|| panic!("doctor did not name the lost table: {report:#?}"));
    assert_eq!(lost.subjects.queues, ["eth0/rx-1"], "{lost:?}");
    assert_eq!(lost.fix.steps, ["ethtool -X eth0 weight 1 0"], "{lost:?}");

    // Tune after a channel change: rx-1 reserved (so the planned table is all rx-0, as it
    // already reads), the count back to 2 from 1. The table is written again all the same.
    sh(&mut pair.b, "chroot /host ethtool -L eth0 combined 1");
    let before = readbacks(&mut pair.b, model);
    let out = ns_ok(
        &mut pair.b,
        &[
            "tune",
            "apply",
            "--profile",
            "balanced",
            "--dev",
            "eth0",
            "--reserve-queue",
            "1",
            "--set",
            "nic/eth0/channels/combined=2",
            "--state-dir",
            STATE,
            "--json",
        ],
    );
    let applied: ApplyReport = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(applied.status, ApplyStatus::Applied, "{out}");
    let table_step = applied
        .steps
        .iter()
        .find(|s| s.id == "nic/eth0/rss/indirection")
        .unwrap_or_else(|| panic!("no table step: {out}"));
    assert_eq!(table_step.status, StepStatus::Rewritten, "{table_step:?}");
    let after = rx_during_burst(pair);
    let total: u64 = after.values().sum();
    assert!(
        after.get(&1).copied().unwrap_or(0) * 20 <= total,
        "the table was not honoured after tune wrote it again: {after:?}"
    );
    let out = ns_ok(&mut pair.b, &["tune", "rollback", "--state-dir", STATE]);
    assert!(out.contains("restored"), "{out}");
    assert_eq!(readbacks(&mut pair.b, model), before);
    sh(&mut pair.b, "chroot /host ethtool -L eth0 combined 2");
}

/// virtio-net with RSS on 6.1. The rebalance keeps the channel count: on 6.1 under QEMU a
/// table naming queues added by a larger count spreads flows over the old count only, written
/// again or not (seen: `-L combined 4` then `-X equal 4`, interrupts on rx-0 and rx-1 alone).
#[test]
fn virtio_rss_on_debian_6_1() {
    let checks = missing_interfaces_are_named_on_6_1;
    on(NicModel::VirtioRss, "6.1", checks, true, None, &[]);
}

/// virtio-net with RSS on 6.12: the same lost table, and a rebalance onto four channels that
/// the device follows.
#[test]
fn virtio_rss_on_backports_6_12() {
    on(
        NicModel::VirtioRss,
        "6.12",
        napis_on_6_12,
        true,
        Some(4),
        &[],
    );
}

#[test]
fn a_qemu_without_the_device_is_named_before_booting() {
    // Pure check of the message: whatever this machine's QEMU has, an unknown device model is
    // refused by the CLI with the choices.
    let out = Command::new(BIN)
        .args(["lab", "run", "seed-000", "--vm", "--nic", "e1000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("virtio, virtio-rss, igb or e1000e"), "{err}");
    // A model the noise rig has but the ladder cannot use is refused with the reason, before
    // anything boots.
    let out = Command::new(BIN)
        .args(["lab", "run", "seed-000", "--vm", "--nic", "e1000e"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--nic e1000e: one receive queue"), "{err}");
}

/// Regenerates `fixtures/hosts/{igb-6.1,igb-6.12,virtio-rss-6.12}`: guest b of each pair after
/// a minute's worth of a hot queue (every bucket on rx-0, 64 UDP flows), captured with `netsteer
/// snapshot`. Run by hand (`cargo test --test vm_drivers -- --ignored capture`) and review the
/// diff; the `--root` tests then cover these drivers and kernels without QEMU.
#[test]
#[ignore]
fn capture_driver_fixtures() {
    for (model, kernel, name) in [
        (NicModel::Igb, "6.1", "igb-6.1"),
        (NicModel::Igb, "6.12", "igb-6.12"),
        (NicModel::VirtioRss, "6.12", "virtio-rss-6.12"),
    ] {
        assert!(usable(model));
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let mut pair = boot(model, kernel);
        start_server(&mut pair.b);
        sh(
            &mut pair.b,
            "chroot /host ethtool -X eth0 weight 1 0 && chroot /host ethtool -N eth0 rx-flow-hash udp4 sdfn",
        );
        for _ in 0..3 {
            burst(&mut pair.a, 64, 3);
        }
        sh(&mut pair.b, "rm -rf /x/snap");
        ns_ok(
            &mut pair.b,
            &["snapshot", "--output", "/tmp/netsteer-x/snap"],
        );
        let dest = common::fixture(name);
        let _ = std::fs::remove_dir_all(&dest);
        let status = Command::new("cp")
            .arg("-a")
            .arg(pair.b.share_dir().join("snap"))
            .arg(&dest)
            .status()
            .unwrap();
        assert!(status.success());
        eprintln!("captured {}", dest.display());
    }
}
