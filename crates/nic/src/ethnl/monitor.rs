//! ethtool netlink's `monitor` multicast group: the notifications the kernel sends when a
//! device's settings change, whoever changed them (`ethnl_notify`, net/ethtool/netlink.c).
//! Numbers from include/uapi/linux/ethtool_netlink_generated.h (7.3), our own table as for
//! the requests.
//!
//! Which changes are announced depends on the kernel: channels, rings, coalescing and
//! features since 5.6 (the netlink SETs, and the ioctls through `ethtool_notify`); the RSS
//! indirection table, hash key and function and the flow hashes only since 6.17
//! (`ETHTOOL_MSG_RSS_NTF`, sent by the netlink RSS_SET and by the ioctls `ETHTOOL_SRSSH`
//! and `ETHTOOL_SRXFH`, `ethtool_rss_notify`), with additional contexts' creation and
//! deletion (`RSS_CREATE_NTF`, `RSS_DELETE_NTF`, also when a driver loses one). The kernel
//! does not say who made a change: a notification's netlink port is the kernel's own.

use super::A_HEADER;
use crate::NicError;
use crate::attr;
use crate::genl::Family;
use crate::socket::NlSocket;
use std::time::Duration;

/// ETHTOOL_MCGRP_MONITOR_NAME.
pub const GROUP: &str = "monitor";

/// enum ETHTOOL_MSG_* (kernel to user space) of the notifications read here.
const FEATURES_NTF: u8 = 13;
const RINGS_NTF: u8 = 17;
const CHANNELS_NTF: u8 = 19;
const COALESCE_NTF: u8 = 21;
const RSS_NTF: u8 = 50;
const RSS_CREATE_NTF: u8 = 52;
const RSS_DELETE_NTF: u8 = 53;

/// ETHTOOL_A_HEADER_DEV_INDEX / _DEV_NAME inside every message's header nest.
const A_HEADER_DEV_INDEX: u16 = 1;
const A_HEADER_DEV_NAME: u16 = 2;
/// ETHTOOL_A_RSS_CONTEXT: the context an RSS notification is about (absent: the main one).
const A_RSS_CONTEXT: u16 = 2;

/// What a notification says changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Features,
    Rings,
    Channels,
    Coalesce,
    /// The RSS table, key, function or flow hashes of a context (0: the main one).
    Rss,
    RssCreated,
    RssDeleted,
    /// Another ethtool notification (link modes, WoL, PHY, ...), by its message number.
    Other(u8),
}

impl Change {
    fn of(cmd: u8) -> Change {
        match cmd {
            FEATURES_NTF => Change::Features,
            RINGS_NTF => Change::Rings,
            CHANNELS_NTF => Change::Channels,
            COALESCE_NTF => Change::Coalesce,
            RSS_NTF => Change::Rss,
            RSS_CREATE_NTF => Change::RssCreated,
            RSS_DELETE_NTF => Change::RssDeleted,
            n => Change::Other(n),
        }
    }

    pub fn word(self) -> String {
        match self {
            Change::Features => "features".into(),
            Change::Rings => "rings".into(),
            Change::Channels => "channels".into(),
            Change::Coalesce => "coalescing".into(),
            Change::Rss => "RSS".into(),
            Change::RssCreated => "RSS context created".into(),
            Change::RssDeleted => "RSS context deleted".into(),
            Change::Other(n) => format!("ethtool message {n}"),
        }
    }
}

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub change: Change,
    pub ifindex: Option<u32>,
    pub dev: Option<String>,
    /// The RSS context, for RSS notifications that name one.
    pub context: Option<u32>,
}

/// A notification's fields from its command and attributes; None when it has no header nest
/// (every ethtool notification has one: such a message is not one of them).
pub fn parse(cmd: u8, attrs: &[u8]) -> Option<Notice> {
    let a = attr::parse(attrs).ok()?;
    let header = attr::parse(attr::find(&a, A_HEADER)?).ok()?;
    let change = Change::of(cmd);
    let context = matches!(
        change,
        Change::Rss | Change::RssCreated | Change::RssDeleted
    )
    .then(|| attr::find(&a, A_RSS_CONTEXT).and_then(attr::u32_of))
    .flatten();
    Some(Notice {
        change,
        ifindex: attr::find(&header, A_HEADER_DEV_INDEX).and_then(attr::u32_of),
        dev: attr::find(&header, A_HEADER_DEV_NAME).map(attr::str_of),
        context,
    })
}

/// A socket in the ethtool family's monitor group, for listening only.
pub struct Monitor {
    sock: NlSocket,
    /// Whether this kernel announces RSS changes (6.17+: it has ETHTOOL_MSG_RSS_SET, which
    /// came with RSS_NTF).
    pub announces_rss: bool,
}

impl Monitor {
    /// Resolves the ethtool family and joins its monitor group.
    pub fn open() -> Result<Monitor, NicError> {
        let mut ctl = NlSocket::generic().map_err(NicError::Socket)?;
        let family = crate::genl::family(&mut ctl, "ethtool")?;
        Monitor::join(&family)
    }

    /// Joins the monitor group of the ethtool family `family` (resolved on another socket).
    pub fn join(family: &Family) -> Result<Monitor, NicError> {
        let group = *family.groups.get(GROUP).ok_or(NicError::Malformed {
            request: "CTRL_CMD_GETFAMILY",
            reason: format!("the ethtool family has no {GROUP:?} multicast group"),
        })?;
        let mut sock = NlSocket::generic().map_err(NicError::Socket)?;
        sock.join(group).map_err(NicError::Socket)?;
        Ok(Monitor {
            sock,
            announces_rss: family.has(super::RSS_SET),
        })
    }

    /// The notifications that arrive within `wait`, and whether the kernel dropped some before
    /// them (then the listener must read what it cares about itself).
    pub fn wait(&mut self, wait: Duration) -> Result<(Vec<Notice>, bool), NicError> {
        let got = self.sock.notices(wait).map_err(NicError::Socket)?;
        let notices = got
            .messages
            .iter()
            .filter_map(|(cmd, attrs)| parse(*cmd, attrs))
            .collect();
        Ok((notices, got.overrun))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A notification as the kernel builds it (ethnl_default_notify: the reply's header nest
    /// with the device's index and name, then the message's own attributes).
    fn ntf(ifindex: u32, dev: &str, context: Option<u32>) -> Vec<u8> {
        let mut h = Vec::new();
        attr::put(&mut h, A_HEADER_DEV_INDEX, &ifindex.to_ne_bytes());
        attr::put_str(&mut h, A_HEADER_DEV_NAME, dev);
        let mut a = Vec::new();
        attr::put(&mut a, A_HEADER | attr::NLA_F_NESTED, &h);
        if let Some(c) = context {
            attr::put(&mut a, A_RSS_CONTEXT, &c.to_ne_bytes());
        }
        a
    }

    /// The datagram's framing: netlink header, genl header, attributes.
    fn datagram(msgs: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut d = Vec::new();
        for (cmd, attrs) in msgs {
            let len = 16 + 4 + attrs.len();
            d.extend_from_slice(&(len as u32).to_ne_bytes());
            d.extend_from_slice(&0x1cu16.to_ne_bytes());
            d.extend_from_slice(&0u16.to_ne_bytes());
            d.extend_from_slice(&0u32.to_ne_bytes());
            d.extend_from_slice(&0u32.to_ne_bytes());
            d.extend_from_slice(&[*cmd, 1, 0, 0]);
            d.extend_from_slice(attrs);
            d.resize((d.len() + 3) & !3, 0);
        }
        d
    }

    #[test]
    fn notifications_name_their_device_change_and_context() {
        let d = datagram(&[
            (RSS_NTF, ntf(2, "eth0", None)),
            (CHANNELS_NTF, ntf(2, "eth0", None)),
            (RSS_CREATE_NTF, ntf(7, "ens1f0", Some(3))),
            (46, ntf(2, "eth0", None)),
        ]);
        let got: Vec<Notice> = crate::socket::split_notices(&d)
            .iter()
            .filter_map(|(c, a)| parse(*c, a))
            .collect();
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[0],
            Notice {
                change: Change::Rss,
                ifindex: Some(2),
                dev: Some("eth0".into()),
                context: None
            }
        );
        assert_eq!(got[1].change, Change::Channels);
        assert_eq!(
            (got[2].change, got[2].context),
            (Change::RssCreated, Some(3))
        );
        assert_eq!(got[2].dev.as_deref(), Some("ens1f0"));
        assert_eq!(got[3].change, Change::Other(46));
        // A message without the header nest is no ethtool notification; a truncated datagram
        // yields what came whole before it.
        assert_eq!(parse(RSS_NTF, &[]), None);
        let mut cut = d.clone();
        cut.truncate(d.len() - 3);
        assert_eq!(crate::socket::split_notices(&cut).len(), 3);
    }
}
