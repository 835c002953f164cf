//! Flag value types shared by the subcommands.

use std::path::PathBuf;

pub use netsteer_bench::args::Seconds;

/// `--root`: before any command, or after one that reads a host (show, snapshot, top,
/// doctor, tune, agent); the others do not list it.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RootArg {
    /// Read the host from this directory instead of `/` (a `netsteer snapshot` or fixture
    /// tree). `doctor` takes it several times, or a directory of snapshots, for a fleet table.
    #[arg(long = "root", value_name = "DIR", action = clap::ArgAction::Append)]
    pub roots: Vec<PathBuf>,
}
