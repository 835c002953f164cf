//! Hostile and careless input to the binary: each test is a finding of the hardening review,
//! and fails on the code before its fix. Bad input must give a clear error naming the flag or
//! file (exit 2), never a panic (exit 101), a hang, or a write outside `--root`.

mod common;

use common::{fixture, scratch};

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs netsteer with a deadline: a hang is a failure, not a stuck suite. The output is read
/// while it runs (a full pipe would otherwise stall the child).
fn run_for(args: &[&str], limit: Duration) -> Output {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run netsteer");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let so = drain(Box::new(child.stdout.take().unwrap()));
    let se = drain(Box::new(child.stderr.take().unwrap()));
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "netsteer {args:?} still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&se.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: so.join().unwrap(),
        stderr: se.join().unwrap(),
    }
}

fn run(args: &[&str]) -> Output {
    run_for(args, Duration::from_secs(60))
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn root_args<'a>(root: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--root", root];
    v.extend_from_slice(rest);
    v
}

/// Item 5: `ROOT/var/lib -> /elsewhere` must not carry the journal out of the tree.
#[test]
fn state_directory_behind_a_link_never_writes_outside_the_root() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tree.path().join("var")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), tree.path().join("var/lib")).unwrap();
    let o = run(&root_args(
        root,
        &["tune", "apply", "--profile", "throughput"],
    ));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("the state directory"), "{}", err(&o));
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "something was written outside the root"
    );
    // A link that stays inside the tree is followed inside it.
    std::fs::remove_file(tree.path().join("var/lib")).unwrap();
    std::fs::create_dir_all(tree.path().join("data")).unwrap();
    std::os::unix::fs::symlink("/data", tree.path().join("var/lib")).unwrap();
    let o = run(&root_args(
        root,
        &["tune", "apply", "--profile", "throughput"],
    ));
    assert!(o.status.code() != Some(101), "{}", err(&o));
    assert!(
        tree.path().join("data/netsteer/journal").is_dir(),
        "{}{}",
        out(&o),
        err(&o)
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// Item 6: a FIFO in a tree is refused with a clear message, never waited on.
#[test]
fn a_fifo_in_the_tree_is_an_error_not_a_hang() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    let fifo = tree.path().join("proc/interrupts");
    std::fs::remove_file(&fifo).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let snap = tempfile::tempdir().unwrap();
    let snap_dir = snap.path().join("s");
    for cmd in [
        vec!["show"],
        vec!["doctor"],
        vec!["tune", "plan", "--profile", "throughput"],
        vec!["snapshot", "--output", snap_dir.to_str().unwrap()],
    ] {
        let o = run_for(&root_args(root, &cmd), Duration::from_secs(30));
        assert_ne!(o.status.code(), Some(101), "{cmd:?}: {}", err(&o));
        let all = out(&o) + &err(&o);
        assert!(
            all.contains("/proc/interrupts: not a regular file (a FIFO)"),
            "{cmd:?}: {all}"
        );
    }
}

/// Item 7: a file far larger than any kernel file is refused quickly, with the reason.
#[test]
fn a_huge_proc_file_is_refused_not_read_whole() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(tree.path().join("proc/interrupts"))
        .unwrap();
    f.set_len(200 << 20).unwrap();
    let o = run_for(
        &root_args(root, &["show", "--json"]),
        Duration::from_secs(30),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("larger than 64 MiB"), "{}", out(&o));
}

/// Item 8: huge finite seconds and absurd counts are flag errors (exit 2), not panics.
#[test]
fn absurd_numbers_are_flag_errors_not_panics() {
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "bench",
                "udp-echo",
                "client",
                "127.0.0.1:9",
                "--duration",
                "1e20",
            ],
            "--duration",
        ),
        (
            vec![
                "bench",
                "udp-echo",
                "client",
                "127.0.0.1:9",
                "--timeout",
                "1e20",
            ],
            "--timeout",
        ),
        (
            vec![
                "bench",
                "udp-echo",
                "client",
                "127.0.0.1:9",
                "--warmup",
                "1e20",
            ],
            "--warmup",
        ),
        (
            vec![
                "bench",
                "udp-echo",
                "client",
                "127.0.0.1:9",
                "--interval",
                "1e20",
            ],
            "--interval",
        ),
        (
            vec!["bench", "udp-echo", "server", "--duration", "1e20"],
            "--duration",
        ),
        (
            vec!["bench", "udp-echo", "server", "--interval", "inf"],
            "--interval",
        ),
        (
            vec![
                "bench",
                "tcp-stream",
                "client",
                "127.0.0.1:9",
                "--duration",
                "1e20",
            ],
            "--duration",
        ),
        (
            vec!["bench", "tcp-stream", "server", "--duration", "1e20"],
            "--duration",
        ),
        (
            vec![
                "bench",
                "tcp-rr",
                "client",
                "127.0.0.1:9",
                "--warmup",
                "1e20",
            ],
            "--warmup",
        ),
        (
            vec![
                "bench",
                "tcp-rr",
                "client",
                "127.0.0.1:9",
                "--flows",
                "100000",
            ],
            "--flows",
        ),
        (
            vec!["bench", "netchannel", "--duration", "1e20"],
            "--duration",
        ),
        (
            vec!["bench", "netchannel", "--copy-workers", "99999999999"],
            "--copy-workers",
        ),
        (
            vec!["bench", "netchannel", "--bulk-apps", "65536"],
            "--bulk-apps",
        ),
        (vec!["bench", "netchannel", "--channels", "0"], "--channels"),
        (
            vec!["bench", "netchannel", "--experiment", "E9"],
            "--experiment",
        ),
        (vec!["doctor", "--sample", "1e20"], "--sample"),
        (vec!["doctor", "--sample", "-1"], "--sample"),
        (vec!["doctor", "--goal", "fastest"], "--goal"),
        (vec!["top", "--interval", "1e20"], "--interval"),
        (vec!["tune", "plan", "--profile", "nope"], "--profile"),
    ];
    for (args, flag) in cases {
        let o = run_for(&args, Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(err(&o).contains(flag), "{args:?}: {}", err(&o));
        assert!(!err(&o).contains("panicked"), "{args:?}: {}", err(&o));
    }
}

/// Item 9: a run that could not read its core inputs must not exit 0 ("healthy").
#[test]
fn doctor_without_its_core_inputs_does_not_exit_0() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    std::fs::remove_file(tree.path().join("proc/interrupts")).unwrap();
    let o = run(&root_args(root, &["doctor"]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(
        err(&o).contains("core inputs (/proc/interrupts)"),
        "{}",
        err(&o)
    );
    std::fs::remove_file(tree.path().join("proc/stat")).unwrap();
    let o = run(&root_args(root, &["doctor"]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    let e = err(&o);
    assert!(e.contains("/proc/stat"), "{e}");
    // The cause is said once, not twice.
    assert_eq!(e.matches("(os error 2)").count(), 1, "{e}");
}

/// Item 9: RPS/RFS/XPS items for a device whose queues cannot be listed are skipped with the
/// reason, not silently left out.
#[test]
fn plan_says_why_queue_items_are_skipped() {
    let tree = scratch("kvm-virtio-16cpu");
    let root = tree.path().to_str().unwrap();
    let net = tree.path().join("sys/class/net/eth0");
    let queues = std::fs::canonicalize(&net).unwrap().join("queues");
    std::fs::remove_dir_all(&queues).unwrap();
    std::fs::write(&queues, "not a directory\n").unwrap();
    let o = run(&root_args(
        root,
        &["tune", "plan", "--profile", "throughput", "--json"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let plan: netsteer_steering::tune::Plan = serde_json::from_slice(&o.stdout).unwrap();
    for id in ["rps/eth0", "xps/eth0"] {
        let item = plan.items.iter().find(|i| i.id == id).unwrap_or_else(|| {
            panic!(
                "no {id} item: {:?}",
                plan.items.iter().map(|i| &i.id).collect::<Vec<_>>()
            )
        });
        match &item.action {
            netsteer_steering::tune::Action::Skip(why) => {
                assert!(why.contains("queues"), "{why}")
            }
            other => panic!("{id}: {other:?}"),
        }
    }
}

/// Item 9: a CPU the process may not run on is an error naming it, not a silently unpinned
/// run (the check comes before any connection is made).
#[test]
fn pinning_to_a_cpu_that_does_not_exist_is_an_error() {
    for args in [
        vec!["bench", "tcp-rr", "client", "127.0.0.1:9", "--cpu", "999"],
        vec![
            "bench",
            "tcp-stream",
            "client",
            "127.0.0.1:9",
            "--cpu",
            "999",
        ],
        vec![
            "bench",
            "tcp-rr",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--cpu",
            "999",
        ],
        vec![
            "bench",
            "netchannel",
            "--sender-cpu",
            "999",
            "--experiment",
            "E4",
        ],
    ] {
        let o = run_for(&args, Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(
            err(&o).contains("CPU 999 is not one this process may run on"),
            "{args:?}: {}",
            err(&o)
        );
    }
}

/// Item 13: `top --root` says why its rates are zero.
#[test]
fn top_on_a_tree_says_rates_need_live_samples() {
    let o = run(&[
        "--root",
        fixture("dev-vm").to_str().unwrap(),
        "top",
        "--count",
        "1",
        "--interval",
        "0.05",
        "--plain",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).contains("rates need two live samples"),
        "{}",
        out(&o)
    );
}

/// Item 13: choice flags list their values, shells get completions and the man pages come from
/// the same definitions.
#[test]
fn help_lists_choices_and_completions_and_man_pages_are_generated() {
    let o = run(&["bench", "--help"]);
    assert!(out(&o).contains("tcp-stream"), "{}", out(&o));
    let o = run(&["bench", "udp-echo", "client", "--help"]);
    assert!(out(&o).contains("block"), "{}", out(&o));
    assert!(out(&o).contains("busy-poll"), "{}", out(&o));
    let o = run(&["doctor", "--help"]);
    assert!(
        out(&o).contains("latency") && out(&o).contains("throughput"),
        "{}",
        out(&o)
    );
    let o = run(&["completions", "bash"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        out(&o).contains("--max-pps-per-source"),
        "bash completion lacks a flag"
    );
    let o = run(&["completions", "fish"]);
    assert!(out(&o).contains("netsteer"), "{}", out(&o));
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["man", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let page = std::fs::read_to_string(dir.path().join("netsteer-doctor.1")).unwrap();
    assert!(
        page.contains("\\-\\-goal") || page.contains("--goal"),
        "{page}"
    );
    assert!(page.contains("balanced"), "{page}");
    assert!(dir.path().join("netsteer.1").is_file());
    assert!(
        dir.path()
            .join("netsteer-bench-udp-echo-server.1")
            .is_file()
    );
}

/// Issue 35 item 9: links planted inside the tree's state directory never carry a root write
/// out of the tree: (a) `applied.json` and temporaries under every name the old code would
/// have used next, linked to a file outside, are replaced or passed by, never written
/// through; (b) a `journal` link, absolute or climbing out, is refused before anything is
/// written.
#[test]
fn links_planted_in_the_state_directory_are_never_followed() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    let state = tree.path().join("var/lib/netsteer");
    std::fs::create_dir_all(&state).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let me = std::process::id();
    for pid in me..me + 2000 {
        std::os::unix::fs::symlink(&victim, state.join(format!(".applied.json.tmp-{pid}")))
            .unwrap();
    }
    std::os::unix::fs::symlink(&victim, state.join("applied.json")).unwrap();
    let o = run(&root_args(
        root,
        &["tune", "apply", "--profile", "throughput"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let applied = std::fs::symlink_metadata(state.join("applied.json")).unwrap();
    assert!(applied.is_file(), "applied.json is still a link");
    // (b) journal links: nothing is applied, nothing lands outside.
    for target in [
        outside.path().to_path_buf(),
        std::path::PathBuf::from(format!(
            "../../../../../../../../..{}",
            outside.path().display()
        )),
    ] {
        let _ = std::fs::remove_file(state.join("journal"));
        let _ = std::fs::remove_dir_all(state.join("journal"));
        std::os::unix::fs::symlink(&target, state.join("journal")).unwrap();
        let before = std::fs::read_dir(outside.path()).unwrap().count();
        let o = run(&root_args(
            root,
            &["tune", "apply", "--profile", "throughput"],
        ));
        assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
        assert!(err(&o).contains("journal"), "{}", err(&o));
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), before);
    }
}

/// Issue 35 item 11: state files are read as the tree's files are: a FIFO as `applied.json`
/// is an error, not a hang (`tune verify`, `agent --once`), and a journal that is a link to
/// /dev/zero is passed over, not read until memory runs out (`tune rollback`, `agent --once`).
#[test]
fn state_files_that_are_fifos_or_devices_are_errors_not_hangs() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    let state = tree.path().join("var/lib/netsteer");
    std::fs::create_dir_all(state.join("journal")).unwrap();
    let st = Command::new("mkfifo")
        .arg(state.join("applied.json"))
        .status()
        .unwrap();
    assert!(st.success());
    let o = run_for(
        &root_args(root, &["tune", "verify"]),
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("applied.json"), "{}", err(&o));
    let o = run_for(
        &root_args(root, &["agent", "--once"]),
        Duration::from_secs(20),
    );
    assert!(
        out(&o).contains("netsteer_scrape_collector_success{collector=\"tune\"} 0"),
        "{}{}",
        out(&o),
        err(&o)
    );
    std::fs::remove_file(state.join("applied.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", state.join("journal/000000000001-1.jsonl")).unwrap();
    let o = run_for(
        &root_args(root, &["tune", "rollback"]),
        Duration::from_secs(20),
    );
    assert!(
        matches!(o.status.code(), Some(0 | 2)),
        "{}{}",
        out(&o),
        err(&o)
    );
    assert!(!err(&o).contains("memory allocation"), "{}", err(&o));
    let o = run_for(
        &root_args(root, &["agent", "--once"]),
        Duration::from_secs(20),
    );
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}{}",
        out(&o),
        err(&o)
    );
}

/// Issue 35 item 13: an interface name holding ESC and a newline (a tree can hold any name; a
/// live host any but '/', ':' and white space) is printed escaped by `show` and `doctor`: no
/// escape sequence reaches the terminal and no line is forged. JSON already escaped it.
#[test]
fn control_characters_in_names_are_escaped_in_human_output() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    let evil = "eth\u{1b}[31m9\nCRITICAL forged: all is lost";
    let net = tree.path().join("sys/class/net");
    std::fs::rename(net.join("eth0"), net.join(evil)).unwrap();
    let dev = tree
        .path()
        .join("sys/devices/pci0000:00/0000:00:03.0/virtio2/net");
    std::fs::rename(dev.join("eth0"), dev.join(evil)).unwrap();
    std::os::unix::fs::symlink(
        format!("../../devices/pci0000:00/0000:00:03.0/virtio2/net/{evil}"),
        net.join(evil),
    )
    .unwrap_or(());
    let _ = std::fs::remove_file(net.join(evil));
    std::os::unix::fs::symlink(
        format!("../../devices/pci0000:00/0000:00:03.0/virtio2/net/{evil}"),
        net.join(evil),
    )
    .unwrap();
    for cmd in [&["show"][..], &["doctor", "--sample", "0"][..]] {
        let o = run(&root_args(root, cmd));
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{cmd:?}: {}",
            err(&o)
        );
        let text = out(&o);
        assert!(
            text.contains("eth\\x1b[31m9\\nCRITICAL forged"),
            "{cmd:?}: the name is not shown escaped:\n{text}"
        );
        assert!(
            !text.contains('\u{1b}'),
            "{cmd:?}: ESC reached the terminal"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("CRITICAL forged")),
            "{cmd:?}: a forged line:\n{text}"
        );
    }
}

/// Issue 35 item 14: errors are not swallowed. A corrupt `netsteer/meta.json` (which carries
/// the read-only modes that mark managed IRQs) is an error naming the file, not overrides
/// silently dropped; `agent --once --dev nonexist0` is a flag error (exit 2), not exit 0 with
/// no NIC metrics and the nic collector reported successful.
#[test]
fn a_corrupt_tree_meta_and_an_unknown_agent_device_are_errors() {
    let tree = scratch("dev-vm");
    let root = tree.path().to_str().unwrap();
    std::fs::write(tree.path().join("netsteer/meta.json"), "{\"modes\": [1, 2").unwrap();
    for cmd in [&["show"][..], &["doctor", "--sample", "0"][..]] {
        let o = run(&root_args(root, cmd));
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}{}", out(&o), err(&o));
        assert!(err(&o).contains("meta.json"), "{cmd:?}: {}", err(&o));
    }
    let fixture = common::fixture("dev-vm");
    let root = fixture.to_str().unwrap();
    let o = run(&root_args(root, &["agent", "--once", "--dev", "nonexist0"]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("--dev nonexist0"), "{}", err(&o));
    let o = run(&root_args(root, &["agent", "--once", "--dev", "eth0"]));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).contains("netsteer_scrape_collector_success{collector=\"nic\"} 1"),
        "{}",
        out(&o)
    );
}

/// Runs `sh -c script` as uid/gid 65534 (nobody), with no supplementary groups: another
/// user of the host, as the attacker of issue 77 was.
fn as_nobody(script: &str) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            script,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run setpriv (util-linux)")
}

/// The journal of a state directory's first apply.
fn first_journal(state: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(state.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("the apply's journal")
}

/// `tune apply --profile none --set KNOB` into the tree `root`.
fn apply_set(root: &str, knob: &str, state_dir: &str) -> Output {
    run(&root_args(
        root,
        &[
            "tune",
            "apply",
            "--profile",
            "none",
            "--set",
            knob,
            "--state-dir",
            state_dir,
        ],
    ))
}

/// `tune apply --plan FILE` into the tree `root`.
fn apply_plan(root: &str, plan: &std::path::Path, state_dir: &str) -> Output {
    let plan = plan.to_str().unwrap();
    run(&root_args(
        root,
        &["tune", "apply", "--plan", plan, "--state-dir", state_dir],
    ))
}

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Issue 77, "a journal rewrites any file": under `umask 000` the state directory was made
/// 0777, a journal planted there by uid 65534 named `/etc/victim`, and root's `tune
/// rollback` wrote that file. Now (a) the state directories are 0755 whatever the umask, so
/// another user cannot plant anything; (b) a journal whose entry is not a knob is refused
/// whole, by name, before any write; (c) a state directory another user owns or may write,
/// and a `--journal` file another user owns, are refused with the reason; (d) a plan file
/// naming a file that is not a knob is refused before anything is journaled.
#[test]
fn a_journal_that_names_anything_but_a_knob_is_refused_and_state_is_roots_own() {
    use std::os::unix::fs::PermissionsExt;
    let tree = scratch("cloudflare-24cpu");
    let root = tree.path().to_str().unwrap();
    let victim = tree.path().join("etc/victim");
    std::fs::create_dir_all(victim.parent().unwrap()).unwrap();
    std::fs::write(&victim, "precious\n").unwrap();
    let base = tempfile::tempdir().unwrap();
    // As /var/lib is: others may pass through it, not write it.
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = base.path().join("netsteer");
    let sd = state.to_str().unwrap();
    let apply = format!(
        "umask 000; exec {} --root {root} tune apply --profile none \
         --set /proc/sys/net/core/busy_poll=50 --state-dir {sd}",
        env!("CARGO_BIN_EXE_netsteer")
    );
    let o = Command::new("sh").args(["-c", &apply]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    // (a) 0755 for the directories (the agent reads them unprivileged), whatever the umask.
    assert_eq!(mode_of(&state), 0o755, "{}", state.display());
    assert_eq!(mode_of(&state.join("journal")), 0o755);
    let journal = first_journal(&state);
    assert_eq!(mode_of(&journal) & 0o022, 0, "{}", journal.display());
    let planted = state.join("journal/000000000099.jsonl");
    let o = as_nobody(&format!("echo x > {}", planted.display()));
    assert!(
        !o.status.success() && !planted.exists(),
        "uid 65534 planted a journal in root's state directory"
    );

    // (b) The journal as root's rollback would find it had someone rewritten its entry.
    let text = std::fs::read_to_string(&journal).unwrap();
    let knob = "\"/proc/sys/net/core/busy_poll\"";
    assert!(text.contains(knob), "{text}");
    std::fs::write(&journal, text.replace(knob, "\"/etc/victim\"")).unwrap();
    let o = run(&root_args(root, &["tune", "rollback", "--state-dir", sd]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(
        err(&o).contains("/etc/victim") && err(&o).contains("not a knob"),
        "{}",
        err(&o)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // Traversal out of the sysctl tree is no knob either.
    let sneaky = "\"/proc/sys/net/../../../etc/victim\"";
    std::fs::write(&journal, text.replace(knob, sneaky)).unwrap();
    let o = run(&root_args(root, &["tune", "rollback", "--state-dir", sd]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("not a knob"), "{}", err(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    std::fs::write(&journal, &text).unwrap();

    // (c) A state directory someone else owns or may write is refused, naming it and why.
    let o = Command::new("chown")
        .args(["65534:65534", sd])
        .output()
        .unwrap();
    assert!(o.status.success());
    let o = run(&root_args(root, &["tune", "rollback", "--state-dir", sd]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(
        err(&o).contains(sd) && err(&o).contains("owned by uid 65534"),
        "{}",
        err(&o)
    );
    assert!(
        Command::new("chown")
            .args(["0:0", sd])
            .status()
            .unwrap()
            .success()
    );
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(&root_args(root, &["tune", "rollback", "--state-dir", sd]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("mode 0777"), "{}", err(&o));
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A journal file of another user's, named with --journal, is not obeyed either.
    let theirs = base.path().join("theirs.jsonl");
    std::fs::copy(&journal, &theirs).unwrap();
    assert!(
        Command::new("chown")
            .args(["65534:65534", theirs.to_str().unwrap()])
            .status()
            .unwrap()
            .success()
    );
    let o = run(&root_args(
        root,
        &[
            "tune",
            "rollback",
            "--state-dir",
            sd,
            theirs.to_str().unwrap(),
        ],
    ));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("owned by uid 65534"), "{}", err(&o));
    assert_eq!(
        std::fs::read_to_string(tree.path().join("proc/sys/net/core/busy_poll"))
            .unwrap()
            .trim(),
        "50",
        "nothing was restored from a refused journal"
    );
    // The real journal, untouched, still rolls back.
    let o = run(&root_args(root, &["tune", "rollback", "--state-dir", sd]));
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert_ne!(
        std::fs::read_to_string(tree.path().join("proc/sys/net/core/busy_poll"))
            .unwrap()
            .trim(),
        "50"
    );

    // (d) A plan file whose item names a file that is not a knob: nothing is journaled.
    let o = run(&root_args(
        root,
        &[
            "tune",
            "plan",
            "--profile",
            "none",
            "--set",
            "/proc/sys/net/core/busy_poll=50",
            "--json",
        ],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let plan = base.path().join("plan.json");
    std::fs::write(&plan, out(&o).replace(knob, "\"/etc/victim\"")).unwrap();
    let journals = std::fs::read_dir(state.join("journal")).unwrap().count();
    let o = apply_plan(root, &plan, sd);
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("not a knob"), "{}", err(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(
        std::fs::read_dir(state.join("journal")).unwrap().count(),
        journals
    );
}

/// Issue 77's hardening, attacked again: what root reads and writes is judged by who could
/// have changed it on the way, not by a look at a name. (a) `tune rollback FILE` of a journal
/// in a directory uid 65534 owns is refused before anything is written (the name could be
/// swapped between a check and the open: a race wrote the knob 32 tries in); (b) a
/// `--state-dir` reached through a link uid 65534 owns is refused (its owner can repoint it
/// at a directory of theirs after the check); (c) a tree uid 65534 can write is not written
/// (a directory swapped for a link mid-apply sent root's write out of the tree).
#[test]
fn what_another_user_could_swap_on_the_way_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let chown = |who: &str, p: &std::path::Path, deep: bool| {
        let mut c = Command::new("chown");
        if deep {
            c.arg("-R");
        }
        assert!(c.args(["-h", who]).arg(p).status().unwrap().success());
    };
    let tree = scratch("cloudflare-24cpu");
    let root = tree.path().to_str().unwrap();
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = base.path().join("state");
    let sd = state.to_str().unwrap();
    let budget = tree.path().join("proc/sys/net/core/netdev_budget");
    let before = std::fs::read_to_string(&budget).unwrap();
    let set_budget = |v: &str| {
        let knob = format!("/proc/sys/net/core/netdev_budget={v}");
        apply_set(root, &knob, sd)
    };
    let o = set_budget("600");
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    let journal = std::fs::read_dir(state.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();

    // (a) The journal, root's own, copied into a directory of nobody's.
    let theirs = base.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let copy = theirs.join("j.jsonl");
    std::fs::copy(&journal, &copy).unwrap();
    chown("65534:65534", &theirs, false);
    let o = run(&root_args(
        root,
        &["tune", "rollback", copy.to_str().unwrap()],
    ));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("owned by uid 65534"), "{}", err(&o));
    assert_eq!(std::fs::read_to_string(&budget).unwrap().trim(), "600");

    // (b) The state directory through nobody's link (as one in /tmp would be).
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&state, &link).unwrap();
    chown("65534:65534", &link, false);
    let o = run(&root_args(
        root,
        &["tune", "rollback", "--state-dir", link.to_str().unwrap()],
    ));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("a link owned by uid 65534"), "{}", err(&o));
    assert_eq!(std::fs::read_to_string(&budget).unwrap().trim(), "600");
    // Root's own link to it is followed.
    chown("0:0", &link, false);
    let o = run(&root_args(
        root,
        &["tune", "rollback", "--state-dir", link.to_str().unwrap()],
    ));
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert_eq!(std::fs::read_to_string(&budget).unwrap(), before);

    // (c) A tree nobody may write: nothing is applied in it.
    chown("65534:65534", tree.path(), true);
    let o = set_budget("700");
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    let said = out(&o) + &err(&o);
    assert!(said.contains("owned by uid 65534"), "{said}");
    assert_eq!(std::fs::read_to_string(&budget).unwrap(), before);
}

/// In a PID namespace of its own (a container without the host's PIDs) /proc lists only its
/// processes: irqbalance on the host is invisible, so its state is unknown, not "not running",
/// and tune skips the pins as it does when irqbalance runs (attack review of issue 72).
#[test]
fn a_pid_namespace_of_its_own_cannot_say_irqbalance_is_not_running() {
    if !common::is_root() {
        common::cannot_run("needs root (unshare --pid --mount-proc)");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_netsteer");
    let inside = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", bin, "show"])
        .output()
        .unwrap();
    assert!(inside.status.success(), "{}", err(&inside));
    let text = out(&inside);
    assert!(
        text.contains(
            "irqbalance: unknown (this /proc is a PID namespace's own (PID 2 is not kthreadd)"
        ),
        "{text}"
    );
    let outside = run(&["show"]);
    assert!(
        !out(&outside).contains("PID namespace"),
        "{}",
        out(&outside)
    );
}

/// A plan file or a journal is someone's data, and its ids are the report's, the rollback's
/// and a saved plan's word for what is written: an id that names one knob beside a target
/// that is another is refused before anything is journaled or written, so are two items of
/// one id (the journal's key: the second was never rolled back), and the excuse "a managed
/// IRQ refuses to move" comes from the target, not from an id. Main wrote IRQ 47 for a plan
/// whose id said 48 and whose label named IRQ 49, and restored one of two items of one id.
#[test]
fn an_id_that_names_another_knob_than_its_target_is_refused() {
    let tree = scratch("kvm-virtio-16cpu");
    let root = tree.path().to_str().unwrap();
    let base = tempfile::tempdir().unwrap();
    let state = base.path().join("state");
    let sd = state.to_str().unwrap();
    let files = |p: &std::path::Path| {
        let mut all = Vec::new();
        let mut stack = vec![p.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else if e.file_type().unwrap().is_file() {
                    all.push((e.path(), std::fs::read(e.path()).unwrap()));
                }
            }
        }
        all.sort();
        all
    };
    let before = files(tree.path());
    let plan_of = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["tune", "plan"];
        all.extend_from_slice(args);
        all.push("--json");
        let o = run(&root_args(root, &all));
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        serde_json::from_str(&out(&o)).unwrap()
    };
    let refused = |plan: &serde_json::Value, name: &str, why: &str| {
        let file = base.path().join(name);
        std::fs::write(&file, plan.to_string()).unwrap();
        let o = apply_plan(root, &file, sd);
        assert_eq!(o.status.code(), Some(2), "{name}: {}{}", out(&o), err(&o));
        assert!(err(&o).contains(why), "{name}: {}", err(&o));
        assert!(
            !state.join("journal").exists()
                || std::fs::read_dir(state.join("journal")).unwrap().count() == 0,
            "{name}: journaled"
        );
        assert!(files(tree.path()) == before, "{name}: the tree changed");
    };

    // (a) irq/N (labelled with its own vector's name) beside another IRQ's file.
    let mut plan = plan_of(&["--profile", "latency", "--irqbalance", "stop"]);
    let items = plan["items"].as_array_mut().unwrap();
    let irqs: Vec<usize> = (0..items.len())
        .filter(|&i| items[i]["kind"] == "irq-affinity")
        .collect();
    assert!(irqs.len() >= 2, "{plan:#}");
    let (a, b) = (irqs[0], irqs[1]);
    let other_path = items[b]["target"]["path"].clone();
    items[a]["target"]["path"] = other_path;
    items[a]["action"] = "change".into();
    refused(&plan, "crossed.json", "names another knob");

    // (b) One id twice, on two sysctls.
    let mut plan = plan_of(&[
        "--profile",
        "none",
        "--set",
        "/proc/sys/net/core/busy_poll=50",
        "--set",
        "/proc/sys/net/core/busy_read=77",
    ]);
    let items = plan["items"].as_array_mut().unwrap();
    assert_eq!(items.len(), 2, "{items:#?}");
    // A label, not an id netsteer writes: only the twice decides.
    items[0]["id"] = "my-knob".into();
    items[1]["id"] = "my-knob".into();
    refused(&plan, "twice.json", "twice");

    // (c) A journal whose entry's id says irq/1 beside busy_poll's file.
    let o = apply_set(root, "/proc/sys/net/core/busy_poll=50", sd);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let journal = first_journal(&state);
    let text = std::fs::read_to_string(&journal).unwrap();
    let id = "\"set/proc/sys/net/core/busy_poll\"";
    assert!(text.contains(id), "{text}");
    std::fs::write(&journal, text.replace(id, "\"irq/1\"")).unwrap();
    let o = run(&root_args(root, &["tune", "rollback", "--state-dir", sd]));
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("names another knob"), "{}", err(&o));
    let busy_poll = tree.path().join("proc/sys/net/core/busy_poll");
    assert_eq!(std::fs::read_to_string(&busy_poll).unwrap().trim(), "50");
    std::fs::write(&journal, &text).unwrap();
    let o = run(&root_args(root, &["tune", "rollback", "--state-dir", sd]));
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert!(
        files(tree.path()) == before,
        "the rollback left the tree changed"
    );
}
