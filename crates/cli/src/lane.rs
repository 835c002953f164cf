//! `netsteer lane`: flags and output; the plan is `netsteer_steering::model::planner::lane`'s,
//! the lanes' state and their holding `netsteer_steering::lane`'s.

use crate::args::Seconds;
use crate::tune::{print_json, print_lines};
use crate::{Host, emit};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use netsteer_host::sockets::Proto;
use netsteer_steering::lane::{self, HoldEvent, LaneMode, Lanes, ServiceRef, Spec as LaneSpec};
use netsteer_steering::tune::text::{render_apply, render_rollback};
use netsteer_steering::tune::{ApplyOptions, ApplyStatus, RollbackStatus};
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum LaneCommand {
    /// The lane's plan for its service as it runs now: current → desired per item, with the
    /// reason, and what the service itself should set. Changes nothing.
    Plan(LaneArgs),
    /// Record the lane and apply it through tune's transaction (journal, all or nothing,
    /// read back). With --hold, then keep it with the service's life.
    Apply(ApplyArgs),
    /// Keep a recorded lane with its service's life: applied while the service runs, rolled
    /// back within a second of its stop, applied again when it starts. Leaves the lane as it
    /// is on exit unless --rollback-on-exit.
    Hold(HoldArgs),
    /// Roll a lane back and forget it.
    Remove(NameArgs),
    /// The recorded lanes and where each stands.
    List(ListArgs),
}

impl LaneCommand {
    pub fn roots(&self) -> &[PathBuf] {
        match self {
            LaneCommand::Plan(a) => &a.common.root.roots,
            LaneCommand::Apply(a) => &a.lane.common.root.roots,
            LaneCommand::Hold(a) => &a.name.common.root.roots,
            LaneCommand::Remove(a) => &a.common.root.roots,
            LaneCommand::List(a) => &a.common.root.roots,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    /// tune's state directory (default /var/lib/netsteer); each lane lives in its
    /// `lanes/NAME/` subdirectory.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// One JSON document instead of the text report (docs/json.md).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct LaneArgs {
    #[command(flatten)]
    common: Common,
    /// The lane's name (a-z, 0-9, '-'; at most 32).
    #[arg(long)]
    name: String,
    /// The interface the service's traffic arrives on.
    #[arg(long = "dev", value_name = "IF")]
    dev: String,
    /// The service's UDP port.
    #[arg(
        long,
        value_name = "PORT",
        conflicts_with = "tcp",
        required_unless_present = "tcp"
    )]
    udp: Option<u16>,
    /// The service's TCP port (it listens on it).
    #[arg(long, value_name = "PORT")]
    tcp: Option<u16>,
    /// The lane's CPU: the queue's IRQ, its NET_RX and the service's threads run there.
    #[arg(long, value_name = "CPU")]
    cpu: u32,
    /// The receive queue the lane takes (default: the device's last).
    #[arg(long, value_name = "Q")]
    queue: Option<u32>,
    /// What the lane's NAPI does: irq (interrupts), busy-poll (the service busy-polls with
    /// SO_PREFER_BUSY_POLL), suspend (IRQ suspension, 6.13+), threaded-poll (6.19+).
    #[arg(long, value_enum, default_value = "irq")]
    mode: LaneMode,
    /// With --mode threaded-poll: the CPU the NAPI's polling kthread is pinned to (not
    /// --cpu: it polls without pause).
    #[arg(long, value_name = "CPU")]
    poll_cpu: Option<u32>,
    /// The service is this systemd unit's processes (default: whoever holds the port at the
    /// apply, known from then on by its sockets' uid and addresses).
    #[arg(long, value_name = "UNIT", conflicts_with = "cgroup")]
    unit: Option<String>,
    /// The service is this cgroup's processes (a path below /sys/fs/cgroup).
    #[arg(long, value_name = "PATH")]
    cgroup: Option<String>,
    /// RSS buckets that carry the service's flow (a device without n-tuple filters): they
    /// alone go to the lane's queue.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    rss_bucket: Vec<u32>,
    /// Turn interrupt coalescing off device-wide where the driver has no per-queue setting
    /// (the other queues then interrupt per packet too).
    #[arg(long)]
    device_coalesce: bool,
    /// What to do about an irqbalance that runs or may run (its state unknown), which would
    /// move the lane's IRQ back.
    #[arg(long, value_enum, default_value = "leave")]
    irqbalance: netsteer_steering::tune::IrqbalancePolicy,
    /// Skip NIC settings read over ethtool netlink.
    #[arg(long)]
    no_ethtool: bool,
}

impl LaneArgs {
    fn spec(&self) -> LaneSpec {
        let (proto, port) = match (self.udp, self.tcp) {
            (Some(p), _) => (Proto::Udp, p),
            (None, Some(p)) => (Proto::Tcp, p),
            (None, None) => unreachable!("clap requires --udp or --tcp"),
        };
        LaneSpec {
            name: self.name.clone(),
            dev: self.dev.clone(),
            proto,
            port,
            cpu: self.cpu,
            queue: self.queue,
            mode: self.mode,
            rss_buckets: self.rss_bucket.clone(),
            device_coalesce: self.device_coalesce,
            stop_irqbalance: self.irqbalance == netsteer_steering::tune::IrqbalancePolicy::Stop,
            poll_cpu: self.poll_cpu,
            service: match (&self.unit, &self.cgroup) {
                (Some(u), _) => ServiceRef::Unit(u.clone()),
                (None, Some(c)) => ServiceRef::Cgroup(c.clone()),
                (None, None) => ServiceRef::Port,
            },
        }
    }
}

#[derive(Args, Debug)]
pub struct ApplyArgs {
    #[command(flatten)]
    lane: LaneArgs,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// After applying, keep the lane with the service's life (as `lane hold`).
    #[arg(long)]
    hold: bool,
    #[command(flatten)]
    holding: Holding,
    /// Test hook: abort after this many writes, as a crash would.
    #[arg(long, hide = true, value_name = "K")]
    crash_after_writes: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct Holding {
    /// Seconds between two looks at the service (0.05 to 5).
    #[arg(long, default_value = "0.2", value_name = "S")]
    interval: Seconds,
    /// Roll the lane back when the holder stops (default: leave it for the service).
    #[arg(long)]
    rollback_on_exit: bool,
    /// Seconds between two read-backs of what the lane set, to see changes made behind its
    /// back (0.05 to 60; the RSS table and channels are also read back at once when the kernel
    /// announces a change, 6.17+).
    #[arg(long, default_value = "1", value_name = "S")]
    verify_interval: Seconds,
    /// What to do about such a change: `report` it and leave it, or `reassert` the lane.
    #[arg(long, value_enum, default_value = "report")]
    on_foreign: OnForeign,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum OnForeign {
    Report,
    Reassert,
}

#[derive(Args, Debug, Clone)]
pub struct NameArgs {
    #[command(flatten)]
    common: Common,
    /// The lane's name.
    #[arg(value_name = "NAME")]
    name: String,
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    #[command(flatten)]
    name: NameArgs,
    #[command(flatten)]
    holding: Holding,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    common: Common,
}

fn lanes(host: &Host, c: &Common, use_nic: bool) -> Result<Lanes> {
    Lanes::open(host.fs.clone(), use_nic, c.state_dir.clone()).context("the state directory")
}

pub fn run(host: &Host, cmd: &LaneCommand) -> Result<ExitCode> {
    match cmd {
        LaneCommand::Plan(a) => {
            let l = lanes(host, &a.common, !a.no_ethtool)?;
            let p = l.plan(&a.spec())?;
            if a.common.json {
                print_json(&p)?;
            } else {
                print_lines(&lane::text::render_plan(&a.spec(), &p))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        LaneCommand::Apply(a) => {
            let l = lanes(host, &a.lane.common, !a.lane.no_ethtool)?;
            let spec = a.lane.spec();
            if a.dry_run {
                let p = l.plan(&spec)?;
                if a.lane.common.json {
                    print_json(&p)?;
                } else {
                    let mut lines = lane::text::render_plan(&spec, &p);
                    lines.push("dry run: nothing was changed".into());
                    print_lines(&lines)?;
                }
                return Ok(ExitCode::SUCCESS);
            }
            crate::tune::need_root(host, "lane apply")?;
            let opts = ApplyOptions {
                crash_after_writes: a.crash_after_writes,
                ..ApplyOptions::default()
            };
            let r = l.apply(&spec, &opts)?;
            if a.lane.common.json {
                print_json(&r)?;
            } else {
                print_lines(&render_apply(&r))?;
            }
            if r.status != ApplyStatus::Applied {
                return Ok(ExitCode::from(2));
            }
            if a.hold {
                return hold(&l, &spec.name, &a.holding, a.lane.common.json);
            }
            Ok(ExitCode::SUCCESS)
        }
        LaneCommand::Hold(a) => {
            crate::tune::need_root(host, "lane hold")?;
            let l = lanes(host, &a.name.common, true)?;
            hold(&l, &a.name.name, &a.holding, a.name.common.json)
        }
        LaneCommand::Remove(a) => {
            crate::tune::need_root(host, "lane remove")?;
            let l = lanes(host, &a.common, true)?;
            let r = l.remove(&a.name, true)?;
            match (&r, a.common.json) {
                (Some(r), true) => print_json(r)?,
                (Some(r), false) => print_lines(&render_rollback(r))?,
                (None, true) => print_json(
                    &serde_json::json!({"lane": a.name, "status": RollbackStatus::NothingToDo}),
                )?,
                (None, false) => {
                    print_lines(&[format!("lane {}: never applied; forgotten", a.name)])?
                }
            }
            Ok(if r.is_none_or(|r| r.failed.is_empty()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
        LaneCommand::List(a) => {
            let l = lanes(host, &a.common, false)?;
            let all = l
                .names()?
                .iter()
                .map(|n| l.status(n))
                .collect::<Result<Vec<_>, _>>()?;
            if a.common.json {
                print_json(&all)?;
            } else {
                print_lines(&lane::text::render_list(&all))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn hold(l: &Lanes, name: &str, h: &Holding, json: bool) -> Result<ExitCode> {
    let interval = h.interval.get();
    if !(Duration::from_millis(50)..=Duration::from_secs(5)).contains(&interval) {
        bail!("--interval {}: 0.05 to 5 seconds", interval.as_secs_f64());
    }
    let stop = Arc::new(AtomicBool::new(false));
    netsteer_sock::signal::stop_on_termination(stop.clone())?;
    let mut out = io::stdout().lock();
    let mut failed: Option<io::Error> = None;
    let mut on_event = |e: Result<&HoldEvent, &lane::LaneOpError>| {
        let line = if json {
            lane::text::event_json(name, e).to_string()
        } else {
            netsteer_host::safe::line(&lane::text::event_line(name, e)).into_owned()
        };
        if let Err(err) = emit(&mut out, &line) {
            failed.get_or_insert(err);
        }
    };
    let verify_every = h.verify_interval.get();
    if !(Duration::from_millis(50)..=Duration::from_secs(60)).contains(&verify_every) {
        bail!(
            "--verify-interval {}: 0.05 to 60 seconds",
            verify_every.as_secs_f64()
        );
    }
    let how = lane::Holding {
        interval,
        verify_every,
        rollback_on_exit: h.rollback_on_exit,
        foreign: match h.on_foreign {
            OnForeign::Report => lane::Foreign::Report,
            OnForeign::Reassert => lane::Foreign::Reassert,
        },
    };
    l.hold(
        name,
        &how,
        &ApplyOptions::default(),
        &|| stop.load(Ordering::Relaxed),
        &mut on_event,
    )?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(ExitCode::SUCCESS)
}
