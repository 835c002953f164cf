//! `netsteer --root <copy of a fixture> tune ...` end to end: the plan's JSON reads back into
//! the library's `Plan`; a dry run changes nothing; a crash (the process aborted) between any
//! two writes is undone by `rollback`; the closed loop keeps a change that helps and rolls back
//! one that does not; persist writes its unit inside the root and unpersist removes it.

mod common;

use common::{files, scratch};
use netsteer_steering::tune::{Action, Plan};
use netsteer_steering::tune::{ApplyStatus, StepStatus};
use std::path::Path;
use std::process::{Command, Output};

fn netsteer(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("run netsteer")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn plan_json_round_trips_and_dry_run_changes_nothing() {
    let tree = scratch("cloudflare-24cpu");
    let before = files(tree.path());
    let out = netsteer(
        tree.path(),
        &["tune", "plan", "--profile", "balanced", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let plan: Plan = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&plan).unwrap() + "\n", text);
    assert!(plan.items.iter().any(|i| i.action == Action::Change));
    let out = netsteer(
        tree.path(),
        &["tune", "apply", "--profile", "balanced", "--dry-run"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("dry run: nothing was changed"));
    assert_eq!(files(tree.path()), before);
}

#[test]
fn a_crash_between_any_two_writes_is_rolled_back() {
    let probe = scratch("kvm-virtio-16cpu");
    let state = tempfile::tempdir().unwrap();
    let sd = state.path().to_str().unwrap();
    let out = netsteer(
        probe.path(),
        &[
            "tune",
            "apply",
            "--profile",
            "throughput",
            "--state-dir",
            sd,
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let writes = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "changed")
        .count();
    assert!(writes >= 5, "{report:#}");
    for k in 1..=writes {
        let tree = scratch("kvm-virtio-16cpu");
        let state = tempfile::tempdir().unwrap();
        let sd = state.path().to_str().unwrap();
        let before = files(tree.path());
        let k_s = k.to_string();
        let out = netsteer(
            tree.path(),
            &[
                "tune",
                "apply",
                "--profile",
                "throughput",
                "--state-dir",
                sd,
                "--crash-after-writes",
                &k_s,
            ],
        );
        // Aborted: killed by SIGABRT, no exit code, no journal end.
        assert_eq!(out.status.code(), None, "k={k}: {}", stdout(&out));
        assert_ne!(
            files(tree.path()),
            before,
            "k={k}: the crash came before any write"
        );
        let out = netsteer(tree.path(), &["tune", "rollback", "--state-dir", sd]);
        assert_eq!(out.status.code(), Some(0), "k={k}: {}", stdout(&out));
        assert!(stdout(&out).contains("restored"), "{}", stdout(&out));
        assert_eq!(
            files(tree.path()),
            before,
            "k={k}: rollback after the crash left a difference"
        );
        // Running it again is harmless.
        let out = netsteer(tree.path(), &["tune", "rollback", "--state-dir", sd]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(files(tree.path()), before);
    }
}

/// A stand-in benchmark whose p99 depends on the tree: 50 µs with RPS on rx-0, else 100 µs
/// (with ±1 µs of run-to-run noise).
fn fake_bench(tree: &Path) -> String {
    let counter = tree.join("bench-runs");
    format!(
        "n=$(cat {c} 2>/dev/null || echo 0); echo $((n+1)) > {c}; \
         if [ \"$(cat {t}/sys/class/net/eth0/queues/rx-0/rps_cpus)\" = 0000 ]; then v=100000; else v=50000; fi; \
         echo \"{{\\\"type\\\":\\\"summary\\\",\\\"role\\\":\\\"client\\\",\\\"latency_ns\\\":{{\\\"p99\\\":$((v + n % 2 * 1000))}}}}\"",
        c = counter.display(),
        t = tree.display()
    )
}

#[test]
fn closed_loop_keeps_what_helps_and_rolls_back_what_does_not() {
    // Throughput turns RPS on for the single-queue guest: the fake p99 halves → kept.
    let tree = scratch("kvm-virtio-16cpu");
    let state = tempfile::tempdir().unwrap();
    let sd = state.path().to_str().unwrap();
    let bench = fake_bench(tree.path());
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "apply",
            "--profile",
            "throughput",
            "--state-dir",
            sd,
            "--verify-with",
            &bench,
            "--metric",
            "p99",
            "--repeat",
            "3",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["closed_loop"]["keep"], true, "{v:#}");
    assert_eq!(v["closed_loop"]["before"]["median"], 100000.0);
    // Runs 4-6 of the fake: 51000, 50000, 51000.
    assert_eq!(v["closed_loop"]["after"]["median"], 51000.0);
    assert!(v.get("rollback").is_none());
    let rps = std::fs::read_to_string(tree.path().join("sys/class/net/eth0/queues/rx-0/rps_cpus"))
        .unwrap();
    assert_ne!(rps.trim(), "0000");

    // Latency leaves RPS off, so the fake metric does not move: within the noise → rolled back,
    // exit 1, and the tree is as it was.
    let tree = scratch("kvm-virtio-16cpu");
    let state = tempfile::tempdir().unwrap();
    let sd = state.path().to_str().unwrap();
    let before = files(tree.path());
    let bench = fake_bench(tree.path());
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "apply",
            "--profile",
            "latency",
            "--state-dir",
            sd,
            "--verify-with",
            &bench,
            "--repeat",
            "2",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["closed_loop"]["keep"], false);
    assert_eq!(v["rollback"]["status"], "restored", "{v:#}");
    let mut after = files(tree.path());
    after.remove(Path::new("bench-runs"));
    assert_eq!(after, before);

    // A benchmark without --json output is a clear error, exit 2, nothing applied.
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "apply",
            "--profile",
            "latency",
            "--state-dir",
            sd,
            "--verify-with",
            "echo hello",
            "--repeat",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no client summary"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn persist_writes_inside_the_root_and_unpersist_removes_it() {
    let tree = scratch("dev-vm");
    let out = netsteer(
        tree.path(),
        &["tune", "persist", "--profile", "latency", "--dev", "eth0"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    // No package in the tree: the unit is written too, with this binary in ExecStart.
    let unit =
        std::fs::read_to_string(tree.path().join("etc/systemd/system/netsteer-tune.service"))
            .unwrap();
    assert!(
        unit.contains(&format!(
            "ExecStart={} $NETSTEER_TUNE_ARGS",
            env!("CARGO_BIN_EXE_netsteer")
        )),
        "{unit}"
    );
    let dropin = std::fs::read_to_string(
        tree.path()
            .join("etc/systemd/system/netsteer-tune.service.d/persist.conf"),
    )
    .unwrap();
    assert!(
        dropin
            .contains("Environment=\"NETSTEER_TUNE_ARGS=tune apply --profile latency --dev eth0 "),
        "{dropin}"
    );
    assert!(
        dropin.contains("After=sys-subsystem-net-devices-eth0.device"),
        "{dropin}"
    );
    let rule = std::fs::read_to_string(tree.path().join("etc/udev/rules.d/90-netsteer-tune.rules"))
        .unwrap();
    assert!(
        rule.contains("KERNEL==\"eth0\"") && rule.contains("SYSTEMD_WANTS"),
        "{rule}"
    );
    assert!(stdout(&out).contains("no systemctl"));
    let out = netsteer(tree.path(), &["tune", "unpersist"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !tree
            .path()
            .join("etc/systemd/system/netsteer-tune.service")
            .exists()
    );
    assert!(
        !tree
            .path()
            .join("etc/udev/rules.d/90-netsteer-tune.rules")
            .exists()
    );
    assert!(
        !tree
            .path()
            .join("etc/systemd/system/netsteer-tune.service.d")
            .exists()
    );
}

/// Where the package installed the unit, persist writes only the drop-in and the rule, and
/// unpersist leaves a unit in /etc that it did not write.
#[test]
fn persist_uses_the_packaged_unit_and_leaves_an_administrators_own() {
    let tree = scratch("dev-vm");
    let packaged = tree
        .path()
        .join("usr/lib/systemd/system/netsteer-tune.service");
    std::fs::create_dir_all(packaged.parent().unwrap()).unwrap();
    std::fs::write(&packaged, netsteer_steering::tune::persist::UNIT_TEXT).unwrap();
    let out = netsteer(
        tree.path(),
        &["tune", "persist", "--profile", "latency", "--dev", "eth0"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("the unit is the package's"),
        "{}",
        stdout(&out)
    );
    let etc_unit = tree.path().join("etc/systemd/system/netsteer-tune.service");
    assert!(!etc_unit.exists());
    assert!(
        tree.path()
            .join("etc/systemd/system/netsteer-tune.service.d/persist.conf")
            .is_file()
    );
    std::fs::write(&etc_unit, "[Unit]\nDescription=mine\n").unwrap();
    let out = netsteer(tree.path(), &["tune", "unpersist"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("not written by persist, left"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&etc_unit).unwrap(),
        "[Unit]\nDescription=mine\n"
    );
    assert!(packaged.is_file());
}

#[test]
fn bad_flags_name_themselves() {
    let tree = scratch("dev-vm");
    for (args, want) in [
        (vec!["tune", "plan", "--profile", "fast"], "fast"),
        (
            vec!["tune", "plan", "--profile", "latency", "--dev", "../../etc"],
            "--dev",
        ),
        (
            vec!["tune", "plan", "--profile", "latency", "--dev", "eth7"],
            "no such interface",
        ),
        (
            vec!["tune", "plan", "--profile", "latency", "--cpus", "9-3"],
            "--cpus",
        ),
        (
            vec!["tune", "verify", "--state-dir", "/nonexistent-netsteer"],
            "no applied plan",
        ),
        (
            vec!["tune", "rollback", "--state-dir", "/nonexistent-netsteer"],
            "no journal",
        ),
        (
            vec![
                "tune",
                "apply",
                "--profile",
                "latency",
                "--verify-with",
                "true",
                "--repeat",
                "1",
            ],
            "--repeat <N>",
        ),
    ] {
        let out = netsteer(tree.path(), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn explicit_knobs_are_applied_journaled_and_rolled_back() {
    let tree = scratch("cloudflare-24cpu");
    let before = files(tree.path());
    let state = tempfile::tempdir().unwrap();
    let state_arg = state.path().to_str().unwrap();
    let rps = "/sys/class/net/eth2/queues/rx-1/rps_cpus";
    let out = netsteer(
        tree.path(),
        &[
            "tune",
            "apply",
            "--profile",
            "none",
            "--set",
            &format!("{rps}=f00"),
            "--set",
            "/proc/sys/net/core/busy_poll=50",
            "--state-dir",
            state_arg,
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = tree.path();
    let read = |p: &str| std::fs::read_to_string(root.join(&p[1..])).unwrap();
    assert_eq!(read("/proc/sys/net/core/busy_poll").trim(), "50");
    // The tree's /sys/class/net/eth2 is a link into /sys/devices: the write went through it.
    assert_eq!(read(rps).trim(), "f00");
    // Nothing but the two knobs changed.
    let changed: Vec<_> = files(root)
        .into_iter()
        .filter(|(p, b)| before.get(p) != Some(b))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(changed.len(), 2, "{changed:?}");
    let out = netsteer(root, &["tune", "rollback", "--state-dir", state_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(files(root), before, "rollback restores every byte");

    // A profile's plan with a knob on top: the knob replaces the profile's own item.
    let out = netsteer(
        root,
        &[
            "tune",
            "plan",
            "--profile",
            "throughput",
            "--set",
            &format!("{rps}=1"),
            "--json",
        ],
    );
    let plan: Plan = serde_json::from_str(&stdout(&out)).unwrap();
    let on_rps: Vec<_> = plan
        .items
        .iter()
        .filter(|i| i.target.to_string() == rps)
        .collect();
    assert_eq!(on_rps.len(), 1, "{on_rps:?}");
    assert_eq!(on_rps[0].desired, "1");

    // Refused knobs: not a tuned file, an escape, no knobs at all. Nothing is written.
    for args in [
        vec!["--profile", "none", "--set", "/etc/passwd=x"],
        vec![
            "--profile",
            "none",
            "--set",
            "/proc/sys/net/../../../etc/passwd=x",
        ],
        vec!["--profile", "none", "--set", "/proc/sys/net/core/busy_poll"],
        vec!["--profile", "none"],
    ] {
        let mut a = vec!["tune", "apply", "--state-dir", state_arg];
        a.extend(args.iter().copied());
        let out = netsteer(root, &a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--set") || err.contains("--profile none"),
            "{err}"
        );
    }
    assert_eq!(files(root), before);
}

/// The fleet's way: one reviewed plan file, applied as is on another host of the same shape;
/// twice changes nothing; rollback restores the tree byte for byte. Bad plan files are refused by name, changing nothing.
#[test]
fn a_saved_plan_file_is_applied_as_reviewed_and_idempotent() {
    let planning = scratch("kvm-virtio-16cpu");
    let out = netsteer(
        planning.path(),
        &["tune", "plan", "--profile", "throughput", "--json"],
    );
    common::succeeded(&out);
    let plan_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(plan_file.path(), &out.stdout).unwrap();
    let plan_arg = plan_file.path().to_str().unwrap();

    let host = scratch("kvm-virtio-16cpu");
    let before = files(host.path());
    let apply = |extra: &[&str]| {
        let mut args = vec!["tune", "apply", "--plan", plan_arg, "--json"];
        args.extend_from_slice(extra);
        let o = netsteer(host.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<netsteer_steering::tune::ApplyReport>(&o.stdout).unwrap()
    };
    let first = apply(&[]);
    assert_eq!(first.status, ApplyStatus::Applied);
    assert!(first.steps.iter().any(|s| s.status == StepStatus::Changed));
    let second = apply(&[]);
    assert!(
        second.steps.iter().all(|s| s.status != StepStatus::Changed),
        "{:?}",
        second.steps
    );
    let verify = netsteer(host.path(), &["tune", "verify"]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    let rb = netsteer(host.path(), &["tune", "rollback", first.journal.as_str()]);
    assert!(
        rb.status.success(),
        "{}",
        String::from_utf8_lossy(&rb.stderr)
    );
    let mut after = files(host.path());
    after.retain(|p, _| !p.starts_with("var/lib/netsteer"));
    let mut before = before;
    before.retain(|p, _| !p.starts_with("var/lib/netsteer"));
    assert_eq!(after, before);

    // Refused by name, nothing written: a file that is not a plan, a plan for another device,
    // and --plan with planning flags.
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "{\"not\": \"a plan\"}").unwrap();
    let other = tempfile::NamedTempFile::new().unwrap();
    let mut p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    p["devices"] = serde_json::json!(["eth9"]);
    std::fs::write(other.path(), p.to_string()).unwrap();
    for (args, needle) in [
        (
            vec!["tune", "apply", "--plan", bad.path().to_str().unwrap()],
            bad.path().display().to_string(),
        ),
        (
            vec!["tune", "apply", "--plan", other.path().to_str().unwrap()],
            "eth9".to_string(),
        ),
        (
            vec!["tune", "apply", "--plan", plan_arg, "--profile", "latency"],
            "--profile".to_string(),
        ),
    ] {
        let snapshot = files(host.path());
        let o = netsteer(host.path(), &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&needle), "{args:?}: {err}");
        assert_eq!(files(host.path()), snapshot, "{args:?}");
    }
}
