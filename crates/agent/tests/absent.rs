//! Issue 72, class 5: absent is not zero. Scrapes of real hosts' trees (fixtures/real) and of
//! copies with one input removed: a series the tree cannot give is missing, never a 0, and each
//! collector needs only its own files (interrupts from /proc/interrupts alone, CPU time from
//! /proc/stat, softnet from /proc/net/softnet_stat, ...).

use netsteer_agent::{Agent, Family, Rates};
use netsteer_host::HostFs;
use netsteer_steering::doctor::Goal;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

fn real(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/real")
        .join(name)
}

fn agent(root: &Path) -> Agent {
    agent_with_state(root, None)
}

mod common;

fn agent_with_state(root: &Path, state_dir: Option<PathBuf>) -> Agent {
    common::tree_agent(root, Rates::SinceBoot, state_dir)
}

fn scrape(root: &Path) -> Vec<Family> {
    agent(root).scrape(Instant::now(), SystemTime::UNIX_EPOCH)
}

fn samples<'a>(fams: &'a [Family], name: &str) -> &'a [netsteer_agent::Sample] {
    &fams
        .iter()
        .find(|f| f.exposed_name() == name)
        .unwrap_or_else(|| panic!("no family {name}"))
        .samples
}

fn collector(fams: &[Family], name: &str) -> Option<f64> {
    samples(fams, "netsteer_scrape_collector_success")
        .iter()
        .find(|s| s.label("collector") == Some(name))
        .map(|s| s.value)
}

/// A series: its family's exposed name and its labels in order.
type Key = (String, Vec<(&'static str, String)>);

/// Every series of the families that read the host (not the collectors' statuses, the build,
/// or the doctor's judgements, which change with what it could see and say so themselves).
fn readings(fams: &[Family]) -> BTreeMap<Key, f64> {
    fams.iter()
        .filter(|f| {
            !f.name.starts_with("netsteer_scrape_collector")
                && !f.name.starts_with("netsteer_doctor")
                && f.name != "netsteer_build"
        })
        .flat_map(|f| {
            f.samples
                .iter()
                .map(move |s| ((f.exposed_name(), s.labels.clone()), s.value))
        })
        .collect()
}

/// Copies a tree (`cp -a`: links and modes as they are) so a test can take a file out of it.
fn copy_tree(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {}", from.display());
    dir
}

/// The NICs a scrape exports (`netsteer_nic_info`).
fn exported_nics(fams: &[Family]) -> Vec<String> {
    samples(fams, "netsteer_nic_info")
        .iter()
        .map(|s| s.label("device").unwrap().to_string())
        .collect()
}

/// A NIC whose `queues/` the tree does not hold has no queue count: `show` says unknown, and a
/// 0 would read as "no queues" on a dashboard. A NIC whose `queues/` is there keeps its counts,
/// and an empty `queues/` is a count of 0 (the file system says zero).
#[test]
fn a_nic_whose_queues_are_unknown_has_no_queue_count() {
    for tree in [
        "ghw-ryzen-1600-4nic",
        "nto-32cpu-i40e-ixgbe",
        "sysstat-root1",
    ] {
        let root = real(tree);
        let view = netsteer_host::read_host(&HostFs::open(&root).unwrap(), None);
        let fams = scrape(&root);
        let nics = exported_nics(&fams);
        let unknown: Vec<&str> = view
            .nics
            .iter()
            .filter(|n| n.queues_unknown.is_some() && nics.contains(&n.name))
            .map(|n| n.name.as_str())
            .collect();
        assert!(!unknown.is_empty(), "{tree}: no NIC with unknown queues");
        // Said, not silent: the queues collector fails, naming a device.
        assert_eq!(collector(&fams, "queues"), Some(0.0), "{tree}");
        let why = samples(&fams, "netsteer_scrape_collector_error_info")
            .iter()
            .find(|s| s.label("collector") == Some("queues"))
            .and_then(|s| s.label("reason"))
            .unwrap_or_default()
            .to_string();
        assert!(unknown.iter().any(|d| why.contains(d)), "{tree}: {why}");
        for s in samples(&fams, "netsteer_nic_queues") {
            let dev = s.label("device").unwrap();
            assert!(
                !unknown.contains(&dev),
                "{tree}: {dev} has queues unknown, exported as {:?} = {}",
                s.labels,
                s.value
            );
        }
    }
    // Queues there: the directory's counts.
    let root = real("pcp-40cpu-mlx4");
    let fams = scrape(&root);
    let count = |dev: &str, dir: &str| {
        samples(&fams, "netsteer_nic_queues")
            .iter()
            .find(|s| s.label("device") == Some(dev) && s.label("direction") == Some(dir))
            .map(|s| s.value)
    };
    assert_eq!(count("eno1", "rx"), Some(40.0));
    assert_eq!(count("eno1", "tx"), Some(40.0));
    assert_eq!(collector(&fams, "queues"), Some(1.0));
    // An empty queues/ says zero.
    let tmp = copy_tree(&root);
    let queues = tmp.path().join("sys/class/net/eno1/queues");
    let queues = std::fs::canonicalize(queues).unwrap();
    std::fs::remove_dir_all(&queues).unwrap();
    std::fs::create_dir(&queues).unwrap();
    let fams = scrape(tmp.path());
    let count = |dir: &str| {
        samples(&fams, "netsteer_nic_queues")
            .iter()
            .find(|s| s.label("device") == Some("eno1") && s.label("direction") == Some(dir))
            .map(|s| s.value)
    };
    assert_eq!((count("rx"), count("tx")), (Some(0.0), Some(0.0)));
}

/// A tree with /proc/interrupts but no /proc/stat (an OpenShift must-gather keeps no
/// /proc/stat): the queue IRQs' interrupts are exported, and only the stat collector fails.
#[test]
fn interrupt_series_need_only_proc_interrupts() {
    for tree in ["nto-32cpu-i40e-ixgbe", "nto-80cpu-i40e-igb"] {
        let root = real(tree);
        assert!(root.join("proc/interrupts").exists() && !root.join("proc/stat").exists());
        let view = netsteer_host::read_host(&HostFs::open(&root).unwrap(), None);
        let fams = scrape(&root);
        let nics = exported_nics(&fams);
        let busy: usize = view
            .nics
            .iter()
            .filter(|n| nics.contains(&n.name))
            .flat_map(|n| n.queue_irqs())
            .filter(|i| i.count > 0)
            .count();
        assert!(busy > 0, "{tree}: no queue IRQ took interrupts");
        let q = samples(&fams, "netsteer_queue_interrupts_total");
        assert!(
            !q.is_empty(),
            "{tree}: {busy} queue IRQs took interrupts, no netsteer_queue_interrupts_total series"
        );
        let total: f64 = q.iter().map(|s| s.value).sum();
        let want: u64 = view
            .nics
            .iter()
            .filter(|n| nics.contains(&n.name))
            .flat_map(|n| n.queue_irqs())
            .map(|i| i.count)
            .sum();
        assert_eq!(total, want as f64, "{tree}");
        assert_eq!(collector(&fams, "interrupts"), Some(1.0), "{tree}");
        assert_eq!(collector(&fams, "softirqs"), Some(1.0), "{tree}");
        assert_eq!(collector(&fams, "stat"), Some(0.0), "{tree}");
        assert!(samples(&fams, "netsteer_cpu_seconds_total").is_empty());
        // /proc/softirqs is there too: its series do not wait for /proc/stat either.
        assert!(
            !samples(&fams, "netsteer_softirqs_total").is_empty(),
            "{tree}"
        );
    }
}

/// One input of a tree, and the series that need it (every other series must stay as it was).
struct Input {
    /// Path inside the tree (a file or a directory).
    path: &'static str,
    /// Whether a series of the full tree needs this input.
    needs: fn(&Key) -> bool,
    /// The collector that reads it (None: read for the doctor only, or a sysctl).
    collector: Option<&'static str>,
}

fn family_is(names: &'static [&'static str]) -> impl Fn(&Key) -> bool {
    move |k: &Key| names.contains(&k.0.as_str())
}

fn label<'a>(k: &'a Key, key: &str) -> Option<&'a str> {
    k.1.iter().find(|(n, _)| *n == key).map(|(_, v)| v.as_str())
}

const SOFTNET: &[&str] = &[
    "netsteer_softnet_processed_total",
    "netsteer_softnet_dropped_total",
    "netsteer_softnet_times_squeezed_total",
    "netsteer_softnet_received_rps_total",
    "netsteer_softnet_flow_limit_count_total",
    "netsteer_softnet_backlog_packets",
];

fn inputs() -> Vec<Input> {
    vec![
        Input {
            path: "proc/stat",
            needs: |k| family_is(&["netsteer_cpu_seconds_total"])(k),
            collector: Some("stat"),
        },
        Input {
            path: "proc/softirqs",
            needs: |k| family_is(&["netsteer_softirqs_total"])(k),
            collector: Some("softirqs"),
        },
        // The NICs' IRQs are found in /proc/interrupts (their names and roles).
        Input {
            path: "proc/interrupts",
            needs: |k| {
                family_is(&[
                    "netsteer_queue_interrupts_total",
                    "netsteer_queue_irq_effective_cpu",
                    // The queues' balance is of their vectors' counts.
                    "netsteer_queue_balance_cv",
                    "netsteer_queue_balance_spread",
                ])(k)
            },
            collector: Some("interrupts"),
        },
        Input {
            path: "proc/net/softnet_stat",
            needs: |k| family_is(SOFTNET)(k),
            collector: Some("softnet"),
        },
        Input {
            path: "proc/net/snmp",
            needs: |k| {
                family_is(&[
                    "netsteer_udp_receive_buffer_errors_total",
                    "netsteer_udp_in_errors_total",
                ])(k)
            },
            collector: Some("snmp"),
        },
        // Read for the doctor's rates only: no exported series needs them.
        Input {
            path: "proc/net/dev",
            needs: |_| false,
            collector: None,
        },
        Input {
            path: "proc/uptime",
            needs: |_| false,
            collector: None,
        },
        Input {
            path: "proc/sys/net/core/rps_sock_flow_entries",
            needs: |k| family_is(&["netsteer_rfs_sock_flow_entries"])(k),
            collector: None,
        },
    ]
}

/// Per-device inputs: a NIC's `queues/` directory and one rx queue's RPS files.
/// Which series of the full tree need an input.
type Needs = Box<dyn Fn(&Key) -> bool>;

fn device_inputs(dev: &'static str) -> Vec<(String, Needs)> {
    let on = move |k: &Key| label(k, "device") == Some(dev);
    vec![
        (
            format!("sys/class/net/{dev}/queues"),
            Box::new(move |k: &Key| {
                on(k)
                    && (family_is(&[
                        "netsteer_nic_queues",
                        "netsteer_rps_cpu",
                        "netsteer_rps_flow_entries",
                        "netsteer_xps_cpu",
                    ])(k)
                        // The vectors' balance counts the queues the device lists: of a
                        // device whose queues are not known, no vector counts.
                        || (family_is(&[
                            "netsteer_queue_balance_cv",
                            "netsteer_queue_balance_spread",
                        ])(k)
                            && label(k, "of").is_some_and(|o| o.ends_with("-interrupts"))))
            }),
        ),
        (
            format!("sys/class/net/{dev}/queues/rx-0/rps_cpus"),
            Box::new(move |k: &Key| {
                on(k) && label(k, "queue") == Some("rx-0") && k.0 == "netsteer_rps_cpu"
            }),
        ),
        (
            format!("sys/class/net/{dev}/queues/rx-0/rps_flow_cnt"),
            Box::new(move |k: &Key| {
                on(k) && label(k, "queue") == Some("rx-0") && k.0 == "netsteer_rps_flow_entries"
            }),
        ),
    ]
}

/// Takes `path` out of a copy of `root` and checks the scrape: every series that did not need
/// it is there with the value it had, the ones that did are gone (not zeroed), and no series
/// appears that the full tree did not have.
/// The collectors the full tree's scrape read without failing: taking `path` away fails its
/// own `collector` (the doctor may fail or not: it judges with what it has) and no other.
fn ablate(
    root: &Path,
    path: &str,
    needs: &dyn Fn(&Key) -> bool,
    collector_of: Option<&str>,
    full: &(BTreeMap<Key, f64>, Vec<(String, f64)>),
) {
    let (full, collectors) = full;
    let tree = root.file_name().unwrap().to_string_lossy().into_owned();
    let tmp = copy_tree(root);
    let target = tmp.path().join(path);
    // A sysfs path may run through a link (sys/class/net/NAME): remove what it names.
    let meta = std::fs::symlink_metadata(&target).unwrap();
    if meta.is_dir() {
        std::fs::remove_dir_all(&target).unwrap();
    } else {
        let real = std::fs::canonicalize(&target).unwrap();
        if real.is_dir() {
            std::fs::remove_dir_all(&real).unwrap();
        } else {
            std::fs::remove_file(&real).unwrap();
        }
    }
    let fams = scrape(tmp.path());
    for (c, before) in collectors {
        let now = collector(&fams, c);
        if c == "doctor" {
            continue;
        }
        if Some(c.as_str()) == collector_of && *before == 1.0 {
            assert_eq!(now, Some(0.0), "{tree} without {path}: collector {c}");
        } else {
            assert_eq!(now, Some(*before), "{tree} without {path}: collector {c}");
        }
    }
    let got = readings(&fams);
    for (k, v) in &got {
        match full.get(k) {
            None => panic!("{tree} without {path}: {k:?} = {v} is new"),
            Some(before) => assert_eq!(
                v, before,
                "{tree} without {path}: {k:?} was {before}, now {v}"
            ),
        }
    }
    for k in full.keys() {
        let kept = got.contains_key(k);
        if needs(k) {
            assert!(!kept, "{tree} without {path}: {k:?} still exported");
        } else {
            assert!(
                kept,
                "{tree} without {path}: lost {k:?}, which needs no {path}"
            );
        }
    }
}

/// Ablation over real trees: one input at a time taken out of a copy. Each family keeps its
/// series or loses exactly those that needed the input, and no value turns into a 0 (or any
/// other value) it was not before.
#[test]
fn taking_one_input_away_loses_only_the_series_that_needed_it() {
    let trees: &[(&str, &[&'static str])] = &[
        ("sysstat-root1", &["enp6s0"]),
        ("pcp-40cpu-mlx4", &["eno1", "ib0"]),
        ("nto-32cpu-i40e-ixgbe", &[]),
        ("sysstat-root6b", &[]),
    ];
    let mut ablated = 0;
    for (tree, devs) in trees {
        let root = real(tree);
        let fams = scrape(&root);
        let collectors: Vec<(String, f64)> = samples(&fams, "netsteer_scrape_collector_success")
            .iter()
            .map(|s| (s.label("collector").unwrap().to_string(), s.value))
            .collect();
        let full = (readings(&fams), collectors);
        assert!(!full.0.is_empty(), "{tree}");
        for input in inputs() {
            if root.join(input.path).exists() {
                ablate(&root, input.path, &input.needs, input.collector, &full);
                ablated += 1;
            }
        }
        for dev in devs.iter() {
            for (path, needs) in device_inputs(dev) {
                if root.join(&path).exists() {
                    ablate(&root, &path, needs.as_ref(), Some("queues"), &full);
                    ablated += 1;
                }
            }
        }
        // One IRQ's effective_affinity_list: only its effective-CPU series go.
        let irqs: Vec<String> = full
            .0
            .keys()
            .filter(|k| k.0 == "netsteer_queue_irq_effective_cpu")
            .filter_map(|k| label(k, "irq").map(str::to_string))
            .collect();
        if let Some(irq) = irqs.first() {
            let path = format!("proc/irq/{irq}/effective_affinity_list");
            let irq = irq.clone();
            let needs = move |k: &Key| {
                k.0 == "netsteer_queue_irq_effective_cpu" && label(k, "irq") == Some(irq.as_str())
            };
            ablate(&root, &path, &needs, None, &full);
            ablated += 1;
        }
    }
    assert!(ablated > 20, "{ablated} ablations");
}

/// Without /proc/stat, each collector that reads a file of its own still reads it: only the
/// stat collector fails (and the doctor, which needs /proc/stat for its rates).
#[test]
fn without_proc_stat_only_the_stat_collector_fails() {
    let tmp = copy_tree(&real("sysstat-root1"));
    std::fs::remove_file(tmp.path().join("proc/stat")).unwrap();
    let fams = scrape(tmp.path());
    for c in ["softirqs", "softnet", "interrupts", "snmp"] {
        assert_eq!(collector(&fams, c), Some(1.0), "{c}");
    }
    assert_eq!(collector(&fams, "stat"), Some(0.0));
    assert!(!samples(&fams, "netsteer_softnet_processed_total").is_empty());
    assert!(!samples(&fams, "netsteer_softirqs_total").is_empty());
}

/// `tune apply`'s journals: a journal directory without journals is 0 rolled back (the
/// directory says none), but one journal that cannot be read makes the count and the last
/// apply's time unknown: no series and a failed tune collector, not a 0 that hides it.
#[test]
fn an_unreadable_journal_is_no_rollback_count_not_zero() {
    let state = tempfile::tempdir().unwrap();
    let a = agent_with_state(&real("sysstat-root6b"), Some(state.path().to_path_buf()));
    let scrape = || a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    let rollbacks = |fams: &[Family]| {
        samples(fams, "netsteer_tune_rolled_back_journals")
            .iter()
            .map(|s| s.value)
            .collect::<Vec<_>>()
    };
    let journals = state.path().join("journal");
    std::fs::create_dir(&journals).unwrap();
    let fams = scrape();
    assert_eq!(rollbacks(&fams), vec![0.0]);
    assert_eq!(collector(&fams, "tune"), Some(1.0));
    // A journal whose first line is not a record (and not the torn last line of a crash).
    std::fs::write(
        journals.join("000000000001.jsonl"),
        "{not json\n{\"end\":1}\n",
    )
    .unwrap();
    let fams = scrape();
    assert_eq!(
        rollbacks(&fams),
        Vec::<f64>::new(),
        "unreadable journal counted"
    );
    assert!(samples(&fams, "netsteer_tune_last_apply_timestamp_seconds").is_empty());
    assert_eq!(collector(&fams, "tune"), Some(0.0));
}

/// The doctor's knowledge is exported beside its findings: how many rules were judged and not,
/// and which rule could not judge which device, so a fleet's dashboard cannot read a blind
/// host's zero findings as health.
#[test]
fn the_doctors_not_judged_rules_are_series() {
    let doctor = |tree: &Path| {
        let fs = HostFs::open(tree).unwrap();
        let nic = netsteer_nic::TreeNic::new(tree);
        let settings = |d: &str| netsteer_nic::NicBackend::settings(&nic, d);
        netsteer_steering::doctor::sampling::examine(
            &fs,
            Some(&settings),
            std::time::Duration::ZERO,
            Goal::Balanced,
            None,
            None,
        )
        .0
    };
    for name in ["nto-32cpu-i40e-ixgbe", "sysstat-root1", "pcp-40cpu-mlx4"] {
        let tree = real(name);
        let fams = scrape(&tree);
        let state = |s: &str| {
            samples(&fams, "netsteer_doctor_rules")
                .iter()
                .find(|x| x.label("state") == Some(s))
                .map(|x| x.value)
        };
        let report = doctor(&tree);
        assert_eq!(state("judged"), Some(report.rules.judged as f64), "{name}");
        assert_eq!(
            state("not_judged"),
            Some(report.rules.not_judged as f64),
            "{name}"
        );
        assert!(report.rules.not_judged > 0, "{name}: {:?}", report.rules);
        let series = samples(&fams, "netsteer_doctor_not_judged");
        assert!(series.len() <= 64, "{name}: {} series", series.len());
        // The host's and the exported (physical) devices', as many as the cap allows.
        let exported = |d: &str| {
            d.is_empty()
                || report
                    .host
                    .nics
                    .iter()
                    .any(|n| n.name == d && n.kind == "physical")
        };
        let wanted: std::collections::BTreeSet<(&str, &str)> = report
            .unjudged
            .iter()
            .filter(|n| exported(&n.subject))
            .map(|n| (n.rule.as_str(), n.subject.as_str()))
            .collect();
        assert_eq!(series.len(), wanted.len().min(64), "{name}");
        // The series are the first 64 of the set, in order.
        for (rule, device) in wanted.iter().take(64) {
            assert!(
                series
                    .iter()
                    .any(|s| s.label("rule") == Some(*rule) && s.label("device") == Some(*device)),
                "{name}: no series for {rule} on {device:?}"
            );
        }
    }
}
