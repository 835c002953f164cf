//! The host's side of `tune search` (the engine is `netsteer_experiment::search`): the knobs to
//! search as dimensions, each with the host's current value as its baseline level, and the
//! host as the search's target: every configuration is applied through tune's transaction
//! (journaled, all or nothing) and left by rolling its own journal back, so a search, even a
//! killed one, leaves nothing `tune rollback` cannot undo.

use super::apply::{ApplyOptions, RollbackReport};
use super::journal;
use super::status::ApplyStatus;
use super::tuner::{TuneError, Tuner};
use crate::model::desired::{Action, Plan, Profile};
use crate::model::knob;
use crate::model::knob::{ItemId, every_napi_path};
use crate::model::planner::{Knob, PlanOptions, past_limit};
use netsteer_experiment::clock::Clock;
use netsteer_experiment::experiment::{self, BoxError, Comparison, Executor, Order};
use netsteer_experiment::search::{self as engine, Dim, Obs, Options, Outcome, Target};
use netsteer_experiment::workload::Goal;
use netsteer_host::ethtool::NicKnob;
use netsteer_host::netdev::NapiAttr;
use netsteer_host::view::HostView;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One knob to search: a `--set` path and the values to try, in order (the order the search
/// interpolates along).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchKnob {
    pub path: String,
    pub values: Vec<String>,
}

impl SearchKnob {
    /// Parses `PATH=V1,V2,...`; every `PATH=Vi` must be a knob `tune apply --set` takes.
    pub fn parse(s: &str) -> Result<SearchKnob, String> {
        let (path, values) = s
            .split_once('=')
            .ok_or_else(|| format!("--knob {s:?}: expected PATH=V1,V2,..."))?;
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if values.len() < 2 || values.len() > 32 {
            return Err(format!("--knob {s:?}: give 2 to 32 values"));
        }
        for v in &values {
            Knob::parse(&format!("{path}={v}")).map_err(|e| format!("--knob {s:?}: {e}"))?;
        }
        let mut seen = values.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != values.len() {
            return Err(format!("--knob {s:?}: a value is given twice"));
        }
        Ok(SearchKnob {
            path: path.to_string(),
            values,
        })
    }
}

/// What a configuration asks of the host: the knobs (each dimension is named by its path)
/// whose level differs from the baseline's.
fn knobs_of(dims: &[Dim], baseline: &[usize], config: &[usize]) -> Vec<Knob> {
    config
        .iter()
        .enumerate()
        .filter(|&(d, &l)| l != baseline[d])
        .map(|(d, &l)| Knob {
            path: dims[d].name.clone(),
            value: dims[d].levels[l].clone(),
            current: None,
        })
        .collect()
}

/// The search space on this host: each knob's values, with the value it holds now among them
/// (put in its numeric place, or first, when it is not one of them), and the baseline, the
/// configuration of the host as it is.
pub struct Space {
    /// One per knob, named by its path.
    pub dims: Vec<Dim>,
    pub baseline: Vec<usize>,
    /// The devices the knobs' plans are made for.
    pub devices: Vec<String>,
}

impl Space {
    pub fn read(
        tuner: &Tuner,
        knobs: &[SearchKnob],
        devices: &[String],
    ) -> Result<Space, TuneError> {
        let mut dims = Vec::new();
        let mut baseline = Vec::new();
        let view = tuner.view();
        for k in knobs {
            check_limit(&view, k)?;
            let current = current_value(tuner, devices, k)?;
            let mut levels = k.values.clone();
            let at = match levels.iter().position(|v| *v == current) {
                Some(i) => i,
                None => {
                    let n = |v: &str| v.parse::<f64>().ok();
                    let i = match n(&current) {
                        Some(c) if levels.iter().all(|v| n(v).is_some()) => levels
                            .iter()
                            .position(|v| n(v).unwrap() > c)
                            .unwrap_or(levels.len()),
                        _ => 0,
                    };
                    levels.insert(i, current);
                    i
                }
            };
            dims.push(Dim {
                name: k.path.clone(),
                levels,
            });
            baseline.push(at);
        }
        Ok(Space {
            dims,
            baseline,
            devices: devices.to_vec(),
        })
    }

    /// What puts the host into `config`, as plan options (made again after a channel change).
    pub fn options(&self, config: &[usize]) -> PlanOptions {
        options(&self.devices, knobs_of(&self.dims, &self.baseline, config))
    }

    /// The plan that puts the host into `config` (what `tune apply --plan` takes).
    pub fn plan(&self, tuner: &Tuner, config: &[usize]) -> Result<Plan, TuneError> {
        tuner.plan(&self.options(config))
    }
}

/// A NIC knob's values against the largest the device says it takes (channels, rings, on/off
/// settings), refused before anything runs rather than by the driver mid-search.
fn check_limit(view: &HostView, k: &SearchKnob) -> Result<(), TuneError> {
    let Ok((dev, knob, _)) = Knob::nic_knob(&k.path) else {
        return Ok(());
    };
    let Some(s) = view.nic(&dev).and_then(|n| n.settings.as_ref()) else {
        return Ok(());
    };
    match k
        .values
        .iter()
        .find_map(|v| past_limit(&knob, s, v).map(|max| (v, max)))
    {
        Some((v, max)) => Err(TuneError::Search(format!(
            "--knob {}: {v} is more than {dev} takes ({max})",
            k.path
        ))),
        None => Ok(()),
    }
}

/// What a knob reads now, as tune's plan reads it (a NIC setting through the NIC backend).
fn current_value(tuner: &Tuner, devices: &[String], k: &SearchKnob) -> Result<String, TuneError> {
    let plan = tuner.plan(&options(
        devices,
        vec![Knob {
            path: k.path.clone(),
            value: k.values[0].clone(),
            current: None,
        }],
    ))?;
    // A per-NAPI knob is one item per NAPI: its baseline is one value only if they all hold it.
    let mut values: Vec<(&str, Option<&str>)> = plan
        .items
        .iter()
        .map(|i| (i.id.as_str(), i.current.as_deref()))
        .collect();
    values.dedup_by_key(|v| v.1);
    match values.as_slice() {
        [(_, Some(v))] => Ok(v.to_string()),
        [_, _, ..] => Err(TuneError::Search(format!(
            "--knob {}: its instances hold different values ({}); set them alike first (tune apply --set {}=VALUE)",
            k.path,
            values
                .iter()
                .map(|(id, v)| format!("{id} {}", v.unwrap_or("unreadable")))
                .collect::<Vec<_>>()
                .join(", "),
            k.path
        ))),
        _ => Err(TuneError::Search(format!(
            "--knob {}: its value cannot be read",
            k.path
        ))),
    }
}

fn options(devices: &[String], knobs: Vec<Knob>) -> PlanOptions {
    PlanOptions {
        devices: devices.to_vec(),
        knobs,
        ..PlanOptions::for_profile(Profile::None)
    }
}

/// The plan in place while a trial or a face-off variant runs: applied through tune's
/// transaction, its journal kept to roll back on leaving (the search's trials and the
/// face-off's variants alike).
#[derive(Default)]
struct InPlace(Option<String>);

impl InPlace {
    /// `opts` made `plan`: after a channel change the later phases are planned again from
    /// them, for the queues the device has then (as `tune apply` does).
    fn apply(
        &mut self,
        tuner: &Tuner,
        plan: &Plan,
        opts: &PlanOptions,
        what: &str,
    ) -> Result<(), BoxError> {
        let r = tuner.apply(plan, Some(opts), &ApplyOptions::default())?;
        if r.status != ApplyStatus::Applied {
            // A failed apply restores what it wrote before it returns.
            return Err(format!(
                "applying {what}: {}{}",
                r.status,
                r.error.map(|e| format!(" ({e})")).unwrap_or_default()
            )
            .into());
        }
        self.0 = Some(r.journal);
        Ok(())
    }

    fn roll_back(&mut self, tuner: &Tuner) -> Result<(), BoxError> {
        let Some(journal) = self.0.take() else {
            return Ok(());
        };
        let r = tuner.rollback(Some(Path::new(&journal)))?;
        if !r.status.is_clean() {
            // Each item that would not go back, with the write's error: "incomplete" alone
            // leaves the user to dig the journal out of a state directory.
            return Err(format!(
                "rolling back {journal}: {}: {}",
                r.status,
                r.failed.join("; ")
            )
            .into());
        }
        Ok(())
    }
}

/// The host as the search's target. `measure` runs the workload once.
pub struct HostTarget<'a> {
    pub tuner: &'a Tuner,
    pub space: &'a Space,
    pub measure: &'a mut dyn FnMut() -> Result<Obs, BoxError>,
    /// The configuration entered now, rolled back on leaving.
    in_place: InPlace,
}

impl<'a> HostTarget<'a> {
    pub fn new(
        tuner: &'a Tuner,
        space: &'a Space,
        measure: &'a mut dyn FnMut() -> Result<Obs, BoxError>,
    ) -> HostTarget<'a> {
        HostTarget {
            tuner,
            space,
            measure,
            in_place: InPlace::default(),
        }
    }
}

impl Target for HostTarget<'_> {
    fn enter(&mut self, config: &[usize]) -> Result<(), BoxError> {
        if config == self.space.baseline.as_slice() {
            return Ok(());
        }
        let opts = self.space.options(config);
        let plan = self.tuner.plan(&opts)?;
        self.in_place
            .apply(self.tuner, &plan, &opts, &format!("{config:?}"))
    }

    fn measure(&mut self) -> Result<Obs, BoxError> {
        (self.measure)()
    }

    fn leave(&mut self, _config: &[usize]) -> Result<(), BoxError> {
        self.in_place.roll_back(self.tuner)
    }
}

/// Rolls back every journal a search left unfinished (killed mid-trial), newest first. The
/// next search runs this before anything else, and so does `tune rollback`.
pub fn recover(search_tuner: &Tuner) -> Result<Vec<RollbackReport>, TuneError> {
    let dir = search_tuner.state_dir();
    let all = journal::list(dir).map_err(|source| TuneError::State {
        path: dir.display().to_string(),
        source,
    })?;
    let mut out = Vec::new();
    for p in all.iter().rev() {
        let pending = journal::read(p).is_ok_and(|r| !journal::rolled_back(&r));
        if pending {
            out.push(search_tuner.rollback(Some(p))?);
        }
    }
    Ok(out)
}

/// What `tune search` asks for.
#[derive(Debug, Clone)]
pub struct Request {
    pub knobs: Vec<SearchKnob>,
    pub devices: Vec<String>,
    pub goal: Goal,
    pub options: Options,
    /// The static settings the configuration found is measured against at the end.
    pub against: Vec<Contender>,
}

/// Everything a search did, for the terminal, the JSON and the HTML report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchReport {
    pub goal: Goal,
    /// The knobs (named by path) with their levels, the baseline's among them.
    pub dims: Vec<Dim>,
    pub outcome: Outcome,
    /// The configuration found as a plan, for `tune apply --plan` and the fleet rollout.
    pub plan: Option<Plan>,
    /// Journals of an earlier, killed search rolled back before this one began.
    pub recovered: Vec<String>,
    /// Knobs that did not read as before after the search, `PATH: before → now` (empty: the
    /// host was left as it was found).
    pub not_restored: Vec<String>,
    /// The configuration found (or the baseline, when none was) against each static setting
    /// asked for, in fresh alternated runs.
    #[serde(default)]
    pub against: Vec<Faceoff>,
    /// Why each run not taken was measured again (the hypervisor took more than --max-steal
    /// of a cost CPU), in order: filled by whoever measures.
    #[serde(default)]
    pub reruns: Vec<String>,
    /// The steal of each run taken, in order: the share of its time the hypervisor took from
    /// the cost CPU that lost most, in %. Filled by whoever measures.
    #[serde(default)]
    pub steal_pct: Vec<f64>,
}

impl SearchReport {
    /// `PATH=VALUE` for each knob of a configuration that differs from the baseline.
    pub fn describe(&self, config: &[usize]) -> String {
        let changed: Vec<String> = config
            .iter()
            .enumerate()
            .filter(|&(d, &l)| l != self.outcome.baseline[d])
            .map(|(d, &l)| format!("{}={}", self.dims[d].name, self.dims[d].levels[l]))
            .collect();
        if changed.is_empty() {
            "the baseline".into()
        } else {
            changed.join(" ")
        }
    }
}

/// Runs a search on the host `tuner` writes (its state directory the search's own, see
/// [`state_dir`]): an unfinished earlier search is rolled back first, every trial is applied
/// and rolled back through tune's transaction, and afterwards every knob is read again and
/// compared with what it held before.
pub fn run(
    tuner: &Tuner,
    req: &Request,
    measure: &mut dyn FnMut() -> Result<Obs, BoxError>,
    clock: &dyn Clock,
) -> Result<SearchReport, TuneError> {
    let recovered = recover(tuner)?
        .into_iter()
        .map(|r| format!("{} ({})", r.journal, r.status))
        .collect();
    let space = Space::read(tuner, &req.knobs, &req.devices)?;
    // What each knob held before: the baseline's level, read by Space::read.
    let before: Vec<&String> = space
        .dims
        .iter()
        .zip(&space.baseline)
        .map(|(d, &l)| &d.levels[l])
        .collect();
    let opts = Options {
        goal: req.goal.limit_ns(),
        ..req.options.clone()
    };
    let outcome = {
        let mut target = HostTarget::new(tuner, &space, measure);
        engine::search(&mut target, &space.dims, &space.baseline, &opts, clock)
            .map_err(|e| TuneError::Search(e.to_string()))?
    };
    let found_opts = outcome.best.as_ref().map(|c| space.options(c));
    let plan = found_opts.as_ref().map(|o| tuner.plan(o)).transpose()?;
    let against = if req.against.is_empty() || outcome.stopped.is_some() {
        Vec::new()
    } else {
        faceoff(
            tuner,
            req,
            plan.as_ref().zip(found_opts.as_ref()),
            measure,
            clock,
        )?
    };
    let after = req
        .knobs
        .iter()
        .map(|k| current_value(tuner, &req.devices, k))
        .collect::<Result<Vec<_>, _>>()?;
    let not_restored = req
        .knobs
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| **b != *a)
        .map(|(k, (b, a))| format!("{}: {b} → {a}", k.path))
        .collect();
    Ok(SearchReport {
        goal: req.goal,
        dims: space.dims,
        outcome,
        plan,
        recovered,
        not_restored,
        against,
        reruns: Vec::new(),
        steal_pct: Vec::new(),
    })
}

/// A static setting to measure the configuration found against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Contender {
    /// netsteer's `--profile latency` for the devices.
    Latency,
    /// netsteer's `--profile balanced`.
    Balanced,
    /// netsteer's `--profile throughput`.
    Throughput,
    /// The network settings of tuned's network-latency profile as tuned ships it
    /// (profiles/network-latency/tuned.conf): net.core.busy_read=50, net.core.busy_poll=50,
    /// net.ipv4.tcp_fastopen=3. Its CPU settings (governor, C-states) are not network
    /// settings and are left alone.
    TunedNetworkLatency,
}

impl Contender {
    pub fn name(self) -> &'static str {
        match self {
            Contender::Latency => "netsteer latency profile",
            Contender::Balanced => "netsteer balanced profile",
            Contender::Throughput => "netsteer throughput profile",
            Contender::TunedNetworkLatency => "tuned network-latency (its network settings)",
        }
    }

    fn options(self, tuner: &Tuner, devices: &[String]) -> Result<PlanOptions, TuneError> {
        let profile = match self {
            Contender::Latency => Profile::Latency,
            Contender::Balanced => Profile::Balanced,
            Contender::Throughput => Profile::Throughput,
            Contender::TunedNetworkLatency => Profile::None,
        };
        let knobs = match self {
            Contender::TunedNetworkLatency => [
                "/proc/sys/net/core/busy_read=50",
                "/proc/sys/net/core/busy_poll=50",
                "/proc/sys/net/ipv4/tcp_fastopen=3",
            ]
            .iter()
            .map(|k| Knob::parse(k))
            .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        Ok(PlanOptions {
            devices: devices.to_vec(),
            knobs,
            live: tuner.fs().is_live(),
            ..PlanOptions::for_profile(profile)
        })
    }
}

/// The configuration found against one static setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Faceoff {
    pub contender: Contender,
    /// What the static setting's plan changed, and what it could not (`PATH: why`).
    pub changes: Vec<String>,
    pub skipped: Vec<String>,
    /// `before` is the configuration found, `after` the static setting: a verdict of
    /// "worse" means the static setting is worse than what the search found.
    pub latency: Comparison,
    pub cost: Comparison,
    /// The static setting's latency median within the goal.
    pub meets_goal: bool,
}

/// Plans as an experiment's variants: each applied through the tuner, rolled back on leaving.
struct Plans<'a> {
    tuner: &'a Tuner,
    /// `None`: the host as it is; else a plan and the options that made it.
    plans: Vec<Option<(&'a Plan, &'a PlanOptions)>>,
    measure: &'a mut dyn FnMut() -> Result<Obs, BoxError>,
    in_place: InPlace,
}

impl Executor for Plans<'_> {
    type Measure = Obs;
    fn enter(&mut self, variant: usize) -> Result<(), BoxError> {
        match self.plans[variant] {
            Some((plan, opts)) if plan.items.iter().any(|i| i.action == Action::Change) => self
                .in_place
                .apply(self.tuner, plan, opts, &format!("variant {variant}")),
            _ => Ok(()),
        }
    }
    fn measure(&mut self, _variant: usize, _repeat: u32) -> Result<Obs, BoxError> {
        (self.measure)()
    }
    fn leave(&mut self, _variant: usize) -> Result<(), BoxError> {
        self.in_place.roll_back(self.tuner)
    }
}

/// Alternated runs of the configuration found and every contender, each measured as often as
/// a confirmation; a run that loses packets is kept (the comparison shows it), not fatal.
fn faceoff(
    tuner: &Tuner,
    req: &Request,
    found: Option<(&Plan, &PlanOptions)>,
    measure: &mut dyn FnMut() -> Result<Obs, BoxError>,
    clock: &dyn Clock,
) -> Result<Vec<Faceoff>, TuneError> {
    let statics = req
        .against
        .iter()
        .map(|c| {
            let opts = c.options(tuner, &req.devices)?;
            Ok((tuner.plan(&opts)?, opts))
        })
        .collect::<Result<Vec<_>, TuneError>>()?;
    let mut exec = Plans {
        tuner,
        plans: std::iter::once(found)
            .chain(statics.iter().map(|(p, o)| Some((p, o))))
            .collect(),
        measure,
        in_place: InPlace::default(),
    };
    let n = exec.plans.len();
    let runs = experiment::run(
        &mut exec,
        n,
        req.options.confirm_repeats,
        Order::Alternated,
        clock,
        |_| Ok(()),
    )
    .map_err(|e| TuneError::Search(format!("measuring against the static settings: {e}")))?;
    let side = |v: usize| -> (Vec<f64>, Vec<f64>) {
        runs.iter()
            .filter(|t| t.variant == v)
            .map(|t| (t.measure.latency, t.measure.cost))
            .unzip()
    };
    let (fl, fc) = side(0);
    let mut out = Vec::new();
    for (i, (c, (plan, _))) in req.against.iter().zip(&statics).enumerate() {
        let (l, co) = side(i + 1);
        let none = || TuneError::Search(format!("{}: no finite measure", c.name()));
        let latency = experiment::compare(true, &fl, &l).ok_or_else(none)?;
        let cost = experiment::compare(true, &fc, &co).ok_or_else(none)?;
        let changes = plan
            .items
            .iter()
            .filter(|it| it.action == Action::Change)
            .map(|it| format!("{}={}", it.id, it.desired))
            .collect();
        let skipped = plan
            .items
            .iter()
            .filter_map(|it| match &it.action {
                Action::Skip(why) => Some(format!("{}: {why}", it.id)),
                _ => None,
            })
            .collect();
        out.push(Faceoff {
            contender: *c,
            changes,
            skipped,
            meets_goal: latency.after.median <= req.goal.limit_ns(),
            latency,
            cost,
        });
    }
    Ok(out)
}

/// The `--set` path of a NIC setting: its item's id.
fn nic_path(dev: &str, knob: NicKnob) -> String {
    let dev = dev.to_string();
    ItemId::Nic { dev, knob }.to_string()
}

/// The knobs a search tries when none are named, for `devices`: those this host has and can
/// read now (each probed as a plan would read it), with values that span what each does.
/// - each rx queue's RPS mask: off, or every online CPU (scaling.rst: RPS moves the protocol
///   work off the IRQ's CPU, a win with spare CPUs and a cost on few);
/// - GRO (`nic/IF/feature/rx-gro`): off or on, where the driver lets it change;
/// - interrupt coalescing (`nic/IF/coalesce/rx-usecs`): 0, 8, 32, 64 µs, where the driver has it;
/// - the device-wide NAPI deferral (napi.rst): `gro_flush_timeout` 0, 20, 200 µs and
///   `napi_defer_hard_irqs` 0, 2, 10, which together trade IRQs for polling;
/// - for a latency goal, busy polling (`net.core.busy_read`/`busy_poll` 0, 25, 50, 100 µs), a
///   global sysctl only the root namespace has.
pub fn auto_knobs(tuner: &Tuner, devices: &[String], goal: &Goal) -> Vec<SearchKnob> {
    let view = tuner.view();
    let mut out = Vec::new();
    let mut offer = |path: String, values: &[&str]| {
        let k = SearchKnob {
            path,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        if current_value(tuner, devices, &k).is_ok() {
            out.push(k);
        }
    };
    let all = view.topology.online.to_mask(view.topology.nr_cpu_ids).ok();
    let off = netsteer_host::CpuSet::new()
        .to_mask(view.topology.nr_cpu_ids)
        .ok();
    for dev in devices {
        let Some(nic) = view.nic(dev) else { continue };
        if let (Some(all), Some(off)) = (&all, &off) {
            for q in &nic.rx_queues {
                let rps = knob::Target::Queue {
                    dev: dev.clone(),
                    queue: q.index,
                    file: knob::QueueFile::RpsCpus,
                };
                offer(rps.to_string(), &[off, all]);
            }
        }
        // Channels over their legal range (1 to the device's maximum; powers of two and the
        // maximum): one queue is seed 000's "every flow on one queue" rung, the maximum one
        // queue per CPU. A trial that drops queues also drops their RPS knobs (tune re-plans
        // after a channel change and skips files that went away).
        if let Some(s) = nic.settings.as_ref() {
            for kind in ["combined", "rx"] {
                let knob = NicKnob::Channels(kind.into());
                if let (Ok(_), Some(max @ 2..)) = (knob.read_number(s), knob.limit(s)) {
                    let mut levels: Vec<String> =
                        std::iter::successors(Some(1u64), |n| Some(n * 2).filter(|n| *n < max))
                            .chain([max])
                            .map(|n| n.to_string())
                            .collect();
                    levels.truncate(32);
                    let refs: Vec<&str> = levels.iter().map(String::as_str).collect();
                    offer(nic_path(dev, knob), &refs);
                    break;
                }
            }
        }
        offer(
            nic_path(dev, NicKnob::Feature("rx-gro".into())),
            &["0", "1"],
        );
        offer(
            nic_path(dev, NicKnob::Coalesce("rx-usecs".into())),
            &["0", "8", "32", "64"],
        );
        let device = |file| {
            knob::Target::DeviceFile {
                dev: dev.clone(),
                file,
            }
            .to_string()
        };
        offer(
            device(knob::DeviceFile::GroFlushTimeout),
            &["0", "20000", "200000"],
        );
        offer(
            device(knob::DeviceFile::NapiDeferHardIrqs),
            &["0", "2", "10"],
        );
        // Threaded NAPI: polling in a kthread the scheduler places instead of in softirq on
        // the CPU the IRQ hit (napi.rst, "Threaded NAPI").
        offer(device(knob::DeviceFile::Threaded), &["0", "1"]);
        // IRQ suspension (napi.rst, "IRQ suspension", 6.13+): per NAPI only, and it acts
        // only for an application that busy-polls through epoll with prefer_busy_poll.
        if matches!(goal, Goal::Latency { .. }) {
            offer(
                every_napi_path(dev, NapiAttr::IrqSuspendTimeout),
                &["0", "20000000"],
            );
        }
    }
    if matches!(goal, Goal::Latency { .. }) {
        for s in ["busy_read", "busy_poll"] {
            let sysctl = knob::Target::Sysctl {
                name: format!("net/core/{s}"),
            };
            offer(sysctl.to_string(), &["0", "25", "50", "100"]);
        }
    }
    out
}
