//! Reading the host into metric families, once per scrape.

use crate::family::Family;
use netsteer_host::ethtool::NicSettings;
use netsteer_host::irqname::IrqRole;
use netsteer_host::nic::Nic;
use netsteer_host::parse::IrqLabel;
use netsteer_host::sample::{CounterSample, QueueCounters, read_net_counters};
use netsteer_host::{Field, HostFs, HostView, read_host_reusing};
use netsteer_nic::NicBackend;
use netsteer_steering::doctor::{Goal, Severity, diagnose};
use netsteer_steering::model::load::{Load, Reading};
use netsteer_steering::tune::journal::{self, Record};
use netsteer_steering::tune::verify::verify;
use netsteer_steering::tune::{HostBackend, Plan, StateDir};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

mod counters;
mod families;
mod pools;
mod queues;
use families::Families;

/// Opens the NIC backend for one scrape (ethtool/netdev netlink on a live host, the tree's
/// recorded settings under `--root`); `Err(reason)` when it cannot be opened.
pub type NicSource = Box<dyn Fn() -> Result<Box<dyn NicBackend>, String> + Send + Sync + 'static>;

pub struct AgentOptions {
    /// Interfaces to export; empty: every physical NIC, or every non-loopback device on a host
    /// that has none (a VM's virtio NIC is physical to it; a namespace has only veths).
    pub devices: Vec<String>,
    /// Where `tune apply` keeps journals and the applied plan (None: no tune metrics).
    pub state_dir: Option<PathBuf>,
    /// The doctor's goal (its latency rules only run for `latency`).
    pub goal: Goal,
    /// The version in `netsteer_build_info`.
    pub version: &'static str,
    /// Where the doctor's rates come from.
    pub rates: Rates,
    /// `--trace`: the stage histograms' sampler (None: no trace families).
    pub trace: Option<crate::trace::TraceFeed>,
}

/// The doctor's load at a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rates {
    /// Rates over the sampler's last complete interval (a live host): the agent reads the
    /// counters on its own clock, every `every` ([`Agent::start_sampler`], or
    /// [`Agent::sample`] from a test), so every scraper sees the same rates however many
    /// there are and however often they come. Until the sampler's first interval has passed,
    /// averages since boot.
    Sampled { every: Duration },
    /// Averages since boot (a `--root` tree, whose counters never move).
    SinceBoot,
}

/// The sampler's interval unless `--rate-interval` says otherwise: Debian's Prometheus scrapes
/// every 15 s, so each scrape sees about one interval's findings.
pub const RATE_INTERVAL: Duration = Duration::from_secs(15);

/// Standing advice series exported at most (a watcher's `backlog` and `budget`, and `rps`,
/// `rss` and `rps-away` once per device; a larger file is not a watcher's).
const MAX_WATCH_ADVICE: usize = 64;

/// At most this many `netsteer_doctor_not_judged` series (rule × device): the count of rules
/// not judged is exported whole in `netsteer_doctor_rules`, and `doctor --json` lists them all.
const MAX_NOT_JUDGED: usize = 64;

/// What one scrape leaves for the next.
#[derive(Default)]
struct Kept {
    /// Per-CPU topology, reused while no CPU comes or goes.
    topology: Option<netsteer_host::topology::Topology>,
}

/// What the sampler holds: its last reading, and the rates between its last two, with the
/// wall time the second was taken.
#[derive(Default)]
struct Sampled {
    last: Option<Reading>,
    rates: Option<(Load, SystemTime)>,
    /// The counters at both ends of the last interval and its length in seconds (for the
    /// queues' balance over it).
    interval: Option<(CounterSample, CounterSample, f64)>,
    /// The queues' packet counters (netdev qstats) at both ends of that interval, and at the
    /// last reading: None where the NIC backend could not be opened.
    queues: Option<(QueueCounters, QueueCounters)>,
    last_queues: Option<QueueCounters>,
    /// The devices asked once whether they keep per-queue counters, and those that do (only
    /// they are asked again: a host of a thousand veths costs one question each, once).
    probed: BTreeSet<String>,
    counting: Vec<String>,
}

/// An evaluation of the host that scrapes serve: every family but the counters', the
/// collectors' statuses that go with them, and the view the counters are labelled by.
struct Held {
    out: Families,
    success: Vec<(&'static str, Option<String>)>,
    view: HostView,
}

pub struct Agent {
    fs: HostFs,
    nic: NicSource,
    opts: AgentOptions,
    /// Also serializes scrapes: two Prometheus servers scraping at once read the host once
    /// each, one after the other.
    previous: Mutex<Kept>,
    /// Apart from `previous`, so a sample never waits for a scrape's whole read.
    sampled: Mutex<Sampled>,
    /// The sampler's last evaluation ([`Agent::tick`]).
    held: Mutex<Option<Arc<Held>>>,
}

/// Labels are `&'static str` keys with owned values.
type Labels = Vec<(&'static str, String)>;

fn cpu_label(cpu: u32) -> (&'static str, String) {
    ("cpu", cpu.to_string())
}

/// USER_HZ: /proc/stat counts in 1/100 s on every architecture (include/asm-generic/param.h).
const TICKS_PER_SECOND: f64 = 100.0;

/// The highest number of series a scrape can produce for a host of this shape (the bound the
/// docs/agent.md states for the 128-CPU fixture): `cpus` CPUs, and per exported device `queues`
/// queues each way with one IRQ each, and at most `findings` doctor findings.
pub fn series_bound(cpus: usize, devices: usize, queues: usize, findings: usize) -> usize {
    // Per CPU: 3 CPU modes, 2 softirqs, 6 softnet columns.
    let per_cpu = 11 * cpus;
    // Per queue IRQ: interrupts and effective CPU, each at most once per CPU (in practice the
    // one or two CPUs the IRQ was ever delivered to).
    let per_irq = 2 * cpus;
    // Per rx queue: RPS CPUs (≤ cpus), flow count, RSS entries; per tx queue: XPS CPUs.
    // Per device also: the queues' balance, CV and spread, of five kinds over two windows.
    // Per queue also: one page pool's 13 series (2 in flight, 6 allocation paths, 5 recycling
    // results); per device the header split and its threshold.
    let per_device = queues * per_irq + queues * (cpus + 2) + queues * cpus + 40 + 20;
    let per_device = per_device + queues * 13 + 2;
    let trace = crate::trace::series_bound(devices, queues);
    // Host-wide: three interrupt rates and the ceiling.
    per_cpu + devices * per_device + findings + 24 + trace + MAX_WATCH_ADVICE + MAX_NOT_JUDGED + 2
}

impl Agent {
    /// The agent of the host under `fs`: its NIC backend opened at each scrape (a netlink
    /// socket is cheap; a tree's file is read anew), rates between scrapes on the live host
    /// and since boot on a tree, and the state directory defaulting to /var/lib/netsteer
    /// inside the root. A device named in `devices` that is not there is an error naming it.
    pub fn for_host(
        fs: HostFs,
        devices: Vec<String>,
        state_dir: Option<PathBuf>,
        goal: Goal,
        version: &'static str,
    ) -> Result<Agent, String> {
        if !devices.is_empty() {
            // An unlisted directory is not "no such interface": say why it could not be told.
            let have = fs
                .read_dir("/sys/class/net")
                .map_err(|e| format!("--dev: the interfaces could not be listed: {e}"))?;
            if let Some(d) = devices.iter().find(|d| !have.contains(d)) {
                return Err(format!(
                    "--dev {d}: no such interface under /sys/class/net (there: {})",
                    netsteer_host::safe::line(&have.join(", "))
                ));
            }
        }
        let state_dir = match state_dir {
            Some(d) => d,
            None => fs
                .real_path_for_write("/var/lib/netsteer")
                .map_err(|e| format!("the state directory: {e}"))?,
        };
        let rates = if fs.is_live() {
            Rates::Sampled {
                every: RATE_INTERVAL,
            }
        } else {
            Rates::SinceBoot
        };
        let nic_fs = fs.clone();
        let nic: NicSource = Box::new(move || netsteer_nic::backend_for(&nic_fs));
        let opts = AgentOptions {
            devices,
            state_dir: Some(state_dir),
            goal,
            version,
            rates,
            trace: None,
        };
        Ok(Agent::new(fs, nic, opts))
    }

    pub fn new(fs: HostFs, nic: NicSource, opts: AgentOptions) -> Agent {
        Agent {
            fs,
            nic,
            opts,
            previous: Mutex::new(Kept::default()),
            sampled: Mutex::new(Sampled::default()),
            held: Mutex::new(None),
        }
    }

    /// Samples the rates every `every` instead of [`RATE_INTERVAL`] (a live host only: a
    /// tree's rates stay averages since boot).
    pub fn with_rate_interval(mut self, every: Duration) -> Agent {
        if let Rates::Sampled { .. } = self.opts.rates {
            self.opts.rates = Rates::Sampled { every };
        }
        self
    }

    /// Reads the counters for the doctor's rates: the rates a scrape judges by are those
    /// between the last two samples. `now` times the interval and `wall` stamps it.
    pub fn sample(&self, now: Instant, wall: SystemTime) {
        let reading = Reading::take(&self.fs, now);
        let mut s = self
            .sampled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let queues = self.queue_counters(&mut s);
        match reading {
            Ok(r) => {
                if let Some(before) = s.last.as_ref().filter(|b| now > b.at) {
                    let rates = r.since(before);
                    let dt = (now - before.at).as_secs_f64();
                    let interval = (before.counters.clone(), r.counters.clone(), dt);
                    s.rates = Some((rates, wall));
                    s.interval = Some(interval);
                    s.queues = s.last_queues.take().zip(queues.clone());
                }
                s.last = Some(r);
                s.last_queues = queues;
            }
            // Rates over a gap are not this interval's: none until two reads succeed again.
            Err(_) => *s = Sampled::default(),
        }
    }

    /// Starts the sampler's thread: a [`Agent::tick`] now and then every interval (the
    /// rates' interval, [`RATE_INTERVAL`] for a tree), on a clock of its own (a late tick does
    /// not shift the next), until the agent is dropped. Scrapes then read only the counters
    /// and serve the rest from the last tick: a 128-CPU host's settings take most of a
    /// scrape's time to read (BENCHMARKS.md).
    pub fn start_sampler(self: &Arc<Self>) -> std::io::Result<()> {
        let every = match self.opts.rates {
            Rates::Sampled { every } => every,
            Rates::SinceBoot => RATE_INTERVAL,
        };
        let agent = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("agent-sampler".into())
            .spawn(move || {
                let start = Instant::now();
                while let Some(agent) = agent.upgrade() {
                    agent.tick(Instant::now(), SystemTime::now());
                    drop(agent);
                    let elapsed = start.elapsed();
                    let next = (elapsed.as_nanos() / every.as_nanos().max(1)) as u32 + 1;
                    std::thread::sleep((every * next).saturating_sub(elapsed));
                }
            })?;
        Ok(())
    }

    /// The doctor's load now: the sampler's rates, else (no sampler, or before its first
    /// interval has passed) averages since boot of `reading`; with the sampled rates' wall
    /// time.
    fn load(&self, reading: &Reading) -> (Option<Load>, Option<SystemTime>) {
        if let Rates::Sampled { .. } = self.opts.rates {
            let s = self
                .sampled
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some((load, at)) = &s.rates {
                return (Some(load.clone()), Some(*at));
            }
        }
        (reading.since_boot(&self.fs).ok().map(|(l, _)| l), None)
    }

    /// Exports the stage histograms `feed` samples (`--trace`).
    pub fn with_trace(mut self, feed: crate::trace::TraceFeed) -> Agent {
        self.opts.trace = Some(feed);
        self
    }

    /// Reads the host and returns the scrape's families, the doctor judging by the sampler's
    /// rates ([`Rates`]). `now` times the counters' reading and `wall` stamps the evaluation
    /// (both injected, so tests choose them). The counters are read at every scrape; the rest
    /// (the settings, the doctor's findings, tune's and watch's state) is the sampler's last
    /// evaluation when it runs ([`Agent::start_sampler`]), else evaluated now.
    pub fn scrape(&self, now: Instant, wall: SystemTime) -> Vec<Family> {
        let fs = &self.fs;
        // Without /proc/stat there is no counter sample (the doctor's), but every collector's
        // own files are still read below.
        let reading = Reading::take(fs, now);
        let held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let held = match held {
            Some(h) => h,
            None => Arc::new(self.evaluate(reading.as_ref().ok(), wall)),
        };
        let mut out = held.out.clone();
        let devices = self.devices(&held.view);
        // Each collector with whether it worked and, when it did not, why: every collector is
        // reported every scrape, so a blind one is a 0 with its reason, never a missing series.
        let mut success: Vec<(&'static str, Option<String>)> = Vec::new();
        let mut fail =
            |collector: &'static str, why: Option<String>| success.push((collector, why));
        let net = match &reading {
            Ok(r) => r.net.clone(),
            Err(_) => read_net_counters(fs),
        };
        // Each collector needs only its own file: without /proc/stat the CPU times are
        // unknown, but /proc/interrupts, /proc/softirqs and softnet_stat are read all the same.
        let own;
        let c = match &reading {
            Ok(r) => {
                fail("stat", None);
                &r.counters
            }
            Err(e) => {
                fail("stat", Some(e.to_string()));
                own = counters::read_without_stat(fs, &held.view.topology.online);
                &own
            }
        };
        self.cpu(&mut out, c);
        let why = |file: &str| {
            c.problems
                .iter()
                .find(|p| p.contains(file))
                .cloned()
                .unwrap_or_else(|| format!("{file}: no rows"))
        };
        let failed = |file: &str, none: bool| {
            (none || c.problems.iter().any(|p| p.contains(file))).then(|| why(file))
        };
        fail("softirqs", failed("/proc/softirqs", c.softirqs.is_none()));
        fail(
            "softnet",
            failed("/proc/net/softnet_stat", c.softnet.is_empty()),
        );
        fail(
            "interrupts",
            failed("/proc/interrupts", c.interrupts.is_none()),
        );
        self.interrupts(&mut out, c, &devices);
        self.balance(&mut out, c, &held.view, &devices);
        if let Some(snmp) = &net.snmp {
            let sum = |counter: &str| {
                ["Udp", "Udp6"]
                    .iter()
                    .filter_map(|p| snmp.get(p, counter))
                    .map(|v| v.max(0) as f64)
                    .reduce(|a, b| a + b)
            };
            if let Some(v) = sum("RcvbufErrors") {
                out.udp_rcvbuf.push(vec![], v);
            }
            if let Some(v) = sum("InErrors") {
                out.udp_in_errors.push(vec![], v);
            }
        }
        fail(
            "snmp",
            net.snmp.is_none().then(|| {
                net.problems
                    .iter()
                    .find(|p| p.contains("/proc/net/snmp"))
                    .cloned()
                    .unwrap_or_else(|| "/proc/net/snmp: could not be read".into())
            }),
        );
        success.extend(held.success.iter().cloned());

        let mut trace_families = Vec::new();
        if let Some(feed) = &self.opts.trace {
            let names: Vec<&str> = devices.iter().map(|n| n.name.as_str()).collect();
            let (families, status) = feed.families(&names);
            trace_families = families;
            success.push(("trace", status.err()));
        }
        for (collector, why) in success {
            out.collector_success.push(
                vec![("collector", collector.to_string())],
                f64::from(u8::from(why.is_none())),
            );
            if let Some(why) = why {
                out.collector_error.push(
                    vec![("collector", collector.to_string()), ("reason", why)],
                    1.0,
                );
            }
        }
        let mut all = out.into_vec();
        all.extend(trace_families);
        all
    }

    /// The sampler's tick: the rates' sample ([`Agent::sample`]), then an evaluation of the
    /// host that scrapes serve until the next tick.
    pub fn tick(&self, now: Instant, wall: SystemTime) {
        if let Rates::Sampled { .. } = self.opts.rates {
            self.sample(now, wall);
        }
        let reading = Reading::take(&self.fs, now).ok();
        let held = Arc::new(self.evaluate(reading.as_ref(), wall));
        *self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(held);
    }

    /// Reads the host's settings and evaluates it (the doctor by [`Agent::load`], tune drift,
    /// watch's advice): everything of a scrape but the counters. `reading` is for averages
    /// since boot while there are no sampled rates; `wall` stamps the evaluation.
    fn evaluate(&self, reading: Option<&Reading>, wall: SystemTime) -> Held {
        let mut previous = self
            .previous
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut out = Families::default();
        let mut success: Vec<(&'static str, Option<String>)> = Vec::new();
        let mut fail =
            |collector: &'static str, why: Option<String>| success.push((collector, why));
        let fs = &self.fs;
        let nic = (self.nic)();
        let settings = |name: &str| match &nic {
            Ok(b) => b.settings(name),
            Err(reason) => NicSettings::unavailable(reason),
        };
        let view = read_host_reusing(fs, Some(&settings), previous.topology.as_ref());
        previous.topology = Some(view.topology.clone());
        let devices = self.devices(&view);
        let (load, at) = match reading {
            Some(r) => self.load(r),
            None => (None, None),
        };
        if let (Some(load), Some(at)) = (&load, at) {
            out.rates_end.push(vec![], unix_seconds(at));
            out.rates_seconds.push(vec![], load.seconds);
        }
        self.steering(&mut out, &view, &devices);
        fail("queues", queue_files_unknown(&devices));
        // A device asked for by name that the host does not have is a failed collection, not
        // an empty success: a typo in --dev must show on the dashboard.
        let missing = self
            .opts
            .devices
            .iter()
            .find(|d| !view.nics.iter().any(|n| &n.name == *d));
        let nic_why = match (&nic, missing) {
            (Err(reason), _) => Some(reason.clone()),
            (Ok(_), Some(d)) => Some(format!("--dev {d}: not under /sys/class/net")),
            (Ok(_), None) => None,
        };
        let nic_ok = nic_why.is_none();
        fail("nic", nic_why);
        if nic_ok {
            self.nic_settings(&mut out, &devices);
        }

        let report = diagnose(&view, load.as_ref(), self.opts.goal, None);
        // Zero findings from a doctor that could not see is not health: it fails as a collector.
        let mut blind = report.not_judged.clone();
        if load.is_none() {
            blind.push("no counters: every rule that needs rates was skipped".into());
        }
        fail("doctor", (!blind.is_empty()).then(|| blind.join("; ")));
        for f in &report.findings {
            let severity = match f.severity {
                Severity::Critical => "critical",
                Severity::Warning => "warning",
                Severity::Info => "info",
            };
            let devs: Vec<String> = if f.subjects.devices.is_empty() {
                vec![String::new()]
            } else {
                f.subjects.devices.clone()
            };
            for d in devs {
                out.finding.push(
                    vec![
                        ("rule", f.id.clone()),
                        ("severity", severity.into()),
                        ("device", d),
                    ],
                    1.0,
                );
            }
        }
        for (severity, n) in [
            ("critical", report.counts.critical),
            ("warning", report.counts.warning),
            ("info", report.counts.info),
        ] {
            out.findings
                .push(vec![("severity", severity.into())], n as f64);
        }
        for (state, n) in [
            ("judged", report.rules.judged),
            ("not_judged", report.rules.not_judged),
        ] {
            out.rules.push(vec![("state", state.into())], n as f64);
        }
        // One series a rule and device, however many inputs it lacked there: the host and the
        // exported devices only, and at most MAX_NOT_JUDGED of them.
        let unjudged: std::collections::BTreeSet<(&str, &str)> = report
            .unjudged
            .iter()
            .filter(|n| n.subject.is_empty() || devices.iter().any(|d| d.name == n.subject))
            .map(|n| (n.rule.as_str(), n.subject.as_str()))
            .collect();
        for (rule, device) in unjudged.into_iter().take(MAX_NOT_JUDGED) {
            out.not_judged
                .push(vec![("rule", rule.into()), ("device", device.into())], 1.0);
        }
        out.doctor_time.push(vec![], unix_seconds(wall));

        if let Some(dir) = &self.opts.state_dir {
            // The scrape's NIC backend, or one that says why there is none.
            let none;
            let backend_nic: &dyn NicBackend = match &nic {
                Ok(b) => b.as_ref(),
                Err(reason) => {
                    none = netsteer_nic::NoNic {
                        reason: reason.clone(),
                    };
                    &none
                }
            };
            let backend = HostBackend {
                fs: fs.clone(),
                nic: backend_nic,
            };
            let tune = self.tune(&mut out, dir, &backend, &view);
            fail("tune", tune);
            // `netsteer watch`'s standing advice, from the file it keeps in its directory
            // (at most MAX_WATCH_ADVICE series: the ids are a reflex and a device).
            match netsteer_steering::watch::read_advice(&StateDir::new(dir).watch()) {
                Ok(list) => {
                    for a in list.iter().take(MAX_WATCH_ADVICE) {
                        out.watch_advice.push(
                            vec![
                                ("id", a.id.clone()),
                                ("reflex", a.reflex.name().to_string()),
                            ],
                            a.since,
                        );
                    }
                    fail("watch", None);
                }
                Err(e) => fail("watch", Some(e.to_string())),
            }
        }

        let kernel = view.kernel.known().cloned().unwrap_or_default();
        out.build.push(
            vec![
                ("version", self.opts.version.to_string()),
                ("kernel", kernel),
            ],
            1.0,
        );
        drop(devices);
        Held { out, success, view }
    }

    fn devices<'v>(&self, view: &'v HostView) -> Vec<&'v Nic> {
        if !self.opts.devices.is_empty() {
            return view
                .nics
                .iter()
                .filter(|n| self.opts.devices.contains(&n.name))
                .collect();
        }
        let physical: Vec<&Nic> = view.nics.iter().filter(|n| n.kind == "physical").collect();
        if !physical.is_empty() {
            return physical;
        }
        view.nics.iter().filter(|n| n.kind != "loopback").collect()
    }

    fn cpu(&self, out: &mut Families, c: &CounterSample) {
        for (cpu, t) in &c.stat.cpus {
            for (mode, ticks) in [("irq", t.irq), ("softirq", t.softirq), ("idle", t.idle)] {
                out.cpu_seconds.push(
                    vec![cpu_label(*cpu), ("mode", mode.into())],
                    ticks as f64 / TICKS_PER_SECOND,
                );
            }
        }
        if let Some(s) = &c.softirqs {
            for vector in ["NET_RX", "NET_TX"] {
                for (cpu, n) in s.per_cpu(vector) {
                    out.softirqs
                        .push(vec![cpu_label(cpu), ("type", vector.into())], n as f64);
                }
            }
        }
        for (cpu, row) in &c.softnet {
            let l = || vec![cpu_label(*cpu)];
            out.softnet_processed.push(l(), f64::from(row.processed));
            out.softnet_dropped.push(l(), f64::from(row.dropped));
            out.softnet_squeezed.push(l(), f64::from(row.time_squeeze));
            if let Some(v) = row.received_rps {
                out.softnet_rps.push(l(), f64::from(v));
            }
            if let Some(v) = row.flow_limit_count {
                out.softnet_flow_limit.push(l(), f64::from(v));
            }
            if let Some(v) = row.backlog_len {
                out.softnet_backlog.push(l(), f64::from(v));
            }
        }
    }

    /// Per queue IRQ: interrupts by CPU (only CPUs that took some, which keeps a 64-queue,
    /// 128-CPU NIC at about one series per queue rather than 8,192), and where it goes now
    /// (for the queues the device has now).
    /// The effective CPUs are /proc/irq/N's, not the counters': they do not wait for a
    /// readable /proc/interrupts at this scrape.
    fn interrupts(&self, out: &mut Families, c: &CounterSample, devs: &[&Nic]) {
        for nic in devs {
            for irq in nic.queue_irqs() {
                let queue = queue_label(irq.role);
                let base = || -> Labels {
                    vec![
                        ("device", nic.name.clone()),
                        ("queue", queue.clone()),
                        ("irq", irq.irq.to_string()),
                    ]
                };
                if let Some((ints, row)) = c.interrupts.as_ref().and_then(|ints| {
                    let row = ints
                        .rows
                        .iter()
                        .find(|r| r.label == IrqLabel::Number(irq.irq))?;
                    Some((ints, row))
                }) {
                    for (cpu, n) in ints.per_cpu(row) {
                        if n > 0 {
                            let mut l = base();
                            l.push(cpu_label(cpu));
                            out.queue_interrupts.push(l, n as f64);
                        }
                    }
                }
                // Where a vector of a queue the device has now goes: one a driver keeps for
                // a queue turned off keeps an affinity but takes no interrupt, and counted by
                // CPU it would read as work there.
                if let Field::Known(set) = &irq.affinity.effective
                    && nic.serves_live_queue(irq.role)
                {
                    for cpu in set.iter() {
                        let mut l = base();
                        l.push(cpu_label(cpu));
                        out.irq_effective.push(l, 1.0);
                    }
                }
            }
        }
    }

    /// RPS, RFS and XPS as one series per allowed CPU (a mask string cannot be aggregated or
    /// joined with per-CPU series in PromQL).
    fn steering(&self, out: &mut Families, view: &HostView, devs: &[&Nic]) {
        if let Field::Known(n) = &view.sysctls.rps_sock_flow_entries {
            out.rfs_sock_flow.push(vec![], *n as f64);
        }
        for nic in devs {
            out.nic_info.push(
                vec![
                    ("device", nic.name.clone()),
                    ("kind", nic.kind.clone()),
                    ("driver", nic.driver.known().cloned().unwrap_or_default()),
                ],
                1.0,
            );
            // Queues the tree does not list are unknown, not none (`show` says unknown): a
            // 0 would read as a NIC without queues on a dashboard. An empty `queues/` is 0.
            if nic.queues_unknown.is_none() {
                for (direction, n) in [("rx", nic.rx_queues.len()), ("tx", nic.tx_queues.len())] {
                    out.queues.push(
                        vec![
                            ("device", nic.name.clone()),
                            ("direction", direction.into()),
                        ],
                        n as f64,
                    );
                }
            }
            for q in &nic.rx_queues {
                let ql = || -> Labels {
                    vec![
                        ("device", nic.name.clone()),
                        ("queue", format!("rx-{}", q.index)),
                    ]
                };
                if let Field::Known(set) = &q.rps_cpus {
                    for cpu in set.iter() {
                        let mut l = ql();
                        l.push(cpu_label(cpu));
                        out.rps_cpu.push(l, 1.0);
                    }
                }
                if let Field::Known(n) = q.rps_flow_cnt {
                    out.rps_flow.push(ql(), n as f64);
                }
            }
            for q in &nic.tx_queues {
                if let Field::Known(set) = &q.xps_cpus {
                    for cpu in set.iter() {
                        out.xps_cpu.push(
                            vec![
                                ("device", nic.name.clone()),
                                ("queue", format!("tx-{}", q.index)),
                                cpu_label(cpu),
                            ],
                            1.0,
                        );
                    }
                }
            }
        }
    }

    fn nic_settings(&self, out: &mut Families, devs: &[&Nic]) {
        for nic in devs {
            let Some(s) = &nic.settings else { continue };
            let dev = || ("device", nic.name.clone());
            if let Field::Known(c) = &s.channels {
                for (ty, now, max) in [
                    ("rx", c.rx, c.rx_max),
                    ("tx", c.tx, c.tx_max),
                    ("other", c.other, c.other_max),
                    ("combined", c.combined, c.combined_max),
                ] {
                    if let Some(v) = now {
                        out.channels
                            .push(vec![dev(), ("type", ty.into())], f64::from(v));
                    }
                    if let Some(v) = max {
                        out.channels_max
                            .push(vec![dev(), ("type", ty.into())], f64::from(v));
                    }
                }
            }
            if let Field::Known(r) = &s.rings {
                for (ring, now, max) in [("rx", r.rx, r.rx_max), ("tx", r.tx, r.tx_max)] {
                    if let Some(v) = now {
                        out.ring
                            .push(vec![dev(), ("ring", ring.into())], f64::from(v));
                    }
                    if let Some(v) = max {
                        out.ring_max
                            .push(vec![dev(), ("ring", ring.into())], f64::from(v));
                    }
                }
            }
            if let Field::Known(features) = &s.features {
                for name in EXPORTED_FEATURES {
                    if let Some(f) = features.get(*name) {
                        out.feature.push(
                            vec![dev(), ("feature", (*name).into())],
                            f64::from(u8::from(f.active)),
                        );
                    }
                }
            }
            if let Field::Known(c) = &s.coalesce {
                for (direction, usecs, frames, adaptive) in [
                    ("rx", "rx-usecs", "rx-max-frames", "adaptive-rx"),
                    ("tx", "tx-usecs", "tx-max-frames", "adaptive-tx"),
                ] {
                    let d = || vec![dev(), ("direction", direction.into())];
                    if let Some(v) = c.get(usecs) {
                        out.coalesce_seconds.push(d(), *v as f64 / 1e6);
                    }
                    if let Some(v) = c.get(frames) {
                        out.coalesce_frames.push(d(), *v as f64);
                    }
                    if let Some(v) = c.get(adaptive) {
                        out.coalesce_adaptive.push(d(), (*v != 0) as u8 as f64);
                    }
                }
            }
            if let Field::Known(rss) = &s.rss {
                let mut per_queue = std::collections::BTreeMap::<u32, usize>::new();
                for q in &rss.indirection {
                    *per_queue.entry(*q).or_default() += 1;
                }
                for (q, n) in per_queue {
                    out.rss_entries
                        .push(vec![dev(), ("queue", format!("rx-{q}"))], n as f64);
                }
            }
            if let Field::Known(r) = &s.rings {
                if let Some(split) = r.tcp_data_split {
                    use netsteer_host::ethtool::DataSplit;
                    match split {
                        DataSplit::Enabled => out.header_split.push(vec![dev()], 1.0),
                        DataSplit::Disabled => out.header_split.push(vec![dev()], 0.0),
                        DataSplit::Unknown => {}
                    }
                }
                if let Some(t) = r.hds_thresh {
                    out.hds_threshold.push(vec![dev()], f64::from(t));
                }
            }
            pools::page_pools(out, nic);
        }
    }

    /// The applied plan's drift, the last apply's time and the rolled-back journals. Why not
    /// when the state could not be read (a corrupt plan file, an unreadable journal), not
    /// when nothing was ever applied.
    fn tune(
        &self,
        out: &mut Families,
        dir: &std::path::Path,
        backend: &HostBackend,
        view: &HostView,
    ) -> Option<String> {
        let mut why: Option<String> = None;
        let mut broke = |e: String| {
            why.get_or_insert(e);
        };
        // A state file is read as one (regular, non-blocking, capped): a FIFO planted as
        // applied.json must not hang a scrape thread.
        let applied = journal::applied_plan_path(dir);
        match journal::read_state_file(&applied) {
            Ok(text) => match serde_json::from_slice::<Plan>(&text) {
                Ok(plan) => {
                    let r = verify(&plan, backend, view);
                    out.tune_applied.push(vec![], 1.0);
                    out.tune_items.push(vec![], r.checked as f64);
                    out.tune_drift.push(vec![], r.drift.len() as f64);
                    out.tune_info
                        .push(vec![("profile", plan.profile.to_string())], 1.0);
                }
                Err(e) => broke(format!("{}: {e}", applied.display())),
            },
            // No applied plan is an answer: tune apply writes the file, rollback removes it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.tune_applied.push(vec![], 0.0);
            }
            // read_state_file names the file in its errors.
            Err(e) => broke(e.to_string()),
        }
        // The journals, newest last; a journal that cannot be read is unknown, never "not
        // rolled back" (a 0) nor skipped.
        let journals: Vec<_> = match journal::list(dir) {
            Ok(all) => all.iter().map(|p| journal::read(p)).collect(),
            Err(e) => {
                let (e, at) = (e.to_string(), dir.display().to_string());
                broke(if e.contains(&at) {
                    e
                } else {
                    format!("{at}: {e}")
                });
                return why;
            }
        };
        // The newest journal that finished an apply (a later rollback keeps its time: it is
        // still when the fleet last changed this host); unknown if a newer one is unreadable.
        let last = journals.iter().rev().find_map(|records| {
            let Ok(records) = records else {
                return Some(None);
            };
            let applied = journal::finished_applying(records);
            match records.first() {
                Some(Record::Begin { started_unix, .. }) if applied => Some(Some(*started_unix)),
                _ => None,
            }
        });
        if let Some(Some(t)) = last {
            out.tune_last_apply.push(vec![], t as f64);
        }
        let mut rolled_back = Some(0usize);
        for records in &journals {
            match records {
                Ok(r) => {
                    if journal::rolled_back(r) {
                        rolled_back = rolled_back.map(|n| n + 1);
                    }
                }
                Err(e) => {
                    broke(e.to_string());
                    rolled_back = None;
                }
            }
        }
        if let Some(n) = rolled_back {
            out.tune_rollbacks.push(vec![], n as f64);
        }
        why
    }
}

/// Why some exported NIC's queue files are not known, when they are not: its `queues/`
/// unlisted (then it has no `netsteer_nic_queues` series), or an rx queue's `rps_cpus` or
/// `rps_flow_cnt` unread (then no RPS or RFS series for it, as for RPS off). The collector
/// tells those missing series from zeros and from RPS off. `xps_cpus` is left out: the
/// kernel refuses it on a single-queue device (net/core/net-sysfs.c, `xps_cpus_show`).
fn queue_files_unknown(devs: &[&Nic]) -> Option<String> {
    let mut unknown = devs.iter().flat_map(|nic| {
        let listing = nic
            .queues_unknown
            .iter()
            .map(move |why| format!("{}: queues: {why}", nic.name));
        let files = nic.rx_queues.iter().flat_map(move |q| {
            [
                ("rps_cpus", q.rps_cpus.unknown_reason()),
                ("rps_flow_cnt", q.rps_flow_cnt.unknown_reason()),
            ]
            .into_iter()
            .filter_map(move |(file, why)| {
                Some(format!("{} rx-{} {file}: {}", nic.name, q.index, why?))
            })
        });
        listing.chain(files)
    });
    let first = unknown.next()?;
    let more = unknown.count();
    Some(match more {
        0 => first,
        n => format!("{first} (and {n} more)"),
    })
}

/// The NIC features that change where and how much packet work is done.
const EXPORTED_FEATURES: &[&str] = &[
    "rx-gro",
    "rx-gro-hw",
    "rx-lro",
    "rx-udp-gro-forwarding",
    "rx-hashing",
    "rx-ntuple-filter",
    "tx-generic-segmentation",
    "tx-tcp-segmentation",
];

fn queue_label(role: IrqRole) -> String {
    match role {
        IrqRole::Rx(q) => format!("rx-{q}"),
        IrqRole::Tx(q) => format!("tx-{q}"),
        IrqRole::RxTx(q) => format!("combined-{q}"),
        IrqRole::RxAndTx { rx, tx } => format!("rx-{rx}+tx-{tx}"),
        IrqRole::AllQueues => "all".into(),
        IrqRole::Control => "control".into(),
        IrqRole::Other => "unrecognised".into(),
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Issue 77: the rates are the sampler's, whoever scrapes and however often: scrapes
    /// between two samples judge by the same interval, and only a sample moves it. (Before,
    /// each client's scrape reset its own interval, and clients sharing a network shared one.)
    #[test]
    fn every_scrape_judges_by_the_samplers_interval() {
        let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hosts/dev-vm");
        let nic_tree = tree.clone();
        let nic: NicSource = Box::new(move || {
            Ok(Box::new(netsteer_nic::TreeNic::new(&nic_tree)) as Box<dyn NicBackend>)
        });
        let opts = AgentOptions {
            devices: vec![],
            state_dir: None,
            goal: Goal::Balanced,
            version: "t",
            rates: Rates::Sampled {
                every: Duration::from_secs(5),
            },
            trace: None,
        };
        let agent = Agent::new(HostFs::new(tree), nic, opts);
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let window = |fams: &[Family]| {
            let f = |name: &str| {
                fams.iter()
                    .find(|f| f.name == name)
                    .and_then(|f| f.samples.first())
                    .map(|s| s.value)
            };
            (
                f("netsteer_doctor_rates_end_timestamp_seconds"),
                f("netsteer_doctor_rates_interval_seconds"),
            )
        };
        // Before two samples: averages since boot, no sampled interval.
        agent.sample(t0, wall);
        assert_eq!(window(&agent.scrape(t0, wall)), (None, None));
        agent.sample(t0 + Duration::from_secs(5), wall + Duration::from_secs(5));
        for i in 0..40u64 {
            let fams = agent.scrape(t0 + Duration::from_millis(5000 + 50 * i), wall);
            assert_eq!(window(&fams), (Some(1005.0), Some(5.0)), "scrape {i}");
        }
        agent.sample(t0 + Duration::from_secs(12), wall + Duration::from_secs(12));
        let fams = agent.scrape(t0 + Duration::from_secs(12), wall);
        assert_eq!(window(&fams), (Some(1012.0), Some(7.0)));
    }
}
