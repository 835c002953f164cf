//! `netsteer bench netchannel` through the binary: every experiment's JSON Lines summary reads
//! back into the library's types with plausible figures; bad flags are named.

use netsteer_bench::netchannel::message::{Result as Exp, Summary};
use netsteer_bench::report::Kind;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

/// Runs `netsteer bench netchannel --json ARGS`, which must succeed, and reads every line back
/// into the library's summary type.
fn summaries(args: &[&str]) -> Vec<Summary> {
    let out = Command::new(BIN)
        .args(["bench", "netchannel", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn every_experiment_reports_a_summary_that_reads_back() {
    let lines = summaries(&[
        "--duration",
        "0.4",
        "--repeat",
        "1",
        "--channels",
        "1,2",
        "--copy-workers",
        "0,1",
        "--bulk-apps",
        "1",
    ]);
    assert_eq!(lines.len(), 4);
    for s in &lines {
        assert_eq!(s.kind, Kind::Summary);
        assert_eq!(s.bench, "netchannel");
        assert!(s.setup.cores >= 1);
        assert_eq!(s.setup.path, "loopback");
    }
    match &lines[0].result {
        Exp::E1(e) => {
            // 1 and 2 channels × (no workers, 1 receive worker, 1 receive + 1 send worker).
            assert_eq!(e.rows.len(), 6);
            assert!(e.rows.iter().any(|r| r.send_copy_workers == 1));
            assert!(e.tcp_bits_per_second > 1e8);
            assert!(e.rows.iter().all(|r| r.bits_per_second > 1e8), "{e:?}");
        }
        other => panic!("first is E1, got {other:?}"),
    }
    match &lines[1].result {
        Exp::E2(e) => {
            assert_eq!(e.message_bytes, 4096);
            assert!(
                e.rows.iter().all(|r| r.messages_per_second > 1000.0),
                "{e:?}"
            );
        }
        other => panic!("second is E2, got {other:?}"),
    }
    match &lines[2].result {
        Exp::E3(e) => {
            let names: Vec<_> = e.rows.iter().map(|r| r.config.as_str()).collect();
            assert_eq!(names, ["plain-tcp", "shared", "isolated"]);
            for r in &e.rows {
                assert!(
                    r.latency_ns.p50 > 0 && r.latency_ns.p50 <= r.latency_ns.p99,
                    "{r:?}"
                );
                assert!(r.latency_ns.p99 <= r.latency_ns.p999);
                assert!(r.bits_per_second > 0.0);
            }
            assert!(e.isolation_p99_gain > 0.0);
        }
        other => panic!("third is E3, got {other:?}"),
    }
    match &lines[3].result {
        Exp::E4(e) => {
            assert!(e.bits_per_second_per_core > 0.0 && e.tcp_bits_per_second_per_core > 0.0);
            assert!(
                (e.ratio - e.bits_per_second_per_core / e.tcp_bits_per_second_per_core).abs()
                    < 1e-9
            );
        }
        other => panic!("fourth is E4, got {other:?}"),
    }
    // The experiment name is a field of the JSON object.
    let raw = serde_json::to_value(&lines[3]).unwrap();
    assert_eq!(raw["experiment"], "E4");
}

#[test]
fn bad_flags_are_named() {
    for (args, needle) in [
        (vec!["--experiment", "E9"], "--experiment <LIST>"),
        (vec!["--duration=-1"], "--duration"),
        (vec!["--client-netns", "no-such-ns-xyz"], "--client-netns"),
        (vec!["--channels", "0"], "channels"),
    ] {
        let out = Command::new(BIN)
            .args(["bench", "netchannel"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn the_mptcp_row_runs_beside_tcp_in_e1_and_e2() {
    let lines = summaries(&[
        "--experiment",
        "E1,E2",
        "--duration",
        "0.3",
        "--repeat",
        "1",
        "--channels",
        "2",
        "--copy-workers",
        "0",
        "--mptcp",
    ]);
    let rows: Vec<_> = lines
        .iter()
        .map(|s| match &s.result {
            Exp::E1(e) => e.mptcp.clone(),
            Exp::E2(e) => e.mptcp.clone(),
            other => panic!("only E1 and E2 were asked for, got {other:?}"),
        })
        .collect();
    assert_eq!(rows.len(), 2);
    for m in rows {
        let m = m.expect("an MPTCP row with --mptcp");
        assert!(m.bits_per_second > 1e7, "{m:?}");
        // No path-manager endpoints in this namespace: the initial subflow alone.
        assert_eq!(m.extra_subflows, 0);
    }
}

#[test]
fn recovery_kills_a_channel_and_reports_it_back_with_every_byte() {
    let lines = summaries(&[
        "--experiment",
        "recovery",
        "--duration",
        "0.5",
        "--repeat",
        "1",
        "--channels",
        "3",
    ]);
    assert_eq!(lines.len(), 1);
    let s = lines.into_iter().next().unwrap();
    let Exp::Recovery(r) = s.result else {
        panic!("expected the recovery summary, got {:?}", s.result)
    };
    assert_eq!(r.channels, 3);
    assert_eq!(r.runs.len(), 1);
    let run = &r.runs[0];
    assert_eq!(run.bytes_sent, run.bytes_received);
    assert!(run.bytes_sent > 0);
    // Re-dialed within the run (the default re-dial interval is 200 ms).
    assert!(
        run.reopen_ms.is_finite() && run.reopen_ms < 1000.0,
        "{run:?}"
    );
    assert!(run.before_bits_per_second > 0.0, "{run:?}");
}
