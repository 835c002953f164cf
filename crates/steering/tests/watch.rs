//! `netsteer watch`'s reflexes on a copy of seed 003's guest tree, through the real Tuner (its
//! journal, writes, read-backs and rollbacks in the tree), fed one interval at a time with
//! injected rates: advice after the hysteresis, caps that hold against a signal asking for
//! more forever, a guard that rolls back and puts its reflex to sleep, a person's write never
//! fought, a restart that adopts what it owns, and ids that do not change between runs.

mod common;

use common::{contents, copy_tree, fixture};
use netsteer_host::sample::{CpuRates, Rates};
use netsteer_host::view::HostView;
use netsteer_host::{CpuSet, HostFs, read_host};
use netsteer_steering::doctor::{Load, LoadSource};
use netsteer_steering::tune::Tuner;
use netsteer_steering::watch::{Event, Reflex, WatchConfig, Watcher, read_advice};
use std::path::Path;
use std::time::Duration;

const BACKLOG: &str = "proc/sys/net/core/netdev_max_backlog";
const BUDGET: &str = "proc/sys/net/core/netdev_budget";
const BUDGET_USECS: &str = "proc/sys/net/core/netdev_budget_usecs";
const FLOW_LIMIT: &str = "proc/sys/net/core/flow_limit_cpu_bitmap";

/// A tree, its state directory (outside the tree) and a watcher over them.
struct Rig {
    tree: tempfile::TempDir,
    state: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            tree: copy_tree(&fixture("kvm-virtio-16cpu")),
            state: tempfile::tempdir().unwrap(),
        }
    }

    fn fs(&self) -> HostFs {
        HostFs::open(self.tree.path()).unwrap()
    }

    fn watcher(&self, cfg: WatchConfig) -> (Watcher, Vec<Event>) {
        let tuner = Tuner::open(self.fs(), false, Some(self.state.path().to_path_buf())).unwrap();
        Watcher::new(cfg, tuner).unwrap()
    }

    fn view(&self) -> HostView {
        read_host(&self.fs(), None)
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.tree.path().join(rel))
            .unwrap()
            .trim()
            .to_string()
    }

    fn write(&self, rel: &str, v: &str) {
        std::fs::write(self.tree.path().join(rel), format!("{v}\n")).unwrap();
    }
}

/// One interval's rates: for each `(cpu, dropped/s, squeezed/s, softirq %)`, the rest idle.
fn load(cpus: &[(u32, f64, f64, f64)]) -> Load {
    let cpus = (0..16)
        .map(|c| {
            let (d, s, soft) = cpus
                .iter()
                .find(|x| x.0 == c)
                .map_or((0.0, 0.0, 0.0), |x| (x.1, x.2, x.3));
            CpuRates {
                cpu: c,
                soft,
                idle: 100.0 - soft,
                dropped: Some(d),
                squeezed: Some(s),
                processed: Some(1000.0),
                ..Default::default()
            }
        })
        .collect();
    Load {
        source: LoadSource::Sampled,
        seconds: 1.0,
        cpu: Rates {
            interval_s: 1.0,
            cpus,
            ..Default::default()
        },
        net: Default::default(),
    }
}

fn drops(cpu: u32, rate: f64) -> Load {
    load(&[(cpu, rate, 0.0, 5.0)])
}

fn squeezes(rate: f64, soft: f64) -> Load {
    load(&[(2, 0.0, rate, soft)])
}

/// A watcher that acts: `persist` intervals of hysteresis, a guard of `guard` intervals, no
/// minimum interval between actions.
fn acting(persist: u32, guard: u32) -> WatchConfig {
    WatchConfig {
        apply: true,
        persist,
        guard_intervals: guard,
        min_interval: Duration::ZERO,
        ..WatchConfig::default()
    }
}

/// Each action taken: when, its id, and the value each of its changes wrote.
fn actions(events: &[Event]) -> Vec<(f64, &str, Vec<&str>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Applied {
                at, id, changes, ..
            } => Some((
                *at,
                id.as_str(),
                changes.iter().map(|c| c.to.as_str()).collect(),
            )),
            _ => None,
        })
        .collect()
}

/// Each rollback: when, and why.
fn rolled_back(events: &[Event]) -> Vec<(f64, &String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::RolledBack { at, why, .. } => Some((*at, why)),
            _ => None,
        })
        .collect()
}

/// Asserts the guard passed the action `id`.
#[track_caller]
fn assert_passed(events: &[Event], id: &str) {
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::GuardPassed { id: i, .. } if i == id)),
        "no guard passed {id}: {events:?}"
    );
}

/// Asserts the action `id` was rolled back for a reason that contains `why`.
#[track_caller]
fn assert_rolled_back(events: &[Event], id: &str, why: &str) {
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::RolledBack { id: i, why: w, .. }
            if i == id && w.contains(why))),
        "{id} not rolled back for {why:?}: {events:?}"
    );
}

fn applied(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| matches!(e, Event::Applied { .. }))
        .collect()
}

/// Feeds `loads` one interval a second from `t0`, re-reading the tree after every change as
/// the live loop does; returns every event.
fn feed(rig: &Rig, w: &mut Watcher, t0: f64, loads: &[Load]) -> Vec<Event> {
    let mut out = Vec::new();
    let mut view = rig.view();
    for (i, l) in loads.iter().enumerate() {
        let ev = w.step(t0 + i as f64, &view, l);
        if ev
            .iter()
            .any(|e| matches!(e, Event::Applied { .. } | Event::RolledBack { .. }))
        {
            view = rig.view();
        }
        out.extend(ev);
    }
    out
}

fn advice_ids(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Advice { advice, .. } => Some(advice.id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn advice_comes_after_the_hysteresis_and_without_apply_nothing_is_written() {
    let rig = Rig::new();
    let before = contents(rig.tree.path());
    let (mut w, adopted) = rig.watcher(WatchConfig::default());
    assert!(adopted.is_empty());
    // CPU 4 drops 200 packets/s: nothing for two intervals, advice at the third (persist 3).
    let ev = feed(&rig, &mut w, 0.0, &[drops(4, 200.0), drops(4, 200.0)]);
    assert!(advice_ids(&ev).is_empty(), "{ev:?}");
    let ev = feed(&rig, &mut w, 2.0, &[drops(4, 200.0)]);
    let Some(Event::Advice { advice, .. }) = ev.first() else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (advice.id.as_str(), advice.reflex),
        ("backlog", Reflex::Backlog)
    );
    assert!(advice.evidence[0].contains("CPU 4 200/s"), "{advice:?}");
    let backlog = &advice.changes[0];
    assert_eq!(
        (
            backlog.path().as_str(),
            backlog.from.as_str(),
            backlog.to.as_str()
        ),
        ("/proc/sys/net/core/netdev_max_backlog", "1000", "2000")
    );
    // The flow limit as the hex mask the kernel parses (CPU 4 is 0x10, not decimal 16).
    let flow = &advice.changes[1];
    assert_eq!(flow.path(), "/proc/sys/net/core/flow_limit_cpu_bitmap");
    assert_eq!(flow.to, "0010");
    assert_eq!(
        CpuSet::parse_mask(&flow.to).unwrap(),
        [4].into_iter().collect::<CpuSet>()
    );
    // A second past what the backlog step was sized for moves the advice (1000 + twice the
    // worst second, 13,728, rounded up to a power of two); rates that move below that (a real
    // flood's do every second) say nothing again, and the agent's file holds it (the file is
    // written when the standing ids change, not every interval).
    let ev = feed(&rig, &mut w, 3.0, &[drops(4, 6364.0), drops(4, 410.0)]);
    let moved: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Advice { advice, .. } => Some(advice.changes[0].to.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(moved, ["16384"], "{ev:?}");
    let standing = read_advice(&rig.state.path().join("watch")).unwrap();
    assert_eq!(standing.len(), 1);
    assert_eq!(standing[0].id, "backlog");
    // Gone when the drops stop; advice mode never touched the tree.
    let ev = feed(&rig, &mut w, 5.0, &[drops(4, 0.0)]);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::AdviceGone { id, .. } if id == "backlog")),
        "{ev:?}"
    );
    assert!(
        read_advice(&rig.state.path().join("watch"))
            .unwrap()
            .is_empty()
    );
    assert_eq!(contents(rig.tree.path()), before);
}

#[test]
fn ids_are_the_same_in_every_run_for_the_same_evidence() {
    let (a, b) = (Rig::new(), Rig::new());
    let loads = [
        squeezes(50.0, 40.0),
        squeezes(50.0, 40.0),
        squeezes(50.0, 40.0),
    ];
    let (mut wa, _) = a.watcher(WatchConfig::default());
    let (mut wb, _) = b.watcher(WatchConfig::default());
    let (ea, eb) = (
        feed(&a, &mut wa, 0.0, &loads),
        feed(&b, &mut wb, 100.0, &loads),
    );
    assert_eq!(advice_ids(&ea), ["budget"]);
    let strip = |e: &[Event]| -> Vec<_> {
        e.iter()
            .filter_map(|e| match e {
                Event::Advice { advice, .. } => Some(advice.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(strip(&ea), strip(&eb));
}

#[test]
fn a_flapping_signal_never_fires() {
    let rig = Rig::new();
    let cfg = WatchConfig {
        apply: true,
        ..WatchConfig::default()
    };
    let (mut w, _) = rig.watcher(cfg);
    let loads: Vec<Load> = (0..30)
        .map(|i| {
            if i % 3 == 2 {
                drops(1, 0.0)
            } else {
                drops(1, 500.0)
            }
        })
        .collect();
    let ev = feed(&rig, &mut w, 0.0, &loads);
    assert!(
        advice_ids(&ev).is_empty() && applied(&ev).is_empty(),
        "{ev:?}"
    );
    assert_eq!(rig.read(BACKLOG), "1000");
}

/// A signal that comes back after every action that helped: the budget doubles, the guard
/// confirms, the squeezes return, and so on — never past the caps, never more often than the
/// minimum interval, and at the caps the watcher says so instead of writing.
#[test]
fn a_signal_asking_for_more_forever_stops_at_the_caps() {
    let rig = Rig::new();
    let cfg = WatchConfig {
        min_interval: Duration::from_secs(10),
        max_budget: 1_000,
        max_budget_usecs: 3_000,
        ..acting(2, 2)
    };
    let (mut w, _) = rig.watcher(cfg);
    let mut view = rig.view();
    let mut events = Vec::new();
    let mut guard_left = 0;
    for t in 0..200 {
        // Squeezes stop for the guard's two intervals after each action, then come back.
        let l = if guard_left > 0 {
            guard_left -= 1;
            squeezes(0.0, 20.0)
        } else {
            squeezes(80.0, 20.0)
        };
        let ev = w.step(t as f64, &view, &l);
        if !applied(&ev).is_empty() {
            guard_left = 2;
            view = rig.view();
        }
        let budget: i64 = rig.read(BUDGET).parse().unwrap();
        let usecs: i64 = rig.read(BUDGET_USECS).parse().unwrap();
        assert!(budget <= 1_000 && usecs <= 3_000, "t={t}: {budget} {usecs}");
        events.extend(ev);
    }
    assert_eq!(
        (rig.read(BUDGET), rig.read(BUDGET_USECS)),
        ("1000".into(), "3000".into())
    );
    let at: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Applied { at, .. } => Some(*at),
            _ => None,
        })
        .collect();
    // 300 → 600 → 1000 (and 2000 → 3000 µs): two actions, at least 10 s apart.
    assert_eq!(at.len(), 2, "{events:?}");
    assert!(at[1] - at[0] >= 10.0, "{at:?}");
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::GuardPassed { .. }))
            .count(),
        2
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::AtCap { .. }))
            .count(),
        1,
        "said once: {events:?}"
    );
    // The journals are tune's: `tune rollback` of the watcher's directory restores the tree.
    let t = Tuner::open(rig.fs(), false, Some(rig.state.path().join("watch"))).unwrap();
    t.rollback(None).unwrap();
    t.rollback(None).unwrap();
    assert_eq!(
        (rig.read(BUDGET), rig.read(BUDGET_USECS)),
        ("300".into(), "2000".into())
    );
}

#[test]
fn a_guard_that_fails_rolls_back_and_the_reflex_sleeps() {
    let rig = Rig::new();
    let before = contents(rig.tree.path());
    let cfg = acting(2, 3);
    let (mut w, _) = rig.watcher(cfg);
    // Squeezes that a bigger budget does not cure, while softirq time climbs.
    let mut loads = vec![squeezes(100.0, 20.0); 2];
    loads.extend(vec![squeezes(100.0, 60.0); 12]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    assert_eq!(applied(&ev).len(), 1, "{ev:?}");
    let undone = rolled_back(&ev);
    assert_eq!(undone.len(), 1, "{ev:?}");
    assert!(undone[0].1.contains("did not fall"), "{undone:?}");
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Held { why, .. } if why.contains("sleeps"))),
        "{ev:?}"
    );
    // Back byte for byte (the watcher's journal lives outside the tree).
    assert_eq!(contents(rig.tree.path()), before);
}

#[test]
fn a_guard_rolls_back_an_action_that_costs_cpu_without_saving_drops() {
    let rig = Rig::new();
    let cfg = WatchConfig {
        guard_cpu_points: 10.0,
        ..acting(2, 2)
    };
    let (mut w, _) = rig.watcher(cfg);
    // The drops stop, but softirq on CPU 2 goes from 20 % to 70 %: 50 points over the bound.
    let mut loads = vec![load(&[(2, 300.0, 0.0, 20.0)]); 2];
    loads.extend(vec![load(&[(2, 0.0, 0.0, 70.0)]); 3]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::RolledBack { why, .. } if why.contains("points of CPU"))),
        "{ev:?}"
    );
    assert_eq!(rig.read(BACKLOG), "1000");
}

#[test]
fn a_person_who_rewrites_a_knob_keeps_it() {
    let rig = Rig::new();
    let cfg = acting(1, 1);
    let (mut w, _) = rig.watcher(cfg);
    let mut ev = feed(&rig, &mut w, 0.0, &[drops(3, 100.0), drops(3, 0.0)]);
    assert_eq!(applied(&ev).len(), 1, "{ev:?}");
    assert_eq!(rig.read(BACKLOG), "2000");
    // `sysctl -w net.core.netdev_max_backlog=5000` by someone else.
    rig.write(BACKLOG, "5000");
    ev = feed(&rig, &mut w, 2.0, &[drops(3, 100.0)]);
    assert!(
        matches!(ev.first(), Some(Event::SteppedAside { path, ours, now, .. })
            if path.ends_with("netdev_max_backlog") && ours == "2000" && now == "5000"),
        "{ev:?}"
    );
    // Drops go on: the watcher says why it holds back, and never writes that knob again.
    let more = feed(&rig, &mut w, 3.0, &vec![drops(3, 100.0); 20]);
    assert!(applied(&more).is_empty(), "{more:?}");
    assert!(
        ev.iter()
            .chain(&more)
            .any(|e| matches!(e, Event::Held { why, .. } if why.contains("rewritten"))),
        "{ev:?} {more:?}"
    );
    assert_eq!(rig.read(BACKLOG), "5000");
    // Rollback on exit leaves the person's value, and restores the rest of the action (the
    // flow limit is still the watcher's).
    let end = w.finish(30.0, true);
    assert!(
        end.iter().any(|e| matches!(e, Event::RolledBack { why, .. }
            if why.contains("left as someone else set it: /proc/sys/net/core/netdev_max_backlog"))),
        "{end:?}"
    );
    assert_eq!(rig.read(BACKLOG), "5000");
    assert_eq!(rig.read(FLOW_LIMIT), "0000");
}

/// Given up is not forever when a person says so: `--reclaim PATH` at the next start writes
/// the watcher's value back in a journal of its own and owns the knob again (a later rewrite
/// is stepped aside from again); a path it never gave up is refused by name with nothing
/// written; and reclaiming needs --apply.
#[test]
fn a_knob_given_up_is_taken_back_only_when_told() {
    let rig = Rig::new();
    let cfg = acting(1, 1);
    let (mut w, _) = rig.watcher(cfg.clone());
    feed(&rig, &mut w, 0.0, &[drops(3, 100.0), drops(3, 0.0)]);
    assert_eq!(rig.read(BACKLOG), "2000");
    rig.write(BACKLOG, "5000");
    let ev = feed(&rig, &mut w, 2.0, &[drops(3, 100.0)]);
    assert!(
        matches!(ev.first(), Some(Event::SteppedAside { .. })),
        "{ev:?}"
    );
    drop(w);
    // Not told: the person's value stays, at every start.
    let (_, ev) = rig.watcher(cfg.clone());
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(rig.read(BACKLOG), "5000");
    // A path it never gave up: refused by name, nothing written.
    let tree_before = contents(rig.tree.path());
    let bad = WatchConfig {
        reclaim: vec!["/proc/sys/net/core/netdev_budget".into()],
        ..cfg.clone()
    };
    let tuner = Tuner::open(rig.fs(), false, Some(rig.state.path().to_path_buf())).unwrap();
    let err = Watcher::new(bad, tuner).err().expect("refused").to_string();
    assert!(
        err.contains("--reclaim /proc/sys/net/core/netdev_budget")
            && err.contains("netdev_max_backlog"),
        "{err}"
    );
    assert_eq!(contents(rig.tree.path()), tree_before);
    // Reclaiming writes: without --apply it is refused.
    let advise = WatchConfig {
        apply: false,
        reclaim: vec!["all".into()],
        ..cfg.clone()
    };
    assert!(advise.check().unwrap_err().contains("--apply"));
    // Told: written back, owned again.
    let told = WatchConfig {
        reclaim: vec!["/proc/sys/net/core/netdev_max_backlog".into()],
        ..cfg.clone()
    };
    let (mut w, ev) = rig.watcher(told);
    assert!(
        matches!(ev.as_slice(), [Event::Reclaimed { path, value, was, .. }]
            if path.ends_with("netdev_max_backlog") && value == "2000" && was == "5000"),
        "{ev:?}"
    );
    assert_eq!(rig.read(BACKLOG), "2000");
    rig.write(BACKLOG, "6000");
    let ev = feed(&rig, &mut w, 0.0, &[drops(3, 0.0)]);
    assert!(
        matches!(ev.first(), Some(Event::SteppedAside { now, .. }) if now == "6000"),
        "owned again, so stepped aside from again: {ev:?}"
    );
}

#[test]
fn a_restart_adopts_what_it_owns_and_rollback_on_exit_restores_the_tree() {
    let rig = Rig::new();
    let before = contents(rig.tree.path());
    let cfg = acting(1, 1);
    {
        let (mut w, _) = rig.watcher(cfg.clone());
        let ev = feed(&rig, &mut w, 0.0, &[drops(5, 100.0), drops(5, 0.0)]);
        assert_eq!(applied(&ev).len(), 1, "{ev:?}");
        // Dropped without finish(): as a SIGKILL leaves it.
    }
    assert_eq!(rig.read(BACKLOG), "2000");
    assert_eq!(
        CpuSet::parse_mask(&rig.read(FLOW_LIMIT)).unwrap(),
        [5].into_iter().collect::<CpuSet>()
    );
    // The next watcher finds its knobs as it left them: adopted, nothing stepped aside.
    let (w, adopted) = rig.watcher(cfg.clone());
    assert!(adopted.is_empty(), "{adopted:?}");
    // With rollback on exit, the host is back as it was.
    let end = w.finish(10.0, true);
    assert!(
        end.iter().any(|e| matches!(e, Event::RolledBack { .. })),
        "{end:?}"
    );
    assert_eq!(contents(rig.tree.path()), before);
    // And a watcher whose knob was changed while none ran gives it up at once.
    let (mut w, _) = rig.watcher(cfg.clone());
    feed(&rig, &mut w, 0.0, &[drops(5, 100.0), drops(5, 0.0)]);
    drop(w);
    rig.write(BACKLOG, "7000");
    let (_, adopted) = rig.watcher(cfg);
    assert!(
        matches!(adopted.first(), Some(Event::SteppedAside { now, who, .. })
            if now == "7000" && who.contains("while no watcher ran")),
        "{adopted:?}"
    );
}

#[test]
fn one_cpu_drowning_in_net_rx_gets_rps_from_the_planner() {
    let rig = Rig::new();
    // The guest's own counters (CPU 9 at 94 % softirq, one virtio queue, RPS off) as a sample.
    let fs = rig.fs();
    let reading =
        netsteer_steering::model::load::Reading::take(&fs, std::time::Instant::now()).unwrap();
    let (mut l, _) = reading.since_boot(&fs).unwrap();
    l.source = LoadSource::Sampled;
    let cfg = acting(3, 5);
    let (mut w, _) = rig.watcher(cfg);
    let ev = feed(&rig, &mut w, 0.0, &vec![l.clone(); 3]);
    let Some(Event::Advice { advice, .. }) = ev
        .iter()
        .find(|e| matches!(e, Event::Advice { advice, .. } if advice.reflex == Reflex::Rps))
    else {
        panic!("{ev:?}")
    };
    assert_eq!(advice.id, "rps/eth0");
    let rps = advice
        .changes
        .iter()
        .find(|c| c.path().ends_with("rx-0/rps_cpus"))
        .expect("an RPS change");
    // Every CPU but the interrupt's (9), as doctor's fix and `tune plan` say.
    assert_eq!(rps.to, "fdff");
    assert_eq!(rig.read("sys/class/net/eth0/queues/rx-0/rps_cpus"), "fdff");
    // What was journaled is the planner's own items (their ids and kinds), not the changes'
    // paths planned again as `--set` knobs (`set/sys/class/net/eth0/...`).
    let Some(Event::Applied { journal, .. }) =
        ev.iter().find(|e| matches!(e, Event::Applied { .. }))
    else {
        panic!("{ev:?}")
    };
    let text = std::fs::read_to_string(journal).unwrap();
    let begin: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let items = begin["plan"]["items"]
        .as_array()
        .expect("the plan journaled");
    let rx0 = items
        .iter()
        .find(|i| i["id"] == "rps/eth0/rx-0")
        .unwrap_or_else(|| panic!("the planner's item rps/eth0/rx-0 in {items:?}"));
    assert_eq!(rx0["kind"], "rps");
    assert!(
        rx0["reason"]
            .as_str()
            .unwrap()
            .starts_with("netsteer watch, rps/eth0:"),
        "{rx0}"
    );
    assert!(
        items
            .iter()
            .all(|i| !i["id"].as_str().unwrap().starts_with("set/")),
        "{items:?}"
    );
    assert!(Path::new(&rig.state.path().join("watch/owned.json")).exists());
}

/// The cloudflare host's eth2 (11 queues, 128 buckets) in the tree's NIC record.
fn eth2_table(rig: &Rig) -> Vec<u64> {
    let path = rig.tree.path().join("netsteer/ethtool.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["eth2"]["rss"]["indirection"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q.as_u64().unwrap())
        .collect()
}

fn set_eth2_table(rig: &Rig, table: &[u64]) {
    let path = rig.tree.path().join("netsteer/ethtool.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["eth2"]["rss"]["indirection"] = serde_json::json!(table);
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn a_hot_queue_under_a_skewed_rss_table_gets_the_equal_table_over_the_nic_backend() {
    let rig = Rig {
        tree: copy_tree(&fixture("cloudflare-24cpu")),
        state: tempfile::tempdir().unwrap(),
    };
    // Every bucket on rx-0 (a table left over from a reservation), rx-0 taking the traffic.
    set_eth2_table(&rig, &[0; 128]);
    let tuner = Tuner::open(rig.fs(), true, Some(rig.state.path().to_path_buf())).unwrap();
    let (mut w, _) = Watcher::new(acting(3, 3), tuner).unwrap();
    let rates = |hot: f64, rest: f64| -> Vec<f64> {
        std::iter::once(hot)
            .chain(std::iter::repeat_n(rest, 10))
            .collect()
    };
    // The watcher's own view: the NIC record read through the tuner's backend.
    let feed_nic = |w: &mut Watcher, t0: f64, per_queue: &[f64], n: usize| {
        let mut out = Vec::new();
        for i in 0..n {
            let view = w.tuner().view();
            let load = common::sampled(&view, "eth2", per_queue, 0.0);
            out.extend(w.step(t0 + i as f64, &view, &load));
        }
        out
    };
    let ev = feed_nic(&mut w, 0.0, &rates(5000.0, 2.0), 3);
    let Some(Event::Advice { advice, .. }) = ev
        .iter()
        .find(|e| matches!(e, Event::Advice { advice, .. } if advice.reflex == Reflex::Rss))
    else {
        panic!("{ev:?}")
    };
    assert_eq!(advice.id, "rss/eth2");
    assert_eq!(advice.changes.len(), 1, "{:?}", advice.changes);
    let c = &advice.changes[0];
    assert_eq!(c.path(), "nic/eth2/rss/indirection");
    assert_eq!(c.from, vec!["0"; 128].join(" "));
    let equal: Vec<u64> = (0..128).map(|i| i % 11).collect();
    assert_eq!(
        c.to,
        equal
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(
        advice.evidence.iter().any(|e| e.contains("128 of the 128")),
        "{:?}",
        advice.evidence
    );
    assert_eq!(applied(&ev).len(), 1, "{ev:?}");
    assert_eq!(
        eth2_table(&rig),
        equal,
        "written through the tree's NIC backend"
    );

    // The traffic spreads: the skew falls from ~100 to 0 points and the guard keeps the table.
    let ev = feed_nic(&mut w, 3.0, &rates(500.0, 450.0), 3);
    assert_passed(&ev, "rss/eth2");
    // Its own table, read back over the NIC backend, is not taken for someone else's.
    assert!(
        !ev.iter().any(|e| matches!(e, Event::SteppedAside { .. })),
        "{ev:?}"
    );

    // A person writes another table (`ethtool -X eth2 weight ...`): the watcher reads it back
    // through the NIC backend, steps aside, and holds its advice when the skew comes back.
    let theirs: Vec<u64> = (0..128).map(|i| if i < 100 { 0 } else { 1 }).collect();
    set_eth2_table(&rig, &theirs);
    let ev = feed_nic(&mut w, 6.0, &rates(5000.0, 2.0), 4);
    assert!(
        ev.iter().any(
            |e| matches!(e, Event::SteppedAside { path, .. } if path == "nic/eth2/rss/indirection")
        ),
        "{ev:?}"
    );
    assert!(applied(&ev).is_empty(), "{ev:?}");
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Held { id, why, .. } if id == "rss/eth2" && why.contains("someone else"))),
        "{ev:?}"
    );
    assert_eq!(
        eth2_table(&rig),
        theirs,
        "their table is left as they wrote it"
    );
}

const ETH0_RPS: &str = "sys/class/net/eth0/queues/rx-0/rps_cpus";

/// CPU 4 drops 3000 packets/s with 5 % idle (RPS sends eth0's queue there); every other CPU idle.
fn saturated_cpu4(cpus: &[(u32, f64)]) -> Load {
    let mut l = load(&[(4, 3000.0, 0.0, 95.0)]);
    for (cpu, d) in cpus {
        l.cpu.cpus[*cpu as usize].dropped = Some(*d);
    }
    l
}

#[test]
fn drops_on_a_cpu_with_no_idle_time_move_rps_away_before_any_backlog_grows() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let before = contents(rig.tree.path());
    let (mut w, _) = rig.watcher(acting(2, 3));
    // Two intervals of drops on the saturated CPU: rps-away acts (not the backlog, which
    // holds the same drops but cannot help a CPU with no time to drain it).
    let mut loads = vec![saturated_cpu4(&[]); 2];
    // Then the drops stop: the guard confirms.
    loads.extend(vec![load(&[(4, 0.0, 0.0, 95.0)]); 3]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    let acted: Vec<(&str, &str)> = actions(&ev)
        .into_iter()
        .map(|(_, id, to)| (id, to[0]))
        .collect();
    // Every other CPU of the guest has room (all idle): the mask without CPU 4.
    assert_eq!(acted, [("rps-away/eth0", "ffef")], "{ev:?}");
    let advice = ev
        .iter()
        .find_map(|e| match e {
            Event::Advice { advice, .. } if advice.reflex == Reflex::RpsAway => Some(advice),
            _ => None,
        })
        .unwrap();
    assert!(
        advice.evidence[0].contains("CPU 4 3000/s at 5 % idle"),
        "{advice:?}"
    );
    assert_passed(&ev, "rps-away/eth0");
    assert_eq!(rig.read(ETH0_RPS), "ffef");
    assert_eq!(rig.read(BACKLOG), "1000");
    let t = Tuner::open(rig.fs(), false, Some(rig.state.path().join("watch"))).unwrap();
    t.rollback(None).unwrap();
    assert_eq!(contents(rig.tree.path()), before);
}

#[test]
fn drops_that_only_move_to_another_cpu_roll_rps_away_back_and_the_backlog_goes_next() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let (mut w, _) = rig.watcher(acting(2, 3));
    let mut loads = vec![saturated_cpu4(&[]); 2];
    // CPU 4 stops dropping, CPU 5 drops as much (with idle time left: not saturated).
    loads.extend(vec![
        load(&[(4, 0.0, 0.0, 95.0), (5, 3000.0, 0.0, 40.0)]);
        3
    ]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    // The guard counts every CPU's drops.
    assert_rolled_back(&ev, "rps-away/eth0", "did not fall");
    assert_eq!(rig.read(ETH0_RPS), "0010");
    // Then the backlog, for the drops that stood at CPU 5 meanwhile, sized by the worst
    // second seen: 1000 + 2 × 3000 → 8192, and CPU 5 in the flow limit.
    let acted: Vec<(&str, Vec<&str>)> = actions(&ev)
        .into_iter()
        .map(|(_, id, to)| (id, to))
        .collect();
    assert_eq!(
        acted,
        [
            ("rps-away/eth0", vec!["ffef"]),
            ("backlog", vec!["8192", "0020"])
        ],
        "{ev:?}"
    );
    // Drops at CPU 4 again: rps-away sleeps, and says why.
    let ev = feed(&rig, &mut w, 10.0, &vec![saturated_cpu4(&[]); 2]);
    assert!(
        ev.iter().any(|e| matches!(e, Event::Held { id, why, .. }
                if id == "rps-away/eth0" && why.contains("sleeps"))),
        "{ev:?}"
    );
    assert_eq!(rig.read(ETH0_RPS), "0010");
}

#[test]
fn cpu_that_delivers_the_packets_an_action_saved_passes_the_guard() {
    let rig = Rig::new();
    let cfg = WatchConfig {
        guard_cpu_points: 10.0,
        ..acting(2, 2)
    };
    let (mut w, _) = rig.watcher(cfg);
    // Drops stop and softirq on CPU 2 goes 20 % → 70 %, but the stack takes 3.5× the
    // packets: the same CPU per packet, what the bigger backlog was for.
    let mut loads = vec![load(&[(2, 300.0, 0.0, 20.0)]); 2];
    let mut after = load(&[(2, 0.0, 0.0, 70.0)]);
    for c in &mut after.cpu.cpus {
        c.processed = Some(3500.0);
    }
    loads.extend(vec![after; 2]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    assert_passed(&ev, "backlog");
    assert_eq!(rig.read(BACKLOG), "2000");
}

/// `l` with every CPU's packets taken by the stack set to `pps / 16` (all CPUs: `pps`).
fn taking(mut l: Load, pps: f64) -> Load {
    for c in &mut l.cpu.cpus {
        c.processed = Some(pps / 16.0);
    }
    l
}

/// CPU 4 has no time left: it takes 16 packets/s and drops 3000; rps-away moves its queue,
/// and the stack then takes `after_pps` for 40 more points of CPU (on CPU 5). The rig and the
/// events.
fn rps_away_priced(after_pps: f64) -> (Rig, Vec<Event>) {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let (mut w, _) = rig.watcher(cfg_points(10.0));
    let mut loads = vec![taking(saturated_cpu4(&[]), 16.0); 2];
    let after = load(&[(4, 0.0, 0.0, 95.0), (5, 0.0, 0.0, 40.0)]);
    loads.extend(vec![taking(after, after_pps); 2]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    (rig, ev)
}

#[test]
fn a_cpu_that_took_nothing_before_is_priced_per_packet_by_what_it_takes_after() {
    // 95 points for 16 packets/s (priced as 100: 9500 µs) before, 135 for 3000 (450 µs)
    // after: the CPU delivers the flood.
    let (rig, ev) = rps_away_priced(3000.0);
    assert_passed(&ev, "rps-away/eth0");
    assert_eq!(rig.read(ETH0_RPS), "ffef");

    // No more packets taken after: nothing explains the 40 points.
    let (rig, ev) = rps_away_priced(16.0);
    assert_rolled_back(
        &ev,
        "rps-away/eth0",
        "too few packets to price it (16 → 16 packets/s)",
    );
    assert_eq!(rig.read(ETH0_RPS), "0010");
}

/// 16,000 packets/s taken and 3000 dropped at CPU 2 for two intervals, then 4000 dropped with
/// `after_pps` taken: the rig and the events.
fn backlog_under(after_pps: f64) -> (Rig, Vec<Event>) {
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 2));
    let mut loads = vec![taking(drops(2, 3000.0), 16_000.0); 2];
    loads.extend(vec![taking(drops(2, 4000.0), after_pps); 2]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    (rig, ev)
}

#[test]
fn a_step_taken_while_a_flood_ramps_is_judged_by_the_share_it_dropped() {
    // 3000 of 19,000 dropped (16 %) before the step; after it the flood has doubled: 4000 of
    // 36,000 (11 %). More drops, a third less of what came.
    let (rig, ev) = backlog_under(32_000.0);
    assert_passed(&ev, "backlog");
    assert_ne!(rig.read(BACKLOG), "1000");

    // The same drops while the flood stays as it was: a third more of what came, rolled
    // back with both shares.
    let (rig, ev) = backlog_under(16_000.0);
    assert_rolled_back(
        &ev,
        "backlog",
        "share of packets dropped did not fall by a quarter (15.8 % before, 20.0 % after",
    );
    assert_eq!(rig.read(BACKLOG), "1000");
}

fn cfg_points(points: f64) -> WatchConfig {
    WatchConfig {
        guard_cpu_points: points,
        ..acting(2, 2)
    }
}

#[test]
fn drops_go_before_squeezes_even_when_the_squeezes_came_first() {
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    // Squeezes alone for one interval, then with drops: the budget's window fills first, but
    // while a drop reflex can act the budget waits, and says so once.
    let both = load(&[(2, 0.0, 80.0, 40.0), (3, 500.0, 0.0, 20.0)]);
    let ev = feed(
        &rig,
        &mut w,
        0.0,
        &[squeezes(80.0, 40.0), both.clone(), both],
    );
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["backlog"], "{ev:?}");
    assert!(
        ev.iter().any(|e| matches!(e, Event::Held { id, why, .. }
            if id == "budget" && why.contains("drop reflexes act first"))),
        "{ev:?}"
    );
    assert_eq!(rig.read(BUDGET), "300");
}

#[test]
fn the_budget_waits_while_the_backlog_is_held_for_a_cpu_with_no_idle_time() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    deep_backlog(&rig);
    let (mut w, _) = rig.watcher(acting(2, 3));
    // CPU 4 drops and squeezes with no idle time; no other CPU has room for its packets yet.
    let mut l = saturated_cpu4(&[]);
    for c in &mut l.cpu.cpus {
        c.soft = 95.0;
        c.idle = 5.0;
    }
    l.cpu.cpus[4].squeezed = Some(80.0);
    let ev = feed(&rig, &mut w, 0.0, &vec![l; 4]);
    assert!(actions(&ev).is_empty(), "{ev:?}");
    for (reflex, said) in [
        ("backlog", "NET_RX gets no more time on CPU 4"),
        ("budget", "drop reflexes act first"),
    ] {
        assert!(
            ev.iter().any(|e| matches!(e, Event::Held { id, why, .. }
                if id == reflex && why.contains(said))),
            "{reflex}: {ev:?}"
        );
    }
    assert_eq!(rig.read(BUDGET), "300");
}

#[test]
fn the_budget_waits_for_the_verdict_on_a_drop_action() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    deep_backlog(&rig);
    let (mut w, _) = rig.watcher(acting(2, 3));
    // rps-away acts on the second interval of drops; then the drops are gone and squeezes
    // come: the budget's window is full one interval later, but it waits for rps-away's
    // guard (three intervals) before it acts.
    let mut loads = vec![saturated_cpu4(&[]); 2];
    loads.extend(vec![squeezes(80.0, 40.0); 4]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    let acted: Vec<(f64, &str)> = actions(&ev).into_iter().map(|a| (a.0, a.1)).collect();
    let passed = ev
        .iter()
        .find_map(|e| match e {
            Event::GuardPassed { at, id, .. } if id == "rps-away/eth0" => Some(*at),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{ev:?}"));
    assert_eq!(
        acted,
        [(1.0, "rps-away/eth0"), (passed, "budget")],
        "{ev:?}"
    );
}

#[test]
fn rps_away_never_moves_packets_onto_a_lanes_cpu() {
    use netsteer_host::sockets::Proto;
    use netsteer_steering::model::planner::lane::{LaneMode, LaneSpec, ServiceRef};
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    // A lane recorded in the same state directory, on CPU 5 with its polling kthread on 6.
    let spec = LaneSpec {
        name: "echo".into(),
        dev: "eth0".into(),
        proto: Proto::Udp,
        port: 4321,
        cpu: 5,
        queue: None,
        mode: LaneMode::Suspend,
        rss_buckets: Vec::new(),
        device_coalesce: false,
        stop_irqbalance: false,
        service: ServiceRef::Port,
        poll_cpu: Some(6),
    };
    let dir = rig.state.path().join("lanes/echo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lane.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
    let (mut w, _) = rig.watcher(WatchConfig::default());
    let ev = feed(&rig, &mut w, 0.0, &vec![saturated_cpu4(&[]); 3]);
    let to: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Advice { advice, .. } if advice.reflex == Reflex::RpsAway => {
                Some(advice.changes[0].to.as_str())
            }
            _ => None,
        })
        .collect();
    // Every CPU but the saturated 4 and the lane's 5 and 6.
    assert_eq!(to, ["ff8f"], "{ev:?}");
}

#[test]
fn a_backlog_is_not_grown_for_a_cpu_whose_net_rx_has_it_all() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let before = contents(rig.tree.path());
    let (mut w, _) = rig.watcher(acting(2, 3));
    // Every CPU busy (5 % idle): CPU 4 drops with NET_RX holding 95 % of it, no CPU has room
    // to take its packets.
    let mut busy = saturated_cpu4(&[]);
    for c in &mut busy.cpu.cpus {
        c.idle = 5.0;
    }
    let ev = feed(&rig, &mut w, 0.0, &vec![busy; 4]);
    assert_eq!(advice_ids(&ev), ["backlog"], "{ev:?}");
    assert!(applied(&ev).is_empty(), "{ev:?}");
    let held: Vec<&String> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Held { id, why, .. } if id == "backlog" => Some(why),
            _ => None,
        })
        .collect();
    assert_eq!(held.len(), 1, "said once: {ev:?}");
    assert!(
        held[0].contains("NET_RX gets no more time on CPU 4")
            && held[0].contains("95 % softirq + irq"),
        "{held:?}"
    );
    assert_eq!(contents(rig.tree.path()), before);
}

#[test]
fn a_cpu_that_bursts_take_only_part_of_the_time_gets_its_backlog() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let (mut w, _) = rig.watcher(acting(2, 3));
    // CPU 4 drops in both intervals of the window, with NET_RX at 65 % (30 % idle) in the
    // first and 95 % in the second (every other CPU busy too): it drains between the bursts,
    // so the backlog.
    let mut busy = saturated_cpu4(&[]);
    for c in &mut busy.cpu.cpus {
        c.idle = 5.0;
    }
    let mut lull = busy.clone();
    lull.cpu.cpus[4].soft = 65.0;
    lull.cpu.cpus[4].idle = 30.0;
    let ev = feed(&rig, &mut w, 0.0, &[lull, busy]);
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["backlog"], "{ev:?}");
}

#[test]
fn a_drop_reflex_acts_while_a_budget_change_is_judged() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    deep_backlog(&rig);
    let (mut w, _) = rig.watcher(acting(2, 5));
    // Squeezes alone: the budget acts at the second interval; then drops on the saturated
    // CPU 4 during the budget's five-interval guard: rps-away does not wait for it.
    let mut loads = vec![squeezes(80.0, 40.0); 2];
    let mut both = saturated_cpu4(&[]);
    both.cpu.cpus[2].squeezed = Some(80.0);
    loads.extend(vec![both; 2]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    let acted: Vec<(f64, &str)> = actions(&ev)
        .into_iter()
        .map(|(at, id, _)| (at, id))
        .collect();
    assert_eq!(acted, [(1.0, "budget"), (3.0, "rps-away/eth0")], "{ev:?}");
    assert_eq!(rig.read(ETH0_RPS), "ffef");
}

#[test]
fn a_step_that_saves_a_third_of_the_drops_stays_and_the_next_may_follow() {
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    // 300 drops/s: 1000 → 2000; then 200/s (a third fewer): the guard keeps it, and with
    // the drops still there the next step doubles again.
    let mut loads = vec![drops(2, 300.0); 2];
    loads.extend(vec![drops(2, 200.0); 5]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    assert_passed(&ev, "backlog");
    assert_eq!(applied(&ev).len(), 2, "{ev:?}");
    assert_eq!(rig.read(BACKLOG), "4000");
}

/// Squeezes and no drops for two intervals (the budget goes up), then an interval whose CPU 3
/// drops `drops` a second: the rig and the events.
fn budget_raise_then(drops: f64) -> (Rig, Vec<Event>) {
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 5));
    let ev = feed(
        &rig,
        &mut w,
        0.0,
        &[
            squeezes(100.0, 20.0),
            squeezes(100.0, 20.0),
            load(&[(2, 0.0, 100.0, 20.0), (3, drops, 0.0, 5.0)]),
        ],
    );
    (rig, ev)
}

#[test]
fn a_budget_raise_that_brings_drops_is_undone_at_the_first_interval_that_shows_them() {
    // 400 drops a second at CPU 3's backlog after the raise (what the lab saw at the CPU that
    // took every packet after rps-away): undone then, not after the five intervals of its
    // window, and the reflex sleeps.
    let (rig, ev) = budget_raise_then(400.0);
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["budget"], "{ev:?}");
    let undone = rolled_back(&ev);
    assert_eq!(undone.len(), 1, "{ev:?}");
    assert_eq!(undone[0].0, 2.0, "{ev:?}");
    assert!(
        undone[0].1.contains("brought drops: 0.0/s") && undone[0].1.contains("400.0/s after"),
        "{undone:?}"
    );
    assert_eq!(rig.read(BUDGET), "300");

    // The same raise with drops that stay at the noise floor stands: a drop a second is not
    // "brought" by it.
    let (rig, ev) = budget_raise_then(1.5);
    assert!(rolled_back(&ev).is_empty(), "{ev:?}");
    assert_ne!(rig.read(BUDGET), "300");
}

/// A backlog deep enough for a budget of 600 while RPS is on (three budgets: see the next
/// test), so that what a test judges is the order of the reflexes.
fn deep_backlog(rig: &Rig) {
    rig.write(BACKLOG, "1800");
}

/// Three intervals of squeezes at CPU 2 while it takes RPS IPIs at `ipis` a second.
fn squeezes_fed_by_rps(ipis: f64) -> Vec<Load> {
    let mut l = squeezes(100.0, 20.0);
    l.cpu.cpus[2].rps_ipi = Some(ipis);
    vec![l; 3]
}

#[test]
fn the_budget_is_not_raised_past_a_third_of_the_backlog_while_rps_hands_packets_across() {
    // A budget of 600 beside a backlog of 1000 while CPU 2's backlog is fed by RPS: what
    // brought drops in the lab after rps-away. Held, and said why.
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &squeezes_fed_by_rps(4000.0));
    assert!(actions(&ev).is_empty(), "{ev:?}");
    assert!(
        ev.iter().any(|e| matches!(e, Event::Held { id, why, .. }
            if id == "budget" && why.contains("CPU 2 4000/s")
                && why.contains("budget of 600")
                && why.contains("more than 1/3 of netdev_max_backlog 1000"))),
        "{ev:?}"
    );
    assert_eq!(rig.read(BUDGET), "300");

    // With the backlog three budgets deep, the same squeezes raise it.
    let rig = Rig::new();
    deep_backlog(&rig);
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &squeezes_fed_by_rps(4000.0));
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["budget"], "{ev:?}");
    assert_eq!(rig.read(BUDGET), "600");

    // No IPIs (a CPU whose backlog is always scheduled takes none) but a queue's RPS mask
    // set: held the same.
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &squeezes_fed_by_rps(0.0));
    assert!(
        ev.iter().any(|e| matches!(e, Event::Held { id, why, .. }
            if id == "budget" && why.contains("masks: eth0 rx-0 → 4"))),
        "{ev:?}"
    );
    assert_eq!(rig.read(BUDGET), "300");

    // IPIs below the noise floor and no mask: not RPS at work.
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &squeezes_fed_by_rps(0.5));
    assert_eq!(rig.read(BUDGET), "600", "{ev:?}");
}

// Issue 77, hardening round four.

/// Each event that says a proposal is held: its id and why.
fn held(events: &[Event]) -> Vec<(&str, &str)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Held { id, why, .. } => Some((id.as_str(), why.as_str())),
            _ => None,
        })
        .collect()
}

/// Step-aside is absolute (issue 77: a knob given up, then the guard's rollback of the earlier
/// action restored the old value over the person's). The watcher grows the backlog for drops
/// at CPU 3, the person rewrites it while the guard measures, the drops do not fall: the
/// guard's verdict may not write the person's knob, nor may the exit's rollback.
#[test]
fn the_guards_rollback_never_writes_a_knob_a_person_rewrote() {
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &[drops(3, 300.0), drops(3, 300.0)]);
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["backlog"], "{ev:?}");
    assert_eq!(rig.read(BACKLOG), "2000");
    // `sysctl -w net.core.netdev_max_backlog=5000` by the person, while the guard measures.
    rig.write(BACKLOG, "5000");
    // The drops go on: the guard fails at its third interval.
    let ev = feed(&rig, &mut w, 2.0, &vec![drops(3, 300.0); 4]);
    assert!(
        matches!(ev.first(), Some(Event::SteppedAside { path, now, .. })
            if path.ends_with("netdev_max_backlog") && now == "5000"),
        "{ev:?}"
    );
    assert_eq!(
        rig.read(BACKLOG),
        "5000",
        "the person's value stays: {ev:?}"
    );
    // The rest of the action (the flow limit, still the watcher's) is rolled back, and the
    // verdict names what it left.
    let undone = rolled_back(&ev);
    assert_eq!(undone.len(), 1, "{ev:?}");
    assert!(
        undone[0].1.contains("left as someone else set it: /proc/sys/net/core/netdev_max_backlog (the watcher wrote 2000, it holds 5000)"),
        "{undone:?}"
    );
    assert_eq!(rig.read(FLOW_LIMIT), "0000");
    // Neither the exit's rollback nor a later `tune rollback` of the watcher's journals
    // writes it.
    w.finish(10.0, true);
    assert_eq!(rig.read(BACKLOG), "5000");
    let t = Tuner::open(rig.fs(), false, Some(rig.state.path().join("watch"))).unwrap();
    let _ = t.rollback(None);
    assert_eq!(rig.read(BACKLOG), "5000");
}

/// The same for an RPS mask (issue 77 saw it for an `rps_cpus` file): rps-away moves eth0's
/// queue off the saturated CPU 4, the person writes their own mask, the drops only move to
/// CPU 5 (the guard fails): their mask stays.
#[test]
fn the_guards_rollback_never_writes_an_rps_mask_a_person_rewrote() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &vec![saturated_cpu4(&[]); 2]);
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["rps-away/eth0"], "{ev:?}");
    assert_eq!(rig.read(ETH0_RPS), "ffef");
    // `echo 3 > .../rx-0/rps_cpus` by the person.
    rig.write(ETH0_RPS, "0003");
    let ev = feed(
        &rig,
        &mut w,
        2.0,
        &vec![load(&[(4, 0.0, 0.0, 95.0), (5, 3000.0, 0.0, 40.0)]); 4],
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::SteppedAside { path, .. }
            if path.ends_with("rx-0/rps_cpus"))),
        "{ev:?}"
    );
    assert_eq!(rig.read(ETH0_RPS), "0003", "{ev:?}");
    // The mask was all the action set: nothing is rolled back, and the verdict says so.
    assert!(rolled_back(&ev).is_empty(), "{ev:?}");
    assert!(
        held(&ev).iter().any(|(id, why)| *id == "rps-away/eth0"
            && why.contains("not rolled back: every knob it set was rewritten by someone else")),
        "{ev:?}"
    );
    w.finish(10.0, true);
    let t = Tuner::open(rig.fs(), false, Some(rig.state.path().join("watch"))).unwrap();
    let _ = t.rollback(None);
    assert_eq!(rig.read(ETH0_RPS), "0003");
}

/// A later `tune rollback --state-dir STATE/watch` (after a watcher killed without its exit's
/// rollback) restores what the watcher still owned and leaves what it gave up: stepping aside
/// records the knob as given up in the journal that wrote it.
#[test]
fn a_later_tune_rollback_of_a_watch_journal_leaves_a_knob_the_watcher_gave_up() {
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(1, 1));
    feed(&rig, &mut w, 0.0, &[drops(3, 100.0), drops(3, 0.0)]);
    assert_eq!(
        (rig.read(BACKLOG), rig.read(FLOW_LIMIT)),
        ("2000".into(), "0008".into())
    );
    rig.write(BACKLOG, "5000");
    let ev = feed(&rig, &mut w, 2.0, &[drops(3, 0.0)]);
    assert!(
        matches!(ev.first(), Some(Event::SteppedAside { .. })),
        "{ev:?}"
    );
    // Killed: no finish().
    drop(w);
    let t = Tuner::open(rig.fs(), false, Some(rig.state.path().join("watch"))).unwrap();
    let r = t.rollback(None).unwrap();
    assert_eq!(r.given_up.len(), 1, "{r:?}");
    assert_eq!(
        (rig.read(BACKLOG), rig.read(FLOW_LIMIT)),
        ("5000".into(), "0000".into()),
        "{r:?}"
    );
}

/// A knob given up and then reclaimed (`--reclaim`) is the watcher's again through the
/// reclaim's journal only: at exit that journal gives the person their value back, and the
/// first action's journal, whose knob was given up, never writes it (on main it restored the
/// value from before the watcher over theirs).
#[test]
fn a_reclaimed_knob_is_never_rolled_back_past_the_persons_value() {
    let rig = Rig::new();
    let cfg = acting(1, 1);
    let (mut w, _) = rig.watcher(cfg.clone());
    feed(&rig, &mut w, 0.0, &[drops(3, 100.0), drops(3, 0.0)]);
    assert_eq!(rig.read(BACKLOG), "2000");
    rig.write(BACKLOG, "5000");
    let ev = feed(&rig, &mut w, 2.0, &[drops(3, 0.0)]);
    assert!(
        matches!(ev.first(), Some(Event::SteppedAside { .. })),
        "{ev:?}"
    );
    drop(w);
    let told = WatchConfig {
        reclaim: vec!["/proc/sys/net/core/netdev_max_backlog".into()],
        ..cfg
    };
    let (w, ev) = rig.watcher(told);
    assert!(matches!(ev.as_slice(), [Event::Reclaimed { .. }]), "{ev:?}");
    assert_eq!(rig.read(BACKLOG), "2000");
    let end = w.finish(5.0, true);
    assert_eq!(rig.read(BACKLOG), "5000", "{end:?}");
}

/// A knob that two actions set (1000 → 2000, kept; 2000 → 4000, rolled back by its guard) is
/// the first action's again after the second is undone: a person's rewrite then is stepped
/// aside from, and the exit's rollback of the first action leaves it (on main the knob was
/// no longer watched, and the exit restored 1000 over the person's value).
#[test]
fn a_knob_an_undone_step_hands_back_to_an_earlier_one_is_still_stepped_aside_from() {
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    // 300 drops/s: 1000 → 2000; 200/s after (a third fewer): kept, and the next step
    // doubles again; 200/s after that too: not a quarter fewer, rolled back to 2000.
    let mut loads = vec![drops(2, 300.0); 2];
    loads.extend(vec![drops(2, 200.0); 8]);
    let ev = feed(&rig, &mut w, 0.0, &loads);
    let acted: Vec<(&str, Vec<&str>)> = actions(&ev)
        .into_iter()
        .map(|(_, id, to)| (id, to))
        .collect();
    assert_eq!(
        acted,
        [("backlog", vec!["2000", "0004"]), ("backlog", vec!["4000"])],
        "{ev:?}"
    );
    assert_eq!(rolled_back(&ev).len(), 1, "{ev:?}");
    assert_eq!(rig.read(BACKLOG), "2000");
    rig.write(BACKLOG, "5000");
    let ev = feed(&rig, &mut w, 10.0, &[drops(2, 0.0)]);
    assert!(
        matches!(ev.first(), Some(Event::SteppedAside { ours, now, .. })
            if ours == "2000" && now == "5000"),
        "{ev:?}"
    );
    w.finish(11.0, true);
    assert_eq!(rig.read(BACKLOG), "5000");
}

/// rps-away's mask flipping back and forth when floods alternate between CPUs (issue 77: 2→1,
/// 1→2, 2→1, 1→2 on a guest, each guard "kept"). CPU 4 saturated, CPU 5 the only one with
/// room: eth0's queue goes 4 → 5; then CPU 5 saturated with CPU 4 the only one with room:
/// moving it back would undo the move it just made. One move, then the reflex sleeps for
/// that knob and says so.
#[test]
fn a_reflex_that_would_undo_its_own_move_sleeps_for_that_knob() {
    let rig = Rig::new();
    rig.write(ETH0_RPS, "0010");
    let (mut w, _) = rig.watcher(acting(2, 3));
    // Every CPU but `free` busy with other work (15 % idle: no room for packets), `hot`
    // saturated and dropping.
    let flood_on = |hot: usize, free: usize| {
        let mut l = load(&[(hot as u32, 3000.0, 0.0, 95.0)]);
        for c in &mut l.cpu.cpus {
            if c.cpu as usize != hot {
                c.usr = 85.0;
                c.idle = 15.0;
            }
        }
        l.cpu.cpus[free].usr = 0.0;
        l.cpu.cpus[free].idle = 100.0;
        l
    };
    let calm = |busy: usize| {
        let mut l = load(&[(busy as u32, 0.0, 0.0, 60.0)]);
        for c in &mut l.cpu.cpus {
            if c.cpu as usize != busy {
                c.usr = 85.0;
                c.idle = 15.0;
            }
        }
        l
    };
    let mut loads = Vec::new();
    for _ in 0..3 {
        loads.extend(vec![flood_on(4, 5); 2]);
        loads.extend(vec![calm(5); 3]);
        loads.extend(vec![flood_on(5, 4); 2]);
        loads.extend(vec![calm(4); 3]);
    }
    let ev = feed(&rig, &mut w, 0.0, &loads);
    let acted: Vec<(&str, &str)> = actions(&ev)
        .into_iter()
        .map(|(_, id, to)| (id, to[0]))
        .collect();
    assert_eq!(acted, [("rps-away/eth0", "0020")], "one move: {ev:?}");
    assert!(
        held(&ev).iter().any(|(id, why)| *id == "rps-away/eth0"
            && why.contains("sleeps for /sys/class/net/eth0/queues/rx-0/rps_cpus")),
        "{ev:?}"
    );
    assert_eq!(rig.read(ETH0_RPS), "0020");
}

/// Adds `by` to column `col` (0-based, after the row's name) of the row named `name` of a
/// whitespace-separated counter file of the tree (`/proc/stat`, `/proc/softirqs`,
/// `/proc/interrupts`, `/proc/net/dev`).
fn bump(rig: &Rig, rel: &str, name: &str, col: usize, by: u64) {
    let path = rig.tree.path().join(rel);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut found = false;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
            if f.first().map(String::as_str) != Some(name) {
                return l.to_string();
            }
            found = true;
            let v: u64 = f[col + 1].parse().unwrap();
            f[col + 1] = (v + by).to_string();
            f.join(" ")
        })
        .collect();
    assert!(found, "{rel}: no row {name}");
    std::fs::write(path, out.join("\n") + "\n").unwrap();
}

/// Adds `by` to the packets CPU `cpu` processed (softnet_stat column 1, hex, row per CPU).
fn bump_processed(rig: &Rig, cpu: usize, by: u32) {
    let path = rig.tree.path().join("proc/net/softnet_stat");
    let text = std::fs::read_to_string(&path).unwrap();
    let out: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
            if i == cpu {
                let v = u32::from_str_radix(&f[0], 16).unwrap();
                f[0] = format!("{:08x}", v + by);
            }
            f.join(" ")
        })
        .collect();
    std::fs::write(path, out.join("\n") + "\n").unwrap();
}

/// One second of seed 003's guest as the sampler reads it from the tree: CPU 9 spends 90 % of
/// it in softirq and processes 500,000 packets (NET_RX ran 20,000 times there), every other
/// CPU idles; eth0's receive counters (`/proc/net/dev`, the same `dev_get_stats()` numbers
/// as /sys/class/net/eth0/statistics/rx_packets) and its rx IRQ 48 on CPU 9 move by
/// `eth0_packets` and `eth0_irqs`.
fn net_rx_second(rig: &Rig, eth0_packets: u64, eth0_irqs: u64) -> Load {
    use netsteer_steering::model::load::Reading;
    let fs = rig.fs();
    let t0 = std::time::Instant::now();
    let first = Reading::take(&fs, t0).unwrap();
    // USER_HZ ticks: 100 a second; cpu9's softirq (column 7) 90, idle (column 4) 10.
    bump(rig, "proc/stat", "cpu9", 6, 90);
    bump(rig, "proc/stat", "cpu9", 3, 10);
    for c in (0..16).filter(|c| *c != 9) {
        bump(rig, "proc/stat", &format!("cpu{c}"), 3, 100);
    }
    bump(rig, "proc/stat", "cpu", 6, 90);
    bump(rig, "proc/stat", "cpu", 3, 1510);
    bump(rig, "proc/softirqs", "NET_RX:", 9, 20_000);
    bump_processed(rig, 9, 500_000);
    bump(rig, "proc/net/dev", "eth0:", 1, eth0_packets);
    bump(rig, "proc/interrupts", "48:", 9, eth0_irqs);
    let l = Reading::take(&fs, t0 + Duration::from_secs(1))
        .unwrap()
        .since(&first);
    assert_eq!(l.cpu.cpus[9].processed, Some(500_000.0), "{l:?}");
    l
}

/// The rps reflex acting where the load is not (issue 77: a UDP flood on veths in other
/// namespaces, and `watch --apply` in the root namespace changed eth0's RPS and RFS on "CPU 1
/// takes IRQ 38 (eth0 rx-0)" while eth0 received nothing). CPU 9's NET_RX work rises, but
/// eth0's packets and its IRQ's count on CPU 9 do not move: nothing is changed, and the
/// watcher says why; the same second with eth0 bringing the packets is acted on, its
/// evidence naming eth0's own counts.
#[test]
fn the_rps_reflex_never_acts_on_a_device_whose_counters_did_not_move() {
    let rig = Rig::new();
    let before = contents(rig.tree.path());
    let (mut w, _) = rig.watcher(acting(2, 3));
    let l = net_rx_second(&rig, 0, 0);
    let tree = contents(rig.tree.path());
    let ev = feed(&rig, &mut w, 0.0, &vec![l; 3]);
    assert!(applied(&ev).is_empty(), "{ev:?}");
    assert!(
        !advice_ids(&ev).contains(&"rps/eth0".to_string()),
        "no advice to change eth0 either: {ev:?}"
    );
    assert!(
        held(&ev).iter().any(|(id, why)| *id == "rps/eth0"
            && why.contains("eth0 received 0 packets/s")
            && why.contains("IRQ 48")),
        "{ev:?}"
    );
    assert_eq!(contents(rig.tree.path()), tree);
    drop(before);

    // The same second with eth0 bringing the packets on its IRQ at CPU 9: acted on.
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    let l = net_rx_second(&rig, 500_000, 20_000);
    let ev = feed(&rig, &mut w, 0.0, &vec![l; 3]);
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["rps/eth0"], "{ev:?}");
    let advice = ev
        .iter()
        .find_map(|e| match e {
            Event::Advice { advice, .. } if advice.id == "rps/eth0" => Some(advice),
            _ => None,
        })
        .unwrap();
    assert!(
        advice
            .evidence
            .iter()
            .any(|e| e.contains("eth0 received 500000 packets/s")),
        "{advice:?}"
    );
}

/// A wrong premise (issue 77): a CPU with no idle time because an ordinary task runs there
/// still runs NET_RX first (softirqs run at interrupt exit, before any task), so its idle time
/// is not its room for packets: with a low softirq share and no squeezes, its drops are
/// bursts longer than the backlog, and the backlog grows. The same CPU whose NET_RX is
/// squeezed with no idle time is held.
#[test]
fn a_cpu_busy_with_user_work_whose_net_rx_has_room_gets_the_backlog() {
    let busy_user = |squeezed: f64| {
        let mut l = drops(3, 500.0);
        let c = &mut l.cpu.cpus[3];
        c.usr = 95.0;
        c.idle = 0.0;
        c.squeezed = Some(squeezed);
        l
    };
    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &vec![busy_user(0.0); 2]);
    let acted: Vec<&str> = actions(&ev).into_iter().map(|a| a.1).collect();
    assert_eq!(acted, ["backlog"], "{ev:?}");
    assert_eq!(rig.read(BACKLOG), "2000");

    let rig = Rig::new();
    let (mut w, _) = rig.watcher(acting(2, 3));
    let ev = feed(&rig, &mut w, 0.0, &vec![busy_user(40.0); 3]);
    assert!(applied(&ev).is_empty(), "{ev:?}");
    assert!(
        held(&ev)
            .iter()
            .any(|(id, why)| *id == "backlog" && why.contains("CPU 3") && why.contains("squeezes")),
        "{ev:?}"
    );
    assert_eq!(rig.read(BACKLOG), "1000");
}
