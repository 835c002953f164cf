//! NIC settings read over ethtool netlink (by `netsteer-nic`), as data. They live here so that a
//! snapshot tree can carry them (`netsteer/ethtool.json`) and `--root` reproduces them offline.

use crate::field::Field;
use crate::netdev::{NapiAttr, Netdev, NtupleFlow, NtupleKey, NtupleRule};
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
    /// The size of each receive buffer, where the driver reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_buf_len: Option<u32>,
    /// Header/data split (`ethtool -G tcp-data-split`, 6.0): TCP headers in one buffer, the
    /// payload page-aligned in another, which is what lets TCP_ZEROCOPY_RECEIVE and io_uring
    /// zcrx map it. Absent: the driver says nothing (the kernel sends no attribute for
    /// "unknown", net/ethtool/rings.c).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_data_split: Option<DataSplit>,
    /// Packets at or below this many bytes are not split (6.14); with its maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hds_thresh: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hds_thresh_max: Option<u32>,
}

/// The ring parameter that turns header/data split on (1) or off (0): `nic/IF/rings/
/// tcp-data-split`, `ethtool -G IF tcp-data-split on|off`.
pub const RING_DATA_SPLIT: &str = "tcp-data-split";
/// The ring parameter below which packets are not split: `nic/IF/rings/hds-thresh`, bytes.
pub const RING_HDS_THRESH: &str = "hds-thresh";
/// The ring parameters a plan may set: `ethtool -G` sizes and the header-split pair.
pub const RING_PARAMS: [&str; 4] = ["rx", "tx", RING_DATA_SPLIT, RING_HDS_THRESH];

/// Why a device's header split cannot be read or set: the kernel reports the state only for
/// drivers that set ETHTOOL_RING_USE_TCP_DATA_SPLIT (bnxt, gve, idpf, fbnic, netdevsim and a
/// few more; not virtio-net, igb, e1000e or veth), and sends no attribute otherwise.
pub const NO_DATA_SPLIT: &str = "the driver reports no header split (ETHTOOL_A_RINGS_TCP_DATA_SPLIT: Linux 6.0+; drivers that can split headers from payload report the state in effect)";

/// Why a device's header-split threshold cannot be read or set.
pub const NO_HDS_THRESH: &str = "the driver reports no header-split threshold (ETHTOOL_A_RINGS_HDS_THRESH, Linux 6.14+, drivers with ETHTOOL_RING_USE_HDS_THRS)";

/// ETHTOOL_TCP_DATA_SPLIT_* (include/uapi/linux/ethtool.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataSplit {
    /// 0, or a value this build does not know.
    Unknown,
    Disabled,
    Enabled,
}

impl DataSplit {
    pub fn from_u8(v: u8) -> DataSplit {
        match v {
            1 => DataSplit::Disabled,
            2 => DataSplit::Enabled,
            _ => DataSplit::Unknown,
        }
    }
}

impl std::fmt::Display for DataSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DataSplit::Unknown => "unknown",
            DataSplit::Disabled => "off",
            DataSplit::Enabled => "on",
        })
    }
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
    /// The link's kind as rtnetlink names it (IFLA_INFO_KIND: `veth`, `bridge`, `bond`, ...);
    /// absent for links without one (physical NICs, loopback) and when it was not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_kind: Option<String>,
    /// NAPIs, queues and per-queue counters from the `netdev` netlink family; absent in trees
    /// captured before netsteer read it (and then absent when such a tree is written back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<Field<Netdev>>,
    /// Receive flow-steering (n-tuple) rules (ETHTOOL_GRXCLSRLALL); unknown with the reason
    /// for a device without them, absent in trees captured before netsteer read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntuple: Option<Field<Vec<NtupleRule>>>,
    /// The header fields each flow type's RSS hash covers, in `ethtool -N rx-flow-hash`
    /// letters (`udp4` → `sd`: addresses only, so every flow between two hosts lands on one
    /// queue; `sdfn`: addresses and ports). Only the flow types the driver answers for; absent
    /// in trees captured before netsteer read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_hash: Option<Field<BTreeMap<String, String>>>,
    /// What this kernel lacks and how each part was read instead ("rss: read over the
    /// ETHTOOL_GRSSH ioctl: this kernel's ethtool netlink has no RSS_GET (Linux 6.2+)"), so
    /// show and doctor can say it rather than fail or stay silent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
}

impl NicSettings {
    /// The n-tuple rules, or why there are none.
    pub fn ntuple(&self) -> Result<&Vec<NtupleRule>, String> {
        match &self.ntuple {
            None => {
                Err("n-tuple rules not recorded (a tree captured before netsteer read them)".into())
            }
            Some(f) => part(f, "n-tuple rules"),
        }
    }

    /// The netdev data, or why there is none.
    pub fn netdev(&self) -> Result<&Netdev, String> {
        match &self.netdev {
            None => {
                Err("netdev data not recorded (a tree captured before netsteer read it)".into())
            }
            Some(f) => part(f, "netdev"),
        }
    }
}

/// The NAPI `id` of a device's netdev data, or why there is none.
fn napi_of(s: &NicSettings, id: u32) -> Result<&crate::netdev::Napi, String> {
    s.netdev()?
        .napis
        .iter()
        .find(|n| n.id == id)
        .ok_or_else(|| format!("the device has no NAPI {id} (now)"))
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
            link_kind: None,
            netdev: Some(Field::unknown(reason)),
            ntuple: Some(Field::unknown(reason)),
            flow_hash: Some(Field::unknown(reason)),
            interfaces: Vec::new(),
        }
    }

    /// The flow-hash fields of each flow type, or why they are unknown.
    pub fn flow_hash(&self) -> Result<&BTreeMap<String, String>, String> {
        match &self.flow_hash {
            None => Err(
                "flow-hash fields not recorded (a tree captured before netsteer read them)".into(),
            ),
            Some(f) => part(f, "flow-hash fields"),
        }
    }
}

/// The snapshot file: interface name → settings.
pub type TreeEthtool = BTreeMap<String, NicSettings>;

/// One NIC setting netsteer can change, named as ethtool netlink names it
/// (Documentation/networking/ethtool-netlink.rst). Values are numbers; on/off is 1/0.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "knob", content = "name", rename_all = "kebab-case")]
pub enum NicKnob {
    /// A feature bit (`rx-gro`, `rx-lro`, `ntuple-filters`).
    Feature(String),
    /// A channel count: `combined`, `rx`, `tx` or `other`.
    Channels(String),
    /// A coalescing parameter (`rx-usecs`, `adaptive-rx`).
    Coalesce(String),
    /// Flow control: `autoneg`, `rx` or `tx`.
    Pause(String),
    /// A ring size: `rx` or `tx`.
    Rings(String),
    /// The RSS indirection table: entry i is the rx queue of hash bucket i. Its value is the
    /// queue numbers separated by spaces.
    RssIndirection,
    /// A per-NAPI setting (NETDEV_CMD_NAPI_SET), by NAPI id.
    Napi(u32, NapiAttr),
    /// An n-tuple rule steering one destination port to a queue (ETHTOOL_SRXCLSRLINS /
    /// SRXCLSRLDEL). Its value is `flow-type tcp4 dst-port 22 action Q`, or empty for none.
    Ntuple(NtupleKey),
    /// The header fields a flow type (`udp4`) is hashed on for RSS (ETHTOOL_SRXFH, `ethtool -N
    /// DEV rx-flow-hash udp4 sdfn`). Its value is ethtool's letters.
    FlowHash(String),
}

impl std::fmt::Display for NicKnob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NicKnob::Feature(n) => write!(f, "feature {n}"),
            NicKnob::Channels(n) => write!(f, "channels {n}"),
            NicKnob::Coalesce(n) => write!(f, "coalesce {n}"),
            NicKnob::Pause(n) => write!(f, "pause {n}"),
            NicKnob::Rings(n) => write!(f, "rings {n}"),
            NicKnob::RssIndirection => f.write_str("rss indirection"),
            NicKnob::Napi(id, a) => write!(f, "napi {id} {a}"),
            NicKnob::Ntuple(k) => write!(f, "ntuple {k}"),
            NicKnob::FlowHash(t) => write!(f, "flow-hash {t}"),
        }
    }
}

fn part<'a, T>(field: &'a Field<T>, what: &str) -> Result<&'a T, String> {
    match field {
        Field::Known(v) => Ok(v),
        Field::Unknown { unknown } => Err(format!("{what}: {unknown}")),
    }
}

fn part_mut<'a, T>(field: &'a mut Field<T>, what: &str) -> Result<&'a mut T, String> {
    match field {
        Field::Known(v) => Ok(v),
        Field::Unknown { unknown } => Err(format!("{what}: {unknown}")),
    }
}

fn channel_slot<'a>(
    c: &'a mut Channels,
    name: &str,
) -> Result<(&'a mut Option<u32>, Option<u32>), String> {
    Ok(match name {
        "combined" => (&mut c.combined, c.combined_max),
        "rx" => (&mut c.rx, c.rx_max),
        "tx" => (&mut c.tx, c.tx_max),
        "other" => (&mut c.other, c.other_max),
        _ => return Err(format!("no channel count {name:?}")),
    })
}

impl NicKnob {
    /// The current value as text (a number, or the indirection table), or why it cannot be
    /// known (the driver lacks the whole part, or this parameter).
    pub fn read(&self, s: &NicSettings) -> Result<String, String> {
        match self {
            NicKnob::Ntuple(k) => Ok(k
                .find(s.ntuple()?)
                .and_then(|r| r.queue)
                .map_or(String::new(), |q| k.rule_text(q))),
            NicKnob::RssIndirection => {
                let t = &part(&s.rss, "rss")?.indirection;
                if t.is_empty() {
                    return Err("the driver reports no RSS indirection table".into());
                }
                Ok(t.iter().map(u32::to_string).collect::<Vec<_>>().join(" "))
            }
            NicKnob::FlowHash(t) => s
                .flow_hash()?
                .get(t)
                .cloned()
                .ok_or_else(|| format!("the driver does not say what it hashes {t} on")),
            _ => self.read_number(s).map(|v| v.to_string()),
        }
    }

    /// The current value of a numeric knob.
    pub fn read_number(&self, s: &NicSettings) -> Result<u64, String> {
        match self {
            NicKnob::RssIndirection => Err("the RSS table is not a number".into()),
            NicKnob::Ntuple(_) => Err("an n-tuple rule is not a number".into()),
            NicKnob::FlowHash(_) => Err("flow-hash fields are not a number".into()),
            NicKnob::Napi(id, a) => a
                .read(napi_of(s, *id)?)
                .ok_or_else(|| format!("the kernel does not report NAPI {id}'s {a}")),
            NicKnob::Feature(n) => part(&s.features, "features")?
                .get(n)
                .map(|f| u64::from(f.active))
                .ok_or_else(|| format!("the device has no feature {n}")),
            NicKnob::Channels(n) => {
                let mut c = part(&s.channels, "channels")?.clone();
                channel_slot(&mut c, n)?
                    .0
                    .map(u64::from)
                    .ok_or_else(|| format!("the driver reports no {n} channel count"))
            }
            NicKnob::Coalesce(n) => part(&s.coalesce, "coalesce")?
                .get(n)
                .copied()
                .ok_or_else(|| format!("the driver does not report coalesce {n}")),
            NicKnob::Pause(n) => {
                let p = part(&s.pause, "pause")?;
                let v = match n.as_str() {
                    "autoneg" => p.autoneg,
                    "rx" => p.rx,
                    "tx" => p.tx,
                    _ => return Err(format!("no pause parameter {n:?}")),
                };
                v.map(u64::from)
                    .ok_or_else(|| format!("the driver does not report pause {n}"))
            }
            NicKnob::Rings(n) => {
                let r = part(&s.rings, "rings")?;
                let size = |v: Option<u32>| {
                    v.map(u64::from)
                        .ok_or_else(|| format!("the driver does not report the {n} ring size"))
                };
                match n.as_str() {
                    "rx" => size(r.rx),
                    "tx" => size(r.tx),
                    RING_DATA_SPLIT => match r.tcp_data_split {
                        Some(DataSplit::Enabled) => Ok(1),
                        Some(DataSplit::Disabled) => Ok(0),
                        // The kernel sends no attribute for 0 (net/ethtool/rings.c), so this is
                        // a value newer than this build: not known to be off.
                        Some(DataSplit::Unknown) => Err(
                            "the driver reports a header-split state this build does not know"
                                .into(),
                        ),
                        None => Err(NO_DATA_SPLIT.into()),
                    },
                    RING_HDS_THRESH => r
                        .hds_thresh
                        .map(u64::from)
                        .ok_or_else(|| NO_HDS_THRESH.into()),
                    _ => Err(format!("no ring parameter {n:?}")),
                }
            }
        }
    }

    /// The largest value the device accepts, when it says (channels, rings, on/off knobs).
    pub fn limit(&self, s: &NicSettings) -> Option<u64> {
        match self {
            NicKnob::Feature(_) | NicKnob::Pause(_) | NicKnob::Napi(_, NapiAttr::Threaded) => {
                Some(1)
            }
            NicKnob::Channels(n) => {
                let mut c = s.channels.known()?.clone();
                channel_slot(&mut c, n).ok()?.1.map(u64::from)
            }
            NicKnob::Rings(n) => {
                let r = s.rings.known()?;
                match n.as_str() {
                    "rx" => r.rx_max.map(u64::from),
                    "tx" => r.tx_max.map(u64::from),
                    RING_DATA_SPLIT => Some(1),
                    RING_HDS_THRESH => r.hds_thresh_max.map(u64::from),
                    _ => None,
                }
            }
            NicKnob::Napi(_, NapiAttr::DeferHardIrqs) => Some(i32::MAX as u64),
            NicKnob::Coalesce(_)
            | NicKnob::RssIndirection
            | NicKnob::Napi(..)
            | NicKnob::Ntuple(_)
            | NicKnob::FlowHash(_) => None,
        }
    }

    /// False when the driver reports the setting as fixed (`[fixed]` features).
    pub fn changeable(&self, s: &NicSettings) -> bool {
        match self {
            NicKnob::Feature(n) => s
                .features
                .known()
                .and_then(|f| f.get(n))
                .is_some_and(|f| f.changeable),
            _ => self.read(s).is_ok(),
        }
    }

    /// Records a new value given as text, as a tree's NIC state does after a write.
    pub fn store(&self, s: &mut NicSettings, v: &str) -> Result<(), String> {
        if let NicKnob::Ntuple(k) = self {
            let queue = k.parse_rule(v)?;
            let rules = match s.ntuple.as_mut() {
                Some(Field::Known(r)) => r,
                Some(Field::Unknown { unknown }) => {
                    return Err(format!("n-tuple rules: {unknown}"));
                }
                None => return Err("n-tuple rules not recorded in this tree".into()),
            };
            rules.retain(|r| {
                r.flow
                    != NtupleFlow::DstPort {
                        proto: k.proto,
                        port: k.port,
                    }
            });
            if let Some(q) = queue {
                // The first free slot, as a driver without RX_CLS_LOC_ANY needs one chosen.
                let location = (0..)
                    .find(|l| !rules.iter().any(|r| r.location == *l))
                    .unwrap_or(0);
                rules.push(NtupleRule {
                    location,
                    flow: NtupleFlow::DstPort {
                        proto: k.proto,
                        port: k.port,
                    },
                    queue: Some(q),
                });
                rules.sort_by_key(|r| r.location);
            }
            return Ok(());
        }
        if let NicKnob::FlowHash(t) = self {
            check_flow_hash_fields(v)?;
            let map = match s.flow_hash.as_mut() {
                Some(Field::Known(m)) => m,
                Some(Field::Unknown { unknown }) => {
                    return Err(format!("flow-hash fields: {unknown}"));
                }
                None => return Err("flow-hash fields not recorded in this tree".into()),
            };
            let slot = map
                .get_mut(t)
                .ok_or_else(|| format!("the driver does not say what it hashes {t} on"))?;
            *slot = v.trim().to_string();
            return Ok(());
        }
        if *self == NicKnob::RssIndirection {
            let queues = s
                .channels
                .known()
                .and_then(|c| c.combined.filter(|n| *n > 0).or(c.rx))
                .unwrap_or(u32::MAX);
            let rss = part_mut(&mut s.rss, "rss")?;
            // The driver's own table for its rx queues, as the kernel makes it on a reset.
            let table = if v.trim() == INDIRECTION_DEFAULT {
                if queues == u32::MAX {
                    return Err("the rx queue count is not recorded in this tree".into());
                }
                (0..rss.indirection.len() as u32)
                    .map(|i| i % queues)
                    .collect()
            } else {
                parse_indirection(v)?
            };
            if table.len() != rss.indirection.len() {
                return Err(format!(
                    "the table has {} entries, the device's has {}",
                    table.len(),
                    rss.indirection.len()
                ));
            }
            if let Some(q) = table.iter().find(|q| **q >= queues) {
                return Err(format!("queue {q} does not exist ({queues} rx queues)"));
            }
            rss.indirection = table;
            return Ok(());
        }
        let n: u64 = v
            .trim()
            .parse()
            .map_err(|_| format!("{self}: {v:?} is not a number"))?;
        self.store_number(s, n)
    }

    fn store_number(&self, s: &mut NicSettings, v: u64) -> Result<(), String> {
        let too_big = || format!("{self}: {v} does not fit");
        match self {
            NicKnob::RssIndirection | NicKnob::Ntuple(_) | NicKnob::FlowHash(_) => {
                return Err(format!("{self} is not a number"));
            }
            NicKnob::Napi(id, a) => {
                let netdev = s
                    .netdev
                    .as_mut()
                    .ok_or("netdev data not recorded in this tree")?;
                let napi = part_mut(netdev, "netdev")?
                    .napis
                    .iter_mut()
                    .find(|n| n.id == *id)
                    .ok_or_else(|| format!("the device has no NAPI {id} (now)"))?;
                a.store(napi, v)?;
            }
            NicKnob::Feature(n) => {
                let f = part_mut(&mut s.features, "features")?
                    .get_mut(n)
                    .ok_or_else(|| format!("the device has no feature {n}"))?;
                if !f.changeable {
                    return Err(format!("feature {n} is fixed"));
                }
                f.active = v != 0;
            }
            NicKnob::Channels(n) => {
                let c = part_mut(&mut s.channels, "channels")?;
                let (slot, max) = channel_slot(c, n)?;
                let v = u32::try_from(v).map_err(|_| too_big())?;
                if max.is_some_and(|m| v > m) {
                    return Err(format!(
                        "channels {n} {v} is above the maximum {}",
                        max.unwrap_or(0)
                    ));
                }
                *slot = Some(v);
            }
            NicKnob::Coalesce(n) => {
                let c = part_mut(&mut s.coalesce, "coalesce")?;
                let slot = c
                    .get_mut(n)
                    .ok_or_else(|| format!("the driver does not report coalesce {n}"))?;
                *slot = v;
            }
            NicKnob::Pause(n) => {
                let p = part_mut(&mut s.pause, "pause")?;
                let slot = match n.as_str() {
                    "autoneg" => &mut p.autoneg,
                    "rx" => &mut p.rx,
                    "tx" => &mut p.tx,
                    _ => return Err(format!("no pause parameter {n:?}")),
                };
                *slot = Some(v != 0);
            }
            NicKnob::Rings(n) => {
                let r = part_mut(&mut s.rings, "rings")?;
                if n == RING_DATA_SPLIT {
                    if r.tcp_data_split.is_none() {
                        return Err(NO_DATA_SPLIT.into());
                    }
                    r.tcp_data_split = Some(match v {
                        0 => DataSplit::Disabled,
                        1 => DataSplit::Enabled,
                        _ => return Err(format!("{self}: {v} is not 0 (off) or 1 (on)")),
                    });
                    return Ok(());
                }
                let (slot, max) = match n.as_str() {
                    "rx" => (&mut r.rx, r.rx_max),
                    "tx" => (&mut r.tx, r.tx_max),
                    // A tree records no threshold for a driver without one: nothing to set.
                    RING_HDS_THRESH if r.hds_thresh.is_some() => {
                        (&mut r.hds_thresh, r.hds_thresh_max)
                    }
                    RING_HDS_THRESH => return Err(NO_HDS_THRESH.into()),
                    _ => return Err(format!("no ring parameter {n:?}")),
                };
                let v = u32::try_from(v).map_err(|_| too_big())?;
                if max.is_some_and(|m| v > m) {
                    return Err(format!(
                        "rings {n} {v} is above the maximum {}",
                        max.unwrap_or(0)
                    ));
                }
                *slot = Some(v);
            }
        }
        Ok(())
    }
}

/// Flow-hash fields as `ethtool -N rx-flow-hash` letters: m (L2 destination), v (VLAN), t (L3
/// protocol), s/d (IP source/destination), f/n (L4 bytes 0-1 and 2-3: the ports), r (discard).
pub fn check_flow_hash_fields(v: &str) -> Result<(), String> {
    let v = v.trim();
    match v.chars().find(|c| !"mvtsdfnr".contains(*c)) {
        Some(c) => Err(format!(
            "{c:?} in {v:?} is not a flow-hash field (m v t s d f n r)"
        )),
        None if v.is_empty() => Err("no flow-hash fields given".into()),
        None => Ok(()),
    }
}

/// The indirection table of `ethtool -X DEV weight W0 W1 ...` for a table of `size` entries:
/// each queue gets a contiguous run of entries in proportion to its weight (ethtool's
/// fill_indir_table), so `weight 0 1 1 1` keeps queue 0 out of RSS.
pub fn indirection_of_weights(weights: &[u32], size: usize) -> Result<Vec<u32>, String> {
    let sum: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    if sum == 0 {
        return Err("RSS weights: at least one queue needs a weight above 0".into());
    }
    let mut table = Vec::with_capacity(size);
    let (mut partial, mut j) = (0u64, 0usize);
    for i in 0..size as u64 {
        // Entry i goes to the first queue whose cumulative weight share passes it, with
        // ethtool's integer division, so the table is the one `ethtool -X weight` writes.
        while i >= size as u64 * partial / sum {
            partial += u64::from(weights[j]);
            j += 1;
        }
        table.push((j - 1) as u32);
    }
    Ok(table)
}

/// How `ethtool -X` can write `table` again on a device of `queues` rx queues: `equal N`
/// when it is the round-robin table over all of them (entry i → i mod N, ethtool's `equal`),
/// `weight W0 W1 ...` (one weight per queue, smallest whole numbers) when each queue holds one
/// contiguous run in queue order (what `weight` writes); None for any other table.
pub fn ethtool_x_args(table: &[u32], queues: u32) -> Option<String> {
    let n = queues.max(table.iter().max()? + 1);
    if table.iter().enumerate().all(|(i, q)| *q == i as u32 % n) {
        return Some(format!("equal {n}"));
    }
    let mut counts = vec![0u32; n as usize];
    for q in table {
        counts[*q as usize] += 1;
    }
    let gcd = counts.iter().fold(0, |a, &b| {
        let (mut a, mut b) = (a, b);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    });
    let weights: Vec<u32> = counts.iter().map(|c| c / gcd.max(1)).collect();
    (indirection_of_weights(&weights, table.len()).ok()? == table).then(|| {
        let w: Vec<String> = weights.iter().map(u32::to_string).collect();
        format!("weight {}", w.join(" "))
    })
}

/// The value that resets a device's indirection table to the driver's default
/// (`ethtool -X IF default`): the kernel fills it with ethtool_rxfh_indir_default (bucket i on
/// queue i mod the rx queue count) and clears IFF_RXFH_CONFIGURED, the flag that makes it
/// refuse a channel count below the table's highest queue and keeps drivers from re-spreading
/// the table when queues change (net/ethtool/ioctl.c ethtool_set_rxfh_indir).
pub const INDIRECTION_DEFAULT: &str = "default";

/// True when `table` is the layout the kernel gives a device with `queues` rx queues that was
/// never asked to change it: bucket i on queue i mod `queues` (ethtool_rxfh_indir_default).
pub fn is_default_indirection(table: &[u32], queues: u32) -> bool {
    queues > 0
        && !table.is_empty()
        && table
            .iter()
            .enumerate()
            .all(|(i, q)| *q as usize == i % queues as usize)
}

/// True when `table` is the contiguous-block layout igb and igc make for `queues` rx queues
/// when nobody configured one (igb_setup_mrqc: entry j on queue j * queues / size).
pub fn is_block_indirection(table: &[u32], queues: u32) -> bool {
    let size = table.len() as u64;
    queues > 0
        && size > 0
        && table
            .iter()
            .enumerate()
            .all(|(j, q)| u64::from(*q) == j as u64 * u64::from(queues) / size)
}

/// An indirection table written as queue numbers separated by spaces.
pub fn parse_indirection(v: &str) -> Result<Vec<u32>, String> {
    v.split_whitespace()
        .map(|q| {
            q.parse::<u32>()
                .map_err(|_| format!("RSS table entry {q:?} is not a queue number"))
        })
        .collect::<Result<Vec<u32>, String>>()
        .and_then(|t| {
            if t.is_empty() {
                Err("an empty RSS table".into())
            } else {
                Ok(t)
            }
        })
}

/// The one text form of a tree's `ethtool.json`: keys sorted at every level, two-space indent,
/// a final newline. A tree written this way reads back and writes out byte for byte, which is
/// what lets `tune apply` then `rollback` leave a tree exactly as it was.
pub fn tree_ethtool_text(e: &TreeEthtool) -> String {
    // serde_json's Value keeps object keys in a BTreeMap (no `preserve_order` feature here),
    // so going through it sorts them.
    let value = serde_json::to_value(e).unwrap_or_default();
    serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_rings(rings: Rings) -> NicSettings {
        NicSettings {
            channels: Field::unknown("not read"),
            rings: Field::Known(rings),
            features: Field::unknown("not read"),
            coalesce: Field::unknown("not read"),
            pause: Field::unknown("not read"),
            rss: Field::unknown("not read"),
            link_kind: None,
            netdev: None,
            ntuple: None,
            flow_hash: None,
            interfaces: Vec::new(),
        }
    }

    #[test]
    fn header_split_is_a_switch_only_where_the_driver_reports_it() {
        let split = NicKnob::Rings(RING_DATA_SPLIT.into());
        let thresh = NicKnob::Rings(RING_HDS_THRESH.into());
        let mut s = with_rings(Rings {
            rx: Some(1024),
            tcp_data_split: Some(DataSplit::Disabled),
            hds_thresh: Some(0),
            hds_thresh_max: Some(1024),
            ..Rings::default()
        });
        assert_eq!(split.read(&s).unwrap(), "0");
        assert_eq!((split.limit(&s), thresh.limit(&s)), (Some(1), Some(1024)));
        split.store(&mut s, "1").unwrap();
        thresh.store(&mut s, "256").unwrap();
        let r = s.rings.known().unwrap();
        assert_eq!(r.tcp_data_split, Some(DataSplit::Enabled));
        assert_eq!((r.hds_thresh, r.rx), (Some(256), Some(1024)));
        assert_eq!(split.read(&s).unwrap(), "1");
        // Bad values change nothing.
        assert!(
            split
                .store(&mut s, "2")
                .unwrap_err()
                .contains("0 (off) or 1 (on)")
        );
        assert_eq!(
            s.rings.known().unwrap().tcp_data_split,
            Some(DataSplit::Enabled)
        );
        assert!(
            thresh
                .store(&mut s, "2048")
                .unwrap_err()
                .contains("maximum 1024")
        );
        assert_eq!(s.rings.known().unwrap().hds_thresh, Some(256));
        // A driver that reports neither (virtio-net, igb, veth): refused with the reason, and
        // a tree records nothing it never had.
        let mut plain = with_rings(Rings {
            rx: Some(256),
            ..Rings::default()
        });
        assert_eq!(split.read(&plain).unwrap_err(), NO_DATA_SPLIT);
        assert!(
            thresh
                .read(&plain)
                .unwrap_err()
                .contains("no header-split threshold")
        );
        assert_eq!(split.store(&mut plain, "1").unwrap_err(), NO_DATA_SPLIT);
        assert!(thresh.store(&mut plain, "0").is_err());
        assert_eq!(plain.rings.known().unwrap().tcp_data_split, None);
        // A state newer than this build is not taken for "off".
        let odd = with_rings(Rings {
            tcp_data_split: Some(DataSplit::Unknown),
            ..Rings::default()
        });
        assert!(split.read(&odd).is_err());
    }

    #[test]
    fn the_default_layout_is_bucket_i_on_queue_i_mod_the_count() {
        assert!(is_default_indirection(&[0, 1, 0, 1, 0, 1], 2));
        assert!(is_default_indirection(&[0, 1, 2, 3, 0, 1, 2, 3], 4));
        assert!(is_default_indirection(&[0, 0, 0], 1));
        // Two queues' layout on a four-queue device was written by someone.
        assert!(!is_default_indirection(&[0, 1, 0, 1], 4));
        // Equal shares in another order, a skew and an empty table are not it.
        assert!(!is_default_indirection(&[0, 0, 1, 1], 2));
        assert!(!is_default_indirection(&[1, 0, 1, 0], 2));
        assert!(!is_default_indirection(&[0, 1, 0, 0], 2));
        assert!(!is_default_indirection(&[], 2));
        assert!(!is_default_indirection(&[0, 0], 0));
        // igb's own: contiguous blocks.
        assert!(is_block_indirection(&[0, 0, 1, 1], 2));
        assert!(is_block_indirection(&[0, 0, 0, 1, 1, 1, 2, 2, 2], 3));
        assert!(!is_block_indirection(&[0, 1, 0, 1], 2));
        assert!(!is_block_indirection(&[0, 0, 1, 1], 4));
        assert!(!is_block_indirection(&[], 2));
    }

    #[test]
    fn weights_give_the_table_ethtool_writes() {
        assert_eq!(indirection_of_weights(&[1, 0], 8).unwrap(), [0; 8]);
        assert_eq!(indirection_of_weights(&[0, 1], 8).unwrap(), [1; 8]);
        let t = indirection_of_weights(&[1, 1, 1], 128).unwrap();
        let count = |q: u32| t.iter().filter(|x| **x == q).count();
        // ethtool 6.1: entries 0-41 → 0, 42-84 → 1, 85-127 → 2.
        assert_eq!((count(0), count(1), count(2)), (42, 43, 43));
        assert_eq!((t[41], t[42], t[84], t[85]), (0, 1, 1, 2));
        // Seed 000: weight 1 1 1 1 1 1 0 0 0 0 0 keeps queues 6-10 out of RSS.
        let t = indirection_of_weights(&[1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], 128).unwrap();
        assert!(t.iter().all(|q| *q < 6));
        assert!(indirection_of_weights(&[0, 0], 8).is_err());
    }

    #[test]
    fn a_table_is_written_again_as_ethtool_would() {
        let rr: Vec<u32> = (0..128).map(|i| i % 4).collect();
        assert_eq!(ethtool_x_args(&rr, 4).as_deref(), Some("equal 4"));
        // The same table on a device with more queues leaves them out: weights.
        assert_eq!(ethtool_x_args(&rr, 8), None);
        let blocks = indirection_of_weights(&[1, 0, 1], 128).unwrap();
        assert_eq!(ethtool_x_args(&blocks, 3).as_deref(), Some("weight 1 0 1"));
        assert_eq!(
            ethtool_x_args(&[0; 128], 2).as_deref(),
            Some("weight 1 0"),
            "every bucket on queue 0 of two"
        );
        assert_eq!(ethtool_x_args(&[1, 0, 1, 0, 0], 2), None);
    }

    #[test]
    fn flow_hash_fields_are_ethtools_letters() {
        assert!(check_flow_hash_fields("sdfn").is_ok());
        assert!(check_flow_hash_fields("sd").is_ok());
        assert!(check_flow_hash_fields("sdx").unwrap_err().contains("'x'"));
        assert!(check_flow_hash_fields(" ").is_err());
    }
}
