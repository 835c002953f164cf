use crate::Host;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub root: crate::args::RootArg,
    /// Directory to create (must be empty or absent).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    output: PathBuf,
}

pub fn run(host: &Host, args: &SnapshotArgs) -> Result<ExitCode> {
    let settings = host.nic_settings_source();
    let out = &args.output;
    let (files, problems) = netsteer_host::capture::snapshot(&host.fs, &*settings, out)
        .with_context(|| format!("writing snapshot to {}", out.display()))?;
    eprintln!(
        "netsteer: wrote {files} files to {}; read it back with `netsteer --root {} show`",
        out.display(),
        out.display()
    );
    for p in &problems {
        eprintln!("netsteer: not in the snapshot: {p}");
    }
    Ok(ExitCode::SUCCESS)
}
