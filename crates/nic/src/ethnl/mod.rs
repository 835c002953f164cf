//! ethtool generic netlink GET and SET requests, one module per message. Message and attribute numbers
//! are our own table (include/uapi/linux/ethtool_netlink.h): Debian 12's 6.1 headers lack
//! RSS_GET, and the system headers must not decide what we can ask a newer kernel.

mod channels;
mod coalesce;
mod features;
pub mod monitor;
mod pause;
mod rings;
mod rss;

use crate::attr;
use crate::genl::{self, Family};
use crate::socket::NlSocket;
use crate::{NicBackend, NicError};
use netsteer_host::ethtool::{NicKnob, NicSettings};
use netsteer_host::field::Field;
use netsteer_host::netdev::NapiAttr;
use std::cell::RefCell;

/// Every ethtool request starts with a header nest (attribute 1) naming the device.
const A_HEADER: u16 = 1;
const A_HEADER_DEV_NAME: u16 = 2;
const A_HEADER_FLAGS: u16 = 3;
/// ETHTOOL_FLAG_OMIT_REPLY: a SET need not echo what it changed; the ACK is the answer.
const FLAG_OMIT_REPLY: u32 = 1 << 1;

/// The name of an ETH_RSS_HASH_* bitmask (ethtool.h: bit 0 toeplitz, 1 xor, 2 crc32); 0 is
/// "none reported".
pub(crate) fn hfunc_name(h: u32) -> Option<String> {
    Some(
        match h {
            0 => return None,
            1 => "toeplitz",
            2 => "xor",
            4 => "crc32",
            _ => "unknown",
        }
        .to_string(),
    )
}

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
    ethtool: Family,
    /// The netdev family, when the kernel has it (6.3+).
    netdev: Option<Family>,
    /// The namespace's page pools as last dumped, and when: a pass over every device reads
    /// them once (the dumps cannot be filtered by device), and a pass a second later anew.
    pools: RefCell<Option<(std::time::Instant, std::rc::Rc<crate::netdev::AllPools>)>>,
}

/// How long one dump of the page pools serves the devices asked about after it.
const POOLS_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// ETHTOOL_MSG_* numbers whose presence differs between the kernels users run.
const RSS_GET: u8 = rss::CMD;
const RSS_SET: u8 = rss::CMD_SET;

/// Why the netdev family cannot describe NAPIs on this kernel, if it cannot.
fn netdev_lacks(netdev: Option<&Family>) -> Option<&'static str> {
    use crate::netdev::{napi, queue};
    match netdev {
        None => Some(
            "the kernel has no netdev netlink family (Linux 6.3+): NAPI ids, queue links and per-NAPI settings unknown; the device-wide NAPI settings come from sysfs",
        ),
        Some(f) if !f.has(napi::CMD) || !f.has(queue::CMD) => Some(
            "this kernel's netdev netlink has no NAPI_GET/QUEUE_GET (Linux 6.8+): NAPI ids and queue links unknown; the device-wide NAPI settings come from sysfs",
        ),
        Some(_) => None,
    }
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Netlink(ethtool family {})", self.ethtool.id)
    }
}

impl Netlink {
    pub fn open() -> Result<Netlink, NicError> {
        let mut sock = NlSocket::generic().map_err(NicError::Socket)?;
        let ethtool = genl::family(&mut sock, "ethtool")?;
        // Kernels before 6.3 have no netdev family; its parts are then unknown with the reason.
        let netdev = genl::family(&mut sock, "netdev").ok();
        Ok(Netlink {
            sock: RefCell::new(sock),
            route: NlSocket::route().ok().map(RefCell::new),
            ethtool,
            netdev,
            pools: RefCell::new(None),
        })
    }

    /// The netdev family, or the reason a kernel without it gives no answer.
    fn netdev_family(&self) -> Result<&Family, &'static str> {
        self.netdev
            .as_ref()
            .ok_or("the kernel has no netdev netlink family (Linux 6.3+)")
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

    /// Every page pool of the namespace, dumped at most once per [`POOLS_FRESH`].
    fn all_pools(
        &self,
        sock: &mut NlSocket,
        family: &Family,
    ) -> std::rc::Rc<crate::netdev::AllPools> {
        let mut cached = self.pools.borrow_mut();
        if let Some((at, all)) = cached.as_ref()
            && at.elapsed() < POOLS_FRESH
        {
            return all.clone();
        }
        let all = std::rc::Rc::new(crate::netdev::dump_page_pools(sock, family));
        *cached = Some((std::time::Instant::now(), all.clone()));
        all
    }

    /// NAPIs, queues and counters of the device with this index.
    fn netdev(&self, ifindex: u32) -> Field<netsteer_host::netdev::Netdev> {
        if let Some(why) = netdev_lacks(self.netdev.as_ref()) {
            return Field::unknown(why);
        }
        let Some(family) = self.netdev.as_ref() else {
            return Field::unknown("no netdev family");
        };
        let mut sock = self.sock.borrow_mut();
        match crate::netdev::read(&mut sock, family.id, ifindex) {
            Ok(mut n) => {
                let all = self.all_pools(&mut sock, family);
                n.page_pools = Some(crate::netdev::pools_of(&all, ifindex));
                Field::Known(n)
            }
            Err(e) => Field::unknown(e),
        }
    }

    /// The RSS table, key and function: ETHTOOL_MSG_RSS_GET, or the ETHTOOL_GRSSH ioctl on a
    /// kernel without it (noted in `interfaces`).
    fn rss(&self, dev: &str, interfaces: &mut Vec<String>) -> Field<netsteer_host::ethtool::Rss> {
        if self.ethtool.has(RSS_GET) {
            return self.field(dev, "rss-get", rss::CMD, rss::parse);
        }
        match crate::rxfh::read(dev) {
            Ok(r) => {
                interfaces.push(
                    "rss: read over the ETHTOOL_GRSSH ioctl: this kernel's ethtool netlink has no RSS_GET (Linux 6.2+)".into(),
                );
                Field::Known(r)
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                Field::unknown("ETHTOOL_GRSSH: the driver has no RSS table (EOPNOTSUPP)")
            }
            Err(e) => Field::unknown(format!("ETHTOOL_GRSSH: {e}")),
        }
    }

    /// What each flow type is hashed on (ETHTOOL_GRXFH; ethtool netlink carries it only from
    /// Linux 6.17, inside RSS_GET). Flow types the driver does not answer for are left out.
    fn flow_hash(&self, dev: &str) -> Field<std::collections::BTreeMap<String, String>> {
        let mut m = std::collections::BTreeMap::new();
        let mut first_err = None;
        for (name, _) in crate::rxfh::FLOW_TYPES {
            match crate::rxfh::read_flow_hash(dev, name) {
                Ok(fields) => {
                    m.insert(name.to_string(), fields);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if m.is_empty() && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                Field::unknown(
                    "ETHTOOL_GRXFH: the driver does not say what RSS hashes on (EOPNOTSUPP)",
                )
            }
            Some(e) if m.is_empty() => Field::unknown(format!("ETHTOOL_GRXFH: {e}")),
            _ => Field::Known(m),
        }
    }

    /// One GET for one device; returns the reply's attributes (raw bytes).
    fn get(&self, dev: &str, request: &'static str, cmd: u8) -> Result<Vec<u8>, NicError> {
        let a = header(dev, 0);
        let replies = self
            .sock
            .borrow_mut()
            .request(self.ethtool.id, cmd, &a)
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
            .request_ack(self.ethtool.id, cmd, &a)
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
        let nd = self.netdev_family().map_err(|w| refused(w.into()))?;
        if !nd.has(crate::netdev::napi::CMD_SET) {
            return Err(refused(
                "this kernel has no NETDEV_CMD_NAPI_SET (Linux 6.13+): per-NAPI settings cannot be set; the device-wide sysfs files (gro_flush_timeout, napi_defer_hard_irqs) apply to every NAPI".into(),
            ));
        }
        if !nd.has(crate::netdev::napi::CMD) {
            return Err(refused(
                "this kernel's netdev netlink has no NAPI_GET (Linux 6.8+)".into(),
            ));
        }
        let family = nd.id;
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
                // EOPNOTSUPP keeps its errno: tune reports a driver's refusal as a skip, not a
                // failure that undoes the rest.
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
            NicKnob::FlowHash(flow) => {
                netsteer_host::ethtool::check_flow_hash_fields(text).map_err(bad)?;
                return crate::rxfh::set_flow_hash(dev, flow, text.trim()).map_err(|source| {
                    NicError::Os {
                        dev: dev.to_string(),
                        request: "SIOCETHTOOL ETHTOOL_SRXFH",
                        source,
                    }
                });
            }
            NicKnob::RssIndirection => {
                // An empty table is the reset both interfaces define: ETHTOOL_SRXFHINDIR with
                // size 0, and RSS_SET with an empty ETHTOOL_A_RSS_INDIR.
                let table = if text.trim() == netsteer_host::ethtool::INDIRECTION_DEFAULT {
                    Vec::new()
                } else {
                    netsteer_host::ethtool::parse_indirection(text).map_err(bad)?
                };
                if !self.ethtool.has(RSS_SET) {
                    // Kernels before RSS_SET netlink: the ioctl `ethtool -X` itself uses.
                    return crate::rxfh::set_indir(dev, &table).map_err(|source| NicError::Os {
                        dev: dev.to_string(),
                        request: "SIOCETHTOOL ETHTOOL_SRXFHINDIR",
                        source,
                    });
                }
                ("rss-set", rss::CMD_SET, rss::set(&table))
            }
        };
        Netlink::set(self, dev, request, cmd, &body)
    }

    fn page_pools(
        &self,
    ) -> Result<netsteer_host::netdev::PagePools, netsteer_host::netdev::PoolsError> {
        let family = self
            .netdev_family()
            .map_err(|e| netsteer_host::netdev::PoolsError::NotKept(e.into()))?;
        crate::netdev::dump_page_pools(&mut self.sock.borrow_mut(), family).list()
    }

    /// One QUEUE_GET dump, not every setting of the device.
    fn rx_queues_by_napi(&self, dev: &str) -> Result<std::collections::BTreeMap<u32, u32>, String> {
        let family = self.netdev_family()?;
        let link = self.link(dev)?;
        let qs = crate::netdev::queues(&mut self.sock.borrow_mut(), family.id, link.index)?;
        Ok(netsteer_host::netdev::rx_queues_by_napi(&qs))
    }

    fn queue_stats(&self, dev: &str) -> Result<Vec<netsteer_host::netdev::QueueStats>, String> {
        let family = self.netdev_family()?;
        if !family.has(crate::netdev::qstats::CMD) {
            return Ok(Vec::new());
        }
        let link = self.link(dev)?;
        crate::netdev::queue_stats(&mut self.sock.borrow_mut(), family.id, link.index)
    }

    fn settings(&self, dev: &str) -> NicSettings {
        let link = self.link(dev);
        let mut interfaces = Vec::new();
        let rss = self.rss(dev, &mut interfaces);
        // (A kernel without NAPI_GET says so in the netdev part's reason.)
        if netdev_lacks(self.netdev.as_ref()).is_none()
            && self
                .netdev
                .as_ref()
                .is_some_and(|f| !f.has(crate::netdev::napi::CMD_SET))
        {
            interfaces.push("napi: this kernel has no NETDEV_CMD_NAPI_SET (Linux 6.13+): per-NAPI settings are skipped; the device-wide sysfs files apply to every NAPI".into());
        }
        NicSettings {
            channels: self.field(dev, "channels-get", channels::CMD, channels::parse),
            rings: self.field(dev, "rings-get", rings::CMD, rings::parse),
            features: self.field(dev, "features-get", features::CMD, features::parse),
            coalesce: self.field(dev, "coalesce-get", coalesce::CMD, coalesce::parse),
            pause: self.field(dev, "pause-get", pause::CMD, pause::parse),
            rss,
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
            flow_hash: Some(self.flow_hash(dev)),
            interfaces,
        }
    }
}
