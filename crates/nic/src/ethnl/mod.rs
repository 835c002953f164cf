//! ethtool generic netlink GET and SET requests, one module per message. Message and attribute numbers
//! are our own table (include/uapi/linux/ethtool_netlink.h): Debian 12's 6.1 headers lack
//! RSS_GET, and the system headers must not decide what we can ask a newer kernel.

mod channels;
mod coalesce;
mod features;
mod pause;
mod rings;
mod rss;

use crate::attr;
use crate::socket::NlSocket;
use crate::{NicBackend, NicError};
use netsteer_host::ethtool::{NicKnob, NicSettings};
use netsteer_host::field::Field;
use netsteer_host::netdev::NapiAttr;
use std::cell::RefCell;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// Every ethtool request starts with a header nest (attribute 1) naming the device.
const A_HEADER: u16 = 1;
const A_HEADER_DEV_NAME: u16 = 2;
const A_HEADER_FLAGS: u16 = 3;
/// ETHTOOL_FLAG_OMIT_REPLY: a SET need not echo what it changed; the ACK is the answer.
const FLAG_OMIT_REPLY: u32 = 1 << 1;

fn header(dev: &str, flags: u32) -> Vec<u8> {
    let mut header = Vec::new();
    attr::put_str(&mut header, A_HEADER_DEV_NAME, dev);
    if flags != 0 {
        attr::put(&mut header, A_HEADER_FLAGS, &flags.to_ne_bytes());
    }
    let mut a = Vec::new();
    attr::put(&mut a, A_HEADER | attr::NLA_F_NESTED, &header);
    a
}

/// The live kernel over ethtool netlink.
pub struct Netlink {
    sock: RefCell<NlSocket>,
    /// rtnetlink, for the link's kind (None when it could not be opened; the kind is then
    /// left to sysfs).
    route: Option<RefCell<NlSocket>>,
    family: u16,
    /// The netdev family's id, when the kernel has it.
    netdev: Option<u16>,
}

/// Resolves a generic netlink family's id by name (CTRL_CMD_GETFAMILY).
fn family_id(sock: &mut NlSocket, name: &'static str) -> Result<u16, NicError> {
    let mut a = Vec::new();
    attr::put_str(&mut a, CTRL_ATTR_FAMILY_NAME, name);
    let replies = sock
        .request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &a)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => NicError::NoFamily(name),
            _ => NicError::Socket(e),
        })?;
    replies
        .iter()
        .filter_map(|r| attr::parse(r).ok())
        .find_map(|attrs| attr::find(&attrs, CTRL_ATTR_FAMILY_ID).and_then(attr::u16_of))
        .ok_or(NicError::NoFamily(name))
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Netlink(ethtool family {})", self.family)
    }
}

impl Netlink {
    pub fn open() -> Result<Netlink, NicError> {
        let mut sock = NlSocket::generic().map_err(NicError::Socket)?;
        let family = family_id(&mut sock, "ethtool")?;
        // Kernels before 6.1 have no netdev family; its parts are then unknown with the reason.
        let netdev = family_id(&mut sock, "netdev").ok();
        Ok(Netlink {
            sock: RefCell::new(sock),
            route: NlSocket::route().ok().map(RefCell::new),
            family,
            netdev,
        })
    }

    /// The link's ifindex and kind over rtnetlink.
    fn link(&self, dev: &str) -> Result<crate::rtnl::link::Link, String> {
        use crate::rtnl::link;
        let route = self
            .route
            .as_ref()
            .ok_or("no rtnetlink socket could be opened")?;
        let replies = route
            .borrow_mut()
            .route_request(link::RTM_GETLINK, &link::ifinfomsg(0), &link::get(dev))
            .map_err(|e| format!("RTM_GETLINK {dev}: {e}"))?;
        link::parse(replies.first().ok_or("RTM_GETLINK: no reply")?)
    }

    /// NAPIs, queues and counters of the device with this index.
    fn netdev(&self, ifindex: u32) -> Field<netsteer_host::netdev::Netdev> {
        let Some(family) = self.netdev else {
            return Field::unknown("the kernel has no netdev netlink family (before 6.1)");
        };
        crate::netdev::read(&mut self.sock.borrow_mut(), family, ifindex).into()
    }

    /// One GET for one device; returns the reply's attributes (raw bytes).
    fn get(&self, dev: &str, request: &'static str, cmd: u8) -> Result<Vec<u8>, NicError> {
        let a = header(dev, 0);
        let replies = self
            .sock
            .borrow_mut()
            .request(self.family, cmd, &a)
            .map_err(|source| NicError::Os {
                dev: dev.to_string(),
                request,
                source,
            })?;
        replies.into_iter().next().ok_or(NicError::Malformed {
            request,
            reason: "no reply".into(),
        })
    }

    fn field<T>(
        &self,
        dev: &str,
        request: &'static str,
        cmd: u8,
        parse: fn(&[u8]) -> Result<T, String>,
    ) -> Field<T> {
        match self.get(dev, request, cmd) {
            Ok(bytes) => parse(&bytes)
                .map_err(|reason| NicError::Malformed { request, reason })
                .into(),
            Err(NicError::Os { source, .. }) if source.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                Field::unknown(format!(
                    "{request}: not supported by the driver (EOPNOTSUPP)"
                ))
            }
            Err(e) => Field::unknown(e),
        }
    }
}

impl Netlink {
    /// One SET for one device: the header, then the message's own attributes.
    fn set(&self, dev: &str, request: &'static str, cmd: u8, body: &[u8]) -> Result<(), NicError> {
        let mut a = header(dev, FLAG_OMIT_REPLY);
        a.extend_from_slice(body);
        self.sock
            .borrow_mut()
            .request_ack(self.family, cmd, &a)
            .map_err(|source| NicError::Os {
                dev: dev.to_string(),
                request,
                source,
            })
    }
}

impl Netlink {
    /// NAPI_SET, only for a NAPI the device has now: ids are global and a NAPI that went away
    /// (channels changed) may come back under the same id on another device.
    fn napi_set(&self, dev: &str, id: u32, a: NapiAttr, v: u64) -> Result<(), NicError> {
        let refused = |reason: String| NicError::Refused {
            dev: dev.to_string(),
            knob: format!("napi {id} {a}"),
            reason,
        };
        let family = self
            .netdev
            .ok_or_else(|| refused("the kernel has no netdev netlink family".into()))?;
        let link = self.link(dev).map_err(refused)?;
        // Only the NAPI list is needed to know the id is this device's.
        let napis = crate::netdev::napis(&mut self.sock.borrow_mut(), family, link.index)
            .map_err(refused)?;
        if !napis.iter().any(|n| n.id == id) {
            return Err(refused(format!("{dev} has no NAPI {id} (now)")));
        }
        let body = crate::netdev::napi::set(id, a, v).map_err(refused)?;
        self.sock
            .borrow_mut()
            .request_ack(family, crate::netdev::napi::CMD_SET, &body)
            .map_err(|source| NicError::Os {
                dev: dev.to_string(),
                request: "napi-set",
                source,
            })
    }
}

/// What a device without receive classification answers (EOPNOTSUPP), in words.
const NO_NTUPLE: &str = "this device has no n-tuple filters (ETHTOOL_GRXCLSRLCNT: EOPNOTSUPP)";

enum NtupleError {
    Bad(String),
    Os(std::io::Error),
}

/// Makes `dev`'s rule for `key` what `text` says: the old one (if any) goes, the new one (if
/// any) is inserted.
fn ntuple_set(
    dev: &str,
    key: netsteer_host::netdev::NtupleKey,
    text: &str,
) -> Result<(), NtupleError> {
    let queue = key.parse_rule(text).map_err(NtupleError::Bad)?;
    let mut table = crate::rxnfc::read_rules(dev).map_err(NtupleError::Os)?;
    if let Some(old) = key.find(&table.rules).cloned() {
        if old.queue == queue {
            return Ok(());
        }
        crate::rxnfc::delete(dev, old.location).map_err(NtupleError::Os)?;
        table.rules.retain(|r| r.location != old.location);
    }
    if let Some(q) = queue {
        crate::rxnfc::insert(dev, &table, key, q).map_err(NtupleError::Os)?;
    }
    Ok(())
}

impl NicBackend for Netlink {
    fn set(&self, dev: &str, knob: &NicKnob, text: &str) -> Result<(), NicError> {
        let bad = |reason: String| NicError::Refused {
            dev: dev.to_string(),
            knob: knob.to_string(),
            reason,
        };
        let num = || -> Result<u64, NicError> {
            text.trim()
                .parse()
                .map_err(|_| bad(format!("{text:?} is not a number")))
        };
        if let NicKnob::Napi(id, a) = knob {
            return self.napi_set(dev, *id, *a, num()?);
        }
        if let NicKnob::Ntuple(k) = knob {
            return ntuple_set(dev, *k, text).map_err(|e| match e {
                NtupleError::Bad(reason) => bad(reason),
                NtupleError::Os(source) if source.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    bad(NO_NTUPLE.into())
                }
                NtupleError::Os(source) => NicError::Os {
                    dev: dev.to_string(),
                    request: "SIOCETHTOOL rx classification",
                    source,
                },
            });
        }
        let (request, cmd, body) = match knob {
            NicKnob::Napi(..) | NicKnob::Ntuple(_) => unreachable!("handled above"),
            NicKnob::Feature(n) => (
                "features-set",
                features::CMD_SET,
                features::set(n, num()? != 0),
            ),
            NicKnob::Channels(n) => (
                "channels-set",
                channels::CMD_SET,
                channels::set(n, num()?).map_err(bad)?,
            ),
            NicKnob::Coalesce(n) => (
                "coalesce-set",
                coalesce::CMD_SET,
                coalesce::set(n, num()?).map_err(bad)?,
            ),
            NicKnob::Pause(n) => (
                "pause-set",
                pause::CMD_SET,
                pause::set(n, num()? != 0).map_err(bad)?,
            ),
            NicKnob::Rings(n) => (
                "rings-set",
                rings::CMD_SET,
                rings::set(n, num()?).map_err(bad)?,
            ),
            NicKnob::RssIndirection => {
                let table = netsteer_host::ethtool::parse_indirection(text).map_err(bad)?;
                ("rss-set", rss::CMD_SET, rss::set(&table))
            }
        };
        Netlink::set(self, dev, request, cmd, &body)
    }

    fn queue_stats(&self, dev: &str) -> Result<Vec<netsteer_host::netdev::QueueStats>, String> {
        let family = self
            .netdev
            .ok_or("the kernel has no netdev netlink family (before 6.1)")?;
        let link = self.link(dev)?;
        crate::netdev::queue_stats(&mut self.sock.borrow_mut(), family, link.index)
    }

    fn settings(&self, dev: &str) -> NicSettings {
        let link = self.link(dev);
        NicSettings {
            channels: self.field(dev, "channels-get", channels::CMD, channels::parse),
            rings: self.field(dev, "rings-get", rings::CMD, rings::parse),
            features: self.field(dev, "features-get", features::CMD, features::parse),
            coalesce: self.field(dev, "coalesce-get", coalesce::CMD, coalesce::parse),
            pause: self.field(dev, "pause-get", pause::CMD, pause::parse),
            rss: self.field(dev, "rss-get", rss::CMD, rss::parse),
            link_kind: link.as_ref().ok().and_then(|l| l.kind.clone()),
            netdev: Some(match &link {
                Ok(l) => self.netdev(l.index),
                Err(e) => Field::unknown(e),
            }),
            ntuple: Some(match crate::rxnfc::read_rules(dev) {
                Ok(table) => Field::Known(table.rules),
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Field::unknown(NO_NTUPLE),
                Err(e) => Field::unknown(format!("SIOCETHTOOL GRXCLSRLALL: {e}")),
            }),
        }
    }
}
