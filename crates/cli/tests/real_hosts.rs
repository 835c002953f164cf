//! The corpus of real hosts: every tree under `fixtures/real/` (public real data, each with
//! its source in `fixtures/real/SOURCES`) and the trees captured here from real kernels
//! (`fixtures/hosts/dev-vm`, the driver guests and the zoo). Adding a tree is dropping in a
//! directory.
//!
//! Every read-only command runs on every tree: no panic, JSON that parses. The facts netsteer
//! states (online CPUs, each NIC's queues, each vector's queue, CPU and total, RPS masks,
//! softnet rows) are checked against a reader written here, from the files themselves, never
//! against netsteer's own earlier output.

use netsteer_host::irqname::IrqRole;
use netsteer_host::view::HostView;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// The corpus: fixtures/real/* and the real captures among fixtures/hosts.
fn trees() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["real", "hosts"] {
        let Ok(entries) = std::fs::read_dir(fixtures().join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let captured = dir == "real"
                || name == "dev-vm"
                || name.starts_with("igb-")
                || name.starts_with("virtio-rss-")
                || name.starts_with("zoo-");
            if e.path().is_dir() && captured {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn run(tree: &Path, args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .arg("--root")
        .arg(tree)
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked"),
        "{} {}: {err}",
        tree.display(),
        args.join(" ")
    );
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "{} {}: exit {:?}: {err}",
        tree.display(),
        args.join(" "),
        out.status.code()
    );
    out
}

fn json(tree: &Path, args: &[&str]) -> serde_json::Value {
    let out = run(tree, args);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{} {}: not JSON ({e}): {}",
            tree.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

// The independent reader: only std, only the files.

fn read(tree: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(tree.join(rel)).ok()
}

/// "0-3,8" → [0,1,2,3,8].
fn list(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// A hex CPU mask ("00000000,0000000f") → its set bits.
fn mask(text: &str) -> Vec<u32> {
    let hex: String = text.trim().chars().filter(|c| *c != ',').collect();
    let mut out = Vec::new();
    for (i, c) in hex.chars().rev().enumerate() {
        let v = c.to_digit(16).unwrap();
        for b in 0..4 {
            if v & (1 << b) != 0 {
                out.push(i as u32 * 4 + b);
            }
        }
    }
    out
}

/// Each numbered IRQ's per-CPU counts.
type Rows = BTreeMap<u32, Vec<u64>>;

/// /proc/interrupts: the CPU of each column, and each numbered IRQ's per-CPU counts.
fn interrupts(tree: &Path) -> Option<(Vec<u32>, Rows)> {
    let text = read(tree, "proc/interrupts")?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let cpus: Vec<u32> = lines
        .next()?
        .split_whitespace()
        .map(|c| c.trim_start_matches("CPU").parse().unwrap())
        .collect();
    let mut rows = BTreeMap::new();
    for l in lines {
        let Some((label, rest)) = l.split_once(':') else {
            continue;
        };
        let Ok(irq) = label.trim().parse::<u32>() else {
            continue;
        };
        let counts: Vec<u64> = rest
            .split_whitespace()
            .take(cpus.len())
            .map_while(|f| f.parse().ok())
            .collect();
        rows.insert(irq, counts);
    }
    Some((cpus, rows))
}

/// Online CPUs as the files state them: cpu/online, else /proc/stat's cpuN lines, else the
/// columns of /proc/interrupts, else the cpuN directories (present CPUs) less those whose own
/// cpuN/online holds 0 (Documentation/ABI/testing/sysfs-devices-system-cpu).
fn online(tree: &Path) -> Vec<u32> {
    if let Some(t) = read(tree, "sys/devices/system/cpu/online") {
        return list(&t);
    }
    if let Some(t) = read(tree, "proc/stat") {
        let cpus: Vec<u32> = t
            .lines()
            .filter_map(|l| {
                l.split_whitespace()
                    .next()?
                    .strip_prefix("cpu")?
                    .parse()
                    .ok()
            })
            .collect();
        if !cpus.is_empty() {
            return cpus;
        }
    }
    if let Some((cpus, _)) = interrupts(tree) {
        return cpus;
    }
    let Ok(dirs) = std::fs::read_dir(tree.join("sys/devices/system/cpu")) else {
        return Vec::new();
    };
    let mut cpus: Vec<u32> = dirs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
        .filter(|c| {
            read(tree, &format!("sys/devices/system/cpu/cpu{c}/online"))
                .is_none_or(|v| v.trim() != "0")
        })
        .collect();
    cpus.sort_unstable();
    cpus
}

fn check_facts(tree: &Path, view: &HostView) {
    let name = tree.display();
    let want = online(tree);
    let got: Vec<u32> = view.topology.online.iter().collect();
    assert_eq!(got, want, "{name}: online CPUs");
    // nohz_full and isolated: the sysfs lists, else the boot command line's parameters.
    let boot = |key: &str| -> Option<String> {
        read(tree, "proc/cmdline")?
            .split_whitespace()
            .filter_map(|w| w.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
            .next_back()
    };
    let nohz = read(tree, "sys/devices/system/cpu/nohz_full").or_else(|| boot("nohz_full"));
    if let Some(text) = nohz {
        let got: Option<Vec<u32>> = view.topology.nohz_full.known().map(|c| c.iter().collect());
        let want = if text.trim() == "(null)" {
            Vec::new()
        } else {
            list(&text)
        };
        assert_eq!(got, Some(want), "{name}: nohz_full");
    }
    if let Some(text) = read(tree, "sys/devices/system/cpu/isolated") {
        let got: Option<Vec<u32>> = view.topology.isolated.known().map(|c| c.iter().collect());
        assert_eq!(got, Some(list(&text)), "{name}: isolated");
    }
    let irqs = interrupts(tree);
    for nic in &view.nics {
        // Queues: the rx-N/tx-N directories the tree lists.
        let qdir = tree.join(format!("sys/class/net/{}/queues", nic.name));
        if let Ok(entries) = std::fs::read_dir(&qdir) {
            let names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            let rx = names.iter().filter(|n| n.starts_with("rx-")).count();
            let tx = names.iter().filter(|n| n.starts_with("tx-")).count();
            assert_eq!(
                (nic.rx_queues.len(), nic.tx_queues.len()),
                (rx, tx),
                "{name}: {} queues",
                nic.name
            );
            assert!(nic.queues_unknown.is_none());
        } else {
            assert!(
                nic.rx_queues.is_empty() && nic.queues_unknown.is_some(),
                "{name}: {} has no queues/ and must say so",
                nic.name
            );
        }
        // RPS masks, as the files hold them.
        for q in &nic.rx_queues {
            if let Some(m) = read(
                tree,
                &format!("sys/class/net/{}/queues/rx-{}/rps_cpus", nic.name, q.index),
            ) {
                let got: Vec<u32> = q.rps_cpus.known().unwrap().iter().collect();
                assert_eq!(
                    got,
                    mask(&m),
                    "{name}: {} rx-{} rps_cpus",
                    nic.name,
                    q.index
                );
            }
        }
        // Each vector: its total and busiest CPU from /proc/interrupts, its queue one the
        // device lists (a named queue that does not exist is a misread name).
        for irq in &nic.irqs {
            let (cpus, rows) = irqs.as_ref().expect("vectors without /proc/interrupts");
            let counts = &rows[&irq.irq];
            assert_eq!(
                irq.count,
                counts.iter().sum::<u64>(),
                "{name}: IRQ {} total",
                irq.irq
            );
            let max = counts.iter().copied().max().unwrap_or(0);
            if max > 0 {
                let cpu = irq.busiest_cpu.expect("a busiest CPU");
                let col = cpus.iter().position(|c| *c == cpu).unwrap();
                assert_eq!(counts[col], max, "{name}: IRQ {} busiest CPU", irq.irq);
            }
            // virtio_net requests vectors for every queue pair the device offers
            // (virtnet_find_vqs, max_queue_pairs), not only the active ones: its input.N may
            // outnumber rx-N. Any other driver's vector names a queue the device lists.
            let virtio = nic.driver.known().is_some_and(|d| d == "virtio_net");
            if let Some(q) = irq.role.rx_queue()
                && !nic.rx_queues.is_empty()
                && !virtio
            {
                assert!(
                    nic.rx_queues.iter().any(|r| r.index == q),
                    "{name}: {} ({}) names rx-{q}, which {} does not have",
                    irq.name,
                    irq.role,
                    nic.name
                );
            }
            if irq.role == IrqRole::Other {
                eprintln!("{name}: {}: unrecognised vector {}", nic.name, irq.name);
            }
        }
        // A PCI function interrupts on its INTx line or on MSI/MSI-X vectors, never both
        // (enabling MSI disables INTx: Documentation/PCI/msi-howto.rst).
        let on_line = nic.irqs.iter().filter(|i| i.line.is_some()).count();
        assert!(
            on_line == 0 || on_line == nic.irqs.len(),
            "{name}: {} both on an INTx line and on vectors: {:?}",
            nic.name,
            nic.irqs
                .iter()
                .map(|i| (&i.name, i.line.is_some()))
                .collect::<Vec<_>>()
        );
    }
}

/// show's text marks a vector "[move pending" exactly when the tree's
/// `effective_affinity_list` names a CPU outside its `smp_affinity_list` (both read, neither
/// empty): a vector that has not fired since it was pinned, not one show misread.
fn check_pending_moves(tree: &Path, view: &HostView, text: &str) {
    let name = tree.display();
    for nic in &view.nics {
        for irq in &nic.irqs {
            let file = |f: &str| read(tree, &format!("proc/irq/{}/{f}", irq.irq)).map(|t| list(&t));
            let want = match (file("smp_affinity_list"), file("effective_affinity_list")) {
                (Some(r), Some(e)) if !r.is_empty() && !e.is_empty() => {
                    e.iter().any(|c| !r.contains(c))
                }
                _ => false,
            };
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim_start)
                .filter(|l| l.starts_with(&format!("irq {:<5} ", irq.irq)))
                .collect();
            assert!(
                !lines.is_empty(),
                "{name}: show has no line for IRQ {}",
                irq.irq
            );
            for l in lines {
                assert_eq!(
                    l.contains("[move pending"),
                    want,
                    "{name}: {}: IRQ {}: {l}",
                    nic.name,
                    irq.irq
                );
            }
        }
    }
}

/// `tune plan --profile throughput` over every NIC: no queue vector on a nohz_full or isolated
/// CPU, none on another node than its NIC's (`device/local_cpulist`, read here) while that
/// node has CPUs to take it, and no CPU with more than ⌈vectors ÷ CPUs⌉ + 1 of them.
fn check_placement(tree: &Path, view: &HostView, plan: &serde_json::Value) {
    let name = tree.display();
    let topo = &view.topology;
    let avoid: Vec<u32> = [&topo.isolated, &topo.nohz_full]
        .iter()
        .filter_map(|f| f.known())
        .flat_map(|c| c.iter())
        .collect();
    let usable: Vec<u32> = topo.online.iter().filter(|c| !avoid.contains(c)).collect();
    // Each queue vector's NIC and queue: a queue's vectors (rx-N with tx-N) move together.
    let mut queue_irq: BTreeMap<u32, (&str, u32)> = BTreeMap::new();
    let mut per_queue: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    for nic in &view.nics {
        for irq in &nic.irqs {
            if let Some(q) = irq.role.placement_queue() {
                queue_irq.insert(irq.irq, (&nic.name, q));
                *per_queue.entry((&nic.name, q)).or_default() += 1;
            }
        }
    }
    let mut per_cpu: BTreeMap<u32, usize> = BTreeMap::new();
    let mut placed: usize = 0;
    let mut off_node: Vec<(String, usize, Vec<u32>)> = Vec::new();
    for item in plan["items"].as_array().unwrap() {
        let Some(irq) = item["id"].as_str().and_then(|i| i.strip_prefix("irq/")) else {
            continue;
        };
        let Some(&(nic, q)) = irq.parse().ok().and_then(|i: u32| queue_irq.get(&i)) else {
            continue;
        };
        let cpus = list(item["desired"].as_str().unwrap());
        if cpus.len() != 1 {
            continue;
        }
        let cpu = cpus[0];
        placed += 1;
        *per_cpu.entry(cpu).or_default() += 1;
        assert!(
            !avoid.contains(&cpu),
            "{name}: IRQ {irq} placed on isolated/nohz_full CPU {cpu}"
        );
        if let Some(local) = read(tree, &format!("sys/class/net/{nic}/device/local_cpulist")) {
            let local: Vec<u32> = list(&local)
                .into_iter()
                .filter(|c| usable.contains(c))
                .collect();
            if local.len() < usable.len() && !local.is_empty() && !local.contains(&cpu) {
                off_node.push((irq.to_string(), per_queue[&(nic, q)], local));
            }
        }
    }
    if placed > 0 && !usable.is_empty() {
        let bound = placed.div_ceil(usable.len()) + 1;
        // Off its node only when no CPU of its node has room for the queue's vectors.
        for (irq, k, local) in &off_node {
            assert!(
                local
                    .iter()
                    .all(|c| per_cpu.get(c).copied().unwrap_or(0) + k > bound),
                "{name}: IRQ {irq} placed off its node while CPUs {local:?} had room: {per_cpu:?}"
            );
        }
        let max = per_cpu.values().copied().max().unwrap_or(0);
        assert!(
            max <= bound,
            "{name}: a CPU takes {max} queue vectors, bound {bound}: {per_cpu:?}"
        );
    }
}

/// Softnet rows: one per CPU that has one, as the agent exports them.
/// NUMA as the files give it, read here in each form the kernel uses (node/online, the
/// nodeN directories, cpu/cpuN/nodeM entries): the node count netsteer states, or, with none
/// of them, "NUMA unknown" in show, doctor (text and JSON) and every plan, never one node.
fn check_numa(tree: &Path, view: &HostView, label: &str) {
    let sys = tree.join("sys/devices/system");
    let mut ids: std::collections::BTreeSet<u32> = read(tree, "sys/devices/system/node/online")
        .map(|t| list(&t).into_iter().collect())
        .unwrap_or_default();
    let numbered = |dir: &Path| -> Vec<u32> {
        std::fs::read_dir(dir)
            .map(|r| {
                r.flatten()
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    if ids.is_empty() {
        ids.extend(numbered(&sys.join("node")));
    }
    if ids.is_empty()
        && let Ok(cpus) = std::fs::read_dir(sys.join("cpu"))
    {
        for c in cpus.flatten() {
            ids.extend(numbered(&c.path()));
        }
    }
    let doctor = json(tree, &["doctor", "--json", "--no-ethtool"]);
    let text = String::from_utf8_lossy(&run(tree, &["doctor", "--no-ethtool"]).stdout).into_owned();
    let show = String::from_utf8_lossy(&run(tree, &["show", "--no-ethtool"]).stdout).into_owned();
    if ids.is_empty() {
        assert!(
            view.topology.nodes.is_empty(),
            "{label}: nodes from no files"
        );
        assert!(view.topology.numa_unknown.is_some(), "{label}");
        assert!(
            doctor["host"]["numa_nodes"].is_null(),
            "{label}: {}",
            doctor["host"]
        );
        assert!(text.contains("NUMA unknown"), "{label}: {text}");
        assert!(show.contains("numa: unknown"), "{label}: {show}");
        let plan = run(
            tree,
            &["tune", "plan", "--profile", "throughput", "--no-ethtool"],
        );
        let plan = String::from_utf8_lossy(&plan.stdout);
        assert!(!plan.contains("one NUMA node"), "{label}: {plan}");
    } else {
        assert_eq!(
            view.topology.nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
            ids.iter().copied().collect::<Vec<_>>(),
            "{label}: NUMA nodes"
        );
        assert_eq!(
            doctor["host"]["numa_nodes"].as_u64(),
            Some(ids.len() as u64),
            "{label}"
        );
    }
}

fn check_softnet(tree: &Path) {
    let Some(text) = read(tree, "proc/net/softnet_stat") else {
        return;
    };
    if read(tree, "proc/stat").is_none() {
        return;
    }
    let rows = text.lines().filter(|l| !l.trim().is_empty()).count();
    let out = run(tree, &["agent", "--once"]);
    let exposition = String::from_utf8_lossy(&out.stdout);
    let series = exposition
        .lines()
        .filter(|l| l.starts_with("netsteer_softnet_processed_total{"))
        .count();
    assert_eq!(series, rows, "{}: softnet rows", tree.display());
}

#[test]
fn every_read_only_command_on_every_real_tree_agrees_with_the_files() {
    let trees = trees();
    let public = trees
        .iter()
        .filter(|t| t.starts_with(fixtures().join("real")))
        .count();
    assert!(
        public >= 25,
        "fixtures/real holds {public} trees of public data, not 25"
    );
    let sources = read(&fixtures(), "real/SOURCES").expect("fixtures/real/SOURCES");
    for tree in &trees {
        let label = tree.file_name().unwrap().to_string_lossy().into_owned();
        if tree.starts_with(fixtures().join("real")) {
            assert!(
                sources.contains(&format!("{label}:")),
                "{label} has no entry in SOURCES"
            );
        }
        let text = run(tree, &["show"]);
        assert!(!text.stdout.is_empty(), "{label}: show printed nothing");
        let view: HostView =
            serde_json::from_value(json(tree, &["show", "--json", "--no-ethtool"]))
                .unwrap_or_else(|e| panic!("{label}: show --json: {e}"));
        check_facts(tree, &view);
        check_numa(tree, &view, &label);
        check_pending_moves(tree, &view, &String::from_utf8_lossy(&text.stdout));
        let report = json(tree, &["doctor", "--json", "--no-ethtool"]);
        let blind = report["not_judged"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        let doctor = run(tree, &["doctor", "--no-ethtool"]);
        let said = String::from_utf8_lossy(&doctor.stdout);
        if blind || doctor.status.code() == Some(2) {
            assert!(
                !said.contains("nothing keeps packet processing here from scaling"),
                "{label}: a blind doctor said healthy: {said}"
            );
        }
        // Every report counts the rules judged and not judged, in text and JSON, and no tree
        // is called healthy with a rule not judged.
        let rules = &report["rules"];
        let (judged, not_judged, applied) = (
            rules["judged"].as_u64().unwrap(),
            rules["not_judged"].as_u64().unwrap(),
            rules["applied"].as_u64().unwrap(),
        );
        assert_eq!(judged + not_judged, applied, "{label}: {rules}");
        assert!(
            said.contains(&format!(
                "rules: {judged} judged, {not_judged} not judged (of {applied} that apply)"
            )),
            "{label}: {said}"
        );
        if not_judged > 0 {
            assert!(
                !said.contains("nothing keeps packet processing here from scaling"),
                "{label}: healthy with {not_judged} rule(s) not judged: {said}"
            );
            let listed = report["unjudged"].as_array().map_or(0, Vec::len);
            assert!(listed as u64 >= not_judged, "{label}: {report}");
        }
        eprintln!("{label}: rules {judged} judged, {not_judged} not judged of {applied}");
        for profile in ["latency", "throughput", "balanced"] {
            let out = run(
                tree,
                &[
                    "tune",
                    "plan",
                    "--profile",
                    profile,
                    "--json",
                    "--no-ethtool",
                ],
            );
            if out.status.success() {
                let plan: serde_json::Value = serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("{label}: tune plan {profile}: {e}"));
                if profile == "throughput" {
                    check_placement(tree, &view, &plan);
                }
                // One item per knob: an IRQ line shared by several NICs is planned once.
                let mut ids: Vec<&str> = plan["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|i| i["id"].as_str())
                    .collect();
                let n = ids.len();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(
                    ids.len(),
                    n,
                    "{label}: tune plan {profile} plans a knob twice"
                );
            } else {
                assert!(
                    !out.stderr.is_empty(),
                    "{label}: tune plan {profile} failed silently"
                );
            }
        }
        check_softnet(tree);
        // A snapshot of the tree, read back, states the same facts.
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let out = run(tree, &["snapshot", "--output", snap.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{label}: snapshot: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let again: HostView =
            serde_json::from_value(json(&snap, &["show", "--json", "--no-ethtool"])).unwrap();
        assert_eq!(
            again.topology.online, view.topology.online,
            "{label}: snapshot online CPUs"
        );
        assert_eq!(
            (
                &again.topology.nodes,
                &again.topology.numa_unknown.is_some()
            ),
            (&view.topology.nodes, &view.topology.numa_unknown.is_some()),
            "{label}: snapshot NUMA nodes"
        );
        let kinds = |v: &HostView| -> Vec<(String, String, usize, usize)> {
            v.nics
                .iter()
                .map(|n| {
                    (
                        n.name.clone(),
                        n.kind.clone(),
                        n.rx_queues.len(),
                        n.irqs.len(),
                    )
                })
                .collect()
        };
        assert_eq!(kinds(&again), kinds(&view), "{label}: snapshot round trip");
    }
}

/// What doctor says of two real OpenShift nodes: the worker booted with
/// `nohz_full=0-4,11-79` (no sysfs list in its tree: the command line says it) has its i40e
/// queue IRQs on those CPUs, and the control-plane node whose 112 queues per NIC fill every CPU
/// of their node is not "stacked".
#[test]
fn doctor_reads_real_openshift_nodes_right() {
    let findings = |tree: &str| -> Vec<(String, Vec<String>)> {
        let report = json(
            &fixtures().join("real").join(tree),
            &["doctor", "--json", "--no-ethtool"],
        );
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let devs = f["subjects"]["devices"]
                    .as_array()
                    .map(|d| {
                        d.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                (f["id"].as_str().unwrap().to_string(), devs)
            })
            .collect()
    };
    let worker = findings("nto-80cpu-i40e-igb");
    for dev in ["eno1", "eno2", "ens7f0", "ens7f1"] {
        assert!(
            worker
                .iter()
                .any(|(id, d)| id == "irqs-on-isolated-cpus" && d.iter().any(|x| x == dev)),
            "{dev}: {worker:?}"
        );
    }
    let master = findings("nto-112cpu-ice-i40e");
    assert!(
        master.iter().all(|(id, _)| id != "irqs-not-spread"),
        "{master:?}"
    );
}
