//! Root-only, live, inside namespaces this test creates (deleted by drop guards, also on
//! failure): `tune search` inside the server's namespace over its veth's RPS mask, GRO and
//! device-wide NAPI deferral, with a real udp-echo workload between the namespaces at a fixed
//! rate, and the configuration found measured against netsteer's latency profile and tuned's
//! network-latency. What is checked is what must hold on any machine however busy: every trial
//! alternated with the baseline and priced from real runs, the found plan (if any) applied by
//! `tune apply --plan` and rolled back, and the device reading as before after the search.
//! Whether a setting wins is the benchmark's question (BENCHMARKS.md), not a test's.

mod common;

use common::{Netns, Pair, Proc};
use netsteer_lab::pair::{SERVER_ADDR, SERVER_DEV};
use netsteer_steering::tune::search::SearchReport;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

/// What the search may change on the server's device, as text.
fn state(ns: &Netns) -> String {
    ns.text(&format!(
        "d=/sys/class/net/{SERVER_DEV}; cat $d/queues/rx-0/rps_cpus $d/gro_flush_timeout \
             $d/napi_defer_hard_irqs; ethtool -k {SERVER_DEV} | grep -E '^generic-receive-offload:'"
    ))
}

/// A udp-echo server in the server's namespace, once a few round trips come back.
fn echo_server(pair: &Pair, listen: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["bench", "udp-echo", "server", "--listen", listen];
    args.extend_from_slice(extra);
    let server = Proc(
        pair.server
            .command(BIN, &args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    loop {
        let probe = pair.client.exec(&[
            BIN, "bench", "udp-echo", "client", listen, "--count", "3", "--json",
        ]);
        if probe.status.success() {
            return server;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the server never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The report of a search that ran to its end (found something or not), every knob restored.
fn finished(out: &Output) -> SearchReport {
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The runs as the search said them (shown with --nocapture): their steal and re-runs.
    eprintln!("{stderr}");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}: {stderr}",
        out.status
    );
    let r: SearchReport = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {stderr}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(r.outcome.stopped, None, "{stderr}");
    assert!(r.not_restored.is_empty(), "{:?}", r.not_restored);
    // Every run taken says its steal, a share of the CPUs' time.
    assert!(!r.steal_pct.is_empty());
    assert!(
        r.steal_pct.iter().all(|s| (0.0..=100.0).contains(s)),
        "{:?}",
        r.steal_pct
    );
    assert!(r.reruns.is_empty(), "{:?}", r.reruns);
    r
}

#[test]
fn a_live_search_over_a_veth_measures_every_trial_and_leaves_the_device_as_it_was() {
    if !common::tune_live_usable() {
        return;
    }
    let pair = Pair::create(1);
    let listen = format!("{SERVER_ADDR}:4321");
    let _server = echo_server(&pair, &listen, &[]);
    let before = state(&pair.server);
    let work = tempfile::tempdir().unwrap();
    let plan = work.path().join("plan.json");
    let report = work.path().join("report.html");
    let state_dir = work.path().join("state");
    // The workload: 5,000 round trips a second for 1.5 s from the client's namespace (the
    // search runs in the server's; `ip netns exec` reaches the other from there).
    let workload = format!(
        "ip netns exec {} {BIN} bench udp-echo client {listen} --rate 5000 --duration 1.5 \
         --warmup 0.2 --json",
        pair.client.name
    );
    let out = pair.server.netsteer(&[
        "tune",
        "search",
        "--state-dir",
        state_dir.to_str().unwrap(),
        "--goal",
        "p99<=20ms",
        "--abort-factor",
        "20",
        // CI's guests share their hosts: these runs have seen 40 % steal for minutes, and a
        // search that re-runs such runs (the default, tested on a tree in the experiment
        // crate's workload tests) would stop. Here every run is taken and its steal kept.
        "--max-steal",
        "100",
        "--knob",
        &format!("/sys/class/net/{SERVER_DEV}/queues/rx-0/rps_cpus=0,2"),
        "--knob",
        &format!("nic/{SERVER_DEV}/feature/rx-gro=0,1"),
        "--knob",
        &format!("/sys/class/net/{SERVER_DEV}/gro_flush_timeout=0,50000"),
        "--knob",
        &format!("/sys/class/net/{SERVER_DEV}/napi_defer_hard_irqs=0,2"),
        "--dev",
        SERVER_DEV,
        "--workload",
        &workload,
        "--budget",
        "5",
        "--repeat",
        "2",
        "--confirm-repeat",
        "2",
        "--against",
        "latency,tuned-network-latency",
        "--plan-out",
        plan.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--json",
    ]);
    let r = finished(&out);
    assert_eq!(
        state(&pair.server),
        before,
        "the search left the device changed"
    );
    assert_eq!(r.outcome.trials.len(), 5);
    // Real runs: 7,500 round trips priced by the CPU the host spent on them.
    for t in &r.outcome.trials {
        for s in [&t.base_latency, &t.latency] {
            assert!(s.min > 0.0 && s.max < 20e6, "{s:?}");
        }
        for s in [&t.base_cost, &t.cost] {
            assert!(s.min > 0.0 && s.median.is_finite(), "{s:?}");
        }
        // A datagram lost now and then on a busy host is judged against the baseline's in
        // the same runs (not a failure): a rejected trial is one that lost more.
        assert!(t.rejected.is_none() || t.lost > t.base_lost, "{t:?}");
    }
    // The screening moved one knob at a time: four knobs, each to its other value, then one
    // guided trial.
    let moved: Vec<usize> = r.outcome.trials[..4]
        .iter()
        .map(|t| {
            t.config
                .iter()
                .zip(&r.outcome.baseline)
                .filter(|(a, b)| a != b)
                .count()
        })
        .collect();
    assert_eq!(moved, [1, 1, 1, 1]);
    assert_eq!(r.against.len(), 2);
    // tuned's busy_read/busy_poll are global sysctls a namespace has not: said so.
    let tuned = &r.against[1];
    assert!(
        tuned.skipped.iter().any(|s| s.contains("busy_read")),
        "{:?}",
        tuned.skipped
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("Against static settings"));

    // What was found applies from its plan file and rolls back.
    match (&r.outcome.best, out.status.code()) {
        (Some(_), Some(0)) => {
            let sd = state_dir.to_str().unwrap();
            let apply = pair.server.netsteer(&[
                "tune",
                "apply",
                "--state-dir",
                sd,
                "--plan",
                plan.to_str().unwrap(),
            ]);
            assert_eq!(
                apply.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&apply.stderr)
            );
            assert_ne!(state(&pair.server), before);
            let back = pair
                .server
                .netsteer(&["tune", "rollback", "--state-dir", sd]);
            assert_eq!(back.status.code(), Some(0));
            assert_eq!(state(&pair.server), before);
        }
        (None, Some(1)) => assert!(!plan.exists()),
        other => panic!("exit status and outcome disagree: {other:?}"),
    }
}

/// The per-NAPI knobs of Linux 6.13+ (IRQ suspension, deferral, GRO flush timeout) and threaded
/// NAPI, searched live on the veth's NAPI (a veth has one with GRO on) under a server that
/// busy-polls through epoll with prefer_busy_poll, the one kind of application IRQ suspension
/// acts for (napi.rst). Every trial is measured from real runs and the NAPI reads as before
/// after the search. Needs Linux 6.13+ (per-NAPI settings; 6.17+ for per-NAPI threaded, not
/// searched here): on an older kernel the search refuses the knobs, naming the kernel, and
/// this test fails.
#[test]
fn a_live_search_over_the_veth_s_napi_settings_leaves_them_as_they_were() {
    if !common::tune_live_usable() {
        return;
    }
    let pair = Pair::create(1);
    pair.server.text(&format!("ethtool -K {SERVER_DEV} gro on"));
    let napi = |ns: &Netns| {
        ns.text(&format!(
                "cat /sys/class/net/{SERVER_DEV}/threaded; {BIN} show --dev {SERVER_DEV} | grep -E '^ *napi [0-9]'"
            ),
        )
    };
    let before = napi(&pair.server);
    assert!(before.contains("defer-hard-irqs"), "{before}");
    let listen = format!("{SERVER_ADDR}:4322");
    let _server = echo_server(
        &pair,
        &listen,
        &[
            "--wait",
            "epoll-busy",
            "--busy-poll",
            "50",
            "--prefer-busy-poll",
        ],
    );
    let work = tempfile::tempdir().unwrap();
    let state_dir = work.path().join("state");
    let workload = format!(
        "ip netns exec {} {BIN} bench udp-echo client {listen} --rate 5000 --duration 1 \
         --warmup 0.2 --json",
        pair.client.name
    );
    let knob = |k: &str| format!("nic/{SERVER_DEV}/napi/{k}");
    let out = pair.server.netsteer(&[
        "tune",
        "search",
        "--state-dir",
        state_dir.to_str().unwrap(),
        "--goal",
        "p99<=20ms",
        "--abort-factor",
        "20",
        // CI's guests share their hosts: these runs have seen 40 % steal for minutes, and a
        // search that re-runs such runs (the default, tested on a tree in the experiment
        // crate's workload tests) would stop. Here every run is taken and its steal kept.
        "--max-steal",
        "100",
        "--knob",
        &format!("{}=0,20000000", knob("irq-suspend-timeout")),
        "--knob",
        &format!("{}=0,2", knob("defer-hard-irqs")),
        "--knob",
        &format!("{}=0,200000", knob("gro-flush-timeout")),
        "--knob",
        &format!("/sys/class/net/{SERVER_DEV}/threaded=0,1"),
        "--dev",
        SERVER_DEV,
        "--workload",
        &workload,
        "--budget",
        "4",
        "--repeat",
        "2",
        "--confirm-repeat",
        "2",
        "--json",
    ]);
    let r = finished(&out);
    assert_eq!(r.outcome.trials.len(), 4);
    for t in &r.outcome.trials {
        assert!(t.latency.min > 0.0 && t.cost.min > 0.0, "{t:?}");
        // A datagram lost now and then on a busy host is judged against the baseline's in
        // the same runs (not a failure): a rejected trial is one that lost more.
        assert!(t.rejected.is_none() || t.lost > t.base_lost, "{t:?}");
    }
    // The screening moved one knob at a time (a NAPI_SET the kernel refused would have
    // failed the trial's apply and stopped the search).
    for t in &r.outcome.trials {
        let moved = (0..t.config.len())
            .filter(|&i| t.config[i] != r.outcome.baseline[i])
            .count();
        assert_eq!(moved, 1, "{t:?}");
    }
    assert_eq!(
        napi(&pair.server),
        before,
        "the search left the NAPI changed"
    );
}
