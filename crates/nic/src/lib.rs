//! NIC settings over ethtool generic netlink (Documentation/networking/ethtool-netlink.rst) and
//! per-NAPI/queue state over netdev netlink ([`netdev`]), never by parsing `ethtool` text; n-tuple
//! rules over the SIOCETHTOOL ioctl ([`rxnfc`]). [`NicBackend`] is the seam: [`Netlink`] talks to
//! the kernel, [`FakeNic`] serves canned settings to tests, and [`TreeNic`] reads and writes the
//! NIC state a `--root` tree recorded (`netsteer/ethtool.json`), so tuning a tree never touches a
//! real NIC.

mod attr;
mod ethnl;
pub mod genl;
mod ioctl;
pub mod napi_override;
pub mod netdev;
pub mod rtnl;
pub mod rxfh;
pub mod rxnfc;
mod socket;

pub use ethnl::Netlink;
pub use ethnl::monitor::{Change, Monitor, Notice};

use netsteer_host::ethtool::{
    NicKnob, NicSettings, TREE_ETHTOOL_FILE, TreeEthtool, tree_ethtool_text,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

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
    #[error("{dev}: {knob}: {reason}")]
    Refused {
        dev: String,
        knob: String,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Tree { path: PathBuf, reason: String },
}

impl NicError {
    /// The errno the kernel answered with, if it did.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NicError::Os { source, .. } | NicError::Socket(source) => socket::errno_of(source),
            _ => None,
        }
    }
}

/// Reads and writes NIC settings.
pub trait NicBackend {
    /// Everything netsteer reads about one interface; parts the driver lacks are unknown with
    /// the reason, never an error for the whole.
    fn settings(&self, ifname: &str) -> NicSettings;

    /// Changes one setting (ETHTOOL_MSG_*_SET on the live host); `value` as [`NicKnob::read`]
    /// prints it.
    fn set(&self, ifname: &str, knob: &NicKnob, value: &str) -> Result<(), NicError>;

    /// The driver's per-queue counters (netdev netlink qstats), for rates: empty when it
    /// keeps none. The live backend reads only these (a few syscalls), not every setting.
    fn queue_stats(&self, ifname: &str) -> Result<Vec<netsteer_host::netdev::QueueStats>, String> {
        self.settings(ifname).netdev().map(|n| n.qstats.clone())
    }

    /// Every page pool of the namespace with its counters, read now (rates need two fresh
    /// reads, not a cached one); why not where none can be listed.
    fn page_pools(
        &self,
    ) -> Result<netsteer_host::netdev::PagePools, netsteer_host::netdev::PoolsError> {
        Err(netsteer_host::netdev::PoolsError::NotKept(
            "this NIC backend lists no page pools".into(),
        ))
    }

    /// A device's receive queues by the NAPI serving each (netdev `queue-get`): how a pool,
    /// which names its NAPI, is put on its queue.
    fn rx_queues_by_napi(&self, ifname: &str) -> Result<BTreeMap<u32, u32>, String> {
        self.settings(ifname)
            .netdev()
            .map(|n| netsteer_host::netdev::rx_queues_by_napi(&n.queues))
    }
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

    fn set(&self, ifname: &str, knob: &NicKnob, _value: &str) -> Result<(), NicError> {
        // The fake is read-only by design: tests that write use a `TreeNic`.
        Err(NicError::Refused {
            dev: ifname.to_string(),
            knob: knob.to_string(),
            reason: "the fake NIC backend is read-only".into(),
        })
    }
}

/// No NIC backend, and why: `--no-ethtool`, or the netlink socket that could not be opened.
/// Reads are unknown with that reason and writes are refused with it (a rollback that must
/// restore a NIC setting then says what stopped it, not that some other backend is read-only).
#[derive(Debug, Clone)]
pub struct NoNic {
    pub reason: String,
}

impl NicBackend for NoNic {
    fn settings(&self, _ifname: &str) -> NicSettings {
        NicSettings::unavailable(&self.reason)
    }

    fn set(&self, ifname: &str, knob: &NicKnob, _value: &str) -> Result<(), NicError> {
        Err(NicError::Refused {
            dev: ifname.to_string(),
            knob: knob.to_string(),
            reason: format!("NIC settings cannot be changed: {}", self.reason),
        })
    }
}

/// The NIC backend of a host: ethtool netlink on the live host (opened in the calling
/// thread's network namespace), the tree's recorded state (`netsteer/ethtool.json`) under a
/// `--root`. Err(reason) when netlink cannot be opened.
pub fn backend_for(fs: &netsteer_host::HostFs) -> Result<Box<dyn NicBackend>, String> {
    if fs.is_live() {
        Netlink::open()
            .map(|nl| Box::new(nl) as Box<dyn NicBackend>)
            .map_err(|e| e.to_string())
    } else {
        Ok(Box::new(TreeNic::new(fs.root())))
    }
}

/// NIC settings for one interface from [`backend_for`], with the reason in place of values
/// when there is no backend.
pub fn settings_source(fs: &netsteer_host::HostFs) -> Box<dyn Fn(&str) -> NicSettings> {
    match backend_for(fs) {
        Ok(backend) => Box::new(move |name: &str| backend.settings(name)),
        Err(reason) => Box::new(move |_: &str| NicSettings::unavailable(&reason)),
    }
}

/// The NIC state of a `--root` tree: reads `netsteer/ethtool.json`, and writes it back in its
/// one canonical form ([`tree_ethtool_text`]) after each change.
#[derive(Debug, Clone)]
pub struct TreeNic {
    root: PathBuf,
}

impl TreeNic {
    pub fn new(root: impl Into<PathBuf>) -> TreeNic {
        TreeNic { root: root.into() }
    }

    fn path(&self) -> PathBuf {
        self.root.join(TREE_ETHTOOL_FILE.trim_start_matches('/'))
    }

    fn load(&self) -> Result<TreeEthtool, NicError> {
        netsteer_host::capture::read_tree_ethtool(&self.root).map_err(|e| NicError::Tree {
            path: self.path(),
            reason: e.to_string(),
        })
    }
}

impl NicBackend for TreeNic {
    fn settings(&self, ifname: &str) -> NicSettings {
        match self.load() {
            Ok(mut all) => all.remove(ifname).unwrap_or_else(|| {
                NicSettings::unavailable(&format!("{TREE_ETHTOOL_FILE} has no entry for {ifname}"))
            }),
            Err(e) => NicSettings::unavailable(&e.to_string()),
        }
    }

    fn set(&self, ifname: &str, knob: &NicKnob, value: &str) -> Result<(), NicError> {
        let mut all = self.load()?;
        let refused = |reason: String| NicError::Refused {
            dev: ifname.to_string(),
            knob: knob.to_string(),
            reason,
        };
        let nic = all
            .get_mut(ifname)
            .ok_or_else(|| refused(format!("{TREE_ETHTOOL_FILE} has no entry for it")))?;
        knob.store(nic, value).map_err(refused)?;
        let path = self.path();
        std::fs::write(&path, tree_ethtool_text(&all)).map_err(|e| NicError::Tree {
            path,
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod no_nic_tests {
    use super::*;

    #[test]
    fn no_nic_says_why_instead_of_pretending_to_be_a_fake() {
        let n = NoNic {
            reason: "ethtool netlink could not be opened: Permission denied".into(),
        };
        let e = n
            .set("eth0", &NicKnob::Channels("combined".into()), "4")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Permission denied"), "{e}");
        assert!(!e.contains("fake"), "{e}");
    }
}
