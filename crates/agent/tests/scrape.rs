//! Scrapes of fixture trees: what is exported, how many series, and the doctor's rates between
//! scrapes with an injected clock.

use netsteer_agent::{Agent, AgentOptions, Family, NicSource, Rates, encode, series_bound};
use netsteer_host::HostFs;
use netsteer_steering::doctor::Goal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/hosts")
        .join(name)
}

mod common;

fn agent(root: &Path, rates: Rates, state_dir: Option<PathBuf>) -> Agent {
    common::tree_agent(root, rates, state_dir)
}

fn family<'a>(fams: &'a [Family], name: &str) -> &'a Family {
    fams.iter()
        .find(|f| f.exposed_name() == name)
        .unwrap_or_else(|| panic!("no family {name}"))
}

/// `netsteer_scrape_collector_success` of one collector.
fn collector(fams: &[Family], name: &str) -> f64 {
    family(fams, "netsteer_scrape_collector_success")
        .samples
        .iter()
        .find(|s| s.label("collector") == Some(name))
        .unwrap_or_else(|| panic!("no collector {name}"))
        .value
}

fn series(fams: &[Family]) -> usize {
    fams.iter().map(|f| f.samples.len()).sum()
}

#[test]
fn the_128_cpu_fixture_stays_under_5000_series_and_within_the_stated_bound() {
    let a = agent(&fixture("mlx5-128cpu"), Rates::SinceBoot, None);
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    let n = series(&fams);
    assert!(n < 5000, "{n} series");
    let findings = family(&fams, "netsteer_doctor_finding").samples.len();
    assert!(n <= series_bound(128, 1, 64, findings), "{n} series");
    // One series per CPU for the per-CPU families.
    assert_eq!(
        family(&fams, "netsteer_softnet_processed_total")
            .samples
            .len(),
        128
    );
    assert_eq!(
        family(&fams, "netsteer_cpu_seconds_total").samples.len(),
        128 * 3
    );
    // Queue IRQs carry device, queue, irq and cpu, and only CPUs that took interrupts.
    let q = family(&fams, "netsteer_queue_interrupts_total");
    assert!(!q.samples.is_empty());
    for s in &q.samples {
        for key in ["device", "queue", "irq", "cpu"] {
            assert!(s.label(key).is_some_and(|v| !v.is_empty()), "{s:?}");
        }
        assert!(s.value > 0.0, "{s:?}");
    }
    // Every sample of a family has the same label keys (Prometheus needs no such thing, but
    // a family whose keys vary is a bug in how it was filled).
    for f in &fams {
        if let Some(first) = f.samples.first() {
            let keys: Vec<_> = first.labels.iter().map(|(k, _)| *k).collect();
            for s in &f.samples {
                let k: Vec<_> = s.labels.iter().map(|(k, _)| *k).collect();
                assert_eq!(k, keys, "{}", f.name);
            }
        }
    }
}

#[test]
fn rps_and_xps_are_one_series_per_allowed_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("tuned-ixgbe-16cpu"), tmp.path());
    let queues = tmp.path().join("sys/class/net/eth0/queues");
    std::fs::write(queues.join("rx-2/rps_cpus"), "00f0\n").unwrap();
    let a = agent(tmp.path(), Rates::SinceBoot, None);
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    let rps: Vec<(String, String)> = family(&fams, "netsteer_rps_cpu")
        .samples
        .iter()
        .map(|s| {
            (
                s.label("queue").unwrap().to_string(),
                s.label("cpu").unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = (4..8).map(|c| ("rx-2".into(), c.to_string())).collect();
    assert_eq!(rps, want);
    let fs = HostFs::open(tmp.path()).unwrap();
    let view = netsteer_host::read_host(&fs, None);
    let expected: usize = view
        .nic("eth0")
        .unwrap()
        .tx_queues
        .iter()
        .filter_map(|q| q.xps_cpus.known())
        .map(|c| c.len())
        .sum();
    assert!(expected > 0, "the fixture has XPS set");
    assert_eq!(family(&fams, "netsteer_xps_cpu").samples.len(), expected);
}

/// With the sampler's ticks, a scrape reads the counters afresh and serves the rest (settings,
/// findings) from the last tick: an RPS mask written after a tick shows at the next tick, a
/// counter at once.
#[test]
fn a_scrape_reads_the_counters_and_serves_the_rest_from_the_last_tick() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("tuned-ixgbe-16cpu"), tmp.path());
    let a = agent(tmp.path(), Rates::SinceBoot, None);
    let t0 = Instant::now();
    a.tick(t0, SystemTime::UNIX_EPOCH);
    let rps = |fams: &[Family]| {
        family(fams, "netsteer_rps_cpu")
            .samples
            .iter()
            .filter(|s| s.label("queue") == Some("rx-2"))
            .count()
    };
    let dropped = |fams: &[Family]| {
        family(fams, "netsteer_softnet_dropped_total")
            .samples
            .iter()
            .find(|s| s.label("cpu") == Some("1"))
            .unwrap()
            .value
    };
    let before = a.scrape(t0, SystemTime::UNIX_EPOCH);
    assert_ne!(rps(&before), 4);
    let mask = tmp.path().join("sys/class/net/eth0/queues/rx-2/rps_cpus");
    std::fs::write(&mask, "00f0\n").unwrap();
    let path = tmp.path().join("proc/net/softnet_stat");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut cols: Vec<String> = lines[1].split(' ').map(String::from).collect();
    cols[1] = format!("{:08x}", 500);
    lines[1] = cols.join(" ");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let held = a.scrape(t0, SystemTime::UNIX_EPOCH);
    assert_eq!(rps(&held), rps(&before), "the settings are the tick's");
    assert_eq!(dropped(&held), 500.0, "the counters are the scrape's");
    a.tick(t0 + Duration::from_secs(15), SystemTime::UNIX_EPOCH);
    assert_eq!(rps(&a.scrape(t0, SystemTime::UNIX_EPOCH)), 4);
    assert_eq!(series(&held), series(&before));
}

/// Copies a fixture tree so a test can move its counters.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&entry.path(), &dest);
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

fn findings(fams: &[Family]) -> Vec<(String, String)> {
    family(fams, "netsteer_doctor_finding")
        .samples
        .iter()
        .map(|s| {
            (
                s.label("rule").unwrap().to_string(),
                s.label("severity").unwrap().to_string(),
            )
        })
        .collect()
}

/// The doctor judges by the sampler's last interval: drops between two samples are a finding
/// at every scrape until the next sample, whoever scrapes.
#[test]
fn the_doctor_sees_the_rates_of_the_samplers_interval() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("dev-vm"), tmp.path());
    let every = Duration::from_secs(5);
    let a = agent(tmp.path(), Rates::Sampled { every }, None);
    let t0 = Instant::now();
    a.sample(t0, SystemTime::UNIX_EPOCH);
    let first = a.scrape(t0, SystemTime::UNIX_EPOCH);
    assert!(
        !findings(&first).iter().any(|(r, _)| r == "backlog-drops"),
        "{:?}",
        findings(&first)
    );
    // 500 backlog drops on CPU 1 in the next 5 s.
    let path = tmp.path().join("proc/net/softnet_stat");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut cols: Vec<String> = lines[1].split(' ').map(String::from).collect();
    cols[1] = format!("{:08x}", 500);
    lines[1] = cols.join(" ");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    a.sample(t0 + every, SystemTime::UNIX_EPOCH);
    // Two scrapers one after the other see the same finding.
    let second = a.scrape(t0 + Duration::from_secs(6), SystemTime::UNIX_EPOCH);
    let also = a.scrape(t0 + Duration::from_secs(7), SystemTime::UNIX_EPOCH);
    let f = findings(&second);
    assert!(
        f.contains(&("backlog-drops".to_string(), "warning".to_string())),
        "{f:?}"
    );
    assert_eq!(findings(&also), f);
    let dropped = family(&second, "netsteer_softnet_dropped_total");
    assert!(
        dropped
            .samples
            .iter()
            .any(|s| s.label("cpu") == Some("1") && s.value == 500.0)
    );
    let warnings = family(&second, "netsteer_doctor_findings")
        .samples
        .iter()
        .find(|s| s.label("severity") == Some("warning"))
        .unwrap()
        .value;
    assert!(warnings >= 1.0);
    // No new drops in the next interval: the finding is gone, the counter stays.
    a.sample(t0 + every * 2, SystemTime::UNIX_EPOCH);
    let third = a.scrape(t0 + Duration::from_secs(11), SystemTime::UNIX_EPOCH);
    assert!(
        !findings(&third).iter().any(|(r, _)| r == "backlog-drops"),
        "{:?}",
        findings(&third)
    );
}

#[test]
fn tune_state_is_exported_from_the_state_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fixture("dev-vm");
    let a = agent(&root, Rates::SinceBoot, Some(tmp.path().to_path_buf()));
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    assert_eq!(
        family(&fams, "netsteer_tune_plan_applied").samples[0].value,
        0.0
    );
    // A corrupt applied plan is a failed tune collector, not a crash or a fake "0 drift".
    std::fs::write(
        netsteer_steering::tune::journal::applied_plan_path(tmp.path()),
        "{not json",
    )
    .unwrap();
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    let tune = collector(&fams, "tune");
    assert_eq!(tune, 0.0);
    assert!(
        !fams
            .iter()
            .any(|f| f.name == "netsteer_tune_drift_items" && !f.samples.is_empty())
    );
}

#[test]
fn the_exposition_is_text_format_with_help_and_type_for_every_family() {
    let a = agent(&fixture("ixgbe-napi-16cpu"), Rates::SinceBoot, None);
    let text = encode(a.scrape(Instant::now(), SystemTime::UNIX_EPOCH));
    let mut typed = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.insert(rest.split(' ').next().unwrap().to_string());
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(typed.contains(name), "{name} has no TYPE line");
            assert!(name.starts_with("netsteer_"), "{name}");
        }
    }
    assert!(text.contains("netsteer_build_info{"), "{text}");
}

/// Issue 35 item 14: a device asked for by name that the host does not have (gone, or never
/// there) fails the nic collector instead of reporting an empty success.
#[test]
fn a_named_device_the_host_lacks_fails_the_nic_collector() {
    let root = fixture("dev-vm");
    let tree = root.clone();
    let nic: NicSource = Box::new(move || {
        Ok(Box::new(netsteer_nic::TreeNic::new(&tree)) as Box<dyn netsteer_nic::NicBackend>)
    });
    let text = |devices: Vec<String>, nic: NicSource| {
        let a = Agent::new(
            HostFs::open(&root).unwrap(),
            nic,
            AgentOptions {
                devices,
                state_dir: None,
                goal: Goal::Balanced,
                version: "test",
                rates: Rates::SinceBoot,
                trace: None,
            },
        );
        netsteer_agent::encode(a.scrape(Instant::now(), SystemTime::now()))
    };
    let missing = text(vec!["nonexist0".into()], nic);
    assert!(
        missing.contains("netsteer_scrape_collector_success{collector=\"nic\"} 0"),
        "{missing}"
    );
    let tree = root.clone();
    let nic: NicSource = Box::new(move || {
        Ok(Box::new(netsteer_nic::TreeNic::new(&tree)) as Box<dyn netsteer_nic::NicBackend>)
    });
    let present = text(vec!["eth0".into()], nic);
    assert!(
        present.contains("netsteer_scrape_collector_success{collector=\"nic\"} 1"),
        "{present}"
    );
}

/// Every series the shipped alert rules and dashboard read is one the agent exports (or one
/// the rules record): a renamed family must not leave an alert that can never fire. (A crate
/// rename once turned `netsteer_tune_*` into `netsteer_steering_*` and nothing failed.)
#[test]
fn the_rules_and_the_dashboard_read_only_series_the_agent_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let a = agent(
        &fixture("mlx5-128cpu"),
        Rates::SinceBoot,
        Some(tmp.path().to_path_buf()),
    );
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    let mut exported: Vec<String> = Vec::new();
    for f in &fams {
        let name = f.exposed_name();
        for suffix in ["", "_bucket", "_sum", "_count"] {
            exported.push(format!("{name}{suffix}"));
        }
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rules = std::fs::read_to_string(repo.join("deploy/prometheus/netsteer.rules.yml")).unwrap();
    let dashboard =
        std::fs::read_to_string(repo.join("deploy/grafana/netsteer-dashboard.json")).unwrap();
    let recorded: Vec<&str> = rules
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("- record:")
                .or(l.trim().strip_prefix("record:"))
        })
        .map(str::trim)
        .collect();
    assert!(!recorded.is_empty());
    let mut read = 0;
    for (file, text) in [("rules", &rules), ("dashboard", &dashboard)] {
        let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        for (i, _) in text.match_indices("netsteer_") {
            let start = text[..i].rfind(|c| !is_name(c)).map_or(0, |p| p + 1);
            let end = text[i..]
                .find(|c| !is_name(c))
                .map_or(text.len(), |p| i + p);
            let name = &text[start..end];
            if name.contains(':') {
                assert!(
                    recorded.contains(&name),
                    "{file}: {name} is recorded by no rule"
                );
            } else {
                assert!(
                    exported.iter().any(|e| e == name),
                    "{file}: the agent exports no {name}"
                );
            }
            read += 1;
        }
    }
    assert!(read > 20, "{read}");
}

/// A tree without /proc/stat: the stat collector is exported as 0 with its reason, the
/// doctor that saw no counters is a failed collector, not "0 findings", and the collectors
/// with files of their own still read them (issue 72: each needs only its own files).
#[test]
fn a_collector_that_cannot_read_is_a_zero_with_its_reason_never_a_missing_series() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("tuned-ixgbe-16cpu"), dir.path());
    std::fs::remove_file(dir.path().join("proc/stat")).unwrap();
    let a = agent(dir.path(), Rates::SinceBoot, None);
    let text = encode(a.scrape(Instant::now(), SystemTime::now()));
    for (c, v) in [
        ("stat", 0),
        ("doctor", 0),
        ("softirqs", 1),
        ("softnet", 1),
        ("interrupts", 1),
    ] {
        assert!(
            text.contains(&format!(
                "netsteer_scrape_collector_success{{collector=\"{c}\"}} {v}"
            )),
            "{c}: {text}"
        );
    }
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("netsteer_scrape_collector_error_info{collector=\"stat\""))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].contains("/proc/stat"), "{}", errors[0]);
    // The whole tree: every collector 1, and no error series.
    let a = agent(&fixture("tuned-ixgbe-16cpu"), Rates::SinceBoot, None);
    let text = encode(a.scrape(Instant::now(), SystemTime::now()));
    assert!(
        !text.contains("netsteer_scrape_collector_error_info{"),
        "{text}"
    );
    assert!(
        text.contains("netsteer_scrape_collector_success{collector=\"doctor\"} 1"),
        "{text}"
    );
}

/// `netsteer watch`'s standing advice is exported from the file the watcher keeps: one series
/// per advice id with when it began, none when none stands, and a file that is not JSON a
/// failed `watch` collector.
#[test]
fn the_watchers_standing_advice_is_exported_with_its_start() {
    let tmp = tempfile::tempdir().unwrap();
    let a = agent(
        &fixture("dev-vm"),
        Rates::SinceBoot,
        Some(tmp.path().to_path_buf()),
    );
    let name = "netsteer_watch_advice_since_timestamp_seconds";
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    assert!(family(&fams, name).samples.is_empty());
    let dir = tmp.path().join("watch");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join(netsteer_steering::watch::ADVICE_FILE),
        r#"[{"id":"backlog","reflex":"backlog","since":1790000000.0,"evidence":["x"],"changes":[]}]"#,
    )
    .unwrap();
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    let s = &family(&fams, name).samples;
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].label("id"), s[0].label("reflex"), s[0].value),
        (Some("backlog"), Some("backlog"), 1_790_000_000.0)
    );
    std::fs::write(dir.join(netsteer_steering::watch::ADVICE_FILE), "{not json").unwrap();
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    let watch = collector(&fams, "watch");
    assert_eq!(watch, 0.0);
}

/// The queues' balance of a real 40-queue ixgbe host (pcp-40cpu-mlx4): since boot from the
/// counters, and over the sampler's interval once two samples are taken. Ten million
/// interrupts on eno1-TxRx-0 alone in 5 s: the interval's spread is 2 (one vector has it all),
/// the since-boot figure barely moves, and the platform's rate counts them.
#[test]
fn the_queues_balance_moves_over_the_interval_and_not_since_boot() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("../real/pcp-40cpu-mlx4"), tmp.path());
    let every = Duration::from_secs(5);
    let a = agent(tmp.path(), Rates::Sampled { every }, None);
    let t0 = Instant::now();
    let value = |fams: &[Family], name: &str, window: &str| {
        family(fams, name)
            .samples
            .iter()
            .find(|s| {
                s.label("device") == Some("eno1")
                    && s.label("of") == Some("rx-tx-interrupts")
                    && s.label("window") == Some(window)
            })
            .map(|s| s.value)
    };
    a.sample(t0, SystemTime::UNIX_EPOCH);
    let first = a.scrape(t0, SystemTime::UNIX_EPOCH);
    let boot_before = value(&first, "netsteer_queue_balance_spread", "boot").expect("since boot");
    assert!(boot_before > 0.0 && boot_before < 2.0, "{boot_before}");
    assert_eq!(
        value(&first, "netsteer_queue_balance_spread", "interval"),
        None
    );
    let ceiling = family(&first, "netsteer_interrupt_ceiling_per_second");
    assert_eq!(ceiling.samples[0].value, 1e6);

    let path = tmp.path().join("proc/interrupts");
    let text = std::fs::read_to_string(&path).unwrap();
    let bumped: Vec<String> = text
        .lines()
        .map(|l| {
            if !l.trim_start().starts_with("169:") {
                return l.to_string();
            }
            let (head, rest) = l.split_once(':').unwrap();
            let mut cols: Vec<String> = rest.split_whitespace().map(String::from).collect();
            cols[0] = (cols[0].parse::<u64>().unwrap() + 10_000_000).to_string();
            format!("{head}: {}", cols.join(" "))
        })
        .collect();
    std::fs::write(&path, bumped.join("\n") + "\n").unwrap();
    a.sample(t0 + every, SystemTime::UNIX_EPOCH);
    let second = a.scrape(t0 + every, SystemTime::UNIX_EPOCH);
    let spread = value(&second, "netsteer_queue_balance_spread", "interval").unwrap();
    assert_eq!(spread, 2.0);
    let cv = value(&second, "netsteer_queue_balance_cv", "interval").unwrap();
    assert!((cv - 39f64.sqrt()).abs() < 1e-9, "{cv}");
    let boot_after = value(&second, "netsteer_queue_balance_spread", "boot").unwrap();
    assert!(
        (boot_after - boot_before).abs() < 0.5,
        "{boot_before} -> {boot_after}"
    );
    let rate = |kind: &str| {
        family(&second, "netsteer_interrupts_per_second")
            .samples
            .iter()
            .find(|s| s.label("kind") == Some(kind))
            .map(|s| s.value)
    };
    assert_eq!(rate("nic-queues"), Some(2e6));
    assert_eq!(rate("msi"), Some(2e6));
    assert_eq!(rate("devices"), Some(2e6));
    // /proc/stat's intr line did not move in this tree: all interrupts read 0, not unknown.
    assert_eq!(rate("all"), Some(0.0));
}

/// The queues' packets (netdev qstats, here a real virtio-net guest's: rx queue 0 took all
/// 19,674 packets since boot, rx queue 1 none) balance over the sampler's interval, which the
/// since-boot figure does not show.
#[test]
fn the_queues_packets_balance_over_the_interval_from_their_own_counters() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("virtio-rss-6.12"), tmp.path());
    let every = Duration::from_secs(5);
    let a = agent(tmp.path(), Rates::Sampled { every }, None);
    let t0 = Instant::now();
    let value = |fams: &[Family], name: &str, of: &str, window: &str| {
        family(fams, name)
            .samples
            .iter()
            .find(|s| {
                s.label("device") == Some("eth0")
                    && s.label("of") == Some(of)
                    && s.label("window") == Some(window)
            })
            .map(|s| s.value)
    };
    let spread = "netsteer_queue_balance_spread";
    a.sample(t0, SystemTime::UNIX_EPOCH);
    let first = a.scrape(t0, SystemTime::UNIX_EPOCH);
    assert_eq!(value(&first, spread, "rx-packets", "boot"), Some(2.0));
    assert_eq!(value(&first, spread, "rx-packets", "interval"), None);

    // 5,000 packets on each rx queue over the interval; tx queue 1 alone sends.
    let path = tmp.path().join("netsteer/ethtool.json");
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for q in j["eth0"]["netdev"]["qstats"].as_array_mut().unwrap() {
        let add = match (q["type"].as_str().unwrap(), q["id"].as_u64().unwrap()) {
            ("rx", _) => 5000,
            ("tx", 1) => 800,
            _ => 0,
        };
        q["packets"] = (q["packets"].as_u64().unwrap() + add).into();
    }
    std::fs::write(&path, serde_json::to_string(&j).unwrap()).unwrap();
    a.sample(t0 + every, SystemTime::UNIX_EPOCH);
    let second = a.scrape(t0 + every, SystemTime::UNIX_EPOCH);
    assert_eq!(value(&second, spread, "rx-packets", "interval"), Some(0.0));
    let cv = "netsteer_queue_balance_cv";
    assert_eq!(value(&second, cv, "rx-packets", "interval"), Some(0.0));
    assert_eq!(value(&second, spread, "tx-packets", "interval"), Some(2.0));
    // Since boot: 24,674 against 5,000.
    let boot = value(&second, spread, "rx-packets", "boot").unwrap();
    assert!((boot - 2.0 * 19_674.0 / 29_674.0).abs() < 1e-9, "{boot}");
}

/// The page-pool series of a real guest's tree (Debian 7.3, virtio-net, counters built): its
/// one pool on rx-0 with the pages and counters the kernel reported. Then the same tree with
/// the pool dump failed, and with the counters unavailable: each says why in
/// `netsteer_page_pool_unknown_info`, with a different part and reason, and exports no
/// number it does not have.
#[test]
fn page_pools_are_exported_as_the_kernel_reported_them_and_unknowns_say_why() {
    let one = |fams: &[Family], name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        family(fams, name)
            .samples
            .iter()
            .find(|s| labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .map(|s| s.value)
    };
    let pool = [("device", "eth0"), ("pool", "3"), ("queue", "rx-0")];
    let a = agent(&fixture("zoo-virtio-pools-7.3"), Rates::SinceBoot, None);
    let fams = a.scrape(Instant::now(), SystemTime::UNIX_EPOCH);
    assert_eq!(
        one(&fams, "netsteer_page_pool_inflight_pages", &pool),
        Some(128.0)
    );
    assert_eq!(
        one(&fams, "netsteer_page_pool_inflight_bytes", &pool),
        Some(524288.0)
    );
    let path = |p: &'static str| [pool[0], pool[1], pool[2], ("path", p)];
    assert_eq!(
        one(&fams, "netsteer_page_pool_allocations_total", &path("fast")),
        Some(126.0)
    );
    assert_eq!(
        one(&fams, "netsteer_page_pool_allocations_total", &path("slow")),
        Some(2.0)
    );
    assert_eq!(
        family(&fams, "netsteer_page_pool_recycles_total")
            .samples
            .len(),
        5
    );
    assert!(
        family(&fams, "netsteer_page_pool_unknown_info")
            .samples
            .is_empty()
    );

    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let t = tempfile::tempdir().unwrap();
        copy_tree(&fixture("zoo-virtio-pools-7.3"), t.path());
        let file = t.path().join("netsteer/ethtool.json");
        let mut e: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        f(&mut e["eth0"]["netdev"]["page_pools"]);
        std::fs::write(&file, e.to_string()).unwrap();
        let fams =
            agent(t.path(), Rates::SinceBoot, None).scrape(Instant::now(), SystemTime::UNIX_EPOCH);
        let why: Vec<(String, String)> = family(&fams, "netsteer_page_pool_unknown_info")
            .samples
            .iter()
            .map(|s| {
                assert_eq!((s.label("device"), s.value), (Some("eth0"), 1.0));
                let l = |k| s.label(k).unwrap().to_string();
                (l("part"), l("reason"))
            })
            .collect();
        (fams, why)
    };
    let failed = "page-pool-get: Operation not permitted (os error 1)";
    let (fams, why) = edit(&|p| *p = serde_json::json!({ "unknown": failed }));
    assert_eq!(why, [("pools".to_string(), failed.to_string())]);
    assert!(
        family(&fams, "netsteer_page_pool_inflight_pages")
            .samples
            .is_empty()
    );
    let unbuilt = "the kernel was built without CONFIG_PAGE_POOL_STATS (no PAGE_POOL_STATS_GET)";
    let (fams, why) = edit(&|p| {
        p["stats_unavailable"] = unbuilt.into();
        p["pools"][0]["stats"] = serde_json::Value::Null;
    });
    assert_eq!(why, [("stats".to_string(), unbuilt.to_string())]);
    assert_eq!(
        one(&fams, "netsteer_page_pool_inflight_pages", &pool),
        Some(128.0)
    );
    assert!(
        family(&fams, "netsteer_page_pool_allocations_total")
            .samples
            .is_empty()
    );
}
