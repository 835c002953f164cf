use crate::Host;
use anyhow::{Context, Result};
use clap::Args;
use netsteer_host::capture::{SnapshotMeta, write_tree};
use netsteer_host::ethtool::TreeEthtool;
use netsteer_host::read_host;
use netsteer_host::sample::read_sample;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// Directory to create (must be empty or absent).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    output: PathBuf,
}

pub fn run(host: &Host, args: &SnapshotArgs) -> Result<ExitCode> {
    let (fs, recorder) = host.fs.recording();
    let settings = host.nic_settings_source();
    // Read everything `show`, `top` and doctor read, through the recording root.
    let view = read_host(&fs, Some(&*settings));
    read_sample(&fs).context("reading counters")?;
    let _ = fs.read("/proc/net/dev");
    let _ = fs.read("/proc/net/snmp");
    let _ = fs.read("/proc/uptime");
    let ethtool: TreeEthtool = view
        .nics
        .iter()
        .filter_map(|n| Some((n.name.clone(), n.settings.clone()?)))
        .collect();
    let meta = SnapshotMeta {
        netsteer_version: env!("CARGO_PKG_VERSION").to_string(),
        kernel: view.kernel.known().cloned(),
        captured_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        modes: Default::default(),
    };
    let recorder = recorder
        .lock()
        .map_err(|_| anyhow::anyhow!("recorder poisoned"))?;
    let files = write_tree(&recorder, &args.output, meta, Some(&ethtool))
        .with_context(|| format!("writing snapshot to {}", args.output.display()))?;
    eprintln!(
        "netsteer: wrote {files} files to {}; read it back with `netsteer --root {} show`",
        args.output.display(),
        args.output.display()
    );
    // A support bundle with holes must say so: whoever reads it later cannot tell a file that
    // was unreadable from one the host does not have.
    for p in &view.problems {
        eprintln!("netsteer: not in the snapshot: {p}");
    }
    Ok(ExitCode::SUCCESS)
}
