//! Root-only: the lab's client host with its end of a 4-queue veth link, RPS/RFS/XPS written
//! inside it, and `netsteer show` run inside it must report exactly those values. The lab's
//! namespaces are deleted by a drop guard, also when an assertion fails. Nothing in the root
//! namespace is touched. Without root: a failure under CI=true, a skip with a message otherwise.

use netsteer_host::CpuSet;
use netsteer_host::field::Field;
use netsteer_host::view::HostView;
mod common;

use common::{Pair, is_root};
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
    let pair = Pair::create(4);
    let ns = &pair.client;

    // Masks at this host's exact width.
    let possible = CpuSet::parse_list(
        &std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap(),
        None,
    )
    .unwrap();
    let nbits = netsteer_host::cpuset::nr_cpu_ids(&possible);
    let last = possible.max().unwrap();
    let last_only = CpuSet::from_iter([last]);
    let q = "/sys/class/net/v0a/queues";
    ns.sh(&format!(
        "echo {} > {q}/rx-1/rps_cpus && echo {} > {q}/rx-2/rps_cpus && echo 100 > {q}/rx-3/rps_flow_cnt \
         && echo {} > {q}/tx-0/xps_cpus && echo 4 > {q}/tx-2/xps_rxqs",
        last_only.to_mask(nbits).unwrap(),
        possible.to_mask(nbits).unwrap(),
        CpuSet::from_iter([0]).to_mask(nbits).unwrap(),
    ));

    let bin = env!("CARGO_BIN_EXE_netsteer");
    let out = ns.exec(&[bin, "show", "--json", "--dev", "v0a"]);
    common::succeeded(&out);
    let v: HostView = serde_json::from_slice(&out.stdout).unwrap();
    let nic = v.nic("v0a").expect("veth listed");
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

    // Page pools as the kernel's own dump lists them (the tests' reader, not netsteer's
    // netlink code): a veth registers none with its device, said as such, per queue too.
    let dir = tempfile::tempdir().unwrap();
    let reader = dir.path().join("page_pools.py");
    std::fs::write(&reader, common::pools::READER).unwrap();
    let answer = ns.exec(&["python3", reader.to_str().unwrap()]);
    common::succeeded(&answer);
    let answer: serde_json::Value = serde_json::from_slice(&answer.stdout).unwrap();
    let ifindex: u32 = ns.text("cat /sys/class/net/v0a/ifindex").parse().unwrap();
    assert_eq!(common::pools::agree(nic, ifindex, &answer), 0);
    let text = common::printed("show", ns.exec(&[bin, "show", "--dev", "v0a"]));
    assert!(
        text.contains("page pools: none registered with the device (veth"),
        "{text}"
    );

    // A snapshot taken in the namespace reproduces the same report offline.
    let snap = dir.path().join("snap");
    let out = ns.exec(&[bin, "snapshot", "-o", snap.to_str().unwrap()]);
    common::succeeded(&out);
    let live = ns.exec(&[bin, "show", "--json", "--dev", "v0a"]);
    let offline = Command::new(bin)
        .args([
            "--root",
            snap.to_str().unwrap(),
            "show",
            "--json",
            "--dev",
            "v0a",
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

/// `netsteer lab clean` removes the namespaces a dead lab's record names, and only those: a
/// namespace whose name merely shares the dead run's prefix is someone else's and stays (issue
/// 35 item 12; before, every `<prefix>-*` was removed and what ran in it killed).
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
    let leftover = format!("{prefix}-h");
    std::fs::write(&record, format!("4194305 1\nns {leftover}\n")).unwrap();
    let bystander = format!("nslalive{}", std::process::id());
    let lookalike = format!("{prefix}-other");
    for ns in [&leftover, &bystander, &lookalike] {
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
    let kept_lookalike = std::path::Path::new("/run/netns").join(&lookalike).exists();
    for ns in [&bystander, &lookalike] {
        let _ = Command::new("ip").args(["netns", "del", ns]).status();
    }
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
    assert!(
        kept_lookalike,
        "a namespace sharing the dead run's prefix, not named in its record, was removed"
    );
}

/// Runs `netsteer lab run ARGS...` (with --json among them), which must succeed, and reads its
/// JSON Lines back into the library's messages.
fn lab_run_json(args: &[&str]) -> Vec<netsteer_lab::run::Message> {
    let mut all = vec!["lab", "run"];
    all.extend_from_slice(args);
    let out = netsteer_ok(&all);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn lab_namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("-lab-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Every shipped scenario, in short form (`lab run all --repeat 2 --duration 1`), with only
/// what is robust on a busy 2-CPU machine asserted: the JSON Lines read back into the
/// library's types, every run of every variant is there, the per-CPU shares add up, the
/// pile-up of seeds 001 and 003 is on CPU 0 before RPS and leaves it after (a mechanism: RPS
/// to CPU 1 moves the server's receive work there), the echo tools report CDFs, the zero-copy
/// variant maps pages, every host is restored byte for byte, and each HTML report stands
/// alone. No throughput or latency is compared.
#[test]
fn lab_run_all_scenarios_briefly() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let have = |p: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let tools = [
        "iperf3",
        "nginx",
        "wrk",
        "memcached",
        "memcaslap",
        "sockperf",
    ];
    if !is_root() || !tools.iter().all(|p| have(p)) {
        common::cannot_run(
            "needs root, iperf3, nginx, wrk, memcached, memcaslap (libmemcached-tools) and sockperf",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report_arg = dir.path().display().to_string();
    let msgs = lab_run_json(&[
        "all",
        "--repeat",
        "2",
        "--duration",
        "1",
        "--json",
        "--report",
        &report_arg,
    ]);
    use netsteer_lab::run::{Message, RunRecord, Summary};
    let summaries: Vec<&Summary> = msgs
        .iter()
        .filter_map(|m| match m {
            Message::Summary(s) => Some(s),
            _ => None,
        })
        .collect();
    let names: Vec<&str> = summaries.iter().map(|s| s.scenario.as_str()).collect();
    assert_eq!(
        names,
        ["seed-000", "seed-001", "seed-002", "seed-003", "seed-004"]
    );
    let runs = |scn: &str| -> Vec<&RunRecord> {
        msgs.iter()
            .filter_map(|m| match m {
                Message::Run(r) if r.scenario == scn => Some(r),
                _ => None,
            })
            .collect()
    };
    for s in &summaries {
        assert!(s.restored, "{}: {:?}", s.scenario, s.restore_problems);
        let scn = netsteer_lab::scenario::load(&s.scenario).unwrap();
        let rs = runs(&s.scenario);
        assert_eq!(
            rs.len(),
            2 * scn.variants.len() * scn.workloads.len(),
            "{}: every workload in every variant, twice",
            s.scenario
        );
        for r in &rs {
            assert!(r.value > 0.0, "{r:?}");
            let total: f64 = r.per_cpu.iter().map(|p| p.share).sum();
            assert!((total - 1.0).abs() < 1e-9, "{r:?}");
        }
        assert_eq!(
            s.rows.len(),
            (scn.variants.len() - 1) * scn.workloads.len(),
            "{}",
            s.scenario
        );
        let html =
            std::fs::read_to_string(dir.path().join(format!("{}.html", s.scenario))).unwrap();
        assert!(html.contains("<svg") && html.contains(&s.scenario));
        let external: Vec<&str> = html
            .match_indices("http")
            .map(|(i, _)| &html[i..(i + 30).min(html.len())])
            .filter(|u| !u.starts_with("http://www.w3.org/2000/svg"))
            .collect();
        assert!(external.is_empty(), "{}: {external:?}", s.scenario);
    }
    // Seeds 001 and 003: CPU 0 processed the packets before, CPU 1 took the server's share
    // after. Medians over the two runs of each variant.
    for s in summaries
        .iter()
        .filter(|s| ["seed-001", "seed-003"].contains(&s.scenario.as_str()))
    {
        for row in &s.rows {
            let cpu0 = row.per_cpu.iter().find(|c| c.cpu == 0).unwrap();
            let (b, a) = (cpu0.before.unwrap(), cpu0.after.unwrap());
            assert!(
                b >= 0.9 && a <= 0.7,
                "{} {}: CPU 0 processed {:.0} % before and {:.0} % after",
                s.scenario,
                row.tool,
                b * 100.0,
                a * 100.0
            );
        }
    }
    // Seed 000: round-trip CDFs from both echo tools, the timestamp split from netsteer's.
    for r in runs("seed-000") {
        assert!(r.latency_points.len() >= 4, "{r:?}");
        assert!(
            r.latency_points
                .windows(2)
                .all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1]),
            "a CDF rises: {r:?}"
        );
        if r.tool == "netsteer-udp-echo" {
            assert!(r.extra.contains_key("rx_delivery_p50_ns"), "{r:?}");
        }
    }
    // Seed 002: the zero-copy variant maps most bytes; copying maps none.
    for r in runs("seed-002") {
        let mapped = r.extra.get("rx_mapped_pct").copied();
        match r.variant.as_str() {
            "zerocopy" => assert!(mapped.is_some_and(|m| m > 50.0), "{r:?}"),
            _ => assert!(mapped.is_none_or(|m| m == 0.0), "{r:?}"),
        }
        assert!(r.extra.contains_key("cpu_us_per_mib_server"), "{r:?}");
    }
    // Seed 004: both experiments ran beside TCP.
    for r in runs("seed-004") {
        assert!(r.extra.contains_key("e1_tcp_bits_per_second"), "{r:?}");
        assert!(
            r.extra.get("e4_ratio_per_core").is_some_and(|x| *x > 0.0),
            "{r:?}"
        );
    }
    assert!(lab_namespaces().is_empty(), "{:?}", lab_namespaces());
}

/// Starts `netsteer lab run seed-003` in the background (stderr piped, for its progress lines),
/// for the tests that stop it with a signal; None when it cannot run here.
fn spawn_seed_003(repeat: &str, duration: &str) -> Option<std::process::Child> {
    if !is_root() || Command::new("iperf3").arg("--version").output().is_err() {
        common::cannot_run("needs root, iproute2 and iperf3");
        return None;
    }
    let child = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["lab", "run", "seed-003", "--repeat", repeat])
        .args(["--duration", duration])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    Some(child)
}

/// `kill -9` in the middle of a scenario cannot clean up; `netsteer lab clean` then removes
/// every namespace, process and record of that run, and the tune change it made dies with its
/// namespace (the lab's changes are all inside it).
#[test]
fn lab_run_killed_with_sigkill_is_cleaned_by_lab_clean() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut child) = spawn_seed_003("5", "3") else {
        return;
    };
    let pid = child.id();
    // Wait until the "after" variant runs: the change is applied then.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let t = std::time::Instant::now();
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(n > 0, "lab run ended before its second variant");
        if line.contains(" rps ") || t.elapsed() > std::time::Duration::from_secs(60) {
            break;
        }
    }
    let record = std::path::Path::new(netsteer_lab::RECORD_DIR);
    let mine = || -> Vec<String> {
        std::fs::read_dir(record)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&format!("nsl{pid}x")) && !n.ends_with(".scratch"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let prefixes = mine();
    assert_eq!(prefixes.len(), 1, "{prefixes:?}");
    let ns_of_run = || -> Vec<String> {
        lab_namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&prefixes[0]))
            .collect()
    };
    assert_eq!(ns_of_run().len(), 2);
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    child.wait().unwrap();
    assert_eq!(ns_of_run().len(), 2, "SIGKILL cannot clean up");
    let pids: Vec<String> = ns_of_run()
        .iter()
        .flat_map(|ns| {
            let o = Command::new("ip")
                .args(["netns", "pids", ns])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    lab_clean();
    assert!(ns_of_run().is_empty(), "{:?}", ns_of_run());
    assert!(mine().is_empty(), "the record is gone");
    assert!(
        !netsteer_lab::scratch_path(&prefixes[0]).exists(),
        "the run's scratch directory (tune journals, configs) is gone"
    );
    // No process of the run is left (what still ran inside its namespaces was killed).
    let t = std::time::Instant::now();
    while pids.iter().any(|p| running(p)) && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let alive: Vec<&String> = pids.iter().filter(|p| running(p)).collect();
    assert!(alive.is_empty(), "{alive:?} of {pids:?}");
}

/// A `lab run` stopped with SIGTERM (or Ctrl-C) takes its lab down before it exits.
#[test]
fn lab_run_stopped_by_sigterm_leaves_nothing() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut child) = spawn_seed_003("3", "5") else {
        return;
    };
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

/// `netsteer lab with`: the command sees the lab in its environment and can use both hosts and
/// the link; its exit status is `lab with`'s; the lab is gone afterwards.
#[test]
fn lab_with_lends_the_lab_to_a_command_and_takes_it_down() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || Command::new("socat").arg("-V").output().is_err() {
        common::cannot_run("needs root, iproute2 and socat");
        return;
    }
    let script = r#"set -e
echo "prefix $NETSTEER_LAB_PREFIX"
ip netns exec "$NETSTEER_LAB_CLIENT_NS" ls "/sys/class/net/$NETSTEER_LAB_CLIENT_DEV/queues"
ip netns exec "$NETSTEER_LAB_SERVER_NS" socat -T 10 -u "UDP-RECVFROM:9999,bind=$NETSTEER_LAB_SERVER_ADDR" STDOUT &
sleep 0.3
echo across | ip netns exec "$NETSTEER_LAB_CLIENT_NS" socat -u STDIN "UDP-SENDTO:$NETSTEER_LAB_SERVER_ADDR:9999"
wait
exit 7"#;
    let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["lab", "with", "--queues", "2", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("rx-1") && !text.contains("rx-2"), "{text}");
    assert!(text.contains("across"), "{text}");
    let prefix = text
        .lines()
        .find_map(|l| l.strip_prefix("prefix "))
        .unwrap()
        .to_string();
    assert!(!prefix.is_empty());
    assert!(
        !namespaces_named(&prefix),
        "the lab outlived its command: {prefix}"
    );

    // A bad flag changes nothing and says which.
    let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["lab", "with", "--client-rps", "4095", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CPU 4095"));
}

/// SIGTERM to `netsteer lab with` stops the command first (its trap runs while the lab
/// still exists), then takes the lab down, and exits 143 as a shell reports a kill.
#[test]
fn lab_with_stops_its_command_and_cleans_up_on_sigterm() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || Command::new("ip").arg("-V").output().is_err() {
        common::cannot_run("needs root and iproute2");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("trap");
    let script = format!(
        r#"trap 'test -e "/run/netns/$NETSTEER_LAB_SERVER_NS" && echo lab-still-there > {}; exit 0' TERM
echo "prefix $NETSTEER_LAB_PREFIX"
while :; do sleep 0.1; done"#,
        mark.display()
    );
    let (mut child, line) = lab_with_script(&script);
    let prefix = line.trim().strip_prefix("prefix ").unwrap().to_string();
    assert!(namespaces_named(&prefix));
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(
        std::fs::read_to_string(&mark).unwrap_or_default().trim(),
        "lab-still-there"
    );
    assert!(!namespaces_named(&prefix), "{prefix} left behind");
}

/// Runs `netsteer ARGS...`, which must succeed.
fn netsteer_ok(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(args)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `netsteer lab clean`, which must succeed.
fn lab_clean() {
    netsteer_ok(&["lab", "clean"]);
}

/// True while `pid` runs. SIGKILL is delivered asynchronously, and an orphan stays a zombie
/// until its new parent reaps it: a process counts as gone once it is dead (state Z) or absent.
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Starts `netsteer lab with -- sh -c SCRIPT` and returns it with the first line the script
/// prints.
fn lab_with_script(script: &str) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["lab", "with", "--", "sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    (child, line)
}

fn namespaces_named(prefix: &str) -> bool {
    std::fs::read_dir("/run/netns").is_ok_and(|d| {
        d.filter_map(|e| e.ok()).any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{prefix}-"))
        })
    })
}

/// Issue 35 item 12: the command of a `lab with` that is killed with SIGKILL (which cannot
/// clean up) is stopped by `netsteer lab clean`, with the lab's namespaces. (Before, it went
/// on running.)
#[test]
fn lab_clean_stops_the_command_of_a_killed_lab_with() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() || Command::new("ip").arg("-V").output().is_err() {
        common::cannot_run("needs root and iproute2");
        return;
    }
    let script = r#"echo "pid $$ prefix $NETSTEER_LAB_PREFIX"; while :; do sleep 0.1; done"#;
    let (mut child, line) = lab_with_script(script);
    let mut f = line.split_whitespace();
    let (Some("pid"), Some(pid), Some("prefix"), Some(prefix)) =
        (f.next(), f.next(), f.next(), f.next())
    else {
        panic!("{line:?}")
    };
    let (pid, prefix) = (pid.to_string(), prefix.to_string());
    assert!(
        Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    child.wait().unwrap();
    assert!(
        running(&pid),
        "the command died with the lab (nothing to prove)"
    );
    lab_clean();
    let t = std::time::Instant::now();
    while running(&pid) && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let still = running(&pid);
    if still {
        let _ = Command::new("kill").args(["-9", &pid]).status();
    }
    assert!(!still, "lab clean left the killed lab's command running");
    assert!(!namespaces_named(&prefix), "{prefix} left behind");
}
