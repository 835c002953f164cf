//! The search behind `tune search`: which settings meet a latency goal at the least cost (CPU
//! per request), trying few configurations, each against the baseline in the same trial.
//!
//! **Why a model over additive level effects, not a Gaussian process or successive halving.**
//! A trial is minutes of a real workload, so the budget is tens of trials, over a space of
//! discrete knobs (coalescing steps, busy-poll budgets, RPS on or off, deferral counts) with
//! 10^3–10^6 configurations. Successive halving needs many cheap partial runs, which a latency
//! percentile does not have (a short run is a different measurement, not a cheaper one). A
//! generic GP over one-hot levels needs more trials than the budget to learn its length
//! scales. What the seeds show is that the network knobs act mostly one at a time, each by a
//! factor (seed 000's ladder: each rung moves the round trip by its own share; seed 001: RPS
//! alone costs 31 % on 2 vCPUs). So the model is log-additive: log(latency / baseline) and
//! log(cost / baseline) are sums of one effect per knob level, fitted by least squares (a small
//! ridge) to every trial; the runs' own scatter is the noise model. The search first screens
//! each knob (its far levels; the levels between are interpolated in their order until a trial
//! uses them), then spends the rest of the budget on the configuration the model predicts
//! cheapest among those it predicts within the goal less the noise, learning from each.
//! Interactions the model cannot express show up as residuals, and nothing is reported on the
//! model's word: the three measured configurations estimated cheapest within the goal (each
//! trial's own ratios shrunk toward the model's, so the one that came in cheap or fast by luck
//! is not taken at its word) are confirmed by fresh alternated runs against the baseline, and
//! of those whose confirmation meets the goal the one reported is the cheapest by the
//! confirmation and the estimate together (their geometric mean: the confirmation alone is
//! five runs a side, and picking the cheapest of three such measurements picks the luckiest).
//!
//! What it achieves is measured on synthetic surfaces with a known optimum
//! (`crates/bench/tests/search.rs`): within 5 % of the optimum's cost in 20 trials on 273 of
//! 300 surfaces (91 %; the target is 90 %), the optimum being the cheapest configuration clear
//! of the goal by the confirmation's resolution (2 %; against one exactly on the goal, 252).
//! Restricting the guided picks to the neighbourhood of the best so far, an optimism bonus for
//! untried levels, screening every level or the middle ones too, more runs per trial and more
//! confirmations did not raise it.
//!
//! Every trial goes through [`experiment::run`]: the baseline and the candidate alternate (A B
//! A B), so a host that drifts during the search does not pass the drift off as a knob's
//! effect; each is entered and left (applied through tune's transaction and rolled back, in
//! `tune search`), also when a measurement fails.
//!
//! **Loss is judged against the baseline's, in the same runs.** A real host loses a datagram
//! now and then whatever its settings (on a busy machine the baseline itself did), so one lost
//! in a candidate's run says nothing of the candidate. A candidate is rejected when it loses
//! more than the baseline beyond the runs' scatter ([`loses_more`]: its fewest lost in a run
//! above the baseline's most); a rejected trial is never a result, and the model takes its
//! latency and its cost as at least `abort_factor` (2 to 100) times the baseline's, which
//! weighs down the knob levels it used and so its neighbours. The search still ends on harm past a stated bound:
//! a candidate run whose latency is past `abort_factor` × the worst of the goal and the
//! baseline's runs on either side of it (judged once the next baseline run is in, one run
//! later; a trial's last candidate run by the run before it), or a candidate that has lost
//! more than `abort_factor` × (the baseline's loss so far + [`LOSS_FLOOR`]) in the runs of its
//! trial so far. The latency bound looks at the baseline beside the run for the reason the loss
//! bound looks at the baseline of the same trial: on a busy host a spike falls on whatever runs
//! then (a veth search beside a VM test ended on a candidate's 2.09 ms against a 0.42 ms goal,
//! the baseline having spiked to 3.24 ms just before the search), and a candidate slower than
//! the goal by the factor while the runs around it are not is the candidate's. Only the two
//! neighbours count, so one spike excuses one run, not the rest of the search.

use crate::clock::Clock;
use crate::experiment::{self, BoxError, Comparison, Executor, ExperimentError, Order, Verdict};
use crate::stats::Spread;
use serde::{Deserialize, Serialize};

/// One knob: its name and its levels in order (the order the interpolation follows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dim {
    pub name: String,
    pub levels: Vec<String>,
}

/// A configuration: a level index per dimension.
pub type Config = Vec<usize>;

/// One measurement of the current configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Obs {
    /// The goal's latency (e.g. p99, ns).
    pub latency: f64,
    /// What is minimized (e.g. CPU ns per request).
    pub cost: f64,
    /// Requests or packets lost in the run.
    pub lost: u64,
}

/// What the search drives: `tune search` applies a configuration through tune's transaction
/// and rolls it back; the tests drive synthetic surfaces.
pub trait Target {
    fn enter(&mut self, config: &[usize]) -> Result<(), BoxError>;
    fn measure(&mut self) -> Result<Obs, BoxError>;
    fn leave(&mut self, config: &[usize]) -> Result<(), BoxError>;
}

/// The losses a baseline may be taken to have beyond what it lost, in the bound past which a
/// candidate's loss ends the search: `abort_factor` × (the baseline's + this). With the
/// default factor, a candidate beside a baseline that lost nothing is stopped past 300 lost
/// in its trial (6 % of udp-echo's 5,000 requests a run), not at its first.
pub const LOSS_FLOOR: u64 = 100;

/// The defaults of [`Options`], which `tune search`'s flags show as theirs.
pub const DEFAULT_BUDGET: u32 = 20;
pub const DEFAULT_REPEATS: u32 = 3;
pub const DEFAULT_CONFIRM_REPEATS: u32 = 5;
pub const DEFAULT_ABORT_FACTOR: f64 = 3.0;
pub const DEFAULT_SEED: u64 = 1;

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The goal: the latency's median over a trial's runs at most this.
    pub goal: f64,
    /// Trials, the confirmation not counted.
    pub budget: u32,
    /// Runs of each side per trial (alternated).
    pub repeats: u32,
    /// Runs of each side in the confirmation.
    pub confirm_repeats: u32,
    /// A candidate run with latency above this × the worst of the goal and the baseline's
    /// runs on either side of it ends the search.
    pub abort_factor: f64,
    /// Configurations the guided phase considers at most (the space is enumerated up to this;
    /// beyond, this many are sampled).
    pub max_candidates: usize,
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            goal: f64::INFINITY,
            budget: DEFAULT_BUDGET,
            repeats: DEFAULT_REPEATS,
            confirm_repeats: DEFAULT_CONFIRM_REPEATS,
            abort_factor: DEFAULT_ABORT_FACTOR,
            max_candidates: 200_000,
            seed: DEFAULT_SEED,
        }
    }
}

/// Why a trial ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// One knob moved from the baseline.
    Screen,
    /// The model's pick.
    Guided,
}

/// One trial: the candidate against the baseline, runs alternated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub phase: Phase,
    pub config: Config,
    pub base_latency: Spread,
    pub base_cost: Spread,
    pub latency: Spread,
    pub cost: Spread,
    pub lost: u64,
    /// What the baseline lost in the same trial's runs.
    #[serde(default)]
    pub base_lost: u64,
    /// Why the candidate was rejected: it lost more than the baseline beyond the runs'
    /// scatter ([`loses_more`]). A rejected trial is no result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// What the model predicted for it (latency, cost), before it ran.
    pub predicted: Option<(f64, f64)>,
}

impl Trial {
    fn latency_ratio(&self) -> f64 {
        self.latency.median / self.base_latency.median
    }
    fn cost_ratio(&self) -> f64 {
        self.cost.median / self.base_cost.median
    }
}

/// The confirmation: fresh alternated runs of the baseline and the best configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confirmation {
    pub config: Config,
    pub latency: Comparison,
    pub cost: Comparison,
    /// The best configuration's latency median within the goal.
    pub meets_goal: bool,
    /// Set when the configuration lost more than the baseline beyond the runs' scatter in the
    /// confirmation ([`loses_more`]): then it is not found, whatever its latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_more: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub baseline: Config,
    pub trials: Vec<Trial>,
    /// Confirmations run, in order: up to three candidates, each against the baseline.
    pub confirmations: Vec<Confirmation>,
    /// The configuration found: confirmed within the goal and cheaper than the baseline beyond
    /// the noise, or within the goal where the baseline is not. `None`: none was.
    pub best: Option<Config>,
    /// Why the search ended early (a candidate lost past the bound of [`LOSS_FLOOR`], was
    /// slower than the goal and the baseline beside it by the abort factor, or failed to apply
    /// or roll back).
    pub stopped: Option<String>,
    /// Each knob level's fitted effect on latency and on cost, as factors against the
    /// baseline's level (1.0 = none), for the report: `effects[d][l] = (latency, cost)`.
    pub effects: Vec<Vec<(f64, f64)>>,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("the search space is empty or a knob has no level")]
    EmptySpace,
    #[error("the baseline names {0} knobs for {1} dimensions, or a level out of range")]
    BadBaseline(usize, usize),
}

/// Runs the search from `baseline` (the host as it is).
pub fn search<T: Target>(
    target: &mut T,
    dims: &[Dim],
    baseline: &[usize],
    opts: &Options,
    clock: &dyn Clock,
) -> Result<Outcome, SearchError> {
    if dims.is_empty() || dims.iter().any(|d| d.levels.is_empty()) {
        return Err(SearchError::EmptySpace);
    }
    if baseline.len() != dims.len() || baseline.iter().zip(dims).any(|(l, d)| *l >= d.levels.len())
    {
        return Err(SearchError::BadBaseline(baseline.len(), dims.len()));
    }
    let mut s = State {
        dims,
        baseline: baseline.to_vec(),
        opts,
        trials: Vec::new(),
        stopped: None,
    };
    for config in screening(dims, baseline) {
        if s.trials.len() as u32 >= opts.budget || s.stopped.is_some() {
            break;
        }
        s.trial(target, clock, config, Phase::Screen, None);
    }
    let mut rng = opts.seed.max(1);
    while (s.trials.len() as u32) < opts.budget && s.stopped.is_none() {
        let model = s.fit();
        let Some((config, predicted)) = s.pick(&model, &mut rng) else {
            break;
        };
        s.trial(target, clock, config, Phase::Guided, Some(predicted));
    }
    let model = s.fit();
    let effects = model.effects(dims);
    let mut confirmations = Vec::new();
    let mut best = None;
    if s.stopped.is_none() {
        // The three measured candidates the estimates rank cheapest within the goal are each
        // confirmed (5 runs a side, more than a trial's 3), and the cheapest confirmed within
        // the goal wins: the cheapest of noisy trials is the one whose cost was most
        // underestimated, and the confirmation is the better measurement.
        let mut winner: Option<(f64, Config)> = None;
        for (estimate, config) in s.ranked(&model).into_iter().take(3) {
            match confirm(target, clock, &s, &config) {
                Ok(c) => {
                    let ok = c.meets_goal
                        && c.lost_more.is_none()
                        && (c.cost.verdict == Verdict::Better
                            || c.latency.before.median > opts.goal);
                    let ratio = (c.cost.after.median / c.cost.before.median * estimate).sqrt();
                    if ok && winner.as_ref().is_none_or(|(r, _)| ratio < *r) {
                        winner = Some((ratio, config));
                    }
                    confirmations.push(c);
                }
                Err(e) => {
                    s.stopped = Some(format!("confirmation: {e}"));
                    winner = None;
                    break;
                }
            }
        }
        best = winner.map(|(_, c)| c);
    }
    Ok(Outcome {
        baseline: baseline.to_vec(),
        trials: s.trials,
        confirmations,
        best,
        stopped: s.stopped,
        effects,
    })
}

/// One knob moved at a time from the baseline, to each of its far ends: the levels between are
/// interpolated until a guided trial uses them (screening every level would spend most of a
/// small budget on knobs that turn out not to matter).
fn screening(dims: &[Dim], baseline: &[usize]) -> Vec<Config> {
    let mut out = Vec::new();
    for (d, dim) in dims.iter().enumerate() {
        let last = dim.levels.len() - 1;
        for l in [0, last] {
            let mut c = baseline.to_vec();
            c[d] = l;
            if l != baseline[d] && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

struct State<'a> {
    dims: &'a [Dim],
    baseline: Config,
    opts: &'a Options,
    trials: Vec<Trial>,
    stopped: Option<String>,
}

/// The two configurations of a trial as the experiment's variants (0: the baseline).
struct Pair<'a, T: Target> {
    target: &'a mut T,
    configs: [&'a [usize]; 2],
}

impl<T: Target> Executor for Pair<'_, T> {
    type Measure = Obs;
    fn enter(&mut self, variant: usize) -> Result<(), BoxError> {
        self.target.enter(self.configs[variant])
    }
    fn measure(&mut self, _variant: usize, _repeat: u32) -> Result<Obs, BoxError> {
        self.target.measure()
    }
    fn leave(&mut self, variant: usize) -> Result<(), BoxError> {
        self.target.leave(self.configs[variant])
    }
}

/// The runs of one side: (latencies, costs, lost per run).
type Sides = [(Vec<f64>, Vec<f64>, Vec<u64>); 2];

/// Whether the candidate's losses stand above the baseline's beyond the scatter of their runs:
/// its fewest lost in a run is more than the baseline's most (the runs' ranges apart, as the
/// three-way verdict asks of a difference). `0 0 0` against the baseline's `0 0 0` is `0 1 0`'s
/// match; `2 1 3` is more. The reason, when it is.
pub fn loses_more(base: &[u64], cand: &[u64]) -> Option<String> {
    let (Some(&most), Some(&fewest)) = (base.iter().max(), cand.iter().min()) else {
        return None;
    };
    let list = |v: &[u64]| {
        v.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    (fewest > most).then(|| {
        format!(
            "lost more than the baseline beyond its runs' scatter: {} a run against {} in the same alternated runs",
            list(cand),
            list(base)
        )
    })
}

fn alternate<T: Target>(
    target: &mut T,
    clock: &dyn Clock,
    baseline: &[usize],
    config: &[usize],
    repeats: u32,
    goal: Option<f64>,
    abort_factor: f64,
) -> Result<Sides, ExperimentError> {
    let mut pair = Pair {
        target,
        configs: [baseline, config],
    };
    // A factor from the library's caller unchecked (the CLI holds it to 1–100).
    let factor = if abort_factor.is_finite() {
        abort_factor.max(1.0)
    } else {
        DEFAULT_ABORT_FACTOR
    };
    // A candidate run past the factor × the worse of the goal and the baseline's runs on
    // either side of it: a spike of the host falls on the runs around it too, harm does not.
    let past = |latency: f64, before: f64, after: f64| -> Option<String> {
        let goal = goal?;
        let limit = factor * goal.max(before).max(after);
        (latency > limit).then(|| {
            format!(
                "the candidate's latency {latency:.0} was past the abort factor × the worse of the goal and the baseline's runs beside it ({before:.0} before, {}): {limit:.0}",
                if after > 0.0 {
                    format!("{after:.0} after")
                } else {
                    "none after".to_string()
                }
            )
        })
    };
    // The losses so far of each side (the baseline's run comes first in each pair), the
    // baseline's last run, and the candidate's run still to be judged against the next one.
    let mut so_far = [0u64; 2];
    let mut last_base = 0.0f64;
    let mut pending: Option<(f64, f64)> = None;
    let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
    let runs = experiment::run(&mut pair, 2, repeats, Order::Alternated, clock, |t| {
        so_far[t.variant] = so_far[t.variant].saturating_add(t.measure.lost);
        if t.variant == 0 {
            last_base = finite(t.measure.latency);
            if let Some((latency, before)) = pending.take()
                && let Some(why) = past(latency, before, last_base)
            {
                return Err(why.into());
            }
            return Ok(());
        }
        let bound = factor * (so_far[0].saturating_add(LOSS_FLOOR)) as f64;
        if so_far[1] as f64 > bound {
            return Err(format!(
                "the candidate lost {} against the baseline's {} in the same runs, past the bound of {bound:.0} (abort factor × (the baseline's + {LOSS_FLOOR}))",
                so_far[1], so_far[0]
            )
            .into());
        }
        pending = Some((t.measure.latency, last_base));
        Ok(())
    })?;
    // The trial's last candidate run has no baseline run after it: judged by the one before
    // (the candidate has been left already, as after every run).
    if let Some((latency, before)) = pending
        && let Some(why) = past(latency, before, 0.0)
    {
        return Err(ExperimentError::Failed(why.into()));
    }
    let mut sides: Sides = Default::default();
    for t in runs {
        let side = &mut sides[t.variant];
        side.0.push(t.measure.latency);
        side.1.push(t.measure.cost);
        side.2.push(t.measure.lost);
    }
    Ok(sides)
}

impl State<'_> {
    fn trial<T: Target>(
        &mut self,
        target: &mut T,
        clock: &dyn Clock,
        config: Config,
        phase: Phase,
        predicted: Option<(f64, f64)>,
    ) {
        match alternate(
            target,
            clock,
            &self.baseline,
            &config,
            self.opts.repeats,
            self.bounded_goal(),
            self.opts.abort_factor,
        ) {
            Ok([(bl, bc, blost), (l, c, lost)]) => {
                let spread = |v: &[f64]| Spread::of(v).unwrap_or_default();
                self.trials.push(Trial {
                    phase,
                    config,
                    base_latency: spread(&bl),
                    base_cost: spread(&bc),
                    latency: spread(&l),
                    cost: spread(&c),
                    lost: lost.iter().fold(0, |a: u64, b| a.saturating_add(*b)),
                    base_lost: blost.iter().fold(0, |a: u64, b| a.saturating_add(*b)),
                    rejected: loses_more(&blost, &lost),
                    predicted,
                });
            }
            // Every configuration entered was left (the experiment's contract): the host is
            // as it was.
            Err(e) => self.stopped = Some(format!("trial {}: {e}", self.trials.len() + 1)),
        }
    }

    /// The goal the latency abort is judged from (none for an unbounded goal).
    fn bounded_goal(&self) -> Option<f64> {
        self.opts.goal.is_finite().then_some(self.opts.goal)
    }

    /// The baseline's medians over every trial: the reference the ratios multiply.
    fn reference(&self) -> (f64, f64) {
        let l: Vec<f64> = self.trials.iter().map(|t| t.base_latency.median).collect();
        let c: Vec<f64> = self.trials.iter().map(|t| t.base_cost.median).collect();
        (
            Spread::of(&l).map_or(f64::NAN, |s| s.median),
            Spread::of(&c).map_or(f64::NAN, |s| s.median),
        )
    }

    /// How far a trial's runs scatter, relative: the median over trials of the wider side's
    /// (max − min) / median, halved: the margin a prediction keeps from the goal.
    fn noise(&self) -> f64 {
        let w: Vec<f64> = self
            .trials
            .iter()
            .map(|t| {
                (t.latency.width() / t.latency.median)
                    .max(t.base_latency.width() / t.base_latency.median)
            })
            .collect();
        (Spread::of(&w).map_or(0.05, |s| s.median) / 2.0).clamp(0.005, 0.5)
    }

    fn fit(&self) -> Model {
        Model::fit(
            self.dims,
            &self.baseline,
            &self.trials,
            self.opts.abort_factor,
        )
    }

    /// The untried configuration the model predicts cheapest within the goal less the noise
    /// (or, when it predicts none within, the one it predicts fastest).
    fn pick(&self, model: &Model, rng: &mut u64) -> Option<(Config, (f64, f64))> {
        let (ref_l, ref_c) = self.reference();
        let limit = self.opts.goal * (1.0 - self.noise());
        let tried = |c: &Config| *c == self.baseline || self.trials.iter().any(|t| t.config == *c);
        let mut best_in: Option<(f64, Config, (f64, f64))> = None;
        let mut best_out: Option<(f64, Config, (f64, f64))> = None;
        for c in candidates(self.dims, self.opts.max_candidates, rng) {
            if tried(&c) {
                continue;
            }
            let (l, co) = model.predict(&c);
            let (l, co) = (ref_l * l, ref_c * co);
            if l <= limit {
                if best_in.as_ref().is_none_or(|(k, ..)| co < *k) {
                    best_in = Some((co, c, (l, co)));
                }
            } else if best_out.as_ref().is_none_or(|(k, ..)| l < *k) {
                best_out = Some((l, c, (l, co)));
            }
        }
        best_in.or(best_out).map(|(_, c, p)| (c, p))
    }

    /// Measured candidates within the goal, cheapest first. A configuration's latency and cost
    /// are its trial's ratios to that trial's baseline, shrunk toward what the model fitted on
    /// every trial says (their geometric mean): the candidate that came in just under the goal
    /// by luck in its own trial is the one a confirmation would then see over it.
    fn ranked(&self, model: &Model) -> Vec<(f64, Config)> {
        let (ref_l, ref_c) = self.reference();
        let limit = self.opts.goal * (1.0 + self.noise());
        let mut within: Vec<(f64, Config)> = Vec::new();
        for t in &self.trials {
            if t.rejected.is_some() || within.iter().any(|(_, c)| *c == t.config) {
                continue;
            }
            let (pl, pc) = model.predict(&t.config);
            let l = ref_l * (t.latency_ratio() * pl).sqrt();
            let c = ref_c * (t.cost_ratio() * pc).sqrt();
            // Within the goal up to the noise: the confirmation has the last word.
            if l <= limit {
                within.push((c / ref_c, t.config.clone()));
            }
        }
        within.sort_by(|a, b| a.0.total_cmp(&b.0));
        within
    }
}

fn confirm<T: Target>(
    target: &mut T,
    clock: &dyn Clock,
    s: &State,
    config: &[usize],
) -> Result<Confirmation, ExperimentError> {
    let [(bl, bc, blost), (l, c, lost)] = alternate(
        target,
        clock,
        &s.baseline,
        config,
        s.opts.confirm_repeats,
        s.bounded_goal(),
        s.opts.abort_factor,
    )?;
    let none = || ExperimentError::Failed("no finite value in the confirmation's runs".into());
    let latency = experiment::compare(true, &bl, &l).ok_or_else(none)?;
    let cost = experiment::compare(true, &bc, &c).ok_or_else(none)?;
    Ok(Confirmation {
        config: config.to_vec(),
        meets_goal: latency.after.median <= s.opts.goal,
        lost_more: loses_more(&blost, &lost),
        latency,
        cost,
    })
}

/// Every configuration, or `max` sampled ones when there are more.
fn candidates(dims: &[Dim], max: usize, rng: &mut u64) -> Vec<Config> {
    let total = dims
        .iter()
        .try_fold(1usize, |n, d| n.checked_mul(d.levels.len()));
    match total {
        Some(n) if n <= max => {
            let mut out = Vec::with_capacity(n);
            let mut c = vec![0; dims.len()];
            loop {
                out.push(c.clone());
                let mut d = 0;
                loop {
                    if d == dims.len() {
                        return out;
                    }
                    c[d] += 1;
                    if c[d] < dims[d].levels.len() {
                        break;
                    }
                    c[d] = 0;
                    d += 1;
                }
            }
        }
        _ => (0..max)
            .map(|_| {
                dims.iter()
                    .map(|d| (next(rng) % d.levels.len() as u64) as usize)
                    .collect()
            })
            .collect(),
    }
}

/// xorshift64*: the sampling needs spread, not quality.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// log(latency ratio) and log(cost ratio) as sums of level effects. A level no trial has
/// used takes its effect by interpolation between the nearest used levels of its knob (the
/// baseline's level is used, with effect 0), or the nearest one's where it is outside them.
struct Model {
    /// Per knob, per level: the fitted effect (log latency, log cost), `None` if unused.
    fitted: Vec<Vec<Option<(f64, f64)>>>,
}

impl Model {
    /// `loss_penalty`: the least latency and cost factor (2 to 100) a rejected trial (one that
    /// lost more than its baseline) is taken at, so the levels it used look as slow and as
    /// dear as the harm the search stops for.
    fn fit(dims: &[Dim], baseline: &[usize], trials: &[Trial], loss_penalty: f64) -> Model {
        // One parameter per (knob, level) that a trial used, other than the baseline's.
        let mut params: Vec<(usize, usize)> = Vec::new();
        for t in trials {
            for (d, &l) in t.config.iter().enumerate() {
                if l != baseline[d] && !params.contains(&(d, l)) {
                    params.push((d, l));
                }
            }
        }
        let n = params.len();
        let mut fitted: Vec<Vec<Option<(f64, f64)>>> =
            dims.iter().map(|d| vec![None; d.levels.len()]).collect();
        for (d, &l) in baseline.iter().enumerate() {
            fitted[d][l] = Some((0.0, 0.0));
        }
        if n > 0 {
            // Normal equations with a small ridge (a level seen once with others is still
            // solvable), for both responses at once.
            let mut a = vec![vec![0.0; n]; n];
            let mut y = vec![[0.0; 2]; n];
            for t in trials {
                let row: Vec<usize> = t
                    .config
                    .iter()
                    .enumerate()
                    .filter(|&(d, &l)| l != baseline[d])
                    .map(|(d, &l)| params.iter().position(|p| *p == (d, l)).unwrap())
                    .collect();
                let mut r = [t.latency_ratio().ln(), t.cost_ratio().ln()];
                // Cost too, not latency alone: a latency factor of abort_factor can still be
                // within a loose goal (or a max-rate goal, which has no latency bound), and
                // a cheap lossy level would then be picked again and again.
                if t.rejected.is_some() {
                    let p = loss_penalty.clamp(2.0, 100.0).ln();
                    r[0] = r[0].max(p);
                    r[1] = r[1].max(p);
                }
                if !(r[0].is_finite() && r[1].is_finite()) {
                    continue;
                }
                for &i in &row {
                    for &j in &row {
                        a[i][j] += 1.0;
                    }
                    y[i][0] += r[0];
                    y[i][1] += r[1];
                }
            }
            for (i, row) in a.iter_mut().enumerate() {
                row[i] += 1e-6;
            }
            let x = solve(a, y);
            for (k, &(d, l)) in params.iter().enumerate() {
                fitted[d][l] = Some((x[k][0], x[k][1]));
            }
        }
        Model { fitted }
    }

    fn effect(&self, d: usize, l: usize) -> (f64, f64) {
        let levels = &self.fitted[d];
        if let Some(e) = levels[l] {
            return e;
        }
        let below = (0..l).rev().find_map(|i| levels[i].map(|e| (i, e)));
        let above = (l + 1..levels.len()).find_map(|i| levels[i].map(|e| (i, e)));
        match (below, above) {
            (Some((i, a)), Some((j, b))) => {
                let t = (l - i) as f64 / (j - i) as f64;
                (a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1))
            }
            (Some((_, e)), None) | (None, Some((_, e))) => e,
            (None, None) => (0.0, 0.0),
        }
    }

    /// Predicted (latency, cost) as factors of the baseline's.
    fn predict(&self, config: &[usize]) -> (f64, f64) {
        let (l, c) = config
            .iter()
            .enumerate()
            .map(|(d, &l)| self.effect(d, l))
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        (l.exp(), c.exp())
    }

    fn effects(&self, dims: &[Dim]) -> Vec<Vec<(f64, f64)>> {
        dims.iter()
            .enumerate()
            .map(|(d, dim)| {
                (0..dim.levels.len())
                    .map(|l| {
                        let (a, b) = self.effect(d, l);
                        (a.exp(), b.exp())
                    })
                    .collect()
            })
            .collect()
    }
}

/// Gaussian elimination with partial pivoting for two right-hand sides.
fn solve(mut a: Vec<Vec<f64>>, mut y: Vec<[f64; 2]>) -> Vec<[f64; 2]> {
    let n = a.len();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, pivot);
        y.swap(col, pivot);
        let p = a[col][col];
        if p.abs() < 1e-12 {
            continue;
        }
        for row in col + 1..n {
            let f = a[row][col] / p;
            if f == 0.0 {
                continue;
            }
            let (top, bottom) = a.split_at_mut(row);
            for (x, p) in bottom[0][col..].iter_mut().zip(&top[col][col..]) {
                *x -= f * p;
            }
            y[row][0] -= f * y[col][0];
            y[row][1] -= f * y[col][1];
        }
    }
    let mut x = vec![[0.0; 2]; n];
    for row in (0..n).rev() {
        let mut s = y[row];
        for k in row + 1..n {
            s[0] -= a[row][k] * x[k][0];
            s[1] -= a[row][k] * x[k][1];
        }
        let p = a[row][row];
        x[row] = if p.abs() < 1e-12 {
            [0.0, 0.0]
        } else {
            [s[0] / p, s[1] / p]
        };
    }
    x
}
