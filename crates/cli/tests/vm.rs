//! Root-only, live on real drivers: two QEMU guests (Debian kernel, busybox initramfs, 2 vCPUs,
//! a 4-queue virtio-net each, joined by multi-queue taps on a bridge in a lab namespace), the
//! host's netsteer run inside them. On guest a: every queue IRQ is stacked on CPU 0, `doctor`
//! names it, `tune apply` spreads them, `verify` is clean and then catches an irqbalance-style
//! move, and `rollback` restores every /proc/irq/N/smp_affinity byte for byte. Guests and taps
//! go when the test ends, also when it fails (and with SIGKILL: QEMU dies with its parent
//! thread, and the next lab deletes the namespace).
//!
//! Emulated (TCG): the drivers, vectors and affinities are real; timings are not measured here.

mod common;

use common::is_root;
use netsteer_lab::vm::ladder::RungRun;
use netsteer_lab::vm::{Guest, VM_B_ADDR, VmPair, VmPairSpec};
use netsteer_steering::doctor::Report;
use netsteer_steering::tune::ApplyReport;
use netsteer_steering::tune::{ApplyStatus, StepStatus};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");
/// The binary inside the guests' `chroot /host`: given through their scratch share
/// (`VmPair::install`), since the host path may lie under /tmp, which the guest shadows.
const GBIN: &str = "/tmp/netsteer-x/netsteer";
const T: Duration = Duration::from_secs(180);
/// One pair of guests at a time: two would put four emulated CPUs on CI's two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn usable() -> bool {
    let qemu = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let busybox = std::path::Path::new("/bin/busybox").is_file();
    let apt = Command::new("apt-get")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !is_root() || !qemu || !busybox || !apt {
        common::cannot_run(
            "needs root, qemu-system-x86 and busybox-static (and apt-get to fetch the guest kernel)",
        );
        return false;
    }
    true
}

/// `IRQ smp_affinity smp_affinity_list` of every queue vector of the guest's NIC.
fn affinities(g: &mut Guest) -> String {
    let (rc, out) = g
        .sh(
            "for i in $(grep -E 'virtio[0-9]+-(input|output)' /proc/interrupts | cut -d: -f1); do echo $i $(cat /proc/irq/$i/smp_affinity) $(cat /proc/irq/$i/smp_affinity_list); done",
            T,
        )
        .unwrap();
    assert_eq!(rc, 0, "{out}");
    out
}

/// The CPUs the receive vectors are asked to go to (smp_affinity_list; an idle IRQ's effective
/// CPU changes only at its next interrupt).
fn receive_cpus(g: &mut Guest) -> Vec<String> {
    let (_, out) = g
        .sh(
            "for i in $(grep -E 'virtio[0-9]+-input' /proc/interrupts | cut -d: -f1); do cat /proc/irq/$i/smp_affinity_list; done",
            T,
        )
        .unwrap();
    let mut v: Vec<String> = out.split_whitespace().map(String::from).collect();
    v.sort();
    v.dedup();
    v
}

fn doctor(g: &mut Guest) -> Report {
    let (rc, out) = g
        .host(&[GBIN, "doctor", "--json", "--sample", "0"], T)
        .unwrap();
    assert!(rc == 0 || rc == 1, "doctor exit {rc}: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn doctor_tune_verify_and_rollback_run_live_on_a_guests_real_irqs() {
    if !usable() {
        return;
    }
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut pair = VmPair::new("vm", &VmPairSpec::default()).expect("two guests");
    assert_eq!(pair.install(std::path::Path::new(BIN)).unwrap(), GBIN);
    eprintln!(
        "guests booted in {:.1} s and {:.1} s (kernel {})",
        pair.a.boot_time.as_secs_f64(),
        pair.b.boot_time.as_secs_f64(),
        pair.a.release
    );
    // The link between them works: guest b serves echoes, guest a sends.
    let server = format!("{VM_B_ADDR}:4321");
    let (rc, out) = pair
        .b
        .sh(
            &format!(
                "chroot /host {GBIN} bench udp-echo server --listen {server} --max-pps-per-source 0 --duration 120 > /tmp/echo.log 2>&1 &"
            ),
            T,
        )
        .unwrap();
    assert_eq!(rc, 0, "{out}");
    let g = &mut pair.a;
    let mut echoed = false;
    for _ in 0..20 {
        let (rc, _) = g
            .host(
                &[
                    GBIN, "bench", "udp-echo", "client", &server, "--count", "50",
                ],
                T,
            )
            .unwrap();
        if rc == 0 {
            echoed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(echoed, "no echo from guest b across the bridge");

    // Four queues, a vector each way: the driver's real interrupts.
    let (_, ints) = g
        .sh("grep -E 'virtio[0-9]+-(input|output)' /proc/interrupts", T)
        .unwrap();
    assert_eq!(ints.lines().count(), 8, "{ints}");

    // Every queue vector on CPU 0: what a host without irqbalance can boot with.
    let (rc, out) = g
        .sh(
            "for i in $(grep -E 'virtio[0-9]+-(input|output)' /proc/interrupts | cut -d: -f1); do echo 1 > /proc/irq/$i/smp_affinity || exit 1; done",
            T,
        )
        .unwrap();
    assert_eq!(rc, 0, "the guest refused an affinity write: {out}");
    let before = affinities(g);

    let report = doctor(g);
    let stacked = report
        .findings
        .iter()
        .find(|f| f.id == "irqs-not-spread")
        .unwrap_or_else(|| panic!("doctor did not name the stacked IRQs: {report:?}"));
    assert!(stacked.subjects.devices.iter().any(|d| d == "eth0"));

    let (rc, out) = g
        .host(
            &[
                GBIN,
                "tune",
                "apply",
                "--profile",
                "balanced",
                "--dev",
                "eth0",
                "--state-dir",
                "/tmp/st",
                "--json",
            ],
            T,
        )
        .unwrap();
    assert_eq!(rc, 0, "{out}");
    let applied: ApplyReport = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(applied.status, ApplyStatus::Applied);
    let moved: Vec<_> = applied
        .steps
        .iter()
        .filter(|s| s.id.starts_with("irq/") && s.status == StepStatus::Changed)
        .collect();
    assert!(!moved.is_empty(), "no IRQ moved: {:?}", applied.steps);
    assert_eq!(
        receive_cpus(g),
        ["0", "1"],
        "the receive IRQs are not spread"
    );
    assert!(
        !doctor(g).findings.iter().any(|f| f.id == "irqs-not-spread"),
        "doctor still finds the IRQs stacked"
    );

    let verify = |g: &mut Guest| {
        g.host(&[GBIN, "tune", "verify", "--state-dir", "/tmp/st"], T)
            .unwrap()
    };
    let (rc, out) = verify(g);
    assert_eq!(rc, 0, "{out}");
    // irqbalance-style drift: one moved IRQ put back on CPU 0.
    let irq = moved[0].id.trim_start_matches("irq/").to_string();
    let (rc, _) = g
        .sh(&format!("echo 1 > /proc/irq/{irq}/smp_affinity"), T)
        .unwrap();
    assert_eq!(rc, 0);
    let (rc, out) = verify(g);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains(&format!("irq/{irq}")), "{out}");

    let (rc, out) = g
        .host(
            &[
                GBIN,
                "tune",
                "rollback",
                &applied.journal,
                "--state-dir",
                "/tmp/st",
            ],
            T,
        )
        .unwrap();
    assert_eq!(rc, 0, "{out}");
    assert_eq!(
        affinities(g),
        before,
        "rollback did not restore every affinity file"
    );
}

/// `netsteer lab run seed-000 --vm`: the scenario's guests (igb, Debian's kernel). Every rung
/// completes between the two guests; busy polling engages on igb's NAPI; with one queue per
/// CPU, each queue's interrupts land on the one CPU it was given; RSS isolation puts the latency
/// flow alone on the reserved queue (its bucket found by bisection) while the bulk flows stay
/// off it; the n-tuple rung says the driver refuses the rule. Traced (`--trace`): every rung
/// carries guest b's NET_RX wait, and the first says which stages Debian's 6.1 cannot trace.
#[test]
fn the_seed_000_ladder_runs_between_two_guests() {
    if !usable() {
        return;
    }
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new(BIN)
        .args([
            "lab", "run", "seed-000", "--vm", "--count", "200", "--json", "--trace",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: Vec<RungRun> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    use netsteer_lab::vm::ladder::{RESERVED_QUEUE, rungs};
    assert_eq!(runs.len(), rungs(netsteer_lab::vm::NicModel::Igb).len());
    for r in &runs {
        assert_eq!((r.sent, r.received), (200, 200), "{}", r.rung);
        assert!(
            r.stages
                .iter()
                .any(|s| s.stage == netsteer_trace::Stage::IrqToSoftirq && s.count > 0),
            "{}: no NET_RX wait traced: {:?} {:?}",
            r.rung,
            r.stages,
            r.notes
        );
    }
    if runs[0]
        .stages
        .iter()
        .all(|s| s.stage != netsteer_trace::Stage::Stack)
    {
        assert!(
            runs[0]
                .notes
                .iter()
                .any(|n| n.starts_with("trace: stack unavailable: this kernel has no tracepoint")),
            "{:?}",
            runs[0].notes
        );
    }
    let busy = runs
        .iter()
        .find(|r| r.rung.starts_with("busy-poll"))
        .unwrap();
    assert_eq!(busy.busy_poll_engaged, Some(true), "{busy:?}");
    assert!(busy.napi_id.is_some_and(|n| n > 0));
    let pinned = runs
        .iter()
        .find(|r| r.rung == "spin, one queue per CPU")
        .unwrap();
    let mut seen = 0;
    for q in pinned.server_irqs.iter().chain(&pinned.client_irqs) {
        if q.per_cpu.iter().sum::<u64>() < 50 {
            continue;
        }
        let cpu: usize = q
            .allowed
            .parse()
            .unwrap_or_else(|_| panic!("{q:?} is not on one CPU"));
        let elsewhere: u64 = q
            .per_cpu
            .iter()
            .enumerate()
            .filter(|(c, _)| *c != cpu)
            .map(|(_, n)| n)
            .sum();
        assert!(elsewhere <= 2, "{q:?}: interrupts off its CPU");
        seen += 1;
    }
    assert!(seen >= 2, "no queue carried the echoes: {pinned:?}");

    // Before isolation the latency flow shares its queue with the bulk flows' buckets; after,
    // it is alone on the reserved queue and (bar a bulk flow in its own bucket, one in 128
    // each) the bulk flows stay off it.
    let isolated = runs
        .iter()
        .find(|r| r.rung.contains("RSS isolation"))
        .unwrap();
    assert_eq!(isolated.latency_queue, Some(RESERVED_QUEUE), "{isolated:?}");
    assert!(isolated.bucket.is_some_and(|b| b < 128), "{isolated:?}");
    let bulk = isolated.bulk.expect("bulk burst");
    assert!(bulk.total > 0, "{isolated:?}");
    assert!(
        bulk.on_latency_queue * 4 <= bulk.total,
        "the bulk flows crowd the reserved queue: {bulk:?}"
    );
    let ntuple = runs.iter().find(|r| r.rung.contains("n-tuple")).unwrap();
    assert!(
        ntuple
            .notes
            .iter()
            .any(|n| n.contains("n-tuple filters are fixed off by the driver")),
        "{ntuple:?}"
    );
    assert!(
        ntuple
            .notes
            .iter()
            .any(|n| n.contains("ethtool -N") && n.contains("Operation not supported")),
        "{ntuple:?}"
    );
    let coalesce = runs.iter().find(|r| r.rung.contains("rx-usecs 0")).unwrap();
    assert_eq!(
        coalesce
            .notes
            .iter()
            .filter(|n| n.contains(": 1 changed, 0 unchanged, 0 skipped"))
            .count(),
        2,
        "rx-usecs 0 not set in both guests: {coalesce:?}"
    );
}

/// `netsteer lab run seed-000 --vm --lane udp,tcp --kernel 7.3`: seed 000's top rung on
/// Debian's 7.3 kernel (per-NAPI settings, IRQ suspension), with igb and with virtio-net's
/// RSS, for a UDP echo service and then a TCP request/response service in the same guests.
/// With the lane, the latency flow's packets all arrive on the lane's queue (the driver's
/// per-queue counters, or netdev qstats) while the 16 bulk flows run beside it, and the bulk
/// flows alone stay off it (bar one hashing into the lane's bucket, one in 128 each); netdev
/// netlink reads back the lane NAPI's suspend settings; the p99s of the alternated runs get a
/// three-way verdict (under TCG: whichever it is); and `lane remove` restores every value.
#[test]
fn the_lane_rung_runs_on_7_3_guests() {
    if !usable() {
        return;
    }
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for nic in ["igb", "virtio-rss"] {
        lane_rung(nic);
    }
}

fn lane_rung(nic: &str) {
    use netsteer_lab::vm::lane::{LaneRun, LaneSummary, Service};
    let count = 200u64;
    let out = Command::new(BIN)
        .args([
            "lab", "run", "seed-000", "--vm", "--lane", "udp,tcp", "--nic", nic, "--kernel", "7.3",
            "--repeat", "2", "--count", "200", "--json",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{nic}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each service's runs, then its summary.
    let mut runs: Vec<LaneRun> = Vec::new();
    let mut summaries: Vec<(LaneSummary, Vec<LaneRun>)> = Vec::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        if v["type"] == "vm-lane-run" {
            runs.push(serde_json::from_value(v).unwrap());
        } else {
            summaries.push((
                serde_json::from_value(v).unwrap(),
                std::mem::take(&mut runs),
            ));
        }
    }
    let services: Vec<Service> = summaries.iter().map(|(s, _)| s.service).collect();
    assert_eq!(services, [Service::Udp, Service::Tcp], "{text}");
    use netsteer_lab::vm::ladder::RESERVED_QUEUE;
    for (s, runs) in &summaries {
        let what = format!("{nic} {}", s.service.name());
        assert_eq!(runs.len(), 4, "{what}: {text}");
        assert!(s.kernel.starts_with("7.3"), "{}", s.kernel);
        assert_eq!((s.nic.as_str(), s.mode.as_str()), (nic, "suspend"));
        for r in runs {
            assert_eq!(r.service, s.service, "{what}: {r:?}");
            match s.service {
                Service::Udp => assert_eq!((r.sent, r.received), (count, count), "{what}: {r:?}"),
                // Every transaction answered: the run would have failed otherwise.
                Service::Tcp => assert!(r.sent > 0 && r.sent == r.received, "{what}: {r:?}"),
            }
            if r.lane {
                // Every latency packet (a request is one segment) on the lane's queue; any
                // more there are bulk packets of a flow sharing the lane's bucket (counted
                // below) or the TCP flow's pure ACKs.
                assert!(
                    r.rx_packets.get(&RESERVED_QUEUE).copied().unwrap_or(0) >= r.sent,
                    "{what}: {r:?}"
                );
            }
        }
        assert_eq!(s.napi.get("defer-hard-irqs"), Some(&2), "{what}: {s:?}");
        assert_eq!(s.napi.get("gro-flush-timeout"), Some(&200_000), "{s:?}");
        assert_eq!(
            s.napi.get("irq-suspend-timeout"),
            Some(&20_000_000),
            "{s:?}"
        );
        assert!(s.bulk_total > 0, "{what}: {s:?}");
        assert!(
            s.bulk_on_lane_queue * 4 <= s.bulk_total,
            "{what}: the bulk flows crowd the lane's queue: {s:?}"
        );
        assert!(s.p99.is_some(), "{s:?}");
        assert_eq!(s.removed, "restored", "{what}: {s:?}");
    }
}
