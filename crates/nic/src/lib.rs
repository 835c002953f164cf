//! NIC settings over ethtool generic netlink (Documentation/networking/ethtool-netlink.rst),
//! not by parsing `ethtool` text. [`NicBackend`] is the seam: [`Netlink`] talks to the kernel,
//! [`FakeNic`] serves canned settings to tests and to `--root` trees.

mod ethnl;
mod socket;

pub use ethnl::Netlink;

use netsteer_host::ethtool::NicSettings;
use std::collections::BTreeMap;

/// Errors from the netlink side, naming the device and the request.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    #[error("{dev}: {request}: {source}")]
    Os {
        dev: String,
        request: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("netlink socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("{request}: malformed netlink reply: {reason}")]
    Malformed {
        request: &'static str,
        reason: String,
    },
    #[error("generic netlink family {0:?} not found (kernel without ethtool netlink, < 5.6?)")]
    NoFamily(&'static str),
}

/// Reads (and, for tune, will write) NIC settings.
pub trait NicBackend {
    /// Everything netsteer reads about one interface; parts the driver lacks are unknown with
    /// the reason, never an error for the whole.
    fn settings(&self, ifname: &str) -> NicSettings;
}

/// Canned settings by interface name.
#[derive(Debug, Clone, Default)]
pub struct FakeNic {
    pub nics: BTreeMap<String, NicSettings>,
}

impl NicBackend for FakeNic {
    fn settings(&self, ifname: &str) -> NicSettings {
        self.nics
            .get(ifname)
            .cloned()
            .unwrap_or_else(|| NicSettings::unavailable("no such interface in the fake"))
    }
}
