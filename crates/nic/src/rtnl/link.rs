//! RTM_GETLINK (18), answered by RTM_NEWLINK (16): the link's kind (IFLA_INFO_KIND inside
//! IFLA_LINKINFO: `veth`, `bridge`, `bond`, `vxlan`, ...).
//!
//! Why not sysfs: a veth's `iflink` names its peer's ifindex, which sysfs can only compare with
//! its own; when the peer lives in another namespace under the same number (two fresh
//! namespaces both number their first veth 2) the link looks like a plain virtual device.
//! rtnetlink says what it is.

use crate::attr;

pub const RTM_NEWLINK: u16 = 16;
pub const RTM_GETLINK: u16 = 18;

/// Link attributes (enum IFLA_* of if_link.h) used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Ifla {
    Ifname = 3,
    Linkinfo = 18,
}

/// Attributes nested in IFLA_LINKINFO (enum IFLA_INFO_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum IflaInfo {
    Kind = 1,
}

/// struct ifinfomsg: family (AF_UNSPEC), pad, type, index, flags, change: 16 bytes.
pub fn ifinfomsg(index: i32) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[4..8].copy_from_slice(&index.to_ne_bytes());
    h
}

/// The request's attributes: the device by name (index 0 in the header).
pub fn get(dev: &str) -> Vec<u8> {
    let mut a = Vec::new();
    attr::put_str(&mut a, Ifla::Ifname as u16, dev);
    a
}

/// What one RTM_NEWLINK says of the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    /// `None` for a link without one (a physical NIC, loopback).
    pub kind: Option<String>,
}

/// Reads an RTM_NEWLINK body: its ifinfomsg, then the attributes.
pub fn parse(body: &[u8]) -> Result<Link, String> {
    let hdr = body
        .get(..16)
        .ok_or_else(|| format!("RTM_NEWLINK of {} bytes: no ifinfomsg", body.len()))?;
    let index = i32::from_ne_bytes(hdr[4..8].try_into().expect("4 bytes"));
    Ok(Link {
        index: u32::try_from(index).map_err(|_| format!("ifindex {index}"))?,
        kind: parse_kind(&body[16..])?,
    })
}

/// The kind from the attributes of an RTM_NEWLINK.
pub fn parse_kind(body: &[u8]) -> Result<Option<String>, String> {
    let a = attr::parse(body)?;
    let Some(info) = attr::find(&a, Ifla::Linkinfo as u16) else {
        return Ok(None);
    };
    let nested = attr::parse(info)?;
    Ok(attr::find(&nested, IflaInfo::Kind as u16)
        .map(attr::str_of)
        .filter(|k| !k.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel sends for a veth (rtnl_fill_ifinfo(): IFLA_IFNAME, ..., IFLA_LINKINFO
    /// holding IFLA_INFO_KIND "veth" and IFLA_INFO_DATA), built with our encoder and read back.
    #[test]
    fn a_reply_round_trips_and_bad_bytes_are_errors() {
        let req = get("v0a");
        let a = attr::parse(&req).unwrap();
        assert_eq!(
            attr::str_of(attr::find(&a, Ifla::Ifname as u16).unwrap()),
            "v0a"
        );
        assert_eq!(&ifinfomsg(7)[4..8], &7i32.to_ne_bytes());

        let mut info = Vec::new();
        attr::put_str(&mut info, IflaInfo::Kind as u16, "veth");
        attr::put(&mut info, 2 | attr::NLA_F_NESTED, &[]);
        let mut body = Vec::new();
        attr::put_str(&mut body, Ifla::Ifname as u16, "v0a");
        attr::put(&mut body, 4, &1500u32.to_ne_bytes());
        attr::put(&mut body, Ifla::Linkinfo as u16 | attr::NLA_F_NESTED, &info);
        assert_eq!(parse_kind(&body).unwrap().as_deref(), Some("veth"));

        let mut plain = Vec::new();
        attr::put_str(&mut plain, Ifla::Ifname as u16, "eth0");
        assert_eq!(parse_kind(&plain).unwrap(), None);

        let mut bad = Vec::new();
        attr::put(&mut bad, Ifla::Linkinfo as u16, &[200, 0, 1, 0]);
        assert!(parse_kind(&bad).is_err());

        let mut whole = ifinfomsg(5).to_vec();
        whole.extend_from_slice(&body);
        assert_eq!(
            parse(&whole).unwrap(),
            Link {
                index: 5,
                kind: Some("veth".into())
            }
        );
        assert!(parse(&whole[..10]).is_err());
    }
}
