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
            _ => self.read_number(s).map(|v| v.to_string()),
        }
    }

    /// The current value of a numeric knob.
    pub fn read_number(&self, s: &NicSettings) -> Result<u64, String> {
        match self {
            NicKnob::RssIndirection => Err("the RSS table is not a number".into()),
            NicKnob::Ntuple(_) => Err("an n-tuple rule is not a number".into()),
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
                let v = match n.as_str() {
                    "rx" => r.rx,
                    "tx" => r.tx,
                    _ => return Err(format!("no ring parameter {n:?}")),
                };
                v.map(u64::from)
                    .ok_or_else(|| format!("the driver does not report the {n} ring size"))
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
                    _ => None,
                }
            }
            NicKnob::Napi(_, NapiAttr::DeferHardIrqs) => Some(i32::MAX as u64),
            NicKnob::Coalesce(_)
            | NicKnob::RssIndirection
            | NicKnob::Napi(..)
            | NicKnob::Ntuple(_) => None,
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
        if *self == NicKnob::RssIndirection {
            let table = parse_indirection(v)?;
            let queues = s
                .channels
                .known()
                .and_then(|c| c.combined.filter(|n| *n > 0).or(c.rx))
                .unwrap_or(u32::MAX);
            let rss = part_mut(&mut s.rss, "rss")?;
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
            NicKnob::RssIndirection | NicKnob::Ntuple(_) => {
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
                let (slot, max) = match n.as_str() {
                    "rx" => (&mut r.rx, r.rx_max),
                    "tx" => (&mut r.tx, r.tx_max),
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
