//! `netsteer --root <copy of a fixture> tune search` end to end, with a workload that reads the
//! tree's knobs back (so what is measured is what was applied) and prices them exactly: the
//! search finds the known optimum, writes a plan `tune apply --plan` takes and a report, and
//! leaves the tree byte for byte as it was; a search killed with SIGKILL mid-trial is undone by
//! `tune rollback`, or by the next search before it starts.

mod common;

use common::{files, scratch};
use netsteer_steering::tune::Plan;
use netsteer_steering::tune::search::SearchReport;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A workload: p99 and CPU per request from the tree's busy_read (r) and busy_poll (p), in ns:
/// busy reading buys latency with CPU up to 60 µs of budget. `hang` makes a candidate's run
/// (busy_read not 0) write its pid to `marker` and hang.
fn workload(dir: &Path, tree: &Path, hang: Option<&Path>) -> PathBuf {
    let core = tree.join("proc/sys/net/core");
    let hang = match hang {
        Some(m) => format!(
            "if [ \"$r\" != 0 ]; then echo $$ > {m}.tmp; mv {m}.tmp {m}; exec sleep 60; fi\n",
            m = m.display()
        ),
        None => String::new(),
    };
    let text = format!(
        r#"#!/bin/sh
r=$(cat {core}/busy_read)
p=$(cat {core}/busy_poll)
{hang}m=$r; [ $m -gt 60 ] && m=60
lat=$((100000 - 300 * m - 100 * p))
cost=$((10000 + 80 * r + 20 * p))
echo '{{"type":"interval","role":"client"}}'
echo "{{\"type\":\"summary\",\"bench\":\"udp-echo\",\"role\":\"client\",\"received\":1000,\"pps\":1000.0,\"lost\":0,\"latency_ns\":{{\"p50\":1,\"p99\":$lat,\"p999\":$lat}},\"cost_ns_per_request\":$cost}}"
"#,
        core = core.display()
    );
    script(
        &dir.join(if hang.is_empty() { "w.sh" } else { "hang.sh" }),
        &text,
    )
}

/// Writes `text` to `path` as an executable script (a workload the search runs).
fn script(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    let st = Command::new("chmod").arg("+x").arg(path).status().unwrap();
    assert!(st.success());
    path.to_path_buf()
}

fn search_args<'a>(state: &'a str, workload: &'a str, goal: &'a str) -> Vec<&'a str> {
    vec![
        "tune",
        "search",
        "--state-dir",
        state,
        "--goal",
        goal,
        "--knob",
        "/proc/sys/net/core/busy_read=25,50,100",
        "--knob",
        "/proc/sys/net/core/busy_poll=0,50",
        "--workload",
        workload,
        "--budget",
        "8",
        "--repeat",
        "2",
        "--confirm-repeat",
        "2",
    ]
}

fn netsteer(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("run netsteer")
}

#[test]
fn a_search_finds_the_optimum_writes_a_plan_apply_takes_and_leaves_the_tree() {
    let tree = scratch("dev-vm");
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let w = workload(work.path(), tree.path(), None);
    let plan = work.path().join("plan.json");
    let report = work.path().join("report.html");
    let before = files(tree.path());
    let mut args = search_args(state.to_str().unwrap(), w.to_str().unwrap(), "p99<=86us");
    args.extend([
        "--plan-out",
        plan.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--against",
        "tuned-network-latency",
        "--json",
    ]);
    let out = netsteer(tree.path(), &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: SearchReport = serde_json::from_slice(&out.stdout).unwrap();
    // busy_read 50 alone: 85 µs at 14 µs a request; every other way within 86 µs costs more.
    let best = r.outcome.best.clone().expect("a configuration");
    assert_eq!(r.describe(&best), "/proc/sys/net/core/busy_read=50");
    assert!(r.not_restored.is_empty() && r.recovered.is_empty());
    assert!(r.outcome.trials.len() <= 8);
    assert_eq!(
        files(tree.path()),
        before,
        "the search left the tree changed"
    );
    // The runs alternate, and the baseline's are priced as the baseline.
    for t in &r.outcome.trials {
        assert_eq!(t.base_latency.median, 100_000.0);
        assert_eq!(t.base_cost.median, 10_000.0);
    }

    // tuned's network-latency (busy_read and busy_poll 50) meets the goal at 80 µs, at 15 µs
    // a request: worse on cost than what was found, beyond the (here zero) noise.
    let [f] = r.against.as_slice() else {
        panic!("{:?}", r.against)
    };
    assert!(f.meets_goal);
    assert_eq!(f.latency.after.median, 80_000.0);
    assert_eq!(
        (f.cost.before.median, f.cost.after.median),
        (14_000.0, 15_000.0)
    );
    assert_eq!(
        f.cost.verdict,
        netsteer_experiment::experiment::Verdict::Worse
    );
    assert_eq!(f.changes.len(), 2, "{:?}", f.changes);
    // The fixture has no tcp_fastopen: said, not silently dropped.
    assert!(
        f.skipped.len() == 1 && f.skipped[0].contains("tcp_fastopen"),
        "{:?}",
        f.skipped
    );

    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("tuned network-latency"));
    assert!(html.contains("busy_read=50") && html.contains("<svg"));
    assert_eq!(html.matches("<tr><td>").count(), r.outcome.trials.len());

    // The plan file is what `tune apply --plan` takes, and it sets exactly the knob found.
    let p: Plan = serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
    assert!(p.items.iter().any(|i| i.desired == "50"));
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "apply",
            "--state-dir",
            state.to_str().unwrap(),
            "--plan",
            plan.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let core = tree.path().join("proc/sys/net/core");
    assert_eq!(
        std::fs::read_to_string(core.join("busy_read"))
            .unwrap()
            .trim(),
        "50"
    );
    assert_eq!(
        std::fs::read_to_string(core.join("busy_poll"))
            .unwrap()
            .trim(),
        "0"
    );

    // An output file that exists is refused before anything runs.
    let again = netsteer(tree.path(), &{
        let mut a = search_args(state.to_str().unwrap(), w.to_str().unwrap(), "p99<=86us");
        a.extend(["--report", report.to_str().unwrap()]);
        a
    });
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--report"));

    // So is one whose directory is missing: before the first run, not after the last.
    let ran = work.path().join("ran");
    let marking = script(
        &work.path().join("mark.sh"),
        &format!("#!/bin/sh\ntouch {}\nexec {}\n", ran.display(), w.display()),
    );
    for flag in ["--plan-out", "--report"] {
        let missing = work.path().join("no-such-dir/out");
        let out = netsteer(tree.path(), &{
            let mut a = search_args(
                state.to_str().unwrap(),
                marking.to_str().unwrap(),
                "p99<=86us",
            );
            a.extend([flag, missing.to_str().unwrap()]);
            a
        });
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("{flag} {}", missing.display())) && err.contains("No such file"),
            "{err}"
        );
        assert!(
            !ran.exists(),
            "{flag}: the workload ran before the path was checked"
        );
    }
}

/// Starts a search whose first candidate run hangs, waits until it does, and kills the search
/// with SIGKILL: the candidate stays applied in the tree.
fn kill_mid_trial(tree: &Path, state: &Path, work: &Path) {
    let marker = work.join("hung");
    let _ = std::fs::remove_file(&marker);
    let hang = workload(work, tree, Some(&marker));
    let mut child = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .arg("--root")
        .arg(tree)
        .args(search_args(
            state.to_str().unwrap(),
            hang.to_str().unwrap(),
            "p99<=86us",
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !marker.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the candidate never ran"
        );
        assert!(child.try_wait().unwrap().is_none(), "the search ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Screening moves busy_read to its far end first.
    let core = tree.join("proc/sys/net/core");
    assert_eq!(
        std::fs::read_to_string(core.join("busy_read"))
            .unwrap()
            .trim(),
        "100"
    );
    // What the workload started may outlive a search killed with SIGKILL (only sh itself
    // dies with it): its process group goes here.
    let pid: i32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pgid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(") ")
                .next()?
                .split(' ')
                .nth(2)?
                .parse::<i32>()
                .ok()
        });
    if let Some(g) = pgid.filter(|g| *g > 1) {
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{g}")])
            .status();
    }
}

#[test]
fn a_search_killed_mid_trial_is_rolled_back_by_rollback_or_the_next_search() {
    let tree = scratch("dev-vm");
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let before = files(tree.path());

    kill_mid_trial(tree.path(), &state, work.path());
    assert_ne!(files(tree.path()), before);
    let out = netsteer(
        tree.path(),
        &["tune", "rollback", "--state-dir", state.to_str().unwrap()],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(files(tree.path()), before, "tune rollback left changes");

    kill_mid_trial(tree.path(), &state, work.path());
    assert_ne!(files(tree.path()), before);
    let w = workload(work.path(), tree.path(), None);
    let mut args = search_args(state.to_str().unwrap(), w.to_str().unwrap(), "p99<=86us");
    args.push("--json");
    let out = netsteer(tree.path(), &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: SearchReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.recovered.len(), 1, "{:?}", r.recovered);
    // Its baseline is the host as it was before the killed search, not the trial it left.
    assert!(
        r.outcome
            .trials
            .iter()
            .all(|t| t.base_latency.median == 100_000.0)
    );
    assert_eq!(files(tree.path()), before, "the next search left changes");
}

/// Without `--knob`, the knobs the device has in the tree: every rx queue's RPS mask (host-wide
/// width), channels over the device's range, GRO, coalescing, the NAPI deferral files, threaded
/// NAPI and busy polling; a workload that prices
/// every configuration alike finds nothing cheaper, and the tree is left as it was.
#[test]
fn without_knobs_the_device_s_own_are_searched() {
    let tree = scratch("igb-6.12");
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let w = script(
        &work.path().join("flat.sh"),
        "#!/bin/sh\necho '{\"type\":\"summary\",\"role\":\"client\",\"received\":1000,\"latency_ns\":{\"p99\":40000},\"cost_ns_per_request\":5000}'\n",
    );
    let before = files(tree.path());
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "search",
            "--state-dir",
            state.to_str().unwrap(),
            "--goal",
            "p99<=50us",
            "--dev",
            "eth0",
            "--workload",
            w.to_str().unwrap(),
            "--budget",
            "3",
            "--repeat",
            "2",
            "--json",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let r: SearchReport = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = r.dims.iter().map(|d| d.name.as_str()).collect();
    for k in [
        "/sys/class/net/eth0/queues/rx-0/rps_cpus",
        "/sys/class/net/eth0/queues/rx-1/rps_cpus",
        "nic/eth0/feature/rx-gro",
        "nic/eth0/coalesce/rx-usecs",
        "/sys/class/net/eth0/gro_flush_timeout",
        "/sys/class/net/eth0/napi_defer_hard_irqs",
        "/sys/class/net/eth0/threaded",
        "/proc/sys/net/core/busy_read",
    ] {
        assert!(names.contains(&k), "{k} not in {names:?}");
        assert!(err.contains(&format!("knob {k}=")), "{err}");
    }
    // Channels over the range igb reports (combined 2 now, at most 8).
    let ch = r
        .dims
        .iter()
        .find(|d| d.name == "nic/eth0/channels/combined")
        .expect("channels searched");
    assert_eq!(ch.levels, ["1", "2", "4", "8"]);
    assert!(r.outcome.best.is_none());
    assert_eq!(files(tree.path()), before);
    // A value past the device's maximum is refused before anything runs, naming it.
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "search",
            "--state-dir",
            state.to_str().unwrap(),
            "--goal",
            "p99<=50us",
            "--knob",
            "nic/eth0/channels/combined=1,16",
            "--workload",
            w.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("16 is more than eth0 takes (8)"), "{err}");
    assert_eq!(files(tree.path()), before);
    // Neither knobs nor devices: nothing to search, said before anything runs.
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "search",
            "--goal",
            "p99<=50us",
            "--workload",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dev"));
}

/// Per-NAPI and threaded-NAPI knobs on the tree with per-NAPI settings (Linux 6.13+): IRQ
/// suspension on every NAPI of eth0 meets the goal, threaded NAPI only costs, so the search
/// sets the first and not the second; the plan names every NAPI instance; the tree is left as
/// it was. A per-NAPI knob whose NAPIs disagree has no baseline and is refused, naming them.
#[test]
fn per_napi_irq_suspension_and_threaded_napi_are_searched() {
    let tree = scratch("ixgbe-napi-16cpu");
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let ethtool = tree.path().join("netsteer/ethtool.json");
    let threaded = tree.path().join("sys/class/net/eth0/threaded");
    // s: IRQ suspension set on some NAPI of eth0 (the tree's JSON, however it is spaced).
    let w = script(
        &work.path().join("napi.sh"),
        &format!(
            r#"#!/bin/sh
s=$(tr -d ' \n' < {e} | grep -c '"irq_suspend_timeout_ns":20000000')
t=$(cat {t})
lat=$((100000 - 40000 * s - 5000 * t))
cost=$((10000 + 2000 * t))
echo "{{\"type\":\"summary\",\"role\":\"client\",\"received\":1000,\"latency_ns\":{{\"p99\":$lat}},\"cost_ns_per_request\":$cost}}"
"#,
            e = ethtool.display(),
            t = threaded.display()
        ),
    );
    // The fixture's NAPIs disagree (one has IRQ suspension set by hand): no single baseline,
    // refused by name, with the fix; the fix applied, the search runs.
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "search",
            "--state-dir",
            state.to_str().unwrap(),
            "--goal",
            "p99<=70us",
            "--dev",
            "eth0",
            "--knob",
            "nic/eth0/napi/irq-suspend-timeout=0,20000000",
            "--workload",
            w.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("nic/eth0/napi/8198/irq-suspend-timeout 20000000")
            && err.contains("different values"),
        "{err}"
    );
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "apply",
            "--state-dir",
            work.path().join("by-hand").to_str().unwrap(),
            "--profile",
            "none",
            "--dev",
            "eth0",
            "--set",
            "nic/eth0/napi/irq-suspend-timeout=0",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan = work.path().join("plan.json");
    let before = files(tree.path());
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "search",
            "--state-dir",
            state.to_str().unwrap(),
            "--goal",
            "p99<=70us",
            "--dev",
            "eth0",
            "--knob",
            "nic/eth0/napi/irq-suspend-timeout=0,20000000",
            "--knob",
            "/sys/class/net/eth0/threaded=0,1",
            "--workload",
            w.to_str().unwrap(),
            "--budget",
            "4",
            "--repeat",
            "2",
            "--confirm-repeat",
            "2",
            "--plan-out",
            plan.to_str().unwrap(),
            "--json",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r: SearchReport = serde_json::from_slice(&out.stdout).unwrap();
    let best = r.outcome.best.clone().expect("a configuration");
    assert_eq!(
        r.describe(&best),
        "nic/eth0/napi/irq-suspend-timeout=20000000"
    );
    assert_eq!(
        files(tree.path()),
        before,
        "the search left the tree changed"
    );
    // Every NAPI of eth0 gets it, each by its id.
    let p: Plan = serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
    let napi_ids: Vec<&str> = p
        .items
        .iter()
        .filter(|i| i.desired == "20000000")
        .map(|i| i.id.as_str())
        .collect();
    let json = std::fs::read_to_string(&ethtool).unwrap();
    let eth0: serde_json::Value = serde_json::from_str(&json).unwrap();
    let napis = eth0["eth0"]["netdev"]["napis"].as_array().unwrap();
    assert!(napis.len() > 1);
    assert_eq!(napi_ids.len(), napis.len(), "{napi_ids:?}");
    for n in napis {
        let id = format!("nic/eth0/napi/{}/irq-suspend-timeout", n["id"]);
        assert!(napi_ids.contains(&id.as_str()), "{id} not in {napi_ids:?}");
    }

    // A setting the kernel has no per-NAPI form of is named with what it has instead.
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "plan",
            "--profile",
            "none",
            "--set",
            "nic/eth0/napi/busy=1",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("irq-suspend-timeout"));
    assert_eq!(files(tree.path()), before);
}

/// A knob that hurts ends the search at once, with the tree as it was: a candidate whose p99 is
/// far past the goal (busy_poll on: 100× the goal, past `--abort-factor`), and one that loses
/// far more than the baseline (busy_read 100: 400 a run beside none, past 3 × (0 + 100)).
/// Exit 2, the reason in the report, nothing left applied. One that loses a few more than the
/// baseline (busy_read 50: 7 a run) is rejected instead and the search goes on.
#[test]
fn a_knob_that_hurts_ends_the_search_with_the_tree_restored() {
    let tree = scratch("dev-vm");
    let work = tempfile::tempdir().unwrap();
    let core = tree.path().join("proc/sys/net/core");
    let w = script(
        &work.path().join("hurt.sh"),
        &format!(
            r#"#!/bin/sh
r=$(cat {c}/busy_read); p=$(cat {c}/busy_poll)
lat=50000; lost=0
[ "$p" != 0 ] && lat=5000000
[ "$r" = 100 ] && lost=400
[ "$r" = 50 ] && lost=7
echo "{{\"type\":\"summary\",\"role\":\"client\",\"received\":1000,\"lost\":$lost,\"latency_ns\":{{\"p99\":$lat}},\"cost_ns_per_request\":1000}}"
"#,
            c = core.display()
        ),
    );
    let before = files(tree.path());
    let search = |knob: &str, state: &str| {
        let state = work.path().join(state);
        netsteer(
            tree.path(),
            &[
                "tune",
                "search",
                "--state-dir",
                state.to_str().unwrap(),
                "--goal",
                "p99<=60us",
                "--knob",
                knob,
                "--workload",
                w.to_str().unwrap(),
                "--budget",
                "4",
                "--repeat",
                "2",
                "--json",
            ],
        )
    };
    for (knob, why) in [
        ("/proc/sys/net/core/busy_poll=0,50", "abort factor"),
        ("/proc/sys/net/core/busy_read=0,100", "lost 400"),
    ] {
        let out = search(knob, &format!("state-{}", why.len()));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{knob}: {err}");
        let r: SearchReport = serde_json::from_slice(&out.stdout).unwrap();
        let stopped = r.outcome.stopped.clone().expect("stopped");
        assert!(stopped.contains(why), "{knob}: {stopped}");
        // Said on stderr too: with --json a person watching sees the runs there, not stdout.
        assert!(
            err.contains(&format!("netsteer: search stopped early: {stopped}")),
            "{knob}: {err}"
        );
        // Stopped inside the first trial: it is not counted as one.
        assert!(
            r.outcome.trials.is_empty(),
            "{knob}: {:?}",
            r.outcome.trials
        );
        assert!(r.outcome.best.is_none() && r.not_restored.is_empty());
        assert_eq!(
            files(tree.path()),
            before,
            "{knob}: the tree was left changed"
        );
    }
    // 7 lost a run beside the baseline's none: that trial is rejected, the search ends on its
    // own (nothing found: exit 1), nothing confirmed loses, the tree as it was.
    let out = search("/proc/sys/net/core/busy_read=0,50", "state-rejected");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let r: SearchReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.outcome.stopped.is_none(), "{:?}", r.outcome.stopped);
    let t = &r.outcome.trials[0];
    assert_eq!((t.lost, t.base_lost), (14, 0), "{t:?}");
    let why = t.rejected.as_deref().expect("rejected");
    assert!(why.contains("7 7 a run against 0 0"), "{why}");
    assert!(r.outcome.confirmations.is_empty(), "{:?}", r.outcome);
    assert!(r.outcome.best.is_none() && r.not_restored.is_empty());
    assert_eq!(files(tree.path()), before);
}
