//! Ablation over every real and captured tree (issue 72): take away what netsteer reads, one
//! file at a time and in whole groups (every `/proc/PID`, every `queues/`, every NUMA file,
//! the NIC settings), and run the doctor on what is left. It must not panic, and no finding
//! may turn into silence: a finding of the whole tree is, in each variant, still reported or
//! its rule is listed as not judged for that device (or for the host). A variant that says
//! healthy must come from a whole tree that says so too.
//!
//! The files are the ones the doctor read on the whole tree (its recording root), so the test
//! follows the readers as they change instead of a list kept by hand. Trees hold hundreds to
//! thousands of such files: each tree's are shuffled with a fixed seed and the first
//! [`PER_TREE`] taken, besides every group; the variant count is printed.

use netsteer_host::HostFs;
use netsteer_host::fs::Recorded;
use netsteer_nic::{NicBackend, TreeNic};
use netsteer_steering::doctor::{Goal, Report, sampling};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Single files taken away per tree (a fixed sample: the trees hold up to 6000 read files and
/// CI has two busy cores).
const PER_TREE: usize = 80;
const SEED: u64 = 0x72_ab1a7e;

fn trees() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut out = Vec::new();
    for dir in ["real", "hosts"] {
        let mut here: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        here.sort();
        out.extend(here);
    }
    out
}

/// What `netsteer --root ROOT doctor --sample 0` reports, read through `fs`.
fn examine(fs: &HostFs, root: &Path) -> Report {
    let nic = TreeNic::new(root);
    let settings = |dev: &str| nic.settings(dev);
    sampling::examine(
        fs,
        Some(&settings),
        Duration::ZERO,
        Goal::Balanced,
        None,
        None,
    )
    .0
}

/// None when what is left is no host tree at all (`--root` refuses it, naming the files it
/// needs): an error, not a report.
fn doctor(root: &Path) -> Option<Report> {
    Some(examine(&HostFs::open(root).ok()?, root))
}

/// The doctor's report on the whole tree and the tree paths (relative) it read.
fn baseline(root: &Path) -> (Report, Vec<PathBuf>) {
    let (fs, rec) = HostFs::open(root).unwrap().recording();
    let report = examine(&fs, root);
    let mut read: Vec<PathBuf> = rec
        .lock()
        .unwrap()
        .entries()
        .iter()
        .filter(|(_, r)| matches!(r, Recorded::File { .. } | Recorded::Link { .. }))
        .map(|(p, _)| p.strip_prefix("/").unwrap_or(p).to_path_buf())
        .filter(|p| std::fs::symlink_metadata(root.join(p)).is_ok())
        .collect();
    if root.join("netsteer/ethtool.json").is_file() {
        read.push("netsteer/ethtool.json".into());
    }
    (report, read)
}

/// A small deterministic shuffle (xorshift), so the sample is the same on every run.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// The groups: every process directory, every `queues/` directory, every NUMA file.
fn groups(root: &Path, read: &[PathBuf]) -> Vec<(String, Vec<PathBuf>)> {
    let mut out = Vec::new();
    let procs: Vec<PathBuf> = std::fs::read_dir(root.join("proc"))
        .map(|it| {
            it.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .map(|e| PathBuf::from("proc").join(e.file_name()))
                .collect()
        })
        .unwrap_or_default();
    if !procs.is_empty() {
        out.push(("every /proc/PID".to_string(), procs));
    }
    let queues: BTreeSet<PathBuf> = read
        .iter()
        .filter_map(|p| {
            let s = p.to_string_lossy();
            let at = s.find("/queues/")?;
            Some(PathBuf::from(&s[..at + "/queues".len()]))
        })
        .collect();
    if !queues.is_empty() {
        out.push(("every queues/".to_string(), queues.into_iter().collect()));
    }
    let numa: Vec<PathBuf> = read
        .iter()
        .filter(|p| {
            let s = p.to_string_lossy();
            s.starts_with("sys/devices/system/node/")
                || s.ends_with("/numa_node")
                || s.ends_with("/local_cpulist")
                || s.ends_with("/local_cpus")
                || (s.starts_with("sys/devices/system/cpu/cpu")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("node")))
        })
        .cloned()
        .collect();
    if !numa.is_empty() {
        out.push(("every NUMA file".to_string(), numa));
    }
    out
}

/// The devices a finding is about (none: the host).
fn devices(f: &netsteer_steering::doctor::Finding) -> Vec<String> {
    f.subjects.devices.clone()
}

/// Why `lost` (a finding of the whole tree) is accounted for in `variant`, or None.
fn accounted(lost: &netsteer_steering::doctor::Finding, variant: &Report) -> bool {
    let devs = devices(lost);
    // A device the variant no longer lists at all: its report must name it as not judged
    // (counted in /proc/net/dev, or its vectors in /proc/interrupts), or say that no
    // interface at all could be listed.
    let unlisted: Vec<&String> = devs
        .iter()
        .filter(|d| !variant.host.nics.iter().any(|n| n.name == **d))
        .collect();
    if !unlisted.is_empty()
        && unlisted.iter().all(|d| {
            variant
                .not_judged
                .iter()
                .any(|n| n.contains(d.as_str()) || n.starts_with("every NIC rule: "))
        })
    {
        return true;
    }
    let still = variant.findings.iter().any(|f| {
        // The same rule still fires: on the device, or for the host once the files that tied
        // it to the device are gone (its evidence then names no device).
        f.id == lost.id
            && (devs.is_empty()
                || devices(f).is_empty()
                || devices(f).iter().any(|d| devs.contains(d)))
    });
    still
        || variant
            .unjudged
            .iter()
            .any(|n| n.rule == lost.id && (n.subject.is_empty() || devs.contains(&n.subject)))
}

fn healthy(r: &Report) -> bool {
    r.findings.is_empty() && r.not_judged.is_empty() && r.unjudged.is_empty()
}

/// Moves `paths` (relative to `root`) aside into `stash`, runs `f`, and puts them back.
fn without<T>(root: &Path, stash: &Path, paths: &[PathBuf], f: impl FnOnce() -> T) -> T {
    let mut moved = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let from = root.join(p);
        let to = stash.join(i.to_string());
        if std::fs::rename(&from, &to).is_ok() {
            moved.push((from, to));
        }
    }
    let out = f();
    for (from, to) in moved.into_iter().rev() {
        std::fs::rename(&to, &from).unwrap();
    }
    out
}

#[test]
fn no_finding_turns_into_silence_when_a_file_is_taken_away() {
    let started = Instant::now();
    let mut variants = 0usize;
    let mut refused = 0usize;
    // Findings of a whole tree that a variant no longer reports (each must be named).
    let mut named = 0usize;
    let mut failures = Vec::new();
    for tree in trees() {
        let name = tree.file_name().unwrap().to_string_lossy().to_string();
        let work = tempfile::tempdir().unwrap();
        let root = work.path().join("tree");
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(&tree)
            .arg(&root)
            .status()
            .unwrap();
        assert!(status.success(), "copying {name}");
        let stash = work.path().join("stash");
        std::fs::create_dir(&stash).unwrap();
        let (whole, mut read) = baseline(&root);
        let mut cases = groups(&root, &read);
        shuffle(&mut read, SEED ^ name.len() as u64);
        cases.extend(
            read.into_iter()
                .take(PER_TREE)
                .map(|p| (p.display().to_string(), vec![p])),
        );
        for (label, paths) in cases {
            variants += 1;
            let report = without(&root, &stash, &paths, || {
                std::panic::catch_unwind(|| doctor(&root))
            });
            let Ok(report) = report else {
                failures.push(format!("{name} without {label}: doctor panicked"));
                continue;
            };
            let Some(report) = report else {
                refused += 1;
                continue;
            };
            for f in &whole.findings {
                if !report.findings.iter().any(|g| g.id == f.id) {
                    named += 1;
                }
                if !accounted(f, &report) {
                    failures.push(format!(
                        "{name} without {label}: {} on {:?} vanished without a not-judged entry",
                        f.id,
                        devices(f)
                    ));
                }
            }
            if healthy(&report) && !healthy(&whole) {
                failures.push(format!("{name} without {label}: says healthy"));
            }
        }
    }
    eprintln!(
        "ablation: {variants} variants over {} trees in {:.1} s ({refused} left no host tree; {named} findings lost, each named as not judged)",
        trees().len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {variants} variants lost something:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
