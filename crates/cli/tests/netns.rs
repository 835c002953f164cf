//! Root-only: a uniquely named network namespace with a 4-queue veth pair, RPS/RFS/XPS written
//! inside it, and `netsteer show` run inside it must report exactly those values. The namespace
//! (and with it the veth pair) is deleted by a drop guard, also when an assertion fails. Nothing
//! in the root namespace is touched. Skipped, with a message, when not root.

use netsteer_host::CpuSet;
use netsteer_host::field::Field;
use netsteer_host::view::HostView;
mod common;

use common::{Netns, is_root};
use std::process::Command;

/// Every new lab cleans dead labs' leftovers: the tests of this file run one at a time so the
/// other one's lab cannot clean what `lab clean` is to be tested on.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn show_reports_rps_rfs_xps_set_inside_a_namespace() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || Command::new("ip").arg("-V").output().is_err() {
        common::cannot_run("needs root and iproute2");
        return;
    }
    let ns = Netns::create();
    ns.sh("ip link add nsva numrxqueues 4 numtxqueues 4 type veth peer name nsvb numrxqueues 4 numtxqueues 4 && ip link set nsva up && ip link set nsvb up");

    // Masks at this host's exact width.
    let possible = CpuSet::parse_list(
        &std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap(),
        None,
    )
    .unwrap();
    let nbits = netsteer_host::cpuset::nr_cpu_ids(&possible);
    let last = possible.max().unwrap();
    let last_only = CpuSet::from_iter([last]);
    let q = "/sys/class/net/nsva/queues";
    ns.sh(&format!(
        "echo {} > {q}/rx-1/rps_cpus && echo {} > {q}/rx-2/rps_cpus && echo 100 > {q}/rx-3/rps_flow_cnt \
         && echo {} > {q}/tx-0/xps_cpus && echo 4 > {q}/tx-2/xps_rxqs",
        last_only.to_mask(nbits).unwrap(),
        possible.to_mask(nbits).unwrap(),
        CpuSet::from_iter([0]).to_mask(nbits).unwrap(),
    ));

    let bin = env!("CARGO_BIN_EXE_netsteer");
    let out = ns.exec(&[bin, "show", "--json", "--dev", "nsva"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: HostView = serde_json::from_slice(&out.stdout).unwrap();
    let nic = v.nic("nsva").expect("veth listed");
    assert_eq!(nic.kind, "veth");
    assert!(nic.irqs.is_empty(), "virtual devices have no IRQs");
    assert_eq!(nic.rx_queues.len(), 4);
    assert_eq!(nic.tx_queues.len(), 4);
    assert_eq!(nic.rx_queues[0].rps_cpus, Field::Known(CpuSet::new()));
    assert_eq!(nic.rx_queues[1].rps_cpus, Field::Known(last_only));
    assert_eq!(nic.rx_queues[2].rps_cpus, Field::Known(possible.clone()));
    // The kernel rounds rps_flow_cnt up to a power of two.
    assert_eq!(nic.rx_queues[3].rps_flow_cnt, Field::Known(128));
    assert_eq!(
        nic.tx_queues[0].xps_cpus,
        Field::Known(CpuSet::from_iter([0]))
    );
    assert_eq!(nic.tx_queues[1].xps_cpus, Field::Known(CpuSet::new()));
    assert_eq!(
        nic.tx_queues[2].xps_rxqs,
        Field::Known(CpuSet::from_iter([2]))
    );
    // ethtool netlink inside the namespace: veth reports its 4/4 channels.
    let settings = nic.settings.as_ref().expect("settings read");
    let ch = settings
        .channels
        .known()
        .expect("veth answers channels-get");
    assert_eq!((ch.rx, ch.tx), (Some(4), Some(4)));

    // A snapshot taken in the namespace reproduces the same report offline.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let out = ns.exec(&[bin, "snapshot", "-o", snap.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live = ns.exec(&[bin, "show", "--json", "--dev", "nsva"]);
    let offline = Command::new(bin)
        .args([
            "--root",
            snap.to_str().unwrap(),
            "show",
            "--json",
            "--dev",
            "nsva",
        ])
        .output()
        .unwrap();
    assert!(
        offline.status.success(),
        "{}",
        String::from_utf8_lossy(&offline.stderr)
    );
    let a: HostView = serde_json::from_slice(&live.stdout).unwrap();
    let b: HostView = serde_json::from_slice(&offline.stdout).unwrap();
    assert_eq!(a.nics, b.nics);
    assert_eq!(a.sysctls, b.sysctls);
}

/// `netsteer lab clean` removes the namespaces of a lab whose process is gone, and only those.
#[test]
fn lab_clean_removes_a_dead_runs_leftovers_only() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || Command::new("ip").arg("-V").output().is_err() {
        common::cannot_run("needs root and iproute2");
        return;
    }
    // A record whose owner cannot exist (pid above the kernel's maximum), and its namespace.
    let prefix = format!("nsldead{}x0-t", std::process::id());
    std::fs::create_dir_all(netsteer_lab::RECORD_DIR).unwrap();
    let record = std::path::Path::new(netsteer_lab::RECORD_DIR).join(&prefix);
    std::fs::write(&record, "4194305 1\n").unwrap();
    let leftover = format!("{prefix}-h");
    let bystander = format!("nslalive{}", std::process::id());
    for ns in [&leftover, &bystander] {
        assert!(
            Command::new("ip")
                .args(["netns", "add", ns])
                .status()
                .unwrap()
                .success()
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["lab", "clean"])
        .output()
        .unwrap();
    let kept = std::path::Path::new("/run/netns").join(&bystander).exists();
    let _ = Command::new("ip")
        .args(["netns", "del", &bystander])
        .status();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("removed namespace {leftover}")),
        "{text}"
    );
    assert!(!std::path::Path::new("/run/netns").join(&leftover).exists());
    assert!(!record.exists());
    assert!(kept, "a namespace no record names was removed");
}

/// Runs `netsteer lab run ARGS...` (with --json among them), which must succeed, and reads its
/// JSON Lines back into the library's messages.
fn lab_run_json(args: &[&str]) -> Vec<netsteer_lab::run::Message> {
    let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["lab", "run"])
        .args(args)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `netsteer lab run seed-003` end to end, briefly: both workloads (netsteer's tcp-stream and
/// iperf3 -l 16) run before and after `tune apply --profile throughput` in the server host,
/// the JSON Lines read back into the library's types, the host is restored, and the HTML
/// report stands alone.
#[test]
fn lab_run_seed_003_reads_back_and_restores_the_host() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || Command::new("iperf3").arg("--version").output().is_err() {
        common::cannot_run("needs root, iproute2 and iperf3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("seed-003.html");
    let report_arg = report.display().to_string();
    let msgs = lab_run_json(&[
        "seed-003",
        "--repeat",
        "1",
        "--duration",
        "0.5",
        "--json",
        "--report",
        &report_arg,
    ]);
    use netsteer_lab::run::Message;
    let runs: Vec<_> = msgs
        .iter()
        .filter_map(|m| match m {
            Message::Run(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(runs.len(), 4, "2 tools x before/after");
    for r in &runs {
        assert!(r.value > 0.0 && r.unit == "bit/s", "{r:?}");
        let total: f64 = r.per_cpu.iter().map(|p| p.share).sum();
        assert!((total - 1.0).abs() < 1e-9, "{r:?}");
    }
    let Some(Message::Summary(s)) = msgs.last() else {
        panic!("no summary last")
    };
    assert!(s.restored, "{:?}", s.restore_problems);
    let tools: Vec<&str> = s.rows.iter().map(|r| r.tool.as_str()).collect();
    assert_eq!(tools, ["netsteer-tcp-stream", "iperf3"]);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("<svg") && html.contains("seed-003"));
    let external: Vec<&str> = html
        .match_indices("http")
        .map(|(i, _)| &html[i..(i + 30).min(html.len())])
        .filter(|u| !u.starts_with("http://www.w3.org/2000/svg"))
        .collect();
    assert!(external.is_empty(), "{external:?}");
    // Nothing of the lab is left.
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("-lab-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// `netsteer lab run seed-001`: the real applications (nginx driven by wrk, memcached driven by
/// memcaslap) run in the lab hosts before and after the change, report requests per second and
/// leave the host as it was.
#[test]
fn lab_run_seed_001_drives_real_applications() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let have = |p: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !is_root()
        || !["nginx", "wrk", "memcached", "memcaslap"]
            .iter()
            .all(|p| have(p))
    {
        common::cannot_run("needs root, nginx, wrk, memcached and memcaslap (libmemcached-tools)");
        return;
    }
    let msgs = lab_run_json(&["seed-001", "--repeat", "1", "--duration", "0.5", "--json"]);
    use netsteer_lab::run::Message;
    let mut tools = std::collections::BTreeSet::new();
    for m in &msgs {
        if let Message::Run(r) = m {
            assert!(r.value > 0.0 && r.unit == "requests/s", "{r:?}");
            tools.insert(r.tool.clone());
            if r.tool == "nginx-wrk" {
                assert!(r.p99_us.is_some_and(|p| p > 0.0), "{r:?}");
            }
        }
    }
    assert_eq!(
        tools.into_iter().collect::<Vec<_>>(),
        ["memcached-memcaslap", "nginx-wrk"]
    );
    let Some(Message::Summary(s)) = msgs.last() else {
        panic!("no summary last")
    };
    assert!(s.restored, "{:?}", s.restore_problems);
    assert_eq!(s.rows.len(), 2);
}

/// A `lab run` stopped with SIGTERM (or Ctrl-C) takes its lab down before it exits.
#[test]
fn lab_run_stopped_by_sigterm_leaves_nothing() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || Command::new("iperf3").arg("--version").output().is_err() {
        common::cannot_run("needs root, iproute2 and iperf3");
        return;
    }
    let lab_namespaces = || -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains("-lab-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["lab", "run", "seed-003", "--repeat", "3", "--duration", "5"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while lab_namespaces().len() < 2 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(30),
            "no lab appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("signal 15"), "{err}");
    assert!(lab_namespaces().is_empty(), "{:?}", lab_namespaces());
}
