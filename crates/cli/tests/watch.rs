//! `netsteer watch` through the binary on the live host, advice mode (it writes nothing): it
//! runs for its duration, every line is a JSON event, and a cap past the hard ceiling is
//! refused naming the flag before anything runs.

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

/// `netsteer [--root TREE] ARGS`.
fn netsteer(root: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    if let Some(r) = root {
        cmd.arg("--root").arg(r);
    }
    cmd.args(args).output().unwrap()
}

/// The run must succeed; its events.
fn ok(out: &Output) -> Vec<Event> {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    events(out)
}

#[test]
fn advice_mode_runs_for_its_duration_and_speaks_json_lines() {
    let state = tempfile::tempdir().unwrap();
    let sd = state.path().to_str().unwrap();
    let args = [
        "watch",
        "--interval",
        "0.5",
        "--duration",
        "2",
        "--json",
        "--state-dir",
        sd,
    ];
    let ev = ok(&netsteer(None, &args));
    // It says when it sees its first interval, and what it will do.
    assert!(
        matches!(ev.first(), Some(Event::Started { apply: false, interval_s, .. }) if *interval_s == 0.5),
        "{ev:?}"
    );
    for e in ev {
        assert!(
            !matches!(e, Event::Applied { .. }),
            "advice mode applied: {e:?}"
        );
    }
    // Advice mode keeps no journal.
    assert!(!state.path().join("watch/journal").exists());
}

#[test]
fn a_cap_past_its_ceiling_is_refused_naming_the_flag() {
    for (flag, v) in [
        ("--max-budget-usecs", "50000"),
        ("--max-backlog", "0"),
        ("--interval", "0.05"),
    ] {
        let out = netsteer(None, &["watch", flag, v, "--duration", "1"]);
        assert_eq!(out.status.code(), Some(2), "{flag} {v}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
    }
}

mod common;

use common::{files, scratch};
use netsteer_steering::watch::Event;
use std::path::Path;
use std::process::{Command, Output};

/// A recording of one interval per rate, in which CPU 4 drops that many packets/s, as
/// `doctor --json` prints a load (one object a line).
fn recording(dir: &Path, rates: &[f64]) -> std::path::PathBuf {
    use netsteer_host::sample::{CpuRates, Rates};
    use netsteer_steering::doctor::{Load, LoadSource};
    let load = |rate: f64| Load {
        source: LoadSource::Sampled,
        seconds: 1.0,
        cpu: Rates {
            interval_s: 1.0,
            cpus: (0..16)
                .map(|c| CpuRates {
                    cpu: c,
                    idle: 95.0,
                    soft: 5.0,
                    dropped: Some(if c == 4 { rate } else { 0.0 }),
                    squeezed: Some(0.0),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        },
        net: Default::default(),
    };
    let lines: Vec<String> = rates
        .iter()
        .map(|r| serde_json::to_string(&load(*r)).unwrap())
        .collect();
    let path = dir.join("loads.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn watch(tree: &Path, args: &[&str]) -> Output {
    let mut all = vec!["watch"];
    all.extend_from_slice(args);
    netsteer(Some(tree), &all)
}

fn events(o: &Output) -> Vec<Event> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// A recorded incident replayed against seed 003's tree: advice at the third interval, and
/// the tree untouched without --apply.
#[test]
fn a_replay_advises_on_a_tree_and_changes_nothing() {
    let tree = scratch("kvm-virtio-16cpu");
    let work = tempfile::tempdir().unwrap();
    let rec = recording(work.path(), &[300.0; 5]);
    let state = work.path().join("state");
    let before = files(tree.path());
    let out = watch(
        tree.path(),
        &[
            "--replay",
            rec.to_str().unwrap(),
            "--json",
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    let ev = ok(&out);
    assert!(
        matches!(ev.first(), Some(Event::Advice { at, advice }) if *at == 3.0 && advice.id == "backlog"),
        "{ev:?}"
    );
    assert_eq!(files(tree.path()), before);
    // Without a recording a tree has nothing to watch: refused, naming what to give.
    let out = watch(tree.path(), &["--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--replay"));
}

/// A watcher killed in the middle of an action (the process aborts between its two writes,
/// as a SIGKILL would) leaves a journal that `tune rollback --state-dir STATE/watch` completes:
/// the tree reads byte for byte as before. With --rollback-on-exit a finished run leaves the
/// tree as it found it.
#[test]
fn a_watcher_killed_mid_change_is_undone_by_tune_rollback() {
    let tree = scratch("kvm-virtio-16cpu");
    let work = tempfile::tempdir().unwrap();
    // Drops for one interval, then none: the action helps and its guard keeps it.
    let rec = recording(work.path(), &[300.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    let state = work.path().join("state");
    let sd = state.to_str().unwrap();
    let before = files(tree.path());
    let apply = [
        "--replay",
        rec.to_str().unwrap(),
        "--apply",
        "--persist",
        "1",
        "--state-dir",
        sd,
    ];
    let mut args = apply.to_vec();
    args.extend(["--crash-after-writes", "1"]);
    let out = watch(tree.path(), &args);
    assert_eq!(
        out.status.code(),
        None,
        "aborted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_ne!(
        files(tree.path()),
        before,
        "the crash came before the first write"
    );
    let watch_dir = state.join("watch");
    let rollback = [
        "tune",
        "rollback",
        "--state-dir",
        watch_dir.to_str().unwrap(),
    ];
    assert_eq!(
        netsteer(Some(tree.path()), &rollback).status.code(),
        Some(0)
    );
    assert_eq!(files(tree.path()), before);

    let mut args = apply.to_vec();
    args.extend(["--rollback-on-exit", "--json"]);
    let ev = ok(&watch(tree.path(), &args));
    assert!(
        ev.iter().any(|e| matches!(e, Event::Applied { .. })),
        "{ev:?}"
    );
    assert!(
        matches!(ev.last(), Some(Event::RolledBack { why, .. }) if why.contains("rollback on exit")),
        "{ev:?}"
    );
    assert_eq!(files(tree.path()), before);
}
