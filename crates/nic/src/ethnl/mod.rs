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
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Netlink(ethtool family {})", self.family)
    }
}

impl Netlink {
    pub fn open() -> Result<Netlink, NicError> {
        let mut sock = NlSocket::generic().map_err(NicError::Socket)?;
        let mut a = Vec::new();
        attr::put_str(&mut a, CTRL_ATTR_FAMILY_NAME, "ethtool");
        let replies = sock
            .request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &a)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => NicError::NoFamily("ethtool"),
                _ => NicError::Socket(e),
            })?;
        let family = replies
            .iter()
            .filter_map(|r| attr::parse(r).ok())
            .find_map(|attrs| attr::find(&attrs, CTRL_ATTR_FAMILY_ID).and_then(attr::u16_of))
            .ok_or(NicError::NoFamily("ethtool"))?;
        Ok(Netlink {
            sock: RefCell::new(sock),
            route: NlSocket::route().ok().map(RefCell::new),
            family,
        })
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
        let (request, cmd, body) = match knob {
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

    fn settings(&self, dev: &str) -> NicSettings {
        NicSettings {
            channels: self.field(dev, "channels-get", channels::CMD, channels::parse),
            rings: self.field(dev, "rings-get", rings::CMD, rings::parse),
            features: self.field(dev, "features-get", features::CMD, features::parse),
            coalesce: self.field(dev, "coalesce-get", coalesce::CMD, coalesce::parse),
            pause: self.field(dev, "pause-get", pause::CMD, pause::parse),
            rss: self.field(dev, "rss-get", rss::CMD, rss::parse),
            link_kind: self.route.as_ref().and_then(|r| {
                let replies = r
                    .borrow_mut()
                    .route_request(
                        crate::rtnl::link::RTM_GETLINK,
                        &crate::rtnl::link::ifinfomsg(0),
                        &crate::rtnl::link::get(dev),
                    )
                    .ok()?;
                crate::rtnl::link::parse_kind(replies.first()?).ok()?
            }),
        }
    }
}
