//! ethtool generic netlink GET requests, one module per message. Message and attribute numbers
//! are our own table (include/uapi/linux/ethtool_netlink.h): Debian 12's 6.1 headers lack
//! RSS_GET, and the system headers must not decide what we can ask a newer kernel.

mod attr;
mod channels;
mod coalesce;
mod features;
mod pause;
mod rings;
mod rss;

use crate::socket::GenlSocket;
use crate::{NicBackend, NicError};
use netsteer_host::ethtool::NicSettings;
use netsteer_host::field::Field;
use std::cell::RefCell;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// Every ethtool request starts with a header nest (attribute 1) naming the device.
const A_HEADER: u16 = 1;
const A_HEADER_DEV_NAME: u16 = 2;

/// The live kernel over ethtool netlink.
pub struct Netlink {
    sock: RefCell<GenlSocket>,
    family: u16,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Netlink(ethtool family {})", self.family)
    }
}

impl Netlink {
    pub fn open() -> Result<Netlink, NicError> {
        let mut sock = GenlSocket::open().map_err(NicError::Socket)?;
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
            family,
        })
    }

    /// One GET for one device; returns the reply's attributes (raw bytes).
    fn get(&self, dev: &str, request: &'static str, cmd: u8) -> Result<Vec<u8>, NicError> {
        let mut header = Vec::new();
        attr::put_str(&mut header, A_HEADER_DEV_NAME, dev);
        let mut a = Vec::new();
        attr::put(&mut a, A_HEADER | attr::NLA_F_NESTED, &header);
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

impl NicBackend for Netlink {
    fn settings(&self, dev: &str) -> NicSettings {
        NicSettings {
            channels: self.field(dev, "channels-get", channels::CMD, channels::parse),
            rings: self.field(dev, "rings-get", rings::CMD, rings::parse),
            features: self.field(dev, "features-get", features::CMD, features::parse),
            coalesce: self.field(dev, "coalesce-get", coalesce::CMD, coalesce::parse),
            pause: self.field(dev, "pause-get", pause::CMD, pause::parse),
            rss: self.field(dev, "rss-get", rss::CMD, rss::parse),
        }
    }
}
