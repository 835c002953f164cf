//! `tune` on fixture trees copied to a temp dir: every kind of item is planned where it should
//! be, apply changes exactly the planned values, rollback makes the tree byte-identical again,
//! and a failure at any write (fault injection at every k) leaves the tree as it was.

use netsteer_host::{CpuSet, HostFs, read_host};
use netsteer_nic::{NicBackend, TreeNic};
use netsteer_steering::tune::journal;
use netsteer_steering::tune::verify::verify;
use netsteer_steering::tune::{
    Action, ApplyOptions, Backend, HostBackend, IrqbalancePolicy, ItemKind, NapiMode, Plan,
    PlanOptions, Profile, StepError, Target, apply, plan, rollback,
};
use netsteer_steering::tune::{ApplyStatus, RollbackStatus, StepStatus};
use std::cell::Cell;
use std::fs;
use std::path::Path;

mod common;
use common::{contents, copy_tree, fixture};

const HOSTS: &[&str] = &[
    "dev-vm",
    "kvm-virtio-16cpu",
    "cloudflare-24cpu",
    "mlx5-128cpu",
    "rhel7-4cpu",
    "tuned-ixgbe-16cpu",
    "ixgbe-napi-16cpu",
    "igb-6.1",
    "igb-6.12",
    "virtio-rss-6.12",
];
const PROFILES: &[Profile] = &[Profile::Latency, Profile::Throughput, Profile::Balanced];

/// `profile` as `tune plan --root TREE --irqbalance stop` plans it: the IRQ pins planned as if
/// irqbalance were stopped. Four captured trees (dev-vm, igb-6.1, igb-6.12, virtio-rss-6.12)
/// kept no process's name, so whether irqbalance ran there is unknown, and `--irqbalance
/// leave` skips every pin of theirs as it would if it ran; these tests are of apply and
/// rollback, and want the pins written.
fn opts(profile: Profile) -> PlanOptions {
    PlanOptions {
        irqbalance: IrqbalancePolicy::Stop,
        ..PlanOptions::for_profile(profile)
    }
}

/// `profile` with irqbalance left alone (`--irqbalance leave`, the default).
fn leave(profile: Profile) -> PlanOptions {
    PlanOptions::for_profile(profile)
}

fn plan_tree(root: &Path, o: &PlanOptions) -> Plan {
    let fs = HostFs::open(root).unwrap();
    let nic = TreeNic::new(root);
    let settings = |n: &str| nic.settings(n);
    let view = read_host(&fs, Some(&settings));
    plan(&view, o).unwrap()
}

fn root_name(root: &Path) -> String {
    fs::canonicalize(root).unwrap().display().to_string()
}

/// Applies a plan to a tree through `wrap(backend)`.
fn apply_tree(
    root: &Path,
    state: &Path,
    o: &PlanOptions,
    wrap: &dyn Fn(&dyn Backend) -> Box<dyn Backend + '_>,
) -> netsteer_steering::tune::ApplyReport {
    let p = plan_tree(root, o);
    let fs = HostFs::open(root).unwrap();
    let nic = TreeNic::new(root);
    let backend = HostBackend { fs, nic: &nic };
    let wrapped = wrap(&backend);
    let mut replan = || Ok(plan_tree(root, o));
    apply(
        &p,
        &root_name(root),
        wrapped.as_ref(),
        state,
        &mut replan,
        &ApplyOptions::default(),
    )
    .unwrap()
}

/// Rolls a tree back from one journal, through the tree's own backends.
fn rollback_tree(root: &Path, journal: &str) -> netsteer_steering::tune::RollbackReport {
    let nic = TreeNic::new(root);
    let backend = HostBackend {
        fs: HostFs::open(root).unwrap(),
        nic: &nic,
    };
    rollback(Path::new(journal), &root_name(root), &backend).unwrap()
}

struct Plain<'a>(&'a dyn Backend);
impl Backend for Plain<'_> {
    fn read(&self, t: &Target) -> Result<String, StepError> {
        self.0.read(t)
    }
    fn write(&self, t: &Target, v: &str) -> Result<(), StepError> {
        self.0.write(t, v)
    }
}

/// Fails the k-th write: before writing (the kernel refused) or after it (the value changed
/// but the call reported an error, as a half-done NIC reconfiguration can).
struct FailAt<'a> {
    inner: &'a dyn Backend,
    k: usize,
    after_write: bool,
    writes: Cell<usize>,
}

impl Backend for FailAt<'_> {
    fn read(&self, t: &Target) -> Result<String, StepError> {
        self.inner.read(t)
    }
    fn write(&self, t: &Target, v: &str) -> Result<(), StepError> {
        let n = self.writes.get() + 1;
        self.writes.set(n);
        if n == self.k {
            if self.after_write {
                self.inner.write(t, v)?;
            }
            return Err(StepError {
                target: t.to_string(),
                errno: Some(libc_einval()),
                message: format!("injected failure at write {n}"),
            });
        }
        self.inner.write(t, v)
    }
}

fn libc_einval() -> i32 {
    22
}

#[test]
fn apply_then_rollback_leaves_every_tree_byte_identical() {
    let mut kinds_changed = std::collections::BTreeSet::new();
    for host in HOSTS {
        for profile in PROFILES {
            let tree = copy_tree(&fixture(host));
            let state = tempfile::tempdir().unwrap();
            let before = contents(tree.path());
            let o = opts(*profile);
            let planned = plan_tree(tree.path(), &o);
            let report = apply_tree(tree.path(), state.path(), &o, &|b| Box::new(Plain(b)));
            assert_eq!(
                report.status,
                ApplyStatus::Applied,
                "{host} {profile}: {report:?}"
            );
            let changed: Vec<_> = report
                .steps
                .iter()
                .filter(|s| s.status == StepStatus::Changed)
                .collect();
            assert_eq!(
                changed.len(),
                planned.changes().count()
                    - report
                        .steps
                        .iter()
                        .filter(|s| s.status != StepStatus::Changed)
                        .count(),
                "{host} {profile}: every planned change is changed, unchanged or skipped"
            );
            for s in &changed {
                kinds_changed.insert(s.id.split('/').next().unwrap().to_string());
            }
            // The tree now holds the desired values: a fresh plan has nothing left to change
            // and verify finds no drift.
            let again = plan_tree(tree.path(), &o);
            let left: Vec<_> = again.changes().map(|i| i.id.clone()).collect();
            let skipped: Vec<_> = report
                .steps
                .iter()
                .filter(|s| s.status == StepStatus::Skipped)
                .map(|s| s.id.clone())
                .collect();
            assert!(
                left.iter().all(|id| skipped.contains(id)),
                "{host} {profile}: still to change after apply: {left:?}"
            );
            let applied: Plan = serde_json::from_slice(
                &fs::read(journal::applied_plan_path(state.path())).unwrap(),
            )
            .unwrap();
            let fs_ = HostFs::open(tree.path()).unwrap();
            let nic = TreeNic::new(tree.path());
            let backend = HostBackend {
                fs: fs_.clone(),
                nic: &nic,
            };
            let settings = |n: &str| nic.settings(n);
            let view = read_host(&fs_, Some(&settings));
            let v = verify(&applied, &backend, &view);
            let drift: Vec<_> = v
                .drift
                .iter()
                .filter(|d| !skipped.contains(&d.id))
                .collect();
            assert!(
                drift.is_empty(),
                "{host} {profile}: drift right after apply: {drift:?}"
            );
            if !changed.is_empty() {
                assert_ne!(
                    contents(tree.path()),
                    before,
                    "{host} {profile}: apply changed nothing"
                );
            }
            // Rollback restores every byte; a second rollback has nothing to do.
            let r = rollback(
                Path::new(&report.journal),
                &root_name(tree.path()),
                &backend,
            )
            .unwrap();
            assert!(r.failed.is_empty(), "{r:?}");
            assert_eq!(
                contents(tree.path()),
                before,
                "{host} {profile}: rollback left a difference"
            );
            let r2 = rollback(
                Path::new(&report.journal),
                &root_name(tree.path()),
                &backend,
            )
            .unwrap();
            assert_eq!(r2.status, RollbackStatus::NothingToDo);
            assert_eq!(contents(tree.path()), before);
        }
    }
    // Across the fixtures every kind of item was really written at least once.
    for k in ["irq", "rps", "rfs", "xps", "sysctl", "nic"] {
        assert!(
            kinds_changed.contains(k),
            "no {k} item was ever changed: {kinds_changed:?}"
        );
    }
}

#[test]
fn a_failure_at_any_write_leaves_the_tree_as_it_was() {
    for (host, profile) in [
        ("cloudflare-24cpu", Profile::Throughput),
        ("dev-vm", Profile::Latency),
        ("kvm-virtio-16cpu", Profile::Balanced),
    ] {
        let o = opts(profile);
        // How many writes a clean apply makes.
        let probe = copy_tree(&fixture(host));
        let st = tempfile::tempdir().unwrap();
        let clean = apply_tree(probe.path(), st.path(), &o, &|b| Box::new(Plain(b)));
        let writes = clean
            .steps
            .iter()
            .filter(|s| s.status != StepStatus::Unchanged)
            .count();
        assert!(writes >= 4, "{host}: only {writes} writes to test");
        for after_write in [false, true] {
            for k in 1..=writes {
                let tree = copy_tree(&fixture(host));
                let state = tempfile::tempdir().unwrap();
                let before = contents(tree.path());
                let report = apply_tree(tree.path(), state.path(), &o, &|b| {
                    Box::new(FailAt {
                        inner: b,
                        k,
                        after_write,
                        writes: Cell::new(0),
                    })
                });
                assert_eq!(
                    report.status,
                    ApplyStatus::RolledBack,
                    "{host} k={k}: {report:?}"
                );
                assert!(report.error.as_deref().unwrap().contains("injected"));
                assert_eq!(
                    contents(tree.path()),
                    before,
                    "{host} {profile} failing write {k} (after_write {after_write}) left a change"
                );
                // Nothing to verify against: a rolled-back apply saves no applied plan.
                assert!(!journal::applied_plan_path(state.path()).exists());
            }
        }
    }
}

fn items(p: &Plan, kind: ItemKind) -> Vec<&netsteer_steering::tune::Item> {
    p.items.iter().filter(|i| i.kind == kind).collect()
}

/// irqbalance unknown is planned as "may be running" (issue 72, class 1): its pins skipped
/// with the same flag named as when it runs, and the plan says why; stopped when asked (live,
/// the state read then); and a tree that knows it is not running has its pins planned.
#[test]
fn an_irqbalance_whose_state_is_unknown_is_planned_as_running() {
    let root = fixture("igb-6.12");
    let fs = HostFs::open(&root).unwrap();
    let nic = TreeNic::new(&root);
    let settings = |n: &str| nic.settings(n);
    let mut view = read_host(&fs, Some(&settings));
    assert!(view.irqbalance.known().is_none(), "{:?}", view.irqbalance);
    let p = plan(&view, &leave(Profile::Balanced)).unwrap();
    let pins = items(&p, ItemKind::IrqAffinity);
    assert!(!pins.is_empty());
    for i in &pins {
        assert!(
            matches!(&i.action, Action::Skip(w) if w.starts_with("irqbalance may be running (its state is unknown") && w.contains("--irqbalance stop")),
            "{i:?}"
        );
    }
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("IRQ pins are skipped as they are when it runs")),
        "{:?}",
        p.notes
    );
    let live = PlanOptions {
        live: true,
        ..opts(Profile::Balanced)
    };
    let p = plan(&view, &live).unwrap();
    let stop = p
        .items
        .iter()
        .find(|i| i.id == "service/irqbalance")
        .unwrap();
    assert_eq!(
        (stop.current.as_deref(), stop.desired.as_str()),
        (None, "inactive")
    );
    assert!(
        items(&p, ItemKind::IrqAffinity)
            .iter()
            .any(|i| i.action == Action::Change)
    );
    view.irqbalance = netsteer_host::Field::Known(netsteer_host::view::Irqbalance {
        running: false,
        pid: None,
        by: String::new(),
        unit: false,
    });
    let p = plan(&view, &leave(Profile::Balanced)).unwrap();
    assert!(
        items(&p, ItemKind::IrqAffinity)
            .iter()
            .all(|i| !matches!(i.action, Action::Skip(_)))
    );
    // Running outside systemd's unit (started by hand, upstart): `systemctl stop` would not
    // stop it, so even --irqbalance stop skips the pins and says why.
    view.irqbalance = netsteer_host::Field::Known(netsteer_host::view::Irqbalance {
        running: true,
        pid: Some(640),
        by: String::new(),
        unit: false,
    });
    let p = plan(&view, &live).unwrap();
    assert!(p.items.iter().all(|i| i.id != "service/irqbalance"));
    for i in items(&p, ItemKind::IrqAffinity) {
        assert!(
            matches!(&i.action, Action::Skip(w) if w.contains("outside systemd's irqbalance.service")),
            "{i:?}"
        );
    }
}

#[test]
fn plans_say_what_they_skip_and_why() {
    // mlx5-128cpu: irqbalance runs, so IRQ pins are skipped unless it is stopped; managed
    // IRQs are skipped either way.
    let p = plan_tree(&fixture("mlx5-128cpu"), &leave(Profile::Throughput));
    let irqs = items(&p, ItemKind::IrqAffinity);
    assert!(!irqs.is_empty());
    assert!(irqs.iter().all(|i| matches!(&i.action, Action::Skip(w) if w.contains("irqbalance") || w.contains("managed"))), "{irqs:?}");
    let stop = opts(Profile::Throughput);
    let p = plan_tree(&fixture("mlx5-128cpu"), &stop);
    assert!(
        p.notes.iter().any(|n| n.contains("no service is stopped")),
        "{:?}",
        p.notes
    );
    assert!(
        items(&p, ItemKind::IrqAffinity)
            .iter()
            .any(|i| i.action == Action::Change)
    );

    // kvm-virtio-16cpu (seed 003): one queue → RPS over the node without the IRQ CPU, RFS
    // sized, no XPS (one tx queue), coalescing unsupported is a note, not a silent gap.
    let p = plan_tree(&fixture("kvm-virtio-16cpu"), &opts(Profile::Throughput));
    let irq_cpu: CpuSet = items(&p, ItemKind::IrqAffinity)
        .iter()
        .map(|i| CpuSet::parse_list(&i.desired, None).unwrap())
        .fold(CpuSet::new(), |a, b| a.union(&b));
    let rps = items(&p, ItemKind::Rps);
    assert_eq!(rps.len(), 1);
    let rps_set = CpuSet::parse_mask(&rps[0].desired).unwrap();
    assert_eq!(rps_set.len(), 15);
    assert!(rps_set.intersection(&irq_cpu).is_empty());
    assert_eq!(items(&p, ItemKind::RfsFlowCnt)[0].desired, "32768");
    assert_eq!(items(&p, ItemKind::RfsTable)[0].desired, "32768");
    assert!(items(&p, ItemKind::Xps).is_empty());
    assert!(p.notes.iter().any(|n| n.contains("XPS has no effect")));
    // Latency: no RPS spread, busy polling on.
    let p = plan_tree(&fixture("kvm-virtio-16cpu"), &opts(Profile::Latency));
    assert!(
        items(&p, ItemKind::Rps)
            .iter()
            .all(|i| i.desired.trim_start_matches('0').is_empty()
                || i.desired.chars().all(|c| c == '0' || c == ','))
    );
    let busy: Vec<_> = items(&p, ItemKind::Sysctl)
        .iter()
        .map(|i| (i.id.clone(), i.desired.clone()))
        .collect();
    assert!(
        busy.contains(&("sysctl/net.core.busy_poll".into(), "50".into())),
        "{busy:?}"
    );

    // cloudflare-24cpu (seed 000): 11 queues pinned one per core on the NIC's node, CPU 0 and
    // the HT siblings last; XPS maps each CPU to the queue it serves; masks at 24-bit width.
    let p = plan_tree(&fixture("cloudflare-24cpu"), &opts(Profile::Balanced));
    let pins: Vec<u32> = items(&p, ItemKind::IrqAffinity)
        .iter()
        .map(|i| i.desired.parse().unwrap())
        .collect();
    assert_eq!(pins.len(), 11);
    let distinct: std::collections::BTreeSet<_> = pins.iter().collect();
    assert_eq!(distinct.len(), 11, "{pins:?}");
    for x in items(&p, ItemKind::Xps) {
        assert_eq!(x.desired.len(), 6, "24 CPUs → 6 hex digits: {}", x.desired);
    }
    // 11 queues on 6 local cores: RSS covers them, so RPS stays off.
    assert!(
        items(&p, ItemKind::Rps)
            .iter()
            .all(|i| CpuSet::parse_mask(&i.desired).unwrap().is_empty())
    );

    // tuned-ixgbe-16cpu: already one queue per core; the plan moves no IRQ and sets no RPS.
    let p = plan_tree(&fixture("tuned-ixgbe-16cpu"), &opts(Profile::Balanced));
    let moves: Vec<_> = p
        .changes()
        .filter(|i| {
            matches!(
                i.kind,
                ItemKind::IrqAffinity | ItemKind::Rps | ItemKind::Xps
            )
        })
        .map(|i| i.id.clone())
        .collect();
    assert!(moves.is_empty(), "a well-tuned host got moves: {moves:?}");

    // --cpus restricts every CPU the plan uses.
    let only = PlanOptions {
        cpus: Some(CpuSet::parse_list("2-5", None).unwrap()),
        ..opts(Profile::Throughput)
    };
    let p = plan_tree(&fixture("kvm-virtio-16cpu"), &only);
    for i in items(&p, ItemKind::IrqAffinity) {
        assert!(
            CpuSet::parse_list(&i.desired, None)
                .unwrap()
                .is_subset(&CpuSet::parse_list("2-5", None).unwrap())
        );
    }
    let rps = CpuSet::parse_mask(&items(&p, ItemKind::Rps)[0].desired).unwrap();
    assert!(rps.is_subset(&CpuSet::parse_list("2-5", None).unwrap()) && !rps.is_empty());
}

#[test]
fn bad_devices_and_cpus_are_refused_by_name() {
    let fs = HostFs::open(fixture("dev-vm")).unwrap();
    let view = read_host(&fs, None);
    for (dev, want) in [
        ("../eth0", "not an interface name"),
        ("eth0/../x", "not an interface name"),
        ("", "not an interface name"),
        ("a-very-long-interface-name", "not an interface name"),
        ("eth9", "no such interface"),
    ] {
        let o = PlanOptions {
            devices: vec![dev.into()],
            ..opts(Profile::Balanced)
        };
        let e = plan(&view, &o).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("--dev"), "{dev}: {e}");
    }
    let o = PlanOptions {
        cpus: Some(CpuSet::parse_list("64-65", None).unwrap()),
        ..opts(Profile::Balanced)
    };
    let e = plan(&view, &o).unwrap_err().to_string();
    assert!(e.contains("--cpus 64-65"), "{e}");
}

#[test]
fn a_rollback_after_a_torn_journal_still_restores() {
    // A crash while appending leaves half a line: rollback ignores it and restores the rest.
    let tree = copy_tree(&fixture("kvm-virtio-16cpu"));
    let state = tempfile::tempdir().unwrap();
    let before = contents(tree.path());
    let o = opts(Profile::Throughput);
    let report = apply_tree(tree.path(), state.path(), &o, &|b| Box::new(Plain(b)));
    let mut text = fs::read_to_string(&report.journal).unwrap();
    text.push_str("{\"type\":\"write\",\"id\":\"rps/et");
    fs::write(&report.journal, text).unwrap();
    let fs_ = HostFs::open(tree.path()).unwrap();
    let nic = TreeNic::new(tree.path());
    let backend = HostBackend { fs: fs_, nic: &nic };
    let r = rollback(
        Path::new(&report.journal),
        &root_name(tree.path()),
        &backend,
    )
    .unwrap();
    assert_eq!(r.status, RollbackStatus::Restored, "{r:?}");
    assert_eq!(contents(tree.path()), before);
    // A journal for another root is refused by name.
    let e = rollback(Path::new(&report.journal), "/elsewhere", &backend).unwrap_err();
    assert!(e.to_string().contains("/elsewhere"), "{e}");
}

/// Step-aside holds for every rollback: a knob whose writer recorded it as given up
/// ([`journal::give_up`], what `watch` does when a person rewrites its knob) keeps the
/// person's value when the journal is rolled back later — by the watcher's guard, at its
/// exit, or by `tune rollback` — while everything else the journal wrote is restored.
#[test]
fn a_rollback_leaves_a_knob_given_up_to_another_writer() {
    let tree = copy_tree(&fixture("kvm-virtio-16cpu"));
    let state = tempfile::tempdir().unwrap();
    let before = contents(tree.path());
    let report = apply_tree(
        tree.path(),
        state.path(),
        &opts(Profile::Throughput),
        &|b| Box::new(Plain(b)),
    );
    let changed: Vec<_> = report
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Changed)
        .collect();
    let mut files = changed.iter().filter_map(|s| {
        s.target
            .strip_prefix('/')
            .filter(|_| s.target.starts_with("/proc/sys/") || s.target.contains("/queues/"))
            .map(|p| (s.id.clone(), p.to_string()))
    });
    let (id, file) = files.next().expect("a file the throughput profile changed");
    assert!(files.next().is_some(), "a second changed file: {changed:?}");
    // The person's write, then the writer gives the knob up.
    let person = if file.ends_with("rps_cpus") || file.ends_with("xps_cpus") {
        "3"
    } else {
        "777"
    };
    fs::write(tree.path().join(&file), format!("{person}\n")).unwrap();
    journal::give_up(
        Path::new(&report.journal),
        &id,
        person,
        "rewritten by someone else",
    )
    .unwrap();
    let r = rollback_tree(tree.path(), &report.journal);
    assert_eq!(r.status, RollbackStatus::Restored, "{r:?}");
    assert_eq!(r.given_up, std::slice::from_ref(&id), "{r:?}");
    assert!(!r.restored.contains(&id), "{r:?}");
    let now = contents(tree.path());
    assert_eq!(
        fs::read_to_string(tree.path().join(&file)).unwrap().trim(),
        person,
        "the person's value of {file} was overwritten by the rollback"
    );
    // Everything else is as it was before the apply.
    let differs: Vec<_> = now
        .iter()
        .filter(|(p, b)| before.get(*p) != Some(*b))
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(differs.len(), 1, "{differs:?}");
    // Run again (a second rollback, e.g. `tune rollback` after the watcher's): nothing to do,
    // the person's value still there.
    let again = rollback_tree(tree.path(), &report.journal);
    assert_eq!(again.status, RollbackStatus::NothingToDo, "{again:?}");
    assert_eq!(contents(tree.path()), now);
}

/// A journal applied with `leave_rewritten` (as `watch` applies) is rolled back around a
/// knob someone rewrote since, even with no given-up record (the watcher was killed before
/// it saw the rewrite: an attack review's `tune rollback --state-dir ST/watch` put 1000 back
/// over a person's 5000); the rest is restored, and the knob is recorded as given up. A
/// journal without it restores everything, as `tune rollback` always has.
#[test]
fn a_journal_that_leaves_rewritten_knobs_is_rolled_back_around_them() {
    for leave in [true, false] {
        let tree = copy_tree(&fixture("kvm-virtio-16cpu"));
        let state = tempfile::tempdir().unwrap();
        let before = contents(tree.path());
        let root = tree.path();
        let p = plan_tree(root, &opts(Profile::Throughput));
        let nic = TreeNic::new(root);
        let backend = HostBackend {
            fs: HostFs::open(root).unwrap(),
            nic: &nic,
        };
        let mut replan = || Ok(plan_tree(root, &opts(Profile::Throughput)));
        let report = apply(
            &p,
            &root_name(root),
            &backend,
            state.path(),
            &mut replan,
            &ApplyOptions {
                leave_rewritten: leave,
                ..ApplyOptions::default()
            },
        )
        .unwrap();
        let step = report
            .steps
            .iter()
            .find(|s| s.status == StepStatus::Changed && s.target.starts_with("/proc/sys/net/"))
            .expect("a sysctl the throughput profile changed");
        let file = root.join(&step.target[1..]);
        fs::write(&file, "5000\n").unwrap();
        let r = rollback_tree(root, &report.journal);
        assert_eq!(r.status, RollbackStatus::Restored, "{r:?}");
        let now = fs::read_to_string(&file).unwrap();
        if leave {
            assert_eq!(
                now.trim(),
                "5000",
                "the person's value was overwritten: {r:?}"
            );
            assert_eq!(r.given_up, std::slice::from_ref(&step.id), "{r:?}");
            let records = journal::read(Path::new(&report.journal)).unwrap();
            assert!(journal::given_up(&records).contains(&step.id));
            let mut after = contents(root);
            after.retain(|p, _| !file.ends_with(p));
            let mut was = before.clone();
            was.retain(|p, _| !file.ends_with(p));
            assert_eq!(after, was, "everything else restored");
        } else {
            assert!(r.given_up.is_empty(), "{r:?}");
            assert_eq!(contents(root), before);
        }
    }
}

#[test]
fn seed_000_reserved_queue_leaves_the_rss_table_and_comes_back() {
    // Seed 000 keeps queue 0 for SSH and BGP: RSS gives it no hash bucket, the other ten queues
    // share the 128 buckets, and the plan names the n-tuple rules to steer the ports there.
    let tree = copy_tree(&fixture("cloudflare-24cpu"));
    let before = contents(tree.path());
    let o = PlanOptions {
        reserve_queue: Some(0),
        ports: vec![22, 179],
        ..opts(Profile::Balanced)
    };
    let p = plan_tree(tree.path(), &o);
    let rss = items(&p, ItemKind::Rss);
    assert_eq!(rss.len(), 1);
    assert_eq!(rss[0].action, Action::Change);
    let table: Vec<u32> = rss[0]
        .desired
        .split(' ')
        .map(|q| q.parse().unwrap())
        .collect();
    assert_eq!(table.len(), 128);
    assert!(!table.contains(&0));
    for q in 1..=10 {
        let n = table.iter().filter(|x| **x == q).count();
        assert!((12..=13).contains(&n), "queue {q} has {n} buckets");
    }
    // The n-tuple rules are items now, applied and rolled back like the table: TCP and UDP to
    // ports 22 and 179 steered to queue 0.
    let rules = items(&p, ItemKind::Ntuple);
    let ids: Vec<&str> = rules.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "nic/eth2/ntuple/tcp4-dst-port-22",
            "nic/eth2/ntuple/udp4-dst-port-22",
            "nic/eth2/ntuple/tcp4-dst-port-179",
            "nic/eth2/ntuple/udp4-dst-port-179"
        ]
    );
    assert!(
        rules
            .iter()
            .all(|i| i.action == Action::Change && i.current.as_deref() == Some(""))
    );
    assert_eq!(rules[3].desired, "flow-type udp4 dst-port 179 action 0");
    // Without a reservation the driver's even table is already what balanced wants.
    let plain = plan_tree(tree.path(), &opts(Profile::Balanced));
    assert_eq!(items(&plain, ItemKind::Rss)[0].action, Action::Keep);

    let state = tempfile::tempdir().unwrap();
    let report = apply_tree(tree.path(), state.path(), &o, &|b| Box::new(Plain(b)));
    assert!(
        report
            .steps
            .iter()
            .any(|s| s.id == "nic/eth2/rss/indirection" && s.status == StepStatus::Changed),
        "{report:?}"
    );
    let nic = TreeNic::new(tree.path());
    let now = nic
        .settings("eth2")
        .rss
        .known()
        .unwrap()
        .indirection
        .clone();
    assert_eq!(now, table);
    let eth2 = nic.settings("eth2");
    let rules = eth2.ntuple().unwrap();
    assert_eq!(
        rules.len(),
        5,
        "four new rules beside the foreign one: {rules:#?}"
    );
    assert_eq!(rules[0].queue, Some(3), "the foreign rule keeps location 0");
    assert!(
        rules[1..]
            .iter()
            .all(|r| r.queue == Some(0) && r.location > 0)
    );
    // A reservation past the last queue is a note, not an item.
    let far = PlanOptions {
        reserve_queue: Some(40),
        ..opts(Profile::Balanced)
    };
    let p = plan_tree(tree.path(), &far);
    assert!(
        p.notes.iter().any(|n| n.contains("--reserve-queue 40")),
        "{:?}",
        p.notes
    );
    rollback_tree(tree.path(), &report.journal);
    assert_eq!(contents(tree.path()), before);
}

/// Per-NAPI items on a tree (ixgbe-napi-16cpu): the latency profile turns NAPI 8196's hard-IRQ
/// deferral off; `--napi irq-suspend` with `--profile none` plans the three settings on all
/// eight NAPIs and nothing else; applying writes them into the tree's recorded NIC state and
/// rollback restores it byte for byte. A tree without a netdev view says why it plans none.
#[test]
fn napi_items_plan_apply_and_roll_back_on_a_tree() {
    let tree = copy_tree(&fixture("ixgbe-napi-16cpu"));
    let before = contents(tree.path());
    let latency = plan_tree(tree.path(), &opts(Profile::Latency));
    let napi: Vec<_> = items(&latency, ItemKind::Napi);
    assert_eq!(napi.len(), 16, "defer and gro-flush on 8 NAPIs: {napi:#?}");
    let changes: Vec<&str> = napi
        .iter()
        .filter(|i| i.action == Action::Change)
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(
        changes,
        [
            "nic/eth0/napi/8196/defer-hard-irqs",
            "nic/eth0/napi/8196/gro-flush-timeout"
        ]
    );

    let o = PlanOptions {
        napi: Some(NapiMode::IrqSuspend),
        devices: vec!["eth0".into()],
        ..opts(Profile::None)
    };
    let p = plan_tree(tree.path(), &o);
    assert!(p.items.iter().all(|i| i.kind == ItemKind::Napi));
    assert_eq!(p.items.len(), 24);
    let state = tempfile::tempdir().unwrap();
    let report = apply_tree(tree.path(), state.path(), &o, &|b| Box::new(Plain(b)));
    let nd = TreeNic::new(tree.path()).settings("eth0");
    let nd = nd.netdev().unwrap();
    for n in &nd.napis {
        assert_eq!(
            (
                n.defer_hard_irqs,
                n.gro_flush_timeout_ns,
                n.irq_suspend_timeout_ns
            ),
            (Some(2), Some(200_000), Some(20_000_000)),
            "NAPI {}",
            n.id
        );
    }
    let r = rollback_tree(tree.path(), &report.journal);
    assert!(r.failed.is_empty(), "{r:?}");
    assert_eq!(contents(tree.path()), before);

    let old = plan_tree(&fixture("tuned-ixgbe-16cpu"), &o);
    assert!(old.items.is_empty());
    assert!(
        old.notes.iter().any(|n| n.contains("not recorded")),
        "{:?}",
        old.notes
    );
}

/// A saved plan (as `tune plan --json` writes it) applied to another host of the same shape:
/// the same values land, a second apply of the same file changes nothing, and rollback makes the
/// tree byte-identical again.
#[test]
fn a_saved_plan_applies_the_same_state_on_another_host_and_twice_changes_nothing() {
    use netsteer_steering::tune::saved;
    let reviewed = plan_tree(&fixture("kvm-virtio-16cpu"), &opts(Profile::Throughput));
    let text = serde_json::to_string(&reviewed).unwrap();
    let host = copy_tree(&fixture("kvm-virtio-16cpu"));
    let before = contents(host.path());
    let state = tempfile::tempdir().unwrap();
    let apply_saved = || {
        let fs = HostFs::open(host.path()).unwrap();
        let nic = TreeNic::new(host.path());
        let settings = |n: &str| nic.settings(n);
        let view = read_host(&fs, Some(&settings));
        let p = saved::for_host(&saved::parse(&text).unwrap(), &view).unwrap();
        let backend = HostBackend { fs, nic: &nic };
        let mut replan = || Ok(p.clone());
        apply(
            &p,
            &root_name(host.path()),
            &backend,
            state.path(),
            &mut replan,
            &ApplyOptions::default(),
        )
        .unwrap()
    };
    let first = apply_saved();
    assert_eq!(first.status, ApplyStatus::Applied, "{first:?}");
    let changed = first
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Changed)
        .count();
    assert_eq!(changed, reviewed.changes().count(), "{:?}", first.steps);
    let second = apply_saved();
    assert_eq!(second.status, ApplyStatus::Applied);
    assert!(
        second.steps.iter().all(|s| s.status != StepStatus::Changed),
        "{:?}",
        second.steps
    );
    let r = rollback_tree(host.path(), &first.journal);
    assert!(r.failed.is_empty(), "{r:?}");
    assert_eq!(contents(host.path()), before);
}

#[test]
fn a_saved_plan_finds_renumbered_irqs_by_name_and_refuses_a_missing_device() {
    use netsteer_steering::tune::saved::{self, SavedPlanError};
    let root = fixture("kvm-virtio-16cpu");
    let reviewed = plan_tree(&root, &opts(Profile::Throughput));
    let fs = HostFs::open(&root).unwrap();
    let mut view = read_host(&fs, None);
    // The other host booted with its NIC's IRQs 100 higher.
    for nic in &mut view.nics {
        for irq in &mut nic.irqs {
            irq.irq += 100;
        }
    }
    let p = saved::for_host(&reviewed, &view).unwrap();
    let irq_items: Vec<_> = items(&p, ItemKind::IrqAffinity);
    assert!(!irq_items.is_empty());
    let mut moved = 0;
    for (new, old) in irq_items
        .iter()
        .zip(items(&reviewed, ItemKind::IrqAffinity))
    {
        if old.label.is_none() || matches!(old.action, Action::Skip(_)) {
            continue;
        }
        let n: u32 = old.id["irq/".len()..].parse().unwrap();
        assert_eq!(new.id, format!("irq/{}", n + 100));
        assert_eq!(
            new.target.to_string(),
            old.target
                .to_string()
                .replace(&format!("/irq/{n}/"), &format!("/irq/{}/", n + 100))
        );
        moved += 1;
    }
    assert!(moved > 0);
    // No keep is left: what was already right there is wanted here too.
    assert!(p.items.iter().all(|i| i.action != Action::Keep));
    // A host without the plan's device is refused by name, before anything is written.
    let mut other = view.clone();
    other.nics.retain(|n| !reviewed.devices.contains(&n.name));
    assert_eq!(
        saved::for_host(&reviewed, &other).unwrap_err(),
        SavedPlanError::MissingDevice(reviewed.devices[0].clone())
    );
    let mut old = serde_json::to_value(&reviewed).unwrap();
    old["schema_version"] = 99.into();
    assert_eq!(
        saved::parse(&old.to_string()).unwrap_err(),
        SavedPlanError::Schema { found: 99 }
    );
    assert!(matches!(
        saved::parse("{\"items\": 3}"),
        Err(SavedPlanError::Parse(_))
    ));
}

/// `Tuner::apply_verified` through the experiment's seams: a scripted benchmark and a manual
/// clock. Better beyond the noise is kept (the applied plan is recorded); within or worse
/// beyond the noise is rolled back to the byte; a failed "after" run rolls back and errs.
#[test]
fn a_verified_apply_keeps_only_a_change_better_beyond_the_noise() {
    use netsteer_experiment::clock::ManualClock;
    use netsteer_experiment::experiment::{Metric, Verdict};
    use netsteer_steering::tune::{Check, Side, TuneError, Tuner};
    let src = fixture("kvm-virtio-16cpu");
    // (before, after) p50 values per run; None: the after run fails.
    /// (name, before runs, after runs (None: they fail), the verdict wanted).
    type Case = (&'static str, [f64; 3], Option<[f64; 3]>, Option<Verdict>);
    let cases: [Case; 4] = [
        (
            "better",
            [100.0, 101.0, 99.0],
            Some([50.0, 51.0, 49.0]),
            Some(Verdict::Better),
        ),
        (
            "same",
            [100.0, 101.0, 99.0],
            Some([100.5, 99.5, 100.0]),
            Some(Verdict::WithinNoise),
        ),
        (
            "worse",
            [100.0, 101.0, 99.0],
            Some([150.0, 151.0, 149.0]),
            Some(Verdict::Worse),
        ),
        ("broken", [100.0, 101.0, 99.0], None, None),
    ];
    for (name, before, after, want) in cases {
        let tree = copy_tree(&src);
        let state = tempfile::tempdir().unwrap();
        let original = contents(tree.path());
        let fs = HostFs::open(tree.path()).unwrap();
        let nic = Box::new(TreeNic::new(tree.path()));
        let t = Tuner::with_nic(fs, nic, true, Some(state.path().to_path_buf())).unwrap();
        let o = opts(Profile::Throughput);
        let p = t.plan(&o).unwrap();
        let clock = ManualClock::new(0);
        let mut calls = Vec::new();
        let mut measure =
            |side: Side, repeat: u32| -> Result<f64, netsteer_experiment::experiment::BoxError> {
                clock.advance(1_000_000);
                calls.push((side, repeat));
                let i = repeat as usize - 1;
                match (side, after) {
                    (Side::Before, _) => Ok(before[i]),
                    (Side::After, Some(a)) => Ok(a[i]),
                    (Side::After, None) => Err("the benchmark crashed".into()),
                }
            };
        let check = Check {
            metric: Metric::P50,
            repeats: 3,
        };
        let r = t.apply_verified(
            &p,
            Some(&o),
            &ApplyOptions::default(),
            check,
            &mut measure,
            &clock,
        );
        let applied = journal::read_applied(state.path()).unwrap();
        match want {
            Some(v) => {
                let r = r.unwrap();
                let d = r.closed_loop.as_ref().unwrap();
                assert_eq!(d.verdict, v, "{name}: {d:?}");
                assert_eq!(r.report.status, ApplyStatus::Applied, "{name}");
                if v == Verdict::Better {
                    assert!(r.rollback.is_none() && applied.is_some(), "{name}");
                    assert_ne!(contents(tree.path()), original, "{name}: the change stays");
                } else {
                    assert_eq!(
                        r.rollback.as_ref().unwrap().status,
                        RollbackStatus::Restored,
                        "{name}"
                    );
                    assert!(applied.is_none(), "{name}: the applied plan is forgotten");
                    assert_eq!(contents(tree.path()), original, "{name}");
                }
            }
            None => {
                let e = r.unwrap_err();
                assert!(matches!(e, TuneError::VerifyFailed { .. }), "{name}: {e}");
                assert!(e.to_string().contains("the benchmark crashed"), "{e}");
                assert!(applied.is_none());
                assert_eq!(contents(tree.path()), original, "{name}");
            }
        }
        // Sequential: every before run, the apply, then the after runs (one if it failed).
        let befores: Vec<u32> = calls
            .iter()
            .filter(|c| c.0 == Side::Before)
            .map(|c| c.1)
            .collect();
        assert_eq!(befores, [1, 2, 3], "{name}");
        assert!(
            calls[..3].iter().all(|c| c.0 == Side::Before),
            "{name}: {calls:?}"
        );
    }
    // Fewer than two runs a side cannot know the noise.
    let tree = copy_tree(&src);
    let fs = HostFs::open(tree.path()).unwrap();
    let t = Tuner::with_nic(fs, Box::new(TreeNic::new(tree.path())), true, None).unwrap();
    let o = opts(Profile::Throughput);
    let p = t.plan(&o).unwrap();
    let check = Check {
        metric: Metric::P50,
        repeats: 1,
    };
    let e = t
        .apply_verified(
            &p,
            Some(&o),
            &ApplyOptions::default(),
            check,
            &mut |_, _| Ok(1.0),
            &ManualClock::new(0),
        )
        .unwrap_err();
    assert!(matches!(e, TuneError::TooFewRepeats(1)), "{e}");
}

/// A NIC driver's side effects on a tree: a channel count write re-initialises the device as
/// igb does (every queue IRQ back to all CPUs, the RSS table to the driver's default blocks for
/// the new count) or, with `virtio_61`, keeps reporting its table while the device stops
/// following it until the table is written again (virtio-net on 6.1 under QEMU).
struct Driver<'a> {
    inner: &'a dyn Backend,
    dev: &'static str,
    irqs: Vec<u32>,
    all_cpus: &'static str,
    virtio_61: bool,
    /// Whether the device follows the table the driver reports.
    followed: Cell<bool>,
    channel_writes: Cell<usize>,
    /// A table someone wrote (IFF_RXFH_CONFIGURED): the kernel then refuses a channel count
    /// at or below its highest queue (net/ethtool/channels.c, "requested channel counts are
    /// too low for existing indirection table settings"); a reset to the default clears it.
    configured: Cell<bool>,
}

impl Backend for Driver<'_> {
    fn read(&self, t: &Target) -> Result<String, StepError> {
        self.inner.read(t)
    }

    fn write(&self, t: &Target, v: &str) -> Result<(), StepError> {
        use netsteer_host::ethtool::NicKnob;
        if let Target::Nic {
            dev,
            knob: NicKnob::Channels(_),
        } = t
            && dev == self.dev
            && self.configured.get()
        {
            let table = self.inner.read(&Target::Nic {
                dev: dev.clone(),
                knob: NicKnob::RssIndirection,
            })?;
            let highest = table
                .split_whitespace()
                .filter_map(|q| q.parse::<u32>().ok())
                .max()
                .unwrap_or(0);
            if v.trim().parse::<u32>().unwrap() <= highest {
                return Err(StepError {
                    target: t.to_string(),
                    errno: Some(libc_einval()),
                    message: "requested channel counts are too low for existing indirection \
                              table settings"
                        .into(),
                });
            }
        }
        self.inner.write(t, v)?;
        if let Target::Nic {
            dev,
            knob: NicKnob::RssIndirection,
        } = t
            && dev == self.dev
        {
            self.configured
                .set(v.trim() != netsteer_host::ethtool::INDIRECTION_DEFAULT);
        }
        match t {
            Target::Nic {
                dev,
                knob: NicKnob::Channels(_),
            } if dev == self.dev => {
                self.channel_writes.set(self.channel_writes.get() + 1);
                if self.virtio_61 {
                    self.followed.set(false);
                    return Ok(());
                }
                let n: u32 = v.trim().parse().unwrap();
                let table = Target::Nic {
                    dev: dev.clone(),
                    knob: NicKnob::RssIndirection,
                };
                let size = self.inner.read(&table)?.split_whitespace().count() as u32;
                let default: Vec<String> = (0..size).map(|i| (i * n / size).to_string()).collect();
                self.inner.write(&table, &default.join(" "))?;
                for irq in &self.irqs {
                    self.inner.write(
                        &Target::IrqAffinity {
                            irq: *irq,
                            file: netsteer_steering::model::knob::IrqFile::List,
                        },
                        self.all_cpus,
                    )?;
                }
            }
            Target::Nic {
                knob: NicKnob::RssIndirection,
                ..
            } => self.followed.set(true),
            _ => {}
        }
        Ok(())
    }

    fn channel_dependents(
        &self,
        dev: &str,
    ) -> Vec<(String, Target, netsteer_steering::tune::Format)> {
        self.inner.channel_dependents(dev)
    }
}

/// Plans `knobs` (explicit `--set`s) and more on the cloudflare tree, applies them through a
/// [`Driver`] and rolls back through it; returns the apply report and the driver's state.
fn through_driver(
    virtio_61: bool,
    table: Option<Vec<u32>>,
    o: &PlanOptions,
    check: &dyn Fn(&netsteer_steering::tune::ApplyReport, &Driver),
) {
    use netsteer_host::ethtool::NicKnob;
    let tree = copy_tree(&fixture("cloudflare-24cpu"));
    let state = tempfile::tempdir().unwrap();
    let fs_ = HostFs::open(tree.path()).unwrap();
    let nic = TreeNic::new(tree.path());
    let host = HostBackend {
        fs: fs_.clone(),
        nic: &nic,
    };
    if let Some(t) = table {
        let text: Vec<String> = t.iter().map(u32::to_string).collect();
        host.write(
            &Target::Nic {
                dev: "eth2".into(),
                knob: NicKnob::RssIndirection,
            },
            &text.join(" "),
        )
        .unwrap();
    }
    let before = contents(tree.path());
    let settings = |n: &str| nic.settings(n);
    let view = read_host(&fs_, Some(&settings));
    let irqs: Vec<u32> = view
        .nic("eth2")
        .unwrap()
        .queue_irqs()
        .map(|i| i.irq)
        .collect();
    let driver = Driver {
        inner: &host,
        dev: "eth2",
        irqs,
        all_cpus: "0-23",
        virtio_61,
        followed: Cell::new(true),
        channel_writes: Cell::new(0),
        configured: Cell::new(false),
    };
    let p = plan_tree(tree.path(), o);
    let mut replan = || Ok(plan_tree(tree.path(), o));
    let report = apply(
        &p,
        &root_name(tree.path()),
        &driver,
        state.path(),
        &mut replan,
        &ApplyOptions::default(),
    )
    .unwrap();
    assert_eq!(report.status, ApplyStatus::Applied, "{report:?}");
    assert!(driver.channel_writes.get() >= 1, "{report:?}");
    check(&report, &driver);
    let r = rollback(Path::new(&report.journal), &root_name(tree.path()), &driver).unwrap();
    assert!(r.failed.is_empty(), "{r:?}");
    assert!(
        driver.followed.get(),
        "the table was not written again after the count"
    );
    assert_eq!(
        contents(tree.path()),
        before,
        "rollback left a difference (restored in the wrong order?)"
    );
}

fn knobs(sets: &[&str]) -> Vec<netsteer_steering::tune::Knob> {
    sets.iter()
        .map(|s| netsteer_steering::tune::Knob::parse(s).unwrap())
        .collect()
}

#[test]
fn a_channel_change_is_undone_count_first_and_what_the_driver_reset_comes_back() {
    // igb-like: the count write resets the table and every queue IRQ. Rolled back newest
    // first, the count would come back last and reset the restored table and IRQs again.
    let mut o = opts(Profile::Balanced);
    o.devices = vec!["eth2".into()];
    o.knobs = knobs(&[
        "nic/eth2/channels/combined=6",
        "nic/eth2/coalesce/rx-usecs=50",
    ]);
    through_driver(false, None, &o, &|report, _| {
        let step = |id: &str| report.steps.iter().find(|s| s.id == id).cloned();
        assert_eq!(
            step("nic/eth2/channels/combined").unwrap().status,
            StepStatus::Changed
        );
        assert!(step("nic/eth2/rss/indirection").is_some(), "{report:?}");
    });
}

#[test]
fn a_grown_count_with_its_table_written_goes_back_down() {
    // The profile grows the channels and writes a table over the new queues: the table is
    // then configured, and the kernel refuses the smaller count while the table names the
    // queues above it (seen in a `tune search --against` on igb: "rolling back …:
    // incomplete"). Rollback resets the table to the default before the count goes down,
    // then puts the table back as it was.
    let mut o = opts(Profile::Balanced);
    o.devices = vec!["eth2".into()];
    o.knobs = knobs(&["nic/eth2/channels/combined=16"]);
    through_driver(false, None, &o, &|report, driver| {
        assert!(
            report
                .steps
                .iter()
                .any(|s| s.id == "nic/eth2/rss/indirection"),
            "{report:?}"
        );
        assert!(driver.configured.get(), "the apply wrote no table");
    });
}

#[test]
fn after_a_channel_change_the_table_is_written_even_when_it_reads_as_wanted() {
    // virtio-net on 6.1: the count write leaves the reported table as it was and the device
    // stops following it. A table that already reads as planned for the new count (six queues
    // used of eleven, then six channels) must still be written again, at apply and rollback.
    let mut o = opts(Profile::Balanced);
    o.devices = vec!["eth2".into()];
    o.knobs = knobs(&["nic/eth2/channels/combined=6"]);
    let six: Vec<u32> = (0..128).map(|i| i % 6).collect();
    through_driver(true, Some(six), &o, &|report, driver| {
        assert!(driver.followed.get(), "apply left the device off its table");
        let t = report
            .steps
            .iter()
            .find(|s| s.id == "nic/eth2/rss/indirection")
            .unwrap_or_else(|| panic!("no table step: {report:?}"));
        assert_eq!(t.status, StepStatus::Rewritten, "{t:?}");
    });
}

/// A count the kernel would round is refused before any write, with the count that holds.
#[test]
fn a_count_the_kernel_rounds_is_refused_with_the_one_that_reads_back() {
    use netsteer_steering::tune::Knob;
    let e = Knob::parse("/sys/class/net/eth2/queues/rx-0/rps_flow_cnt=1000")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rps_flow_cnt=1000")
            && e.contains("would read back as 1024: ask for 1024 (or 512)"),
        "{e}"
    );
    let e = Knob::parse("/proc/sys/net/core/rps_sock_flow_entries=40000")
        .unwrap_err()
        .to_string();
    assert!(e.contains("would read back as 65536"), "{e}");
    let e = Knob::parse("/proc/sys/net/core/rps_sock_flow_entries=1073741824")
        .unwrap_err()
        .to_string();
    assert!(e.contains("caps rps_sock_flow_entries at 536870912"), "{e}");
    for ok in [
        "/sys/class/net/eth2/queues/rx-0/rps_flow_cnt=1024",
        "/sys/class/net/eth2/queues/rx-0/rps_flow_cnt=0",
        "/proc/sys/net/core/rps_sock_flow_entries=32768",
        // Not a count the kernel rounds.
        "/proc/sys/net/core/netdev_budget=1000",
    ] {
        Knob::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn explicit_nic_knobs_are_checked_and_name_what_is_wrong() {
    use netsteer_steering::tune::Knob;
    for bad in [
        "nic/eth2/channels/bogus=4",
        "nic/eth2/rss/weight=1 x",
        "nic/../x/coalesce/rx-usecs=1",
        "nic/eth2/flow-hash/sctp4=sdfn",
        "nic/eth2/coalesce/rx usecs=1",
    ] {
        assert!(Knob::parse(bad).is_err(), "{bad}");
    }
    let tree = copy_tree(&fixture("cloudflare-24cpu"));
    let mut o = opts(Profile::None);
    o.knobs = knobs(&["nic/eth2/rss/weight=1 1 1 1 1 1 0 0 0 0 0"]);
    let p = plan_tree(tree.path(), &o);
    let item = p
        .items
        .iter()
        .find(|i| i.id == "nic/eth2/rss/indirection")
        .unwrap();
    let table: Vec<u32> = item
        .desired
        .split_whitespace()
        .map(|q| q.parse().unwrap())
        .collect();
    assert_eq!(table.len(), 128);
    assert!(table.iter().all(|q| *q < 6), "{table:?}");
    assert!(item.rewrite, "an explicit table is always written");
    // A device that is not there: named.
    o.knobs = knobs(&["nic/eth9/coalesce/rx-usecs=0"]);
    let fs_ = HostFs::open(tree.path()).unwrap();
    let nic = TreeNic::new(tree.path());
    let settings = |n: &str| nic.settings(n);
    let view = read_host(&fs_, Some(&settings));
    let err = plan(&view, &o).unwrap_err().to_string();
    assert!(err.contains("eth9"), "{err}");
}

/// A driver that accepts every write of one NIC setting and keeps its value.
struct Ignores<'a> {
    inner: &'a dyn Backend,
    id_part: &'static str,
}

impl Backend for Ignores<'_> {
    fn read(&self, t: &Target) -> Result<String, StepError> {
        self.inner.read(t)
    }
    fn write(&self, t: &Target, v: &str) -> Result<(), StepError> {
        if t.to_string().contains(self.id_part) {
            return Ok(());
        }
        self.inner.write(t, v)
    }
}

#[test]
fn a_setting_the_driver_ignores_is_a_skip_and_not_drift() {
    let tree = copy_tree(&fixture("cloudflare-24cpu"));
    let state = tempfile::tempdir().unwrap();
    let o = opts(Profile::Latency);
    let planned = plan_tree(tree.path(), &o);
    let coalesce = planned
        .changes()
        .find(|i| i.id.contains("/coalesce/"))
        .expect("latency changes coalescing on this host")
        .id
        .clone();
    let report = apply_tree(tree.path(), state.path(), &o, &|b| {
        Box::new(Ignores {
            inner: b,
            id_part: " coalesce ",
        })
    });
    assert_eq!(report.status, ApplyStatus::Applied, "{report:?}");
    let step = report.steps.iter().find(|s| s.id == coalesce).unwrap();
    assert_eq!(step.status, StepStatus::Skipped, "{step:?}");
    assert!(step.why.as_deref().unwrap().contains("kept"), "{step:?}");
    // The kept plan says so, and verify does not call it drift.
    let applied: Plan =
        serde_json::from_slice(&fs::read(journal::applied_plan_path(state.path())).unwrap())
            .unwrap();
    let item = applied.items.iter().find(|i| i.id == coalesce).unwrap();
    assert!(matches!(item.action, Action::Skip(_)), "{item:?}");
    let fs_ = HostFs::open(tree.path()).unwrap();
    let nic = TreeNic::new(tree.path());
    let backend = HostBackend {
        fs: fs_.clone(),
        nic: &nic,
    };
    let settings = |n: &str| nic.settings(n);
    let view = read_host(&fs_, Some(&settings));
    let v = verify(&applied, &backend, &view);
    assert!(v.drift.is_empty(), "{:?}", v.drift);
}

/// An item's kind and format are its target's (`Target::kind`, `Target::format`): what a
/// plan says of a knob is what the knob is, on every captured and real tree, every profile.
#[test]
fn every_planned_item_has_its_targets_kind_and_format() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut trees: Vec<_> = ["hosts", "real"]
        .iter()
        .flat_map(|d| fs::read_dir(root.join(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    trees.sort();
    let mut seen = 0;
    let mut wrong = Vec::new();
    for tree in &trees {
        for profile in PROFILES {
            for o in [opts(*profile), leave(*profile)] {
                let fs = HostFs::open(tree).unwrap();
                let nic = TreeNic::new(tree);
                let settings = |n: &str| nic.settings(n);
                let view = read_host(&fs, Some(&settings));
                let Ok(p) = plan(&view, &o) else { continue };
                // A skipped item may name what could not be read (a queues directory that
                // was not listed): not a knob, never written.
                for i in p
                    .items
                    .iter()
                    .filter(|i| !matches!(i.action, Action::Skip(_)))
                {
                    seen += 1;
                    if i.kind != i.target.kind() || i.format != i.target.format() {
                        wrong.push(format!(
                            "{}: {} {:?}/{:?} but its target {} is {:?}/{:?}",
                            tree.display(),
                            i.id,
                            i.kind,
                            i.format,
                            i.target,
                            i.target.kind(),
                            i.target.format()
                        ));
                    }
                }
            }
        }
    }
    assert!(seen > 1000, "{seen} items planned");
    wrong.dedup();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Header split and its threshold as items of the transaction. On a tree whose driver reports
/// them (the attributes a bnxt or netdevsim answers RINGS_GET with, written into a real
/// virtio-net guest's recorded state), `--set` plans, applies, reads back and rolls back byte
/// for byte; on the same device as captured, which reports neither, both are skipped with the
/// reason and nothing is written; a threshold past the device's maximum fails and is undone.
#[test]
fn header_split_items_apply_where_reported_and_are_refused_where_not() {
    let split = [
        "nic/eth0/rings/tcp-data-split=1",
        "nic/eth0/rings/hds-thresh=256",
    ];
    let mut o = opts(Profile::None);
    o.knobs = knobs(&split);

    let plain = copy_tree(&fixture("virtio-rss-6.12"));
    let before = contents(plain.path());
    let p = plan_tree(plain.path(), &o);
    for id in ["nic/eth0/rings/tcp-data-split", "nic/eth0/rings/hds-thresh"] {
        let item = p.items.iter().find(|i| i.id == id).unwrap();
        assert!(
            matches!(&item.action, netsteer_steering::tune::Action::Skip(why) if why.contains("reports no header")),
            "{item:?}"
        );
    }
    let state = tempfile::tempdir().unwrap();
    let report = apply_tree(plain.path(), state.path(), &o, &|b| Box::new(Plain(b)));
    assert_eq!(report.status, ApplyStatus::Applied, "{report:?}");
    assert_eq!(report.changed(), 0, "{report:?}");
    for k in split {
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.starts_with(&format!("{k} not set: the driver reports no header"))),
            "{k}: {report:?}"
        );
    }
    assert_eq!(contents(plain.path()), before);

    let tree = copy_tree(&fixture("virtio-rss-6.12"));
    let file = tree.path().join("netsteer/ethtool.json");
    let mut e: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    let rings = &mut e["eth0"]["rings"];
    rings["tcp_data_split"] = "disabled".into();
    rings["hds_thresh"] = 0.into();
    rings["hds_thresh_max"] = 1024.into();
    let e: netsteer_host::ethtool::TreeEthtool = serde_json::from_value(e).unwrap();
    fs::write(&file, netsteer_host::ethtool::tree_ethtool_text(&e)).unwrap();
    let before = contents(tree.path());
    let state = tempfile::tempdir().unwrap();
    let report = apply_tree(tree.path(), state.path(), &o, &|b| Box::new(Plain(b)));
    assert_eq!(report.status, ApplyStatus::Applied, "{report:?}");
    for (id, old, new) in [
        ("nic/eth0/rings/tcp-data-split", "0", "1"),
        ("nic/eth0/rings/hds-thresh", "0", "256"),
    ] {
        let s = report.steps.iter().find(|s| s.id == id).unwrap();
        assert_eq!(
            (s.status, s.old.as_str(), s.new.as_str()),
            (StepStatus::Changed, old, new),
            "{s:?}"
        );
    }
    let r = TreeNic::new(tree.path())
        .settings("eth0")
        .rings
        .known()
        .cloned()
        .unwrap();
    assert_eq!(
        (r.tcp_data_split, r.hds_thresh),
        (Some(netsteer_host::ethtool::DataSplit::Enabled), Some(256))
    );
    let back = rollback_tree(tree.path(), &report.journal);
    assert_eq!(back.status, RollbackStatus::Restored, "{back:?}");
    assert_eq!(contents(tree.path()), before, "rollback left a difference");

    // Past the maximum the device states, or a split that is not 0/1: refused when planning,
    // naming the bound, before anything is journaled or written.
    let fs_ = HostFs::open(tree.path()).unwrap();
    let nic = TreeNic::new(tree.path());
    let settings = |n: &str| nic.settings(n);
    let view = read_host(&fs_, Some(&settings));
    for (set, why) in [
        (
            "nic/eth0/rings/hds-thresh=4096",
            "above the device's maximum 1024",
        ),
        ("nic/eth0/rings/tcp-data-split=2", "is 0 (off) or 1 (on)"),
    ] {
        o.knobs = knobs(&["nic/eth0/rings/tcp-data-split=1", set]);
        let e = plan(&view, &o).unwrap_err().to_string();
        assert!(e.contains(set) && e.contains(why), "{e}");
    }
    // A knob given twice is planned once, as the last says, and its earlier refusal is not
    // left in the notes.
    o.knobs = knobs(&["nic/eth0/feature/rx-lro=1", "nic/eth0/feature/rx-lro=0"]);
    let p = plan(&view, &o).unwrap();
    let lro: Vec<&String> = p.notes.iter().filter(|n| n.contains("rx-lro")).collect();
    assert_eq!(lro.len(), 1, "{:?}", p.notes);
    assert!(
        lro[0].starts_with("nic/eth0/feature/rx-lro=0 not set"),
        "{lro:?}"
    );
    assert_eq!(contents(tree.path()), before);
}
