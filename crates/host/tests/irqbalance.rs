//! irqbalance is recognised by what it is, not what it is called: a process of another user
//! named `irqbalance` made root's `tune plan` skip every IRQ pin (hardening round three).

use netsteer_host::fs::HostFs;
use netsteer_host::view::{find_irqbalance, is_irqbalance};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

fn status(uid: u32) -> String {
    format!(
        "Name:\tirqbalance\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n"
    )
}

/// One process, pid 700, named irqbalance, with what else the tree holds of it.
fn tree(status_uid: Option<u32>, exe: Option<&str>, cgroup: Option<&str>) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(r, "proc/1/comm", "systemd\n");
    write(r, "proc/700/comm", "irqbalance\n");
    if let Some(uid) = status_uid {
        write(r, "proc/700/status", &status(uid));
    }
    if let Some(exe) = exe {
        std::os::unix::fs::symlink(exe, r.join("proc/700/exe")).unwrap();
    }
    if let Some(c) = cgroup {
        write(r, "proc/700/cgroup", c);
    }
    t
}

fn running(t: &tempfile::TempDir) -> bool {
    find_irqbalance(&HostFs::new(t.path())).unwrap().running
}

#[test]
fn a_process_is_irqbalance_by_its_user_and_executable_or_unit_not_its_name() {
    let unit = "0::/system.slice/irqbalance.service\n";
    // The real thing: root, its executable, its unit.
    assert!(running(&tree(
        Some(0),
        Some("/usr/sbin/irqbalance"),
        Some(unit)
    )));
    assert!(running(&tree(Some(0), Some("/usr/sbin/irqbalance"), None)));
    assert!(running(&tree(
        Some(0),
        Some("/usr/sbin/irqbalance (deleted)"),
        None
    )));
    assert!(running(&tree(Some(0), None, Some(unit))));
    // cgroup v1 lists a line per hierarchy.
    assert!(running(&tree(
        Some(0),
        Some("/usr/bin/python3.11"),
        Some(
            "12:pids:/system.slice/irqbalance.service\n1:name=systemd:/system.slice/irqbalance.service\n"
        )
    )));
    // Named irqbalance, but another user's, or root's something else.
    assert!(!running(&tree(
        Some(1000),
        Some("/home/u/irqbalance"),
        None
    )));
    assert!(!running(&tree(
        Some(1000),
        Some("/usr/sbin/irqbalance"),
        Some(unit)
    )));
    assert!(!running(&tree(Some(0), Some("/usr/bin/sleep"), None)));
    assert!(!running(&tree(
        Some(0),
        Some("/usr/bin/sleep"),
        Some("0::/user.slice/user-1000.slice/session-3.scope\n")
    )));
    // A tree that recorded only `comm` (snapshots before these files were kept) answers by it.
    assert!(running(&tree(None, None, None)));
}

/// Runs a copy of `sleep` called `irqbalance`, as `uid` (through setpriv), and waits until the
/// process is it.
fn fake_irqbalance(dir: &Path, uid: Option<u32>) -> Child {
    let exe = dir.join("irqbalance");
    if !exe.exists() {
        fs::copy("/bin/sleep", &exe).unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let child = match uid {
        Some(u) => Command::new("setpriv")
            .args([
                &format!("--reuid={u}"),
                &format!("--regid={u}"),
                "--clear-groups",
                "--",
            ])
            .arg(&exe)
            .arg("30")
            .spawn()
            .unwrap(),
        None => Command::new(&exe).arg("30").spawn().unwrap(),
    };
    let comm = format!("/proc/{}/comm", child.id());
    let t0 = Instant::now();
    while fs::read_to_string(&comm)
        .map(|c| c.trim() != "irqbalance")
        .unwrap_or(true)
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "the fake never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

#[test]
fn live_an_unprivileged_process_named_irqbalance_is_not_irqbalance() {
    // Root: the effective uid in /proc/self/status.
    let root = fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("live test cannot run under CI=true: needs root (setpriv to another user)");
        }
        eprintln!("SKIPPED: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let live = HostFs::live();
    let mut nobody = fake_irqbalance(dir.path(), Some(65534));
    let as_nobody = is_irqbalance(&live, nobody.id());
    let _ = nobody.kill();
    let _ = nobody.wait();
    let mut roots = fake_irqbalance(dir.path(), None);
    let as_root = is_irqbalance(&live, roots.id());
    let _ = roots.kill();
    let _ = roots.wait();
    assert!(
        !as_nobody,
        "another user's process named irqbalance was taken for it"
    );
    assert!(as_root, "root's irqbalance executable was not recognised");
}

/// Three answers from whatever the tree kept of its processes (issue 72, class 1).
#[test]
fn irqbalance_is_found_from_whichever_file_the_tree_kept_and_unknown_when_none_names_a_process() {
    let answer = |files: &[(&str, &str)]| {
        let t = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            write(t.path(), rel, text);
        }
        find_irqbalance(&HostFs::new(t.path())).map(|i| (i.running, i.pid))
    };
    let root_status = status(0);
    // A sosreport-style bundle: status (with its Name:) and cgroup, no comm.
    assert_eq!(
        answer(&[
            ("proc/1/status", "Name:\tsystemd\nUid:\t0\t0\t0\t0\n"),
            ("proc/812/status", &root_status),
            ("proc/812/cgroup", "0::/system.slice/irqbalance.service\n"),
        ])
        .unwrap(),
        (true, Some(812))
    );
    // Upstart started /usr/sbin/irqbalance: no unit, and the copy kept no exe link.
    assert_eq!(
        answer(&[
            ("proc/1/comm", "init\n"),
            ("proc/640/comm", "irqbalance\n"),
            ("proc/640/status", &root_status),
            ("proc/640/cgroup", "1:name=systemd:/\n"),
            (
                "proc/640/cmdline",
                "/usr/sbin/irqbalance\0--pid=/run/irqbalance.pid\0"
            ),
        ])
        .unwrap(),
        (true, Some(640))
    );
    // Only a command line was kept.
    assert_eq!(
        answer(&[
            ("proc/1/cmdline", "/sbin/init\0splash\0"),
            ("proc/640/cmdline", "/usr/sbin/irqbalance\0--foreground\0"),
            ("proc/640/status", &root_status),
        ])
        .unwrap(),
        (true, Some(640))
    );
    // Another user's process of that name, seen through its status alone, is not it.
    assert_eq!(
        answer(&[
            ("proc/1/comm", "systemd\n"),
            ("proc/900/status", &status(1000)),
        ])
        .unwrap(),
        (false, None)
    );
    // Named processes, none of them irqbalance: not running.
    assert_eq!(
        answer(&[("proc/1/comm", "systemd\n"), ("proc/2/cmdline", "")]).unwrap(),
        (false, None)
    );
    // Process directories that name nobody: unknown, not "not running".
    let unknown = answer(&[("proc/1/stat", "1 (x) S 0"), ("proc/77/environ", "")]).unwrap_err();
    assert!(unknown.to_string().contains("names itself"), "{unknown}");
}

/// What a tree's /proc may not pass for (attack review): a few processes without init are no
/// process list; `+7` and `07` are no process; a user's unit named irqbalance.service is not
/// the system's; a process's text files are read only as far as their useful start.
#[test]
fn a_tree_without_init_or_with_odd_entries_does_not_say_not_running() {
    let answer = |files: &[(&str, &str)]| {
        let t = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            write(t.path(), rel, text);
        }
        find_irqbalance(&HostFs::new(t.path())).map(|i| (i.running, i.pid, i.unit))
    };
    // One kernel thread's directory (fixtures/hosts/ixgbe-napi-16cpu keeps a NAPI kthread's).
    let e = answer(&[("proc/4321/comm", "napi/eth0-8199\n")]).unwrap_err();
    assert!(e.to_string().contains("not PID 1"), "{e}");
    // `+7` and `07` are not directories the kernel makes; only `1` is a process here.
    assert_eq!(
        answer(&[
            ("proc/1/comm", "systemd\n"),
            ("proc/+7/comm", "irqbalance\n"),
            ("proc/07/comm", "irqbalance\n"),
        ])
        .unwrap(),
        (false, None, false)
    );
    // The system's unit is stoppable with systemctl; a user's unit of that name is not the
    // system's (and without an executable named irqbalance it is not irqbalance at all).
    let root_status = status(0);
    let sys = answer(&[
        ("proc/1/comm", "systemd\n"),
        ("proc/5/comm", "irqbalance\n"),
        ("proc/5/status", &root_status),
        ("proc/5/cgroup", "0::/system.slice/irqbalance.service\n"),
    ]);
    assert_eq!(sys.unwrap(), (true, Some(5), true));
    let user = answer(&[
        ("proc/1/comm", "systemd\n"),
        ("proc/5/comm", "irqbalance\n"),
        ("proc/5/status", &root_status),
        (
            "proc/5/cgroup",
            "0::/user.slice/user-0.slice/user@0.service/app.slice/irqbalance.service\n",
        ),
    ]);
    // Root's process of that name with no exe link kept: irqbalance, but not systemd's.
    assert_eq!(user.unwrap(), (true, Some(5), false));
    // A 32 MiB command line is not read to find argv0: that process names nobody.
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "proc/1/comm", "init\n");
    fs::create_dir_all(t.path().join("proc/9")).unwrap();
    let f = fs::File::create(t.path().join("proc/9/cmdline")).unwrap();
    f.set_len(32 << 20).unwrap();
    let ib = find_irqbalance(&HostFs::new(t.path())).unwrap();
    assert!(!ib.running);
}
