use crate::{Host, emit};
use anyhow::Result;
use clap::Args;
use netsteer_host::read_host;
use std::io;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ShowArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    /// One JSON document (the `HostView` schema, docs/json.md) instead of the human report.
    #[arg(long)]
    json: bool,
    /// Only these interfaces (repeatable).
    #[arg(long = "dev", value_name = "IF")]
    devs: Vec<String>,
    /// Skip reading NIC settings over ethtool netlink.
    #[arg(long)]
    no_ethtool: bool,
}

pub fn run(host: &Host, args: &ShowArgs) -> Result<ExitCode> {
    let settings = host.nic_settings_source();
    let mut view = read_host(&host.fs, (!args.no_ethtool).then_some(&*settings));
    if !args.devs.is_empty() {
        for d in &args.devs {
            if view.nic(d).is_none() {
                anyhow::bail!("--dev {d}: no such interface under /sys/class/net");
            }
        }
        view.nics.retain(|n| args.devs.contains(&n.name));
    }
    let mut out = io::stdout().lock();
    if args.json {
        emit(&mut out, &serde_json::to_string_pretty(&view)?)?;
    } else {
        for line in netsteer_host::safe::text(&netsteer_host::text::host_view(&view)).lines() {
            emit(&mut out, line)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
