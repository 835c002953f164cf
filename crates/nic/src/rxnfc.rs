//! Receive flow-steering (n-tuple) rules through the SIOCETHTOOL ioctl: ethtool netlink has no
//! RX NFC messages, so `ethtool -N` itself still uses ETHTOOL_{G,S}RXCLSRL* (struct
//! ethtool_rxnfc, include/uapi/linux/ethtool.h). The layout is encoded and decoded by hand here,
//! as pure functions with a round-trip test; the ioctl call itself is in [`crate::ioctl`].

use crate::ioctl::ethtool;
use netsteer_host::netdev::{NtupleFlow, NtupleKey, NtupleProto, NtupleRule};
use std::io;

const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
const ETHTOOL_GRXCLSRULE: u32 = 0x2f;
const ETHTOOL_GRXCLSRLALL: u32 = 0x30;
const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
const ETHTOOL_SRXCLSRLINS: u32 = 0x32;

/// Flow types (ethtool.h).
const TCP_V4_FLOW: u32 = 0x01;
const UDP_V4_FLOW: u32 = 0x02;
const TCP_V6_FLOW: u32 = 0x05;
const UDP_V6_FLOW: u32 = 0x06;
/// Flags on flow_type: extended fields, MAC extension, an RSS context action.
const FLOW_FLAGS: u32 = 0x8000_0000 | 0x4000_0000 | 0x2000_0000;
/// Set in GRXCLSRLCNT's `data` when the driver picks locations itself.
const RX_CLS_LOC_SPECIAL: u32 = 0x8000_0000;
/// "Let the driver pick the location" (ethtool.h RX_CLS_LOC_ANY).
const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;
/// The drop action.
const RX_CLS_FLOW_DISC: u64 = u64::MAX;

/// Offsets in struct ethtool_rxnfc (x86_64 and every 64-bit ABI: `data` and `ring_cookie` are
/// 8-byte aligned).
mod off {
    pub const CMD: usize = 0;
    pub const DATA: usize = 8;
    pub const FS: usize = 16;
    // Inside ethtool_rx_flow_spec, from FS.
    pub const FS_FLOW_TYPE: usize = 0;
    pub const FS_H_U: usize = 4;
    pub const FS_M_U: usize = 76;
    pub const FS_M_EXT: usize = 128;
    pub const FS_RING_COOKIE: usize = 152;
    pub const FS_LOCATION: usize = 160;
    pub const FS_SIZE: usize = 168;
    pub const RULE_CNT: usize = FS + FS_SIZE;
    pub const RULE_LOCS: usize = RULE_CNT + 4;
    /// Size of the union ethtool_flow_union and of struct ethtool_flow_ext.
    pub const UNION: usize = 52;
    pub const EXT: usize = 20;
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get64(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// (flow type, offset of the destination port in the flow union) of a protocol: tcp_ip4_spec
/// has ip4src, ip4dst, psrc before pdst; tcp_ip6_spec has two 16-byte addresses and psrc.
fn proto_layout(p: NtupleProto) -> (u32, usize) {
    match p {
        NtupleProto::Tcp4 => (TCP_V4_FLOW, 10),
        NtupleProto::Udp4 => (UDP_V4_FLOW, 10),
        NtupleProto::Tcp6 => (TCP_V6_FLOW, 34),
        NtupleProto::Udp6 => (UDP_V6_FLOW, 34),
    }
}

/// An ethtool_rxnfc buffer for `cmd`, room for `locs` rule locations.
fn rxnfc(cmd: u32, locs: usize) -> Vec<u8> {
    let mut b = vec![0u8; off::RULE_LOCS + 4 * locs];
    put32(&mut b, off::CMD, cmd);
    b
}

/// The SRXCLSRLINS request steering `key` to `queue` at `location`.
pub fn encode_insert(key: NtupleKey, queue: u64, location: u32) -> Vec<u8> {
    let mut b = rxnfc(ETHTOOL_SRXCLSRLINS, 0);
    let (flow_type, pdst) = proto_layout(key.proto);
    let fs = off::FS;
    put32(&mut b, fs + off::FS_FLOW_TYPE, flow_type);
    let port = key.port.to_be_bytes();
    b[fs + off::FS_H_U + pdst..fs + off::FS_H_U + pdst + 2].copy_from_slice(&port);
    // Mask: all ones on the fields that must match (the kernel's m_u convention).
    b[fs + off::FS_M_U + pdst..fs + off::FS_M_U + pdst + 2].copy_from_slice(&[0xff, 0xff]);
    put64(&mut b, fs + off::FS_RING_COOKIE, queue);
    put32(&mut b, fs + off::FS_LOCATION, location);
    b
}

/// The SRXCLSRLDEL request for the rule at `location`.
pub fn encode_delete(location: u32) -> Vec<u8> {
    let mut b = rxnfc(ETHTOOL_SRXCLSRLDEL, 0);
    put32(&mut b, off::FS + off::FS_LOCATION, location);
    b
}

/// Reads one rule (a GRXCLSRULE answer). Only "this protocol, this destination port, nothing
/// else" is a [`NtupleFlow::DstPort`]; anything wider or narrower is kept as `Other`.
pub fn decode_rule(b: &[u8]) -> Result<NtupleRule, String> {
    if b.len() < off::RULE_CNT {
        return Err(format!("ethtool_rxnfc of {} bytes", b.len()));
    }
    let fs = off::FS;
    let raw_type = get32(b, fs + off::FS_FLOW_TYPE);
    let flow_type = raw_type & !FLOW_FLAGS;
    let cookie = get64(b, fs + off::FS_RING_COOKIE);
    let location = get32(b, fs + off::FS_LOCATION);
    // ethtool_get_flow_spec_ring(): the queue is the low 32 bits; bits 32-39 name a VF.
    let queue =
        (cookie != RX_CLS_FLOW_DISC && (cookie >> 32) & 0xff == 0).then_some(cookie & 0xffff_ffff);
    let proto = [
        NtupleProto::Tcp4,
        NtupleProto::Udp4,
        NtupleProto::Tcp6,
        NtupleProto::Udp6,
    ]
    .into_iter()
    .find(|p| proto_layout(*p).0 == flow_type);
    let exact_port = proto.and_then(|p| {
        let pdst = proto_layout(p).1;
        let m_u = &b[fs + off::FS_M_U..fs + off::FS_M_U + off::UNION];
        let m_ext = &b[fs + off::FS_M_EXT..fs + off::FS_M_EXT + off::EXT];
        let only_port = m_u.iter().enumerate().all(|(i, v)| {
            if i == pdst || i == pdst + 1 {
                *v == 0xff
            } else {
                *v == 0
            }
        }) && m_ext.iter().all(|v| *v == 0)
            && raw_type & FLOW_FLAGS == 0;
        only_port.then(|| {
            let h = fs + off::FS_H_U + pdst;
            (p, u16::from_be_bytes([b[h], b[h + 1]]))
        })
    });
    Ok(NtupleRule {
        location,
        flow: match exact_port {
            Some((proto, port)) => NtupleFlow::DstPort { proto, port },
            None => NtupleFlow::Other { flow_type },
        },
        queue,
    })
}

/// A device's classification table as GRXCLSRLCNT and GRXCLSRLALL describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTable {
    pub rules: Vec<NtupleRule>,
    /// How many rules the table holds.
    pub size: u32,
    /// The driver chooses a new rule's location (RX_CLS_LOC_SPECIAL in GRXCLSRLCNT's data).
    pub driver_places: bool,
}

/// Every rule of `dev` (ETHTOOL_GRXCLSRLCNT, GRXCLSRLALL, then GRXCLSRULE each), with the
/// table's size. EOPNOTSUPP: the device has no n-tuple filters.
pub fn read_rules(dev: &str) -> io::Result<RuleTable> {
    let mut cnt = rxnfc(ETHTOOL_GRXCLSRLCNT, 0);
    ethtool(dev, &mut cnt)?;
    let n = get32(&cnt, off::RULE_CNT) as usize;
    let data = get64(&cnt, off::DATA) as u32;
    let mut table = RuleTable {
        rules: Vec::new(),
        size: data & !RX_CLS_LOC_SPECIAL,
        driver_places: data & RX_CLS_LOC_SPECIAL != 0,
    };
    if n == 0 {
        return Ok(table);
    }
    let mut all = rxnfc(ETHTOOL_GRXCLSRLALL, n.min(4096));
    put32(&mut all, off::RULE_CNT, n.min(4096) as u32);
    ethtool(dev, &mut all)?;
    let got = (get32(&all, off::RULE_CNT) as usize).min(n.min(4096));
    for i in 0..got {
        let loc = get32(&all, off::RULE_LOCS + 4 * i);
        let mut one = rxnfc(ETHTOOL_GRXCLSRULE, 0);
        put32(&mut one, off::FS + off::FS_LOCATION, loc);
        ethtool(dev, &mut one)?;
        table
            .rules
            .push(decode_rule(&one).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?);
    }
    Ok(table)
}

/// The location a new rule goes to, as ethtool chooses it: RX_CLS_LOC_ANY where the driver
/// places rules itself, else the first free slot of the table.
pub fn new_location(table: &RuleTable) -> io::Result<u32> {
    if table.driver_places {
        return Ok(RX_CLS_LOC_ANY);
    }
    (0..table.size.max(1))
        .find(|l| !table.rules.iter().any(|r| r.location == *l))
        .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "the rule table is full"))
}

/// Inserts the rule into `dev`, whose table was just read as `table`. Returns the location
/// (the driver's choice, written back into the request, for RX_CLS_LOC_ANY).
pub fn insert(dev: &str, table: &RuleTable, key: NtupleKey, queue: u64) -> io::Result<u32> {
    let mut b = encode_insert(key, queue, new_location(table)?);
    ethtool(dev, &mut b)?;
    Ok(get32(&b, off::FS + off::FS_LOCATION))
}

/// Deletes the rule at `location`.
pub fn delete(dev: &str, location: u32) -> io::Result<()> {
    ethtool(dev, &mut encode_delete(location))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inserted_rule_decodes_back_and_wider_rules_stay_other() {
        for proto in [
            NtupleProto::Tcp4,
            NtupleProto::Udp4,
            NtupleProto::Tcp6,
            NtupleProto::Udp6,
        ] {
            let key = NtupleKey { proto, port: 179 };
            let b = encode_insert(key, 3, 7);
            assert_eq!(b.len(), 188);
            assert_eq!(get32(&b, off::CMD), ETHTOOL_SRXCLSRLINS);
            let r = decode_rule(&b).unwrap();
            assert_eq!(
                r,
                NtupleRule {
                    location: 7,
                    flow: NtupleFlow::DstPort { proto, port: 179 },
                    queue: Some(3)
                }
            );
        }
        // A rule also matching the source address is not "dst-port only".
        let mut b = encode_insert(
            NtupleKey {
                proto: NtupleProto::Tcp4,
                port: 22,
            },
            1,
            0,
        );
        b[off::FS + off::FS_M_U] = 0xff;
        assert_eq!(
            decode_rule(&b).unwrap().flow,
            NtupleFlow::Other {
                flow_type: TCP_V4_FLOW
            }
        );
        // Drop and VF actions have no queue.
        put64(&mut b, off::FS + off::FS_RING_COOKIE, RX_CLS_FLOW_DISC);
        assert_eq!(decode_rule(&b).unwrap().queue, None);
        put64(&mut b, off::FS + off::FS_RING_COOKIE, (1 << 32) | 2);
        assert_eq!(decode_rule(&b).unwrap().queue, None);
        assert_eq!(get32(&encode_delete(9), off::FS + off::FS_LOCATION), 9);
        assert!(decode_rule(&[0; 10]).is_err());
    }

    #[test]
    fn a_new_rule_goes_where_ethtool_would_put_it() {
        let rule = |location| NtupleRule {
            location,
            flow: NtupleFlow::Other { flow_type: 13 },
            queue: Some(0),
        };
        let mut t = RuleTable {
            rules: vec![rule(0), rule(2)],
            size: 3,
            driver_places: true,
        };
        assert_eq!(new_location(&t).unwrap(), 0xffff_ffff);
        t.driver_places = false;
        assert_eq!(new_location(&t).unwrap(), 1);
        t.rules.push(rule(1));
        assert!(new_location(&t).is_err(), "full");
    }

    #[test]
    fn a_device_without_filters_answers_eopnotsupp_and_bad_names_are_refused() {
        // Loopback has no RX classification: the kernel's answer, not a crash.
        let e = read_rules("lo").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
        assert!(read_rules("a-name-that-is-far-too-long").is_err());
        assert!(read_rules("").is_err());
    }
}
