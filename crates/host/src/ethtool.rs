//! NIC settings read over ethtool netlink (by `netsteer-nic`), as data. They live here so that a
//! snapshot tree can carry them (`netsteer/ethtool.json`) and `--root` reproduces them offline.

use crate::field::Field;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a tree keeps the NIC settings that were read over netlink when it was captured.
pub const TREE_ETHTOOL_FILE: &str = "/netsteer/ethtool.json";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channels {
    pub rx: Option<u32>,
    pub tx: Option<u32>,
    pub other: Option<u32>,
    pub combined: Option<u32>,
    pub rx_max: Option<u32>,
    pub tx_max: Option<u32>,
    pub other_max: Option<u32>,
    pub combined_max: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rings {
    pub rx: Option<u32>,
    pub rx_max: Option<u32>,
    pub tx: Option<u32>,
    pub tx_max: Option<u32>,
    pub rx_mini: Option<u32>,
    pub rx_jumbo: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feature {
    pub active: bool,
    /// False when the driver does not let the feature be changed (`[fixed]` in ethtool -k).
    pub changeable: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub autoneg: Option<bool>,
    pub rx: Option<bool>,
    pub tx: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rss {
    /// Active hash function (`toeplitz`, `xor`, `crc32`), when the driver reports one.
    pub hfunc: Option<String>,
    /// Indirection table: entry i = rx queue of hash bucket i.
    pub indirection: Vec<u32>,
    /// Hash key as lowercase hex.
    pub key: Option<String>,
}

/// Everything netsteer reads about one NIC over netlink. Each part may be unsupported by the
/// driver (veth has no coalescing, virtio no RSS table), which is recorded as the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicSettings {
    pub channels: Field<Channels>,
    pub rings: Field<Rings>,
    /// Kernel feature names (`rx-gro`, `ntuple-filters`, ...).
    pub features: Field<BTreeMap<String, Feature>>,
    /// Coalescing parameters by ethtool netlink name (`rx-usecs`, `adaptive-rx`, ...).
    pub coalesce: Field<BTreeMap<String, u64>>,
    pub pause: Field<Pause>,
    pub rss: Field<Rss>,
}

impl NicSettings {
    /// Settings that could not be read at all, with one reason for every part.
    pub fn unavailable(reason: &str) -> Self {
        NicSettings {
            channels: Field::unknown(reason),
            rings: Field::unknown(reason),
            features: Field::unknown(reason),
            coalesce: Field::unknown(reason),
            pause: Field::unknown(reason),
            rss: Field::unknown(reason),
        }
    }
}

/// The snapshot file: interface name → settings.
pub type TreeEthtool = BTreeMap<String, NicSettings>;
