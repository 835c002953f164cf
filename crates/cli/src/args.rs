//! Flag value types shared by the subcommands.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// `--root`: before any command, or after one that reads a host (show, snapshot, top,
/// doctor, tune, agent, watch); the others do not list it.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RootArg {
    /// Read the host from this directory instead of `/` (a `netsteer snapshot` or fixture
    /// tree). `doctor` takes it several times, or a directory of snapshots, for a fleet table.
    #[arg(long = "root", value_name = "DIR", action = clap::ArgAction::Append)]
    pub roots: Vec<PathBuf>,
}

/// Largest number of seconds any flag takes: 30 days. Far above any benchmark or sample
/// anyone runs, and far below what overflows a `Duration` (`1e20` used to panic in
/// `Duration::from_secs_f64`).
pub const MAX_SECONDS: f64 = 30.0 * 86_400.0;

/// A number of seconds from the command line: finite, 0 or more, at most [`MAX_SECONDS`].
/// clap names the flag in the error, so a bad value never reaches the code that uses it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds(pub Duration);

impl Seconds {
    pub fn get(self) -> Duration {
        self.0
    }
}

impl FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a number of seconds"))?;
        if !v.is_finite() || !(0.0..=MAX_SECONDS).contains(&v) {
            return Err(format!(
                "{s} seconds: must be from 0 to {MAX_SECONDS} (30 days)"
            ));
        }
        Ok(Seconds(Duration::from_secs_f64(v)))
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_bounded_and_finite() {
        assert_eq!(
            "1.5".parse::<Seconds>().unwrap().get(),
            Duration::from_millis(1500)
        );
        assert_eq!("0".parse::<Seconds>().unwrap().get(), Duration::ZERO);
        for bad in ["1e20", "-1", "NaN", "inf", "x", "", "2592001"] {
            assert!(bad.parse::<Seconds>().is_err(), "{bad}");
        }
        assert!("2592000".parse::<Seconds>().is_ok());
    }
}
