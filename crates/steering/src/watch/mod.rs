//! `netsteer watch`: a few reflexes over what the kernel reports every interval, each a doctor
//! finding whose fix the watcher may take — advice by default, through tune's transaction and
//! journal with `apply`, within hard caps, guarded after it acts, and stepping aside from any
//! knob someone else rewrites.
//!
//! Why a command of its own and not a mode of the agent: the agent serves scrapes to whoever
//! is allowed (it may listen beyond loopback) and must never write to the host; the watcher
//! writes, runs as root, and keeps one journal directory. The agent exports the watcher's
//! standing advice from the file the watcher keeps ([`ADVICE_FILE`]).
//!
//! The reflexes (each a doctor rule's signal, judged on the interval's rates):
//! - `rps-away`: softnet drops on a CPU with no idle time that RPS feeds (doctor's
//!   `backlog-drops`, [`crate::doctor::shared::rps_away`]) → each such queue's RPS mask
//!   without that CPU: a CPU with no time to drain its backlog drops at any backlog length.
//! - `backlog`: softnet drops (`/proc/net/softnet_stat` column 2: the per-CPU backlog was
//!   full, `netdev_max_backlog`, or the flow limit dropped) → `net.core.netdev_max_backlog`
//!   grown by twice the most one CPU dropped in a second (at least doubled), up to its cap,
//!   and the dropping CPUs added to `net.core.flow_limit_cpu_bitmap` (written as the hex CPU
//!   mask the kernel parses, not a decimal number); held while NET_RX gets no more time on
//!   every dropping CPU (`backlog::NetRx`: a CPU's idle time is not its room for packets).
//! - `budget`: time squeezes (column 3: `net_rx_action` ran out of budget or time with work
//!   left) → `netdev_budget` and `netdev_budget_usecs` doubled, each up to its cap (2 ms for the
//!   time: a larger one holds a CPU in softirq for longer than a scheduler tick is worth);
//!   while RPS hands packets across CPUs, held unless the backlog stays three budgets deep.
//! - `rps`: doctor's `softirq-hot-cpu` (one CPU drowning in NET_RX while others idle) on a
//!   device whose queues have RPS off, when the device's own packets and interrupts over the
//!   interval brought that work → the RPS/RFS the planner makes for it; otherwise nothing,
//!   and the watcher says why.
//! - `rss`: doctor's `rss-table-skewed` (one queue holds most of the indirection table and
//!   takes most of the receive interrupts) → the equal table the planner makes for the
//!   device's active queues, written over ethtool netlink (`nic/IF/rss/indirection`).
//!
//! A reflex fires only after its signal held for `persist` intervals, at most once per
//! `min_interval`, and only raises: a guard measured after each action (the signal must fall
//! by a quarter, drops as a share of the packets that came; the CPU in softirq and system
//! time may not rise more than `guard_cpu_points` unless it delivers the packets it saved at
//! no more CPU per packet; an action for another signal is undone at the first interval
//! whose drops double what they were before it)
//! either confirms it or rolls it back and puts the reflex to sleep with the reason, so no
//! knob ever goes down and up again; a reflex that would give a knob back what its own recent
//! move took sleeps for that knob. Drift of a knob it set is never fought: the watcher logs
//! who changed what (as far as polling can tell), leaves that knob alone, and records it as
//! given up in its journals so that no rollback writes it (`undo`).

mod backlog;
mod budget;
mod doctor;
mod guard;
mod reclaim;
mod reverse;
mod run;
mod signals;
mod state;
mod text;
mod undo;

use crate::doctor::{Goal, Load};
use crate::model::desired::{Action, Item, Target};
use crate::tune::{ApplyOptions, TuneError, Tuner};
use guard::Cost;
use netsteer_host::view::HostView;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

pub use run::{RunOptions, Source, parse_replay, run};
pub use state::{ADVICE_FILE, OWNED_FILE, StandingAdvice, read_advice};
pub use text::text;

const BACKLOG: &str = "/proc/sys/net/core/netdev_max_backlog";
const FLOW_LIMIT: &str = "/proc/sys/net/core/flow_limit_cpu_bitmap";
const BUDGET: &str = "/proc/sys/net/core/netdev_budget";
const BUDGET_USECS: &str = "/proc/sys/net/core/netdev_budget_usecs";

/// The ceilings no flag can lift: far above any sane setting, and inside what the kernel
/// accepts (all three are `int` sysctls; `netdev_budget_usecs` is in microseconds).
pub const HARD_MAX_BACKLOG: i64 = 1 << 20;
pub const HARD_MAX_BUDGET: i64 = 100_000;
pub const HARD_MAX_BUDGET_USECS: i64 = 10_000;

/// What the watcher may do and how far.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Take the reflexes' actions (through tune's transaction); otherwise only advise.
    pub apply: bool,
    /// Intervals a signal must hold before a reflex fires (hysteresis).
    pub persist: u32,
    /// Least time between two actions of one reflex.
    pub min_interval: Duration,
    /// Intervals measured after an action before its guard judges it.
    pub guard_intervals: u32,
    /// How much more CPU (softirq + system + hard IRQ, percentage points summed over all
    /// CPUs) an action may cost before its guard rolls it back.
    pub guard_cpu_points: f64,
    /// Drops and squeezes per second below this are noise.
    pub min_rate: f64,
    pub max_backlog: i64,
    pub max_budget: i64,
    pub max_budget_usecs: i64,
    /// The doctor goal the `rps` reflex plans for.
    pub goal: Goal,
    /// Test hook: abort the process after this many writes of an action (a crash between two
    /// writes, as `tune apply --crash-after-writes`).
    pub crash_after_writes: Option<usize>,
    /// Knobs given up after someone rewrote them that the watcher is told to take back at
    /// start (their paths, or `all`): the watcher's value written again through tune's
    /// transaction, and the knob watched as its own again.
    pub reclaim: Vec<String>,
    /// A reflex that would give a knob back what it moved off it less than this long ago
    /// sleeps for that knob instead (it chases a load that moves from CPU to CPU).
    pub reverse_window: Duration,
}

impl Default for WatchConfig {
    fn default() -> WatchConfig {
        WatchConfig {
            apply: false,
            persist: 3,
            min_interval: Duration::from_secs(30),
            guard_intervals: 5,
            guard_cpu_points: 10.0,
            min_rate: 1.0,
            // 32 × the default 1000: bpftune's users saw backlogs drop at tens of thousands.
            max_backlog: 32_768,
            // 4 × the default 300 packets per NET_RX run.
            max_budget: 1_200,
            // The kernel's default is two jiffies (2 ms at HZ=1000, 8 ms at Debian's HZ=250:
            // 2 * USEC_PER_SEC / HZ in net/core/dev.c); bpftune once let this reach ~300 ms
            // (its issue #178), a CPU held in softirq for a third of a second. The reflex never
            // raises it past 2 ms (a default already above the cap is left as it is).
            max_budget_usecs: 2_000,
            goal: Goal::Balanced,
            crash_after_writes: None,
            reclaim: Vec::new(),
            // Issue 77: floods alternating between a guest's two CPUs flipped one queue's
            // mask 2 → 1 → 2 → 1 → 2, each move's guard passing; with the default hysteresis
            // and minimum interval a move comes at most every 30 s, so ten minutes is a
            // flip-flop, not a load that settled somewhere else.
            reverse_window: Duration::from_secs(600),
        }
    }
}

impl WatchConfig {
    /// Checks the caps against the hard ceilings, naming the one that is out of range.
    pub fn check(&self) -> Result<(), String> {
        for (name, v, max) in [
            ("max-backlog", self.max_backlog, HARD_MAX_BACKLOG),
            ("max-budget", self.max_budget, HARD_MAX_BUDGET),
            (
                "max-budget-usecs",
                self.max_budget_usecs,
                HARD_MAX_BUDGET_USECS,
            ),
        ] {
            if !(1..=max).contains(&v) {
                return Err(format!("--{name} {v}: 1 to {max}"));
            }
        }
        if self.persist == 0 || self.guard_intervals == 0 {
            return Err("--persist and the guard need at least one interval".into());
        }
        if !self.reclaim.is_empty() && !self.apply {
            return Err("--reclaim writes the watcher's values back: it needs --apply".into());
        }
        Ok(())
    }
}

/// The reflexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reflex {
    Backlog,
    Budget,
    Rps,
    Rss,
    #[serde(rename = "rps-away")]
    RpsAway,
}

impl Reflex {
    pub fn name(self) -> &'static str {
        match self {
            Reflex::Backlog => "backlog",
            Reflex::Budget => "budget",
            Reflex::Rps => "rps",
            Reflex::Rss => "rss",
            Reflex::RpsAway => "rps-away",
        }
    }

    /// Every reflex (an advice id names one by its [`Reflex::name`]).
    const ALL: [Reflex; 5] = [
        Reflex::Backlog,
        Reflex::Budget,
        Reflex::Rps,
        Reflex::Rss,
        Reflex::RpsAway,
    ];

    /// The reflexes that answer softnet drops (judged on every CPU's drops, and acting
    /// before the budget).
    fn answers_drops(self) -> bool {
        matches!(self, Reflex::Backlog | Reflex::RpsAway)
    }
}

/// One knob a reflex would change: its target (a file or a NIC setting) and the values. Its
/// text (the event log, `--json`, the advice file) names the target by the path `tune apply
/// --set` takes (`{"path": "nic/eth0/rss/indirection", ...}`), as it did before targets
/// were typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "ChangeText", try_from = "ChangeText")]
pub struct Change {
    pub target: Target,
    pub from: String,
    pub to: String,
}

impl Change {
    /// A change to the file at `path` (a sysctl, a queue's RPS mask).
    pub fn file(path: &str, from: String, to: String) -> Change {
        Change {
            target: Target::file(path),
            from,
            to,
        }
    }

    /// A planner item's change, as the item says it.
    pub fn of_item(item: &Item) -> Change {
        Change {
            target: item.target.clone(),
            from: item.current.clone().unwrap_or_default(),
            to: item.desired.clone(),
        }
    }

    /// The knob by its `--set` path: what the watcher's state, its moves and its events
    /// key a knob by.
    pub fn path(&self) -> String {
        crate::model::knob::set_path(&self.target).unwrap_or_else(|| self.target.to_string())
    }

    /// The change as a plan item of its own, named as `tune apply --set` names it (a reflex
    /// whose changes are not the planner's: backlog, budget, rps-away, a reclaim).
    fn item(&self) -> Item {
        Item {
            id: crate::model::knob::set_id(&self.target),
            kind: self.target.kind(),
            format: self.target.format(),
            target: self.target.clone(),
            label: None,
            current: None,
            desired: self.to.clone(),
            reason: String::new(),
            action: Action::Change,
            rewrite: false,
        }
    }
}

/// [`Change`] as it is written.
#[derive(Serialize, Deserialize)]
struct ChangeText {
    path: String,
    from: String,
    to: String,
}

impl From<Change> for ChangeText {
    fn from(c: Change) -> ChangeText {
        ChangeText {
            path: c.path(),
            from: c.from,
            to: c.to,
        }
    }
}

impl TryFrom<ChangeText> for Change {
    type Error = String;
    fn try_from(t: ChangeText) -> Result<Change, String> {
        Ok(Change {
            target: crate::model::knob::target_of_set_path(&t.path)?,
            from: t.from,
            to: t.to,
        })
    }
}

/// A reflex's proposal: the same id for the same reflex on the same subject in every run
/// (`backlog`, `budget`, `rps/eth0`), the evidence, and the exact changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    pub id: String,
    pub reflex: Reflex,
    pub evidence: Vec<String>,
    pub changes: Vec<Change>,
}

/// What happened in one interval, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// A proposal that held for `persist` intervals (new, or its changes moved; its
    /// evidence alone changing is not said again).
    Advice {
        at: f64,
        advice: Advice,
    },
    /// A standing proposal whose signal went away.
    AdviceGone {
        at: f64,
        id: String,
    },
    /// The signal asks for more, but every knob of the reflex is at its cap.
    AtCap {
        at: f64,
        id: String,
        evidence: Vec<String>,
    },
    Applied {
        at: f64,
        id: String,
        journal: String,
        changes: Vec<Change>,
    },
    ApplyFailed {
        at: f64,
        id: String,
        error: String,
    },
    GuardPassed {
        at: f64,
        id: String,
        signal: (f64, f64),
        cpu: (f64, f64),
    },
    /// The guard failed: the action was rolled back and the reflex sleeps until restart.
    RolledBack {
        at: f64,
        id: String,
        why: String,
    },
    /// Someone else rewrote a knob the watcher set: it is theirs now.
    SteppedAside {
        at: f64,
        path: String,
        ours: String,
        now: String,
        who: String,
    },
    /// A knob given up earlier, taken back when told (`--reclaim`): the watcher's value
    /// written again, in a journal of its own.
    Reclaimed {
        at: f64,
        path: String,
        value: String,
        was: String,
        journal: String,
    },
    /// The watcher reads its first counters: from here on it sees every interval (a script
    /// that starts a load after the watcher waits for this line).
    Started {
        at: f64,
        apply: bool,
        interval_s: f64,
    },
    /// A proposal the watcher will not act on, and why (said once).
    Held {
        at: f64,
        id: String,
        why: String,
    },
}

impl Event {
    /// When it happened: seconds since the watcher started.
    pub fn at(&self) -> f64 {
        match self {
            Event::Advice { at, .. }
            | Event::AdviceGone { at, .. }
            | Event::AtCap { at, .. }
            | Event::Applied { at, .. }
            | Event::ApplyFailed { at, .. }
            | Event::GuardPassed { at, .. }
            | Event::RolledBack { at, .. }
            | Event::SteppedAside { at, .. }
            | Event::Reclaimed { at, .. }
            | Event::Started { at, .. }
            | Event::Held { at, .. } => *at,
        }
    }
}

/// A proposal with the number the guard watches.
struct Proposal {
    advice: Advice,
    /// The plan items its action applies, one per change: the planner's own for the
    /// reflexes that take a doctor finding's fix, else each change as `--set` names it.
    items: Vec<Item>,
    reflex: Reflex,
    /// The quantity that must fall (drops/s, squeezes/s, the hot CPU's softirq %).
    signal: f64,
    /// True when every knob is at its cap (nothing left to change).
    at_cap: bool,
    /// Why this advice is not to be taken here (said once; the advice stands).
    hold: Option<String>,
    /// Why the reflex's signal is not this subject's doing: no advice, nothing changed, said
    /// once (the `rps` reflex on a device whose own counters did not bring the work).
    declined: Option<String>,
}

/// One interval as the guard and the backlog's hold look back at it.
struct Interval {
    cost: Cost,
    /// What each CPU gave NET_RX and had left ([`backlog::NetRx`]).
    cpus: BTreeMap<u32, backlog::NetRx>,
}

/// A change an action made, kept while it is recent: a reflex that would give the knob back
/// what this took away sleeps for that knob ([`WatchConfig::reverse_window`]).
struct Move {
    reflex: Reflex,
    from: String,
    to: String,
    at: f64,
    journal: String,
}

/// An action being judged.
struct Pending {
    id: String,
    reflex: Reflex,
    journal: String,
    signal_before: f64,
    /// The CPU cost and the packets the stack took per second (softnet column 1, all CPUs)
    /// over the `persist` intervals before the action.
    cpu_before: Cost,
    /// Per interval since: the guard's signal and the cost.
    seen: Vec<(f64, Cost)>,
}

/// The watcher: feed it one interval at a time.
pub struct Watcher {
    cfg: WatchConfig,
    tuner: Tuner,
    /// Recent signal values per proposal id (the hysteresis window).
    held: BTreeMap<String, VecDeque<f64>>,
    standing: BTreeMap<String, Advice>,
    said: BTreeSet<String>,
    last_action: BTreeMap<Reflex, f64>,
    /// The actions being judged: one at a time, except that a drop reflex may act while a
    /// budget change is judged (loss comes first).
    pending: Vec<Pending>,
    asleep: BTreeMap<Reflex, String>,
    /// Knobs one reflex sleeps for (it would have undone its own recent move), with why.
    asleep_knobs: BTreeMap<(Reflex, String), String>,
    /// The last change each knob had from an action, by path.
    moves: BTreeMap<String, Move>,
    state: state::Owned,
    /// The last `persist` intervals, this one included: what they cost (the "before" of an
    /// action taken now) and what each CPU gave NET_RX (a CPU whose backlog is held had NET_RX
    /// short of time in every one of them).
    recent: VecDeque<Interval>,
    /// The most one CPU dropped in a second while drops went on (backlog sizing); reset when
    /// they stop and after an action.
    peak_drops: f64,
    /// The advice file's last write error, said once.
    advice_file_error: Option<String>,
}

impl Watcher {
    /// A watcher whose journals live in `tuner`'s state directory under `watch/`. What a
    /// previous watcher set and recorded there is adopted when the host still holds it, and
    /// given up when someone changed it meanwhile.
    pub fn new(cfg: WatchConfig, tuner: Tuner) -> Result<(Watcher, Vec<Event>), TuneError> {
        let dir = crate::tune::StateDir::new(tuner.state_dir()).watch();
        let tuner = tuner.into_state_dir(dir);
        let (state, adopted) = state::Owned::load(&tuner)?;
        let mut w = Watcher {
            cfg,
            tuner,
            held: BTreeMap::new(),
            standing: BTreeMap::new(),
            said: BTreeSet::new(),
            last_action: BTreeMap::new(),
            pending: Vec::new(),
            asleep: BTreeMap::new(),
            asleep_knobs: BTreeMap::new(),
            moves: BTreeMap::new(),
            state,
            recent: VecDeque::new(),
            peak_drops: 0.0,
            advice_file_error: None,
        };
        let mut events = Vec::new();
        for d in adopted {
            w.give_up(0.0, d, "changed while no watcher ran", &mut events);
        }
        if !events.is_empty() {
            let _ = w.state.save(&w.tuner);
        }
        events.extend(w.reclaim()?);
        Ok((w, events))
    }

    /// The tuner of the watcher's own journal directory (`tune rollback --state-dir` it).
    pub fn tuner(&self) -> &Tuner {
        &self.tuner
    }

    /// The advice standing now.
    pub fn standing(&self) -> impl Iterator<Item = &Advice> {
        self.standing.values()
    }

    /// One interval: `now` in seconds (any monotonic origin), the host and the load over the
    /// interval that just ended.
    pub fn step(&mut self, now: f64, view: &HostView, load: &Load) -> Vec<Event> {
        let mut out = Vec::new();
        self.step_aside(now, &mut out);
        let cpu = Cost::of(load);
        let worst = load
            .cpu
            .cpus
            .iter()
            .filter_map(|c| c.dropped)
            .fold(0.0, f64::max);
        self.peak_drops = if worst >= self.cfg.min_rate {
            self.peak_drops.max(worst)
        } else {
            0.0
        };
        self.recent.push_back(Interval {
            cost: cpu,
            cpus: load
                .cpu
                .cpus
                .iter()
                .map(|c| (c.cpu, backlog::NetRx::of(c)))
                .collect(),
        });
        while self.recent.len() > self.cfg.persist as usize {
            self.recent.pop_front();
        }
        let proposals = self.proposals(view, load);
        self.judge(now, &proposals, load, cpu, &mut out);
        let ids: BTreeSet<String> = proposals.iter().map(|p| p.advice.id.clone()).collect();
        self.held.retain(|id, _| ids.contains(id));
        let gone: Vec<String> = self
            .standing
            .keys()
            .filter(|id| !ids.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.standing.remove(&id);
            self.said.retain(|s| !s.starts_with(&format!("{id}|")));
            out.push(Event::AdviceGone { at: now, id });
        }
        // Loss before delay: while a drop reflex can act, or holds its advice only for now (a
        // CPU with no idle time, whose packets rps-away moves once another CPU has room), the
        // budget waits: squeezes come with the same bursts, and a bigger budget gives a starved
        // CPU no time (in the lab, a budget raised while the backlog was held was rolled back
        // by its guard every run). A drop reflex at its cap, asleep or given up does not hold
        // the budget back.
        let drops_can_act = proposals.iter().any(|p| {
            p.reflex.answers_drops()
                && !p.at_cap
                && matches!(self.held_back(p, now), None | Some(("hold", _)))
        });
        for p in proposals {
            let wait = p.reflex == Reflex::Budget && drops_can_act;
            let window = self.held.entry(p.advice.id.clone()).or_default();
            window.push_back(p.signal);
            while window.len() > self.cfg.persist as usize {
                window.pop_front();
            }
            if window.len() < self.cfg.persist as usize {
                continue;
            }
            let before = window.iter().sum::<f64>() / window.len() as f64;
            self.consider(now, p, before, wait, &mut out);
        }
        // A file that cannot be written is said once (and again only when the error changes,
        // or after it could be written), not every interval.
        match self.state.save_advice(&self.tuner, self.standing.values()) {
            Err(e) if self.advice_file_error.as_deref() != Some(&e.to_string()) => {
                self.advice_file_error = Some(e.to_string());
                out.push(Event::Held {
                    at: now,
                    id: "advice-file".into(),
                    why: e.to_string(),
                });
            }
            Err(_) => {}
            Ok(()) => self.advice_file_error = None,
        }
        out
    }

    /// On exit: with `rollback`, every action still owned is undone, newest first (a knob
    /// someone else took is left as they set it, the rest of its action restored); otherwise
    /// nothing changes and the journals stay for `tune rollback` or the next watcher.
    pub fn finish(mut self, now: f64, rollback: bool) -> Vec<Event> {
        let mut out = Vec::new();
        if !rollback {
            return out;
        }
        for (journal, id) in self.state.journals_newest_first() {
            let why = "the watcher stopped (rollback on exit)";
            match self.undo(now, &journal, &mut out) {
                Ok(u) if u.restored.is_empty() && !u.left.is_empty() => out.push(Event::Held {
                    at: now,
                    id,
                    why: format!(
                        "{journal}: someone else changed every knob it set; left as they are: {}",
                        u.left.join(", ")
                    ),
                }),
                Ok(u) => out.push(Event::RolledBack {
                    at: now,
                    id,
                    why: with_left(why.into(), &u.left),
                }),
                Err(e) => out.push(Event::ApplyFailed {
                    at: now,
                    id,
                    error: format!("rollback of {journal}: {e}"),
                }),
            }
        }
        let _ = self.state.save(&self.tuner);
        out
    }

    /// Gives up every knob whose value is no longer the one the watcher wrote.
    fn step_aside(&mut self, now: f64, out: &mut Vec<Event>) {
        let drifted = self.state.drifted(&self.tuner);
        if drifted.is_empty() {
            return;
        }
        for d in drifted {
            // Polling sees the new value, not the writer; the sysctl write hook bpftune uses
            // would name it, and is not attached here.
            self.give_up(now, d, "another writer (seen by polling)", out);
        }
        // Written only when something changed: not a file write every interval.
        let _ = self.state.save(&self.tuner);
    }

    /// Why a proposal is not to be acted on, with the key it is said once under: its reflex
    /// asleep, or asleep for one of its knobs, or about to undo its own recent move there
    /// (`reverses`: the caller puts it to sleep for that knob), one of its knobs given up, or
    /// its own hold.
    fn held_back(&self, p: &Proposal, now: f64) -> Option<(&'static str, String)> {
        if let Some(why) = self.asleep.get(&p.reflex) {
            return Some((
                "asleep",
                format!("the {} reflex sleeps: {why}", p.reflex.name()),
            ));
        }
        if let Some(why) = p
            .advice
            .changes
            .iter()
            .find_map(|c| self.asleep_knobs.get(&(p.reflex, c.path())))
        {
            return Some(("knob-asleep", why.clone()));
        }
        if let Some(why) = self.reverses(p, now) {
            return Some(("reverses", why));
        }
        if let Some(c) = p
            .advice
            .changes
            .iter()
            .find(|c| self.state.is_disowned(&c.path()))
        {
            return Some((
                "disowned",
                format!(
                    "{} was rewritten by someone else: not touched again",
                    c.path()
                ),
            ));
        }
        p.hold.clone().map(|why| ("hold", why))
    }

    /// Advice for a proposal that held; the action when asked for and allowed. `wait`:
    /// advise, but let another reflex act first.
    fn consider(&mut self, now: f64, p: Proposal, before: f64, wait: bool, out: &mut Vec<Event>) {
        let id = p.advice.id.clone();
        let say = |out: &mut Vec<Event>, said: &mut BTreeSet<String>, key: &str, e: Event| {
            if said.insert(format!("{id}|{key}")) {
                out.push(e);
            }
        };
        if let Some(why) = &p.declined {
            // Nothing to advise: the standing advice, if any, is gone, and why is said once.
            if self.standing.remove(&id).is_some() {
                out.push(Event::AdviceGone {
                    at: now,
                    id: id.clone(),
                });
            }
            say(
                out,
                &mut self.said,
                "declined",
                Event::Held {
                    at: now,
                    id: id.clone(),
                    why: format!("not acted on: {why}"),
                },
            );
            return;
        }
        if p.at_cap {
            say(
                out,
                &mut self.said,
                "cap",
                Event::AtCap {
                    at: now,
                    id: id.clone(),
                    evidence: p.advice.evidence.clone(),
                },
            );
            return;
        }
        // Said when new or when its changes move; the evidence's rates differ every interval
        // and are refreshed silently (a guest's backlog flood printed the same advice every
        // second when the whole advice was compared).
        let moved = self
            .standing
            .get(&id)
            .is_none_or(|a| a.changes != p.advice.changes);
        self.standing.insert(id.clone(), p.advice.clone());
        if moved {
            out.push(Event::Advice {
                at: now,
                advice: p.advice.clone(),
            });
        }
        if !self.cfg.apply {
            return;
        }
        let held_back = self.held_back(&p, now).or_else(|| {
            wait.then(|| {
                (
                    "waits",
                    "packets are dropped: the drop reflexes act first".to_string(),
                )
            })
        });
        if let Some((key, why)) = held_back {
            // A reflex that would undo its own move sleeps for that knob, as one whose guard
            // failed sleeps: said once, under the key its later holds use.
            let key = match key {
                "reverses" => {
                    for c in &p.advice.changes {
                        if self.moves.contains_key(&c.path()) {
                            self.asleep_knobs.insert((p.reflex, c.path()), why.clone());
                        }
                    }
                    "knob-asleep"
                }
                k => k,
            };
            say(
                out,
                &mut self.said,
                key,
                Event::Held {
                    at: now,
                    id: id.clone(),
                    why,
                },
            );
            return;
        }
        // One action judged at a time, but loss first: a drop reflex may act while a budget
        // change is judged, not the reverse (a budget raised while rps-away was judged in the
        // lab gave the CPU that took the packets less idle time, and confounded both guards).
        let beside =
            |judged: Reflex, next: Reflex| judged == Reflex::Budget && next.answers_drops();
        if self.pending.iter().any(|x| !beside(x.reflex, p.reflex)) {
            return;
        }
        if let Some(t) = self.last_action.get(&p.reflex)
            && now - t < self.cfg.min_interval.as_secs_f64()
        {
            return;
        }
        let cpu_before = Cost::mean(self.recent.iter().map(|i| &i.cost));
        match self.apply(&p.advice, &p.items) {
            Ok(journal) => {
                self.last_action.insert(p.reflex, now);
                for c in &p.advice.changes {
                    self.state.own(&c.path(), &c.to, &journal, &id);
                    self.moves.insert(
                        c.path(),
                        Move {
                            reflex: p.reflex,
                            from: c.from.clone(),
                            to: c.to.clone(),
                            at: now,
                            journal: journal.clone(),
                        },
                    );
                }
                let _ = self.state.save(&self.tuner);
                out.push(Event::Applied {
                    at: now,
                    id: id.clone(),
                    journal: journal.clone(),
                    changes: p.advice.changes.clone(),
                });
                self.pending.push(Pending {
                    id,
                    reflex: p.reflex,
                    journal,
                    signal_before: before,
                    cpu_before,
                    seen: Vec::new(),
                });
                self.held.clear();
                self.said.clear();
                self.peak_drops = 0.0;
            }
            Err(e) => {
                // A reflex whose write the host refuses sleeps with the reason, as a failed
                // guard does: it would fail the same way every interval.
                self.asleep.insert(p.reflex, e.clone());
                out.push(Event::ApplyFailed {
                    at: now,
                    id,
                    error: e,
                });
            }
        }
    }

    /// An advice's items through tune's transaction: a plan of them (each value read now),
    /// journal, write, read back; all or nothing. Returns the journal.
    fn apply(&self, a: &Advice, items: &[Item]) -> Result<String, String> {
        let reason = format!("netsteer watch, {}: {}", a.id, a.evidence.join("; "));
        let items = items
            .iter()
            .map(|i| Item {
                reason: reason.clone(),
                ..i.clone()
            })
            .collect();
        let plan = self.tuner.plan_of(items);
        let r = self
            .tuner
            .apply(
                &plan,
                None,
                &ApplyOptions {
                    crash_after_writes: self.cfg.crash_after_writes,
                    // Step-aside holds for a later `tune rollback` too, also for a rewrite
                    // the watcher never saw.
                    leave_rewritten: true,
                },
            )
            .map_err(|e| e.to_string())?;
        if r.status != crate::tune::ApplyStatus::Applied {
            return Err(r.error.unwrap_or_else(|| r.status.to_string()));
        }
        Ok(r.journal)
    }

    /// Every reflex's proposal for this interval.
    fn proposals(&self, view: &HostView, load: &Load) -> Vec<Proposal> {
        let lanes = || self.lane_cpus();
        let s = signals::Signals {
            cfg: &self.cfg,
            view,
            load,
            recent: &self.recent,
            peak_drops: self.peak_drops,
            lane_cpus: &lanes,
        };
        // rps-away before backlog: when both hold, the dropping CPU has no time to drain, and
        // moving its packets is what can help (one action is judged at a time).
        let mut out = backlog::rps_away_of(&s);
        out.extend(backlog::backlog(&s));
        out.extend(budget::budget(&s));
        out.extend(doctor::doctor_reflexes(&s));
        out
    }

    /// The CPUs of every lane recorded in the state directory the watcher's own lives in
    /// (`lane apply` keeps RPS off them; a lane that is down keeps its CPU for its service's
    /// return). Read each time it is needed (a CPU saturated): a lane may come while the
    /// watcher runs. Unreadable: none.
    fn lane_cpus(&self) -> netsteer_host::CpuSet {
        let Some(home) = crate::tune::StateDir::of_watch(self.tuner.state_dir()) else {
            return netsteer_host::CpuSet::default();
        };
        crate::lane::Lanes::open(
            self.tuner.fs().clone(),
            false,
            Some(home.root().to_path_buf()),
        )
        .and_then(|l| l.claims(""))
        .map(|c| {
            c.iter()
                .flat_map(|c| std::iter::once(c.cpu).chain(c.poll_cpu))
                .collect()
        })
        .unwrap_or_default()
    }
}

impl Proposal {
    /// A reflex's proposal on one subject; at its cap when nothing is left to change.
    fn of(
        reflex: Reflex,
        id: &str,
        evidence: Vec<String>,
        changes: Vec<Change>,
        signal: f64,
    ) -> Proposal {
        let items = changes.iter().map(Change::item).collect();
        Proposal::with_items(reflex, id, evidence, changes, items, signal)
    }

    /// A proposal that applies the planner's `items` (each one change).
    fn planned(
        reflex: Reflex,
        id: &str,
        evidence: Vec<String>,
        items: Vec<Item>,
        signal: f64,
    ) -> Proposal {
        let changes = items.iter().map(Change::of_item).collect();
        Proposal::with_items(reflex, id, evidence, changes, items, signal)
    }

    fn with_items(
        reflex: Reflex,
        id: &str,
        evidence: Vec<String>,
        changes: Vec<Change>,
        items: Vec<Item>,
        signal: f64,
    ) -> Proposal {
        Proposal {
            at_cap: changes.is_empty(),
            items,
            advice: Advice {
                id: id.into(),
                reflex,
                evidence,
                changes,
            },
            reflex,
            signal,
            hold: None,
            declined: None,
        }
    }
}

/// A rollback's reason with the knobs it left as someone else set them.
fn with_left(why: String, left: &[String]) -> String {
    match left {
        [] => why,
        _ => format!("{why}; left as someone else set it: {}", left.join(", ")),
    }
}

/// Whether a knob still holds what was written, compared as tune compares a plan item's file
/// (masks and lists as CPU sets, counts as numbers, the rest as trimmed text).
pub(crate) fn same_value(path: &str, a: &str, b: &str) -> bool {
    crate::model::knob::target_of_set_path(path)
        .map_or(crate::model::desired::Format::Text, |t| t.format())
        .same(a, b)
}

#[cfg(test)]
mod change_tests {
    use super::Change;
    use crate::model::desired::Target;
    use netsteer_host::ethtool::NicKnob;

    #[test]
    fn a_change_is_written_with_its_set_path_and_read_back_to_its_target() {
        let nic = Change {
            target: Target::Nic {
                dev: "eth2".into(),
                knob: NicKnob::RssIndirection,
            },
            from: "0 0".into(),
            to: "0 1".into(),
        };
        let text = serde_json::to_string(&nic).unwrap();
        assert_eq!(
            text,
            r#"{"path":"nic/eth2/rss/indirection","from":"0 0","to":"0 1"}"#
        );
        assert_eq!(serde_json::from_str::<Change>(&text).unwrap(), nic);
        let file = Change::file(
            "/proc/sys/net/core/netdev_budget",
            "300".into(),
            "600".into(),
        );
        let text = serde_json::to_string(&file).unwrap();
        assert_eq!(
            text,
            r#"{"path":"/proc/sys/net/core/netdev_budget","from":"300","to":"600"}"#
        );
        assert_eq!(serde_json::from_str::<Change>(&text).unwrap(), file);
        // Neither a file nor a NIC setting: refused by name, not taken as a file.
        let bad = r#"{"path":"proc/sys/net/core/netdev_budget","from":"1","to":"2"}"#;
        let err = serde_json::from_str::<Change>(bad).unwrap_err().to_string();
        assert!(err.contains("proc/sys/net/core/netdev_budget"), "{err}");
    }
}
