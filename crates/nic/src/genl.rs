//! CTRL_CMD_GETFAMILY (the generic netlink controller, include/uapi/linux/genetlink.h): a
//! family's id and the commands this kernel implements for it. The command list is what tells
//! a kernel that lacks a message (ETHTOOL_MSG_RSS_GET before 6.2, NETDEV_CMD_NAPI_GET before
//! 6.8, NETDEV_CMD_NAPI_SET before 6.13) from a driver that lacks the operation: both would
//! otherwise answer EOPNOTSUPP.

use crate::NicError;
use crate::attr;
use crate::socket::NlSocket;
use std::collections::{BTreeMap, BTreeSet};

pub const GENL_ID_CTRL: u16 = 0x10;
pub const CTRL_CMD_GETFAMILY: u8 = 3;

/// enum CTRL_ATTR_*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum A {
    FamilyId = 1,
    FamilyName = 2,
    /// A nest of nests, one per command: CTRL_ATTR_OP_ID, CTRL_ATTR_OP_FLAGS.
    Ops = 6,
    /// A nest of nests, one per multicast group: CTRL_ATTR_MCAST_GRP_NAME, _ID.
    McastGroups = 7,
}

/// enum CTRL_ATTR_OP_*.
const OP_ID: u16 = 1;
/// enum CTRL_ATTR_MCAST_GRP_*.
const MCAST_GRP_NAME: u16 = 1;
const MCAST_GRP_ID: u16 = 2;

/// A resolved family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub id: u16,
    /// The commands (do or dump) this kernel has for the family.
    pub ops: BTreeSet<u8>,
    /// Its multicast groups by name (ethtool's `monitor`, netdev's `mgmt` and `page-pool`):
    /// the id a socket joins to hear the family's notifications.
    pub groups: BTreeMap<String, u32>,
}

impl Family {
    pub fn has(&self, cmd: u8) -> bool {
        self.ops.contains(&cmd)
    }
}

/// The request naming the family.
pub fn request(name: &str) -> Vec<u8> {
    let mut a = Vec::new();
    attr::put_str(&mut a, A::FamilyName as u16, name);
    a
}

/// The family of a CTRL_CMD_NEWFAMILY answer.
pub fn parse(buf: &[u8]) -> Result<Family, String> {
    let a = attr::parse(buf)?;
    let id = attr::find(&a, A::FamilyId as u16)
        .and_then(attr::u16_of)
        .ok_or("a family without an id")?;
    let mut ops = BTreeSet::new();
    if let Some(nest) = attr::find(&a, A::Ops as u16) {
        for (_, op) in attr::parse(nest)? {
            let fields = attr::parse(op)?;
            if let Some(cmd) = attr::find(&fields, OP_ID).and_then(attr::u32_of) {
                ops.insert(u8::try_from(cmd).map_err(|_| format!("command {cmd}"))?);
            }
        }
    }
    let mut groups = BTreeMap::new();
    if let Some(nest) = attr::find(&a, A::McastGroups as u16) {
        for (_, g) in attr::parse(nest)? {
            let fields = attr::parse(g)?;
            let name = attr::find(&fields, MCAST_GRP_NAME).map(attr::str_of);
            let gid = attr::find(&fields, MCAST_GRP_ID).and_then(attr::u32_of);
            if let (Some(name), Some(gid)) = (name, gid) {
                groups.insert(name, gid);
            }
        }
    }
    Ok(Family { id, ops, groups })
}

/// Resolves a family by name. NoFamily when the kernel has none of that name.
pub fn family(sock: &mut NlSocket, name: &'static str) -> Result<Family, NicError> {
    let replies = sock
        .request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &request(name))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => NicError::NoFamily(name),
            _ => NicError::Socket(e),
        })?;
    replies
        .iter()
        .find_map(|r| parse(r).ok())
        .ok_or(NicError::NoFamily(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer as the kernel builds it (ctrl_fill_info): id, name, then the ops nest.
    fn answer(id: u16, cmds: &[u32]) -> Vec<u8> {
        let mut b = Vec::new();
        attr::put(&mut b, A::FamilyId as u16, &id.to_ne_bytes());
        attr::put_str(&mut b, A::FamilyName as u16, "ethtool");
        let mut nest = Vec::new();
        for (i, c) in cmds.iter().enumerate() {
            let mut op = Vec::new();
            attr::put(&mut op, OP_ID, &c.to_ne_bytes());
            attr::put(&mut op, 2, &0x1au32.to_ne_bytes());
            attr::put(&mut nest, (i + 1) as u16 | attr::NLA_F_NESTED, &op);
        }
        attr::put(&mut b, A::Ops as u16 | attr::NLA_F_NESTED, &nest);
        let mut groups = Vec::new();
        let mut g = Vec::new();
        attr::put(&mut g, MCAST_GRP_ID, &7u32.to_ne_bytes());
        attr::put_str(&mut g, MCAST_GRP_NAME, "monitor");
        attr::put(&mut groups, 1 | attr::NLA_F_NESTED, &g);
        attr::put(&mut b, A::McastGroups as u16 | attr::NLA_F_NESTED, &groups);
        b
    }

    #[test]
    fn a_family_answer_names_its_commands() {
        let f = parse(&answer(21, &[17, 19, 38])).unwrap();
        assert_eq!(f.id, 21);
        assert!(f.has(38) && f.has(17) && !f.has(48));
        assert_eq!(f.groups.get("monitor"), Some(&7));
        // A family without an ops list (never seen, but possible) has no commands known.
        let mut bare = Vec::new();
        attr::put(&mut bare, A::FamilyId as u16, &9u16.to_ne_bytes());
        assert!(parse(&bare).unwrap().ops.is_empty());
        assert!(parse(&request("ethtool")).is_err());
        // A command id past u8 is malformed, not truncated.
        assert!(parse(&answer(21, &[300])).is_err());
    }
}
