//! The search on synthetic response surfaces with a known optimum: noise on every run, a host
//! that drifts during the search, a knob that interacts with another, and a knob that hurts.
//! Deterministic: seeded noise, a manual clock.

use netsteer_experiment::clock::ManualClock;
use netsteer_experiment::experiment::BoxError;
use netsteer_experiment::search::{Config, Dim, Obs, Options, Outcome, Target, search};

/// xorshift64*, seeded per surface.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-12), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Latency and cost as products of one factor per knob level, times an interaction (two knobs
/// high together cost latency), times noise and a slow wander of the whole host (±`drift`,
/// over about fifty runs: a neighbour's load coming and going).
struct Surface {
    levels: Vec<usize>,
    lat: Vec<Vec<f64>>,
    cost: Vec<Vec<f64>>,
    interaction: f64,
    noise: f64,
    drift: f64,
    /// (knob, level, lost) at which every run loses that many packets.
    hurts: Option<(usize, usize, u64)>,
    /// (knob, level, factor) at which every run's latency is that many times its truth.
    slow: Option<(usize, usize, f64)>,
    /// Run numbers (from 1, every configuration's) whose latency is `spike` times its truth: a
    /// busy host's moments, which fall on whatever runs then.
    spikes: Vec<u64>,
    spike: f64,
    /// The chance that a run, of any configuration, loses one packet (a busy host), drawn
    /// from a generator of its own so that the latency noise is the quiet host's.
    flaky: f64,
    loss_rng: Rng,
    rng: Rng,
    current: Option<Config>,
    runs: u64,
    enters: u32,
    leaves: u32,
}

impl Surface {
    fn new(seed: u64) -> Surface {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let levels = vec![5, 4, 2, 4, 3];
        let mut lat = Vec::new();
        let mut cost = Vec::new();
        for &n in &levels {
            // A trade-off: each step up saves CPU and costs latency (coalescing, deferral), by
            // steps that shrink (or, for some knobs, the other way round: busy polling buys
            // latency with CPU).
            let way = if rng.unit() < 0.3 { -1.0 } else { 1.0 };
            let (mut l, mut c) = (0.0, 0.0);
            let (mut lv, mut cv) = (Vec::new(), Vec::new());
            for k in 0..n {
                if k > 0 {
                    let shrink = 1.0 / k as f64;
                    l += way * (0.05 + 0.25 * rng.unit()) * shrink;
                    c -= way * (0.04 + 0.2 * rng.unit()) * shrink;
                }
                lv.push(l);
                cv.push(c);
            }
            lat.push(lv);
            cost.push(cv);
        }
        Surface {
            levels,
            lat,
            cost,
            interaction: 0.08,
            noise: 0.03,
            drift: 0.03,
            hurts: None,
            slow: None,
            spikes: Vec::new(),
            spike: 1.0,
            flaky: 0.0,
            loss_rng: Rng(seed.wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1),
            rng,
            current: None,
            runs: 0,
            enters: 0,
            leaves: 0,
        }
    }

    fn dims(&self) -> Vec<Dim> {
        self.levels
            .iter()
            .enumerate()
            .map(|(d, &n)| Dim {
                name: format!("knob{d}"),
                levels: (0..n).map(|l| l.to_string()).collect(),
            })
            .collect()
    }

    /// Noiseless (latency µs, cost µs of CPU per request).
    fn truth(&self, c: &[usize]) -> (f64, f64) {
        let mut l: f64 = c.iter().enumerate().map(|(d, &k)| self.lat[d][k]).sum();
        let co: f64 = c.iter().enumerate().map(|(d, &k)| self.cost[d][k]).sum();
        if c[0] >= 3 && c[3] >= 2 {
            l += self.interaction;
        }
        (100.0 * l.exp(), 20.0 * co.exp())
    }

    fn all(&self) -> Vec<Config> {
        let mut out = vec![vec![]];
        for &n in &self.levels {
            out = out
                .into_iter()
                .flat_map(|c: Config| {
                    (0..n).map(move |k| {
                        let mut c = c.clone();
                        c.push(k);
                        c
                    })
                })
                .collect();
        }
        out
    }

    /// A goal most configurations miss, and the cheapest configuration that meets it.
    fn goal_and_optimum(&self) -> (f64, f64) {
        let mut lats: Vec<f64> = self.all().iter().map(|c| self.truth(c).0).collect();
        lats.sort_by(f64::total_cmp);
        let goal = lats[lats.len() * 3 / 10];
        let opt = self
            .all()
            .iter()
            .map(|c| self.truth(c))
            .filter(|(l, _)| *l <= goal)
            .map(|(_, c)| c)
            .fold(f64::INFINITY, f64::min);
        (goal, opt)
    }
}

impl Target for Surface {
    fn enter(&mut self, config: &[usize]) -> Result<(), BoxError> {
        assert!(self.current.is_none(), "entered {config:?} inside another");
        self.current = Some(config.to_vec());
        self.enters += 1;
        Ok(())
    }
    fn measure(&mut self) -> Result<Obs, BoxError> {
        let c = self
            .current
            .clone()
            .expect("measured outside a configuration");
        let (mut l, co) = self.truth(&c);
        self.runs += 1;
        if let Some((d, k, f)) = self.slow
            && c[d] == k
        {
            l *= f;
        }
        if self.spikes.contains(&self.runs) {
            l *= self.spike;
        }
        let drift = 1.0 + self.drift * (self.runs as f64 / 8.0).sin();
        let lost = match self.hurts {
            Some((d, k, n)) if c[d] == k => n,
            _ => u64::from(self.loss_rng.unit() < self.flaky),
        };
        Ok(Obs {
            latency: l * drift * (1.0 + self.noise * self.rng.normal()),
            cost: co * drift * (1.0 + self.noise * self.rng.normal()),
            lost,
        })
    }
    fn leave(&mut self, config: &[usize]) -> Result<(), BoxError> {
        assert_eq!(self.current.as_deref(), Some(config));
        self.current = None;
        self.leaves += 1;
        Ok(())
    }
}

fn run(s: &mut Surface, goal: f64, seed: u64) -> Outcome {
    let dims = s.dims();
    let baseline = vec![0; dims.len()];
    let clock = ManualClock::new(0);
    search(
        s,
        &dims,
        &baseline,
        &Options {
            goal,
            budget: 20,
            seed,
            ..Options::default()
        },
        &clock,
    )
    .unwrap()
}

/// The cheapest configuration a search can be held to: clear of the goal by 2 % (true latency
/// at most 98 % of it). One closer than that meets the goal in a confirmation's median only by
/// luck (the runs scatter by 3 %, a median of five by about 1.7 %), so no search can report it
/// reliably, and one that reported it would break the promise that what it reports was
/// confirmed within the goal. The goal here is one configuration's exact latency (the 30th
/// percentile), so the plain optimum often sits on it.
fn clear_optimum(s: &Surface, goal: f64) -> f64 {
    s.all()
        .iter()
        .map(|c| s.truth(c))
        .filter(|(l, _)| *l <= goal * 0.98)
        .map(|(_, c)| c)
        .fold(f64::INFINITY, f64::min)
}

/// Near the cheapest configuration in at most 20 trials: within 5 % of its cost (and within the
/// goal, up to the noise) on 300 surfaces, where finding nothing counts as keeping the baseline
/// (the right answer where the baseline is the optimum). The target is 9 in 10; this
/// search reaches 273 in 300 against the clear optimum (252 against one on the goal itself):
/// the bar holds 9 in 10, so a change that makes it worse fails. Whatever is reported was
/// confirmed within the goal, on every surface.
#[test]
fn twenty_trials_come_near_the_optimum_on_most_surfaces() {
    let mut near = 0;
    let mut misses = Vec::new();
    for seed in 1..=300 {
        let mut s = Surface::new(seed);
        let (goal, _) = s.goal_and_optimum();
        let opt = clear_optimum(&s, goal);
        let out = run(&mut s, goal, seed);
        assert!(out.trials.len() <= 20);
        assert_eq!(s.enters, s.leaves);
        assert!(s.current.is_none());
        assert!(out.stopped.is_none(), "{:?}", out.stopped);
        if let Some(best) = &out.best {
            let confirmed = out
                .confirmations
                .iter()
                .find(|c| &c.config == best)
                .unwrap();
            assert!(confirmed.meets_goal);
            let (l, _) = s.truth(best);
            assert!(
                l <= goal * 1.06,
                "seed {seed}: reported {best:?} at {l:.1} for {goal:.1}"
            );
        }
        let kept = out.best.clone().unwrap_or_else(|| out.baseline.clone());
        let (l, c) = s.truth(&kept);
        if l <= goal * 1.06 && c <= opt * 1.05 {
            near += 1;
        } else {
            misses.push(format!(
                "seed {seed}: goal {goal:.1} optimum {opt:.2} kept {kept:?} at {l:.1}, {c:.2}"
            ));
        }
    }
    assert!(near >= 270, "{near} of 300; misses:\n{}", misses.join("\n"));
}

/// A knob level that loses packets ends the search at its first run, with every configuration
/// entered also left, and nothing reported.
#[test]
fn a_knob_that_loses_packets_ends_the_search_with_everything_left() {
    let mut s = Surface::new(3);
    s.hurts = Some((2, 1, 1000));
    let (goal, _) = s.goal_and_optimum();
    let out = run(&mut s, goal, 3);
    let why = out.stopped.expect("stopped");
    assert!(why.contains("lost 1000"), "{why}");
    assert!(out.best.is_none());
    assert!(out.confirmations.is_empty());
    assert_eq!(s.enters, s.leaves);
    assert!(s.current.is_none());
    // Screening takes each knob's far end first: knob0's, knob1's, then knob2's level 1, the
    // third trial.
    assert_eq!(out.trials.len(), 2);
}

/// On a busy host every configuration, the baseline too, loses a packet in a third of its
/// runs: the search runs its whole budget (it once ended at the first candidate that lost one,
/// never asking whether the baseline lost as much), and keeps what the same search on the
/// same host without the losses keeps, but for the rare trial whose three runs all lost one
/// beside a baseline whose three lost none.
#[test]
fn a_packet_lost_now_and_then_everywhere_is_no_reason_to_stop() {
    let mut same = 0;
    for seed in 1..=40 {
        let mut quiet = Surface::new(seed);
        let (goal, _) = quiet.goal_and_optimum();
        let calm = run(&mut quiet, goal, seed);
        let mut s = Surface::new(seed);
        s.flaky = 1.0 / 3.0;
        let out = run(&mut s, goal, seed);
        assert!(out.stopped.is_none(), "seed {seed}: {:?}", out.stopped);
        assert_eq!(out.trials.len(), 20, "seed {seed}");
        assert!(
            out.trials.iter().any(|t| t.lost > 0) && out.trials.iter().any(|t| t.base_lost > 0),
            "seed {seed}: the flaky host lost nothing"
        );
        assert_eq!(s.enters, s.leaves);
        if out.best == calm.best {
            same += 1;
        }
    }
    assert!(
        same >= 36,
        "{same} of 40 kept what the quiet host's search kept"
    );
}

/// A knob level that loses a few packets in every run (5, far under the bound that stops the
/// search) is rejected in each trial that uses it, beside a baseline that loses none: the
/// search goes on, no rejected configuration is confirmed or reported, and the model's
/// weighing down keeps the guided picks off that level once it has been seen.
#[test]
fn a_candidate_that_loses_more_than_the_baseline_is_rejected_not_the_search_ended() {
    let mut rejected_total = 0;
    for seed in 1..=20 {
        let mut s = Surface::new(seed);
        // The level of knob 1 the optimum uses, where that is not the baseline's, or its last.
        let (goal, _) = s.goal_and_optimum();
        let optimum = s
            .all()
            .into_iter()
            .filter(|c| s.truth(c).0 <= goal)
            .min_by(|a, b| s.truth(a).1.total_cmp(&s.truth(b).1))
            .unwrap();
        let level = if optimum[1] != 0 { optimum[1] } else { 3 };
        s.hurts = Some((1, level, 5));
        let out = run(&mut s, goal, seed);
        assert!(out.stopped.is_none(), "seed {seed}: {:?}", out.stopped);
        assert_eq!(s.enters, s.leaves);
        for t in &out.trials {
            assert_eq!(
                t.rejected.is_some(),
                t.config[1] == level,
                "seed {seed}: {t:?}"
            );
        }
        let with_level = out.trials.iter().filter(|t| t.config[1] == level).count();
        rejected_total += with_level;
        // Screening tries the level once at most; the guided phase may come back to it only
        // where the penalty did not outweigh what the other knobs promised.
        assert!(
            with_level <= 3,
            "seed {seed}: {with_level} trials at the lossy level"
        );
        assert!(
            out.confirmations.iter().all(|c| c.config[1] != level),
            "seed {seed}"
        );
        assert!(
            out.best.as_ref().is_none_or(|b| b[1] != level),
            "seed {seed}"
        );
    }
    assert!(
        rejected_total >= 20,
        "{rejected_total} rejected trials in 20 searches"
    );
}

/// With no latency bound to push a lossy level out of (a goal every configuration meets), the
/// penalty on a rejected trial's cost keeps the guided picks off the cheapest level of a knob
/// once it has been seen to lose: a latency penalty alone left it the cheapest pick.
#[test]
fn a_cheap_lossy_level_is_not_picked_again_under_a_loose_goal() {
    for seed in 1..=20 {
        let mut s = Surface::new(seed);
        // Knob 1's cheapest level.
        let cheapest = (0..s.levels[1])
            .min_by(|a, b| s.cost[1][*a].total_cmp(&s.cost[1][*b]))
            .unwrap();
        let level = if cheapest == 0 {
            s.levels[1] - 1
        } else {
            cheapest
        };
        s.hurts = Some((1, level, 5));
        let out = run(&mut s, 1e12, seed);
        assert!(out.stopped.is_none(), "seed {seed}: {:?}", out.stopped);
        let with_level = out.trials.iter().filter(|t| t.config[1] == level).count();
        assert!(
            with_level <= 2,
            "seed {seed}: {with_level} trials at the lossy level"
        );
        assert!(
            out.best.as_ref().is_none_or(|b| b[1] != level),
            "seed {seed}"
        );
    }
}

/// A candidate far beyond the goal and the baseline (the abort factor) ends the search at once.
#[test]
fn a_candidate_far_beyond_the_goal_and_the_baseline_ends_the_search() {
    let mut s = Surface::new(4);
    let (goal, _) = s.goal_and_optimum();
    // Knob 2's second level makes every run 50 times slower: screening tries it.
    s.slow = Some((2, 1, 50.0));
    let out = run(&mut s, goal, 4);
    let why = out.stopped.expect("stopped");
    assert!(why.contains("abort factor"), "{why}");
    assert!(why.contains("baseline's runs beside it"), "{why}");
    assert!(out.best.is_none());
    assert!(
        out.trials.iter().all(|t| t.config[2] != 1),
        "{:?}",
        out.trials
    );
    assert_eq!(s.enters, s.leaves);
}

/// A goal the baseline itself misses by far is not harm: the search runs its budget and finds
/// nothing, where a bound on the goal alone ended it at the first trial.
#[test]
fn a_goal_far_below_the_baseline_does_not_end_the_search() {
    let mut s = Surface::new(4);
    let (goal, _) = s.goal_and_optimum();
    let out = run(&mut s, goal / 10.0, 4);
    assert!(out.stopped.is_none(), "{:?}", out.stopped);
    assert_eq!(out.trials.len(), 20);
    assert!(out.best.is_none());
    assert_eq!(s.enters, s.leaves);
}

/// A busy host's spikes hit whatever runs at the time. A candidate's run 30 times its truth,
/// past 3 × the goal, ends nothing when a baseline run beside it spiked too (run 3, after
/// candidate run 2; run 9, before candidate run 10). The same spike beside quiet baseline runs
/// ends the search. And a spike excuses its neighbours only: a baseline spike early on does
/// not let a candidate 50 times slower through later (a bound on the search's slowest baseline
/// run so far did).
#[test]
fn a_busy_hosts_spikes_do_not_end_the_search_when_the_baseline_beside_them_spikes_too() {
    let spiky = |spikes: Vec<u64>, slow: Option<(usize, usize, f64)>| {
        let mut s = Surface::new(6);
        let (goal, _) = s.goal_and_optimum();
        s.noise = 0.0;
        s.drift = 0.0;
        s.spike = 30.0;
        s.spikes = spikes;
        s.slow = slow;
        let out = run(&mut s, goal, 6);
        assert_eq!(s.enters, s.leaves);
        out
    };
    // Runs alternate baseline (odd), candidate (even).
    let out = spiky(vec![2, 3, 9, 10], None);
    assert!(out.stopped.is_none(), "{:?}", out.stopped);
    assert_eq!(out.trials.len(), 20);
    let out = spiky(vec![4], None);
    let why = out
        .stopped
        .expect("a spike beside quiet baseline runs ends the search");
    assert!(why.starts_with("trial 1:"), "{why}");
    assert!(why.contains("baseline's runs beside it"), "{why}");
    let out = spiky(vec![1], Some((2, 1, 50.0)));
    let why = out
        .stopped
        .expect("a slow level ends the search despite an early spike");
    assert!(why.contains("abort factor"), "{why}");
    assert!(
        out.trials.iter().all(|t| t.config[2] != 1),
        "{:?}",
        out.trials
    );
}

/// A goal no configuration meets: nothing reported, the report still has every trial.
#[test]
fn an_impossible_goal_reports_no_configuration() {
    let mut s = Surface::new(5);
    let (goal, _) = s.goal_and_optimum();
    let lowest = s
        .all()
        .iter()
        .map(|c| s.truth(c).0)
        .fold(f64::INFINITY, f64::min);
    let out = run(&mut s, lowest * 0.8, 5);
    assert!(out.best.is_none(), "{:?}", out.best);
    assert!(out.stopped.is_none());
    assert_eq!(out.trials.len(), 20);
    let _ = goal;
}
