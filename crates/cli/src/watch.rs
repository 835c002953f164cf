//! `netsteer watch`: flags and output; the reflexes, their guards and the journal are
//! `netsteer_steering::watch`'s.

use crate::Host;
use crate::args::Seconds;
use anyhow::{Context, Result, bail};
use clap::Args;
use netsteer_steering::doctor::Goal;
use netsteer_steering::tune::Tuner;
use netsteer_steering::watch::{self, RunOptions, Source, WatchConfig, Watcher};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    /// Replay recorded loads against a --root tree instead of reading the live host: one JSON
    /// object a line, each a `load` as `doctor --json` prints it, one per interval.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Test hook: abort after this many writes of an action, as a crash would.
    #[arg(long, hide = true, value_name = "K")]
    crash_after_writes: Option<usize>,
    /// Take the reflexes' actions through tune's transaction and journal; without it, only
    /// advise (each advice with a stable id, its evidence and the exact changes).
    #[arg(long)]
    apply: bool,
    /// Seconds between two readings (0.2 to 60).
    #[arg(long, default_value = "1", value_name = "S")]
    interval: Seconds,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long, value_name = "S")]
    duration: Option<Seconds>,
    /// Intervals a signal must hold before a reflex fires.
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=600))]
    persist: u32,
    /// Least seconds between two actions of one reflex.
    #[arg(long, default_value = "30", value_name = "S")]
    min_interval: Seconds,
    /// Cap on net.core.netdev_max_backlog (at most 1048576).
    #[arg(long, default_value_t = 32_768, value_name = "N")]
    max_backlog: i64,
    /// Cap on net.core.netdev_budget (at most 100000).
    #[arg(long, default_value_t = 1_200, value_name = "N")]
    max_budget: i64,
    /// Cap on net.core.netdev_budget_usecs (at most 10000).
    #[arg(long, default_value_t = 2_000, value_name = "US")]
    max_budget_usecs: i64,
    /// The doctor goal the RPS reflex plans for.
    #[arg(long, value_enum, default_value = "balanced")]
    goal: Goal,
    /// Roll back what the watcher still owns when it stops (default: leave it; the journals
    /// stay for `tune rollback --state-dir DIR/watch`).
    #[arg(long)]
    rollback_on_exit: bool,
    /// tune's state directory (default /var/lib/netsteer); the watcher's journals go to its
    /// `watch/` subdirectory.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Take back a knob the watcher gave up when someone else rewrote it (its path, e.g.
    /// /proc/sys/net/core/netdev_max_backlog, or `all`): its value written again through
    /// tune's transaction at start. Needs --apply. Repeatable.
    #[arg(long, value_name = "PATH")]
    reclaim: Vec<String>,
    /// Skip NIC settings over ethtool netlink (the rss reflex then has no table to judge).
    #[arg(long)]
    no_ethtool: bool,
    /// JSON Lines, one event per line (docs/watch.md).
    #[arg(long)]
    json: bool,
}

impl WatchArgs {
    fn config(&self) -> Result<WatchConfig> {
        let cfg = WatchConfig {
            apply: self.apply,
            persist: self.persist,
            min_interval: self.min_interval.get(),
            max_backlog: self.max_backlog,
            max_budget: self.max_budget,
            max_budget_usecs: self.max_budget_usecs,
            goal: self.goal,
            crash_after_writes: self.crash_after_writes,
            reclaim: self.reclaim.clone(),
            ..WatchConfig::default()
        };
        cfg.check().map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }
}

pub fn run(host: &Host, a: &WatchArgs) -> Result<ExitCode> {
    let interval = a.interval.get();
    if !(Duration::from_millis(200)..=Duration::from_secs(60)).contains(&interval) {
        bail!("--interval {}: 0.2 to 60 seconds", interval.as_secs_f64());
    }
    let cfg = a.config()?;
    let source = match &a.replay {
        None => Source::Live,
        Some(path) => {
            let bytes = netsteer_host::fs::read_regular(path, 64 << 20)
                .with_context(|| format!("--replay {}", path.display()))?;
            let text = String::from_utf8_lossy(&bytes);
            Source::Replay(
                watch::parse_replay(&text)
                    .map_err(|e| anyhow::anyhow!("--replay {}: {e}", path.display()))?,
            )
        }
    };
    if a.apply && host.fs.is_live() && !netsteer_sock::is_root() {
        bail!("watch --apply writes sysctls and sysfs: run it as root (or leave out --apply)");
    }
    let tuner = Tuner::open(host.fs.clone(), !a.no_ethtool, a.state_dir.clone())
        .context("the state directory")?;
    let (w, adopted) = Watcher::new(cfg, tuner).context("the watcher's state")?;
    let stop = Arc::new(AtomicBool::new(false));
    netsteer_sock::signal::stop_on_termination(stop.clone())?;
    let mut out = std::io::stdout().lock();
    let json = a.json;
    let mut print = |e: &watch::Event| {
        let line = if json {
            serde_json::to_string(e).map_err(std::io::Error::other)?
        } else {
            netsteer_host::safe::line(&watch::text(e)).into_owned()
        };
        crate::emit(&mut out, &line)
    };
    for e in &adopted {
        print(e)?;
    }
    let opts = RunOptions {
        interval,
        duration: a.duration.map(|d| d.get()),
        rollback_on_exit: a.rollback_on_exit,
        source,
    };
    watch::run(w, &opts, &|| stop.load(Ordering::Relaxed), &mut print)
        .map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}
